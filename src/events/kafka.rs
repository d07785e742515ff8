//! Polaris's events on Kafka. Each process is its own consumer group (`events.kafka_group`)
//! and takes every partition of the topic itself (no group membership, so no rebalance), at
//! the offsets the group last committed: a restart resumes where the process left off. A group
//! with no committed offset starts at the end (a process that just started holds nothing older),
//! and a partition the process did not know before starts at its beginning.
//!
//! Liveness: every `KAFKA_CHECK_INTERVAL` the source asks the broker for the end of each
//! partition. It is Live once it has applied everything up to those ends, and Degraded as soon
//! as the broker does not answer (a broker that is down or hung). A committed offset the broker
//! no longer holds (retention removed events this group never read) is a gap. Offsets are
//! committed only for events applied, so an event is never skipped by a restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{CommitMode, Consumer as _, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::watch;

use super::change::{Gap, Rejection};
use super::liveness::{Liveness, SourceId};
use super::settings::{KafkaSettings, KAFKA_CHECK_INTERVAL, MAX_EVENT_BYTES};
use super::{polaris, Apply};
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::telemetry::EventMetrics;

const SOURCE: SourceId = SourceId::Kafka;
/// How long one request to the broker may take before the source counts it unanswered.
const BROKER_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long to wait before taking the partitions again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// librdkafka's own reports, at debug: whether the broker answers is the periodic check's to
/// say (librdkafka queues an error per failed reconnect and hands them all over on recovery).
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, _level: RDKafkaLogLevel, facility: &str, message: &str) {
        tracing::debug!(facility, message, "librdkafka");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "librdkafka");
    }
}

impl ConsumerContext for Quiet {}

type Kafka = StreamConsumer<Quiet>;

pub struct Subscriber {
    pub settings: KafkaSettings,
    pub liveness: Arc<Liveness>,
    pub metrics: Arc<EventMetrics>,
    pub apply: Apply,
}

/// Where each partition's reading stands: the next offset to apply.
type Next = HashMap<i32, i64>;

