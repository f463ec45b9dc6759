/*
 * test_spillway.c: the C client's test suite.
 *
 * 1. Every conformance vector of protocol/conformance/vectors.json (read at
 *    run time, path relative to this file): encoder, decoder, and the raw
 *    frames against the real daemon.
 * 2. The client against a real daemon ($SPILLWAY_BIN), started here on a
 *    fresh temporary folder.
 * 3. The client against hostile or broken fake daemons (Unix socket
 *    listeners in forked children).
 *
 * Usage: SPILLWAY_BIN=/path/to/spillway ./test_spillway
 */
#include "../spillway.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- harness ---------------------------------------------------------------- */

static int g_failed_checks;  /* failures in the current test */
static int g_tests_passed, g_tests_failed;
static const char *g_test = "";

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            g_failed_checks++;                                               \
            fprintf(stderr, "  FAIL %s (%s:%d): %s: ", g_test, __FILE__,     \
                    __LINE__, #cond);                                        \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

static void begin_test(const char *name)
{
    g_test = name;
    g_failed_checks = 0;
}

static void end_test(const char *detail)
{
    if (g_failed_checks == 0) {
        g_tests_passed++;
        printf("ok   %s%s%s\n", g_test, detail ? ": " : "", detail ? detail : "");
    } else {
        g_tests_failed++;
        printf("FAIL %s (%d failed checks)\n", g_test, g_failed_checks);
    }
    fflush(stdout);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_spillway: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t cap = 65536, n = 0;
    if (!f)
        return NULL;
    buf = (char *)xmalloc(cap + 1);
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        cap *= 2;
        buf = (char *)realloc(buf, cap + 1);
        if (!buf)
            die("out of memory");
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static int contains(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* ---- a tiny JSON reader (test code only) ------------------------------------ */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int type;
    int b;
    double num;
    char *str;
    size_t n;
    char **keys;
    struct jv **items;
} jv;

typedef struct jp {
    const char *s;
    const char *err;
} jp;

static void jws(jp *p)
{
    while (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t')
        p->s++;
}

static jv *jnew(int type)
{
    jv *v = (jv *)xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

static void jpush(jv *v, char *key, jv *item)
{
    v->items = (jv **)realloc(v->items, (v->n + 1) * sizeof *v->items);
    v->keys = (char **)realloc(v->keys, (v->n + 1) * sizeof *v->keys);
    if (!v->items || !v->keys)
        die("out of memory");
    v->items[v->n] = item;
    v->keys[v->n] = key;
    v->n++;
}

static char *jstring(jp *p)
{
    size_t cap = 16, n = 0;
    char *out = (char *)xmalloc(cap);
    if (*p->s != '"') {
        p->err = "expected a string";
        free(out);
        return NULL;
    }
    p->s++;
    while (*p->s != '"') {
        unsigned c = (unsigned char)*p->s++;
        if (c == 0) {
            p->err = "unterminated string";
            free(out);
            return NULL;
        }
        if (n + 5 > cap) {
            cap *= 2;
            out = (char *)realloc(out, cap);
            if (!out)
                die("out of memory");
        }
        if (c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        c = (unsigned char)*p->s++;
        switch (c) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp = 0;
            int i;
            for (i = 0; i < 4; i++) {
                char h = *p->s++;
                cp <<= 4;
                if (h >= '0' && h <= '9') cp |= (unsigned)(h - '0');
                else if (h >= 'a' && h <= 'f') cp |= (unsigned)(h - 'a' + 10);
                else if (h >= 'A' && h <= 'F') cp |= (unsigned)(h - 'A' + 10);
                else { p->err = "bad \\u escape"; free(out); return NULL; }
            }
            /* Basic plane only (the vectors are ASCII); UTF-8 encode. */
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xc0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3f));
            } else {
                out[n++] = (char)(0xe0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[n++] = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default:
            p->err = "bad escape";
            free(out);
            return NULL;
        }
    }
    p->s++;
    out[n] = '\0';
    return out;
}

static jv *jvalue(jp *p)
{
    jv *v;
    jws(p);
    switch (*p->s) {
    case '{':
        v = jnew(J_OBJ);
        p->s++;
        jws(p);
        if (*p->s == '}') {
            p->s++;
            return v;
        }
        for (;;) {
            char *k;
            jv *item;
            jws(p);
            k = jstring(p);
            if (!k)
                return NULL;
            jws(p);
            if (*p->s++ != ':') {
                p->err = "expected ':'";
                return NULL;
            }
            item = jvalue(p);
            if (!item)
                return NULL;
            jpush(v, k, item);
            jws(p);
            if (*p->s == ',') {
                p->s++;
                continue;
            }
            if (*p->s++ == '}')
                return v;
            p->err = "expected ',' or '}'";
            return NULL;
        }
    case '[':
        v = jnew(J_ARR);
        p->s++;
        jws(p);
        if (*p->s == ']') {
            p->s++;
            return v;
        }
        for (;;) {
            jv *item = jvalue(p);
            if (!item)
                return NULL;
            jpush(v, NULL, item);
            jws(p);
            if (*p->s == ',') {
                p->s++;
                continue;
            }
            if (*p->s++ == ']')
                return v;
            p->err = "expected ',' or ']'";
            return NULL;
        }
    case '"':
        v = jnew(J_STR);
        v->str = jstring(p);
        return v->str ? v : NULL;
    case 't':
        if (strncmp(p->s, "true", 4) == 0) {
            p->s += 4;
            v = jnew(J_BOOL);
            v->b = 1;
            return v;
        }
        break;
    case 'f':
        if (strncmp(p->s, "false", 5) == 0) {
            p->s += 5;
            return jnew(J_BOOL);
        }
        break;
    case 'n':
        if (strncmp(p->s, "null", 4) == 0) {
            p->s += 4;
            return jnew(J_NULL);
        }
        break;
    default:
        if (*p->s == '-' || (*p->s >= '0' && *p->s <= '9')) {
            char *end;
            v = jnew(J_NUM);
            v->num = strtod(p->s, &end);
            p->s = end;
            return v;
        }
    }
    p->err = "unexpected character";
    return NULL;
}

static void jfree(jv *v)
{
    size_t i;
    if (!v)
        return;
    for (i = 0; i < v->n; i++) {
        jfree(v->items[i]);
        free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static jv *jget(const jv *obj, const char *key)
{
    size_t i;
    if (!obj || obj->type != J_OBJ)
        return NULL;
    for (i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

static const char *jstr(const jv *obj, const char *key)
{
    jv *v = jget(obj, key);
    return v && v->type == J_STR ? v->str : NULL;
}

/* Decodes lowercase hex; *len receives the byte count. */
static uint8_t *unhex(const char *hex, size_t *len)
{
    size_t n = hex ? strlen(hex) : 0, i;
    uint8_t *out = (uint8_t *)xmalloc(n / 2 + 1);
    if (n % 2)
        die("odd hex length");
    for (i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            die("bad hex");
        out[i] = (uint8_t)v;
    }
    *len = n / 2;
    return out;
}

static void hexdump(char *dst, size_t cap, const uint8_t *b, size_t n)
{
    size_t i;
    dst[0] = '\0';
    for (i = 0; i < n && 2 * i + 3 < cap; i++)
        snprintf(dst + 2 * i, 3, "%02x", b[i]);
}

static int tier_from_name(const char *s)
{
    if (!s) return -1;
    if (strcmp(s, "sync") == 0) return SPILLWAY_TIER_SYNC;
    if (strcmp(s, "batched") == 0) return SPILLWAY_TIER_BATCHED;
    if (strcmp(s, "buffered") == 0) return SPILLWAY_TIER_BUFFERED;
    return -1;
}

/* ---- raw sockets ---------------------------------------------------------- */

static int raw_connect(const char *path)
{
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path)
        die("socket path too long: %s", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_write(int fd, const uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads up to n bytes within timeout_ms; returns the count read (less on
 * end-of-file, reset or timeout). *eof is set on end-of-file or reset. */
static size_t raw_read(int fd, uint8_t *b, size_t n, int timeout_ms, int *eof)
{
    size_t got = 0;
    int64_t deadline = mono_ms() + timeout_ms;
    *eof = 0;
    while (got < n) {
        struct pollfd p;
        int64_t left = deadline - mono_ms();
        ssize_t r;
        if (left <= 0)
            break;
        p.fd = fd;
        p.events = POLLIN;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        r = recv(fd, b + got, n - got, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) {
            *eof = 1;
            break;
        }
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            *eof = 1;
            break;
        }
        got += (size_t)r;
    }
    return got;
}

/* Reads one whole frame (header, payload, trailer) into buf. Returns its
 * length, 0 on end-of-file or timeout. */
static size_t read_frame(int fd, uint8_t *buf, size_t cap, int timeout_ms)
{
    int eof;
    size_t len;
    if (raw_read(fd, buf, 16, timeout_ms, &eof) != 16)
        return 0;
    len = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
          (size_t)buf[11] << 24;
    if (16 + len + 4 > cap)
        return 0;
    if (raw_read(fd, buf + 16, len + 4, timeout_ms, &eof) != len + 4)
        return 0;
    return 16 + len + 4;
}

/* ---- temp folders ------------------------------------------------------------ */

static void rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        if (d) {
            while ((e = readdir(d)) != NULL) {
                char sub[4096];
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static char g_tmp[256];
static char g_sock[512];
static char g_delivered[512];
static pid_t g_daemon = -1;

/* ---- the real daemon ---------------------------------------------------------- */

static void print_file(const char *label, const char *path)
{
    char *s = read_file(path, NULL);
    fprintf(stderr, "---- %s (%s) ----\n%s\n---- end ----\n", label, path,
            s ? s : "(unreadable)");
    free(s);
}

static void start_daemon(const char *bin)
{
    char cfg[512], out[512], err[512];
    FILE *f;
    int64_t deadline;
    int ready = 0;

    snprintf(cfg, sizeof cfg, "%s/spillway.toml", g_tmp);
    snprintf(out, sizeof out, "%s/daemon.stdout", g_tmp);
    snprintf(err, sizeof err, "%s/daemon.stderr", g_tmp);
    snprintf(g_sock, sizeof g_sock, "%s/spillway.sock", g_tmp);
    snprintf(g_delivered, sizeof g_delivered, "%s/delivered.ndjson", g_tmp);
    f = fopen(cfg, "w");
    if (!f)
        die("writing %s: %s", cfg, strerror(errno));
    fprintf(f,
            "[server]\n"
            "socket_path = \"%s/spillway.sock\"\n"
            "data_dir = \"%s/wab\"\n"
            "shards = 1\n"
            "payload_bytes_max = 1048576\n"
            "[wab]\n"
            "segment_bytes_max = 4194304\n"
            "wab_bytes_max = 268435456\n"
            "[sink]\n"
            "type = \"file\"\n"
            "path = \"%s/delivered.ndjson\"\n"
            "linger_ms = 5\n"
            "[admin]\n"
            "socket_path = \"%s/admin.sock\"\n",
            g_tmp, g_tmp, g_tmp, g_tmp);
    fclose(f);

    g_daemon = fork();
    if (g_daemon < 0)
        die("fork: %s", strerror(errno));
    if (g_daemon == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        close(o);
        close(e);
        execl(bin, bin, "run", "--config", cfg, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }

    deadline = mono_ms() + 15000;
    while (mono_ms() < deadline) {
        spillway_client *c = NULL;
        spillway_options o = {0};
        int status;
        o.connect_timeout_ms = 500;
        o.io_timeout_ms = 1000;
        if (spillway_connect(&c, g_sock, &o) == SPILLWAY_OK &&
            spillway_health(c) == SPILLWAY_OK)
            ready = 1;
        spillway_close(c);
        if (ready)
            break;
        if (waitpid(g_daemon, &status, WNOHANG) == g_daemon) {
            g_daemon = -1;
            break;
        }
        sleep_ms(50);
    }
    if (!ready) {
        fprintf(stderr, "test_spillway: the daemon did not answer a "
                "HealthCheck within 15 s\n");
        print_file("daemon stderr", err);
        if (g_daemon > 0) {
            kill(g_daemon, SIGKILL);
            waitpid(g_daemon, NULL, 0);
        }
        exit(1);
    }
}

/* SIGTERM, wait up to 10 s, then SIGKILL. Returns 1 on a clean exit. */
static int stop_daemon(void)
{
    int status = 0;
    int64_t deadline;
    if (g_daemon <= 0)
        return 0;
    kill(g_daemon, SIGTERM);
    deadline = mono_ms() + 10000;
    while (mono_ms() < deadline) {
        if (waitpid(g_daemon, &status, WNOHANG) == g_daemon) {
            g_daemon = -1;
            return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "test_spillway: the daemon ignored SIGTERM for 10 s; "
            "sending SIGKILL\n");
    kill(g_daemon, SIGKILL);
    waitpid(g_daemon, &status, 0);
    g_daemon = -1;
    return 0;
}

static spillway_client *connect_daemon(uint32_t window, uint32_t payload_max)
{
    spillway_client *c = NULL;
    spillway_options o;
    spillway_options_init(&o);
    o.io_timeout_ms = 10000;
    if (window)
        o.window = window;
    if (payload_max)
        o.payload_bytes_max = payload_max;
    if (spillway_connect(&c, g_sock, &o) != SPILLWAY_OK)
        die("connecting to the daemon: %s", spillway_strerror(c));
    return c;
}

/* ---- 1. conformance vectors ------------------------------------------------- */

typedef struct counts {
    int request, response, rejected_request, rejected_response;
} counts;

static jv *load_vectors(void)
{
    char path[4096], *text;
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    jp p;
    jv *root;
    if (slash)
        snprintf(path, sizeof path,
                 "%.*s/../../../protocol/conformance/vectors.json",
                 (int)(slash - file), file);
    else
        snprintf(path, sizeof path, "../../../protocol/conformance/vectors.json");
    text = read_file(path, NULL);
    if (!text)
        die("cannot read the vectors at %s: %s", path, strerror(errno));
    p.s = text;
    p.err = NULL;
    root = jvalue(&p);
    if (!root)
        die("parsing %s: %s near \"%.30s\"", path, p.err, p.s);
    free(text);
    return root;
}

/* Encodes a vector's `request` with the client's encoder. */
static size_t encode_request(const jv *req, uint8_t *out, size_t cap)
{
    const char *type = jstr(req, "type");
    if (type && strcmp(type, "push") == 0) {
        size_t n;
        uint8_t *payload = unhex(jstr(req, "payload"), &n);
        size_t len = spillway_encode_push(out, cap,
                                          (spillway_tier)tier_from_name(jstr(req, "tier")),
                                          payload, n);
        free(payload);
        return len;
    }
    if (type && strcmp(type, "push_batch") == 0) {
        jv *recs = jget(req, "records");
        size_t i, len, n = recs ? recs->n : 0;
        spillway_record *r = (spillway_record *)xmalloc(n * sizeof *r);
        uint8_t **bufs = (uint8_t **)xmalloc(n * sizeof *bufs);
        for (i = 0; i < n; i++) {
            bufs[i] = unhex(recs->items[i]->str, &r[i].len);
            r[i].data = bufs[i];
        }
        len = spillway_encode_push_batch(out, cap,
                                         (spillway_tier)tier_from_name(jstr(req, "tier")),
                                         r, n);
        for (i = 0; i < n; i++)
            free(bufs[i]);
        free(bufs);
        free(r);
        return len;
    }
    if (type && strcmp(type, "health_check") == 0)
        return spillway_encode_health(out, cap);
    return 0;
}

static int msg_type_from_name(const char *s)
{
    if (!s) return -1;
    if (strcmp(s, "ack") == 0) return SPILLWAY_MSG_ACK;
    if (strcmp(s, "nack") == 0) return SPILLWAY_MSG_NACK;
    if (strcmp(s, "health_check_response") == 0)
        return SPILLWAY_MSG_HEALTH_CHECK_RESPONSE;
    if (strcmp(s, "ack_batch") == 0) return SPILLWAY_MSG_ACK_BATCH;
    return -1;
}

static void vector_offline(const jv *v, counts *k)
{
    const char *kind = jstr(v, "kind");
    const char *name = jstr(v, "name");
    size_t flen;
    uint8_t *frame = unhex(jstr(v, "frame"), &flen);
    char label[160];

    snprintf(label, sizeof label, "vector %s (%s, offline)", name ? name : "?",
             kind ? kind : "?");
    begin_test(label);
    if (kind && strcmp(kind, "request") == 0) {
        uint8_t out[4096];
        char got[8300], want[8300];
        size_t n = encode_request(jget(v, "request"), out, sizeof out);
        k->request++;
        hexdump(got, sizeof got, out, n);
        hexdump(want, sizeof want, frame, flen);
        CHECK(n == flen && memcmp(out, frame, flen) == 0,
              "encoder produced %s, vector says %s", got, want);
    } else if (kind && strcmp(kind, "response") == 0) {
        const jv *want = jget(v, "response");
        spillway_response r;
        size_t used = 0;
        char err[256] = "";
        int rc = spillway_decode_response(frame, flen, &r, &used, err, sizeof err);
        int wtype = msg_type_from_name(jstr(want, "type"));
        k->response++;
        CHECK(rc == SPILLWAY_OK && used == flen, "decode: rc %d used %zu: %s",
              rc, used, err);
        if (rc == SPILLWAY_OK && used == flen) {
            CHECK(r.type == wtype, "type %d, want %d", r.type, wtype);
            if (wtype == SPILLWAY_MSG_ACK_BATCH)
                CHECK(r.count == (uint32_t)jget(want, "count")->num,
                      "count %" PRIu32, r.count);
            if (wtype == SPILLWAY_MSG_NACK) {
                jv *dv = jget(want, "daemon_version");
                int retry = jget(want, "retryable")->b;
                int closes = jget(want, "closes_connection")->b;
                CHECK(r.nack == (uint8_t)jget(want, "reason_byte")->num,
                      "reason byte %u", r.nack);
                CHECK(strcmp(spillway_nack_name(r.nack), jstr(want, "reason")) == 0,
                      "reason name %s, want %s", spillway_nack_name(r.nack),
                      jstr(want, "reason"));
                CHECK(spillway_nack_retryable(r.nack) == retry,
                      "retryable %d, want %d", spillway_nack_retryable(r.nack), retry);
                /* The connection closes exactly when a nack is not retryable. */
                CHECK((!spillway_nack_retryable(r.nack)) == closes,
                      "closes_connection %d", closes);
                if (dv)
                    CHECK(r.daemon_version == (uint8_t)dv->num,
                          "daemon_version %u, want %g", r.daemon_version, dv->num);
                else
                    CHECK(r.daemon_version == 0, "daemon_version %u",
                          r.daemon_version);
            }
        }
        /* Fed byte by byte, the decoder waits until the frame is whole. */
        {
            size_t i;
            int early = 0;
            for (i = 0; i < flen; i++) {
                size_t u = 0;
                if (spillway_decode_response(frame, i, &r, &u, NULL, 0) !=
                        SPILLWAY_OK || u != 0)
                    early = 1;
            }
            CHECK(!early, "the decoder accepted or refused a truncated frame");
        }
    } else if (kind && strcmp(kind, "rejected_response") == 0) {
        spillway_response r;
        size_t used = 0;
        char err[256] = "";
        int rc = spillway_decode_response(frame, flen, &r, &used, err, sizeof err);
        k->rejected_response++;
        CHECK(rc == SPILLWAY_ERR_PROTOCOL, "decoder returned %s for \"%s\"",
              spillway_status_name(rc), jstr(v, "fault"));
        CHECK(err[0] != '\0', "no error message");
    } else if (kind && strcmp(kind, "rejected_request") == 0) {
        k->rejected_request++; /* run against the daemon below */
        CHECK(jstr(v, "answer") != NULL, "no answer");
    } else {
        CHECK(0, "unknown vector kind %s", kind ? kind : "(none)");
    }
    free(frame);
    end_test(NULL);
}

static void vector_online(const jv *v)
{
    const char *kind = jstr(v, "kind");
    const char *name = jstr(v, "name");
    size_t flen, alen, got;
    uint8_t *frame, *answer, buf[64];
    char label[160], ghex[160], whex[160];
    int fd, eof = 0, rejected;

    if (!kind || (strcmp(kind, "request") != 0 &&
                  strcmp(kind, "rejected_request") != 0))
        return;
    rejected = strcmp(kind, "rejected_request") == 0;
    snprintf(label, sizeof label, "vector %s (%s, raw bytes to the daemon)",
             name, kind);
    begin_test(label);
    frame = unhex(jstr(v, "frame"), &flen);
    answer = unhex(jstr(v, "answer"), &alen);
    fd = raw_connect(g_sock);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd >= 0) {
        CHECK(raw_write(fd, frame, flen) == 0, "write: %s", strerror(errno));
        got = raw_read(fd, buf, alen < sizeof buf ? alen : sizeof buf, 5000, &eof);
        hexdump(ghex, sizeof ghex, buf, got);
        hexdump(whex, sizeof whex, answer, alen);
        CHECK(got == alen && memcmp(buf, answer, alen) == 0,
              "daemon answered %s, want %s", ghex, whex);
        if (rejected) {
            /* Then the daemon closes: end-of-file (or a reset, when it
             * closes with bytes of ours unread). */
            got = raw_read(fd, buf, 1, 5000, &eof);
            CHECK(got == 0 && eof, "no end-of-file after the nack (%zu more "
                  "bytes)", got);
        }
        close(fd);
    }
    free(frame);
    free(answer);
    end_test(NULL);
}

/* Every request vector through the client's own API, against the daemon. */
static void vector_via_client(const jv *v)
{
    const char *name = jstr(v, "name");
    const jv *req = jget(v, "request");
    const char *type = jstr(req, "type");
    char label[160];
    spillway_client *c;
    int rc = -1;

    if (!type)
        return;
    snprintf(label, sizeof label, "vector %s (request, through spillway_*)", name);
    begin_test(label);
    c = connect_daemon(0, 1048576);
    if (strcmp(type, "push") == 0) {
        size_t n;
        uint8_t *p = unhex(jstr(req, "payload"), &n);
        rc = spillway_push(c, (spillway_tier)tier_from_name(jstr(req, "tier")), p, n);
        free(p);
    } else if (strcmp(type, "push_batch") == 0) {
        jv *recs = jget(req, "records");
        size_t i, n = recs->n;
        uint32_t acked = 0;
        spillway_record *r = (spillway_record *)xmalloc(n * sizeof *r);
        uint8_t **bufs = (uint8_t **)xmalloc(n * sizeof *bufs);
        for (i = 0; i < n; i++) {
            bufs[i] = unhex(recs->items[i]->str, &r[i].len);
            r[i].data = bufs[i];
        }
        rc = spillway_push_batch(c, (spillway_tier)tier_from_name(jstr(req, "tier")),
                                 r, n, &acked);
        CHECK(acked == n, "acked %" PRIu32 " of %zu", acked, n);
        for (i = 0; i < n; i++)
            free(bufs[i]);
        free(bufs);
        free(r);
    } else if (strcmp(type, "health_check") == 0) {
        rc = spillway_health(c);
    }
    CHECK(rc == SPILLWAY_OK, "%s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    spillway_close(c);
    end_test(NULL);
}

/* ---- 2. the client against the real daemon --------------------------------- */

#define PIPE_N 5000
#define BATCH_N 1000

static char g_pipe_recs[PIPE_N][24];
static char g_auto_recs[PIPE_N][24];
static char g_batch_recs[BATCH_N][24];

static void test_codec_basics(void)
{
    uint8_t buf[64];
    begin_test("crc32 and the known frame");
    CHECK(spillway_crc32("hello", 5) == 0x3610a686u, "crc(hello)");
    CHECK(spillway_crc32("123456789", 9) == 0xcbf43926u, "crc check value");
    CHECK(spillway_crc32("", 0) == 0, "crc of nothing");
    CHECK(spillway_encode_push(buf, sizeof buf, SPILLWAY_TIER_SYNC, "hello", 5) == 25,
          "push frame length");
    CHECK(spillway_encode_push(buf, sizeof buf, SPILLWAY_TIER_SYNC, "", 0) == 0,
          "an empty record is not encoded");
    CHECK(spillway_encode_push(buf, 10, SPILLWAY_TIER_SYNC, "hello", 5) == 0,
          "a buffer too small is refused");
    CHECK(spillway_encode_push(buf, sizeof buf, (spillway_tier)4, "hello", 5) == 0,
          "tier 4 is refused");
    CHECK(spillway_push_frame_len(5) == 25, "push_frame_len");
    {
        spillway_record r[2] = {{"a", 1}, {"bc", 2}};
        CHECK(spillway_push_batch_frame_len(r, 2) == 35, "push_batch_frame_len");
    }
    CHECK(spillway_nack_retryable(SPILLWAY_NACK_OVERLOADED) &&
          spillway_nack_retryable(SPILLWAY_NACK_INTERNAL_ERROR) &&
          !spillway_nack_retryable(SPILLWAY_NACK_BAD_MAGIC) &&
          !spillway_nack_retryable(SPILLWAY_NACK_VERSION_MISMATCH),
          "retryable classification");
    CHECK(strcmp(spillway_nack_name(0x0a), "overloaded") == 0, "name");
    CHECK(strcmp(spillway_nack_name(0x0b), "unknown") == 0, "name of 0x0b");
    end_test(NULL);
}

static void test_connect_errors(void)
{
    spillway_client *c = NULL;
    char path[600];
    int rc;
    begin_test("connect failures are clear");
    snprintf(path, sizeof path, "%s/no-such.sock", g_tmp);
    rc = spillway_connect(&c, path, NULL);
    CHECK(rc == SPILLWAY_ERR_IO, "rc %s", spillway_status_name(rc));
    CHECK(contains(spillway_strerror(c), "no-such.sock"), "%s", spillway_strerror(c));
    CHECK(spillway_push(c, SPILLWAY_TIER_SYNC, "x", 1) == SPILLWAY_ERR_CLOSED,
          "push on a failed client");
    spillway_close(c);
    {
        spillway_options o = {0};
        o.payload_bytes_max = SPILLWAY_PAYLOAD_BYTES_HARD_MAX + 1;
        rc = spillway_connect(&c, g_sock, &o);
        CHECK(rc == SPILLWAY_ERR_REJECTED, "payload_bytes_max over 16 MiB: %s",
              spillway_status_name(rc));
        spillway_close(c);
    }
    end_test(NULL);
}

static void test_health(void)
{
    spillway_client *c = connect_daemon(0, 0);
    int rc;
    begin_test("health");
    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_OK, "%s", spillway_strerror(c));
    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_OK, "second: %s", spillway_strerror(c));
    spillway_close(c);
    end_test(NULL);
}

static void test_push_tiers(void)
{
    spillway_client *c = connect_daemon(0, 1048576);
    const char *names[3] = {"tier-sync", "tier-batched", "tier-buffered"};
    int t;
    begin_test("push at each tier");
    for (t = 1; t <= 3; t++) {
        int rc = spillway_push(c, (spillway_tier)t, names[t - 1], strlen(names[t - 1]));
        CHECK(rc == SPILLWAY_OK, "tier %d: %s", t, spillway_strerror(c));
    }
    spillway_close(c);
    end_test(NULL);
}

static void test_push_batch(void)
{
    spillway_client *c = connect_daemon(0, 1048576);
    spillway_record one = {"batch-one", 9};
    spillway_record *recs = (spillway_record *)xmalloc(BATCH_N * sizeof *recs);
    uint32_t acked = 0;
    int rc, i;
    begin_test("push_batch of 1 and of 1000 records");
    rc = spillway_push_batch(c, SPILLWAY_TIER_BATCHED, &one, 1, &acked);
    CHECK(rc == SPILLWAY_OK && acked == 1, "1 record: %s, acked %" PRIu32,
          spillway_strerror(c), acked);
    for (i = 0; i < BATCH_N; i++) {
        snprintf(g_batch_recs[i], sizeof g_batch_recs[i], "batch-%04d", i);
        recs[i].data = g_batch_recs[i];
        recs[i].len = strlen(g_batch_recs[i]);
    }
    rc = spillway_push_batch(c, SPILLWAY_TIER_SYNC, recs, BATCH_N, &acked);
    CHECK(rc == SPILLWAY_OK && acked == BATCH_N, "1000 records: %s, acked %" PRIu32,
          spillway_strerror(c), acked);
    free(recs);
    spillway_close(c);
    end_test(NULL);
}

/* 5,000 pushes, window 64, every answer taken with spillway_recv_answer. */
static void test_pipeline_recv(void)
{
    spillway_client *c = connect_daemon(64, 1048576);
    static uint64_t seqs[PIPE_N];
    size_t next = 0; /* index of the next answer expected */
    int i, rc, bad = 0;
    spillway_summary s;
    int64_t t0 = mono_ms();
    begin_test("pipelined sender: 5,000 pushes, window 64, answers in order");
    CHECK(spillway_window(c) == 64, "window %" PRIu32, spillway_window(c));
    CHECK(spillway_recv_answer(c, NULL) == SPILLWAY_ERR_REJECTED,
          "recv with nothing outstanding");
    for (i = 0; i < PIPE_N; i++) {
        snprintf(g_pipe_recs[i], sizeof g_pipe_recs[i], "pipe-%05d", i);
        while (spillway_outstanding(c) >= spillway_window(c)) {
            spillway_answer a;
            rc = spillway_recv_answer(c, &a);
            if (rc != SPILLWAY_OK || a.seq != seqs[next] || a.count != 1)
                bad++;
            next++;
        }
        rc = spillway_send_push(c, SPILLWAY_TIER_SYNC, g_pipe_recs[i],
                                strlen(g_pipe_recs[i]), &seqs[i]);
        if (rc != SPILLWAY_OK) {
            CHECK(0, "send %d: %s", i, spillway_strerror(c));
            break;
        }
        CHECK(i == 0 || seqs[i] > seqs[i - 1], "sequence numbers increase");
        CHECK(spillway_outstanding(c) <= 64, "window exceeded");
    }
    CHECK(spillway_push(c, SPILLWAY_TIER_SYNC, "x", 1) == SPILLWAY_ERR_REJECTED,
          "a blocking push while requests are outstanding is refused");
    while (spillway_outstanding(c) > 0) {
        spillway_answer a;
        rc = spillway_recv_answer(c, &a);
        if (rc != SPILLWAY_OK || a.seq != seqs[next] || a.count != 1)
            bad++;
        next++;
    }
    CHECK(bad == 0, "%d answers out of order or failed (%s)", bad,
          spillway_strerror(c));
    CHECK(next == PIPE_N, "%zu answers", next);
    rc = spillway_flush(c, &s);
    CHECK(rc == SPILLWAY_OK, "flush: %s", spillway_strerror(c));
    CHECK(s.requests == PIPE_N && s.acked == PIPE_N && s.records == PIPE_N &&
          s.failed == 0, "summary %" PRIu64 "/%" PRIu64 "/%" PRIu64,
          s.requests, s.acked, s.failed);
    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_OK, "health after: %s", spillway_strerror(c));
    spillway_close(c);
    {
        char d[64];
        snprintf(d, sizeof d, "%" PRId64 " ms", mono_ms() - t0);
        end_test(d);
    }
}

/* 5,000 pushes that never call recv: the window collects, flush reports. */
static void test_pipeline_flush(void)
{
    spillway_client *c = connect_daemon(64, 1048576);
    int i, rc;
    spillway_summary s;
    spillway_record two[2] = {{"pbatch-a", 8}, {"pbatch-b", 8}};
    int64_t t0 = mono_ms();
    begin_test("pipelined sender: 5,000 pushes + a batch + a health, then flush");
    for (i = 0; i < PIPE_N; i++) {
        snprintf(g_auto_recs[i], sizeof g_auto_recs[i], "auto-%05d", i);
        rc = spillway_send_push(c, SPILLWAY_TIER_BATCHED, g_auto_recs[i],
                                strlen(g_auto_recs[i]), NULL);
        if (rc != SPILLWAY_OK) {
            CHECK(0, "send %d: %s", i, spillway_strerror(c));
            break;
        }
        CHECK(spillway_outstanding(c) <= 64, "window exceeded");
    }
    rc = spillway_send_push_batch(c, SPILLWAY_TIER_BUFFERED, two, 2, NULL);
    CHECK(rc == SPILLWAY_OK, "send batch: %s", spillway_strerror(c));
    rc = spillway_send_health(c, NULL);
    CHECK(rc == SPILLWAY_OK, "send health: %s", spillway_strerror(c));
    rc = spillway_flush(c, &s);
    CHECK(rc == SPILLWAY_OK, "flush: %s", spillway_strerror(c));
    CHECK(s.requests == PIPE_N + 2 && s.acked == PIPE_N + 2 &&
          s.records == PIPE_N + 2 && s.failed == 0,
          "summary requests %" PRIu64 " acked %" PRIu64 " records %" PRIu64
          " failed %" PRIu64, s.requests, s.acked, s.records, s.failed);
    CHECK(spillway_outstanding(c) == 0, "outstanding after flush");
    rc = spillway_flush(c, &s);
    CHECK(rc == SPILLWAY_OK && s.requests == 0, "an empty flush");
    spillway_close(c);
    {
        char d[64];
        snprintf(d, sizeof d, "%" PRId64 " ms", mono_ms() - t0);
        end_test(d);
    }
}

static void test_local_refusal(void)
{
    spillway_client *c = connect_daemon(8, 1048576);
    uint8_t *big = (uint8_t *)xmalloc(1048577);
    spillway_record recs[4];
    uint64_t before;
    uint32_t acked = 0;
    int rc;
    begin_test("local refusal: nothing is sent, the connection still works");
    memset(big, 'x', 1048577);
    CHECK(spillway_health(c) == SPILLWAY_OK, "health: %s", spillway_strerror(c));
    before = spillway_bytes_written(c);

    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "", 0);
    CHECK(rc == SPILLWAY_ERR_REJECTED, "empty record: %s", spillway_status_name(rc));
    CHECK(contains(spillway_strerror(c), "record 0 is empty"), "%s",
          spillway_strerror(c));
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, big, 1048577);
    CHECK(rc == SPILLWAY_ERR_REJECTED, "1048577 bytes: %s", spillway_status_name(rc));
    CHECK(contains(spillway_strerror(c), "record 0") &&
          contains(spillway_strerror(c), "1048576"), "%s", spillway_strerror(c));
    rc = spillway_push(c, (spillway_tier)9, "x", 1);
    CHECK(rc == SPILLWAY_ERR_REJECTED, "tier 9: %s", spillway_status_name(rc));

    rc = spillway_push_batch(c, SPILLWAY_TIER_SYNC, recs, 0, &acked);
    CHECK(rc == SPILLWAY_ERR_REJECTED && contains(spillway_strerror(c), "no records"),
          "no records: %s", spillway_strerror(c));
    recs[0].data = "a"; recs[0].len = 1;
    recs[1].data = "b"; recs[1].len = 1;
    recs[2].data = ""; recs[2].len = 0;
    rc = spillway_push_batch(c, SPILLWAY_TIER_SYNC, recs, 3, &acked);
    CHECK(rc == SPILLWAY_ERR_REJECTED && contains(spillway_strerror(c), "record 2 of 3"),
          "empty record 2: %s", spillway_strerror(c));
    /* 4 + 2 * (4 + 524288) = 1048588 > 1048576: over at record 1. */
    recs[0].data = big; recs[0].len = 524288;
    recs[1].data = big; recs[1].len = 524288;
    rc = spillway_push_batch(c, SPILLWAY_TIER_SYNC, recs, 2, &acked);
    CHECK(rc == SPILLWAY_ERR_REJECTED, "batch over the cap: %s", spillway_status_name(rc));
    CHECK(contains(spillway_strerror(c), "record 1 of 2") &&
          contains(spillway_strerror(c), "1048576"), "%s", spillway_strerror(c));
    rc = spillway_send_push(c, SPILLWAY_TIER_SYNC, big, 1048577, NULL);
    CHECK(rc == SPILLWAY_ERR_REJECTED && spillway_outstanding(c) == 0,
          "pipelined send over the cap");
    rc = spillway_send_push_batch(c, SPILLWAY_TIER_SYNC, recs, 2, NULL);
    CHECK(rc == SPILLWAY_ERR_REJECTED && spillway_outstanding(c) == 0,
          "pipelined batch over the cap");
    CHECK(spillway_bytes_written(c) == before, "%" PRIu64 " bytes were written",
          spillway_bytes_written(c) - before);

    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_OK, "health after the refusals: %s", spillway_strerror(c));

    /* The caps are inclusive: exactly 1048576 bytes of payload are taken,
     * as one Push and as one PushBatch (4 + 4 + 1048568). These go through
     * the direct write path for long records. */
    rc = spillway_push(c, SPILLWAY_TIER_BUFFERED, big, 1048576);
    CHECK(rc == SPILLWAY_OK, "a push of exactly the cap: %s", spillway_strerror(c));
    recs[0].data = big; recs[0].len = 1048568;
    rc = spillway_push_batch(c, SPILLWAY_TIER_BUFFERED, recs, 1, &acked);
    CHECK(rc == SPILLWAY_OK && acked == 1, "a batch of exactly the cap: %s",
          spillway_strerror(c));
    CHECK(spillway_health(c) == SPILLWAY_OK, "health: %s", spillway_strerror(c));
    spillway_close(c);
    free(big);
    end_test(NULL);
}

/* A client whose own cap is higher than the daemon's: the daemon nacks
 * PayloadTooLarge from the header and hangs up, maybe while we are still
 * writing; the client reports the nack, not a bare broken pipe. */
static void test_daemon_cap_nack(void)
{
    spillway_client *c = connect_daemon(0, 0);
    uint8_t *big = (uint8_t *)xmalloc(2 * 1048576);
    int rc;
    begin_test("a record over the daemon's cap is nacked payload_too_large");
    memset(big, 'y', 2 * 1048576);
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, big, 2 * 1048576);
    CHECK(rc == SPILLWAY_ERR_NACK, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(spillway_last_nack(c) == SPILLWAY_NACK_PAYLOAD_TOO_LARGE, "nack %s",
          spillway_nack_name(spillway_last_nack(c)));
    CHECK(contains(spillway_strerror(c), "payload_too_large (0x04, not retryable"),
          "%s", spillway_strerror(c));
    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_ERR_CLOSED, "after a fatal nack: %s", spillway_status_name(rc));
    spillway_close(c);
    free(big);
    end_test(NULL);
}

/* Lines of `text` that start with `prefix`, in order, must be exactly
 * recs[0..n). */
static int check_order(const char *text, const char *prefix, char recs[][24],
                       int n, char *why, size_t cap)
{
    const char *p = text;
    size_t plen = strlen(prefix);
    int seen = 0;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= plen && memcmp(p, prefix, plen) == 0) {
            if (seen >= n || len != strlen(recs[seen]) ||
                memcmp(p, recs[seen], len) != 0) {
                snprintf(why, cap, "line %d of %s...: got \"%.*s\", want \"%s\"",
                         seen, prefix, (int)(len > 40 ? 40 : len), p,
                         seen < n ? recs[seen] : "(nothing more)");
                return 0;
            }
            seen++;
        }
        p = nl ? nl + 1 : NULL;
    }
    if (seen != n) {
        snprintf(why, cap, "%d of %d %s records delivered", seen, n, prefix);
        return 0;
    }
    return 1;
}

static void test_delivered_order(void)
{
    int64_t deadline = mono_ms() + 15000;
    char *text = NULL;
    char why[256] = "";
    int ok = 0;
    begin_test("records arrive in delivered.ndjson in the order sent");
    while (mono_ms() < deadline) {
        free(text);
        text = read_file(g_delivered, NULL);
        if (text && check_order(text, "pipe-", g_pipe_recs, PIPE_N, why, sizeof why) &&
            check_order(text, "auto-", g_auto_recs, PIPE_N, why, sizeof why) &&
            check_order(text, "batch-0", g_batch_recs, BATCH_N, why, sizeof why) &&
            contains(text, "\ntier-sync\ntier-batched\ntier-buffered\n") &&
            contains(text, "\npbatch-a\npbatch-b\n")) {
            ok = 1;
            break;
        }
        sleep_ms(100);
    }
    CHECK(ok, "after 15 s: %s", why[0] ? why : "tier or batch records missing");
    free(text);
    end_test(NULL);
}

/* ---- 3. hostile and broken daemons -------------------------------------------- */

enum fake_mode {
    FAKE_SILENT,     /* reads, never answers */
    FAKE_SCRIPT,     /* connection k: read one frame, write script[k], close */
    FAKE_OVERLOAD,   /* frame 0 of each connection: Overloaded; then proper answers */
    FAKE_CAPTURE,    /* proper answers; every byte received goes to a file */
    FAKE_NACK_HOLD,  /* frame 0: a BadMagic nack; then silence, socket kept open */
    FAKE_SLOW_FIRST  /* frame 0: Overloaded after 800 ms; then proper answers */
};

typedef struct fake {
    pid_t pid;
    char path[600];
} fake;

static const uint8_t ACK[20] = {0x57, 0x45, 0x49, 0x52, 0x01, 0x02, 0x01, 0x00,
                                0x00, 0x00, 0x00, 0x00, 0xc9, 0x47, 0x4b, 0x3a,
                                0, 0, 0, 0};

static size_t make_response(uint8_t *out, uint8_t type, const uint8_t *payload,
                            uint32_t plen)
{
    uint32_t crc;
    memcpy(out, "WEIR", 4);
    out[4] = 1;
    out[5] = type;
    out[6] = 1;
    out[7] = 0;
    out[8] = (uint8_t)plen; out[9] = (uint8_t)(plen >> 8);
    out[10] = (uint8_t)(plen >> 16); out[11] = (uint8_t)(plen >> 24);
    crc = spillway_crc32(out, 12);
    out[12] = (uint8_t)crc; out[13] = (uint8_t)(crc >> 8);
    out[14] = (uint8_t)(crc >> 16); out[15] = (uint8_t)(crc >> 24);
    if (plen)
        memcpy(out + 16, payload, plen);
    crc = spillway_crc32(payload, plen);
    out[16 + plen] = (uint8_t)crc; out[17 + plen] = (uint8_t)(crc >> 8);
    out[18 + plen] = (uint8_t)(crc >> 16); out[19 + plen] = (uint8_t)(crc >> 24);
    return 20 + plen;
}

/* The answer a healthy daemon gives to a request frame. */
static size_t proper_answer(const uint8_t *frame, uint8_t *out)
{
    if (frame[5] == SPILLWAY_MSG_PUSH_BATCH)
        return make_response(out, SPILLWAY_MSG_ACK_BATCH, frame + 16, 4);
    if (frame[5] == SPILLWAY_MSG_HEALTH_CHECK)
        return make_response(out, SPILLWAY_MSG_HEALTH_CHECK_RESPONSE, NULL, 0);
    memcpy(out, ACK, 20);
    return 20;
}

static void fake_serve(int lfd, int mode, uint8_t **script, size_t *script_len,
                       size_t script_n, const char *capture)
{
    static uint8_t frame[1 << 16];
    size_t k = 0;
    int cap_fd = -1;
    signal(SIGPIPE, SIG_IGN);
    if (capture)
        cap_fd = open(capture, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        size_t n, nframes = 0;
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            _exit(0);
        }
        while ((n = read_frame(fd, frame, sizeof frame, 20000)) > 0) {
            uint8_t ans[64];
            size_t alen;
            if (mode == FAKE_SILENT || (mode == FAKE_NACK_HOLD && nframes > 0))
                continue;
            if (mode == FAKE_NACK_HOLD) {
                uint8_t reason = SPILLWAY_NACK_BAD_MAGIC;
                alen = make_response(ans, SPILLWAY_MSG_NACK, &reason, 1);
                raw_write(fd, ans, alen);
                nframes++;
                continue;
            }
            if (mode == FAKE_SCRIPT) {
                if (k < script_n)
                    raw_write(fd, script[k], script_len[k]);
                break;
            }
            if (mode == FAKE_CAPTURE && cap_fd >= 0 &&
                write(cap_fd, frame, n) != (ssize_t)n)
                _exit(3);
            if (mode == FAKE_SLOW_FIRST && nframes == 0)
                sleep_ms(800);
            if ((mode == FAKE_OVERLOAD || mode == FAKE_SLOW_FIRST) && nframes == 0) {
                uint8_t reason = SPILLWAY_NACK_OVERLOADED;
                alen = make_response(ans, SPILLWAY_MSG_NACK, &reason, 1);
            } else {
                alen = proper_answer(frame, ans);
            }
            raw_write(fd, ans, alen);
            nframes++;
        }
        close(fd);
        k++;
    }
}

static fake fake_start(const char *name, int mode, uint8_t **script,
                       size_t *script_len, size_t script_n, const char *capture)
{
    fake f;
    struct sockaddr_un a;
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (lfd < 0)
        die("socket: %s", strerror(errno));
    snprintf(f.path, sizeof f.path, "%s/fake-%s.sock", g_tmp, name);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(f.path) >= sizeof a.sun_path)
        die("socket path too long: %s", f.path);
    memcpy(a.sun_path, f.path, strlen(f.path) + 1);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 16) != 0)
        die("fake %s: bind/listen %s: %s", name, f.path, strerror(errno));
    f.pid = fork();
    if (f.pid < 0)
        die("fork: %s", strerror(errno));
    if (f.pid == 0) {
        /* Dies on its own if the suite never stops it. */
        signal(SIGALRM, SIG_DFL);
        alarm(60);
        fake_serve(lfd, mode, script, script_len, script_n, capture);
        _exit(0);
    }
    close(lfd);
    return f;
}

