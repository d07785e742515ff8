//! The command line: subcommands and the flags (with their `ICECACHE_*` variables), read into
//! the raw settings.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use super::file::RawSettings;

#[derive(Debug, Parser)]
#[command(
    name = "icecache",
    version,
    about = "A caching reverse proxy for Apache Iceberg REST catalogs",
    long_about = "icecache sits in front of an Iceberg REST catalog, answers repeated loadTable \
                  calls from memory (with local 304s for If-None-Match), invalidates what writes \
                  touch, and exports Prometheus metrics on its admin port.\n\n\
                  Settings come from --config FILE, then ICECACHE_* environment variables, then \
                  flags (a flag wins). `icecache --upstream URL` alone runs with safe defaults."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: RawSettings,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file (with ICECACHE_* variables applied) and print the effective
    /// settings; exits 64 when it is not valid.
    CheckConfig {
        /// The TOML config file to check.
        file: PathBuf,
    },
    /// GET a URL (e.g. http://127.0.0.1:9181/healthz) and exit 0 on a 2xx answer within 2 s,
    /// 1 otherwise: a health check for images without curl.
    Probe {
        /// The URL to get.
        url: String,
    },
}

/// What parsing the command line came to: a command line to run, or an exit (help and version
/// exit 0; anything clap refuses is a bad configuration and exits 64 like every other).
pub enum Parsed {
    Run(Box<Cli>),
    Exit { code: u8, message: String },
}

pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Parsed {
    match Cli::try_parse_from(args) {
        Ok(cli) => Parsed::Run(Box::new(cli)),
        Err(e) => {
            let code = if e.use_stderr() {
                super::EXIT_CONFIG
            } else {
                0
            };
            Parsed::Exit {
                code,
                message: e.render().to_string(),
            }
        }
    }
}
