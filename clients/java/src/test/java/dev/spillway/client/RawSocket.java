package dev.spillway.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;

/** Raw bytes to and from a Unix socket, every wait bounded (for sending vector frames as they are). */
final class RawSocket implements AutoCloseable {
    private final SocketChannel ch;
    private final Selector selector;
    private final SelectionKey key;
    boolean eof;
    /** Set if a write failed (the peer had closed): what was written may be partial. */
    IOException writeError;

    RawSocket(Path path) throws IOException {
        ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(path));
        ch.configureBlocking(false);
        selector = Selector.open();
        key = ch.register(selector, SelectionKey.OP_READ);
    }

    /** Writes all of {@code b} (a failed write is recorded in {@link #writeError}, not thrown). */
    void write(byte[] b, long timeoutMs) throws IOException {
        ByteBuffer buf = ByteBuffer.wrap(b);
        long deadline = System.nanoTime() + timeoutMs * 1_000_000;
        try {
            while (buf.hasRemaining()) {
                if (ch.write(buf) == 0) {
                    if (System.nanoTime() > deadline) {
                        throw new IOException("raw write timed out");
                    }
                    key.interestOps(SelectionKey.OP_WRITE);
                    selector.select(10);
                    selector.selectedKeys().clear();
                }
            }
        } catch (IOException e) {
            if (e.getMessage() != null && e.getMessage().contains("timed out")) {
                throw e;
            }
            writeError = e;
        } finally {
            key.interestOps(SelectionKey.OP_READ);
        }
    }

    /** Reads until {@code n} bytes have arrived, end-of-file, or the timeout. */
    byte[] read(int n, long timeoutMs) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteBuffer buf = ByteBuffer.allocate(4096);
        long deadline = System.nanoTime() + timeoutMs * 1_000_000;
        while (out.size() < n && !eof) {
            buf.clear().limit(Math.min(buf.capacity(), n - out.size()));
            int r;
            try {
                r = ch.read(buf);
            } catch (IOException e) {
                eof = true;
                break;
            }
            if (r < 0) {
                eof = true;
            } else if (r > 0) {
                out.write(buf.array(), 0, r);
            } else {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    break;
                }
                selector.select(Math.max(1, left / 1_000_000));
                selector.selectedKeys().clear();
            }
        }
        return out.toByteArray();
    }

    /** Reads everything until end-of-file (or the timeout; then {@link #eof} stays false). */
    byte[] readToEof(long timeoutMs) throws IOException {
        return read(Integer.MAX_VALUE, timeoutMs);
    }

    @Override
    public void close() throws IOException {
        selector.close();
        ch.close();
    }
}
