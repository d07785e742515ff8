//! What a write waits for before it answers (invariant 3 of `trust`).

use std::collections::HashSet;

use tokio::time::Instant;

use super::MemberId;

/// A write whose invalidation was published: it answers once every member listed with its
/// position has acknowledged, or once their leases have certainly run out.
#[derive(Debug)]
pub struct WriteWait {
    write: u64,
    waiting: HashSet<MemberId>,
    deadline: Instant,
    /// The members listed may not be every lease alive (the writer knows the dataset too
    /// briefly): acknowledgements cannot end the wait early.
    until_deadline: bool,
}

impl WriteWait {
    pub(super) fn new(
        write: u64,
        members: impl Iterator<Item = MemberId>,
        deadline: Instant,
        until_deadline: bool,
    ) -> WriteWait {
        WriteWait {
            write,
            waiting: members.collect(),
            deadline,
            until_deadline,
        }
    }

    /// `member` acknowledged `write` (after dropping what it touched). Acknowledgements of
    /// other writes change nothing.
    pub fn acknowledged(&mut self, member: MemberId, write: u64) {
        if write == self.write {
            self.waiting.remove(&member);
        }
    }

    pub fn may_answer(&self, now: Instant) -> bool {
        now >= self.deadline || (!self.until_deadline && self.waiting.is_empty())
    }

    /// When the wait ends whatever arrives.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The members not heard from yet (for the log and metrics of a slow write).
    pub fn waiting_for(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.waiting.iter().copied()
    }
}
