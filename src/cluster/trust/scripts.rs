//! The three scripts of the lease model (see the module above) as Redis runs them, with typed
//! arguments and replies, every call through one helper with one timeout.
//!
//! Values Redis keeps: the log is a hash (`dataset`, `seq`), the members a hash of member id to
//! stamp, all as lower-case hex. Randomness comes from the replica (a fresh dataset id with
//! each call that may need one): a script's own `math.random` repeats itself.

use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Script;
use thiserror::Error;

use super::{Heartbeat, HeartbeatReply, MemberId, Position};

#[derive(Debug, Error)]
pub enum ScriptError {
    #[error("Redis refused a lease script: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("Redis did not answer a lease script within {0:?}")]
    Timeout(Duration),
    #[error("a lease script answered something unreadable: {0}")]
    Reply(String),
}

/// What both the heartbeat and the invalidate script begin with: the log's position, read as
/// icecache wrote it, or a new dataset (`fresh`) when the log is missing. When the log or the
/// members are not what icecache writes (a wrong type, a dataset or id that is not 16 hex
/// digits, a number that is not a whole number Lua counts exactly), both are dropped and a new
/// dataset starts: a membership that cannot be read is a membership lost, as after a flush, so
/// every replica drops what it holds and the next write waits out a whole lease. Without this a
/// value nobody can read would stop every heartbeat and every write until someone repaired it.
///
/// The log also counts the members the scripts listed and did not forget (`listed`). Fewer
/// members than counted means some were taken by something other than icecache (the hash
/// deleted, evicted or trimmed): a write would wait for nobody while a live lease went
/// unlisted, so that too is a membership lost. More than counted (a member listed by an
/// earlier version that does not count) only raises the count. A log without a count (written
/// by an earlier version) cannot vouch for its members and starts a new dataset once.
macro_rules! read_log {
    () => {
        r"
local function is_id(v)
  return type(v) == 'string' and #v == 16 and string.match(v, '^[0-9a-f]+$') ~= nil
end
local function is_count(n)
  return n ~= nil and n >= 0 and n == math.floor(n) and n < 4503599627370496
end
local function read_log(fresh)
  local log = redis.pcall('HMGET', KEYS[1], 'dataset', 'seq', 'listed')
  local members = redis.pcall('HGETALL', KEYS[2])
  local sound = not log.err and not members.err
  local dataset, seq
  if sound then
    for i = 1, #members, 2 do
      if not (is_id(members[i]) and is_id(members[i + 1])) then sound = false end
    end
  end
  local present = #members / 2
  if sound and (log[1] or log[2] or log[3]) then
    dataset, seq = log[1], tonumber(log[2])
    local listed = tonumber(log[3])
    if not (is_id(dataset) and is_count(seq) and is_count(listed) and present >= listed) then
      sound = false
    elseif present > listed then
      redis.call('HSET', KEYS[1], 'listed', present)
    end
  end
  if not sound then
    redis.call('DEL', KEYS[1], KEYS[2])
    dataset, present = nil, 0
  end
  if not dataset then
    dataset, seq = fresh, 0
    redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq, 'listed', present)
  end
  return dataset, seq
end
"
    };
}

/// Takes one member out of the members and the count (the log's count never goes below
/// zero, nor appears where there is no log).
macro_rules! unlist {
    () => {
        r"
local function unlist(member)
  local gone = redis.call('HDEL', KEYS[2], member)
  local listed = tonumber(redis.call('HGET', KEYS[1], 'listed'))
  if gone == 1 and listed and listed > 0 then
    redis.call('HSET', KEYS[1], 'listed', listed - 1)
  end
  return gone
end
"
    };
}

/// Reads the log (see `read_log!`), and starts a new dataset when the member applied a position
/// beyond it (Redis lost writes); lists the member under its stamp; then publishes the echo, if
/// any, on the replica's own channel (its subscription is live while it hears them). ARGV:
/// member, applied dataset ("" for none), applied seq, stamp, fresh dataset, echo channel (""
/// for none), echo.
const HEARTBEAT: &str = concat!(
    read_log!(),
    r"
local dataset, seq = read_log(ARGV[5])
if ARGV[2] == dataset and tonumber(ARGV[3]) > seq then
  dataset, seq = ARGV[5], 0
  redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq)
end
local known = redis.call('HSET', KEYS[2], ARGV[1], ARGV[4]) == 0
if not known then redis.call('HINCRBY', KEYS[1], 'listed', 1) end
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
return {dataset, seq, known and 1 or 0, redis.call('HGETALL', KEYS[2])}
"
);

/// Reads the log (see `read_log!`), moves it one on and publishes the invalidation with its
/// position. ARGV: fresh dataset, channel, message.
const INVALIDATE: &str = concat!(
    read_log!(),
    r"
local dataset, seq = read_log(ARGV[1])
seq = seq + 1
redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq)
redis.call('PUBLISH', ARGV[2], dataset .. ' ' .. seq .. ' ' .. ARGV[3])
return {dataset, seq, redis.call('HKEYS', KEYS[2])}
"
);

/// Forgets a member only while it is listed under that stamp in that dataset.
/// ARGV: member, dataset, stamp.
const FORGET: &str = concat!(
    unlist!(),
    r"
if redis.call('HGET', KEYS[1], 'dataset') == ARGV[2]
  and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[3] then
  return unlist(ARGV[1])
end
return 0
"
);

/// Takes a member out (a clean shutdown). ARGV: member.
const LEAVE: &str = concat!(unlist!(), "return unlist(ARGV[1])\n");

/// Where the scripts keep the log and the members, and where invalidations are published.
#[derive(Debug, Clone)]
pub struct LeaseKeys {
    pub log: String,
    pub members: String,
    pub channel: String,
}

