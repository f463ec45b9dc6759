//! A [`Storage`] that injects faults at chosen steps, for tests.
//!
//! It wraps the real file system and counts every operation by kind. A
//! [`Fault`] names the n-th operation of a kind and what happens to it: an
//! `EIO` or `ENOSPC` error, a torn write (only the first bytes reach the
//! file, then the "process" crashes), or a crash before the operation.
//! After a crash every operation fails, as if the process had died: what was
//! written before stays in the files (a process crash keeps the page cache),
//! and a test then runs recovery on the same directory with [`FsStorage`].
//!
//! [`FaultyStorage::power_cut`] goes further: it drops every directory
//! entry (file or folder) created or renamed into a folder since that
//! folder's last [`Storage::sync_dir`], the way a power loss may on a real
//! file system, then crashes. A rename that was not made durable is undone
//! (the file gets its old name back, and a file it replaced gets its old
//! contents back). Only names are modelled: file data that was written but
//! not fsynced survives, so this seam catches missing directory fsyncs,
//! not missing `fdatasync`s. Removals are taken as durable at once.
//!
//! [`FaultyStorage::fail_every`] makes every operation of a kind fail (a
//! full disk: every `Create` fails with ENOSPC, while writes into space
//! already allocated still work).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::storage::{FsFile, FsStorage, Storage, StorageFile};

/// Kinds of storage operation, for counting and targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Open,
    Write,
    SyncData,
    SyncAll,
    SetLen,
    Rename,
    SyncDir,
    Remove,
    Read,
}

const OP_KINDS: usize = 10;

/// What happens to the targeted operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The operation fails with EIO; later operations work.
    Eio,
    /// The operation fails with ENOSPC; later operations work.
    Enospc,
    /// A write stores only its first `keep` bytes, then the process crashes.
    TornWrite { keep: usize },
    /// The process crashes before the operation.
    Crash,
}

/// Inject `kind` at the `nth` (1-based) operation of kind `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub op: Op,
    pub nth: u64,
    pub kind: FaultKind,
}

/// A directory entry a power cut would drop: how it came to be.
#[derive(Debug, Clone)]
enum Undurable {
    /// Created (file or folder) since its folder's last fsync.
    Created,
    /// Renamed here from `from`; `replaced` holds the contents of a file
    /// the rename replaced, to restore on a power cut.
    Renamed {
        from: PathBuf,
        replaced: Option<Vec<u8>>,
    },
}

/// Files this large are not kept for restoring after a power cut (the WAB
/// only ever renames small files, checkpoints, over existing ones).
const REPLACED_KEEP_BYTES_MAX: u64 = 1024 * 1024;

#[derive(Debug, Default)]
struct State {
    counts: [u64; OP_KINDS],
    faults: Vec<Fault>,
    /// Operations that fail every time (see [`FaultyStorage::fail_every`]).
    always: Vec<(Op, FaultKind)>,
    crashed: bool,
    /// Entries not yet made durable by an fsync of their folder.
    undurable: BTreeMap<PathBuf, Undurable>,
}

/// Fault-injecting storage; clones share one fault plan and counters.
#[derive(Debug, Clone, Default)]
pub struct FaultyStorage {
    state: Arc<Mutex<State>>,
}

enum Verdict {
    Go,
    Fail(io::Error),
    Tear(usize),
}

fn crash_error() -> io::Error {
    io::Error::other("simulated crash: the process is dead")
}

impl FaultyStorage {
    pub fn new(faults: Vec<Fault>) -> Self {
        FaultyStorage {
            state: Arc::new(Mutex::new(State {
                faults,
                ..Default::default()
            })),
        }
    }

    /// Add a fault to the plan (counted from the operations already done).
    pub fn inject(&self, fault: Fault) {
        self.state.lock().unwrap().faults.push(fault);
    }

