//! What a client sees on every loadTable answer, whatever produced it: `x-cache` always, only
//! icecache's own ETag (spelled `ETag`), the headers a 304 owes its 200, gzip only when the
//! client takes it, and an admin token compared the way RFC 9110 compares schemes. The catalog
//! is the stand-in where an answer shape no catalog here gives is needed.

use std::time::Duration;

use crate::support::standin::{Shape, StandIn};
use crate::support::{metric, ports, raw_get_head, Icecache};
use reqwest::header::{ETAG, IF_NONE_MATCH};

const TABLE: &str = "/v1/namespaces/db/tables/t";
const ALICE: &str = "Authorization: Bearer alice\r\n";

async fn standin(shape: Shape) -> StandIn {
    let standin = StandIn::start(shape).await;
    standin.create("t");
    standin
}

async fn load(icecache: &Icecache, query: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}{TABLE}{query}", icecache.url))
        .bearer_auth("alice");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn icecaches_own_502_on_load_table_says_x_cache() {
    let icecache = Icecache::start(&ports::nothing_listens(), &[]).await;
    let response = load(&icecache, "", &[]).await;
    assert_eq!(response.status(), 502);
    assert!(response.headers().contains_key("x-cache"));
}

#[tokio::test]
async fn the_catalogs_etag_never_reaches_a_client_on_any_answer() {
    let catalog = standin(Shape {
        etag: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let cached = load(&icecache, "", &[]).await;
    assert_ne!(cached.headers()[ETAG], "\"v1\"");
    let bypassed = load(&icecache, "?unknown=1", &[]).await;
    assert_eq!(bypassed.headers()["x-cache"], "BYPASS");
    assert!(bypassed.headers().get(ETAG).is_none_or(|t| t != "\"v1\""));
    catalog.reshape(|s| s.no_store = true);
    let no_store = load(&icecache, "?snapshots=refs", &[]).await;
    assert!(no_store.headers().get(ETAG).is_none_or(|t| t != "\"v1\""));
}

/// A read icecache cannot name that a servlet catalog routes to the table's load (`;`
/// parameters) carries no validator of the catalog's, and the catalog's tag gets no 304 there.
#[tokio::test]
async fn a_load_spelled_with_path_parameters_carries_no_catalog_validator() {
    for weak_etag in [false, true] {
        let catalog = standin(Shape {
            etag: true,
            weak_etag,
            ..Shape::default()
        })
        .await;
        let direct = reqwest::Client::new()
            .get(format!("{}{TABLE}", catalog.url))
            .bearer_auth("alice")
            .send()
            .await
            .unwrap();
        let theirs = direct.headers()[ETAG].to_str().unwrap().to_owned();
        let icecache = Icecache::start(&catalog.url, &[]).await;
        for spelling in [";x=1", ";", ";jsessionid=1"] {
            let plain = load(&icecache, spelling, &[]).await;
            assert_eq!(plain.status(), 200, "{spelling}");
            assert!(plain.headers().get(ETAG).is_none(), "{spelling}: {plain:?}");
            let asked = load(&icecache, spelling, &[("if-none-match", &theirs)]).await;
            assert_eq!(asked.status(), 200, "{spelling} with {theirs}");
        }
    }
}

/// A catalog may decode, merge slashes and fold case before it routes: a read spelled so that
/// it does not start `/v1/` as written still carries no validator of the catalog's, and the
/// catalog is never asked with the client's conditionals.
#[tokio::test]
async fn a_load_spelled_past_the_v1_prefix_carries_no_catalog_validator() {
    let catalog = standin(Shape {
        etag: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let theirs = "\"v1\"";
    for spelling in [
        "//v1/namespaces/db/tables/t",
        "/%76%31/namespaces/db/tables/t",
        "/v%31/namespaces/db/tables/t",
        "/V1/namespaces/db/tables/t",
    ] {
        let get = |tag: Option<&'static str>| {
            let mut request = reqwest::Client::new()
                .get(format!("{}{spelling}", icecache.url))
                .bearer_auth("alice");
            if let Some(tag) = tag {
                request = request.header(IF_NONE_MATCH, tag);
            }
            request.send()
        };
        let plain = get(None).await.unwrap();
        assert_eq!(
            plain.status(),
            200,
            "{spelling}: the stand-in routes it to the load"
        );
        assert!(plain.headers().get(ETAG).is_none(), "{spelling}: {plain:?}");
        let asked = get(Some(theirs)).await.unwrap();
        assert_eq!(
            asked.status(),
            200,
            "{spelling} with the catalog's {theirs}"
        );
    }
    let conditional = catalog
        .seen()
        .into_iter()
        .filter(|s| s.headers.contains_key("if-none-match"))
        .count();
    assert_eq!(conditional, 0, "the catalog was asked with a client's tag");
}

/// Under `strip`, an answer that bypassed the cache (its query not read one way only) never
/// carries the tag of a cached representation, whichever snapshots mode it asked for.
#[tokio::test]
async fn a_bypassed_answer_never_shares_a_cached_representations_tag() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let all = load(&icecache, "", &[]).await;
    let all_tag = all.headers()[ETAG].to_str().unwrap().to_owned();
    let refs = load(&icecache, "?snapshots=refs", &[]).await;
    let refs_tag = refs.headers()[ETAG].to_str().unwrap().to_owned();
    for query in ["?snapshots=refs&foo=1", "?snapshots=refs&snapshots=refs"] {
        let bypassed = load(&icecache, query, &[]).await;
        assert_eq!(bypassed.headers()["x-cache"], "BYPASS", "{query}");
        let tag = bypassed.headers()[ETAG].to_str().unwrap().to_owned();
        assert!(tag != all_tag && tag != refs_tag, "{query}: {tag}");
        let asked = load(&icecache, query, &[("if-none-match", &all_tag)]).await;
        assert_eq!(asked.status(), 200, "{query}");
    }
}

#[tokio::test]
async fn a_processed_bypass_answer_spells_its_etag_exactly_etag() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &["--credentials", "strip"]).await;
    let head = raw_get_head(&icecache, &format!("{TABLE}?unknown=1"), ALICE).await;
    assert!(head.contains("x-cache: BYPASS"), "{head}");
    assert!(!head.contains("\r\netag:"), "{head}");
    assert!(head.contains("\r\nETag: \""), "{head}");
}

