package dev.spillway.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Many requests in flight on one connection (from {@link Client#pipeline(int)}).
 *
 * <p>{@code push}, {@code pushBatch} and {@code health} queue a request and
 * return its sequence number without waiting for the answer. Requests are
 * written in groups (when 64 KiB are buffered or the window is full). When
 * {@code window} requests are outstanding, queuing another first reads
 * answers, so at most {@code window} are ever in flight; and while a write is
 * blocked the connection keeps reading answers, so the daemon and the client
 * can never wait on each other.
 *
 * <p>There are no request ids: answers are matched to requests strictly in
 * order. {@link #recv()} hands out the next {@link Outcome}; {@link #flush()}
 * writes everything and waits for every outstanding answer, returning one
 * outcome per request in order. A request that was queued always gets an
 * outcome: acked, nacked (a retryable nack leaves the pipeline usable), or
 * failed with the connection error that ended it (timeout, closed, protocol).
 *
 * <p>{@code push}, {@code pushBatch} and {@code health} throw only when the
 * request was <em>not</em> queued: a local refusal ({@link RecordRejectedException}),
 * a connection already unusable, or an error while reading answers to make
 * room (the outcomes of the earlier requests are then in {@link #flush()}).
 *
 * <p>Not thread-safe. While a pipeline is open its client's blocking calls
 * are refused. {@link #close()} drops requests not yet written (they were
 * never acked) and leaves the answers to written ones to be discarded by the
 * client's next call.
 */
public final class Pipeline implements AutoCloseable {
    /** Buffered bytes past which queued requests are written out. */
    private static final int FLUSH_THRESHOLD = 64 * 1024;

    private final Client owner;
    private final Conn conn;
    private final int window;
    private final int payloadBytesMax;

    /** Outstanding requests, oldest first: (message type << 32) | record count. Power-of-two ring. */
    private long[] pending;
    private int phead;
    private int pcount;
    /** How many of the newest pending requests are still only in the write buffer. */
    private int unflushed;
    private long nextSeq;
    private long headSeq;
    private final ArrayDeque<Outcome> ready = new ArrayDeque<>();
    /** The error that ended the connection, if one did. */
    private SpillwayException failure;
    private boolean closed;

    Pipeline(Client owner, Conn conn, int window) {
        if (window < 1) {
            throw new IllegalArgumentException("window must be at least 1, not " + window);
        }
        this.owner = owner;
        this.conn = conn;
        this.window = window;
        this.payloadBytesMax = conn.options.payloadBytesMax();
        // A power of two >= the window (at most 1024 to start with; it grows if needed).
        this.pending = new long[Integer.highestOneBit(Math.min(Math.max(window, 2), 1024) - 1) << 1];
    }

    /** The most requests in flight at once. */
    public int window() {
        return window;
    }

    /** Queues one Push; returns its sequence number. */
    public long push(Tier tier, byte[] record) throws SpillwayException {
        Limits.checkPush(record, payloadBytesMax);
        admit(Codec.HEADER_LEN + record.length + Codec.TRAILER_LEN);
        conn.w.push(tier.code(), record);
        return queued(Codec.ACK, 1);
    }

    /** Queues one PushBatch of these records; its outcome counts them all. Returns its sequence number. */
    public long pushBatch(Tier tier, List<byte[]> records) throws SpillwayException {
        int payload = Limits.checkBatch(records, payloadBytesMax);
        admit(Codec.HEADER_LEN + payload + Codec.TRAILER_LEN);
        conn.w.pushBatch(tier.code(), records, payload);
        return queued(Codec.ACK_BATCH, records.size());
    }

    /** Queues one PushBatch of these records. Returns its sequence number. */
    public long pushBatch(Tier tier, byte[]... records) throws SpillwayException {
        int payload = Limits.checkBatch(Arrays.asList(records), payloadBytesMax);
        admit(Codec.HEADER_LEN + payload + Codec.TRAILER_LEN);
        conn.w.pushBatch(tier.code(), records, payload);
        return queued(Codec.ACK_BATCH, records.length);
    }

    /** Queues one HealthCheck. Returns its sequence number. */
    public long health() throws SpillwayException {
        admit(Codec.HEADER_LEN + Codec.TRAILER_LEN);
        conn.w.healthCheck();
        return queued(Codec.HEALTH_CHECK_RESPONSE, 0);
    }

    /**
     * Writes every queued request to the socket now, without waiting for any
     * answer. (Queued requests are also written by themselves once 64 KiB are
     * buffered or the window is full, and by {@link #recv()} and {@link #flush()}.)
     * A failed write is reported in the outcomes of the requests it ended.
     */
    public void send() {
        ensureOpen();
        sendBuffered();
    }

    /** Requests queued whose outcome has not been handed out yet. */
    public int outstanding() {
        return pcount + ready.size();
    }

    /**
     * The next outcome in request order, writing and waiting as needed.
     *
     * @throws IllegalStateException if nothing is outstanding
     */
    public Outcome recv() {
        if (ready.isEmpty()) {
            if (pcount == 0) {
                throw new IllegalStateException("recv() with no request outstanding");
            }
            if (sendBuffered() && readOne() == null) {
                drainBuffered();
            }
        }
        return ready.poll();
    }

    /**
     * Writes every queued request and waits for every answer (each within the
     * read timeout); returns the outcome of every request not yet handed out
     * by {@link #recv()}, in request order. Never throws for a failed request:
     * check each {@link Outcome#ok()}.
     */
    public List<Outcome> flush() {
        ensureOpen();
        if (sendBuffered()) {
            while (pcount > 0 && readOne() == null) {
                drainBuffered();
            }
        }
        List<Outcome> out = new ArrayList<>(ready);
        ready.clear();
        return out;
    }

    /**
     * {@link #flush()}, then throws the first failure if any request failed;
     * else returns the number of records acked.
     */
    public long flushOrThrow() throws SpillwayException {
        long records = 0;
        for (Outcome o : flush()) {
            if (!o.ok()) {
                throw o.error();
            }
            records += o.records();
        }
        return records;
    }

    /** Drops unwritten requests and outcomes not yet handed out; gives the connection back to the client. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        int written = pcount - unflushed;
        conn.w.clear();
        conn.stale += written;
        pcount = 0;
        unflushed = 0;
        ready.clear();
        owner.pipelineClosed(this);
    }

    // ---- internals -----------------------------------------------------------------

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("the pipeline is closed");
        }
    }

    /** Before encoding a request of {@code frameLen} bytes: room in the window and in the write buffer. */
    private void admit(int frameLen) throws SpillwayException {
        ensureOpen();
        if (failure != null || !conn.isUsable()) {
            throw conn.unusableError();
        }
        while (pcount >= window) {
            if (!sendBuffered()) {
                throw conn.unusableError();
            }
            SpillwayException e = readOne();
            if (e != null) {
                throw e;
            }
            drainBuffered();
            if (failure != null) {
                throw conn.unusableError();
            }
        }
        if (conn.w.buf.remaining() < frameLen) {
            if (!sendBuffered()) {
                throw conn.unusableError();
            }
            conn.w.ensure(frameLen);
        }
    }

    private long queued(int type, int records) {
        if (pcount == pending.length) {
            long[] bigger = new long[pending.length * 2];
            for (int i = 0; i < pcount; i++) {
                bigger[i] = pending[(phead + i) & (pending.length - 1)];
            }
            pending = bigger;
            phead = 0;
        }
        pending[(phead + pcount) & (pending.length - 1)] = ((long) type << 32) | (records & 0xffffffffL);
        pcount++;
        unflushed++;
        long seq = nextSeq++;
        if (conn.w.position() >= FLUSH_THRESHOLD || pcount >= window) {
            sendBuffered();
        }
        return seq;
    }

    /** Writes buffered requests; on failure every pending request fails (after keeping answers already in). */
    private boolean sendBuffered() {
        if (failure != null) {
            return false;
        }
        if (unflushed == 0) {
            return true;
        }
        unflushed = 0;
        try {
            conn.send();
            return true;
        } catch (SpillwayException e) {
            drainBuffered();
            if (failure == null) {
                failure = e;
            }
            failPending(failure);
            return false;
        }
    }

    /** Reads the answer to the oldest pending request; returns the connection error if that failed. */
    private SpillwayException readOne() {
        long r;
        try {
            r = conn.next();
        } catch (SpillwayTimeoutException e) {
            // Their answers may still come: they belong to no later request.
            conn.stale += pcount;
            failPending(e);
            return e;
        } catch (SpillwayException e) {
            failure = e;
            failPending(e);
            return e;
        }
        matched(r);
        return failure;
    }

    /** Matches the answers already read (no I/O). */
    private void drainBuffered() {
        while (pcount > 0 && failure == null) {
            long r;
            try {
                r = conn.poll();
            } catch (ProtocolException e) {
                failure = e;
                failPending(e);
                return;
            }
            if (r == Codec.NEED_MORE) {
                return;
            }
            matched(r);
        }
    }

    private static Outcome.Request requestOf(int type) {
        switch (type) {
            case Codec.ACK: return Outcome.Request.PUSH;
            case Codec.ACK_BATCH: return Outcome.Request.PUSH_BATCH;
            default: return Outcome.Request.HEALTH_CHECK;
        }
    }

    private void matched(long r) {
        long expect = pending[phead];
        phead = (phead + 1) & (pending.length - 1);
        pcount--;
        long seq = headSeq++;
        int type = (int) (expect >>> 32);
        int records = (int) expect;
        Outcome.Request request = requestOf(type);
        int got = Codec.typeOf(r);
        if (got == Codec.NACK) {
            NackReason reason = Codec.nackReasonOf(r);
            ready.add(new Outcome(seq, request, records, new NackException(reason, Codec.daemonVersionOf(r))));
            if (reason.closesConnection()) {
                ConnectionClosedException c = new ConnectionClosedException("not processed: the daemon closed the "
                    + "connection after nacking request #" + seq + " (" + reason.wireName() + ")");
                conn.markUnusable(c);
                failure = c;
                failPending(c);
            }
            return;
        }
        if (got == type && (type != Codec.ACK_BATCH || Codec.countOf(r) == (records & 0xffffffffL))) {
            ready.add(new Outcome(seq, request, records, null));
            return;
        }
        ProtocolException e = type == Codec.ACK_BATCH && got == Codec.ACK_BATCH
            ? new ProtocolException("the daemon acked " + Codec.countOf(r) + " records of a " + records
                + "-record batch (an AckBatch must count every record)")
            : new ProtocolException("the daemon answered " + Codec.describe(r) + " where " + expectedName(type)
                + " was expected");
        ready.add(new Outcome(seq, request, records, e));
        conn.markUnusable(e);
        failure = e;
        failPending(e);
    }

    static String expectedName(int type) {
        switch (type) {
            case Codec.ACK: return "Ack";
            case Codec.ACK_BATCH: return "AckBatch";
            default: return "HealthCheckResponse";
        }
    }

    private void failPending(SpillwayException e) {
        while (pcount > 0) {
            long expect = pending[phead];
            phead = (phead + 1) & (pending.length - 1);
            pcount--;
            ready.add(new Outcome(headSeq++, requestOf((int) (expect >>> 32)), (int) expect, e));
        }
        unflushed = 0;
        conn.w.clear();
    }
}
