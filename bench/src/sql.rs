//! `e2e_postgres` and `e2e_mariadb`: the SQL plugins
//! (`libspillway_plugin_postgres.so`, `libspillway_plugin_mariadb.so`)
//! draining a backlog of 256 B JSON records into a real server, against a
//! bare loader (`spillway-sql-loader`, one multi-row INSERT of 1,000 rows
//! per transaction on one connection: what the server takes from a client
//! that does nothing else) writing the same rows into a table of the same
//! shape on the same server in the same run; with the JSON column mapping
//! off (`/plain`) and on (`/json_columns`: three typed columns filled from
//! each record, which the loader fills with the same values).
//!
//! Each phase: a daemon whose sink is paused takes the backlog, then the
//! sink is resumed and timed until `ctl stats` counts every record
//! delivered; the table must then hold every acked record. The loader
//! then writes as many rows, in batches of 1,000, into a copy of that
//! table's shape (`CREATE TABLE ... LIKE`).
//!
//! The server comes from `SPILLWAY_TEST_PG` (a libpq conninfo) or
//! `SPILLWAY_TEST_MARIADB` (a `mysql://` URL), as for the tests (`.ci/
//! postgres.sh` and `.ci/mariadb.sh` start a private one and print it);
//! the plugin and the loader are looked for beside the daemon's binary
//! (`cargo build --release -p spillway-plugin-postgres -p
//! spillway-plugin-mariadb -p spillway-sql-loader`). Without them the
//! scenario says so and is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_client::{Client, Tier};

use super::context::Ctx;
use super::daemon::Launcher;
use super::e2e::{delivered_records, launcher, start, stop_daemon, toml_string, wait_for};
use super::load::LoadError;
use super::report::{Kind, ReportRow, RATE};

/// Bytes of each record's payload.
pub const SQL_RECORD_BYTES: usize = 256;
/// Records per batch, the sink's `max_records` and the loader's INSERT.
pub const SQL_BATCH: usize = 1000;
/// The backlog of each phase (`--quick`: a fifth): long enough that the
/// first batch's start and the last one's count are a small part of it.
const RECORDS: u64 = 300_000;
/// Connections that push the backlog (PushBatch of [`SQL_BATCH`]).
const PRODUCERS: u64 = 4;

/// The mapped columns of `/json_columns`: (column, JSON pointer, type).
pub const SQL_COLUMNS: [(&str, &str, &str); 3] = [
    ("user_id", "/user/id", "bigint"),
    ("at", "/ts", "timestamptz"),
    ("kind", "/kind", "text"),
];

/// The values record `n` holds for [`SQL_COLUMNS`]: the user id, the
/// timestamp (RFC 3339, UTC) and the kind.
pub fn sql_fields(n: u64) -> (i64, String, String) {
    let ts = format!(
        "2026-12-06T{:02}:{:02}:{:02}.{:06}Z",
        (n / 3_600_000_000) % 24,
        (n / 60_000_000) % 60,
        (n / 1_000_000) % 60,
        n % 1_000_000
    );
    (n as i64, ts, format!("k{}", n % 7))
}

/// Record `n`: a JSON object holding [`sql_fields`], padded to
/// [`SQL_RECORD_BYTES`].
pub fn sql_payload(n: u64) -> Vec<u8> {
    let (id, ts, kind) = sql_fields(n);
    let head = format!("{{\"user\":{{\"id\":{id}}},\"ts\":\"{ts}\",\"kind\":\"{kind}\",\"pad\":\"");
    let pad = SQL_RECORD_BYTES.saturating_sub(head.len() + 2);
    let mut p = head.into_bytes();
    p.resize(p.len() + pad, b'x');
    p.extend_from_slice(b"\"}");
    p
}

