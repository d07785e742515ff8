//! The `endpoints` of a `/v1/config` answer (spec 1.10+): which operations a catalog serves,
//! and the list icecache answers with instead, which also names the existence checks icecache
//! answers itself. The Iceberg Java client and pyiceberg use `HEAD` for tableExists and
//! viewExists only when the list names it; otherwise they load the whole table.
//!
//! Invariants: the list sent never names an operation the catalog lacks and icecache cannot
//! answer (a `HEAD` is added only beside the `GET` it is answered from), never drops one the
//! catalog named, and never hides one a client would otherwise have assumed. A list icecache
//! cannot read whole (not a list of strings) is left as it is and teaches nothing.

use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::Value;

use super::route::Operation;

pub const TABLE_EXISTS: &str = "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}";
pub const VIEW_EXISTS: &str = "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}";
const LOAD_TABLE: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}";
const LOAD_VIEW: &str = "GET /v1/{prefix}/namespaces/{namespace}/views/{view}";

/// What a client assumes of a catalog that sends no `endpoints` (the spec's list).
pub const SPEC_DEFAULTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    LOAD_TABLE,
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
];

/// What the Java client also assumes when such a catalog sets `view-endpoints-supported`.
const VIEW_DEFAULTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    LOAD_VIEW,
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
];

/// Whether the catalog answers each existence check itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub tables: bool,
    pub views: bool,
}

/// What a config's `endpoints` come to: the list to send instead (None: the config goes as it
/// is), and whether the catalog answers the checks itself.
#[derive(Debug, PartialEq, Eq)]
pub struct Advertised {
    pub list: Option<Vec<String>>,
    pub heads: Heads,
}

/// What to do with a config's `endpoints` (None: absent or `null`); None when the member is
/// not a list of strings (left alone, nothing learned).
///
/// A catalog that sends none is assumed to serve the spec's defaults, which name no check.
/// Its list is written out only when it says it serves views (`view-endpoints-supported`):
/// otherwise a client may have enabled views itself (the Java client and pyiceberg honour
/// their own `view-endpoints-supported` only when the catalog sends no list), and any list
/// icecache wrote would either hide the views or claim views the catalog may lack.
pub fn advertise(endpoints: Option<&Value>, views_supported: bool) -> Option<Advertised> {
    let listed: Option<Vec<String>> = match endpoints {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
        ),
        Some(_) => return None,
    };
    let Some(mut list) = listed else {
        let lacks_both = Heads {
            tables: false,
            views: false,
        };
        let list = views_supported.then(|| {
            let defaults = SPEC_DEFAULTS.iter().chain(VIEW_DEFAULTS);
            let mut list: Vec<String> = defaults.map(|e| (*e).to_owned()).collect();
            list.extend([TABLE_EXISTS.to_owned(), VIEW_EXISTS.to_owned()]);
            list
        });
        return Some(Advertised {
            list,
            heads: lacks_both,
        });
    };
    let names = |endpoint: &str| list.iter().any(|e| e.trim() == endpoint);
    let heads = Heads {
        tables: names(TABLE_EXISTS),
        views: names(VIEW_EXISTS),
    };
    let mut added = Vec::new();
    if names(LOAD_TABLE) && !heads.tables {
        added.push(TABLE_EXISTS.to_owned());
    }
    if names(LOAD_VIEW) && !heads.views {
        added.push(VIEW_EXISTS.to_owned());
    }
    let list = (!added.is_empty()).then(|| {
        list.extend(added);
        list
    });
    Some(Advertised { list, heads })
}

const UNKNOWN: u8 = 0;
const ANSWERS: u8 = 1;
const LACKS: u8 = 2;

/// What icecache has learned of the catalog's existence checks: from the `endpoints` of the
/// `/v1/config` answers it relays, and from a `405` or `501` to a `HEAD` it passed on. Until it
/// has learned anything, a check is passed on as the client sent it.
pub struct CatalogHeads {
    tables: AtomicU8,
    views: AtomicU8,
}

impl Default for CatalogHeads {
    fn default() -> Self {
        CatalogHeads {
            tables: AtomicU8::new(UNKNOWN),
            views: AtomicU8::new(UNKNOWN),
        }
    }
}

impl CatalogHeads {
    fn of(&self, operation: Operation) -> Option<&AtomicU8> {
        match operation {
            Operation::TableExists => Some(&self.tables),
            Operation::ViewExists => Some(&self.views),
            _ => None,
        }
    }

