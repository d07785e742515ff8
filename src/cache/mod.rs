//! The loadTable cache: answers from memory while fresh, revalidates after, coalesces
//! concurrent fills into one upstream request, and answers `If-None-Match` locally.

mod key;
mod store;

pub use key::{CacheKey, TableId, ACCESS_DELEGATION};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Extensions, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use crate::body::chain;
use crate::body::{empty, full, Body};
use crate::config::CacheConfig;
use crate::credentials::{self, spliced, Vended};
use crate::error::iceberg_error;
use crate::etag::{if_none_match_matches, strong_etag};
use crate::headers::remove_hop_by_hop;
use crate::identity::Scope;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::policy::{Credentials, Identity, Injection, Policy};
use crate::route::Operation;
use crate::upstream::{Upstream, UpstreamError};
use store::{Entry, FillTicket, Gzipped, NewEntry, Store};

pub static X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// How a loadTable answer was produced: the `x-cache` header and the metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Served from a fresh entry.
    Hit,
    /// Fetched upstream by this request.
    Miss,
    /// A stale entry was confirmed or replaced upstream by this request.
    Revalidated,
    /// A stale entry served without confirmation (revalidating in the background, or upstream
    /// failing within `stale_if_error`).
    Stale,
    /// Answered by another request's upstream fill.
    Coalesced,
    /// Not cacheable: passed through to the catalog.
    Bypass,
}

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "HIT",
            CacheOutcome::Miss => "MISS",
            CacheOutcome::Revalidated => "REVALIDATED",
            CacheOutcome::Stale => "STALE",
            CacheOutcome::Coalesced => "COALESCED",
            CacheOutcome::Bypass => "BYPASS",
        }
    }
}

/// What the proxy should do with a loadTable request.
pub enum Lookup {
    Answer(Response<Body>, CacheOutcome),
    /// Stream it through to the catalog, uncached.
    PassThrough,
}

/// The upstream request a fill makes for a key: the client's path and query and its
/// forwarded headers, without conditionals and encodings (icecache keeps identity bodies and its
/// own ETags never go upstream).
#[derive(Clone)]
pub struct FillRequest {
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl FillRequest {
    pub fn new(uri: Uri, mut headers: HeaderMap) -> Self {
        for name in [
            header::IF_NONE_MATCH,
            header::IF_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
            header::ACCEPT_ENCODING,
            header::CONTENT_LENGTH,
        ] {
            headers.remove(name);
        }
        FillRequest { uri, headers }
    }
}

/// A response the catalog gave that is not cached but can be shared with coalesced waiters.
struct Buffered {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Buffered {
    fn response(&self, label: CacheOutcome) -> Response<Body> {
        let mut response = Response::new(full(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
            .headers_mut()
            .insert(X_CACHE.clone(), HeaderValue::from_static(label.as_str()));
        response
    }
}

/// The fill's leader: whose credentials fetched the entry, under which policy.
struct FillLeader {
    scope: Scope,
    policy: Arc<Policy>,
}

/// A LoadTableResult after the credential policy, with the ETag of what will be served.
struct Prepared {
    body: Bytes,
    vended: Vended,
    injection: Option<Arc<Injection>>,
    config_empty: bool,
    etag: HeaderValue,
    length: usize,
}

enum BodyError {
    TooLarge,
    Upstream(UpstreamError),
}

fn upstream_error(error: &UpstreamError) -> Response<Body> {
    iceberg_error(error.status(), error.error_type(), &error.to_string())
}

enum FillOutcome {
    Stored(Arc<Entry>),
    Uncacheable(Buffered),
    /// Over `max_entry_bytes`: each caller streams it from upstream itself.
    TooLarge,
    Failed(UpstreamError),
}

type SharedFill = Shared<BoxFuture<'static, Arc<FillOutcome>>>;

/// One loadTable request as the cache handles it: the key, the caller, how to ask the catalog
/// with the caller's headers, and whether a changed table may be refilled for it.
struct Ask<'a> {
    key: CacheKey,
    caller: &'a Caller<'a>,
    make_request: &'a (dyn Fn() -> Result<FillRequest, UpstreamError> + Sync + 'a),
    may_refill: bool,
}

/// Who is asking, under which policy, and what they already hold.
pub struct Caller<'a> {
    /// The caller's own identity scope (the key's scope may be shared).
    pub scope: Scope,
    pub policy: &'a Arc<Policy>,
    pub if_none_match: &'a [HeaderValue],
    /// Whether the caller's `Accept-Encoding` takes gzip.
    pub accepts_gzip: bool,
}

pub struct TableCache {
    store: Store,
    inflight: Mutex<HashMap<CacheKey, SharedFill>>,
    live: Arc<Live>,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    case_extensions: Extensions,
}

impl TableCache {
    /// The memory bound and the time entries are kept at all are fixed at start-up; freshness,
    /// policies and limits are read from `live` on every use, so a reload applies at once.
    pub fn new(
        live: Arc<Live>,
        upstream: Arc<Upstream>,
        metrics: Arc<Metrics>,
        case_extensions: Extensions,
    ) -> Arc<Self> {
        let config = live.get().cache.clone();
        metrics
            .cache_max_bytes
            .set(i64::try_from(config.max_bytes).unwrap_or(i64::MAX));
        // Reloads may lengthen the stale windows: keep entries at least ten minutes.
        let retain_for = (config.fresh_for
            + config.stale_while_revalidate.max(config.stale_if_error))
        .max(Duration::from_secs(600));
        Arc::new(TableCache {
            store: Store::new(config.max_bytes, retain_for, metrics.clone()),
            inflight: Mutex::default(),
            live,
            upstream,
            metrics,
            case_extensions,
        })
    }

