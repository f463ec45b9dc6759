//! [`MariadbSink`]: one instance (one shard's) of the MySQL / MariaDB
//! plugin, with its own connection.

use std::collections::{BTreeMap, HashSet};

use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, Params, TxOpts, Value};
use sink_sdk::{
    plugin_error, plugin_info, plugin_warn, Batch, Health, Limits, Outcome, PluginSink, Record,
    RecordOutcome, Sink, SinkContext,
};

use spillway_sql_common::{utc_datetime, Cell, Column, ColumnType};

use crate::errors::{verdict, Verdict};
use crate::options::{MariadbOptions, Settings};
use crate::sql;
use spillway_sql_common::SHAPE_PROBE_TIMEOUT;

/// Most records per batch this sink asks for (6 placeholders a row stay
/// under the protocol's 65,535 per statement; fewer with mapped columns).
pub const MAX_RECORDS: usize = 10_000;
/// Most placeholders one statement may have (the protocol's limit).
const PLACEHOLDERS_MAX: usize = 65_535;
/// Most payload bytes per batch this sink asks for (8 MiB: under the
/// servers' default `max_allowed_packet` of 16 MiB with room to spare).
pub const MAX_BYTES: usize = 8 * 1024 * 1024;

/// Writes batches into the configured table.
pub struct MariadbSink {
    settings: Settings,
    /// The daemon's instance id: the first column of every row's key.
    instance: String,
    /// `None` until the first batch, and after the connection broke.
    conn: Option<Conn>,
}

/// Why no connection could be made ready.
enum OpenError {
    Db(mysql::Error),
    /// The table is not keyed by `(instance, shard, seq)`: nothing is
    /// written into it.
    Shape(String),
}

impl From<mysql::Error> for OpenError {
    fn from(e: mysql::Error) -> OpenError {
        OpenError::Db(e)
    }
}

/// Checks that `table` (if it exists) has a primary key or unique index
/// on exactly `(instance, shard, seq)`.
fn check_shape(conn: &mut Conn, table: &sql::TableName) -> Result<(), OpenError> {
    let at = (table.qualifier(), table.table());
    let exists: Option<u8> = conn.exec_first(sql::TABLE_EXISTS, at)?;
    if exists.is_none() {
        // Not there (and not created): the insert says so, and waits.
        return Ok(());
    }
    let mut indexes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (index, column) in conn.exec::<(String, String), _, _>(sql::UNIQUE_INDEX_COLUMNS, at)? {
        indexes.entry(index).or_default().push(column);
    }
    let want: HashSet<&str> = sql::KEY_COLUMNS.into_iter().collect();
    if indexes
        .values()
        .any(|cols| cols.len() == 3 && cols.iter().all(|c| want.contains(c.as_str())))
    {
        return Ok(());
    }
    let t = table.quoted();
    let why = spillway_sql_common::WRONG_KEY_WHY;
    Err(OpenError::Shape(match indexes.get("PRIMARY") {
        Some(columns) => format!(
            "table {table} is keyed by ({}), not (instance, shard, seq): {why}. Migrate it once, \
             while no daemon writes to it (docs/plugins.md, \"The mariadb plugin\"): \
             ALTER TABLE {t} ADD COLUMN instance VARCHAR(64) CHARACTER SET ascii NOT NULL \
             DEFAULT 'legacy' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (instance, shard, seq); \
             ALTER TABLE {t} ALTER COLUMN instance DROP DEFAULT;",
            columns.join(", ")
        ),
        None => format!(
            "table {table} has no primary key or unique index on (instance, shard, seq): {why}. \
             Add one: ALTER TABLE {t} ADD PRIMARY KEY (instance, shard, seq);"
        ),
    }))
}

/// Looks at the table's shape once per process and table, when the server
/// answers within [`SHAPE_PROBE_TIMEOUT`]: a table of the wrong shape then
/// refuses the start (or the reload, or `spillway check`). A server that
/// does not answer is no reason to stop: every connection checks again.
fn probe_shape(settings: &Settings) -> Result<(), String> {
    if !spillway_sql_common::first_probe(format!("{:?}|{}", settings.opts, settings.table)) {
        return Ok(());
    }
    let opts = OptsBuilder::from_opts(settings.opts.clone())
        .tcp_connect_timeout(Some(SHAPE_PROBE_TIMEOUT))
        .read_timeout(Some(SHAPE_PROBE_TIMEOUT));
    let Ok(mut conn) = Conn::new(opts) else {
        return Ok(());
    };
    match check_shape(&mut conn, &settings.table) {
        Err(OpenError::Shape(why)) => Err(why),
        _ => Ok(()),
    }
}

/// One record ready to insert: its place in the batch, its seq, and its
/// values in the insert's order.
struct Row {
    index: usize,
    seq: u64,
    values: Vec<Value>,
}

