//! Asking the catalog: fills and revalidations, reading bodies within bounds, applying the
//! credential policy, and answers under strip or inject that are not cached.

use super::*;

/// A LoadTableResult after the credential policy, with the ETag of what will be served.
pub(super) struct Prepared {
    body: Bytes,
    vended: Vended,
    injection: Option<Arc<Injection>>,
    config_empty: bool,
    pub(super) etag: HeaderValue,
    length: usize,
}

pub(super) enum BodyError {
    TooLarge,
    Upstream(UpstreamError),
}

impl TableCache {
    /// One upstream request for `key`, and what it leaves in the cache.
    pub(super) async fn fill(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
        leader: &FillLeader,
    ) -> FillOutcome {
        let revalidating = stale.is_some();
        let outcome = self.fetch(key, request, stale, ticket, leader).await;
        if revalidating {
            let result = match &outcome {
                FillOutcome::Stored(_) | FillOutcome::Uncacheable(_) | FillOutcome::TooLarge => {
                    None
                }
                FillOutcome::Failed(_) => Some("error"),
            };
            if let Some(result) = result {
                self.metrics
                    .cache_revalidations
                    .with_label_values(&[result])
                    .inc();
            }
            if let FillOutcome::Uncacheable(b) = &outcome {
                let result = if b.status.is_server_error() {
                    "error"
                } else {
                    "gone"
                };
                self.metrics
                    .cache_revalidations
                    .with_label_values(&[result])
                    .inc();
                if !b.status.is_server_error() {
                    self.store.remove(key);
                }
            }
            if matches!(outcome, FillOutcome::TooLarge) {
                self.store.remove(key);
            }
        }
        outcome
    }

