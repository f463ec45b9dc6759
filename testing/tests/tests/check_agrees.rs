//! `spillway check` agrees with `spillway run`, both ways, on a corpus of
//! configs (good, bad, and ones whose verdict depends on the machine): a
//! config `check` passes, `run` starts on; one `check` refuses, `run`
//! refuses; one `check` passes with a warning, `run` starts on and warns
//! about at its start. Each case also says which of the three it is, so a
//! change that makes both wrong the same way fails too.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use spillway_tests::plugins::toml_str;
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// `check` passes without a warning; `run` starts.
    Good,
    /// `check` passes with a warning; `run` starts and logs a warning.
    Warns,
    /// `check` fails; `run` exits without starting.
    Refused,
}

/// What the environment of a case needs kept alive while both run.
#[derive(Default)]
struct Held {
    _listeners: Vec<TcpListener>,
    _receivers: Vec<HttpReceiver>,
}

/// Writes a case's config, given the daemon's folder and what the case
/// holds open meanwhile.
type MakeConfig = Box<dyn Fn(&Path, &mut Held) -> String>;

/// One case: its name, its verdict, and its config.
struct Case {
    name: &'static str,
    verdict: Verdict,
    config: MakeConfig,
}

fn case(
    name: &'static str,
    verdict: Verdict,
    config: impl Fn(&Path, &mut Held) -> String + 'static,
) -> Case {
    Case {
        name,
        verdict,
        config: Box::new(config),
    }
}

/// A sink that needs nothing outside the machine and warns about nothing.
const NOOP: &str = "[sink]\ntype = \"noop\"\n";

fn busy_port(held: &mut Held) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    held._listeners.push(l);
    port
}

fn corpus() -> Vec<Case> {
    use Verdict::*;
    vec![
        // -- good
        case("defaults with a noop sink", Good, |_, _| NOOP.into()),
        case("one shard", Good, |_, _| {
            format!("[server]\nshards = 1\n{NOOP}")
        }),
        case("four shards", Good, |_, _| {
            format!("[server]\nshards = 4\n{NOOP}")
        }),
        case("a file sink", Good, |dir, _| {
            let out = dir.join("out").join("delivered.ndjson");
            format!(
                "[sink]\ntype = \"file\"\npath = {}\n",
                toml_str(out.display().to_string())
            )
        }),
        case("two sinks", Good, |dir, _| {
            let out = dir.join("b.ndjson");
            format!(
                "[sinks.a]\ntype = \"noop\"\n[sinks.b]\ntype = \"file\"\npath = {}\n",
                toml_str(out.display().to_string())
            )
        }),
        case("an http sink that answers", Good, |_, held| {
            let rx = HttpReceiver::start();
            let url = rx.url();
            held._receivers.push(rx);
            format!("[sink]\ntype = \"http\"\nurl = {}\n", toml_str(url))
        }),
        case("a small WAB cap", Good, |_, _| {
            format!("[wab]\nwab_bytes_max = 16777216\n{NOOP}")
        }),
        case("JSON logs", Good, |_, _| {
            format!("[log]\nformat = \"json\"\n{NOOP}")
        }),
        case("a metrics address", Good, |_, _| {
            format!("[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n{NOOP}")
        }),
        case("the HTTP door", Good, |_, _| {
            format!(
                "[server.http]\nlisten = \"127.0.0.1:{}\"\ntls = false\n{NOOP}",
                free_port()
            )
        }),
        case("the TCP door in the clear on loopback", Good, |_, _| {
            format!(
                "[server.tcp]\nlisten = \"127.0.0.1:{}\"\ntls = false\n{NOOP}",
                free_port()
            )
        }),
        case("a socket group that exists", Good, |_, _| {
            format!("[server]\nsocket_group = 0\nsocket_mode = \"0660\"\n{NOOP}")
        }),
        case("peer uids", Good, |_, _| {
            format!("[server]\nallowed_uids = [0]\n{NOOP}")
        }),
        case("a data folder that does not exist yet", Good, |dir, _| {
            let data = dir.join("deep").join("er").join("data");
            format!(
                "[server]\ndata_dir = {}\n{NOOP}",
                toml_str(data.display().to_string())
            )
        }),
        // -- good, with a warning from the machine
        case("an http sink nobody answers", Warns, |_, _| {
            // A port just freed: connections to it are refused.
            let port = free_port();
            format!(
                "[sink]\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/in\"\ntimeout_ms = 1000\n"
            )
        }),
        case("an http host that does not resolve", Warns, |_, _| {
            "[sink]\ntype = \"http\"\nurl = \"http://spillway-check-agrees.invalid/in\"\ntimeout_ms = 1000\n".into()
        }),
        // -- refused by the file itself
        case("not TOML", Refused, |_, _| "[server\nshards = 1\n".into()),
        case("an unknown key", Refused, |_, _| {
            format!("[server]\nshardz = 1\n{NOOP}")
        }),
        case("an unknown sink key", Refused, |_, _| {
            "[sink]\ntype = \"noop\"\nurll = \"x\"\n".into()
        }),
        case("a segment size out of range", Refused, |_, _| {
            format!("[wab]\nsegment_bytes_max = 1000\n{NOOP}")
        }),
        case("[sink] and [sinks.x] together", Refused, |_, _| {
            "[sink]\ntype = \"noop\"\n[sinks.x]\ntype = \"noop\"\n".into()
        }),
        case("an unknown sink type", Refused, |_, _| {
            "[sink]\ntype = \"kinesis\"\n".into()
        }),
        case("the TCP door in the clear off loopback", Refused, |_, _| {
            format!(
                "[server.tcp]\nlisten = \"0.0.0.0:{}\"\ntls = false\n{NOOP}",
                free_port()
            )
        }),
        case("a metrics address that does not parse", Refused, |_, _| {
            format!("[admin]\nmetrics_address = \"not an address\"\n{NOOP}")
        }),
        // -- refused by the machine
        case("a socket group that does not exist", Refused, |_, _| {
            format!("[server]\nsocket_group = \"spillway-no-such-group\"\n{NOOP}")
        }),
        case("a metrics address in use", Refused, |_, held| {
            let port = busy_port(held);
            format!("[admin]\nmetrics_address = \"127.0.0.1:{port}\"\n{NOOP}")
        }),
        case("the HTTP door's address in use", Refused, |_, held| {
            let port = busy_port(held);
            format!("[server.http]\nlisten = \"127.0.0.1:{port}\"\ntls = false\n{NOOP}")
        }),
        case("the TCP door's address in use", Refused, |_, held| {
            let port = busy_port(held);
            format!("[server.tcp]\nlisten = \"127.0.0.1:{port}\"\ntls = false\n{NOOP}")
        }),
        case("a data folder under a regular file", Refused, |dir, _| {
            let plain = dir.join("plain");
            fs::write(&plain, b"").unwrap();
            format!(
                "[server]\ndata_dir = {}\n{NOOP}",
                toml_str(plain.join("data").display().to_string())
            )
        }),
        case(
            "a data folder holding someone else's files",
            Refused,
            |dir, _| {
                let data = dir.join("theirs");
                fs::create_dir_all(&data).unwrap();
                fs::write(data.join("passwd"), b"root:x:0:0").unwrap();
                format!(
                    "[server]\ndata_dir = {}\n{NOOP}",
                    toml_str(data.display().to_string())
                )
            },
        ),
        case("a socket path that is a regular file", Refused, |dir, _| {
            let folder = dir.join("sockets");
            fs::create_dir_all(&folder).unwrap();
            let plain = folder.join("spillway.sock");
            fs::write(&plain, b"").unwrap();
            format!(
                "[server]\nsocket_path = {}\n{NOOP}",
                toml_str(plain.display().to_string())
            )
        }),
        case("a socket folder others can write", Refused, |dir, _| {
            let open = dir.join("open");
            fs::create_dir_all(&open).unwrap();
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
            format!(
                "[server]\nsocket_path = {}\n{NOOP}",
                toml_str(open.join("s.sock").display().to_string())
            )
        }),
        case("a plugin library that is not there", Refused, |dir, _| {
            format!(
                "[sink]\ntype = \"plugin\"\npath = {}\n",
                toml_str(dir.join("missing.so").display().to_string())
            )
        }),
        case("a file sink under /proc", Refused, |_, _| {
            "[sink]\ntype = \"file\"\npath = \"/proc/self/spillway.ndjson\"\n".into()
        }),
        case(
            "a bearer token variable that is not set",
            Refused,
            |_, held| {
                let rx = HttpReceiver::start();
                let url = rx.url();
                held._receivers.push(rx);
                format!(
                "[sink]\ntype = \"http\"\nurl = {}\ntoken_env = \"SPILLWAY_CHECK_AGREES_UNSET\"\n",
                toml_str(url)
            )
            },
        ),
    ]
}

