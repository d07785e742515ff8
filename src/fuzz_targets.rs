//! The checks the fuzz targets (`fuzz/`) run on arbitrary input, shared with the test that
//! replays their committed corpus (`tests/it/fuzz_findings.rs`). Each panics on a broken property;
//! anything else (an error result) is a correct answer to bad input.

use http::{HeaderMap, HeaderValue, Method};

use crate::cache::CacheKey;
use crate::catalog::route::{classify, Operation};
use crate::catalog::writes;
use crate::config::keys::{Kind, KEYS};
use crate::config::{Raw, Settings};
use crate::policy::credentials::{self, Layout};
use crate::policy::identity::Scope;
use crate::policy::KeyPatterns;
use crate::wire::etag::{if_none_match_matches, strong_etag};
use crate::wire::json_walk::{count_named, without_named};

/// The route classifier and namespace decoder on an arbitrary path.
pub fn route(data: &[u8]) {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    for method in [Method::GET, Method::POST, Method::DELETE, Method::HEAD] {
        for separator in ["%1F", "%2E", "."] {
            if let Ok(route) = classify(&method, path, separator) {
                if route.operation == Operation::LoadTable {
                    let namespace = route.namespace.expect("a loadTable names a namespace");
                    assert!(namespace.iter().all(|part| !part.is_empty()));
                    assert!(!route.name.expect("a loadTable names a table").is_empty());
                }
            }
        }
    }
}

/// `If-None-Match` parsing: never panics, and a field holding exactly the current tag matches.
pub fn if_none_match(data: &[u8]) {
    let current = strong_etag("all", data);
    if let Ok(field) = HeaderValue::from_bytes(data) {
        let _ = if_none_match_matches([&field], &current);
    }
    let listed = HeaderValue::from_bytes(&[data, b", ", current.as_bytes()].concat());
    if let Ok(listed) = listed {
        // Garbage before the tag may make the list unparseable; then nothing matches.
        let _ = if_none_match_matches([&listed], &current);
    }
    assert!(if_none_match_matches([&current], &current));
}

/// `X-Iceberg-Access-Delegation` and `referenced-by` on a loadTable key.
pub fn key(data: &[u8]) {
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(data) {
        headers.insert("x-iceberg-access-delegation", value);
    }
    let path = "/v1/namespaces/db/tables/t";
    let Ok(route) = classify(&Method::GET, path, "%1F") else {
        panic!("a fixed loadTable path classifies");
    };
    let query = format!("referenced-by={}", String::from_utf8_lossy(data));
    let _ = CacheKey::for_load(
        route.clone(),
        path,
        Some(&query),
        &headers,
        "%1F",
        Scope::SHARED,
    );
    let plain = CacheKey::for_load(route, path, None, &headers, "%1F", Scope::SHARED);
    assert!(
        plain.is_ok(),
        "a loadTable without a query always has a key"
    );
}

/// The credential stripper: never panics; what it returns is JSON without a secret's name
/// anywhere, and a text the walk reads whole is read the same by serde_json.
pub fn strip(data: &[u8]) {
    let patterns = KeyPatterns::default();
    let _ = credentials::inspect(data, &patterns);
    if let Ok(walked) = without_named(data, |key| patterns.matches(key)) {
        let left = count_named(&walked.text, |key| patterns.matches(key));
        assert_eq!(left, Ok(0), "the walk left a secret's name");
        if walked.removed > 0 {
            serde_json::from_slice::<serde::de::IgnoredAny>(&walked.text)
                .expect("the walk writes JSON");
        }
    }
    for layout in [Layout::ConfigFirst, Layout::AsIs] {
        strip_with(data, &patterns, layout);
    }
    // Write bodies are read without panicking, whatever they hold.
    for path in [
        "/v1/tables/rename",
        "/v1/transactions/commit",
        "/v1/namespaces/db/tables",
    ] {
        if let Ok(route) = classify(&Method::POST, path, "%1F") {
            let _ = writes::touched(&route, Some(data));
        }
    }
}

fn strip_with(data: &[u8], patterns: &KeyPatterns, layout: Layout) {
    let Ok(stripped) = credentials::strip(data, patterns, layout, &[]) else {
        return;
    };
    let value: serde_json::Value =
        serde_json::from_slice(&stripped.body).expect("strip writes JSON");
    let config = value.get("config").cloned().unwrap_or_default();
    if layout == Layout::ConfigFirst {
        assert!(config.is_object(), "strip writes a config object first");
    }
    assert_eq!(
        count_named(&stripped.body, |key| patterns.matches(key)),
        Ok(0),
        "a secret survived"
    );
    for credential in value["storage-credentials"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let config = credential["config"]
            .as_object()
            .expect("a storage credential config");
        assert!(!config.is_empty(), "an emptied storage credential was kept");
        assert!(
            config.keys().all(|k| !patterns.matches(k)),
            "a secret survived in storage-credentials"
        );
    }
}

/// The config reader and validator on arbitrary TOML. Keys that name files are dropped first:
/// the validator reads the files they name, and a fuzzer must not read the machine's files.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((mut raw, _)) = Raw::from_toml(text) else {
        return;
    };
    for key in KEYS
        .iter()
        .filter(|k| k.kind == Kind::Path || k.name == "inject")
    {
        raw.set(key.name, None);
    }
    if let Some(toml::Value::Table(prefixes)) = raw.get("prefixes").cloned() {
        let without_inject: toml::Table = prefixes
            .into_iter()
            .map(|(name, mut policy)| {
                if let toml::Value::Table(policy) = &mut policy {
                    policy.remove("inject");
                }
                (name, policy)
            })
            .collect();
        raw.set("prefixes", Some(toml::Value::Table(without_inject)));
    }
    let _ = Settings::try_from(&raw);
}

/// Both event readers on arbitrary bytes: a SeaweedFS filer POST and a Lakekeeper CloudEvent.
/// Whatever they make of it names what a change touches, never a panic.
pub fn event(data: &[u8]) {
    let _ = crate::events::seaweedfs::read(data);
    let _ = crate::events::lakekeeper::read(data, "{warehouse_id}");
}
