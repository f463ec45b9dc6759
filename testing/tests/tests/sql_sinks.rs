//! The SQL plugins (`libspillway_plugin_postgres.so`,
//! `libspillway_plugin_mariadb.so`) end to end, each against a real
//! server (issue 40): a fleet of daemons and a recreated data folder
//! sharing one table, two hosts through a crash loop of SIGKILLs with
//! exact counts per host, the database itself killed mid-batch and
//! started again, and a server down when the daemon starts.
//!
//! The plugins' own tests (`plugins/*/tests/server.rs`) cover a batch's
//! SQL: the constraint violation on one record of a thousand, the JSON
//! column mapping, the old table shape refused.
//!
//! Timing is only ever bounded from above by generous liveness timeouts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::plugins::*;
use spillway_tests::*;

/// Upper bound for "every acked record has arrived".
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// A SQL server a plugin writes into, and how a test reads it back.
#[derive(Clone)]
enum Sql {
    /// A libpq conninfo.
    Postgres(String),
    /// A `mysql://` URL as `.ci/mariadb.sh` prints it.
    Mariadb(String),
}

impl Sql {
    /// The shared server of this test binary (see `pg_server`).
    fn postgres() -> Option<Sql> {
        pg_server().map(Sql::Postgres)
    }

    fn mariadb() -> Option<Sql> {
        mariadb_server().map(Sql::Mariadb)
    }

    fn name(&self) -> &'static str {
        match self {
            Sql::Postgres(_) => "postgres",
            Sql::Mariadb(_) => "mariadb",
        }
    }

    fn plugin(&self) -> PathBuf {
        match self {
            Sql::Postgres(_) => postgres_plugin(),
            Sql::Mariadb(_) => mariadb_plugin(),
        }
    }

    /// The `[sink.options]` lines that point the plugin at `table`.
    fn options(&self, table: &str) -> String {
        match self {
            Sql::Postgres(c) => format!(
                "conninfo = {}\ntable = {}\nconnect_timeout_ms = 3000\n",
                toml_str(c),
                toml_str(table)
            ),
            Sql::Mariadb(u) => format!(
                "url = {}\ntable = {}\nconnect_timeout_ms = 3000\n",
                toml_str(u),
                toml_str(table)
            ),
        }
    }

    /// A plugin sink into `table` (small batches, quick retries).
    fn sink_config(&self, table: &str) -> String {
        format!(
            "[sink]\ntype = \"plugin\"\npath = {}\nbatch_records_max = 50\nlinger_ms = 2\n\
             retry_initial_ms = 50\nretry_max_ms = 500\n[sink.options]\n{}",
            toml_str(self.plugin().display().to_string()),
            self.options(table)
        )
    }

    fn run(&self, sql: &str) -> Result<Vec<String>, String> {
        match self {
            Sql::Postgres(c) => psql(c, sql),
            Sql::Mariadb(u) => mariadb_query(u, sql),
        }
    }

    fn drop_table(&self, table: &str) {
        self.run(&format!("DROP TABLE IF EXISTS {table}"))
            .unwrap_or_else(|e| panic!("{}: dropping {table}: {e}", self.name()));
    }

    /// Rows in `table`, or `None` while it cannot be read (not made yet,
    /// or the server is down).
    fn count(&self, table: &str) -> Option<u64> {
        self.run(&format!("SELECT count(*) FROM {table}"))
            .ok()?
            .first()?
            .trim()
            .parse()
            .ok()
    }

    /// Every row of `table` as `instance|payload` (the payloads here are
    /// text).
    fn rows(&self, table: &str) -> Result<Vec<String>, String> {
        let sql = match self {
            Sql::Postgres(_) => {
                format!("SELECT instance || '|' || convert_from(payload, 'UTF8') FROM {table}")
            }
            Sql::Mariadb(_) => {
                format!("SELECT CONCAT(instance, '|', CAST(payload AS CHAR)) FROM {table}")
            }
        };
        self.run(&sql)
    }
}

