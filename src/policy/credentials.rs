//! Vended credentials in a LoadTableResult: which keys are secrets, what expires when, and how
//! to remove them without rebuilding the metadata. A cached body that holds credentials is
//! never served (nor confirmed with a local 304) past the earliest expiry among them, minus a
//! safety margin.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;

use super::patterns::KeyPatterns;
use crate::wire::json::Members;
use crate::wire::json_walk::{count_named, without_named, WalkError};

/// The built-in credential keys: a body holding any of them vends credentials.
static CREDENTIAL_KEYS: LazyLock<KeyPatterns> = LazyLock::new(KeyPatterns::default);

/// Keys that give a credential's expiry, in milliseconds since the epoch, in any case (the
/// earliest of them counts): the Java client's, pyiceberg's, and Polaris's `expiration-time`.
const EXPIRY_KEYS: &[&str] = &[
    "s3.session-token-expires-at-ms",
    "gcs.oauth2.token-expires-at",
    "client.security-token-expires-at-ms",
    "adls.sas-token-expires-at-ms",
    "expiration-time",
];
const EXPIRY_PREFIXES: &[&str] = &["adls.sas-token-expires-at-ms."];

/// Whether a config key gives a credential's expiry.
fn is_expiry(key: &str) -> bool {
    EXPIRY_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
        || EXPIRY_PREFIXES.iter().any(|p| {
            key.len() > p.len() && key.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
        })
}

/// The most a credential's lifetime is shortened by the safety margin.
const MAX_MARGIN: Duration = Duration::from_secs(300);

/// The credential sections of a LoadTableResult, read the way the loosest client would: every
/// member spelled `config` or `storage-credentials` in any case counts (a Go client matches
/// them case-insensitively), later ones over earlier ones, and a `null` is empty.
struct Sections {
    config: HashMap<String, Value>,
    /// Whether the body had a `config` member at all.
    had_config: bool,
    /// Each storage credential: its members other than `config`, and its `config`.
    storage: Option<Vec<StorageCredential>>,
}

/// A storage credential's members other than `config`, and its `config`.
type StorageCredential = (serde_json::Map<String, Value>, HashMap<String, Value>);

const CONFIG: &str = "config";
const STORAGE_CREDENTIALS: &str = "storage-credentials";

fn merged_config<'a>(
    variants: impl Iterator<Item = &'a RawValue>,
) -> Result<HashMap<String, Value>, serde_json::Error> {
    let mut config = HashMap::new();
    for raw in variants {
        if let Some(map) = serde_json::from_str::<Option<HashMap<String, Value>>>(raw.get())? {
            config.extend(map);
        }
    }
    Ok(config)
}

fn sections(members: &Members) -> Result<Sections, serde_json::Error> {
    let config = merged_config(members.named(CONFIG))?;
    let had_config = members.named(CONFIG).next().is_some();
    let mut storage = None;
    for raw in members.named(STORAGE_CREDENTIALS) {
        let list: Vec<Box<RawValue>> =
            serde_json::from_str::<Option<Vec<_>>>(raw.get())?.unwrap_or_default();
        let entries = storage.get_or_insert_with(Vec::new);
        for credential in list {
            let fields = Members::parse(credential.get().as_bytes())?;
            let config = merged_config(fields.named(CONFIG))?;
            let mut rest = serde_json::Map::new();
            for (key, value) in fields.others(&[CONFIG]) {
                rest.insert(key.to_owned(), serde_json::from_str(value.get())?);
            }
            entries.push((rest, config));
        }
    }
    Ok(Sections {
        config,
        had_config,
        storage,
    })
}

/// Config keys known to be settings, never secrets (FileIO endpoints, regions, switches).
const SETTINGS_KEYS: &[&str] = &[
    "s3.endpoint",
    "s3.region",
    "client.region",
    "s3.path-style-access",
    "s3.remote-signing-enabled",
    "s3.signer.uri",
    "s3.signer.endpoint",
    "s3.cross-region-access-enabled",
    "s3.checksum-enabled",
    "s3.delete-enabled",
    "s3.acl",
    "s3.sse.type",
    "gcs.project-id",
    "gcs.service.host",
    "io-impl",
    "rest-page-size",
];

/// What a body vends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Vended {
    pub has_secrets: bool,
    /// A config key that is neither a known credential nor a known setting: it may hold a
    /// secret icecache cannot name (kept out of anything shared beyond this process).
    pub has_unknown_keys: bool,
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

/// Why a body could not be read for what it vends.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Walk(#[from] WalkError),
}

/// Reads the credential fields of a LoadTableResult, and looks for a secret's name anywhere
/// else in it (`secret` besides the built-in keys); an error means the body is not a
/// LoadTableResult, or not JSON the walker reads whole, and must not be cached.
pub fn inspect(body: &[u8], secret: &KeyPatterns) -> Result<Vended, Unreadable> {
    let members = Members::parse(body)?;
    let sections = sections(&members)?;
    let mut vended = vended_by(
        std::iter::once(&sections.config).chain(sections.storage.iter().flatten().map(|(_, c)| c)),
    );
    // A secret's name anywhere else, where no Iceberg answer puts one, counts as vended too.
    let named = count_named(body, |key| {
        CREDENTIAL_KEYS.matches(key) || secret.matches(key)
    })?;
    vended.has_secrets |= named > 0;
    Ok(vended)
}

