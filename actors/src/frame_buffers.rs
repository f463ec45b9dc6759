//! The read buffers of finished large frames, kept for the next ones.
//!
//! A frame larger than [`READ_CHUNK`](crate::connection::READ_CHUNK) is
//! read into one buffer of its size. Its records are slices of that buffer,
//! so it lives until the flusher has written them; then it is freed. Freed
//! to glibc, a buffer at the top of a heap is handed back to the system
//! (the trim threshold is 128 KiB once the mmap threshold is pinned) and
//! the next frame faults its pages in again, 4 KiB at a time: with 1 MiB
//! PushBatches 4 in flight on one connection, about 134 page faults per
//! MiB moved. Instead the connection keeps its handle on a finished
//! frame's buffer here, and a later frame takes it back once nothing else
//! holds it ([`BytesMut::try_reclaim`]).
//!
//! Bounded: at most [`SPARE_BYTES_MAX`] of buffers, none larger than
//! [`SPARE_BUFFER_MAX`] (larger frames, up to the 16 MiB payload cap, get
//! a mapping of their own from glibc and give it back when freed). Once
//! large frames stop coming the daemon drops them all ([`Self::clear`]),
//! so a burst leaves nothing resident behind.

use std::sync::Mutex;

use bytes::BytesMut;

/// Buffers larger than this are not kept: 2 MiB, the daemon's mmap
/// threshold (a PushBatch of 1 MiB of payload, what producers batch to,
/// fits under it).
pub const SPARE_BUFFER_MAX: usize = 2 * 1024 * 1024;
/// Capacity of all kept buffers together, in use by a frame or not.
pub const SPARE_BYTES_MAX: usize = 32 * 1024 * 1024;

/// Kept buffers of finished large frames (see the module doc).
#[derive(Debug, Default)]
pub struct FrameBuffers {
    spares: Mutex<Spares>,
}

#[derive(Debug, Default)]
struct Spares {
    /// Each kept buffer with the size it was kept as.
    buffers: Vec<(BytesMut, usize)>,
    /// Those sizes together.
    bytes: usize,
}

impl FrameBuffers {
    /// An empty buffer with room for exactly `len` bytes (so a read stops
    /// at the frame's end), and the size of the allocation under it: a kept
    /// one nothing holds any more, else a new one.
    pub fn take(&self, len: usize) -> (BytesMut, usize) {
        if len <= SPARE_BUFFER_MAX {
            let mut spares = self.spares.lock().unwrap();
            let found = spares.buffers.iter_mut().position(|(b, _)| {
                debug_assert!(b.is_empty(), "a kept frame buffer holds bytes");
                b.try_reclaim(len)
            });
            if let Some(i) = found {
                let (mut buf, counted) = spares.buffers.swap_remove(i);
                spares.bytes -= counted;
                drop(spares);
                // Reclaimed whole: its capacity is the allocation's.
                let allocated = buf.capacity();
                // The tail past `len` shares the allocation until dropped
                // here; taken back whole again next time.
                drop(buf.split_off(len));
                return (buf, allocated);
            }
        }
        (BytesMut::with_capacity(len), len)
    }

    /// Keep `rest`, the empty rest of a large frame's buffer of `allocated`
    /// bytes once its frame was split off (the frame's records may still be
    /// in flight), for a later frame. Dropped instead when it is not empty,
    /// too large, or the kept ones already add up to [`SPARE_BYTES_MAX`].
    pub fn keep(&self, rest: BytesMut, allocated: usize) {
        if !rest.is_empty() || allocated > SPARE_BUFFER_MAX {
            return;
        }
        let mut spares = self.spares.lock().unwrap();
        if spares.bytes + allocated > SPARE_BYTES_MAX {
            return;
        }
        spares.bytes += allocated;
        spares.buffers.push((rest, allocated));
    }

    /// Drop every kept buffer (large frames stopped coming).
    pub fn clear(&self) {
        let dropped = {
            let mut spares = self.spares.lock().unwrap();
            spares.bytes = 0;
            std::mem::take(&mut spares.buffers)
        };
        drop(dropped);
    }

