//! Where entries live: a moka cache bounded by bytes, plus an index from each table's loose
//! name to its state (generation and the keys of its entries), so a write invalidates exactly
//! the entries of every spelling of its table without scanning the cache.
//!
//! Invalidation bumps the generation, then removes the keys. A fill notes the generation
//! before it asks the catalog (its ticket) and stores its answer only if the generation has
//! not moved; every read checks an entry's ticket too; and a request joins a fill in flight
//! only while that fill's ticket is current. So an answer fetched before a write is never
//! served to a request that arrived after the write's response, however they interleave.
//! The index shrinks with the entries: whatever removes an entry removes its key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use moka::notification::RemovalCause;
use tokio::time::Instant;

use super::entry::Entry;
use super::key::CacheKey;
use super::ticket::{FillTicket, TableState};
use crate::catalog::names::LooseName;
use crate::telemetry::cache::Eviction;
use crate::telemetry::CacheMetrics;

type Tables = DashMap<LooseName, Arc<TableState>>;

/// Keys are hashed with foldhash, seeded at start-up: SipHash cost about 1,400 instructions per
/// hit. foldhash is only minimally resistant to chosen collisions, which is enough here: a key
/// is stored only for a table the catalog answered for, so flooding one bucket takes creating
/// many tables in the catalog.
type Hasher = foldhash::fast::RandomState;

/// Lookups in a row answered from a `Sight` before one goes to the store again: moka's eviction
/// policy ranks entries by the reads it sees, so a hot entry must keep being seen.
const RECALLS_BEFORE_LOOKING: u32 = 16;

/// Cheap to clone: the lookup and the fill hold the same store.
#[derive(Clone)]
pub struct Store {
    entries: moka::sync::Cache<CacheKey, Arc<Entry>, Hasher>,
    tables: Arc<Tables>,
    /// Counts every change to `entries` (insert, removal, eviction), counted once it is made.
    changes: Arc<AtomicU64>,
    retain_for: Duration,
}

/// What one lookup of a key found, kept by whoever will look the same key up again (a
/// connection's memo). While the store's count of changes has not moved since, looking again
/// would find the same entry, so the next lookup is answered from here without hashing the key.
/// Holds the entry weakly: it never keeps an evicted answer's bytes alive.
#[derive(Clone, Debug)]
pub struct Sight {
    entry: Weak<Entry>,
    changes: u64,
    recalls: u32,
}

impl Store {
    /// `retain_for` bounds how long moka keeps an entry at all: past freshness plus every stale
    /// window, no answer can use it.
    pub fn new(max_bytes: u64, retain_for: Duration, metrics: Arc<CacheMetrics>) -> Self {
        let tables: Arc<Tables> = Arc::default();
        let index = tables.clone();
        let changes: Arc<AtomicU64> = Arc::default();
        let evicted = changes.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &CacheKey, entry: &Arc<Entry>| entry.weight(key))
            .time_to_live(retain_for.max(Duration::from_millis(1)))
            .eviction_listener(move |key: Arc<CacheKey>, entry: Arc<Entry>, cause| {
                metrics.evicted(match cause {
                    RemovalCause::Size => Eviction::Size,
                    RemovalCause::Expired => Eviction::Expired,
                    RemovalCause::Explicit => Eviction::Invalidated,
                    RemovalCause::Replaced => Eviction::Replaced,
                });
                if cause != RemovalCause::Replaced {
                    forget(&index, &key, &entry);
                }
                evicted.fetch_add(1, Ordering::Release);
            })
            .build_with_hasher(Hasher::default());
        Store {
            entries,
            tables,
            changes,
            retain_for,
        }
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// The entry for `key` if it may be served under `policy_generation` at `now`: not
    /// invalidated, filled under that policy, and its credentials (if any) not about to expire.
    pub fn get(&self, key: &CacheKey, policy_generation: u64, now: Instant) -> Option<Arc<Entry>> {
        self.entries
            .get(key)
            .filter(|entry| entry.policy_generation == policy_generation && entry.is_current(now))
    }

    /// `get`, answered from `sight` (what an earlier lookup of the same key found) when nothing
    /// in the store changed since; `sight` is left holding what this lookup found.
    pub fn get_seen(
        &self,
        key: &CacheKey,
        policy_generation: u64,
        now: Instant,
        sight: &mut Option<Sight>,
    ) -> Option<Arc<Entry>> {
        // Read before the look-up: a change made after it moves the count past what is kept.
        let changes = self.changes.load(Ordering::Acquire);
        let recalled = sight.take().and_then(|seen| {
            let entry = seen.recall(changes)?;
            // As moka would: past `retain_for` an entry is gone (counted from when it was
            // fetched, which is no later than when it was stored).
            (now.saturating_duration_since(entry.stored_at) < self.retain_for).then_some(())?;
            *sight = Some(Sight {
                recalls: seen.recalls + 1,
                ..seen
            });
            Some(entry)
        });
        let entry = recalled.or_else(|| {
            let found = self.entries.get(key);
            *sight = found.as_ref().map(|entry| Sight {
                entry: Arc::downgrade(entry),
                changes,
                recalls: 0,
            });
            found
        });
        entry.filter(|entry| entry.policy_generation == policy_generation && entry.is_current(now))
    }

