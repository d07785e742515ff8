//! The raw settings into typed `Settings`: every value read by its declaration
//! (`values::Values`), then the rules that tie keys together; every problem collected and
//! reported in one run (each naming its key and what would be valid).

use std::net::SocketAddr;
use std::sync::Arc;

use http::uri::Scheme;
use http::{HeaderName, Uri};

use super::error::ConfigErrors;
use super::raw::Raw;
use super::settings::{CacheSettings, Settings};
use super::values::Values;
use crate::listener::tls::{self, ListenerTls, UpstreamTls};
use crate::origin::gate::Limits;
use crate::origin::UpstreamUrl;
use crate::policy::identity::identity_headers;
use crate::policy::{self, InjectSource, KeyPatterns, PolicySettings};
use crate::replays::Idempotency;
use crate::secret::Secret;
use crate::telemetry::logging::LogFormat;

mod cluster;
mod events;

/// An address, `IP:PORT`.
fn addr(v: &mut Values, name: &str) -> SocketAddr {
    let text = v.text(name).unwrap_or_default();
    let parsed = text
        .parse()
        .map_err(|_| format!("{text:?} is not a socket address: use IP:PORT, e.g. 127.0.0.1:8181"));
    v.or(name, parsed, ([127, 0, 0, 1], 0).into())
}

impl TryFrom<&Raw> for Settings {
    type Error = ConfigErrors;

    fn try_from(raw: &Raw) -> Result<Settings, ConfigErrors> {
        let mut p = Values::new(raw);
        let upstream = p.text("upstream");
        let upstream = p.or("upstream", parse_upstream(upstream.as_deref()), None);
        if let Some(upstream) = &upstream {
            p.show("upstream", upstream.to_string());
        }
        let listen = addr(&mut p, "listen");
        let admin_listen = addr(&mut p, "admin_listen");
        let admin_token = p
            .text("admin_token")
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
        let log_level = p.text("log_level").unwrap_or_default();
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            p.add(
                "log_level",
                format!("{log_level:?} is not a log filter: {e}"),
            );
        }
        let connect_timeout = p.duration("connect_timeout");
        let request_timeout = p.duration("request_timeout");
        let upstream_limits = Limits {
            max_in_flight: whole(p.count("upstream_max_in_flight")),
            queue: whole(p.count("upstream_queue")),
            queue_timeout: p.duration("upstream_queue_timeout"),
        };
        let idempotency = p
            .choice::<Idempotency>("idempotency")
            .unwrap_or(Idempotency::PassThrough);
        let idempotency_key_lifetime = p.duration("idempotency_key_lifetime");
        let header_read_timeout = p.duration("header_read_timeout");
        let idle_timeout = p.duration("idle_timeout");
        let shutdown_grace = p.duration("shutdown_grace");
        let authz_ttl = p.duration("authz_ttl");
        let max_header_bytes = p.size("max_header_bytes");
        let max_connections = p.count("max_connections").unwrap_or(1);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = p
            .count("workers")
            .map_or(cpus, |w| usize::try_from(w).unwrap_or(cpus));
        p.show("workers", workers.to_string());
        let namespace_separator = p.text("namespace_separator").unwrap_or_default();
        if namespace_separator.is_empty() || namespace_separator.contains('/') {
            p.add(
                "namespace_separator",
                "must be a non-empty URL-encoded separator without '/'",
            );
        }
        let public_url = p
            .text("public_url")
            .map(|u| parse_public_url(&u))
            .transpose();
        let public_url = p.or("public_url", public_url, None);
        let auth_headers: Vec<HeaderName> = p
            .list("auth_headers")
            .iter()
            .flatten()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|h| match HeaderName::from_bytes(h.as_bytes()) {
                Ok(name) => Some(name),
                Err(_) => {
                    p.add("auth_headers", format!("{h:?} is not a header name"));
                    None
                }
            })
            .collect();
        let strip = Arc::new(match p.list("strip_keys") {
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
        for pattern in strip.framing() {
            p.add(
                "strip_keys",
                format!(
                    "{pattern:?} would remove a header that frames or labels every answer \
                     (`content-encoding`, `content-type`, `content-length`, \
                     `transfer-encoding`, `date`, `connection`): name only credential keys"
                ),
            );
        }
        let base = PolicySettings {
            identity: p.given_choice("identity"),
            credentials: p.given_choice("credentials"),
            inject: p.table::<std::collections::BTreeMap<String, InjectSource>>("inject"),
        };
        let prefixes = p
            .table::<std::collections::BTreeMap<String, PolicySettings>>("prefixes")
            .unwrap_or_default();
        let policies = match policy::build_all(&base, &prefixes, &strip) {
            Ok(policies) => {
                p.show("identity", policies.default.identity.as_str());
                p.show("credentials", policies.default.credentials.as_str());
                Some(policies)
            }
            Err(errors) => {
                for (key, error) in errors {
                    p.add(&key, error.to_string());
                }
                None
            }
        };
        let tls = listener_tls(&mut p);
        let upstream_tls = upstream_tls(upstream.as_ref(), &mut p);
        let cache = cache(&mut p);
        let cluster = cluster::settings(&mut p);
        let events = events::settings(&mut p);
        if events.fresh_for.is_some_and(|f| f < cache.fresh_for) {
            p.add(
                "events.fresh_for",
                "must be at least cache.fresh_for (events lengthen freshness, never shorten it)",
            );
        }
        let log_format = p
            .choice::<LogFormat>("log_format")
            .unwrap_or(LogFormat::Text);
        let Values {
            problems, shown, ..
        } = p;
        match (upstream, policies) {
            (Some(upstream), Some(policies)) if problems.is_empty() => Ok(Settings {
                upstream,
                upstream_tls,
                listen,
                admin_listen,
                tls,
                log_format,
                log_level,
                connect_timeout,
                request_timeout,
                upstream_limits,
                idempotency,
                idempotency_key_lifetime,
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
                raw: raw.clone(),
                shown,
            }),
            _ => Err(ConfigErrors(problems)),
        }
    }
}

