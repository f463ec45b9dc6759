package dev.spillway.client;

import java.io.IOException;

/**
 * Base of every error this client raises. It is a checked exception (an
 * {@link IOException}), because every call talks to another process.
 *
 * <p>Subclasses: {@link NackException} (the daemon refused the request),
 * {@link ProtocolException} (the daemon sent bytes that are not a valid answer),
 * {@link SpillwayTimeoutException}, {@link ConnectionClosedException} and
 * {@link RecordRejectedException} (refused locally, nothing sent). A plain
 * {@code SpillwayException} is a failure to connect or another I/O error.
 */
public class SpillwayException extends IOException {
    private static final long serialVersionUID = 1L;

    public SpillwayException(String message) {
        super(message);
    }

    public SpillwayException(String message, Throwable cause) {
        super(message, cause);
    }

    /**
     * Whether the same request may be resent on the same connection: true only
     * for a nack with a retryable reason (internal_error, overloaded). After any
     * other error the connection is closed or in an unknown state.
     */
    public boolean isRetryable() {
        return false;
    }
}
