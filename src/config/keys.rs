//! Every setting, declared once: its key (the TOML name; `table.key` inside `[cache]`,
//! `[cluster]` and `[events]`), the flag that also sets it (its `ICECACHE_*` variable is derived
//! from the flag), its kind with its bounds, its default, what it means, whether a reload
//! applies it, and whether its value is a secret. The flags, the file reader, validation's
//! defaults and bounds, `check-config`'s listing, the reload's kept keys, `icecache keys` and
//! docs/configuration.md all read this table.

use crate::events::settings::DEFAULT_KAFKA_TOPIC;
use std::time::Duration;

/// What a key's value is, with its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number with `ms`, `s`, `m` or `h`.
    Duration {
        min: Duration,
        max: Duration,
    },
    /// Bytes, or a number with `KiB`, `MiB` or `GiB`.
    Size {
        min: u64,
        max: u64,
    },
    Count {
        min: u64,
        max: u64,
    },
    Bool,
    Text,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Comma-separated on the command line, a list in the file.
    List,
    Path,
    /// A TOML table (the file only).
    Table,
}

/// What a key is when it is not given, as the documentation and `--help` write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// A value of the key's kind, written as a user would write it.
    Value(&'static str),
    /// No default: the key must be set.
    Required,
    /// Unset unless given; the text says what that means.
    Unset(&'static str),
    /// Worked out when the settings are read; the text says how.
    Computed(&'static str),
}

/// Whether a reload (`SIGHUP`) applies a new value, or keeps the running one until a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    Applied,
    Restart,
}

#[derive(Debug)]
pub struct Key {
    pub name: &'static str,
    /// The long flag without `--`; None: the file only.
    pub flag: Option<&'static str>,
    pub kind: Kind,
    pub default: Absent,
    pub meaning: &'static str,
    pub reload: Reload,
    /// Never shown: not in `check-config`, `Debug` or `--help`'s environment values.
    pub secret: bool,
}

impl Key {
    /// The `ICECACHE_*` variable: the flag in capitals, `-` as `_`.
    pub fn env(&self) -> Option<String> {
        self.flag
            .map(|flag| format!("ICECACHE_{}", flag.to_ascii_uppercase().replace('-', "_")))
    }

    /// The default as the documentation writes it.
    pub fn default_text(&self) -> String {
        match self.default {
            Absent::Value(value) => format!("`{value}`"),
            Absent::Required => "(required)".to_owned(),
            Absent::Unset(what) | Absent::Computed(what) => what.to_owned(),
        }
    }

    /// The default value itself, for keys that have one.
    pub fn default_value(&self) -> Option<&'static str> {
        match self.default {
            Absent::Value(value) => Some(value),
            _ => None,
        }
    }
}

/// The key named `name`; None for a name no key has.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The key another key is meaningless without: every `cluster.*` key needs
/// `cluster.redis_url`, every `events.nats_*` key (and the template) needs
/// `events.nats_url`, and every `events.kafka_*` key needs `events.kafka_brokers`. Setting one without the other is refused: a tier that lost its Redis URL
/// (a missing Secret) would otherwise run as an island without a word.
pub fn needs(name: &str) -> Option<&'static str> {
    match name {
        "cluster.redis_url" | "events.nats_url" | "events.kafka_brokers" => None,
        n if n.starts_with("cluster.") => Some("cluster.redis_url"),
        n if n.starts_with("events.nats_") || n == "events.prefix_template" => {
            Some("events.nats_url")
        }
        n if n.starts_with("events.kafka_") => Some("events.kafka_brokers"),
        _ => None,
    }
}

/// The tables whose keys are written `table.key`.
pub const TABLES: &[&str] = &["cache", "cluster", "events"];

const MS: Duration = Duration::from_millis(1);
const NONE: Duration = Duration::ZERO;
const DAY: Duration = Duration::from_secs(86_400);
const ANY_SIZE: u64 = u64::MAX;

const fn duration(min: Duration, max: Duration) -> Kind {
    Kind::Duration { min, max }
}

const fn size(min: u64) -> Kind {
    Kind::Size { min, max: ANY_SIZE }
}

macro_rules! keys {
    ($($name:literal, $flag:expr, $kind:expr, $default:expr, $reload:ident, $secret:literal, $meaning:literal;)+) => {
        /// Every key, in the order the documentation lists them.
        pub static KEYS: &[Key] = &[$(Key {
            name: $name,
            flag: $flag,
            kind: $kind,
            default: $default,
            meaning: $meaning,
            reload: Reload::$reload,
            secret: $secret,
        },)+];
    };
}

