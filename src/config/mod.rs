//! Configuration: flags and `ICECACHE_*` variables (`cli`) over a TOML file (`file`), merged
//! into one raw layer, then checked and converted as a whole (`validate`) into the typed
//! `Settings` below, before any port is bound. Every default is a named constant here; the
//! README's table is checked against them.

mod cli;
mod file;
pub mod units;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;
use thiserror::Error;

pub use cli::{parse, Cli, Command, Parsed};
pub use file::{RawCache, RawCluster, RawEvents, RawSettings};
pub use validate::ConfigErrors;

use crate::cluster::settings::{self as cluster, ClusterSettings};
use crate::events::settings::{self as events, EventsSettings};
use crate::listener::tls::{ListenerTls, UpstreamTls};
use crate::ops::logging::LogFormat;
use crate::origin::UpstreamUrl;
use crate::policy::Policies;
use units::{show_duration, show_size};

/// Exit code for a configuration that does not validate (BSD `EX_USAGE`).
pub const EXIT_CONFIG: u8 = 64;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8181";
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9181";
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Text;
pub const DEFAULT_LOG_LEVEL: &str = "info";
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 64 << 10;
pub const MIN_MAX_HEADER_BYTES: u64 = 8 << 10;
pub const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
pub const DEFAULT_NAMESPACE_SEPARATOR: &str = "%1F";
pub const DEFAULT_AUTHZ_TTL: Duration = Duration::from_secs(30);
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_CACHE_ENABLED: bool = true;
pub const DEFAULT_CACHE_GZIP: bool = true;
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 256 << 20;
pub const DEFAULT_CACHE_MAX_ENTRY_BYTES: u64 = 32 << 20;
pub const DEFAULT_FRESH_FOR: Duration = Duration::from_secs(5);
pub const DEFAULT_STALE_WHILE_REVALIDATE: Duration = Duration::ZERO;
pub const DEFAULT_STALE_IF_ERROR: Duration = Duration::from_secs(60);

/// The defaults as the README's configuration table writes them, by key.
pub fn documented_defaults() -> Vec<(&'static str, String)> {
    vec![
        ("listen", DEFAULT_LISTEN.to_owned()),
        ("admin_listen", DEFAULT_ADMIN_LISTEN.to_owned()),
        ("log_format", DEFAULT_LOG_FORMAT.as_str().to_owned()),
        ("log_level", DEFAULT_LOG_LEVEL.to_owned()),
        ("connect_timeout", show_duration(DEFAULT_CONNECT_TIMEOUT)),
        ("request_timeout", show_duration(DEFAULT_REQUEST_TIMEOUT)),
        (
            "header_read_timeout",
            show_duration(DEFAULT_HEADER_READ_TIMEOUT),
        ),
        ("idle_timeout", show_duration(DEFAULT_IDLE_TIMEOUT)),
        ("max_header_bytes", show_size(DEFAULT_MAX_HEADER_BYTES)),
        ("max_connections", DEFAULT_MAX_CONNECTIONS.to_string()),
        ("shutdown_grace", show_duration(DEFAULT_SHUTDOWN_GRACE)),
        (
            "namespace_separator",
            DEFAULT_NAMESPACE_SEPARATOR.to_owned(),
        ),
        ("identity", "per-principal".to_owned()),
        ("credentials", "passthrough".to_owned()),
        ("authz_ttl", show_duration(DEFAULT_AUTHZ_TTL)),
        (
            "tls_reload_interval",
            show_duration(DEFAULT_TLS_RELOAD_INTERVAL),
        ),
        ("cache.enabled", DEFAULT_CACHE_ENABLED.to_string()),
        ("cache.gzip", DEFAULT_CACHE_GZIP.to_string()),
        ("cache.max_bytes", show_size(DEFAULT_CACHE_MAX_BYTES)),
        (
            "cache.max_entry_bytes",
            show_size(DEFAULT_CACHE_MAX_ENTRY_BYTES),
        ),
        ("cache.fresh_for", show_duration(DEFAULT_FRESH_FOR)),
        (
            "cache.stale_while_revalidate",
            show_duration(DEFAULT_STALE_WHILE_REVALIDATE),
        ),
        (
            "cache.stale_if_error",
            show_duration(DEFAULT_STALE_IF_ERROR),
        ),
        (
            "cluster.consistency",
            cluster::DEFAULT_CONSISTENCY.as_str().to_owned(),
        ),
        (
            "cluster.on_redis_down",
            cluster::DEFAULT_ON_REDIS_DOWN.as_str().to_owned(),
        ),
        (
            "cluster.max_shared_bytes",
            show_size(cluster::DEFAULT_MAX_SHARED_BYTES),
        ),
        ("cluster.lease", show_duration(cluster::DEFAULT_LEASE)),
        (
            "cluster.barrier_interval",
            show_duration(cluster::DEFAULT_BARRIER_INTERVAL),
        ),
        (
            "cluster.member_timeout",
            show_duration(cluster::DEFAULT_MEMBER_TIMEOUT),
        ),
        (
            "cluster.redis_timeout",
            show_duration(cluster::DEFAULT_REDIS_TIMEOUT),
        ),
        ("cluster.key_prefix", cluster::DEFAULT_KEY_PREFIX.to_owned()),
        ("events.fresh_for", "cache.fresh_for".to_owned()),
        (
            "events.nats_consumer",
            format!("{}-<hostname>", events::DEFAULT_NATS_CONSUMER_STEM),
        ),
        (
            "events.prefix_template",
            events::DEFAULT_PREFIX_TEMPLATE.to_owned(),
        ),
    ]
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML for icecache{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

/// A value that must never be shown: `Debug` writes `(redacted)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(redacted)")
    }
}

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
}

