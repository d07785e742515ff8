//! A cached answer. `Content` is what a fill produced (the policy-processed body, its gzip copy,
//! the headers served with it, the ETags), built once; an `Entry` is that content as the store
//! holds it, with the bookkeeping that decides whether it may still be served: when it was
//! fetched or confirmed, the table generation and policy generation it was filled under, and
//! until when its credentials may be handed out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use super::key::CacheKey;
use super::vary::Varies;
use crate::cluster::Tokens;

/// What a fill produced, ready to serve.
#[derive(Debug)]
pub struct Content {
    /// Names this version's content (its confirmations are keyed by it).
    pub id: u64,
    /// The policy-processed body (without injected values, which are spliced in as it is sent).
    pub body: Bytes,
    pub config_empty: bool,
    /// The body gzip-compressed once at fill time, with its own ETag.
    pub gzip: Option<Gzipped>,
    /// The headers served with the body, without `ETag`, `Age`, `Content-Length`, `x-cache`
    /// and `Content-Encoding`, which vary per answer. Values are copies: they keep no read
    /// buffer alive.
    pub headers: HeaderMap,
    /// icecache's own strong ETag of the identity body as served, the one clients see.
    pub etag: HeaderValue,
    /// The catalog's ETag, used only to revalidate upstream.
    pub upstream_etag: Option<HeaderValue>,
    /// Served length of the identity body (with any injected values).
    pub length: usize,
    /// The request headers the answer varies on, with the values it was fetched with.
    pub vary: Varies,
    /// Whether the tier may share it through Redis: no vended credential in it, and small
    /// enough.
    pub shareable: bool,
}

#[derive(Debug)]
pub struct Gzipped {
    pub body: Bytes,
    pub etag: HeaderValue,
}

static NEXT_CONTENT: AtomicU64 = AtomicU64::new(1);

impl Content {
    /// A fresh id for new content.
    pub fn next_id() -> u64 {
        NEXT_CONTENT.fetch_add(1, Ordering::Relaxed)
    }

    /// Bytes held, for the memory bound: the buffers, and the allocations around them as
    /// measured (a header map costs about 100 bytes a field beyond its name and value).
    pub fn weight(&self) -> usize {
        let headers: usize = 96
            + self
                .headers
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len() + 112)
                .sum::<usize>();
        self.body.len()
            + self.gzip.as_ref().map_or(0, |g| g.body.len() + 96)
            + headers
            + self.vary.weight()
            + 128
            + std::mem::size_of::<Self>()
    }
}

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
    keys: Mutex<std::collections::HashSet<CacheKey>>,
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

    pub fn keys(&self) -> MutexGuard<'_, std::collections::HashSet<CacheKey>> {
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

/// What holding an entry costs beyond its content and key, measured on this build: moka's
/// node and queues, the `Arc`s, the index set's slot, the allocator's rounding.
const ENTRY_OVERHEAD: usize = 640;

/// A cached answer with its bookkeeping.
#[derive(Debug)]
pub struct Entry {
    pub content: Arc<Content>,
    /// When the catalog was asked for (or confirmed) this version.
    pub stored_at: Instant,
    /// Past this instant the body's vended credentials are too close to expiry: the entry is
    /// neither served nor confirmed with a 304, stale or not.
    pub servable_until: Option<Instant>,
    /// The policy it was filled under; under any other it is never served.
    pub policy_generation: u64,
    pub ticket: FillTicket,
    /// Its table's tokens in Redis when the catalog was asked (several replicas): under
    /// read-your-writes the entry is current only while they are.
    pub remote: Option<Tokens>,
    /// Read from an entry another replica shared (its filler's request says `SHARED`).
    pub from_tier: bool,
}

impl Entry {
    pub fn new(
        content: Arc<Content>,
        stored_at: Instant,
        servable_until: Option<Instant>,
        policy_generation: u64,
        ticket: FillTicket,
        remote: Option<Tokens>,
    ) -> Entry {
        Entry {
            content,
            stored_at,
            servable_until,
            policy_generation,
            ticket,
            remote,
            from_tier: false,
        }
    }

    /// The same content confirmed again at `now` (the catalog answered 304).
    pub fn refreshed(&self, now: Instant, ticket: FillTicket, remote: Option<Tokens>) -> Entry {
        Entry::new(
            self.content.clone(),
            now,
            self.servable_until,
            self.policy_generation,
            ticket,
            remote,
        )
    }

    /// Whether the entry may still be served at all: no write since it was filled, and its
    /// credentials (if any) not about to expire.
    pub fn is_current(&self, now: Instant) -> bool {
        self.ticket.is_current() && self.servable_until.is_none_or(|until| now < until)
    }

    pub fn credentials_servable(&self, now: Instant) -> bool {
        self.servable_until.is_none_or(|until| now < until)
    }

    /// Until when the entry is served without asking upstream: `fresh_for` (as configured now)
    /// after it was fetched or confirmed, never past its credentials' window.
    pub fn fresh_until(&self, fresh_for: Duration) -> Instant {
        let fresh_until = self.stored_at + fresh_for;
        self.servable_until
            .map_or(fresh_until, |until| fresh_until.min(until))
    }

    pub fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }

    /// Bytes this entry holds under `key`, for the memory bound (the key is held twice: by the
    /// store and by the table's index).
    pub fn weight(&self, key: &CacheKey) -> u32 {
        let total =
            self.content.weight() + 2 * key.weight() + std::mem::size_of::<Self>() + ENTRY_OVERHEAD;
        u32::try_from(total).unwrap_or(u32::MAX)
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
