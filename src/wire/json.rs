//! Reading JSON objects the way the loosest reader would: every member kept, in order,
//! duplicates included, and member names compared folded (Go's `encoding/json` matches them
//! case-insensitively, Unicode folding included). Writes and the credential policy both need to
//! know every member a reader might take for the one they look for.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// `name` folded the way Go's `encoding/json` compares member names (`ſ` is `s`, `K` is `k`).
pub fn fold(name: &str) -> String {
    name.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

/// The members of a JSON object, in order, duplicates kept, values unparsed.
pub struct Members(pub Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

impl Members {
    pub fn parse(raw: &[u8]) -> Result<Members, serde_json::Error> {
        serde_json::from_slice(raw)
    }

    /// Every member a loose reader could take for `name`, in order.
    pub fn named<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a RawValue> + 'a {
        let wanted = fold(name);
        self.0
            .iter()
            .filter(move |(key, _)| fold(key) == wanted)
            .map(|(_, value)| &**value)
    }

    /// The members no loose reader would take for any of `names`; of a name given twice, the
    /// last (the value every reader keeps).
    pub fn others<'a>(&'a self, names: &[&str]) -> Vec<(&'a str, &'a RawValue)> {
        let folded: Vec<String> = names.iter().map(|n| fold(n)).collect();
        let mut out: Vec<(&str, &RawValue)> = Vec::new();
        for (key, value) in &self.0 {
            if folded.contains(&fold(key)) {
                continue;
            }
            out.retain(|(k, _)| *k != key);
            out.push((key, value));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_a_loose_reader_accepts_is_found() {
        let members = Members::parse(
            "{\"config\":1,\"Config\":2,\"CONFIG\":3,\"\u{17f}ource\":4,\"other\":5}".as_bytes(),
        )
        .unwrap();
        let found: Vec<&str> = members.named("config").map(RawValue::get).collect();
        assert_eq!(found, ["1", "2", "3"]);
        assert_eq!(members.named("source").count(), 1);
        let others: Vec<&str> = members
            .others(&["config", "source"])
            .iter()
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(others, ["other"]);
    }

    #[test]
    fn of_a_repeated_member_the_last_is_kept() {
        let members = Members::parse(br#"{"a":1,"b":2,"a":3}"#).unwrap();
        let others: Vec<(&str, &str)> = members
            .others(&[])
            .iter()
            .map(|(k, v)| (*k, v.get()))
            .collect();
        assert_eq!(others, [("b", "2"), ("a", "3")]);
    }
}
