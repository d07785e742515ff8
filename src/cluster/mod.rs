//! Several replicas as one cache, coordinated through Redis (no protocol of icecache's own).
//!
//! - **Leases keep memory current.** Each replica serves from memory only while its lease,
//!   renewed by its heartbeat, holds; a write publishes its invalidation and answers once every
//!   replica acknowledged it or its lease certainly ran out (`lease`, the rules in `trust`).
//!   A hit asks Redis nothing.
//! - **Tokens keep shared entries current.** Each table has a version in Redis (with its
//!   namespaces', the epoch's and the lease log's dataset); a write moves the versions of what it
//!   touched before it publishes, and a miss reads them in a shared round (`barrier`) before it
//!   takes an entry another replica shared.
//! - **One catalog fetch per version.** The policy-processed, secret-free body is shared
//!   through Redis (`shared`), and a cold fill takes a fill lease so the other replicas wait for
//!   it rather than asking too; a fill lease whose holder died expires.
//! - **Never a single point of failure.** A failed command makes the replica degraded
//!   (`health`); loads then ask the catalog (`revalidate`) or use local freshness (`local`),
//!   and writes are refused before the catalog (the others could not be told of them), or
//!   answered as of unknown outcome when Redis went away while the catalog made them.

mod announce;
mod barrier;
mod health;
mod lease;
mod names;
mod redis_parts;
mod replays;
pub mod settings;
mod shared;
mod subscription;
pub mod trust;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

pub use settings::{ClusterSettings, OnRedisDown};
pub use shared::SharedEntry;

use crate::catalog::names::LooseName;
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::coordination::Cover;
use crate::coordination::Tokens;
use crate::telemetry::cluster::{RoundTrip, Shared};
use crate::telemetry::ClusterMetrics;
pub use announce::Invalidation;
use announce::Message;
use barrier::{Pending, Rounds};
use health::Health;
use names::Names;
use redis_parts::{client, random_token};
use shared::Rejected;
use subscription::Subscriber;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("cluster.redis_url does not name a Redis: {0}")]
    Url(#[source] redis::RedisError),
}

/// What a lookup learned of its table's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Live(Tokens),
    /// Redis cannot be reached: nothing shared can be trusted.
    Degraded,
}

/// Whether this replica may ask the catalog for a table on the tier's behalf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// It holds the lease: it asks, then shares or releases.
    Won,
    /// Another replica holds it.
    Held,
    /// Redis cannot be reached: every replica asks for itself.
    Unavailable,
}

pub struct Cluster {
    settings: ClusterSettings,
    names: Arc<Names>,
    mac_key: [u8; 32],
    connection: ConnectionManager,
    health: Arc<Health>,
    rounds: mpsc::UnboundedSender<Pending>,
    /// This process, in messages and leases.
    replica: String,
    metrics: Arc<ClusterMetrics>,
    invalidations: Mutex<Option<mpsc::UnboundedReceiver<Invalidation>>>,
    /// This replica's lease and the writes waiting on it.
    leases: Arc<lease::Leases>,
    release: redis::Script,
    replay_claim: redis::Script,
    replay_finish: redis::Script,
}

/// Deletes the lease only when this replica still holds it.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                       return redis.call('del', KEYS[1]) else return 0 end";

