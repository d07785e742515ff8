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

/// Reads the log, creating it in a new dataset when it is missing, and starts a new dataset
/// when the member applied a position beyond it (Redis lost writes); lists the member under its
/// stamp; then publishes the echo, if any, on the replica's own channel (its subscription is
/// live while it hears them). ARGV: member, applied dataset ("" for none), applied seq, stamp,
/// fresh dataset, echo channel ("" for none), echo.
const HEARTBEAT: &str = r"
local log = redis.call('HMGET', KEYS[1], 'dataset', 'seq')
local dataset, seq = log[1], tonumber(log[2])
if not dataset or not seq then
  dataset, seq = ARGV[5], 0
  redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq)
end
if ARGV[2] == dataset and tonumber(ARGV[3]) > seq then
  dataset, seq = ARGV[5], 0
  redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq)
end
local known = redis.call('HSET', KEYS[2], ARGV[1], ARGV[4]) == 0
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
return {dataset, seq, known and 1 or 0, redis.call('HGETALL', KEYS[2])}
";

/// Moves the log one on and publishes the invalidation with its position.
/// ARGV: fresh dataset, channel, message.
const INVALIDATE: &str = r"
local log = redis.call('HMGET', KEYS[1], 'dataset', 'seq')
local dataset, seq = log[1], tonumber(log[2])
if not dataset or not seq then dataset, seq = ARGV[1], 0 end
seq = seq + 1
redis.call('HSET', KEYS[1], 'dataset', dataset, 'seq', seq)
redis.call('PUBLISH', ARGV[2], dataset .. ' ' .. seq .. ' ' .. ARGV[3])
return {dataset, seq, redis.call('HKEYS', KEYS[2])}
";

/// Forgets a member only while it is listed under that stamp in that dataset.
/// ARGV: member, dataset, stamp.
const FORGET: &str = r"
if redis.call('HGET', KEYS[1], 'dataset') == ARGV[2]
  and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[3] then
  return redis.call('HDEL', KEYS[2], ARGV[1])
end
return 0
";

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
        let mut gone = redis::cmd("HDEL");
        gone.arg(&self.keys.members).arg(hex(member));
        self.call(gone.query_async::<i64>(connection)).await?;
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
