//! Configuration: a TOML file, `ICECACHE_*` environment variables and flags, merged in that
//! order (a flag wins), then validated as a whole before any port is bound.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use http::uri::{Authority, Scheme};
use http::HeaderName;
use http::Uri;
use serde::Deserialize;
use thiserror::Error;

use crate::policy::{self, KeyPatterns, Policies, PolicySettings};
use crate::tls::{ListenerTls, UpstreamTls};

/// Exit code for a configuration that does not validate (BSD `EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("config file {path} is not valid TOML for icecache: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "icecache",
    version,
    about = "A caching reverse proxy for Apache Iceberg REST catalogs",
    long_about = "icecache sits in front of an Iceberg REST catalog, answers repeated loadTable \
                  calls from memory (with local 304s for If-None-Match), invalidates what writes \
                  touch, and exports Prometheus metrics on its admin port.\n\n\
                  Settings come from --config FILE, then ICECACHE_* environment variables, then \
                  flags (a flag wins). `icecache --upstream URL` alone runs with safe defaults."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file (with ICECACHE_* variables applied) and print the effective
    /// settings; exits 64 when it is not valid.
    CheckConfig {
        /// The TOML config file to check.
        file: PathBuf,
    },
    /// GET a URL (e.g. http://127.0.0.1:9181/healthz) and exit 0 on a 2xx answer within 2 s,
    /// 1 otherwise: a health check for images without curl.
    Probe {
        /// The URL to get.
        url: String,
    },
}

