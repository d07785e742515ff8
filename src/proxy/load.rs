//! loadTable and loadView: the request to the catalog is built first, the key is derived from
//! it, and the cache answers; a request without a key (a query icecache cannot read for sure)
//! is asked alone, through the policy stage under `strip` and `inject`, streamed under
//! `passthrough`.

use http::header::{self, HeaderValue};
use http::Request;
use hyper::body::Incoming;

use super::{answer_shape, origin_request, relay, Answer, Exchange};
use crate::cache::{self, Ask, CacheKey, CachePhase, Caller, Failure, Lookup, NoCacheReason};
use crate::error::ProxyError;
use crate::origin::OriginRequest;
use crate::policy::identity::Scope;
use crate::policy::Credentials;
use crate::wire::body::empty;
use crate::wire::encoding::accepts_gzip;

pub async fn serve(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
) -> Result<Answer, ProxyError> {
    let (parts, _body) = request.into_parts();
    let shape = answer_shape(exchange.route.operation);
    let sent = origin_request(&exchange, &parts, shape)?;
    let Some(cache) = exchange.state.cache.clone() else {
        return Box::pin(stream(&exchange, sent, None)).await;
    };
    let (caller, key) = caller_and_key(&exchange, &parts, &sent);
    let policy = exchange.policy.clone();
    // The request moves into the cache; the rare answer streamed after all (too large to
    // keep) is asked again with the request rebuilt.
    let lookup = match key {
        Ok(key) => {
            let ask = Ask::new(key, sent.for_fill(), caller, exchange.settings.clone());
            cache.load(ask).await
        }
        Err(reason) if policy.credentials == Credentials::Passthrough => {
            return Box::pin(stream(&exchange, sent, Some(reason))).await;
        }
        Err(reason) => {
            Box::pin(cache.bypass(sent.for_fill(), caller, exchange.settings.clone(), reason)).await
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
        Lookup::Stream(reason) => {
            let sent = origin_request(&exchange, &parts, shape)?;
            Box::pin(stream(&exchange, sent, Some(reason))).await
        }
    }
}

/// Who is asking (as the catalog will see it: after hop-by-hop headers are gone), and the key
/// of what they ask for, or why it has none.
pub(super) fn caller_and_key(
    exchange: &Exchange<'_>,
    parts: &http::request::Parts,
    sent: &OriginRequest,
) -> (Caller, Result<CacheKey, NoCacheReason>) {
    let scope = exchange.state.identity.scope(&sent.headers);
    let key_scope = if exchange.policy.identity.shares_entries() {
        Scope::SHARED
    } else {
        scope
    };
    let caller = Caller {
        scope,
        policy: exchange.policy.clone(),
        if_none_match: sent
            .headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .cloned()
            .collect::<Vec<HeaderValue>>(),
        // The client's own Accept-Encoding: the catalog may have been asked for identity.
        accepts_gzip: accepts_gzip(&parts.headers),
    };
    let separator = exchange.state.separator.get();
    let key = CacheKey::for_load(
        &exchange.route,
        parts.uri.query(),
        &sent.headers,
        &separator,
        key_scope,
    );
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
