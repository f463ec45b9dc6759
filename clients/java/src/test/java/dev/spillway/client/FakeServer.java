package dev.spillway.client;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A hostile or broken "daemon" for the tests: a Unix socket listener in a
 * temp folder whose handler decides what each accepted connection gets.
 */
final class FakeServer implements AutoCloseable {
    interface Handler {
        void handle(SocketChannel ch) throws Exception;
    }

    private static final AtomicInteger SEQ = new AtomicInteger();

    final Path path;
    private final ServerSocketChannel server;
    private final List<SocketChannel> accepted = new CopyOnWriteArrayList<>();
    private final Thread thread;
    /** The first error a handler raised (a broken test server, not a client failure). */
    volatile Throwable handlerError;

    FakeServer(Path dir, Handler handler) throws IOException {
        path = dir.resolve("fake-" + SEQ.incrementAndGet() + ".sock");
        Files.deleteIfExists(path);
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(path));
        thread = new Thread(() -> {
            try {
                for (;;) {
                    SocketChannel ch = server.accept();
                    accepted.add(ch);
                    Thread t = new Thread(() -> {
                        try {
                            handler.handle(ch);
                        } catch (Throwable e) {
                            if (ch.isOpen() && handlerError == null) {
                                handlerError = e;
                            }
                        }
                    }, "fake-server-conn");
                    t.setDaemon(true);
                    t.start();
                }
            } catch (IOException closed) {
                // the server was closed
            }
        }, "fake-server");
        thread.setDaemon(true);
        thread.start();
    }

    /** Reads one whole request frame (blocking); null at end-of-file. */
    static byte[] readFrame(SocketChannel ch) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(Codec.HEADER_LEN).order(ByteOrder.LITTLE_ENDIAN);
        if (!readFully(ch, header)) {
            return null;
        }
        int len = header.getInt(8);
        ByteBuffer rest = ByteBuffer.allocate(len + Codec.TRAILER_LEN);
        if (!readFully(ch, rest)) {
            return null;
        }
        byte[] frame = new byte[Codec.HEADER_LEN + len + Codec.TRAILER_LEN];
        System.arraycopy(header.array(), 0, frame, 0, Codec.HEADER_LEN);
        System.arraycopy(rest.array(), 0, frame, Codec.HEADER_LEN, rest.capacity());
        return frame;
    }

    private static boolean readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                return false;
            }
        }
        return true;
    }

    static void write(SocketChannel ch, byte[] bytes) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void close() throws IOException {
        server.close();
        for (SocketChannel ch : accepted) {
            ch.close();
        }
        Files.deleteIfExists(path);
    }
}