/// Every setting, as it may come from a flag or an environment variable. The config file has
/// the same keys (the `cache_*` flags live in its `[cache]` table).
#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// TOML config file.
    #[arg(long, env = "ICECACHE_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Base URL of the Iceberg REST catalog, optionally with a base path
    /// (http://gravitino:9001/iceberg). Required. [key: upstream]
    #[arg(long, env = "ICECACHE_UPSTREAM")]
    pub upstream: Option<String>,

    /// Address of the Iceberg REST listener. [default: 127.0.0.1:8181] [key: listen]
    #[arg(long, env = "ICECACHE_LISTEN")]
    pub listen: Option<String>,

    /// Address of the admin listener (/healthz, /readyz, /metrics, /cache/*).
    /// [default: 127.0.0.1:9181] [key: admin_listen]
    #[arg(long, env = "ICECACHE_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,

    /// Log line format: text or json. [default: text] [key: log_format]
    #[arg(long, env = "ICECACHE_LOG_FORMAT")]
    pub log_format: Option<String>,

    /// Log filter in tracing's EnvFilter syntax. [default: info] [key: log_level]
    #[arg(long, env = "ICECACHE_LOG_LEVEL")]
    pub log_level: Option<String>,

    /// Time allowed to open a TCP connection upstream. [default: 2s] [key: connect_timeout]
    #[arg(long, env = "ICECACHE_CONNECT_TIMEOUT")]
    pub connect_timeout: Option<String>,

    /// Time allowed for the upstream to answer with a response head; past it the client gets
    /// 504. [default: 30s] [key: request_timeout]
    #[arg(long, env = "ICECACHE_REQUEST_TIMEOUT")]
    pub request_timeout: Option<String>,

    /// Time a client has to send a whole request head; slower clients are dropped.
    /// [default: 10s] [key: header_read_timeout]
    #[arg(long, env = "ICECACHE_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<String>,

    /// Largest request head accepted (at least 8KiB); larger ones get 431.
    /// [default: 64KiB] [key: max_header_bytes]
    #[arg(long, env = "ICECACHE_MAX_HEADER_BYTES")]
    pub max_header_bytes: Option<SizeSetting>,

    /// Most client connections open at once; further ones wait to be accepted.
    /// [default: 10000] [key: max_connections]
    #[arg(long, env = "ICECACHE_MAX_CONNECTIONS")]
    pub max_connections: Option<u64>,

    /// Proxy worker threads, each with its own runtime and listener (SO_REUSEPORT).
    /// [default: the number of CPUs] [key: workers]
    #[arg(long, env = "ICECACHE_WORKERS")]
    pub workers: Option<u64>,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    /// [default: 30s] [key: shutdown_grace]
    #[arg(long, env = "ICECACHE_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<String>,

    /// Namespace separator the catalog advertises, URL-encoded; %1F is always accepted too.
    /// [default: %1F] [key: namespace_separator]
    #[arg(long, env = "ICECACHE_NAMESPACE_SEPARATOR")]
    pub namespace_separator: Option<String>,

    /// The URL clients reach icecache at, written into the `uri` of /v1/config answers
    /// (unset: taken from each request's X-Forwarded-Proto/-Host or Host). [key: public_url]
    #[arg(long, env = "ICECACHE_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Bearer token required by POST /cache/purge on the admin port (unset: no token).
    /// [key: admin_token]
    #[arg(long, env = "ICECACHE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Who may share a cached body: per-principal (callers never share), revalidate (one body,
    /// each caller confirmed upstream with its own credentials) or shared (all callers trusted).
    /// [default: per-principal] [key: identity; per prefix: prefixes.NAME.identity]
    #[arg(long, env = "ICECACHE_IDENTITY")]
    pub identity: Option<String>,

    /// What happens to vended credentials in loadTable bodies: passthrough, strip or inject.
    /// [default: passthrough] [key: credentials; per prefix: prefixes.NAME.credentials]
    #[arg(long, env = "ICECACHE_CREDENTIALS")]
    pub credentials: Option<String>,

    /// Headers besides Authorization that identify a caller (comma-separated), e.g. x-api-key.
    /// [key: auth_headers]
    #[arg(long, env = "ICECACHE_AUTH_HEADERS", value_delimiter = ',')]
    pub auth_headers: Option<Vec<String>>,

    /// Under identity = revalidate, how long a caller's confirmation for an entry holds.
    /// [default: 30s] [key: authz_ttl]
    #[arg(long, env = "ICECACHE_AUTHZ_TTL")]
    pub authz_ttl: Option<String>,

    /// Keys strip and inject remove (comma-separated; a trailing * matches a prefix).
    /// [default: the S3, GCS, ADLS, OSS, JDBC and token keys] [key: strip_keys]
    #[arg(long, env = "ICECACHE_STRIP_KEYS", value_delimiter = ',')]
    pub strip_keys: Option<Vec<String>>,

    /// Properties merged into `config` under credentials = inject (config file only):
    /// `[inject] "s3.access-key-id" = { env = "VAR" }`, `{ file = "/path" }` or, for
    /// non-secrets, `{ value = "..." }`.
    #[arg(skip)]
    pub inject: Option<std::collections::BTreeMap<String, crate::policy::InjectSource>>,

    /// Per-prefix identity, credentials and inject (config file only: `[prefixes.NAME]`).
    #[arg(skip)]
    pub prefixes: Option<std::collections::BTreeMap<String, crate::policy::PolicySettings>>,

    /// PEM certificate chain for HTTPS on the proxy listener (with --tls-key).
    /// [key: tls_cert]
    #[arg(long, env = "ICECACHE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert. [key: tls_key]
    #[arg(long, env = "ICECACHE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA bundle: clients must present a certificate it signed (mTLS). [key: tls_client_ca]
    #[arg(long, env = "ICECACHE_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,

    /// How often the certificate files are checked for changes (rotation without restart).
    /// [default: 5s] [key: tls_reload_interval]
    #[arg(long, env = "ICECACHE_TLS_RELOAD_INTERVAL")]
    pub tls_reload_interval: Option<String>,

    /// PEM CA bundle to verify an https:// upstream with, instead of the platform's roots.
    /// [key: upstream_ca]
    #[arg(long, env = "ICECACHE_UPSTREAM_CA")]
    pub upstream_ca: Option<PathBuf>,

    /// PEM client certificate to present to an https:// upstream (with
    /// --upstream-client-key). [key: upstream_client_cert]
    #[arg(long, env = "ICECACHE_UPSTREAM_CLIENT_CERT")]
    pub upstream_client_cert: Option<PathBuf>,

    /// PEM private key for --upstream-client-cert. [key: upstream_client_key]
    #[arg(long, env = "ICECACHE_UPSTREAM_CLIENT_KEY")]
    pub upstream_client_key: Option<PathBuf>,

    /// Cache settings; the config file's `[cache]` table.
    #[command(flatten)]
    #[serde(default)]
    pub cache: CacheSettings,
}

