//! The dead-letter store: records a sink rejected for good (or that failed
//! transiently for longer than `retry_duration_max_ms`), each with its
//! reason, kept until an operator requeues or drops them.
//!
//! It lives in `<data_dir>/dead-letter/` and uses the same segment format
//! and reader as the WAB. Each stored record's payload is an envelope:
//!
//! ```text
//! envelope := "SPDL" | shard u32 | seq u64 | arrival_unix_us u64 | tier u8
//!             | dead_lettered_unix_us u64 | reason_len u32 | reason (UTF-8) | payload
//! ```
//! A record keeps its identity `(shard, seq)` in the store; `ctl
//! dead-letter requeue|drop` select by it. Removing records rewrites the
//! store (new sealed segment first, then the old ones are deleted); a crash
//! in between leaves both, and listing de-duplicates by identity.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

use crate::format::{now_unix_us, u32_at, u64_at, RecordMeta};
use crate::recovery::recover_shard;
use crate::segment::{preallocate, seal, ActiveSegment, AppendRecord};
use crate::storage::Storage;

/// Shard number written in dead-letter segment headers.
pub const DEAD_LETTER_SHARD: u32 = u32::MAX;
const MAGIC: [u8; 4] = *b"SPDL";
const ENVELOPE_FIXED: usize = 4 + 4 + 8 + 8 + 1 + 8 + 4;
/// Dead-letter segments are small: rejections are rare.
const SEGMENT_BYTES: u64 = 1024 * 1024;

/// A rejected record with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub shard: u32,
    pub seq: u64,
    pub tier: u8,
    pub arrival_unix_us: u64,
    pub dead_lettered_unix_us: u64,
    pub reason: String,
    pub payload: Bytes,
}

impl DeadLetter {
    fn encode(&self) -> Bytes {
        let mut b =
            BytesMut::with_capacity(ENVELOPE_FIXED + self.reason.len() + self.payload.len());
        b.put_slice(&MAGIC);
        b.put_u32_le(self.shard);
        b.put_u64_le(self.seq);
        b.put_u64_le(self.arrival_unix_us);
        b.put_u8(self.tier);
        b.put_u64_le(self.dead_lettered_unix_us);
        b.put_u32_le(self.reason.len() as u32);
        b.put_slice(self.reason.as_bytes());
        b.put_slice(&self.payload);
        b.freeze()
    }

    fn decode(raw: &Bytes) -> Result<DeadLetter, String> {
        if raw.len() < ENVELOPE_FIXED || raw[0..4] != MAGIC {
            return Err("not a dead-letter envelope".into());
        }
        let reason_len = u32_at(raw, 33) as usize;
        let reason_end = ENVELOPE_FIXED + reason_len;
        if raw.len() < reason_end {
            return Err(format!("reason of {reason_len} bytes runs past the record"));
        }
        Ok(DeadLetter {
            shard: u32_at(raw, 4),
            seq: u64_at(raw, 8),
            arrival_unix_us: u64_at(raw, 16),
            tier: raw[24],
            dead_lettered_unix_us: u64_at(raw, 25),
            reason: String::from_utf8_lossy(&raw[ENVELOPE_FIXED..reason_end]).into_owned(),
            payload: raw.slice(reason_end..),
        })
    }
}

/// The store. One per daemon, shared by every shard's drain behind a mutex.
pub struct DeadLetterStore<S: Storage> {
    storage: S,
    dir: PathBuf,
    active: Option<ActiveSegment<S::File>>,
    next_segment_id: u64,
    next_seq: u64,
}

