//! Under identity `revalidate`: checking a caller upstream with its own credentials before it
//! may have a shared entry.

use super::fetch::{is_cacheable, BodyError};
use super::*;

impl TableCache {
    /// Asks the catalog, with the caller's own credentials, whether the caller may have the
    /// entry's version: a 304 (or an identical body) confirms it; a refusal goes back as is.
    pub(super) async fn authorize(self: &Arc<Self>, ask: &Ask<'_>, entry: &Arc<Entry>) -> Lookup {
        let (key, caller) = (&ask.key, ask.caller);
        let result = |label: &str| {
            self.metrics
                .authz_revalidations
                .with_label_values(&[label])
                .inc()
        };
        let request = match (ask.make_request)() {
            Ok(request) => request,
            Err(e) => return Lookup::Answer(upstream_error(&e), CacheOutcome::Revalidated),
        };
        let response = match self.send_get(request, entry.upstream_etag.clone()).await {
            Ok(response) => response,
            Err(e) => {
                result("error");
                return Lookup::Answer(upstream_error(&e), CacheOutcome::Revalidated);
            }
        };
        let label = CacheOutcome::Revalidated;
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        if parts.status == StatusCode::NOT_MODIFIED && entry.upstream_etag.is_some() {
            result("allowed");
            entry.confirm(caller.scope, Instant::now() + self.live.get().authz_ttl);
            return Lookup::Answer(self.serve(entry, label, caller), label);
        }
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => return Lookup::PassThrough,
            Err(BodyError::Upstream(e)) => {
                result("error");
                return Lookup::Answer(upstream_error(&e), label);
            }
        };
        if parts.status == StatusCode::OK && is_cacheable(parts.status, &parts.headers) {
            let same = self
                .prepare(key.snapshots.as_str(), &body, caller.policy)
                .is_some_and(|prepared| prepared.etag == entry.etag);
            if same {
                result("allowed");
                entry.confirm(caller.scope, Instant::now() + self.live.get().authz_ttl);
                return Lookup::Answer(self.serve(entry, label, caller), label);
            }
            // The table moved on since the entry was filled: refill it with this caller's
            // credentials (once; a table changing that fast is passed through).
            result("changed");
            self.store.remove(key);
            if ask.may_refill {
                let refill = Ask {
                    key: key.clone(),
                    may_refill: false,
                    ..*ask
                };
                return Box::pin(self.load_once(&refill)).await;
            }
            return Lookup::PassThrough;
        }
        result(if parts.status.is_client_error() {
            "denied"
        } else {
            "error"
        });
        let buffered = Buffered {
            status: parts.status,
            headers: parts.headers,
            body,
        };
        Lookup::Answer(buffered.response(label), label)
    }
}
