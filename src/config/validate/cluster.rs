//! The `[cluster]` table into `ClusterSettings`.

use super::Problems;
use crate::cluster::settings::{
    ClusterKey, ClusterSettings, RedisUrl, DEFAULT_BARRIER_INTERVAL, DEFAULT_CONSISTENCY,
    DEFAULT_KEY_PREFIX, DEFAULT_LEASE, DEFAULT_MAX_SHARED_BYTES, DEFAULT_MEMBER_TIMEOUT,
    DEFAULT_ON_REDIS_DOWN, DEFAULT_REDIS_TIMEOUT, MAX_BARRIER_INTERVAL, MAX_LEASE,
    MAX_MEMBER_TIMEOUT, MAX_REDIS_TIMEOUT, MIN_KEY_BYTES, MIN_MEMBER_TIMEOUT,
};
use crate::config::RawCluster;

/// The `[cluster]` table: None without a Redis URL.
pub(super) fn settings(raw: &RawCluster, p: &mut Problems) -> Option<ClusterSettings> {
    let Some(url) = raw.redis_url.as_deref().filter(|u| !u.is_empty()) else {
        // Any cluster setting without Redis is a tier that lost its URL (a missing Secret):
        // running as an island would be silent.
        for (key, set) in [
            ("cluster.key_file", raw.key_file.is_some()),
            ("cluster.consistency", raw.consistency.is_some()),
            ("cluster.on_redis_down", raw.on_redis_down.is_some()),
            ("cluster.max_shared_bytes", raw.max_shared_bytes.is_some()),
            ("cluster.lease", raw.lease.is_some()),
            ("cluster.barrier_interval", raw.barrier_interval.is_some()),
            ("cluster.member_timeout", raw.member_timeout.is_some()),
            ("cluster.redis_timeout", raw.redis_timeout.is_some()),
            ("cluster.key_prefix", raw.key_prefix.is_some()),
        ] {
            if set {
                p.add(
                    key,
                    "is set but cluster.redis_url is not: a tier needs its Redis (one process \
                     needs no cluster setting)",
                );
            }
        }
        return None;
    };
    let shown = RedisUrl(url.to_owned()).shown();
    if !RedisUrl(url.to_owned()).is_tcp() {
        p.add(
            "cluster.redis_url",
            format!("{shown:?}: use redis://host:6379 or rediss://user@host:6380"),
        );
    } else if let Err(e) = redis::IntoConnectionInfo::into_connection_info(url) {
        p.add(
            "cluster.redis_url",
            format!(
                "{shown:?} is not a Redis URL ({e}): use redis://host:6379 or \
                 rediss://user@host:6380"
            ),
        );
    }
    let key = match &raw.key_file {
        None => {
            p.add(
                "cluster.key_file",
                "is required with cluster.redis_url: a file of at least 32 random bytes the \
                 replicas share (--cluster-key-file, e.g. from a Secret)",
            );
            None
        }
        Some(path) => match std::fs::read(path) {
            Ok(bytes) if bytes.len() >= MIN_KEY_BYTES => Some(ClusterKey::derive(&bytes)),
            Ok(bytes) => {
                p.add(
                    "cluster.key_file",
                    format!(
                        "{} holds {} bytes; the shared key needs at least {MIN_KEY_BYTES} \
                         (e.g. `head -c 32 /dev/urandom > {}`)",
                        path.display(),
                        bytes.len(),
                        path.display()
                    ),
                );
                None
            }
            Err(e) => {
                p.add(
                    "cluster.key_file",
                    format!("cannot read {}: {e}", path.display()),
                );
                None
            }
        },
    };
    let max_shared_bytes = p.size(
        "cluster.max_shared_bytes",
        raw.max_shared_bytes.as_ref(),
        DEFAULT_MAX_SHARED_BYTES,
    );
    let lease = p.positive_duration("cluster.lease", raw.lease.as_deref(), DEFAULT_LEASE);
    let barrier_interval = p.duration(
        "cluster.barrier_interval",
        raw.barrier_interval.as_deref(),
        DEFAULT_BARRIER_INTERVAL,
    );
    let member_timeout = p.duration(
        "cluster.member_timeout",
        raw.member_timeout.as_deref(),
        DEFAULT_MEMBER_TIMEOUT,
    );
    if member_timeout < MIN_MEMBER_TIMEOUT {
        p.add(
            "cluster.member_timeout",
            format!("must be at least {}s", MIN_MEMBER_TIMEOUT.as_secs()),
        );
    }
    let redis_timeout = p.positive_duration(
        "cluster.redis_timeout",
        raw.redis_timeout.as_deref(),
        DEFAULT_REDIS_TIMEOUT,
    );
    if redis_timeout * 4 > member_timeout {
        p.add(
            "cluster.redis_timeout",
            "must be at most a quarter of cluster.member_timeout (a replica must be able to \
             fail several commands before the others forget it)",
        );
    }
    for (key, value, max) in [
        ("cluster.lease", lease, MAX_LEASE),
        (
            "cluster.barrier_interval",
            barrier_interval,
            MAX_BARRIER_INTERVAL,
        ),
        ("cluster.member_timeout", member_timeout, MAX_MEMBER_TIMEOUT),
        ("cluster.redis_timeout", redis_timeout, MAX_REDIS_TIMEOUT),
    ] {
        if value > max {
            p.add(key, format!("must be at most {}s", max.as_secs()));
        }
    }
    let key_prefix = raw
        .key_prefix
        .clone()
        .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
    // Letters, digits and `_-.` only: a glob character would widen the `~prefix:*` pattern
    // the Redis user is restricted to.
    let word = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
    if key_prefix.is_empty() || key_prefix.len() > 64 || !key_prefix.chars().all(word) {
        p.add(
            "cluster.key_prefix",
            "must be 1 to 64 letters, digits, `_`, `-` or `.`",
        );
    }
    Some(ClusterSettings {
        redis_url: RedisUrl(url.to_owned()),
        key: key?,
        consistency: raw.consistency.unwrap_or(DEFAULT_CONSISTENCY),
        on_redis_down: raw.on_redis_down.unwrap_or(DEFAULT_ON_REDIS_DOWN),
        max_shared_bytes,
        lease,
        barrier_interval,
        member_timeout,
        redis_timeout,
        key_prefix,
    })
}
