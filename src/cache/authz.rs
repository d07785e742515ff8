//! Under identity `revalidate`: a caller not yet confirmed for an entry's version is checked
//! with the catalog using its own credentials before it may have the shared entry. A 304 (or a
//! body that processes to the same ETag) confirms it; a refusal goes back as the catalog sent
//! it and leaves the entry for the callers the catalog still lets in; a changed table is stored
//! as the new version, confirmed for this caller.

use std::sync::Arc;

use super::entry::Entry;
use super::fill::{FillOutcome, Purpose};
use super::{Ask, Cache, CachePhase, Failure, Lookup};
use crate::telemetry::cache::Authz;

impl Cache {
    pub(super) async fn authorize(
        self: &Arc<Self>,
        ask: &Ask,
        entry: &Arc<Entry>,
    ) -> Result<Lookup, Failure> {
        let fill = ask.fill(Purpose::Authorize {
            key: ask.asking.key.clone(),
            ticket: self.store.ticket(&ask.asking.key, self.events.stamp()),
            entry: entry.clone(),
        });
        let outcome = self.filler.produce(fill).await;
        self.metrics.authorized(match &outcome {
            FillOutcome::Entry(new) if new.content.etag == entry.content.etag => Authz::Allowed,
            FillOutcome::Entry(_) => Authz::Changed,
            FillOutcome::Answer(answer) if answer.status.is_client_error() => Authz::Denied,
            _ => Authz::Error,
        });
        self.answer_own(&ask.asking.caller, outcome, CachePhase::Revalidated)
    }
}
