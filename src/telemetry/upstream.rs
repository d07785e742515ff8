//! The catalog as the origin sees it: how long it takes to answer, what it answers, and the
//! requests that got no usable answer.

use prometheus::{Histogram, HistogramVec, IntCounterVec, Registry};

use super::registry::{counter_vec, histogram_vec, known, Label};

pub struct UpstreamMetrics {
    duration: HistogramVec,
    responses: IntCounterVec,
    errors: IntCounterVec,
}

/// Why a request to the catalog got no usable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connect,
    Timeout,
    Protocol,
    /// The catalog answered, but to say it is throttling (429, Glue's throttling 400).
    Throttled,
    /// Refused before it was sent: `upstream_max_in_flight` reached and the queue full or
    /// waited out.
    Shed,
}

impl Label for Failure {
    fn as_str(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Timeout => "timeout",
            Failure::Protocol => "protocol",
            Failure::Throttled => "throttled",
            Failure::Shed => "shed",
        }
    }
}

impl UpstreamMetrics {
    pub fn new(r: &Registry) -> UpstreamMetrics {
        let metrics = UpstreamMetrics {
            duration: histogram_vec(
                r,
                "icecache_upstream_request_duration_seconds",
                "Time from sending a request upstream to its response head, by operation.",
                &["route"],
            ),
            responses: counter_vec(
                r,
                "icecache_upstream_responses_total",
                "Responses received from the upstream catalog, by HTTP status.",
                &["status"],
            ),
            errors: counter_vec(
                r,
                "icecache_upstream_errors_total",
                "Upstream requests that got no usable response, by kind (connect, timeout, \
                 protocol, throttled, shed).",
                &["kind"],
            ),
        };
        known(
            &metrics.errors,
            &[
                Failure::Connect,
                Failure::Timeout,
                Failure::Protocol,
                Failure::Throttled,
                Failure::Shed,
            ],
        );
        metrics
    }

    /// The histogram one request's time to its response head goes into.
    pub fn duration(&self, route: impl Label) -> Histogram {
        self.duration.with_label_values(&[route.as_str()])
    }

    pub fn response(&self, status: http::StatusCode) {
        self.responses.with_label_values(&[status.as_str()]).inc();
    }

    pub fn failure(&self, kind: Failure) {
        self.errors.with_label_values(&[kind.as_str()]).inc();
    }
}