    /// Make every later operation of kind `op` fail with `kind` (only
    /// [`FaultKind::Eio`] and [`FaultKind::Enospc`] make sense here).
    pub fn fail_every(&self, op: Op, kind: FaultKind) {
        assert!(
            matches!(kind, FaultKind::Eio | FaultKind::Enospc),
            "fail_every takes an error, not {kind:?}"
        );
        self.state.lock().unwrap().always.push((op, kind));
    }

    /// Stop failing operations of kind `op` (undoes [`Self::fail_every`]).
    pub fn stop_failing(&self, op: Op) {
        self.state.lock().unwrap().always.retain(|(o, _)| *o != op);
    }

    /// Entries a power cut would drop now (for test messages).
    pub fn undurable(&self) -> Vec<PathBuf> {
        self.state
            .lock()
            .unwrap()
            .undurable
            .keys()
            .cloned()
            .collect()
    }

    /// Simulate a power cut: drop every entry created or renamed into a
    /// folder since that folder's last fsync (a folder with everything in
    /// it), undo renames that were not made durable, then crash (every later
    /// operation fails). Returns the entries dropped or renamed back.
    pub fn power_cut(&self) -> io::Result<Vec<PathBuf>> {
        let mut st = self.state.lock().unwrap();
        st.crashed = true;
        let entries = std::mem::take(&mut st.undurable);
        drop(st);
        // Deepest first: undo what happened inside a folder before the
        // folder itself goes.
        let mut entries: Vec<(PathBuf, Undurable)> = entries.into_iter().collect();
        entries.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        let mut dropped = Vec::new();
        for (path, how) in entries {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue; // already gone with its folder, or removed
            };
            match how {
                Undurable::Renamed { from, replaced }
                    if from.parent().is_some_and(|p| p.is_dir()) =>
                {
                    fs::rename(&path, &from)?;
                    if let Some(bytes) = replaced {
                        fs::write(&path, bytes)?;
                    }
                }
                _ if meta.is_dir() => fs::remove_dir_all(&path)?,
                _ => fs::remove_file(&path)?,
            }
            dropped.push(path);
        }
        Ok(dropped)
    }

    fn note_created(&self, path: &Path) {
        let mut st = self.state.lock().unwrap();
        st.undurable.insert(path.to_path_buf(), Undurable::Created);
    }

    pub fn crashed(&self) -> bool {
        self.state.lock().unwrap().crashed
    }

    /// How many operations of this kind were attempted.
    pub fn count(&self, op: Op) -> u64 {
        self.state.lock().unwrap().counts[op as usize]
    }

    /// A crash before each operation of the kinds `ops` that this storage
    /// counted (run a workload on a fault-free one first), in that order.
    pub fn crash_points(&self, ops: &[Op]) -> Vec<Fault> {
        ops.iter()
            .flat_map(|&op| {
                (1..=self.count(op)).map(move |nth| Fault {
                    op,
                    nth,
                    kind: FaultKind::Crash,
                })
            })
            .collect()
    }

    fn check(&self, op: Op) -> Verdict {
        let mut st = self.state.lock().unwrap();
        if st.crashed {
            return Verdict::Fail(crash_error());
        }
        st.counts[op as usize] += 1;
        let n = st.counts[op as usize];
        if let Some((_, kind)) = st.always.iter().find(|(o, _)| *o == op) {
            let errno = if *kind == FaultKind::Enospc {
                libc::ENOSPC
            } else {
                libc::EIO
            };
            return Verdict::Fail(io::Error::from_raw_os_error(errno));
        }
        let Some(fault) = st.faults.iter().find(|f| f.op == op && f.nth == n).copied() else {
            return Verdict::Go;
        };
        match fault.kind {
            FaultKind::Eio => Verdict::Fail(io::Error::from_raw_os_error(libc::EIO)),
            FaultKind::Enospc => Verdict::Fail(io::Error::from_raw_os_error(libc::ENOSPC)),
            FaultKind::Crash => {
                st.crashed = true;
                Verdict::Fail(crash_error())
            }
            FaultKind::TornWrite { keep } => {
                st.crashed = true;
                Verdict::Tear(keep)
            }
        }
    }

    fn gate(&self, op: Op) -> io::Result<()> {
        match self.check(op) {
            Verdict::Go => Ok(()),
            Verdict::Fail(e) => Err(e),
            Verdict::Tear(_) => Err(crash_error()),
        }
    }
}

