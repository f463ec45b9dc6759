//! `spillway-sql-loader`: the bare loader `spillway bench` measures the
//! SQL plugins against (`e2e_postgres`, `e2e_mariadb`; see
//! bench/src/sql.rs and docs/benchmarks.md).
//!
//! `load` writes the bench's records straight into the server on one
//! connection, one multi-row `INSERT` of `--batch` rows per transaction
//! (prepared once, the rows' values bound as parameters), into a table
//! made like the plugin's (`CREATE TABLE ... LIKE`), and prints
//! `{"records":N,"elapsed_s":S,"rows_per_s":R}`: the server's own rate
//! for that work on this machine. Only the INSERTs are timed; the rows are
//! made before. `count` and `drop` are the bench's hands on the server
//! (the daemon's binary links no SQL client).

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use spillway_bench::sql::{sql_fields, sql_payload, SQL_COLUMNS};

#[derive(Parser)]
#[command(about = "The bare SQL loader of `spillway bench` (e2e_postgres, e2e_mariadb)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Server {
    Postgres,
    Mariadb,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the bench's records into INTO (dropped first, then made like
    /// LIKE), one multi-row INSERT per transaction.
    Load {
        server: Server,
        /// A libpq conninfo, or a mysql:// URL.
        address: String,
        like: String,
        into: String,
        #[arg(long)]
        records: u64,
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Fill the bench's mapped JSON columns too.
        #[arg(long)]
        columns: bool,
    },
    /// Print the rows of TABLE.
    Count {
        server: Server,
        address: String,
        table: String,
    },
    /// Drop each TABLE that exists.
    Drop {
        server: Server,
        address: String,
        tables: Vec<String>,
    },
}

/// Instance id and shard of the loader's rows (its numbers are the
/// bench's record numbers).
const INSTANCE: &str = "bare-loader";

/// Table names are passed into SQL as they are: the bench's own, checked
/// here all the same.
fn checked(table: &str) -> Result<&str, String> {
    let ok = !table.is_empty()
        && table
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    ok.then_some(table)
        .ok_or_else(|| format!("table name {table:?}: only a-z, 0-9 and _"))
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("spillway-sql-loader: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<String, String> {
    match cmd {
        Cmd::Load {
            server,
            address,
            like,
            into,
            records,
            batch,
            columns,
        } => {
            if batch == 0 {
                return Err("--batch must be at least 1".into());
            }
            let job = Job {
                like: checked(&like)?,
                into: checked(&into)?,
                records,
                batch,
                columns,
            };
            let elapsed = match server {
                Server::Postgres => pg::load(&address, &job),
                Server::Mariadb => maria::load(&address, &job),
            }?;
            let s = elapsed.as_secs_f64().max(1e-9);
            Ok(format!(
                "{{\"records\":{records},\"elapsed_s\":{s},\"rows_per_s\":{}}}",
                records as f64 / s
            ))
        }
        Cmd::Count {
            server,
            address,
            table,
        } => {
            let sql = format!("SELECT count(*) FROM {}", checked(&table)?);
            match server {
                Server::Postgres => pg::count(&address, &sql),
                Server::Mariadb => maria::count(&address, &sql),
            }
            .map(|n| n.to_string())
        }
        Cmd::Drop {
            server,
            address,
            tables,
        } => {
            for t in &tables {
                let sql = format!("DROP TABLE IF EXISTS {}", checked(t)?);
                match server {
                    Server::Postgres => pg::execute(&address, &sql),
                    Server::Mariadb => maria::execute(&address, &sql),
                }?;
            }
            Ok(String::new())
        }
    }
}

/// What `load` writes, and where.
#[derive(Clone, Copy)]
struct Job<'a> {
    like: &'a str,
    into: &'a str,
    records: u64,
    batch: usize,
    columns: bool,
}

/// One row: the values of the plugin's columns, then the mapped ones.
struct Row {
    seq: u64,
    arrival_us: u64,
    payload: Vec<u8>,
    user_id: i64,
    at: String,
    kind: String,
}

fn rows(records: u64) -> Vec<Row> {
    let arrival_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    (0..records)
        .map(|n| {
            let (user_id, at, kind) = sql_fields(n);
            Row {
                seq: n,
                arrival_us,
                payload: sql_payload(n),
                user_id,
                at,
                kind,
            }
        })
        .collect()
}

/// `(instance, shard, seq, tier, arrival_us, payload[, mapped...])`.
fn column_list(columns: bool) -> String {
    let mut list = "instance, shard, seq, tier, arrival_us, payload".to_string();
    if columns {
        for (name, _, _) in SQL_COLUMNS {
            list.push_str(", ");
            list.push_str(name);
        }
    }
    list
}

/// `INSERT INTO into (...) VALUES (...), ...` of `n` rows, each row's
/// placeholders made by `row(first_parameter_index)`.
fn insert(into: &str, columns: bool, n: usize, row: impl Fn(usize) -> String) -> String {
    let per_row = 6 + if columns { SQL_COLUMNS.len() } else { 0 };
    let values: Vec<String> = (0..n).map(|i| row(i * per_row + 1)).collect();
    format!(
        "INSERT INTO {into} ({}) VALUES {}",
        column_list(columns),
        values.join(", ")
    )
}

mod pg {
    use super::*;
    use postgres::types::ToSql;
    use postgres::{Client, NoTls};

    fn connect(address: &str) -> Result<Client, String> {
        Client::connect(address, NoTls).map_err(|e| format!("connecting to {address:?}: {e}"))
    }

    pub fn execute(address: &str, sql: &str) -> Result<(), String> {
        connect(address)?
            .batch_execute(sql)
            .map_err(|e| format!("{sql}: {e}"))
    }

