//! The `[cluster]` settings, as typed values: which Redis, the replicas' shared key, and how
//! the tier behaves.

use std::time::Duration;

use serde::Deserialize;

/// What a replica does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnRedisDown {
    /// Every load asks the catalog (coalesced only with loads that arrived before it asked), so
    /// read-your-writes holds.
    Revalidate,
    /// Each replica serves its own entries for `fresh_for`, as a single-process cache would.
    Local,
}

impl OnRedisDown {
    pub fn as_str(self) -> &'static str {
        match self {
            OnRedisDown::Revalidate => "revalidate",
            OnRedisDown::Local => "local",
        }
    }
}

/// The secret the replicas share, from `cluster.key_file`. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    /// The key for one purpose, derived from the file's bytes (BLAKE3's key derivation).
    pub fn derive(file: &[u8]) -> ClusterKey {
        ClusterKey(blake3::derive_key("icecache 2026 cluster key", file))
    }

    /// A sub-key for one use (identity scopes, Redis key names, stored-value MACs).
    pub fn subkey(&self, purpose: &str) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher.update(purpose.as_bytes());
        *hasher.finalize().as_bytes()
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(redacted)")
    }
}

/// A Redis URL; `Debug` and `Display` leave out any password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(pub String);

impl RedisUrl {
    /// The URL without its user, password or query (a password may also be given as one).
    pub fn shown(&self) -> String {
        crate::secret::shown_url(&self.0)
    }

    /// Whether it names a Redis over TCP (`redis://`) or TLS (`rediss://`), the two forms
    /// icecache takes.
    pub fn is_tcp(&self) -> bool {
        self.0.starts_with("redis://") || self.0.starts_with("rediss://")
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisUrl({})", self.shown())
    }
}

/// The shortest cluster key file accepted.
pub const MIN_KEY_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSettings {
    pub redis_url: RedisUrl,
    pub key: ClusterKey,
    pub on_redis_down: OnRedisDown,
    pub max_shared_bytes: u64,
    pub lease: Duration,
    pub barrier_interval: Duration,
    pub redis_timeout: Duration,
    pub key_prefix: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_password_is_never_shown() {
        let url = RedisUrl("rediss://icecache:s3cret@redis:6380/0".into());
        assert_eq!(url.shown(), "rediss://…@redis:6380/0");
        for url in [
            "redis+unix:///run/r.sock?pass=s3cret",
            "redis://h:1/0?password=s3cret#s3cret",
        ] {
            assert!(!RedisUrl(url.into()).shown().contains("s3cret"), "{url}");
        }
        assert!(!format!("{url:?}").contains("s3cret"));
        assert!(!format!("{:?}", ClusterKey::derive(&[7; 32])).contains('7'));
    }

    #[test]
    fn sub_keys_differ_by_purpose() {
        let key = ClusterKey::derive(&[1; 40]);
        assert_ne!(key.subkey("scope"), key.subkey("mac"));
        assert_eq!(
            key.subkey("scope"),
            ClusterKey::derive(&[1; 40]).subkey("scope")
        );
    }
}
