//! Iceberg's reference REST catalog server (1.11.0: the adapter and servlet of its REST
//! compatibility kit, a JDBC catalog on SQLite, data on the suite's S3), in the role the seed's
//! own catalog (Gravitino) would have if its server were served here (its artifacts are not:
//! see docs/compatibility.md). It sends ETags (unquoted murmur3 hashes) and answers 304s, and it
//! vends the S3 keys in every table's `config`. One server serves the whole file.

use crate::jvm::{reference_table, ReferenceCatalog};
use crate::support::relay::Relay;
use crate::support::{metric, pyiceberg_with, unique, x_cache, ConfigFile, Icecache};
use serde_json::{json, Value};

/// pyiceberg against a catalog with no prefix nor OAuth; `own_keys` false: it brings no S3
/// keys (the catalog or icecache's inject policy gives them).
async fn pyiceberg(uri: &str, args: &[&str], own_keys: bool) -> Value {
    let uri = uri.to_owned();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let own = if own_keys { "1" } else { "0" };
        pyiceberg_with(
            &uri,
            &args,
            &[
                ("ICECACHE_PY_CATALOG", "plain"),
                ("ICECACHE_PY_OWN_KEYS", own),
            ],
        )
    })
    .await
    .expect("pyiceberg thread")
}

#[tokio::test]
async fn icecache_revalidates_its_entries_with_the_reference_catalogs_own_etags() {
    let reference = ReferenceCatalog::shared().await;
    let table = reference_table(&reference.url).await;
    let (namespace, name) = table.split_once('.').unwrap();
    let relay = Relay::start(&reference.url).await;
    // Never fresh: every load after the first asks the catalog, with its ETag. Under strip, as
    // the keys this catalog vends would hold an entry to their own window under passthrough.
    let icecache =
        Icecache::start(&relay.url, &["--fresh-for", "0s", "--credentials", "strip"]).await;
    let url = format!("{}/v1/namespaces/{namespace}/tables/{name}", icecache.url);
    let mut phases = Vec::new();
    let mut tags = std::collections::BTreeSet::new();
    for _ in 0..5 {
        let response = reqwest::get(&url).await.unwrap();
        assert_eq!(response.status(), 200);
        phases.push(x_cache(&response));
        tags.insert(response.headers()["etag"].to_str().unwrap().to_owned());
    }
    assert_eq!(
        phases,
        [
            "MISS",
            "REVALIDATED",
            "REVALIDATED",
            "REVALIDATED",
            "REVALIDATED"
        ]
    );
    assert_eq!(
        relay.statuses(),
        [200, 304, 304, 304, 304],
        "the catalog confirmed with 304s"
    );
    let asked: Vec<String> = relay
        .seen()
        .iter()
        .filter_map(|s| {
            s.headers
                .get("if-none-match")
                .map(|v| v.to_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(asked.len(), 4, "each revalidation sent the catalog's ETag");
    assert!(
        !asked[0].starts_with('"'),
        "its own unquoted tag, as it sent it: {asked:?}"
    );
    assert_eq!(
        tags.len(),
        1,
        "clients keep one ETag: icecache's, unchanged"
    );
    assert!(
        !tags.contains(&asked[0]),
        "the catalog's ETag is never shown to clients"
    );
    let metrics = icecache.metrics().await;
    let confirmed = metric(
        &metrics,
        "icecache_cache_revalidations_total{result=\"not_modified\"}",
    );
    assert_eq!(confirmed, 4.0);
    crate::compatibility::record(
        "reference-etags",
        json!({ "client": "plain HTTP loads (icecache revalidating)", "policy": "strip",
                "catalog": "Iceberg reference server 1.11.0", "loads": 5,
                "catalog_304s": 4, "client_etags": 1 }),
    );
}

/// icecache's flags for a credential policy; under `inject` the S3 keys come from files.
fn policy(policy: &str) -> (Vec<String>, Option<ConfigFile>) {
    if policy != "inject" {
        return (vec!["--credentials".into(), policy.into()], None);
    }
    let dir = std::env::temp_dir().join(unique("ref-inject"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("id"), "admin").unwrap();
    std::fs::write(dir.join("secret"), "adminsecret").unwrap();
    let config = ConfigFile::new(&format!(
        "credentials = \"inject\"\n[inject]\n\"s3.access-key-id\" = {{ file = \"{0}/id\" }}\n\
         \"s3.secret-access-key\" = {{ file = \"{0}/secret\" }}\n",
        dir.display()
    ));
    (
        vec!["--config".into(), config.path().to_owned()],
        Some(config),
    )
}

#[tokio::test]
async fn pyiceberg_reads_the_reference_catalog_through_icecache_as_directly_under_every_policy() {
    let reference = ReferenceCatalog::shared().await;
    for credentials in ["passthrough", "strip", "inject"] {
        let (flags, _config) = policy(credentials);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let icecache = Icecache::start(&reference.url, &flags).await;
        let namespace = unique("py");
        // Under strip the client brings its own keys; otherwise the catalog's vended keys or
        // icecache's injected ones are all it has.
        let own_keys = credentials == "strip";
        let through = |args: Vec<&'static str>| {
            let uri = icecache.url.clone();
            let namespace = namespace.clone();
            async move {
                let mut full = vec![args[0], namespace.as_str()];
                full.extend_from_slice(&args[1..]);
                pyiceberg(&uri, &full, own_keys).await
            }
        };
        through(vec!["append", "events", "7"]).await;
        through(vec!["append", "events", "5"]).await;
        let via = through(vec!["scan", "events"]).await;
        let direct = pyiceberg(&reference.url, &["scan", &namespace, "events"], true).await;
        assert_eq!(via, direct, "{credentials}: the rows and the snapshot");
        assert_eq!(via["rows"], 12, "{credentials}");
        let refs = through(vec!["load-refs", "events"]).await;
        let refs_direct =
            pyiceberg(&reference.url, &["load-refs", &namespace, "events"], true).await;
        assert_eq!(refs, refs_direct, "{credentials}: refs mode");
        assert_eq!(through(vec!["exists", "events"]).await["exists"], true);
        assert_eq!(through(vec!["exists", "missing"]).await["exists"], false);
        assert_eq!(
            through(vec!["list", "events"]).await,
            pyiceberg(&reference.url, &["list", &namespace, "events"], true).await
        );
        let local = metric(
            &icecache.metrics().await,
            "icecache_cache_not_modified_total",
        );
        crate::compatibility::record(
            &format!("pyiceberg-reference-{credentials}"),
            json!({ "client": "pyiceberg 0.12", "catalog": "Iceberg reference server 1.11.0",
                    "policy": credentials, "identical": true, "local_304s": local }),
        );
    }
}
