//! Hot reload of the sinks (`[sink]` or `[sinks.NAME]`): SIGHUP, `spillway
//! ctl reload`, or a change seen by `--watch-config`.
//!
//! Steps: read the file, parse and validate it, compare its sinks with the
//! running ones by name (changed, added, removed; a renamed sink is a
//! removal plus an addition, and the report says so), build every changed
//! and added sink (on a thread of its own, under their `build_timeout_ms`:
//! see `crate::sinks`), then hand the outcome to the supervisor
//! ([`ApplySinks`]): a changed sink's drains switch at their next batch
//! boundary, an added one starts on every shard, a removed one stops and
//! lets go of its records. A file that fails any of these steps (it does
//! not load, a sink cannot be built: an unknown type, a missing plugin, a
//! bad option) changes nothing; the reason is logged, returned to `ctl
//! reload` and counted.
//!
//! Between the build and the hand-over each new sink's health check runs
//! (on a thread too, under the same deadline). A sink that fails it is
//! applied all the same, with the answer as a warning in the report and
//! the log: an operator must be able to re-point or fix a sink during the
//! outage it is meant to fix; its drains retry until the endpoint answers
//! (`ctl health` shows it retrying), as at a start. Changes outside the
//! sinks need a restart and are reported as such.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use actix::Addr;
use spillway_sinks::{SinkConfig, SinkEnv};

use crate::config::Config;
use crate::sinks::{build_on_thread, build_sinks, build_timeout, probe_all, probe_on_thread};
use crate::supervisor::{ApplySinks, Supervisor};

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
    supervisor: Addr<Supervisor>,
    pub stats: Arc<ReloadStats>,
    /// (mtime, size) of the file as last applied by the file watch.
    seen_file: Option<(SystemTime, u64)>,
    /// A changed (mtime, size) waiting one poll to be sure the write is done.
    settling: Option<(SystemTime, u64)>,
    /// (mtime, size) of each running plugin sink's library: a rebuilt
    /// plugin is reloaded even when its table did not change.
    plugin_files: PluginFiles,
    /// What new sinks are built with (the instance id).
    env: SinkEnv,
    /// The network doors' TLS: their files are read again at every reload.
    tls: Vec<Arc<spillway_actors::TlsServer>>,
}

/// (mtime, size) of the library of every plugin sink, by sink name.
type PluginFiles = BTreeMap<String, (SystemTime, u64)>;

/// What a reload has to do once the file is read.
struct Plan {
    /// The new config.
    new: Box<Config>,
    /// Sinks to build: changed ones, then added ones.
    changed: Vec<(String, SinkConfig)>,
    added: Vec<(String, SinkConfig)>,
    removed: Vec<String>,
    /// Lines for `ctl reload` so far (keys that need a restart, renames).
    report: String,
    plugin_files: PluginFiles,
}

/// (mtime, size) of the plugin library of every plugin sink of `cfg`.
fn plugin_fingerprints(cfg: &Config) -> PluginFiles {
    cfg.sinks
        .iter()
        .filter_map(|(n, s)| Some((n.clone(), file_stamp(s.plugin_path()?)?)))
        .collect()
}

impl Reloader {
    pub fn new(
        path: Option<PathBuf>,
        current: Config,
        supervisor: Addr<Supervisor>,
        env: SinkEnv,
    ) -> Self {
        let seen_file = path.as_ref().and_then(|p| file_stamp(p));
        let plugin_files = plugin_fingerprints(&current);
        Reloader {
            path,
            current,
            supervisor,
            stats: Arc::new(ReloadStats::default()),
            env,
            seen_file,
            settling: None,
            plugin_files,
            tls: Vec::new(),
        }
    }

    /// Re-read these doors' certificates and keys at every reload.
    pub fn with_tls(mut self, tls: Vec<Arc<spillway_actors::TlsServer>>) -> Self {
        self.tls = tls;
        self
    }

    /// Read every door's TLS files again: a pair that loads takes effect
    /// for new connections; one that does not keeps the old and says why.
    fn reload_tls(&self, report: &mut String) {
        for tls in &self.tls {
            let door = tls.key_prefix();
            match tls.reload() {
                Ok(warnings) => {
                    tracing::info!(
                        door,
                        "TLS certificate and key read again; new connections use them"
                    );
                    report.push_str(&format!("{door}: TLS certificate and key read again\n"));
                    for warning in warnings {
                        tracing::warn!(door, "{warning}");
                        report.push_str(&format!("{door}: warning: {warning}\n"));
                    }
                }
                Err(e) => {
                    tracing::error!(door, error = %e, "the new TLS certificate or key does not load; the old pair stays in use");
                    report.push_str(&format!(
                        "{door}: TLS not reloaded, the old pair stays: {e}\n"
                    ));
                }
            }
        }
    }

