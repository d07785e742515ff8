//! HTTP/2 over TLS, where icecache sends the records of a connection's turn together instead of
//! one DATA frame at a time: every answer still arrives whole and exact, whatever its size and
//! however many streams share the connection, answers without a body arrive, a client that
//! reads slowly through a small window gets everything, and one that grants no window is still
//! cut.

use bytes::Bytes;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use rustls_pki_types::pem::PemObject;

use crate::support::standin::{Shape, StandIn};
use crate::support::{h2_handshake, small_buffer_connection, H2Client, Icecache, PATIENCE};
use crate::tls::{install_crypto, tls_icecache, Ca, Files};

const PATH: &str = "/v1/namespaces/db/tables";

/// An HTTP/2 connection over TLS (ALPN h2) to `icecache`, its client granting each stream
/// `window` bytes and the connection `connection_window`, more only as it reads.
async fn h2_over_tls(
    icecache: &Icecache,
    ca: &Ca,
    window: u32,
    connection_window: u32,
) -> H2Client {
    let address = icecache.url.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    h2_over_tls_on(tcp, ca, window, connection_window).await
}

/// The same on a connection made already.
async fn h2_over_tls_on(
    tcp: tokio::net::TcpStream,
    ca: &Ca,
    window: u32,
    connection_window: u32,
) -> H2Client {
    install_crypto();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    h2_handshake(tls, window, connection_window).await
}

/// An HTTP/1.1-only client over TLS, the reference an HTTP/2 answer is compared with.
fn http1_client(ca: &Ca) -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .http1_only()
        .build()
        .unwrap()
}

fn request(
    method: &str,
    icecache: &Icecache,
    table: &str,
    tag: Option<&str>,
) -> http::Request<Empty<Bytes>> {
    let base = icecache.url.replace("http://", "https://");
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{PATH}/{table}"))
        .header("authorization", "Bearer alice");
    if let Some(tag) = tag {
        request = request.header("if-none-match", tag);
    }
    request.body(Empty::new()).unwrap()
}

/// Sends `request` and reads its whole answer, within `PATIENCE`.
async fn fetch(
    sender: &mut SendRequest<Empty<Bytes>>,
    request: http::Request<Empty<Bytes>>,
) -> (http::response::Parts, Bytes) {
    let exchange = async {
        let answer = sender.send_request(request).await.expect("an answer");
        let (head, body) = answer.into_parts();
        (head, body.collect().await.expect("a whole body").to_bytes())
    };
    tokio::time::timeout(PATIENCE, exchange)
        .await
        .expect("the answer arrived whole")
}

/// Tables of 0, 40 KB, 200 KB (more than rustls holds before it sends) and 3 MB of padding,
/// each loaded once over HTTP/1.1 on TLS; returns their names and the bodies HTTP/1.1 got.
async fn tables_of_every_size(
    catalog: &StandIn,
    icecache: &Icecache,
    ca: &Ca,
) -> Vec<(String, Bytes)> {
    let client = http1_client(ca);
    let mut tables = Vec::new();
    for padding in [0, 40 << 10, 200 << 10, 3 << 20] {
        let table = format!("t{padding}");
        catalog.reshape(|shape| shape.padding = padding);
        catalog.create(&table);
        let url = format!(
            "{}{PATH}/{table}",
            icecache.url.replace("http://", "https://")
        );
        let answer = client.get(url).bearer_auth("alice").send().await.unwrap();
        assert_eq!(answer.status(), 200);
        tables.push((table, answer.bytes().await.unwrap()));
    }
    tables
}

async fn tls_in_front_of_a_stand_in(extra: &[&str]) -> (StandIn, Icecache, Ca, Files) {
    let catalog = StandIn::start(Shape::default()).await;
    let ca = Ca::new("test ca");
    let files = Files::new();
    let mut flags = vec!["--cache-max-entry-bytes", "64MiB"];
    flags.extend_from_slice(extra);
    let (icecache, _) = tls_icecache(&catalog.url, &files, &ca, &flags).await;
    (catalog, icecache, ca, files)
}

#[tokio::test]
async fn answers_of_every_size_arrive_whole_one_after_another_on_one_connection() {
    let (catalog, icecache, ca, _files) = tls_in_front_of_a_stand_in(&[]).await;
    let tables = tables_of_every_size(&catalog, &icecache, &ca).await;
    let (mut sender, _connection) = h2_over_tls(&icecache, &ca, 65_535, 65_535).await;
    for round in 0..2 {
        for (table, expected) in &tables {
            let (head, body) = fetch(&mut sender, request("GET", &icecache, table, None)).await;
            assert_eq!(head.status, 200, "{table}");
            assert!(
                body == *expected,
                "{table}, round {round}: {} bytes against {}",
                body.len(),
                expected.len()
            );
        }
    }
}