/// The instance id of a daemon's data folder (the first column of its
/// rows).
fn instance_of(d: &Daemon) -> String {
    std::fs::read_to_string(d.data_dir().join("instance-id"))
        .unwrap_or_else(|e| panic!("{}/instance-id: {e}", d.data_dir().display()))
        .trim()
        .to_string()
}

/// A table name of this test binary's own.
fn table_for(test: &str) -> String {
    format!("spillway_e2e_{}_{test}", std::process::id())
}

/// Waits until every `instance|payload` of `wanted` is in `table`;
/// returns the table's rows then. Panics with what is missing, the
/// daemons' stats and logs, after [`ARRIVAL_TIMEOUT`].
fn rows_once_all_arrived(
    sql: &Sql,
    table: &str,
    wanted: &[String],
    daemons: &[&Daemon],
) -> Vec<String> {
    let deadline = Instant::now() + ARRIVAL_TIMEOUT;
    loop {
        let rows = sql.rows(table).unwrap_or_default();
        let present: std::collections::HashSet<&str> = rows.iter().map(String::as_str).collect();
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| !present.contains(w.as_str()))
            .collect();
        if missing.is_empty() {
            // Let a redelivery still in flight land before the count.
            thread::sleep(Duration::from_millis(500));
            return sql
                .rows(table)
                .unwrap_or_else(|e| panic!("reading {table}: {e}"));
        }
        if Instant::now() >= deadline {
            let said: Vec<String> = daemons
                .iter()
                .map(|d| {
                    format!(
                        "ctl stats:\n{}\nlog (end):\n{}",
                        stats(d),
                        tail(&d.stderr(), 30)
                    )
                })
                .collect();
            panic!(
                "{}: {} of {} acked records never reached {table} (first: {:?})\n{}",
                sql.name(),
                missing.len(),
                wanted.len(),
                &missing[..missing.len().min(10)],
                said.join("\n")
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------- a fleet and a recreated folder

/// Two daemons (two data folders: the fleet shape, many hosts and one
/// database) and a third made by recreating one's data folder (its numbers
/// start again) write into one table. Every record of each lands once,
/// under its daemon's instance id. Before, the second daemon's rows
/// collided with the first's `(shard, seq)` and were dropped without a
/// word.
fn a_fleet_shares_one_table(sql: &Sql) {
    let table = table_for("fleet");
    sql.drop_table(&table);
    let config = sql.sink_config(&table);
    let push = |d: &Daemon, tag: &str| -> Vec<String> {
        let id = instance_of(d);
        let mut c = d.client();
        (0..100)
            .map(|i| {
                let p = format!("{tag}:{i}");
                c.push(Tier::Sync, p.as_bytes())
                    .unwrap_or_else(|e| panic!("push {p}: {e}"));
                format!("{id}|{p}")
            })
            .collect()
    };
    let mut a = Daemon::start(&config);
    let mut b = Daemon::start(&config);
    let mut expected = push(&a, "a");
    expected.extend(push(&b, "b"));
    // A's records must be in the table before its folder goes: removing a
    // data folder drops what it has not delivered yet (the test once
    // removed it while a loaded CI machine had delivered 39 of A's 100,
    // and the other 61 were gone with it: the operator's doing, not a
    // loss).
    rows_once_all_arrived(sql, &table, &expected[..100], &[&a]);
    // A's data folder made anew (a host rebuilt): a new instance id, and
    // its numbers start at 0 again.
    let old_a = instance_of(&a);
    a.terminate();
    std::fs::remove_dir_all(a.data_dir()).unwrap();
    a.spawn();
    assert_ne!(
        instance_of(&a),
        old_a,
        "a recreated data folder gets a new instance id"
    );
    expected.extend(push(&a, "a2"));
    let mut got = rows_once_all_arrived(sql, &table, &expected, &[&a, &b]);
    got.sort();
    expected.sort();
    assert_eq!(
        got,
        expected,
        "{}: every record of every daemon, once, under its instance id",
        sql.name()
    );
    a.terminate();
    b.terminate();
    sql.drop_table(&table);
}

#[test]
fn postgres_two_daemons_and_a_recreated_folder_share_one_table() {
    if let Some(sql) = Sql::postgres() {
        a_fleet_shares_one_table(&sql);
    }
}

#[test]
fn mariadb_two_daemons_and_a_recreated_folder_share_one_table() {
    if let Some(sql) = Sql::mariadb() {
        a_fleet_shares_one_table(&sql);
    }
}

// ---------------------------------------------------------------- a crash loop of two hosts

/// SIGKILL rounds of the crash loop; each kills both hosts.
const CRASH_ROUNDS: usize = 12;
/// Producers per host and round.
const PRODUCERS: usize = 2;

/// A producer pushing `"{tag}:{n}"` at Sync until told to stop or the
/// connection fails; returns the payloads that were acked (`n` from 0, so
/// the push cut short, if any, is `"{tag}:{acked.len()}"`).
fn spawn_producer(
    d: &Daemon,
    tag: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<String>> {
    let mut c = d.client();
    thread::spawn(move || {
        let mut acked = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let p = format!("{tag}:{}", acked.len());
            if c.push(Tier::Sync, p.as_bytes()).is_err() {
                break;
            }
            acked.push(p);
            // A steady stream, not a flood: keeps the table small.
            thread::sleep(Duration::from_micros(300));
        }
        acked
    })
}

/// Two hosts (two daemons, two data folders) write into one table through
/// [`CRASH_ROUNDS`] rounds; in each, both are SIGKILLed while rows are
/// being inserted (past a varying number of new rows, and the count moved
/// since the previous look), then started again on the same folders: the
/// first round's kill lands on a table being made, later ones while the
/// sink redelivers what the last kill left and takes new records. Then
/// per host, exactly: every acked record in one row under the host's
/// instance id; no payload in two rows; the only other rows are pushes cut
/// short by a kill (at most one per producer and round, each the one after
/// that producer's last ack).
fn crash_loop_of_two_hosts(sql: &Sql) {
    let table = table_for("crash_loop");
    sql.drop_table(&table);
    let config = sql.sink_config(&table);
    let mut hosts = [Daemon::start(&config), Daemon::start(&config)];
    let ids = [instance_of(&hosts[0]), instance_of(&hosts[1])];
    assert_ne!(ids[0], ids[1]);
    // Per host: acked payloads, and the one push per producer and round
    // that a kill may have cut short.
    let mut acked: [Vec<String>; 2] = Default::default();
    let mut cut_short: [Vec<String>; 2] = Default::default();
    for round in 0..CRASH_ROUNDS {
        let base = sql.count(&table).unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<(usize, String, thread::JoinHandle<Vec<String>>)> = (0..2)
            .flat_map(|h| (0..PRODUCERS).map(move |p| (h, p)))
            .map(|(h, p)| {
                let tag = format!("h{h}r{round}p{p}");
                let handle = spawn_producer(&hosts[h], tag.clone(), stop.clone());
                (h, tag, handle)
            })
            .collect();
        // 20..=200 new rows, a different number each round.
        let kill_after = 20 + (round as u64 * 67) % 181;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = base;
        let killed_at = loop {
            let now = sql.count(&table).unwrap_or(0);
            if now >= base + kill_after && now > last {
                for d in &mut hosts {
                    d.kill9();
                }
                break now;
            }
            last = now;
            assert!(
                Instant::now() < deadline,
                "{} round {round}: the table never reached {} rows (has {now}); logs:\n{}\n{}",
                sql.name(),
                base + kill_after,
                hosts[0].stderr(),
                hosts[1].stderr()
            );
            thread::sleep(Duration::from_millis(5));
        };
        stop.store(true, Ordering::Relaxed);
        let mut round_acked = 0;
        for (h, tag, handle) in producers {
            let got = handle.join().expect("producer panicked");
            cut_short[h].push(format!("{tag}:{}", got.len()));
            round_acked += got.len();
            acked[h].extend(got);
        }
        say(&format!(
            "{} round {round}: both hosts SIGKILLed with {killed_at} rows in the table; {round_acked} records acked this round\n",
            sql.name()
        ));
        for d in &mut hosts {
            d.spawn();
        }
    }
    // After the last start: more traffic on each, then every acked record
    // must arrive.
    for (h, d) in hosts.iter().enumerate() {
        let mut c = d.client();
        for i in 0..50 {
            let p = format!("h{h}after:{i}");
            c.push(Tier::Sync, p.as_bytes()).unwrap();
            acked[h].push(p);
        }
    }
    let wanted: Vec<String> = (0..2)
        .flat_map(|h| acked[h].iter().map(move |p| (h, p)))
        .map(|(h, p)| format!("{}|{p}", ids[h]))
        .collect();
    let rows = rows_once_all_arrived(sql, &table, &wanted, &[&hosts[0], &hosts[1]]);

    let mut per_row: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *per_row.entry(r.as_str()).or_default() += 1;
    }
    let twice: Vec<(&&str, &usize)> = per_row.iter().filter(|(_, n)| **n > 1).take(10).collect();
    assert!(
        twice.is_empty(),
        "{}: payloads stored more than once (under different numbers): {twice:?}",
        sql.name()
    );
    for h in 0..2 {
        let mine: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.strip_prefix(&format!("{}|", ids[h])))
            .collect();
        let tag = format!("h{h}");
        let strays: Vec<&&str> = mine
            .iter()
            .filter(|p| !p.starts_with(&tag))
            .take(10)
            .collect();
        assert!(
            strays.is_empty(),
            "{}: host {h}'s instance id on another host's records: {strays:?}",
            sql.name()
        );
        let acked_set: std::collections::HashSet<&str> =
            acked[h].iter().map(String::as_str).collect();
        let cut_set: std::collections::HashSet<&str> =
            cut_short[h].iter().map(String::as_str).collect();
        let unexplained: Vec<&&str> = mine
            .iter()
            .filter(|p| !acked_set.contains(**p) && !cut_set.contains(**p))
            .take(10)
            .collect();
        assert!(
            unexplained.is_empty(),
            "{}: host {h} has rows that were neither acked nor a push cut short by a kill: {unexplained:?}",
            sql.name()
        );
        let landed_cut = mine.len() - acked[h].len();
        say(&format!(
            "{} host {h}: {} rows = {} acked records, each once, + {landed_cut} pushes cut short by the {} SIGKILLs (of {} that could have been)\n",
            sql.name(),
            mine.len(),
            acked[h].len(),
            CRASH_ROUNDS,
            cut_short[h].len()
        ));
    }
    assert_eq!(
        rows.len(),
        per_row.len(),
        "{}: every row is one host's record",
        sql.name()
    );
    for d in &mut hosts {
        d.terminate();
    }
    sql.drop_table(&table);
}

#[test]
fn postgres_two_hosts_through_24_sigkills_write_every_acked_record_exactly_once() {
    if let Some(sql) = Sql::postgres() {
        crash_loop_of_two_hosts(&sql);
    }
}

#[test]
fn mariadb_two_hosts_through_24_sigkills_write_every_acked_record_exactly_once() {
    if let Some(sql) = Sql::mariadb() {
        crash_loop_of_two_hosts(&sql);
    }
}

// ---------------------------------------------------------------- the database killed mid-batch

/// A server of one test's own (its own folder), started by the
/// `.ci/<script>` the shared one comes from, so the test can SIGKILL it
/// and start it again without touching the others'. Stopped and removed
/// when dropped.
struct OwnServer {
    script: &'static str,
    env: Vec<(&'static str, String)>,
    sql: Sql,
}

impl OwnServer {
    /// Starts one; `None` after printing why when it cannot, except where
    /// the shared server came from the environment (CI): there a server
    /// that cannot start fails the test.
    fn start(kind: &str, test: &str) -> Option<OwnServer> {
        let root = std::env::temp_dir().join(format!("spillway-{test}-{}", std::process::id()));
        let (script, env, ci_var) = match kind {
            "postgres" => (
                "postgres.sh",
                vec![
                    ("PG_ROOT", root.display().to_string()),
                    ("PG_PORT", "54331".to_string()),
                ],
                "SPILLWAY_TEST_PG",
            ),
            _ => (
                "mariadb.sh",
                vec![("DB_ROOT", root.display().to_string())],
                "SPILLWAY_TEST_MARIADB",
            ),
        };
        match ci_script(script, None, &env) {
            Ok(address) => Some(OwnServer {
                script,
                env,
                sql: match kind {
                    "postgres" => Sql::Postgres(address),
                    _ => Sql::Mariadb(address),
                },
            }),
            Err(why) if std::env::var_os(ci_var).is_some() => {
                panic!("{ci_var} is set (CI) but a server of this test's own did not start: {why}")
            }
            Err(why) => {
                say(&format!(
                    "SKIPPED: {test}: no {kind} server of its own: {why}\n"
                ));
                None
            }
        }
    }

    fn run(&self, arg: &str) -> Result<String, String> {
        ci_script(self.script, Some(arg), &self.env)
    }

    fn kill(&self) {
        self.run("kill").unwrap_or_else(|e| panic!("{e}"));
    }

    fn start_again(&self) {
        self.run("start-again").unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.run("stop");
    }
}

/// The database is SIGKILLed while the daemon writes batches into it and
/// producers keep pushing; it stays down for a while (the daemon goes on
/// taking records, says it is not ready, and retries), then starts again
/// on its data (crash recovery). Every acked record is then in the table
/// exactly once: the batch the kill cut was rolled back and written again,
/// or committed and skipped on redelivery.
fn database_killed_mid_batch(kind: &str) {
    let test = format!("{kind}_killed");
    let Some(server) = OwnServer::start(kind, &test) else {
        return;
    };
    let sql = &server.sql;
    let table = table_for(&test);
    let mut d = Daemon::start(&sql.sink_config(&table));
    let id = instance_of(&d);
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<(String, thread::JoinHandle<Vec<String>>)> = (0..3)
        .map(|p| {
            let tag = format!("p{p}");
            (tag.clone(), spawn_producer(&d, tag, stop.clone()))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = 0;
    loop {
        let now = sql.count(&table).unwrap_or(0);
        if now >= 300 && now > last {
            server.kill();
            break;
        }
        last = now;
        assert!(
            Instant::now() < deadline,
            "{kind}: the table never reached 300 rows (has {now}); log:\n{}",
            d.stderr()
        );
        thread::sleep(Duration::from_millis(5));
    }
    // Down: records keep being acked and wait; the daemon says it is
    // degraded (a batch retrying) and stays ready: it takes writes.
    assert!(
        wait_until(Duration::from_secs(30), || {
            let h = d.health_json();
            h["status"] == "degraded" && h["ready"] == true
        }),
        "{kind}: the daemon never said it was degraded with its database down:\n{}",
        d.health()
    );
    let down = d.health();
    thread::sleep(Duration::from_secs(1));
    server.start_again();
    stop.store(true, Ordering::Relaxed);
    let mut wanted = Vec::new();
    for (tag, handle) in producers {
        let acked = handle.join().expect("producer panicked");
        assert!(
            acked.len() > 100,
            "{kind}: producer {tag} was acked only {} records: pushes must not wait for the database",
            acked.len()
        );
        wanted.extend(acked.iter().map(|p| format!("{id}|{p}")));
    }
    let rows = rows_once_all_arrived(sql, &table, &wanted, &[&d]);
    let mut per_row: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *per_row.entry(r.as_str()).or_default() += 1;
    }
    let twice: Vec<(&&str, &usize)> = per_row.iter().filter(|(_, n)| **n > 1).take(10).collect();
    assert!(twice.is_empty(), "{kind}: records stored twice: {twice:?}");
    // The only rows beyond the acked ones: a producer's last push, cut
    // short when the producers stopped (none is: they stop between pushes).
    assert_eq!(
        rows.len(),
        wanted.len(),
        "{kind}: rows in the table vs acked records"
    );
    assert!(
        wait_until(Duration::from_secs(30), || d.health_json()["status"]
            == "ready"),
        "{kind}: still degraded after the database came back:\n{}",
        d.health()
    );
    say(&format!(
        "{kind}: database SIGKILLed mid-batch and started again: {} acked records, each once; health while down: {}\n",
        wanted.len(),
        down.lines().filter(|l| l.contains("degraded") || l.contains("etrying")).collect::<Vec<_>>().join(" / ")
    ));
    d.terminate();
}

#[test]
fn postgres_killed_mid_batch_and_started_again_loses_and_doubles_nothing() {
    database_killed_mid_batch("postgres");
}

#[test]
fn mariadb_killed_mid_batch_and_started_again_loses_and_doubles_nothing() {
    database_killed_mid_batch("mariadb");
}

// ---------------------------------------------------------------- the server down at start

/// A SQL plugin whose server is down when the daemon starts: the daemon
/// starts and takes records (they wait), `ctl health` says why, and
/// `spillway check` passes with a warning that says why (check agrees with
/// run).
#[test]
fn sql_plugins_with_the_server_down_start_and_say_why() {
    for (so, options, says) in [
        (
            postgres_plugin(),
            "conninfo = \"host=127.0.0.1 port=1 user=nobody dbname=none\"\nconnect_timeout_ms = 1000\n",
            "Connection refused",
        ),
        (
            mariadb_plugin(),
            "url = \"mysql://nobody@127.0.0.1:1/none\"\nconnect_timeout_ms = 1000\n",
            "Connection refused",
        ),
    ] {
        let config = format!(
            "[sink]\ntype = \"plugin\"\npath = {}\nretry_initial_ms = 50\nretry_max_ms = 200\n\
             [sink.options]\n{options}",
            toml_str(so.display().to_string())
        );
        let d = Daemon::start(&config);
        d.client()
            .push(Tier::Sync, b"waits")
            .unwrap_or_else(|e| panic!("{}: a push while the server is down: {e}", so.display()));
        assert!(
            wait_until(Duration::from_secs(30), || d.health().contains(says)),
            "{}: ctl health never said {says:?}:\n{}",
            so.display(),
            d.health()
        );
        let f = run_spillway(
            &["check".as_ref(), d.config_path().as_os_str()],
            Duration::from_secs(60),
        );
        let said = format!("{}{}", f.stdout, f.stderr);
        assert!(f.status.success(), "{}: check failed: {said}", so.display());
        assert!(
            said.contains("fails its health check") && said.contains(says),
            "{}: check did not say why: {said}",
            so.display()
        );
    }
}

/// `spillway plugin test` on a shipped SQL plugin against its real server:
/// every check passes (the table is made by the plugin, as in a config).
fn passes_the_contract_test(sql: &Sql) {
    let table = table_for(&format!("contract_{}", sql.name()));
    sql.drop_table(&table);
    let dir = tempfile::tempdir().unwrap();
    let options = dir.path().join("options.toml");
    std::fs::write(&options, sql.options(&table)).unwrap();
    let f = run_spillway(
        &[
            std::ffi::OsStr::new("plugin"),
            std::ffi::OsStr::new("test"),
            sql.plugin().as_os_str(),
            std::ffi::OsStr::new("--options"),
            options.as_os_str(),
        ],
        Duration::from_secs(120),
    );
    assert!(
        f.status.success() && f.stdout.contains(", 0 failed"),
        "{}: plugin test failed:\n{}{}",
        sql.name(),
        f.stdout,
        f.stderr
    );
    assert!(
        f.stdout.contains("ok   unknown option: refused, naming it"),
        "{}",
        f.stdout
    );
    assert!(
        f.stdout.contains("ok   options: declares ") && f.stdout.contains("columns)"),
        "{}: its options are declared:\n{}",
        sql.name(),
        f.stdout
    );
    sql.drop_table(&table);
}

#[test]
fn the_sql_plugins_pass_the_contract_test() {
    for sql in [Sql::postgres(), Sql::mariadb()].into_iter().flatten() {
        passes_the_contract_test(&sql);
    }
}
