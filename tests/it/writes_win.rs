//! Writes win, refusals change nothing: a load that arrives after a write's (or a purge's)
//! response reflects that write, whichever spelling of the table either used and however the
//! write's body is written; and a write the catalog refuses leaves the cache as it was. All
//! against the real catalog (SeaweedFS), through the counting relay.

use std::time::Duration;

use crate::support::relay::Relay;
use crate::support::{catalog, eventually, metric, x_cache, Api, Icecache, PREFIX};
use serde_json::{json, Value};

struct Setup {
    relay: Relay,
    icecache: Icecache,
    api: Api,
    namespace: String,
}

impl Setup {
    async fn new() -> Setup {
        let relay = Relay::start(&catalog()).await;
        let icecache = Icecache::start(&relay.url, &["--fresh-for", "1h"]).await;
        let api = Api::new(&icecache.url).await;
        let namespace = crate::support::unique("ns_writes");
        api.create_namespace(&namespace).await;
        Setup {
            relay,
            icecache,
            api,
            namespace,
        }
    }

    fn table(&self, name: &str) -> String {
        format!("/namespaces/{}/tables/{name}", self.namespace)
    }

    async fn load(&self, name: &str) -> reqwest::Response {
        self.api.get(&self.table(name)).send().await.unwrap()
    }

    async fn property(&self, name: &str, key: &str) -> Value {
        let body: Value = self.load(name).await.json().await.unwrap();
        body["metadata"]["properties"][key].clone()
    }
}

fn set_property(key: &str, value: &str) -> Value {
    json!({ "requirements": [],
            "updates": [{ "action": "set-properties", "updates": { key: value } }] })
}

#[tokio::test]
async fn a_load_after_a_commit_never_joins_a_fill_that_began_before_it() {
    let s = Setup::new().await;
    s.api.create_table(&s.namespace, "t").await;
    // The first load's answer leaves the catalog before the commit and stays on its way.
    let answered = s.relay.statuses().len();
    let release = s.relay.hold_next_get();
    let early = {
        let request = s.api.get(&s.table("t"));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    eventually("the catalog answered the early load", || async {
        s.relay.statuses().len() > answered
    })
    .await;
    let committed = s
        .api
        .post(&s.table("t"), set_property("after", "commit"))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 200);
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        release.notify_one();
    });
    let late = s.load("t").await;
    assert_ne!(
        x_cache(&late),
        "COALESCED",
        "joined a fill older than the commit"
    );
    let body: Value = late.json().await.unwrap();
    assert_eq!(body["metadata"]["properties"]["after"], "commit");
    releaser.await.unwrap();
    let early = early.await.unwrap();
    assert_eq!(early.status(), 200, "the early load still gets its answer");
    assert_eq!(s.property("t", "after").await, "commit");
}

