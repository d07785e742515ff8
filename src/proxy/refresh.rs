//! loadCredentials under `passthrough`: a caller's refresh is answered from what that caller
//! was vended moments ago, joined to the same refresh in flight, or asked of the catalog (see
//! `cache::refreshes` for what may be shared and kept). A refresh icecache cannot key (a
//! parameter besides one `planId`) is relayed as before.

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::exchange::{origin_request, Answer, Exchange};
use crate::cache::refreshes::{judge, Outcome, RefreshKey, Refreshed, Step};
use crate::cache::{mark, normalised_delegation, Cache, CachePhase, NoCacheReason};
use crate::catalog::route::Operation;
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::origin::OriginRequest;
use crate::wire::body::full;

/// How many refreshes a caller joins before it asks alone, when the ones it joined fail.
const ATTEMPTS: usize = 2;

/// The largest answer read whole; a larger one is refused as the policy stage refuses one.
const READ_LIMIT: usize = crate::cache::POLICY_READ_LIMIT;

pub async fn serve(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
    cache: Arc<Cache>,
) -> Result<Answer, ProxyError> {
    let (parts, _body) = request.into_parts();
    // Sent unconditional (icecache never answers this route with a 304, and a 200 is a fine
    // answer to any conditional), in the identity encoding (one body for every waiter).
    let mut origin = origin_request(&exchange, &parts, None)?.unconditional();
    origin.identity_encoding();
    let scope = exchange.state.identity.scope(&origin.headers);
    let key = RefreshKey::new(
        scope,
        origin.uri.path(),
        origin.uri.query(),
        normalised_delegation(&origin.headers),
    );
    let key = match key {
        Ok(key) => key,
        Err(reason) => return alone(&exchange, origin, CachePhase::Bypass, Some(reason)).await,
    };
    for _ in 0..ATTEMPTS {
        let leader = match cache.refreshes.step(key.clone(), Instant::now()) {
            Step::Kept(answer) => return Ok(answered(&exchange, &answer, CachePhase::Hit, None)),
            Step::Lead(leader) => leader,
            Step::Wait(waiter) => match waiter.wait().await.as_deref() {
                Ok(Outcome::Shared(answer)) => {
                    return Ok(answered(&exchange, answer, CachePhase::Coalesced, None));
                }
                // The answer was its leader's own: asked for this caller alone.
                Ok(Outcome::Own(reason)) => {
                    let reason = Some(*reason);
                    return alone(&exchange, origin, CachePhase::Bypass, reason).await;
                }
                // The leader failed or was cancelled: join (or lead) the next refresh.
                Err(_abandoned) => continue,
            },
        };
        let answer = Arc::new(fetch(&exchange, origin).await?);
        let judged = judge(
            &answer,
            now_ms(),
            exchange.settings.cache.fresh_for,
            exchange.settings.cache.max_entry_bytes,
            |name| keyed(&exchange, name),
            &exchange.policy.strip,
        );
        let reason = judged.err();
        cache
            .refreshes
            .finish(leader, answer.clone(), judged, Instant::now());
        return Ok(answered(&exchange, &answer, CachePhase::Miss, reason));
    }
    alone(&exchange, origin, CachePhase::Miss, None).await
}

/// Whether the key holds a header an answer varies on: the caller's credentials (the key's
/// scope, whatever the identity policy), the delegation modes, and the encoding (always asked
/// as identity).
fn keyed(exchange: &Exchange<'_>, name: &str) -> bool {
    name.eq_ignore_ascii_case("accept-encoding")
        || name.eq_ignore_ascii_case("x-iceberg-access-delegation")
        || exchange.state.identity.identifies(name)
}

/// One refresh asked of the catalog for this caller only.
async fn alone(
    exchange: &Exchange<'_>,
    origin: OriginRequest,
    phase: CachePhase,
    reason: Option<NoCacheReason>,
) -> Result<Answer, ProxyError> {
    let answer = fetch(exchange, origin).await?;
    Ok(answered(exchange, &answer, phase, reason))
}

async fn fetch(exchange: &Exchange<'_>, origin: OriginRequest) -> Result<Refreshed, ProxyError> {
    debug_assert_eq!(origin.operation, Operation::LoadCredentials);
    let fetched = exchange.state.origin.fetch(origin, READ_LIMIT).await?;
    Ok(Refreshed {
        status: fetched.status,
        headers: fetched.headers,
        body: fetched.body,
    })
}

fn answered(
    exchange: &Exchange<'_>,
    answer: &Refreshed,
    phase: CachePhase,
    reason: Option<NoCacheReason>,
) -> Answer {
    let mut response = Response::new(full(answer.body.clone()));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers.clone();
    Answer {
        response: mark(response, phase, &exchange.state.case),
        phase: Some(phase),
        reason,
    }
}