    /// Whether the catalog is known to lack this existence check.
    pub fn lacks(&self, operation: Operation) -> bool {
        self.of(operation)
            .is_some_and(|state| state.load(Ordering::Relaxed) == LACKS)
    }

    pub fn learn(&self, heads: Heads) {
        let state = |answers: bool| if answers { ANSWERS } else { LACKS };
        self.tables.store(state(heads.tables), Ordering::Relaxed);
        self.views.store(state(heads.views), Ordering::Relaxed);
    }

    /// The catalog refused this check as a method it does not serve.
    pub fn learn_lacks(&self, operation: Operation) {
        if let Some(state) = self.of(operation) {
            state.store(LACKS, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    fn is_unknown(&self, operation: Operation) -> bool {
        self.of(operation)
            .is_some_and(|state| state.load(Ordering::Relaxed) == UNKNOWN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed(endpoints: &[&str]) -> Value {
        json!(endpoints)
    }

    const LACKS_BOTH: Heads = Heads {
        tables: false,
        views: false,
    };

    #[test]
    fn a_catalog_that_sends_no_list_lacks_the_checks_and_its_config_goes_as_it_is() {
        for absent in [None, Some(&Value::Null)] {
            let advertised = advertise(absent, false).unwrap();
            assert_eq!(advertised.list, None);
            assert_eq!(advertised.heads, LACKS_BOTH);
        }
    }

    #[test]
    fn a_catalog_that_sends_no_list_but_serves_views_gets_the_defaults_and_both_checks() {
        let advertised = advertise(None, true).unwrap();
        let list = advertised.list.unwrap();
        assert_eq!(&list[..SPEC_DEFAULTS.len()], SPEC_DEFAULTS);
        for endpoint in [LOAD_VIEW, TABLE_EXISTS, VIEW_EXISTS] {
            assert!(list.iter().any(|e| e == endpoint), "{endpoint}: {list:?}");
        }
        assert_eq!(advertised.heads, LACKS_BOTH);
    }

    #[test]
    fn a_check_is_added_beside_the_load_it_is_answered_from_and_nowhere_else() {
        let advertised = advertise(Some(&listed(&[LOAD_TABLE])), true).unwrap();
        assert_eq!(advertised.list.unwrap(), [LOAD_TABLE, TABLE_EXISTS]);
        assert_eq!(advertised.heads, LACKS_BOTH);
        let advertised = advertise(Some(&listed(&[LOAD_VIEW])), false).unwrap();
        assert_eq!(advertised.list.unwrap(), [LOAD_VIEW, VIEW_EXISTS]);
        let namespaces = listed(&["GET /v1/{prefix}/namespaces"]);
        assert_eq!(advertise(Some(&namespaces), true).unwrap().list, None);
    }

    #[test]
    fn a_catalog_that_lists_its_checks_keeps_its_list_as_it_is() {
        let own = [
            LOAD_TABLE,
            TABLE_EXISTS,
            LOAD_VIEW,
            VIEW_EXISTS,
            "POST /v1/{prefix}/x",
        ];
        let advertised = advertise(Some(&listed(&own)), false).unwrap();
        assert_eq!(advertised.list, None);
        let both = Heads {
            tables: true,
            views: true,
        };
        assert_eq!(advertised.heads, both);
    }

    #[test]
    fn a_list_that_is_not_all_strings_is_left_alone() {
        assert_eq!(advertise(Some(&json!([LOAD_TABLE, 1])), false), None);
        assert_eq!(advertise(Some(&json!({ "a": LOAD_TABLE })), false), None);
        assert_eq!(advertise(Some(&json!(LOAD_TABLE)), false), None);
    }

    #[test]
    fn checks_are_passed_on_until_the_catalog_is_known_to_lack_them() {
        let heads = CatalogHeads::default();
        assert!(heads.is_unknown(Operation::TableExists));
        assert!(!heads.lacks(Operation::TableExists));
        heads.learn(Heads {
            tables: true,
            views: false,
        });
        assert!(!heads.lacks(Operation::TableExists));
        assert!(heads.lacks(Operation::ViewExists));
        heads.learn_lacks(Operation::TableExists);
        assert!(heads.lacks(Operation::TableExists));
        assert!(!heads.lacks(Operation::LoadTable));
    }
}
