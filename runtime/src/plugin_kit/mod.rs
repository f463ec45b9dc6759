//! `spillway plugin new | test`: the plugin author's kit. `new` writes a
//! plugin crate that builds and passes its own tests (`template`); `test`
//! loads a built plugin through the real C ABI and holds it to the
//! contract (`contract`).

use std::path::PathBuf;

use clap::Subcommand;

pub mod contract;
pub mod template;

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Write a new sink plugin crate NAME (a sink that appends each record, with its identity, to a file; its options; tests in-process and through the C ABI; this daemon's sink-sdk beside it). `cargo test` passes in it as written.
    New {
        /// The crate's name (lower-case letters, digits, `-`, `_`), e.g. my-sink.
        name: String,
        /// The folder to write NAME/ into.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Depend on this sink-sdk folder (e.g. a spillway checkout's) instead of writing this daemon's into NAME/vendor/sink-sdk.
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
    /// Load a built plugin (.so) through the real C ABI, as the daemon does, and check it against the contract: options (an unknown one refused, named), limits, health check in time, answers that fit each batch (empty, one record, at its limits, the same again), no panic. Exits 1 when a check fails. The records are delivered for real: give it scratch options.
    Test {
        /// The plugin's shared library.
        path: PathBuf,
        /// A TOML file holding the plugin's [sink.options] table's keys (as in the config, without the header); none by default.
        #[arg(long, value_name = "FILE")]
        options: Option<PathBuf>,
    },
}

/// Runs `command`: what to print, or why it failed (with what to print).
pub fn run(command: PluginCommand) -> Result<String, String> {
    match command {
        PluginCommand::New { name, dir, sdk } => {
            let at = template::write(&name, &dir, sdk.as_deref())?;
            Ok(format!(
                "wrote the plugin crate {name} in {}\nnext: cd {} && cargo test && cargo build --release && spillway plugin test target/release/lib{}.so --options test-options.toml\n",
                at.display(),
                at.display(),
                name.replace('-', "_")
            ))
        }
        PluginCommand::Test { path, options } => {
            let options = match options {
                Some(file) => std::fs::read_to_string(&file)
                    .map_err(|e| format!("--options {}: {e}", file.display()))?,
                None => String::new(),
            };
            contract::run(&path, &options)
        }
    }
}
