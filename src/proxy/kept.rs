//! The catalog's answer to a request that holds an `Idempotency-Key` under `provide`: read
//! whole, kept for replays when it is final, and handed on as read. This runs in the request's
//! own task beside the catalog exchange, so a client that gives up does not stop its answer
//! from being kept (its retry then gets it).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::Response;
use hyper::body::Incoming;

use crate::cache::POLICY_READ_LIMIT;
use crate::error::ProxyError;
use crate::origin::{Origin, OriginError};
use crate::policy::KeyPatterns;
use crate::replays::{Held, Kept};
use crate::telemetry::replays::{ReplayMetrics, ReplayOutcome};
use crate::wire::body::{full, read_to_bytes, Body};
use crate::wire::encoding::decode;
use crate::wire::headers::remove_hop_by_hop;
use crate::wire::json_walk::without_named;

/// What keeping an answer needs, moved into the request's task.
pub struct Keeping {
    pub held: Held,
    pub origin: Arc<Origin>,
    pub idle: Duration,
    /// The largest answer kept (a larger one leaves no record: its retry reaches the catalog).
    pub max_bytes: usize,
    /// Removed from what a shared store keeps (Redis never holds a secret).
    pub secrets: Arc<KeyPatterns>,
    pub shared: bool,
    pub metrics: Arc<ReplayMetrics>,
}

impl Keeping {
    /// Keeps the catalog's answer when it is final, and returns it for the client. No answer
    /// (or one that broke off) keeps nothing: the key is given back.
    pub async fn settle(
        self,
        answer: Result<Response<Incoming>, OriginError>,
    ) -> Result<Response<Body>, ProxyError> {
        let response = match answer {
            Ok(response) => response,
            Err(e) => {
                self.metrics.count(ReplayOutcome::Unkept);
                return Err(e.into());
            }
        };
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        let bytes = read_to_bytes(body, POLICY_READ_LIMIT, self.idle)
            .await
            .map_err(|e| {
                self.metrics.count(ReplayOutcome::Unkept);
                ProxyError::Origin(self.origin.read_failed(e))
            })?;
        let mut kept_headers = parts.headers.clone();
        // A replay is dated when it is sent (hyper adds `Date`), not when the catalog answered.
        kept_headers.remove(header::DATE);
        if self.shared {
            without_secret_headers(&mut kept_headers, &self.secrets);
        }
        let kept_body = decode(&mut kept_headers, bytes.clone(), POLICY_READ_LIMIT)
            .ok()
            .and_then(|plain| self.storable(plain));
        match kept_body {
            Some(body) if body.len() <= self.max_bytes => {
                kept_headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                let kept = Kept {
                    status: parts.status,
                    headers: kept_headers,
                    body,
                };
                let outcome = if crate::replays::finalises(kept.status) {
                    ReplayOutcome::Kept
                } else {
                    ReplayOutcome::Unkept
                };
                self.metrics.count(outcome);
                self.held.settle(kept, self.max_bytes).await;
            }
            // Unreadable, too large, or not safe to share: the key is given back.
            _ => self.metrics.count(ReplayOutcome::Unkept),
        }
        Ok(Response::from_parts(parts, full(bytes)))
    }

    /// The body as the store may hold it: as it is in this process; without any member named
    /// like a secret in a shared store (a body that cannot be walked is not kept there).
    fn storable(&self, plain: Bytes) -> Option<Bytes> {
        if !self.shared || plain.is_empty() {
            return Some(plain);
        }
        let walked = without_named(&plain, |name| self.secrets.matches(name)).ok()?;
        Some(Bytes::from(walked.text.into_owned()))
    }
}

/// A shared store keeps no cookie and no header named like a secret (a replay from it may lack
/// one; the caller who needs it retries with a new key).
fn without_secret_headers(headers: &mut http::HeaderMap, secrets: &KeyPatterns) {
    crate::policy::headers::without_secret_headers(headers, secrets);
    headers.remove(header::SET_COOKIE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_record_keeps_no_cookie_and_no_header_named_like_a_secret() {
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("set-cookie", "session=s"),
            ("password", "p"),
            ("token", "t"),
            ("content-type", "application/json"),
            ("x-request-id", "r"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        without_secret_headers(&mut headers, &KeyPatterns::default());
        let mut left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-type", "x-request-id"]);
    }
}
