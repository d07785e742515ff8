//! The key is what the catalog sees: an entry is only ever filled by a request the catalog read
//! exactly as the key describes it. A query icecache cannot read unambiguously bypasses the
//! cache; a header the client names in `Connection` is gone before the key is made.

use crate::support::standin::{Shape, StandIn};
use crate::support::{catalog, pyiceberg_async, Api, Icecache};
use serde_json::Value;

#[tokio::test]
async fn a_repeated_snapshots_parameter_bypasses_the_cache_and_never_fills_another_mode() {
    let icecache = Icecache::start(&catalog(), &["--fresh-for", "1h"]).await;
    let api = Api::new(&icecache.url).await;
    let namespace = crate::support::unique("ns_keys");
    // Two appends: `all` holds two snapshots, `refs` only the one `main` points at.
    pyiceberg_async(&icecache.url, &["append", &namespace, "events", "1"]).await;
    pyiceberg_async(&icecache.url, &["append", &namespace, "events", "1"]).await;
    let path = format!("/namespaces/{namespace}/tables/events");
    let snapshots = |body: &Value| body["metadata"]["snapshots"].as_array().map_or(0, Vec::len);
    let direct = Api::new(&catalog()).await;
    let refs_direct: Value = direct.get_json(&format!("{path}?snapshots=refs")).await;
    let all_direct: Value = direct.get_json(&format!("{path}?snapshots=all")).await;
    assert!(
        snapshots(&refs_direct) < snapshots(&all_direct),
        "the modes differ here"
    );

    let ambiguous = api
        .get(&format!("{path}?snapshots=refs&snapshots=all"))
        .send()
        .await
        .unwrap();
    assert_eq!(ambiguous.status(), 200);
    assert_eq!(ambiguous.headers()["x-cache"], "BYPASS");
    let all: Value = api.get_json(&format!("{path}?snapshots=all")).await;
    assert_eq!(snapshots(&all), snapshots(&all_direct));
    let bare: Value = api.get_json(&path).await;
    assert_eq!(snapshots(&bare), snapshots(&all_direct));
    let refs: Value = api.get_json(&format!("{path}?snapshots=refs")).await;
    assert_eq!(snapshots(&refs), snapshots(&refs_direct));
}

#[tokio::test]
async fn a_repeated_or_unknown_parameter_of_any_kind_bypasses_the_cache() {
    let standin = StandIn::start(Shape::default()).await;
    standin.create("t");
    let icecache = Icecache::start(&standin.url, &[]).await;
    let client = reqwest::Client::new();
    for query in [
        "snapshots=all&snapshots=all",
        "referenced-by=db%1Fv&referenced-by=db%1Fw",
        "snapshots=ALL",
        "x=1",
        "snapshots=all;x=1",
    ] {
        let response = client
            .get(format!(
                "{}/v1/namespaces/db/tables/t?{query}",
                icecache.url
            ))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-cache"], "BYPASS", "{query}");
    }
    let metrics = icecache.metrics().await;
    assert_eq!(
        crate::support::metric(&metrics, "icecache_cache_entries"),
        0.0
    );
}

async fn keys_of(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    body["config"]["s3.access-key-id"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

#[tokio::test]
async fn a_delegation_header_named_in_connection_is_neither_sent_nor_keyed() {
    // The stand-in vends only when asked to with X-Iceberg-Access-Delegation.
    let standin = StandIn::start(Shape {
        vend_always: false,
        ..Shape::default()
    })
    .await;
    standin.create("t");
    let icecache = Icecache::start(&standin.url, &["--fresh-for", "1h"]).await;
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let client = reqwest::Client::new();
    let hop = client
        .get(&url)
        .bearer_auth("alice")
        .header("x-iceberg-access-delegation", "vended-credentials")
        .header("connection", "x-iceberg-access-delegation")
        .send()
        .await
        .unwrap();
    assert_eq!(
        keys_of(hop).await,
        "none",
        "the catalog was not asked to vend"
    );
    assert!(standin
        .seen()
        .iter()
        .all(|s| !s.headers.contains_key("x-iceberg-access-delegation")));
    let asked = client
        .get(&url)
        .bearer_auth("alice")
        .header("x-iceberg-access-delegation", "vended-credentials")
        .send()
        .await
        .unwrap();
    assert!(
        keys_of(asked).await.starts_with("AK-alice-"),
        "a caller who asks for credentials gets them, not the answer made without"
    );
}

#[tokio::test]
async fn authorization_named_in_connection_makes_the_caller_anonymous_for_the_key_too() {
    let standin = StandIn::start(Shape::default()).await;
    standin.create("t");
    let icecache = Icecache::start(&standin.url, &["--fresh-for", "1h"]).await;
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let client = reqwest::Client::new();
    let hop = client
        .get(&url)
        .bearer_auth("alice")
        .header("connection", "authorization")
        .send()
        .await
        .unwrap();
    assert!(keys_of(hop).await.starts_with("AK-anonymous-"));
    let alice = client.get(&url).bearer_auth("alice").send().await.unwrap();
    assert!(
        keys_of(alice).await.starts_with("AK-alice-"),
        "alice must never be served the anonymous caller's answer"
    );
}
