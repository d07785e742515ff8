//! Catalog change events from SeaweedFS's filer webhook: a write made straight to the catalog
//! (not through icecache) is seen through icecache at once, so entries can be kept for
//! `events.fresh_for` safely. Each test runs a SeaweedFS of its own whose filer posts to the
//! icecache under test; the writes go to SeaweedFS directly.

use std::time::{Duration, Instant};

use crate::support::events::{commit, load, token_file, until_served, Weed};
use crate::support::relay::Relay;
use crate::support::{metric, ports, unique, Icecache};
use serde_json::json;

const TOKEN: &str = "filer-webhook-token";

/// A SeaweedFS whose webhook reaches an icecache started with `flags` (and the token file).
async fn watched(flags: &[&str]) -> (Weed, Icecache, crate::support::ConfigFile) {
    let admin = ports::reserved();
    let token = token_file(TOKEN);
    let hook = format!("http://127.0.0.1:{admin}/events/seaweedfs");
    let weed = Weed::start(Some((&hook, TOKEN))).await;
    let mut all = vec!["--events-seaweedfs-token-file", token.path()];
    all.extend_from_slice(flags);
    let icecache = Icecache::start_with_admin(&weed.iceberg, admin, &all).await;
    (weed, icecache, token)
}

async fn webhook(icecache: &Icecache, token: Option<&str>, body: Vec<u8>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/events/seaweedfs", icecache.admin))
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("webhook sent")
}

/// Every direct commit is seen through the icecache that listens, never through the one that
/// does not. How soon is measured by `benches/events_latency.sh` (a timed assertion here would
/// measure the other tests running beside it); this prints what it saw.
#[tokio::test]
async fn a_direct_commit_is_seen_and_without_events_it_is_not() {
    let (weed, icecache, _token) = watched(&["--events-fresh-for", "300s"]).await;
    // The same catalog, no events, the same long window: it must show the old table.
    let blind = Icecache::start(&weed.iceberg, &["--fresh-for", "300s"]).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    settle(&icecache).await;
    let (_, first, _) = load(&api, &icecache.url, &namespace, "t").await;
    let (_, blind_first, _) = load(&api, &blind.url, &namespace, "t").await;
    assert_eq!(first, blind_first);
    let mut seen_after = Vec::new();
    for n in 0..100 {
        let location = commit(&api, &namespace, "t", n).await;
        let committed = Instant::now();
        let what = format!("commit {n}");
        let table = (namespace.as_str(), "t");
        seen_after
            .push(until_served(&api, &icecache.url, table, &location, committed, &what).await);
        let (_, blind_now, _) = load(&api, &blind.url, &namespace, "t").await;
        assert_eq!(blind_now, first, "without events the old table is served");
    }
    seen_after.sort();
    let p99 = seen_after[98];
    eprintln!(
        "seen after a direct commit: median {:?}, p99 {:?}, max {:?}",
        seen_after[50], p99, seen_after[99]
    );
    let metrics = icecache.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"icecache_events_received_total{source="seaweedfs",type="update"}"#
        ) >= 100.0
    );
}

#[tokio::test]
async fn an_entry_outlives_cache_fresh_for_while_the_webhook_is_live() {
    let (weed, icecache, _token) =
        watched(&["--fresh-for", "1s", "--events-fresh-for", "300s"]).await;
    let api = weed.api().await;
    let (namespace, table) = (unique("ev"), "t");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, table).await;
    settle(&icecache).await;
    assert_eq!(load(&api, &icecache.url, &namespace, table).await.2, "MISS");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(load(&api, &icecache.url, &namespace, table).await.2, "HIT");
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(&metrics, r#"icecache_events_source_up{source="seaweedfs"}"#),
        1.0
    );
}

