//! The admin listener's purge against the real catalog (SeaweedFS): a purge it cannot read
//! for sure is refused, never narrowed to a guess.

use crate::support::{catalog, x_cache, Api, Icecache};
use serde_json::Value;

#[tokio::test]
async fn a_purge_naming_a_parameter_twice_or_empty_is_refused_and_purges_nothing() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let api = Api::new(&icecache.url).await;
    let (namespace, table) = api.fresh_table("ns_admin").await;
    let path = format!("/namespaces/{namespace}/tables/{table}");
    assert_eq!(api.get(&path).send().await.unwrap().status(), 200);
    let client = reqwest::Client::new();
    for query in [
        format!("namespace={namespace}&namespace=other"),
        format!("namespace=other&namespace={namespace}"),
        format!("namespace={namespace}&table=other&table={table}"),
        format!("namespace={namespace}&table="),
        "namespace=".to_owned(),
    ] {
        let refused = client
            .post(format!("{}/cache/purge?{query}", icecache.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 400, "{query}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["type"], "BadRequestException", "{query}");
        let load = api.get(&path).send().await.unwrap();
        assert_eq!(x_cache(&load), "HIT", "{query} purged the entry");
    }
    let purged = client
        .post(format!(
            "{}/cache/purge?namespace={namespace}&table={table}",
            icecache.admin
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    let body: Value = purged.json().await.unwrap();
    assert_eq!(body["purged"], 1);
    assert_eq!(x_cache(&api.get(&path).send().await.unwrap()), "MISS");
}