/// The settings a run uses: the raw command-line layer over the file it names, validated.
pub fn load(cli: &RawSettings) -> Result<Settings, ConfigErrors> {
    let (raw, mut refused) = cli.clone().over_file()?;
    match Settings::try_from(raw) {
        Ok(settings) if refused.is_empty() => Ok(settings),
        Ok(_) => Err(ConfigErrors(refused)),
        Err(invalid) => {
            refused.extend(invalid.0);
            Err(ConfigErrors(refused))
        }
    }
}

/// The settings `check-config FILE` reports: FILE, with the variables and flags over it.
pub fn check_file(file: PathBuf, cli: &RawSettings) -> Result<Settings, ConfigErrors> {
    let raw = RawSettings {
        config: Some(file),
        ..cli.clone()
    };
    load(&raw)
}

impl Settings {
    /// `new` with what only a restart can change kept at `self`'s values, and the keys whose
    /// new values were therefore not applied.
    pub fn reloaded(&self, mut new: Settings) -> (Settings, Vec<&'static str>) {
        let mut kept = Vec::new();
        macro_rules! keep {
            ($($($field:ident).+ => $key:literal),+ $(,)?) => {$(
                if new.$($field).+ != self.$($field).+ {
                    kept.push($key);
                    new.$($field).+ = self.$($field).+.clone();
                }
            )+};
        }
        keep! {
            upstream => "upstream",
            upstream_tls => "upstream_ca/upstream_client_cert",
            listen => "listen",
            admin_listen => "admin_listen",
            workers => "workers",
            tls => "tls_cert/tls_key/tls_client_ca",
            log_format => "log_format",
            connect_timeout => "connect_timeout",
            request_timeout => "request_timeout",
            header_read_timeout => "header_read_timeout",
            idle_timeout => "idle_timeout",
            max_header_bytes => "max_header_bytes",
            max_connections => "max_connections",
            shutdown_grace => "shutdown_grace",
            namespace_separator => "namespace_separator",
            identity_headers => "auth_headers",
            cache.enabled => "cache.enabled",
            cache.max_bytes => "cache.max_bytes",
            cluster => "cluster.*",
            events.seaweedfs_token => "events.seaweedfs_token_file",
            events.nats => "events.nats_*/events.prefix_template",
        }
        (new, kept)
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
        let c = &self.cache;
        let mut lines = vec![
            format!("upstream = {}", self.upstream),
            format!("listen = {}", self.listen),
            format!("admin_listen = {}", self.admin_listen),
            format!("log_format = {}", self.log_format.as_str()),
            format!("log_level = {}", self.log_level),
            format!("connect_timeout = {}", show_duration(self.connect_timeout)),
            format!("request_timeout = {}", show_duration(self.request_timeout)),
            format!(
                "header_read_timeout = {}",
                show_duration(self.header_read_timeout)
            ),
            format!("idle_timeout = {}", show_duration(self.idle_timeout)),
            format!("max_header_bytes = {}", self.max_header_bytes),
            format!("max_connections = {}", self.max_connections),
            format!("workers = {}", self.workers),
            format!("shutdown_grace = {}", show_duration(self.shutdown_grace)),
            format!("namespace_separator = {}", self.namespace_separator),
            format!(
                "admin_token = {}",
                if self.admin_token.is_some() {
                    "(set)"
                } else {
                    "(none)"
                }
            ),
            format!(
                "public_url = {}",
                self.public_url.as_deref().unwrap_or("(from each request)")
            ),
            format!("cache.enabled = {}", c.enabled),
            format!("cache.gzip = {}", c.gzip),
            format!("cache.max_bytes = {}", c.max_bytes),
            format!("cache.max_entry_bytes = {}", c.max_entry_bytes),
            format!("cache.fresh_for = {}", show_duration(c.fresh_for)),
            format!(
                "cache.stale_while_revalidate = {}",
                show_duration(c.stale_while_revalidate)
            ),
            format!("cache.stale_if_error = {}", show_duration(c.stale_if_error)),
            format!("policy (default) = {}", self.policies.default.describe()),
        ];
        for (prefix, policy) in &self.policies.by_prefix {
            lines.push(format!("policy (prefix {prefix}) = {}", policy.describe()));
        }
        let headers: Vec<&str> = self
            .identity_headers
            .iter()
            .map(HeaderName::as_str)
            .collect();
        lines.push(format!("identity headers = {headers:?}"));
        lines.push(format!("authz_ttl = {}", show_duration(self.authz_ttl)));
        match &self.cluster {
            None => lines.push("cluster = (single process)".to_owned()),
            Some(c) => {
                lines.push(format!("cluster.redis_url = {}", c.redis_url.shown()));
                lines.push("cluster.key_file = (read)".to_owned());
                lines.push(format!("cluster.consistency = {}", c.consistency.as_str()));
                lines.push(format!(
                    "cluster.on_redis_down = {}",
                    c.on_redis_down.as_str()
                ));
                lines.push(format!("cluster.max_shared_bytes = {}", c.max_shared_bytes));
                lines.push(format!("cluster.lease = {}", show_duration(c.lease)));
                lines.push(format!(
                    "cluster.barrier_interval = {}",
                    show_duration(c.barrier_interval)
                ));
                lines.push(format!(
                    "cluster.member_timeout = {}",
                    show_duration(c.member_timeout)
                ));
                lines.push(format!(
                    "cluster.redis_timeout = {}",
                    show_duration(c.redis_timeout)
                ));
                lines.push(format!("cluster.key_prefix = {}", c.key_prefix));
            }
        }
        lines.extend(self.describe_events());
        lines.join("\n") + "\n"
    }
}

