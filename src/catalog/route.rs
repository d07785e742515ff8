//! Names the Iceberg REST operation a request is for, and decodes the identifiers in its path.
//!
//! Only what icecache treats specially needs a name; everything else is `Other` and passes
//! through untouched. `{prefix}` is optional in every route (clients of a catalog without a
//! prefix build `/v1/namespaces/...`).

use http::Method;
use thiserror::Error;

use super::names::{Name, Namespace};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RouteError {
    #[error("malformed percent-encoding in path segment {segment:?}")]
    BadPercentEncoding { segment: String },
    #[error("path segment {segment:?} does not decode to UTF-8")]
    InvalidUtf8 { segment: String },
    #[error("empty namespace or name in path")]
    EmptyIdentifier,
}

macro_rules! operations {
    ($($variant:ident => $label:literal),+ $(,)?) => {
        /// An Iceberg REST operation, named as its `operationId` in the spec (snake case).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operation { $($variant),+ }

        impl Operation {
            /// The metrics label and log name; bounded by construction.
            pub fn as_str(self) -> &'static str {
                match self { $(Operation::$variant => $label),+ }
            }

            pub const ALL: &'static [Operation] = &[$(Operation::$variant),+];
        }
    };
}

operations! {
    Config => "config",
    OAuthTokens => "oauth_tokens",
    ListNamespaces => "list_namespaces",
    CreateNamespace => "create_namespace",
    LoadNamespace => "load_namespace",
    NamespaceExists => "namespace_exists",
    DropNamespace => "drop_namespace",
    UpdateNamespaceProperties => "update_namespace_properties",
    ListTables => "list_tables",
    CreateTable => "create_table",
    RegisterTable => "register_table",
    LoadTable => "load_table",
    UpdateTable => "update_table",
    DropTable => "drop_table",
    TableExists => "table_exists",
    UnregisterTable => "unregister_table",
    LoadCredentials => "load_credentials",
    SignRequest => "sign_request",
    ReportMetrics => "report_metrics",
    PlanTableScan => "plan_table_scan",
    FetchPlanningResult => "fetch_planning_result",
    CancelPlanning => "cancel_planning",
    FetchScanTasks => "fetch_scan_tasks",
    RenameTable => "rename_table",
    CommitTransaction => "commit_transaction",
    ListViews => "list_views",
    CreateView => "create_view",
    LoadView => "load_view",
    ReplaceView => "replace_view",
    DropView => "drop_view",
    ViewExists => "view_exists",
    RenameView => "rename_view",
    RegisterView => "register_view",
    ListFunctions => "list_functions",
    LoadFunction => "load_function",
    Other => "other",
}

impl Operation {
    /// Operations after which cached tables may no longer be current.
    pub fn is_mutation(self) -> bool {
        use Operation::*;
        matches!(
            self,
            CreateNamespace
                | DropNamespace
                | UpdateNamespaceProperties
                | CreateTable
                | RegisterTable
                | UpdateTable
                | DropTable
                | UnregisterTable
                | RenameTable
                | CommitTransaction
                | CreateView
                | ReplaceView
                | DropView
                | RenameView
                | RegisterView
        )
    }

    /// Operations the cache answers (or may answer): their answers carry `x-cache`.
    pub fn is_cached(self) -> bool {
        use Operation::*;
        matches!(self, LoadTable | LoadView | TableExists | ViewExists)
    }
}

/// A classified request: the operation and the decoded identifiers its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub operation: Operation,
    pub prefix: Option<Name>,
    pub namespace: Option<Namespace>,
    /// The table, view or function named by the path, when it names one.
    pub name: Option<Name>,
}

impl Route {
    /// The route's names, moved out: what stays says only which operation it is. The cache
    /// key takes them without copying (a hit reads them nowhere else).
    pub fn take_names(&mut self) -> Route {
        Route {
            operation: self.operation,
            prefix: self.prefix.take(),
            namespace: self.namespace.take(),
            name: self.name.take(),
        }
    }

    fn other() -> Self {
        Route {
            operation: Operation::Other,
            prefix: None,
            namespace: None,
            name: None,
        }
    }
}