impl Subscriber {
    /// Runs until shutdown, then commits what it applied.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let consumer: Kafka = match self.client_config().create_with_context(Quiet) {
            Ok(consumer) => consumer,
            Err(e) => {
                tracing::error!(error = %e, "cannot use the Kafka settings; events from Kafka are off");
                return;
            }
        };
        let consumer = Arc::new(consumer);
        // Kept across sessions: a partition taken again resumes where this process was.
        let mut next = Next::new();
        // Said once per run of failures (a topic not made yet fails every second).
        let mut failing = false;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                ended = self.session(&consumer, &mut next) => {
                    match &ended {
                        Err(why) if !failing => {
                            tracing::warn!(topic = %self.settings.topic, why, "cannot read the Kafka topic; retrying every second");
                        }
                        Err(why) => tracing::debug!(why, "cannot read the Kafka topic"),
                        Ok(()) => {}
                    }
                    failing = ended.is_err();
                    self.liveness.down(SOURCE, Gap::ConsumerError);
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        self.liveness.down(SOURCE, Gap::Shutdown);
        let committing = consumer.clone();
        let committed =
            tokio::task::spawn_blocking(move || committing.commit_consumer_state(CommitMode::Sync))
                .await;
        match committed {
            // Nothing stored since the last commit: the committed offsets are current.
            Ok(Ok(())) | Ok(Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot commit the Kafka offsets read; a restart reads them again")
            }
            Err(_) => {}
        }
    }

    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.settings.brokers)
            .set("group.id", &self.settings.group)
            .set("client.id", "icecache")
            // Commit only what was applied (stored after `apply`), every second and at exit.
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("auto.commit.interval.ms", "1000")
            // An offset the broker no longer has: from the earliest held (more invalidated,
            // never less).
            .set("auto.offset.reset", "earliest")
            .set("socket.timeout.ms", "3000")
            .set("reconnect.backoff.max.ms", "1000")
            .set("fetch.wait.max.ms", "100")
            .set("log_level", "3");
        config
    }

    /// Takes the topic's partitions and reads them until the partitions change; an error when
    /// they cannot be taken.
    async fn session(&self, consumer: &Arc<Kafka>, next: &mut Next) -> Result<(), String> {
        self.assign(consumer, next).await?;
        let mut check = tokio::time::interval(KAFKA_CHECK_INTERVAL);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = consumer.recv() => match message {
                    Ok(message) => {
                        let (partition, offset) = (message.partition(), message.offset());
                        if next.get(&partition).is_some_and(|n| offset < *n) {
                            // Delivered again: applied already.
                            self.metrics.duplicate(SOURCE);
                            continue;
                        }
                        let published = message.timestamp().to_millis().and_then(|ms| u64::try_from(ms).ok());
                        self.apply_one(message.payload().unwrap_or_default(), published).await;
                        next.insert(partition, offset + 1);
                        if let Err(e) = consumer.store_offset_from_message(&message) {
                            tracing::warn!(error = %e, "cannot store a Kafka offset");
                        }
                    }
                    Err(e) => self.consumer_error(&e),
                },
                _ = check.tick() => match self.ends(consumer).await {
                    Ok(ends) if ends.keys().any(|p| !next.contains_key(p)) => {
                        // Partitions were added: take them too.
                        return Ok(());
                    }
                    Ok(ends) => {
                        if ends.iter().all(|(p, end)| next.get(p).is_some_and(|n| n >= end)) {
                            self.liveness.up(SOURCE);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the Kafka broker did not answer");
                        self.liveness.down(SOURCE, Gap::Disconnected);
                    }
                },
            }
        }
    }

    /// Assigns every partition at its starting offset (and notes them in `next`); an error when
    /// the topic cannot be read (yet: Polaris creates it with its first event).
    async fn assign(&self, consumer: &Arc<Kafka>, next: &mut Next) -> Result<(), String> {
        let (topic, asking, known) = (self.settings.topic.clone(), consumer.clone(), next.clone());
        let starts = tokio::task::spawn_blocking(move || starts(&asking, &topic, &known)).await;
        let (starts, holes) = match starts {
            Ok(Ok(starts)) => starts,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(e) => return Err(e.to_string()),
        };
        for _ in 0..holes {
            self.liveness.gap(SOURCE, Gap::SequenceHole);
        }
        let mut list = TopicPartitionList::new();
        for (partition, offset) in &starts {
            list.add_partition_offset(&self.settings.topic, *partition, Offset::Offset(*offset))
                .map_err(|e| e.to_string())?;
        }
        consumer.assign(&list).map_err(|e| e.to_string())?;
        // Committed at once, so a restart before the first event still resumes from here.
        if let Err(e) = consumer.commit(&list, CommitMode::Async) {
            tracing::warn!(error = %e, "cannot commit the Kafka starting offsets");
        }
        *next = starts;
        Ok(())
    }

    /// Each partition's end, as the broker says now.
    async fn ends(&self, consumer: &Arc<Kafka>) -> KafkaResult<HashMap<i32, i64>> {
        let (topic, asking) = (self.settings.topic.clone(), consumer.clone());
        tokio::task::spawn_blocking(move || {
            let mut ends = HashMap::new();
            for partition in partitions(&asking, &topic)? {
                let (_, high) = asking.fetch_watermarks(&topic, partition, BROKER_TIMEOUT)?;
                ends.insert(partition, high);
            }
            Ok(ends)
        })
        .await
        .unwrap_or_else(|_| Err(KafkaError::Canceled))
    }

    /// An error the consumer reports. Reading from past the end of what the broker holds
    /// (retention removed events not yet read) loses events: a gap. Others are librdkafka's
    /// own reconnects and retries, often about a past moment: whether the broker answers now is
    /// the periodic check's to say.
    fn consumer_error(&self, error: &KafkaError) {
        let code = match error {
            KafkaError::MessageConsumption(code) | KafkaError::Global(code) => Some(*code),
            _ => None,
        };
        if matches!(
            code,
            Some(RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset)
        ) {
            self.liveness.gap(SOURCE, Gap::SequenceHole);
        }
        tracing::debug!(error = %error, "Kafka consumer error");
    }

    /// Reads one record and applies it; an unreadable one is counted, and (since it may have
    /// been a real event) is a gap.
    async fn apply_one(&self, payload: &[u8], published_ms: Option<u64>) {
        let read = if payload.len() > MAX_EVENT_BYTES {
            Err(Rejection::Oversized)
        } else {
            polaris::read(payload, &self.settings.prefix_template)
        };
        match read {
            Ok(event) => {
                self.metrics.received(SOURCE, event.kind);
                if let Some(made) = published_ms {
                    self.metrics
                        .lag(SOURCE, now_ms().saturating_sub(made) as f64 / 1000.0);
                }
                if event.change.touched != Touched::Nothing {
                    (self.apply)(event.change).await;
                }
            }
            Err(rejection) => {
                self.metrics.rejected(SOURCE, rejection);
                if rejection.loses_an_event() {
                    self.liveness.gap(SOURCE, Gap::Unreadable(rejection));
                }
            }
        }
    }
}

/// The topic's partitions (an error if the broker does not know the topic).
fn partitions(consumer: &Kafka, topic: &str) -> KafkaResult<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), BROKER_TIMEOUT)?;
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .ok_or(KafkaError::MetadataFetch(
            RDKafkaErrorCode::UnknownTopicOrPartition,
        ))?;
    Ok(found.partitions().iter().map(|p| p.id()).collect())
}

/// Where each partition starts, and how many partitions lost events this process never read.
/// Where this process was, for a partition it read before; else the group's committed offset;
/// else the end when the process just started (it holds nothing older), the beginning for a
/// partition added since. From the oldest the broker still holds if retention passed it.
fn starts(consumer: &Kafka, topic: &str, known: &Next) -> KafkaResult<(Next, usize)> {
    let partitions = partitions(consumer, topic)?;
    let mut list = TopicPartitionList::new();
    for partition in &partitions {
        list.add_partition(topic, *partition);
    }
    let committed = consumer.committed_offsets(list, BROKER_TIMEOUT)?;
    let mut starts = HashMap::new();
    let mut holes = 0;
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, BROKER_TIMEOUT)?;
        let stored = committed
            .find_partition(topic, partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(n) => Some(n),
                _ => None,
            });
        let start = match known.get(&partition).copied().or(stored) {
            Some(n) if n < low || n > high => {
                // Retention removed events never read, or the topic was made again.
                holes += 1;
                low
            }
            Some(n) => n,
            None if known.is_empty() => high,
            None => low,
        };
        starts.insert(partition, start);
    }
    Ok((starts, holes))
}
