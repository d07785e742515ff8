//! The Iceberg REST listener's request handler, read top to bottom: name the operation
//! (catalog::route), then serve loadTable and loadView from the cache (`load`), answer existence
//! checks from it when it can (`exists`), pass writes through and invalidate what they may have
//! changed (`write`), rewrite `/v1/config` (`config`), and relay everything else (`relay`), with
//! the policy stage on every answer that may carry credentials.
//! Failures travel back as values and are written once (`error::respond`).

mod config;
mod exists;
mod load;
mod relay;
mod write;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use crate::cache::{CachePhase, NoCacheReason};
use crate::catalog::route::{classify, operation_of, Operation, Route};
use crate::catalog::writes;
use crate::config::Settings;
use crate::error::{self, ProxyError};
use crate::origin::{OriginRequest, Outgoing, Sending};
use crate::policy::stage::Shape;
use crate::policy::Policy;
use crate::state::State;
use crate::wire::body::Body;
use crate::wire::host::check_host;

/// What the handler did with a request, set on every response it writes (the access log reads
/// it to count and log the request).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub operation: Operation,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
}

/// One request, as every part of the handler sees it.
pub struct Exchange<'a> {
    pub state: &'a State,
    pub settings: Arc<Settings>,
    pub route: Route,
    pub policy: Arc<Policy>,
    pub peer: SocketAddr,
    pub request_id: &'a Arc<str>,
}

/// What a part of the handler answers with.
pub struct Answer {
    pub response: Response<Body>,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
}

impl Answer {
    fn plain(response: Response<Body>) -> Answer {
        Answer {
            response,
            phase: None,
            reason: None,
        }
    }
}

/// Handles one client request; every failure becomes an Iceberg error response.
pub async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
    peer: SocketAddr,
    request_id: Arc<str>,
) -> Response<Body> {
    let state = &*state;
    let settings = state.settings();
    let method = request.method().clone();
    let classified = admit(&request, &state.separator.get());
    let operation = match &classified {
        Ok(route) => route.operation,
        Err(_) => operation_of(&method, request.uri().path()),
    };
    let result = match classified {
        Err(e) => Err(e),
        Ok(route) => {
            let policy = settings
                .policies
                .for_prefix(route.prefix.as_deref())
                .clone();
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
    response.extensions_mut().insert(Outcome {
        operation,
        phase,
        reason,
    });
    response
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
        return load::serve(exchange, request).await;
    }
    if matches!(operation, Operation::TableExists | Operation::ViewExists)
        && request.method() == Method::HEAD
    {
        return exists::serve(exchange, request).await;
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

/// Sends a request on to the catalog and relays its answer, through the policy stage where
/// the route's answer may carry credentials.
async fn forward(
    exchange: &Exchange<'_>,
    parts: http::request::Parts,
    body: Incoming,
) -> Result<Response<Body>, ProxyError> {
    let shape = answer_shape(exchange.route.operation);
    let origin = origin_request(exchange, &parts, shape)?;
    send_on(exchange, origin, body, shape).await
}

/// Sends a request built for the route, with the client's body, and relays the answer.
async fn send_on(
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
    relay::relay(exchange, response, shape).await
}

/// The request to the catalog for a client's request, built once: the key (for loadTable) and
/// what is sent are both derived from it.
fn origin_request(
    exchange: &Exchange<'_>,
    parts: &http::request::Parts,
    shape: Option<Shape>,
) -> Result<OriginRequest, ProxyError> {
    let how = sending(exchange, shape);
    Ok(OriginRequest::new(
        parts,
        &how,
        exchange.route.operation,
        &exchange.settings.upstream,
    )?)
}

/// The same request, its headers built only when a whole set is needed (loadTable, whose hits
/// read a few of them).
fn outgoing(
    exchange: &Exchange<'_>,
    parts: http::request::Parts,
    shape: Option<Shape>,
) -> Result<Outgoing, ProxyError> {
    let how = sending(exchange, shape);
    Ok(Outgoing::new(
        parts,
        how,
        exchange.route.operation,
        &exchange.settings.upstream,
    )?)
}

fn sending(exchange: &Exchange<'_>, shape: Option<Shape>) -> Sending {
    Sending {
        peer: exchange.peer,
        proto: exchange.settings.scheme(),
        forwards_delegation: exchange.policy.credentials.forwards_delegation(),
        request_id: exchange.request_id.clone(),
        // An answer the policy stage must read comes in the identity encoding.
        identity_encoding: relay::processes(shape, &exchange.policy),
    }
}

/// What a route's successful answer is, for the policy stage under `strip` and `inject`.
pub fn answer_shape(operation: Operation) -> Option<Shape> {
    use Operation::*;
    match operation {
        LoadTable | CreateTable | RegisterTable | LoadView | CreateView | ReplaceView
        | RegisterView => Some(Shape::Table),
        LoadCredentials => Some(Shape::Credentials),
        // Config has its own reader; every other answer is scrubbed: a catalog may put
        // credentials in a commit's answer, a scan plan, or an extension's.
        Config => None,
        _ => Some(Shape::Unknown),
    }
}
