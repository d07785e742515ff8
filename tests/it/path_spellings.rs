//! Path spellings catalogs read differently. A servlet or JAX-RS catalog drops `;parameters`
//! from a segment before it routes (the stand-in here does the same), others keep them; Go,
//! axum and JAX-RS read `+` in a path as a plus, Iceberg's Java code as a space. Where catalogs
//! disagree, icecache neither merges two names into one entry nor lets a write miss an entry;
//! nor where a Go catalog folds case more than lower case does.

use crate::support::standin::{version_of, Shape, StandIn};
use crate::support::{empty_commit, raw_get_head, Icecache};
use serde_json::Value;

const TABLES: &str = "/v1/namespaces/db/tables";

async fn setup(tables: &[&str]) -> (StandIn, Icecache) {
    let catalog = StandIn::start(Shape::default()).await;
    for table in tables {
        catalog.create(table);
    }
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "1h"]).await;
    (catalog, icecache)
}

async fn get(icecache: &Icecache, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", icecache.url))
        .bearer_auth("alice")
        .send()
        .await
        .unwrap()
}

async fn version(icecache: &Icecache, path: &str) -> Option<u64> {
    let response = get(icecache, path).await;
    assert_eq!(response.status(), 200, "{path}");
    version_of(&response.json::<Value>().await.unwrap())
}

fn fetches(catalog: &StandIn, raw_path_end: &str) -> usize {
    catalog
        .seen()
        .iter()
        .filter(|s| s.method == http::Method::GET && s.path.ends_with(raw_path_end))
        .count()
}

#[tokio::test]
async fn a_load_with_segment_parameters_is_never_cached() {
    let (catalog, icecache) = setup(&["t"]).await;
    for _ in 0..2 {
        assert_eq!(
            get(&icecache, &format!("{TABLES}/t;v=1")).await.status(),
            200
        );
    }
    assert_eq!(fetches(&catalog, "/t;v=1"), 2);
}

#[tokio::test]
async fn a_commit_spelled_with_segment_parameters_is_seen_by_the_next_load() {
    let (_catalog, icecache) = setup(&["t"]).await;
    let before = version(&icecache, &format!("{TABLES}/t")).await;
    let committed = empty_commit(&format!("{}{TABLES}/t;x=y", icecache.url), "alice").await;
    assert_eq!(committed.status(), 200, "the catalog took it for table t");
    let after = version(&icecache, &format!("{TABLES}/t")).await;
    assert_ne!(before, after, "a stale entry survived the commit");
}

#[tokio::test]
async fn a_plus_and_a_space_are_two_names_to_the_cache() {
    // This catalog reads `+` as a plus: `a+b` exists, `a b` does not.
    let (_catalog, icecache) = setup(&["a+b"]).await;
    assert_eq!(get(&icecache, &format!("{TABLES}/a+b")).await.status(), 200);
    let other = get(&icecache, &format!("{TABLES}/a%20b")).await;
    assert_eq!(other.status(), 404, "served a+b's entry for another name");
}

#[tokio::test]
async fn a_commit_to_the_plus_spelling_invalidates_the_space_spelling() {
    // A catalog that reads `+` as a space would take both for one table: the stand-in holds
    // both, and a commit to one must not leave the other's entry stale.
    let (catalog, icecache) = setup(&["a+b", "a%20b"]).await;
    let before = version(&icecache, &format!("{TABLES}/a%20b")).await;
    let committed = empty_commit(&format!("{}{TABLES}/a+b", icecache.url), "alice").await;
    assert_eq!(committed.status(), 200);
    catalog.commit_directly("a%20b");
    let after = version(&icecache, &format!("{TABLES}/a%20b")).await;
    assert_ne!(
        before, after,
        "the other spelling's entry was not invalidated"
    );
}

#[tokio::test]
async fn a_commit_to_a_name_go_folds_onto_another_invalidates_the_other() {
    // Go's `strings.EqualFold` takes `ſ` for `s`, `ς` for `σ` and `µ` (micro) for `μ`, which
    // lower case keeps apart: a Go catalog may hold one table under both names.
    for (written, loaded) in [
        ("%C5%BFt", "st"),
        ("%CF%82x", "%CF%83x"),
        ("%C2%B5x", "%CE%BCx"),
    ] {
        let (catalog, icecache) = setup(&[written, loaded]).await;
        let before = version(&icecache, &format!("{TABLES}/{loaded}")).await;
        let committed = empty_commit(&format!("{}{TABLES}/{written}", icecache.url), "alice").await;
        assert_eq!(committed.status(), 200, "{written}");
        catalog.commit_directly(loaded);
        let after = version(&icecache, &format!("{TABLES}/{loaded}")).await;
        assert_ne!(before, after, "a commit to {written} left {loaded} stale");
    }
}

#[tokio::test]
async fn a_plus_escaped_as_percent_2b_is_never_served_the_literal_plus_entry() {
    // A catalog that reads `+` as a space holds three tables here: `a+b` ("a b"), and `a%2Bb`
    // and `a%2bb` ("a+b", kept apart by the stand-in), each at its own version.
    let (catalog, icecache) = setup(&["a+b", "a%2Bb", "a%2bb"]).await;
    let upper = catalog.commit_directly("a%2Bb");
    catalog.commit_directly("a%2bb");
    let lower = catalog.commit_directly("a%2bb");
    let plus = version(&icecache, &format!("{TABLES}/a+b")).await;
    for (escaped, expected) in [("a%2Bb", upper), ("a%2bb", lower)] {
        for _ in 0..2 {
            let response = get(&icecache, &format!("{TABLES}/{escaped}")).await;
            assert_eq!(response.headers()["x-cache"], "BYPASS", "{escaped}");
            let body = response.json::<Value>().await.unwrap();
            assert_eq!(version_of(&body), Some(expected), "{escaped}");
        }
        assert_eq!(
            fetches(&catalog, &format!("/{escaped}")),
            2,
            "{escaped} was cached"
        );
    }
    // The literal spelling keeps its own entry, untouched by the others.
    assert_eq!(version(&icecache, &format!("{TABLES}/a+b")).await, plus);
    assert_eq!(fetches(&catalog, "/a+b"), 1);
}

#[tokio::test]
async fn a_dot_segment_is_never_a_cached_name_however_it_is_spelled() {
    // A catalog that resolves dot segments reads `tables/..` as the namespace itself.
    let (catalog, icecache) = setup(&["..", "."]).await;
    for path in [
        "/v1/namespaces/db/tables/%2E%2E",
        "/v1/namespaces/db/tables/..",
        "/v1/namespaces/db/tables/%2e",
        "/v1/prefix/../namespaces/db/tables/t",
    ] {
        for _ in 0..2 {
            // Raw: a client library would resolve the dot segments first.
            let head = raw_get_head(&icecache, path, "Authorization: Bearer alice\r\n")
                .await
                .to_ascii_lowercase();
            assert!(
                !head.contains("\r\nx-cache:"),
                "{path} was answered by the cache: {head}"
            );
        }
    }
    let asked = catalog
        .seen()
        .iter()
        .filter(|s| s.method == http::Method::GET && s.path.contains("/tables/"))
        .count();
    assert_eq!(asked, 8, "every load went to the catalog");
}
