//! The loadTable and loadView cache. A request arrives with its key, the request the catalog
//! would be sent, and who is asking under which policy; the cache answers it in one of the
//! phases of `CachePhase`, read top to bottom in `load`:
//!
//! - a fresh entry the caller may have: HIT;
//! - a stale entry within `stale_while_revalidate`: STALE, and one background revalidation;
//! - otherwise one fill for the key (MISS, or REVALIDATED for a stale entry); requests that
//!   arrive while it is in flight wait for it (COALESCED), if it began after the last write or
//!   purge of the table and under the policy they are served by;
//! - the catalog failing within `stale_if_error`: STALE;
//! - an answer that may not be stored: BYPASS for callers it may not be shared with.
//!
//! Under identity `revalidate`, a caller not yet confirmed for an entry is checked with its own
//! credentials before it gets it (`authz`).

mod authz;
mod coalesce;
mod confirmations;
mod entry;
mod exists;
mod fill;
pub mod invalidate;
mod key;
pub mod phase;
mod respond;
mod store;
mod tier;
mod vary;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderValue, Response};
use thiserror::Error;
use tokio::time::Instant;

pub use fill::POLICY_READ_LIMIT;
pub use invalidate::Cause;
pub use key::{CacheKey, Form};
pub use phase::{CachePhase, NoCacheReason};
pub use respond::{mark, X_CACHE};

use crate::cluster::{Cluster, Tokens};
use crate::config::Settings;
use crate::events::Liveness;
use crate::origin::{Origin, OriginError, OriginRequest, Outgoing};
use crate::policy::identity::Scope;
use crate::policy::stage::Refusal;
use crate::policy::stage::Stage;
use crate::policy::{Identity, Policy};
use crate::telemetry::CacheMetrics;
use crate::wire::body::Body;
use coalesce::{Inflight, Joined};
use confirmations::Confirmations;
use entry::{Entry, FillTicket};
use fill::{Fill, FillOutcome, Purpose};
use store::Store;
use tier::Coordination;

/// Who is asking, under which policy, and what they already hold.
#[derive(Clone)]
pub struct Caller {
    /// The caller's own identity scope (the key's scope may be shared).
    pub scope: Scope,
    pub policy: Arc<Policy>,
    pub if_none_match: Vec<HeaderValue>,
    /// Whether the caller's `Accept-Encoding` takes gzip.
    pub accepts_gzip: bool,
}

/// One loadTable request as the cache handles it.
pub struct Ask {
    pub key: CacheKey,
    /// This caller's request to the catalog; a fill sends it unconditional
    /// (`Outgoing::fill_request`), and a hit only reads some of its headers.
    pub request: Outgoing,
    pub caller: Caller,
    /// The settings in force when the request arrived.
    pub settings: Arc<Settings>,
    /// How the tier (if any) lets this lookup use what is held, learned as it starts.
    coordination: Coordination,
}

impl Ask {
    pub fn new(key: CacheKey, request: Outgoing, caller: Caller, settings: Arc<Settings>) -> Ask {
        Ask {
            key,
            request,
            caller,
            settings,
            coordination: Coordination::Local,
        }
    }
}

/// What the cache made of a request.
pub enum Lookup {
    Served {
        response: Response<Body>,
        phase: CachePhase,
        reason: Option<NoCacheReason>,
    },
    /// Not to be read whole: the proxy streams it from the catalog (passthrough, too large).
    Stream(NoCacheReason),
}

