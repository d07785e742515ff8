//! The raw settings, as a TOML file, `ICECACHE_*` variables and flags write them: every key
//! optional, nothing checked yet. One struct serves all three sources (clap reads flags and
//! variables into it, serde reads the file), so a key has one name everywhere; `overlay` merges
//! the sources, and `validate` turns the result into typed settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;

use super::units::SizeText;
use super::{ConfigError, ConfigErrors};
use crate::ops::logging::LogFormat;
use crate::policy::{Credentials, Identity, InjectSource, PolicySettings};

/// Every setting as it may come from a flag, an environment variable or the config file (the
/// `cache_*` flags live in the file's `[cache]` table).
#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSettings {
    /// TOML config file.
    #[arg(long, env = "ICECACHE_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Base URL of the Iceberg REST catalog, optionally with a base path
    /// (http://gravitino:9001/iceberg); no user or password in it. Required. [key: upstream]
    #[arg(long, env = "ICECACHE_UPSTREAM")]
    pub upstream: Option<String>,

    /// Address of the Iceberg REST listener. [default: 127.0.0.1:8181] [key: listen]
    #[arg(long, env = "ICECACHE_LISTEN")]
    pub listen: Option<String>,

    /// Address of the admin listener (/healthz, /readyz, /metrics, /cache/*); off loopback it
    /// needs admin_token. [default: 127.0.0.1:9181] [key: admin_listen]
    #[arg(long, env = "ICECACHE_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,

    /// Log line format. [default: text] [key: log_format]
    #[arg(long, env = "ICECACHE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,

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

    /// A client connection (HTTP/1.1 or HTTP/2) with no request in flight for this long is
    /// closed. [default: 75s] [key: idle_timeout]
    #[arg(long, env = "ICECACHE_IDLE_TIMEOUT")]
    pub idle_timeout: Option<String>,

    /// Largest request head accepted (at least 8KiB); larger ones get 431.
    /// [default: 64KiB] [key: max_header_bytes]
    #[arg(long, env = "ICECACHE_MAX_HEADER_BYTES")]
    pub max_header_bytes: Option<SizeText>,

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

    /// Bearer token required by POST /cache/purge on the admin port (unset: no token; then the
    /// admin port must be on loopback). [key: admin_token]
    #[arg(long, env = "ICECACHE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Who may share a cached body: per-principal (callers never share), revalidate (one body,
    /// each caller confirmed upstream with its own credentials) or shared (all callers trusted).
    /// [default: per-principal] [key: identity; per prefix: prefixes.NAME.identity]
    #[arg(long, env = "ICECACHE_IDENTITY", value_enum)]
    pub identity: Option<Identity>,

    /// What happens to vended credentials in loadTable bodies.
    /// [default: passthrough] [key: credentials; per prefix: prefixes.NAME.credentials]
    #[arg(long, env = "ICECACHE_CREDENTIALS", value_enum)]
    pub credentials: Option<Credentials>,

    /// Headers besides Authorization, Cookie and X-API-Key that identify a caller
    /// (comma-separated), e.g. x-tenant. [key: auth_headers]
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
    pub inject: Option<BTreeMap<String, InjectSource>>,

    /// Per-prefix identity, credentials and inject (config file only: `[prefixes.NAME]`).
    #[arg(skip)]
    pub prefixes: Option<BTreeMap<String, PolicySettings>>,

    /// PEM certificate chain for HTTPS on the proxy listener (with --tls-key). [key: tls_cert]
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
    pub cache: RawCache,

    /// Several replicas on Redis; the config file's `[cluster]` table.
    #[command(flatten)]
    #[serde(default)]
    pub cluster: RawCluster,

    /// Catalog change events; the config file's `[events]` table.
    #[command(flatten)]
    #[serde(default)]
    pub events: RawEvents,
}

