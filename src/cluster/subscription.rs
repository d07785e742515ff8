//! Hearing the other replicas' announcements. Pub/sub delivers at most once: a replica whose
//! subscription dropped has missed what was published meanwhile, and Redis may refuse the
//! subscription again (a revoked channel, a restarted proxy), which the client's automatic
//! resubscription does not retry. So the subscription is tracked here: while it is not known to
//! be live, `bounded` lookups read the tokens as `read-your-writes` ones do, subscribing is
//! retried, and once it is live again whatever is held is dropped (it may have missed a message).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;

use super::announce::Message;
use super::{client, now_ms, Consistency};
use crate::catalog::writes::Touched;
use crate::ops::metrics::Metrics;

/// How often a replica without a live subscription tries to subscribe again.
const RESUBSCRIBE: Duration = Duration::from_millis(250);

/// Whether announcements are being heard; false until the first subscription is confirmed.
#[derive(Default)]
pub struct Listening(AtomicBool);

impl Listening {
    pub fn is_live(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, live: bool, metrics: &Metrics) {
        self.0.store(live, Ordering::Release);
        metrics.cluster_subscribed.set(i64::from(live));
    }
}

pub struct Subscriber {
    pub url: String,
    pub timeout: Duration,
    pub channel: String,
    pub consistency: Consistency,
    /// This replica's name in messages (it ignores its own).
    pub replica: String,
    pub listening: Arc<Listening>,
    pub metrics: Arc<Metrics>,
    pub invalidate: mpsc::UnboundedSender<Touched>,
}

impl Subscriber {
    /// Listens until the process ends.
    pub async fn run(self) {
        let (pushes, mut received) = mpsc::unbounded_channel::<PushInfo>();
        let config = ConnectionManagerConfig::new()
            .set_push_sender(pushes)
            .set_automatic_resubscription()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let manager =
            client(&self.url).and_then(|c| ConnectionManager::new_lazy_with_config(c, config));
        let Ok(mut manager) = manager else {
            tracing::error!("cannot make the Redis subscription; announcements are not received");
            return;
        };
        let mut retry = tokio::time::interval(RESUBSCRIBE);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                push = received.recv() => match push {
                    Some(push) => self.heard(push),
                    None => return,
                },
                _ = retry.tick(), if !self.listening.is_live() => {
                    if let Err(e) = manager.subscribe(&self.channel).await {
                        tracing::debug!(error = %e, "subscribing to announcements failed; retrying");
                    }
                }
            }
        }
    }

    fn heard(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message => self.message(&push),
            PushKind::Disconnection => {
                if self.listening.is_live() {
                    tracing::warn!("the Redis subscription dropped; re-checking until it is back");
                }
                self.listening.set(false, &self.metrics);
            }
            PushKind::Subscribe if !self.listening.is_live() => {
                self.listening.set(true, &self.metrics);
                if self.consistency == Consistency::Bounded {
                    // Filled while no message could arrive: one may have been missed.
                    let _ = self.invalidate.send(Touched::Everything);
                }
            }
            _ => {}
        }
    }

    fn message(&self, push: &PushInfo) {
        let payload = push
            .data
            .get(1)
            .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok());
        let Some(message) = payload.and_then(|p| serde_json::from_slice::<Message>(&p).ok()) else {
            // Something wrote to the channel that icecache cannot read: assume the worst.
            self.metrics.cluster_received("unreadable");
            let _ = self.invalidate.send(Touched::Everything);
            return;
        };
        if message.r == self.replica {
            return;
        }
        self.metrics.cluster_received("ok");
        let delay = now_ms().saturating_sub(message.ms);
        self.metrics
            .cluster_propagation
            .observe(Duration::from_millis(delay).as_secs_f64());
        let _ = self.invalidate.send(message.touched());
    }
}
