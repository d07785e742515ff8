//! A tier where one replica and Redis stop hearing each other, wholly or in part, through a
//! TCP gate that goes silent without closing anything: cut off both ways, Redis's answers lost
//! while the replica's commands still run, a subscription alone gone quiet, what the gate held
//! delivered late. By the time a write's answer returns through any replica as a success, no
//! other serves a state older than it; a write through a replica that cannot tell the others is
//! refused before it reaches the catalog (503) or answered as of unknown outcome (502), and seen
//! everywhere once Redis answers again.

use std::time::Duration;

use crate::gate::Gate;
use crate::replica::{commit, never_a_success, seen_eventually, standin, try_commit, version_at};
use crate::support::cluster::{load, Redis, Tier, TABLE};
use crate::support::standin::{Shape, StandIn};
use crate::support::{eventually, metric, x_cache};
use serde_json::Value;

/// A (through a gate that goes silent) and B (straight to Redis), B holding the table.
async fn a_behind_a_gate(catalog: &StandIn, redis: &Redis) -> (Gate, Tier) {
    let gate = Gate::open(redis.port).await;
    let flags = ["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"];
    let tier = Tier::start_at(&[gate.url(), redis.url()], &catalog.url, &flags).await;
    version_at(tier.url(1)).await;
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
    (gate, tier)
}

async fn degraded(tier: &Tier, replica: usize) -> bool {
    metric(
        &tier.replicas[replica].metrics().await,
        "icecache_cluster_degraded",
    ) == 1.0
}

/// What a load through `url` served: its `x-cache` and the table's version.
async fn served(url: &str) -> (String, u64) {
    let seen = load(url, "alice").await;
    let phase = x_cache(&seen).to_owned();
    let version =
        crate::support::standin::version_of(&seen.json::<Value>().await.unwrap()).unwrap();
    (phase, version)
}

#[tokio::test]
async fn a_replica_cut_off_from_redis_alone_refuses_writes_before_the_catalog_and_the_others_keep_serving(
) {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis).await;
    gate.freeze();
    eventually("A noticing it cannot reach Redis", || degraded(&tier, 0)).await;
    let before = catalog.version("t");
    let refused = crate::support::empty_commit(&format!("{}{TABLE}", tier.url(0)), "alice").await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    for trial in 0..2 {
        let answer = try_commit(tier.url(0)).await;
        assert_eq!(
            answer,
            (503, Some("ServiceUnavailableException".to_owned())),
            "trial {trial}"
        );
    }
    assert_eq!(catalog.version("t"), before, "no write reached the catalog");
    let metrics = tier.replicas[0].metrics().await;
    assert_eq!(
        metric(&metrics, "icecache_cluster_writes_refused_total"),
        3.0
    );
    // Loads through A are still answered (by the catalog: its lease cannot be renewed).
    let (phase, _) = served(tier.url(0)).await;
    assert_ne!(phase, "HIT");
    // B does not wait for A: it goes on serving from memory, and its writes answer once A's
    // lease has run out.
    assert_eq!(served(tier.url(1)).await.0, "HIT");
    let committed = commit(tier.url(1)).await;
    assert!(version_at(tier.url(1)).await >= committed);
    gate.thaw();
    tier.wait_live().await;
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
}

/// A write the catalog made while its replica was being cut off cannot be told to the others in
/// time: it is answered as of unknown outcome, never as a success, and once Redis answers again
/// the others drop what it made old.
#[tokio::test]
async fn a_write_caught_by_the_cut_is_answered_as_unknown_and_seen_once_redis_is_back() {
    let catalog = standin(Shape {
        commit_delay: Duration::from_secs(2),
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis).await;
    let before = catalog.version("t").unwrap();
    let url = tier.url(0).to_owned();
    let write = tokio::spawn(async move { try_commit(&url).await });
    // The write is at the catalog (past A's refusal check) when the gate goes silent.
    eventually("the write applied", || async {
        catalog.version("t").unwrap() > before
    })
    .await;
    gate.freeze();
    let committed = catalog.version("t").unwrap();
    let answer = write.await.unwrap();
    assert_eq!(
        answer,
        (502, Some("CommitStateUnknownException".to_owned()))
    );
    gate.thaw();
    seen_eventually(tier.url(1), committed).await;
    eventually("B serving the write from memory", || async {
        let (phase, version) = served(tier.url(1)).await;
        assert!(version >= committed, "{version} after {committed}");
        phase == "HIT"
    })
    .await;
}

/// What the gate held (A's heartbeats among it) delivered late lists A again, but renews
/// nothing A can use: A heard no answer, so its lease is still out, and it serves nothing
/// older than a write through B.
#[tokio::test]
async fn a_heartbeat_delivered_late_does_not_let_a_cut_off_replica_serve_from_memory() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis).await;
    version_at(tier.url(0)).await;
    gate.freeze();
    eventually("A noticing it cannot reach Redis", || degraded(&tier, 0)).await;
    gate.let_commands_through();
    for trial in 0..3 {
        let committed = commit(tier.url(1)).await;
        let (phase, version) = served(tier.url(0)).await;
        assert!(
            version >= committed,
            "trial {trial}: A served {version} (committed {committed}), x-cache {phase}"
        );
    }
    gate.thaw();
    tier.wait_live().await;
}

