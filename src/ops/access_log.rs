//! The access log and the request metrics, as one tower layer around the proxy service: the
//! handler says what it did (an `Outcome` in the response's extensions), this layer counts it
//! and writes one line per request at info. The path is copied only when that line is written.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tokio::time::Instant;
use tower::{Layer, Service};

use super::metrics::Metrics;
use crate::cache::{CachePhase, NoCacheReason};
use crate::catalog::route::Operation;
use crate::wire::body::Body;

/// What the handler did with a request, set on every response it writes: what this layer
/// counts and logs.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub operation: Operation,
    pub phase: Option<CachePhase>,
    pub reason: Option<NoCacheReason>,
    pub request_id: std::sync::Arc<str>,
}

#[derive(Clone)]
pub struct AccessLogLayer {
    metrics: Arc<Metrics>,
}

impl AccessLogLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        AccessLogLayer { metrics }
    }
}

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> AccessLog<S> {
        AccessLog {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AccessLog<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> Service<Request<B>> for AccessLog<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Logged<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let started = Instant::now();
        let logged = tracing::enabled!(tracing::Level::INFO)
            .then(|| (request.method().clone(), request.uri().path().to_owned()));
        Logged {
            answer: self.inner.call(request),
            started,
            logged,
            metrics: self.metrics.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The handler's answer, counted and logged when it is ready. A future of its own rather
    /// than an `async` block: a block that awaits the future it captured keeps two copies of
    /// it (the handler's is about 4 KB), and every request would copy both into a box.
    pub struct Logged<F> {
        #[pin]
        answer: F,
        started: Instant,
        logged: Option<(Method, String)>,
        metrics: Arc<Metrics>,
    }
}

impl<F> Future for Logged<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(response) = std::task::ready!(this.answer.poll(cx));
        let elapsed = this.started.elapsed();
        let outcome = response.extensions().get::<Outcome>();
        let route = outcome.map_or("other", |o| o.operation.as_str());
        let phase = outcome.and_then(|o| o.phase).map_or("NONE", |p| p.as_str());
        let status = response.status();
        this.metrics
            .request(route, status, phase, elapsed.as_secs_f64());
        if let Some((method, path)) = this.logged.take() {
            tracing::info!(
                method = %method,
                path = %path,
                route,
                status = status.as_u16(),
                cache = phase,
                reason = outcome.and_then(|o| o.reason).map_or("", |r| r.as_str()),
                request_id = outcome.map_or("", |o| &*o.request_id),
                duration_ms = elapsed.as_secs_f64() * 1000.0,
                "request"
            );
        }
        Poll::Ready(Ok(response))
    }
}