    /// A loadTable answered without the cache under `strip` or `inject`: the body is read whole
    /// and the policy applied, so no vended credential passes even when nothing is cached. A
    /// body larger than `STRIP_LIMIT` cannot be checked and is refused.
    pub async fn uncached(
        &self,
        representation: &str,
        caller: &Caller<'_>,
        request: Result<FillRequest, UpstreamError>,
    ) -> Response<Body> {
        let response = match request {
            Ok(request) => self.send_get(request, None).await,
            Err(e) => Err(e),
        };
        let (mut parts, body) = match response {
            Ok(response) => response.into_parts(),
            Err(e) => return upstream_error(&e),
        };
        remove_hop_by_hop(&mut parts.headers);
        let body = match self.read_body_up_to(body, STRIP_LIMIT).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                return iceberg_error(
                    StatusCode::BAD_GATEWAY,
                    "BadGatewayException",
                    &format!(
                        "the catalog's answer is larger than {STRIP_LIMIT} bytes: too large to \
                         remove vended credentials from, so it is not passed on"
                    ),
                )
            }
            Err(BodyError::Upstream(e)) => return upstream_error(&e),
        };
        let label = CacheOutcome::Bypass;
        let prepared = (parts.status == StatusCode::OK)
            .then(|| self.prepare(representation, &body, caller.policy))
            .flatten();
        let Some(prepared) = prepared else {
            let buffered = Buffered {
                status: parts.status,
                headers: parts.headers,
                body,
            };
            return buffered.response(label);
        };
        let headers = entry_headers(parts.headers, &prepared.etag, prepared.length);
        let body = match &prepared.injection {
            Some(injection) => {
                self.metrics.credentials_injected.inc();
                chain(spliced(
                    &prepared.body,
                    &injection.fragment,
                    prepared.config_empty,
                ))
            }
            None => full(prepared.body),
        };
        let mut response = Response::new(body);
        *response.headers_mut() = headers;
        response
            .headers_mut()
            .insert(X_CACHE.clone(), HeaderValue::from_static(label.as_str()));
        response
    }

    /// A GET to the catalog with the given headers, conditional on `upstream_etag` when given.
    pub(super) async fn send_get(
        &self,
        request: FillRequest,
        upstream_etag: Option<HeaderValue>,
    ) -> Result<Response<hyper::body::Incoming>, UpstreamError> {
        let mut upstream_request = Request::get(request.uri);
        if let Some(headers) = upstream_request.headers_mut() {
            *headers = request.headers;
            if let Some(etag) = upstream_etag {
                headers.insert(header::IF_NONE_MATCH, etag);
            }
        }
        let upstream_request = upstream_request
            .body(empty())
            .map_err(|e| UpstreamError::BadUri(e.to_string()))?;
        self.upstream
            .send(Operation::LoadTable, upstream_request)
            .await
    }

    /// Reads a catalog body whole, up to `max_entry_bytes` and within the request timeout.
    pub(super) async fn read_body(&self, body: hyper::body::Incoming) -> Result<Bytes, BodyError> {
        self.read_body_up_to(body, self.settings().max_entry_bytes)
            .await
    }

    async fn read_body_up_to(
        &self,
        body: hyper::body::Incoming,
        limit: u64,
    ) -> Result<Bytes, BodyError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let timeout = self.upstream.request_timeout();
        match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
            Err(_) => Err(BodyError::Upstream(UpstreamError::Timeout {
                upstream: "catalog body".to_owned(),
                timeout,
            })),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                Err(BodyError::TooLarge)
            }
            Ok(Err(e)) => Err(BodyError::Upstream(UpstreamError::Protocol {
                upstream: "catalog".to_owned(),
                message: format!("response body broke off: {e}"),
            })),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }

    /// Applies the credential policy to a LoadTableResult and computes the ETag of what will be
    /// served; None when the body is not a LoadTableResult.
    pub(super) fn prepare(
        &self,
        representation: &str,
        body: &Bytes,
        policy: &Policy,
    ) -> Option<Prepared> {
        let injection = match policy.credentials {
            Credentials::Passthrough => None,
            Credentials::Strip | Credentials::Inject => policy.injection.clone(),
        };
        let (body, vended, config_empty) = match policy.credentials {
            Credentials::Passthrough => (body.clone(), credentials::inspect(body).ok()?, false),
            Credentials::Strip | Credentials::Inject => {
                let stripped = credentials::strip(body, &self.live.get().strip_keys).ok()?;
                if stripped.removed > 0 {
                    self.metrics.credentials_stripped.inc();
                }
                (stripped.body, stripped.vended, stripped.config_empty)
            }
        };
        let (etag, length) = match &injection {
            Some(injection) => {
                let parts = spliced(&body, &injection.fragment, config_empty);
                let length = parts.iter().map(Bytes::len).sum();
                (strong_etag(representation, &parts.concat()), length)
            }
            None => (strong_etag(representation, &body), body.len()),
        };
        Some(Prepared {
            body,
            vended,
            injection,
            config_empty,
            etag,
            length,
        })
    }

    async fn fetch(
        &self,
        key: &CacheKey,
        request: FillRequest,
        stale: Option<Arc<Entry>>,
        ticket: &FillTicket,
        leader: &FillLeader,
    ) -> FillOutcome {
        // Freshness counts from when the catalog was asked, not from when it finished answering.
        let requested_at = Instant::now();
        let upstream_etag = stale.as_ref().and_then(|e| e.upstream_etag.clone());
        let response = match self.send_get(request, upstream_etag).await {
            Ok(r) => r,
            Err(e) => return FillOutcome::Failed(e),
        };
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);

        if parts.status == StatusCode::NOT_MODIFIED {
            let Some(old) = stale.filter(|e| e.upstream_etag.is_some()) else {
                return FillOutcome::Failed(UpstreamError::Protocol {
                    upstream: "catalog".to_owned(),
                    message: "answered 304 to an unconditional request".to_owned(),
                });
            };
            self.metrics
                .cache_revalidations
                .with_label_values(&["not_modified"])
                .inc();
            return self.store_entry(key, ticket, leader, self.refreshed(&old, requested_at));
        }

        let declared_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared_length.is_some_and(|n| n > self.settings().max_entry_bytes) {
            return FillOutcome::TooLarge;
        }
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => return FillOutcome::TooLarge,
            Err(BodyError::Upstream(e)) => return FillOutcome::Failed(e),
        };
        let prepared = if is_cacheable(parts.status, &parts.headers) {
            self.prepare(key.snapshots.as_str(), &body, &leader.policy)
        } else {
            None
        };
        let Some(prepared) = prepared else {
            return FillOutcome::Uncacheable(Buffered {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        };
        let settings = self.settings();
        let servable = prepared.vended.servable_for(settings.fresh_for);
        let retained =
            settings.fresh_for + settings.stale_if_error.max(settings.stale_while_revalidate);
        if servable.is_some_and(|servable| servable < retained) {
            self.metrics.cache_credential_caps.inc();
        }
        let servable_until = servable.map(|servable| requested_at + servable);
        if let Some(old) = &stale {
            let result = if old.etag == prepared.etag {
                "unchanged"
            } else {
                "changed"
            };
            self.metrics
                .cache_revalidations
                .with_label_values(&[result])
                .inc();
        }
        let upstream_etag = parts.headers.get(header::ETAG).cloned();
        let headers = entry_headers(parts.headers, &prepared.etag, prepared.length);
        // Compressed once per fill, off the async threads; never a body with injected secrets.
        let gzip = if self.settings().gzip
            && prepared.injection.is_none()
            && prepared.body.len() >= GZIP_MIN_BYTES
        {
            let body = prepared.body.clone();
            self.metrics.cache_compressions.inc();
            match tokio::task::spawn_blocking(move || gzip(&body)).await {
                Ok(Ok(compressed)) => Some(gzipped(compressed, &headers, &prepared.etag)),
                _ => None,
            }
        } else {
            None
        };
        self.store_entry(
            key,
            ticket,
            leader,
            NewEntry {
                body: prepared.body,
                headers,
                etag: prepared.etag,
                upstream_etag,
                injection: prepared.injection,
                config_empty: prepared.config_empty,
                gzip,
                stored_at: requested_at,
                servable_until,
            },
        )
    }

    fn refreshed(&self, old: &Entry, now: Instant) -> NewEntry {
        NewEntry {
            body: old.body.clone(),
            headers: old.headers.clone(),
            etag: old.etag.clone(),
            upstream_etag: old.upstream_etag.clone(),
            injection: old.injection.clone(),
            config_empty: old.config_empty,
            gzip: old.gzip.clone(),
            stored_at: now,
            servable_until: old.servable_until,
        }
    }

    /// Stores a fill's entry, confirmed for the caller whose credentials fetched it. When a
    /// write invalidated the table while the fill was in flight, the entry is not stored: its
    /// waiters asked before that write finished and may have it, later readers may not.
    fn store_entry(
        &self,
        key: &CacheKey,
        ticket: &FillTicket,
        leader: &FillLeader,
        new: NewEntry,
    ) -> FillOutcome {
        let entry = match self.store.insert(ticket, key.clone(), new) {
            Ok(stored) => stored,
            Err(unstored) => unstored,
        };
        entry.confirm(leader.scope, Instant::now() + self.live.get().authz_ttl);
        FillOutcome::Stored(entry)
    }
}

