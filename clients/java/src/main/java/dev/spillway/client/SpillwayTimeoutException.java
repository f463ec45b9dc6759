package dev.spillway.client;

/**
 * A connect, read or write did not finish within its timeout. The request's
 * fate is unknown (it may still be stored). After a read timeout the
 * connection stays usable: the late answer is discarded when it arrives, so
 * later calls stay matched to their own answers. After a write timeout the
 * connection is unusable (a frame may be half written).
 */
public class SpillwayTimeoutException extends SpillwayException {
    private static final long serialVersionUID = 1L;

    public SpillwayTimeoutException(String message) {
        super(message);
    }
}
