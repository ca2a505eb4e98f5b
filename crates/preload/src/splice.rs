//! splice(2) between an Ixora socket and a pipe (HAProxy relays so with
//! `option splice-request` / `splice-response`).
//!
//! The kernel cannot splice from or into a ring in shared memory, so the
//! bytes pass through a pipe of the calling thread's own, the *relay*:
//! from a socket, the kernel copies them out of the receive ring into the
//! relay (`writev` from the ring: the one copy) and the relay's pages move
//! into the program's pipe (`splice`, no copy); into a socket, the
//! program's pipe's pages move into the relay and the kernel copies them
//! into the transmit ring (`readv`). Each side is taken from only once
//! the other has taken it: a full pipe leaves the bytes in the socket's
//! ring, a full ring leaves them in the program's pipe, and what the
//! program's pipe refused is drained from the relay, which is empty
//! between calls. The relay's pages are never the ring's (`vmsplice`
//! would lend them, and the ring is reused once read).
//!
//! As Linux's `splice`: the arguments are checked in its order (`len` 0,
//! unknown flags, descriptors, a pipe's offset, which end is open, no
//! pipe, a socket's offset); the pipe waits (for room, for bytes) follow
//! `SPLICE_F_NONBLOCK` or the pipe's own `O_NONBLOCK`, the socket's
//! follow the socket's (`O_NONBLOCK`, `SO_RCVTIMEO`, `SO_SNDTIMEO`), the
//! pipe's first; a call from a TCP socket moves what the ring holds (up
//! to the relay's size), one into it what the pipe holds (as the ring
//! takes it, a blocking socket waiting for room). A UDP socket gives one
//! datagram per call, cut to `len`, and sends what the pipe holds (up to
//! `len`) as one. A splice enters the kernel by nature: each is counted
//! as such (`splice` in `ixora stats`), and as nothing else (until
//! 2026-11-29 one of a UDP socket was also counted as the receive or send
//! it makes, and one that gave up waiting as a read or a write).
//! `posix_calls.c` `splice_calls` runs the same checks on Linux and under
//! `ixora run`.

use crate::real::{self, errno, real, sys_poll};
use crate::shim::io::{can_send, do_recv, do_send, ring_was_filling, send_failed};
use crate::shim::{count, fail, kernel_fd, wait_ring};
use crate::state::{self, Sock, FORK_GEN};
use ixora_channel::layout::{call, flag};
use libc::{c_int, c_uint, c_void, size_t, ssize_t};
use std::cell::RefCell;
use std::sync::atomic::Ordering;

const SPLICE_F_NONBLOCK: c_uint = 2;
const SPLICE_F_MORE: c_uint = 4;
/// Every flag splice(2) knows (`SPLICE_F_ALL`).
const SPLICE_F_ALL: c_uint = 0xf;
/// The largest UDP payload over IPv4.
const MAX_DGRAM: usize = 65_507;

/// A thread's own pipe between a socket's ring and the program's pipe.
struct Relay {
    r: c_int,
    w: c_int,
    /// Its capacity (bytes): the most one call moves.
    cap: usize,
    /// [`FORK_GEN`] when it was made: a forked child makes its own (the
    /// inherited one is the parent's pipe too).
    fork_gen: u64,
}

impl Relay {
    fn new() -> Result<Relay, c_int> {
        let mut fds = [0; 2];
        // SAFETY: pipe2(2) writes two descriptors into a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(errno());
        }
        let (r, w) = (state::internal(fds[0]), state::internal(fds[1]));
        let cap = real::sys3(libc::SYS_fcntl, r.into(), libc::F_GETPIPE_SZ.into(), 0);
        Ok(Relay {
            r,
            w,
            cap: if cap > 0 { cap as usize } else { 4096 },
            fork_gen: FORK_GEN.load(Ordering::Relaxed),
        })
    }

    /// Read and drop `n` bytes the program's pipe did not take.
    fn drain(&self, mut n: usize) {
        let mut tmp = [0u8; 4096];
        while n > 0 {
            let k = real::sys_read(self.r, &mut tmp[..n.min(4096)]);
            if k <= 0 {
                return;
            }
            n -= k as usize;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for fd in [self.r, self.w] {
            state::forget_internal(fd);
            real::sys_close(fd);
        }
    }
}

thread_local! {
    static RELAY: RefCell<Option<Relay>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's relay (made on first use, and again in a
/// forked child); a call that finds it in use (a signal handler's splice
/// inside a splice) gets one of its own for the call.
fn with_relay<T>(f: impl FnOnce(&Relay) -> Result<T, c_int>) -> Result<T, c_int> {
    RELAY.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let gen = FORK_GEN.load(Ordering::Relaxed);
            if slot.as_ref().is_none_or(|r| r.fork_gen != gen) {
                *slot = None; // (closes a forked parent's)
                *slot = Some(Relay::new()?);
            }
            f(slot.as_ref().unwrap())
        }
        Err(_) => f(&Relay::new()?),
    })
}

