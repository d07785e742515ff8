//! Views cached like tables, and existence checks answered from the cache, against the real
//! catalog (SeaweedFS); upstream calls are counted by the relay between icecache and the catalog.

use crate::support::relay::Relay;
use crate::support::{catalog, metric, pyiceberg_async, unique, view_body, x_cache, Api, Icecache};
use reqwest::header::{ETAG, IF_NONE_MATCH};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

struct Setup {
    relay: Relay,
    icecache: Icecache,
    api: Api,
    namespace: String,
}

impl Setup {
    /// A namespace with the table `t` and the view `v` (property k=1), made straight at the
    /// catalog, with icecache in front of the relay.
    async fn new(flags: &[&str]) -> Setup {
        let relay = Relay::start(&catalog()).await;
        let icecache = Icecache::start(&relay.url, flags).await;
        let api = Api::new(&icecache.url).await;
        let namespace = unique("ns_views");
        let direct = Api::new(&catalog()).await;
        direct.create_namespace(&namespace).await;
        direct.create_table(&namespace, "t").await;
        let created = direct
            .post(
                &format!("/namespaces/{namespace}/views"),
                view_body("v", "1"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200, "create view");
        Setup {
            relay,
            icecache,
            api,
            namespace,
        }
    }

    fn view(&self, name: &str) -> String {
        format!("/namespaces/{}/views/{name}", self.namespace)
    }

    fn table(&self, name: &str) -> String {
        format!("/namespaces/{}/tables/{name}", self.namespace)
    }

    fn upstream(&self, method: &str, path: &str) -> usize {
        self.relay.count(method, path)
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.api.get(path).send().await.unwrap()
    }

    async fn head(&self, path: &str) -> reqwest::Response {
        self.send(Method::HEAD, path).await
    }

    async fn send(&self, method: Method, path: &str) -> reqwest::Response {
        self.api
            .send(method, &format!("{}{path}", self.api.base))
            .await
    }

    /// `method` on `path` as another caller, with its own token.
    async fn send_as(&self, token: &str, method: Method, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.api.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    async fn replace(&self, name: &str, k: &str) -> reqwest::Response {
        self.api
            .post(
                &self.view(name),
                json!({ "requirements": [],
                        "updates": [{ "action": "set-properties", "updates": { "k": k } }] }),
            )
            .send()
            .await
            .unwrap()
    }
}

/// Another token of the catalog's: SeaweedFS's tokens differ by their issue time, in seconds.
async fn another_token(than: &str) -> String {
    for _ in 0..30 {
        let token = crate::support::token(&catalog()).await;
        if token != than {
            return token;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the catalog gave the same token for three seconds");
}

async fn property(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    body["metadata"]["properties"]["k"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn a_second_view_load_is_a_hit_without_the_catalog() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let first = s.get(&s.view("v")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(x_cache(&first), "MISS");
    let body = first.bytes().await.unwrap();
    let second = s.get(&s.view("v")).await;
    assert_eq!(x_cache(&second), "HIT");
    assert_eq!(second.bytes().await.unwrap(), body);
    assert_eq!(s.upstream("GET", "/views/v"), 1);
    let metrics = s.icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "icecache_requests_total{cache=\"HIT\",route=\"load_view\",status=\"200\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn a_view_etag_is_answered_with_a_local_304() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let first = s.get(&s.view("v")).await;
    let etag = first.headers()[ETAG].to_str().unwrap().to_owned();
    let conditional = s
        .api
        .get(&s.view("v"))
        .header(IF_NONE_MATCH, &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(conditional.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(x_cache(&conditional), "HIT");
    assert_eq!(s.upstream("GET", "/views/v"), 1);
    // A table's tag never answers for the view of the same name.
    let table = s.get(&s.table("t")).await;
    let table_etag = table.headers()[ETAG].to_str().unwrap().to_owned();
    assert_ne!(table_etag, etag);
}

#[tokio::test]
async fn a_view_replaced_through_icecache_is_seen_at_once() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(property(s.get(&s.view("v")).await).await, "1");
    assert_eq!(s.replace("v", "2").await.status(), 200);
    let after = s.get(&s.view("v")).await;
    assert_eq!(x_cache(&after), "MISS");
    assert_eq!(property(after).await, "2");
}

#[tokio::test]
async fn a_view_dropped_through_icecache_is_404_at_once() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    let dropped = s.send(Method::DELETE, &s.view("v")).await;
    assert_eq!(dropped.status(), 204);
    assert_eq!(s.get(&s.view("v")).await.status(), 404);
    assert_eq!(s.head(&s.view("v")).await.status(), 404);
}

#[tokio::test]
async fn a_view_renamed_through_icecache_leaves_its_old_name_at_once() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    let renamed = s
        .api
        .post(
            "/views/rename",
            json!({ "source": { "namespace": [s.namespace], "name": "v" },
                    "destination": { "namespace": [s.namespace], "name": "w" } }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 204, "rename view");
    assert_eq!(s.get(&s.view("v")).await.status(), 404);
    assert_eq!(property(s.get(&s.view("w")).await).await, "1");
}

#[tokio::test]
async fn a_view_load_with_any_parameter_is_not_cached() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let path = format!("{}?snapshots=all", s.view("v"));
    for _ in 0..2 {
        let response = s.get(&path).await;
        assert_eq!(x_cache(&response), "BYPASS");
    }
    assert_eq!(s.upstream("GET", "/views/v"), 2);
}

#[tokio::test]
async fn a_view_is_stripped_of_what_the_policy_strips_before_it_is_cached() {
    let s = Setup::new(&["--fresh-for", "1h", "--credentials", "strip"]).await;
    for phase in ["MISS", "HIT"] {
        let response = s.get(&s.view("v")).await;
        assert_eq!(x_cache(&response), phase);
        let body: Value = response.json().await.unwrap();
        assert!(body.get("storage-credentials").is_none());
        assert_eq!(body["metadata"]["properties"]["k"], "1");
    }
}

#[tokio::test]
async fn a_view_is_purged_by_the_admin_endpoint() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    let purged = reqwest::Client::new()
        .post(format!(
            "{}/cache/purge?namespace={}&table=v",
            s.icecache.admin, s.namespace
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    assert_eq!(x_cache(&s.get(&s.view("v")).await), "MISS");
}

#[tokio::test]
async fn head_on_a_loaded_table_is_answered_without_the_catalog() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.table("t")).await.status(), 200);
    let head = s.head(&s.table("t")).await;
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&head), "HIT");
    assert_eq!(s.upstream("HEAD", "/tables/t"), 0);
}

#[tokio::test]
async fn head_on_a_loaded_view_is_answered_without_the_catalog() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    let head = s.head(&s.view("v")).await;
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&head), "HIT");
    assert_eq!(s.upstream("HEAD", "/views/v"), 0);
}

