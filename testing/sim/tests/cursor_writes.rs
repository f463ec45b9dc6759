//! A sink's cursor file written after every batch but fdatasynced only now
//! and then (`checkpoint_interval_ms`), under simulated crashes: a crash of
//! the process keeps the newest write, a power cut (which may tear or drop
//! every unsynced byte) goes back at most to the last fdatasync, and the
//! file always reads.

use std::path::{Path, PathBuf};

use spillway_sim::storage::{CrashKind, SimStorage, ROOT};
use spillway_sim::Rng;
use spillway_wab::checkpoint::read_checkpoint_file;
use spillway_wab::{CheckpointWriter, Storage, StorageFile};

const NAME: &str = "cursor-a";

fn shard_dir(s: &SimStorage) -> PathBuf {
    let dir = Path::new(ROOT).join("shard-000");
    s.create_dir_all(&dir).unwrap();
    s.sync_dir(Path::new(ROOT)).unwrap();
    dir
}

/// What a cursor file of these bytes says.
fn read_back(bytes: &[u8]) -> std::io::Result<u64> {
    let s = SimStorage::new(0);
    let dir = shard_dir(&s);
    let mut f = s.create(&dir.join(NAME))?;
    f.write_all_at(0, &[std::io::IoSlice::new(bytes)])?;
    read_checkpoint_file(&s, &dir, NAME)
}

/// Random runs of writes (synced or not) and fdatasyncs, then a crash of
/// either kind. Each seed draws its own run and its own power cut.
#[test]
fn a_power_cut_goes_back_at_most_to_the_last_fdatasync() {
    for seed in 0..1000u64 {
        let s = SimStorage::new(seed);
        let dir = shard_dir(&s);
        let mut rng = Rng::new(seed ^ 0xc0_5e);
        let mut w = CheckpointWriter::new(&dir, NAME);
        let mut value = 10u64;
        w.write(&s, value).unwrap();
        let mut durable_value = value;
        for _ in 0..rng.range(1, 8) {
            match rng.below(4) {
                0 => {
                    value += 1;
                    w.write(&s, value).unwrap();
                    durable_value = value;
                }
                3 => {
                    w.sync(&s).unwrap();
                    durable_value = value;
                }
                _ => {
                    value += 1;
                    w.write_unsynced(&s, value).unwrap();
                }
            }
            assert_eq!(w.is_synced(), durable_value == value, "seed {seed}");
        }
        assert_eq!(read_checkpoint_file(&s, &dir, NAME).unwrap(), value);
        // Every way a power cut can leave the file: the bytes written up to
        // some point, the durable ones after it (each slot's 40 bytes that
        // count, cut anywhere in them, and all or nothing).
        let path = dir.join(NAME);
        let live = s.read_file(&path).unwrap();
        let durable = s.durable_fork().read_file(&path).unwrap();
        let len = live.len().max(durable.len());
        let cuts = (0..=64)
            .chain(4096..=4096 + 64)
            .chain([len])
            .filter(|&c| c <= len);
        for cut in cuts {
            let mixed: Vec<u8> = (0..len)
                .map(|i| {
                    let from = if i < cut { &live } else { &durable };
                    from.get(i).copied().unwrap_or(0)
                })
                .collect();
            let read = read_back(&mixed).unwrap_or_else(|e| {
                panic!("seed {seed}: cut at byte {cut}, the cursor file does not read: {e}")
            });
            assert!(
                (durable_value..=value).contains(&read),
                "seed {seed}: cut at byte {cut}, the cursor says {read}, outside \
                 {durable_value}..={value} (last fdatasync ..= last write)"
            );
        }
        let kind = if rng.chance(1, 2) {
            CrashKind::Process
        } else {
            CrashKind::Power
        };
        s.crash();
        s.restart(kind);
        let read = read_checkpoint_file(&s, &dir, NAME).unwrap();
        match kind {
            CrashKind::Process => assert_eq!(read, value, "seed {seed}: a process crash"),
            CrashKind::Power => assert!((durable_value..=value).contains(&read), "seed {seed}"),
        }
        // A new writer (the next start) goes on from there.
        let mut next = CheckpointWriter::new(&dir, NAME);
        next.write_unsynced(&s, read + 1).unwrap();
        next.write(&s, read + 2).unwrap();
        assert_eq!(read_checkpoint_file(&s, &dir, NAME).unwrap(), read + 2);
    }
}
