//! The simulation's sweep: `SPILLWAY_SIM_SCHEDULES` schedules (2,000 by
//! default), each from its own seed; `SPILLWAY_SIM_SEED` replays one; the
//! pinned seeds are schedules that once found a bug.

use std::sync::Once;
use std::time::Instant;

use spillway_sim::{
    run_plain_schedule, run_schedule, run_small_disk_schedule, run_sync_fault_schedule, Report, Rng,
};

/// Seeds that found bugs, each with what it found (fixed since).
const PINNED: &[(u64, &str)] = &[
    (
        0xd0f1_527c_73b2_efbc,
        "a segment wholly delivered before a restart was never deleted: the follower started at the segment holding the checkpoint",
    ),
    (
        0x6532_46a2_ab38_663a,
        "the dead-letter store wrote again into a segment whose fdatasync had failed: letters after the hole were unreadable and the checkpoint passed them",
    ),
    (
        0x51a3_65ac_44e6_f878,
        "Buffered records acknowledged in a segment abandoned after a failed write waited for a Sync push to be delivered",
    ),
    (
        0x6c5f_4126_1570_9f11,
        "a checkpoint read from the page cache at start was trusted to delete segments; a power cut brought the older slot back and sequence numbers were reused",
    ),
    (
        0xa4c2_f5af_3f58_3826,
        "a group whose fdatasync failed was charged to the WAB budget but never released: the budget leaked",
    ),
    (
        0xc029_0f8b_0345_e502,
        "deleting a segment abandoned before its first group was acknowledged released its header's bytes, never charged",
    ),
    (
        0x30d5_28b6_7b13_733e,
        "false ack: a spare whose rename a process crash left undurable was reused; its records were fdatasynced but a power cut took the name",
    ),
    (
        0x58ad_2240_936b_4efa,
        "a failed checkpoint write made the drain offer its batch again, and the confirmed point moved back; a segment whose pages a failed fsync took released less than it was charged",
    ),
    (
        0x9ac7_a6d7_498f_d5af,
        "deleting an abandoned segment released what could still be read, not what it was charged: the budget leaked",
    ),
    (
        0x9ef1_284c_bb05_93ab,
        "issue 17: the records of a wiped header were counted at a start on a full disk, but the numbers presumed for them lived only in a gap file it had no space for; the next start handed them out again",
    ),
    (
        0x29f5_3040_d510_9f3d,
        "issue 17: a start that crashed right after moving a segment whose header nothing proves to quarantine left it without presumed numbers; the next start did not count its records",
    ),
    (
        0x92d6_a346_110c_cac9,
        "Buffered records acknowledged in a segment abandoned before any fsync covered them were delivered from the page cache; a power cut took them and their sequence numbers went to other records",
    ),
    (
        0x988c_ed4d_9e13_3daa,
        "a drain held at the checker's gate (segments a start took at their footer's word) took itself for caught up and reset its count of confirmed bytes: spillway_pending_bytes read 0 with records unconfirmed",
    ),
    (
        0x5dd7_a9c9_c0ec_b183,
        "issue 39: the mirror confirmed past a failed group's nacked numbers; at the next start reading its cursor failed (EIO) and was skipped, so recovery numbered new records from the data's end, below that cursor: acknowledged seq 80 never reached the mirror",
    ),
    (
        0x67cc_e686_d6d7_86c2,
        "issue 39: the same at another action (acknowledged seq 22 skipped by the mirror's cursor at 29)",
    ),
    (
        0xbb8f_9d6b_7deb_ad87,
        "issue 39, found while fixing it: a fresh segment abandoned before its first fdatasync had a header in the page cache past the numbers it skipped; the follower finished it at that header's first_seq and the cursors confirmed a number nothing durable backed",
    ),
    (
        0xe773_8e35_4adc_edb2,
        "issue 39's 300,000-schedule sweep: a failed fsync took an abandoned segment's header (Buffered records only); retention deleted it as headerless, then the readers that had opened it finished it and retention released its bytes again: the WAB budget fell below what the disk held",
    ),
];

