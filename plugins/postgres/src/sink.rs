//! [`PostgresSink`]: one instance (one shard's) of the PostgreSQL plugin,
//! with its own session.

use postgres::{Client, NoTls, Statement};

use sink_sdk::{
    plugin_error, plugin_info, plugin_warn, Batch, Health, Limits, Outcome, PluginSink,
    RecordOutcome, Sink, SinkContext,
};

use postgres::types::ToSql;

use crate::errors::{is_concurrent_create, verdict, Verdict};
use crate::options::{PostgresOptions, Settings};
use crate::sql;
use spillway_sql_common::columns::{self, Cell, Column, ColumnType};
use spillway_sql_common::SHAPE_PROBE_TIMEOUT;

/// Most records per batch this sink asks for. Bounds the row-by-row pass
/// that isolates bad records (three round trips per record).
pub const MAX_RECORDS: usize = 10_000;
/// Most payload bytes per batch this sink asks for (64 MiB).
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

/// Writes batches into the configured table.
pub struct PostgresSink {
    settings: Settings,
    /// The daemon's instance id: the first column of every row's key.
    instance: String,
    /// `None` until the first batch, and after the session broke.
    session: Option<Session>,
}

/// Why no session could be opened.
enum OpenError {
    Db(postgres::Error),
    /// The table is not keyed by `(instance, shard, seq)`: nothing is
    /// written into it (rows of several daemons would collide there).
    Shape(String),
}

impl From<postgres::Error> for OpenError {
    fn from(e: postgres::Error) -> OpenError {
        OpenError::Db(e)
    }
}

/// Checks that `table` (if it exists) has a primary key or unique index
/// on exactly `(instance, shard, seq)`, the columns `ON CONFLICT` names.
fn check_shape(client: &mut Client, table: &sql::TableName) -> Result<(), OpenError> {
    let name = table.to_string();
    let exists: Option<String> = client.query_one(sql::TABLE_EXISTS, &[&name])?.get(0);
    if exists.is_none() {
        // Not there (and not created): the insert says so, and waits.
        return Ok(());
    }
    let mut want: Vec<&str> = sql::KEY_COLUMNS.to_vec();
    want.sort_unstable();
    let mut primary: Option<(String, Vec<String>)> = None;
    for row in client.query(sql::UNIQUE_INDEXES, &[&name])? {
        let index: String = row.get(0);
        let is_primary: bool = row.get(1);
        let columns: Vec<String> = row.get(2);
        let mut sorted: Vec<&str> = columns.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        if sorted == want {
            return Ok(());
        }
        if is_primary {
            primary = Some((index, columns));
        }
    }
    let why = spillway_sql_common::WRONG_KEY_WHY;
    Err(OpenError::Shape(match primary {
        Some((index, columns)) => format!(
            "table {table} is keyed by ({}), not (instance, shard, seq): {why}. Migrate it once, \
             while no daemon writes to it (docs/plugins.md, \"The postgres plugin\"): {}",
            columns.join(", "),
            sql::migration(table, &index)
        ),
        None => format!(
            "table {table} has no primary key or unique index on (instance, shard, seq): {why}. \
             Add one: ALTER TABLE {} ADD PRIMARY KEY (instance, shard, seq);",
            table.quoted()
        ),
    }))
}

/// Looks at the table's shape once per process and table, when the
/// database answers within [`SHAPE_PROBE_TIMEOUT`]: a table of the old
/// shape then refuses the start (or the reload, or `spillway check`) with
/// the migration to run. A database that does not answer is no reason to
/// stop: every session checks again before it writes.
fn probe_shape(settings: &Settings) -> Result<(), String> {
    if !spillway_sql_common::first_probe(format!("{:?}|{}", settings.config, settings.table)) {
        return Ok(());
    }
    let mut config = settings.config.clone();
    let timeout = config
        .get_connect_timeout()
        .map_or(SHAPE_PROBE_TIMEOUT, |t| (*t).min(SHAPE_PROBE_TIMEOUT));
    config.connect_timeout(timeout);
    let Ok(mut client) = config.connect(NoTls) else {
        return Ok(());
    };
    match check_shape(&mut client, &settings.table) {
        Err(OpenError::Shape(why)) => Err(why),
        _ => Ok(()),
    }
}