static void fake_stop(fake *f)
{
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
    unlink(f->path);
}

static spillway_client *connect_fake(const fake *f, int io_timeout_ms)
{
    spillway_client *c = NULL;
    spillway_options o = {0};
    o.io_timeout_ms = io_timeout_ms;
    o.connect_timeout_ms = 2000;
    if (spillway_connect(&c, f->path, &o) != SPILLWAY_OK)
        die("connecting to the fake daemon: %s", spillway_strerror(c));
    return c;
}

static void test_fake_silent(void)
{
    fake f = fake_start("silent", FAKE_SILENT, NULL, NULL, 0, NULL);
    spillway_client *c = connect_fake(&f, 500);
    int64_t t0 = mono_ms(), dt;
    spillway_summary s;
    int rc, i;
    begin_test("a daemon that never answers: timeout after 500 ms, no hang");
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    dt = mono_ms() - t0;
    CHECK(rc == SPILLWAY_ERR_TIMEOUT, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(dt >= 450 && dt < 2000, "took %" PRId64 " ms", dt);
    CHECK(contains(spillway_strerror(c), "500 ms"), "%s", spillway_strerror(c));
    /* Pipelined: the flush waits once, not once per request. */
    for (i = 0; i < 5; i++)
        CHECK(spillway_send_push(c, SPILLWAY_TIER_SYNC, "hello", 5, NULL) ==
              SPILLWAY_OK, "send: %s", spillway_strerror(c));
    t0 = mono_ms();
    rc = spillway_flush(c, &s);
    dt = mono_ms() - t0;
    CHECK(rc == SPILLWAY_ERR_TIMEOUT && s.failed == 5 && s.acked == 0,
          "flush %s, failed %" PRIu64, spillway_status_name(rc), s.failed);
    CHECK(dt < 2000, "flush took %" PRId64 " ms", dt);
    spillway_close(c);
    fake_stop(&f);
    end_test(NULL);
}

static void test_fake_script(void)
{
    uint8_t half[10], garbage[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    uint8_t vm[22], ab2[24], hcr[20];
    uint8_t two[4] = {2, 0, 0, 0}, vm_payload[2] = {0x02, 0x01};
    uint8_t *script[5];
    size_t lens[5];
    fake f;
    spillway_client *c;
    spillway_record three[3] = {{"a", 1}, {"b", 1}, {"c", 1}};
    uint32_t acked = 99;
    int rc;

    memcpy(half, ACK, 10);
    make_response(vm, SPILLWAY_MSG_NACK, vm_payload, 2);
    make_response(ab2, SPILLWAY_MSG_ACK_BATCH, two, 4);
    make_response(hcr, SPILLWAY_MSG_HEALTH_CHECK_RESPONSE, NULL, 0);
    script[0] = half; lens[0] = sizeof half;
    script[1] = garbage; lens[1] = sizeof garbage - 1;
    script[2] = vm; lens[2] = sizeof vm;
    script[3] = ab2; lens[3] = sizeof ab2;
    script[4] = hcr; lens[4] = sizeof hcr;
    f = fake_start("script", FAKE_SCRIPT, script, lens, 5, NULL);

    begin_test("a daemon that closes after half a frame: protocol error");
    c = connect_fake(&f, 2000);
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_PROTOCOL, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(contains(spillway_strerror(c), "middle of a frame (10 bytes"), "%s",
          spillway_strerror(c));
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_CLOSED, "then: %s", spillway_status_name(rc));
    spillway_close(c);
    end_test(NULL);

    begin_test("a daemon that answers garbage: protocol error");
    c = connect_fake(&f, 2000);
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_PROTOCOL, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(contains(spillway_strerror(c), "bad magic"), "%s", spillway_strerror(c));
    spillway_close(c);
    end_test(NULL);

    begin_test("a daemon that answers VersionMismatch: nack, not retryable");
    c = connect_fake(&f, 2000);
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_NACK, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(spillway_last_nack(c) == SPILLWAY_NACK_VERSION_MISMATCH, "nack %u",
          spillway_last_nack(c));
    CHECK(!spillway_nack_retryable(spillway_last_nack(c)), "retryable");
    CHECK(contains(spillway_strerror(c), "daemon nacked: version_mismatch (0x02, "
                   "daemon speaks version 1, not retryable"), "%s",
          spillway_strerror(c));
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_CLOSED, "then: %s", spillway_status_name(rc));
    spillway_close(c);
    end_test(NULL);

    begin_test("an AckBatch with the wrong count: protocol error");
    c = connect_fake(&f, 2000);
    rc = spillway_push_batch(c, SPILLWAY_TIER_SYNC, three, 3, &acked);
    CHECK(rc == SPILLWAY_ERR_PROTOCOL, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(contains(spillway_strerror(c), "counts 2 records, the batch had 3"), "%s",
          spillway_strerror(c));
    spillway_close(c);
    end_test(NULL);

    begin_test("an unexpected response type: protocol error");
    c = connect_fake(&f, 2000);
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_PROTOCOL, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(contains(spillway_strerror(c), "health_check_response to a push"), "%s",
          spillway_strerror(c));
    spillway_close(c);
    end_test(NULL);
    fake_stop(&f);
}

static void test_fake_overloaded(void)
{
    fake f = fake_start("overloaded", FAKE_OVERLOAD, NULL, NULL, 0, NULL);
    spillway_client *c = connect_fake(&f, 2000);
    spillway_summary s;
    uint64_t first = 0, seq;
    int rc, i;
    begin_test("a daemon that answers Overloaded: retryable nack, same connection");
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_NACK, "rc %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    CHECK(spillway_last_nack(c) == SPILLWAY_NACK_OVERLOADED, "nack %u",
          spillway_last_nack(c));
    CHECK(spillway_nack_retryable(spillway_last_nack(c)), "not retryable");
    CHECK(strcmp(spillway_strerror(c),
                 "daemon nacked: overloaded (0x0a, retryable: back off and "
                 "resend)") == 0, "message: %s", spillway_strerror(c));
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_OK, "resend on the same connection: %s",
          spillway_strerror(c));
    CHECK(spillway_health(c) == SPILLWAY_OK, "health: %s", spillway_strerror(c));
    spillway_close(c);

    /* Pipelined: the first of ten is nacked, the other nine acked. */
    c = connect_fake(&f, 2000);
    for (i = 0; i < 10; i++) {
        rc = spillway_send_push(c, SPILLWAY_TIER_SYNC, "hello", 5, &seq);
        CHECK(rc == SPILLWAY_OK, "send: %s", spillway_strerror(c));
        if (i == 0)
            first = seq;
    }
    rc = spillway_flush(c, &s);
    CHECK(rc == SPILLWAY_ERR_NACK, "flush: %s", spillway_status_name(rc));
    CHECK(s.requests == 10 && s.acked == 9 && s.failed == 1 &&
          s.first_error == SPILLWAY_ERR_NACK && s.first_error_seq == first &&
          s.first_nack == SPILLWAY_NACK_OVERLOADED,
          "summary %" PRIu64 "/%" PRIu64 "/%" PRIu64, s.requests, s.acked, s.failed);
    CHECK(spillway_last_nack(c) == SPILLWAY_NACK_OVERLOADED, "last nack");
    CHECK(contains(spillway_strerror(c), "overloaded (0x0a, retryable"), "%s",
          spillway_strerror(c));
    CHECK(spillway_health(c) == SPILLWAY_OK, "health after: %s", spillway_strerror(c));
    spillway_close(c);
    fake_stop(&f);
    end_test(NULL);
}

