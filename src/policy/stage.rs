//! The policy stage: one function from (the catalog's answer, the policy in force, the shape
//! the route's answer has) to the bytes a client may be given. Every answer that may carry
//! credentials passes here before any client sees it, cached or not: loadTable, createTable,
//! registerTable, loadCredentials, views, commits, errors, and the answers of routes icecache
//! does not know. Under `strip` and `inject` one walk removes every member named like a secret,
//! at any depth, whatever the route and whatever the catalog did with the missing delegation
//! header; an answer the walk cannot read whole is refused rather than passed on. Under
//! `passthrough` the same walk decides whether a table's body is free of credentials.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use thiserror::Error;

use super::credentials::{self, spliced, Layout, Unreadable, Vended};
use super::patterns::KeyPatterns;
use super::{Credentials, Policy};
use crate::telemetry::CredentialMetrics;
use crate::wire::encoding::decode;
use crate::wire::json_walk::without_named;

/// What a route's successful answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A LoadTableResult (`config`, `storage-credentials`, `metadata`).
    Table,
    /// A LoadCredentialsResponse (`storage-credentials` only).
    Credentials,
    /// A route icecache does not know: a JSON object may still carry credentials.
    Unknown,
}

/// An answer as it may be given to clients (before injection, which happens as it is sent).
#[derive(Debug, Clone)]
pub struct Processed {
    pub body: Bytes,
    /// What the body still vends; None when it is not a readable LoadTableResult (then it is
    /// never cached).
    pub vended: Option<Vended>,
    /// Whether the stripped `config` is empty (an injected fragment then needs no comma).
    pub config_empty: bool,
    /// Credential keys removed.
    pub removed: usize,
}

#[derive(Debug, Error)]
pub enum Refusal {
    #[error(
        "the catalog's answer is not JSON icecache can read whole (a JSON object where a \
         table's answer belongs), so it cannot be checked for vended credentials and is not \
         passed on"
    )]
    NotJson(#[source] Unreadable),
    #[error(transparent)]
    Undecodable(#[from] crate::wire::encoding::DecodeError),
    #[error("the answer could not be processed: icecache is shutting down")]
    ShuttingDown,
}

/// Bodies larger than this are processed on a blocking thread, not on a proxy worker.
pub const OFFLOAD_BYTES: usize = 256 << 10;

/// Applies `policy` to a successful answer of `shape`.
pub fn process(shape: Shape, body: Bytes, policy: &Policy) -> Result<Processed, Refusal> {
    if policy.credentials == Credentials::Passthrough {
        let vended = match shape {
            Shape::Table => credentials::inspect(&body, &policy.strip).ok(),
            Shape::Credentials | Shape::Unknown => None,
        };
        return Ok(Processed {
            body,
            vended,
            config_empty: false,
            removed: 0,
        });
    }
    let layout = match shape {
        Shape::Table => Layout::ConfigFirst,
        Shape::Credentials => Layout::AsIs,
        Shape::Unknown => return scrub_other(body, &policy.strip),
    };
    let replaced = match (&policy.injection, shape) {
        (Some(injection), Shape::Table) => injection.keys(),
        _ => &[],
    };
    let mut stripped =
        credentials::strip(&body, &policy.strip, layout, replaced).map_err(Refusal::NotJson)?;
    if let (Some(injection), Credentials::Inject, Shape::Credentials) =
        (&policy.injection, policy.credentials, shape)
    {
        // A credential refresh gets the injected properties, for every prefix the catalog
        // vended for (loadCredentials answers are never cached).
        stripped.body =
            injection.as_storage_credentials(&stripped.body, &credentials::vended_prefixes(&body));
    }
    Ok(Processed {
        // Exactly as long as it is: a cached body holds nothing beyond its bytes.
        body: Bytes::from(stripped.body.to_vec().into_boxed_slice()),
        vended: (shape == Shape::Table).then_some(stripped.vended),
        config_empty: stripped.config_empty,
        removed: stripped.removed,
    })
}

/// An answer of no known shape: any JSON loses every member named like a secret, at any
/// depth; a body the walk cannot read passes only when no reader, however lax, could find such
/// a member in it (`holds_no_member`), and is refused otherwise.
fn scrub_other(body: Bytes, secret: &KeyPatterns) -> Result<Processed, Refusal> {
    let processed = |body, removed| Processed {
        body,
        vended: None,
        config_empty: false,
        removed,
    };
    match without_named(&body, |key| secret.matches(key)) {
        Ok(walked) if walked.removed == 0 => Ok(processed(body, 0)),
        Ok(walked) => Ok(processed(
            Bytes::from(walked.text.into_owned()),
            walked.removed,
        )),
        Err(_) if holds_no_member(&body, secret) => Ok(processed(body, 0)),
        Err(e) => Err(Refusal::NotJson(e.into())),
    }
}

/// Whether a body the walk could not read holds nothing a lax reader could take for a member
/// named like a secret: UTF-8 text without NUL bytes (JSON in UTF-16 or UTF-32 has them, and a
/// reader that guesses the encoding reads it), that does not open like JSON after whitespace and
/// a byte order mark, that quotes no secret's name (JSONP, an XSSI prefix, JSON inside an HTML
/// page) and that assigns none bare (`name=value`, `name: value`). A text or HTML page passes.
fn holds_no_member(body: &[u8], secret: &KeyPatterns) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let opening = text.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if text.contains('\0') || opening.starts_with(['{', '[']) {
        return false;
    }
    let quotes_one = ['"', '\''].into_iter().any(|quote| {
        text.split(quote)
            .skip(1)
            .step_by(2)
            .any(|quoted| names_a_secret(quoted, secret))
    });
    !quotes_one && !assigns_a_secret(text, secret)
}