/// Seeds that found bugs in what the plain replay leaves out (replayed as
/// swept: a transactional sink, a mirror a reload adds).
const PINNED_TRANSACTIONAL: &[(u64, &str)] = &[(
    0x13dc_84ca_6cae_72a3,
    "issue 43's exactly-once adapter: a record refused for good was re-offered in a longer batch (its dead letter not yet written, the disk full); the new position dropped the earlier refusal, so after a restart the position called the refused record written: the segment holding it was deleted with the record neither delivered nor dead-lettered",
), (
    0xadda_249c_7b37_6c02,
    "issue 44's start = \"oldest\": a failed write of the floor had reached the disk (the floor there above the one in memory); the sink added at the oldest record compared with the one in memory, did not lower the floor on disk, and a restart would have started it there, past records it never got",
), (
    0x1c7b_9597_ed0c_2fb9,
    "issue 44's start = \"oldest\": a join that failed (an I/O error) after making the sink's cursor file left it behind; the retry took that file for a place the sink had delivered from and started it at the floor, past records the shard still held",
), (
    0x52bd_5861_6575_0785,
    "issue 44's 200,000-schedule sweep, the oracle's bug: the first sink's retention unlinked a segment, a power cut brought it back, and the mirror joined at the oldest record owing its records; the removal, checked only after the join, was laid to the mirror. Removals are now checked against what was owed before the join",
)];

/// Small-disk seeds that found bugs (replayed on the one-segment disk).
const PINNED_SMALL_DISK: &[(u64, &str)] = &[(
    0x1dce_75c0_53fb_5cb9,
    "issue 39: a cursor confirmed past a failed group's nacked numbers before anything durable backed them; after a crash the checkpoint was ahead of the data, moved aside as evidence, and that file took the room the next segment needed: pushes refused for good",
), (
    0xdbb0_a0dc_4122_3c57,
    "the 100,000-schedule small-disk sweep of issue 39: the oracle's recovery of an undamaged copy (before a header wipe) needed room for a footer the disk did not have, and the schedule stopped; now that damage is skipped and the end checks say whether the daemon comes back",
), (
    0x63b5_f0bb_6357_30ef,
    "the same sweep: a preallocation failed and a second fault kept its cleanup from removing the file; that leftover .open was the one segment's room, and pushes were refused until a restart",
), (
    0x7f66_a9d5_8542_d4d7,
    "issue 39, after its root fix: a failed fsync, then a fresh segment numbered past the skipped number (the header said so); its header wiped while the daemon was down, recovery presumed its numbers right after the data and handed its real number (29) out again; unnumbered records are now presumed past the clock's floor",
), (
    0xdc14_ab36_bcc8_9bbd,
    "issue 39's small-disk sweep, after that fix: numbering floored past the clock, then a fresh segment's only group failed its fdatasync; the cursor, below the floor with no durable record to pass, never reached the abandoned segment's durable_seq, so retention kept that headerless file in the disk's one segment of room: pushes refused for good",
), (
    0x3c3a_7ab3_49e2_07a2,
    "issue 42's poison isolation: with one batch at a time, a lone record the flaky sink had panicked on twice let the next batch go first as its witness; the record then went through after all, after a later record of its producer (push order broken); one at a time now asks the sink's health check instead",
)];

fn quiet_sink_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if msg != spillway_sim::sink::SIM_PANIC {
                default(info);
            }
        }));
    });
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// One way to run a schedule from its seed.
type RunSchedule = fn(u64) -> Result<Report, spillway_sim::Failure>;

/// Run one schedule; a panic inside it (an assertion of the product's,
/// or the simulation's) is reported with the seed that replays it.
fn run_caught(run: RunSchedule, seed: u64) -> Result<Report, spillway_sim::Failure> {
    match std::panic::catch_unwind(|| run(seed)) {
        Ok(result) => result,
        Err(_) => panic!(
            "schedule {seed:#x} panicked (message above); replay: SPILLWAY_SIM_SEED={seed:#x} cargo test --release -p spillway-sim --test schedules replay -- --nocapture"
        ),
    }
}

#[derive(Default)]
struct Totals {
    schedules: u64,
    r: Report,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.schedules += 1;
        let t = &mut self.r;
        t.actions += r.actions;
        t.pushes += r.pushes;
        for i in 0..3 {
            t.acked[i] += r.acked[i];
        }
        t.nacked += r.nacked;
        t.process_crashes += r.process_crashes;
        t.power_cuts += r.power_cuts;
        t.clean_restarts += r.clean_restarts;
        t.failed_starts += r.failed_starts;
        t.faults_fired += r.faults_fired;
        t.reloads += r.reloads;
        t.committed += r.committed;
        t.dead_lettered += r.dead_lettered;
        t.buffered_lost += r.buffered_lost;
        t.duplicates += r.duplicates;
        t.ghost_checks += r.ghost_checks;
        t.storage_steps += r.storage_steps;
        t.header_flips += r.header_flips;
        t.header_wipes += r.header_wipes;
        t.header_repairs += r.header_repairs;
        t.damage_lost += r.damage_lost;
        t.mirror_overlapped += r.mirror_overlapped;
        t.syncs_failed_near_delivery += r.syncs_failed_near_delivery;
        t.recycled += r.recycled;
        t.free_removed += r.free_removed;
        t.transactional += r.transactional;
        t.txn_commits += r.txn_commits;
        t.txn_answers_lost += r.txn_answers_lost;
        t.txn_abandoned += r.txn_abandoned;
        t.late_joins += r.late_joins;
        t.late_backfilled += r.late_backfilled;
    }
}

