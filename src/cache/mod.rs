//! The loadTable cache: answers from memory while fresh, revalidates after, coalesces
//! concurrent fills into one upstream request, and answers `If-None-Match` locally.

mod key;
mod store;

pub use key::{CacheKey, TableId};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Extensions, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use crate::body::{empty, full, Body};
use crate::config::CacheConfig;
use crate::error::iceberg_error;
use crate::etag::{if_none_match_matches, strong_etag};
use crate::headers::remove_hop_by_hop;
use crate::metrics::Metrics;
use crate::route::Operation;
use crate::upstream::{Upstream, UpstreamError};
use store::{Entry, FillTicket, NewEntry, Store};

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

enum FillOutcome {
    Stored(Arc<Entry>),
    Uncacheable(Buffered),
    /// Over `max_entry_bytes`: each caller streams it from upstream itself.
    TooLarge,
    Failed(UpstreamError),
}

type SharedFill = Shared<BoxFuture<'static, Arc<FillOutcome>>>;

pub struct TableCache {
    store: Store,
    inflight: Mutex<HashMap<CacheKey, SharedFill>>,
    config: CacheConfig,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    case_extensions: Extensions,
}

impl TableCache {
    pub fn new(
        config: CacheConfig,
        upstream: Arc<Upstream>,
        metrics: Arc<Metrics>,
        case_extensions: Extensions,
    ) -> Arc<Self> {
        let retain_for =
            config.fresh_for + config.stale_while_revalidate.max(config.stale_if_error);
        Arc::new(TableCache {
            store: Store::new(config.max_bytes, retain_for, metrics.clone()),
            inflight: Mutex::default(),
            config,
            upstream,
            metrics,
            case_extensions,
        })
    }

    /// Answers a loadTable request from the cache, filling or revalidating as needed.
    /// `make_request` builds the upstream request; it runs only when this call starts a fill, so
    /// a hit costs no header copying.
    pub async fn load(
        self: &Arc<Self>,
        key: CacheKey,
        make_request: impl FnOnce() -> Result<FillRequest, UpstreamError>,
        if_none_match: &[HeaderValue],
    ) -> Lookup {
        let now = Instant::now();
        let Some(entry) = self.store.get(&key) else {
            let (outcome, led) = self.join_fill(key, make_request, None);
            let outcome = outcome.await;
            let label = if led {
                CacheOutcome::Miss
            } else {
                CacheOutcome::Coalesced
            };
            return self.answer(&outcome, label, if_none_match);
        };
        if now < entry.fresh_until {
            return Lookup::Answer(
                self.serve(&entry, CacheOutcome::Hit, if_none_match),
                CacheOutcome::Hit,
            );
        }
        let stale_for = now.duration_since(entry.fresh_until);
        if stale_for < self.config.stale_while_revalidate {
            // Started and left running: the fill task outlives this request.
            let _background = self.join_fill(key, make_request, Some(entry.clone()));
            return Lookup::Answer(
                self.serve(&entry, CacheOutcome::Stale, if_none_match),
                CacheOutcome::Stale,
            );
        }
        let (outcome, led) = self.join_fill(key, make_request, Some(entry.clone()));
        let outcome = outcome.await;
        let upstream_failed = match &*outcome {
            FillOutcome::Failed(_) => true,
            FillOutcome::Uncacheable(b) => b.status.is_server_error(),
            _ => false,
        };
        if upstream_failed && stale_for < self.config.stale_if_error {
            return Lookup::Answer(
                self.serve(&entry, CacheOutcome::Stale, if_none_match),
                CacheOutcome::Stale,
            );
        }
        let label = if led {
            CacheOutcome::Revalidated
        } else {
            CacheOutcome::Coalesced
        };
        self.answer(&outcome, label, if_none_match)
    }

    fn answer(&self, outcome: &FillOutcome, label: CacheOutcome, inm: &[HeaderValue]) -> Lookup {
        match outcome {
            FillOutcome::Stored(entry) => Lookup::Answer(self.serve(entry, label, inm), label),
            FillOutcome::Uncacheable(buffered) => {
                let mut response = Response::new(full(buffered.body.clone()));
                *response.status_mut() = buffered.status;
                *response.headers_mut() = buffered.headers.clone();
                response
                    .headers_mut()
                    .insert(X_CACHE.clone(), HeaderValue::from_static(label.as_str()));
                Lookup::Answer(response, label)
            }
            FillOutcome::TooLarge => Lookup::PassThrough,
            FillOutcome::Failed(error) => Lookup::Answer(
                iceberg_error(error.status(), error.error_type(), &error.to_string()),
                label,
            ),
        }
    }