fn real_splice(fd_in: c_int, fd_out: c_int, len: usize, flags: c_uint) -> isize {
    real!(splice: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t)(
        fd_in,
        std::ptr::null_mut(),
        fd_out,
        std::ptr::null_mut(),
        len,
        flags,
    )
}

/// Wait until pipe end `fd` has `ev` (POLLIN: bytes, POLLOUT: room):
/// `Ok(true)`; `Ok(false)` if it never will (no writer left, no reader
/// left: the call then says so itself); `Err` with EAGAIN if it has not
/// and `nonblock`, with EINTR after a signal Linux does not restart after.
fn pipe_wait(fd: c_int, ev: i16, nonblock: bool) -> Result<bool, ssize_t> {
    let mut timeout = 0;
    loop {
        let mut p = [libc::pollfd {
            fd,
            events: ev,
            revents: 0,
        }];
        let n = sys_poll(&mut p, timeout);
        if n > 0 {
            // (A pipe without reader says POLLOUT and POLLERR.)
            return Ok(p[0].revents & ev != 0 && p[0].revents & libc::POLLERR == 0);
        }
        if n < 0 {
            if errno() == libc::EINTR && state::restarts_after_signal() {
                continue;
            }
            return Err(-1);
        }
        if nonblock {
            return Err(fail(libc::EAGAIN));
        }
        timeout = -1;
    }
}

/// splice(2). Between kernel descriptors, the kernel's.
///
/// # Safety
/// splice(2)'s contract: `off_in` and `off_out` are null or point at a
/// readable `loff_t` (only their being null is looked at here).
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if state::sock(fd_in).or(state::sock(fd_out)).is_none() {
        if state::pooled(fd_out) {
            return fail(libc::EBADF);
        }
        return kernel_fd(fd_in, || {
            real!(splice: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t)(
                fd_in, off_in, fd_out, off_out, len, flags,
            )
        });
    }
    socket_splice(
        (fd_in, off_in.is_null()),
        (fd_out, off_out.is_null()),
        len,
        flags,
        "splice",
    )
}

/// sendfile(2) from Ixora socket `inf` (the shim's `sendfile` sends here
/// when its source is one): as Linux since 5.12, its bytes move into a
/// pipe as by `splice`; an offset is `ESPIPE` (a socket has no position),
/// another destination `EINVAL`. Counted as a `sendfile`.
pub fn sendfile_from_socket(out: c_int, inf: c_int, no_offset: bool, n: size_t) -> ssize_t {
    if !no_offset {
        if let Some(sk) = state::sock(inf) {
            count(sk.a, call("sendfile"), false);
        }
        return fail(libc::ESPIPE);
    }
    socket_splice((inf, true), (out, true), n, 0, "sendfile")
}

/// A splice with an Ixora socket at one end at least (`fd`, whether its
/// offset is null, for each end), counted as call `name`.
fn socket_splice(
    (fd_in, no_off_in): (c_int, bool),
    (fd_out, no_off_out): (c_int, bool),
    len: size_t,
    flags: c_uint,
    name: &str,
) -> ssize_t {
    let (si, so) = (state::sock(fd_in), state::sock(fd_out));
    let Some(sk) = si.or(so) else {
        return fail(libc::EBADF); // (closed meanwhile)
    };
    count(sk.a, call(name), false);
    // Linux's order: nothing to move, unknown flags, the descriptors.
    if len == 0 {
        return 0;
    }
    if flags & !SPLICE_F_ALL != 0 {
        return fail(libc::EINVAL);
    }
    if si.is_some() && so.is_some() {
        return fail(libc::EINVAL); // (no pipe)
    }
    let (other, no_off_other, no_off_sock) = if si.is_some() {
        (fd_out, no_off_out, no_off_in)
    } else {
        (fd_in, no_off_in, no_off_out)
    };
    if state::pooled(other) {
        return fail(libc::EBADF);
    }
    let fl = real::sys3(libc::SYS_fcntl, other.into(), libc::F_GETFL.into(), 0);
    // SAFETY: fstat(2) fills a live, zeroed plain-old-data struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if fl < 0 || fl as c_int & libc::O_PATH != 0 || unsafe { libc::fstat(other, &mut st) } != 0 {
        return fail(libc::EBADF);
    }
    let pipe = st.st_mode & libc::S_IFMT == libc::S_IFIFO;
    if pipe && !no_off_other {
        return fail(libc::ESPIPE);
    }
    // (The pipe's end that cannot be written, or read.)
    let wrong_end = [libc::O_WRONLY, libc::O_RDONLY][usize::from(si.is_some())];
    if fl as c_int & libc::O_ACCMODE == wrong_end {
        return fail(libc::EBADF);
    }
    if !pipe || !no_off_sock {
        return fail(libc::EINVAL);
    }
    let nonblock = flags & SPLICE_F_NONBLOCK != 0 || fl as c_int & libc::O_NONBLOCK != 0;
    let more = flags & SPLICE_F_MORE;
    // (Counted above as itself alone: the receive or send it makes, a
    // wait that gives up, are not counted again.)
    state::uncounted(|| match (si.is_some(), sk.dgram()) {
        (true, false) => from_stream(sk, other, len, more, nonblock),
        (false, false) => into_stream(sk, other, len, nonblock),
        (true, true) => from_dgram(sk, other, len, nonblock),
        (false, true) => into_dgram(sk, other, len, nonblock),
    })
}