fn cache(p: &mut Values) -> CacheSettings {
    let max_bytes = p.size("cache.max_bytes");
    let default_entry = super::keys::key("cache.max_entry_bytes")
        .and_then(|k| k.default_value())
        .and_then(super::units::parse_size)
        .unwrap_or_default()
        .min(max_bytes);
    let max_entry_bytes = p.size_or("cache.max_entry_bytes", default_entry);
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
        enabled: p.flag("cache.enabled"),
        gzip: p.flag("cache.gzip"),
        max_bytes,
        max_entry_bytes,
        fresh_for: p.duration("cache.fresh_for"),
        stale_while_revalidate: p.duration("cache.stale_while_revalidate"),
        stale_if_error: p.duration("cache.stale_if_error"),
    }
}

/// The listener's TLS paths, loaded once here so a bad file fails the config check.
fn listener_tls(p: &mut Values) -> Option<ListenerTls> {
    let reload_every = p.duration("tls_reload_interval");
    let (cert, key, client_ca) = (
        p.path("tls_cert"),
        p.path("tls_key"),
        p.path("tls_client_ca"),
    );
    let tls = match (cert, key) {
        (None, None) => {
            if client_ca.is_some() {
                p.add(
                    "tls_client_ca",
                    "verifies client certificates on an HTTPS listener: set tls_cert and tls_key too",
                );
            }
            return None;
        }
        (Some(cert), Some(key)) => ListenerTls {
            cert,
            key,
            client_ca,
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

fn upstream_tls(upstream: Option<&UpstreamUrl>, p: &mut Values) -> UpstreamTls {
    let (cert, key) = (
        p.path("upstream_client_cert"),
        p.path("upstream_client_key"),
    );
    let client_cert = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
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
        ca: p.path("upstream_ca"),
        client_cert,
        reload_every: p.duration("tls_reload_interval"),
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

/// A count as a `usize` (a count over the machine's word is as good as unbounded).
fn whole(count: Option<u64>) -> usize {
    count.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::with_upstream;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let pairs: Vec<(&str, toml::Value)> = pairs
            .iter()
            .map(|(k, v)| (*k, toml::Value::from(*v)))
            .collect();
        let raw = Raw::of(&pairs).map_err(|e| e.to_string())?;
        Settings::try_from(&raw).map_err(|e| e.to_string())
    }

    #[test]
    fn every_invalid_setting_is_reported_in_one_run() {
        let errors = settings(&[
            ("listen", "nowhere"),
            ("request_timeout", "soon"),
            ("cache.fresh_for", "five"),
        ])
        .unwrap_err();
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
            let errors = settings(&[("upstream", upstream)]).unwrap_err();
            assert!(errors.contains("`upstream`"), "{errors}");
            assert!(!errors.contains("hunter2"), "{upstream}: {errors}");
        }
    }

    #[test]
    fn the_upstream_base_path_is_kept_without_its_trailing_slash() {
        let s = settings(&[("upstream", "http://gravitino:9001/iceberg/")]).unwrap();
        assert_eq!(s.upstream.base_path, "/iceberg");
        assert_eq!(s.upstream.authority.as_str(), "gravitino:9001");
    }

    #[test]
    fn an_admin_port_off_loopback_needs_a_token() {
        let open = [("upstream", "http://a:1"), ("admin_listen", "0.0.0.0:9181")];
        let errors = settings(&open).unwrap_err();
        assert!(errors.contains("admin_token"), "{errors}");
        let mut guarded = open.to_vec();
        guarded.push(("admin_token", "t"));
        assert!(settings(&guarded).is_ok());
    }

    #[test]
    fn an_entry_bound_above_the_cache_bound_is_refused() {
        let errors = settings(&[
            ("upstream", "http://a:1"),
            ("cache.max_bytes", "1MiB"),
            ("cache.max_entry_bytes", "2MiB"),
        ])
        .unwrap_err();
        assert!(errors.contains("cache.max_entry_bytes"), "{errors}");
    }

    #[test]
    fn bounds_come_from_the_declarations() {
        let errors = settings(&[
            ("upstream", "http://a:1"),
            ("max_header_bytes", "4KiB"),
            ("workers", "2000"),
            ("connect_timeout", "0s"),
            ("cluster.redis_url", "redis://r:6379"),
            ("cluster.member_timeout", "1s"),
        ])
        .unwrap_err();
        for (key, why) in [
            ("max_header_bytes", "below the minimum of 8KiB"),
            ("workers", "use 1 to 1024"),
            ("connect_timeout", "longer than 0s"),
            ("cluster.member_timeout", "at least 5s"),
        ] {
            assert!(
                errors.contains(&format!("`{key}`: ")) && errors.contains(why),
                "{key}: {errors}"
            );
        }
        assert!(Settings::try_from(&with_upstream()).is_ok());
    }
}
