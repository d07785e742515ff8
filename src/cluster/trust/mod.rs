//! The tier's trust rules on leases (Gray & Cheriton's leases, Chubby's invalidation rule), as
//! one pure state machine: heartbeats sent and answered, invalidations, acknowledgements and
//! time go in; "may serve from memory", "must ask the catalog" and "the write may answer" come
//! out. It reads no clock and does no I/O: every instant is an argument, so the rules are tested
//! under paused time and driven by the deterministic simulation in `sim.rs`.
//!
//! The model of Redis it assumes (three scripts, each atomic):
//! - **heartbeat** (`member`, `applied`): reads the log's [`Position`] (creating a dataset with a
//!   random id when the log is missing: a flush or an empty failover); when `applied` is in this
//!   dataset but ahead of it, Redis lost writes, and the script starts a new dataset; then it
//!   lists the member under the heartbeat's random stamp and answers the position, whether the
//!   member was listed before, and every member with its stamp ([`HeartbeatReply`]).
//! - **invalidate** (`write`, what it touched): moves the position one on, publishes the
//!   invalidation with the write's random id, and answers the position and the members.
//! - **forget** (`member`, `dataset`, `stamp`): removes a member only when it is still listed
//!   under that stamp in that dataset. Stamps are random, never counts: a member forgotten and
//!   listed again must not match a stamp seen before it was forgotten.
//! - Both the heartbeat and the invalidation find the members complete or start a new dataset:
//!   the log counts the members listed and not forgotten, and a member list shorter than that
//!   (deleted, evicted, trimmed by anything but these scripts) is a membership lost, as after a
//!   flush. Without this a write would wait for nobody while a live lease went unlisted.
//!
//! Invariants (the tests that hold them in brackets; `sim` is `sim::schedules_never_read_stale`):
//! 1. A replica serves from memory only while its lease holds: the last renewal it accepted
//!    was *sent* less than `lease - margin` ago on its own clock, and the entry was filled in
//!    the current generation. A renewal answered late renews nothing it would not have renewed
//!    on time, and a replica that was paused past its lease asks the catalog on waking
//!    [`a_lease_runs_from_the_sending`, `a_late_answer_renews_nothing`,
//!    `a_paused_replica_asks_on_waking`, sim].
//! 2. A renewal is accepted only once the replica has applied every invalidation up to the
//!    position it was answered at; a replica that missed one (a gap, another dataset, a
//!    heartbeat that found it unlisted) first drops everything it holds by moving its generation
//!    [`a_renewal_waits_for_the_invalidations_before_it`, `a_gap_drops_everything`,
//!    `another_dataset_drops_everything`, `an_unlisted_replica_drops_everything`, sim].
//! 3. A write answers only when every member listed with its position has acknowledged its
//!    invalidation (after dropping what it touched), or `lease + margin` has passed on the
//!    writer's clock since that position was answered; when the writer has known the dataset
//!    for less than that, the members listed may not be all the leases alive (a flush), and it
//!    waits it out [`a_write_answers_when_every_member_acknowledged`,
//!    `a_silent_member_costs_one_lease`, `a_young_dataset_waits_out_the_lease`, sim (seed 117:
//!    the members hash lost while a replica was deaf)].
//! 4. A member is forgotten only after its stamp was seen unchanged for `lease + margin` on
//!    the forgetter's clock, and only if it is still listed under that stamp in that dataset; a
//!    member forgotten that renews again is unlisted, so invariant 2 drops what it holds
//!    [`a_member_is_forgotten_after_a_lease_unchanged`, sim (seed 9360: a count restarted
//!    after forgetting matched an old one and forgot a live lease)].
//! 5. Redis losing recent writes (a lagging failover) is caught when a replica that applied a
//!    later position heartbeats (the script starts a new dataset); until then a replica that
//!    missed a lost invalidation may serve what it invalidated, for at most `fresh_for`. The
//!    simulation counts those reads apart and fails on any other [sim].
//!
//! Clock rates: `margin` (1% of the lease plus 2 ms) covers two clocks drifting apart by up to
//! 0.5% each over one lease; a lease is measured on the holder's clock shortened by the margin and
//! waited on the writer's lengthened by it.

pub mod scripts;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
mod write;

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

pub use write::WriteWait;

/// A replica, as Redis lists it (random per process).
pub type MemberId = u64;

/// Where the invalidation log stands: the dataset (random, new whenever Redis lost the log)
/// and the number of invalidations in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub dataset: u64,
    pub seq: u64,
}

/// The lease's length and the margin for clocks running at different rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    lease: Duration,
    margin: Duration,
}

pub const DEFAULT_LEASE: Duration = Duration::from_millis(1000);

impl Rules {
    pub fn new(lease: Duration) -> Rules {
        Rules {
            lease,
            margin: lease / 100 + Duration::from_millis(2),
        }
    }

