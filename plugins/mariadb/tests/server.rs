//! The MySQL / MariaDB plugin against a real server.
//!
//! The server: `SPILLWAY_TEST_MARIADB` (a `mysql://` URL; if set, it must
//! work), else a private one `.ci/mariadb.sh` starts (it installs Debian's
//! mariadb-server if missing). With none, each test prints `SKIPPED: ...`
//! and returns, except under CI (`CI` set), where that fails.

use std::io::Write;
use std::sync::OnceLock;

use mysql::prelude::Queryable;
use mysql::{Conn, Opts};
use sink_sdk::{Batch, Health, Outcome, PluginSink, Record, RecordOutcome, Sink, SinkContext};
use spillway_plugin_mariadb::MariadbSink;

/// The instance id the tests' sinks write as.
const INSTANCE: &str = "0123456789abcdef0123456789abcdef";

fn script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/mariadb.sh")
}

/// The URL of a reachable server, or `None` after saying why not.
fn server() -> Option<&'static str> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        if let Ok(url) = std::env::var("SPILLWAY_TEST_MARIADB") {
            if let Err(e) = admin_of(&url) {
                panic!("SPILLWAY_TEST_MARIADB={url:?} is set but does not connect: {e}");
            }
            return Ok(url);
        }
        let out = std::process::Command::new("bash")
            .arg(script())
            .output()
            .map_err(|e| format!("running {}: {e}", script().display()))?;
        extern "C" fn stop_at_exit() {
            let _ = std::process::Command::new("bash")
                .arg(script())
                .arg("stop")
                .status();
        }
        // SAFETY: registers a plain function, run once by exit(3).
        unsafe { libc::atexit(stop_at_exit) };
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                script().display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
        admin_of(&url).map_err(|e| format!("started {url:?} but: {e}"))?;
        Ok(url)
    });
    match found {
        Ok(url) => Some(url),
        Err(why) => {
            if std::env::var_os("CI").is_some() {
                panic!("no MariaDB server for the tests under CI: {why}");
            }
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: no MariaDB server (set SPILLWAY_TEST_MARIADB) — {why}"
                );
            });
            None
        }
    }
}

/// The tests that use the server run one at a time: one of them kills
/// the user's other connections, which must be the sink's alone.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

fn admin_of(url: &str) -> Result<Conn, mysql::Error> {
    Conn::new(Opts::from_url(url)?)
}

/// A table name of its own for each test, dropped first.
fn fresh_table(admin: &mut Conn, test: &str) -> String {
    let table = format!("spillway_test_{}_{test}", std::process::id());
    admin
        .query_drop(format!("DROP TABLE IF EXISTS {table}"))
        .unwrap();
    table
}

fn create(options: &str, instance: &str) -> Result<MariadbSink, String> {
    MariadbSink::create_in(options, &SinkContext::new(instance, "default"))
}

fn sink_as(url: &str, table: &str, extra: &str, instance: &str) -> MariadbSink {
    create(
        &format!("url = {url:?}\ntable = {table:?}\n{extra}"),
        instance,
    )
    .unwrap()
}

fn sink(url: &str, table: &str) -> MariadbSink {
    sink_as(url, table, "", INSTANCE)
}

fn records<'a>(shard: u32, first_seq: u64, payloads: &[&'a [u8]]) -> Vec<Record<'a>> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Record {
            shard,
            seq: first_seq + i as u64,
            tier: 2,
            arrival_unix_us: 1_700_000_000_000_000 + i as u64,
            payload: p,
        })
        .collect()
}