/// Three replicas sharing entries through Redis, A cut off: what A's write made old is not
/// served by the others from an entry shared before it, once the write is answered as a success
/// or Redis answers A again.
#[tokio::test]
async fn a_replica_cut_off_alone_cannot_hide_a_write_behind_a_shared_entry() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let gate = Gate::open(redis.port).await;
    let flags = [
        "--fresh-for",
        "1h",
        "--cluster-redis-timeout",
        "200ms",
        // Bodies without keys, so that the tier shares them.
        "--credentials",
        "strip",
    ];
    let urls = [gate.url(), redis.url(), redis.url()];
    let tier = Tier::start_at(&urls, &catalog.url, &flags).await;
    version_at(tier.url(1)).await;
    assert_eq!(x_cache(&load(tier.url(2), "alice").await), "SHARED");
    gate.freeze();
    never_a_success(&try_commit(tier.url(0)).await, "A cut off");
    gate.thaw();
    let committed = catalog.version("t").unwrap();
    for replica in [2, 1] {
        seen_eventually(tier.url(replica), committed).await;
    }
    // A fresh load on C after B's: the entry shared since is current.
    for round in 0..5 {
        for replica in [2, 1] {
            let (phase, version) = served(tier.url(replica)).await;
            assert!(
                version >= committed,
                "round {round}: replica {replica} served {version} (committed {committed}), \
                 x-cache {phase}"
            );
        }
    }
}

/// Redis emptied (a flush, a restart without persistence) while a replica is cut off from it
/// takes the lease log with it: a write through another is still seen by the cut-off one, which
/// holds no lease, and by the others, whose next heartbeat finds a new log.
#[tokio::test]
async fn redis_emptied_while_a_replica_is_cut_off_does_not_hide_a_write() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis).await;
    version_at(tier.url(0)).await;
    gate.freeze();
    for emptied in ["a flush", "a restart"] {
        match emptied {
            "a flush" => redis.flushall(),
            _ => redis.restart().await,
        }
        let committed = commit(tier.url(1)).await;
        for replica in [0, 1] {
            let (phase, version) = served(tier.url(replica)).await;
            assert!(
                version >= committed,
                "replica {replica} served {version} (committed {committed}), x-cache {phase}, \
                 after {emptied}"
            );
        }
    }
    gate.thaw();
    tier.wait_live().await;
}

#[tokio::test]
async fn a_replica_whose_subscription_goes_silent_stops_trusting_its_memory() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    // B's subscription goes through the gate; its commands still work.
    let gate = Gate::open(redis.port).await;
    let tier = Tier::start_at(
        &[redis.url(), gate.url()],
        &catalog.url,
        &["--fresh-for", "1h"],
    )
    .await;
    version_at(tier.url(1)).await;
    gate.freeze_subscribers();
    let committed = commit(tier.url(0)).await;
    // The invalidation never arrives: A's write waits out B's lease, and B's next heartbeat
    // finds it behind the log.
    let seen = version_at(tier.url(1)).await;
    assert!(seen >= committed, "B served the old version (fresh_for 1h)");
    // The gate keeps new subscriptions silent too: B notices it hears nothing, and stays
    // unsubscribed.
    eventually("B noticing its subscription went silent", || async {
        metric(
            &tier.replicas[1].metrics().await,
            "icecache_cluster_subscribed",
        ) == 0.0
    })
    .await;
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
    gate.thaw();
    tier.wait_live().await;
}

#[tokio::test]
async fn a_replica_that_no_longer_hears_redis_while_redis_still_hears_it_cannot_hide_its_writes() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis).await;
    // A's commands (its heartbeats among them) still reach Redis; its answers never return.
    gate.freeze_replies();
    // Commits faster than heartbeats: a success is never hidden from B, and nothing else is
    // answered as one.
    for trial in 0..40 {
        match try_commit(tier.url(0)).await {
            (200, _) => {
                let committed = catalog.version("t").unwrap();
                let (phase, version) = served(tier.url(1)).await;
                assert!(
                    version >= committed,
                    "trial {trial}: B served {version} < {committed} ({phase})"
                );
            }
            (503, Some(kind)) => assert_eq!(kind, "ServiceUnavailableException"),
            (502, Some(kind)) => assert_eq!(kind, "CommitStateUnknownException"),
            other => panic!("trial {trial}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eventually("A noticing no answer comes", || degraded(&tier, 0)).await;
    gate.thaw();
    tier.wait_live().await;
    seen_eventually(tier.url(1), catalog.version("t").unwrap()).await;
}
