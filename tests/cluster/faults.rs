//! A tier under faults: Redis killed, restarted empty, refusing writes, started late, losing
//! writes; garbage and lost tokens and lease logs; a fill lease nobody releases; a subscription
//! revoked (partitions between one replica and Redis are in partitions.rs). Whatever breaks, a
//! load never reflects a state older than a write answered through the tier as a success, no
//! load fails because of Redis, and a write Redis cannot be told of is not answered as a success.

use std::time::{Duration, Instant};

use crate::replica::{
    commit, counter_eventually, never_a_success, restricted_user, seen_eventually, standin,
    try_commit, version_at, version_eventually,
};
use crate::support::cluster::{load, Redis, Tier, TABLE};
use crate::support::standin::{Shape, StandIn};
use crate::support::{metric, x_cache, PATIENCE};
use serde_json::Value;

/// Two replicas with a one-second lease in front of a catalog that answers after `delay`, and
/// replica A's load of the table under way (A holds the lease while it asks).
async fn holding_the_lease(
    delay: Duration,
) -> (
    StandIn,
    Redis,
    Tier,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let catalog = standin(Shape {
        delay,
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &[
            "--fresh-for",
            "1h",
            "--credentials",
            "strip",
            "--cluster-lease",
            "1s",
        ],
    )
    .await;
    let holder = tier.url(0).to_owned();
    let load = tokio::spawn(async move { reqwest::get(format!("{holder}{TABLE}")).await });
    // A asks the catalog only once it holds the lease.
    crate::support::eventually("A holding the lease", || async { catalog.loads("t") >= 1 }).await;
    (catalog, redis, tier, load)
}

#[tokio::test]
async fn a_replica_killed_while_holding_the_lease_holds_the_others_back_only_until_it_ends() {
    let (_catalog, _redis, mut tier, doomed) = holding_the_lease(Duration::from_millis(1500)).await;
    // The holder dies with the lease; the other replica's load must not wait for it forever.
    let started = Instant::now();
    let other = tier.url(1).to_owned();
    let waiting = tokio::spawn(async move { reqwest::get(format!("{other}{TABLE}")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tier.replicas[0].kill_now();
    let answer = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the other replica waited for a dead holder's lease for good")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), 200);
    // It waited on the lease, then asked alone (how long is printed, not asserted).
    let metrics = tier.replicas[1].metrics().await;
    assert!(metric(&metrics, "icecache_cluster_lease_waits_total") >= 1.0);
    eprintln!("answered {:?} after the holder died", started.elapsed());
    let _ = doomed.await;
}

#[tokio::test]
async fn killing_redis_under_load_fails_no_load_and_answers_no_write_it_could_hide() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let tier = Tier::start(
        3,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"],
    )
    .await;
    for replica in 0..3 {
        version_at(tier.url(replica)).await;
    }
    let urls: Vec<String> = (0..3).map(|r| tier.url(r).to_owned()).collect();
    let load_loop = tokio::spawn(async move {
        let mut failures = 0;
        for n in 0..600 {
            let response = load(&urls[n % 3], "alice").await;
            if response.status() != 200 {
                failures += 1;
            }
        }
        failures
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.kill();
    // No write can be told to the others: none is answered as a success, and under
    // `revalidate` a load on another replica sees what the catalog holds.
    for trial in 0..30 {
        let answer = try_commit(tier.url(trial)).await;
        never_a_success(&answer, &format!("trial {trial}"));
        let held = catalog.version("t").unwrap();
        assert!(
            version_at(tier.url(trial + 1)).await >= held,
            "trial {trial}"
        );
    }
    assert_eq!(
        load_loop.await.unwrap(),
        0,
        "failed loads while Redis was down"
    );
    let metrics = tier.replicas[1].metrics().await;
    assert_eq!(metric(&metrics, "icecache_cluster_degraded"), 1.0);
    // Redis comes back empty: the tier converges within seconds, and nothing stale is served.
    redis.restart().await;
    tier.wait_live().await;
    let held = catalog.version("t").unwrap();
    for replica in 0..3 {
        seen_eventually(tier.url(replica), held).await;
    }
    for trial in 0..30 {
        let committed = commit(tier.url(trial)).await;
        assert!(
            version_at(tier.url(trial + 2)).await >= committed,
            "after: trial {trial}"
        );
    }
}

#[tokio::test]
async fn replicas_started_before_redis_serve_loads_through_the_catalog_refuse_writes_then_join() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::not_started();
    let key = crate::support::cluster::KeyFile::new();
    let url = redis.url();
    let flags = [
        "--redis-url",
        &url,
        "--cluster-key-file",
        key.path(),
        "--fresh-for",
        "1h",
        "--workers",
        "1",
    ];
    let a = crate::support::Icecache::start(&catalog.url, &flags).await;
    let b = crate::support::Icecache::start(&catalog.url, &flags).await;
    assert_eq!(metric(&a.metrics().await, "icecache_cluster_degraded"), 1.0);
    // Degraded under revalidate: every load is answered, each one by asking the catalog.
    for n in 0..3 {
        let response = load(&b.url, "alice").await;
        assert_eq!(response.status(), 200);
        let phase = if n == 0 { "MISS" } else { "REVALIDATED" };
        assert_eq!(x_cache(&response), phase, "load {n}: a cold load is a miss");
    }
    // Writes are refused: the others could never be told of them.
    let version = catalog.version("t");
    let refused = crate::support::empty_commit(&format!("{}{TABLE}", a.url), "alice").await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "ServiceUnavailableException");
    assert_eq!(catalog.version("t"), version, "the catalog never saw it");
    let ready = reqwest::get(format!("{}/readyz", a.admin)).await.unwrap();
    assert_eq!(ready.status(), 503, "not ready before joining the tier");
    redis.restart().await;
    let tier = Tier {
        replicas: vec![a, b],
        key,
    };
    tier.wait_live().await;
    let ready = reqwest::get(format!("{}/readyz", tier.replicas[0].admin))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "ready once joined");
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
    assert_eq!(
        x_cache(&load(tier.url(1), "alice").await),
        "HIT",
        "live: served from memory again"
    );
}

#[tokio::test]
async fn a_write_tried_while_redis_was_away_is_never_hidden_by_what_came_before() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"],
    )
    .await;
    version_at(tier.url(1)).await;
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
    redis.kill();
    never_a_success(&try_commit(tier.url(0)).await, "with Redis away");
    let held = catalog.version("t").unwrap();
    redis.restart().await;
    tier.wait_live().await;
    seen_eventually(tier.url(1), held).await;
    // A flush (or a failover to an empty node) while all is well changes nothing either.
    let committed = commit(tier.url(0)).await;
    redis.flushall();
    assert!(version_at(tier.url(1)).await >= committed);
}

