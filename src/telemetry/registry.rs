//! Registering metrics: names and labels are constants (label values are `Label`s), so
//! registration fails only on a programming error, which every test would catch.

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, Opts, Registry,
};

/// A label value of a bounded set.
pub trait Label: Copy {
    fn as_str(self) -> &'static str;
}

pub fn register<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: T,
) -> T {
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

pub fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    )
}

/// 100 µs to ~52 s: a local hit and a 250 MB metadata read both land in a bucket.
fn buckets() -> Vec<f64> {
    exponential_buckets(0.0001, 2.0, 20).expect("valid buckets")
}

pub fn histogram_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    histogram_vec_with(registry, name, help, labels, buckets())
}

pub fn histogram_vec_with(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    register(
        registry,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
            .expect("a valid metric"),
    )
}

pub fn histogram(registry: &Registry, name: &str, help: &str) -> Histogram {
    register(
        registry,
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets()))
            .expect("a valid metric"),
    )
}

pub fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    register(registry, IntGauge::new(name, help).expect("a valid metric"))
}

pub fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("a valid metric"),
    )
}

/// Creates the series of every value of a one-label vector at zero, so that rates and alerts
/// see them before the first event.
pub fn known<L: Label>(vec: &IntCounterVec, values: &[L]) {
    for value in values {
        vec.with_label_values(&[value.as_str()]);
    }
}