/// TCP socket `sk` into `pipe`: what its ring holds, as far as the pipe
/// takes it.
fn from_stream(sk: Sock, pipe: c_int, len: usize, more: c_uint, nonblock: bool) -> ssize_t {
    let (mut start, mut user) = (None, false);
    loop {
        let before = sk.readable();
        if before == 0 {
            // Linux waits for room in the pipe before it reads.
            match pipe_wait(pipe, libc::POLLOUT, nonblock) {
                Ok(true) => {}
                Ok(false) => return send_failed(libc::EPIPE, false), // (no reader)
                Err(r) => return r,
            }
        }
        let r = with_relay(|relay| {
            Ok(sk.recv_with(len.min(relay.cap), |spans| {
                let iov = spans.map(|(p, n)| libc::iovec {
                    iov_base: p as *mut c_void,
                    iov_len: n,
                });
                let k = if iov[1].iov_len > 0 { 2 } else { 1 };
                // SAFETY: the spans are unread bytes of our receive ring,
                // in our mapping, which the service does not write until
                // the head moves past them (after this call); writev(2)
                // only reads them.
                let w = unsafe { libc::writev(relay.w, iov.as_ptr(), k) };
                if w <= 0 {
                    return Err(if w < 0 { errno() } else { libc::EAGAIN });
                }
                let w = w as usize;
                let m = real_splice(relay.r, pipe, w, SPLICE_F_NONBLOCK | more);
                if m < 0 {
                    let e = errno();
                    relay.drain(w);
                    return Err(e);
                }
                relay.drain(w - m as usize);
                Ok(m as usize)
            }))
        });
        match r {
            Ok(Ok(Ok(m))) => {
                if m > 0 && ring_was_filling(sk, before, m) {
                    state::signal(sk.a, sk.s);
                }
                return m as ssize_t;
            }
            // The pipe filled meanwhile.
            Ok(Ok(Err(libc::EAGAIN))) if !nonblock => {
                if let Err(r) = pipe_wait(pipe, libc::POLLOUT, false) {
                    return r;
                }
            }
            Ok(Ok(Err(e))) | Err(e) => return fail(e),
            Ok(Err(libc::EAGAIN)) if !sk.nonblock() => {
                let ready = &mut || {
                    sk.readable() > 0 || sk.flags() & (flag::EOF | flag::ERROR) != 0 || !sk.live()
                };
                if let Err(r) = wait_ring(sk, false, &mut start, &mut user, ready) {
                    return r;
                }
            }
            Ok(Err(e)) => return fail(e),
        }
    }
}

/// Where a splice into a socket that moved `done` bytes finds `pipe`
/// empty (or is about to wait for the socket): `Some(r)` ends the call
/// with `r` — what it moved, or with nothing moved 0 for a pipe without
/// writer, EAGAIN for a non-blocking one — `None` once the pipe holds
/// bytes (a blocking one was waited for).
fn ends_at_pipe(pipe: c_int, nonblock: bool, done: usize) -> Option<ssize_t> {
    if done > 0 {
        return Some(done as ssize_t);
    }
    match pipe_wait(pipe, libc::POLLIN, nonblock) {
        Ok(true) => None,
        Ok(false) => Some(0),
        Err(r) => Some(r),
    }
}

