//! Whole-pipeline deterministic simulation of one spillway shard.
//!
//! The daemon's own parts run together on one thread: the flusher
//! ([`spillway_actors::FlusherCore`]), its sealer, the drain
//! ([`spillway_actors::DrainCore`]) with its sink host, the checkpoint, the
//! dead-letter store and recovery (`open_shard`) at every start. They run
//! over [`storage::SimStorage`], an in-memory file system that loses what
//! was not synced, and a manual [`spillway_actors::Clock`], so one seed
//! decides everything: which producer pushes what at which tier (single
//! pushes and PushBatch), when the flusher, the sealer and the drain each
//! take a turn, how far time moves, which numbered storage step fails and
//! how (EIO, ENOSPC, a torn write, a failed fdatasync, a crash), when the
//! disk is full, when the process crashes (keeping the page cache or
//! losing everything unsynced), restarts cleanly, or reloads its sink, and
//! how the sink answers (commits, retries, splits, times out, panics), and,
//! at some clean restarts, a segment header damaged while the daemon is
//! down (one byte flipped, or the whole header wiped).
//!
//! For a third of the seeds the sink has transactions: the Kafka sink's
//! exactly-once adapter ([`sink_sdk::exactly_once`]) over a modelled
//! downstream ([`sink::Downstream`]) whose writers die with a transaction
//! open, die after a commit, lose a commit's answer, are fenced and find
//! brokers down.
//!
//! Checked as the schedule runs:
//! - every Sync/Batched record acknowledged survives a power cut taken at
//!   that moment (no false ack: nothing whose fsync failed was acked);
//! - after every start, every Sync/Batched record acknowledged is on disk,
//!   delivered, or dead-lettered with a reason (Buffered ones not found
//!   are counted as lost, which that tier allows);
//! - recovery run twice ends where running it once did;
//! - a header with one byte flipped costs nothing: recovery keeps the
//!   records it keeps without the damage, under the same numbers, and
//!   counts as lost what it counts without it; after a wiped header no
//!   record comes back under another number, every acknowledged
//!   Sync/Batched record that does not come back is counted in
//!   `records_lost`, and its number is never handed out again;
//! - the WAB budget equals the bytes of the shard's segments on disk;
//! - the checkpoint, in memory and on disk, never passes an acknowledged
//!   Sync/Batched record the sink has not taken and the dead-letter store
//!   does not hold;
//! - a segment is deleted only once every acknowledged record in it is
//!   delivered or dead-lettered;
//! - no sequence number is acknowledged twice or reused;
//! - a transactional downstream never holds a record twice;
//! - at the end, with the faults healed, everything acknowledged and not
//!   lost is delivered or dead-lettered, each producer's acknowledged
//!   records reached the sink in push order (repeats set aside; a nacked
//!   record that reached the disk anyway, or a Buffered one a failed fsync
//!   dropped and a later start found again, may come late, as
//!   `docs/durability.md` allows), no delivered segment is left behind,
//!   and the budget still matches.
//!
//! A failing schedule prints its seed, the actions that led to the failure
//! and the command that replays it.

mod rng;
pub mod sink;
pub mod storage;
mod world;

pub use rng::Rng;
pub use storage::is_segment;
pub use world::{
    run_plain_schedule, run_schedule, run_small_disk_schedule, run_sync_fault_schedule, Disk,
    Failure, Report,
};
