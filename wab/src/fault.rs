//! A [`Storage`] that injects faults at chosen steps, for tests.
//!
//! It wraps the real file system and counts every operation by kind. A
//! [`Fault`] names the n-th operation of a kind and what happens to it: an
//! `EIO` or `ENOSPC` error, a torn write (only the first bytes reach the
//! file, then the "process" crashes), or a crash before the operation.
//! After a crash every operation fails, as if the process had died: what was
//! written before stays in the files (a process crash keeps the page cache),
//! and a test then runs recovery on the same directory with [`FsStorage`].

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

#[derive(Debug, Default)]
struct State {
    counts: [u64; OP_KINDS],
    faults: Vec<Fault>,
    crashed: bool,
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

    pub fn crashed(&self) -> bool {
        self.state.lock().unwrap().crashed
    }

    /// How many operations of this kind were attempted.
    pub fn count(&self, op: Op) -> u64 {
        self.state.lock().unwrap().counts[op as usize]
    }

    fn check(&self, op: Op) -> Verdict {
        let mut st = self.state.lock().unwrap();
        if st.crashed {
            return Verdict::Fail(crash_error());
        }
        st.counts[op as usize] += 1;
        let n = st.counts[op as usize];
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
        Ok(FaultyFile {
            inner: FsStorage.create(path)?,
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
        FsStorage.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.gate(Op::SyncDir)?;
        FsStorage.sync_dir(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.gate(Op::Remove)?;
        FsStorage.remove(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.gate(Op::Create)?;
        FsStorage.create_dir_all(dir)
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
