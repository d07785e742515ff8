//! The admin listener: liveness, readiness, Prometheus metrics, cache stats and purge.

use std::convert::Infallible;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use prometheus::core::Collector;
use prometheus::IntCounterVec;

use crate::body::{empty, full, Body};
use crate::error::iceberg_error;
use crate::proxy::AppState;
use crate::route::{decode_component, decode_namespace, Operation};

pub async fn handle(
    state: Arc<AppState>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let response = match (request.method(), request.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => readiness(&state).await,
        (&Method::GET, "/metrics") => metrics(&state),
        (&Method::GET, "/cache/stats") => stats(&state),
        (&Method::POST, "/cache/purge") => purge(&state, &request),
        _ => iceberg_error(
            StatusCode::NOT_FOUND,
            "NotFoundException",
            "admin endpoints: GET /healthz, /readyz, /metrics, /cache/stats; POST /cache/purge",
        ),
    };
    Ok(response)
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Ready once the catalog has answered anything; until then each probe asks it.
async fn readiness(state: &AppState) -> Response<Body> {
    if state.upstream.has_answered() {
        return text(StatusCode::OK, "ready\n");
    }
    let probe = state
        .upstream
        .uri_for("/v1/config")
        .ok()
        .and_then(|uri| Request::get(uri).body(empty()).ok());
    if let Some(probe) = probe {
        if state.upstream.send(Operation::Config, probe).await.is_ok() {
            return text(StatusCode::OK, "ready\n");
        }
    }
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "upstream has not answered\n",
    )
}

fn metrics(state: &AppState) -> Response<Body> {
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

/// The counters of a metric vector by the value of one label, summed over the others.
fn by_label(vec: &IntCounterVec, label: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut totals = std::collections::BTreeMap::<String, f64>::new();
    for family in vec.collect() {
        for metric in family.get_metric() {
            let value = metric.get_label().iter().find(|l| l.get_name() == label);
            if let Some(value) = value {
                *totals.entry(value.get_value().to_owned()).or_default() +=
                    metric.get_counter().get_value();
            }
        }
    }
    totals
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::from(v as u64)))
        .collect()
}

fn stats(state: &AppState) -> Response<Body> {
    let Some(cache) = &state.cache else {
        return json(StatusCode::OK, serde_json::json!({ "enabled": false }));
    };
    let (entries, bytes) = cache.usage();
    let m = &state.metrics;
    let load_table = m
        .requests
        .collect()
        .into_iter()
        .flat_map(|f| f.get_metric().to_vec())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|l| l.get_name() == "route" && l.get_value() == "load_table")
        })
        .fold(
            std::collections::BTreeMap::<String, u64>::new(),
            |mut acc, metric| {
                if let Some(outcome) = metric.get_label().iter().find(|l| l.get_name() == "cache") {
                    *acc.entry(outcome.get_value().to_owned()).or_default() +=
                        metric.get_counter().get_value() as u64;
                }
                acc
            },
        );
    json(
        StatusCode::OK,
        serde_json::json!({
            "enabled": true,
            "entries": entries,
            "bytes": bytes,
            "max_bytes": cache.max_bytes(),
            "load_table_requests": load_table,
            "not_modified": m.cache_not_modified.get(),
            "coalesced_waiters": m.cache_coalesced_waiters.get(),
            "revalidations": by_label(&m.cache_revalidations, "result"),
            "evictions": by_label(&m.cache_evictions, "cause"),
            "invalidations": by_label(&m.cache_invalidations, "reason"),
        }),
    )
}

/// `POST /cache/purge` empties everything; `?namespace=a%1Fb` one namespace;
/// `?namespace=a&table=t` one table; `prefix=p` scopes either to a catalog prefix.
fn purge(state: &AppState, request: &Request<Incoming>) -> Response<Body> {
    if let Some(token) = &state.config().admin_token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let authorised = presented.is_some_and(|p| {
            // Compare digests so the time taken says nothing about the token.
            blake3::hash(p.as_bytes()) == blake3::hash(token.as_bytes())
        });
        if !authorised {
            return iceberg_error(
                StatusCode::UNAUTHORIZED,
                "NotAuthorizedException",
                "POST /cache/purge needs `Authorization: Bearer <admin_token>`",
            );
        }
    }
    let Some(cache) = &state.cache else {
        return json(StatusCode::OK, serde_json::json!({ "purged": 0 }));
    };
    let mut prefix = None;
    let mut namespace = None;
    let mut table = None;
    for pair in request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = match name {
            "prefix" => decode_component(value).map(|v| prefix = Some(v)),
            "namespace" => {
                decode_namespace(value, &state.separator.get()).map(|v| namespace = Some(v))
            }
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
    let purged = cache.purge(prefix.as_deref(), namespace.as_deref(), table.as_deref());
    json(StatusCode::OK, serde_json::json!({ "purged": purged }))
}
