//! The loadTable and loadView cache. A request arrives with its key, the request the catalog
//! would be sent, and who is asking under which policy; the cache answers it in one of the
//! phases of `CachePhase`, read top to bottom in `load_now` (what is answered from memory,
//! without waiting) and `load_later` (what waits):
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
pub mod decide;
mod deliver;
mod entry;
mod exists;
mod fill;
mod filler;
mod heads;
pub mod invalidate;
mod key;
pub mod phase;
pub mod refreshes;
mod respond;
mod store;
mod ticket;
pub mod tier;
mod vary;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, Response};
use thiserror::Error;
use tokio::time::Instant;

pub use entry::{Content, Entry, Gzipped, Servable};
pub use fill::POLICY_READ_LIMIT;
pub use heads::HeadForm;
pub use key::{normalised_delegation, CacheKey, Form};
pub use phase::{CachePhase, Cause, NoCacheReason};
pub use refreshes::Refreshes;
pub use respond::{mark, Caller, X_CACHE};
pub use store::Sight;
pub use ticket::FillTicket;
pub use tier::Tier;
pub use vary::Varies;

use crate::config::Settings;
use crate::coordination::Tokens;
use crate::events::Liveness;
use crate::origin::{Origin, OriginError, OriginRequest, Outgoing};
use crate::policy::stage::Refusal;
use crate::policy::stage::Stage;
use crate::telemetry::CacheMetrics;
use crate::wire::body::Body;
use coalesce::{Inflight, Joined};
use confirmations::Confirmations;
use decide::{decide, phase_of_fill, Decision, Held, Windows};
use fill::{Fill, FillOutcome, Purpose};
use filler::Filler;
use store::Store;
use tier::Coordination;

/// Who asks for which key: the caller, the key, and what an earlier lookup of that key found.
/// Boxed wherever it goes (a connection's memo keeps it between equal heads), so that a request
/// moves a pointer, not the key.
pub struct Asking {
    pub caller: Caller,
    pub key: CacheKey,
    /// What an earlier lookup of this key found (a connection's memo), and after `load_now`
    /// what this one found.
    pub sight: Option<Sight>,
}

/// One loadTable request as the cache handles it.
pub struct Ask {
    pub asking: Box<Asking>,
    /// This caller's request to the catalog; a fill sends it unconditional
    /// (`Outgoing::fill_request`), and a hit only reads some of its headers.
    pub request: Outgoing,
    /// The settings in force when the request arrived.
    pub settings: Arc<Settings>,
    /// How the tier (if any) lets this lookup use what is held, learned as it starts.
    coordination: Coordination,
}

impl Ask {
    pub fn new(asking: Box<Asking>, request: Outgoing, settings: Arc<Settings>) -> Ask {
        Ask {
            asking,
            request,
            settings,
            coordination: Coordination::Local,
        }
    }

    /// A request to the catalog for this ask, for `purpose`.
    fn fill(&self, purpose: Purpose) -> Fill {
        Fill {
            purpose,
            request: self.request.fill_request(),
            policy: self.asking.caller.policy.clone(),
            leader: self.asking.caller.scope,
            settings: self.settings.clone(),
            remote: self.coordination.tokens().cloned(),
        }
    }

