//! Several replicas on a real redis-server as one cache: what holds while the tier is whole
//! (`one_cache`), while Redis fails (`faults`), and while one replica and Redis stop hearing
//! each other (`partitions`).

#[path = "../support/gate.rs"]
mod gate;
#[allow(dead_code)] // the core suite's harness, of which the tier's tests use a part
#[path = "../support/mod.rs"]
mod support;

mod faults;
mod lease_scripts;
mod leases;
mod one_cache;
mod partitions;
mod replays;
mod replica;
