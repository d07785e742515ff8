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
use super::heads::HeadForm;
use super::phase::CachePhase;
use crate::policy::headers::is_secret;
use crate::policy::identity::Scope;
use crate::policy::stage::{self, Shape, Stage};
use crate::policy::KeyPatterns;
use crate::policy::Policy;
use crate::telemetry::CacheMetrics;
use crate::wire::body::{empty, full, pieces, Body};
use crate::wire::etag::if_none_match_matches;
use crate::wire::packed::pack_fields;
pub use crate::wire::packed::{CACHE_STATUS, X_CACHE};
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
    /// The form of head a hit is answered with: `Packed` only for an HTTP/1.x answer sent as
    /// it is built, under a policy that strips none of the packed names.
    pub form: HeadForm,
}

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
/// as a hit, packed (`form`) but for what `strip` names.
fn not_modified_head(
    headers: &HeaderMap,
    etag: &HeaderValue,
    form: HeadForm,
    strip: &KeyPatterns,
) -> HeaderMap {
    let mut head = HeaderMap::with_capacity(KEPT_ON_304.len() + 4);
    for name in &KEPT_ON_304 {
        for value in headers.get_all(name) {
            head.append(name.clone(), value.clone());
        }
    }
    kept_head(head, etag, form, strip)
}

/// A head as an entry keeps it: its `ETag`, marked as a hit (`Age` is the answer's own). Packed,
/// every field goes into one (`wire::packed`) but those the encoder reads and those `strip`
/// names, which stay fields where the strip of the answer's fields finds them.
fn kept_head(
    mut head: HeaderMap,
    etag: &HeaderValue,
    form: HeadForm,
    strip: &KeyPatterns,
) -> HeaderMap {
    // The entry's own fields may hold a catalog's (or a CDN's) marks: one of each.
    head.insert(header::ETAG, etag.clone());
    mark_phase(&mut head, CachePhase::Hit);
    match form {
        HeadForm::Fields => head,
        // A value packing cannot hold (none of icecache's tags or marks is such) keeps its
        // fields; `ETag` is then written in lower case, which only a client reading it
        // case-sensitively would miss.
        HeadForm::Packed => pack_fields(&head, |name| is_secret(name, strip)).unwrap_or(head),
    }
}

/// The fields an answer from an entry may add to its kept head: `Age`, and the marks of a phase
/// other than a hit.
const ADDED: usize = 3;

/// `head` written into `into`: a map the request's own headers were emptied from (whose room,
/// the size of a request's head, hyper keeps for the connection's next request to be parsed
/// into without growing), or a new one.
fn written_into(head: &HeaderMap, mut into: HeaderMap) -> HeaderMap {
    into.clear();
    into.reserve(head.len() + ADDED);
    for (name, value) in head {
        into.append(name.clone(), value.clone());
    }
    into
}

