//! When icecache closes a connection, its client still reads everything it was sent, even when
//! it sends more after icecache's last bytes (a pipelined request, HTTP/2 window updates): the
//! close never turns into a reset that would throw away the end of an answer.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::standin::{Shape, StandIn};
use crate::support::{raw_get_head, small_buffer_connection, Icecache, PATIENCE};

const BIG: usize = 3 << 20;

/// A receive buffer small enough that most of an answer waits on icecache's side.
const SMALL_BUFFER: u32 = 8 << 10;

#[tokio::test]
async fn a_client_that_sends_more_after_a_closing_answer_still_reads_it_whole() {
    let catalog = StandIn::start(Shape {
        padding: BIG,
        ..Shape::default()
    })
    .await;
    catalog.create("big");
    let icecache = Icecache::start(&catalog.url, &["--cache-max-entry-bytes", "64MiB"]).await;
    let path = "/v1/namespaces/db/tables/big";
    let token = "Authorization: Bearer alice\r\n";
    let head = raw_get_head(&icecache, path, token).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let mut client = small_buffer_connection(&address, SMALL_BUFFER).await;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{token}Connection: close\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 64 << 10];
    let n = client.read(&mut answer).await.unwrap();
    answer.truncate(n);
    // A request the closing connection will not answer, sent while the answer is on its way;
    // then icecache writes its last bytes and closes before the client reads on.
    client
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, client.read_to_end(&mut rest))
        .await
        .expect("the connection ended")
        .expect("the answer's end arrived, not a reset");
    answer.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .parse()
        .unwrap();
    assert!(length > BIG);
    assert_eq!(body.len(), length, "{head}");
}

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    bytes.extend_from_slice(&[kind, flags]);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A header field as HPACK's literal without indexing, with a new name (RFC 7541 §6.2.2).
fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut bytes = vec![0, name.len() as u8];
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(value.len() as u8);
    bytes.extend_from_slice(value.as_bytes());
    bytes
}

/// A raw HTTP/2 client that does what a small one does: it asks for one load and says GOAWAY
/// (it will ask nothing more), does not read its socket for a while, then reads the answer
/// and gives each DATA frame's bytes back as window. Returns the body's length, or why it
/// ended short.
async fn goodbye_then_read(address: &str, path: &str) -> Result<usize, String> {
    let mut client = small_buffer_connection(address, SMALL_BUFFER).await;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0, 0, &[]));
    let mut fields = Vec::new();
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", address),
        (":path", path),
        ("authorization", "Bearer alice"),
    ] {
        fields.extend(literal(name, value));
    }
    // END_STREAM | END_HEADERS.
    hello.extend(frame(0x1, 0x5, 1, &fields));
    hello.extend(frame(0x7, 0, 0, &[0; 8]));
    client.write_all(&hello).await.map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut got, mut buffer) = (0usize, Vec::new());
    loop {
        while buffer.len() >= 9 {
            let length = u32::from_be_bytes([0, buffer[0], buffer[1], buffer[2]]) as usize;
            if buffer.len() < 9 + length {
                break;
            }
            let (kind, flags) = (buffer[3], buffer[4]);
            buffer.drain(..9 + length);
            if kind == 0x0 {
                got += length;
                let update = (length as u32).to_be_bytes();
                // Written as a reading client writes them; one that fails is left to the read.
                let _ = client.write_all(&frame(0x8, 0, 0, &update)).await;
                let _ = client.write_all(&frame(0x8, 0, 1, &update)).await;
                if flags & 0x1 != 0 {
                    return Ok(got);
                }
            }
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(0) => return Err(format!("closed after {got} bytes of body")),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("{e} after {got} bytes of body")),
        }
    }
}

#[tokio::test]
async fn an_http2_client_that_said_goodbye_still_reads_its_last_answer_whole() {
    let catalog = StandIn::start(Shape {
        padding: 40 << 10,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let path = "/v1/namespaces/db/tables/t";
    let whole = reqwest::Client::new()
        .get(format!("{}{path}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    // Within one initial window: icecache writes it all and closes at once.
    assert!(whole.len() < 65_535);
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let got = tokio::time::timeout(PATIENCE, goodbye_then_read(&address, path))
        .await
        .expect("the answer ended");
    assert_eq!(got, Ok(whole.len()));
}