    /// Builds the answer from an entry: 304 when the client's `If-None-Match` matches, else the
    /// body. Never a 304 without `If-None-Match`.
    fn serve(
        &self,
        entry: &Entry,
        outcome: CacheOutcome,
        if_none_match: &[HeaderValue],
    ) -> Response<Body> {
        // A 304 tells the client to keep the credentials it got with this ETag: only while they
        // are inside their servable window.
        let credentials_servable = entry
            .servable_until
            .is_none_or(|until| Instant::now() < until);
        let not_modified = credentials_servable
            && !if_none_match.is_empty()
            && if_none_match_matches(if_none_match, &entry.etag);
        let mut response = if not_modified {
            self.metrics.cache_not_modified.inc();
            let mut r = Response::new(empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r.headers_mut().insert(header::ETAG, entry.etag.clone());
            r
        } else {
            let mut r = Response::new(full(entry.body.clone()));
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
    fn join_fill(
        self: &Arc<Self>,
        key: CacheKey,
        make_request: impl FnOnce() -> Result<FillRequest, UpstreamError>,
        stale: Option<Arc<Entry>>,
    ) -> (SharedFill, bool) {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fill) = inflight.get(&key) {
            self.metrics.cache_coalesced_waiters.inc();
            return (fill.clone(), false);
        }
        // A fill that finished between this request's lookup and taking the lock has stored
        // its entry already: serve that instead of asking upstream again.
        if stale.is_none() {
            if let Some(entry) = self.store.get(&key) {
                let done: SharedFill = futures::future::ready(Arc::new(FillOutcome::Stored(entry)))
                    .boxed()
                    .shared();
                return (done, false);
            }
        }
        let request = match make_request() {
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
        let task = tokio::spawn(async move {
            let outcome = cache.fill(&task_key, request, stale, &ticket).await;
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
        inflight.insert(key, fill.clone());
        (fill, true)
    }

    /// One upstream request for `key`, and what it leaves in the cache.
    async fn fill(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
    ) -> FillOutcome {
        let revalidating = stale.is_some();
        let outcome = self.fetch(key, request, stale, ticket).await;
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

    async fn fetch(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
    ) -> FillOutcome {
        let mut upstream_request = Request::get(request.uri);
        if let Some(headers) = upstream_request.headers_mut() {
            *headers = request.headers;
            if let Some(etag) = stale.as_ref().and_then(|e| e.upstream_etag.clone()) {
                headers.insert(header::IF_NONE_MATCH, etag);
            }
        }
        let upstream_request = match upstream_request.body(empty()) {
            Ok(r) => r,
            Err(e) => return FillOutcome::Failed(UpstreamError::BadUri(e.to_string())),
        };
        let response = match self
            .upstream
            .send(Operation::LoadTable, upstream_request)
            .await
        {
            Ok(r) => r,
            Err(e) => return FillOutcome::Failed(e),
        };
        let requested_at = Instant::now();
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
            return self.store_entry(key, ticket, self.refreshed(&old, requested_at));
        }

        let declared_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared_length.is_some_and(|n| n > self.config.max_entry_bytes) {
            return FillOutcome::TooLarge;
        }
        let limit = usize::try_from(self.config.max_entry_bytes).unwrap_or(usize::MAX);
        let collected = tokio::time::timeout(
            self.upstream.request_timeout(),
            Limited::new(body, limit).collect(),
        )
        .await;
        let body = match collected {
            Err(_) => {
                return FillOutcome::Failed(UpstreamError::Timeout {
                    upstream: "catalog body".to_owned(),
                    timeout: self.upstream.request_timeout(),
                })
            }
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return FillOutcome::TooLarge
            }
            Ok(Err(e)) => {
                return FillOutcome::Failed(UpstreamError::Protocol {
                    upstream: "catalog".to_owned(),
                    message: format!("response body broke off: {e}"),
                })
            }
            Ok(Ok(collected)) => collected.to_bytes(),
        };

        let vended = if is_cacheable(parts.status, &parts.headers) {
            crate::credentials::inspect(&body).ok()
        } else {
            None
        };
        let Some(vended) = vended else {
            return FillOutcome::Uncacheable(Buffered {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        };
        let servable_until = vended
            .servable_for(self.config.fresh_for)
            .map(|servable| requested_at + servable);
        let etag = strong_etag(key.snapshots.as_str(), &body);
        if let Some(old) = &stale {
            let result = if old.etag == etag {
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
        let headers = entry_headers(parts.headers, &etag, body.len());
        self.store_entry(
            key,
            ticket,
            NewEntry {
                body,
                headers,
                etag,
                upstream_etag,
                stored_at: requested_at,
                fresh_until: capped(requested_at + self.config.fresh_for, servable_until),
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
            stored_at: now,
            fresh_until: capped(now + self.config.fresh_for, old.servable_until),
            servable_until: old.servable_until,
        }
    }

    fn store_entry(&self, key: &CacheKey, ticket: &FillTicket, new: NewEntry) -> FillOutcome {
        let served = Buffered {
            status: StatusCode::OK,
            headers: new.headers.clone(),
            body: new.body.clone(),
        };
        match self.store.insert(ticket, key.clone(), new) {
            Some(entry) => FillOutcome::Stored(entry),
            // A write invalidated the table while this fill was in flight. The waiters asked
            // before that write finished, so they may have this answer; later readers may not.
            None => FillOutcome::Uncacheable(served),
        }
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

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }
}

fn capped(fresh_until: Instant, servable_until: Option<Instant>) -> Instant {
    servable_until.map_or(fresh_until, |until| fresh_until.min(until))
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
    headers
}
