//! The catalog's protection: never more than `upstream_max_in_flight` of icecache's requests at
//! the catalog; at most `upstream_queue` more wait, each at most `upstream_queue_timeout`; any
//! other is refused without reaching the catalog (a load served stale when it may be, else a
//! 503 with `Retry-After`), and nothing is lost or served to the wrong request.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::standin::{Shape, StandIn};
use crate::support::{eventually, metric, x_cache, Icecache};
use serde_json::Value;

async fn catalog(tables: usize) -> StandIn {
    let catalog = StandIn::start(Shape::default()).await;
    for n in 0..tables {
        catalog.create(&format!("t{n}"));
    }
    catalog
}

fn url(icecache: &Icecache, table: &str) -> String {
    format!("{}/v1/namespaces/db/tables/{table}", icecache.url)
}

async fn load(icecache: &Icecache, table: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(url(icecache, table))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap()
}

async fn shed(icecache: &Icecache) -> f64 {
    metric(
        &icecache.metrics().await,
        r#"icecache_upstream_errors_total{kind="shed"}"#,
    )
}

/// A refusal says to come back, in an Iceberg error.
async fn assert_refused(response: reqwest::Response) {
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["type"], "ServiceUnavailableException",
        "{body}"
    );
}

#[tokio::test]
async fn a_burst_of_cold_loads_never_puts_more_than_the_bound_at_the_catalog() {
    let catalog = catalog(50).await;
    let flags = [
        "--upstream-max-in-flight",
        "4",
        "--upstream-queue",
        "8",
        "--upstream-queue-timeout",
        "1h",
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    catalog.hold_loads();
    // 200 loads over 50 tables: 50 fills, 4 at the catalog, 8 waiting, the rest refused.
    let loads: Vec<_> = (0..200)
        .map(|n| {
            let (url, table) = (url(&icecache, &format!("t{}", n % 50)), n % 50);
            tokio::spawn(async move {
                let response = reqwest::Client::new()
                    .get(url)
                    .bearer_auth("alice")
                    .send()
                    .await
                    .unwrap();
                (table, response)
            })
        })
        .collect();
    // Refusals and arrivals at the catalog are counted at different places: both are awaited
    // (the fourth admitted fill may still be on its way when the last refusal is counted).
    eventually(
        "the fills beyond the queue refused, the bound at the catalog",
        || async { shed(&icecache).await >= 38.0 && catalog.seen().len() >= 4 },
    )
    .await;
    assert_eq!(
        catalog.seen().len(),
        4,
        "only the bound reached the catalog"
    );
    catalog.release_loads();
    let mut answered = HashSet::new();
    for load in loads {
        let (table, response) = load.await.unwrap();
        if response.status() == 503 {
            assert_refused(response).await;
            continue;
        }
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let location = body["metadata-location"].as_str().unwrap();
        assert!(location.contains(&format!("/t{table}/")), "{location}");
        answered.insert(table);
    }
    assert!(
        catalog.most_loads_at_once() <= 4,
        "{}",
        catalog.most_loads_at_once()
    );
    assert!(answered.len() >= 12, "the 12 admitted fills answered");
    assert_eq!(
        catalog.seen().len(),
        answered.len(),
        "one catalog load per table"
    );
}

#[tokio::test]
async fn a_load_refused_a_place_is_served_stale_within_stale_if_error() {
    let catalog = catalog(3).await;
    let flags = [
        "--upstream-max-in-flight",
        "1",
        "--upstream-queue",
        "0",
        "--fresh-for",
        "100ms",
        "--stale-if-error",
        "1h",
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    assert_eq!(load(&icecache, "t0").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    catalog.hold_loads();
    let holding = {
        let url = url(&icecache, "t1");
        tokio::spawn(async move { reqwest::Client::new().get(url).send().await })
    };
    eventually("t1 at the catalog", || async { catalog.loads("t1") == 1 }).await;
    let stale = load(&icecache, "t0").await;
    assert_eq!(stale.status(), 200);
    assert_eq!(x_cache(&stale), "STALE");
    assert_refused(load(&icecache, "t2").await).await;
    assert_eq!(
        catalog.loads("t2"),
        0,
        "a refusal costs the catalog nothing"
    );
    catalog.release_loads();
    assert_eq!(holding.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn a_request_waits_for_a_place_at_most_the_queue_timeout_and_writes_too() {
    let catalog = catalog(3).await;
    let flags = [
        "--upstream-max-in-flight",
        "1",
        "--upstream-queue",
        "1",
        "--upstream-queue-timeout",
        "300ms",
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    catalog.hold_loads();
    let holding = {
        let url = url(&icecache, "t0");
        tokio::spawn(async move { reqwest::Client::new().get(url).send().await })
    };
    eventually("t0 at the catalog", || async { catalog.loads("t0") == 1 }).await;
    let started = tokio::time::Instant::now();
    assert_refused(load(&icecache, "t1").await).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    let commit = reqwest::Client::new()
        .post(url(&icecache, "t2"))
        .json(&serde_json::json!({ "requirements": [], "updates": [] }))
        .send()
        .await
        .unwrap();
    assert_refused(commit).await;
    assert_eq!(
        catalog.version("t2"),
        Some(1),
        "the write never reached the catalog"
    );
    assert_eq!(shed(&icecache).await, 2.0);
    catalog.release_loads();
    assert_eq!(holding.await.unwrap().unwrap().status(), 200);
    assert_eq!(load(&icecache, "t1").await.status(), 200, "a place again");
}

/// Spec 1.11: a client's `Idempotency-Key` on a mutation reaches the catalog as the client sent
/// it, on every kind of write, and icecache adds none of its own.
#[tokio::test]
async fn an_idempotency_key_reaches_the_catalog_unchanged_on_every_write() {
    let catalog = catalog(1).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let client = reqwest::Client::new();
    let base = format!("{}/v1/namespaces/db", icecache.url);
    let writes = [
        (reqwest::Method::POST, format!("{base}/tables/t0"), "commit"),
        (reqwest::Method::POST, format!("{base}/tables"), "create"),
        (
            reqwest::Method::POST,
            format!("{}/v1/transactions/commit", icecache.url),
            "transaction",
        ),
        (reqwest::Method::DELETE, format!("{base}/tables/t0"), "drop"),
    ];
    for (n, (method, url, what)) in writes.into_iter().enumerate() {
        let key = format!("01937f4e-1c2b-7a3d-9e4f-5a6b7c8d9e{n:02}");
        let response = client
            .request(method, url)
            .bearer_auth("alice")
            .header("idempotency-key", &key)
            .json(
                &serde_json::json!({ "requirements": [], "updates": [], "name": "new",
                                       "table-changes": [] }),
            )
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{what}: {}",
            response.status()
        );
        let seen = catalog.seen();
        let sent = seen.last().expect("the write reached the catalog");
        let keys: Vec<_> = sent.headers.get_all("idempotency-key").iter().collect();
        assert_eq!(keys, [key.as_str()], "{what}");
    }
    let unkeyed = load(&icecache, "t0").await;
    assert_eq!(unkeyed.status(), 404, "the drop went through");
    let seen = catalog.seen();
    assert!(
        seen.last()
            .unwrap()
            .headers
            .get("idempotency-key")
            .is_none(),
        "none added to a load"
    );
}