#[tokio::test]
async fn head_on_what_is_not_held_asks_the_catalog() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    let exists = s.head(&s.table("t")).await;
    assert_eq!(exists.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&exists), "BYPASS");
    let missing = s.head(&s.table("nope")).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let missing_view = s.head(&s.view("nope")).await;
    assert_eq!(missing_view.status(), StatusCode::NOT_FOUND);
    assert_eq!(s.upstream("HEAD", "/tables/t"), 1);
    assert_eq!(s.upstream("HEAD", "/tables/nope"), 1);
    assert_eq!(s.upstream("HEAD", "/views/nope"), 1);
}

#[tokio::test]
async fn a_view_entry_says_nothing_of_a_table_of_the_same_name() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    // No table `v` exists: the catalog says so, not the view's entry.
    assert_eq!(s.head(&s.table("v")).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(s.upstream("HEAD", "/tables/v"), 1);
}

#[tokio::test]
async fn head_after_a_drop_through_icecache_asks_the_catalog() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.table("t")).await.status(), 200);
    let dropped = s.send(Method::DELETE, &s.table("t")).await;
    assert_eq!(dropped.status(), 204);
    assert_eq!(s.head(&s.table("t")).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(s.upstream("HEAD", "/tables/t"), 1);
}

#[tokio::test]
async fn head_after_fresh_for_has_run_out_asks_the_catalog() {
    let s = Setup::new(&["--fresh-for", "0s", "--stale-while-revalidate", "1h"]).await;
    assert_eq!(s.get(&s.table("t")).await.status(), 200);
    let head = s.head(&s.table("t")).await;
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&head), "BYPASS");
    assert_eq!(s.upstream("HEAD", "/tables/t"), 1);
}