impl Cluster {
    /// Connects (lazily: a Redis that is down only makes the replica start degraded) and
    /// starts the rounds, the health check and the subscription on the current runtime.
    pub fn start(
        settings: ClusterSettings,
        metrics: Arc<ClusterMetrics>,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.redis_timeout))
            .set_connection_timeout(Some(settings.redis_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_lazy_with_config(
            client(&settings.redis_url.0).map_err(ClusterError::Url)?,
            config,
        )
        .map_err(ClusterError::Url)?;
        let names = Arc::new(Names::new(
            &settings.key_prefix,
            settings.key.subkey("names"),
        ));
        let health = Arc::new(Health::new());
        metrics.started();
        let (rounds, pending) = mpsc::unbounded_channel();
        tokio::spawn(
            Rounds {
                connection: connection.clone(),
                health: health.clone(),
                metrics: metrics.clone(),
                interval: settings.barrier_interval,
                timeout: settings.redis_timeout,
            }
            .run(pending),
        );
        let replica = format!("{:016x}", random_token());
        let (invalidate, invalidations) = mpsc::unbounded_channel();
        let leases = Arc::new(lease::Leases::new(
            &names,
            settings.redis_timeout,
            &replica,
            connection.clone(),
            health.clone(),
            metrics.clone(),
        ));
        tokio::spawn(leases.clone().renew());
        let cluster = Arc::new(Cluster {
            mac_key: settings.key.subkey("shared entries"),
            settings,
            names,
            connection,
            health,
            rounds,
            replica,
            metrics,
            invalidations: Mutex::new(Some(invalidations)),
            leases,
            release: redis::Script::new(RELEASE),
            replay_claim: redis::Script::new(replays::CLAIM),
            replay_finish: redis::Script::new(replays::FINISH),
        });
        tokio::spawn(
            Subscriber {
                url: cluster.settings.redis_url.0.clone(),
                timeout: cluster.settings.redis_timeout,
                channel: cluster.names.channel(),
                beat_channel: cluster.names.beat_channel(&cluster.replica),
                replica: cluster.replica.clone(),
                listening: subscription::Listening::default(),
                health: cluster.health.clone(),
                metrics: cluster.metrics.clone(),
                invalidate,
                leases: cluster.leases.clone(),
            }
            .run(),
        );
        Ok(cluster)
    }

    pub fn on_redis_down(&self) -> OnRedisDown {
        self.settings.on_redis_down
    }

    pub fn max_shared_bytes(&self) -> u64 {
        self.settings.max_shared_bytes
    }

    pub fn lease_for(&self) -> Duration {
        self.settings.lease
    }

    pub fn is_degraded(&self) -> bool {
        self.health.is_degraded()
    }

    /// What other replicas announced, for the cache to invalidate locally (taken once).
    pub fn invalidations(&self) -> Option<mpsc::UnboundedReceiver<Invalidation>> {
        self.invalidations.lock().ok()?.take()
    }

    /// What an entry must have been filled under to be served now, or None while the lease
    /// does not hold.
    pub fn lease_tokens(&self) -> Option<Tokens> {
        self.leases.tokens()
    }

    /// The dataset of the invalidation log this replica has applied.
    pub fn lease_dataset(&self) -> Option<u64> {
        self.leases.dataset()
    }

    /// The current tokens of `table`, read in a round that starts after this call.
    pub async fn observe(&self, table: &LooseName) -> Observed {
        if self.health.is_degraded() {
            return Observed::Degraded;
        }
        let (answer, read) = oneshot::channel();
        let pending = Pending {
            keys: self.names.tokens(table),
            answer,
        };
        if self.rounds.send(pending).is_err() {
            return Observed::Degraded;
        }
        match read.await {
            Ok(Some(tokens)) => Observed::Live(tokens),
            _ => Observed::Degraded,
        }
    }

    /// Moves the tokens of what a write touched, then publishes its invalidation and waits
    /// until every other replica acknowledged it or its lease ran out (`lease`). A write whose
    /// tokens could not be moved or whose invalidation could not be published within
    /// `lease::PUBLISH_PATIENCE` is `Cover::Lost`: a load elsewhere may still find an entry from
    /// before it.
    pub async fn announce(&self, touched: &Touched) -> Cover {
        let mut pipe = redis::pipe();
        let mut replace = |key: String| {
            pipe.cmd("SET")
                .arg(key)
                .arg(random_token().to_string())
                .ignore();
        };
        match touched {
            Touched::Tables(tables) => {
                for table in tables {
                    replace(self.names.table(table));
                }
            }
            Touched::Namespace(namespace) => replace(self.names.namespace(namespace)),
            Touched::Everything => replace(self.names.epoch()),
            Touched::Nothing => return Cover::Announced,
        }
        // Replicas of versions before leases read these announcements (during a rolling
        // upgrade); this version hears them too and drops what they touched.
        let message = serde_json::to_string(&Message::new(&self.replica, now_ms(), touched))
            .unwrap_or_default();
        pipe.cmd("PUBLISH")
            .arg(self.names.channel())
            .arg(message)
            .ignore();
        // A shared entry is checked against the tokens: they move before the invalidation is
        // published.
        let started = tokio::time::Instant::now();
        let cover = self.leases.publish(touched, pipe, started).await;
        match cover {
            Cover::Announced => self.metrics.published(),
            Cover::Lost => self.metrics.unannounced(),
        }
        cover
    }

    /// A replica that cannot reach Redis (or never has) refuses writes before they reach the
    /// catalog: it could not tell the others, and a write refused is one whose outcome is known.
    /// Counts each write it refuses.
    pub fn refuses_writes(&self) -> bool {
        let refuses = self.health.is_degraded();
        if refuses {
            self.metrics.write_refused();
        }
        refuses
    }

    /// Whether this replica has reached Redis at least once (readiness).
    pub fn has_joined(&self) -> bool {
        self.health.has_joined()
    }

    /// Takes this replica out of the lease members (a clean shutdown: writes need not wait
    /// out its lease).
    pub async fn leave(&self) {
        self.leases.leave().await;
    }

    /// The entry the tier shares under `identity`, if it is authentic and current.
    pub async fn shared(&self, identity: &[u8], tokens: &Tokens) -> Option<SharedEntry> {
        if self.health.is_degraded() {
            return None;
        }
        let name = self.names.shared(identity);
        let mut get = redis::cmd("GET");
        get.arg(&name);
        let value = self
            .round_trip(
                RoundTrip::SharedGet,
                "reading a shared entry failed",
                |mut c| async move { get.query_async::<Option<Vec<u8>>>(&mut c).await },
            )
            .await?;
        let Some(value) = value else {
            self.metrics.shared(Shared::Miss);
            return None;
        };
        match SharedEntry::decode(&self.mac_key, &name, &value, &tokens.0) {
            Ok(entry) => {
                self.metrics.shared(Shared::Hit);
                Some(entry)
            }
            Err(Rejected::Stale) => {
                self.metrics.shared(Shared::Stale);
                None
            }
            Err(Rejected::Tampered) => {
                tracing::warn!("a shared entry in Redis failed its check; ignored");
                self.metrics.shared(Shared::Rejected);
                None
            }
        }
    }

    /// Shares an entry with the tier for `ttl`.
    pub async fn share(&self, identity: &[u8], entry: &SharedEntry, ttl: Duration) {
        if self.health.is_degraded() {
            return;
        }
        let name = self.names.shared(identity);
        let value = entry.encode(&self.mac_key, &name);
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut set = redis::cmd("SET");
        set.arg(&name).arg(value).arg("PX").arg(millis);
        let stored = self
            .round_trip(
                RoundTrip::SharedPut,
                "sharing an entry failed",
                |mut c| async move { set.query_async::<()>(&mut c).await },
            )
            .await;
        if stored.is_some() {
            self.metrics.shared(Shared::Stored);
        }
    }

    /// Takes the lease on filling `identity` for the tier.
    pub async fn lease(&self, identity: &[u8]) -> Lease {
        if self.health.is_degraded() {
            return Lease::Unavailable;
        }
        let millis = u64::try_from(self.settings.lease.as_millis()).unwrap_or(u64::MAX);
        let name = self.names.lease(identity);
        // A lease key without an expiry (a PERSIST, a restore) would hold every fill of this
        // entry back forever: give it the lease's.
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&name)
            .arg(&self.replica)
            .arg("NX")
            .arg("PX")
            .arg(millis)
            .cmd("PEXPIRE")
            .arg(&name)
            .arg(millis)
            .arg("NX")
            .ignore();
        let taken = self
            .round_trip(
                RoundTrip::Lease,
                "taking a lease failed",
                |mut c| async move { pipe.query_async::<(Option<String>,)>(&mut c).await },
            )
            .await;
        match taken {
            Some((Some(_),)) => Lease::Won,
            Some((None,)) => Lease::Held,
            None => Lease::Unavailable,
        }
    }

    /// Gives the lease back (when this replica still holds it).
    pub async fn release(&self, identity: &[u8]) {
        if self.health.is_degraded() {
            return;
        }
        let mut invocation = self.release.key(self.names.lease(identity));
        invocation.arg(&self.replica);
        self.round_trip(
            RoundTrip::Release,
            "releasing a lease failed",
            |mut c| async move { invocation.invoke_async::<i64>(&mut c).await },
        )
        .await;
    }

    /// A sub-key of the cluster key for one use.
    pub fn subkey(&self, purpose: &str) -> [u8; 32] {
        self.settings.key.subkey(purpose)
    }

    /// One Redis round trip, counted under `kind` and bounded by `redis_timeout`. A failure or
    /// a timeout marks Redis down (`failing` says what failed) and answers None.
    async fn round_trip<T, F>(
        &self,
        kind: RoundTrip,
        failing: &'static str,
        ask: impl FnOnce(ConnectionManager) -> F,
    ) -> Option<T>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.metrics.round_trip(kind);
        let answer =
            tokio::time::timeout(self.settings.redis_timeout, ask(self.connection.clone())).await;
        match answer {
            Ok(Ok(value)) => Some(value),
            _ => {
                self.health.down(&self.metrics, failing);
                None
            }
        }
    }

    /// The tier's counters (the cache's side of the tier counts its lease waits and what it
    /// keeps local there).
    pub fn metrics(&self) -> &ClusterMetrics {
        &self.metrics
    }

    /// Whether another replica still holds the lease on `identity`.
    pub async fn lease_held(&self, identity: &[u8]) -> bool {
        if self.health.is_degraded() {
            return false;
        }
        let mut connection = self.connection.clone();
        self.metrics.round_trip(RoundTrip::LeaseCheck);
        let held = tokio::time::timeout(
            self.settings.redis_timeout,
            redis::cmd("EXISTS")
                .arg(self.names.lease(identity))
                .query_async::<i64>(&mut connection),
        )
        .await;
        matches!(held, Ok(Ok(1)))
    }
}
