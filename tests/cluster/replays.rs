//! `idempotency = "provide"` on a tier: the answers live in Redis, so a retry that reaches
//! another replica is a replay too; what Redis holds carries no vended credential; and while
//! Redis is gone a request with a key is refused rather than sent unguarded.

use crate::replica::standin;
use crate::support::cluster::{Redis, Tier, TABLE};
use crate::support::standin::{vended_keys, Shape};
use crate::support::{commit_with_key, replayed};

const PROVIDE: &[&str] = &["--idempotency", "provide"];

async fn commit_at(url: &str, key: &str) -> reqwest::Response {
    commit_with_key(&reqwest::Client::new(), &format!("{url}{TABLE}"), key).await
}

#[tokio::test]
async fn a_retry_reaching_another_replica_is_replayed_without_credentials() {
    let catalog = standin(Shape {
        commit_vends: true,
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let tier = Tier::start(2, &catalog.url, &redis, PROVIDE).await;
    let before = catalog.version("t");
    let key = "0193a0b4-0000-7000-8000-0000000000c1";
    let first = commit_at(tier.url(0), key).await;
    assert_eq!(first.status(), 200);
    assert!(
        !vended_keys(&first.text().await.unwrap()).is_empty(),
        "the first answer carries the catalog's credentials (passthrough)"
    );
    let after = catalog.version("t");
    assert_ne!(after, before, "the commit happened");
    let retry = commit_at(tier.url(1), key).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(replayed(&retry), Some("true"));
    let text = retry.text().await.unwrap();
    assert!(vended_keys(&text).is_empty(), "a replay from Redis: {text}");
    assert_eq!(catalog.version("t"), after, "the retry reached the catalog");
    for (name, value) in redis.dump() {
        let value = String::from_utf8_lossy(&value);
        assert!(vended_keys(&value).is_empty(), "{name} holds {value}");
    }
}

#[tokio::test]
async fn a_request_with_a_key_is_refused_while_redis_is_gone() {
    let catalog = standin(Shape::default()).await;
    let mut redis = Redis::start().await;
    let tier = Tier::start(1, &catalog.url, &redis, PROVIDE).await;
    let before = catalog.version("t");
    redis.kill();
    let refused = commit_at(tier.url(0), "0193a0b4-0000-7000-8000-0000000000c2").await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(catalog.version("t"), before, "sent unguarded");
}
