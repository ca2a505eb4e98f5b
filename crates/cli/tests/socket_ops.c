/* Differential test of the socket calls: a random sequence of calls on one
 * TCP connection, drawn from a seed, printing one line per call with what
 * it returned (values, errno names, flags, bytes checked). The sockets
 * test runs the same seeds on the Linux stack and under `ixora run` and
 * requires the two outputs to be identical, so any call whose result
 * differs from Linux's — in any order of calls, on any duplicate of the
 * descriptor, blocking or not — shows as a differing line.
 *
 *   socket_ops ECHO_IP ECHO_PORT SEED OPS [udp]
 *
 * ECHO_IP:ECHO_PORT is a byte echo server (socat ... EXEC:cat) that
 * closes after the client's shutdown(SHUT_WR); with `udp`, a datagram
 * echo (each datagram sent back to its source, in order), and the calls
 * are those of one UDP socket: sends connected and not, receives into
 * short buffers, peeks, MSG_TRUNC, connect and disconnect, bind, FIONREAD.
 * Every line is a result the two stacks must agree on: where the timing of arrivals could make them
 * differ (how much a non-blocking read returns), the program waits or
 * loops until the result is settled and prints only that. Exits 0 when
 * the sequence ran (agreement is the test's to judge), 1 when the program
 * itself could not go on (connect failed, a wait timed out).
 */
#include "ops_common.h"

/* The byte at offset `k` of the stream the program sends (and gets back). */
static unsigned char pat(uint64_t k) { return (unsigned char)((k * 131 + (k >> 9)) ^ 0x5a); }

/* Descriptors open on the connection (dups of each other): ops use fds[cur]. */
static int fds[8], nfds, cur;
static uint64_t sent, got; /* stream offsets written / read back */
static int ep = -1;        /* an epoll set, made on first use */
static char in_ep[1024];   /* the descriptors the set watches */
static char et_ep[1024];   /* ... edge-triggered */
static int udp_mode;       /* the calls are those of a UDP socket */
static int u_out;          /* datagrams sent whose echo is not yet taken */
static int wr_shut;

static int fd(void) { return fds[cur]; }

static int nonblocking(void) { return (fcntl(fd(), F_GETFL) & O_NONBLOCK) != 0; }

/* Wait until the connection is readable (or writable): 10 s at most. */
static void wait_for(short ev) {
    struct pollfd p = {.fd = fd(), .events = ev};
    int r = poll(&p, 1, 10000);
    if (r != 1) {
        errno = r == 0 ? ETIMEDOUT : errno;
        die("wait");
    }
}

/* After a call that moved `r` bytes: 1 if it would have blocked (the
 * readiness `ev` is waited for, and the caller tries again), 0 if it
 * moved some; anything else ends the program. */
static int again(ssize_t r, short ev, const char *what) {
    if (r < 0 && errno == EAGAIN) {
        wait_for(ev);
        return 1;
    }
    if (r <= 0)
        die(what);
    return 0;
}

/* A pipe for the splice calls (made on first use): what a splice moves
 * from the connection is read back from it, what one moves into the
 * connection is written into it first. */
static int spl[2] = {-1, -1};

static void splice_pipe(void) {
    if (spl[0] < 0 && pipe(spl) != 0)
        die("pipe");
}

