//! `spillway check [FILE]`: would `spillway run` start on this config?
//!
//! The file is parsed and validated as the daemon does (`main.rs` loads it
//! and hands [`run`] the outcome). Then, unless `--no-environment`, the
//! parts that touch the outside world: the daemon's own folders
//! (`server.data_dir`, the folders of `server.socket_path` and
//! `admin.socket_path`) must exist or be creatable, and the sink is built
//! as far as it can be without delivering or leaving anything behind
//! (`spillway_sinks::preflight`: the plugin loaded, its options checked
//! against what it declares and by its `create`, and printed with their
//! values or defaults, the bearer token variable read, the HTTP host resolved
//! and its health check tried, the output file openable).
//!
//! What `run` refuses before it starts, `check` refuses too: a data folder
//! holding files spillway did not make, a socket path that exists and is
//! not a socket, a socket folder another user could write (unless
//! `server.allow_insecure_socket_dir`), an `admin.metrics_address`, a
//! `server.http.listen` or a `server.tcp.listen` that does not parse or
//! cannot be bound (busy, or not this machine's), a door's TLS certificate
//! and key that do not load or make no pair, and a server certificate no
//! client would accept (expired, not yet valid, an extended key usage
//! without serverAuth). A certificate whose names do not cover the door's
//! listen address is a warning, as it is at the start.
//!
//! Every error names the key. A sink that does not answer its health
//! check, or whose host does not resolve, is a warning, not an error: the
//! daemon would start and retry. A `server.socket_group` this machine does
//! not know is an error, as at the start.
//! Nothing here takes a lock or starts delivery, and the metrics address
//! is bound only for an instant, so a config can be checked while a daemon
//! runs on it (its own busy address is then a warning, not an error).

use std::path::Path;
use std::process::ExitCode;

use spillway_sinks::SinkConfig;

use crate::config::Config;
use crate::logging::{say, say_err};

/// `spillway check`: `loaded` is the parsed and validated config and how to
/// name it (or why it is not), `environment_checks` is false with
/// `--no-environment`. Prints `NAME: ok` and one line per warning on
/// stdout, or each error on stderr and fails.
pub fn run(loaded: Result<(Config, String), String>, environment_checks: bool) -> ExitCode {
    let (cfg, origin) = match loaded {
        Ok(v) => v,
        Err(e) => {
            say_err(&format!("spillway: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let found = if environment_checks {
        environment(&cfg)
    } else {
        Findings::default()
    };
    for error in &found.errors {
        say_err(&format!("spillway: {origin}: {error}"));
    }
    if found.errors.is_empty() {
        say(&format!("{origin}: ok"));
    }
    for warning in &found.warnings {
        say(&format!("{origin}: warning: {warning}"));
    }
    for note in &found.notes {
        say(note);
    }
    if found.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What the environment checks found.
#[derive(Debug, Default)]
struct Findings {
    /// Each names the key; any of them makes `check` exit non-zero.
    errors: Vec<String>,
    /// Printed after `FILE: ok`; the exit status stays 0.
    warnings: Vec<String>,
    /// Printed after the warnings as they are (a plugin's options).
    notes: Vec<String>,
}

/// Runs every environment check on a config that parsed and validated.
/// All of them run, so one `check` reports every problem it can see.
fn environment(cfg: &Config) -> Findings {
    let mut found = Findings::default();
    let folders: [(&str, &Path); 3] = [
        ("server.data_dir", &cfg.server.data_dir),
        ("server.socket_path", folder_of(&cfg.server.socket_path)),
        ("admin.socket_path", folder_of(&cfg.admin.socket_path)),
    ];
    for (key, folder) in folders {
        if let Err(e) = spillway_sinks::file::creatable_folder(folder) {
            found.errors.push(format!("{key}: {e}"));
        }
    }
    if let Err(e) = cfg.check_data_dir() {
        found.errors.push(e);
    }
    // The group is looked up at the start, before anything is made.
    if let Err(e) = cfg.server.socket_access() {
        found.errors.push(e.to_string());
    }
    let insecure_ok = cfg.server.allow_insecure_socket_dir;
    for (key, socket) in [
        ("server.socket_path", &cfg.server.socket_path),
        ("admin.socket_path", &cfg.admin.socket_path),
    ] {
        match spillway_actors::check_socket_path(socket, insecure_ok) {
            Ok(None) => {}
            Ok(Some(insecure)) => found.warnings.push(format!(
                "{key}: another user could replace the socket ({}: {}); allowed by server.allow_insecure_socket_dir",
                insecure.folder.display(),
                insecure.why
            )),
            Err(e) => found.errors.push(format!("{key}: {e}")),
        }
    }
    let mut addresses: Vec<(&str, &str)> = Vec::new();
    if let Some(address) = &cfg.admin.metrics_address {
        addresses.push(("admin.metrics_address", address));
    }
    for door in cfg.server.network_doors() {
        addresses.push((door.key("listen"), &door.listen));
    }
    for (key, address) in addresses {
        listen_address(cfg, key, address, &mut found);
    }
    // Read and judged as the start does (spillway_actors::ingest::tls).
    for files in cfg.server.network_doors().filter_map(|d| d.tls_files()) {
        match spillway_actors::TlsServer::check(&files) {
            Ok(warnings) => found.warnings.extend(warnings),
            Err(e) => found.errors.push(e),
        }
    }
    // On its own thread under the sinks' build_timeout_ms, as the daemon
    // builds them. Each sink's findings name its table.
    let sinks: Vec<(String, SinkConfig)> = cfg
        .sinks
        .iter()
        .map(|(n, s)| (n.clone(), s.clone()))
        .collect();
    let deadline = crate::sinks::build_timeout(&sinks);
    let preflight = crate::sinks::build_on_thread(deadline, move || {
        sinks
            .iter()
            .map(|(name, sink)| {
                (
                    name.clone(),
                    spillway_sinks::preflight(sink).map_err(|e| e.to_string()),
                )
            })
            .collect::<Vec<_>>()
    })
    .and_then(|build| build.wait());
    match preflight {
        Ok(per_sink) => {
            for (_, result) in per_sink {
                match result {
                    Ok(preflight) => {
                        found.warnings.extend(preflight.warnings);
                        found.notes.extend(preflight.notes);
                    }
                    Err(e) => found.errors.push(e),
                }
            }
        }
        Err(e) => found.errors.push(e),
    }
    found
}

/// Bind an address the daemon listens on (`key`: the metrics address, or
/// a door's) for an instant, as `run` would. Busy is an error unless a
/// daemon answers on this config's admin socket (then the address is
/// presumably its own: a warning).
fn listen_address(cfg: &Config, key: &str, address: &str, found: &mut Findings) {
    let error = match std::net::TcpListener::bind(address) {
        Ok(_) => return,
        Err(e) => e,
    };
    let running = std::os::unix::net::UnixStream::connect(&cfg.admin.socket_path).is_ok();
    if error.kind() == std::io::ErrorKind::AddrInUse && running {
        found.warnings.push(format!(
            "{key} {address}: in use, presumably by the daemon running on this config \
             (its admin socket {} answers)",
            cfg.admin.socket_path.display()
        ));
    } else {
        found.errors.push(format!("{key} {address}: {error}"));
    }
}

/// The folder a socket lives in (`.` for a bare name).
fn folder_of(socket: &Path) -> &Path {
    match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}
