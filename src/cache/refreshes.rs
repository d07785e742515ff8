//! loadCredentials under `passthrough`: the executors of one job refresh the same table's
//! credentials at the same moment. Identical refreshes of one caller in flight together make
//! one catalog call, and its answer is kept for that caller, table and `planId` for at most
//! half of the shortest remaining credential lifetime (Lakekeeper's rule for its ETags) and
//! never longer than `fresh_for`. Nothing here is ever shared with another caller, another
//! replica or Redis, and every invalidation forgets everything kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::StatusCode;
use tokio::time::Instant;

use super::coalesce::{FillPermit, Inflight, Joined, Waiter};
use super::fill::directives;
use super::phase::NoCacheReason;
use crate::catalog::route::decode_component;
use crate::policy::credentials::inspect;
use crate::policy::identity::Scope;
use crate::policy::KeyPatterns;

/// How many answers are kept at once (a few hundred bytes each): past it, nothing more is
/// kept until some expire.
pub const MAX_KEPT: usize = 4096;

/// One caller's refresh of one table's credentials, as it reaches the catalog: the path as
/// sent (each spelling of a name is its own key, never a wrong one), the `planId`, the
/// delegation modes and the caller's credentials.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RefreshKey {
    scope: Scope,
    path: String,
    plan: Option<String>,
    delegation: Option<String>,
}

impl RefreshKey {
    /// The key of a refresh, or why it has none: any parameter but one readable `planId` may
    /// change the answer in a way icecache cannot know.
    pub fn new(
        scope: Scope,
        path: &str,
        query: Option<&str>,
        delegation: Option<String>,
    ) -> Result<RefreshKey, NoCacheReason> {
        let query = query.unwrap_or("");
        if query.as_bytes().contains(&b';') {
            return Err(NoCacheReason::AmbiguousQuery);
        }
        let mut plan = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode_component(name).map_err(|_| NoCacheReason::AmbiguousQuery)?;
            if name != "planId" {
                return Err(NoCacheReason::UnknownParameter);
            }
            let value = decode_component(value).map_err(|_| NoCacheReason::AmbiguousQuery)?;
            if plan.replace(value).is_some() {
                return Err(NoCacheReason::AmbiguousQuery);
            }
        }
        Ok(RefreshKey {
            scope,
            path: path.to_owned(),
            plan,
            delegation,
        })
    }
}

/// A catalog's answer to a refresh, as its callers get it.
#[derive(Debug)]
pub struct Refreshed {
    pub status: StatusCode,
    /// The catalog's headers, less hop-by-hop ones.
    pub headers: HeaderMap,
    /// In the identity encoding.
    pub body: Bytes,
}

/// What a refresh came to, for the callers that waited on it.
#[derive(Debug)]
pub enum Outcome {
    /// An answer every waiter may have (the same caller asked the same thing at once).
    Shared(Arc<Refreshed>),
    /// An answer for its own caller only: the waiters ask for themselves.
    Own(NoCacheReason),
}

/// What may be done with an answer: handed to callers waiting on the same refresh, and kept
/// for how long (None: not kept past the moment).
pub type Judgement = Result<Option<Duration>, NoCacheReason>;

