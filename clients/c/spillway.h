/*
 * spillway.h: producer client for spillway (and any weir v1 daemon) over a
 * Unix stream socket. C99 + POSIX, no dependencies beyond libc.
 *
 * Wire protocol: docs/wire-protocol.md (weir v1 plus spillway's PushBatch,
 * AckBatch and Overloaded extensions).
 *
 * Memory: spillway_connect makes exactly one allocation, the client (its
 * fixed 64 KiB read and write buffers and a ring of `window` slots for the
 * pipelined sender). Nothing else is allocated afterwards; spillway_close
 * frees it. The push paths copy records into the write buffer (records of
 * 16 KiB or more are written straight from the caller's memory).
 *
 * Threads: a client is not thread-safe; use one client per thread.
 *
 * Status codes: every call that can fail returns a spillway_status.
 * spillway_strerror(client) explains the last failure in one line and
 * spillway_last_nack(client) gives the nack reason behind the last
 * SPILLWAY_ERR_NACK.
 */
#ifndef SPILLWAY_H
#define SPILLWAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The protocol's hard cap on a frame's payload (16 MiB). */
#define SPILLWAY_PAYLOAD_BYTES_HARD_MAX 16777216u
/* Frame overhead: 16-byte header plus 4-byte payload CRC trailer. */
#define SPILLWAY_HEADER_LEN 16u
#define SPILLWAY_TRAILER_LEN 4u
/* Defaults used when an option is 0. */
#define SPILLWAY_DEFAULT_TIMEOUT_MS 10000
#define SPILLWAY_DEFAULT_WINDOW 64u
/* Largest accepted pipeline window. */
#define SPILLWAY_WINDOW_MAX 4096u

typedef enum spillway_status {
    SPILLWAY_OK = 0,
    /* The daemon refused the request (a Nack); see spillway_last_nack.
     * Retryable reasons (internal_error, overloaded) leave the connection
     * open: back off and resend on the same client. Any other reason means
     * the daemon has closed the connection. */
    SPILLWAY_ERR_NACK = 1,
    /* The daemon sent bytes that are not a valid answer to the request:
     * a malformed frame, a wrong AckBatch count, an unexpected response
     * type, or end-of-file in the middle of a frame. The connection is
     * dropped. */
    SPILLWAY_ERR_PROTOCOL = 2,
    /* A wait for the socket exceeded the timeout. The request's fate is
     * unknown (it may still be stored). After a read timeout the client
     * stays usable: the late answer is discarded when it arrives. After a
     * write timeout nothing more can be sent on this client. */
    SPILLWAY_ERR_TIMEOUT = 3,
    /* The daemon closed the connection (end-of-file, reset, broken pipe),
     * or the connection was already unusable after an earlier error. */
    SPILLWAY_ERR_CLOSED = 4,
    /* Refused locally, nothing was sent: an empty record, a record or
     * batch over payload_bytes_max, an empty batch, a bad argument, or a
     * call made in the wrong state. The connection is unaffected. */
    SPILLWAY_ERR_REJECTED = 5,
    /* Any other system call failure (socket, connect, allocation). */
    SPILLWAY_ERR_IO = 6
} spillway_status;

typedef enum spillway_tier {
    SPILLWAY_TIER_SYNC = 1,     /* acked after fdatasync */
    SPILLWAY_TIER_BATCHED = 2,  /* acked after fdatasync (group commit) */
    SPILLWAY_TIER_BUFFERED = 3  /* acked once in the page cache */
} spillway_tier;

typedef enum spillway_nack_reason {
    SPILLWAY_NACK_NONE = 0x00, /* not a nack */
    SPILLWAY_NACK_BAD_MAGIC = 0x01,
    SPILLWAY_NACK_VERSION_MISMATCH = 0x02,
    SPILLWAY_NACK_BAD_HEADER_CRC = 0x03,
    SPILLWAY_NACK_PAYLOAD_TOO_LARGE = 0x04,
    SPILLWAY_NACK_BAD_PAYLOAD_CRC = 0x05,
    SPILLWAY_NACK_INTERNAL_ERROR = 0x06, /* retryable */
    SPILLWAY_NACK_EMPTY_PAYLOAD = 0x07,
    SPILLWAY_NACK_UNKNOWN_MESSAGE = 0x08,
    SPILLWAY_NACK_RESERVED_FLAGS_SET = 0x09,
    SPILLWAY_NACK_OVERLOADED = 0x0A /* retryable */
} spillway_nack_reason;

