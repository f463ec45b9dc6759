package dev.spillway.client;

/** One decoded daemon response frame (see {@link Codec#decodeResponse(byte[])}). */
public final class Response {
    /** The four response message types. */
    public enum Type {
        /** 0x02: a Push was stored. */
        ACK(Codec.ACK, "ack"),
        /** 0x03: the request was refused; see {@link Response#nackReason()}. */
        NACK(Codec.NACK, "nack"),
        /** 0x05: the answer to a HealthCheck. */
        HEALTH_CHECK_RESPONSE(Codec.HEALTH_CHECK_RESPONSE, "health_check_response"),
        /** 0x07: a PushBatch was stored; see {@link Response#count()}. */
        ACK_BATCH(Codec.ACK_BATCH, "ack_batch");

        private final int code;
        private final String wireName;

        Type(int code, String wireName) {
            this.code = code;
            this.wireName = wireName;
        }

        /** The message type byte. */
        public int code() {
            return code;
        }

        /** The protocol's name for it, e.g. {@code ack_batch}. */
        public String wireName() {
            return wireName;
        }
    }

    private final Type type;
    private final long count;
    private final NackReason nackReason;
    private final int daemonVersion;

    private Response(Type type, long count, NackReason nackReason, int daemonVersion) {
        this.type = type;
        this.count = count;
        this.nackReason = nackReason;
        this.daemonVersion = daemonVersion;
    }

    /** Unpacks the decoder's internal representation. */
    static Response fromCode(long code) {
        switch (Codec.typeOf(code)) {
            case Codec.ACK: return new Response(Type.ACK, 0, null, -1);
            case Codec.HEALTH_CHECK_RESPONSE: return new Response(Type.HEALTH_CHECK_RESPONSE, 0, null, -1);
            case Codec.ACK_BATCH: return new Response(Type.ACK_BATCH, Codec.countOf(code), null, -1);
            default: return new Response(Type.NACK, 0, Codec.nackReasonOf(code), Codec.daemonVersionOf(code));
        }
    }

    public Type type() {
        return type;
    }

    /** For ACK_BATCH: the number of records stored (an unsigned 32-bit value); else 0. */
    public long count() {
        return count;
    }

    /** For NACK: the reason; else {@code null}. */
    public NackReason nackReason() {
        return nackReason;
    }

    /** For a version_mismatch NACK: the daemon's protocol version; else -1. */
    public int daemonVersion() {
        return daemonVersion;
    }

    @Override
    public String toString() {
        return describe(type, count, nackReason);
    }

    static String describe(Type type, long count, NackReason reason) {
        switch (type) {
            case ACK_BATCH: return "AckBatch(count " + count + ")";
            case NACK: return "Nack(" + reason.wireName() + ")";
            case ACK: return "Ack";
            default: return "HealthCheckResponse";
        }
    }
}
