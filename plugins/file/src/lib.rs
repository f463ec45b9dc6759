//! # spillway-plugin-file: the file sink, as a plugin
//!
//! A sink plugin that appends every record to a local file as one NDJSON
//! line (the payload, then `\n`), byte for byte the output of the built-in
//! `type = "file"` sink with `format = "ndjson"`. It is the template to
//! copy for a new plugin, and the yardstick of what the plugin boundary
//! costs: the daemon hands it views of its buffer, nothing is copied or
//! allocated per record on the way in, so delivering through it should
//! cost about what the built-in sink costs.
//!
//! ```toml
//! [sink]
//! type = "plugin"
//! path = "target/release/libspillway_plugin_file.so"
//!
//! [sink.options]
//! path = "spillway-data/delivered-by-plugin.ndjson"
//! fsync = true                 # fdatasync before reporting a batch delivered
//! rotate_bytes = 268435456     # start a new file past 256 MiB
//! ```
//!
//! The options are documented on [`FileOptions`]. A record containing a
//! newline cannot be an NDJSON line: it is rejected (dead-lettered) with
//! the offset of the newline, and the rest of its batch is written.
//!
//! The crate follows the layout every sink has: [`options`] (what the user
//! writes), [`output`] (which file records reach), [`sink`] (the `Sink`
//! that ties them together), and this file, which exports it. The framing
//! and the file itself (rotation, fsync, cutting a failed batch off) are
//! `sink_sdk::output`'s building blocks, the ones the built-in sink is made
//! of: a plugin that writes files starts from them, not from a copy.

pub mod options;
pub mod output;
pub mod sink;

pub use options::FileOptions;
pub use sink::FileSink;

sink_sdk::export_sink!(FileSink);