/// Whether an answer may be shared with its waiters and for how long it may be kept.
///
/// Invariants: only a 200 JSON answer in the identity encoding that the credential walker
/// reads whole, with no `no-store`/`no-cache` and no `Vary` beyond what the key holds, is
/// shared at all; it is kept only when every credential in it states an expiry, and then for
/// no more than half of what is left of the earliest one, and never more than `fresh_for`.
pub fn judge(
    refreshed: &Refreshed,
    now_ms: u64,
    fresh_for: Duration,
    max_bytes: u64,
    keyed: impl Fn(&str) -> bool,
    secret: &KeyPatterns,
) -> Judgement {
    if refreshed.status != StatusCode::OK {
        return Err(NoCacheReason::NotOk);
    }
    let headers = &refreshed.headers;
    let cache_control = directives(headers, &header::CACHE_CONTROL);
    if cache_control
        .iter()
        .any(|d| d == "no-store" || d == "no-cache")
    {
        return Err(NoCacheReason::NoStore);
    }
    if directives(headers, &header::VARY)
        .iter()
        .any(|name| !keyed(name))
    {
        return Err(NoCacheReason::Vary);
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    if !json || headers.contains_key(header::CONTENT_ENCODING) {
        return Err(NoCacheReason::NotLoadTableResult);
    }
    if u64::try_from(refreshed.body.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(NoCacheReason::TooLarge);
    }
    let vended = inspect(&refreshed.body, secret).map_err(|_| NoCacheReason::NotLoadTableResult)?;
    Ok(vended
        .earliest_expiry_ms
        .map(|expiry| Duration::from_millis(expiry.saturating_sub(now_ms)) / 2)
        .map(|half| half.min(fresh_for))
        .filter(|keep| !keep.is_zero()))
}

struct Kept {
    answer: Arc<Refreshed>,
    until: Instant,
}

/// The refreshes in flight and the answers kept.
#[derive(Default)]
pub struct Refreshes {
    kept: Mutex<HashMap<RefreshKey, Kept>>,
    inflight: Arc<Inflight<RefreshKey, u64, Outcome>>,
    /// Moved by every invalidation: a refresh begun before one is neither joined nor kept
    /// after it.
    generation: AtomicU64,
}

/// How a caller's refresh goes.
pub enum Step {
    /// Answered from what is kept.
    Kept(Arc<Refreshed>),
    /// Asks the catalog on behalf of everyone who joins.
    Lead(Leader),
    /// Waits for the refresh in flight.
    Wait(Waiter<Outcome>),
}

pub struct Leader {
    permit: FillPermit<RefreshKey, u64, Outcome>,
    key: RefreshKey,
}

impl Refreshes {
    fn kept(&self) -> MutexGuard<'_, HashMap<RefreshKey, Kept>> {
        // Every use is one map operation, which a panic cannot leave half done.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a refresh does now: answered from memory, or joined to (or leading) a refresh.
    pub fn step(&self, key: RefreshKey, now: Instant) -> Step {
        if let Some(kept) = self.kept().get(&key).filter(|k| now < k.until) {
            return Step::Kept(kept.answer.clone());
        }
        let generation = self.generation.load(Ordering::Acquire);
        match self
            .inflight
            .join_or_lead(&key, || generation, |started| *started == generation)
        {
            Joined::Wait(waiter) => Step::Wait(waiter),
            Joined::Lead(permit) => Step::Lead(Leader { permit, key }),
        }
    }

    /// Hands the leader's answer to its waiters and keeps it for `keep_for`, unless an
    /// invalidation came after the refresh began.
    pub fn finish(&self, leader: Leader, answer: Arc<Refreshed>, judged: Judgement, now: Instant) {
        let Leader { permit, key } = leader;
        let outcome = match &judged {
            Ok(_) => Outcome::Shared(answer.clone()),
            Err(reason) => Outcome::Own(*reason),
        };
        if let Ok(Some(keep_for)) = judged {
            let mut kept = self.kept();
            // Checked under the lock every invalidation clears under: none slips between.
            if *permit.meta() == self.generation.load(Ordering::Acquire) {
                if kept.len() >= MAX_KEPT {
                    kept.retain(|_, k| now < k.until);
                }
                if kept.len() < MAX_KEPT {
                    let until = now + keep_for;
                    kept.insert(key, Kept { answer, until });
                }
            }
        }
        permit.complete(Arc::new(outcome));
    }

    /// Forgets every answer kept, and lets no refresh in flight be joined or kept.
    pub fn forget_all(&self) {
        let mut kept = self.kept();
        self.generation.fetch_add(1, Ordering::AcqRel);
        kept.clear();
    }
}

#[cfg(test)]
#[path = "refreshes_tests.rs"]
mod tests;
