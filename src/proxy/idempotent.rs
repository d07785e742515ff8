//! A mutation with an `Idempotency-Key` under `idempotency = "provide"` (see `replays` for the
//! invariants): its body is read and fingerprinted, its key claimed for this caller, and then
//! it is replayed from what was kept, refused (409 in flight, 422 reused), or sent on, its
//! final answer kept. The key still reaches the catalog unchanged.

use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::exchange::{answer_shape, origin_request, Answer, Exchange};
use super::kept::Keeping;
use super::relay::relay_body;
use super::write::{self, MAX_INSPECTED_BODY};
use crate::catalog::route::{Operation, Route};
use crate::catalog::writes;
use crate::error::ProxyError;
use crate::replays::{Claim, Fingerprint, Held, Kept, Refused, ReplayId, Ticket, REPLAYED};
use crate::telemetry::replays::ReplayOutcome;
use crate::wire::body::{full, read_to_bytes};

/// Beyond the longest a request can take to be answered (its wait for a place at the catalog,
/// its head, its body), how long a hold on a key outlives a replica that died holding it.
const HOLD_MARGIN: Duration = Duration::from_secs(10);

/// Whether a request is one the spec lets carry a key: a mutation, or a scan plan's calls.
pub fn guards(route: &Route, method: &Method) -> bool {
    writes::is_write(route, method)
        || (*method != Method::GET
            && matches!(
                route.operation,
                Operation::PlanTableScan | Operation::CancelPlanning | Operation::FetchScanTasks
            ))
}

pub async fn serve(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
    key: String,
) -> Result<Answer, ProxyError> {
    let metrics = exchange.state.metrics.replays.clone();
    let settings = exchange.settings.clone();
    let (parts, body) = request.into_parts();
    let bytes = read_to_bytes(body, MAX_INSPECTED_BODY, settings.request_timeout)
        .await
        .map_err(ProxyError::RequestBody)?;
    let sent_as = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let ticket = Ticket::new(Fingerprint::of(&parts.method, sent_as, &bytes));
    let id = ReplayId::new(exchange.state.identity.scope(&parts.headers), key);
    let store = exchange.state.replays.clone();
    let hold_for =
        settings.upstream_limits.queue_timeout + settings.request_timeout * 2 + HOLD_MARGIN;
    let claim = store.claim(&id, ticket, hold_for).await.map_err(|e| {
        metrics.count(ReplayOutcome::Unavailable);
        Refused::Store(e)
    })?;
    match claim {
        Claim::Won => {}
        Claim::Replay(kept) => {
            metrics.count(ReplayOutcome::Replayed);
            return replay(&exchange, &kept).await;
        }
        Claim::InFlight => {
            metrics.count(ReplayOutcome::InFlight);
            return Err(Refused::InFlight.into());
        }
        Claim::Reused => {
            metrics.count(ReplayOutcome::Reused);
            return Err(Refused::Reused.into());
        }
    }
    let shared = store.shared();
    let keeping = Keeping {
        held: Held::new(store, id, ticket, settings.idempotency_key_lifetime),
        origin: exchange.state.origin.clone(),
        idle: settings.request_timeout,
        max_bytes: usize::try_from(settings.cache.max_entry_bytes).unwrap_or(usize::MAX),
        secrets: exchange.policy.strip.clone(),
        shared,
        metrics,
    };
    if writes::is_write(&exchange.route, &parts.method) {
        return write::serve_held(exchange, parts, bytes, keeping)
            .await
            .map(Answer::plain);
    }
    // A scan plan's call: nothing to invalidate, the answer kept the same way.
    let shape = answer_shape(exchange.route.operation);
    let sent = origin_request(&exchange, &parts, shape)?;
    let origin = exchange.state.origin.clone();
    let answer = tokio::spawn(async move {
        let answer = origin.send(sent, full(bytes)).await;
        keeping.settle(answer).await
    })
    .await
    .map_err(|_| ProxyError::Internal)??;
    relay_body(&exchange, answer, shape)
        .await
        .map(Answer::plain)
}

/// The kept answer, through the policy in force now, marked as a replay.
async fn replay(exchange: &Exchange<'_>, kept: &Kept) -> Result<Answer, ProxyError> {
    let mut response = Response::new(full(kept.body.clone()));
    *response.status_mut() = kept.status;
    *response.headers_mut() = kept.headers.clone();
    response
        .headers_mut()
        .insert(REPLAYED, http::HeaderValue::from_static("true"));
    let shape = answer_shape(exchange.route.operation);
    relay_body(exchange, response, shape)
        .await
        .map(Answer::plain)
}
