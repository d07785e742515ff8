//! How a lookup's answer is written for its caller: from an entry the caller may have as it
//! is (at once), after a check of the caller or asked alone (`revalidate`, a variant of its
//! own), or from a fill's outcome.

use std::sync::Arc;

use http::HeaderMap;

use super::*;

impl Cache {
    /// The entry's answer, or what `load_later` must finish before it is given.
    /// Answered at once, the head is written into the request's own emptied map: nothing reads
    /// the request after its answer is decided.
    pub(super) fn deliver_or_later(
        &self,
        ask: &mut Ask,
        entry: Arc<Entry>,
        phase: CachePhase,
        now: Instant,
    ) -> Result<Lookup, Later> {
        match self.servable(ask, &entry) {
            Servable::Yes => {
                let spare = ask.request.spare_headers();
                Ok(self.served_entry(&ask.asking.caller, &entry, phase, now, spare))
            }
            servable => Err(Later::Deliver {
                entry,
                phase,
                servable,
            }),
        }
    }

    /// The answer to this request from a fill's outcome.
    pub(super) async fn answer(
        self: &Arc<Self>,
        ask: &Ask,
        outcome: &FillOutcome,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        let caller = &ask.asking.caller;
        let led = phase != CachePhase::Coalesced;
        match outcome {
            FillOutcome::Entry(entry) => self.deliver(ask, entry, phase).await,
            FillOutcome::Answer(answer)
                if !led
                    && (!answer.shareable_with(&caller.scope, caller.policy.identity)
                        || !answer.vary.matches(&ask.request.as_filled())) =>
            {
                // Made with another caller's credentials: it says nothing about this caller,
                // who asks for itself.
                let reason = answer.reason;
                self.bypass(
                    ask.request.fill_request(),
                    caller.clone(),
                    ask.settings.clone(),
                    reason,
                )
                .await
            }
            FillOutcome::Answer(answer) => {
                // An answer that is not stored is a bypass for the request that fetched it.
                let phase = match phase {
                    CachePhase::Coalesced => CachePhase::Coalesced,
                    _ => CachePhase::Bypass,
                };
                Ok(self.served_answer(answer, phase, caller))
            }
            FillOutcome::TooLarge => Ok(Lookup::Stream(NoCacheReason::TooLarge)),
            FillOutcome::Failed(e) => Err(Failure {
                phase,
                error: CacheError::Origin(e.clone()),
            }),
            FillOutcome::Refused(r) => Err(Failure {
                phase,
                error: CacheError::Refused(r.clone()),
            }),
        }
    }

    /// The answer to a request from an outcome produced for it alone.
    pub(super) fn answer_own(
        &self,
        caller: &Caller,
        outcome: FillOutcome,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        match outcome {
            FillOutcome::Entry(entry) => {
                Ok(self.served_entry(caller, &entry, phase, Instant::now(), HeaderMap::new()))
            }
            FillOutcome::Answer(answer) => Ok(self.served_answer(&answer, phase, caller)),
            FillOutcome::TooLarge => Ok(Lookup::Stream(NoCacheReason::TooLarge)),
            FillOutcome::Failed(e) => Err(Failure {
                phase,
                error: CacheError::Origin(e),
            }),
            FillOutcome::Refused(r) => Err(Failure {
                phase,
                error: CacheError::Refused(r),
            }),
        }
    }

    pub(super) fn served_answer(
        &self,
        answer: &fill::Answered,
        phase: CachePhase,
        caller: &Caller,
    ) -> Lookup {
        self.metrics.bypassed(answer.reason);
        Lookup::Served {
            response: respond::from_answer(answer, phase, caller, self.counted(), &self.case),
            phase,
            reason: Some(answer.reason),
        }
    }

    /// Serves an entry to a caller that may have it: under `revalidate`, a caller not yet
    /// confirmed for this entry is first checked upstream with its own credentials.
    pub(super) async fn deliver(
        self: &Arc<Self>,
        ask: &Ask,
        entry: &Arc<Entry>,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        match self.deliver_now(ask, entry, phase, Instant::now()) {
            Ok(lookup) => Ok(lookup),
            Err(servable) => self.deliver_later(ask, entry, phase, servable).await,
        }
    }

    /// The entry's answer at `now` when this caller may have it as it is; else why it may not.
    pub(super) fn deliver_now(
        &self,
        ask: &Ask,
        entry: &Arc<Entry>,
        phase: CachePhase,
        now: Instant,
    ) -> Result<Lookup, Servable> {
        match self.servable(ask, entry) {
            Servable::Yes => {
                Ok(self.served_entry(&ask.asking.caller, entry, phase, now, HeaderMap::new()))
            }
            servable => Err(servable),
        }
    }

    /// Whether this caller may have the entry as it is.
    fn servable(&self, ask: &Ask, entry: &Entry) -> Servable {
        let caller = &ask.asking.caller;
        entry.servable_to(
            &ask.request.as_filled(),
            caller.policy.identity,
            caller.scope,
            &self.confirmations,
        )
    }

    /// The entry's answer at `now` to a caller that may have it, its head written into `spare`.
    fn served_entry(
        &self,
        caller: &Caller,
        entry: &Entry,
        phase: CachePhase,
        now: Instant,
        spare: HeaderMap,
    ) -> Lookup {
        let response =
            respond::from_entry(entry, phase, caller, self.counted(), &self.case, now, spare);
        Lookup::Served {
            response,
            phase,
            reason: None,
        }
    }

    /// Serves an entry the caller may not have as it is.
    pub(super) async fn deliver_later(
        self: &Arc<Self>,
        ask: &Ask,
        entry: &Arc<Entry>,
        phase: CachePhase,
        servable: Servable,
    ) -> Result<Lookup, Failure> {
        match servable {
            // `deliver_now` answers these; one that reaches here is served all the same.
            Servable::Yes => Ok(self.served_entry(
                &ask.asking.caller,
                entry,
                phase,
                Instant::now(),
                HeaderMap::new(),
            )),
            // Fetched for a request that differed in a header the catalog varies on.
            Servable::OtherVariant => {
                Box::pin(self.bypass(
                    ask.request.fill_request(),
                    ask.asking.caller.clone(),
                    ask.settings.clone(),
                    NoCacheReason::Vary,
                ))
                .await
            }
            Servable::Unconfirmed => Box::pin(self.authorize(ask, entry)).await,
        }
    }
}
