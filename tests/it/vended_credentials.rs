//! Vended credentials, identity and credential policies. No catalog that runs here vends
//! credentials (SeaweedFS returns none), so these tests use a small vending upstream: it answers
//! loadTable with a body whose `config` and `storage-credentials` hold fresh S3 keys for the
//! caller, expiring after a lifetime the test chooses; it refuses the caller `forbidden` with
//! 403, and records what it received. It stands in only for that; the strip policy with a real
//! client is tested against SeaweedFS at the end of this file.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::fake::{json, Fake};
use crate::support::Icecache;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::Value;

/// The vending upstream: each loadTable answer holds fresh S3 keys for the caller.
async fn vending_catalog(lifetime: Duration) -> Fake {
    vending_with_expiry(lifetime, "s3.session-token-expires-at-ms").await
}

/// A catalog that says when its credentials expire under `expiry_key` only.
async fn vending_with_expiry(lifetime: Duration, expiry_key: &'static str) -> Fake {
    Fake::start(move |request, n| vend(request, n, lifetime, expiry_key)).await
}

fn vend(
    request: &Request<Incoming>,
    n: u64,
    lifetime: Duration,
    expiry_key: &str,
) -> Response<Full<Bytes>> {
    let expires = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + lifetime;
    let caller = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("anonymous")
        .to_owned();
    if caller == "Bearer forbidden" {
        let mut refused = json(serde_json::json!({
            "error": { "message": "not allowed", "type": "ForbiddenException", "code": 403 }
        }));
        *refused.status_mut() = http::StatusCode::FORBIDDEN;
        return refused;
    }
    let mut config = serde_json::json!({
        "s3.access-key-id": format!("AK-{n}-{caller}"),
        "s3.secret-access-key": format!("SK-{n}"),
        "s3.session-token": format!("ST-{n}"),
        "s3.endpoint": "http://s3.local",
    });
    config[expiry_key] = serde_json::json!((expires.as_millis() as u64).to_string());
    json(serde_json::json!({
        "metadata-location": "s3://bucket/db/t/metadata/v1.metadata.json",
        "metadata": { "format-version": 2, "table-uuid": "6b1b3c3e-0000-4000-8000-000000000001" },
        "config": config,
        "storage-credentials": [
            { "prefix": "s3://bucket/db", "config": { "s3.access-key-id": format!("SC-{n}-{caller}") } }
        ]
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

/// Each way a catalog names the expiry: the Java client's key, and Polaris's `expiration-time`.
#[tokio::test]
async fn credentials_are_never_served_past_expiry_minus_margin() {
    tokio::join!(
        never_served_past_expiry_minus_margin("s3.session-token-expires-at-ms"),
        never_served_past_expiry_minus_margin("expiration-time"),
    );
}

async fn never_served_past_expiry_minus_margin(expiry_key: &'static str) {
    // Lifetimes long enough that the first two loads fall in the window on any machine.
    let catalog = vending_with_expiry(Duration::from_secs(8), expiry_key).await;
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
        "{expiry_key}: servable for about 4 s of the 8 s lifetime"
    );
    assert_eq!(catalog.requests(), 1);
    // Past expiry minus the margin (half of the 8 s lifetime): a new load from the catalog.
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let third = load(&icecache, None).await;
    assert_eq!(third.headers()["x-cache"], "MISS", "{expiry_key}");
    assert_eq!(catalog.requests(), 2);
    let third: Value = third.json().await.unwrap();
    assert_ne!(
        third["config"]["s3.access-key-id"],
        first["config"]["s3.access-key-id"]
    );
}

#[tokio::test]
async fn a_304_is_refused_once_the_credentials_it_would_confirm_are_outside_their_window() {
    let catalog = vending_catalog(Duration::from_secs(8)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let first = load(&icecache, None).await;
    let tag = first.headers()[ETAG].to_str().unwrap().to_owned();
    assert_eq!(load(&icecache, Some(&tag)).await.status(), 304);
    tokio::time::sleep(Duration::from_millis(4100)).await;
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

async fn load_as(icecache: &Icecache, caller: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}{PATH}", icecache.url))
        .header("x-iceberg-access-delegation", "vended-credentials");
    if let Some(caller) = caller {
        request = request.bearer_auth(caller);
    }
    request.send().await.unwrap()
}

/// icecache sharing one stripped body among callers, each checked upstream.
async fn revalidating(catalog: &Fake, extra: &[&str]) -> Icecache {
    let mut flags = vec![
        "--identity",
        "revalidate",
        "--credentials",
        "strip",
        "--fresh-for",
        "1h",
    ];
    flags.extend_from_slice(extra);
    Icecache::start(&catalog.url, &flags).await
}

fn authorizations(catalog: &Fake) -> Vec<String> {
    catalog
        .headers()
        .iter()
        .map(|h| {
            h.get("authorization")
                .map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn a_caller_without_authorization_never_gets_an_authenticated_callers_entry() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    load_as(&icecache, Some("caller-a")).await;
    let anonymous: Value = load_as(&icecache, None).await.json().await.unwrap();
    assert_eq!(catalog.requests(), 2);
    let key = anonymous["config"]["s3.access-key-id"].as_str().unwrap();
    assert!(key.ends_with("anonymous"), "{key}");
}

#[tokio::test]
async fn strip_serves_no_secret_and_asks_the_catalog_to_vend_nothing() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let response = load_as(&icecache, Some("caller-a")).await;
    let tag = response.headers()[ETAG].to_str().unwrap().to_owned();
    let text = response.text().await.unwrap();
    for secret in ["AK-", "SK-", "ST-", "SC-", "expires-at"] {
        assert!(!text.contains(secret), "{secret} served: {text}");
    }
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["config"]["s3.endpoint"], "http://s3.local");
    assert!(body.get("storage-credentials").is_none());
    assert!(catalog
        .headers()
        .iter()
        .all(|h| h.get("x-iceberg-access-delegation").is_none()));
    // The ETag is of the stripped body: a second load matches it.
    let again = reqwest::Client::new()
        .get(format!("{}{PATH}", icecache.url))
        .bearer_auth("caller-a")
        .header(IF_NONE_MATCH, &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let metrics = icecache.metrics().await;
    assert!(crate::support::metric(&metrics, "icecache_credentials_stripped_total") >= 1.0);
}

#[tokio::test]
async fn inject_serves_configured_keys_read_from_env_and_file() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let dir = std::env::temp_dir().join(format!("icecache-inject-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "secret-from-file\n").unwrap();
    let config = dir.join("icecache.toml");
    std::fs::write(
        &config,
        format!(
            "credentials = \"inject\"\n[inject]\n\
             \"s3.access-key-id\" = {{ env = \"TEST_INJECT_KEY\" }}\n\
             \"s3.secret-access-key\" = {{ file = \"{}\" }}\n\
             \"client.region\" = {{ value = \"eu-west-1\" }}\n",
            secret_file.display()
        ),
    )
    .unwrap();
    let icecache = Icecache::start_with_env(
        &catalog.url,
        &["--config", config.to_str().unwrap()],
        &[("TEST_INJECT_KEY", "key-from-env")],
    )
    .await;
    for expected in ["MISS", "HIT"] {
        let response = load_as(&icecache, Some("caller-a")).await;
        assert_eq!(response.headers()["x-cache"], expected);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["config"]["s3.access-key-id"], "key-from-env");
        assert_eq!(body["config"]["s3.secret-access-key"], "secret-from-file");
        assert_eq!(body["config"]["client.region"], "eu-west-1");
        assert_eq!(body["config"]["s3.endpoint"], "http://s3.local");
        assert!(body["config"].get("s3.session-token").is_none());
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn revalidate_checks_each_new_caller_upstream_with_its_own_token() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = revalidating(&catalog, &[]).await;
    let a = load_as(&icecache, Some("caller-a")).await;
    assert_eq!(a.headers()["x-cache"], "MISS");
    let a_body = a.bytes().await.unwrap();
    let b = load_as(&icecache, Some("caller-b")).await;
    assert_eq!(b.status(), 200);
    assert_eq!(b.headers()["x-cache"], "REVALIDATED");
    assert_eq!(b.bytes().await.unwrap(), a_body, "one shared body");
    assert_eq!(
        authorizations(&catalog),
        ["Bearer caller-a", "Bearer caller-b"]
    );
    let b_again = load_as(&icecache, Some("caller-b")).await;
    assert_eq!(b_again.headers()["x-cache"], "HIT");
    assert_eq!(catalog.requests(), 2);
}

#[tokio::test]
async fn revalidate_returns_the_catalogs_refusal_even_when_the_body_is_cached() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = revalidating(&catalog, &[]).await;
    assert_eq!(load_as(&icecache, Some("caller-a")).await.status(), 200);
    let forbidden = load_as(&icecache, Some("forbidden")).await;
    assert_eq!(forbidden.status(), 403);
    let body: Value = forbidden.json().await.unwrap();
    assert_eq!(body["error"]["code"], 403);
    let anonymous = load_as(&icecache, None).await;
    assert_eq!(
        anonymous.status(),
        200,
        "the vending catalog lets anonymous callers in"
    );
    assert_eq!(
        authorizations(&catalog),
        ["Bearer caller-a", "Bearer forbidden", "-"]
    );
}

#[tokio::test]
async fn revalidate_confirmations_expire_after_authz_ttl() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = revalidating(&catalog, &["--authz-ttl", "2s"]).await;
    load_as(&icecache, Some("caller-a")).await;
    assert_eq!(
        load_as(&icecache, Some("caller-a")).await.headers()["x-cache"],
        "HIT"
    );
    assert_eq!(catalog.requests(), 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let later = load_as(&icecache, Some("caller-a")).await;
    assert_eq!(later.headers()["x-cache"], "REVALIDATED");
    assert_eq!(catalog.requests(), 2);
}

#[tokio::test]
async fn shared_identity_serves_every_caller_one_stripped_entry() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let icecache = Icecache::start(
        &catalog.url,
        &[
            "--identity",
            "shared",
            "--credentials",
            "strip",
            "--fresh-for",
            "1h",
        ],
    )
    .await;
    load_as(&icecache, Some("caller-a")).await;
    let b = load_as(&icecache, Some("caller-b")).await;
    assert_eq!(b.headers()["x-cache"], "HIT");
    assert_eq!(catalog.requests(), 1);
}

#[tokio::test]
async fn under_strip_pyiceberg_still_loads_and_scans_with_its_own_keys() {
    let relay = crate::support::relay::Relay::start(&crate::support::catalog()).await;
    let icecache = Icecache::start(&relay.url, &["--credentials", "strip"]).await;
    let namespace = crate::support::unique("ns_strip");
    let appended =
        crate::support::pyiceberg_async(&icecache.url, &["append", &namespace, "events", "4"])
            .await;
    let scanned =
        crate::support::pyiceberg_async(&icecache.url, &["scan", &namespace, "events"]).await;
    assert_eq!(scanned["rows"], 4);
    assert_eq!(scanned["snapshot"], appended["snapshot"]);
    let seen = relay.seen();
    assert!(seen
        .iter()
        .any(|s| s.path_and_query.contains("/tables/events")));
    assert!(
        seen.iter()
            .all(|s| s.headers.get("x-iceberg-access-delegation").is_none()),
        "pyiceberg asks for vended credentials; under strip the catalog must not hear it"
    );
}

/// Many callers, some forbidden, load several tables concurrently in a random order under
/// both a per-principal/passthrough and a revalidate/strip icecache: nobody ever receives
/// another caller's keys, and a forbidden caller never receives a table.
#[tokio::test]
async fn isolation_holds_for_random_concurrent_callers_under_every_policy() {
    let catalog = vending_catalog(Duration::from_secs(3600)).await;
    let per_principal = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let revalidate = revalidating(&catalog, &["--authz-ttl", "200ms"]).await;
    let client = reqwest::Client::new();
    // A fixed-seed linear congruential generator: random order, reproducible failures.
    let mut seed: u64 = 0x1ce_cac4e;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut tasks = Vec::new();
    for _ in 0..600 {
        let caller = match next(10) {
            0 => "forbidden".to_owned(),
            n => format!("caller-{n}"),
        };
        let table = format!("t{}", next(4));
        let strip = next(2) == 1;
        let base = if strip {
            revalidate.url.clone()
        } else {
            per_principal.url.clone()
        };
        let request = client
            .get(format!("{base}/v1/namespaces/db/tables/{table}"))
            .bearer_auth(&caller)
            .header("x-iceberg-access-delegation", "vended-credentials");
        tasks.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let body = response.text().await.unwrap();
            (caller, strip, status, body)
        }));
        if next(8) == 0 {
            tokio::time::sleep(Duration::from_millis(next(30))).await;
        }
    }
    for task in tasks {
        let (caller, strip, status, body) = task.await.unwrap();
        if caller == "forbidden" {
            assert_eq!(status, 403, "a forbidden caller got {status}: {body:.120}");
            continue;
        }
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).unwrap();
        let key = &body["config"]["s3.access-key-id"];
        if strip {
            assert!(key.is_null(), "a stripped body carried {key}");
        } else {
            let key = key.as_str().unwrap();
            assert!(
                key.ends_with(&format!("-Bearer {caller}")),
                "{caller} received {key}"
            );
        }
    }
}
