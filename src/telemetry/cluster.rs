//! A replica of a tier on Redis: its round trips by purpose, its health (degraded, hearing the
//! others), its lease, the writes it could not announce or refused and how long writes waited,
//! the entries shared through Redis, the announcements sent and heard, and the fill lease waits.

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

use super::registry::{counter, counter_vec, gauge, histogram, known, Label};

pub struct ClusterMetrics {
    round_trips: IntCounterVec,
    errors: IntCounter,
    degraded: IntGauge,
    subscribed: IntGauge,
    unannounced: IntCounter,
    writes_refused: IntCounter,
    shared: IntCounterVec,
    published: IntCounter,
    received: IntCounterVec,
    propagation: Histogram,
    round_lookups: IntCounter,
    lease_waits: IntCounter,
    lease_wait: Histogram,
    lease_held: IntGauge,
    lease_resets: IntCounter,
    write_waits: IntCounterVec,
    write_wait: Histogram,
}

/// How a write's wait under leases ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnded {
    /// Every replica listed acknowledged the invalidation.
    Acknowledged,
    /// Some did not: the write waited out their leases.
    LeaseRanOut,
}

impl Label for WaitEnded {
    fn as_str(self) -> &'static str {
        match self {
            WaitEnded::Acknowledged => "acknowledged",
            WaitEnded::LeaseRanOut => "lease_ran_out",
        }
    }
}

/// What a round trip to Redis was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundTrip {
    Round,
    Create,
    Announce,
    Invalidate,
    Acknowledge,
    Forget,
    SharedGet,
    SharedPut,
    Lease,
    Release,
    LeaseCheck,
    Beat,
    Replay,
}

impl Label for RoundTrip {
    fn as_str(self) -> &'static str {
        match self {
            RoundTrip::Round => "round",
            RoundTrip::Create => "create",
            RoundTrip::Announce => "announce",
            RoundTrip::Invalidate => "invalidate",
            RoundTrip::Acknowledge => "acknowledge",
            RoundTrip::Forget => "forget",
            RoundTrip::SharedGet => "shared_get",
            RoundTrip::SharedPut => "shared_put",
            RoundTrip::Lease => "lease",
            RoundTrip::Release => "release",
            RoundTrip::LeaseCheck => "lease_check",
            RoundTrip::Beat => "beat",
            RoundTrip::Replay => "replay",
        }
    }
}

const ROUND_TRIPS: [RoundTrip; 13] = [
    RoundTrip::Round,
    RoundTrip::Create,
    RoundTrip::Announce,
    RoundTrip::Invalidate,
    RoundTrip::Acknowledge,
    RoundTrip::Forget,
    RoundTrip::SharedGet,
    RoundTrip::SharedPut,
    RoundTrip::Lease,
    RoundTrip::Release,
    RoundTrip::LeaseCheck,
    RoundTrip::Beat,
    RoundTrip::Replay,
];

/// What became of an entry shared through Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    Hit,
    Miss,
    Stale,
    Rejected,
    Stored,
    KeptLocal,
}

impl Label for Shared {
    fn as_str(self) -> &'static str {
        match self {
            Shared::Hit => "hit",
            Shared::Miss => "miss",
            Shared::Stale => "stale",
            Shared::Rejected => "rejected",
            Shared::Stored => "stored",
            Shared::KeptLocal => "kept_local",
        }
    }
}

/// How an announcement from another replica read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    Ok,
    Unreadable,
}

impl Label for Heard {
    fn as_str(self) -> &'static str {
        match self {
            Heard::Ok => "ok",
            Heard::Unreadable => "unreadable",
        }
    }
}

