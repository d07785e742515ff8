//! A connection's life: a request is in flight until the last of its answer is written,
//! however slowly the client reads; a connection is idle only when nothing moves on it; a
//! request whose client goes away is still counted and logged, once; a connection that can
//! never speak frees its slot at once.

use std::time::{Duration, Instant};

use crate::support::standin::{Shape, StandIn};
use crate::support::{
    eventually, h2_connection, h2_handshake, metric, small_buffer_connection, H2Client, Icecache,
    PATIENCE,
};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn get(address: &str, table: &str, extra: &str) -> String {
    format!(
        "GET /v1/namespaces/db/tables/{table} HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer alice\r\n{extra}\r\n"
    )
}

/// A stand-in catalog answering in `shape`, with `tables` created.
async fn catalog(shape: Shape, tables: &[&str]) -> StandIn {
    let catalog = StandIn::start(shape).await;
    for table in tables {
        catalog.create(table);
    }
    catalog
}

/// The same load over HTTP/2, with an `X-Request-Id` when `id` is not empty.
fn h2_get(
    address: &str,
    table: &str,
    id: &str,
) -> http::Request<http_body_util::Empty<bytes::Bytes>> {
    let mut request =
        http::Request::get(format!("http://{address}/v1/namespaces/db/tables/{table}"))
            .header("authorization", "Bearer alice");
    if !id.is_empty() {
        request = request.header("x-request-id", id);
    }
    request.body(http_body_util::Empty::new()).unwrap()
}

/// Reads one HTTP/1.1 answer with a `content-length` body, `pace` bytes at a time with a pause
/// between reads until `slow_until` bytes of body have come; returns the head and body length.
async fn read_answer(
    stream: &mut TcpStream,
    pace: Option<(usize, Duration)>,
    slow_until: usize,
) -> (String, usize) {
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 256 * 1024];
    let (head, length) = loop {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed before a whole head");
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().expect("a length"))
                })
                .expect("a content-length");
            buffer.drain(..end + 4);
            break (head, length);
        }
    };
    let mut got = buffer.len();
    while got < length {
        let want = match pace {
            Some((bytes, pause)) if got < slow_until => {
                tokio::time::sleep(pause).await;
                bytes.min(length - got)
            }
            _ => (length - got).min(chunk.len()),
        };
        let n = stream.read(&mut chunk[..want]).await.expect("read");
        assert!(n > 0, "closed after {got} of {length} bytes");
        got += n;
    }
    (head, got)
}

/// The next request on a kept-alive HTTP/1.1 connection is answered.
async fn next_request_is_answered(h1: &mut TcpStream, address: &str) {
    h1.write_all(get(address, "small", "").as_bytes())
        .await
        .unwrap();
    let (head, _) = tokio::time::timeout(PATIENCE, read_answer(h1, None, 0))
        .await
        .expect("an answer to the next request");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// One whose answer takes longer than the idle timeout is answered in full, over either
/// protocol, and its connection is closed once it has been idle.
#[tokio::test]
async fn a_request_slower_than_the_idle_timeout_is_answered_in_full() {
    let catalog = catalog(
        Shape {
            delay: Duration::from_millis(2500),
            ..Shape::default()
        },
        &["t", "u"],
    )
    .await;
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "1s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();

    let (mut sender, h2) = h2_connection(&address).await;
    let request = h2_get(&address, "t", "");
    let started = Instant::now();
    let answer = sender.send_request(request).await.unwrap();
    assert_eq!(answer.status(), 200);
    let body = answer
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes();
    assert!(started.elapsed() >= Duration::from_secs(2), "not slow");
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    let closed = tokio::time::timeout(PATIENCE, h2).await;
    assert!(
        closed.is_ok(),
        "the HTTP/2 connection stayed open once idle"
    );

    // HTTP/1.1, another table (so the catalog is asked again, as slowly).
    let mut h1 = TcpStream::connect(&address).await.unwrap();
    h1.write_all(get(&address, "u", "").as_bytes())
        .await
        .unwrap();
    let (head, _) = read_answer(&mut h1, None, 0).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, h1.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "the HTTP/1.1 connection stayed open once idle"
    );
}

