//! The core suite: icecache as one process in front of the real catalog (SeaweedFS, started by
//! scripts/test.sh), stand-ins where no real catalog can show a behaviour, and its own
//! command line and files. One module per promise; docs/promises.md maps each promise of the
//! documentation to the tests that hold it.

#[path = "../support/mod.rs"]
mod support;

mod answers;
mod bad_clients;
mod cache;
mod cache_keys;
mod catalog_faults;
mod catalog_protection;
mod catalog_validators;
mod closing;
mod command_line;
mod config_route;
mod connections;
mod deploy;
mod docs_match_code;
mod events_kafka;
mod events_nats;
mod events_seaweedfs;
mod existence_checks;
mod fuzz_findings;
mod hit_heads;
mod idempotency;
mod load_credentials;
mod passthrough;
mod path_spellings;
mod purge;
mod randomized;
mod reload;
mod repeated_heads;
mod resources;
mod secrets;
mod strip_everywhere;
mod tls;
mod tls_http2;
mod vended_credentials;
mod views;
mod writes_win;
