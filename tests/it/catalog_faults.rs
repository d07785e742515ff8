//! Faults no real catalog can be made to show on demand: a catalog that hangs, stalls inside a
//! body, cuts a body short, lies about its length, answers non-JSON, 503 or throttles (429, AWS
//! Glue's 400), or dies in the middle of a commit. A small raw-TCP fake plays each, then behaves again; every test checks
//! that the client gets a clear answer, nothing half-written is cached, and icecache recovers.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{metric, Icecache};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    Good,
    Hang,
    StallBody,
    Truncate,
    NotJson,
    Unavailable,
    DieBeforeAnswer,
    Huge,
    /// 429 with `Retry-After: 3` and a body in no Iceberg shape.
    TooMany,
    /// AWS Glue's throttle: a 400 whose `x-amzn-errortype` names it, in Glue's own words.
    GlueThrottle,
}

struct BadCatalog {
    url: String,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BadCatalog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const TABLE: &str = r#"{"metadata-location":"s3://b/db/t/metadata/v1.json","metadata":{"format-version":2,"table-uuid":"6b1b3c3e-0000-4000-8000-000000000001","properties":{}},"config":{}}"#;

impl BadCatalog {
    async fn start() -> BadCatalog {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mode = Arc::new(AtomicU8::new(Mode::Good as u8));
        let requests = Arc::new(AtomicU64::new(0));
        let (m, r) = (mode.clone(), requests.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let (m, r) = (m.clone(), r.clone());
                tokio::spawn(async move { serve(socket, m, r).await });
            }
        });
        BadCatalog {
            url,
            mode,
            requests,
            task,
        }
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn serve(mut socket: tokio::net::TcpStream, mode: Arc<AtomicU8>, requests: Arc<AtomicU64>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = socket.read_exact(&mut body).await;
    requests.fetch_add(1, Ordering::SeqCst);
    let mode = mode.load(Ordering::SeqCst);
    let respond = |status: &str, extra: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n{extra}\r\n{body}",
            body.len()
        )
    };
    let out = match mode {
        m if m == Mode::Good as u8 => respond("200 OK", "", TABLE),
        m if m == Mode::Hang as u8 => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            return;
        }
        m if m == Mode::StallBody as u8 => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                TABLE.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&TABLE.as_bytes()[..20]).await;
            tokio::time::sleep(Duration::from_secs(30)).await;
            return;
        }
        m if m == Mode::Truncate as u8 => {
            // Claims the whole table, sends a third of it, and closes: a lying Content-Length.
            let full = respond("200 OK", "", TABLE);
            full[..full.len() - TABLE.len() * 2 / 3].to_owned()
        }
        m if m == Mode::NotJson as u8 => respond("200 OK", "", "<html>oops</html>"),
        m if m == Mode::Unavailable as u8 => respond(
            "503 Service Unavailable",
            "retry-after: 7\r\n",
            r#"{"error":{"message":"busy","type":"ServiceUnavailableException","code":503}}"#,
        ),
        m if m == Mode::DieBeforeAnswer as u8 => return,
        m if m == Mode::TooMany as u8 => respond(
            "429 Too Many Requests",
            "retry-after: 3\r\n",
            "slow down",
        ),
        m if m == Mode::GlueThrottle as u8 => respond(
            "400 Bad Request",
            "x-amzn-errortype: ThrottlingException:http://internal.amazon.com/coral/com.amazonaws.glue/\r\n",
            r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#,
        ),
        _ => {
            let big = format!(
                r#"{{"metadata":{{"format-version":2,"table-uuid":"u","pad":"{}"}},"config":{{}}}}"#,
                "x".repeat(20 << 20)
            );
            respond("200 OK", "", &big)
        }
    };
    let _ = socket.write_all(out.as_bytes()).await;
    let _ = socket.shutdown().await;
}

const LOAD: &str = "/v1/namespaces/db/tables/t";

async fn setup(flags: &[&str]) -> (BadCatalog, Icecache) {
    let catalog = BadCatalog::start().await;
    let mut all = vec!["--request-timeout", "500ms"];
    all.extend_from_slice(flags);
    let icecache = Icecache::start(&catalog.url, &all).await;
    (catalog, icecache)
}

async fn load(icecache: &Icecache) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{LOAD}", icecache.url))
        .timeout(crate::support::PATIENCE)
        .send()
        .await
        .expect("icecache answers")
}

