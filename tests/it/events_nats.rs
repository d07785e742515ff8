//! Lakekeeper's change events on NATS. Lakekeeper cannot be built here, so each test makes a
//! real commit on the SeaweedFS catalog and then publishes the event Lakekeeper would publish
//! for it, byte for byte in Lakekeeper's format (cloudevents-sdk's structured JSON, the
//! extensions Lakekeeper sets), to a real nats-server. SeaweedFS's one warehouse is named
//! `warehouse`, which is the REST prefix: the fixture's `warehouse-id` is that name and the
//! prefix template the default `{warehouse_id}`.

use std::time::{Duration, Instant};

use crate::support::events::{commit, load, until_served, Nats};
use crate::support::{catalog, eventually, metric, unique, Api, Icecache};
use serde_json::json;

/// The event Lakekeeper publishes for `kind` on `namespace.name` (namespace parts joined as
/// Lakekeeper joins them: U+001F, or `.`).
fn lakekeeper_event(kind: &str, warehouse: &str, namespace: &str, name: &str) -> Vec<u8> {
    let id = uuid_v7();
    format!(
        concat!(
            r#"{{"specversion":"1.0","id":"{id}","type":"{kind}","#,
            r#""source":"uri:iceberg-catalog-service:lakekeeper-0","#,
            r#""datacontenttype":"application/json","data":null,"#,
            r#""tabular-type":"Table","tabular-id":"0196a1c2-0000-7000-8000-000000000001","#,
            r#""warehouse-id":"{warehouse}","name":"{name}","namespace":"{namespace}","#,
            r#""prefix":"","num-events":1,"sequence-number":0,"#,
            r#""trace-id":"0196a1c2-0000-7000-8000-000000000002","actor":"{{\"type\":\"anonymous\"}}"}}"#
        ),
        id = id,
        kind = kind,
        warehouse = warehouse,
        name = name,
        namespace = namespace.replace('\u{1f}', r"\u001f"),
    )
    .into_bytes()
}

/// A UUIDv7 for now (Lakekeeper's event ids), so icecache can measure the lag.
fn uuid_v7() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let random = crate::support::unique("r").len() as u64;
    format!(
        "{:08x}-{:04x}-7{:03x}-8{:03x}-{:012x}",
        ms >> 16,
        ms & 0xffff,
        random & 0xfff,
        0,
        random
    )
}

const SUBJECT: &str = "lakekeeper.events";

async fn icecache(nats: &Nats, extra: &[&str]) -> Icecache {
    let url = nats.url();
    let mut flags = vec!["--events-nats-url", &url, "--events-nats-subject", SUBJECT];
    flags.extend_from_slice(extra);
    let icecache = Icecache::start(&catalog(), &flags).await;
    wait_source_up(&icecache, 1.0).await;
    icecache
}