    /// Buffers kept, and their allocations' size together.
    pub fn kept(&self) -> (usize, usize) {
        let spares = self.spares.lock().unwrap();
        (spares.buffers.len(), spares.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `len` bytes read into `buf` and split off, as a
    /// connection does; returns the frame and the empty rest.
    fn fill_and_split(buf: BytesMut, len: usize) -> (bytes::Bytes, BytesMut) {
        read_and_split(buf, len, len)
    }

    /// `read` bytes read into `buf`, of which the first `len` are a frame
    /// split off; returns the frame and the rest.
    fn read_and_split(mut buf: BytesMut, read: usize, len: usize) -> (bytes::Bytes, BytesMut) {
        buf.extend_from_slice(&vec![7u8; read]);
        let frame = buf.split_to(len).freeze();
        (frame, buf)
    }

    #[test]
    fn a_buffer_is_handed_out_again_only_once_its_frame_is_gone() {
        let pool = FrameBuffers::default();
        let (buf, allocated) = pool.take(1 << 20);
        assert_eq!((buf.capacity(), allocated), (1 << 20, 1 << 20));
        let first = buf.as_ptr();
        let (frame, rest) = fill_and_split(buf, 1 << 20);
        pool.keep(rest, allocated);
        assert_eq!(pool.kept(), (1, 1 << 20));
        // The frame's records are still in flight: a new buffer.
        let (other, _) = pool.take(1 << 20);
        assert_ne!(other.as_ptr(), first);
        assert_eq!(pool.kept(), (1, 1 << 20));
        let record = frame.slice(100..200);
        drop(frame);
        let (still, _) = pool.take(1 << 20);
        assert_ne!(still.as_ptr(), first, "a record slice still holds it");
        drop(record);
        // Written and dropped: the same allocation, exactly the size asked.
        let (again, allocated) = pool.take(1000);
        assert_eq!(again.as_ptr(), first);
        assert_eq!((again.capacity(), allocated), (1000, 1 << 20));
        assert_eq!(pool.kept(), (0, 0));
        // Kept again, it comes back whole for a larger frame.
        let (frame, rest) = fill_and_split(again, 1000);
        pool.keep(rest, allocated);
        drop(frame);
        let (whole, _) = pool.take(1 << 20);
        assert_eq!((whole.as_ptr(), whole.capacity()), (first, 1 << 20));
    }

    #[test]
    fn kept_buffers_stay_within_their_bounds() {
        let pool = FrameBuffers::default();
        // Too large to keep: glibc maps it and gives it back itself.
        let (big, allocated) = pool.take(SPARE_BUFFER_MAX + 1);
        let (_frame, rest) = fill_and_split(big, SPARE_BUFFER_MAX + 1);
        pool.keep(rest, allocated);
        assert_eq!(pool.kept(), (0, 0));
        // Not empty (the start of the next frame is in it): not kept.
        let (buf, allocated) = pool.take(4096);
        let (_frame, rest) = read_and_split(buf, 4096, 4000);
        assert_eq!(rest.len(), 96);
        pool.keep(rest, allocated);
        assert_eq!(pool.kept(), (0, 0));
        // At most SPARE_BYTES_MAX together.
        let mut frames = Vec::new();
        for _ in 0..SPARE_BYTES_MAX / SPARE_BUFFER_MAX + 3 {
            let (buf, allocated) = pool.take(SPARE_BUFFER_MAX);
            let (frame, rest) = fill_and_split(buf, SPARE_BUFFER_MAX);
            pool.keep(rest, allocated);
            frames.push(frame);
        }
        assert_eq!(
            pool.kept(),
            (SPARE_BYTES_MAX / SPARE_BUFFER_MAX, SPARE_BYTES_MAX)
        );
        pool.clear();
        assert_eq!(pool.kept(), (0, 0));
    }
}
