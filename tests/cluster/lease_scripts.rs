//! The lease model's three scripts on a real redis-server do what the simulation's fake Redis
//! does (`src/cluster/trust/sim`): a log created in a dataset of the replica's choosing, a new
//! dataset when Redis lost writes or was flushed, members listed under random stamps, and
//! forgetting only at the stamp seen.

use std::time::Duration;

use icecache::cluster::trust::scripts::{read_invalidation, LeaseKeys, LeaseScripts};
use icecache::cluster::trust::{Heartbeat, Position};
use redis::aio::MultiplexedConnection;

use crate::support::cluster::Redis;

const ME: u64 = 0xa1;
const PEER: u64 = 0xb2;

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

fn beat(member: u64, applied: Option<Position>, stamp: u64) -> Heartbeat {
    Heartbeat {
        member,
        applied,
        stamp,
    }
}

#[tokio::test]
async fn a_first_heartbeat_creates_the_log_in_the_dataset_offered_and_lists_the_member() {
    let Setup {
        redis: _redis,
        scripts,
        mut connection,
    } = setup().await;
    let reply = scripts
        .heartbeat(&mut connection, &beat(ME, None, 7), 0xd1)
        .await
        .unwrap();
    assert_eq!(
        reply.position,
        Position {
            dataset: 0xd1,
            seq: 0
        }
    );
    assert!(!reply.known);
    assert_eq!(reply.members, vec![(ME, 7)]);
    let again = scripts
        .heartbeat(&mut connection, &beat(ME, Some(reply.position), 8), 0xd2)
        .await
        .unwrap();
    assert_eq!(
        again.position, reply.position,
        "the dataset offered is only taken for a missing log"
    );
    assert!(again.known);
    assert_eq!(again.members, vec![(ME, 8)]);
}

#[tokio::test]
async fn an_invalidation_moves_the_log_and_is_published_with_its_position() {
    let Setup {
        redis,
        scripts,
        mut connection,
    } = setup().await;
    scripts
        .heartbeat(&mut connection, &beat(ME, None, 1), 0xd1)
        .await
        .unwrap();
    scripts
        .heartbeat(&mut connection, &beat(PEER, None, 2), 0xd9)
        .await
        .unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut subscriber = client.get_async_pubsub().await.unwrap();
    subscriber
        .subscribe("icecache:lease-invalidations")
        .await
        .unwrap();
    let (position, mut members) = scripts
        .invalidate(&mut connection, b"write 5 table t", 0xd9)
        .await
        .unwrap();
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
    let (next, _) = scripts
        .invalidate(&mut connection, b"x", 0xd9)
        .await
        .unwrap();
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
    let Setup {
        redis: _redis,
        scripts,
        mut connection,
    } = setup().await;
    scripts
        .heartbeat(&mut connection, &beat(ME, None, 1), 0xd1)
        .await
        .unwrap();
    scripts.invalidate(&mut connection, b"x", 0).await.unwrap();
    // As after a failover to a Redis that lost the log's last moves.
    let ahead = Position {
        dataset: 0xd1,
        seq: 5,
    };
    let reply = scripts
        .heartbeat(&mut connection, &beat(ME, Some(ahead), 2), 0xe1)
        .await
        .unwrap();
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
    let reply = scripts
        .heartbeat(&mut connection, &beat(PEER, Some(elsewhere), 3), 0xf1)
        .await
        .unwrap();
    assert_eq!(
        reply.position.dataset, 0xe1,
        "a position in another dataset proves no loss"
    );
}

#[tokio::test]
async fn a_flushed_redis_starts_a_new_dataset_that_lists_nobody() {
    let Setup {
        redis,
        scripts,
        mut connection,
    } = setup().await;
    let first = scripts
        .heartbeat(&mut connection, &beat(ME, None, 1), 0xd1)
        .await
        .unwrap();
    redis.flushall();
    let reply = scripts
        .heartbeat(&mut connection, &beat(ME, Some(first.position), 2), 0xe1)
        .await
        .unwrap();
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
    let Setup {
        redis: _redis,
        scripts,
        mut connection,
    } = setup().await;
    scripts
        .heartbeat(&mut connection, &beat(ME, None, 1), 0xd1)
        .await
        .unwrap();
    scripts
        .heartbeat(&mut connection, &beat(PEER, None, 0x51), 0)
        .await
        .unwrap();
    assert!(
        !scripts
            .forget(&mut connection, PEER, 0xd1, 0x50)
            .await
            .unwrap(),
        "another stamp"
    );
    assert!(
        !scripts
            .forget(&mut connection, PEER, 0xd2, 0x51)
            .await
            .unwrap(),
        "another dataset"
    );
    assert!(scripts
        .forget(&mut connection, PEER, 0xd1, 0x51)
        .await
        .unwrap());
    let reply = scripts
        .heartbeat(&mut connection, &beat(PEER, None, 0x52), 0)
        .await
        .unwrap();
    assert!(
        !reply.known,
        "a member forgotten is unlisted when it renews"
    );
}
