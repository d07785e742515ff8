//! The tier: what the cache asks of the other replicas, if there are any. The cache holds a
//! `dyn Tier` and knows nothing of Redis: `Local` is a single process, and the tier on Redis
//! (`cluster::tier`) implements the same questions.
//!
//! - Before a lookup: may this replica use what it holds (`coordinate`), and may it trust it
//!   for the long window that live change events allow (`trusted`)?
//! - Before a fill asks the catalog: has another replica shared the entry, or is one asking
//!   already (`offer`), and after asking, share what came back (`release`)?
//! - After a write: tell the others (`announce`), and refuse writes they would not hear of.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::decide::Trust;
use super::entry::Entry;
use super::key::CacheKey;
use super::ticket::FillTicket;
use crate::catalog::writes::Touched;
use crate::coordination::{Cover, Tokens};

/// How a lookup may use what this replica holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coordination {
    /// A single process, or a replica on its own freshness (`local` while Redis is down).
    Local,
    /// A replica whose lease holds: an entry is current only while these are its tokens (the
    /// lease's generation), and a fill in flight is joined only if it was started under them.
    Tokens(Tokens),
    /// Redis is down under `on_redis_down = revalidate`: nothing is served without asking the
    /// catalog, and a fill is joined only before it has asked.
    AskCatalog,
}

impl Coordination {
    pub fn tokens(&self) -> Option<&Tokens> {
        match self {
            Coordination::Tokens(tokens) => Some(tokens),
            _ => None,
        }
    }

    /// What the tier says of a held entry under this coordination: usable as it is, or only
    /// revalidated (its table moved on since it was filled, or the tier is away).
    pub fn trust(&self, entry: &Entry) -> Trust {
        match self {
            Coordination::Local => Trust::Trusted,
            Coordination::Tokens(tokens) if entry.remote.as_ref() == Some(tokens) => Trust::Trusted,
            Coordination::Tokens(_) => Trust::Moved,
            Coordination::AskCatalog => Trust::TierAway,
        }
    }
}

/// What a fill tells the tier before it asks the catalog.
pub struct TierAsk<'a> {
    pub key: &'a CacheKey,
    pub policy_generation: u64,
    pub ticket: &'a FillTicket,
    /// The tokens the fill runs under (the lease's generation when it was started).
    pub tokens: Option<Tokens>,
}

/// What the tier offers a fill.
pub enum TierFill {
    /// An entry another replica shared: no need to ask the catalog.
    Shared(Arc<Entry>),
    /// This replica holds the lease: it asks, then `release`s it.
    Lead(FillLease),
    /// Nothing to share or wait for: ask alone.
    Alone,
}

/// A fill lease this replica holds: the entry's identity in the tier, and the table's tokens
/// in the tier the fill runs under (what the entry is shared under).
pub struct FillLease {
    pub identity: Vec<u8>,
    pub tokens: Tokens,
}

/// What a fill that held the lease got, for the tier.
pub enum Share<'a> {
    /// An entry the others may have (current, shareable).
    Entry(&'a Entry),
    /// An entry kept here only (it may hold a secret, or a write overtook it).
    KeptLocal,
    /// No entry (an answer not stored, a failure).
    Nothing,
}

/// The questions the cache asks of the other replicas.
pub trait Tier: Send + Sync {
    /// How a lookup may use what this replica holds. Asks nothing of anyone: a hit's path.
    fn coordinate(&self) -> Coordination;

    /// Whether what this replica holds may be trusted for `events.fresh_for`: false while its
    /// lease does not hold.
    fn trusted(&self) -> bool;

    /// What the tier offers a fill about to ask the catalog.
    fn offer<'a>(&'a self, ask: &'a TierAsk<'_>) -> BoxFuture<'a, TierFill>;

    /// Shares what a fill that held the lease got, and gives the lease back.
    fn release<'a>(&'a self, lease: &'a FillLease, share: Share<'a>) -> BoxFuture<'a, ()>;

    /// The largest body (as shared: its gzip copy when it has one) the tier takes.
    fn shared_cap(&self) -> u64;

    /// Tells the other replicas what a write touched; returns how they learn of it.
    fn announce<'a>(&'a self, touched: &'a Touched) -> BoxFuture<'a, Cover>;

    /// Whether writes must be refused: the others would not hear of them.
    fn refuses_writes(&self) -> bool;

    /// Whether this replica may take traffic as far as the tier goes.
    fn joined(&self) -> bool;

    /// Leaves the tier (a clean shutdown).
    fn leave(&self) -> BoxFuture<'_, ()>;
}

/// A single process: no other replica to ask or tell.
pub struct Local;

impl Tier for Local {
    fn coordinate(&self) -> Coordination {
        Coordination::Local
    }

    fn trusted(&self) -> bool {
        true
    }

    fn offer<'a>(&'a self, _: &'a TierAsk<'_>) -> BoxFuture<'a, TierFill> {
        Box::pin(async { TierFill::Alone })
    }

    fn release<'a>(&'a self, _: &'a FillLease, _: Share<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn shared_cap(&self) -> u64 {
        0
    }

    fn announce<'a>(&'a self, _: &'a Touched) -> BoxFuture<'a, Cover> {
        Box::pin(async { Cover::Announced })
    }

    fn refuses_writes(&self) -> bool {
        false
    }

    fn joined(&self) -> bool {
        true
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
