//! Strip means strip everywhere: under `strip` and `inject` a member named like a secret, at
//! any depth and in any object or array of any answer, never leaves icecache, is never cached
//! for another caller and never enters Redis; under `passthrough` a body with one anywhere stays
//! with the caller who asked. The catalog is the stand-in (tests/support/standin.rs), told to
//! bury secret-named members (`BURIED-<path>-…`) at paths no Iceberg answer puts one.

use std::io::Read;
use std::time::Duration;

use crate::support::cluster::{Redis, Tier};
use crate::support::standin::{vended_keys, Shape, StandIn};
use crate::support::{x_cache, ConfigFile, Icecache};
use serde_json::{json, Value};

const TABLE: &str = "/v1/namespaces/db/tables/t";

/// Depths 1 to 6, in objects and in lists, beside and inside `config`, each storage
/// credential and the metadata.
const PATHS: &[&str] = &[
    "",
    "metadata",
    "metadata/properties",
    "metadata/schemas/0/fields/1",
    "config",
    "config/nested",
    "storage-credentials/0",
    "storage-credentials/0/config",
    "x/0/y/1/z",
    "error",
];

fn burying() -> Shape {
    Shape {
        buried: PATHS.to_vec(),
        secret_headers: true,
        padding: 2048,
        ..Shape::default()
    }
}

async fn standin(shape: Shape) -> StandIn {
    let standin = StandIn::start(shape).await;
    standin.create("t");
    standin.create("v");
    standin
}

/// Fails when `text` holds a buried secret or a key the catalog vended.
fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains("BURIED"), "{what}: {text:.600}");
    assert_eq!(
        vended_keys(text),
        Vec::<String>::new(),
        "{what}: {text:.600}"
    );
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut text)
        .expect("a gzip body");
    text
}

/// Every kind of answer the stand-in gives, asked through `icecache` as `caller`, with what
/// each must be: the route's name, its status, and (for loads) its `x-cache`.
async fn every_answer(
    client: &reqwest::Client,
    icecache: &Icecache,
    caller: &str,
) -> Vec<(String, u16, String, String)> {
    let url = |path: &str| format!("{}{path}", icecache.url);
    let table = json!({ "name": "created" });
    let requests = [
        ("loadTable (miss)", client.get(url(TABLE))),
        ("loadTable (hit)", client.get(url(TABLE))),
        (
            "loadTable (refs)",
            client.get(url(&format!("{TABLE}?snapshots=refs"))),
        ),
        (
            "loadTable (bypass)",
            client.get(url(&format!("{TABLE}?extension=1"))),
        ),
        (
            "loadTable (missing)",
            client.get(url("/v1/namespaces/db/tables/nope")),
        ),
        (
            "loadView (miss)",
            client.get(url("/v1/namespaces/db/views/v")),
        ),
        (
            "loadView (hit)",
            client.get(url("/v1/namespaces/db/views/v")),
        ),
        (
            "createTable",
            client.post(url("/v1/namespaces/db/tables")).json(&table),
        ),
        (
            "registerTable",
            client.post(url("/v1/namespaces/db/register")).json(&table),
        ),
        (
            "commit",
            client
                .post(url(TABLE))
                .json(&json!({"requirements": [], "updates": []})),
        ),
        (
            "commit (404)",
            client
                .post(url("/v1/namespaces/db/tables/nope"))
                .json(&json!({})),
        ),
        (
            "loadCredentials",
            client.get(url(&format!("{TABLE}/credentials"))),
        ),
        (
            "planTableScan",
            client.post(url(&format!("{TABLE}/plan"))).json(&json!({})),
        ),
        (
            "unclassified GET",
            client.get(url("/v1/warehouse/something/else")),
        ),
        (
            "unclassified POST",
            client.post(url("/v1/warehouse/extension")).json(&json!({})),
        ),
        ("config", client.get(url("/v1/config"))),
    ];
    let mut answers = Vec::new();
    for (route, request) in requests {
        let response = request
            .bearer_auth(caller)
            .header("x-iceberg-access-delegation", "vended-credentials")
            .send()
            .await
            .unwrap_or_else(|e| panic!("{route}: {e}"));
        let status = response.status().as_u16();
        let cache = response
            .headers()
            .get("x-cache")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let text = body_and_headers(response).await;
        answers.push((route.to_owned(), status, cache, text));
    }
    answers
}