async fn wait_source_up(icecache: &Icecache, up: f64) -> Duration {
    let what = format!("the NATS source becoming {up}");
    eventually(&what, || async {
        let metrics = icecache.metrics().await;
        metric(&metrics, r#"icecache_events_source_up{source="nats"}"#) == up
    })
    .await
}

/// NATS, an icecache that keeps entries 300 s whether or not events arrive (so only an event
/// shows a commit), a publisher and a client of the catalog.
async fn long_window() -> (Nats, Icecache, async_nats::Client, Api) {
    let nats = Nats::start().await;
    let icecache = icecache(
        &nats,
        &["--events-fresh-for", "300s", "--fresh-for", "300s"],
    )
    .await;
    let publisher = nats.client().await;
    let api = Api::new(&catalog()).await;
    (nats, icecache, publisher, api)
}

/// A table in a two-level namespace `a.b` (`a%1Fb` in a path).
async fn two_level_table(api: &Api) -> (String, String, String) {
    let top = unique("lk");
    api.create_namespace(&top).await;
    let created = api
        .post("/namespaces", json!({ "namespace": [top, "b"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let path = format!("{top}%1Fb");
    api.create_table(&path, "t").await;
    (path, format!("{top}\u{1f}b"), format!("{top}.b"))
}

/// Every update is applied, whichever namespace encoding it uses: without it the table held
/// for 300 s would be served. How soon is measured by `benches/events_latency.sh` (a timed
/// assertion here would measure the other tests running beside it); this prints what it saw.
#[tokio::test]
async fn an_update_on_nats_is_applied_in_both_namespace_encodings() {
    let (_nats, icecache, publisher, api) = long_window().await;
    let (path, separated, dotted) = two_level_table(&api).await;
    load(&api, &icecache.url, &path, "t").await;
    let mut applied_after = Vec::new();
    for n in 0..100 {
        let location = commit(&api, &path, "t", n).await;
        // Held from before the commit: without the event, the old table is served.
        assert_ne!(
            load(&api, &icecache.url, &path, "t").await.1,
            location,
            "commit {n}"
        );
        let namespace = if n % 2 == 0 { &separated } else { &dotted };
        let published = Instant::now();
        publisher
            .publish(
                SUBJECT,
                lakekeeper_event("updateTable", "warehouse", namespace, "t").into(),
            )
            .await
            .unwrap();
        publisher.flush().await.unwrap();
        let what = format!("event {n}");
        let table = (path.as_str(), "t");
        applied_after
            .push(until_served(&api, &icecache.url, table, &location, published, &what).await);
    }
    applied_after.sort();
    eprintln!(
        "applied after publish: median {:?}, p99 {:?}, max {:?}",
        applied_after[50], applied_after[98], applied_after[99]
    );
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_received_total{source="nats",type="updateTable"}"#
        ),
        100.0
    );
    assert!(
        metric(
            &metrics,
            r#"icecache_events_lag_seconds_count{source="nats"}"#
        ) >= 100.0
    );
}

#[tokio::test]
async fn an_event_for_another_warehouse_invalidates_nothing() {
    let (_nats, icecache, publisher, api) = long_window().await;
    let (path, separated, _) = two_level_table(&api).await;
    load(&api, &icecache.url, &path, "t").await;
    let other = lakekeeper_event(
        "updateTable",
        "6f1c4d3e-8a2b-11ef-9c1d-7b3f0e2a4c5d",
        &separated,
        "t",
    );
    publisher.publish(SUBJECT, other.into()).await.unwrap();
    publisher.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(load(&api, &icecache.url, &path, "t").await.2, "HIT");
    let ours = lakekeeper_event("dropTable", "warehouse", &separated, "t");
    publisher.publish(SUBJECT, ours.into()).await.unwrap();
    publisher.flush().await.unwrap();
    eventually("the drop applied", || async {
        load(&api, &icecache.url, &path, "t").await.2 == "MISS"
    })
    .await;
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_invalidated_entries_total{source="nats"}"#
        ),
        1.0
    );
}

#[tokio::test]
async fn a_disconnect_ends_the_long_window_and_a_reconnect_starts_a_new_one() {
    let mut nats = Nats::start().await;
    let icecache = icecache(&nats, &["--events-fresh-for", "300s", "--fresh-for", "1s"]).await;
    let api = Api::new(&catalog()).await;
    let (namespace, table) = loaded_fresh_table(&api, &icecache).await;
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "HIT",
        "the long window"
    );
    let held = entries(&icecache).await;
    nats.kill();
    wait_source_up(&icecache, 0.0).await;
    // Nothing is removed (no refill storm): entries only lose the long window.
    assert_eq!(entries(&icecache).await, held);
    // The entry is past cache.fresh_for: without a live source it is asked for again.
    assert_ne!(load(&api, &icecache.url, &namespace, &table).await.2, "HIT");
    nats.restart().await;
    wait_source_up(&icecache, 1.0).await;
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_gaps_total{reason="disconnected",source="nats"}"#
        ),
        1.0
    );
    // Filled while live again (once the entry filled while degraded has gone stale): it earns
    // the long window anew.
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "REVALIDATED"
    );
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "HIT"
    );
}

