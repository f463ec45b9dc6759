//! The daemon's instance id: 16 random bytes (32 hex digits), made once
//! and kept in the data folder's `instance-id`, durably, before anything
//! uses it. With a record's `(shard, seq)` it names the record uniquely
//! across hosts and stably across restarts and power cuts: the NATS sink's
//! `Nats-Msg-Id` is built from it, so the stream can tell a record
//! published again from a new one.

use std::io::{self, IoSlice};
use std::path::Path;

use crate::storage::{Storage, StorageFile};

pub use crate::layout::{INSTANCE_ID_FILE, INSTANCE_ID_TMP};
/// Hex digits of an id.
const ID_HEX: usize = 32;

/// The data folder's instance id, made (and made durable: file, rename,
/// folder) if the folder has none. A file that is not an id (a write a
/// crash cut short never gets renamed into place, so this is someone's
/// edit) is replaced, with a warning: no record went out under it.
pub fn instance_id<S: Storage>(storage: &S, data_dir: &Path) -> io::Result<String> {
    let path = data_dir.join(INSTANCE_ID_FILE);
    match storage.open_read(&path) {
        Ok(file) => {
            let mut buf = [0u8; ID_HEX + 1];
            let n = crate::storage::read_full_at(&file, 0, &mut buf)?;
            let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
            let id = text.trim_end_matches('\n');
            if is_id(id) {
                return Ok(id.to_string());
            }
            tracing::warn!(file = %path.display(), "the instance id file does not hold an id; making a new one");
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = random_id()?;
    let tmp = data_dir.join(INSTANCE_ID_TMP);
    let _ = storage.remove(&tmp);
    let mut f = storage.create(&tmp)?;
    f.write_all_at(0, &[IoSlice::new(format!("{id}\n").as_bytes())])?;
    f.sync_all()?;
    drop(f);
    storage.rename(&tmp, &path)?;
    storage.sync_dir(data_dir)?;
    tracing::info!(instance_id = %id, file = %path.display(), "made this data folder's instance id");
    Ok(id)
}

fn is_id(s: &str) -> bool {
    s.len() == ID_HEX
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// 16 bytes from the kernel's random source, as hex.
fn random_id() -> io::Result<String> {
    let mut bytes = [0u8; ID_HEX / 2];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the pointer and length describe the unfilled tail of
        // `bytes`, which lives for the call.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FsStorage;

    #[test]
    fn made_once_kept_after_and_a_bad_file_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let id = instance_id(&FsStorage, dir.path()).unwrap();
        assert!(is_id(&id), "{id}");
        assert_eq!(instance_id(&FsStorage, dir.path()).unwrap(), id);
        assert!(!dir.path().join(INSTANCE_ID_TMP).exists());
        let other = tempfile::tempdir().unwrap();
        assert_ne!(instance_id(&FsStorage, other.path()).unwrap(), id);
        std::fs::write(dir.path().join(INSTANCE_ID_FILE), "edited\n").unwrap();
        let new = instance_id(&FsStorage, dir.path()).unwrap();
        assert!(is_id(&new) && new != id);
    }
}