/// An open connection with its prepared statements.
struct Session {
    client: Client,
    insert_batch: Statement,
    insert_one: Statement,
}

impl Session {
    /// Connects, sets the statement timeout, creates the table if asked,
    /// prepares the inserts.
    fn open(settings: &Settings) -> Result<Session, OpenError> {
        let mut client = settings.config.connect(NoTls)?;
        client.batch_execute(&format!(
            "SET statement_timeout = {}",
            settings.statement_timeout_ms
        ))?;
        if settings.create_table {
            let create = sql::create_table(&settings.table, &settings.columns);
            if let Err(e) = client.batch_execute(&create) {
                if !is_concurrent_create(&e) {
                    return Err(e.into());
                }
            }
        }
        check_shape(&mut client, &settings.table)?;
        let insert_batch =
            client.prepare(&sql::insert_batch(&settings.table, &settings.columns))?;
        let insert_one = client.prepare(&sql::insert_one(&settings.table, &settings.columns))?;
        plugin_info!("connected; writing to table {}", settings.table);
        Ok(Session {
            client,
            insert_batch,
            insert_one,
        })
    }
}

/// The records of a batch as column arrays, without the ones that cannot
/// be stored (their outcomes are already set).
struct Rows<'a> {
    /// Position of each row in the batch.
    index: Vec<usize>,
    seq: Vec<i64>,
    tier: Vec<i16>,
    arrival_us: Vec<i64>,
    payload: Vec<&'a [u8]>,
    /// One array per mapped column.
    mapped: Vec<Mapped>,
}

/// The values of one mapped column, as the array type it is sent as.
enum Mapped {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
}

impl Mapped {
    fn for_type(kind: ColumnType, n: usize) -> Mapped {
        match kind {
            ColumnType::Text | ColumnType::Timestamptz | ColumnType::Json => {
                Mapped::Text(Vec::with_capacity(n))
            }
            ColumnType::Bigint => Mapped::Int(Vec::with_capacity(n)),
            ColumnType::Double => Mapped::Float(Vec::with_capacity(n)),
            ColumnType::Boolean => Mapped::Bool(Vec::with_capacity(n)),
        }
    }

    fn push(&mut self, cell: Cell) {
        match (self, cell) {
            (Mapped::Text(v), Cell::Text(t)) => v.push(Some(t)),
            (Mapped::Int(v), Cell::Int(i)) => v.push(Some(i)),
            (Mapped::Float(v), Cell::Float(f)) => v.push(Some(f)),
            (Mapped::Bool(v), Cell::Bool(b)) => v.push(Some(b)),
            (Mapped::Text(v), _) => v.push(None),
            (Mapped::Int(v), _) => v.push(None),
            (Mapped::Float(v), _) => v.push(None),
            (Mapped::Bool(v), _) => v.push(None),
        }
    }

    /// The whole array, as a statement parameter.
    fn array(&self) -> &(dyn ToSql + Sync) {
        match self {
            Mapped::Text(v) => v,
            Mapped::Int(v) => v,
            Mapped::Float(v) => v,
            Mapped::Bool(v) => v,
        }
    }

    /// Element `k`, as a statement parameter.
    fn element(&self, k: usize) -> &(dyn ToSql + Sync) {
        match self {
            Mapped::Text(v) => &v[k],
            Mapped::Int(v) => &v[k],
            Mapped::Float(v) => &v[k],
            Mapped::Bool(v) => &v[k],
        }
    }
}

