//! Under `strip` and `inject` no vended secret leaves icecache, whatever shape the catalog's
//! answer takes and whichever route carries it; an injected secret that was rotated out, or a
//! policy that was reloaded away, is never served again; and icecache's own configuration never
//! hands a secret to a client or a log. The catalog here is the stand-in (tests/support/
//! standin.rs): no catalog that runs here vends credentials, let alone against the rules.

use std::time::Duration;

use crate::support::standin::{vended_keys, Shape, StandIn};
use crate::support::{hangup, ConfigFile, Icecache};
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::{json, Value};

const TABLE: &str = "/v1/namespaces/db/tables/t";

async fn standin(shape: Shape) -> StandIn {
    let standin = StandIn::start(shape).await;
    standin.create("t");
    standin
}

async fn load_as(icecache: &Icecache, caller: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth(caller)
        .header("x-iceberg-access-delegation", "vended-credentials")
        .send()
        .await
        .expect("icecache answers")
}

async fn assert_served_without_keys(response: reqwest::Response) -> Value {
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_eq!(vended_keys(&text), Vec::<String>::new(), "served: {text}");
    let body: Value = serde_json::from_str(&text).expect("still a LoadTableResult");
    assert_eq!(
        body["config"]["s3.endpoint"], "http://s3.local",
        "non-secrets stay"
    );
    body
}

