//! Third-party Iceberg clients work through icecache exactly as they do directly against the
//! catalog (SeaweedFS): pyiceberg 0.12, DuckDB 1.5.5 with its iceberg extension, iceberg-js 1.0.

use std::path::PathBuf;
use std::process::Command;

use crate::support::relay::Relay;
use crate::support::{catalog, pyiceberg_async, unique, Icecache};
use serde_json::Value;

/// A namespace with a table of `rows` rows, written directly to the catalog with pyiceberg.
async fn seeded(rows: u32) -> (String, String) {
    let namespace = unique("ns_interop");
    pyiceberg_async(
        &catalog(),
        &["append", &namespace, "events", &rows.to_string()],
    )
    .await;
    (namespace, "events".to_owned())
}

fn run_json(program: PathBuf, args: &[&str]) -> Value {
    let output = Command::new(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the client printed JSON")
}

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

async fn duckdb(endpoint: &str, namespace: &str, table: &str) -> Value {
    let script = tests_dir().join("py/duckdb_client.py");
    let args = [
        script.to_str().unwrap().to_owned(),
        endpoint.to_owned(),
        namespace.to_owned(),
        table.to_owned(),
    ];
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_json(crate::support::python(), &args)
    })
    .await
    .unwrap()
}

async fn iceberg_js(endpoint: &str, token: &str, namespace: &str, table: &str) -> Value {
    let script = tests_dir().join("js/interop.mjs");
    let args = [
        script.to_str().unwrap().to_owned(),
        endpoint.to_owned(),
        token.to_owned(),
        namespace.to_owned(),
        table.to_owned(),
    ];
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_json(PathBuf::from("node"), &args)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn pyiceberg_sees_the_same_tables_rows_and_refs_both_ways() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let (namespace, table) = seeded(9).await;
    for command in ["scan", "load-refs", "exists", "list"] {
        let direct = pyiceberg_async(&catalog(), &[command, &namespace, &table]).await;
        let through = pyiceberg_async(&icecache.url, &[command, &namespace, &table]).await;
        assert_eq!(direct, through, "pyiceberg {command}");
    }
    let scanned = pyiceberg_async(&icecache.url, &["scan", &namespace, &table]).await;
    assert_eq!(scanned["rows"], 9);
    let missing = pyiceberg_async(&icecache.url, &["exists", &namespace, "nope"]).await;
    assert_eq!(missing["exists"], false);
    pyiceberg_async(&icecache.url, &["drop", &namespace, &table]).await;
    let gone = pyiceberg_async(&icecache.url, &["exists", &namespace, &table]).await;
    assert_eq!(
        gone["exists"], false,
        "a drop through icecache is seen at once"
    );
    let local = crate::support::metric(
        &icecache.metrics().await,
        "icecache_cache_not_modified_total",
    );
    crate::compatibility::record(
        "pyiceberg-seaweedfs",
        serde_json::json!({ "client": "pyiceberg 0.12", "catalog": "SeaweedFS 4.48",
                            "policy": "passthrough", "identical": true, "local_304s": local }),
    );
}

#[tokio::test]
async fn pyiceberg_asks_for_vended_credentials_and_never_sends_if_none_match() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &["--cache-enabled", "false"]).await;
    let (namespace, table) = seeded(1).await;
    pyiceberg_async(&icecache.url, &["scan", &namespace, &table]).await;
    let load = relay
        .seen()
        .into_iter()
        .find(|s| s.method == "GET" && s.path_and_query.contains("/tables/events"))
        .expect("pyiceberg loaded the table");
    assert_eq!(
        load.headers["x-iceberg-access-delegation"],
        "vended-credentials"
    );
    assert!(load.headers.get("if-none-match").is_none());
}

#[tokio::test]
async fn duckdb_counts_and_filters_the_same_rows_both_ways() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let (namespace, table) = seeded(10).await;
    let direct = duckdb(&catalog(), &namespace, &table).await;
    let through = duckdb(&icecache.url, &namespace, &table).await;
    assert_eq!(direct, through);
    assert_eq!(through["count"], 10);
    assert_eq!(through["odd_ids"], serde_json::json!([1, 3, 5, 7, 9]));
    let local = crate::support::metric(
        &icecache.metrics().await,
        "icecache_cache_not_modified_total",
    );
    crate::compatibility::record(
        "duckdb-seaweedfs",
        serde_json::json!({ "client": "DuckDB 1.5.5", "catalog": "SeaweedFS 4.48",
                            "policy": "passthrough", "identical": true, "local_304s": local }),
    );
}

#[tokio::test]
async fn iceberg_js_gets_null_on_a_304_in_both_snapshot_modes_through_icecache() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let (namespace, table) = seeded(2).await;
    let token = crate::support::token(&catalog()).await;
    let through = iceberg_js(&icecache.url, &token, &namespace, &table).await;
    assert!(through["all_etag"]
        .as_str()
        .is_some_and(|e| e.starts_with('"')));
    assert_eq!(through["all_again_is_null"], true);
    assert_eq!(through["refs_again_is_null"], true);
    assert_ne!(through["all_etag"], through["refs_etag"]);
    assert_eq!(through["refs_with_all_tag_is_null"], false);
    assert_eq!(through["exists"], true);
    assert_eq!(through["missing_exists"], false);

    // Directly, SeaweedFS sends no ETag: the client never gets a 304 there.
    let direct = iceberg_js(&catalog(), &token, &namespace, &table).await;
    assert_eq!(direct["all_etag"], Value::Null);
    assert_eq!(direct["all_uuid"], through["all_uuid"]);
    assert_eq!(direct["exists"], through["exists"]);
    assert_eq!(direct["missing_exists"], through["missing_exists"]);
    crate::compatibility::record(
        "iceberg-js-seaweedfs",
        serde_json::json!({ "client": "iceberg-js 1.0", "catalog": "SeaweedFS 4.48",
                            "policy": "passthrough", "identical": true, "local_304s": 2 }),
    );
}
