//! The connection pool toward the catalog: builds upstream URIs under the base path, bounds
//! connect and response-head time, and records what the catalog answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thiserror::Error;

use crate::body::Body;
use crate::config::{Config, UpstreamUrl};
use crate::metrics::Metrics;
use crate::route::Operation;
use crate::tls::{ReloadingCert, TlsError};

#[derive(Debug, Error)]
pub enum UpstreamError {
    #[error("upstream catalog {upstream} is unreachable: {message}")]
    Unreachable { upstream: String, message: String },
    #[error("upstream catalog {upstream} did not answer within {timeout:?}")]
    Timeout { upstream: String, timeout: Duration },
    #[error("upstream catalog {upstream} broke the exchange: {message}")]
    Protocol { upstream: String, message: String },
    #[error("upstream path {0:?} is not a valid URI")]
    BadUri(String),
}

impl UpstreamError {
    pub fn status(&self) -> http::StatusCode {
        match self {
            UpstreamError::Timeout { .. } => http::StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::BadUri(_) => http::StatusCode::BAD_REQUEST,
            _ => http::StatusCode::BAD_GATEWAY,
        }
    }

    pub fn error_type(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "GatewayTimeoutException",
            UpstreamError::BadUri(_) => "BadRequestException",
            _ => "BadGatewayException",
        }
    }

    /// The `kind` label of `icecache_upstream_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable { .. } => "connect",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Protocol { .. } => "protocol",
            UpstreamError::BadUri(_) => "uri",
        }
    }
}

pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    url: UpstreamUrl,
    request_timeout: Duration,
    answered: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Upstream {
    /// The TLS configuration was checked with the rest of the config; it cannot fail here
    /// unless the files changed in between.
    /// Also returns the client certificate, when there is one, so that it can be reloaded.
    pub fn new(
        config: &Config,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, Option<Arc<ReloadingCert>>), TlsError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let (tls, client_cert) = crate::tls::client_config(&config.upstream_tls)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            // Relayed responses keep the catalog's header case (an `ETag` stays `ETag`).
            .http1_preserve_header_case(true)
            .build(connector);
        let upstream = Upstream {
            client,
            url: config.upstream.clone(),
            request_timeout: config.request_timeout,
            answered: AtomicBool::new(false),
            metrics,
        };
        Ok((upstream, client_cert))
    }

    /// The upstream URI for a client's path and query, under the upstream's base path.
    pub fn uri_for(&self, path_and_query: &str) -> Result<Uri, UpstreamError> {
        let joined = format!("{}{}", self.url.base_path, path_and_query);
        let pq = PathAndQuery::try_from(joined.as_str())
            .map_err(|_| UpstreamError::BadUri(path_and_query.to_owned()))?;
        Uri::builder()
            .scheme(self.url.scheme.clone())
            .authority(self.url.authority.clone())
            .path_and_query(pq)
            .build()
            .map_err(|_| UpstreamError::BadUri(path_and_query.to_owned()))
    }

    /// How long the catalog may take to produce a response head (and a fill to read a body).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Whether the catalog has ever answered (any status): what `/readyz` reports.
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// Sends a request whose URI is already an upstream URI; the response head must come within
    /// the request timeout, the body then streams at the client's pace.
    pub async fn send(
        &self,
        operation: Operation,
        request: Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let started = tokio::time::Instant::now();
        let outcome =
            tokio::time::timeout(self.request_timeout, self.client.request(request)).await;
        self.metrics
            .upstream_duration
            .with_label_values(&[operation.as_str()])
            .observe(started.elapsed().as_secs_f64());
        let result = match outcome {
            Err(_) => Err(UpstreamError::Timeout {
                upstream: self.url.to_string(),
                timeout: self.request_timeout,
            }),
            Ok(Err(e)) if e.is_connect() => Err(UpstreamError::Unreachable {
                upstream: self.url.to_string(),
                message: error_chain(&e),
            }),
            Ok(Err(e)) => Err(UpstreamError::Protocol {
                upstream: self.url.to_string(),
                message: error_chain(&e),
            }),
            Ok(Ok(response)) => Ok(response),
        };
        match &result {
            Ok(response) => {
                self.answered.store(true, Ordering::Relaxed);
                self.metrics
                    .upstream_responses
                    .with_label_values(&[response.status().as_str()])
                    .inc();
            }
            Err(e) => self
                .metrics
                .upstream_errors
                .with_label_values(&[e.kind()])
                .inc(),
        }
        result
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