#[tokio::test]
async fn replicas_run_as_a_restricted_redis_user() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let url = restricted_user(&redis, "icecache");
    let tier = Tier::start_at(
        &[url.clone(), url],
        &catalog.url,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    assert_eq!(x_cache(&load(tier.url(0), "alice").await), "MISS");
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "SHARED");
    let committed = commit(tier.url(0)).await;
    assert_eq!(version_at(tier.url(1)).await, committed);
    for replica in &tier.replicas {
        let metrics = replica.metrics().await;
        assert_eq!(metric(&metrics, "icecache_cluster_redis_errors_total"), 0.0);
        assert_eq!(metric(&metrics, "icecache_cluster_degraded"), 0.0);
    }
}

#[tokio::test]
async fn a_replica_whose_channels_were_revoked_serves_no_write_it_missed() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    // B logs in as its own user, so its subscription can be taken away while A publishes.
    let urls = [
        restricted_user(&redis, "replica-a"),
        restricted_user(&redis, "replica-b"),
    ];
    let tier = Tier::start_at(&urls, &catalog.url, &["--fresh-for", "1h"]).await;
    let received = |metrics: &str| {
        metric(
            metrics,
            "icecache_cluster_invalidations_received_total{result=\"ok\"}",
        )
    };
    for trial in 0..3 {
        version_at(tier.url(1)).await;
        let before = received(&tier.replicas[1].metrics().await);
        // Revoking B's channel drops its subscription and refuses it again until restored.
        redis.command(&["ACL", "SETUSER", "replica-b", "resetchannels"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let committed = commit(tier.url(0)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        redis.command(&["ACL", "SETUSER", "replica-b", "&icecache:*"]);
        let seen = version_eventually(tier.url(1), committed).await;
        assert!(
            seen >= committed,
            "trial {trial}: B serves a state older than a write (fresh_for 1h)"
        );
        assert_eq!(
            received(&tier.replicas[1].metrics().await),
            before,
            "trial {trial}: the message was not missed"
        );
    }
}

/// Ways a live Redis refuses writes while still answering reads.
fn refuse_writes(redis: &Redis, how: &str) {
    match how {
        "out of memory" => {
            redis.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
            redis.command(&["CONFIG", "SET", "maxmemory", "1"]);
        }
        _ => {
            redis.command(&["ACL", "SETUSER", "icecache", "-@write"]);
        }
    }
}

fn accept_writes(redis: &Redis, how: &str) {
    match how {
        "out of memory" => {
            redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
        }
        _ => {
            redis.command(&[
                "ACL",
                "SETUSER",
                "icecache",
                "+@write",
                "-@dangerous",
                "+time",
            ]);
        }
    }
}

#[tokio::test]
async fn a_redis_that_refuses_writes_cannot_hide_a_write_from_any_replica() {
    for how in ["out of memory", "an ACL change"] {
        let catalog = standin(Shape::default()).await;
        let redis = Redis::start().await;
        let url = restricted_user(&redis, "icecache");
        let tier = Tier::start_at(
            &[url.clone(), url],
            &catalog.url,
            &["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"],
        )
        .await;
        version_at(tier.url(1)).await;
        refuse_writes(&redis, how);
        never_a_success(&try_commit(tier.url(0)).await, how);
        let held = catalog.version("t").unwrap();
        assert!(version_at(tier.url(1)).await >= held, "{how}");
        for replica in 0..2 {
            let what = format!("{how}: replica {replica} degraded");
            crate::support::eventually(&what, || async {
                let metrics = tier.replicas[replica].metrics().await;
                metric(&metrics, "icecache_cluster_degraded") == 1.0
            })
            .await;
        }
        accept_writes(&redis, how);
        tier.wait_live().await;
        for trial in 0..5 {
            let committed = commit(tier.url(trial)).await;
            assert!(
                version_at(tier.url(trial + 1)).await >= committed,
                "{how}: after"
            );
        }
    }
}

/// Token keys as they are in Redis now (the epoch, namespaces, tables).
fn token_keys(redis: &Redis) -> Vec<(String, Vec<u8>)> {
    redis
        .dump()
        .into_iter()
        .filter(|(key, _)| {
            key == "icecache:epoch"
                || key.starts_with("icecache:t:")
                || key.starts_with("icecache:n:")
        })
        .collect()
}

#[tokio::test]
async fn tokens_deleted_or_overwritten_never_bring_an_old_entry_back() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    // Strip: the old version stays shared in Redis, where only the tokens tell it is old.
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    for (trial, damage) in ["deleted", "garbage", "emptied"].iter().enumerate() {
        version_at(tier.url(1)).await;
        let committed = commit(tier.url(0)).await;
        for (key, _) in token_keys(&redis) {
            match *damage {
                "deleted" => drop(redis.command(&["DEL", &key])),
                "garbage" => redis.set(&key, b"\xff not a token \x00"),
                _ => redis.set(&key, b""),
            }
        }
        for replica in [1, 0] {
            assert!(
                version_at(tier.url(replica + trial)).await >= committed,
                "{damage}: replica {replica}"
            );
        }
        let metrics = tier.replicas[1].metrics().await;
        assert_eq!(
            metric(&metrics, "icecache_cluster_degraded"),
            0.0,
            "{damage}"
        );
    }
}

/// The lease log as Redis holds it (a hash), for a failover to restore.
const LOG: &str = "icecache:lease:log";

fn log_fields(redis: &Redis) -> Vec<String> {
    let mut connection = redis.connection().expect("redis answers");
    redis::cmd("HGETALL")
        .arg(LOG)
        .query(&mut connection)
        .expect("the lease log reads as a hash")
}

#[tokio::test]
async fn a_redis_that_loses_a_write_is_caught_by_the_next_heartbeat() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    let resets = "icecache_cluster_lease_resets_total";
    for trial in 0..3 {
        version_at(tier.url(1)).await;
        let reset_before = metric(&tier.replicas[1].metrics().await, resets);
        // What a lagging Redis replica would hold: everything before the commit, the lease
        // log among it.
        let before: Vec<(String, Vec<u8>)> = redis
            .dump()
            .into_iter()
            .filter(|(key, value)| !key.starts_with("icecache:l:") && value != b"(not a string)")
            .collect();
        let log = log_fields(&redis);
        assert!(!log.is_empty(), "the lease log is a hash");
        let committed = commit(tier.url(0)).await;
        // The failover: every string key back as it was, and the log.
        for (key, _) in redis.dump() {
            if before.iter().all(|(k, _)| *k != key) && !key.starts_with("icecache:lease:") {
                redis.command(&["DEL", &key]);
            }
        }
        for (key, value) in &before {
            redis.set(key, value);
        }
        let mut restore = vec!["HSET", LOG];
        restore.extend(log.iter().map(String::as_str));
        redis.command(&restore);
        // A replica's next heartbeat finds the log behind what it applied and starts a new
        // dataset: every replica drops what it holds, and no entry shared before matches.
        assert!(
            version_eventually(tier.url(1), committed).await >= committed,
            "trial {trial}: the lost token move brought the old version back"
        );
        let counted = counter_eventually(&tier.replicas[1], resets, reset_before + 1.0).await;
        assert!(counted > reset_before, "trial {trial}: no reset counted");
        for replica in 0..2 {
            assert!(
                version_at(tier.url(replica)).await >= committed,
                "trial {trial}: replica {replica} after the reset"
            );
        }
    }
}