#[test]
fn schedules() {
    quiet_sink_panics();
    let n = env_u64("SPILLWAY_SIM_SCHEDULES").unwrap_or(2_000);
    let base = env_u64("SPILLWAY_SIM_BASE").unwrap_or(0x5eed_0000_0000_0001);
    let mut seeds = Rng::new(base);
    let started = Instant::now();
    let mut totals = Totals::default();
    for i in 0..n {
        let seed = seeds.next_u64();
        match run_caught(run_schedule, seed) {
            Ok(r) => totals.add(&r),
            Err(f) => panic!("schedule {i} of {n}:\n{f}"),
        }
        if (i + 1) % 1_000 == 0 {
            eprintln!("{} schedules, {:.0?}", i + 1, started.elapsed());
        }
    }
    let t = &totals.r;
    eprintln!(
        "sim: {} schedules in {:.1?} ({} actions, {} storage steps): {} pushes, acked sync/batched/buffered {}/{}/{}, {} nacked; {} faults fired, {} process crashes, {} power cuts, {} clean restarts, {} failed starts, {} reloads; {} no-false-ack checks; {} delivered, {} dead-lettered, {} buffered lost, {} repeats offered; segment headers damaged at restarts: {} flipped, {} wiped, {} repaired, {} acknowledged records lost and counted; {} steps with several mirror batches out, {} failed fdatasyncs armed with batches out; {} segments written over a delivered one, {} set-aside segments removed at a start; transactional sink in {} schedules: {} commits, {} with the answer lost, {} left open by a dying writer; {} mirrors added by reload at the oldest record, owing {} records the first sink had confirmed",
        totals.schedules,
        started.elapsed(),
        t.actions,
        t.storage_steps,
        t.pushes,
        t.acked[0],
        t.acked[1],
        t.acked[2],
        t.nacked,
        t.faults_fired,
        t.process_crashes,
        t.power_cuts,
        t.clean_restarts,
        t.failed_starts,
        t.reloads,
        t.ghost_checks,
        t.committed,
        t.dead_lettered,
        t.buffered_lost,
        t.duplicates,
        t.header_flips,
        t.header_wipes,
        t.header_repairs,
        t.damage_lost,
        t.mirror_overlapped,
        t.syncs_failed_near_delivery,
        t.recycled,
        t.free_removed,
        t.transactional,
        t.txn_commits,
        t.txn_answers_lost,
        t.txn_abandoned,
        t.late_joins,
        t.late_backfilled,
    );
    // The sweep must have exercised what it claims to.
    assert!(
        t.late_joins > 0 && t.late_backfilled > 0,
        "sinks added by reload at the oldest record, owing records the other sink had confirmed"
    );
    assert!(t.acked.iter().all(|&a| a > 0), "every tier acknowledged");
    assert!(
        t.transactional > 0 && t.txn_answers_lost > 0 && t.txn_abandoned > 0,
        "the transactional sink exercised: lost commit answers and abandoned transactions"
    );
    assert!(t.power_cuts > 0 && t.process_crashes > 0 && t.faults_fired > 0);
    assert!(
        t.header_flips > 0 && t.header_wipes > 0 && t.header_repairs > 0 && t.damage_lost > 0,
        "header damage exercised: flips, wipes, repairs and counted losses"
    );
    assert!(
        t.mirror_overlapped > 0,
        "the mirror had several batches out, answered out of order"
    );

    assert!(
        t.recycled > 0 && t.free_removed > 0,
        "delivered segments written over as new ones, and set-aside ones found by a start"
    );
}

