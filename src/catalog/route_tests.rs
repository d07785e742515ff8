//! The route classifier's unit tests.

use super::*;

const SEP: &str = "%1F";

fn route(method: Method, path: &str) -> Route {
    classify(&method, path, SEP).expect("classifies")
}

fn ns(parts: &[&str]) -> Option<crate::catalog::names::Namespace> {
    Some(parts.iter().map(crate::catalog::names::Name::new).collect())
}

#[test]
fn a_path_longer_than_any_operation_names_nothing() {
    let long = "/v1/warehouse/namespaces/db/tables/t/plan/p1/more";
    assert_eq!(route(Method::GET, long).operation, Operation::Other);
    let deep = "/v1/warehouse/namespaces/db/tables/t/plan/p1";
    assert_eq!(
        route(Method::GET, deep).operation,
        Operation::FetchPlanningResult
    );
}

/// Every path template and method of the spec, with and without `{prefix}`.
#[test]
fn every_spec_operation_is_named_with_and_without_prefix() {
    use Operation::*;
    let cases: &[(Method, &str, Operation)] = &[
        (Method::GET, "namespaces", ListNamespaces),
        (Method::POST, "namespaces", CreateNamespace),
        (Method::GET, "namespaces/db", LoadNamespace),
        (Method::HEAD, "namespaces/db", NamespaceExists),
        (Method::DELETE, "namespaces/db", DropNamespace),
        (
            Method::POST,
            "namespaces/db/properties",
            UpdateNamespaceProperties,
        ),
        (Method::GET, "namespaces/db/tables", ListTables),
        (Method::POST, "namespaces/db/tables", CreateTable),
        (Method::GET, "namespaces/db/functions", ListFunctions),
        (Method::GET, "namespaces/db/functions/f", LoadFunction),
        (Method::POST, "namespaces/db/tables/t/plan", PlanTableScan),
        (
            Method::GET,
            "namespaces/db/tables/t/plan/p1",
            FetchPlanningResult,
        ),
        (
            Method::DELETE,
            "namespaces/db/tables/t/plan/p1",
            CancelPlanning,
        ),
        (Method::POST, "namespaces/db/tables/t/tasks", FetchScanTasks),
        (Method::POST, "namespaces/db/register", RegisterTable),
        (Method::GET, "namespaces/db/tables/t", LoadTable),
        (Method::POST, "namespaces/db/tables/t", UpdateTable),
        (Method::DELETE, "namespaces/db/tables/t", DropTable),
        (Method::HEAD, "namespaces/db/tables/t", TableExists),
        (
            Method::POST,
            "namespaces/db/tables/t/unregister",
            UnregisterTable,
        ),
        (
            Method::GET,
            "namespaces/db/tables/t/credentials",
            LoadCredentials,
        ),
        (Method::POST, "namespaces/db/tables/t/sign", SignRequest),
        (Method::POST, "tables/rename", RenameTable),
        (
            Method::POST,
            "namespaces/db/tables/t/metrics",
            ReportMetrics,
        ),
        (Method::POST, "transactions/commit", CommitTransaction),
        (Method::GET, "namespaces/db/views", ListViews),
        (Method::POST, "namespaces/db/views", CreateView),
        (Method::GET, "namespaces/db/views/v", LoadView),
        (Method::POST, "namespaces/db/views/v", ReplaceView),
        (Method::DELETE, "namespaces/db/views/v", DropView),
        (Method::HEAD, "namespaces/db/views/v", ViewExists),
        (Method::POST, "views/rename", RenameView),
        (Method::POST, "namespaces/db/register-view", RegisterView),
    ];
    for (method, tail, expected) in cases {
        let bare = route(method.clone(), &format!("/v1/{tail}"));
        assert_eq!(bare.operation, *expected, "{method} /v1/{tail}");
        assert_eq!(bare.prefix, None, "{method} /v1/{tail}");
        let prefixed = route(method.clone(), &format!("/v1/warehouse/{tail}"));
        assert_eq!(
            prefixed.operation, *expected,
            "{method} /v1/warehouse/{tail}"
        );
        assert_eq!(prefixed.prefix.as_deref(), Some("warehouse"));
    }
    assert_eq!(route(Method::GET, "/v1/config").operation, Config);
    assert_eq!(
        route(Method::POST, "/v1/oauth/tokens").operation,
        OAuthTokens
    );
}

