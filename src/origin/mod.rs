//! The one path to the catalog.
//!
//! A client's request becomes an `OriginRequest` once, as a value, before anything else looks at
//! it: hop-by-hop headers (and every header its `Connection` names) removed, the policy's
//! delegation rule applied, `X-Forwarded-*` added, the URI joined under the upstream's base path.
//! The cache key is derived from that value, so a key always describes exactly what the catalog
//! is sent; the cache asks the catalog with the same value and never calls back into the proxy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thiserror::Error;

use crate::catalog::route::Operation;
use crate::listener::tls::{self, ReloadingCert, TlsError, UpstreamTls};
use crate::telemetry::upstream::{Failure, UpstreamMetrics};
use crate::wire::body::{empty, read_to_bytes, Body, ReadError};
use crate::wire::headers::{forwarded_headers, remove_hop_by_hop, Forwarded};

mod outgoing;
pub use outgoing::{Outgoing, Sent};

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

type ClientError = hyper_util::client::legacy::Error;

/// Why the catalog gave no usable answer. Clone, so that one failed fill can fail all its
/// waiters with the same cause.
#[derive(Debug, Clone, Error)]
pub enum OriginError {
    #[error("cannot connect to the catalog")]
    Connect(#[source] Arc<ClientError>),
    #[error("the catalog did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the exchange with the catalog failed")]
    Exchange(#[source] Arc<ClientError>),
    #[error("the catalog sent nothing for {0:?} in the middle of its answer")]
    Stalled(Duration),
    #[error("the catalog's answer broke off")]
    Broken(#[source] Arc<dyn std::error::Error + Send + Sync>),
    #[error("the catalog's answer is longer than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the catalog answered 304 to a request that was not conditional")]
    UnexpectedNotModified,
}

impl OriginError {
    pub fn status(&self) -> StatusCode {
        match self {
            OriginError::Timeout(_) | OriginError::Stalled(_) => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// The `kind` label of `icecache_upstream_errors_total`.
    pub fn failure(&self) -> Failure {
        match self {
            OriginError::Connect(_) => Failure::Connect,
            OriginError::Timeout(_) | OriginError::Stalled(_) => Failure::Timeout,
            _ => Failure::Protocol,
        }
    }
}

impl From<ReadError> for OriginError {
    fn from(error: ReadError) -> OriginError {
        match error {
            ReadError::TooLarge { limit } => OriginError::TooLarge { limit },
            ReadError::Stalled(idle) => OriginError::Stalled(idle),
            ReadError::Broken(cause) => OriginError::Broken(Arc::from(cause)),
        }
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
static CONDITIONALS: [HeaderName; 5] = [
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
    pub request_id: Arc<str>,
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
fn sent_headers(client: &HeaderMap, authority: Option<&Authority>, how: &Sending) -> HeaderMap {
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
    if let Ok(id) = HeaderValue::from_str(&how.request_id) {
        headers.insert(X_REQUEST_ID.clone(), id);
    }
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
fn join(url: &UpstreamUrl, path_and_query: Option<&PathAndQuery>) -> Result<Uri, UnsendablePath> {
    let pq = match path_and_query {
        Some(pq) if url.base_path.is_empty() => pq.clone(),
        _ => {
            let client = path_and_query.map_or("/", PathAndQuery::as_str);
            let joined = format!("{}{client}", url.base_path);
            PathAndQuery::try_from(joined.as_str()).map_err(|_| UnsendablePath)?
        }
    };
    Uri::builder()
        .scheme(url.scheme.clone())
        .authority(url.authority.clone())
        .path_and_query(pq)
        .build()
        .map_err(|_| UnsendablePath)
}

/// A whole answer from the catalog, hop-by-hop headers removed.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

pub struct Origin {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    url: UpstreamUrl,
    request_timeout: Duration,
    answered: AtomicBool,
    metrics: Arc<UpstreamMetrics>,
}

impl Origin {
    /// Also returns the client certificate, when there is one, so that it can be reloaded.
    pub fn new(
        url: UpstreamUrl,
        tls_settings: &UpstreamTls,
        connect_timeout: Duration,
        request_timeout: Duration,
        metrics: Arc<UpstreamMetrics>,
    ) -> Result<(Self, Option<Arc<ReloadingCert>>), TlsError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let (tls, client_cert) = tls::client_config(tls_settings)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            // Relayed responses keep the catalog's header case.
            .http1_preserve_header_case(true)
            .build(connector);
        let origin = Origin {
            client,
            url,
            request_timeout,
            answered: AtomicBool::new(false),
            metrics,
        };
        Ok((origin, client_cert))
    }

    pub fn url(&self) -> &UpstreamUrl {
        &self.url
    }

    /// How long the catalog may take to produce a response head, and the longest silence
    /// inside a body.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Whether the catalog has ever answered (any status): what `/readyz` reports.
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// Sends a request; the response head must come within the request timeout, the body
    /// then streams at the client's pace.
    pub async fn send(
        &self,
        request: OriginRequest,
        body: Body,
    ) -> Result<Response<Incoming>, OriginError> {
        let operation = request.operation;
        // A 304 answers a conditional request only; to any other it would reach a client that
        // asked for none (the Java client throws on one), whichever route relays it.
        let conditional = CONDITIONALS
            .iter()
            .any(|name| request.headers.contains_key(name));
        let mut outgoing = Request::new(body);
        *outgoing.method_mut() = request.method;
        *outgoing.uri_mut() = request.uri;
        *outgoing.headers_mut() = request.headers;
        let started = tokio::time::Instant::now();
        let outcome =
            tokio::time::timeout(self.request_timeout, self.client.request(outgoing)).await;
        self.metrics
            .duration(operation)
            .observe(started.elapsed().as_secs_f64());
        let result = match outcome {
            Err(_) => Err(OriginError::Timeout(self.request_timeout)),
            Ok(Err(e)) if e.is_connect() => Err(OriginError::Connect(Arc::new(e))),
            Ok(Err(e)) => Err(OriginError::Exchange(Arc::new(e))),
            Ok(Ok(response))
                if response.status() == http::StatusCode::NOT_MODIFIED && !conditional =>
            {
                Err(OriginError::UnexpectedNotModified)
            }
            Ok(Ok(response)) => Ok(response),
        };
        match &result {
            Ok(response) => {
                self.answered.store(true, Ordering::Relaxed);
                self.metrics.response(response.status());
            }
            Err(e) => self.metrics.failure(e.failure()),
        }
        result
    }

    /// Sends a bodiless request and reads the answer whole, at most `limit` bytes.
    pub async fn fetch(
        &self,
        request: OriginRequest,
        limit: usize,
    ) -> Result<Fetched, OriginError> {
        let response = self.send(request, empty()).await?;
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        let body = read_to_bytes(body, limit, self.request_timeout)
            .await
            .map_err(|e| self.read_failed(e))?;
        Ok(Fetched {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// A failure reading an answer's body, counted in `icecache_upstream_errors_total` as a
    /// failure before the head is: a body that stalls or breaks off is the catalog's failure
    /// too. One longer than icecache reads is not (that is icecache's own limit).
    pub fn read_failed(&self, error: ReadError) -> OriginError {
        let error = OriginError::from(error);
        if !matches!(error, OriginError::TooLarge { .. }) {
            self.metrics.failure(error.failure());
        }
        error
    }

    /// The request `/readyz` sends until the catalog has answered once.
    pub fn probe_request(&self) -> Option<OriginRequest> {
        Some(OriginRequest {
            method: Method::GET,
            uri: join(&self.url, Some(&PathAndQuery::from_static("/v1/config"))).ok()?,
            headers: HeaderMap::new(),
            operation: Operation::Config,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            request_id: Arc::from("r-1"),
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
