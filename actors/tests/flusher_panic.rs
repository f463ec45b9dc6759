//! A flusher thread that panics: the batch it held is answered
//! `InternalError` (never left hanging), and the ShardFlusher actor stops
//! itself so the supervisor, which polls `Addr::connected()`, restarts it.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use spillway_actors::{
    AppendBatch, CommitTarget, FlusherConfig, PendingRecord, ShardFlusher, ShardQueue, WabBudget,
};
use spillway_protocol::NackReason;
use spillway_wab::{FsStorage, RecordMeta, Storage, StorageFile};

/// The real file system, except that fdatasync panics once `armed` is set.
#[derive(Clone, Default)]
struct PanicOnSync {
    armed: Arc<AtomicBool>,
}

struct PanicFile {
    inner: <FsStorage as Storage>::File,
    armed: Arc<AtomicBool>,
}

impl Storage for PanicOnSync {
    type File = PanicFile;
    fn create(&self, path: &Path) -> io::Result<PanicFile> {
        Ok(PanicFile {
            inner: FsStorage.create(path)?,
            armed: self.armed.clone(),
        })
    }
    fn open(&self, path: &Path) -> io::Result<PanicFile> {
        Ok(PanicFile {
            inner: FsStorage.open(path)?,
            armed: self.armed.clone(),
        })
    }
    fn open_read(&self, path: &Path) -> io::Result<PanicFile> {
        Ok(PanicFile {
            inner: FsStorage.open_read(path)?,
            armed: self.armed.clone(),
        })
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove(path)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        FsStorage.list(dir)
    }
}

impl StorageFile for PanicFile {
    fn write_all_at(&mut self, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.inner.write_all_at(offset, bufs)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        if self.armed.load(Ordering::SeqCst) {
            panic!("scripted flusher panic");
        }
        self.inner.sync_data()
    }
    fn sync_all(&mut self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

struct Collect(mpsc::Sender<Result<u64, NackReason>>);

impl CommitTarget for Collect {
    fn committed(&self, _token: u64, result: Result<u64, NackReason>) {
        let _ = self.0.send(result);
    }
}

fn push(queue: &ShardQueue, target: &Arc<Collect>, payload: &'static str) {
    let meta = RecordMeta {
        tier: 1,
        arrival_unix_us: 1,
    }
    .pack();
    let records = vec![PendingRecord {
        payload: Bytes::from_static(payload.as_bytes()),
        meta,
    }];
    queue.push(AppendBatch::new(
        records,
        payload.len() as u64,
        true,
        0,
        target.clone(),
    ));
}

#[test]
fn a_panicking_flusher_answers_internal_error_and_its_actor_stops() {
    let dir = tempfile::tempdir().unwrap();
    let storage = PanicOnSync::default();
    let armed = storage.armed.clone();
    let cfg = FlusherConfig {
        shard: 0,
        dir: dir.path().to_path_buf(),
        segment_bytes_max: 1 << 20,
        buffered_flush_interval: Duration::from_millis(50),
        fsync_failures_max: 3,
        spin: Duration::ZERO,
        group_bytes_max: 4 << 20,
    };
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));

    let system = System::new();
    let (flusher, _) = ShardFlusher::open(storage, cfg, queue.clone(), 0).unwrap();
    let addr = system.block_on(async { flusher.start() });

    push(&queue, &target, "fine");
    assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap().is_ok());

    armed.store(true, Ordering::SeqCst);
    push(&queue, &target, "doomed");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Err(NackReason::InternalError),
        "the batch a dying flusher held is answered, not left hanging"
    );

    // The actor notices its dead thread and stops (what the supervisor polls for).
    let deadline = Instant::now() + Duration::from_secs(10);
    system.block_on(async {
        while addr.connected() {
            assert!(
                Instant::now() < deadline,
                "the ShardFlusher actor kept running with a dead thread"
            );
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
    });
}