/// A new table, loaded once through `icecache` (a MISS).
async fn loaded_fresh_table(api: &Api, icecache: &Icecache) -> (String, String) {
    let (namespace, table) = api.fresh_table("lk").await;
    assert_eq!(load(api, &icecache.url, &namespace, &table).await.2, "MISS");
    (namespace, table)
}

/// How the table is served once the short window (`--fresh-for 1s`) of its entry has passed.
async fn past_the_short_window(
    api: &Api,
    icecache: &Icecache,
    namespace: &str,
    table: &str,
) -> String {
    tokio::time::sleep(Duration::from_millis(1200)).await;
    load(api, &icecache.url, namespace, table).await.2
}

async fn entries(icecache: &Icecache) -> u64 {
    let stats = crate::support::get_json(&format!("{}/cache/stats", icecache.admin)).await;
    stats["entries"].as_u64().expect("an entry count")
}

#[tokio::test]
async fn a_source_starts_degraded_and_is_live_once_subscribed() {
    // No server yet: icecache starts, serves, and does not trust events.
    let mut nats = Nats::not_started();
    let url = nats.url();
    let icecache = Icecache::start(
        &catalog(),
        &[
            "--events-nats-url",
            &url,
            "--events-nats-subject",
            SUBJECT,
            "--events-fresh-for",
            "300s",
            "--fresh-for",
            "1s",
        ],
    )
    .await;
    let stats = crate::support::get_json(&format!("{}/cache/stats", icecache.admin)).await;
    assert_eq!(stats["event_sources"]["nats"], "degraded");
    let api = Api::new(&catalog()).await;
    let (namespace, table) = loaded_fresh_table(&api, &icecache).await;
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "REVALIDATED"
    );
    nats.restart().await;
    wait_source_up(&icecache, 1.0).await;
    let stats = crate::support::get_json(&format!("{}/cache/stats", icecache.admin)).await;
    assert_eq!(stats["event_sources"]["nats"], "live");
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "REVALIDATED"
    );
    assert_eq!(
        past_the_short_window(&api, &icecache, &namespace, &table).await,
        "HIT"
    );
}

#[tokio::test]
async fn a_hung_server_ends_the_long_window_until_it_answers_again() {
    let nats = Nats::start().await;
    let icecache = icecache(&nats, &["--events-fresh-for", "300s"]).await;
    nats.freeze();
    // How soon follows from the ping interval; printed, not asserted.
    let noticed = wait_source_up(&icecache, 0.0).await;
    eprintln!("a hung NATS server was noticed after {noticed:?}");
    nats.thaw();
    wait_source_up(&icecache, 1.0).await;
}

