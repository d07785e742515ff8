//! icecache: a caching reverse proxy for Apache Iceberg REST catalogs.
//!
//! A request's path, top to bottom: `listener` (accept, TLS, HTTP/1.1 and HTTP/2, limits) →
//! `proxy` (the handler) → `catalog` (which operation, which names, what a write touches) →
//! `cache` (phases, fills, entries) → `origin` (the one path to the catalog) → `policy` (who may
//! share an answer, and the stage that strips or injects credentials) → back out through
//! `proxy` and `error` (failures rendered once). The operator's surface is `admin` (endpoints,
//! access log, probe), `telemetry` (metrics by subsystem, logging) and `config`; `state` is what
//! every request reads, `wire` what every route shares (bodies, headers, ETags, codings); `clock`
//! and `secret` are leaves every layer may use.

pub mod admin;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordination;
pub mod error;
pub mod events;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod listener;
pub mod origin;
pub mod policy;
pub mod proxy;
pub mod redis_replays;
pub mod redis_tier;
pub mod replays;
pub mod run;
pub mod secret;
pub mod state;
pub mod telemetry;
pub mod wire;

pub use run::{run, Reload, RunError};
