//! Randomized interleavings of loads, commits, purges, reloads and policy changes across many
//! callers (coalesced, gzip, HTTP/1.1 and HTTP/2, conditional and not), against the stand-in
//! catalog that vends keys made for each caller. After every answer the checker asks: did any
//! caller see another caller's key, an expired or rotated-out secret, a secret under a policy
//! that strips it, or a table state older than the last write answered before its request?
//! The order is random but seeded: a failure names its seed and replays.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::standin::{vended_keys, version_of, Shape, StandIn};
use crate::support::{hangup, ConfigFile, Icecache};
use serde_json::Value;

/// A small seeded generator (PCG-style LCG): reproducible, no dependency.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }

    /// A Zipf-like pick among `n`: small numbers far more often.
    fn skewed(&mut self, n: u64) -> u64 {
        let a = self.below(n);
        let b = self.below(a + 1);
        self.below(b + 1)
    }
}

fn seed() -> u64 {
    std::env::var("ICECACHE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1ce_cac4e)
}

/// Highest version of each table a commit through icecache has acknowledged so far.
#[derive(Default)]
struct Floors(Mutex<HashMap<String, u64>>);

impl Floors {
    fn get(&self, table: &str) -> u64 {
        self.0.lock().unwrap().get(table).copied().unwrap_or(1)
    }

    fn raise(&self, table: &str, version: u64) {
        let mut floors = self.0.lock().unwrap();
        let floor = floors.entry(table.to_owned()).or_insert(1);
        *floor = (*floor).max(version);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Credentials {
    Passthrough,
    Strip,
    Inject,
}

#[derive(Clone, Debug)]
struct Policy {
    identity: &'static str,
    credentials: Credentials,
    /// The injected secret in force under this phase.
    injected: String,
}

/// What a body may hold under `policy` for `caller`; Err says why not.
fn check_body(text: &str, caller: &str, policy: &Policy) -> Result<(), String> {
    let body: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let keys = vended_keys(text);
    match policy.credentials {
        Credentials::Passthrough => {
            for key in &keys {
                let owner = key.split_once('-').map_or("", |(_, owner)| owner);
                if !owner.starts_with(&format!("{caller}-")) {
                    return Err(format!("{caller} got {key}"));
                }
            }
            if let Some(expiry) = body["config"]["s3.session-token-expires-at-ms"].as_str() {
                let expiry: u64 = expiry.parse().unwrap_or(0);
                if expiry <= now_ms() {
                    return Err(format!("an expired credential (at {expiry})"));
                }
            }
        }
        Credentials::Strip | Credentials::Inject => {
            if !keys.is_empty() {
                return Err(format!("secrets under {:?}: {keys:?}", policy.credentials));
            }
            let injected = body["config"]["s3.secret-access-key"].as_str();
            let expected =
                (policy.credentials == Credentials::Inject).then_some(policy.injected.as_str());
            if injected != expected {
                return Err(format!("injected {injected:?}, in force {expected:?}"));
            }
        }
    }
    Ok(())
}

struct Run {
    icecache: Icecache,
    h1: reqwest::Client,
    h2: reqwest::Client,
    floors: Floors,
    /// Index into `policies` of the phase last confirmed applied, and of the one being applied.
    applied: AtomicUsize,
    started: AtomicUsize,
    policies: Mutex<Vec<Policy>>,
    /// Per caller: ETag → (body text, version) as received.
    tags: Mutex<HashMap<(String, String), (String, u64)>>,
    violations: Mutex<Vec<String>>,
    answers: AtomicU64,
}

impl Run {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn allowed(&self, from: usize, to: usize) -> Vec<Policy> {
        let policies = self.policies.lock().unwrap();
        (from..=to.min(policies.len() - 1))
            .map(|i| policies[i].clone())
            .collect()
    }

    async fn load(&self, rng: &mut Rng, caller: &str, table: &str) {
        let floor = self.floors.get(table);
        let from = self.applied.load(Ordering::SeqCst);
        let client = if rng.below(3) == 0 {
            &self.h2
        } else {
            &self.h1
        };
        let gzip = rng.below(2) == 0;
        let mut request = client
            .get(format!(
                "{}/v1/namespaces/db/tables/{table}",
                self.icecache.url
            ))
            .bearer_auth(caller);
        if rng.below(3) == 0 {
            request = request.header("x-iceberg-access-delegation", "vended-credentials");
        }
        if gzip {
            request = request.header("accept-encoding", "gzip");
        }
        let remembered: Vec<String> = self
            .tags
            .lock()
            .unwrap()
            .keys()
            .filter(|(c, _)| c == caller)
            .map(|(_, tag)| tag.clone())
            .collect();
        if !remembered.is_empty() && rng.below(2) == 0 {
            let tag = &remembered[rng.below(remembered.len() as u64) as usize];
            request = request.header("if-none-match", tag);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return self.violation(format!("{caller} {table}: no answer: {e:?}")),
        };
        let to = self.started.load(Ordering::SeqCst);
        let status = response.status();
        let tag = response
            .headers()
            .get("etag")
            .and_then(|t| t.to_str().ok())
            .map(str::to_owned);
        let encoded = response.headers().get("content-encoding").is_some();
        let bytes = response.bytes().await.unwrap_or_default();
        self.answers.fetch_add(1, Ordering::Relaxed);
        let policies = self.allowed(from, to);
        let (text, version) = match status.as_u16() {
            200 => {
                let text = if encoded {
                    let mut decoded = String::new();
                    if flate2::read::GzDecoder::new(&bytes[..])
                        .read_to_string(&mut decoded)
                        .is_err()
                    {
                        return self.violation(format!("{caller} {table}: bad gzip"));
                    }
                    decoded
                } else {
                    String::from_utf8_lossy(&bytes).into_owned()
                };
                let version = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|b| version_of(&b))
                    .unwrap_or(0);
                if let Some(tag) = &tag {
                    self.tags
                        .lock()
                        .unwrap()
                        .insert((caller.to_owned(), tag.clone()), (text.clone(), version));
                }
                (text, version)
            }
            304 => {
                let Some(tag) = tag else {
                    return self.violation(format!("{caller} {table}: a 304 without ETag"));
                };
                let Some(seen) = self
                    .tags
                    .lock()
                    .unwrap()
                    .get(&(caller.to_owned(), tag.clone()))
                    .cloned()
                else {
                    return self.violation(format!("{caller} {table}: 304 for a tag never sent"));
                };
                seen
            }
            other => {
                return self.violation(format!(
                    "{caller} {table}: status {other}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            }
        };
        if version < floor {
            self.violation(format!(
                "{caller} {table}: version {version} after a commit to {floor} was answered ({status})"
            ));
        }
        let verdicts: Vec<Result<(), String>> = policies
            .iter()
            .map(|p| check_body(&text, caller, p))
            .collect();
        if verdicts.iter().all(Result::is_err) {
            self.violation(format!("{caller} {table} ({status}): {verdicts:?}"));
        }
    }

    async fn commit(&self, caller: &str, table: &str) {
        let response = self
            .h1
            .post(format!(
                "{}/v1/namespaces/db/tables/{table}",
                self.icecache.url
            ))
            .bearer_auth(caller)
            .json(&serde_json::json!({ "requirements": [], "updates": [] }))
            .send()
            .await;
        match response {
            Ok(r) if r.status() == 200 => {
                let body: Value = r.json().await.unwrap_or_default();
                match version_of(&body) {
                    Some(version) => self.floors.raise(table, version),
                    None => self.violation(format!("commit {table}: no version in {body}")),
                }
            }
            Ok(r) => self.violation(format!("commit {table}: {}", r.status())),
            Err(e) => self.violation(format!("commit {table}: {e}")),
        }
    }

    async fn purge(&self, table: &str) {
        let purged = self
            .h1
            .post(format!(
                "{}/cache/purge?namespace=db&table={table}",
                self.icecache.admin
            ))
            .send()
            .await;
        if !purged.is_ok_and(|r| r.status() == 200) {
            self.violation(format!("purge {table} failed"));
        }
    }
}

fn config_text(policy: &Policy, secret: &std::path::Path) -> String {
    let credentials = match policy.credentials {
        Credentials::Passthrough => "passthrough",
        Credentials::Strip => "strip",
        Credentials::Inject => "inject",
    };
    format!(
        "identity = \"{}\"\ncredentials = \"{credentials}\"\n\
         [inject]\n\"s3.secret-access-key\" = {{ file = \"{}\" }}\n\
         [cache]\nfresh_for = \"40ms\"\nstale_while_revalidate = \"20ms\"\n",
        policy.identity,
        secret.display()
    )
}

/// Loads, commits and purges from many callers at once while the policy changes under them.
#[tokio::test]
async fn no_caller_ever_sees_anothers_key_a_stale_secret_or_a_state_older_than_its_write() {
    let seed = seed();
    let catalog = StandIn::start(Shape {
        etag: true,
        lifetime: Duration::from_millis(1500),
        ..Shape::default()
    })
    .await;
    catalog.stop_recording();
    let tables: Vec<String> = (0..8).map(|n| format!("t{n}")).collect();
    for table in &tables {
        catalog.create(table);
    }
    let phases: Vec<(&str, Credentials)> = vec![
        ("per-principal", Credentials::Passthrough),
        ("per-principal", Credentials::Strip),
        ("shared", Credentials::Strip),
        ("revalidate", Credentials::Strip),
        ("shared", Credentials::Inject),
        ("revalidate", Credentials::Inject),
        ("per-principal", Credentials::Inject),
        ("per-principal", Credentials::Passthrough),
        ("revalidate", Credentials::Inject),
    ];
    let secret = std::env::temp_dir().join(crate::support::unique("icecache-random-secret"));
    let policy = |i: usize| Policy {
        identity: phases[i].0,
        credentials: phases[i].1,
        injected: format!("injected-{i}"),
    };
    std::fs::write(&secret, policy(0).injected).unwrap();
    let config = ConfigFile::new(&config_text(&policy(0), &secret));
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let run = Arc::new(Run {
        icecache,
        h1: pooled(),
        h2: reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap(),
        floors: Floors::default(),
        applied: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        policies: Mutex::new(vec![policy(0)]),
        tags: Mutex::default(),
        violations: Mutex::default(),
        answers: AtomicU64::new(0),
    });
    let callers = ["alice", "bob", "carol", "dave", "erin"];
    let mut rng = Rng(seed);
    for phase in 1..phases.len() {
        // Half a burst under the old policy, the reload in the middle of it, the rest after.
        let mut burst = Vec::new();
        for step in 0..240 {
            if step == 120 {
                let next = policy(phase);
                run.policies.lock().unwrap().push(next.clone());
                run.started.store(phase, Ordering::SeqCst);
                std::fs::write(&secret, &next.injected).unwrap();
                config.rewrite(&config_text(&next, &secret));
                let reloader = run.clone();
                burst.push(tokio::spawn(async move {
                    hangup(&reloader.icecache, "applied").await;
                    reloader.applied.store(phase, Ordering::SeqCst);
                }));
            }
            let caller = callers[rng.below(callers.len() as u64) as usize];
            let table = tables[rng.skewed(tables.len() as u64) as usize].clone();
            let mut task_rng = Rng(rng.below(u64::MAX));
            let run = run.clone();
            let op = rng.below(100);
            burst.push(tokio::spawn(async move {
                match op {
                    0..=11 => run.commit(caller, &table).await,
                    12..=15 => run.purge(&table).await,
                    _ => run.load(&mut task_rng, caller, &table).await,
                }
            }));
            if rng.below(4) == 0 {
                tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
            }
        }
        for task in burst {
            task.await.unwrap();
        }
        // Past the reload, everyone is on the new policy.
        run.applied.store(phase, Ordering::SeqCst);
    }
    let _ = std::fs::remove_file(&secret);
    let violations = run.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} of {} answers broke a promise; first ones: {:#?}",
        violations.len(),
        run.answers.load(Ordering::Relaxed),
        &violations[..violations.len().min(10)]
    );
    assert!(run.answers.load(Ordering::Relaxed) > 1000);
}

/// Sixteen callers on a skewed trace over many tables, each loading right after its own
/// commit: no load ever sees a state older than a commit answered before it was sent.
#[tokio::test]
async fn every_load_after_a_commit_reflects_it_under_a_busy_skewed_workload() {
    let seed = seed();
    let catalog = StandIn::start(Shape {
        delay: Duration::from_millis(5),
        ..Shape::default()
    })
    .await;
    catalog.stop_recording();
    let tables: Vec<String> = (0..1000).map(|n| format!("z{n}")).collect();
    for table in &tables {
        catalog.create(table);
    }
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let run = Arc::new(Run {
        icecache,
        h1: pooled(),
        h2: reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap(),
        floors: Floors::default(),
        applied: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        policies: Mutex::new(vec![Policy {
            identity: "per-principal",
            credentials: Credentials::Passthrough,
            injected: String::new(),
        }]),
        tags: Mutex::default(),
        violations: Mutex::default(),
        answers: AtomicU64::new(0),
    });
    let commits = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..16u64 {
        let (run, tables, commits) = (run.clone(), tables.clone(), commits.clone());
        workers.push(tokio::spawn(async move {
            let mut rng = Rng(seed ^ (worker + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            // The trace is shared by all: every caller is one principal, so entries are shared.
            while commits.load(Ordering::Relaxed) < 2000 {
                let table = &tables[rng.skewed(tables.len() as u64) as usize];
                if rng.below(100) < 5 {
                    commits.fetch_add(1, Ordering::Relaxed);
                    run.commit("trace", table).await;
                }
                run.load(&mut rng, "trace", table).await;
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let violations = run.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} stale or wrong answers of {}: {:#?}",
        violations.len(),
        run.answers.load(Ordering::Relaxed),
        &violations[..violations.len().min(10)]
    );
}

/// An HTTP/1.1 client whose pool lets a connection go well before icecache's `idle_timeout`
/// (75 s) closes it, as a well-configured client does: a request never races that close.
fn pooled() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}
