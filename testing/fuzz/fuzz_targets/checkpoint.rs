#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| spillway_fuzz_targets::checkpoint(data));
