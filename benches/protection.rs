//! The catalog's protection, measured: how many catalog calls a herd of credential refreshes
//! from one caller costs, and how a burst of cold loads meets the bound on requests at the
//! catalog. Each round starts a fresh icecache (this build's release binary) in front of a fresh
//! stand-in catalog (the suite's, from `tests/support`) that takes its time to answer, and the
//! three rounds of each row alternate with the other rows. Exits non-zero if a round breaks a
//! promise (more than the bound at the catalog, a load answered with another table, a request
//! without an answer).
//!
//! cargo bench --bench protection [-- --rounds N]

#[allow(dead_code)] // the suite's harness, of which this benchmark uses the stand-in and icecache
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::standin::{Shape, StandIn};
use support::{metric, Icecache};

const HERD: usize = 200;
const BURST: usize = 5_000;
const TABLES: usize = 1_000;
/// How long the stand-in takes to answer a load or a refresh: a catalog that reads metadata
/// and mints credentials.
const CATALOG_DELAY: Duration = Duration::from_millis(20);

/// What one herd of refreshes came to.
struct Herd {
    calls: usize,
    answered: usize,
    bodies: usize,
    foreign: usize,
    millis: f64,
}

/// What one burst of cold loads came to.
#[derive(Default)]
struct Burst {
    answered: usize,
    refused: usize,
    lost: usize,
    mis_served: usize,
    most_at_catalog: u64,
    catalog_loads: usize,
    shed: f64,
    millis: f64,
}

/// A burst's icecache flags: the bound, the queue and its timeout.
struct Bound {
    name: &'static str,
    flags: &'static [&'static str],
    in_flight: u64,
}

const BOUNDS: [Bound; 3] = [
    Bound {
        name: "defaults (512 at the catalog, 1,024 waiting, 5 s)",
        flags: &[],
        in_flight: 512,
    },
    Bound {
        name: "64 at the catalog, 1,024 waiting, 5 s",
        flags: &["--upstream-max-in-flight", "64"],
        in_flight: 64,
    },
    Bound {
        name: "64 at the catalog, 128 waiting, 5 s",
        flags: &["--upstream-max-in-flight", "64", "--upstream-queue", "128"],
        in_flight: 64,
    },
];

async fn slow_catalog(tables: usize) -> StandIn {
    let catalog = StandIn::start(Shape {
        delay: CATALOG_DELAY,
        ..Shape::default()
    })
    .await;
    for n in 0..tables {
        catalog.create(&format!("t{n}"));
    }
    catalog
}

fn refreshes(catalog: &StandIn) -> usize {
    catalog
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/credentials"))
        .count()
}

/// 200 concurrent loadCredentials of one table from one caller, half of them over HTTP/2,
/// sent to `base` (icecache, or the catalog itself for the figure without icecache).
async fn herd(base: &str, catalog: &StandIn) -> Herd {
    let h1 = reqwest::Client::new();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("an HTTP/2 client");
    let url = format!("{base}/v1/namespaces/db/tables/t0/credentials");
    let started = Instant::now();
    let refreshes_sent: Vec<_> = (0..HERD)
        .map(|n| {
            let client = if n % 2 == 0 || base == catalog.url {
                h1.clone()
            } else {
                h2.clone()
            };
            let url = url.clone();
            tokio::spawn(async move {
                let response = client.get(url).bearer_auth("alice").send().await.ok()?;
                if response.status() != 200 {
                    return None;
                }
                response.text().await.ok()
            })
        })
        .collect();
    let mut bodies = BTreeSet::new();
    let mut answered = 0;
    for refresh in refreshes_sent {
        if let Ok(Some(body)) = refresh.await {
            answered += 1;
            bodies.insert(body);
        }
    }
    Herd {
        calls: refreshes(catalog),
        answered,
        foreign: bodies.iter().filter(|b| !b.contains("SK-alice-")).count(),
        bodies: bodies.len(),
        millis: started.elapsed().as_secs_f64() * 1e3,
    }
}

/// How one load of the burst was answered.
enum Outcome {
    /// 200 with the table asked for.
    Answered,
    /// 200 with another table's metadata.
    MisServed,
    /// 503 `ServiceUnavailableException` with `Retry-After`: refused without reaching the catalog.
    Refused,
    /// Anything else, or no answer.
    Lost,
}

async fn cold_load(client: reqwest::Client, url: String, table: usize) -> Outcome {
    let Ok(response) = client.get(url).bearer_auth("alice").send().await else {
        return Outcome::Lost;
    };
    let status = response.status();
    let retry_after = response.headers().contains_key("retry-after");
    let Ok(body) = response.json::<Value>().await else {
        return Outcome::Lost;
    };
    match status.as_u16() {
        200 => {
            let location = body["metadata-location"].as_str().unwrap_or_default();
            if location.contains(&format!("/t{table}/")) {
                Outcome::Answered
            } else {
                Outcome::MisServed
            }
        }
        503 if retry_after && body["error"]["type"] == "ServiceUnavailableException" => {
            Outcome::Refused
        }
        _ => Outcome::Lost,
    }
}

