//! The Iceberg REST listener's request handler, read top to bottom: name the operation
//! (catalog::route), then serve loadTable and loadView from the cache (`load`), answer existence
//! checks from it when it can (`exists`), pass writes through and invalidate what they may have
//! changed (`write`), rewrite `/v1/config` (`config`), absorb credential refresh herds under
//! `passthrough` (`refresh`), keep and replay the answers of mutations that carry an
//! `Idempotency-Key` under `idempotency = "provide"` (`idempotent`, `kept`), and relay
//! everything else (`relay`), with the policy stage on every answer that may carry credentials.
//! Failures travel back as values and are written once (`error::respond`).

mod config;
mod exchange;
mod exists;
mod idempotent;
mod kept;
mod load;
mod refresh;
mod relay;
mod write;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use crate::cache::{CachePhase, NoCacheReason};
use crate::catalog::route::{classify, operation_of, Operation, Route};
use crate::catalog::writes;
use crate::error::{self, ProxyError};
use crate::policy::Credentials;
use crate::replays::{self, Idempotency, Refused};
use crate::state::State;
use crate::telemetry::replays::ReplayOutcome;
use crate::wire::body::Body;
use crate::wire::host::check_host;
use exchange::{Answer, Exchange};
use relay::forward;

/// What the handler did with a request, returned beside every response it writes (the access
/// log reads it to count and log the request).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub operation: Operation,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
}

/// Handles one client request; every failure becomes an Iceberg error response.
pub async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
    peer: SocketAddr,
    request_id: Arc<str>,
) -> (Response<Body>, Outcome) {
    let state = &*state;
    let settings = state.settings();
    let method = request.method().clone();
    let classified = admit(&request, &state.separator.get());
    let operation = match &classified {
        Ok(route) => route.operation,
        Err(_) => operation_of(&method, request.uri().path()),
    };
    // Under strip and inject, the patterns no answer's header may be named by.
    let mut secret_headers = None;
    let result = match classified {
        Err(e) => Err(e),
        Ok(route) => {
            let policy = settings
                .policies
                .for_prefix(route.prefix.as_deref())
                .clone();
            if policy.credentials != Credentials::Passthrough {
                secret_headers = Some(policy.clone());
            }
            let exchange = Exchange {
                state,
                settings: settings.clone(),
                route,
                policy,
                peer,
                request_id: &request_id,
            };
            dispatch(exchange, request).await
        }
    };
    let (mut response, phase, reason) = match result {
        Ok(answer) => (answer.response, answer.phase, answer.reason),
        Err(e) => {
            let context = error::Context {
                request_id: &request_id,
                peer,
                method: &method,
                operation,
            };
            let mut response = error::respond(&e, &context);
            // Every answer on a cached route says how it was produced, icecache's own errors too.
            let cached_route = operation.is_cached() && state.cache.is_some();
            let phase = e.phase().or(cached_route.then_some(CachePhase::Bypass));
            if let Some(phase) = phase {
                response = crate::cache::mark(response, phase, &state.case);
            }
            (response, phase, None)
        }
    };
    if let Some(policy) = secret_headers {
        crate::policy::headers::without_secret_headers(response.headers_mut(), &policy.strip);
    }
    let outcome = Outcome {
        operation,
        phase,
        reason,
    };
    (response, outcome)
}

/// The route a request names, once nothing about it is in doubt: a tunnel is not an Iceberg
/// operation, and a request whose host is in doubt names nothing (refused before anything reads
/// it).
fn admit(request: &Request<Incoming>, separator: &str) -> Result<Route, ProxyError> {
    // Methods are case-sensitive, but a catalog (or a proxy before it) that folds case would
    // take `connect` for CONNECT: refused in any case.
    if request.method().as_str().eq_ignore_ascii_case("CONNECT") {
        return Err(ProxyError::Tunnel);
    }
    check_host(
        request.version(),
        request.uri().authority(),
        request.headers(),
    )?;
    Ok(classify(request.method(), request.uri().path(), separator)?)
}

async fn dispatch(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
) -> Result<Answer, ProxyError> {
    let operation = exchange.route.operation;
    if operation == Operation::Config {
        return Box::pin(config::serve(exchange, request))
            .await
            .map(Answer::plain);
    }
    if matches!(operation, Operation::LoadTable | Operation::LoadView)
        && request.method() == Method::GET
    {
        return load::serve(exchange, request.into_parts().0).await;
    }
    if matches!(operation, Operation::TableExists | Operation::ViewExists)
        && request.method() == Method::HEAD
    {
        return exists::serve(exchange, request).await;
    }
    if operation == Operation::LoadCredentials
        && request.method() == Method::GET
        && exchange.policy.credentials == Credentials::Passthrough
    {
        if let Some(cache) = exchange.state.cache.clone() {
            return refresh::serve(exchange, request, cache).await;
        }
    }
    if exchange.settings.idempotency == Idempotency::Provide
        && idempotent::guards(&exchange.route, request.method())
    {
        match replays::read_key(request.headers()) {
            Err(bad) => {
                exchange.state.metrics.replays.count(ReplayOutcome::BadKey);
                return Err(Refused::BadKey(bad).into());
            }
            Ok(Some(key)) => return Box::pin(idempotent::serve(exchange, request, key)).await,
            Ok(None) => {}
        }
    }
    if writes::is_write(&exchange.route, request.method()) {
        return Box::pin(write::serve(exchange, request))
            .await
            .map(Answer::plain);
    }
    let (parts, body) = request.into_parts();
    Box::pin(forward(&exchange, parts, body))
        .await
        .map(Answer::plain)
}