/* A read timeout leaves the client usable: the late answer is discarded,
 * the next request gets its own. */
static void test_fake_late_answer(void)
{
    fake f = fake_start("slow", FAKE_SLOW_FIRST, NULL, NULL, 0, NULL);
    spillway_client *c = connect_fake(&f, 500);
    int rc;
    begin_test("after a timeout the late answer is discarded, not given to the next request");
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "first", 5);
    CHECK(rc == SPILLWAY_ERR_TIMEOUT, "first: %s", spillway_status_name(rc));
    sleep_ms(400); /* the late Overloaded nack arrives meanwhile */
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "second", 6);
    CHECK(rc == SPILLWAY_OK, "second: %s: %s", spillway_status_name(rc),
          spillway_strerror(c));
    rc = spillway_health(c);
    CHECK(rc == SPILLWAY_OK, "health: %s", spillway_strerror(c));
    spillway_close(c);
    fake_stop(&f);
    end_test(NULL);
}

/* After a nack that closes the connection nothing more is answered: the
 * client fails the rest at once (it does not wait for them) and refuses to
 * send more, even while the socket is still open. */
static void test_fake_fatal_nack_pipelined(void)
{
    fake f = fake_start("nackhold", FAKE_NACK_HOLD, NULL, NULL, 0, NULL);
    spillway_client *c = connect_fake(&f, 5000);
    spillway_summary s;
    uint64_t written;
    int64_t t0;
    int rc, i;
    begin_test("a fatal nack in a pipeline: the rest fail at once, nothing more is sent");
    for (i = 0; i < 4; i++)
        CHECK(spillway_send_push(c, SPILLWAY_TIER_SYNC, "hello", 5, NULL) ==
              SPILLWAY_OK, "send: %s", spillway_strerror(c));
    t0 = mono_ms();
    rc = spillway_flush(c, &s);
    CHECK(mono_ms() - t0 < 2000, "flush waited %" PRId64 " ms", mono_ms() - t0);
    CHECK(rc == SPILLWAY_ERR_NACK && s.failed == 4 && s.acked == 0 &&
          s.first_nack == SPILLWAY_NACK_BAD_MAGIC,
          "flush %s, failed %" PRIu64, spillway_status_name(rc), s.failed);
    CHECK(contains(spillway_strerror(c), "bad_magic (0x01, not retryable"), "%s",
          spillway_strerror(c));
    written = spillway_bytes_written(c);
    rc = spillway_send_push(c, SPILLWAY_TIER_SYNC, "hello", 5, NULL);
    CHECK(rc == SPILLWAY_ERR_CLOSED, "send after: %s", spillway_status_name(rc));
    rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
    CHECK(rc == SPILLWAY_ERR_CLOSED, "push after: %s", spillway_status_name(rc));
    CHECK(contains(spillway_strerror(c), "reconnect"), "%s", spillway_strerror(c));
    CHECK(spillway_bytes_written(c) == written, "bytes were sent after the nack");
    spillway_close(c);
    fake_stop(&f);
    end_test(NULL);
}

