package dev.spillway.client;

import java.io.Closeable;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;

/**
 * The connection shared by {@link Client} and {@link Pipeline}: a
 * non-blocking Unix socket driven by a {@link Selector} so every wait has a
 * deadline, one reusable write buffer, one reusable read buffer, and the
 * bookkeeping that keeps answers matched to requests.
 *
 * <p>While a write cannot make progress it keeps reading: answers that arrive
 * are decoded into a queue, so the daemon never blocks writing to us while we
 * block writing to it.
 */
final class Conn implements Closeable {
    private static final int READ_BUF_BYTES = 64 * 1024;
    static final int WRITE_BUF_BYTES = 128 * 1024;
    private static final int WRITE_BUF_KEEP_MAX = 4 * 1024 * 1024;

    final Path path;
    final ClientOptions options;
    final FrameWriter w = new FrameWriter(WRITE_BUF_BYTES);

    private final SocketChannel ch;
    private final Selector selector;
    private final SelectionKey key;
    private final long readTimeoutNanos;
    private final long writeTimeoutNanos;

    /** Bytes read, not yet decoded: {@code [rstart, rbuf.position())}. */
    private final ByteBuffer rbuf = ByteBuffer.allocateDirect(READ_BUF_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    private final Codec.Crc rcrc = new Codec.Crc(rbuf);
    private int rstart;

    /** Answers decoded while a write was blocked, not yet handed out (power-of-two ring). */
    private long[] queue = new long[64];
    private int qhead;
    private int qsize;
    /** A decode error met while reading during a write; raised after the queued answers. */
    private ProtocolException deferred;

    private boolean eof;
    private IOException eofCause;

    /**
     * Answers still owed for requests whose callers gave up on them (a read
     * timed out, a pipeline was closed): read and discarded before any later one.
     */
    int stale;

    /** Set once no request may be sent any more, with the reason. */
    private SpillwayException unusable;
    private boolean closed;
    private long bytesSent;

    private Conn(Path path, ClientOptions options, SocketChannel ch, Selector selector, SelectionKey key) {
        this.path = path;
        this.options = options;
        this.ch = ch;
        this.selector = selector;
        this.key = key;
        this.readTimeoutNanos = options.readTimeout().toNanos();
        this.writeTimeoutNanos = options.writeTimeout().toNanos();
    }

    static Conn open(Path path, ClientOptions options) throws SpillwayException {
        long deadline = System.nanoTime() + options.connectTimeout().toNanos();
        UnixDomainSocketAddress address;
        try {
            address = UnixDomainSocketAddress.of(path);
        } catch (RuntimeException e) {
            throw new SpillwayException("connecting to " + path + ": " + e.getMessage(), e);
        }
        for (;;) {
            SocketChannel ch = null;
            Selector selector = null;
            try {
                ch = SocketChannel.open(StandardProtocolFamily.UNIX);
                ch.configureBlocking(false);
                selector = Selector.open();
                boolean connected = ch.connect(address);
                SelectionKey key = ch.register(selector, connected ? SelectionKey.OP_READ : SelectionKey.OP_CONNECT);
                while (!connected) {
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        throw new SpillwayTimeoutException("connecting to " + path + ": not connected within the "
                            + "connect timeout of " + options.connectTimeout().toMillis() + " ms");
                    }
                    selector.select(Math.max(1, left / 1_000_000));
                    selector.selectedKeys().clear();
                    connected = ch.finishConnect();
                }
                key.interestOps(SelectionKey.OP_READ);
                return new Conn(path, options, ch, selector, key);
            } catch (SpillwayException e) {
                closeQuietly(ch, selector);
                throw e;
            } catch (IOException | RuntimeException e) {
                closeQuietly(ch, selector);
                String msg = String.valueOf(e.getMessage());
                // A full listen backlog (EAGAIN) clears as the daemon accepts: retry until the deadline.
                if (msg.contains("temporarily unavailable") && deadline - System.nanoTime() > 0) {
                    sleepQuietly(2);
                    continue;
                }
                throw new SpillwayException("connecting to " + path + ": " + msg, e);
            }
        }
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void closeQuietly(SocketChannel ch, Selector selector) {
        try {
            if (selector != null) {
                selector.close();
            }
        } catch (IOException ignored) {
            // nothing to do
        }
        try {
            if (ch != null) {
                ch.close();
            }
        } catch (IOException ignored) {
            // nothing to do
        }
    }

    long bytesSent() {
        return bytesSent;
    }

    boolean isUsable() {
        return unusable == null && !closed;
    }

    /** Refuses further requests, e.g. after a nack after which the daemon closes the connection. */
    void markUnusable(SpillwayException why) {
        if (unusable == null) {
            unusable = why;
        }
    }

    /** The error for a request attempted on an unusable connection. */
    SpillwayException unusableError() {
        if (closed) {
            return new ConnectionClosedException("the client was closed");
        }
        if (unusable instanceof ConnectionClosedException) {
            return new ConnectionClosedException(unusable.getMessage(), unusable);
        }
        return new ConnectionClosedException("the connection is no longer usable (reconnect): "
            + unusable.getMessage(), unusable);
    }

    void checkUsable() throws SpillwayException {
        if (!isUsable()) {
            throw unusableError();
        }
    }

    // ---- writing ---------------------------------------------------------------

    /**
     * Writes the whole write buffer, then clears it. While the socket is full
     * it reads (and queues) any answers, so neither side can block the other.
     * A failure makes the connection unusable: part of a frame may be out.
     */
    void send() throws SpillwayException {
        ByteBuffer b = w.buf;
        if (b.position() == 0) {
            return;
        }
        if (!isUsable()) {
            w.clear();
            throw unusableError();
        }
        b.flip();
        try {
            long deadline = System.nanoTime() + writeTimeoutNanos;
            while (b.hasRemaining()) {
                int n;
                try {
                    n = ch.write(b);
                } catch (IOException e) {
                    throw writeFailed(e);
                }
                if (n > 0) {
                    bytesSent += n;
                    deadline = System.nanoTime() + writeTimeoutNanos;
                    continue;
                }
                int ready = await(eof ? SelectionKey.OP_WRITE : SelectionKey.OP_READ | SelectionKey.OP_WRITE, deadline);
                if ((ready & SelectionKey.OP_READ) != 0) {
                    readDuringWrite();
                    if (deferred != null) {
                        markUnusable(deferred);
                        throw deferred;
                    }
                }
                if (ready == 0 && System.nanoTime() - deadline >= 0) {
                    SpillwayTimeoutException t = new SpillwayTimeoutException("the daemon took no bytes within the "
                        + "write timeout of " + options.writeTimeout().toMillis() + " ms (a frame may be half "
                        + "written; reconnect)");
                    markUnusable(t);
                    throw t;
                }
            }
        } finally {
            b.clear();
            w.shrink(WRITE_BUF_BYTES, WRITE_BUF_KEEP_MAX);
            if (!closed && key.isValid() && key.interestOps() != SelectionKey.OP_READ) {
                key.interestOps(SelectionKey.OP_READ);
            }
        }
    }

    /** Reads what has arrived while a write is blocked, decoding into the queue when the buffer fills. */
    private void readDuringWrite() {
        for (;;) {
            if (!rbuf.hasRemaining()) {
                decodeIntoQueue();
                compact();
                if (!rbuf.hasRemaining() || deferred != null) {
                    return;
                }
            }
            if (readRaw() <= 0) {
                return;
            }
        }
    }

    private void decodeIntoQueue() {
        while (deferred == null) {
            long r;
            try {
                r = decodeOne();
            } catch (ProtocolException e) {
                deferred = e;
                return;
            }
            if (r == Codec.NEED_MORE) {
                return;
            }
            enqueue(r);
        }
    }

    private void enqueue(long r) {
        if (qsize == queue.length) {
            long[] bigger = new long[queue.length * 2];
            for (int i = 0; i < qsize; i++) {
                bigger[i] = queue[(qhead + i) & (queue.length - 1)];
            }
            queue = bigger;
            qhead = 0;
        }
        queue[(qhead + qsize) & (queue.length - 1)] = r;
        qsize++;
    }

    /** After a failed write: keep what the daemon sent before it hung up (often the nack saying why). */
    private ConnectionClosedException writeFailed(IOException e) {
        ConnectionClosedException c = new ConnectionClosedException(
            "writing to the daemon failed (it closed the connection): " + e.getMessage(), e);
        markUnusable(c);
        while (readRaw() > 0) {
            if (!rbuf.hasRemaining()) {
                decodeIntoQueue();
                compact();
                if (!rbuf.hasRemaining()) {
                    break;
                }
            }
        }
        return c;
    }

    // ---- reading ---------------------------------------------------------------

    /** The next answer owed to the current caller, reading as needed within the read timeout. */
    long next() throws SpillwayException {
        long deadline = System.nanoTime() + readTimeoutNanos;
        for (;;) {
            long r = poll();
            if (r != Codec.NEED_MORE) {
                return r;
            }
            if (eof) {
                throw eofError();
            }
            if (closed) {
                throw new ConnectionClosedException("the client was closed");
            }
            fill(deadline);
        }
    }

    /** The next answer already read, or {@link Codec#NEED_MORE}; skips stale answers. No I/O. */
    long poll() throws ProtocolException {
        for (;;) {
            long r;
            if (qsize > 0) {
                r = queue[qhead];
                qhead = (qhead + 1) & (queue.length - 1);
                qsize--;
            } else {
                if (deferred != null) {
                    markUnusable(deferred);
                    throw deferred;
                }
                r = decodeOne();
                if (r == Codec.NEED_MORE) {
                    return r;
                }
            }
            if (stale > 0) {
                stale--;
                continue;
            }
            return r;
        }
    }

    /** Like {@link #poll()}, but an error or nothing buffered both give NEED_MORE. */
    long pollQuietly() {
        try {
            return poll();
        } catch (ProtocolException e) {
            return Codec.NEED_MORE;
        }
    }

    private long decodeOne() throws ProtocolException {
        int end = rbuf.position();
        if (rstart == end) {
            return Codec.NEED_MORE;
        }
        long r;
        try {
            r = Codec.decode(rbuf, rstart, end, rcrc);
        } catch (ProtocolException e) {
            markUnusable(e);
            throw e;
        }
        if (r != Codec.NEED_MORE) {
            rstart += Codec.frameLenOf(r);
            if (rstart == end) {
                rbuf.clear();
                rstart = 0;
            }
        }
        return r;
    }

    private void compact() {
        if (rstart == 0) {
            return;
        }
        int end = rbuf.position();
        rbuf.limit(end).position(rstart);
        rbuf.compact();
        rstart = 0;
    }

    /** One read, waiting up to the deadline for bytes (or end-of-file). */
    private void fill(long deadline) throws SpillwayException {
        if (rbuf.remaining() < 1024) {
            compact();
        }
        for (;;) {
            if (readRaw() != 0) {
                return;
            }
            int ready = await(SelectionKey.OP_READ, deadline);
            if (ready == 0 && System.nanoTime() - deadline >= 0) {
                throw new SpillwayTimeoutException("no answer from the daemon within the read timeout of "
                    + options.readTimeout().toMillis() + " ms");
            }
        }
    }

    /** A non-blocking read: bytes read, 0 if none are there, -1 at end-of-file (or a read error). */
    private int readRaw() {
        if (eof) {
            return -1;
        }
        try {
            int n = ch.read(rbuf);
            if (n < 0) {
                eof = true;
            }
            return n;
        } catch (IOException e) {
            eof = true;
            eofCause = e;
            return -1;
        }
    }

    private SpillwayException eofError() {
        int partial = rbuf.position() - rstart;
        SpillwayException e;
        if (partial > 0) {
            e = new ProtocolException("the daemon closed the connection part-way through a response frame ("
                + partial + " bytes of it arrived)");
        } else if (unusable != null) {
            e = unusableError();
        } else {
            e = new ConnectionClosedException("the daemon closed the connection"
                + (eofCause != null ? ": " + eofCause.getMessage() : ""), eofCause);
        }
        markUnusable(e);
        return e;
    }

    private int await(int ops, long deadline) throws SpillwayException {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            return 0;
        }
        try {
            if (key.interestOps() != ops) {
                key.interestOps(ops);
            }
            int n = selector.select(Math.max(1, (left + 999_999) / 1_000_000));
            if (n == 0) {
                return 0;
            }
            int ready = key.readyOps();
            selector.selectedKeys().clear();
            return ready;
        } catch (IOException | RuntimeException e) {
            ConnectionClosedException c = new ConnectionClosedException("waiting on the socket failed: " + e, e);
            markUnusable(c);
            throw c;
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        closeQuietly(ch, selector);
    }
}