#[test]
fn load_table_names_its_namespace_and_table() {
    let r = route(Method::GET, "/v1/warehouse/namespaces/db/tables/events");
    assert_eq!(r.namespace, ns(&["db"]));
    assert_eq!(r.name.as_deref(), Some("events"));
}

#[test]
fn unknown_paths_and_methods_are_other() {
    for (m, p) in [
        (Method::GET, "/healthz"),
        (Method::GET, "/v2/namespaces"),
        (Method::PUT, "/v1/namespaces/db/tables/t"),
        (
            Method::GET,
            "/v1/warehouse/namespaces/db/tables/t/extra/deep",
        ),
        (Method::PATCH, "/v1/config"),
    ] {
        assert_eq!(route(m, p).operation, Operation::Other, "{p}");
    }
}

#[test]
fn multipart_namespace_splits_on_unit_separator_in_either_case() {
    let upper = route(Method::GET, "/v1/namespaces/a%1Fb%1fc/tables/t");
    assert_eq!(upper.namespace, ns(&["a", "b", "c"]));
}

#[test]
fn multipart_namespace_splits_on_advertised_separator_too() {
    let r = classify(&Method::GET, "/v1/namespaces/a%2Eb%1Fc/tables/t", "%2E").unwrap();
    assert_eq!(r.namespace, ns(&["a", "b", "c"]));
}

#[test]
fn a_plus_stays_a_plus_and_percent_twenty_is_a_space() {
    let plus = route(Method::GET, "/v1/namespaces/my+db/tables/my+table");
    let space = route(Method::GET, "/v1/namespaces/my%20db/tables/my%20table");
    assert_eq!(plus.name.as_deref(), Some("my+table"));
    assert_eq!(space.name.as_deref(), Some("my table"));
}

/// Read for every method, each path is unclassified: relayed alone, a write to it may
/// have changed anything.
fn names_nothing(paths: &[&str]) {
    for path in paths {
        for method in [Method::GET, Method::HEAD, Method::POST, Method::DELETE] {
            let operation = route(method.clone(), path).operation;
            assert_eq!(operation, Operation::Other, "{method} {path}");
        }
    }
}

#[test]
fn a_path_with_segment_parameters_names_nothing() {
    names_nothing(&[
        "/v1/namespaces/db/tables/t;a=b",
        "/v1/namespaces/db;x/views/v",
        "/v1/p;q/namespaces/db/tables/t",
    ]);
}

#[test]
fn a_decoded_slash_in_a_name_names_nothing() {
    names_nothing(&[
        "/v1/namespaces/db/views/x%2F",
        "/v1/namespaces/a%2Fb/tables/t",
        "/v1/pre%2Fy/namespaces/n/tables/t",
        "/v1/pre%2fy/namespaces/n/views/v",
    ]);
}

#[test]
fn a_dot_segment_names_nothing_whether_spelled_or_escaped() {
    names_nothing(&[
        "/v1/namespaces/d/tables/..",
        "/v1/namespaces/d/tables/.",
        "/v1/namespaces/d/tables/%2E%2E",
        "/v1/namespaces/d/tables/%2e",
        "/v1/namespaces/../tables/t",
        "/v1/namespaces/a%1F..%1Fb/tables/t",
        "/v1/../namespaces/d/tables/t",
        "/v1/./namespaces/d/tables/t",
        "/v1/%2E%2E/namespaces/d/views/v",
    ]);
    // Dots inside a name are a name's.
    let r = route(Method::GET, "/v1/namespaces/d/tables/a..b");
    assert_eq!(r.operation, Operation::LoadTable);
}

#[test]
fn bad_percent_encoding_is_an_error() {
    let err = classify(&Method::GET, "/v1/namespaces/db/tables/a%zz", SEP).unwrap_err();
    assert!(matches!(err, RouteError::BadPercentEncoding { .. }));
    let err = classify(&Method::GET, "/v1/namespaces/db/tables/a%2", SEP).unwrap_err();
    assert!(matches!(err, RouteError::BadPercentEncoding { .. }));
}

