//! The Connection actor: one per accepted socket, on one of the connection
//! arbiters. It turns bytes into requests, hands their records to the
//! shard in one [`AppendBatch`] per read, and writes the responses back in
//! request order.
//!
//! Pipelining: the connection keeps reading while earlier frames wait for
//! their fsync, up to its in-flight window (`inflight_records_max` records,
//! `inflight_bytes_max` bytes, and at most 64 KiB of unwritten responses).
//! At the window it stops reading, so a fast producer is held back by the
//! socket buffer rather than by memory growing in the daemon.
//!
//! Every refusal names its reason: the client gets the nack, the log gets
//! the detail (offending byte, value or limit). A closing nack is written
//! after the responses of the frames before it, then the socket is closed.

use std::io;
use std::os::unix::io::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::{Buf, BytesMut};
use spillway_protocol::{decode_request, NackReason, Request, Response, HEADER_LEN, TRAILER_LEN};
use spillway_wab::RecordMeta;
use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use crate::responder::{Progress, Responder, Slot, State};
use crate::shard::{AppendBatch, PendingRecord, ShardHealth, ShardQueue, WabBudget};
use crate::stats::DaemonStats;

/// Per-connection limits, from `[server]`.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub payload_bytes_max: u32,
    /// A frame that has started arriving must be complete within this time.
    pub read_timeout: Duration,
    pub inflight_records_max: usize,
    pub inflight_bytes_max: u64,
}

/// Unwritten response bytes past which a connection stops reading (a peer
/// that does not read its acks is not allowed to grow our buffer).
const OUT_BYTES_MAX: usize = 64 * 1024;
/// Read buffer grows in steps of this size.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes each record takes in a segment besides its payload (its header),
/// counted against the WAB budget at admission.
const RECORD_OVERHEAD: u64 = 16;

/// What every connection shares.
pub struct ConnectionContext {
    pub limits: ConnectionLimits,
    pub wab: Arc<WabBudget>,
    pub stats: Arc<DaemonStats>,
    /// Open connections; the listener compares it with `max_connections`.
    pub live: Arc<AtomicUsize>,
}

/// Decrements the open-connection count when the actor goes away, however it goes.
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct Connection {
    id: u64,
    shard: Arc<ShardQueue>,
    shared: Arc<ConnectionContext>,
    /// `None` while a read is in flight (the future owns it).
    reader: Option<OwnedReadHalf>,
    /// Shared with the future waiting for the socket to become writable.
    writer: Rc<OwnedWriteHalf>,
    /// Response slots, unwritten bytes and the window; shared with the
    /// flusher threads, which write acks directly.
    responder: Arc<Responder>,
    rbuf: BytesMut,
    /// When the first byte of the (incomplete) frame at the front of `rbuf` arrived.
    frame_started: Option<Instant>,
    /// A decoded request that did not fit the window; admitted first when it frees.
    parked: Option<Request>,
    reading: bool,
    read_closed: bool,
    /// A closing nack is queued: read nothing more, close once it is written.
    closing: bool,
    next_token: u64,
    _live: LiveGuard,
}

impl Connection {
    /// Start a connection actor on the current arbiter. The listener has
    /// already counted it in `shared.live`.
    pub fn new(
        id: u64,
        stream: UnixStream,
        shard: Arc<ShardQueue>,
        shared: Arc<ConnectionContext>,
    ) -> Self {
        let responder = Responder::new(stream.as_raw_fd(), shared.stats.clone());
        let (reader, writer) = stream.into_split();
        let live = LiveGuard(shared.live.clone());
        Connection {
            id,
            shard,
            shared,
            reader: Some(reader),
            writer: Rc::new(writer),
            responder,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            frame_started: None,
            parked: None,
            reading: false,
            read_closed: false,
            closing: false,
            next_token: 0,
            _live: live,
        }
    }

    fn window_full(&self, st: &State) -> bool {
        let l = &self.shared.limits;
        st.slots.len() >= l.inflight_records_max
            || st.inflight_records >= l.inflight_records_max
            || st.inflight_bytes >= l.inflight_bytes_max
            || st.out.len() >= OUT_BYTES_MAX
    }

