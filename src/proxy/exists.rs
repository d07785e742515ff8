//! tableExists and viewExists (`HEAD`): answered `204` from a fresh entry the caller could be
//! served, without asking the catalog. Otherwise the check goes to the catalog as it is, unless
//! the catalog is known to lack it (its `endpoints` do not name it, or it refused a `HEAD` with
//! `405`/`501`): then it is answered from the loadTable or loadView the caller would get, cached
//! or fetched. A missing entry never becomes a 404: only the catalog says what does not exist.

use http::header::{self, HeaderName};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::exchange::{answer_shape, outgoing, Answer, Exchange};
use super::load::{self, caller_and_key};
use super::relay::{forward, send_on};
use crate::cache::{self, Ask, Asking, CachePhase, HeadForm};
use crate::catalog::route::Operation;
use crate::error::ProxyError;
use crate::origin::CONDITIONALS;
use crate::wire::body::empty;

pub async fn serve(
    mut exchange: Exchange<'_>,
    request: Request<Incoming>,
) -> Result<Answer, ProxyError> {
    let (parts, body) = request.into_parts();
    let Some(cache) = exchange.state.cache.clone() else {
        return Box::pin(forward(&exchange, parts, body))
            .await
            .map(Answer::plain);
    };
    let operation = exchange.route.operation;
    // Kept to ask for the load instead, should the catalog lack the check.
    let (head, route) = (parts.clone(), exchange.route.clone());
    let shape = answer_shape(operation);
    let sent = outgoing(&exchange, parts, shape)?;
    let names = exchange.route.take_names();
    // A check's own answer is built here, never from an entry's head.
    let (caller, key) = caller_and_key(&exchange, names, &sent, HeadForm::Fields);
    let (reason, sent) = match key {
        Ok(key) => {
            let asking = Box::new(Asking {
                caller,
                key,
                sight: None,
            });
            let mut ask = Ask::new(asking, sent, exchange.settings.clone());
            if cache.vouches_for(&mut ask).await {
                let mut response = Response::new(empty());
                *response.status_mut() = StatusCode::NO_CONTENT;
                return Ok(Answer {
                    response: cache::mark(response, CachePhase::Hit, &exchange.state.case),
                    phase: Some(CachePhase::Hit),
                    reason: None,
                });
            }
            (None, ask.request)
        }
        Err(reason) => (Some(reason), sent),
    };
    exchange.route = route;
    if exchange.state.heads.lacks(operation) {
        return Box::pin(from_load(exchange, head)).await;
    }
    // Unconditional: the client holds icecache's tags, which mean nothing to the catalog, and
    // a `304` from the catalog would confirm a tag of its own.
    let unconditional = sent.request().unconditional();
    let response = Box::pin(send_on(&exchange, unconditional, body, shape)).await?;
    if matches!(
        response.status(),
        StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
    ) {
        tracing::info!(
            operation = operation.as_str(),
            "the catalog does not serve this existence check: answered from loads from now on"
        );
        exchange.state.heads.learn_lacks(operation);
        return Box::pin(from_load(exchange, head)).await;
    }
    Ok(Answer {
        response: cache::mark(response, CachePhase::Bypass, &exchange.state.case),
        phase: Some(CachePhase::Bypass),
        reason,
    })
}

/// Headers that describe a load's body, which an existence check's answer does not have.
const BODY_HEADERS: [HeaderName; 5] = [
    header::CONTENT_LENGTH,
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::ETAG,
    header::LAST_MODIFIED,
];

/// The check answered from the load this caller would get: `204` where it gets a `200`, the
/// load's own status otherwise, and how the load was produced in `x-cache`. The load is asked
/// without the check's conditionals: a check is answered `204` whatever tag the client holds,
/// as it is from a fresh entry (a `304` would stand for a body and a tag the check has not).
async fn from_load(
    mut exchange: Exchange<'_>,
    mut head: http::request::Parts,
) -> Result<Answer, ProxyError> {
    head.method = Method::GET;
    for name in &CONDITIONALS {
        head.headers.remove(name);
    }
    exchange.route.operation = match exchange.route.operation {
        Operation::ViewExists => Operation::LoadView,
        _ => Operation::LoadTable,
    };
    let case = exchange.state.case.clone();
    // With fields of its own: the load's body fields are removed by name below.
    let loaded = load::serve(exchange, head, HeadForm::Fields).await?;
    let (mut parts, _body) = loaded.response.into_parts();
    if parts.status == StatusCode::OK {
        parts.status = StatusCode::NO_CONTENT;
    }
    for name in &BODY_HEADERS {
        parts.headers.remove(name);
    }
    let response = Response::from_parts(parts, empty());
    let response = match loaded.phase {
        Some(phase) => cache::mark(response, phase, &case),
        None => response,
    };
    Ok(Answer {
        response,
        phase: loaded.phase,
        reason: loaded.reason,
    })
}
