/*
 * echo_server.c — a TCP echo server on Ixora's C API (include/ixora.h).
 *
 * Every byte received on a connection is sent back on it (RFC 862 over
 * TCP), so any TCP client is a valid peer:
 *
 *   echo_server --backend af_xdp --iface veth0 --ip 198.18.46.2/24 --port 7
 *
 * How it uses the API:
 *
 *  - `start` (once per core) listens on the port;
 *  - `knock` accepts every connection, with a pointer to its state as the
 *    cookie, so every later event finds the connection without a lookup;
 *  - `recv` hands out the received bytes in place. By default they are
 *    echoed zero-copy: ixora_sendv points the stack at those very bytes,
 *    and ixora_recv_done releases them only when `sent` reports the echo
 *    acknowledged (until then the bytes are still needed for
 *    retransmission, and holding them keeps the receive window closed —
 *    back-pressure to a client that does not read). With --copy the bytes
 *    are copied by ixora_send_copy and released at once;
 *  - whatever the send window does not take now waits in a small per
 *    connection queue of pieces (still in place in the receive frames) and
 *    is offered again on the next `sent`;
 *  - `peer_closed` closes the connection once everything is echoed (and,
 *    zero-copy, acknowledged: a closed connection reports no more acks);
 *  - `dead` (reset, timeout...) closes the handle and forgets the state.
 *
 * SIGINT or SIGTERM set the `stop` flag ixora_run watches; it returns, and
 * the server prints one summary line on stdout:
 *
 *   echo_server: 3 connections, 1048576 bytes echoed, 2 closed, 1 died
 *
 * Plain C11 plus POSIX (sigaction, getopt_long from glibc). Build: see
 * README.md in this directory.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ixora.h"

/* The stop flag ixora_run polls. A signal handler may only write a
 * `volatile sig_atomic_t`; ixora_run reads a `const volatile int *`, so the
 * two must be the same type (they are on Linux). */
_Static_assert(_Generic((sig_atomic_t)0, int: 1, default: 0), "sig_atomic_t must be int");
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Most iovecs offered to ixora_sendv in one call. */
#define MAX_IOV 64
/* Most cores this example accepts (per-core state is a fixed array). */
#define MAX_CORES 64

/* Received bytes not yet taken by the send window: a piece of a receive
 * frame, valid until ixora_recv_done releases it. */
struct piece {
    const uint8_t *data;
    size_t len;
};

struct core_state;

/* One accepted connection. Belongs to the core that accepted it; only
 * that core's callbacks touch it, so no locking. */
struct conn {
    ixora_handle h;
    struct core_state *core;
    struct conn *prev, *next; /* the core's list of open connections */
    /* Ring of pieces waiting for send-window space, oldest first. */
    struct piece *q;
    size_t q_head, q_len, q_cap; /* q_cap: 0 or a power of two */
    /* Zero-copy: bytes ixora_sendv took that the peer has not
     * acknowledged yet; they are also the oldest unreleased received
     * bytes (the echo is in stream order). */
    size_t unacked;
    int peer_closed;
};

/* Counters and open connections of one core (written by that core only;
 * read by main after ixora_run has returned and joined the cores). */
struct core_state {
    struct conn *open;
    uint64_t connections; /* accepted */
    uint64_t bytes;       /* echoed: taken by a send call */
    uint64_t closed;      /* closed after the peer closed */
    uint64_t died;        /* `dead` events */
    int failed;           /* listen failed */
};

/* The `user` pointer of every callback. */
struct server {
    uint16_t port;
    int copy; /* 1: ixora_send_copy; 0: zero-copy ixora_sendv */
    struct core_state cores[MAX_CORES];
};

static struct core_state *core_of(ixora_io *io, struct server *srv)
{
    uint32_t c = ixora_core(io);
    return &srv->cores[c < MAX_CORES ? c : MAX_CORES - 1];
}

/* ---- the per-connection piece queue ---------------------------------- */

