//! The per-shard delivery checkpoint: every record with a sequence number
//! below `confirmed_next_seq` has been committed by the sink or moved to the
//! dead-letter store.
//!
//! ```text
//! checkpoint := magic "SPWCKPT1" | confirmed_next_seq u64 | updated_unix_us u64 | reserved u32 | crc u32
//! ```
//! Written to `checkpoint.tmp`, fsynced, renamed over `checkpoint`, and the
//! directory fsynced: a crash leaves the old or the new checkpoint, never a
//! torn one. A checkpoint that fails its CRC is an error, not a reset to
//! zero (that would redeliver everything silently) — the operator decides.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::format::{now_unix_us, u32_at, u64_at};
use crate::storage::{read_full_at, Storage, StorageFile};

const MAGIC: [u8; 8] = *b"SPWCKPT1";
const LEN: usize = 32;
pub const CHECKPOINT_FILE: &str = "checkpoint";

pub fn checkpoint_path(shard_dir: &Path) -> PathBuf {
    shard_dir.join(CHECKPOINT_FILE)
}

/// Read the checkpoint of a shard; `Ok(0)` when there is none yet.
pub fn read_checkpoint<S: Storage>(storage: &S, shard_dir: &Path) -> io::Result<u64> {
    let path = checkpoint_path(shard_dir);
    let file = match storage.open_read(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut b = [0u8; LEN];
    let n = read_full_at(&file, 0, &mut b)?;
    let bad = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    if n != LEN {
        return Err(bad(format!("{n} bytes, expected {LEN}")));
    }
    if b[0..8] != MAGIC {
        return Err(bad("bad magic".into()));
    }
    let stored = u32_at(&b, 28);
    let computed = crc32fast::hash(&b[0..28]);
    if stored != computed {
        return Err(bad(format!(
            "CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )));
    }
    Ok(u64_at(&b, 8))
}

/// Durably replace the checkpoint.
pub fn write_checkpoint<S: Storage>(
    storage: &S,
    shard_dir: &Path,
    confirmed_next_seq: u64,
) -> io::Result<()> {
    let mut b = [0u8; LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..16].copy_from_slice(&confirmed_next_seq.to_le_bytes());
    b[16..24].copy_from_slice(&now_unix_us().to_le_bytes());
    let crc = crc32fast::hash(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    let tmp = shard_dir.join("checkpoint.tmp");
    let _ = storage.remove(&tmp);
    let mut f = storage.create(&tmp)?;
    f.write_all_at(0, &[IoSlice::new(&b)])?;
    f.sync_data()?;
    storage.rename(&tmp, &checkpoint_path(shard_dir))?;
    storage.sync_dir(shard_dir)
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
        raw[9] ^= 1;
        std::fs::write(&p, raw).unwrap();
        let err = read_checkpoint(&FsStorage, dir.path()).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }
}
