//! The configured sinks as the daemon runs them: each sink's slot (its
//! current factory and delivery keys, swapped by a reload), its dead-letter
//! and requeue stores, its paused mark and, per shard, the drain thread
//! that runs its cursor.
//!
//! On disk a sink has `sinks/<name>/` in the data folder (its stores, see
//! [`spillway_wab::layout`]) and a cursor file in every shard folder. A data folder written
//! by the single-sink release has `dead-letter/` at its top: it is the
//! `default` sink's, and is moved to `sinks/default/dead-letter/` the
//! first time that sink starts.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use sink_sdk::delivery::StartAt;
use spillway_actors::{
    Cursor, CursorConfig, CursorControl, Drain, DrainStats, Requeue, Retention, ShardQueue,
    SinkSlot,
};
use spillway_wab::deadletter::DeadLetterStore;
use spillway_wab::format::now_unix_us;
use spillway_wab::layout::{
    learned_file, shard_dir, sink_dir, DEAD_LETTER_DIR, PAUSED_FILE, REQUEUE_DIR, SINKS_DIR,
    SKIPPED_FILE,
};
use spillway_wab::{create_dir_durable, FsStorage, Storage};

use crate::config::DEFAULT_SINK;

/// A sink's dead-letter store, shared by its drains and the admin.
pub type DeadLetters = Arc<Mutex<DeadLetterStore<FsStorage>>>;

/// Every sink's dead-letter store by name: the configured ones and those
/// of sinks removed since the start (their dead letters stay readable).
pub type DeadLetterStores = Arc<Mutex<BTreeMap<String, DeadLetters>>>;

/// A sink's requeue store: dead letters `ctl dead-letter requeue` sent
/// back to that sink alone (with several sinks).
pub type Requeued = Arc<Requeue<FsStorage>>;

/// Every sink's requeue store, by name (configured sinks only).
pub type RequeueStores = Arc<Mutex<BTreeMap<String, Requeued>>>;

/// For each shard, one past the highest sequence number any sink's
/// dead-letter or requeue store holds a record under. Recovery numbers no
/// record below it and counts the ones past the segments as lost: a store
/// holds only records a reader got, durable once (issue 39: a tail cut from
/// outside let new records take such numbers, and a destination that
/// dedupes by identity would drop them). Reads every store once.
pub fn seen_in_stores(
    dead_letters: &DeadLetterStores,
    requeue: &RequeueStores,
) -> std::io::Result<BTreeMap<u32, u64>> {
    let mut seen: BTreeMap<u32, u64> = BTreeMap::new();
    let mut note = |letters: Vec<spillway_wab::deadletter::DeadLetter>| {
        for l in letters {
            let at = seen.entry(l.shard).or_default();
            *at = (*at).max(l.seq + 1);
        }
    };
    let stores: Vec<DeadLetters> = dead_letters.lock().unwrap().values().cloned().collect();
    for store in stores {
        note(store.lock().unwrap().list()?);
    }
    let requeued: Vec<Requeued> = requeue.lock().unwrap().values().cloned().collect();
    for r in requeued {
        note(r.store.lock().unwrap().list()?);
    }
    Ok(seen)
}

/// Open sink `name`'s requeue store (`sinks/<name>/requeue/`).
pub fn open_requeue(data_dir: &Path, name: &str) -> Result<Requeued, String> {
    let dir = sink_dir(data_dir, name).join(REQUEUE_DIR);
    let store = DeadLetterStore::open(FsStorage, &dir)
        .map_err(|e| format!("opening the requeue store {}: {e}", dir.display()))?;
    Ok(Arc::new(Requeue::new(store)))
}

/// One configured sink as the daemon runs it.
pub struct SinkRun {
    pub slot: Arc<SinkSlot>,
    pub dead_letters: DeadLetters,
    pub requeue: Requeued,
    /// Where it starts in a shard where it has no cursor yet.
    pub start: StartAt,
}

/// Open sink `name`'s dead-letter store (`sinks/<name>/dead-letter/`),
/// creating its folders durably. For `default`, a `dead-letter/` folder
/// of the single-sink layout is moved there first (one rename, the data
/// folder fsynced).
pub fn open_dead_letters(data_dir: &Path, name: &str) -> Result<DeadLetters, String> {
    let storage = FsStorage;
    let sinks = data_dir.join(SINKS_DIR);
    let own = sink_dir(data_dir, name);
    let at = |e: std::io::Error, p: &Path| format!("{}: {e}", p.display());
    for dir in [&sinks, &own] {
        create_dir_durable(&storage, dir).map_err(|e| at(e, dir))?;
    }
    let store_dir = own.join(DEAD_LETTER_DIR);
    let legacy = data_dir.join(DEAD_LETTER_DIR);
    if name == DEFAULT_SINK && legacy.is_dir() && !store_dir.exists() {
        storage
            .rename(&legacy, &store_dir)
            .and_then(|()| storage.sync_dir(data_dir))
            .and_then(|()| storage.sync_dir(&own))
            .map_err(|e| at(e, &legacy))?;
        tracing::info!(from = %legacy.display(), to = %store_dir.display(), "moved the single-sink dead-letter store to the default sink's folder");
    }
    let store = DeadLetterStore::open(storage, &store_dir)
        .map_err(|e| format!("opening the dead-letter store {}: {e}", store_dir.display()))?;
    Ok(Arc::new(Mutex::new(store)))
}

/// The sinks that have a folder in `data_dir` (configured or not).
pub fn sinks_on_disk(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data_dir.join(SINKS_DIR)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Start sink `name`'s drain of one shard: its cursor joins the shard's
/// retention (which says where it starts) and a thread runs it.
pub fn start_drain(
    data_dir: &Path,
    queue: Arc<ShardQueue>,
    retention: Arc<Mutex<Retention<FsStorage>>>,
    name: &str,
    run: &SinkRun,
    stats: Arc<DrainStats>,
    control: Arc<CursorControl>,
) -> std::io::Result<Addr<Drain>> {
    control.set_paused(paused_on_disk(data_dir, name));
    let cfg = CursorConfig {
        sink: name.to_string(),
        shard: queue.shard,
        dir: shard_dir(data_dir, queue.shard),
        skipped_file: sink_dir(data_dir, name).join(SKIPPED_FILE),
        learned_file: Some(learned_file(&sink_dir(data_dir, name), queue.shard)),
    };
    let cursor = Cursor::new(
        FsStorage,
        cfg,
        run.start,
        queue,
        run.slot.clone(),
        retention,
        run.dead_letters.clone(),
        stats,
        spillway_actors::Clock::system(),
        now_unix_us() | 1,
    )?;
    let cursor = cursor
        .with_requeue(run.requeue.clone())
        .with_control(control);
    Ok(Drain::spawn(cursor)?.start())
}

/// Whether sink `name` was left paused (`ctl sink pause`).
pub fn paused_on_disk(data_dir: &Path, name: &str) -> bool {
    sink_dir(data_dir, name).join(PAUSED_FILE).exists()
}

/// Remember (or forget) that sink `name` is paused, durably.
pub fn set_paused_on_disk(data_dir: &Path, name: &str, paused: bool) -> Result<(), String> {
    let storage = FsStorage;
    let dir = sink_dir(data_dir, name);
    let path = dir.join(PAUSED_FILE);
    let done = if paused {
        match storage.create(&path) {
            Ok(_) => storage.sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    } else {
        match storage.remove(&path) {
            Ok(()) => storage.sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    };
    done.map_err(|e| format!("{}: {e}", path.display()))
}
