/*
 * bench_spillway.c: throughput of the C client against a running daemon.
 *
 * Usage: SPILLWAY_SOCKET=/path/to/spillway.sock ./bench_spillway
 *
 * Prints three lines, one per scenario, in this order:
 *   serial_sync         2,000 Sync pushes, one at a time (spillway_push)
 *   pipelined_sync_w64  50,000 Sync pushes, 64 in flight
 *   batch256_buffered   2,000,000 records as PushBatch frames of 256 at tier
 *                       Buffered (7,812 of 256 and a last one of 128), 8
 *                       frames in flight
 * Each record is 5 bytes ("hello"). A retryable nack (overloaded,
 * internal_error) is counted, backed off and resent, so every record is
 * acked once; the count goes to stderr.
 */
#include "../spillway.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void backoff(int attempt)
{
    struct timespec ts;
    long ms = attempt < 7 ? 1L << attempt : 100;
    ts.tv_sec = 0;
    ts.tv_nsec = ms * 1000000L;
    nanosleep(&ts, NULL);
}

static spillway_client *connect_or_die(const char *path, uint32_t window)
{
    spillway_client *c = NULL;
    spillway_options o;
    spillway_options_init(&o);
    o.window = window;
    if (spillway_connect(&c, path, &o) != SPILLWAY_OK) {
        fprintf(stderr, "bench_spillway: %s\n", spillway_strerror(c));
        exit(1);
    }
    return c;
}

static void report(const char *name, uint64_t records, double seconds)
{
    printf("client=c scenario=%s records=%" PRIu64 " seconds=%.3f "
           "records_per_s=%.0f\n", name, records, seconds,
           (double)records / seconds);
    fflush(stdout);
}

static void fail(spillway_client *c, const char *what)
{
    fprintf(stderr, "bench_spillway: %s: %s\n", what, spillway_strerror(c));
    exit(1);
}

static void serial_sync(const char *path, uint64_t n)
{
    spillway_client *c = connect_or_die(path, 1);
    uint64_t i, retries = 0;
    double t0 = now_s();
    for (i = 0; i < n; i++) {
        int attempt = 0, rc;
        while ((rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5)) ==
                   SPILLWAY_ERR_NACK &&
               spillway_nack_retryable(spillway_last_nack(c))) {
            retries++;
            backoff(attempt++);
        }
        if (rc != SPILLWAY_OK)
            fail(c, "push");
    }
    report("serial_sync", n, now_s() - t0);
    if (retries)
        fprintf(stderr, "serial_sync: %" PRIu64 " retryable nacks resent\n", retries);
    spillway_close(c);
}

/* `total` records, `per` to a request (1: Push, else PushBatch; the last
 * batch holds the remainder), `window` requests in flight. Every answer is
 * taken with spillway_recv_answer so a retryable nack can be resent: the
 * full-size requests are alike, so resending one means sending one more. */
static void pipelined(const char *path, const char *name, uint64_t total,
                      size_t per, uint32_t window, spillway_tier tier,
                      const spillway_record *batch)
{
    spillway_client *c = connect_or_die(path, window);
    uint64_t full = total / per, rem = total % per;
    uint64_t acked = 0, retries = 0, rem_seq = 0, seq;
    int rem_pending = rem > 0, attempt = 0;
    double t0 = now_s();
    while (acked < total) {
        spillway_answer a;
        while ((full > 0 || rem_pending) && spillway_outstanding(c) < window) {
            size_t n = full > 0 ? per : (size_t)rem;
            int rc = per == 1
                ? spillway_send_push(c, tier, "hello", 5, &seq)
                : spillway_send_push_batch(c, tier, batch, n, &seq);
            if (rc != SPILLWAY_OK)
                fail(c, "send");
            if (full > 0) {
                full--;
            } else {
                rem_pending = 0;
                rem_seq = seq;
            }
        }
        if (spillway_recv_answer(c, &a) == SPILLWAY_OK) {
            acked += a.count;
            attempt = 0;
        } else if (a.status == SPILLWAY_ERR_NACK && spillway_nack_retryable(a.nack)) {
            retries++;
            if (rem > 0 && a.seq == rem_seq)
                rem_pending = 1;
            else
                full++;
            backoff(attempt++);
        } else {
            fail(c, "answer");
        }
    }
    report(name, total, now_s() - t0);
    if (retries)
        fprintf(stderr, "%s: %" PRIu64 " retryable nacks resent\n", name, retries);
    spillway_close(c);
}

int main(void)
{
    const char *path = getenv("SPILLWAY_SOCKET");
    static spillway_record batch[256];
    size_t i;
    if (!path || !path[0]) {
        fprintf(stderr, "bench_spillway: set SPILLWAY_SOCKET to a running "
                "daemon's socket\n");
        return 1;
    }
    for (i = 0; i < 256; i++) {
        batch[i].data = "hello";
        batch[i].len = 5;
    }
    serial_sync(path, 2000);
    pipelined(path, "pipelined_sync_w64", 50000, 1, 64, SPILLWAY_TIER_SYNC, NULL);
    pipelined(path, "batch256_buffered", 2000000, 256, 8, SPILLWAY_TIER_BUFFERED,
              batch);
    return 0;
}
