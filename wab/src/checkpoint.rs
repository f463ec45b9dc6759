//! The per-shard delivery checkpoint: every record with a sequence number
//! below `confirmed_next_seq` has been committed by the sink or moved to the
//! dead-letter store.
//!
//! ```text
//! checkpoint := slot[0] slot[1]                       (2 × 4096 bytes)
//! slot       := magic "SPWCKPT2" | generation u64 | confirmed_next_seq u64
//!               | updated_unix_us u64 | reserved u32 | crc u32 | zeros[4056]
//!               crc = CRC-32 of bytes 0..36 of the slot
//! ```
//! The file is made once (written, fsynced, renamed into place, folder
//! fsynced); after that an update overwrites the slot that does **not**
//! hold the newest valid generation (pwrite + fdatasync) and never needs a
//! new block, so a full disk cannot stop the drain from confirming (and
//! then deleting segments to free space). A write torn by a crash damages
//! only the slot being written; the other still holds the previous
//! checkpoint. A reader takes the valid slot with the highest generation.
//!
//! The slots are a page apart so that one torn write (of at most a page, on
//! a file system with 4 KiB blocks) cannot reach the other slot.
//!
//! The old 32-byte format (`"SPWCKPT1" | confirmed_next_seq | updated_unix_us
//! | reserved u32 | crc u32`) is still read (as slot 0, generation 0); the
//! first write after reading it rewrites the file in the new format.
//!
//! [`read_checkpoint`] never changes anything (for `spillway inspect`) and
//! fails on a checkpoint with no valid slot. [`load_checkpoint`] is what a
//! starting shard uses: it moves such a file aside, says so loudly and
//! returns 0 (redeliver from the oldest record: at-least-once) rather than
//! refusing to start.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::format::{now_unix_us, u32_at, u64_at, SEQ_MAX};
use crate::storage::{is_no_space, read_full_at, Storage, StorageFile};

const MAGIC: [u8; 8] = *b"SPWCKPT2";
const LEGACY_MAGIC: [u8; 8] = *b"SPWCKPT1";
const LEGACY_LEN: usize = 32;
/// One slot per 4 KiB page.
pub const SLOT_BYTES: usize = 4096;
/// Bytes of a slot that carry data (the rest are zeros).
const SLOT_USED: usize = 40;
pub const CHECKPOINT_BYTES: usize = 2 * SLOT_BYTES;
pub use crate::layout::{
    checkpoint_path, cursor_file, AHEAD_PREFIX, CHECKPOINT_FILE, CORRUPT_PREFIX, CURSOR_PREFIX,
};

/// The sinks that have a cursor file in `shard_dir`, sorted.
pub fn cursor_sinks<S: Storage>(storage: &S, shard_dir: &Path) -> io::Result<Vec<String>> {
    let mut sinks: Vec<String> = storage
        .list(shard_dir)?
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.strip_prefix(CURSOR_PREFIX))
        .filter(|s| !s.is_empty() && !s.contains('.'))
        .map(str::to_string)
        .collect();
    sinks.sort();
    Ok(sinks)
}

