//! Polaris's change events (its Kafka listener: one JSON object per record). An event names
//! its type (`event_type`, e.g. `AFTER_UPDATE_TABLE`), the Polaris catalog (`catalog_name`,
//! which is the REST prefix through `events.kafka_prefix_template`), and what it touched:
//! `table_identifier` or `view_identifier` (namespace levels then name), a rename's `source`
//! and `destination`, or a `namespace`. There is no metadata location, and records are keyed
//! by event id, so one table's events come in no order: each one only invalidates.
//!
//! The rule, fail closed: `BEFORE_*` events announce nothing done yet and reads (`AFTER_LOAD_*`,
//! `AFTER_LIST_*`, …) change nothing, so both are ignored. Every other `AFTER_*` event is a
//! change, known or not: it invalidates the most specific thing it names, and when it names
//! nothing (a transaction, a grant, a principal), everything in its catalog, or in every
//! catalog when it names none.

use serde::Deserialize;

use super::change::{Change, Rejection};
use crate::catalog::names::LooseName;
use crate::catalog::writes::Touched;
use crate::telemetry::Label;

#[derive(Deserialize)]
struct Record {
    event_type: String,
    #[serde(default)]
    catalog_name: Option<String>,
    #[serde(default)]
    realm_id: Option<String>,
    #[serde(default)]
    table_identifier: Option<Vec<String>>,
    #[serde(default)]
    view_identifier: Option<Vec<String>>,
    #[serde(default)]
    source: Option<Vec<String>>,
    #[serde(default)]
    destination: Option<Vec<String>>,
    #[serde(default)]
    namespace: Option<Vec<String>>,
    #[serde(default)]
    table_name: Option<String>,
    #[serde(default)]
    view_name: Option<String>,
}

/// What an event is, a label of `icecache_events_received_total`: Polaris's own name for the
/// changes read by name, and three groups for the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Change(&'static str),
    /// An `AFTER_*` event of a type this version does not know: a change, fail closed.
    OtherChange,
    /// `AFTER_LOAD_*`, `AFTER_LIST_*`, `AFTER_GET_*`, `AFTER_CHECK_EXISTS_*`, `AFTER_REFRESH_*`,
    /// `AFTER_ATTEMPT_TASK`: nothing changed.
    Read,
    /// `BEFORE_*`: the change is not made yet; its `AFTER_*` event follows.
    Before,
}

impl Label for Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Change(name) => name,
            Kind::OtherChange => "other_change",
            Kind::Read => "read",
            Kind::Before => "before",
        }
    }
}

/// The changes named in the label; any other `AFTER_*` change is `other_change`.
const CHANGES: [&str; 16] = [
    "AFTER_CREATE_TABLE",
    "AFTER_DROP_TABLE",
    "AFTER_REGISTER_TABLE",
    "AFTER_UPDATE_TABLE",
    "AFTER_COMMIT_TABLE",
    "AFTER_RENAME_TABLE",
    "AFTER_SEND_NOTIFICATION",
    "AFTER_CREATE_VIEW",
    "AFTER_DROP_VIEW",
    "AFTER_REPLACE_VIEW",
    "AFTER_COMMIT_VIEW",
    "AFTER_RENAME_VIEW",
    "AFTER_COMMIT_TRANSACTION",
    "AFTER_DROP_NAMESPACE",
    "AFTER_UPDATE_CATALOG",
    "AFTER_DELETE_CATALOG",
];

/// Verbs of the events that read (after `AFTER_`).
const READS: [&str; 6] = [
    "LOAD_",
    "LIST_",
    "GET_",
    "CHECK_EXISTS_",
    "REFRESH_",
    "ATTEMPT_TASK",
];

/// An event read: its kind and what it changes (`Touched::Nothing` for reads and `BEFORE_*`).
#[derive(Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub change: Change,
}

