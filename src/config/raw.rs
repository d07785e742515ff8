//! The raw settings: every key as a user gave it, from a TOML file and from flags and
//! `ICECACHE_*` variables (which win over the file), nothing checked yet but that each name is
//! a key (`keys::KEYS`). Values keep the form they came in (TOML's types, or the text of a flag);
//! `validate` reads them by their key's kind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, ConfigErrors};
use super::keys::{self, Kind, TABLES};

/// Every key given, by name.
#[derive(Clone, Default, PartialEq)]
pub struct Raw {
    values: BTreeMap<&'static str, toml::Value>,
    /// The config file named (`--config`, `ICECACHE_CONFIG`), if any.
    pub file: Option<PathBuf>,
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.values {
            if keys::key(name).is_some_and(|k| k.secret) {
                map.entry(name, &"(redacted)");
            } else {
                map.entry(name, value);
            }
        }
        map.finish()
    }
}

impl Raw {
    /// Settings naming nothing but these keys (tests, fuzzing).
    pub fn of(pairs: &[(&str, toml::Value)]) -> Result<Raw, ConfigErrors> {
        let mut raw = Raw::default();
        let mut errors = Vec::new();
        for (name, value) in pairs {
            match keys::key(name) {
                Some(key) => {
                    raw.values.insert(key.name, value.clone());
                }
                None => errors.push(unknown(name)),
            }
        }
        match errors.is_empty() {
            true => Ok(raw),
            false => Err(ConfigErrors(errors)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&toml::Value> {
        self.values.get(name)
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// Sets (or, with None, unsets) a key given by its declared name.
    pub fn set(&mut self, name: &'static str, value: Option<toml::Value>) {
        match value {
            Some(value) => self.values.insert(name, value),
            None => self.values.remove(name),
        };
    }

    /// `self` with every key `over` gives replaced by `over`'s.
    pub fn overlay(mut self, over: Raw) -> Raw {
        self.values.extend(over.values);
        Raw {
            values: self.values,
            file: over.file.or(self.file),
        }
    }

    /// Reads the file these settings name (if any) and puts them over it; with the file's
    /// settings that were refused (they are left out, so what is wrong with the rest is
    /// reported too).
    pub fn over_file(self) -> Result<(Raw, Vec<ConfigError>), ConfigErrors> {
        match &self.file {
            Some(path) => {
                let (file, refused) = Raw::from_file(path)?;
                Ok((file.overlay(self), refused))
            }
            None => Ok((self, Vec::new())),
        }
    }

    /// Reads a TOML config file: a file that is not TOML is one error; each setting it holds
    /// that is no key is named, beside the settings it does take.
    pub fn from_file(path: &Path) -> Result<(Raw, Vec<ConfigError>), ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            ConfigErrors::one(ConfigError::Read {
                path: path.to_owned(),
                source,
            })
        })?;
        let (mut raw, refused) = Raw::from_toml(&text).map_err(|(line, message)| {
            ConfigErrors::one(ConfigError::Parse {
                path: path.to_owned(),
                line,
                message,
            })
        })?;
        raw.file = Some(path.to_owned());
        Ok((raw, refused))
    }

    /// Reads TOML text; Err is the line and the parser's message.
    pub fn from_toml(text: &str) -> Result<(Raw, Vec<ConfigError>), (Option<usize>, String)> {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            (line, e.message().to_owned())
        })?;
        let mut raw = Raw::default();
        let mut refused = Vec::new();
        for (name, value) in table {
            match (TABLES.contains(&name.as_str()), value) {
                (true, toml::Value::Table(inner)) => {
                    for (sub, value) in inner {
                        raw.take(&format!("{name}.{sub}"), value, &mut refused);
                    }
                }
                (true, _) => refused.push(ConfigError::Invalid {
                    key: name.clone(),
                    message: format!("must be a table: [{name}]"),
                }),
                (false, value) => raw.take(&name, value, &mut refused),
            }
        }
        Ok((raw, refused))
    }

    fn take(&mut self, name: &str, value: toml::Value, refused: &mut Vec<ConfigError>) {
        match keys::key(name) {
            Some(key) if key.kind == Kind::Table && !value.is_table() => {
                refused.push(ConfigError::Invalid {
                    key: name.to_owned(),
                    message: format!("must be a table: [{name}]"),
                })
            }
            Some(key) => {
                self.values.insert(key.name, value);
            }
            None => refused.push(unknown(name)),
        }
    }
}

fn unknown(name: &str) -> ConfigError {
    let near = keys::KEYS
        .iter()
        .map(|k| k.name)
        .filter(|k| close(k, name))
        .collect::<Vec<_>>();
    let hint = match near.first() {
        Some(k) => format!(" (did you mean `{k}`?)"),
        None => String::new(),
    };
    ConfigError::Invalid {
        key: name.to_owned(),
        message: format!("is not a setting icecache takes{hint}"),
    }
}

/// Whether two names differ by at most two characters in place (a typo), or one is the other
/// without its table.
fn close(a: &str, b: &str) -> bool {
    let (short_a, short_b) = (
        a.rsplit('.').next().unwrap_or(a),
        b.rsplit('.').next().unwrap_or(b),
    );
    if short_a == short_b {
        return true;
    }
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    common + tail + 2 >= a.len().max(b.len())
}

/// Raw settings naming nothing but an upstream: what `icecache --upstream URL` gives.
#[cfg(test)]
pub(crate) fn with_upstream() -> Raw {
    Raw::of(&[("upstream", "http://127.0.0.1:8181".into())]).expect("a declared key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_become_dotted_keys_and_flags_win() {
        let (file, refused) =
            Raw::from_toml("upstream = \"http://a:1\"\n[cache]\nfresh_for = \"9s\"\n").unwrap();
        assert!(refused.is_empty());
        let flags = Raw::of(&[("upstream", "http://b:2".into())]).unwrap();
        let raw = file.overlay(flags);
        assert_eq!(
            raw.get("upstream").and_then(|v| v.as_str()),
            Some("http://b:2")
        );
        assert_eq!(
            raw.get("cache.fresh_for").and_then(|v| v.as_str()),
            Some("9s")
        );
    }

    #[test]
    fn every_name_that_is_no_key_is_refused_with_a_hint() {
        let (raw, refused) = Raw::from_toml(
            "upstrem = \"http://a:1\"\ncache_max = 1\n[cache]\ngzipp = true\nfresh_for = \"5s\"\n",
        )
        .unwrap();
        let refused: Vec<String> = refused.iter().map(ToString::to_string).collect();
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(refused
            .iter()
            .any(|e| e.contains("`upstrem`") && e.contains("`upstream`")));
        assert!(refused.iter().any(|e| e.contains("`cache.gzipp`")));
        assert!(raw.is_set("cache.fresh_for"), "the rest is kept");
    }

    #[test]
    fn a_secret_is_never_in_debug_output() {
        let raw = Raw::of(&[("admin_token", "hunter2".into())]).unwrap();
        assert!(!format!("{raw:?}").contains("hunter2"));
    }
}