impl<'a> Rows<'a> {
    /// Columns for `batch`; a record whose numbers do not fit the table's
    /// types, or whose JSON does not fill the mapped `columns`, is marked
    /// rejected in `outcomes` (naming the field).
    fn of(batch: &Batch<'a>, columns: &[Column], outcomes: &mut [RecordOutcome]) -> Rows<'a> {
        let n = batch.len();
        let mut rows = Rows {
            index: Vec::with_capacity(n),
            seq: Vec::with_capacity(n),
            tier: Vec::with_capacity(n),
            arrival_us: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            mapped: columns
                .iter()
                .map(|c| Mapped::for_type(c.kind, n))
                .collect(),
        };
        for (i, r) in batch.records().iter().enumerate() {
            let (Ok(seq), Ok(arrival_us)) =
                (i64::try_from(r.seq), i64::try_from(r.arrival_unix_us))
            else {
                outcomes[i] = RecordOutcome::Rejected(format!(
                    "seq {} or arrival time {} does not fit a bigint column",
                    r.seq, r.arrival_unix_us
                ));
                continue;
            };
            let cells = match columns::extract(columns, r.payload) {
                Ok(cells) => cells,
                Err(why) => {
                    outcomes[i] = RecordOutcome::Rejected(why);
                    continue;
                }
            };
            rows.index.push(i);
            rows.seq.push(seq);
            rows.tier.push(i16::from(r.tier));
            rows.arrival_us.push(arrival_us);
            rows.payload.push(r.payload);
            for (mapped, cell) in rows.mapped.iter_mut().zip(cells) {
                mapped.push(cell);
            }
        }
        rows
    }

    fn len(&self) -> usize {
        self.index.len()
    }
}

/// `Committed` when every record is, else the split.
fn finish(outcomes: Vec<RecordOutcome>) -> Outcome {
    if outcomes.iter().all(|o| *o == RecordOutcome::Committed) {
        Outcome::Committed
    } else {
        Outcome::Split(outcomes)
    }
}

impl PostgresSink {
    /// From checked options. Does not connect: the first batch (or health
    /// check) does, so a database outage does not stop the daemon.
    pub fn new(options: &PostgresOptions, instance: &str) -> Result<PostgresSink, String> {
        Ok(PostgresSink {
            settings: options.settings()?,
            instance: instance.to_string(),
            session: None,
        })
    }

    /// The open session, opening one if there is none or it broke.
    fn session(&mut self) -> Result<&mut Session, OpenError> {
        if self.session.as_ref().is_some_and(|s| s.client.is_closed()) {
            self.session = None;
        }
        if self.session.is_none() {
            self.session = Some(Session::open(&self.settings)?);
        }
        Ok(self.session.as_mut().expect("opened above"))
    }

    /// A transient failure: retry the batch, with a new session if needed.
    fn retry(&mut self, reason: String, reconnect: bool) -> Outcome {
        if reconnect && self.session.take().is_some() {
            plugin_warn!("{reason}; reconnecting at the next batch");
        }
        Outcome::Retry {
            after: None,
            reason,
        }
    }

    /// No session could be opened: whatever the error, not the records'
    /// fault, so the batch waits.
    fn cannot_open(&mut self, error: &OpenError) -> Outcome {
        let reason = match error {
            OpenError::Db(e) => match verdict(e) {
                Verdict::Retry { reason, .. } | Verdict::Reject { reason } => {
                    format!("cannot open a session: {reason}")
                }
            },
            OpenError::Shape(why) => {
                plugin_error!("{why}");
                why.clone()
            }
        };
        self.retry(reason, true)
    }

    /// The answer to a failed statement: retry, or find the bad records.
    fn on_error(
        &mut self,
        error: postgres::Error,
        shard: i32,
        rows: &Rows<'_>,
        outcomes: Vec<RecordOutcome>,
    ) -> Outcome {
        match verdict(&error) {
            Verdict::Retry { reason, reconnect } => self.retry(reason, reconnect),
            Verdict::Reject { .. } => self.isolate(shard, rows, outcomes),
        }
    }

