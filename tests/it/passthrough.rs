//! The whole Iceberg REST API passes through icecache to a real catalog (SeaweedFS) unchanged.

use std::time::Duration;

use crate::support::relay::Relay;
use crate::support::{
    catalog, eventually, get_json, ports, pyiceberg_async, unique, Api, Icecache,
};
use serde_json::{json, Value};

async fn proxy() -> (Icecache, Api) {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let api = Api::new(&icecache.url).await;
    (icecache, api)
}

fn assert_iceberg_error(body: &Value, code: u16) {
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(
        error["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn config_is_the_catalogs() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let through = get_json(&format!("{}/v1/config", icecache.url)).await;
    let direct = get_json(&format!("{}/v1/config", catalog())).await;
    assert_eq!(through, direct);
}

#[tokio::test]
async fn namespaces_are_created_listed_loaded_and_dropped() {
    let (_icecache, api) = proxy().await;
    let namespace = unique("ns_life");
    api.create_namespace(&namespace).await;

    let listed: Value = api.get_json("/namespaces").await;
    assert!(listed["namespaces"]
        .as_array()
        .unwrap()
        .contains(&json!([namespace])));

    let loaded = api
        .get(&format!("/namespaces/{namespace}"))
        .send()
        .await
        .unwrap();
    assert_eq!(loaded.status(), 200);
    let loaded: Value = loaded.json().await.unwrap();
    assert_eq!(loaded["namespace"], json!([namespace]));

    let exists = api
        .send(
            reqwest::Method::HEAD,
            &format!("{}/namespaces/{namespace}", api.base),
        )
        .await;
    assert_eq!(exists.status(), 204);

    let dropped = api
        .send(
            reqwest::Method::DELETE,
            &format!("{}/namespaces/{namespace}", api.base),
        )
        .await;
    assert_eq!(dropped.status(), 204);
    let gone = api
        .get(&format!("/namespaces/{namespace}"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

#[tokio::test]
async fn a_created_table_loads_with_the_catalogs_metadata() {
    let (_icecache, api) = proxy().await;
    let namespace = unique("ns_create");
    api.create_namespace(&namespace).await;
    let created = api.create_table(&namespace, "events").await;

    let through = api
        .get(&format!("/namespaces/{namespace}/tables/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(through.status(), 200);
    let through: Value = through.json().await.unwrap();
    let direct_api = Api::new(&catalog()).await;
    let direct = direct_api
        .get_json(&format!("/namespaces/{namespace}/tables/events"))
        .await;
    assert_eq!(through, direct);
    assert_eq!(
        through["metadata"]["table-uuid"],
        created["metadata"]["table-uuid"]
    );
}

#[tokio::test]
async fn pyiceberg_appends_through_icecache_and_reads_the_rows_back() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let namespace = unique("ns_py");
    let appended = pyiceberg_async(&icecache.url, &["append", &namespace, "rows", "7"]).await;
    let scanned = pyiceberg_async(&icecache.url, &["scan", &namespace, "rows"]).await;
    assert_eq!(scanned["rows"], 7);
    assert_eq!(scanned["ids"], json!([0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(scanned["snapshot"], appended["snapshot"]);
}

#[tokio::test]
async fn rename_moves_the_table() {
    let (_icecache, api) = proxy().await;
    let (namespace, table) = api.fresh_table("ns_rename").await;
    let renamed = api
        .post(
            "/tables/rename",
            json!({
                "source": { "namespace": [namespace], "name": table },
                "destination": { "namespace": [namespace], "name": "renamed" }
            }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 204);
    let old = api
        .get(&format!("/namespaces/{namespace}/tables/{table}"))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 404);
    let new = api
        .get(&format!("/namespaces/{namespace}/tables/renamed"))
        .send()
        .await
        .unwrap();
    assert_eq!(new.status(), 200);
}

#[tokio::test]
async fn drop_removes_the_table_and_head_reports_it() {
    let (_icecache, api) = proxy().await;
    let (namespace, table) = api.fresh_table("ns_drop").await;
    let url = format!("{}/namespaces/{namespace}/tables/{table}", api.base);
    use reqwest::Method;
    assert_eq!(api.send(Method::HEAD, &url).await.status(), 204);
    assert_eq!(api.send(Method::DELETE, &url).await.status(), 204);
    assert_eq!(api.send(Method::HEAD, &url).await.status(), 404);
    assert_eq!(api.send(Method::GET, &url).await.status(), 404);
}

#[tokio::test]
async fn an_unknown_path_gets_the_catalogs_answer() {
    let (_icecache, api) = proxy().await;
    let through = api.get("/no-such-endpoint?x=1").send().await.unwrap();
    let direct_api = Api::new(&catalog()).await;
    let direct = direct_api
        .get("/no-such-endpoint?x=1")
        .send()
        .await
        .unwrap();
    assert_eq!(through.status(), direct.status());
    assert_eq!(through.text().await.unwrap(), direct.text().await.unwrap());
}

#[tokio::test]
async fn the_catalog_sees_forwarded_headers_and_the_query_string() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let api = Api::new(&icecache.url).await;
    api.get("/namespaces?pageSize=5").send().await.unwrap();
    let seen = relay.seen();
    let list = seen
        .iter()
        .find(|s| s.path_and_query == "/v1/warehouse/namespaces?pageSize=5")
        .expect("the list request reached the catalog with its query");
    let host = icecache.url.trim_start_matches("http://");
    assert_eq!(list.headers["x-forwarded-host"], host);
    assert_eq!(list.headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(list.headers["x-forwarded-proto"], "http");
    assert!(list.headers.get("authorization").is_some());
}

#[tokio::test]
async fn a_forwarded_body_reaches_the_catalog_with_its_length_not_chunked() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let api = Api::new(&icecache.url).await;
    let namespace = unique("len");
    let report = json!({ "report-type": "scan-report" });
    let length = serde_json::to_vec(&report).unwrap().len().to_string();
    // reportMetrics is relayed as it comes; dropNamespace is a write, sent without a body.
    api.post(&format!("/namespaces/{namespace}/tables/t/metrics"), report)
        .send()
        .await
        .unwrap();
    let drop_url = format!("{}/namespaces/{namespace}", api.base);
    api.send(reqwest::Method::DELETE, &drop_url).await;
    let seen = relay.seen();
    let metrics = seen
        .iter()
        .find(|s| s.method == "POST" && s.path_and_query.ends_with("/tables/t/metrics"))
        .expect("the report reached the catalog");
    assert_eq!(metrics.headers["content-length"], length.as_str());
    assert!(metrics.headers.get("transfer-encoding").is_none());
    let drop = seen
        .iter()
        .find(|s| s.method == "DELETE")
        .expect("the drop reached the catalog");
    assert!(
        drop.headers.get("transfer-encoding").is_none(),
        "{:?}",
        drop.headers
    );
    assert!(drop
        .headers
        .get("content-length")
        .is_none_or(|length| length == "0"));
}

#[tokio::test]
async fn forwarded_for_chains_and_http2_cookie_fields_reach_the_catalog_each_as_one_line() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    h2.get(format!(
        "{}/v1/warehouse/namespaces?pageSize=7",
        icecache.url
    ))
    .header("cookie", "a=1")
    .header("cookie", "b=2")
    .header("x-forwarded-for", "10.0.0.1")
    .header("x-forwarded-for", "10.0.0.2")
    .header("proxy-connection", "keep-alive")
    .send()
    .await
    .unwrap();
    let seen = relay.seen();
    let list = seen
        .iter()
        .find(|s| s.path_and_query.ends_with("pageSize=7"))
        .expect("the list reached the catalog");
    let cookies: Vec<_> = list.headers.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1; b=2"]);
    assert_eq!(
        list.headers["x-forwarded-for"],
        "10.0.0.1, 10.0.0.2, 127.0.0.1"
    );
    assert!(list.headers.get("proxy-connection").is_none());
}

#[tokio::test]
async fn a_caller_with_the_same_cookies_over_http2_and_http1_has_one_entry() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let api = Api::new(&icecache.url).await;
    let (namespace, table) = api.fresh_table("cookie").await;
    let url = format!("{}/namespaces/{namespace}/tables/{table}", api.base);
    let h1 = api
        .http
        .get(&url)
        .bearer_auth(&api.token)
        .header("cookie", "a=1; b=2")
        .send()
        .await
        .unwrap();
    assert_eq!(crate::support::x_cache(&h1), "MISS");
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let split = h2
        .get(&url)
        .bearer_auth(&api.token)
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .send()
        .await
        .unwrap();
    assert_eq!(crate::support::x_cache(&split), "HIT");
    let other = h2
        .get(&url)
        .bearer_auth(&api.token)
        .header("cookie", "a=1")
        .header("cookie", "b=3")
        .send()
        .await
        .unwrap();
    assert_eq!(
        crate::support::x_cache(&other),
        "MISS",
        "other cookies, another caller"
    );
}

#[tokio::test]
async fn an_upstream_base_path_is_kept() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&format!("{}/iceberg", relay.url), &[]).await;
    let _ = reqwest::get(format!("{}/v1/config", icecache.url))
        .await
        .unwrap();
    assert_eq!(relay.count("GET", "/iceberg/v1/config"), 1);
}

/// A namespace-create body just under SeaweedFS's 10 MB request limit.
fn big_namespace_body(namespace: &str) -> (Vec<u8>, Vec<u8>) {
    let head = format!("{{\"namespace\":[\"{namespace}\"],\"properties\":{{\"big\":\"");
    let filler = vec![b'a'; 9 << 20];
    (head.into_bytes(), [filler, b"\"}}".to_vec()].concat())
}

#[tokio::test]
async fn a_large_request_body_reaches_the_catalog_while_the_client_still_sends_it() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let api = Api::new(&icecache.url).await;
    let namespace = unique("ns_stream_req");
    let (head, rest) = big_namespace_body(&namespace);
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let request = api
        .http
        .post(format!("{}/namespaces", api.base))
        .bearer_auth(&api.token)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(rx))
        .send();
    let request = tokio::spawn(request);
    let mut tx = tx;
    use futures::SinkExt;
    tx.send(Ok(head)).await.unwrap();
    // Only the first piece is sent: a proxy that buffered bodies would forward nothing yet.
    let mut waited = 0;
    while relay.request_body_bytes() == 0 {
        assert!(
            waited < 500,
            "no byte reached the catalog before the body was complete"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    for chunk in rest.chunks(1 << 20) {
        tx.send(Ok(chunk.to_vec())).await.unwrap();
    }
    drop(tx);
    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let total = big_namespace_body(&namespace);
    assert_eq!(
        relay.request_body_bytes(),
        (total.0.len() + total.1.len()) as u64
    );
}

#[tokio::test]
async fn a_large_response_body_reaches_the_client_while_the_catalog_still_sends_it() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let api = Api::new(&icecache.url).await;
    let namespace = unique("ns_stream_resp");
    let (head, rest) = big_namespace_body(&namespace);
    let created = api
        .http
        .post(format!("{}/namespaces", api.base))
        .bearer_auth(&api.token)
        .body([head, rest].concat())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);

    let release = relay.hold_responses();
    let mut response = api
        .get(&format!("/namespaces/{namespace}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The catalog has sent one frame and is holding the rest back.
    let first = tokio::time::timeout(crate::support::PATIENCE, response.chunk())
        .await
        .expect("the first bytes arrive while the catalog holds the rest")
        .unwrap()
        .expect("a first chunk");
    release.notify_one();
    let mut received = first.len();
    while let Some(chunk) = response.chunk().await.unwrap() {
        received += chunk.len();
        release.notify_one();
    }
    assert!(received > 9 << 20, "received {received} bytes");
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_iceberg_error() {
    let icecache = Icecache::start(&ports::nothing_listens(), &[]).await;
    let response = reqwest::get(format!("{}/v1/config", icecache.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_iceberg_error(&response.json().await.unwrap(), 502);
}

#[tokio::test]
async fn a_slow_upstream_is_a_504_iceberg_error() {
    let relay = Relay::start(&catalog()).await;
    relay.set_delay(Duration::from_secs(3));
    let icecache = Icecache::start(&relay.url, &["--request-timeout", "300ms"]).await;
    // The relay answers after three seconds: only icecache's own timeout makes it a 504.
    let response = reqwest::get(format!("{}/v1/config", icecache.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    assert_iceberg_error(&response.json().await.unwrap(), 504);
}

#[tokio::test]
async fn bad_percent_encoding_is_a_400_iceberg_error() {
    let (_icecache, api) = proxy().await;
    for path in [
        "/namespaces/db/tables/bad%zz",
        "/namespaces/db/tables/%FF%FE",
    ] {
        let response = api.get(path).send().await.unwrap();
        assert_eq!(response.status(), 400, "{path}");
        assert_iceberg_error(&response.json().await.unwrap(), 400);
    }
}

#[tokio::test]
async fn an_oversized_request_head_is_refused_with_431() {
    let (icecache, api) = proxy().await;
    let response = api
        .http
        .get(format!("{}/v1/config", icecache.url))
        .header("x-padding", "a".repeat(100 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 431);
}

#[tokio::test]
async fn http2_prior_knowledge_clients_are_served() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .get(format!("{}/v1/config", icecache.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn readiness_follows_the_upstream() {
    let up = Icecache::start(&catalog(), &[]).await;
    let ready = reqwest::get(format!("{}/readyz", up.admin)).await.unwrap();
    assert_eq!(ready.status(), 200);
    let down = Icecache::start(&ports::nothing_listens(), &[]).await;
    let ready = reqwest::get(format!("{}/readyz", down.admin))
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let healthy = reqwest::get(format!("{}/healthz", down.admin))
        .await
        .unwrap();
    assert_eq!(healthy.status(), 200);
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let relay = Relay::start(&catalog()).await;
    relay.set_delay(Duration::from_millis(800));
    let mut icecache = Icecache::start(&relay.url, &[]).await;
    let url = format!("{}/v1/config", icecache.url);
    let asked = relay.count("GET", "/v1/config");
    let in_flight = tokio::spawn(async move { reqwest::get(url).await });
    eventually("the request in flight", || async {
        relay.count("GET", "/v1/config") > asked
    })
    .await;
    let status = tokio::task::spawn_blocking(move || {
        let status = icecache.terminate();
        (status, icecache)
    })
    .await
    .unwrap();
    let response = in_flight
        .await
        .unwrap()
        .expect("the in-flight request got its answer");
    assert_eq!(response.status(), 200);
    assert!(status.0.success(), "exit status {:?}", status.0);
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_pass_promtool() {
    let (icecache, api) = proxy().await;
    let (namespace, table) = api.fresh_table("ns_metrics").await;
    api.get(&format!("/namespaces/{namespace}/tables/{table}"))
        .send()
        .await
        .unwrap();
    let text = icecache.metrics().await;
    assert_eq!(
        crate::support::metric(
            &text,
            "icecache_requests_total{cache=\"NONE\",route=\"create_table\",status=\"200\"}"
        ),
        1.0
    );
    assert!(text.contains("icecache_request_duration_seconds_bucket{route=\"load_table\""));
    assert!(text.contains("icecache_upstream_request_duration_seconds_bucket"));
    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed by scripts/test.sh");
    use std::io::Write;
    promtool
        .stdin
        .as_ref()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = promtool.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn a_second_icecache_on_a_taken_port_refuses_to_start() {
    let first = Icecache::start(&catalog(), &[]).await;
    let taken = first.url.trim_start_matches("http://");
    let output = tokio::task::spawn_blocking({
        let taken = taken.to_owned();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_icecache"))
                .args(["--upstream", "http://127.0.0.1:1", "--listen", &taken])
                .args(["--admin-listen", "127.0.0.1:0"])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot listen"));
}
