//! Errors icecache itself answers with, written as Iceberg error bodies
//! (`{"error":{"message","type","code"}}`) so every client's error handling applies unchanged.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use thiserror::Error;

use crate::body::{full, Body};
use crate::route::RouteError;
use crate::upstream::UpstreamError;

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("bad request: {0}")]
    BadRequest(#[from] RouteError),
    #[error("request body could not be read: {0}")]
    RequestBody(String),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadRequest(_) | ProxyError::RequestBody(_) => StatusCode::BAD_REQUEST,
            ProxyError::Upstream(e) => e.status(),
        }
    }

    fn error_type(&self) -> &'static str {
        match self {
            ProxyError::BadRequest(_) | ProxyError::RequestBody(_) => "BadRequestException",
            ProxyError::Upstream(e) => e.error_type(),
        }
    }

    pub fn into_response(self) -> Response<Body> {
        iceberg_error(self.status(), self.error_type(), &self.to_string())
    }
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
