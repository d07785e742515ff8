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
mod memo;
mod refresh;
mod relay;
mod write;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;

use crate::cache::{Asking, CachePhase, HeadForm, NoCacheReason};
use crate::catalog::lenient::may_be_config;
use crate::catalog::route::{classify, named, operation_of, Operation, Route};
use crate::catalog::writes;
use crate::error::{self, ProxyError};
use crate::policy::{Credentials, Policy};
use crate::replays::{self, Idempotency, Refused};
use crate::state::State;
use crate::telemetry::replays::ReplayOutcome;
use crate::wire::body::Body;
use crate::wire::host::check_host;
use crate::wire::request_id::RequestId;
use crate::wire::target::{check_target, check_transfer_coding};
use exchange::{Admitted, Answer, Exchange};
pub use memo::{Derived, Memo};
use relay::forward;

/// What the handler did with a request, returned beside every response it writes (the access
/// log reads it to count and log the request).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub operation: Operation,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
}

/// The handler's answer: ready at once when a load is answered from memory (nothing waits, so
/// no future is built for it), else the future that finishes the request.
pub enum Handled {
    Ready(Option<(Response<Body>, Outcome)>),
    Pending(Pin<Box<dyn Future<Output = (Response<Body>, Outcome)> + Send>>),
}

impl Handled {
    fn ready(answer: (Response<Body>, Outcome)) -> Handled {
        Handled::Ready(Some(answer))
    }

    fn pending(
        future: impl Future<Output = (Response<Body>, Outcome)> + Send + 'static,
    ) -> Handled {
        Handled::Pending(Box::pin(future))
    }

    /// The answer, when it is ready without waiting.
    pub fn answered(&self) -> Option<(&Response<Body>, &Outcome)> {
        match self {
            Handled::Ready(Some((response, outcome))) => Some((response, outcome)),
            _ => None,
        }
    }
}

impl Future for Handled {
    type Output = (Response<Body>, Outcome);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Handled::Pending(future) => future.as_mut().poll(cx),
            // Polled again after its answer (which no caller does): there is nothing more.
            Handled::Ready(answer) => answer.take().map_or(Poll::Pending, Poll::Ready),
        }
    }
}

/// Handles one client request; every failure becomes an Iceberg error response. `memo` is
/// the connection's: a load whose head equals the last one it derived is served from what
/// that derived.
pub fn handle(
    state: &Arc<State>,
    request: Request<Incoming>,
    peer: SocketAddr,
    request_id: RequestId,
    memo: &Memo<Derived>,
) -> Handled {
    let settings = state.settings();
    let separator = state.separator.get();
    if let Some(derived) = memo.recall(&request, &settings, &separator) {
        let operation = derived.operation;
        let policy = derived.asking.caller.policy.clone();
        let ending = Ending::new(request.method().clone(), operation, peer, &policy);
        let admitted = Admitted {
            settings,
            route: named(operation),
            policy,
            peer,
        };
        // Given back once the load is answered or waits, for the next equal head.
        let give_back = |asking| memo.restore(Derived { operation, asking });
        return load(
            state,
            ending,
            admitted,
            request_id,
            request,
            Some(derived.asking),
            give_back,
        );
    }
    let method = request.method().clone();
    let classified = admit(&request, &separator);
    let operation = match &classified {
        Ok(route) => route.operation,
        Err(_) => operation_of(&method, request.uri().path()),
    };
    let route = match classified {
        Ok(route) => route,
        Err(e) => {
            let ending = Ending {
                method,
                operation,
                peer,
                strip: None,
            };
            return Handled::ready(ending.conclude(state, &request_id, Err(e)));
        }
    };
    let policy = settings
        .policies
        .for_prefix(route.prefix.as_deref())
        .clone();
    let ending = Ending::new(method, operation, peer, &policy);
    let is_load = matches!(operation, Operation::LoadTable | Operation::LoadView)
        && ending.method == Method::GET;
    let head = match is_load {
        true => memo.head(&request, &settings, &separator),
        false => None,
    };
    let admitted = Admitted {
        settings,
        route,
        policy,
        peer,
    };
    // Loads first: a hit is answered here, without a future.
    if is_load {
        let learn = |asking| {
            let Some(head) = head else {
                return;
            };
            if let Some(derived) = (Derived { operation, asking }).detached() {
                memo.keep(head, derived);
            }
        };
        return load(state, ending, admitted, request_id, request, None, learn);
    }
    let state = state.clone();
    Handled::pending(async move {
        let exchange = admitted.exchange(&state, &request_id);
        let result = dispatch(exchange, request).await;
        ending.conclude(&state, &request_id, result)
    })
}

