//! Micro-benchmarks of the work on a cache hit: classifying the path, deriving the key,
//! matching `If-None-Match`; and of the work done once per fill: hashing a body into an ETag,
//! stripping vended credentials (one walk over the whole body) and, under passthrough, looking
//! for a secret's name anywhere in it.
//!
//! cargo bench --bench hot_path

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use http::{HeaderMap, HeaderValue, Method};
use icecache::cache::CacheKey;
use icecache::catalog::route::classify;
use icecache::policy::credentials::{inspect, strip, Layout};
use icecache::policy::identity::{identity_headers, IdentityHasher};
use icecache::policy::KeyPatterns;
use icecache::wire::etag::{if_none_match_matches, strong_etag};

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
    let identity = IdentityHasher::random(identity_headers(&[])).expect("random key");
    c.bench_function("classify loadTable path", |b| {
        b.iter(|| classify(&Method::GET, black_box(PATH), "%1F"))
    });
    c.bench_function("cache key from request", |b| {
        b.iter(|| {
            let route = classify(&Method::GET, black_box(PATH), "%1F").expect("route");
            let scope = identity.scope(&headers);
            CacheKey::for_load(route, PATH, Some("snapshots=all"), &headers, "%1F", scope)
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

/// A LoadTableResult of about `size` bytes with vended S3 credentials, in the spec's shape.
fn vended_body(size: usize) -> Vec<u8> {
    let snapshot = |i: usize| {
        format!(
            r#"{{"snapshot-id":{i},"timestamp-ms":1760000000000,"manifest-list":"s3://b/db/t/metadata/snap-{i}.avro","summary":{{"operation":"append","added-records":"250000"}},"schema-id":0}}"#
        )
    };
    let mut snapshots = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < size {
        let s = snapshot(i);
        total += s.len() + 1;
        snapshots.push(s);
        i += 1;
    }
    format!(
        r#"{{"metadata-location":"s3://b/db/t/metadata/v9.json","metadata":{{"format-version":2,"table-uuid":"u","snapshots":[{}]}},"config":{{"s3.access-key-id":"AK","s3.secret-access-key":"SK","s3.session-token":"ST","s3.session-token-expires-at-ms":"1893456000000","s3.endpoint":"http://s3"}},"storage-credentials":[{{"prefix":"s3://b/db","config":{{"s3.access-key-id":"AK2"}}}}]}}"#,
        snapshots.join(",")
    )
    .into_bytes()
}

fn credentials(c: &mut Criterion) {
    let patterns = KeyPatterns::default();
    let mut group = c.benchmark_group("credential strip of a LoadTableResult");
    for size in [50 << 10, 20 << 20] {
        let body = vended_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{} KiB", size >> 10), |b| {
            b.iter(|| strip(black_box(&body), &patterns, Layout::ConfigFirst, &[]).expect("strips"))
        });
    }
    group.finish();
    // The walk alone, over the whole body: nothing to find, then the strip keys to look for.
    let mut group = c.benchmark_group("json walk of a 20 MiB LoadTableResult");
    let body = vended_body(20 << 20);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("no name wanted", |b| {
        b.iter(|| icecache::wire::json_walk::count_named(black_box(&body), |_| false))
    });
    group.bench_function("the strip keys", |b| {
        b.iter(|| icecache::wire::json_walk::count_named(black_box(&body), |k| patterns.matches(k)))
    });
    group.finish();
    // Under passthrough: what the body vends, and whether a secret's name is anywhere in it.
    let mut group = c.benchmark_group("credential inspection of a LoadTableResult");
    for size in [50 << 10, 20 << 20] {
        let body = vended_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{} KiB", size >> 10), |b| {
            b.iter(|| inspect(black_box(&body), &patterns).expect("reads"))
        });
    }
    group.finish();
}

criterion_group!(benches, routing_and_key, etags, credentials);
criterion_main!(benches);
