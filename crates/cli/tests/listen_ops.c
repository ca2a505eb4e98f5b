/* Differential test of the calls of a listening socket and of the
 * connections it accepts: a random sequence of calls drawn from a seed,
 * one line per call with what it returned. The program listens on
 * SELF_IP:PORT and connects to itself, so both ends of every connection
 * are its own; the sockets test runs the same seeds on the Linux stack
 * and under `ixora run` (where both ends are Ixora's) and requires the two
 * outputs to be identical.
 *
 *   listen_ops SELF_IP PORT SEED OPS
 *
 * The calls: connect (blocking and not), accept and accept4 with every
 * flag and address length, data both ways before and after the accept,
 * half-closes and end of file, close with and without unread data (a
 * reset), SO_LINGER 0, what a peer reads after a reset, readiness of the
 * listener by poll and epoll (level- or edge-triggered, EPOLLEXCLUSIVE
 * or not), its TCP_INFO (the queue, the backlog), a second listen, the
 * listener's non-blocking flag, addresses (getpeername too once both FINs are
 * through), TCP_INFO states, calls that fail on a
 * listener or on a connected socket, a second bind to the port, and at
 * the end the listener closed with connections still in its queue. A
 * line is printed only where the timing of arrivals cannot change it: the
 * program waits until a result is settled (a connection queued, bytes
 * arrived, a reset come) and prints that. Exits 0 when the sequence ran,
 * 1 when the program itself could not go on (a wait timed out).
 */
#include "ops_common.h"

/* Wait (10 s at most) for `ev` on `fd`; the revents. */
static short wait_on(int fd, short ev) {
    struct pollfd p = {.fd = fd, .events = ev};
    int r = poll(&p, 1, 10000);
    if (r != 1) {
        errno = r == 0 ? ETIMEDOUT : errno;
        die("wait");
    }
    return p.revents;
}

/* One end of a connection: its descriptor, the bytes it sent and read. */
struct end {
    int fd;
    uint64_t sent, got;
    int shut_wr, closed, done; /* done: read its end of file or error */
};

/* A connection: end 0 the client, end 1 the accepted one. */
struct pair {
    struct end e[2];
    int accepted, reset; /* reset: an end closed with a reset */
    int closer;          /* the end that closed first, or -1 */
    int in_progress;     /* its connect said EINPROGRESS, no connect since */
    unsigned short cport;
};

#define MAXP 16
static struct pair P[MAXP];
static int np;
static int pend[MAXP], npend; /* connected, not yet accepted, in order */
static int L, backlog, ep = -1, in_ep;
/* The listener's epoll item is edge-triggered; a connection was queued
 * since its last report (an edge to come). */
static int l_et, l_edge;
static struct sockaddr_in self;

/* The byte at offset `k` of the stream end `side` of pair `i` sends. */
static unsigned char pat(int i, int side, uint64_t k) {
    uint64_t x = k + (uint64_t)i * 7919 + (uint64_t)side * 104729;
    return (unsigned char)((x * 131 + (x >> 9)) ^ 0x5a);
}