async fn assert_iceberg_error(response: reqwest::Response, status: u16) {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.expect("an Iceberg error body");
    assert_eq!(body["error"]["code"], status);
}

/// `icecache_upstream_errors_total` of one kind.
async fn upstream_errors(icecache: &Icecache, kind: &str) -> f64 {
    let text = icecache.metrics().await;
    metric(
        &text,
        &format!("icecache_upstream_errors_total{{kind=\"{kind}\"}}"),
    )
}

/// After the fault, the catalog behaves again: the next load is a fresh fill, then a hit.
async fn assert_recovers_without_leftovers(catalog: &BadCatalog, icecache: &Icecache) {
    catalog.set(Mode::Good);
    let after = load(icecache).await;
    assert_eq!(after.status(), 200);
    assert_eq!(
        after.headers()["x-cache"],
        "MISS",
        "nothing from the fault was cached"
    );
    assert_eq!(load(icecache).await.headers()["x-cache"], "HIT");
}

#[tokio::test]
async fn a_catalog_that_never_answers_is_a_504_and_nothing_is_cached() {
    let (catalog, icecache) = setup(&[]).await;
    catalog.set(Mode::Hang);
    let response = load(&icecache).await;
    // A fetch that got no answer was still this request's own: a miss.
    assert_eq!(response.headers()["x-cache"], "MISS");
    assert_iceberg_error(response, 504).await;
    assert_eq!(upstream_errors(&icecache, "timeout").await, 1.0);
    assert_recovers_without_leftovers(&catalog, &icecache).await;
}

#[tokio::test]
async fn a_body_that_stalls_during_a_fill_is_a_504_and_nothing_is_cached() {
    let (catalog, icecache) = setup(&[]).await;
    catalog.set(Mode::StallBody);
    assert_iceberg_error(load(&icecache).await, 504).await;
    assert_eq!(upstream_errors(&icecache, "timeout").await, 1.0);
    assert_recovers_without_leftovers(&catalog, &icecache).await;
}

#[tokio::test]
async fn a_body_that_stalls_on_a_streamed_route_is_cut_rather_than_held_open() {
    let (catalog, icecache) = setup(&[]).await;
    catalog.set(Mode::StallBody);
    // No client timeout: only icecache can end the body. A minute is a guard against a hang,
    // not a measure (icecache's request timeout here is half a second).
    let response = reqwest::Client::new()
        .get(format!("{}/v1/namespaces", icecache.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the head was the catalog's");
    let body = tokio::time::timeout(crate::support::PATIENCE, response.bytes())
        .await
        .expect("icecache never cut the stalled body");
    assert!(body.is_err(), "the stalled body is cut, not completed");
}

#[tokio::test]
async fn a_body_cut_short_with_a_lying_length_is_a_502_and_nothing_is_cached() {
    let (catalog, icecache) = setup(&[]).await;
    catalog.set(Mode::Truncate);
    assert_iceberg_error(load(&icecache).await, 502).await;
    assert_eq!(upstream_errors(&icecache, "protocol").await, 1.0);
    assert_eq!(upstream_errors(&icecache, "timeout").await, 0.0);
    assert_recovers_without_leftovers(&catalog, &icecache).await;
}

#[tokio::test]
async fn a_non_json_answer_is_passed_on_as_is_and_never_cached() {
    let (catalog, icecache) = setup(&[]).await;
    catalog.set(Mode::NotJson);
    for _ in 0..2 {
        let response = load(&icecache).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), "<html>oops</html>");
    }
    assert_eq!(catalog.requests(), 2);
    assert_recovers_without_leftovers(&catalog, &icecache).await;
}

#[tokio::test]
async fn a_503_with_retry_after_reaches_the_client_unless_a_stale_entry_may_answer() {
    let (catalog, icecache) = setup(&["--fresh-for", "100ms", "--stale-if-error", "1h"]).await;
    catalog.set(Mode::Unavailable);
    let refused = load(&icecache).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "7");
    // The catalog's own error answer is relayed, never stored: a bypass.
    assert_eq!(refused.headers()["x-cache"], "BYPASS");
    assert_eq!(refused.headers()["cache-status"], "icecache; fwd=bypass");
    catalog.set(Mode::Good);
    load(&icecache).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    catalog.set(Mode::Unavailable);
    let stale = load(&icecache).await;
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.headers()["x-cache"], "STALE");
}

