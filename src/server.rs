//! Accepting connections: HTTP/1.1 and HTTP/2 (prior knowledge, or ALPN under TLS) on one
//! port, bounded request heads and head-read time, a connection limit, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
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

/// The two protocol builders, configured once per listener.
struct Protocols {
    http1: hyper::server::conn::http1::Builder,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
}

impl Protocols {
    fn new(limits: &Limits) -> Self {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_header_size(limits.max_header_bytes)
            // With the case map set on a response (see `header_case`), `ETag` is written as
            // `ETag`.
            .preserve_header_case(true)
            .keep_alive(true);
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
        Protocols { http1, http2 }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection speaks HTTP/2 (prior knowledge), from its first bytes, without
/// consuming them. None when the client closed or sent nothing in time: a connection that
/// never speaks must not hold a slot.
async fn speaks_h2(stream: &TcpStream, deadline: Duration) -> Option<bool> {
    let detect = async {
        let mut seen = [0u8; 24];
        loop {
            stream.readable().await.ok()?;
            let n = stream.peek(&mut seen).await.ok()?;
            if n == 0 {
                return None;
            }
            if seen[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // A preface split across packets: the bytes stay readable, so wait a little.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(deadline, detect).await.ok().flatten()
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
    let protocols = Arc::new(Protocols::new(&limits));
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
        let (protocols, watcher, tls) = (protocols.clone(), graceful.watcher(), tls.clone());
        let deadline = limits.header_read_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |request| handler(request, peer));
            let result = match tls {
                None => match speaks_h2(&stream, deadline).await {
                    Some(h2) => serve_io(&protocols, watcher, stream, h2, service).await,
                    None => return,
                },
                Some(acceptor) => {
                    // The handshake is bounded like a request head.
                    let stream = match tokio::time::timeout(deadline, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    serve_io(&protocols, watcher, stream, h2, service).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
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

async fn serve_io<I, S>(
    protocols: &Protocols,
    watcher: Watcher,
    io: I,
    h2: bool,
    service: S,
) -> Result<(), hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let io = TokioIo::new(io);
    if h2 {
        watcher
            .watch(protocols.http2.serve_connection(io, service))
            .await
    } else {
        watcher
            .watch(protocols.http1.serve_connection(io, service))
            .await
    }
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // A dropped sender means nobody can ask for a stop any more: keep serving.
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}
