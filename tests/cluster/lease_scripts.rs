//! The lease model's three scripts on a real redis-server do what the simulation's fake Redis
//! does (`src/cluster/trust/sim`): a log created in a dataset of the replica's choosing, a new
//! dataset when Redis lost writes or was flushed, members listed under random stamps, and
//! forgetting only at the stamp seen, and a membership that lost members counted as lost.

use std::time::Duration;

use icecache::cluster::trust::scripts::{read_invalidation, LeaseKeys, LeaseScripts};
use icecache::cluster::trust::{Heartbeat, HeartbeatReply, Position};
use redis::aio::MultiplexedConnection;

use crate::support::cluster::Redis;

const ME: u64 = 0xa1;
const PEER: u64 = 0xb2;
const LOG: &str = "icecache:lease-log";
const MEMBERS: &str = "icecache:lease-members";
/// The dataset `Setup::invalidate` offers.
const OFFERED: u64 = 0xd9;

struct Setup {
    redis: Redis,
    scripts: LeaseScripts,
    connection: MultiplexedConnection,
}

async fn setup() -> Setup {
    let redis = Redis::start().await;
    let keys = LeaseKeys {
        log: "icecache:lease-log".into(),
        members: "icecache:lease-members".into(),
        channel: "icecache:lease-invalidations".into(),
    };
    let client = redis::Client::open(redis.url()).unwrap();
    let connection = client.get_multiplexed_async_connection().await.unwrap();
    Setup {
        redis,
        scripts: LeaseScripts::new(keys, Duration::from_secs(5)),
        connection,
    }
}

impl Setup {
    /// A heartbeat of `member`, offering `fresh` as the dataset should Redis need a new one.
    async fn beat(
        &mut self,
        member: u64,
        applied: Option<Position>,
        stamp: u64,
        fresh: u64,
    ) -> HeartbeatReply {
        let beat = Heartbeat {
            member,
            applied,
            stamp,
        };
        let connection = &mut self.connection;
        self.scripts
            .heartbeat(connection, &beat, fresh, None)
            .await
            .unwrap()
    }

    async fn invalidate(&mut self, message: &[u8]) -> (Position, Vec<u64>) {
        let connection = &mut self.connection;
        self.scripts
            .invalidate(connection, message, OFFERED)
            .await
            .unwrap()
    }

    async fn leave(&mut self, member: u64) {
        let connection = &mut self.connection;
        self.scripts.leave(connection, member).await.unwrap()
    }