#[tokio::test]
async fn a_body_over_max_entry_bytes_streams_through_whole_and_uncached() {
    let (catalog, icecache) = setup(&["--cache-max-entry-bytes", "1MiB"]).await;
    catalog.set(Mode::Huge);
    for _ in 0..2 {
        let response = load(&icecache).await;
        assert_eq!(response.headers()["x-cache"], "BYPASS");
        let body = response.bytes().await.unwrap();
        assert!(body.len() > 20 << 20);
        serde_json::from_slice::<Value>(&body).expect("the whole body, intact");
    }
    let metrics = icecache.metrics().await;
    assert_eq!(metric(&metrics, "icecache_cache_entries"), 0.0);
}

#[tokio::test]
async fn a_catalog_that_dies_mid_commit_gets_a_502_and_the_table_is_invalidated() {
    let (catalog, icecache) = setup(&["--fresh-for", "1h"]).await;
    load(&icecache).await;
    assert_eq!(load(&icecache).await.headers()["x-cache"], "HIT");
    catalog.set(Mode::DieBeforeAnswer);
    let commit = reqwest::Client::new()
        .post(format!("{}{LOAD}", icecache.url))
        .json(&serde_json::json!({ "requirements": [], "updates": [] }))
        .send()
        .await
        .unwrap();
    assert_iceberg_error(commit, 502).await;
    catalog.set(Mode::Good);
    assert_eq!(
        load(&icecache).await.headers()["x-cache"],
        "MISS",
        "a commit whose outcome is unknown must not leave the old table cached"
    );
}

/// A throttling catalog, whichever way it says so, gives the client a 429 with `Retry-After` and
/// an Iceberg error (never Glue's own words), on loads, existence checks and writes alike.
#[tokio::test]
async fn a_throttling_catalog_is_a_429_with_retry_after_for_every_request() {
    let (catalog, icecache) = setup(&[]).await;
    let client = reqwest::Client::new();
    let url = format!("{}{LOAD}", icecache.url);
    for (mode, wait) in [(Mode::TooMany, "3"), (Mode::GlueThrottle, "1")] {
        catalog.set(mode);
        for request in [client.get(&url), client.post(&url).body("{}")] {
            let answer = request.send().await.unwrap();
            assert_eq!(answer.headers()["retry-after"], wait);
            let body: Value = answer.json().await.unwrap();
            assert_eq!(body["error"]["code"], 429, "{body}");
            assert_eq!(body["error"]["type"], "TooManyRequestsException");
            assert!(!body.to_string().contains("Rate exceeded"), "{body}");
        }
        let exists = client.head(&url).send().await.unwrap();
        assert_eq!(exists.status(), 429);
        assert_eq!(exists.headers()["retry-after"], wait);
    }
    assert_eq!(upstream_errors(&icecache, "throttled").await, 6.0);
    assert_recovers_without_leftovers(&catalog, &icecache).await;
}

#[tokio::test]
async fn a_throttled_load_is_served_stale_within_stale_if_error() {
    let (catalog, icecache) = setup(&["--fresh-for", "100ms", "--stale-if-error", "1h"]).await;
    assert_eq!(load(&icecache).await.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for mode in [Mode::TooMany, Mode::GlueThrottle] {
        catalog.set(mode);
        let stale = load(&icecache).await;
        assert_eq!(stale.status(), 200);
        assert_eq!(stale.headers()["x-cache"], "STALE");
    }
}

/// A write whose outcome icecache cannot know (the catalog died before answering, answered 503,
/// or throttled) is answered with the failure and never sent again: only the client may retry,
/// with its own `Idempotency-Key`.
#[tokio::test]
async fn a_write_the_catalog_fails_reaches_it_once_and_is_never_sent_again() {
    let (catalog, icecache) = setup(&[]).await;
    let client = reqwest::Client::new();
    for (mode, status) in [
        (Mode::DieBeforeAnswer, 502),
        (Mode::Unavailable, 503),
        (Mode::TooMany, 429),
    ] {
        catalog.set(mode);
        let before = catalog.requests();
        let commit = client
            .post(format!("{}{LOAD}", icecache.url))
            .header("idempotency-key", "01937f4e-1c2b-7a3d-9e4f-5a6b7c8d9e0f")
            .json(&serde_json::json!({ "requirements": [], "updates": [] }))
            .send()
            .await
            .unwrap();
        assert_eq!(commit.status(), status);
        assert_eq!(catalog.requests() - before, 1, "sent once, never retried");
    }
}
