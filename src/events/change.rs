//! What the sources read events into: a `Change` (what was touched, in which warehouses), the
//! event types understood, why a message was rejected, and why a source may have lost events.

use crate::catalog::writes::Touched;
use crate::telemetry::Label;

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