#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// Cache loadTable responses (false: every request passes through).
    /// [default: true] [key: cache.enabled]
    #[arg(long = "cache-enabled", env = "ICECACHE_CACHE_ENABLED")]
    pub enabled: Option<bool>,

    /// Memory bound of the cache, bodies plus headers. [default: 256MiB] [key: cache.max_bytes]
    #[arg(long = "cache-max-bytes", env = "ICECACHE_CACHE_MAX_BYTES")]
    pub max_bytes: Option<SizeSetting>,

    /// Largest response cached; larger ones stream through uncached.
    /// [default: 32MiB] [key: cache.max_entry_bytes]
    #[arg(long = "cache-max-entry-bytes", env = "ICECACHE_CACHE_MAX_ENTRY_BYTES")]
    pub max_entry_bytes: Option<SizeSetting>,

    /// How long an entry is served without asking upstream. [default: 5s] [key: cache.fresh_for]
    #[arg(long = "fresh-for", env = "ICECACHE_FRESH_FOR")]
    pub fresh_for: Option<String>,

    /// After fresh_for, how long the old entry may still be served while one background
    /// revalidation runs (0s: off). [default: 0s] [key: cache.stale_while_revalidate]
    #[arg(
        long = "stale-while-revalidate",
        env = "ICECACHE_STALE_WHILE_REVALIDATE"
    )]
    pub stale_while_revalidate: Option<String>,

    /// Keep a gzip copy of each cached body (made once per fill) for clients that accept it.
    /// [default: true] [key: cache.gzip]
    #[arg(long = "cache-gzip", env = "ICECACHE_CACHE_GZIP")]
    pub gzip: Option<bool>,

    /// After fresh_for, how long the old entry may be served when upstream is unreachable,
    /// times out or answers 5xx. [default: 60s] [key: cache.stale_if_error]
    #[arg(long = "stale-if-error", env = "ICECACHE_STALE_IF_ERROR")]
    pub stale_if_error: Option<String>,
}

/// A byte size as written by a user: a number, or a number with KiB, MiB or GiB.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SizeSetting {
    Bytes(u64),
    Text(String),
}

