//! Who may share a cached body (identity) and what happens to vended credentials in it
//! (credentials), per catalog prefix. Built from the config and validated with it: unsafe
//! combinations never reach a running proxy.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

use crate::config::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Callers never share entries (the scope is a hash of their credentials).
    PerPrincipal,
    /// One body per representation; each caller is confirmed upstream with its own credentials.
    Revalidate,
    /// Every caller is trusted alike.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    Passthrough,
    Strip,
    Inject,
}

impl Identity {
    pub fn as_str(self) -> &'static str {
        match self {
            Identity::PerPrincipal => "per-principal",
            Identity::Revalidate => "revalidate",
            Identity::Shared => "shared",
        }
    }
}

impl Credentials {
    pub fn as_str(self) -> &'static str {
        match self {
            Credentials::Passthrough => "passthrough",
            Credentials::Strip => "strip",
            Credentials::Inject => "inject",
        }
    }

    /// Whether the catalog is asked to vend at all: under strip and inject it is not.
    pub fn forwards_delegation(self) -> bool {
        self == Credentials::Passthrough
    }
}

/// Key names with an optional trailing `*` for a prefix match.
#[derive(Debug, Clone)]
pub struct KeyPatterns(Vec<String>);

/// Secrets and their expiries that `strip` removes by default: S3, GCS, ADLS, OSS (Aliyun
/// `client.*`), JDBC, bearer tokens and RFC 8693 token types.
pub const DEFAULT_STRIP_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.session-token-expires-at-ms",
    "gcs.oauth2.token",
    "gcs.oauth2.token-expires-at",
    "adls.sas-token.*",
    "adls.sas-token-expires-at-ms.*",
    "adls.auth.shared-key.account.key",
    "client.access-key-id",
    "client.access-key-secret",
    "client.security-token",
    "client.security-token-expires-at-ms",
    "jdbc.password",
    "token",
    "urn:ietf:params:oauth:token-type:*",
];

impl KeyPatterns {
    pub fn new(patterns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        KeyPatterns(patterns.into_iter().map(Into::into).collect())
    }

    pub fn matches(&self, key: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => key == p,
        })
    }
}

impl Default for KeyPatterns {
    fn default() -> Self {
        KeyPatterns::new(DEFAULT_STRIP_KEYS.iter().copied())
    }
}

/// Where an injected property's value comes from. Secrets only from the environment or a file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectSource {
    pub value: Option<String>,
    pub env: Option<String>,
    pub file: Option<PathBuf>,
}

/// Properties merged into `config` at response time. The values never enter the cache; only
/// the fingerprint does (through the ETag).
pub struct Injection {
    keys: Vec<String>,
    /// `"k":"v","k2":"v2"`: spliced into the `config` object of a served body.
    pub fragment: Bytes,
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Injection {
    /// Reads every value now, so that a missing variable or file fails the config check.
    pub fn load(
        properties: &BTreeMap<String, InjectSource>,
        secrets: &KeyPatterns,
        key: &'static str,
    ) -> Result<Injection, ConfigError> {
        let mut members = Vec::new();
        for (name, source) in properties {
            let invalid = |message: String| ConfigError::Invalid {
                key,
                message: format!("property {name:?}: {message}"),
            };
            let value =
                match (&source.value, &source.env, &source.file) {
                    (Some(_), None, None) if secrets.matches(name) => return Err(invalid(
                        "is a secret: give it with `env = \"VAR\"` or `file = \"/path\"`, never \
                         as a value in the config file"
                            .to_owned(),
                    )),
                    (Some(value), None, None) => value.clone(),
                    (None, Some(var), None) => std::env::var(var)
                        .map_err(|_| invalid(format!("environment variable {var} is not set")))?,
                    (None, None, Some(path)) => std::fs::read_to_string(path)
                        .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
                        .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?,
                    _ => {
                        return Err(invalid(
                            "needs exactly one of value, env or file".to_owned(),
                        ))
                    }
                };
            members.push(format!(
                "{}:{}",
                serde_json::Value::String(name.clone()),
                serde_json::Value::String(value)
            ));
        }
        Ok(Injection {
            keys: properties.keys().cloned().collect(),
            fragment: Bytes::from(members.join(",")),
        })
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }
}

/// The policy of one prefix.
#[derive(Debug)]
pub struct Policy {
    pub identity: Identity,
    pub credentials: Credentials,
    pub injection: Option<Arc<Injection>>,
}

impl Policy {
    pub fn describe(&self) -> String {
        let mut text = format!(
            "identity = {}, credentials = {}",
            self.identity.as_str(),
            self.credentials.as_str()
        );
        if let Some(injection) = &self.injection {
            text.push_str(&format!(", inject = {:?}", injection.keys()));
        }
        text
    }
}

/// Policies by catalog prefix, with a default for every other prefix (and for none).
#[derive(Debug, Clone)]
pub struct Policies {
    pub default: Arc<Policy>,
    pub by_prefix: HashMap<String, Arc<Policy>>,
}

impl Policies {
    pub fn for_prefix(&self, prefix: Option<&str>) -> &Arc<Policy> {
        prefix
            .and_then(|p| self.by_prefix.get(p))
            .unwrap_or(&self.default)
    }
}

/// Settings of one policy as written; `None` inherits.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub identity: Option<String>,
    pub credentials: Option<String>,
    pub inject: Option<BTreeMap<String, InjectSource>>,
}

