package dev.spillway.client;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * A blocking connection to a spillway (or weir v1) daemon's Unix socket:
 * each call sends one request and waits for its answer (within the read
 * timeout). For throughput, {@link #pipeline(int)} keeps many requests in
 * flight on this connection.
 *
 * <pre>{@code
 * try (Client c = Client.connect(Path.of("/run/spillway/spillway.sock"))) {
 *     c.health();
 *     c.push(Tier.SYNC, "order 1042 shipped".getBytes(UTF_8));
 * }
 * }</pre>
 *
 * <p>Not thread-safe: use one client per thread (connections are cheap).
 */
public final class Client implements AutoCloseable {
    private final Conn conn;
    private Pipeline active;

    private Client(Conn conn) {
        this.conn = conn;
    }

    /** Connects with {@link ClientOptions#defaults()}. */
    public static Client connect(Path socketPath) throws SpillwayException {
        return connect(socketPath, ClientOptions.defaults());
    }

    /** Connects to the daemon listening at {@code socketPath}. */
    public static Client connect(Path socketPath, ClientOptions options) throws SpillwayException {
        return new Client(Conn.open(socketPath, options));
    }

    /** Connects with {@link ClientOptions#defaults()}. */
    public static Client connect(String socketPath) throws SpillwayException {
        return connect(Path.of(socketPath));
    }

    public ClientOptions options() {
        return conn.options;
    }

    public Path socketPath() {
        return conn.path;
    }

    /** Bytes written to the socket so far (a local refusal writes none). */
    public long bytesSent() {
        return conn.bytesSent();
    }

    /** False once the connection was closed or an error made it unusable; then reconnect. */
    public boolean isUsable() {
        return conn.isUsable();
    }

    /**
     * Stores one record at {@code tier}; returns once the daemon has acked it.
     *
     * @throws RecordRejectedException if the record is empty or over payloadBytesMax (nothing sent)
     * @throws NackException if the daemon refused it; resend only if {@link NackException#isRetryable()}
     */
    public void push(Tier tier, byte[] record) throws SpillwayException {
        Limits.checkPush(record, conn.options.payloadBytesMax());
        ready();
        conn.w.ensure(Codec.HEADER_LEN + record.length + Codec.TRAILER_LEN);
        conn.w.push(tier.code(), record);
        expect(roundTrip(), Codec.ACK, 0);
    }

    /**
     * Stores {@code records} at {@code tier} in one PushBatch frame; returns the
     * number of records acked, always {@code records.size()} (an AckBatch with
     * another count is a {@link ProtocolException}). A plain weir daemon answers
     * with an unknown_message nack.
     *
     * @throws RecordRejectedException if there are no records, one is empty, or the
     *     payload 4 + Σ(4 + len) is over payloadBytesMax (nothing sent)
     */
    public int pushBatch(Tier tier, List<byte[]> records) throws SpillwayException {
        int payload = Limits.checkBatch(records, conn.options.payloadBytesMax());
        ready();
        conn.w.ensure(Codec.HEADER_LEN + payload + Codec.TRAILER_LEN);
        conn.w.pushBatch(tier.code(), records, payload);
        expect(roundTrip(), Codec.ACK_BATCH, records.size());
        return records.size();
    }

    /** {@link #pushBatch(Tier, List)} for an array of records. */
    public int pushBatch(Tier tier, byte[]... records) throws SpillwayException {
        return pushBatch(tier, Arrays.asList(records));
    }

    /**
     * Asks the daemon whether it is alive. A nack (overloaded or internal_error
     * while the connection's shard cannot write) is thrown as {@link NackException}.
     */
    public void health() throws SpillwayException {
        ready();
        conn.w.healthCheck();
        expect(roundTrip(), Codec.HEALTH_CHECK_RESPONSE, 0);
    }

    /** A pipelined sender with a window of 64 requests in flight. */
    public Pipeline pipeline() {
        return pipeline(64);
    }

    /**
     * A pipelined sender on this connection with up to {@code window} requests in
     * flight. Until it is closed, this client's own calls are refused.
     */
    public Pipeline pipeline(int window) {
        if (active != null) {
            throw new IllegalStateException("a pipeline is already open on this client");
        }
        Pipeline p = new Pipeline(this, conn, window);
        active = p;
        return p;
    }

    void pipelineClosed(Pipeline p) {
        if (active == p) {
            active = null;
        }
    }

    /** Closes the connection (and any open pipeline). Idempotent. */
    @Override
    public void close() {
        if (active != null) {
            active.close();
        }
        conn.close();
    }

    private void ready() throws SpillwayException {
        if (active != null) {
            throw new IllegalStateException("a pipeline is open on this client: use it, or close it first");
        }
        conn.checkUsable();
    }

    /** Writes the one encoded request and reads its answer. */
    private long roundTrip() throws SpillwayException {
        try {
            conn.send();
        } catch (ConnectionClosedException e) {
            // The daemon may have said why it hung up before it did.
            long r = conn.pollQuietly();
            if (r != Codec.NEED_MORE && Codec.typeOf(r) == Codec.NACK) {
                return r;
            }
            throw e;
        }
        try {
            return conn.next();
        } catch (SpillwayTimeoutException e) {
            // The answer may still come; it belongs to no later request.
            conn.stale++;
            throw e;
        }
    }

    private void expect(long r, int type, int records) throws SpillwayException {
        int got = Codec.typeOf(r);
        if (got == Codec.NACK) {
            NackReason reason = Codec.nackReasonOf(r);
            NackException e = new NackException(reason, Codec.daemonVersionOf(r));
            if (reason.closesConnection()) {
                conn.markUnusable(new ConnectionClosedException(
                    "the daemon closed the connection after nacking a request (" + reason.wireName() + ")"));
            }
            throw e;
        }
        if (got == type && (type != Codec.ACK_BATCH || Codec.countOf(r) == (records & 0xffffffffL))) {
            return;
        }
        ProtocolException e = type == Codec.ACK_BATCH && got == Codec.ACK_BATCH
            ? new ProtocolException("the daemon acked " + Codec.countOf(r) + " records of a " + records
                + "-record batch (an AckBatch must count every record)")
            : new ProtocolException("the daemon answered " + Codec.describe(r) + " where "
                + Pipeline.expectedName(type) + " was expected");
        conn.markUnusable(e);
        throw e;
    }
}