/* Every rejected_response vector, served by a fake daemon to the client. */
static void test_rejected_responses_via_client(const jv *vectors)
{
    uint8_t *script[64];
    size_t lens[64], n = 0, i;
    const char *names[64];
    fake f;
    for (i = 0; i < vectors->n && n < 64; i++) {
        const jv *v = vectors->items[i];
        if (strcmp(jstr(v, "kind"), "rejected_response") != 0)
            continue;
        names[n] = jstr(v, "name");
        script[n] = unhex(jstr(v, "frame"), &lens[n]);
        n++;
    }
    f = fake_start("rejected", FAKE_SCRIPT, script, lens, n, NULL);
    for (i = 0; i < n; i++) {
        char label[160];
        spillway_client *c = connect_fake(&f, 2000);
        int rc;
        snprintf(label, sizeof label, "vector %s (rejected_response, served to "
                 "the client)", names[i]);
        begin_test(label);
        rc = spillway_push(c, SPILLWAY_TIER_SYNC, "hello", 5);
        CHECK(rc == SPILLWAY_ERR_PROTOCOL, "rc %s: %s", spillway_status_name(rc),
              spillway_strerror(c));
        CHECK(contains(spillway_strerror(c), "malformed response"), "%s",
              spillway_strerror(c));
        spillway_close(c);
        end_test(NULL);
    }
    fake_stop(&f);
    for (i = 0; i < n; i++)
        free(script[i]);
}

