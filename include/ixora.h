/*
 * ixora.h — the C API of Ixora's native dataplane (IX Table 1).
 *
 * Features:
 *  - one run-to-completion loop per core, each owning a queue of the NIC;
 *  - batched calls (connect, accept, sendv, recv_done, close) made from
 *    inside event callbacks, applied at once, their frames sent at the end
 *    of the cycle;
 *  - event conditions (knock, connected, recv, sent, peer_closed, dead);
 *  - zero-copy receive: recv hands out each received byte once, in place,
 *    valid until ixora_recv_done releases it (which may happen later, from
 *    any callback of the same core; see `recv` below);
 *  - zero-copy transmit: ixora_sendv keeps pointing at the caller's memory,
 *    which must stay valid and unchanged until `sent` reports those bytes
 *    acknowledged, or `dead` is reported, or ixora_run has returned.
 *    ixora_close does NOT end this: a closed connection still sends (and
 *    may retransmit) what was queued, but reports nothing more, so close a
 *    connection only once `sent` has acknowledged all its zero-copy bytes
 *    (or after `dead`). ixora_send_copy copies and has no such rule.
 *
 * All calls taking an `ixora_io *` are valid only inside a callback, on the
 * core that called it. Handles belong to that core. With cores > 1 the
 * callbacks run on several threads at once (same `user` pointer).
 * Addresses (uint32_t) are in network byte order, ports in host order.
 *
 * Link with -lixora (libixora.so from `cargo build --release -p ixora-capi`).
 */
#ifndef IXORA_H
#define IXORA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A connection handle (opaque; 0 is never a valid handle). */
typedef uint64_t ixora_handle;

/* A core's dataplane, handed to every callback. */
typedef struct ixora_io ixora_io;

/* How to run. Strings are NUL-terminated; unset fields take defaults. */
typedef struct ixora_config {
    const char *backend; /* "af_xdp" (default), "af_packet", "tap", "shm" */
    const char *iface;   /* interface, TAP name, or shm socket path */
    const char *ip;      /* our address with prefix, e.g. "198.18.0.2/24" */
    const char *gateway; /* NULL: none */
    uint32_t cores;      /* 0: 1 */
    uint32_t batch;      /* 0: 64 */
    int poll;            /* non-zero: spin when idle */
} ixora_config;

/* Why a connection died. */
enum ixora_dead_reason {
    IXORA_RESET = 1,
    IXORA_REFUSED = 2,
    IXORA_TIMED_OUT = 3,
    IXORA_UNREACHABLE = 4,
    IXORA_ABORTED = 5,
};

/* Event callbacks; any may be NULL. `user` is passed back untouched. */
typedef struct ixora_callbacks {
    void *user;
    /* Once per core before the first cycle (listen, connect here). */
    void (*start)(ixora_io *io, void *user);
    /* A remote connection completed its handshake: accept or close it. */
    void (*knock)(ixora_io *io, void *user, ixora_handle h, uint32_t src_ip_be, uint16_t src_port);
    /* Our connect completed. */
    void (*connected)(ixora_io *io, void *user, ixora_handle h, uint64_t cookie);
    /* Received bytes, in place, in stream order; each byte is handed out
     * exactly once, in one or more contiguous pieces (one call per piece).
     * The memory stays valid until ixora_recv_done releases those bytes;
     * releases go in stream order from the oldest byte not yet released,
     * now or in a later callback (e.g. once an echo of them is
     * acknowledged). Unreleased bytes count against the receive window, and
     * ixora_close with unreleased bytes resets the connection. */
    void (*recv)(ixora_io *io, void *user, ixora_handle h, uint64_t cookie, const uint8_t *data, size_t len);
    /* Bytes acknowledged; `window` is what ixora_sendv would accept now. */
    void (*sent)(ixora_io *io, void *user, ixora_handle h, uint64_t cookie, size_t acked, size_t window);
    /* The peer closed its side (end of stream): no recv follows. Sending
     * still works; ixora_close when done. */
    void (*peer_closed)(ixora_io *io, void *user, ixora_handle h, uint64_t cookie);
    /* The connection died (enum ixora_dead_reason): its unreleased received
     * bytes are already gone (do not touch pointers `recv` gave out for
     * it) and nothing more is sent (its zero-copy send memory is free
     * again). Close the handle. */
    void (*dead)(ixora_io *io, void *user, ixora_handle h, uint64_t cookie, int reason);
    /* After each batch of events. */
    void (*end_of_batch)(ixora_io *io, void *user);
} ixora_callbacks;

/* Run until *stop becomes non-zero (checked every few milliseconds; may be
 * NULL to run forever), e.g. set by a signal handler. Blocks; the core
 * threads it starts inherit the caller's signal mask. Returns 0, or a
 * negative errno with a message on stderr. The strings in *cfg are read
 * before any callback runs. */
int ixora_run(const ixora_config *cfg, const ixora_callbacks *cb, const volatile int *stop);

/* Batched calls. Negative return values are negative errno codes. */
/* Listen on a TCP port (host order) on this core; call it from `start` on
 * every core that should take connections. */
int ixora_listen(ixora_io *io, uint16_t port);
/* Returns a handle (> 0) or a negative errno. dst_ip in network order. */
int64_t ixora_connect(ixora_io *io, uint64_t cookie, uint32_t dst_ip_be, uint16_t dst_port);
/* Accept a knocked connection; `cookie` comes back with its events. Close
 * the handle instead to reject it. */
int ixora_accept(ixora_io *io, ixora_handle h, uint64_t cookie);
/* Zero-copy: returns the bytes the window accepted, from the front of the
 * iovecs (maybe fewer than offered, maybe 0: offer the rest again after
 * `sent`); the memory must stay valid until acknowledged (see above). */
ssize_t ixora_sendv(ixora_io *io, ixora_handle h, const struct iovec *iov, int iovcnt);
/* Like ixora_sendv but copies what it accepts (the window decides; 0 with
 * the window full, then `sent` follows when it opens). */
ssize_t ixora_send_copy(ixora_io *io, ixora_handle h, const void *data, size_t len);
/* Release the oldest `bytes` received bytes not yet released (their frames
 * return to the pool; the window opens). */
int ixora_recv_done(ixora_io *io, ixora_handle h, size_t bytes);
/* Close (or reject) the connection; the handle is invalid afterwards and no
 * more events come for it. Queued bytes are still delivered (see the
 * zero-copy rule above); unreleased received bytes reset it instead. */
int ixora_close(ixora_io *io, ixora_handle h);
/* This core's index and the number of cores. */
uint32_t ixora_core(const ixora_io *io);
uint32_t ixora_cores(const ixora_io *io);
/* Stop this core after the current cycle. */
void ixora_stop(ixora_io *io);

#ifdef __cplusplus
}
#endif
#endif /* IXORA_H */
