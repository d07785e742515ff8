//! Raw settings into typed `Settings`: every value checked and converted, every problem
//! collected and reported in one run (each naming its key and what would be valid).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::uri::Scheme;
use http::{HeaderName, Uri};

use super::units::{parse_duration, SizeText};
use super::{
    CacheSettings, ConfigError, RawCache, RawSettings, Secret, Settings, DEFAULT_ADMIN_LISTEN,
    DEFAULT_AUTHZ_TTL, DEFAULT_CACHE_ENABLED, DEFAULT_CACHE_GZIP, DEFAULT_CACHE_MAX_BYTES,
    DEFAULT_CACHE_MAX_ENTRY_BYTES, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FRESH_FOR,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_LOG_FORMAT,
    DEFAULT_LOG_LEVEL, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_NAMESPACE_SEPARATOR, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_STALE_IF_ERROR, DEFAULT_STALE_WHILE_REVALIDATE, DEFAULT_TLS_RELOAD_INTERVAL,
    MIN_MAX_HEADER_BYTES,
};
use crate::listener::tls::{self, ListenerTls, UpstreamTls};
use crate::origin::UpstreamUrl;
use crate::policy::identity::identity_headers;
use crate::policy::{self, KeyPatterns, PolicySettings};

mod cluster;
mod events;

/// Everything wrong with a configuration.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn one(error: ConfigError) -> ConfigErrors {
        ConfigErrors(vec![error])
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects problems while the settings are converted.
#[derive(Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    fn add(&mut self, key: &str, message: impl Into<String>) {
        self.0.push(ConfigError::Invalid {
            key: key.to_owned(),
            message: message.into(),
        });
    }

    /// The value, or `fallback` after noting the problem (so checking goes on).
    fn or<T>(&mut self, key: &str, result: Result<T, String>, fallback: T) -> T {
        result.unwrap_or_else(|message| {
            self.add(key, message);
            fallback
        })
    }

    fn duration(&mut self, key: &str, value: Option<&str>, default: Duration) -> Duration {
        let Some(text) = value else { return default };
        let parsed = parse_duration(text).ok_or_else(|| {
            format!(
                "{text:?} is not a duration: use a whole number with a unit ms, s, m or h \
                 (e.g. 250ms, 5s, 2m)"
            )
        });
        self.or(key, parsed, default)
    }

    fn positive_duration(&mut self, key: &str, value: Option<&str>, default: Duration) -> Duration {
        let d = self.duration(key, value, default);
        if d.is_zero() {
            self.add(key, "must be longer than 0s");
            return default;
        }
        d
    }

    fn size(&mut self, key: &str, value: Option<&SizeText>, default: u64) -> u64 {
        let Some(size) = value else { return default };
        let parsed = size.bytes().ok_or_else(|| {
            format!("{size:?} is not a size: use bytes or a number with KiB, MiB or GiB")
        });
        self.or(key, parsed, default)
    }

    fn addr(&mut self, key: &str, value: Option<&str>, default: &str) -> SocketAddr {
        let text = value.unwrap_or(default);
        let parsed = text.parse().map_err(|_| {
            format!("{text:?} is not a socket address: use IP:PORT, e.g. 127.0.0.1:8181")
        });
        self.or(key, parsed, ([127, 0, 0, 1], 0).into())
    }
}

impl TryFrom<RawSettings> for Settings {
    type Error = ConfigErrors;

