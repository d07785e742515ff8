//! Names of tables, two ways. A `TableId` is exact: the decoded prefix, namespace parts and
//! name of one path, what a cache key holds. A `LooseName` is what a write invalidates: every
//! spelling a catalog might take for the same table lands on one, so a write through any of
//! them reaches the entries of all (SeaweedFS serves a namespace written with `.` as well as
//! `%1F`, every path without `{prefix}`, and names are case-folded by some catalogs).

use std::sync::Arc;

use smallvec::SmallVec;
use smol_str::SmolStr;

/// One decoded identifier: held inline up to 23 bytes, so naming a table costs no allocation
/// (every request names one).
pub type Name = SmolStr;

/// A namespace's decoded parts: most namespaces have one or two.
pub type Namespace = SmallVec<[Name; 2]>;

/// A table, by decoded identifiers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableId {
    pub prefix: Option<Name>,
    pub namespace: Namespace,
    pub table: Name,
}

impl TableId {
    pub fn loose(&self) -> LooseName {
        LooseName::new(&self.namespace, &self.table)
    }
}

/// A table as any spelling of it may name it: no prefix, namespace parts also split on `.`,
/// everything case folded (see `fold`), `+` read as a space. Two distinct tables may share one (then a
/// write to either invalidates both, which costs a refill, never a stale answer).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LooseName(Arc<(Vec<String>, String)>);

impl LooseName {
    pub fn new(namespace: &[impl AsRef<str>], table: &str) -> LooseName {
        LooseName(Arc::new((loose_namespace(namespace), fold(table))))
    }

    pub fn namespace(&self) -> &[String] {
        &self.0 .0
    }

    pub fn table(&self) -> &str {
        &self.0 .1
    }

    /// Whether this table lies in `namespace` (a loose namespace) or one of its children.
    pub fn is_in(&self, namespace: &[String]) -> bool {
        self.namespace().starts_with(namespace)
    }
}

/// Namespace parts as every spelling may give them: split on `.`, case folded, empty parts
/// dropped.
pub fn loose_namespace(parts: &[impl AsRef<str>]) -> Vec<String> {
    parts
        .iter()
        .flat_map(|part| part.as_ref().split('.'))
        .filter(|part| !part.is_empty())
        .map(fold)
        .collect()
}

/// A name as every catalog might read it: case folded, and `+` taken for the space some
/// catalogs decode it to.
///
/// Lower case alone is not what every catalog compares: Go's `strings.EqualFold` takes `ſ`
/// for `s`, `ς` for `σ` and `µ` for `μ`, which have different lower cases. Lowering, raising
/// and lowering again lands each of those sets on one spelling and keeps every pair lower
/// case already joins (`ẞ` and `ß` both become `ss`): coarser than either comparison, which
/// can only cost a refill.
fn fold(name: &str) -> String {
    let folded = if name.is_ascii() {
        name.to_ascii_lowercase()
    } else {
        name.to_lowercase().to_uppercase().to_lowercase()
    };
    folded.replace('+', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_go_folds_together_are_one_loose_name() {
        for (a, b) in [
            ("\u{17f}t", "st"),
            ("\u{17f}t", "ST"),
            ("\u{3c2}x", "\u{3c3}x"),
            ("\u{3c2}x", "\u{3a3}x"),
            ("\u{b5}x", "\u{3bc}x"),
            ("\u{212a}elvin", "kelvin"),
            ("\u{212b}", "\u{e5}"),
            ("\u{3d1}", "\u{398}"),
            ("\u{1c5}", "\u{1c6}"),
            ("\u{1e9e}", "\u{df}"),
        ] {
            assert_eq!(
                LooseName::new(&parts(&[a]), a),
                LooseName::new(&parts(&[b]), b),
                "{a} and {b}"
            );
        }
        assert_ne!(
            LooseName::new(&parts(&["db"]), "s"),
            LooseName::new(&parts(&["db"]), "t")
        );
    }

    #[test]
    fn dotted_and_separated_namespaces_are_one_loose_name() {
        assert_eq!(
            LooseName::new(&parts(&["a.b"]), "t"),
            LooseName::new(&parts(&["a", "b"]), "t")
        );
    }

    #[test]
    fn prefix_and_case_do_not_tell_loose_names_apart() {
        let with = TableId {
            prefix: Some("warehouse".into()),
            namespace: parts(&["DB"]).into_iter().map(Name::from).collect(),
            table: "T".into(),
        };
        let without = TableId {
            prefix: None,
            namespace: parts(&["db"]).into_iter().map(Name::from).collect(),
            table: "t".into(),
        };
        assert_ne!(with, without);
        assert_eq!(with.loose(), without.loose());
    }

    #[test]
    fn a_table_lies_in_its_namespace_and_its_parents() {
        let name = LooseName::new(&parts(&["a", "b"]), "t");
        assert!(name.is_in(&parts(&["a"])));
        assert!(name.is_in(&parts(&["a", "b"])));
        assert!(!name.is_in(&parts(&["b"])));
    }
}
