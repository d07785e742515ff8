//! Upstream validators as catalogs send them: weak tags (Polaris, Lakekeeper) go back to the
//! catalog as it sent them and a 304 confirms the entry; a 200 to a conditional request
//! replaces it (Lakekeeper declines a 304 once the credentials it vended are half spent).
//! Clients only ever see icecache's own strong tag.

use std::time::Duration;

use crate::support::standin::{vended_keys, version_of, Shape, StandIn};
use crate::support::{metric, x_cache, Icecache};
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::Value;

const PATH: &str = "/v1/namespaces/db/tables/t";

async fn catalog(shape: Shape) -> StandIn {
    let catalog = StandIn::start(Shape {
        etag: true,
        weak_etag: true,
        ..shape
    })
    .await;
    catalog.create("t");
    catalog
}

async fn load(icecache: &Icecache, if_none_match: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}{PATH}", icecache.url))
        .bearer_auth("alice");
    if let Some(tag) = if_none_match {
        request = request.header(IF_NONE_MATCH, tag);
    }
    request.send().await.unwrap()
}

fn tag(response: &reqwest::Response) -> String {
    response.headers()[ETAG].to_str().unwrap().to_owned()
}

/// The `If-None-Match` of each loadTable the catalog received, in order.
fn conditionals(catalog: &StandIn) -> Vec<Option<String>> {
    catalog
        .seen()
        .iter()
        .filter(|s| s.method == http::Method::GET && s.path.ends_with("/tables/t"))
        .map(|s| {
            s.headers
                .get("if-none-match")
                .map(|v| v.to_str().unwrap().to_owned())
        })
        .collect()
}

fn upstream_304s(metrics: &str) -> f64 {
    metric(
        metrics,
        r#"icecache_cache_revalidations_total{result="not_modified"}"#,
    )
}

#[tokio::test]
async fn a_weak_catalog_tag_goes_back_as_sent_and_its_304_confirms_the_entry() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "100ms"]).await;
    let first = load(&icecache, None).await;
    let ours = tag(&first);
    assert!(
        !ours.starts_with("W/"),
        "icecache's own tag is strong: {ours}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = load(&icecache, Some(&ours)).await;
    assert_eq!(
        second.status(),
        304,
        "the client's tag still names the body"
    );
    assert_eq!(x_cache(&second), "REVALIDATED");
    assert_eq!(tag(&second), ours);
    let sent = conditionals(&catalog);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], None);
    let weak = sent[1].clone().expect("a conditional revalidation");
    assert!(weak.starts_with("W/\"v1."), "sent {weak}");
    assert_eq!(upstream_304s(&icecache.metrics().await), 1.0);
}

#[tokio::test]
async fn a_catalog_200_to_a_conditional_request_replaces_the_entry() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "100ms"]).await;
    let first = load(&icecache, None).await;
    let old = tag(&first);
    catalog.commit_directly("t");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let revalidated = load(&icecache, Some(&old)).await;
    assert_eq!(revalidated.status(), 200, "the old tag names an old body");
    assert_eq!(x_cache(&revalidated), "REVALIDATED");
    let new = tag(&revalidated);
    assert_ne!(new, old);
    let body: Value = revalidated.json().await.unwrap();
    assert_eq!(version_of(&body), Some(2));
    // The entry was replaced: the new tag is confirmed, the old one names nothing held.
    assert_eq!(load(&icecache, Some(&new)).await.status(), 304);
    assert_eq!(load(&icecache, Some(&old)).await.status(), 200);
}

/// Lakekeeper's rule: a 304 only while the credentials it vended are in the first half of their
/// life. Once it declines, its 200 carries fresh keys and replaces the entry (and the client's
/// tag no longer matches: it must take the new keys).
#[tokio::test]
async fn a_catalog_that_declines_a_304_hands_out_fresh_credentials_through_icecache() {
    let catalog = catalog(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "100ms"]).await;
    let first = load(&icecache, None).await;
    let ours = tag(&first);
    let first_keys = vended_keys(&first.text().await.unwrap());
    assert!(!first_keys.is_empty(), "the stand-in vends keys");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let confirmed = load(&icecache, Some(&ours)).await;
    assert_eq!(confirmed.status(), 304, "inside the catalog's window");
    // The window closes (any tag older than zero is declined).
    catalog.reshape(|shape| shape.no_304_after = Some(Duration::ZERO));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let declined = load(&icecache, Some(&ours)).await;
    assert_eq!(declined.status(), 200, "outside it: the body with new keys");
    assert_eq!(x_cache(&declined), "REVALIDATED");
    assert_ne!(tag(&declined), ours);
    let keys = vended_keys(&declined.text().await.unwrap());
    assert!(!keys.is_empty());
    assert!(keys.iter().all(|k| !first_keys.contains(k)), "{keys:?}");
    assert_eq!(upstream_304s(&icecache.metrics().await), 1.0);
}
