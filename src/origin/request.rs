//! A request to the catalog, built once from a client's request: the upstream URL it is sent
//! under, the headers it carries (the forwarding rules, the request id, no request to vend
//! credentials under strip and inject), and the forms a fill sends (unconditional, for the
//! identity encoding, or conditional on the catalog's own ETag).

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Uri};
use thiserror::Error;

use crate::catalog::route::Operation;
use crate::wire::headers::{forwarded_headers, Forwarded};
use crate::wire::request_id::RequestId;

pub static ACCESS_DELEGATION: HeaderName = HeaderName::from_static("x-iceberg-access-delegation");
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The catalog's base URL, split the way requests are rebuilt from it. It never holds a user
/// or password (the configuration refuses one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    pub scheme: Scheme,
    pub authority: Authority,
    /// Without a trailing slash; empty when the catalog is served at the root.
    pub base_path: String,
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// A client's path that cannot be sent on under the upstream's base path.
#[derive(Debug, Error)]
#[error("the request path cannot be sent to the catalog")]
pub struct UnsendablePath;

/// A request to the catalog, built once from a client's request.
#[derive(Debug, Clone)]
pub struct OriginRequest {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub operation: Operation,
}

/// Conditionals icecache answers itself on loadTable: the client holds icecache's ETags,
/// which mean nothing to the catalog.
pub static CONDITIONALS: [HeaderName; 5] = [
    header::IF_NONE_MATCH,
    header::IF_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
];

/// How a client's request is sent on, besides its own headers: who sent it, how it reached
/// icecache, and what the policy and the route ask of the catalog.
#[derive(Debug, Clone)]
pub struct Sending {
    pub peer: SocketAddr,
    /// How the client reached icecache (`http` or `https`).
    pub proto: &'static str,
    /// Whether the policy lets the catalog be asked to vend credentials.
    pub forwards_delegation: bool,
    /// Sent as `X-Request-Id`.
    pub request_id: RequestId,
    /// Whether the answer is read (the policy stage): then it is asked for uncompressed.
    pub identity_encoding: bool,
}

impl OriginRequest {
    pub fn new(
        parts: &http::request::Parts,
        how: &Sending,
        operation: Operation,
        url: &UpstreamUrl,
    ) -> Result<Self, UnsendablePath> {
        Ok(OriginRequest {
            method: parts.method.clone(),
            uri: join(url, parts.uri.path_and_query())?,
            headers: sent_headers(&parts.headers, parts.uri.authority(), how),
            operation,
        })
    }

    /// The request without the client's conditionals.
    pub fn unconditional(mut self) -> Self {
        for name in &CONDITIONALS {
            self.headers.remove(name);
        }
        self
    }

    /// The request as a cache fill sends it: unconditional, for the identity encoding (icecache
    /// keeps plain bodies and makes its own gzip copy).
    pub fn for_fill(self) -> Self {
        let mut request = self.unconditional();
        request.identity_encoding();
        request
    }

    /// Asks for the body in the identity encoding: without `Accept-Encoding` any coding would
    /// be acceptable (RFC 9110 §12.5.3).
    pub fn identity_encoding(&mut self) {
        self.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }

    /// This fill made conditional on the catalog's own ETag (revalidation).
    pub fn conditional(&self, upstream_etag: Option<&HeaderValue>) -> Self {
        let mut request = self.clone();
        if let Some(etag) = upstream_etag {
            request.headers.insert(header::IF_NONE_MATCH, etag.clone());
        }
        request
    }
}

/// The headers a client's request is sent to the catalog with: the forwarding rules, under
/// strip and inject no request to vend credentials, the request id, and the identity encoding
/// when the answer is to be read (without `Accept-Encoding` any coding would be acceptable,
/// RFC 9110 §12.5.3).
pub(super) fn sent_headers(
    client: &HeaderMap,
    authority: Option<&Authority>,
    how: &Sending,
) -> HeaderMap {
    let from = Forwarded {
        authority,
        peer: how.peer,
        proto: how.proto,
    };
    let mut headers = forwarded_headers(
        client,
        |name| {
            name == header::CONTENT_LENGTH
                || (!how.forwards_delegation && name == ACCESS_DELEGATION)
        },
        &from,
    );
    headers.insert(X_REQUEST_ID.clone(), how.request_id.header_value());
    if how.identity_encoding {
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    headers
}

/// `base_path` + the client's path and query, as an absolute upstream URI. Without a base
/// path the client's (already parsed) path and query is reused as it is.
pub(super) fn join(
    url: &UpstreamUrl,
    path_and_query: Option<&PathAndQuery>,
) -> Result<Uri, UnsendablePath> {
    let pq = match path_and_query {
        Some(pq) if url.base_path.is_empty() => pq.clone(),
        _ => {
            let client = path_and_query.map_or("/", PathAndQuery::as_str);
            let joined = format!("{}{client}", url.base_path);
            PathAndQuery::try_from(joined.as_str()).map_err(|_| UnsendablePath)?
        }
    };
    // From its parts directly: the builder moves its parts through a `Result` at each step.
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(url.scheme.clone());
    parts.authority = Some(url.authority.clone());
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).map_err(|_| UnsendablePath)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn url() -> UpstreamUrl {
        UpstreamUrl {
            scheme: Scheme::HTTP,
            authority: "catalog:9001".parse().unwrap(),
            base_path: "/iceberg".into(),
        }
    }

    fn request(headers: &[(&str, &str)], forwards_delegation: bool) -> OriginRequest {
        let mut builder = Request::get("/v1/p/namespaces/db/tables/t?snapshots=refs");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        let how = Sending {
            peer: "10.0.0.9:5000".parse().unwrap(),
            proto: "http",
            forwards_delegation,
            request_id: RequestId::of(&HeaderMap::new()),
            identity_encoding: false,
        };
        OriginRequest::new(&parts, &how, Operation::LoadTable, &url()).unwrap()
    }

    #[test]
    fn the_uri_is_joined_under_the_base_path() {
        assert_eq!(
            request(&[], true).uri.to_string(),
            "http://catalog:9001/iceberg/v1/p/namespaces/db/tables/t?snapshots=refs"
        );
    }

    #[test]
    fn headers_named_in_connection_never_reach_the_catalog() {
        let sent = request(
            &[
                ("authorization", "Bearer a"),
                ("x-iceberg-access-delegation", "vended-credentials"),
                ("connection", "authorization, x-iceberg-access-delegation"),
            ],
            true,
        );
        assert!(sent.headers.get("authorization").is_none());
        assert!(sent.headers.get("x-iceberg-access-delegation").is_none());
        assert!(sent.headers.get("connection").is_none());
    }

    #[test]
    fn without_delegation_the_catalog_is_not_asked_to_vend() {
        let sent = request(
            &[("x-iceberg-access-delegation", "vended-credentials")],
            false,
        );
        assert!(sent.headers.get(&ACCESS_DELEGATION).is_none());
        assert_eq!(sent.headers["x-forwarded-for"], "10.0.0.9");
    }

    #[test]
    fn a_fill_is_unconditional_and_asks_for_identity() {
        let sent = request(
            &[("if-none-match", "\"x\""), ("accept-encoding", "gzip")],
            true,
        )
        .for_fill();
        assert!(sent.headers.get("if-none-match").is_none());
        assert_eq!(sent.headers["accept-encoding"], "identity");
        let revalidation = sent.conditional(Some(&HeaderValue::from_static("\"up\"")));
        assert_eq!(revalidation.headers["if-none-match"], "\"up\"");
    }
}
