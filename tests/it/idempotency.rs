//! `idempotency = "provide"`: a retry of a mutation with the same `Idempotency-Key` gets the
//! first final answer back, marked `Idempotent-Replayed: true`, and the catalog sees the
//! mutation once; the same key on another request is refused; answers a retry may not repeat
//! are not kept; the default keeps nothing. Against the real catalog (SeaweedFS), through the
//! counting relay.

use serde_json::{json, Value};

use crate::support::relay::Relay;
use crate::support::standin::{vended_keys, Shape, StandIn};
use crate::support::{
    catalog, commit_with_key, eventually, get_json, metric, replayed, unique, Api, Icecache,
};

struct Setup {
    relay: Relay,
    icecache: Icecache,
    api: Api,
    namespace: String,
}

impl Setup {
    async fn new(extra: &[&str]) -> Setup {
        let relay = Relay::start(&catalog()).await;
        let icecache = Icecache::start(&relay.url, extra).await;
        let api = Api::new(&icecache.url).await;
        let namespace = unique("ns_idem");
        api.create_namespace(&namespace).await;
        api.create_table(&namespace, "t").await;
        Setup {
            relay,
            icecache,
            api,
            namespace,
        }
    }

    async fn provided() -> Setup {
        Setup::new(&["--idempotency", "provide"]).await
    }

    fn table(&self, name: &str) -> String {
        format!("/namespaces/{}/tables/{name}", self.namespace)
    }

    async fn commit(&self, name: &str, key: &str, value: &str) -> reqwest::Response {
        let body = json!({ "requirements": [],
            "updates": [{ "action": "set-properties", "updates": { "k": value } }] });
        self.api
            .post(&self.table(name), body)
            .header("idempotency-key", key)
            .send()
            .await
            .expect("commit sent")
    }

    fn commits_seen(&self, name: &str) -> usize {
        self.relay
            .count("POST", &format!("/{}/tables/{name}", self.namespace))
    }
}

#[tokio::test]
async fn the_config_advertises_a_lifetime_only_when_icecache_provides_keys() {
    let provided = Setup::new(&[
        "--idempotency",
        "provide",
        "--idempotency-key-lifetime",
        "2h",
    ])
    .await;
    let config = get_json(&format!("{}/v1/config", provided.icecache.url)).await;
    assert_eq!(config["idempotency-key-lifetime"], "PT2H", "{config}");
    let passed = Setup::new(&[]).await;
    let config = get_json(&format!("{}/v1/config", passed.icecache.url)).await;
    assert_eq!(config.get("idempotency-key-lifetime"), None, "{config}");
}

#[tokio::test]
async fn a_retried_commit_is_replayed_and_reaches_the_catalog_once() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-000000000001";
    let first = s.commit("t", key, "one").await;
    assert_eq!(first.status(), 200);
    assert_eq!(replayed(&first), None);
    let first_body: Value = first.json().await.unwrap();
    let retry = s.commit("t", key, "one").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(replayed(&retry), Some("true"));
    let retry_body: Value = retry.json().await.unwrap();
    assert_eq!(retry_body, first_body);
    assert_eq!(s.commits_seen("t"), 1, "the retry reached the catalog");
    let metrics = s.icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_idempotency_total{outcome="replayed"}"#
        ),
        1.0
    );
}

/// A replay is an answer sent now: its `Date` is not the first answer's.
#[tokio::test]
async fn a_replay_is_dated_when_it_is_sent() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-0000000000d1";
    let first = s.commit("t", key, "one").await;
    let dated = |r: &reqwest::Response| r.headers().get("date").cloned().expect("a Date");
    let first_date = dated(&first);
    // Dates are whole seconds: two apart cannot share one.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let retry = s.commit("t", key, "one").await;
    assert_eq!(replayed(&retry), Some("true"));
    assert_eq!(retry.headers().get_all("date").iter().count(), 1);
    assert_ne!(dated(&retry), first_date);
}

#[tokio::test]
async fn the_key_still_reaches_the_catalog_as_sent() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-0000000000aa";
    assert_eq!(s.commit("t", key, "v").await.status(), 200);
    let seen = s.relay.seen();
    let sent = seen
        .iter()
        .rev()
        .find(|r| r.method == "POST")
        .expect("the commit reached the catalog");
    assert_eq!(
        sent.headers.get("idempotency-key").map(|v| v.as_bytes()),
        Some(key.as_bytes())
    );
}

