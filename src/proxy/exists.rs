//! tableExists and viewExists (`HEAD`): answered `204` from a fresh entry the caller could be
//! served, without asking the catalog; otherwise relayed as they are, marked as a bypass. A
//! missing entry never becomes a 404: only the catalog says what does not exist.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::exchange::{answer_shape, outgoing, Answer, Exchange};
use super::load::caller_and_key;
use super::relay::{forward, send_on};
use crate::cache::{self, Ask, CachePhase};
use crate::error::ProxyError;
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
    let shape = answer_shape(exchange.route.operation);
    let sent = outgoing(&exchange, parts, shape)?;
    let route = exchange.route.take_names();
    let (caller, key) = caller_and_key(&exchange, route, &sent);
    let (reason, sent) = match key {
        Ok(key) => {
            let mut ask = Ask::new(key, sent, caller, exchange.settings.clone());
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
    let response = Box::pin(send_on(&exchange, sent.request(), body, shape)).await?;
    Ok(Answer {
        response: cache::mark(response, CachePhase::Bypass, &exchange.state.case),
        phase: Some(CachePhase::Bypass),
        reason,
    })
}
