//! Errors icecache answers with itself, rendered in one place. Every layer's error travels here
//! as a value; `respond` logs its cause with the peer and the request id, and writes the
//! Iceberg error body (`{"error":{"message","type","code"}}`), so every client's error handling
//! applies unchanged. The message a client sees names what went wrong, never an address, a
//! credential or the catalog's own words; the log has the whole chain of causes.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use thiserror::Error;

use crate::cache::{CacheError, CachePhase, Failure};
use crate::catalog::route::{Operation, RouteError};
use crate::origin::{OriginError, UnsendablePath};
use crate::policy::stage::Refusal;
use crate::replays::Refused as ReplayRefused;
use crate::wire::body::{empty, full, Body, ReadError};
use crate::wire::host::HostError;
use crate::wire::request_id::RequestId;
use crate::wire::target::TargetError;

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("bad request: {0}")]
    Route(#[from] RouteError),
    #[error(transparent)]
    Path(#[from] UnsendablePath),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("CONNECT is not an Iceberg REST operation: icecache does not open tunnels")]
    Tunnel,
    #[error("the request body could not be read: {0}")]
    RequestBody(#[source] ReadError),
    #[error(transparent)]
    Origin(#[from] OriginError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Cache(#[from] Failure),
    #[error("the exchange with the catalog ended abnormally")]
    Internal,
    #[error(
        "this replica cannot reach the tier's Redis (or has not yet): the other replicas would \
         not see a write through it; send it again in a second, or through another replica"
    )]
    OutOfTouch,
    #[error(
        "the catalog answered this write, but this replica could not tell the tier's other \
         replicas of it within 5 s (their Redis did not answer): they may serve the state before \
         it until Redis is back; the commit state is unknown to the tier"
    )]
    WriteUnseen,
    #[error(transparent)]
    Replay(#[from] ReplayRefused),
}

/// "Come back in a second."
static ONE_SECOND: HeaderValue = HeaderValue::from_static("1");

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Route(_) | ProxyError::Path(_) | ProxyError::Host(_) => {
                StatusCode::BAD_REQUEST
            }
            ProxyError::Tunnel => StatusCode::METHOD_NOT_ALLOWED,
            // RFC 9112 §6.1: a coding the server does not understand.
            ProxyError::Target(TargetError::TransferCoding) => StatusCode::NOT_IMPLEMENTED,
            ProxyError::Target(_) => StatusCode::BAD_REQUEST,
            ProxyError::RequestBody(ReadError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::RequestBody(ReadError::Stalled(_)) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::RequestBody(ReadError::Broken(_)) => StatusCode::BAD_REQUEST,
            ProxyError::Origin(e) => e.status(),
            ProxyError::Refused(_) | ProxyError::Internal => StatusCode::BAD_GATEWAY,
            ProxyError::OutOfTouch => StatusCode::SERVICE_UNAVAILABLE,
            // What the spec gives a gateway when "the commit state is unknown".
            ProxyError::WriteUnseen => StatusCode::BAD_GATEWAY,
            ProxyError::Replay(refused) => match refused {
                ReplayRefused::BadKey(_) => StatusCode::BAD_REQUEST,
                ReplayRefused::InFlight => StatusCode::CONFLICT,
                ReplayRefused::Reused => StatusCode::UNPROCESSABLE_ENTITY,
                ReplayRefused::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            },
            ProxyError::Cache(failure) => match &failure.error {
                CacheError::Origin(e) => e.status(),
                CacheError::Refused(_) | CacheError::Abandoned => StatusCode::BAD_GATEWAY,
            },
        }
    }

    fn error_type(&self) -> &'static str {
        if matches!(self, ProxyError::WriteUnseen) {
            return "CommitStateUnknownException";
        }
        match self.status() {
            StatusCode::GATEWAY_TIMEOUT => "GatewayTimeoutException",
            StatusCode::BAD_GATEWAY => "BadGatewayException",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableException",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestTooLargeException",
            StatusCode::REQUEST_TIMEOUT => "RequestTimeoutException",
            StatusCode::TOO_MANY_REQUESTS => "TooManyRequestsException",
            StatusCode::CONFLICT => "ConflictException",
            StatusCode::UNPROCESSABLE_ENTITY => "UnprocessableEntityException",
            StatusCode::NOT_IMPLEMENTED => "UnsupportedOperationException",
            _ => "BadRequestException",
        }
    }

    /// The `Retry-After` the client gets, when the catalog asked for patience.
    fn retry_after(&self) -> Option<&HeaderValue> {
        match self {
            ProxyError::Replay(ReplayRefused::InFlight | ReplayRefused::Store(_))
            | ProxyError::OutOfTouch => Some(&ONE_SECOND),
            ProxyError::Origin(e) => e.retry_after(),
            ProxyError::Cache(Failure {
                error: CacheError::Origin(e),
                ..
            }) => e.retry_after(),
            _ => None,
        }
    }

    /// The cache phase the request was in when it failed (loadTable answers carry it).
    pub fn phase(&self) -> Option<CachePhase> {
        match self {
            ProxyError::Cache(failure) => Some(failure.phase),
            _ => None,
        }
    }

    /// Whether the fault lies with the client (logged quietly) or upstream (logged loudly).
    fn client_fault(&self) -> bool {
        matches!(
            self,
            ProxyError::Route(_)
                | ProxyError::Path(_)
                | ProxyError::Host(_)
                | ProxyError::Target(_)
                | ProxyError::Tunnel
                | ProxyError::RequestBody(_)
                | ProxyError::Replay(
                    ReplayRefused::BadKey(_) | ReplayRefused::InFlight | ReplayRefused::Reused
                )
        )
    }
}

/// What the log line of a failed request names.
pub struct Context<'a> {
    pub request_id: &'a RequestId,
    pub peer: SocketAddr,
    pub method: &'a Method,
    pub operation: Operation,
}

/// Logs the failure with its causes and writes the Iceberg error a client gets: to a `HEAD`, its
/// status and headers without the body (hyper leaves a HEAD answer's body out on HTTP/1.1 only).
pub fn respond(error: &ProxyError, context: &Context<'_>) -> Response<Body> {
    macro_rules! log {
        ($level:expr, $what:literal) => {
            tracing::event!(
                $level,
                request_id = %context.request_id,
                peer = %context.peer,
                method = %context.method,
                route = context.operation.as_str(),
                error = %chain(error),
                $what
            )
        };
    }
    if error.client_fault() {
        log!(tracing::Level::DEBUG, "request refused");
    } else {
        log!(tracing::Level::WARN, "request failed");
    }
    let mut response = iceberg_error(error.status(), error.error_type(), &error.to_string());
    if let Some(wait) = error.retry_after() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait.clone());
    }
    if context.method == Method::HEAD {
        *response.body_mut() = empty();
    }
    response
}

/// The error and each of its sources, `: `-separated.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An Iceberg error response with the given status, type and message.
pub fn iceberg_error(status: StatusCode, error_type: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "error": { "message": message, "type": error_type, "code": status.as_u16() }
    });
    let mut response = Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
