//! Accepting connections: HTTP/1.1 and HTTP/2 (prior knowledge) on one port, bounded request
//! heads and head-read time, a connection limit, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::body::Body;

/// Connection limits of one listener.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

/// Serves `handler` on `listener` until `shutdown` turns true, then lets in-flight requests
/// finish for up to `limits.shutdown_grace`.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes)
        // With the case map set on a response (see `header_case`), `ETag` is written as `ETag`.
        .preserve_header_case(true)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));

    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = service_fn(move |request| handler(request, peer));
        match &tls {
            None => {
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            Some(acceptor) => {
                // The handshake is bounded like a request head: a client that stalls is dropped.
                let handshake =
                    tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                let (builder, watcher) = (builder.clone(), graceful.watcher());
                tokio::spawn(async move {
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    if let Err(e) = watcher.watch(connection).await {
                        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?limits.shutdown_grace,
            "in-flight requests still running after the shutdown grace period; closing them"
        );
    }
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // A dropped sender means nobody can ask for a stop any more: keep serving.
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}