typedef enum spillway_msg_type {
    SPILLWAY_MSG_PUSH = 0x01,
    SPILLWAY_MSG_ACK = 0x02,
    SPILLWAY_MSG_NACK = 0x03,
    SPILLWAY_MSG_HEALTH_CHECK = 0x04,
    SPILLWAY_MSG_HEALTH_CHECK_RESPONSE = 0x05,
    SPILLWAY_MSG_PUSH_BATCH = 0x06,
    SPILLWAY_MSG_ACK_BATCH = 0x07
} spillway_msg_type;

/* One record of a batch: `len` bytes at `data` (len >= 1). */
typedef struct spillway_record {
    const void *data;
    size_t len;
} spillway_record;

/* Connection options. Zero in any field means its default, so
 * `spillway_options o = {0};` is valid; spillway_options_init sets the
 * defaults explicitly. */
typedef struct spillway_options {
    int connect_timeout_ms;     /* default 10000 */
    int io_timeout_ms;          /* every read and write wait; default 10000 */
    uint32_t payload_bytes_max; /* local refusal above this; default and
                                   maximum 16777216 (set it to the daemon's
                                   server.payload_bytes_max if lower) */
    uint32_t window;            /* pipelined requests in flight; default 64,
                                   at most SPILLWAY_WINDOW_MAX */
} spillway_options;

typedef struct spillway_client spillway_client; /* opaque */

/* The outcome of one pipelined request (spillway_recv_answer). */
typedef struct spillway_answer {
    uint64_t seq;    /* the request's sequence number (from spillway_send_*) */
    int status;      /* SPILLWAY_OK or the error for this request */
    uint8_t nack;    /* the nack reason if status == SPILLWAY_ERR_NACK, else 0 */
    uint32_t count;  /* records acked: 1 for a push, the count for a batch,
                        0 for a health check or on error */
} spillway_answer;

/* What spillway_flush reports: every pipelined request answered since the
 * previous spillway_flush, whether its answer was handed out by
 * spillway_recv_answer or collected by a spillway_send_* call that found
 * the window full. */
typedef struct spillway_summary {
    uint64_t requests;        /* requests answered (or failed) */
    uint64_t acked;           /* requests acked */
    uint64_t records;         /* records acked (a batch counts its records) */
    uint64_t failed;          /* requests not acked */
    int first_error;          /* status of the first failed request, or OK */
    uint64_t first_error_seq; /* its sequence number */
    uint8_t first_nack;       /* its nack reason, if it was nacked */
} spillway_summary;

/* ---- connection ---------------------------------------------------------- */

void spillway_options_init(spillway_options *opts);

/* Connects to the daemon's socket. `opts` may be NULL (defaults).
 * On success *out is a connected client. On failure *out is still a client
 * (unless allocation failed, then NULL) so spillway_strerror(*out) can say
 * why; it is unusable. Call spillway_close(*out) in both cases. */
int spillway_connect(spillway_client **out, const char *socket_path,
                     const spillway_options *opts);

/* Closes the socket and frees the client (NULL is fine). Requests that
 * were queued but not answered are abandoned. */
void spillway_close(spillway_client *client);

/* ---- one request at a time ---------------------------------------------- */
/* These refuse (SPILLWAY_ERR_REJECTED) while pipelined requests are
 * outstanding: call spillway_flush first. */

/* One Push; returns once the daemon has acked it. */
int spillway_push(spillway_client *client, spillway_tier tier,
                  const void *data, size_t len);

/* One PushBatch of `count` records; returns once the AckBatch arrived.
 * *acked (may be NULL) receives the acked count, which always equals
 * `count` (any other count is SPILLWAY_ERR_PROTOCOL). */
int spillway_push_batch(spillway_client *client, spillway_tier tier,
                        const spillway_record *records, size_t count,
                        uint32_t *acked);

/* HealthCheck; OK on HealthCheckResponse. While the daemon's shard cannot
 * write it answers with a retryable nack instead: SPILLWAY_ERR_NACK. */
int spillway_health(spillway_client *client);

/* ---- pipelining ------------------------------------------------------------
 * spillway_send_* queue a request without waiting for its answer and return
 * its sequence number in *seq (may be NULL). Frames are buffered and written
 * in batches: when the write buffer fills, when the window is full, and by
 * spillway_recv_answer and spillway_flush.
 *
 * At most `window` requests are ever outstanding. When a send finds the
 * window full it writes what is buffered and reads answers itself (at least
 * the oldest one, plus every answer already received) and folds them into
 * the summary that spillway_flush reports. So a caller that only sends and
 * then flushes cannot deadlock against the daemon; while writing, the client
 * also keeps reading answers off the socket. A caller that wants each
 * outcome calls spillway_recv_answer whenever spillway_outstanding() equals
 * the window, before the next send.
 *
 * A send returns OK when the request is outstanding; its outcome then comes
 * from spillway_recv_answer or spillway_flush. Any other status means the
 * request was not queued (or could not be written) and will not be
 * answered. */
