//! Several replicas on one real redis-server act as one cache: a write through any replica is
//! seen by the next load on every other, a table version is fetched from the catalog once for
//! the tier, no secret is ever written to Redis, and Redis going away fails no request. The
//! catalog is the stand-in (a versioned table store, fast enough for a thousand trials) where
//! counting and vending matter, SeaweedFS for the writes every catalog makes.

use std::time::Duration;

use crate::replica::{commit, loaded_once_and_shared, standin, version_at};
use crate::support::cluster::{load, Redis, Tier, TABLE};
use crate::support::standin::{vended_keys, version_of, Shape, StandIn};
use crate::support::{catalog, metric, view_body, x_cache, Api};
use serde_json::{json, Value};

#[tokio::test]
async fn a_thousand_commits_through_one_replica_are_each_seen_by_the_next_load_on_another() {
    let catalog = standin(Shape::default()).await;
    catalog.stop_recording();
    let redis = Redis::start().await;
    // Strip: bodies are shared through Redis, so a replica that dropped its entry on the
    // announcement could still find the pre-commit version there; only the tokens stop it.
    let tier = Tier::start(
        3,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    let mut stale = 0;
    for trial in 0..1000 {
        let committed = commit(tier.url(trial)).await;
        let seen = version_at(tier.url(trial + 1)).await;
        if seen < committed {
            stale += 1;
        }
    }
    assert_eq!(stale, 0, "stale reads in 1,000 commit-then-load trials");
    let metrics = tier.replicas[0].metrics().await;
    assert!(metric(&metrics, "icecache_cluster_invalidations_published_total") > 0.0);
    let mut refused = 0.0;
    for replica in &tier.replicas {
        refused += metric(
            &replica.metrics().await,
            "icecache_cluster_shared_total{result=\"stale\"}",
        );
    }
    assert!(
        refused > 0.0,
        "pre-commit versions were met in Redis, and refused"
    );
}

#[tokio::test]
async fn every_kind_of_write_through_one_replica_is_seen_through_another() {
    let redis = Redis::start().await;
    let tier = Tier::start(3, &catalog(), &redis, &["--fresh-for", "1h"]).await;
    let api: Vec<Api> =
        futures::future::join_all(tier.replicas.iter().map(|r| Api::new(&r.url))).await;
    let namespace = crate::support::unique("ns_tier");
    api[0].create_namespace(&namespace).await;
    for name in ["u", "d", "r", "x1", "x2"] {
        api[0].create_table(&namespace, name).await;
    }
    let path = |name: &str| format!("/namespaces/{namespace}/tables/{name}");
    let cached = |replica: usize, name: &str| {
        let request = api[replica].get(&path(name));
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), x_cache(&response))
        }
    };
    for name in ["u", "d", "r", "x1", "x2"] {
        cached(1, name).await;
        assert_eq!(
            cached(1, name).await,
            (200, "HIT".to_owned()),
            "{name} cached on B"
        );
    }
    // A commit on A, seen on B.
    api[0].set_property(&namespace, "u", "via", "a").await;
    let body: Value = api[1].get_json(&path("u")).await;
    assert_eq!(body["metadata"]["properties"]["via"], "a");
    // A drop on A: B answers 404.
    let dropped = api[0]
        .send(
            reqwest::Method::DELETE,
            &format!("{}{}", api[0].base, path("d")),
        )
        .await;
    assert_eq!(dropped.status(), 204);
    assert_eq!(cached(1, "d").await.0, 404);
    // A rename on C: both names seen on B.
    let renamed = api[2]
        .post(
            "/tables/rename",
            json!({ "source": { "namespace": [namespace], "name": "r" },
                    "destination": { "namespace": [namespace], "name": "r2" } }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 204);
    assert_eq!(cached(1, "r").await.0, 404);
    assert_eq!(cached(1, "r2").await.0, 200);
    // A multi-table transaction on A.
    let change = |name: &str| {
        json!({ "identifier": { "namespace": [namespace], "name": name }, "requirements": [],
                "updates": [{ "action": "set-properties", "updates": { "txn": "yes" } }] })
    };
    let committed = api[0]
        .post(
            "/transactions/commit",
            json!({ "table-changes": [change("x1"), change("x2")] }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 204);
    for name in ["x1", "x2"] {
        let body: Value = api[1].get_json(&path(name)).await;
        assert_eq!(body["metadata"]["properties"]["txn"], "yes", "{name}");
    }
    // A register on A of a name B has seen missing: B loads it.
    assert_eq!(cached(1, "reg").await.0, 404);
    let location = api[0].get_json(&path("x1")).await["metadata-location"].clone();
    let registered = api[0]
        .post(
            &format!("/namespaces/{namespace}/register"),
            json!({ "name": "reg", "metadata-location": location }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 200);
    assert_eq!(cached(1, "reg").await.0, 200);
    // View writes on A (create, replace, drop), each seen by B's next load of the view.
    let view = format!("/namespaces/{namespace}/views/v");
    let created = api[0]
        .post(
            &format!("/namespaces/{namespace}/views"),
            view_body("v", "1"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    assert_eq!(
        api[1].get_json(&view).await["metadata"]["properties"]["k"],
        "1"
    );
    let replaced = api[0]
        .post(&view, json!({ "requirements": [], "updates": [{ "action": "set-properties", "updates": { "k": "2" } }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.status(), 200);
    assert_eq!(
        api[1].get_json(&view).await["metadata"]["properties"]["k"],
        "2"
    );
    let dropped = api[0]
        .send(reqwest::Method::DELETE, &format!("{}{view}", api[0].base))
        .await;
    assert_eq!(dropped.status(), 204);
    assert_eq!(api[1].get(&view).send().await.unwrap().status(), 404);
    // A purge on A's admin port, after a change straight to the catalog.
    let direct = Api::new(&catalog()).await;
    direct.set_property(&namespace, "u", "via", "direct").await;
    assert_eq!(
        cached(1, "u").await.1,
        "HIT",
        "not seen before the purge: fresh_for is 1h"
    );
    let purged = reqwest::Client::new()
        .post(format!(
            "{}/cache/purge?namespace={namespace}&table=u",
            tier.replicas[0].admin
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    let body: Value = api[1].get_json(&path("u")).await;
    assert_eq!(body["metadata"]["properties"]["via"], "direct");
    // A namespace drop on C (its tables dropped first, as catalogs require): seen on B.
    for name in ["u", "r2", "x1", "x2", "reg"] {
        api[2]
            .send(
                reqwest::Method::DELETE,
                &format!("{}{}", api[2].base, path(name)),
            )
            .await;
    }
    let gone = api[2]
        .send(
            reqwest::Method::DELETE,
            &format!("{}/namespaces/{namespace}", api[2].base),
        )
        .await;
    assert_eq!(gone.status(), 204);
    assert_eq!(cached(1, "u").await.0, 404);
}

#[tokio::test]
async fn a_table_loaded_through_one_replica_is_served_by_the_others_without_the_catalog() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        3,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    loaded_once_and_shared(&tier, &catalog).await;
    let metrics = tier.replicas[1].metrics().await;
    assert!(metric(&metrics, "icecache_cluster_shared_total{result=\"hit\"}") >= 1.0);
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut plain)
        .unwrap();
    plain
}

#[tokio::test]
async fn a_shared_entry_is_served_gzipped_and_plain_over_http1_and_http2() {
    // Big enough for a gzip copy (which is what the tier shares).
    let catalog = standin(Shape {
        padding: 8 << 10,
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        3,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    let filled = load(tier.url(0), "alice").await.bytes().await.unwrap();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for (replica, client) in [(1, reqwest::Client::new()), (2, h2)] {
        let url = format!("{}{TABLE}", tier.url(replica));
        let gz = client
            .get(&url)
            .bearer_auth("alice")
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(x_cache(&gz), "SHARED");
        assert_eq!(gz.headers()["content-encoding"], "gzip");
        assert_eq!(
            gunzip(&gz.bytes().await.unwrap()),
            filled,
            "replica {replica}"
        );
        let plain = client.get(&url).bearer_auth("alice").send().await.unwrap();
        assert_eq!(x_cache(&plain), "HIT");
        assert!(plain.headers().get("content-encoding").is_none());
        assert_eq!(plain.bytes().await.unwrap(), filled, "replica {replica}");
    }
    assert_eq!(catalog.loads("t"), 1);
}

#[tokio::test]
async fn an_etag_from_one_replica_is_answered_by_another_until_a_write() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    let first = load(tier.url(0), "alice").await;
    let tag = first.headers()["etag"].to_str().unwrap().to_owned();
    let conditional = |replica: usize| {
        reqwest::Client::new()
            .get(format!("{}{TABLE}", tier.url(replica)))
            .bearer_auth("alice")
            .header("if-none-match", tag.clone())
            .send()
    };
    let not_modified = conditional(1).await.unwrap();
    assert_eq!(
        not_modified.status(),
        304,
        "the tier names a version alike on every replica"
    );
    commit(tier.url(0)).await;
    let changed = conditional(1).await.unwrap();
    assert_eq!(
        changed.status(),
        200,
        "a 304 for a version a write replaced"
    );
    assert_ne!(changed.headers()["etag"].to_str().unwrap(), tag);
}

#[tokio::test]
async fn replicas_under_different_policies_never_serve_each_others_entries() {
    let secret = std::env::temp_dir().join(crate::support::unique("icecache-rollout-secret"));
    std::fs::write(&secret, "rollout-secret").unwrap();
    let config = crate::support::ConfigFile::new(&format!(
        "credentials = \"inject\"\n[inject]\n\"s3.secret-access-key\" = {{ file = \"{}\" }}\n",
        secret.display()
    ));
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let key = crate::support::cluster::KeyFile::new();
    let url = redis.url();
    let common = [
        "--redis-url",
        &url,
        "--cluster-key-file",
        key.path(),
        "--fresh-for",
        "1h",
    ];
    let strip = crate::support::Icecache::start(
        &catalog.url,
        &[&common[..], &["--credentials", "strip"]].concat(),
    )
    .await;
    let inject = crate::support::Icecache::start(
        &catalog.url,
        &[&common[..], &["--config", config.path()]].concat(),
    )
    .await;
    let stripped = load(&strip.url, "alice").await.text().await.unwrap();
    assert!(!stripped.contains("rollout-secret"));
    let injected = load(&inject.url, "alice").await;
    assert_eq!(
        x_cache(&injected),
        "MISS",
        "an entry made under another policy"
    );
    assert!(injected.text().await.unwrap().contains("rollout-secret"));
    // A rotated secret is another policy too: the new one is never served from the old entry.
    std::fs::write(&secret, "rotated-secret").unwrap();
    crate::support::hangup(&inject, "applied").await;
    let rotated = load(&inject.url, "alice").await.text().await.unwrap();
    assert!(rotated.contains("rotated-secret") && !rotated.contains("rollout-secret"));
    let _ = std::fs::remove_file(secret);
}

#[tokio::test]
async fn three_hundred_cold_loads_over_three_replicas_make_one_catalog_fetch() {
    let catalog = standin(Shape {
        delay: Duration::from_millis(400),
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        3,
        &catalog.url,
        &redis,
        &[
            "--fresh-for",
            "1h",
            "--identity",
            "shared",
            "--credentials",
            "strip",
        ],
    )
    .await;
    let loads: Vec<_> = (0..300)
        .map(|n| {
            let url = tier.url(n).to_owned();
            tokio::spawn(async move { load(&url, &format!("caller{n}")).await.status() })
        })
        .collect();
    for load in loads {
        assert_eq!(load.await.unwrap(), 200);
    }
    assert_eq!(catalog.loads("t"), 1, "one fetch for the whole tier");
}

#[tokio::test]
async fn no_secret_is_ever_written_to_redis() {
    let secret = std::env::temp_dir().join(crate::support::unique("icecache-tier-secret"));
    std::fs::write(&secret, "injected-tier-secret").unwrap();
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    // Passthrough keeps the caller's keys: those bodies stay in each replica.
    let passthrough = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    for replica in 0..2 {
        let text = load(passthrough.url(replica), "alice")
            .await
            .text()
            .await
            .unwrap();
        assert!(
            !vended_keys(&text).is_empty(),
            "passthrough serves the caller's keys"
        );
    }
    assert_eq!(
        catalog.loads("t"),
        2,
        "a body with vended keys is not shared"
    );
    // A key icecache cannot name may hold a secret too: kept out of Redis under passthrough.
    let vendor = StandIn::start(Shape {
        vend_always: false,
        extra_config: vec![
            ("vendor.private-grant", "vendor-grant-value"),
            ("s3.endpoint", "http://s3"),
        ],
        ..Shape::default()
    })
    .await;
    vendor.create("t");
    let unknown = Tier::start(
        2,
        &vendor.url,
        &redis,
        &["--fresh-for", "1h", "--cluster-key-prefix", "vendor"],
    )
    .await;
    for replica in 0..2 {
        let text = load(unknown.url(replica), "carol")
            .await
            .text()
            .await
            .unwrap();
        assert!(text.contains("vendor-grant-value"), "passthrough serves it");
    }
    assert_eq!(
        vendor.loads("t"),
        2,
        "a body with an unknown config key is not shared"
    );
    let config = crate::support::ConfigFile::new(&format!(
        "credentials = \"inject\"\n[inject]\n\"s3.secret-access-key\" = {{ file = \"{}\" }}\n",
        secret.display()
    ));
    let inject = Tier::start(
        2,
        &catalog.url,
        &redis,
        &[
            "--config",
            config.path(),
            "--fresh-for",
            "1h",
            "--cluster-key-prefix",
            "other",
        ],
    )
    .await;
    for replica in 0..2 {
        let text = load(inject.url(replica), "bob").await.text().await.unwrap();
        assert!(text.contains("injected-tier-secret"));
    }
    let dump = redis.dump();
    assert!(
        dump.iter().any(|(k, _)| k.contains(":e:")),
        "something was shared"
    );
    for (key, value) in dump {
        let text = readable(&value);
        for secret in [
            "AK-",
            "SK-",
            "ST-",
            "SC-",
            "injected-tier-secret",
            "vendor-grant-value",
            "alice",
            "bob",
            "carol",
        ] {
            assert!(
                !text.contains(secret) && !key.contains(secret),
                "{key}: {text:.200}"
            );
        }
    }
    // Settings alone are no secret: that body is shared.
    let settings = StandIn::start(Shape {
        vend_always: false,
        extra_config: vec![("s3.endpoint", "http://s3"), ("client.region", "eu-west-1")],
        ..Shape::default()
    })
    .await;
    settings.create("t");
    let plain = Tier::start(
        2,
        &settings.url,
        &redis,
        &["--fresh-for", "1h", "--cluster-key-prefix", "plain"],
    )
    .await;
    for replica in 0..2 {
        assert_eq!(load(plain.url(replica), "carol").await.status(), 200);
    }
    assert_eq!(
        settings.loads("t"),
        1,
        "a body with settings only is shared under passthrough"
    );
    let _ = std::fs::remove_file(secret);
}

/// A value from Redis as text, with every gzip member in it (a shared body's copy) unpacked:
/// a secret inside a compressed body must be found too.
fn readable(value: &[u8]) -> String {
    use std::io::Read;
    let mut text = String::from_utf8_lossy(value).into_owned();
    for start in 0..value.len().saturating_sub(2) {
        if value[start..].starts_with(&[0x1f, 0x8b, 0x08]) {
            let mut unpacked = Vec::new();
            let mut decoder = flate2::read::GzDecoder::new(&value[start..]);
            if decoder.read_to_end(&mut unpacked).is_ok() {
                text.push_str(&String::from_utf8_lossy(&unpacked));
            }
        }
    }
    text
}

#[tokio::test]
async fn answers_that_vary_on_the_callers_token_are_never_shared() {
    let catalog = standin(Shape {
        vary: Some("Authorization"),
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    // Shared identity and stripped keys: such a body would be shared but for its Vary.
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &[
            "--fresh-for",
            "1h",
            "--credentials",
            "strip",
            "--identity",
            "shared",
        ],
    )
    .await;
    for replica in 0..2 {
        let response = load(tier.url(replica), "alice-token-in-a-vary").await;
        assert_eq!(response.status(), 200);
        assert_eq!(x_cache(&response), "MISS", "replica {replica}");
    }
    assert_eq!(
        x_cache(&load(tier.url(1), "alice-token-in-a-vary").await),
        "HIT"
    );
    assert_eq!(catalog.loads("t"), 2, "each replica asked for itself");
    let dump = redis.dump();
    assert!(
        dump.iter().all(|(key, _)| !key.contains(":e:")),
        "nothing was shared"
    );
    for (key, value) in dump {
        assert!(!readable(&value).contains("alice-token-in-a-vary"), "{key}");
    }
    let metrics = tier.replicas[0].metrics().await;
    assert!(
        metric(
            &metrics,
            "icecache_cluster_shared_total{result=\"kept_local\"}"
        ) >= 1.0
    );
}

#[tokio::test]
async fn a_tampered_shared_entry_is_a_miss_and_a_metric_never_an_error() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    load(tier.url(0), "alice").await;
    let (key, mut value) = redis
        .dump()
        .into_iter()
        .find(|(k, _)| k.contains(":e:"))
        .expect("a shared entry");
    let last = value.len() - 10;
    value[last] ^= 0x20;
    redis.set(&key, &value);
    let response = load(tier.url(1), "alice").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        x_cache(&response),
        "MISS",
        "fetched again, not served tampered"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(version_of(&body), Some(1));
    let metrics = tier.replicas[1].metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "icecache_cluster_shared_total{result=\"rejected\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn callers_stay_apart_across_replicas() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &["--fresh-for", "1h", "--credentials", "strip"],
    )
    .await;
    assert_eq!(x_cache(&load(tier.url(0), "alice").await), "MISS");
    // Per-principal: bob never gets alice's entry, on any replica.
    assert_eq!(x_cache(&load(tier.url(1), "bob").await), "MISS");
    assert_eq!(x_cache(&load(tier.url(1), "alice").await), "SHARED");
    assert_eq!(catalog.loads("t"), 2);
}

#[tokio::test]
async fn under_revalidate_an_entry_from_another_replica_still_asks_the_catalog_about_the_caller() {
    let catalog = standin(Shape::default()).await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &[
            "--fresh-for",
            "1h",
            "--identity",
            "revalidate",
            "--credentials",
            "strip",
        ],
    )
    .await;
    assert_eq!(x_cache(&load(tier.url(0), "alice").await), "MISS");
    let refused = load(tier.url(1), "forbidden").await;
    assert_eq!(
        refused.status(),
        403,
        "another replica's entry let a refused caller in"
    );
    let allowed = load(tier.url(1), "bob").await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(
        catalog.loads("t"),
        3,
        "alice's fill, then one check for each caller"
    );
}

#[tokio::test]
async fn bodies_over_the_shared_cap_stay_in_each_replica_and_are_still_coalesced() {
    let catalog = standin(Shape {
        padding: 64 << 10,
        delay: Duration::from_millis(300),
        ..Shape::default()
    })
    .await;
    let redis = Redis::start().await;
    let tier = Tier::start(
        2,
        &catalog.url,
        &redis,
        &[
            "--fresh-for",
            "1h",
            "--credentials",
            "strip",
            "--cache-gzip",
            "false",
            "--cluster-max-shared-bytes",
            "16KiB",
        ],
    )
    .await;
    for replica in 0..2 {
        let loads: Vec<_> = (0..50)
            .map(|_| {
                let url = tier.url(replica).to_owned();
                tokio::spawn(async move { load(&url, "alice").await.bytes().await.unwrap().len() })
            })
            .collect();
        for load in loads {
            assert!(load.await.unwrap() > 64 << 10);
        }
    }
    assert_eq!(
        catalog.loads("t"),
        2,
        "one fetch per replica: coalesced, not shared"
    );
    assert!(!redis.dump().iter().any(|(k, _)| k.contains(":e:")));
}

#[tokio::test]
async fn concurrent_misses_share_token_rounds() {
    let catalog = standin(Shape::default()).await;
    for n in 0..200 {
        catalog.create(&format!("m{n}"));
    }
    let redis = Redis::start().await;
    let tier = Tier::start(1, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    let before = redis.calls("mget");
    let client = reqwest::Client::new();
    let misses: Vec<_> = (0..200)
        .map(|n| {
            let request = client
                .get(format!("{}/v1/namespaces/db/tables/m{n}", tier.url(0)))
                .bearer_auth("alice");
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (response.status(), x_cache(&response).to_owned())
            })
        })
        .collect();
    for miss in misses {
        assert_eq!(
            miss.await.unwrap(),
            (reqwest::StatusCode::OK, "MISS".to_owned())
        );
    }
    let rounds = redis.calls("mget") - before;
    assert!(rounds >= 1, "misses read their tables' tokens");
    assert!(rounds < 200, "{rounds} round trips for 200 misses");
}