#[tokio::test]
async fn a_lease_nobody_will_release_holds_fills_back_only_once() {
    let (_catalog, redis, mut tier, doomed) = holding_the_lease(Duration::from_millis(800)).await;
    let leases = redis.keys_starting("icecache:l:");
    assert_eq!(leases.len(), 1, "A holds the lease while it asks");
    // The holder dies, and its lease is made to outlive it.
    tier.replicas[0].kill_now();
    redis.command(&["PERSIST", &leases[0]]);
    let started = Instant::now();
    let answer = tokio::time::timeout(PATIENCE, reqwest::get(format!("{}{TABLE}", tier.url(1))))
        .await
        .expect("the other replica waited for a lease nobody will release for good")
        .unwrap();
    assert_eq!(answer.status(), 200);
    eprintln!("answered {:?} after the holder died", started.elapsed());
    assert_eq!(
        redis.command(&["EXISTS", &leases[0]]),
        "int(0)",
        "the lease expired"
    );
    let _ = doomed.await;
}

#[tokio::test]
async fn a_purge_of_a_namespace_that_names_nothing_purges_everything_on_every_replica() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    for query in [
        "namespace=.",
        "namespace=.&table=t",
        "namespace=%2E&table=t",
    ] {
        version_at(tier.url(1)).await;
        assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
        let changed = catalog.commit_directly("t");
        let purged = reqwest::Client::new()
            .post(format!("{}/cache/purge?{query}", tier.replicas[0].admin))
            .send()
            .await
            .unwrap();
        assert_eq!(purged.status(), 200, "{query}");
        assert!(
            version_at(tier.url(1)).await >= changed,
            "{query}: B kept its entry"
        );
    }
}