static void op_write(void) {
    /* At most 48 KiB outstanding: the echo's path holds that much without
     * a reader, so a blocking write never waits for our reads. */
    uint64_t room = 48 * 1024 - (sent - got);
    if (room == 0 || wr_shut)
        return;
    size_t n = 1 + rnd(room < 20000 ? (unsigned)room : 20000);
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = pat(sent + i);
    const char *how[] = {"write", "send", "sendto", "writev", "sendmsg", "splice"};
    int k = rnd(6);
    size_t in_pipe = 0; /* (splice) the bytes from `off` already in the pipe */
    /* Where the vectored calls split what is left (drawn once: partial
     * writes must not change what the generator draws next). */
    unsigned fa = rnd(1000), fb = rnd(1000);
    size_t off = 0;
    while (off < n) {
        ssize_t r;
        size_t len = n - off;
        unsigned char *p = buf + off;
        struct iovec iov[3];
        int niov = 1;
        iov[0] = (struct iovec){p, len};
        if ((k == 3 || k == 4) && len >= 3) {
            size_t a = 1 + (len - 2) * fa / 1000, b = a + (len - a) * fb / 1000;
            iov[0] = (struct iovec){p, a};
            iov[1] = (struct iovec){p + a, b - a};
            iov[2] = (struct iovec){p + b, len - b};
            niov = 3;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = niov};
        switch (k) {
        case 0: r = write(fd(), p, len); break;
        case 1: r = send(fd(), p, len, MSG_NOSIGNAL); break;
        case 2: r = sendto(fd(), p, len, 0, NULL, 0); break;
        case 3: r = writev(fd(), iov, niov); break;
        case 4: r = sendmsg(fd(), &m, 0); break;
        default:
            splice_pipe();
            if (in_pipe == 0) {
                if (write(spl[1], p, len) != (ssize_t)len)
                    die("write pipe");
                in_pipe = len;
            }
            r = splice(spl[0], NULL, fd(), NULL, in_pipe, 0);
            break;
        }
        if (again(r, POLLOUT, how[k]))
            continue;
        off += (size_t)r;
        in_pipe -= k == 5 ? (size_t)r : 0;
    }
    sent += n;
    free(buf);
    say("%s %zu done", how[k], n);
}

/* Read exactly `n` bytes back (looping and waiting as needed) by one of
 * the read calls; check each against the pattern. */
static void op_read(void) {
    uint64_t out = sent - got;
    if (out == 0)
        return;
    size_t n = 1 + rnd(out < 30000 ? (unsigned)out : 30000);
    unsigned char *buf = malloc(n);
    const char *how[] = {"read", "recv", "recv_waitall", "recvfrom", "readv", "recvmsg", "splice"};
    int k = rnd(7);
    size_t off = 0;
    while (off < n) {
        ssize_t r;
        size_t len = n - off;
        unsigned char *p = buf + off;
        struct iovec iov[2] = {{p, len / 2}, {p + len / 2, len - len / 2}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        switch (k) {
        case 0: r = read(fd(), p, len); break;
        case 1: r = recv(fd(), p, len, 0); break;
        case 2: r = recv(fd(), p, len, MSG_WAITALL); break;
        case 3: r = recvfrom(fd(), p, len, 0, (struct sockaddr *)&from, &fl); break;
        case 4: r = readv(fd(), iov, 2); break;
        case 5: r = recvmsg(fd(), &m, 0); break;
        default:
            /* (At most what the pipe holds: it is read back at once.) */
            splice_pipe();
            r = splice(fd(), NULL, spl[1], NULL, len < 65536 ? len : 65536, SPLICE_F_MOVE);
            if (r > 0) {
                for (ssize_t at = 0, k2; at < r; at += k2)
                    if ((k2 = read(spl[0], p + at, (size_t)(r - at))) <= 0)
                        die("read pipe");
            }
            break;
        }
        if (again(r, POLLIN, how[k]))
            continue;
        if (k == 2 && !nonblocking() && (size_t)r != len) {
            say("recv_waitall short %zd of %zu", r, len);
        }
        off += (size_t)r;
    }
    size_t bad = n;
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pat(got + i)) {
            bad = i;
            break;
        }
    got += n;
    free(buf);
    if (bad == n)
        say("%s %zu intact", how[k], n);
    else
        say("%s %zu CORRUPT at %zu", how[k], n, bad);
}