#[tokio::test]
async fn a_drop_and_a_rename_reach_both_names() {
    let (weed, icecache, _token) =
        watched(&["--events-fresh-for", "300s", "--fresh-for", "300s"]).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "a").await;
    let (status, _, _) = load(&api, &icecache.url, &namespace, "a").await;
    assert_eq!(status, 200);
    // The destination asked for before it exists: a 404 (never cached, but asked again).
    assert_eq!(load(&api, &icecache.url, &namespace, "b").await.0, 404);
    let renamed = api
        .post(
            "/tables/rename",
            json!({ "source": { "namespace": [namespace], "name": "a" },
                    "destination": { "namespace": [namespace], "name": "b" } }),
        )
        .send()
        .await
        .expect("rename sent");
    assert_eq!(renamed.status(), 204);
    let gone =
        wait_for(|| async { load(&api, &icecache.url, &namespace, "a").await.0 == 404 }).await;
    assert!(gone, "the renamed table's old name still loads");
    assert_eq!(load(&api, &icecache.url, &namespace, "b").await.0, 200);
    let dropped = api
        .http
        .delete(format!("{}/namespaces/{namespace}/tables/b", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .expect("drop sent");
    assert_eq!(dropped.status(), 204);
    let gone =
        wait_for(|| async { load(&api, &icecache.url, &namespace, "b").await.0 == 404 }).await;
    assert!(gone, "the dropped table still loads");
}

/// Lets the filer's events of a table's creation arrive (they trail its answer and would end
/// the entry of a load made before them): waits until icecache has counted none for 200 ms.
async fn settle(icecache: &Icecache) {
    let counted = || async {
        let metrics = icecache.metrics().await;
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("icecache_events_received_total{source=\"seaweedfs\"")
                    || l.starts_with("icecache_events_unrelated_total{source=\"seaweedfs\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let start = Instant::now();
    let mut last = counted().await;
    while start.elapsed() < crate::support::PATIENCE {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = counted().await;
        if now == last && now > 0.0 {
            return;
        }
        last = now;
    }
}

/// Polls `check` until it holds or `PATIENCE` has passed, and says whether it held. The entries
/// here are kept for 300 s: only the event can make it hold sooner (how soon is measured by
/// `benches/events_latency.sh`, not here).
async fn wait_for<F, Fut>(check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < crate::support::PATIENCE {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    check().await
}

#[tokio::test]
async fn the_webhook_without_its_token_changes_nothing() {
    let (weed, icecache, _token) = watched(&["--events-fresh-for", "300s"]).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    settle(&icecache).await;
    load(&api, &icecache.url, &namespace, "t").await;
    let forged = serde_json::to_vec(&json!({
        "key": format!("/buckets/warehouse/{namespace}/t"), "event_type": "update", "message": {}
    }))
    .unwrap();
    for token in [None, Some("wrong"), Some("filer-webhook-token-and-more")] {
        let response = webhook(&icecache, token, forged.clone()).await;
        assert_eq!(response.status(), 401, "{token:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], 401);
        assert_eq!(body["error"]["type"], "NotAuthorizedException");
    }
    assert_eq!(load(&api, &icecache.url, &namespace, "t").await.2, "HIT");
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_rejected_total{reason="unauthorized",source="seaweedfs"}"#
        ),
        3.0
    );
    // Bad callers are not the catalog losing events: the long window stays.
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_gaps_total{reason="unauthorized",source="seaweedfs"}"#
        ),
        0.0
    );
    // The right token is taken, in any case of the scheme.
    let response = reqwest::Client::new()
        .post(format!("{}/events/seaweedfs", icecache.admin))
        .header("authorization", format!("bearer {TOKEN}"))
        .body(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(load(&api, &icecache.url, &namespace, "t").await.2, "MISS");
}

#[tokio::test]
async fn a_thousand_unreadable_messages_invalidate_nothing_and_end_the_long_window() {
    let (weed, icecache, _token) =
        watched(&["--fresh-for", "1s", "--events-fresh-for", "300s"]).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    settle(&icecache).await;
    assert_eq!(load(&api, &icecache.url, &namespace, "t").await.2, "MISS");
    let filled = Instant::now();
    let key = format!("/buckets/warehouse/{namespace}/t");
    let oversized = vec![b' '; 17 << 20];
    let mut statuses = std::collections::BTreeMap::new();
    for n in 0..1000 {
        let body = match n % 5 {
            0 => b"{not json".to_vec(),
            1 => json!({"key": key, "event_type": "truncate", "message": {}})
                .to_string()
                .into_bytes(),
            2 => json!({"key": 7, "event_type": "update"})
                .to_string()
                .into_bytes(),
            3 => format!(r#"{{"key":"{key}","key":"/x","event_type":"update"}}"#).into_bytes(),
            _ if n == 4 => oversized.clone(),
            // A filer event but for a byte that is not UTF-8, in a member icecache ignores.
            _ => format!(r#"{{"key":"{key}","event_type":"update","message":{{"x":"@"}}}}"#)
                .replace('@', "\u{1}")
                .into_bytes()
                .into_iter()
                .map(|b| if b == 1 { 0xff } else { b })
                .collect(),
        };
        let sent = reqwest::Client::new()
            .post(format!("{}/events/seaweedfs", icecache.admin))
            .bearer_auth(TOKEN)
            .body(body)
            .send()
            .await;
        // The oversized one may be refused before it is all sent (the connection then closes
        // under the client): its count is checked below.
        let status = sent.map_or(0, |r| r.status().as_u16());
        *statuses.entry(status).or_insert(0) += 1;
    }
    assert_eq!(statuses.get(&200), None, "{statuses:?}");
    assert_eq!(statuses.get(&400), Some(&999), "{statuses:?}");
    // Nothing was invalidated: the entry is still held.
    let stats: serde_json::Value = reqwest::get(format!("{}/cache/stats", icecache.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["entries"], 1, "{stats}");
    let metrics = icecache.metrics().await;
    let rejected = |reason: &str| {
        metric(
            &metrics,
            &format!(r#"icecache_events_rejected_total{{reason="{reason}",source="seaweedfs"}}"#),
        )
    };
    assert_eq!(rejected("malformed"), 799.0);
    assert_eq!(rejected("unknown_type"), 200.0);
    assert_eq!(rejected("oversized"), 1.0);
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_events_invalidated_entries_total{source="seaweedfs"}"#
        ),
        0.0
    );
    // But any of them may have been a real event: past cache.fresh_for the entry is asked for
    // again, though it is well within events.fresh_for.
    tokio::time::sleep(Duration::from_millis(1200).saturating_sub(filled.elapsed())).await;
    assert_eq!(
        load(&api, &icecache.url, &namespace, "t").await.2,
        "REVALIDATED"
    );
    // Entries filled after the gap earn the long window again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(load(&api, &icecache.url, &namespace, "t").await.2, "HIT");
}

#[tokio::test]
async fn a_fill_that_began_before_an_event_is_not_stored() {
    let admin = ports::reserved();
    let token = token_file(TOKEN);
    let hook = format!("http://127.0.0.1:{admin}/events/seaweedfs");
    let weed = Weed::start(Some((&hook, TOKEN))).await;
    // A relay between icecache and SeaweedFS holds the fill's answer while the commit lands.
    let relay = Relay::start(&weed.iceberg).await;
    let icecache = Icecache::start_with_admin(
        &relay.url,
        admin,
        &[
            "--events-seaweedfs-token-file",
            token.path(),
            "--events-fresh-for",
            "300s",
            "--fresh-for",
            "300s",
        ],
    )
    .await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    settle(&icecache).await;
    let answered = relay.statuses().len();
    let release = relay.hold_next_get();
    let slow = {
        let (api_http, token, url) = (api.http.clone(), api.token.clone(), icecache.url.clone());
        let path = format!("{url}/v1/warehouse/namespaces/{namespace}/tables/t");
        tokio::spawn(async move {
            api_http
                .get(path)
                .bearer_auth(token)
                .send()
                .await
                .expect("slow load")
                .status()
        })
    };
    // The fill has asked the catalog (its answer is held); now the table moves on.
    crate::support::eventually("the catalog answered the fill", || async {
        relay.statuses().len() > answered
    })
    .await;
    let location = commit(&api, &namespace, "t", 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    release.notify_one();
    assert_eq!(slow.await.unwrap(), 200);
    let (_, now, cache) = load(&api, &icecache.url, &namespace, "t").await;
    assert_eq!(
        now, location,
        "the answer fetched before the event was stored"
    );
    assert_ne!(cache, "HIT");
}

#[tokio::test]
async fn an_event_received_by_one_replica_invalidates_the_whole_tier() {
    use crate::support::cluster::{KeyFile, Redis};
    let redis = Redis::start().await;
    let key = KeyFile::new();
    let admin = ports::reserved();
    let token = token_file(TOKEN);
    let hook = format!("http://127.0.0.1:{admin}/events/seaweedfs");
    let weed = Weed::start(Some((&hook, TOKEN))).await;
    let url = redis.url();
    let tier = [
        "--redis-url",
        &url,
        "--cluster-key-file",
        key.path(),
        "--workers",
        "1",
    ];
    // The filer posts to the first replica only; the second keeps entries for 300 s.
    let mut first_flags = tier.to_vec();
    first_flags.extend([
        "--events-seaweedfs-token-file",
        token.path(),
        "--events-fresh-for",
        "300s",
    ]);
    let first = Icecache::start_with_admin(&weed.iceberg, admin, &first_flags).await;
    let mut second_flags = tier.to_vec();
    second_flags.extend(["--fresh-for", "300s"]);
    let second = Icecache::start(&weed.iceberg, &second_flags).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    settle(&first).await;
    let (_, before, _) = load(&api, &second.url, &namespace, "t").await;
    assert_eq!(load(&api, &second.url, &namespace, "t").await.1, before);
    let location = commit(&api, &namespace, "t", 1).await;
    let seen =
        wait_for(|| async { load(&api, &second.url, &namespace, "t").await.1 == location }).await;
    assert!(seen, "the other replica still serves the table as it was");
    let metrics = first.metrics().await;
    assert!(
        metric(
            &metrics,
            r#"icecache_events_received_total{source="seaweedfs",type="update"}"#
        ) >= 1.0
    );
}

#[tokio::test]
async fn after_an_event_no_304_head_or_gzip_answer_vouches_for_the_old_table() {
    let (weed, icecache, _token) =
        watched(&["--events-fresh-for", "300s", "--fresh-for", "300s"]).await;
    let api = weed.api().await;
    let namespace = unique("ev");
    api.create_namespace(&namespace).await;
    api.create_table(&namespace, "t").await;
    // Large enough for icecache to keep a gzip copy.
    api.set_property(&namespace, "t", "padding", &"x".repeat(4096))
        .await;
    settle(&icecache).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let gzipped = |url: &str| {
        h2.get(url)
            .bearer_auth(&api.token)
            .header("accept-encoding", "gzip")
    };
    let url = format!(
        "{}/v1/warehouse/namespaces/{namespace}/tables/t",
        icecache.url
    );
    let first = gzipped(&url).send().await.unwrap();
    assert_eq!(first.version(), http::Version::HTTP_2);
    assert_eq!(first.headers()["content-encoding"], "gzip");
    let tag = first.headers()["etag"].clone();
    let before = gunzip_json(&first.bytes().await.unwrap());
    // Held: a HEAD is answered here, the tag confirmed with a 304.
    let head = h2.head(&url).bearer_auth(&api.token).send().await.unwrap();
    assert_eq!(
        (
            head.status().as_u16(),
            crate::support::x_cache(&head).as_str()
        ),
        (204, "HIT")
    );
    let same = gzipped(&url)
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), 304);
    let location = commit(&api, &namespace, "t", 1).await;
    assert_ne!(before["metadata-location"], location.as_str());
    let moved = wait_for(|| async {
        let head = h2.head(&url).bearer_auth(&api.token).send().await.unwrap();
        crate::support::x_cache(&head) == "BYPASS"
    })
    .await;
    assert!(moved, "a HEAD still vouched from the entry the event ended");
    let again = gzipped(&url)
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status(),
        200,
        "the old tag was confirmed after the event"
    );
    let body = gunzip_json(&again.bytes().await.unwrap());
    assert_eq!(body["metadata-location"], location.as_str());
}

fn gunzip_json(bytes: &[u8]) -> serde_json::Value {
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut text)
        .expect("a gzip body");
    serde_json::from_slice(&text).expect("JSON inside")
}