fn vended_by<'a>(configs: impl Iterator<Item = &'a HashMap<String, Value>>) -> Vended {
    let mut vended = Vended::default();
    for config in configs {
        for (key, value) in config {
            let key = key.as_str();
            let expiry = is_expiry(key);
            if CREDENTIAL_KEYS.matches(key) {
                vended.has_secrets = true;
            } else if !expiry && !SETTINGS_KEYS.contains(&key) {
                vended.has_unknown_keys = true;
            }
            if expiry {
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

/// Removes every member `secret` matches, at any depth (`config`, each
/// `storage-credentials[].config`, the metadata, wherever), then writes `config` and
/// `storage-credentials` back once, canonically (in whatever case they were spelled), and drops
/// storage credentials left without config. The other members (the metadata above all) are
/// copied as they were written, less what was removed; a repeated member keeps its last value,
/// the only one written out. The `replaced` keys leave `config` too (the injected properties
/// take their place: a client must not read the catalog's after them). Not a JSON object the
/// walker reads whole: an error.
pub fn strip(
    body: &[u8],
    secret: &KeyPatterns,
    layout: Layout,
    replaced: &[String],
) -> Result<Stripped, Unreadable> {
    let (members, removed) = walk_members(body, secret)?;
    let Sections {
        mut config,
        had_config,
        storage,
    } = sections(&members)?;
    config.retain(|key, _| !replaced.iter().any(|r| r.eq_ignore_ascii_case(key)));
    let had_storage = storage.is_some();
    let mut kept = Vec::new();
    let mut storage_configs = Vec::new();
    for (mut credential, entry_config) in storage.into_iter().flatten() {
        if !entry_config.is_empty() {
            storage_configs.push(entry_config.clone());
            let sorted: serde_json::Map<String, Value> = entry_config.into_iter().collect();
            credential.insert(CONFIG.to_owned(), Value::Object(sorted));
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
        member(&mut out, CONFIG)?;
        // Sorted, so that equal configs always serialise to equal bytes (and equal ETags).
        let sorted: BTreeMap<&String, &Value> = config.iter().collect();
        serde_json::to_writer(&mut out, &sorted)?;
    }
    let keep_list = match layout {
        Layout::ConfigFirst => !kept.is_empty(),
        Layout::AsIs => had_storage,
    };
    if keep_list {
        member(&mut out, STORAGE_CREDENTIALS)?;
        serde_json::to_writer(&mut out, &kept)?;
    }
    for (key, raw) in members.others(&[CONFIG, STORAGE_CREDENTIALS]) {
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

/// The members of a JSON object, each less what `secret` names at any depth, and those it
/// names at the top level gone; with how many members went. Walked member by member, so that
/// only a value that loses something is written again (the metadata seldom does).
fn walk_members(body: &[u8], secret: &KeyPatterns) -> Result<(Members, usize), Unreadable> {
    let named = |key: &str| secret.matches(key);
    let mut removed = 0;
    let mut kept = Vec::new();
    for (key, raw) in Members::parse(body)?.0 {
        if named(&key) {
            // Still read whole: a text the walk refuses is refused wherever it sits.
            count_named(raw.get().as_bytes(), named)?;
            removed += 1;
            continue;
        }
        let walked = without_named(raw.get().as_bytes(), named)?;
        removed += walked.removed;
        let raw = match walked.text {
            Cow::Borrowed(_) => raw,
            Cow::Owned(text) => {
                RawValue::from_string(String::from_utf8(text).map_err(|_| WalkError::Invalid {
                    at: 0,
                    what: "a string is not UTF-8",
                })?)?
            }
        };
        kept.push((key, raw));
    }
    Ok((Members(kept), removed))
}

/// The prefixes of the storage credentials a body vends, read as loosely as `strip` reads them
/// (`storage-credentials` and `prefix` in any case); not secrets.
pub fn vended_prefixes(body: &[u8]) -> Vec<String> {
    let Ok(members) = Members::parse(body) else {
        return Vec::new();
    };
    let mut prefixes = Vec::new();
    for raw in members.named(STORAGE_CREDENTIALS) {
        let Ok(Some(list)) = serde_json::from_str::<Option<Vec<Box<RawValue>>>>(raw.get()) else {
            continue;
        };
        for credential in list {
            let Ok(fields) = Members::parse(credential.get().as_bytes()) else {
                continue;
            };
            if let Some(prefix) = fields
                .named("prefix")
                .filter_map(|p| serde_json::from_str::<String>(p.get()).ok())
                .last()
            {
                prefixes.push(prefix);
            }
        }
    }
    prefixes
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
#[path = "credentials_tests.rs"]
mod tests;