/// A 24 MB cached answer read slowly for longer than the idle timeout: the connection is not
/// idle while the answer is being written, so the next request on it (HTTP/1.1), or a new
/// stream opened meanwhile (HTTP/2), is answered.
#[tokio::test]
async fn a_long_download_keeps_its_connection_for_the_next_request() {
    let catalog = catalog(
        Shape {
            padding: 24 << 20,
            ..Shape::default()
        },
        &["big", "small"],
    )
    .await;
    // An idle timeout of 3 s: a client that gives nothing back for that long (starved on a
    // busy machine, say) is rightly taken for stalled.
    let flags = ["--idle-timeout", "3s", "--cache-max-entry-bytes", "64MiB"];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();

    // Filled first, so that the whole body is handed over at once. The client's receive
    // buffer is fixed and small: left to grow (up to `tcp_rmem`'s maximum, 32 MiB on some
    // machines), the kernel would take the rest of the answer while it is still read slowly,
    // and the connection would rightly be idle from then on (see the README's limits).
    let mut h1 = small_buffer_connection(&address, 256 << 10).await;
    h1.write_all(get(&address, "big", "").as_bytes())
        .await
        .unwrap();
    let (head, _) = read_answer(&mut h1, None, 0).await;
    assert!(head.contains("x-cache: MISS"), "{head}");

    // 16 MB at 4 MB/s (4 s against an idle timeout of 3 s), then the rest at once (the
    // kernel's buffers, the client's 256 KiB and icecache's send buffer, hold less than the
    // 8 MB left, so icecache is still writing when the slow part ends), then the next request.
    h1.write_all(get(&address, "big", "").as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let (head, length) = read_answer(
        &mut h1,
        Some((256 << 10, Duration::from_millis(64))),
        16 << 20,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(length > 24 << 20);
    assert!(started.elapsed() > Duration::from_secs(3), "not slow");
    next_request_is_answered(&mut h1, &address).await;

    // HTTP/2: stream 1 read slowly; another stream opened 2 s in is answered (its body is
    // never read: it holds up to its stream window of the connection's). The stream windows
    // are the protocol's default, so that what the client reads goes back to icecache as
    // window often: a client that gives back nothing for an idle timeout grants nothing that
    // long, and is taken for stalled.
    let (mut sender, _h2) = h2_with_windows(&address, 65_535, 1 << 20).await;
    let request = |table: &str| h2_get(&address, table, "");
    let big = sender.send_request(request("big")).await.unwrap();
    assert_eq!(big.status(), 200);
    let mut body = big.into_body();
    let started = Instant::now();
    let mut got = 0usize;
    let mut second = None;
    // 4 MB/s, whatever the size of the frames.
    while let Some(frame) = body.frame().await {
        let n = frame.expect("a frame").data_ref().map_or(0, |d| d.len());
        got += n;
        if second.is_none() && started.elapsed() > Duration::from_secs(2) {
            second = Some(sender.send_request(request("small")));
        }
        tokio::time::sleep(Duration::from_micros(n as u64 * 4_000 / (16 << 10))).await;
    }
    assert!(got > 24 << 20);
    assert!(started.elapsed() > Duration::from_secs(3), "not slow");
    let second = second.expect("a second stream was opened while the first was read");
    let answer = tokio::time::timeout(PATIENCE, second)
        .await
        .expect("an answer to the second stream")
        .expect("the second stream answered, not refused");
    assert_eq!(answer.status(), 200);
}

/// A client that sends part of the HTTP/2 preface and closes: the slot it held is free at once
/// (the bytes left unread keep the socket readable, so only the close says it is over).
#[tokio::test]
async fn a_partial_preface_then_a_close_frees_the_slot_at_once() {
    let catalog = catalog(Shape::default(), &["t"]).await;
    // No timeout would free the slot within the test: only noticing the close can.
    let flags = [
        "--workers",
        "1",
        "--max-connections",
        "1",
        "--header-read-timeout",
        "1h",
        "--idle-timeout",
        "1h",
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    for first in [&b"PRI * HTTP/2.0\r\n"[..], b"P"] {
        let mut gone = TcpStream::connect(&address).await.unwrap();
        gone.write_all(first).await.unwrap();
        drop(gone);
        let mut next = TcpStream::connect(&address).await.unwrap();
        next.write_all(get(&address, "t", "").as_bytes())
            .await
            .unwrap();
        // A minute guards against a hang; it measures nothing.
        let (head, _) = tokio::time::timeout(PATIENCE, read_answer(&mut next, None, 0))
            .await
            .expect("the closed connection's slot was never freed");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
}

/// A request abandoned before its answer (the client closed its connection, or reset its
/// HTTP/2 stream) is counted once, with status 499, and logged with its request id; the
/// catalog's answer still fills the cache for the next caller.
#[tokio::test]
async fn an_abandoned_request_is_counted_and_logged_once() {
    // The catalog holds its answers: each caller leaves while its fill is in flight.
    let catalog = catalog(Shape::default(), &["t", "u"]).await;
    catalog.hold_loads();
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();

    let mut h1 = TcpStream::connect(&address).await.unwrap();
    h1.write_all(get(&address, "t", "X-Request-Id: gone-over-h1\r\n").as_bytes())
        .await
        .unwrap();
    eventually("the catalog asked for t", || async {
        catalog.loads("t") == 1
    })
    .await;
    drop(h1);

    let (mut sender, _h2) = h2_connection(&address).await;
    let answer = sender.send_request(h2_get(&address, "u", "gone-over-h2"));
    eventually("the catalog asked for u", || async {
        catalog.loads("u") == 1
    })
    .await;
    // Dropped unanswered: the client resets the stream.
    drop(answer);

    let abandoned = r#"icecache_requests_total{cache="NONE",route="load_table",status="499"}"#;
    eventually("both abandoned requests counted", || async {
        metric(&icecache.metrics().await, abandoned) >= 2.0
    })
    .await;
    let metrics = icecache.metrics().await;
    assert_eq!(metric(&metrics, abandoned), 2.0, "{metrics}");
    let logs = icecache.logs();
    for id in ["gone-over-h1", "gone-over-h2"] {
        let lines: Vec<&str> = logs.lines().filter(|l| l.contains(id)).collect();
        assert_eq!(lines.len(), 1, "{id}: {lines:?}");
        assert!(
            lines[0].contains("abandoned") && lines[0].contains("499"),
            "{}",
            lines[0]
        );
    }
    // The fill went on without its callers: the next load joins it (or, once it has ended,
    // is a hit) and the catalog is asked nothing more.
    catalog.release_loads();
    let next = reqwest::Client::new()
        .get(format!("{}/v1/namespaces/db/tables/t", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 200);
    let cache = next.headers()["x-cache"].to_str().unwrap().to_owned();
    assert!(cache == "COALESCED" || cache == "HIT", "x-cache {cache}");
    assert_eq!(catalog.loads("t"), 1, "the abandoned fill was asked again");
}

/// A client that sent anything after its request's head before it left (a stray CRLF, a
/// pipelined request, half of one) is seen to leave while its answer waits, though the server
/// holds those bytes and reads no further: its request is counted once as 499, and a pipelined
/// request behind it is never asked of the catalog.
#[tokio::test]
async fn a_client_that_sent_more_than_its_head_and_left_is_counted_abandoned() {
    let catalog = catalog(Shape::default(), &["a", "b", "c", "p"]).await;
    catalog.hold_loads();
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let trailing = [
        ("a", "\r\n".to_owned()),
        ("b", get(&address, "p", "")),
        ("c", "GET /v1/names".to_owned()),
    ];
    for (table, after) in &trailing {
        let mut client = TcpStream::connect(&address).await.unwrap();
        let id = format!("X-Request-Id: left-{table}\r\n");
        let sent = get(&address, table, &id) + after;
        client.write_all(sent.as_bytes()).await.unwrap();
        eventually("the catalog asked", || async { catalog.loads(table) == 1 }).await;
        drop(client);
    }
    // Still held by the catalog: only the clients' leaving can have ended these requests.
    let abandoned = r#"icecache_requests_total{cache="NONE",route="load_table",status="499"}"#;
    eventually("the three abandoned requests counted", || async {
        metric(&icecache.metrics().await, abandoned) >= 3.0
    })
    .await;
    let metrics = icecache.metrics().await;
    assert_eq!(metric(&metrics, abandoned), 3.0, "{metrics}");
    let logs = icecache.logs();
    for (table, _) in &trailing {
        let id = format!("left-{table}");
        let lines: Vec<&str> = logs.lines().filter(|l| l.contains(&id)).collect();
        assert_eq!(lines.len(), 1, "{id}: {lines:?}");
        assert!(lines[0].contains("499"), "{}", lines[0]);
    }
    // The fills go on without their callers; once they are kept, nothing asks for `p`.
    catalog.release_loads();
    for (table, _) in &trailing {
        eventually("the abandoned fill kept", || async {
            let answer = reqwest::Client::new()
                .get(format!("{}/v1/namespaces/db/tables/{table}", icecache.url))
                .bearer_auth("alice")
                .send()
                .await
                .unwrap();
            answer.headers()["x-cache"] == "HIT"
        })
        .await;
    }
    assert_eq!(
        catalog.loads("p"),
        0,
        "the pipelined request was asked of the catalog"
    );
}

/// A client that stops reading a large answer: the bytes that wait for it do not move, and
/// after the idle timeout its connection is cut (a graceful close would wait on it for ever).
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_after_the_idle_timeout() {
    let catalog = catalog(
        Shape {
            padding: 48 << 20,
            ..Shape::default()
        },
        &["big"],
    )
    .await;
    let flags = ["--idle-timeout", "1s", "--cache-max-entry-bytes", "128MiB"];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let mut stalled = TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(get(&address, "big", "").as_bytes())
        .await
        .unwrap();
    let mut first = vec![0u8; 64 * 1024];
    let n = stalled.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // Reads nothing for three idle timeouts, then reads what is left: what the kernel's
    // buffers held, and then the end of a cut connection, well short of 48 MB.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stalled.read_to_end(&mut rest)).await;
    let got = match read {
        Ok(Ok(_)) => rest.len(),
        // A reset is a cut too.
        Ok(Err(_)) => rest.len(),
        Err(_) => panic!("the connection stayed open after its client stopped reading"),
    };
    assert!(got + n < 48 << 20, "the whole answer arrived: {got} bytes");
}

/// An HTTP/2 connection to `address` whose client grants each stream `window` bytes and the
/// connection `connection_window` (see `h2_handshake`).
async fn h2_with_windows(address: &str, window: u32, connection_window: u32) -> H2Client {
    let stream = TcpStream::connect(address).await.unwrap();
    h2_handshake(stream, window, connection_window).await
}

/// Waits for an HTTP/2 connection to end (within `PATIENCE`, or the test fails) and returns
/// how many bytes of `answer`'s body had arrived.
async fn bytes_before_the_cut(
    connection: tokio::task::JoinHandle<Result<(), hyper::Error>>,
    answer: http::Response<hyper::body::Incoming>,
) -> usize {
    let closed = tokio::time::timeout(PATIENCE, connection).await;
    assert!(closed.is_ok(), "the connection stayed open");
    let mut body = answer.into_body();
    let mut got = 0;
    while let Some(Ok(frame)) = body.frame().await {
        got += frame.data_ref().map_or(0, |d| d.len());
    }
    got
}

/// On HTTP/2 a client that opens no flow-control window leaves nothing waiting on the socket:
/// the answer waits inside the protocol, and its connection is still cut after the idle
/// timeout.
#[tokio::test]
async fn an_http2_client_that_grants_no_window_for_a_large_answer_is_cut() {
    let catalog = catalog(
        Shape {
            padding: 4 << 20,
            ..Shape::default()
        },
        &["big"],
    )
    .await;
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "1s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let (mut sender, connection) = h2_with_windows(&address, 65_535, 65_535).await;
    let answer = sender
        .send_request(h2_get(&address, "big", ""))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // The body is held, never read: no window is given back.
    let got = bytes_before_the_cut(connection, answer).await;
    assert!(got < 4 << 20, "the whole answer arrived: {got} bytes");
}

/// The last piece of an answer held by a connection window the client never opens: the
/// request is done, the idle connection is asked to close and cannot, and is cut an idle
/// timeout later.
#[tokio::test]
async fn an_http2_answer_held_whole_by_the_connection_window_does_not_hold_its_connection() {
    let catalog = catalog(
        Shape {
            padding: 40 << 10,
            ..Shape::default()
        },
        &["a", "b"],
    )
    .await;
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "1s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let (mut sender, connection) = h2_with_windows(&address, 65_535, 65_535).await;
    // Two answers of over 40 KB each: the first takes most of the connection's window, the
    // second cannot all be sent.
    let first = sender
        .send_request(h2_get(&address, "a", ""))
        .await
        .unwrap();
    let second = sender
        .send_request(h2_get(&address, "b", ""))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(second.status(), 200);
    let got = bytes_before_the_cut(connection, second).await;
    assert!(
        got < 40 << 10,
        "the whole second answer arrived: {got} bytes"
    );
}

/// A client that grants no window at all: even an answer small enough for one piece waits
/// inside the protocol, and its connection is cut after the idle timeout.
#[tokio::test]
async fn an_http2_client_that_grants_no_window_for_a_small_answer_is_cut() {
    let catalog = catalog(Shape::default(), &["t"]).await;
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "1s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let (mut sender, connection) = h2_with_windows(&address, 0, 65_535).await;
    let answer = sender
        .send_request(h2_get(&address, "t", ""))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let got = bytes_before_the_cut(connection, answer).await;
    assert_eq!(got, 0, "bytes arrived through a window never granted");
}

/// An HTTP/2 answer read at a trickle, its last piece taking longer than the idle timeout to
/// be read, is read whole, and its connection then answers another stream: bytes moving are
/// activity, also once the answer's request is done.
#[tokio::test]
async fn an_http2_answer_read_at_a_trickle_keeps_its_connection_for_the_next_stream() {
    let catalog = catalog(
        Shape {
            padding: 128 << 10,
            ..Shape::default()
        },
        &["big", "small"],
    )
    .await;
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "3s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    // A stream window of 16 KiB: each 8 KiB read goes back as window (the half at which the
    // client gives it back), four times per idle timeout at 12 KiB/s, while an answer's last
    // piece of up to 64 KiB takes over five seconds.
    let (mut sender, connection) = h2_with_windows(&address, 16 << 10, 65_535).await;
    let answer = sender
        .send_request(h2_get(&address, "big", ""))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    let started = Instant::now();
    let mut got = 0usize;
    while let Some(frame) = body.frame().await {
        let n = frame.expect("a frame").data_ref().map_or(0, |d| d.len());
        got += n;
        tokio::time::sleep(Duration::from_micros(n as u64 * 1_000_000 / (12 << 10))).await;
    }
    assert!(got > 128 << 10, "{got} bytes");
    assert!(started.elapsed() > Duration::from_secs(4), "not slow");
    let next = tokio::time::timeout(PATIENCE, sender.send_request(h2_get(&address, "small", "")))
        .await
        .expect("an answer to the next stream")
        .expect("the next stream answered, not refused");
    assert_eq!(next.status(), 200);
    assert!(!connection.is_finished());
}

/// An HTTP/1.1 answer read slowly but steadily by a client whose kernel buffers little: the
/// kernel on icecache's side holds megabytes of it and wakes icecache only once a good part is
/// free, longer than the idle timeout at this pace. It still arrives whole, and the connection
/// takes the next request.
#[tokio::test]
async fn a_slow_steady_reader_gets_the_whole_answer_and_keeps_its_connection() {
    let catalog = catalog(
        Shape {
            padding: 3 << 20,
            ..Shape::default()
        },
        &["big", "small"],
    )
    .await;
    let flags = ["--idle-timeout", "1s", "--cache-max-entry-bytes", "64MiB"];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let mut h1 = small_buffer_connection(&address, 4096).await;
    h1.write_all(get(&address, "big", "").as_bytes())
        .await
        .unwrap();
    // About 400 KB/s for the whole answer: over seven seconds against an idle timeout of 1 s.
    let started = Instant::now();
    let (head, length) = read_answer(
        &mut h1,
        Some((16 << 10, Duration::from_millis(40))),
        usize::MAX,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(length > 3 << 20);
    assert!(started.elapsed() > Duration::from_secs(2), "not slow");
    next_request_is_answered(&mut h1, &address).await;
}

/// A request head whose first byte has come is bounded by the head-read timeout, not by the
/// idle timeout, on a new connection and on a kept-alive one.
#[tokio::test]
async fn a_request_head_begun_has_the_head_read_timeout_whatever_the_idle_timeout() {
    let catalog = catalog(Shape::default(), &["t"]).await;
    let flags = ["--idle-timeout", "1s", "--header-read-timeout", "30s"];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let request = get(&address, "t", "");
    let mut connection = TcpStream::connect(&address).await.unwrap();
    for turn in ["new", "kept alive"] {
        connection
            .write_all(&request.as_bytes()[..1])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        connection
            .write_all(&request.as_bytes()[1..])
            .await
            .unwrap();
        let (head, _) = tokio::time::timeout(PATIENCE, read_answer(&mut connection, None, 0))
            .await
            .expect("an answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{turn}: {head}");
    }
}