impl<S: Storage> DeadLetterStore<S> {
    /// Open (and recover) `<data_dir>/dead-letter`.
    pub fn open(storage: S, dir: &Path) -> io::Result<Self> {
        let recovered = recover_shard(&storage, dir, DEAD_LETTER_SHARD, 0)?;
        for spare in recovered.spares {
            storage.remove(&spare.path)?;
        }
        Ok(DeadLetterStore {
            storage,
            dir: dir.to_path_buf(),
            active: None,
            next_segment_id: recovered.report.next_segment_id,
            next_seq: recovered.report.next_seq,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Store `letters` durably (write + fdatasync) before returning.
    pub fn append(&mut self, letters: &[DeadLetter]) -> io::Result<()> {
        if letters.is_empty() {
            return Ok(());
        }
        let encoded: Vec<Bytes> = letters.iter().map(|l| l.encode()).collect();
        let bytes: u64 = encoded.iter().map(|e| e.len() as u64).sum();
        let fits = self
            .active
            .as_ref()
            .is_some_and(|a| a.fits(bytes, encoded.len() as u64));
        if !fits {
            self.roll()?;
        }
        let now = now_unix_us();
        let meta = RecordMeta {
            tier: 1,
            arrival_unix_us: now,
        }
        .pack();
        let records: Vec<AppendRecord<'_>> = encoded
            .iter()
            .map(|e| AppendRecord {
                payload: e,
                meta,
                payload_crc: None,
            })
            .collect();
        let active = self.active.as_mut().expect("rolled to a segment");
        let written = active.append(&records).and_then(|_| active.sync());
        self.next_seq = active.next_seq();
        if written.is_err() {
            // After a failed write or fdatasync the kernel may have dropped
            // the segment's dirty pages: never write or fsync it again (a
            // later fsync would succeed over a hole, and every letter after
            // the hole would be unreadable). It stays `.open` for recovery;
            // the next append starts a fresh segment, past the numbers
            // this one used.
            self.active = None;
        }
        written
    }

    /// Seal the active segment (if any) and start a fresh one.
    fn roll(&mut self) -> io::Result<()> {
        if let Some(old) = self.active.take() {
            if !old.is_empty() {
                seal(&self.storage, &self.dir, old.into_sealing())?;
            } else {
                self.storage.remove(&old.path)?;
            }
        }
        let id = self.next_segment_id;
        self.next_segment_id += 1;
        let pre = preallocate(&self.storage, &self.dir, id, SEGMENT_BYTES)?;
        self.active = Some(ActiveSegment::start(pre, DEAD_LETTER_SHARD, self.next_seq));
        Ok(())
    }

    /// Every dead letter, oldest first, one per identity.
    pub fn list(&self) -> io::Result<Vec<DeadLetter>> {
        let mut by_id: BTreeMap<(u32, u64), DeadLetter> = BTreeMap::new();
        for rec in crate::read_shard(&self.storage, &self.dir)? {
            match DeadLetter::decode(&rec.payload) {
                Ok(l) => {
                    by_id.insert((l.shard, l.seq), l);
                }
                Err(e) => {
                    tracing::error!(dl_seq = rec.seq, error = %e, "unreadable dead-letter record")
                }
            }
        }
        let mut all: Vec<DeadLetter> = by_id.into_values().collect();
        all.sort_by_key(|l| (l.dead_lettered_unix_us, l.shard, l.seq));
        Ok(all)
    }

    /// Remove the dead letters `select` picks; returns them. The store is
    /// rewritten: survivors go to a new sealed segment, then the old
    /// segments are deleted.
    pub fn remove_where(
        &mut self,
        mut select: impl FnMut(&DeadLetter) -> bool,
    ) -> io::Result<Vec<DeadLetter>> {
        let all = self.list()?;
        let (removed, kept): (Vec<_>, Vec<_>) = all.into_iter().partition(|l| select(l));
        if removed.is_empty() {
            return Ok(removed);
        }
        let old_files: Vec<PathBuf> = self
            .storage
            .list(&self.dir)?
            .into_iter()
            .filter(|p| {
                let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                n.ends_with(".open") || n.ends_with(".sealed")
            })
            .collect();
        self.active = None;
        if !kept.is_empty() {
            self.append(&kept)?;
            if let Some(a) = self.active.take() {
                seal(&self.storage, &self.dir, a.into_sealing())?;
            }
        }
        for p in &old_files {
            self.storage.remove(p)?;
        }
        self.storage.sync_dir(&self.dir)?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FsStorage;

    fn letter(shard: u32, seq: u64, reason: &str) -> DeadLetter {
        DeadLetter {
            shard,
            seq,
            tier: 1,
            arrival_unix_us: 5,
            dead_lettered_unix_us: seq,
            reason: reason.into(),
            payload: Bytes::from(format!("payload-{shard}-{seq}")),
        }
    }

    #[test]
    fn append_list_remove_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let dl = dir.path().join("dead-letter");
        let mut store = DeadLetterStore::open(FsStorage, &dl).unwrap();
        store
            .append(&[letter(0, 1, "HTTP 400"), letter(1, 2, "bad json")])
            .unwrap();
        store.append(&[letter(0, 3, "HTTP 422")]).unwrap();
        let all = store.list().unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1], letter(1, 2, "bad json"));
        let removed = store.remove_where(|l| l.shard == 0 && l.seq == 1).unwrap();
        assert_eq!(removed, vec![letter(0, 1, "HTTP 400")]);
        drop(store);
        let mut store = DeadLetterStore::open(FsStorage, &dl).unwrap();
        let all = store.list().unwrap();
        assert_eq!(
            all,
            vec![letter(1, 2, "bad json"), letter(0, 3, "HTTP 422")]
        );
        store.append(&[letter(2, 9, "x")]).unwrap();
        assert_eq!(store.list().unwrap().len(), 3);
        store.remove_where(|_| true).unwrap();
        assert!(store.list().unwrap().is_empty());
        drop(store);
        assert!(DeadLetterStore::open(FsStorage, &dl)
            .unwrap()
            .list()
            .unwrap()
            .is_empty());
    }
}
