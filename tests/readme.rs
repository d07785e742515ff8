//! docs/configuration.md's table says what the code does: every default it writes is the
//! code's `DEFAULT_*` constant, and every flag it names is one `icecache --help` lists.

use std::path::Path;
use std::process::Command;

fn configuration_doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"))
        .expect("docs/configuration.md")
}

/// The rows of the configuration table: (key cell, flag cell, default cell).
fn configuration_rows() -> Vec<(String, String, String)> {
    configuration_doc()
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1].to_owned(),
                cells[2].to_owned(),
                cells[4].to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_default_in_the_configuration_doc_is_the_codes() {
    let rows = configuration_rows();
    for (key, default) in icecache::config::documented_defaults() {
        let row = rows
            .iter()
            .find(|(keys, _, _)| keys.split(", ").any(|k| k == format!("`{key}`")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for `{key}`"));
        assert!(
            row.2.contains(&format!("`{default}`")),
            "docs/configuration.md says the default of `{key}` is {:?}; the code says `{default}`",
            row.2
        );
    }
}

#[test]
fn every_flag_in_the_configuration_doc_exists() {
    let help = Command::new(env!("CARGO_BIN_EXE_icecache"))
        .arg("--help")
        .output()
        .expect("icecache --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for (_, flags, _) in configuration_rows() {
        for flag in flags.split(", ").filter(|f| f.starts_with("`--")) {
            let flag = flag.trim_matches('`');
            assert!(
                help.contains(flag),
                "docs/configuration.md names {flag}, which --help does not list"
            );
        }
    }
}