#[derive(Debug, Error)]
pub enum CacheError {
    #[error(transparent)]
    Origin(#[from] OriginError),
    #[error(transparent)]
    Refused(Arc<Refusal>),
    #[error("every fill of this table was abandoned")]
    Abandoned,
}

/// A failed lookup, with the phase it failed in (for `x-cache`).
#[derive(Debug, Error)]
#[error("{error}")]
pub struct Failure {
    pub phase: CachePhase,
    #[source]
    pub error: CacheError,
}

/// What a fill in flight was started under: a request may join it only while all hold.
struct FillMeta {
    ticket: FillTicket,
    policy_generation: u64,
    /// The table's tokens in Redis it was started under (read-your-writes).
    remote: Option<Tokens>,
    /// Whether it has asked the catalog yet (a lookup that must see the catalog's state as of
    /// its own arrival joins only fills that have not).
    asked: Arc<AtomicBool>,
    /// Whether it waits a moment for others to join before it asks (Redis down, `revalidate`).
    gathers: bool,
}

/// How long a fill that must be joined before it asks waits for company.
const GATHER: Duration = Duration::from_millis(2);

pub struct Cache {
    store: Store,
    /// The other replicas of the tier, through Redis.
    cluster: Option<Arc<Cluster>>,
    /// How long entries are kept at all (and shared with the tier).
    retain_for: Duration,
    confirmations: Confirmations,
    /// `cache.max_bytes`: the entries' and the confirmations' budgets together.
    max_bytes: u64,
    inflight: Arc<Inflight<CacheKey, FillMeta, FillOutcome>>,
    origin: Arc<Origin>,
    metrics: Arc<CacheMetrics>,
    /// The policy stage every answer a fill produces goes through.
    stage: Arc<Stage>,
    /// Set on every response so that HTTP/1.1 writes `ETag` in that case.
    case: Extensions,
    /// Whether the catalog's change events are arriving (the long freshness window).
    events: Arc<Liveness>,
}

/// How many times a request asks again after the fill it waited for was abandoned.
const FILL_ATTEMPTS: usize = 2;

impl Cache {
    /// The memory bound and how long entries are kept at all are fixed at start-up; freshness,
    /// policies and limits come with each request's settings, so a reload applies at once.
    pub fn new(
        settings: &Settings,
        origin: Arc<Origin>,
        cluster: Option<Arc<Cluster>>,
        metrics: Arc<CacheMetrics>,
        stage: Arc<Stage>,
        case: Extensions,
        events: Arc<Liveness>,
    ) -> Arc<Self> {
        let cache = &settings.cache;
        let fresh_for = settings
            .events
            .fresh_for
            .unwrap_or_default()
            .max(cache.fresh_for);
        metrics.bounded_at(cache.max_bytes);
        // Reloads may lengthen the stale windows: keep entries at least ten minutes.
        let retain_for = (fresh_for + cache.stale_while_revalidate.max(cache.stale_if_error))
            .max(Duration::from_secs(600));
        // Confirmations under `revalidate` get a thirty-second of the bound, the entries the rest.
        let confirmations_bytes = cache.max_bytes / 32;
        Arc::new(Cache {
            store: Store::new(
                cache.max_bytes - confirmations_bytes,
                retain_for,
                metrics.clone(),
            ),
            confirmations: Confirmations::new(confirmations_bytes, retain_for),
            max_bytes: cache.max_bytes,
            cluster,
            retain_for,
            inflight: Arc::default(),
            origin,
            metrics,
            stage,
            case,
            events,
        })
    }

    /// Answers a loadTable request.
    pub async fn load(self: &Arc<Self>, ask: &mut Ask) -> Result<Lookup, Failure> {
        ask.coordination = self.coordinate(&ask.key).await;
        let ask = &*ask;
        let now = Instant::now();
        let held = self.store.get(&ask.key, ask.caller.policy.generation);
        // What may be served as it is, and what may only be revalidated: an entry whose table
        // moved on in Redis, or any entry while nothing is trusted without the catalog.
        let servable = match &ask.coordination {
            Coordination::Local => held.clone(),
            Coordination::Tokens(tokens) => {
                held.clone().filter(|e| e.remote.as_ref() == Some(tokens))
            }
            Coordination::AskCatalog => None,
        };
        let Some(entry) = servable else {
            let held_one = held.is_some();
            let (outcome, led) = Box::pin(self.fill(ask, held.clone())).await?;
            let catalog_failed = failed(&outcome);
            if let Some(stale) =
                held.filter(|_| catalog_failed && ask.coordination == Coordination::AskCatalog)
            {
                // Redis and the catalog both down: the last entry, within stale_if_error.
                if now.saturating_duration_since(self.fresh_until(&stale, &ask.settings))
                    < ask.settings.cache.stale_if_error
                    && stale.credentials_servable(now)
                {
                    return self.deliver(ask, &stale, CachePhase::Stale).await;
                }
            }
            // An entry held here but not trusted (its table moved on, or Redis is away) was
            // revalidated; with none, it is a miss.
            let phase = match (led, held_one) {
                (false, _) => CachePhase::Coalesced,
                _ if from_tier(&outcome) => CachePhase::Shared,
                (true, true) => CachePhase::Revalidated,
                (true, false) => CachePhase::Miss,
            };
            return Box::pin(self.answer(ask, &outcome, phase)).await;
        };
        let windows = &ask.settings.cache;
        let fresh_until = self.fresh_until(&entry, &ask.settings);
        if now < fresh_until {
            return self.deliver(ask, &entry, CachePhase::Hit).await;
        }
        let stale_for = now.duration_since(fresh_until);
        if stale_for < windows.stale_while_revalidate {
            self.revalidate_in_background(ask, entry.clone());
            return self.deliver(ask, &entry, CachePhase::Stale).await;
        }
        let (outcome, led) = Box::pin(self.fill(ask, Some(entry.clone()))).await?;
        if failed(&outcome) && stale_for < windows.stale_if_error && entry.credentials_servable(now)
        {
            return self.deliver(ask, &entry, CachePhase::Stale).await;
        }
        let phase = match led {
            false => CachePhase::Coalesced,
            true if from_tier(&outcome) => CachePhase::Shared,
            true => CachePhase::Revalidated,
        };
        Box::pin(self.answer(ask, &outcome, phase)).await
    }

