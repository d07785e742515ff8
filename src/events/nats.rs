//! Lakekeeper's events on NATS: a plain subscription (at most once, like Lakekeeper's own
//! publishing), or with `nats_stream` a JetStream durable consumer that resumes from its
//! stored cursor. The connection is pinged often (`NATS_PING_INTERVAL`), so a hung server is
//! noticed within about two seconds; a disconnect makes the source Degraded until it is
//! subscribed again (and, on JetStream, caught up). A slow consumer (messages the client
//! dropped) and a hole in the stream's sequence are gaps.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use super::change::Gap;
use super::liveness::{Liveness, SourceId};
use super::settings::{NatsSettings, MAX_EVENT_BYTES, NATS_CONSUMER_INACTIVE, NATS_PING_INTERVAL};
use super::{lakekeeper, Apply};
use crate::clock::now_ms;
use crate::telemetry::EventMetrics;

const SOURCE: SourceId = SourceId::Nats;
/// How long to wait before setting the JetStream consumer up again after it failed.
const RETRY: Duration = Duration::from_secs(1);

pub struct Subscriber {
    pub settings: NatsSettings,
    pub liveness: Arc<Liveness>,
    pub metrics: Arc<EventMetrics>,
    pub apply: Apply,
}

impl Subscriber {
    /// Runs until shutdown.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let (events, mut connection) = mpsc::unbounded_channel();
        let options = async_nats::ConnectOptions::new()
            .name("icecache")
            .ping_interval(NATS_PING_INTERVAL)
            .connection_timeout(Duration::from_secs(2))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 100).clamp(100, 2000))
            })
            .event_callback(move |event| {
                let events = events.clone();
                async move {
                    let _ = events.send(event);
                }
            });
        let client = match options.connect(self.settings.url.as_str()).await {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "cannot use the NATS URL; events from NATS are off");
                return;
            }
        };
        tokio::select! {
            _ = self.consume(&client, &mut connection) => {}
            _ = shutdown.changed() => {}
        }
        self.liveness.down(SOURCE, Gap::Shutdown);
    }

    async fn consume(
        &self,
        client: &async_nats::Client,
        connection: &mut mpsc::UnboundedReceiver<async_nats::Event>,
    ) {
        match &self.settings.stream {
            None => self.plain(client, connection).await,
            Some(stream) => loop {
                self.jetstream(client, stream, connection).await;
                self.liveness.down(SOURCE, Gap::ConsumerError);
                tokio::time::sleep(RETRY).await;
            },
        }
    }

    /// Marks the source after a connection event other than `Connected`.
    fn connection_changed(&self, event: &async_nats::Event) {
        match event {
            async_nats::Event::Disconnected | async_nats::Event::Closed => {
                self.liveness.down(SOURCE, Gap::Disconnected);
            }
            async_nats::Event::SlowConsumer(_) => self.liveness.gap(SOURCE, Gap::SlowConsumer),
            _ => {}
        }
    }

    async fn plain(
        &self,
        client: &async_nats::Client,
        connection: &mut mpsc::UnboundedReceiver<async_nats::Event>,
    ) {
        let mut subscription = match client.subscribe(self.settings.subject.clone()).await {
            Ok(subscription) => subscription,
            Err(e) => {
                tracing::error!(error = %e, "cannot subscribe to NATS; events from NATS are off");
                return;
            }
        };
        loop {
            tokio::select! {
                Some(event) = connection.recv() => {
                    // Subscribed once the server has seen the subscription (a flush after the
                    // client resubscribed on connecting).
                    if matches!(event, async_nats::Event::Connected) && client.flush().await.is_ok() {
                        self.liveness.up(SOURCE);
                    } else {
                        self.connection_changed(&event);
                    }
                }
                message = subscription.next() => match message {
                    Some(message) => self.apply_one(&message.payload, None).await,
                    None => return,
                },
            }
        }
    }

    async fn jetstream(
        &self,
        client: &async_nats::Client,
        stream: &str,
        connection: &mut mpsc::UnboundedReceiver<async_nats::Event>,
    ) {
        let context = jetstream::new(client.clone());
        let subject = self.settings.subject.clone();
        let set_up = async {
            let stream = context
                .get_or_create_stream(jetstream::stream::Config {
                    name: stream.to_owned(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            let consumer: jetstream::consumer::Consumer<pull::Config> = stream
                .get_or_create_consumer(
                    &self.settings.consumer,
                    pull::Config {
                        durable_name: Some(self.settings.consumer.clone()),
                        filter_subject: subject.clone(),
                        ack_policy: AckPolicy::Explicit,
                        // A consumer made now has nothing to catch up on: this process holds
                        // nothing older (a tier's other replicas announce what they read).
                        deliver_policy: DeliverPolicy::New,
                        inactive_threshold: NATS_CONSUMER_INACTIVE,
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            let info = consumer.get_info().await.map_err(|e| e.to_string())?;
            let first = stream
                .get_info()
                .await
                .map_err(|e| e.to_string())?
                .state
                .first_sequence;
            let messages = consumer.messages().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((consumer, info, first, messages))
        };
        let (consumer, info, first, mut messages) = match set_up.await {
            Ok(set_up) => set_up,
            Err(e) => {
                tracing::warn!(error = %e, stream, "cannot read the JetStream consumer; retrying");
                return;
            }
        };
        // The stored cursor: what this consumer last acknowledged.
        let mut last = info.ack_floor.stream_sequence;
        if last > 0 && first > last + 1 {
            // The stream discarded events this consumer never read (counted once: the next
            // one delivered is the stream's first).
            self.liveness.gap(SOURCE, Gap::SequenceHole);
            last = first - 1;
        }
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            self.liveness.up(SOURCE);
        }
        loop {
            tokio::select! {
                Some(event) = connection.recv() => {
                    if matches!(event, async_nats::Event::Connected) {
                        // Live again once nothing published meanwhile is left to read.
                        if let Ok(info) = consumer.get_info().await {
                            if info.num_pending == 0 && info.num_ack_pending == 0 {
                                self.liveness.up(SOURCE);
                            }
                        }
                    } else {
                        self.connection_changed(&event);
                    }
                }
                message = messages.next() => {
                    let message = match message {
                        Some(Ok(message)) => message,
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "JetStream consumer failed; setting it up again");
                            return;
                        }
                        None => return,
                    };
                    let Ok(info) = message.info() else {
                        continue;
                    };
                    let (sequence, pending) = (info.stream_sequence, info.pending);
                    let published = u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).ok();
                    if sequence <= last {
                        // Delivered again (a redelivery, a replay): applied already.
                        self.metrics.duplicate(SOURCE);
                    } else {
                        if last > 0 && sequence > last + 1 {
                            self.liveness.gap(SOURCE, Gap::SequenceHole);
                        }
                        self.apply_one(&message.payload, published).await;
                        last = sequence;
                    }
                    if let Err(e) = message.ack().await {
                        tracing::warn!(error = %e, "cannot acknowledge an event");
                    }
                    if pending == 0 && !self.liveness.is_live(SOURCE) {
                        self.liveness.up(SOURCE);
                    }
                }
            }
        }
    }

    /// Reads one message and applies it; an unreadable one is counted, and (since it may have
    /// been a real event) is a gap.
    async fn apply_one(&self, payload: &[u8], published_ms: Option<u64>) {
        let source = SOURCE;
        let read = if payload.len() > MAX_EVENT_BYTES {
            Err(super::Rejection::Oversized)
        } else {
            lakekeeper::read(payload, &self.settings.prefix_template)
        };
        match read {
            Ok(event) => {
                self.metrics.received(source, event.kind);
                if let Some(made) = published_ms.or(event.made_ms) {
                    self.metrics
                        .lag(source, now_ms().saturating_sub(made) as f64 / 1000.0);
                }
                (self.apply)(event.change).await;
            }
            Err(rejection) => {
                self.metrics.rejected(source, rejection);
                if rejection.loses_an_event() {
                    self.liveness.gap(SOURCE, Gap::Unreadable(rejection));
                }
            }
        }
    }
}
