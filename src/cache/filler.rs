//! The miss path: a `Filler` produces what a fill's callers may get, from an entry another
//! replica shared (the tier's offer), or by asking the catalog: the answer goes through the
//! policy stage, is judged storable or not (and why), gets icecache's ETag and, when stored, a
//! gzip copy; it is stored only while the fill's ticket is current. Under `revalidate` the
//! caller whose credentials fetched it is confirmed for it.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use tokio::time::Instant;

use super::confirmations::Confirmations;
use super::entry::{Content, Entry, Gzipped};
use super::fill::{
    gzip, keyed, process, served_headers, unstorable, without_validators, Answered, Fill,
    FillOutcome, Purpose, Served, GZIP_MIN_BYTES, POLICY_READ_LIMIT,
};
use super::phase::NoCacheReason;
use super::store::Store;
use super::ticket::FillTicket;
use super::tier::{Share, Tier, TierAsk, TierFill};
use super::vary::Varies;
use crate::origin::{Origin, OriginError};
use crate::policy::stage::{self, Shape, Stage, OFFLOAD_BYTES};
use crate::policy::{Credentials, Identity};
use crate::telemetry::cache::Revalidation;
use crate::telemetry::CacheMetrics;

/// What the miss path needs, and nothing of the lookup's.
pub struct Filler {
    pub(super) store: Store,
    pub(super) confirmations: Confirmations,
    pub(super) origin: Arc<Origin>,
    pub(super) metrics: Arc<CacheMetrics>,
    /// The policy stage every answer a fill produces goes through.
    pub(super) stage: Arc<Stage>,
    pub(super) tier: Arc<dyn Tier>,
}

impl Filler {
    /// Produces what the fill's callers may get: from an entry another replica shared, after
    /// another replica's fill (its lease), or from the catalog. Only a fill on behalf of
    /// waiters consults the tier; a caller's own check and a bypass ask for themselves.
    pub async fn produce(&self, fill: Fill) -> FillOutcome {
        let Purpose::Fill { key, ticket, .. } = &fill.purpose else {
            return self.ask_catalog(fill).await;
        };
        let ask = TierAsk {
            key,
            policy_generation: fill.policy.generation,
            ticket,
            tokens: fill.remote.clone(),
        };
        let offer = self.tier.offer(&ask).await;
        match offer {
            TierFill::Shared(entry) => self.keep(&fill, entry),
            TierFill::Alone => self.ask_catalog(fill).await,
            TierFill::Lead(lease) => {
                let outcome = self.ask_catalog(fill.clone()).await;
                let share = match &outcome {
                    FillOutcome::Entry(entry)
                        if entry.content.shareable
                            && entry.ticket.is_current()
                            && entry.remote == fill.remote =>
                    {
                        Share::Entry(entry)
                    }
                    FillOutcome::Entry(_) => Share::KeptLocal,
                    _ => Share::Nothing,
                };
                self.tier.release(&lease, share).await;
                outcome
            }
        }
    }

    /// Asks the catalog and produces what the fill's callers may get.
    async fn ask_catalog(&self, fill: Fill) -> FillOutcome {
        let passthrough = fill.policy.credentials == Credentials::Passthrough;
        // Freshness counts from when the catalog was asked, not from when it finished.
        let requested_at = Instant::now();
        let upstream_etag = fill.stale().and_then(|e| e.content.upstream_etag.clone());
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
        // What a fill produces may be kept and shared (here, in Redis): it holds no header
        // named like a secret, whatever the policy.
        crate::policy::headers::without_secret_headers(&mut fetched.headers, &fill.policy.strip);
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
            .bypass()
            .or_else(|| vary.is_star().then_some(NoCacheReason::Vary))
            .or_else(|| unstorable(&fetched.headers, fetched.body.len(), &fill));
        let upstream_etag = fetched
            .headers
            .get(header::ETAG)
            .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
        let processed =
            match process(&self.stage, fetched.body, &fill.policy, fill.tag_label()).await {
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
        let Some(ticket) = fill.ticket().cloned().filter(|_| reason.is_none()) else {
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
        if let (Some(old), true) = (fill.stale(), fill.for_waiters()) {
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
                    etag: Gzipped::etag_of(&processed.etag),
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
            .stale()
            .filter(|old| old.content.etag == processed.etag)
            .map(|old| old.content.clone());
        // Shared with the tier only within the cap (compressed); under passthrough only when
        // the body holds nothing a secret could be in; and never when it varies on a request
        // header (its values, an `Authorization` say, would go to Redis with it).
        let shared_size = gzip.as_ref().map_or(body.len(), |g| g.body.len());
        let shareable = !(passthrough && (vended.has_secrets || vended.has_unknown_keys))
            && vary.is_empty()
            && u64::try_from(shared_size).unwrap_or(u64::MAX) <= self.tier.shared_cap();
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
                heads: Default::default(),
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
        let Some(old) = fill.stale().filter(|e| e.content.upstream_etag.is_some()) else {
            return FillOutcome::Failed(OriginError::UnexpectedNotModified);
        };
        if fill.for_waiters() {
            self.metrics.revalidated(Revalidation::NotModified);
        }
        match fill.ticket() {
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
            .key()
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
        let (Some(stale), Some(key)) = (fill.stale(), fill.key()) else {
            return;
        };
        if status.is_server_error() {
            if fill.for_waiters() {
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