/// Remove sink `sink`'s cursor file from `shard_dir` (the sink was removed
/// from the config), durably. Missing already is fine.
pub fn remove_cursor<S: Storage>(storage: &S, shard_dir: &Path, sink: &str) -> io::Result<()> {
    match storage.remove(&shard_dir.join(cursor_file(sink))) {
        Ok(()) => storage.sync_dir(shard_dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A decoded slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub generation: u64,
    pub confirmed_next_seq: u64,
    pub updated_unix_us: u64,
}

/// What a checkpoint file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The two-slot format: the newest valid slot (index, contents), if any.
    Slots(Option<(usize, Slot)>),
    /// The old 32-byte format.
    Legacy(Slot),
    /// Neither format, or no valid slot: why.
    Corrupt(String),
}

impl Parsed {
    /// The checkpoint to trust, if any.
    pub fn newest(&self) -> Option<Slot> {
        match self {
            Parsed::Slots(Some((_, s))) | Parsed::Legacy(s) => Some(*s),
            _ => None,
        }
    }
}

fn encode_slot(s: &Slot) -> [u8; SLOT_BYTES] {
    let mut b = [0u8; SLOT_BYTES];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..16].copy_from_slice(&s.generation.to_le_bytes());
    b[16..24].copy_from_slice(&s.confirmed_next_seq.to_le_bytes());
    b[24..32].copy_from_slice(&s.updated_unix_us.to_le_bytes());
    let crc = crc32fast::hash(&b[0..36]);
    b[36..40].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_slot(b: &[u8]) -> Result<Slot, String> {
    if b[0..8] != MAGIC {
        return Err("bad magic".into());
    }
    let stored = u32_at(b, 36);
    let computed = crc32fast::hash(&b[0..36]);
    if stored != computed {
        return Err(format!(
            "CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    let confirmed_next_seq = u64_at(b, 16);
    if confirmed_next_seq > SEQ_MAX {
        // Not a number spillway writes; trusted, it would floor next_seq
        // past the last one a segment can hold.
        return Err(format!(
            "confirmed_next_seq {confirmed_next_seq} is past {SEQ_MAX}, the last sequence number spillway writes"
        ));
    }
    Ok(Slot {
        generation: u64_at(b, 8),
        confirmed_next_seq,
        updated_unix_us: u64_at(b, 24),
    })
}

/// Decode a whole checkpoint file.
pub fn parse(b: &[u8]) -> Parsed {
    if b.len() == LEGACY_LEN && b[0..8] == LEGACY_MAGIC {
        let stored = u32_at(b, 28);
        let computed = crc32fast::hash(&b[0..28]);
        if stored != computed {
            return Parsed::Corrupt(format!(
                "old-format checkpoint: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let confirmed_next_seq = u64_at(b, 8);
        if confirmed_next_seq > SEQ_MAX {
            return Parsed::Corrupt(format!(
                "old-format checkpoint: confirmed_next_seq {confirmed_next_seq} is past {SEQ_MAX}"
            ));
        }
        return Parsed::Legacy(Slot {
            generation: 0,
            confirmed_next_seq,
            updated_unix_us: u64_at(b, 16),
        });
    }
    if b.len() != CHECKPOINT_BYTES {
        return Parsed::Corrupt(format!(
            "{} bytes, expected {CHECKPOINT_BYTES} (or {LEGACY_LEN} for the old format)",
            b.len()
        ));
    }
    let mut why = Vec::new();
    let mut best: Option<(usize, Slot)> = None;
    for i in 0..2 {
        match decode_slot(&b[i * SLOT_BYTES..i * SLOT_BYTES + SLOT_USED]) {
            Ok(s) if best.is_none_or(|(_, b)| s.generation > b.generation) => best = Some((i, s)),
            Ok(_) => {}
            Err(e) => why.push(format!("slot {i}: {e}")),
        }
    }
    match best {
        Some(b) => Parsed::Slots(Some(b)),
        None => Parsed::Corrupt(format!("no valid slot ({})", why.join("; "))),
    }
}

/// Read the whole file (at most one byte past the expected size, so a
/// wrong length shows).
fn read_file<F: StorageFile>(file: &F) -> io::Result<Vec<u8>> {
    let mut b = vec![0u8; CHECKPOINT_BYTES + 1];
    let n = read_full_at(file, 0, &mut b)?;
    b.truncate(n);
    Ok(b)
}

/// Read the checkpoint of a shard; `Ok(0)` when there is none yet. Changes
/// nothing; a checkpoint with no valid slot is an `InvalidData` error
/// naming the file (a starting shard uses [`load_checkpoint`] instead).
pub fn read_checkpoint<S: Storage>(storage: &S, shard_dir: &Path) -> io::Result<u64> {
    read_checkpoint_file(storage, shard_dir, CHECKPOINT_FILE)
}

/// [`read_checkpoint`] of the file `file` in `shard_dir` (a sink's cursor:
/// [`cursor_file`]).
pub fn read_checkpoint_file<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    name: &str,
) -> io::Result<u64> {
    let path = shard_dir.join(name);
    let file = match storage.open_read(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    match parse(&read_file(&file)?) {
        Parsed::Corrupt(why) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )),
        p => Ok(p.newest().map_or(0, |s| s.confirmed_next_seq)),
    }
}

/// What [`load_checkpoint`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckpointLoad {
    /// Deliver from here: the checkpoint, or 0 when there is none or it
    /// could not be read.
    pub confirmed: u64,
    /// The checkpoint could not be read (no valid slot); count it.
    pub corrupt: bool,
    /// Why, when `corrupt`.
    pub detail: Option<String>,
    /// Where the unreadable file was moved to.
    pub moved_aside: Option<PathBuf>,
    /// Generation of the slot read (0: old format or none).
    pub generation: u64,
    /// A valid checkpoint was read (false: none yet, or moved aside).
    pub found: bool,
}

/// Load a starting shard's checkpoint. A file with no valid slot does not
/// stop the shard: it is renamed to `checkpoint.corrupt-<unix_us>` (folder
/// fsynced; a rename needs no free space), a loud error names it and why,
/// and `confirmed` is 0, so delivery restarts at the oldest record kept
/// (at-least-once). The caller must keep new sequence numbers from
/// colliding with delivered ones (see `open_shard`).
pub fn load_checkpoint<S: Storage>(storage: &S, shard_dir: &Path) -> io::Result<CheckpointLoad> {
    load_checkpoint_file(storage, shard_dir, CHECKPOINT_FILE)
}

/// [`load_checkpoint`] of the file `file` in `shard_dir` (a sink's cursor:
/// [`cursor_file`]); an unreadable one is moved to `<file>.corrupt-<unix_us>`.
pub fn load_checkpoint_file<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    name: &str,
) -> io::Result<CheckpointLoad> {
    let path = shard_dir.join(name);
    let file = match storage.open_read(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(CheckpointLoad::default()),
        Err(e) => return Err(e),
    };
    let mut file = file;
    let parsed = parse(&read_file(&file)?);
    if parsed.newest().is_some() {
        // What was read may be only in the page cache: the last run may
        // have died between a slot's write and its fdatasync. Trusted as
        // it is, the drain would delete segments behind it, and a power
        // cut then would bring the older slot back with those segments
        // gone, so new records would get sequence numbers already
        // delivered. One fdatasync at start makes what is trusted durable.
        file.sync_data()?;
    }
    drop(file);
    let why = match parsed {
        Parsed::Corrupt(why) => why,
        p => {
            let s = p.newest().unwrap_or(Slot {
                generation: 0,
                confirmed_next_seq: 0,
                updated_unix_us: 0,
            });
            return Ok(CheckpointLoad {
                confirmed: s.confirmed_next_seq,
                generation: s.generation,
                found: true,
                ..Default::default()
            });
        }
    };
    let aside = move_file_aside(storage, shard_dir, name, &format!("{name}.corrupt-"), "")?;
    tracing::error!(
        path = %path.display(),
        moved_to = %aside.display(),
        reason = %why,
        "delivery checkpoint cannot be read; moved it aside and will redeliver from the oldest record kept (at-least-once)"
    );
    Ok(CheckpointLoad {
        confirmed: 0,
        corrupt: true,
        detail: Some(why),
        moved_aside: Some(aside),
        generation: 0,
        found: false,
    })
}

/// Where an "ahead" file's name says the value it held: `.seq-<value>`.
const AHEAD_SEQ: &str = ".seq-";

/// Move `file` (the shard's checkpoint or a sink's cursor), which held
/// `value`, a number past everything the data shows, aside as evidence
/// that takes no room: renamed to `checkpoint.ahead-<unix_us>.seq-<value>`
/// and emptied. Its value, in the name, floors the shard's numbering at
/// every later start ([`moved_aside_floors`]) and is logged by the caller;
/// its 8 KiB were once the room a tight disk's next segment needed, and
/// pushes stayed refused for good (issue 39). Emptying it is best effort:
/// the name is what counts.
pub(crate) fn move_ahead_aside<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    file: &str,
    value: u64,
) -> io::Result<PathBuf> {
    let suffix = format!("{AHEAD_SEQ}{value}");
    let aside = move_file_aside(storage, shard_dir, file, AHEAD_PREFIX, &suffix)?;
    let emptied = storage
        .open(&aside)
        .and_then(|mut f| f.set_len(0).and_then(|()| f.sync_all()));
    if let Err(e) = emptied {
        tracing::warn!(path = %aside.display(), error = %e, "could not empty a checkpoint moved aside as ahead of the data (its name keeps its value); it keeps its 8 KiB");
    }
    Ok(aside)
}

/// Rename `file` in `shard_dir` to `<prefix><unix_us><suffix>` and fsync
/// the folder. Returns the new path.
pub(crate) fn move_file_aside<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    file: &str,
    prefix: &str,
    suffix: &str,
) -> io::Result<PathBuf> {
    let mut us = now_unix_us();
    let mut aside = shard_dir.join(format!("{prefix}{us}{suffix}"));
    // Two moves within one microsecond (or a clock set back) must not
    // overwrite the earlier evidence.
    while storage.open_read(&aside).is_ok() {
        us += 1;
        aside = shard_dir.join(format!("{prefix}{us}{suffix}"));
    }
    storage.rename(&shard_dir.join(file), &aside)?;
    storage.sync_dir(shard_dir)?;
    Ok(aside)
}

/// Durably record `confirmed_next_seq`.
///
/// Once the file exists this is one 4 KiB pwrite into the slot that does
/// not hold the newest checkpoint and one fdatasync: no new space (on a
/// file system that overwrites in place; a copy-on-write one such as btrfs
/// or ZFS may still need a block). The first write (and the first after an
/// old-format file) makes the file: `checkpoint.tmp` written, fsynced,
/// renamed, folder fsynced.
pub fn write_checkpoint<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    confirmed_next_seq: u64,
) -> io::Result<()> {
    write_checkpoint_file(storage, shard_dir, CHECKPOINT_FILE, confirmed_next_seq)
}