pub struct LeaseScripts {
    keys: LeaseKeys,
    timeout: Duration,
    heartbeat: Script,
    invalidate: Script,
    forget: Script,
    leave: Script,
}

fn hex(n: u64) -> String {
    format!("{n:016x}")
}

fn unhex(text: &str) -> Result<u64, ScriptError> {
    u64::from_str_radix(text, 16).map_err(|_| ScriptError::Reply(format!("{text:?} is no id")))
}

impl LeaseScripts {
    pub fn new(keys: LeaseKeys, timeout: Duration) -> LeaseScripts {
        LeaseScripts {
            keys,
            timeout,
            heartbeat: Script::new(HEARTBEAT),
            invalidate: Script::new(INVALIDATE),
            forget: Script::new(FORGET),
            leave: Script::new(LEAVE),
        }
    }

    /// Every call to Redis goes through here: one timeout, one error type.
    async fn call<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, ScriptError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => Ok(answer?),
            Err(_) => Err(ScriptError::Timeout(self.timeout)),
        }
    }

    /// Runs a pipeline of plain commands (a write's token moves) under the same timeout.
    pub async fn run<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        pipe: &redis::Pipeline,
    ) -> Result<(), ScriptError> {
        self.call(pipe.query_async::<()>(connection)).await
    }

    /// Renews `beat`'s lease; `echo` (a channel, a number) is published once it has.
    pub async fn heartbeat<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        beat: &Heartbeat,
        fresh_dataset: u64,
        echo: Option<(&str, u64)>,
    ) -> Result<HeartbeatReply, ScriptError> {
        let (dataset, seq) = match beat.applied {
            Some(p) => (hex(p.dataset), p.seq),
            None => (String::new(), 0),
        };
        let mut invocation = self.heartbeat.key(&self.keys.log);
        invocation
            .key(&self.keys.members)
            .arg(hex(beat.member))
            .arg(dataset)
            .arg(seq)
            .arg(hex(beat.stamp))
            .arg(hex(fresh_dataset))
            .arg(echo.map_or("", |(channel, _)| channel))
            .arg(echo.map_or(0, |(_, number)| number));
        let (dataset, seq, known, flat): (String, u64, u8, Vec<String>) =
            self.call(invocation.invoke_async(connection)).await?;
        let members = flat
            .chunks(2)
            .map(|pair| match pair {
                [member, stamp] => Ok((unhex(member)?, unhex(stamp)?)),
                _ => Err(ScriptError::Reply("members listed unpaired".into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HeartbeatReply {
            position: Position {
                dataset: unhex(&dataset)?,
                seq,
            },
            known: known == 1,
            members,
        })
    }

    /// Publishes `message` as the next invalidation: its position, and the members listed.
    pub async fn invalidate<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        message: &[u8],
        fresh_dataset: u64,
    ) -> Result<(Position, Vec<MemberId>), ScriptError> {
        let mut invocation = self.invalidate.key(&self.keys.log);
        invocation
            .key(&self.keys.members)
            .arg(hex(fresh_dataset))
            .arg(&self.keys.channel)
            .arg(message);
        let (dataset, seq, members): (String, u64, Vec<String>) =
            self.call(invocation.invoke_async(connection)).await?;
        let members = members
            .iter()
            .map(|m| unhex(m))
            .collect::<Result<Vec<_>, _>>()?;
        let dataset = unhex(&dataset)?;
        Ok((Position { dataset, seq }, members))
    }

    /// Whether the member was forgotten (it was still listed under `stamp` in `dataset`).
    pub async fn forget<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        member: MemberId,
        dataset: u64,
        stamp: u64,
    ) -> Result<bool, ScriptError> {
        let mut invocation = self.forget.key(&self.keys.log);
        invocation
            .key(&self.keys.members)
            .arg(hex(member))
            .arg(hex(dataset))
            .arg(hex(stamp));
        let removed: u8 = self.call(invocation.invoke_async(connection)).await?;
        Ok(removed == 1)
    }
}

impl LeaseScripts {
    /// Publishes `message` on `channel` (an acknowledgement).
    pub async fn publish<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        channel: &str,
        message: &str,
    ) -> Result<(), ScriptError> {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel).arg(message);
        self.call(publish.query_async::<i64>(connection)).await?;
        Ok(())
    }

    /// Takes `member` out of the members (a clean shutdown).
    pub async fn leave<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        member: MemberId,
    ) -> Result<(), ScriptError> {
        let mut invocation = self.leave.key(&self.keys.log);
        invocation.key(&self.keys.members).arg(hex(member));
        self.call(invocation.invoke_async::<i64>(connection))
            .await?;
        Ok(())
    }
}

/// An invalidation as published: its position, then the writer's message.
pub fn read_invalidation(published: &[u8]) -> Option<(Position, &[u8])> {
    let mut parts = published.splitn(3, |b| *b == b' ');
    let dataset = std::str::from_utf8(parts.next()?).ok()?;
    let seq = std::str::from_utf8(parts.next()?).ok()?;
    let message = parts.next()?;
    let position = Position {
        dataset: u64::from_str_radix(dataset, 16).ok()?,
        seq: seq.parse().ok()?,
    };
    Some((position, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalidation_is_read_back_as_published() {
        let published = b"00000000000000ff 12 write 7 touched a b";
        let (position, message) = read_invalidation(published).unwrap();
        assert_eq!(
            position,
            Position {
                dataset: 255,
                seq: 12
            }
        );
        assert_eq!(message, b"write 7 touched a b");
    }

    #[test]
    fn a_garbled_invalidation_is_unread() {
        assert!(read_invalidation(b"zz 12 x").is_none());
        assert!(read_invalidation(b"00ff twelve x").is_none());
        assert!(read_invalidation(b"00ff 12").is_none());
    }
}