    fn settings(&self) -> CacheConfig {
        self.live.get().cache.clone()
    }

    /// Answers a loadTable request from the cache, filling or revalidating as needed.
    /// `make_request` builds the upstream request with the caller's headers; it runs only when
    /// the caller needs the catalog, so a hit costs no header copying.
    pub async fn load(
        self: &Arc<Self>,
        key: CacheKey,
        caller: &Caller<'_>,
        make_request: impl Fn() -> Result<FillRequest, UpstreamError> + Sync,
    ) -> Lookup {
        let ask = Ask {
            key,
            caller,
            make_request: &make_request,
            may_refill: true,
        };
        self.load_once(&ask).await
    }

    async fn load_once(self: &Arc<Self>, ask: &Ask<'_>) -> Lookup {
        let key = &ask.key;
        let now = Instant::now();
        let Some(entry) = self.store.get(key) else {
            let (outcome, led) = self.join_fill(ask, None);
            let outcome = outcome.await;
            let label = if led {
                CacheOutcome::Miss
            } else {
                CacheOutcome::Coalesced
            };
            return self.answer(ask, &outcome, label, led).await;
        };
        let settings = self.settings();
        let fresh_until = entry.fresh_until(settings.fresh_for);
        if now < fresh_until {
            return self.deliver(ask, &entry, CacheOutcome::Hit).await;
        }
        let stale_for = now.duration_since(fresh_until);
        if stale_for < settings.stale_while_revalidate {
            // Started and left running: the fill task outlives this request.
            let _background = self.join_fill(ask, Some(entry.clone()));
            return self.deliver(ask, &entry, CacheOutcome::Stale).await;
        }
        let (outcome, led) = self.join_fill(ask, Some(entry.clone()));
        let outcome = outcome.await;
        let upstream_failed = match &*outcome {
            FillOutcome::Failed(_) => true,
            FillOutcome::Uncacheable(b) => b.status.is_server_error(),
            _ => false,
        };
        if upstream_failed && stale_for < settings.stale_if_error {
            return self.deliver(ask, &entry, CacheOutcome::Stale).await;
        }
        let label = if led {
            CacheOutcome::Revalidated
        } else {
            CacheOutcome::Coalesced
        };
        self.answer(ask, &outcome, label, led).await
    }

    async fn answer(
        self: &Arc<Self>,
        ask: &Ask<'_>,
        outcome: &FillOutcome,
        label: CacheOutcome,
        led: bool,
    ) -> Lookup {
        match outcome {
            FillOutcome::Stored(entry) => self.deliver(ask, entry, label).await,
            // Under `revalidate` the fill was made with another caller's credentials: its
            // answer (a 403, say) says nothing about this caller, who asks for itself.
            FillOutcome::Uncacheable(_)
                if !led && ask.caller.policy.identity == Identity::Revalidate =>
            {
                Lookup::PassThrough
            }
            FillOutcome::Uncacheable(buffered) => Lookup::Answer(buffered.response(label), label),
            FillOutcome::TooLarge => Lookup::PassThrough,
            FillOutcome::Failed(error) => Lookup::Answer(upstream_error(error), label),
        }
    }

