//! Prometheus metrics. Labels are bounded: operations, status codes, cache phases, no-cache
//! reasons and causes, never a table name or a token. Callers name what happened through the
//! methods below; the label vectors stay private to this module.

use std::sync::atomic::{AtomicU64, Ordering};

use super::request_series::{self, Series};

use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    /// Tells this registry's remembered series from another's (tests make several).
    id: u64,
    registry: Registry,
    requests: IntCounterVec,
    request_duration: HistogramVec,
    upstream_duration: HistogramVec,
    upstream_responses: IntCounterVec,
    upstream_errors: IntCounterVec,
    pub cache_not_modified: IntCounter,
    cache_revalidations: IntCounterVec,
    pub cache_coalesced_waiters: IntCounter,
    pub cache_fills_abandoned: IntCounter,
    cache_bypasses: IntCounterVec,
    pub cache_entries: IntGauge,
    pub cache_bytes: IntGauge,
    pub cache_max_bytes: IntGauge,
    cache_evictions: IntCounterVec,
    cache_invalidations: IntCounterVec,
    pub cache_credential_caps: IntCounter,
    pub cache_compressions: IntCounter,
    pub credentials_stripped: IntCounter,
    pub credentials_injected: IntCounter,
    pub credentials_refused: IntCounter,
    authz_revalidations: IntCounterVec,
    config_reloads: IntCounterVec,
    cluster_redis_commands: IntCounterVec,
    cluster_redis_errors: IntCounter,
    pub cluster_degraded: IntGauge,
    pub cluster_subscribed: IntGauge,
    pub cluster_lapsed: IntGauge,
    pub cluster_unannounced: IntCounter,
    pub cluster_writes_refused: IntCounter,
    pub cluster_redis_rewound: IntCounter,
    cluster_shared_entries: IntCounterVec,
    pub cluster_published: IntCounter,
    cluster_received_messages: IntCounterVec,
    pub cluster_propagation: Histogram,
    cluster_round_lookups_total: IntCounter,
    pub cluster_lease_waits: IntCounter,
    pub cluster_lease_wait: Histogram,
    pub events: super::event_metrics::EventMetrics,
}

pub(super) fn register<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: T,
) -> T {
    // Names and labels are constants: registration fails only on a programming error, which
    // every test would catch.
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

pub(super) fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    )
}

pub(super) fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> HistogramVec {
    // 100 µs to ~52 s: a local hit and a 250 MB metadata read both land in a bucket.
    let buckets = exponential_buckets(0.0001, 2.0, 20).expect("valid buckets");
    register(
        registry,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
            .expect("a valid metric"),
    )
}

pub(super) fn histogram(registry: &Registry, name: &str, help: &str) -> Histogram {
    let buckets = exponential_buckets(0.0001, 2.0, 20).expect("valid buckets");
    register(
        registry,
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
            .expect("a valid metric"),
    )
}

pub(super) fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    register(registry, IntGauge::new(name, help).expect("a valid metric"))
}

pub(super) fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("a valid metric"),
    )
}

