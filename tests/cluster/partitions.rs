//! A tier where one replica and Redis stop hearing each other, wholly or in part, through a
//! TCP gate that goes silent without closing anything: cut off both ways, Redis's answers lost
//! while the replica's commands still run, a subscription alone gone quiet, what the gate held
//! delivered late, and a replica out of touch past `member_timeout`. By the time a write's
//! answer returns through any replica, no other serves a state older than it.

use std::time::{Duration, Instant};

use crate::gate::Gate;
use crate::replica::{commit, standin, version_at, version_eventually};
use crate::support::cluster::{load, Redis, Tier, TABLE};
use crate::support::standin::Shape;
use crate::support::{eventually, metric, x_cache};
use serde_json::Value;

/// A (through a gate that goes silent) and B (straight to Redis), B holding the table.
async fn a_behind_a_gate(
    catalog: &crate::support::standin::StandIn,
    redis: &Redis,
    extra: &[&str],
) -> (Gate, Tier) {
    let gate = Gate::open(redis.port).await;
    let mut flags = vec!["--fresh-for", "1h", "--cluster-redis-timeout", "200ms"];
    flags.extend_from_slice(extra);
    let tier = Tier::start_at(&[gate.url(), redis.url()], &catalog.url, &flags).await;
    version_at(tier.url(1)).await;
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
    (gate, tier)
}

async fn lapsed_on(tier: &Tier, replica: usize) -> f64 {
    metric(
        &tier.replicas[replica].metrics().await,
        "icecache_cluster_lapsed_replicas",
    )
}

/// What a load through `url` served: its `x-cache` and the table's version.
async fn served(url: &str) -> (String, u64) {
    let seen = load(url, "alice").await;
    let phase = x_cache(&seen).to_owned();
    let version =
        crate::support::standin::version_of(&seen.json::<Value>().await.unwrap()).unwrap();
    (phase, version)
}

/// A replica cut off from Redis alone answers a write; by the time the answer returns, the
/// others no longer trust what they hold.
async fn a_write_through_a_replica_cut_off_alone_is_seen(consistency: &str) {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) =
        a_behind_a_gate(&catalog, &redis, &["--cluster-consistency", consistency]).await;
    for trial in 0..3 {
        gate.freeze();
        let committed = commit(tier.url(0)).await;
        let answered = Instant::now();
        let (phase, version) = served(tier.url(1)).await;
        assert_ne!(
            phase,
            "HIT",
            "trial {trial}: B served {version} (committed {committed}) from memory; B sees {} \
             lapsed; A unannounced {}, {:?} after the answer",
            lapsed_on(&tier, 1).await,
            metric(
                &tier.replicas[0].metrics().await,
                "icecache_cluster_unannounced_writes_total"
            ),
            answered.elapsed()
        );
        assert!(
            version >= committed,
            "trial {trial}: {version} < {committed}"
        );
        assert!(lapsed_on(&tier, 1).await >= 1.0);
        // Back in touch: A's heartbeat moves the epoch, B trusts what it holds again.
        gate.thaw();
        let what = format!("trial {trial}: B trusting the tier again");
        eventually(&what, || async {
            let again = load(tier.url(1), "alice").await;
            if x_cache(&again) != "HIT" {
                return false;
            }
            let body: Value = again.json().await.unwrap();
            assert!(crate::support::standin::version_of(&body).unwrap() >= committed);
            true
        })
        .await;
        assert_eq!(lapsed_on(&tier, 1).await, 0.0);
    }
    let metrics = tier.replicas[0].metrics().await;
    assert!(metric(&metrics, "icecache_cluster_unannounced_writes_total") >= 3.0);
}

#[tokio::test]
async fn under_read_your_writes_a_replica_cut_off_from_redis_alone_cannot_hide_its_writes() {
    a_write_through_a_replica_cut_off_alone_is_seen("read-your-writes").await;
}

