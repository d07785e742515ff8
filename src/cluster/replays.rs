//! Kept answers to requests with an `Idempotency-Key`, in Redis, as bytes the caller encodes:
//! a request holds its key with a value of its own for a while (`claim`), then either replaces
//! that hold with its final answer (`finish`) or gives it back (`abandon`). Each step acts only
//! while the hold is still the one it placed, so a hold that expired and was taken again is
//! left to its new holder.

use std::time::Duration;

use super::Cluster;
use crate::telemetry::cluster::RoundTrip;

/// Answers what the key holds, or places the hold and answers nothing.
pub(super) const CLAIM: &str = "local held = redis.call('get', KEYS[1]) \
                                if held then return held end \
                                redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
                                return false";

/// Replaces the hold with the final answer, only while the hold is this request's.
pub(super) const FINISH: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                                 redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
                                 return 1 end return 0";

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Cluster {
    /// The name a record with these identifying bytes lives under.
    pub fn replay_name(&self, id: &[u8]) -> String {
        self.names.replay(id)
    }

    /// Places `hold` under `name` for `ttl` unless something is there: `Some(None)` when
    /// placed, `Some(Some(value))` with what was there, None when Redis cannot be reached.
    pub async fn replay_claim(
        &self,
        name: &str,
        hold: Vec<u8>,
        ttl: Duration,
    ) -> Option<Option<Vec<u8>>> {
        if self.health.is_degraded() {
            return None;
        }
        let mut invocation = self.replay_claim.key(name);
        invocation.arg(hold).arg(millis(ttl));
        self.round_trip(
            RoundTrip::Replay,
            "holding an idempotency key failed",
            |mut c| async move { invocation.invoke_async::<Option<Vec<u8>>>(&mut c).await },
        )
        .await
    }

    /// Replaces `hold` under `name` with `value` for `ttl`, if `hold` is still there.
    pub async fn replay_finish(&self, name: &str, hold: Vec<u8>, value: Vec<u8>, ttl: Duration) {
        if self.health.is_degraded() {
            return;
        }
        let mut invocation = self.replay_finish.key(name);
        invocation.arg(hold).arg(value).arg(millis(ttl));
        self.round_trip(
            RoundTrip::Replay,
            "keeping an idempotent answer failed",
            |mut c| async move { invocation.invoke_async::<i64>(&mut c).await },
        )
        .await;
    }

    /// Deletes `hold` under `name`, if it is still there.
    pub async fn replay_abandon(&self, name: &str, hold: Vec<u8>) {
        if self.health.is_degraded() {
            return;
        }
        let mut invocation = self.release.key(name);
        invocation.arg(hold);
        self.round_trip(
            RoundTrip::Replay,
            "giving an idempotency key back failed",
            |mut c| async move { invocation.invoke_async::<i64>(&mut c).await },
        )
        .await;
    }
}
