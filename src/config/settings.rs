//! A validated configuration (`Settings`, read from a `Raw` by `validate`), how a run and a
//! reload obtain one, and how `check-config` shows it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;

use super::error::ConfigErrors;
use super::keys::{Reload, KEYS};
use super::raw::Raw;
use crate::cluster::settings::ClusterSettings;
use crate::events::settings::EventsSettings;
use crate::listener::tls::{ListenerTls, UpstreamTls};
use crate::origin::gate::Limits;
use crate::origin::UpstreamUrl;
use crate::policy::Policies;
use crate::replays::Idempotency;
use crate::secret::Secret;
use crate::telemetry::logging::LogFormat;

/// The cache's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSettings {
    pub enabled: bool,
    pub gzip: bool,
    pub max_bytes: u64,
    pub max_entry_bytes: u64,
    pub fresh_for: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

/// A validated configuration: every value checked and converted. `Debug` never shows a secret
/// (the admin token is a `Secret`, injected values live in the policies' redacted injections).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub upstream: UpstreamUrl,
    pub upstream_tls: UpstreamTls,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub tls: Option<ListenerTls>,
    pub log_format: LogFormat,
    pub log_level: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// The catalog's protection: requests at it at once, and the queue for a place.
    pub upstream_limits: Limits,
    /// Whether icecache keeps and replays final answers to requests with an `Idempotency-Key`,
    /// and for how long.
    pub idempotency: Idempotency,
    pub idempotency_key_lifetime: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
    pub workers: usize,
    pub shutdown_grace: Duration,
    pub namespace_separator: String,
    pub public_url: Option<String>,
    pub admin_token: Option<Secret>,
    pub policies: Policies,
    /// The headers that identify a caller (defaults plus `auth_headers`).
    pub identity_headers: Vec<HeaderName>,
    pub authz_ttl: Duration,
    pub cache: CacheSettings,
    /// Several replicas on Redis; None: a single-process cache.
    pub cluster: Option<ClusterSettings>,
    pub events: EventsSettings,
    /// What these settings were read from (a reload starts from it).
    pub raw: Raw,
    /// Each key's effective value as `check-config` shows it (secrets never).
    pub shown: BTreeMap<&'static str, String>,
}

/// The settings a run uses: the raw command-line layer over the file it names, validated.
pub fn load(cli: &Raw) -> Result<Settings, ConfigErrors> {
    let (raw, mut refused) = cli.clone().over_file()?;
    match Settings::try_from(&raw) {
        Ok(settings) if refused.is_empty() => Ok(settings),
        Ok(_) => Err(ConfigErrors(refused)),
        Err(invalid) => {
            refused.extend(invalid.0);
            Err(ConfigErrors(refused))
        }
    }
}

/// The settings `check-config FILE` reports: FILE, with the variables and flags over it.
pub fn check_file(file: PathBuf, cli: &Raw) -> Result<Settings, ConfigErrors> {
    let mut raw = cli.clone();
    raw.file = Some(file);
    load(&raw)
}

impl Settings {
    /// The settings a reload puts in force: `cli` over the file it names, with every key a
    /// reload does not apply (`keys::Reload::Restart`) kept at its running value; and the keys
    /// whose new values were therefore not applied.
    pub fn reloaded(&self, cli: &Raw) -> Result<(Settings, Vec<&'static str>), ConfigErrors> {
        let (mut raw, refused) = cli.clone().over_file()?;
        if !refused.is_empty() {
            return Err(ConfigErrors(refused));
        }
        Settings::try_from(&raw)?;
        let kept: Vec<&'static str> = KEYS
            .iter()
            .filter(|k| k.reload == Reload::Restart && raw.get(k.name) != self.raw.get(k.name))
            .map(|k| k.name)
            .collect();
        for name in &kept {
            raw.set(name, self.raw.get(name).cloned());
        }
        Ok((Settings::try_from(&raw)?, kept))
    }