    /// Serves an entry to a caller that may have it: under `revalidate`, a caller not yet
    /// confirmed for this entry is first checked upstream with its own credentials.
    async fn deliver(
        self: &Arc<Self>,
        ask: &Ask<'_>,
        entry: &Arc<Entry>,
        label: CacheOutcome,
    ) -> Lookup {
        let caller = ask.caller;
        if caller.policy.identity == Identity::Revalidate && !entry.is_confirmed(&caller.scope) {
            return self.authorize(ask, entry).await;
        }
        Lookup::Answer(self.serve(entry, label, caller), label)
    }

    /// Asks the catalog, with the caller's own credentials, whether the caller may have the
    /// entry's version: a 304 (or an identical body) confirms it; a refusal goes back as is.
    async fn authorize(self: &Arc<Self>, ask: &Ask<'_>, entry: &Arc<Entry>) -> Lookup {
        let (key, caller) = (&ask.key, ask.caller);
        let result = |label: &str| {
            self.metrics
                .authz_revalidations
                .with_label_values(&[label])
                .inc()
        };
        let request = match (ask.make_request)() {
            Ok(request) => request,
            Err(e) => return Lookup::Answer(upstream_error(&e), CacheOutcome::Revalidated),
        };
        let response = match self.send_get(request, entry.upstream_etag.clone()).await {
            Ok(response) => response,
            Err(e) => {
                result("error");
                return Lookup::Answer(upstream_error(&e), CacheOutcome::Revalidated);
            }
        };
        let label = CacheOutcome::Revalidated;
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        if parts.status == StatusCode::NOT_MODIFIED && entry.upstream_etag.is_some() {
            result("allowed");
            entry.confirm(caller.scope, Instant::now() + self.live.get().authz_ttl);
            return Lookup::Answer(self.serve(entry, label, caller), label);
        }
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => return Lookup::PassThrough,
            Err(BodyError::Upstream(e)) => {
                result("error");
                return Lookup::Answer(upstream_error(&e), label);
            }
        };
        if parts.status == StatusCode::OK && is_cacheable(parts.status, &parts.headers) {
            let same = self
                .prepare(key.snapshots.as_str(), &body, caller.policy)
                .is_some_and(|prepared| prepared.etag == entry.etag);
            if same {
                result("allowed");
                entry.confirm(caller.scope, Instant::now() + self.live.get().authz_ttl);
                return Lookup::Answer(self.serve(entry, label, caller), label);
            }
            // The table moved on since the entry was filled: refill it with this caller's
            // credentials (once; a table changing that fast is passed through).
            result("changed");
            self.store.remove(key);
            if ask.may_refill {
                let refill = Ask {
                    key: key.clone(),
                    may_refill: false,
                    ..*ask
                };
                return Box::pin(self.load_once(&refill)).await;
            }
            return Lookup::PassThrough;
        }
        result(if parts.status.is_client_error() {
            "denied"
        } else {
            "error"
        });
        let buffered = Buffered {
            status: parts.status,
            headers: parts.headers,
            body,
        };
        Lookup::Answer(buffered.response(label), label)
    }