impl Metrics {
    pub fn new() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let r = Registry::new();
        Metrics {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            requests: counter_vec(
                &r,
                "icecache_requests_total",
                "Requests answered, by Iceberg operation, HTTP status and cache phase.",
                &["route", "status", "cache"],
            ),
            request_duration: histogram_vec(
                &r,
                "icecache_request_duration_seconds",
                "Time from request head to response head, by Iceberg operation.",
                &["route"],
            ),
            upstream_duration: histogram_vec(
                &r,
                "icecache_upstream_request_duration_seconds",
                "Time from sending a request upstream to its response head, by operation.",
                &["route"],
            ),
            upstream_responses: counter_vec(
                &r,
                "icecache_upstream_responses_total",
                "Responses received from the upstream catalog, by HTTP status.",
                &["status"],
            ),
            upstream_errors: counter_vec(
                &r,
                "icecache_upstream_errors_total",
                "Upstream requests that got no usable response, by kind (connect, timeout, \
                 protocol).",
                &["kind"],
            ),
            cache_not_modified: counter(
                &r,
                "icecache_cache_not_modified_total",
                "loadTable requests answered 304 Not Modified by icecache itself.",
            ),
            cache_revalidations: counter_vec(
                &r,
                "icecache_cache_revalidations_total",
                "Revalidations of stale entries upstream, by result (not_modified, unchanged, \
                 changed, gone, error).",
                &["result"],
            ),
            cache_coalesced_waiters: counter(
                &r,
                "icecache_cache_coalesced_waiters_total",
                "Requests that waited for another request's upstream fill instead of making one.",
            ),
            cache_fills_abandoned: counter(
                &r,
                "icecache_cache_fills_abandoned_total",
                "Fills that ended without an answer (a panic or a shutdown); their waiters asked \
                 again.",
            ),
            cache_bypasses: counter_vec(
                &r,
                "icecache_cache_bypasses_total",
                "loadTable answers not cached, by reason.",
                &["reason"],
            ),
            cache_entries: gauge(
                &r,
                "icecache_cache_entries",
                "Entries in the loadTable cache.",
            ),
            cache_bytes: gauge(
                &r,
                "icecache_cache_bytes",
                "Bytes held by the loadTable cache (bodies, gzip copies, headers and keys).",
            ),
            cache_max_bytes: gauge(
                &r,
                "icecache_cache_max_bytes",
                "The cache's memory bound (cache.max_bytes).",
            ),
            cache_evictions: counter_vec(
                &r,
                "icecache_cache_evictions_total",
                "Entries removed from the cache, by cause (size, expired, invalidated, replaced).",
                &["cause"],
            ),
            cache_invalidations: counter_vec(
                &r,
                "icecache_cache_invalidations_total",
                "Table invalidations, by reason (the operation that caused them, or purge).",
                &["reason"],
            ),
            cache_credential_caps: counter(
                &r,
                "icecache_cache_credential_caps_total",
                "Entries whose lifetime was shortened because their vended credentials expire.",
            ),
            cache_compressions: counter(
                &r,
                "icecache_cache_compressions_total",
                "gzip copies made of cached bodies (one per fill).",
            ),
            credentials_stripped: counter(
                &r,
                "icecache_credentials_stripped_total",
                "Answers from which credential keys were removed.",
            ),
            credentials_injected: counter(
                &r,
                "icecache_credentials_injected_total",
                "Answers served with injected properties.",
            ),
            credentials_refused: counter(
                &r,
                "icecache_credentials_refused_total",
                "Answers refused (502) under strip or inject because they could not be checked \
                 for credentials.",
            ),
            authz_revalidations: counter_vec(
                &r,
                "icecache_authz_revalidations_total",
                "Callers checked upstream with their own credentials under identity revalidate, \
                 by result (allowed, changed, denied, error).",
                &["result"],
            ),
            config_reloads: counter_vec(
                &r,
                "icecache_config_reloads_total",
                "Configuration reloads on SIGHUP, by result (applied, rejected).",
                &["result"],
            ),
            cluster_redis_commands: counter_vec(
                &r,
                "icecache_cluster_redis_round_trips_total",
                "Round trips to Redis, by what they were for (round, create, announce, \
                 shared_get, shared_put, lease, release, lease_check, beat).",
                &["op"],
            ),
            cluster_redis_errors: counter(
                &r,
                "icecache_cluster_redis_errors_total",
                "Times Redis failed a command and the replica became degraded.",
            ),
            cluster_degraded: gauge(
                &r,
                "icecache_cluster_degraded",
                "1 while this replica cannot trust Redis (loads follow cluster.on_redis_down).",
            ),
            cluster_subscribed: gauge(
                &r,
                "icecache_cluster_subscribed",
                "1 while this replica hears the other replicas' announcements (under bounded, \
                 loads read Redis's tokens while it does not).",
            ),
            cluster_lapsed: gauge(
                &r,
                "icecache_cluster_lapsed_replicas",
                "Other replicas whose heartbeat lapsed (within cluster.member_timeout): while \
                 any has, loads follow cluster.on_redis_down.",
            ),
            cluster_unannounced: counter(
                &r,
                "icecache_cluster_unannounced_writes_total",
                "Writes answered while Redis could not be told (each waited until covered).",
            ),
            cluster_writes_refused: counter(
                &r,
                "icecache_cluster_writes_refused_total",
                "Writes refused (503) by a replica out of touch with Redis for \
                 cluster.member_timeout.",
            ),
            cluster_redis_rewound: counter(
                &r,
                "icecache_cluster_redis_rewinds_total",
                "Heartbeats that found the tier's clock behind what this replica saw (Redis \
                 lost writes) and moved the epoch.",
            ),
            cluster_shared_entries: counter_vec(
                &r,
                "icecache_cluster_shared_total",
                "Entries shared through Redis, by result (hit, miss, stale, rejected, stored, \
                 kept_local).",
                &["result"],
            ),
            cluster_published: counter(
                &r,
                "icecache_cluster_invalidations_published_total",
                "Writes announced to the other replicas.",
            ),
            cluster_received_messages: counter_vec(
                &r,
                "icecache_cluster_invalidations_received_total",
                "Announcements received from other replicas, by result (ok, unreadable).",
                &["result"],
            ),
            cluster_propagation: histogram(
                &r,
                "icecache_cluster_propagation_seconds",
                "Time from a replica announcing a write to this replica receiving it.",
            ),
            cluster_round_lookups_total: counter(
                &r,
                "icecache_cluster_round_lookups_total",
                "Lookups answered by a shared token round (rounds are counted in \
                 icecache_cluster_redis_round_trips_total{op=\"round\"}).",
            ),
            cluster_lease_waits: counter(
                &r,
                "icecache_cluster_lease_waits_total",
                "Fills that waited for another replica holding the lease.",
            ),
            cluster_lease_wait: histogram(
                &r,
                "icecache_cluster_lease_wait_seconds",
                "How long a fill waited for another replica's lease.",
            ),
            events: super::event_metrics::EventMetrics::new(&r),
            registry: r,
        }
        .with_known_series()
    }

    /// Creates the series of every bounded label value at zero, so that rates and alerts see
    /// them before the first event.
    fn with_known_series(self) -> Self {
        let known: [(&IntCounterVec, &[&str]); 5] = [
            (&self.config_reloads, &["applied", "rejected"]),
            (
                &self.cache_evictions,
                &["size", "expired", "invalidated", "replaced"],
            ),
            (&self.upstream_errors, &["connect", "timeout", "protocol"]),
            (
                &self.cache_revalidations,
                &["not_modified", "unchanged", "changed", "gone", "error"],
            ),
            (
                &self.authz_revalidations,
                &["allowed", "changed", "denied", "error"],
            ),
        ];
        for (vec, values) in known {
            for value in values {
                vec.with_label_values(&[value]);
            }
        }
        self
    }

    /// Counts one answered request, in series remembered per worker (see `request_series`).
    pub fn request(
        &self,
        route: &'static str,
        status: http::StatusCode,
        cache: &'static str,
        seconds: f64,
    ) {
        let labels = (route, status, cache);
        request_series::with(
            self.id,
            labels,
            |series| {
                series.requests.inc();
                series.duration.observe(seconds);
            },
            || Series {
                requests: self
                    .requests
                    .with_label_values(&[route, status.as_str(), cache]),
                duration: self.request_duration.with_label_values(&[route]),
            },
        );
    }

    pub fn upstream_duration(&self, route: &str) -> Histogram {
        self.upstream_duration.with_label_values(&[route])
    }

    pub fn upstream_response(&self, status: http::StatusCode) {
        self.upstream_responses
            .with_label_values(&[status.as_str()])
            .inc();
    }

    pub fn upstream_error(&self, kind: &str) {
        self.upstream_errors.with_label_values(&[kind]).inc();
    }

    pub fn revalidation(&self, result: &str) {
        self.cache_revalidations.with_label_values(&[result]).inc();
    }

    pub fn bypass(&self, reason: &str) {
        self.cache_bypasses.with_label_values(&[reason]).inc();
    }

    pub fn eviction(&self, cause: &str) {
        self.cache_evictions.with_label_values(&[cause]).inc();
    }

    pub fn invalidation(&self, reason: &str) {
        self.cache_invalidations.with_label_values(&[reason]).inc();
    }

    pub fn authz(&self, result: &str) {
        self.authz_revalidations.with_label_values(&[result]).inc();
    }

    pub fn reload(&self, result: &str) {
        self.config_reloads.with_label_values(&[result]).inc();
    }

    /// Makes every cluster series exist from the start (at 0), so that rates over them are
    /// defined before the first event.
    pub fn cluster_started(&self) {
        for op in [
            "round",
            "create",
            "announce",
            "shared_get",
            "shared_put",
            "lease",
            "release",
            "lease_check",
            "beat",
        ] {
            self.cluster_redis_commands.with_label_values(&[op]);
        }
        for result in ["hit", "miss", "stale", "rejected", "stored", "kept_local"] {
            self.cluster_shared_entries.with_label_values(&[result]);
        }
        for result in ["ok", "unreadable"] {
            self.cluster_received_messages.with_label_values(&[result]);
        }
    }

    pub fn cluster_redis(&self, op: &str) {
        self.cluster_redis_commands.with_label_values(&[op]).inc();
    }

    pub fn cluster_redis_error(&self) {
        self.cluster_redis_errors.inc();
    }

    pub fn cluster_shared(&self, result: &str) {
        self.cluster_shared_entries
            .with_label_values(&[result])
            .inc();
    }

    pub fn cluster_received(&self, result: &str) {
        self.cluster_received_messages
            .with_label_values(&[result])
            .inc();
    }

    pub fn cluster_round_lookups(&self, lookups: usize) {
        self.cluster_round_lookups_total
            .inc_by(u64::try_from(lookups).unwrap_or(u64::MAX));
    }

    /// Counter values of one vector by one label, summed over the others (for `/cache/stats`).
    pub fn totals(&self, metric: Totals, label: &str) -> std::collections::BTreeMap<String, u64> {
        use prometheus::core::Collector;
        let vec = match metric {
            Totals::Requests => &self.requests,
            Totals::Revalidations => &self.cache_revalidations,
            Totals::Evictions => &self.cache_evictions,
            Totals::Invalidations => &self.cache_invalidations,
            Totals::Bypasses => &self.cache_bypasses,
        };
        let mut totals = std::collections::BTreeMap::new();
        for family in vec.collect() {
            for sample in family.get_metric() {
                let labels = sample.get_label();
                if let Some(route) = metric.route_filter() {
                    if !labels
                        .iter()
                        .any(|l| l.get_name() == "route" && l.get_value() == route)
                    {
                        continue;
                    }
                }
                if let Some(value) = labels.iter().find(|l| l.get_name() == label) {
                    // Integer counters, exposed as f64 by the client library: whole and
                    // non-negative, so the conversion is exact.
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let count = sample.get_counter().get_value().max(0.0) as u64;
                    *totals.entry(value.get_value().to_owned()).or_default() += count;
                }
            }
        }
        totals
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec only fails on a malformed metric family, which `new` rules out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The vectors `/cache/stats` sums.
#[derive(Debug, Clone, Copy)]
pub enum Totals {
    /// loadTable requests only.
    Requests,
    Revalidations,
    Evictions,
    Invalidations,
    Bypasses,
}

impl Totals {
    fn route_filter(self) -> Option<&'static str> {
        matches!(self, Totals::Requests).then_some("load_table")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
