//! What is wrong with a configuration: every problem at once, each naming its key.

use std::path::PathBuf;

use thiserror::Error;

/// Exit code for a configuration that does not validate (BSD `EX_USAGE`).
pub const EXIT_CONFIG: u8 = 64;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML for icecache{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

/// Everything wrong with a configuration.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn one(error: ConfigError) -> ConfigErrors {
        ConfigErrors(vec![error])
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
