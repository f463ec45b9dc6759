package dev.spillway.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReference;

/** Every conformance vector of protocol/conformance/vectors.json, each as its own test. */
final class VectorTests {
    private VectorTests() {
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object o) {
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object o) {
        return (List<Object>) o;
    }

    static String str(Map<String, Object> m, String key) {
        Object v = m.get(key);
        if (!(v instanceof String)) {
            throw new IllegalArgumentException("vector field " + key + " is not a string: " + v);
        }
        return (String) v;
    }

    static Tier tier(String name) {
        for (Tier t : Tier.values()) {
            if (t.wireName().equals(name)) {
                return t;
            }
        }
        throw new IllegalArgumentException("unknown tier " + name);
    }

    static void register(TestRunner r, Path file, TestDaemon daemon, Path scratch) throws Exception {
        Map<String, Object> root = obj(Json.parse(Files.readString(file, StandardCharsets.UTF_8)));
        List<Object> vectors = list(root.get("vectors"));
        r.add("vectors: " + file.getFileName() + " has format 1, " + vectors.size()
            + " vectors, unique names, only the 4 known kinds", () -> {
                Check.eq(1L, root.get("format"), "format");
                Check.eq(1L, root.get("protocol_version"), "protocol_version");
                Check.eq((long) Codec.PAYLOAD_BYTES_HARD_MAX, root.get("payload_bytes_hard_max"), "hard max");
                Check.isTrue(!vectors.isEmpty(), "no vectors");
                Set<String> names = new HashSet<>();
                for (Object o : vectors) {
                    Map<String, Object> v = obj(o);
                    Check.isTrue(names.add(str(v, "name")), "duplicate name " + v.get("name"));
                    String kind = str(v, "kind");
                    Check.isTrue(Set.of("request", "response", "rejected_request", "rejected_response").contains(kind),
                        "unknown kind " + kind);
                }
            });
        for (Object o : vectors) {
            Map<String, Object> v = obj(o);
            String name = str(v, "name");
            String kind = str(v, "kind");
            switch (kind) {
                case "request":
                    r.add("vector request " + name + ": the encoder produces frame", () -> encodes(v));
                    r.add("vector request " + name + ": the client writes frame on the socket", () -> clientWrites(v, scratch));
                    r.add("vector request " + name + ": the daemon answers answer", () -> daemonAnswers(v, daemon));
                    break;
                case "response":
                    r.add("vector response " + name + ": decodes to response", () -> decodes(v));
                    break;
                case "rejected_response":
                    r.add("vector rejected_response " + name + ": a protocol error (" + v.get("fault") + ")",
                        () -> rejectsResponse(v));
                    break;
                case "rejected_request":
                    r.add("vector rejected_request " + name + ": the daemon nacks with answer and closes",
                        () -> daemonRejects(v, daemon));
                    break;
                default:
                    r.add("vector " + name + ": kind " + kind, () -> Check.fail("unknown vector kind " + kind));
            }
        }
    }

    private static byte[] encode(Map<String, Object> req) {
        String type = str(req, "type");
        switch (type) {
            case "push":
                return Codec.encodePush(tier(str(req, "tier")), Check.unhex(str(req, "payload")));
            case "push_batch":
                return Codec.encodePushBatch(tier(str(req, "tier")), records(req));
            case "health_check":
                return Codec.encodeHealthCheck();
            default:
                throw new IllegalArgumentException("unknown request type " + type);
        }
    }

    private static List<byte[]> records(Map<String, Object> req) {
        List<byte[]> out = new ArrayList<>();
        for (Object h : list(req.get("records"))) {
            out.add(Check.unhex((String) h));
        }
        return out;
    }

    private static void encodes(Map<String, Object> v) {
        Check.bytesEq(Check.unhex(str(v, "frame")), encode(obj(v.get("request"))), "encoded frame");
    }

    /** The bytes the real Client writes for the request (captured by a fake daemon answering the vector's answer). */
    private static void clientWrites(Map<String, Object> v, Path scratch) throws Exception {
        byte[] answer = Check.unhex(str(v, "answer"));
        AtomicReference<byte[]> captured = new AtomicReference<>();
        try (FakeServer s = new FakeServer(scratch, ch -> {
            captured.set(FakeServer.readFrame(ch));
            FakeServer.write(ch, answer);
            FakeServer.readFrame(ch);
        });
             Client c = Client.connect(s.path, ClientOptions.defaults().withTimeouts(Duration.ofSeconds(5)))) {
            Map<String, Object> req = obj(v.get("request"));
            switch (str(req, "type")) {
                case "push":
                    c.push(tier(str(req, "tier")), Check.unhex(str(req, "payload")));
                    break;
                case "push_batch":
                    Check.eq(records(req).size(), c.pushBatch(tier(str(req, "tier")), records(req)), "acked count");
                    break;
                default:
                    c.health();
            }
            Check.bytesEq(Check.unhex(str(v, "frame")), captured.get(), "bytes the client wrote");
            Check.eq((long) Check.unhex(str(v, "frame")).length, c.bytesSent(), "bytes sent");
        }
    }