#[tokio::test]
async fn under_bounded_a_replica_cut_off_from_redis_alone_cannot_hide_its_writes() {
    a_write_through_a_replica_cut_off_alone_is_seen("bounded").await;
}

#[tokio::test]
async fn a_replica_out_of_touch_for_the_member_timeout_refuses_writes_then_is_forgotten() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &["--cluster-member-timeout", "5s"]).await;
    gate.freeze();
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let before = catalog.version("t");
    let refused = crate::support::empty_commit(&format!("{}{TABLE}", tier.url(0)), "alice").await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "ServiceUnavailableException");
    assert_eq!(
        catalog.version("t"),
        before,
        "the write never reached the catalog"
    );
    // Loads through A are still answered (by the catalog: A is degraded).
    assert_eq!(load(tier.url(0), "alice").await.status(), 200);
    let metrics = tier.replicas[0].metrics().await;
    assert_eq!(
        metric(&metrics, "icecache_cluster_writes_refused_total"),
        1.0
    );
    // B forgets A within a heartbeat lease after A's fence went up: it trusts what it holds
    // again.
    eventually("B forgetting A after the member timeout", || async {
        lapsed_on(&tier, 1).await == 0.0
    })
    .await;
    load(tier.url(1), "alice").await;
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "HIT");
    gate.thaw();
    tier.wait_live().await;
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
}

/// A heartbeat the network held past its timeout and delivered late renews nothing: the
/// replica took it as lost and, still out of touch, answers writes it cannot announce at once.
#[tokio::test]
async fn a_heartbeat_delivered_late_does_not_make_a_cut_off_replica_look_live() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &[]).await;
    gate.freeze();
    let frozen = Instant::now();
    eventually("B seeing A's heartbeat lapse", || async {
        lapsed_on(&tier, 1).await >= 1.0
    })
    .await;
    // Long enough that A's own wait for a write it cannot announce is over.
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(frozen.elapsed())).await;
    // What A sent while frozen (its last heartbeat among it) now reaches Redis; A still hears
    // nothing back, so it stays degraded. B beats within 300 ms; a renewed lease would last 1 s.
    gate.let_commands_through();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let committed = commit(tier.url(0)).await;
    let (phase, version) = served(tier.url(1)).await;
    let lapsed = lapsed_on(&tier, 1).await;
    assert_ne!(
        phase, "HIT",
        "B served {version} (committed {committed}) from memory; B sees {lapsed} lapsed"
    );
    assert!(version >= committed, "{version} < {committed}");
    assert!(lapsed >= 1.0, "a late heartbeat made A look live");
    gate.thaw();
    tier.wait_live().await;
}

/// While a replica is lapsed, Redis's tokens may not show what it answered: the others ask
/// the catalog rather than take the entry the tier shared before.
#[tokio::test]
async fn under_bounded_a_replica_cut_off_alone_cannot_hide_a_write_behind_a_shared_entry() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let gate = Gate::open(redis.port).await;
    let flags = [
        "--fresh-for",
        "1h",
        "--cluster-redis-timeout",
        "200ms",
        "--cluster-consistency",
        "bounded",
        // Bodies without keys, so that the tier shares them.
        "--credentials",
        "strip",
    ];
    let urls = [gate.url(), redis.url(), redis.url()];
    let tier = Tier::start_at(&urls, &catalog.url, &flags).await;
    for replica in [1, 2] {
        version_at(tier.url(replica)).await;
        assert_eq!(x_cache(&load(tier.url(replica), "alice").await), "HIT");
    }
    gate.freeze();
    let committed = commit(tier.url(0)).await;
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
    gate.thaw();
    tier.wait_live().await;
}

