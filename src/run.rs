//! Running icecache: bind both listeners (a taken port fails before anything starts), build the
//! shared state, start the proxy workers (thread per core, each with its own runtime and
//! `SO_REUSEPORT` listener, so a connection's requests never hop threads) and, on the calling
//! thread's runtime, the admin listener, the certificate watchers and the reload loop. The
//! proxy and the operator's surface never share a thread.

use std::net::SocketAddr;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{access_log, endpoints as admin};
use crate::cache::tier::{self, Tier};
use crate::cache::{self, Cache, CacheParts, Cause};
use crate::catalog::config_rewrite::Separator;
use crate::catalog::endpoints::CatalogHeads;
use crate::cluster::Cluster;
use crate::config::{Raw, Settings};
use crate::events::{self, Liveness, SourceId};
use crate::listener::server::{self, Limits};
use crate::listener::{header_case, tls};
use crate::origin::Origin;
use crate::policy::identity::IdentityHasher;
use crate::policy::stage::Stage;
use crate::proxy;
use crate::redis_replays::RedisReplays;
use crate::redis_tier::RedisTier;
use crate::replays::{LocalReplays, ReplayStore};
use crate::state::State;
use crate::telemetry::logging::SetLogLevel;
use crate::telemetry::{EventMetrics, Metrics, Reloaded};

#[derive(Debug, Error)]
pub enum RunError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
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
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// How to re-read the configuration on SIGHUP: the command line's raw settings (flags and
/// environment, which still win over the file) and the log filter to update.
pub struct Reload {
    pub cli: Raw,
    pub set_log_level: SetLogLevel,
}

