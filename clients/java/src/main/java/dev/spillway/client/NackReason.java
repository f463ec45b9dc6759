package dev.spillway.client;

/**
 * Why the daemon refused a request (the payload byte of a Nack frame).
 *
 * <p>Only {@link #INTERNAL_ERROR} and {@link #OVERLOADED} are retryable: the
 * connection stays open and the same request may be resent after a back-off.
 * After every other reason the daemon closes the connection; those are caused
 * by a broken client (or a protocol version mismatch), so resending is pointless.
 */
public enum NackReason {
    BAD_MAGIC(0x01, "bad_magic", false),
    VERSION_MISMATCH(0x02, "version_mismatch", false),
    BAD_HEADER_CRC(0x03, "bad_header_crc", false),
    PAYLOAD_TOO_LARGE(0x04, "payload_too_large", false),
    BAD_PAYLOAD_CRC(0x05, "bad_payload_crc", false),
    INTERNAL_ERROR(0x06, "internal_error", true),
    EMPTY_PAYLOAD(0x07, "empty_payload", false),
    UNKNOWN_MESSAGE(0x08, "unknown_message", false),
    RESERVED_FLAGS_SET(0x09, "reserved_flags_set", false),
    OVERLOADED(0x0A, "overloaded", true);

    private static final NackReason[] BY_CODE = new NackReason[256];

    static {
        for (NackReason r : values()) {
            BY_CODE[r.code] = r;
        }
    }

    private final int code;
    private final String wireName;
    private final boolean retryable;

    NackReason(int code, String wireName, boolean retryable) {
        this.code = code;
        this.wireName = wireName;
        this.retryable = retryable;
    }

    /** The reason byte on the wire (0x01..=0x0A). */
    public int code() {
        return code;
    }

    /** The protocol's name for it, e.g. {@code overloaded}. */
    public String wireName() {
        return wireName;
    }

    /** True for internal_error and overloaded: back off and resend on the same connection. */
    public boolean isRetryable() {
        return retryable;
    }

    /** True when the daemon closes the connection after this nack (every non-retryable reason). */
    public boolean closesConnection() {
        return !retryable;
    }

    /** The reason for a wire byte, or {@code null} if the byte is not a known reason. */
    public static NackReason fromCode(int code) {
        return code >= 0 && code < 256 ? BY_CODE[code] : null;
    }

    /** The reason with this protocol name ({@code bad_magic} ...), or {@code null}. */
    public static NackReason fromWireName(String name) {
        for (NackReason r : values()) {
            if (r.wireName.equals(name)) {
                return r;
            }
        }
        return null;
    }
}
