//! The Iceberg Java client (iceberg-core 1.11.0's RESTCatalog, as Spark, Trino and Flink reach a
//! catalog) through icecache: the same catalog as directly, its RESTTableCache's repeated loads
//! answered with local 304s, another client's commit seen at once, and never an expired vended
//! credential held because of a 304. One JVM (tests/java) serves every test of this file.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::jvm::{client, seaweedfs_client, Agent, ReferenceCatalog};
use crate::support::relay::Relay;
use crate::support::standin::{Shape, StandIn};
use crate::support::{catalog, metric, unique, Api, ConfigFile, Icecache};
use serde_json::{json, Value};

const LOCAL_304S: &str = "icecache_cache_not_modified_total";

/// Every write of the scenario succeeded and every read saw the same through both clients.
fn assert_same_everywhere(report: &Value) {
    let steps = report["steps"].as_array().expect("steps");
    for step in steps {
        match step["kind"].as_str() {
            Some("write") => assert_eq!(step["ok"], true, "{step:#}"),
            _ => assert_eq!(step["same"], true, "{step:#}"),
        }
    }
    assert_eq!(report["failed"], false);
    assert!(steps.len() >= 30, "the whole scenario ran: {}", steps.len());
}

/// The credential policies the scenario runs under.
const POLICIES: [&str; 3] = ["passthrough", "strip", "inject"];