/// [`write_checkpoint`] into the file `file` in `shard_dir` (a sink's
/// cursor: [`cursor_file`]).
pub fn write_checkpoint_file<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    name: &str,
    confirmed_next_seq: u64,
) -> io::Result<()> {
    let path = shard_dir.join(name);
    let mut file = match storage.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return create_file(storage, shard_dir, name, confirmed_next_seq, 1)
        }
        Err(e) => return Err(e),
    };
    let (slot, generation) = match parse(&read_file(&file)?) {
        // No generation above it: an in-place write would never be the
        // newest, so start the file again (found by the fuzz target).
        Parsed::Slots(Some((_, s))) if s.generation == u64::MAX => {
            drop(file);
            return create_file(storage, shard_dir, name, confirmed_next_seq, 1);
        }
        Parsed::Slots(Some((i, s))) => (1 - i, s.generation + 1),
        // No valid slot (damaged since the shard started): the drain's
        // in-memory position is the truth; either slot will do.
        Parsed::Slots(None) => (0, 1),
        Parsed::Legacy(_) => {
            drop(file);
            return match create_file(storage, shard_dir, name, confirmed_next_seq, 1) {
                Err(e) if is_no_space(&e) => {
                    legacy_in_place(storage, &path, confirmed_next_seq, &e)
                }
                other => other,
            };
        }
        Parsed::Corrupt(_) => {
            drop(file);
            return create_file(storage, shard_dir, name, confirmed_next_seq, 1);
        }
    };
    let b = encode_slot(&Slot {
        generation,
        confirmed_next_seq,
        updated_unix_us: now_unix_us(),
    });
    file.write_all_at((slot * SLOT_BYTES) as u64, &[IoSlice::new(&b)])?;
    file.sync_data()
}