/* Once bytes are readable: peek one, and FIONREAD says at least one. */
static void op_peek(void) {
    if (sent == got)
        return;
    wait_for(POLLIN);
    unsigned char c = 0;
    ssize_t r = recv(fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    int avail = -1;
    int fr = ioctl(fd(), FIONREAD, &avail);
    say("peek %s byte_ok %d fionread %d atleast1 %d", res(r), r == 1 && c == pat(got), fr,
        avail >= 1);
}

/* Readiness by poll, select, ppoll: settled when nothing is outstanding
 * (all of it came back, so all of it was acknowledged), or once data was
 * waited for; writability only when settled (a small send buffer may
 * still hold unacknowledged bytes otherwise). */
static void op_ready(void) {
    int settled = sent == got;
    if (!settled)
        wait_for(POLLIN);
    short mask = settled ? (short)~0 : (short)~(POLLOUT | POLLWRNORM);
    int k = rnd(3);
    if (k == 0) {
        struct pollfd p = {.fd = fd(), .events = POLLIN | POLLOUT | POLLRDHUP};
        int r = poll(&p, 1, 0);
        say("poll %d revents %#x", r, p.revents & mask);
    } else if (k == 1) {
        struct pollfd p = {.fd = fd(), .events = POLLIN | POLLOUT};
        struct timespec t = {0, 0};
        int r = ppoll(&p, 1, &t, NULL);
        say("ppoll %d revents %#x", r, p.revents & mask);
    } else {
        fd_set r, w;
        FD_ZERO(&r);
        FD_ZERO(&w);
        FD_SET(fd(), &r);
        FD_SET(fd(), &w);
        struct timeval t = {0, 0};
        int n = select(fd() + 1, &r, &w, NULL, &t);
        say("select %d r %d w %d", settled ? n : -2, FD_ISSET(fd(), &r) != 0,
            settled ? FD_ISSET(fd(), &w) != 0 : -2);
    }
}

/* Wait (10 s at most) until every byte sent has come back into the
 * receive queue. */
static void settle_arrivals(void) {
    for (int i = 0; i < 10000; i++) {
        int n = -1;
        if (ioctl(fd(), FIONREAD, &n) == 0 && (uint64_t)n >= sent - got)
            return;
        usleep(1000);
    }
    errno = ETIMEDOUT;
    die("settle");
}

static void op_epoll(void) {
    if (ep < 0) {
        ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0)
            die("epoll_create1");
    }
    /* (Edge-triggered interest in reading only: Linux wakes an item on
     * each arrival, and on write space only after a write found the
     * buffer full — a matter of timing, so no EPOLLOUT with EPOLLET.) */
    /* EPOLLEXCLUSIVE: at ADD only, and not with EPOLLRDHUP (EINVAL); an
     * exclusive item cannot be modified (EINVAL). */
    unsigned evs[] = {EPOLLIN,
                      EPOLLOUT,
                      EPOLLIN | EPOLLOUT,
                      EPOLLIN | EPOLLRDHUP,
                      EPOLLIN | EPOLLOUT | EPOLLONESHOT,
                      EPOLLIN | EPOLLOUT | EPOLLEXCLUSIVE,
                      EPOLLIN | EPOLLRDHUP | EPOLLEXCLUSIVE,
                      EPOLLIN | EPOLLET,
                      EPOLLIN | EPOLLRDHUP | EPOLLET,
                      EPOLLIN | EPOLLET | EPOLLONESHOT,
                      EPOLLIN | EPOLLET | EPOLLEXCLUSIVE};
    /* (UDP: level-triggered only — nothing says when every datagram
     * is back without reading it.) */
    struct epoll_event e = {.events = evs[rnd(udp_mode ? 7 : 11)], .data.u64 = 77};
    int k = rnd(4), r;
    switch (k) {
    case 0:
        r = epoll_ctl(ep, EPOLL_CTL_ADD, fd(), &e);
        if (r == 0)
            in_ep[fd()] = 1, et_ep[fd()] = (e.events & EPOLLET) != 0;
        say("epoll_ctl add %#x %s", e.events, res(r));
        break;
    case 1:
        r = epoll_ctl(ep, EPOLL_CTL_MOD, fd(), &e);
        if (r == 0)
            et_ep[fd()] = (e.events & EPOLLET) != 0;
        say("epoll_ctl mod %#x %s", e.events, res(r));
        break;
    case 2:
        r = epoll_ctl(ep, EPOLL_CTL_DEL, fd(), NULL);
        if (r == 0)
            in_ep[fd()] = 0, et_ep[fd()] = 0;
        say("epoll_ctl del %s", res(r));
        break;
    default: {
        /* Settled, or readable once waited for: then only whether the
         * read readiness came (writability may not have settled). With
         * an edge-triggered item, settled always — every byte sent back
         * in the receive queue — so that whether an arrival came since
         * the last wait does not depend on timing. */
        int et = 0;
        for (int i = 0; i < nfds; i++)
            et |= in_ep[fds[i]] && et_ep[fds[i]];
        if (et)
            settle_arrivals();
        int settled = (udp_mode ? u_out == 0 : sent == got) || et;
        if (!settled)
            wait_for(POLLIN);
        /* Room for every item (one per descriptor, 8 at most): when
         * more are ready than fit, which ones wait for the next call is
         * each stack's own order (Linux's: the order they woke in). */
        struct epoll_event out[16];
        memset(out, 0, sizeof out);
        r = epoll_wait(ep, out, 16, 0);
        /* (In no particular order: the union of what was reported.) */
        unsigned all = 0, in = 0;
        for (int i = 0; i < r; i++) {
            all |= out[i].events;
            in |= out[i].data.u64 == 77 && (out[i].events & EPOLLIN) != 0;
        }
        if (settled)
            say("epoll_wait %s events %#x", res(r), all);
        else
            say("epoll_wait in %d", in);
    }
    }
}

