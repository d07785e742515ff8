//! A cached answer. `Content` is what a fill produced (the policy-processed body, its gzip copy,
//! the headers served with it, the ETags), built once; an `Entry` is that content as the store
//! holds it, with the bookkeeping that decides whether it may still be served: when it was
//! fetched or confirmed, the ticket and policy generation it was filled under, its table's
//! tokens in the tier, and until when its credentials may be handed out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use super::confirmations::Confirmations;
use super::heads::{Heads, FORMS, HEAD_WEIGHT};
use super::key::CacheKey;
use super::ticket::FillTicket;
use super::vary::Varies;
use crate::coordination::Tokens;
use crate::origin::Sent;
use crate::policy::identity::Scope;
use crate::policy::Identity;

/// What a fill produced, ready to serve.
#[derive(Debug)]
pub struct Content {
    /// Names this version's content (its confirmations are keyed by it).
    pub id: u64,
    /// The policy-processed body (without injected values, which are spliced in as it is sent).
    pub body: Bytes,
    pub config_empty: bool,
    /// The body gzip-compressed once at fill time, with its own ETag.
    pub gzip: Option<Gzipped>,
    /// The headers served with the body, without `ETag`, `Age`, `Content-Length`, `x-cache`
    /// and `Content-Encoding`, which vary per answer. Values are copies: they keep no read
    /// buffer alive.
    pub headers: HeaderMap,
    /// icecache's own strong ETag of the identity body as served, the one clients see.
    pub etag: HeaderValue,
    /// The catalog's ETag, used only to revalidate upstream.
    pub upstream_etag: Option<HeaderValue>,
    /// Served length of the identity body (with any injected values).
    pub length: usize,
    /// The request headers the answer varies on, with the values it was fetched with.
    pub vary: Varies,
    /// Whether the tier may share it through Redis: no vended credential in it, and small
    /// enough.
    pub shareable: bool,
    /// The heads of its answers, built on first use.
    pub heads: Heads,
}

#[derive(Debug)]
pub struct Gzipped {
    pub body: Bytes,
    pub etag: HeaderValue,
}

impl Gzipped {
    /// The gzip representation's own strong ETag: a different representation of the same
    /// version.
    pub fn etag_of(etag: &HeaderValue) -> HeaderValue {
        let tag = etag.to_str().unwrap_or("\"\"").trim_end_matches('"');
        HeaderValue::from_str(&format!("{tag}-gzip\"")).unwrap_or_else(|_| etag.clone())
    }
}

static NEXT_CONTENT: AtomicU64 = AtomicU64::new(1);

impl Content {
    /// A fresh id for new content.
    pub fn next_id() -> u64 {
        NEXT_CONTENT.fetch_add(1, Ordering::Relaxed)
    }

    /// Bytes held, for the memory bound: the buffers, and the allocations around them as
    /// measured (a header map costs about 100 bytes a field beyond its name and value).
    pub fn weight(&self) -> usize {
        let headers: usize = 96
            + self
                .headers
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len() + 112)
                .sum::<usize>();
        let representations = 1 + usize::from(self.gzip.is_some());
        self.body.len()
            + self.gzip.as_ref().map_or(0, |g| g.body.len() + 96)
            + representations * FORMS * (2 * HEAD_WEIGHT + headers)
            + headers
            + self.vary.weight()
            + 128
            + std::mem::size_of::<Self>()
    }
}

/// What holding an entry costs beyond its content and key, measured on this build: moka's
/// node and queues, the `Arc`s, the index set's slot, the allocator's rounding.
const ENTRY_OVERHEAD: usize = 640;

/// Whether a held entry may go to one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Servable {
    Yes,
    /// Fetched for a request that differed in a header the catalog varies on: the caller asks
    /// for itself.
    OtherVariant,
    /// Under `revalidate`, a caller the catalog has not confirmed for this version: checked
    /// with its own credentials first.
    Unconfirmed,
}

/// A cached answer with its bookkeeping.
#[derive(Debug)]
pub struct Entry {
    pub content: Arc<Content>,
    /// When the catalog was asked for (or confirmed) this version.
    pub stored_at: Instant,
    /// Past this instant the body's vended credentials are too close to expiry: the entry is
    /// neither served nor confirmed with a 304, stale or not.
    pub servable_until: Option<Instant>,
    /// The policy it was filled under; under any other it is never served.
    pub policy_generation: u64,
    pub ticket: FillTicket,
    /// Its table's tokens in Redis when the catalog was asked (several replicas): under
    /// read-your-writes the entry is current only while they are.
    pub remote: Option<Tokens>,
    /// Read from an entry another replica shared (its filler's request says `SHARED`).
    pub from_tier: bool,
}

impl Entry {
    pub fn new(
        content: Arc<Content>,
        stored_at: Instant,
        servable_until: Option<Instant>,
        policy_generation: u64,
        ticket: FillTicket,
        remote: Option<Tokens>,
    ) -> Entry {
        Entry {
            content,
            stored_at,
            servable_until,
            policy_generation,
            ticket,
            remote,
            from_tier: false,
        }
    }

    /// The same content confirmed again at `now` (the catalog answered 304).
    pub fn refreshed(&self, now: Instant, ticket: FillTicket, remote: Option<Tokens>) -> Entry {
        Entry::new(
            self.content.clone(),
            now,
            self.servable_until,
            self.policy_generation,
            ticket,
            remote,
        )
    }

    /// Whether the entry may still be served at all: no write since it was filled, and its
    /// credentials (if any) not about to expire.
    pub fn is_current(&self, now: Instant) -> bool {
        self.ticket.is_current() && self.servable_until.is_none_or(|until| now < until)
    }

    pub fn credentials_servable(&self, now: Instant) -> bool {
        self.servable_until.is_none_or(|until| now < until)
    }

    /// Until when the entry is served without asking upstream: `fresh_for` (as configured now)
    /// after it was fetched or confirmed, never past its credentials' window.
    pub fn fresh_until(&self, fresh_for: Duration) -> Instant {
        let fresh_until = self.stored_at + fresh_for;
        self.servable_until
            .map_or(fresh_until, |until| fresh_until.min(until))
    }

    /// Whether this entry may go to a caller as it is, once `decide` lets it be served: it
    /// was fetched with the request headers the catalog varies on, and under `revalidate` the
    /// catalog has confirmed the caller for this version.
    pub fn servable_to(
        &self,
        request: &Sent<'_>,
        identity: Identity,
        scope: Scope,
        confirmations: &Confirmations,
    ) -> Servable {
        if !self.content.vary.matches(request) {
            return Servable::OtherVariant;
        }
        if identity == Identity::Revalidate && !confirmations.is_confirmed(self.content.id, scope) {
            return Servable::Unconfirmed;
        }
        Servable::Yes
    }

    pub fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }

    /// Bytes this entry holds under `key`, for the memory bound (the key is held twice: by the
    /// store and by the table's index).
    pub fn weight(&self, key: &CacheKey) -> u32 {
        let total =
            self.content.weight() + 2 * key.weight() + std::mem::size_of::<Self>() + ENTRY_OVERHEAD;
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}
