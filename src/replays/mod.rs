//! `idempotency = "provide"`: icecache keeps the final answers of mutations that carry an
//! `Idempotency-Key` (spec 1.11) and replays them, so that a client's retry of a write that
//! already happened has no second effect, whatever the catalog does with the key.
//!
//! Invariants (each held by a test in `tests.rs` or `tests/it/idempotency.rs`):
//! 1. A record belongs to one caller: the key is the caller's scope and the header's value, so
//!    one caller's key never reaches another's answer.
//! 2. A key names one request: its method, its path and query as sent, and its body's bytes
//!    (`Fingerprint`). The same key with any other request is refused (422), never replayed.
//! 3. While a request with a key is at the catalog, the same key gets 409 with `Retry-After`;
//!    the catalog never sees two requests with one key through icecache at once.
//! 4. Only what the spec finalises is kept: 2xx, and 4xx that say the same on a retry (not
//!    401, 407, 408, 425 or 429). A 5xx, a lost answer, or an answer too large to keep leaves
//!    no record, so the retry goes to the catalog again.
//! 5. A replay is the catalog's answer as it was first received, sent through the policy in
//!    force now (`strip` strips it, `inject` injects), with `Idempotent-Replayed: true`; it
//!    reaches the catalog not at all and invalidates nothing.
//! 6. With a tier the records live in Redis, without any member named like a secret (a
//!    replay from Redis carries no vended credential); a record that fails its MAC is ignored.
//!    While Redis cannot be reached a request with a key is refused (503), never run unguarded.

mod local;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, Method, StatusCode};
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use local::LocalReplays;

use crate::policy::identity::Scope;

/// The request header (spec 1.11).
pub const HEADER: &str = "idempotency-key";

/// The answer header a replay carries.
pub const REPLAYED: &str = "idempotent-replayed";

/// Longest key taken (a UUID is 36 characters).
const MAX_KEY_LEN: usize = 255;

/// Whether the catalog's `Idempotency-Key` handling is its own, or icecache's as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Idempotency {
    /// The header reaches the catalog unchanged; icecache keeps nothing.
    PassThrough,
    /// icecache advertises `idempotency-key-lifetime` (when the catalog does not) and keeps
    /// and replays final answers itself.
    Provide,
}

impl Idempotency {
    pub fn as_str(self) -> &'static str {
        match self {
            Idempotency::PassThrough => "pass-through",
            Idempotency::Provide => "provide",
        }
    }
}

/// Why a request's key cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BadKey {
    #[error("the request carries more than one Idempotency-Key")]
    Repeated,
    #[error("an Idempotency-Key must be 1 to 255 visible ASCII characters (a UUIDv7 is 36)")]
    Malformed,
}

/// The request's key, if it carries one.
pub fn read_key(headers: &HeaderMap) -> Result<Option<String>, BadKey> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(BadKey::Repeated);
    }
    let text = value.to_str().map_err(|_| BadKey::Malformed)?;
    if text.is_empty() || text.len() > MAX_KEY_LEN || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BadKey::Malformed);
    }
    Ok(Some(text.to_owned()))
}

/// One caller's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReplayId {
    scope: Scope,
    key: String,
}

impl ReplayId {
    pub fn new(scope: Scope, key: String) -> ReplayId {
        ReplayId { scope, key }
    }

    /// The bytes that name the record (a tier hashes them into its Redis name).
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = self.scope.as_bytes().to_vec();
        bytes.extend_from_slice(self.key.as_bytes());
        bytes
    }
}

/// What a key was first used for: a hash of the method, the path and query as sent, and the
/// body's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    pub fn of(method: &Method, path_and_query: &str, body: &[u8]) -> Fingerprint {
        let mut hasher = blake3::Hasher::new();
        for part in [method.as_str().as_bytes(), path_and_query.as_bytes(), body] {
            hasher.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
            hasher.update(part);
        }
        Fingerprint(*hasher.finalize().as_bytes())
    }
}

/// A final answer as the catalog sent it (hop-by-hop headers removed, the body decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One request's hold on a key: what it is, and a number of its own (a hold that expired
/// and was taken again by another request is not given back or finished by the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub fingerprint: Fingerprint,
    pub nonce: u64,
}

impl Ticket {
    pub fn new(fingerprint: Fingerprint) -> Ticket {
        let mut nonce = [0u8; 8];
        // A nonce only tells two holds apart; a failed draw leaves the hash's bytes.
        if getrandom::getrandom(&mut nonce).is_err() {
            nonce.copy_from_slice(&fingerprint.0[..8]);
        }
        Ticket {
            fingerprint,
            nonce: u64::from_le_bytes(nonce),
        }
    }
}