/// The largest loadTable answer read whole to apply `strip` or `inject` when it is not cached
/// (real metadata reaches 250 MB).
const STRIP_LIMIT: u64 = 512 << 20;

/// Bodies smaller than this are not worth a gzip copy.
const GZIP_MIN_BYTES: usize = 1024;

fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    Ok(Bytes::from(encoder.finish()?))
}

/// The gzip representation: its own strong ETag (a different representation of the same
/// version), `Content-Encoding` and length.
fn gzipped(body: Bytes, identity_headers: &HeaderMap, etag: &HeaderValue) -> Gzipped {
    let tag = etag.to_str().unwrap_or("\"\"").trim_end_matches('"');
    let etag = HeaderValue::from_str(&format!("{tag}-gzip\"")).unwrap_or_else(|_| etag.clone());
    let mut headers = identity_headers.clone();
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Gzipped {
        body,
        headers,
        etag,
    }
}

/// Only `200` JSON answers in identity encoding, and never what the catalog marked `no-store`.
/// (The body must also parse as a LoadTableResult; the credentials check does that.)
pub(super) fn is_cacheable(status: StatusCode, headers: &HeaderMap) -> bool {
    if status != StatusCode::OK {
        return false;
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let no_store = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-store"));
    json && !encoded && !no_store
}

/// The headers served with an entry: the catalog's, less those that are per-message or that
/// name the catalog's own validators, plus icecache's ETag.
fn entry_headers(mut headers: HeaderMap, etag: &HeaderValue, length: usize) -> HeaderMap {
    for name in [
        header::ETAG,
        header::DATE,
        header::AGE,
        header::SET_COOKIE,
        header::CONTENT_LENGTH,
        header::LAST_MODIFIED,
    ] {
        headers.remove(name);
    }
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    headers
}