#[test]
fn invalid_utf8_is_an_error() {
    let err = classify(&Method::GET, "/v1/namespaces/db/tables/%FF%FE", SEP).unwrap_err();
    assert!(matches!(err, RouteError::InvalidUtf8 { .. }));
}

#[test]
fn empty_table_name_is_an_error() {
    let err = classify(&Method::GET, "/v1/namespaces/db/tables/", SEP).unwrap_err();
    assert_eq!(err, RouteError::EmptyIdentifier);
}

#[test]
fn mutations_are_the_writes() {
    assert!(Operation::UpdateTable.is_mutation());
    assert!(Operation::CommitTransaction.is_mutation());
    assert!(!Operation::LoadTable.is_mutation());
    assert!(!Operation::LoadCredentials.is_mutation());
}

proptest::proptest! {
    #[test]
    fn classify_never_panics(path in "/v1/[ -~]{0,80}") {
        let _ = classify(&Method::GET, &path, SEP);
    }

    /// A namespace without an escape is read at once; it must read as every step would.
    #[test]
    fn a_namespace_read_at_once_reads_as_every_step_would(
        raw in "[a.%1Ffx]{0,12}",
        separator in proptest::sample::select(vec!["%1F", "%1f", "%2E", ".", "x", "%"]),
    ) {
        proptest::prop_assert_eq!(
            decode_namespace(&raw, separator),
            split_and_decode_namespace(&raw, separator)
        );
    }

    /// Without an escape no name holds a `/`, so a path is classified as if it were checked;
    /// a dot segment names nothing.
    #[test]
    fn a_path_without_escapes_is_classified_whatever_its_names(
        namespace in "[a-z.+]{0,6}",
        name in "[a-z.+;]{0,6}",
        prefix in proptest::option::of("[a-z]{1,4}"),
    ) {
        let prefix = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        let path = format!("/v1/{prefix}namespaces/{namespace}/tables/{name}");
        let r = classify(&Method::GET, &path, SEP);
        let expected = if name.contains(';') {
            Ok(Operation::Other)
        } else if namespace.is_empty() || name.is_empty() {
            Err(RouteError::EmptyIdentifier)
        } else if [".", ".."].contains(&namespace.as_str()) || [".", ".."].contains(&name.as_str()) {
            Ok(Operation::Other)
        } else {
            Ok(Operation::LoadTable)
        };
        proptest::prop_assert_eq!(r.as_ref().map(|r| r.operation), expected.as_ref().copied());
        if let Ok(r) = r {
            if r.operation == Operation::LoadTable {
                proptest::prop_assert_eq!(r.namespace, ns(&[namespace.as_str()]));
                proptest::prop_assert_eq!(r.name.as_deref(), Some(name.as_str()));
            }
        }
    }

    #[test]
    fn encoded_names_round_trip(name in "[^/\\p{C}]{1,20}") {
        proptest::prop_assume!(name != "." && name != "..");
        let encoded: String = percent_encoding::utf8_percent_encode(
            &name, percent_encoding::NON_ALPHANUMERIC).to_string();
        let r = classify(&Method::GET, &format!("/v1/namespaces/db/tables/{encoded}"), SEP)
            .unwrap();
        proptest::prop_assert_eq!(r.name.as_deref(), Some(name.as_str()));
    }
}

#[test]
fn an_error_is_labelled_with_the_operation_its_path_has_the_shape_of() {
    let get = Method::GET;
    for path in [
        "/v1/p/namespaces//tables/t",
        "/v1/p/namespaces/n/tables/",
        "/v1/p/namespaces/%ZZ/tables/t",
        "/v1/namespaces/a%1F/tables/%FF",
    ] {
        assert_eq!(operation_of(&get, path), Operation::LoadTable, "{path}");
    }
    assert_eq!(
        operation_of(&Method::POST, "/v1/p/namespaces//tables/t"),
        Operation::UpdateTable
    );
    assert_eq!(operation_of(&get, "/v1//"), Operation::Other);
}
