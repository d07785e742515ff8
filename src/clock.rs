//! The wall clock, in milliseconds since the Unix epoch: what replicas and event sources stamp
//! messages with (durations within a process use `tokio::time` instead).

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
