//! Reading the raw settings by their declarations: each value read as its key's kind, held to
//! its bounds, or its default when it is not given; every problem collected (naming its key and
//! what would be valid) so that one run reports them all; and the effective value of every key
//! noted, as `check-config` shows it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::error::ConfigError;
use super::keys::{self, Kind};
use super::raw::Raw;
use super::units::{parse_duration, parse_size, show_duration, show_size};

pub struct Values<'a> {
    raw: &'a Raw,
    pub problems: Vec<ConfigError>,
    /// Each key's effective value as `check-config` shows it (secrets never).
    pub shown: BTreeMap<&'static str, String>,
}

/// The declaration of a key the code reads; a name no key has is a mistake in the code, found
/// by every test that reads the settings.
fn declared(name: &str) -> &'static keys::Key {
    keys::key(name).unwrap_or_else(|| panic!("`{name}` is read but not declared in config::keys"))
}

impl<'a> Values<'a> {
    pub fn new(raw: &'a Raw) -> Values<'a> {
        Values {
            raw,
            problems: Vec::new(),
            shown: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(ConfigError::Invalid {
            key: key.to_owned(),
            message: message.into(),
        });
    }

    /// The value, or `fallback` after noting the problem (so checking goes on).
    pub fn or<T>(&mut self, key: &str, result: Result<T, String>, fallback: T) -> T {
        result.unwrap_or_else(|message| {
            self.add(key, message);
            fallback
        })
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.raw.is_set(name)
    }

    /// Notes what `check-config` shows for a key.
    pub fn show(&mut self, name: &str, text: impl Into<String>) {
        self.shown.insert(declared(name).name, text.into());
    }

    /// A given value as text (flags and variables always are; TOML numbers and booleans are
    /// written out); None when not given.
    fn given_text(&mut self, name: &str) -> Option<String> {
        match self.raw.get(name)? {
            toml::Value::String(s) => Some(s.clone()),
            toml::Value::Integer(n) => Some(n.to_string()),
            toml::Value::Boolean(b) => Some(b.to_string()),
            other => {
                let found = other.type_str();
                self.add(name, format!("must be a single value, not a {found}"));
                None
            }
        }
    }

    /// A duration within its key's bounds.
    pub fn duration(&mut self, name: &str) -> Duration {
        let key = declared(name);
        let default = key
            .default_value()
            .and_then(parse_duration)
            .unwrap_or_default();
        let value = self.optional_duration(name).unwrap_or(default);
        self.show(name, show_duration(value));
        value
    }

    /// A duration within its key's bounds, None when not given.
    pub fn optional_duration(&mut self, name: &str) -> Option<Duration> {
        let key = declared(name);
        let Kind::Duration { min, max } = key.kind else {
            panic!("`{name}` is not a duration");
        };
        if matches!(self.raw.get(name), Some(toml::Value::Integer(_))) {
            self.add(
                name,
                "is a bare number: write it with a unit ms, s, m or h (e.g. 250ms, 5s, 2m)",
            );
            return None;
        }
        let text = self.given_text(name)?;
        let Some(value) = parse_duration(&text) else {
            self.add(
                name,
                format!(
                    "{text:?} is not a duration: use a whole number with a unit ms, s, m or h \
                     (e.g. 250ms, 5s, 2m)"
                ),
            );
            return None;
        };
        if value < min {
            match min {
                m if m == Duration::from_millis(1) => self.add(name, "must be longer than 0s"),
                m => self.add(name, format!("must be at least {}", show_duration(m))),
            }
            return None;
        }
        if value > max {
            self.add(name, format!("must be at most {}", show_duration(max)));
            return None;
        }
        self.show(name, show_duration(value));
        Some(value)
    }

    /// A size within its key's bounds (`default` when not given).
    pub fn size_or(&mut self, name: &str, default: u64) -> u64 {
        let key = declared(name);
        let Kind::Size { min, max } = key.kind else {
            panic!("`{name}` is not a size");
        };
        let value = match self.given_text(name) {
            None => default,
            Some(text) => {
                match parse_size(&text) {
                    None => {
                        self.add(
                        name,
                        format!("{text:?} is not a size: use bytes or a number with KiB, MiB or GiB"),
                    );
                        default
                    }
                    Some(n) if n < min => {
                        self.add(
                            name,
                            format!("{n} is below the minimum of {}", show_size(min)),
                        );
                        default
                    }
                    Some(n) if n > max => {
                        self.add(
                            name,
                            format!("{n} is above the maximum of {}", show_size(max)),
                        );
                        default
                    }
                    Some(n) => n,
                }
            }
        };
        self.show(name, value.to_string());
        value
    }

    /// A size within its key's bounds, its declared default when not given.
    pub fn size(&mut self, name: &str) -> u64 {
        let default = declared(name)
            .default_value()
            .and_then(parse_size)
            .unwrap_or_default();
        self.size_or(name, default)
    }

    /// A count within its key's bounds; its declared default, or None, when not given.
    pub fn count(&mut self, name: &str) -> Option<u64> {
        let key = declared(name);
        let Kind::Count { min, max } = key.kind else {
            panic!("`{name}` is not a count");
        };
        let default = key.default_value().and_then(|d| d.parse().ok());
        let value = match self.given_text(name) {
            None => default,
            Some(text) => match text.trim().parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Some(n),
                Ok(n) if max == u64::MAX => {
                    self.add(name, format!("{n}: must be at least {min}"));
                    default
                }
                Ok(n) => {
                    self.add(name, format!("{n}: use {min} to {max}"));
                    default
                }
                Err(_) => {
                    self.add(name, format!("{text:?} is not a whole number"));
                    default
                }
            },
        };
        if let Some(n) = value {
            self.show(name, n.to_string());
        }
        value
    }

    /// A switch: `true` or `false`.
    pub fn flag(&mut self, name: &str) -> bool {
        let default = declared(name).default_value() == Some("true");
        let value = match self.given_text(name).as_deref() {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                self.add(name, format!("{other:?}: use true or false"));
                default
            }
        };
        self.show(name, value.to_string());
        value
    }