/// What is held under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A request with the key is at the catalog.
    InFlight(Ticket),
    /// Its final answer.
    Final(Fingerprint, Arc<Kept>),
}

/// What a request with a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nothing was held: the request now holds the key and goes to the catalog.
    Won,
    /// The same request was answered: here is the answer.
    Replay(Arc<Kept>),
    /// The same request is at the catalog now.
    InFlight,
    /// The key was used for another request.
    Reused,
}

/// What a request finds under its key, decided from the record alone (invariants 2 and 3).
pub fn judge(held: Option<&Record>, fingerprint: &Fingerprint) -> Claim {
    match held {
        None => Claim::Won,
        Some(
            Record::InFlight(Ticket {
                fingerprint: first, ..
            })
            | Record::Final(first, _),
        ) if first != fingerprint => Claim::Reused,
        Some(Record::InFlight(_)) => Claim::InFlight,
        Some(Record::Final(_, kept)) => Claim::Replay(kept.clone()),
    }
}

/// Whether an answer is final (invariant 4): the spec's 2xx and deterministic 4xx. A 4xx a
/// retry may not repeat (the caller's token expired, a timeout, throttling) is not.
pub fn finalises(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error() && !matches!(status.as_u16(), 401 | 407 | 408 | 425 | 429))
}

/// Why a request with a key cannot be guarded now.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    #[error("the tier's Redis, which holds the replays, cannot be reached")]
    Unreachable,
    #[error("what the tier's Redis holds under this key was not written by this tier")]
    Unreadable,
}

/// Why a request with a key is answered by icecache itself.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Refused {
    #[error(transparent)]
    BadKey(#[from] BadKey),
    #[error(
        "a request with this Idempotency-Key is at the catalog now: retry once it is answered"
    )]
    InFlight,
    #[error(
        "this Idempotency-Key was used for another request (another method, path, query or \
         body): a new operation needs a new key"
    )]
    Reused,
    #[error("the request was not sent: {0}")]
    Store(#[from] StoreError),
}

/// Where records live: this process (`LocalReplays`) or the tier's Redis.
pub trait ReplayStore: Send + Sync {
    /// Takes the key with `ticket` when nothing holds it (`Claim::Won`), for at most
    /// `in_flight_for` (a replica that dies holding it must not hold it forever); otherwise
    /// says what holds it.
    fn claim<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        in_flight_for: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Replaces the hold `ticket` still has with the final answer, kept for `keep_for`.
    fn finish<'a>(
        &'a self,
        id: &'a ReplayId,
        ticket: Ticket,
        kept: Arc<Kept>,
        keep_for: Duration,
    ) -> BoxFuture<'a, ()>;

    /// Gives the key back, if `ticket` still holds it: the request left no final answer.
    fn abandon<'a>(&'a self, id: &'a ReplayId, ticket: Ticket) -> BoxFuture<'a, ()>;

    /// Whether other processes read what is kept here (then it must hold no secret).
    fn shared(&self) -> bool {
        false
    }
}

/// A key held by one request, given back when dropped unless it was finished: a request
/// that is cancelled or fails before its answer is final leaves no record (invariant 4).
pub struct Held {
    store: Arc<dyn ReplayStore>,
    id: ReplayId,
    ticket: Ticket,
    keep_for: Duration,
    done: bool,
}

impl Held {
    pub fn new(
        store: Arc<dyn ReplayStore>,
        id: ReplayId,
        ticket: Ticket,
        keep_for: Duration,
    ) -> Held {
        Held {
            store,
            id,
            ticket,
            keep_for,
            done: false,
        }
    }

    /// Keeps `kept` when it is final (and not larger than `max_bytes`); gives the key back
    /// otherwise.
    pub async fn settle(mut self, kept: Kept, max_bytes: usize) {
        self.done = true;
        if finalises(kept.status) && kept.body.len() <= max_bytes {
            let kept = Arc::new(kept);
            self.store
                .finish(&self.id, self.ticket, kept, self.keep_for)
                .await;
        } else {
            self.store.abandon(&self.id, self.ticket).await;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (store, id, ticket) = (self.store.clone(), self.id.clone(), self.ticket);
        // Outside a runtime (a test's end) there is nothing left to give back to.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { store.abandon(&id, ticket).await });
        }
    }
}

/// A lifetime as `/v1/config` advertises it (ISO-8601, e.g. `PT30M`).
pub fn iso_duration(lifetime: Duration) -> String {
    let seconds = lifetime.as_secs().max(1);
    match (seconds % 3600, seconds % 60) {
        (0, _) => format!("PT{}H", seconds / 3600),
        (_, 0) => format!("PT{}M", seconds / 60),
        _ => format!("PT{seconds}S"),
    }
}