/// The answer to `caller` from `entry` at `now`, its head written into `spare` (see
/// `written_into`). Never a 304 without `If-None-Match`, nor one that would confirm credentials
/// past their window.
pub fn from_entry(
    entry: &Entry,
    phase: CachePhase,
    caller: &Caller,
    counted: (&CacheMetrics, &Stage),
    case: &Extensions,
    now: Instant,
    spare: HeaderMap,
) -> Response<Body> {
    let content = &entry.content;
    let gzip = content.gzip.as_ref().filter(|_| caller.accepts_gzip);
    // The tag of the representation this request would get (RFC 9110 §13.1.2): a 304 carries
    // it, so a client that holds the other representation gets that one in full instead of a
    // 304 naming a tag it never received.
    let selected = gzip.map_or(&content.etag, |g| &g.etag);
    let names_this_version =
        !caller.if_none_match.is_empty() && if_none_match_matches(&caller.if_none_match, selected);
    // A head packed for a hit carries the hit's marks: any other phase marks a head of fields.
    let form = match phase {
        CachePhase::Hit => caller.form,
        _ => HeadForm::Fields,
    };
    if names_this_version && entry.credentials_servable(now) {
        counted.0.not_modified();
        let policy = &caller.policy;
        let head = content
            .heads
            .not_modified(form, gzip.is_some(), policy.generation, || {
                not_modified_head(&content.headers, selected, form, &policy.strip)
            });
        let mut r = Response::new(empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        *r.headers_mut() = written_into(&head, spare);
        finish(&mut r, entry, phase, now, case, form);
        return r;
    }
    let policy = &caller.policy;
    let head = content
        .heads
        .full(form, gzip.is_some(), policy.generation, || {
            full_head(content, gzip, form, &policy.strip)
        });
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
    *response.headers_mut() = written_into(&head, spare);
    finish(&mut response, entry, phase, now, case, form);
    response
}

/// The head of a 200 from an entry's content, in the gzip representation or the identity one,
/// marked as a hit, packed (`form`) but for what `strip` names.
fn full_head(
    content: &Content,
    gzip: Option<&Gzipped>,
    form: HeadForm,
    strip: &KeyPatterns,
) -> HeaderMap {
    let mut head = HeaderMap::with_capacity(content.headers.len() + 6);
    for (name, value) in &content.headers {
        head.append(name.clone(), value.clone());
    }
    let etag = match gzip {
        Some(gzip) => {
            head.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            head.insert(header::CONTENT_LENGTH, HeaderValue::from(gzip.body.len()));
            &gzip.etag
        }
        None => {
            head.insert(header::CONTENT_LENGTH, HeaderValue::from(content.length));
            &content.etag
        }
    };
    kept_head(head, etag, form, strip)
}

/// What every answer from an entry carries beyond its head: its marks (a hit's head has them),
/// its `Age`, and, on a head of fields, the case map that spells `ETag` (a packed head spells
/// it itself).
fn finish(
    response: &mut Response<Body>,
    entry: &Entry,
    phase: CachePhase,
    now: Instant,
    case: &Extensions,
    form: HeadForm,
) {
    let headers = response.headers_mut();
    if phase != CachePhase::Hit {
        mark_phase(headers, phase);
    }
    headers.insert(header::AGE, seconds_value(entry.age(now).as_secs()));
    if form == HeadForm::Fields {
        *response.extensions_mut() = case.clone();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry's fields as a catalog behind a cache of its own sends them.
    fn marked_by_a_cdn() -> HeaderMap {
        let mut head = HeaderMap::new();
        head.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        head.insert(X_CACHE.clone(), HeaderValue::from_static("MISS from cdn"));
        head.insert(
            CACHE_STATUS.clone(),
            HeaderValue::from_static("cdn; fwd=miss"),
        );
        head
    }

    fn tag() -> HeaderValue {
        HeaderValue::from_static("\"abc\"")
    }

    fn no_strip() -> KeyPatterns {
        KeyPatterns::new(std::iter::empty::<&str>())
    }

    #[test]
    fn a_packed_head_holds_its_fields_the_marks_and_the_tag_in_one_and_nothing_of_the_catalogs() {
        let head = kept_head(marked_by_a_cdn(), &tag(), HeadForm::Packed, &no_strip());
        let names: Vec<&str> = head.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["vary"]);
        assert_eq!(
            head[header::VARY].as_bytes(),
            b"accept-encoding\r\nx-cache: HIT\r\ncache-status: icecache; hit\r\nETag: \"abc\""
        );
    }

    #[test]
    fn a_packed_head_keeps_apart_what_the_policy_strips_and_what_frames_the_answer() {
        let mut fields = marked_by_a_cdn();
        fields.insert(
            HeaderName::from_static("x-amz-security-token"),
            HeaderValue::from_static("secret"),
        );
        fields.insert(
            HeaderName::from_static("x-custom-key"),
            HeaderValue::from_static("secret"),
        );
        fields.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        let strip = KeyPatterns::new(["x-custom*"]);
        let head = kept_head(fields, &tag(), HeadForm::Packed, &strip);
        let names: Vec<&str> = head.keys().map(|n| n.as_str()).collect();
        // `x-amz-security-token` is a credential header under any strip keys.
        assert_eq!(
            names,
            [
                "vary",
                "x-amz-security-token",
                "x-custom-key",
                "content-length"
            ]
        );
        assert!(!head[header::VARY]
            .as_bytes()
            .windows(6)
            .any(|w| w == b"secret"));
    }

    #[test]
    fn a_head_of_fields_holds_each_mark_and_the_tag_once() {
        let head = kept_head(marked_by_a_cdn(), &tag(), HeadForm::Fields, &no_strip());
        assert_eq!(head.len(), 4);
        assert_eq!(head[header::ETAG], "\"abc\"");
        assert_eq!(head[&X_CACHE], "HIT");
        assert_eq!(head[&CACHE_STATUS], "icecache; hit");
    }
}