    /// Text: given, or its declared default.
    pub fn text(&mut self, name: &str) -> Option<String> {
        let key = declared(name);
        let value = self
            .given_text(name)
            .or_else(|| key.default_value().map(str::to_owned));
        match (&value, key.secret) {
            (Some(_), true) => self.show(name, "(set)"),
            (Some(text), false) => self.show(name, text.clone()),
            (None, _) => {}
        }
        value
    }

    /// One of its key's words, read into `T` (whose serde names are those words); the
    /// declared default when not given, None when it has none.
    pub fn choice<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        let key = declared(name);
        let Kind::Choice(words) = key.kind else {
            panic!("`{name}` is not a choice");
        };
        let word = match self.given_text(name) {
            Some(word) if words.contains(&word.as_str()) => word,
            Some(word) => {
                let words = words.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>();
                self.add(name, format!("{word:?}: use {}", words.join(" or ")));
                return None;
            }
            None => key.default_value()?.to_owned(),
        };
        self.show(name, word.clone());
        toml::Value::String(word).try_into().ok()
    }

    /// A choice only when it is given (policies inherit what a prefix does not set).
    pub fn given_choice<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        if !self.raw.is_set(name) {
            return None;
        }
        self.choice(name)
    }

    pub fn path(&mut self, name: &str) -> Option<PathBuf> {
        let path = self.given_text(name).map(PathBuf::from);
        if let Some(path) = &path {
            self.show(name, path.display().to_string());
        }
        path
    }

    /// A list: a TOML array of strings, or comma-separated text; None when not given.
    pub fn list(&mut self, name: &str) -> Option<Vec<String>> {
        let items = match self.raw.get(name)? {
            toml::Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>(),
            toml::Value::String(text) => Some(text.split(',').map(str::to_owned).collect()),
            _ => None,
        };
        let Some(items) = items else {
            self.add(name, "must be a list of strings");
            return None;
        };
        self.show(name, items.join(","));
        Some(items)
    }

    /// A TOML table read into `T`; None when not given or not of that shape (noted).
    pub fn table<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        let value = self.raw.get(name)?.clone();
        match value.try_into::<T>() {
            Ok(table) => {
                self.show(name, "(set)");
                Some(table)
            }
            Err(e) => {
                self.add(name, e.message().to_owned());
                None
            }
        }
    }
}
