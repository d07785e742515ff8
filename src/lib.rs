//! icecache: a caching reverse proxy for Apache Iceberg REST catalogs.

pub mod admin;
pub mod body;
pub mod cache;
pub mod catalog_config;
pub mod config;
pub mod credentials;
pub mod error;
pub mod etag;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod header_case;
pub mod headers;
pub mod identity;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod probe;
pub mod proxy;
pub mod route;
pub mod server;
pub mod tls;
pub mod upstream;

use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cache::TableCache;
use crate::catalog_config::Separator;
use crate::config::Config;
use crate::identity::IdentityHasher;
use crate::live::Live;
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
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    #[error("a proxy worker failed: {0}")]
    Worker(#[from] std::io::Error),
}

/// Runs both listeners until `shutdown` turns true, then drains in-flight requests.
///
/// The proxy runs thread-per-core: `config.workers` threads, each with a single-threaded
/// runtime and its own `SO_REUSEPORT` listener on the proxy address, so a connection's requests
/// never hop between threads (measured: cross-thread wake-ups cost more than the work of a
/// cache hit). Shared state (cache, pool, metrics) is one `Arc` for all of them.
pub async fn run(
    config: Config,
    reload: Option<Reload>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    // SO_REUSEPORT would also let a second icecache share the port unnoticed: a plain bind
    // first fails if anything listens there already, and fixes the port when 0 was asked for.
    let listen = std::net::TcpListener::bind(config.listen)
        .and_then(|probe| probe.local_addr())
        .map_err(|e| bind_error("proxy", config.listen, e))?;
    let proxy_listeners = (0..config.workers)
        .map(|_| bind_reuseport(listen))
        .collect::<Result<Vec<_>, _>>()?;
    let admin_listener = TcpListener::bind(config.admin_listen)
        .await
        .map_err(|e| bind_error("admin", config.admin_listen, e))?;
    let metrics = Arc::new(Metrics::new());
    let (upstream, client_cert) = Upstream::new(&config, metrics.clone())?;
    let upstream = Arc::new(upstream);
    if let Some(cert) = client_cert {
        tokio::spawn(tls::watch_certificate(
            cert,
            config.upstream_tls.reload_every,
            shutdown.clone(),
        ));
    }
    let acceptor = match &config.tls {
        Some(tls) => {
            let (server_config, cert) = tls::server_config(tls)?;
            tokio::spawn(tls::watch_certificate(
                cert,
                tls.reload_every,
                shutdown.clone(),
            ));
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(server_config)))
        }
        None => None,
    };
    let case_extensions = header_case::canonical_case_extensions().await?;
    let limits = Limits {
        max_header_bytes: config.max_header_bytes,
        header_read_timeout: config.header_read_timeout,
        max_connections: config.max_connections,
        shutdown_grace: config.shutdown_grace,
    };
    let separator = Separator::new(&config.namespace_separator);
    let identity = IdentityHasher::random(config.auth_headers.clone()).map_err(RunError::Random)?;
    let cache_enabled = config.cache.enabled;
    let live = Arc::new(Live::new(config));
    let cache = cache_enabled.then(|| {
        TableCache::new(
            live.clone(),
            upstream.clone(),
            metrics.clone(),
            case_extensions,
        )
    });
    let state = Arc::new(AppState {
        separator,
        identity,
        live,
        upstream,
        metrics,
        cache,
    });
    let config = state.config();
    tracing::info!(
        listen = %config.listen,
        admin = %config.admin_listen,
        workers = config.workers,
        upstream = %config.upstream,
        "icecache started"
    );
    if let Some(reload) = reload {
        tokio::spawn(reload_on_sighup(state.clone(), reload, shutdown.clone()));
    }

    let admin_state = state.clone();
    let admin = tokio::spawn(server::serve(
        admin_listener,
        None,
        limits.clone(),
        shutdown.clone(),
        move |request, _peer| admin::handle(admin_state.clone(), request),
    ));
    // The connection limit is shared out among the workers' listeners.
    let limits = Limits {
        max_connections: limits.max_connections.div_ceil(config.workers),
        ..limits
    };
    let mut listeners = proxy_listeners.into_iter();
    let own = listeners.next();
    let mut threads = Vec::new();
    for (n, listener) in listeners.enumerate() {
        let (state, limits, shutdown) = (state.clone(), limits.clone(), shutdown.clone());
        let acceptor = acceptor.clone();
        let thread = std::thread::Builder::new()
            .name(format!("icecache-worker-{}", n + 1))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(serve_proxy(listener, acceptor, state, limits, shutdown))
            })
            .map_err(RunError::Thread)?;
        threads.push(thread);
    }
    if let Some(listener) = own {
        serve_proxy(listener, acceptor, state.clone(), limits, shutdown).await?;
    }
    for thread in threads {
        match thread.join() {
            Ok(result) => result?,
            Err(_) => tracing::error!("a worker thread panicked"),
        }
    }
    let _ = admin.await;
    tracing::info!("icecache stopped");
    Ok(())
}

async fn serve_proxy(
    listener: std::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<AppState>,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) -> Result<(), std::io::Error> {
    let listener = TcpListener::from_std(listener)?;
    server::serve(
        listener,
        acceptor,
        limits,
        shutdown,
        move |request, peer| proxy::handle(state.clone(), request, peer),
    )
    .await;
    Ok(())
}

/// How to re-read the configuration on SIGHUP: the command line's settings (flags and
/// environment, which still win over the file) and the log filter to update.
pub struct Reload {
    pub cli: config::Settings,
    pub set_log_level: logging::SetLogLevel,
}

/// Re-reads the config file on every SIGHUP until shutdown. An invalid file is refused and the
/// running configuration stays; settings that need a restart keep their running values.
async fn reload_on_sighup(
    state: Arc<AppState>,
    reload: Reload,
    mut shutdown: watch::Receiver<bool>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; configuration reload is off");
            return;
        };
        loop {
            tokio::select! {
                _ = hangups.recv() => reload_now(&state, &reload),
                changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return },
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (state, reload, shutdown.changed().await);
    }
}

fn reload_now(state: &AppState, reload: &Reload) {
    let result = |label: &str| {
        state
            .metrics
            .config_reloads
            .with_label_values(&[label])
            .inc()
    };
    let new = match config::load(reload.cli.clone()) {
        Ok(new) => new,
        Err(e) => {
            result("rejected");
            tracing::error!(error = %e, "configuration reload refused; the running configuration stays");
            return;
        }
    };
    if let Err(e) = (reload.set_log_level)(&new.log_level) {
        tracing::warn!(error = %e, "log level not changed");
    }
    let kept = state.live.reload(new);
    if !kept.is_empty() {
        tracing::warn!(
            keys = ?kept,
            "configuration reloaded; these settings need a restart and keep their running values"
        );
    }
    result("applied");
    tracing::info!("configuration reloaded");
}

fn bind_error(what: &'static str, addr: std::net::SocketAddr, source: std::io::Error) -> RunError {
    RunError::Bind { what, addr, source }
}

/// A non-blocking listener that shares its address with the other workers' listeners.
fn bind_reuseport(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, RunError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bound = (|| {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    })();
    bound.map_err(|e| bind_error("proxy", addr, e))
}
