//! Existence checks (`HEAD` on a table or a view) answered from what is held. Only an entry
//! that `decide` would serve as it is, and that may go to this caller, says the object exists;
//! anything less says nothing, and the check goes to the catalog (a 404 is never made up from a
//! missing entry).

use std::sync::Arc;

use tokio::time::Instant;

use super::decide::{decide, Decision};
use super::entry::Servable;
use super::key::Form;
use super::{Ask, Cache};

impl Cache {
    /// Whether a fresh entry for the asked object is held that this caller could be given now
    /// without asking anyone.
    pub async fn vouches_for(self: &Arc<Self>, ask: &mut Ask) -> bool {
        ask.coordination = self.tier.coordinate();
        // A table held in either snapshots mode exists.
        let forms: &[Form] = match ask.asking.key.form {
            Form::View => &[Form::View],
            _ => &[Form::AllSnapshots, Form::RefSnapshots],
        };
        let now = Instant::now();
        let caller = &ask.asking.caller;
        forms.iter().any(|form| {
            let mut key = ask.asking.key.clone();
            key.form = *form;
            let Some(entry) = self.store.get(&key, caller.policy.generation, now) else {
                return false;
            };
            let seen = self.held(ask, &entry, now);
            matches!(
                decide(Some(((), seen)), ask.windows(), now),
                Decision::Serve(())
            ) && entry.servable_to(
                &ask.request.as_filled(),
                caller.policy.identity,
                caller.scope,
                &self.confirmations,
            ) == Servable::Yes
        })
    }
}
