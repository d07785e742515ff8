//! What the tier's tests ask of a replica beyond a load: the stand-in they share, the version a
//! replica serves, a commit through it, and a Redis user with the least rights.

use std::time::Duration;

use serde_json::Value;

use crate::support::cluster::{load, Redis, Tier, TABLE};
use crate::support::standin::{version_of, Shape, StandIn};
use crate::support::{x_cache, PATIENCE};

pub async fn standin(shape: Shape) -> StandIn {
    let standin = StandIn::start(shape).await;
    standin.create("t");
    standin
}

pub async fn version_at(url: &str) -> u64 {
    let response = load(url, "alice").await;
    assert_eq!(response.status(), 200);
    version_of(&response.json::<Value>().await.unwrap()).unwrap()
}

pub async fn commit(url: &str) -> u64 {
    let response = crate::support::empty_commit(&format!("{url}{TABLE}"), "alice").await;
    assert_eq!(response.status(), 200);
    version_of(&response.json::<Value>().await.unwrap()).unwrap()
}

/// A commit through `url`: its status and the Iceberg error type when it failed.
pub async fn try_commit(url: &str) -> (u16, Option<String>) {
    let answer = crate::support::empty_commit(&format!("{url}{TABLE}"), "alice").await;
    let status = answer.status().as_u16();
    if status == 200 {
        return (status, None);
    }
    let body: serde_json::Value = answer.json().await.unwrap();
    (status, body["error"]["type"].as_str().map(str::to_owned))
}

/// A write Redis cannot be told of is never answered as a success: refused before the catalog
/// (503) or answered as of unknown outcome (502).
pub fn never_a_success(answer: &(u16, Option<String>), what: &str) {
    let kind = answer.1.as_deref();
    match answer.0 {
        503 => assert_eq!(kind, Some("ServiceUnavailableException"), "{what}"),
        502 => assert_eq!(kind, Some("CommitStateUnknownException"), "{what}"),
        status => panic!("{what}: a write nobody could be told of answered {status}"),
    }
}

/// Loads through `url` until one serves at least `version`.
pub async fn seen_eventually(url: &str, version: u64) {
    let what = format!("{url} serving version {version}");
    crate::support::eventually(&what, || async { version_at(url).await >= version }).await;
}

/// A table loaded through replica 0 (a miss) is served by every other replica from what it
/// shared in Redis (`x-cache: SHARED`), with one catalog fetch for the tier.
pub async fn loaded_once_and_shared(tier: &Tier, catalog: &StandIn) {
    assert_eq!(x_cache(&load(tier.url(0), "alice").await), "MISS");
    for replica in 1..tier.replicas.len() {
        let response = load(tier.url(replica), "alice").await;
        assert_eq!(response.status(), 200);
        assert_eq!(x_cache(&response), "SHARED", "replica {replica}");
    }
    assert_eq!(catalog.loads("t"), 1);
}

/// The least a replica's Redis user needs, as the README gives it.
pub const ACL: &[&str] = &[
    "on",
    "~icecache:*",
    "&icecache:*",
    "+@read",
    "+@write",
    "+@pubsub",
    "+@scripting",
    "+@connection",
    "-@dangerous",
];

pub fn restricted_user(redis: &Redis, user: &str) -> String {
    let mut args = vec!["ACL", "SETUSER", user, ">tier-password"];
    args.extend_from_slice(ACL);
    redis.command(&args);
    redis.url_as(user, "tier-password")
}

/// The version `url` serves, polled until it reflects `committed` or `PATIENCE` has passed (a
/// replica under `bounded` catches up when the news arrives, or when it notices the silence;
/// without either it would serve the old version for its whole `fresh_for`).
pub async fn version_eventually(url: &str, committed: u64) -> u64 {
    let started = std::time::Instant::now();
    loop {
        let seen = version_at(url).await;
        if seen >= committed || started.elapsed() >= PATIENCE {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A counter of the replica at `admin`'s metrics, polled until it reaches `at_least` or
/// `PATIENCE` has passed (what a heartbeat does is seen after its next period, not at once).
pub async fn counter_eventually(
    replica: &crate::support::Icecache,
    series: &str,
    at_least: f64,
) -> f64 {
    let started = std::time::Instant::now();
    loop {
        let seen = crate::support::metric(&replica.metrics().await, series);
        if seen >= at_least || started.elapsed() >= PATIENCE {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
