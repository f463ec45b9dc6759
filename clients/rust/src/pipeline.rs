//! `Pipeline`: many requests in flight on one connection, answers returned
//! in request order, without ever letting the daemon and us block on each other.

use std::collections::VecDeque;

use spillway_protocol::{encode_health_check, encode_push, encode_push_batch, Tier};

use crate::conn::Conn;
use crate::reply::{Expect, Reply};
use crate::Error;

/// Write buffer size past which queued requests are written out.
const FLUSH_THRESHOLD: usize = 64 * 1024;

/// A pipelined sender borrowed from a [`Client`](crate::Client).
///
/// Requests are buffered and written in batches; [`recv`](Pipeline::recv)
/// returns their answers in request order. The daemon answers in order and
/// keeps reading while earlier requests wait for fsync, so a window of a few
/// dozen to a few hundred requests hides the fsync latency.
///
/// Keep `window` moderate (at most a few thousand): while a flush is blocked
/// writing, up to `window` responses must fit in the socket's receive buffer.
///
/// An error from `push`, `flush` or `recv` other than a nack is about the
/// connection, not one request; answers already read (such as the nack that
/// made the daemon hang up) are still handed out by `recv` first.
///
/// Dropping the pipeline discards requests that were buffered but never
/// flushed (they were never acked, so no promise is broken); the answers to
/// requests already written are read and discarded by the client's next call.
#[derive(Debug)]
pub struct Pipeline<'a> {
    conn: &'a mut Conn,
    window: usize,
    /// Written or buffered requests whose answers have not been read yet.
    pending: VecDeque<Expect>,
    /// How many of `pending`'s newest entries are still only in the write buffer.
    unflushed: usize,
    /// Answers read off the socket but not yet handed out by `recv`.
    ready: VecDeque<Result<Reply, Error>>,
}

impl<'a> Pipeline<'a> {
    pub(crate) fn new(conn: &'a mut Conn, window: usize) -> Self {
        Self {
            conn,
            window: window.max(1),
            pending: VecDeque::new(),
            unflushed: 0,
            ready: VecDeque::new(),
        }
    }
}

impl Pipeline<'_> {
    /// Queue a push; buffers writes (flushes the write buffer when it exceeds
    /// ~64 KiB or when the window is full); when `window` requests are
    /// outstanding it first reads one response into an internal queue so the
    /// daemon can never deadlock against us.
    pub fn push(&mut self, tier: Tier, payload: &[u8]) -> Result<(), Error> {
        self.conn.check_push(payload)?;
        self.make_room()?;
        encode_push(tier, payload, &mut self.conn.write_buf);
        self.queued(Expect::Ack)
    }

    /// Queue a PushBatch; its answer is [`Reply::AckBatch`] with the record count.
    pub fn push_batch<R: AsRef<[u8]>>(&mut self, tier: Tier, records: &[R]) -> Result<(), Error> {
        self.conn.check_batch(records)?;
        self.make_room()?;
        encode_push_batch(tier, records, &mut self.conn.write_buf);
        let sent = u32::try_from(records.len()).expect("bounded by the payload size check");
        self.queued(Expect::AckBatch(sent))
    }

    /// Queue a health check; its answer is [`Reply::HealthCheckResponse`].
    pub fn health(&mut self) -> Result<(), Error> {
        self.make_room()?;
        encode_health_check(&mut self.conn.write_buf);
        self.queued(Expect::HealthCheckResponse)
    }

    /// Writes every buffered request to the socket.
    ///
    /// If the daemon has hung up, answers it sent before closing (such as the
    /// nack explaining why) are still handed out by `recv` afterwards.
    pub fn flush(&mut self) -> Result<(), Error> {
        if self.unflushed == 0 {
            return Ok(());
        }
        self.unflushed = 0;
        match self.conn.send() {
            Ok(()) => Ok(()),
            Err(e) => {
                self.salvage();
                Err(Error::Io(e))
            }
        }
    }

    /// Next response in request order (flushes first). A Nack comes back as
    /// `Err(Error::Nack(reason))` — the pipeline is still usable after a
    /// retryable nack. Other errors are about the connection, not one request.
    pub fn recv(&mut self) -> Result<Reply, Error> {
        if let Some(answer) = self.ready.pop_front() {
            return answer;
        }
        if self.pending.is_empty() {
            return Err(Error::InvalidRequest(
                "recv with no request outstanding".into(),
            ));
        }
        self.flush()?;
        self.read_one()?;
        self.ready.pop_front().expect("read_one queued an answer")
    }

    /// Requests sent (or buffered) whose answers `recv` has not returned yet.
    pub fn outstanding(&self) -> usize {
        self.pending.len() + self.ready.len()
    }

    /// Ensures a new request stays within the window by reading answers.
    fn make_room(&mut self) -> Result<(), Error> {
        while self.pending.len() >= self.window {
            self.flush()?;
            self.read_one()?;
        }
        Ok(())
    }

    /// Records a request just encoded into the write buffer; flushes if needed.
    fn queued(&mut self, expect: Expect) -> Result<(), Error> {
        self.pending.push_back(expect);
        self.unflushed += 1;
        if self.conn.write_buf.len() >= FLUSH_THRESHOLD || self.pending.len() >= self.window {
            self.flush()?;
        }
        Ok(())
    }

    /// Reads the answer to the oldest pending request into `ready`.
    fn read_one(&mut self) -> Result<(), Error> {
        let response = self.conn.read_response()?;
        self.matched(response);
        Ok(())
    }

    fn matched(&mut self, response: spillway_protocol::Response) {
        let expect = self
            .pending
            .pop_front()
            .expect("a response is only read while a request is pending");
        self.ready.push_back(expect.check(response));
    }

    /// Keeps whatever answers reached us before a failed write.
    fn salvage(&mut self) {
        self.conn.salvage_after_write_error();
        while !self.pending.is_empty() {
            match self.conn.buffered_response() {
                Ok(Some(response)) => self.matched(response),
                _ => break,
            }
        }
    }
}

impl Drop for Pipeline<'_> {
    fn drop(&mut self) {
        // Unflushed requests are dropped unsent: nothing is owed for them.
        self.conn.write_buf.clear();
        self.conn.stale += self.pending.len() - self.unflushed;
    }
}
