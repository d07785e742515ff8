//! loadCredentials (`GET …/tables/{table}/credentials`) under each credential policy. SeaweedFS
//! does not serve this route (it answers 404), so a stand-in catalog vends per-caller keys
//! (`AK-<caller>-<n>`, `SK-<caller>-<n>`) for it.

use crate::support::standin::{vended_keys, Shape, StandIn};
use crate::support::{ConfigFile, Icecache};
use serde_json::Value;

const CREDENTIALS: &str = "/v1/namespaces/db/tables/t/credentials";

async fn standin() -> StandIn {
    let standin = StandIn::start(Shape::default()).await;
    standin.create("t");
    standin
}

async fn refresh(client: &reqwest::Client, icecache: &Icecache, who: &str) -> reqwest::Response {
    client
        .get(format!("{}{CREDENTIALS}", icecache.url))
        .bearer_auth(who)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap()
}

fn refreshes(catalog: &StandIn) -> usize {
    catalog
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/credentials"))
        .count()
}

#[tokio::test]
async fn under_inject_a_refresh_answers_the_injected_properties_for_the_vended_prefix() {
    let catalog = standin().await;
    let config = ConfigFile::new(
        "credentials = \"inject\"\n[inject]\n\
         \"s3.secret-access-key\" = { env = \"INJECTED_SK\" }\n\
         \"client.region\" = { value = \"eu-1\" }\n",
    );
    let icecache = Icecache::start_with_env(
        &catalog.url,
        &["--config", config.path()],
        &[("INJECTED_SK", "INJECTED-SK")],
    )
    .await;
    let response = refresh(&reqwest::Client::new(), &icecache, "alice").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.contains("SK-alice"), "{text}");
    assert!(!text.contains("AK-alice"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let entries = body["storage-credentials"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{text}");
    assert_eq!(entries[0]["prefix"], "s3://bucket/t");
    assert_eq!(entries[0]["config"]["s3.secret-access-key"], "INJECTED-SK");
    assert_eq!(entries[0]["config"]["client.region"], "eu-1");
}

#[tokio::test]
async fn under_strip_no_refresh_carries_a_vended_key_over_http1_or_http2() {
    let catalog = standin().await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for client in [reqwest::Client::new(), h2] {
        let response = refresh(&client, &icecache, "alice").await;
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert_eq!(vended_keys(&text), Vec::<String>::new(), "{text}");
    }
}

#[tokio::test]
async fn under_passthrough_every_refresh_reaches_the_catalog_and_each_caller_gets_its_own() {
    let catalog = standin().await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--credentials", "passthrough", "--fresh-for", "1h"],
    )
    .await;
    let client = reqwest::Client::new();
    for who in ["alice", "bob", "alice"] {
        let response = refresh(&client, &icecache, who).await;
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert!(text.contains(&format!("SK-{who}-")), "{who}: {text}");
        let other = if who == "alice" { "bob" } else { "alice" };
        assert!(!text.contains(&format!("SK-{other}-")), "{who}: {text}");
    }
    assert_eq!(refreshes(&catalog), 3, "never answered from a cache");
}
