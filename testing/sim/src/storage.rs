//! [`SimStorage`]: an in-memory file system behind the WAB's storage seam
//! that keeps what a real disk keeps, and no more.
//!
//! - Every file has a live content (what reads return: the page cache) and
//!   a durable one (what survives a power cut): `fdatasync`/`fsync` copies
//!   the live content over the durable one.
//! - Every folder has live entries and durable entries: a create, rename or
//!   unlink changes the live ones, and only an fsync of that folder makes
//!   them durable. A folder's own name is durable once its parent is synced.
//! - [`SimStorage::power_cut`] puts the durable state back: unsynced entries
//!   vanish (an unlinked file comes back, a rename is undone), and each file
//!   with unsynced data keeps its durable bytes, or its live ones, or a torn
//!   mix (live up to a random byte, durable after it), chosen per file.
//! - Every operation is a numbered step. [`SimStorage::plan`] arms a fault at
//!   a step: EIO, ENOSPC, a torn write (part of the write lands, then the
//!   process dies), a failed fdatasync (EIO, and the kernel may have dropped
//!   the dirty pages: the live content reverts to the durable one), or a
//!   crash before the step. After a crash every operation fails until
//!   [`SimStorage::restart`]. [`SimStorage::set_full`] makes the disk full:
//!   creating files or folders and growing a file fail with ENOSPC, writes
//!   inside a file's length still work (as into preallocated space).
//!   [`SimStorage::set_quota`] gives one folder a size: growing a file in
//!   it past the size (the live bytes of its files together) fails with
//!   ENOSPC, a disk with room for so many segments.
//! - Segment files removed are kept aside ([`SimStorage::take_removed`]) so
//!   the simulation can check nothing unconfirmed was deleted.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use spillway_wab::format::{classify, FileKind};
use spillway_wab::{Storage, StorageFile};

use crate::rng::Rng;

/// What an armed step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Eio,
    Enospc,
    /// A write stores a random part of its bytes, then the process dies.
    TornWrite,
    /// An fdatasync/fsync fails with EIO; half the time the dirty pages
    /// are gone too (the live content reverts to the durable one).
    FailedSync,
    /// The process dies before the step.
    Crash,
}

/// How a crash treats what was not synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashKind {
    /// A process crash (SIGKILL): the page cache survives, nothing is lost.
    Process,
    /// A power cut: everything not synced may be lost (see the module doc).
    Power,
}

#[derive(Debug, Clone)]
struct Inode {
    /// Shared until written (a fork, a sync and a crash copy the pointer,
    /// not the bytes: the oracle forks the whole disk after every action).
    live: Arc<Vec<u8>>,
    durable: Arc<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(usize),
    Dir,
}

#[derive(Debug, Clone, Default)]
struct Dir {
    live: BTreeMap<OsString, Entry>,
    durable: BTreeMap<OsString, Entry>,
}

#[derive(Debug, Clone)]
struct Fs {
    inodes: Vec<Inode>,
    dirs: BTreeMap<PathBuf, Dir>,
    step: u64,
    plan: BTreeMap<u64, Fault>,
    full: bool,
    /// A folder (its files, not its subfolders) and the live bytes its
    /// files may hold together.
    quota: Option<(PathBuf, u64)>,
    crashed: bool,
    rng: Rng,
    removed: Vec<(PathBuf, Vec<u8>)>,
    /// Faults that fired: (step, fault, what the step was).
    fired: Vec<(u64, Fault, String)>,
}

/// The in-memory file system; clones share it.
#[derive(Debug, Clone)]
pub struct SimStorage {
    fs: Arc<Mutex<Fs>>,
}

/// The folder everything lives under; it exists durably from the start.
pub const ROOT: &str = "/sim";

fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn crashed() -> io::Error {
    io::Error::other("simulated crash: the process is dead")
}