#[tokio::test]
async fn a_refused_caller_does_not_evict_the_entry_it_was_refused() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(
        &catalog.url,
        &[
            "--identity",
            "revalidate",
            "--credentials",
            "strip",
            "--fresh-for",
            "200ms",
            "--authz-ttl",
            "1h",
        ],
    )
    .await;
    assert_eq!(load(&icecache, "", &[]).await.headers()["x-cache"], "MISS");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let forbidden = reqwest::Client::new()
        .get(format!("{}{TABLE}", icecache.url))
        .bearer_auth("forbidden")
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);
    let again = load(&icecache, "", &[]).await;
    assert_eq!(again.status(), 200);
    assert_ne!(
        again.headers()["x-cache"],
        "MISS",
        "a refusal of one caller evicted the shared entry"
    );
}

#[tokio::test]
async fn a_304_carries_the_vary_and_cache_control_of_its_200() {
    let catalog = standin(Shape {
        vary: Some("X-Iceberg-Access-Delegation"),
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let full = load(&icecache, "", &[]).await;
    let tag = full.headers()[ETAG].to_str().unwrap().to_owned();
    let vary_of = |r: &reqwest::Response| {
        let mut v: Vec<String> = r
            .headers()
            .get_all("vary")
            .iter()
            .flat_map(|v| v.to_str().unwrap().split(','))
            .map(|v| v.trim().to_ascii_lowercase())
            .collect();
        v.sort();
        v
    };
    let full_vary = vary_of(&full);
    assert!(!full_vary.is_empty());
    let not_modified = load(&icecache, "", &[("if-none-match", &tag)]).await;
    assert_eq!(not_modified.status(), 304);
    assert_eq!(vary_of(&not_modified), full_vary);
    assert_eq!(not_modified.headers()["x-cache"], "HIT");
}

#[tokio::test]
async fn gzip_refused_with_q_zero_is_never_served_even_beside_a_star() {
    let catalog = standin(Shape {
        padding: 4096,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    load(&icecache, "", &[]).await;
    for accept in ["gzip;q=0, *", "*, gzip;q=0", "GZIP; Q=0.000, *;q=1"] {
        let response = load(&icecache, "", &[("accept-encoding", accept)]).await;
        assert!(
            response.headers().get("content-encoding").is_none(),
            "{accept}"
        );
    }
    let star = load(&icecache, "", &[("accept-encoding", "*")]).await;
    assert_eq!(star.headers()["content-encoding"], "gzip");
}

#[tokio::test]
async fn the_admin_tokens_scheme_is_matched_case_insensitively() {
    let icecache = Icecache::start(&ports::nothing_listens(), &["--admin-token", "letmein"]).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let purged = reqwest::Client::new()
            .post(format!("{}/cache/purge", icecache.admin))
            .header("authorization", format!("{scheme} letmein"))
            .send()
            .await
            .unwrap();
        assert_eq!(purged.status(), 200, "{scheme}");
    }
    let wrong = reqwest::Client::new()
        .post(format!("{}/cache/purge", icecache.admin))
        .header("authorization", "Basic letmein")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
}

#[tokio::test]
async fn an_if_none_match_under_a_rejected_policy_never_gets_a_304_nobody_asked_for() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let first = load(&icecache, "", &[]).await;
    let tag = first.headers()[ETAG].to_str().unwrap().to_owned();
    for headers in [&[][..], &[("if-match", tag.as_str())][..]] {
        let response = load(&icecache, "", headers).await;
        assert_eq!(response.status(), 200);
    }
    let conditional = load(&icecache, "", &[(IF_NONE_MATCH.as_str(), &tag)]).await;
    assert_eq!(conditional.status(), 304);
}

#[tokio::test]
async fn a_load_table_path_that_does_not_decode_is_a_400_that_says_x_cache() {
    let catalog = standin(Shape::default()).await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let paths = [
        "/v1/namespaces/db/tables/e%ZZ",
        "/v1/namespaces/db/tables/e%FF",
        "/v1/namespaces//tables/t",
        "/v1/p/namespaces/db/tables/",
    ];
    for path in paths {
        let response = reqwest::get(format!("{}{path}", icecache.url))
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        assert_eq!(response.headers()["x-cache"], "BYPASS", "{path}");
    }
    let metrics = icecache.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"icecache_requests_total{cache="BYPASS",route="load_table",status="400"}"#
        ),
        paths.len() as f64,
        "{metrics}"
    );
}

