package dev.spillway.client;

/**
 * What became of one pipelined request: acked, or failed with the error
 * (a {@link NackException}, or the connection error that ended it).
 */
public final class Outcome {
    /** The kind of request this outcome answers. */
    public enum Request {
        PUSH, PUSH_BATCH, HEALTH_CHECK
    }

    private final long sequence;
    private final Request request;
    private final int records;
    private final SpillwayException error;

    Outcome(long sequence, Request request, int records, SpillwayException error) {
        this.sequence = sequence;
        this.request = request;
        this.records = records;
        this.error = error;
    }

    /** The request's number in its pipeline (0, 1, 2 ... in sending order), as returned when it was queued. */
    public long sequence() {
        return sequence;
    }

    public Request request() {
        return request;
    }

    /** The records the request carried: 1 for a push, the batch's count, 0 for a health check. */
    public int records() {
        return records;
    }

    /** True if the daemon acked the request (for a health check: answered HealthCheckResponse). */
    public boolean ok() {
        return error == null;
    }

    /** The failure, or {@code null} if {@link #ok()}. */
    public SpillwayException error() {
        return error;
    }

    /** True if the request failed with a retryable nack: resend it (after a back-off) on the same connection. */
    public boolean isRetryable() {
        return error != null && error.isRetryable();
    }

    @Override
    public String toString() {
        return "#" + sequence + " " + request + (records > 0 ? "(" + records + ")" : "") + ": "
            + (error == null ? "ok" : error.getMessage());
    }
}
