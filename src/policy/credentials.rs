//! Vended credentials in a LoadTableResult: which keys are secrets, what expires when, and how
//! to remove them without rebuilding the metadata. A cached body that holds credentials is
//! never served (nor confirmed with a local 304) past the earliest expiry among them, minus a
//! safety margin.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::KeyPatterns;

/// The built-in credential keys: a body holding any of them vends credentials.
static CREDENTIAL_KEYS: LazyLock<KeyPatterns> = LazyLock::new(KeyPatterns::default);

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
    #[serde(default, deserialize_with = "null_as_empty")]
    config: HashMap<String, Value>,
}

/// The parts of a LoadTableResult that can carry credentials; the metadata is skipped unread.
/// A `null` where an object or a list belongs counts as empty, as lenient clients read it.
#[derive(Deserialize)]
struct LoadTableResult {
    #[serde(default, deserialize_with = "null_as_empty")]
    config: HashMap<String, Value>,
    #[serde(
        default,
        rename = "storage-credentials",
        deserialize_with = "null_as_empty"
    )]
    storage_credentials: Vec<StorageCredential>,
}

fn null_as_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// What a body vends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
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
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                let remaining = Duration::from_millis(expiry_ms.saturating_sub(now_ms));
                let margin = (remaining / 2).min(MAX_MARGIN);
                Some(remaining.saturating_sub(margin))
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
    Ok(vended_by(std::iter::once(&result.config).chain(
        result.storage_credentials.iter().map(|c| &c.config),
    )))
}

