//! Who may share a cached body (identity) and what happens to vended credentials in it
//! (credentials), per catalog prefix; and the one stage every LoadTableResult-shaped answer
//! passes before a client sees it (`stage`). Policies are built and checked with the rest of
//! the configuration: an unsafe combination never reaches a running proxy.

pub mod credentials;
pub mod headers;
pub mod identity;
pub mod injection;
mod patterns;
pub mod stage;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;

pub use injection::{InjectSource, Injection};
pub use patterns::{KeyPatterns, DEFAULT_STRIP_KEYS, STRUCTURAL_NAMES};

/// Who may be served a body made for another caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Identity {
    /// Callers never share entries (the scope is a hash of their credentials).
    PerPrincipal,
    /// One body per representation; each caller is confirmed upstream with its own credentials.
    Revalidate,
    /// Every caller is trusted alike.
    Shared,
}

impl Identity {
    pub fn as_str(self) -> &'static str {
        match self {
            Identity::PerPrincipal => "per-principal",
            Identity::Revalidate => "revalidate",
            Identity::Shared => "shared",
        }
    }

    /// Whether one entry serves callers with different credentials.
    pub fn shares_entries(self) -> bool {
        self != Identity::PerPrincipal
    }
}

/// What happens to credentials the catalog vends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Credentials {
    Passthrough,
    Strip,
    Inject,
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

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error(
        "{identity} with credentials = passthrough is unsafe for {scope}: a shared body would \
         hand one caller's vended credentials to another. Use credentials = strip or inject, \
         or identity = per-principal"
    )]
    Unsafe {
        scope: String,
        identity: &'static str,
    },
    #[error("credentials = inject for {scope} needs an [inject] table of properties")]
    NothingToInject { scope: String },
    #[error(transparent)]
    Injection(#[from] injection::InjectionError),
}

impl PolicyError {
    /// The setting the error is about, within its policy's scope.
    pub fn key(&self) -> &'static str {
        match self {
            PolicyError::Unsafe { .. } => "identity",
            PolicyError::NothingToInject { .. } | PolicyError::Injection(_) => "inject",
        }
    }
}

/// The policy of one prefix, as in force. `generation` names the policy's content: entries
/// filled under one generation are never served under another, so a reload that changes what
/// a body may hold (identity, credentials, strip keys, injected values) takes effect at once.
#[derive(Debug)]
pub struct Policy {
    pub identity: Identity,
    pub credentials: Credentials,
    pub strip: Arc<KeyPatterns>,
    pub injection: Option<Arc<Injection>>,
    pub generation: u64,
    /// Whether a hit's head may carry icecache's marks and `ETag` packed into one field
    /// (`wire::packed`): only when no strip pattern names one of them, since the answer's
    /// fields are stripped by name.
    pub packs_marks: bool,
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.generation == other.generation
    }
}

impl Policy {
    fn new(
        identity: Identity,
        credentials: Credentials,
        strip: Arc<KeyPatterns>,
        injection: Option<Arc<Injection>>,
    ) -> Policy {
        let mut hasher = blake3::Hasher::new();
        hasher.update(identity.as_str().as_bytes());
        hasher.update(&[0]);
        hasher.update(credentials.as_str().as_bytes());
        for pattern in strip.patterns() {
            hasher.update(&[0]);
            hasher.update(pattern.as_bytes());
        }
        if let Some(injection) = &injection {
            hasher.update(&[1]);
            hasher.update(&injection.fragment);
        }
        let mut generation = [0u8; 8];
        generation.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
        let packs_marks = !crate::wire::packed::PACKED_NAMES
            .iter()
            .any(|name| headers::is_secret(name, &strip));
        Policy {
            identity,
            credentials,
            strip,
            injection,
            generation: u64::from_le_bytes(generation),
            packs_marks,
        }
    }

    /// One line for `check-config`: no injected value, only the keys.
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
#[derive(Debug, Clone, PartialEq)]
pub struct Policies {
    pub default: Arc<Policy>,
    pub by_prefix: BTreeMap<String, Arc<Policy>>,
}

impl Policies {
    pub fn for_prefix(&self, prefix: Option<&str>) -> &Arc<Policy> {
        prefix
            .and_then(|p| self.by_prefix.get(p))
            .unwrap_or(&self.default)
    }
}

/// The settings of one policy as written; `None` inherits.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub identity: Option<Identity>,
    pub credentials: Option<Credentials>,
    pub inject: Option<BTreeMap<String, InjectSource>>,
}

/// Builds every policy: the top level, then each `[prefixes.NAME]` over it. All errors are
/// returned, each with the key it is about (`identity`, `inject`, `prefixes.NAME.inject`…).
pub fn build_all(
    base: &PolicySettings,
    prefixes: &BTreeMap<String, PolicySettings>,
    strip: &Arc<KeyPatterns>,
) -> Result<Policies, Vec<(String, PolicyError)>> {
    let mut errors = Vec::new();
    let default = build(
        base,
        &PolicySettings::default(),
        strip,
        "the default policy",
    )
    .map_err(|e| errors.extend(e.into_iter().map(|e| (e.key().to_owned(), e))))
    .ok();
    let mut by_prefix = BTreeMap::new();
    for (prefix, settings) in prefixes {
        match build(base, settings, strip, &format!("prefix {prefix:?}")) {
            Ok(policy) => {
                by_prefix.insert(prefix.clone(), Arc::new(policy));
            }
            Err(e) => errors.extend(
                e.into_iter()
                    .map(|e| (format!("prefixes.{prefix}.{}", e.key()), e)),
            ),
        }
    }
    match default {
        Some(default) if errors.is_empty() => Ok(Policies {
            default: Arc::new(default),
            by_prefix,
        }),
        _ => Err(errors),
    }
}

