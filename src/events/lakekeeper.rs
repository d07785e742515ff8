//! Lakekeeper's CloudEvents (structured JSON, one per NATS message). The table is named by the
//! `namespace` and `name` extensions, the warehouse by `warehouse-id`; `prefix` is the REST
//! prefix the write used, empty on `updateTable` and `renameTable`, so the warehouse's prefix
//! comes from `events.prefix_template`. Namespaces are joined with U+001F on some types and
//! with `.` on others: both are read. A rename names only its source, so it reaches every
//! table of its warehouse (its destination may hold nothing but it is not known).

use serde::Deserialize;

use super::change::{Change, EventType, Rejection};
use crate::catalog::names::LooseName;
use crate::catalog::writes::Touched;

#[derive(Deserialize)]
struct CloudEvent {
    #[serde(default)]
    specversion: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "warehouse-id")]
    warehouse_id: String,
    namespace: String,
    name: String,
    #[serde(default)]
    prefix: Option<String>,
}

/// An event read: what it changes, its type, and when it was made (milliseconds since the
/// epoch, from its UUIDv7 id) if that can be told.
#[derive(Debug, PartialEq, Eq)]
pub struct Event {
    pub change: Change,
    pub kind: EventType,
    pub made_ms: Option<u64>,
}

pub fn read(body: &[u8], prefix_template: &str) -> Result<Event, Rejection> {
    // JSON is UTF-8 throughout; the parser checks only the strings it keeps.
    let text = std::str::from_utf8(body).map_err(|_| Rejection::Malformed)?;
    let event: CloudEvent = serde_json::from_str(text).map_err(|_| Rejection::Malformed)?;
    if event.specversion.as_deref().is_some_and(|v| v != "1.0") {
        return Err(Rejection::Malformed);
    }
    let kind = KINDS
        .iter()
        .find(|k| k.as_str() == event.kind)
        .copied()
        .ok_or(Rejection::UnknownType)?;
    let namespace: Vec<String> = event.namespace.split('\u{1f}').map(str::to_owned).collect();
    if event.name.is_empty()
        || event.warehouse_id.is_empty()
        || namespace.iter().all(String::is_empty)
    {
        return Err(Rejection::Malformed);
    }
    let mut prefixes = vec![prefix_template.replace("{warehouse_id}", &event.warehouse_id)];
    // The prefix the write used, when it says: it may differ from the template's.
    if let Some(used) = event.prefix.filter(|p| !p.is_empty()) {
        if !prefixes.contains(&used) {
            prefixes.push(used);
        }
    }
    let touched = match kind {
        EventType::RenameTable | EventType::RenameView => Touched::Everything,
        _ => Touched::Tables(vec![LooseName::new(&namespace, &event.name)]),
    };
    Ok(Event {
        change: Change { prefixes, touched },
        kind,
        made_ms: event.id.as_deref().and_then(uuid_v7_ms),
    })
}

/// The types that change what a load answers (namespace events do not name tables; Lakekeeper
/// publishes no namespace drop).
const KINDS: [EventType; 10] = [
    EventType::UpdateTable,
    EventType::CreateTable,
    EventType::RegisterTable,
    EventType::DropTable,
    EventType::RenameTable,
    EventType::CreateView,
    EventType::UpdateView,
    EventType::DropView,
    EventType::RenameView,
    EventType::UndropTabulars,
];

/// The Unix milliseconds a UUIDv7 carries in its first 48 bits.
fn uuid_v7_ms(id: &str) -> Option<u64> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || hex.as_bytes()[12] != b'7' {
        return None;
    }
    u64::from_str_radix(&hex[..12], 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `updateTable` as Lakekeeper publishes it (cloudevents-sdk's structured JSON).
    const UPDATE: &str = r#"{"specversion":"1.0","id":"019ad2f1-3c4e-7a10-9b1e-2f0c5d6e7f80","type":"updateTable","source":"uri:iceberg-catalog-service:host","datacontenttype":"application/json","data":{"identifier":null,"requirements":[],"updates":[]},"tabular-type":"Table","tabular-id":"0196a1c2-0000-7000-8000-000000000001","warehouse-id":"6f1c4d3e-8a2b-11ef-9c1d-7b3f0e2a4c5d","name":"t1","namespace":"a\u001fb","prefix":"","num-events":1,"sequence-number":0,"trace-id":"0196a1c2-0000-7000-8000-000000000002","actor":"\"anonymous\""}"#;

    #[test]
    fn an_update_names_its_table_in_its_warehouse() {
        let event = read(UPDATE.as_bytes(), "{warehouse_id}").unwrap();
        assert_eq!(event.kind, EventType::UpdateTable);
        assert_eq!(
            event.change,
            Change {
                prefixes: vec!["6f1c4d3e-8a2b-11ef-9c1d-7b3f0e2a4c5d".into()],
                touched: Touched::Tables(vec![LooseName::new(&["a", "b"], "t1")]),
            }
        );
        assert_eq!(event.made_ms, Some(0x019ad2f13c4e));
    }

    #[test]
    fn both_namespace_encodings_name_one_table() {
        let dotted = UPDATE.replace(r"a\u001fb", "a.b");
        let a = read(UPDATE.as_bytes(), "{warehouse_id}").unwrap();
        let b = read(dotted.as_bytes(), "{warehouse_id}").unwrap();
        assert_eq!(a.change, b.change);
    }

    #[test]
    fn the_template_maps_the_warehouse_to_its_prefix() {
        let event = read(UPDATE.as_bytes(), "lake-{warehouse_id}").unwrap();
        assert_eq!(
            event.change.prefixes,
            vec!["lake-6f1c4d3e-8a2b-11ef-9c1d-7b3f0e2a4c5d".to_owned()]
        );
    }

    #[test]
    fn a_rename_reaches_its_whole_warehouse() {
        let rename = UPDATE.replace("updateTable", "renameTable");
        let event = read(rename.as_bytes(), "{warehouse_id}").unwrap();
        assert_eq!(event.change.touched, Touched::Everything);
        assert_eq!(event.change.prefixes.len(), 1);
    }

    #[test]
    fn unreadable_events_are_rejected_by_reason() {
        assert_eq!(read(b"nope", "{warehouse_id}"), Err(Rejection::Malformed));
        let unknown = UPDATE.replace("updateTable", "createNamespace");
        assert_eq!(
            read(unknown.as_bytes(), "{warehouse_id}"),
            Err(Rejection::UnknownType)
        );
        let nameless = UPDATE.replace(r#""name":"t1""#, r#""name":"""#);
        assert_eq!(
            read(nameless.as_bytes(), "{warehouse_id}"),
            Err(Rejection::Malformed)
        );
        let not_utf8 = UPDATE
            .replace("anonymous", "\u{fffd}")
            .replace('\u{fffd}', "\u{1}");
        let mut bytes = not_utf8.into_bytes();
        let at = bytes.iter().position(|b| *b == 1).unwrap();
        bytes[at] = 0xff;
        assert_eq!(read(&bytes, "{warehouse_id}"), Err(Rejection::Malformed));
        let twice = UPDATE.replace(r#""name":"t1""#, r#""name":"t1","name":"t2""#);
        assert_eq!(
            read(twice.as_bytes(), "{warehouse_id}"),
            Err(Rejection::Malformed)
        );
    }
}