    async fn forget(&mut self, member: u64, dataset: u64, stamp: u64) -> bool {
        let connection = &mut self.connection;
        self.scripts
            .forget(connection, member, dataset, stamp)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_first_heartbeat_creates_the_log_in_the_dataset_offered_and_lists_the_member() {
    let mut s = setup().await;
    let reply = s.beat(ME, None, 7, 0xd1).await;
    assert_eq!(
        reply.position,
        Position {
            dataset: 0xd1,
            seq: 0
        }
    );
    assert!(!reply.known);
    assert_eq!(reply.members, vec![(ME, 7)]);
    let again = s.beat(ME, Some(reply.position), 8, 0xd2).await;
    assert_eq!(
        again.position, reply.position,
        "a dataset offered is taken only for a missing log"
    );
    assert!(again.known);
    assert_eq!(again.members, vec![(ME, 8)]);
}

#[tokio::test]
async fn an_invalidation_moves_the_log_and_is_published_with_its_position() {
    let mut s = setup().await;
    s.beat(ME, None, 1, 0xd1).await;
    s.beat(PEER, None, 2, 0xd9).await;
    let client = redis::Client::open(s.redis.url()).unwrap();
    let mut subscriber = client.get_async_pubsub().await.unwrap();
    subscriber
        .subscribe("icecache:lease-invalidations")
        .await
        .unwrap();
    let (position, mut members) = s.invalidate(b"write 5 table t").await;
    assert_eq!(
        position,
        Position {
            dataset: 0xd1,
            seq: 1
        }
    );
    members.sort_unstable();
    assert_eq!(members, vec![ME, PEER]);
    let message = {
        use futures::StreamExt;
        subscriber.on_message().next().await.unwrap()
    };
    let payload: Vec<u8> = message.get_payload().unwrap();
    assert_eq!(
        read_invalidation(&payload),
        Some((position, &b"write 5 table t"[..]))
    );
    let (next, _) = s.invalidate(b"x").await;
    assert_eq!(
        next,
        Position {
            dataset: 0xd1,
            seq: 2
        }
    );
}

#[tokio::test]
async fn a_member_ahead_of_the_log_starts_a_new_dataset() {
    let mut s = setup().await;
    s.beat(ME, None, 1, 0xd1).await;
    s.invalidate(b"x").await;
    // As after a failover to a Redis that lost the log's last moves.
    let ahead = Position {
        dataset: 0xd1,
        seq: 5,
    };
    let reply = s.beat(ME, Some(ahead), 2, 0xe1).await;
    assert_eq!(
        reply.position,
        Position {
            dataset: 0xe1,
            seq: 0
        }
    );
    let elsewhere = Position {
        dataset: 0x99,
        seq: 50,
    };
    let reply = s.beat(PEER, Some(elsewhere), 3, 0xf1).await;
    assert_eq!(
        reply.position.dataset, 0xe1,
        "a position in another dataset proves no loss"
    );
}

#[tokio::test]
async fn a_flushed_redis_starts_a_new_dataset_that_lists_nobody() {
    let mut s = setup().await;
    let first = s.beat(ME, None, 1, 0xd1).await;
    s.redis.flushall();
    let reply = s.beat(ME, Some(first.position), 2, 0xe1).await;
    assert_eq!(
        reply.position,
        Position {
            dataset: 0xe1,
            seq: 0
        }
    );
    assert!(!reply.known, "a flushed Redis knows no member");
}

#[tokio::test]
async fn a_member_is_forgotten_only_at_the_stamp_and_dataset_seen() {
    let mut s = setup().await;
    s.beat(ME, None, 1, 0xd1).await;
    s.beat(PEER, None, 0x51, 0).await;
    assert!(!s.forget(PEER, 0xd1, 0x50).await, "another stamp");
    assert!(!s.forget(PEER, 0xd2, 0x51).await, "another dataset");
    assert!(s.forget(PEER, 0xd1, 0x51).await);
    let reply = s.beat(PEER, None, 0x52, 0).await;
    assert!(
        !reply.known,
        "a member forgotten is unlisted when it renews"
    );
}

#[tokio::test]
async fn a_heartbeat_with_an_echo_publishes_it_on_the_replicas_channel_once_renewed() {
    use futures::StreamExt;
    let mut s = setup().await;
    let client = redis::Client::open(s.redis.url()).unwrap();
    let mut subscriber = client.get_async_pubsub().await.unwrap();
    subscriber.subscribe("icecache:beat:a1").await.unwrap();
    let beat = Heartbeat {
        member: ME,
        applied: None,
        stamp: 1,
    };
    let echo = Some(("icecache:beat:a1", 7));
    let reply = s
        .scripts
        .heartbeat(&mut s.connection, &beat, 0xd1, echo)
        .await
        .unwrap();
    assert!(reply.members.contains(&(ME, 1)), "renewed: {reply:?}");
    let message = subscriber.on_message().next().await.unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "7");
    // Without an echo nothing is published: the next message is the next echo's.
    s.beat(ME, None, 2, 0xd1).await;
    let echo = Some(("icecache:beat:a1", 8));
    s.scripts
        .heartbeat(&mut s.connection, &beat, 0xd1, echo)
        .await
        .unwrap();
    let message = subscriber.on_message().next().await.unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "8");
}