/* Every request vector through the pipelined sender's write path: the
 * bytes a fake daemon receives are exactly the vectors' frames. */
static void test_request_bytes_via_client(const jv *vectors)
{
    char capture[600];
    fake f;
    spillway_client *c;
    size_t i, want_len = 0, got_len = 0, nreq = 0;
    uint8_t *want = (uint8_t *)xmalloc(1 << 16);
    char *got;
    spillway_summary s;
    int rc;

    snprintf(capture, sizeof capture, "%s/capture.bin", g_tmp);
    f = fake_start("capture", FAKE_CAPTURE, NULL, NULL, 0, capture);
    c = connect_fake(&f, 2000);
    begin_test("request vectors: the pipelined sender writes exactly their frames");
    for (i = 0; i < vectors->n; i++) {
        const jv *v = vectors->items[i];
        const jv *req;
        const char *type;
        size_t flen;
        uint8_t *frame;
        if (strcmp(jstr(v, "kind"), "request") != 0)
            continue;
        req = jget(v, "request");
        type = jstr(req, "type");
        frame = unhex(jstr(v, "frame"), &flen);
        memcpy(want + want_len, frame, flen);
        want_len += flen;
        free(frame);
        nreq++;
        if (strcmp(type, "push") == 0) {
            size_t n;
            uint8_t *p = unhex(jstr(req, "payload"), &n);
            rc = spillway_send_push(c, (spillway_tier)tier_from_name(jstr(req, "tier")),
                                    p, n, NULL);
            free(p); /* the client copied it: it may be freed at once */
        } else if (strcmp(type, "push_batch") == 0) {
            jv *recs = jget(req, "records");
            size_t j, n = recs->n;
            spillway_record *r = (spillway_record *)xmalloc(n * sizeof *r);
            uint8_t **bufs = (uint8_t **)xmalloc(n * sizeof *bufs);
            for (j = 0; j < n; j++) {
                bufs[j] = unhex(recs->items[j]->str, &r[j].len);
                r[j].data = bufs[j];
            }
            rc = spillway_send_push_batch(c, (spillway_tier)tier_from_name(jstr(req, "tier")),
                                          r, n, NULL);
            for (j = 0; j < n; j++)
                free(bufs[j]);
            free(bufs);
            free(r);
        } else {
            rc = spillway_send_health(c, NULL);
        }
        CHECK(rc == SPILLWAY_OK, "send %s: %s", jstr(v, "name"), spillway_strerror(c));
    }
    rc = spillway_flush(c, &s);
    CHECK(rc == SPILLWAY_OK && s.acked == nreq, "flush: %s", spillway_strerror(c));
    spillway_close(c);
    fake_stop(&f);
    got = read_file(capture, &got_len);
    CHECK(got && got_len == want_len && memcmp(got, want, want_len) == 0,
          "captured %zu bytes, want %zu", got_len, want_len);
    free(got);
    free(want);
    end_test(NULL);
}

