//! The loadTable and loadView cache: local 304s, revalidations and their results, coalescing,
//! what is not cached and why, what it holds, what leaves it and why, and the callers checked
//! under `identity = revalidate`.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::registry::{counter, counter_vec, gauge, known, Label};

pub struct CacheMetrics {
    not_modified: IntCounter,
    revalidations: IntCounterVec,
    coalesced_waiters: IntCounter,
    fills_abandoned: IntCounter,
    bypasses: IntCounterVec,
    entries: IntGauge,
    bytes: IntGauge,
    max_bytes: IntGauge,
    evictions: IntCounterVec,
    invalidations: IntCounterVec,
    credential_caps: IntCounter,
    compressions: IntCounter,
    authz: IntCounterVec,
}

/// What revalidating a stale entry with the catalog came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidation {
    /// The catalog answered 304 to its own ETag.
    NotModified,
    /// A full answer with the same body.
    Unchanged,
    Changed,
    /// The catalog says the table is not there (or not for this caller).
    Gone,
    Error,
}

impl Label for Revalidation {
    fn as_str(self) -> &'static str {
        match self {
            Revalidation::NotModified => "not_modified",
            Revalidation::Unchanged => "unchanged",
            Revalidation::Changed => "changed",
            Revalidation::Gone => "gone",
            Revalidation::Error => "error",
        }
    }
}

/// Why an entry left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The memory bound.
    Size,
    Expired,
    Invalidated,
    Replaced,
}

impl Label for Eviction {
    fn as_str(self) -> &'static str {
        match self {
            Eviction::Size => "size",
            Eviction::Expired => "expired",
            Eviction::Invalidated => "invalidated",
            Eviction::Replaced => "replaced",
        }
    }
}

/// What checking a caller with its own credentials (`identity = revalidate`) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authz {
    Allowed,
    /// The caller was let in, to a version other than the one held.
    Changed,
    Denied,
    Error,
}

impl Label for Authz {
    fn as_str(self) -> &'static str {
        match self {
            Authz::Allowed => "allowed",
            Authz::Changed => "changed",
            Authz::Denied => "denied",
            Authz::Error => "error",
        }
    }
}

impl CacheMetrics {
    pub fn new(r: &Registry) -> CacheMetrics {
        let metrics = CacheMetrics {
            not_modified: counter(
                r,
                "icecache_cache_not_modified_total",
                "loadTable requests answered 304 Not Modified by icecache itself.",
            ),
            revalidations: counter_vec(
                r,
                "icecache_cache_revalidations_total",
                "Revalidations of stale entries upstream, by result (not_modified, unchanged, \
                 changed, gone, error).",
                &["result"],
            ),
            coalesced_waiters: counter(
                r,
                "icecache_cache_coalesced_waiters_total",
                "Requests that waited for another request's upstream fill instead of making one.",
            ),
            fills_abandoned: counter(
                r,
                "icecache_cache_fills_abandoned_total",
                "Fills that ended without an answer (a panic or a shutdown); their waiters asked \
                 again.",
            ),
            bypasses: counter_vec(
                r,
                "icecache_cache_bypasses_total",
                "loadTable answers not cached, by reason.",
                &["reason"],
            ),
            entries: gauge(
                r,
                "icecache_cache_entries",
                "Entries in the loadTable cache.",
            ),
            bytes: gauge(
                r,
                "icecache_cache_bytes",
                "Bytes held by the loadTable cache (bodies, gzip copies, headers and keys).",
            ),
            max_bytes: gauge(
                r,
                "icecache_cache_max_bytes",
                "The cache's memory bound (cache.max_bytes).",
            ),
            evictions: counter_vec(
                r,
                "icecache_cache_evictions_total",
                "Entries removed from the cache, by cause (size, expired, invalidated, replaced).",
                &["cause"],
            ),
            invalidations: counter_vec(
                r,
                "icecache_cache_invalidations_total",
                "Table invalidations, by reason (the operation that caused them, or purge).",
                &["reason"],
            ),
            credential_caps: counter(
                r,
                "icecache_cache_credential_caps_total",
                "Entries whose lifetime was shortened because their vended credentials expire.",
            ),
            compressions: counter(
                r,
                "icecache_cache_compressions_total",
                "gzip copies made of cached bodies (one per fill).",
            ),
            authz: counter_vec(
                r,
                "icecache_authz_revalidations_total",
                "Callers checked upstream with their own credentials under identity revalidate, \
                 by result (allowed, changed, denied, error).",
                &["result"],
            ),
        };
        known(
            &metrics.evictions,
            &[
                Eviction::Size,
                Eviction::Expired,
                Eviction::Invalidated,
                Eviction::Replaced,
            ],
        );
        known(
            &metrics.revalidations,
            &[
                Revalidation::NotModified,
                Revalidation::Unchanged,
                Revalidation::Changed,
                Revalidation::Gone,
                Revalidation::Error,
            ],
        );
        known(
            &metrics.authz,
            &[Authz::Allowed, Authz::Changed, Authz::Denied, Authz::Error],
        );
        metrics
    }

    pub fn not_modified(&self) {
        self.not_modified.inc();
    }

    pub fn revalidated(&self, result: Revalidation) {
        self.revalidations
            .with_label_values(&[result.as_str()])
            .inc();
    }

    pub fn coalesced(&self) {
        self.coalesced_waiters.inc();
    }

    pub fn fill_abandoned(&self) {
        self.fills_abandoned.inc();
    }

    pub fn bypassed(&self, reason: impl Label) {
        self.bypasses.with_label_values(&[reason.as_str()]).inc();
    }

    /// What the cache holds now (entries, bytes) and may hold.
    pub fn holding(&self, entries: u64, bytes: u64) {
        self.entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub fn bounded_at(&self, max_bytes: u64) {
        self.max_bytes
            .set(i64::try_from(max_bytes).unwrap_or(i64::MAX));
    }

    pub fn evicted(&self, cause: Eviction) {
        self.evictions.with_label_values(&[cause.as_str()]).inc();
    }

    pub fn invalidated(&self, reason: impl Label) {
        self.invalidations
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    pub fn credential_capped(&self) {
        self.credential_caps.inc();
    }

    pub fn compressed(&self) {
        self.compressions.inc();
    }

    pub fn authorized(&self, result: Authz) {
        self.authz.with_label_values(&[result.as_str()]).inc();
    }

    /// Local 304s so far (for `/cache/stats`).
    pub fn not_modified_count(&self) -> u64 {
        self.not_modified.get()
    }

    /// Coalesced waiters so far (for `/cache/stats`).
    pub fn coalesced_count(&self) -> u64 {
        self.coalesced_waiters.get()
    }

    pub(super) fn revalidations(&self) -> &IntCounterVec {
        &self.revalidations
    }

    pub(super) fn evictions(&self) -> &IntCounterVec {
        &self.evictions
    }

    pub(super) fn invalidations(&self) -> &IntCounterVec {
        &self.invalidations
    }

    pub(super) fn bypasses(&self) -> &IntCounterVec {
        &self.bypasses
    }
}
