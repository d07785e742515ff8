//! loadTable and loadView: the request to the catalog is built first, the key is derived from
//! it, and the cache answers; a request without a key (a query icecache cannot read for sure)
//! is asked alone, through the policy stage under `strip` and `inject`, streamed under
//! `passthrough`.

use http::header::{self, HeaderValue};
use smallvec::SmallVec;

use super::exchange::{answer_shape, outgoing, Answer, Exchange};
use super::relay;
use crate::cache::{self, Ask, CacheKey, CachePhase, Caller, Failure, Lookup, NoCacheReason};
use crate::catalog::route::Route;
use crate::error::ProxyError;
use crate::origin::{OriginRequest, Outgoing};
use crate::policy::identity::Scope;
use crate::policy::Credentials;
use crate::wire::body::empty;
use crate::wire::encoding::accepts_gzip;
use crate::wire::headers::HeaderLookup;

/// Serves a load from the head of its request (a load's body, if any, means nothing).
pub async fn serve(
    mut exchange: Exchange<'_>,
    parts: http::request::Parts,
) -> Result<Answer, ProxyError> {
    let shape = answer_shape(exchange.route.operation);
    let sent = outgoing(&exchange, parts, shape)?;
    let Some(cache) = exchange.state.cache.clone() else {
        return Box::pin(stream(&exchange, sent.request(), None)).await;
    };
    let route = exchange.route.take_names();
    let (caller, key) = caller_and_key(&exchange, route, &sent);
    let settings = exchange.settings.clone();
    let (lookup, sent) = match key {
        Ok(key) => {
            let mut ask = Ask::new(key, sent, caller, settings);
            let lookup = cache.load(&mut ask).await;
            (lookup, ask.request)
        }
        Err(reason) if exchange.policy.credentials == Credentials::Passthrough => {
            return Box::pin(stream(&exchange, sent.request(), Some(reason))).await;
        }
        Err(reason) => {
            let request = sent.fill_request();
            let lookup = Box::pin(cache.bypass(request, caller, settings, reason)).await;
            (lookup, sent)
        }
    };
    match lookup.map_err(ProxyError::from)? {
        Lookup::Served {
            response,
            phase,
            reason,
        } => Ok(Answer {
            response,
            phase: Some(phase),
            reason,
        }),
        // Too large to keep after all: streamed, asked again.
        Lookup::Stream(reason) => Box::pin(stream(&exchange, sent.request(), Some(reason))).await,
    }
}

/// Who is asking (as the catalog will see it: after hop-by-hop headers are gone), and the key
/// of what they ask for, or why it has none. Every header is read as the route sends it.
pub(super) fn caller_and_key(
    exchange: &Exchange<'_>,
    route: Route,
    sent: &Outgoing,
) -> (Caller, Result<CacheKey, NoCacheReason>) {
    let headers = sent.as_sent();
    let scope = exchange.state.identity.scope(&headers);
    let key_scope = if exchange.policy.identity.shares_entries() {
        Scope::SHARED
    } else {
        scope
    };
    let caller = Caller {
        scope,
        policy: exchange.policy.clone(),
        if_none_match: headers
            .values(&header::IF_NONE_MATCH)
            .iter()
            .cloned()
            .collect::<SmallVec<[HeaderValue; 1]>>(),
        // The client's own Accept-Encoding: the catalog may have been asked for identity.
        accepts_gzip: accepts_gzip(sent.client_headers()),
    };
    let separator = exchange.state.separator.get();
    let key = CacheKey::for_load(route, sent.uri.query(), &headers, &separator, key_scope);
    (caller, key)
}

/// Streams a load from the catalog as it comes (passthrough only: nothing to check),
/// without conditionals (the client holds icecache's ETags, never the catalog's).
async fn stream(
    exchange: &Exchange<'_>,
    sent: OriginRequest,
    reason: Option<NoCacheReason>,
) -> Result<Answer, ProxyError> {
    let response = exchange
        .state
        .origin
        .send(sent.unconditional(), empty())
        .await
        .map_err(|e| {
            ProxyError::from(Failure {
                phase: CachePhase::Bypass,
                error: cache::CacheError::Origin(e),
            })
        })?;
    let shape = answer_shape(exchange.route.operation);
    let response = relay::relay(exchange, response, shape).await?;
    let phase = exchange.state.cache.as_ref().map(|_| CachePhase::Bypass);
    let response = match phase {
        Some(phase) => cache::mark(response, phase, &exchange.state.case),
        None => response,
    };
    Ok(Answer {
        response,
        phase,
        reason,
    })
}