    /// Answers a loadTable request that has no key (or must not use the cache): asked alone,
    /// through the policy stage, never stored.
    pub async fn bypass(
        self: &Arc<Self>,
        request: OriginRequest,
        caller: Caller,
        settings: Arc<Settings>,
        reason: NoCacheReason,
    ) -> Result<Lookup, Failure> {
        let fill = Fill {
            purpose: Purpose::Bypass,
            key: None,
            form: Form::AllSnapshots,
            request,
            stale: None,
            ticket: None,
            policy: caller.policy.clone(),
            leader: caller.scope,
            settings,
            bypass: Some(reason),
            remote: None,
        };
        let outcome = self.produce(fill).await;
        self.answer_own(&caller, outcome, CachePhase::Bypass)
    }

    /// Joins the fill in flight for the key, or leads a new one; returns its outcome and
    /// whether this request led it.
    async fn fill(
        self: &Arc<Self>,
        ask: &Ask,
        stale: Option<Arc<Entry>>,
    ) -> Result<(Arc<FillOutcome>, bool), Failure> {
        let generation = ask.caller.policy.generation;
        for _ in 0..FILL_ATTEMPTS {
            let (waiter, led) = match self.join(ask) {
                Joined::Wait(waiter) => {
                    self.metrics.coalesced();
                    (waiter, false)
                }
                Joined::Lead(permit) => {
                    // A fill that ended between this request's lookup and taking the lock has
                    // stored its entry: serve that rather than ask the catalog again.
                    if stale.is_none() {
                        if let Some(entry) = self.store.get(&ask.key, generation) {
                            let outcome = Arc::new(FillOutcome::Entry(entry));
                            permit.complete(outcome.clone());
                            return Ok((outcome, false));
                        }
                    }
                    let waiter = permit.waiter();
                    self.start(ask, stale.clone(), permit);
                    (waiter, true)
                }
            };
            match waiter.wait().await {
                Ok(outcome) => return Ok((outcome, led)),
                Err(coalesce::Abandoned) => self.metrics.fill_abandoned(),
            }
        }
        Err(Failure {
            phase: if stale.is_some() {
                CachePhase::Revalidated
            } else {
                CachePhase::Miss
            },
            error: CacheError::Abandoned,
        })
    }

    fn fill_for(ask: &Ask, stale: Option<Arc<Entry>>, ticket: FillTicket) -> Fill {
        Fill {
            remote: ask.coordination.tokens().cloned(),
            purpose: Purpose::Fill,
            key: Some(ask.key.clone()),
            form: ask.key.form,
            request: ask.request.fill_request(),
            stale,
            ticket: Some(ticket),
            policy: ask.caller.policy.clone(),
            leader: ask.caller.scope,
            settings: ask.settings.clone(),
            bypass: None,
        }
    }

    /// Joins the fill in flight for the key if it began after the table's last write or purge
    /// and under the caller's policy; else leads a new one.
    fn join(&self, ask: &Ask) -> Joined<CacheKey, FillMeta, FillOutcome> {
        let generation = ask.caller.policy.generation;
        let remote = ask.coordination.tokens();
        let before_it_asks = ask.coordination == Coordination::AskCatalog;
        self.inflight.join_or_lead(
            &ask.key,
            || FillMeta {
                ticket: self.store.ticket(&ask.key, self.events.stamp()),
                policy_generation: generation,
                remote: remote.cloned(),
                asked: Arc::default(),
                gathers: before_it_asks,
            },
            |meta| {
                meta.ticket.is_current()
                    && meta.policy_generation == generation
                    && meta.remote.as_ref() == remote
                    && !(before_it_asks && meta.asked.load(Ordering::Acquire))
            },
        )
    }

    /// Runs a fill in a task of its own: a client that goes away does not cancel it, and a fill
    /// that panics drops its permit, which frees the key and tells its waiters.
    fn start(
        self: &Arc<Self>,
        ask: &Ask,
        stale: Option<Arc<Entry>>,
        permit: coalesce::FillPermit<CacheKey, FillMeta, FillOutcome>,
    ) {
        let fill = Self::fill_for(ask, stale, permit.meta().ticket.clone());
        let cache = self.clone();
        tokio::spawn(async move {
            if permit.meta().gathers {
                tokio::time::sleep(GATHER).await;
            }
            permit.meta().asked.store(true, Ordering::Release);
            let outcome = cache.produce(fill).await;
            permit.complete(Arc::new(outcome));
        });
    }

