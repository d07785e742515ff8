//! The other replicas as this one last saw them in Redis, and the ones Redis lost track of.
//!
//! A replica's lapse is known only from its heartbeat in Redis. When Redis loses its writes (a
//! flush, a restart without persistence, a failover to a replica that lagged) that record goes
//! too, and a replica cut off from Redis at that moment, perhaps answering writes nobody hears
//! of, would look as if it had never been there. So each replica remembers whom it saw; after
//! Redis lost writes, one it saw that is no longer listed is an orphan: distrusted as if lapsed
//! until it is heard again (its first heartbeat after being cut off moves the epoch), or until
//! it would have been forgotten (its lease plus `member_timeout`), when the epoch moves as for
//! any replica forgotten.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub struct Members {
    inner: Mutex<Inner>,
    /// Whether some replica is an orphan: read on every lookup.
    any_orphan: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// The other replicas the last heartbeat listed, and when their leases end (here).
    seen: HashMap<String, Instant>,
    /// Replicas Redis lost track of, and when they are forgotten.
    orphans: HashMap<String, Instant>,
}

impl Members {
    pub fn new() -> Members {
        Members {
            inner: Mutex::default(),
            any_orphan: AtomicBool::new(false),
        }
    }

    pub fn any_orphan(&self) -> bool {
        self.any_orphan.load(Ordering::Acquire)
    }

    /// Whether a heartbeat sent at `at` must move the epoch: an orphan is due to be forgotten.
    pub fn forget_due(&self, at: Instant) -> bool {
        self.inner.lock().map_or(true, |inner| {
            inner.orphans.values().any(|until| *until <= at)
        })
    }

    /// What a heartbeat sent at `sent` found: the other replicas it listed, with the
    /// milliseconds left of their leases (below zero when lapsed); `lost`, whether Redis had
    /// lost writes; `forgot`, whether it moved the epoch for the orphans due by `sent`. Returns
    /// how many orphans there are now.
    pub fn heard(
        &self,
        sent: Instant,
        others: Vec<(String, i64)>,
        lost: bool,
        forgot: bool,
        member_timeout: Duration,
    ) -> usize {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        let listed: HashMap<String, Instant> = others
            .into_iter()
            .map(|(name, left)| (name, lease_end(sent, left)))
            .collect();
        let Inner { seen, orphans } = &mut *inner;
        if lost {
            for (name, end) in seen.iter() {
                if !listed.contains_key(name) {
                    orphans.entry(name.clone()).or_insert(*end + member_timeout);
                }
            }
        }
        // Heard again, or forgotten by this heartbeat's epoch move.
        orphans.retain(|name, until| !(listed.contains_key(name) || forgot && *until <= sent));
        if lost && !orphans.is_empty() {
            tracing::warn!(
                orphans = orphans.len(),
                "Redis lost the heartbeats of replicas it listed before: they are distrusted \
                 until they are heard again or member_timeout has passed"
            );
        }
        self.any_orphan
            .store(!orphans.is_empty(), Ordering::Release);
        let count = orphans.len();
        *seen = listed;
        count
    }
}

/// When a lease with `left` milliseconds to run (negative: ended) at `sent` ends.
fn lease_end(sent: Instant, left: i64) -> Instant {
    let span = Duration::from_millis(left.unsigned_abs());
    match left >= 0 {
        true => sent + span,
        false => sent.checked_sub(span).unwrap_or(sent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    fn listed(names: &[(&str, i64)]) -> Vec<(String, i64)> {
        names.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect()
    }

    #[test]
    fn a_replica_gone_from_the_list_without_a_loss_is_no_orphan() {
        let members = Members::new();
        let now = Instant::now();
        members.heard(now, listed(&[("a", 1000)]), false, false, TIMEOUT);
        members.heard(now, listed(&[]), false, false, TIMEOUT);
        assert!(!members.any_orphan());
    }

    #[test]
    fn a_replica_redis_lost_is_an_orphan_until_it_is_heard_again() {
        let members = Members::new();
        let now = Instant::now();
        members.heard(now, listed(&[("a", -500)]), false, false, TIMEOUT);
        members.heard(now, listed(&[]), true, false, TIMEOUT);
        assert!(members.any_orphan());
        assert!(!members.forget_due(now));
        members.heard(now, listed(&[]), false, false, TIMEOUT);
        assert!(members.any_orphan(), "still missing");
        members.heard(now, listed(&[("a", 1000)]), false, false, TIMEOUT);
        assert!(!members.any_orphan());
    }

    #[test]
    fn an_orphan_is_forgotten_only_by_a_heartbeat_that_moved_the_epoch() {
        let members = Members::new();
        let start = Instant::now();
        members.heard(start, listed(&[("a", 0)]), false, false, TIMEOUT);
        members.heard(start, listed(&[]), true, false, TIMEOUT);
        let later = start + TIMEOUT + Duration::from_secs(1);
        assert!(members.forget_due(later));
        members.heard(later, listed(&[]), false, false, TIMEOUT);
        assert!(members.any_orphan(), "forgotten without the epoch moving");
        members.heard(later, listed(&[]), false, true, TIMEOUT);
        assert!(!members.any_orphan());
    }
}
