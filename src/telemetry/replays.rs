//! `idempotency = "provide"`: what became of each request that carried an `Idempotency-Key`.

use prometheus::{IntCounterVec, Registry};

use super::registry::{counter_vec, known, Label};

pub struct ReplayMetrics {
    outcomes: IntCounterVec,
}

/// What became of a request with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Its final answer was kept for retries.
    Kept,
    /// It reached the catalog, and nothing was kept (no answer, a 5xx, a transient 4xx, too
    /// large, or not safe to share).
    Unkept,
    /// Answered from a kept answer, without reaching the catalog.
    Replayed,
    /// Refused: the same key was at the catalog (409).
    InFlight,
    /// Refused: the key was used for another request (422).
    Reused,
    /// Refused: the key was malformed or repeated (400).
    BadKey,
    /// Refused: the store (the tier's Redis) could not be reached or read (503).
    Unavailable,
}

const OUTCOMES: [ReplayOutcome; 7] = [
    ReplayOutcome::Kept,
    ReplayOutcome::Unkept,
    ReplayOutcome::Replayed,
    ReplayOutcome::InFlight,
    ReplayOutcome::Reused,
    ReplayOutcome::BadKey,
    ReplayOutcome::Unavailable,
];

impl Label for ReplayOutcome {
    fn as_str(self) -> &'static str {
        match self {
            ReplayOutcome::Kept => "kept",
            ReplayOutcome::Unkept => "unkept",
            ReplayOutcome::Replayed => "replayed",
            ReplayOutcome::InFlight => "in_flight",
            ReplayOutcome::Reused => "reused",
            ReplayOutcome::BadKey => "bad_key",
            ReplayOutcome::Unavailable => "unavailable",
        }
    }
}

impl ReplayMetrics {
    pub fn new(r: &Registry) -> ReplayMetrics {
        let outcomes = counter_vec(
            r,
            "icecache_idempotency_total",
            "Requests with an Idempotency-Key under idempotency = provide, by outcome (kept, \
             unkept, replayed, in_flight, reused, bad_key, unavailable).",
            &["outcome"],
        );
        known(&outcomes, &OUTCOMES);
        ReplayMetrics { outcomes }
    }

    pub fn count(&self, outcome: ReplayOutcome) {
        self.outcomes.with_label_values(&[outcome.as_str()]).inc();
    }
}