fn split(path: &Path) -> io::Result<(&Path, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => Ok((p, n.to_os_string())),
        _ => Err(err(libc::EINVAL)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Sync,
    Other,
}

impl Fs {
    /// Count a step and apply what is armed at it.
    fn gate(&mut self, what: &str, kind: Kind) -> io::Result<Option<Fault>> {
        if self.crashed {
            return Err(crashed());
        }
        self.step += 1;
        let Some(fault) = self.plan.remove(&self.step) else {
            return Ok(None);
        };
        self.fired.push((self.step, fault, what.to_string()));
        match fault {
            Fault::Eio => Err(err(libc::EIO)),
            Fault::Enospc => Err(err(libc::ENOSPC)),
            Fault::Crash => {
                self.crashed = true;
                Err(crashed())
            }
            // A torn write only tears writes, a failed sync only syncs; at
            // any other step they are a plain EIO.
            Fault::TornWrite if kind == Kind::Write => Ok(Some(fault)),
            Fault::FailedSync if kind == Kind::Sync => Ok(Some(fault)),
            Fault::TornWrite | Fault::FailedSync => Err(err(libc::EIO)),
        }
    }

    /// Whether file `ino` may grow to `len` bytes: ENOSPC when it lies in
    /// the folder with a quota and that folder's files would pass it.
    fn may_grow(&self, ino: usize, len: usize) -> io::Result<()> {
        let old = self.inodes[ino].live.len();
        if len <= old {
            return Ok(());
        }
        if self.full {
            return Err(err(libc::ENOSPC));
        }
        let Some((dir, max)) = &self.quota else {
            return Ok(());
        };
        let Some(d) = self.dirs.get(dir) else {
            return Ok(());
        };
        let mut inside = false;
        let mut used = 0u64;
        for e in d.live.values() {
            if let Entry::File(i) = e {
                inside |= *i == ino;
                used += self.inodes[*i].live.len() as u64;
            }
        }
        if inside && used + (len - old) as u64 > *max {
            return Err(err(libc::ENOSPC));
        }
        Ok(())
    }

    fn dir(&self, path: &Path) -> io::Result<&Dir> {
        self.dirs.get(path).ok_or_else(|| err(libc::ENOENT))
    }

    fn dir_mut(&mut self, path: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(path).ok_or_else(|| err(libc::ENOENT))
    }

    fn lookup(&self, path: &Path) -> io::Result<Entry> {
        let (parent, name) = split(path)?;
        self.dir(parent)?
            .live
            .get(&name)
            .copied()
            .ok_or_else(|| err(libc::ENOENT))
    }

    fn file(&self, path: &Path) -> io::Result<usize> {
        match self.lookup(path)? {
            Entry::File(ino) => Ok(ino),
            Entry::Dir => Err(err(libc::EISDIR)),
        }
    }

    fn mkdir(&mut self, path: &Path) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let full = self.full;
        let dir = self.dir_mut(parent)?;
        if dir.live.contains_key(&name) {
            return Err(err(libc::EEXIST));
        }
        if full {
            return Err(err(libc::ENOSPC));
        }
        dir.live.insert(name, Entry::Dir);
        self.dirs.insert(path.to_path_buf(), Dir::default());
        Ok(())
    }

    fn power_cut(&mut self) {
        for dir in self.dirs.values_mut() {
            dir.live = dir.durable.clone();
        }
        // Folders whose name did not survive go, with everything in them.
        let mut reachable: Vec<PathBuf> = vec![PathBuf::from(ROOT)];
        let mut i = 0;
        while i < reachable.len() {
            let here = reachable[i].clone();
            if let Some(d) = self.dirs.get(&here) {
                for (name, e) in &d.live {
                    if *e == Entry::Dir {
                        reachable.push(here.join(name));
                    }
                }
            }
            i += 1;
        }
        self.dirs.retain(|p, _| reachable.contains(p));
        for ino in &mut self.inodes {
            if ino.live == ino.durable {
                continue;
            }
            match self.rng.below(3) {
                0 => ino.live = ino.durable.clone(),
                1 => {} // the disk had written it all anyway
                _ => {
                    // Torn: the live bytes up to a random point, then the
                    // durable ones (a length change lands or not with it).
                    let len = ino.live.len().max(ino.durable.len());
                    let cut = self.rng.below(len as u64 + 1) as usize;
                    let mut mixed: Vec<u8> = ino.live.iter().take(cut).copied().collect();
                    let keep_len = if self.rng.below(2) == 0 {
                        ino.live.len()
                    } else {
                        ino.durable.len()
                    };
                    while mixed.len() < keep_len {
                        let at = mixed.len();
                        mixed.push(ino.durable.get(at).copied().unwrap_or(0));
                    }
                    mixed.truncate(keep_len);
                    ino.live = Arc::new(mixed);
                }
            }
            ino.durable = ino.live.clone();
        }
    }
}

