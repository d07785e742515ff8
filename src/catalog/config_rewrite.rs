//! `GET /v1/config`: keeps clients on icecache and learns how the catalog spells namespaces.
//!
//! A catalog may answer with a `uri` in `overrides` or `defaults` (Lakekeeper puts one in
//! `overrides`); clients follow it and would route around the cache. icecache replaces it with its
//! own public URL. The catalog's advertised `namespace-separator` (URL-encoded, spec 1.11) is
//! returned so that the route decoder can use it. Under `strip` and `inject` every member named
//! like a secret is removed, at any depth (a config has no place one belongs). Its `endpoints`
//! gain the existence checks icecache answers (see `endpoints`).

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::Value;

use super::endpoints::{self, Heads};
use crate::wire::json::fold;
use crate::wire::json_walk::{without_named, Walked};

/// The outcome of reading a config response.
#[derive(Debug, PartialEq)]
pub struct ConfigAnswer {
    /// The body to send on, when `uri` or `endpoints` had to be rewritten.
    pub rewritten: Option<Bytes>,
    /// The separator the catalog advertises, if it advertises one.
    pub separator: Option<String>,
    /// Whether the catalog answers existence checks itself, when its `endpoints` say.
    pub heads: Option<Heads>,
}

/// Reads a `/v1/config` body; None when it is not a JSON object (the caller decides whether it
/// passes on untouched). Members that `secrets` matches are removed wherever they are.
pub fn read(
    body: &[u8],
    public_url: &str,
    secrets: Option<&crate::policy::KeyPatterns>,
) -> Option<ConfigAnswer> {
    // Anywhere in it, the top level included: a config has no place a secret belongs.
    let walked = match secrets {
        Some(secrets) => without_named(body, |key| secrets.matches(key)).ok()?,
        None => Walked {
            text: Cow::Borrowed(body),
            removed: 0,
        },
    };
    let mut config: Value = serde_json::from_slice(&walked.text).ok()?;
    let mut changed = walked.removed > 0;
    let object = config.as_object_mut()?;
    // `overrides` win over `defaults`, as they do for clients, in whichever order they come.
    let (mut from_defaults, mut from_overrides) = (None, None);
    let (mut views_by_default, mut views_overridden) = (None, None);
    for (key, value) in object.iter_mut() {
        // A Go client reads `DEFAULTS` as `defaults`: every spelling of a section counts.
        let (advertised, views) = match fold(key).as_str() {
            "defaults" => (&mut from_defaults, &mut views_by_default),
            "overrides" => (&mut from_overrides, &mut views_overridden),
            _ => continue,
        };
        let Some(properties) = value.as_object_mut() else {
            continue;
        };
        if let Some(uri) = properties.get_mut("uri") {
            if uri.as_str() != Some(public_url) {
                *uri = Value::String(public_url.to_owned());
                changed = true;
            }
        }
        if let Some(separator) = properties
            .get("namespace-separator")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && !s.contains('/'))
        {
            *advertised = Some(separator.to_owned());
        }
        if let Some(supported) = properties.get("view-endpoints-supported") {
            // Read as the Java client reads a boolean property.
            let text = supported.as_str().unwrap_or("");
            *views = Some(text.eq_ignore_ascii_case("true") || supported == &Value::Bool(true));
        }
    }
    let views_supported = views_overridden.or(views_by_default).unwrap_or(false);
    let advertised = endpoints::advertise(object.get("endpoints"), views_supported);
    let heads = advertised.map(|advertised| {
        if let Some(list) = advertised.list {
            object.insert("endpoints".to_owned(), Value::from(list));
            changed = true;
        }
        advertised.heads
    });
    let rewritten = changed.then(|| Bytes::from(config.to_string()));
    Some(ConfigAnswer {
        rewritten,
        separator: from_overrides.or(from_defaults),
        heads,
    })
}

/// The member of a config that says the server honours `Idempotency-Key` (spec 1.11).
pub const IDEMPOTENCY_LIFETIME: &str = "idempotency-key-lifetime";

/// A config that advertises `lifetime` as its `idempotency-key-lifetime`, when it is a JSON
/// object that advertises none (in any spelling, the catalog's own ISO-8601 lifetime stands);
/// None when nothing is to change.
pub fn advertise_lifetime(body: &[u8], lifetime: &str) -> Option<Bytes> {
    let mut config: Value = serde_json::from_slice(body).ok()?;
    let object = config.as_object_mut()?;
    let spelled: Vec<String> = object
        .keys()
        .filter(|key| fold(key) == IDEMPOTENCY_LIFETIME)
        .cloned()
        .collect();
    if spelled
        .iter()
        .any(|key| object[key].as_str().is_some_and(is_iso_duration))
    {
        return None;
    }
    // A value no client can read as a lifetime (null, empty, a number) advertises none: it
    // gives way to icecache's, so no client is left with two spellings of one setting.
    for key in spelled {
        object.remove(&key);
    }
    object.insert(IDEMPOTENCY_LIFETIME.to_owned(), Value::from(lifetime));
    Some(Bytes::from(config.to_string()))
}