impl Settings {
    fn describe_events(&self) -> Vec<String> {
        let e = &self.events;
        let mut lines = vec![format!(
            "events.fresh_for = {}",
            e.fresh_for
                .map_or("(cache.fresh_for)".to_owned(), show_duration)
        )];
        lines.push(format!(
            "events.seaweedfs = {}",
            if e.seaweedfs_token.is_some() {
                "POST /events/seaweedfs on the admin listener (token read)"
            } else {
                "(off)"
            }
        ));
        match &e.nats {
            None => lines.push("events.nats = (off)".to_owned()),
            Some(n) => {
                lines.push(format!("events.nats_url = {}", units::shown_url(&n.url)));
                lines.push(format!("events.nats_subject = {}", n.subject));
                lines.push(format!(
                    "events.nats_stream = {}",
                    n.stream.as_deref().unwrap_or("(plain subscription)")
                ));
                lines.push(format!("events.nats_consumer = {}", n.consumer));
                lines.push(format!("events.prefix_template = {}", n.prefix_template));
            }
        }
        lines
    }
}

/// Raw settings naming nothing but an upstream: what `icecache --upstream URL` gives.
#[cfg(test)]
pub(crate) fn with_upstream() -> RawSettings {
    RawSettings {
        upstream: Some("http://127.0.0.1:8181".into()),
        ..RawSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_alone_gives_the_documented_defaults() {
        let s = Settings::try_from(with_upstream()).unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.admin_listen.to_string(), DEFAULT_ADMIN_LISTEN);
        assert_eq!(s.cache.fresh_for, DEFAULT_FRESH_FOR);
        assert_eq!(s.cache.max_bytes, DEFAULT_CACHE_MAX_BYTES);
        assert_eq!(s.idle_timeout, DEFAULT_IDLE_TIMEOUT);
    }

    #[test]
    fn debug_never_shows_the_admin_token() {
        let raw = RawSettings {
            admin_token: Some("hunter2-token".into()),
            ..with_upstream()
        };
        let settings = Settings::try_from(raw).unwrap();
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter2-token"), "{shown}");
        assert!(!settings.describe().contains("hunter2-token"));
    }

    #[test]
    fn a_reload_keeps_restart_only_settings_and_names_them() {
        let running = Settings::try_from(with_upstream()).unwrap();
        let raw = RawSettings {
            workers: Some(7),
            cache: RawCache {
                fresh_for: Some("9s".into()),
                ..RawCache::default()
            },
            ..with_upstream()
        };
        let (applied, kept) = running.reloaded(Settings::try_from(raw).unwrap());
        assert_eq!(kept, ["workers"]);
        assert_eq!(applied.workers, running.workers);
        assert_eq!(applied.cache.fresh_for, Duration::from_secs(9));
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: RawSettings =
            toml::from_str("upstream = \"http://a:1\"\n[cache]\nfresh_for = \"9s\"\n").unwrap();
        let flags = RawSettings {
            upstream: Some("http://b:2".into()),
            ..RawSettings::default()
        };
        let s = Settings::try_from(file.overlay(flags)).unwrap();
        assert_eq!(s.upstream.authority.as_str(), "b:2");
        assert_eq!(s.cache.fresh_for, Duration::from_secs(9));
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let err = toml::from_str::<RawSettings>("upstrem = \"http://a:1\"").unwrap_err();
        assert!(err.message().contains("upstrem"), "{}", err.message());
    }

    #[test]
    fn every_setting_a_file_gets_wrong_is_reported_at_once() {
        let path = std::env::temp_dir().join(format!("icecache-bad-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "upstream = \"http://a:1\"\nlog_format = \"xml\"\nworkers = \"many\"\n\
             cache_max = 1\n[cache]\ngzipp = true\nfresh_for = 5\n",
        )
        .unwrap();
        let (_, refused) = RawSettings::from_file(&path).unwrap();
        let errors = ConfigErrors(refused).to_string();
        let _ = std::fs::remove_file(&path);
        for key in [
            "`log_format`",
            "`workers`",
            "`cache_max`",
            "`cache.gzipp`",
            "`cache.fresh_for`",
        ] {
            assert!(errors.contains(key), "{key} missing from: {errors}");
        }
    }

    #[test]
    fn enum_settings_are_spelled_in_kebab_case() {
        let raw: RawSettings = toml::from_str(
            "upstream = \"http://a:1\"\nidentity = \"per-principal\"\ncredentials = \"strip\"\n",
        )
        .unwrap();
        assert!(Settings::try_from(raw).is_ok());
        assert!(toml::from_str::<RawSettings>("identity = \"PerPrincipal\"").is_err());
    }
}