    fn try_from(raw: RawSettings) -> Result<Settings, ConfigErrors> {
        let mut p = Problems::default();
        let upstream = p.or("upstream", parse_upstream(raw.upstream.as_deref()), None);
        let listen = p.addr("listen", raw.listen.as_deref(), DEFAULT_LISTEN);
        let admin_listen = p.addr(
            "admin_listen",
            raw.admin_listen.as_deref(),
            DEFAULT_ADMIN_LISTEN,
        );
        let admin_token = raw
            .admin_token
            .clone()
            .filter(|t| !t.is_empty())
            .map(Secret::new);
        if !admin_listen.ip().is_loopback() && admin_token.is_none() {
            p.add(
                "admin_listen",
                format!(
                    "{admin_listen} is reachable from other hosts, so `POST /cache/purge` would \
                     be open to them: set admin_token (ICECACHE_ADMIN_TOKEN, e.g. from a \
                     Secret) or bind the admin port to loopback"
                ),
            );
        }
        let log_level = raw
            .log_level
            .clone()
            .unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_owned());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            p.add(
                "log_level",
                format!("{log_level:?} is not a log filter: {e}"),
            );
        }
        let timeout = |p: &mut Problems, key, value: &Option<String>, default| {
            p.positive_duration(key, value.as_deref(), default)
        };
        let connect_timeout = timeout(
            &mut p,
            "connect_timeout",
            &raw.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        );
        let request_timeout = timeout(
            &mut p,
            "request_timeout",
            &raw.request_timeout,
            DEFAULT_REQUEST_TIMEOUT,
        );
        let header_read_timeout = timeout(
            &mut p,
            "header_read_timeout",
            &raw.header_read_timeout,
            DEFAULT_HEADER_READ_TIMEOUT,
        );
        let idle_timeout = timeout(
            &mut p,
            "idle_timeout",
            &raw.idle_timeout,
            DEFAULT_IDLE_TIMEOUT,
        );
        let shutdown_grace = p.duration(
            "shutdown_grace",
            raw.shutdown_grace.as_deref(),
            DEFAULT_SHUTDOWN_GRACE,
        );
        let authz_ttl = timeout(&mut p, "authz_ttl", &raw.authz_ttl, DEFAULT_AUTHZ_TTL);
        let max_header_bytes = p.size(
            "max_header_bytes",
            raw.max_header_bytes.as_ref(),
            DEFAULT_MAX_HEADER_BYTES,
        );
        if max_header_bytes < MIN_MAX_HEADER_BYTES {
            p.add(
                "max_header_bytes",
                format!("{max_header_bytes} is below the minimum of 8KiB"),
            );
        }
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            p.add("max_connections", "must be at least 1");
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = raw.workers.map_or(Ok(cpus), |w| {
            usize::try_from(w)
                .ok()
                .filter(|w| (1..=1024).contains(w))
                .ok_or_else(|| format!("{w} workers: use 1 to 1024"))
        });
        let workers = p.or("workers", workers, cpus);
        let namespace_separator = raw
            .namespace_separator
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE_SEPARATOR.to_owned());
        if namespace_separator.is_empty() || namespace_separator.contains('/') {
            p.add(
                "namespace_separator",
                "must be a non-empty URL-encoded separator without '/'",
            );
        }
        let public_url = raw.public_url.as_deref().map(parse_public_url).transpose();
        let public_url = p.or("public_url", public_url, None);
        let auth_headers: Vec<HeaderName> = raw
            .auth_headers
            .iter()
            .flatten()
            .map(|h| h.trim())
            .filter(|h| !h.is_empty())
            .filter_map(|h| match HeaderName::from_bytes(h.as_bytes()) {
                Ok(name) => Some(name),
                Err(_) => {
                    p.add("auth_headers", format!("{h:?} is not a header name"));
                    None
                }
            })
            .collect();
        let strip = Arc::new(match &raw.strip_keys {
            Some(keys) if keys.iter().all(|k| k.trim().is_empty()) => {
                p.add("strip_keys", "lists no key");
                KeyPatterns::default()
            }
            Some(keys) => KeyPatterns::new(keys.iter().map(|k| k.trim()).filter(|k| !k.is_empty())),
            None => KeyPatterns::default(),
        });
        for pattern in strip.structural() {
            p.add(
                "strip_keys",
                format!(
                    "{pattern:?} would remove `config`, `storage-credentials` or `prefix`, which \
                     hold an answer's shape (what is inside them is stripped anyway)"
                ),
            );
        }
        let base = PolicySettings {
            identity: raw.identity,
            credentials: raw.credentials,
            inject: raw.inject.clone(),
        };
        let policies = match policy::build_all(
            &base,
            raw.prefixes.as_ref().unwrap_or(&Default::default()),
            &strip,
        ) {
            Ok(policies) => Some(policies),
            Err(errors) => {
                for (key, error) in errors {
                    p.add(&key, error.to_string());
                }
                None
            }
        };
        let tls = listener_tls(&raw, &mut p);
        let upstream_tls = upstream_tls(&raw, upstream.as_ref(), &mut p);
        let cache = cache(&raw.cache, &mut p);
        let cluster = cluster::settings(&raw.cluster, &mut p);
        let events = events::settings(&raw.events, &mut p);
        if events.fresh_for.is_some_and(|f| f < cache.fresh_for) {
            p.add(
                "events.fresh_for",
                "must be at least cache.fresh_for (events lengthen freshness, never shorten it)",
            );
        }
        match (upstream, policies) {
            (Some(upstream), Some(policies)) if p.0.is_empty() => Ok(Settings {
                upstream,
                upstream_tls,
                listen,
                admin_listen,
                tls,
                log_format: raw.log_format.unwrap_or(DEFAULT_LOG_FORMAT),
                log_level,
                connect_timeout,
                request_timeout,
                header_read_timeout,
                idle_timeout,
                max_header_bytes: usize::try_from(max_header_bytes).unwrap_or(usize::MAX),
                max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
                workers,
                shutdown_grace,
                namespace_separator,
                public_url,
                admin_token,
                policies,
                identity_headers: identity_headers(&auth_headers),
                authz_ttl,
                cache,
                cluster,
                events,
            }),
            _ => Err(ConfigErrors(p.0)),
        }
    }
}