#[tokio::test]
async fn a_thousand_unreadable_messages_invalidate_nothing_and_are_counted_by_reason() {
    let (_nats, icecache, publisher, api) = long_window().await;
    let (namespace, table) = api.fresh_table("lk").await;
    load(&api, &icecache.url, &namespace, &table).await;
    let good = String::from_utf8(lakekeeper_event(
        "updateTable",
        "warehouse",
        &namespace,
        &table,
    ))
    .unwrap();
    for n in 0..1000 {
        let body: Vec<u8> = match n % 5 {
            0 => b"{\"specversion\":".to_vec(),
            1 => good.replace("updateTable", "createNamespace").into_bytes(),
            2 => good
                .replace(r#""specversion":"1.0""#, r#""specversion":"0.3""#)
                .into_bytes(),
            3 => good
                .replace(r#""name":"#, r#""name":"x","name":"#)
                .into_bytes(),
            // Not UTF-8, in a member icecache does not read.
            _ => good
                .replace(r#""actor":"#, "\"actor\":\"\u{1}\",\"x\":")
                .into_bytes()
                .into_iter()
                .map(|b| if b == 1 { 0xff } else { b })
                .collect(),
        };
        publisher.publish(SUBJECT, body.into()).await.unwrap();
    }
    publisher.flush().await.unwrap();
    let rejected = |metrics: &str, reason: &str| {
        metric(
            metrics,
            &format!(r#"icecache_events_rejected_total{{reason="{reason}",source="nats"}}"#),
        )
    };
    eventually("all 1000 counted", || async {
        let metrics = icecache.metrics().await;
        rejected(&metrics, "malformed") + rejected(&metrics, "unknown_type") == 1000.0
    })
    .await;
    let metrics = icecache.metrics().await;
    assert_eq!(rejected(&metrics, "unknown_type"), 200.0);
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_invalidated_entries_total{source="nats"}"#
        ),
        0.0
    );
    assert_eq!(load(&api, &icecache.url, &namespace, &table).await.2, "HIT");
    // Duplicates and late arrivals only invalidate: the table is served as the catalog has it.
    let location = commit(&api, &namespace, &table, 1).await;
    for _ in 0..2 {
        publisher
            .publish(SUBJECT, good.clone().into_bytes().into())
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        load(&api, &icecache.url, &namespace, &table).await.1,
        location
    );
}

#[tokio::test]
async fn jetstream_replays_from_its_cursor_and_a_hole_is_a_gap() {
    let nats = Nats::start().await;
    let stream = unique("icecache_events").replace('-', "_");
    let publisher = nats.client().await;
    let js = async_nats::jetstream::new(publisher.clone());
    // The stream keeps two events: more published while icecache is away are lost to it.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec![SUBJECT.to_owned()],
        max_messages: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let consumer = unique("icecache-test");
    let flags = [
        "--events-nats-stream",
        &stream,
        "--events-nats-consumer",
        &consumer,
        "--events-fresh-for",
        "300s",
    ];
    // What the consumer has acknowledged, as the server holds it.
    let acked = |n: u64| {
        let (js, stream, consumer) = (js.clone(), stream.clone(), consumer.clone());
        async move {
            eventually(&format!("{n} events acknowledged"), || async {
                let Ok(stream) = js.get_stream(&stream).await else {
                    return false;
                };
                let Ok(mut consumer) = stream
                    .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&consumer)
                    .await
                else {
                    return false;
                };
                consumer
                    .info()
                    .await
                    .is_ok_and(|info| info.ack_floor.stream_sequence >= n)
            })
            .await;
        }
    };
    let api = Api::new(&catalog()).await;
    let (namespace, table) = api.fresh_table("lk").await;
    let event = || lakekeeper_event("updateTable", "warehouse", &namespace, &table);
    let publish = |n: usize| {
        let js = js.clone();
        let event = event();
        async move {
            for _ in 0..n {
                js.publish(SUBJECT, event.clone().into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        }
    };
    let gaps = |m: &str| {
        metric(
            m,
            r#"icecache_events_gaps_total{reason="sequence_hole",source="nats"}"#,
        )
    };
    let mut first = icecache(&nats, &flags).await;
    publish(1).await;
    wait_received(&first, 1.0).await;
    // Its acknowledgement follows the count: it lands before the process goes.
    acked(1).await;
    first.terminate();
    // Published while icecache is away, all still held: replayed from the cursor, no gap.
    publish(2).await;
    let mut second = icecache(&nats, &flags).await;
    wait_received(&second, 2.0).await;
    acked(3).await;
    let metrics = second.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_duplicates_total{source="nats"}"#
        ),
        0.0
    );
    assert_eq!(gaps(&metrics), 0.0, "a clean replay is no gap");
    assert_eq!(
        metric(&metrics, r#"icecache_events_source_up{source="nats"}"#),
        1.0
    );
    second.terminate();
    // Three while away: the stream kept the last two, one was never read.
    publish(3).await;
    let third = icecache(&nats, &flags).await;
    wait_received(&third, 2.0).await;
    eventually("the hole seen", || async {
        gaps(&third.metrics().await) == 1.0
    })
    .await;
}

async fn wait_received(icecache: &Icecache, n: f64) {
    let what = format!("{n} events received");
    eventually(&what, || async {
        let metrics = icecache.metrics().await;
        metric(
            &metrics,
            r#"icecache_events_received_total{source="nats",type="updateTable"}"#,
        ) == n
    })
    .await;
}
