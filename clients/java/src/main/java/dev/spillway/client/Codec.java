package dev.spillway.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.zip.CRC32;

/**
 * The weir v1 frame format (plus spillway's PushBatch and AckBatch):
 * encoding requests and decoding responses. {@link Client} and
 * {@link Pipeline} use the same code on their own reusable buffers; the
 * {@code byte[]} methods here are for tests and tools.
 *
 * <p>Frame: 16-byte header (magic {@code WEIR}, version 1, type, tier, flags 0,
 * u32 LE payload length, u32 LE CRC-32 of bytes 0..12), the payload, then a
 * u32 LE CRC-32 of the payload (0 for an empty one).
 */
public final class Codec {
    /** Header bytes. */
    public static final int HEADER_LEN = 16;
    /** Trailer (payload CRC) bytes. */
    public static final int TRAILER_LEN = 4;
    /** The protocol's hard cap on a payload: 16 MiB. */
    public static final int PAYLOAD_BYTES_HARD_MAX = 16 * 1024 * 1024;
    /** The protocol version this client speaks. */
    public static final int PROTOCOL_VERSION = 1;

    static final int PUSH = 0x01;
    static final int ACK = 0x02;
    static final int NACK = 0x03;
    static final int HEALTH_CHECK = 0x04;
    static final int HEALTH_CHECK_RESPONSE = 0x05;
    static final int PUSH_BATCH = 0x06;
    static final int ACK_BATCH = 0x07;

    /** "WEIR" read as a little-endian u32. */
    static final int MAGIC_LE = 0x52494557;
    private static final byte[] MAGIC = {'W', 'E', 'I', 'R'};

    /** {@link #decode} result: the buffer does not hold a whole frame yet. */
    static final long NEED_MORE = -1L;

    /** Headers of the fixed-shape responses with filler tier 1: a match skips the header checks. */
    private static final long[] KNOWN_H0 = new long[5];
    private static final long[] KNOWN_H1 = new long[5];
    private static final int[] KNOWN_TYPE = {ACK, HEALTH_CHECK_RESPONSE, ACK_BATCH, NACK, NACK};
    private static final int[] KNOWN_LEN = {0, 0, 4, 1, 2};

    static {
        FrameWriter w = new FrameWriter(64);
        for (int i = 0; i < KNOWN_TYPE.length; i++) {
            w.header(0, KNOWN_TYPE[i], 1, KNOWN_LEN[i]);
            KNOWN_H0[i] = w.buf.getLong(0);
            KNOWN_H1[i] = w.buf.getLong(8);
        }
    }

    private Codec() {
    }

    // ---- public byte[] API -------------------------------------------------

    /** The Push frame for one record (at least 1 byte, at most the hard cap). */
    public static byte[] encodePush(Tier tier, byte[] record) {
        if (record.length == 0 || record.length > PAYLOAD_BYTES_HARD_MAX) {
            throw new IllegalArgumentException("a Push payload must be 1.." + PAYLOAD_BYTES_HARD_MAX
                + " bytes, not " + record.length);
        }
        FrameWriter w = new FrameWriter(HEADER_LEN + record.length + TRAILER_LEN);
        w.push(tier.code(), record);
        return w.toByteArray();
    }

    /** The PushBatch frame for these records (at least one, none empty, payload within the hard cap). */
    public static byte[] encodePushBatch(Tier tier, List<byte[]> records) {
        long payload = pushBatchPayloadLen(records);
        if (records.isEmpty() || payload > PAYLOAD_BYTES_HARD_MAX) {
            throw new IllegalArgumentException("a PushBatch needs 1 or more records and a payload of at most "
                + PAYLOAD_BYTES_HARD_MAX + " bytes");
        }
        for (byte[] r : records) {
            if (r.length == 0) {
                throw new IllegalArgumentException("a PushBatch record must not be empty");
            }
        }
        FrameWriter w = new FrameWriter(HEADER_LEN + (int) payload + TRAILER_LEN);
        w.pushBatch(tier.code(), records, (int) payload);
        return w.toByteArray();
    }

