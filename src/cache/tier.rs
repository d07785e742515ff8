//! The cache's side of a tier of replicas on Redis: how a lookup is coordinated (its table's
//! tokens, or what to do while Redis is down), and how a fill uses what the other replicas did
//! (an entry they shared, a lease one of them holds) and shares its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use super::entry::{Content, Entry, Gzipped};
use super::fill::{gzip_etag, Fill, FillOutcome, Purpose};
use super::key::CacheKey;
use super::vary::Varies;
use super::Cache;
use crate::cluster::{now_ms, Consistency, Lease, Observed, OnRedisDown, SharedEntry, Tokens};
use crate::telemetry::cluster::Shared;
use crate::wire::encoding::decode;

/// How a lookup may use what this replica holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coordination {
    /// A single process, or a replica on its own freshness (`bounded`, or `local` while Redis
    /// is down).
    Local,
    /// `read-your-writes`, Redis live: an entry is current only while its table's tokens are
    /// these, and a fill in flight is joined only if it was started under them.
    Tokens(Tokens),
    /// Redis is down under `on_redis_down = revalidate`: nothing is served without asking the
    /// catalog, and a fill is joined only before it has asked.
    AskCatalog,
}

impl Coordination {
    pub fn tokens(&self) -> Option<&Tokens> {
        match self {
            Coordination::Tokens(tokens) => Some(tokens),
            _ => None,
        }
    }
}

/// What the tier offers a fill.
pub enum TierFill {
    /// An entry another replica shared: no need to ask the catalog.
    Shared(Arc<Entry>),
    /// This replica holds the lease: it asks, then shares (the identity names the entry).
    Lead(Vec<u8>),
    /// Nothing to share or wait for: ask alone.
    Alone,
}

/// How often a fill waiting for another replica's lease looks for its entry.
const POLL: Duration = Duration::from_millis(10);

impl Cache {
    pub(super) async fn coordinate(&self, key: &CacheKey) -> Coordination {
        let Some(cluster) = &self.cluster else {
            return Coordination::Local;
        };
        let when_down = match cluster.on_redis_down() {
            OnRedisDown::Revalidate => Coordination::AskCatalog,
            OnRedisDown::Local => Coordination::Local,
        };
        if cluster.distrusts_tier() {
            // Redis is away, or a replica that may be answering writes Redis does not hear
            // of has gone quiet.
            return when_down;
        }
        if !cluster.reads_tokens() {
            // Bounded, and hearing every announcement: local freshness.
            return Coordination::Local;
        }
        match Box::pin(cluster.observe(&key.table.loose())).await {
            Observed::Live(tokens) => Coordination::Tokens(tokens),
            Observed::Degraded => when_down,
        }
    }

    /// Whether writes must be refused: this replica has been out of touch with Redis for
    /// `cluster.member_timeout` (or never reached it), so the others would not see them.
    pub fn refuses_writes(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| c.refuses_writes())
    }

    /// Whether this replica may take traffic as far as the tier goes: it has reached Redis
    /// once (a single process always may).
    pub fn joined_tier(&self) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.has_joined())
    }

    /// Leaves the tier's heartbeats (a clean shutdown).
    pub async fn leave_tier(&self) {
        if let Some(cluster) = &self.cluster {
            cluster.leave().await;
        }
    }

    /// What the tier offers a fill, once it has the table's tokens (read now under `bounded`).
    pub(super) async fn tier_fill(&self, fill: &mut Fill) -> Option<TierFill> {
        let cluster = self.cluster.as_ref()?;
        let key = fill.key.clone().filter(|_| fill.purpose == Purpose::Fill)?;
        if cluster.distrusts_tier() {
            // A replica gone quiet may have answered writes Redis's tokens do not show: an
            // entry shared under them may be older than such a write.
            return Some(TierFill::Alone);
        }
        if fill.remote.is_none() && cluster.consistency() == Consistency::Bounded {
            if let Observed::Live(tokens) = cluster.observe(&key.table.loose()).await {
                fill.remote = Some(tokens);
            }
        }
        let Some(tokens) = fill.remote.clone() else {
            return Some(TierFill::Alone);
        };
        let identity = key.identity(fill.policy.generation);
        if let Some(entry) = self.read_shared(fill, &identity, &tokens).await {
            return Some(TierFill::Shared(entry));
        }
        match cluster.lease(&identity).await {
            Lease::Won => return Some(TierFill::Lead(identity)),
            Lease::Unavailable => return Some(TierFill::Alone),
            Lease::Held => {}
        }
        // Another replica is asking: wait for its entry, at most the lease (whatever holds the
        // key: a replica that died, or a key nobody will release), then ask alone. A lease given
        // back without an entry (an answer not to share) also means asking alone: taking the
        // lease in turn would line the replicas up behind each other.
        let since = Instant::now();
        let deadline = since + cluster.lease_for();
        loop {
            tokio::time::sleep(POLL).await;
            if let Some(entry) = self.read_shared(fill, &identity, &tokens).await {
                self.lease_waited(since);
                return Some(TierFill::Shared(entry));
            }
            if Instant::now() >= deadline || !cluster.lease_held(&identity).await {
                // The holder shares before it gives the lease back: an entry stored between
                // the read above and the release is there now.
                self.lease_waited(since);
                if let Some(entry) = self.read_shared(fill, &identity, &tokens).await {
                    return Some(TierFill::Shared(entry));
                }
                return Some(TierFill::Alone);
            }
        }
    }

    fn lease_waited(&self, since: Instant) {
        if let Some(cluster) = &self.cluster {
            cluster
                .metrics()
                .lease_waited(since.elapsed().as_secs_f64());
        }
    }

    /// Shares what the fill got (when it may be shared) and gives the lease back.
    pub(super) async fn after_lead(&self, fill: &Fill, identity: &[u8], outcome: &FillOutcome) {
        let Some(cluster) = &self.cluster else { return };
        if let FillOutcome::Entry(entry) = outcome {
            let current = entry.ticket.is_current() && entry.remote == fill.remote;
            if entry.content.shareable && current {
                cluster
                    .share(identity, &shared_of(entry), self.retain_for)
                    .await;
            } else {
                cluster.metrics().shared(Shared::KeptLocal);
            }
        }
        cluster.release(identity).await;
    }

    /// The largest body (as shared: its gzip copy when it has one) the tier takes.
    pub(super) fn shared_cap(&self) -> u64 {
        self.cluster.as_ref().map_or(0, |c| c.max_shared_bytes())
    }

    async fn read_shared(
        &self,
        fill: &Fill,
        identity: &[u8],
        tokens: &Tokens,
    ) -> Option<Arc<Entry>> {
        let cluster = self.cluster.as_ref()?;
        let shared = cluster.shared(identity, tokens).await?;
        let ticket = fill.ticket.clone()?;
        let entry = entry_of(shared, fill.policy.generation, ticket, tokens.clone()).await;
        if entry.is_none() {
            cluster.metrics().shared(Shared::Rejected);
        }
        entry.map(Arc::new)
    }
}

