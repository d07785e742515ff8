//! The simulation's events and its seeded randomness.

use tokio::time::Instant;

use super::super::{HeartbeatReply, MemberId, Position};

/// splitmix64: a seed names one schedule, on every machine.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub(super) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }
}

#[derive(Debug, Clone)]
pub(super) enum Cmd {
    Heartbeat {
        sent: Instant,
        applied: Option<Position>,
        stamp: u64,
    },
    Invalidate {
        write: u64,
        table: usize,
    },
    Forget {
        member: MemberId,
        dataset: u64,
        stamp: u64,
    },
    Ack {
        write: u64,
    },
}

#[derive(Debug, Clone)]
pub(super) enum Ev {
    Tick,
    ToRedis {
        member: MemberId,
        cmd: Cmd,
    },
    HeartbeatAnswer {
        sent: Instant,
        reply: HeartbeatReply,
    },
    Invalidated {
        write: u64,
        position: Position,
        members: Vec<MemberId>,
    },
    Invalidation {
        position: Position,
        write: u64,
        table: usize,
    },
    Acked {
        write: u64,
        member: MemberId,
    },
    Load {
        table: usize,
        began: u64,
    },
    Fetched(Fetch),
    Write {
        table: usize,
    },
    Committed {
        write: u64,
    },
    Retry {
        write: u64,
    },
    Deadline {
        write: u64,
    },
    Pause {
        until: u64,
    },
    Crash,
    Start,
    Flush,
    /// The members hash loses members (deleted, evicted, trimmed) while the log stays.
    MembersLost {
        all: bool,
    },
    Failover {
        back_us: u64,
    },
}

/// An event for one incarnation of a replica (or for Redis / the schedule when `to` is None).
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) at: u64,
    pub(super) order: u64,
    pub(super) to: Option<(usize, u64)>,
    pub(super) ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// A catalog answer to a load, on its way back to the replica that asked.
#[derive(Debug, Clone)]
pub(super) struct Fetch {
    pub(super) table: usize,
    pub(super) version: u64,
    /// The table's ticket and the replica's generation when the fill began.
    pub(super) ticket: u64,
    pub(super) generation: u64,
    pub(super) began: u64,
    pub(super) fill: u64,
}
