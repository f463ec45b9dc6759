//! `spillway ctl top` in a real terminal: tmux runs it in an 80x24 pane
//! against a daemon with two shards and two sinks (one delivering, one
//! failing with a long reason), and the screen tmux holds is read back.
//! No line may wrap, and the frame must have the shape of the golden one
//! (`runtime/tests/golden/top-80.txt`, rendered from fixed readings by a
//! unit test): the same header lines, the same rows, the state column
//! showing. tmux is installed by `.ci/run` (`.ci/tmux.sh`); outside CI the
//! test is skipped, saying why, when tmux is missing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use spillway_tests::*;

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("running tmux")
}

/// Kills the tmux server of `socket` when the test ends, pass or fail.
struct Server<'a>(&'a str);

impl Drop for Server<'_> {
    fn drop(&mut self) {
        let _ = tmux(&["-L", self.0, "kill-server"]);
    }
}

#[test]
fn a_top_frame_in_an_80_column_terminal_never_wraps_and_has_the_golden_shape() {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(!in_ci(), "tmux is missing in CI (.ci/tmux.sh installs it)");
        eprintln!("SKIPPED: tmux is not installed");
        return;
    }
    let d = Daemon::start(
        "[sinks.archive]\ntype = \"file\"\npath = \"archive.ndjson\"\n\
         [sinks.search]\ntype = \"http\"\n\
         url = \"http://127.0.0.1:9/a/long/path/so/the/reason/is/longer/than/the/screen/v1/events\"\n\
         retry_initial_ms = 50\nretry_max_ms = 100\n",
    );
    let mut c = d.client();
    for i in 0..200 {
        c.push(Tier::Sync, format!("record {i}").as_bytes())
            .unwrap();
    }
    let socket = format!("spillway-top-{}", std::process::id());
    let _server = Server(&socket);
    let command = format!(
        "{} ctl --config {} top --interval 0.3 --count 4; sleep 30",
        spillway_bin().display(),
        d.config_path().display()
    );
    let started = tmux(&[
        "-L",
        &socket,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-x",
        "80",
        "-y",
        "24",
        &command,
    ]);
    assert!(started.status.success(), "tmux: {started:?}");
    // Wait for a frame with both sinks' rows (the first comes after one
    // interval).
    let deadline = Instant::now() + Duration::from_secs(20);
    let screen = loop {
        let shot = tmux(&["-L", &socket, "capture-pane", "-p", "-t", "0"]);
        let text = String::from_utf8_lossy(&shot.stdout).into_owned();
        if text.contains("\nsearch ") && text.contains("  ingest ") {
            break text;
        }
        assert!(Instant::now() < deadline, "no frame in 20 s:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines: Vec<&str> = screen.lines().map(str::trim_end).collect();
    // tmux keeps a wrapped line as two rows; -J would join them. Every row
    // fits, and no row is a wrapped line's tail (capture-pane -J gives
    // the same rows).
    for l in &lines {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}\n{screen}");
    }
    let joined = tmux(&["-L", &socket, "capture-pane", "-p", "-J", "-t", "0"]);
    let joined = String::from_utf8_lossy(&joined.stdout);
    let joined_lines: Vec<&str> = joined.lines().map(str::trim_end).collect();
    let shown: Vec<&&str> = lines.iter().filter(|l| !l.is_empty()).collect();
    let shown_joined: Vec<&&str> = joined_lines.iter().filter(|l| !l.is_empty()).collect();
    assert_eq!(shown, shown_joined, "a line wrapped:\n{joined}");

    let golden = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/tests/golden/top-80.txt"),
    )
    .unwrap();
    let first_word = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    let shape = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l {
                // Rows keep their label, numbers aside.
                l if l.starts_with("  shard ") => {
                    l.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
                }
                l => first_word(l),
            })
            .collect()
    };
    assert_eq!(
        shape(&screen),
        shape(&golden),
        "the frame's shape:\n{screen}"
    );
    for header in ["shard  ingest/s", "sink         delivered/s"] {
        let want = golden.lines().find(|l| l.starts_with(header)).unwrap();
        assert!(lines.contains(&want), "no header {want:?}:\n{screen}");
    }
    // The state column shows at 80 columns: the delivering sink is up,
    // the failing one's reason is cut with an ellipsis, not wrapped.
    let row = |name: &str| *lines.iter().find(|l| first_word(l) == name).unwrap();
    assert!(row("archive").ends_with("  up"), "{screen}");
    assert!(row("search").ends_with("DOWN or paused"), "{screen}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  shard ") && l.ends_with('…')),
        "no cut reason:\n{screen}"
    );
}
