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
use crate::coordination::Tokens;
use crate::telemetry::cluster::RoundTrip;
use crate::telemetry::ClusterMetrics;

/// One lookup waiting for a round.
pub struct Pending {
    pub keys: Vec<String>,
    pub answer: oneshot::Sender<Option<Tokens>>,
}

pub struct Rounds {
    pub connection: ConnectionManager,
    pub health: Arc<Health>,
    pub metrics: Arc<ClusterMetrics>,
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
        self.metrics.round_trip(RoundTrip::Round);
        let answer = tokio::time::timeout(
            self.timeout,
            command.query_async::<Vec<Option<Vec<u8>>>>(&mut connection),
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
        // A token that is missing (never written, evicted, flushed, a failover to an empty
        // node) gets a fresh random value, so no entry made under an earlier value can match
        // again: a token never goes back to a value it had.
        let missing: Vec<&str> = keys
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.as_str())
            .collect();
        let created = if missing.is_empty() {
            Vec::new()
        } else {
            match self.create(&missing).await {
                Some(created) => created,
                None => {
                    self.health.down(&self.metrics, "creating tokens failed");
                    for lookup in batch {
                        let _ = lookup.answer.send(None);
                    }
                    return;
                }
            }
        };
        let mut created = created.into_iter();
        let mut read: HashMap<&str, u64> = HashMap::with_capacity(keys.len());
        for (key, value) in keys.iter().zip(&values) {
            let token = match value {
                Some(bytes) => token_of(bytes),
                None => token_of(&created.next().unwrap_or_default()),
            };
            read.insert(key, token);
        }
        self.metrics.round_answered(batch.len());
        for lookup in batch {
            let tokens = lookup
                .keys
                .iter()
                .map(|k| read.get(k.as_str()).copied().unwrap_or(0));
            let _ = lookup.answer.send(Some(Tokens(tokens.collect())));
        }
    }
}

impl Rounds {
    /// Sets each missing token to a fresh random value unless another replica just did;
    /// returns the values now held, in order.
    async fn create(&self, missing: &[&str]) -> Option<Vec<Vec<u8>>> {
        let mut pipe = redis::pipe();
        let mut fresh = Vec::with_capacity(missing.len());
        for key in missing {
            let value = super::redis_parts::random_token().to_string().into_bytes();
            pipe.cmd("SET").arg(*key).arg(&value).arg("NX").arg("GET");
            fresh.push(value);
        }
        let mut connection = self.connection.clone();
        self.metrics.round_trip(RoundTrip::Create);
        let answer = tokio::time::timeout(
            self.timeout,
            pipe.query_async::<Vec<Option<Vec<u8>>>>(&mut connection),
        )
        .await;
        match answer {
            // SET … NX GET answers the value it found (and did not replace), or nil when it
            // set ours.
            Ok(Ok(found)) if found.len() == fresh.len() => Some(
                found
                    .into_iter()
                    .zip(fresh)
                    .map(|(found, ours)| found.unwrap_or(ours))
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// A token icecache wrote is a number; anything else written there (garbage, bytes that are
/// not text) is read as what it hashes to: a value no entry was made under.
fn token_of(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| hash_word(bytes))
}

fn hash_word(bytes: &[u8]) -> u64 {
    let hash = blake3::hash(bytes);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    u64::from_le_bytes(bytes)
}