pub fn read(body: &[u8], prefix_template: &str) -> Result<Event, Rejection> {
    let text = std::str::from_utf8(body).map_err(|_| Rejection::Malformed)?;
    let record: Record = serde_json::from_str(text).map_err(|_| Rejection::Malformed)?;
    let kind = kind(&record.event_type)?;
    let prefixes = match (&record.catalog_name, kind) {
        (_, Kind::Read | Kind::Before) => Vec::new(),
        (Some(catalog), _) if !catalog.is_empty() => vec![prefix_template
            .replace("{catalog_name}", catalog)
            .replace("{realm_id}", record.realm_id.as_deref().unwrap_or(""))],
        // A principal, a role, a grant: in every catalog.
        _ => Vec::new(),
    };
    let touched = match kind {
        Kind::Read | Kind::Before => Touched::Nothing,
        _ => touched(&record)?,
    };
    Ok(Event {
        kind,
        change: Change { prefixes, touched },
    })
}

fn kind(event_type: &str) -> Result<Kind, Rejection> {
    if event_type.starts_with("BEFORE_") {
        return Ok(Kind::Before);
    }
    let Some(verb) = event_type.strip_prefix("AFTER_") else {
        return Err(Rejection::UnknownType);
    };
    if READS.iter().any(|read| verb.starts_with(read)) {
        return Ok(Kind::Read);
    }
    Ok(CHANGES
        .iter()
        .find(|name| **name == event_type)
        .map_or(Kind::OtherChange, |name| Kind::Change(name)))
}

/// The most specific thing the event names; an identifier that is present but names no table
/// (empty, an empty name) makes the event unreadable rather than narrower.
fn touched(record: &Record) -> Result<Touched, Rejection> {
    if let (Some(source), Some(destination)) = (&record.source, &record.destination) {
        return Ok(Touched::Tables(vec![
            identifier(source)?,
            identifier(destination)?,
        ]));
    }
    if let Some(id) = record
        .table_identifier
        .as_ref()
        .or(record.view_identifier.as_ref())
    {
        return Ok(Touched::Tables(vec![identifier(id)?]));
    }
    match (
        &record.namespace,
        record.table_name.as_ref().or(record.view_name.as_ref()),
    ) {
        (Some(namespace), Some(name)) if !name.is_empty() && !namespace.is_empty() => {
            Ok(Touched::Tables(vec![LooseName::new(namespace, name)]))
        }
        (Some(namespace), _) if !namespace.is_empty() => Ok(Touched::namespace(namespace.clone())),
        _ => Ok(Touched::Everything),
    }
}