    /// The scheme clients reach the proxy listener with.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The effective settings, one per line, for `check-config`; secrets masked.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        for key in KEYS {
            let shown = match self.shown.get(key.name) {
                Some(value) => value.clone(),
                None => key.default_text().replace('`', ""),
            };
            lines.push(format!("{} = {shown}", key.name));
        }
        lines.push(format!(
            "policy (default) = {}",
            self.policies.default.describe()
        ));
        for (prefix, policy) in &self.policies.by_prefix {
            lines.push(format!("policy (prefix {prefix}) = {}", policy.describe()));
        }
        let headers: Vec<&str> = self
            .identity_headers
            .iter()
            .map(HeaderName::as_str)
            .collect();
        lines.push(format!("identity headers = {headers:?}"));
        lines.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys;
    use crate::config::raw::with_upstream;
    use crate::config::units;

    fn declared(name: &str) -> &'static str {
        keys::key(name).and_then(|k| k.default_value()).unwrap()
    }

    #[test]
    fn upstream_alone_gives_the_declared_defaults() {
        let s = Settings::try_from(&with_upstream()).unwrap();
        assert_eq!(s.listen.to_string(), declared("listen"));
        assert_eq!(s.admin_listen.to_string(), declared("admin_listen"));
        assert_eq!(
            units::show_duration(s.cache.fresh_for),
            declared("cache.fresh_for")
        );
        assert_eq!(
            units::show_size(s.cache.max_bytes),
            declared("cache.max_bytes")
        );
        assert_eq!(
            units::show_duration(s.idle_timeout),
            declared("idle_timeout")
        );
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let raw = Raw::of(&[
            ("upstream", "http://a:1".into()),
            ("admin_token", "hunter2-token".into()),
        ])
        .unwrap();
        let settings = Settings::try_from(&raw).unwrap();
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter2-token"), "{shown}");
        assert!(!settings.describe().contains("hunter2-token"));
    }

    #[test]
    fn check_config_lists_every_key() {
        let described = Settings::try_from(&with_upstream()).unwrap().describe();
        for key in KEYS {
            assert!(
                described.contains(&format!("{} = ", key.name)),
                "{}",
                key.name
            );
        }
    }

    #[test]
    fn a_reload_keeps_every_restart_only_key_and_names_it() {
        let dir = std::env::temp_dir().join(format!("icecache-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("icecache.toml");
        std::fs::write(&file, "upstream = \"http://a:1\"\nworkers = 1\n").unwrap();
        let mut cli = Raw::default();
        cli.file = Some(file.clone());
        let running = load(&cli).unwrap();
        std::fs::write(
            &file,
            "upstream = \"http://b:2\"\nworkers = 7\n[cache]\nfresh_for = \"9s\"\nmax_bytes = \"64MiB\"\n",
        )
        .unwrap();
        let (applied, kept) = running.reloaded(&cli).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(kept, ["upstream", "workers", "cache.max_bytes"]);
        assert_eq!(applied.workers, running.workers);
        assert_eq!(applied.upstream, running.upstream);
        assert_eq!(applied.cache.max_bytes, running.cache.max_bytes);
        assert_eq!(applied.cache.fresh_for, Duration::from_secs(9));
    }

    #[test]
    fn enum_settings_are_spelled_in_kebab_case() {
        let ok = Raw::of(&[
            ("upstream", "http://a:1".into()),
            ("identity", "per-principal".into()),
            ("credentials", "strip".into()),
        ])
        .unwrap();
        assert!(Settings::try_from(&ok).is_ok());
        let wrong = Raw::of(&[
            ("upstream", "http://a:1".into()),
            ("identity", "PerPrincipal".into()),
        ])
        .unwrap();
        let error = Settings::try_from(&wrong).unwrap_err().to_string();
        assert!(error.contains("`per-principal`"), "{error}");
    }

    #[test]
    fn the_example_file_is_a_valid_configuration_naming_every_key() {
        let text = crate::config::reference::example_file();
        let (raw, refused) = Raw::from_toml(&text).unwrap();
        assert!(refused.is_empty(), "{refused:?}");
        assert!(Settings::try_from(&raw).is_ok());
        for key in KEYS {
            let short = key.name.rsplit('.').next().unwrap_or(key.name);
            assert!(text.contains(&format!("{short} =")) || text.contains(&format!("[{short}")));
        }
    }
}
