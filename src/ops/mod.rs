//! The operator's surface: the admin listener (`admin`), Prometheus metrics (`metrics`, with
//! `event_metrics` and the per-worker `request_series`), the access log and the log setup
//! (`access_log`, `logging`), and the health-check subcommand (`probe`).

pub mod access_log;
pub mod admin;
pub mod event_metrics;
pub mod logging;
pub mod metrics;
pub mod probe;
pub mod request_series;
