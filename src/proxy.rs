//! The Iceberg REST listener's request handler: classify, then serve loadTable from the cache,
//! pass mutations through and invalidate what they touch, and stream everything else.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use tokio::time::Instant;

use crate::body::{full, stream, stream_with_idle_timeout, Body};
use crate::cache::{
    CacheKey, CacheOutcome, Caller, FillRequest, Lookup, TableCache, TableId, ACCESS_DELEGATION,
    X_CACHE,
};
use crate::catalog_config::{self, Separator};
use crate::config::Config;
use crate::error::ProxyError;
use crate::headers::{prepare_forwarded, remove_hop_by_hop};
use crate::identity::{IdentityHasher, Scope};
use crate::live::Live;
use crate::metrics::Metrics;
use crate::policy::{Credentials, Identity, Policy};
use crate::route::{classify, Operation, Route};
use crate::upstream::{Upstream, UpstreamError};

/// Largest request body icecache reads to learn which tables a write names (rename,
/// `transactions/commit`, create, register). Other bodies stream without a bound.
const MAX_INSPECTED_BODY: usize = 64 << 20;

pub struct AppState {
    pub live: Arc<Live>,
    pub upstream: Arc<Upstream>,
    pub metrics: Arc<Metrics>,
    pub cache: Option<Arc<TableCache>>,
    pub identity: IdentityHasher,
    pub separator: Separator,
}

impl AppState {
    /// The configuration in force (replaced on SIGHUP).
    pub fn config(&self) -> Arc<Config> {
        self.live.get()
    }

