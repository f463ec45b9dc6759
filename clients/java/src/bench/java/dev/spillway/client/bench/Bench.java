package dev.spillway.client.bench;

import dev.spillway.client.Client;
import dev.spillway.client.ClientOptions;
import dev.spillway.client.Pipeline;
import dev.spillway.client.SpillwayException;
import dev.spillway.client.Tier;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;

/**
 * Throughput of the Java client against a running daemon ({@code SPILLWAY_SOCKET}),
 * 5-byte records. Prints one line per scenario:
 * {@code client=java scenario=<name> records=<N> seconds=<S> records_per_s=<R>}.
 *
 * <p>Each scenario first runs a short untimed warm-up on the same connection
 * (so the JIT has compiled the hot path); {@code SPILLWAY_BENCH_WARMUP=0} turns it off.
 * batch256_buffered keeps 8 PushBatch frames in flight; {@code SPILLWAY_BENCH_BATCH_WINDOW=1}
 * sends them serially (one at a time, like the Rust bench's batch_buffered_n256).
 */
public final class Bench {
    private static final byte[] RECORD = "hello".getBytes(StandardCharsets.US_ASCII);
    private static final int BATCH = 256;
    /** PushBatch frames in flight in batch256_buffered (SPILLWAY_BENCH_BATCH_WINDOW; 1 = serial). */
    private static int batchWindow = 8;

    private Bench() {
    }

    public static void main(String[] args) throws Exception {
        String socket = System.getenv("SPILLWAY_SOCKET");
        if (socket == null || socket.isEmpty()) {
            System.err.println("SPILLWAY_SOCKET is not set: point it at a running daemon's socket");
            System.exit(1);
        }
        boolean warmup = !"0".equals(System.getenv("SPILLWAY_BENCH_WARMUP"));
        String w = System.getenv("SPILLWAY_BENCH_BATCH_WINDOW");
        if (w != null && !w.isEmpty()) {
            batchWindow = Integer.parseInt(w);
        }
        ClientOptions options = ClientOptions.defaults();
        Path path = Path.of(socket);

        try (Client c = Client.connect(path, options)) {
            if (warmup) {
                serial(c, 200);
            }
            report("serial_sync", 2_000, serial(c, 2_000));
        }
        try (Client c = Client.connect(path, options)) {
            if (warmup) {
                pipelined(c, 5_000);
            }
            report("pipelined_sync_w64", 50_000, pipelined(c, 50_000));
        }
        try (Client c = Client.connect(path, options)) {
            if (warmup) {
                batches(c, 100_000);
            }
            report("batch256_buffered", 2_000_000, batches(c, 2_000_000));
        }
    }

    private static void report(String scenario, long records, long nanos) {
        double seconds = nanos / 1e9;
        System.out.println(String.format(Locale.ROOT, "client=java scenario=%s records=%d seconds=%.6f records_per_s=%.0f",
            scenario, records, seconds, records / seconds));
    }

    /** Serial Sync pushes, one at a time. */
    private static long serial(Client c, int n) throws SpillwayException {
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            c.push(Tier.SYNC, RECORD);
        }
        return System.nanoTime() - t0;
    }

    /** Sync pushes through a pipeline with 64 in flight. */
    private static long pipelined(Client c, int n) throws SpillwayException {
        long t0 = System.nanoTime();
        try (Pipeline p = c.pipeline(64)) {
            for (int i = 0; i < n; i++) {
                p.push(Tier.SYNC, RECORD);
            }
            check(n, p.flushOrThrow());
        }
        return System.nanoTime() - t0;
    }

    /** PushBatch frames of 256 records at tier Buffered, 8 frames in flight (by default). */
    private static long batches(Client c, int n) throws SpillwayException {
        byte[][] batch = new byte[BATCH][];
        Arrays.fill(batch, RECORD);
        byte[][] tail = new byte[n % BATCH][];
        Arrays.fill(tail, RECORD);
        long t0 = System.nanoTime();
        try (Pipeline p = c.pipeline(batchWindow)) {
            for (int i = 0; i < n / BATCH; i++) {
                p.pushBatch(Tier.BUFFERED, batch);
            }
            if (tail.length > 0) {
                p.pushBatch(Tier.BUFFERED, tail);
            }
            check(n, p.flushOrThrow());
        }
        return System.nanoTime() - t0;
    }

    private static void check(long want, long acked) {
        if (want != acked) {
            throw new IllegalStateException("acked " + acked + " records, sent " + want);
        }
    }
}
