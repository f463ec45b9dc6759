/*
 * spillway.c: producer client for spillway (weir v1 + extensions).
 * See spillway.h for the API and docs/wire-protocol.md for the protocol.
 *
 * I/O model: the socket is non-blocking; every read and every write is
 * preceded by poll() with the time left until a deadline (the io timeout,
 * counted from the start of the operation), so no call can block longer.
 * While a write waits for room in the socket, the client also reads whatever
 * answers have arrived into its read buffer: the daemon can always hand its
 * answers off, so the two sides can never wait on each other.
 */
#include "spillway.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RBUF_SIZE 65536u
#define WBUF_SIZE 65536u
/* Records at least this long are written from the caller's memory. */
#define DIRECT_MIN 16384u
#define MSG_CAP 384

/* CRC-32 (zlib): reflected polynomial 0xEDB88320, init and final xor ~0. */
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

static uint32_t crc_update(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = (const uint8_t *)data;
    while (len--)
        crc = crc_table[(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    return crc;
}

uint32_t spillway_crc32(const void *data, size_t len)
{
    return crc_update(0xffffffffu, data, len) ^ 0xffffffffu;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void put_header(uint8_t *h, uint8_t type, uint8_t tier, uint32_t len)
{
    h[0] = 'W';
    h[1] = 'E';
    h[2] = 'I';
    h[3] = 'R';
    h[4] = 0x01;
    h[5] = type;
    h[6] = tier;
    h[7] = 0x00;
    put_le32(h + 8, len);
    put_le32(h + 12, spillway_crc32(h, 12));
}

/* ---- names and messages -------------------------------------------------- */

const char *spillway_nack_name(uint8_t reason)
{
    switch (reason) {
    case SPILLWAY_NACK_NONE: return "none";
    case SPILLWAY_NACK_BAD_MAGIC: return "bad_magic";
    case SPILLWAY_NACK_VERSION_MISMATCH: return "version_mismatch";
    case SPILLWAY_NACK_BAD_HEADER_CRC: return "bad_header_crc";
    case SPILLWAY_NACK_PAYLOAD_TOO_LARGE: return "payload_too_large";
    case SPILLWAY_NACK_BAD_PAYLOAD_CRC: return "bad_payload_crc";
    case SPILLWAY_NACK_INTERNAL_ERROR: return "internal_error";
    case SPILLWAY_NACK_EMPTY_PAYLOAD: return "empty_payload";
    case SPILLWAY_NACK_UNKNOWN_MESSAGE: return "unknown_message";
    case SPILLWAY_NACK_RESERVED_FLAGS_SET: return "reserved_flags_set";
    case SPILLWAY_NACK_OVERLOADED: return "overloaded";
    default: return "unknown";
    }
}

int spillway_nack_retryable(uint8_t reason)
{
    return reason == SPILLWAY_NACK_INTERNAL_ERROR ||
           reason == SPILLWAY_NACK_OVERLOADED;
}

const char *spillway_status_name(int status)
{
    switch (status) {
    case SPILLWAY_OK: return "ok";
    case SPILLWAY_ERR_NACK: return "nack";
    case SPILLWAY_ERR_PROTOCOL: return "protocol";
    case SPILLWAY_ERR_TIMEOUT: return "timeout";
    case SPILLWAY_ERR_CLOSED: return "closed";
    case SPILLWAY_ERR_REJECTED: return "rejected";
    case SPILLWAY_ERR_IO: return "io";
    default: return "unknown";
    }
}

static const char *msg_type_name(uint8_t type)
{
    switch (type) {
    case SPILLWAY_MSG_PUSH: return "push";
    case SPILLWAY_MSG_ACK: return "ack";
    case SPILLWAY_MSG_NACK: return "nack";
    case SPILLWAY_MSG_HEALTH_CHECK: return "health_check";
    case SPILLWAY_MSG_HEALTH_CHECK_RESPONSE: return "health_check_response";
    case SPILLWAY_MSG_PUSH_BATCH: return "push_batch";
    case SPILLWAY_MSG_ACK_BATCH: return "ack_batch";
    default: return "unknown";
    }
}

/* ---- codec --------------------------------------------------------------- */

uint64_t spillway_push_frame_len(size_t len)
{
    return (uint64_t)SPILLWAY_HEADER_LEN + (uint64_t)len + SPILLWAY_TRAILER_LEN;
}

/* The batch payload length, 4 + sum(4 + len); stops summing (and returns
 * the partial sum) once it passes `limit`, so it cannot overflow. */
static uint64_t batch_payload_len(const spillway_record *records, size_t count,
                                  uint64_t limit, size_t *over_at)
{
    uint64_t total = 4;
    size_t i;
    for (i = 0; i < count; i++) {
        total += 4 + (uint64_t)records[i].len;
        if (total > limit) {
            if (over_at)
                *over_at = i;
            return total;
        }
    }
    return total;
}

uint64_t spillway_push_batch_frame_len(const spillway_record *records,
                                       size_t count)
{
    return SPILLWAY_HEADER_LEN +
           batch_payload_len(records, count, UINT64_MAX / 2, NULL) +
           SPILLWAY_TRAILER_LEN;
}

int spillway_decode_response(const uint8_t *b, size_t len,
                             spillway_response *out, size_t *consumed,
                             char *err, size_t err_cap)
{
    uint32_t plen, want, have;
    size_t frame;
    uint8_t type;
    char dummy[1];

    if (!err || err_cap == 0) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    *consumed = 0;
    if (len < SPILLWAY_HEADER_LEN)
        return SPILLWAY_OK;
    if (memcmp(b, "WEIR", 4) != 0) {
        snprintf(err, err_cap,
                 "bad magic %02x %02x %02x %02x (expected 57 45 49 52, WEIR)",
                 b[0], b[1], b[2], b[3]);
        return SPILLWAY_ERR_PROTOCOL;
    }
    if (b[4] != 0x01) {
        snprintf(err, err_cap,
                 "protocol version byte is %u, this client speaks version 1",
                 b[4]);
        return SPILLWAY_ERR_PROTOCOL;
    }
    want = spillway_crc32(b, 12);
    have = get_le32(b + 12);
    if (want != have) {
        snprintf(err, err_cap,
                 "bad header crc: frame says 0x%08" PRIx32
                 ", bytes 0..12 give 0x%08" PRIx32, have, want);
        return SPILLWAY_ERR_PROTOCOL;
    }
    type = b[5];
    switch (type) {
    case SPILLWAY_MSG_ACK:
    case SPILLWAY_MSG_NACK:
    case SPILLWAY_MSG_HEALTH_CHECK_RESPONSE:
    case SPILLWAY_MSG_ACK_BATCH:
        break;
    case SPILLWAY_MSG_PUSH:
    case SPILLWAY_MSG_HEALTH_CHECK:
    case SPILLWAY_MSG_PUSH_BATCH:
        snprintf(err, err_cap,
                 "message type 0x%02x (%s) is a request, not a response", type,
                 msg_type_name(type));
        return SPILLWAY_ERR_PROTOCOL;
    default:
        snprintf(err, err_cap, "unknown message type 0x%02x", type);
        return SPILLWAY_ERR_PROTOCOL;
    }
    if (b[7] != 0) {
        snprintf(err, err_cap, "flags byte is 0x%02x, must be 0", b[7]);
        return SPILLWAY_ERR_PROTOCOL;
    }
    plen = get_le32(b + 8);
    if ((type == SPILLWAY_MSG_NACK && (plen < 1 || plen > 2)) ||
        (type == SPILLWAY_MSG_ACK_BATCH && plen != 4) ||
        ((type == SPILLWAY_MSG_ACK ||
          type == SPILLWAY_MSG_HEALTH_CHECK_RESPONSE) && plen != 0)) {
        snprintf(err, err_cap, "%s declares a %" PRIu32
                 "-byte payload, expected %s", msg_type_name(type), plen,
                 type == SPILLWAY_MSG_NACK ? "1 or 2"
                 : type == SPILLWAY_MSG_ACK_BATCH ? "4" : "0");
        return SPILLWAY_ERR_PROTOCOL;
    }
    frame = SPILLWAY_HEADER_LEN + plen + SPILLWAY_TRAILER_LEN;
    if (len < frame)
        return SPILLWAY_OK;
    want = spillway_crc32(b + SPILLWAY_HEADER_LEN, plen);
    have = get_le32(b + SPILLWAY_HEADER_LEN + plen);
    if (want != have) {
        snprintf(err, err_cap,
                 "bad payload crc: trailer says 0x%08" PRIx32
                 ", payload gives 0x%08" PRIx32, have, want);
        return SPILLWAY_ERR_PROTOCOL;
    }
    out->type = type;
    out->nack = 0;
    out->daemon_version = 0;
    out->count = 0;
    if (type == SPILLWAY_MSG_ACK_BATCH) {
        out->count = get_le32(b + SPILLWAY_HEADER_LEN);
    } else if (type == SPILLWAY_MSG_NACK) {
        uint8_t reason = b[SPILLWAY_HEADER_LEN];
        if (reason < SPILLWAY_NACK_BAD_MAGIC || reason > SPILLWAY_NACK_OVERLOADED) {
            snprintf(err, err_cap, "nack with unknown reason byte 0x%02x",
                     reason);
            return SPILLWAY_ERR_PROTOCOL;
        }
        out->nack = reason;
        if (plen == 2)
            out->daemon_version = b[SPILLWAY_HEADER_LEN + 1];
    }
    *consumed = frame;
    return SPILLWAY_OK;
}

/* ---- the client ---------------------------------------------------------- */

/* A pipelined request waiting for its answer. */
typedef struct slot {
    uint64_t seq;
    uint32_t count; /* records, for an AckBatch check */
    uint8_t type;   /* the request's message type */
} slot;

struct spillway_client {
    int fd;
    int io_timeout_ms;
    uint32_t payload_bytes_max;
    uint32_t window;

    /* A fatal error happened: nothing more will be answered or sent. */
    int dead;
    char dead_msg[MSG_CAP];
    /* A write failed, possibly part-way through a frame. */
    int write_failed;
    char write_msg[MSG_CAP];
    /* End-of-file (or a reset) was read; no more bytes will come. */
    int peer_eof;
    /* Answers to discard: their requests were given up after a timeout. */
    uint64_t stale;

    uint64_t next_seq;
    uint32_t head, count; /* the ring of outstanding pipelined requests */
    spillway_summary sum;
    char first_msg[MSG_CAP];

    char msg[MSG_CAP];
    uint8_t last_nack;
    uint64_t bytes_written;

    size_t rpos, rlen; /* undecoded bytes are rbuf[rpos..rlen) */
    size_t wlen;       /* encoded, unwritten bytes are wbuf[0..wlen) */
    uint8_t rbuf[RBUF_SIZE];
    uint8_t wbuf[WBUF_SIZE];
    slot ring[]; /* `window` slots (allocated with the client) */
};

static int set_msg(spillway_client *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->last_nack = SPILLWAY_NACK_NONE;
    return status;
}

/* Copies src into dst, always terminated; src and dst may be the same. */
static void copy_msg(char *dst, const char *src)
{
    if (dst != src) {
        size_t n = strlen(src);
        if (n >= MSG_CAP)
            n = MSG_CAP - 1;
        memmove(dst, src, n);
        dst[n] = '\0';
    }
}

/* Marks the connection unusable; `why` becomes part of later messages. */
static void kill_conn(spillway_client *c, const char *why)
{
    if (!c->dead) {
        c->dead = 1;
        copy_msg(c->dead_msg, why);
    }
}

static int nack_msg(spillway_client *c, uint8_t reason, uint8_t version,
                    const char *prefix)
{
    if (spillway_nack_retryable(reason)) {
        snprintf(c->msg, sizeof c->msg,
                 "%sdaemon nacked: %s (0x%02x, retryable: back off and resend)",
                 prefix, spillway_nack_name(reason), reason);
    } else {
        char extra[48] = "";
        if (reason == SPILLWAY_NACK_VERSION_MISMATCH && version)
            snprintf(extra, sizeof extra, ", daemon speaks version %u", version);
        snprintf(c->msg, sizeof c->msg,
                 "%sdaemon nacked: %s (0x%02x%s, not retryable: the daemon "
                 "closes the connection; a client bug or a version mismatch, "
                 "do not resend)",
                 prefix, spillway_nack_name(reason), reason, extra);
        kill_conn(c, c->msg);
    }
    c->last_nack = reason;
    return SPILLWAY_ERR_NACK;
}

const char *spillway_strerror(const spillway_client *c)
{
    if (!c)
        return "out of memory allocating the client";
    return c->msg[0] ? c->msg : "no error";
}

uint8_t spillway_last_nack(const spillway_client *c)
{
    return c ? c->last_nack : 0;
}

uint64_t spillway_bytes_written(const spillway_client *c)
{
    return c ? c->bytes_written : 0;
}

size_t spillway_outstanding(const spillway_client *c)
{
    return c ? c->count : 0;
}

uint32_t spillway_window(const spillway_client *c)
{
    return c ? c->window : 0;
}

void spillway_options_init(spillway_options *o)
{
    o->connect_timeout_ms = SPILLWAY_DEFAULT_TIMEOUT_MS;
    o->io_timeout_ms = SPILLWAY_DEFAULT_TIMEOUT_MS;
    o->payload_bytes_max = SPILLWAY_PAYLOAD_BYTES_HARD_MAX;
    o->window = SPILLWAY_DEFAULT_WINDOW;
}

/* ---- time and waiting ---------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* poll() for `events` until `deadline`. OK (revents set), TIMEOUT or IO. */
static int wait_fd(spillway_client *c, short events, int64_t deadline,
                   short *revents)
{
    for (;;) {
        struct pollfd p;
        int64_t left = deadline - now_ms();
        int r;
        if (left < 0)
            left = 0;
        p.fd = c->fd;
        p.events = events;
        p.revents = 0;
        r = poll(&p, 1, (int)left);
        if (r > 0) {
            *revents = p.revents;
            return SPILLWAY_OK;
        }
        if (r == 0)
            return SPILLWAY_ERR_TIMEOUT;
        if (errno != EINTR)
            return set_msg(c, SPILLWAY_ERR_IO, "poll: %s", strerror(errno));
    }
}

/* ---- reading --------------------------------------------------------------- */

static void compact_rbuf(spillway_client *c)
{
    if (c->rpos == 0)
        return;
    memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
    c->rlen -= c->rpos;
    c->rpos = 0;
}

/* One recv() into the read buffer, after poll said it is readable.
 * OK (maybe 0 bytes), CLOSED (end-of-file or reset; peer_eof set) or IO. */
static int read_some(spillway_client *c)
{
    ssize_t n;
    if (c->rlen == RBUF_SIZE)
        compact_rbuf(c);
    if (c->rlen == RBUF_SIZE)
        return SPILLWAY_OK;
    n = recv(c->fd, c->rbuf + c->rlen, RBUF_SIZE - c->rlen, 0);
    if (n > 0) {
        c->rlen += (size_t)n;
        return SPILLWAY_OK;
    }
    if (n == 0) {
        c->peer_eof = 1;
        return SPILLWAY_ERR_CLOSED;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return SPILLWAY_OK;
    if (errno == ECONNRESET || errno == EPIPE) {
        c->peer_eof = 1;
        return SPILLWAY_ERR_CLOSED;
    }
    return set_msg(c, SPILLWAY_ERR_IO, "reading the socket: %s", strerror(errno));
}

/* The error for "no more bytes will come". */
static int eof_error(spillway_client *c)
{
    size_t partial = c->rlen - c->rpos;
    if (partial > 0)
        return set_msg(c, SPILLWAY_ERR_PROTOCOL,
                       "malformed response from daemon: the connection closed "
                       "in the middle of a frame (%zu bytes of it received)",
                       partial);
    return set_msg(c, SPILLWAY_ERR_CLOSED, "connection closed by the daemon");
}

/* Waits until more bytes are in the read buffer. */
static int fill(spillway_client *c, int64_t deadline)
{
    size_t before;
    if (c->rpos > 0 && (c->rpos == c->rlen || c->rlen == RBUF_SIZE))
        compact_rbuf(c);
    before = c->rlen;
    while (c->rlen == before) {
        short rev = 0;
        int rc;
        if (c->peer_eof)
            return eof_error(c);
        rc = wait_fd(c, POLLIN, deadline, &rev);
        if (rc == SPILLWAY_ERR_TIMEOUT)
            return set_msg(c, SPILLWAY_ERR_TIMEOUT,
                           "no answer from the daemon within %d ms (the "
                           "request's fate is unknown)", c->io_timeout_ms);
        if (rc != SPILLWAY_OK)
            return rc;
        rc = read_some(c);
        if (rc == SPILLWAY_ERR_CLOSED && c->rlen == before)
            return eof_error(c);
        if (rc != SPILLWAY_OK && rc != SPILLWAY_ERR_CLOSED)
            return rc;
    }
    return SPILLWAY_OK;
}

/* Decodes a frame sitting in the read buffer, if any (no waiting).
 * 1 = decoded into *r, 0 = incomplete, -1 = malformed (message set). */
static int decode_buffered(spillway_client *c, spillway_response *r)
{
    size_t used = 0;
    char why[256];
    int rc = spillway_decode_response(c->rbuf + c->rpos, c->rlen - c->rpos, r,
                                      &used, why, sizeof why);
    if (rc != SPILLWAY_OK) {
        set_msg(c, SPILLWAY_ERR_PROTOCOL, "malformed response from daemon: %s",
                why);
        return -1;
    }
    if (used == 0)
        return 0;
    c->rpos += used;
    return 1;
}

/* The next response owed to a current request (stale ones are skipped). */
static int read_response(spillway_client *c, spillway_response *r,
                         int64_t deadline)
{
    for (;;) {
        int got = decode_buffered(c, r);
        if (got < 0)
            return SPILLWAY_ERR_PROTOCOL;
        if (got > 0) {
            if (c->stale > 0) {
                c->stale--;
                continue;
            }
            return SPILLWAY_OK;
        }
        got = fill(c, deadline);
        if (got != SPILLWAY_OK)
            return got;
    }
}

/* Whether an answer to a current request can be had without waiting. */
static int answer_ready(spillway_client *c)
{
    spillway_response r;
    size_t used = 0;
    if (c->dead)
        return 1;
    if (c->stale > 0)
        return 0;
    if (spillway_decode_response(c->rbuf + c->rpos, c->rlen - c->rpos, &r,
                                 &used, NULL, 0) != SPILLWAY_OK)
        return 1; /* malformed: reading it reports the error at once */
    return used > 0;
}

/* ---- writing ------------------------------------------------------------- */

/* Writes the whole iovec (at most 3 entries), reading answers meanwhile. */
static int send_all(spillway_client *c, const struct iovec *iov_in, int n_in)
{
    struct iovec iov[3];
    int n = 0, i;
    int64_t deadline = now_ms() + c->io_timeout_ms;

    for (i = 0; i < n_in; i++)
        if (iov_in[i].iov_len > 0)
            iov[n++] = iov_in[i];
    i = 0;
    while (i < n) {
        short ev = POLLOUT, rev = 0;
        int rc;
        struct msghdr mh;
        ssize_t w;
        if (!c->peer_eof &&
            (c->rlen < RBUF_SIZE || c->rpos > 0))
            ev |= POLLIN;
        rc = wait_fd(c, ev, deadline, &rev);
        if (rc == SPILLWAY_ERR_TIMEOUT)
            return set_msg(c, SPILLWAY_ERR_TIMEOUT,
                           "write timed out after %d ms (the daemon is not "
                           "reading)", c->io_timeout_ms);
        if (rc != SPILLWAY_OK)
            return rc;
        if (rev & POLLIN) {
            rc = read_some(c);
            if (rc == SPILLWAY_ERR_IO)
                return rc;
        }
        if (!(rev & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)))
            continue;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov + i;
        mh.msg_iovlen = n - i;
        w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return set_msg(c, SPILLWAY_ERR_CLOSED,
                               "connection closed by the daemon while a "
                               "request was being written (%s)",
                               strerror(errno));
            return set_msg(c, SPILLWAY_ERR_IO, "writing the socket: %s",
                           strerror(errno));
        }
        c->bytes_written += (uint64_t)w;
        while (i < n && (size_t)w >= iov[i].iov_len) {
            w -= (ssize_t)iov[i].iov_len;
            i++;
        }
        if (i < n) {
            iov[i].iov_base = (char *)iov[i].iov_base + w;
            iov[i].iov_len -= (size_t)w;
        }
    }
    return SPILLWAY_OK;
}

/* After a failed write the stream may be out of frame: no more sending. */
static int write_failed(spillway_client *c, int rc)
{
    c->wlen = 0;
    if (!c->write_failed) {
        c->write_failed = 1;
        copy_msg(c->write_msg, c->msg);
    }
    return rc;
}

static int wbuf_flush(spillway_client *c)
{
    struct iovec iov;
    int rc;
    if (c->wlen == 0)
        return SPILLWAY_OK;
    iov.iov_base = c->wbuf;
    iov.iov_len = c->wlen;
    rc = send_all(c, &iov, 1);
    c->wlen = 0;
    return rc == SPILLWAY_OK ? rc : write_failed(c, rc);
}

/* Where an encoder puts its bytes: the client's write buffer (flushed as it
 * fills) or a caller's memory. */
typedef struct out {
    spillway_client *c; /* NULL: encode into mem */
    uint8_t *mem;
    size_t cap, len;
    int rc;
} out;

/* n bytes of room (n <= WBUF_SIZE), or NULL after a failure. */
static uint8_t *out_reserve(out *o, size_t n)
{
    uint8_t *p;
    if (o->rc != SPILLWAY_OK)
        return NULL;
    if (o->c) {
        spillway_client *c = o->c;
        if (WBUF_SIZE - c->wlen < n) {
            o->rc = wbuf_flush(c);
            if (o->rc != SPILLWAY_OK)
                return NULL;
        }
        p = c->wbuf + c->wlen;
        c->wlen += n;
        return p;
    }
    if (o->cap - o->len < n) {
        o->rc = SPILLWAY_ERR_REJECTED;
        return NULL;
    }
    p = o->mem + o->len;
    o->len += n;
    return p;
}

/* A long record: written with what is buffered, from the caller's memory. */
static void out_large(out *o, const void *data, size_t n)
{
    if (o->rc != SPILLWAY_OK)
        return;
    if (o->c) {
        spillway_client *c = o->c;
        struct iovec iov[2];
        iov[0].iov_base = c->wbuf;
        iov[0].iov_len = c->wlen;
        iov[1].iov_base = (void *)(uintptr_t)data;
        iov[1].iov_len = n;
        o->rc = send_all(c, iov, 2);
        c->wlen = 0;
        if (o->rc != SPILLWAY_OK)
            write_failed(c, o->rc);
        return;
    }
    if (o->cap - o->len < n) {
        o->rc = SPILLWAY_ERR_REJECTED;
        return;
    }
    memcpy(o->mem + o->len, data, n);
    o->len += n;
}

static void put_record(out *o, const void *data, size_t len, uint32_t *crc)
{
    if (len >= DIRECT_MIN) {
        *crc = crc_update(*crc, data, len);
        out_large(o, data, len);
    } else {
        uint8_t *p = out_reserve(o, len);
        if (p) {
            memcpy(p, data, len);
            *crc = crc_update(*crc, p, len);
        }
    }
}

static void put_trailer(out *o, uint32_t crc)
{
    uint8_t *t = out_reserve(o, 4);
    if (t)
        put_le32(t, crc ^ 0xffffffffu);
}

/* The encoders assume a validated request. */
static int enc_push(out *o, uint8_t tier, const void *data, size_t len)
{
    uint32_t crc = 0xffffffffu;
    uint8_t *h = out_reserve(o, SPILLWAY_HEADER_LEN);
    if (h)
        put_header(h, SPILLWAY_MSG_PUSH, tier, (uint32_t)len);
    put_record(o, data, len, &crc);
    put_trailer(o, crc);
    return o->rc;
}

static int enc_push_batch(out *o, uint8_t tier, const spillway_record *recs,
                          size_t count, uint32_t payload_len)
{
    uint32_t crc = 0xffffffffu;
    size_t i;
    uint8_t *p = out_reserve(o, SPILLWAY_HEADER_LEN + 4);
    if (p) {
        put_header(p, SPILLWAY_MSG_PUSH_BATCH, tier, payload_len);
        put_le32(p + SPILLWAY_HEADER_LEN, (uint32_t)count);
        crc = crc_update(crc, p + SPILLWAY_HEADER_LEN, 4);
    }
    for (i = 0; i < count && o->rc == SPILLWAY_OK; i++) {
        size_t len = recs[i].len;
        if (len < DIRECT_MIN) {
            /* The hot path: length prefix and record in one reservation. */
            p = out_reserve(o, 4 + len);
            if (!p)
                break;
            put_le32(p, (uint32_t)len);
            memcpy(p + 4, recs[i].data, len);
            crc = crc_update(crc, p, 4 + len);
        } else {
            p = out_reserve(o, 4);
            if (!p)
                break;
            put_le32(p, (uint32_t)len);
            crc = crc_update(crc, p, 4);
            put_record(o, recs[i].data, len, &crc);
        }
    }
    put_trailer(o, crc);
    return o->rc;
}

static int enc_health(out *o)
{
    uint8_t *p = out_reserve(o, SPILLWAY_HEADER_LEN + SPILLWAY_TRAILER_LEN);
    if (p) {
        put_header(p, SPILLWAY_MSG_HEALTH_CHECK, SPILLWAY_TIER_SYNC, 0);
        put_le32(p + SPILLWAY_HEADER_LEN, 0);
    }
    return o->rc;
}

/* ---- validation (local refusal: nothing is sent) ---------------------------- */

static int check_tier(spillway_client *c, int tier)
{
    if (tier < SPILLWAY_TIER_SYNC || tier > SPILLWAY_TIER_BUFFERED) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: tier %d is not sync (1), "
                    "batched (2) or buffered (3)", tier);
        return SPILLWAY_ERR_REJECTED;
    }
    return SPILLWAY_OK;
}

