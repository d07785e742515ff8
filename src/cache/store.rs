//! Where entries live: a moka cache bounded by bytes, plus a per-table index so a write
//! invalidates exactly its table's entries without scanning the cache.
//!
//! Every table with entries or a fill in flight has a `TableState`: a generation number and the
//! keys of its entries. Invalidation bumps the generation, then removes the keys. A fill notes
//! the generation before it asks upstream and stores its result only if the generation has not
//! moved, and every read checks the entry's generation, so a response fetched before a write can
//! never be served after that write's invalidation, however the two interleave.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use http::{HeaderMap, HeaderValue};
use moka::notification::RemovalCause;
use tokio::time::Instant;

use super::key::{CacheKey, TableId};
use crate::identity::Scope;
use crate::metrics::Metrics;
use crate::policy::Injection;

#[derive(Default)]
pub struct TableState {
    generation: AtomicU64,
    keys: Mutex<HashSet<CacheKey>>,
}

impl TableState {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashSet<CacheKey>> {
        // A panic while holding this lock cannot leave the set half-updated (single calls on
        // it), so a poisoned lock is still sound to use.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A cached loadTable response, ready to serve: body and headers are built once per fill.
pub struct Entry {
    pub body: Bytes,
    /// Response headers without `x-cache` and `Age`, which vary per answer.
    pub headers: HeaderMap,
    /// icecache's own strong ETag, the one clients see.
    pub etag: HeaderValue,
    /// The catalog's ETag, used only to revalidate upstream.
    pub upstream_etag: Option<HeaderValue>,
    pub stored_at: Instant,
    /// Past this instant the body's vended credentials are too close to expiry: the entry is
    /// neither served nor confirmed with a 304, stale or not.
    pub servable_until: Option<Instant>,
    /// Properties spliced into `config` when served; their values are never in `body`.
    pub injection: Option<Arc<Injection>>,
    pub config_empty: bool,
    /// The body gzip-compressed once at fill time, with its headers (ETag, encoding, length).
    pub gzip: Option<Gzipped>,
    /// Under identity `revalidate`: the callers confirmed upstream for this version, and until
    /// when. A new version is a new entry, with no confirmations.
    confirmed: Mutex<HashMap<Scope, Instant>>,
    generation: u64,
    table: Arc<TableState>,
}

impl Entry {
    fn is_current(&self) -> bool {
        self.table.generation() == self.generation
            && self
                .servable_until
                .is_none_or(|until| Instant::now() < until)
    }

    /// Until when the entry is served without asking upstream: `fresh_for` (as configured now)
    /// after it was fetched or confirmed, never past its credentials' window.
    pub fn fresh_until(&self, fresh_for: Duration) -> Instant {
        let fresh_until = self.stored_at + fresh_for;
        self.servable_until
            .map_or(fresh_until, |until| fresh_until.min(until))
    }

    pub fn confirm(&self, scope: Scope, until: Instant) {
        let mut confirmed = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        confirmed.retain(|_, until| *until > now);
        confirmed.insert(scope, until);
    }

    pub fn is_confirmed(&self, scope: &Scope) -> bool {
        let confirmed = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        confirmed
            .get(scope)
            .is_some_and(|until| Instant::now() < *until)
    }

    /// Bytes this entry holds, for the memory bound.
    fn weight(&self, key: &CacheKey) -> u32 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum();
        let identifiers: usize =
            key.table.namespace.iter().map(String::len).sum::<usize>() + key.table.table.len();
        let gzip = self.gzip.as_ref().map_or(0, |g| g.body.len() + 128);
        let total =
            self.body.len() + gzip + headers + identifiers + std::mem::size_of::<Self>() + 128;
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}

/// What a fill holds while it asks upstream: the table's state as it was before the request.
pub struct FillTicket {
    table: Arc<TableState>,
    generation: u64,
}

/// The parts of an entry a fill decides; the store adds the bookkeeping.
pub struct NewEntry {
    pub body: Bytes,
    pub headers: HeaderMap,
    pub etag: HeaderValue,
    pub upstream_etag: Option<HeaderValue>,
    pub stored_at: Instant,
    pub servable_until: Option<Instant>,
    pub injection: Option<Arc<Injection>>,
    pub config_empty: bool,
    pub gzip: Option<Gzipped>,
}

/// A gzip representation of an entry's body.
#[derive(Clone)]
pub struct Gzipped {
    pub body: Bytes,
    pub headers: HeaderMap,
    pub etag: HeaderValue,
}

pub struct Store {
    entries: moka::sync::Cache<CacheKey, Arc<Entry>>,
    tables: Arc<DashMap<Arc<TableId>, Arc<TableState>>>,
}

impl Store {
    /// `retain_for` bounds how long moka keeps an entry at all: past freshness plus every stale
    /// window, no answer can use it.
    pub fn new(max_bytes: u64, retain_for: Duration, metrics: Arc<Metrics>) -> Self {
        let tables: Arc<DashMap<Arc<TableId>, Arc<TableState>>> = Arc::default();
        let listener_tables = tables.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &CacheKey, entry: &Arc<Entry>| entry.weight(key))
            .time_to_live(retain_for.max(Duration::from_millis(1)))
            .eviction_listener(move |key: Arc<CacheKey>, entry: Arc<Entry>, cause| {
                let label = match cause {
                    RemovalCause::Size => "size",
                    RemovalCause::Expired => "expired",
                    RemovalCause::Explicit => "invalidated",
                    RemovalCause::Replaced => "replaced",
                };
                metrics.cache_evictions.with_label_values(&[label]).inc();
                if matches!(cause, RemovalCause::Size | RemovalCause::Expired) {
                    let now_empty = {
                        let mut keys = entry.table.keys();
                        keys.remove(&*key);
                        keys.is_empty()
                    };
                    // The map and this entry hold the state; any other holder (another entry,
                    // a fill in flight) keeps it alive.
                    if now_empty {
                        listener_tables
                            .remove_if(&key.table, |_, state| Arc::strong_count(state) <= 2);
                    }
                }
            })
            .build();
        Store { entries, tables }
    }