static int nonblocking(int fd) { return (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

/* Bytes sent by end `side` of `p` not yet read by the other end. */
static uint64_t outstanding(struct pair *p, int side) {
    return p->e[side].sent - p->e[1 - side].got;
}

/* Whether end `side` of `p` may send: open, not shut, and its peer open
 * (once one end has closed, a send races the peer's reset). */
static int can_send(struct pair *p, int side) {
    return (side == 0 || p->accepted) && !p->e[side].closed && !p->e[side].shut_wr &&
           p->closer < 0;
}

static void op_connect(void) {
    /* A new pair, or one whose ends both closed. */
    int slot = np;
    for (int j = 0; slot == MAXP && j < np; j++)
        if (P[j].accepted && P[j].e[0].closed && P[j].e[1].closed)
            slot = j;
    if (slot == MAXP || npend + 1 >= backlog)
        return;
    int nb = rnd(2), inp = 0;
    int c = socket(AF_INET, SOCK_STREAM | (nb ? SOCK_NONBLOCK : 0), 0);
    if (c < 0)
        die("socket");
    int r = connect(c, (struct sockaddr *)&self, sizeof self);
    if (nb) {
        /* (Over loopback Linux may finish the handshake within the call.) */
        int ok = r == 0 || errno == EINPROGRESS;
        inp = r < 0 && errno == EINPROGRESS;
        wait_on(c, POLLOUT);
        int err = -1;
        socklen_t l = sizeof err;
        getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l);
        say("connect %d nonblocking ok %d so_error %d", slot, ok, err);
    } else {
        say("connect %d %s", slot, res(r));
        if (r < 0)
            die("connect");
    }
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    getsockname(c, (struct sockaddr *)&a, &al);
    struct pair *p = &P[slot];
    memset(p, 0, sizeof *p);
    p->e[0].fd = c;
    p->e[1].fd = -1;
    p->closer = -1;
    p->cport = ntohs(a.sin_port);
    p->in_progress = nb && inp;
    pend[npend++] = slot;
    if (slot == np)
        np++;
    l_edge = 1;
}

static void op_accept(void) {
    int lnb = nonblocking(L);
    if (npend == 0 && !lnb)
        return;
    if (npend > 0)
        wait_on(L, POLLIN);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    socklen_t al = sizeof a;
    int k = rnd(5), fl = 0, s;
    switch (k) {
    case 0: s = accept(L, NULL, NULL); break;
    case 1: s = accept(L, (struct sockaddr *)&a, &al); break;
    case 2: al = 4; s = accept(L, (struct sockaddr *)&a, &al); break;
    case 3:
        fl = (rnd(2) ? SOCK_NONBLOCK : 0) | (rnd(2) ? SOCK_CLOEXEC : 0);
        s = accept4(L, (struct sockaddr *)&a, &al, fl);
        break;
    default: s = accept4(L, NULL, NULL, SOCK_NONBLOCK); break;
    }
    if (s < 0) {
        say("accept %d %s (pending %d)", k, res(s), npend);
        if (npend > 0)
            die("accept");
        return;
    }
    struct sockaddr_in peer;
    socklen_t pl = sizeof peer;
    getpeername(s, (struct sockaddr *)&peer, &pl);
    int i = -1;
    for (int j = 0; j < npend; j++)
        if (P[pend[j]].cport == ntohs(peer.sin_port))
            i = j;
    int addr_ok = (k == 1 || k == 3) ? a.sin_port == peer.sin_port : -1;
    say("accept %d flags %#x: pending #%d len %d addr_ok %d nonblock %d cloexec %d", k, fl, i,
        (int)al, addr_ok, nonblocking(s), fcntl(s, F_GETFD));
    if (i < 0)
        die("accept: no such client");
    struct pair *p = &P[pend[i]];
    p->e[1].fd = s;
    p->accepted = 1;
    memmove(&pend[i], &pend[i + 1], (size_t)(npend - i - 1) * sizeof pend[0]);
    npend--;
}

/* A random pair (or -1). */
static int any_pair(void) { return np ? (int)rnd((unsigned)np) : -1; }

/* Send (`out`) or receive all `n` bytes of `buf` on `fd` by call `k`
 * (0 write/read, 1 send/recv, 2 writev/readv, 3 sendmsg/recvmsg), waiting
 * whenever it would block. */
static void move_bytes(int fd, unsigned char *buf, size_t n, int k, int out) {
    size_t off = 0;
    while (off < n) {
        size_t len = n - off;
        struct iovec iov[2] = {{buf + off, len / 2}, {buf + off + len / 2, len - len / 2}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        ssize_t r;
        switch (k * 2 + out) {
        case 0: r = read(fd, buf + off, len); break;
        case 1: r = write(fd, buf + off, len); break;
        case 2: r = recv(fd, buf + off, len, 0); break;
        case 3: r = send(fd, buf + off, len, MSG_NOSIGNAL); break;
        case 4: r = readv(fd, iov, 2); break;
        case 5: r = writev(fd, iov, 2); break;
        case 6: r = recvmsg(fd, &m, 0); break;
        default: r = sendmsg(fd, &m, MSG_NOSIGNAL); break;
        }
        if (r < 0 && errno == EAGAIN) {
            wait_on(fd, out ? POLLOUT : POLLIN);
            continue;
        }
        if (r <= 0)
            die(out ? "send" : "read");
        off += (size_t)r;
    }
}

static void op_send(void) {
    int i = any_pair(), side = rnd(2);
    if (i < 0 || !can_send(&P[i], side))
        return;
    struct pair *p = &P[i];
    struct end *e = &p->e[side];
    /* At most 48 KiB outstanding each way (16 KiB before the accept): the
     * receive buffer holds it, so a blocking send never waits. */
    uint64_t cap = p->accepted ? 48 * 1024 : 16 * 1024, out = outstanding(p, side);
    if (out >= cap)
        return;
    uint64_t room = cap - out;
    size_t n = 1 + rnd(room < 20000 ? (unsigned)room : 20000);
    unsigned char *buf = malloc(n);
    for (size_t j = 0; j < n; j++)
        buf[j] = pat(i, side, e->sent + j);
    int k = rnd(4);
    const char *how[] = {"write", "send", "writev", "sendmsg"};
    move_bytes(e->fd, buf, n, k, 1);
    e->sent += n;
    free(buf);
    say("%s pair %d side %d %zu done", how[k], i, side, n);
}

/* Read `n` bytes at end `side` of pair `i`, waiting as needed; 0 if all
 * of them matched the pattern. */
static int read_exact(int i, int side, size_t n, int k) {
    struct pair *p = &P[i];
    struct end *e = &p->e[side];
    unsigned char *buf = malloc(n);
    move_bytes(e->fd, buf, n, k, 0);
    int bad = 0;
    for (size_t j = 0; j < n; j++)
        bad |= buf[j] != pat(i, 1 - side, e->got + j);
    e->got += n;
    free(buf);
    return bad;
}

/* A random pair and an end of it (`*side`) that is open: the pair's
 * index, or -1 (no pair, the end not accepted yet, or closed). */
static int open_end(int *side) {
    int i = any_pair();
    *side = rnd(2);
    if (i < 0 || (*side == 1 && !P[i].accepted) || P[i].e[*side].closed)
        return -1;
    return i;
}

static void op_recv(void) {
    int side, i = open_end(&side);
    if (i < 0)
        return;
    uint64_t out = outstanding(&P[i], 1 - side);
    if (out == 0)
        return;
    size_t n = 1 + rnd(out < 30000 ? (unsigned)out : 30000);
    int k = rnd(4);
    int bad = read_exact(i, side, n, k);
    say("read %d pair %d side %d %zu %s", k, i, side, n, bad ? "CORRUPT" : "intact");
}

/* An end whose peer shut down or closed, all of whose bytes it read:
 * what the next reads (and, after a reset, a send) return. */
static void op_end(void) {
    int side, i = open_end(&side);
    if (i < 0)
        return;
    struct pair *p = &P[i];
    struct end *e = &p->e[side], *o = &p->e[1 - side];
    if (e->done || !(o->shut_wr || o->closed) || outstanding(p, 1 - side) != 0)
        return;
    /* (The reset's arrival, or else the FIN's.) */
    short ev = wait_on(e->fd, p->reset ? POLLERR : POLLIN);
    char c;
    ssize_t r1 = recv(e->fd, &c, 1, MSG_DONTWAIT);
    const char *s1 = res(r1);
    char b1[64];
    snprintf(b1, sizeof b1, "%s", s1);
    ssize_t r2 = recv(e->fd, &c, 1, MSG_DONTWAIT);
    if (p->reset) {
        /* (A reset's error is reported once; sending after it fails.) */
        ssize_t w = send(e->fd, "x", 1, MSG_NOSIGNAL);
        char b2[64];
        snprintf(b2, sizeof b2, "%s", res(r2));
        say("end pair %d side %d reset: pollin %d recv %s then %s send %s", i, side,
            (ev & POLLIN) != 0, b1, b2, res(w));
    } else {
        say("end pair %d side %d: pollin %d recv %s then %s", i, side, (ev & POLLIN) != 0, b1,
            res(r2));
    }
    e->done = 1;
}

static void op_shutdown(void) {
    int i = any_pair(), side = rnd(2);
    if (i < 0 || !can_send(&P[i], side))
        return;
    int r = shutdown(P[i].e[side].fd, SHUT_WR);
    say("shutdown pair %d side %d %s", i, side, res(r));
    P[i].e[side].shut_wr = 1;
    /* (Linux's `inet_shutdown` ends the EINPROGRESS state as the next
     * connect would.) */
    if (side == 0)
        P[i].in_progress = 0;
}

/* Wait until `fd` holds `n` unread bytes (they all arrived). */
static void wait_held(int fd, uint64_t n) {
    for (int t = 0; t < 10000; t++) {
        int v = -1;
        if (ioctl(fd, FIONREAD, &v) == 0 && (uint64_t)v == n)
            return;
        usleep(1000);
    }
    errno = ETIMEDOUT;
    die("wait_held");
}

/* Close one end: with unread bytes (all arrived first) or SO_LINGER 0 it
 * resets the connection, else it ends it with a FIN. */
static void op_close(void) {
    int side, i = open_end(&side);
    if (i < 0)
        return;
    struct pair *p = &P[i];
    struct end *e = &p->e[side], *o = &p->e[1 - side];
    uint64_t unread = outstanding(p, 1 - side);
    /* (Not before the accept: a reset connection in the queue may be
     * accepted before or after the reset comes. Not where both ends shut:
     * whether the closing end's state is CLOSE already, which sends no
     * reset, depends on when the last ACK came.) */
    int linger = rnd(4) == 0 && p->accepted;
    if ((linger || unread > 0) && !o->closed && e->shut_wr && o->shut_wr)
        return;
    if (!o->closed && (side == 1 || p->accepted)) {
        /* Settled: what it holds unread arrived, and what it sent arrived
         * at an accepted peer. */
        wait_held(e->fd, unread);
        if (p->accepted && !o->closed)
            wait_held(o->fd, outstanding(p, side));
    }
    if (linger) {
        struct linger lg = {1, 0};
        setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    int r = close(e->fd);
    say("close pair %d side %d linger0 %d unread %d %s", i, side, linger, unread > 0, res(r));
    e->closed = 1;
    if (p->closer < 0) {
        p->closer = side;
        p->reset = !o->closed && (linger || unread > 0);
    }
}

/* The listener's TCP_INFO once every connection made is queued (Linux's
 * tcpi_unacked: the connections ready for accept, which a connect
 * returning does not settle); dies if they never are. */
static struct tcp_info settled_queue(void) {
    struct tcp_info ti;
    for (int k = 0; k < 1000; k++) {
        socklen_t l = sizeof ti;
        memset(&ti, 0, sizeof ti);
        if (getsockopt(L, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
            die("TCP_INFO");
        if (ti.tcpi_unacked == (unsigned)npend)
            return ti;
        usleep(10000);
    }
    errno = ETIMEDOUT;
    die("queue");
    return ti;
}

/* The listener's readiness: none while nothing is queued; readable once
 * a queued connection is waited for. Edge-triggered, once the queue is
 * settled: reported once for the connections queued since the last wait
 * (and for those queued when the item was added) while any is queued, not
 * again for those still queued. Its TCP_INFO: the queue and the backlog. */
static void op_ready(void) {
    int k = rnd(3);
    if (k == 0) {
        struct pollfd q = {.fd = L, .events = POLLIN | POLLOUT};
        int r = npend ? (wait_on(L, POLLIN), poll(&q, 1, 0)) : poll(&q, 1, 0);
        say("listener poll %d revents %#x (pending %d)", r, q.revents, npend);
        return;
    }
    if (k == 2) {
        struct tcp_info ti = settled_queue();
        say("listener tcp_info state %u unacked %u sacked %u (backlog %d)", ti.tcpi_state,
            ti.tcpi_unacked, ti.tcpi_sacked, backlog);
        return;
    }
    if (ep < 0) {
        ep = epoll_create1(0);
        if (ep < 0)
            die("epoll_create1");
    }
    if (!in_ep) {
        /* (Exclusive, as nginx's workers add their listener, or not.) */
        l_et = rnd(2);
        struct epoll_event e = {.events = EPOLLIN | (rnd(2) ? EPOLLEXCLUSIVE : 0) |
                                          (l_et ? EPOLLET : 0),
                                .data.u64 = 5};
        say("listener epoll_ctl add %#x %s", e.events, res(epoll_ctl(ep, EPOLL_CTL_ADD, L, &e)));
        in_ep = 1;
        l_edge = npend > 0;
    }
    struct epoll_event out[2];
    memset(out, 0, sizeof out);
    int wait = npend ? 10000 : 0;
    if (l_et) {
        /* (An edge whose connections were all accepted since is not
         * reported: Linux looks at the item again before it reports it.
         * Either way the wait takes it.) */
        settled_queue();
        wait = l_edge && npend ? 10000 : 0;
        l_edge = 0;
    }
    int r = epoll_wait(ep, out, 2, wait);
    say("listener epoll_wait %s events %#x data %llu (pending %d)", res(r), r > 0 ? out[0].events : 0,
        r > 0 ? (unsigned long long)out[0].data.u64 : 0ULL, npend);
}

/* An open end of an accepted, live pair (or -1). */
static int live_end(int *side) {
    int i = any_pair();
    *side = rnd(2);
    if (i < 0 || !P[i].accepted || P[i].closer >= 0)
        return -1;
    return i;
}

static void op_misc(void) {
    int k = rnd(12), r, v = -1, side;
    socklen_t l = sizeof v;
    char c;
    switch (k) {
    case 0: {
        int on = rnd(2);
        r = rnd(2) ? fcntl(L, F_SETFL, on ? O_NONBLOCK : 0) : ioctl(L, FIONBIO, &on);
        say("listener nonblock %d %s", on, res(r));
        break;
    }
    case 1: {
        int b = npend + 2 + (int)rnd(6);
        r = listen(L, b);
        say("listen again %s", res(r));
        if (r == 0)
            backlog = b;
        break;
    }
    case 2: {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        r = getsockname(L, (struct sockaddr *)&a, &al);
        say("listener getsockname %s same %d", res(r),
            a.sin_port == self.sin_port && a.sin_addr.s_addr == self.sin_addr.s_addr);
        break;
    }
    case 3:
        r = getsockopt(L, SOL_SOCKET, SO_ACCEPTCONN, &v, &l);
        say("listener acceptconn %s %d", res(r), v);
        v = -1;
        r = getsockopt(L, SOL_SOCKET, SO_ERROR, &v, &l);
        say("listener so_error %s %d", res(r), v);
        break;
    case 4:
        errno = 0;
        r = (int)recv(L, &c, 1, MSG_DONTWAIT);
        say("listener recv %s", res(r));
        r = (int)send(L, "x", 1, MSG_NOSIGNAL);
        say("listener send %s", res(r));
        break;
    case 5:
        r = connect(L, (struct sockaddr *)&self, sizeof self);
        say("listener connect %s", res(r));
        break;
    case 6: {
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (rnd(2))
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        r = bind(s, (struct sockaddr *)&self, sizeof self);
        say("second bind %s", res(r));
        close(s);
        break;
    }
    case 7: {
        int i = live_end(&side);
        if (i < 0)
            break;
        int fd = P[i].e[side].fd;
        r = accept(fd, NULL, NULL);
        say("accept on a connection %s", res(r));
        r = listen(fd, 4);
        say("listen on a connection %s", res(r));
        r = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l);
        say("connection acceptconn %s %d", res(r), v);
        break;
    }
    case 8: {
        /* (Of a connection neither end shut: once both FINs are through,
         * getpeername's answer waits for the connection to settle; see
         * case 11.) */
        int i = live_end(&side);
        if (i < 0 || P[i].e[0].shut_wr || P[i].e[1].shut_wr)
            break;
        struct sockaddr_in a, b;
        socklen_t al = sizeof a, bl = sizeof b;
        int fd = P[i].e[side].fd, other = P[i].e[1 - side].fd;
        r = getsockname(fd, (struct sockaddr *)&a, &al);
        r |= getpeername(other, (struct sockaddr *)&b, &bl);
        int server_local = side == 1 ? a.sin_port == self.sin_port : b.sin_port == self.sin_port;
        say("names pair %d side %d %s match %d server_port %d", i, side, res(r),
            a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr, server_local);
        break;
    }
    case 11: {
        /* Both FINs through (both ends shut and read the other's end of
         * file): once the connection settles (TCP_INFO reads CLOSE at
         * both ends, as TIME-WAIT does), getpeername says ENOTCONN at
         * both, Linux's sockets being CLOSE; getsockname still answers. */
        int i = -1;
        for (int j = 0; j < np && i < 0; j++) {
            struct pair *q = &P[j];
            if (q->accepted && q->closer < 0 && q->e[0].shut_wr && q->e[1].shut_wr &&
                q->e[0].done && q->e[1].done)
                i = j;
        }
        if (i < 0)
            break;
        struct pair *p = &P[i];
        for (int t = 0, n = 0; n < 2; t++) {
            n = 0;
            for (int s2 = 0; s2 < 2; s2++) {
                struct tcp_info ti;
                socklen_t tl = sizeof ti;
                n += getsockopt(p->e[s2].fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
                     ti.tcpi_state == TCP_CLOSE;
            }
            if (n < 2 && t == 10000) {
                errno = ETIMEDOUT;
                die("settle");
            }
            if (n < 2)
                usleep(1000);
        }
        for (side = 0; side < 2; side++) {
            struct sockaddr_in a;
            socklen_t al = sizeof a;
            char bp[64];
            snprintf(bp, sizeof bp, "%s", res(getpeername(P[i].e[side].fd, (struct sockaddr *)&a, &al)));
            al = sizeof a;
            r = getsockname(P[i].e[side].fd, (struct sockaddr *)&a, &al);
            say("both fins pair %d side %d getpeername %s getsockname %s", i, side, bp, res(r));
        }
        break;
    }
    case 9: {
        /* TCP_INFO's state where it is settled: both ends open and not
         * shut (established), or an end that read its peer's FIN and has
         * not shut itself (close-wait). */
        int i = any_pair();
        side = rnd(2);
        if (i < 0 || !P[i].accepted)
            break;
        struct pair *p = &P[i];
        struct end *e = &p->e[side], *o = &p->e[1 - side];
        int est = p->closer < 0 && !e->shut_wr && !o->shut_wr;
        int cw = !e->closed && !e->shut_wr && o->shut_wr && !o->closed && e->done;
        if (!est && !cw)
            break;
        struct tcp_info ti;
        socklen_t tl = sizeof ti;
        r = getsockopt(e->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl);
        say("tcp_info pair %d side %d %s state %d", i, side, res(r), ti.tcpi_state);
        break;
    }
    default: {
        int i = live_end(&side);
        if (i < 0)
            break;
        /* The first connect after EINPROGRESS returns 0 (whether the
         * first said EINPROGRESS depends on timing over loopback), the
         * next EISCONN. */
        int fd = P[i].e[side].fd;
        int want0 = side == 0 && P[i].in_progress;
        r = connect(fd, (struct sockaddr *)&self, sizeof self);
        int ok = want0 ? r == 0 : r < 0 && errno == EISCONN;
        say("connect again pair %d side %d %s", i, side, ok ? "as on Linux" : res(r));
        if (side == 0)
            P[i].in_progress = 0;
        break;
    }
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: listen_ops SELF_IP PORT SEED OPS\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rng = strtoull(argv[3], NULL, 10) * 0x9E3779B97F4A7C15ULL + 7;
    int ops = atoi(argv[4]);
    self = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &self.sin_addr);
    L = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(L, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (L < 0 || bind(L, (struct sockaddr *)&self, sizeof self) < 0)
        die("bind");
    backlog = 2 + (int)rnd(7);
    if (listen(L, backlog) < 0)
        die("listen");
    say("listening");
    for (step = 1; step <= ops; step++) {
        switch (rnd(14)) {
        case 0: case 1: op_connect(); break;
        case 2: case 3: op_accept(); break;
        case 4: case 5: op_send(); break;
        case 6: case 7: op_recv(); break;
        case 8: op_end(); break;
        case 9: op_shutdown(); break;
        case 10: op_close(); break;
        case 11: op_ready(); break;
        default: op_misc(); break;
        }
    }
    /* The end: the listener closes with connections still queued (each
     * is reset), then every end left. */
    int queued = npend;
    say("close listener %s with %d queued", res(close(L)), queued);
    for (int j = 0; j < queued; j++) {
        struct pair *p = &P[pend[j]];
        if (p->e[0].closed) {
            say("queued pair %d closed before", pend[j]);
            continue;
        }
        short ev = wait_on(p->e[0].fd, POLLIN);
        char c;
        /* (Bytes it sent before are gone with the reset.) */
        ssize_t r = recv(p->e[0].fd, &c, 1, MSG_DONTWAIT);
        say("queued pair %d: pollin %d recv %s", pend[j], (ev & POLLIN) != 0, res(r));
        p->e[0].done = 1;
    }
    for (int i = 0; i < np; i++)
        for (int side = 0; side < 2; side++)
            if (P[i].e[side].fd >= 0 && !P[i].e[side].closed)
                close(P[i].e[side].fd);
    say("end pairs %d", np);
    return 0;
}
