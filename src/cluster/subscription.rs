//! Hearing the other replicas' invalidations and acknowledgements. Pub/sub delivers at most
//! once: a replica whose subscription dropped has missed what was published meanwhile (the
//! lease log's positions tell `trust`, which drops everything), Redis may refuse the
//! subscription again (a revoked channel), which the client's automatic resubscription does not
//! retry, and a connection can go silent without closing. So the subscription is live only while
//! the replica hears its own heartbeats' echoes on it: while it is not, subscribing is retried
//! (on a new connection after silence).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::announce::{Invalidation, Message};
use super::health::Health;
use super::lease::Leases;
use super::redis_parts::client;
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::telemetry::cluster::Heard;
use crate::telemetry::ClusterMetrics;

/// How long after a heartbeat's answer its echo on the subscription may still arrive, beyond
/// the Redis timeout (the echo is sent before the answer; this is for a busy machine).
const ECHO_SLACK: Duration = Duration::from_millis(250);
/// How long a subscription may hear no echo at all, beyond twice the Redis timeout, before its
/// connection is given up on (echoes come every two heartbeats: about 670 ms).
const SILENCE: Duration = Duration::from_secs(1);
/// How often a subscription that keeps going silent says so in the log.
const WARN_SILENCE_EVERY: Duration = Duration::from_secs(30);
/// How often a replica without a live subscription tries to subscribe again.
const RESUBSCRIBE: Duration = Duration::from_millis(250);

/// Whether announcements are being heard; false until the first subscription is confirmed.
#[derive(Default)]
pub struct Listening(AtomicBool);

impl Listening {
    pub fn is_live(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, live: bool, metrics: &ClusterMetrics) {
        self.0.store(live, Ordering::Release);
        metrics.subscribed(live);
    }
}

pub struct Subscriber {
    pub url: String,
    pub timeout: Duration,
    pub channel: String,
    /// This replica's own heartbeat channel.
    pub beat_channel: String,
    /// This replica's name in messages (it ignores its own).
    pub replica: String,
    pub listening: Listening,
    /// Which heartbeats Redis took (each must be heard here).
    pub health: Arc<Health>,
    pub metrics: Arc<ClusterMetrics>,
    pub invalidate: mpsc::UnboundedSender<Invalidation>,
    /// Where lease invalidations and acknowledgements go.
    pub leases: Arc<Leases>,
}

