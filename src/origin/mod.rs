//! The one path to the catalog.
//!
//! A client's request becomes an `OriginRequest` once, as a value, before anything else looks at
//! it: hop-by-hop headers (and every header its `Connection` names) removed, the policy's
//! delegation rule applied, `X-Forwarded-*` added, the URI joined under the upstream's base path.
//! The cache key is derived from that value, so a key always describes exactly what the catalog
//! is sent; the cache asks the catalog with the same value and never calls back into the proxy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode};
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
use crate::wire::headers::remove_hop_by_hop;
use gate::{Gate, Limits, Place, Shed};

pub mod gate;
mod outgoing;
mod request;
mod throttle;
pub use outgoing::{Outgoing, Sent};
use request::join;
pub use request::{
    OriginRequest, Sending, UnsendablePath, UpstreamUrl, ACCESS_DELEGATION, CONDITIONALS,
    X_REQUEST_ID,
};

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
    /// Refused before reaching the catalog: it already has `upstream_max_in_flight` requests
    /// and the queue is full, or the wait for a place was too long.
    #[error("the catalog has upstream_max_in_flight requests from icecache and {0}")]
    Shed(Shed),
    /// A 429, or a refusal that names throttling (AWS Glue's 400): the client is told to wait.
    #[error("the catalog is throttling requests (it answered {status})")]
    Throttled {
        status: StatusCode,
        retry_after: HeaderValue,
    },
}

impl OriginError {
    pub fn status(&self) -> StatusCode {
        match self {
            OriginError::Timeout(_) | OriginError::Stalled(_) => StatusCode::GATEWAY_TIMEOUT,
            OriginError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            OriginError::Shed(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// How long the client should wait before trying again, when the catalog said.
    pub fn retry_after(&self) -> Option<&HeaderValue> {
        static SHED_RETRY_AFTER: HeaderValue = HeaderValue::from_static("1");
        match self {
            OriginError::Throttled { retry_after, .. } => Some(retry_after),
            OriginError::Shed(_) => Some(&SHED_RETRY_AFTER),
            _ => None,
        }
    }

    /// The `kind` label of `icecache_upstream_errors_total`.
    pub fn failure(&self) -> Failure {
        match self {
            OriginError::Connect(_) => Failure::Connect,
            OriginError::Timeout(_) | OriginError::Stalled(_) => Failure::Timeout,
            OriginError::Throttled { .. } => Failure::Throttled,
            OriginError::Shed(_) => Failure::Shed,
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
    gate: Gate,
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
        limits: Limits,
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
            gate: Gate::new(limits),
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
    /// then streams at the client's pace (its place at the catalog is given back at the head).
    pub async fn send(
        &self,
        request: OriginRequest,
        body: Body,
    ) -> Result<Response<Incoming>, OriginError> {
        self.send_in_place(request, body)
            .await
            .map(|(response, _place)| response)
    }

    /// Sends a request once it has a place at the catalog, and returns the place with the
    /// answer's head: whoever reads the body whole keeps it until then.
    async fn send_in_place(
        &self,
        request: OriginRequest,
        body: Body,
    ) -> Result<(Response<Incoming>, Place), OriginError> {
        let place = match self.gate.enter().await {
            Ok(place) => place,
            Err(shed) => {
                let error = OriginError::Shed(shed);
                self.metrics.failure(error.failure());
                return Err(error);
            }
        };
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
        let result = match result {
            Ok(response) => {
                self.answered.store(true, Ordering::Relaxed);
                self.metrics.response(response.status());
                if throttle::is_throttling(response.status(), response.headers()) {
                    // Its body (Glue's own words) is dropped: the client gets an Iceberg error.
                    Err(OriginError::Throttled {
                        status: response.status(),
                        retry_after: throttle::retry_after(response.headers()),
                    })
                } else {
                    Ok(response)
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            self.metrics.failure(e.failure());
        }
        result.map(|response| (response, place))
    }

    /// Sends a bodiless request and reads the answer whole, at most `limit` bytes.
    pub async fn fetch(
        &self,
        request: OriginRequest,
        limit: usize,
    ) -> Result<Fetched, OriginError> {
        let (response, place) = self.send_in_place(request, empty()).await?;
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        let body = read_to_bytes(body, limit, self.request_timeout)
            .await
            .map_err(|e| self.read_failed(e))?;
        drop(place);
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
