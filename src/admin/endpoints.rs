//! The admin listener: liveness, readiness, Prometheus metrics, cache stats and purge. It runs
//! on a thread and runtime of its own, so a busy proxy never fails its health probes.

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use crate::cache::Cause;
use crate::catalog::route::{decode_component, decode_namespace};
use crate::error::iceberg_error;
use crate::state::State;
use crate::telemetry::Totals;
use crate::wire::body::{empty, full, Body};

pub async fn handle<B>(state: Arc<State>, request: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<crate::wire::body::BoxError>,
{
    match (request.method(), request.uri().path()) {
        (&Method::POST, "/events/seaweedfs")
            if state.settings().events.seaweedfs_token.is_some() =>
        {
            seaweedfs_event(&state, request).await
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => readiness(&state).await,
        (&Method::GET, "/metrics") => metrics(&state),
        (&Method::GET, "/cache/stats") => stats(&state),
        (&Method::POST, "/cache/purge") => purge(&state, &request).await,
        _ => iceberg_error(
            StatusCode::NOT_FOUND,
            "NotFoundException",
            "admin endpoints: GET /healthz, /readyz, /metrics, /cache/stats; POST /cache/purge, \
             /events/seaweedfs (with events.seaweedfs_token_file)",
        ),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn json(value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Ready once the catalog has answered anything; until then each probe asks it.
async fn readiness(state: &State) -> Response<Body> {
    if !state.tier.joined() {
        // A replica that never reached Redis takes no traffic: writes through it could not be
        // seen by the others.
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica has not reached the tier's Redis yet\n",
        );
    }
    if state.origin.has_answered() {
        return text(StatusCode::OK, "ready\n");
    }
    if let Some(probe) = state.origin.probe_request() {
        if state.origin.send(probe, empty()).await.is_ok() {
            return text(StatusCode::OK, "ready\n");
        }
    }
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "upstream has not answered\n",
    )
}

fn metrics(state: &State) -> Response<Body> {
    if let Some(cache) = &state.cache {
        cache.usage();
    }
    let mut response = Response::new(full(state.metrics.render()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

fn stats(state: &State) -> Response<Body> {
    let Some(cache) = &state.cache else {
        return json(&serde_json::json!({ "enabled": false }));
    };
    let (entries, bytes) = cache.usage();
    let (fills, tables) = cache.bookkeeping();
    let m = &state.metrics;
    json(&serde_json::json!({
        "enabled": true,
        "entries": entries,
        "bytes": bytes,
        "max_bytes": cache.max_bytes(),
        "fills_in_flight": fills,
        "tables_indexed": tables,
        "confirmed_callers": cache.confirmed_callers(),
        "load_table_requests": m.totals(Totals::Requests, "cache"),
        "not_modified": m.cache.not_modified_count(),
        "coalesced_waiters": m.cache.coalesced_count(),
        "revalidations": m.totals(Totals::Revalidations, "result"),
        "bypasses": m.totals(Totals::Bypasses, "reason"),
        "evictions": m.totals(Totals::Evictions, "cause"),
        "invalidations": m.totals(Totals::Invalidations, "reason"),
        "event_sources": state.events.describe(),
    }))
}

/// Whether the request carries `Authorization: Bearer <token>` (the scheme in any case, as
/// RFC 9110 §11.1 has it).
fn authorised(request: &Request<impl Sized>, token: &str) -> bool {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    // Compare digests so the time taken says nothing about the token.
    presented.is_some_and(|p| blake3::hash(p.as_bytes()) == blake3::hash(token.as_bytes()))
}

/// `POST /events/seaweedfs`: one filer event, applied (here and across the tier) before the
/// answer, so a 200 means the cache no longer holds what it changed. A request without the
/// token changes nothing; a message from the filer that cannot be read may have been a real
/// event, so it is a gap.
async fn seaweedfs_event<B>(state: &State, request: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<crate::wire::body::BoxError>,
{
    use crate::events::{seaweedfs, settings::MAX_EVENT_BYTES, Gap, Rejection, SourceId};
    let source = SourceId::SeaweedFs;
    let settings = state.settings();
    let authorised_now = settings
        .events
        .seaweedfs_token
        .as_ref()
        .is_some_and(|token| authorised(&request, token.expose()));
    let refuse = |rejection: Rejection, status: StatusCode, message: &str| {
        state.metrics.events.rejected(source, rejection);
        if rejection.loses_an_event() {
            state.events.gap(source, Gap::Unreadable(rejection));
        }
        let kind = match status {
            StatusCode::UNAUTHORIZED => "NotAuthorizedException",
            _ => "BadRequestException",
        };
        iceberg_error(status, kind, message)
    };
    if !authorised_now {
        return refuse(
            Rejection::Unauthorized,
            StatusCode::UNAUTHORIZED,
            "POST /events/seaweedfs needs `Authorization: Bearer <token>` (notification.toml's \
             bearer_token, the contents of events.seaweedfs_token_file)",
        );
    }
    let body = match crate::wire::body::read_to_bytes(
        request.into_body(),
        MAX_EVENT_BYTES,
        settings.request_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(crate::wire::body::ReadError::TooLarge { .. }) => {
            return refuse(
                Rejection::Oversized,
                StatusCode::PAYLOAD_TOO_LARGE,
                "the event is larger than icecache reads",
            )
        }
        Err(e) => {
            return refuse(
                Rejection::Malformed,
                StatusCode::BAD_REQUEST,
                &e.to_string(),
            )
        }
    };
    match seaweedfs::read(&body) {
        Ok(seaweedfs::Reading::Unrelated(kind)) => {
            state.metrics.events.received(source, kind);
            state.metrics.events.unrelated(source);
            json(&serde_json::json!({ "invalidated": 0 }))
        }
        Ok(seaweedfs::Reading::Change(change, kind)) => {
            state.metrics.events.received(source, kind);
            let removed = match &state.cache {
                Some(cache) => {
                    cache
                        .invalidate_in_everywhere(&change.prefixes, &change.touched, Cause::Event)
                        .await
                }
                None => 0,
            };
            state.metrics.events.invalidated(source, removed);
            json(&serde_json::json!({ "invalidated": removed }))
        }
        Err(rejection) => refuse(
            rejection,
            StatusCode::BAD_REQUEST,
            "not a SeaweedFS filer event: {\"key\", \"event_type\": create|update|delete|rename, \"message\"}",
        ),
    }
}

/// `POST /cache/purge` empties everything; `?namespace=a%1Fb` one namespace;
/// `?namespace=a&table=t` one table (every spelling of it). `prefix=p` is accepted and does
/// not narrow the purge: a catalog may serve one table under several prefixes.
async fn purge<B>(state: &State, request: &Request<B>) -> Response<Body> {
    if let Some(token) = &state.settings().admin_token {
        if !authorised(request, token.expose()) {
            return iceberg_error(
                StatusCode::UNAUTHORIZED,
                "NotAuthorizedException",
                "POST /cache/purge needs `Authorization: Bearer <admin_token>`",
            );
        }
    }
    let Some(cache) = &state.cache else {
        return json(&serde_json::json!({ "purged": 0 }));
    };
    let mut namespace = None;
    let mut table = None;
    let separator = state.separator.get();
    for pair in request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // A purge that names two things, or an empty one, is refused rather than narrowed to
        // a guess: it would leave entries the operator meant to be gone.
        let repeated = match name {
            "namespace" => namespace.is_some(),
            "table" => table.is_some(),
            _ => false,
        };
        if repeated || (matches!(name, "namespace" | "table") && value.is_empty()) {
            return iceberg_error(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                &format!("purge parameter {name:?} must be given once, and not empty"),
            );
        }
        let decoded = match name {
            "prefix" => decode_component(value).map(drop),
            "namespace" => decode_namespace(value, &separator).map(|v| namespace = Some(v)),
            "table" => decode_component(value).map(|v| table = Some(v)),
            other => {
                return iceberg_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequestException",
                    &format!("unknown purge parameter {other:?}: use prefix, namespace, table"),
                )
            }
        };
        if let Err(e) = decoded {
            return iceberg_error(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                &e.to_string(),
            );
        }
    }
    if table.is_some() && namespace.is_none() {
        return iceberg_error(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            "purging a table needs its namespace too",
        );
    }
    let purged = cache.purge(namespace.as_deref(), table.as_deref()).await;
    json(&serde_json::json!({ "purged": purged }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> Request<()> {
        Request::post("/cache/purge")
            .header(header::AUTHORIZATION, value)
            .body(())
            .unwrap()
    }

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER  t0k "] {
            assert!(authorised(&with(value), "t0k"), "{value}");
        }
        for value in ["Basic t0k", "Bearer t0", "t0k", "Bearer"] {
            assert!(!authorised(&with(value), "t0k"), "{value}");
        }
    }
}
