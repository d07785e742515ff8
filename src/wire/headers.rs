//! Header rules of a reverse proxy: hop-by-hop headers stay on their hop, and the catalog learns
//! who asked through `X-Forwarded-*`.

use std::io::Write as _;
use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
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

/// Removes the hop-by-hop headers, including any that `Connection` names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Tells the catalog who asked: the client's `Host` (or HTTP/2 `:authority`) moves to
/// `X-Forwarded-Host` (the HTTP client sets `Host` from the upstream URI), the client's address
/// is appended to `X-Forwarded-For`, and `X-Forwarded-Proto` says how it reached icecache.
/// Hop-by-hop headers must be gone already (`remove_hop_by_hop`).
pub fn add_forwarded(
    headers: &mut HeaderMap,
    authority: Option<&http::uri::Authority>,
    peer: SocketAddr,
    proto: &'static str,
) {
    let host = headers
        .remove(header::HOST)
        .or_else(|| authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()));
    if let Some(host) = host {
        if !headers.contains_key(&X_FORWARDED_HOST) {
            headers.insert(X_FORWARDED_HOST.clone(), host);
        }
    }
    let value = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(existing) => {
            let mut forwarded_for = Vec::with_capacity(existing.len() + 48);
            forwarded_for.extend_from_slice(existing.as_bytes());
            forwarded_for.extend_from_slice(b", ");
            let _ = write!(forwarded_for, "{}", peer.ip());
            HeaderValue::from_maybe_shared(bytes::Bytes::from(forwarded_for)).ok()
        }
        None => Some(peer_value(peer.ip())),
    };
    if let Some(value) = value {
        headers.insert(X_FORWARDED_FOR.clone(), value);
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
    }
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

    #[test]
    fn an_http2_authority_becomes_the_forwarded_host() {
        let mut h = HeaderMap::new();
        let authority: http::uri::Authority = "icecache:8181".parse().unwrap();
        add_forwarded(
            &mut h,
            Some(&authority),
            "127.0.0.1:5000".parse().unwrap(),
            "https",
        );
        assert_eq!(h.get("x-forwarded-host").unwrap(), "icecache:8181");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
    }

    #[test]
    fn forwarded_headers_are_added_and_appended() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("icecache:8181"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        add_forwarded(&mut h, None, "127.0.0.1:5000".parse().unwrap(), "http");
        assert_eq!(h.get("x-forwarded-for").unwrap(), "10.0.0.1, 127.0.0.1");
        assert_eq!(h.get("x-forwarded-host").unwrap(), "icecache:8181");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "http");
        assert!(h.get(header::HOST).is_none());
    }
}
