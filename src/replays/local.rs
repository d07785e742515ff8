//! Records kept in this process (a single process, no tier). Bounded by `MAX_KEPT_BYTES`:
//! past it, records that expired go first, then the oldest final answers (a retry of one of
//! those reaches the catalog again, as it would without icecache).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{judge, Claim, Kept, Record, ReplayId, ReplayStore, StoreError, Ticket};

/// The most bytes of final answers one process keeps.
pub const MAX_KEPT_BYTES: usize = 128 << 20;

/// What a record costs besides its body (its key, its headers' bookkeeping).
const RECORD_OVERHEAD: usize = 256;

struct Slot {
    record: Record,
    until: Instant,
    bytes: usize,
    /// When it became final, in order: the oldest go first when the budget is spent.
    serial: u64,
}

#[derive(Default)]
struct Records {
    slots: HashMap<ReplayId, Slot>,
    /// Final records in the order they were kept, with their serial (a slot replaced since
    /// has another).
    order: VecDeque<(ReplayId, u64)>,
    bytes: usize,
    next_serial: u64,
}

impl Records {
    fn remove(&mut self, id: &ReplayId) {
        if let Some(slot) = self.slots.remove(id) {
            self.bytes = self.bytes.saturating_sub(slot.bytes);
        }
    }

    /// The record under `id`, unless it expired (then it is gone).
    fn current(&mut self, id: &ReplayId, now: Instant) -> Option<&Record> {
        if self.slots.get(id).is_some_and(|slot| slot.until <= now) {
            self.remove(id);
        }
        self.slots.get(id).map(|slot| &slot.record)
    }

    fn held_by(&mut self, id: &ReplayId, ticket: Ticket, now: Instant) -> bool {
        matches!(self.current(id, now), Some(Record::InFlight(held)) if *held == ticket)
    }

    /// Drops what expired, then the oldest final answers, until the budget holds.
    fn fit(&mut self, now: Instant) {
        if self.bytes <= MAX_KEPT_BYTES {
            return;
        }
        let expired: Vec<ReplayId> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        while self.bytes > MAX_KEPT_BYTES {
            let Some((id, serial)) = self.order.pop_front() else {
                break;
            };
            if self
                .slots
                .get(&id)
                .is_some_and(|slot| slot.serial == serial)
            {
                self.remove(&id);
            }
        }
        self.order.retain(|(id, _)| self.slots.contains_key(id));
    }
}

/// This process's records.
#[derive(Default)]
pub struct LocalReplays {
    records: Mutex<Records>,
}

impl LocalReplays {
    pub fn new() -> LocalReplays {
        LocalReplays::default()
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        // A panic while holding the lock leaves whole records behind: still usable.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes kept now (for tests of the bound).
    #[cfg(test)]
    pub fn kept_bytes(&self) -> usize {
        self.records().bytes
    }

    pub fn claim_now(
        &self,
        id: &ReplayId,
        ticket: Ticket,
        in_flight_for: Duration,
        now: Instant,
    ) -> Claim {
        let mut records = self.records();
        let claim = judge(records.current(id, now), &ticket.fingerprint);
        if claim == Claim::Won {
            records.bytes += RECORD_OVERHEAD;
            records.slots.insert(
                id.clone(),
                Slot {
                    record: Record::InFlight(ticket),
                    until: now + in_flight_for,
                    bytes: RECORD_OVERHEAD,
                    serial: 0,
                },
            );
        }
        claim
    }

    pub fn finish_now(&self, id: &ReplayId, ticket: Ticket, kept: Arc<Kept>, keep_for: Duration) {
        let now = Instant::now();
        let mut records = self.records();
        if !records.held_by(id, ticket, now) {
            return;
        }
        records.remove(id);
        let bytes = RECORD_OVERHEAD
            + kept.body.len()
            + kept
                .headers
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len())
                .sum::<usize>();
        records.next_serial += 1;
        let serial = records.next_serial;
        records.bytes += bytes;
        records.slots.insert(
            id.clone(),
            Slot {
                record: Record::Final(ticket.fingerprint, kept),
                until: now + keep_for,
                bytes,
                serial,
            },
        );
        records.order.push_back((id.clone(), serial));
        records.fit(now);
    }

    pub fn abandon_now(&self, id: &ReplayId, ticket: Ticket) {
        let mut records = self.records();
        if records.held_by(id, ticket, Instant::now()) {
            records.remove(id);
        }
    }
}

impl ReplayStore for LocalReplays {
    fn claim<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        in_flight_for: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let claim = self.claim_now(id, ticket, in_flight_for, Instant::now());
        Box::pin(async move { Ok(claim) })
    }

    fn finish<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        kept: Arc<Kept>,
        keep_for: Duration,
    ) -> BoxFuture<'a, ()> {
        self.finish_now(id, ticket, kept, keep_for);
        Box::pin(async {})
    }

    fn abandon<'a>(&'a self, id: &'a ReplayId, ticket: Ticket) -> BoxFuture<'a, ()> {
        self.abandon_now(id, ticket);
        Box::pin(async {})
    }
}
