//! The bodies of spillway's fuzz targets: one function per parser that
//! reads bytes from outside the daemon (a producer's socket, a file on
//! disk, the configuration, an HTTP receiver's answer).
//!
//! Each takes any `&[u8]` and must not panic, hang or allocate without
//! bound; where the parser has a property, it checks it (decode → encode
//! → decode gives the same value, a second recovery changes nothing, the
//! decoder agrees with a model written from the spec) and panics when it
//! does not hold, which is how both drivers see a failure:
//!
//! - the cargo-fuzz targets in `testing/fuzz/` are one-line wrappers around these
//!   functions (nightly, libFuzzer; see `testing/fuzz/README.md`);
//! - this crate's tests run them in the normal `cargo test` on proptest
//!   inputs, on every file of `testing/fuzz/corpus/` and on each input a fuzzer
//!   ever found failing (`tests/regressions.rs`).
//!
//! Inputs are raw where the parser reads raw bytes (frames, TOML text).
//! The storage targets begin with a control byte that picks a variant and
//! which checksums to recompute, so that the fuzzer gets past the CRCs
//! instead of stopping at them; each function documents its layout.

mod checkpoint;
mod config;
mod deadletter;
mod http;
mod protocol;
mod scratch;
mod segment;

pub use checkpoint::checkpoint;
pub use config::config;
pub use deadletter::{dead_letter, envelope_record};
pub use http::http_response;
pub use protocol::{frame_decoder, push_batch};
pub use segment::segment;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name: the names of `testing/fuzz/fuzz_targets/*.rs` and of the
/// folders of `testing/fuzz/corpus/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("frame_decoder", frame_decoder),
    ("push_batch", push_batch),
    ("segment", segment),
    ("checkpoint", checkpoint),
    ("dead_letter", dead_letter),
    ("config", config),
    ("http_response", http_response),
];
