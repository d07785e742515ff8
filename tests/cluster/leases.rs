//! The tier's leases on a real redis-server: every load after a write's answer reflects it on
//! every replica, with hits that ask Redis nothing; a replica stopped past its lease, or killed,
//! costs a write its lease and serves nothing the write made old.

use std::process::Command;

use crate::gate::Gate;
use crate::replica::{
    commit, loaded_once_and_shared, never_a_success, standin, try_commit, version_at,
};
use crate::support::cluster::{load, Redis, Tier};
use crate::support::standin::Shape;
use crate::support::{eventually, metric, x_cache};

/// Entries kept an hour: only the leases and the invalidations keep them current.
const LEASES: &[&str] = &["--fresh-for", "1h"];

async fn tier_of(n: usize) -> (crate::support::standin::StandIn, Redis, Tier) {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(n, &catalog.url, &redis, LEASES).await;
    (catalog, redis, tier)
}

/// Loads at `url` until one is answered from memory (the replica holds a lease and the entry).
async fn until_hit(url: &str) {
    eventually("a load answered from memory", || async {
        x_cache(&load(url, "alice").await) == "HIT"
    })
    .await;
}

fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {signal} {pid}");
}

#[tokio::test]
async fn every_load_after_a_commit_reflects_it_on_every_replica() {
    let (_catalog, _redis, tier) = tier_of(3).await;
    for replica in 0..3 {
        until_hit(tier.url(replica)).await;
    }
    for trial in 0..60 {
        let committed = commit(tier.url(trial)).await;
        for reader in 0..3 {
            let seen = version_at(tier.url(trial + reader)).await;
            assert!(seen >= committed, "trial {trial}: {seen} after {committed}");
        }
    }
    let mut waits = 0.0;
    for replica in &tier.replicas {
        let metrics = replica.metrics().await;
        for ended in ["acknowledged", "lease_ran_out"] {
            let series = format!("icecache_cluster_write_waits_total{{ended=\"{ended}\"}}");
            waits += metric(&metrics, &series);
        }
    }
    assert_eq!(waits, 60.0, "every commit waited for the others once");
}

/// Strip: bodies are shared through Redis, so the version before a commit is met there too.
const SHARING: &[&str] = &["--fresh-for", "1h", "--credentials", "strip"];

/// A tier of `n` on `SHARING`, once every replica holds its lease (before, loads ask the
/// catalog for themselves).
async fn sharing_tier(n: usize, catalog: &crate::support::standin::StandIn) -> (Redis, Tier) {
    let redis = Redis::start().await;
    let tier = Tier::start(n, &catalog.url, &redis, SHARING).await;
    for replica in &tier.replicas {
        eventually("a lease held", || async {
            metric(&replica.metrics().await, "icecache_cluster_lease_held") == 1.0
        })
        .await;
    }
    (redis, tier)
}

#[tokio::test]
async fn a_thousand_commit_then_load_trials_over_three_replicas_read_nothing_stale() {
    let catalog = standin(Shape::default()).await;
    catalog.stop_recording();
    let (_redis, tier) = sharing_tier(3, &catalog).await;
    let mut stale = 0;
    for trial in 0..1000 {
        let committed = commit(tier.url(trial)).await;
        if version_at(tier.url(trial + 1)).await < committed {
            stale += 1;
        }
    }
    assert_eq!(stale, 0, "stale reads in 1,000 commit-then-load trials");
    let mut refused = 0.0;
    for replica in &tier.replicas {
        let metrics = replica.metrics().await;
        refused += metric(&metrics, "icecache_cluster_shared_total{result=\"stale\"}");
    }
    assert!(
        refused > 0.0,
        "versions from before a commit met in Redis, and refused"
    );
}

#[tokio::test]
async fn a_table_loaded_through_one_replica_is_served_by_the_others_from_redis() {
    let catalog = standin(Shape::default()).await;
    let (_redis, tier) = sharing_tier(3, &catalog).await;
    loaded_once_and_shared(&tier, &catalog).await;
    // Kept under the lease: the next load on a replica that took it is a hit.
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
}

