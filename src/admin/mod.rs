//! The operator's side of the house, at its top: the admin listener's endpoints (health,
//! readiness, metrics, cache stats and purge, the SeaweedFS webhook), the access log that counts
//! and logs every proxy request once, and the `probe` health-check subcommand.

pub mod access_log;
pub mod endpoints;
pub mod probe;