#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvents {
    /// How long an entry is served without asking the catalog while its event sources are
    /// live and have been since it was filled (e.g. 300s); otherwise cache.fresh_for applies.
    /// [default: cache.fresh_for] [key: events.fresh_for]
    #[arg(
        id = "events_fresh_for",
        long = "events-fresh-for",
        env = "ICECACHE_EVENTS_FRESH_FOR"
    )]
    pub fresh_for: Option<String>,

    /// File holding the bearer token SeaweedFS's filer webhook sends; enables
    /// `POST /events/seaweedfs` on the admin listener. [key: events.seaweedfs_token_file]
    #[arg(
        long = "events-seaweedfs-token-file",
        env = "ICECACHE_EVENTS_SEAWEEDFS_TOKEN_FILE"
    )]
    pub seaweedfs_token_file: Option<PathBuf>,

    /// NATS server Lakekeeper publishes its CloudEvents to (nats://host:4222).
    /// [key: events.nats_url]
    #[arg(
        long = "events-nats-url",
        env = "ICECACHE_EVENTS_NATS_URL",
        hide_env_values = true
    )]
    pub nats_url: Option<String>,

    /// The subject Lakekeeper publishes to (LAKEKEEPER__NATS_TOPIC); required with nats_url.
    /// [key: events.nats_subject]
    #[arg(long = "events-nats-subject", env = "ICECACHE_EVENTS_NATS_SUBJECT")]
    pub nats_subject: Option<String>,

    /// A JetStream stream holding nats_subject: events are read through a durable consumer
    /// and replayed from its cursor after a restart or disconnect (created if missing).
    /// [key: events.nats_stream]
    #[arg(long = "events-nats-stream", env = "ICECACHE_EVENTS_NATS_STREAM")]
    pub nats_stream: Option<String>,

    /// The durable consumer's name on nats_stream. [default: icecache]
    /// [key: events.nats_consumer]
    #[arg(long = "events-nats-consumer", env = "ICECACHE_EVENTS_NATS_CONSUMER")]
    pub nats_consumer: Option<String>,

    /// The REST prefix of a Lakekeeper warehouse, from its id. [default: {warehouse_id}]
    /// [key: events.prefix_template]
    #[arg(
        long = "events-prefix-template",
        env = "ICECACHE_EVENTS_PREFIX_TEMPLATE"
    )]
    pub prefix_template: Option<String>,
}

#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Redis the replicas of a tier share (redis:// or rediss://, a restricted user in the
    /// URL); unset: a single-process cache. [key: cluster.redis_url]
    #[arg(long = "redis-url", env = "ICECACHE_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// File holding the secret the replicas share (at least 32 bytes): it keys identity scopes
    /// and authenticates what is stored in Redis. Required with redis_url.
    /// [key: cluster.key_file]
    #[arg(long = "cluster-key-file", env = "ICECACHE_CLUSTER_KEY_FILE")]
    pub key_file: Option<PathBuf>,

    /// read-your-writes: a load after any replica answered a write reflects it (a hit waits
    /// for one shared Redis round trip); bounded: staleness is the delivery delay.
    /// [default: read-your-writes] [key: cluster.consistency]
    #[arg(
        long = "cluster-consistency",
        env = "ICECACHE_CLUSTER_CONSISTENCY",
        value_enum
    )]
    pub consistency: Option<crate::cluster::Consistency>,

    /// While Redis is unreachable: revalidate (every load asks the catalog, so
    /// read-your-writes holds) or local (each replica on its own freshness).
    /// [default: revalidate] [key: cluster.on_redis_down]
    #[arg(long = "on-redis-down", env = "ICECACHE_ON_REDIS_DOWN", value_enum)]
    pub on_redis_down: Option<crate::cluster::OnRedisDown>,

    /// Largest body (compressed) shared through Redis; larger ones stay in each replica.
    /// [default: 4MiB] [key: cluster.max_shared_bytes]
    #[arg(
        long = "cluster-max-shared-bytes",
        env = "ICECACHE_CLUSTER_MAX_SHARED_BYTES"
    )]
    pub max_shared_bytes: Option<SizeText>,

    /// How long a replica filling a table for the tier holds the lease (others wait at most
    /// this long for it). [default: 5s] [key: cluster.lease]
    #[arg(long = "cluster-lease", env = "ICECACHE_CLUSTER_LEASE")]
    pub lease: Option<String>,

    /// The longest a hit waits to join a shared round trip to Redis (read-your-writes): one
    /// round per interval serves every hit that arrived in it. [default: 2ms]
    /// [key: cluster.barrier_interval]
    #[arg(
        long = "cluster-barrier-interval",
        env = "ICECACHE_CLUSTER_BARRIER_INTERVAL"
    )]
    pub barrier_interval: Option<String>,

    /// How long the others distrust their entries after a replica's heartbeat lapsed (it may
    /// be answering writes Redis does not hear of); a replica out of touch with Redis this
    /// long refuses writes. [default: 60s] [key: cluster.member_timeout]
    #[arg(
        long = "cluster-member-timeout",
        env = "ICECACHE_CLUSTER_MEMBER_TIMEOUT"
    )]
    pub member_timeout: Option<String>,

    /// A Redis command not answered within this makes the replica degraded.
    /// [default: 500ms] [key: cluster.redis_timeout]
    #[arg(long = "cluster-redis-timeout", env = "ICECACHE_CLUSTER_REDIS_TIMEOUT")]
    pub redis_timeout: Option<String>,

    /// Prefix of every Redis key and channel icecache uses. [default: icecache]
    /// [key: cluster.key_prefix]
    #[arg(long = "cluster-key-prefix", env = "ICECACHE_CLUSTER_KEY_PREFIX")]
    pub key_prefix: Option<String>,
}