impl Subscriber {
    /// Listens until the process ends. The subscription counts as live only while this
    /// replica hears its own heartbeats on it: a connection that went silent without closing
    /// (a half-open TCP connection, a proxy that stopped forwarding) is replaced.
    pub async fn run(self) {
        let mut warned: Option<Instant> = None;
        loop {
            let (pushes, received) = mpsc::unbounded_channel::<PushInfo>();
            let config = ConnectionManagerConfig::new()
                .set_push_sender(pushes)
                .set_automatic_resubscription()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout))
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_millis(500));
            let manager =
                client(&self.url).and_then(|c| ConnectionManager::new_lazy_with_config(c, config));
            let Ok(manager) = manager else {
                tracing::error!(
                    "cannot make the Redis subscription; announcements are not received"
                );
                return;
            };
            if !self.listen(manager, received).await {
                return;
            }
            // While Redis is away this repeats every few seconds: say it now and then.
            if warned.is_none_or(|at| at.elapsed() >= WARN_SILENCE_EVERY) {
                warned = Some(Instant::now());
                tracing::warn!("the Redis subscription went silent; connecting it again");
            } else {
                tracing::debug!("the Redis subscription went silent; connecting it again");
            }
        }
    }

    /// Runs one connection until it goes silent (true) or the process ends (false).
    async fn listen(
        &self,
        mut manager: ConnectionManager,
        mut received: mpsc::UnboundedReceiver<PushInfo>,
    ) -> bool {
        let silence = SILENCE + self.timeout * 2;
        let mut last_beat = Instant::now();
        let mut heard = 0;
        // When the oldest heartbeat Redis took that has not been heard here landed.
        let mut unheard_since: Option<Instant> = None;
        let mut tick = tokio::time::interval(RESUBSCRIBE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                push = received.recv() => match push {
                    Some(push) => {
                        if let Some(number) = self.heard(push) {
                            last_beat = Instant::now();
                            heard = heard.max(number);
                        }
                    }
                    None => return false,
                },
                _ = tick.tick() => {
                    if last_beat.elapsed() > silence {
                        self.listening.set(false, &self.metrics);
                        return true;
                    }
                    // An echo Redis took a round trip ago and that was not heard here: the
                    // subscription may be deaf. Not live (subscribing is retried) until one is
                    // heard again, long before the connection is given up on.
                    match self.health.last_landed() {
                        Some((number, at)) if number > heard => {
                            let since = *unheard_since.get_or_insert(at);
                            if since.elapsed() > self.timeout + ECHO_SLACK
                                && self.listening.is_live()
                            {
                                tracing::debug!("a heartbeat was not heard on the subscription");
                                self.listening.set(false, &self.metrics);
                            }
                        }
                        _ => unheard_since = None,
                    }
                    if !self.listening.is_live() {
                        let channels = [
                            self.channel.as_str(),
                            &self.beat_channel,
                            self.leases.lease_channel(),
                            self.leases.ack_channel(),
                        ];
                        if let Err(e) = manager.subscribe(&channels[..]).await {
                            tracing::debug!(error = %e, "subscribing to announcements failed");
                        }
                    }
                }
            }
        }
    }

    /// Handles one push; the heartbeat's number when it was this replica's own.
    fn heard(&self, push: PushInfo) -> Option<u64> {
        match push.kind {
            PushKind::Message if self.on_beat_channel(&push) => {
                if !self.listening.is_live() {
                    self.listening.set(true, &self.metrics);
                }
                return Some(beat_number(&push));
            }
            PushKind::Message => match channel_of(&push) {
                Some(channel) if channel == self.leases.lease_channel().as_bytes() => {
                    self.lease_invalidation(&push);
                }
                Some(channel) if channel == self.leases.ack_channel().as_bytes() => {
                    if let Some(payload) = payload_of(&push) {
                        self.leases.acknowledged(&payload);
                    }
                }
                _ => self.message(&push),
            },
            PushKind::Disconnection => {
                if self.listening.is_live() {
                    tracing::warn!("the Redis subscription dropped; re-checking until it is back");
                }
                self.listening.set(false, &self.metrics);
            }
            _ => {}
        }
        None
    }

    fn on_beat_channel(&self, push: &PushInfo) -> bool {
        channel_of(push).is_some_and(|channel| channel == self.beat_channel.as_bytes())
    }

    fn drop_all(&self) {
        let _ = self.invalidate.send(Invalidation::of(Touched::Everything));
    }

    /// Applies a lease invalidation in the order heard, and acknowledges it once the cache
    /// has dropped what it touched.
    fn lease_invalidation(&self, push: &PushInfo) {
        let leases = &self.leases;
        let (touched, ack) = match payload_of(push) {
            Some(payload) => leases.heard(&payload),
            None => (Touched::Everything, None),
        };
        let Some(ack) = ack else {
            let _ = self.invalidate.send(Invalidation::of(touched));
            return;
        };
        let (dropped, done) = oneshot::channel();
        let invalidation = Invalidation {
            touched,
            dropped: Some(dropped),
        };
        if self.invalidate.send(invalidation).is_ok() {
            tokio::spawn(leases.clone().acknowledge_after(done, ack));
        }
    }

    /// An announcement on the earlier channel: a write through a replica of a version before
    /// leases (a rolling upgrade), or one of this version's, which publish there too for them.
    fn message(&self, push: &PushInfo) {
        let payload = payload_of(push);
        let Some(message) = payload.and_then(|p| serde_json::from_slice::<Message>(&p).ok()) else {
            // Something wrote to the channel that icecache cannot read: assume the worst.
            self.metrics.heard(Heard::Unreadable);
            self.drop_all();
            return;
        };
        if message.r == self.replica {
            return;
        }
        self.metrics.heard(Heard::Ok);
        let delay = now_ms().saturating_sub(message.ms);
        self.metrics
            .propagated(Duration::from_millis(delay).as_secs_f64());
        let _ = self.invalidate.send(Invalidation::of(message.touched()));
    }
}

fn channel_of(push: &PushInfo) -> Option<Vec<u8>> {
    push.data
        .first()
        .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
}

fn payload_of(push: &PushInfo) -> Option<Vec<u8>> {
    push.data
        .get(1)
        .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
}

/// The number a heartbeat published (0 when unreadable: it still proves the subscription).
fn beat_number(push: &PushInfo) -> u64 {
    push.data
        .get(1)
        .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
        .and_then(|bytes| std::str::from_utf8(&bytes).ok()?.parse().ok())
        .unwrap_or(0)
}