/// Whether `text` is an ISO-8601 duration (`PT30M`, `P1DT2H`, `PT1.5S`): `P`, then date
/// parts, then `T` and time parts, at least one part in all.
fn is_iso_duration(text: &str) -> bool {
    let Some(rest) = text.strip_prefix('P') else {
        return false;
    };
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) if !time.is_empty() => (date, Some(time)),
        Some(_) => return false,
        None => (rest, None),
    };
    let parts = |text: &str, units: &str, fraction: bool| -> Option<usize> {
        let (mut count, mut number, mut order) = (0, String::new(), 0);
        for c in text.chars() {
            if c.is_ascii_digit() || (fraction && c == '.' && !number.is_empty()) {
                number.push(c);
                continue;
            }
            let at = units[order..].find(c)? + order;
            if number.is_empty() || number.ends_with('.') {
                return None;
            }
            (count, number, order) = (count + 1, String::new(), at + 1);
        }
        number.is_empty().then_some(count)
    };
    let Some(dated) = parts(date, "YMWD", false) else {
        return false;
    };
    let timed = match time {
        Some(time) => match parts(time, "HMS", true) {
            Some(0) | None => return false,
            Some(n) => n,
        },
        None => 0,
    };
    dated + timed > 0
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
    fn secrets_anywhere_in_the_config_are_stripped_and_every_spelling_of_a_section_rewritten() {
        let body = br#"{"token":"T","DEFAULTS":{"s3.secret-access-key":"S","uri":"http://c"},"Overrides":{"x":{"token":"T2"},"namespace-separator":"%2E"},"other":[{"s3.session-token":"S2"}]}"#;
        let patterns = crate::policy::KeyPatterns::default();
        let answer = read(body, "http://i", Some(&patterns)).unwrap();
        assert_eq!(answer.separator.as_deref(), Some("%2E"));
        let rewritten: Value = serde_json::from_slice(&answer.rewritten.unwrap()).unwrap();
        assert_eq!(
            rewritten,
            serde_json::json!({"DEFAULTS":{"uri":"http://i"},"Overrides":{"x":{},"namespace-separator":"%2E"},"other":[{}]})
        );
    }

    #[test]
    fn a_config_without_endpoints_from_a_catalog_with_views_gets_the_defaults_and_the_checks() {
        let body = br#"{"defaults":{},"overrides":{"view-endpoints-supported":"true"}}"#;
        let answer = read(body, "http://i", None).unwrap();
        let rewritten: Value = serde_json::from_slice(&answer.rewritten.unwrap()).unwrap();
        let list = rewritten["endpoints"].as_array().unwrap();
        assert!(
            list.contains(&Value::from(endpoints::TABLE_EXISTS)),
            "{list:?}"
        );
        assert!(
            list.contains(&Value::from(endpoints::VIEW_EXISTS)),
            "{list:?}"
        );
        let lacks = Heads {
            tables: false,
            views: false,
        };
        assert_eq!(answer.heads, Some(lacks));
    }

    #[test]
    fn a_config_whose_endpoints_cannot_be_read_is_left_as_it_is() {
        let answer = read(br#"{"endpoints":[1]}"#, "http://i", None).unwrap();
        assert_eq!(answer.rewritten, None);
        assert_eq!(answer.heads, None);
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

    #[test]
    fn a_lifetime_is_advertised_where_the_catalog_advertises_none() {
        let body = br#"{"defaults":{},"overrides":{}}"#;
        let rewritten: Value =
            serde_json::from_slice(&advertise_lifetime(body, "PT30M").unwrap()).unwrap();
        assert_eq!(rewritten["idempotency-key-lifetime"], "PT30M");
        assert_eq!(rewritten["defaults"], serde_json::json!({}));
    }

    #[test]
    fn the_catalogs_own_lifetime_stands_in_any_spelling() {
        for body in [
            &br#"{"idempotency-key-lifetime":"PT24H"}"#[..],
            br#"{"Idempotency-Key-Lifetime":"PT1H"}"#,
        ] {
            assert_eq!(advertise_lifetime(body, "PT30M"), None);
        }
    }

    #[test]
    fn a_lifetime_no_client_can_read_gives_way_to_icecaches() {
        for own in [
            r#"null"#,
            r#""""#,
            r#""garbage""#,
            "5",
            r#""P""#,
            r#""PT""#,
            r#""30M""#,
        ] {
            let body = format!(r#"{{"defaults":{{}},"Idempotency-Key-Lifetime":{own}}}"#);
            let advertised = advertise_lifetime(body.as_bytes(), "PT30M")
                .unwrap_or_else(|| panic!("{own} kept"));
            let value: Value = serde_json::from_slice(&advertised).unwrap();
            let object = value.as_object().unwrap();
            assert_eq!(object["idempotency-key-lifetime"], "PT30M", "{own}");
            assert_eq!(object.len(), 2, "{own}: one spelling left");
        }
        for own in ["PT5M", "P1D", "P1DT2H", "PT1.5S", "P2W"] {
            let body = format!(r#"{{"idempotency-key-lifetime":"{own}"}}"#);
            assert_eq!(advertise_lifetime(body.as_bytes(), "PT30M"), None, "{own}");
        }
    }

    #[test]
    fn a_config_that_is_not_an_object_gets_no_lifetime() {
        assert_eq!(advertise_lifetime(b"[]", "PT30M"), None);
        assert_eq!(advertise_lifetime(b"nope", "PT30M"), None);
    }
}
