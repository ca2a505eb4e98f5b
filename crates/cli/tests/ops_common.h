/* What the differential tests of the socket calls share (socket_ops.c,
 * listen_ops.c): the seeded generator, one printed line per call, errno
 * names. Each program includes this once. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* The generator's state (xorshift64), seeded by the program. */
static uint64_t rng;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* The call being made: each line starts with it. */
static int step;
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    printf("%d ", step);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static const char *ename(int e) {
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case EISCONN: return "EISCONN";
    case ENOTCONN: return "ENOTCONN";
    case EPIPE: return "EPIPE";
    case ECONNRESET: return "ECONNRESET";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EINPROGRESS: return "EINPROGRESS";
    case EEXIST: return "EEXIST";
    case ENOENT: return "ENOENT";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EFAULT: return "EFAULT";
    case ENOTSOCK: return "ENOTSOCK";
    case EALREADY: return "EALREADY";
    case EADDRINUSE: return "EADDRINUSE";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    default: {
        static char b[32];
        snprintf(b, sizeof b, "errno%d", e);
        return b;
    }
    }
}

/* The result of a call returning -1/errno or a value. */
static const char *res(long r) {
    static char b[64];
    if (r < 0)
        snprintf(b, sizeof b, "-1 %s", ename(errno));
    else
        snprintf(b, sizeof b, "%ld", r);
    return b;
}

/* The program itself cannot go on (exit 1: not a difference). */
static void die(const char *what) {
    printf("%d FATAL %s: %s\n", step, what, strerror(errno));
    exit(1);
}