fn vended_by<'a>(configs: impl Iterator<Item = &'a HashMap<String, Value>>) -> Vended {
    let mut vended = Vended::default();
    for config in configs {
        for (key, value) in config {
            let key = key.as_str();
            if CREDENTIAL_KEYS.matches(key) {
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
    vended
}

/// Where `config` goes in a stripped body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `config` first, always present (LoadTableResult): injected properties are spliced in
    /// right after `{"config":{` without parsing the body again.
    ConfigFirst,
    /// Only the members the body had (loadCredentials, any other JSON object).
    AsIs,
}

/// A body with credential keys removed.
#[derive(Debug)]
pub struct Stripped {
    pub body: Bytes,
    /// How many keys were removed.
    pub removed: usize,
    /// What the body still vends (keys outside the strip list).
    pub vended: Vended,
    /// Whether the `config` object is empty (an injected fragment then needs no comma).
    pub config_empty: bool,
}

/// Where injected members go in a `Layout::ConfigFirst` body: right after `{"config":{`.
pub const SPLICE_AT: usize = br#"{"config":{"#.len();

/// Removes every key that `secret` matches from `config` and from each
/// `storage-credentials[].config`, and drops storage credentials left empty. The other members
/// (the metadata above all) are copied through unparsed; a repeated member keeps its last
/// value, the only one written out. Not a JSON object: an error.
pub fn strip(
    body: &[u8],
    secret: &KeyPatterns,
    layout: Layout,
) -> Result<Stripped, serde_json::Error> {
    let mut top: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(body)?;
    let had_config = top.contains_key("config");
    let mut config: HashMap<String, Value> = match top.remove("config") {
        Some(raw) => {
            serde_json::from_str::<Option<HashMap<String, Value>>>(raw.get())?.unwrap_or_default()
        }
        None => HashMap::new(),
    };
    let mut removed = 0;
    let mut remove_secrets = |map: &mut HashMap<String, Value>| {
        let before = map.len();
        map.retain(|key, _| !secret.matches(key));
        removed += before - map.len();
    };
    remove_secrets(&mut config);
    let storage: Option<Vec<serde_json::Map<String, Value>>> = match top
        .remove("storage-credentials")
    {
        Some(raw) => Some(serde_json::from_str::<Option<Vec<_>>>(raw.get())?.unwrap_or_default()),
        None => None,
    };
    let mut kept = Vec::new();
    let mut storage_configs = Vec::new();
    for mut credential in storage.iter().flatten().cloned() {
        let mut entry_config: HashMap<String, Value> = match credential.remove("config") {
            Some(value) => {
                Option::<HashMap<String, Value>>::deserialize(value)?.unwrap_or_default()
            }
            None => HashMap::new(),
        };
        remove_secrets(&mut entry_config);
        if !entry_config.is_empty() {
            storage_configs.push(entry_config.clone());
            let sorted: serde_json::Map<String, Value> = entry_config.into_iter().collect();
            credential.insert("config".to_owned(), Value::Object(sorted));
            kept.push(credential);
        }
    }
    let vended = vended_by(std::iter::once(&config).chain(storage_configs.iter()));

    let mut out = Vec::with_capacity(body.len());
    out.push(b'{');
    let mut first = true;
    let mut member = |out: &mut Vec<u8>, key: &str| -> Result<(), serde_json::Error> {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        Ok(())
    };
    if had_config || layout == Layout::ConfigFirst {
        member(&mut out, "config")?;
        // Sorted, so that equal configs always serialise to equal bytes (and equal ETags).
        let sorted: BTreeMap<&String, &Value> = config.iter().collect();
        serde_json::to_writer(&mut out, &sorted)?;
    }
    let keep_list = match layout {
        Layout::ConfigFirst => !kept.is_empty(),
        Layout::AsIs => storage.is_some(),
    };
    if keep_list {
        member(&mut out, "storage-credentials")?;
        serde_json::to_writer(&mut out, &kept)?;
    }
    for (key, raw) in &top {
        member(&mut out, key)?;
        out.extend_from_slice(raw.get().as_bytes());
    }
    out.push(b'}');
    Ok(Stripped {
        body: Bytes::from(out),
        removed,
        vended,
        config_empty: config.is_empty(),
    })
}

/// The three pieces of a served body with injected properties: the stripped body around the
/// fragment. Nothing is copied but the fragment.
pub fn spliced(body: &Bytes, fragment: &Bytes, config_empty: bool) -> [Bytes; 3] {
    let separator: &'static [u8] = if config_empty || fragment.is_empty() {
        b""
    } else {
        b","
    };
    let mut middle = Vec::with_capacity(fragment.len() + 1);
    middle.extend_from_slice(fragment);
    middle.extend_from_slice(separator);
    [
        body.slice(..SPLICE_AT),
        Bytes::from(middle),
        body.slice(SPLICE_AT..),
    ]
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

    const VENDED: &[u8] = br#"{"metadata-location":"s3://b/m.json","metadata":{"format-version":2,"n":12345678901234567},
        "config":{"s3.access-key-id":"AK","s3.secret-access-key":"SK","s3.session-token":"ST",
                  "s3.session-token-expires-at-ms":"1","s3.endpoint":"http://s3","client.region":"eu"},
        "storage-credentials":[{"prefix":"s3://b/a","config":{"s3.access-key-id":"AK2"}},
                               {"prefix":"s3://b/c","config":{"s3.secret-access-key":"SK3","s3.signer.uri":"http://sign"}}]}"#;

    #[test]
    fn strip_removes_every_secret_and_keeps_the_rest() {
        let stripped = strip(VENDED, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
        let text = std::str::from_utf8(&stripped.body).unwrap();
        for secret in ["AK", "SK", "ST", "expires-at"] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        let value: Value = serde_json::from_slice(&stripped.body).unwrap();
        assert_eq!(value["config"]["s3.endpoint"], "http://s3");
        assert_eq!(value["config"]["client.region"], "eu");
        assert_eq!(value["metadata"]["n"], 12345678901234567u64);
        assert_eq!(value["metadata-location"], "s3://b/m.json");
        let storage = value["storage-credentials"].as_array().unwrap();
        assert_eq!(storage.len(), 1, "the entry left empty is dropped");
        assert_eq!(storage[0]["config"]["s3.signer.uri"], "http://sign");
        assert_eq!(stripped.removed, 6);
        assert!(!stripped.vended.has_secrets);
    }

    #[test]
    fn storage_credentials_left_empty_disappear() {
        let body = br#"{"metadata":{},"storage-credentials":[{"prefix":"s3://b","config":{"token":"t"}}]}"#;
        let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
        assert_eq!(&stripped.body[..], br#"{"config":{},"metadata":{}}"#);
        assert!(stripped.config_empty);
    }

    #[test]
    fn an_injected_fragment_makes_valid_json_with_or_without_other_config() {
        let fragment = Bytes::from_static(br#""s3.access-key-id":"INJ""#);
        for body in [
            &br#"{"metadata":{}}"#[..],
            br#"{"metadata":{},"config":{"a":"b"}}"#,
        ] {
            let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
            let parts = spliced(&stripped.body, &fragment, stripped.config_empty);
            let served = parts.concat();
            let value: Value = serde_json::from_slice(&served).unwrap();
            assert_eq!(value["config"]["s3.access-key-id"], "INJ");
            assert!(
                !stripped.body.windows(3).any(|w| w == b"INJ"),
                "the stored body holds no injected value"
            );
        }
    }

    #[test]
    fn nulls_where_objects_belong_are_read_as_empty() {
        let body = br#"{"metadata":{},"config":null,"storage-credentials":null}"#;
        let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
        assert_eq!(&stripped.body[..], br#"{"config":{},"metadata":{}}"#);
        let body =
            br#"{"metadata":{},"config":{"s3.secret-access-key":"S"},"storage-credentials":null}"#;
        let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
        assert_eq!(stripped.removed, 1);
        assert!(inspect(body).unwrap().has_secrets);
    }

    #[test]
    fn credentials_answers_keep_their_shape() {
        let body =
            br#"{"storage-credentials":[{"prefix":"s3://b","config":{"s3.access-key-id":"A"}}]}"#;
        let stripped = strip(body, &KeyPatterns::default(), Layout::AsIs).unwrap();
        assert_eq!(&stripped.body[..], br#"{"storage-credentials":[]}"#);
    }

    #[test]
    fn a_repeated_member_is_written_once_with_its_last_value() {
        let body = br#"{"config":{"s3.secret-access-key":"S"},"config":{"a":"b"},"metadata":{}}"#;
        let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst).unwrap();
        assert_eq!(&stripped.body[..], br#"{"config":{"a":"b"},"metadata":{}}"#);
    }

    #[test]
    fn non_json_is_an_error() {
        assert!(inspect(b"<html>").is_err());
        assert!(inspect(b"[1,2]").is_err());
        assert!(strip(b"[1,2]", &KeyPatterns::default(), Layout::AsIs).is_err());
        assert!(strip(b"<html>", &KeyPatterns::default(), Layout::AsIs).is_err());
    }
}
