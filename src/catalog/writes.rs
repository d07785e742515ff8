//! What a write may change, read as strictly as any catalog might read it.
//!
//! Catalogs disagree about JSON: SeaweedFS (Go) matches member names case-insensitively and
//! lets the last duplicate win; Jackson matches exactly. A body that names its tables in a way
//! two readers could take differently (the same member twice, or in two spellings) counts as
//! unreadable, and an unreadable write may have changed anything.

use http::Method;
use serde_json::value::RawValue;

use super::names::{loose_namespace, LooseName};
use super::route::{Operation, Route};
use crate::wire::json::Members;

/// What a write may have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    Tables(Vec<LooseName>),
    /// Every table in a namespace (a loose namespace) and its children.
    Namespace(Vec<String>),
    /// Anything: a write icecache cannot read for what it names.
    Everything,
    Nothing,
}

impl Touched {
    /// Every table in a loose namespace; one that names nothing (`.`, an empty name) cannot be
    /// told apart from the root, so it touches everything.
    pub fn namespace(loose: Vec<String>) -> Touched {
        if loose.is_empty() {
            Touched::Everything
        } else {
            Touched::Namespace(loose)
        }
    }
}

/// Whether the request may change what a loadTable answers.
pub fn is_write(route: &Route, method: &Method) -> bool {
    if route.operation.is_mutation() {
        return true;
    }
    // A method that changes things on a path icecache does not know (an extension, a spelling
    // it does not classify): fail closed.
    route.operation == Operation::Other
        && !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether icecache must read the body to know what the write touches.
pub fn names_in_body(operation: Operation) -> bool {
    matches!(
        operation,
        Operation::CreateTable
            | Operation::RegisterTable
            | Operation::RenameTable
            | Operation::CommitTransaction
            | Operation::UpdateTable
            | Operation::CreateView
            | Operation::RegisterView
            | Operation::RenameView
            | Operation::ReplaceView
    )
}

/// What a write touches, from its route and (for the operations that name tables there) its
/// body.
pub fn touched(route: &Route, body: Option<&[u8]>) -> Touched {
    use Operation::*;
    let path_table = || match (&route.namespace, &route.name) {
        (Some(namespace), Some(name)) => Some(LooseName::new(namespace, name)),
        _ => None,
    };
    match route.operation {
        DropTable | UnregisterTable | DropView => {
            path_table().map_or(Touched::Everything, |t| Touched::Tables(vec![t]))
        }
        UpdateTable | ReplaceView => {
            // The body may carry an identifier of its own; a catalog may follow it.
            let Some(table) = path_table() else {
                return Touched::Everything;
            };
            match body.map(|b| optional_identifier(b, "identifier")) {
                Some(Ok(Some(other))) if other != table => Touched::Tables(vec![table, other]),
                Some(Ok(_)) | None => Touched::Tables(vec![table]),
                Some(Err(Unreadable)) => Touched::Everything,
            }
        }
        CreateTable | RegisterTable | CreateView | RegisterView => {
            let (Some(namespace), Some(body)) = (&route.namespace, body) else {
                return Touched::Everything;
            };
            match named(body) {
                Ok(name) => Touched::Tables(vec![LooseName::new(namespace, &name)]),
                Err(Unreadable) => Touched::Everything,
            }
        }
        RenameTable | RenameView => match body.map(renamed) {
            Some(Ok(tables)) => Touched::Tables(tables),
            _ => Touched::Everything,
        },
        CommitTransaction => match body.map(transaction) {
            Some(Ok(tables)) => Touched::Tables(tables),
            _ => Touched::Everything,
        },
        DropNamespace => match &route.namespace {
            Some(namespace) => Touched::namespace(loose_namespace(namespace)),
            None => Touched::Everything,
        },
        CreateNamespace | UpdateNamespaceProperties => Touched::Nothing,
        _ => Touched::Everything,
    }
}

/// A body icecache cannot read for what it names.
#[derive(Debug)]
struct Unreadable;

/// The one member any reader would take for `name`; None when there is none, unreadable when
/// two members could be it.
fn one<'a>(members: &'a Members, name: &str) -> Result<Option<&'a RawValue>, Unreadable> {
    let mut found = members.named(name);
    match (found.next(), found.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => Ok(Some(value)),
        (Some(_), Some(_)) => Err(Unreadable),
    }
}

fn require<'a>(members: &'a Members, name: &str) -> Result<&'a RawValue, Unreadable> {
    one(members, name)?.ok_or(Unreadable)
}

fn parse(raw: &[u8]) -> Result<Members, Unreadable> {
    Members::parse(raw).map_err(|_| Unreadable)
}

fn string(raw: &RawValue) -> Result<String, Unreadable> {
    serde_json::from_str(raw.get()).map_err(|_| Unreadable)
}

fn identifier(raw: &RawValue) -> Result<LooseName, Unreadable> {
    let members = parse(raw.get().as_bytes())?;
    let namespace: Vec<String> =
        serde_json::from_str(require(&members, "namespace")?.get()).map_err(|_| Unreadable)?;
    let name = string(require(&members, "name")?)?;
    Ok(LooseName::new(&namespace, &name))
}

fn optional_identifier(body: &[u8], member: &str) -> Result<Option<LooseName>, Unreadable> {
    match one(&parse(body)?, member)? {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => identifier(raw).map(Some),
    }
}

