//! Catalog change events: what each source delivered, what was refused and why, what was lost,
//! whether the source is live, and how long events took to arrive. The series of every source
//! and reason are made at start, so that rates and alerts see them at once.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::registry::{counter_vec, register, Label};

pub struct EventMetrics {
    received: IntCounterVec,
    rejected: IntCounterVec,
    unrelated: IntCounterVec,
    duplicates: IntCounterVec,
    gaps: IntCounterVec,
    invalidated: IntCounterVec,
    up: IntGaugeVec,
    lag: HistogramVec,
}

/// Every source and reason, created at zero so that rates and alerts see them at once (and
/// each source's commit type, the one that matters most).
const SOURCES: [&str; 2] = ["seaweedfs", "nats"];
const COMMITS: [(&str, &str); 2] = [("seaweedfs", "update"), ("nats", "updateTable")];
const REJECTIONS: [&str; 4] = ["unauthorized", "oversized", "malformed", "unknown_type"];
const GAPS: [&str; 6] = [
    "disconnected",
    "slow_consumer",
    "sequence_hole",
    "oversized",
    "malformed",
    "unknown_type",
];

impl EventMetrics {
    pub fn new(r: &Registry) -> EventMetrics {
        let lag_buckets = vec![
            0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
        ];
        let metrics = EventMetrics {
            received: counter_vec(
                r,
                "icecache_events_received_total",
                "Catalog change events read, by source and event type.",
                &["source", "type"],
            ),
            rejected: counter_vec(
                r,
                "icecache_events_rejected_total",
                "Event messages refused, by source and reason (unauthorized, oversized, \
                 malformed, unknown_type); all but unauthorized also count as a gap.",
                &["source", "reason"],
            ),
            unrelated: counter_vec(
                r,
                "icecache_events_unrelated_total",
                "Events about something no load answers from (a data file, an upload).",
                &["source"],
            ),
            duplicates: counter_vec(
                r,
                "icecache_events_duplicates_total",
                "JetStream events delivered again after they were applied (skipped).",
                &["source"],
            ),
            gaps: counter_vec(
                r,
                "icecache_events_gaps_total",
                "Times a source may have lost events (disconnected, slow_consumer, \
                 sequence_hole, an unreadable message): older entries went back to \
                 cache.fresh_for.",
                &["source", "reason"],
            ),
            invalidated: counter_vec(
                r,
                "icecache_events_invalidated_entries_total",
                "Cache entries removed in this replica because of an event.",
                &["source"],
            ),
            up: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "icecache_events_source_up",
                        "1 while the event source is live (subscribed, caught up), 0 while \
                         degraded.",
                    ),
                    &["source"],
                )
                .expect("a valid metric"),
            ),
            lag: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "icecache_events_lag_seconds",
                        "From an event's making (its UUIDv7 id, or JetStream's publish time) \
                         to icecache reading it.",
                    )
                    .buckets(lag_buckets),
                    &["source"],
                )
                .expect("a valid metric"),
            ),
        };
        for source in SOURCES {
            metrics.invalidated.with_label_values(&[source]);
            metrics.unrelated.with_label_values(&[source]);
            metrics.duplicates.with_label_values(&[source]);
            metrics.lag.with_label_values(&[source]);
            for reason in REJECTIONS {
                metrics.rejected.with_label_values(&[source, reason]);
            }
            for reason in GAPS {
                metrics.gaps.with_label_values(&[source, reason]);
            }
        }
        for (source, kind) in COMMITS {
            metrics.received.with_label_values(&[source, kind]);
        }
        metrics
    }

    pub fn received(&self, source: impl Label, kind: impl Label) {
        self.received
            .with_label_values(&[source.as_str(), kind.as_str()])
            .inc();
    }

    pub fn rejected(&self, source: impl Label, reason: impl Label) {
        self.rejected
            .with_label_values(&[source.as_str(), reason.as_str()])
            .inc();
    }

    pub fn unrelated(&self, source: impl Label) {
        self.unrelated.with_label_values(&[source.as_str()]).inc();
    }

    pub fn duplicate(&self, source: impl Label) {
        self.duplicates.with_label_values(&[source.as_str()]).inc();
    }

    pub fn gap(&self, source: impl Label, reason: impl Label) {
        self.gaps
            .with_label_values(&[source.as_str(), reason.as_str()])
            .inc();
    }

    pub fn invalidated(&self, source: impl Label, entries: usize) {
        self.invalidated
            .with_label_values(&[source.as_str()])
            .inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
    }

    pub fn source_up(&self, source: impl Label, up: bool) {
        self.up
            .with_label_values(&[source.as_str()])
            .set(i64::from(up));
    }

    pub fn lag(&self, source: impl Label, seconds: f64) {
        self.lag
            .with_label_values(&[source.as_str()])
            .observe(seconds);
    }
}
