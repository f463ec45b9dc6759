//! The PostgreSQL plugin against a real server.
//!
//! The server: `SPILLWAY_TEST_PG` (a conninfo; if set, it must work), else
//! the first of a few local defaults that answers. With none, every test
//! that needs a server prints `SKIPPED: ...` and returns.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

use postgres::{Client, NoTls};
use sink_sdk::{Batch, Health, Outcome, PluginSink, Record, RecordOutcome, Sink, SinkContext};
use spillway_plugin_postgres::errors::describe;
use spillway_plugin_postgres::PostgresSink;

/// Tried in order when `SPILLWAY_TEST_PG` is not set. The last one is what
/// `.ci/run` prepares: a role and a database named after the OS user
/// (root), reached over the Unix socket with peer authentication.
const CANDIDATES: [&str; 3] = [
    "host=/var/run/postgresql user=postgres dbname=postgres",
    "host=127.0.0.1 user=postgres dbname=postgres",
    "host=/var/run/postgresql dbname=spillway",
];

/// The conninfo of a reachable server, or `None` after printing why not.
fn server() -> Option<&'static str> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        if let Ok(conninfo) = std::env::var("SPILLWAY_TEST_PG") {
            if let Err(e) = connect(&conninfo) {
                panic!(
                    "SPILLWAY_TEST_PG={conninfo:?} is set but does not connect: {}",
                    describe(&e)
                );
            }
            return Ok(conninfo);
        }
        let mut errors = Vec::new();
        for conninfo in CANDIDATES {
            match connect(conninfo) {
                Ok(_) => return Ok(conninfo.to_string()),
                Err(e) => errors.push(format!("{conninfo:?}: {}", describe(&e))),
            }
        }
        // None answers: start the private throw-away server `.ci/run` uses
        // (it installs Debian's postgresql package if it is missing).
        match start_private_server() {
            Ok(conninfo) => match connect(&conninfo) {
                Ok(_) => return Ok(conninfo),
                Err(e) => errors.push(format!("started {conninfo:?} but: {}", describe(&e))),
            },
            Err(e) => errors.push(e),
        }
        Err(errors.join("; "))
    });
    match found {
        Ok(conninfo) => Some(conninfo),
        Err(errors) => {
            // Straight to stderr, once: libtest hides what a passing test
            // prints with println!, and a skip must never be silent.
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: no PostgreSQL server reachable (set SPILLWAY_TEST_PG) — {errors}"
                );
            });
            None
        }
    }
}

fn postgres_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/postgres.sh")
}

/// Run `.ci/postgres.sh`, which prints the conninfo of the server it
/// started; the server is stopped when this test binary exits.
fn start_private_server() -> Result<String, String> {
    let script = postgres_script();
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    extern "C" fn stop_at_exit() {
        let _ = std::process::Command::new("bash")
            .arg(postgres_script())
            .arg("stop")
            .status();
    }
    // SAFETY: registers a plain function, run once by exit(3); libtest
    // ends the process with exit whether the tests passed or not.
    unsafe { libc::atexit(stop_at_exit) };
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn connect(conninfo: &str) -> Result<Client, postgres::Error> {
    let mut config: postgres::Config = conninfo.parse()?;
    config.connect_timeout(Duration::from_secs(2));
    config.connect(NoTls)
}

/// A table name of its own for each test, dropped first.
fn fresh_table(admin: &mut Client, test: &str) -> String {
    let table = format!("spillway_test_{}_{test}", std::process::id());
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .unwrap();
    table
}

/// The instance id the tests' sinks write as.
const INSTANCE: &str = "0123456789abcdef0123456789abcdef";

fn create(options: &str, instance: &str) -> Result<PostgresSink, String> {
    PostgresSink::create_in(options, &SinkContext::new(instance, "default"))
}

fn sink_as(conninfo: &str, table: &str, extra: &str, instance: &str) -> PostgresSink {
    create(
        &format!("conninfo = {conninfo:?}\ntable = {table:?}\n{extra}"),
        instance,
    )
    .unwrap()
}

fn sink(conninfo: &str, table: &str, extra: &str) -> PostgresSink {
    sink_as(conninfo, table, extra, INSTANCE)
}

fn records<'a>(shard: u32, first_seq: u64, payloads: &[&'a [u8]]) -> Vec<Record<'a>> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Record {
            shard,
            seq: first_seq + i as u64,
            tier: 1 + (i % 3) as u8,
            arrival_unix_us: 1_700_000_000_000_000 + i as u64,
            payload: p,
        })
        .collect()
}