/// An entry as the tier shares it: its gzip copy when it has one (smaller, and the other
/// replicas need it anyway), its times on the wall clock.
fn shared_of(entry: &Entry) -> SharedEntry {
    let content = &entry.content;
    let now = Instant::now();
    let wall = now_ms();
    let (body, gzipped) = match &content.gzip {
        Some(gzip) => (gzip.body.clone(), true),
        None => (content.body.clone(), false),
    };
    SharedEntry {
        body,
        gzipped,
        config_empty: content.config_empty,
        headers: content
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        etag: content.etag.as_bytes().to_vec(),
        upstream_etag: content
            .upstream_etag
            .as_ref()
            .map(|e| e.as_bytes().to_vec()),
        length: u64::try_from(content.length).unwrap_or(u64::MAX),
        vary: content.vary.to_parts(),
        stored_at_ms: wall.saturating_sub(millis(entry.age(now))),
        servable_until_ms: entry
            .servable_until
            .map(|until| wall + millis(until.saturating_duration_since(now))),
        tokens: entry.remote.as_ref().map_or_else(Vec::new, |t| t.0.clone()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A shared entry made local; None when it does not read back (a body that does not decode,
/// a header that is not one).
async fn entry_of(
    shared: SharedEntry,
    policy_generation: u64,
    ticket: super::entry::FillTicket,
    tokens: Tokens,
) -> Option<Entry> {
    let etag = HeaderValue::from_bytes(&shared.etag).ok()?;
    let (body, gzip) = if shared.gzipped {
        let compressed = shared.body.clone();
        let plain = tokio::task::spawn_blocking(move || {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::CONTENT_ENCODING,
                HeaderValue::from_static("gzip"),
            );
            decode(&mut headers, compressed, usize::MAX >> 1)
        })
        .await
        .ok()?
        .ok()?;
        let gzip = Gzipped {
            etag: gzip_etag(&etag),
            body: shared.body,
        };
        (plain, Some(gzip))
    } else {
        (Bytes::copy_from_slice(&shared.body), None)
    };
    let mut headers = HeaderMap::with_capacity(shared.headers.len());
    for (name, value) in &shared.headers {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).ok()?,
            HeaderValue::from_bytes(value).ok()?,
        );
    }
    let upstream_etag = match &shared.upstream_etag {
        Some(tag) => Some(HeaderValue::from_bytes(tag).ok()?),
        None => None,
    };
    let now = Instant::now();
    let wall = now_ms();
    let age = Duration::from_millis(wall.saturating_sub(shared.stored_at_ms));
    let content = Arc::new(Content {
        id: Content::next_id(),
        body,
        config_empty: shared.config_empty,
        gzip,
        headers,
        etag,
        upstream_etag,
        length: usize::try_from(shared.length).ok()?,
        vary: Varies::from_parts(&shared.vary),
        shareable: true,
    });
    let mut entry = Entry::new(
        content,
        now.checked_sub(age).unwrap_or(now),
        shared
            .servable_until_ms
            .map(|until| now + Duration::from_millis(until.saturating_sub(wall))),
        policy_generation,
        ticket,
        Some(tokens),
    );
    entry.from_tier = true;
    Some(entry)
}
