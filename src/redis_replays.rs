//! The replays of a tier, in its Redis (where `replays` meets `cluster`): a retry that reaches
//! another replica finds the hold or the final answer the first replica left. Every value
//! carries a MAC under the cluster key over its name and its bytes; one that fails it was not
//! written by a replica of this tier and is never replayed. What is stored never holds a
//! member named like a secret (the caller strips it first: `ReplayStore::shared`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::cluster::Cluster;
use crate::replays::{
    judge, Claim, Fingerprint, Kept, Record, ReplayId, ReplayStore, StoreError, Ticket,
};

const HOLD: u8 = b'H';
const FINAL: u8 = b'F';
const MAC_BYTES: usize = 32;

pub struct RedisReplays {
    cluster: Arc<Cluster>,
    seal: Seal,
}

impl RedisReplays {
    pub fn new(cluster: Arc<Cluster>) -> RedisReplays {
        let seal = Seal {
            mac_key: cluster.subkey("replays"),
        };
        RedisReplays { cluster, seal }
    }
}

/// How records are written as Redis values and read back.
struct Seal {
    mac_key: [u8; 32],
}

impl Seal {
    fn mac(&self, name: &str, payload: &[u8]) -> [u8; MAC_BYTES] {
        let mut hasher = blake3::Hasher::new_keyed(&self.mac_key);
        hasher.update(&u64::try_from(name.len()).unwrap_or(u64::MAX).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(payload);
        *hasher.finalize().as_bytes()
    }

    /// `kind`, the MAC, then the payload.
    fn sealed(&self, name: &str, kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut macced = Vec::with_capacity(1 + payload.len());
        macced.push(kind);
        macced.extend_from_slice(payload);
        let mut value = Vec::with_capacity(1 + MAC_BYTES + payload.len());
        value.push(kind);
        value.extend_from_slice(&self.mac(name, &macced));
        value.extend_from_slice(payload);
        value
    }

    fn opened<'v>(&self, name: &str, value: &'v [u8]) -> Option<(u8, &'v [u8])> {
        let (&kind, rest) = value.split_first()?;
        if rest.len() < MAC_BYTES {
            return None;
        }
        let (mac, payload) = rest.split_at(MAC_BYTES);
        let mut macced = Vec::with_capacity(1 + payload.len());
        macced.push(kind);
        macced.extend_from_slice(payload);
        // Compared in constant time: a MAC is a secret's witness.
        let expected = blake3::Hash::from(self.mac(name, &macced));
        let given = <[u8; MAC_BYTES]>::try_from(mac).ok()?;
        (expected == blake3::Hash::from(given)).then_some((kind, payload))
    }

    fn hold(&self, name: &str, ticket: Ticket) -> Vec<u8> {
        let mut payload = ticket.fingerprint.0.to_vec();
        payload.extend_from_slice(&ticket.nonce.to_le_bytes());
        self.sealed(name, HOLD, &payload)
    }

