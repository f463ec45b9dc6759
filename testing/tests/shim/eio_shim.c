/*
 * eio_shim: an LD_PRELOAD library that makes a process's fsync-family calls
 * (and, on request, its positional writes) fail with EIO on demand, for the
 * transient-EIO tests of spillway (testing/tests/tests/faults_eio.rs, issue 7).
 *
 * Built by the test itself:
 *   cc -shared -fPIC -O2 -o <tmp>/eio_shim.so testing/tests/shim/eio_shim.c -ldl
 *
 * Environment (read on every call, nothing cached):
 *   SPILLWAY_EIO_UNDER  a folder; only calls on file descriptors whose path
 *                       (readlink /proc/self/fd/N) is this folder or lies
 *                       under it are considered. Unset: the shim passes
 *                       every call through.
 *   SPILLWAY_EIO_WHILE  a control file; while it exists (access(2)), the
 *                       considered calls fail with EIO without doing
 *                       anything. Absent: they pass through (dlsym
 *                       RTLD_NEXT).
 *   SPILLWAY_EIO_OPS    which calls may fail: a comma-separated subset of
 *                       fdatasync, fsync, pwritev, pwrite (default
 *                       "fdatasync,fsync"; pwrite covers pwrite64). Calls
 *                       not listed pass through.
 *   SPILLWAY_EIO_LOG    optional file; one line per call of any of those
 *                       four on a file under SPILLWAY_EIO_UNDER:
 *                       "<monotonic ns> <op> <ok|EIO|err=N> <dev>:<ino> <path>"
 *                       (ok/err=N: passed through, with its result; EIO:
 *                       injected).
 *   SPILLWAY_EIO_COUNT  optional file holding the number of injected
 *                       failures so far (decimal, rewritten at each one).
 *
 * Everything the shim does itself (access, readlink, fstat, open, write)
 * goes through the real libc calls and leaves errno as the real call (or
 * the injected EIO) set it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef int (*sync_fn)(int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static atomic_ulong injected;

/* The real symbol behind `name` (abort if there is none: nothing sane to do). */
static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        static const char msg[] = "eio_shim: dlsym(RTLD_NEXT) found no libc symbol\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    return f;
}

/* Whether `op` is listed in SPILLWAY_EIO_OPS (default fdatasync,fsync). */
static int op_enabled(const char *op) {
    const char *ops = getenv("SPILLWAY_EIO_OPS");
    if (ops == NULL || *ops == '\0') {
        ops = "fdatasync,fsync";
    }
    size_t n = strlen(op);
    const char *p = ops;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, op, n) == 0) {
            return 1;
        }
        if (end == NULL) {
            break;
        }
        p = end + 1;
    }
    return 0;
}

/* Resolve fd's path into buf; 1 if it is SPILLWAY_EIO_UNDER or below it. */
static int fd_under(int fd, char *buf, size_t cap) {
    const char *under = getenv("SPILLWAY_EIO_UNDER");
    if (under == NULL || *under == '\0') {
        return 0;
    }
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, cap - 1);
    if (n < 0) {
        return 0;
    }
    buf[n] = '\0';
    size_t u = strlen(under);
    while (u > 1 && under[u - 1] == '/') {
        u--;
    }
    return strncmp(buf, under, u) == 0 && (buf[u] == '\0' || buf[u] == '/');
}

static int failing_now(void) {
    const char *ctl = getenv("SPILLWAY_EIO_WHILE");
    return ctl != NULL && *ctl != '\0' && access(ctl, F_OK) == 0;
}