fn deliver(sink: &mut PostgresSink, recs: &[Record<'_>]) -> Outcome {
    sink.deliver(&Batch::new(recs[0].shard, recs))
}

/// `(shard, seq, tier, arrival_us, payload)` of every row, in key order.
fn rows(admin: &mut Client, table: &str) -> Vec<(i32, i64, i16, i64, Vec<u8>)> {
    admin
        .query(
            &format!(
                "SELECT shard, seq, tier, arrival_us, payload FROM {table} \
                 ORDER BY instance, shard, seq"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

#[test]
fn creates_the_table_and_writes_every_column() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "columns");
    let mut s = sink(conninfo, &table, "");
    assert_eq!(s.health_check(), Health::Healthy);
    let recs = records(2, 10, &[b"{\"a\":1}", b"", b"\x00\xff binary"]);
    assert_eq!(deliver(&mut s, &recs), Outcome::Committed);
    assert_eq!(
        rows(&mut admin, &table),
        vec![
            (2, 10, 1, 1_700_000_000_000_000, b"{\"a\":1}".to_vec()),
            (2, 11, 2, 1_700_000_000_000_001, b"".to_vec()),
            (2, 12, 3, 1_700_000_000_000_002, b"\x00\xff binary".to_vec()),
        ]
    );
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn redelivery_is_idempotent() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "idempotent");
    let mut shard0 = sink(conninfo, &table, "");
    let mut shard1 = sink(conninfo, &table, "");
    let payloads: Vec<Vec<u8>> = (0..500)
        .map(|i| format!("{{\"i\":{i}}}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let batch0 = records(0, 1, &refs);
    let batch1 = records(1, 1, &refs);
    for _ in 0..3 {
        assert_eq!(deliver(&mut shard0, &batch0), Outcome::Committed);
        assert_eq!(deliver(&mut shard1, &batch1), Outcome::Committed);
    }
    // A batch cut differently after a restart overlaps the old ones.
    assert_eq!(
        deliver(&mut shard0, &records(0, 400, &refs[..200])),
        Outcome::Committed
    );
    let count: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(count, 500 + 500 + 99);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn bad_records_are_rejected_alone_and_the_good_ones_commit() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "isolate");
    // The user's table, with rules of its own: payloads are short JSON.
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (instance text NOT NULL, shard integer NOT NULL, seq bigint NOT NULL, \
             tier smallint NOT NULL, arrival_us bigint NOT NULL, payload bytea NOT NULL, \
             PRIMARY KEY (instance, shard, seq), \
             CHECK (octet_length(payload) < 20), \
             CHECK ((convert_from(payload, 'UTF8'))::jsonb IS NOT NULL))"
        ))
        .unwrap();
    let mut s = sink(conninfo, &table, "create_table = false");
    let recs = records(
        0,
        1,
        &[
            b"{\"ok\":1}",
            b"{\"much too long\":12345}",
            b"not json",
            b"{\"ok\":2}",
        ],
    );
    let Outcome::Split(o) = deliver(&mut s, &recs) else {
        panic!("expected a split")
    };
    assert_eq!(o.len(), 4);
    assert_eq!(
        (&o[0], &o[3]),
        (&RecordOutcome::Committed, &RecordOutcome::Committed)
    );
    let RecordOutcome::Rejected(too_long) = &o[1] else {
        panic!("{o:?}")
    };
    assert!(
        too_long.contains("(SQLSTATE 23514)") && too_long.contains("check constraint"),
        "{too_long}"
    );
    let RecordOutcome::Rejected(not_json) = &o[2] else {
        panic!("{o:?}")
    };
    assert!(not_json.contains("(SQLSTATE 22P02)"), "{not_json}");
    let seqs: Vec<i64> = rows(&mut admin, &table).iter().map(|r| r.1).collect();
    assert_eq!(seqs, [1, 4]);
    // The session is still good for the next batch.
    assert_eq!(
        deliver(&mut s, &records(0, 5, &[b"{}"])),
        Outcome::Committed
    );
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// One record of 1,000 breaks the user's constraint: it alone goes to the
/// dead letters with the server's message (found by splitting the batch);
/// the 999 others are written, in one batch's delivery.
#[test]
fn a_constraint_violation_rejects_one_record_of_a_thousand() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "constraint");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (instance text NOT NULL, shard integer NOT NULL, seq bigint NOT NULL, \
             tier smallint NOT NULL, arrival_us bigint NOT NULL, payload bytea NOT NULL, \
             PRIMARY KEY (instance, shard, seq), \
             CONSTRAINT not_bad CHECK (payload <> 'bad'::bytea))"
        ))
        .unwrap();
    let mut s = sink(conninfo, &table, "create_table = false");
    let payloads: Vec<Vec<u8>> = (0..1000)
        .map(|i| match i {
            500 => b"bad".to_vec(),
            _ => format!("r{i}").into_bytes(),
        })
        .collect();
    let views: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let Outcome::Split(o) = deliver(&mut s, &records(1, 1, &views)) else {
        panic!("expected a split")
    };
    let rejected: Vec<(usize, &String)> = o
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            RecordOutcome::Rejected(why) => Some((i, why)),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].0, 500);
    assert!(
        rejected[0].1.contains("not_bad") && rejected[0].1.contains("(SQLSTATE 23514)"),
        "{}",
        rejected[0].1
    );
    assert_eq!(rows(&mut admin, &table).len(), 999);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn a_lost_connection_is_a_retry_and_the_next_batch_reconnects() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "reconnect");
    let app = format!("spillway_test_{}", std::process::id());
    let mut s = sink(&format!("{conninfo} application_name={app}"), &table, "");
    assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
    let killed: bool = admin
        .query_one(
            "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert!(killed);
    match deliver(&mut s, &records(0, 2, &[b"b"])) {
        Outcome::Retry { reason, .. } => assert!(reason.starts_with("postgres: "), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(deliver(&mut s, &records(0, 2, &[b"b"])), Outcome::Committed);
    assert_eq!(rows(&mut admin, &table).len(), 2);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn a_statement_timeout_behind_a_lock_is_a_retry() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "locked");
    let mut s = sink(conninfo, &table, "statement_timeout_ms = 300");
    assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
    let mut locker = connect(conninfo).unwrap();
    let mut tx = locker.transaction().unwrap();
    tx.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .unwrap();
    match deliver(&mut s, &records(0, 2, &[b"b"])) {
        Outcome::Retry { reason, .. } => assert!(reason.contains("(SQLSTATE 57014)"), "{reason}"),
        other => panic!("{other:?}"),
    }
    tx.rollback().unwrap();
    assert_eq!(deliver(&mut s, &records(0, 2, &[b"b"])), Outcome::Committed);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn a_table_with_other_columns_makes_records_wait_not_dead_letter() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "othercols");
    // Made while the sink runs (a start finds no table to refuse).
    let mut s = sink(conninfo, &table, "");
    admin
        .batch_execute(&format!("CREATE TABLE {table} (id serial PRIMARY KEY)"))
        .unwrap();
    match deliver(&mut s, &records(0, 1, &[b"a"])) {
        Outcome::Retry { reason, .. } => assert!(
            reason.contains("is keyed by (id), not (instance, shard, seq)"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.health_check(), Health::Unhealthy(why) if why.contains("ALTER TABLE")));
    // Fixed by the operator: the records go through.
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// Issue 40: two daemons (two instance ids) number their records from 0
/// alike; into one table every record of both lands, once each
/// (redelivery of either adds nothing).
#[test]
fn two_daemons_share_one_table_without_colliding() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "fleet");
    let mut a = sink_as(conninfo, &table, "", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    let mut b = sink_as(conninfo, &table, "", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    let from_a = records(0, 0, &[b"a0", b"a1", b"a2"]);
    let from_b = records(0, 0, &[b"b0", b"b1", b"b2"]);
    for _ in 0..2 {
        assert_eq!(deliver(&mut a, &from_a), Outcome::Committed);
        assert_eq!(deliver(&mut b, &from_b), Outcome::Committed);
    }
    let got: Vec<(String, i64, Vec<u8>)> = admin
        .query(
            &format!("SELECT instance, seq, payload FROM {table} ORDER BY instance, seq"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want: Vec<(String, i64, Vec<u8>)> = ["a", "b"]
        .iter()
        .flat_map(|who| {
            (0..3).map(move |i| (who.repeat(32), i as i64, format!("{who}{i}").into_bytes()))
        })
        .collect();
    assert_eq!(got, want);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// Issue 40: JSON fields into typed columns. The good records fill them;
/// one that is not JSON, lacks a required field or has it of another type
/// is rejected naming the field (one the server cannot read as a
/// timestamp, with the server's error); the rest of the batch is written.
#[test]
fn json_fields_fill_typed_columns_and_bad_records_are_rejected_alone() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "columns");
    let mut s = sink(
        conninfo,
        &table,
        "[columns]\n\
         user_id = { from = \"/user/id\", type = \"bigint\" }\n\
         at = { from = \"ts\", type = \"timestamptz\" }\n\
         score = { from = \"score\", type = \"double\", required = false }\n\
         active = { from = \"active\", type = \"boolean\", required = false }\n\
         name = { from = \"name\", type = \"text\", required = false }\n\
         extra = { from = \"/extra\", type = \"json\", required = false }\n",
    );
    let recs = records(
        0,
        1,
        &[
            br#"{"user":{"id":7},"ts":"2026-12-06T10:00:00Z","score":1.5,"active":true,"name":"ann","extra":{"a":[1]}}"#,
            b"not json",
            br#"{"user":{},"ts":"2026-12-06T10:00:00Z"}"#,
            br#"{"user":{"id":"8"},"ts":"2026-12-06T10:00:00Z"}"#,
            br#"{"user":{"id":9},"ts":"yesterday-ish"}"#,
            br#"{"user":{"id":10},"ts":"2026-12-06T11:00:00+01:00"}"#,
        ],
    );
    let Outcome::Split(o) = deliver(&mut s, &recs) else {
        panic!("expected a split")
    };
    let why = |i: usize| match &o[i] {
        RecordOutcome::Rejected(why) => why.clone(),
        other => panic!("record {i}: {other:?}"),
    };
    assert_eq!(
        (&o[0], &o[5]),
        (&RecordOutcome::Committed, &RecordOutcome::Committed)
    );
    assert!(why(1).starts_with("the record is not JSON"), "{}", why(1));
    assert_eq!(
        why(2),
        "field \"/user/id\" (column user_id) is missing or null"
    );
    assert!(
        why(3).contains("(column user_id, bigint) is a string"),
        "{}",
        why(3)
    );
    assert!(why(4).contains("SQLSTATE 22007"), "{}", why(4));
    #[allow(clippy::type_complexity)]
    let got: Vec<(
        i64,
        i64,
        String,
        Option<f64>,
        Option<bool>,
        Option<String>,
        Option<String>,
    )> = admin
        .query(
            &format!(
                "SELECT seq, user_id, to_char(at AT TIME ZONE 'UTC', 'HH24:MI'), score, \
                     active, name, extra::text FROM {table} ORDER BY seq"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                1,
                7,
                "10:00".to_string(),
                Some(1.5),
                Some(true),
                Some("ann".to_string()),
                Some("{\"a\": [1]}".to_string())
            ),
            (6, 10, "10:00".to_string(), None, None, None, None)
        ]
    );
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// A table of the old shape (keyed by `(shard, seq)`, no instance column)
/// is never written into: the start refuses it with the migration to run;
/// once that has run, the old rows stay (instance `legacy`) and new ones
/// go in beside them.
#[test]
fn a_table_of_the_old_shape_is_refused_with_its_migration() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "oldshape");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (shard integer NOT NULL, seq bigint NOT NULL, \
             tier smallint NOT NULL, arrival_us bigint NOT NULL, payload bytea NOT NULL, \
             PRIMARY KEY (shard, seq)); \
             INSERT INTO {table} VALUES (0, 0, 1, 0, 'old')"
        ))
        .unwrap();
    let options = format!("conninfo = {conninfo:?}\ntable = {table:?}");
    let err = create(&options, INSTANCE).err().unwrap();
    assert!(
        err.contains(&format!(
            "table {table} is keyed by (shard, seq), not (instance, shard, seq)"
        )) && err.contains("would collide there and be dropped"),
        "{err}"
    );
    let migration = &err[err
        .find("ALTER TABLE")
        .expect("the migration is in the message")..];
    admin.batch_execute(migration).unwrap();
    let mut s = sink(conninfo, &table, "");
    assert_eq!(
        deliver(&mut s, &records(0, 0, &[b"new"])),
        Outcome::Committed
    );
    let got: Vec<(String, Vec<u8>)> = admin
        .query(
            &format!("SELECT instance, payload FROM {table} ORDER BY instance"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        got,
        [
            (INSTANCE.to_string(), b"new".to_vec()),
            ("legacy".to_string(), b"old".to_vec())
        ]
    );
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn a_dropped_table_is_recreated() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "dropped");
    let mut s = sink(conninfo, &table, "");
    assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    assert!(matches!(
        deliver(&mut s, &records(0, 2, &[b"b"])),
        Outcome::Retry { .. }
    ));
    assert_eq!(deliver(&mut s, &records(0, 2, &[b"b"])), Outcome::Committed);
    assert_eq!(rows(&mut admin, &table).len(), 1);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn through_the_plugin_abi_in_process() {
    let Some(conninfo) = server() else { return };
    let mut admin = connect(conninfo).unwrap();
    let table = fresh_table(&mut admin, "abi");
    let vtable = spillway_plugin_postgres::spillway_sink_plugin_v1();
    let extension = spillway_plugin_postgres::spillway_sink_plugin_v1_extension();
    let plugin = std::sync::Arc::new(
        unsafe { sink_sdk::abi::host::Plugin::from_entry_points(vtable, extension) }.unwrap(),
    );
    assert_eq!(plugin.name(), "spillway-plugin-postgres");
    let options = format!("conninfo = {conninfo:?}\ntable = {table:?}");
    // A daemon that does not pass the context (only `create`) is refused.
    let err = plugin.create(&options, None).err().unwrap();
    assert!(
        err.contains("does not tell plugins its instance id"),
        "{err}"
    );
    let mut instance = plugin
        .create_in(&options, None, &SinkContext::new(INSTANCE, "default"))
        .unwrap();
    assert_eq!(instance.limits().max_records, 10_000);
    let recs = records(1, 1, &[b"x", b"y"]);
    assert_eq!(
        instance.deliver(&Batch::new(1, &recs)),
        Ok(Outcome::Committed)
    );
    assert_eq!(rows(&mut admin, &table).len(), 2);
    admin.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

// ---- no server needed ----------------------------------------------------------

#[test]
fn a_refused_connection_is_a_retry_and_unhealthy() {
    // Port 1 on loopback: nothing listens there.
    let mut s = create(
        "conninfo = \"host=127.0.0.1 port=1 user=nobody dbname=none\"\nconnect_timeout_ms = 1000",
        INSTANCE,
    )
    .unwrap();
    match deliver(&mut s, &records(0, 1, &[b"a"])) {
        Outcome::Retry {
            after: None,
            reason,
        } => {
            assert!(
                reason.starts_with("cannot open a session: postgres: "),
                "{reason}"
            );
            assert!(reason.contains("Connection refused"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.health_check(), Health::Unhealthy(_)));
}

#[test]
fn options_are_checked_at_create() {
    let err = create(
        "conninfo = \"host=h\"\ntable = \"x; drop table y\"",
        INSTANCE,
    )
    .err()
    .unwrap();
    assert!(err.starts_with("options.table: "), "{err}");
    let err = create("table = \"t\"", INSTANCE).err().unwrap();
    assert_eq!(err, "options.conninfo: is required (a conninfo string)");
    // Without a context (a daemon from before): refused, never keyed
    // without the instance.
    let err = PostgresSink::create("table = \"t\"").err().unwrap();
    assert!(err.contains("upgrade spillway"), "{err}");
}