/// `pipe` into TCP socket `sk`: what the pipe holds, up to `len`, as the
/// ring takes it.
fn into_stream(sk: Sock, pipe: c_int, len: usize, nonblock: bool) -> ssize_t {
    let (mut start, mut user) = (None, false);
    let mut done = 0usize;
    loop {
        // Linux looks at the pipe before the socket: an empty one ends
        // the call (or waits) before a full or failed socket does.
        if !sk.takes_bytes() {
            if let Some(r) = ends_at_pipe(pipe, nonblock, done) {
                return r;
            }
        }
        let r = with_relay(|relay| {
            Ok(sk.send_with((len - done).min(relay.cap), |spans| {
                let room = spans[0].1 + spans[1].1;
                let m = real_splice(pipe, relay.w, room, SPLICE_F_NONBLOCK);
                if m <= 0 {
                    return if m == 0 { Ok(0) } else { Err(errno()) };
                }
                let m = m as usize;
                let mut got = 0;
                for (p, n) in spans {
                    let n = (*n).min(m - got);
                    // SAFETY: the span is free room of our transmit ring, in
                    // our writable mapping, which the service reads only
                    // once the tail is published past it (after this call).
                    let buf = unsafe { std::slice::from_raw_parts_mut(*p, n) };
                    let mut at = 0;
                    while at < n {
                        let k = real::sys_read(relay.r, &mut buf[at..]);
                        if k <= 0 {
                            break; // (cannot happen: the relay holds them)
                        }
                        at += k as usize;
                    }
                    got += at;
                }
                Ok(got)
            }))
        });
        match r {
            // The pipe is empty and has no writer: the end.
            Ok(Ok(Ok(0))) => return done as ssize_t,
            Ok(Ok(Ok(m))) => {
                done += m;
                state::signal(sk.a, sk.s);
                if done == len {
                    return done as ssize_t;
                }
            }
            Ok(Ok(Err(libc::EAGAIN))) => {
                if let Some(r) = ends_at_pipe(pipe, nonblock, done) {
                    return r;
                }
            }
            Ok(Ok(Err(e))) | Err(e) => {
                return if done > 0 { done as ssize_t } else { fail(e) };
            }
            Ok(Err(libc::EAGAIN)) if !sk.nonblock() => {
                if let Err(r) = wait_ring(sk, true, &mut start, &mut user, &mut || can_send(sk)) {
                    return if done > 0 { done as ssize_t } else { r };
                }
            }
            Ok(Err(_)) if done > 0 => return done as ssize_t,
            Ok(Err(e)) => return send_failed(e, false),
        }
    }
}

/// UDP socket `sk` into `pipe`: one datagram, cut to `len`.
fn from_dgram(sk: Sock, pipe: c_int, len: usize, nonblock: bool) -> ssize_t {
    match pipe_wait(pipe, libc::POLLOUT, nonblock) {
        Ok(true) => {}
        Ok(false) => return send_failed(libc::EPIPE, false), // (no reader)
        Err(r) => return r,
    }
    let r = with_relay(|relay| {
        let mut buf = vec![0u8; len.min(relay.cap).min(MAX_DGRAM)];
        let n = do_recv(sk, &mut [&mut buf], 0);
        if n <= 0 {
            return Ok(n);
        }
        let n = n as usize;
        if real::sys_write(relay.w, &buf[..n]) != n as isize {
            return Err(errno());
        }
        loop {
            let m = real_splice(relay.r, pipe, n, SPLICE_F_NONBLOCK);
            if m >= 0 {
                relay.drain(n - m as usize);
                return Ok(m);
            }
            // (Another writer filled the pipe since the look.)
            if errno() != libc::EAGAIN || nonblock || pipe_wait(pipe, libc::POLLOUT, false).is_err()
            {
                let e = errno();
                relay.drain(n);
                return Err(e);
            }
        }
    });
    r.unwrap_or_else(fail)
}

/// `pipe` into UDP socket `sk`: what the pipe holds, up to `len`, as one
/// datagram to the connected peer.
fn into_dgram(sk: Sock, pipe: c_int, len: usize, nonblock: bool) -> ssize_t {
    if sk.a.r.down_slot(sk.s).remote.load(Ordering::Acquire) == 0 {
        return fail(libc::EDESTADDRREQ); // (the pipe's bytes stay there)
    }
    loop {
        let r = with_relay(|relay| {
            let want = len.min(relay.cap).min(MAX_DGRAM);
            let m = real_splice(pipe, relay.w, want, SPLICE_F_NONBLOCK);
            if m <= 0 {
                return if m == 0 { Ok(0) } else { Err(errno()) };
            }
            let mut buf = vec![0u8; m as usize];
            if real::sys_read(relay.r, &mut buf) != m {
                return Err(libc::EIO); // (cannot happen: the relay holds them)
            }
            Ok(do_send(sk, &[&buf], 0))
        });
        match r {
            Ok(n) => return n,
            Err(libc::EAGAIN) => match pipe_wait(pipe, libc::POLLIN, nonblock) {
                Ok(true) => {}
                Ok(false) => return 0,
                Err(r) => return r,
            },
            Err(e) => return fail(e),
        }
    }
}