#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Cache loadTable responses (false: every request passes through).
    /// [default: true] [key: cache.enabled]
    #[arg(long = "cache-enabled", env = "ICECACHE_CACHE_ENABLED")]
    pub enabled: Option<bool>,

    /// Memory bound of the cache, bodies plus headers. [default: 256MiB] [key: cache.max_bytes]
    #[arg(long = "cache-max-bytes", env = "ICECACHE_CACHE_MAX_BYTES")]
    pub max_bytes: Option<SizeText>,

    /// Largest response cached; larger ones stream through uncached.
    /// [default: 32MiB] [key: cache.max_entry_bytes]
    #[arg(long = "cache-max-entry-bytes", env = "ICECACHE_CACHE_MAX_ENTRY_BYTES")]
    pub max_entry_bytes: Option<SizeText>,

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

/// `$over.field.or($under.field)` for every listed field.
macro_rules! overlay {
    ($over:ident, $under:ident, $ty:ident { $($field:ident),+ $(,)? } $(, $($rest:tt)*)?) => {
        $ty { $($field: $over.$field.or($under.$field),)+ $($($rest)*)? }
    };
}

impl RawSettings {
    /// Reads a TOML config file. A file that is not TOML is one error; one that is TOML but
    /// holds settings icecache does not take gets every such setting named, beside the
    /// settings it does take (so that validation can report what is wrong with those too).
    pub fn from_file(path: &Path) -> Result<(RawSettings, Vec<ConfigError>), ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            ConfigErrors::one(ConfigError::Read {
                path: path.to_owned(),
                source,
            })
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            ConfigErrors::one(ConfigError::Parse {
                path: path.to_owned(),
                line,
                message: e.message().to_owned(),
            })
        })?;
        let whole = match RawSettings::deserialize(toml::Value::Table(table.clone())) {
            Ok(settings) => return Ok((settings, Vec::new())),
            Err(whole) => whole,
        };
        let (each, refused) = setting_errors(&table);
        if each.is_empty() {
            return Err(ConfigErrors::one(ConfigError::Parse {
                path: path.to_owned(),
                line: None,
                message: whole.message().to_owned(),
            }));
        }
        // The settings it does take, so that what is wrong with them is reported too.
        let mut kept = table;
        for (key, sub) in refused {
            match sub {
                Some(sub) => {
                    if let Some(toml::Value::Table(inner)) = kept.get_mut(&key) {
                        inner.remove(&sub);
                    }
                }
                None => {
                    kept.remove(&key);
                }
            }
        }
        match RawSettings::deserialize(toml::Value::Table(kept)) {
            Ok(settings) => Ok((settings, each)),
            Err(_) => Err(ConfigErrors(each)),
        }
    }

    /// `self` with every setting that `over` has replaced by `over`'s.
    pub fn overlay(self, over: RawSettings) -> RawSettings {
        let under = self;
        let (over_cluster, under_cluster) = (over.cluster, under.cluster);
        let cluster = overlay!(
            over_cluster,
            under_cluster,
            RawCluster {
                redis_url,
                key_file,
                consistency,
                on_redis_down,
                max_shared_bytes,
                lease,
                barrier_interval,
                member_timeout,
                redis_timeout,
                key_prefix
            }
        );
        let (over_events, under_events) = (over.events, under.events);
        let events = overlay!(
            over_events,
            under_events,
            RawEvents {
                fresh_for,
                seaweedfs_token_file,
                nats_url,
                nats_subject,
                nats_stream,
                nats_consumer,
                prefix_template
            }
        );
        let (over_cache, under_cache) = (over.cache, under.cache);
        let cache = overlay!(
            over_cache,
            under_cache,
            RawCache {
                enabled,
                max_bytes,
                max_entry_bytes,
                fresh_for,
                stale_while_revalidate,
                gzip,
                stale_if_error
            }
        );
        overlay!(
            over,
            under,
            RawSettings {
                config,
                upstream,
                listen,
                admin_listen,
                log_format,
                log_level,
                connect_timeout,
                request_timeout,
                header_read_timeout,
                idle_timeout,
                max_header_bytes,
                max_connections,
                workers,
                shutdown_grace,
                namespace_separator,
                public_url,
                admin_token,
                identity,
                credentials,
                auth_headers,
                authz_ttl,
                strip_keys,
                inject,
                prefixes,
                tls_cert,
                tls_key,
                tls_client_ca,
                tls_reload_interval,
                upstream_ca,
                upstream_client_cert,
                upstream_client_key
            },
            cache,
            cluster,
            events
        )
    }

    /// Reads the file the settings name (if any) and puts these settings over it; with the
    /// file's settings that were refused.
    pub fn over_file(self) -> Result<(RawSettings, Vec<ConfigError>), ConfigErrors> {
        match &self.config {
            Some(path) => {
                let (file, refused) = RawSettings::from_file(path)?;
                Ok((file.overlay(self), refused))
            }
            None => Ok((self, Vec::new())),
        }
    }
}

