//! Reading a file the operator named as a regular file, safely: a FIFO
//! with no writer must not block the reader, a device such as `/dev/zero`
//! must not fill memory, and a file that grows while it is read is cut at
//! its limit. Used for plugin libraries, configs and file-sink paths.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` for reading only if it is a regular file (after symlinks).
/// `O_NONBLOCK` keeps the open of a FIFO with no writer from blocking; the
/// type is then checked on the open descriptor, so a file swapped after a
/// `stat` is caught too.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::other(format!(
            "it is {}, not a regular file",
            describe(&kind)
        )));
    }
    Ok(file)
}

/// The whole of the regular file at `path`, refused when it holds more
/// than `bytes_max` bytes (`what` names it in the error: "a plugin").
pub fn read_capped(path: &Path, bytes_max: u64, what: &str) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    if len > bytes_max {
        return Err(io::Error::other(format!(
            "{len} bytes is more than the {bytes_max} {what} may have"
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(bytes_max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > bytes_max {
        return Err(io::Error::other(format!(
            "it grew past the {bytes_max} bytes {what} may have while being read"
        )));
    }
    Ok(bytes)
}

/// What a file that is not a regular file is, in words ("a FIFO").
pub fn describe(kind: &FileType) -> &'static str {
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_and_a_device_are_refused_without_blocking_or_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_capped(&fifo, 1024, "a config").unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let err = read_capped(Path::new("/dev/zero"), 1024, "a config").unwrap_err();
        assert!(err.to_string().contains("a character device"), "{err}");
        let err = read_capped(dir.path(), 1024, "a config").unwrap_err();
        assert!(err.to_string().contains("a folder"), "{err}");
    }

    #[test]
    fn a_file_over_the_cap_is_refused_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'x'; 2000]).unwrap();
        let err = read_capped(&path, 1000, "a config").unwrap_err();
        assert!(err.to_string().contains("2000 bytes"), "{err}");
        assert_eq!(read_capped(&path, 2000, "a config").unwrap().len(), 2000);
    }
}
