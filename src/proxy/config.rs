//! `GET /v1/config`: asked for uncompressed, read, its `uri` pointed back at icecache, its
//! separator and its existence checks learned, its `endpoints` completed with the checks
//! icecache answers, its `idempotency-key-lifetime` advertised under `idempotency = "provide"`
//! (when the catalog advertises none), and (under `strip` and `inject`) its secrets removed, or
//! refused when it is not a JSON object icecache can read.

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::de::Error as _;

use super::exchange::{origin_request, Exchange};
use super::relay::relay_body;
use crate::catalog::config_rewrite;
use crate::error::ProxyError;
use crate::policy::stage::{Refusal, Shape};
use crate::policy::Credentials;
use crate::replays::{iso_duration, Idempotency};
use crate::wire::body::{full, read_to_bytes, stream, Body};
use crate::wire::encoding::decode;
use crate::wire::headers::remove_hop_by_hop;
use crate::wire::host::host_and_port;

/// Largest `/v1/config` answer icecache reads to rewrite; a larger one is a broken catalog.
const MAX_CONFIG_BODY: usize = 1 << 20;

pub async fn serve(
    exchange: Exchange<'_>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ProxyError> {
    let public_url = public_url(&exchange, &request);
    let (parts, body) = request.into_parts();
    let mut sent = origin_request(&exchange, &parts, None)?;
    // The answer is read and maybe rewritten: ask for it uncompressed.
    sent.identity_encoding();
    let idle = exchange.settings.request_timeout;
    let response = exchange.state.origin.send(sent, stream(body, idle)).await?;
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    if parts.status != StatusCode::OK {
        // Any other answer (an error, a redirect) goes through the policy stage as an answer
        // of no known shape: under strip and inject it may hold no secret either.
        let answer = Response::from_parts(parts, stream(body, idle));
        return relay_body(&exchange, answer, Some(Shape::Unknown)).await;
    }
    let raw = read_to_bytes(body, MAX_CONFIG_BODY, idle)
        .await
        .map_err(|e| exchange.state.origin.read_failed(e))?;
    let strips = exchange.policy.credentials != Credentials::Passthrough;
    // Asked for the identity encoding; an answer encoded anyway is decoded to be read.
    let plain = match decode(&mut parts.headers, raw.clone(), MAX_CONFIG_BODY) {
        Ok(plain) => plain,
        Err(_) if !strips => return Ok(Response::from_parts(parts, full(raw))),
        Err(e) => return Err(ProxyError::Refused(exchange.state.stage.refuse(e.into()))),
    };
    let secrets = strips.then(|| exchange.policy.strip.as_ref());
    let answer = config_rewrite::read(&plain, &public_url, secrets);
    if answer.is_none() && strips {
        // Not a JSON object icecache can read: nothing says what a client would read in it.
        let not_an_object = serde_json::Error::custom("/v1/config is not a JSON object");
        let refusal = exchange
            .state
            .stage
            .refuse(Refusal::NotJson(not_an_object.into()));
        return Err(ProxyError::Refused(refusal));
    }
    if let Some(separator) = answer.as_ref().and_then(|a| a.separator.as_ref()) {
        exchange.state.separator.learn(separator);
    }
    if let Some(heads) = answer.as_ref().and_then(|a| a.heads) {
        exchange.state.heads.learn(heads);
    }
    let mut body = answer.and_then(|a| a.rewritten).unwrap_or(plain);
    if exchange.settings.idempotency == Idempotency::Provide {
        let lifetime = iso_duration(exchange.settings.idempotency_key_lifetime);
        if let Some(advertised) = config_rewrite::advertise_lifetime(&body, &lifetime) {
            body = advertised;
        }
    }
    if body != raw {
        // The catalog's validators named the bytes it sent, not these.
        parts.headers.remove(header::ETAG);
    }
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Ok(Response::from_parts(parts, full(body)))
}

/// The URL clients reach icecache at: `public_url` when configured, else what the request says
/// (`X-Forwarded-Proto`/`X-Forwarded-Host` from a proxy in front, then `Host`). A forwarded
/// value that is not a scheme icecache speaks or a plain `host[:port]` (a list, user
/// information, a path) is not taken: `Host` has been checked, those have not.
fn public_url(exchange: &Exchange<'_>, request: &Request<Incoming>) -> String {
    if let Some(url) = &exchange.settings.public_url {
        return url.clone();
    }
    let headers = request.headers();
    // One line, as text: several lines are several proxies' claims, and which to take is a
    // guess.
    let text = |name: &str| {
        let mut lines = headers.get_all(name).iter();
        match (lines.next(), lines.next()) {
            (Some(line), None) => line.to_str().ok(),
            _ => None,
        }
    };
    let proto = text("x-forwarded-proto")
        .and_then(|p| {
            ["http", "https"]
                .into_iter()
                .find(|s| p.eq_ignore_ascii_case(s))
        })
        .unwrap_or(exchange.settings.scheme());
    let host = text("x-forwarded-host")
        .filter(|h| host_and_port(h.as_bytes()))
        .or_else(|| text("host"))
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_else(|| exchange.settings.listen.to_string());
    format!("{proto}://{host}")
}
