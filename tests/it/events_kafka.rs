//! Polaris's change events on Kafka. Polaris cannot be run here, so each test makes a real
//! commit on the SeaweedFS catalog and then writes the record Polaris's Kafka listener would
//! write for it (its JSON, keyed by a fresh event id) to a real Kafka broker. SeaweedFS's one
//! warehouse is named `warehouse`, which is the REST prefix: the events' `catalog_name` is that
//! name and the prefix template the default `{catalog_name}`.

use crate::support::events::{commit, load, until_served};
use crate::support::kafka::{Kafka, Publisher};
use crate::support::{catalog, eventually, metric, unique, Api, Icecache};

const TOPIC: &str = "polaris-catalog-events";

/// The record Polaris writes for `kind` on `levels` (namespace levels, then the name), in
/// catalog `catalog`, at `timestamp`.
fn polaris_event(kind: &str, catalog: &str, levels: &[&str], timestamp: &str) -> String {
    serde_json::json!({
        "event_type": kind,
        "event_id": unique("id"),
        "timestamp": timestamp,
        "table_identifier": levels,
        "catalog_name": catalog,
        "realm_id": "POLARIS",
        "principal": "root",
        "activated_roles": ["service_admin"],
        "request_id": unique("request"),
    })
    .to_string()
}

const NOW: &str = "2026-12-04T10:00:00.000Z";

/// A broker with the topic in `partitions` partitions, an icecache reading it that keeps
/// entries 300 s whether or not events arrive (so only an event shows a commit), a producer,
/// and a client of the catalog.
async fn long_window(partitions: i32) -> (Kafka, Icecache, Publisher, Api) {
    let kafka = Kafka::start().await;
    kafka.create_topic(TOPIC, partitions).await;
    let group = unique("group");
    let icecache = icecache(
        &kafka,
        &group,
        &["--events-fresh-for", "300s", "--fresh-for", "300s"],
    )
    .await;
    let publisher = kafka.producer();
    let api = Api::new(&catalog()).await;
    (kafka, icecache, publisher, api)
}

async fn icecache(kafka: &Kafka, group: &str, extra: &[&str]) -> Icecache {
    let brokers = kafka.brokers();
    let mut flags = vec![
        "--events-kafka-brokers",
        &brokers,
        "--events-kafka-group",
        group,
    ];
    flags.extend_from_slice(extra);
    let icecache = Icecache::start(&catalog(), &flags).await;
    wait_source_up(&icecache, 1.0).await;
    icecache
}

async fn wait_source_up(icecache: &Icecache, up: f64) {
    let what = format!("the Kafka source becoming {up}");
    eventually(&what, || async {
        metric(
            &icecache.metrics().await,
            r#"icecache_events_source_up{source="kafka"}"#,
        ) == up
    })
    .await;
}

