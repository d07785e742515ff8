//! Invalidation: what a write through icecache, a purge, another replica or a catalog event
//! touched leaves the cache before the answer that reports it returns. Each moves its tables'
//! generations first (so no fill that began before it can store or be joined after), then
//! removes the entries.

use super::phase::Cause;
use super::Cache;
use crate::catalog::names::{loose_namespace, LooseName, Name};
use crate::catalog::writes::Touched;
use crate::coordination::Cover;

impl Cache {
    /// Invalidates what a write touched, here and (before returning) in every replica of the
    /// tier; returns how many entries went here, and how the other replicas learn of it.
    pub async fn invalidate_everywhere(&self, touched: &Touched, reason: Cause) -> (usize, Cover) {
        let removed = self.invalidate(touched, reason);
        let cover = self.tier.announce(touched).await;
        (removed, cover)
    }

    /// Invalidates what a write touched in this replica; returns how many entries went.
    pub fn invalidate(&self, touched: &Touched, reason: Cause) -> usize {
        self.invalidate_within(None, touched, reason)
    }

    /// Invalidates what a catalog event touched in the warehouses it names (every one if it
    /// names none), here and in every replica of the tier. The other replicas are told of the
    /// tables only, not the warehouse: they invalidate them under every prefix.
    pub async fn invalidate_in_everywhere(
        &self,
        prefixes: &[String],
        touched: &Touched,
        reason: Cause,
    ) -> usize {
        let removed = if prefixes.is_empty() {
            self.invalidate(touched, reason)
        } else {
            prefixes
                .iter()
                .map(|prefix| self.invalidate_within(Some(prefix), touched, reason))
                .sum()
        };
        self.tier.announce(touched).await;
        removed
    }

    /// `within` None: under every prefix; Some: under that prefix and under none.
    fn invalidate_within(&self, within: Option<&str>, touched: &Touched, reason: Cause) -> usize {
        let removed = match touched {
            Touched::Tables(tables) => tables
                .iter()
                .map(|t| self.store.invalidate(t, within))
                .sum(),
            Touched::Namespace(namespace) => {
                self.store.invalidate_where(|t| t.is_in(namespace), within)
            }
            Touched::Everything => self.store.invalidate_where(|_| true, within),
            Touched::Nothing => return 0,
        };
        // Kept credential answers are few and briefly kept: any write forgets them all.
        self.refreshes.forget_all();
        self.metrics.invalidated(reason);
        removed
    }

    /// `POST /cache/purge`: one table, one namespace, or everything, in every replica; the
    /// prefix, being one of the spellings a catalog may ignore, does not narrow it.
    pub async fn purge(&self, namespace: Option<&[Name]>, table: Option<&str>) -> usize {
        let touched = match (namespace, table) {
            (Some(namespace), Some(table)) if !loose_namespace(namespace).is_empty() => {
                Touched::Tables(vec![LooseName::new(namespace, table)])
            }
            (Some(namespace), None) => Touched::namespace(loose_namespace(namespace)),
            _ => Touched::Everything,
        };
        self.invalidate_everywhere(&touched, Cause::Purge).await.0
    }
}
