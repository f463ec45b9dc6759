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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::{Buf, BytesMut};
use spillway_protocol::{
    decode_request_crcs, NackReason, RecordCrcs, Request, Response, HEADER_LEN, TRAILER_LEN,
};
use spillway_wab::RecordMeta;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ingest::idle::{Evict, IdleConnections, IdleMark};
use crate::ingest::read_budget::ReadBudget;
use crate::ingest::responder::{Progress, Responder, Slot, State};
use crate::ingest::transport::{Reader, Stream, Writer};
use crate::shard::{AppendBatch, PendingRecords, ShardQueue};
use crate::stats::DaemonStats;

/// Per-connection limits, from `[server]`.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub payload_bytes_max: u32,
    /// A frame that has started arriving must be complete within this time.
    pub read_timeout: Duration,
    /// A connection with no partial frame and nothing waiting for an ack is
    /// closed after this long without a byte.
    pub idle_timeout: Duration,
    /// Bytes all connections together may reserve for frames larger than
    /// [`READ_CHUNK`] while they arrive (`server.read_buffer_bytes_max`).
    pub read_buffer_bytes_max: u64,
    pub inflight_records_max: usize,
    pub inflight_bytes_max: u64,
    /// At `connections_max`, a new connection closes the longest-idle one
    /// idle at least this long, with nothing in flight
    /// (`server.evict_idle_connections`, `server.evict_idle_after_ms`);
    /// `None`: it is refused instead.
    pub evict_idle_after: Option<Duration>,
    /// Who may push over the Unix socket (`server.allowed_uids`,
    /// `server.allowed_gids`); `None`: anyone the socket's mode lets in.
    pub peers: Option<PeerFilter>,
}