/// 5,000 cold loads over 1,000 tables, all sent at once, each on its own connection.
async fn burst(bound: &Bound) -> Burst {
    let catalog = slow_catalog(TABLES).await;
    let icecache = Icecache::start(&catalog.url, bound.flags).await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let loads: Vec<_> = (0..BURST)
        .map(|n| {
            let table = n % TABLES;
            let url = format!("{}/v1/namespaces/db/tables/t{table}", icecache.url);
            tokio::spawn(cold_load(client.clone(), url, table))
        })
        .collect();
    let mut burst = Burst::default();
    for load in loads {
        match load.await.unwrap_or(Outcome::Lost) {
            Outcome::Answered => burst.answered += 1,
            Outcome::MisServed => burst.mis_served += 1,
            Outcome::Refused => burst.refused += 1,
            Outcome::Lost => burst.lost += 1,
        }
    }
    burst.millis = started.elapsed().as_secs_f64() * 1e3;
    burst.most_at_catalog = catalog.most_loads_at_once();
    burst.catalog_loads = catalog
        .seen()
        .iter()
        .filter(|s| s.method == http::Method::GET && s.path.contains("/tables/t"))
        .count();
    burst.shed = metric(
        &icecache.metrics().await,
        r#"icecache_upstream_errors_total{kind="shed"}"#,
    );
    burst
}

/// The median of `values` and their spread, as "median [min–max]".
fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    let (low, high) = (values[0], values[values.len() - 1]);
    if low == high {
        format!("{median:.0}")
    } else {
        format!("{median:.0} [{low:.0}–{high:.0}]")
    }
}

fn rounds_asked() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
        .max(1)
}

#[tokio::main]
async fn main() {
    let rounds = rounds_asked();
    let mut direct = Vec::new();
    let mut through = Vec::new();
    let mut bursts: Vec<Vec<Burst>> = BOUNDS.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        let catalog = slow_catalog(1).await;
        direct.push(herd(&catalog.url.clone(), &catalog).await);
        let catalog = slow_catalog(1).await;
        let icecache = Icecache::start(&catalog.url, &["--credentials", "passthrough"]).await;
        through.push(herd(&icecache.url, &catalog).await);
        for (bound, results) in BOUNDS.iter().zip(&mut bursts) {
            results.push(burst(bound).await);
        }
    }
    let mut broken = Vec::new();
    println!(
        "## The catalog's protection ({rounds} alternating rounds, medians [min–max]; the \
         stand-in catalog answers after {} ms)\n",
        CATALOG_DELAY.as_millis()
    );
    println!("### A herd of {HERD} loadCredentials of one table from one caller (passthrough)\n");
    println!("| sent to | catalog calls | answered 200 | distinct answers | another caller's keys | herd ms |");
    println!("|---|---|---|---|---|---|");
    for (name, herds) in [("the catalog", &direct), ("icecache", &through)] {
        let figure = |f: fn(&Herd) -> f64| spread(herds.iter().map(f).collect());
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            figure(|h| h.calls as f64),
            figure(|h| h.answered as f64),
            figure(|h| h.bodies as f64),
            figure(|h| h.foreign as f64),
            figure(|h| h.millis),
        );
    }
    if through.iter().any(|h| h.foreign > 0 || h.answered != HERD) {
        broken.push("a refresh went unanswered or got another caller's keys".to_owned());
    }
    println!(
        "\n### A burst of {BURST} cold loads over {TABLES} tables, sent at once (one caller)\n"
    );
    println!("| bound | most at the catalog at once | catalog loads | answered 200 | refused 503 | shed (metric) | lost | mis-served | burst ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (bound, results) in BOUNDS.iter().zip(&bursts) {
        let figure = |f: fn(&Burst) -> f64| spread(results.iter().map(f).collect());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            bound.name,
            figure(|b| b.most_at_catalog as f64),
            figure(|b| b.catalog_loads as f64),
            figure(|b| b.answered as f64),
            figure(|b| b.refused as f64),
            figure(|b| b.shed),
            figure(|b| b.lost as f64),
            figure(|b| b.mis_served as f64),
            figure(|b| b.millis),
        );
        for result in results {
            if result.most_at_catalog > bound.in_flight {
                broken.push(format!(
                    "{}: {} at the catalog at once",
                    bound.name, result.most_at_catalog
                ));
            }
            if result.lost > 0 || result.mis_served > 0 {
                broken.push(format!(
                    "{}: {} lost, {} mis-served",
                    bound.name, result.lost, result.mis_served
                ));
            }
        }
    }
    if !broken.is_empty() {
        eprintln!("broken promises:\n  {}", broken.join("\n  "));
        std::process::exit(1);
    }
}
