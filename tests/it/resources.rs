//! What icecache holds stays bounded and what it owes its operator stays responsive: memory near
//! `cache.max_bytes` however small the entries, no bookkeeping left behind by entries that are
//! gone, idle connections closed, and the health port answering while the proxy is busy.

use std::time::{Duration, Instant};

use crate::support::standin::{Shape, StandIn};
use crate::support::{get_json, h2_connection, rss_bytes, Icecache, PATIENCE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn memory_stays_near_max_bytes_with_many_small_entries() {
    let catalog = StandIn::start(Shape::default()).await;
    catalog.create("t");
    catalog.stop_recording();
    let icecache = Icecache::start(
        &catalog.url,
        &["--cache-max-bytes", "32MiB", "--fresh-for", "1h"],
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let baseline = rss_bytes(icecache.pid());
    // 40,000 callers, each with its own entry (a body of about 2 KiB and its gzip copy): 32 MiB
    // holds about a fifth, so most fills evict.
    let callers = 40_000u32;
    let mut next = 0u32;
    while next < callers {
        let batch: Vec<_> = (next..(next + 64).min(callers))
            .map(|n| {
                let request = client.get(&url).bearer_auth(format!("caller{n}"));
                tokio::spawn(async move { request.send().await.unwrap().bytes().await.unwrap() })
            })
            .collect();
        for load in batch {
            assert!(!load.await.unwrap().is_empty());
        }
        next += 64;
    }
    let stats = get_json(&format!("{}/cache/stats", icecache.admin)).await;
    let cached = stats["bytes"].as_u64().unwrap();
    assert!(cached <= 32 << 20, "{stats}");
    let rss = rss_bytes(icecache.pid());
    let bound = baseline + (32u64 << 20) * 115 / 100 + (16 << 20);
    assert!(
        rss <= bound,
        "RSS {} MiB for {} MiB cached (baseline {} MiB): over {} MiB",
        rss >> 20,
        cached >> 20,
        baseline >> 20,
        bound >> 20
    );
}

#[tokio::test]
async fn entries_a_revalidation_found_gone_leave_nothing_for_a_purge_to_find() {
    let catalog = StandIn::start(Shape::default()).await;
    let tables: Vec<String> = (0..50).map(|n| format!("t{n}")).collect();
    for table in &tables {
        catalog.create(table);
    }
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "100ms"]).await;
    let client = reqwest::Client::new();
    let load = |table: &str| {
        client
            .get(format!("{}/v1/namespaces/db/tables/{table}", icecache.url))
            .bearer_auth("alice")
            .send()
    };
    for table in &tables {
        assert_eq!(load(table).await.unwrap().status(), 200);
    }
    catalog.reshape(|s| s.status = Some(404));
    tokio::time::sleep(Duration::from_millis(150)).await;
    for table in &tables {
        assert_eq!(load(table).await.unwrap().status(), 404);
    }
    let stats = get_json(&format!("{}/cache/stats", icecache.admin)).await;
    assert_eq!(stats["entries"], 0, "{stats}");
    let purged: serde_json::Value = client
        .post(format!("{}/cache/purge", icecache.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        purged["purged"], 0,
        "the index kept keys of removed entries"
    );
}

#[tokio::test]
async fn idle_http2_and_http1_connections_are_closed_after_the_idle_timeout() {
    let catalog = StandIn::start(Shape::default()).await;
    catalog.create("t");
    let icecache = Icecache::start(&catalog.url, &["--idle-timeout", "1s"]).await;
    let address = icecache.url.trim_start_matches("http://").to_owned();

    let (mut sender, h2) = h2_connection(&address).await;
    let request = http::Request::get(format!("http://{address}/v1/namespaces/db/tables/t"))
        .header("authorization", "Bearer alice")
        .body(http_body_util::Empty::new())
        .unwrap();
    assert_eq!(sender.send_request(request).await.unwrap().status(), 200);
    let closed = tokio::time::timeout(PATIENCE, h2).await;
    assert!(closed.is_ok(), "an idle HTTP/2 connection stayed open");

    // HTTP/1.1 keep-alive: one request, then nothing.
    let mut h1 = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET /v1/namespaces/db/tables/t HTTP/1.1\r\nHost: {address}\r\n\
         Authorization: Bearer alice\r\n\r\n"
    );
    h1.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    h1.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, h1.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "an idle HTTP/1.1 connection stayed open");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before it was idle"
    );

    // A connection that never says anything is idle from the start.
    let mut silent = tokio::net::TcpStream::connect(&address).await.unwrap();
    let read = tokio::time::timeout(PATIENCE, silent.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "a silent connection stayed open");
}

// Several threads: the stand-in builds its 96 MB answer on one of them, the probe runs on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn health_answers_while_the_proxy_processes_a_large_body() {
    let catalog = StandIn::start(Shape {
        padding: 96 << 20,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let icecache = Icecache::start(
        &catalog.url,
        &[
            "--workers",
            "1",
            "--credentials",
            "strip",
            "--cache-max-bytes",
            "1GiB",
            "--cache-max-entry-bytes",
            "256MiB",
        ],
    )
    .await;
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    let big = tokio::spawn(async move {
        let response = reqwest::get(&url).await.unwrap();
        (response.status(), response.bytes().await.unwrap().len())
    });
    // Probed from a plain thread with blocking sockets, so that nothing in this test process
    // (the stand-in building its answer, say) can delay the probe itself.
    let admin = icecache.admin.trim_start_matches("http://").to_owned();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let prober = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut slowest, mut answered) = (Duration::ZERO, 0u32);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let started = Instant::now();
            let mut stream = std::net::TcpStream::connect(&admin).unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            slowest = slowest.max(started.elapsed());
            answered += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        (slowest, answered)
    });
    while !big.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (slowest, answered) = prober.join().unwrap();
    let (status, length) = big.await.unwrap();
    assert_eq!(status, 200);
    assert!(length > 96 << 20);
    // Answered again and again while the body was processed (how fast is the benchmarks' to
    // say; the slowest is printed).
    eprintln!("/healthz answered {answered} times while a large body was processed, the slowest in {slowest:?}");
    assert!(
        answered >= 3,
        "/healthz answered {answered} times while a large body was processed"
    );
}

#[tokio::test]
async fn revalidate_confirmations_stay_within_the_cache_bound() {
    let catalog = StandIn::start(Shape {
        etag: true,
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    catalog.stop_recording();
    let icecache = Icecache::start(
        &catalog.url,
        &[
            "--identity",
            "revalidate",
            "--credentials",
            "strip",
            "--cache-max-bytes",
            "1MiB",
            "--authz-ttl",
            "1h",
            "--fresh-for",
            "1h",
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/namespaces/db/tables/t", icecache.url);
    // Every caller is confirmed with the catalog's 304 and remembered: 10,000 of them.
    for batch in 0..(10_000 / 50) {
        let loads: Vec<_> = (0..50)
            .map(|n| {
                let request = client.get(&url).bearer_auth(format!("caller{batch}-{n}"));
                tokio::spawn(async move { request.send().await.unwrap().status() })
            })
            .collect();
        for load in loads {
            assert_eq!(load.await.unwrap(), 200);
        }
    }
    let stats = get_json(&format!("{}/cache/stats", icecache.admin)).await;
    assert!(stats["bytes"].as_u64().unwrap() <= 1 << 20, "{stats}");
    let confirmed = stats["confirmed_callers"].as_u64().unwrap();
    assert!(confirmed > 0 && confirmed < 1000, "{stats}");
}
