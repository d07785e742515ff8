//! What every part of the cluster uses to reach Redis: a client that speaks RESP3 (for the
//! subscription's push messages), and fresh token values.

use redis::{IntoConnectionInfo, ProtocolVersion};

/// A fresh token value: random, so a token never returns to a value it had (a counter
/// restarted from a lost key would).
pub fn random_token() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes)
}

pub fn client(url: &str) -> Result<redis::Client, redis::RedisError> {
    let info = url.into_connection_info()?;
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(resp3))
}
