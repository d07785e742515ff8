//! The `[cluster]` table into `ClusterSettings`.

use crate::cluster::settings::{ClusterKey, ClusterSettings, RedisUrl, MIN_KEY_BYTES};
use crate::cluster::OnRedisDown;
use crate::config::keys::{needs, KEYS};
use crate::config::values::Values;

/// The `[cluster]` table: None without a Redis URL.
pub(super) fn settings(p: &mut Values) -> Option<ClusterSettings> {
    let Some(url) = p.text("cluster.redis_url").filter(|u| !u.is_empty()) else {
        // Any cluster setting without Redis is a tier that lost its URL (a missing Secret):
        // running as an island would be silent.
        for key in KEYS.iter() {
            if needs(key.name) == Some("cluster.redis_url") && p.is_set(key.name) {
                p.add(
                    key.name,
                    "is set but cluster.redis_url is not: a tier needs its Redis (one process \
                     needs no cluster setting)",
                );
            }
        }
        return None;
    };
    let shown = RedisUrl(url.clone()).shown();
    p.show("cluster.redis_url", shown.clone());
    if !RedisUrl(url.clone()).is_tcp() {
        p.add(
            "cluster.redis_url",
            format!("{shown:?}: use redis://host:6379 or rediss://user@host:6380"),
        );
    } else if let Err(e) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
        p.add(
            "cluster.redis_url",
            format!(
                "{shown:?} is not a Redis URL ({e}): use redis://host:6379 or \
                 rediss://user@host:6380"
            ),
        );
    }
    let key = match p.path("cluster.key_file") {
        None => {
            p.add(
                "cluster.key_file",
                "is required with cluster.redis_url: a file of at least 32 random bytes the \
                 replicas share (--cluster-key-file, e.g. from a Secret)",
            );
            None
        }
        Some(path) => match std::fs::read(&path) {
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
    let max_shared_bytes = p.size("cluster.max_shared_bytes");
    let lease = p.duration("cluster.lease");
    let barrier_interval = p.duration("cluster.barrier_interval");
    // Read (and held to its bounds) so that files of earlier versions start; it no longer
    // changes anything: a replica refuses writes as soon as Redis stops answering it.
    let _ = p.duration("cluster.member_timeout");
    let redis_timeout = p.duration("cluster.redis_timeout");
    let key_prefix = p.text("cluster.key_prefix").unwrap_or_default();
    // Letters, digits and `_-.` only: a glob character would widen the `~prefix:*` pattern
    // the Redis user is restricted to.
    let word = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
    if key_prefix.is_empty() || key_prefix.len() > 64 || !key_prefix.chars().all(word) {
        p.add(
            "cluster.key_prefix",
            "must be 1 to 64 letters, digits, `_`, `-` or `.`",
        );
    }
    // One mode is left; the earlier names still start, so that a configuration file written
    // for an earlier version needs no change (`bounded` now keeps read-your-writes too).
    let _ = p.choice::<String>("cluster.consistency");
    let on_redis_down = p
        .choice::<OnRedisDown>("cluster.on_redis_down")
        .unwrap_or(OnRedisDown::Revalidate);
    Some(ClusterSettings {
        redis_url: RedisUrl(url),
        key: key?,
        on_redis_down,
        max_shared_bytes,
        lease,
        barrier_interval,
        redis_timeout,
        key_prefix,
    })
}