/// Every event received so far, of any type.
async fn received(icecache: &Icecache) -> f64 {
    icecache
        .metrics()
        .await
        .lines()
        .filter(|l| {
            l.starts_with("icecache_events_received_total{") && l.contains(r#"source="kafka""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn wait_received(icecache: &Icecache, n: f64) {
    let what = format!("{n} Kafka events received");
    eventually(&what, || async { received(icecache).await == n }).await;
}

/// Writes the record of a change `kind` of the table (at `stamp`) to `partition`, then loads
/// the table through icecache until it serves `location`.
async fn until_applied(
    (publisher, api, icecache): (&Publisher, &Api, &Icecache),
    (namespace, table): (&str, &str),
    location: &str,
    (kind, partition, stamp): (&str, i32, &str),
) {
    let event = polaris_event(kind, "warehouse", &[namespace, table], stamp);
    let published = std::time::Instant::now();
    publisher.send(TOPIC, partition, &event).await;
    let what = format!("{kind} on partition {partition} at {stamp}");
    let table = (namespace, table);
    until_served(api, &icecache.url, table, location, published, &what).await;
}

#[tokio::test]
async fn an_update_invalidates_its_table_and_no_other() {
    let (_kafka, icecache, publisher, api) = long_window(1).await;
    let (namespace, table) = api.fresh_table("pk").await;
    let (_, other) = {
        let other = format!("{table}_b");
        api.create_table(&namespace, &other).await;
        (namespace.clone(), other)
    };
    load(&api, &icecache.url, &namespace, &table).await;
    load(&api, &icecache.url, &namespace, &other).await;
    let location = commit(&api, &namespace, &table, 1).await;
    let other_location = commit(&api, &namespace, &other, 1).await;
    // Held from before the commit: without the event the old table is served.
    assert_ne!(
        load(&api, &icecache.url, &namespace, &table).await.1,
        location
    );
    let update = ("AFTER_UPDATE_TABLE", 0, NOW);
    until_applied(
        (&publisher, &api, &icecache),
        (&namespace, &table),
        &location,
        update,
    )
    .await;
    let (_, served, cache) = load(&api, &icecache.url, &namespace, &other).await;
    assert_ne!(served, other_location, "the other table is not invalidated");
    assert_eq!(cache, "HIT");
    assert_eq!(
        metric(
            &icecache.metrics().await,
            r#"icecache_events_received_total{source="kafka",type="AFTER_UPDATE_TABLE"}"#
        ),
        1.0
    );
}

/// Records are keyed by event id, so one table's events land on any partition and arrive in
/// any order: an event that arrives late (older than one applied already) still invalidates.
#[tokio::test]
async fn one_tables_events_invalidate_in_whatever_order_they_arrive() {
    let (_kafka, icecache, publisher, api) = long_window(3).await;
    let (namespace, table) = api.fresh_table("pk").await;
    load(&api, &icecache.url, &namespace, &table).await;
    let stamps = [
        "2026-12-04T10:00:05.000Z",
        "2026-12-04T10:00:01.000Z",
        "2026-12-04T09:00:00.000Z",
        "2026-12-04T10:00:03.000Z",
        "2026-12-04T08:00:00.000Z",
        "2026-12-04T10:00:02.000Z",
    ];
    let kinds = [
        "AFTER_UPDATE_TABLE",
        "AFTER_COMMIT_TABLE",
        "AFTER_SEND_NOTIFICATION",
    ];
    for (n, stamp) in stamps.iter().enumerate() {
        let location = commit(&api, &namespace, &table, n).await;
        assert_ne!(
            load(&api, &icecache.url, &namespace, &table).await.1,
            location,
            "commit {n}"
        );
        let event = (kinds[n % 3], (2 - n % 3) as i32, *stamp);
        until_applied(
            (&publisher, &api, &icecache),
            (&namespace, &table),
            &location,
            event,
        )
        .await;
    }
}

/// Polaris publishes an event for every read and a `BEFORE_*` one ahead of every change; none
/// of them may cost a hit.
#[tokio::test]
async fn reads_and_announcements_invalidate_nothing() {
    let (_kafka, icecache, publisher, api) = long_window(1).await;
    let (namespace, table) = api.fresh_table("pk").await;
    load(&api, &icecache.url, &namespace, &table).await;
    let held = load(&api, &icecache.url, &namespace, &table).await;
    assert_eq!(held.2, "HIT");
    commit(&api, &namespace, &table, 1).await;
    for kind in [
        "AFTER_LOAD_TABLE",
        "BEFORE_UPDATE_TABLE",
        "AFTER_CHECK_EXISTS_TABLE",
        "AFTER_LOAD_CREDENTIALS",
        "AFTER_REFRESH_TABLE",
    ] {
        let event = polaris_event(kind, "warehouse", &[&namespace, &table], NOW);
        publisher.send(TOPIC, 0, &event).await;
    }
    // Applied in order on the one partition: once the sixth is in, the five were read.
    let barrier = polaris_event(
        "AFTER_UPDATE_TABLE",
        "warehouse",
        &[&namespace, "elsewhere"],
        NOW,
    );
    publisher.send(TOPIC, 0, &barrier).await;
    wait_received(&icecache, 6.0).await;
    let (_, served, cache) = load(&api, &icecache.url, &namespace, &table).await;
    assert_eq!((served, cache), (held.1, "HIT".to_owned()));
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_received_total{source="kafka",type="read"}"#
        ),
        4.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_received_total{source="kafka",type="before"}"#
        ),
        1.0
    );
}

/// A transaction names no table: every table of its catalog goes. An event of another
/// catalog leaves this one alone.
#[tokio::test]
async fn a_transaction_reaches_its_whole_catalog_and_no_other() {
    let (_kafka, icecache, publisher, api) = long_window(1).await;
    let (namespace, table) = api.fresh_table("pk").await;
    load(&api, &icecache.url, &namespace, &table).await;
    let location = commit(&api, &namespace, &table, 1).await;
    let elsewhere = serde_json::json!({
        "event_type": "AFTER_COMMIT_TRANSACTION", "catalog_name": "another", "realm_id": "POLARIS"
    });
    publisher.send(TOPIC, 0, &elsewhere.to_string()).await;
    wait_received(&icecache, 1.0).await;
    assert_ne!(
        load(&api, &icecache.url, &namespace, &table).await.1,
        location
    );
    let ours = serde_json::json!({
        "event_type": "AFTER_COMMIT_TRANSACTION", "catalog_name": "warehouse", "realm_id": "POLARIS"
    });
    let published = std::time::Instant::now();
    publisher.send(TOPIC, 0, &ours.to_string()).await;
    until_served(
        &api,
        &icecache.url,
        (&namespace, &table),
        &location,
        published,
        "the transaction",
    )
    .await;
}

