package dev.spillway.client;

/**
 * The durability a push asks for. The daemon acks a record only once this
 * promise holds.
 */
public enum Tier {
    /** Acked once {@code fdatasync} has returned for the bytes holding the record. */
    SYNC(1),
    /** In spillway the same as {@link #SYNC}: acked after the group-commit {@code fdatasync}. */
    BATCHED(2),
    /**
     * Acked once the record is in the page cache: it survives a daemon crash but
     * not a power cut; an fsync follows within {@code wab.buffered_flush_interval_ms}.
     */
    BUFFERED(3);

    private final byte code;

    Tier(int code) {
        this.code = (byte) code;
    }

    /** The tier byte on the wire (1, 2 or 3). */
    public byte code() {
        return code;
    }

    /** The tier for a wire byte. */
    public static Tier fromCode(int code) {
        switch (code) {
            case 1: return SYNC;
            case 2: return BATCHED;
            case 3: return BUFFERED;
            default: throw new IllegalArgumentException("unknown tier byte " + code + " (tiers are 1, 2, 3)");
        }
    }

    /** The lowercase protocol name: {@code sync}, {@code batched}, {@code buffered}. */
    public String wireName() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
