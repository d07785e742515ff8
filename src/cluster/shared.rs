//! Entries shared with the tier through Redis: what one replica fetched from the catalog, as
//! the policy stage left it (never a body that holds vended credentials), for the others to
//! serve without asking again. Each value carries a MAC under the cluster key over its name
//! and its bytes: a value that was changed, truncated, or written by something else is a miss,
//! never a wrong answer.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"ICE1";
const MAC_BYTES: usize = 32;

/// An entry as the tier shares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedEntry {
    /// The identity body, or its gzip copy when `gzipped`.
    #[serde(skip)]
    pub body: Bytes,
    pub gzipped: bool,
    pub config_empty: bool,
    pub headers: Vec<(String, Vec<u8>)>,
    pub etag: Vec<u8>,
    pub upstream_etag: Option<Vec<u8>>,
    /// Served length of the identity body.
    pub length: u64,
    pub vary: Vec<(String, Vec<Vec<u8>>)>,
    /// Wall-clock milliseconds: when the catalog was asked, and until when the body's
    /// credentials (if any) may be handed out.
    pub stored_at_ms: u64,
    pub servable_until_ms: Option<u64>,
    /// The table's tokens when the catalog was asked: the entry is current while they are.
    pub tokens: Vec<u64>,
}

/// Why a stored value was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not a value icecache wrote, or not under this key: changed, truncated, or forged.
    Tampered,
    /// Written under older tokens: the table changed since.
    Stale,
}

fn mac(key: &[u8; 32], name: &str, meta: &[u8], body: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(&u64::try_from(name.len()).unwrap_or(u64::MAX).to_le_bytes());
    hasher.update(name.as_bytes());
    hasher.update(&u64::try_from(meta.len()).unwrap_or(u64::MAX).to_le_bytes());
    hasher.update(meta);
    hasher.update(body);
    *hasher.finalize().as_bytes()
}

impl SharedEntry {
    /// The value stored under `name`.
    pub fn encode(&self, key: &[u8; 32], name: &str) -> Vec<u8> {
        // Serialising plain fields cannot fail.
        let meta = serde_json::to_vec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(4 + MAC_BYTES + 4 + meta.len() + self.body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&mac(key, name, &meta, &self.body));
        out.extend_from_slice(&u32::try_from(meta.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&meta);
        out.extend_from_slice(&self.body);
        out
    }

    /// The entry stored under `name`, if it is authentic and written under `tokens`.
    pub fn decode(
        key: &[u8; 32],
        name: &str,
        value: &[u8],
        tokens: &[u64],
    ) -> Result<SharedEntry, Rejected> {
        let rest = value.strip_prefix(MAGIC).ok_or(Rejected::Tampered)?;
        if rest.len() < MAC_BYTES + 4 {
            return Err(Rejected::Tampered);
        }
        let (tag, rest) = rest.split_at(MAC_BYTES);
        let (length, rest) = rest.split_at(4);
        let length = usize::try_from(u32::from_le_bytes(
            length.try_into().map_err(|_| Rejected::Tampered)?,
        ))
        .map_err(|_| Rejected::Tampered)?;
        if rest.len() < length {
            return Err(Rejected::Tampered);
        }
        let (meta, body) = rest.split_at(length);
        // Constant-time comparison of the tags.
        if !constant_eq(tag, &mac(key, name, meta, body)) {
            return Err(Rejected::Tampered);
        }
        let mut entry: SharedEntry =
            serde_json::from_slice(meta).map_err(|_| Rejected::Tampered)?;
        if entry.tokens != tokens {
            return Err(Rejected::Stale);
        }
        entry.body = Bytes::copy_from_slice(body);
        Ok(entry)
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> SharedEntry {
        SharedEntry {
            body: Bytes::from_static(b"{\"config\":{},\"metadata\":{}}"),
            gzipped: false,
            config_empty: true,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            etag: b"\"abc\"".to_vec(),
            upstream_etag: None,
            length: 27,
            vary: Vec::new(),
            stored_at_ms: 1,
            servable_until_ms: None,
            tokens: vec![1, 2, 3],
        }
    }

    #[test]
    fn a_stored_entry_reads_back_under_its_name_and_tokens() {
        let key = [9; 32];
        let value = entry().encode(&key, "k");
        assert_eq!(
            SharedEntry::decode(&key, "k", &value, &[1, 2, 3]),
            Ok(entry())
        );
        assert_eq!(
            SharedEntry::decode(&key, "k", &value, &[1, 2, 4]),
            Err(Rejected::Stale)
        );
    }

    #[test]
    fn a_changed_moved_or_foreign_value_is_rejected() {
        let key = [9; 32];
        let value = entry().encode(&key, "k");
        let mut flipped = value.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        for (name, bytes, key) in [
            ("k", &flipped[..], key),
            ("other", &value[..], key),
            ("k", &value[..value.len() - 3], key),
            ("k", &value[..], [8; 32]),
            ("k", &b"ICE1"[..], key),
        ] {
            assert_eq!(
                SharedEntry::decode(&key, name, bytes, &[1, 2, 3]),
                Err(Rejected::Tampered)
            );
        }
    }
}
