//! The `[events]` settings, typed.

use std::time::Duration;

use crate::config::Secret;

/// Lakekeeper names warehouses by id; its REST prefix is that id unless a proxy maps it.
pub const DEFAULT_PREFIX_TEMPLATE: &str = "{warehouse_id}";
/// The JetStream durable consumer's name (one per tier: each event is taken by one replica,
/// which invalidates the whole tier).
pub const DEFAULT_NATS_CONSUMER: &str = "icecache";
/// How often the NATS connection is pinged: the client gives up on a server after three
/// unanswered pings, so a hung server is noticed within about two seconds (the client's
/// default interval takes minutes).
pub const NATS_PING_INTERVAL: Duration = Duration::from_millis(600);
/// Largest event accepted; SeaweedFS sends the table's whole metadata (twice) in each.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq)]
pub struct EventsSettings {
    /// How long an entry is served without asking the catalog while every event source has
    /// been live since its fill; None: `cache.fresh_for`.
    pub fresh_for: Option<Duration>,
    /// The bearer token SeaweedFS's webhook presents; Some: `POST /events/seaweedfs` is on.
    pub seaweedfs_token: Option<Secret>,
    pub nats: Option<NatsSettings>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NatsSettings {
    pub url: String,
    pub subject: String,
    /// A JetStream stream holding the subject: read through a durable consumer, replayed
    /// from its stored cursor after a restart or a disconnect.
    pub stream: Option<String>,
    pub consumer: String,
    pub prefix_template: String,
}

impl EventsSettings {
    pub fn any_source(&self) -> bool {
        self.seaweedfs_token.is_some() || self.nats.is_some()
    }
}
