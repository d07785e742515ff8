//! A tier under faults: Redis killed, restarted empty, refusing writes, started late, losing
//! writes; garbage and lost tokens and clocks; a lease nobody releases; a subscription revoked
//! (partitions between one replica and Redis are in cluster_partitions.rs). Whatever breaks, a load
//! never reflects a state older than a write answered through the tier, and no request fails
//! because of Redis.

use std::time::{Duration, Instant};

use crate::replica::{
    commit, counter_eventually, restricted_user, standin, version_at, version_eventually,
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
async fn killing_redis_under_load_fails_no_request_and_writes_still_win() {
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
    // Writes succeed, and under `revalidate` a load on another replica sees them.
    for trial in 0..30 {
        let committed = commit(tier.url(trial)).await;
        assert!(
            version_at(tier.url(trial + 1)).await >= committed,
            "trial {trial}"
        );
    }
    assert_eq!(
        load_loop.await.unwrap(),
        0,
        "failed requests while Redis was down"
    );
    let metrics = tier.replicas[1].metrics().await;
    assert_eq!(metric(&metrics, "icecache_cluster_degraded"), 1.0);
    // Redis comes back empty: the tier converges within seconds, and nothing stale is served.
    let committed = commit(tier.url(0)).await;
    redis.restart().await;
    tier.wait_live().await;
    for replica in 0..3 {
        assert!(version_at(tier.url(replica)).await >= committed);
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
async fn a_write_answered_while_redis_was_away_is_never_hidden_by_what_came_before() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"],
    )
    .await;
    let before = version_at(tier.url(1)).await;
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
    redis.kill();
    let committed = commit(tier.url(0)).await;
    assert!(committed > before);
    redis.restart().await;
    tier.wait_live().await;
    assert!(version_at(tier.url(1)).await >= committed);
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
async fn under_bounded_a_replica_that_lost_its_subscription_re_checks_what_it_holds() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    // B logs in as its own user, so its subscription can be taken away while A publishes.
    let urls = [
        restricted_user(&redis, "replica-a"),
        restricted_user(&redis, "replica-b"),
    ];
    let tier = Tier::start_at(
        &urls,
        &catalog.url,
        &["--fresh-for", "1h", "--cluster-consistency", "bounded"],
    )
    .await;
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
        let committed = commit(tier.url(0)).await;
        let seen = load(tier.url(1), "alice").await;
        assert_ne!(x_cache(&seen), "HIT", "{how}: B served from memory");
        let body: Value = seen.json().await.unwrap();
        assert!(
            crate::support::standin::version_of(&body).unwrap() >= committed,
            "{how}"
        );
        for replica in 0..2 {
            let metrics = tier.replicas[replica].metrics().await;
            assert_eq!(metric(&metrics, "icecache_cluster_degraded"), 1.0, "{how}");
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

#[tokio::test]
async fn a_redis_that_loses_a_write_is_caught_by_the_writers_next_heartbeat() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    for trial in 0..3 {
        version_at(tier.url(1)).await;
        // What a lagging Redis replica would hold: everything before the commit.
        let before: Vec<(String, Vec<u8>)> = redis
            .dump()
            .into_iter()
            .filter(|(key, value)| !key.starts_with("icecache:l:") && value != b"(not a string)")
            .collect();
        let committed = commit(tier.url(0)).await;
        // The failover: every string key back as it was, the clock included.
        for (key, _) in redis.dump() {
            if before.iter().all(|(k, _)| *k != key) && key != "icecache:members" {
                redis.command(&["DEL", &key]);
            }
        }
        for (key, value) in &before {
            redis.set(key, value);
        }
        // At its next heartbeat the writer finds the clock behind and moves the epoch (how
        // soon is the heartbeat's period, not asserted here: entries are kept an hour).
        assert!(
            version_eventually(tier.url(1), committed).await >= committed,
            "trial {trial}: the lost token move brought the old version back"
        );
        // The reader may have dropped its entry on the writer's announcement before the
        // writer's next heartbeat found the clock behind: the count is awaited, not read once.
        let rewinds = (trial + 1) as f64;
        let counted = counter_eventually(
            &tier.replicas[0],
            "icecache_cluster_redis_rewinds_total",
            rewinds,
        )
        .await;
        assert!(
            counted >= rewinds,
            "trial {trial}: {counted} rewinds counted"
        );
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
async fn a_clock_overwritten_with_garbage_heals_at_the_next_heartbeat() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    version_at(tier.url(1)).await;
    let clocks = redis.keys_starting("icecache:clock:");
    assert_eq!(clocks.len(), 2, "one clock per replica");
    let rewinds = |metrics: &str| metric(metrics, "icecache_cluster_redis_rewinds_total");
    // Not a number; numbers past what the heartbeat's arithmetic holds exactly; near i64::MAX.
    let values = ["garbage", "9223372036854775806", "1e17", "9007199254740993"];
    for (trial, value) in values.iter().enumerate() {
        for clock in &clocks {
            redis.set(clock, value.as_bytes());
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        tier.wait_live().await;
        // Healed: no rewind over several heartbeats (it would go on at every one otherwise).
        crate::support::eventually(&format!("{value}: rewinds ending"), || async {
            let healed = rewinds(&tier.replicas[0].metrics().await);
            tokio::time::sleep(Duration::from_millis(700)).await;
            rewinds(&tier.replicas[0].metrics().await) == healed
        })
        .await;
        let committed = commit(tier.url(trial)).await;
        assert!(
            version_at(tier.url(trial + 1)).await >= committed,
            "{value}"
        );
        load(tier.url(1), "alice").await;
        assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT", "{value}");
    }
    for replica in &tier.replicas {
        let metrics = replica.metrics().await;
        assert!(rewinds(&metrics) >= values.len() as f64);
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
    // Long enough for the clocks to be well past where an empty Redis starts them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    version_at(tier.url(1)).await;
    redis.restart().await;
    tier.wait_live().await;
    // Trusted again once both replicas are heard in the new Redis.
    crate::support::eventually("B serving from memory again", || async {
        version_at(tier.url(1)).await;
        x_cache(&load(tier.url(1), "alice").await) == "HIT"
    })
    .await;
    let rewinds = |metrics: &str| metric(metrics, "icecache_cluster_redis_rewinds_total");
    let before = rewinds(&tier.replicas[1].metrics().await);
    assert!(
        (1.0..=2.0).contains(&before),
        "one rewind per restart, not one per beat: {before}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        rewinds(&tier.replicas[1].metrics().await),
        before,
        "no more rewinds"
    );
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
}