#[tokio::test]
async fn cold_loads_over_three_replicas_make_one_catalog_fetch() {
    let catalog = standin(Shape {
        delay: std::time::Duration::from_millis(400),
        ..Shape::default()
    })
    .await;
    let (_redis, tier) = sharing_tier(3, &catalog).await;
    let loads: Vec<_> = (0..90)
        .map(|n| {
            let url = tier.url(n).to_owned();
            tokio::spawn(async move { load(&url, "alice").await.status() })
        })
        .collect();
    for load in loads {
        assert_eq!(load.await.unwrap(), 200);
    }
    assert_eq!(catalog.loads("t"), 1, "one fetch for the whole tier");
}

#[tokio::test]
async fn a_hit_asks_redis_nothing() {
    let (_catalog, redis, tier) = tier_of(2).await;
    until_hit(tier.url(0)).await;
    let reads = || ["get", "mget", "exists"].map(|c| redis.calls(c));
    let before = reads();
    let mut hits = 0;
    for _ in 0..200 {
        if x_cache(&load(tier.url(0), "alice").await) == "HIT" {
            hits += 1;
        }
    }
    assert!(hits > 0, "no load was answered from memory");
    assert_eq!(
        reads(),
        before,
        "GET, MGET, EXISTS calls during {hits} hits"
    );
}

#[tokio::test]
async fn a_replica_stopped_past_its_lease_serves_no_write_it_missed() {
    let (_catalog, _redis, tier) = tier_of(3).await;
    until_hit(tier.url(2)).await;
    let stopped = tier.replicas[2].pid();
    signal(stopped, "-STOP");
    // Replica 2 cannot acknowledge: the commit answers once its lease has run out.
    let committed = commit(tier.url(0)).await;
    signal(stopped, "-CONT");
    let seen = version_at(tier.url(2)).await;
    assert!(seen >= committed, "{seen} after {committed}");
}

#[tokio::test]
async fn with_a_replica_killed_the_others_answer_hits_of_what_was_written() {
    let (_catalog, _redis, mut tier) = tier_of(3).await;
    until_hit(tier.url(1)).await;
    tier.replicas[2].kill_now();
    let committed = commit(tier.url(0)).await;
    let waited_out = metric(
        &tier.replicas[0].metrics().await,
        "icecache_cluster_write_waits_total{ended=\"lease_ran_out\"}",
    );
    assert_eq!(waited_out, 1.0, "the dead replica's lease was waited out");
    assert!(version_at(tier.url(1)).await >= committed);
    eventually("a hit of the committed version on a survivor", || async {
        let response = load(tier.url(1), "alice").await;
        let hit = x_cache(&response) == "HIT";
        let body: serde_json::Value = response.json().await.unwrap();
        hit && crate::support::standin::version_of(&body).unwrap() >= committed
    })
    .await;
}

/// Replica 1 reaches Redis through a gate the test can silence; replica 0 directly.
async fn gated_tier() -> (crate::support::standin::StandIn, Redis, Gate, Tier) {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let gate = Gate::open(redis.port).await;
    let tier = Tier::start_at(&[redis.url(), gate.url()], &catalog.url, LEASES).await;
    until_hit(tier.url(1)).await;
    (catalog, redis, gate, tier)
}

/// The version replica 1 serves, asserted no older than `committed`, a few times over.
async fn never_older(tier: &Tier, committed: u64) {
    for round in 0..5 {
        let seen = version_at(tier.url(1)).await;
        assert!(seen >= committed, "round {round}: {seen} after {committed}");
    }
}

#[tokio::test]
async fn a_replica_cut_off_from_redis_serves_no_write_it_missed() {
    let (_catalog, _redis, gate, tier) = gated_tier().await;
    gate.freeze();
    let committed = commit(tier.url(0)).await;
    never_older(&tier, committed).await;
}