impl std::str::FromStr for SizeSetting {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SizeSetting::Text(s.to_owned()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The upstream catalog's base URL, split the way requests are rebuilt from it.
#[derive(Debug, Clone)]
pub struct UpstreamUrl {
    pub scheme: Scheme,
    pub authority: Authority,
    /// Without a trailing slash; empty when the catalog is served at the root.
    pub base_path: String,
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub enabled: bool,
    pub gzip: bool,
    pub max_bytes: u64,
    pub max_entry_bytes: u64,
    pub fresh_for: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

/// A validated configuration: every value checked and converted.
#[derive(Debug, Clone)]
pub struct Config {
    pub upstream: UpstreamUrl,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub log_format: LogFormat,
    pub log_level: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
    pub workers: usize,
    pub shutdown_grace: Duration,
    pub namespace_separator: String,
    pub admin_token: Option<String>,
    pub public_url: Option<String>,
    pub policies: Policies,
    pub tls: Option<ListenerTls>,
    pub upstream_tls: UpstreamTls,
    pub auth_headers: Vec<HeaderName>,
    pub authz_ttl: Duration,
    pub strip_keys: KeyPatterns,
    pub cache: CacheConfig,
}

impl Settings {
    /// Reads a TOML config file into settings.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })
    }

    /// `self` with every setting that `over` has replaced by `over`'s.
    pub fn overlay(self, over: Settings) -> Settings {
        Settings {
            config: over.config.or(self.config),
            upstream: over.upstream.or(self.upstream),
            listen: over.listen.or(self.listen),
            admin_listen: over.admin_listen.or(self.admin_listen),
            log_format: over.log_format.or(self.log_format),
            log_level: over.log_level.or(self.log_level),
            connect_timeout: over.connect_timeout.or(self.connect_timeout),
            request_timeout: over.request_timeout.or(self.request_timeout),
            header_read_timeout: over.header_read_timeout.or(self.header_read_timeout),
            max_header_bytes: over.max_header_bytes.or(self.max_header_bytes),
            max_connections: over.max_connections.or(self.max_connections),
            workers: over.workers.or(self.workers),
            shutdown_grace: over.shutdown_grace.or(self.shutdown_grace),
            namespace_separator: over.namespace_separator.or(self.namespace_separator),
            admin_token: over.admin_token.or(self.admin_token),
            public_url: over.public_url.or(self.public_url),
            identity: over.identity.or(self.identity),
            credentials: over.credentials.or(self.credentials),
            auth_headers: over.auth_headers.or(self.auth_headers),
            authz_ttl: over.authz_ttl.or(self.authz_ttl),
            strip_keys: over.strip_keys.or(self.strip_keys),
            inject: over.inject.or(self.inject),
            tls_cert: over.tls_cert.or(self.tls_cert),
            tls_key: over.tls_key.or(self.tls_key),
            tls_client_ca: over.tls_client_ca.or(self.tls_client_ca),
            tls_reload_interval: over.tls_reload_interval.or(self.tls_reload_interval),
            upstream_ca: over.upstream_ca.or(self.upstream_ca),
            upstream_client_cert: over.upstream_client_cert.or(self.upstream_client_cert),
            upstream_client_key: over.upstream_client_key.or(self.upstream_client_key),
            prefixes: over.prefixes.or(self.prefixes),
            cache: CacheSettings {
                enabled: over.cache.enabled.or(self.cache.enabled),
                gzip: over.cache.gzip.or(self.cache.gzip),
                max_bytes: over.cache.max_bytes.or(self.cache.max_bytes),
                max_entry_bytes: over.cache.max_entry_bytes.or(self.cache.max_entry_bytes),
                fresh_for: over.cache.fresh_for.or(self.cache.fresh_for),
                stale_while_revalidate: over
                    .cache
                    .stale_while_revalidate
                    .or(self.cache.stale_while_revalidate),
                stale_if_error: over.cache.stale_if_error.or(self.cache.stale_if_error),
            },
        }
    }

    /// Checks every value and fills in defaults.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let upstream = parse_upstream(self.upstream.as_deref())?;
        let upstream_tls = self.upstream_tls(&upstream)?;
        let max_header_bytes = size("max_header_bytes", &self.max_header_bytes, 64 * 1024)?;
        if max_header_bytes < 8192 {
            return Err(invalid(
                "max_header_bytes",
                format!("{max_header_bytes} is too small: use at least 8KiB (8192)"),
            ));
        }
        let max_connections = self.max_connections.unwrap_or(10_000);
        if max_connections == 0 {
            return Err(invalid("max_connections", "must be at least 1"));
        }
        let cache = self.cache.validate()?;
        let namespace_separator = self
            .namespace_separator
            .clone()
            .unwrap_or_else(|| "%1F".to_owned());
        if namespace_separator.is_empty() || namespace_separator.contains('/') {
            return Err(invalid(
                "namespace_separator",
                "must be a non-empty URL-encoded string without `/` (for example %1F or .)",
            ));
        }
        if let Some(token) = &self.admin_token {
            if token.trim().is_empty() {
                return Err(invalid("admin_token", "must not be empty when set"));
            }
        }
        let strip_keys = self
            .strip_keys
            .as_ref()
            .map_or_else(KeyPatterns::default, |keys| {
                KeyPatterns::new(keys.iter().cloned())
            });
        let policies = self.policies(&strip_keys)?;
        let auth_headers = self
            .auth_headers
            .iter()
            .flatten()
            .map(|name| {
                HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| invalid("auth_headers", format!("{name:?} is not a header name")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let log_level = self.log_level.clone().unwrap_or_else(|| "info".to_owned());
        tracing_subscriber::EnvFilter::try_new(&log_level).map_err(|e| {
            invalid(
                "log_level",
                format!("{log_level:?} is not a log filter ({e}); use e.g. info or icecache=debug"),
            )
        })?;
        Ok(Config {
            upstream,
            listen: addr("listen", &self.listen, "127.0.0.1:8181")?,
            admin_listen: addr("admin_listen", &self.admin_listen, "127.0.0.1:9181")?,
            log_format: match self.log_format.as_deref().unwrap_or("text") {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(invalid(
                        "log_format",
                        format!("{other:?} is not a log format: use text or json"),
                    ))
                }
            },
            log_level,
            connect_timeout: positive_duration("connect_timeout", &self.connect_timeout, "2s")?,
            request_timeout: positive_duration("request_timeout", &self.request_timeout, "30s")?,
            header_read_timeout: positive_duration(
                "header_read_timeout",
                &self.header_read_timeout,
                "10s",
            )?,
            max_header_bytes: max_header_bytes as usize,
            max_connections: max_connections as usize,
            workers: match self.workers {
                Some(0) => return Err(invalid("workers", "must be at least 1")),
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(1024),
                None => std::thread::available_parallelism().map_or(1, |n| n.get()),
            },
            shutdown_grace: duration("shutdown_grace", &self.shutdown_grace, "30s")?,
            namespace_separator,
            admin_token: self.admin_token.clone(),
            policies,
            tls: self.listener_tls()?,
            upstream_tls,
            auth_headers,
            authz_ttl: positive_duration("authz_ttl", &self.authz_ttl, "30s")?,
            strip_keys,
            public_url: self
                .public_url
                .as_deref()
                .map(parse_public_url)
                .transpose()?,
            cache,
        })
    }
}

impl Settings {
    /// The listener's TLS settings, loaded once here so a bad file fails the config check.
    fn listener_tls(&self) -> Result<Option<ListenerTls>, ConfigError> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (None, None) => {
                if self.tls_client_ca.is_some() {
                    return Err(invalid(
                        "tls_client_ca",
                        "verifies client certificates on an HTTPS listener: set tls_cert and tls_key too",
                    ));
                }
                return Ok(None);
            }
            (Some(cert), Some(key)) => ListenerTls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                reload_every: positive_duration(
                    "tls_reload_interval",
                    &self.tls_reload_interval,
                    "5s",
                )?,
            },
            (Some(_), None) => return Err(invalid("tls_key", "is required with tls_cert")),
            (None, Some(_)) => return Err(invalid("tls_cert", "is required with tls_key")),
        };
        crate::tls::server_config(&tls).map_err(|e| invalid("tls_cert", e.to_string()))?;
        Ok(Some(tls))
    }