/// What `check` said: its verdict.
fn check_verdict(config: &Path) -> (Verdict, Finished) {
    let f = run_spillway(
        &["check".as_ref(), config.as_os_str()],
        Duration::from_secs(60),
    );
    let verdict = if !f.status.success() {
        Verdict::Refused
    } else if f.stdout.contains(": warning: ") {
        Verdict::Warns
    } else {
        Verdict::Good
    };
    (verdict, f)
}

/// What `run` did: refused (exited before answering), or started, with a
/// warning at its start or not.
fn run_verdict(d: &mut Daemon) -> (Verdict, String) {
    match d.run_to_exit_or_start(Duration::from_secs(30)) {
        StartOrExit::Exited(f) => (Verdict::Refused, f.stderr),
        StartOrExit::Started => {
            // A sink's health check runs as its drain starts.
            let warned = wait_until(Duration::from_secs(2), || d.stderr().contains(" WARN "));
            let log = d.stderr();
            d.terminate();
            (
                if warned {
                    Verdict::Warns
                } else {
                    Verdict::Good
                },
                log,
            )
        }
    }
}

#[test]
fn check_and_run_agree_on_every_config_of_the_corpus() {
    let cases = corpus();
    assert!(cases.len() >= 30, "a corpus of {} configs", cases.len());
    let mut disagreements = Vec::new();
    for c in &cases {
        let mut d = Daemon::configure("");
        let mut held = Held::default();
        let text = (c.config)(d.dir(), &mut held);
        if c.name == "not TOML" {
            // Written as it is: overrides are merged key by key.
            fs::write(d.config_path(), &text).unwrap();
        } else {
            d.reconfigure(&text);
        }
        let (checked, f) = check_verdict(d.config_path());
        let (ran, log) = run_verdict(&mut d);
        eprintln!("{:<50} check {checked:?}, run {ran:?}", c.name);
        if checked != ran || checked != c.verdict {
            disagreements.push(format!(
                "{}: expected {:?}; check said {checked:?}, run did {ran:?}\n  config:\n{}\n  check stdout: {}\n  check stderr: {}\n  run log (start):\n{}",
                c.name,
                c.verdict,
                indent(&d.config_text()),
                f.stdout.trim(),
                f.stderr.trim(),
                indent(&log.lines().take(12).collect::<Vec<_>>().join("\n")),
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} configs:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n\n")
    );
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
