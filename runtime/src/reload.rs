//! Hot reload of the `[sink]` table: SIGHUP, `spillway ctl reload`, or a
//! change seen by `--watch-config`.
//!
//! Steps: read the file, parse and validate it, build the new sink and run
//! its health check (on a thread of its own, under `sink.build_timeout_ms`:
//! see `crate::sink`), then hand it to every drain through the shared
//! [`SinkSlot`]; each drain switches at its next batch boundary and drops
//! its old instance. A file that fails any step leaves the running sink
//! untouched; the reason is logged, returned to `ctl reload` and counted.
//! Changes outside `[sink]` need a restart and are reported as such.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use spillway_actors::SinkSlot;

use crate::config::Config;
use crate::sink::{build_on_thread, build_timeout, sink_maker_checked};

/// Counters exported by `ctl stats`.
#[derive(Debug, Default)]
pub struct ReloadStats {
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

/// Owns the running config and applies reloads to it.
pub struct Reloader {
    /// `None` when running on the embedded default: nothing to re-read.
    path: Option<PathBuf>,
    current: Config,
    slot: Arc<SinkSlot>,
    description: Arc<Mutex<String>>,
    pub stats: Arc<ReloadStats>,
    /// (mtime, size) of the file as last applied by the file watch.
    seen_file: Option<(SystemTime, u64)>,
    /// A changed (mtime, size) waiting one poll to be sure the write is done.
    settling: Option<(SystemTime, u64)>,
    /// (mtime, size) of the running plugin's library: a rebuilt plugin is
    /// reloaded even when the `[sink]` table did not change.
    plugin_file: Option<(SystemTime, u64)>,
}

/// What a reload has to do once the file is read.
enum Plan {
    /// The sink is the same: nothing to build (the report may still name
    /// keys that need a restart).
    Unchanged(String),
    /// A new sink to build from `new`.
    Build {
        new: Box<Config>,
        report: String,
        plugin_file: Option<(SystemTime, u64)>,
    },
}

/// (mtime, size) of the plugin library a config points at, if it is a plugin.
fn plugin_fingerprint(cfg: &Config) -> Option<(SystemTime, u64)> {
    file_stamp(cfg.sink.plugin_path()?)
}

impl Reloader {
    pub fn new(
        path: Option<PathBuf>,
        current: Config,
        slot: Arc<SinkSlot>,
        description: Arc<Mutex<String>>,
    ) -> Self {
        let seen_file = path.as_ref().and_then(|p| file_stamp(p));
        let plugin_file = plugin_fingerprint(&current);
        Reloader {
            path,
            current,
            slot,
            description,
            stats: Arc::new(ReloadStats::default()),
            seen_file,
            settling: None,
            plugin_file,
        }
    }

    /// Run a reload; `Ok` carries a report for `ctl reload`. The new sink
    /// is built and health-checked on a thread of its own under
    /// `sink.build_timeout_ms` ([`crate::sink::build_on_thread`]); this
    /// future only waits for it, so the arbiter it runs on keeps serving
    /// connections, the admin socket and `/ready` meanwhile. No borrow of
    /// the reloader is held across the wait.
    pub async fn reload(this: Rc<RefCell<Reloader>>) -> Result<String, String> {
        let outcome = Reloader::try_reload(&this).await;
        let stats = this.borrow().stats.clone();
        match outcome {
            Ok(report) => {
                stats.succeeded.fetch_add(1, Ordering::Relaxed);
                tracing::info!(report = %report.trim_end(), "config reloaded");
                Ok(report)
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "config reload rejected; the running sink is unchanged");
                Err(format!("reload rejected, running sink unchanged: {e}"))
            }
        }
    }

    async fn try_reload(this: &Rc<RefCell<Reloader>>) -> Result<String, String> {
        let (new, mut report, plugin_file) = match this.borrow().plan()? {
            Plan::Unchanged(report) => return Ok(report),
            Plan::Build {
                new,
                report,
                plugin_file,
            } => (new, report, plugin_file),
        };
        let deadline = build_timeout(&new);
        let for_build = new.clone();
        let built = build_on_thread(deadline, move || sink_maker_checked(&for_build))?
            .wait_async()
            .await??;
        let (maker, description) = built;
        let mut me = this.borrow_mut();
        me.slot
            .replace(maker, new.drain_settings(), description.clone());
        *me.description.lock().unwrap() = description.clone();
        report.push_str(&format!(
            "sink switched to {description} (each shard switches at its next batch boundary)\n"
        ));
        me.current.sink = new.sink;
        me.plugin_file = plugin_file;
        Ok(report)
    }