impl Storage for FaultyStorage {
    type File = FaultyFile;

    fn create(&self, path: &Path) -> io::Result<FaultyFile> {
        self.gate(Op::Create)?;
        let inner = FsStorage.create(path)?;
        self.note_created(path);
        Ok(FaultyFile {
            inner,
            storage: self.clone(),
        })
    }

    fn open(&self, path: &Path) -> io::Result<FaultyFile> {
        self.gate(Op::Open)?;
        Ok(FaultyFile {
            inner: FsStorage.open(path)?,
            storage: self.clone(),
        })
    }

    fn open_read(&self, path: &Path) -> io::Result<FaultyFile> {
        self.gate(Op::Open)?;
        Ok(FaultyFile {
            inner: FsStorage.open_read(path)?,
            storage: self.clone(),
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.gate(Op::Rename)?;
        let replaced = match fs::metadata(to) {
            Ok(m) if m.is_file() && m.len() <= REPLACED_KEEP_BYTES_MAX => fs::read(to).ok(),
            _ => None,
        };
        FsStorage.rename(from, to)?;
        let mut st = self.state.lock().unwrap();
        // A name created and renamed before any fsync was never durable
        // under either name: the power cut drops it.
        let how = match st.undurable.remove(from) {
            Some(Undurable::Created) => Undurable::Created,
            Some(Undurable::Renamed { from: first, .. }) => Undurable::Renamed {
                from: first,
                replaced,
            },
            None => Undurable::Renamed {
                from: from.to_path_buf(),
                replaced,
            },
        };
        st.undurable.insert(to.to_path_buf(), how);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.gate(Op::SyncDir)?;
        FsStorage.sync_dir(dir)?;
        let mut st = self.state.lock().unwrap();
        st.undurable
            .retain(|p, _| crate::storage::parent_of(p) != dir);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.gate(Op::Remove)?;
        FsStorage.remove(path)?;
        self.state.lock().unwrap().undurable.remove(path);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.gate(Op::Create)?;
        // Which components are new, so a power cut can drop them (this
        // method never fsyncs a parent: that is what the seam is for).
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(p) = at.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            missing.push(p.to_path_buf());
            at = p.parent();
        }
        FsStorage.create_dir_all(dir)?;
        for p in missing {
            self.note_created(&p);
        }
        Ok(())
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        // mkdir of an existing folder fails with EEXIST before anything
        // could run out of space, so this is not counted as a Create.
        if fs::symlink_metadata(dir).is_ok() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.gate(Op::Create)?;
        FsStorage.create_dir(dir)?;
        self.note_created(dir);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.gate(Op::Read)?;
        FsStorage.list(dir)
    }
}

/// A file of [`FaultyStorage`].
#[derive(Debug)]
pub struct FaultyFile {
    inner: FsFile,
    storage: FaultyStorage,
}

impl StorageFile for FaultyFile {
    fn write_all_at(&mut self, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        match self.storage.check(Op::Write) {
            Verdict::Go => self.inner.write_all_at(offset, bufs),
            Verdict::Fail(e) => Err(e),
            Verdict::Tear(keep) => {
                let flat: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
                let keep = keep.min(flat.len());
                self.inner
                    .write_all_at(offset, &[IoSlice::new(&flat[..keep])])?;
                Err(crash_error())
            }
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.storage.gate(Op::SyncData)?;
        self.inner.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.storage.gate(Op::SyncAll)?;
        self.inner.sync_all()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.storage.gate(Op::SetLen)?;
        self.inner.set_len(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.storage.gate(Op::Read)?;
        self.inner.read_at(offset, buf)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}