/// The one writer of a checkpoint file (a sink's cursor): it remembers
/// which slot holds the newest generation after each write, so the next
/// write goes to the other slot without reading the file back (the read
/// cost a full 8 KiB pread per batch per sink). Anything unexpected (the
/// first write, an error, a file made again) falls back to
/// [`write_checkpoint_file`], which reads the file.
///
/// A write may leave the new generation in the page cache only
/// ([`Self::write_unsynced`]): a crash of the process keeps it (the kernel
/// holds it), a power cut may not. Until [`Self::sync`] makes it durable,
/// later writes go to that same slot, never to the other one, which holds
/// the newest durable generation: a power cut that tears or drops the
/// unsynced slot leaves the file at that older checkpoint, never at none.
///
/// The file stays open from an unsynced write to the next fdatasync, and
/// is closed after it: a cursor that has caught up holds no descriptor.
/// Opening and closing it for every batch made the flusher's fdatasyncs
/// slower (with PushBatches of 256 records at Sync and the noop sink,
/// 111-123 µs against 95-100 µs kept open, and 1.15-1.17 M against
/// 1.27-1.33 M records/s; `spillway ctl metrics` around `spillway bench
/// --scenario batch_durable_n256`, three runs each, alternated).
pub struct CheckpointWriter {
    dir: PathBuf,
    name: String,
    /// The file, while a write to it is left unsynced.
    open: Option<Box<dyn StorageFile>>,
    /// (slot holding the newest generation, that generation), as this
    /// writer last left the file.
    last: Option<(usize, u64)>,
    /// Whether `last` is fdatasynced (the other slot is then free to write).
    synced: bool,
}

