//! The file system's model: an in-memory inode table in which every file
//! and every directory has a *current* view (what programs see) and a
//! *durable* view (what a power cut leaves). No FUSE here: the adapter in
//! `fs.rs` calls these operations, and the unit tests below drive them
//! directly.
//!
//! - A regular file's bytes live in one backing file, `<backing>/<ino>`,
//!   which always holds the **current** content. The durable content is
//!   that file with an in-memory undo log applied: before the first change
//!   since the last sync to a 4 KiB page that lies (partly) below the
//!   durable length, the page's durable bytes are saved. `fsync` and
//!   `fdatasync` both make the current content and length durable (they
//!   clear the log); a power cut writes the saved pages back and truncates
//!   to the durable length.
//! - A directory holds two name → inode maps. `create`, `mkdir`, `unlink`,
//!   `rmdir` and `rename` change only the current map; `fsyncdir` copies
//!   the current map over the durable one (that directory only). A power
//!   cut sets every current map back to its durable one, then drops every
//!   inode no durable entry reaches from the root.
//! - The root directory itself always exists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The granularity of the undo log.
pub(crate) const PAGE: u64 = 4096;
/// The root directory's inode number (FUSE's).
pub(crate) const ROOT: u64 = 1;

/// An errno.
pub(crate) type Errno = i32;
pub(crate) type Res<T> = Result<T, Errno>;

fn errno(e: io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A regular file's bytes: current in the backing file, durable through
/// the undo log.
pub(crate) struct FileData {
    file: File,
    path: PathBuf,
    len: u64,
    durable_len: u64,
    /// Page index → the durable bytes of that page (cut at `durable_len`),
    /// saved before the page's first change since the last sync.
    undo: HashMap<u64, Vec<u8>>,
}

impl FileData {
    fn new(path: PathBuf) -> io::Result<FileData> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(FileData {
            file,
            path,
            len: 0,
            durable_len: 0,
            undo: HashMap::new(),
        })
    }

    /// Whether anything changed since the last sync.
    fn dirty(&self) -> bool {
        self.len != self.durable_len || !self.undo.is_empty()
    }

    /// Save the durable bytes of every page of `start..end` below the
    /// durable length that has not been saved since the last sync.
    fn save(&mut self, start: u64, end: u64) -> io::Result<()> {
        let end = end.min(self.durable_len);
        if start >= end {
            return Ok(());
        }
        for page in start / PAGE..=(end - 1) / PAGE {
            if self.undo.contains_key(&page) {
                continue;
            }
            let from = page * PAGE;
            let to = ((page + 1) * PAGE).min(self.durable_len);
            let mut buf = vec![0u8; (to - from) as usize];
            // Unsaved, so unchanged since the sync: the backing file holds
            // the durable bytes there (only a truncation shrinks it, and a
            // truncation saves first).
            self.file.read_exact_at(&mut buf, from)?;
            self.undo.insert(page, buf);
        }
        Ok(())
    }

    fn read(&self, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        if offset >= self.len {
            return Ok(Vec::new());
        }
        let n = (self.len - offset).min(u64::from(size)) as usize;
        let mut buf = vec![0u8; n];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        self.save(offset, end)?;
        self.file.write_all_at(data, offset)?;
        self.len = self.len.max(end);
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        if len < self.len {
            self.save(len, self.len)?;
        }
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
    }

    /// `fallocate` mode 0 or `FALLOC_FL_KEEP_SIZE`: no byte below the
    /// length changes, so nothing needs saving.
    fn allocate(&mut self, offset: u64, length: u64, mode: i32) -> Res<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: fallocate on a descriptor we own.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                length as libc::off_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(errno(e));
            }
            // The backing file system cannot preallocate: growing the
            // length is all that shows.
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && offset + length > self.len {
                self.file.set_len(offset + length).map_err(errno)?;
            }
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            self.len = self.len.max(offset + length);
        }
        Ok(())
    }

    fn sync(&mut self) {
        self.undo.clear();
        self.durable_len = self.len;
    }

    /// Back to the durable content; returns the bytes that changed or went
    /// (an upper bound: whole saved pages, plus the length beyond durable).
    fn cut(&mut self) -> io::Result<u64> {
        let mut dropped = self.len.saturating_sub(self.durable_len);
        for (page, bytes) in self.undo.drain() {
            self.file.write_all_at(&bytes, page * PAGE)?;
            dropped += bytes.len() as u64;
        }
        self.file.set_len(self.durable_len)?;
        self.len = self.durable_len;
        Ok(dropped)
    }
}