static void op_flags(void) {
    int k = rnd(3), r;
    if (k == 0) {
        int fl = fcntl(fd(), F_GETFL);
        r = fcntl(fd(), F_SETFL, fl ^ O_NONBLOCK);
        say("fcntl setfl %s nonblock %d", res(r), nonblocking());
    } else if (k == 1) {
        int on = rnd(2);
        r = ioctl(fd(), FIONBIO, &on);
        say("fionbio %d %s nonblock %d", on, res(r), nonblocking());
    } else {
        int fl = fcntl(fd(), F_GETFL), fdf = fcntl(fd(), F_GETFD);
        say("getfl rdwr %d nonblock %d getfd %d", (fl & O_ACCMODE) == O_RDWR,
            (fl & O_NONBLOCK) != 0, fdf);
    }
}

struct opt {
    int level, name;
    const char *label;
    int vals[4];
};
static const struct opt opts[] = {
    {IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", {0, 1, 1, 0}},
    {SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", {1, 0, 1, 1}},
    {SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF", {1000, 200000, 100000, 4096}},
    {SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF", {1000, 65536, 100000, 9000}},
    {IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", {1, 60, 7200, 0}},
    {IPPROTO_TCP, TCP_KEEPINTVL, "TCP_KEEPINTVL", {1, 75, 32767, 40000}},
    {IPPROTO_TCP, TCP_KEEPCNT, "TCP_KEEPCNT", {1, 9, 127, 128}},
    {SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR", {1, 0, 1, 0}},
};

/* Options whose value before the program sets one is no fixed answer:
 * the buffers (bit 0 receive, 1 send), which Linux auto-tunes, and
 * TCP_NODELAY (bit 2), on by default on Ixora, a departure of its own
 * (docs/ARCHITECTURE.md). */
static int bufs_set;

static void op_sockopt(void) {
    const struct opt *o = &opts[rnd(sizeof opts / sizeof opts[0])];
    int k = rnd(5);
    int v = o->vals[rnd(4)], got_v = -1;
    socklen_t l = sizeof got_v;
    int buf = o->name == SO_RCVBUF ? 1 : o->name == SO_SNDBUF ? 2 : o->name == TCP_NODELAY ? 4 : 0;
    if (k <= 2) {
        int r = setsockopt(fd(), o->level, o->name, &v, sizeof v);
        if (r == 0)
            bufs_set |= buf;
        int g = getsockopt(fd(), o->level, o->name, &got_v, &l);
        say("setsockopt %s %d %s get %d %d len %u", o->label, v, res(r), g, got_v, l);
        if (o->name == SO_RCVBUF && v < 100000) {
            /* The clamp was checked; now a buffer that holds what is
             * outstanding again. Linux never shrinks a window it has
             * offered, so a small buffer set mid-stream takes in less than
             * the echo may send: the rest is dropped (the segments' memory,
             * not their bytes, fills it) and comes again only at the echo's
             * backed-off retransmission timer: Linux's own run then stalls
             * for seconds, past its waits (seed 1 did, at 4096). And
             * 48 KiB outstanding take up to 140 KB of Linux's buffer over
             * loopback (2.85 bytes of memory per byte, seen): 100000 (a
             * 200,000-byte buffer) holds them unread; 65536 did not (seed
             * 780 stalled settling its epoll wait). */
            v = 100000;
            r = setsockopt(fd(), o->level, o->name, &v, sizeof v);
            g = getsockopt(fd(), o->level, o->name, &got_v, &l);
            say("setsockopt %s %d %s get %d %d len %u", o->label, v, res(r), g, got_v, l);
        }
    } else if (k == 3) {
        /* An option length too short for an int. */
        char c = 1;
        int r = setsockopt(fd(), o->level, o->name, &c, 1);
        say("setsockopt %s short %s", o->label, res(r));
    } else {
        int g = getsockopt(fd(), o->level, o->name, &got_v, &l);
        if (buf & ~bufs_set)
            got_v = -2;
        say("getsockopt %s %d %d len %u", o->label, g, got_v, l);
    }
}

/* Discard bytes with MSG_TRUNC (TCP drops them, no buffer needed). */
static void op_discard(void) {
    uint64_t out = sent - got;
    if (out == 0)
        return;
    size_t n = 1 + rnd(out < 20000 ? (unsigned)out : 20000), off = 0;
    while (off < n) {
        ssize_t r = recv(fd(), NULL, n - off, MSG_TRUNC | MSG_WAITALL);
        if (again(r, POLLIN, "recv MSG_TRUNC"))
            continue;
        off += (size_t)r;
    }
    got += n;
    say("discard %zu", n);
}

static void op_misc(void) {
    int k = rnd(12), r, v = -1;
    socklen_t l = sizeof v;
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    switch (k) {
    case 0:
        r = getsockopt(fd(), SOL_SOCKET, SO_ERROR, &v, &l);
        say("so_error %d %d", r, v);
        break;
    case 1:
        r = getsockopt(fd(), SOL_SOCKET, SO_TYPE, &v, &l);
        say("so_type %d %d", r, v);
        break;
    case 2:
        r = getsockopt(fd(), SOL_SOCKET, 9999, &v, &l);
        say("getsockopt unknown %s", res(r));
        break;
    case 3:
        memset(&a, 0, sizeof a);
        r = getpeername(fd(), (struct sockaddr *)&a, &al);
        say("getpeername %d family %d port %d len %u", r, a.sin_family, ntohs(a.sin_port), al);
        break;
    case 4:
        memset(&a, 0, sizeof a);
        r = getsockname(fd(), (struct sockaddr *)&a, &al);
        say("getsockname %d family %d port_set %d len %u", r, a.sin_family, a.sin_port != 0, al);
        break;
    case 5: {
        struct tcp_info ti;
        socklen_t tl = sizeof ti;
        memset(&ti, 0, sizeof ti);
        r = getsockopt(fd(), IPPROTO_TCP, TCP_INFO, &ti, &tl);
        say("tcp_info %d state %d", r, ti.tcpi_state);
        break;
    }
    case 6:
        /* Calls a connected socket refuses. */
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        r = bind(fd(), (struct sockaddr *)&a, sizeof a);
        say("bind again %s", res(r));
        r = listen(fd(), 5);
        say("listen connected %s", res(r));
        r = accept(fd(), NULL, NULL);
        say("accept connected %s", res(r));
        break;
    case 7: {
        char c;
        r = recv(fd(), &c, 1, MSG_OOB | MSG_DONTWAIT);
        say("recv oob %s", res(r));
        r = send(fd(), &c, 0, MSG_NOSIGNAL);
        say("send empty %s", res(r));
        r = read(fd(), &c, 0);
        say("read empty %s", res(r));
        break;
    }
    case 8: {
        int on = 0;
        r = ioctl(fd(), FIONREAD, &on);
        say("fionread when settled %d %d", r, sent == got ? on : -2);
        break;
    }
    case 9: {
        /* Options Linux does not have, values it refuses, defaults. */
        v = 1;
        r = setsockopt(fd(), SOL_SOCKET, 9999, &v, sizeof v);
        say("setsockopt unknown %s", res(r));
        r = setsockopt(fd(), IPPROTO_TCP, 9999, &v, sizeof v);
        say("setsockopt tcp unknown %s", res(r));
        v = 300;
        r = setsockopt(fd(), IPPROTO_IP, IP_TTL, &v, sizeof v);
        say("setsockopt IP_TTL 300 %s", res(r));
        break;
    }
    case 10: {
        int ttl = -1, mss = -1, prio = -1;
        socklen_t tl = sizeof ttl, ml = sizeof mss, pl = sizeof prio;
        int a = getsockopt(fd(), IPPROTO_IP, IP_TTL, &ttl, &tl);
        int b = getsockopt(fd(), IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
        int c = getsockopt(fd(), SOL_SOCKET, SO_PRIORITY, &prio, &pl);
        /* (The MSS is the path's: loopback's or the veth's.) */
        say("defaults ttl %d %d mss %d %d prio %d %d", a, ttl, b, mss > 500, c, prio);
        v = 1 + rnd(255);
        r = setsockopt(fd(), IPPROTO_IP, IP_TTL, &v, sizeof v);
        a = getsockopt(fd(), IPPROTO_IP, IP_TTL, &ttl, &tl);
        say("setsockopt IP_TTL %d %s get %d %d", v, res(r), a, ttl);
        break;
    }
    default: {
        char c;
        if (sent != got)
            return;
        r = recv(fd(), &c, 1, MSG_DONTWAIT);
        say("recv dontwait settled %s", res(r));
        break;
    }
    }
}

/* Duplicates: make one (and use it from now on), or close the one in use. */
static void op_dup(void) {
    int k = rnd(5), r;
    if (k == 4 && nfds > 1) {
        int old = fd();
        if (in_ep[old]) {
            /* Taken out of the set first, as careful programs do: Linux
             * keeps a closed descriptor's interest while a duplicate
             * keeps the socket open (and reports it under the closed
             * number), Ixora drops it at the close (a departure,
             * docs/ARCHITECTURE.md). */
            r = epoll_ctl(ep, EPOLL_CTL_DEL, old, NULL);
            in_ep[old] = 0, et_ep[old] = 0;
            say("epoll_ctl del before close %s", res(r));
        }
        r = close(old);
        fds[cur] = fds[--nfds];
        cur = rnd(nfds);
        say("close dup %d", r);
        r = close(old);
        say("close again %s", res(r));
        return;
    }
    if (nfds == 8)
        return;
    int n;
    switch (k) {
    case 0: n = dup(fd()); break;
    case 1: n = fcntl(fd(), F_DUPFD_CLOEXEC, 100); break;
    case 2: n = dup3(fd(), 300 + step % 700, O_CLOEXEC); break; /* (a free number) */
    default: n = fcntl(fd(), F_DUPFD, 0); break;
    }
    if (n < 0)
        die("dup");
    fds[nfds] = n;
    cur = nfds++;
    say("dup kind %d cloexec %d nonblock %d", k, fcntl(n, F_GETFD), nonblocking());
}

/* ---- UDP: datagrams to an echo (a reply per datagram, in order) ---- */

static struct sockaddr_in echo_sa;
static int u_lens[64];   /* their lengths, oldest first */
static int u_connected;  /* connected to the echo */
static unsigned u_seq;   /* datagrams sent so far: each one's first byte */

static void u_push(int len) {
    u_lens[u_out++] = len;
}

static int u_pop(void) {
    int l = u_lens[0];
    memmove(u_lens, u_lens + 1, sizeof(int) * (size_t)--u_out);
    return l;
}

static void u_send(void) {
    if (u_out == 16)
        return;
    int len = (int)rnd(1400);
    unsigned char buf[1400];
    memset(buf, 0, sizeof buf);
    if (len > 0)
        buf[0] = (unsigned char)u_seq;
    for (int i = 1; i < len; i++)
        buf[i] = pat((uint64_t)u_seq * 7 + (uint64_t)i);
    int k = rnd(3);
    ssize_t r;
    if (k == 0 || !u_connected)
        r = sendto(fd(), buf, (size_t)len, 0, (struct sockaddr *)&echo_sa, sizeof echo_sa);
    else if (k == 1)
        r = send(fd(), buf, (size_t)len, 0);
    else {
        struct iovec iov[2] = {{buf, (size_t)len / 2}, {buf + len / 2, (size_t)(len - len / 2)}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        r = sendmsg(fd(), &m, 0);
    }
    say("udp send %d by %d %s", len, k == 0 || !u_connected ? 0 : k, res(r));
    if (r == len) {
        u_push(len);
        u_seq++;
    }
}

/* Take the oldest echo (waited for) by one of the receive calls, into a
 * buffer that may be short: the length told, MSG_TRUNC, the bytes. */
static void u_recv(void) {
    if (u_out == 0)
        return;
    wait_for(POLLIN);
    int want = u_lens[0], k = rnd(4), peek = rnd(4) == 0;
    size_t cap = rnd(3) == 0 ? rnd(want + 1) : 1500;
    unsigned char buf[1500];
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    memset(&from, 0, sizeof from);
    int flags = (peek ? MSG_PEEK : 0) | (rnd(3) == 0 ? MSG_TRUNC : 0);
    ssize_t r;
    int mflags = -1;
    if (k == 0)
        r = recv(fd(), buf, cap, flags);
    else if (k == 1)
        r = recvfrom(fd(), buf, cap, flags, (struct sockaddr *)&from, &fl);
    else if (k == 2)
        r = read(fd(), buf, cap), flags = 0, peek = 0;
    else {
        struct iovec iov = {buf, cap};
        struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov,
                           .msg_iovlen = 1};
        r = recvmsg(fd(), &m, flags);
        mflags = m.msg_flags & (MSG_TRUNC | MSG_CTRUNC);
        fl = m.msg_namelen;
    }
    int first_ok = r <= 0 || cap == 0 || buf[0] == (unsigned char)(u_seq - (unsigned)u_out);
    say("udp recv by %d cap %zu flags %#x %s msg_flags %d from_port %d first_ok %d", k, cap, flags,
        res(r), mflags, (k == 1 || k == 3) ? ntohs(from.sin_port) : -1, first_ok);
    /* (A read of nothing takes nothing; a recv of nothing takes it.) */
    if (r >= 0 && !peek && !(k == 2 && cap == 0))
        u_pop();
}

static void u_misc(void) {
    int k = rnd(10), r, v = -1;
    socklen_t l = sizeof v;
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    switch (k) {
    case 0:
        if (u_out)
            return; /* (a connect drops datagrams from elsewhere: none wait) */
        r = connect(fd(), (struct sockaddr *)&echo_sa, sizeof echo_sa);
        u_connected = r == 0;
        say("udp connect %s", res(r));
        break;
    case 1: {
        if (u_out)
            return;
        struct sockaddr un = {.sa_family = AF_UNSPEC};
        r = connect(fd(), &un, sizeof un);
        if (r == 0)
            u_connected = 0;
        say("udp disconnect %s", res(r));
        break;
    }
    case 2:
        memset(&a, 0, sizeof a);
        r = getpeername(fd(), (struct sockaddr *)&a, &al);
        say("udp getpeername %s port %d", res(r), ntohs(a.sin_port));
        break;
    case 3:
        memset(&a, 0, sizeof a);
        r = getsockname(fd(), (struct sockaddr *)&a, &al);
        say("udp getsockname %s family %d port_set %d", res(r), a.sin_family, a.sin_port != 0);
        break;
    case 4: {
        if (u_out)
            wait_for(POLLIN);
        int n = -1;
        r = ioctl(fd(), FIONREAD, &n);
        say("udp fionread %s %d", res(r), u_out ? n : -2);
        break;
    }
    case 5: {
        struct pollfd p = {.fd = fd(), .events = POLLIN | POLLOUT};
        if (u_out)
            wait_for(POLLIN);
        r = poll(&p, 1, 0);
        say("udp poll %d revents %#x", r, p.revents);
        break;
    }
    case 6: {
        char c;
        r = send(fd(), &c, 1, MSG_OOB);
        say("udp send oob %s", res(r));
        r = (int)recv(fd(), &c, 1, MSG_DONTWAIT | (u_out ? MSG_PEEK : 0));
        say("udp recv dontwait %s", u_out ? "(waiting)" : res(r));
        break;
    }
    case 7: {
        int opts2[] = {SO_BROADCAST, SO_REUSEADDR, SO_KEEPALIVE, SO_PRIORITY};
        int o = opts2[rnd(4)], val = (int)rnd(3);
        r = setsockopt(fd(), SOL_SOCKET, o, &val, sizeof val);
        int g = getsockopt(fd(), SOL_SOCKET, o, &v, &l);
        say("udp setsockopt %d %d %s get %d %d", o, val, res(r), g, v);
        r = setsockopt(fd(), IPPROTO_TCP, TCP_NODELAY, &val, sizeof val);
        say("udp tcp option %s", res(r));
        break;
    }
    case 8: {
        /* Allowed while unbound: before the first send, or after a
         * disconnect gave up a port the program did not choose. */
        struct sockaddr_in any = {.sin_family = AF_INET};
        r = bind(fd(), (struct sockaddr *)&any, sizeof any);
        say("udp bind any %s", res(r));
        break;
    }
    default:
        r = getsockopt(fd(), SOL_SOCKET, SO_TYPE, &v, &l);
        say("udp so_type %d %d", r, v);
        r = listen(fd(), 1);
        say("udp listen %s", res(r));
        break;
    }
}

static int main_udp(int ops) {
    udp_mode = 1;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        die("socket");
    fds[nfds++] = s;
    say("udp socket");
    for (step = 1; step <= ops; step++) {
        switch (rnd(10)) {
        case 0: case 1: case 2: u_send(); break;
        case 3: case 4: case 5: u_recv(); break;
        case 6: op_flags(); break;
        case 7: if (u_out == 0) op_ready(); break;
        case 8: if (rnd(2)) u_misc(); else op_epoll(); break;
        default: op_dup(); break;
        }
    }
    while (u_out)
        u_recv();
    for (int i = 0; i < nfds; i++)
        say("close %d", close(fds[i]));
    say("end sent %u", u_seq);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5 && !(argc == 6 && strcmp(argv[5], "udp") == 0)) {
        fprintf(stderr, "usage: socket_ops ECHO_IP ECHO_PORT SEED OPS [udp]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rng = strtoull(argv[3], NULL, 10) * 0x9E3779B97F4A7C15ULL + 1;
    int ops = atoi(argv[4]);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &sa.sin_addr);
    if (argc == 6) {
        echo_sa = sa;
        return main_udp(ops);
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("connect");
    fds[nfds++] = s;
    say("connected");
    for (step = 1; step <= ops; step++) {
        switch (rnd(13)) {
        case 0: case 1: case 2: op_write(); break;
        case 3: case 4: op_read(); break;
        case 12: op_discard(); break;
        case 5: op_peek(); break;
        case 6: op_ready(); break;
        case 7: op_epoll(); break;
        case 8: op_flags(); break;
        case 9: op_sockopt(); break;
        case 10: op_misc(); break;
        default: op_dup(); break;
        }
    }
    /* The end: half-close, read the rest back, then end of file. */
    int r = shutdown(fd(), SHUT_WR);
    wr_shut = 1;
    say("shutdown wr %s", res(r));
    r = send(fd(), "x", 1, MSG_NOSIGNAL);
    say("send after shutdown %s", res(r));
    while (got < sent)
        op_read();
    char c;
    for (;;) {
        ssize_t n = recv(fd(), &c, 1, 0);
        if (n < 0 && errno == EAGAIN) {
            wait_for(POLLIN);
            continue;
        }
        say("eof %s", res(n));
        break;
    }
    struct pollfd p = {.fd = fd(), .events = POLLIN | POLLOUT | POLLRDHUP};
    r = poll(&p, 1, 0);
    say("poll at eof %d revents %#x", r, p.revents);
    for (int i = 0; i < nfds; i++)
        say("close %d", close(fds[i]));
    say("close closed %s", res(close(fds[0])));
    if (ep >= 0)
        close(ep);
    say("end sent %llu", (unsigned long long)sent);
    return 0;
}
