//! Whether this replica may trust Redis, and the tier's heartbeat.
//!
//! Every replica writes a heartbeat to Redis four times a second: until when (on Redis's
//! clock) it is known to be live. The heartbeat is a write, so a Redis that refuses writes (out
//! of memory, an ACL change) makes every replica degraded, not only the one that wrote last.
//! A replica whose heartbeat lapsed may be answering writes it cannot tell Redis of (a network
//! partition between it and Redis alone): while any has lapsed, the others distrust what they
//! hold and ask the catalog. A replica that answered a write Redis was not told of is dirty: its
//! next heartbeat moves the epoch (so no older entry anywhere looks current) and announces it.
//! A lapsed replica is forgotten after `member_timeout`, and forgetting it moves the epoch: a
//! write it answered before then is seen everywhere once it is forgotten. A replica out of touch
//! that long refuses writes, since the others no longer wait for it, and a write whose answer
//! comes after that point is `Cover::Lost`: it may have reached the catalog after the others
//! forgot this replica.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::announce::Message;
use super::members::Members;
use super::names::Names;
use super::redis_parts::random_token;
use super::settings::ClusterSettings;
use crate::catalog::writes::Touched;
use crate::clock::now_ms;
use crate::coordination::Cover;
use crate::telemetry::cluster::RoundTrip;
use crate::telemetry::ClusterMetrics;

/// How often a replica beats (and, while degraded, tries Redis again).
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// How long after a heartbeat Redis holds the replica live.
const MEMBER_LEASE: Duration = Duration::from_secs(1);
/// The largest clock value taken as one: far beyond what four ticks a second reach, and well
/// within what the heartbeat script's numbers (doubles, printed with 14 digits) hold exactly.
const MAX_CLOCK: u64 = 1 << 40;
/// Scheduling slack on top of the times a write waits to be covered.
const SLACK: Duration = Duration::from_millis(50);
/// How often a replica that keeps failing says so in its log.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// One heartbeat, unless it arrives after the time (on Redis's clock) by which it was due: then
/// it changes nothing. A heartbeat the network held (a partition that heals, TCP resending)
/// would otherwise renew the lease of a replica that took it as lost and, out of touch, answers
/// writes nobody hears of, counting on its lease having lapsed. Otherwise: tick this replica's
/// clock; when it is behind what this replica saw (Redis lost writes) or unreadable, set it
/// past that and count it; move the epoch first when dirty or behind, and announce it; then
/// renew this replica's lease, prove the subscription on its own channel, and count (and
/// forget) the replicas whose leases lapsed, listing the others with what is left of their
/// leases. Forgetting one (or, when asked, an orphan: see `members`) moves the epoch, announced
/// as from the tier (every replica, this one too, drops what it holds): the forgotten one may
/// have answered writes nobody heard of, and from now on nobody distrusts the tier on its
/// account.
/// A command Redis refuses stops the script before
/// the lease is renewed: a replica that cannot move the epoch cannot look live.
const BEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[12] ~= '' and now > tonumber(ARGV[12]) then
  return {-1, 0, 0, 0, -1, now, {}}
end
local seen = tonumber(ARGV[8])
local clock = redis.pcall('INCR', KEYS[3])
local behind = 0
if type(clock) ~= 'number' or clock <= seen or clock > tonumber(ARGV[10]) then
  clock = seen + 1
  redis.call('SET', KEYS[3], string.format('%d', clock))
  behind = 1
end
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3]) * 2)
local moved = 0
if ARGV[4] == '1' or behind == 1 then
  redis.call('SET', KEYS[2], ARGV[9])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  moved = 1
end
redis.call('HSET', KEYS[1], ARGV[1], now + tonumber(ARGV[2]))
redis.call('PUBLISH', ARGV[7], ARGV[11])
local lapsed = 0
local forgot = 0
local left = -1
local others = {}
local members = redis.call('HGETALL', KEYS[1])
for i = 1, #members, 2 do
  local live_until = tonumber(members[i + 1])
  if live_until == nil or live_until <= now - tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], members[i])
    forgot = forgot + 1
  elseif members[i] ~= ARGV[1] then
    table.insert(others, members[i])
    table.insert(others, live_until - now)
    if live_until <= now then
      lapsed = lapsed + 1
    elseif left < 0 or live_until - now < left then
      left = live_until - now
    end
  end
end
if forgot > 0 or ARGV[14] == '1' then
  redis.call('SET', KEYS[2], ARGV[9])
  redis.call('PUBLISH', ARGV[5], ARGV[13])
  moved = 1
end
return {lapsed, clock, moved, behind, left, now, others}
";

