//! The command line: subcommands, `--config`, and one flag (with its `ICECACHE_*` variable) for
//! every key that has one, built from the declarations (`keys::KEYS`) and read into the raw
//! settings.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command as Clap};

use super::keys::{Kind, KEYS};
use super::raw::Raw;

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Serve with these settings.
    Run,
    /// Validate a config file (with the variables and flags over it) and print the effective
    /// settings; exits 64 when it is not valid.
    CheckConfig { file: PathBuf },
    /// GET a URL and exit 0 on a 2xx answer within 2 s, 1 otherwise (a health check for images
    /// without curl).
    Probe { url: String },
    /// Print every setting's key, flag, variable, default and meaning (a Markdown table), or
    /// with `--toml` a config file naming every key at its default.
    Keys { toml: bool },
}

/// A command line as read.
#[derive(Debug)]
pub struct Cli {
    pub command: Command,
    /// The flags and variables given (and the config file they name).
    pub settings: Raw,
}

/// What parsing the command line came to: a command line to run, or an exit (help and version
/// exit 0; anything clap refuses is a bad configuration and exits 64 like every other).
pub enum Parsed {
    Run(Box<Cli>),
    Exit { code: u8, message: String },
}

fn command() -> Clap {
    let mut clap = Clap::new("icecache")
        .version(env!("CARGO_PKG_VERSION"))
        .about("A caching reverse proxy for Apache Iceberg REST catalogs")
        .long_about(
            "icecache sits in front of an Iceberg REST catalog, answers repeated loadTable \
             calls from memory (with local 304s for If-None-Match), invalidates what writes \
             touch, and exports Prometheus metrics on its admin port.\n\n\
             Settings come from --config FILE, then ICECACHE_* environment variables, then \
             flags (a flag wins). `icecache --upstream URL` alone runs with safe defaults.",
        )
        .arg(
            Arg::new("config")
                .long("config")
                .env("ICECACHE_CONFIG")
                .global(true)
                .value_name("FILE")
                .help("TOML config file"),
        )
        .subcommand(
            Clap::new("check-config")
                .about(
                    "Validate a config file (with ICECACHE_* variables applied) and print the \
                     effective settings; exits 64 when it is not valid",
                )
                .arg(Arg::new("file").required(true).value_name("FILE")),
        )
        .subcommand(
            Clap::new("probe")
                .about(
                    "GET a URL (e.g. http://127.0.0.1:9181/healthz) and exit 0 on a 2xx answer \
                     within 2 s, 1 otherwise: a health check for images without curl",
                )
                .arg(Arg::new("url").required(true).value_name("URL")),
        )
        .subcommand(
            Clap::new("keys")
                .about(
                    "Print every setting: its key, flag, variable, default, whether a reload \
                     applies it, and what it means (Markdown)",
                )
                .arg(
                    Arg::new("toml")
                        .long("toml")
                        .action(ArgAction::SetTrue)
                        .help("print a config file naming every key at its default instead"),
                ),
        );
    for key in KEYS {
        let (Some(flag), Some(env)) = (key.flag, key.env()) else {
            continue;
        };
        let mut arg = Arg::new(key.name)
            .long(flag)
            .env(env)
            .hide_env_values(key.secret)
            .help(format!(
                "{} [default: {}] [key: {}]",
                key.meaning,
                key.default_text().replace('`', ""),
                key.name
            ));
        arg = match key.kind {
            Kind::List => arg.value_delimiter(',').action(ArgAction::Append),
            _ => arg.action(ArgAction::Set),
        };
        clap = clap.arg(arg);
    }
    clap
}

pub fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Parsed {
    let matches = match command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => {
            let code = if e.use_stderr() {
                super::error::EXIT_CONFIG
            } else {
                0
            };
            return Parsed::Exit {
                code,
                message: e.render().to_string(),
            };
        }
    };
    let command = match matches.subcommand() {
        Some(("check-config", sub)) => Command::CheckConfig {
            file: PathBuf::from(sub.get_one::<String>("file").cloned().unwrap_or_default()),
        },
        Some(("probe", sub)) => Command::Probe {
            url: sub.get_one::<String>("url").cloned().unwrap_or_default(),
        },
        Some(("keys", sub)) => Command::Keys {
            toml: sub.get_flag("toml"),
        },
        _ => Command::Run,
    };
    Parsed::Run(Box::new(Cli {
        command,
        settings: given(&matches),
    }))
}

/// The keys the flags and variables give.
fn given(matches: &ArgMatches) -> Raw {
    let mut raw = Raw::default();
    for key in KEYS.iter().filter(|k| k.flag.is_some()) {
        if !matches!(
            matches.value_source(key.name),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let Some(values) = matches.get_many::<String>(key.name) else {
            continue;
        };
        let values: Vec<String> = values.cloned().collect();
        let value = match key.kind {
            Kind::List => toml::Value::Array(values.into_iter().map(toml::Value::String).collect()),
            _ => toml::Value::String(values.into_iter().next_back().unwrap_or_default()),
        };
        raw.set(key.name, Some(value));
    }
    raw.file = matches.get_one::<String>("config").map(PathBuf::from);
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Cli {
        match parse(args.iter().map(Into::into)) {
            Parsed::Run(cli) => *cli,
            Parsed::Exit { message, .. } => panic!("{message}"),
        }
    }

    #[test]
    fn every_flag_sets_its_key() {
        let cli = parsed(&[
            "icecache",
            "--upstream",
            "http://a:1",
            "--fresh-for",
            "9s",
            "--strip-keys",
            "a,b",
            "--strip-keys",
            "c",
        ]);
        let raw = &cli.settings;
        assert_eq!(
            raw.get("cache.fresh_for").and_then(|v| v.as_str()),
            Some("9s")
        );
        let keys: Vec<&str> = raw
            .get("strip_keys")
            .and_then(|v| v.as_array())
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert!(!raw.is_set("listen"), "a default is not a given value");
    }

    #[test]
    fn subcommands_take_their_arguments() {
        let cli = parsed(&["icecache", "check-config", "/etc/icecache.toml"]);
        assert!(matches!(cli.command, Command::CheckConfig { .. }));
        assert!(matches!(
            parsed(&["icecache", "keys", "--toml"]).command,
            Command::Keys { toml: true }
        ));
    }
}
