//! Clients that misbehave get a clear answer or a closed connection, never a panic, and never
//! hold icecache's resources for long.

use std::time::{Duration, Instant};

use crate::support::relay::Relay;
use crate::support::{catalog, h2_connection, Icecache};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn address(icecache: &Icecache) -> String {
    icecache.url.trim_start_matches("http://").to_owned()
}

async fn healthy(icecache: &Icecache) -> bool {
    reqwest::get(format!("{}/healthz", icecache.admin))
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Reads until the peer closes (or `limit` passes); returns what arrived and when it closed.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < limit {
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (received, Some(started.elapsed())),
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => {}
        }
    }
    (received, None)
}

#[tokio::test]
async fn a_slowloris_client_is_dropped_after_the_header_read_timeout() {
    let icecache = Icecache::start(&catalog(), &["--header-read-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    stream
        .write_all(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One byte of a header every 100 ms, for up to a minute: never a whole head. Only the
    // header read timeout can end it (the connection is never idle).
    let mut closed = false;
    for i in 0..600 {
        if stream.write_all(&[b'a' + (i % 26) as u8]).await.is_err() {
            closed = true;
            break;
        }
        let mut buffer = [0u8; 1024];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await
        {
            if n == 0 || String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 408") {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "the dribbling client was never dropped");
    assert!(healthy(&icecache).await);
}

/// Reads one whole answer to `GET /v1/config` (its head and `Content-Length` bytes of body) from
/// a kept-alive connection; the status line.
async fn one_answer(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(crate::support::PATIENCE, stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .expect("the connection reads");
        assert_ne!(n, 0, "closed before a whole answer");
        received.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if received.len() >= end + 4 + length {
                return text.lines().next().unwrap_or_default().to_owned();
            }
        }
    }
}

#[tokio::test]
async fn a_kept_alive_connection_waits_for_its_next_request_longer_than_the_head_read_timeout() {
    // Idle for an hour at most, but a head must be whole within a second of its first byte: a
    // connection waiting between requests is idle, not a slow head.
    let flags = ["--header-read-timeout", "1s", "--idle-timeout", "1h"];
    let icecache = Icecache::start(&catalog(), &flags).await;
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    let request = b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n";
    stream.write_all(request).await.unwrap();
    assert_eq!(one_answer(&mut stream).await, "HTTP/1.1 200 OK");
    // Three head-read timeouts with nothing sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stream.write_all(request).await.unwrap();
    assert_eq!(
        one_answer(&mut stream).await,
        "HTTP/1.1 200 OK",
        "the same connection answers"
    );
}

#[tokio::test]
async fn a_slow_head_on_a_kept_alive_connection_is_cut_after_the_head_read_timeout() {
    let flags = ["--header-read-timeout", "1s", "--idle-timeout", "1h"];
    let icecache = Icecache::start(&catalog(), &flags).await;
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    stream
        .write_all(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(one_answer(&mut stream).await, "HTTP/1.1 200 OK");
    stream
        .write_all(b"GET /v1/config HTTP/1.1\r\n")
        .await
        .unwrap();
    // A byte of a header every 100 ms, never a whole head: only the head-read timeout ends it
    // (the connection is never idle, and its idle timeout is an hour).
    let mut closed = false;
    for i in 0..600 {
        if stream.write_all(&[b'a' + (i % 26) as u8]).await.is_err() {
            closed = true;
            break;
        }
        let mut buffer = [0u8; 1024];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "the dribbling head was never cut");
    assert!(healthy(&icecache).await);
}

/// Sends `bytes` (a whole request and what follows it) in one write, and reads the answer.
async fn pipelined(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.unwrap();
    assert_eq!(one_answer(stream).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn a_head_begun_in_the_read_that_brought_the_request_before_it_is_cut_after_the_head_read_timeout(
) {
    let flags = ["--header-read-timeout", "1s", "--idle-timeout", "1h"];
    let icecache = Icecache::start(&catalog(), &flags).await;
    for next in [&b"GET /v1/con"[..], b"GET /v1/config HTTP/1.1\r\n"] {
        let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
        let bytes = [&b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n"[..], next].concat();
        pipelined(&mut stream, &bytes).await;
        // Only the head-read timeout can end it: the idle timeout is an hour.
        let (_, closed) = read_until_closed(&mut stream, crate::support::PATIENCE).await;
        assert!(
            closed.is_some(),
            "the pipelined head {:?} was never cut",
            String::from_utf8_lossy(next)
        );
    }
    assert!(healthy(&icecache).await);
}

#[tokio::test]
async fn a_head_begun_while_the_request_before_it_is_answered_is_cut_after_the_head_read_timeout() {
    let relay = Relay::start(&catalog()).await;
    let flags = ["--header-read-timeout", "1s", "--idle-timeout", "1h"];
    let icecache = Icecache::start(&relay.url, &flags).await;
    let asked = relay.count("GET", "/v1/config");
    let release = relay.hold_next_get();
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    stream
        .write_all(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The next head begins while the catalog's answer is held.
    for _ in 0..crate::support::PATIENCE.as_millis() / 25 {
        if relay.count("GET", "/v1/config") > asked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stream.write_all(b"GET /v1/con").await.unwrap();
    release.notify_one();
    assert_eq!(one_answer(&mut stream).await, "HTTP/1.1 200 OK");
    // Only the head-read timeout can end it: the idle timeout is an hour.
    let (_, closed) = read_until_closed(&mut stream, crate::support::PATIENCE).await;
    assert!(closed.is_some(), "the head begun mid-answer was never cut");
}

#[tokio::test]
async fn line_breaks_after_a_request_begin_no_head() {
    let flags = ["--header-read-timeout", "1s", "--idle-timeout", "1h"];
    let icecache = Icecache::start(&catalog(), &flags).await;
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    let request = b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n";
    pipelined(&mut stream, &[&request[..], b"\r\n"].concat()).await;
    // Three head-read timeouts with nothing more sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    pipelined(&mut stream, request).await;
}

#[tokio::test]
async fn a_megabyte_of_headers_gets_431() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/config", icecache.url))
        .header("x-padding", "a".repeat(1 << 20))
        .send()
        .await;
    match response {
        Ok(response) => assert_eq!(response.status(), 431),
        // icecache may close the connection while the client is still writing 1 MB.
        Err(e) => assert!(e.is_request() || e.is_connect() || e.is_body(), "{e}"),
    }
    assert!(healthy(&icecache).await);
}

#[tokio::test]
async fn an_absurd_query_string_is_refused_or_passed_on_never_a_crash() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let client = reqwest::Client::new();
    for query in [
        "a".repeat(200 << 10),
        "x=%zz&%%%=&&&&==".to_owned(),
        "snapshots=refs&snapshots=all&snapshots=".to_owned(),
        "referenced-by=%FF%FE,%1F%1F,,".to_owned(),
    ] {
        let response = client
            .get(format!(
                "{}/v1/namespaces/db/tables/t?{query}",
                icecache.url
            ))
            .send()
            .await;
        if let Ok(response) = response {
            assert!(
                response.status().as_u16() < 500,
                "{query:.40}: {}",
                response.status()
            );
        }
    }
    assert!(healthy(&icecache).await);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let mut stream = TcpStream::connect(address(&icecache)).await.unwrap();
    let one = "GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n";
    let last = "GET /v1/no-such-thing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    stream
        .write_all(format!("{one}{one}{last}").as_bytes())
        .await
        .unwrap();
    let (received, closed) = read_until_closed(&mut stream, crate::support::PATIENCE).await;
    assert!(closed.is_some());
    let text = String::from_utf8_lossy(&received);
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(statuses.len(), 3, "{text}");
    assert_eq!(&statuses[..2], ["200", "200"]);
    assert_ne!(statuses[2], "200");
}

#[tokio::test]
async fn an_http2_stream_reset_mid_request_leaves_the_connection_usable() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    relay.set_delay(Duration::from_millis(500));
    // Dropping the request after 50 ms resets its stream.
    let reset = client
        .get(format!("{}/v1/config", icecache.url))
        .timeout(Duration::from_millis(50))
        .send()
        .await;
    assert!(reset.is_err());
    relay.set_delay(Duration::ZERO);
    let next = client
        .get(format!("{}/v1/config", icecache.url))
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 200);
    assert_eq!(next.version(), reqwest::Version::HTTP_2);
}

#[tokio::test]
async fn idle_connections_are_bounded_by_the_limit_and_dropped_by_the_head_timeout() {
    let icecache = Icecache::start(
        &catalog(),
        &[
            "--max-connections",
            "50",
            "--workers",
            "1",
            "--header-read-timeout",
            "1s",
        ],
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(address(&icecache)).await.unwrap());
    }
    // Idle connections never send a head: after the head timeout they are closed, and
    // the next ones are accepted in turn until all are gone.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/config", icecache.url))
        .timeout(crate::support::PATIENCE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let status = std::fs::read_to_string(format!("/proc/{}/status", icecache.pid())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        rss_kib < 64 * 1024,
        "RSS {rss_kib} KiB with 200 idle connections"
    );
    drop(idle);
}

/// Sends `request` on a connection of its own and returns the status and the body text.
async fn raw_exchange(icecache: &Icecache, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address(icecache)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let (received, _) = read_until_closed(&mut stream, crate::support::PATIENCE).await;
    let text = String::from_utf8_lossy(&received).into_owned();
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// RFC 9112 §3.2: two `Host` lines, none on HTTP/1.1, or one that is not `host[:port]` get a
/// 400 in the Iceberg error shape, on every route, and the catalog never hears of them.
#[tokio::test]
async fn a_request_whose_host_is_in_doubt_gets_400_and_never_reaches_the_catalog() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let close = "Connection: close\r\n";
    for (head, says) in [
        (
            "GET /v1/config HTTP/1.1\r\nHost: a\r\nHost: b\r\n",
            "at most one Host",
        ),
        (
            "GET /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: a\r\nHost: a\r\n",
            "at most one Host",
        ),
        (
            "HEAD /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: a\r\nhost: b\r\n",
            "",
        ),
        (
            "GET /v1/namespaces/db/tables/t HTTP/1.1\r\n",
            "must carry a Host",
        ),
        (
            "DELETE /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: user@a\r\n",
            "host with an optional port",
        ),
        (
            "GET /v1/namespaces HTTP/1.1\r\nHost: a b\r\n",
            "host with an optional port",
        ),
        (
            "GET /v1/namespaces HTTP/1.1\r\nHost: a,b\r\n",
            "host with an optional port",
        ),
        (
            "POST /v1/namespaces HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n",
            "at most one Host",
        ),
    ] {
        let body = if head.starts_with("POST") { "{}" } else { "" };
        let (status, text) = raw_exchange(&icecache, &format!("{head}{close}\r\n{body}")).await;
        assert_eq!(status, 400, "{head:?}: {text}");
        if head.starts_with("HEAD") {
            assert!(text.is_empty(), "a HEAD answer has no body: {text:?}");
        } else {
            let error: serde_json::Value =
                serde_json::from_str(&text).expect("an Iceberg error body");
            assert_eq!(error["error"]["type"], "BadRequestException", "{text}");
            assert_eq!(error["error"]["code"], 400, "{text}");
            let message = error["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains(says), "{head:?}: {message}");
        }
    }
    assert!(relay.seen().is_empty(), "{:?}", relay.seen());
    let metrics = reqwest::get(format!("{}/metrics", icecache.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("icecache_requests_total{") && l.contains("status=\"400\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(refused, 8.0, "every refusal is counted");
}

/// HTTP/1.0 may leave `Host` out, and one plain `Host` is served as before.
#[tokio::test]
async fn http_1_0_without_a_host_and_http_1_1_with_one_are_served() {
    let icecache = Icecache::start(&catalog(), &[]).await;
    let (status, text) = raw_exchange(&icecache, "GET /v1/config HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = raw_exchange(
        &icecache,
        "GET /v1/config HTTP/1.1\r\nHost: catalog.example:8181\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

/// Over HTTP/2 the host is `:authority`; a request that also carries two `Host` fields is
/// refused like one over HTTP/1.1, one that carries none is served.
#[tokio::test]
async fn over_http2_two_host_fields_get_400_and_none_is_fine() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    let address = address(&icecache);
    let (mut sender, _connection) = h2_connection(&address).await;
    let url = format!("http://{address}/v1/config");
    let twice = http::Request::get(&url)
        .header("host", "a")
        .header("host", "b")
        .body(http_body_util::Empty::new())
        .unwrap();
    let refused = sender.send_request(twice).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body = http_body_util::BodyExt::collect(refused.into_body())
        .await
        .unwrap()
        .to_bytes();
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["type"], "BadRequestException");
    let refused_ones = [
        // The host is `:authority` here, checked like a `Host` line.
        http::Request::get(format!("http://user@{address}/v1/config")),
        http::Request::get("http://localhost:99999/v1/config"),
        // A `host` field that names another host than `:authority` (RFC 9113 §8.3.1).
        http::Request::get(&url).header("host", "evil.example"),
        // HEAD gets the status and no body (an HTTP/2 answer to HEAD carries no DATA).
        http::Request::head(format!("http://{address}/v1/namespaces/db/tables/t"))
            .header("host", "a")
            .header("host", "b"),
    ];
    for request in refused_ones {
        let request = request.body(http_body_util::Empty::new()).unwrap();
        let head = request.method() == http::Method::HEAD;
        let what = format!("{} {:?}", request.uri(), request.headers());
        let answer = sender.send_request(request).await.unwrap();
        assert_eq!(answer.status(), 400, "{what}");
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .to_bytes();
        if head {
            assert!(body.is_empty(), "{what}: {body:?}");
        } else {
            let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(error["error"]["type"], "BadRequestException", "{what}");
        }
    }
    assert!(relay.seen().is_empty(), "{:?}", relay.seen());
    let plain = http::Request::get(&url)
        .body(http_body_util::Empty::new())
        .unwrap();
    assert_eq!(sender.send_request(plain).await.unwrap().status(), 200);
    let same = http::Request::get(&url)
        .header("host", address.to_uppercase())
        .body(http_body_util::Empty::new())
        .unwrap();
    assert_eq!(sender.send_request(same).await.unwrap().status(), 200);
}

/// A target that names a host other than `Host`, or carries user information, is refused like
/// a bad `Host`; CONNECT opens no tunnel (405) and reaches no catalog.
#[tokio::test]
async fn absolute_form_targets_are_checked_and_connect_is_refused() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    for (request, status, says) in [
        (
            "GET http://u:p@other/v1/config HTTP/1.0\r\n\r\n",
            400,
            "request target",
        ),
        (
            "GET http://other:abc/v1/config HTTP/1.0\r\n\r\n",
            400,
            "request target",
        ),
        (
            "GET http://other/v1/config HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            400,
            "different hosts",
        ),
        (
            "CONNECT other:443 HTTP/1.1\r\nHost: other:443\r\nConnection: close\r\n\r\n",
            405,
            "tunnels",
        ),
        (
            "connect other:443 HTTP/1.1\r\nHost: other:443\r\nConnection: close\r\n\r\n",
            405,
            "tunnels",
        ),
        // An HTTP client would send these on as `GET /`, `POST /` and `GET *`.
        (
            "GET a:80 HTTP/1.1\r\nHost: a:80\r\nConnection: close\r\n\r\n",
            400,
            "authority form",
        ),
        (
            "POST a:80 HTTP/1.1\r\nHost: a:80\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            400,
            "authority form",
        ),
        (
            "GET * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            400,
            "OPTIONS alone",
        ),
        (
            "GET ftp://a/v1/config HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            400,
            "http or https",
        ),
    ] {
        let (got, text) = raw_exchange(&icecache, request).await;
        assert_eq!(got, status, "{request:?}: {text}");
        let error: serde_json::Value = serde_json::from_str(&text).expect("an Iceberg error body");
        let message = error["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{request:?}: {message}");
    }
    assert!(relay.seen().is_empty(), "{:?}", relay.seen());
    let (got, text) = raw_exchange(
        &icecache,
        "GET http://other/v1/config HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(got, 200, "{text}");
}

/// RFC 9112 §6.1: a body coded with anything but `chunked` (which hyper undoes) would reach
/// the catalog still coded, and icecache would read a write's names from coded bytes.
#[tokio::test]
async fn a_body_coded_otherwise_than_chunked_gets_501_and_never_reaches_the_catalog() {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &[]).await;
    for coding in [
        "gzip, chunked",
        "deflate,chunked",
        "x-custom, chunked",
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ] {
        let request = format!(
            "POST /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {coding}\r\n\
             Connection: close\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
        );
        let (status, text) = raw_exchange(&icecache, &request).await;
        assert_eq!(status, 501, "{coding}: {text}");
        let error: serde_json::Value = serde_json::from_str(&text).expect("an Iceberg error body");
        let message = error["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("chunked"), "{coding}: {message}");
    }
    assert!(relay.seen().is_empty(), "{:?}", relay.seen());
    let chunked = "POST /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: a\r\n\
                   Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    let (status, text) = raw_exchange(&icecache, chunked).await;
    assert_ne!(status, 501, "a body chunked alone is read: {text}");
    assert_eq!(relay.seen().len(), 1, "and sent on");
}
