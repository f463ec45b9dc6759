package dev.spillway.client;

/**
 * The connection is gone: the daemon closed it (end-of-file, reset, broken
 * pipe), it was closed locally, or an earlier error made it unusable.
 * Reconnect to continue.
 */
public class ConnectionClosedException extends SpillwayException {
    private static final long serialVersionUID = 1L;

    public ConnectionClosedException(String message) {
        super(message);
    }

    public ConnectionClosedException(String message, Throwable cause) {
        super(message, cause);
    }
}