static int check_push(spillway_client *c, uint32_t max, int tier,
                      const void *data, size_t len)
{
    if (check_tier(c, tier) != SPILLWAY_OK)
        return SPILLWAY_ERR_REJECTED;
    if (len == 0) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: record 0 is empty (a "
                    "record must have at least 1 byte)");
        return SPILLWAY_ERR_REJECTED;
    }
    if (!data) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: record 0 has a NULL data "
                    "pointer");
        return SPILLWAY_ERR_REJECTED;
    }
    if (len > max) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: record 0 is %zu bytes, "
                    "over payload_bytes_max %" PRIu32, len, max);
        return SPILLWAY_ERR_REJECTED;
    }
    return SPILLWAY_OK;
}

static int check_batch(spillway_client *c, uint32_t max, int tier,
                       const spillway_record *recs, size_t count,
                       uint32_t *payload_len)
{
    size_t i, over_at = 0;
    uint64_t total;
    if (check_tier(c, tier) != SPILLWAY_OK)
        return SPILLWAY_ERR_REJECTED;
    if (count == 0 || !recs) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: push_batch with no "
                    "records");
        return SPILLWAY_ERR_REJECTED;
    }
    for (i = 0; i < count; i++) {
        if (recs[i].len == 0 || !recs[i].data) {
            if (c)
                set_msg(c, SPILLWAY_ERR_REJECTED,
                        "refused locally, nothing sent: record %zu of %zu is "
                        "%s", i, count,
                        recs[i].len == 0 ? "empty (a record must have at "
                        "least 1 byte)" : "a NULL data pointer");
            return SPILLWAY_ERR_REJECTED;
        }
    }
    total = batch_payload_len(recs, count, max, &over_at);
    if (total > max) {
        if (c)
            set_msg(c, SPILLWAY_ERR_REJECTED,
                    "refused locally, nothing sent: the batch payload "
                    "(4 + sum(4 + len)) exceeds payload_bytes_max %" PRIu32
                    " at record %zu of %zu (%" PRIu64 " bytes up to it)",
                    max, over_at, count, total);
        return SPILLWAY_ERR_REJECTED;
    }
    *payload_len = (uint32_t)total;
    return SPILLWAY_OK;
}