/// An answer's body, then its headers (`\nname: value` each): a header counts as much as the
/// body.
async fn body_and_headers(response: reqwest::Response) -> String {
    let headers: String = response
        .headers()
        .iter()
        .map(|(name, value)| format!("\n{name}: {}", String::from_utf8_lossy(value.as_bytes())))
        .collect();
    response.text().await.unwrap() + &headers
}

async fn assert_every_answer_clean(icecache: &Icecache) {
    let client = reqwest::Client::new();
    let answers = every_answer(&client, icecache, "alice").await;
    for (route, status, cache, text) in &answers {
        assert_clean(&format!("{route} ({status}, {cache})"), text);
    }
    let cache_of = |route: &str| {
        answers
            .iter()
            .find(|(r, ..)| r == route)
            .map(|(_, status, cache, _)| (*status, cache.clone()))
            .unwrap()
    };
    // The angles the routes were meant to take were taken.
    assert_eq!(cache_of("loadTable (miss)"), (200, "MISS".to_owned()));
    assert_eq!(cache_of("loadTable (hit)"), (200, "HIT".to_owned()));
    assert_eq!(cache_of("loadTable (bypass)"), (200, "BYPASS".to_owned()));
    assert_eq!(cache_of("loadView (hit)"), (200, "HIT".to_owned()));
    assert_eq!(cache_of("commit (404)").0, 404);
}