    /// Start the next read unless reading is paused (window, parked frame, closing).
    fn read_more(&mut self, ctx: &mut Context<Self>) {
        if self.reading {
            return;
        }
        {
            // Paused (window full, parked frame, closing, peer gone): ask
            // the flusher for a Progress when slots are answered.
            let mut st = self.responder.lock();
            let paused =
                self.read_closed || self.closing || self.parked.is_some() || self.window_full(&st);
            st.wants_progress = paused;
            if paused {
                return;
            }
        }
        let Some(mut reader) = self.reader.take() else {
            return;
        };
        self.reserve_for_frame();
        let mut buf = std::mem::take(&mut self.rbuf);
        let stall_limit = self.frame_started.map(|t| {
            let elapsed = t.elapsed();
            self.shared.limits.read_timeout.saturating_sub(elapsed)
        });
        self.reading = true;
        let fut = async move {
            let result = match stall_limit {
                None => reader.read_buf(&mut buf).await,
                Some(left) => match tokio::time::timeout(left, reader.read_buf(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "frame stalled")),
                },
            };
            (reader, buf, result)
        };
        ctx.spawn(fut.into_actor(self).map(|(reader, buf, result), act, ctx| {
            act.reader = Some(reader);
            act.rbuf = buf;
            act.reading = false;
            act.on_read(result, ctx);
        }));
    }

    /// Make room for the rest of the frame at the front of the buffer (its
    /// length is known once the header is in), within the payload cap.
    fn reserve_for_frame(&mut self) {
        let mut need = READ_CHUNK;
        if self.rbuf.len() >= HEADER_LEN {
            let len = u32::from_le_bytes(self.rbuf[8..12].try_into().unwrap());
            if len <= self.shared.limits.payload_bytes_max {
                need = need.max(HEADER_LEN + len as usize + TRAILER_LEN - self.rbuf.len());
            }
        }
        if self.rbuf.capacity() - self.rbuf.len() < need / 4 {
            self.rbuf.reserve(need);
        }
    }

    fn on_read(&mut self, result: io::Result<usize>, ctx: &mut Context<Self>) {
        match result {
            Ok(0) => {
                self.read_closed = true;
                if !self.rbuf.is_empty() {
                    tracing::debug!(
                        conn = self.id,
                        bytes = self.rbuf.len(),
                        "peer closed mid-frame"
                    );
                }
                self.flush(ctx);
            }
            Ok(_) => self.process(ctx),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                self.shared
                    .stats
                    .read_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    conn = self.id,
                    buffered = self.rbuf.len(),
                    timeout_ms = self.shared.limits.read_timeout.as_millis() as u64,
                    "a frame stalled mid-way for longer than server.connection_read_timeout_ms; closing the connection"
                );
                ctx.stop();
            }
            Err(e) => {
                tracing::debug!(conn = self.id, error = %e, "read failed; closing");
                ctx.stop();
            }
        }
    }

    /// Decode everything buffered that fits the window, queue its records
    /// as one batch, then write what responses are ready.
    fn process(&mut self, ctx: &mut Context<Self>) {
        let mut batch = Building::default();
        let token = self.next_token;
        let mut consumed_frame = false;
        let responder = self.responder.clone();
        let mut st = responder.lock();
        loop {
            if self.closing {
                break;
            }
            let req = match self.parked.take() {
                Some(r) => r,
                None => {
                    match decode_request(&mut self.rbuf, self.shared.limits.payload_bytes_max) {
                        Ok(Some(r)) => {
                            consumed_frame = true;
                            r
                        }
                        Ok(None) => break,
                        Err(e) => {
                            self.refuse(&mut st, e.reason, &e.detail);
                            break;
                        }
                    }
                }
            };
            if let Err(req) = self.admit(&mut st, req, token, &mut batch) {
                self.parked = Some(req);
                break;
            }
        }
        // The stall clock runs per frame, and only while we wait on the
        // client: a consumed frame restarts it for the next one, and a
        // connection paused at its window is not the client's fault.
        self.frame_started = if self.rbuf.is_empty() || self.parked.is_some() {
            None
        } else if consumed_frame {
            Some(Instant::now())
        } else {
            self.frame_started.or(Some(Instant::now()))
        };
        drop(st);
        if !batch.records.is_empty() {
            self.next_token += 1;
            let reply = self.responder.clone();
            self.shard.push(AppendBatch::new(
                batch.records,
                batch.bytes,
                batch.needs_fsync,
                token,
                reply,
            ));
        }
        self.flush(ctx);
    }

    /// Take a request into the window, or hand it back if the window is full.
    fn admit(
        &self,
        st: &mut State,
        req: Request,
        token: u64,
        batch: &mut Building,
    ) -> Result<(), Request> {
        let limits = &self.shared.limits;
        if st.slots.len() >= limits.inflight_records_max {
            return Err(req);
        }
        let (tier, records, is_batch) = match req {
            Request::HealthCheck => {
                st.slots
                    .push_back(Slot::Ready(Response::HealthCheckResponse));
                return Ok(());
            }
            Request::Push { tier, ref payload } => (tier, std::slice::from_ref(payload), false),
            Request::PushBatch { tier, ref records } => (tier, records.as_slice(), true),
        };
        let n = records.len();
        let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
        if st.inflight_records > 0
            && (st.inflight_records + n > limits.inflight_records_max
                || st.inflight_bytes + bytes > limits.inflight_bytes_max)
        {
            return Err(req);
        }
        if self.shard.health() == ShardHealth::Failed {
            self.nack_retryable(st, NackReason::InternalError);
            return Ok(());
        }
        let disk_bytes = bytes + RECORD_OVERHEAD * n as u64;
        if self.shared.wab.would_exceed(batch.disk_bytes + disk_bytes) {
            self.nack_retryable(st, NackReason::Overloaded);
            return Ok(());
        }
        let meta = RecordMeta {
            tier: tier.as_byte(),
            arrival_unix_us: batch.arrival_us(),
        }
        .pack();
        batch.records.extend(records.iter().map(|p| PendingRecord {
            payload: p.clone(),
            meta,
        }));
        batch.bytes += bytes;
        batch.disk_bytes += disk_bytes;
        batch.needs_fsync |= tier.needs_fsync();
        st.inflight_records += n;
        st.inflight_bytes += bytes;
        st.slots.push_back(Slot::Waiting {
            token,
            records: n,
            bytes,
            batch: is_batch,
        });
        Ok(())
    }

    fn nack_retryable(&self, st: &mut State, reason: NackReason) {
        self.shared.stats.count_nack(reason);
        st.slots.push_back(Slot::Ready(Response::Nack(reason)));
    }

    /// Queue a closing nack and stop reading.
    fn refuse(&mut self, st: &mut State, reason: NackReason, detail: &str) {
        self.shared.stats.count_nack(reason);
        if self.shared.stats.log_limiter.allow() {
            tracing::warn!(
                conn = self.id,
                reason = reason.name(),
                detail,
                "refused a frame; closing the connection"
            );
        }
        st.slots.push_back(Slot::Ready(Response::Nack(reason)));
        self.closing = true;
    }

    /// Write the answered prefix of responses; close when done closing.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        let responder = self.responder.clone();
        let mut st = responder.lock();
        st.encode_ready();
        if !st.writing_async && !st.out.is_empty() {
            responder.write_now(&mut st);
            if !st.out.is_empty() && !st.write_failed {
                st.writing_async = true;
                drop(st);
                self.write_when_ready(ctx);
                return;
            }
        }
        if st.write_failed {
            drop(st);
            tracing::debug!(conn = self.id, "write failed; closing");
            ctx.stop();
            return;
        }
        let drained = st.slots.is_empty() && st.out.is_empty() && !st.writing_async;
        drop(st);
        if drained && (self.closing || self.read_closed) {
            ctx.stop();
            return;
        }
        self.read_more(ctx);
    }

    /// The socket is full: wait until it is writable, off the actor, then
    /// write through tokio (so its readiness tracking stays right).
    fn write_when_ready(&mut self, ctx: &mut Context<Self>) {
        let writer = self.writer.clone();
        let fut = async move { writer.writable().await };
        ctx.spawn(fut.into_actor(self).map(|r, act, ctx| {
            if let Err(e) = r {
                tracing::debug!(conn = act.id, error = %e, "socket failed; closing");
                ctx.stop();
                return;
            }
            let responder = act.responder.clone();
            let mut st = responder.lock();
            while !st.out.is_empty() {
                match act.writer.try_write(&st.out) {
                    Ok(n) => st.out.advance(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        drop(st);
                        act.write_when_ready(ctx);
                        return;
                    }
                    Err(e) => {
                        drop(st);
                        tracing::debug!(conn = act.id, error = %e, "write failed; closing");
                        ctx.stop();
                        return;
                    }
                }
            }
            st.writing_async = false;
            drop(st);
            act.flush(ctx);
        }));
    }
}

/// The batch being assembled from one read.
#[derive(Default)]
struct Building {
    records: Vec<PendingRecord>,
    bytes: u64,
    disk_bytes: u64,
    needs_fsync: bool,
    arrival: Option<u64>,
}

impl Building {
    /// One clock read per batch, not per record.
    fn arrival_us(&mut self) -> u64 {
        *self
            .arrival
            .get_or_insert_with(spillway_wab::format::now_unix_us)
    }
}

impl Actor for Connection {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.responder.set_actor(ctx.address().recipient());
        self.read_more(ctx);
    }
}

impl Drop for Connection {
    /// Before the socket halves are dropped (after this body), make sure no
    /// flusher thread writes to the descriptor again.
    fn drop(&mut self) {
        self.responder.lock().closed = true;
    }
}

impl Handler<Progress> for Connection {
    type Result = ();

    fn handle(&mut self, _: Progress, ctx: &mut Context<Self>) {
        if self.parked.is_some() && !self.closing {
            let full = self.window_full(&self.responder.lock());
            if !full {
                self.process(ctx);
                return;
            }
        }
        self.flush(ctx);
    }
}

/// Shared id source for connections (log correlation).
pub static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);