/// Whether a text assigns a secret bare, as a lax reader of a properties file, YAML or a query
/// string would read it: `name=` anywhere, or, at the start of a line, `name:`, `name<TAB>`,
/// or a compound name (`s3.secret-access-key value`, Java's properties) before a space. A word
/// that merely starts a sentence (`Token expired`) or ends a phrase (`invalid token: …`) is not
/// one. Names are read in any script, as the patterns fold them.
fn assigns_a_secret(text: &str, secret: &KeyPatterns) -> bool {
    let name_char = |c: char| c.is_alphanumeric() || "._-".contains(c);
    let last_name = |before: &str| {
        let start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !name_char(*c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        before[start..].to_owned()
    };
    let assigned = text
        .match_indices('=')
        .any(|(at, _)| secret.matches(&last_name(text[..at].trim_end())));
    assigned
        || text.lines().any(|line| {
            let line = line.trim_start();
            let end = line.find(|c: char| !name_char(c)).unwrap_or(line.len());
            let (name, rest) = line.split_at(end);
            let compound = name.contains(['.', '-', '_']);
            let keyed = rest.trim_start_matches(' ').starts_with(':')
                || rest.starts_with('\t')
                || (compound && rest.starts_with(' '));
            !name.is_empty() && keyed && secret.matches(name)
        })
}

/// Whether a quoted string, its escapes read as JSON reads them, names a secret.
fn names_a_secret(quoted: &str, secret: &KeyPatterns) -> bool {
    if !quoted.contains('\\') {
        return secret.matches(quoted);
    }
    serde_json::from_str::<String>(&format!("\"{quoted}\"")).is_ok_and(|name| secret.matches(&name))
}

/// The policy stage as the proxy and the cache run it: `process` and the decoding before it,
/// with every answer it refuses, strips or serves with injected properties counted, whoever
/// calls it.
pub struct Stage {
    metrics: Arc<CredentialMetrics>,
}

impl Stage {
    pub fn new(metrics: Arc<CredentialMetrics>) -> Stage {
        Stage { metrics }
    }

    /// `process`, counted.
    pub fn process(
        &self,
        shape: Shape,
        body: Bytes,
        policy: &Policy,
    ) -> Result<Processed, Refusal> {
        count(&self.metrics, process(shape, body, policy))
    }

    /// `process`, counted, on a blocking thread when the body is large.
    pub async fn process_off_thread(
        &self,
        shape: Shape,
        body: Bytes,
        policy: Arc<Policy>,
    ) -> Result<Processed, Refusal> {
        if body.len() < OFFLOAD_BYTES {
            return self.process(shape, body, &policy);
        }
        let metrics = self.metrics.clone();
        tokio::task::spawn_blocking(move || count(&metrics, process(shape, body, &policy)))
            .await
            .unwrap_or(Err(Refusal::ShuttingDown))
    }

    /// An answer the catalog encoded although the identity encoding was asked for, decoded
    /// (not trusted as it is); one that cannot be is a counted refusal.
    pub fn decode(
        &self,
        headers: &mut HeaderMap,
        body: Bytes,
        limit: usize,
    ) -> Result<Bytes, Refusal> {
        decode(headers, body, limit).map_err(|e| self.refuse(e.into()))
    }

    /// Counts a refusal made on the stage's behalf.
    pub fn refuse(&self, refusal: Refusal) -> Refusal {
        self.metrics.refused();
        refusal
    }

    /// Counts an answer as served: in more than one piece, it carries injected properties.
    pub fn served(&self, pieces: &[Bytes]) {
        if pieces.len() > 1 {
            self.metrics.injected();
        }
    }
}

fn count(
    metrics: &CredentialMetrics,
    result: Result<Processed, Refusal>,
) -> Result<Processed, Refusal> {
    match &result {
        Ok(processed) if processed.removed > 0 => metrics.stripped(),
        Ok(_) => {}
        Err(_) => metrics.refused(),
    }
    result
}

/// The pieces of a served body: the processed bytes with the policy's injected properties
/// spliced into `config` (Table answers under `inject`), or the bytes alone.
pub fn served(
    processed_body: &Bytes,
    config_empty: bool,
    shape: Shape,
    policy: &Policy,
) -> Vec<Bytes> {
    match (&policy.injection, policy.credentials, shape) {
        (Some(injection), Credentials::Inject, Shape::Table) => {
            spliced(processed_body, &injection.fragment, config_empty).to_vec()
        }
        _ => vec![processed_body.clone()],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::policy::{build, Identity, InjectSource, KeyPatterns, PolicySettings};

    fn policy(credentials: Credentials) -> Policy {
        let inject: BTreeMap<String, InjectSource> = [(
            "client.region".to_owned(),
            InjectSource {
                value: Some("eu".into()),
                env: None,
                file: None,
            },
        )]
        .into();
        build(
            &PolicySettings {
                identity: Some(Identity::PerPrincipal),
                credentials: Some(credentials),
                inject: Some(inject),
            },
            &PolicySettings::default(),
            &Arc::new(KeyPatterns::default()),
            "test",
        )
        .unwrap()
    }

    const VENDING: &[u8] = br#"{"metadata":{},"config":{"s3.secret-access-key":"S","s3.endpoint":"e"},"storage-credentials":null}"#;

    #[test]
    fn strip_removes_secrets_from_every_shape_the_answer_comes_in() {
        for shape in [Shape::Table, Shape::Credentials, Shape::Unknown] {
            let out = process(
                shape,
                Bytes::from_static(VENDING),
                &policy(Credentials::Strip),
            )
            .unwrap();
            let text = std::str::from_utf8(&out.body).unwrap();
            assert!(!text.contains("\"S\""), "{shape:?}: {text}");
            assert!(text.contains("s3.endpoint"), "{shape:?}: {text}");
        }
    }

    #[test]
    fn a_table_answer_that_is_not_json_is_refused_under_strip() {
        for shape in [Shape::Table, Shape::Credentials] {
            assert!(process(
                shape,
                Bytes::from_static(b"<html>"),
                &policy(Credentials::Inject)
            )
            .is_err());
        }
        let other = process(
            Shape::Unknown,
            Bytes::from_static(b"<html>"),
            &policy(Credentials::Strip),
        )
        .unwrap();
        assert_eq!(&other.body[..], b"<html>");
    }

    #[test]
    fn other_json_is_scrubbed_and_json_no_parser_here_reads_is_refused() {
        let p = policy(Credentials::Strip);
        let array = process(
            Shape::Unknown,
            Bytes::from_static(br#"[{"token":"T","keep":1},{"x":{"s3.session-token":"S"}}]"#),
            &p,
        )
        .unwrap();
        assert_eq!(&array.body[..], br#"[{"keep":1},{"x":{}}]"#);
        assert_eq!(array.removed, 2);
        let huge = process(
            Shape::Unknown,
            Bytes::from_static(br#"{"token":"T","x":1e400}"#),
            &p,
        )
        .unwrap();
        assert_eq!(
            &huge.body[..],
            br#"{"x":1e400}"#,
            "a number is copied as written"
        );
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        for body in [
            r#"{"token":"T","x":"\ud800"}"#.to_owned(),
            "\u{feff} {\"token\":\"T\",\"x\":\"a\u{1}b\"}".to_owned(),
            deep,
        ] {
            let out = process(Shape::Unknown, Bytes::from(body.clone()), &p);
            assert!(out.is_err(), "passed: {body:.40}");
        }
        let text = process(Shape::Unknown, Bytes::from_static(b"no JSON: T"), &p).unwrap();
        assert_eq!(
            &text.body[..],
            b"no JSON: T",
            "a page that is no JSON has no members"
        );
        let page = b"<html><p class=\"error\">invalid token</p></html>";
        let html = process(Shape::Unknown, Bytes::from_static(page), &p).unwrap();
        assert_eq!(&html.body[..], page);
    }

    #[test]
    fn json_a_lax_reader_could_still_find_is_refused() {
        let p = policy(Credentials::Strip);
        let object = r#"{"plan":{"token":"T"}}"#;
        let utf16: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain(object.encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let utf16be: Vec<u8> = object.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let utf32: Vec<u8> = object
            .chars()
            .flat_map(|c| (c as u32).to_le_bytes())
            .collect();
        for body in [
            utf16,
            utf16be,
            utf32,
            format!("cb({object})").into_bytes(),
            format!(")]}}'\n{object}").into_bytes(),
            format!("<html><pre>{object}</pre></html>").into_bytes(),
            format!("\0{object}").into_bytes(),
            format!("\u{a0}{object}").into_bytes(),
            br#"cb({"to\u006ben":"T"})"#.to_vec(),
            b"cb({'token':'T'})".to_vec(),
        ] {
            let out = process(Shape::Unknown, Bytes::from(body.clone()), &p);
            assert!(out.is_err(), "passed: {:?}", String::from_utf8_lossy(&body));
        }
    }

    #[test]
    fn passthrough_passes_the_body_and_reads_what_it_vends() {
        let out = process(
            Shape::Table,
            Bytes::from_static(VENDING),
            &policy(Credentials::Passthrough),
        )
        .unwrap();
        assert_eq!(&out.body[..], VENDING);
        assert!(out.vended.unwrap().has_secrets);
    }

    #[test]
    fn injected_properties_are_spliced_only_into_table_answers() {
        let p = policy(Credentials::Inject);
        let out = process(Shape::Table, Bytes::from_static(VENDING), &p).unwrap();
        let served: Vec<u8> = served(&out.body, out.config_empty, Shape::Table, &p).concat();
        let value: serde_json::Value = serde_json::from_slice(&served).unwrap();
        assert_eq!(value["config"]["client.region"], "eu");
        let unknown = served_text(Shape::Unknown, &p);
        assert!(!unknown.contains("client.region"));
    }

    #[test]
    fn an_injected_property_replaces_the_catalogs_own_of_that_name() {
        let p = policy(Credentials::Inject);
        let body = br#"{"metadata":{},"config":{"CLIENT.REGION":"us","s3.endpoint":"e"}}"#;
        let out = process(Shape::Table, Bytes::from_static(body), &p).unwrap();
        let served =
            String::from_utf8(served(&out.body, out.config_empty, Shape::Table, &p).concat())
                .unwrap();
        assert_eq!(
            served.to_ascii_lowercase().matches("client.region").count(),
            1,
            "{served}"
        );
        let value: serde_json::Value = serde_json::from_str(&served).unwrap();
        assert_eq!(value["config"]["client.region"], "eu");
        assert_eq!(value["config"]["s3.endpoint"], "e");
    }

    #[test]
    fn load_credentials_under_inject_answers_the_injected_properties_for_each_prefix() {
        let p = policy(Credentials::Inject);
        let vended = br#"{"storage-credentials":[{"prefix":"s3://b/t","config":{"s3.secret-access-key":"S","s3.access-key-id":"A"}}]}"#;
        let out = process(Shape::Credentials, Bytes::from_static(vended), &p).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        let entry = &value["storage-credentials"][0];
        assert_eq!(entry["prefix"], "s3://b/t");
        assert_eq!(entry["config"]["client.region"], "eu");
        assert!(entry["config"].get("s3.secret-access-key").is_none());
    }

    #[test]
    fn a_text_that_assigns_a_secret_bare_is_refused_and_plain_text_passes() {
        let p = policy(Credentials::Strip);
        for text in [
            "s3.secret-access-key=S",
            "token = abc",
            "config:\n  s3.session-token: S\n",
            "a=1&password=x",
            "\u{e9}t\u{e9}\ntoken:x",
            "# props\ns3.secret-access-key S",
            "token\tS",
            "to\u{212a}en=S",
            "s3.\u{17f}ecret-access-key=S",
        ] {
            let body = Bytes::from(text.to_owned());
            assert!(process(Shape::Unknown, body, &p).is_err(), "{text}");
        }
        for text in [
            "the token expired",
            "Token expired",
            "invalid token: expired",
            "ok: done",
            "see https://example.com/token",
        ] {
            let body = Bytes::from(text.to_owned());
            assert!(process(Shape::Unknown, body, &p).is_ok(), "{text}");
        }
    }

    fn served_text(shape: Shape, p: &Policy) -> String {
        let out = process(shape, Bytes::from_static(VENDING), p).unwrap();
        String::from_utf8(served(&out.body, out.config_empty, shape, p).concat()).unwrap()
    }
}