#[tokio::test]
async fn the_same_key_on_another_request_is_refused_and_not_sent() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-000000000002";
    assert_eq!(s.commit("t", key, "one").await.status(), 200);
    let other = s.commit("t", key, "two").await;
    assert_eq!(other.status(), 422);
    let error: Value = other.json().await.unwrap();
    assert_eq!(error["error"]["code"], 422, "{error}");
    assert_eq!(s.commits_seen("t"), 1);
    let value = s.api.get_json(&s.table("t")).await["metadata"]["properties"]["k"].clone();
    assert_eq!(value, "one");
}

#[tokio::test]
async fn a_final_refusal_from_the_catalog_is_replayed_too() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-000000000003";
    let first = s.commit("missing", key, "v").await;
    assert!(first.status().is_client_error(), "{}", first.status());
    let retry = s.commit("missing", key, "v").await;
    assert_eq!(retry.status(), first.status());
    assert_eq!(replayed(&retry), Some("true"));
    assert_eq!(s.commits_seen("missing"), 1);
}

#[tokio::test]
async fn a_commit_whose_answer_is_a_server_error_is_not_kept() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-000000000004";
    // The catalog cannot be reached: icecache answers 502 and keeps nothing.
    s.relay.stop();
    let lost = s.commit("t", key, "v").await;
    assert!(lost.status().is_server_error(), "{}", lost.status());
    assert_eq!(replayed(&lost), None);
    let retry = s.commit("t", key, "v").await;
    assert_eq!(replayed(&retry), None, "a failure was replayed");
}

#[tokio::test]
async fn one_callers_key_is_not_anothers() {
    let s = Setup::provided().await;
    let key = "0193a0b4-0000-7000-8000-000000000005";
    assert_eq!(s.commit("t", key, "one").await.status(), 200);
    // Another caller (another bearer token) with the same key is its own request.
    let body = json!({ "requirements": [],
        "updates": [{ "action": "set-properties", "updates": { "k": "one" } }] });
    let other = reqwest::Client::new()
        .post(format!(
            "{}/v1/{}{}",
            s.icecache.url,
            crate::support::PREFIX,
            s.table("t")
        ))
        .bearer_auth(crate::support::token(&catalog()).await + "-other")
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(replayed(&other), None);
    assert_eq!(s.commits_seen("t"), 2);
}

#[tokio::test]
async fn a_malformed_or_repeated_key_is_refused_before_the_catalog() {
    let s = Setup::provided().await;
    let body = json!({ "requirements": [], "updates": [] });
    for keys in [vec!["a b"], vec!["a", "b"], vec![""]] {
        let mut request = s.api.post(&s.table("t"), body.clone());
        for key in &keys {
            request = request.header("idempotency-key", *key);
        }
        let refused = request.send().await.unwrap();
        assert_eq!(refused.status(), 400, "{keys:?}");
    }
    assert_eq!(s.commits_seen("t"), 0);
}

#[tokio::test]
async fn by_default_a_retry_reaches_the_catalog_again() {
    let s = Setup::new(&[]).await;
    let key = "0193a0b4-0000-7000-8000-000000000006";
    assert_eq!(s.commit("t", key, "one").await.status(), 200);
    let retry = s.commit("t", key, "one").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(replayed(&retry), None);
    assert_eq!(s.commits_seen("t"), 2);
}

/// A commit with `key` that the catalog has received and whose answer it holds back, and the
/// handle that releases it.
async fn commit_held_at_the_catalog(
    s: &std::sync::Arc<Setup>,
    key: &'static str,
) -> (
    std::sync::Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<reqwest::StatusCode>,
) {
    let release = s.relay.hold_responses();
    let first = tokio::spawn({
        let s = s.clone();
        async move { s.commit("t", key, "one").await.status() }
    });
    eventually("the first commit reaches the catalog", || async {
        s.commits_seen("t") == 1
    })
    .await;
    (release, first)
}