#[tokio::test]
async fn a_lease_log_overwritten_with_garbage_heals_and_hides_no_write() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    version_at(tier.url(1)).await;
    // Not hex, not a number, past what Lua's numbers hold exactly, negative, the wrong type.
    let damages: [&[&str]; 6] = [
        &["HSET", LOG, "dataset", "garbage"],
        &["HSET", LOG, "seq", "garbage"],
        &["HSET", LOG, "seq", "9007199254740993"],
        &["HSET", LOG, "seq", "-5"],
        &["DEL", LOG],
        &["SET", LOG, "a string"],
    ];
    for (trial, damage) in damages.iter().enumerate() {
        let what = damage.join(" ");
        redis.command(damage);
        let committed = commit(tier.url(trial)).await;
        assert!(version_at(tier.url(trial + 1)).await >= committed, "{what}");
        // Healed: a write is seen, and the tier serves from memory again.
        let committed = commit(tier.url(trial + 1)).await;
        assert!(version_at(tier.url(trial)).await >= committed, "{what}");
        crate::support::eventually(&format!("{what}: a hit again"), || async {
            version_at(tier.url(1)).await;
            x_cache(&load(tier.url(1), "alice").await) == "HIT"
        })
        .await;
        redis.command(&["DEL", LOG]);
        tier.wait_live().await;
    }
    for replica in &tier.replicas {
        let metrics = replica.metrics().await;
        assert_eq!(
            metric(&metrics, "icecache_cluster_writes_refused_total"),
            0.0
        );
    }
}

#[tokio::test]
async fn after_redis_restarts_empty_the_tier_trusts_its_memory_again() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let tier = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    version_at(tier.url(1)).await;
    redis.restart().await;
    tier.wait_live().await;
    // Trusted again once both replicas are heard in the new Redis.
    crate::support::eventually("B serving from memory again", || async {
        version_at(tier.url(1)).await;
        x_cache(&load(tier.url(1), "alice").await) == "HIT"
    })
    .await;
    let resets = |metrics: &str| metric(metrics, "icecache_cluster_lease_resets_total");
    let before = resets(&tier.replicas[1].metrics().await);
    assert!(before >= 1.0, "the new log was noticed");
    // Three heartbeats later, nothing more was dropped: one reset per restart, not one per beat.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        resets(&tier.replicas[1].metrics().await),
        before,
        "no more resets"
    );
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
}
