//! icecache: a caching reverse proxy for Apache Iceberg REST catalogs.

pub mod admin;
pub mod body;
pub mod cache;
pub mod catalog_config;
pub mod config;
pub mod credentials;
pub mod error;
pub mod etag;
pub mod header_case;
pub mod headers;
pub mod identity;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod route;
pub mod server;
pub mod upstream;

use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cache::TableCache;
use crate::catalog_config::Separator;
use crate::config::Config;
use crate::identity::IdentityHasher;
use crate::metrics::Metrics;
use crate::proxy::AppState;
use crate::server::Limits;
use crate::upstream::Upstream;

#[derive(Debug, Error)]
pub enum RunError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot make the identity key: {0}")]
    Random(getrandom::Error),
    #[error(transparent)]
    HeaderCase(#[from] header_case::HeaderCaseError),
}

/// Runs both listeners until `shutdown` turns true, then drains in-flight requests.
pub async fn run(config: Config, shutdown: watch::Receiver<bool>) -> Result<(), RunError> {
    let proxy_listener = bind("proxy", config.listen).await?;
    let admin_listener = bind("admin", config.admin_listen).await?;
    let metrics = Arc::new(Metrics::new());
    let upstream = Arc::new(Upstream::new(&config, metrics.clone()));
    let case_extensions = header_case::canonical_case_extensions().await?;
    let cache = config
        .cache
        .enabled
        .then(|| TableCache::new(&config, upstream.clone(), metrics.clone(), case_extensions));
    let limits = Limits {
        max_header_bytes: config.max_header_bytes,
        header_read_timeout: config.header_read_timeout,
        max_connections: config.max_connections,
        shutdown_grace: config.shutdown_grace,
    };
    let state = Arc::new(AppState {
        separator: Separator::new(&config.namespace_separator),
        identity: IdentityHasher::random(config.auth_headers.clone()).map_err(RunError::Random)?,
        config,
        upstream,
        metrics,
        cache,
    });
    tracing::info!(
        listen = %proxy_listener.local_addr().map_err(|e| bind_error("proxy", state.config.listen, e))?,
        admin = %admin_listener.local_addr().map_err(|e| bind_error("admin", state.config.admin_listen, e))?,
        upstream = %state.config.upstream,
        "icecache started"
    );

    let admin_state = state.clone();
    let admin = tokio::spawn(server::serve(
        admin_listener,
        limits.clone(),
        shutdown.clone(),
        move |request, _peer| admin::handle(admin_state.clone(), request),
    ));
    let proxy_state = state.clone();
    server::serve(proxy_listener, limits, shutdown, move |request, peer| {
        proxy::handle(proxy_state.clone(), request, peer)
    })
    .await;
    let _ = admin.await;
    tracing::info!("icecache stopped");
    Ok(())
}

fn bind_error(what: &'static str, addr: std::net::SocketAddr, source: std::io::Error) -> RunError {
    RunError::Bind { what, addr, source }
}

async fn bind(what: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, RunError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(what, addr, e))
}
