//! Vended credentials and their expiry. No catalog that runs here vends credentials (SeaweedFS
//! returns none), so these tests use a small vending upstream: it answers loadTable with a body
//! whose `config` holds fresh S3 keys that expire after a lifetime the test chooses, and counts
//! the loads it served. It stands in only for that; everything else is tested against SeaweedFS.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::Value;
use support::fake::{json, Fake};
use support::Icecache;

/// The vending upstream: each loadTable answer holds fresh S3 keys for the caller.
async fn vending_catalog(lifetime: Duration) -> Fake {
    Fake::start(move |request, n| vend(request, n, lifetime)).await
}

fn vend(request: &Request<Incoming>, n: u64, lifetime: Duration) -> Response<Full<Bytes>> {
    let expires = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + lifetime;
    let caller = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("anonymous")
        .to_owned();
    json(serde_json::json!({
        "metadata-location": "s3://bucket/db/t/metadata/v1.metadata.json",
        "metadata": { "format-version": 2, "table-uuid": "6b1b3c3e-0000-4000-8000-000000000001" },
        "config": {
            "s3.access-key-id": format!("AK-{n}-{caller}"),
            "s3.secret-access-key": format!("SK-{n}"),
            "s3.session-token": format!("ST-{n}"),
            "s3.session-token-expires-at-ms": (expires.as_millis() as u64).to_string(),
        }
    }))
}

const PATH: &str = "/v1/namespaces/db/tables/t";

async fn load(icecache: &Icecache, if_none_match: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}{PATH}", icecache.url))
        .bearer_auth("caller-a");
    if let Some(tag) = if_none_match {
        request = request.header(IF_NONE_MATCH, tag);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn credentials_are_never_served_past_expiry_minus_margin() {
    let catalog = vending_catalog(Duration::from_secs(2)).await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--fresh-for", "1h", "--stale-if-error", "1h"],
    )
    .await;
    let first: Value = load(&icecache, None).await.json().await.unwrap();
    let second = load(&icecache, None).await;
    assert_eq!(
        second.headers()["x-cache"],
        "HIT",
        "servable for about 1 s of the 2 s lifetime"
    );
    assert_eq!(catalog.requests(), 1);
    // Past expiry minus the margin (half of the 2 s lifetime): a new load from the catalog.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let third = load(&icecache, None).await;
    assert_eq!(third.headers()["x-cache"], "MISS");
    assert_eq!(catalog.requests(), 2);
    let third: Value = third.json().await.unwrap();
    assert_ne!(
        third["config"]["s3.access-key-id"],
        first["config"]["s3.access-key-id"]
    );
}

#[tokio::test]
async fn a_304_is_refused_once_the_credentials_it_would_confirm_are_outside_their_window() {
    let catalog = vending_catalog(Duration::from_secs(2)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let first = load(&icecache, None).await;
    let tag = first.headers()[ETAG].to_str().unwrap().to_owned();
    assert_eq!(load(&icecache, Some(&tag)).await.status(), 304);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = load(&icecache, Some(&tag)).await;
    assert_eq!(
        later.status(),
        200,
        "the client must get fresh credentials, not a 304"
    );
    assert_ne!(later.headers()[ETAG].to_str().unwrap(), tag);
}

#[tokio::test]
async fn long_lived_credentials_are_cached_normally() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    load(&icecache, None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(load(&icecache, None).await.headers()["x-cache"], "HIT");
    assert_eq!(catalog.requests(), 1);
}

#[tokio::test]
async fn each_caller_gets_the_credentials_vended_for_it() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let client = reqwest::Client::new();
    let mut keys = Vec::new();
    for caller in ["caller-a", "caller-b", "caller-a", "caller-b"] {
        let body: Value = client
            .get(format!("{}{PATH}", icecache.url))
            .bearer_auth(caller)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = body["config"]["s3.access-key-id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            key.ends_with(&format!("Bearer {caller}")),
            "{caller} got {key}"
        );
        keys.push(key);
    }
    assert_eq!(keys[0], keys[2]);
    assert_eq!(keys[1], keys[3]);
    assert_eq!(catalog.requests(), 2);
}
