//! The cache key: one entry per representation a client can get of a table, derived from the
//! request as it is sent to the catalog (after hop-by-hop headers and the policy's delegation
//! rule), so the key and the catalog never disagree about what was asked.

use crate::wire::headers::HeaderLookup;

use super::phase::NoCacheReason;
use crate::catalog::names::{Namespace, TableId};
use crate::catalog::route::{decode_component, decode_namespace, Operation, Route};
use crate::origin::ACCESS_DELEGATION;
use crate::policy::identity::Scope;

/// Which representation of which kind of object an entry holds: a table with all its
/// snapshots or only the referenced ones, or a view (which has no `snapshots` mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    AllSnapshots,
    RefSnapshots,
    View,
}

impl Form {
    pub fn as_str(self) -> &'static str {
        match self {
            Form::AllSnapshots => "all",
            Form::RefSnapshots => "refs",
            Form::View => "view",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Held inline: a hit builds its key without allocating (names of up to 23 bytes are
    /// inline too).
    pub table: TableId,
    pub form: Form,
    /// Sorted, deduplicated, lower-cased modes; None when the header is absent.
    pub delegation: Option<String>,
    /// The view chain, each view as its decoded namespace parts and name.
    pub referenced_by: Option<Vec<Namespace>>,
    pub scope: Scope,
}

impl CacheKey {
    /// The key of a loadTable or loadView request (or of the existence check of either), or
    /// why it has none: a parameter icecache does not know (a catalog extension may change the
    /// body) or one it cannot read unambiguously (the catalog might read it another way).
    /// Either way the request bypasses the cache. Views take no parameters at all.
    pub fn for_load(
        route: Route,
        path: &str,
        query: Option<&str>,
        sent: &impl HeaderLookup,
        separator: &str,
        scope: Scope,
    ) -> Result<CacheKey, NoCacheReason> {
        let Route {
            operation,
            prefix,
            namespace,
            name,
        } = route;
        let (Some(namespace), Some(table)) = (namespace, name) else {
            return Err(NoCacheReason::UnknownParameter);
        };
        // Iceberg's Java catalogs read a literal `+` as a space and `%2B` as a plus; Go, axum
        // and JAX-RS read both as a plus. Decoded, both are one name, so only the literal
        // spelling is kept: a path with `%2B` is asked alone.
        if escapes_a_plus(path) {
            return Err(NoCacheReason::AmbiguousName);
        }
        let query = query.unwrap_or("");
        // `;` separates parameters for some servers and not for others.
        if query.as_bytes().contains(&b';') {
            return Err(NoCacheReason::AmbiguousQuery);
        }
        let view = matches!(operation, Operation::LoadView | Operation::ViewExists);
        let mut snapshots = None;
        let mut referenced_by = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode_component(name).map_err(|_| NoCacheReason::AmbiguousQuery)?;
            match name.as_str() {
                "snapshots" if !view => {
                    let mode = match decode_component(value).as_deref() {
                        Ok("all") => Form::AllSnapshots,
                        Ok("refs") => Form::RefSnapshots,
                        _ => return Err(NoCacheReason::UnknownParameter),
                    };
                    if snapshots.replace(mode).is_some() {
                        return Err(NoCacheReason::AmbiguousQuery);
                    }
                }
                "referenced-by" if !view => {
                    let chain = canonical_view_chain(value, separator)
                        .ok_or(NoCacheReason::AmbiguousQuery)?;
                    if referenced_by.replace(chain).is_some() {
                        return Err(NoCacheReason::AmbiguousQuery);
                    }
                }
                _ => return Err(NoCacheReason::UnknownParameter),
            }
        }
        Ok(CacheKey {
            table: TableId {
                prefix,
                namespace,
                table,
            },
            form: if view {
                Form::View
            } else {
                snapshots.unwrap_or(Form::AllSnapshots)
            },
            delegation: normalised_delegation(sent),
            referenced_by,
            scope,
        })
    }

    /// The key as bytes, with the policy it is filled under: what names its entry across the
    /// replicas of a tier (which agree on scopes and policy generations).
    pub fn identity(&self, policy_generation: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        let mut field = |bytes: &[u8]| {
            out.extend_from_slice(&u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        field(self.table.prefix.as_deref().unwrap_or("\0").as_bytes());
        for part in &self.table.namespace {
            field(part.as_bytes());
        }
        field(b"\xff");
        field(self.table.table.as_bytes());
        field(self.form.as_str().as_bytes());
        field(self.delegation.as_deref().unwrap_or("\0").as_bytes());
        for view in self.referenced_by.iter().flatten() {
            for part in view {
                field(part.as_bytes());
            }
            field(b"\xfe");
        }
        field(self.scope.as_bytes());
        field(&policy_generation.to_le_bytes());
        out
    }

    /// Bytes this key holds (for the memory bound: it is kept in the store and its index).
    pub fn weight(&self) -> usize {
        let table = &self.table;
        let names = table.namespace.iter().map(|p| p.len()).sum::<usize>()
            + table.table.len()
            + table.prefix.as_ref().map_or(0, |p| p.len());
        let chain = self
            .referenced_by
            .iter()
            .flatten()
            .flatten()
            .map(|p| p.len() + 24)
            .sum::<usize>();
        std::mem::size_of::<Self>()
            + names
            + 24 * (table.namespace.len() + 2)
            + self.delegation.as_ref().map_or(0, String::len)
            + chain
    }
}

/// Whether `path` spells a `+` as `%2B` (in any case).
fn escapes_a_plus(path: &str) -> bool {
    let bytes = path.as_bytes();
    // Most paths have no escape at all: one fast scan for `%` (every load runs this).
    bytes.contains(&b'%')
        && bytes
            .windows(3)
            .any(|w| w[0] == b'%' && w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'b'))
}

fn canonical_view_chain(raw: &str, separator: &str) -> Option<Vec<Namespace>> {
    // Commas separate views; a comma inside a name arrives as %2C and survives the split.
    raw.split(',')
        .map(|view| decode_namespace(view, separator).ok())
        .collect()
}

/// `X-Iceberg-Access-Delegation` as a canonical set: order, case, spaces and repeats do not
/// change what the catalog may vend.
pub fn normalised_delegation(headers: &impl HeaderLookup) -> Option<String> {
    let mut modes: Vec<String> = Vec::new();
    let mut present = false;
    for value in headers.values(&ACCESS_DELEGATION) {
        present = true;
        let text = String::from_utf8_lossy(value.as_bytes());
        modes.extend(
            text.split(',')
                .map(|m| m.trim().to_ascii_lowercase())
                .filter(|m| !m.is_empty()),
        );
    }
    if !present {
        return None;
    }
    modes.sort();
    modes.dedup();
    Some(modes.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::route::classify;
    use crate::policy::identity::IdentityHasher;
    use http::{HeaderMap, HeaderValue, Method};
    use proptest::prelude::*;

    fn key(path_and_query: &str, headers: &HeaderMap) -> Result<CacheKey, NoCacheReason> {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let route = classify(&Method::GET, path, "%1F").unwrap();
        let scope = IdentityHasher::fixed().scope(&HeaderMap::new());
        CacheKey::for_load(route, path, query, headers, "%1F", scope)
    }

    #[test]
    fn a_plus_spelled_as_percent_2b_anywhere_in_the_path_has_no_key() {
        let h = HeaderMap::new();
        for path in [
            "/v1/p/namespaces/db/tables/a%2Bb",
            "/v1/p/namespaces/db/tables/a%2bb",
            "/v1/p/namespaces/d%2Bb/tables/t",
            "/v1/p%2B/namespaces/db/tables/t",
            "/v1/p/namespaces/a%1Fb%2B/tables/t",
        ] {
            assert_eq!(key(path, &h), Err(NoCacheReason::AmbiguousName), "{path}");
        }
    }

    #[test]
    fn a_literal_plus_keeps_an_entry_of_its_own() {
        let h = HeaderMap::new();
        let plus = key("/v1/p/namespaces/db/tables/a+b", &h).unwrap();
        let space = key("/v1/p/namespaces/db/tables/a%20b", &h).unwrap();
        assert_eq!(plus.table.table, "a+b");
        assert_ne!(plus, space);
        // `%25` followed by `2B` is a percent sign, not a plus.
        let percent = key("/v1/p/namespaces/db/tables/a%252Bb", &h).unwrap();
        assert_eq!(percent.table.table, "a%2Bb");
    }

    #[test]
    fn absent_snapshots_is_all() {
        let h = HeaderMap::new();
        let bare = key("/v1/namespaces/db/tables/t", &h).unwrap();
        let all = key("/v1/namespaces/db/tables/t?snapshots=all", &h).unwrap();
        let refs = key("/v1/namespaces/db/tables/t?snapshots=refs", &h).unwrap();
        assert_eq!(bare, all);
        assert_ne!(all, refs);
    }

    #[test]
    fn a_view_and_a_table_of_one_name_have_different_keys() {
        let h = HeaderMap::new();
        let table = key("/v1/namespaces/db/tables/t", &h).unwrap();
        let view = key("/v1/namespaces/db/views/t", &h).unwrap();
        assert_eq!(view.form, Form::View);
        assert_ne!(table, view);
        assert_ne!(table.identity(0), view.identity(0));
    }

    #[test]
    fn a_view_takes_no_parameters() {
        let h = HeaderMap::new();
        for query in ["snapshots=all", "referenced-by=a%1Fv", "x=1"] {
            assert_eq!(
                key(&format!("/v1/namespaces/db/views/v?{query}"), &h),
                Err(NoCacheReason::UnknownParameter),
                "{query}"
            );
        }
    }

    #[test]
    fn spellings_of_one_table_share_a_key() {
        let h = HeaderMap::new();
        let a = key("/v1/p/namespaces/a%1Fb%20c/tables/my%20t", &h).unwrap();
        let b = key("/v1/p/namespaces/a%1fb%20%63/tables/my%20%74", &h).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn plus_and_percent_twenty_never_share_a_key_but_invalidate_each_other() {
        // Go, axum and JAX-RS catalogs read `+` as a plus; Iceberg's Java code as a space.
        let h = HeaderMap::new();
        let plus = key("/v1/namespaces/db/tables/a+b", &h).unwrap();
        let space = key("/v1/namespaces/db/tables/a%20b", &h).unwrap();
        assert_ne!(plus, space);
        assert_eq!(plus.table.loose(), space.table.loose());
    }

    #[test]
    fn delegation_modes_are_a_set() {
        let mut one = HeaderMap::new();
        one.insert(
            &ACCESS_DELEGATION,
            HeaderValue::from_static("remote-signing, Vended-Credentials"),
        );
        let mut two = HeaderMap::new();
        two.insert(
            &ACCESS_DELEGATION,
            HeaderValue::from_static("vended-credentials,remote-signing,remote-signing"),
        );
        assert_eq!(normalised_delegation(&one), normalised_delegation(&two));
        assert_eq!(normalised_delegation(&HeaderMap::new()), None);
    }

    #[test]
    fn unknown_parameters_and_values_have_no_key() {
        let h = HeaderMap::new();
        for query in ["x=1", "snapshots=some", "snapshots=ALL", "snapshots"] {
            assert_eq!(
                key(&format!("/v1/namespaces/db/tables/t?{query}"), &h),
                Err(NoCacheReason::UnknownParameter),
                "{query}"
            );
        }
    }

    #[test]
    fn a_query_read_two_ways_has_no_key() {
        let h = HeaderMap::new();
        for query in [
            "snapshots=refs&snapshots=all",
            "snapshots=all&snapshots=all",
            "snapshots=all;snapshots=refs",
            "referenced-by=a%1Fv&referenced-by=a%1Fw",
            "snap%zzshots=all",
        ] {
            assert_eq!(
                key(&format!("/v1/namespaces/db/tables/t?{query}"), &h),
                Err(NoCacheReason::AmbiguousQuery),
                "{query}"
            );
        }
    }

    #[test]
    fn referenced_by_is_canonical_and_ordered() {
        let h = HeaderMap::new();
        let a = key(
            "/v1/namespaces/db/tables/t?referenced-by=prod%1Fv1,prod%1Fv2",
            &h,
        )
        .unwrap();
        let b = key(
            "/v1/namespaces/db/tables/t?referenced-by=prod%1fv1,prod%1Fv2",
            &h,
        )
        .unwrap();
        let c = key(
            "/v1/namespaces/db/tables/t?referenced-by=prod%1Fv2,prod%1Fv1",
            &h,
        )
        .unwrap();
        assert_eq!(a.referenced_by, b.referenced_by);
        assert_ne!(a.referenced_by, c.referenced_by);
        assert_ne!(a.referenced_by, None);
    }

    proptest! {
        /// Whatever way a client percent-encodes the identifiers, it reaches the same entry.
        #[test]
        fn any_encoding_of_a_name_gives_one_key(
            ns in proptest::collection::vec("[a-zA-Z0-9 _.-]{1,8}", 1..4),
            table in "[a-zA-Z0-9 _.-]{1,12}",
        ) {
            // A dot segment names nothing (a catalog may resolve it away).
            let dots = |s: &str| s == "." || s == "..";
            prop_assume!(!dots(&table) && !ns.iter().any(|p| dots(p)));
            let minimal = |s: &str| s.replace(' ', "%20");
            let full = |s: &str| percent_encoding::utf8_percent_encode(
                s, percent_encoding::NON_ALPHANUMERIC).to_string();
            let a = format!("/v1/namespaces/{}/tables/{}",
                ns.iter().map(|p| minimal(p)).collect::<Vec<_>>().join("%1F"), minimal(&table));
            let b = format!("/v1/namespaces/{}/tables/{}",
                ns.iter().map(|p| full(p)).collect::<Vec<_>>().join("%1f"), full(&table));
            let h = HeaderMap::new();
            let ka = key(&a, &h).unwrap();
            let kb = key(&b, &h).unwrap();
            prop_assert_eq!(&ka, &kb);
            prop_assert_eq!(ka.table.namespace.to_vec(), ns);
        }
    }
}
