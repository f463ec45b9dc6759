//! Byte units, defined once for every spillway crate and plugin: config
//! defaults and ranges, buffer sizes, test fixtures.

/// 1,024 bytes.
pub const KIB: u64 = 1024;
/// 1,024 KiB.
pub const MIB: u64 = 1024 * KIB;
/// 1,024 MiB.
pub const GIB: u64 = 1024 * MIB;