#[tokio::test]
async fn a_load_after_a_purge_never_joins_a_fill_that_began_before_it() {
    let s = Setup::new().await;
    s.api.create_table(&s.namespace, "t").await;
    let answered = s.relay.statuses().len();
    let release = s.relay.hold_next_get();
    let early = {
        let request = s.api.get(&s.table("t"));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    eventually("the catalog answered the early load", || async {
        s.relay.statuses().len() > answered
    })
    .await;
    // A commit straight to the catalog, then a purge: the operator's way to say "changed".
    let direct = Api::new(&catalog()).await;
    direct
        .set_property(&s.namespace, "t", "after", "purge")
        .await;
    let purged = reqwest::Client::new()
        .post(format!("{}/cache/purge", s.icecache.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        release.notify_one();
    });
    let late = s.load("t").await;
    assert_ne!(
        x_cache(&late),
        "COALESCED",
        "joined a fill older than the purge"
    );
    let body: Value = late.json().await.unwrap();
    assert_eq!(body["metadata"]["properties"]["after"], "purge");
    releaser.await.unwrap();
    early.await.unwrap();
}

#[tokio::test]
async fn a_rename_whose_body_names_its_source_twice_invalidates_both_candidates() {
    let s = Setup::new().await;
    for name in ["t1", "t2"] {
        s.api.create_table(&s.namespace, name).await;
        s.load(name).await;
        assert_eq!(x_cache(&s.load(name).await), "HIT");
    }
    // SeaweedFS matches keys case-insensitively and the last one wins: it renames t2.
    let body = format!(
        r#"{{"source":{{"namespace":["{ns}"],"name":"t1"}},"destination":{{"namespace":["{ns}"],"name":"moved"}},"Source":{{"namespace":["{ns}"],"name":"t2"}}}}"#,
        ns = s.namespace
    );
    let renamed = s
        .api
        .http
        .post(format!("{}/tables/rename", s.api.base))
        .bearer_auth(&s.api.token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 204);
    assert_eq!(s.load("t2").await.status(), 404, "t2 was renamed");
    assert_eq!(s.load("t1").await.status(), 200);
    assert_eq!(s.load("moved").await.status(), 200);
}

#[tokio::test]
async fn a_commit_whose_body_names_a_table_in_two_spellings_invalidates_both() {
    let s = Setup::new().await;
    for name in ["t1", "t2"] {
        s.api.create_table(&s.namespace, name).await;
        s.load(name).await;
    }
    let change = |name: &str| json!({ "namespace": [s.namespace], "name": name });
    let body = format!(
        r#"{{"table-changes":[{{"identifier":{},"IDENTIFIER":{},"requirements":[],"updates":[{{"action":"set-properties","updates":{{"k":"v"}}}}]}}]}}"#,
        change("t1"),
        change("t2")
    );
    let committed = s
        .api
        .http
        .post(format!("{}/transactions/commit", s.api.base))
        .bearer_auth(&s.api.token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 204);
    assert_eq!(s.property("t2", "k").await, "v", "SeaweedFS changed t2");
}

#[tokio::test]
async fn a_commit_through_a_dotted_namespace_is_seen_through_the_unit_separator_spelling() {
    let s = Setup::new().await;
    let child = json!([s.namespace, "child"]);
    let created = s
        .api
        .post("/namespaces", json!({ "namespace": child }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let nested = format!("{}%1Fchild", s.namespace);
    s.api.create_table(&nested, "t").await;
    let canonical = format!("/namespaces/{nested}/tables/t");
    s.api.get(&canonical).send().await.unwrap();
    assert_eq!(x_cache(&s.api.get(&canonical).send().await.unwrap()), "HIT");
    // SeaweedFS also accepts the namespace written with '.', a spelling it does not advertise.
    let dotted = format!("/namespaces/{}.child/tables/t", s.namespace);
    let committed = s
        .api
        .post(&dotted, set_property("via", "dots"))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 200);
    let body: Value = s.api.get_json(&canonical).await;
    assert_eq!(body["metadata"]["properties"]["via"], "dots");
}

#[tokio::test]
async fn a_commit_without_the_prefix_is_seen_through_the_prefixed_path() {
    let s = Setup::new().await;
    s.api.create_table(&s.namespace, "t").await;
    s.load("t").await;
    assert_eq!(x_cache(&s.load("t").await), "HIT");
    // SeaweedFS serves its one warehouse at paths without `{prefix}` too.
    let bare = format!("{}/v1/namespaces/{}/tables/t", s.icecache.url, s.namespace);
    let committed = s
        .api
        .http
        .post(&bare)
        .bearer_auth(&s.api.token)
        .json(&set_property("via", "bare"))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 200);
    assert_eq!(s.property("t", "via").await, "bare");
    assert!(s.api.base.ends_with(PREFIX));
}

fn invalidations(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("icecache_cache_invalidations_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_write_the_catalog_refuses_invalidates_nothing() {
    let s = Setup::new().await;
    s.api.create_table(&s.namespace, "t").await;
    s.load("t").await;
    let before = invalidations(&s.icecache.metrics().await);
    let client = reqwest::Client::new();
    // Unauthenticated and unreadable, and authenticated and unreadable: neither changed anything.
    let anonymous = client
        .post(format!("{}/tables/rename", s.api.base))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert!(
        anonymous.status().is_client_error(),
        "{}",
        anonymous.status()
    );
    let garbage = client
        .post(format!("{}/transactions/commit", s.api.base))
        .bearer_auth(&s.api.token)
        .body("{\"table-changes\": 7}")
        .send()
        .await
        .unwrap();
    assert!(garbage.status().is_client_error(), "{}", garbage.status());
    assert_eq!(x_cache(&s.load("t").await), "HIT");
    let metrics = s.icecache.metrics().await;
    assert_eq!(invalidations(&metrics), before, "{metrics}");
    assert_eq!(metric(&metrics, "icecache_cache_entries"), 1.0);
    assert!(s.relay.count("GET", "/tables/t") == 1);
}

#[tokio::test]
async fn a_commit_refused_as_a_conflict_invalidates_the_table_it_names_and_no_other() {
    // A 409 says the table moved since the writer read it, perhaps by a writer that went
    // around icecache: the writer's refresh must reach the catalog, not the cache.
    let s = Setup::new().await;
    s.api.create_table(&s.namespace, "t").await;
    s.api.create_table(&s.namespace, "other").await;
    s.load("t").await;
    s.load("other").await;
    let conflicting = s
        .api
        .post(
            &s.table("t"),
            json!({ "requirements": [{ "type": "assert-table-uuid",
                                        "uuid": "00000000-0000-0000-0000-000000000000" }],
                    "updates": [] }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(conflicting.status(), 409);
    assert_eq!(x_cache(&s.load("t").await), "MISS");
    assert_eq!(x_cache(&s.load("other").await), "HIT");
    assert_eq!(s.relay.count("GET", "/tables/t"), 2);
    assert_eq!(s.relay.count("GET", "/tables/other"), 1);
}

#[tokio::test]
async fn a_commit_the_client_gives_up_on_still_invalidates() {
    use crate::support::standin::{version_of, Shape, StandIn};
    // The stand-in applies the commit at once and answers it a second later.
    let catalog = StandIn::start(Shape {
        commit_delay: Duration::from_secs(1),
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    client.get(&url).send().await.unwrap();
    assert_eq!(x_cache(&client.get(&url).send().await.unwrap()), "HIT");
    let gave_up = client
        .post(&url)
        .json(&json!({ "requirements": [], "updates": [] }))
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client went away before the answer");
    // Entries are kept an hour: only the abandoned write's own invalidation lets the next
    // loads see the commit.
    let committed = catalog.version("t");
    eventually("the abandoned commit seen", || async {
        let after: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
        version_of(&after) == committed
    })
    .await;
}