/// icecache's flags for `policy` (the config file lives as long as the flags are used): under
/// `inject` the suite's S3 keys come from files.
fn policy_flags(policy: &str) -> (Vec<String>, Option<ConfigFile>) {
    if policy != "inject" {
        return (vec!["--credentials".into(), policy.into()], None);
    }
    let dir = std::env::temp_dir().join(unique("java-inject"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("id"), "admin").unwrap();
    std::fs::write(dir.join("secret"), "adminsecret").unwrap();
    let config = ConfigFile::new(&format!(
        "credentials = \"inject\"\n[inject]\n\"s3.access-key-id\" = {{ file = \"{0}/id\" }}\n\
         \"s3.secret-access-key\" = {{ file = \"{0}/secret\" }}\n",
        dir.display()
    ));
    let flags = vec!["--config".into(), config.path().to_owned()];
    (flags, Some(config))
}

/// The client through icecache: under `inject` it brings no S3 keys of its own (icecache gives
/// them); otherwise it is the direct client's twin.
fn through(mut client: Value, policy: &str) -> Value {
    if policy == "inject" {
        let properties = client.as_object_mut().unwrap();
        properties.remove("s3.access-key-id");
        properties.remove("s3.secret-access-key");
    }
    client
}

/// Runs the scenario through icecache under each policy, in front of `upstream`, reading both
/// ways; `direct` is the client for the catalog itself.
async fn scenario_under_every_policy(
    catalog_name: &str,
    upstream: &str,
    client: fn(&str) -> Value,
) {
    for policy in POLICIES {
        let (flags, _config) = policy_flags(policy);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let icecache = Icecache::start(upstream, &flags).await;
        let report = Agent::shared()
            .call(json!({
                "op": "scenario",
                "via": through(client(&icecache.url), policy),
                "direct": client(upstream),
                "namespace": unique("java"),
            }))
            .await;
        assert_same_everywhere(&report);
        let local = metric(&icecache.metrics().await, LOCAL_304S);
        assert!(
            local > 0.0,
            "{policy}: the client's table cache was answered locally"
        );
        crate::compatibility::record(
            &format!("java-{catalog_name}-{policy}"),
            json!({ "client": "Iceberg Java client 1.11.0", "catalog": catalog_name,
                    "policy": policy, "identical": true, "steps": report["steps"].as_array().map(Vec::len),
                    "local_304s": local }),
        );
    }
}

#[tokio::test]
async fn the_java_client_sees_the_same_seaweedfs_catalog_through_icecache_under_every_policy() {
    scenario_under_every_policy("SeaweedFS 4.48", &catalog(), seaweedfs_client).await;
}

#[tokio::test]
async fn the_java_client_sees_the_same_reference_catalog_through_icecache_under_every_policy() {
    let reference = ReferenceCatalog::shared().await;
    scenario_under_every_policy("Iceberg reference server 1.11.0", &reference.url, client).await;
}

/// Twenty loads of one table by one Java client: directly, then through icecache; how many
/// reached the catalog each way, and how many icecache answered with a local 304.
async fn twenty_loads(catalog_name: &str, upstream: &str, client: fn(&str) -> Value, table: &str) {
    let around = Relay::start(upstream).await;
    let behind = Relay::start(upstream).await;
    let icecache = Icecache::start(&behind.url, &["--fresh-for", "1h"]).await;
    let name = table.rsplit('.').next().unwrap();
    let mut seen = Vec::new();
    for (uri, relay) in [
        (around.url.as_str(), &around),
        (icecache.url.as_str(), &behind),
    ] {
        let locations = Agent::shared()
            .call(json!({ "op": "loads", "catalog": client(uri), "table": table, "times": 20 }))
            .await;
        let distinct: BTreeSet<&str> = locations
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(distinct.len(), 1, "{locations}");
        seen.push(relay.count("GET", &format!("/tables/{name}")));
    }
    let local = metric(&icecache.metrics().await, LOCAL_304S);
    assert_eq!(seen[0], 20, "directly, every load reaches the catalog");
    assert_eq!(seen[1], 1, "through icecache, only the first");
    assert_eq!(local, 19.0, "every later load was a local 304");
    crate::compatibility::record(
        &format!("java-{catalog_name}-loads"),
        json!({ "client": "Iceberg Java client 1.11.0", "catalog": catalog_name, "loads": 20,
                "catalog_requests_direct": seen[0], "catalog_requests_through": seen[1],
                "local_304s": local }),
    );
}

#[tokio::test]
async fn repeated_loads_from_the_java_clients_table_cache_are_local_304s_in_front_of_seaweedfs() {
    let api = Api::new(&catalog()).await;
    let (namespace, table) = api.fresh_table("java304").await;
    twenty_loads(
        "SeaweedFS 4.48",
        &catalog(),
        seaweedfs_client,
        &format!("{namespace}.{table}"),
    )
    .await;
}

#[tokio::test]
async fn repeated_loads_from_the_java_clients_table_cache_are_local_304s_in_front_of_the_reference_catalog(
) {
    let reference = ReferenceCatalog::shared().await;
    let table = crate::jvm::reference_table(&reference.url).await;
    twenty_loads(
        "Iceberg reference server 1.11.0",
        &reference.url,
        client,
        &table,
    )
    .await;
}

#[tokio::test]
async fn a_commit_through_another_java_client_is_seen_on_the_next_load() {
    let icecache = Icecache::start(&catalog(), &["--fresh-for", "1h"]).await;
    let api = Api::new(&catalog()).await;
    let (namespace, table) = api.fresh_table("javacommit").await;
    let seen = Agent::shared()
        .call(json!({
            "op": "commit-seen",
            "catalog": seaweedfs_client(&icecache.url),
            "table": format!("{namespace}.{table}"),
        }))
        .await;
    assert_ne!(seen["committed"], seen["before"], "{seen}");
    assert_eq!(seen["after"], seen["committed"], "{seen}");
}

/// A client with nothing of its own: what it holds for a table is what the answer gave it.
fn bare_client(uri: &str) -> Value {
    json!({ "uri": uri, "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": "eu" })
}

async fn vending_catalog(lifetime: Duration) -> StandIn {
    let catalog = StandIn::start(Shape {
        lifetime,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    catalog
}

#[tokio::test]
async fn the_java_client_never_holds_an_expired_vended_credential_after_a_local_304() {
    // Credentials live 20 s; icecache serves them for half of that, and the client's table cache
    // keeps what its last 200 gave it on every 304.
    let catalog = vending_catalog(Duration::from_secs(20)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    // The stand-in's /v1/config vends a secret key alone; the client brings the other half.
    let mut client = bare_client(&icecache.url);
    client["s3.access-key-id"] = json!("client-own");
    let loads = Agent::shared()
        .call(json!({
            "op": "credentials",
            "catalog": client,
            "table": "db.t",
            "times": 30,
            "interval-ms": 1000,
        }))
        .await;
    let mut keys = BTreeSet::new();
    for load in loads.as_array().unwrap() {
        let now = load["now-ms"].as_i64().unwrap();
        let expires = load["expires-at-ms"].as_i64().unwrap();
        assert!(
            expires > now,
            "the client held an expired credential: {load}"
        );
        assert!(expires < i64::MAX, "it held a vended credential: {load}");
        keys.insert(
            load["access-key-id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert!(keys.len() >= 2, "the credentials were renewed: {keys:?}");
    let metrics = icecache.metrics().await;
    assert!(
        metric(&metrics, LOCAL_304S) >= 5.0,
        "loads in between were local 304s"
    );
}

#[tokio::test]
async fn under_strip_the_java_client_loads_with_local_304s_and_holds_no_vended_key() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let loads = Agent::shared()
        .call(json!({
            "op": "credentials",
            "catalog": bare_client(&icecache.url),
            "table": "db.t",
            "times": 5,
            "interval-ms": 0,
        }))
        .await;
    for load in loads.as_array().unwrap() {
        assert_eq!(load["access-key-id"], Value::Null, "{load}");
        assert_eq!(load["expires-at-ms"], i64::MAX, "{load}");
    }
    assert_eq!(metric(&icecache.metrics().await, LOCAL_304S), 4.0);
}

#[tokio::test]
async fn under_inject_the_java_client_holds_the_injected_key_through_local_304s() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let secret = std::env::temp_dir().join(unique("java-injected"));
    std::fs::write(&secret, "INJECTED-SECRET").unwrap();
    let config = ConfigFile::new(&format!(
        "credentials = \"inject\"\n[inject]\n\"s3.access-key-id\" = {{ file = \"{0}.id\" }}\n\
         \"s3.secret-access-key\" = {{ file = \"{0}\" }}\n",
        secret.display()
    ));
    std::fs::write(format!("{}.id", secret.display()), "INJECTED-KEY").unwrap();
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let loads = Agent::shared()
        .call(json!({
            "op": "credentials",
            "catalog": bare_client(&icecache.url),
            "table": "db.t",
            "times": 5,
            "interval-ms": 0,
        }))
        .await;
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(format!("{}.id", secret.display()));
    for load in loads.as_array().unwrap() {
        assert_eq!(load["access-key-id"], "INJECTED-KEY", "{load}");
    }
    assert_eq!(metric(&icecache.metrics().await, LOCAL_304S), 4.0);
}

#[tokio::test]
async fn the_java_clients_existence_check_through_icecache_agrees_with_the_catalog() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let api = Api::new(&catalog()).await;
    let (namespace, table) = api.fresh_table("javaexists").await;
    for (name, expected) in [(table.as_str(), true), ("missing", false)] {
        for uri in [icecache.url.as_str(), catalog().as_str()] {
            let exists = Agent::shared()
                .call(json!({
                    "op": "exists",
                    "catalog": seaweedfs_client(uri),
                    "table": format!("{namespace}.{name}"),
                }))
                .await;
            assert_eq!(exists, expected, "{name} through {uri}");
        }
    }
}

#[tokio::test]
async fn a_commit_that_lost_a_race_is_retried_and_lands_whoever_won_it() {
    let api = Api::new(&catalog()).await;
    for other_through_icecache in [true, false] {
        let relay = Relay::start(&catalog()).await;
        let icecache = Icecache::start(&relay.url, &["--fresh-for", "1h"]).await;
        let (namespace, table) = api.fresh_table("javarace").await;
        let other = if other_through_icecache {
            seaweedfs_client(&icecache.url)
        } else {
            seaweedfs_client(&catalog())
        };
        let outcome = Agent::shared()
            .call(json!({
                "op": "conflict",
                "writer": seaweedfs_client(&icecache.url),
                "other": other,
                "table": format!("{namespace}.{table}"),
            }))
            .await;
        let how = if other_through_icecache {
            "the other writer through icecache"
        } else {
            "the other writer around icecache"
        };
        assert_eq!(outcome["committed"], true, "{how}: {outcome}");
        assert_eq!(
            outcome["files"].as_array().map(Vec::len),
            Some(2),
            "{how}: both appends are in the table: {outcome}"
        );
        // Through icecache the writer's refresh before committing sees the other commit; around
        // it, the refresh is served from the cache, the catalog refuses the commit once (409),
        // and the retry's refresh sees the catalog's state.
        let refused = relay.statuses().iter().filter(|s| **s == 409).count();
        let expected = if other_through_icecache { 0 } else { 1 };
        assert_eq!(refused, expected, "{how}: refused attempts");
    }
}
