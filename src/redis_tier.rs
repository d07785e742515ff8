//! The cache's tier on Redis, where the cache (which knows no Redis) meets the cluster (which
//! knows no cache): how a lookup is coordinated (its table's tokens, or what to do
//! while Redis is down), how a fill uses what the other replicas did (an entry they shared, a
//! lease one of them holds), and how an entry travels as a `SharedEntry`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::cache::tier::{Coordination, FillLease, Share, Tier, TierAsk, TierFill};
use crate::cache::{Content, Entry, FillTicket, Gzipped, Varies};
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::cluster::{Cluster, Lease, Observed, OnRedisDown, SharedEntry};
use crate::coordination::{Cover, Tokens};
use crate::telemetry::cluster::Shared;
use crate::wire::encoding::decode;

/// How often a fill waiting for another replica's lease looks for its entry.
const POLL: Duration = Duration::from_millis(10);

/// One replica of a tier whose other replicas it reaches through Redis.
pub struct RedisTier {
    cluster: Arc<Cluster>,
    /// How long a shared entry is kept in Redis: as long as any replica may use it.
    retain_for: Duration,
}

impl RedisTier {
    pub fn new(cluster: Arc<Cluster>, retain_for: Duration) -> RedisTier {
        RedisTier {
            cluster,
            retain_for,
        }
    }

    fn when_down(&self) -> Coordination {
        match self.cluster.on_redis_down() {
            OnRedisDown::Revalidate => Coordination::AskCatalog,
            OnRedisDown::Local => Coordination::Local,
        }
    }

    /// The tokens a fill checks shared entries against and shares under, with the tokens its
    /// entry is kept under here; None when nothing shared may be used.
    async fn shared_tokens(&self, ask: &TierAsk<'_>) -> Option<(Tokens, Tokens)> {
        // Held entries are current by this replica's lease; a shared one by the table's tokens
        // in Redis, which every write moves before it publishes its invalidation. A miss reads
        // them (one round trip); the entry is kept under the lease. The log's dataset goes with
        // them: Redis losing writes (token moves among them) starts a new one, and entries
        // shared before no longer match.
        let cluster = &self.cluster;
        let local = ask.tokens.clone()?;
        let dataset = cluster.lease_dataset()?;
        match cluster.observe(&ask.key.table.loose()).await {
            Observed::Live(mut tokens) => {
                tokens.0.push(dataset);
                Some((tokens, local))
            }
            Observed::Degraded => None,
        }
    }

    async fn offer_to(&self, ask: &TierAsk<'_>) -> TierFill {
        let cluster = &self.cluster;
        let Some((tokens, local)) = self.shared_tokens(ask).await else {
            return TierFill::Alone;
        };
        let identity = ask.key.identity(ask.policy_generation);
        let shared = || self.read_shared(ask, &identity, &tokens, local.clone());
        if let Some(entry) = shared().await {
            return TierFill::Shared(entry);
        }
        match cluster.lease(&identity).await {
            Lease::Won => {
                return TierFill::Lead(FillLease {
                    identity: identity.clone(),
                    tokens: tokens.clone(),
                })
            }
            Lease::Unavailable => return TierFill::Alone,
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
            if let Some(entry) = shared().await {
                self.lease_waited(since);
                return TierFill::Shared(entry);
            }
            if Instant::now() >= deadline || !cluster.lease_held(&identity).await {
                // The holder shares before it gives the lease back: an entry stored between
                // the read above and the release is there now.
                self.lease_waited(since);
                if let Some(entry) = shared().await {
                    return TierFill::Shared(entry);
                }
                return TierFill::Alone;
            }
        }
    }

    fn lease_waited(&self, since: Instant) {
        self.cluster
            .metrics()
            .lease_waited(since.elapsed().as_secs_f64());
    }

    /// The entry another replica shared under `tokens`, kept here under `local`.
    async fn read_shared(
        &self,
        ask: &TierAsk<'_>,
        identity: &[u8],
        tokens: &Tokens,
        local: Tokens,
    ) -> Option<Arc<Entry>> {
        let shared = self.cluster.shared(identity, tokens).await?;
        let entry = entry_of(shared, ask.policy_generation, ask.ticket.clone(), local).await;
        if entry.is_none() {
            self.cluster.metrics().shared(Shared::Rejected);
        }
        entry.map(Arc::new)
    }

    async fn release_lease(&self, lease: &FillLease, share: Share<'_>) {
        match share {
            Share::Entry(entry) => {
                let shared = shared_of(entry, &lease.tokens);
                self.cluster
                    .share(&lease.identity, &shared, self.retain_for)
                    .await
            }
            Share::KeptLocal => self.cluster.metrics().shared(Shared::KeptLocal),
            Share::Nothing => {}
        }
        self.cluster.release(&lease.identity).await;
    }
}

impl Tier for RedisTier {
    fn coordinate(&self) -> Coordination {
        // No round trip: the lease says whether memory may be trusted, and its generation
        // whether an entry was filled since everything was last dropped.
        match self.cluster.lease_tokens() {
            Some(tokens) => Coordination::Tokens(tokens),
            None => self.when_down(),
        }
    }

    fn trusted(&self) -> bool {
        self.cluster.lease_tokens().is_some()
    }

    fn offer<'a>(&'a self, ask: &'a TierAsk<'_>) -> BoxFuture<'a, TierFill> {
        Box::pin(self.offer_to(ask))
    }

    fn release<'a>(&'a self, lease: &'a FillLease, share: Share<'a>) -> BoxFuture<'a, ()> {
        Box::pin(self.release_lease(lease, share))
    }

    fn shared_cap(&self) -> u64 {
        self.cluster.max_shared_bytes()
    }

    fn announce<'a>(&'a self, touched: &'a Touched) -> BoxFuture<'a, Cover> {
        Box::pin(self.cluster.announce(touched))
    }

    fn refuses_writes(&self) -> bool {
        self.cluster.refuses_writes()
    }

    fn joined(&self) -> bool {
        self.cluster.has_joined()
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.cluster.leave())
    }
}

/// An entry as the tier shares it under `tokens`: its gzip copy when it has one (smaller, and
/// the other replicas need it anyway), its times on the wall clock.
fn shared_of(entry: &Entry, tokens: &Tokens) -> SharedEntry {
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
        tokens: tokens.0.to_vec(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A shared entry made local, current here while the lookup's tokens are `tokens`; None when
/// it does not read back (a body that does not decode, a header that is not one).
async fn entry_of(
    shared: SharedEntry,
    policy_generation: u64,
    ticket: FillTicket,
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
            etag: Gzipped::etag_of(&etag),
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
        heads: Default::default(),
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
