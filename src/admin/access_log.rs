//! The access log and the request metrics: every request is counted and logged exactly once,
//! whether it is answered or abandoned (the client went away, its HTTP/2 stream was reset, the
//! shutdown grace ran out). The handler says what it did (an `Outcome` beside its response);
//! a request dropped before that is counted with status 499 (nginx's "client
//! closed request"). The request id is made here, so an abandoned request's line carries the id
//! the catalog was sent.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response, StatusCode, Uri};
use tokio::time::Instant;

use crate::cache::CachePhase;
use crate::catalog::route::{operation_of, Operation};
use crate::proxy::{Handled, Outcome};
use crate::telemetry::{Label, RequestMetrics};
use crate::wire::body::Body;
use crate::wire::request_id::RequestId;

/// A request's cache label: its phase, or `NONE` for one the cache did not answer.
#[derive(Debug, Clone, Copy)]
struct Phase(Option<CachePhase>);

impl Label for Phase {
    fn as_str(self) -> &'static str {
        self.0.map_or("NONE", CachePhase::as_str)
    }
}

/// The status an abandoned request is counted with.
const ABANDONED: u16 = 499;

/// A request as the log will describe it.
pub struct Entry {
    started: Instant,
    method: Method,
    /// Kept whole (a reference to the bytes hyper read, not a copy) for the line and for the
    /// route of a request that is never answered.
    uri: Uri,
    id: RequestId,
}

impl Entry {
    pub fn begin<B>(request: &Request<B>) -> Entry {
        Entry {
            started: Instant::now(),
            method: request.method().clone(),
            uri: request.uri().clone(),
            id: RequestId::of(request.headers()),
        }
    }

    /// The request's id: the client's `X-Request-Id` when it is a sensible token, else a new one.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// Counts and logs the request around the handler's answer: at once when it is ready (a
    /// hit), so that nothing holds the bytes hyper read the request into while the connection
    /// reads on (hyper then reuses its buffer instead of reserving a new one); else when its
    /// future ends, or is dropped unanswered. Only an answer that waits holds a share of
    /// `metrics`: a hit takes none (a count the workers' cores would pass back and forth).
    pub fn around(self, answer: Handled, metrics: &Arc<RequestMetrics>) -> Logged {
        let entry = match answer.answered() {
            Some((response, outcome)) => {
                self.answered(response, outcome, metrics);
                None
            }
            None => Some((self, metrics.clone())),
        };
        Logged { answer, entry }
    }

    fn answered(self, response: &Response<Body>, outcome: &Outcome, metrics: &RequestMetrics) {
        let reason = outcome.reason.map_or("", |r| r.as_str());
        self.record(
            metrics,
            outcome.operation,
            response.status(),
            Phase(outcome.phase),
            reason,
        );
    }

    fn abandoned(self, metrics: &RequestMetrics) {
        let route = operation_of(&self.method, self.uri.path());
        let status = StatusCode::from_u16(ABANDONED).unwrap_or(StatusCode::BAD_REQUEST);
        self.record(metrics, route, status, Phase(None), "abandoned");
    }

    fn record(
        &self,
        metrics: &RequestMetrics,
        route: Operation,
        status: StatusCode,
        phase: Phase,
        reason: &str,
    ) {
        let elapsed = self.started.elapsed();
        metrics.answered(route, status, phase, elapsed.as_secs_f64());
        let (route, phase) = (route.as_str(), phase.as_str());
        tracing::info!(
            method = %self.method,
            path = self.uri.path(),
            route,
            status = status.as_u16(),
            cache = phase,
            reason,
            request_id = %self.id,
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            "request"
        );
    }
}

pin_project_lite::pin_project! {
    /// The handler's answer, counted and logged when it is ready, or when it is dropped
    /// unanswered. A future of its own rather than an `async` block: a block that awaits the
    /// future it captured keeps two copies of it (the handler's is about 4 KB), and could not
    /// tell a drop from an end.
    pub struct Logged {
        #[pin]
        answer: Handled,
        entry: Option<(Entry, Arc<RequestMetrics>)>,
    }

    impl PinnedDrop for Logged {
        fn drop(this: Pin<&mut Self>) {
            if let Some((entry, metrics)) = this.project().entry.take() {
                entry.abandoned(&metrics);
            }
        }
    }
}

impl Future for Logged {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let (response, outcome) = std::task::ready!(this.answer.poll(cx));
        if let Some((entry, metrics)) = this.entry.take() {
            entry.answered(&response, &outcome, &metrics);
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::requests::load_table_count as count;
    use crate::telemetry::Metrics;
    use crate::wire::body::empty;

    fn load() -> Request<()> {
        Request::get("/v1/p/namespaces/db/tables/t")
            .body(())
            .unwrap()
    }

    fn hit() -> (Response<Body>, Outcome) {
        let outcome = Outcome {
            operation: Operation::LoadTable,
            phase: Some(CachePhase::Hit),
            reason: None,
        };
        (Response::new(empty()), outcome)
    }

    #[test]
    fn an_answer_ready_at_once_is_counted_before_anything_polls_it() {
        let metrics = Metrics::new();
        let entry = Entry::begin(&load());
        let _logged = entry.around(Handled::Ready(Some(hit())), &metrics.requests);
        assert_eq!(count(&metrics, "200", "HIT"), "1");
    }

    #[test]
    fn an_answer_ready_at_once_is_not_counted_again_when_its_connection_drops_it() {
        let metrics = Metrics::new();
        let entry = Entry::begin(&load());
        drop(entry.around(Handled::Ready(Some(hit())), &metrics.requests));
        assert_eq!(count(&metrics, "200", "HIT"), "1");
        assert_eq!(count(&metrics, "499", "NONE"), "absent");
    }

    #[test]
    fn an_answer_that_waits_is_counted_abandoned_when_dropped_first() {
        let metrics = Metrics::new();
        let entry = Entry::begin(&load());
        let waiting = entry.around(
            Handled::Pending(Box::pin(std::future::pending())),
            &metrics.requests,
        );
        assert_eq!(count(&metrics, "499", "NONE"), "absent");
        drop(waiting);
        assert_eq!(count(&metrics, "499", "NONE"), "1");
    }
}