    /** The HealthCheck frame (empty payload). */
    public static byte[] encodeHealthCheck() {
        FrameWriter w = new FrameWriter(HEADER_LEN + TRAILER_LEN);
        w.healthCheck();
        return w.toByteArray();
    }

    /** A PushBatch's payload length: 4 + Σ(4 + len). */
    public static long pushBatchPayloadLen(List<byte[]> records) {
        long total = 4;
        for (byte[] r : records) {
            total += 4L + r.length;
        }
        return total;
    }

    /**
     * Decodes exactly one response frame.
     *
     * @throws ProtocolException if the bytes are not one valid response frame
     *     (malformed, a request type, incomplete, or followed by extra bytes)
     */
    public static Response decodeResponse(byte[] frame) throws ProtocolException {
        ByteBuffer b = ByteBuffer.allocateDirect(Math.max(frame.length, 1)).order(ByteOrder.LITTLE_ENDIAN);
        b.put(frame);
        long code = decode(b, 0, frame.length, new Crc(b));
        if (code == NEED_MORE) {
            throw new ProtocolException("incomplete response frame: " + frame.length + " bytes");
        }
        if (frameLenOf(code) != frame.length) {
            throw new ProtocolException((frame.length - frameLenOf(code)) + " bytes after the response frame");
        }
        return Response.fromCode(code);
    }

    // ---- the decoder ---------------------------------------------------------

    /** A CRC-32 over ranges of one buffer, without allocating. */
    static final class Crc {
        private final CRC32 crc = new CRC32();
        private final ByteBuffer view;

        Crc(ByteBuffer buf) {
            this.view = buf.duplicate();
        }

        int of(int from, int to) {
            crc.reset();
            view.limit(to);
            view.position(from);
            crc.update(view);
            return (int) crc.getValue();
        }
    }

    static long pack(int type, int frameLen, int value) {
        return ((long) frameLen << 40) | ((long) type << 32) | (value & 0xffffffffL);
    }

    static int typeOf(long code) {
        return (int) (code >>> 32) & 0xff;
    }

    static int frameLenOf(long code) {
        return (int) (code >>> 40) & 0xff;
    }

    static long countOf(long code) {
        return code & 0xffffffffL;
    }

    static NackReason nackReasonOf(long code) {
        return NackReason.fromCode((int) code & 0xff);
    }

    static int daemonVersionOf(long code) {
        return (((int) code >>> 8) & 0x1ff) - 1;
    }

    static String describe(long code) {
        switch (typeOf(code)) {
            case ACK: return "Ack";
            case HEALTH_CHECK_RESPONSE: return "HealthCheckResponse";
            case ACK_BATCH: return "AckBatch(count " + countOf(code) + ")";
            default: return "Nack(" + nackReasonOf(code).wireName() + ")";
        }
    }

    private static String typeName(int type) {
        switch (type) {
            case PUSH: return "Push";
            case ACK: return "Ack";
            case NACK: return "Nack";
            case HEALTH_CHECK: return "HealthCheck";
            case HEALTH_CHECK_RESPONSE: return "HealthCheckResponse";
            case PUSH_BATCH: return "PushBatch";
            case ACK_BATCH: return "AckBatch";
            default: return String.format("0x%02x", type);
        }
    }

