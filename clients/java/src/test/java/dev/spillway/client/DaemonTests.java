package dev.spillway.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/** The client against the real daemon started by the runner (payload cap 1 MiB, file sink). */
final class DaemonTests {
    private static final int CAP = TestDaemon.PAYLOAD_BYTES_MAX;

    private DaemonTests() {
    }

    private static final String RUN = Long.toString(System.nanoTime(), 36);

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static void register(TestRunner r, TestDaemon d) {
        for (Tier t : Tier.values()) {
            r.add("daemon: push at tier " + t.wireName() + " is acked", () -> {
                try (Client c = d.connect()) {
                    byte[] rec = ascii("java-tier-" + RUN + "-" + t.wireName());
                    c.push(t, rec);
                    Check.eq(20L + rec.length, c.bytesSent(), "bytes sent (one Push frame)");
                }
            });
        }
        r.add("daemon: push_batch of 1 record returns 1", () -> {
            try (Client c = d.connect()) {
                Check.eq(1, c.pushBatch(Tier.SYNC, ascii("java-batch1-" + RUN)), "acked count");
            }
        });
        r.add("daemon: push_batch of 1000 records returns 1000", () -> {
            try (Client c = d.connect()) {
                List<byte[]> records = new ArrayList<>();
                for (int i = 0; i < 1000; i++) {
                    records.add(ascii("java-batch1000-" + RUN + "-" + i));
                }
                Check.eq(1000, c.pushBatch(Tier.BATCHED, records), "acked count");
            }
        });
        r.add("daemon: health", () -> {
            try (Client c = d.connect()) {
                c.health();
                c.health();
            }
        });
        r.add("daemon: pipeline of 5,000 pushes (window 64): every one acked, in order", () -> {
            try (Client c = d.connect(); Pipeline p = c.pipeline(64)) {
                for (int i = 0; i < 5000; i++) {
                    Check.eq((long) i, p.push(Tier.SYNC, ascii("java-pipe-" + RUN + "-" + i)), "sequence number");
                }
                List<Outcome> out = p.flush();
                Check.eq(5000, out.size(), "outcomes");
                for (int i = 0; i < out.size(); i++) {
                    Outcome o = out.get(i);
                    Check.eq((long) i, o.sequence(), "outcome order");
                    Check.isTrue(o.ok(), "outcome " + i + " failed: " + o);
                    Check.eq(Outcome.Request.PUSH, o.request(), "request kind");
                    Check.eq(1, o.records(), "records");
                }
                Check.eq(0, p.outstanding(), "outstanding after flush");
            }
        });
        r.add("daemon: records arrive in delivered.ndjson in the order sent", () -> {
            String prefix = "java-order-" + RUN + "-";
            List<String> sent = new ArrayList<>();
            try (Client c = d.connect()) {
                for (int i = 0; i < 10; i++) {
                    sent.add(prefix + sent.size());
                    c.push(Tier.values()[i % 3], ascii(sent.get(sent.size() - 1)));
                }
                List<byte[]> batch = new ArrayList<>();
                for (int i = 0; i < 300; i++) {
                    sent.add(prefix + sent.size());
                    batch.add(ascii(sent.get(sent.size() - 1)));
                }
                c.pushBatch(Tier.BUFFERED, batch);
                try (Pipeline p = c.pipeline(64)) {
                    for (int i = 0; i < 2000; i++) {
                        sent.add(prefix + sent.size());
                        if (i % 100 == 99) {
                            List<byte[]> b = new ArrayList<>();
                            b.add(ascii(sent.get(sent.size() - 1)));
                            for (int k = 0; k < 9; k++) {
                                sent.add(prefix + sent.size());
                                b.add(ascii(sent.get(sent.size() - 1)));
                            }
                            p.pushBatch(Tier.SYNC, b);
                        } else {
                            p.push(Tier.SYNC, ascii(sent.get(sent.size() - 1)));
                        }
                    }
                    Check.eq((long) sent.size() - 310, p.flushOrThrow(), "records acked by the pipeline");
                }
            }
            List<String> got = delivered(d, prefix, sent.size(), 15_000);
            Check.eq(sent.size(), got.size(), "records delivered (after 15 s)");
            for (int i = 0; i < sent.size(); i++) {
                Check.eq(sent.get(i), got.get(i), "delivered record " + i);
            }
        });
        r.add("daemon: an empty record is refused locally: nothing sent, connection still works", () -> {
            try (Client c = d.connect()) {
                c.health();
                long before = c.bytesSent();
                RecordRejectedException e = Check.raises(RecordRejectedException.class,
                    () -> c.push(Tier.SYNC, new byte[0]));
                Check.eq(0, e.recordIndex(), "record index");
                Check.contains(e.getMessage(), "record 0 is empty", "message");
                Check.eq(before, c.bytesSent(), "bytes sent");
                Check.isTrue(!e.isRetryable(), "a local refusal is not retryable");
                c.health();
                c.push(Tier.SYNC, ascii("java-after-empty-" + RUN));
            }
        });
        r.add("daemon: a record of 1048577 bytes is refused locally (payload_bytes_max 1048576): nothing sent", () -> {
            try (Client c = d.connect()) {
                long before = c.bytesSent();
                RecordRejectedException e = Check.raises(RecordRejectedException.class,
                    () -> c.push(Tier.SYNC, new byte[CAP + 1]));
                Check.eq(0, e.recordIndex(), "record index");
                Check.eq((long) CAP, e.limit(), "limit");
                Check.contains(e.getMessage(), "1048577 bytes, over payload_bytes_max = 1048576", "message");
                Check.eq(before, c.bytesSent(), "bytes sent");
                c.health();
                // The cap itself is allowed, and the daemon takes it.
                byte[] atCap = new byte[CAP];
                Arrays.fill(atCap, (byte) 'x');
                c.push(Tier.BUFFERED, atCap);
                Check.eq(before + 20 + CAP + 20, c.bytesSent(), "bytes sent for the health check and the push");
            }
        });
        r.add("daemon: push_batch refused locally: no records, an empty record, payload over the cap", () -> {
            try (Client c = d.connect()) {
                long before = c.bytesSent();
                RecordRejectedException none = Check.raises(RecordRejectedException.class,
                    () -> c.pushBatch(Tier.SYNC, new ArrayList<>()));
                Check.eq(-1, none.recordIndex(), "index for no records");
                Check.contains(none.getMessage(), "no records", "message");
                RecordRejectedException empty = Check.raises(RecordRejectedException.class,
                    () -> c.pushBatch(Tier.SYNC, ascii("a"), ascii("b"), new byte[0], ascii("d")));
                Check.eq(2, empty.recordIndex(), "index of the empty record");
                Check.contains(empty.getMessage(), "record 2 of 4 is empty", "message");
                // 4 + 2 * (4 + 524288) = 1048588 > 1048576: the limit is crossed at record 1.
                RecordRejectedException over = Check.raises(RecordRejectedException.class,
                    () -> c.pushBatch(Tier.SYNC, new byte[524288], new byte[524288]));
                Check.eq(1, over.recordIndex(), "index where the cap is crossed");
                Check.eq((long) CAP, over.limit(), "limit");
                Check.contains(over.getMessage(), "1048588 bytes", "message");
                Check.contains(over.getMessage(), "payload_bytes_max = 1048576", "message");
                Check.contains(over.getMessage(), "record 1", "message");
                Check.eq(before, c.bytesSent(), "bytes sent");
                c.health();
                // Exactly at the cap: 4 + (4 + 1048568) = 1048576.
                byte[] big = new byte[CAP - 8];
                Arrays.fill(big, (byte) 'y');
                Check.eq(1, c.pushBatch(Tier.BUFFERED, big), "batch at the cap acked");
            }
        });
        r.add("daemon: the pipeline refuses bad records locally without queuing them", () -> {
            try (Client c = d.connect(); Pipeline p = c.pipeline(8)) {
                p.push(Tier.SYNC, ascii("java-pipe-refuse-" + RUN));
                Check.raises(RecordRejectedException.class, () -> p.push(Tier.SYNC, new byte[0]));
                Check.raises(RecordRejectedException.class, () -> p.push(Tier.SYNC, new byte[CAP + 1]));
                Check.raises(RecordRejectedException.class, () -> p.pushBatch(Tier.SYNC, new ArrayList<>()));
                Check.raises(RecordRejectedException.class,
                    () -> p.pushBatch(Tier.SYNC, new byte[CAP / 2], new byte[CAP / 2]));
                Check.eq(1, p.outstanding(), "outstanding");
                Check.eq(1L, p.flushOrThrow(), "records acked");
            }
        });
        r.add("daemon: a record over the daemon's cap (client cap 16 MiB) is nacked payload_too_large, not retryable", () -> {
            try (Client c = Client.connect(d.socket, d.options().withPayloadBytesMax(Codec.PAYLOAD_BYTES_HARD_MAX))) {
                byte[] big = new byte[2 * CAP];
                NackException e = Check.raises(NackException.class, () -> c.push(Tier.SYNC, big));
                Check.eq(NackReason.PAYLOAD_TOO_LARGE, e.reason(), "reason");
                Check.eq(0x04, e.reasonByte(), "reason byte");
                Check.isTrue(!e.isRetryable(), "payload_too_large must not be retryable");
                Check.eq("daemon nacked: payload_too_large (0x04, not retryable: the daemon closes the connection)",
                    e.getMessage(), "message");
                Check.isTrue(!c.isUsable(), "the connection is still marked usable");
                Check.raises(ConnectionClosedException.class, c::health);
            }
        });
        r.add("daemon: mixed pipeline (push, push_batch, health) answers in order", () -> {
            try (Client c = d.connect(); Pipeline p = c.pipeline(16)) {
                List<Outcome.Request> kinds = new ArrayList<>();
                for (int i = 0; i < 300; i++) {
                    switch (i % 3) {
                        case 0:
                            p.push(Tier.BUFFERED, ascii("java-mixed-" + RUN + "-" + i));
                            kinds.add(Outcome.Request.PUSH);
                            break;
                        case 1:
                            p.pushBatch(Tier.BUFFERED, ascii("java-mixed-" + RUN + "-" + i + "a"),
                                ascii("java-mixed-" + RUN + "-" + i + "b"));
                            kinds.add(Outcome.Request.PUSH_BATCH);
                            break;
                        default:
                            p.health();
                            kinds.add(Outcome.Request.HEALTH_CHECK);
                    }
                }
                List<Outcome> out = new ArrayList<>();
                Outcome first = p.recv();
                out.add(first);
                out.addAll(p.flush());
                Check.eq(300, out.size(), "outcomes");
                for (int i = 0; i < 300; i++) {
                    Check.isTrue(out.get(i).ok(), "outcome " + i + ": " + out.get(i));
                    Check.eq(kinds.get(i), out.get(i).request(), "kind of outcome " + i);
                    Check.eq(i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 0, out.get(i).records(), "records of outcome " + i);
                }
            }
        });
        r.add("daemon: a pipeline window of 20,000 (past the daemon's in-flight window) does not deadlock", () -> {
            try (Client c = d.connect(); Pipeline p = c.pipeline(20_000)) {
                byte[] rec = ascii("java-bigwindow-" + RUN);
                for (int i = 0; i < 20_000; i++) {
                    p.push(Tier.BUFFERED, rec);
                }
                Check.eq(20_000L, p.flushOrThrow(), "records acked");
            }
        });
        r.add("daemon: pipeline windows of 1 and Integer.MAX_VALUE work; 0 is refused", () -> {
            try (Client c = d.connect()) {
                Check.raises(IllegalArgumentException.class, () -> c.pipeline(0));
                try (Pipeline p = c.pipeline(1)) {
                    for (int i = 0; i < 50; i++) {
                        p.push(Tier.BUFFERED, ascii("java-w1-" + RUN + "-" + i));
                    }
                    Check.eq(50L, p.flushOrThrow(), "records acked");
                }
                try (Pipeline p = c.pipeline(Integer.MAX_VALUE)) {
                    for (int i = 0; i < 3000; i++) {
                        p.push(Tier.BUFFERED, ascii("java-wmax-" + RUN + "-" + i));
                    }
                    Check.eq(3000L, p.flushOrThrow(), "records acked");
                }
            }
        });
        r.add("daemon: closing a pipeline with answers outstanding leaves the client matched", () -> {
            try (Client c = d.connect()) {
                Pipeline p = c.pipeline(10);
                for (int i = 0; i < 105; i++) {
                    p.push(Tier.SYNC, ascii("java-abandon-" + RUN + "-" + i));
                }
                p.send();
                Check.isTrue(p.outstanding() > 0, "something outstanding");
                p.close();
                Check.raises(IllegalStateException.class, () -> p.push(Tier.SYNC, ascii("x")));
                c.health();
                c.push(Tier.SYNC, ascii("java-abandon-" + RUN + "-after"));
                Check.eq(3, c.pushBatch(Tier.SYNC, ascii("a"), ascii("b"), ascii("c")), "batch after");
            }
        });
        r.add("daemon: a client call while a pipeline is open is refused", () -> {
            try (Client c = d.connect()) {
                try (Pipeline p = c.pipeline(4)) {
                    Check.raises(IllegalStateException.class, c::health);
                    Check.raises(IllegalStateException.class, () -> c.pipeline(4));
                    p.health();
                    Check.eq(1, p.flush().size(), "outcomes");
                }
                c.health();
            }
        });
        r.add("daemon: connecting to a missing socket names the path", () -> {
            java.nio.file.Path missing = d.dir.resolve("no-such.sock");
            SpillwayException e = Check.raises(SpillwayException.class, () -> Client.connect(missing));
            Check.contains(e.getMessage(), missing.toString(), "message");
        });
    }

    /** Polls the file sink's output for the lines starting with {@code prefix} until {@code n} are there. */
    static List<String> delivered(TestDaemon d, String prefix, int n, long timeoutMs) throws IOException,
        InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        List<String> got = new ArrayList<>();
        while (true) {
            got.clear();
            if (Files.exists(d.delivered)) {
                for (String line : Files.readAllLines(d.delivered, StandardCharsets.ISO_8859_1)) {
                    if (line.startsWith(prefix)) {
                        got.add(line);
                    }
                }
            }
            if (got.size() >= n || System.currentTimeMillis() > deadline) {
                return got;
            }
            Thread.sleep(50);
        }
    }
}
