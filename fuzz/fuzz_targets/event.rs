#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| icecache::fuzz_targets::event(data));
