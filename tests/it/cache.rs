//! The loadTable cache against the real catalog (SeaweedFS), with upstream calls counted by the
//! relay between icecache and the catalog.

use std::time::Duration;

use crate::support::relay::Relay;
use crate::support::{
    catalog, eventually, get_json, metric, pyiceberg_async, raw_get_head, x_cache, Api, Icecache,
};
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::{json, Value};

struct Setup {
    relay: Relay,
    icecache: Icecache,
    api: Api,
    namespace: String,
    table: String,
}

impl Setup {
    async fn new(flags: &[&str]) -> Setup {
        let relay = Relay::start(&catalog()).await;
        let icecache = Icecache::start(&relay.url, flags).await;
        let api = Api::new(&icecache.url).await;
        let (namespace, table) = api.fresh_table("ns_cache").await;
        Setup {
            relay,
            icecache,
            api,
            namespace,
            table,
        }
    }

    fn path(&self) -> String {
        format!("/namespaces/{}/tables/{}", self.namespace, self.table)
    }

    fn upstream_loads(&self) -> usize {
        self.relay.count("GET", &format!("/tables/{}", self.table))
    }

    async fn load(&self) -> reqwest::Response {
        self.api.get(&self.path()).send().await.unwrap()
    }

    async fn load_if_none_match(&self, etag: &str) -> reqwest::Response {
        self.api
            .get(&self.path())
            .header(IF_NONE_MATCH, etag)
            .send()
            .await
            .unwrap()
    }
}

fn etag(response: &reqwest::Response) -> String {
    response.headers()[ETAG].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_second_load_is_a_hit_without_an_upstream_call() {
    let s = Setup::new(&[]).await;
    let first = s.load().await;
    assert_eq!(first.status(), 200);
    assert_eq!(x_cache(&first), "MISS");
    let first_body = first.bytes().await.unwrap();
    let second = s.load().await;
    assert_eq!(x_cache(&second), "HIT");
    assert!(second.headers().get("age").is_some());
    assert_eq!(second.bytes().await.unwrap(), first_body);
    assert_eq!(s.upstream_loads(), 1);
}

#[tokio::test]
async fn if_none_match_with_the_current_etag_is_a_local_304_without_body() {
    let s = Setup::new(&[]).await;
    let tag = etag(&s.load().await);
    let not_modified = s.load_if_none_match(&tag).await;
    assert_eq!(not_modified.status(), 304);
    assert_eq!(etag(&not_modified), tag);
    assert!(not_modified.bytes().await.unwrap().is_empty());
    assert_eq!(s.upstream_loads(), 1);
}

#[tokio::test]
async fn a_weak_or_listed_etag_matches_too() {
    let s = Setup::new(&[]).await;
    let tag = etag(&s.load().await);
    let weak = s.load_if_none_match(&format!("W/{tag}")).await;
    assert_eq!(weak.status(), 304);
    let listed = s.load_if_none_match(&format!("\"other\", {tag}")).await;
    assert_eq!(listed.status(), 304);
}

#[tokio::test]
async fn a_stale_or_foreign_etag_gets_the_full_body() {
    let s = Setup::new(&[]).await;
    let tag = etag(&s.load().await);
    for other in ["\"0123456789abcdef\"", "W/\"lk2.abc\"", "unquoted"] {
        let response = s.load_if_none_match(other).await;
        assert_eq!(response.status(), 200, "{other}");
        assert_eq!(etag(&response), tag);
        let body: Value = response.json().await.unwrap();
        assert!(body["metadata"]["table-uuid"].is_string());
    }
}

#[tokio::test]
async fn if_none_match_star_is_a_304() {
    let s = Setup::new(&[]).await;
    s.load().await;
    assert_eq!(s.load_if_none_match("*").await.status(), 304);
}

#[tokio::test]
async fn without_if_none_match_there_is_never_a_304() {
    let s = Setup::new(&[]).await;
    for _ in 0..3 {
        assert_eq!(s.load().await.status(), 200);
    }
}

#[tokio::test]
async fn snapshots_refs_and_all_are_separate_entries_with_distinct_etags() {
    let s = Setup::new(&[]).await;
    let all = s.load().await;
    let refs = s
        .api
        .get(&format!("{}?snapshots=refs", s.path()))
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&refs), "MISS");
    assert_ne!(etag(&all), etag(&refs));
    let explicit_all = s
        .api
        .get(&format!("{}?snapshots=all", s.path()))
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&explicit_all), "HIT");
    assert_eq!(etag(&explicit_all), etag(&all));
    // The refs ETag does not validate the all representation.
    assert_eq!(s.load_if_none_match(&etag(&refs)).await.status(), 200);
}