/// A record's values: the six columns every row has, then the mapped
/// ones; the error (the record's rejection) names the field.
fn row_values(instance: &str, columns: &[Column], r: &Record<'_>) -> Result<Vec<Value>, String> {
    let cells = spillway_sql_common::extract(columns, r.payload)?;
    let mut values = vec![
        Value::Bytes(instance.as_bytes().to_vec()),
        Value::UInt(u64::from(r.shard)),
        Value::UInt(r.seq),
        Value::UInt(u64::from(r.tier)),
        Value::UInt(r.arrival_unix_us),
        Value::Bytes(r.payload.to_vec()),
    ];
    for (c, cell) in columns.iter().zip(cells) {
        values.push(match (c.kind, cell) {
            (_, Cell::Null) => Value::NULL,
            (ColumnType::Timestamptz, Cell::Text(t)) => match utc_datetime(&t) {
                Some(utc) => Value::Bytes(utc.into_bytes()),
                None => {
                    return Err(format!(
                        "field {:?} (column {}, timestamptz) is {t:?}, not an RFC 3339 timestamp \
                         (2026-12-06T10:00:00Z, or with an offset)",
                        c.from, c.name
                    ))
                }
            },
            (_, Cell::Text(t)) => Value::Bytes(t.into_bytes()),
            (_, Cell::Int(i)) => Value::Int(i),
            (_, Cell::Float(f)) => Value::Double(f),
            (_, Cell::Bool(b)) => Value::Int(i64::from(b)),
        });
    }
    Ok(values)
}

/// `Committed` when every record is, else the split.
fn finish(outcomes: Vec<RecordOutcome>) -> Outcome {
    if outcomes.iter().all(|o| *o == RecordOutcome::Committed) {
        Outcome::Committed
    } else {
        Outcome::Split(outcomes)
    }
}

impl MariadbSink {
    /// From checked options. Does not connect: the first batch (or health
    /// check) does, so a database outage does not stop the daemon.
    pub fn new(options: &MariadbOptions, instance: &str) -> Result<MariadbSink, String> {
        Ok(MariadbSink {
            settings: options.settings()?,
            instance: instance.to_string(),
            conn: None,
        })
    }

    /// The open connection, opening one (creating the table if asked, and
    /// checking its shape) if there is none.
    fn conn(&mut self) -> Result<&mut Conn, OpenError> {
        if self.conn.is_none() {
            let mut conn = Conn::new(self.settings.opts.clone())?;
            if self.settings.create_table {
                conn.query_drop(sql::create_table(
                    &self.settings.table,
                    &self.settings.columns,
                ))?;
            }
            check_shape(&mut conn, &self.settings.table)?;
            plugin_info!("connected; writing to table {}", self.settings.table);
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("opened above"))
    }

    /// A transient failure: retry the batch, with a new connection if
    /// needed.
    fn retry(&mut self, reason: String, reconnect: bool) -> Outcome {
        if reconnect && self.conn.take().is_some() {
            plugin_warn!("{reason}; reconnecting at the next batch");
        }
        Outcome::Retry {
            after: None,
            reason,
        }
    }

    /// No connection could be made ready: not the records' fault, so the
    /// batch waits.
    fn cannot_open(&mut self, error: OpenError) -> Outcome {
        let reason = match error {
            OpenError::Db(e) => match verdict(&e) {
                Verdict::Retry { reason, .. } | Verdict::Reject { reason } => {
                    format!("cannot connect: {reason}")
                }
            },
            OpenError::Shape(why) => {
                plugin_error!("{why}");
                why
            }
        };
        self.retry(reason, true)
    }

    /// The records of `batch` as rows; one whose JSON does not fill the
    /// mapped columns is marked rejected in `outcomes` instead.
    fn rows(&self, batch: &Batch<'_>, outcomes: &mut [RecordOutcome]) -> Vec<Row> {
        let mut rows = Vec::with_capacity(batch.len());
        for (index, r) in batch.records().iter().enumerate() {
            match row_values(&self.instance, &self.settings.columns, r) {
                Ok(values) => rows.push(Row {
                    index,
                    seq: r.seq,
                    values,
                }),
                Err(why) => outcomes[index] = RecordOutcome::Rejected(why),
            }
        }
        rows
    }

