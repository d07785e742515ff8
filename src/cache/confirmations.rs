//! Under identity `revalidate`: which callers the catalog confirmed for which version, and
//! until when. One bounded map for the whole cache (its share of `cache.max_bytes`), keyed by
//! the version's content, so it never outgrows its budget however many callers there are, and
//! a version that goes leaves its confirmations to age out.

use std::time::Duration;

use tokio::time::Instant;

use crate::policy::identity::Scope;

/// What one confirmation costs: the key, the deadline, moka's node around them.
const CONFIRMATION_BYTES: u32 = 160;

/// Cheap to clone: the lookup and the fill hold the same confirmations.
#[derive(Clone)]
pub struct Confirmations {
    map: moka::sync::Cache<(u64, Scope), Instant>,
}

impl Confirmations {
    /// `max_bytes` of confirmations, none kept longer than `retain_for`.
    pub fn new(max_bytes: u64, retain_for: Duration) -> Self {
        Confirmations {
            map: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_, _| CONFIRMATION_BYTES)
                .time_to_live(retain_for)
                .build(),
        }
    }

    pub fn confirm(&self, content: u64, scope: Scope, until: Instant) {
        self.map.insert((content, scope), until);
    }

    pub fn revoke(&self, content: u64, scope: Scope) {
        self.map.invalidate(&(content, scope));
    }

    pub fn is_confirmed(&self, content: u64, scope: Scope) -> bool {
        self.map
            .get(&(content, scope))
            .is_some_and(|until| Instant::now() < until)
    }

    /// Count and bytes held, after pending evictions.
    pub fn usage(&self) -> (u64, u64) {
        self.map.run_pending_tasks();
        (self.map.entry_count(), self.map.weighted_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::identity::IdentityHasher;

    #[test]
    fn confirmations_stay_within_their_budget() {
        let confirmations =
            Confirmations::new(16 * u64::from(CONFIRMATION_BYTES), Duration::from_secs(60));
        let hasher =
            IdentityHasher::random(crate::policy::identity::identity_headers(&[])).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        for n in 0..1000 {
            let mut headers = http::HeaderMap::new();
            headers.insert("authorization", http::HeaderValue::from(n));
            confirmations.confirm(1, hasher.scope(&headers), until);
        }
        let (count, bytes) = confirmations.usage();
        assert!(
            count <= 16 && bytes <= 16 * u64::from(CONFIRMATION_BYTES),
            "{count} {bytes}"
        );
    }
}
