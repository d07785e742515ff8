//! The tier's leases: the I/O around the pure rules of `trust`.
//! Heartbeats renew this replica's lease through the heartbeat script; invalidations heard on
//! the lease channel are applied, then acknowledged once the cache has dropped what they
//! touched; a write publishes its invalidation through the invalidate script and answers once
//! `trust` says it may. A lookup asks nothing of Redis: it reads the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::aio::ConnectionManager;
use smallvec::smallvec;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::announce::Message;
use super::health::Health;
use super::names::Names;
use super::redis_parts::random_token;
use super::trust::scripts::{read_invalidation, LeaseScripts, ScriptError};
use super::trust::{
    Apply, MemberId, Position, Renewal, Rules, ServeView, Trust, Verdict, WriteWait, DEFAULT_LEASE,
};
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::coordination::{Cover, Tokens};
use crate::telemetry::cluster::{RoundTrip, WaitEnded};
use crate::telemetry::ClusterMetrics;

/// How long a write keeps trying to move its tokens and publish its invalidation before it
/// answers that its outcome may not be seen by the others (`Cover::Lost`).
pub const PUBLISH_PATIENCE: Duration = Duration::from_secs(5);
/// How long an announcement that could not be made in time is still tried, in the
/// background, so that the others drop what the write made old once Redis answers again.
pub const PUBLISH_LATER_FOR: Duration = Duration::from_secs(120);
/// How long a write waits before it tries Redis again.
pub const RETRY_EVERY: Duration = Duration::from_millis(100);
/// One heartbeat in this many is echoed on the replica's own channel.
const ECHO_EVERY: u64 = 2;
/// Marks tokens as a lease generation's, never equal to tokens read from Redis.
const LEASE_MARK: u64 = u64::MAX;

/// What is left to do of a write's announcement.
struct Announcement {
    /// Its token moves, until they ran.
    moves: Option<redis::Pipeline>,
    /// Its invalidation as published: the write's id, then its message.
    body: String,
}

/// A write waiting to answer: acknowledgements may arrive before its position does.
enum Slot {
    Early(Vec<MemberId>),
    Waiting(WriteWait, Arc<Notify>),
}

pub struct Leases {
    trust: Mutex<Trust>,
    /// `trust`'s view for lookups, stored under its lock after every change: a hit reads it
    /// without the lock, which every worker would otherwise take on every request.
    view: ArcSwap<ServeView>,
    /// The lease heartbeat is the tier's only one: it says whether Redis answers.
    health: Arc<Health>,
    /// This replica's own channel, where every other heartbeat is echoed.
    beat_channel: String,
    scripts: LeaseScripts,
    connection: ConnectionManager,
    lease_channel: String,
    ack_channel: String,
    replica: String,
    slots: Mutex<HashMap<u64, Slot>>,
    metrics: Arc<ClusterMetrics>,
}

impl Leases {
    pub fn new(
        names: &Names,
        timeout: Duration,
        replica: &str,
        connection: ConnectionManager,
        health: Arc<Health>,
        metrics: Arc<ClusterMetrics>,
    ) -> Leases {
        Leases {
            trust: Mutex::new(Trust::new(Rules::new(DEFAULT_LEASE), random_token())),
            view: ArcSwap::from_pointee(ServeView::NO_LEASE),
            health,
            beat_channel: names.beat_channel(replica),
            lease_channel: names.lease_keys().channel,
            scripts: LeaseScripts::new(names.lease_keys(), timeout),
            connection,
            ack_channel: names.ack_channel(),
            replica: replica.to_owned(),
            slots: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn member(&self) -> MemberId {
        self.trust.lock().map_or(0, |t| t.member())
    }

    /// What an entry must have been filled under to be served now: None while the lease does
    /// not hold (the lookup asks the catalog).
    pub fn tokens(&self) -> Option<Tokens> {
        let view = **self.view.load();
        let generation = view.generation();
        (view.may_serve(Instant::now(), generation) == Verdict::Serve)
            .then(|| Tokens(smallvec![LEASE_MARK, generation]))
    }

    /// Copies `trust`'s view out for lookups (called under its lock, so views are stored in
    /// the order the changes were made).
    fn show(&self, trust: &Trust) {
        self.view.store(Arc::new(trust.view()));
    }

    /// The dataset of the invalidation log this replica has applied (None before its first
    /// renewal): it changes whenever Redis lost the log or writes in it.
    pub fn dataset(&self) -> Option<u64> {
        self.trust.lock().ok()?.dataset()
    }

    /// Renews the lease three times a lease, forgetting members whose leases ran out; every
    /// other heartbeat is echoed on this replica's channel, which keeps its subscription
    /// known to be live (see `subscription`).
    pub async fn renew(self: Arc<Self>) {
        let every = self
            .trust
            .lock()
            .map_or(DEFAULT_LEASE / 3, |t| t.rules().heartbeat_every());
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for number in 1u64.. {
            tick.tick().await;
            let echo = (number % ECHO_EVERY == 0).then_some((self.beat_channel.as_str(), number));
            let Ok(beat) = self.trust.lock().map(|t| t.heartbeat(random_token())) else {
                return;
            };
            let sent = Instant::now();
            let mut connection = self.connection.clone();
            self.metrics.round_trip(RoundTrip::Beat);
            let reply = self
                .scripts
                .heartbeat(&mut connection, &beat, random_token(), echo)
                .await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    self.health
                        .down(&self.metrics, &format!("a lease heartbeat: {e}"));
                    self.metrics.lease_held(self.tokens().is_some());
                    continue;
                }
            };
            self.health
                .renewed(sent, echo.map(|(_, n)| n), &self.metrics);
            let (expired, dataset) = {
                let Ok(mut trust) = self.trust.lock() else {
                    return;
                };
                let now = Instant::now();
                if trust.answered(sent, now, &reply) == Renewal::Reset {
                    self.metrics.lease_reset();
                }
                self.show(&trust);
                (
                    trust.expired_peers(now),
                    trust.dataset().unwrap_or_default(),
                )
            };
            self.metrics.lease_held(self.tokens().is_some());
            for (member, stamp) in expired {
                self.metrics.round_trip(RoundTrip::Forget);
                let forgotten = self
                    .scripts
                    .forget(&mut connection, member, dataset, stamp)
                    .await;
                if let Err(e) = forgotten {
                    tracing::debug!(error = %e, "forgetting a replica whose lease ran out failed");
                }
            }
        }
    }