pub struct Health {
    degraded: AtomicBool,
    /// A write was answered that Redis was not told of.
    dirty: AtomicBool,
    /// Another replica's heartbeat lapsed.
    suspect: AtomicBool,
    /// The others as last seen, and those Redis lost track of.
    members: Members,
    /// Until when the others' heartbeats, as last read, hold them live (microseconds after
    /// `born`; `NO_OTHERS` when none is): past it, without a newer heartbeat of this
    /// replica's (a slow Redis, a starved process), the tier is not trusted. An atomic: every
    /// lookup reads it.
    others_live_until: AtomicU64,
    born: Instant,
    /// The highest value of this replica's clock in Redis it has seen.
    clock_seen: AtomicU64,
    /// When the last heartbeat was sent: it may have renewed this replica's lease even if its
    /// answer was lost.
    last_sent: Mutex<Option<Instant>>,
    /// The number of the last heartbeat Redis took, and when its answer came: the
    /// subscription must have heard it on its own channel by a round trip later.
    last_landed: Mutex<Option<(u64, Instant)>>,
    /// Redis's clock (milliseconds) as the last heartbeat answer read it, and when that answer
    /// came: Redis's time at a later instant is at least that time plus the interval, so a
    /// heartbeat's deadline on Redis's clock is never later than its deadline here.
    redis_clock: Mutex<Option<(Instant, u64)>>,
    /// When the last heartbeat Redis took was sent; None until the first.
    last_beat: Mutex<Option<Instant>>,
    /// Heartbeats started (numbering them), and the highest number whose epoch move landed.
    beats_started: AtomicU64,
    covered: watch::Sender<u64>,
    wake: Notify,
    last_warned: Mutex<Option<Instant>>,
}

impl Health {
    /// Starts degraded: nothing is trusted until Redis has answered once.
    pub fn new() -> Health {
        Health {
            degraded: AtomicBool::new(true),
            dirty: AtomicBool::new(false),
            suspect: AtomicBool::new(false),
            members: Members::new(),
            others_live_until: AtomicU64::new(NO_OTHERS),
            born: Instant::now(),
            clock_seen: AtomicU64::new(0),
            last_beat: Mutex::new(None),
            last_sent: Mutex::new(None),
            last_landed: Mutex::new(None),
            redis_clock: Mutex::new(None),
            beats_started: AtomicU64::new(0),
            covered: watch::Sender::new(0),
            wake: Notify::new(),
            last_warned: Mutex::new(None),
        }
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    /// A clock value Redis returned (a write this replica announced ticked it). One beyond
    /// `MAX_CLOCK` was written by someone else; the next heartbeat resets it.
    pub fn saw_clock(&self, clock: u64) {
        if clock <= MAX_CLOCK {
            self.clock_seen.fetch_max(clock, Ordering::AcqRel);
        }
    }

    /// The last heartbeat Redis took: its number (what it published) and when it answered.
    pub fn last_landed(&self) -> Option<(u64, Instant)> {
        self.last_landed.lock().map_or(None, |at| *at)
    }

    /// Another replica's heartbeat lapsed, or may have since this replica last looked.
    pub fn is_suspect(&self) -> bool {
        if self.suspect.load(Ordering::Acquire) || self.members.any_orphan() {
            return true;
        }
        let until = self.others_live_until.load(Ordering::Acquire);
        until != NO_OTHERS && micros(self.born.elapsed()) >= until
    }

    pub fn has_joined(&self) -> bool {
        self.last_beat().is_some()
    }

    fn last_beat(&self) -> Option<Instant> {
        self.last_beat.lock().map_or(None, |at| *at)
    }

    /// Whether this replica's last heartbeat is older than `limit` (or there was none).
    pub fn out_of_touch(&self, limit: Duration) -> bool {
        self.last_beat().is_none_or(|at| at.elapsed() > limit)
    }

    /// Under leases, where the lease heartbeat is the tier's only one: Redis answered the
    /// heartbeat sent at `sent`, whose echo (if it carried one) was numbered `echoed`.
    pub fn renewed(&self, sent: Instant, echoed: Option<u64>, metrics: &ClusterMetrics) {
        if let Ok(mut last) = self.last_beat.lock() {
            *last = Some(sent);
        }
        if let (Some(number), Ok(mut landed)) = (echoed, self.last_landed.lock()) {
            *landed = Some((number, Instant::now()));
        }
        if self.degraded.swap(false, Ordering::AcqRel) {
            tracing::info!("Redis answers: this replica is live");
        }
        metrics.recovered();
    }

    /// Redis failed a command: degraded until a heartbeat succeeds.
    pub fn down(&self, metrics: &ClusterMetrics, why: &str) {
        if !self.degraded.swap(true, Ordering::AcqRel) {
            metrics.redis_failed();
            self.warn(why, true);
        } else {
            self.warn(why, false);
        }
    }

    /// Logs a failure: always on the way down, then at most every `WARN_EVERY` (a replica
    /// that never reaches Redis says so, and why).
    fn warn(&self, why: &str, transition: bool) {
        let Ok(mut last) = self.last_warned.lock() else {
            return;
        };
        if transition || last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(reason = why, "Redis unusable: this replica is degraded");
        }
    }