fn cache(raw: &RawCache, p: &mut Problems) -> CacheSettings {
    let max_bytes = p.size(
        "cache.max_bytes",
        raw.max_bytes.as_ref(),
        DEFAULT_CACHE_MAX_BYTES,
    );
    let max_entry_bytes = p.size(
        "cache.max_entry_bytes",
        raw.max_entry_bytes.as_ref(),
        DEFAULT_CACHE_MAX_ENTRY_BYTES.min(max_bytes),
    );
    if max_entry_bytes > max_bytes {
        p.add(
            "cache.max_entry_bytes",
            format!(
                "{max_entry_bytes} is larger than cache.max_bytes ({max_bytes}); lower it or \
                 raise cache.max_bytes"
            ),
        );
    }
    CacheSettings {
        enabled: raw.enabled.unwrap_or(DEFAULT_CACHE_ENABLED),
        gzip: raw.gzip.unwrap_or(DEFAULT_CACHE_GZIP),
        max_bytes,
        max_entry_bytes,
        fresh_for: p.duration(
            "cache.fresh_for",
            raw.fresh_for.as_deref(),
            DEFAULT_FRESH_FOR,
        ),
        stale_while_revalidate: p.duration(
            "cache.stale_while_revalidate",
            raw.stale_while_revalidate.as_deref(),
            DEFAULT_STALE_WHILE_REVALIDATE,
        ),
        stale_if_error: p.duration(
            "cache.stale_if_error",
            raw.stale_if_error.as_deref(),
            DEFAULT_STALE_IF_ERROR,
        ),
    }
}

/// The listener's TLS paths, loaded once here so a bad file fails the config check.
fn listener_tls(raw: &RawSettings, p: &mut Problems) -> Option<ListenerTls> {
    let reload_every = p.positive_duration(
        "tls_reload_interval",
        raw.tls_reload_interval.as_deref(),
        DEFAULT_TLS_RELOAD_INTERVAL,
    );
    let tls = match (&raw.tls_cert, &raw.tls_key) {
        (None, None) => {
            if raw.tls_client_ca.is_some() {
                p.add(
                    "tls_client_ca",
                    "verifies client certificates on an HTTPS listener: set tls_cert and tls_key too",
                );
            }
            return None;
        }
        (Some(cert), Some(key)) => ListenerTls {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: raw.tls_client_ca.clone(),
            reload_every,
        },
        (Some(_), None) => {
            p.add("tls_key", "is required with tls_cert");
            return None;
        }
        (None, Some(_)) => {
            p.add("tls_cert", "is required with tls_key");
            return None;
        }
    };
    if let Err(e) = tls::server_config(&tls) {
        p.add("tls_cert", e.to_string());
    }
    Some(tls)
}

fn upstream_tls(
    raw: &RawSettings,
    upstream: Option<&UpstreamUrl>,
    p: &mut Problems,
) -> UpstreamTls {
    let client_cert = match (&raw.upstream_client_cert, &raw.upstream_client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (Some(_), None) => {
            p.add(
                "upstream_client_key",
                "is required with upstream_client_cert",
            );
            None
        }
        (None, Some(_)) => {
            p.add(
                "upstream_client_cert",
                "is required with upstream_client_key",
            );
            None
        }
    };
    let tls = UpstreamTls {
        ca: raw.upstream_ca.clone(),
        client_cert,
        reload_every: parse_duration(raw.tls_reload_interval.as_deref().unwrap_or("5s"))
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TLS_RELOAD_INTERVAL),
    };
    let https = upstream.is_some_and(|u| u.scheme == Scheme::HTTPS);
    if https || tls.ca.is_some() || tls.client_cert.is_some() {
        if let Err(e) = tls::client_config(&tls) {
            p.add("upstream_ca", e.to_string());
        }
    }
    tls
}