    fn final_value(&self, name: &str, fingerprint: Fingerprint, kept: &Kept) -> Vec<u8> {
        let headers: Vec<(&str, &[u8])> = kept
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect();
        // Plain names and byte lists: serialising them cannot fail.
        let headers = serde_json::to_vec(&headers).unwrap_or_default();
        let mut payload = Vec::with_capacity(32 + 2 + 4 + headers.len() + kept.body.len());
        payload.extend_from_slice(&fingerprint.0);
        payload.extend_from_slice(&kept.status.as_u16().to_le_bytes());
        payload.extend_from_slice(
            &u32::try_from(headers.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        payload.extend_from_slice(&headers);
        payload.extend_from_slice(&kept.body);
        self.sealed(name, FINAL, &payload)
    }

    /// The record a stored value holds; None when it is not one this tier wrote.
    fn record(&self, name: &str, value: &[u8]) -> Option<Record> {
        let (kind, payload) = self.opened(name, value)?;
        let (fingerprint, rest) = payload.split_at_checked(32)?;
        let fingerprint = Fingerprint(fingerprint.try_into().ok()?);
        match kind {
            HOLD => {
                let nonce = u64::from_le_bytes(rest.try_into().ok()?);
                Some(Record::InFlight(Ticket { fingerprint, nonce }))
            }
            FINAL => {
                let (status, rest) = rest.split_at_checked(2)?;
                let status = StatusCode::from_u16(u16::from_le_bytes(status.try_into().ok()?));
                let (length, rest) = rest.split_at_checked(4)?;
                let length = usize::try_from(u32::from_le_bytes(length.try_into().ok()?)).ok()?;
                let (headers, body) = rest.split_at_checked(length)?;
                let pairs: Vec<(String, Vec<u8>)> = serde_json::from_slice(headers).ok()?;
                let mut map = HeaderMap::with_capacity(pairs.len());
                for (name, value) in pairs {
                    map.append(
                        HeaderName::from_bytes(name.as_bytes()).ok()?,
                        HeaderValue::from_bytes(&value).ok()?,
                    );
                }
                let kept = Kept {
                    status: status.ok()?,
                    headers: map,
                    body: Bytes::copy_from_slice(body),
                };
                Some(Record::Final(fingerprint, Arc::new(kept)))
            }
            _ => None,
        }
    }
}

impl ReplayStore for RedisReplays {
    fn claim<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        in_flight_for: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            let name = self.cluster.replay_name(&id.bytes());
            let hold = self.seal.hold(&name, ticket);
            let held = self
                .cluster
                .replay_claim(&name, hold, in_flight_for)
                .await
                .ok_or(StoreError::Unreachable)?;
            let Some(value) = held else {
                return Ok(Claim::Won);
            };
            match self.seal.record(&name, &value) {
                Some(record) => Ok(judge(Some(&record), &ticket.fingerprint)),
                None => {
                    tracing::warn!("a kept idempotent answer in Redis failed its check; refused");
                    Err(StoreError::Unreadable)
                }
            }
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        kept: Arc<Kept>,
        keep_for: Duration,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let name = self.cluster.replay_name(&id.bytes());
            let hold = self.seal.hold(&name, ticket);
            let value = self.seal.final_value(&name, ticket.fingerprint, &kept);
            self.cluster
                .replay_finish(&name, hold, value, keep_for)
                .await;
        })
    }

    fn abandon<'a>(&'a self, id: &'a ReplayId, ticket: Ticket) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let name = self.cluster.replay_name(&id.bytes());
            let hold = self.seal.hold(&name, ticket);
            self.cluster.replay_abandon(&name, hold).await;
        })
    }

    fn shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> Seal {
        Seal { mac_key: [3; 32] }
    }

    fn kept() -> Kept {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-many", HeaderValue::from_static("one"));
        headers.append("x-many", HeaderValue::from_static("two"));
        Kept {
            status: StatusCode::CONFLICT,
            headers,
            body: Bytes::from_static(br#"{"error":{"code":409}}"#),
        }
    }

    #[test]
    fn a_final_answer_reads_back_as_it_was_kept() {
        let fingerprint = Fingerprint([9; 32]);
        let value = seal().final_value("r:1", fingerprint, &kept());
        assert_eq!(
            seal().record("r:1", &value),
            Some(Record::Final(fingerprint, Arc::new(kept())))
        );
    }

    #[test]
    fn a_hold_reads_back_with_its_ticket() {
        let ticket = Ticket {
            fingerprint: Fingerprint([1; 32]),
            nonce: 77,
        };
        let value = seal().hold("r:1", ticket);
        assert_eq!(seal().record("r:1", &value), Some(Record::InFlight(ticket)));
    }

    #[test]
    fn a_changed_byte_another_name_or_another_key_is_never_read() {
        let value = seal().final_value("r:1", Fingerprint([9; 32]), &kept());
        for at in [0, 1, 40, value.len() - 1] {
            let mut changed = value.clone();
            changed[at] ^= 1;
            assert_eq!(seal().record("r:1", &changed), None, "byte {at}");
        }
        assert_eq!(seal().record("r:2", &value), None);
        let other = Seal { mac_key: [4; 32] };
        assert_eq!(other.record("r:1", &value), None);
        assert_eq!(seal().record("r:1", &value[..value.len() - 1]), None);
        assert_eq!(seal().record("r:1", b""), None);
    }
}