use Absent::{Computed, Required, Unset, Value};

keys! {
    "upstream", Some("upstream"), Kind::Text, Required, Restart, false,
        "catalog base URL, `http://` or `https://`; a base path is kept (`http://gravitino:9001/iceberg`); a user or password in it is refused (it would reach every client and log)";
    "upstream_ca", Some("upstream-ca"), Kind::Path, Unset("platform roots"), Restart, false,
        "PEM CA bundle to verify an `https://` catalog with";
    "upstream_client_cert", Some("upstream-client-cert"), Kind::Path, Unset("none"), Restart, false,
        "PEM client certificate presented to the catalog (with `upstream_client_key`); reloaded when the file changes";
    "upstream_client_key", Some("upstream-client-key"), Kind::Path, Unset("none"), Restart, false,
        "PEM private key of `upstream_client_cert`";
    "tls_cert", Some("tls-cert"), Kind::Path, Unset("none (plain HTTP)"), Restart, false,
        "PEM certificate chain (with `tls_key`): the proxy listener serves HTTPS (rustls, ALPN `h2` and `http/1.1`)";
    "tls_key", Some("tls-key"), Kind::Path, Unset("none"), Restart, false,
        "PEM private key of `tls_cert`";
    "tls_client_ca", Some("tls-client-ca"), Kind::Path, Unset("none"), Restart, false,
        "PEM CA bundle: clients must present a certificate it signed (mTLS)";
    "tls_reload_interval", Some("tls-reload-interval"), duration(MS, DAY), Value("5s"), Restart, false,
        "how often the certificate files (the listener's and the upstream client's) are checked; a changed pair is loaded without a restart (a pair that does not load keeps the old one)";
    "listen", Some("listen"), Kind::Text, Value("127.0.0.1:8181"), Restart, false,
        "Iceberg REST listener (HTTP/1.1 and HTTP/2 prior knowledge), `IP:PORT`";
    "admin_listen", Some("admin-listen"), Kind::Text, Value("127.0.0.1:9181"), Restart, false,
        "admin listener, `IP:PORT`; an address off loopback needs `admin_token` (purge would be open to the network)";
    "log_format", Some("log-format"), Kind::Choice(&["text", "json"]), Value("text"), Restart, false,
        "`text` or `json`; one line per request";
    "log_level", Some("log-level"), Kind::Text, Value("info"), Applied, false,
        "tracing EnvFilter syntax";
    "connect_timeout", Some("connect-timeout"), duration(MS, DAY), Value("2s"), Restart, false,
        "TCP connect to the catalog";
    "request_timeout", Some("request-timeout"), duration(MS, DAY), Value("30s"), Restart, false,
        "the catalog's response head must come within it (else 504); it is also the longest silence allowed inside a body, either way (a stalled body is cut)";
    "upstream_max_in_flight", Some("upstream-max-in-flight"), Kind::Count { min: 0, max: 1_000_000 }, Value("512"), Restart, false,
        "requests icecache has at the catalog at once, over every route and worker (a streamed answer counts until its head, a read one until its end); `0`: no bound";
    "upstream_queue", Some("upstream-queue"), Kind::Count { min: 0, max: 1_000_000 }, Value("1024"), Restart, false,
        "requests that wait for a place at the catalog when `upstream_max_in_flight` is reached; one more is refused at once without reaching the catalog: a load is then served stale within `stale_if_error`, anything else gets `503` with `Retry-After: 1`";
    "upstream_queue_timeout", Some("upstream-queue-timeout"), duration(MS, DAY), Value("5s"), Restart, false,
        "the longest a request waits in that queue before it is refused the same way";
    "idempotency", Some("idempotency"), Kind::Choice(&["pass-through", "provide"]), Value("pass-through"), Applied, false,
        "a client's `Idempotency-Key` on a mutation (spec 1.11): `pass-through` (it reaches the catalog unchanged; icecache keeps nothing) or `provide` (it still reaches the catalog, and icecache also keeps each final answer and replays it to a retry with the same key, in Redis when there is a tier; `/v1/config` then advertises `idempotency-key-lifetime` when the catalog does not; see [reliability](reliability.md))";
    "idempotency_key_lifetime", Some("idempotency-key-lifetime"), duration(Duration::from_secs(1), Duration::from_secs(7 * 86_400)), Value("30m"), Applied, false,
        "under `provide`, how long a final answer is replayed; advertised to clients as `idempotency-key-lifetime` (ISO-8601, e.g. `PT30M`)";
    "header_read_timeout", Some("header-read-timeout"), duration(MS, DAY), Value("10s"), Restart, false,
        "a client's whole request head, from its first byte (and a new connection's first bytes, a TLS handshake, on HTTP/2 the connection preface); slower clients are dropped. A kept-alive connection waiting for its next request is idle, not slow";
    "idle_timeout", Some("idle-timeout"), duration(MS, DAY), Value("75s"), Restart, false,
        "a client connection with no request in flight and nothing moving on it for this long is closed gracefully (an answer still being written, or still drained from the kernel's buffers by the client, counts as moving; a client that reads nothing of a waiting answer for this long, or on HTTP/2 grants no window for it, is cut, within twice this long (three times over TLS); a request head once begun has `header_read_timeout` instead; a connection asked to close that still holds an answer is cut this long after; see [limitations](limitations.md)); HTTP/2 connections are also pinged every 20 s and closed when a ping goes unanswered";
    "max_header_bytes", Some("max-header-bytes"), size(8 << 10), Value("64KiB"), Restart, false,
        "larger request heads get 431 (at least 8KiB)";
    "max_connections", Some("max-connections"), Kind::Count { min: 1, max: u64::MAX }, Value("10000"), Restart, false,
        "client connections open at once; more wait to be accepted";
    "workers", Some("workers"), Kind::Count { min: 1, max: 1024 }, Computed("CPUs"), Restart, false,
        "proxy worker threads, each with its own runtime and `SO_REUSEPORT` listener; `max_connections` is shared out among them, rounded up";
    "shutdown_grace", Some("shutdown-grace"), duration(NONE, DAY), Value("30s"), Restart, false,
        "on SIGTERM/SIGINT, time for in-flight requests to finish and for clients of closed connections to read what they were sent";
    "namespace_separator", Some("namespace-separator"), Kind::Text, Value("%1F"), Restart, false,
        "namespace separator, URL-encoded, until the catalog advertises its own in `/v1/config`; `%1F` is always accepted too";
    "public_url", Some("public-url"), Kind::Text, Unset("unset"), Applied, false,
        "URL written into a `uri` in `/v1/config` answers; unset: `X-Forwarded-Proto`/`X-Forwarded-Host` or `Host` of each request (a forwarded value that is not `http`/`https` or a plain `host[:port]` is not taken)";
    "admin_token", Some("admin-token"), Kind::Text, Unset("unset"), Applied, true,
        "when set, `POST /cache/purge` needs `Authorization: Bearer <token>` (the scheme in any case)";
    "identity", Some("identity"), Kind::Choice(&["per-principal", "revalidate", "shared"]), Value("per-principal"), Applied, false,
        "who may share a cached body: `per-principal`, `revalidate` or `shared` (see [security](security.md))";
    "credentials", Some("credentials"), Kind::Choice(&["passthrough", "strip", "inject"]), Value("passthrough"), Applied, false,
        "vended credentials: `passthrough`, `strip` or `inject`";
    "auth_headers", Some("auth-headers"), Kind::List, Unset("none"), Restart, false,
        "headers that identify a caller besides `Authorization`, `Cookie` and `X-API-Key`, which always do (comma-separated, e.g. `x-tenant`)";
    "authz_ttl", Some("authz-ttl"), duration(MS, DAY), Value("30s"), Applied, false,
        "under `revalidate`, how long a caller's confirmation for an entry's version holds";
    "strip_keys", Some("strip-keys"), Kind::List, Computed("S3 (SSE-C too), GCS, ADLS (SAS, shared key, connection string, in Java's and pyiceberg's spellings), OSS and pyiceberg `client.*`, the REST client's SigV4 `rest.*`, JDBC, Hugging Face, OAuth `credential`, `token`, `password`, `secret`, `header.authorization`, RFC 8693 token keys, and `*.token`, `*.password`, `*.secret`, `*.credential`, `*.secret-access-key`, `*.session-token`, `*.account-key`, `*.client-secret`"), Applied, false,
        "member names `strip`/`inject` remove at any depth of any answer, compared without regard to case; a trailing `*` matches a prefix, a leading `*` a suffix; a pattern matching `config`, `storage-credentials` or `prefix`, or a header that frames an answer (`content-encoding`, `content-type`, `content-length`, `transfer-encoding`, `date`, `connection`), is refused";
    "inject", None, Kind::Table, Unset("none"), Applied, false,
        "properties `inject` merges into `config`: `\"key\" = { env = \"VAR\" }`, `{ file = \"/path\" }`, or for non-secrets `{ value = \"...\" }`";
    "prefixes", None, Kind::Table, Unset("none"), Applied, false,
        "`[prefixes.NAME]`: per-prefix `identity`, `credentials` and `[prefixes.NAME.inject]`; unset ones inherit the top level";
    "cache.enabled", Some("cache-enabled"), Kind::Bool, Value("true"), Restart, false,
        "`false`: every request passes through (the credential policy still applies)";
    "cache.gzip", Some("cache-gzip"), Kind::Bool, Value("true"), Applied, false,
        "keep a gzip copy of each cached body over 1 KiB (made once per fill, never for injected bodies) for clients whose `Accept-Encoding` takes gzip; it has its own ETag and counts toward `max_bytes`";
    "cache.max_bytes", Some("cache-max-bytes"), size(0), Value("256MiB"), Restart, false,
        "memory bound of the cache: bodies, gzip copies, headers, keys and the bookkeeping around each entry";
    "cache.max_entry_bytes", Some("cache-max-entry-bytes"), size(0), Value("32MiB"), Applied, false,
        "larger answers are not cached (`x-cache: BYPASS`); the default is `cache.max_bytes` when that is smaller";
    "cache.fresh_for", Some("fresh-for"), duration(NONE, DAY), Value("5s"), Applied, false,
        "served from memory without asking the catalog";
    "cache.stale_while_revalidate", Some("stale-while-revalidate"), duration(NONE, DAY), Value("0s"), Applied, false,
        "after `fresh_for`, serve the old entry while one background revalidation runs (`0s`: off)";
    "cache.stale_if_error", Some("stale-if-error"), duration(NONE, DAY), Value("60s"), Applied, false,
        "after `fresh_for`, serve the old entry while the catalog is unreachable, times out or answers 5xx";
    "cluster.redis_url", Some("redis-url"), Kind::Text, Unset("unset"), Restart, true,
        "the Redis the replicas of a tier share (`redis://` or `rediss://`, a restricted user in the URL; its password is never shown); unset: a single-process cache (see [cluster](cluster.md))";
    "cluster.key_file", Some("cluster-key-file"), Kind::Path, Computed("(required with `redis_url`, refused without it)"), Restart, false,
        "a file of at least 32 random bytes the replicas share: it keys identity scopes and Redis names, and authenticates what is stored in Redis";
    "cluster.consistency", Some("cluster-consistency"), Kind::Choice(&["read-your-writes", "leases", "bounded"]), Value("read-your-writes"), Restart, false,
        "`read-your-writes`, the one mode: a load after any replica answered a write reflects it, and a hit asks Redis nothing (see [cluster](cluster.md)); `leases` and `bounded`, earlier names, start in it too";
    "cluster.on_redis_down", Some("on-redis-down"), Kind::Choice(&["revalidate", "local"]), Value("revalidate"), Restart, false,
        "while Redis cannot be reached: `revalidate` (loads ask the catalog) or `local` (each replica on its own freshness)";
    "cluster.max_shared_bytes", Some("cluster-max-shared-bytes"), size(0), Value("4MiB"), Restart, false,
        "larger bodies (as shared: their gzip copy when they have one) stay in each replica";
    "cluster.lease", Some("cluster-lease"), duration(MS, Duration::from_secs(3600)), Value("5s"), Restart, false,
        "how long a replica filling a table for the tier holds the lease; others wait at most this long for it";
    "cluster.barrier_interval", Some("cluster-barrier-interval"), duration(NONE, Duration::from_secs(1)), Value("2ms"), Restart, false,
        "at most one shared round trip to Redis per interval reads the tables' versions for every miss that arrived in it (before taking an entry another replica shared)";
    "cluster.redis_timeout", Some("cluster-redis-timeout"), duration(MS, Duration::from_secs(60)), Value("500ms"), Restart, false,
        "a Redis command not answered within it makes the replica degraded";
    "cluster.member_timeout", Some("cluster-member-timeout"), duration(Duration::from_secs(5), DAY), Value("60s"), Restart, false,
        "no effect (kept so that configuration files of earlier versions start): a replica refuses writes (503) as soon as Redis stops answering it";
    "cluster.key_prefix", Some("cluster-key-prefix"), Kind::Text, Value("icecache"), Restart, false,
        "prefix of every Redis key and channel icecache uses (1 to 64 letters, digits, `_-.`: no glob character, which would widen the ACL's `~prefix:*`)";
    "events.fresh_for", Some("events-fresh-for"), duration(NONE, Duration::from_secs(7 * 86_400)), Computed("`cache.fresh_for`"), Applied, false,
        "how long an entry is served without asking the catalog while every event source is live and has been since the entry's fill began (e.g. `300s`); otherwise `cache.fresh_for` applies. At least `cache.fresh_for`; refused without an event source (see [events](events.md))";
    "events.seaweedfs_token_file", Some("events-seaweedfs-token-file"), Kind::Path, Unset("unset"), Restart, false,
        "a file holding the `bearer_token` of SeaweedFS's `notification.toml`; enables `POST /events/seaweedfs` on the admin listener";
    "events.nats_url", Some("events-nats-url"), Kind::Text, Unset("unset"), Restart, true,
        "the NATS server Lakekeeper publishes its CloudEvents to (`nats://host:4222`)";
    "events.nats_subject", Some("events-nats-subject"), Kind::Text, Computed("(required with `nats_url`)"), Restart, false,
        "Lakekeeper's `LAKEKEEPER__NATS_TOPIC`";
    "events.nats_stream", Some("events-nats-stream"), Kind::Text, Unset("unset"), Restart, false,
        "a JetStream stream holding the subject (created if missing): events are read through a durable consumer and replayed from its cursor after a restart or disconnect; unset: a plain subscription";
    "events.nats_consumer", Some("events-nats-consumer"), Kind::Text, Computed("`icecache-<hostname>`"), Restart, false,
        "the durable consumer's name on `nats_stream`: one per process, so each sees every event; a process restarted on the same host resumes from its cursor (the server drops a consumer unread for an hour)";
    "events.prefix_template", Some("events-prefix-template"), Kind::Text, Value("{warehouse_id}"), Restart, false,
        "the REST prefix of a Lakekeeper warehouse, from the `warehouse-id` of its events (must contain `{warehouse_id}`)";
    "events.kafka_brokers", Some("events-kafka-brokers"), Kind::Text, Unset("unset"), Restart, false,
        "the Kafka brokers Polaris's event listener publishes to (`host:9092[,host:9092…]`, plaintext)";
    "events.kafka_topic", Some("events-kafka-topic"), Kind::Text, Value(DEFAULT_KAFKA_TOPIC), Restart, false,
        "Polaris's `polaris.event-listener.kafka.topic`";
    "events.kafka_group", Some("events-kafka-group"), Kind::Text, Computed("`icecache-<hostname>`"), Restart, false,
        "this process's consumer group, where it commits what it has read: one per process, so each reads every partition; a process restarted with the same group resumes from its committed offsets";
    "events.kafka_prefix_template", Some("events-kafka-prefix-template"), Kind::Text, Value("{catalog_name}"), Restart, false,
        "the REST prefix of a Polaris catalog, from the `catalog_name` (and `realm_id`) of its events (must contain `{catalog_name}`)";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::{parse_duration, SizeText};

    #[test]
    fn every_default_is_a_value_of_its_kind_within_its_bounds() {
        for key in KEYS {
            let Some(value) = key.default_value() else {
                continue;
            };
            match key.kind {
                Kind::Duration { min, max } => {
                    let d = parse_duration(value).unwrap_or_else(|| panic!("{}", key.name));
                    assert!(min <= d && d <= max, "{}", key.name);
                }
                Kind::Size { min, max } => {
                    let s = SizeText::Text(value.to_owned()).bytes().unwrap();
                    assert!(min <= s && s <= max, "{}", key.name);
                }
                Kind::Count { min, max } => {
                    let c: u64 = value.parse().unwrap();
                    assert!(min <= c && c <= max, "{}", key.name);
                }
                Kind::Bool => assert!(value == "true" || value == "false"),
                Kind::Choice(words) => assert!(words.contains(&value), "{}", key.name),
                _ => {}
            }
        }
    }

    #[test]
    fn names_and_flags_are_unique_and_variables_follow_the_flags() {
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len());
        let mut flags: Vec<&str> = KEYS.iter().filter_map(|k| k.flag).collect();
        let count = flags.len();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), count);
        assert_eq!(
            key("cache.fresh_for").and_then(Key::env).as_deref(),
            Some("ICECACHE_FRESH_FOR")
        );
    }
}
