//! The series each answered request is counted in, remembered per worker thread. Finding a
//! series of a labelled vector hashes its labels (SipHash) and takes the vector's lock, twice
//! per request; that was a tenth of icecache's own work on a local 304. A hit-heavy load has
//! two or three kinds of answer, so a short list, searched in order, holds them.

use std::cell::RefCell;

use http::StatusCode;
use prometheus::{Histogram, IntCounter};

/// The series of one kind of answer.
pub struct Series {
    pub requests: IntCounter,
    pub duration: Histogram,
}

/// Operation, status and cache phase.
pub type Labels = (&'static str, StatusCode, &'static str);

/// How many kinds of answer a worker remembers.
const KEPT: usize = 16;

struct Remembered {
    /// Which `Metrics` the series belong to (tests make several in one thread).
    registry: u64,
    labels: Labels,
    series: Series,
}

thread_local! {
    static RECENT: RefCell<Vec<Remembered>> = const { RefCell::new(Vec::new()) };
}

/// Calls `count` with the series of `labels` in `registry`, looked up with `find` only the
/// first time this thread counts them (or after the list has moved on).
pub fn with(
    registry: u64,
    labels: Labels,
    count: impl FnOnce(&Series),
    find: impl FnOnce() -> Series,
) {
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        let at = recent
            .iter()
            .position(|r| r.registry == registry && r.labels == labels);
        let at = at.unwrap_or_else(|| {
            if recent.len() == KEPT {
                recent.remove(0);
            }
            recent.push(Remembered {
                registry,
                labels,
                series: find(),
            });
            recent.len() - 1
        });
        count(&recent[at].series);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::metrics::Metrics;
    use http::StatusCode;

    fn count(metrics: &Metrics, status: &str, cache: &str) -> String {
        let series = format!(
            "icecache_requests_total{{cache=\"{cache}\",route=\"load_table\",status=\"{status}\"}} "
        );
        metrics
            .render()
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "absent".to_owned())
    }

    #[test]
    fn two_registries_on_one_thread_count_apart() {
        let (first, second) = (Metrics::new(), Metrics::new());
        first.request("load_table", StatusCode::OK, "HIT", 0.001);
        first.request("load_table", StatusCode::OK, "HIT", 0.001);
        second.request("load_table", StatusCode::OK, "HIT", 0.001);
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
                metrics.request("load_table", *status, "HIT", 0.001);
            }
            metrics.request("load_table", StatusCode::OK, "MISS", 0.001);
            assert_eq!(count(&metrics, "201", "HIT"), (round + 1).to_string());
        }
        assert_eq!(count(&metrics, "200", "MISS"), "3");
        assert_eq!(count(&metrics, "231", "HIT"), "3");
        assert_eq!(count(&metrics, "200", "HIT"), "3");
    }
}