    pub fn count(address: &str, sql: &str) -> Result<i64, String> {
        let row = connect(address)?
            .query_one(sql, &[])
            .map_err(|e| format!("{sql}: {e}"))?;
        Ok(row.get(0))
    }

    fn placeholders(first: usize, columns: bool) -> String {
        let mut p = format!(
            "(${}::text, ${}::integer, ${}::bigint, ${}::smallint, ${}::bigint, ${}::bytea",
            first,
            first + 1,
            first + 2,
            first + 3,
            first + 4,
            first + 5
        );
        if columns {
            p.push_str(&format!(
                ", ${}::bigint, ${}::text::timestamptz, ${}::text",
                first + 6,
                first + 7,
                first + 8
            ));
        }
        p.push(')');
        p
    }

    pub fn load(address: &str, job: &Job) -> Result<Duration, String> {
        let Job {
            like,
            into,
            records,
            batch,
            columns,
        } = *job;
        let mut c = connect(address)?;
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {into}; CREATE TABLE {into} (LIKE {like} INCLUDING ALL)"
        ))
        .map_err(|e| format!("making {into} like {like}: {e}"))?;
        let rows = rows(records);
        let tier = 2i16;
        let shard = 0i32;
        let values: Vec<(i64, i64)> = rows
            .iter()
            .map(|r| (r.seq as i64, r.arrival_us as i64))
            .collect();
        let full = c
            .prepare(&insert(into, columns, batch, |i| placeholders(i, columns)))
            .map_err(|e| format!("preparing the INSERT: {e}"))?;
        let started = Instant::now();
        for (chunk, nums) in rows.chunks(batch).zip(values.chunks(batch)) {
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(chunk.len() * 9);
            for (r, (seq, arrival)) in chunk.iter().zip(nums) {
                params.extend_from_slice(&[&INSTANCE, &shard, seq, &tier, arrival, &r.payload]);
                if columns {
                    params.extend_from_slice(&[&r.user_id, &r.at, &r.kind]);
                }
            }
            let mut tx = c.transaction().map_err(|e| format!("BEGIN: {e}"))?;
            if chunk.len() == batch {
                tx.execute(&full, &params)
            } else {
                let last = insert(into, columns, chunk.len(), |i| placeholders(i, columns));
                tx.execute(last.as_str(), &params)
            }
            .map_err(|e| format!("INSERT: {e}"))?;
            tx.commit().map_err(|e| format!("COMMIT: {e}"))?;
        }
        Ok(started.elapsed())
    }
}

mod maria {
    use super::*;
    use mysql::prelude::Queryable;
    use mysql::{Conn, Opts, TxOpts, Value};

    fn connect(address: &str) -> Result<Conn, String> {
        let opts = Opts::from_url(address).map_err(|e| format!("{address:?}: {e}"))?;
        Conn::new(opts).map_err(|e| format!("connecting to {address:?}: {e}"))
    }

    pub fn execute(address: &str, sql: &str) -> Result<(), String> {
        connect(address)?
            .query_drop(sql)
            .map_err(|e| format!("{sql}: {e}"))
    }

    pub fn count(address: &str, sql: &str) -> Result<i64, String> {
        connect(address)?
            .query_first::<i64, _>(sql)
            .map_err(|e| format!("{sql}: {e}"))?
            .ok_or_else(|| format!("{sql}: no row"))
    }

    /// `"2026-12-06T01:02:03.000004Z"` as a DATETIME(6) literal.
    fn datetime(rfc3339: &str) -> String {
        rfc3339.trim_end_matches('Z').replace('T', " ")
    }

    pub fn load(address: &str, job: &Job) -> Result<Duration, String> {
        let Job {
            like,
            into,
            records,
            batch,
            columns,
        } = *job;
        let mut c = connect(address)?;
        c.query_drop(format!("DROP TABLE IF EXISTS {into}"))
            .and_then(|()| c.query_drop(format!("CREATE TABLE {into} LIKE {like}")))
            .map_err(|e| format!("making {into} like {like}: {e}"))?;
        let per_row = if columns {
            "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
        } else {
            "(?, ?, ?, ?, ?, ?)"
        };
        let rows = rows(records);
        let values: Vec<Vec<Value>> = rows
            .chunks(batch)
            .map(|chunk| {
                let mut v = Vec::with_capacity(chunk.len() * 9);
                for r in chunk {
                    v.extend([
                        Value::from(INSTANCE),
                        Value::from(0u32),
                        Value::from(r.seq),
                        Value::from(2u8),
                        Value::from(r.arrival_us),
                        Value::from(r.payload.as_slice()),
                    ]);
                    if columns {
                        v.extend([
                            Value::from(r.user_id),
                            Value::from(datetime(&r.at)),
                            Value::from(r.kind.as_str()),
                        ]);
                    }
                }
                v
            })
            .collect();
        let full = c
            .prep(insert(into, columns, batch, |_| per_row.to_string()))
            .map_err(|e| format!("preparing the INSERT: {e}"))?;
        let started = Instant::now();
        for (chunk, params) in rows.chunks(batch).zip(values) {
            let mut tx = c
                .start_transaction(TxOpts::default())
                .map_err(|e| format!("BEGIN: {e}"))?;
            if chunk.len() == batch {
                tx.exec_drop(&full, params)
            } else {
                tx.exec_drop(
                    insert(into, columns, chunk.len(), |_| per_row.to_string()),
                    params,
                )
            }
            .map_err(|e| format!("INSERT: {e}"))?;
            tx.commit().map_err(|e| format!("COMMIT: {e}"))?;
        }
        Ok(started.elapsed())
    }
}