static int q_push(struct conn *c, const uint8_t *data, size_t len)
{
    if (c->q_len == c->q_cap) {
        size_t cap = c->q_cap ? c->q_cap * 2 : 16;
        struct piece *q = malloc(cap * sizeof *q);
        if (q == NULL)
            return -1;
        for (size_t i = 0; i < c->q_len; i++)
            q[i] = c->q[(c->q_head + i) & (c->q_cap - 1)];
        free(c->q);
        c->q = q;
        c->q_cap = cap;
        c->q_head = 0;
    }
    c->q[(c->q_head + c->q_len) & (c->q_cap - 1)] = (struct piece){data, len};
    c->q_len++;
    return 0;
}

static struct piece *q_at(struct conn *c, size_t i)
{
    return &c->q[(c->q_head + i) & (c->q_cap - 1)];
}

/* Drop `n` bytes from the front of the queue (they were sent). */
static void q_consume(struct conn *c, size_t n)
{
    while (n > 0 && c->q_len > 0) {
        struct piece *p = q_at(c, 0);
        size_t k = n < p->len ? n : p->len;
        p->data += k;
        p->len -= k;
        n -= k;
        if (p->len == 0) {
            c->q_head = (c->q_head + 1) & (c->q_cap - 1);
            c->q_len--;
        }
    }
}

/* ---- connection life ------------------------------------------------- */

static void conn_free(struct conn *c)
{
    struct core_state *cs = c->core;
    if (c->prev)
        c->prev->next = c->next;
    else
        cs->open = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->q);
    free(c);
}

/* Offer the queued pieces to the send window. Zero-copy, the pieces stay
 * where they are (in the receive frames) until acknowledged; with --copy
 * they are copied and released at once. Returns 0, or a negative errno. */
static int flush(ixora_io *io, struct server *srv, struct conn *c)
{
    while (c->q_len > 0) {
        if (srv->copy) {
            struct piece p = *q_at(c, 0);
            ssize_t n = ixora_send_copy(io, c->h, p.data, p.len);
            if (n < 0)
                return (int)n;
            /* Copied: the received bytes are not needed any more. */
            if (n > 0)
                ixora_recv_done(io, c->h, (size_t)n);
            c->core->bytes += (uint64_t)n;
            q_consume(c, (size_t)n);
            if ((size_t)n < p.len)
                return 0; /* window full: `sent` will call us again */
        } else {
            struct iovec iov[MAX_IOV];
            int cnt = 0;
            size_t offered = 0;
            for (size_t i = 0; i < c->q_len && cnt < MAX_IOV; i++, cnt++) {
                struct piece *p = q_at(c, i);
                /* struct iovec is not const-correct; the bytes are only
                 * read. */
                iov[cnt].iov_base = (void *)(uintptr_t)p->data;
                iov[cnt].iov_len = p->len;
                offered += p->len;
            }
            ssize_t n = ixora_sendv(io, c->h, iov, cnt);
            if (n < 0)
                return (int)n;
            /* Taken bytes now belong to the stack until acknowledged; keep
             * them (no recv_done) and count them as in flight. */
            c->unacked += (size_t)n;
            c->core->bytes += (uint64_t)n;
            q_consume(c, (size_t)n);
            if ((size_t)n < offered)
                return 0; /* window full: `sent` will call us again */
        }
    }
    return 0;
}

/* Close once the peer closed and all its bytes are echoed (and, zero-copy,
 * acknowledged: the stack reports nothing after ixora_close, so the memory
 * must not be in flight any more). */
static void maybe_close(ixora_io *io, struct conn *c)
{
    if (c->peer_closed && c->q_len == 0 && c->unacked == 0) {
        ixora_close(io, c->h);
        c->core->closed++;
        conn_free(c);
    }
}

/* A send call failed (the connection is going away): close it now. With
 * received bytes still unreleased this resets it, and after ixora_close
 * no event comes for the handle, so the state can go. */