    /// The rows of one shard's batch not in the table yet (by seq), then
    /// all of them in one multi-row insert; one transaction.
    fn write_rows(&mut self, shard: u32, rows: Vec<Row>) -> Result<(), OpenError> {
        let instance = self.instance.clone();
        let table = self.settings.table.clone();
        let columns = self.settings.columns.clone();
        let conn = self.conn()?;
        let mut tx = conn.start_transaction(TxOpts::default())?;
        let have = existing(&mut tx, &table, &instance, shard, &rows)?;
        let todo: Vec<Row> = rows
            .into_iter()
            .filter(|r| !have.contains(&r.seq))
            .collect();
        if !todo.is_empty() {
            let n = todo.len();
            // The values move into the statement: no second copy of the
            // payloads (a failed batch is prepared again by `isolate`).
            let values: Vec<Value> = todo.into_iter().flat_map(|r| r.values).collect();
            tx.exec_drop(sql::insert(&table, &columns, n), Params::Positional(values))?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Writes the rows one by one, each in a savepoint, in one
    /// transaction: the good ones commit, the bad ones are rejected with
    /// the server's error.
    fn isolate(&mut self, batch: &Batch<'_>, mut outcomes: Vec<RecordOutcome>) -> Outcome {
        let (shard, rows) = (batch.shard(), self.rows(batch, &mut outcomes));
        let rows = &rows[..];
        let instance = self.instance.clone();
        let table = self.settings.table.clone();
        let one = sql::insert(&table, &self.settings.columns, 1);
        let conn = match self.conn() {
            Ok(conn) => conn,
            Err(e) => return self.cannot_open(e),
        };
        let result = (|| -> Result<(), mysql::Error> {
            let mut tx = conn.start_transaction(TxOpts::default())?;
            let have = existing(&mut tx, &table, &instance, shard, rows)?;
            for r in rows.iter().filter(|r| !have.contains(&r.seq)) {
                tx.query_drop("SAVEPOINT record")?;
                match tx.exec_drop(&one, Params::Positional(r.values.clone())) {
                    Ok(()) => tx.query_drop("RELEASE SAVEPOINT record")?,
                    Err(e) => match verdict(&e) {
                        Verdict::Reject { reason } => {
                            tx.query_drop("ROLLBACK TO SAVEPOINT record")?;
                            outcomes[r.index] = RecordOutcome::Rejected(reason);
                        }
                        Verdict::Retry { .. } => return Err(e),
                    },
                }
            }
            tx.commit()
        })();
        match result {
            Ok(()) => finish(outcomes),
            Err(e) => match verdict(&e) {
                Verdict::Retry { reason, reconnect } => self.retry(reason, reconnect),
                // Not from a single insert (those are handled above): the
                // commit itself; no single record can be blamed.
                Verdict::Reject { reason } => {
                    for r in rows {
                        outcomes[r.index] = RecordOutcome::Rejected(format!(
                            "{reason} (at commit: the batch was rejected whole)"
                        ));
                    }
                    Outcome::Split(outcomes)
                }
            },
        }
    }
}

/// The seqs among `rows` already in the table for `(instance, shard)`.
fn existing<Q: Queryable>(
    q: &mut Q,
    table: &sql::TableName,
    instance: &str,
    shard: u32,
    rows: &[Row],
) -> Result<HashSet<u64>, mysql::Error> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(HashSet::new());
    };
    Ok(
        q.exec::<u64, _, _>(sql::existing(table), (instance, shard, first.seq, last.seq))?
            .into_iter()
            .collect(),
    )
}

impl PluginSink for MariadbSink {
    const OPTIONS: Option<&'static [sink_sdk::keys::Key]> =
        Some(crate::options::MariadbOptions::KEYS);

    /// Only a daemon from before sinks were told its instance id calls
    /// this: rows keyed without it would collide with other daemons'.
    fn create(_options_toml: &str) -> Result<MariadbSink, String> {
        Err(
            "this spillway daemon does not tell plugins its instance id, which the mariadb \
             plugin keys every row by (instance, shard, seq); upgrade spillway, or use the \
             plugin that came with this daemon"
                .into(),
        )
    }

    fn create_in(options_toml: &str, context: &SinkContext) -> Result<MariadbSink, String> {
        let sink = MariadbSink::new(&MariadbOptions::parse(options_toml)?, context.instance())?;
        probe_shape(&sink.settings)?;
        Ok(sink)
    }
}

impl Sink for MariadbSink {
    fn name(&self) -> &str {
        "mariadb"
    }

    /// At most [`MAX_RECORDS`], and as many rows as fit the protocol's
    /// 65,535 placeholders of one statement.
    fn limits(&self) -> Limits {
        Limits {
            max_records: MAX_RECORDS
                .min(PLACEHOLDERS_MAX / sql::row_params(&self.settings.columns)),
            max_bytes: MAX_BYTES,
        }
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let mut outcomes = vec![RecordOutcome::Committed; batch.len()];
        let rows = self.rows(batch, &mut outcomes);
        if rows.is_empty() {
            return finish(outcomes);
        }
        if let Err(e) = self.conn() {
            return self.cannot_open(e);
        }
        match self.write_rows(batch.shard(), rows) {
            Ok(()) => finish(outcomes),
            Err(OpenError::Shape(why)) => self.cannot_open(OpenError::Shape(why)),
            Err(OpenError::Db(e)) => match verdict(&e) {
                Verdict::Retry { reason, reconnect } => self.retry(reason, reconnect),
                Verdict::Reject { .. } => self.isolate(batch, outcomes),
            },
        }
    }

    /// Connects if needed (checking the table) and runs `SELECT 1`.
    fn health_check(&mut self) -> Health {
        let checked = match self.conn() {
            Ok(conn) => conn.query_drop("SELECT 1").map_err(OpenError::Db),
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => Health::Healthy,
            Err(OpenError::Db(e)) => {
                self.conn = None;
                Health::Unhealthy(match verdict(&e) {
                    Verdict::Retry { reason, .. } | Verdict::Reject { reason } => reason,
                })
            }
            Err(OpenError::Shape(why)) => {
                self.conn = None;
                Health::Unhealthy(why)
            }
        }
    }
}