/// Two members listed in dataset 0xd1, as two replicas' first heartbeats leave them.
async fn two_members(s: &mut Setup) {
    s.redis.flushall();
    s.beat(ME, None, 1, 0xd1).await;
    s.beat(PEER, None, 2, 0xd2).await;
}

#[tokio::test]
async fn members_taken_by_anything_but_icecache_start_a_new_dataset() {
    // A write that found fewer members than were listed would wait for nobody while a lease
    // it cannot see is still held; a new dataset makes it wait out a whole lease instead.
    let mut s = setup().await;
    let peer = format!("{PEER:016x}");
    let me = format!("{ME:016x}");
    let damages: [&[&str]; 3] = [
        &["DEL", MEMBERS],
        &["HDEL", MEMBERS, &peer],
        &["HDEL", MEMBERS, &peer, &me],
    ];
    for damage in damages {
        two_members(&mut s).await;
        s.redis.command(damage);
        let (position, members) = s.invalidate(b"x").await;
        assert_eq!(position.dataset, OFFERED, "{damage:?}");
        assert_eq!(position.seq, 1, "{damage:?}");
        assert!(members.is_empty(), "{damage:?}: {members:?}");
    }
    // The heartbeat reads the log the same way.
    two_members(&mut s).await;
    s.redis.command(&["HDEL", MEMBERS, &peer]);
    let reply = s.beat(ME, None, 3, 0xe1).await;
    assert_eq!(reply.position.dataset, 0xe1);
    assert!(!reply.known, "a new dataset lists nobody before");
}

#[tokio::test]
async fn members_forgotten_or_leaving_keep_the_dataset() {
    let mut s = setup().await;
    two_members(&mut s).await;
    assert!(s.forget(PEER, 0xd1, 2).await);
    let (position, members) = s.invalidate(b"x").await;
    assert_eq!((position.dataset, members), (0xd1, vec![ME]));
    s.leave(ME).await;
    let (position, members) = s.invalidate(b"y").await;
    assert_eq!((position.dataset, position.seq), (0xd1, 2));
    assert!(members.is_empty());
    // Leaving twice, or a member never listed, takes nothing off the count.
    s.leave(ME).await;
    s.leave(PEER).await;
    let reply = s.beat(ME, Some(position), 3, 0xe1).await;
    assert_eq!(reply.position.dataset, 0xd1);
    let mut connection = s.redis.connection().unwrap();
    let listed: Option<u64> = redis::cmd("HGET")
        .arg(LOG)
        .arg("listed")
        .query(&mut connection)
        .unwrap();
    assert_eq!(listed, Some(1), "ME listed again, and nobody else");
}

#[tokio::test]
async fn a_member_listed_without_counting_raises_the_count_and_is_then_held_to_it() {
    let mut s = setup().await;
    s.beat(ME, None, 1, 0xd1).await;
    // As an earlier version lists itself: into the members, not the count.
    let earlier = format!("{PEER:016x}");
    s.redis
        .command(&["HSET", MEMBERS, &earlier, "0000000000000005"]);
    let (position, mut members) = s.invalidate(b"x").await;
    members.sort_unstable();
    assert_eq!((position.dataset, members), (0xd1, vec![ME, PEER]));
    s.redis.command(&["DEL", MEMBERS]);
    let (position, _) = s.invalidate(b"y").await;
    assert_eq!(position.dataset, OFFERED, "both members were counted");
}

#[tokio::test]
async fn a_log_without_a_count_starts_a_new_dataset_once() {
    // As an earlier version left it: nothing vouches that its members are all the leases.
    let mut s = setup().await;
    s.beat(ME, None, 1, 0xd1).await;
    s.redis.command(&["HDEL", LOG, "listed"]);
    let (first, _) = s.invalidate(b"x").await;
    assert_eq!((first.dataset, first.seq), (OFFERED, 1));
    let (second, _) = s.invalidate(b"y").await;
    assert_eq!((second.dataset, second.seq), (OFFERED, 2));
}