static void send_failed(ixora_io *io, struct conn *c, int err)
{
    fprintf(stderr, "echo_server: send: %s; closing the connection\n", strerror(-err));
    ixora_close(io, c->h);
    c->core->died++;
    conn_free(c);
}

/* ---- callbacks ------------------------------------------------------- */

static void on_start(ixora_io *io, void *user)
{
    struct server *srv = user;
    int r = ixora_listen(io, srv->port);
    if (r < 0) {
        fprintf(stderr, "echo_server: core %" PRIu32 ": listen on port %u: %s\n", ixora_core(io),
                (unsigned)srv->port, strerror(-r));
        core_of(io, srv)->failed = 1;
        ixora_stop(io);
    }
}

static void on_knock(ixora_io *io, void *user, ixora_handle h, uint32_t src_ip_be,
                     uint16_t src_port)
{
    struct server *srv = user;
    struct core_state *cs = core_of(io, srv);
    (void)src_ip_be;
    (void)src_port;
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        ixora_close(io, h); /* no memory: reject */
        return;
    }
    c->h = h;
    c->core = cs;
    if (ixora_accept(io, h, (uint64_t)(uintptr_t)c) < 0) {
        free(c);
        ixora_close(io, h);
        return;
    }
    c->next = cs->open;
    if (cs->open)
        cs->open->prev = c;
    cs->open = c;
    cs->connections++;
}

static void on_recv(ixora_io *io, void *user, ixora_handle h, uint64_t cookie,
                    const uint8_t *data, size_t len)
{
    struct server *srv = user;
    struct conn *c = (struct conn *)(uintptr_t)cookie;
    (void)h;
    if (q_push(c, data, len) < 0) {
        /* Out of memory: give up on this connection. Closing with
         * unreleased bytes resets it. */
        ixora_close(io, c->h);
        c->core->died++;
        conn_free(c);
        return;
    }
    int r = flush(io, srv, c);
    if (r < 0)
        send_failed(io, c, r);
}

static void on_sent(ixora_io *io, void *user, ixora_handle h, uint64_t cookie, size_t acked,
                    size_t window)
{
    struct server *srv = user;
    struct conn *c = (struct conn *)(uintptr_t)cookie;
    (void)h;
    (void)window;
    if (!srv->copy && acked > 0) {
        /* The echo of the oldest `acked` in-flight bytes arrived: their
         * receive frames can go back to the pool. */
        size_t n = acked < c->unacked ? acked : c->unacked;
        ixora_recv_done(io, c->h, n);
        c->unacked -= n;
    }
    int r = flush(io, srv, c);
    if (r < 0)
        send_failed(io, c, r);
    else
        maybe_close(io, c);
}

static void on_peer_closed(ixora_io *io, void *user, ixora_handle h, uint64_t cookie)
{
    struct conn *c = (struct conn *)(uintptr_t)cookie;
    (void)user;
    (void)h;
    c->peer_closed = 1;
    maybe_close(io, c);
}

static void on_dead(ixora_io *io, void *user, ixora_handle h, uint64_t cookie, int reason)
{
    struct conn *c = (struct conn *)(uintptr_t)cookie;
    (void)user;
    (void)reason;
    ixora_close(io, h);
    c->core->died++;
    conn_free(c);
}

/* ---- command line ---------------------------------------------------- */

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s --iface NAME --ip ADDR/PREFIX [options]\n"
            "  -b, --backend NAME   af_xdp (default), af_packet, tap, shm\n"
            "  -i, --iface NAME     interface, TAP name or shm socket path\n"
            "  -a, --ip ADDR/LEN    our address with prefix, e.g. 198.18.46.2/24\n"
            "  -g, --gateway ADDR   default gateway (none by default)\n"
            "  -p, --port N         TCP port to echo on (default 7)\n"
            "  -c, --cores N        cores, one NIC queue each (default 1)\n"
            "  -B, --batch N        most frames per cycle (default 64)\n"
            "  -P, --poll           spin when idle instead of sleeping\n"
            "  -C, --copy           echo with ixora_send_copy, not zero-copy ixora_sendv\n"
            "  -h, --help           this text\n"
            "Stops on SIGINT or SIGTERM and prints a summary line.\n",
            argv0);
}