    fn windows(&self) -> Windows {
        Windows {
            stale_while_revalidate: self.settings.cache.stale_while_revalidate,
            stale_if_error: self.settings.cache.stale_if_error,
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

/// What a lookup must still wait for, once what is held has been looked at.
pub enum Later {
    /// Ask the catalog, leading or joining a fill (`decide`'s `Fill`).
    Fill {
        revalidating: Option<Arc<Entry>>,
        stale_on_error: bool,
    },
    /// An entry this caller may not have as it is: checked first, or asked for alone.
    Deliver {
        entry: Arc<Entry>,
        phase: CachePhase,
        servable: Servable,
    },
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
    confirmations: Confirmations,
    /// `cache.max_bytes`: the entries' and the confirmations' budgets together.
    max_bytes: u64,
    inflight: Arc<Inflight<CacheKey, FillMeta, FillOutcome>>,
    /// The miss path.
    filler: Arc<Filler>,
    /// The other replicas, if any.
    tier: Arc<dyn Tier>,
    metrics: Arc<CacheMetrics>,
    /// The policy stage, for the counts of what answers carry.
    stage: Arc<Stage>,
    /// Set on every response so that HTTP/1.1 writes `ETag` in that case.
    case: Extensions,
    /// Whether the catalog's change events are arriving (the long freshness window).
    events: Arc<Liveness>,
    /// loadCredentials under `passthrough`: one catalog call per herd, answers kept briefly.
    pub refreshes: Refreshes,
}

/// How many times a request asks again after the fill it waited for was abandoned.
const FILL_ATTEMPTS: usize = 2;

/// How long entries are kept at all (and shared with the tier): past the longest freshness and
/// stale window any reload may set, at least ten minutes.
pub fn retain_for(settings: &Settings) -> Duration {
    let cache = &settings.cache;
    let fresh_for = settings
        .events
        .fresh_for
        .unwrap_or_default()
        .max(cache.fresh_for);
    (fresh_for + cache.stale_while_revalidate.max(cache.stale_if_error))
        .max(Duration::from_secs(600))
}

/// What a cache is built of, besides its settings.
pub struct CacheParts {
    pub origin: Arc<Origin>,
    pub tier: Arc<dyn Tier>,
    pub metrics: Arc<CacheMetrics>,
    pub stage: Arc<Stage>,
    pub case: Extensions,
    pub events: Arc<Liveness>,
}

impl Cache {
    /// The memory bound and how long entries are kept at all are fixed at start-up; freshness,
    /// policies and limits come with each request's settings, so a reload applies at once.
    pub fn new(settings: &Settings, parts: CacheParts) -> Arc<Self> {
        let CacheParts {
            origin,
            tier,
            metrics,
            stage,
            case,
            events,
        } = parts;
        let max_bytes = settings.cache.max_bytes;
        metrics.bounded_at(max_bytes);
        let retain_for = retain_for(settings);
        // Confirmations under `revalidate` get a thirty-second of the bound, the entries the rest.
        let confirmations_bytes = max_bytes / 32;
        let store = Store::new(max_bytes - confirmations_bytes, retain_for, metrics.clone());
        let confirmations = Confirmations::new(confirmations_bytes, retain_for);
        let filler = Arc::new(Filler {
            store: store.clone(),
            confirmations: confirmations.clone(),
            origin,
            metrics: metrics.clone(),
            stage: stage.clone(),
            tier: tier.clone(),
        });
        Arc::new(Cache {
            store,
            confirmations,
            max_bytes,
            inflight: Arc::default(),
            filler,
            tier,
            metrics,
            stage,
            case,
            events,
            refreshes: Refreshes::default(),
        })
    }

    /// Answers a loadTable request from memory when it can, without waiting: what `decide`
    /// makes of what is held, and the entry when this caller may have it as it is. What must
    /// wait (a fill, a check of this caller, a variant of its own) is returned as `Later`, for
    /// `load_later`. A hit never builds a future.
    pub fn load_now(self: &Arc<Self>, ask: &mut Ask) -> Result<Lookup, Later> {
        ask.coordination = self.tier.coordinate();
        let now = Instant::now();
        // One clock reading for the whole lookup: a hit is answered before it could move on.
        let asking = &mut *ask.asking;
        let held = self.store.get_seen(
            &asking.key,
            asking.caller.policy.generation,
            now,
            &mut asking.sight,
        );
        let seen = held.map(|entry| {
            let facts = self.held(ask, &entry, now);
            (entry, facts)
        });
        match decide(seen, ask.windows(), now) {
            Decision::Serve(entry) => self.deliver_or_later(ask, entry, CachePhase::Hit, now),
            Decision::ServeStale(entry) => {
                self.revalidate_in_background(ask, entry.clone());
                self.deliver_or_later(ask, entry, CachePhase::Stale, now)
            }
            Decision::Fill {
                revalidating,
                stale_on_error,
            } => Err(Later::Fill {
                revalidating,
                stale_on_error,
            }),
        }
    }

    /// Finishes a lookup `load_now` could not answer at once.
    pub async fn load_later(self: &Arc<Self>, ask: &Ask, later: Later) -> Result<Lookup, Failure> {
        match later {
            Later::Deliver {
                entry,
                phase,
                servable,
            } => self.deliver_later(ask, &entry, phase, servable).await,
            Later::Fill {
                revalidating,
                stale_on_error,
            } => {
                let revalidated = revalidating.is_some();
                let (outcome, led) = Box::pin(self.fill(ask, revalidating.clone())).await?;
                if let Some(stale) = revalidating.filter(|_| stale_on_error && outcome.failed()) {
                    return self.deliver(ask, &stale, CachePhase::Stale).await;
                }
                let phase = phase_of_fill(led, outcome.is_shared(), revalidated);
                Box::pin(self.answer(ask, &outcome, phase)).await
            }
        }
    }

    /// A held entry as `decide` sees it for this ask.
    fn held(&self, ask: &Ask, entry: &Entry, now: Instant) -> Held {
        Held {
            trust: ask.coordination.trust(entry),
            fresh_until: self.fresh_until(entry, &ask.settings),
            credentials_servable: entry.credentials_servable(now),
        }
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
            purpose: Purpose::Bypass(reason),
            request,
            policy: caller.policy.clone(),
            leader: caller.scope,
            settings,
            remote: None,
        };
        let outcome = self.filler.produce(fill).await;
        self.answer_own(&caller, outcome, CachePhase::Bypass)
    }

    /// Joins the fill in flight for the key, or leads a new one; returns its outcome and
    /// whether this request led it.
    async fn fill(
        self: &Arc<Self>,
        ask: &Ask,
        stale: Option<Arc<Entry>>,
    ) -> Result<(Arc<FillOutcome>, bool), Failure> {
        let generation = ask.asking.caller.policy.generation;
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
                        if let Some(entry) =
                            self.store.get(&ask.asking.key, generation, Instant::now())
                        {
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

    /// Joins the fill in flight for the key if it began after the table's last write or purge
    /// and under the caller's policy; else leads a new one.
    fn join(&self, ask: &Ask) -> Joined<CacheKey, FillMeta, FillOutcome> {
        let generation = ask.asking.caller.policy.generation;
        let remote = ask.coordination.tokens();
        let before_it_asks = ask.coordination == Coordination::AskCatalog;
        self.inflight.join_or_lead(
            &ask.asking.key,
            || FillMeta {
                ticket: self.store.ticket(&ask.asking.key, self.events.stamp()),
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
        let fill = ask.fill(Purpose::Fill {
            key: ask.asking.key.clone(),
            ticket: permit.meta().ticket.clone(),
            stale,
        });
        let filler = self.filler.clone();
        tokio::spawn(async move {
            if permit.meta().gathers {
                tokio::time::sleep(GATHER).await;
            }
            permit.meta().asked.store(true, Ordering::Release);
            let outcome = filler.produce(fill).await;
            permit.complete(Arc::new(outcome));
        });
    }

    /// Starts a revalidation nobody waits for, unless one is in flight already.
    fn revalidate_in_background(self: &Arc<Self>, ask: &Ask, stale: Arc<Entry>) {
        if let Joined::Lead(permit) = self.join(ask) {
            self.start(ask, Some(stale), permit);
        }
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
                && self.tier.trusted()
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

    /// Fills in flight and tables indexed: both shrink back to nothing when idle.
    pub fn bookkeeping(&self) -> (usize, usize) {
        (self.inflight.len(), self.store.indexed_tables())
    }
}