pub(crate) struct DirData {
    current: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
    /// The directory holding this one in the current view.
    parent: u64,
}

pub(crate) enum Kind {
    File(FileData),
    Dir(DirData),
}

/// What `getattr` reports (the adapter turns it into fuser's `FileAttr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attr {
    pub ino: u64,
    pub is_dir: bool,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

pub(crate) struct Inode {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// Entries naming it in the current view.
    links: u32,
    /// Entries naming it in some directory's durable view.
    durable_links: u32,
    /// Open file handles.
    open: u32,
}

/// A change of attributes (`setattr`); `None` keeps the value.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SystemTime>,
    pub mtime: Option<SystemTime>,
}

/// What a power cut threw away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Files whose content or length had changed since their last sync.
    pub files_reverted: usize,
    /// Unsynced bytes thrown away (an upper bound: changed pages count whole).
    pub bytes_dropped: u64,
    /// Directory entries whose current view differed from the durable one
    /// (created, removed or renamed without an fsync of the directory).
    pub entries_reverted: usize,
    /// Files and directories that no durable entry reached any more.
    pub inodes_dropped: usize,
}

/// What is not yet durable (for tests that want to look before a cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Files with changes since their last sync.
    pub dirty_files: usize,
    /// Directories whose entries changed since their last fsync.
    pub dirty_dirs: usize,
}

pub(crate) struct State {
    backing: PathBuf,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    handles: HashMap<u64, u64>,
    next_fh: u64,
}

fn entries_differ(a: &BTreeMap<OsString, u64>, b: &BTreeMap<OsString, u64>) -> usize {
    let mut n = 0;
    for (name, ino) in a {
        if b.get(name) != Some(ino) {
            n += 1;
        }
    }
    n + b.keys().filter(|k| !a.contains_key(*k)).count()
}

