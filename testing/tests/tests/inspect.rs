//! `spillway inspect`: the real binary reads a data folder the real daemon
//! wrote, marks each record pending or confirmed from the checkpoint, and
//! refuses a folder that is not a data folder with a clear error.

use std::time::Duration;

use spillway_tests::*;

fn inspect(args: &[&str]) -> Finished {
    let mut all: Vec<&std::ffi::OsStr> = vec!["inspect".as_ref()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    run_spillway(&all, Duration::from_secs(30))
}

#[test]
fn records_are_marked_pending_or_confirmed_from_the_checkpoint() {
    // A noop sink confirms everything; the open segment stays on disk.
    let mut d = Daemon::start("[server]\nshards = 1\n[sink]\ntype = \"noop\"\n");
    let mut c = d.client();
    for i in 0..3 {
        c.push(Tier::Sync, format!("done-{i}").as_bytes()).unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || d
        .ctl(&["stats", "--flat"])
        .contains("shard{shard=\"0\"}.checkpoint 3")));
    d.terminate();
    let data = d.data_dir().display().to_string();
    let out = inspect(&[&data, "--records"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout
            .contains("3 records (seq 0..=2); 0 pending, 3 confirmed (checkpoint 3)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("0 confirmed tier=1 done-0"),
        "{}",
        out.stdout
    );
    let json = inspect(&[&data, "--json", "--records"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let shard = &v["shards"][0];
    assert_eq!(shard["confirmed"], 3, "{v}");
    assert_eq!(shard["record_list"][2]["state"], "confirmed", "{v}");
    assert_eq!(shard["record_list"][2]["payload"], "done-2", "{v}");
}

#[test]
fn held_records_are_pending_and_a_wrong_folder_is_named() {
    // The test default sink holds every batch: nothing is confirmed.
    let d = Daemon::start("[server]\nshards = 1\n");
    let mut c = d.client();
    c.push_batch(Tier::Sync, &[b"a".as_slice(), b"b"]).unwrap();
    let data = d.data_dir().display().to_string();
    let out = inspect(&[&data, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["shards"][0]["pending"], 2, "{v}");
    assert!(v["shards"][0]["oldest_pending_age_seconds"].is_f64(), "{v}");
    assert!(
        v["shards"][0]["segments"]["open"].as_u64().unwrap() >= 1,
        "{v}"
    );

    let not_data = d.dir().display().to_string();
    let out = inspect(&[&not_data]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("is not a spillway data folder")
            && out.stderr.contains("server.data_dir"),
        "{}",
        out.stderr
    );
}