static void log_call(int fd, const char *op, const char *result, const char *path) {
    const char *log = getenv("SPILLWAY_EIO_LOG");
    if (log == NULL || *log == '\0') {
        return;
    }
    struct stat st;
    unsigned long long dev = 0, ino = 0;
    if (fstat(fd, &st) == 0) {
        dev = (unsigned long long)st.st_dev;
        ino = (unsigned long long)st.st_ino;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[PATH_MAX + 128];
    int len = snprintf(line, sizeof line, "%lld %s %s %llu:%llu %s\n",
                       (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, op, result, dev,
                       ino, path);
    if (len <= 0) {
        return;
    }
    if ((size_t)len >= sizeof line) {
        len = sizeof line - 1;
        line[len - 1] = '\n';
    }
    int out = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (out < 0) {
        return;
    }
    /* One write with O_APPEND: lines of concurrent threads do not interleave. */
    (void)!write(out, line, (size_t)len);
    close(out);
}

static void count_injected(void) {
    unsigned long n = atomic_fetch_add(&injected, 1) + 1;
    const char *path = getenv("SPILLWAY_EIO_COUNT");
    if (path == NULL || *path == '\0') {
        return;
    }
    int out = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (out < 0) {
        return;
    }
    /* Fixed width, so a rewrite never leaves digits of a longer number. */
    char text[32];
    int len = snprintf(text, sizeof text, "%020lu\n", n);
    pwrite_fn pw = (pwrite_fn)real("pwrite64");
    (void)!pw(out, text, (size_t)len, 0);
    close(out);
}

/*
 * Common part: 1 = inject EIO now (logged and counted), 0 = pass through;
 * `*considered` says whether the caller must log the real result (the fd
 * is under SPILLWAY_EIO_UNDER).
 */
static int should_fail(int fd, const char *op, char *path, size_t cap, int *considered) {
    *considered = fd_under(fd, path, cap);
    if (!*considered) {
        return 0;
    }
    if (op_enabled(op) && failing_now()) {
        log_call(fd, op, "EIO", path);
        count_injected();
        return 1;
    }
    return 0;
}

static void log_result(int fd, const char *op, long rc, int err, const char *path) {
    char result[32];
    if (rc < 0) {
        snprintf(result, sizeof result, "err=%d", err);
    } else {
        snprintf(result, sizeof result, "ok");
    }
    log_call(fd, op, result, path);
}

static int sync_call(const char *op, int fd) {
    char path[PATH_MAX];
    int considered;
    int saved = errno;
    if (should_fail(fd, op, path, sizeof path, &considered)) {
        errno = EIO;
        return -1;
    }
    errno = saved;
    sync_fn f = (sync_fn)real(op);
    int rc = f(fd);
    int err = errno;
    if (considered) {
        log_result(fd, op, rc, err, path);
    }
    errno = err;
    return rc;
}

int fdatasync(int fd) { return sync_call("fdatasync", fd); }

int fsync(int fd) { return sync_call("fsync", fd); }

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    char path[PATH_MAX];
    int considered;
    int saved = errno;
    if (should_fail(fd, "pwritev", path, sizeof path, &considered)) {
        errno = EIO;
        return -1;
    }
    errno = saved;
    pwritev_fn f = (pwritev_fn)real("pwritev");
    ssize_t rc = f(fd, iov, iovcnt, offset);
    int err = errno;
    if (considered) {
        log_result(fd, "pwritev", (long)rc, err, path);
    }
    errno = err;
    return rc;
}

/* glibc's pwrite is pwrite64 on 64-bit targets; cover both names. */
static ssize_t pwrite_common(const char *sym, int fd, const void *buf, size_t count,
                             off_t offset) {
    char path[PATH_MAX];
    int considered;
    int saved = errno;
    if (should_fail(fd, "pwrite", path, sizeof path, &considered)) {
        errno = EIO;
        return -1;
    }
    errno = saved;
    pwrite_fn f = (pwrite_fn)real(sym);
    ssize_t rc = f(fd, buf, count, offset);
    int err = errno;
    if (considered) {
        log_result(fd, "pwrite", (long)rc, err, path);
    }
    errno = err;
    return rc;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    return pwrite_common("pwrite", fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    return pwrite_common("pwrite64", fd, buf, count, offset);
}