/// Schedules on a disk whose shard folder has room for one segment and a
/// half (`SPILLWAY_SIM_SMALL_DISK_SCHEDULES`, 500 by default, from
/// `SPILLWAY_SIM_SMALL_DISK_BASE`): every
/// rotation waits for the full segment to be delivered and deleted, and
/// once everything is confirmed the shard must take pushes again without a
/// restart.
#[test]
fn small_disk_schedules() {
    quiet_sink_panics();
    let n = env_u64("SPILLWAY_SIM_SMALL_DISK_SCHEDULES").unwrap_or(500);
    let base = env_u64("SPILLWAY_SIM_SMALL_DISK_BASE").unwrap_or(0x5eed_0000_0000_0002);
    let mut seeds = Rng::new(base);
    let started = Instant::now();
    let mut totals = Totals::default();
    for i in 0..n {
        match run_caught(run_small_disk_schedule, seeds.next_u64()) {
            Ok(r) => totals.add(&r),
            Err(f) => panic!("small-disk schedule {i} of {n}:\n{f}"),
        }
        if (i + 1) % 5_000 == 0 {
            eprintln!("{} small-disk schedules, {:.0?}", i + 1, started.elapsed());
        }
    }
    let t = &totals.r;
    eprintln!(
        "sim, one-segment disk: {} schedules in {:.1?}: {} pushes, acked sync/batched/buffered {}/{}/{}, {} nacked, {} delivered",
        totals.schedules,
        started.elapsed(),
        t.pushes,
        t.acked[0],
        t.acked[1],
        t.acked[2],
        t.nacked,
        t.committed,
    );
    assert!(t.acked.iter().all(|&a| a > 0), "every tier acknowledged");
}

/// Schedules with failed fdatasyncs weighed near delivery
/// (`SPILLWAY_SIM_SYNC_FAULT_SCHEDULES`, 500 by default, from
/// `SPILLWAY_SIM_SYNC_FAULT_BASE`): see
/// [`spillway_sim::run_sync_fault_schedule`].
#[test]
fn sync_fault_schedules() {
    quiet_sink_panics();
    let n = env_u64("SPILLWAY_SIM_SYNC_FAULT_SCHEDULES").unwrap_or(500);
    let base = env_u64("SPILLWAY_SIM_SYNC_FAULT_BASE").unwrap_or(0x5eed_0000_0000_0003);
    let mut seeds = Rng::new(base);
    let started = Instant::now();
    let mut totals = Totals::default();
    for i in 0..n {
        match run_caught(run_sync_fault_schedule, seeds.next_u64()) {
            Ok(r) => totals.add(&r),
            Err(f) => panic!("sync-fault schedule {i} of {n}:\n{f}"),
        }
        if (i + 1) % 10_000 == 0 {
            eprintln!("{} schedules, {:.0?}", i + 1, started.elapsed());
        }
    }
    let t = &totals.r;
    eprintln!(
        "sim, failed fsyncs near delivery: {} schedules in {:.1?}: {} failed fdatasyncs armed with batches out, {} faults fired, {} power cuts, {} process crashes, {} delivered, {} steps with several mirror batches out",
        totals.schedules,
        started.elapsed(),
        t.syncs_failed_near_delivery,
        t.faults_fired,
        t.power_cuts,
        t.process_crashes,
        t.committed,
        t.mirror_overlapped,
    );
    assert!(
        t.syncs_failed_near_delivery > 0,
        "failed fdatasyncs armed while the mirror had batches out"
    );
}

/// `SPILLWAY_SIM_SEED=<seed>` replays one schedule (with its report;
/// `SPILLWAY_SIM_SMALL_DISK=1` on the one-segment disk); without it, the
/// pinned seeds run, each on its disk.
#[test]
fn replay() {
    quiet_sink_panics();
    let small = std::env::var_os("SPILLWAY_SIM_SMALL_DISK").is_some();
    let run = if small {
        run_small_disk_schedule
    } else if std::env::var_os("SPILLWAY_SIM_SYNC_FAULTS").is_some() {
        run_sync_fault_schedule
    } else {
        run_schedule
    };
    let seeds: Vec<(u64, RunSchedule)> = match env_u64("SPILLWAY_SIM_SEED") {
        Some(s) => vec![(s, run)],
        None => PINNED
            .iter()
            .map(|(s, _)| (*s, run_plain_schedule as RunSchedule))
            .chain(
                PINNED_TRANSACTIONAL
                    .iter()
                    .map(|(s, _)| (*s, run_schedule as RunSchedule)),
            )
            .chain(
                PINNED_SMALL_DISK
                    .iter()
                    .map(|(s, _)| (*s, run_small_disk_schedule as RunSchedule)),
            )
            .collect(),
    };
    for (seed, run) in seeds {
        match run(seed) {
            Ok(r) => eprintln!("schedule {seed:#x}: {r:?}"),
            Err(f) => panic!("{f}"),
        }
    }
}
