//! The catalog's protection: at most `max_in_flight` requests at the catalog at once, at most
//! `queue` more waiting (each for at most `queue_timeout`) for a place; any other is refused at
//! once, without reaching the catalog. A place is a permit that gives itself back when dropped,
//! so a request that fails, is abandoned or panics never keeps one.
//!
//! Invariants: the catalog never has more than `max_in_flight` of icecache's requests (a
//! bounded gate); never more than `queue` wait (the count of waiters is taken before waiting
//! and given back by a guard); a refusal costs the catalog nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// 0: no bound (and no queue).
    pub max_in_flight: usize,
    pub queue: usize,
    pub queue_timeout: Duration,
}

/// Why a request got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Every place taken and the queue full.
    QueueFull,
    /// Waited `queue_timeout` without a place.
    Waited,
}

/// A place at the catalog, given back when dropped (None when there is no bound).
pub type Place = Option<OwnedSemaphorePermit>;

impl std::fmt::Display for Shed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shed::QueueFull => "upstream_queue more waiting",
            Shed::Waited => "none gave its place within upstream_queue_timeout",
        })
    }
}

pub struct Gate {
    limits: Limits,
    places: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// Gives back a waiter's slot in the queue however the wait ends.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    pub fn new(limits: Limits) -> Gate {
        Gate {
            limits,
            places: Arc::new(Semaphore::new(limits.max_in_flight)),
            waiting: AtomicUsize::new(0),
        }
    }

    /// A place at the catalog: at once when one is free, after waiting in the queue when there
    /// is room in it, else refused.
    pub async fn enter(&self) -> Result<Place, Shed> {
        if self.limits.max_in_flight == 0 {
            return Ok(None);
        }
        if let Ok(place) = self.places.clone().try_acquire_owned() {
            return Ok(Some(place));
        }
        let queued = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.queue).then_some(n + 1)
            });
        if queued.is_err() {
            return Err(Shed::QueueFull);
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(
            self.limits.queue_timeout,
            self.places.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(place)) => Ok(Some(place)),
            // The semaphore is never closed; a closed one would mean no place either.
            Ok(Err(_)) | Err(_) => Err(Shed::Waited),
        }
    }

    /// Requests at the catalog now.
    pub fn in_flight(&self) -> usize {
        self.limits.max_in_flight - self.places.available_permits()
    }

    /// Requests waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max_in_flight: usize, queue: usize, queue_timeout_ms: u64) -> Arc<Gate> {
        Arc::new(Gate::new(Limits {
            max_in_flight,
            queue,
            queue_timeout: Duration::from_millis(queue_timeout_ms),
        }))
    }

    /// Lets the spawned waiter run until it waits (a bounded number of turns).
    async fn until_waiting(gate: &Gate) {
        for _ in 0..10_000 {
            if gate.waiting() > 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the waiter never queued");
    }

    #[tokio::test]
    async fn without_a_bound_every_request_enters() {
        let gate = gate(0, 0, 0);
        for _ in 0..100 {
            assert!(matches!(gate.enter().await, Ok(None)));
        }
    }

    #[tokio::test]
    async fn places_are_given_until_the_bound_then_the_queue_then_none() {
        let gate = gate(2, 1, 3_600_000);
        let first = gate.enter().await.unwrap();
        let _second = gate.enter().await.unwrap();
        assert_eq!(gate.in_flight(), 2);
        let queued = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter().await }
        });
        until_waiting(&gate).await;
        assert_eq!(gate.enter().await.unwrap_err(), Shed::QueueFull);
        drop(first);
        let place = queued.await.unwrap().unwrap();
        assert!(place.is_some());
        assert_eq!(gate.waiting(), 0);
        assert_eq!(gate.in_flight(), 2, "the waiter holds the place it got");
        drop(place);
        assert_eq!(gate.in_flight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gives_up_after_the_queue_timeout_and_frees_its_slot() {
        let gate = gate(1, 1, 200);
        let _held = gate.enter().await.unwrap();
        assert_eq!(gate.enter().await.unwrap_err(), Shed::Waited);
        assert_eq!(gate.waiting(), 0);
    }

    #[tokio::test]
    async fn an_abandoned_waiter_frees_its_slot() {
        let gate = gate(1, 1, 3_600_000);
        let _held = gate.enter().await.unwrap();
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter().await.is_ok() }
        });
        until_waiting(&gate).await;
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(gate.waiting(), 0);
    }
}