#[tokio::test]
async fn every_spelling_of_a_table_hits_one_entry() {
    let s = Setup::new(&[]).await;
    s.load().await;
    let spelled = s
        .api
        .get(&format!(
            "/namespaces/{}/tables/%74",
            s.namespace.replace('_', "%5F")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(spelled.status(), 200);
    assert_eq!(x_cache(&spelled), "HIT");
    assert_eq!(s.upstream_loads(), 1);
}

#[tokio::test]
async fn callers_with_different_credentials_never_share_an_entry() {
    let s = Setup::new(&[]).await;
    s.load().await;
    // Tokens carry their issue time in seconds: wait for a distinct one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let other_token = crate::support::token(&catalog()).await;
    assert_ne!(other_token, s.api.token);
    let other = s
        .api
        .http
        .get(format!("{}{}", s.api.base, s.path()))
        .bearer_auth(&other_token)
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&other), "MISS");
    assert_eq!(s.upstream_loads(), 2);
    let anonymous = s
        .api
        .http
        .get(format!("{}{}", s.api.base, s.path()))
        .send()
        .await
        .unwrap();
    assert_ne!(
        anonymous.status(),
        200,
        "an anonymous caller got a cached table"
    );
}

#[tokio::test]
async fn etag_is_written_in_exactly_that_case_on_http1() {
    let s = Setup::new(&[]).await;
    s.load().await;
    let path = format!("/v1/warehouse{}", s.path());
    let token = format!("Authorization: Bearer {}\r\n", s.api.token);
    let hit = raw_get_head(&s.icecache, &path, &token).await;
    assert!(hit.starts_with("HTTP/1.1 200"), "{hit}");
    let etag = hit
        .split("\r\n")
        .find_map(|line| line.strip_prefix("ETag: "))
        .unwrap_or_else(|| panic!("no `ETag:` line in {hit}"));
    let conditional = format!("{token}If-None-Match: {etag}\r\n");
    let not_modified = raw_get_head(&s.icecache, &path, &conditional).await;
    assert!(not_modified.starts_with("HTTP/1.1 304"), "{not_modified}");
    assert!(
        not_modified.contains(&format!("\r\nETag: {etag}\r\n")),
        "{not_modified}"
    );
    // Other names go in hyper's lower case, which every HTTP client reads.
    assert!(
        not_modified.to_ascii_lowercase().contains("\r\nage: "),
        "{not_modified}"
    );
}

#[tokio::test]
async fn a_herd_of_cold_loads_makes_one_upstream_request() {
    let s = Setup::new(&[]).await;
    s.relay.set_delay(Duration::from_millis(300));
    let mut loads = Vec::new();
    for _ in 0..200 {
        let request = s.api.get(&s.path());
        loads.push(tokio::spawn(async move { request.send().await }));
    }
    let mut outcomes = Vec::new();
    for load in loads {
        let response = load.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        outcomes.push(x_cache(&response));
    }
    assert_eq!(s.upstream_loads(), 1);
    assert_eq!(outcomes.iter().filter(|o| *o == "MISS").count(), 1);
    assert!(outcomes
        .iter()
        .all(|o| ["MISS", "COALESCED", "HIT"].contains(&o.as_str())));
    let text = s.icecache.metrics().await;
    assert!(metric(&text, "icecache_cache_coalesced_waiters_total") >= 1.0);
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_cancel_the_fill() {
    let s = Setup::new(&[]).await;
    s.relay.set_delay(Duration::from_millis(600));
    let impatient = s
        .api
        .get(&s.path())
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(
        impatient.is_err(),
        "the client gave up before the catalog answered"
    );
    s.relay.set_delay(Duration::ZERO);
    // The fill went on: the next load joins it or, once it ended, is a hit.
    let cache = x_cache(&s.load().await);
    assert!(cache == "COALESCED" || cache == "HIT", "x-cache {cache}");
    assert_eq!(s.upstream_loads(), 1);
}

#[tokio::test]
async fn a_pyiceberg_append_through_icecache_is_seen_by_the_next_load() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let uri = s.icecache.url.clone();
    let namespace = s.namespace.clone();
    let events = format!("/namespaces/{namespace}/tables/events");
    let first = pyiceberg_async(&uri, &["append", &namespace, "events", "3"]).await;
    let before = s.api.get_json(&events).await;
    assert_eq!(before["metadata"]["current-snapshot-id"], first["snapshot"]);
    let second = pyiceberg_async(&uri, &["append", &namespace, "events", "2"]).await;
    assert_ne!(first["snapshot"], second["snapshot"]);
    let after = s.api.get_json(&events).await;
    assert_eq!(after["metadata"]["current-snapshot-id"], second["snapshot"]);
    let scanned = pyiceberg_async(&uri, &["scan", &namespace, "events"]).await;
    assert_eq!(scanned["rows"], 5);
}

