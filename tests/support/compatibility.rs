//! What the client and catalog tests saw, one file per row of the compatibility matrix
//! (`target/compatibility/<row>.json`); `scripts/compatibility.py` writes the matrix in
//! docs/compatibility.md from a whole run's files.

use std::path::PathBuf;

use serde_json::Value;

fn directory() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/compatibility")
}

/// Records what row `row` measured (a JSON object), replacing an earlier run's.
pub fn record(row: &str, measured: Value) {
    let dir = directory();
    std::fs::create_dir_all(&dir).expect("target/compatibility");
    let text = serde_json::to_string_pretty(&measured).expect("JSON");
    let file: String = row
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    std::fs::write(dir.join(format!("{file}.json")), text).expect("a compatibility row");
}