impl ClusterMetrics {
    pub fn new(r: &Registry) -> ClusterMetrics {
        ClusterMetrics {
            round_trips: counter_vec(
                r,
                "icecache_cluster_redis_round_trips_total",
                "Round trips to Redis, by what they were for (round, create, announce, \
                 invalidate, acknowledge, forget, shared_get, shared_put, lease, release, \
                 lease_check, beat, replay).",
                &["op"],
            ),
            errors: counter(
                r,
                "icecache_cluster_redis_errors_total",
                "Times Redis failed a command and the replica became degraded.",
            ),
            degraded: gauge(
                r,
                "icecache_cluster_degraded",
                "1 while this replica cannot trust Redis (loads follow cluster.on_redis_down).",
            ),
            subscribed: gauge(
                r,
                "icecache_cluster_subscribed",
                "1 while this replica hears the other replicas' invalidations (its own \
                 heartbeats' echoes prove it).",
            ),
            unannounced: counter(
                r,
                "icecache_cluster_unannounced_writes_total",
                "Writes the other replicas could not be told of within 5 s (answered 502 \
                 CommitStateUnknownException when the catalog made them).",
            ),
            writes_refused: counter(
                r,
                "icecache_cluster_writes_refused_total",
                "Writes refused (503) by a replica that cannot reach Redis.",
            ),
            shared: counter_vec(
                r,
                "icecache_cluster_shared_total",
                "Entries shared through Redis, by result (hit, miss, stale, rejected, stored, \
                 kept_local).",
                &["result"],
            ),
            published: counter(
                r,
                "icecache_cluster_invalidations_published_total",
                "Writes announced to the other replicas.",
            ),
            received: counter_vec(
                r,
                "icecache_cluster_invalidations_received_total",
                "Announcements received from other replicas, by result (ok, unreadable).",
                &["result"],
            ),
            propagation: histogram(
                r,
                "icecache_cluster_propagation_seconds",
                "Time from a replica announcing a write to this replica receiving it.",
            ),
            round_lookups: counter(
                r,
                "icecache_cluster_round_lookups_total",
                "Lookups answered by a shared token round (rounds are counted in \
                 icecache_cluster_redis_round_trips_total{op=\"round\"}).",
            ),
            lease_waits: counter(
                r,
                "icecache_cluster_lease_waits_total",
                "Fills that waited for another replica holding the lease.",
            ),
            lease_wait: histogram(
                r,
                "icecache_cluster_lease_wait_seconds",
                "How long a fill waited for another replica's lease.",
            ),
            lease_held: gauge(
                r,
                "icecache_cluster_lease_held",
                "1 while this replica's lease holds (as of its last \
                 heartbeat), so that it serves from memory.",
            ),
            lease_resets: counter(
                r,
                "icecache_cluster_lease_resets_total",
                "Times this replica dropped everything it held, \
                 having missed invalidations (a quiet subscription, a flushed Redis).",
            ),
            write_waits: counter_vec(
                r,
                "icecache_cluster_write_waits_total",
                "Writes that waited before answering, by how the \
                 wait ended (acknowledged, lease_ran_out).",
                &["ended"],
            ),
            write_wait: histogram(
                r,
                "icecache_cluster_write_wait_seconds",
                "How long a write waited for the others' \
                 acknowledgements or leases.",
            ),
        }
    }

    /// Makes every cluster series exist from the start (at 0), so that rates over them are
    /// defined before the first event; a replica starts degraded until Redis answers.
    pub fn started(&self) {
        known(&self.round_trips, &ROUND_TRIPS);
        known(
            &self.shared,
            &[
                Shared::Hit,
                Shared::Miss,
                Shared::Stale,
                Shared::Rejected,
                Shared::Stored,
                Shared::KeptLocal,
            ],
        );
        known(&self.received, &[Heard::Ok, Heard::Unreadable]);
        known(
            &self.write_waits,
            &[WaitEnded::Acknowledged, WaitEnded::LeaseRanOut],
        );
        self.degraded.set(1);
    }

    pub fn round_trip(&self, op: RoundTrip) {
        self.round_trips.with_label_values(&[op.as_str()]).inc();
    }

    /// Redis failed a command: the replica is degraded.
    pub fn redis_failed(&self) {
        self.errors.inc();
        self.degraded.set(1);
    }

    pub fn recovered(&self) {
        self.degraded.set(0);
    }

    pub fn subscribed(&self, live: bool) {
        self.subscribed.set(i64::from(live));
    }

    pub fn unannounced(&self) {
        self.unannounced.inc();
    }

    pub fn write_refused(&self) {
        self.writes_refused.inc();
    }

    pub fn shared(&self, result: Shared) {
        self.shared.with_label_values(&[result.as_str()]).inc();
    }

    pub fn published(&self) {
        self.published.inc();
    }

    pub fn heard(&self, result: Heard) {
        self.received.with_label_values(&[result.as_str()]).inc();
    }

    pub fn propagated(&self, seconds: f64) {
        self.propagation.observe(seconds);
    }

    pub fn round_answered(&self, lookups: usize) {
        self.round_lookups
            .inc_by(u64::try_from(lookups).unwrap_or(u64::MAX));
    }

    pub fn lease_held(&self, held: bool) {
        self.lease_held.set(i64::from(held));
    }

    pub fn lease_reset(&self) {
        self.lease_resets.inc();
    }

    pub fn write_waited(&self, ended: WaitEnded, seconds: f64) {
        self.write_waits.with_label_values(&[ended.as_str()]).inc();
        self.write_wait.observe(seconds);
    }

    pub fn lease_waited(&self, seconds: f64) {
        self.lease_waits.inc();
        self.lease_wait.observe(seconds);
    }
}