/* Parse an unsigned number in [lo, hi]; exits on error. */
static unsigned long number(const char *what, const char *s, unsigned long lo, unsigned long hi)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "echo_server: %s: expected a number in %lu..%lu, got \"%s\"\n", what, lo,
                hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    static struct server srv; /* zeroed; big enough not to live on the stack */
    ixora_config cfg = {0};
    cfg.backend = "af_xdp";
    srv.port = 7;

    static const struct option opts[] = {
        {"backend", required_argument, NULL, 'b'}, {"iface", required_argument, NULL, 'i'},
        {"ip", required_argument, NULL, 'a'},      {"gateway", required_argument, NULL, 'g'},
        {"port", required_argument, NULL, 'p'},    {"cores", required_argument, NULL, 'c'},
        {"batch", required_argument, NULL, 'B'},   {"poll", no_argument, NULL, 'P'},
        {"copy", no_argument, NULL, 'C'},          {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "b:i:a:g:p:c:B:PCh", opts, NULL)) != -1) {
        switch (o) {
        case 'b': cfg.backend = optarg; break;
        case 'i': cfg.iface = optarg; break;
        case 'a': cfg.ip = optarg; break;
        case 'g': cfg.gateway = optarg; break;
        case 'p': srv.port = (uint16_t)number("--port", optarg, 1, 65535); break;
        case 'c': cfg.cores = (uint32_t)number("--cores", optarg, 1, MAX_CORES); break;
        case 'B': cfg.batch = (uint32_t)number("--batch", optarg, 1, 4096); break;
        case 'P': cfg.poll = 1; break;
        case 'C': srv.copy = 1; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (optind != argc || cfg.iface == NULL || cfg.ip == NULL) {
        usage(stderr, argv[0]);
        return 2;
    }

    /* SIGINT / SIGTERM ask ixora_run to return (it checks the flag every
     * few milliseconds). SA_RESTART: interrupted system calls resume. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("echo_server: sigaction");
        return 1;
    }

    ixora_callbacks cb = {
        .user = &srv,
        .start = on_start,
        .knock = on_knock,
        .recv = on_recv,
        .sent = on_sent,
        .peer_closed = on_peer_closed,
        .dead = on_dead,
    };
    fprintf(stderr, "echo_server: %s on %s, %s, port %u, %u core(s), %s echo\n", cfg.backend,
            cfg.iface, cfg.ip, (unsigned)srv.port, cfg.cores ? cfg.cores : 1,
            srv.copy ? "copy" : "zero-copy");
    int r = ixora_run(&cfg, &cb, (const volatile int *)&stop_requested);

    /* ixora_run has joined the cores: their counters are ours to read. The
     * connections still open went with the dataplane; free their state
     * (their received bytes are gone, so the pieces are not touched). */
    uint64_t conns = 0, bytes = 0, closed = 0, died = 0;
    int failed = 0;
    for (int i = 0; i < MAX_CORES; i++) {
        struct core_state *cs = &srv.cores[i];
        conns += cs->connections;
        bytes += cs->bytes;
        closed += cs->closed;
        died += cs->died;
        failed |= cs->failed;
        while (cs->open)
            conn_free(cs->open);
    }
    printf("echo_server: %" PRIu64 " connections, %" PRIu64 " bytes echoed, %" PRIu64
           " closed, %" PRIu64 " died\n",
           conns, bytes, closed, died);
    if (r < 0) {
        fprintf(stderr, "echo_server: ixora_run: %s\n", strerror(-r));
        return 1;
    }
    return failed ? 1 : 0;
}