/// A load: answered at once when it can be, else the future that finishes it. `known`: what
/// the connection's memo holds for this head; `learn` is told what was derived and found.
fn load(
    state: &Arc<State>,
    ending: Ending,
    admitted: Admitted,
    request_id: RequestId,
    request: Request<Incoming>,
    known: Option<Box<Asking>>,
    learn: impl FnOnce(Box<Asking>),
) -> Handled {
    let mut exchange = admitted.exchange(state, &request_id);
    let (parts, _body) = request.into_parts();
    // Its answer goes out as it is built: packed for an HTTP/1.x client.
    let form = HeadForm::for_version(parts.version);
    match load::serve_now(&mut exchange, parts, form, known, learn) {
        load::Served::Now(result) => Handled::ready(ending.conclude(state, &request_id, result)),
        load::Served::Later(rest) => {
            let admitted = exchange.admitted();
            let state = state.clone();
            Handled::pending(async move {
                let exchange = admitted.exchange(&state, &request_id);
                let result = load::serve_later(&exchange, *rest).await;
                ending.conclude(&state, &request_id, result)
            })
        }
    }
}

/// What the handler's last step needs to know of the request.
struct Ending {
    method: Method,
    operation: Operation,
    peer: SocketAddr,
    /// Under strip and inject, the patterns no answer's header may be named by.
    strip: Option<Arc<Policy>>,
}

impl Ending {
    /// The ending of a request under `policy`: under strip and inject, no answer's header may be
    /// named by its patterns.
    fn new(method: Method, operation: Operation, peer: SocketAddr, policy: &Arc<Policy>) -> Ending {
        let strip = (policy.credentials != Credentials::Passthrough).then(|| policy.clone());
        Ending {
            method,
            operation,
            peer,
            strip,
        }
    }

    /// The response and outcome of a request: its answer, or the Iceberg error it failed with,
    /// marked with how it was produced, without the headers its policy strips.
    fn conclude(
        self,
        state: &State,
        request_id: &RequestId,
        result: Result<Answer, ProxyError>,
    ) -> (Response<Body>, Outcome) {
        let (mut response, phase, reason) = match result {
            Ok(answer) => (answer.response, answer.phase, answer.reason),
            Err(e) => {
                let context = error::Context {
                    request_id,
                    peer: self.peer,
                    method: &self.method,
                    operation: self.operation,
                };
                let mut response = error::respond(&e, &context);
                // Every answer on a cached route says how it was produced, icecache's own
                // errors too.
                let cached_route = self.operation.is_cached() && state.cache.is_some();
                let phase = e.phase().or(cached_route.then_some(CachePhase::Bypass));
                if let Some(phase) = phase {
                    response = crate::cache::mark(response, phase, &state.case);
                }
                (response, phase, None)
            }
        };
        if let Some(policy) = self.strip {
            crate::policy::headers::without_secret_headers(response.headers_mut(), &policy.strip);
        }
        let outcome = Outcome {
            operation: self.operation,
            phase,
            reason,
        };
        (response, outcome)
    }
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
    check_target(request.method(), request.uri())?;
    // Only a request with a body has its coding read: a hit has none, and pays no look-up.
    if !request.body().is_end_stream() {
        check_transfer_coding(request.headers())?;
    }
    check_host(
        request.version(),
        request.uri().authority(),
        request.headers(),
    )?;
    let route = classify(request.method(), request.uri().path(), separator)?;
    // A read a lenient catalog takes for its `/v1/config` (`/V1/config`, `/v1/config/`) is
    // answered as one: its `uri` rewritten, so the client stays on icecache.
    if route.operation == Operation::Other
        && request.method() == Method::GET
        && may_be_config(request.uri().path())
    {
        return Ok(named(Operation::Config));
    }
    Ok(route)
}

/// Every request but a load (which `handle` serves first, so that a hit never waits).
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