    /// Run a reload; `Ok` carries a report for `ctl reload`. The new sink
    /// is built and health-checked on a thread of its own under
    /// `sink.build_timeout_ms` ([`crate::sinks::build_on_thread`]); this
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
                tracing::error!(error = %e, "config reload rejected; the running sinks are unchanged");
                Err(format!("reload rejected, running sinks unchanged: {e}"))
            }
        }
    }

    async fn try_reload(this: &Rc<RefCell<Reloader>>) -> Result<String, String> {
        let plan = this.borrow().plan()?;
        let Plan {
            new,
            changed,
            added,
            removed,
            mut report,
            plugin_files,
        } = plan;
        if changed.is_empty() && added.is_empty() && removed.is_empty() {
            report.push_str("sinks unchanged\n");
            return Ok(report);
        }
        let to_build: Vec<(String, SinkConfig)> = changed.iter().chain(&added).cloned().collect();
        let mut built = if to_build.is_empty() {
            Vec::new() // only removals
        } else {
            let deadline = build_timeout(&to_build);
            let env = this.borrow().env.clone();
            let built = build_on_thread(deadline, move || build_sinks(&to_build, &env))?
                .wait_async()
                .await??;
            for warning in health_warnings(&built, deadline).await {
                tracing::warn!("{warning}");
                report.push_str(&format!("warning: {warning}\n"));
            }
            built
        };
        let added_built = built.split_off(changed.len());
        let supervisor = this.borrow().supervisor.clone();
        let applied = supervisor
            .send(ApplySinks {
                changed: built,
                added: added_built,
                removed,
            })
            .await
            .map_err(|e| format!("the supervisor did not answer: {e}"))?;
        let mut me = this.borrow_mut();
        // Whatever part was applied is running now: remember it, so a
        // partial failure (an added sink whose drain could not start) is
        // tried again at the next reload.
        match applied {
            Ok(lines) => {
                report.push_str(&lines);
                me.current = *new;
                me.plugin_files = plugin_files;
                Ok(report)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads and validates the file (bounded: a capped read of a regular
    /// file, a nesting limit) and says what the reload has to do.
    fn plan(&self) -> Result<Plan, String> {
        let path = self.path.clone().ok_or("the daemon runs on the embedded default config; there is no file to reload (start it with --config FILE)")?;
        let new = Config::load(&path).map_err(|e| e.to_string())?;
        let mut report = String::new();
        self.reload_tls(&mut report);
        for key in restart_needed(&self.current, &new) {
            report.push_str(&format!("{key} changed: needs a restart, not applied\n"));
        }
        if new.sinks.len() > self.current.sinks.len() {
            self.check_descriptors(&new)?;
        }
        let plugin_files = plugin_fingerprints(&new);
        let old = &self.current.sinks;
        let mut changed = Vec::new();
        let mut added = Vec::new();
        for (name, sink) in &new.sinks {
            match old.get(name) {
                None => added.push((name.clone(), sink.clone())),
                Some(o) if o != sink || plugin_files.get(name) != self.plugin_files.get(name) => {
                    changed.push((name.clone(), sink.clone()))
                }
                Some(_) => {}
            }
        }
        let removed: Vec<String> = old
            .keys()
            .filter(|n| !new.sinks.contains_key(*n))
            .cloned()
            .collect();
        // A sink whose table moved to a new name, unchanged otherwise.
        for gone in &removed {
            for (name, sink) in &added {
                if old.get(gone) == Some(sink) {
                    report.push_str(&format!(
                        "sink {gone} renamed to {name}: that is a removal plus an addition (the new name starts as its `start` says)\n"
                    ));
                    tracing::info!(from = %gone, to = %name, "sink renamed: removing the old name and adding the new one");
                }
            }
        }
        Ok(Plan {
            new: Box::new(new),
            changed,
            added,
            removed,
            report,
            plugin_files,
        })
    }

    /// More sinks need more descriptors (each sink's cursor over each shard
    /// keeps its segment and its cursor file open): refuse a file whose
    /// sinks would not fit the reserve the running daemon's connection
    /// limits leave, as a start with it would, so that added sinks never
    /// take the descriptors segment rotation needs.
    fn check_descriptors(&self, new: &Config) -> Result<(), String> {
        let running = &self.current;
        let limit = crate::fd_limit::soft_limit()
            .map_err(|e| format!("reading the file descriptor limit: {e}"))?;
        crate::fd_limit::check_config(limit, running, new.sinks.len()).map_err(|e| {
            format!(
                "{} sinks instead of {} need more file descriptors than the running daemon can keep for them: {e}",
                new.sinks.len(),
                running.sinks.len()
            )
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

/// The new sinks' health checks, run on a thread of their own under
/// `deadline` (never holding up a later reload's build): one warning per
/// sink that fails it, or one naming them all when the checks did not
/// answer in time or could not run; each says that the sinks are applied
/// anyway and retry.
async fn health_warnings(
    built: &[crate::sinks::BuiltSink],
    deadline: std::time::Duration,
) -> Vec<String> {
    let targets: Vec<_> = built.iter().map(|b| b.probe_target()).collect();
    let names: Vec<String> = targets.iter().map(|t| t.0.clone()).collect();
    let applied = "applied all the same: its drains retry until it answers, keeping every record (`ctl health` shows it retrying)";
    let answer = match probe_on_thread(deadline, move || probe_all(&targets)) {
        Ok(probing) => probing.wait_async().await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(unhealthy) => unhealthy
            .into_iter()
            .map(|w| format!("{w}; {applied}"))
            .collect(),
        Err(e) => vec![format!(
            "health check of sink {}: {e}; {applied}",
            names.join(", ")
        )],
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

/// Keys outside the sinks that differ (they need a restart).
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
            connections_max,
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
            allowed_uids,
            allowed_gids,
            http,
            tcp,
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
            ready_requires_sinks,
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