/// The uids and gids whose processes may connect: a peer whose uid is in
/// `uids` or whose (effective) gid is in `gids` is let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFilter {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl PeerFilter {
    pub fn allows(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// Unwritten response bytes past which a connection stops reading: a peer
/// that does not read its acks may not grow our buffer, nor keep pushing
/// records the disk must write for it. The cap is never below what a full
/// in-flight window's acks take ([`ConnectionLimits::out_bytes_max`]): a
/// client that pipelines up to `inflight_records_max` pushes before it reads
/// must not find the daemon waiting for it to read (a deadlock that ends at
/// the write-stall timeout), however little the kernel's send buffer holds.
const OUT_BYTES_MIN: usize = 4 * 1024;

/// An Ack frame: a header and an empty payload's trailer.
const ACK_FRAME_LEN: usize = spillway_protocol::HEADER_LEN + spillway_protocol::TRAILER_LEN;
impl ConnectionLimits {
    /// Unwritten response bytes past which a connection stops reading:
    /// one ack per record of a full window, at least [`OUT_BYTES_MIN`].
    pub fn out_bytes_max(&self) -> usize {
        (self.inflight_records_max * ACK_FRAME_LEN).max(OUT_BYTES_MIN)
    }
}

/// Every connection's read buffer may hold this much without asking the
/// shared read-buffer budget; a frame larger than this reserves its size
/// from the budget before its buffer grows past it.
pub const READ_CHUNK: usize = 64 * 1024;
/// A connection with nothing to read for this long gives its read buffer
/// back and waits for its next byte with none (a read allocates what the
/// bytes that come need): an idle connection holds a few KiB, not
/// [`READ_CHUNK`]. A producer pushing more often keeps its buffer.
const IDLE_KEEP_BUFFER: Duration = Duration::from_secs(1);
/// Longest a connection waiting for read-buffer budget sleeps before it
/// looks again; it is woken at once when a reservation is released.
const BUDGET_RETRY_MAX: Duration = Duration::from_millis(250);

/// What every connection shares.
pub struct ConnectionContext {
    pub limits: ConnectionLimits,
    pub stats: Arc<DaemonStats>,
    /// Open connections; the listener compares it with `connections_max`.
    pub live: Arc<AtomicUsize>,
    /// Wakes connections waiting for read-buffer budget when some is freed.
    pub read_budget: Arc<ReadBudget>,
    /// Set when the daemon begins to shut down (the supervisor then removes
    /// the socket files itself; nobody else did).
    pub stopping: std::sync::atomic::AtomicBool,
    /// Which connections sit idle, for the listener to evict one at the cap.
    pub idle: IdleConnections,
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
    reader: Option<Reader>,
    /// A socket's is shared with the future waiting for it to become
    /// writable; a TLS stream's is owned by the write in flight.
    writer: Writer,
    /// Response slots, unwritten bytes and the window; shared with the
    /// flusher threads, which write acks directly.
    responder: Arc<Responder>,
    rbuf: BytesMut,
    /// When the first byte of the (incomplete) frame at the front of `rbuf` arrived.
    frame_started: Option<Instant>,
    /// Bytes of the shared read-buffer budget reserved for the frame at the
    /// front of `rbuf` (0 while it fits [`READ_CHUNK`]).
    reserved: u64,
    /// Waiting for read-buffer budget: a retry timer is armed.
    budget_wait: bool,
    /// Since when the peer has taken none of our response bytes (while
    /// responses wait for the socket to become writable).
    write_stalled_since: Option<Instant>,
    /// A decoded request (and its records' known CRCs) that did not fit
    /// the window; admitted first when it frees.
    parked: Option<(Request, RecordCrcs)>,
    reading: bool,
    read_closed: bool,
    /// A closing nack is queued: read nothing more, close once it is written.
    closing: bool,
    next_token: u64,
    /// When its idle wait began, for the listener's eviction at the cap.
    idle_mark: Arc<IdleMark>,
    /// The read in flight is an idle wait (marked in `idle_mark`).
    idle_wait: bool,
    _live: LiveGuard,
}

impl Connection {
    /// Start a connection actor on the current arbiter. The listener has
    /// already counted it in `shared.live`.
    pub fn new(
        id: u64,
        stream: Stream,
        shard: Arc<ShardQueue>,
        shared: Arc<ConnectionContext>,
    ) -> Self {
        let responder = Responder::new(stream.direct_fd(), shared.stats.clone());
        let (reader, writer) = stream.split();
        let live = LiveGuard(shared.live.clone());
        Connection {
            id,
            shard,
            shared,
            reader: Some(reader),
            writer,
            responder,
            // Nothing until the first bytes come (see reserve_for_frame).
            rbuf: BytesMut::new(),
            frame_started: None,
            reserved: 0,
            budget_wait: false,
            write_stalled_since: None,
            parked: None,
            reading: false,
            read_closed: false,
            closing: false,
            next_token: 0,
            idle_mark: Arc::new(IdleMark::default()),
            idle_wait: false,
            _live: live,
        }
    }

    fn window_full(&self, st: &State) -> bool {
        let l = &self.shared.limits;
        st.slots.len() >= l.inflight_records_max
            || st.inflight_records >= l.inflight_records_max
            || st.inflight_bytes >= l.inflight_bytes_max
            || st.out.len() >= l.out_bytes_max()
    }

    /// Whether `req` fits the in-flight window now. One that does not is
    /// parked until answers free the window.
    fn fits(&self, st: &State, req: &Request) -> bool {
        let l = &self.shared.limits;
        if st.slots.len() >= l.inflight_records_max {
            return false;
        }
        if matches!(req, Request::HealthCheck) || st.inflight_records == 0 {
            return true;
        }
        st.inflight_records + req.record_count() <= l.inflight_records_max
            && st.inflight_bytes + req.payload_bytes() as u64 <= l.inflight_bytes_max
    }

    /// Whether the parked frame can be taken in now: it fits the window and
    /// the unwritten acks are under their cap.
    fn parked_fits(&self) -> bool {
        let Some((req, _)) = &self.parked else {
            return false;
        };
        let st = self.responder.lock();
        !self.closing && self.fits(&st, req) && st.out.len() < self.shared.limits.out_bytes_max()
    }

    /// The frame at the front needs read budget that others hold: wait
    /// without reading (holding at most READ_CHUNK) until some is released
    /// after `epoch`, and look again. The stall clock does not run
    /// meanwhile; it is not the client's fault.
    fn wait_for_budget(&mut self, epoch: u64, ctx: &mut Context<Self>) {
        self.budget_wait = true;
        self.shared
            .stats
            .read_buffer_pauses
            .fetch_add(1, Ordering::Relaxed);
        let budget = self.shared.read_budget.clone();
        let fut = async move { budget.wait_for_release(epoch, BUDGET_RETRY_MAX).await };
        ctx.spawn(fut.into_actor(self).map(|_, act, ctx| {
            act.budget_wait = false;
            if act.frame_started.is_some() {
                act.frame_started = Some(Instant::now());
            }
            act.read_more(ctx);
        }));
    }

    /// Take in the parked frame if it now fits, else start the next read
    /// unless reading is paused (window, parked frame, closing).
    ///
    /// Every path that frees the window ends here (a commit's [`Progress`],
    /// the end of an asynchronous write), so a parked frame never waits for
    /// an event that will not come: when the last acks were answered while
    /// the socket was full, only the end of the write can resume it.
    fn read_more(&mut self, ctx: &mut Context<Self>) {
        if self.reading {
            return;
        }
        if self.parked_fits() {
            self.process(ctx);
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
        if self.budget_wait {
            return;
        }
        let epoch = self.shared.read_budget.epoch();
        if !self.reserve_for_frame() {
            self.wait_for_budget(epoch, ctx);
            return;
        }
        let Some(mut reader) = self.reader.take() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.rbuf);
        let limit = match self.frame_started {
            Some(t) => Wait::Stall(self.shared.limits.read_timeout.saturating_sub(t.elapsed())),
            None if buf.is_empty() => Wait::Idle(self.shared.limits.idle_timeout),
            None => Wait::Stall(self.shared.limits.read_timeout),
        };
        self.reading = true;
        self.idle_wait =
            matches!(limit, Wait::Idle(_)) && self.shared.limits.evict_idle_after.is_some();
        if self.idle_wait {
            self.idle_mark.set_idle(self.shared.idle.now());
        }
        let fut = async move {
            let result = match limit {
                Wait::Stall(d) => match tokio::time::timeout(d, reader.read_buf(&mut buf)).await {
                    Ok(r) => ReadEnd::Data(r),
                    Err(_) => ReadEnd::Stalled,
                },
                Wait::Idle(d) => {
                    let keep = IDLE_KEEP_BUFFER.min(d);
                    // read_buf is cancel safe: a timeout read nothing.
                    match tokio::time::timeout(keep, reader.read_buf(&mut buf)).await {
                        Ok(r) => ReadEnd::Data(r),
                        Err(_) => {
                            // Waiting idle means nothing is buffered; only
                            // an empty buffer is given back.
                            debug_assert!(buf.is_empty());
                            if buf.is_empty() {
                                buf = BytesMut::new();
                            }
                            match tokio::time::timeout(d - keep, reader.read_buf(&mut buf)).await {
                                Ok(r) => ReadEnd::Data(r),
                                Err(_) => ReadEnd::Idle,
                            }
                        }
                    }
                }
            };
            (reader, buf, result)
        };
        ctx.spawn(fut.into_actor(self).map(|(reader, buf, result), act, ctx| {
            act.reader = Some(reader);
            act.rbuf = buf;
            act.reading = false;
            if std::mem::take(&mut act.idle_wait) && act.idle_mark.set_busy() {
                // Evicted while idle: what arrived since is not taken in
                // (nothing of it was answered; the producer sends it again).
                ctx.stop();
                return;
            }
            act.on_read(result, ctx);
        }));
    }

    /// Make room for more of the frame at the front of the buffer. A frame
    /// that fits [`READ_CHUNK`] needs nothing; a larger one (its length is
    /// known once its header is in) first reserves its size from the shared
    /// budget, so the budget caps what all partially received frames hold
    /// together; its memory becomes resident as its bytes arrive: a client
    /// that declares 16 MiB and sends 15 holds about 15. False: no budget
    /// yet, wait.
    fn reserve_for_frame(&mut self) -> bool {
        if self.rbuf.capacity() == 0 {
            // A new connection, or one that gave its buffer back while
            // idle: its next read takes what comes in a small buffer of
            // its own, and the buffer grows once bytes are there.
            return true;
        }
        let mut need = READ_CHUNK;
        if self.rbuf.len() >= HEADER_LEN {
            let len = u32::from_le_bytes(self.rbuf[8..12].try_into().unwrap());
            if len <= self.shared.limits.payload_bytes_max {
                let frame = HEADER_LEN + len as usize + TRAILER_LEN;
                if frame > READ_CHUNK && self.reserved == 0 {
                    if !self.take_budget(frame as u64) {
                        return false;
                    }
                    if self.rbuf.capacity() < frame {
                        // One buffer of the frame's size (a new allocation is
                        // address space, not memory: its pages become
                        // resident only as the bytes arrive), rather than
                        // doubling steps that copy and leave freed buffers
                        // behind in the heap; a finished frame's buffer when
                        // one is free (see crate::ingest::frame_buffers).
                        let mut sized = self
                            .shared
                            .read_budget
                            .frame_buffers
                            .take(frame.max(self.rbuf.len()));
                        sized.extend_from_slice(&self.rbuf);
                        self.rbuf = sized;
                    }
                }
                let remaining = frame.saturating_sub(self.rbuf.len());
                need = remaining.min(READ_CHUNK);
            }
        }
        if self.rbuf.capacity() - self.rbuf.len() < need / 4 {
            self.rbuf.reserve(need);
        }
        true
    }

    /// Reserve `bytes` of the read-buffer budget for the front frame. The
    /// first reservation always succeeds (the cap is at least the largest
    /// frame), so one frame can always make progress.
    fn take_budget(&mut self, bytes: u64) -> bool {
        let held = &self.shared.stats.read_buffer_bytes;
        if !ReadBudget::reserve(held, bytes, self.shared.limits.read_buffer_bytes_max) {
            return false;
        }
        self.reserved = bytes;
        true
    }

    /// Starts, moves or ends the current frame's stall clock, keeping the
    /// daemon's count of connections mid-frame.
    fn set_frame_started(&mut self, started: Option<Instant>) {
        let gauge = &self.shared.stats.connections_mid_frame;
        match (self.frame_started.is_some(), started.is_some()) {
            (false, true) => {
                gauge.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                gauge.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.frame_started = started;
    }

    /// The reserved frame is decoded (or the connection is going away).
    fn release_budget(&mut self) {
        if self.reserved > 0 {
            let held = &self.shared.stats.read_buffer_bytes;
            self.shared.read_budget.release(held, self.reserved);
            self.reserved = 0;
        }
    }

    fn on_read(&mut self, result: ReadEnd, ctx: &mut Context<Self>) {
        match result {
            ReadEnd::Data(Ok(0)) => {
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
            ReadEnd::Data(Ok(_)) => self.process(ctx),
            ReadEnd::Stalled => {
                self.shared
                    .stats
                    .read_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                if self.shared.stats.log_limiter.allow() {
                    tracing::warn!(
                        conn = self.id,
                        buffered = self.rbuf.len(),
                        timeout_ms = self.shared.limits.read_timeout.as_millis() as u64,
                        "a frame stalled mid-way for longer than server.connection_read_timeout_ms; closing the connection"
                    );
                }
                ctx.stop();
            }
            ReadEnd::Idle => {
                let waiting = !self.responder.lock().slots.is_empty();
                if waiting {
                    // Not idle: earlier frames still wait for their acks.
                    self.read_more(ctx);
                    return;
                }
                self.shared
                    .stats
                    .idle_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    conn = self.id,
                    idle_ms = self.shared.limits.idle_timeout.as_millis() as u64,
                    "closing a connection idle for server.connection_idle_timeout_ms"
                );
                ctx.stop();
            }
            ReadEnd::Data(Err(e)) => {
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
                    match decode_request_crcs(&mut self.rbuf, self.shared.limits.payload_bytes_max)
                    {
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
        if consumed_frame {
            // The reserved frame was the one at the front: it is decoded, its
            // bytes now belong to records bounded by the in-flight window.
            self.release_budget();
            if self.rbuf.capacity() == 0 {
                // A frame that filled its buffer leaves an empty handle on
                // it: let go, so the buffer's only owners are its records
                // and crate::ingest::frame_buffers, which takes it back once they
                // are written (the next read would otherwise reclaim it
                // for a header, or copy 64 KiB into a new one).
                self.rbuf = BytesMut::new();
            }
        }
        let started = if self.rbuf.is_empty() || self.parked.is_some() {
            None
        } else if consumed_frame {
            Some(Instant::now())
        } else {
            self.frame_started.or(Some(Instant::now()))
        };
        self.set_frame_started(started);
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
        req: (Request, RecordCrcs),
        token: u64,
        batch: &mut Building,
    ) -> Result<(), (Request, RecordCrcs)> {
        let (req, crcs) = req;
        if !self.fits(st, &req) {
            return Err((req, crcs));
        }
        let (tier, is_batch) = match req {
            Request::HealthCheck => {
                // Healthy means this connection's pushes can be written now;
                // otherwise the answer is the nack a push would get.
                let answer = match self.shard.refusal() {
                    None => Response::HealthCheckResponse,
                    Some(reason) => Response::Nack(reason),
                };
                st.slots.push_back(Slot::Ready(answer));
                return Ok(());
            }
            Request::Push { tier, .. } => (tier, false),
            Request::PushBatch { tier, .. } => (tier, true),
        };
        let n = req.record_count();
        let bytes = req.payload_bytes() as u64;
        let disk_bytes = match self.shard.admit(bytes, n, batch.disk_bytes) {
            Ok(disk_bytes) => disk_bytes,
            Err(reason) => {
                self.nack_retryable(st, reason);
                return Ok(());
            }
        };
        let meta = RecordMeta {
            tier: tier.as_byte(),
            arrival_unix_us: batch.arrival_us(),
        }
        .pack();
        match req {
            Request::Push { payload, .. } => {
                batch.records.push_one_checked(payload, crcs.get(0), meta)
            }
            Request::PushBatch { records, .. } => batch.records.push_batch(records, crcs, meta),
            Request::HealthCheck => unreachable!("answered above"),
        }
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
    ///
    /// A peer that takes none of our bytes for `connection_idle_timeout_ms`
    /// (a producer that never reads its acks) is closed, as one that sends
    /// nothing is: it would otherwise hold a connection slot for ever. Not
    /// sooner: while it waits it costs the daemon nothing but its unwritten
    /// acks (bounded by the window), whereas closing it invites it to
    /// reconnect and push another window of records the disk must write.
    fn write_when_ready(&mut self, ctx: &mut Context<Self>) {
        let writer = match &mut self.writer {
            Writer::Ready(w) => w.clone(),
            Writer::Tls(_) => return self.write_tls(ctx),
        };
        let since = *self.write_stalled_since.get_or_insert_with(Instant::now);
        let left = self
            .shared
            .limits
            .idle_timeout
            .saturating_sub(since.elapsed());
        let fut = async move { tokio::time::timeout(left, writer.writable()).await };
        ctx.spawn(fut.into_actor(self).map(|r, act, ctx| {
            let r = match r {
                Ok(r) => r,
                Err(_) => return act.close_for_write_stall(ctx),
            };
            if let Err(e) = r {
                tracing::debug!(conn = act.id, error = %e, "socket failed; closing");
                ctx.stop();
                return;
            }
            let responder = act.responder.clone();
            let mut st = responder.lock();
            while !st.out.is_empty() {
                let Writer::Ready(w) = &act.writer else {
                    unreachable!("a socket's writer stays a socket's")
                };
                match w.try_write(&st.out) {
                    Ok(n) => {
                        if n > 0 {
                            // Progress: the stall clock starts again.
                            act.write_stalled_since = Some(Instant::now());
                        }
                        st.out.advance(n)
                    }
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
            act.write_stalled_since = None;
            drop(st);
            act.flush(ctx);
        }));
    }
}

impl Connection {
    /// The peer took none of our bytes for `connection_idle_timeout_ms`:
    /// counted, logged (at most once a second), closed.
    fn close_for_write_stall(&mut self, ctx: &mut Context<Self>) {
        self.shared
            .stats
            .write_timeouts
            .fetch_add(1, Ordering::Relaxed);
        if self.shared.stats.log_limiter.allow() {
            tracing::warn!(
                conn = self.id,
                timeout_ms = self.shared.limits.idle_timeout.as_millis() as u64,
                "the peer read none of its responses for server.connection_idle_timeout_ms; closing the connection"
            );
        }
        ctx.stop();
    }

    /// A TLS stream: write everything answered so far through rustls, off
    /// the actor, then look again (the flusher may have answered more
    /// meanwhile). The same stall bound as a socket's: a peer that takes
    /// none of it for `connection_idle_timeout_ms` is closed.
    fn write_tls(&mut self, ctx: &mut Context<Self>) {
        let Writer::Tls(slot) = &mut self.writer else {
            return;
        };
        let Some(mut w) = slot.take() else {
            return; // a write is in flight; it looks again when done
        };
        let bytes = self.responder.lock().out.split().freeze();
        let left = self.shared.limits.idle_timeout;
        let fut = async move {
            let r = tokio::time::timeout(left, async {
                w.write_all(&bytes).await?;
                w.flush().await
            })
            .await;
            (w, r)
        };
        ctx.spawn(fut.into_actor(self).map(|(w, r), act, ctx| {
            act.writer = Writer::Tls(Some(w));
            match r {
                Ok(Ok(())) => {
                    act.responder.lock().writing_async = false;
                    act.flush(ctx);
                }
                Ok(Err(e)) => {
                    tracing::debug!(conn = act.id, error = %e, "TLS write failed; closing");
                    ctx.stop();
                }
                Err(_) => act.close_for_write_stall(ctx),
            }
        }));
    }
}

/// Which clock bounds the next read.
#[derive(Clone, Copy)]
enum Wait {
    /// A frame has started: it must be complete within this.
    Stall(Duration),
    /// Nothing has started: the connection may sit idle this long.
    Idle(Duration),
}

/// How a read ended.
enum ReadEnd {
    Data(io::Result<usize>),
    Stalled,
    Idle,
}

/// The batch being assembled from one read.
#[derive(Default)]
struct Building {
    records: PendingRecords,
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
        if self.shared.limits.evict_idle_after.is_some() {
            self.shared.idle.register(
                self.id,
                self.idle_mark.clone(),
                self.responder.clone(),
                ctx.address().recipient(),
            );
        }
        self.read_more(ctx);
    }
}

impl Drop for Connection {
    /// Before the socket halves are dropped (after this body), make sure no
    /// flusher thread writes to the descriptor again.
    fn drop(&mut self) {
        self.set_frame_started(None);
        self.responder.lock().closed = true;
        self.release_budget();
        self.shared.idle.remove(self.id);
    }
}

impl Handler<Evict> for Connection {
    type Result = ();

    /// The listener claimed this idle connection to make room at
    /// `connections_max` (see [`crate::ingest::idle`]).
    fn handle(&mut self, _: Evict, ctx: &mut Context<Self>) {
        if self.idle_mark.claimed() {
            tracing::debug!(
                conn = self.id,
                "closing an idle connection to make room for a new one at server.connections_max"
            );
            ctx.stop();
        }
    }
}

impl Handler<Progress> for Connection {
    type Result = ();

    fn handle(&mut self, _: Progress, ctx: &mut Context<Self>) {
        self.flush(ctx);
    }
}

/// Shared id source for connections (log correlation).
pub static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);