    /// The current entry for `key`, if any: not invalidated, and its credentials (if any) not
    /// about to expire.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Entry>> {
        self.entries.get(key).filter(|entry| entry.is_current())
    }

    /// Notes the table's generation before a fill asks upstream.
    pub fn begin_fill(&self, table: &Arc<TableId>) -> FillTicket {
        let state = self.tables.entry(table.clone()).or_default().clone();
        FillTicket {
            generation: state.generation(),
            table: state,
        }
    }

    /// Stores a fill's result, unless the table was invalidated since the fill began; the
    /// entry comes back either way, `Err` when it was not stored.
    pub fn insert(
        &self,
        ticket: &FillTicket,
        key: CacheKey,
        new: NewEntry,
    ) -> Result<Arc<Entry>, Arc<Entry>> {
        let entry = Arc::new(Entry {
            body: new.body,
            headers: new.headers,
            etag: new.etag,
            upstream_etag: new.upstream_etag,
            stored_at: new.stored_at,
            servable_until: new.servable_until,
            injection: new.injection,
            config_empty: new.config_empty,
            gzip: new.gzip,
            confirmed: Mutex::default(),
            generation: ticket.generation,
            table: ticket.table.clone(),
        });
        // Registering the key first means an invalidation that starts from here on will find
        // it; one that already bumped the generation is caught by the checks around the insert.
        ticket.table.keys().insert(key.clone());
        if ticket.table.generation() != ticket.generation {
            return Err(entry);
        }
        self.entries.insert(key.clone(), entry.clone());
        if ticket.table.generation() != ticket.generation {
            self.entries.invalidate(&key);
            return Err(entry);
        }
        Ok(entry)
    }

    /// Forgets one representation (the catalog no longer serves it).
    pub fn remove(&self, key: &CacheKey) {
        self.entries.invalidate(key);
    }

    /// Releases a fill's hold on its table's state, dropping the state if nothing uses it.
    pub fn end_fill(&self, ticket: FillTicket, table: &Arc<TableId>) {
        drop(ticket);
        self.prune(table);
    }

    fn prune(&self, table: &Arc<TableId>) {
        self.tables.remove_if(table, |_, state| {
            Arc::strong_count(state) == 1 && state.keys().is_empty()
        });
    }

    /// Invalidates every entry of `table`: all snapshot modes, delegation modes and scopes.
    /// Returns how many entries were removed.
    pub fn invalidate_table(&self, table: &TableId) -> usize {
        let Some(state) = self.tables.get(table).map(|s| s.value().clone()) else {
            return 0;
        };
        state.generation.fetch_add(1, Ordering::AcqRel);
        let keys = std::mem::take(&mut *state.keys());
        for key in &keys {
            self.entries.invalidate(key);
        }
        let table = keys.iter().next().map(|k| k.table.clone());
        drop(state);
        if let Some(table) = table {
            self.prune(&table);
        }
        keys.len()
    }

    /// Invalidates every table of a namespace (and of its child namespaces).
    pub fn invalidate_namespace(&self, prefix: Option<&str>, namespace: &[String]) -> usize {
        self.invalidate_where(|t| {
            t.prefix.as_deref() == prefix && t.namespace.starts_with(namespace)
        })
    }

    /// Invalidates every table that `matches`. Walks the tables known to the cache, not the
    /// entries: it serves namespace drops (rare, and the catalog only allows them on empty
    /// namespaces), writes whose tables could not be named, and purges.
    pub fn invalidate_where(&self, matches: impl Fn(&TableId) -> bool) -> usize {
        let tables: Vec<Arc<TableId>> = self
            .tables
            .iter()
            .filter(|t| matches(t.key()))
            .map(|t| t.key().clone())
            .collect();
        tables.iter().map(|t| self.invalidate_table(t)).sum()
    }

    /// Entry count and weighted bytes, after moka has applied pending evictions.
    pub fn usage(&self) -> (u64, u64) {
        self.entries.run_pending_tasks();
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}