/// Once the others forget a replica cut off for `member_timeout`, they trust the tier again:
/// what they held from before a write it answered meanwhile is not trusted with it.
#[tokio::test]
async fn a_write_through_a_replica_cut_off_is_seen_after_the_others_forget_it() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &["--cluster-member-timeout", "5s"]).await;
    gate.freeze();
    let committed = commit(tier.url(0)).await;
    eventually("B forgetting A", || async {
        lapsed_on(&tier, 1).await == 0.0
    })
    .await;
    for _ in 0..3 {
        let (phase, version) = served(tier.url(1)).await;
        assert!(
            version >= committed,
            "B served {version} (committed {committed}), x-cache {phase}, after forgetting A"
        );
    }
    gate.thaw();
    tier.wait_live().await;
}

/// A write the catalog answers only after its replica has been cut off for `member_timeout`
/// may have landed after the others forgot that replica: it is not reported as a success.
#[tokio::test]
async fn a_write_answered_after_the_member_timeout_while_cut_off_is_not_a_success() {
    let catalog = standin(Shape {
        commit_delay: Duration::from_secs(4),
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &["--cluster-member-timeout", "5s"]).await;
    gate.freeze();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answer = crate::support::empty_commit(&format!("{}{TABLE}", tier.url(0)), "alice").await;
    assert_eq!(answer.status(), 502);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["type"], "CommitStateUnknownException");
    gate.thaw();
    tier.wait_live().await;
}

/// Redis emptied (a flush, a restart without persistence) while a replica is cut off from it
/// takes with it the heartbeats that showed the replica lapsing: the others still distrust the
/// tier on its account, and what they load meanwhile is not trusted after its write.
#[tokio::test]
async fn redis_emptied_while_a_replica_is_cut_off_does_not_hide_its_writes() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &[]).await;
    gate.freeze();
    for emptied in ["a flush", "a restart"] {
        match emptied {
            "a flush" => redis.flushall(),
            _ => redis.restart().await,
        }
        // B loads the table again after the loss, before A's write reaches the catalog.
        for _ in 0..20 {
            load(tier.url(1), "alice").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eventually(
            &format!("B counting A as lapsed after {emptied}"),
            || async { lapsed_on(&tier, 1).await >= 1.0 },
        )
        .await;
        let committed = commit(tier.url(0)).await;
        for _ in 0..3 {
            let (phase, version) = served(tier.url(1)).await;
            assert!(
                version >= committed,
                "B served {version} (committed {committed}), x-cache {phase}, after {emptied}"
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
        &["--fresh-for", "1h", "--cluster-consistency", "bounded"],
    )
    .await;
    version_at(tier.url(1)).await;
    gate.freeze_subscribers();
    let committed = commit(tier.url(0)).await;
    // The announcement never arrives. Within a few heartbeats B notices the silence.
    let seen = version_eventually(tier.url(1), committed).await;
    assert!(seen >= committed, "B served the old version (fresh_for 1h)");
    // The gate keeps new subscriptions silent too: B stays unsubscribed, reading tokens.
    let metrics = tier.replicas[1].metrics().await;
    assert_eq!(metric(&metrics, "icecache_cluster_subscribed"), 0.0);
    let committed = commit(tier.url(0)).await;
    assert!(version_at(tier.url(1)).await >= committed);
    gate.thaw();
    tier.wait_live().await;
}

#[tokio::test]
async fn a_replica_that_no_longer_hears_redis_while_redis_still_hears_it_cannot_hide_its_writes() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let (gate, tier) = a_behind_a_gate(&catalog, &redis, &[]).await;
    // A's commands (its heartbeats among them) still reach Redis; its answers never return.
    gate.freeze_replies();
    // Commits faster than heartbeats: none may be hidden between A's answer and the next.
    for trial in 0..40 {
        let committed = commit(tier.url(0)).await;
        let (phase, version) = served(tier.url(1)).await;
        let hit = phase == "HIT";
        assert!(
            version >= committed,
            "trial {trial}: B served {version} < {committed} (hit: {hit})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lapsed_on(&tier, 1).await >= 1.0, "A looks live to B");
    gate.thaw();
    tier.wait_live().await;
}
