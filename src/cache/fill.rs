//! Asking the catalog for a loadTable answer and turning it into what clients may get: the one
//! path every loadTable answer takes, stored or not. The answer goes through the policy stage,
//! is judged storable or not (and why), gets icecache's ETag and, when stored, a gzip copy.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use tokio::time::Instant;

use super::entry::{Content, Entry, FillTicket, Gzipped};
use super::key::{CacheKey, Form};
use super::phase::NoCacheReason;
use super::tier::TierFill;
use super::vary::Varies;
use super::Cache;
use crate::cluster::Tokens;
use crate::config::Settings;
use crate::origin::{OriginError, OriginRequest};
use crate::policy::identity::Scope;
use crate::policy::stage::{self, Processed, Refusal, Shape, Stage, OFFLOAD_BYTES};
use crate::policy::{Credentials, Identity, Policy};
use crate::telemetry::cache::Revalidation;
use crate::wire::etag::strong_etag_of;

/// The largest loadTable answer read whole to apply `strip` or `inject` (real metadata
/// reaches 250 MB); a larger one is refused rather than passed on unchecked.
pub const POLICY_READ_LIMIT: usize = 512 << 20;

/// Bodies smaller than this are not worth a gzip copy.
const GZIP_MIN_BYTES: usize = 1024;

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

/// Why the catalog is being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A miss, or a stale entry's revalidation, on behalf of every waiter.
    Fill,
    /// One caller's own check for an entry under identity `revalidate`.
    Authorize,
    /// A request that is not cached (its answer is never stored).
    Bypass,
}

/// One request to the catalog on a key's behalf.
#[derive(Clone)]
pub struct Fill {
    pub purpose: Purpose,
    /// None for a request without a key (a bypass).
    pub key: Option<CacheKey>,
    pub form: Form,
    pub request: OriginRequest,
    /// The entry being revalidated, if any (its ETag makes the request conditional).
    pub stale: Option<Arc<Entry>>,
    /// None: the answer is never stored (a bypass).
    pub ticket: Option<FillTicket>,
    pub policy: Arc<Policy>,
    pub leader: Scope,
    pub settings: Arc<Settings>,
    /// Why it is not going to be stored, when known before asking.
    pub bypass: Option<NoCacheReason>,
    /// The table's tokens in Redis, read before the catalog is asked (several replicas).
    pub remote: Option<Tokens>,
}

impl Cache {
    /// Produces what the fill's callers may get: from an entry another replica shared, after
    /// another replica's fill (its lease), or from the catalog.
    pub(super) async fn produce(&self, mut fill: Fill) -> FillOutcome {
        let Some(tier) = self.tier_fill(&mut fill).await else {
            return self.ask_catalog(fill).await;
        };
        match tier {
            TierFill::Shared(entry) => self.keep(&fill, entry),
            TierFill::Alone => self.ask_catalog(fill).await,
            TierFill::Lead(identity) => {
                let outcome = self.ask_catalog_for_tier(&fill).await;
                self.after_lead(&fill, &identity, &outcome).await;
                outcome
            }
        }
    }

    /// Asks the catalog; the tier's lease, if held, is the caller's to give back.
    async fn ask_catalog_for_tier(&self, fill: &Fill) -> FillOutcome {
        self.ask_catalog(fill.clone()).await
    }

