//! The harness can fail: through the real mount (plain std::fs calls, as a
//! program would make them), what was not synced is gone after a cut and
//! what was synced is there.
//!
//! Needs root and /dev/fuse: under CI (`CI` set) their absence fails the
//! test; elsewhere it is skipped with the reason.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use spillway_lazyfs::{LazyFs, Pending};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// A mounted file system on a fresh folder, or `None` (skipped) where FUSE
/// cannot be had outside CI.
fn mount() -> Option<(tempfile::TempDir, LazyFs)> {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    match LazyFs::mount(&dir.path().join("backing"), &mnt) {
        Ok(fs) => Some((dir, fs)),
        Err(e) if in_ci() => panic!("FUSE must work in CI: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}

fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

fn gone(path: &Path) -> bool {
    matches!(fs::metadata(path), Err(e) if e.kind() == ErrorKind::NotFound)
}

#[test]
fn a_write_without_fsync_is_lost_and_one_with_fdatasync_survives() {
    let Some((_dir, mut lfs)) = mount() else {
        return;
    };
    let root = lfs.mountpoint().to_path_buf();
    let synced = root.join("synced");
    let unsynced = root.join("unsynced");
    let mut a = File::create(&synced).unwrap();
    a.write_all(b"kept").unwrap();
    a.sync_data().unwrap();
    let mut b = File::create(&unsynced).unwrap();
    b.write_all(b"old").unwrap();
    b.sync_all().unwrap();
    sync_dir(&root);
    // Unsynced: an append to one, an overwrite of the other.
    a.write_all(b" and lost").unwrap();
    b.write_all_at(b"new", 0).unwrap();
    drop((a, b));
    assert_eq!(fs::read(&synced).unwrap(), b"kept and lost");
    assert_eq!(fs::read(&unsynced).unwrap(), b"new");
    assert_eq!(
        lfs.pending(),
        Pending {
            dirty_files: 2,
            dirty_dirs: 0
        }
    );

    let report = lfs.power_cut().unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.files_reverted, 2);
    assert_eq!(fs::read(&synced).unwrap(), b"kept");
    assert_eq!(fs::read(&unsynced).unwrap(), b"old");

    // pwritev into a preallocated, synced file (as the daemon writes
    // segments): the synced part stays, the rest is zeros again.
    let f = OpenOptions::new().write(true).open(&synced).unwrap();
    f.set_len(64 * 1024).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(&[1u8; 5000], 100).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(&[2u8; 9000], 5100).unwrap();
    drop(f);
    lfs.power_cut().unwrap();
    let bytes = fs::read(&synced).unwrap();
    assert_eq!(bytes.len(), 64 * 1024);
    assert!(bytes[100..5100].iter().all(|&b| b == 1));
    assert!(bytes[5100..].iter().all(|&b| b == 0));
}

#[test]
fn a_create_without_a_directory_fsync_is_lost() {
    let Some((_dir, mut lfs)) = mount() else {
        return;
    };
    let root = lfs.mountpoint().to_path_buf();
    let lost = root.join("lost");
    let kept = root.join("kept");
    fs::create_dir(root.join("dir")).unwrap();
    File::create(&kept).unwrap().sync_all().unwrap();
    sync_dir(&root);
    let mut f = File::create(&lost).unwrap();
    f.write_all(b"fsynced, but its name never was").unwrap();
    f.sync_all().unwrap();
    drop(f);
    File::create(root.join("late")).unwrap();
    lfs.power_cut().unwrap();
    assert!(gone(&lost), "a create is durable only with its directory");
    assert!(gone(&root.join("late")));
    assert!(fs::metadata(&kept).unwrap().is_file());
    assert!(fs::metadata(root.join("dir")).unwrap().is_dir());

    // A new folder's entries need its own fsync too.
    let sub = root.join("dir").join("seg");
    File::create(&sub).unwrap().sync_all().unwrap();
    lfs.power_cut().unwrap();
    assert!(gone(&sub));
    assert_eq!(fs::read_dir(root.join("dir")).unwrap().count(), 0);
}

#[test]
fn a_rename_or_unlink_without_a_directory_fsync_is_undone() {
    let Some((_dir, mut lfs)) = mount() else {
        return;
    };
    let root = lfs.mountpoint().to_path_buf();
    fs::write(root.join("a.open"), b"segment").unwrap();
    fs::write(root.join("target"), b"replaced").unwrap();
    fs::write(root.join("doomed"), b"still here").unwrap();
    for name in ["a.open", "target", "doomed"] {
        File::open(root.join(name)).unwrap().sync_all().unwrap();
    }
    sync_dir(&root);

    fs::rename(root.join("a.open"), root.join("a.sealed")).unwrap();
    fs::rename(root.join("doomed"), root.join("target")).unwrap();
    fs::write(root.join("b.tmp"), b"x").unwrap();
    fs::remove_file(root.join("b.tmp")).unwrap();
    assert!(gone(&root.join("a.open")));
    assert_eq!(fs::read(root.join("target")).unwrap(), b"still here");

    lfs.power_cut().unwrap();
    assert_eq!(fs::read(root.join("a.open")).unwrap(), b"segment");
    assert!(gone(&root.join("a.sealed")));
    assert_eq!(fs::read(root.join("target")).unwrap(), b"replaced");
    assert_eq!(fs::read(root.join("doomed")).unwrap(), b"still here");

    // The same renames made durable stay after the cut.
    fs::rename(root.join("a.open"), root.join("a.sealed")).unwrap();
    fs::remove_file(root.join("doomed")).unwrap();
    sync_dir(&root);
    lfs.power_cut().unwrap();
    assert_eq!(fs::read(root.join("a.sealed")).unwrap(), b"segment");
    assert!(gone(&root.join("a.open")));
    assert!(gone(&root.join("doomed")));
    let mut names: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a.sealed", "target"]);
}

#[test]
fn flock_works_on_the_mount_between_descriptors() {
    // The daemon locks data_dir/LOCK with flock: the kernel keeps flock
    // locally on a FUSE mount that does not ask for lock requests.
    let Some((_dir, lfs)) = mount() else {
        return;
    };
    let path = lfs.mountpoint().join("LOCK");
    let a = File::create(&path).unwrap();
    let b = File::open(&path).unwrap();
    // SAFETY: flock on descriptors we own.
    unsafe {
        assert_eq!(libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB), 0);
        assert_eq!(
            libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB),
            -1
        );
    }
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EWOULDBLOCK)
    );
    drop(a);
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
}

#[test]
fn a_cut_while_a_file_is_open_is_refused_and_the_mount_keeps_working() {
    let Some((_dir, mut lfs)) = mount() else {
        return;
    };
    let path = lfs.mountpoint().join("busy");
    let f = File::create(&path).unwrap();
    let e = lfs.power_cut().unwrap_err();
    eprintln!("{e}");
    assert!(e.to_string().contains("unmounting"), "{e}");
    drop(f);
    assert!(fs::metadata(&path).is_ok());
}
