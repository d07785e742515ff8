//! A hit's head. Over HTTP/1.x icecache writes a hit's marks (`x-cache`, `Cache-Status`) and its
//! `ETag` from a head built once per entry: on the wire every field is still a line of its own,
//! once, whatever the catalog sent, in the same words HTTP/2 carries, `ETag` spelled so; and a
//! policy that strips one of those names strips that one alone.

use http_body_util::Empty;

use crate::support::standin::{Shape, StandIn};
use crate::support::{h2_connection, raw_get_head, Icecache};

const PATH: &str = "/v1/namespaces/db/tables/t";
const TOKEN: &str = "Authorization: Bearer alice\r\n";
/// Every entry stays fresh for the whole test, however slow the machine: a hit is a `HIT`.
const FRESH: [&str; 2] = ["--fresh-for", "1h"];

/// The fields of a raw HTTP/1.x head, in order; fails on any line that is not one field.
fn fields(head: &str) -> Vec<(String, String)> {
    head.split("\r\n")
        .skip(1)
        .map(|line| {
            let (name, value) = line
                .split_once(": ")
                .unwrap_or_else(|| panic!("a line that is no field: {line:?} in\n{head}"));
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "a field name that is no token: {name:?} in\n{head}"
            );
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The values of every field named `name` (in any case).
fn values<'a>(fields: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The one `ETag` of a head, which must be spelled `ETag`.
fn etag(fields: &[(String, String)]) -> String {
    let tags = values(fields, "etag");
    assert_eq!(tags.len(), 1, "{fields:?}");
    assert!(fields.iter().any(|(n, _)| n == "ETag"), "{fields:?}");
    tags[0].to_owned()
}

/// A catalog behind a cache of its own: its answers carry that cache's marks and a tag.
async fn marked_catalog() -> StandIn {
    let catalog = StandIn::start(Shape {
        etag: true,
        extra_headers: vec![
            ("x-cache", "MISS from cdn"),
            ("cache-status", "cdn; fwd=miss"),
        ],
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    catalog
}

/// Checks a head answered from an entry: one field per line, icecache's marks once each.
fn assert_marked_once(head: &str) -> Vec<(String, String)> {
    let fields = fields(head);
    assert_eq!(values(&fields, "x-cache"), ["HIT"], "{head}");
    assert_eq!(values(&fields, "cache-status"), ["icecache; hit"], "{head}");
    assert_eq!(values(&fields, "age").len(), 1, "{head}");
    fields
}

#[tokio::test]
async fn every_field_of_a_hit_and_a_304_is_a_line_of_its_own_once() {
    let catalog = marked_catalog().await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    let miss = raw_get_head(&icecache, PATH, TOKEN).await;
    assert!(miss.starts_with("HTTP/1.1 200"), "{miss}");
    let hit = raw_get_head(&icecache, PATH, TOKEN).await;
    assert!(hit.starts_with("HTTP/1.1 200"), "{hit}");
    let tag = etag(&assert_marked_once(&hit));
    let direct = reqwest::Client::new()
        .get(format!("{}{PATH}", catalog.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    let theirs = direct.headers()["etag"].to_str().unwrap();
    assert_ne!(tag, theirs, "the catalog's own tag went out");
    let conditional = format!("{TOKEN}If-None-Match: {tag}\r\n");
    let not_modified = raw_get_head(&icecache, PATH, &conditional).await;
    assert!(not_modified.starts_with("HTTP/1.1 304"), "{not_modified}");
    let fields = assert_marked_once(&not_modified);
    assert_eq!(etag(&fields), tag);
    assert_eq!(values(&fields, "vary").len(), 1, "{not_modified}");
}

#[tokio::test]
async fn an_http10_hit_is_written_the_same_way() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let catalog = marked_catalog().await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    raw_get_head(&icecache, PATH, TOKEN).await;
    let address = icecache.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {PATH} HTTP/1.0\r\nHost: {address}\r\n{TOKEN}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    etag(&assert_marked_once(head));
}

#[tokio::test]
async fn the_gzip_representation_carries_its_own_tag() {
    let catalog = marked_catalog().await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    raw_get_head(&icecache, PATH, TOKEN).await;
    let identity = etag(&assert_marked_once(
        &raw_get_head(&icecache, PATH, TOKEN).await,
    ));
    let gzip = format!("{TOKEN}Accept-Encoding: gzip\r\n");
    let head = raw_get_head(&icecache, PATH, &gzip).await;
    let fields = assert_marked_once(&head);
    assert_eq!(values(&fields, "content-encoding"), ["gzip"], "{head}");
    let tag = etag(&fields);
    assert_ne!(tag, identity);
    let conditional = format!("{gzip}If-None-Match: {tag}\r\n");
    let not_modified = raw_get_head(&icecache, PATH, &conditional).await;
    assert!(not_modified.starts_with("HTTP/1.1 304"), "{not_modified}");
    assert_eq!(etag(&assert_marked_once(&not_modified)), tag);
}

#[tokio::test]
async fn an_http2_hit_carries_the_fields_an_http1_hit_carries() {
    let catalog = marked_catalog().await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    raw_get_head(&icecache, PATH, TOKEN).await;
    let h1 = fields(&raw_get_head(&icecache, PATH, TOKEN).await);
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let (mut sender, _connection) = h2_connection(&address).await;
    let request = http::Request::get(format!("http://{address}{PATH}"))
        .header("authorization", "Bearer alice")
        .body(Empty::new())
        .unwrap();
    let answer = sender.send_request(request).await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut h2: Vec<(String, String)> = answer
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect();
    let mut h1: Vec<(String, String)> = h1
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        // Per request, or per connection on HTTP/1.1 only.
        .filter(|(n, _)| !["date", "age", "connection"].contains(&n.as_str()))
        .collect();
    h2.retain(|(n, _)| !["date", "age"].contains(&n.as_str()));
    h1.sort();
    h2.sort();
    assert_eq!(h1, h2);
}

/// Strips `name` from answers (`--strip-keys` names both body members and header names).
async fn stripping(name: &str) -> (StandIn, Icecache) {
    let catalog = marked_catalog().await;
    let flags = [
        "--credentials",
        "strip",
        "--strip-keys",
        name,
        FRESH[0],
        FRESH[1],
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    raw_get_head(&icecache, PATH, TOKEN).await;
    (catalog, icecache)
}

#[tokio::test]
async fn a_policy_that_strips_x_cache_strips_it_alone() {
    let (_catalog, icecache) = stripping("x-cache").await;
    let head = raw_get_head(&icecache, PATH, TOKEN).await;
    let hit = fields(&head);
    assert!(values(&hit, "x-cache").is_empty(), "{head}");
    assert_eq!(values(&hit, "cache-status"), ["icecache; hit"], "{head}");
    let tag = etag(&hit);
    let conditional = format!("{TOKEN}If-None-Match: {tag}\r\n");
    let not_modified = raw_get_head(&icecache, PATH, &conditional).await;
    assert!(not_modified.starts_with("HTTP/1.1 304"), "{not_modified}");
    assert_eq!(etag(&fields(&not_modified)), tag);
}

#[tokio::test]
async fn a_policy_that_strips_etag_strips_it_alone() {
    let (_catalog, icecache) = stripping("etag").await;
    let head = raw_get_head(&icecache, PATH, TOKEN).await;
    let fields = fields(&head);
    assert!(values(&fields, "etag").is_empty(), "{head}");
    assert_eq!(values(&fields, "x-cache"), ["HIT"], "{head}");
    assert_eq!(values(&fields, "cache-status"), ["icecache; hit"], "{head}");
}

#[tokio::test]
async fn a_catalog_field_the_policy_strips_never_goes_out_and_the_others_go_out_once() {
    let catalog = StandIn::start(Shape {
        etag: true,
        extra_headers: vec![
            ("x-custom-secret", "leaked-value"),
            ("x-catalog-trace", "kept-value"),
        ],
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let flags = [
        "--credentials",
        "strip",
        "--strip-keys",
        "x-custom*",
        FRESH[0],
        FRESH[1],
    ];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let miss = raw_get_head(&icecache, PATH, TOKEN).await;
    let hit = raw_get_head(&icecache, PATH, TOKEN).await;
    let tag = etag(&assert_marked_once(&hit));
    let conditional = format!("{TOKEN}If-None-Match: {tag}\r\n");
    let not_modified = raw_get_head(&icecache, PATH, &conditional).await;
    assert!(not_modified.starts_with("HTTP/1.1 304"), "{not_modified}");
    for head in [&miss, &hit] {
        assert!(!head.contains("leaked-value"), "{head}");
        assert_eq!(
            values(&fields(head), "x-catalog-trace"),
            ["kept-value"],
            "{head}"
        );
    }
    assert!(!not_modified.contains("leaked-value"), "{not_modified}");
}

#[tokio::test]
async fn a_stale_answer_and_its_304_carry_their_own_marks_once() {
    let catalog = marked_catalog().await;
    let flags = ["--fresh-for", "100ms", "--stale-if-error", "60s"];
    let icecache = Icecache::start(&catalog.url, &flags).await;
    let tag = etag(&fields(&raw_get_head(&icecache, PATH, TOKEN).await));
    catalog.reshape(|shape| shape.status = Some(503));
    // Past its freshness (the clock, not a bound on anything's speed).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let conditional = format!("{TOKEN}If-None-Match: {tag}\r\n");
    for (headers, status) in [(TOKEN, "200"), (conditional.as_str(), "304")] {
        let head = raw_get_head(&icecache, PATH, headers).await;
        assert!(head.starts_with(&format!("HTTP/1.1 {status}")), "{head}");
        let fields = fields(&head);
        assert_eq!(values(&fields, "x-cache"), ["STALE"], "{head}");
        assert_eq!(
            values(&fields, "cache-status"),
            ["icecache; hit; detail=stale"],
            "{head}"
        );
        assert_eq!(etag(&fields), tag);
    }
}

/// The heads of the answers to `requests` sent at once on one connection (the last one asks to
/// close it).
async fn pipelined_heads(icecache: &Icecache, requests: &[String]) -> Vec<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream
        .write_all(requests.concat().as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let mut heads = Vec::new();
    let mut rest = &raw[..];
    while !rest.is_empty() {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a whole head");
        let head = String::from_utf8_lossy(&rest[..end]).into_owned();
        let length: usize = values(&fields(&head), "content-length")
            .first()
            .map_or(0, |v| v.parse().unwrap());
        let body = if head.starts_with("HTTP/1.1 304") {
            0
        } else {
            length
        };
        rest = &rest[end + 4 + body..];
        heads.push(head);
    }
    heads
}

#[tokio::test]
async fn no_field_of_a_request_comes_back_in_the_heads_of_hits_on_its_connection() {
    let catalog = marked_catalog().await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    let plain_tag = etag(&fields(&raw_get_head(&icecache, PATH, TOKEN).await));
    let gzip = format!("{TOKEN}Accept-Encoding: gzip\r\n");
    let gzip_tag = etag(&fields(&raw_get_head(&icecache, PATH, &gzip).await));
    // Many fields of the client's own (more than any head icecache writes), then few.
    let probes: String = (0..40)
        .map(|n| format!("X-Probe-{n}: secret-{n}\r\n"))
        .collect();
    let request = |extra: &str, close: bool| {
        let close = if close { "Connection: close\r\n" } else { "" };
        format!("GET {PATH} HTTP/1.1\r\nHost: icecache\r\n{TOKEN}{extra}{close}\r\n")
    };
    let requests = [
        request(&probes, false),
        request(&format!("{probes}If-None-Match: {plain_tag}\r\n"), false),
        request("", false),
        request(&format!("If-None-Match: {plain_tag}\r\n"), false),
        request(&format!("{probes}Accept-Encoding: gzip\r\n"), false),
        request(
            &format!("{probes}Accept-Encoding: gzip\r\nIf-None-Match: {gzip_tag}\r\n"),
            false,
        ),
        request(
            &format!("Accept-Encoding: gzip\r\nIf-None-Match: {gzip_tag}\r\n"),
            true,
        ),
    ];
    let heads = pipelined_heads(&icecache, &requests).await;
    let statuses: Vec<&str> = heads.iter().map(|h| &h[9..12]).collect();
    assert_eq!(statuses, ["200", "304", "200", "304", "200", "304", "304"]);
    for head in &heads {
        let fields = assert_marked_once(head);
        for (name, value) in &fields {
            let name = name.to_ascii_lowercase();
            assert!(
                !name.starts_with("x-probe")
                    && !["authorization", "host", "if-none-match", "accept-encoding"]
                        .contains(&name.as_str())
                    && !value.contains("secret")
                    && !value.contains("alice"),
                "a request's field came back: {name}: {value} in\n{head}"
            );
        }
    }
}