    /// How long a holder trusts a renewal, from its sending.
    pub fn held_for(&self) -> Duration {
        self.lease.saturating_sub(self.margin)
    }

    /// How long a writer or a forgetter waits for a lease to have certainly passed.
    pub fn waited_for(&self) -> Duration {
        self.lease + self.margin
    }

    /// How often a replica renews: three times a lease, so that one lost heartbeat costs no
    /// lease (and the tier's Redis work stays a few commands a second per replica).
    pub fn heartbeat_every(&self) -> Duration {
        self.lease / 3
    }
}

/// What a heartbeat carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub member: MemberId,
    pub applied: Option<Position>,
    /// Random per heartbeat: what the member is listed under until its next renewal.
    pub stamp: u64,
}

/// What the heartbeat script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub position: Position,
    /// Whether the member was listed before this renewal.
    pub known: bool,
    /// Every member listed, with the stamp of its last renewal.
    pub members: Vec<(MemberId, u64)>,
}

/// What a heartbeat's answer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease now runs from the heartbeat's sending.
    Renewed,
    /// Invalidations published before the answer have not arrived yet; the lease is renewed
    /// when they have.
    Waiting,
    /// The replica missed invalidations: everything it held is dropped (the generation moved)
    /// and the lease renewed.
    Reset,
}

/// What an invalidation that arrived does to what the replica holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// Drop what the write touched.
    Touched,
    /// Drop everything: invalidations were missed before this one.
    Everything,
}

/// Whether a lookup may be answered from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Serve,
    AskCatalog(Distrust),
}

/// Why memory is not trusted, for `x-cache`, metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrust {
    /// No renewal accepted yet, or the last one has run out.
    NoLease,
    /// The entry was filled before everything held was dropped.
    OlderGeneration,
}

impl Distrust {
    pub fn as_str(self) -> &'static str {
        match self {
            Distrust::NoLease => "no_lease",
            Distrust::OlderGeneration => "older_generation",
        }
    }
}

/// The part of [`Trust`] a lookup reads: until when the lease holds, and the generation held
/// entries must have been filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeView {
    lease_until: Option<Instant>,
    generation: u64,
}

impl ServeView {
    /// Nothing is served before the first renewal.
    pub const NO_LEASE: ServeView = ServeView {
        lease_until: None,
        generation: 0,
    };

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether an entry filled in `generation` may be served at `now`.
    pub fn may_serve(&self, now: Instant, generation: u64) -> Verdict {
        match self.lease_until {
            Some(until) if now < until => {}
            _ => return Verdict::AskCatalog(Distrust::NoLease),
        }
        if generation != self.generation {
            return Verdict::AskCatalog(Distrust::OlderGeneration);
        }
        Verdict::Serve
    }
}

/// A renewal answered while invalidations before it were still on their way.
#[derive(Debug, Clone, Copy)]
struct Pending {
    sent: Instant,
    position: Position,
}

/// A peer's stamp, and when this replica first saw it under that stamp.
#[derive(Debug, Clone, Copy)]
struct Seen {
    stamp: u64,
    since: Instant,
}

/// One replica's trust in its memory.
#[derive(Debug)]
pub struct Trust {
    rules: Rules,
    member: MemberId,
    lease_until: Option<Instant>,
    applied: Option<Position>,
    generation: u64,
    /// The dataset applied, and since when this replica knows it.
    dataset_since: Option<(u64, Instant)>,
    pending: Option<Pending>,
    peers: HashMap<MemberId, Seen>,
}

impl Trust {
    pub fn new(rules: Rules, member: MemberId) -> Trust {
        Trust {
            rules,
            member,
            lease_until: None,
            applied: None,
            generation: 0,
            dataset_since: None,
            pending: None,
            peers: HashMap::new(),
        }
    }

    pub fn rules(&self) -> Rules {
        self.rules
    }

    pub fn member(&self) -> MemberId {
        self.member
    }

