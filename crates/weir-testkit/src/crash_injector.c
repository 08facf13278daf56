/*
 * The crash injector: an LD_PRELOAD library that counts the durable file operations a process
 * makes under one directory — create (open with O_CREAT), rename, unlink, mkdir, rmdir, fsync
 * and fdatasync, including their *at variants — and stops or kills the process at a chosen one.
 * Random kills miss windows that last a microsecond; killing at the N-th operation, for every
 * N of a run, does not.
 *
 * Environment:
 *   WEIR_CRASH_DIR=<absolute path>  only operations on paths under it count (required)
 *   WEIR_CRASH_AT=<n>               SIGKILL the process right before the n-th operation
 *   WEIR_CRASH_STOP_AT=<n>          SIGSTOP the process right before the n-th operation
 *   WEIR_CRASH_LOG=<file>           append "n op path" for every counted operation
 *
 * Built by weir-testkit's build script; the harness in weir_testkit::crash_points uses it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static const char *prefix;
static size_t prefix_len;
static long crash_at = -1;
static long stop_at = -1;
static int log_fd = -1;
static long counter;
static int ready;

__attribute__((constructor)) static void weir_crash_init(void) {
    prefix = getenv("WEIR_CRASH_DIR");
    if (prefix == NULL || prefix[0] != '/') {
        return;
    }
    prefix_len = strlen(prefix);
    const char *at = getenv("WEIR_CRASH_AT");
    if (at != NULL) {
        crash_at = atol(at);
    }
    const char *stop = getenv("WEIR_CRASH_STOP_AT");
    if (stop != NULL) {
        stop_at = atol(stop);
    }
    const char *log = getenv("WEIR_CRASH_LOG");
    if (log != NULL) {
        /* A raw system call: the log's own operations must not count. */
        log_fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                              0644);
    }
    ready = 1;
}

/* The absolute path of `path` relative to `dirfd`; 0 when it cannot be told. */
static int resolve(int dirfd, const char *path, char *out, size_t size) {
    if (path == NULL) {
        return 0;
    }
    if (path[0] == '/') {
        snprintf(out, size, "%s", path);
        return 1;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof base) == NULL) {
            return 0;
        }
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n < 0) {
            return 0;
        }
        base[n] = '\0';
    }
    /* A path too long to hold is not ours to count. */
    int len = snprintf(out, size, "%s/%s", base, path);
    return len > 0 && (size_t)len < size;
}

static int fd_path(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, size - 1);
    if (n < 0) {
        return 0;
    }
    out[n] = '\0';
    return 1;
}

/* One durable operation on `path` (and `to`, for a rename) is about to happen. */
static void crash_point(const char *op, const char *path, const char *to) {
    if (!ready) {
        return;
    }
    int inside = strncmp(path, prefix, prefix_len) == 0 ||
                 (to != NULL && strncmp(to, prefix, prefix_len) == 0);
    if (!inside) {
        return;
    }
    long n = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    if (log_fd >= 0) {
        char line[2 * PATH_MAX + 64];
        int len = snprintf(line, sizeof line, "%ld %s %s%s%s\n", n, op, path, to ? " -> " : "",
                           to ? to : "");
        if (len > (int)sizeof line) {
            len = (int)sizeof line;
        }
        (void)syscall(SYS_write, log_fd, line, (size_t)len);
    }
    /* Sent to this thread, so that it is the one to take the signal, before it returns to
     * the operation: sent to the process, another thread could take it while this one runs
     * on for a few more system calls. */
    if (n == stop_at) {
        (void)syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGSTOP);
    }
    if (n == crash_at) {
        (void)syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGKILL);
    }
}

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name) \
    static __typeof__(&name) real_##name; \
    if (real_##name == NULL) { \
        real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name); \
    }

static void at_path(const char *op, int dirfd, const char *path) {
    char full[PATH_MAX];
    if (ready && resolve(dirfd, path, full, sizeof full)) {
        crash_point(op, full, NULL);
    }
}

static mode_t mode_arg(int flags, va_list ap) {
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (flags & O_CREAT) {
        at_path("create", AT_FDCWD, path);
    }
    REAL(open);
    return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (flags & O_CREAT) {
        at_path("create", AT_FDCWD, path);
    }
    REAL(open64);
    return real_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (flags & O_CREAT) {
        at_path("create", dirfd, path);
    }
    REAL(openat);
    return real_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (flags & O_CREAT) {
        at_path("create", dirfd, path);
    }
    REAL(openat64);
    return real_openat64(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode) {
    at_path("create", AT_FDCWD, path);
    REAL(creat);
    return real_creat(path, mode);
}

int creat64(const char *path, mode_t mode) {
    at_path("create", AT_FDCWD, path);
    REAL(creat64);
    return real_creat64(path, mode);
}

static void rename_point(int from_dir, const char *from, int to_dir, const char *to) {
    char a[PATH_MAX], b[PATH_MAX];
    if (ready && resolve(from_dir, from, a, sizeof a) && resolve(to_dir, to, b, sizeof b)) {
        crash_point("rename", a, b);
    }
}

int rename(const char *from, const char *to) {
    rename_point(AT_FDCWD, from, AT_FDCWD, to);
    REAL(rename);
    return real_rename(from, to);
}

int renameat(int from_dir, const char *from, int to_dir, const char *to) {
    rename_point(from_dir, from, to_dir, to);
    REAL(renameat);
    return real_renameat(from_dir, from, to_dir, to);
}

int renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned int flags) {
    rename_point(from_dir, from, to_dir, to);
    REAL(renameat2);
    return real_renameat2(from_dir, from, to_dir, to, flags);
}

/* A hard link creates a name that fails if it exists: how the job record's versions are
 * written (compare-and-swap), so it counts as a durable operation. */
int link(const char *from, const char *to) {
    char a[PATH_MAX], b[PATH_MAX];
    if (ready && resolve(AT_FDCWD, from, a, sizeof a) && resolve(AT_FDCWD, to, b, sizeof b)) {
        crash_point("link", a, b);
    }
    REAL(link);
    return real_link(from, to);
}

int linkat(int from_dir, const char *from, int to_dir, const char *to, int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    if (ready && resolve(from_dir, from, a, sizeof a) && resolve(to_dir, to, b, sizeof b)) {
        crash_point("link", a, b);
    }
    REAL(linkat);
    return real_linkat(from_dir, from, to_dir, to, flags);
}

int unlink(const char *path) {
    at_path("unlink", AT_FDCWD, path);
    REAL(unlink);
    return real_unlink(path);
}

int unlinkat(int dirfd, const char *path, int flags) {
    at_path((flags & AT_REMOVEDIR) ? "rmdir" : "unlink", dirfd, path);
    REAL(unlinkat);
    return real_unlinkat(dirfd, path, flags);
}

int rmdir(const char *path) {
    at_path("rmdir", AT_FDCWD, path);
    REAL(rmdir);
    return real_rmdir(path);
}

int mkdir(const char *path, mode_t mode) {
    at_path("mkdir", AT_FDCWD, path);
    REAL(mkdir);
    return real_mkdir(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode) {
    at_path("mkdir", dirfd, path);
    REAL(mkdirat);
    return real_mkdirat(dirfd, path, mode);
}

static void fd_point(const char *op, int fd) {
    char path[PATH_MAX];
    if (ready && fd_path(fd, path, sizeof path)) {
        crash_point(op, path, NULL);
    }
}

int fsync(int fd) {
    fd_point("fsync", fd);
    REAL(fsync);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    fd_point("fdatasync", fd);
    REAL(fdatasync);
    return real_fdatasync(fd);
}