/// A rename names both tables: the old name is asked for again (and found gone).
#[tokio::test]
async fn a_rename_invalidates_the_old_name() {
    let (_kafka, icecache, publisher, api) = long_window(1).await;
    let (namespace, table) = api.fresh_table("pk").await;
    assert_eq!(load(&api, &icecache.url, &namespace, &table).await.0, 200);
    let renamed = format!("{table}_renamed");
    let moved = api
        .post(
            "/tables/rename",
            serde_json::json!({
                "source": { "namespace": [namespace], "name": table },
                "destination": { "namespace": [namespace], "name": renamed },
            }),
        )
        .send()
        .await
        .unwrap();
    assert!(
        moved.status().is_success(),
        "renamed at the catalog: {}",
        moved.status()
    );
    assert_eq!(load(&api, &icecache.url, &namespace, &table).await.2, "HIT");
    let event = serde_json::json!({
        "event_type": "AFTER_RENAME_TABLE",
        "source": [namespace, table],
        "destination": [namespace, renamed],
        "catalog_name": "warehouse",
        "realm_id": "POLARIS",
    });
    publisher.send(TOPIC, 0, &event.to_string()).await;
    eventually("the old name asked for again", || async {
        load(&api, &icecache.url, &namespace, &table).await.0 == 404
    })
    .await;
    assert_eq!(load(&api, &icecache.url, &namespace, &renamed).await.0, 200);
}

/// A record that may have been an event but cannot be read is counted by reason and is a gap
/// (entries filled before it lose the long window); the source stays live.
#[tokio::test]
async fn unreadable_records_are_counted_and_are_a_gap() {
    let (_kafka, icecache, publisher, _api) = long_window(1).await;
    publisher.send(TOPIC, 0, "not json").await;
    publisher
        .send(
            TOPIC,
            0,
            r#"{"event_type":"TABLE_CHANGED","catalog_name":"warehouse"}"#,
        )
        .await;
    publisher.send(TOPIC, 0, r#"{"event_type":"AFTER_UPDATE_TABLE","table_identifier":[],"catalog_name":"warehouse"}"#).await;
    let what = "three records rejected";
    eventually(what, || async {
        let metrics = icecache.metrics().await;
        metric(
            &metrics,
            r#"icecache_events_rejected_total{reason="malformed",source="kafka"}"#,
        ) == 2.0
            && metric(
                &metrics,
                r#"icecache_events_rejected_total{reason="unknown_type",source="kafka"}"#,
            ) == 1.0
            // Counted just after its rejection: waited for with it, not read in between.
            && metric(
                &metrics,
                r#"icecache_events_gaps_total{reason="malformed",source="kafka"}"#,
            ) == 2.0
    })
    .await;
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(&metrics, r#"icecache_events_source_up{source="kafka"}"#),
        1.0
    );
}

/// A broker that is gone or hung makes the source Degraded: entries go back to
/// `cache.fresh_for`. It is Live again once the broker answers and nothing is left unread.
#[tokio::test]
async fn a_broker_down_or_hung_ends_the_long_window_until_it_answers() {
    let (mut kafka, icecache, publisher, api) = long_window(1).await;
    let (namespace, table) = api.fresh_table("pk").await;
    load(&api, &icecache.url, &namespace, &table).await;
    kafka.freeze();
    wait_source_up(&icecache, 0.0).await;
    kafka.thaw();
    wait_source_up(&icecache, 1.0).await;
    kafka.kill();
    wait_source_up(&icecache, 0.0).await;
    kafka.restart().await;
    wait_source_up(&icecache, 1.0).await;
    let metrics = icecache.metrics().await;
    // Once for the hung broker and once for the dead one (a reconnect may flap it more).
    assert!(
        metric(
            &metrics,
            r#"icecache_events_gaps_total{reason="disconnected",source="kafka"}"#
        ) >= 2.0
    );
    // librdkafka's own reports of the outage are not the operator's: the source's state says it.
    let logs = icecache.logs();
    assert!(!logs.contains("AllBrokersDown"), "{logs:.2000}");
    // Events still arrive after the broker came back.
    let location = commit(&api, &namespace, &table, 1).await;
    let update = ("AFTER_UPDATE_TABLE", 0, NOW);
    until_applied(
        (&publisher, &api, &icecache),
        (&namespace, &table),
        &location,
        update,
    )
    .await;
}

/// Each process is its own consumer group: one restarted with the same group reads what was
/// published while it was away, and nothing it had read already; a new group starts at the end.
#[tokio::test]
async fn a_restart_resumes_from_the_committed_offset() {
    let kafka = Kafka::start().await;
    kafka.create_topic(TOPIC, 2).await;
    let publisher = kafka.producer();
    let group = unique("group");
    let event = |n: usize| {
        polaris_event(
            "AFTER_UPDATE_TABLE",
            "warehouse",
            &["pk", &format!("t{n}")],
            NOW,
        )
    };
    let mut first = icecache(&kafka, &group, &[]).await;
    publisher.send(TOPIC, 0, &event(0)).await;
    publisher.send(TOPIC, 1, &event(1)).await;
    wait_received(&first, 2.0).await;
    assert!(first.terminate().success(), "icecache stops cleanly");
    for n in 2..5 {
        publisher.send(TOPIC, (n % 2) as i32, &event(n)).await;
    }
    let again = icecache(&kafka, &group, &[]).await;
    // Live means caught up with the ends the broker reported: all three are in, none twice.
    assert_eq!(received(&again).await, 3.0);
    let metrics = again.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_gaps_total{reason="sequence_hole",source="kafka"}"#
        ),
        0.0
    );
    let stranger = icecache(&kafka, &unique("group"), &[]).await;
    assert_eq!(
        received(&stranger).await,
        0.0,
        "a new group starts at the end"
    );
}
