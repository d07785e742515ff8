//! What every request reads: the settings in force (one snapshot per request, swapped whole on
//! reload), the path to the catalog, the cache, the metrics, and what was learned while running
//! (the catalog's namespace separator, whether it answers existence checks itself).

use std::sync::Arc;

use arc_swap::ArcSwap;
use http::Extensions;

use crate::cache::{Cache, Tier};
use crate::catalog::config_rewrite::Separator;
use crate::catalog::endpoints::CatalogHeads;
use crate::config::Settings;
use crate::events::Liveness;
use crate::origin::Origin;
use crate::policy::identity::IdentityHasher;
use crate::policy::stage::Stage;
use crate::replays::ReplayStore;
use crate::telemetry::Metrics;

pub struct State {
    /// Read through `settings()`; swapped whole by `put_in_force`.
    pub(crate) settings: ArcSwap<Settings>,
    pub origin: Arc<Origin>,
    pub cache: Option<Arc<Cache>>,
    /// The other replicas, if any (`cache::tier::Local` when none).
    pub tier: Arc<dyn Tier>,
    /// Final answers kept for retries with an `Idempotency-Key` (`idempotency = "provide"`).
    pub replays: Arc<dyn ReplayStore>,
    pub metrics: Arc<Metrics>,
    /// The policy stage every answer that may carry credentials passes.
    pub stage: Arc<Stage>,
    pub separator: Separator,
    pub heads: CatalogHeads,
    pub identity: IdentityHasher,
    /// Set on every response icecache builds, so HTTP/1.1 writes `ETag` in that case.
    pub case: Extensions,
    /// Whether the catalog's change events are arriving.
    pub events: Arc<Liveness>,
}

impl State {
    /// Settings to put in force at start-up (the state is built in `run`).
    pub fn in_force(settings: Settings) -> ArcSwap<Settings> {
        ArcSwap::from_pointee(settings)
    }

    /// The settings in force; a request takes one snapshot and keeps it.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.load_full()
    }

    /// Puts new settings in force.
    pub fn put_in_force(&self, settings: Settings) {
        self.settings.store(Arc::new(settings));
    }
}