fn named(body: &[u8]) -> Result<String, Unreadable> {
    string(require(&parse(body)?, "name")?)
}

fn renamed(body: &[u8]) -> Result<Vec<LooseName>, Unreadable> {
    let members = parse(body)?;
    Ok(vec![
        identifier(require(&members, "source")?)?,
        identifier(require(&members, "destination")?)?,
    ])
}

fn transaction(body: &[u8]) -> Result<Vec<LooseName>, Unreadable> {
    let members = parse(body)?;
    let changes: Vec<Box<RawValue>> =
        serde_json::from_str(require(&members, "table-changes")?.get()).map_err(|_| Unreadable)?;
    changes
        .iter()
        .map(|change| identifier(require(&parse(change.get().as_bytes())?, "identifier")?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::route::classify;

    fn route(method: Method, path: &str) -> Route {
        classify(&method, path, "%1F").unwrap()
    }

    fn tables(names: &[(&[&str], &str)]) -> Touched {
        Touched::Tables(
            names
                .iter()
                .map(|(ns, t)| {
                    LooseName::new(&ns.iter().map(|s| s.to_string()).collect::<Vec<_>>(), t)
                })
                .collect(),
        )
    }

    fn rename(body: &str) -> Touched {
        touched(
            &route(Method::POST, "/v1/p/tables/rename"),
            Some(body.as_bytes()),
        )
    }

    #[test]
    fn a_rename_touches_both_names_in_any_case_a_lenient_catalog_reads() {
        for body in [
            r#"{"source":{"namespace":["a"],"name":"t"},"destination":{"namespace":["b"],"name":"u"}}"#,
            // A member in another case, alone, is the one a lenient catalog reads.
            r#"{"SOURCE":{"Namespace":["a"],"name":"t"},"destination":{"namespace":["b"],"name":"u"}}"#,
        ] {
            assert_eq!(
                rename(body),
                tables(&[(&["a"], "t"), (&["b"], "u")]),
                "{body}"
            );
        }
    }

    #[test]
    fn a_member_named_twice_in_any_case_is_unreadable() {
        for body in [
            r#"{"source":{"namespace":["a"],"name":"t"},"destination":{"namespace":["b"],"name":"u"},"Source":{"namespace":["a"],"name":"x"}}"#,
            r#"{"source":{"namespace":["a"],"name":"t"},"source":{"namespace":["a"],"name":"x"},"destination":{"namespace":["b"],"name":"u"}}"#,
            r#"{"source":{"namespace":["a"],"name":"t","NAME":"x"},"destination":{"namespace":["b"],"name":"u"}}"#,
            // U+017F (long s) folds to 's' in Go.
            "{\"source\":{\"namespace\":[\"a\"],\"name\":\"t\"},\"\u{17f}ource\":{\"namespace\":[\"a\"],\"name\":\"x\"},\"destination\":{\"namespace\":[\"b\"],\"name\":\"u\"}}",
        ] {
            assert_eq!(rename(body), Touched::Everything, "{body}");
        }
    }

    #[test]
    fn a_transaction_touches_every_table_it_names_or_everything() {
        let commit = route(Method::POST, "/v1/transactions/commit");
        let body = r#"{"table-changes":[{"identifier":{"namespace":["a"],"name":"t"},"updates":[]},{"identifier":{"namespace":["a","b"],"name":"u"}}]}"#;
        assert_eq!(
            touched(&commit, Some(body.as_bytes())),
            tables(&[(&["a"], "t"), (&["a", "b"], "u")])
        );
        for bad in [
            r#"{"table-changes":[{"identifier":{"namespace":["a"],"name":"t"},"IDENTIFIER":{"namespace":["a"],"name":"x"}}]}"#,
            r#"{"table-changes":7}"#,
            r#"{"table-changes":[{"updates":[]}]}"#,
            "not json",
        ] {
            assert_eq!(
                touched(&commit, Some(bad.as_bytes())),
                Touched::Everything,
                "{bad}"
            );
        }
    }

    #[test]
    fn an_update_with_an_identifier_of_its_own_touches_both_tables() {
        let update = route(Method::POST, "/v1/p/namespaces/a/tables/t");
        let body = r#"{"identifier":{"namespace":["a"],"name":"other"},"updates":[]}"#;
        assert_eq!(
            touched(&update, Some(body.as_bytes())),
            tables(&[(&["a"], "t"), (&["a"], "other")])
        );
        assert_eq!(
            touched(&update, Some(br#"{"updates":[]}"#)),
            tables(&[(&["a"], "t")])
        );
    }

    #[test]
    fn an_unknown_path_written_to_may_touch_everything() {
        let other = route(Method::POST, "/v1/p/namespaces/a/tables/t/");
        assert!(is_write(&other, &Method::POST));
        assert_eq!(touched(&other, None), Touched::Everything);
        assert!(!is_write(
            &route(Method::GET, "/v1/p/anything"),
            &Method::GET
        ));
    }

    #[test]
    fn a_namespace_drop_touches_the_namespace_in_its_loose_form() {
        assert_eq!(
            touched(&route(Method::DELETE, "/v1/p/namespaces/A.b"), None),
            Touched::Namespace(vec!["a".into(), "b".into()])
        );
    }
}
