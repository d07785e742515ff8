use super::*;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use prometheus::Registry;

use crate::cache::entry::Content;
use crate::catalog::route::classify;
use crate::policy::identity::IdentityHasher;

const RETAIN_FOR: Duration = Duration::from_secs(60);
const POLICY: u64 = 1;

fn store(max_bytes: u64) -> Store {
    Store::new(
        max_bytes,
        RETAIN_FOR,
        Arc::new(CacheMetrics::new(&Registry::new())),
    )
}

fn key(table: &str) -> CacheKey {
    let path = format!("/v1/p/namespaces/db/tables/{table}");
    let route = classify(&Method::GET, &path, "%1F").unwrap();
    let scope = IdentityHasher::fixed().scope(&HeaderMap::new());
    CacheKey::for_load(route, &path, None, &HeaderMap::new(), "%1F", scope).unwrap()
}

/// An entry for `key` as a fill would store it, `body_bytes` long, fetched at `at`.
fn entry(store: &Store, key: &CacheKey, body_bytes: usize, at: Instant) -> Arc<Entry> {
    let content = Arc::new(Content {
        id: Content::next_id(),
        body: Bytes::from(vec![b'x'; body_bytes]),
        config_empty: true,
        gzip: None,
        headers: HeaderMap::new(),
        etag: HeaderValue::from_static("\"e\""),
        upstream_etag: None,
        length: body_bytes,
        vary: Default::default(),
        shareable: true,
        heads: Default::default(),
    });
    let ticket = store.ticket(key, None);
    Arc::new(Entry::new(content, at, None, POLICY, ticket, None))
}

fn stored(store: &Store, key: &CacheKey, at: Instant) -> Arc<Entry> {
    let entry = entry(store, key, 100, at);
    assert!(store.insert(key, entry.clone()));
    entry
}

/// Looks `key` up with `sight`, and says whether the answer came from the sight.
fn look(
    store: &Store,
    key: &CacheKey,
    now: Instant,
    sight: &mut Option<Sight>,
) -> (Option<Arc<Entry>>, bool) {
    let recalls_before = sight.as_ref().map(|s| s.recalls);
    let found = store.get_seen(key, POLICY, now, sight);
    let recalled = matches!(
        (recalls_before, sight.as_ref().map(|s| s.recalls)),
        (Some(before), Some(after)) if after == before + 1
    );
    (found, recalled)
}

#[test]
fn a_sight_answers_the_next_lookup_of_an_unchanged_store_with_the_same_entry() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let held = stored(&store, &k, now);
    let mut sight = None;
    let (first, recalled) = look(&store, &k, now, &mut sight);
    assert!(!recalled, "the first lookup has nothing to recall");
    assert!(Arc::ptr_eq(first.as_ref().unwrap(), &held));
    let (second, recalled) = look(&store, &k, now, &mut sight);
    assert!(recalled);
    assert!(Arc::ptr_eq(second.as_ref().unwrap(), &held));
}

#[test]
fn a_lookup_after_the_entry_was_replaced_finds_the_new_one() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    let newer = stored(&store, &k, now);
    let (found, recalled) = look(&store, &k, now, &mut sight);
    assert!(!recalled);
    assert!(Arc::ptr_eq(found.as_ref().unwrap(), &newer));
}

#[test]
fn a_lookup_after_the_entry_was_removed_finds_nothing() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    store.remove(&k);
    // Held elsewhere too (as an answer being written would hold it): the count alone decides.
    let (found, _) = look(&store, &k, now, &mut sight);
    assert!(found.is_none());
    assert!(sight.is_none(), "nothing found, nothing kept");
    drop(held);
}

#[test]
fn a_lookup_after_its_table_was_invalidated_finds_nothing() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let _held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    assert_eq!(store.invalidate(&k.table.loose(), None), 1);
    assert!(look(&store, &k, now, &mut sight).0.is_none());
}

#[test]
fn a_change_to_another_key_sends_the_next_lookup_to_the_store_which_finds_the_same_entry() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    stored(&store, &key("other"), now);
    let (found, recalled) = look(&store, &k, now, &mut sight);
    assert!(!recalled);
    assert!(Arc::ptr_eq(found.as_ref().unwrap(), &held));
    assert!(
        look(&store, &k, now, &mut sight).1,
        "seen again, recalled again"
    );
}

#[test]
fn an_entry_evicted_for_room_is_not_recalled() {
    // Smaller than one entry: the store takes it, then evicts it when it next makes room.
    let store = store(256);
    let (k, now) = (key("t"), Instant::now());
    let held = stored(&store, &k, now);
    let mut sight = Some(Sight {
        entry: Arc::downgrade(&held),
        changes: store.changes.load(Ordering::Acquire),
        recalls: 0,
    });
    assert_eq!(store.usage(), (0, 0));
    // Held elsewhere (an answer being written): only the count tells it is gone.
    assert!(look(&store, &k, now, &mut sight).0.is_none());
}

#[test]
fn a_sight_does_not_hold_its_entry() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let held = stored(&store, &k, now);
    let before = Arc::strong_count(&held);
    let mut sight = None;
    let (found, _) = look(&store, &k, now, &mut sight);
    drop(found);
    assert!(sight.is_some());
    assert_eq!(Arc::strong_count(&held), before);
}

#[test]
fn a_sight_is_not_recalled_past_retain_for() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let _held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    let later = now + RETAIN_FOR;
    let (_, recalled) = look(&store, &k, later, &mut sight);
    assert!(!recalled);
}

#[test]
fn an_entry_filled_under_another_policy_is_not_served_from_a_sight() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let _held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    assert!(store.get_seen(&k, POLICY + 1, now, &mut sight).is_none());
}

#[test]
fn every_so_many_lookups_one_goes_to_the_store_so_that_its_eviction_policy_sees_the_reads() {
    let store = store(1 << 20);
    let (k, now) = (key("t"), Instant::now());
    let _held = stored(&store, &k, now);
    let mut sight = None;
    look(&store, &k, now, &mut sight);
    let recalled: Vec<bool> = (0..2 * (RECALLS_BEFORE_LOOKING + 1))
        .map(|_| look(&store, &k, now, &mut sight).1)
        .collect();
    let looked = recalled.iter().filter(|r| !**r).count();
    assert_eq!(looked, 2, "{recalled:?}");
    assert!(!recalled[RECALLS_BEFORE_LOOKING as usize]);
}