#[tokio::test]
async fn an_update_through_icecache_is_seen_by_the_next_load() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    s.load().await;
    s.api
        .set_property(&s.namespace, &s.table, "owner", "ada")
        .await;
    let after = s.load().await;
    assert_ne!(x_cache(&after), "HIT");
    let body: Value = after.json().await.unwrap();
    assert_eq!(body["metadata"]["properties"]["owner"], "ada");
}

#[tokio::test]
async fn a_rename_through_icecache_invalidates_both_names() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    s.load().await;
    let renamed = s
        .api
        .post(
            "/tables/rename",
            json!({
                "source": { "namespace": [s.namespace], "name": s.table },
                "destination": { "namespace": [s.namespace], "name": "moved" }
            }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 204);
    assert_eq!(s.load().await.status(), 404);
    let moved = s
        .api
        .get(&format!("/namespaces/{}/tables/moved", s.namespace))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    assert_eq!(x_cache(&moved), "MISS");
}

#[tokio::test]
async fn a_drop_through_icecache_makes_the_next_load_404() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    s.load().await;
    let dropped = s
        .api
        .http
        .delete(format!("{}{}", s.api.base, s.path()))
        .bearer_auth(&s.api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(dropped.status(), 204);
    assert_eq!(s.load().await.status(), 404);
}

#[tokio::test]
async fn a_multi_table_transaction_invalidates_every_table_it_names() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    s.api.create_table(&s.namespace, "second").await;
    let second_path = format!("/namespaces/{}/tables/second", s.namespace);
    s.load().await;
    s.api.get(&second_path).send().await.unwrap();
    let change = |name: &str, value: &str| {
        json!({
            "identifier": { "namespace": [s.namespace], "name": name },
            "requirements": [],
            "updates": [{ "action": "set-properties", "updates": { "batch": value } }]
        })
    };
    let committed = s
        .api
        .post(
            "/transactions/commit",
            json!({ "table-changes": [change(&s.table, "one"), change("second", "two")] }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 204);
    let first: Value = s.load().await.json().await.unwrap();
    assert_eq!(first["metadata"]["properties"]["batch"], "one");
    let second: Value = s.api.get_json(&second_path).await;
    assert_eq!(second["metadata"]["properties"]["batch"], "two");
}

#[tokio::test]
async fn after_fresh_for_the_entry_is_revalidated_and_keeps_its_etag() {
    // Fresh long enough that the hit after the revalidation falls in it on any machine.
    let s = Setup::new(&["--fresh-for", "2s"]).await;
    let tag = etag(&s.load().await);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let revalidated = s.load_if_none_match(&tag).await;
    assert_eq!(
        revalidated.status(),
        304,
        "an unchanged body keeps icecache's ETag"
    );
    assert_eq!(x_cache(&revalidated), "REVALIDATED");
    assert_eq!(s.upstream_loads(), 2);
    let hit = s.load().await;
    assert_eq!(x_cache(&hit), "HIT");
}