    /// An invalidation heard on the lease channel: what the cache must drop, and the
    /// acknowledgement to publish once it has (none for this replica's own writes, or for a
    /// message it cannot read: that writer waits out this replica's lease).
    pub fn heard(&self, published: &[u8]) -> (Touched, Option<String>) {
        let Some((position, rest)) = read_invalidation(published) else {
            return (Touched::Everything, None);
        };
        let apply = match self.trust.lock() {
            Ok(mut trust) => {
                let apply = trust.invalidation(Instant::now(), position);
                self.show(&trust);
                apply
            }
            Err(_) => Apply::Everything,
        };
        if apply == Apply::Everything {
            self.metrics.lease_reset();
        }
        let Some((write, message)) = read_write(rest) else {
            return (Touched::Everything, None);
        };
        let touched = match apply {
            Apply::Everything => Touched::Everything,
            Apply::Touched => message.touched(),
        };
        let ack =
            (message.r != self.replica).then(|| format!("{:016x} {write:016x}", self.member()));
        (touched, ack)
    }

    /// Publishes `ack` once the cache says it dropped what the invalidation touched.
    pub async fn acknowledge_after(self: Arc<Self>, dropped: oneshot::Receiver<()>, ack: String) {
        if dropped.await.is_err() {
            return;
        }
        let mut connection = self.connection.clone();
        self.metrics.round_trip(RoundTrip::Acknowledge);
        let sent = self
            .scripts
            .publish(&mut connection, &self.ack_channel, &ack)
            .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "an acknowledgement was not published; its writer waits out the lease");
        }
    }

    pub fn lease_channel(&self) -> &str {
        &self.lease_channel
    }

    pub fn ack_channel(&self) -> &str {
        &self.ack_channel
    }

    /// An acknowledgement heard on the acknowledgement channel.
    pub fn acknowledged(&self, published: &[u8]) {
        let Some((member, write)) = read_ack(published) else {
            return;
        };
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        match slots.get_mut(&write) {
            Some(Slot::Early(acks)) => acks.push(member),
            Some(Slot::Waiting(wait, woken)) => {
                wait.acknowledged(member, write);
                woken.notify_one();
            }
            None => {}
        }
    }

    /// Announces a write: runs its token moves (`moves`), then publishes its invalidation, and
    /// waits until the write may answer: every replica listed acknowledged it, or its lease has
    /// certainly run out. What could not be done within `PUBLISH_PATIENCE` of `started` is
    /// `Cover::Lost`, and is tried on in the background so that the others drop what the write
    /// made old once Redis answers.
    pub async fn publish(
        self: &Arc<Self>,
        touched: &Touched,
        moves: redis::Pipeline,
        started: Instant,
    ) -> Cover {
        let write = random_token();
        let message = Message::new(&self.replica, now_ms(), touched);
        let mut left = Announcement {
            moves: Some(moves),
            body: format!(
                "{write:016x} {}",
                serde_json::to_string(&message).unwrap_or_default()
            ),
        };
        self.slot(write, Some(Slot::Early(Vec::new())));
        let cover = loop {
            match self.announce_step(&mut left).await {
                Ok((position, members)) => {
                    let wait = match self.trust.lock() {
                        Ok(trust) => trust.begin_write(Instant::now(), write, position, &members),
                        Err(_) => break Cover::Lost,
                    };
                    break self.wait(write, wait).await;
                }
                Err(e) if started.elapsed() >= PUBLISH_PATIENCE => {
                    tracing::warn!(
                        error = %e,
                        "a write could not be announced; trying on in the background"
                    );
                    tokio::spawn(self.clone().announce_later(left));
                    break Cover::Lost;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "announcing a write failed; again");
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        };
        self.slot(write, None);
        cover
    }

    /// One attempt at what is left of an announcement: the token moves first (once they ran,
    /// they are not run again), then the invalidation, whose position and listed members it
    /// answers.
    async fn announce_step(
        &self,
        left: &mut Announcement,
    ) -> Result<(Position, Vec<MemberId>), ScriptError> {
        let mut connection = self.connection.clone();
        if let Some(moves) = &left.moves {
            self.metrics.round_trip(RoundTrip::Announce);
            self.scripts.run(&mut connection, moves).await?;
            left.moves = None;
        }
        self.metrics.round_trip(RoundTrip::Invalidate);
        self.scripts
            .invalidate(&mut connection, left.body.as_bytes(), random_token())
            .await
    }

    /// Goes on with an announcement whose write was answered as lost, waiting for no
    /// acknowledgement.
    async fn announce_later(self: Arc<Self>, mut left: Announcement) {
        let started = Instant::now();
        while started.elapsed() < PUBLISH_LATER_FOR {
            tokio::time::sleep(DEFAULT_LEASE).await;
            if self.announce_step(&mut left).await.is_ok() {
                return;
            }
        }
        tracing::warn!("a write's announcement never reached Redis");
    }

    /// Takes this replica out of the members (a clean shutdown: writes need not wait out its
    /// lease).
    pub async fn leave(&self) {
        let mut connection = self.connection.clone();
        self.metrics.round_trip(RoundTrip::Forget);
        if let Err(e) = self.scripts.leave(&mut connection, self.member()).await {
            tracing::debug!(error = %e, "leaving the lease members failed; the others forget this replica");
        }
    }

    fn slot(&self, write: u64, slot: Option<Slot>) -> Option<Slot> {
        let mut slots = self.slots.lock().ok()?;
        match slot {
            Some(slot) => slots.insert(write, slot),
            None => slots.remove(&write),
        }
    }

    async fn wait(&self, write: u64, mut wait: WriteWait) -> Cover {
        let woken = Arc::new(Notify::new());
        if let Some(Slot::Early(acks)) = self.slot(write, None) {
            for member in acks {
                wait.acknowledged(member, write);
            }
        }
        let deadline = wait.deadline();
        let since = Instant::now();
        self.slot(write, Some(Slot::Waiting(wait, woken.clone())));
        loop {
            let ended = match self.slots.lock() {
                Ok(slots) => match slots.get(&write) {
                    Some(Slot::Waiting(wait, _)) => ended(wait),
                    _ => Some(WaitEnded::LeaseRanOut),
                },
                Err(_) => Some(WaitEnded::LeaseRanOut),
            };
            if let Some(ended) = ended {
                let waited = since.elapsed().as_secs_f64();
                self.metrics.write_waited(ended, waited);
                return Cover::Announced;
            }
            tokio::select! {
                () = woken.notified() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

/// Whether a write may answer now, and why.
fn ended(wait: &WriteWait) -> Option<WaitEnded> {
    if !wait.may_answer(Instant::now()) {
        return None;
    }
    Some(match wait.waiting_for().next() {
        None => WaitEnded::Acknowledged,
        Some(_) => WaitEnded::LeaseRanOut,
    })
}

/// A lease invalidation's own part: the write's id, then its message.
fn read_write(rest: &[u8]) -> Option<(u64, Message)> {
    let space = rest.iter().position(|b| *b == b' ')?;
    let write = u64::from_str_radix(std::str::from_utf8(&rest[..space]).ok()?, 16).ok()?;
    let message = serde_json::from_slice(&rest[space + 1..]).ok()?;
    Some((write, message))
}

/// An acknowledgement: the member's id and the write's, in hex.
fn read_ack(published: &[u8]) -> Option<(MemberId, u64)> {
    let text = std::str::from_utf8(published).ok()?;
    let (member, write) = text.split_once(' ')?;
    Some((
        u64::from_str_radix(member, 16).ok()?,
        u64::from_str_radix(write, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledgement_reads_back() {
        assert_eq!(
            read_ack(b"00000000000000a1 00000000000000b2"),
            Some((0xa1, 0xb2))
        );
        assert_eq!(read_ack(b"a1"), None);
        assert_eq!(read_ack(b"zz b2"), None);
    }

    #[test]
    fn a_write_message_reads_back() {
        let message = Message::new("r1", 5, &Touched::Everything);
        let body = format!("00ff {}", serde_json::to_string(&message).unwrap());
        let (write, read) = read_write(body.as_bytes()).unwrap();
        assert_eq!(write, 0xff);
        assert_eq!(read.r, "r1");
        assert!(read_write(b"00ff not json").is_none());
    }
}
