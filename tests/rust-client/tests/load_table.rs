//! The Apache Iceberg Rust REST client (`iceberg-catalog-rest` 0.10.1) loads tables through
//! icecache as it does directly from the catalog. Run by scripts/test.sh, which provides the
//! catalog (ICECACHE_TEST_CATALOG) and the icecache binary (ICECACHE_BIN).

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::MemoryStorageFactory;
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};
use serde_json::json;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run ./scripts/test.sh"))
}

struct Icecache(Child, String);

impl Drop for Icecache {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts icecache on ports it picks itself, reads them from its first log line, and waits
/// until it is healthy.
async fn icecache() -> Icecache {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env("ICECACHE_BIN"))
        .args(["--upstream", &env("ICECACHE_TEST_CATALOG")])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("icecache starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("icecache logs");
    // The rest of its log is drained, so icecache never blocks writing it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let started: serde_json::Value = serde_json::from_str(&first).expect("a JSON log line");
    let field = |name: &str| started[name].as_str().expect("a bound address").to_owned();
    let (listen, admin) = (field("listen"), field("admin"));
    let icecache = Icecache(child, format!("http://{listen}"));
    for _ in 0..200 {
        if reqwest::get(format!("http://{admin}/healthz"))
            .await
            .is_ok()
        {
            return icecache;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("icecache did not start");
}

async fn rest_catalog(uri: &str) -> RestCatalog {
    let props = HashMap::from([
        ("uri".to_owned(), uri.to_owned()),
        ("prefix".to_owned(), "warehouse".to_owned()),
        ("credential".to_owned(), "admin:adminsecret".to_owned()),
    ]);
    RestCatalogBuilder::default()
        .with_storage_factory(Arc::new(MemoryStorageFactory))
        .load("interop", props)
        .await
        .expect("the REST catalog client starts")
}

/// A namespace and table made through the catalog's REST API.
async fn seed(namespace: &str) {
    let catalog = env("ICECACHE_TEST_CATALOG");
    let client = reqwest::Client::new();
    let token: serde_json::Value = client
        .post(format!("{catalog}/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "admin"),
            ("client_secret", "adminsecret"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["access_token"].as_str().unwrap();
    let base = format!("{catalog}/v1/warehouse");
    let r = client
        .post(format!("{base}/namespaces"))
        .bearer_auth(token)
        .json(&json!({ "namespace": [namespace] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .post(format!("{base}/namespaces/{namespace}/tables"))
        .bearer_auth(token)
        .json(&json!({
            "name": "events",
            "schema": { "type": "struct", "schema-id": 0,
                        "fields": [{ "id": 1, "name": "id", "type": "long", "required": false }] }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn the_rust_client_loads_the_same_table_through_icecache() {
    let namespace = format!("ns_rust_{}", std::process::id());
    seed(&namespace).await;
    let icecache = icecache().await;
    let direct = rest_catalog(&env("ICECACHE_TEST_CATALOG")).await;
    let through = rest_catalog(&icecache.1).await;
    let ident = TableIdent::from_strs([namespace.as_str(), "events"]).unwrap();

    let expected = direct.load_table(&ident).await.unwrap();
    for _ in 0..2 {
        // The second load is answered from icecache's memory.
        let table = through.load_table(&ident).await.unwrap();
        assert_eq!(table.metadata().uuid(), expected.metadata().uuid());
        assert_eq!(table.metadata_location(), expected.metadata_location());
        assert_eq!(
            table.metadata().current_schema(),
            expected.metadata().current_schema()
        );
    }
    assert!(through.table_exists(&ident).await.unwrap());
    let missing = TableIdent::from_strs([namespace.as_str(), "missing"]).unwrap();
    assert!(!through.table_exists(&missing).await.unwrap());
    let ns = NamespaceIdent::new(namespace.clone());
    assert_eq!(
        through.list_tables(&ns).await.unwrap(),
        direct.list_tables(&ns).await.unwrap()
    );
}
