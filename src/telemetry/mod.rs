//! Prometheus metrics, by subsystem: each struct here is counted only by the subsystem that
//! holds it (the cache holds `CacheMetrics`, the origin `UpstreamMetrics`, …), and every label
//! is an enum with `as_str` (`Label`), never text made up at a call site, so that series stay
//! bounded: operations, statuses, phases, reasons and causes, never a table name or a token.
//! Also the process's log setup (`logging`).

pub mod cache;
pub mod cluster;
pub mod credentials;
pub mod events;
pub mod logging;
mod registry;
pub mod replays;
pub mod requests;
pub mod upstream;

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::core::Collector;
use prometheus::{Encoder, IntCounterVec, Registry, TextEncoder};

pub use cache::CacheMetrics;
pub use cluster::ClusterMetrics;
pub use credentials::CredentialMetrics;
pub use events::EventMetrics;
pub use registry::Label;
pub use replays::ReplayMetrics;
pub use requests::RequestMetrics;
pub use upstream::UpstreamMetrics;

/// Every subsystem's metrics, registered in one registry.
pub struct Metrics {
    registry: Registry,
    pub requests: Arc<RequestMetrics>,
    pub upstream: Arc<UpstreamMetrics>,
    pub cache: Arc<CacheMetrics>,
    pub credentials: Arc<CredentialMetrics>,
    pub cluster: Arc<ClusterMetrics>,
    pub events: Arc<EventMetrics>,
    pub replays: Arc<ReplayMetrics>,
    reloads: IntCounterVec,
}

/// How a configuration reload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    Applied,
    Rejected,
}

impl Label for Reloaded {
    fn as_str(self) -> &'static str {
        match self {
            Reloaded::Applied => "applied",
            Reloaded::Rejected => "rejected",
        }
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

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let reloads = registry::counter_vec(
            &r,
            "icecache_config_reloads_total",
            "Configuration reloads on SIGHUP, by result (applied, rejected).",
            &["result"],
        );
        registry::known(&reloads, &[Reloaded::Applied, Reloaded::Rejected]);
        Metrics {
            requests: Arc::new(RequestMetrics::new(&r)),
            upstream: Arc::new(UpstreamMetrics::new(&r)),
            cache: Arc::new(CacheMetrics::new(&r)),
            credentials: Arc::new(CredentialMetrics::new(&r)),
            cluster: Arc::new(ClusterMetrics::new(&r)),
            events: Arc::new(EventMetrics::new(&r)),
            replays: Arc::new(ReplayMetrics::new(&r)),
            reloads,
            registry: r,
        }
    }

    /// Counts one configuration reload.
    pub fn reload(&self, result: Reloaded) {
        self.reloads.with_label_values(&[result.as_str()]).inc();
    }

    /// Counter values of one vector by one label, summed over the others (for `/cache/stats`).
    pub fn totals(&self, metric: Totals, label: &str) -> BTreeMap<String, u64> {
        let (vec, route) = match metric {
            Totals::Requests => (self.requests.counts(), Some("load_table")),
            Totals::Revalidations => (self.cache.revalidations(), None),
            Totals::Evictions => (self.cache.evictions(), None),
            Totals::Invalidations => (self.cache.invalidations(), None),
            Totals::Bypasses => (self.cache.bypasses(), None),
        };
        let mut totals = BTreeMap::new();
        for family in vec.collect() {
            for sample in family.get_metric() {
                let labels = sample.get_label();
                if let Some(route) = route {
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