fn deliver(sink: &mut MariadbSink, recs: &[Record<'_>]) -> Outcome {
    sink.deliver(&Batch::new(recs[0].shard, recs))
}

/// `(instance, shard, seq, tier, arrival_us, payload)` of every row, in
/// key order.
#[allow(clippy::type_complexity)]
fn rows(admin: &mut Conn, table: &str) -> Vec<(String, u32, u64, u8, u64, Vec<u8>)> {
    admin
        .query(format!(
            "SELECT instance, shard, seq, tier, arrival_us, payload FROM {table} \
             ORDER BY instance, shard, seq"
        ))
        .unwrap()
}

#[test]
fn creates_the_table_writes_every_column_and_redelivery_adds_nothing() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "columns");
    let mut s = sink(url, &table);
    let recs = records(3, 7, &[b"one", b"", b"\x00\xffbinary"]);
    assert_eq!(deliver(&mut s, &recs), Outcome::Committed);
    // Again, and a batch that overlaps it: nothing twice.
    assert_eq!(deliver(&mut s, &recs), Outcome::Committed);
    let more = records(3, 8, &[b"", b"\x00\xffbinary", b"four"]);
    assert_eq!(deliver(&mut s, &more), Outcome::Committed);
    let got = rows(&mut admin, &table);
    let payloads: Vec<&[u8]> = got.iter().map(|r| r.5.as_slice()).collect();
    assert_eq!(payloads, [&b"one"[..], b"", b"\x00\xffbinary", b"four"]);
    assert_eq!(
        (&got[0].0, got[0].1, got[0].2, got[0].3, got[0].4),
        (&INSTANCE.to_string(), 3, 7, 2, 1_700_000_000_000_000)
    );
    assert_eq!(s.health_check(), Health::Healthy);
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

/// Issue 40: two daemons number their records from 0 alike; into one
/// table every record of both lands once.
#[test]
fn two_daemons_share_one_table_without_colliding() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "fleet");
    let mut a = sink_as(url, &table, "", &"a".repeat(32));
    let mut b = sink_as(url, &table, "", &"b".repeat(32));
    for _ in 0..2 {
        assert_eq!(
            deliver(&mut a, &records(0, 0, &[b"a0", b"a1"])),
            Outcome::Committed
        );
        assert_eq!(
            deliver(&mut b, &records(0, 0, &[b"b0", b"b1"])),
            Outcome::Committed
        );
    }
    let got: Vec<Vec<u8>> = rows(&mut admin, &table).into_iter().map(|r| r.5).collect();
    assert_eq!(
        got,
        [b"a0".to_vec(), b"a1".into(), b"b0".into(), b"b1".into()]
    );
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

/// One record of 1,000 breaks the user's constraint: it alone goes to the
/// dead letters with the server's message; the 999 others are written.
#[test]
fn a_constraint_violation_rejects_one_record_of_a_thousand() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "constraint");
    admin
        .query_drop(format!(
            "CREATE TABLE {table} (instance VARCHAR(64) CHARACTER SET ascii NOT NULL, \
             shard INT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, \
             tier TINYINT UNSIGNED NOT NULL, arrival_us BIGINT UNSIGNED NOT NULL, \
             payload VARBINARY(20) NOT NULL, PRIMARY KEY (instance, shard, seq), \
             CONSTRAINT not_bad CHECK (payload <> 'bad'))"
        ))
        .unwrap();
    let mut s = sink_as(url, &table, "create_table = false", INSTANCE);
    let payloads: Vec<Vec<u8>> = (0..1000)
        .map(|i| match i {
            500 => b"bad".to_vec(),
            700 => vec![b'x'; 21],
            _ => format!("r{i}").into_bytes(),
        })
        .collect();
    let views: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let recs = records(1, 1, &views);
    let Outcome::Split(o) = deliver(&mut s, &recs) else {
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
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0].0, 500);
    assert!(rejected[0].1.contains("not_bad"), "{}", rejected[0].1);
    assert_eq!(rejected[1].0, 700);
    assert!(rejected[1].1.contains("error 1406"), "{}", rejected[1].1);
    assert_eq!(rows(&mut admin, &table).len(), 998);
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