impl SimStorage {
    /// An empty file system holding only [`ROOT`]; `seed` drives what a
    /// power cut keeps and whether a failed sync drops the dirty pages.
    pub fn new(seed: u64) -> SimStorage {
        let mut dirs = BTreeMap::new();
        dirs.insert(PathBuf::from(ROOT), Dir::default());
        SimStorage {
            fs: Arc::new(Mutex::new(Fs {
                inodes: Vec::new(),
                dirs,
                step: 0,
                plan: BTreeMap::new(),
                full: false,
                quota: None,
                crashed: false,
                rng: Rng::new(seed),
                removed: Vec::new(),
                fired: Vec::new(),
            })),
        }
    }

    fn fs(&self) -> std::sync::MutexGuard<'_, Fs> {
        self.fs.lock().unwrap()
    }

    /// Steps taken so far.
    pub fn step(&self) -> u64 {
        self.fs().step
    }

    /// Arm `fault` at step `at` (a step already passed never fires).
    pub fn plan(&self, at: u64, fault: Fault) {
        self.fs().plan.insert(at, fault);
    }

    /// Disarm every planned fault.
    pub fn clear_plan(&self) {
        self.fs().plan.clear();
    }

    pub fn set_full(&self, full: bool) {
        self.fs().full = full;
    }

    pub fn is_full(&self) -> bool {
        self.fs().full
    }

    /// Let the files of folder `dir` hold at most `bytes` together (`None`:
    /// no limit but the disk being full).
    pub fn set_quota(&self, quota: Option<(PathBuf, u64)>) {
        self.fs().quota = quota;
    }

    /// The live bytes the files of `dir` hold together.
    pub fn bytes_in(&self, dir: &Path) -> u64 {
        let fs = self.fs();
        fs.dirs.get(dir).map_or(0, |d| {
            d.live
                .values()
                .map(|e| match e {
                    Entry::File(i) => fs.inodes[*i].live.len() as u64,
                    Entry::Dir => 0,
                })
                .sum()
        })
    }

    pub fn crashed(&self) -> bool {
        self.fs().crashed
    }

    /// Kill the process now (between steps).
    pub fn crash(&self) {
        self.fs().crashed = true;
    }

    /// Faults that fired so far (step, fault, operation).
    pub fn fired(&self) -> Vec<(u64, Fault, String)> {
        self.fs().fired.clone()
    }

    /// After a crash: drop what a power cut drops (for [`CrashKind::Power`])
    /// and let operations work again, as a new process on the same disk.
    pub fn restart(&self, kind: CrashKind) {
        let mut fs = self.fs();
        if kind == CrashKind::Power {
            fs.power_cut();
        }
        fs.crashed = false;
    }

    /// Segment files removed since the last call, with their contents.
    pub fn take_removed(&self) -> Vec<(PathBuf, Vec<u8>)> {
        std::mem::take(&mut self.fs().removed)
    }

    /// A separate copy of the file system as it is now, with no faults
    /// armed (to run recovery on without touching this one); a full disk
    /// stays full.
    pub fn fork(&self) -> SimStorage {
        let mut copy = self.fs().clone();
        copy.plan.clear();
        copy.crashed = false;
        copy.removed.clear();
        copy.fired.clear();
        SimStorage {
            fs: Arc::new(Mutex::new(copy)),
        }
    }

    /// A copy of what survives a power cut now that loses every unsynced
    /// byte and entry (the worst case, not a random one).
    pub fn durable_fork(&self) -> SimStorage {
        let copy = self.fork();
        {
            let mut fs = copy.fs();
            for dir in fs.dirs.values_mut() {
                dir.live = dir.durable.clone();
            }
            for ino in &mut fs.inodes {
                ino.live = ino.durable.clone();
            }
        }
        // Unreachable folders go, as in a power cut (no file is torn:
        // every live content is now the durable one).
        copy.fs().power_cut();
        copy
    }

    /// Every folder and file (live view) under `under`: folders map to
    /// `None`, files to their bytes.
    pub fn snapshot(&self, under: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
        let fs = self.fs();
        let mut out = BTreeMap::new();
        for (path, dir) in &fs.dirs {
            if !path.starts_with(under) {
                continue;
            }
            for (name, e) in &dir.live {
                let p = path.join(name);
                match e {
                    Entry::Dir => out.insert(p, None),
                    Entry::File(ino) => out.insert(p, Some(fs.inodes[*ino].live.to_vec())),
                };
            }
        }
        out
    }

    /// The live bytes of a file, if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let fs = self.fs();
        let ino = fs.file(path).ok()?;
        Some(fs.inodes[ino].live.to_vec())
    }

    /// Overwrite `bytes` at `offset` of an existing file, in its live and
    /// its durable content alike: damage on the disk itself (as a bad
    /// sector or a stray write while the daemon is down), which no crash
    /// undoes. `false` if there is no such file or it is too short.
    pub fn damage(&self, path: &Path, offset: usize, bytes: &[u8]) -> bool {
        let mut fs = self.fs();
        let Ok(ino) = fs.file(path) else {
            return false;
        };
        let inode = &mut fs.inodes[ino];
        let end = offset + bytes.len();
        if inode.live.len() < end {
            return false;
        }
        Arc::make_mut(&mut inode.live)[offset..end].copy_from_slice(bytes);
        // As far as the durable content reaches (a part not synced yet
        // is damaged in the page cache only).
        let durable_end = end.min(inode.durable.len());
        if durable_end > offset {
            Arc::make_mut(&mut inode.durable)[offset..durable_end]
                .copy_from_slice(&bytes[..durable_end - offset]);
        }
        true
    }

    /// Write a whole file durably (name and bytes), for scratch copies.
    pub fn put_file(&self, path: &Path, bytes: &[u8]) {
        let mut fs = self.fs();
        let mut at = PathBuf::from(ROOT);
        let (parent, name) = split(path).expect("a file path");
        for c in parent.strip_prefix(ROOT).expect("under ROOT").components() {
            let next = at.join(c);
            if !fs.dirs.contains_key(&next) {
                fs.mkdir(&next).expect("scratch folder");
                let (_, n) = split(&next).unwrap();
                fs.dir_mut(&at).unwrap().durable.insert(n, Entry::Dir);
            }
            at = next;
        }
        let ino = fs.inodes.len();
        let bytes = Arc::new(bytes.to_vec());
        fs.inodes.push(Inode {
            live: bytes.clone(),
            durable: bytes,
        });
        let d = fs.dir_mut(parent).unwrap();
        d.live.insert(name.clone(), Entry::File(ino));
        d.durable.insert(name, Entry::File(ino));
    }
}

