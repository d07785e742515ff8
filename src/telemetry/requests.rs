//! Requests answered: how many, by operation, status and cache phase, and how long each took;
//! counted once per request by the access log. The series of each kind of answer are
//! remembered per worker thread: finding a series of a labelled vector hashes its labels and
//! takes the vector's lock, twice per request, which was a tenth of icecache's own work on a
//! local 304; a hit-heavy load has two or three kinds of answer, so a short list, searched in
//! order, holds them.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use http::StatusCode;
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, Registry};

use super::registry::{counter_vec, histogram_vec, Label};

pub struct RequestMetrics {
    /// Tells this registry's remembered series from another's (tests make several).
    id: u64,
    requests: IntCounterVec,
    duration: HistogramVec,
}

/// The series of one kind of answer.
struct Series {
    requests: IntCounter,
    duration: Histogram,
}

/// Operation, status and cache phase.
type Labels = (&'static str, StatusCode, &'static str);

/// How many kinds of answer a worker remembers.
const KEPT: usize = 16;

struct Remembered {
    registry: u64,
    labels: Labels,
    series: Series,
}

/// The same labels by address: every label is a `&'static str` from a fixed list, so comparing
/// where they live costs no string comparison. Two equal labels at two addresses would only be
/// remembered twice, each time for the one series the registry keeps for their text.
fn same(a: &Labels, b: &Labels) -> bool {
    std::ptr::eq(a.0, b.0) && a.1 == b.1 && std::ptr::eq(a.2, b.2)
}

thread_local! {
    static RECENT: RefCell<Vec<Remembered>> = const { RefCell::new(Vec::new()) };
}

impl RequestMetrics {
    pub fn new(r: &Registry) -> RequestMetrics {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        RequestMetrics {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            requests: counter_vec(
                r,
                "icecache_requests_total",
                "Requests answered, by Iceberg operation, HTTP status and cache phase.",
                &["route", "status", "cache"],
            ),
            duration: histogram_vec(
                r,
                "icecache_request_duration_seconds",
                "Time from request head to response head, by Iceberg operation.",
                &["route"],
            ),
        }
    }

    /// Counts one answered request.
    pub fn answered(&self, route: impl Label, status: StatusCode, cache: impl Label, seconds: f64) {
        let labels = (route.as_str(), status, cache.as_str());
        RECENT.with(|recent| {
            let mut recent = recent.borrow_mut();
            let at = recent
                .iter()
                .position(|r| r.registry == self.id && same(&r.labels, &labels));
            let at = at.unwrap_or_else(|| {
                if recent.len() == KEPT {
                    recent.remove(0);
                }
                recent.push(Remembered {
                    registry: self.id,
                    labels,
                    series: Series {
                        requests: self.requests.with_label_values(&[
                            labels.0,
                            labels.1.as_str(),
                            labels.2,
                        ]),
                        duration: self.duration.with_label_values(&[labels.0]),
                    },
                });
                recent.len() - 1
            });
            let series = &recent[at].series;
            series.requests.inc();
            series.duration.observe(seconds);
        });
    }

    pub(super) fn counts(&self) -> &IntCounterVec {
        &self.requests
    }
}

/// The count of loadTable requests answered with `status` in `cache`, as `/metrics` renders it
/// ("absent" when no such request was counted).
#[cfg(test)]
pub(crate) fn load_table_count(metrics: &super::Metrics, status: &str, cache: &str) -> String {
    let series = format!(
        "icecache_requests_total{{cache=\"{cache}\",route=\"load_table\",status=\"{status}\"}} "
    );
    metrics
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "absent".to_owned())
}

#[cfg(test)]
mod tests {
    use super::load_table_count as count;
    use super::*;
    use crate::telemetry::Metrics;

    #[derive(Clone, Copy)]
    struct Is(&'static str);

    impl Label for Is {
        fn as_str(self) -> &'static str {
            self.0
        }
    }

    #[test]
    fn two_registries_on_one_thread_count_apart() {
        let (first, second) = (Metrics::new(), Metrics::new());
        let hit = |m: &Metrics| {
            m.requests
                .answered(Is("load_table"), StatusCode::OK, Is("HIT"), 0.001)
        };
        hit(&first);
        hit(&first);
        hit(&second);
        assert_eq!(count(&first, "200", "HIT"), "2");
        assert_eq!(count(&second, "200", "HIT"), "1");
    }

    #[test]
    fn each_kind_of_answer_lands_in_its_own_series_past_the_remembered_few() {
        let metrics = Metrics::new();
        let statuses: Vec<StatusCode> = (200..200 + 2 * KEPT as u16)
            .map(|code| StatusCode::from_u16(code).unwrap())
            .collect();
        for round in 0..3 {
            for status in &statuses {
                metrics
                    .requests
                    .answered(Is("load_table"), *status, Is("HIT"), 0.001);
            }
            metrics
                .requests
                .answered(Is("load_table"), StatusCode::OK, Is("MISS"), 0.001);
            assert_eq!(count(&metrics, "201", "HIT"), (round + 1).to_string());
        }
        assert_eq!(count(&metrics, "200", "MISS"), "3");
        assert_eq!(count(&metrics, "231", "HIT"), "3");
        assert_eq!(count(&metrics, "200", "HIT"), "3");
    }

    #[test]
    fn a_label_spelled_at_two_addresses_counts_in_one_series() {
        let metrics = Metrics::new();
        let elsewhere: &'static str = String::from("HIT").leak();
        assert!(!std::ptr::eq(elsewhere, "HIT"));
        for cache in ["HIT", elsewhere, "HIT", elsewhere] {
            metrics
                .requests
                .answered(Is("load_table"), StatusCode::OK, Is(cache), 0.001);
        }
        assert_eq!(count(&metrics, "200", "HIT"), "4");
    }
}
