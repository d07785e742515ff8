//! The cache in front of rustberg 0.3.0, a real catalog that sends ETags and answers
//! `If-None-Match` with 304. `scripts/test.sh` builds it once (`scripts/build-rustberg.sh`, a
//! debug build of about 5 minutes, cached under ~/.cache/icecache) and requires these tests to
//! run; a bare `cargo test` without it skips them, and says so.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::relay::Relay;
use crate::support::{metric, Icecache};
use serde_json::json;

const KEY: &str = "rb_icecache_test_key_0123456789abcdef";

struct Rustberg {
    child: Child,
    url: String,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Rustberg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("ICECACHE_RUSTBERG")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/icecache/rustberg/bin/rustberg"))
        })?;
    path.is_file().then_some(path)
}

/// Starts rustberg on a free loopback port with one admin API key, an in-memory catalog and a
/// local warehouse; None (after saying why) when it is not built.
async fn rustberg(test: &str) -> Option<Rustberg> {
    let Some(binary) = binary() else {
        crate::skipped(
            test,
            "rustberg is not built here; scripts/test.sh builds it with scripts/build-rustberg.sh \
             (about 5 minutes), or set ICECACHE_RUSTBERG to its binary",
        );
        return None;
    };
    let dir = std::env::temp_dir().join(crate::support::unique("icecache-rustberg"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rustberg.toml");
    std::fs::write(
        &config,
        "[server.auth]\napi_key_enabled = true\n[[server.auth.api_keys]]\n\
         name = \"icecache-test\"\ntenant = \"default\"\nroles = [\"admin\"]\n\
         key_env = \"RUSTBERG_TEST_KEY\"\n[rate_limit]\nenabled = false\n\
         [audit]\nsink = \"stdout\"\nfail_closed = false\n",
    )
    .unwrap();
    let port = crate::support::ports::reserved();
    let child = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .args(["--dev", "--insecure-http", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(["--catalog-url", "memory://", "--warehouse"])
        .arg(format!("file://{}", dir.join("warehouse").display()))
        .env("RUSTBERG_TEST_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rustberg starts");
    let rustberg = Rustberg {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: TempDir(dir),
    };
    for _ in 0..200 {
        if reqwest::get(format!("{}/v1/config", rustberg.url))
            .await
            .is_ok()
        {
            return Some(rustberg);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("rustberg did not start on port {port}");
}

async fn create_table(base: &str) {
    let client = reqwest::Client::new();
    let namespace = client
        .post(format!("{base}/v1/namespaces"))
        .bearer_auth(KEY)
        .json(&json!({ "namespace": ["db"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(namespace.status(), 200);
    let table = client
        .post(format!("{base}/v1/namespaces/db/tables"))
        .bearer_auth(KEY)
        .json(&json!({
            "name": "t",
            "schema": { "type": "struct", "schema-id": 0,
                        "fields": [{ "id": 1, "name": "id", "type": "long", "required": false }] }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(table.status(), 200);
}

async fn load(icecache: &Icecache, if_none_match: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}/v1/namespaces/db/tables/t", icecache.url))
        .bearer_auth(KEY);
    if let Some(tag) = if_none_match {
        request = request.header("if-none-match", tag);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn revalidation_against_an_etag_catalog_is_an_upstream_304_without_a_body() {
    let Some(rustberg) = rustberg("revalidation_against_an_etag_catalog").await else {
        return;
    };
    create_table(&rustberg.url).await;
    let relay = Relay::start(&rustberg.url).await;
    let icecache = Icecache::start(&relay.url, &["--fresh-for", "300ms"]).await;
    let first = load(&icecache, None).await;
    assert_eq!(first.headers()["x-cache"], "MISS");
    let ours = first.headers()["etag"].to_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = load(&icecache, Some(&ours)).await;
    assert_eq!(
        second.status(),
        304,
        "the client still gets icecache's local 304"
    );
    assert_eq!(second.headers()["x-cache"], "REVALIDATED");

    let loads: Vec<_> = relay
        .seen()
        .into_iter()
        .filter(|s| s.method == "GET" && s.path_and_query.ends_with("/tables/t"))
        .collect();
    assert_eq!(loads.len(), 2);
    assert!(loads[0].headers.get("if-none-match").is_none());
    let sent = loads[1].headers["if-none-match"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(sent, ours, "icecache's own ETag never goes upstream");
    assert_eq!(relay.statuses().last(), Some(&304));
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "icecache_cache_revalidations_total{result=\"not_modified\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn clients_see_icecaches_etag_never_the_catalogs() {
    let Some(rustberg) = rustberg("clients_see_icecaches_etag").await else {
        return;
    };
    create_table(&rustberg.url).await;
    let direct = reqwest::Client::new()
        .get(format!("{}/v1/namespaces/db/tables/t", rustberg.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let theirs = direct.headers()["etag"].to_str().unwrap().to_owned();
    let icecache = Icecache::start(&rustberg.url, &[]).await;
    let through = load(&icecache, None).await;
    let ours = through.headers()["etag"].to_str().unwrap().to_owned();
    assert_ne!(ours, theirs);
    assert_eq!(load(&icecache, Some(&theirs)).await.status(), 200);
    assert_eq!(load(&icecache, Some(&ours)).await.status(), 304);
}

#[tokio::test]
async fn a_commit_through_icecache_is_seen_at_once_even_with_a_long_fresh_for() {
    let Some(rustberg) = rustberg("a_commit_through_icecache").await else {
        return;
    };
    create_table(&rustberg.url).await;
    let icecache = Icecache::start(&rustberg.url, &["--fresh-for", "1h"]).await;
    let before = load(&icecache, None).await;
    let before_tag = before.headers()["etag"].to_str().unwrap().to_owned();
    let committed = reqwest::Client::new()
        .post(format!("{}/v1/namespaces/db/tables/t", icecache.url))
        .bearer_auth(KEY)
        .json(&json!({
            "requirements": [],
            "updates": [{ "action": "set-properties", "updates": { "owner": "ada" } }]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 200);
    let after = load(&icecache, Some(&before_tag)).await;
    assert_eq!(after.status(), 200);
    let body: serde_json::Value = after.json().await.unwrap();
    assert_eq!(body["metadata"]["properties"]["owner"], "ada");
}
