//! Micro-benchmarks of the work on a cache hit: classifying the path, deriving the key,
//! matching `If-None-Match`, and hashing a body into an ETag (done once per fill).
//!
//! cargo bench --bench hot_path

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use http::{HeaderMap, HeaderValue, Method};
use icecache::cache::CacheKey;
use icecache::etag::{if_none_match_matches, strong_etag};
use icecache::identity::IdentityHasher;
use icecache::route::classify;

const PATH: &str = "/v1/warehouse/namespaces/analytics%1Fevents/tables/page_views";

fn request_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_static("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzcGFyayJ9.c2lnbmF0dXJl"),
    );
    headers.insert(
        "x-iceberg-access-delegation",
        HeaderValue::from_static("vended-credentials"),
    );
    headers
}

fn routing_and_key(c: &mut Criterion) {
    let headers = request_headers();
    let identity = IdentityHasher::random(Vec::new()).expect("random key");
    c.bench_function("classify loadTable path", |b| {
        b.iter(|| classify(&Method::GET, black_box(PATH), "%1F"))
    });
    c.bench_function("cache key from request", |b| {
        b.iter(|| {
            let route = classify(&Method::GET, black_box(PATH), "%1F").expect("route");
            let scope = identity.scope(&headers);
            CacheKey::for_load_table(&route, Some("snapshots=all"), &headers, "%1F", scope)
        })
    });
}

fn etags(c: &mut Criterion) {
    let current = strong_etag("all", b"{}");
    let single = current.clone();
    let list = HeaderValue::from_str(&format!(
        "W/\"lk2.a\", \"0123456789abcdef0123456789abcdef\", {}",
        current.to_str().expect("ascii")
    ))
    .expect("header");
    c.bench_function("if-none-match single tag", |b| {
        b.iter(|| if_none_match_matches([black_box(&single)], &current))
    });
    c.bench_function("if-none-match list of three", |b| {
        b.iter(|| if_none_match_matches([black_box(&list)], &current))
    });
    let mut group = c.benchmark_group("etag of body");
    for size in [50 << 10, 20 << 20] {
        let body = vec![b'{'; size];
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(format!("{} KiB", size >> 10), |b| {
            b.iter(|| strong_etag("all", black_box(&body)))
        });
    }
    group.finish();
}

criterion_group!(benches, routing_and_key, etags);
criterion_main!(benches);
