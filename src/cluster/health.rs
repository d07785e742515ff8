//! Whether Redis can be reached, and what it takes to trust it again. Any failed command makes
//! the replica degraded and dirty; a background check pings Redis until it answers, then (when
//! dirty) moves the epoch before the replica is live again: writes answered while the replica
//! could not announce them, or tokens a restarted Redis lost, can then never make an older
//! entry look current, anywhere in the tier.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::Notify;

use super::names::Names;
use crate::ops::metrics::Metrics;

/// How often a degraded replica asks Redis whether it is back.
const RECHECK: Duration = Duration::from_millis(250);

#[derive(Default)]
pub struct Health {
    degraded: AtomicBool,
    /// Something may have happened that Redis does not know of.
    dirty: AtomicBool,
    wake: Notify,
}

impl Health {
    /// Starts degraded: nothing is trusted until Redis has answered once.
    pub fn new() -> Health {
        Health {
            degraded: AtomicBool::new(true),
            dirty: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    /// Redis failed a command: degraded until the check brings it back.
    pub fn down(&self, metrics: &Metrics, why: &str) {
        self.dirty.store(true, Ordering::Release);
        if !self.degraded.swap(true, Ordering::AcqRel) {
            tracing::warn!(reason = why, "Redis unreachable: this replica is degraded");
            metrics.cluster_degraded.set(1);
            metrics.cluster_redis_error();
        }
        self.wake.notify_one();
    }

    /// A write was answered that Redis could not be told of.
    pub fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Names a new dataset after a flush or a failover to an empty node.
    pub async fn rename_dataset(
        &self,
        connection: &ConnectionManager,
        names: &Names,
        metrics: &Metrics,
        timeout: Duration,
    ) {
        let mut connection = connection.clone();
        let mut word = [0u8; 16];
        let _ = getrandom::getrandom(&mut word);
        let word: String = word.iter().map(|b| format!("{b:02x}")).collect();
        metrics.cluster_redis("instance");
        let mut set = redis::cmd("SET");
        set.arg(names.instance()).arg(word).arg("NX");
        let named = set.query_async::<Option<String>>(&mut connection);
        if !matches!(tokio::time::timeout(timeout, named).await, Ok(Ok(_))) {
            self.down(metrics, "naming the dataset failed");
        }
    }

    /// Keeps checking Redis while degraded; runs until the process ends.
    pub async fn watch(
        self: Arc<Self>,
        connection: ConnectionManager,
        names: Arc<Names>,
        metrics: Arc<Metrics>,
        timeout: Duration,
    ) {
        loop {
            if !self.is_degraded() && !self.dirty.load(Ordering::Acquire) {
                self.wake.notified().await;
                continue;
            }
            if self.recover(&connection, &names, &metrics, timeout).await {
                continue;
            }
            tokio::time::sleep(RECHECK).await;
        }
    }

    /// One attempt to make the replica live: the dataset named, the epoch moved when dirty.
    async fn recover(
        &self,
        connection: &ConnectionManager,
        names: &Names,
        metrics: &Metrics,
        timeout: Duration,
    ) -> bool {
        let mut connection = connection.clone();
        let dirty = self.dirty.swap(false, Ordering::AcqRel);
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(names.instance())
            .arg(format!("{:016x}", rand_u64()))
            .arg("NX")
            .ignore();
        if dirty {
            pipe.cmd("INCR").arg(names.epoch()).ignore();
        }
        metrics.cluster_redis("recover");
        let result = tokio::time::timeout(timeout, pipe.query_async::<()>(&mut connection)).await;
        if matches!(result, Ok(Ok(()))) {
            if self.degraded.swap(false, Ordering::AcqRel) {
                tracing::info!(
                    epoch_moved = dirty,
                    "Redis answers again: this replica is live"
                );
            }
            metrics.cluster_degraded.set(0);
            true
        } else {
            if dirty {
                self.dirty.store(true, Ordering::Release);
            }
            if !self.degraded.swap(true, Ordering::AcqRel) {
                metrics.cluster_degraded.set(1);
            }
            false
        }
    }
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes)
}
