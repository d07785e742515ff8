//! The `[events]` settings, typed.

use std::time::Duration;

use crate::secret::Secret;

/// The JetStream durable consumer's name is `icecache-<hostname>` by default: each process
/// must see every event (sidecars sharing one consumer would each get only some), and a
/// process restarted on the same host resumes from its cursor.
pub const DEFAULT_NATS_CONSUMER_STEM: &str = "icecache";
/// A durable consumer nobody has read for this long is removed by the server (pods that are
/// gone leave none behind).
pub const NATS_CONSUMER_INACTIVE: Duration = Duration::from_secs(3600);

/// Polaris's Kafka listener's default topic.
pub const DEFAULT_KAFKA_TOPIC: &str = "polaris-catalog-events";
/// How often the Kafka source asks the broker for each partition's end: a broker that stops
/// answering makes the source Degraded within about two periods.
pub const KAFKA_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// `icecache-<hostname>`, the hostname reduced to what a consumer name may hold; also the
/// Kafka consumer group (one per process, so each reads every partition).
pub fn default_nats_consumer() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if host.is_empty() {
        DEFAULT_NATS_CONSUMER_STEM.to_owned()
    } else {
        format!("{DEFAULT_NATS_CONSUMER_STEM}-{host}")
    }
}
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
    pub kafka: Option<KafkaSettings>,
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

/// Polaris's events on Kafka.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSettings {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    pub topic: String,
    /// This process's consumer group: where its committed offsets live, so a restart resumes
    /// from them.
    pub group: String,
    /// The REST prefix of a Polaris catalog: `{catalog_name}` and `{realm_id}` replaced.
    pub prefix_template: String,
}

impl EventsSettings {
    pub fn any_source(&self) -> bool {
        self.seaweedfs_token.is_some() || self.nats.is_some() || self.kafka.is_some()
    }
}