/// Builds one policy: `settings` over `base`, then checks that it is safe.
pub fn build(
    base: &PolicySettings,
    settings: &PolicySettings,
    strip: &Arc<KeyPatterns>,
    scope: &str,
) -> Result<Policy, Vec<PolicyError>> {
    let identity = settings
        .identity
        .or(base.identity)
        .unwrap_or(Identity::PerPrincipal);
    let credentials = settings
        .credentials
        .or(base.credentials)
        .unwrap_or(Credentials::Passthrough);
    if identity.shares_entries() && credentials == Credentials::Passthrough {
        return Err(vec![PolicyError::Unsafe {
            scope: scope.to_owned(),
            identity: identity.as_str(),
        }]);
    }
    let injection = match (
        credentials,
        settings.inject.as_ref().or(base.inject.as_ref()),
    ) {
        (Credentials::Inject, Some(properties)) => Some(Arc::new(
            Injection::load(properties, strip)
                .map_err(|e| e.into_iter().map(PolicyError::from).collect::<Vec<_>>())?,
        )),
        (Credentials::Inject, None) => {
            return Err(vec![PolicyError::NothingToInject {
                scope: scope.to_owned(),
            }])
        }
        _ => None,
    };
    Ok(Policy::new(identity, credentials, strip.clone(), injection))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(identity: Identity, credentials: Credentials) -> PolicySettings {
        PolicySettings {
            identity: Some(identity),
            credentials: Some(credentials),
            inject: None,
        }
    }

    fn strip() -> Arc<KeyPatterns> {
        Arc::new(KeyPatterns::default())
    }

    #[test]
    fn shared_bodies_with_passed_through_credentials_are_refused() {
        for identity in [Identity::Revalidate, Identity::Shared] {
            let err = build(
                &PolicySettings::default(),
                &settings(identity, Credentials::Passthrough),
                &strip(),
                "the default policy",
            )
            .unwrap_err();
            assert!(err[0].to_string().contains("unsafe"), "{err:?}");
        }
    }

    #[test]
    fn a_prefix_inherits_what_it_does_not_set() {
        let base = settings(Identity::Revalidate, Credentials::Strip);
        let policy = build(&base, &PolicySettings::default(), &strip(), "prefix p").unwrap();
        assert_eq!(policy.identity, Identity::Revalidate);
        assert_eq!(policy.credentials, Credentials::Strip);
    }

    #[test]
    fn every_unsafe_prefix_is_reported_at_once() {
        let unsafe_ = settings(Identity::Shared, Credentials::Passthrough);
        let prefixes: BTreeMap<String, PolicySettings> = [
            ("a".to_owned(), unsafe_.clone()),
            ("b".to_owned(), unsafe_.clone()),
        ]
        .into();
        let errors = build_all(&PolicySettings::default(), &prefixes, &strip()).unwrap_err();
        let scopes: Vec<&str> = errors.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(scopes, ["prefixes.a.identity", "prefixes.b.identity"]);
    }

    #[test]
    fn the_generation_follows_the_content_of_a_policy() {
        let a = build(
            &settings(Identity::Shared, Credentials::Strip),
            &PolicySettings::default(),
            &strip(),
            "x",
        )
        .unwrap();
        let same = build(
            &settings(Identity::Shared, Credentials::Strip),
            &PolicySettings::default(),
            &strip(),
            "y",
        )
        .unwrap();
        let other = build(
            &settings(Identity::Revalidate, Credentials::Strip),
            &PolicySettings::default(),
            &strip(),
            "x",
        )
        .unwrap();
        let fewer_keys = build(
            &settings(Identity::Shared, Credentials::Strip),
            &PolicySettings::default(),
            &Arc::new(KeyPatterns::new(["token"])),
            "x",
        )
        .unwrap();
        assert_eq!(a.generation, same.generation);
        assert_ne!(a.generation, other.generation);
        assert_ne!(a.generation, fewer_keys.generation);
    }

    #[test]
    fn marks_are_packed_only_under_strip_keys_that_name_none_of_them() {
        let packs = |strip: Arc<KeyPatterns>| {
            build(
                &settings(Identity::Shared, Credentials::Strip),
                &PolicySettings::default(),
                &strip,
                "x",
            )
            .unwrap()
            .packs_marks
        };
        let with = |patterns: &[&str]| packs(Arc::new(KeyPatterns::new(patterns.iter().copied())));
        assert!(packs(strip()), "the default strip keys name a mark");
        assert!(with(&[]));
        for names_one in [
            &["x-cache"][..],
            &["ETag"],
            &["*status"],
            &["x-*"],
            &["*tag"],
        ] {
            assert!(!with(names_one), "{names_one:?}");
        }
    }
}