int spillway_send_push(spillway_client *client, spillway_tier tier,
                       const void *data, size_t len, uint64_t *seq);
int spillway_send_push_batch(spillway_client *client, spillway_tier tier,
                             const spillway_record *records, size_t count,
                             uint64_t *seq);
int spillway_send_health(spillway_client *client, uint64_t *seq);

/* The answer to the oldest outstanding request, in request order. Returns
 * answer->status (answer may be NULL). SPILLWAY_ERR_REJECTED if nothing is
 * outstanding. After a retryable nack, or a read timeout (whose late
 * answer is discarded when it arrives), the next requests are still
 * answered. After any other error the connection is gone and the
 * remaining outstanding requests are answered with SPILLWAY_ERR_CLOSED
 * without waiting. */
int spillway_recv_answer(spillway_client *client, spillway_answer *answer);

/* Writes everything buffered and waits for every outstanding answer.
 * Returns OK if every pipelined request since the previous flush was acked,
 * else the first failure's status (spillway_strerror and spillway_last_nack
 * then describe that first failure). *summary (may be NULL) receives the
 * counts; they restart at zero. */
int spillway_flush(spillway_client *client, spillway_summary *summary);

/* Pipelined requests sent (or buffered) whose answers were not yet taken. */
size_t spillway_outstanding(const spillway_client *client);
/* The window this client was connected with. */
uint32_t spillway_window(const spillway_client *client);

/* ---- errors ---------------------------------------------------------------- */

/* One line explaining the last failure on `client` (never NULL). */
const char *spillway_strerror(const spillway_client *client);
/* The nack reason of the last SPILLWAY_ERR_NACK, else SPILLWAY_NACK_NONE. */
uint8_t spillway_last_nack(const spillway_client *client);
/* 1 for internal_error and overloaded (back off, resend on the same
 * connection), 0 for every other reason. */
int spillway_nack_retryable(uint8_t reason);
/* "overloaded", "bad_magic", ...; "unknown" for an unassigned byte. */
const char *spillway_nack_name(uint8_t reason);
/* "ok", "nack", "protocol", "timeout", "closed", "rejected", "io". */
const char *spillway_status_name(int status);
/* Bytes this client has written to its socket (for tests and monitoring). */
uint64_t spillway_bytes_written(const spillway_client *client);

/* ---- codec (used by the client; exposed for tests and tools) ---------------- */

/* CRC-32 as in zlib (reflected polynomial 0xEDB88320). */
uint32_t spillway_crc32(const void *data, size_t len);

/* Frame sizes: 16 + payload + 4. The batch payload is 4 + sum(4 + len). */
uint64_t spillway_push_frame_len(size_t len);
uint64_t spillway_push_batch_frame_len(const spillway_record *records,
                                       size_t count);

/* Encode one frame into out[0..cap). Return the frame length, or 0 if the
 * request is invalid (empty record, empty batch, bad tier, payload over
 * the 16 MiB hard cap) or does not fit in `cap`. */
size_t spillway_encode_push(uint8_t *out, size_t cap, spillway_tier tier,
                            const void *data, size_t len);
size_t spillway_encode_push_batch(uint8_t *out, size_t cap,
                                  spillway_tier tier,
                                  const spillway_record *records,
                                  size_t count);
size_t spillway_encode_health(uint8_t *out, size_t cap);

/* A decoded response frame. */
typedef struct spillway_response {
    uint8_t type;           /* SPILLWAY_MSG_ACK, _NACK, _HEALTH_CHECK_RESPONSE,
                               _ACK_BATCH */
    uint8_t nack;           /* reason, for a nack */
    uint8_t daemon_version; /* for a two-byte nack (version_mismatch), else 0 */
    uint32_t count;         /* for an AckBatch */
} spillway_response;

/* Decodes one response from the front of buf[0..len), trusting nothing:
 * magic, version, header CRC, response type, flags, the payload length the
 * type calls for (judged from the header alone), payload CRC, nack reason.
 * Returns SPILLWAY_OK with *consumed = the frame's length when a frame was
 * decoded, SPILLWAY_OK with *consumed = 0 when more bytes are needed, or
 * SPILLWAY_ERR_PROTOCOL (err, if not NULL, receives why). */
int spillway_decode_response(const uint8_t *buf, size_t len,
                             spillway_response *out, size_t *consumed,
                             char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* SPILLWAY_H */