    /// Starts a revalidation nobody waits for, unless one is in flight already.
    fn revalidate_in_background(self: &Arc<Self>, ask: &Ask, stale: Arc<Entry>) {
        if let Joined::Lead(permit) = self.join(ask) {
            self.start(ask, Some(stale), permit);
        }
    }

    /// The answer to this request from a fill's outcome.
    async fn answer(
        self: &Arc<Self>,
        ask: &Ask,
        outcome: &FillOutcome,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        let caller = &ask.caller;
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
    fn answer_own(
        &self,
        caller: &Caller,
        outcome: FillOutcome,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        match outcome {
            FillOutcome::Entry(entry) => Ok(Lookup::Served {
                response: respond::from_entry(&entry, phase, caller, self.counted(), &self.case),
                phase,
                reason: None,
            }),
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

    fn served_answer(&self, answer: &fill::Answered, phase: CachePhase, caller: &Caller) -> Lookup {
        self.metrics.bypassed(answer.reason);
        Lookup::Served {
            response: respond::from_answer(answer, phase, caller, self.counted(), &self.case),
            phase,
            reason: Some(answer.reason),
        }
    }

    /// Serves an entry to a caller that may have it: under `revalidate`, a caller not yet
    /// confirmed for this entry is first checked upstream with its own credentials.
    async fn deliver(
        self: &Arc<Self>,
        ask: &Ask,
        entry: &Arc<Entry>,
        phase: CachePhase,
    ) -> Result<Lookup, Failure> {
        let caller = &ask.caller;
        if !entry.content.vary.matches(&ask.request.as_filled()) {
            // Fetched for a request that differed in a header the catalog varies on.
            return Box::pin(self.bypass(
                ask.request.fill_request(),
                caller.clone(),
                ask.settings.clone(),
                NoCacheReason::Vary,
            ))
            .await;
        }
        if caller.policy.identity == Identity::Revalidate
            && !self
                .confirmations
                .is_confirmed(entry.content.id, caller.scope)
        {
            return Box::pin(self.authorize(ask, entry)).await;
        }
        Ok(Lookup::Served {
            response: respond::from_entry(entry, phase, caller, self.counted(), &self.case),
            phase,
            reason: None,
        })
    }

    /// Until when an entry is served without asking the catalog: `events.fresh_for` while every
    /// event source has been live since its fill began (and the tier, if any, is trusted, so
    /// that events other replicas received reach this one), else `cache.fresh_for`.
    fn fresh_until(&self, entry: &Entry, settings: &Settings) -> Instant {
        let plain = entry.fresh_until(settings.cache.fresh_for);
        let Some(long) = settings.events.fresh_for.filter(|_| {
            entry
                .ticket
                .events
                .is_some_and(|stamp| self.events.is_current(stamp))
                && self.cluster.as_ref().is_none_or(|c| !c.distrusts_tier())
        }) else {
            return plain;
        };
        entry.fresh_until(long).max(plain)
    }

    /// Entry count and weighted bytes (confirmations included), also written to the gauges.
    pub fn usage(&self) -> (u64, u64) {
        let (entries, entry_bytes) = self.store.usage();
        let bytes = entry_bytes + self.confirmations.usage().1;
        self.metrics.holding(entries, bytes);
        (entries, bytes)
    }

    /// What the answers the cache writes are counted in.
    fn counted(&self) -> (&CacheMetrics, &Stage) {
        (&self.metrics, &self.stage)
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Confirmations held under `revalidate`.
    pub fn confirmed_callers(&self) -> u64 {
        self.confirmations.usage().0
    }

    /// The cluster, if the cache is one replica of a tier.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// Fills in flight and tables indexed: both shrink back to nothing when idle.
    pub fn bookkeeping(&self) -> (usize, usize) {
        (self.inflight.len(), self.store.indexed_tables())
    }
}

/// Whether the fill's entry came from another replica rather than from the catalog.
fn from_tier(outcome: &FillOutcome) -> bool {
    matches!(outcome, FillOutcome::Entry(entry) if entry.from_tier)
}

/// Whether the catalog failed to answer (or answered 5xx).
fn failed(outcome: &FillOutcome) -> bool {
    match outcome {
        FillOutcome::Failed(_) => true,
        FillOutcome::Answer(answer) => answer.status.is_server_error(),
        _ => false,
    }
}
