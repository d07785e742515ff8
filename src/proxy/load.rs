//! loadTable and loadView: the request to the catalog is built first, the key is derived from
//! it, and the cache answers; a request without a key (a query icecache cannot read for sure)
//! is asked alone, through the policy stage under `strip` and `inject`, streamed under
//! `passthrough`.

use http::header::{self, HeaderValue};
use smallvec::SmallVec;

use super::exchange::{answer_shape, outgoing, Answer, Exchange};
use super::relay;
use std::sync::Arc;

use crate::cache::{
    self, Ask, Asking, Cache, CacheKey, CachePhase, Caller, Failure, HeadForm, Later, Lookup,
    NoCacheReason,
};
use crate::catalog::route::Route;
use crate::error::ProxyError;
use crate::origin::{OriginRequest, Outgoing};
use crate::policy::identity::Scope;
use crate::policy::Credentials;
use crate::wire::body::empty;
use crate::wire::encoding::accepts_gzip;
use crate::wire::headers::HeaderLookup;

/// A load, answered at once or with what is left to do.
pub enum Served {
    /// Answered from memory (or refused) without waiting.
    Now(Result<Answer, ProxyError>),
    /// What must wait: for the catalog, or for a fill in flight.
    Later(Box<Rest>),
}

/// What is left of a load that could not be answered at once. Only ever boxed (`Served::Later`),
/// so a variant larger than the others costs no memory beside them.
#[allow(clippy::large_enum_variant)]
pub enum Rest {
    /// Streamed from the catalog as it comes.
    Stream {
        sent: Outgoing,
        reason: Option<NoCacheReason>,
    },
    /// Asked alone, through the policy stage, never stored.
    Bypass {
        cache: Arc<Cache>,
        sent: Outgoing,
        caller: Caller,
        reason: NoCacheReason,
    },
    /// A lookup the cache must finish.
    Cache {
        cache: Arc<Cache>,
        ask: Ask,
        later: Later,
    },
}

fn waits(rest: Rest) -> Served {
    Served::Later(Box::new(rest))
}

/// Serves a load from the head of its request (a load's body, if any, means nothing).
pub async fn serve(
    mut exchange: Exchange<'_>,
    parts: http::request::Parts,
    form: HeadForm,
) -> Result<Answer, ProxyError> {
    match serve_now(&mut exchange, parts, form, None, |_| {}) {
        Served::Now(answer) => answer,
        Served::Later(rest) => serve_later(&exchange, *rest).await,
    }
}

/// As much of a load as needs no waiting: a hit is answered here, its head in `form` where the
/// policy allows it. `known`: what this request's head is known to derive (a connection's memo)
/// and what its last lookup found; else they are derived. When there is a key, `learn` is
/// handed them, with what the lookup found, once the lookup no longer needs them.
pub fn serve_now(
    exchange: &mut Exchange<'_>,
    parts: http::request::Parts,
    form: HeadForm,
    known: Option<Box<Asking>>,
    learn: impl FnOnce(Box<Asking>),
) -> Served {
    let shape = answer_shape(exchange.route.operation);
    let sent = match outgoing(exchange, parts, shape) {
        Ok(sent) => sent,
        Err(e) => return Served::Now(Err(e)),
    };
    // Borrowed: only what waits keeps a share of it.
    let Some(cache) = exchange.state.cache.as_ref() else {
        return waits(Rest::Stream { sent, reason: None });
    };
    let asking = match known {
        Some(asking) => Ok(asking),
        None => {
            let route = exchange.route.take_names();
            match caller_and_key(exchange, route, &sent, form) {
                (caller, Ok(key)) => Ok(Box::new(Asking {
                    caller,
                    key,
                    sight: None,
                })),
                (caller, Err(reason)) => Err((caller, reason)),
            }
        }
    };
    match asking {
        Ok(asking) => {
            let mut ask = Ask::new(asking, sent, exchange.settings.clone());
            match cache.load_now(&mut ask) {
                Ok(lookup) => {
                    // Only a stream moves the request on: a hit leaves it where it is.
                    learn(ask.asking);
                    match served(lookup) {
                        Ok(answer) => Served::Now(Ok(answer)),
                        Err(reason) => waits(Rest::Stream {
                            sent: ask.request,
                            reason: Some(reason),
                        }),
                    }
                }
                Err(later) => {
                    learn(Box::new(Asking {
                        caller: ask.asking.caller.clone(),
                        key: ask.asking.key.clone(),
                        sight: ask.asking.sight.take(),
                    }));
                    waits(Rest::Cache {
                        cache: cache.clone(),
                        ask,
                        later,
                    })
                }
            }
        }
        Err((_, reason)) if exchange.policy.credentials == Credentials::Passthrough => {
            waits(Rest::Stream {
                sent,
                reason: Some(reason),
            })
        }
        Err((caller, reason)) => waits(Rest::Bypass {
            cache: cache.clone(),
            sent,
            caller,
            reason,
        }),
    }
}

/// The rest of a load `serve_now` could not answer.
pub async fn serve_later(exchange: &Exchange<'_>, rest: Rest) -> Result<Answer, ProxyError> {
    let (lookup, sent) = match rest {
        Rest::Stream { sent, reason } => {
            return Box::pin(stream(exchange, sent.request(), reason)).await
        }
        Rest::Bypass {
            cache,
            sent,
            caller,
            reason,
        } => {
            let request = sent.fill_request();
            let settings = exchange.settings.clone();
            let lookup = Box::pin(cache.bypass(request, caller, settings, reason)).await;
            (lookup, sent)
        }
        Rest::Cache { cache, ask, later } => {
            let lookup = cache.load_later(&ask, later).await;
            (lookup, ask.request)
        }
    };
    match served(lookup.map_err(ProxyError::from)?) {
        Ok(answer) => Ok(answer),
        // Too large to keep after all: streamed, asked again.
        Err(reason) => Box::pin(stream(exchange, sent.request(), Some(reason))).await,
    }
}

/// The answer a lookup served, or why it must be streamed instead.
fn served(lookup: Lookup) -> Result<Answer, NoCacheReason> {
    match lookup {
        Lookup::Served {
            response,
            phase,
            reason,
        } => Ok(Answer {
            response,
            phase: Some(phase),
            reason,
        }),
        Lookup::Stream(reason) => Err(reason),
    }
}

/// Who is asking (as the catalog will see it: after hop-by-hop headers are gone), and the key
/// of what they ask for, or why it has none. Every header is read as the route sends it.
pub(super) fn caller_and_key(
    exchange: &Exchange<'_>,
    route: Route,
    sent: &Outgoing,
    form: HeadForm,
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
        form: match form {
            HeadForm::Packed if exchange.policy.packs_marks => HeadForm::Packed,
            _ => HeadForm::Fields,
        },
    };
    let separator = exchange.state.separator.get();
    let key = CacheKey::for_load(
        route,
        sent.uri.path(),
        sent.uri.query(),
        &headers,
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
