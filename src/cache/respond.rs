//! Writing a loadTable answer from what the cache has: an entry (304 when the client's
//! `If-None-Match` names it, else the body, gzip when the client takes it, injected values
//! spliced in as it is sent) or an answer that was not cached. Every answer carries `x-cache`
//! and `Cache-Status`, and only icecache's own ETag, spelled `ETag` on HTTP/1.1.

use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Extensions, Response, StatusCode};
use smallvec::SmallVec;
use tokio::time::Instant;

use super::entry::{Content, Entry, Gzipped};
use super::fill::Answered;
use super::phase::CachePhase;
use crate::policy::identity::Scope;
use crate::policy::stage::{self, Shape, Stage};
use crate::policy::Policy;
use crate::telemetry::CacheMetrics;
use crate::wire::body::{empty, full, pieces, Body};
use crate::wire::etag::if_none_match_matches;
use crate::wire::seconds::seconds_value;

/// Who is asking, under which policy, and what they already hold.
#[derive(Clone)]
pub struct Caller {
    /// The caller's own identity scope (the key's scope may be shared).
    pub scope: Scope,
    pub policy: Arc<Policy>,
    pub if_none_match: SmallVec<[HeaderValue; 1]>,
    /// Whether the caller's `Accept-Encoding` takes gzip.
    pub accepts_gzip: bool,
}

pub static X_CACHE: HeaderName = HeaderName::from_static("x-cache");
/// RFC 9211's standard form of what `x-cache` says.
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// Marks an answer with how it was produced, in both spellings.
fn mark_phase(headers: &mut HeaderMap, phase: CachePhase) {
    headers.insert(X_CACHE.clone(), phase.x_cache_value());
    headers.insert(CACHE_STATUS.clone(), phase.cache_status_value());
}

/// Headers a 304 repeats from the 200 it stands for (RFC 9110 §15.4.5).
static KEPT_ON_304: [HeaderName; 3] = [
    header::CACHE_CONTROL,
    header::VARY,
    header::CONTENT_LOCATION,
];

/// The head of a 304 from an entry's `headers`, for the representation tagged `etag`, marked
/// as a hit, with a place for `Age`.
fn not_modified_head(headers: &HeaderMap, etag: &HeaderValue) -> HeaderMap {
    let mut head = HeaderMap::with_capacity(KEPT_ON_304.len() + 4);
    for name in &KEPT_ON_304 {
        for value in headers.get_all(name) {
            head.append(name.clone(), value.clone());
        }
    }
    head.insert(header::ETAG, etag.clone());
    kept_head(head)
}

/// A head as an entry keeps it: marked as a hit, with its place for `Age` (writing `Age` then
/// replaces a value in a copy instead of growing it: a copied map has no room to spare).
fn kept_head(mut head: HeaderMap) -> HeaderMap {
    mark_phase(&mut head, CachePhase::Hit);
    head.insert(header::AGE, HeaderValue::from_static("0"));
    head
}

