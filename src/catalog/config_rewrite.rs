//! `GET /v1/config`: keeps clients on icecache and learns how the catalog spells namespaces.
//!
//! A catalog may answer with a `uri` in `overrides` or `defaults` (Lakekeeper puts one in
//! `overrides`); clients follow it and would route around the cache. icecache replaces it with its
//! own public URL. The catalog's advertised `namespace-separator` (URL-encoded, spec 1.11) is
//! returned so that the route decoder can use it. Under `strip` and `inject` secrets a catalog
//! put in `defaults` or `overrides` are removed as they are from a LoadTableResult.

use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::Value;

/// The outcome of reading a config response.
#[derive(Debug, PartialEq)]
pub struct ConfigAnswer {
    /// The body to send on, when `uri` had to be rewritten.
    pub rewritten: Option<Bytes>,
    /// The separator the catalog advertises, if it advertises one.
    pub separator: Option<String>,
}

/// Reads a `/v1/config` body; None when it is not a JSON object (then it passes on untouched).
/// Keys that `secrets` matches are removed from both sections.
pub fn read(
    body: &[u8],
    public_url: &str,
    secrets: Option<&crate::policy::KeyPatterns>,
) -> Option<ConfigAnswer> {
    let mut config: Value = serde_json::from_slice(body).ok()?;
    if !config.is_object() {
        return None;
    }
    let mut changed = false;
    let mut separator = None;
    for section in ["defaults", "overrides"] {
        let Some(properties) = config.get_mut(section).and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(secrets) = secrets {
            let before = properties.len();
            properties.retain(|key, _| !secrets.matches(key));
            changed |= properties.len() != before;
        }
        if let Some(uri) = properties.get_mut("uri") {
            if uri.as_str() != Some(public_url) {
                *uri = Value::String(public_url.to_owned());
                changed = true;
            }
        }
        // `overrides` come second and win, as they do for clients.
        if let Some(advertised) = properties
            .get("namespace-separator")
            .and_then(Value::as_str)
        {
            if !advertised.is_empty() && !advertised.contains('/') {
                separator = Some(advertised.to_owned());
            }
        }
    }
    let rewritten = changed.then(|| Bytes::from(config.to_string()));
    Some(ConfigAnswer {
        rewritten,
        separator,
    })
}

/// The namespace separator in force: the configured one until the catalog advertises its own.
pub struct Separator(ArcSwap<String>);

impl Separator {
    pub fn new(initial: &str) -> Self {
        Separator(ArcSwap::from_pointee(initial.to_owned()))
    }

    pub fn get(&self) -> Arc<String> {
        self.0.load_full()
    }

    pub fn learn(&self, advertised: &str) {
        if self.0.load().as_str() != advertised {
            tracing::info!(
                separator = advertised,
                "catalog advertises a namespace separator"
            );
            self.0.store(Arc::new(advertised.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_in_overrides_or_defaults_points_back_at_icecache() {
        let body = br#"{"defaults":{"uri":"http://catalog:8181/catalog"},"overrides":{"uri":"http://elsewhere/","prefix":"wh"}}"#;
        let answer = read(body, "http://icecache:8181", None).unwrap();
        let rewritten: Value = serde_json::from_slice(&answer.rewritten.unwrap()).unwrap();
        assert_eq!(rewritten["defaults"]["uri"], "http://icecache:8181");
        assert_eq!(rewritten["overrides"]["uri"], "http://icecache:8181");
        assert_eq!(rewritten["overrides"]["prefix"], "wh");
    }

    #[test]
    fn a_config_without_uri_passes_unchanged() {
        let answer = read(
            br#"{"defaults":{},"overrides":{"prefix":"wh"}}"#,
            "http://i",
            None,
        )
        .unwrap();
        assert_eq!(answer.rewritten, None);
        assert_eq!(answer.separator, None);
    }

    #[test]
    fn the_advertised_separator_is_learned_with_overrides_winning() {
        let body = br#"{"defaults":{"namespace-separator":"%2E"},"overrides":{"namespace-separator":"%1F"}}"#;
        assert_eq!(
            read(body, "http://i", None).unwrap().separator.as_deref(),
            Some("%1F")
        );
        let body = br#"{"defaults":{"namespace-separator":"%2E"},"overrides":{}}"#;
        assert_eq!(
            read(body, "http://i", None).unwrap().separator.as_deref(),
            Some("%2E")
        );
    }

    #[test]
    fn secrets_in_the_catalog_config_are_stripped_when_asked() {
        let body = br#"{"defaults":{"s3.secret-access-key":"S","s3.endpoint":"e"},"overrides":{"token":"t"}}"#;
        let patterns = crate::policy::KeyPatterns::default();
        let answer = read(body, "http://i", Some(&patterns)).unwrap();
        let rewritten: Value = serde_json::from_slice(&answer.rewritten.unwrap()).unwrap();
        assert_eq!(
            rewritten,
            serde_json::json!({"defaults":{"s3.endpoint":"e"},"overrides":{}})
        );
    }

    #[test]
    fn non_object_bodies_are_left_alone() {
        assert_eq!(read(b"[]", "http://i", None), None);
        assert_eq!(read(b"not json", "http://i", None), None);
    }

    #[test]
    fn the_separator_starts_as_configured_and_follows_the_catalog() {
        let separator = Separator::new("%1F");
        assert_eq!(separator.get().as_str(), "%1F");
        separator.learn("%2E");
        assert_eq!(separator.get().as_str(), "%2E");
    }
}
