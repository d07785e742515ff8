//! The loadTable cache: answers from memory while fresh, revalidates after, coalesces
//! concurrent fills into one upstream request, and answers `If-None-Match` locally.

mod authz;
mod fetch;
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
