//! What a fill holds while it asks the catalog, and what ends it: each table's generation
//! (moved by every write or purge that touches the table, and by an event for its prefix) and
//! the keys of its entries, so an invalidation finds them. A fill's ticket is current only
//! while the generations it noted have not moved; an answer is stored, and a fill joined, only
//! while it is.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::key::CacheKey;

/// Per-entry state shared with the table's other entries: its generation moves on every write
/// or purge that touches the table, and the keys of its entries, so an invalidation finds them.
/// A catalog event names one warehouse: it moves the generation of that prefix only (and of
/// paths without a prefix, which a catalog may serve from any), so the same table of another
/// warehouse keeps its entries.
#[derive(Debug, Default)]
pub struct TableState {
    generation: AtomicU64,
    /// Moves with every prefix generation: while it has not, a ticket need not read them.
    scoped: AtomicU64,
    /// Generations by a hash of the lower-cased prefix (two prefixes sharing a hash share a
    /// generation: more invalidation, never less); created on the first event for the table.
    prefixes: Mutex<Option<HashMap<u64, u64>>>,
    keys: Mutex<HashSet<CacheKey>>,
}

impl TableState {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Moves the generation of `prefix` (in any case) and of paths without one.
    pub fn bump_prefix(&self, prefix: &str) {
        let mut prefixes = self.prefixes();
        let prefixes = prefixes.get_or_insert_with(HashMap::new);
        for scope in [prefix_hash(Some(prefix)), prefix_hash(None)] {
            *prefixes.entry(scope).or_default() += 1;
        }
        self.scoped.fetch_add(1, Ordering::AcqRel);
    }

    fn prefix_generation(&self, prefix: u64) -> u64 {
        self.prefixes()
            .as_ref()
            .and_then(|p| p.get(&prefix).copied())
            .unwrap_or(0)
    }

    fn prefixes(&self) -> MutexGuard<'_, Option<HashMap<u64, u64>>> {
        // One insert or read at a time: a poisoned lock is still sound.
        self.prefixes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keys(&self) -> MutexGuard<'_, HashSet<CacheKey>> {
        // Every use is a single call on the set, which a panic cannot leave half done: a
        // poisoned lock is still sound.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A prefix (or its absence) as `TableState::prefixes` keys it: a hash of its lower-cased
/// characters, made without allocating (a ticket is taken on every fill).
fn prefix_hash(prefix: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match prefix {
        None => 0u8.hash(&mut hasher),
        Some(prefix) => {
            1u8.hash(&mut hasher);
            for c in prefix.chars().flat_map(char::to_lowercase) {
                c.hash(&mut hasher);
            }
        }
    }
    hasher.finish()
}

/// What a fill holds while it asks the catalog: its table's state as it was before the
/// request. An answer is current only while the generation has not moved, nor the generation
/// of its prefix.
#[derive(Debug, Clone)]
pub struct FillTicket {
    pub table: Arc<TableState>,
    pub generation: u64,
    scoped: u64,
    /// The key's prefix (`prefix_hash`) and its generation then.
    prefix: u64,
    prefix_generation: u64,
    /// The events epoch it was taken in, if every event source was live then: the entry may
    /// be served for `events.fresh_for` while that epoch lasts.
    pub events: Option<u64>,
}

impl FillTicket {
    pub fn new(table: Arc<TableState>, prefix: Option<&str>, events: Option<u64>) -> FillTicket {
        let prefix = prefix_hash(prefix);
        // The scoped count first: a bump between the two reads then shows as a move.
        let scoped = table.scoped.load(Ordering::Acquire);
        FillTicket {
            generation: table.generation(),
            prefix_generation: table.prefix_generation(prefix),
            scoped,
            prefix,
            events,
            table,
        }
    }

    pub fn is_current(&self) -> bool {
        self.table.generation() == self.generation
            && (self.table.scoped.load(Ordering::Acquire) == self.scoped
                || self.table.prefix_generation(self.prefix) == self.prefix_generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_for_one_prefix_ends_its_tickets_and_those_without_a_prefix_only() {
        let table = Arc::new(TableState::default());
        let ours = FillTicket::new(table.clone(), Some("Warehouse"), None);
        let theirs = FillTicket::new(table.clone(), Some("elsewhere"), None);
        let bare = FillTicket::new(table.clone(), None, None);
        table.bump_prefix("warehouse");
        assert!(!ours.is_current(), "the same prefix, in any case");
        assert!(
            !bare.is_current(),
            "a path without a prefix may be any warehouse"
        );
        assert!(theirs.is_current());
        // A ticket taken after the event is current.
        assert!(FillTicket::new(table.clone(), Some("warehouse"), None).is_current());
    }

    #[test]
    fn a_write_ends_every_ticket_of_the_table() {
        let table = Arc::new(TableState::default());
        let theirs = FillTicket::new(table.clone(), Some("elsewhere"), None);
        table.bump();
        assert!(!theirs.is_current());
    }
}
