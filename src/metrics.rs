//! Prometheus metrics. Labels are bounded: operations, status codes, outcomes and causes,
//! never a table name or a token.

use prometheus::{
    exponential_buckets, Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub upstream_duration: HistogramVec,
    pub upstream_responses: IntCounterVec,
    pub upstream_errors: IntCounterVec,
    pub cache_not_modified: IntCounter,
    pub cache_revalidations: IntCounterVec,
    pub cache_coalesced_waiters: IntCounter,
    pub cache_entries: IntGauge,
    pub cache_bytes: IntGauge,
    pub cache_max_bytes: IntGauge,
    pub cache_evictions: IntCounterVec,
    pub cache_invalidations: IntCounterVec,
    pub cache_credential_caps: IntCounter,
    pub cache_compressions: IntCounter,
    pub credentials_stripped: IntCounter,
    pub credentials_injected: IntCounter,
    pub authz_revalidations: IntCounterVec,
    pub config_reloads: IntCounterVec,
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

fn histogram_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    // 100 µs to ~52 s: a local hit and a 250 MB metadata read both land in a bucket.
    let buckets = exponential_buckets(0.0001, 2.0, 20).expect("valid buckets");
    let metric = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let metric = IntGauge::new(name, help).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let metric = IntCounter::new(name, help).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

impl Metrics {
    /// Builds the metric set. The names and labels are constants, so registration cannot fail
    /// at run time; a failure here is a programming error caught by every test.
    pub fn new() -> Self {
        let r = Registry::new();
        Metrics {
            requests: counter_vec(
                &r,
                "icecache_requests_total",
                "Requests answered, by Iceberg operation, HTTP status and cache outcome.",
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
                "Upstream requests that got no response, by kind (connect, timeout, protocol).",
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
                "Revalidations of stale entries upstream, by result (not_modified, changed, \
                 unchanged, error).",
                &["result"],
            ),
            cache_coalesced_waiters: counter(
                &r,
                "icecache_cache_coalesced_waiters_total",
                "Requests that waited for another request's upstream fill instead of making one.",
            ),
            cache_entries: gauge(
                &r,
                "icecache_cache_entries",
                "Entries in the loadTable cache.",
            ),
            cache_bytes: gauge(
                &r,
                "icecache_cache_bytes",
                "Bytes held by the loadTable cache (bodies and headers).",
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
                "loadTable bodies from which credential keys were removed.",
            ),
            credentials_injected: counter(
                &r,
                "icecache_credentials_injected_total",
                "loadTable answers served with injected properties.",
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

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec only fails on a malformed metric family, which `new` rules out.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