#[tokio::test]
async fn answers_of_every_size_arrive_whole_on_streams_sharing_one_connection() {
    let (catalog, icecache, ca, _files) = tls_in_front_of_a_stand_in(&[]).await;
    let tables = tables_of_every_size(&catalog, &icecache, &ca).await;
    let (sender, _connection) = h2_over_tls(&icecache, &ca, 1 << 20, 8 << 20).await;
    let streams = (0..16).map(|i| {
        let (table, expected) = tables[i % tables.len()].clone();
        let mut sender = sender.clone();
        let request = request("GET", &icecache, &table, None);
        async move {
            let (head, body) = fetch(&mut sender, request).await;
            assert_eq!(head.status, 200, "{table}");
            assert!(
                body == expected,
                "{table}: {} bytes against {}",
                body.len(),
                expected.len()
            );
        }
    });
    futures::future::join_all(streams).await;
}

#[tokio::test]
async fn answers_without_a_body_arrive_and_the_connection_goes_on() {
    let (catalog, icecache, ca, _files) = tls_in_front_of_a_stand_in(&[]).await;
    catalog.create("t");
    let (mut sender, _connection) = h2_over_tls(&icecache, &ca, 65_535, 65_535).await;
    let (first, _) = fetch(&mut sender, request("GET", &icecache, "t", None)).await;
    let tag = first.headers["etag"].to_str().unwrap().to_owned();
    let (unchanged, body) = fetch(&mut sender, request("GET", &icecache, "t", Some(&tag))).await;
    assert_eq!(unchanged.status, 304);
    assert!(body.is_empty());
    let (exists, _) = fetch(&mut sender, request("HEAD", &icecache, "t", None)).await;
    assert_eq!(exists.status, 204);
    let (missing, _) = fetch(&mut sender, request("GET", &icecache, "nothing-here", None)).await;
    assert_eq!(missing.status, 404);
    let (again, body) = fetch(&mut sender, request("GET", &icecache, "t", None)).await;
    assert_eq!(again.status, 200);
    assert!(!body.is_empty());
}

#[tokio::test]
async fn a_large_answer_through_a_small_window_arrives_as_the_client_reads() {
    let (catalog, icecache, ca, _files) = tls_in_front_of_a_stand_in(&[]).await;
    let tables = tables_of_every_size(&catalog, &icecache, &ca).await;
    // 16 KiB per stream: the answer goes out a window at a time, each sent when the client's
    // window update is read.
    let (mut sender, _connection) = h2_over_tls(&icecache, &ca, 16 << 10, 65_535).await;
    for (table, expected) in &tables[1..] {
        let (head, body) = fetch(&mut sender, request("GET", &icecache, table, None)).await;
        assert_eq!(head.status, 200);
        assert!(
            body == *expected,
            "{table}: {} bytes against {}",
            body.len(),
            expected.len()
        );
    }
}

#[tokio::test]
async fn a_client_on_tls_that_grants_no_window_for_a_large_answer_is_cut() {
    let (catalog, icecache, ca, _files) =
        tls_in_front_of_a_stand_in(&["--idle-timeout", "1s"]).await;
    catalog.reshape(|shape| shape.padding = 4 << 20);
    catalog.create("big");
    let (mut sender, connection) = h2_over_tls(&icecache, &ca, 65_535, 65_535).await;
    let answer = tokio::time::timeout(
        PATIENCE,
        sender.send_request(request("GET", &icecache, "big", None)),
    )
    .await
    .expect("a head")
    .unwrap();
    assert_eq!(answer.status(), 200);
    // The body is held, never read: no window is given back.
    let closed = tokio::time::timeout(PATIENCE, connection).await;
    assert!(closed.is_ok(), "the connection stayed open");
    let mut body = answer.into_body();
    let mut got = 0;
    while let Some(Ok(frame)) = body.frame().await {
        got += frame.data_ref().map_or(0, |d| d.len());
    }
    assert!(got < 4 << 20, "the whole answer arrived: {got} bytes");
}

#[tokio::test]
async fn a_stopping_icecache_lets_a_slow_reader_read_its_answer_whole() {
    let (catalog, mut icecache, ca, _files) = tls_in_front_of_a_stand_in(&[]).await;
    let tables = tables_of_every_size(&catalog, &icecache, &ca).await;
    let (table, expected) = tables.last().unwrap().clone();
    // A client that buffers little and reads at about 1 MB/s, giving window back as it reads:
    // it still sends when icecache has written its last bytes and closed.
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let tcp = small_buffer_connection(&address, 8 << 10).await;
    let (mut sender, _connection) = h2_over_tls_on(tcp, &ca, 65_535, 65_535).await;
    let answer = sender
        .send_request(request("GET", &icecache, &table, None))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let stopped = tokio::task::spawn_blocking(move || icecache.terminate());
    let mut body = answer.into_body();
    let mut got = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("a frame, not a reset");
            if let Some(data) = frame.data_ref() {
                got.extend_from_slice(data);
                tokio::time::sleep(Duration::from_micros(data.len() as u64)).await;
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the answer ended");
    assert!(got == expected, "{} bytes of {}", got.len(), expected.len());
    let status = stopped.await.unwrap();
    assert!(status.success(), "{status:?}");
}