    /// Asks the catalog and produces what the fill's callers may get.
    pub(super) async fn ask_catalog(&self, fill: Fill) -> FillOutcome {
        let passthrough = fill.policy.credentials == Credentials::Passthrough;
        // Freshness counts from when the catalog was asked, not from when it finished.
        let requested_at = Instant::now();
        let upstream_etag = fill
            .stale
            .as_ref()
            .and_then(|e| e.content.upstream_etag.clone());
        let request = fill.request.conditional(upstream_etag.as_ref());
        let limit = if passthrough {
            usize::try_from(fill.settings.cache.max_entry_bytes).unwrap_or(usize::MAX)
        } else {
            POLICY_READ_LIMIT
        };
        let mut fetched = match self.origin.fetch(request, limit).await {
            Ok(fetched) => fetched,
            Err(OriginError::TooLarge { .. }) if passthrough => return FillOutcome::TooLarge,
            Err(e) => return FillOutcome::Failed(e),
        };
        if !passthrough {
            // Asked for the identity encoding; an answer encoded anyway is decoded, not trusted.
            match self.stage.decode(
                &mut fetched.headers,
                fetched.body.clone(),
                POLICY_READ_LIMIT,
            ) {
                Ok(body) => fetched.body = body,
                Err(refusal) => return FillOutcome::Refused(Arc::new(refusal)),
            }
        }
        if fetched.status == StatusCode::NOT_MODIFIED {
            return self.not_modified(&fill, requested_at);
        }
        let vary = Varies::of(&fetched.headers, &fill.request.headers, |name| {
            keyed(name, &fill)
        });
        if fetched.status != StatusCode::OK {
            self.forget_if_gone(&fill, fetched.status);
            // Under strip and inject any answer may hold what the catalog vended: another 2xx
            // is read as a LoadTableResult, any other JSON object is scrubbed.
            let shape = if fetched.status.is_success() {
                Shape::Table
            } else {
                Shape::Unknown
            };
            let processed = self
                .stage
                .process_off_thread(shape, fetched.body, fill.policy.clone())
                .await;
            let body = match processed {
                Ok(p) => stage::served(&p.body, p.config_empty, shape, &fill.policy),
                Err(refusal) => return FillOutcome::Refused(Arc::new(refusal)),
            };
            return FillOutcome::Answer(Arc::new(Answered {
                status: fetched.status,
                headers: without_validators(fetched.headers),
                body,
                etag: None,
                reason: NoCacheReason::NotOk,
                leader: fill.leader,
                vary,
            }));
        }
        let reason = fill
            .bypass
            .or_else(|| vary.is_star().then_some(NoCacheReason::Vary))
            .or_else(|| unstorable(&fetched.headers, fetched.body.len(), &fill));
        let upstream_etag = fetched
            .headers
            .get(header::ETAG)
            .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
        let processed = match process(&self.stage, fetched.body, &fill.policy, fill.form).await {
            Ok(processed) => Served {
                upstream_etag,
                ..processed
            },
            Err(refusal) => return FillOutcome::Refused(Arc::new(refusal)),
        };
        let reason = reason.or(processed
            .processed
            .vended
            .is_none()
            .then_some(NoCacheReason::NotLoadTableResult));
        let headers = served_headers(fetched.headers);
        let Some(ticket) = fill.ticket.clone().filter(|_| reason.is_none()) else {
            let etag = (!passthrough).then(|| processed.etag.clone());
            return FillOutcome::Answer(Arc::new(Answered {
                status: StatusCode::OK,
                headers,
                body: processed.pieces,
                etag,
                reason: reason.unwrap_or(NoCacheReason::Superseded),
                leader: fill.leader,
                vary,
            }));
        };
        self.store_processed(fill, ticket, processed, headers, vary, requested_at)
            .await
    }

    async fn store_processed(
        &self,
        fill: Fill,
        ticket: FillTicket,
        processed: Served,
        headers: HeaderMap,
        vary: Varies,
        requested_at: Instant,
    ) -> FillOutcome {
        let settings = &fill.settings.cache;
        let passthrough = fill.policy.credentials == Credentials::Passthrough;
        let vended = processed.processed.vended.clone().unwrap_or_default();
        let servable = vended.servable_for(settings.fresh_for);
        let retained =
            settings.fresh_for + settings.stale_if_error.max(settings.stale_while_revalidate);
        if servable.is_some_and(|servable| servable < retained) {
            self.metrics.credential_capped();
        }
        if let (Some(old), Purpose::Fill) = (&fill.stale, fill.purpose) {
            self.metrics
                .revalidated(if old.content.etag == processed.etag {
                    Revalidation::Unchanged
                } else {
                    Revalidation::Changed
                });
        }
        let body = processed.processed.body;
        // Compressed once per fill, off the async threads; never a body with injected secrets.
        let gzip = if settings.gzip
            && fill.policy.credentials != Credentials::Inject
            && body.len() >= GZIP_MIN_BYTES
        {
            self.metrics.compressed();
            // Small bodies compress in microseconds: inline, so a burst of fills does not
            // start a blocking thread (and with it an allocator arena) per fill.
            let compressed = if body.len() < OFFLOAD_BYTES {
                Ok(gzip(&body))
            } else {
                let plain = body.clone();
                tokio::task::spawn_blocking(move || gzip(&plain)).await
            };
            match compressed {
                Ok(Ok(compressed)) => Some(Gzipped {
                    etag: gzip_etag(&processed.etag),
                    body: compressed,
                }),
                _ => None,
            }
        } else {
            None
        };
        // A version the catalog sent again unchanged keeps its content, and with it the
        // callers confirmed for it.
        let unchanged = fill
            .stale
            .as_ref()
            .filter(|old| old.content.etag == processed.etag)
            .map(|old| old.content.clone());
        // Shared with the tier only within the cap (compressed); under passthrough only when
        // the body holds nothing a secret could be in; and never when it varies on a request
        // header (its values, an `Authorization` say, would go to Redis with it).
        let shared_size = gzip.as_ref().map_or(body.len(), |g| g.body.len());
        let shareable = !(passthrough && (vended.has_secrets || vended.has_unknown_keys))
            && vary.is_empty()
            && u64::try_from(shared_size).unwrap_or(u64::MAX) <= self.shared_cap();
        let content = unchanged.unwrap_or_else(|| {
            Arc::new(Content {
                id: Content::next_id(),
                body,
                config_empty: processed.processed.config_empty,
                gzip,
                headers,
                etag: processed.etag,
                upstream_etag: processed.upstream_etag,
                length: processed.pieces.iter().map(Bytes::len).sum(),
                vary,
                shareable,
            })
        });
        let entry = Arc::new(Entry::new(
            content,
            requested_at,
            servable.map(|s| requested_at + s),
            fill.policy.generation,
            ticket,
            fill.remote.clone(),
        ));
        self.keep(&fill, entry)
    }

