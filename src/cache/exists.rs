//! Existence checks (`HEAD` on a table or a view) answered from what is held. Only an entry
//! that would be served to this caller as it is, fresh, says the object exists; anything less
//! says nothing, and the check goes to the catalog (a 404 is never made up from a missing
//! entry).

use std::sync::Arc;

use tokio::time::Instant;

use super::key::Form;
use super::tier::Coordination;
use super::{Ask, Cache};
use crate::policy::Identity;

impl Cache {
    /// Whether a fresh entry for the asked object is held that this caller could be given now
    /// without asking anyone: under the tier's coordination, for the headers the catalog varies
    /// on, and under `revalidate` only once the caller has been confirmed for it.
    pub async fn vouches_for(self: &Arc<Self>, ask: &mut Ask) -> bool {
        ask.coordination = self.coordinate(&ask.key).await;
        // A table held in either snapshots mode exists.
        let forms: &[Form] = match ask.key.form {
            Form::View => &[Form::View],
            _ => &[Form::AllSnapshots, Form::RefSnapshots],
        };
        let now = Instant::now();
        forms.iter().any(|form| {
            let mut key = ask.key.clone();
            key.form = *form;
            let Some(entry) = self.store.get(&key, ask.caller.policy.generation) else {
                return false;
            };
            let trusted = match &ask.coordination {
                Coordination::Local => true,
                Coordination::Tokens(tokens) => entry.remote.as_ref() == Some(tokens),
                Coordination::AskCatalog => false,
            };
            trusted
                && now < self.fresh_until(&entry, &ask.settings)
                && entry.content.vary.matches(&ask.request.as_filled())
                && (ask.caller.policy.identity != Identity::Revalidate
                    || self
                        .confirmations
                        .is_confirmed(entry.content.id, ask.caller.scope))
        })
    }
}