    /**
     * Decodes the response at {@code b[start..end)}: {@link #NEED_MORE}, or a
     * packed response (type, frame length, value) to be read with the
     * {@code *Of} helpers. Checks, in order: magic, version, header CRC, type
     * (a response type), flags, the payload length the type calls for (from the
     * header, before waiting for the payload), payload CRC, nack reason.
     */
    static long decode(ByteBuffer b, int start, int end, Crc crc) throws ProtocolException {
        int avail = end - start;
        int type;
        int len;
        known:
        {
            if (avail >= HEADER_LEN) {
                long h0 = b.getLong(start);
                long h1 = b.getLong(start + 8);
                for (int i = 0; i < KNOWN_TYPE.length; i++) {
                    if (h0 == KNOWN_H0[i] && h1 == KNOWN_H1[i]) {
                        type = KNOWN_TYPE[i];
                        len = KNOWN_LEN[i];
                        break known;
                    }
                }
            }
            for (int i = 0; i < Math.min(avail, 4); i++) {
                if (b.get(start + i) != MAGIC[i]) {
                    throw new ProtocolException("bad magic: the frame starts with "
                        + hex(b, start, Math.min(avail, 4)) + ", expected 57454952 (\"WEIR\")");
                }
            }
            if (avail >= 5 && b.get(start + 4) != PROTOCOL_VERSION) {
                throw new ProtocolException("unsupported protocol version " + (b.get(start + 4) & 0xff)
                    + " in a response (this client speaks " + PROTOCOL_VERSION + ")");
            }
            if (avail < HEADER_LEN) {
                return NEED_MORE;
            }
            int stored = b.getInt(start + 12);
            int computed = crc.of(start, start + 12);
            if (stored != computed) {
                throw new ProtocolException(String.format(
                    "bad header CRC: the frame says 0x%08x, bytes 0..12 give 0x%08x", stored, computed));
            }
            type = b.get(start + 5) & 0xff;
            switch (type) {
                case ACK:
                case NACK:
                case HEALTH_CHECK_RESPONSE:
                case ACK_BATCH:
                    break;
                case PUSH:
                case HEALTH_CHECK:
                case PUSH_BATCH:
                    throw new ProtocolException(String.format(
                        "message type 0x%02x (%s) is a request, not a response", type, typeName(type)));
                default:
                    throw new ProtocolException(String.format("unknown message type 0x%02x", type));
            }
            int flags = b.get(start + 7) & 0xff;
            if (flags != 0) {
                throw new ProtocolException(String.format("reserved flags byte is 0x%02x, must be 0", flags));
            }
            long declared = b.getInt(start + 8) & 0xffffffffL;
            boolean ok;
            String expected;
            switch (type) {
                case NACK:
                    ok = declared == 1 || declared == 2;
                    expected = "1 or 2";
                    break;
                case ACK_BATCH:
                    ok = declared == 4;
                    expected = "4";
                    break;
                default:
                    ok = declared == 0;
                    expected = "0";
            }
            if (!ok) {
                throw new ProtocolException(typeName(type) + " declares a " + declared
                    + "-byte payload, expected " + expected);
            }
            len = (int) declared;
        }
        int frameLen = HEADER_LEN + len + TRAILER_LEN;
        if (avail < frameLen) {
            return NEED_MORE;
        }
        int p = start + HEADER_LEN;
        int storedPayloadCrc = b.getInt(p + len);
        int payloadCrc = len == 0 ? 0 : crc.of(p, p + len);
        if (storedPayloadCrc != payloadCrc) {
            throw new ProtocolException(String.format(
                "bad payload CRC in %s: the frame says 0x%08x, the payload gives 0x%08x",
                typeName(type), storedPayloadCrc, payloadCrc));
        }
        switch (type) {
            case ACK_BATCH:
                return pack(type, frameLen, b.getInt(p));
            case NACK: {
                int reason = b.get(p) & 0xff;
                if (NackReason.fromCode(reason) == null) {
                    throw new ProtocolException(String.format("nack with unknown reason byte 0x%02x", reason));
                }
                int version = len == 2 ? (b.get(p + 1) & 0xff) + 1 : 0;
                return pack(type, frameLen, reason | (version << 8));
            }
            default:
                return pack(type, frameLen, 0);
        }
    }

    private static String hex(ByteBuffer b, int from, int n) {
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < n; i++) {
            s.append(String.format("%02x", b.get(from + i) & 0xff));
        }
        return s.toString();
    }
}