#[tokio::test]
async fn an_out_of_band_change_is_picked_up_at_revalidation() {
    let s = Setup::new(&["--fresh-for", "300ms"]).await;
    let tag = etag(&s.load().await);
    let direct = Api::new(&catalog()).await;
    direct
        .set_property(&s.namespace, &s.table, "changed", "yes")
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let response = s.load_if_none_match(&tag).await;
    assert_eq!(response.status(), 200);
    assert_ne!(etag(&response), tag);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["metadata"]["properties"]["changed"], "yes");
}

#[tokio::test]
async fn a_stopped_upstream_is_served_stale_within_stale_if_error_then_502() {
    let s = Setup::new(&["--fresh-for", "100ms", "--stale-if-error", "4s"]).await;
    s.load().await;
    s.relay.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stale = s.load().await;
    assert_eq!(stale.status(), 200);
    assert_eq!(x_cache(&stale), "STALE");
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let failed = s.load().await;
    assert_eq!(failed.status(), 502);
    let body: Value = failed.json().await.unwrap();
    assert_eq!(body["error"]["code"], 502);
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_in_the_background() {
    let s = Setup::new(&["--fresh-for", "1s", "--stale-while-revalidate", "5s"]).await;
    s.load().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    s.relay.set_delay(Duration::from_millis(500));
    let stale = s.load().await;
    assert_eq!(x_cache(&stale), "STALE");
    eventually("the background revalidation stored", || async {
        x_cache(&s.load().await) == "HIT"
    })
    .await;
    assert_eq!(s.upstream_loads(), 2, "one background revalidation");
}

#[tokio::test]
async fn memory_stays_within_max_bytes_and_size_evictions_are_counted() {
    let s = Setup::new(&[
        "--cache-max-bytes",
        "64KiB",
        "--cache-max-entry-bytes",
        "32KiB",
    ])
    .await;
    let padding = "x".repeat(8 * 1024);
    for i in 0..16 {
        let table = format!("big{i}");
        s.api.create_table(&s.namespace, &table).await;
        s.api
            .set_property(&s.namespace, &table, "padding", &padding)
            .await;
        let loaded = s
            .api
            .get(&format!("/namespaces/{}/tables/{table}", s.namespace))
            .send()
            .await
            .unwrap();
        assert_eq!(loaded.status(), 200);
        let text = s.icecache.metrics().await;
        let bytes = metric(&text, "icecache_cache_bytes");
        assert!(
            bytes <= 65536.0,
            "cache holds {bytes} bytes, over its 64 KiB bound"
        );
    }
    let text = s.icecache.metrics().await;
    assert!(metric(&text, "icecache_cache_evictions_total{cause=\"size\"}") >= 1.0);
    assert!(metric(&text, "icecache_cache_entries") < 16.0);
}

#[tokio::test]
async fn a_response_over_max_entry_bytes_streams_through_uncached() {
    let s = Setup::new(&["--cache-max-entry-bytes", "4KiB"]).await;
    s.api
        .set_property(&s.namespace, &s.table, "padding", &"y".repeat(8 * 1024))
        .await;
    for _ in 0..2 {
        let response = s.load().await;
        assert_eq!(response.status(), 200);
        assert_eq!(x_cache(&response), "BYPASS");
        let body: Value = response.json().await.unwrap();
        assert!(body["metadata"]["properties"]["padding"].is_string());
    }
    assert!(s.upstream_loads() >= 2);
}

#[tokio::test]
async fn purge_empties_one_table_and_needs_the_admin_token() {
    let s = Setup::new(&["--admin-token", "letmein"]).await;
    s.load().await;
    let purge = format!(
        "{}/cache/purge?namespace={}&table={}",
        s.icecache.admin, s.namespace, s.table
    );
    let client = reqwest::Client::new();
    let refused = client.post(&purge).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(x_cache(&s.load().await), "HIT");
    let purged = client
        .post(&purge)
        .bearer_auth("letmein")
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    let body: Value = purged.json().await.unwrap();
    assert_eq!(body["purged"], 1);
    assert_eq!(x_cache(&s.load().await), "MISS");
}

#[tokio::test]
async fn stats_report_hits_misses_and_304s_as_json() {
    let s = Setup::new(&[]).await;
    let tag = etag(&s.load().await);
    s.load().await;
    s.load_if_none_match(&tag).await;
    let stats = get_json(&format!("{}/cache/stats", s.icecache.admin)).await;
    assert_eq!(stats["entries"], 1);
    assert_eq!(stats["load_table_requests"]["MISS"], 1);
    assert_eq!(stats["load_table_requests"]["HIT"], 2);
    assert_eq!(stats["not_modified"], 1);
    let text = s.icecache.metrics().await;
    assert_eq!(
        metric(
            &text,
            "icecache_requests_total{cache=\"HIT\",route=\"load_table\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "icecache_requests_total{cache=\"HIT\",route=\"load_table\",status=\"304\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn under_strip_a_client_that_accepts_gzip_still_gets_the_gzip_copy() {
    // icecache asks the catalog for identity (the policy stage reads the body); the client's
    // own Accept-Encoding decides what it is served.
    let s = Setup::new(&["--credentials", "strip"]).await;
    s.api
        .set_property(
            &s.namespace,
            &s.table,
            "comment",
            &"compressible ".repeat(200),
        )
        .await;
    s.load().await;
    let gz = s
        .api
        .get(&s.path())
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&gz), "HIT");
    assert_eq!(gz.headers()["content-encoding"], "gzip");
}

#[tokio::test]
async fn a_gzip_copy_is_made_once_per_entry_and_served_to_clients_that_accept_it() {
    let s = Setup::new(&[]).await;
    // Bodies under 1 KiB get no gzip copy; give the table's metadata some weight.
    s.api
        .set_property(
            &s.namespace,
            &s.table,
            "comment",
            &"compressible ".repeat(200),
        )
        .await;
    let identity = s.load().await;
    assert!(identity.headers().get("content-encoding").is_none());
    let identity_tag = etag(&identity);
    let identity_body = identity.bytes().await.unwrap();
    let mut gzip_tag = String::new();
    for _ in 0..3 {
        let gz = s
            .api
            .get(&s.path())
            .header("accept-encoding", "gzip, deflate")
            .send()
            .await
            .unwrap();
        assert_eq!(gz.headers()["content-encoding"], "gzip");
        assert_eq!(x_cache(&gz), "HIT");
        gzip_tag = etag(&gz);
        let compressed = gz.bytes().await.unwrap();
        let mut decoded = Vec::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, identity_body);
    }
    assert_ne!(gzip_tag, identity_tag);
    // Each tag gets its 304 from a request that would get its representation; the other
    // representation's tag gets the body.
    for (tag, accept, status) in [
        (&gzip_tag, "gzip", 304),
        (&identity_tag, "identity", 304),
        (&identity_tag, "gzip", 200),
    ] {
        let revalidated = s
            .api
            .get(&s.path())
            .header("accept-encoding", accept)
            .header(IF_NONE_MATCH, tag.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(revalidated.status(), status, "{tag} with {accept}");
    }
    let metrics = s.icecache.metrics().await;
    assert_eq!(metric(&metrics, "icecache_cache_compressions_total"), 1.0);
}

/// `Cache-Status` (RFC 9211) says what `x-cache` says, under icecache's name, on cached
/// answers, local 304s and answers that bypassed the cache alike.
#[tokio::test]
async fn every_answer_says_how_it_was_produced_in_cache_status_too() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let cache_status = |r: &reqwest::Response| {
        let values: Vec<_> = r.headers().get_all("cache-status").iter().collect();
        assert_eq!(values.len(), 1, "one Cache-Status: {values:?}");
        values[0].to_str().unwrap().to_owned()
    };
    let miss = s.load().await;
    assert_eq!(x_cache(&miss), "MISS");
    assert_eq!(cache_status(&miss), "icecache; fwd=uri-miss");
    let hit = s.load().await;
    assert_eq!(x_cache(&hit), "HIT");
    assert_eq!(cache_status(&hit), "icecache; hit");
    let not_modified = s.load_if_none_match(&etag(&hit)).await;
    assert_eq!(not_modified.status(), 304);
    assert_eq!(cache_status(&not_modified), "icecache; hit");
    let bypass = s
        .api
        .get(&format!("{}?x=1", s.path()))
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&bypass), "BYPASS");
    assert_eq!(cache_status(&bypass), "icecache; fwd=bypass");
    assert_eq!(s.upstream_loads(), 2);
}