#[tokio::test]
async fn a_no_store_answer_under_strip_reaches_the_client_without_keys() {
    let catalog = standin(Shape {
        no_store: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    for _ in 0..2 {
        let response = load_as(&icecache, "alice").await;
        assert_eq!(response.headers()["x-cache"], "BYPASS");
        assert_served_without_keys(response).await;
    }
}

#[tokio::test]
async fn an_answer_labelled_as_text_under_strip_is_stripped_like_json() {
    let catalog = standin(Shape {
        content_type: "text/plain",
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    assert_served_without_keys(load_as(&icecache, "alice").await).await;
}

#[tokio::test]
async fn null_storage_credentials_under_strip_still_get_the_config_stripped() {
    let catalog = standin(Shape {
        null_storage_credentials: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    for _ in 0..2 {
        assert_served_without_keys(load_as(&icecache, "alice").await).await;
    }
}

#[tokio::test]
async fn an_answer_that_is_not_json_under_strip_is_refused_with_an_iceberg_502() {
    let catalog = standin(Shape::default()).await;
    // Not JSON at all: nothing can be stripped from it, so nothing of it is passed on.
    let html = crate::support::fake::Fake::start(|_, _| {
        let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
            "<html>s3.secret-access-key=SK-alice-1</html>",
        )));
        response
            .headers_mut()
            .insert("content-type", http::HeaderValue::from_static("text/html"));
        response
    })
    .await;
    drop(catalog);
    let icecache = Icecache::start(&html.url, &["--credentials", "strip"]).await;
    let response = load_as(&icecache, "alice").await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], 502);
    assert!(!body.to_string().contains("SK-alice"));
}

#[tokio::test]
async fn coalesced_callers_under_shared_strip_never_receive_the_first_callers_keys() {
    let catalog = standin(Shape {
        no_store: true,
        delay: Duration::from_millis(300),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--identity", "shared", "--credentials", "strip"],
    )
    .await;
    let mut loads = Vec::new();
    for n in 0..20 {
        let url = icecache.url.clone();
        loads.push(tokio::spawn(async move {
            let response = reqwest::Client::new()
                .get(format!("{url}{TABLE}"))
                .bearer_auth(format!("caller{n}"))
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        }));
    }
    for load in loads {
        let (status, text) = load.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(vended_keys(&text), Vec::<String>::new(), "{text}");
    }
    assert!(catalog.loads("t") < 20, "the loads were coalesced");
}

#[tokio::test]
async fn create_and_register_table_answers_under_strip_carry_no_keys() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let client = reqwest::Client::new();
    for (path, name) in [
        ("/v1/namespaces/db/tables", "created"),
        ("/v1/namespaces/db/register", "registered"),
    ] {
        let response = client
            .post(format!("{}{path}", icecache.url))
            .bearer_auth("alice")
            .header("x-iceberg-access-delegation", "vended-credentials")
            .json(&json!({ "name": name, "metadata-location": "s3://bucket/m.json" }))
            .send()
            .await
            .unwrap();
        let body = assert_served_without_keys(response).await;
        assert!(body["metadata-location"]
            .as_str()
            .is_some_and(|l| l.contains(name)));
    }
}

#[tokio::test]
async fn load_credentials_under_strip_returns_no_secret() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let response = reqwest::Client::new()
        .get(format!("{}{TABLE}/credentials", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_eq!(vended_keys(&text), Vec::<String>::new(), "{text}");
}

fn inject_config(secret_file: &std::path::Path, extra: &str) -> String {
    format!(
        "credentials = \"inject\"\n{extra}\n[inject]\n\
         \"s3.secret-access-key\" = {{ file = \"{}\" }}\n",
        secret_file.display()
    )
}

struct Secret(std::path::PathBuf);

impl Secret {
    fn new(value: &str) -> Secret {
        let path = std::env::temp_dir().join(crate::support::unique("icecache-secret"));
        std::fs::write(&path, value).unwrap();
        Secret(path)
    }

    fn rotate(&self, value: &str) {
        std::fs::write(&self.0, value).unwrap();
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn injected(response: reqwest::Response) -> (String, String) {
    assert_eq!(response.status(), 200);
    let tag = response.headers()[ETAG].to_str().unwrap().to_owned();
    let body: Value = response.json().await.unwrap();
    let secret = body["config"]["s3.secret-access-key"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    (secret, tag)
}

#[tokio::test]
async fn a_rotated_injected_secret_is_served_from_the_next_request_on() {
    let catalog = standin(Shape::default()).await;
    let secret = Secret::new("first-secret");
    let config = ConfigFile::new(&inject_config(&secret.0, "[cache]\nfresh_for = \"1h\""));
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let (first, _) = injected(load_as(&icecache, "alice").await).await;
    assert_eq!(first, "first-secret");
    secret.rotate("second-secret");
    hangup(&icecache, "applied").await;
    let (second, _) = injected(load_as(&icecache, "alice").await).await;
    assert_eq!(second, "second-secret");
}

#[tokio::test]
async fn the_etag_of_a_rotated_out_secret_never_gets_a_304() {
    // The catalog confirms the table with its own 304: only the injected secret changed.
    let catalog = standin(Shape {
        etag: true,
        ..Shape::default()
    })
    .await;
    let secret = Secret::new("first-secret");
    let config = ConfigFile::new(&inject_config(&secret.0, "[cache]\nfresh_for = \"100ms\""));
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let (_, old_tag) = injected(load_as(&icecache, "alice").await).await;
    secret.rotate("second-secret");
    hangup(&icecache, "applied").await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let response = reqwest::Client::new()
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("alice")
        .header(IF_NONE_MATCH, &old_tag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the old ETag names the old secret");
    let (secret_now, tag) = injected(response).await;
    assert_eq!(secret_now, "second-secret");
    assert_ne!(tag, old_tag);
}

#[tokio::test]
async fn a_reload_from_passthrough_to_strip_stops_serving_cached_keys() {
    // The stand-in vends without being asked: the request is the same under both policies.
    let catalog = standin(Shape::default()).await;
    let config = ConfigFile::new("[cache]\nfresh_for = \"1h\"\n");
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let load = || {
        reqwest::Client::new()
            .get(format!("{}{TABLE}", icecache.url))
            .bearer_auth("alice")
            .send()
    };
    let passed: Value = load().await.unwrap().json().await.unwrap();
    assert!(passed["config"]["s3.access-key-id"].is_string());
    config.rewrite("credentials = \"strip\"\n[cache]\nfresh_for = \"1h\"\n");
    hangup(&icecache, "applied").await;
    assert_served_without_keys(load().await.unwrap()).await;
}

#[tokio::test]
async fn a_reload_from_inject_to_strip_stops_serving_injected_values() {
    let catalog = standin(Shape::default()).await;
    let secret = Secret::new("injected-secret");
    let config = ConfigFile::new(&inject_config(&secret.0, "[cache]\nfresh_for = \"1h\""));
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let (value, _) = injected(load_as(&icecache, "alice").await).await;
    assert_eq!(value, "injected-secret");
    config.rewrite("credentials = \"strip\"\n[cache]\nfresh_for = \"1h\"\n");
    hangup(&icecache, "applied").await;
    let text = load_as(&icecache, "alice").await.text().await.unwrap();
    assert!(!text.contains("injected-secret"), "{text}");
}

#[test]
fn a_password_in_the_upstream_url_is_refused_before_anything_starts() {
    let config = ConfigFile::new("upstream = \"http://svc:hunter2@127.0.0.1:1\"\n");
    let output = std::process::Command::new(crate::support::binary())
        .args(["check-config", config.path()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("upstream"), "{stderr}");
    assert!(
        !stderr.contains("hunter2"),
        "the password was echoed: {stderr}"
    );
}

#[test]
fn an_admin_listener_off_loopback_without_a_token_is_refused() {
    let output = std::process::Command::new(crate::support::binary())
        .args([
            "--upstream",
            "http://127.0.0.1:1",
            "--admin-listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("admin_token"), "{stderr}");
}

#[tokio::test]
async fn icecaches_own_errors_and_logs_never_show_the_admin_token_or_injected_secrets() {
    let secret = Secret::new("never-logged-secret");
    let config = ConfigFile::new(&format!(
        "admin_token = \"never-logged-token\"\nlog_level = \"debug\"\n{}",
        inject_config(&secret.0, "")
    ));
    // An unreachable catalog: every load is one of icecache's own errors.
    let icecache = Icecache::start(
        &crate::support::ports::nothing_listens(),
        &["--config", config.path()],
    )
    .await;
    let response = load_as(&icecache, "alice").await;
    assert_eq!(response.status(), 502);
    let text = response.text().await.unwrap();
    let check = std::process::Command::new(crate::support::binary())
        .args(["check-config", config.path()])
        .env("ICECACHE_UPSTREAM", "http://127.0.0.1:1")
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&check.stdout).into_owned();
    for (what, shown) in [
        ("error body", &text),
        ("logs", &icecache.logs()),
        ("check-config", &described),
    ] {
        assert!(!shown.contains("never-logged-token"), "{what}: {shown}");
        assert!(!shown.contains("never-logged-secret"), "{what}: {shown}");
        assert!(!shown.contains("Bearer alice"), "{what}: {shown}");
    }
}

async fn assert_no_keys(response: reqwest::Response) -> String {
    assert!(response.status().is_success(), "{}", response.status());
    let text = response.text().await.unwrap();
    assert_eq!(vended_keys(&text), Vec::<String>::new(), "served: {text}");
    text
}

#[tokio::test]
async fn a_load_table_answer_with_another_success_status_is_stripped_too() {
    for status in [201, 203] {
        let catalog = standin(Shape {
            ok_status: Some(status),
            ..Shape::default()
        })
        .await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
        assert_no_keys(load_as(&icecache, "alice").await).await;
    }
}

#[tokio::test]
async fn coalesced_callers_under_shared_strip_never_receive_keys_from_another_success_status() {
    let catalog = standin(Shape {
        ok_status: Some(201),
        delay: Duration::from_millis(300),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--identity", "shared", "--credentials", "strip"],
    )
    .await;
    let loads: Vec<_> = (0..10)
        .map(|n| {
            let request = reqwest::Client::new()
                .get(format!("{}{TABLE}", icecache.url))
                .bearer_auth(format!("caller{n}"));
            tokio::spawn(async move { request.send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    for load in loads {
        let text = load.await.unwrap();
        assert_eq!(vended_keys(&text), Vec::<String>::new(), "{text}");
    }
}

#[tokio::test]
async fn credential_members_spelled_in_another_case_are_stripped_and_never_shared() {
    // A Go client reads `Config` as `config`.
    let catalog = standin(Shape {
        case_members: true,
        etag: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(
        &catalog.url,
        &[
            "--identity",
            "revalidate",
            "--credentials",
            "strip",
            "--fresh-for",
            "1h",
        ],
    )
    .await;
    for caller in ["alice", "bob", "carol"] {
        let text = assert_no_keys(load_as(&icecache, caller).await).await;
        assert!(!text.contains("\"Config\""), "{text}");
    }
}

#[tokio::test]
async fn the_default_strip_list_covers_connection_strings_and_client_keys() {
    let catalog = standin(Shape {
        extra_config: vec![
            ("adls.connection-string.acct", "AK-conn"),
            ("client.secret-access-key", "SK-client"),
            ("client.session-token", "ST-client"),
            ("gcs.oauth2.refresh-token", "SK-refresh"),
        ],
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    assert_no_keys(load_as(&icecache, "alice").await).await;
}

#[tokio::test]
async fn commit_and_scan_plan_answers_under_strip_carry_no_keys() {
    let catalog = standin(Shape {
        commit_vends: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    for path in [TABLE.to_owned(), format!("{TABLE}/plan")] {
        let response =
            crate::support::empty_commit(&format!("{}{path}", icecache.url), "alice").await;
        assert_no_keys(response).await;
    }
}

#[tokio::test]
async fn an_unknown_routes_answer_is_scrubbed_at_any_depth() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/warehouse/something/else", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    let text = assert_no_keys(response).await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body["nested"]["x"]["keep"], "k",
        "what is not a secret stays"
    );
}

#[tokio::test]
async fn a_catalog_that_gzips_anyway_is_decoded_and_stripped_on_every_route() {
    let catalog = standin(Shape {
        gzip: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let client = reqwest::Client::new();
    for path in [TABLE, "/v1/warehouse/something/else", "/v1/config"] {
        let response = client
            .get(format!("{}{path}", icecache.url))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        assert!(
            response.headers().get("content-encoding").is_none(),
            "{path}"
        );
        let text = assert_no_keys(response).await;
        assert!(!text.contains("CFGSK"), "{path}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        if path == "/v1/config" {
            assert_eq!(
                body["overrides"]["uri"], icecache.url,
                "clients stay on icecache"
            );
        }
    }
}

/// Every route a stand-in that puts secrets beside an answer's members has, answered through
/// `icecache`: none of them may carry a key, whatever its status.
async fn assert_no_top_level_keys(icecache: &Icecache, load_status: Option<u16>) {
    let client = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", icecache.url);
    let mut answers = Vec::new();
    for _ in 0..2 {
        // Twice: the second loadTable is answered from the cache when the first was stored.
        answers.push(("loadTable", load_as(icecache, "alice").await));
    }
    answers.push((
        "loadCredentials",
        client
            .get(url(&format!("{TABLE}/credentials")))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "unknown route",
        client
            .get(url("/v1/warehouse/something/else"))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "config",
        client
            .get(url("/v1/config"))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap(),
    ));
    answers.push((
        "commit",
        crate::support::empty_commit(&url(TABLE), "alice").await,
    ));
    answers.push((
        "commit to a missing table (404)",
        crate::support::empty_commit(&url("/v1/namespaces/db/tables/missing"), "alice").await,
    ));
    for (route, response) in answers {
        let status = response.status().as_u16();
        if let Some(expected) = load_status.filter(|_| route == "loadTable") {
            assert_eq!(status, expected, "{route}");
        }
        let text = response.text().await.unwrap();
        assert_eq!(
            vended_keys(&text),
            Vec::<String>::new(),
            "{route} ({status}): {text}"
        );
        assert!(
            !text.to_ascii_lowercase().contains("session-token"),
            "{route}: {text}"
        );
    }
}

#[tokio::test]
async fn secrets_beside_an_answers_members_are_stripped_on_every_route_and_status() {
    for status in [None, Some(500)] {
        let catalog = standin(Shape {
            top_level_secrets: true,
            status,
            ..Shape::default()
        })
        .await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
        assert_no_top_level_keys(&icecache, Some(status.unwrap_or(200))).await;
    }
}

#[tokio::test]
async fn an_answer_icecache_cannot_parse_is_refused_rather_than_passed_with_its_secrets() {
    for status in [None, Some(500)] {
        let catalog = standin(Shape {
            top_level_secrets: true,
            unreadable_json: true,
            status,
            ..Shape::default()
        })
        .await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
        // Every route is refused (502) or scrubbed; none passes the catalog's bytes on.
        assert_no_top_level_keys(&icecache, Some(502)).await;
    }
}

#[tokio::test]
async fn secrets_beside_an_answers_members_are_stripped_under_inject_too() {
    let catalog = standin(Shape {
        top_level_secrets: true,
        ..Shape::default()
    })
    .await;
    let secret = Secret::new("injected-secret");
    let config = ConfigFile::new(&inject_config(&secret.0, ""));
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    assert_no_top_level_keys(&icecache, Some(200)).await;
}

#[test]
fn a_password_in_a_malformed_upstream_url_is_never_echoed() {
    for upstream in [
        "http:/svc:hunter2@127.0.0.1:1",
        "http:svc:hunter2@127.0.0.1:1",
        "svc:hunter2@127.0.0.1:1",
    ] {
        let output = std::process::Command::new(crate::support::binary())
            .args(["--upstream", upstream])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(64), "{upstream}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("hunter2"), "{upstream}: {stderr}");
    }
}