    /// The ticket of a fill (or an authorization check) about to ask the catalog, in events
    /// epoch `events` (None: some event source is not live).
    pub fn ticket(&self, key: &CacheKey, events: Option<u64>) -> FillTicket {
        let state = self.tables.entry(key.table.loose()).or_default().clone();
        FillTicket::new(state, key.table.prefix.as_deref(), events)
    }

    /// Stores an entry unless its table was invalidated since its ticket was taken. Returns
    /// whether it was stored.
    pub fn insert(&self, key: &CacheKey, entry: Arc<Entry>) -> bool {
        let ticket = &entry.ticket;
        // Registering the key first means an invalidation that starts from here on finds it;
        // one that already bumped the generation is caught by the checks around the insert.
        ticket.table.keys().insert(key.clone());
        if !ticket.is_current() {
            ticket.table.keys().remove(key);
            return false;
        }
        let table = ticket.table.clone();
        let generation = ticket.generation;
        self.entries.insert(key.clone(), entry);
        self.changed();
        if table.generation() != generation {
            self.entries.invalidate(key);
            self.changed();
            return false;
        }
        true
    }

    /// Forgets one representation (the catalog no longer serves it).
    pub fn remove(&self, key: &CacheKey) {
        self.entries.invalidate(key);
        self.changed();
    }

    /// Drops the index record of a table nothing uses any more.
    pub fn prune(&self, table: &LooseName) {
        self.tables.remove_if(table, |_, state| {
            Arc::strong_count(state) == 1 && state.keys().is_empty()
        });
    }

    /// Invalidates the entries of one (loose) table: all spellings, snapshot and delegation
    /// modes and scopes, under every prefix (`within` None: a write, a purge) or under one and
    /// under none (`within` Some: a catalog's event for one warehouse). Returns how many
    /// entries were removed.
    pub fn invalidate(&self, table: &LooseName, within: Option<&str>) -> usize {
        let Some(state) = self.tables.get(table).map(|s| s.value().clone()) else {
            return 0;
        };
        let keys: Vec<CacheKey> = match within.map(str::to_lowercase) {
            None => {
                state.bump();
                std::mem::take(&mut *state.keys()).into_iter().collect()
            }
            Some(prefix) => {
                state.bump_prefix(&prefix);
                let mut keys = state.keys();
                let reached: Vec<CacheKey> = keys
                    .iter()
                    .filter(|k| {
                        k.table
                            .prefix
                            .as_deref()
                            .is_none_or(|p| p.to_lowercase() == prefix)
                    })
                    .cloned()
                    .collect();
                for key in &reached {
                    keys.remove(key);
                }
                reached
            }
        };
        for key in &keys {
            self.entries.invalidate(key);
        }
        self.changed();
        drop(state);
        self.prune(table);
        keys.len()
    }

    /// `invalidate` for every table that `matches`. Walks the index, which holds exactly the
    /// tables with entries or fills in flight.
    pub fn invalidate_where(
        &self,
        matches: impl Fn(&LooseName) -> bool,
        within: Option<&str>,
    ) -> usize {
        let tables: Vec<LooseName> = self
            .tables
            .iter()
            .filter(|t| matches(t.key()))
            .map(|t| t.key().clone())
            .collect();
        tables.iter().map(|t| self.invalidate(t, within)).sum()
    }

    /// Entry count and weighted bytes, after moka has applied pending evictions.
    pub fn usage(&self) -> (u64, u64) {
        self.entries.run_pending_tasks();
        (self.entries.entry_count(), self.entries.weighted_size())
    }

    /// Tables the index knows (for tests of its shrinking).
    pub fn indexed_tables(&self) -> usize {
        self.tables.len()
    }
}

impl Sight {
    /// The entry seen, when the store has made no change since (`changes`) and it has not been
    /// recalled too often in a row.
    fn recall(&self, changes: u64) -> Option<Arc<Entry>> {
        if self.changes != changes || self.recalls >= RECALLS_BEFORE_LOOKING {
            return None;
        }
        self.entry.upgrade()
    }
}

/// Removes an entry's key from its table's index, and the table's record when nothing else
/// holds it (the map and this entry hold one reference each).
fn forget(tables: &Tables, key: &CacheKey, entry: &Arc<Entry>) {
    let state = &entry.ticket.table;
    let now_empty = {
        let mut keys = state.keys();
        keys.remove(key);
        // A hot table's set grows with its entries; let it shrink with them too.
        if keys.capacity() > 64 && keys.len() * 4 < keys.capacity() {
            keys.shrink_to_fit();
        }
        keys.is_empty()
    };
    if now_empty {
        tables.remove_if(&key.table.loose(), |_, indexed| {
            Arc::ptr_eq(indexed, state) && Arc::strong_count(indexed) <= 2
        });
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