size_t spillway_encode_push(uint8_t *buf, size_t cap, spillway_tier tier,
                            const void *data, size_t len)
{
    out o;
    if (check_push(NULL, SPILLWAY_PAYLOAD_BYTES_HARD_MAX, (int)tier, data,
                   len) != SPILLWAY_OK)
        return 0;
    memset(&o, 0, sizeof o);
    o.mem = buf;
    o.cap = cap;
    return enc_push(&o, (uint8_t)tier, data, len) == SPILLWAY_OK ? o.len : 0;
}

size_t spillway_encode_push_batch(uint8_t *buf, size_t cap, spillway_tier tier,
                                  const spillway_record *records, size_t count)
{
    out o;
    uint32_t plen = 0;
    if (check_batch(NULL, SPILLWAY_PAYLOAD_BYTES_HARD_MAX, (int)tier, records,
                    count, &plen) != SPILLWAY_OK)
        return 0;
    memset(&o, 0, sizeof o);
    o.mem = buf;
    o.cap = cap;
    return enc_push_batch(&o, (uint8_t)tier, records, count, plen) ==
                   SPILLWAY_OK ? o.len : 0;
}

size_t spillway_encode_health(uint8_t *buf, size_t cap)
{
    out o;
    memset(&o, 0, sizeof o);
    o.mem = buf;
    o.cap = cap;
    return enc_health(&o) == SPILLWAY_OK ? o.len : 0;
}