/// Which server, and how its plugin and the loader name it.
#[derive(Clone, Copy)]
enum Server {
    Postgres,
    Mariadb,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Postgres => "postgres",
            Server::Mariadb => "mariadb",
        }
    }

    fn env(self) -> &'static str {
        match self {
            Server::Postgres => "SPILLWAY_TEST_PG",
            Server::Mariadb => "SPILLWAY_TEST_MARIADB",
        }
    }

    fn library(self) -> String {
        format!("libspillway_plugin_{}.so", self.name())
    }

    /// The `[sink]` body writing into `table` at `address`.
    fn sink(self, library: &Path, address: &str, table: &str, columns: bool) -> String {
        let key = match self {
            Server::Postgres => "conninfo",
            Server::Mariadb => "url",
        };
        let mut s = format!(
            "type = \"plugin\"\npath = {}\nbatch_records_max = {SQL_BATCH}\nlinger_ms = 5\n\n\
             [sink.options]\n{key} = {}\ntable = {}\n",
            toml_string(&library.display().to_string()),
            toml_string(address),
            toml_string(table)
        );
        if columns {
            s.push_str("\n[sink.options.columns]\n");
            for (name, from, ty) in SQL_COLUMNS {
                s.push_str(&format!(
                    "{name} = {{ from = {}, type = \"{ty}\" }}\n",
                    toml_string(from)
                ));
            }
        }
        s
    }
}

/// The `[sink]` bodies of these scenarios with placeholder paths, for the
/// daemon's test that it accepts each (the plugin checks its options).
pub fn sink_tables() -> Vec<String> {
    [Server::Postgres, Server::Mariadb]
        .into_iter()
        .flat_map(|s| [false, true].map(|c| s.sink(Path::new("/x/lib a.so"), "x", "t", c)))
        .collect()
}

pub(crate) fn e2e_postgres(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    e2e_sql(ctx, Server::Postgres)
}

pub(crate) fn e2e_mariadb(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    e2e_sql(ctx, Server::Mariadb)
}

/// `exe`'s folder's `name`, or why the scenario cannot run.
fn beside(exe: &Path, name: &str, package: &str) -> Result<PathBuf, LoadError> {
    let path = exe.parent().unwrap_or(Path::new(".")).join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(LoadError::Unsupported(format!(
            "no {} : build it with cargo build --release -p {package}",
            path.display()
        )))
    }
}

/// The two phases (mapping off, on): a row each.
fn e2e_sql(ctx: &Ctx, server: Server) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let address = std::env::var(server.env()).map_err(|_| {
        LoadError::Unsupported(format!(
            "set {} to a {} server to write into (.ci/{}.sh starts a private one and prints it)",
            server.env(),
            server.name(),
            server.name()
        ))
    })?;
    let library = beside(
        &launcher.exe,
        &server.library(),
        &format!("spillway-plugin-{}", server.name()),
    )?;
    let loader = Loader {
        exe: beside(&launcher.exe, "spillway-sql-loader", "spillway-sql-loader")?,
        server,
        address: address.clone(),
    };
    let records = if ctx.quick { RECORDS / 5 } else { RECORDS };
    let mut rows = Vec::new();
    for (phase, columns) in [("plain", false), ("json_columns", true)] {
        let table = format!("spillway_bench_{phase}");
        let bare = format!("{table}_bare");
        loader.run(&["drop", &table, &bare])?;
        let sink = server.sink(&library, &address, &table, columns);
        let label = format!("e2e-{}-{phase}", server.name());
        let (acked, elapsed) = drain(launcher, &label, sink, records)?;
        let stored = loader.count(&table)?;
        if stored != acked {
            return Err(LoadError::Failed(format!(
                "{label}: {acked} records acked, {table} holds {stored}"
            )));
        }
        let rate = acked as f64 / elapsed.as_secs_f64().max(1e-9);
        let bare_rate = loader.load(&table, &bare, acked, columns)?;
        loader.run(&["drop", &table, &bare])?;
        let mut row = ReportRow::new(format!("e2e_{}/{phase}", server.name()), Kind::Scenario);
        row.set(RATE, rate)
            .set("records", acked as f64)
            .set("elapsed_s", elapsed.as_secs_f64())
            .set("loader_records_per_s", bare_rate)
            .set("ratio_vs_loader", rate / bare_rate.max(1e-9))
            .set(
                "mapped_columns",
                if columns { SQL_COLUMNS.len() } else { 0 } as f64,
            );
        rows.push(row);
    }
    Ok(rows)
}