/// The operation a path names, even when its identifiers do not decode or are empty (for
/// labelling the error a client gets): every `%` is taken literally, and an empty segment
/// stands for a name.
pub fn operation_of(method: &Method, path: &str) -> Operation {
    let mut shaped = String::with_capacity(path.len() + 8);
    for (n, segment) in path.split('/').enumerate() {
        if n > 0 {
            shaped.push('/');
        }
        match segment {
            "" if n > 0 => shaped.push('_'),
            _ => shaped.push_str(&segment.replace('%', "%25")),
        }
    }
    classify(method, &shaped, "%1F").map_or(Operation::Other, |r| r.operation)
}

/// Classifies `path` (still percent-encoded, without the query) for `method`.
///
/// `separator` is the namespace separator the catalog advertises, in its URL-encoded form;
/// `%1F` is always accepted as well, as the spec requires of servers.
pub fn classify(method: &Method, path: &str, separator: &str) -> Result<Route, RouteError> {
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Ok(Route::other());
    };
    let Some(scanned) = Scanned::of(rest) else {
        return Ok(Route::other());
    };
    // Servlet and JAX-RS catalogs drop `;parameters` from a segment before they match it;
    // others keep them: a path with one names nothing for sure.
    if scanned.semicolon {
        return Ok(Route::other());
    }
    let route = classify_segments(method, &scanned, separator)?;
    // A name a catalog may not read as that name: a dot segment (`.`, `..`, `%2E%2E`), which
    // it may resolve away, or a decoded `/`, on which it may route (only an escape, `%2F`,
    // puts one there).
    let escaped = scanned.escaped;
    let unsure = |name: &str| name == "." || name == ".." || (escaped && name.contains('/'));
    let unsure_names = route.prefix.as_deref().is_some_and(unsure)
        || route.name.as_deref().is_some_and(unsure)
        || route.namespace.iter().flatten().any(|part| unsure(part));
    Ok(if unsure_names { Route::other() } else { route })
}

/// The most segments a catalog path has after `/v1/`: a prefix, then
/// `namespaces/{ns}/tables/{t}/plan/{id}`. A longer path names no operation.
const MAX_SEGMENTS: usize = 7;

/// A path after `/v1/`, read in one pass: its segments, and whether it holds a `;` or a `%`
/// anywhere (a path without a `%` has nothing to decode). Paths are short, and `/`, `;` and
/// `%` are always whole characters; one loop costs less than a search for each (`str::split`
/// alone cost 360 instructions more per load).
struct Scanned<'a> {
    held: [&'a str; MAX_SEGMENTS],
    count: usize,
    semicolon: bool,
    escaped: bool,
}

impl<'a> Scanned<'a> {
    /// None for a path of more segments than any operation's.
    fn of(rest: &'a str) -> Option<Scanned<'a>> {
        let mut scanned = Scanned {
            held: [""; MAX_SEGMENTS],
            count: 0,
            semicolon: false,
            escaped: false,
        };
        let mut start = 0;
        for (i, &byte) in rest.as_bytes().iter().enumerate() {
            match byte {
                b'/' => {
                    scanned.push(&rest[start..i])?;
                    start = i + 1;
                }
                b';' => scanned.semicolon = true,
                b'%' => scanned.escaped = true,
                _ => {}
            }
        }
        scanned.push(&rest[start..])?;
        Some(scanned)
    }

    fn push(&mut self, segment: &'a str) -> Option<()> {
        *self.held.get_mut(self.count)? = segment;
        self.count += 1;
        Some(())
    }

    fn segments(&self) -> &[&'a str] {
        &self.held[..self.count]
    }
}

fn classify_segments(
    method: &Method,
    scanned: &Scanned<'_>,
    separator: &str,
) -> Result<Route, RouteError> {
    let segments = scanned.segments();
    let decoding = Decoding {
        separator,
        escaped: scanned.escaped,
    };
    match segments {
        ["config"] if method == Method::GET => return Ok(named(Operation::Config)),
        ["oauth", "tokens"] if method == Method::POST => return Ok(named(Operation::OAuthTokens)),
        _ => {}
    }
    if let Some(route) = classify_catalog_path(method, None, segments, &decoding)? {
        return Ok(route);
    }
    if let [prefix, rest @ ..] = segments {
        if !prefix.is_empty() {
            if let Some(route) = classify_catalog_path(method, Some(prefix), rest, &decoding)? {
                return Ok(route);
            }
        }
    }
    Ok(Route::other())
}

/// A route that names no table, view or namespace.
pub fn named(operation: Operation) -> Route {
    Route {
        operation,
        ..Route::other()
    }
}

/// How a path's identifiers are decoded: split on the separator, and percent-decoded only when
/// the path holds a `%`.
struct Decoding<'a> {
    separator: &'a str,
    escaped: bool,
}