    fn upstream_tls(&self, upstream: &UpstreamUrl) -> Result<UpstreamTls, ConfigError> {
        let client_cert = match (&self.upstream_client_cert, &self.upstream_client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (Some(_), None) => {
                return Err(invalid(
                    "upstream_client_key",
                    "is required with upstream_client_cert",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "upstream_client_cert",
                    "is required with upstream_client_key",
                ))
            }
        };
        let tls = UpstreamTls {
            ca: self.upstream_ca.clone(),
            client_cert,
            reload_every: positive_duration(
                "tls_reload_interval",
                &self.tls_reload_interval,
                "5s",
            )?,
        };
        if upstream.scheme == Scheme::HTTPS || tls.ca.is_some() || tls.client_cert.is_some() {
            crate::tls::client_config(&tls).map_err(|e| invalid("upstream_ca", e.to_string()))?;
        }
        Ok(tls)
    }

    fn policies(&self, strip_keys: &KeyPatterns) -> Result<Policies, ConfigError> {
        let base = PolicySettings {
            identity: self.identity.clone(),
            credentials: self.credentials.clone(),
            inject: self.inject.clone(),
        };
        let default = Arc::new(policy::build(
            &base,
            &PolicySettings::default(),
            strip_keys,
            "the default policy",
        )?);
        let mut by_prefix = std::collections::HashMap::new();
        for (prefix, settings) in self.prefixes.iter().flatten() {
            let built = policy::build(&base, settings, strip_keys, &format!("prefix {prefix:?}"))
                .map_err(|e| match e {
                ConfigError::Invalid { message, .. } => ConfigError::Invalid {
                    key: "prefixes",
                    message: format!("[prefixes.{prefix}]: {message}"),
                },
                other => other,
            })?;
            by_prefix.insert(prefix.clone(), Arc::new(built));
        }
        Ok(Policies { default, by_prefix })
    }
}

