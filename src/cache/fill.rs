//! What a fill is and what it comes to: the request to the catalog with its purpose, the
//! outcome its waiters share, and the pure parts of turning an answer into what clients may get
//! (storable or not and why, the headers served, the policy stage and icecache's ETag, the gzip
//! copy). `filler` runs it.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;

use super::entry::Entry;
use super::key::CacheKey;
use super::phase::NoCacheReason;
use super::ticket::FillTicket;
use super::vary::Varies;
use crate::config::Settings;
use crate::coordination::Tokens;
use crate::origin::{OriginError, OriginRequest};
use crate::policy::identity::Scope;
use crate::policy::stage::{self, Processed, Refusal, Shape, Stage, OFFLOAD_BYTES};
use crate::policy::{Identity, Policy};
use crate::wire::etag::strong_etag_of;

/// The largest loadTable answer read whole to apply `strip` or `inject` (real metadata
/// reaches 250 MB); a larger one is refused rather than passed on unchecked.
pub const POLICY_READ_LIMIT: usize = 512 << 20;

/// Bodies smaller than this are not worth a gzip copy.
pub(super) const GZIP_MIN_BYTES: usize = 1024;

/// What a fill came to; shared by its waiters.
#[derive(Debug)]
pub enum FillOutcome {
    /// A cacheable answer: stored, or (when a write overtook it) only handed to its waiters.
    Entry(Arc<Entry>),
    /// An answer that is not cached, already through the policy stage.
    Answer(Arc<Answered>),
    /// Longer than `cache.max_entry_bytes` under passthrough: each caller streams its own.
    TooLarge,
    Failed(OriginError),
    Refused(Arc<Refusal>),
}

/// An answer not cached, ready to hand to the callers it may be shared with.
#[derive(Debug)]
pub struct Answered {
    pub status: StatusCode,
    /// The catalog's headers, less hop-by-hop ones and its ETag.
    pub headers: HeaderMap,
    /// The body as served (injected values spliced in), in pieces.
    pub body: Vec<Bytes>,
    /// icecache's ETag, when the policy stage produced the body (a 200 under strip or inject).
    pub etag: Option<HeaderValue>,
    pub reason: NoCacheReason,
    /// Whose credentials asked for it.
    pub leader: Scope,
    /// The request headers it varies on, with the values it was fetched with.
    pub vary: Varies,
}

impl Answered {
    /// Whether `caller` may be given this answer: it was made with the caller's own
    /// credentials, or every caller is trusted alike.
    pub fn shareable_with(&self, scope: &Scope, identity: Identity) -> bool {
        self.leader == *scope || identity == Identity::Shared
    }
}

/// Why the catalog is being asked, with what that purpose holds.
#[derive(Clone)]
pub enum Purpose {
    /// A miss, or a held entry's revalidation (`stale`: its ETag makes the request
    /// conditional), on behalf of every waiter.
    Fill {
        key: CacheKey,
        ticket: FillTicket,
        stale: Option<Arc<Entry>>,
    },
    /// One caller's own check for an entry under identity `revalidate`.
    Authorize {
        key: CacheKey,
        ticket: FillTicket,
        entry: Arc<Entry>,
    },
    /// A request that is not cached, and why: its answer is never stored.
    Bypass(NoCacheReason),
}

/// One request to the catalog on a key's (or a bypass's) behalf.
#[derive(Clone)]
pub struct Fill {
    pub purpose: Purpose,
    pub request: OriginRequest,
    pub policy: Arc<Policy>,
    /// Whose credentials ask.
    pub leader: Scope,
    pub settings: Arc<Settings>,
    /// The table's tokens in the tier, read before the catalog is asked (several replicas).
    pub remote: Option<Tokens>,
}

impl Fill {
    /// The key an answer is stored under; none for a bypass.
    pub fn key(&self) -> Option<&CacheKey> {
        match &self.purpose {
            Purpose::Fill { key, .. } | Purpose::Authorize { key, .. } => Some(key),
            Purpose::Bypass(_) => None,
        }
    }

    /// The ticket an answer is stored under; none for a bypass, whose answer never is.
    pub fn ticket(&self) -> Option<&FillTicket> {
        match &self.purpose {
            Purpose::Fill { ticket, .. } | Purpose::Authorize { ticket, .. } => Some(ticket),
            Purpose::Bypass(_) => None,
        }
    }

    /// The held entry being revalidated or authorized for, if any.
    pub fn stale(&self) -> Option<&Arc<Entry>> {
        match &self.purpose {
            Purpose::Fill { stale, .. } => stale.as_ref(),
            Purpose::Authorize { entry, .. } => Some(entry),
            Purpose::Bypass(_) => None,
        }
    }