/// Issue 40: JSON fields into typed columns. The good records fill them
/// (a timestamp stored in UTC); one that is not JSON, lacks a required
/// field or has it of another type (or a timestamp that is not RFC 3339)
/// is rejected naming the field; the rest of the batch is written.
#[test]
fn json_fields_fill_typed_columns_and_bad_records_are_rejected_alone() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "columns");
    let mut s = sink_as(
        url,
        &table,
        "[columns]\n\
         user_id = { from = \"/user/id\", type = \"bigint\" }\n\
         at = { from = \"ts\", type = \"timestamptz\" }\n\
         score = { from = \"score\", type = \"double\", required = false }\n\
         active = { from = \"active\", type = \"boolean\", required = false }\n\
         name = { from = \"name\", type = \"text\", required = false }\n\
         extra = { from = \"/extra\", type = \"json\", required = false }\n",
        INSTANCE,
    );
    assert_eq!(s.limits().max_records, 65_535 / 12);
    let recs = records(
        0,
        1,
        &[
            br#"{"user":{"id":7},"ts":"2026-12-06T10:00:00.5Z","score":1.5,"active":true,"name":"ann","extra":{"a":[1]}}"#,
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
    assert!(
        why(4).contains("(column at, timestamptz) is \"yesterday-ish\""),
        "{}",
        why(4)
    );
    #[allow(clippy::type_complexity)]
    let got: Vec<(
        u64,
        i64,
        String,
        Option<f64>,
        Option<i8>,
        Option<String>,
        Option<String>,
    )> = admin
        .query(format!(
            "SELECT seq, user_id, CAST(at AS CHAR), score, active, name, extra \
                 FROM {table} ORDER BY seq"
        ))
        .unwrap();
    assert_eq!(
        got,
        [
            (
                1,
                7,
                "2026-12-06 10:00:00.500000".to_string(),
                Some(1.5),
                Some(1),
                Some("ann".to_string()),
                Some("{\"a\":[1]}".to_string())
            ),
            (
                6,
                10,
                "2026-12-06 10:00:00.000000".to_string(),
                None,
                None,
                None,
                None
            )
        ]
    );
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

/// A table keyed otherwise is refused at start with the migration; after
/// it, old rows stay (instance `legacy`) and new ones go in.
#[test]
fn a_table_of_the_old_shape_is_refused_with_its_migration() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "oldshape");
    admin
        .query_drop(format!(
            "CREATE TABLE {table} (shard INT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, \
             tier TINYINT UNSIGNED NOT NULL, arrival_us BIGINT UNSIGNED NOT NULL, \
             payload LONGBLOB NOT NULL, PRIMARY KEY (shard, seq)); \
             INSERT INTO {table} VALUES (0, 0, 1, 0, 'old')"
        ))
        .unwrap();
    let err = create(&format!("url = {url:?}\ntable = {table:?}"), INSTANCE)
        .err()
        .unwrap();
    assert!(
        err.contains(&format!(
            "table {table} is keyed by (shard, seq), not (instance, shard, seq)"
        )),
        "{err}"
    );
    let migration = &err[err.find("ALTER TABLE").expect("the migration")..];
    admin.query_drop(migration).unwrap();
    let mut s = sink(url, &table);
    assert_eq!(
        deliver(&mut s, &records(0, 0, &[b"new"])),
        Outcome::Committed
    );
    let got: Vec<(String, Vec<u8>)> = rows(&mut admin, &table)
        .into_iter()
        .map(|r| (r.0, r.5))
        .collect();
    assert_eq!(
        got,
        [
            (INSTANCE.to_string(), b"new".to_vec()),
            ("legacy".to_string(), b"old".to_vec())
        ]
    );
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

/// The connection killed by the server: the batch is retried and the next
/// one reconnects.
#[test]
fn a_killed_connection_is_a_retry_and_the_next_batch_reconnects() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "reconnect");
    let mut s = sink(url, &table);
    assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
    let ids: Vec<u64> = admin
        .query(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
             AND USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND DB = DATABASE()",
        )
        .unwrap();
    assert!(
        !ids.is_empty(),
        "the sink's connection is not in the process list"
    );
    for id in ids {
        admin.query_drop(format!("KILL CONNECTION {id}")).unwrap();
    }
    match deliver(&mut s, &records(0, 2, &[b"b"])) {
        Outcome::Retry { .. } => {}
        Outcome::Committed => panic!("the killed connection was not noticed"),
        other => panic!("{other:?}"),
    }
    assert_eq!(deliver(&mut s, &records(0, 2, &[b"b"])), Outcome::Committed);
    assert_eq!(rows(&mut admin, &table).len(), 2);
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn through_the_plugin_abi_in_process() {
    let Some(url) = server() else { return };
    let _one = one_at_a_time();
    let mut admin = admin_of(url).unwrap();
    let table = fresh_table(&mut admin, "abi");
    let plugin = std::sync::Arc::new(
        unsafe {
            sink_sdk::abi::host::Plugin::from_entry_points(
                spillway_plugin_mariadb::spillway_sink_plugin_v1(),
                spillway_plugin_mariadb::spillway_sink_plugin_v1_extension(),
            )
        }
        .unwrap(),
    );
    assert_eq!(plugin.name(), "spillway-plugin-mariadb");
    let options = format!("url = {url:?}\ntable = {table:?}");
    let err = plugin.create(&options, None).err().unwrap();
    assert!(
        err.contains("does not tell plugins its instance id"),
        "{err}"
    );
    let mut instance = plugin
        .create_in(&options, None, &SinkContext::new(INSTANCE, "default"))
        .unwrap();
    let recs = records(1, 1, &[b"x", b"y"]);
    assert_eq!(
        instance.deliver(&Batch::new(1, &recs)),
        Ok(Outcome::Committed)
    );
    assert_eq!(rows(&mut admin, &table).len(), 2);
    admin.query_drop(format!("DROP TABLE {table}")).unwrap();
}

