package dev.spillway.client;

/**
 * The daemon answered a request with a Nack.
 *
 * <p>If {@link #isRetryable()} (internal_error, overloaded) the connection is
 * still open: back off and resend the same request on it. Otherwise the daemon
 * has closed the connection and resending will not help: the client is broken
 * or speaks another protocol version.
 */
public class NackException extends SpillwayException {
    private static final long serialVersionUID = 1L;

    private final NackReason reason;
    private final int daemonVersion;

    public NackException(NackReason reason, int daemonVersion) {
        super(describe(reason, daemonVersion));
        this.reason = reason;
        this.daemonVersion = daemonVersion;
    }

    static String describe(NackReason reason, int daemonVersion) {
        StringBuilder s = new StringBuilder("daemon nacked: ").append(reason.wireName())
            .append(String.format(" (0x%02x, ", reason.code()));
        if (reason.isRetryable()) {
            s.append("retryable: back off and resend)");
        } else {
            s.append("not retryable: the daemon closes the connection)");
        }
        if (reason == NackReason.VERSION_MISMATCH && daemonVersion >= 0) {
            s.append("; the daemon speaks protocol version ").append(daemonVersion);
        }
        return s.toString();
    }

    /** Why the daemon refused. */
    public NackReason reason() {
        return reason;
    }

    /** The reason byte on the wire. */
    public int reasonByte() {
        return reason.code();
    }

    /** The daemon's protocol version sent with version_mismatch, or -1 if none was sent. */
    public int daemonVersion() {
        return daemonVersion;
    }

    @Override
    public boolean isRetryable() {
        return reason.isRetryable();
    }

    /** True when the daemon closed the connection after this nack. */
    public boolean closesConnection() {
        return reason.closesConnection();
    }
}
