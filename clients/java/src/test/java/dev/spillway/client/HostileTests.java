package dev.spillway.client;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/** The client against fake daemons that misbehave: silence, half frames, garbage, nacks, wrong answers. */
final class HostileTests {
    private HostileTests() {
    }

    static final byte[] ACK = Check.unhex("574549520102010000000000c9474b3a00000000");
    static final byte[] HEALTH_OK = Check.unhex("5745495201050100000000004779ecff00000000");
    static final byte[] NACK_VERSION = Check.unhex("574549520103010002000000f68435360201eb40e804");
    static final byte[] NACK_OVERLOADED = Check.unhex("574549520103010001000000182b80240a9306d732");
    static final byte[] NACK_INTERNAL = Check.unhex("574549520103010001000000182b802406b84a613b");
    static final byte[] NACK_BAD_PAYLOAD_CRC = Check.unhex("574549520103010001000000182b802405021b68a2");
    static final byte[] ACK_BATCH_2 = Check.unhex("57454952010701000400000039ff11e70200000097174d8b");

    static ClientOptions timeout(long ms) {
        return ClientOptions.defaults().withTimeouts(Duration.ofMillis(ms));
    }

    static byte[] rec(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static void register(TestRunner r, Path dir) {
        r.add("hostile: a daemon that never answers: the read times out after 500 ms, no hang", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                while (FakeServer.readFrame(ch) != null) {
                    // read everything, answer nothing
                }
            }); Client c = Client.connect(s.path, timeout(500))) {
                long t0 = System.nanoTime();
                SpillwayTimeoutException e = Check.raises(SpillwayTimeoutException.class,
                    () -> c.push(Tier.SYNC, rec("hello")));
                long ms = (System.nanoTime() - t0) / 1_000_000;
                Check.isTrue(ms >= 450 && ms < 3000, "timed out after " + ms + " ms, expected about 500");
                Check.contains(e.getMessage(), "read timeout of 500 ms", "message");
                Check.isTrue(!e.isRetryable(), "a timeout is not a retryable nack");
                Check.raises(SpillwayTimeoutException.class, c::health);
                Check.raises(SpillwayTimeoutException.class, () -> c.pushBatch(Tier.SYNC, rec("a")));
            }
        });
        r.add("hostile: a pipeline to a daemon that never answers: flush gives every request a timeout", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                while (FakeServer.readFrame(ch) != null) {
                    // answer nothing
                }
            }); Client c = Client.connect(s.path, timeout(500)); Pipeline p = c.pipeline(64)) {
                for (int i = 0; i < 10; i++) {
                    p.push(Tier.SYNC, rec("r" + i));
                }
                long t0 = System.nanoTime();
                List<Outcome> out = p.flush();
                long ms = (System.nanoTime() - t0) / 1_000_000;
                Check.isTrue(ms < 3000, "flush took " + ms + " ms");
                Check.eq(10, out.size(), "outcomes");
                for (Outcome o : out) {
                    Check.isTrue(o.error() instanceof SpillwayTimeoutException, "outcome " + o);
                }
            }
        });
        r.add("hostile: an answer later than the read timeout is discarded, not given to the next request", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.sleep(800);
                FakeServer.write(ch, ACK);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, HEALTH_OK);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(500))) {
                Check.raises(SpillwayTimeoutException.class, () -> c.push(Tier.SYNC, rec("late")));
                Check.isTrue(c.isUsable(), "a read timeout leaves the connection usable");
                c.health();
            }
        });
        r.add("hostile: pipelined answers later than the read timeout are discarded, later ones stay matched", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                for (int i = 0; i < 3; i++) {
                    FakeServer.readFrame(ch);
                }
                FakeServer.sleep(800);
                for (int i = 0; i < 3; i++) {
                    FakeServer.write(ch, ACK);
                }
                FakeServer.readFrame(ch);
                FakeServer.write(ch, HEALTH_OK);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(500)); Pipeline p = c.pipeline(8)) {
                for (int i = 0; i < 3; i++) {
                    p.push(Tier.SYNC, rec("r" + i));
                }
                List<Outcome> late = p.flush();
                Check.eq(3, late.size(), "outcomes");
                for (Outcome o : late) {
                    Check.isTrue(o.error() instanceof SpillwayTimeoutException, "outcome " + o);
                }
                p.health();
                List<Outcome> out = p.flush();
                Check.eq(1, out.size(), "outcomes");
                Check.isTrue(out.get(0).ok() && out.get(0).request() == Outcome.Request.HEALTH_CHECK, "outcome " + out);
            }
        });
        r.add("hostile: answers to a pipeline closed before they came are discarded by the client", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                for (int i = 0; i < 5; i++) {
                    FakeServer.readFrame(ch);
                }
                FakeServer.sleep(300);
                for (int i = 0; i < 5; i++) {
                    FakeServer.write(ch, ACK);
                }
                FakeServer.readFrame(ch);
                FakeServer.write(ch, HEALTH_OK);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(2000))) {
                try (Pipeline p = c.pipeline(10)) {
                    for (int i = 0; i < 5; i++) {
                        p.push(Tier.SYNC, rec("r" + i));
                    }
                    p.send();
                    Check.eq(5, p.outstanding(), "outstanding");
                }
                c.health();
            }
        });
        r.add("hostile: a daemon that closes after half a frame: protocol error", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, java.util.Arrays.copyOf(ACK, 10));
                ch.close();
            }); Client c = Client.connect(s.path, timeout(2000))) {
                ProtocolException e = Check.raises(ProtocolException.class, () -> c.push(Tier.SYNC, rec("hello")));
                Check.contains(e.getMessage(), "part-way through a response frame (10 bytes", "message");
                Check.isTrue(!c.isUsable(), "still usable");
                Check.raises(ConnectionClosedException.class, () -> c.push(Tier.SYNC, rec("again")));
            }
        });
        r.add("hostile: a daemon that closes without answering: connection closed error", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                ch.close();
            }); Client c = Client.connect(s.path, timeout(2000))) {
                ConnectionClosedException e = Check.raises(ConnectionClosedException.class,
                    () -> c.push(Tier.SYNC, rec("hello")));
                Check.contains(e.getMessage(), "closed the connection", "message");
            }
        });
        r.add("hostile: a daemon that answers garbage: protocol error", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, rec("HTTP/1.1 400 Bad Request\r\n\r\n"));
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(2000))) {
                ProtocolException e = Check.raises(ProtocolException.class, () -> c.push(Tier.SYNC, rec("hello")));
                Check.contains(e.getMessage(), "bad magic", "message");
                Check.raises(ConnectionClosedException.class, c::health);
            }
        });
        r.add("hostile: a daemon that answers a VersionMismatch nack: nack error, not retryable", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, NACK_VERSION);
                ch.close();
            }); Client c = Client.connect(s.path, timeout(2000))) {
                NackException e = Check.raises(NackException.class, () -> c.push(Tier.SYNC, rec("hello")));
                Check.eq(NackReason.VERSION_MISMATCH, e.reason(), "reason");
                Check.eq(2, e.reasonByte(), "reason byte");
                Check.eq(1, e.daemonVersion(), "daemon version");
                Check.isTrue(!e.isRetryable(), "version_mismatch must not be retryable");
                Check.isTrue(e.closesConnection(), "version_mismatch closes the connection");
                Check.eq("daemon nacked: version_mismatch (0x02, not retryable: the daemon closes the connection); "
                    + "the daemon speaks protocol version 1", e.getMessage(), "message");
                Check.isTrue(!c.isUsable(), "still usable");
                long sent = c.bytesSent();
                ConnectionClosedException after = Check.raises(ConnectionClosedException.class, c::health);
                Check.contains(after.getMessage(), "version_mismatch", "message");
                Check.eq(sent, c.bytesSent(), "bytes sent after the fatal nack");
            }
        });
        r.add("hostile: a daemon that answers Overloaded: nack error, retryable, same connection works", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, NACK_OVERLOADED);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, NACK_INTERNAL);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, ACK);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, NACK_OVERLOADED);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, HEALTH_OK);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(2000))) {
                NackException e = Check.raises(NackException.class, () -> c.push(Tier.SYNC, rec("hello")));
                Check.eq(NackReason.OVERLOADED, e.reason(), "reason");
                Check.eq(0x0a, e.reasonByte(), "reason byte");
                Check.isTrue(e.isRetryable(), "overloaded must be retryable");
                Check.isTrue(!e.closesConnection(), "overloaded keeps the connection");
                Check.eq("daemon nacked: overloaded (0x0a, retryable: back off and resend)", e.getMessage(), "message");
                Check.isTrue(c.isUsable(), "usable after overloaded");
                NackException internal = Check.raises(NackException.class, () -> c.push(Tier.SYNC, rec("hello")));
                Check.eq(NackReason.INTERNAL_ERROR, internal.reason(), "reason");
                Check.isTrue(internal.isRetryable(), "internal_error must be retryable");
                c.push(Tier.SYNC, rec("hello"));
                NackException health = Check.raises(NackException.class, c::health);
                Check.eq(NackReason.OVERLOADED, health.reason(), "a health check answered with a nack");
                c.health();
            }
        });
        r.add("hostile: an AckBatch whose count is not the batch's: protocol error", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, ACK_BATCH_2);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(2000))) {
                ProtocolException e = Check.raises(ProtocolException.class,
                    () -> c.pushBatch(Tier.SYNC, rec("a"), rec("b"), rec("c")));
                Check.contains(e.getMessage(), "acked 2 records of a 3-record batch", "message");
                Check.isTrue(!c.isUsable(), "still usable");
            }
        });
        r.add("hostile: an answer of the wrong type (HealthCheckResponse to a Push): protocol error", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.write(ch, HEALTH_OK);
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(2000))) {
                ProtocolException e = Check.raises(ProtocolException.class, () -> c.push(Tier.SYNC, rec("a")));
                Check.contains(e.getMessage(), "answered HealthCheckResponse where Ack was expected", "message");
            }
        });
        r.add("hostile: a pipeline through Overloaded: that request is retryable, the others are acked", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                for (int i = 0; ; i++) {
                    if (FakeServer.readFrame(ch) == null) {
                        return;
                    }
                    FakeServer.write(ch, i == 1 || i == 4 ? NACK_OVERLOADED : ACK);
                }
            }); Client c = Client.connect(s.path, timeout(2000)); Pipeline p = c.pipeline(4)) {
                for (int i = 0; i < 3; i++) {
                    p.push(Tier.SYNC, rec("r" + i));
                }
                List<Outcome> out = p.flush();
                Check.eq(3, out.size(), "outcomes");
                Check.isTrue(out.get(0).ok() && out.get(2).ok(), "outcomes " + out);
                Check.isTrue(!out.get(1).ok() && out.get(1).isRetryable(), "outcome 1: " + out.get(1));
                Check.eq(NackReason.OVERLOADED, ((NackException) out.get(1).error()).reason(), "reason");
                p.push(Tier.SYNC, rec("r1 again"));
                Check.eq(1L, p.flushOrThrow(), "resent record acked");
                p.push(Tier.SYNC, rec("r4"));
                NackException e = Check.raises(NackException.class, p::flushOrThrow);
                Check.isTrue(e.isRetryable(), "flushOrThrow throws the retryable nack");
                p.push(Tier.SYNC, rec("r4 again"));
                Check.eq(1L, p.flushOrThrow(), "resent record acked");
            }
        });
        r.add("hostile: a pipeline through a fatal nack: later requests fail as not processed", () -> {
            try (FakeServer s = new FakeServer(dir, ch -> {
                FakeServer.readFrame(ch);
                FakeServer.readFrame(ch);
                FakeServer.write(ch, ACK);
                FakeServer.write(ch, NACK_BAD_PAYLOAD_CRC);
                ch.close();
            }); Client c = Client.connect(s.path, timeout(2000)); Pipeline p = c.pipeline(8)) {
                for (int i = 0; i < 4; i++) {
                    p.push(Tier.SYNC, rec("r" + i));
                }
                List<Outcome> out = p.flush();
                Check.eq(4, out.size(), "outcomes");
                Check.isTrue(out.get(0).ok(), "outcome 0: " + out.get(0));
                Check.isTrue(out.get(1).error() instanceof NackException && !out.get(1).isRetryable(),
                    "outcome 1: " + out.get(1));
                for (int i = 2; i < 4; i++) {
                    Check.isTrue(out.get(i).error() instanceof ConnectionClosedException, "outcome " + i + ": " + out.get(i));
                    Check.contains(out.get(i).error().getMessage(), "not processed", "message");
                }
                Check.raises(ConnectionClosedException.class, () -> p.push(Tier.SYNC, rec("more")));
                Check.eq(0L, p.flushOrThrow(), "nothing outstanding");
            }
        });
        r.add("hostile: a daemon that writes answers before reading: a pipeline of 50,000 does not deadlock", () -> {
            int n = 50_000;
            try (FakeServer s = new FakeServer(dir, ch -> {
                // Answer everything up front (2 MB, far past the socket buffers), only then read.
                java.nio.ByteBuffer acks = java.nio.ByteBuffer.allocate(ACK.length * n);
                for (int i = 0; i < n; i++) {
                    acks.put(ACK);
                }
                FakeServer.write(ch, acks.array());
                for (int i = 0; i < n; i++) {
                    FakeServer.readFrame(ch);
                }
                FakeServer.readFrame(ch);
            }); Client c = Client.connect(s.path, timeout(5000)); Pipeline p = c.pipeline(n)) {
                byte[] r1 = rec("hello");
                for (int i = 0; i < n; i++) {
                    p.push(Tier.SYNC, r1);
                }
                Check.eq((long) n, p.flushOrThrow(), "records acked");
            }
        });
    }
}
