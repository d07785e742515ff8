//! The documentation of every setting is what the code declares: docs/configuration.md's table
//! is `icecache keys`, and deploy/icecache.toml is `icecache keys --toml`, character for
//! character; and every flag the table names is one `icecache --help` lists.

use std::path::Path;
use std::process::Command;

fn file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn icecache(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_icecache"))
        .args(args)
        .output()
        .expect("icecache runs");
    assert!(output.status.success(), "icecache {args:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_configuration_table_is_the_declarations() {
    let doc = file("docs/configuration.md");
    let table = doc
        .split("<!-- keys:begin")
        .nth(1)
        .and_then(|rest| rest.split_once("-->"))
        .and_then(|(_, rest)| rest.split("<!-- keys:end -->").next())
        .expect("docs/configuration.md has its keys markers");
    assert_eq!(
        table.trim(),
        icecache(&["keys"]).trim(),
        "run `icecache keys` and put its table between the markers"
    );
}

#[test]
fn the_example_config_file_is_the_declarations() {
    assert_eq!(
        file("deploy/icecache.toml"),
        icecache(&["keys", "--toml"]),
        "run `icecache keys --toml > deploy/icecache.toml`"
    );
}

#[test]
fn every_flag_in_the_table_exists() {
    let help = icecache(&["--help"]);
    for line in icecache(&["keys"]).lines().filter(|l| l.starts_with("| `")) {
        let flag = line
            .split('|')
            .nth(2)
            .unwrap_or("")
            .trim()
            .trim_matches('`');
        if flag.starts_with("--") {
            assert!(help.contains(flag), "{flag} is not in --help");
        }
    }
}
