package dev.spillway.client;

/**
 * A request refused locally, before any byte was sent: an empty record, a
 * record or batch over {@code payload_bytes_max}, or a batch with no records.
 * The connection is unaffected.
 */
public class RecordRejectedException extends SpillwayException {
    private static final long serialVersionUID = 1L;

    private final int recordIndex;
    private final long limit;

    public RecordRejectedException(String message, int recordIndex, long limit) {
        super(message);
        this.recordIndex = recordIndex;
        this.limit = limit;
    }

    /** The 0-based index of the offending record (0 for a push), or -1 for a batch with no records. */
    public int recordIndex() {
        return recordIndex;
    }

    /** The payload_bytes_max in force when the request was refused. */
    public long limit() {
        return limit;
    }
}