impl CacheSettings {
    fn validate(&self) -> Result<CacheConfig, ConfigError> {
        let max_bytes = size("cache.max_bytes", &self.max_bytes, 256 * 1024 * 1024)?;
        let max_entry_bytes = size("cache.max_entry_bytes", &self.max_entry_bytes, 32 << 20)?;
        if max_entry_bytes > max_bytes {
            return Err(invalid(
                "cache.max_entry_bytes",
                format!(
                    "{max_entry_bytes} is larger than cache.max_bytes ({max_bytes}); \
                     lower it or raise cache.max_bytes"
                ),
            ));
        }
        Ok(CacheConfig {
            enabled: self.enabled.unwrap_or(true),
            gzip: self.gzip.unwrap_or(true),
            max_bytes,
            max_entry_bytes,
            fresh_for: duration("cache.fresh_for", &self.fresh_for, "5s")?,
            stale_while_revalidate: duration(
                "cache.stale_while_revalidate",
                &self.stale_while_revalidate,
                "0s",
            )?,
            stale_if_error: duration("cache.stale_if_error", &self.stale_if_error, "60s")?,
        })
    }
}

fn parse_upstream(value: Option<&str>) -> Result<UpstreamUrl, ConfigError> {
    const KEY: &str = "upstream";
    let Some(text) = value else {
        return Err(invalid(
            KEY,
            "is required: give --upstream http://catalog:8181 (or ICECACHE_UPSTREAM)",
        ));
    };
    let uri: Uri = text.parse().map_err(|e| {
        invalid(
            KEY,
            format!("{text:?} is not a URL ({e}); expected http://host:port[/base-path]"),
        )
    })?;
    let scheme = match uri.scheme() {
        Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => s.clone(),
        _ => {
            return Err(invalid(
                KEY,
                format!("{text:?} must start with http:// or https://"),
            ))
        }
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(invalid(KEY, format!("{text:?} has no host")));
    };
    if uri.query().is_some() {
        return Err(invalid(
            KEY,
            format!("{text:?} must not carry a query string"),
        ));
    }
    Ok(UpstreamUrl {
        scheme,
        authority,
        base_path: uri.path().trim_end_matches('/').to_owned(),
    })
}

