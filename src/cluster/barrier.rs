//! The shared round trip a read-your-writes lookup waits for. Every lookup asks for the tokens
//! of its table; lookups that arrive while a round is being gathered share it: one `MGET` per
//! round, at most one round per `barrier_interval`, so Redis work follows the interval, not the
//! request rate. A round is sent only after every lookup in it arrived, so the tokens it reads
//! include every write answered before any of those lookups.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::health::Health;
use super::names::Names;
use crate::ops::metrics::Metrics;

/// A table's tokens: the dataset's instance, the epoch, its namespaces' and its own versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens(pub Vec<u64>);

/// One lookup waiting for a round.
pub struct Pending {
    pub keys: Vec<String>,
    pub answer: oneshot::Sender<Option<Tokens>>,
}

pub struct Rounds {
    pub connection: ConnectionManager,
    pub names: Arc<Names>,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub interval: Duration,
    pub timeout: Duration,
}

impl Rounds {
    /// Gathers and runs rounds until every sender is gone.
    pub async fn run(self, mut pending: mpsc::UnboundedReceiver<Pending>) {
        let mut last_round: Option<Instant> = None;
        while let Some(first) = pending.recv().await {
            if let Some(last) = last_round {
                tokio::time::sleep_until(last + self.interval).await;
            }
            last_round = Some(Instant::now());
            let mut batch = vec![first];
            while let Ok(more) = pending.try_recv() {
                batch.push(more);
            }
            self.round(batch).await;
        }
    }

    async fn round(&self, batch: Vec<Pending>) {
        if self.health.is_degraded() {
            for lookup in batch {
                let _ = lookup.answer.send(None);
            }
            return;
        }
        let mut keys: Vec<String> = batch.iter().flat_map(|p| p.keys.iter().cloned()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut command = redis::cmd("MGET");
        for key in &keys {
            command.arg(key);
        }
        let mut connection = self.connection.clone();
        self.metrics.cluster_redis("round");
        let answer = tokio::time::timeout(
            self.timeout,
            command.query_async::<Vec<Option<String>>>(&mut connection),
        )
        .await;
        let values = match answer {
            Ok(Ok(values)) if values.len() == keys.len() => values,
            _ => {
                self.health.down(&self.metrics, "a token round failed");
                for lookup in batch {
                    let _ = lookup.answer.send(None);
                }
                return;
            }
        };
        let instance_key = self.names.instance();
        let mut read: HashMap<&str, u64> = HashMap::with_capacity(keys.len());
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut instance_missing = false;
        for (key, value) in keys.iter().zip(&values) {
            let number = match value {
                None => {
                    instance_missing |= *key == instance_key;
                    0
                }
                // The instance is a random word; a version is a number.
                Some(text) => text.parse().unwrap_or_else(|_| hash_word(text)),
            };
            read.insert(key, number);
        }
        if instance_missing {
            // A new, empty dataset (flushed, or failed over): name it, so every token read
            // from the old one stops matching.
            self.health
                .rename_dataset(&self.connection, &self.names, &self.metrics, self.timeout)
                .await;
        }
        self.metrics.cluster_round_lookups(batch.len());
        for lookup in batch {
            let tokens = lookup
                .keys
                .iter()
                .map(|k| read.get(k.as_str()).copied().unwrap_or(0));
            let _ = lookup.answer.send(Some(Tokens(tokens.collect())));
        }
    }
}

fn hash_word(text: &str) -> u64 {
    let hash = blake3::hash(text.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    u64::from_le_bytes(bytes)
}
