//! Replays every input the fuzzers found interesting (fuzz/corpus/, committed) through the
//! same checks the fuzz targets run: a fixed finding stays fixed.

use std::path::Path;

use icecache::fuzz_targets;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{target} fails on {}", path.display());
        count += 1;
    }
    assert!(count > 0, "the {target} corpus is empty");
    count
}

#[test]
fn route_corpus() {
    replay("route", fuzz_targets::route);
}

#[test]
fn if_none_match_corpus() {
    replay("if_none_match", fuzz_targets::if_none_match);
}

#[test]
fn key_corpus() {
    replay("key", fuzz_targets::key);
}

#[test]
fn strip_corpus() {
    replay("strip", fuzz_targets::strip);
}

#[test]
fn config_corpus() {
    replay("config", fuzz_targets::config);
}

#[test]
fn event_corpus() {
    replay("event", fuzz_targets::event);
}