/// Runs until `shutdown` turns true, then drains in-flight requests.
pub async fn run(
    settings: Settings,
    reload: Option<Reload>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let proxy_listeners = bind_proxy(settings.listen, settings.workers)?;
    let admin_listener = TcpListener::bind(settings.admin_listen)
        .await
        .map_err(|e| bind_error("admin", settings.admin_listen, e))?;
    // The addresses as bound: with port 0 the system picked them, and only this line says which.
    let listening = proxy_listeners[0]
        .local_addr()
        .map_err(|e| bind_error("proxy", settings.listen, e))?;
    let admin_listening = admin_listener
        .local_addr()
        .map_err(|e| bind_error("admin", settings.admin_listen, e))?;
    let metrics = Arc::new(Metrics::new());
    let (origin, client_cert) = Origin::new(
        settings.upstream.clone(),
        &settings.upstream_tls,
        settings.connect_timeout,
        settings.request_timeout,
        settings.upstream_limits,
        metrics.upstream.clone(),
    )?;
    let origin = Arc::new(origin);
    if let Some(cert) = client_cert {
        tokio::spawn(tls::watch_certificate(
            cert,
            settings.upstream_tls.reload_every,
            shutdown.clone(),
        ));
    }
    let acceptor = match &settings.tls {
        Some(listener_tls) => {
            let (server_config, cert) = tls::server_config(listener_tls)?;
            tokio::spawn(tls::watch_certificate(
                cert,
                listener_tls.reload_every,
                shutdown.clone(),
            ));
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(server_config)))
        }
        None => None,
    };
    let case = header_case::canonical_case_extensions().await?;
    let limits = Limits {
        max_header_bytes: settings.max_header_bytes,
        header_read_timeout: settings.header_read_timeout,
        idle_timeout: settings.idle_timeout,
        max_connections: settings.max_connections,
        shutdown_grace: settings.shutdown_grace,
    };
    // Replicas of a tier must agree on scopes: they key them with the shared secret.
    let identity = match &settings.cluster {
        Some(cluster) => IdentityHasher::with_key(
            cluster.key.subkey("scopes"),
            settings.identity_headers.clone(),
        ),
        None => {
            IdentityHasher::random(settings.identity_headers.clone()).map_err(RunError::Random)?
        }
    };
    let cluster = match (&settings.cluster, settings.cache.enabled) {
        (Some(cluster), true) => Some(Cluster::start(cluster.clone(), metrics.cluster.clone())?),
        _ => None,
    };
    let mut sources = Vec::new();
    if settings.events.seaweedfs_token.is_some() {
        sources.push(SourceId::SeaweedFs);
    }
    if settings.events.nats.is_some() {
        sources.push(SourceId::Nats);
    }
    if settings.events.kafka.is_some() {
        sources.push(SourceId::Kafka);
    }
    let liveness = Arc::new(Liveness::new(&sources, metrics.events.clone()));
    let stage = Arc::new(Stage::new(metrics.credentials.clone()));
    let tier: Arc<dyn Tier> = match &cluster {
        Some(cluster) => Arc::new(RedisTier::new(
            cluster.clone(),
            cache::retain_for(&settings),
        )),
        None => Arc::new(tier::Local),
    };
    // Replays live where a retry on any replica finds them.
    let replays: Arc<dyn ReplayStore> = match &cluster {
        Some(cluster) => Arc::new(RedisReplays::new(cluster.clone())),
        None => Arc::new(LocalReplays::new()),
    };
    let cache = settings.cache.enabled.then(|| {
        Cache::new(
            &settings,
            CacheParts {
                origin: origin.clone(),
                tier: tier.clone(),
                metrics: metrics.cache.clone(),
                stage: stage.clone(),
                case: case.clone(),
                events: liveness.clone(),
            },
        )
    });
    if let (Some(cluster), Some(cache)) = (&cluster, &cache) {
        if let Some(mut announced) = cluster.invalidations() {
            let cache = cache.clone();
            tokio::spawn(async move {
                while let Some(invalidation) = announced.recv().await {
                    cache.invalidate(&invalidation.touched, Cause::Tier);
                    if let Some(dropped) = invalidation.dropped {
                        let _ = dropped.send(());
                    }
                }
            });
        }
    }
    tracing::info!(
        listen = %listening,
        admin = %admin_listening,
        workers = settings.workers,
        upstream = %settings.upstream,
        "icecache started"
    );
    if let Some(nats) = settings.events.nats.clone() {
        let subscriber = events::nats::Subscriber {
            settings: nats,
            liveness: liveness.clone(),
            metrics: metrics.events.clone(),
            apply: apply_events(cache.clone(), metrics.events.clone(), SourceId::Nats),
        };
        tokio::spawn(subscriber.run(shutdown.clone()));
    }
    if let Some(kafka) = settings.events.kafka.clone() {
        let subscriber = events::kafka::Subscriber {
            settings: kafka,
            liveness: liveness.clone(),
            metrics: metrics.events.clone(),
            apply: apply_events(cache.clone(), metrics.events.clone(), SourceId::Kafka),
        };
        tokio::spawn(subscriber.run(shutdown.clone()));
    }
    // The webhook's receiver is the admin listener, bound above: nothing is missed from here.
    if settings.events.seaweedfs_token.is_some() {
        liveness.up(SourceId::SeaweedFs);
    }
    let workers = settings.workers;
    let state = Arc::new(State {
        separator: Separator::new(&settings.namespace_separator),
        heads: CatalogHeads::default(),
        settings: State::in_force(settings),
        origin,
        cache,
        tier,
        replays,
        metrics,
        stage,
        identity,
        case,
        events: liveness,
    });
    if let Some(reload) = reload {
        tokio::spawn(reload_on_sighup(state.clone(), reload, shutdown.clone()));
    }

    // The connection limit is shared out among the workers' listeners.
    let worker_limits = Limits {
        max_connections: limits.max_connections.div_ceil(workers),
        ..limits.clone()
    };
    let mut threads = Vec::new();
    for (n, listener) in proxy_listeners.into_iter().enumerate() {
        let (state, limits, shutdown) = (state.clone(), worker_limits.clone(), shutdown.clone());
        let acceptor = acceptor.clone();
        let thread = std::thread::Builder::new()
            .name(format!("icecache-worker-{n}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(serve_proxy(listener, acceptor, state, limits, shutdown))
            })
            .map_err(RunError::Thread)?;
        threads.push(thread);
    }
    let admin_state = state.clone();
    server::serve(admin_listener, None, limits, shutdown, move |_peer| {
        let state = admin_state.clone();
        hyper::service::service_fn(move |request| {
            let state = state.clone();
            async move { Ok(admin::handle(state, request).await) }
        })
    })
    .await;
    let joined = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|thread| thread.join())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    // Drained: the other replicas need not wait for this one's heartbeat to lapse.
    state.tier.leave().await;
    for result in joined {
        match result {
            Ok(result) => result?,
            Err(_) => tracing::error!("a worker thread panicked"),
        }
    }
    tracing::info!("icecache stopped");
    Ok(())
}

