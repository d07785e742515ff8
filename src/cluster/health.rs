//! Whether this replica may trust Redis, as the lease heartbeat (`lease`) finds it.
//!
//! The lease heartbeat is the tier's only one: it is a write, so a Redis that refuses writes
//! (out of memory, an ACL change) makes the replica degraded, not only one command that failed.
//! Degraded, a replica's loads follow `cluster.on_redis_down`, and it refuses writes (it could
//! not tell the others of them), until a heartbeat is answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::telemetry::ClusterMetrics;

/// How often a replica that keeps failing says so in its log.
const WARN_EVERY: Duration = Duration::from_secs(30);

pub struct Health {
    degraded: AtomicBool,
    /// When the last heartbeat Redis answered was sent; None until the first.
    last_beat: Mutex<Option<Instant>>,
    /// The number of the last heartbeat echoed on this replica's channel, and when its answer
    /// came: the subscription must have heard it a round trip later (`subscription`).
    last_landed: Mutex<Option<(u64, Instant)>>,
    last_warned: Mutex<Option<Instant>>,
}

impl Health {
    /// Starts degraded: nothing is trusted until Redis has answered once.
    pub fn new() -> Health {
        Health {
            degraded: AtomicBool::new(true),
            last_beat: Mutex::new(None),
            last_landed: Mutex::new(None),
            last_warned: Mutex::new(None),
        }
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    /// The last echoed heartbeat Redis took: its number (what it published) and when it
    /// answered.
    pub fn last_landed(&self) -> Option<(u64, Instant)> {
        self.last_landed.lock().map_or(None, |at| *at)
    }

    pub fn has_joined(&self) -> bool {
        self.last_beat().is_some()
    }

    fn last_beat(&self) -> Option<Instant> {
        self.last_beat.lock().map_or(None, |at| *at)
    }

    /// Redis answered the heartbeat sent at `sent`, whose echo (if it carried one) was
    /// numbered `echoed`.
    pub fn renewed(&self, sent: Instant, echoed: Option<u64>, metrics: &ClusterMetrics) {
        if let Ok(mut last) = self.last_beat.lock() {
            *last = Some(sent);
        }
        if let (Some(number), Ok(mut landed)) = (echoed, self.last_landed.lock()) {
            *landed = Some((number, Instant::now()));
        }
        if self.degraded.swap(false, Ordering::AcqRel) {
            tracing::info!("Redis answers: this replica is live");
        }
        metrics.recovered();
    }

    /// Redis failed a command: degraded until a heartbeat succeeds.
    pub fn down(&self, metrics: &ClusterMetrics, why: &str) {
        let transition = !self.degraded.swap(true, Ordering::AcqRel);
        if transition {
            metrics.redis_failed();
        }
        self.warn(why, transition);
    }

    /// Logs a failure: always on the way down, then at most every `WARN_EVERY` (a replica
    /// that never reaches Redis says so, and why).
    fn warn(&self, why: &str, transition: bool) {
        let Ok(mut last) = self.last_warned.lock() else {
            return;
        };
        if transition || last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(reason = why, "Redis unusable: this replica is degraded");
        }
    }
}