    /// The scheme clients reach the proxy listener with.
    pub fn scheme(&self) -> &'static str {
        if self.config().tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// Handles one client request; every failure becomes an Iceberg error response.
pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<Body>, std::convert::Infallible> {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let (operation, result) = match classify(&method, &path, &state.separator.get()) {
        Err(e) => (Operation::Other, Err(ProxyError::from(e))),
        Ok(route) => (
            route.operation,
            dispatch(&state, route, request, peer).await,
        ),
    };
    let (response, outcome) = match result {
        Ok(answer) => answer,
        Err(e) => (e.into_response(), None),
    };
    let status = response.status();
    let outcome_label = outcome.map_or("NONE", CacheOutcome::as_str);
    state
        .metrics
        .requests
        .with_label_values(&[operation.as_str(), status.as_str(), outcome_label])
        .inc();
    let elapsed = started.elapsed();
    state
        .metrics
        .request_duration
        .with_label_values(&[operation.as_str()])
        .observe(elapsed.as_secs_f64());
    tracing::info!(
        method = %method,
        path = %path,
        route = operation.as_str(),
        status = status.as_u16(),
        cache = outcome_label,
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        "request"
    );
    Ok(response)
}

type Answer = (Response<Body>, Option<CacheOutcome>);

async fn dispatch(
    state: &AppState,
    route: Route,
    mut request: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Answer, ProxyError> {
    let operation = route.operation;
    let policy = state
        .config()
        .policies
        .for_prefix(route.prefix.as_deref())
        .clone();
    if !policy.credentials.forwards_delegation() {
        // Under strip and inject the catalog is not asked to vend credentials at all.
        request.headers_mut().remove(&ACCESS_DELEGATION);
    }
    if operation == Operation::Config {
        return config(state, request, peer).await;
    }
    if operation == Operation::LoadTable {
        if let Some(cache) = &state.cache {
            return load_table(state, cache, &policy, route, request, peer).await;
        }
    }
    if operation.is_mutation() {
        if let Some(cache) = &state.cache {
            return mutate(state, cache, route, request, peer).await;
        }
    }
    let (parts, body) = request.into_parts();
    let response = forward(state, operation, parts, stream(body), peer).await?;
    Ok((response, None))
}

async fn load_table(
    state: &AppState,
    cache: &Arc<TableCache>,
    policy: &Arc<Policy>,
    route: Route,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Answer, ProxyError> {
    let (parts, body) = request.into_parts();
    let caller_scope = state.identity.scope(&parts.headers);
    let entry_scope = match policy.identity {
        Identity::PerPrincipal => caller_scope,
        Identity::Revalidate | Identity::Shared => Scope::SHARED,
    };
    let key = CacheKey::for_load_table(
        &route,
        parts.uri.query(),
        &parts.headers,
        &state.separator.get(),
        entry_scope,
    );
    if let Some(key) = key {
        let if_none_match: Vec<HeaderValue> = parts
            .headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .cloned()
            .collect();
        let caller = Caller {
            scope: caller_scope,
            policy,
            if_none_match: &if_none_match,
            accepts_gzip: accepts_gzip(&parts.headers),
        };
        let fill = || fill_request(state, &parts, peer);
        if let Lookup::Answer(response, outcome) = cache.load(key, &caller, fill).await {
            return Ok((response, Some(outcome)));
        }
    }
    if policy.credentials != Credentials::Passthrough {
        // Never a raw stream under strip or inject: it could carry vended credentials.
        let caller = Caller {
            scope: caller_scope,
            policy,
            if_none_match: &[],
            accepts_gzip: false,
        };
        let representation = if parts
            .uri
            .query()
            .is_some_and(|q| q.contains("snapshots=refs"))
        {
            "refs"
        } else {
            "all"
        };
        let request = fill_request(state, &parts, peer);
        let response = cache.uncached(representation, &caller, request).await;
        return Ok((response, Some(CacheOutcome::Bypass)));
    }
    let mut response = forward(state, Operation::LoadTable, parts, stream(body), peer).await?;
    response.headers_mut().insert(
        X_CACHE.clone(),
        HeaderValue::from_static(CacheOutcome::Bypass.as_str()),
    );
    Ok((response, Some(CacheOutcome::Bypass)))
}

/// Largest `/v1/config` answer icecache reads to rewrite; a larger one is a broken catalog (502).
const MAX_CONFIG_BODY: usize = 1 << 20;

async fn config(
    state: &AppState,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Answer, ProxyError> {
    let public_url = public_url(state, &request);
    let (mut parts, body) = request.into_parts();
    // The answer is read and maybe rewritten: ask for it uncompressed.
    parts.headers.remove(header::ACCEPT_ENCODING);
    let response = forward(state, Operation::Config, parts, stream(body), peer).await?;
    if response.status() != http::StatusCode::OK {
        return Ok((response, None));
    }
    let (mut parts, body) = response.into_parts();
    let body = read_bounded(body, MAX_CONFIG_BODY)
        .await
        .map_err(|message| {
            ProxyError::Upstream(UpstreamError::Protocol {
                upstream: state.config().upstream.to_string(),
                message: format!("config response could not be read: {message}"),
            })
        })?;
    let Some(answer) = catalog_config::read(&body, &public_url) else {
        return Ok((Response::from_parts(parts, full(body)), None));
    };
    if let Some(separator) = &answer.separator {
        state.separator.learn(separator);
    }
    let body = answer.rewritten.unwrap_or(body);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Ok((Response::from_parts(parts, full(body)), None))
}

async fn read_bounded(mut body: Body, limit: usize) -> Result<Bytes, String> {
    let mut buffer = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                return Err(format!("longer than {limit} bytes"));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// The URL clients reach icecache at: `public_url` when configured, else what the request says
/// (`X-Forwarded-Proto`/`X-Forwarded-Host` from a proxy in front, then `Host`).
fn public_url(state: &AppState, request: &Request<Incoming>) -> String {
    if let Some(url) = &state.config().public_url {
        return url.clone();
    }
    let headers = request.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let proto = text("x-forwarded-proto").unwrap_or(state.scheme());
    let host = text("x-forwarded-host")
        .or_else(|| text("host"))
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_else(|| state.config().listen.to_string());
    format!("{proto}://{host}")
}

/// Whether `Accept-Encoding` takes gzip: listed (or `*`) without `q=0`.
fn accepts_gzip(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

fn fill_request(
    state: &AppState,
    parts: &http::request::Parts,
    peer: SocketAddr,
) -> Result<FillRequest, UpstreamError> {
    let mut headers = parts.headers.clone();
    with_host(&mut headers, &parts.uri);
    prepare_forwarded(&mut headers, peer, state.scheme());
    let uri = state.upstream.uri_for(path_and_query(&parts.uri))?;
    Ok(FillRequest::new(uri, headers))
}

/// The tables (or namespace) a write may change.
enum Touched {
    Tables(Vec<TableId>),
    Namespace(Vec<String>),
    /// The write names tables icecache could not read from its body: everything may change.
    Unknown,
    Nothing,
}

async fn mutate(
    state: &AppState,
    cache: &TableCache,
    route: Route,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Answer, ProxyError> {
    let operation = route.operation;
    let (parts, body) = request.into_parts();
    let (body, touched) = if names_tables_in_body(operation) {
        let bytes = Limited::new(body, MAX_INSPECTED_BODY)
            .collect()
            .await
            .map_err(|e| ProxyError::RequestBody(e.to_string()))?
            .to_bytes();
        let touched = touched_from_body(&route, &bytes);
        (full(bytes), touched)
    } else {
        (stream(body), touched_from_path(&route))
    };
    let result = forward(state, operation, parts, body, peer).await;
    // Whatever the catalog answered, or failed to answer, the write may have happened
    // (a 5xx or a timeout leaves the commit state unknown): invalidate before replying.
    match &touched {
        Touched::Tables(tables) => {
            for table in tables {
                cache.invalidate_table(table, operation);
            }
        }
        Touched::Namespace(namespace) => {
            cache.invalidate_namespace(route.prefix.as_deref(), namespace, operation)
        }
        Touched::Unknown => cache.invalidate_all(operation),
        Touched::Nothing => {}
    }
    Ok((result?, None))
}

fn names_tables_in_body(operation: Operation) -> bool {
    matches!(
        operation,
        Operation::CreateTable
            | Operation::RegisterTable
            | Operation::RenameTable
            | Operation::CommitTransaction
    )
}

fn touched_from_path(route: &Route) -> Touched {
    match route.operation {
        Operation::UpdateTable | Operation::DropTable | Operation::UnregisterTable => {
            match (&route.namespace, &route.name) {
                (Some(namespace), Some(name)) => Touched::Tables(vec![TableId {
                    prefix: route.prefix.clone(),
                    namespace: namespace.clone(),
                    table: name.clone(),
                }]),
                _ => Touched::Unknown,
            }
        }
        Operation::DropNamespace => match &route.namespace {
            Some(namespace) => Touched::Namespace(namespace.clone()),
            None => Touched::Unknown,
        },
        _ => Touched::Nothing,
    }
}

#[derive(Deserialize)]
struct Identifier {
    namespace: Vec<String>,
    name: String,
}

#[derive(Deserialize)]
struct NamedBody {
    name: String,
}

#[derive(Deserialize)]
struct RenameBody {
    source: Identifier,
    destination: Identifier,
}

#[derive(Deserialize)]
struct TableChange {
    identifier: Identifier,
}

#[derive(Deserialize)]
struct TransactionBody {
    #[serde(rename = "table-changes")]
    table_changes: Vec<TableChange>,
}

fn touched_from_body(route: &Route, body: &Bytes) -> Touched {
    let table = |identifier: Identifier| TableId {
        prefix: route.prefix.clone(),
        namespace: identifier.namespace,
        table: identifier.name,
    };
    let parsed =
        match route.operation {
            Operation::CreateTable | Operation::RegisterTable => {
                serde_json::from_slice::<NamedBody>(body)
                    .ok()
                    .zip(route.namespace.clone())
                    .map(|(b, namespace)| {
                        vec![table(Identifier {
                            namespace,
                            name: b.name,
                        })]
                    })
            }
            Operation::RenameTable => serde_json::from_slice::<RenameBody>(body)
                .ok()
                .map(|b| vec![table(b.source), table(b.destination)]),
            Operation::CommitTransaction => serde_json::from_slice::<TransactionBody>(body)
                .ok()
                .map(|b| {
                    b.table_changes
                        .into_iter()
                        .map(|c| table(c.identifier))
                        .collect()
                }),
            _ => None,
        };
    parsed.map_or(Touched::Unknown, Touched::Tables)
}

fn path_and_query(uri: &http::Uri) -> &str {
    uri.path_and_query().map_or("/", |pq| pq.as_str())
}

/// HTTP/2 requests carry the host in `:authority`; the catalog learns it the same way as for
/// HTTP/1.1 requests, through `X-Forwarded-Host`.
fn with_host(headers: &mut http::HeaderMap, uri: &http::Uri) {
    if !headers.contains_key(header::HOST) {
        if let Some(value) = uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            headers.insert(header::HOST, value);
        }
    }
}

/// Streams a request to the catalog and its response back, both bodies unbuffered.
async fn forward(
    state: &AppState,
    operation: Operation,
    mut parts: http::request::Parts,
    body: Body,
    peer: SocketAddr,
) -> Result<Response<Body>, ProxyError> {
    with_host(&mut parts.headers, &parts.uri);
    prepare_forwarded(&mut parts.headers, peer, state.scheme());
    parts.uri = state.upstream.uri_for(path_and_query(&parts.uri))?;
    parts.version = http::Version::HTTP_11;
    let response = state
        .upstream
        .send(operation, Request::from_parts(parts, body))
        .await?;
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    let idle = state.config().request_timeout;
    Ok(Response::from_parts(
        parts,
        stream_with_idle_timeout(body, idle),
    ))
}

#[cfg(test)]
mod tests {
    use super::accepts_gzip;
    use http::{HeaderMap, HeaderValue};

    fn with(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("accept-encoding", HeaderValue::from_static(value));
        h
    }

    #[test]
    fn gzip_is_accepted_when_listed_without_q_zero() {
        assert!(accepts_gzip(&with("gzip, deflate")));
        assert!(accepts_gzip(&with("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&with("*")));
        assert!(!accepts_gzip(&with("gzip;q=0")));
        assert!(!accepts_gzip(&with("deflate, br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