    /// The catalog confirmed the stale entry: the same content, fresh again.
    fn not_modified(&self, fill: &Fill, requested_at: Instant) -> FillOutcome {
        let Some(old) = fill
            .stale
            .as_ref()
            .filter(|e| e.content.upstream_etag.is_some())
        else {
            return FillOutcome::Failed(OriginError::UnexpectedNotModified);
        };
        if fill.purpose == Purpose::Fill {
            self.metrics.revalidated(Revalidation::NotModified);
        }
        match &fill.ticket {
            Some(ticket) => {
                let entry =
                    Arc::new(old.refreshed(requested_at, ticket.clone(), fill.remote.clone()));
                self.keep(fill, entry)
            }
            None => FillOutcome::Failed(OriginError::UnexpectedNotModified),
        }
    }

    /// Stores an entry (unless a write overtook the fill) and, under `revalidate`, confirms the
    /// caller whose credentials fetched it.
    fn keep(&self, fill: &Fill, entry: Arc<Entry>) -> FillOutcome {
        let stored = fill
            .key
            .as_ref()
            .is_some_and(|key| self.store.insert(key, entry.clone()));
        if !stored {
            self.metrics.bypassed(NoCacheReason::Superseded);
        }
        // The catalog let the leader in only if it asked: an entry another replica shared
        // says nothing about this caller, who is checked like any other.
        if fill.policy.identity == Identity::Revalidate && !entry.from_tier {
            self.confirmations.confirm(
                entry.content.id,
                fill.leader,
                Instant::now() + fill.settings.authz_ttl,
            );
        }
        FillOutcome::Entry(entry)
    }

    /// A revalidation the catalog answered with a refusal: the representation is gone for
    /// this key, unless the refusal is one caller's and the entry is shared (`revalidate`: the
    /// entry stays for the callers the catalog still lets in).
    fn forget_if_gone(&self, fill: &Fill, status: StatusCode) {
        let (Some(stale), Some(key)) = (&fill.stale, &fill.key) else {
            return;
        };
        if status.is_server_error() {
            if fill.purpose == Purpose::Fill {
                self.metrics.revalidated(Revalidation::Error);
            }
            return;
        }
        if !status.is_client_error() {
            return;
        }
        match fill.policy.identity {
            Identity::Revalidate => self.confirmations.revoke(stale.content.id, fill.leader),
            Identity::Shared if !matches!(status, StatusCode::NOT_FOUND | StatusCode::GONE) => {}
            Identity::PerPrincipal | Identity::Shared => {
                self.metrics.revalidated(Revalidation::Gone);
                self.store.remove(key);
            }
        }
    }
}

/// Why a 200 answer may not be stored, from its headers and size.
fn unstorable(headers: &HeaderMap, length: usize, fill: &Fill) -> Option<NoCacheReason> {
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
fn keyed(name: &str, fill: &Fill) -> bool {
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
fn directives(headers: &HeaderMap, name: &HeaderName) -> Vec<String> {
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
async fn process(
    stage: &Arc<Stage>,
    body: Bytes,
    policy: &Arc<Policy>,
    form: Form,
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
        let etag = strong_etag_of(form.as_str(), &slices);
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
fn served_headers(catalog: HeaderMap) -> HeaderMap {
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
fn without_validators(mut headers: HeaderMap) -> HeaderMap {
    headers.remove(header::ETAG);
    headers.remove(header::LAST_MODIFIED);
    headers
}

fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    Ok(Bytes::from(encoder.finish()?.into_boxed_slice()))
}

/// The gzip representation's own strong ETag: a different representation of the same version.
pub(super) fn gzip_etag(etag: &HeaderValue) -> HeaderValue {
    let tag = etag.to_str().unwrap_or("\"\"").trim_end_matches('"');
    HeaderValue::from_str(&format!("{tag}-gzip\"")).unwrap_or_else(|_| etag.clone())
}
