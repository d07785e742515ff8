//! SeaweedFS's filer webhook. Every change to a file or directory under the filer is one POST
//! `{"key": "<full path>", "event_type": "create|update|delete|rename", "message": {…}}`. A
//! table is the directory `/buckets/<bucket>/<namespace>/<table>`: a commit updates its
//! extended attributes (the new metadata location), a drop deletes or empties it, a rename
//! shows on both names. Data, manifest and upload files live deeper (or under `.`-names) and
//! say nothing about what loadTable answers. The bucket is the REST prefix.

use serde::Deserialize;
use serde_json::Value;

use super::change::{Change, EventType, Rejection};
use crate::catalog::names::{loose_namespace, LooseName};
use crate::catalog::writes::Touched;

/// What a webhook message means for the cache.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    /// The event and its type (for the received counter).
    Change(Change, EventType),
    /// An event about something that is not a table or namespace (a data file, an upload).
    Unrelated(EventType),
}

#[derive(Deserialize)]
struct Message {
    key: String,
    event_type: String,
    #[serde(default)]
    message: Value,
}

pub fn read(body: &[u8]) -> Result<Reading, Rejection> {
    // JSON is UTF-8 throughout; the parser checks only the strings it keeps.
    let text = std::str::from_utf8(body).map_err(|_| Rejection::Malformed)?;
    let message: Message = serde_json::from_str(text).map_err(|_| Rejection::Malformed)?;
    let kind = match message.event_type.as_str() {
        "create" => EventType::Create,
        "update" => EventType::Update,
        "delete" => EventType::Delete,
        "rename" => EventType::Rename,
        _ => return Err(Rejection::UnknownType),
    };
    let mut places = vec![message.key.as_str()];
    // A rename names its destination as the new parent and the new entry's name.
    let destination = destination(&message.message);
    if let Some(destination) = &destination {
        places.push(destination);
    }
    let mut tables = Vec::new();
    let mut namespaces = Vec::new();
    let mut prefixes = Vec::new();
    for place in places {
        match locate(place) {
            Place::Table {
                bucket,
                namespace,
                table,
            } => {
                tables.push(LooseName::new(&[namespace.to_owned()], table));
                prefixes.push(bucket.to_owned());
            }
            // A namespace's own properties change nothing a load answers; its removal does.
            Place::Namespace { bucket, namespace }
                if matches!(kind, EventType::Delete | EventType::Rename) =>
            {
                namespaces.push(loose_namespace(&[namespace.to_owned()]));
                prefixes.push(bucket.to_owned());
            }
            Place::Namespace { .. } | Place::Elsewhere => {}
        }
    }
    prefixes.sort();
    prefixes.dedup();
    let touched = match (tables.is_empty(), namespaces.len()) {
        (true, 0) => return Ok(Reading::Unrelated(kind)),
        (true, 1) => Touched::namespace(namespaces.remove(0)),
        (false, 0) => Touched::Tables(tables),
        // A table and a namespace at once is no event SeaweedFS sends: everything, to be safe.
        _ => Touched::Everything,
    };
    Ok(Reading::Change(Change { prefixes, touched }, kind))
}

fn destination(message: &Value) -> Option<String> {
    let parent = message.get("new_parent_path")?.as_str()?;
    let name = message.get("new_entry")?.get("name")?.as_str()?;
    Some(format!("{}/{name}", parent.trim_end_matches('/')))
}

enum Place<'a> {
    Table {
        bucket: &'a str,
        namespace: &'a str,
        table: &'a str,
    },
    Namespace {
        bucket: &'a str,
        namespace: &'a str,
    },
    Elsewhere,
}

fn locate(path: &str) -> Place<'_> {
    let Some(rest) = path.strip_prefix("/buckets/") else {
        return Place::Elsewhere;
    };
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    // `.uploads`, `.system` and the like are SeaweedFS's own, never a namespace or table.
    if parts.iter().any(|p| p.is_empty() || p.starts_with('.')) {
        return Place::Elsewhere;
    }
    match parts.as_slice() {
        [bucket, namespace, table] => Place::Table {
            bucket,
            namespace,
            table,
        },
        [bucket, namespace] => Place::Namespace { bucket, namespace },
        _ => Place::Elsewhere,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, key: &str) -> Vec<u8> {
        serde_json::json!({"key": key, "event_type": kind, "message": {}})
            .to_string()
            .into_bytes()
    }

    fn table(ns: &str, t: &str) -> LooseName {
        LooseName::new(&[ns.to_owned()], t)
    }

    #[test]
    fn a_commit_touches_its_table_in_its_bucket() {
        let reading = read(&event("update", "/buckets/warehouse/ev/t1")).unwrap();
        assert_eq!(
            reading,
            Reading::Change(
                Change {
                    prefixes: vec!["warehouse".into()],
                    touched: Touched::Tables(vec![table("ev", "t1")]),
                },
                EventType::Update
            )
        );
    }

    #[test]
    fn a_rename_touches_both_names() {
        let body = serde_json::json!({
            "key": "/buckets/warehouse/ev/t1", "event_type": "rename",
            "message": {"new_parent_path": "/buckets/warehouse/other", "new_entry": {"name": "t2"}}
        });
        let Reading::Change(change, _) = read(body.to_string().as_bytes()).unwrap() else {
            panic!("a rename is a change");
        };
        assert_eq!(
            change.touched,
            Touched::Tables(vec![table("ev", "t1"), table("other", "t2")])
        );
    }

    #[test]
    fn files_inside_a_table_and_uploads_are_unrelated() {
        for key in [
            "/buckets/warehouse/ev/t1/metadata/v2.metadata.json",
            "/buckets/warehouse/ev/t1/data/x.parquet",
            "/buckets/warehouse/.uploads/abc",
            "/buckets/.system/owners",
            "/topics/x",
        ] {
            assert!(
                matches!(read(&event("create", key)), Ok(Reading::Unrelated(_))),
                "{key}"
            );
        }
    }

    #[test]
    fn a_namespace_counts_only_when_it_goes() {
        assert!(matches!(
            read(&event("update", "/buckets/warehouse/ev")),
            Ok(Reading::Unrelated(_))
        ));
        let Ok(Reading::Change(change, _)) = read(&event("delete", "/buckets/warehouse/ev")) else {
            panic!("a namespace drop is a change");
        };
        assert_eq!(change.touched, Touched::Namespace(vec!["ev".into()]));
    }

    #[test]
    fn what_cannot_be_read_is_rejected_by_reason() {
        assert_eq!(read(b"{not json"), Err(Rejection::Malformed));
        assert_eq!(read(b"{\"key\": 5}"), Err(Rejection::Malformed));
        let mut not_utf8 = event("update", "/buckets/w/a/b");
        not_utf8.splice(1..1, b"\"x\":\"\xff\",".iter().copied());
        assert_eq!(read(&not_utf8), Err(Rejection::Malformed));
        assert_eq!(
            read(&event("truncate", "/buckets/w/a/b")),
            Err(Rejection::UnknownType)
        );
    }
}
