//! `/v1/config` answers keep clients on icecache, and the advertised namespace separator is
//! learned. SeaweedFS advertises neither a `uri` nor a separator, so a small fake stands in for a
//! catalog that does (Lakekeeper puts `uri` in `overrides`; Iceberg 1.11 catalogs may advertise
//! `namespace-separator`). The pass-through of SeaweedFS's own config is tested in tests/it/passthrough.rs.

use crate::support::fake::{self, Fake};
use crate::support::{get_json, Icecache};
use serde_json::json;

async fn advertising_catalog() -> Fake {
    Fake::start(|request, _| {
        if request.uri().path() == "/v1/config" {
            fake::json(json!({
                "defaults": { "clients": "4" },
                "overrides": { "uri": "http://catalog-internal:8181/api", "namespace-separator": "%2E" }
            }))
        } else {
            fake::json(json!({ "metadata": { "format-version": 2, "table-uuid": "u" }, "config": {} }))
        }
    })
    .await
}

#[tokio::test]
async fn a_catalog_uri_is_rewritten_to_icecaches_own() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let config = get_json(&format!("{}/v1/config", icecache.url)).await;
    assert_eq!(config["overrides"]["uri"], icecache.url);
    assert_eq!(config["defaults"]["clients"], "4");
}

#[tokio::test]
async fn the_catalog_is_asked_for_an_uncompressed_config_it_can_be_rewritten_in() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    reqwest::Client::new()
        .get(format!("{}/v1/config", icecache.url))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    let seen = catalog.headers();
    assert_eq!(
        seen[0].get("accept-encoding").map(|v| v.to_str().unwrap()),
        Some("identity"),
        "no Accept-Encoding would let the catalog pick any coding"
    );
}

/// The `uri` a client is sent to for these forwarded headers.
async fn uri_forwarded_as(icecache: &Icecache, forwarded: &[(&str, &str)]) -> String {
    let mut request = reqwest::Client::new().get(format!("{}/v1/config", icecache.url));
    for (name, value) in forwarded {
        request = request.header(*name, *value);
    }
    let config: serde_json::Value = request.send().await.unwrap().json().await.unwrap();
    config["overrides"]["uri"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_proxy_in_front_names_the_url_clients_are_sent_to() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let forwarded = [
        ("x-forwarded-proto", "HTTPS"),
        ("x-forwarded-host", "icecache.example:8443"),
    ];
    assert_eq!(
        uri_forwarded_as(&icecache, &forwarded).await,
        "https://icecache.example:8443"
    );
}

#[tokio::test]
async fn a_forwarded_value_that_is_not_a_scheme_or_a_host_is_not_taken() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    for (name, value) in [
        ("x-forwarded-host", "u@evil.example"),
        ("x-forwarded-host", "evil.example/x?y#"),
        ("x-forwarded-host", "a b"),
        ("x-forwarded-host", "a, b"),
        ("x-forwarded-host", "a:99999"),
        ("x-forwarded-proto", "http://evil/#"),
        ("x-forwarded-proto", "ftp"),
    ] {
        assert_eq!(
            uri_forwarded_as(&icecache, &[(name, value)]).await,
            icecache.url,
            "{name}: {value}"
        );
    }
    // Two lines are two proxies' claims: neither is taken.
    let two = [
        ("x-forwarded-host", "first.example"),
        ("x-forwarded-host", "second.example"),
    ];
    assert_eq!(uri_forwarded_as(&icecache, &two).await, icecache.url);
}

#[tokio::test]
async fn every_spelling_a_lenient_catalog_reads_as_its_config_is_rewritten() {
    // A catalog that decodes, folds case and drops `;parameters` and trailing slashes.
    let catalog = Fake::start(|request, _| {
        let path = request.uri().path().to_ascii_lowercase();
        if path.contains("config") || path.contains("%63onfig") {
            fake::json(
                json!({ "defaults": {}, "overrides": { "uri": "http://catalog-internal:8181" } }),
            )
        } else {
            fake::json(json!({}))
        }
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    for path in [
        "/V1/config",
        "/v1/config/",
        "/v1/config;x=1",
        "/%76%31/config",
        "/v1/%63onfig",
        "//v1//config",
    ] {
        let config = get_json(&format!("{}{path}", icecache.url)).await;
        assert_eq!(config["overrides"]["uri"], icecache.url, "{path}: {config}");
    }
}

#[tokio::test]
async fn a_configured_public_url_is_what_clients_are_sent_to() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--public-url", "https://icecache.example:443"],
    )
    .await;
    let config = get_json(&format!("{}/v1/config", icecache.url)).await;
    assert_eq!(config["overrides"]["uri"], "https://icecache.example:443");
}

#[tokio::test]
async fn the_advertised_separator_decodes_namespaces_once_learned() {
    let catalog = advertising_catalog().await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    reqwest::get(format!("{}/v1/config", icecache.url))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let dotted = client
        .get(format!("{}/v1/namespaces/a%2Eb/tables/t", icecache.url))
        .send()
        .await
        .unwrap();
    assert_eq!(dotted.headers()["x-cache"], "MISS");
    let unit = client
        .get(format!("{}/v1/namespaces/a%1Fb/tables/t", icecache.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unit.headers()["x-cache"],
        "HIT",
        "a.b and a\\x1Fb name one namespace"
    );
    assert_eq!(catalog.requests(), 2, "one config request and one load");
}