    /// The generation an entry filled now belongs to (taken when its fill begins).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn applied(&self) -> Option<Position> {
        self.applied
    }

    /// What the next heartbeat sends, under a fresh random `stamp`; the caller notes when it
    /// sent it.
    pub fn heartbeat(&self, stamp: u64) -> Heartbeat {
        Heartbeat {
            member: self.member,
            applied: self.applied,
            stamp,
        }
    }

    /// A heartbeat sent at `sent` was answered at `now`.
    pub fn answered(&mut self, sent: Instant, now: Instant, reply: &HeartbeatReply) -> Renewal {
        let renewal = self.renewal(sent, now, reply.position, reply.known);
        self.see_peers(now, reply);
        renewal
    }

    fn renewal(&mut self, sent: Instant, now: Instant, position: Position, known: bool) -> Renewal {
        let missed = match self.applied {
            _ if !known => true,
            None => true,
            Some(applied) if applied.dataset != position.dataset => true,
            Some(applied) if applied.seq >= position.seq => {
                self.pending = None;
                self.renew(sent);
                return Renewal::Renewed;
            }
            // Behind: either the invalidations are on their way (published before this answer,
            // on another connection) or they were lost. A second answer that finds the replica
            // still short of what the first one waited for says they were lost.
            Some(_) => matches!(self.pending, Some(p) if p.position.dataset == position.dataset),
        };
        if missed {
            self.reset(position, now);
            self.pending = None;
            self.renew(sent);
            return Renewal::Reset;
        }
        self.pending = Some(Pending { sent, position });
        Renewal::Waiting
    }

    /// An invalidation published at `position` arrived; the caller drops what [`Apply`] says,
    /// then acknowledges the write.
    pub fn invalidation(&mut self, now: Instant, position: Position) -> Apply {
        let Some(applied) = self.applied else {
            // Nothing is served before the first renewal, which drops everything anyway.
            return Apply::Touched;
        };
        if applied.dataset == position.dataset && position.seq <= applied.seq + 1 {
            if position.seq == applied.seq + 1 {
                self.applied = Some(position);
                self.accept_pending();
            }
            return Apply::Touched;
        }
        // A gap, or another dataset: what was missed is unknown, so nothing held is kept, and
        // the log is followed from here.
        self.reset(position, now);
        self.accept_pending();
        Apply::Everything
    }

    /// Whether an entry filled in `generation` may be served at `now` (after the request was
    /// read, so that a replica paused meanwhile judges by the time it woke at).
    pub fn may_serve(&self, now: Instant, generation: u64) -> Verdict {
        self.view().may_serve(now, generation)
    }

    /// What a lookup needs to judge by [`ServeView::may_serve`], as of now: the caller copies
    /// it out after every change, so that a hit reads it without taking a lock.
    pub fn view(&self) -> ServeView {
        ServeView {
            lease_until: self.lease_until,
            generation: self.generation,
        }
    }

    /// The members whose stamp has not moved for a whole lease: they hold no lease any more
    /// and may be forgotten (by compare-and-delete of that stamp, in that dataset).
    pub fn expired_peers(&self, now: Instant) -> Vec<(MemberId, u64)> {
        self.peers
            .iter()
            .filter(|(_, seen)| {
                now.saturating_duration_since(seen.since) >= self.rules.waited_for()
            })
            .map(|(member, seen)| (*member, seen.stamp))
            .collect()
    }

    /// The dataset peers were counted in (forgetting names it).
    pub fn dataset(&self) -> Option<u64> {
        self.applied.map(|p| p.dataset)
    }

    /// This replica's invalidation was published at `position` (answered at `now`) while
    /// `members` were listed: what the write waits for before it answers.
    pub fn begin_write(
        &self,
        now: Instant,
        write: u64,
        position: Position,
        members: &[MemberId],
    ) -> WriteWait {
        let known_long = matches!(self.dataset_since,
            Some((dataset, since)) if dataset == position.dataset
                && now.saturating_duration_since(since) >= self.rules.waited_for());
        WriteWait::new(
            write,
            members.iter().copied().filter(|m| *m != self.member),
            now + self.rules.waited_for(),
            !known_long,
        )
    }

    fn renew(&mut self, sent: Instant) {
        let until = sent + self.rules.held_for();
        self.lease_until = Some(self.lease_until.map_or(until, |old| old.max(until)));
    }

    /// Drops everything held (the generation moves) and follows the log from `position`.
    fn reset(&mut self, position: Position, now: Instant) {
        self.generation += 1;
        if self.dataset() != Some(position.dataset) {
            self.dataset_since = Some((position.dataset, now));
            self.peers.clear();
        }
        self.applied = Some(position);
    }

    fn accept_pending(&mut self) {
        let (Some(pending), Some(applied)) = (self.pending, self.applied) else {
            return;
        };
        if pending.position.dataset != applied.dataset {
            self.pending = None;
        } else if applied.seq >= pending.position.seq {
            self.pending = None;
            self.renew(pending.sent);
        }
    }

    fn see_peers(&mut self, now: Instant, reply: &HeartbeatReply) {
        if self.dataset() != Some(reply.position.dataset) {
            self.peers.clear();
        }
        let listed: HashMap<MemberId, u64> = reply
            .members
            .iter()
            .copied()
            .filter(|(m, _)| *m != self.member)
            .collect();
        self.peers.retain(|m, _| listed.contains_key(m));
        for (member, stamp) in listed {
            let seen = self
                .peers
                .entry(member)
                .or_insert(Seen { stamp, since: now });
            if seen.stamp != stamp {
                *seen = Seen { stamp, since: now };
            }
        }
    }
}