async fn serve_proxy(
    listener: std::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<State>,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) -> Result<(), std::io::Error> {
    let listener = TcpListener::from_std(listener)?;
    let sensitive: Arc<[http::HeaderName]> = state.settings().identity_headers.clone().into();
    server::serve(listener, acceptor, limits, shutdown, move |peer| {
        let (state, sensitive) = (state.clone(), sensitive.clone());
        let memo = proxy::Memo::<proxy::Derived>::default();
        // hyper's service calls this as soon as it has read the head (tower's would wait for
        // the first poll of its future): a hit is answered, and its request dropped, before the
        // connection reads on.
        hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
            // Credentials are marked sensitive before anything could log them.
            crate::wire::sensitive::mark(request.headers_mut(), &sensitive);
            // Every request is logged once, answered or not, under the id the catalog is sent.
            let entry = access_log::Entry::begin(&request);
            let id = entry.id().clone();
            // A hit comes back answered; anything that waits comes back as one boxed future,
            // moved as a pointer through hyper-util's and the connection's layers.
            let answer = proxy::handle(&state, request, peer, id, &memo);
            entry.around(answer, &state.metrics.requests)
        })
    })
    .await;
    Ok(())
}

/// Re-reads the config file on every SIGHUP until shutdown. An invalid file is refused and the
/// running configuration stays; settings that need a restart keep their running values.
async fn reload_on_sighup(state: Arc<State>, reload: Reload, mut shutdown: watch::Receiver<bool>) {
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

fn reload_now(state: &State, reload: &Reload) {
    let (new, kept) = match state.settings().reloaded(&reload.cli) {
        Ok(reloaded) => reloaded,
        Err(e) => {
            state.metrics.reload(Reloaded::Rejected);
            tracing::error!(error = %e, "configuration reload refused; the running configuration stays");
            return;
        }
    };
    if let Err(e) = (reload.set_log_level)(&new.log_level) {
        tracing::warn!(error = %e, "log level not changed");
    }
    state.put_in_force(new);
    if !kept.is_empty() {
        tracing::warn!(
            keys = ?kept,
            "configuration reloaded; these settings need a restart and keep their running values"
        );
    }
    state.metrics.reload(Reloaded::Applied);
    tracing::info!("configuration reloaded");
}

/// How a source's changes reach the cache: invalidated here and across the tier, counted.
fn apply_events(
    cache: Option<Arc<Cache>>,
    metrics: Arc<EventMetrics>,
    source: SourceId,
) -> events::Apply {
    Arc::new(move |change: events::Change| {
        let (cache, metrics) = (cache.clone(), metrics.clone());
        Box::pin(async move {
            let Some(cache) = cache else { return 0 };
            let removed = cache
                .invalidate_in_everywhere(&change.prefixes, &change.touched, Cause::Event)
                .await;
            metrics.invalidated(source, removed);
            removed
        })
    })
}

fn bind_error(what: &'static str, addr: SocketAddr, source: std::io::Error) -> RunError {
    RunError::Bind { what, addr, source }
}

/// One listener per worker, all on one port. An explicit port is first bound plainly, which
/// fails if anything listens there (SO_REUSEPORT alone would let a second icecache share it
/// unnoticed); with port 0 the first worker's socket takes a port the system picks, and the
/// others join it.
fn bind_proxy(addr: SocketAddr, workers: usize) -> Result<Vec<std::net::TcpListener>, RunError> {
    if addr.port() != 0 {
        std::net::TcpListener::bind(addr).map_err(|e| bind_error("proxy", addr, e))?;
    }
    let first = bind_reuseport(addr)?;
    let port = first
        .local_addr()
        .map_err(|e| bind_error("proxy", addr, e))?;
    let mut listeners = vec![first];
    for _ in 1..workers.max(1) {
        listeners.push(bind_reuseport(port)?);
    }
    Ok(listeners)
}

/// A non-blocking listener that shares its address with the other workers' listeners.
fn bind_reuseport(addr: SocketAddr) -> Result<std::net::TcpListener, RunError> {
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