/* ---- connecting ------------------------------------------------------------ */

static void sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int spillway_connect(spillway_client **outp, const char *path,
                     const spillway_options *opts)
{
    spillway_options o;
    spillway_client *c;
    struct sockaddr_un addr;
    uint32_t window;
    int64_t deadline;
    int fl;

    spillway_options_init(&o);
    if (opts) {
        if (opts->connect_timeout_ms)
            o.connect_timeout_ms = opts->connect_timeout_ms;
        if (opts->io_timeout_ms)
            o.io_timeout_ms = opts->io_timeout_ms;
        if (opts->payload_bytes_max)
            o.payload_bytes_max = opts->payload_bytes_max;
        if (opts->window)
            o.window = opts->window;
    }
    window = o.window <= SPILLWAY_WINDOW_MAX ? o.window : 1;
    c = (spillway_client *)calloc(1, sizeof *c + (size_t)window * sizeof(slot));
    *outp = c;
    if (!c)
        return SPILLWAY_ERR_IO;
    c->fd = -1;
    c->io_timeout_ms = o.io_timeout_ms;
    c->payload_bytes_max = o.payload_bytes_max;
    c->window = window;
    kill_conn(c, "not connected");

    if (o.window > SPILLWAY_WINDOW_MAX)
        return set_msg(c, SPILLWAY_ERR_REJECTED,
                       "window %" PRIu32 " is over the maximum %u", o.window,
                       SPILLWAY_WINDOW_MAX);
    if (o.payload_bytes_max > SPILLWAY_PAYLOAD_BYTES_HARD_MAX)
        return set_msg(c, SPILLWAY_ERR_REJECTED,
                       "payload_bytes_max %" PRIu32 " is over the protocol's "
                       "hard maximum %u", o.payload_bytes_max,
                       SPILLWAY_PAYLOAD_BYTES_HARD_MAX);
    if (o.connect_timeout_ms < 0 || o.io_timeout_ms < 0)
        return set_msg(c, SPILLWAY_ERR_REJECTED,
                       "timeouts must be positive milliseconds (0 = default)");
    if (!path || !path[0])
        return set_msg(c, SPILLWAY_ERR_REJECTED, "empty socket path");
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path)
        return set_msg(c, SPILLWAY_ERR_REJECTED,
                       "socket path is %zu bytes, longer than the %zu a Unix "
                       "socket address holds: %s", strlen(path),
                       sizeof addr.sun_path - 1, path);
    memcpy(addr.sun_path, path, strlen(path) + 1);

    c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (c->fd < 0)
        return set_msg(c, SPILLWAY_ERR_IO, "socket: %s", strerror(errno));
    fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(c->fd, F_SETFD, FD_CLOEXEC) < 0)
        return set_msg(c, SPILLWAY_ERR_IO, "fcntl: %s", strerror(errno));

    deadline = now_ms() + o.connect_timeout_ms;
    for (;;) {
        short rev = 0;
        int err = 0, rc;
        socklen_t elen = sizeof err;
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            break;
        if (errno == EAGAIN) { /* the daemon's listen backlog is full */
            if (now_ms() >= deadline)
                return set_msg(c, SPILLWAY_ERR_TIMEOUT,
                               "connecting to %s: no room in the daemon's "
                               "backlog within %d ms", path,
                               o.connect_timeout_ms);
            sleep_ms(5);
            continue;
        }
        if (errno != EINPROGRESS && errno != EINTR)
            return set_msg(c, SPILLWAY_ERR_IO, "connecting to %s: %s", path,
                           strerror(errno));
        rc = wait_fd(c, POLLOUT, deadline, &rev);
        if (rc == SPILLWAY_ERR_TIMEOUT)
            return set_msg(c, SPILLWAY_ERR_TIMEOUT,
                           "connecting to %s: timed out after %d ms", path,
                           o.connect_timeout_ms);
        if (rc != SPILLWAY_OK)
            return rc;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
            err = errno;
        if (err != 0)
            return set_msg(c, SPILLWAY_ERR_IO, "connecting to %s: %s", path,
                           strerror(err));
        break;
    }
    c->dead = 0;
    c->dead_msg[0] = '\0';
    c->msg[0] = '\0';
    return SPILLWAY_OK;
}