#[tokio::test]
async fn under_strip_a_secret_buried_anywhere_in_any_answer_never_reaches_the_client() {
    let catalog = standin(burying()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    assert_every_answer_clean(&icecache).await;
}

#[tokio::test]
async fn under_inject_a_secret_buried_anywhere_in_any_answer_never_reaches_the_client() {
    let catalog = standin(burying()).await;
    let config = ConfigFile::new(
        "credentials = \"inject\"\n[inject]\n\"client.region\" = { value = \"injected-region\" }\n",
    );
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    assert_every_answer_clean(&icecache).await;
    let loaded: Value = reqwest::Client::new()
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(loaded["config"]["client.region"], "injected-region");
}

#[tokio::test]
async fn a_table_answer_with_an_unreadable_buried_member_is_refused_not_passed() {
    // A lone surrogate deep in the metadata: a laxer client could read what icecache cannot.
    let catalog = standin(Shape {
        top_level_secrets: true,
        unreadable_json: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let response = reqwest::Client::new()
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_clean("refusal", &response.text().await.unwrap());
}

/// The body read every way a lax client might: as UTF-8, UTF-16 and UTF-32.
fn every_reading(bytes: &[u8]) -> Vec<String> {
    let units16 = |be: bool| -> Vec<u16> {
        bytes
            .chunks_exact(2)
            .map(|c| {
                if be {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    u16::from_le_bytes([c[0], c[1]])
                }
            })
            .collect()
    };
    let utf32: String = bytes
        .chunks_exact(4)
        .filter_map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    vec![
        String::from_utf8_lossy(bytes).into_owned(),
        String::from_utf16_lossy(&units16(false)),
        String::from_utf16_lossy(&units16(true)),
        utf32,
    ]
}

#[tokio::test]
async fn json_in_another_encoding_or_wrapper_never_carries_a_secret_out() {
    for wrapping in ["utf-16le", "utf-16be", "utf-32le", "jsonp", "xssi", "html"] {
        let catalog = standin(Shape {
            wrapping: Some(wrapping),
            ..burying()
        })
        .await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
        let client = reqwest::Client::new();
        for (route, request) in [
            ("loadTable", client.get(format!("{}{TABLE}", icecache.url))),
            (
                "commit",
                client
                    .post(format!("{}{TABLE}", icecache.url))
                    .json(&json!({})),
            ),
            (
                "plan",
                client
                    .post(format!("{}{TABLE}/plan", icecache.url))
                    .json(&json!({})),
            ),
            (
                "error",
                client.get(format!("{}/v1/namespaces/db/tables/nope", icecache.url)),
            ),
            (
                "unclassified",
                client.get(format!("{}/v1/warehouse/something/else", icecache.url)),
            ),
        ] {
            let response = request.bearer_auth("alice").send().await.unwrap();
            let status = response.status();
            let bytes = response.bytes().await.unwrap();
            for reading in every_reading(&bytes) {
                assert_clean(&format!("{wrapping} {route} ({status})"), &reading);
            }
            assert_eq!(status, 502, "{wrapping} {route}: refused, not passed");
        }
    }
}

#[tokio::test]
async fn coalesced_callers_under_shared_strip_get_no_buried_secret() {
    let catalog = standin(Shape {
        delay: Duration::from_millis(300),
        ..burying()
    })
    .await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--identity", "shared", "--credentials", "strip"],
    )
    .await;
    let client = reqwest::Client::new();
    let loads = (0..8).map(|i| {
        let request = client
            .get(format!("{}{TABLE}", icecache.url))
            .bearer_auth(format!("caller{i}"));
        async move { request.send().await.unwrap() }
    });
    let mut phases = Vec::new();
    for response in futures::future::join_all(loads).await {
        phases.push(x_cache(&response));
        assert_clean("coalesced load", &response.text().await.unwrap());
    }
    assert!(phases.iter().any(|p| p == "COALESCED"), "{phases:?}");
    assert_eq!(catalog.loads("t"), 1);
}

#[tokio::test]
async fn under_revalidate_with_one_catalog_etag_for_every_caller_no_buried_secret_is_served() {
    let catalog = standin(Shape {
        etag: true,
        delay: Duration::from_millis(200),
        ..burying()
    })
    .await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--identity", "revalidate", "--credentials", "strip"],
    )
    .await;
    let client = reqwest::Client::new();
    let loads = ["alice", "bob", "carol"].map(|caller| {
        let request = client
            .get(format!("{}{TABLE}", icecache.url))
            .bearer_auth(caller);
        async move { request.send().await.unwrap() }
    });
    for response in futures::future::join_all(loads).await {
        assert_eq!(response.status(), 200);
        assert_clean("coalesced load", &response.text().await.unwrap());
    }
    // A caller confirmed with the catalog's 304 is served the entry another caller's
    // credentials fetched.
    let response = client
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("dave")
        .send()
        .await
        .unwrap();
    assert_eq!(x_cache(&response), "REVALIDATED");
    assert_clean("confirmed load", &response.text().await.unwrap());
    let not_modified = catalog
        .seen()
        .iter()
        .filter(|s| s.headers.contains_key("if-none-match"))
        .count();
    assert!(
        not_modified >= 1,
        "dave was confirmed with the catalog's ETag"
    );
}

#[tokio::test]
async fn the_gzip_copy_of_an_answer_holds_no_buried_secret() {
    for catalog_gzips in [false, true] {
        let catalog = standin(Shape {
            gzip: catalog_gzips,
            ..burying()
        })
        .await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
        let client = reqwest::Client::builder().no_gzip().build().unwrap();
        for expected in ["MISS", "HIT"] {
            let response = client
                .get(format!("{}{TABLE}", icecache.url))
                .bearer_auth("alice")
                .header("accept-encoding", "gzip")
                .send()
                .await
                .unwrap();
            assert_eq!(x_cache(&response), expected);
            assert_eq!(response.headers()["content-encoding"], "gzip");
            let text = gunzip(&response.bytes().await.unwrap());
            assert_clean(
                &format!("gzip {expected}, catalog gzips: {catalog_gzips}"),
                &text,
            );
        }
    }
}

#[tokio::test]
async fn over_http2_no_buried_secret_is_served() {
    let catalog = standin(burying()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let answers = every_answer(&client, &icecache, "alice").await;
    for (route, status, cache, text) in &answers {
        assert_clean(&format!("h2 {route} ({status}, {cache})"), text);
    }
}

/// `/v1/config` answered with another status than 200 (an error, a redirect, a 201) is no
/// less an answer: under strip and inject it carries no secret, in its body or its headers.
#[tokio::test]
async fn a_config_answer_that_is_not_200_carries_no_secret_either() {
    let catalog = standin(burying()).await;
    let strip = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let client = reqwest::Client::new();
    for status in [201, 302, 400, 401, 403, 404, 500, 503] {
        catalog.reshape(|shape| shape.config_status = Some(status));
        let response = client
            .get(format!("{}/v1/config?warehouse=w", strip.url))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        let text = body_and_headers(response).await;
        assert!(!text.contains("CFGSK"), "{status}: {text:.600}");
        assert_clean(&format!("/v1/config answered {status}"), &text);
    }
}

#[tokio::test]
async fn inject_fills_storage_credentials_spelled_in_any_case() {
    let catalog = standin(Shape {
        case_members: true,
        ..Shape::default()
    })
    .await;
    let config = ConfigFile::new(
        "credentials = \"inject\"\n[inject]\n\"client.region\" = { value = \"injected-region\" }\n",
    );
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let answer: Value = reqwest::Client::new()
        .get(format!("{}{TABLE}/credentials", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let credentials = answer["storage-credentials"].as_array().expect("a list");
    assert_eq!(credentials.len(), 1, "{answer}");
    assert_eq!(credentials[0]["prefix"], "s3://bucket/t");
    assert_eq!(credentials[0]["config"]["client.region"], "injected-region");
    assert_clean("loadCredentials", &answer.to_string());
}

/// Waits (a bounded while: sharing happens after the answer) until Redis holds `text`.
async fn until_redis_holds(redis: &Redis, text: &str) -> String {
    let what = format!("Redis holding {text:?}");
    crate::support::eventually(&what, || async { redis.text().contains(text) }).await;
    redis.text()
}

#[tokio::test]
async fn under_strip_nothing_secret_enters_redis() {
    let redis = Redis::start().await;
    let catalog = standin(burying()).await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--credentials", "strip", "--identity", "shared"],
    )
    .await;
    for replica in 0..2 {
        let response = crate::support::cluster::load(tier.url(replica), "alice").await;
        assert_clean("tier load", &response.text().await.unwrap());
    }
    let stored = until_redis_holds(&redis, "metadata-location").await;
    assert!(!stored.contains("BURIED"), "{stored:.800}");
    assert!(!stored.to_ascii_lowercase().contains("secret-access-key"));
}

#[tokio::test]
async fn under_passthrough_a_body_with_a_buried_secret_never_enters_redis() {
    // Nothing vended in `config`: only the buried member makes the body hold a secret.
    let quiet = |buried: Vec<&'static str>| Shape {
        vend_always: false,
        buried,
        ..Shape::default()
    };
    let redis = Redis::start().await;
    let catalog = standin(quiet(vec!["metadata/properties/deeper", "x/0/y/1/z"])).await;
    let tier = Tier::start(2, &catalog.url, &redis, &[]).await;
    for replica in 0..2 {
        let text = crate::support::cluster::load(tier.url(replica), "alice")
            .await
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("BURIED"),
            "passthrough serves it to its caller"
        );
    }
    assert!(!redis.text().contains("BURIED"));
    assert_eq!(
        catalog.loads("t"),
        2,
        "each replica asked the catalog itself"
    );
    // The same body without the buried member is shared: the check above could fail.
    catalog.reshape(|shape| shape.buried.clear());
    catalog.commit_directly("t");
    let fresh = Tier::start(1, &catalog.url, &redis, &["--cluster-key-prefix", "second"]).await;
    let response = crate::support::cluster::load(fresh.url(0), "alice").await;
    assert_eq!(response.status(), 200);
    until_redis_holds(&redis, "metadata-location").await;
}

#[test]
fn a_strip_key_that_would_remove_an_answers_shape_is_refused_at_config_check() {
    for keys in ["config", "prefix", "storage*", "*"] {
        let config = ConfigFile::new(&format!(
            "upstream = \"http://127.0.0.1:1\"\nstrip_keys = [\"token\", \"{keys}\"]\n"
        ));
        let output = std::process::Command::new(crate::support::binary())
            .args(["check-config", config.path()])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(64), "{keys}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("strip_keys"), "{keys}: {stderr}");
    }
}

/// Secrets as each client spells them (pyiceberg's bare ADLS names, the REST client's SigV4
/// keys, SSE-C keys, any dotted `*.token`), vended in `config`: none survives `strip`, and the
/// settings beside them do.
#[tokio::test]
async fn under_strip_every_clients_spelling_of_a_secret_is_removed() {
    const SPELLINGS: &[&str] = &[
        "adls.account-key",
        "adls.sas-token",
        "adls.connection-string",
        "adls.client-secret",
        "adls.token",
        "adls.credential",
        "rest.secret-access-key",
        "rest.session-token",
        "s3.sse.key",
        "oauth2.token",
        "my.custom.token",
        "password",
        "secret",
        "aws_secret_access_key",
    ];
    let catalog = standin(Shape {
        extra_config: SPELLINGS.iter().map(|name| (*name, "LEAK")).collect(),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    for round in ["fill", "hit"] {
        let answer = reqwest::Client::new()
            .get(format!("{}{TABLE}", icecache.url))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        assert!(
            !body.to_string().contains("LEAK"),
            "{round}: {}",
            body["config"]
        );
        assert_eq!(body["config"]["s3.endpoint"], "http://s3.local", "{round}");
        assert_eq!(body["config"]["client.region"], "eu-west-1", "{round}");
    }
}