/// An open file of [`SimStorage`]: it refers to the inode, so it keeps
/// working after its name is renamed or unlinked, as a descriptor does.
#[derive(Debug)]
pub struct SimFile {
    fs: Arc<Mutex<Fs>>,
    ino: usize,
}

impl Storage for SimStorage {
    type File = SimFile;

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        let mut fs = self.fs();
        fs.gate("create", Kind::Other)?;
        let (parent, name) = split(path)?;
        let full = fs.full;
        let next = fs.inodes.len();
        let dir = fs.dir_mut(parent)?;
        if dir.live.contains_key(&name) {
            return Err(err(libc::EEXIST));
        }
        if full {
            return Err(err(libc::ENOSPC));
        }
        dir.live.insert(name, Entry::File(next));
        fs.inodes.push(Inode {
            live: Arc::default(),
            durable: Arc::default(),
        });
        Ok(SimFile {
            fs: self.fs.clone(),
            ino: next,
        })
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let mut fs = self.fs();
        fs.gate("open", Kind::Other)?;
        let ino = fs.file(path)?;
        Ok(SimFile {
            fs: self.fs.clone(),
            ino,
        })
    }

    fn open_read(&self, path: &Path) -> io::Result<SimFile> {
        self.open(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = self.fs();
        fs.gate("rename", Kind::Other)?;
        let ino = fs.file(from)?;
        let (to_parent, to_name) = split(to)?;
        if let Some(Entry::Dir) = fs.dir(to_parent)?.live.get(&to_name) {
            return Err(err(libc::EISDIR));
        }
        let (from_parent, from_name) = split(from)?;
        fs.dir_mut(from_parent)?.live.remove(&from_name);
        fs.dir_mut(to_parent)?
            .live
            .insert(to_name, Entry::File(ino));
        // A segment renamed to a name no reader opens (a `.free` file to be
        // written over) is gone as a segment: it is checked as a removal.
        if is_segment(from) && !is_segment(to) {
            let bytes = fs.inodes[ino].live.to_vec();
            fs.removed.push((from.to_path_buf(), bytes));
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.fs();
        if fs.gate("sync_dir", Kind::Sync)? == Some(Fault::FailedSync) {
            return Err(err(libc::EIO));
        }
        let d = fs.dir_mut(dir)?;
        d.durable = d.live.clone();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.fs();
        fs.gate("remove", Kind::Other)?;
        let ino = fs.file(path)?;
        let (parent, name) = split(path)?;
        fs.dir_mut(parent)?.live.remove(&name);
        if is_segment(path) {
            let bytes = fs.inodes[ino].live.to_vec();
            fs.removed.push((path.to_path_buf(), bytes));
        }
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.fs();
        fs.gate("create_dir_all", Kind::Other)?;
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(p) = at.filter(|p| !fs.dirs.contains_key(*p)) {
            missing.push(p.to_path_buf());
            at = p.parent();
        }
        for p in missing.into_iter().rev() {
            fs.mkdir(&p)?;
        }
        Ok(())
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.fs();
        fs.gate("create_dir", Kind::Other)?;
        fs.mkdir(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut fs = self.fs();
        fs.gate("list", Kind::Other)?;
        Ok(fs.dir(dir)?.live.keys().map(|n| dir.join(n)).collect())
    }
}

impl StorageFile for SimFile {
    fn write_all_at(&mut self, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let mut fs = self.fs.lock().unwrap();
        let fault = fs.gate("write", Kind::Write)?;
        let mut bytes: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let end = offset as usize + bytes.len();
        fs.may_grow(self.ino, end)?;
        if fault == Some(Fault::TornWrite) {
            let keep = fs.rng.below(bytes.len() as u64 + 1) as usize;
            bytes.truncate(keep);
            fs.crashed = true;
        }
        let live = Arc::make_mut(&mut fs.inodes[self.ino].live);
        let end = offset as usize + bytes.len();
        if live.len() < end {
            live.resize(end, 0);
        }
        live[offset as usize..end].copy_from_slice(&bytes);
        if fs.crashed {
            return Err(crashed());
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut fs = self.fs.lock().unwrap();
        if fs.gate("fdatasync", Kind::Sync)? == Some(Fault::FailedSync) {
            if fs.rng.below(2) == 0 {
                let ino = &mut fs.inodes[self.ino];
                ino.live = ino.durable.clone();
            }
            return Err(err(libc::EIO));
        }
        let ino = &mut fs.inodes[self.ino];
        ino.durable = ino.live.clone();
        Ok(())
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut fs = self.fs.lock().unwrap();
        fs.gate("set_len", Kind::Other)?;
        fs.may_grow(self.ino, len as usize)?;
        Arc::make_mut(&mut fs.inodes[self.ino].live).resize(len as usize, 0);
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut fs = self.fs.lock().unwrap();
        fs.gate("read", Kind::Other)?;
        let live = &fs.inodes[self.ino].live;
        let start = (offset as usize).min(live.len());
        let n = buf.len().min(live.len() - start);
        buf[..n].copy_from_slice(&live[start..start + n]);
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        let fs = self.fs.lock().unwrap();
        Ok(fs.inodes[self.ino].live.len() as u64)
    }
}

/// Whether `path` is a shard segment (sealed or open) by its name.
pub fn is_segment(path: &Path) -> bool {
    matches!(
        path.file_name().and_then(|n| n.to_str()).and_then(classify),
        Some(FileKind::Sealed(_) | FileKind::Open(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(ROOT).join(s)
    }

    #[test]
    fn a_power_cut_drops_unsynced_writes_and_entries_and_keeps_synced_ones() {
        let s = SimStorage::new(1);
        s.create_dir(&p("d")).unwrap();
        s.sync_dir(Path::new(ROOT)).unwrap();
        let mut synced = s.create(&p("d/synced")).unwrap();
        synced.write_all_at(0, &[IoSlice::new(b"kept")]).unwrap();
        synced.sync_data().unwrap();
        s.sync_dir(&p("d")).unwrap();
        let mut f = s.create(&p("d/unsynced-name")).unwrap();
        f.write_all_at(0, &[IoSlice::new(b"x")]).unwrap();
        f.sync_data().unwrap();
        s.rename(&p("d/synced"), &p("d/renamed")).unwrap();
        s.crash();
        // Whatever the seed, the unsynced entries are gone and the synced
        // file is back under its durable name with its durable bytes.
        s.restart(CrashKind::Power);
        assert_eq!(s.read_file(&p("d/synced")).unwrap(), b"kept");
        assert!(s.read_file(&p("d/renamed")).is_none());
        assert!(s.read_file(&p("d/unsynced-name")).is_none());
    }

    #[test]
    fn unsynced_bytes_are_lost_in_the_durable_fork() {
        let s = SimStorage::new(2);
        s.sync_dir(Path::new(ROOT)).unwrap();
        let mut f = s.create(&p("f")).unwrap();
        s.sync_dir(Path::new(ROOT)).unwrap();
        f.write_all_at(0, &[IoSlice::new(b"one")]).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(3, &[IoSlice::new(b"two")]).unwrap();
        assert_eq!(s.read_file(&p("f")).unwrap(), b"onetwo");
        assert_eq!(s.durable_fork().read_file(&p("f")).unwrap(), b"one");
    }

    #[test]
    fn an_unlink_not_made_durable_comes_back_after_a_power_cut() {
        let s = SimStorage::new(3);
        let mut f = s.create(&p("f")).unwrap();
        f.write_all_at(0, &[IoSlice::new(b"z")]).unwrap();
        f.sync_data().unwrap();
        s.sync_dir(Path::new(ROOT)).unwrap();
        s.remove(&p("f")).unwrap();
        assert!(s.read_file(&p("f")).is_none());
        assert_eq!(s.durable_fork().read_file(&p("f")).unwrap(), b"z");
    }

    #[test]
    fn a_folder_with_a_quota_refuses_growth_past_it() {
        let s = SimStorage::new(5);
        s.create_dir(&p("q")).unwrap();
        s.create_dir(&p("other")).unwrap();
        s.set_quota(Some((p("q"), 100)));
        let mut a = s.create(&p("q/a")).unwrap();
        a.write_all_at(0, &[IoSlice::new(&[1; 60])]).unwrap();
        let mut b = s.create(&p("q/b")).unwrap();
        let e = b.set_len(41).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let e = b.write_all_at(0, &[IoSlice::new(&[3; 41])]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        b.set_len(40).unwrap();
        // Inside a file's length, and in other folders, nothing changes.
        a.write_all_at(0, &[IoSlice::new(&[2; 60])]).unwrap();
        s.create(&p("other/o")).unwrap().set_len(1000).unwrap();
        assert_eq!(s.bytes_in(&p("q")), 100);
        s.remove(&p("q/a")).unwrap();
        b.set_len(100).unwrap();
        assert_eq!(s.bytes_in(&p("q")), 100);
    }

    #[test]
    fn armed_faults_fire_at_their_step_and_a_crash_stops_everything() {
        let s = SimStorage::new(4);
        let at = s.step() + 2;
        s.plan(at, Fault::Enospc);
        s.create_dir(&p("a")).unwrap();
        let e = s.create_dir(&p("b")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        s.plan(s.step() + 1, Fault::Crash);
        assert!(s.list(Path::new(ROOT)).is_err());
        assert!(s.crashed());
        assert!(s.list(Path::new(ROOT)).is_err(), "dead until restarted");
        s.restart(CrashKind::Process);
        assert!(s.list(Path::new(ROOT)).unwrap().contains(&p("a")));
    }
}