    /// What icecache's ETag of the answer covers besides its bytes: the representation's form
    /// (`all` and `refs` never share a tag), or `bypass` for an answer no key names (its
    /// query was not read one way only, so no cached entry's tag may stand for it).
    pub fn tag_label(&self) -> &'static str {
        self.key().map_or("bypass", |key| key.form.as_str())
    }

    /// Why the answer will not be stored, when known before asking.
    pub fn bypass(&self) -> Option<NoCacheReason> {
        match self.purpose {
            Purpose::Bypass(reason) => Some(reason),
            _ => None,
        }
    }

    /// Whether it asks on behalf of every waiter (its revalidations are counted).
    pub fn for_waiters(&self) -> bool {
        matches!(self.purpose, Purpose::Fill { .. })
    }
}

impl FillOutcome {
    /// Whether the entry came from another replica rather than from the catalog.
    pub fn is_shared(&self) -> bool {
        matches!(self, FillOutcome::Entry(entry) if entry.from_tier)
    }

    /// Whether the catalog failed to answer (or answered 5xx).
    pub fn failed(&self) -> bool {
        match self {
            FillOutcome::Failed(_) => true,
            FillOutcome::Answer(answer) => answer.status.is_server_error(),
            _ => false,
        }
    }
}

/// Why a 200 answer may not be stored, from its headers and size.
pub(super) fn unstorable(headers: &HeaderMap, length: usize, fill: &Fill) -> Option<NoCacheReason> {
    let cache_control = directives(headers, &header::CACHE_CONTROL);
    if cache_control.iter().any(|d| d == "no-store") {
        return Some(NoCacheReason::NoStore);
    }
    if fill.policy.identity.shares_entries() && cache_control.iter().any(|d| d == "private") {
        return Some(NoCacheReason::Private);
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if !json || encoded {
        return Some(NoCacheReason::NotLoadTableResult);
    }
    if u64::try_from(length).unwrap_or(u64::MAX) > fill.settings.cache.max_entry_bytes {
        return Some(NoCacheReason::TooLarge);
    }
    None
}

/// Whether the key covers a header the answer varies on: the delegation modes are in it, the
/// encoding icecache handles itself, and under `per-principal` the caller's identity is its
/// scope.
pub(super) fn keyed(name: &str, fill: &Fill) -> bool {
    name == "accept-encoding"
        || name == "x-iceberg-access-delegation"
        || (fill.policy.identity == Identity::PerPrincipal
            && fill
                .settings
                .identity_headers
                .iter()
                .any(|h| h.as_str() == name))
}

/// The comma-separated, lower-cased directives of every field named `name`.
pub(super) fn directives(headers: &HeaderMap, name: &HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| {
            d.split('=')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|d| !d.is_empty())
        .collect()
}

/// A processed answer with what serving it needs.
pub(super) struct Served {
    pub processed: Processed,
    /// The body as sent, injected values spliced in.
    pub pieces: Vec<Bytes>,
    pub etag: HeaderValue,
    pub upstream_etag: Option<HeaderValue>,
}

/// The policy stage and the ETag of what will be served, off the async threads when large.
pub(super) async fn process(
    stage: &Arc<Stage>,
    body: Bytes,
    policy: &Arc<Policy>,
    tag_label: &'static str,
) -> Result<Served, Refusal> {
    let large = body.len() >= OFFLOAD_BYTES;
    let (stage, policy) = (stage.clone(), policy.clone());
    let work = move || -> Result<Served, Refusal> {
        let processed = stage.process(Shape::Table, body, &policy)?;
        let pieces = stage::served(
            &processed.body,
            processed.config_empty,
            Shape::Table,
            &policy,
        );
        let slices: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
        let etag = strong_etag_of(tag_label, &slices);
        Ok(Served {
            processed,
            pieces,
            etag,
            upstream_etag: None,
        })
    };
    if !large {
        return work();
    }
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or(Err(Refusal::ShuttingDown))
}

/// The headers served with an answer: the catalog's, less its validators and per-message
/// fields, values copied (a parsed header value would keep the connection's read buffer), and
/// `Vary: accept-encoding` since icecache may serve its gzip copy.
pub(super) fn served_headers(catalog: HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(catalog.len() + 1);
    let mut vary_encoding = false;
    for (name, value) in without_validators(catalog).iter() {
        if matches!(
            *name,
            header::DATE
                | header::AGE
                | header::SET_COOKIE
                | header::CONTENT_LENGTH
                | header::EXPIRES
        ) || name.as_str() == "x-request-id"
        {
            continue;
        }
        if *name == header::VARY {
            vary_encoding |= value.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|d| d.trim().eq_ignore_ascii_case("accept-encoding"))
            });
        }
        if let Ok(copy) = HeaderValue::from_bytes(value.as_bytes()) {
            headers.append(name.clone(), copy);
        }
    }
    if !vary_encoding {
        headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    headers
}

/// The catalog's headers without the validators that name its own representation.
pub(super) fn without_validators(mut headers: HeaderMap) -> HeaderMap {
    headers.remove(header::ETAG);
    headers.remove(header::LAST_MODIFIED);
    headers
}

pub(super) fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    Ok(Bytes::from(encoder.finish()?.into_boxed_slice()))
}
