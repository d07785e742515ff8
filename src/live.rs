//! The configuration in force, replaced as a whole on SIGHUP. Requests read it once and keep
//! that snapshot; settings that cannot change without a restart are carried over from the
//! running configuration and reported.

use std::sync::{Arc, RwLock};

use crate::config::Config;

pub struct Live {
    current: RwLock<Arc<Config>>,
}

impl Live {
    pub fn new(config: Config) -> Self {
        Live {
            current: RwLock::new(Arc::new(config)),
        }
    }

    pub fn get(&self) -> Arc<Config> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts `new` in force, keeping from the running configuration what only a restart can
    /// change. Returns the keys whose new values were not applied.
    pub fn reload(&self, mut new: Config) -> Vec<&'static str> {
        let old = self.get();
        let mut kept = Vec::new();
        macro_rules! keep {
            ($($($field:ident).+ => $key:literal),+ $(,)?) => {$(
                if format!("{:?}", new.$($field).+) != format!("{:?}", old.$($field).+) {
                    kept.push($key);
                    new.$($field).+ = old.$($field).+.clone();
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
            max_header_bytes => "max_header_bytes",
            max_connections => "max_connections",
            shutdown_grace => "shutdown_grace",
            namespace_separator => "namespace_separator",
            auth_headers => "auth_headers",
            cache.enabled => "cache.enabled",
            cache.max_bytes => "cache.max_bytes",
        }
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        kept
    }
}