/// A load icecache sends without conditionals may not come back as a 304: the client asked for
/// none (the Java client throws on one). Whether the load is filled, bypassed through the
/// policy stage, or streamed as it comes, the answer is a 502.
#[tokio::test]
async fn a_catalogs_304_to_a_load_asked_without_conditionals_never_reaches_the_client() {
    let catalog = standin(Shape {
        status: Some(304),
        ..Shape::default()
    })
    .await;
    for credentials in ["passthrough", "strip"] {
        let icecache = Icecache::start(&catalog.url, &["--credentials", credentials]).await;
        // A key (a fill), and an unknown parameter (no key: streamed under passthrough,
        // asked alone through the policy stage under strip).
        for query in ["", "?x=1"] {
            let response = load(&icecache, query, &[]).await;
            assert_eq!(response.status(), 502, "{credentials} {query:?}");
            assert!(response.headers().get("x-cache").is_some());
            // The same over HTTP/2.
            let h2 = reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .unwrap()
                .get(format!("{}{TABLE}{query}", icecache.url))
                .bearer_auth("alice")
                .send()
                .await
                .unwrap();
            assert_eq!(h2.version(), reqwest::Version::HTTP_2);
            assert_eq!(h2.status(), 502, "HTTP/2 {credentials} {query:?}");
        }
    }
}

#[tokio::test]
async fn a_table_exists_check_never_shows_the_catalogs_etag() {
    let catalog = standin(Shape {
        etag: true,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &[]).await;
    let head = reqwest::Client::new()
        .head(format!("{}{TABLE}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap();
    assert!(head.headers().get(ETAG).is_none_or(|t| t != "\"v1\""));
}

#[tokio::test]
async fn a_304_names_the_representation_the_request_would_get() {
    // Padding makes the body worth a gzip copy, with a tag of its own.
    let catalog = standin(Shape {
        padding: 4096,
        ..Shape::default()
    })
    .await;
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    let gzip = [("accept-encoding", "gzip")];
    let plain = [("accept-encoding", "identity")];
    let plain_tag = load(&icecache, "", &plain).await.headers()[ETAG].clone();
    let gzip_tag = load(&icecache, "", &gzip).await.headers()[ETAG].clone();
    assert_ne!(plain_tag, gzip_tag);
    let plain_tag = plain_tag.to_str().unwrap();
    let gzip_tag = gzip_tag.to_str().unwrap();
    for (held, accept, expected) in [
        (plain_tag, &plain, 304),
        (gzip_tag, &gzip, 304),
        // The client holds one representation and asks for the other: it gets the body.
        (gzip_tag, &plain, 200),
        (plain_tag, &gzip, 200),
    ] {
        let mut headers = vec![(IF_NONE_MATCH.as_str(), held)];
        headers.extend_from_slice(accept);
        let response = load(&icecache, "", &headers).await;
        assert_eq!(response.status(), expected, "holding {held}, {accept:?}");
        if expected == 304 {
            assert_eq!(
                response.headers()[ETAG],
                held,
                "the 304 names what the client holds"
            );
        }
    }
}
