//! Relaying the catalog's answer to the client: streamed as it comes, unless it is an answer
//! the policy stage must see (a successful answer that may carry credentials, under `strip` or
//! `inject`), which is read whole, processed, and sent as processed.

use http::header::{self, HeaderValue};
use http::{Method, Response};
use http_body::Body as _;
use hyper::body::Incoming;

use super::exchange::{answer_shape, origin_request, processes, Exchange};
use crate::cache::POLICY_READ_LIMIT;
use crate::catalog::lenient::may_be_the_api;
use crate::catalog::route::Operation;
use crate::error::ProxyError;
use crate::origin::OriginRequest;
use crate::policy::stage::{self, Shape};
use crate::wire::body::{pieces, read_body, stream, Body};
use crate::wire::headers::remove_hop_by_hop;

pub async fn relay(
    exchange: &Exchange<'_>,
    response: Response<Incoming>,
    shape: Option<Shape>,
) -> Result<Response<Body>, ProxyError> {
    let idle = exchange.settings.request_timeout;
    relay_body(exchange, response.map(|body| stream(body, idle)), shape).await
}

/// `relay` for an answer whose body is icecache's own already (read whole, or streamed with
/// its idle bound).
pub async fn relay_body(
    exchange: &Exchange<'_>,
    response: Response<Body>,
    shape: Option<Shape>,
) -> Result<Response<Body>, ProxyError> {
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    let idle = exchange.settings.request_timeout;
    if exchange.route.operation.is_cached() {
        // Clients only ever see icecache's validators for a table's or a view's
        // representation.
        parts.headers.remove(header::ETAG);
        parts.headers.remove(header::LAST_MODIFIED);
    }
    if !processes(shape, &exchange.policy) || body.is_end_stream() {
        return Ok(Response::from_parts(parts, body));
    }
    // A successful answer is read in its route's shape; any other JSON object is scrubbed too.
    let shape = match shape {
        Some(shape) if parts.status.is_success() => shape,
        _ => Shape::Unknown,
    };
    let bytes = read_body(body, POLICY_READ_LIMIT, idle)
        .await
        .map_err(|e| ProxyError::Origin(exchange.state.origin.read_failed(e)))?;
    // Asked for the identity encoding; a catalog that encodes anyway is decoded, not trusted.
    let stage = &exchange.state.stage;
    let bytes = stage.decode(&mut parts.headers, bytes, POLICY_READ_LIMIT)?;
    if bytes.is_empty() {
        return Ok(Response::from_parts(parts, pieces(vec![bytes])));
    }
    let processed = stage
        .process_off_thread(shape, bytes, exchange.policy.clone())
        .await?;
    let served = stage::served(
        &processed.body,
        processed.config_empty,
        shape,
        &exchange.policy,
    );
    stage.served(&served);
    let length: usize = served.iter().map(bytes::Bytes::len).sum();
    // The catalog's validators named the body it sent, not this one.
    parts.headers.remove(header::ETAG);
    parts.headers.remove(header::CONTENT_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    Ok(Response::from_parts(parts, pieces(served)))
}

/// Sends a request on to the catalog and relays its answer, through the policy stage where
/// the route's answer may carry credentials.
pub async fn forward(
    exchange: &Exchange<'_>,
    parts: http::request::Parts,
    body: Incoming,
) -> Result<Response<Body>, ProxyError> {
    let shape = answer_shape(exchange.route.operation);
    let origin = origin_request(exchange, &parts, shape)?;
    if !reads_unnamed(exchange.route.operation, &parts) {
        return send_on(exchange, origin, body, shape).await;
    }
    // A read of the catalog's API icecache cannot name (`;parameters`, a trailing `/`, a
    // decoded `/`, `//v1/`, `/%76%31/`): a catalog may route it to a table's load, whose
    // validators clients must only ever get from icecache. It goes unconditional, and its
    // answer without validators.
    let mut response = send_on(exchange, origin.unconditional(), body, shape).await?;
    response.headers_mut().remove(header::ETAG);
    response.headers_mut().remove(header::LAST_MODIFIED);
    Ok(response)
}

/// Whether a request is a read that names no operation icecache knows, on a path a catalog
/// might take for one under `/v1/`.
fn reads_unnamed(operation: Operation, parts: &http::request::Parts) -> bool {
    operation == Operation::Other
        && matches!(parts.method, Method::GET | Method::HEAD)
        && may_be_the_api(parts.uri.path())
}

/// Sends a request built for the route, with the client's body, and relays the answer.
pub async fn send_on(
    exchange: &Exchange<'_>,
    origin: OriginRequest,
    body: Incoming,
    shape: Option<Shape>,
) -> Result<Response<Body>, ProxyError> {
    let idle = exchange.settings.request_timeout;
    let response = exchange
        .state
        .origin
        .send(origin, crate::wire::body::stream(body, idle))
        .await?;
    relay(exchange, response, shape).await
}