    /// Waits until a write this replica answered without telling Redis is covered: a
    /// heartbeat that started after it moved the epoch, or every other replica has had time
    /// to see this one's heartbeat lapse (and, unless this replica has been out of touch for
    /// `member_timeout`, has not forgotten it yet).
    pub async fn cover_write(&self, settings: &ClusterSettings) -> Cover {
        self.dirty.store(true, Ordering::Release);
        let needed = self.beats_started.load(Ordering::Acquire) + 1;
        let mut covered = self.covered.subscribe();
        self.wake.notify_one();
        // The last heartbeat sent may have reached Redis (its answer perhaps lost) and holds
        // this replica live for MEMBER_LEASE after Redis received it, at most redis_timeout
        // after it was sent (one that arrives later renews nothing: see BEAT); each other
        // replica sees the lapse within a heartbeat, the wait for its answer, and its round
        // trip. While degraded, only probes are sent (they renew nothing), so the wait is over
        // once the replica has been degraded that long.
        let timeout = settings.redis_timeout;
        let sent = self.last_sent.lock().map_or(None, |at| *at);
        let deadline = sent.map_or_else(Instant::now, |at| {
            at + timeout + MEMBER_LEASE + HEARTBEAT + timeout * 2 + SLACK
        });
        tokio::select! {
            _ = covered.wait_for(|done| *done >= needed) => return Cover::Announced,
            () = tokio::time::sleep_until(deadline) => {}
        }
        // The others forget this replica no sooner than `member_timeout` after its lease,
        // which its last heartbeat Redis took renewed after it was sent: before that point the
        // catalog has made the write, and the epoch move that comes with forgetting covers it.
        match self.out_of_touch(settings.member_timeout) {
            false => Cover::Distrusted,
            true => Cover::Lost,
        }
    }