    /// Builds the answer from an entry: 304 when the client's `If-None-Match` matches, else the
    /// body. Never a 304 without `If-None-Match`.
    fn serve(&self, entry: &Entry, outcome: CacheOutcome, caller: &Caller<'_>) -> Response<Body> {
        let if_none_match = caller.if_none_match;
        let gzip = entry.gzip.as_ref().filter(|_| caller.accepts_gzip);
        // A 304 tells the client to keep the credentials it got with this ETag: only while they
        // are inside their servable window. Either representation's ETag names this version.
        let credentials_servable = entry
            .servable_until
            .is_none_or(|until| Instant::now() < until);
        let not_modified = credentials_servable
            && !if_none_match.is_empty()
            && (if_none_match_matches(if_none_match, &entry.etag)
                || entry
                    .gzip
                    .as_ref()
                    .is_some_and(|g| if_none_match_matches(if_none_match, &g.etag)));
        let mut response = if not_modified {
            self.metrics.cache_not_modified.inc();
            let mut r = Response::new(empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            let etag = gzip.map_or(&entry.etag, |g| &g.etag);
            r.headers_mut().insert(header::ETAG, etag.clone());
            r
        } else if let Some(gzip) = gzip {
            let mut r = Response::new(full(gzip.body.clone()));
            *r.headers_mut() = gzip.headers.clone();
            r
        } else {
            let body = match &entry.injection {
                Some(injection) => {
                    self.metrics.credentials_injected.inc();
                    chain(spliced(
                        &entry.body,
                        &injection.fragment,
                        entry.config_empty,
                    ))
                }
                None => full(entry.body.clone()),
            };
            let mut r = Response::new(body);
            *r.headers_mut() = entry.headers.clone();
            r
        };
        let age = Instant::now().duration_since(entry.stored_at).as_secs();
        let headers = response.headers_mut();
        headers.insert(X_CACHE.clone(), HeaderValue::from_static(outcome.as_str()));
        headers.insert(header::AGE, HeaderValue::from(age));
        *response.extensions_mut() = self.case_extensions.clone();
        response
    }

    /// Joins the fill in flight for `key`, or starts one. Returns the fill and whether this
    /// call started it.
    fn join_fill(self: &Arc<Self>, ask: &Ask<'_>, stale: Option<Arc<Entry>>) -> (SharedFill, bool) {
        let (key, caller) = (&ask.key, ask.caller);
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fill) = inflight.get(key) {
            self.metrics.cache_coalesced_waiters.inc();
            return (fill.clone(), false);
        }
        // A fill that finished between this request's lookup and taking the lock has stored
        // its entry already: serve that instead of asking upstream again.
        if stale.is_none() {
            if let Some(entry) = self.store.get(key) {
                let done: SharedFill = futures::future::ready(Arc::new(FillOutcome::Stored(entry)))
                    .boxed()
                    .shared();
                return (done, false);
            }
        }
        let request = match (ask.make_request)() {
            Ok(request) => request,
            Err(e) => {
                let failed: SharedFill = futures::future::ready(Arc::new(FillOutcome::Failed(e)))
                    .boxed()
                    .shared();
                return (failed, true);
            }
        };
        let ticket = self.store.begin_fill(&key.table);
        let cache = self.clone();
        let task_key = key.clone();
        let leader = FillLeader {
            scope: caller.scope,
            policy: caller.policy.clone(),
        };
        let task = tokio::spawn(async move {
            let outcome = cache
                .fill(&task_key, request, stale, &ticket, &leader)
                .await;
            cache.store.end_fill(ticket, &task_key.table);
            cache
                .inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&task_key);
            Arc::new(outcome)
        });
        let fill: SharedFill = async move {
            task.await.unwrap_or_else(|join_error| {
                Arc::new(FillOutcome::Failed(UpstreamError::Protocol {
                    upstream: "fill task".to_owned(),
                    message: join_error.to_string(),
                }))
            })
        }
        .boxed()
        .shared();
        inflight.insert(key.clone(), fill.clone());
        (fill, true)
    }

    /// One upstream request for `key`, and what it leaves in the cache.
    async fn fill(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
        leader: &FillLeader,
    ) -> FillOutcome {
        let revalidating = stale.is_some();
        let outcome = self.fetch(key, request, stale, ticket, leader).await;
        if revalidating {
            let result = match &outcome {
                FillOutcome::Stored(_) | FillOutcome::Uncacheable(_) | FillOutcome::TooLarge => {
                    None
                }
                FillOutcome::Failed(_) => Some("error"),
            };
            if let Some(result) = result {
                self.metrics
                    .cache_revalidations
                    .with_label_values(&[result])
                    .inc();
            }
            if let FillOutcome::Uncacheable(b) = &outcome {
                let result = if b.status.is_server_error() {
                    "error"
                } else {
                    "gone"
                };
                self.metrics
                    .cache_revalidations
                    .with_label_values(&[result])
                    .inc();
                if !b.status.is_server_error() {
                    self.store.remove(key);
                }
            }
            if matches!(outcome, FillOutcome::TooLarge) {
                self.store.remove(key);
            }
        }
        outcome
    }

    /// A loadTable answered without the cache under `strip` or `inject`: the body is read whole
    /// and the policy applied, so no vended credential passes even when nothing is cached. A
    /// body larger than `STRIP_LIMIT` cannot be checked and is refused.
    pub async fn uncached(
        &self,
        representation: &str,
        caller: &Caller<'_>,
        request: Result<FillRequest, UpstreamError>,
    ) -> Response<Body> {
        let response = match request {
            Ok(request) => self.send_get(request, None).await,
            Err(e) => Err(e),
        };
        let (mut parts, body) = match response {
            Ok(response) => response.into_parts(),
            Err(e) => return upstream_error(&e),
        };
        remove_hop_by_hop(&mut parts.headers);
        let body = match self.read_body_up_to(body, STRIP_LIMIT).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                return iceberg_error(
                    StatusCode::BAD_GATEWAY,
                    "BadGatewayException",
                    &format!(
                        "the catalog's answer is larger than {STRIP_LIMIT} bytes: too large to \
                         remove vended credentials from, so it is not passed on"
                    ),
                )
            }
            Err(BodyError::Upstream(e)) => return upstream_error(&e),
        };
        let label = CacheOutcome::Bypass;
        let prepared = (parts.status == StatusCode::OK)
            .then(|| self.prepare(representation, &body, caller.policy))
            .flatten();
        let Some(prepared) = prepared else {
            let buffered = Buffered {
                status: parts.status,
                headers: parts.headers,
                body,
            };
            return buffered.response(label);
        };
        let headers = entry_headers(parts.headers, &prepared.etag, prepared.length);
        let body = match &prepared.injection {
            Some(injection) => {
                self.metrics.credentials_injected.inc();
                chain(spliced(
                    &prepared.body,
                    &injection.fragment,
                    prepared.config_empty,
                ))
            }
            None => full(prepared.body),
        };
        let mut response = Response::new(body);
        *response.headers_mut() = headers;
        response
            .headers_mut()
            .insert(X_CACHE.clone(), HeaderValue::from_static(label.as_str()));
        response
    }

    /// A GET to the catalog with the given headers, conditional on `upstream_etag` when given.
    async fn send_get(
        &self,
        request: FillRequest,
        upstream_etag: Option<HeaderValue>,
    ) -> Result<Response<hyper::body::Incoming>, UpstreamError> {
        let mut upstream_request = Request::get(request.uri);
        if let Some(headers) = upstream_request.headers_mut() {
            *headers = request.headers;
            if let Some(etag) = upstream_etag {
                headers.insert(header::IF_NONE_MATCH, etag);
            }
        }
        let upstream_request = upstream_request
            .body(empty())
            .map_err(|e| UpstreamError::BadUri(e.to_string()))?;
        self.upstream
            .send(Operation::LoadTable, upstream_request)
            .await
    }

    /// Reads a catalog body whole, up to `max_entry_bytes` and within the request timeout.
    async fn read_body(&self, body: hyper::body::Incoming) -> Result<Bytes, BodyError> {
        self.read_body_up_to(body, self.settings().max_entry_bytes)
            .await
    }

    async fn read_body_up_to(
        &self,
        body: hyper::body::Incoming,
        limit: u64,
    ) -> Result<Bytes, BodyError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let timeout = self.upstream.request_timeout();
        match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
            Err(_) => Err(BodyError::Upstream(UpstreamError::Timeout {
                upstream: "catalog body".to_owned(),
                timeout,
            })),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                Err(BodyError::TooLarge)
            }
            Ok(Err(e)) => Err(BodyError::Upstream(UpstreamError::Protocol {
                upstream: "catalog".to_owned(),
                message: format!("response body broke off: {e}"),
            })),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }

    /// Applies the credential policy to a LoadTableResult and computes the ETag of what will be
    /// served; None when the body is not a LoadTableResult.
    fn prepare(&self, representation: &str, body: &Bytes, policy: &Policy) -> Option<Prepared> {
        let injection = match policy.credentials {
            Credentials::Passthrough => None,
            Credentials::Strip | Credentials::Inject => policy.injection.clone(),
        };
        let (body, vended, config_empty) = match policy.credentials {
            Credentials::Passthrough => (body.clone(), credentials::inspect(body).ok()?, false),
            Credentials::Strip | Credentials::Inject => {
                let stripped = credentials::strip(body, &self.live.get().strip_keys).ok()?;
                if stripped.removed > 0 {
                    self.metrics.credentials_stripped.inc();
                }
                (stripped.body, stripped.vended, stripped.config_empty)
            }
        };
        let (etag, length) = match &injection {
            Some(injection) => {
                let parts = spliced(&body, &injection.fragment, config_empty);
                let length = parts.iter().map(Bytes::len).sum();
                (strong_etag(representation, &parts.concat()), length)
            }
            None => (strong_etag(representation, &body), body.len()),
        };
        Some(Prepared {
            body,
            vended,
            injection,
            config_empty,
            etag,
            length,
        })
    }

    async fn fetch(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
        leader: &FillLeader,
    ) -> FillOutcome {
        // Freshness counts from when the catalog was asked, not from when it finished answering.
        let requested_at = Instant::now();
        let upstream_etag = stale.as_ref().and_then(|e| e.upstream_etag.clone());
        let response = match self.send_get(request, upstream_etag).await {
            Ok(r) => r,
            Err(e) => return FillOutcome::Failed(e),
        };
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);

        if parts.status == StatusCode::NOT_MODIFIED {
            let Some(old) = stale.filter(|e| e.upstream_etag.is_some()) else {
                return FillOutcome::Failed(UpstreamError::Protocol {
                    upstream: "catalog".to_owned(),
                    message: "answered 304 to an unconditional request".to_owned(),
                });
            };
            self.metrics
                .cache_revalidations
                .with_label_values(&["not_modified"])
                .inc();
            return self.store_entry(key, ticket, leader, self.refreshed(&old, requested_at));
        }

        let declared_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared_length.is_some_and(|n| n > self.settings().max_entry_bytes) {
            return FillOutcome::TooLarge;
        }
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => return FillOutcome::TooLarge,
            Err(BodyError::Upstream(e)) => return FillOutcome::Failed(e),
        };
        let prepared = if is_cacheable(parts.status, &parts.headers) {
            self.prepare(key.snapshots.as_str(), &body, &leader.policy)
        } else {
            None
        };
        let Some(prepared) = prepared else {
            return FillOutcome::Uncacheable(Buffered {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        };
        let settings = self.settings();
        let servable = prepared.vended.servable_for(settings.fresh_for);
        let retained =
            settings.fresh_for + settings.stale_if_error.max(settings.stale_while_revalidate);
        if servable.is_some_and(|servable| servable < retained) {
            self.metrics.cache_credential_caps.inc();
        }
        let servable_until = servable.map(|servable| requested_at + servable);
        if let Some(old) = &stale {
            let result = if old.etag == prepared.etag {
                "unchanged"
            } else {
                "changed"
            };
            self.metrics
                .cache_revalidations
                .with_label_values(&[result])
                .inc();
        }
        let upstream_etag = parts.headers.get(header::ETAG).cloned();
        let headers = entry_headers(parts.headers, &prepared.etag, prepared.length);
        // Compressed once per fill, off the async threads; never a body with injected secrets.
        let gzip = if self.settings().gzip
            && prepared.injection.is_none()
            && prepared.body.len() >= GZIP_MIN_BYTES
        {
            let body = prepared.body.clone();
            self.metrics.cache_compressions.inc();
            match tokio::task::spawn_blocking(move || gzip(&body)).await {
                Ok(Ok(compressed)) => Some(gzipped(compressed, &headers, &prepared.etag)),
                _ => None,
            }
        } else {
            None
        };
        self.store_entry(
            key,
            ticket,
            leader,
            NewEntry {
                body: prepared.body,
                headers,
                etag: prepared.etag,
                upstream_etag,
                injection: prepared.injection,
                config_empty: prepared.config_empty,
                gzip,
                stored_at: requested_at,
                servable_until,
            },
        )
    }

    fn refreshed(&self, old: &Entry, now: Instant) -> NewEntry {
        NewEntry {
            body: old.body.clone(),
            headers: old.headers.clone(),
            etag: old.etag.clone(),
            upstream_etag: old.upstream_etag.clone(),
            injection: old.injection.clone(),
            config_empty: old.config_empty,
            gzip: old.gzip.clone(),
            stored_at: now,
            servable_until: old.servable_until,
        }
    }

    /// Stores a fill's entry, confirmed for the caller whose credentials fetched it. When a
    /// write invalidated the table while the fill was in flight, the entry is not stored: its
    /// waiters asked before that write finished and may have it, later readers may not.
    fn store_entry(
        &self,
        key: &CacheKey,
        ticket: &FillTicket,
        leader: &FillLeader,
        new: NewEntry,
    ) -> FillOutcome {
        let entry = match self.store.insert(ticket, key.clone(), new) {
            Ok(stored) => stored,
            Err(unstored) => unstored,
        };
        entry.confirm(leader.scope, Instant::now() + self.live.get().authz_ttl);
        FillOutcome::Stored(entry)
    }

    pub fn invalidate_table(&self, table: &TableId, reason: Operation) {
        self.store.invalidate_table(table);
        self.count_invalidation(reason.as_str());
    }

    pub fn invalidate_namespace(
        &self,
        prefix: Option<&str>,
        namespace: &[String],
        reason: Operation,
    ) {
        self.store.invalidate_namespace(prefix, namespace);
        self.count_invalidation(reason.as_str());
    }

    pub fn invalidate_all(&self, reason: Operation) {
        self.store.invalidate_where(|_| true);
        self.count_invalidation(reason.as_str());
    }

    /// Purges the tables that match every given part; None matches any prefix, namespace or
    /// table.
    pub fn purge(
        &self,
        prefix: Option<&str>,
        namespace: Option<&[String]>,
        table: Option<&str>,
    ) -> usize {
        let removed = self.store.invalidate_where(|t| {
            prefix.is_none_or(|p| t.prefix.as_deref() == Some(p))
                && namespace.is_none_or(|n| t.namespace.as_slice() == n)
                && table.is_none_or(|name| t.table == name)
        });
        self.count_invalidation("purge");
        removed
    }

    fn count_invalidation(&self, reason: &str) {
        self.metrics
            .cache_invalidations
            .with_label_values(&[reason])
            .inc();
    }

    /// Refreshes the entry and byte gauges; called before metrics are rendered.
    pub fn usage(&self) -> (u64, u64) {
        let (entries, bytes) = self.store.usage();
        self.metrics.cache_entries.set(entries as i64);
        self.metrics.cache_bytes.set(bytes as i64);
        (entries, bytes)
    }

    pub fn max_bytes(&self) -> u64 {
        self.settings().max_bytes
    }
}