/// A daemon with the SQL sink paused takes `records` records (PushBatch
/// of [`SQL_BATCH`], Batched, over [`PRODUCERS`] connections); the sink
/// is resumed and timed until every acked record is delivered. (acked,
/// time to deliver them.)
fn drain(
    launcher: &Launcher,
    label: &str,
    sink: String,
    records: u64,
) -> Result<(u64, Duration), LoadError> {
    let daemon = start(launcher, label, sink)?;
    let admin = daemon.admin_socket().to_path_buf();
    spillway_ctl::call(&admin, "sink pause default")
        .map_err(|e| LoadError::Failed(format!("{label}: pausing the sink: {e}")))?;
    let acked = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let per_producer = records / PRODUCERS;
    let pushed: Result<(), String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (socket, acked, failed) = (daemon.socket(), &acked, &failed);
                s.spawn(move || -> Result<(), String> {
                    let mut c = Client::connect(socket).map_err(|e| e.to_string())?;
                    let first = p * per_producer;
                    let mut n = first;
                    while n < first + per_producer && !failed.load(Ordering::Acquire) {
                        let end = (n + SQL_BATCH as u64).min(first + per_producer);
                        let batch: Vec<Vec<u8>> = (n..end).map(sql_payload).collect();
                        c.push_batch(Tier::Batched, &batch).map_err(|e| {
                            failed.store(true, Ordering::Release);
                            format!("pushing records {n}..{end}: {e}")
                        })?;
                        acked.fetch_add(end - n, Ordering::AcqRel);
                        n = end;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a producer panicked".into()))
        })
    });
    pushed.map_err(|e| LoadError::Failed(format!("{label}: {e}")))?;
    let acked = acked.load(Ordering::Acquire);
    spillway_ctl::call(&admin, "sink resume default")
        .map_err(|e| LoadError::Failed(format!("{label}: resuming the sink: {e}")))?;
    let resumed = Instant::now();
    wait_for(
        &format!("{label}: delivering every record"),
        Duration::from_millis(2),
        || Ok(delivered_records(&admin)? >= acked),
    )?;
    let elapsed = resumed.elapsed();
    stop_daemon(daemon, label)?;
    Ok((acked, elapsed))
}

/// `spillway-sql-loader` on one server.
struct Loader {
    exe: PathBuf,
    server: Server,
    address: String,
}

impl Loader {
    /// Runs `spillway-sql-loader <command> <server> <address> <args>`;
    /// its standard output.
    fn run(&self, args: &[&str]) -> Result<String, LoadError> {
        let (command, rest) = args.split_first().expect("a command");
        let out = Command::new(&self.exe)
            .arg(command)
            .arg(self.server.name())
            .arg(&self.address)
            .args(rest)
            .output()
            .map_err(|e| LoadError::Failed(format!("running {}: {e}", self.exe.display())))?;
        if !out.status.success() {
            return Err(LoadError::Failed(format!(
                "{} {command}: {}",
                self.exe.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn count(&self, table: &str) -> Result<u64, LoadError> {
        let said = self.run(&["count", table])?;
        said.parse()
            .map_err(|_| LoadError::Failed(format!("the loader counted {said:?} rows")))
    }

    /// Loads `records` rows into `into` (made like `like`); rows/s.
    fn load(&self, like: &str, into: &str, records: u64, columns: bool) -> Result<f64, LoadError> {
        let records = records.to_string();
        let batch = SQL_BATCH.to_string();
        let mut args = vec!["load", like, into, "--records", &records, "--batch", &batch];
        if columns {
            args.push("--columns");
        }
        let said = self.run(&args)?;
        let v: serde_json::Value = serde_json::from_str(&said)
            .map_err(|e| LoadError::Failed(format!("the loader said {said:?}: {e}")))?;
        v["rows_per_s"]
            .as_f64()
            .ok_or_else(|| LoadError::Failed(format!("the loader said {said:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_json_of_the_record_size_holding_their_fields() {
        for n in [0, 7, 99_999, 123_456_789] {
            let p = sql_payload(n);
            assert_eq!(p.len(), SQL_RECORD_BYTES, "record {n}");
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            let (id, ts, kind) = sql_fields(n);
            assert_eq!(v.pointer("/user/id").and_then(|v| v.as_i64()), Some(id));
            assert_eq!(v.pointer("/ts").and_then(|v| v.as_str()), Some(ts.as_str()));
            assert_eq!(
                v.pointer("/kind").and_then(|v| v.as_str()),
                Some(kind.as_str())
            );
        }
    }
}
