//! tableExists and viewExists for every catalog: `/v1/config` names the `HEAD` checks icecache
//! answers, and a catalog that lacks them (its `endpoints` do not name them, or it refuses a
//! `HEAD` with `405`) has them answered from the loadTable the caller would get.

use http::StatusCode;
use serde_json::Value;

use crate::support::standin::{Shape, StandIn};
use crate::support::{x_cache, Icecache};

const TABLE: &str = "/v1/namespaces/db/tables/t";
const TABLE_EXISTS: &str = "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}";
const VIEW_EXISTS: &str = "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}";
const LOAD_TABLE: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}";

async fn catalog(shape: Shape) -> StandIn {
    let catalog = StandIn::start(shape).await;
    catalog.create("t");
    catalog
}

async fn config(client: &reqwest::Client, icecache: &Icecache) -> Value {
    let response = client
        .get(format!("{}/v1/config", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn head(
    client: &reqwest::Client,
    icecache: &Icecache,
    path: &str,
    who: &str,
) -> reqwest::Response {
    client
        .head(format!("{}{path}", icecache.url))
        .bearer_auth(who)
        .send()
        .await
        .unwrap()
}

/// The requests the catalog saw for `path`, as `METHOD path`.
fn asked(catalog: &StandIn, path: &str) -> Vec<String> {
    catalog
        .seen()
        .iter()
        .filter(|s| s.path == path)
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

fn endpoints(config: &Value) -> Vec<&str> {
    config["endpoints"]
        .as_array()
        .expect("an endpoints list")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_config_without_endpoints_goes_as_it_is_so_a_client_may_still_enable_views_itself() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let config = config(&reqwest::Client::new(), &icecache).await;
    assert!(config.get("endpoints").is_none(), "{config}");
}

#[tokio::test]
async fn a_config_without_endpoints_from_a_catalog_with_views_names_the_defaults_and_both_checks() {
    let catalog = catalog(Shape {
        says_views: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let config = config(&reqwest::Client::new(), &icecache).await;
    let listed = endpoints(&config);
    for endpoint in [
        LOAD_TABLE,
        "POST /v1/{prefix}/transactions/commit",
        "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
        TABLE_EXISTS,
        VIEW_EXISTS,
    ] {
        assert!(listed.contains(&endpoint), "{endpoint}: {listed:?}");
    }
    assert_eq!(
        listed.len(),
        22,
        "the spec's fourteen, six for views, two checks: {listed:?}"
    );
}

#[tokio::test]
async fn a_config_that_names_its_checks_is_passed_on_and_its_checks_go_to_it() {
    let own = vec![LOAD_TABLE, TABLE_EXISTS, VIEW_EXISTS];
    let catalog = catalog(Shape {
        endpoints: Some(own.clone()),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let client = reqwest::Client::new();
    assert_eq!(endpoints(&config(&client, &icecache).await), own);
    let response = head(&client, &icecache, "/v1/namespaces/db/tables/nope", "alice").await;
    assert_eq!(x_cache(&response), "BYPASS");
    assert_eq!(
        asked(&catalog, "/v1/namespaces/db/tables/nope"),
        ["HEAD /v1/namespaces/db/tables/nope"]
    );
}

#[tokio::test]
async fn a_config_that_lists_loads_without_checks_gains_the_checks_beside_them() {
    let catalog = catalog(Shape {
        endpoints: Some(vec![LOAD_TABLE, "GET /v1/{prefix}/namespaces"]),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let listed = config(&reqwest::Client::new(), &icecache).await;
    assert_eq!(
        endpoints(&listed),
        [LOAD_TABLE, "GET /v1/{prefix}/namespaces", TABLE_EXISTS]
    );
}

#[tokio::test]
async fn once_the_catalog_is_known_to_lack_checks_they_are_answered_from_loads() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let h1 = reqwest::Client::new();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    config(&h1, &icecache).await;
    for (client, phase) in [(&h1, "MISS"), (&h2, "HIT")] {
        let response = head(client, &icecache, TABLE, "alice").await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert_eq!(x_cache(&response), phase);
        assert!(response.headers().get("etag").is_none());
        assert!(response.headers().get("content-type").is_none());
    }
    assert_eq!(
        asked(&catalog, TABLE),
        [format!("GET {TABLE}")],
        "one load, no HEAD"
    );
    let missing = head(&h2, &icecache, "/v1/namespaces/db/tables/nope", "alice").await;
    assert_eq!(
        missing.status(),
        StatusCode::NOT_FOUND,
        "the catalog's own 404"
    );
    assert_eq!(
        asked(&catalog, "/v1/namespaces/db/tables/nope"),
        ["GET /v1/namespaces/db/tables/nope"]
    );
    // Another caller's check is answered from its own load, never from alice's entry.
    let bob = head(&h1, &icecache, TABLE, "bob").await;
    assert_eq!(bob.status(), StatusCode::NO_CONTENT);
    assert_eq!(x_cache(&bob), "MISS");
    assert_eq!(asked(&catalog, TABLE).len(), 2);
}

#[tokio::test]
async fn a_check_answered_from_a_load_says_what_the_load_says_to_that_caller() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let client = reqwest::Client::new();
    config(&client, &icecache).await;
    catalog.reshape(|shape| shape.status = Some(403));
    let refused = head(&client, &icecache, TABLE, "mallory").await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_ne!(x_cache(&refused), "HIT");
}

#[tokio::test]
async fn a_catalog_that_refuses_a_check_with_405_has_its_checks_answered_from_loads_from_then_on() {
    let catalog = catalog(Shape {
        refuses_head: true,
        ..Shape::default()
    })
    .await;
    catalog.create("u");
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let client = reqwest::Client::new();
    let first = head(&client, &icecache, TABLE, "alice").await;
    assert_eq!(first.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        asked(&catalog, TABLE),
        [format!("HEAD {TABLE}"), format!("GET {TABLE}")]
    );
    let other = "/v1/namespaces/db/tables/u";
    let second = head(&client, &icecache, other, "alice").await;
    assert_eq!(second.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        asked(&catalog, other),
        [format!("GET {other}")],
        "no HEAD asked again"
    );
}

/// A check that a client makes conditional, with the tag of the load it holds (and a date,
/// `since`).
async fn conditional_head(
    icecache: &Icecache,
    path: &str,
    tag: &str,
    since: Option<&str>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .head(format!("{}{path}", icecache.url))
        .bearer_auth("alice")
        .header("if-none-match", tag);
    if let Some(since) = since {
        request = request.header("if-modified-since", since);
    }
    request.send().await.unwrap()
}

const LONG_AGO: Option<&str> = Some("Sat, 01 Jan 2000 00:00:00 GMT");

#[tokio::test]
async fn a_check_answered_from_a_load_is_204_whatever_tag_the_client_holds() {
    let catalog = catalog(Shape::default()).await;
    // Nothing is fresh: every check is answered from a load confirmed with the catalog.
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "0s"]).await;
    let client = reqwest::Client::new();
    config(&client, &icecache).await;
    let load = client
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    let tag = load.headers()["etag"].to_str().unwrap().to_owned();
    for tag in [tag.as_str(), "*"] {
        let check = conditional_head(&icecache, TABLE, tag, None).await;
        assert_eq!(
            check.status(),
            StatusCode::NO_CONTENT,
            "{tag}: never a 304 without its tag"
        );
        assert!(check.headers().get("etag").is_none());
        assert_ne!(x_cache(&check), "HIT");
    }
    let loads: Vec<_> = catalog
        .seen()
        .into_iter()
        .filter(|s| s.path == TABLE)
        .collect();
    assert!(loads.iter().all(|s| s.method == http::Method::GET));
    assert!(loads
        .iter()
        .all(|s| s.headers.get("if-none-match").is_none()));
}

#[tokio::test]
async fn a_check_sent_to_the_catalog_goes_without_the_clients_conditionals() {
    let own = vec![LOAD_TABLE, TABLE_EXISTS, VIEW_EXISTS];
    let catalog = catalog(Shape {
        endpoints: Some(own),
        etag: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    config(&reqwest::Client::new(), &icecache).await;
    for tag in ["\"icecache-tag\"", "*"] {
        // The stand-in answers what it knows of the check; what matters is what it was sent.
        let response = conditional_head(&icecache, TABLE, tag, LONG_AGO).await;
        assert_ne!(response.status(), StatusCode::NOT_MODIFIED, "{tag}");
        assert_eq!(x_cache(&response), "BYPASS");
        assert!(response.headers().get("etag").is_none());
    }
    let checks: Vec<_> = catalog
        .seen()
        .into_iter()
        .filter(|s| s.path == TABLE && s.method == http::Method::HEAD)
        .collect();
    assert_eq!(checks.len(), 2);
    for check in checks {
        assert!(
            check.headers.get("if-none-match").is_none(),
            "{:?}",
            check.headers
        );
        assert!(check.headers.get("if-modified-since").is_none());
    }
}