fn parse_public_url(text: &str) -> Result<String, ConfigError> {
    let uri: Uri = text.parse().map_err(|e| {
        invalid(
            "public_url",
            format!("{text:?} is not a URL ({e}); e.g. http://icecache:8181"),
        )
    })?;
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(invalid(
            "public_url",
            format!("{text:?} needs a scheme and a host, e.g. http://icecache:8181"),
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

fn addr(
    key: &'static str,
    value: &Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let text = value.as_deref().unwrap_or(default);
    text.parse().map_err(|_| {
        invalid(
            key,
            format!("{text:?} is not a socket address: use IP:PORT, e.g. 127.0.0.1:8181"),
        )
    })
}

fn positive_duration(
    key: &'static str,
    value: &Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let d = duration(key, value, default)?;
    if d.is_zero() {
        return Err(invalid(key, "must be longer than 0s"));
    }
    Ok(d)
}

fn duration(
    key: &'static str,
    value: &Option<String>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let text = value.as_deref().unwrap_or(default);
    parse_duration(text).ok_or_else(|| {
        invalid(
            key,
            format!(
                "{text:?} is not a duration: use a whole number with a unit ms, s, m or h \
                 (e.g. 250ms, 5s, 2m)"
            ),
        )
    })
}

/// `250ms`, `5s`, `2m`, `1h`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

fn size(key: &'static str, value: &Option<SizeSetting>, default: u64) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(SizeSetting::Bytes(n)) => Ok(*n),
        Some(SizeSetting::Text(text)) => parse_size(text).ok_or_else(|| {
            invalid(
                key,
                format!("{text:?} is not a size: use bytes or a number with KiB, MiB or GiB"),
            )
        }),
    }
}

/// `1048576`, `64KiB`, `256MiB`, `1GiB`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let multiplier = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(multiplier)
}

/// Loads the settings a run would use: file (if any), then the CLI/env layer over it.
pub fn load(cli_settings: Settings) -> Result<Config, ConfigError> {
    let base = match &cli_settings.config {
        Some(path) => Settings::from_file(path)?,
        None => Settings::default(),
    };
    base.overlay(cli_settings).validate()
}

impl Config {
    /// A human-readable listing of the effective settings, for `check-config`; secrets masked.
    pub fn describe(&self) -> String {
        let c = &self.cache;
        let mut policies = format!("policy (default) = {}\n", self.policies.default.describe());
        let mut prefixes: Vec<_> = self.policies.by_prefix.iter().collect();
        prefixes.sort_by(|a, b| a.0.cmp(b.0));
        for (prefix, policy) in prefixes {
            policies.push_str(&format!(
                "policy (prefix {prefix}) = {}\n",
                policy.describe()
            ));
        }
        let auth_headers: Vec<&str> = self.auth_headers.iter().map(HeaderName::as_str).collect();
        policies.push_str(&format!(
            "auth_headers = {auth_headers:?}\nauthz_ttl = {:?}\n",
            self.authz_ttl
        ));
        let settings = format!(
            "upstream = {}\nlisten = {}\nadmin_listen = {}\nlog_format = {:?}\nlog_level = {}\n\
             connect_timeout = {:?}\nrequest_timeout = {:?}\nheader_read_timeout = {:?}\n\
             max_header_bytes = {}\nmax_connections = {}\nworkers = {}\nshutdown_grace = {:?}\n\
             namespace_separator = {}\nadmin_token = {}\npublic_url = {}\n\
             cache.enabled = {}\ncache.gzip = {}\ncache.max_bytes = {}\ncache.max_entry_bytes = {}\n\
             cache.fresh_for = {:?}\ncache.stale_while_revalidate = {:?}\n\
             cache.stale_if_error = {:?}\n",
            self.upstream,
            self.listen,
            self.admin_listen,
            self.log_format,
            self.log_level,
            self.connect_timeout,
            self.request_timeout,
            self.header_read_timeout,
            self.max_header_bytes,
            self.max_connections,
            self.workers,
            self.shutdown_grace,
            self.namespace_separator,
            if self.admin_token.is_some() {
                "(set)"
            } else {
                "(none)"
            },
            self.public_url.as_deref().unwrap_or("(from each request)"),
            c.enabled,
            c.gzip,
            c.max_bytes,
            c.max_entry_bytes,
            c.fresh_for,
            c.stale_while_revalidate,
            c.stale_if_error,
        );
        settings + &policies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_upstream() -> Settings {
        Settings {
            upstream: Some("http://127.0.0.1:8181".into()),
            ..Settings::default()
        }
    }

    #[test]
    fn upstream_alone_gives_the_documented_defaults() {
        let c = with_upstream().validate().unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8181");
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:9181");
        assert_eq!(c.cache.fresh_for, Duration::from_secs(5));
        assert_eq!(c.cache.max_bytes, 256 << 20);
        assert_eq!(c.cache.max_entry_bytes, 32 << 20);
        assert_eq!(c.cache.stale_if_error, Duration::from_secs(60));
        assert!(c.cache.stale_while_revalidate.is_zero());
    }

    #[test]
    fn upstream_base_path_is_kept_without_trailing_slash() {
        let mut s = with_upstream();
        s.upstream = Some("http://gravitino:9001/iceberg/".into());
        let c = s.validate().unwrap();
        assert_eq!(c.upstream.base_path, "/iceberg");
        assert_eq!(c.upstream.authority.as_str(), "gravitino:9001");
    }

    #[test]
    fn missing_upstream_names_the_key() {
        let err = Settings::default().validate().unwrap_err();
        assert!(err.to_string().contains("`upstream`"), "{err}");
    }

    #[test]
    fn bad_duration_names_the_key_and_the_fix() {
        let mut s = with_upstream();
        s.cache.fresh_for = Some("five".into());
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("cache.fresh_for") && err.contains("5s"),
            "{err}"
        );
    }

    #[test]
    fn entry_bound_above_cache_bound_is_refused() {
        let mut s = with_upstream();
        s.cache.max_bytes = Some(SizeSetting::Text("1MiB".into()));
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("cache.max_entry_bytes"), "{err}");
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: Settings =
            toml::from_str("upstream = \"http://a:1\"\n[cache]\nfresh_for = \"9s\"\n").unwrap();
        let flags = Settings {
            upstream: Some("http://b:2".into()),
            ..Settings::default()
        };
        let c = file.overlay(flags).validate().unwrap();
        assert_eq!(c.upstream.authority.as_str(), "b:2");
        assert_eq!(c.cache.fresh_for, Duration::from_secs(9));
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let err = toml::from_str::<Settings>("upstrem = \"http://a:1\"").unwrap_err();
        assert!(err.message().contains("upstrem"), "{}", err.message());
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("64KiB"), Some(65536));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("1TB"), None);
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), None);
    }
}