void spillway_close(spillway_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

/* ---- answers ------------------------------------------------------------- */

/* Whether new requests may be written. */
static int usable(spillway_client *c)
{
    if (c->dead)
        return set_msg(c, SPILLWAY_ERR_CLOSED,
                       "connection unusable after an earlier error (%s); "
                       "reconnect", c->dead_msg);
    if (c->write_failed)
        return set_msg(c, SPILLWAY_ERR_CLOSED,
                       "cannot send: an earlier write failed, possibly "
                       "part-way through a frame (%s); reconnect",
                       c->write_msg);
    return SPILLWAY_OK;
}

/* Reads and checks the answer to request `s`. Sets the message. */
static int answer_one(spillway_client *c, const slot *s, spillway_answer *a,
                      int64_t deadline, int pipelined)
{
    spillway_response r;
    int rc;
    char prefix[40] = "";

    if (pipelined)
        snprintf(prefix, sizeof prefix, "request #%" PRIu64 ": ", s->seq);
    a->seq = s->seq;
    a->nack = 0;
    a->count = 0;
    if (c->dead) {
        a->status = set_msg(c, SPILLWAY_ERR_CLOSED,
                            "%snot answered: the connection is gone (%s)",
                            prefix, c->dead_msg);
        return a->status;
    }
    rc = read_response(c, &r, deadline);
    if (rc == SPILLWAY_ERR_TIMEOUT) {
        c->stale++; /* its late answer belongs to no later request */
        a->status = set_msg(c, rc,
                            "%sno answer from the daemon within %d ms (the "
                            "request's fate is unknown; its late answer will "
                            "be discarded)", prefix, c->io_timeout_ms);
        return a->status;
    }
    if (rc != SPILLWAY_OK) {
        if (pipelined) {
            char m[MSG_CAP];
            copy_msg(m, c->msg);
            set_msg(c, rc, "%s%s", prefix, m);
        }
        kill_conn(c, c->msg);
        a->status = rc;
        return rc;
    }
    if (r.type == SPILLWAY_MSG_NACK) {
        a->nack = r.nack;
        a->status = nack_msg(c, r.nack, r.daemon_version, prefix);
        return a->status;
    }
    if (s->type == SPILLWAY_MSG_PUSH && r.type == SPILLWAY_MSG_ACK) {
        a->count = 1;
    } else if (s->type == SPILLWAY_MSG_HEALTH_CHECK &&
               r.type == SPILLWAY_MSG_HEALTH_CHECK_RESPONSE) {
        a->count = 0;
    } else if (s->type == SPILLWAY_MSG_PUSH_BATCH &&
               r.type == SPILLWAY_MSG_ACK_BATCH) {
        if (r.count != s->count) {
            a->status = set_msg(c, SPILLWAY_ERR_PROTOCOL,
                                "%sprotocol error: AckBatch counts %" PRIu32
                                " records, the batch had %" PRIu32, prefix,
                                r.count, s->count);
            kill_conn(c, c->msg);
            return a->status;
        }
        a->count = r.count;
    } else {
        a->status = set_msg(c, SPILLWAY_ERR_PROTOCOL,
                            "%sprotocol error: the daemon answered %s to a %s",
                            prefix, msg_type_name(r.type),
                            msg_type_name(s->type));
        kill_conn(c, c->msg);
        return a->status;
    }
    a->status = SPILLWAY_OK;
    c->msg[0] = '\0';
    c->last_nack = 0;
    return SPILLWAY_OK;
}

/* ---- one request at a time ---------------------------------------------- */

static int idle_check(spillway_client *c)
{
    int rc = usable(c);
    if (rc != SPILLWAY_OK)
        return rc;
    if (c->count > 0)
        return set_msg(c, SPILLWAY_ERR_REJECTED,
                       "refused locally, nothing sent: %" PRIu32 " pipelined "
                       "requests are outstanding; call spillway_flush first",
                       c->count);
    return SPILLWAY_OK;
}

/* The request is encoded (into the write buffer, maybe partly written):
 * write it and wait for its answer. */
static int round_trip(spillway_client *c, int enc_rc, uint8_t type,
                      uint32_t count, uint32_t *acked)
{
    slot s;
    spillway_answer a;
    int rc = enc_rc == SPILLWAY_OK ? wbuf_flush(c) : enc_rc;
    s.seq = c->next_seq++;
    s.type = type;
    s.count = count;
    if (rc != SPILLWAY_OK) {
        /* The daemon may have explained why it hung up (say, a nack for a
         * frame over its cap): pick up what it sent, without waiting. */
        if (rc == SPILLWAY_ERR_CLOSED) {
            spillway_response r;
            short rev = 0;
            size_t had;
            do {
                had = c->rlen - c->rpos;
            } while (!c->peer_eof &&
                     wait_fd(c, POLLIN, now_ms(), &rev) == SPILLWAY_OK &&
                     read_some(c) == SPILLWAY_OK && c->rlen - c->rpos > had);
            if (c->stale == 0 && decode_buffered(c, &r) > 0 &&
                r.type == SPILLWAY_MSG_NACK)
                return nack_msg(c, r.nack, r.daemon_version, "");
            rc = set_msg(c, rc, "%s", c->write_msg);
        }
        return rc;
    }
    rc = answer_one(c, &s, &a, now_ms() + c->io_timeout_ms, 0);
    if (acked)
        *acked = a.count;
    return rc;
}

int spillway_push(spillway_client *c, spillway_tier tier, const void *data,
                  size_t len)
{
    out o;
    int rc = idle_check(c);
    if (rc != SPILLWAY_OK)
        return rc;
    if (check_push(c, c->payload_bytes_max, (int)tier, data, len))
        return SPILLWAY_ERR_REJECTED;
    memset(&o, 0, sizeof o);
    o.c = c;
    return round_trip(c, enc_push(&o, (uint8_t)tier, data, len),
                      SPILLWAY_MSG_PUSH, 1, NULL);
}

int spillway_push_batch(spillway_client *c, spillway_tier tier,
                        const spillway_record *records, size_t count,
                        uint32_t *acked)
{
    out o;
    uint32_t plen = 0;
    int rc = idle_check(c);
    if (acked)
        *acked = 0;
    if (rc != SPILLWAY_OK)
        return rc;
    if (check_batch(c, c->payload_bytes_max, (int)tier, records, count, &plen))
        return SPILLWAY_ERR_REJECTED;
    memset(&o, 0, sizeof o);
    o.c = c;
    return round_trip(c, enc_push_batch(&o, (uint8_t)tier, records, count, plen),
                      SPILLWAY_MSG_PUSH_BATCH, (uint32_t)count, acked);
}

int spillway_health(spillway_client *c)
{
    out o;
    int rc = idle_check(c);
    if (rc != SPILLWAY_OK)
        return rc;
    memset(&o, 0, sizeof o);
    o.c = c;
    return round_trip(c, enc_health(&o), SPILLWAY_MSG_HEALTH_CHECK, 0, NULL);
}

/* ---- pipelining ------------------------------------------------------------ */

static void fold(spillway_client *c, const spillway_answer *a)
{
    c->sum.requests++;
    if (a->status == SPILLWAY_OK) {
        c->sum.acked++;
        c->sum.records += a->count;
        return;
    }
    if (c->sum.failed++ == 0) {
        c->sum.first_error = a->status;
        c->sum.first_error_seq = a->seq;
        c->sum.first_nack = a->nack;
        copy_msg(c->first_msg, c->msg);
    }
}

/* Takes the oldest outstanding request's answer. `timed_out`: an earlier
 * request of the same flush already timed out, so do not wait again. */
static int take_answer(spillway_client *c, spillway_answer *a, int timed_out)
{
    slot s = c->ring[c->head];
    int rc;
    c->head = (c->head + 1) % c->window;
    c->count--;
    if (timed_out && !c->dead) {
        c->stale++;
        a->seq = s.seq;
        a->nack = 0;
        a->count = 0;
        a->status = set_msg(c, SPILLWAY_ERR_TIMEOUT,
                            "request #%" PRIu64 ": not answered (an earlier "
                            "request timed out; its fate is unknown)", s.seq);
        rc = a->status;
    } else {
        rc = answer_one(c, &s, a, now_ms() + c->io_timeout_ms, 1);
    }
    fold(c, a);
    return rc;
}

/* Makes room for one more request: writes what is buffered, then takes the
 * oldest answer and every further answer that has already arrived. */
static int make_room(spillway_client *c)
{
    while (c->count >= c->window) {
        spillway_answer a;
        int rc;
        if (!c->write_failed)
            wbuf_flush(c); /* on failure the answers explain */
        rc = take_answer(c, &a, 0);
        if (rc == SPILLWAY_ERR_TIMEOUT || c->dead) {
            char m[MSG_CAP];
            copy_msg(m, c->msg);
            return set_msg(c, c->dead ? SPILLWAY_ERR_CLOSED : rc,
                           "not sent: waiting for room in the window: %s", m);
        }
        while (c->count > 0 && answer_ready(c) && !c->dead)
            take_answer(c, &a, 0);
    }
    return SPILLWAY_OK;
}

/* Queues the request just validated; `enc` encodes it into the buffer. */
static int enqueue(spillway_client *c, uint8_t type, uint32_t count,
                   int enc_rc, uint64_t *seq)
{
    slot *s;
    if (enc_rc != SPILLWAY_OK)
        return enc_rc; /* a write failed: message set, not queued */
    s = &c->ring[(c->head + c->count) % c->window];
    s->seq = c->next_seq++;
    s->type = type;
    s->count = count;
    c->count++;
    if (seq)
        *seq = s->seq;
    if (c->count >= c->window)
        wbuf_flush(c); /* the window is full: let the daemon start */
    return SPILLWAY_OK;
}

static int before_send(spillway_client *c, uint64_t *seq)
{
    int rc;
    if (seq)
        *seq = 0;
    rc = usable(c);
    if (rc != SPILLWAY_OK)
        return rc;
    rc = make_room(c);
    if (rc != SPILLWAY_OK)
        return rc;
    return usable(c);
}

int spillway_send_push(spillway_client *c, spillway_tier tier,
                       const void *data, size_t len, uint64_t *seq)
{
    out o;
    int rc;
    if (seq)
        *seq = 0;
    if (check_push(c, c->payload_bytes_max, (int)tier, data, len))
        return SPILLWAY_ERR_REJECTED;
    rc = before_send(c, seq);
    if (rc != SPILLWAY_OK)
        return rc;
    memset(&o, 0, sizeof o);
    o.c = c;
    return enqueue(c, SPILLWAY_MSG_PUSH, 1,
                   enc_push(&o, (uint8_t)tier, data, len), seq);
}

int spillway_send_push_batch(spillway_client *c, spillway_tier tier,
                             const spillway_record *records, size_t count,
                             uint64_t *seq)
{
    out o;
    uint32_t plen = 0;
    int rc;
    if (seq)
        *seq = 0;
    if (check_batch(c, c->payload_bytes_max, (int)tier, records, count, &plen))
        return SPILLWAY_ERR_REJECTED;
    rc = before_send(c, seq);
    if (rc != SPILLWAY_OK)
        return rc;
    memset(&o, 0, sizeof o);
    o.c = c;
    return enqueue(c, SPILLWAY_MSG_PUSH_BATCH, (uint32_t)count,
                   enc_push_batch(&o, (uint8_t)tier, records, count, plen), seq);
}

int spillway_send_health(spillway_client *c, uint64_t *seq)
{
    out o;
    int rc = before_send(c, seq);
    if (rc != SPILLWAY_OK)
        return rc;
    memset(&o, 0, sizeof o);
    o.c = c;
    return enqueue(c, SPILLWAY_MSG_HEALTH_CHECK, 0, enc_health(&o), seq);
}

int spillway_recv_answer(spillway_client *c, spillway_answer *answer)
{
    spillway_answer a;
    if (!answer)
        answer = &a;
    memset(answer, 0, sizeof *answer);
    if (c->count == 0) {
        answer->status = set_msg(c, SPILLWAY_ERR_REJECTED,
                                 "no pipelined request is outstanding");
        return answer->status;
    }
    if (!c->write_failed && !c->dead)
        wbuf_flush(c); /* on failure the answers explain */
    return take_answer(c, answer, 0);
}

int spillway_flush(spillway_client *c, spillway_summary *summary)
{
    int timed_out = 0, rc;
    if (c->count > 0 && !c->write_failed && !c->dead)
        wbuf_flush(c);
    while (c->count > 0) {
        spillway_answer a;
        if (take_answer(c, &a, timed_out) == SPILLWAY_ERR_TIMEOUT)
            timed_out = 1;
    }
    if (summary)
        *summary = c->sum;
    rc = c->sum.first_error;
    if (rc != SPILLWAY_OK) {
        copy_msg(c->msg, c->first_msg);
        c->last_nack = c->sum.first_nack;
    } else {
        c->msg[0] = '\0';
        c->last_nack = 0;
    }
    memset(&c->sum, 0, sizeof c->sum);
    return rc;
}
