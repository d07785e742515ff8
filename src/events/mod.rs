//! Catalog change events: writes that do not pass through icecache (a job whose catalog URI is
//! the catalog itself, an admin tool, another tier) reach the cache as the catalog announces
//! them, so entries can be served far longer than `cache.fresh_for` while the announcements
//! are known to arrive.
//!
//! Three sources: SeaweedFS's filer webhook (`POST /events/seaweedfs` on the admin listener,
//! `seaweedfs`), Lakekeeper's CloudEvents on NATS, plain or through a JetStream durable
//! consumer (`lakekeeper`, `nats`), and Polaris's events on Kafka (`polaris`, `kafka`). Each reads its messages into `Change`s; run.rs hands them
//! to the cache, which invalidates here and across the tier. Whether the sources can be
//! trusted is `Liveness`: an entry enjoys `events.fresh_for` only while every source has been
//! live since before its fill began.

mod change;
pub mod kafka;
pub mod lakekeeper;
pub mod liveness;
pub mod nats;
pub mod polaris;
pub mod seaweedfs;
pub mod settings;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use change::{Change, EventType, Gap, Rejection};
pub use liveness::{Liveness, SourceId};
pub use settings::EventsSettings;

/// Applies a change to the cache (here and across the tier) and says how many entries went;
/// built by run.rs, so this module needs nothing of the cache.
pub type Apply = Arc<dyn Fn(Change) -> Pin<Box<dyn Future<Output = usize> + Send>> + Send + Sync>;
