package dev.spillway.client;

/**
 * The daemon sent something that is not a valid answer: a malformed frame
 * (bad magic, version, CRC, flags, length, unknown type or nack reason), a
 * response of the wrong type, an AckBatch whose count is not the batch's, or
 * it closed the connection part-way through a frame. The connection cannot be
 * used any more; reconnect.
 */
public class ProtocolException extends SpillwayException {
    private static final long serialVersionUID = 1L;

    public ProtocolException(String message) {
        super("protocol error: " + message);
    }
}