impl State {
    /// An empty file system whose file bytes live in `backing` (an empty
    /// folder, created if missing).
    pub(crate) fn new(backing: &Path) -> io::Result<State> {
        std::fs::create_dir_all(backing)?;
        if std::fs::read_dir(backing)?.next().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "the backing folder {} is not empty (lazyfs starts empty and owns it)",
                    backing.display()
                ),
            ));
        }
        let now = SystemTime::now();
        let mut inodes = HashMap::new();
        inodes.insert(
            ROOT,
            Inode {
                kind: Kind::Dir(DirData {
                    current: BTreeMap::new(),
                    durable: BTreeMap::new(),
                    parent: ROOT,
                }),
                perm: 0o755,
                // SAFETY: no preconditions.
                uid: unsafe { libc::geteuid() },
                // SAFETY: no preconditions.
                gid: unsafe { libc::getegid() },
                atime: now,
                mtime: now,
                ctime: now,
                links: 1,
                durable_links: 1,
                open: 0,
            },
        );
        Ok(State {
            backing: backing.to_path_buf(),
            inodes,
            next_ino: ROOT + 1,
            handles: HashMap::new(),
            next_fh: 1,
        })
    }

    #[cfg(test)]
    pub(crate) fn backing(&self) -> &Path {
        &self.backing
    }

    fn inode(&self, ino: u64) -> Res<&Inode> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn inode_mut(&mut self, ino: u64) -> Res<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: u64) -> Res<&DirData> {
        match &self.inode(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            Kind::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Res<&mut DirData> {
        match &mut self.inode_mut(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            Kind::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn file(&self, ino: u64) -> Res<&FileData> {
        match &self.inode(ino)?.kind {
            Kind::File(f) => Ok(f),
            Kind::Dir(_) => Err(libc::EISDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Res<&mut FileData> {
        match &mut self.inode_mut(ino)?.kind {
            Kind::File(f) => Ok(f),
            Kind::Dir(_) => Err(libc::EISDIR),
        }
    }

    pub(crate) fn attr(&self, ino: u64) -> Res<Attr> {
        let i = self.inode(ino)?;
        let (is_dir, size) = match &i.kind {
            Kind::File(f) => (false, f.len),
            Kind::Dir(d) => (true, d.current.len() as u64),
        };
        Ok(Attr {
            ino,
            is_dir,
            size,
            perm: i.perm,
            nlink: if is_dir { 2 } else { i.links },
            uid: i.uid,
            gid: i.gid,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
        })
    }

    pub(crate) fn lookup(&self, parent: u64, name: &OsStr) -> Res<u64> {
        self.dir(parent)?
            .current
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    fn touch_dir(&mut self, ino: u64) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            let now = SystemTime::now();
            i.mtime = now;
            i.ctime = now;
        }
    }

    fn new_inode(&mut self, kind: Kind, perm: u16, uid: u32, gid: u32) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = SystemTime::now();
        self.inodes.insert(
            ino,
            Inode {
                kind,
                perm,
                uid,
                gid,
                atime: now,
                mtime: now,
                ctime: now,
                links: 0,
                durable_links: 0,
                open: 0,
            },
        );
        ino
    }

    fn link(&mut self, parent: u64, name: &OsStr, ino: u64) -> Res<()> {
        self.dir_mut(parent)?.current.insert(name.to_owned(), ino);
        self.inode_mut(ino)?.links += 1;
        self.touch_dir(parent);
        Ok(())
    }

    /// A new empty regular file `parent/name`.
    pub(crate) fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<u64> {
        if self.dir(parent)?.current.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let path = self.backing.join(self.next_ino.to_string());
        let data = FileData::new(path).map_err(errno)?;
        let ino = self.new_inode(Kind::File(data), perm, uid, gid);
        self.link(parent, name, ino)?;
        Ok(ino)
    }

    pub(crate) fn mkdir(
        &mut self,
        parent: u64,
        name: &OsStr,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<u64> {
        if self.dir(parent)?.current.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.new_inode(
            Kind::Dir(DirData {
                current: BTreeMap::new(),
                durable: BTreeMap::new(),
                parent,
            }),
            perm,
            uid,
            gid,
        );
        self.link(parent, name, ino)?;
        Ok(ino)
    }

    /// Remove the current entry `parent/name` (the inode lives on while a
    /// durable entry or an open handle needs it).
    fn unlink_entry(&mut self, parent: u64, name: &OsStr) -> Res<u64> {
        let ino = self
            .dir_mut(parent)?
            .current
            .remove(name)
            .ok_or(libc::ENOENT)?;
        self.touch_dir(parent);
        let i = self.inode_mut(ino)?;
        i.links = i.links.saturating_sub(1);
        i.ctime = SystemTime::now();
        self.collect(ino);
        Ok(ino)
    }

    pub(crate) fn unlink(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(parent, name)?;
        if self.attr(ino)?.is_dir {
            return Err(libc::EISDIR);
        }
        self.unlink_entry(parent, name).map(drop)
    }

    pub(crate) fn rmdir(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(parent, name)?;
        if !self.dir(ino)?.current.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.unlink_entry(parent, name).map(drop)
    }

    /// `rename(2)` (flags: `RENAME_NOREPLACE`; `RENAME_EXCHANGE` is refused).
    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> Res<()> {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(libc::EINVAL);
        }
        let ino = self.lookup(parent, name)?;
        self.dir(new_parent)?;
        let moving_dir = self.attr(ino)?.is_dir;
        if moving_dir {
            // No directory may move into itself or below itself.
            let mut at = new_parent;
            loop {
                if at == ino {
                    return Err(libc::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.dir(at)?.parent;
            }
        }
        if let Some(&target) = self.dir(new_parent)?.current.get(new_name) {
            if flags & libc::RENAME_NOREPLACE != 0 {
                return Err(libc::EEXIST);
            }
            if target == ino {
                return Ok(());
            }
            match (moving_dir, self.attr(target)?.is_dir) {
                (false, true) => return Err(libc::EISDIR),
                (true, false) => return Err(libc::ENOTDIR),
                (true, true) if !self.dir(target)?.current.is_empty() => {
                    return Err(libc::ENOTEMPTY)
                }
                _ => {}
            }
            self.unlink_entry(new_parent, new_name)?;
        }
        self.dir_mut(parent)?.current.remove(name);
        self.touch_dir(parent);
        self.dir_mut(new_parent)?
            .current
            .insert(new_name.to_owned(), ino);
        self.touch_dir(new_parent);
        let i = self.inode_mut(ino)?;
        i.ctime = SystemTime::now();
        if let Kind::Dir(d) = &mut i.kind {
            d.parent = new_parent;
        }
        Ok(())
    }

    /// The current entries of a directory: `(name, ino, is_dir)`, with `.`
    /// and `..` first.
    pub(crate) fn entries(&self, ino: u64) -> Res<Vec<(OsString, u64, bool)>> {
        let d = self.dir(ino)?;
        let mut out = vec![(".".into(), ino, true), ("..".into(), d.parent, true)];
        for (name, &child) in &d.current {
            out.push((name.clone(), child, self.attr(child)?.is_dir));
        }
        Ok(out)
    }

    pub(crate) fn open(&mut self, ino: u64) -> Res<u64> {
        self.inode_mut(ino)?.open += 1;
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, ino);
        Ok(fh)
    }

    pub(crate) fn release(&mut self, fh: u64) {
        if let Some(ino) = self.handles.remove(&fh) {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.open = i.open.saturating_sub(1);
            }
            self.collect(ino);
        }
    }

    pub(crate) fn read(&mut self, ino: u64, offset: u64, size: u32) -> Res<Vec<u8>> {
        let data = self.file(ino)?.read(offset, size).map_err(errno)?;
        self.inode_mut(ino)?.atime = SystemTime::now();
        Ok(data)
    }

    pub(crate) fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Res<()> {
        self.file_mut(ino)?.write(offset, data).map_err(errno)?;
        let i = self.inode_mut(ino)?;
        let now = SystemTime::now();
        i.mtime = now;
        i.ctime = now;
        Ok(())
    }

    pub(crate) fn fallocate(&mut self, ino: u64, offset: u64, length: u64, mode: i32) -> Res<()> {
        self.file_mut(ino)?.allocate(offset, length, mode)
    }

    pub(crate) fn setattr(&mut self, ino: u64, set: SetAttr) -> Res<Attr> {
        if let Some(size) = set.size {
            self.file_mut(ino)?.truncate(size).map_err(errno)?;
        }
        let i = self.inode_mut(ino)?;
        let now = SystemTime::now();
        if let Some(mode) = set.mode {
            i.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = set.uid {
            i.uid = uid;
        }
        if let Some(gid) = set.gid {
            i.gid = gid;
        }
        if let Some(t) = set.atime {
            i.atime = t;
        }
        if let Some(t) = set.mtime {
            i.mtime = t;
        } else if set.size.is_some() {
            i.mtime = now;
        }
        i.ctime = now;
        self.attr(ino)
    }

    /// `fsync` / `fdatasync` of a file: its content and length are durable
    /// (the name is not: that takes an fsync of its directory). On a
    /// directory it does what `fsyncdir` does.
    pub(crate) fn fsync(&mut self, ino: u64) -> Res<()> {
        match &mut self.inode_mut(ino)?.kind {
            Kind::File(f) => {
                f.sync();
                Ok(())
            }
            Kind::Dir(_) => self.fsyncdir(ino),
        }
    }

    /// The directory's current entries become its durable ones.
    pub(crate) fn fsyncdir(&mut self, ino: u64) -> Res<()> {
        let d = self.dir_mut(ino)?;
        let old = std::mem::replace(&mut d.durable, d.current.clone());
        let new: Vec<u64> = d.durable.values().copied().collect();
        for child in new {
            if let Some(i) = self.inodes.get_mut(&child) {
                i.durable_links += 1;
            }
        }
        for child in old.into_values() {
            if let Some(i) = self.inodes.get_mut(&child) {
                i.durable_links = i.durable_links.saturating_sub(1);
            }
            self.collect(child);
        }
        Ok(())
    }

    /// Drop `ino` if nothing can reach it any more: no current entry, no
    /// durable entry, no open handle (a directory's children follow).
    fn collect(&mut self, ino: u64) {
        let mut todo = vec![ino];
        while let Some(ino) = todo.pop() {
            if ino == ROOT {
                continue;
            }
            let Some(i) = self.inodes.get(&ino) else {
                continue;
            };
            if i.links > 0 || i.durable_links > 0 || i.open > 0 {
                continue;
            }
            let i = self.inodes.remove(&ino).expect("present");
            match i.kind {
                Kind::File(f) => {
                    drop(f.file);
                    let _ = std::fs::remove_file(&f.path);
                }
                Kind::Dir(d) => {
                    for child in d.current.values() {
                        if let Some(c) = self.inodes.get_mut(child) {
                            c.links = c.links.saturating_sub(1);
                        }
                        todo.push(*child);
                    }
                    for child in d.durable.values() {
                        if let Some(c) = self.inodes.get_mut(child) {
                            c.durable_links = c.durable_links.saturating_sub(1);
                        }
                        todo.push(*child);
                    }
                }
            }
        }
    }

    /// What a power cut would throw away now.
    pub(crate) fn pending(&self) -> Pending {
        let mut p = Pending::default();
        for i in self.inodes.values() {
            match &i.kind {
                Kind::File(f) if f.dirty() => p.dirty_files += 1,
                Kind::Dir(d) if d.current != d.durable => p.dirty_dirs += 1,
                _ => {}
            }
        }
        p
    }

    /// Lose everything not synced: every directory back to its durable
    /// entries, every file reachable from the root through them back to its
    /// durable content and length, every other inode gone, every handle
    /// closed. The caller makes sure no program uses the file system.
    pub(crate) fn power_cut(&mut self) -> io::Result<CutReport> {
        let mut report = CutReport::default();
        self.handles.clear();
        for i in self.inodes.values_mut() {
            i.open = 0;
            if let Kind::Dir(d) = &mut i.kind {
                report.entries_reverted += entries_differ(&d.current, &d.durable);
                d.current = d.durable.clone();
            }
        }
        // What the durable entries reach from the root. A directory reached
        // twice (only after a rename between two folders of which just one
        // was fsynced) keeps its first name; the second entry goes.
        let mut reached: HashSet<u64> = HashSet::from([ROOT]);
        let mut links: HashMap<u64, u32> = HashMap::from([(ROOT, 1)]);
        let mut parents: HashMap<u64, u64> = HashMap::from([(ROOT, ROOT)]);
        let mut todo = vec![ROOT];
        while let Some(dir) = todo.pop() {
            let names: Vec<(OsString, u64)> = match &self.inodes[&dir].kind {
                Kind::Dir(d) => d.durable.iter().map(|(n, i)| (n.clone(), *i)).collect(),
                Kind::File(_) => continue,
            };
            for (name, child) in names {
                let child_is_dir = match self.inodes.get(&child).map(|i| &i.kind) {
                    Some(Kind::Dir(_)) => true,
                    Some(Kind::File(_)) => false,
                    None => {
                        // Cannot happen (durable entries keep their inode);
                        // be safe rather than crash.
                        if let Kind::Dir(d) = &mut self.inodes.get_mut(&dir).expect("dir").kind {
                            d.durable.remove(&name);
                            d.current.remove(&name);
                        }
                        continue;
                    }
                };
                if child_is_dir && reached.contains(&child) {
                    if let Kind::Dir(d) = &mut self.inodes.get_mut(&dir).expect("dir").kind {
                        d.durable.remove(&name);
                        d.current.remove(&name);
                    }
                    continue;
                }
                *links.entry(child).or_default() += 1;
                if reached.insert(child) && child_is_dir {
                    parents.insert(child, dir);
                    todo.push(child);
                }
            }
        }
        let gone: Vec<u64> = self
            .inodes
            .keys()
            .copied()
            .filter(|i| !reached.contains(i))
            .collect();
        for ino in gone {
            report.inodes_dropped += 1;
            if let Some(Inode {
                kind: Kind::File(f),
                ..
            }) = self.inodes.remove(&ino)
            {
                drop(f.file);
                let _ = std::fs::remove_file(&f.path);
            }
        }
        for (ino, i) in &mut self.inodes {
            i.links = links.get(ino).copied().unwrap_or(0);
            i.durable_links = i.links;
            match &mut i.kind {
                Kind::File(f) => {
                    if f.dirty() {
                        report.files_reverted += 1;
                        report.bytes_dropped += f.cut()?;
                    }
                }
                Kind::Dir(d) => d.parent = parents.get(ino).copied().unwrap_or(ROOT),
            }
        }
        Ok(report)
    }

    /// statfs of the backing folder.
    pub(crate) fn statfs(&self) -> Res<libc::statvfs> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.backing.as_os_str().as_bytes())
            .map_err(|_| libc::EINVAL)?;
        // SAFETY: an all-zero statvfs is a valid value to be overwritten.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a struct to fill.
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::new(&dir.path().join("b")).unwrap();
        (dir, s)
    }

    fn read_all(s: &mut State, ino: u64) -> Vec<u8> {
        s.read(ino, 0, u32::MAX).unwrap()
    }

    fn name(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn an_unsynced_write_is_lost_and_a_synced_one_kept() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.write(f, 0, b"hello").unwrap();
        s.fsync(f).unwrap();
        s.write(f, 5, b" world").unwrap();
        s.write(f, 0, b"J").unwrap();
        assert_eq!(read_all(&mut s, f), b"Jello world");
        let r = s.power_cut().unwrap();
        assert_eq!(r.files_reverted, 1);
        assert_eq!(s.lookup(ROOT, name("f")).unwrap(), f);
        assert_eq!(read_all(&mut s, f), b"hello");
    }

    #[test]
    fn an_overwrite_across_pages_is_undone_page_by_page() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        let old: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i % 251) as u8).collect();
        s.write(f, 0, &old).unwrap();
        s.fsync(f).unwrap();
        s.write(f, PAGE - 10, &[0xAA; 2 * PAGE as usize]).unwrap();
        s.write(f, PAGE - 20, &[0xBB; 20]).unwrap();
        s.write(f, 3 * PAGE + 50, &[0xCC; 5000]).unwrap();
        s.power_cut().unwrap();
        assert_eq!(read_all(&mut s, f), old);
    }

    #[test]
    fn a_truncation_and_regrowth_is_undone() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.write(f, 0, &[7u8; 10_000]).unwrap();
        s.fsync(f).unwrap();
        s.setattr(
            f,
            SetAttr {
                size: Some(10),
                ..SetAttr::default()
            },
        )
        .unwrap();
        s.setattr(
            f,
            SetAttr {
                size: Some(20_000),
                ..SetAttr::default()
            },
        )
        .unwrap();
        assert_eq!(read_all(&mut s, f)[5000], 0);
        s.power_cut().unwrap();
        assert_eq!(read_all(&mut s, f), vec![7u8; 10_000]);
    }

    #[test]
    fn fallocate_grows_a_file_volatilely() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.fallocate(f, 0, 8192, 0).unwrap();
        assert_eq!(s.attr(f).unwrap().size, 8192);
        s.fallocate(f, 0, 100_000, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        assert_eq!(s.attr(f).unwrap().size, 8192);
        assert_eq!(
            s.fallocate(
                f,
                0,
                10,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
            ),
            Err(libc::EOPNOTSUPP)
        );
        s.power_cut().unwrap();
        assert_eq!(s.attr(f).unwrap().size, 0);
    }

    #[test]
    fn a_create_without_a_directory_fsync_is_lost_even_if_the_file_was_synced() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.write(f, 0, b"data").unwrap();
        s.fsync(f).unwrap();
        let r = s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("f")), Err(libc::ENOENT));
        assert_eq!(r.entries_reverted, 1);
        assert_eq!(r.inodes_dropped, 1);
        assert!(std::fs::read_dir(s.backing()).unwrap().next().is_none());
    }

    #[test]
    fn a_rename_over_a_file_is_undone_without_a_directory_fsync() {
        let (_d, mut s) = fs();
        let a = s.create(ROOT, name("a"), 0o600, 0, 0).unwrap();
        let b = s.create(ROOT, name("b"), 0o600, 0, 0).unwrap();
        s.write(a, 0, b"new").unwrap();
        s.write(b, 0, b"old").unwrap();
        s.fsync(a).unwrap();
        s.fsync(b).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.rename(ROOT, name("a"), ROOT, name("b"), 0).unwrap();
        assert_eq!(s.lookup(ROOT, name("b")).unwrap(), a);
        assert_eq!(s.lookup(ROOT, name("a")), Err(libc::ENOENT));
        s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("a")).unwrap(), a);
        assert_eq!(s.lookup(ROOT, name("b")).unwrap(), b);
        assert_eq!(read_all(&mut s, b), b"old");

        // Made durable, it stays, and the replaced file is gone for good.
        s.rename(ROOT, name("a"), ROOT, name("b"), 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("b")).unwrap(), a);
        assert_eq!(s.lookup(ROOT, name("a")), Err(libc::ENOENT));
        assert_eq!(s.attr(b), Err(libc::ENOENT));
    }

    #[test]
    fn an_unlink_is_undone_without_a_directory_fsync_and_an_open_file_outlives_its_name() {
        let (_d, mut s) = fs();
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.write(f, 0, b"kept").unwrap();
        s.fsync(f).unwrap();
        s.fsyncdir(ROOT).unwrap();
        let fh = s.open(f).unwrap();
        s.unlink(ROOT, name("f")).unwrap();
        assert_eq!(read_all(&mut s, f), b"kept");
        s.fsyncdir(ROOT).unwrap();
        assert_eq!(read_all(&mut s, f), b"kept", "still open");
        s.release(fh);
        assert_eq!(s.attr(f), Err(libc::ENOENT));

        let g = s.create(ROOT, name("g"), 0o600, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.unlink(ROOT, name("g")).unwrap();
        s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("g")).unwrap(), g);
    }

    #[test]
    fn mkdir_needs_the_parent_fsynced_and_its_entries_their_own() {
        let (_d, mut s) = fs();
        let d = s.mkdir(ROOT, name("d"), 0o700, 0, 0).unwrap();
        let f = s.create(d, name("f"), 0o600, 0, 0).unwrap();
        s.fsyncdir(d).unwrap();
        s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("d")), Err(libc::ENOENT));
        assert_eq!(s.attr(f), Err(libc::ENOENT));

        let d = s.mkdir(ROOT, name("d"), 0o700, 0, 0).unwrap();
        s.fsyncdir(ROOT).unwrap();
        s.create(d, name("f"), 0o600, 0, 0).unwrap();
        s.power_cut().unwrap();
        assert_eq!(s.lookup(ROOT, name("d")).unwrap(), d);
        assert_eq!(s.lookup(d, name("f")), Err(libc::ENOENT));
        assert_eq!(s.entries(d).unwrap().len(), 2);
    }

    #[test]
    fn rename_refuses_what_rename_refuses() {
        let (_d, mut s) = fs();
        let d = s.mkdir(ROOT, name("d"), 0o700, 0, 0).unwrap();
        s.mkdir(d, name("e"), 0o700, 0, 0).unwrap();
        s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        assert_eq!(
            s.rename(ROOT, name("d"), d, name("x"), 0),
            Err(libc::EINVAL)
        );
        assert_eq!(
            s.rename(ROOT, name("f"), ROOT, name("d"), 0),
            Err(libc::EISDIR)
        );
        assert_eq!(
            s.rename(ROOT, name("d"), ROOT, name("f"), 0),
            Err(libc::ENOTDIR)
        );
        assert_eq!(
            s.rename(ROOT, name("f"), ROOT, name("d"), libc::RENAME_NOREPLACE),
            Err(libc::EEXIST)
        );
        assert_eq!(s.rmdir(ROOT, name("d")), Err(libc::ENOTEMPTY));
        assert_eq!(s.unlink(ROOT, name("d")), Err(libc::EISDIR));
    }

    #[test]
    fn pending_counts_what_a_cut_would_drop() {
        let (_d, mut s) = fs();
        assert_eq!(s.pending(), Pending::default());
        let f = s.create(ROOT, name("f"), 0o600, 0, 0).unwrap();
        s.write(f, 0, b"x").unwrap();
        assert_eq!(
            s.pending(),
            Pending {
                dirty_files: 1,
                dirty_dirs: 1
            }
        );
        s.fsync(f).unwrap();
        s.fsyncdir(ROOT).unwrap();
        assert_eq!(s.pending(), Pending::default());
    }
}