    /// Writes the rows one by one, each in a savepoint, in one transaction:
    /// the good ones commit, the bad ones are rejected with their error.
    fn isolate(
        &mut self,
        shard: i32,
        rows: &Rows<'_>,
        mut outcomes: Vec<RecordOutcome>,
    ) -> Outcome {
        let instance = self.instance.clone();
        let result = match self.session() {
            Ok(session) => insert_one_by_one(session, &instance, shard, rows, &mut outcomes),
            Err(e) => return self.cannot_open(&e),
        };
        let Err(error) = result else {
            return finish(outcomes);
        };
        match verdict(&error) {
            Verdict::Retry { reason, reconnect } => self.retry(reason, reconnect),
            // Only a deferred constraint fails at commit: no single record
            // can be blamed, so the whole batch is.
            Verdict::Reject { reason } => {
                for &i in &rows.index {
                    outcomes[i] = RecordOutcome::Rejected(format!(
                        "{reason} (at commit: the batch was rejected whole)"
                    ));
                }
                Outcome::Split(outcomes)
            }
        }
    }
}

/// The row-by-row pass of [`PostgresSink::isolate`]. A transient error
/// aborts it (the transaction rolls back and the batch is retried).
fn insert_one_by_one(
    session: &mut Session,
    instance: &str,
    shard: i32,
    rows: &Rows<'_>,
    outcomes: &mut [RecordOutcome],
) -> Result<(), postgres::Error> {
    let Session {
        client, insert_one, ..
    } = session;
    let mut transaction = client.transaction()?;
    for (k, &i) in rows.index.iter().enumerate() {
        let mut savepoint = transaction.savepoint("record")?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &instance,
            &shard,
            &rows.seq[k],
            &rows.tier[k],
            &rows.arrival_us[k],
            &rows.payload[k],
        ];
        params.extend(rows.mapped.iter().map(|m| m.element(k)));
        match savepoint.execute(&*insert_one, &params) {
            Ok(_) => savepoint.commit()?,
            Err(e) => match verdict(&e) {
                Verdict::Reject { reason } => {
                    savepoint.rollback()?;
                    outcomes[i] = RecordOutcome::Rejected(reason);
                }
                Verdict::Retry { .. } => return Err(e),
            },
        }
    }
    transaction.commit()
}

impl PluginSink for PostgresSink {
    const OPTIONS: Option<&'static [sink_sdk::keys::Key]> =
        Some(crate::options::PostgresOptions::KEYS);

    /// Only a daemon from before sinks were told its instance id calls
    /// this: rows keyed without it would collide with other daemons'.
    fn create(_options_toml: &str) -> Result<PostgresSink, String> {
        Err(
            "this spillway daemon does not tell plugins its instance id, which the postgres \
             plugin keys every row by (instance, shard, seq); upgrade spillway, or use the \
             plugin that came with this daemon"
                .into(),
        )
    }

    fn create_in(options_toml: &str, context: &SinkContext) -> Result<PostgresSink, String> {
        let sink = PostgresSink::new(&PostgresOptions::parse(options_toml)?, context.instance())?;
        probe_shape(&sink.settings)?;
        Ok(sink)
    }
}

impl Sink for PostgresSink {
    fn name(&self) -> &str {
        "postgres"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_records: MAX_RECORDS,
            max_bytes: MAX_BYTES,
        }
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let mut outcomes = vec![RecordOutcome::Committed; batch.len()];
        let Ok(shard) = i32::try_from(batch.shard()) else {
            let reason = format!("shard {} does not fit an integer column", batch.shard());
            return Outcome::Split(vec![RecordOutcome::Rejected(reason); batch.len()]);
        };
        let rows = Rows::of(batch, &self.settings.columns, &mut outcomes);
        if rows.len() == 0 {
            return finish(outcomes);
        }
        if let Err(e) = self.session() {
            return self.cannot_open(&e);
        }
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.instance,
            &shard,
            &rows.seq,
            &rows.tier,
            &rows.arrival_us,
            &rows.payload,
        ];
        params.extend(rows.mapped.iter().map(Mapped::array));
        // One statement in autocommit: one transaction for the batch.
        let session = self.session.as_mut().expect("opened above");
        match session.client.execute(&session.insert_batch, &params) {
            Ok(_) => finish(outcomes),
            Err(e) => self.on_error(e, shard, &rows, outcomes),
        }
    }

    /// Connects if needed and runs `SELECT 1`.
    fn health_check(&mut self) -> Health {
        let checked = match self.session() {
            Ok(s) => s
                .client
                .simple_query("SELECT 1")
                .map(drop)
                .map_err(OpenError::Db),
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => Health::Healthy,
            Err(OpenError::Db(e)) => {
                let reason = match verdict(&e) {
                    Verdict::Retry { reason, .. } | Verdict::Reject { reason } => reason,
                };
                self.session = None;
                Health::Unhealthy(reason)
            }
            Err(OpenError::Shape(why)) => {
                self.session = None;
                Health::Unhealthy(why)
            }
        }
    }
}
