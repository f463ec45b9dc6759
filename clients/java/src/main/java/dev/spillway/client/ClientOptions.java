package dev.spillway.client;

import java.time.Duration;
import java.util.Objects;

/**
 * Connection options (immutable; every {@code with*} returns a copy).
 *
 * <ul>
 *   <li>{@code connectTimeout}: how long connecting may take (default 10 s).</li>
 *   <li>{@code readTimeout}: how long to wait for each answer (default 10 s).
 *       Every read has this deadline; nothing waits for ever.</li>
 *   <li>{@code writeTimeout}: how long a write may make no progress (default 10 s).</li>
 *   <li>{@code payloadBytesMax}: the largest payload sent (default and maximum
 *       16 MiB = 16777216, the protocol's hard cap). Set it to the daemon's
 *       {@code server.payload_bytes_max} if that is lower, so oversized records
 *       are refused locally instead of nacked (and the connection closed).</li>
 * </ul>
 */
public final class ClientOptions {
    private static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);
    private static final ClientOptions DEFAULTS =
        new ClientOptions(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, Codec.PAYLOAD_BYTES_HARD_MAX);

    private final Duration connectTimeout;
    private final Duration readTimeout;
    private final Duration writeTimeout;
    private final int payloadBytesMax;

    private ClientOptions(Duration connectTimeout, Duration readTimeout, Duration writeTimeout, int payloadBytesMax) {
        this.connectTimeout = positive(connectTimeout, "connectTimeout");
        this.readTimeout = positive(readTimeout, "readTimeout");
        this.writeTimeout = positive(writeTimeout, "writeTimeout");
        if (payloadBytesMax < 1 || payloadBytesMax > Codec.PAYLOAD_BYTES_HARD_MAX) {
            throw new IllegalArgumentException("payloadBytesMax must be 1.." + Codec.PAYLOAD_BYTES_HARD_MAX
                + ", not " + payloadBytesMax);
        }
        this.payloadBytesMax = payloadBytesMax;
    }

    private static Duration positive(Duration d, String name) {
        Objects.requireNonNull(d, name);
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, not " + d);
        }
        return d;
    }

    /** 10 s timeouts, payloadBytesMax 16 MiB. */
    public static ClientOptions defaults() {
        return DEFAULTS;
    }

    public ClientOptions withConnectTimeout(Duration d) {
        return new ClientOptions(d, readTimeout, writeTimeout, payloadBytesMax);
    }

    public ClientOptions withReadTimeout(Duration d) {
        return new ClientOptions(connectTimeout, d, writeTimeout, payloadBytesMax);
    }

    public ClientOptions withWriteTimeout(Duration d) {
        return new ClientOptions(connectTimeout, readTimeout, d, payloadBytesMax);
    }

    /** Sets the connect, read and write timeouts at once. */
    public ClientOptions withTimeouts(Duration d) {
        return new ClientOptions(d, d, d, payloadBytesMax);
    }

    public ClientOptions withPayloadBytesMax(int bytes) {
        return new ClientOptions(connectTimeout, readTimeout, writeTimeout, bytes);
    }

    public Duration connectTimeout() {
        return connectTimeout;
    }

    public Duration readTimeout() {
        return readTimeout;
    }

    public Duration writeTimeout() {
        return writeTimeout;
    }

    public int payloadBytesMax() {
        return payloadBytesMax;
    }

    @Override
    public String toString() {
        return "ClientOptions{connectTimeout=" + connectTimeout + ", readTimeout=" + readTimeout
            + ", writeTimeout=" + writeTimeout + ", payloadBytesMax=" + payloadBytesMax + "}";
    }
}
