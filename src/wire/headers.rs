//! Header rules of a reverse proxy: hop-by-hop headers stay on their hop, and the catalog learns
//! who asked through `X-Forwarded-*`.

use std::io::Write as _;
use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// RFC 9110 §7.6.1, and `Proxy-Connection`, which old clients send and intermediaries remove.
pub(crate) static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers read one name at a time: a built map, or a request to the catalog whose headers are
/// read as they would be sent without building them (`origin::Outgoing`).
pub trait HeaderLookup {
    fn values(&self, name: &HeaderName) -> header::GetAll<'_, HeaderValue>;
}

impl HeaderLookup for HeaderMap {
    fn values(&self, name: &HeaderName) -> header::GetAll<'_, HeaderValue> {
        self.get_all(name)
    }
}

/// Removes the hop-by-hop headers, including any that `Connection` names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    for name in connection_named(headers).iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// The headers a `Connection` header names (hop-by-hop too); none, without an allocation, in
/// the usual request that has no `Connection` header.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// Where a request came from, as `X-Forwarded-*` tells the catalog.
pub struct Forwarded<'a> {
    /// The client's HTTP/2 `:authority`, used when it sent no `Host`.
    pub authority: Option<&'a http::uri::Authority>,
    pub peer: SocketAddr,
    /// How the client reached icecache (`http` or `https`).
    pub proto: &'static str,
}

/// The headers a client's request is sent on with, built in one pass into a map with room for
/// what is added (a clone edited in place rehashed every removed name and grew its table):
/// - hop-by-hop headers, every header `Connection` names, and those `dropped` says are gone;
/// - the client's `Host` (or HTTP/2 `:authority`) moves to `X-Forwarded-Host`, unless the
///   client sent one (the HTTP client sets `Host` from the upstream URI);
/// - the peer's address is appended to the client's `X-Forwarded-For` chain (every line of it,
///   empty elements left out; a chain with a value that is not text is replaced), and
///   `X-Forwarded-Proto` says how it reached icecache unless the client said so already;
/// - several `Cookie` lines (HTTP/2 sends each cookie as a field of its own) become one, joined
///   with `; ` as RFC 9113 §8.2.3 asks before an HTTP/1.1 hop; the same caller then has the
///   same identity over either protocol.
pub fn forwarded_headers(
    client: &HeaderMap,
    dropped: impl Fn(&HeaderName) -> bool,
    from: &Forwarded<'_>,
) -> HeaderMap {
    let named = connection_named(client);
    let mut out = HeaderMap::with_capacity(client.len() + 4);
    let mut host = None;
    let (mut has_forwarded_for, mut has_cookie) = (false, false);
    let (mut has_forwarded_host, mut has_forwarded_proto) = (false, false);
    for (name, value) in client {
        if HOP_BY_HOP.contains(name) || named.contains(name) || dropped(name) {
            continue;
        }
        if name == header::HOST {
            host.get_or_insert(value);
            continue;
        }
        // Both are read whole after this pass, from every line the client sent.
        if name == X_FORWARDED_FOR || name == header::COOKIE {
            has_forwarded_for |= name == X_FORWARDED_FOR;
            has_cookie |= name == header::COOKIE;
            continue;
        }
        has_forwarded_host |= name == X_FORWARDED_HOST;
        has_forwarded_proto |= name == X_FORWARDED_PROTO;
        out.append(name.clone(), value.clone());
    }
    if has_cookie {
        out.insert(header::COOKIE, joined(client.get_all(header::COOKIE)));
    }
    if !has_forwarded_host {
        let host = host.cloned().or_else(|| {
            from.authority
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        if let Some(host) = host {
            out.insert(X_FORWARDED_HOST.clone(), host);
        }
    }
    let chain = has_forwarded_for
        .then(|| forwarded_chain(client.get_all(&X_FORWARDED_FOR), from.peer.ip()))
        .flatten();
    out.insert(
        X_FORWARDED_FOR.clone(),
        chain.unwrap_or_else(|| peer_value(from.peer.ip())),
    );
    if !has_forwarded_proto {
        out.insert(
            X_FORWARDED_PROTO.clone(),
            HeaderValue::from_static(from.proto),
        );
    }
    out
}

/// The values of one header as a single value, joined with `; ` (one value is kept as it is).
fn joined(values: header::GetAll<'_, HeaderValue>) -> HeaderValue {
    let mut iter = values.iter();
    let first = iter
        .next()
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static(""));
    let mut rest = iter.peekable();
    if rest.peek().is_none() {
        return first;
    }
    let mut bytes = first.as_bytes().to_vec();
    for value in rest {
        bytes.extend_from_slice(b"; ");
        bytes.extend_from_slice(value.as_bytes());
    }
    // Valid values joined with `; ` are a valid value.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(bytes)).unwrap_or(first)
}

/// The client's `X-Forwarded-For` elements, then `peer`; None (the peer alone) when the chain
/// has no element or a value that is not text.
fn forwarded_chain(
    values: header::GetAll<'_, HeaderValue>,
    peer: std::net::IpAddr,
) -> Option<HeaderValue> {
    let mut chain = Vec::with_capacity(64);
    for value in &values {
        let text = value.to_str().ok()?;
        for element in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            chain.extend_from_slice(element.as_bytes());
            chain.extend_from_slice(b", ");
        }
    }
    if chain.is_empty() {
        return None;
    }
    let _ = write!(chain, "{peer}");
    HeaderValue::from_maybe_shared(bytes::Bytes::from(chain)).ok()
}