/// Each setting of a file read on its own, so that every one serde refuses is named: a key
/// icecache does not know, a value of the wrong type, a spelling of an enum it does not take.
/// Also returns where each refused setting is (its table key, and its key within it).
fn setting_errors(table: &toml::Table) -> (Vec<ConfigError>, Vec<(String, Option<String>)>) {
    let mut errors = Vec::new();
    let mut refused = Vec::new();
    let mut check = |key: String, at: (String, Option<String>), alone: toml::Table| {
        if let Err(e) = RawSettings::deserialize(toml::Value::Table(alone)) {
            errors.push(ConfigError::Invalid {
                key,
                message: e.message().to_owned(),
            });
            refused.push(at);
        }
    };
    for (key, value) in table {
        match (key.as_str(), value) {
            ("cache" | "cluster" | "events" | "inject" | "prefixes", toml::Value::Table(inner)) => {
                for (sub, inner_value) in inner {
                    let nested: toml::Table =
                        [(sub.clone(), inner_value.clone())].into_iter().collect();
                    let alone = [(key.clone(), toml::Value::Table(nested))]
                        .into_iter()
                        .collect();
                    check(
                        format!("{key}.{sub}"),
                        (key.clone(), Some(sub.clone())),
                        alone,
                    );
                }
            }
            _ => check(
                key.clone(),
                (key.clone(), None),
                [(key.clone(), value.clone())].into_iter().collect(),
            ),
        }
    }
    (errors, refused)
}
