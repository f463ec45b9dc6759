package dev.spillway.client;

import java.util.List;
import java.util.Objects;

/** The local checks made before anything is sent. */
final class Limits {
    private Limits() {
    }

    static void checkPush(byte[] record, int max) throws RecordRejectedException {
        Objects.requireNonNull(record, "record");
        if (record.length == 0) {
            throw new RecordRejectedException(
                "record 0 is empty: the daemon refuses empty records (nothing was sent)", 0, max);
        }
        if (record.length > max) {
            throw new RecordRejectedException("record 0 is " + record.length
                + " bytes, over payload_bytes_max = " + max + " (nothing was sent)", 0, max);
        }
    }

    /** Returns the batch's payload length, 4 + Σ(4 + len). */
    static int checkBatch(List<byte[]> records, int max) throws RecordRejectedException {
        Objects.requireNonNull(records, "records");
        int n = records.size();
        if (n == 0) {
            throw new RecordRejectedException("push_batch with no records (nothing was sent)", -1, max);
        }
        long total = 4;
        int over = -1;
        for (int i = 0; i < n; i++) {
            byte[] r = records.get(i);
            if (r == null) {
                throw new NullPointerException("record " + i + " of the batch is null");
            }
            if (r.length == 0) {
                throw new RecordRejectedException("record " + i + " of " + n
                    + " is empty: the daemon refuses empty records (nothing was sent)", i, max);
            }
            total += 4L + r.length;
            if (over < 0 && total > max) {
                over = i;
            }
        }
        if (over >= 0) {
            throw new RecordRejectedException("push_batch payload of " + total + " bytes (4 + sum of (4 + length) over "
                + n + " records) is over payload_bytes_max = " + max + "; the limit is crossed at record " + over
                + " (nothing was sent)", over, max);
        }
        return (int) total;
    }

    static int checkBatch(byte[][] records, int max) throws RecordRejectedException {
        Objects.requireNonNull(records, "records");
        return checkBatch(java.util.Arrays.asList(records), max);
    }
}
