//! Fills in flight, one per key: the fill lock. The request that starts a fill holds a
//! `FillPermit`; the others wait on it. The permit releases itself on drop, whatever ends the
//! fill: once its answer is published, the slot leaves the map; if the fill panics or is
//! cancelled before publishing, its waiters learn it was abandoned and ask again, and the key
//! is free for the next request (Pingora's `WritePermit` has the same shape).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// A fill in flight: what it was started under, and where its answer will appear.
pub struct Slot<M, V> {
    pub meta: M,
    answer: watch::Receiver<Option<Arc<V>>>,
}

pub struct Inflight<K, M, V> {
    slots: Mutex<HashMap<K, Arc<Slot<M, V>>>>,
}

impl<K, M, V> Default for Inflight<K, M, V> {
    fn default() -> Self {
        Inflight {
            slots: Mutex::default(),
        }
    }
}

/// Whether a request leads a new fill or waits for one in flight.
pub enum Joined<K: Hash + Eq + Clone, M, V> {
    Lead(FillPermit<K, M, V>),
    Wait(Waiter<V>),
}

/// The right, and the duty, to publish a key's answer.
pub struct FillPermit<K: Hash + Eq + Clone, M, V> {
    inflight: Arc<Inflight<K, M, V>>,
    key: K,
    slot: Arc<Slot<M, V>>,
    sender: Option<watch::Sender<Option<Arc<V>>>>,
}

/// A fill that ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

pub struct Waiter<V> {
    answer: watch::Receiver<Option<Arc<V>>>,
}

impl<V> Waiter<V> {
    pub async fn wait(mut self) -> Result<Arc<V>, Abandoned> {
        match self.answer.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone().ok_or(Abandoned),
            Err(_) => Err(Abandoned),
        }
    }
}

impl<K: Hash + Eq + Clone, M, V> Inflight<K, M, V> {
    fn slots(&self) -> MutexGuard<'_, HashMap<K, Arc<Slot<M, V>>>> {
        // Every use is one map operation, which a panic cannot leave half done.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for the fill in flight for `key` when `may_join` accepts it; otherwise starts a
    /// new one under `meta()` (which replaces the old one in the map; the old fill still
    /// answers its own waiters).
    pub fn join_or_lead(
        self: &Arc<Self>,
        key: &K,
        meta: impl FnOnce() -> M,
        may_join: impl FnOnce(&M) -> bool,
    ) -> Joined<K, M, V> {
        let mut slots = self.slots();
        if let Some(slot) = slots.get(key) {
            if may_join(&slot.meta) {
                return Joined::Wait(Waiter {
                    answer: slot.answer.clone(),
                });
            }
        }
        let (sender, answer) = watch::channel(None);
        let slot = Arc::new(Slot {
            meta: meta(),
            answer,
        });
        slots.insert(key.clone(), slot.clone());
        Joined::Lead(FillPermit {
            inflight: self.clone(),
            key: key.clone(),
            slot,
            sender: Some(sender),
        })
    }

    pub fn len(&self) -> usize {
        self.slots().len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone, M, V> FillPermit<K, M, V> {
    pub fn meta(&self) -> &M {
        &self.slot.meta
    }

    /// A waiter on this permit's own answer (the leader waits like everyone else).
    pub fn waiter(&self) -> Waiter<V> {
        Waiter {
            answer: self.slot.answer.clone(),
        }
    }

    /// Publishes the answer to every waiter and frees the key.
    pub fn complete(mut self, answer: Arc<V>) {
        if let Some(sender) = self.sender.take() {
            sender.send_replace(Some(answer));
        }
    }
}

impl<K: Hash + Eq + Clone, M, V> Drop for FillPermit<K, M, V> {
    fn drop(&mut self) {
        // The key is freed before waiters wake, so those that ask again start a new fill
        // rather than finding this one. Only this permit's own slot is removed: a newer fill
        // may have replaced it.
        {
            let mut slots = self.inflight.slots();
            if slots
                .get(&self.key)
                .is_some_and(|s| Arc::ptr_eq(s, &self.slot))
            {
                slots.remove(&self.key);
            }
        }
        // Dropping an unused sender tells the waiters the fill was abandoned.
        drop(self.sender.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Map = Inflight<&'static str, u64, String>;

    fn lead(map: &Arc<Map>, meta: u64) -> FillPermit<&'static str, u64, String> {
        match map.join_or_lead(&"k", || meta, |m| *m == meta) {
            Joined::Lead(permit) => permit,
            Joined::Wait(_) => panic!("expected to lead"),
        }
    }

    fn wait(map: &Arc<Map>, meta: u64) -> Waiter<String> {
        match map.join_or_lead(&"k", || meta, |m| *m == meta) {
            Joined::Wait(waiter) => waiter,
            Joined::Lead(_) => panic!("expected to wait"),
        }
    }

    #[tokio::test]
    async fn waiters_receive_the_leaders_answer_and_the_key_is_freed() {
        let map = Arc::new(Map::default());
        let permit = lead(&map, 1);
        let waiter = wait(&map, 1);
        permit.complete(Arc::new("answer".into()));
        assert_eq!(*waiter.wait().await.unwrap(), "answer");
        assert!(map.is_empty());
    }

    #[tokio::test]
    async fn a_fill_that_panics_frees_its_key_and_tells_its_waiters() {
        let map = Arc::new(Map::default());
        let permit = lead(&map, 1);
        let waiter = wait(&map, 1);
        let task = tokio::spawn(async move {
            let _permit = permit;
            panic!("the fill broke");
        });
        assert!(task.await.is_err());
        assert_eq!(waiter.wait().await, Err(Abandoned));
        assert!(map.is_empty(), "the key is free for the next request");
        let _next = lead(&map, 1);
    }

    #[tokio::test]
    async fn a_fill_started_under_other_conditions_is_not_joined() {
        let map = Arc::new(Map::default());
        let old = lead(&map, 1);
        let old_waiter = wait(&map, 1);
        let newer = lead(&map, 2);
        old.complete(Arc::new("old".into()));
        assert_eq!(*old_waiter.wait().await.unwrap(), "old");
        assert_eq!(map.len(), 1, "the old fill left the newer one in place");
        let waiter = wait(&map, 2);
        newer.complete(Arc::new("new".into()));
        assert_eq!(*waiter.wait().await.unwrap(), "new");
    }
}