impl CheckpointWriter {
    pub fn new(dir: &Path, name: &str) -> Self {
        CheckpointWriter {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            last: None,
            synced: true,
            open: None,
        }
    }

    /// Forget what the file holds (something else wrote it).
    pub fn forget(&mut self) {
        self.last = None;
        self.open = None;
    }

    /// Whether everything this writer wrote is durable.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Durably record `confirmed_next_seq` (pwrite + fdatasync).
    pub fn write<S: Storage>(&mut self, storage: &S, confirmed_next_seq: u64) -> io::Result<()> {
        self.put(storage, confirmed_next_seq, true)
    }

    /// Record `confirmed_next_seq` in the page cache (pwrite, no
    /// fdatasync): it survives the process, not a power cut, until the
    /// next [`Self::sync`] or [`Self::write`].
    pub fn write_unsynced<S: Storage>(
        &mut self,
        storage: &S,
        confirmed_next_seq: u64,
    ) -> io::Result<()> {
        self.put(storage, confirmed_next_seq, false)
    }

    /// Make the last write durable (one fdatasync), if it is not.
    pub fn sync<S: Storage>(&mut self, storage: &S) -> io::Result<()> {
        if self.synced {
            return Ok(());
        }
        match self.open.take() {
            Some(mut f) => f.sync_data()?,
            None => storage.open(&self.dir.join(&self.name))?.sync_data()?,
        }
        self.synced = true;
        Ok(())
    }

    fn put<S: Storage>(
        &mut self,
        storage: &S,
        confirmed_next_seq: u64,
        sync: bool,
    ) -> io::Result<()> {
        let path = self.dir.join(&self.name);
        if let Some((newest, generation)) = self.last.filter(|(_, g)| *g < u64::MAX) {
            // Never over the newest durable generation.
            let slot = if self.synced { 1 - newest } else { newest };
            let b = encode_slot(&Slot {
                generation: generation + 1,
                confirmed_next_seq,
                updated_unix_us: now_unix_us(),
            });
            // On an error the slot's state is unknown: the next write
            // reads the file again (and makes it durable).
            self.last = None;
            let mut file: Box<dyn StorageFile> = match self.open.take() {
                Some(f) => f,
                None => Box::new(storage.open(&path)?),
            };
            file.write_all_at((slot * SLOT_BYTES) as u64, &[IoSlice::new(&b)])?;
            if sync {
                file.sync_data()?;
            } else {
                self.open = Some(file);
            }
            self.last = Some((slot, generation + 1));
            self.synced = sync;
            return Ok(());
        }
        // Reads the file, writes the slot that is not the newest valid one
        // and fdatasyncs it: durable, whatever was asked. A slot left
        // unsynced is made durable first, or it could be the one valid
        // slot torn by a power cut while the other is being written.
        self.sync(storage)?;
        write_checkpoint_file(storage, &self.dir, &self.name, confirmed_next_seq)?;
        self.synced = true;
        let file = storage.open_read(&path)?;
        if let Parsed::Slots(Some((slot, s))) = parse(&read_file(&file)?) {
            self.last = Some((slot, s.generation));
        }
        Ok(())
    }
}

