//! The one part of the `spillway` binary that other crates of this
//! workspace link: the configuration file's parser ([`config`], with the
//! `[log]` keys it checks in [`logging`]), so that the fuzz targets
//! (`testing/fuzz-targets/`) can feed it any text. It is not an API for anyone
//! else: the product is the binary, whose `main.rs` holds every other
//! module.

pub mod config;
pub mod logging;