    private static void daemonAnswers(Map<String, Object> v, TestDaemon daemon) throws Exception {
        byte[] answer = Check.unhex(str(v, "answer"));
        byte[] health = Codec.encodeHealthCheck();
        byte[] healthAnswer = Check.unhex("5745495201050100000000004779ecff00000000");
        try (RawSocket s = new RawSocket(daemon.socket)) {
            s.write(Check.unhex(str(v, "frame")), 5000);
            Check.isTrue(s.writeError == null, "writing the frame failed: " + s.writeError);
            Check.bytesEq(answer, s.read(answer.length, 5000), "the daemon's answer");
            // Nothing else came, and the connection is still open.
            s.write(health, 5000);
            Check.bytesEq(healthAnswer, s.read(healthAnswer.length, 5000), "the answer to a following HealthCheck");
        }
    }

    private static void decodes(Map<String, Object> v) throws Exception {
        byte[] frame = Check.unhex(str(v, "frame"));
        Map<String, Object> want = obj(v.get("response"));
        Response got = Codec.decodeResponse(frame);
        String type = str(want, "type");
        Check.eq(type, got.type().wireName(), "type");
        switch (type) {
            case "ack_batch":
                Check.eq(want.get("count"), got.count(), "count");
                break;
            case "nack": {
                NackReason reason = got.nackReason();
                Check.eq(want.get("reason"), reason.wireName(), "reason");
                Check.eq(want.get("reason_byte"), (long) reason.code(), "reason_byte");
                Check.eq(want.get("retryable"), reason.isRetryable(), "retryable");
                Check.eq(want.get("closes_connection"), reason.closesConnection(), "closes_connection");
                Object version = want.get("daemon_version");
                Check.eq(version == null ? -1L : version, (long) got.daemonVersion(), "daemon_version");
                NackException e = new NackException(reason, got.daemonVersion());
                Check.eq(want.get("retryable"), e.isRetryable(), "NackException.isRetryable()");
                Check.eq((int) (long) (Long) want.get("reason_byte"), e.reasonByte(), "NackException.reasonByte()");
                Check.contains(e.getMessage(), reason.wireName() + String.format(" (0x%02x, ", reason.code()),
                    "message");
                break;
            }
            default:
                break;
        }
        // The streaming decoder waits (rather than failing) on every proper prefix.
        ByteBuffer b = ByteBuffer.allocateDirect(frame.length).order(ByteOrder.LITTLE_ENDIAN).put(frame);
        Codec.Crc crc = new Codec.Crc(b);
        for (int k = 0; k < frame.length; k++) {
            Check.eq(Codec.NEED_MORE, Codec.decode(b, 0, k, crc), "decoding the first " + k + " bytes");
        }
        Check.eq(frame.length, Codec.frameLenOf(Codec.decode(b, 0, frame.length, crc)), "frame length");
    }

    private static void rejectsResponse(Map<String, Object> v) {
        byte[] frame = Check.unhex(str(v, "frame"));
        Check.raises(ProtocolException.class, () -> Codec.decodeResponse(frame));
        // The streaming decoder must fail on the bytes given, not wait for more.
        ByteBuffer b = ByteBuffer.allocateDirect(frame.length).order(ByteOrder.LITTLE_ENDIAN).put(frame);
        Check.raises(ProtocolException.class, () -> {
            long r = Codec.decode(b, 0, frame.length, new Codec.Crc(b));
            Check.fail("decoded " + (r == Codec.NEED_MORE ? "nothing (waits for more bytes)" : Codec.describe(r)));
        });
    }

    private static void daemonRejects(Map<String, Object> v, TestDaemon daemon) throws Exception {
        byte[] answer = Check.unhex(str(v, "answer"));
        Map<String, Object> nack = obj(v.get("nack"));
        Response decoded = Codec.decodeResponse(answer);
        Check.eq(nack.get("reason"), decoded.nackReason().wireName(), "the vector's answer decodes to its nack");
        try (RawSocket s = new RawSocket(daemon.socket)) {
            s.write(Check.unhex(str(v, "frame")), 5000);
            byte[] got = s.readToEof(5000);
            Check.bytesEq(answer, got, "the daemon's answer");
            if (Boolean.TRUE.equals(v.get("closes_connection"))) {
                Check.isTrue(s.eof, "the daemon did not close the connection after the nack");
            }
        }
    }
}
