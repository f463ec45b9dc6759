package dev.spillway.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;

/**
 * Encodes request frames into one reusable direct buffer (in write mode:
 * frames occupy {@code [0, position)}), so a connection's hot path allocates
 * nothing per frame.
 */
final class FrameWriter {
    ByteBuffer buf;
    private Codec.Crc crc;

    FrameWriter(int capacity) {
        allocate(capacity);
    }

    private void allocate(int capacity) {
        buf = ByteBuffer.allocateDirect(capacity).order(ByteOrder.LITTLE_ENDIAN);
        crc = new Codec.Crc(buf);
    }

    /** Makes room for {@code n} more bytes, keeping what is buffered. */
    void ensure(int n) {
        if (buf.remaining() >= n) {
            return;
        }
        long want = (long) buf.position() + n;
        int cap = buf.capacity();
        while (cap < want) {
            cap = cap >= (1 << 30) ? Integer.MAX_VALUE : cap * 2;
        }
        ByteBuffer old = buf;
        allocate(cap);
        old.flip();
        buf.put(old);
    }

    /** Drops back to {@code capacity} if a large frame grew the buffer past {@code keepMax}. Buffer must be empty. */
    void shrink(int capacity, int keepMax) {
        if (buf.capacity() > keepMax && buf.position() == 0) {
            allocate(capacity);
        }
    }

    int position() {
        return buf.position();
    }

    void clear() {
        buf.clear();
    }

    void header(int at, int type, int tier, int len) {
        buf.putInt(at, Codec.MAGIC_LE);
        buf.put(at + 4, (byte) Codec.PROTOCOL_VERSION);
        buf.put(at + 5, (byte) type);
        buf.put(at + 6, (byte) tier);
        buf.put(at + 7, (byte) 0);
        buf.putInt(at + 8, len);
        buf.putInt(at + 12, crc.of(at, at + 12));
    }

    /** Appends a Push frame; the caller has checked the record and called {@link #ensure}. */
    void push(byte tier, byte[] record) {
        int start = buf.position();
        int len = record.length;
        header(start, Codec.PUSH, tier, len);
        buf.position(start + Codec.HEADER_LEN);
        buf.put(record);
        buf.putInt(crc.of(start + Codec.HEADER_LEN, start + Codec.HEADER_LEN + len));
    }

    /** Appends a PushBatch frame whose payload is {@code payloadLen} bytes. */
    void pushBatch(byte tier, List<byte[]> records, int payloadLen) {
        int start = buf.position();
        header(start, Codec.PUSH_BATCH, tier, payloadLen);
        buf.position(start + Codec.HEADER_LEN);
        int n = records.size();
        buf.putInt(n);
        for (int i = 0; i < n; i++) {
            byte[] r = records.get(i);
            buf.putInt(r.length);
            buf.put(r);
        }
        buf.putInt(crc.of(start + Codec.HEADER_LEN, start + Codec.HEADER_LEN + payloadLen));
    }

    /** Appends a PushBatch frame whose payload is {@code payloadLen} bytes. */
    void pushBatch(byte tier, byte[][] records, int payloadLen) {
        int start = buf.position();
        header(start, Codec.PUSH_BATCH, tier, payloadLen);
        buf.position(start + Codec.HEADER_LEN);
        buf.putInt(records.length);
        for (byte[] r : records) {
            buf.putInt(r.length);
            buf.put(r);
        }
        buf.putInt(crc.of(start + Codec.HEADER_LEN, start + Codec.HEADER_LEN + payloadLen));
    }

    /** Appends a HealthCheck frame (tier byte 1, empty payload). */
    void healthCheck() {
        int start = buf.position();
        header(start, Codec.HEALTH_CHECK, 1, 0);
        buf.position(start + Codec.HEADER_LEN);
        buf.putInt(0);
    }

    byte[] toByteArray() {
        byte[] out = new byte[buf.position()];
        buf.get(0, out);
        return out;
    }
}