/* ---- main ----------------------------------------------------------------------- */

/* The whole suite must finish well under 60 s; a hang fails it. */
static void on_watchdog(int sig)
{
    static const char m[] = "test_spillway: FAIL: the suite did not finish "
                            "within 60 s (a call hung)\n";
    (void)sig;
    if (write(2, m, sizeof m - 1) < 0) {
    }
    if (g_daemon > 0)
        kill(g_daemon, SIGKILL);
    _exit(1);
}

int main(void)
{
    const char *bin = getenv("SPILLWAY_BIN");
    jv *root, *vectors;
    counts k = {0, 0, 0, 0};
    size_t i;
    int clean;
    int64_t t0 = mono_ms();
    char d[128];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!bin || !bin[0])
        die("SPILLWAY_BIN is not set: set it to the spillway daemon binary, "
            "e.g. SPILLWAY_BIN=/path/to/spillway");
    if (access(bin, X_OK) != 0)
        die("SPILLWAY_BIN=%s is not an executable file: %s", bin, strerror(errno));
    signal(SIGPIPE, SIG_IGN); /* only the raw test sockets; the client uses MSG_NOSIGNAL */
    signal(SIGALRM, on_watchdog);
    alarm(60);

    snprintf(g_tmp, sizeof g_tmp, "/tmp/spillway-c-test-XXXXXX");
    if (!mkdtemp(g_tmp))
        die("mkdtemp: %s", strerror(errno));
    chmod(g_tmp, 0700);

    root = load_vectors();
    vectors = jget(root, "vectors");
    if (!vectors || vectors->type != J_ARR || vectors->n == 0)
        die("vectors.json has no vectors");

    /* 1. offline: encoder and decoder */
    test_codec_basics();
    for (i = 0; i < vectors->n; i++)
        vector_offline(vectors->items[i], &k);
    begin_test("every vector kind was run");
    CHECK((size_t)(k.request + k.response + k.rejected_request +
                   k.rejected_response) == vectors->n,
          "%zu vectors", vectors->n);
    snprintf(d, sizeof d, "%zu vectors: %d request, %d response, %d "
             "rejected_request, %d rejected_response", vectors->n, k.request,
             k.response, k.rejected_request, k.rejected_response);
    end_test(d);

    /* 2. the real daemon */
    start_daemon(bin);
    for (i = 0; i < vectors->n; i++)
        vector_online(vectors->items[i]);
    for (i = 0; i < vectors->n; i++)
        if (strcmp(jstr(vectors->items[i], "kind"), "request") == 0)
            vector_via_client(vectors->items[i]);
    test_connect_errors();
    test_health();
    test_push_tiers();
    test_push_batch();
    test_pipeline_recv();
    test_pipeline_flush();
    test_local_refusal();
    test_daemon_cap_nack();
    test_delivered_order();

    /* 3. hostile daemons */
    test_fake_silent();
    test_fake_script();
    test_fake_overloaded();
    test_fake_fatal_nack_pipelined();
    test_fake_late_answer();
    test_rejected_responses_via_client(vectors);
    test_request_bytes_via_client(vectors);

    begin_test("the daemon stops cleanly on SIGTERM");
    clean = stop_daemon();
    CHECK(clean, "the daemon did not exit 0 after SIGTERM");
    if (!clean) {
        char err[600];
        snprintf(err, sizeof err, "%s/daemon.stderr", g_tmp);
        print_file("daemon stderr", err);
    }
    end_test(NULL);

    jfree(root);
    printf("%d passed, %d failed (%.1f s)\n", g_tests_passed, g_tests_failed,
           (double)(mono_ms() - t0) / 1000.0);
    if (g_tests_failed == 0)
        rm_rf(g_tmp);
    else
        fprintf(stderr, "test files kept in %s\n", g_tmp);
    return g_tests_failed == 0 ? 0 : 1;
}