pub fn parse_identity(text: &str, key: &'static str) -> Result<Identity, ConfigError> {
    match text {
        "per-principal" => Ok(Identity::PerPrincipal),
        "revalidate" => Ok(Identity::Revalidate),
        "shared" => Ok(Identity::Shared),
        other => Err(ConfigError::Invalid {
            key,
            message: format!(
                "{other:?} is not an identity policy: use per-principal, revalidate or shared"
            ),
        }),
    }
}

pub fn parse_credentials(text: &str, key: &'static str) -> Result<Credentials, ConfigError> {
    match text {
        "passthrough" => Ok(Credentials::Passthrough),
        "strip" => Ok(Credentials::Strip),
        "inject" => Ok(Credentials::Inject),
        other => Err(ConfigError::Invalid {
            key,
            message: format!(
                "{other:?} is not a credentials policy: use passthrough, strip or inject"
            ),
        }),
    }
}

/// Builds one policy: `settings` over `base`, then checks that it is safe.
pub fn build(
    base: &PolicySettings,
    settings: &PolicySettings,
    secrets: &KeyPatterns,
    scope: &str,
) -> Result<Policy, ConfigError> {
    let identity = parse_identity(
        settings
            .identity
            .as_deref()
            .or(base.identity.as_deref())
            .unwrap_or("per-principal"),
        "identity",
    )?;
    let credentials = parse_credentials(
        settings
            .credentials
            .as_deref()
            .or(base.credentials.as_deref())
            .unwrap_or("passthrough"),
        "credentials",
    )?;
    if identity != Identity::PerPrincipal && credentials == Credentials::Passthrough {
        return Err(ConfigError::Invalid {
            key: "identity",
            message: format!(
                "{} with credentials = passthrough is unsafe for {scope}: a shared body would \
                 hand one caller's vended credentials to another. Use credentials = strip or \
                 inject, or identity = per-principal",
                identity.as_str()
            ),
        });
    }
    let inject = settings.inject.as_ref().or(base.inject.as_ref());
    let injection = match (credentials, inject) {
        (Credentials::Inject, Some(properties)) => {
            Some(Arc::new(Injection::load(properties, secrets, "inject")?))
        }
        (Credentials::Inject, None) => {
            return Err(ConfigError::Invalid {
                key: "inject",
                message: format!(
                    "credentials = inject for {scope} needs an [inject] table of properties"
                ),
            })
        }
        _ => None,
    };
    Ok(Policy {
        identity,
        credentials,
        injection,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(identity: &str, credentials: &str) -> PolicySettings {
        PolicySettings {
            identity: Some(identity.into()),
            credentials: Some(credentials.into()),
            inject: None,
        }
    }

    #[test]
    fn shared_bodies_with_passed_through_credentials_are_refused() {
        for identity in ["revalidate", "shared"] {
            let err = build(
                &PolicySettings::default(),
                &settings(identity, "passthrough"),
                &KeyPatterns::default(),
                "the default policy",
            )
            .unwrap_err();
            assert!(err.to_string().contains("unsafe"), "{err}");
        }
    }

    #[test]
    fn a_prefix_inherits_what_it_does_not_set() {
        let base = settings("revalidate", "strip");
        let policy = build(
            &base,
            &PolicySettings::default(),
            &KeyPatterns::default(),
            "prefix p",
        )
        .unwrap();
        assert_eq!(policy.identity, Identity::Revalidate);
        assert_eq!(policy.credentials, Credentials::Strip);
    }

    #[test]
    fn secret_injected_values_must_come_from_env_or_file() {
        let mut properties = BTreeMap::new();
        properties.insert(
            "s3.secret-access-key".to_owned(),
            InjectSource {
                value: Some("plain".into()),
                env: None,
                file: None,
            },
        );
        let err = Injection::load(&properties, &KeyPatterns::default(), "inject").unwrap_err();
        assert!(err.to_string().contains("env"), "{err}");
    }

    #[test]
    fn injected_values_are_read_from_files_and_written_as_json_members() {
        let path = std::env::temp_dir().join(format!("icecache-inject-{}", std::process::id()));
        std::fs::write(&path, "from\"file\n").unwrap();
        let mut properties = BTreeMap::new();
        properties.insert(
            "s3.secret-access-key".to_owned(),
            InjectSource {
                value: None,
                env: None,
                file: Some(path.clone()),
            },
        );
        properties.insert(
            "client.region".to_owned(),
            InjectSource {
                value: Some("eu-west-1".into()),
                env: None,
                file: None,
            },
        );
        let injection = Injection::load(&properties, &KeyPatterns::default(), "inject").unwrap();
        let _ = std::fs::remove_file(path);
        assert_eq!(
            &injection.fragment[..],
            br#""client.region":"eu-west-1","s3.secret-access-key":"from\"file""#
        );
        assert!(!format!("{injection:?}").contains("from"));
    }

    #[test]
    fn patterns_match_exact_keys_and_prefixes() {
        let p = KeyPatterns::default();
        assert!(p.matches("s3.secret-access-key"));
        assert!(p.matches("adls.sas-token.account1"));
        assert!(p.matches("urn:ietf:params:oauth:token-type:jwt"));
        assert!(!p.matches("s3.endpoint"));
        assert!(!p.matches("client.region"));
    }
}