/// The answer to `caller` from `entry` at `now`. Never a 304 without `If-None-Match`, nor one
/// that would confirm credentials past their window.
pub fn from_entry(
    entry: &Entry,
    phase: CachePhase,
    caller: &Caller,
    counted: (&CacheMetrics, &Stage),
    case: &Extensions,
    now: Instant,
) -> Response<Body> {
    let content = &entry.content;
    let gzip = content.gzip.as_ref().filter(|_| caller.accepts_gzip);
    // The tag of the representation this request would get (RFC 9110 §13.1.2): a 304 carries
    // it, so a client that holds the other representation gets that one in full instead of a
    // 304 naming a tag it never received.
    let selected = gzip.map_or(&content.etag, |g| &g.etag);
    let names_this_version =
        !caller.if_none_match.is_empty() && if_none_match_matches(&caller.if_none_match, selected);
    if names_this_version && entry.credentials_servable(now) {
        counted.0.not_modified();
        let head = content.heads.not_modified(gzip.is_some(), || {
            not_modified_head(&content.headers, selected)
        });
        let mut r = Response::new(empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        *r.headers_mut() = head.clone();
        finish(&mut r, entry, phase, now, case, phase != CachePhase::Hit);
        return r;
    }
    let head = content
        .heads
        .full(gzip.is_some(), || full_head(content, gzip));
    let body = match gzip {
        Some(gzip) => full(gzip.body.clone()),
        None => {
            let served = stage::served(
                &content.body,
                content.config_empty,
                Shape::Table,
                &caller.policy,
            );
            counted.1.served(&served);
            pieces(served)
        }
    };
    let mut response = Response::new(body);
    *response.headers_mut() = head.clone();
    finish(
        &mut response,
        entry,
        phase,
        now,
        case,
        phase != CachePhase::Hit,
    );
    response
}

/// The head of a 200 from an entry's content, in the gzip representation or the identity one,
/// marked as a hit, with a place for `Age`.
fn full_head(content: &Content, gzip: Option<&Gzipped>) -> HeaderMap {
    let mut head = HeaderMap::with_capacity(content.headers.len() + 6);
    for (name, value) in &content.headers {
        head.append(name.clone(), value.clone());
    }
    match gzip {
        Some(gzip) => {
            head.insert(header::ETAG, gzip.etag.clone());
            head.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            head.insert(header::CONTENT_LENGTH, HeaderValue::from(gzip.body.len()));
        }
        None => {
            head.insert(header::ETAG, content.etag.clone());
            head.insert(header::CONTENT_LENGTH, HeaderValue::from(content.length));
        }
    }
    kept_head(head)
}

/// What every answer from an entry carries beyond its head: its marks (unless the head has
/// them already), its `Age` and the case map that spells `ETag`.
fn finish(
    response: &mut Response<Body>,
    entry: &Entry,
    phase: CachePhase,
    now: Instant,
    case: &Extensions,
    marks: bool,
) {
    let headers = response.headers_mut();
    if marks {
        mark_phase(headers, phase);
    }
    headers.insert(header::AGE, seconds_value(entry.age(now).as_secs()));
    *response.extensions_mut() = case.clone();
}

/// The answer to `caller` from an answer the cache did not keep. `Set-Cookie` goes only to the
/// caller whose request fetched it.
pub fn from_answer(
    answer: &Answered,
    phase: CachePhase,
    caller: &Caller,
    counted: (&CacheMetrics, &Stage),
    case: &Extensions,
) -> Response<Body> {
    let not_modified = answer.status == StatusCode::OK
        && !caller.if_none_match.is_empty()
        && answer
            .etag
            .as_ref()
            .is_some_and(|tag| if_none_match_matches(&caller.if_none_match, tag));
    let mut response = if not_modified {
        counted.0.not_modified();
        let mut r = Response::new(empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        counted.1.served(&answer.body);
        let mut r = Response::new(pieces(answer.body.clone()));
        *r.status_mut() = answer.status;
        *r.headers_mut() = answer.headers.clone();
        let length: usize = answer.body.iter().map(bytes::Bytes::len).sum();
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        r
    };
    let headers = response.headers_mut();
    if caller.scope != answer.leader {
        headers.remove(header::SET_COOKIE);
    }
    if let Some(etag) = &answer.etag {
        headers.insert(header::ETAG, etag.clone());
    }
    mark_phase(headers, phase);
    *response.extensions_mut() = case.clone();
    response
}

/// Marks a response the cache did not build (a streamed bypass, an error) with its phase.
pub fn mark(mut response: Response<Body>, phase: CachePhase, case: &Extensions) -> Response<Body> {
    let headers: &mut HeaderMap = response.headers_mut();
    headers.remove(header::ETAG);
    mark_phase(headers, phase);
    response.extensions_mut().extend(case.clone());
    response
}
