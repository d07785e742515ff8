//! Writes: passed to the catalog, and, when they may have happened (a 2xx, a 5xx, no answer at
//! all), the tables they touch are invalidated before the answer reaches the client. A write
//! the catalog refused (4xx) did not happen and invalidates nothing, so no client can empty
//! the cache by sending writes it is not allowed to make; a conflict (409) is the exception: it
//! says the table moved behind the writer's back. A write the other replicas of a tier
//! may not see yet (this replica could not tell them in time) is not reported as a success. A write that holds an
//! `Idempotency-Key` under `provide` (`serve_held`) has its answer kept for the key's retries
//! in the same task (see `kept`).

use bytes::Bytes;
use http::Request;
use hyper::body::Incoming;

use super::exchange::{answer_shape, origin_request, Exchange};
use super::kept::Keeping;
use super::relay;
use crate::cache::Cause;
use crate::catalog::writes::{names_in_body, touched, Touched};
use crate::coordination::Cover;
use crate::error::ProxyError;
use crate::policy::stage::OFFLOAD_BYTES;
use crate::wire::body::{full, read_to_bytes, stream, Body};

/// Largest request body icecache reads to learn which tables a write names (or to fingerprint
/// a request with an `Idempotency-Key`).
pub const MAX_INSPECTED_BODY: usize = 64 << 20;

pub async fn serve(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
) -> Result<http::Response<Body>, ProxyError> {
    if exchange.state.tier.refuses_writes() {
        return Err(ProxyError::OutOfTouch);
    }
    let (parts, body) = request.into_parts();
    let operation = exchange.route.operation;
    let idle = exchange.settings.request_timeout;
    let (body, touched) = if names_in_body(operation) {
        let bytes = read_to_bytes(body, MAX_INSPECTED_BODY, idle)
            .await
            .map_err(ProxyError::RequestBody)?;
        let touched = read_touched(&exchange, bytes.clone()).await;
        (full(bytes), touched)
    } else {
        (stream(body, idle), touched(&exchange.route, None))
    };
    send(&exchange, &parts, body, touched, None).await
}

/// A write whose body was read already, holding its `Idempotency-Key`: its answer is kept for
/// the key's retries when final (see `kept`).
pub async fn serve_held(
    exchange: Exchange<'_>,
    parts: http::request::Parts,
    bytes: Bytes,
    keeping: Keeping,
) -> Result<http::Response<Body>, ProxyError> {
    if exchange.state.tier.refuses_writes() {
        return Err(ProxyError::OutOfTouch);
    }
    let touched = if names_in_body(exchange.route.operation) {
        read_touched(&exchange, bytes.clone()).await
    } else {
        touched(&exchange.route, None)
    };
    send(&exchange, &parts, full(bytes), touched, Some(keeping)).await
}

async fn send(
    exchange: &Exchange<'_>,
    parts: &http::request::Parts,
    body: Body,
    touched: Touched,
    keeping: Option<Keeping>,
) -> Result<http::Response<Body>, ProxyError> {
    let operation = exchange.route.operation;
    let shape = answer_shape(operation);
    let sent = origin_request(exchange, parts, shape)?;
    // The exchange with the catalog and the invalidation run in a task of their own: a client
    // that gives up while its write is on its way does not stop the write from counting.
    let origin = exchange.state.origin.clone();
    let cache = exchange.state.cache.clone();
    let idle = exchange.settings.request_timeout;
    let exchanged = tokio::spawn(async move {
        let result = origin.send(sent, body).await;
        let invalidates = match &result {
            Ok(response) => invalidates(response.status()),
            Err(_) => true,
        };
        let mut cover = Cover::Announced;
        if invalidates {
            if let Some(cache) = &cache {
                (_, cover) = cache
                    .invalidate_everywhere(&touched, Cause::Write(operation))
                    .await;
            }
        }
        let answer = match keeping {
            Some(keeping) => keeping.settle(result).await,
            None => result
                .map(|response| response.map(|body| stream(body, idle)))
                .map_err(ProxyError::from),
        };
        (answer, cover)
    })
    .await
    .map_err(|_| ProxyError::Internal)?;
    let (answer, cover) = exchanged;
    let answer = answer?;
    if cover == Cover::Lost && answer.status().is_success() {
        // The catalog made the write, but the tier may never see it: a success would promise
        // what the other replicas cannot keep.
        return Err(ProxyError::WriteUnseen);
    }
    relay::relay_body(exchange, answer, shape).await
}

/// Whether a write answered with `status` invalidates what it names: one that may have happened
/// (2xx, 5xx) does; a refusal did not happen and does not, except a conflict (409): the catalog
/// says the table moved since the writer read it, which a writer around icecache may have done,
/// so the client's refresh and retry must see the catalog's state, not the cache's.
fn invalidates(status: http::StatusCode) -> bool {
    !status.is_client_error() || status == http::StatusCode::CONFLICT
}

/// What the body names, read off the async threads when it is large.
async fn read_touched(exchange: &Exchange<'_>, bytes: Bytes) -> Touched {
    if bytes.len() < OFFLOAD_BYTES {
        return touched(&exchange.route, Some(&bytes));
    }
    let route = exchange.route.clone();
    tokio::task::spawn_blocking(move || touched(&route, Some(&bytes)))
        .await
        .unwrap_or(Touched::Everything)
}