/// Releases a held relay until `done` finishes (each held frame waits for one notification).
async fn release_until<T>(
    release: std::sync::Arc<tokio::sync::Notify>,
    done: tokio::task::JoinHandle<T>,
) -> T {
    let releasing = tokio::spawn(async move {
        for _ in 0..10_000 {
            release.notify_one();
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    let result = done.await.expect("the first commit's task");
    releasing.abort();
    result
}

#[tokio::test]
async fn a_retry_while_the_first_is_at_the_catalog_is_told_to_come_back() {
    let s = std::sync::Arc::new(Setup::provided().await);
    let key = "0193a0b4-0000-7000-8000-000000000007";
    let (release, first) = commit_held_at_the_catalog(&s, key).await;
    let retry = s.commit("t", key, "one").await;
    assert_eq!(retry.status(), 409);
    assert!(retry.headers().contains_key("retry-after"));
    assert_eq!(release_until(release, first).await, 200);
    let later = s.commit("t", key, "one").await;
    assert_eq!(replayed(&later), Some("true"));
    assert_eq!(s.commits_seen("t"), 1);
}

#[tokio::test]
async fn an_answer_is_kept_when_its_client_gave_up_waiting() {
    let s = std::sync::Arc::new(Setup::provided().await);
    let key = "0193a0b4-0000-7000-8000-000000000008";
    let (release, first) = commit_held_at_the_catalog(&s, key).await;
    first.abort();
    let _ = first.await;
    // The answer, released now, is still kept for the key: the retry is a replay.
    let retried = tokio::spawn({
        let s = s.clone();
        async move {
            for _ in 0..10_000 {
                let retry = s.commit("t", key, "one").await;
                if retry.status() != 409 {
                    return (retry.status(), replayed(&retry).map(str::to_owned));
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            panic!("the key was still held after 10,000 retries");
        }
    });
    let (status, marked) = release_until(release, retried).await;
    assert_eq!(status, 200);
    assert_eq!(marked.as_deref(), Some("true"));
    assert_eq!(s.commits_seen("t"), 1);
}

/// A stand-in whose commits and scan plans vend credentials, behind icecache with `extra`.
async fn vending(extra: &[&str]) -> (StandIn, Icecache) {
    let catalog = StandIn::start(Shape {
        commit_vends: true,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let mut flags = vec!["--idempotency", "provide"];
    flags.extend_from_slice(extra);
    let icecache = Icecache::start(&catalog.url, &flags).await;
    (catalog, icecache)
}

#[tokio::test]
async fn a_replay_under_strip_carries_no_credentials_on_commits_and_scan_plans() {
    let (catalog, icecache) = vending(&["--credentials", "strip"]).await;
    let client = reqwest::Client::new();
    let table = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    for (n, url) in [table.clone(), format!("{table}/plan")].iter().enumerate() {
        let key = format!("0193a0b4-0000-7000-8000-0000000001{n:02}");
        let first = commit_with_key(&client, url, &key).await;
        assert_eq!(first.status(), 200, "{url}");
        let first_text = first.text().await.unwrap();
        assert_eq!(vended_keys(&first_text), Vec::<String>::new(), "{url}");
        let retry = commit_with_key(&client, url, &key).await;
        assert_eq!(replayed(&retry), Some("true"), "{url}");
        let text = retry.text().await.unwrap();
        assert_eq!(vended_keys(&text), Vec::<String>::new(), "{url}: {text}");
        let suffix = url.trim_start_matches(&icecache.url);
        let sent = catalog
            .seen()
            .iter()
            .filter(|s| s.method == "POST" && s.path.ends_with(suffix))
            .count();
        assert_eq!(sent, 1, "{url}: sent again");
    }
}

#[tokio::test]
async fn a_replay_under_passthrough_is_the_catalogs_answer_as_first_sent() {
    let (catalog, icecache) = vending(&[]).await;
    let client = reqwest::Client::new();
    let table = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let key = "0193a0b4-0000-7000-8000-000000000201";
    let first = commit_with_key(&client, &table, key)
        .await
        .text()
        .await
        .unwrap();
    assert!(!vended_keys(&first).is_empty(), "{first}");
    let retry = commit_with_key(&client, &table, key).await;
    assert_eq!(replayed(&retry), Some("true"));
    assert_eq!(retry.text().await.unwrap(), first);
    assert_eq!(catalog.version("t"), Some(2), "one commit after the create");
}

#[tokio::test]
async fn a_retry_over_http2_is_replayed_like_one_over_http1() {
    let (catalog, icecache) = vending(&[]).await;
    let table = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let key = "0193a0b4-0000-7000-8000-000000000301";
    let first = commit_with_key(&reqwest::Client::new(), &table, key).await;
    assert_eq!(first.status(), 200);
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let retry = commit_with_key(&h2, &table, key).await;
    assert_eq!(retry.version(), reqwest::Version::HTTP_2);
    assert_eq!(replayed(&retry), Some("true"));
    assert_eq!(catalog.version("t"), Some(2), "one commit after the create");
}