#[tokio::test]
async fn under_per_principal_another_callers_entry_does_not_answer_head() {
    let s = Setup::new(&["--fresh-for", "1h", "--identity", "per-principal"]).await;
    assert_eq!(s.get(&s.table("t")).await.status(), 200);
    let other = another_token(&s.api.token).await;
    let head = s.send_as(&other, Method::HEAD, &s.table("t")).await;
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&head), "BYPASS");
    assert_eq!(s.upstream("HEAD", "/tables/t"), 1);
}

#[tokio::test]
async fn under_revalidate_head_is_answered_only_for_a_confirmed_caller() {
    let s = Setup::new(&[
        "--fresh-for",
        "1h",
        "--identity",
        "revalidate",
        "--credentials",
        "strip",
    ])
    .await;
    assert_eq!(s.get(&s.table("t")).await.status(), 200);
    let other = another_token(&s.api.token).await;
    let table = s.table("t");
    // Not yet confirmed for the entry: the catalog is asked.
    let head = s.send_as(&other, Method::HEAD, &table).await;
    assert_eq!(x_cache(&head), "BYPASS");
    let head = s.send_as(&s.api.token, Method::HEAD, &table).await;
    assert_eq!(x_cache(&head), "HIT");
    // Once the other caller's own load is confirmed, its checks are answered here too.
    let load = s.send_as(&other, Method::GET, &table).await;
    assert_eq!(load.status(), 200);
    let head = s.send_as(&other, Method::HEAD, &table).await;
    assert_eq!(x_cache(&head), "HIT");
    assert_eq!(s.upstream("HEAD", "/tables/t"), 1);
}

#[tokio::test]
async fn head_over_http2_is_answered_from_the_cache() {
    let s = Setup::new(&["--fresh-for", "1h"]).await;
    assert_eq!(s.get(&s.view("v")).await.status(), 200);
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let head = h2
        .head(format!("{}{}", s.api.base, s.view("v")))
        .bearer_auth(&s.api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(head.version(), reqwest::Version::HTTP_2);
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    assert_eq!(s.upstream("HEAD", "/views/v"), 0);
}

#[tokio::test]
async fn pyiceberg_loads_a_view_once_and_checks_it_exists_without_the_catalog() {
    // Each pyiceberg process gets a token of its own: one principal per process, so the
    // entries are shared (with the credentials stripped) for the second to hit the first's.
    let s = Setup::new(&[
        "--fresh-for",
        "1h",
        "--identity",
        "shared",
        "--credentials",
        "strip",
    ])
    .await;
    let uri = s.icecache.url.clone();
    for _ in 0..2 {
        let view = pyiceberg_async(&uri, &["load-view", &s.namespace, "v"]).await;
        assert_eq!(view["properties"]["k"], "1");
    }
    assert_eq!(s.upstream("GET", "/views/v"), 1);
    let exists = pyiceberg_async(&uri, &["view-exists", &s.namespace, "v"]).await;
    assert_eq!(exists["exists"], true);
    assert_eq!(s.upstream("HEAD", "/views/v"), 0);
    let missing = pyiceberg_async(&uri, &["view-exists", &s.namespace, "nope"]).await;
    assert_eq!(missing["exists"], false);
}
