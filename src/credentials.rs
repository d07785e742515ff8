//! Vended credentials in a LoadTableResult: what expires when. A cached body that holds
//! credentials is never served (nor confirmed with a local 304) past the earliest expiry among
//! them, minus a safety margin.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;

/// Keys whose values are secrets a catalog vends.
const SECRET_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "gcs.oauth2.token",
    "adls.auth.shared-key.account.key",
    "client.access-key-id",
    "client.access-key-secret",
    "client.security-token",
    "jdbc.password",
    "token",
];
const SECRET_PREFIXES: &[&str] = &["adls.sas-token.", "urn:ietf:params:oauth:token-type:"];

/// Keys that give a credential's expiry, in milliseconds since the epoch.
const EXPIRY_KEYS: &[&str] = &[
    "s3.session-token-expires-at-ms",
    "gcs.oauth2.token-expires-at",
    "client.security-token-expires-at-ms",
];
const EXPIRY_PREFIXES: &[&str] = &["adls.sas-token-expires-at-ms."];

/// The most a credential's lifetime is shortened by the safety margin.
const MAX_MARGIN: Duration = Duration::from_secs(300);

#[derive(Deserialize)]
struct StorageCredential {
    #[serde(default)]
    config: HashMap<String, Value>,
}

/// The parts of a LoadTableResult that can carry credentials; the metadata is skipped unread.
#[derive(Deserialize)]
struct LoadTableResult {
    #[serde(default)]
    config: HashMap<String, Value>,
    #[serde(default, rename = "storage-credentials")]
    storage_credentials: Vec<StorageCredential>,
}

/// What a body vends.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Vended {
    pub has_secrets: bool,
    /// The earliest expiry, in milliseconds since the epoch.
    pub earliest_expiry_ms: Option<u64>,
}

impl Vended {
    /// How long from now a body with these credentials may be served: None when it holds no
    /// credentials. Half the remaining lifetime (at most five minutes) is kept as a margin, so a
    /// client never receives a credential about to lapse. A secret with no expiry gets
    /// `no_expiry_cap`.
    pub fn servable_for(&self, no_expiry_cap: Duration) -> Option<Duration> {
        match self.earliest_expiry_ms {
            Some(expiry_ms) => {
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let remaining = Duration::from_millis(expiry_ms.saturating_sub(now_ms));
                let margin = (remaining / 2).min(MAX_MARGIN);
                Some(remaining - margin)
            }
            None if self.has_secrets => Some(no_expiry_cap),
            None => None,
        }
    }
}

/// Reads the credential fields of a LoadTableResult; an error means the body is not a
/// LoadTableResult (or not JSON) and must not be cached.
pub fn inspect(body: &[u8]) -> Result<Vended, serde_json::Error> {
    let result: LoadTableResult = serde_json::from_slice(body)?;
    let mut vended = Vended::default();
    let configs =
        std::iter::once(&result.config).chain(result.storage_credentials.iter().map(|c| &c.config));
    for config in configs {
        for (key, value) in config {
            let key = key.as_str();
            if SECRET_KEYS.contains(&key) || SECRET_PREFIXES.iter().any(|p| key.starts_with(p)) {
                vended.has_secrets = true;
            }
            if EXPIRY_KEYS.contains(&key) || EXPIRY_PREFIXES.iter().any(|p| key.starts_with(p)) {
                // An expiry that does not parse is treated as already past: never cache on a guess.
                let expiry = match value {
                    Value::String(s) => s.trim().parse::<u64>().unwrap_or(0),
                    Value::Number(n) => n.as_u64().unwrap_or(0),
                    _ => 0,
                };
                vended.earliest_expiry_ms =
                    Some(vended.earliest_expiry_ms.map_or(expiry, |e| e.min(expiry)));
            }
        }
    }
    Ok(vended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_without_credentials_vends_nothing() {
        let v = inspect(br#"{"metadata":{"a":1},"config":{"s3.endpoint":"http://x"}}"#).unwrap();
        assert_eq!(v, Vended::default());
        assert_eq!(v.servable_for(Duration::from_secs(5)), None);
    }

    #[test]
    fn the_earliest_expiry_across_config_and_storage_credentials_wins() {
        let v = inspect(
            br#"{"metadata":{},"config":{"s3.access-key-id":"A","s3.session-token-expires-at-ms":"9000"},
                "storage-credentials":[{"prefix":"s3://b","config":{"adls.sas-token-expires-at-ms.acct":"5000"}}]}"#,
        )
        .unwrap();
        assert!(v.has_secrets);
        assert_eq!(v.earliest_expiry_ms, Some(5000));
    }

    #[test]
    fn an_expired_credential_is_servable_for_no_time() {
        let v =
            inspect(br#"{"metadata":{},"config":{"token":"t","gcs.oauth2.token-expires-at":"1"}}"#)
                .unwrap();
        assert_eq!(v.servable_for(Duration::from_secs(5)), Some(Duration::ZERO));
    }

    #[test]
    fn an_unparsable_expiry_counts_as_expired() {
        let v = inspect(br#"{"metadata":{},"config":{"s3.session-token-expires-at-ms":"soon"}}"#)
            .unwrap();
        assert_eq!(v.earliest_expiry_ms, Some(0));
    }

    #[test]
    fn margin_is_half_the_remaining_lifetime_at_most_five_minutes() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let short = Vended {
            has_secrets: true,
            earliest_expiry_ms: Some(now_ms + 2_000),
        };
        let servable = short.servable_for(Duration::from_secs(5)).unwrap();
        assert!(servable <= Duration::from_millis(1_000) && servable > Duration::from_millis(900));
        let long = Vended {
            has_secrets: true,
            earliest_expiry_ms: Some(now_ms + 3_600_000),
        };
        let servable = long.servable_for(Duration::from_secs(5)).unwrap();
        assert!(servable > Duration::from_secs(3_290) && servable <= Duration::from_secs(3_300));
    }

    #[test]
    fn a_secret_without_expiry_is_capped() {
        let v = inspect(br#"{"metadata":{},"config":{"s3.secret-access-key":"S"}}"#).unwrap();
        assert_eq!(
            v.servable_for(Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn non_json_is_an_error() {
        assert!(inspect(b"<html>").is_err());
        assert!(inspect(b"[1,2]").is_err());
    }
}
