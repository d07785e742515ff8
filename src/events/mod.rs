//! Catalog change events: writes that do not pass through icecache (a job whose catalog URI is
//! the catalog itself, an admin tool, another tier) reach the cache as the catalog announces
//! them, so entries can be served far longer than `cache.fresh_for` while the announcements
//! are known to arrive.
//!
//! Two sources: SeaweedFS's filer webhook (`POST /events/seaweedfs` on the admin listener,
//! `seaweedfs`) and Lakekeeper's CloudEvents on NATS, plain or through a JetStream durable
//! consumer (`lakekeeper`, `nats`). Each reads its messages into `Change`s; run.rs hands them
//! to the cache, which invalidates here and across the tier. Whether the sources can be
//! trusted is `Liveness`: an entry enjoys `events.fresh_for` only while every source has been
//! live since before its fill began.

pub mod lakekeeper;
pub mod liveness;
pub mod nats;
pub mod seaweedfs;
pub mod settings;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::catalog::writes::Touched;

pub use liveness::{Liveness, SourceId};

use crate::telemetry::Label;
pub use settings::EventsSettings;

/// What one event says changed: tables, a namespace or everything, in the warehouses named
/// (their REST prefixes; empty: in every one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub prefixes: Vec<String>,
    pub touched: Touched,
}

/// Why a message was not applied, a label of `icecache_events_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    Unauthorized,
    Oversized,
    Malformed,
    UnknownType,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Unauthorized => "unauthorized",
            Rejection::Oversized => "oversized",
            Rejection::Malformed => "malformed",
            Rejection::UnknownType => "unknown_type",
        }
    }

    /// Whether the message may have been a real event icecache could not read: then what it
    /// announced is lost, as if the source had dropped it (a gap). A message the sender could
    /// not authenticate was never the catalog's.
    pub fn loses_an_event(self) -> bool {
        self != Rejection::Unauthorized
    }
}

impl Label for Rejection {
    fn as_str(self) -> &'static str {
        Rejection::as_str(self)
    }
}

/// The type an event says it is: a label of `icecache_events_received_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// SeaweedFS's filer events.
    Create,
    Update,
    Delete,
    Rename,
    /// Lakekeeper's CloudEvents.
    UpdateTable,
    CreateTable,
    RegisterTable,
    DropTable,
    RenameTable,
    CreateView,
    UpdateView,
    DropView,
    RenameView,
    UndropTabulars,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Create => "create",
            EventType::Update => "update",
            EventType::Delete => "delete",
            EventType::Rename => "rename",
            EventType::UpdateTable => "updateTable",
            EventType::CreateTable => "createTable",
            EventType::RegisterTable => "registerTable",
            EventType::DropTable => "dropTable",
            EventType::RenameTable => "renameTable",
            EventType::CreateView => "createView",
            EventType::UpdateView => "updateView",
            EventType::DropView => "dropView",
            EventType::RenameView => "renameView",
            EventType::UndropTabulars => "undropTabulars",
        }
    }
}

impl Label for EventType {
    fn as_str(self) -> &'static str {
        EventType::as_str(self)
    }
}

/// Why a source may have lost events: a label of `icecache_events_gaps_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    Disconnected,
    Shutdown,
    ConsumerError,
    SlowConsumer,
    SequenceHole,
    /// A message that may have been a real event could not be read.
    Unreadable(Rejection),
}

impl Label for Gap {
    fn as_str(self) -> &'static str {
        match self {
            Gap::Disconnected => "disconnected",
            Gap::Shutdown => "shutdown",
            Gap::ConsumerError => "consumer_error",
            Gap::SlowConsumer => "slow_consumer",
            Gap::SequenceHole => "sequence_hole",
            Gap::Unreadable(rejection) => rejection.as_str(),
        }
    }
}

/// Applies a change to the cache (here and across the tier) and says how many entries went;
/// built by run.rs, so this module needs nothing of the cache.
pub type Apply = Arc<dyn Fn(Change) -> Pin<Box<dyn Future<Output = usize> + Send>> + Send + Sync>;