fn parse_upstream(value: Option<&str>) -> Result<Option<UpstreamUrl>, String> {
    let Some(text) = value else {
        return Err(
            "is required: give --upstream http://catalog:8181 (or ICECACHE_UPSTREAM)".to_owned(),
        );
    };
    // Never echo a password back: messages name the URL without its user part.
    let shown = without_userinfo(text);
    let uri: Uri = text.parse().map_err(|e| {
        format!("{shown:?} is not a URL ({e}); expected http://host:port[/base-path]")
    })?;
    let scheme = match uri.scheme() {
        Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => s.clone(),
        _ => return Err(format!("{shown:?} must start with http:// or https://")),
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(format!("{shown:?} has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "{shown:?} carries a user or password: icecache would send it to every client in \
             its errors and logs. Give the catalog's credentials to the clients instead"
        ));
    }
    if uri.query().is_some() {
        return Err(format!("{shown:?} must not carry a query string"));
    }
    Ok(Some(UpstreamUrl {
        scheme,
        authority,
        base_path: uri.path().trim_end_matches('/').to_owned(),
    }))
}

/// `text` as it may be shown: with an `@` anywhere in it, only what follows the last one (a
/// malformed URL may still hold a password before it).
fn without_userinfo(text: &str) -> String {
    match text.rfind('@') {
        Some(at) => format!("…@{}", &text[at + 1..]),
        None => text.to_owned(),
    }
}

fn parse_public_url(text: &str) -> Result<String, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL ({e}); e.g. http://icecache:8181"))?;
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(format!(
            "{text:?} needs a scheme and a host, e.g. http://icecache:8181"
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::with_upstream;

    #[test]
    fn every_invalid_setting_is_reported_in_one_run() {
        let raw = RawSettings {
            listen: Some("nowhere".into()),
            request_timeout: Some("soon".into()),
            cache: RawCache {
                fresh_for: Some("five".into()),
                ..RawCache::default()
            },
            ..RawSettings::default()
        };
        let errors = Settings::try_from(raw).unwrap_err().to_string();
        for key in [
            "`upstream`",
            "`listen`",
            "`request_timeout`",
            "`cache.fresh_for`",
        ] {
            assert!(errors.contains(key), "{key} missing from: {errors}");
        }
    }

    #[test]
    fn a_password_in_the_upstream_is_refused_without_being_repeated() {
        for upstream in [
            "http://svc:hunter2@catalog:8181/iceberg",
            "http:/svc:hunter2@catalog:8181",
            "http:svc:hunter2@catalog",
            "svc:hunter2@catalog",
            "http://svc:hunter2@",
        ] {
            let raw = RawSettings {
                upstream: Some(upstream.into()),
                ..RawSettings::default()
            };
            let errors = Settings::try_from(raw).unwrap_err().to_string();
            assert!(errors.contains("`upstream`"), "{errors}");
            assert!(!errors.contains("hunter2"), "{upstream}: {errors}");
        }
    }

    #[test]
    fn the_upstream_base_path_is_kept_without_its_trailing_slash() {
        let raw = RawSettings {
            upstream: Some("http://gravitino:9001/iceberg/".into()),
            ..RawSettings::default()
        };
        let s = Settings::try_from(raw).unwrap();
        assert_eq!(s.upstream.base_path, "/iceberg");
        assert_eq!(s.upstream.authority.as_str(), "gravitino:9001");
    }

    #[test]
    fn an_admin_port_off_loopback_needs_a_token() {
        let open = RawSettings {
            admin_listen: Some("0.0.0.0:9181".into()),
            ..with_upstream()
        };
        let errors = Settings::try_from(open.clone()).unwrap_err().to_string();
        assert!(errors.contains("admin_token"), "{errors}");
        let guarded = RawSettings {
            admin_token: Some("t".into()),
            ..open
        };
        assert!(Settings::try_from(guarded).is_ok());
    }

    #[test]
    fn an_entry_bound_above_the_cache_bound_is_refused() {
        let raw = RawSettings {
            cache: RawCache {
                max_bytes: Some(SizeText::Text("1MiB".into())),
                max_entry_bytes: Some(SizeText::Text("2MiB".into())),
                ..RawCache::default()
            },
            ..with_upstream()
        };
        let errors = Settings::try_from(raw).unwrap_err().to_string();
        assert!(errors.contains("cache.max_entry_bytes"), "{errors}");
    }
}
