//! The clients and catalogs people run, through icecache and directly: the Iceberg Java client,
//! Spark, Trino, pyiceberg, DuckDB and iceberg-js, in front of SeaweedFS, Iceberg's reference
//! REST server and rustberg. Each run records what it saw for docs/compatibility.md.

#[path = "../support/compatibility.rs"]
mod compatibility;
#[path = "../support/jvm.rs"]
mod jvm;
#[allow(dead_code)] // the core suite's harness, of which the clients' tests use a part
#[path = "../support/mod.rs"]
mod support;
#[path = "../support/trino.rs"]
mod trino_server;

mod java_client;
mod python_duckdb_js;
mod reference_catalog;
mod rustberg;
mod spark;
mod trino;

/// Records that `test` could not run and why. Under `scripts/test.sh`, which installs
/// everything the suite needs, that is a failure (`ICECACHE_TEST_REQUIRE_ALL`); otherwise the
/// skip is written to `ICECACHE_TEST_SKIPS` so the run's closing line counts it.
pub fn skipped(test: &str, why: &str) {
    if std::env::var_os("ICECACHE_TEST_REQUIRE_ALL").is_some() {
        panic!("{test} cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os("ICECACHE_TEST_SKIPS") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{test}");
        }
    }
}
