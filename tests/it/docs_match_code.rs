//! The documentation of every setting is what the code declares: docs/configuration.md's table
//! is `icecache keys`, and deploy/icecache.toml is `icecache keys --toml`, character for
//! character; every flag the table names is one `icecache --help` lists; and every test
//! docs/promises.md names exists.

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

/// The test functions of `tests/BINARY/MODULE.rs`, or None when there is no such module.
fn tests_of(binary: &str, module: &str) -> Option<Vec<String>> {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{binary}/{module}.rs")),
    )
    .ok()?;
    let mut names = Vec::new();
    let mut marked = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            marked = true;
        } else if marked {
            if let Some(rest) = line.strip_prefix("async fn ").or(line.strip_prefix("fn ")) {
                names.push(rest.split('(').next().unwrap_or("").to_owned());
                marked = false;
            }
        }
    }
    Some(names)
}

#[test]
fn every_test_the_promises_name_exists() {
    let doc = file("docs/promises.md");
    let mut named = 0;
    for row in doc.lines().filter(|l| l.starts_with("| ")) {
        // Each cell's tests follow `it:`, `cluster:` or `clients:`; names are in backquotes.
        let cell = row.rsplit('|').nth(1).unwrap_or("");
        let mut binary = None;
        for (i, part) in cell.split('`').enumerate() {
            if i % 2 == 0 {
                for word in part.split([' ', ';', ',']) {
                    if let Some(b) = word.strip_suffix(':') {
                        binary = Some(b.to_owned());
                    }
                }
                continue;
            }
            let Some((module, test)) = part.split_once("::") else {
                continue;
            };
            let Some(binary) = &binary else { continue };
            if binary.contains('/') || module.contains('.') {
                continue;
            }
            let tests = tests_of(binary, module)
                .unwrap_or_else(|| panic!("docs/promises.md names tests/{binary}/{module}.rs"));
            assert!(
                test == "*" || tests.iter().any(|t| t == test),
                "docs/promises.md names {binary}: {module}::{test}, which is no test"
            );
            named += 1;
        }
    }
    assert!(named > 50, "only {named} tests named");
}