/// The peer's address as a header value; the last one is kept per thread, since every request
/// of a connection (cache hits included) names the same peer.
fn peer_value(ip: std::net::IpAddr) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(std::net::IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((seen, value)) = last.as_ref() {
            if *seen == ip {
                return value.clone();
            }
        }
        let mut text = Vec::with_capacity(48);
        let _ = write!(text, "{ip}");
        // An address is always a valid header value.
        let value = HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        *last = Some((ip, value.clone()));
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        remove_hop_by_hop(&mut h);
        assert!(h.get("x-secret-hop").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert!(h.get(header::TRANSFER_ENCODING).is_none());
        assert_eq!(h.get(header::AUTHORIZATION).unwrap(), "Bearer t");
    }

    fn local() -> Forwarded<'static> {
        Forwarded {
            authority: None,
            peer: "127.0.0.1:5000".parse().unwrap(),
            proto: "http",
        }
    }

    #[test]
    fn a_forwarded_request_carries_no_hop_by_hop_header_nor_one_connection_names() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::PROXY_AUTHORIZATION, HeaderValue::from_static("p"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        let out = forwarded_headers(&h, |_| false, &local());
        for gone in [
            "connection",
            "x-secret-hop",
            "keep-alive",
            "te",
            "proxy-authorization",
        ] {
            assert!(out.get(gone).is_none(), "{gone} was sent on");
        }
        assert_eq!(out.get(header::AUTHORIZATION).unwrap(), "Bearer t");
    }

    #[test]
    fn a_forwarded_request_keeps_every_value_of_a_repeated_header_in_order() {
        let mut h = HeaderMap::new();
        h.append(header::ACCEPT, HeaderValue::from_static("a/b"));
        h.append(header::ACCEPT, HeaderValue::from_static("c/d"));
        let out = forwarded_headers(&h, |_| false, &local());
        let values: Vec<_> = out.get_all(header::ACCEPT).iter().collect();
        assert_eq!(values, ["a/b", "c/d"]);
    }

    #[test]
    fn a_forwarded_request_leaves_out_what_the_caller_drops() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-iceberg-access-delegation",
            HeaderValue::from_static("vended-credentials"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let out = forwarded_headers(
            &h,
            |name| name == "x-iceberg-access-delegation" || name == header::CONTENT_LENGTH,
            &local(),
        );
        assert!(out.get("x-iceberg-access-delegation").is_none());
        assert!(out.get(header::CONTENT_LENGTH).is_none());
    }

    #[test]
    fn the_clients_own_forwarded_host_and_proto_are_kept() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("icecache:8181"));
        h.insert("x-forwarded-host", HeaderValue::from_static("edge.example"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let out = forwarded_headers(&h, |_| false, &local());
        assert_eq!(out.get("x-forwarded-host").unwrap(), "edge.example");
        assert_eq!(out.get("x-forwarded-proto").unwrap(), "https");
        assert!(out.get(header::HOST).is_none());
    }

    #[test]
    fn cookie_fields_reach_the_catalog_as_one_line() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        let out = forwarded_headers(&h, |_| false, &local());
        let values: Vec<_> = out.get_all(header::COOKIE).iter().collect();
        assert_eq!(values, ["a=1; b=2"]);
        let mut one = HeaderMap::new();
        one.insert(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        let out = forwarded_headers(&one, |_| false, &local());
        assert_eq!(out.get(header::COOKIE).unwrap(), "a=1; b=2");
    }

    #[test]
    fn every_forwarded_for_line_is_kept_in_the_chain_without_empty_elements() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("1.1.1.1, ,"));
        h.append("x-forwarded-for", HeaderValue::from_static("2.2.2.2"));
        let out = forwarded_headers(&h, |_| false, &local());
        assert_eq!(
            out.get("x-forwarded-for").unwrap(),
            "1.1.1.1, 2.2.2.2, 127.0.0.1"
        );
        let mut empty = HeaderMap::new();
        empty.insert("x-forwarded-for", HeaderValue::from_static(""));
        let out = forwarded_headers(&empty, |_| false, &local());
        assert_eq!(out.get("x-forwarded-for").unwrap(), "127.0.0.1");
    }

    #[test]
    fn a_forwarded_for_that_is_not_text_is_replaced_by_the_peer() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        let out = forwarded_headers(&h, |_| false, &local());
        assert_eq!(out.get("x-forwarded-for").unwrap(), "127.0.0.1");
    }

    #[test]
    fn an_http2_authority_becomes_the_forwarded_host() {
        let authority: http::uri::Authority = "icecache:8181".parse().unwrap();
        let from = Forwarded {
            authority: Some(&authority),
            peer: "127.0.0.1:5000".parse().unwrap(),
            proto: "https",
        };
        let h = forwarded_headers(&HeaderMap::new(), |_| false, &from);
        assert_eq!(h.get("x-forwarded-host").unwrap(), "icecache:8181");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
    }

    #[test]
    fn forwarded_headers_are_added_and_appended() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("icecache:8181"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        let h = forwarded_headers(&h, |_| false, &local());
        assert_eq!(h.get("x-forwarded-for").unwrap(), "10.0.0.1, 127.0.0.1");
        assert_eq!(h.get("x-forwarded-host").unwrap(), "icecache:8181");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "http");
        assert!(h.get(header::HOST).is_none());
    }
}