#[tokio::test]
async fn a_replica_whose_subscription_went_quiet_serves_no_write_it_missed() {
    // Its heartbeats still renew: they find it behind the log and renew nothing until it has
    // dropped what it held.
    let (_catalog, _redis, gate, tier) = gated_tier().await;
    gate.freeze_subscribers();
    let committed = commit(tier.url(0)).await;
    never_older(&tier, committed).await;
}

#[tokio::test]
async fn a_replica_deaf_while_the_members_are_deleted_serves_no_write_it_missed() {
    // Deleted, evicted or trimmed by anything but icecache: the write cannot know replica 1
    // holds a lease, so it waits one out rather than answering after nobody.
    let damages: [&[&str]; 2] = [
        &["DEL", "icecache:lease:members"],
        &["EVAL", "for _, m in ipairs(redis.call('HKEYS', KEYS[1])) do redis.call('HDEL', KEYS[1], m) end", "1", "icecache:lease:members"],
    ];
    for damage in damages {
        let (_catalog, redis, gate, tier) = gated_tier().await;
        // Until replica 0 has known the dataset for a lease, its writes wait one out anyway.
        eventually("a write that ends on acknowledgements", || async {
            commit(tier.url(0)).await;
            let metrics = tier.replicas[0].metrics().await;
            metric(
                &metrics,
                "icecache_cluster_write_waits_total{ended=\"acknowledged\"}",
            ) > 0.0
        })
        .await;
        until_hit(tier.url(1)).await;
        gate.freeze_subscribers();
        redis.command(damage);
        let committed = commit(tier.url(0)).await;
        never_older(&tier, committed).await;
    }
}

#[tokio::test]
async fn with_redis_gone_no_write_is_a_success_and_loads_ask_the_catalog() {
    let (catalog, mut redis, tier) = tier_of(2).await;
    until_hit(tier.url(1)).await;
    redis.kill();
    // No replica can be told: a success would promise what the others cannot keep. Refused
    // before the catalog once the replica knows (503), of unknown outcome if it learns only
    // after the catalog answered (502).
    never_a_success(&try_commit(tier.url(0)).await, "Redis gone");
    let committed = catalog.version("t").expect("the stand-in holds the table");
    let seen = version_at(tier.url(1)).await;
    assert!(seen >= committed, "{seen} after {committed}");
}

#[tokio::test]
async fn a_redis_restarted_empty_is_noticed_and_trusted_again_with_every_commit_seen() {
    let (_catalog, mut redis, tier) = tier_of(2).await;
    until_hit(tier.url(1)).await;
    redis.kill();
    let degraded = || async {
        let metrics = tier.replicas[1].metrics().await;
        metric(&metrics, "icecache_cluster_degraded") == 1.0
    };
    eventually(
        "the lease heartbeat failing makes the replica degraded",
        degraded,
    )
    .await;
    redis.restart().await;
    tier.wait_live().await;
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
    until_hit(tier.url(1)).await;
    assert!(version_at(tier.url(1)).await >= committed);
}

#[tokio::test]
async fn the_lease_heartbeats_echoes_keep_the_subscription_without_resubscribing() {
    // The lease heartbeat is the tier's only one: without its echoes each replica would take
    // its subscription for silent and subscribe again every few seconds.
    let (_catalog, redis, _tier) = tier_of(2).await;
    let subscribes = redis.calls("subscribe");
    let beats = redis.calls("evalsha");
    // Two replicas beat three times a second each: 60 beats are ten seconds, five times the
    // silence after which a subscription is given up on. Without echoes each replica would
    // subscribe again at least four times in them; a replica starved for a moment on a busy
    // machine may take its subscription for deaf once, which is not what this test is about.
    eventually("60 lease heartbeats", || async {
        redis.calls("evalsha") >= beats + 60
    })
    .await;
    let again = redis.calls("subscribe") - subscribes;
    assert!(again <= 1, "{again} SUBSCRIBE calls over 60 heartbeats");
}