/// `["a", "b", "t"]`: namespace `a.b`, table `t`.
fn identifier(levels: &[String]) -> Result<LooseName, Rejection> {
    match levels.split_last() {
        Some((name, namespace)) if !name.is_empty() && !namespace.is_empty() => {
            Ok(LooseName::new(namespace, name))
        }
        _ => Err(Rejection::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Polaris's Kafka listener writes for a commit (its `EventToJsonMapper`).
    const UPDATE: &str = r#"{"event_type":"AFTER_UPDATE_TABLE","event_id":"5d0f1c9e-8b7a-4c3d-9e2f-1a2b3c4d5e6f","timestamp":"2026-12-04T10:00:00.123Z","table_identifier":["sales","eu","orders"],"catalog_name":"lake","realm_id":"POLARIS","principal":"root","activated_roles":["admin"],"request_id":"r1"}"#;

    fn names(touched: &Touched) -> Vec<LooseName> {
        match touched {
            Touched::Tables(names) => names.clone(),
            other => panic!("tables expected, got {other:?}"),
        }
    }

    #[test]
    fn a_commit_names_its_table_in_its_catalog() {
        let event = read(UPDATE.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(event.kind, Kind::Change("AFTER_UPDATE_TABLE"));
        assert_eq!(event.change.prefixes, vec!["lake".to_owned()]);
        assert_eq!(
            names(&event.change.touched),
            vec![LooseName::new(&["sales", "eu"], "orders")]
        );
    }

    #[test]
    fn the_template_maps_catalog_and_realm_to_the_prefix() {
        let event = read(UPDATE.as_bytes(), "{realm_id}-{catalog_name}").unwrap();
        assert_eq!(event.change.prefixes, vec!["POLARIS-lake".to_owned()]);
    }

    #[test]
    fn a_rename_reaches_its_source_and_its_destination() {
        let rename = r#"{"event_type":"AFTER_RENAME_TABLE","source":["a","t"],"destination":["b","u"],"catalog_name":"lake","realm_id":"R"}"#;
        let event = read(rename.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(
            names(&event.change.touched),
            vec![LooseName::new(&["a"], "t"), LooseName::new(&["b"], "u")]
        );
    }

    #[test]
    fn reads_and_announcements_change_nothing() {
        for kind in [
            "AFTER_LOAD_TABLE",
            "AFTER_LIST_TABLES",
            "AFTER_CHECK_EXISTS_TABLE",
            "AFTER_REFRESH_TABLE",
            "AFTER_LOAD_CREDENTIALS",
            "AFTER_GET_CONFIG",
            "BEFORE_UPDATE_TABLE",
            "BEFORE_LIMIT_REQUEST_RATE",
        ] {
            let body = UPDATE.replace("AFTER_UPDATE_TABLE", kind);
            let event = read(body.as_bytes(), "{catalog_name}").unwrap();
            assert_eq!(event.change.touched, Touched::Nothing, "{kind}");
        }
    }

    #[test]
    fn a_change_of_an_unknown_type_still_invalidates_what_it_names() {
        let body = UPDATE.replace("AFTER_UPDATE_TABLE", "AFTER_COMPACT_TABLE");
        let event = read(body.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(event.kind, Kind::OtherChange);
        assert_eq!(names(&event.change.touched).len(), 1);
    }

    #[test]
    fn a_transaction_reaches_its_whole_catalog() {
        let body =
            r#"{"event_type":"AFTER_COMMIT_TRANSACTION","catalog_name":"lake","realm_id":"R"}"#;
        let event = read(body.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(event.change.touched, Touched::Everything);
        assert_eq!(event.change.prefixes, vec!["lake".to_owned()]);
    }

    #[test]
    fn a_grant_without_a_catalog_reaches_every_catalog() {
        let body = r#"{"event_type":"AFTER_REVOKE_PRINCIPAL_ROLE","realm_id":"R","principal":"p"}"#;
        let event = read(body.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(event.change.touched, Touched::Everything);
        assert!(event.change.prefixes.is_empty(), "empty: every prefix");
    }

    #[test]
    fn a_namespace_drop_reaches_the_namespace() {
        let body =
            r#"{"event_type":"AFTER_DROP_NAMESPACE","namespace":["a","b"],"catalog_name":"lake"}"#;
        let event = read(body.as_bytes(), "{catalog_name}").unwrap();
        assert_eq!(
            event.change.touched,
            Touched::namespace(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn unreadable_events_are_rejected_by_reason() {
        let template = "{catalog_name}";
        assert_eq!(read(b"nope", template), Err(Rejection::Malformed));
        assert_eq!(read(b"{}", template), Err(Rejection::Malformed));
        let odd = UPDATE.replace("AFTER_UPDATE_TABLE", "TABLE_UPDATED");
        assert_eq!(read(odd.as_bytes(), template), Err(Rejection::UnknownType));
        let bare = UPDATE.replace(r#"["sales","eu","orders"]"#, r#"["orders"]"#);
        assert_eq!(read(bare.as_bytes(), template), Err(Rejection::Malformed));
        let empty = UPDATE.replace(r#"["sales","eu","orders"]"#, "[]");
        assert_eq!(read(empty.as_bytes(), template), Err(Rejection::Malformed));
        let twice = UPDATE.replace(
            r#""catalog_name":"lake""#,
            r#""catalog_name":"lake","catalog_name":"other""#,
        );
        assert_eq!(read(twice.as_bytes(), template), Err(Rejection::Malformed));
        let number = UPDATE.replace(r#""orders""#, "7");
        assert_eq!(read(number.as_bytes(), template), Err(Rejection::Malformed));
    }
}