    /// Reads and validates the file (bounded: a capped read of a regular
    /// file, a nesting limit) and says what the reload has to do.
    fn plan(&self) -> Result<Plan, String> {
        let path = self.path.clone().ok_or("the daemon runs on the embedded default config; there is no file to reload (start it with --config FILE)")?;
        let new = Config::load(&path).map_err(|e| e.to_string())?;
        let mut report = String::new();
        for key in restart_needed(&self.current, &new) {
            report.push_str(&format!("{key} changed: needs a restart, not applied\n"));
        }
        let plugin_file = plugin_fingerprint(&new);
        if new.sink == self.current.sink && plugin_file == self.plugin_file {
            report.push_str("sink unchanged\n");
            return Ok(Plan::Unchanged(report));
        }
        Ok(Plan::Build {
            new: Box::new(new),
            report,
            plugin_file,
        })
    }

    /// For `--watch-config`, called every poll: true (reload now) once a
    /// changed file has kept the same (mtime, size) for one poll, so a file
    /// still being written is not read half-way.
    pub fn poll_file(&mut self) -> bool {
        let Some(path) = &self.path else { return false };
        let Some(stamp) = file_stamp(path) else {
            return false;
        };
        if self.seen_file == Some(stamp) {
            self.settling = None;
            return false;
        }
        if self.settling != Some(stamp) {
            self.settling = Some(stamp);
            return false;
        }
        self.seen_file = Some(stamp);
        self.settling = None;
        tracing::info!(path = %path.display(), "config file changed: reloading");
        true
    }
}

fn file_stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Pushes `section.field` for every field of `$old` and `$new` (both a
/// `$ty`) that differs. The pattern names every field with no `..`, so a
/// field added to the struct and not listed here does not compile: no
/// key can be left out of the reload's report.
macro_rules! changed_fields {
    ($keys:ident, $section:literal, $old:expr, $new:expr, $ty:ident { $($field:ident),* $(,)? }) => {{
        let $ty { $($field: _),* } = $old;
        $(
            if $old.$field != $new.$field {
                $keys.push(concat!($section, ".", stringify!($field)));
            }
        )*
    }};
}

/// Keys outside `[sink]` that differ (they need a restart).
fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    use crate::config::{AdminConfig, LogConfig, ServerConfig, WabConfig};
    let mut keys = Vec::new();
    changed_fields!(
        keys,
        "server",
        &old.server,
        &new.server,
        ServerConfig {
            socket_path,
            data_dir,
            shards,
            max_connections,
            payload_bytes_max,
            connection_read_timeout_ms,
            connection_idle_timeout_ms,
            evict_idle_connections,
            evict_idle_after_ms,
            read_buffer_bytes_max,
            allow_insecure_socket_dir,
            inflight_records_max,
            inflight_bytes_max,
            shutdown_timeout_ms,
            socket_mode,
            socket_group,
        }
    );
    changed_fields!(
        keys,
        "wab",
        &old.wab,
        &new.wab,
        WabConfig {
            segment_bytes_max,
            wab_bytes_max,
            buffered_flush_interval_ms,
            fsync_failures_max,
            flusher_spin_us,
            group_bytes_max,
        }
    );
    changed_fields!(keys, "log", &old.log, &new.log, LogConfig { level, format });
    changed_fields!(
        keys,
        "admin",
        &old.admin,
        &new.admin,
        AdminConfig {
            socket_path,
            metrics_address,
            connections_max,
            ready_stall_ms,
        }
    );
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, "test").unwrap()
    }

    /// Every key outside `[sink]` is reported by its own name, the ones
    /// once missed from the list included; a `[sink]` change is not.
    #[test]
    fn every_changed_key_outside_sink_is_named() {
        let base = parse("");
        for (text, key) in [
            (
                "[server]\nconnection_idle_timeout_ms = 1234\n",
                "server.connection_idle_timeout_ms",
            ),
            (
                "[server]\nread_buffer_bytes_max = 33554432\n",
                "server.read_buffer_bytes_max",
            ),
            (
                "[server]\nallow_insecure_socket_dir = true\n",
                "server.allow_insecure_socket_dir",
            ),
            ("[server]\nshards = 3\n", "server.shards"),
            ("[wab]\nwab_bytes_max = 2147483648\n", "wab.wab_bytes_max"),
            ("[wab]\ngroup_bytes_max = 65536\n", "wab.group_bytes_max"),
            ("[log]\nlevel = \"debug\"\n", "log.level"),
            ("[log]\nformat = \"json\"\n", "log.format"),
            (
                "[admin]\nmetrics_address = \"127.0.0.1:9898\"\n",
                "admin.metrics_address",
            ),
            (
                "[admin]\nsocket_path = \"/tmp/other-admin.sock\"\n",
                "admin.socket_path",
            ),
        ] {
            assert_eq!(restart_needed(&base, &parse(text)), [key], "{text}");
        }
        let sink = parse("[sink]\ntype = \"file\"\npath = \"/tmp/spillway-reload-test.ndjson\"\n");
        assert!(restart_needed(&base, &sink).is_empty());
        assert!(restart_needed(&base, &base).is_empty());
    }
}