// ---- no server needed ----------------------------------------------------------

#[test]
fn a_refused_connection_is_a_retry_and_unhealthy() {
    let mut s = create(
        "url = \"mysql://nobody@127.0.0.1:1/none\"\nconnect_timeout_ms = 1000",
        INSTANCE,
    )
    .unwrap();
    match deliver(&mut s, &records(0, 1, &[b"a"])) {
        Outcome::Retry {
            after: None,
            reason,
        } => assert!(reason.starts_with("cannot connect: mysql: "), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.health_check(), Health::Unhealthy(_)));
}

#[test]
fn options_are_checked_at_create() {
    let err = |text: &str| create(text, INSTANCE).err().unwrap();
    assert!(err("url = \"mysql://h/d\"\ntable = \"x; drop\"").starts_with("options.table: "));
    assert_eq!(
        err("table = \"t\""),
        "options.url: is required (mysql://USER@HOST/DATABASE)"
    );
    assert!(err("url = \"postgres://h/d\"").starts_with("options.url: "));
    assert_eq!(
        err("url = \"mysql://u@h/d\"\npassword_env = \"SPILLWAY_TEST_NO_SUCH_VAR\""),
        "options.password_env: the variable SPILLWAY_TEST_NO_SUCH_VAR is unset or empty"
    );
    assert!(err("url = \"mysql://u@h/d\"\nca_file = \"/x\"").contains("options.tls is false"));
    assert!(
        err("url = \"mysql://u@localhost/d?socket=/tmp/s\"\ntls = true")
            .starts_with("options.tls: ")
    );
    assert!(err("url = \"mysql://h/d\"\nconnect_timeout_ms = 1")
        .starts_with("options.connect_timeout_ms = 1 is out of range: allowed 100..=600000 ms"));
    let err = MariadbSink::create("url = \"mysql://h/d\"").err().unwrap();
    assert!(err.contains("upgrade spillway"), "{err}");
}
