//! Properties `credentials = inject` merges into a served body's `config`. Secret values come
//! from the environment or a file, never from the config file itself; they are read when the
//! configuration is loaded (and again on every reload, which is how they are rotated) and are
//! never written into a cache entry: entries hold the stripped body, the values are spliced in
//! as each answer is written.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;
use serde::Deserialize;
use thiserror::Error;

use super::patterns::KeyPatterns;

/// Where an injected property's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectSource {
    pub value: Option<String>,
    pub env: Option<String>,
    pub file: Option<PathBuf>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum InjectionError {
    #[error(
        "property {property:?} is a secret: give it with `env = \"VAR\"` or `file = \"/path\"`, \
         never as a value in the config file"
    )]
    SecretAsValue { property: String },
    #[error("property {property:?}: environment variable {var} is not set")]
    MissingEnv { property: String, var: String },
    #[error("property {property:?}: cannot read {path}: {message}")]
    Unreadable {
        property: String,
        path: String,
        message: String,
    },
    #[error("property {property:?} needs exactly one of value, env or file")]
    Ambiguous { property: String },
}

/// The injected members, ready to splice. `Debug` shows the keys, never the values.
#[derive(PartialEq, Eq)]
pub struct Injection {
    keys: Vec<String>,
    /// `"k":"v","k2":"v2"`: spliced into the `config` object of a served body.
    pub fragment: Bytes,
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Injection {
    /// Reads every value now, so that a missing variable or file fails the config check; every
    /// property that cannot be read is reported.
    pub fn load(
        properties: &BTreeMap<String, InjectSource>,
        secrets: &KeyPatterns,
    ) -> Result<Injection, Vec<InjectionError>> {
        let mut members = Vec::new();
        let mut errors = Vec::new();
        for (name, source) in properties {
            match read(name, source, secrets) {
                Ok(value) => members.push(format!(
                    "{}:{}",
                    serde_json::Value::String(name.clone()),
                    serde_json::Value::String(value)
                )),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Injection {
            keys: properties.keys().cloned().collect(),
            fragment: Bytes::from(members.join(",")),
        })
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// A stripped LoadCredentialsResponse whose storage credentials are the injected
    /// properties, one for each prefix the catalog vended for: a client refreshing its
    /// credentials gets the ones it is meant to use. A body that is not such a response is
    /// returned as it is.
    pub fn as_storage_credentials(&self, stripped: &Bytes, prefixes: &[String]) -> Bytes {
        let injected = format!("{{{}}}", String::from_utf8_lossy(&self.fragment));
        let (Ok(serde_json::Value::Object(mut body)), Ok(config)) = (
            serde_json::from_slice::<serde_json::Value>(stripped),
            serde_json::from_str::<serde_json::Value>(&injected),
        ) else {
            return stripped.clone();
        };
        let entries = prefixes
            .iter()
            .map(|prefix| serde_json::json!({ "prefix": prefix, "config": config }))
            .collect();
        body.insert(
            "storage-credentials".to_owned(),
            serde_json::Value::Array(entries),
        );
        serde_json::to_vec(&body).map_or_else(|_| stripped.clone(), Bytes::from)
    }
}

/// One property's value, from where its source says.
fn read(
    name: &str,
    source: &InjectSource,
    secrets: &KeyPatterns,
) -> Result<String, InjectionError> {
    let property = name.to_owned();
    match (&source.value, &source.env, &source.file) {
        (Some(_), None, None) if secrets.matches(name) => {
            Err(InjectionError::SecretAsValue { property })
        }
        (Some(value), None, None) => Ok(value.clone()),
        (None, Some(var), None) => std::env::var(var).map_err(|_| InjectionError::MissingEnv {
            property,
            var: var.clone(),
        }),
        (None, None, Some(path)) => std::fs::read_to_string(path)
            .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
            .map_err(|e| InjectionError::Unreadable {
                property,
                path: path.display().to_string(),
                message: e.to_string(),
            }),
        _ => Err(InjectionError::Ambiguous { property }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(value: Option<&str>, env: Option<&str>, file: Option<PathBuf>) -> InjectSource {
        InjectSource {
            value: value.map(str::to_owned),
            env: env.map(str::to_owned),
            file,
        }
    }

    #[test]
    fn secret_values_must_come_from_env_or_file() {
        let properties: BTreeMap<_, _> = [(
            "s3.secret-access-key".to_owned(),
            source(Some("plain"), None, None),
        )]
        .into();
        let errors = Injection::load(&properties, &KeyPatterns::default()).unwrap_err();
        assert!(errors[0].to_string().contains("env"), "{errors:?}");
    }

    #[test]
    fn values_are_read_from_files_and_written_as_json_members() {
        let path = std::env::temp_dir().join(format!("icecache-inject-{}", std::process::id()));
        std::fs::write(&path, "from\"file\n").unwrap();
        let properties: BTreeMap<_, _> = [
            (
                "s3.secret-access-key".to_owned(),
                source(None, None, Some(path.clone())),
            ),
            (
                "client.region".to_owned(),
                source(Some("eu-west-1"), None, None),
            ),
        ]
        .into();
        let injection = Injection::load(&properties, &KeyPatterns::default()).unwrap();
        let _ = std::fs::remove_file(path);
        assert_eq!(
            &injection.fragment[..],
            br#""client.region":"eu-west-1","s3.secret-access-key":"from\"file""#
        );
        assert!(!format!("{injection:?}").contains("from"));
    }

    #[test]
    fn a_source_must_name_exactly_one_origin() {
        let properties: BTreeMap<_, _> = [(
            "client.region".to_owned(),
            source(Some("a"), Some("B"), None),
        )]
        .into();
        let errors = Injection::load(&properties, &KeyPatterns::default()).unwrap_err();
        assert!(matches!(errors[..], [InjectionError::Ambiguous { .. }]));
    }

    #[test]
    fn every_property_that_cannot_be_read_is_reported() {
        let properties: BTreeMap<_, _> = [
            (
                "s3.secret-access-key".to_owned(),
                source(Some("x"), None, None),
            ),
            ("S3.Session-Token".to_owned(), source(Some("y"), None, None)),
            (
                "s3.access-key-id".to_owned(),
                source(None, Some("ICECACHE_TEST_UNSET_VAR"), None),
            ),
            (
                "client.region".to_owned(),
                source(None, None, Some("/nonexistent/x".into())),
            ),
        ]
        .into();
        let errors = Injection::load(&properties, &KeyPatterns::default()).unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
    }
}