/// Make the two-slot file (slot 0 = this checkpoint, slot 1 empty).
fn create_file<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    file: &str,
    confirmed_next_seq: u64,
    generation: u64,
) -> io::Result<()> {
    let mut b = vec![0u8; CHECKPOINT_BYTES];
    b[..SLOT_BYTES].copy_from_slice(&encode_slot(&Slot {
        generation,
        confirmed_next_seq,
        updated_unix_us: now_unix_us(),
    }));
    let tmp = shard_dir.join(format!("{file}.tmp"));
    let _ = storage.remove(&tmp);
    let mut f = storage.create(&tmp)?;
    let written = f
        .write_all_at(0, &[IoSlice::new(&b)])
        .and_then(|()| f.sync_all())
        .and_then(|()| storage.rename(&tmp, &shard_dir.join(file)));
    if let Err(e) = written {
        // Do not leave a partial file on a full disk.
        let _ = storage.remove(&tmp);
        return Err(e);
    }
    storage.sync_dir(shard_dir)
}

/// An old-format checkpoint on a disk with no room to make the new file:
/// overwrite its 32 bytes in place (within one sector; a torn write fails
/// the CRC, and the shard then redelivers from the oldest record).
fn legacy_in_place<S: Storage>(
    storage: &S,
    path: &Path,
    confirmed_next_seq: u64,
    cause: &io::Error,
) -> io::Result<()> {
    tracing::warn!(path = %path.display(), error = %cause,
        "no space to convert the old-format checkpoint; updating it in place");
    let mut b = [0u8; LEGACY_LEN];
    b[0..8].copy_from_slice(&LEGACY_MAGIC);
    b[8..16].copy_from_slice(&confirmed_next_seq.to_le_bytes());
    b[16..24].copy_from_slice(&now_unix_us().to_le_bytes());
    let crc = crc32fast::hash(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    let mut f = storage.open(path)?;
    f.write_all_at(0, &[IoSlice::new(&b)])?;
    f.sync_data()
}

/// Sequence numbers that moved-aside checkpoints in `shard_dir` vouch for:
/// (the values of `checkpoint.ahead-*` files, the times in the names of
/// `checkpoint.corrupt-*` files). See `open_shard` for how they floor
/// `next_seq`.
pub(crate) fn moved_aside_floors<S: Storage>(
    storage: &S,
    shard_dir: &Path,
) -> io::Result<(Vec<u64>, Vec<u64>)> {
    let mut ahead = Vec::new();
    let mut corrupt = Vec::new();
    for path in storage.list(shard_dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(us) = name.strip_prefix(CORRUPT_PREFIX) {
            if let Ok(us) = us.parse::<u64>() {
                corrupt.push(us);
            }
        } else if let Some(value) = name
            .strip_prefix(AHEAD_PREFIX)
            .and_then(|rest| rest.split_once(AHEAD_SEQ))
            .and_then(|(_, v)| v.parse::<u64>().ok())
        {
            ahead.push(value);
        } else if name.starts_with(AHEAD_PREFIX) {
            // Moved aside by an older build: the value is inside.
            let file = storage.open_read(&path)?;
            if let Some(s) = parse(&read_file(&file)?).newest() {
                ahead.push(s.confirmed_next_seq);
            }
        }
    }
    Ok((ahead, corrupt))
}

/// Legacy bytes for tests of the old format.
#[doc(hidden)]
pub fn encode_legacy(confirmed_next_seq: u64) -> [u8; LEGACY_LEN] {
    let mut b = [0u8; LEGACY_LEN];
    b[0..8].copy_from_slice(&LEGACY_MAGIC);
    b[8..16].copy_from_slice(&confirmed_next_seq.to_le_bytes());
    let crc = crc32fast::hash(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FsStorage;

    #[test]
    fn round_trip_missing_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), 0);
        write_checkpoint(&FsStorage, dir.path(), 12345).unwrap();
        assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), 12345);
        write_checkpoint(&FsStorage, dir.path(), 99).unwrap();
        assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), 99);
        let p = checkpoint_path(dir.path());
        let mut raw = std::fs::read(&p).unwrap();
        assert_eq!(raw.len(), CHECKPOINT_BYTES);
        // Generation 2 went to slot 1; damage it and slot 0 (12345) reads.
        raw[SLOT_BYTES + 17] ^= 1;
        std::fs::write(&p, &raw).unwrap();
        assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), 12345);
        raw[17] ^= 1;
        std::fs::write(&p, raw).unwrap();
        let err = read_checkpoint(&FsStorage, dir.path()).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }

    /// Found by the checkpoint fuzz target: a valid slot at the last
    /// generation overflowed the next one (and, wrapped, every later write
    /// lost to it, so the checkpoint stopped moving).
    #[test]
    fn a_slot_at_the_last_generation_does_not_stop_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = vec![0u8; CHECKPOINT_BYTES];
        raw[..SLOT_BYTES].copy_from_slice(&encode_slot(&Slot {
            generation: u64::MAX,
            confirmed_next_seq: 10,
            updated_unix_us: 0,
        }));
        std::fs::write(checkpoint_path(dir.path()), &raw).unwrap();
        assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), 10);
        for seq in [11, 12, 13] {
            write_checkpoint(&FsStorage, dir.path(), seq).unwrap();
            assert_eq!(read_checkpoint(&FsStorage, dir.path()).unwrap(), seq);
        }
    }

    /// The writer that skips the read-back leaves the same file as
    /// `write_checkpoint` would: alternating slots, generations in order,
    /// the newest value read back.
    #[test]
    fn the_writer_alternates_slots_without_reading_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = CheckpointWriter::new(dir.path(), "cursor-a");
        for (i, seq) in [5u64, 6, 7, 8, 9].into_iter().enumerate() {
            w.write(&FsStorage, seq).unwrap();
            let raw = std::fs::read(dir.path().join("cursor-a")).unwrap();
            let Parsed::Slots(Some((slot, s))) = parse(&raw) else {
                panic!("not two-slot")
            };
            assert_eq!(
                (slot, s.generation, s.confirmed_next_seq),
                (i % 2, i as u64 + 1, seq)
            );
            assert_eq!(
                read_checkpoint_file(&FsStorage, dir.path(), "cursor-a").unwrap(),
                seq
            );
        }
        // Written by someone else meanwhile: forget, and the next write
        // still lands in the slot that is not the newest.
        write_checkpoint_file(&FsStorage, dir.path(), "cursor-a", 20).unwrap();
        w.forget();
        w.write(&FsStorage, 21).unwrap();
        assert_eq!(
            read_checkpoint_file(&FsStorage, dir.path(), "cursor-a").unwrap(),
            21
        );
    }

    #[test]
    fn slots_alternate_and_the_newest_generation_wins() {
        let dir = tempfile::tempdir().unwrap();
        for (i, seq) in [5u64, 6, 7, 8, 9].into_iter().enumerate() {
            write_checkpoint(&FsStorage, dir.path(), seq).unwrap();
            let raw = std::fs::read(checkpoint_path(dir.path())).unwrap();
            let Parsed::Slots(Some((slot, s))) = parse(&raw) else {
                panic!("not two-slot")
            };
            assert_eq!(
                (slot, s.generation, s.confirmed_next_seq),
                (i % 2, i as u64 + 1, seq)
            );
        }
    }
}
