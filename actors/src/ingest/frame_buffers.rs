//! The read buffers of large frames, kept for the next ones.
//!
//! A frame larger than [`READ_CHUNK`](crate::ingest::connection::READ_CHUNK) is
//! read into one buffer of its size. Its records are slices of that buffer,
//! so it lives until the flusher has written them; then it is freed. Freed
//! to glibc, a buffer at the top of a heap is handed back to the system
//! (the trim threshold is 128 KiB once the mmap threshold is pinned) and
//! the next frame faults its pages in again, 4 KiB at a time: with 1 MiB
//! PushBatches 4 in flight on one connection, about 134 page faults per
//! MiB moved. Instead every such buffer is handed out with a second,
//! empty handle on its allocation kept here, and a later frame takes the
//! allocation back through that handle once nothing else holds it
//! ([`BytesMut::try_reclaim`]): once the frame's records are written.
//!
//! Bounded: at most [`SPARE_BYTES_MAX`] of allocations tracked, in use or
//! not, none larger than [`SPARE_BUFFER_MAX`] (larger frames, up to the
//! 16 MiB payload cap, get a mapping of their own from glibc and give it
//! back when freed). Once large frames stop coming the daemon lets go of
//! them all ([`Self::clear`]), so a burst leaves nothing resident behind.

use std::sync::Mutex;

use bytes::BytesMut;

/// Buffers larger than this are not kept: 2 MiB, the daemon's mmap
/// threshold (a PushBatch of 1 MiB of payload, what producers batch to,
/// fits under it).
pub const SPARE_BUFFER_MAX: usize = 2 * 1024 * 1024;
/// Size of all kept allocations together, in use by a frame or not.
pub const SPARE_BYTES_MAX: usize = 32 * 1024 * 1024;

/// Kept handles on the buffers of large frames (see the module doc).
#[derive(Debug, Default)]
pub struct FrameBuffers {
    spares: Mutex<Spares>,
}

#[derive(Debug, Default)]
struct Spares {
    /// An empty handle on each kept allocation, with the allocation's size.
    handles: Vec<(BytesMut, usize)>,
    /// Those sizes together.
    bytes: usize,
}

impl FrameBuffers {
    /// An empty buffer with room for exactly `len` bytes (so a read stops
    /// at the frame's end): a kept allocation nothing else holds any more,
    /// else a new one, kept too while the bounds allow.
    pub fn take(&self, len: usize) -> BytesMut {
        if len > SPARE_BUFFER_MAX {
            return BytesMut::with_capacity(len);
        }
        let mut spares = self.spares.lock().unwrap();
        let reclaimed = spares.handles.iter_mut().position(|(h, _)| {
            debug_assert!(h.is_empty(), "a kept handle holds bytes");
            h.try_reclaim(len)
        });
        let (mut buf, allocated) = match reclaimed {
            Some(i) => spares.handles.swap_remove(i),
            None if spares.bytes + len <= SPARE_BYTES_MAX => {
                spares.bytes += len;
                (BytesMut::with_capacity(len), len)
            }
            None => return BytesMut::with_capacity(len),
        };
        // The handle kept is the empty rest past `len`; the frame's buffer
        // ends at `len`. Both share the allocation.
        let rest = buf.split_off(len);
        spares.handles.push((rest, allocated));
        buf
    }

    /// Let go of every kept handle (large frames stopped coming): each
    /// allocation is freed once its frame's records are.
    pub fn clear(&self) {
        let dropped = {
            let mut spares = self.spares.lock().unwrap();
            spares.bytes = 0;
            std::mem::take(&mut spares.handles)
        };
        drop(dropped);
    }

    /// Allocations kept, and their size together.
    pub fn kept(&self) -> (usize, usize) {
        let spares = self.spares.lock().unwrap();
        (spares.handles.len(), spares.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `len` bytes read into `buf` and split off, as a
    /// connection does.
    fn fill(mut buf: BytesMut, len: usize) -> bytes::Bytes {
        buf.extend_from_slice(&vec![7u8; len]);
        assert_eq!(buf.capacity(), len, "the read stops at the frame's end");
        buf.split_to(len).freeze()
    }

    #[test]
    fn a_buffer_is_handed_out_again_only_once_its_frame_is_gone() {
        let pool = FrameBuffers::default();
        let buf = pool.take(1 << 20);
        assert_eq!(buf.capacity(), 1 << 20);
        assert_eq!(pool.kept(), (1, 1 << 20));
        let first = buf.as_ptr();
        let frame = fill(buf, 1 << 20);
        // The frame's records are still in flight: a new buffer, kept too.
        let other = pool.take(1 << 20);
        assert_ne!(other.as_ptr(), first);
        assert_eq!(pool.kept(), (2, 2 << 20));
        let record = frame.slice(100..200);
        drop(frame);
        let third = pool.take(1 << 20);
        assert_ne!(third.as_ptr(), first, "a record slice still holds it");
        drop(record);
        // Written and dropped: the same allocation, exactly the size asked,
        // and nothing new kept.
        let again = pool.take(1000);
        assert_eq!(again.as_ptr(), first);
        assert_eq!(again.capacity(), 1000);
        assert_eq!(pool.kept(), (3, 3 << 20));
        drop((other, third));
    }

    #[test]
    fn small_frames_reuse_what_is_left_and_a_large_one_takes_it_whole() {
        let pool = FrameBuffers::default();
        let buf = pool.take(1 << 20);
        let first = buf.as_ptr();
        drop(fill(buf, 1 << 20));
        let within = |p: *const u8| p >= first && p < first.wrapping_add(1 << 20);
        let mut seen = Vec::new();
        for _ in 0..3 {
            let small = pool.take(100_000);
            assert!(within(small.as_ptr()));
            assert_eq!(small.capacity(), 100_000);
            seen.push(small.as_ptr());
            drop(fill(small, 100_000));
        }
        assert_eq!(pool.kept(), (1, 1 << 20));
        let whole = pool.take(1 << 20);
        assert_eq!((whole.as_ptr(), whole.capacity()), (first, 1 << 20));
        assert_eq!(pool.kept(), (1, 1 << 20));
    }

    #[test]
    fn kept_buffers_stay_within_their_bounds() {
        let pool = FrameBuffers::default();
        // Too large to keep: glibc maps it and gives it back itself.
        let big = pool.take(SPARE_BUFFER_MAX + 1);
        assert_eq!(big.capacity(), SPARE_BUFFER_MAX + 1);
        assert_eq!(pool.kept(), (0, 0));
        // At most SPARE_BYTES_MAX together; past it, buffers of their own.
        let mut frames = Vec::new();
        for _ in 0..SPARE_BYTES_MAX / SPARE_BUFFER_MAX + 3 {
            frames.push(fill(pool.take(SPARE_BUFFER_MAX), SPARE_BUFFER_MAX));
        }
        assert_eq!(
            pool.kept(),
            (SPARE_BYTES_MAX / SPARE_BUFFER_MAX, SPARE_BYTES_MAX)
        );
        pool.clear();
        assert_eq!(pool.kept(), (0, 0));
        // The frames are untouched by it.
        assert!(frames.iter().all(|f| f.iter().all(|&b| b == 7)));
    }
}