    /// Beats until the process ends. While degraded (after joining) it only probes: a beat
    /// whose answer is lost may still renew this replica's lease, and a replica that cannot
    /// hear Redis must let its lease lapse, so that the others stop trusting the tier.
    pub async fn watch(
        self: Arc<Self>,
        connection: ConnectionManager,
        names: Arc<Names>,
        metrics: Arc<ClusterMetrics>,
        settings: ClusterSettings,
        replica: String,
    ) {
        let script = redis::Script::new(BEAT);
        loop {
            if !(self.is_degraded() && self.has_joined())
                || self.probe(&connection, &metrics, &settings).await
            {
                self.beat(&script, &connection, &names, &metrics, &settings, &replica)
                    .await;
            }
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Whether Redis answers a command that changes nothing (the way back from degraded).
    async fn probe(
        &self,
        connection: &ConnectionManager,
        metrics: &ClusterMetrics,
        settings: &ClusterSettings,
    ) -> bool {
        let mut connection = connection.clone();
        metrics.round_trip(RoundTrip::Probe);
        let answer = tokio::time::timeout(
            settings.redis_timeout,
            redis::cmd("PING").query_async::<String>(&mut connection),
        )
        .await;
        match answer {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                self.down(metrics, &format!("probe: {e}"));
                false
            }
            Err(_) => {
                self.down(metrics, "probe timed out");
                false
            }
        }
    }

    async fn beat(
        &self,
        script: &redis::Script,
        connection: &ConnectionManager,
        names: &Names,
        metrics: &ClusterMetrics,
        settings: &ClusterSettings,
        replica: &str,
    ) {
        let number = self.beats_started.fetch_add(1, Ordering::AcqRel) + 1;
        let dirty = self.dirty.swap(false, Ordering::AcqRel);
        // Coming back from degraded, the first beat moves the epoch: writes answered while
        // degraded were never announced.
        let moves = dirty || (self.is_degraded() && self.has_joined());
        let sent = Instant::now();
        let forget = self.members.forget_due(sent);
        if let Ok(mut last) = self.last_sent.lock() {
            *last = Some(sent);
        }
        // The epoch move is ready in every beat: the script also makes it when the clock is
        // behind, which only Redis can tell.
        let everything = |from: &str| {
            serde_json::to_string(&Message::new(from, now_ms(), &Touched::Everything))
                .unwrap_or_default()
        };
        let mut invocation = script.key(names.members());
        invocation
            .key(names.epoch())
            .key(names.clock(replica))
            .arg(replica)
            .arg(millis(MEMBER_LEASE))
            .arg(millis(settings.member_timeout))
            .arg(if moves { "1" } else { "" })
            .arg(names.channel())
            .arg(everything(replica))
            .arg(names.beat_channel(replica))
            .arg(self.clock_seen.load(Ordering::Acquire))
            .arg(random_token().to_string())
            .arg(MAX_CLOCK)
            .arg(number)
            .arg(self.due(sent, settings.redis_timeout))
            // From no replica (names are 16 hex digits), so that every one applies it.
            .arg(everything(""))
            .arg(if forget { "1" } else { "" });
        let mut connection = connection.clone();
        metrics.round_trip(RoundTrip::Beat);
        let result = tokio::time::timeout(
            settings.redis_timeout,
            invocation.invoke_async::<Beaten>(&mut connection),
        )
        .await;
        let answer = match result {
            // The script's first number is -1 when it arrived after it was due.
            Ok(Ok(answer)) if answer.0 < 0 => {
                self.read_redis_clock(answer.5);
                Err(
                    "a heartbeat reached Redis after it was due (a slow Redis, or its clock \
                     moved) and renewed nothing"
                        .to_owned(),
                )
            }
            Ok(Ok(answer)) => {
                self.read_redis_clock(answer.5);
                Ok(answer)
            }
            Ok(Err(e)) => Err(format!("heartbeat: {e}")),
            Err(_) => Err("heartbeat timed out".to_owned()),
        };
        match answer {
            Ok((lapsed, clock, moved, behind, left, _, others)) => {
                // Counted from when the request was sent: Redis read its clock after that.
                let until = u64::try_from(left).map_or(NO_OTHERS, |ms| {
                    micros(sent.duration_since(self.born) + Duration::from_millis(ms))
                });
                self.others_live_until.store(until, Ordering::Release);
                self.saw_clock(clock);
                if behind == 1 {
                    metrics.rewound();
                    tracing::warn!(
                        "Redis lost writes (a flush, a restart, a failover) or this replica's \
                         clock was overwritten: the epoch moved"
                    );
                }
                if let Ok(mut last) = self.last_beat.lock() {
                    *last = Some(sent);
                }
                if let Ok(mut landed) = self.last_landed.lock() {
                    *landed = Some((number, Instant::now()));
                }
                let lost = behind == 1;
                let timeout = settings.member_timeout;
                let orphans = self.members.heard(sent, others, lost, forget, timeout);
                self.suspect.store(lapsed > 0, Ordering::Release);
                // Orphans are lapsed as far as trust goes: an operator sees why loads revalidate.
                let orphans = i64::try_from(orphans).unwrap_or(i64::MAX);
                metrics
                    .lapsed(usize::try_from(lapsed.saturating_add(orphans)).unwrap_or(usize::MAX));
                if moves {
                    self.covered.send_modify(|done| *done = (*done).max(number));
                }
                if self.degraded.swap(false, Ordering::AcqRel) {
                    tracing::info!(
                        epoch_moved = moved == 1,
                        "Redis answers: this replica is live"
                    );
                }
                metrics.recovered();
            }
            Err(why) => {
                if dirty {
                    self.dirty.store(true, Ordering::Release);
                }
                self.down(metrics, &why);
            }
        }
    }

    /// Redis's time, as a heartbeat answer that just came read it.
    fn read_redis_clock(&self, now_ms: i64) {
        if let (Ok(mut clock), Ok(now_ms)) = (self.redis_clock.lock(), u64::try_from(now_ms)) {
            *clock = Some((Instant::now(), now_ms));
        }
    }

    /// When a heartbeat sent at `sent` is due in Redis (milliseconds on its clock, as an
    /// argument; empty before Redis has answered once): `redis_timeout` after it was sent,
    /// which is what a write this replica cannot announce counts on (`cover_write`).
    fn due(&self, sent: Instant, redis_timeout: Duration) -> String {
        let clock = self.redis_clock.lock().map_or(None, |clock| *clock);
        clock.map_or_else(String::new, |(at, ms)| {
            let ahead = (sent + redis_timeout).saturating_duration_since(at);
            ms.saturating_add(millis(ahead)).to_string()
        })
    }
}

/// What a heartbeat answers: lapsed (-1: it came after it was due), clock, moved, behind,
/// left, Redis's time, and the others with what is left of their leases.
type Beaten = (i64, u64, i64, i64, i64, i64, Vec<(String, i64)>);

/// `others_live_until` when no other replica is live.
const NO_OTHERS: u64 = u64::MAX;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(NO_OTHERS - 1)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
