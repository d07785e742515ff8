//! Whether the change events can be trusted to arrive. Each source is Live or Degraded; every
//! change of either, and every message a source knows it lost (a gap), moves one epoch. A fill
//! notes the epoch as it starts if every source is live then; its entry may be served for
//! `events.fresh_for` only while the epoch has not moved. So a disconnect, a hung server, a
//! slow consumer or a sequence hole turns every older entry back to `cache.fresh_for` at once,
//! with nothing removed (no refill storm), and entries filled from then on earn the long
//! window again once the source is live.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::change::Gap;
use crate::telemetry::{EventMetrics, Label};

/// One configured source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceId {
    SeaweedFs,
    Nats,
    Kafka,
}

impl Label for SourceId {
    fn as_str(self) -> &'static str {
        SourceId::as_str(self)
    }
}

impl SourceId {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceId::SeaweedFs => "seaweedfs",
            SourceId::Nats => "nats",
            SourceId::Kafka => "kafka",
        }
    }
}

pub struct Liveness {
    epoch: AtomicU64,
    sources: Vec<(SourceId, AtomicBool)>,
    metrics: Arc<EventMetrics>,
}

impl Liveness {
    /// The configured sources, each Degraded until it says it is live.
    pub fn new(sources: &[SourceId], metrics: Arc<EventMetrics>) -> Liveness {
        for source in sources {
            metrics.source_up(*source, false);
        }
        Liveness {
            epoch: AtomicU64::new(1),
            sources: sources
                .iter()
                .map(|s| (*s, AtomicBool::new(false)))
                .collect(),
            metrics,
        }
    }

    /// The epoch a fill starting now is in, if every source is live (none configured: no
    /// events, no long window).
    pub fn stamp(&self) -> Option<u64> {
        if self.sources.is_empty() {
            return None;
        }
        let before = self.epoch.load(Ordering::Acquire);
        let live = self.sources.iter().all(|(_, l)| l.load(Ordering::Acquire));
        // A change between the two reads moved the epoch: the stamp would already be old.
        (live && self.epoch.load(Ordering::Acquire) == before).then_some(before)
    }

    /// Whether an entry stamped `stamp` may still be served for `events.fresh_for`.
    pub fn is_current(&self, stamp: u64) -> bool {
        self.epoch.load(Ordering::Acquire) == stamp
    }

    pub fn is_live(&self, source: SourceId) -> bool {
        self.flag(source).is_some_and(|l| l.load(Ordering::Acquire))
    }

    /// The source subscribed (and caught up): entries filled from now on may earn the window.
    pub fn up(&self, source: SourceId) {
        if let Some(flag) = self.flag(source) {
            // Live already: the stamps taken since are as good as ever.
            if flag.swap(true, Ordering::AcqRel) {
                return;
            }
            // The flag before the epoch: a stamp read between them is already old.
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.metrics.source_up(source, true);
            tracing::info!(source = source.as_str(), "event source live");
        }
    }

    /// The source may be missing events (disconnected, hung): every entry back to
    /// `cache.fresh_for` until it is live again.
    pub fn down(&self, source: SourceId, why: Gap) {
        if let Some(flag) = self.flag(source) {
            let was_live = flag.swap(false, Ordering::AcqRel);
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.metrics.source_up(source, false);
            if was_live {
                self.metrics.gap(source, why);
                tracing::warn!(
                    source = source.as_str(),
                    why = why.as_str(),
                    "event source degraded"
                );
            }
        }
    }

    /// The source lost some events but is still delivering: entries filled before now go back
    /// to `cache.fresh_for`; later ones keep the window.
    pub fn gap(&self, source: SourceId, why: Gap) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.metrics.gap(source, why);
        tracing::warn!(source = source.as_str(), why = why.as_str(), "events lost");
    }

    /// Each configured source and whether it is live, for `/cache/stats`.
    pub fn describe(&self) -> serde_json::Value {
        self.sources
            .iter()
            .map(|(source, live)| {
                let state = if live.load(Ordering::Acquire) {
                    "live"
                } else {
                    "degraded"
                };
                (source.as_str().to_owned(), serde_json::Value::from(state))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    fn flag(&self, source: SourceId) -> Option<&AtomicBool> {
        self.sources
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, flag)| flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both() -> Liveness {
        Liveness::new(
            &[SourceId::SeaweedFs, SourceId::Nats],
            Arc::new(crate::telemetry::Metrics::new()).events.clone(),
        )
    }

    #[test]
    fn no_source_gives_no_stamp() {
        assert_eq!(
            Liveness::new(
                &[],
                Arc::new(crate::telemetry::Metrics::new()).events.clone()
            )
            .stamp(),
            None
        );
    }

    #[test]
    fn a_stamp_needs_every_source_live() {
        let l = both();
        assert_eq!(l.stamp(), None);
        l.up(SourceId::SeaweedFs);
        assert_eq!(l.stamp(), None);
        l.up(SourceId::Nats);
        let stamp = l.stamp().expect("both live");
        assert!(l.is_current(stamp));
    }

    #[test]
    fn a_disconnect_or_a_gap_ends_every_older_stamp() {
        let l = both();
        l.up(SourceId::SeaweedFs);
        l.up(SourceId::Nats);
        let old = l.stamp().unwrap();
        l.gap(SourceId::Nats, Gap::SequenceHole);
        assert!(!l.is_current(old));
        let after_gap = l.stamp().expect("still live after a gap");
        l.down(SourceId::Nats, Gap::Disconnected);
        assert!(!l.is_current(after_gap));
        assert_eq!(l.stamp(), None);
        l.up(SourceId::Nats);
        assert!(
            !l.is_current(after_gap),
            "a reconnect does not revive old stamps"
        );
    }
}
