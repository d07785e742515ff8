//! Configuration: every key declared once (`keys`), given by a TOML file under flags and
//! `ICECACHE_*` variables (`raw`, `cli`), read by its declaration (`values`) and checked as a
//! whole (`validate`) into the typed `Settings` below, before any port is bound.

mod cli;
mod error;
pub mod keys;
pub mod raw;
pub mod reference;
mod settings;
pub mod units;
mod validate;
mod values;

pub use cli::{parse, Cli, Command, Parsed};
pub use error::{ConfigError, ConfigErrors, EXIT_CONFIG};
pub use raw::Raw;
pub use settings::{check_file, load, CacheSettings, Settings};