/// The largest loadTable answer read whole to apply `strip` or `inject` when it is not cached
/// (real metadata reaches 250 MB).
const STRIP_LIMIT: u64 = 512 << 20;

/// Bodies smaller than this are not worth a gzip copy.
const GZIP_MIN_BYTES: usize = 1024;

fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    Ok(Bytes::from(encoder.finish()?))
}

/// The gzip representation: its own strong ETag (a different representation of the same
/// version), `Content-Encoding` and length.
fn gzipped(body: Bytes, identity_headers: &HeaderMap, etag: &HeaderValue) -> Gzipped {
    let tag = etag.to_str().unwrap_or("\"\"").trim_end_matches('"');
    let etag = HeaderValue::from_str(&format!("{tag}-gzip\"")).unwrap_or_else(|_| etag.clone());
    let mut headers = identity_headers.clone();
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Gzipped {
        body,
        headers,
        etag,
    }
}

/// Only `200` JSON answers in identity encoding, and never what the catalog marked `no-store`.
/// (The body must also parse as a LoadTableResult; the credentials check does that.)
fn is_cacheable(status: StatusCode, headers: &HeaderMap) -> bool {
    if status != StatusCode::OK {
        return false;
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let no_store = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-store"));
    json && !encoded && !no_store
}

/// The headers served with an entry: the catalog's, less those that are per-message or that
/// name the catalog's own validators, plus icecache's ETag.
fn entry_headers(mut headers: HeaderMap, etag: &HeaderValue, length: usize) -> HeaderMap {
    for name in [
        header::ETAG,
        header::DATE,
        header::AGE,
        header::SET_COOKIE,
        header::CONTENT_LENGTH,
        header::LAST_MODIFIED,
    ] {
        headers.remove(name);
    }
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    headers
}