impl Decoding<'_> {
    fn prefix(&self, raw: &str) -> Result<Name, RouteError> {
        match self.escaped {
            true => decode_name(raw),
            false => Ok(Name::new(raw)),
        }
    }

    fn namespace(&self, raw: &str) -> Result<Namespace, RouteError> {
        decode_namespace(raw, self.separator)
    }

    fn identifier(&self, raw: &str) -> Result<Name, RouteError> {
        match self.escaped {
            true => decode_identifier(raw),
            false if raw.is_empty() => Err(RouteError::EmptyIdentifier),
            false => Ok(Name::new(raw)),
        }
    }
}

fn classify_catalog_path(
    method: &Method,
    prefix: Option<&str>,
    segments: &[&str],
    decoding: &Decoding<'_>,
) -> Result<Option<Route>, RouteError> {
    use Operation::*;
    let m = method;
    let (operation, namespace, name) = match segments {
        ["namespaces"] if m == Method::GET => (ListNamespaces, None, None),
        ["namespaces"] if m == Method::POST => (CreateNamespace, None, None),
        ["tables", "rename"] if m == Method::POST => (RenameTable, None, None),
        ["views", "rename"] if m == Method::POST => (RenameView, None, None),
        ["transactions", "commit"] if m == Method::POST => (CommitTransaction, None, None),
        ["namespaces", ns] => match *m {
            Method::GET => (LoadNamespace, Some(*ns), None),
            Method::HEAD => (NamespaceExists, Some(*ns), None),
            Method::DELETE => (DropNamespace, Some(*ns), None),
            _ => return Ok(None),
        },
        ["namespaces", ns, "properties"] if m == Method::POST => {
            (UpdateNamespaceProperties, Some(*ns), None)
        }
        ["namespaces", ns, "tables"] if m == Method::GET => (ListTables, Some(*ns), None),
        ["namespaces", ns, "tables"] if m == Method::POST => (CreateTable, Some(*ns), None),
        ["namespaces", ns, "register"] if m == Method::POST => (RegisterTable, Some(*ns), None),
        ["namespaces", ns, "register-view"] if m == Method::POST => (RegisterView, Some(*ns), None),
        ["namespaces", ns, "views"] if m == Method::GET => (ListViews, Some(*ns), None),
        ["namespaces", ns, "views"] if m == Method::POST => (CreateView, Some(*ns), None),
        ["namespaces", ns, "functions"] if m == Method::GET => (ListFunctions, Some(*ns), None),
        ["namespaces", ns, "functions", f] if m == Method::GET => {
            (LoadFunction, Some(*ns), Some(*f))
        }
        ["namespaces", ns, "tables", t] => match *m {
            Method::GET => (LoadTable, Some(*ns), Some(*t)),
            Method::POST => (UpdateTable, Some(*ns), Some(*t)),
            Method::DELETE => (DropTable, Some(*ns), Some(*t)),
            Method::HEAD => (TableExists, Some(*ns), Some(*t)),
            _ => return Ok(None),
        },
        ["namespaces", ns, "tables", t, action] => {
            let operation = match (*action, m) {
                ("unregister", &Method::POST) => UnregisterTable,
                ("credentials", &Method::GET) => LoadCredentials,
                ("sign", &Method::POST) => SignRequest,
                ("metrics", &Method::POST) => ReportMetrics,
                ("plan", &Method::POST) => PlanTableScan,
                ("tasks", &Method::POST) => FetchScanTasks,
                _ => return Ok(None),
            };
            (operation, Some(*ns), Some(*t))
        }
        ["namespaces", ns, "tables", t, "plan", _plan_id] => match *m {
            Method::GET => (FetchPlanningResult, Some(*ns), Some(*t)),
            Method::DELETE => (CancelPlanning, Some(*ns), Some(*t)),
            _ => return Ok(None),
        },
        ["namespaces", ns, "views", v] => match *m {
            Method::GET => (LoadView, Some(*ns), Some(*v)),
            Method::POST => (ReplaceView, Some(*ns), Some(*v)),
            Method::DELETE => (DropView, Some(*ns), Some(*v)),
            Method::HEAD => (ViewExists, Some(*ns), Some(*v)),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    Ok(Some(Route {
        operation,
        prefix: prefix.map(|raw| decoding.prefix(raw)).transpose()?,
        namespace: namespace.map(|raw| decoding.namespace(raw)).transpose()?,
        name: name.map(|raw| decoding.identifier(raw)).transpose()?,
    }))
}

/// Splits a namespace path parameter into its decoded parts: on `%1F` and on the advertised
/// separator, then percent-decodes each part.
pub fn decode_namespace(raw: &str, separator: &str) -> Result<Namespace, RouteError> {
    // Without a `%`, neither `%1F` nor an escaped separator occurs, nor anything to decode.
    if separator.contains('%') && !raw.as_bytes().contains(&b'%') {
        if raw.is_empty() {
            return Err(RouteError::EmptyIdentifier);
        }
        let mut parts = Namespace::new();
        parts.push(Name::new(raw));
        return Ok(parts);
    }
    split_and_decode_namespace(raw, separator)
}

/// `decode_namespace`, every step taken.
fn split_and_decode_namespace(raw: &str, separator: &str) -> Result<Namespace, RouteError> {
    let mut parts = Namespace::new();
    for unit_part in split_ignore_ascii_case(raw, "%1F") {
        for part in split_ignore_ascii_case(unit_part, separator) {
            parts.push(decode_identifier(part)?);
        }
    }
    Ok(parts)
}

fn decode_identifier(raw: &str) -> Result<Name, RouteError> {
    let decoded = decode_name(raw)?;
    if decoded.is_empty() {
        return Err(RouteError::EmptyIdentifier);
    }
    Ok(decoded)
}

/// `decode_component` into a `Name` (no allocation for a short name without escapes).
pub fn decode_name(raw: &str) -> Result<Name, RouteError> {
    if !raw.as_bytes().contains(&b'%') {
        return Ok(Name::new(raw));
    }
    decode_component(raw).map(Name::from)
}

/// The parts of `haystack` between occurrences of `needle` (ASCII, matched in any case).
fn split_ignore_ascii_case<'a>(
    haystack: &'a str,
    needle: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    let mut rest = Some(haystack);
    std::iter::from_fn(move || {
        let current = rest?;
        let (bytes, n) = (current.as_bytes(), needle.as_bytes());
        let found = (!n.is_empty())
            .then(|| {
                bytes
                    .windows(n.len())
                    .position(|w| w.eq_ignore_ascii_case(n))
            })
            .flatten();
        match found {
            Some(at) => {
                rest = Some(&current[at + n.len()..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// Strict percent-decoding of one path segment: `%` must be followed by two hex digits. A `+`
/// stays a `+`: Iceberg's Java code reads it as a space (its client form-encodes names), Go,
/// axum and JAX-RS read it as a plus, so `a+b` and `a%20b` may be two tables and never share an
/// entry; their loose names agree, so a write to either invalidates both.
pub fn decode_component(raw: &str) -> Result<String, RouteError> {
    if !raw.as_bytes().contains(&b'%') {
        return Ok(raw.to_owned());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| {
                    let hi = (h[0] as char).to_digit(16)?;
                    let lo = (h[1] as char).to_digit(16)?;
                    u8::try_from(hi * 16 + lo).ok()
                });
                let Some(byte) = hex else {
                    return Err(RouteError::BadPercentEncoding {
                        segment: raw.to_owned(),
                    });
                };
                out.push(byte);
                i += 3;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| RouteError::InvalidUtf8 {
        segment: raw.to_owned(),
    })
}

impl crate::telemetry::Label for Operation {
    fn as_str(self) -> &'static str {
        Operation::as_str(self)
    }
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
