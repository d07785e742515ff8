//! loadCredentials (`GET …/tables/{table}/credentials`) under each credential policy, and the
//! refresh herds icecache absorbs under `passthrough`. SeaweedFS does not serve this route (it
//! answers 404), so a stand-in catalog vends per-caller keys (`AK-<caller>-<n>`,
//! `SK-<caller>-<n>`, expiring after the shape's lifetime) for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::cluster::{load, Redis, Tier};
use crate::support::standin::{vended_keys, Shape, StandIn};
use crate::support::{eventually, hangup, x_cache, ConfigFile, Icecache};
use serde_json::Value;

const CREDENTIALS: &str = "/v1/namespaces/db/tables/t/credentials";

async fn standin() -> StandIn {
    let standin = StandIn::start(Shape::default()).await;
    standin.create("t");
    standin
}

async fn refresh(client: &reqwest::Client, icecache: &Icecache, who: &str) -> reqwest::Response {
    client
        .get(format!("{}{CREDENTIALS}", icecache.url))
        .bearer_auth(who)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap()
}

fn refreshes(catalog: &StandIn) -> usize {
    catalog
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/credentials"))
        .count()
}

#[tokio::test]
async fn under_inject_a_refresh_answers_the_injected_properties_for_the_vended_prefix() {
    let catalog = standin().await;
    let config = ConfigFile::new(
        "credentials = \"inject\"\n[inject]\n\
         \"s3.secret-access-key\" = { env = \"INJECTED_SK\" }\n\
         \"client.region\" = { value = \"eu-1\" }\n",
    );
    let icecache = Icecache::start_with_env(
        &catalog.url,
        &["--config", config.path()],
        &[("INJECTED_SK", "INJECTED-SK")],
    )
    .await;
    let response = refresh(&reqwest::Client::new(), &icecache, "alice").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.contains("SK-alice"), "{text}");
    assert!(!text.contains("AK-alice"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let entries = body["storage-credentials"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{text}");
    assert_eq!(entries[0]["prefix"], "s3://bucket/t");
    assert_eq!(entries[0]["config"]["s3.secret-access-key"], "INJECTED-SK");
    assert_eq!(entries[0]["config"]["client.region"], "eu-1");
}

#[tokio::test]
async fn under_strip_no_refresh_carries_a_vended_key_over_http1_or_http2() {
    let catalog = standin().await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for client in [reqwest::Client::new(), h2] {
        let response = refresh(&client, &icecache, "alice").await;
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert_eq!(vended_keys(&text), Vec::<String>::new(), "{text}");
    }
}

async fn passthrough(shape: Shape, extra: &[&str]) -> (StandIn, Icecache) {
    let catalog = StandIn::start(shape).await;
    catalog.create("t");
    let mut flags = vec!["--credentials", "passthrough", "--fresh-for", "1h"];
    flags.extend_from_slice(extra);
    let icecache = Icecache::start(&catalog.url, &flags).await;
    (catalog, icecache)
}

/// `count` refreshes of `path` by `who` at once, half over HTTP/1.1 and half over HTTP/2; each
/// answer's status, `x-cache` and body.
async fn herd(icecache: &str, who: &str, path: &str, count: usize) -> Vec<(u16, String, String)> {
    let h1 = reqwest::Client::new();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let refreshes: Vec<_> = (0..count)
        .map(|n| {
            let client = if n % 2 == 0 { h1.clone() } else { h2.clone() };
            let (url, who) = (format!("{icecache}{path}"), who.to_owned());
            tokio::spawn(async move {
                let response = client.get(url).bearer_auth(who).send().await.unwrap();
                let cache = x_cache(&response);
                (
                    response.status().as_u16(),
                    cache,
                    response.text().await.unwrap(),
                )
            })
        })
        .collect();
    let mut answers = Vec::new();
    for refresh in refreshes {
        answers.push(refresh.await.unwrap());
    }
    answers
}

fn phases(answers: &[(u16, String, String)]) -> BTreeMap<String, usize> {
    let mut phases = BTreeMap::new();
    for (_, phase, _) in answers {
        *phases.entry(phase.clone()).or_default() += 1;
    }
    phases
}

#[tokio::test]
async fn under_passthrough_a_herd_of_200_refreshes_from_one_caller_makes_one_catalog_call() {
    let (catalog, icecache) = passthrough(Shape::default(), &[]).await;
    catalog.hold_loads();
    let url = icecache.url.clone();
    let answers = tokio::spawn(async move { herd(&url, "alice", CREDENTIALS, 200).await });
    eventually("the first refresh at the catalog", || async {
        refreshes(&catalog) >= 1
    })
    .await;
    catalog.release_loads();
    let answers = answers.await.unwrap();
    assert_eq!(
        refreshes(&catalog),
        1,
        "one catalog call for the whole herd"
    );
    let bodies: BTreeSet<&String> = answers.iter().map(|(_, _, body)| body).collect();
    assert_eq!(bodies.len(), 1, "every caller got the one answer");
    assert!(answers.iter().all(|(status, _, _)| *status == 200));
    assert!(
        bodies.iter().all(|body| body.contains("SK-alice-")),
        "{bodies:?}"
    );
    let phases = phases(&answers);
    assert_eq!(phases.get("MISS"), Some(&1), "{phases:?}");
    assert_eq!(
        phases.get("COALESCED").unwrap_or(&0) + phases.get("HIT").unwrap_or(&0),
        199,
        "{phases:?}"
    );
}

#[tokio::test]
async fn under_passthrough_each_caller_and_each_plan_gets_its_own_keys_never_anothers() {
    let (catalog, icecache) = passthrough(Shape::default(), &[]).await;
    catalog.hold_loads();
    let url = icecache.url.clone();
    let herds: Vec<_> = [
        ("alice", CREDENTIALS.to_owned()),
        ("bob", CREDENTIALS.to_owned()),
        ("alice", format!("{CREDENTIALS}?planId=p1")),
    ]
    .into_iter()
    .map(|(who, path)| {
        let url = url.clone();
        tokio::spawn(async move {
            let answers = herd(&url, who, &path, 40).await;
            (who, path, answers)
        })
    })
    .collect();
    eventually("a refresh of each herd at the catalog", || async {
        refreshes(&catalog) >= 3
    })
    .await;
    catalog.release_loads();
    let mut seen = BTreeSet::new();
    for herd in herds {
        let (who, path, answers) = herd.await.unwrap();
        let other = if who == "alice" { "bob" } else { "alice" };
        for (status, _, body) in &answers {
            assert_eq!(*status, 200);
            assert!(body.contains(&format!("SK-{who}-")), "{who} {path}: {body}");
            assert!(
                !body.contains(&format!("SK-{other}-")),
                "{who} {path}: {body}"
            );
            let plan = if path.contains("planId") {
                "planId=p1"
            } else {
                ""
            };
            assert!(
                body.contains(&format!("\"plan\":\"{plan}\"")),
                "{path}: {body}"
            );
        }
        let bodies: BTreeSet<&String> = answers.iter().map(|(_, _, b)| b).collect();
        assert_eq!(bodies.len(), 1, "{who} {path}");
        seen.extend(bodies.into_iter().cloned());
    }
    assert_eq!(seen.len(), 3, "three herds, three answers");
    assert_eq!(
        refreshes(&catalog),
        3,
        "one catalog call per caller and plan"
    );
}

#[tokio::test]
async fn under_passthrough_a_repeat_refresh_is_answered_from_memory_while_half_the_lifetime_remains(
) {
    let (catalog, icecache) = passthrough(Shape::default(), &[]).await;
    let client = reqwest::Client::new();
    let first = refresh(&client, &icecache, "alice").await;
    assert_eq!(x_cache(&first), "MISS");
    let first = first.text().await.unwrap();
    let again = refresh(&client, &icecache, "alice").await;
    assert_eq!(x_cache(&again), "HIT");
    assert_eq!(again.text().await.unwrap(), first);
    assert_eq!(refreshes(&catalog), 1);
}

#[tokio::test]
async fn under_passthrough_credentials_already_spent_are_never_kept() {
    // Vended with no time left: nothing may be kept, each refresh is the catalog's.
    let shape = Shape {
        lifetime: Duration::ZERO,
        ..Shape::default()
    };
    let (catalog, icecache) = passthrough(shape, &[]).await;
    let client = reqwest::Client::new();
    for n in 1..=3 {
        let response = refresh(&client, &icecache, "alice").await;
        assert_eq!(x_cache(&response), "MISS");
        assert!(response
            .text()
            .await
            .unwrap()
            .contains(&format!("SK-alice-{n}")));
    }
    assert_eq!(refreshes(&catalog), 3);
}

#[tokio::test]
async fn under_passthrough_a_refresh_the_catalog_marks_unkeepable_is_never_kept() {
    let shapes = [
        (
            "no-store",
            Shape {
                no_store: true,
                ..Shape::default()
            },
        ),
        (
            "vary",
            Shape {
                vary: Some("X-Tenant"),
                ..Shape::default()
            },
        ),
        (
            "gzip anyway",
            Shape {
                gzip: true,
                ..Shape::default()
            },
        ),
        (
            "not JSON",
            Shape {
                content_type: "text/plain",
                ..Shape::default()
            },
        ),
        (
            "an error",
            Shape {
                status: Some(503),
                ..Shape::default()
            },
        ),
    ];
    for (what, shape) in shapes {
        let (catalog, icecache) = passthrough(shape, &[]).await;
        let client = reqwest::Client::new();
        for _ in 0..3 {
            let response = refresh(&client, &icecache, "alice").await;
            assert_eq!(x_cache(&response), "MISS", "{what}");
        }
        assert_eq!(
            refreshes(&catalog),
            3,
            "{what}: each refresh reached the catalog"
        );
    }
}

#[tokio::test]
async fn under_passthrough_a_refresh_with_a_parameter_icecache_does_not_key_goes_to_the_catalog() {
    let (catalog, icecache) = passthrough(Shape::default(), &[]).await;
    let client = reqwest::Client::new();
    for query in [
        "planId=a&planId=b",
        "planId=a;b",
        "other=1",
        "planid=a",
        "planId=%zz",
    ] {
        for _ in 0..2 {
            let response = client
                .get(format!("{}{CREDENTIALS}?{query}", icecache.url))
                .bearer_auth("alice")
                .send()
                .await
                .unwrap();
            assert_eq!(x_cache(&response), "BYPASS", "{query}");
        }
    }
    assert_eq!(refreshes(&catalog), 10, "every refresh reached the catalog");
}

#[tokio::test]
async fn under_passthrough_a_write_through_icecache_forgets_the_kept_refreshes() {
    let (catalog, icecache) = passthrough(Shape::default(), &[]).await;
    let client = reqwest::Client::new();
    assert_eq!(refresh(&client, &icecache, "alice").await.status(), 200);
    let dropped = client
        .delete(format!("{}/v1/namespaces/db/tables/t", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert_eq!(dropped.status(), 204);
    let after = refresh(&client, &icecache, "alice").await;
    assert_eq!(
        after.status(),
        404,
        "the dropped table's keys are not served"
    );
    assert_eq!(refreshes(&catalog), 2);
}

#[tokio::test]
async fn a_refresh_kept_under_passthrough_is_not_served_once_a_reload_switches_to_strip() {
    let catalog = standin().await;
    let config = ConfigFile::new("credentials = \"passthrough\"\n[cache]\nfresh_for = \"1h\"\n");
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let client = reqwest::Client::new();
    let kept = refresh(&client, &icecache, "alice")
        .await
        .text()
        .await
        .unwrap();
    assert!(kept.contains("SK-alice-"), "{kept}");
    config.rewrite("credentials = \"strip\"\n[cache]\nfresh_for = \"1h\"\n");
    hangup(&icecache, "applied").await;
    let stripped = refresh(&client, &icecache, "alice")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(vended_keys(&stripped), Vec::<String>::new(), "{stripped}");
    assert_eq!(refreshes(&catalog), 2);
}

#[tokio::test]
async fn under_passthrough_a_kept_refresh_stays_in_its_replica_and_never_enters_redis() {
    let redis = Redis::start().await;
    // Loads vend nothing, so their entries are shared: Redis is seen to fill.
    let catalog = StandIn::start(Shape {
        vend_always: false,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let tier = Tier::start(2, &catalog.url, &redis, &["--fresh-for", "1h"]).await;
    let client = reqwest::Client::new();
    for replica in [0, 1, 0, 1] {
        let response = client
            .get(format!("{}{CREDENTIALS}", tier.url(replica)))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.text().await.unwrap().contains("SK-alice-"));
    }
    assert_eq!(
        refreshes(&catalog),
        2,
        "each replica asked once, and kept its own"
    );
    assert_eq!(load(tier.url(0), "alice").await.status(), 200);
    let what = "Redis holding the shared load";
    eventually(what, || async {
        redis.text().contains("metadata-location")
    })
    .await;
    assert!(!redis.text().contains("SK-alice"), "no refresh in Redis");
}
