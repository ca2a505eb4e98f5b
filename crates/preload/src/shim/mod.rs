//! The interposed C functions. Each looks up its descriptor: an Ixora
//! socket is served from shared memory; anything else goes to the C
//! library's own definition unchanged.
//!
//! Raw pointers come from the application exactly as the C library would
//! receive them; each function trusts them as far as the C function it
//! replaces would (a bad pointer faults in the application either way).

use crate::handover;
use crate::real::{errno, real, set_errno, sys_poll};
use crate::state::{self, fl, kind, Attached, Epoll, Item, MsgIp, OnSignal, Sock};
use ixora_channel::ctl::{op, Msg, TcpInfo};
use ixora_channel::layout::{self, call, pack, state as st, unpack};
use libc::{
    c_int, c_long, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, off_t,
    pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::sync::atomic::Ordering;

mod epoll;
mod fds;
mod iface;
pub(crate) mod io;
mod poll;
mod sockopt;
mod waits;
use epoll::*;
use fds::*;
use iface::*;
use io::*;
use poll::*;
use sockopt::*;

// ----------------------------------------------------------------- helpers

/// A call on a descriptor that is not an Ixora socket: the kernel's, via
/// `real` — unless it is a pooled placeholder, which the program closed
/// (EBADF, as the kernel would say for a closed number).
pub(crate) fn kernel_fd<T: From<i8>>(fd: c_int, real: impl FnOnce() -> T) -> T {
    if state::pooled(fd) {
        return fail(libc::EBADF);
    }
    state::passthrough();
    real()
}

/// [`kernel_fd`] for a call that reads kernel descriptor `fd` and may wait
/// there (`flags`: the call's `MSG_` flags, 0 for a read): a doorbell
/// ring this thread owes is made first if the call can wait
/// ([`state::kick_before_read`]).
pub(crate) fn kernel_read_fd<T: From<i8>>(fd: c_int, flags: c_int, real: impl FnOnce() -> T) -> T {
    state::kick_before_read(fd, flags & libc::MSG_DONTWAIT != 0);
    kernel_fd(fd, real)
}

pub(crate) fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// The IPv4 address (host-order ip, port) a socket of Ixora's may use,
/// from the caller's buffer: an AF_INET address on an AF_INET socket; on
/// a dual-stack AF_INET6 socket (`inet6`), `::` (any: 0.0.0.0) or a
/// v4-mapped `::ffff:a.b.c.d`. Anything else — a real IPv6 address, a
/// family that does not match the socket's — is None: the kernel's.
unsafe fn sa_of(addr: *const sockaddr, len: socklen_t, inet6: bool) -> Option<(u32, u16)> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY (caller): `addr` points at `len` readable bytes, at least a
    // family field (checked above).
    let family = unsafe { std::ptr::read_unaligned(addr as *const libc::sa_family_t) } as c_int;
    match (family, inet6) {
        (libc::AF_INET, false) if (len as usize) >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: as above; the length covers a sockaddr_in.
            let sa = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in) };
            Some((u32::from_be(sa.sin_addr.s_addr), u16::from_be(sa.sin_port)))
        }
        // (24 bytes is the RFC 2133 sockaddr_in6, without a scope id,
        // which Linux accepts too.)
        (libc::AF_INET6, true) if (len as usize) >= 24 => {
            // SAFETY: all-zero bytes are a valid sockaddr_in6 (plain
            // integers and byte arrays).
            let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_in6>());
            // SAFETY: as above: `n` readable bytes at `addr`, no more than
            // `sa` holds; a sockaddr_in6 is plain bytes (zeroed above is a
            // valid value).
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, &mut sa as *mut _ as *mut u8, n)
            };
            let ip = v4_of_v6(sa.sin6_addr.s6_addr)?;
            Some((ip, u16::from_be(sa.sin6_port)))
        }
        _ => None,
    }
}

/// The IPv4 address an IPv6 one stands for on a dual-stack socket: `::`
/// is any (0), `::ffff:a.b.c.d` is a.b.c.d (RFC 4291 §2.5.5.2); other
/// IPv6 addresses stand for none.
fn v4_of_v6(a: [u8; 16]) -> Option<u32> {
    if a == [0; 16] {
        return Some(0);
    }
    if a[..10] == [0; 10] && a[10] == 0xff && a[11] == 0xff {
        return Some(u32::from_be_bytes([a[12], a[13], a[14], a[15]]));
    }
    None
}

/// The IPv4 address a bind or connect on the undecided socket `fd` names,
/// if the socket may be Ixora's at all (not an IPV6_V6ONLY one).
unsafe fn ixora_addr(fd: c_int, addr: *const sockaddr, len: socklen_t) -> Option<(u32, u16)> {
    let f = state::entry(fd)?.flags.load(Ordering::Relaxed);
    if f & fl::V6ONLY != 0 {
        return None;
    }
    // SAFETY (caller): `len` readable bytes at `addr`.
    unsafe { sa_of(addr, len, f & fl::INET6 != 0) }
}

/// An int option of the kernel socket `fd` (None if the kernel refuses).
fn kernel_int_opt(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // `v`/`len` are valid for the write of one int.
    let r = real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(
        fd,
        level,
        name,
        &mut v as *mut c_int as *mut c_void,
        &mut len,
    );
    (r == 0).then_some(v)
}

/// Set an int option of kernel socket `fd`; setsockopt's result.
fn kernel_set_int_opt(fd: c_int, level: c_int, name: c_int, v: c_int) -> c_int {
    // `v` is valid for the read of one int.
    real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(
        fd,
        level,
        name,
        &v as *const c_int as *const c_void,
        std::mem::size_of::<c_int>() as socklen_t,
    )
}

/// Make kernel socket `fd` non-blocking (`on`) or blocking in the kernel.
fn kernel_nonblock(fd: c_int, on: bool) {
    let getfl = real!(fcntl: fn(c_int, c_int; ...) -> c_int)(fd, libc::F_GETFL);
    if getfl >= 0 {
        let nb = if on {
            getfl | libc::O_NONBLOCK
        } else {
            getfl & !libc::O_NONBLOCK
        };
        real!(fcntl: fn(c_int, c_int; ...) -> c_int)(fd, libc::F_SETFL, nb);
    }
}

/// Whether the kernel made the new AF_INET6 socket `fd` IPv6-only
/// (`net.ipv6.bindv6only`).
fn v6only_of(fd: c_int) -> bool {
    kernel_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY).is_some_and(|v| v != 0)
}

/// An IPv4 address and port (host order) as a sockaddr_in.
fn sin(ip: u32, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: ip.to_be() },
        sin_zero: [0; 8],
    }
}

/// Write an IPv4 address into the caller's `addr`/`len` (truncating like
/// the kernel): a sockaddr_in, or for an AF_INET6 socket (`inet6`) a
/// sockaddr_in6 holding it v4-mapped (`::` for any).
unsafe fn put_sa(addr: *mut sockaddr, len: *mut socklen_t, packed: u64, inet6: bool) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let (ip, port) = unpack(packed);
    let v4 = sin(ip, port);
    let mut a6 = [0u8; 16];
    if ip != 0 {
        a6[10] = 0xff;
        a6[11] = 0xff;
        a6[12..].copy_from_slice(&ip.to_be_bytes());
    }
    let v6 = libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: port.to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: a6 },
        sin6_scope_id: 0,
    };
    let (src, full) = if inet6 {
        (
            &v6 as *const _ as *const u8,
            std::mem::size_of::<libc::sockaddr_in6>(),
        )
    } else {
        (
            &v4 as *const _ as *const u8,
            std::mem::size_of::<libc::sockaddr_in>(),
        )
    };
    // SAFETY (caller): `len` is readable and writable; `addr` has `*len`
    // writable bytes.
    unsafe {
        let n = (*len as usize).min(full);
        std::ptr::copy_nonoverlapping(src, addr as *mut u8, n);
        *len = full as socklen_t;
    }
}

/// The caller's iovecs as byte slices.
unsafe fn iovs<'a>(iov: *const iovec, n: c_int) -> Vec<&'a mut [u8]> {
    if iov.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY (caller): `iov` points at `n` iovecs describing writable
    // buffers, as readv(2) requires.
    unsafe {
        std::slice::from_raw_parts(iov, n as usize)
            .iter()
            .filter(|v| !v.iov_base.is_null() && v.iov_len > 0)
            .map(|v| std::slice::from_raw_parts_mut(v.iov_base as *mut u8, v.iov_len))
            .collect()
    }
}

pub(crate) fn count(a: &Attached, name: usize, user: bool) {
    state::count(a, name, user);
}

/// Wait until `ready` (for room to write if `write`, else for data),
/// within the socket's SO_SNDTIMEO/SO_RCVTIMEO counted from `start`;
/// `user` turns false once the wait entered the kernel. `Ok`: try again
/// (ready, or woken). `Err(r)`: the call ends, counted as a `write` or a
/// `read`, returning `r`: -1 with EAGAIN once the timeout passed, -1 with
/// EINTR after a signal.
pub(crate) fn wait_ring(
    sk: Sock,
    write: bool,
    start: &mut Option<std::time::Instant>,
    user: &mut bool,
    ready: &mut dyn FnMut() -> bool,
) -> Result<(), ssize_t> {
    wait_ring_or(sk, write, start, user, &mut [], ready)
}

/// [`wait_ring`], also woken when a descriptor of `kernel` has an event
/// (its `revents` set).
fn wait_ring_or(
    sk: Sock,
    write: bool,
    start: &mut Option<std::time::Instant>,
    user: &mut bool,
    kernel: &mut [pollfd],
    ready: &mut dyn FnMut() -> bool,
) -> Result<(), ssize_t> {
    let name = call(if write { "write" } else { "read" });
    let limit = sk.wait_limit(write, start);
    if limit == 0 {
        count(sk.a, name, *user);
        return Err(fail(libc::EAGAIN));
    }
    let s = [sk.s];
    let (rx, tx): (&[u32], &[u32]) = if write { (&[], &s) } else { (&s, &[]) };
    let interest = if !write && sk.dgram() {
        // A UDP receive waits exclusively, as Linux's
        // (`__skb_wait_for_more_packets`): one waiter per datagram.
        state::Interest::Exclusive(sk.s)
    } else {
        state::Interest::Slots { rx, tx }
    };
    // A reader is also done when its side is shut down meanwhile (by
    // another thread: state::wake_blocked_on).
    let ok = state::block_until(
        sk.a,
        state::ms_limit(limit),
        OnSignal {
            sending: write,
            ..OnSignal::RESTART
        },
        kernel,
        None,
        interest,
        &mut || ready() || (!write && sk.shut_rd()),
    );
    *user &= !state::blocked_in_kernel();
    if !ok && errno() == libc::EINTR {
        count(sk.a, name, false);
        return Err(-1);
    }
    Ok(())
}

/// Make a MAYBE socket an Ixora one: create the slot, then bind or
/// connect it (`then`: the request's op, `a` and `b`). A TCP connect
/// takes one of the service's spare sockets and asks for the connect in
/// shared memory (`req::CONNECT`): no request at all. Else both go in one
/// round trip (`op::SOCKET` with a follow-up). Options set meanwhile go
/// into the socket's up slot. Ok: whether a request was made (the call
/// entered the kernel); Err: why it stays a kernel socket.
fn become_ixora(fd: c_int, a: &'static Attached, then: (u32, i64, u64)) -> Result<bool, c_int> {
    let e = state::entry(fd).ok_or(libc::EBADF)?;
    let dgram = e.flags.load(Ordering::Relaxed) & fl::DGRAM != 0;
    let flags = e.flags.load(Ordering::Relaxed);
    // Options the stack acts on, set while the socket was undecided: they
    // go into its up slot once it has one (the service holds them for the
    // connection, or the listener's).
    let mut opts: Vec<StackOpt> = Vec::new();
    if flags & fl::NAGLE != 0 {
        opts.push(StackOpt::Nagle(true));
    }
    if flags & fl::KEEPALIVE != 0 {
        opts.push(StackOpt::KeepAlive(true));
    }
    if flags & fl::REUSEADDR != 0 {
        opts.push(StackOpt::Reuse(libc::SO_REUSEADDR, true));
    }
    if flags & fl::REUSEPORT != 0 {
        opts.push(StackOpt::Reuse(libc::SO_REUSEPORT, true));
    }
    for name in [libc::TCP_KEEPIDLE, libc::TCP_KEEPINTVL, libc::TCP_KEEPCNT] {
        if let Some(v) = state::pending_int(fd, (libc::IPPROTO_TCP, name)) {
            opts.push(StackOpt::Keep(name, v.clamp(0, 32767) as u16));
        }
    }
    if state::pending_int(fd, (libc::IPPROTO_TCP, libc::TCP_CORK)).is_some_and(|v| v != 0) {
        opts.push(StackOpt::Cork(true));
    }
    for name in [libc::IP_RECVTOS, libc::IP_RECVTTL] {
        if state::pending_int(fd, (libc::IPPROTO_IP, name)).is_some_and(|v| v != 0) {
            opts.push(StackOpt::RecvIp(name, true));
        }
    }
    if let Some(v) = state::pending_int(fd, (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT)) {
        opts.push(StackOpt::Defer(layout::defer_retrans(v)));
    }
    for name in [libc::IP_TOS, libc::IP_TTL] {
        if let Some(v) = state::pending_int(fd, (libc::IPPROTO_IP, name)) {
            opts.push(StackOpt::Ip(name, v as u8));
        }
    }
    if !dgram {
        for name in BUFFER_OPTS {
            if let Some(v) = state::pending_int(fd, (libc::SOL_SOCKET, name)) {
                opts.push(StackOpt::Buf(name, v));
            }
        }
    }
    let (op_then, ta, tb) = then;
    let spare = if op_then == op::CONNECT && !dgram {
        state::take_spare(a)
    } else {
        None
    };
    let (s, gen) = match spare {
        Some(sg) => sg,
        None => {
            let first = Msg {
                c: u64::from(op_then) | tb << 32,
                ..Msg::new(op::SOCKET, 0, dgram as i64, ta as u64)
            };
            let r = state::request(a, first, &[]);
            if r.a < 0 {
                return Err(-r.a as c_int);
            }
            (r.a as u32, r.b as u32)
        }
    };
    state::hold(a, s);
    state::install(fd, s, gen, flags);
    // (A spare's connect applies them first; a connect made by the
    // request, before its first byte is sent.)
    for o in opts {
        set_stack_opt(a, s, o);
    }
    if spare.is_some() {
        // The connect, asked in shared memory.
        let u = a.r.up_slot(s);
        u.dest.store(ta as u64, Ordering::Relaxed);
        u.req.fetch_or(layout::req::CONNECT, Ordering::Release);
        state::signal(a, s);
    }
    // Options set while undecided now belong to the Ixora socket (on
    // failure above they stay with the descriptor, for its next try).
    state::take_pending(fd, Some((a, s, gen)));
    if let Some(sk) = state::sock(fd) {
        state::adopt_undecided(fd, sk, &mut |epfd| kernel_epoll_del(epfd, fd));
        // Its duplicates name the same socket: Ixora's too (until
        // 2026-11-29 they stayed the kernel's unconnected socket).
        for d in state::undecided_dups(fd, true) {
            let cloexec = state::entry(d)
                .and_then(|e| fl::cloexec_of(e.flags.load(Ordering::Relaxed)))
                .unwrap_or(false);
            dup_into(sk, d, cloexec);
            state::take_pending(d, None);
            state::adopt_undecided(d, sk, &mut |epfd| kernel_epoll_del(epfd, d));
        }
    }
    Ok(spare.is_none())
}

// ----------------------------------------------------------------- sockets

/// socket(2).
#[no_mangle]
pub extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let mut fd = real!(socket: fn(c_int, c_int, c_int) -> c_int)(domain, ty, proto);
    // The lowest free number, as POSIX says: closed Ixora sockets' numbers
    // are held (pooled) in the kernel, so the kernel skips them. Move the
    // new socket onto the lowest pooled number below its own (programs
    // size tables by their highest descriptor: wrk's event loop refuses
    // one beyond its connection count, and a client that reconnects
    // would otherwise grow the pool without end).
    if fd >= 0 {
        if let Some(p) = state::attached().and_then(|a| state::take_lowest_pooled(a, fd)) {
            let cloexec = if ty & libc::SOCK_CLOEXEC != 0 {
                libc::O_CLOEXEC
            } else {
                0
            };
            if crate::real::sys_dup3(fd, p, cloexec) == p {
                // (The entry first: once closed, the number may be another
                // thread's at once.)
                if let Some(e) = state::entry(fd) {
                    e.kind.store(kind::NONE, Ordering::Release);
                }
                crate::real::sys_close(fd);
                fd = p;
            } else if let Some(a) = state::attached() {
                // (Just taken out: there is room for it.)
                state::pool(a, p);
            }
        }
    }
    // TCP over IPv4, or over IPv6 as a dual-stack socket may carry IPv4
    // (bound to `::` or a v4-mapped address; decided at bind/connect).
    let tcp = (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ty & 0xf == libc::SOCK_STREAM
        && (proto == 0 || proto == libc::IPPROTO_TCP);
    // UDP over IPv4, or over IPv6 as a dual-stack socket may carry IPv4
    // (decided at bind, connect or the first sendto).
    let udp = (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ty & 0xf == libc::SOCK_DGRAM
        && (proto == 0 || proto == libc::IPPROTO_UDP);
    if fd >= 0 && (tcp || udp) && state::env().socket.is_some() {
        if let Some(e) = state::entry(fd) {
            let mut f = if ty & libc::SOCK_NONBLOCK != 0 {
                fl::NONBLOCK
            } else {
                0
            };
            f |= fl::cloexec(ty & libc::SOCK_CLOEXEC != 0);
            if udp {
                f |= fl::DGRAM;
            }
            if domain == libc::AF_INET6 {
                f |= fl::INET6;
                if v6only_of(fd) {
                    f |= fl::V6ONLY;
                }
            }
            e.flags.store(f, Ordering::Relaxed);
            state::take_pending(fd, None);
            state::forget_undecided(fd);
            e.kind.store(kind::MAYBE, Ordering::Release);
        }
        if let Some(a) = state::attached() {
            count(a, call("socket"), false);
        }
    } else if fd >= 0 {
        let route = domain == libc::AF_NETLINK
            && proto == libc::NETLINK_ROUTE
            && state::env().socket.is_some();
        if route {
            crate::netlink::forget(fd);
        }
        if let Some(e) = state::entry(fd) {
            let k = if route { kind::NETLINK } else { kind::NONE };
            e.kind.store(k, Ordering::Release);
        }
        state::passthrough();
    }
    fd
}

/// bind(2).
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let real_bind = || real!(bind: fn(c_int, *const sockaddr, socklen_t) -> c_int)(fd, addr, len);
    // A UDP socket that gave its port up at a disconnect may bind again,
    // as on Linux (its port is 0 again).
    let unbound = |sk: &Sock| sk.e.flags.load(Ordering::Relaxed) & fl::UNBOUND != 0;
    let again = state::sock(fd).filter(unbound);
    match state::kind_of(fd) {
        kind::MAYBE => {}
        kind::IXORA if again.is_some() => {}
        kind::IXORA => return fail(libc::EINVAL),
        kind::POOLED => return fail(libc::EBADF),
        _ => {
            state::passthrough();
            let r = real_bind();
            if r < 0 && errno() == libc::EADDRNOTAVAIL {
                // SAFETY: the caller passes `len` readable bytes at `addr`.
                if let Some((ip, port)) = unsafe { sa_of(addr, len, false) } {
                    explain_not_served(fd, ip, port);
                }
            }
            return r;
        }
    }
    // SAFETY: the caller passes `len` readable bytes at `addr`.
    let Some((ip, port)) = (unsafe { ixora_addr(fd, addr, len) }) else {
        return match again {
            Some(_) => fail(libc::EADDRNOTAVAIL),
            None => real_bind(),
        };
    };
    let Some(a) = state::attach() else {
        return real_bind();
    };
    if again.is_none()
        && state::entry(fd).is_some_and(|e| e.flags.load(Ordering::Relaxed) & fl::DGRAM != 0)
        && kernel_port(fd) != 0
    {
        // Bound already: a send that failed (no address, MSG_OOB) bound
        // the undecided socket, as Linux's `inet_send_prepare` does
        // before any send — its kernel socket took a port there.
        count(a, call("bind"), false);
        return fail(libc::EINVAL);
    }
    if ip != 0 && ip != a.ip {
        if again.is_some() {
            // (Ixora's now: only its own addresses.)
            return fail(libc::EADDRNOTAVAIL);
        }
        state::decide_kernel(fd);
        return real_bind();
    }
    count(a, call("bind"), false);
    // SO_REUSEPORT set before the bind lets the port be shared; for UDP
    // SO_REUSEADDR does too, as on Linux (iperf3 binds its next stream's
    // socket beside the connected one).
    let share = |f: u32| {
        f & fl::REUSEPORT != 0 || f & (fl::DGRAM | fl::REUSEADDR) == fl::DGRAM | fl::REUSEADDR
    };
    let f = state::entry(fd).map_or(0, |e| e.flags.load(Ordering::Relaxed));
    // (A TCP socket's SO_REUSEADDR: bit 1, see `op::BIND`.)
    let reuseaddr = f & (fl::DGRAM | fl::REUSEADDR) == fl::REUSEADDR;
    let share_bits = u64::from(share(f)) | u64::from(reuseaddr) << 1;
    let then = (op::BIND, pack(ip, port) as i64, share_bits);
    let bound = match again {
        Some(sk) => match state::request(a, Msg::new(then.0, sk.s, then.1, then.2), &[]).a {
            e if e < 0 => Err(-e as c_int),
            _ => {
                state::flag_socket(sk, fl::UNBOUND, false);
                state::flag_socket(sk, fl::BOUND_ANY, ip == 0);
                Ok(true)
            }
        },
        None => become_ixora(fd, a, then),
    };
    match bound {
        Ok(_) => {
            if ip == 0 {
                if let Some(sk) = state::sock(fd) {
                    state::flag_socket(sk, fl::BOUND_ANY, true);
                }
                // A UDP socket on any address receives at the kernel's
                // own addresses too (a TCP socket does once it listens).
                if let Some(sk) = state::sock(fd).filter(|sk| sk.dgram()) {
                    open_kernel_side(fd, sk, None);
                }
            }
            0
        }
        Err(e) => fail(e),
    }
}

/// The port kernel socket `fd` is bound to (0: none, or not a socket).
fn kernel_port(fd: c_int) -> u16 {
    // SAFETY: sockaddr_storage is plain data; all zeroes is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&ss) as socklen_t;
    let p = &mut ss as *mut libc::sockaddr_storage as *mut sockaddr;
    if real!(getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, p, &mut len) != 0 {
        return 0;
    }
    // (sin_port and sin6_port are at the same offset.)
    // SAFETY: the kernel wrote an AF_INET or AF_INET6 address there (or
    // left zeroes): its port field is in bounds either way.
    u16::from_be(unsafe { (*(p as *const libc::sockaddr_in)).sin_port })
}

/// A kernel socket (UDP, raw, ...) failed to bind to Ixora's address,
/// which the kernel does not own: say why once per process, on standard
/// error (the program only sees `EADDRNOTAVAIL`). errno is kept.
fn explain_not_served(fd: c_int, ip: u32, port: u16) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(a) = state::attach() else { return };
    if ip != a.ip || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let e = errno();
    let what = match kernel_int_opt(fd, libc::SOL_SOCKET, libc::SO_TYPE) {
        Some(libc::SOCK_DGRAM) => "an IPv6-only UDP socket",
        Some(libc::SOCK_RAW) => "a raw socket",
        _ => "a socket Ixora does not serve",
    };
    let m = format!(
        "ixora-preload: {what} cannot bind to {}:{port}: Ixora serves TCP and UDP over \
         IPv4 only, so this socket stays the kernel's, and the kernel does not own Ixora's \
         address (EADDRNOTAVAIL)\n",
        std::net::Ipv4Addr::from(ip)
    );
    crate::real::sys_write(2, m.as_bytes());
    set_errno(e);
}

/// listen(2).
#[no_mangle]
pub extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if state::kind_of(fd) == kind::MAYBE {
        // Listening unbound binds to any address and a free port (as
        // Linux does): a socket on any address is Ixora's.
        auto_bind(fd);
    }
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || real!(listen: fn(c_int, c_int) -> c_int)(fd, backlog));
    };
    count(sk.a, call("listen"), false);
    // As Linux: capped at `net.core.somaxconn` (its default, 4096; a
    // negative backlog reads as the cap), 0 meaning one connection.
    let b = if !(0..=SOMAXCONN).contains(&backlog) {
        SOMAXCONN
    } else {
        backlog
    };
    let r = state::request(sk.a, Msg::new(op::LISTEN, sk.s, b as i64, 0), &[]);
    if r.a < 0 {
        return fail(-r.a as c_int);
    }
    state::flag_socket(sk, fl::LISTENING, true);
    listen_kernel_too(fd, sk, b);
    0
}

/// A listener on any address takes connections to the kernel's own
/// addresses too (127.0.0.1, `::1`, other interfaces), as on Linux: see
/// [`open_kernel_side`]. `listen` again gives both sides the new backlog.
fn listen_kernel_too(fd: c_int, sk: Sock, backlog: c_int) {
    let flags = sk.e.flags.load(Ordering::Relaxed);
    if flags & fl::BOUND_ANY == 0 || sk.dgram() {
        return;
    }
    // (A bound socket another process handed over to several: the file
    // is shared, and the first to listen gave it its kernel side.)
    if flags & fl::KSIDE != 0
        || (flags & fl::PASSED != 0 && crate::handover::int_opt(fd, libc::SO_ACCEPTCONN) == Some(1))
    {
        real!(listen: fn(c_int, c_int) -> c_int)(fd, backlog);
        state::flag_socket(sk, fl::KSIDE, true);
        return;
    }
    open_kernel_side(fd, sk, Some(backlog));
}

/// Give socket `sk` on any address its kernel side, as Linux serves such
/// a socket at every address of the host: its descriptor — the kernel
/// socket it was made as — binds to the same port on any address and,
/// for a listener, listens (`backlog`); a UDP socket also asks for each
/// datagram's destination (`IP_PKTINFO`, for `recvmsg`). The descriptor
/// is made non-blocking in the kernel (the shim decides when to wait).
/// `accept`, the receive calls, `poll`/`select` and `epoll` then take
/// from both sides; a TCP connection accepted there is a kernel
/// descriptor from then on, and a UDP socket sends to an address only the
/// kernel reaches from it. If the kernel refuses (a kernel program holds
/// the port), the socket serves Ixora's address alone and the program is
/// told why on standard error.
fn open_kernel_side(fd: c_int, sk: Sock, backlog: Option<c_int>) {
    let mut bound = kernel_bind_like(fd, sk) == 0;
    if !bound && errno() == libc::EINVAL && sk.dgram() {
        // Bound already: Linux binds a UDP socket to a port of its own at
        // any send, also one it refused for want of an address while the
        // socket was undecided. A new kernel socket takes the socket's.
        renew_kernel_socket(sk, &state::descriptors(sk));
        bound = kernel_bind_like(fd, sk) == 0;
    }
    let ok = bound
        && match backlog {
            Some(b) => real!(listen: fn(c_int, c_int) -> c_int)(fd, b) == 0,
            // (A dual-stack socket's kernel side hands the kernel's own
            // addresses and control data to the program: IP_PKTINFO only
            // if it asked.)
            None => {
                let on = !sk.inet6() || sk.e.flags.load(Ordering::Relaxed) & fl::PKTINFO != 0;
                kernel_set_int_opt(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, c_int::from(on)) == 0
            }
        };
    if !ok {
        let e = errno();
        explain_no_kernel_side(sk, e);
        set_errno(e);
        return;
    }
    kernel_nonblock(fd, true);
    // Every descriptor of this process that names the socket (a dup made
    // before listen shares the kernel socket).
    state::flag_socket(sk, fl::KSIDE, true);
    // Epoll sets that watched the socket before.
    state::epoll_interest_kernel(sk.s, sk.gen(), true, &mut |epfd, fd, events, data| {
        let mut ev = epoll_event {
            events: kernel_side_events(events),
            u64: data,
        };
        real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(
            epfd,
            libc::EPOLL_CTL_ADD,
            fd,
            &mut ev,
        ) == 0
    });
}

/// The kernel refused `sk`'s kernel side (`e`): say so once per process,
/// on standard error; the program's call still succeeds (Ixora's address
/// is served).
fn explain_no_kernel_side(sk: Sock, e: c_int) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let port = unpack(sk.a.r.down_slot(sk.s).local.load(Ordering::Relaxed)).1;
    let (what, takes) = if sk.dgram() {
        ("UDP socket", "datagrams")
    } else {
        ("listener", "connections")
    };
    let m = format!(
        "ixora-preload: the kernel refused port {port} of its own addresses ({}): this {what} \
         takes {takes} at {}:{port} (Ixora) only, not at 127.0.0.1 or the kernel's other \
         addresses\n",
        std::io::Error::from_raw_os_error(e),
        std::net::Ipv4Addr::from(sk.a.ip)
    );
    crate::real::sys_write(2, m.as_bytes());
}

/// Make undecided TCP socket `fd` Ixora's, bound to any address and a
/// free port, unless it must stay the kernel's (IPv6-only, not attached);
/// errors leave it undecided (the kernel's `listen` then decides).
fn auto_bind(fd: c_int) {
    let Some(e) = state::entry(fd) else { return };
    let flags = e.flags.load(Ordering::Relaxed);
    if flags & (fl::DGRAM | fl::V6ONLY) != 0 {
        return;
    }
    let Some(a) = state::attach() else { return };
    let reuseport = flags & fl::REUSEPORT != 0;
    let bound = become_ixora(fd, a, (op::BIND, pack(0, 0) as i64, u64::from(reuseport)));
    if let (Ok(_), Some(sk)) = (bound, state::sock(fd)) {
        state::flag_socket(sk, fl::BOUND_ANY, true);
    }
}

/// Linux's default `net.core.somaxconn`: the most a `listen` backlog is.
const SOMAXCONN: c_int = 4096;

/// accept4(2).
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(sk) = state::sock(fd) else {
        return kernel_read_fd(fd, 0, || {
            real!(accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int)(
                fd, addr, len, flags,
            )
        });
    };
    let shut = || sk.shut_rd();
    if sk.state() != st::LISTEN || shut() {
        count(sk.a, call("accept"), true);
        return fail(if sk.dgram() {
            libc::EOPNOTSUPP
        } else {
            libc::EINVAL
        });
    }
    let mut user = true;
    let mut start = None; // when the call first waits
    let kside = kernel_side(sk);
    let mut woken_by_kernel = false;
    loop {
        // A connection to one of the kernel's addresses: a kernel socket.
        // Asked also whenever Ixora's queue is empty, before EAGAIN: a
        // system call an accept can afford, for a connection the program
        // may know of without a poll that marked the watch.
        let ixora = sk.acceptable() > 0;
        if kside && (!ixora || kernel_side_first(sk, ixora, woken_by_kernel)) {
            // SAFETY: accept4(2)'s contract, passed on.
            if let Some(r) = unsafe { kernel_accept(sk, fd, addr, len, flags) } {
                return r;
            }
        }
        woken_by_kernel = false;
        // Pop an entry (several processes may share the listener).
        let u = sk.a.r.up_slot(sk.s);
        let head = u.acc_head.load(Ordering::Acquire);
        let queued = sk.acceptable();
        if queued > 0 {
            let ent = sk.a.r.acc_entry(sk.s, head).load(Ordering::Acquire);
            if u.acc_head
                .compare_exchange(
                    head,
                    head.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            let room = match sk.a.r.down_slot(sk.s).acc_room.load(Ordering::Relaxed) {
                0 => sk.a.r.acc_capacity(),
                r => r,
            };
            // Was the ring full (at the listener's backlog + 1) as the pop
            // took this entry? Then connections may wait in the stack's
            // queue for the room it made. Counted with the tail as it is
            // now, after the pop (never fewer than `queued`): the service
            // may have filled the ring since `queued` was read, and a look
            // taken only before the pop would then tell no one (the read's
            // race of `ring_was_filling`).
            let tail = sk.a.r.down_slot(sk.s).acc_tail.load(Ordering::Acquire);
            if tail.wrapping_sub(head) >= room {
                state::signal(sk.a, sk.s);
            }
            let (c, gen) = (ent as u32, (ent >> 32) as u32);
            if c >= sk.a.r.layout().slots || sk.a.r.down_slot(c).gen.load(Ordering::Acquire) != gen
            {
                continue; // gone before we took it
            }
            // Close-on-exec as asked (SOCK_CLOEXEC), as the kernel's
            // accept4 makes it: a placeholder made now is made so; a
            // pooled one is as its last socket left it (set if that is
            // not known to be right).
            let want = flags & libc::SOCK_CLOEXEC != 0;
            let (nfd, fresh) = state::placeholder(sk.a, want);
            if nfd < 0 {
                // Give the connection back to the service.
                sk.a.r
                    .up_slot(c)
                    .req
                    .fetch_or(layout::req::ABORT, Ordering::Release);
                state::signal(sk.a, c);
                count(sk.a, call("accept"), false);
                return -1;
            }
            let has = if fresh {
                Some(want)
            } else {
                state::entry(nfd).and_then(|e| fl::cloexec_of(e.flags.load(Ordering::Relaxed)))
            };
            let set = has != Some(want);
            if set {
                let v = if want { libc::FD_CLOEXEC } else { 0 };
                crate::real::sys3(libc::SYS_fcntl, nfd.into(), libc::F_SETFD.into(), v.into());
            }
            user &= !fresh && !set;
            state::hold(sk.a, c);
            let nb = if flags & libc::SOCK_NONBLOCK != 0 {
                fl::NONBLOCK
            } else {
                0
            };
            let inherit = sk.e.flags.load(Ordering::Relaxed)
                & (fl::NAGLE
                    | fl::KEEPALIVE
                    | fl::LINGER0
                    | fl::INET6
                    | fl::LOWAT
                    | fl::OOBINLINE
                    | fl::REUSEADDR
                    | fl::REUSEPORT);
            state::install(nfd, c, gen, nb | inherit | fl::cloexec(want));
            sk.a.inherit_opts((sk.s, sk.gen()), (c, gen));
            // SAFETY: the caller passes a writable address buffer and length
            // (or nulls), as accept(2) requires.
            unsafe {
                put_sa(
                    addr,
                    len,
                    sk.a.r.down_slot(c).remote.load(Ordering::Relaxed),
                    sk.inet6(),
                )
            };
            count(sk.a, call("accept"), user);
            return nfd;
        }
        // Non-blocking, or SO_RCVTIMEO passed: EAGAIN.
        let limit = sk.wait_limit(false, &mut start);
        if sk.nonblock() || limit == 0 {
            count(sk.a, call("accept"), true);
            return fail(libc::EAGAIN);
        }
        let mut kp = [pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let kslice: &mut [pollfd] = if kside { &mut kp } else { &mut [] };
        // (A listener handed to another process stops listening here.)
        let ok = state::block_until(
            sk.a,
            state::ms_limit(limit),
            OnSignal::RESTART,
            kslice,
            None,
            state::Interest::Exclusive(sk.s),
            &mut || sk.acceptable() > 0 || !sk.live() || sk.state() != st::LISTEN || shut(),
        );
        woken_by_kernel = kp[0].revents != 0;
        user &= !state::blocked_in_kernel();
        if !ok && errno() == libc::EINTR {
            count(sk.a, call("accept"), false);
            return -1;
        }
        if !sk.live() {
            return fail(libc::EBADF);
        }
        if sk.state() != st::LISTEN || shut() {
            count(sk.a, call("accept"), false);
            return fail(libc::EINVAL);
        }
    }
}

/// Whether an accept or receive on socket `sk`, which has a kernel side,
/// asks the kernel side now, before (or instead of) Ixora's queue, which
/// has something if `ixora`: when the last peek or FIONREAD described the
/// kernel side's next datagram (and not if it described Ixora's), when a
/// poll of the descriptor just said so (`woken`), when the watch says
/// something may wait there (every other look of this descriptor if
/// Ixora's queue has something too, so neither side starves), or, without
/// the watch, when Ixora's queue is empty. The watch is marked ready
/// whenever an `epoll_wait`, `poll` or `select` reports the kernel side,
/// so a program told of a connection or datagram there finds it even
/// while the watch's own completion lags.
fn kernel_side_first(sk: Sock, ixora: bool, woken: bool) -> bool {
    let f = sk.e.flags.load(Ordering::Relaxed);
    if woken || f & fl::NEXT_KERNEL != 0 {
        return true;
    }
    if ixora && f & fl::NEXT_IXORA != 0 {
        return false;
    }
    match crate::kwatch::side_maybe_ready(sk.fd) {
        Some(true) => !ixora || sk.e.flags.fetch_xor(fl::TURN, Ordering::Relaxed) & fl::TURN == 0,
        Some(false) => false,
        None => !ixora,
    }
}

/// Record which side the next receive of `sk` must take from: the one a
/// peek (or FIONREAD) just described (`peeked`: Some(kernel side?)), or
/// none after a receive that took its datagram.
fn next_side(sk: Sock, peeked: Option<bool>) {
    let (set, clear) = match peeked {
        Some(true) => (fl::NEXT_KERNEL, fl::NEXT_IXORA),
        Some(false) => (fl::NEXT_IXORA, fl::NEXT_KERNEL),
        None => (0, fl::NEXT_KERNEL | fl::NEXT_IXORA),
    };
    if sk.e.flags.load(Ordering::Relaxed) & (set | clear) != set {
        sk.e.flags.fetch_and(!clear, Ordering::Relaxed);
        sk.e.flags.fetch_or(set, Ordering::Relaxed);
    }
}

/// The kernel side of listener `sk` (descriptor `fd`, non-blocking in the
/// kernel): a connection to one of the kernel's addresses. None: none
/// waiting; else accept4's result.
///
/// # Safety
/// accept4(2)'s contract for `addr`/`len`.
unsafe fn kernel_accept(
    sk: Sock,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> Option<c_int> {
    crate::kwatch::side_asking(fd);
    let r = real!(accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int)(
        fd, addr, len, flags,
    );
    let e = errno();
    if r < 0 && (e == libc::EAGAIN || e == libc::ECONNABORTED) {
        return None;
    }
    // Taken (or failed: EMFILE, ...): there may be more.
    crate::kwatch::side_answered(fd, 1);
    count(sk.a, call("accept"), false);
    set_errno(e);
    Some(r)
}

/// accept(2).
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: same contract.
    unsafe { accept4(fd, addr, len, 0) }
}

/// Whether Ixora's service reaches `ip`: on its subnet, or through its
/// gateway (anything but loopback).
fn reaches(a: &state::Attached, ip: u32) -> bool {
    let mask = if a.prefix == 0 {
        0
    } else {
        u32::MAX << (32 - a.prefix)
    };
    ip & mask == a.ip & mask || (a.gateway != 0 && ip >> 24 != 127)
}

/// Whether `ip` is a broadcast address for the service: the limited
/// broadcast (255.255.255.255) or its subnet's directed broadcast.
fn broadcast(a: &state::Attached, ip: u32) -> bool {
    // /31 and /32 have no directed broadcast (RFC 3021).
    let host = u32::MAX.checked_shr(a.prefix).unwrap_or(0);
    ip == u32::MAX || (a.prefix < 31 && ip == a.ip | host)
}

/// SO_BROADCAST is set on `sk`.
fn may_broadcast(sk: Sock) -> bool {
    sk.e.flags.load(Ordering::Relaxed) & fl::BROADCAST != 0
}

/// connect(2) on an Ixora UDP socket: set its peer (`AF_UNSPEC`: remove
/// it). Done at once by the service.
unsafe fn connect_dgram(fd: c_int, sk: Sock, addr: *const sockaddr, len: socklen_t) -> c_int {
    count(sk.a, call("connect"), false);
    // SAFETY (caller): `len` readable bytes at `addr`.
    let unspec = !addr.is_null()
        && len as usize >= std::mem::size_of::<libc::sa_family_t>()
        && unsafe { (*addr).sa_family } == libc::AF_UNSPEC as libc::sa_family_t;
    let peer = if unspec {
        0
    } else {
        let bound_any = sk.e.flags.load(Ordering::Relaxed) & fl::BOUND_ANY != 0;
        // SAFETY (caller): as above.
        let dst = unsafe { dgram_dst(fd, addr, len) };
        let bc = dst.is_some_and(|(ip, _)| broadcast(sk.a, ip));
        let peer = match dst {
            // A broadcast peer: refused as a send to it would be; with
            // SO_BROADCAST and a kernel side, the kernel's (below).
            Some(_) if bc && !may_broadcast(sk) => return fail(libc::EACCES),
            Some(_) if bc && !kernel_side(sk) => return fail(libc::ENETUNREACH),
            Some((ip, port)) if ip != 0 && port != 0 && !bc && reaches(sk.a, ip) => {
                Some(pack(ip, port))
            }
            Some((_, 0)) => return fail(libc::EINVAL),
            // Only the kernel reaches it (`0.0.0.0` is the local host, as
            // on Linux; a broadcast): a socket bound on any address moves
            // there whole, as a TCP socket does.
            Some(_) if bound_any => None,
            Some((0, _)) => return fail(libc::EINVAL),
            Some(_) => return fail(libc::ENETUNREACH),
            // A real IPv6 peer, which only the kernel reaches: as above.
            // SAFETY (caller): as above.
            None if unsafe { is_inet6_addr(sk, addr, len) } => match bound_any {
                true => None,
                false => return fail(libc::ENETUNREACH),
            },
            None => return fail(libc::EAFNOSUPPORT),
        };
        let Some(peer) = peer else {
            return match connect_via_kernel(fd, sk) {
                Some(0) => {
                    real!(connect: fn(c_int, *const sockaddr, socklen_t) -> c_int)(fd, addr, len)
                }
                Some(r) => r,
                None => fail(libc::ENETUNREACH),
            };
        };
        peer
    };
    // (Disconnecting, bit 0 of `b` asks the service to give a port it
    // picked up; its reply's `b` says it did.)
    let r = state::request(
        sk.a,
        Msg::new(op::CONNECT, sk.s, peer as i64, u64::from(unspec)),
        &[],
    );
    if r.a < 0 {
        return fail(-r.a as c_int);
    }
    if peer != 0 && sk.e.flags.load(Ordering::Relaxed) & fl::UNBOUND != 0 {
        // (Given a port by the service, as it had none.)
        state::flag_socket(sk, fl::UNBOUND, false);
    } else if peer == 0 && r.b == 1 {
        // Unbound, on any address (as Linux's socket, its address reset
        // too): no kernel side until its next send binds it.
        if kernel_side(sk) {
            drop_kernel_side(sk);
        }
        state::flag_socket(sk, fl::UNBOUND | fl::BOUND_ANY, true);
        state::flag_socket(sk, fl::KSIDE_DROPPED, false);
        return 0;
    }
    // Connected, it receives only from its peer (Ixora's): its kernel side
    // goes. Disconnected, a socket bound to any address gets it back.
    // (Not a socket another descriptor or process holds too: their
    // views of the kernel socket would split; it keeps its kernel side.)
    let alone = sk.a.r.up_slot(sk.s).refs.load(Ordering::Acquire) == 1;
    let dropped = sk.e.flags.load(Ordering::Relaxed) & fl::KSIDE_DROPPED != 0;
    if peer != 0 && kernel_side(sk) && alone {
        drop_kernel_side(sk);
        sk.e.flags.fetch_or(fl::KSIDE_DROPPED, Ordering::Relaxed);
    } else if peer == 0 && dropped && !kernel_side(sk) {
        sk.e.flags.fetch_and(!fl::KSIDE_DROPPED, Ordering::Relaxed);
        open_kernel_side(fd, sk, None);
    }
    0
}

/// Take descriptor `fd` out of the real epoll instance `epfd` (true if it
/// was there).
fn kernel_epoll_del(epfd: c_int, fd: c_int) -> bool {
    let mut ev = epoll_event { events: 0, u64: 0 };
    real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(
        epfd,
        libc::EPOLL_CTL_DEL,
        fd,
        &mut ev,
    ) == 0
}

/// Take the kernel side of UDP socket `sk` away: its watches, its
/// registrations in this process's epoll sets, and the bound kernel
/// socket itself, replaced under its descriptors by an unbound one
/// ([`renew_kernel_socket`]).
fn drop_kernel_side(sk: Sock) {
    let fds = state::descriptors(sk);
    for &fd in &fds {
        crate::kwatch::side_forget(fd);
    }
    state::epoll_interest_kernel(sk.s, sk.gen(), false, &mut |epfd, fd, _, _| {
        kernel_epoll_del(epfd, fd);
        true
    });
    renew_kernel_socket(sk, &fds);
    state::flag_socket(sk, fl::KSIDE | fl::NEXT_KERNEL | fl::NEXT_IXORA, false);
}

/// Put one new unbound kernel socket of Ixora socket `sk`'s family and
/// type (a dual-stack one stays AF_INET6) under its descriptors `fds`
/// (this process's: duplicates share it, as they shared the old one),
/// each as close-on-exec as before; the old one closes unless a `fork`
/// child holds it.
fn renew_kernel_socket(sk: Sock, fds: &[c_int]) {
    let Ok(fresh) = scratch_socket(sk.e) else {
        return;
    };
    for &fd in fds {
        // (Not a duplicate another thread closed since the list was made:
        // its number may name another file now.)
        if fd != sk.fd && !state::sock(fd).is_some_and(|d| d.s == sk.s && d.gen() == sk.gen()) {
            continue;
        }
        let fdflags = real!(fcntl: fn(c_int, c_int; ...) -> c_int)(fd, libc::F_GETFD);
        let cloexec = if fdflags >= 0 && fdflags & libc::FD_CLOEXEC == 0 {
            0
        } else {
            libc::O_CLOEXEC
        };
        crate::real::sys_dup3(fresh, fd, cloexec);
    }
    crate::real::sys_close(fresh);
}

/// connect(2).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let real_connect =
        || real!(connect: fn(c_int, *const sockaddr, socklen_t) -> c_int)(fd, addr, len);
    match state::kind_of(fd) {
        kind::IXORA if state::sock(fd).is_some_and(|sk| sk.dgram()) => {
            // SAFETY: connect(2)'s contract on `addr`/`len`.
            return unsafe { connect_dgram(fd, state::sock(fd).unwrap(), addr, len) };
        }
        kind::MAYBE => {}
        kind::IXORA if state::sock(fd).is_some_and(|sk| sk.state() == st::OPEN) => {
            // Bound before it connects: the service connects it from its
            // port. Bound to Ixora's address, it reaches only Ixora's world.
            let sk = state::sock(fd).unwrap();
            // SAFETY: the caller passes `len` readable bytes at `addr`.
            let to = unsafe { ixora_addr(fd, addr, len) };
            let Some((ip, port)) = to.filter(|&(ip, _)| ip != 0 && reaches(sk.a, ip)) else {
                // Only the kernel reaches it (loopback, `0.0.0.0`, a real
                // IPv6 address): a well-formed address of the socket's own
                // family moves it there; anything else fails as before.
                // SAFETY: as above.
                if to.is_some() || unsafe { is_inet6_addr(sk, addr, len) } {
                    if let Some(r) = connect_via_kernel(fd, sk) {
                        return if r == 0 { real_connect() } else { r };
                    }
                }
                return fail(libc::ENETUNREACH);
            };
            count(sk.a, call("connect"), false);
            return connect_request(sk, ip, port);
        }
        kind::IXORA => {
            let sk = state::sock(fd).unwrap();
            let flags = sk.e.flags.load(Ordering::Relaxed);
            if flags & fl::UNCONNECTED != 0 && sk.state() == st::CLOSED {
                // SAFETY: the caller passes `len` readable bytes at `addr`.
                return unsafe { reconnect(fd, sk, addr, len) };
            }
            count(sk.a, call("connect"), true);
            let in_progress = flags & fl::IN_PROGRESS != 0;
            if in_progress && sk.state() != st::CONNECTING {
                state::flag_socket(sk, fl::IN_PROGRESS, false);
            }
            return match sk.state() {
                st::CONNECTING => fail(libc::EALREADY),
                // The first connect to look after EINPROGRESS says it
                // is done, as Linux's (`__inet_stream_connect`); a
                // listener is "connected" there too.
                st::ESTABLISHED if in_progress => 0,
                // A connection that failed (or was reset) before a
                // connect call looked after EINPROGRESS: its error if no
                // call reported it yet, else ECONNABORTED, and the socket
                // is not connected from then on (Linux's `sock_error`).
                _ if in_progress && sk.dead() => {
                    state::flag_socket(sk, fl::UNCONNECTED, true);
                    fail(match sk.take_error() {
                        0 => libc::ECONNABORTED,
                        e => e,
                    })
                }
                // Connected (a connect said so, or it was accepted), then
                // closed or reset: still `SS_CONNECTED` to Linux.
                _ => fail(libc::EISCONN),
            };
        }
        _ => return kernel_fd(fd, real_connect),
    }
    // SAFETY: the caller passes `len` readable bytes at `addr`.
    let Some((ip, port)) = (unsafe { ixora_addr(fd, addr, len) }) else {
        return real_connect();
    };
    let Some(a) = state::attach() else {
        return real_connect();
    };
    // 0.0.0.0 (or `::`) means this host's kernel. Ixora's own address is
    // Ixora's: the service loops the connection inside its stack.
    if !reaches(a, ip) || ip == 0 {
        state::decide_kernel(fd);
        return real_connect();
    }
    if port == 0
        && state::entry(fd).is_some_and(|e| e.flags.load(Ordering::Relaxed) & fl::DGRAM != 0)
    {
        count(a, call("connect"), false);
        return fail(libc::EINVAL);
    }
    match become_ixora(fd, a, (op::CONNECT, pack(ip, port) as i64, 0)) {
        Ok(asked) => count(a, call("connect"), !asked),
        Err(e) => {
            count(a, call("connect"), false);
            return fail(e);
        }
    }
    let sk = state::sock(fd).unwrap();
    if sk.dgram() {
        return 0;
    }
    connect_wait(sk)
}

/// connect(2) of a TCP socket bound to any address (so Ixora's) towards a
/// destination only the kernel reaches: as on Linux, where such a socket
/// may connect anywhere, it becomes the kernel's. Its descriptor is still
/// the kernel socket it was made as, never bound: the kernel socket is
/// bound to the same port on any address and given the options the
/// program set, and the Ixora socket is closed; the caller then connects
/// it. Some(0) when it moved, Some(-1) with errno when the kernel refused
/// the bind (the socket stays Ixora's), None when the socket is not one
/// that moves: bound to Ixora's address (that reaches only Ixora's world),
/// or held by another descriptor or process (a dup, a fork), whose view
/// of the socket would split.
fn connect_via_kernel(fd: c_int, sk: Sock) -> Option<c_int> {
    let flags = sk.e.flags.load(Ordering::Relaxed);
    // A socket with a kernel side is bound there already.
    let bound = flags & fl::KSIDE != 0;
    if flags & fl::BOUND_ANY == 0 {
        return None;
    }
    // Epoll sets watching it (registered before the connect, as nginx
    // does) will watch the kernel socket: their items are taken first, so
    // that no scan drops them as closed meanwhile.
    let gen = sk.gen();
    let taken = state::take_epoll_interest(fd, sk.s, gen);
    // The descriptor is the kernel's from here on, so that a dup or fork
    // in another thread now copies a kernel socket; a holder that came
    // before shows in the count, and then the socket stays Ixora's.
    sk.e.kind.store(kind::NONE, Ordering::Release);
    if sk.a.r.up_slot(sk.s).refs.load(Ordering::Acquire) != 1 {
        sk.e.kind.store(kind::IXORA, Ordering::Release);
        state::restore_epoll_interest(taken);
        return None;
    }
    count(sk.a, call("connect"), false);
    if !bound && kernel_bind_like(fd, sk) < 0 {
        let e = errno();
        sk.e.kind.store(kind::IXORA, Ordering::Release);
        state::restore_epoll_interest(taken);
        set_errno(e);
        return Some(-1);
    }
    kernel_nonblock(fd, flags & fl::NONBLOCK != 0);
    for (epfd, ep, it) in taken {
        let mut ev = epoll_event {
            // A one-shot item already reported stays silent (the kernel
            // keeps such an item with no events).
            events: if it.disabled {
                libc::EPOLLONESHOT as u32
            } else {
                it.events
            },
            u64: it.data,
        };
        // A kernel side registered already (and counted) gets the whole
        // interest, writability included.
        let opn = if it.kernel {
            libc::EPOLL_CTL_MOD
        } else {
            libc::EPOLL_CTL_ADD
        };
        let r = real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(
            epfd, opn, fd, &mut ev,
        );
        if r == 0 && !it.kernel {
            ep.lock().unwrap_or_else(|p| p.into_inner()).kernel += 1;
        }
    }
    if sk.dgram() {
        // The kernel socket as the program set it: no watch of ours, and
        // IP_PKTINFO only if it asked.
        crate::kwatch::side_forget(fd);
        let v = c_int::from(flags & fl::PKTINFO != 0);
        kernel_set_int_opt(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, v);
    }
    state::release_sock(sk);
    Some(0)
}

/// Give kernel socket `fd` (the descriptor of Ixora socket `sk`, bound
/// to any address) the plain-value options the program set on `sk` and
/// bind it to `sk`'s port on any address of its family. Returns bind's
/// result (errno set on failure).
fn kernel_bind_like(fd: c_int, sk: Sock) -> c_int {
    let setopt = real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int);
    for ((level, name), v) in sk.a.opts(sk.s, sk.gen()) {
        // Values only (no pointers or descriptors, none cut short), as
        // the program set them; the kernel refuses what it refused.
        if replayable(level, name) {
            setopt(
                fd,
                level,
                name,
                v.as_ptr() as *const c_void,
                v.len() as socklen_t,
            );
        }
    }
    let port = unpack(sk.a.r.down_slot(sk.s).local.load(Ordering::Relaxed)).1;
    // SAFETY: sockaddr_storage is plain data, valid when zeroed.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let sa = &mut ss as *mut libc::sockaddr_storage as *mut sockaddr;
    // SAFETY: `sa`/`len` describe `ss`, which a sockaddr_in6 fits.
    unsafe { put_sa(sa, &mut len, pack(0, port), sk.inet6()) };
    real!(bind: fn(c_int, *const sockaddr, socklen_t) -> c_int)(fd, sa, len)
}

/// Options whose kept value can be given to a kernel socket as it is:
/// plain values, none longer than the shim keeps (a filter program holds
/// pointers, an eBPF one a descriptor, an MD5 key is longer).
fn replayable(level: c_int, name: c_int) -> bool {
    match level {
        libc::SOL_SOCKET => matches!(
            name,
            libc::SO_REUSEADDR
                | libc::SO_REUSEPORT
                | libc::SO_KEEPALIVE
                | libc::SO_RCVBUF
                | libc::SO_SNDBUF
                | libc::SO_RCVLOWAT
                | libc::SO_LINGER
                | libc::SO_RCVTIMEO
                | libc::SO_SNDTIMEO
                | libc::SO_PRIORITY
                | libc::SO_MARK
                | libc::SO_OOBINLINE
                | libc::SO_BROADCAST
                | tstamp::SO_TIMESTAMP
                | tstamp::SO_TIMESTAMPNS
                | tstamp::SO_TIMESTAMPING
                | tstamp::SO_TIMESTAMP_NEW
                | tstamp::SO_TIMESTAMPNS_NEW
                | tstamp::SO_TIMESTAMPING_NEW
        ),
        libc::IPPROTO_TCP => matches!(
            name,
            libc::TCP_NODELAY
                | libc::TCP_KEEPIDLE
                | libc::TCP_KEEPINTVL
                | libc::TCP_KEEPCNT
                | libc::TCP_USER_TIMEOUT
                | libc::TCP_MAXSEG
                | libc::TCP_CORK
                | libc::TCP_QUICKACK
                | libc::TCP_SYNCNT
                | libc::TCP_LINGER2
                | libc::TCP_NOTSENT_LOWAT
                | libc::TCP_CONGESTION
        ),
        libc::IPPROTO_IP => matches!(
            name,
            libc::IP_TOS
                | libc::IP_TTL
                | libc::IP_MULTICAST_IF
                | libc::IP_MULTICAST_TTL
                | libc::IP_MULTICAST_LOOP
                | libc::IP_MULTICAST_ALL
                | libc::IP_RECVTOS
                | libc::IP_RECVTTL
        ),
        libc::IPPROTO_IPV6 => matches!(name, libc::IPV6_TCLASS | libc::IPV6_UNICAST_HOPS),
        _ => false,
    }
}

/// An IPv4 multicast membership option (join, leave, source filters).
fn membership(name: c_int) -> bool {
    matches!(
        name,
        libc::IP_ADD_MEMBERSHIP
            | libc::IP_DROP_MEMBERSHIP
            | libc::IP_ADD_SOURCE_MEMBERSHIP
            | libc::IP_DROP_SOURCE_MEMBERSHIP
            | libc::IP_BLOCK_SOURCE
            | libc::IP_UNBLOCK_SOURCE
            | libc::MCAST_JOIN_GROUP
            | libc::MCAST_LEAVE_GROUP
            | libc::MCAST_JOIN_SOURCE_GROUP
            | libc::MCAST_LEAVE_SOURCE_GROUP
            | libc::MCAST_BLOCK_SOURCE
            | libc::MCAST_UNBLOCK_SOURCE
            | libc::MCAST_MSFILTER
    )
}

/// A multicast membership asked of an Ixora socket without a kernel side
/// (bound to the service's address): refused with `ENODEV`; say why once
/// per process on standard error.
fn no_multicast(fd: c_int) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::real::say_once(
        &SAID,
        &format!(
            "ixora-preload: descriptor {fd} asked to join a multicast group; Ixora serves no \
             multicast yet, and a socket bound to its address has no kernel side to join \
             through (bind to 0.0.0.0 to receive groups on the kernel's interfaces): ENODEV\n"
        ),
    );
}

/// An io_uring set up through the C library's `syscall` (Rust's
/// `io-uring` crate and other ring code of a program's own; liburing makes
/// the system call itself, and `ixora run` names a program that links
/// it): say once per process, when attached, that socket I/O submitted to
/// it does not reach Ixora. The kernel carries such a receive or send out
/// on the socket's kernel placeholder, an unconnected socket: it fails
/// there (measured 2026-11-29: `IORING_OP_SEND` `EPIPE`, `IORING_OP_RECV`
/// `ENOTCONN`).
fn io_uring_named() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    // (The shim's own ring, `kwatch`, makes its system calls directly,
    // past this interposer: its crate's `direct-syscall`.)
    if state::attached().is_some() {
        crate::real::say_once(
            &SAID,
            "ixora-preload: this program sets up an io_uring: a receive or send it submits \
             there on an Ixora socket is carried out by the kernel on the socket's kernel \
             placeholder, not by Ixora, and fails (a send EPIPE, a receive ENOTCONN); its \
             socket calls through the C library are served\n",
        );
    }
}

/// The IPv4 destination of a datagram on UDP socket `fd`: as
/// [`ixora_addr`], and on a dual-stack socket an AF_INET address too
/// (Linux sends to one from an AF_INET6 UDP socket that is not
/// IPv6-only). None: a real IPv6 address, or a malformed one.
///
/// # Safety
/// `len` readable bytes at `addr`.
unsafe fn dgram_dst(fd: c_int, addr: *const sockaddr, len: socklen_t) -> Option<(u32, u16)> {
    // SAFETY (caller): as above.
    unsafe { ixora_addr(fd, addr, len) }.or_else(|| {
        let f = state::entry(fd)?.flags.load(Ordering::Relaxed);
        // SAFETY (caller): as above.
        (f & (fl::INET6 | fl::V6ONLY) == fl::INET6)
            .then(|| unsafe { sa_of(addr, len, false) })
            .flatten()
    })
}

/// Whether `addr` is a whole `sockaddr_in6` and `sk` an AF_INET6 socket
/// (a real IPv6 destination, which only the kernel reaches).
///
/// # Safety
/// `len` readable bytes at `addr` (connect(2)'s contract).
unsafe fn is_inet6_addr(sk: Sock, addr: *const sockaddr, len: socklen_t) -> bool {
    sk.inet6()
        && !addr.is_null()
        && len as usize >= std::mem::size_of::<libc::sockaddr_in6>()
        // SAFETY (caller): at least a sockaddr_in6's bytes are readable.
        && unsafe { (*addr).sa_family } == libc::AF_INET6 as libc::sa_family_t
}

/// The rest of connect(2) once the service started the handshake:
/// EINPROGRESS on a non-blocking socket, else wait for it to end.
fn connect_wait(sk: Sock) -> c_int {
    // SO_SNDTIMEO bounds a blocking connect: EINPROGRESS once it passes.
    let mut start = None; // when the call first waits
    loop {
        let limit = sk.wait_limit(true, &mut start);
        if sk.nonblock() || limit == 0 {
            state::flag_socket(sk, fl::IN_PROGRESS, true);
            return fail(libc::EINPROGRESS);
        }
        set_errno(0);
        block_on_change(sk, limit, &mut || sk.state() != st::CONNECTING);
        if sk.state() != st::CONNECTING {
            break;
        }
        if errno() == libc::EINTR {
            state::flag_socket(sk, fl::IN_PROGRESS, true);
            return fail(libc::EINTR);
        }
        // Still connecting: the time ran out (the next turn says so), or
        // the wait saw a change that was not the end of the connect.
    }
    match sk.state() {
        st::ESTABLISHED => 0,
        // (The connect reports the failure: the socket is not connected
        // from then on, as Linux's `sock_error`.)
        _ => {
            state::flag_socket(sk, fl::UNCONNECTED, true);
            fail(match sk.take_error() {
                0 => libc::ECONNREFUSED,
                e => e,
            })
        }
    }
}

/// connect(2) of TCP socket `sk` (at `fd`), whose failed connection a
/// connect call reported ([`fl::UNCONNECTED`]): a new connection, as
/// Linux's. What its receive ring held is dropped (the service drops
/// what its transmit ring held); its options, and a port the program
/// bound it to, stay. A destination only the kernel reaches is refused
/// (`ENETUNREACH`), as for any socket bound to Ixora's address: the
/// socket stays Ixora's.
///
/// # Safety
/// `addr` points to `len` readable bytes.
unsafe fn reconnect(fd: c_int, sk: Sock, addr: *const sockaddr, len: socklen_t) -> c_int {
    count(sk.a, call("connect"), false);
    // SAFETY: the caller's contract.
    let to = unsafe { ixora_addr(fd, addr, len) };
    let Some((ip, port)) = to.filter(|&(ip, _)| ip != 0 && reaches(sk.a, ip)) else {
        return fail(libc::ENETUNREACH);
    };
    let up = sk.a.r.up_slot(sk.s);
    let tail = sk.a.r.down_slot(sk.s).rx_tail.load(Ordering::Acquire);
    up.rx_head.store(tail, Ordering::Release);
    up.seen.fetch_and(!1, Ordering::AcqRel);
    up.req.fetch_and(!layout::req::SHUT_WR, Ordering::AcqRel);
    state::flag_socket(sk, fl::UNCONNECTED | fl::IN_PROGRESS | fl::SHUT_RD, false);
    connect_request(sk, ip, port)
}

/// Ask the service to connect Ixora socket `sk` to `ip:port`, then wait
/// as connect(2) does ([`connect_wait`]).
fn connect_request(sk: Sock, ip: u32, port: u16) -> c_int {
    let r = state::request(
        sk.a,
        Msg::new(op::CONNECT, sk.s, pack(ip, port) as i64, 0),
        &[],
    );
    if r.a < 0 {
        return fail(-r.a as c_int);
    }
    connect_wait(sk)
}

/// Block (interruptibly, up to `limit` ms) until `ready()`, woken by
/// changes of `sk`'s socket: see [`state::block_until`].
fn block_on_change(sk: Sock, limit: c_int, ready: &mut dyn FnMut() -> bool) -> bool {
    state::block_until(
        sk.a,
        state::ms_limit(limit),
        OnSignal::INTERRUPT,
        &mut [],
        None,
        state::Interest::Slots {
            rx: &[sk.s],
            tx: &[],
        },
        ready,
    )
}

/// shutdown(2).
#[no_mangle]
pub extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || real!(shutdown: fn(c_int, c_int) -> c_int)(fd, how));
    };
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return fail(libc::EINVAL);
    }
    // (Linux's `inet_shutdown` ends the state a connect's EINPROGRESS
    // left, as the next connect would: that connect says EISCONN.)
    if sk.e.flags.load(Ordering::Relaxed) & fl::IN_PROGRESS != 0 {
        state::flag_socket(sk, fl::IN_PROGRESS, false);
    }
    if sk.state() == st::LISTEN {
        // As Linux: shutting a listener's reading side stops it listening
        // (a blocked accept returns EINVAL, so does every accept after);
        // its writing side is nothing. Connections the service took
        // meanwhile wait in its queue and are reset at the close.
        let mut user = true;
        if how != libc::SHUT_WR {
            sk.e.flags.fetch_or(fl::SHUT_RD, Ordering::Relaxed);
            state::note_local_change();
            if kernel_side(sk) {
                real!(shutdown: fn(c_int, c_int) -> c_int)(fd, how);
                user = false;
            }
            state::wake_blocked_on(sk.a, sk.s);
        }
        count(sk.a, call("shutdown"), user);
        return 0;
    }
    // Linux's socket is CLOSE once both FINs are through: ENOTCONN
    // (until 2026-11-29 Ixora said 0 then).
    let mut asked = false;
    if sk.state() != st::ESTABLISHED && sk.state() != st::CONNECTING
        || both_fins_through(sk, &mut asked)
    {
        count(sk.a, call("shutdown"), !asked);
        return fail(libc::ENOTCONN);
    }
    if how != libc::SHUT_WR {
        sk.e.flags.fetch_or(fl::SHUT_RD, Ordering::Relaxed);
        state::note_local_change();
        // A thread blocked reading returns 0 now, as on Linux.
        state::wake_blocked_on(sk.a, sk.s);
    }
    let mut user = true;
    if how != libc::SHUT_RD {
        sk.a.r
            .up_slot(sk.s)
            .req
            .fetch_or(layout::req::SHUT_WR, Ordering::Release);
        user = !state::signal(sk.a, sk.s);
    }
    count(sk.a, call("shutdown"), user);
    0
}

/// close(2).
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    match state::kind_of(fd) {
        kind::IXORA => {
            let sk = state::sock(fd).unwrap();
            let kheld = kernel_may_hold(sk);
            let sys = state::release_sock(sk);
            if kheld {
                // Its descriptor listens (or is bound) in the kernel:
                // closed, not pooled.
                crate::kwatch::side_forget(fd);
                count(sk.a, call("close"), false);
                return real!(close: fn(c_int) -> c_int)(fd);
            }
            let closed = state::pool(sk.a, fd);
            count(sk.a, call("close"), !sys && !closed);
            0
        }
        // Closed already (its placeholder waits in the pool).
        kind::POOLED => fail(libc::EBADF),
        // Our own descriptors: a program closing everything (daemons do)
        // must not take them.
        kind::INTERNAL => 0,
        k => {
            if k == kind::MAYBE || k == kind::NETLINK {
                if let Some(e) = state::entry(fd) {
                    e.kind.store(kind::NONE, Ordering::Release);
                }
            }
            if k == kind::NETLINK {
                crate::netlink::forget(fd);
            }
            if state::epoll(fd).is_some() {
                state::epoll_forget(fd);
            }
            state::passthrough();
            real!(close: fn(c_int) -> c_int)(fd)
        }
    }
}

/// vfork(2), as `fork`. A vfork child runs in its parent's memory until
/// it execs, and the fork handlers do not run: every `close` the child
/// made before its exec (Python's `subprocess` closes the descriptors it
/// does not pass) released the *parent's* Ixora sockets in the parent's
/// tables and counts — a program that started a subprocess lost its
/// listener. POSIX allows vfork to be fork; the child then joins the
/// application as any forked child does and leaves it at exec. (A fork
/// copies the page tables: starting a program costs a little more.)
/// `posix_spawn` needs nothing of this: its child closes and duplicates
/// inside the C library, where the shim is not called, in its own
/// descriptor table.
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: fork(2) has no arguments; the caller of vfork already
    // obeys stricter rules in the child than fork's.
    unsafe { libc::fork() }
}

/// syscall(3). libuv, and so Node.js, closes descriptors with
/// `syscall(SYS_close, fd)`, past `close`: an Ixora socket closed so was
/// never released (its connection stayed open, its slot taken: the
/// program ran out of sockets after `--slots` connections) and the shim
/// took the number, reused by the kernel, for the closed socket. So
/// `SYS_close` and `SYS_close_range` go to [`close`] and [`close_range`] (a `SYS_close`
/// of a descriptor the shim knows nothing of goes straight to the
/// kernel). Debian 12's libuv (1.44, under BIND's `named` and `dig`)
/// also receives and sends UDP with `syscall(SYS_recvmmsg)` and
/// `syscall(SYS_sendmmsg)` and duplicates with `syscall(SYS_dup3)`: on an
/// Ixora socket those reached its unconnected kernel placeholder (named's
/// receive found nothing while its epoll said readable, and spun; dig's
/// send failed with EDESTADDRREQ). So the socket calls the shim
/// interposes go to it when they name a descriptor it knows, and
/// `SYS_socket` and `SYS_epoll_create1` always; every other call goes to
/// the C library's `syscall` unchanged (`SYS_io_uring_setup` after a word
/// on standard error, [`io_uring_named`]; a change of credentials after
/// attaching, `crate::creds`).
///
/// `syscall` is variadic; this definition takes the most arguments a
/// system call has as fixed ones. On x86-64 and AArch64 Linux, variadic
/// integer arguments travel in the registers (and stack slot) of the
/// fixed ones, so each arrives where it was passed, and those the caller
/// did not pass are forwarded unused, as the C library's own `syscall`
/// loads all six.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let fd = a1 as c_int;
    // (Arguments are the caller's, as for the C library's calls.)
    let p = |a: c_long| a as usize;
    // SAFETY: each call gets the arguments the program passed for the
    // system call of that number, whose contract is the C function's.
    let k = shim_knows;
    let routed: Option<c_long> = unsafe {
        match n {
            libc::SYS_socket => Some(socket(fd, a2 as c_int, a3 as c_int) as c_long),
            libc::SYS_close_range => {
                Some(close_range(a1 as c_uint, a2 as c_uint, a3 as c_int) as c_long)
            }
            // (A close of a descriptor the shim knows nothing of goes
            // straight to the kernel.)
            libc::SYS_close if k(fd) => Some(close(fd) as c_long),
            libc::SYS_epoll_create1 => Some(epoll_create1(fd) as c_long),
            libc::SYS_io_uring_setup => {
                io_uring_named();
                None
            }
            // A futex wait (Rust's locks, condition variables and
            // channels) is a wait the shim does not see: an owed ring
            // goes first (see `waits`).
            libc::SYS_futex if is_futex_wait(a2 as c_int) => {
                state::kick_owed();
                None
            }
            // (A root process about to drop its privileges attaches
            // first: crate::creds.)
            libc::SYS_setuid
            | libc::SYS_setreuid
            | libc::SYS_setresuid
            | libc::SYS_setgid
            | libc::SYS_setregid
            | libc::SYS_setresgid
            | libc::SYS_setgroups => {
                crate::creds::before_change();
                None
            }
            // The rest only on a descriptor the shim knows; the guard is
            // looked at only for these numbers (futex, which Rust's locks
            // make through `syscall`, costs no look at the tables). A dup
            // onto one of ours must displace it.
            libc::SYS_bind if k(fd) => Some(bind(fd, p(a2) as _, a3 as socklen_t) as c_long),
            libc::SYS_listen if k(fd) => Some(listen(fd, a2 as c_int) as c_long),
            libc::SYS_connect if k(fd) => Some(connect(fd, p(a2) as _, a3 as socklen_t) as c_long),
            libc::SYS_accept if k(fd) => Some(accept(fd, p(a2) as _, p(a3) as _) as c_long),
            libc::SYS_accept4 if k(fd) => {
                Some(accept4(fd, p(a2) as _, p(a3) as _, a4 as c_int) as c_long)
            }
            libc::SYS_read if k(fd) => Some(read(fd, p(a2) as _, p(a3)) as c_long),
            libc::SYS_write if k(fd) => Some(write(fd, p(a2) as _, p(a3)) as c_long),
            libc::SYS_readv if k(fd) => Some(readv(fd, p(a2) as _, a3 as c_int) as c_long),
            libc::SYS_writev if k(fd) => Some(writev(fd, p(a2) as _, a3 as c_int) as c_long),
            libc::SYS_recvfrom if k(fd) => {
                Some(recvfrom(fd, p(a2) as _, p(a3), a4 as c_int, p(a5) as _, p(a6) as _) as c_long)
            }
            libc::SYS_sendto if k(fd) => Some(sendto(
                fd,
                p(a2) as _,
                p(a3),
                a4 as c_int,
                p(a5) as _,
                a6 as socklen_t,
            ) as c_long),
            libc::SYS_recvmsg if k(fd) => Some(recvmsg(fd, p(a2) as _, a3 as c_int) as c_long),
            libc::SYS_sendmsg if k(fd) => Some(sendmsg(fd, p(a2) as _, a3 as c_int) as c_long),
            libc::SYS_recvmmsg if k(fd) => {
                Some(recvmmsg(fd, p(a2) as _, a3 as c_uint, a4 as c_int, p(a5) as _) as c_long)
            }
            libc::SYS_sendmmsg if k(fd) => {
                Some(sendmmsg(fd, p(a2) as _, a3 as c_uint, a4 as c_int) as c_long)
            }
            libc::SYS_shutdown if k(fd) => Some(shutdown(fd, a2 as c_int) as c_long),
            libc::SYS_getsockopt if k(fd) => {
                Some(getsockopt(fd, a2 as c_int, a3 as c_int, p(a4) as _, p(a5) as _) as c_long)
            }
            libc::SYS_setsockopt if k(fd) => {
                Some(
                    setsockopt(fd, a2 as c_int, a3 as c_int, p(a4) as _, a5 as socklen_t) as c_long,
                )
            }
            libc::SYS_getsockname if k(fd) => {
                Some(getsockname(fd, p(a2) as _, p(a3) as _) as c_long)
            }
            libc::SYS_getpeername if k(fd) => {
                Some(getpeername(fd, p(a2) as _, p(a3) as _) as c_long)
            }
            libc::SYS_dup if k(fd) => Some(dup(fd) as c_long),
            libc::SYS_fcntl if k(fd) => Some(fcntl(fd, a2 as c_int, p(a3)) as c_long),
            libc::SYS_ioctl if k(fd) => Some(ioctl(fd, a2 as c_ulong, p(a3)) as c_long),
            libc::SYS_dup3 if k(fd) || k(a2 as c_int) => {
                Some(dup3(fd, a2 as c_int, a3 as c_int) as c_long)
            }
            libc::SYS_epoll_ctl if k(fd) => {
                Some(epoll_ctl(fd, a2 as c_int, a3 as c_int, p(a4) as _) as c_long)
            }
            libc::SYS_epoll_pwait if k(fd) => {
                Some(epoll_pwait(fd, p(a2) as _, a3 as c_int, a4 as c_int, p(a5) as _) as c_long)
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_epoll_wait if k(fd) => {
                Some(epoll_wait(fd, p(a2) as _, a3 as c_int, a4 as c_int) as c_long)
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_dup2 if k(fd) || k(a2 as c_int) => Some(dup2(fd, a2 as c_int) as c_long),
            _ => None,
        }
    };
    if let Some(r) = routed {
        return r;
    }
    // SAFETY: the program's own system call, passed on as given.
    let pass = || unsafe { crate::real::syscall_fn()(n, a1, a2, a3, a4, a5, a6) };
    match n {
        // A new process that shares nothing with this one but a copy of
        // it — a fork, made past the C library's `fork` (vsftpd starts
        // each session with `syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWIPC
        // | SIGCHLD, NULL)`), so without its `pthread_atfork` handlers: the
        // shim's run around it all the same (its copies of the sockets are
        // counted, it joins the application). Without this the child's
        // calls failed with EBADF and its close of the listener closed
        // the parent's.
        libc::SYS_clone if fork_like(a1 as u64) && a2 == 0 => state::around_raw_fork(pass),
        // SAFETY: clone3's first argument is a `clone_args` of `a2` bytes,
        // whose first word is the flags and sixth the stack.
        libc::SYS_clone3
            if a1 != 0
                && a2 as usize >= 6 * 8
                && unsafe {
                    let w = a1 as *const u64;
                    fork_like(w.read_unaligned()) && w.add(5).read_unaligned() == 0
                } =>
        {
            state::around_raw_fork(pass)
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_fork => state::around_raw_fork(pass),
        // SAFETY: prlimit64(2)'s arguments, as the C function takes them.
        libc::SYS_prlimit64 => unsafe {
            prlimit64(a1 as libc::pid_t, a2 as c_int, p(a3) as _, p(a4) as _) as c_long
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: setrlimit(2)'s arguments.
        libc::SYS_setrlimit => unsafe { setrlimit(a1 as c_int, p(a2) as _) as c_long },
        libc::SYS_seccomp => {
            // SECCOMP_SET_MODE_STRICT (0) or SECCOMP_SET_MODE_FILTER (1).
            if a1 == 0 || a1 == 1 {
                state::sandboxed_from_now();
            }
            pass()
        }
        _ => pass(),
    }
}

/// Whether `clone` flags make a forked process: neither the address space
/// nor the thread group shared (a thread, or a `vfork`-like child that
/// borrows this memory, is not one).
fn fork_like(flags: u64) -> bool {
    flags & (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_VFORK) as u64 == 0
}

/// A limit on this process's address space (`RLIMIT_AS`) the program
/// sets, widened by the bytes of the service's regions the shim maps (or
/// will map: it attaches to learn them), so that the program keeps the
/// budget it set for itself: vsftpd's session process limits itself to
/// 200 MB and Dovecot's to 256 MB, while the regions of the default 4,096
/// slots take about 540 MB, and their next `mmap` failed. Another
/// process's limit (`prlimit` with a pid) is left as given. A limit read
/// back shows the widened value.
fn widen_as(pid: libc::pid_t, res: c_int, rl: *const libc::rlimit) -> Option<libc::rlimit> {
    if res != libc::RLIMIT_AS as c_int
        || rl.is_null()
        || (pid != 0 && pid as u32 != std::process::id())
    {
        return None;
    }
    let l = state::attach()?.r.layout();
    let extra = (l.down_len() + l.up_len()) as libc::rlim_t;
    // (RLIM_INFINITY is the largest value: it stays infinite.)
    // SAFETY: a limit the caller gave (checked not null).
    let rl = unsafe { rl.read_unaligned() };
    Some(libc::rlimit {
        rlim_cur: rl.rlim_cur.saturating_add(extra),
        rlim_max: rl.rlim_max.saturating_add(extra),
    })
}

/// `set` with the limit `new` for process `pid`, widened if it is this
/// process's address space ([`widen_as`]).
fn with_limit(
    pid: libc::pid_t,
    res: c_int,
    new: *const libc::rlimit,
    set: impl FnOnce(*const libc::rlimit) -> c_int,
) -> c_int {
    let w = widen_as(pid, res, new);
    let r = set(w.as_ref().map_or(new, |w| w as *const libc::rlimit));
    if r == 0 && res == libc::RLIMIT_NOFILE as c_int && !new.is_null() {
        state::nofile_changed();
    }
    r
}

/// Whether futex(2) operation `op` waits (`FUTEX_WAIT`,
/// `FUTEX_WAIT_BITSET`, `FUTEX_WAIT_REQUEUE_PI`, `FUTEX_LOCK_PI[2]`), the
/// private and clock flags aside.
fn is_futex_wait(op: c_int) -> bool {
    matches!(
        op & !(libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME),
        libc::FUTEX_WAIT
            | libc::FUTEX_WAIT_BITSET
            | libc::FUTEX_WAIT_REQUEUE_PI
            | libc::FUTEX_LOCK_PI
            | libc::FUTEX_LOCK_PI2
    )
}

/// setrlimit(2): see [`widen_as`].
#[no_mangle]
pub unsafe extern "C" fn setrlimit(res: c_int, rl: *const libc::rlimit) -> c_int {
    with_limit(0, res, rl, |p| {
        real!(setrlimit: fn(c_int, *const libc::rlimit) -> c_int)(res, p)
    })
}

/// setrlimit64 (the same call under `_FILE_OFFSET_BITS=64`; on 64-bit
/// Linux the C library's two names are one function).
#[no_mangle]
pub unsafe extern "C" fn setrlimit64(res: c_int, rl: *const libc::rlimit) -> c_int {
    // SAFETY: the caller's contract, which is setrlimit's.
    unsafe { setrlimit(res, rl) }
}

/// prlimit(2): see [`widen_as`].
#[no_mangle]
pub unsafe extern "C" fn prlimit(
    pid: libc::pid_t,
    res: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    with_limit(pid, res, new, |p| {
        real!(prlimit: fn(libc::pid_t, c_int, *const libc::rlimit, *mut libc::rlimit) -> c_int)(
            pid, res, p, old,
        )
    })
}

/// prlimit64 (the same call under `_FILE_OFFSET_BITS=64`, one function
/// with `prlimit` on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn prlimit64(
    pid: libc::pid_t,
    res: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    // SAFETY: the caller's contract, which is prlimit's.
    unsafe { prlimit(pid, res, new, old) }
}

/// prctl(2): a seccomp filter (or strict mode) the program is about to
/// set on itself may kill it for the system calls the shim makes when it
/// blocks (state::sandboxed_from_now). Declared with the argument words a
/// variadic call passes on x86-64 and aarch64.
#[no_mangle]
pub extern "C" fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    if option == libc::PR_SET_SECCOMP {
        state::sandboxed_from_now();
    }
    real!(prctl: fn(c_int; ...) -> c_int)(option, a2, a3, a4, a5)
}

/// Whether the shim keeps anything for descriptor `fd` that a close must
/// see (an Ixora socket or its pooled placeholder, a descriptor of the
/// shim's own, an undecided socket, an epoll instance).
fn shim_knows(fd: c_int) -> bool {
    state::kind_of(fd) != kind::NONE || state::epoll(fd).is_some()
}

/// close_range(2): our own descriptors in the range are kept (the range is
/// split around them); Ixora sockets in it are released, pooled
/// placeholders forgotten, before the kernel closes the numbers.
#[no_mangle]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let real_cr = |a: c_uint, b: c_uint| -> c_int {
        crate::real::sys3(
            libc::SYS_close_range,
            a as c_long,
            b as c_long,
            flags as c_long,
        ) as c_int
    };
    if first > last {
        return fail(libc::EINVAL);
    }
    let cloexec_only = flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0;
    let top = (last as usize).min(state::MAXFD - 1) as c_uint;
    let mut lo = first;
    let mut fd = first;
    while fd <= top {
        match state::kind_of(fd as c_int) {
            kind::INTERNAL => {
                if fd > lo {
                    let r = real_cr(lo, fd - 1);
                    if r < 0 {
                        return r;
                    }
                }
                lo = fd + 1;
            }
            kind::IXORA if !cloexec_only => {
                if let Some(sk) = state::sock(fd as c_int) {
                    if kernel_may_hold(sk) {
                        crate::kwatch::side_forget(fd as c_int);
                    }
                    state::release_sock(sk);
                }
            }
            kind::POOLED if !cloexec_only => state::unpool(fd as c_int),
            k @ (kind::MAYBE | kind::NETLINK) if !cloexec_only => {
                if let Some(e) = state::entry(fd as c_int) {
                    e.kind.store(kind::NONE, Ordering::Release);
                }
                if k == kind::NETLINK {
                    crate::netlink::forget(fd as c_int);
                }
            }
            // (The kernel sets them close-on-exec below.)
            kind::IXORA | kind::POOLED | kind::MAYBE => state::note_cloexec(fd as c_int, true),
            _ => {}
        }
        if !cloexec_only && state::epoll(fd as c_int).is_some() {
            state::epoll_forget(fd as c_int);
        }
        fd += 1;
    }
    state::passthrough();
    if lo > last {
        return 0;
    }
    real_cr(lo, last)
}

/// closefrom(3): close_range(lowfd, ~0, 0) keeping our own descriptors.
#[no_mangle]
pub extern "C" fn closefrom(lowfd: c_int) {
    let _ = close_range(lowfd.max(0) as c_uint, c_uint::MAX, 0);
}

/// getsockname(2).
#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || {
            real!(getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, addr, len)
        });
    };
    if addr.is_null() || len.is_null() {
        count(sk.a, call("getsockname"), true);
        return fail(libc::EFAULT);
    }
    // A connect on a spare socket that the service has not taken up yet
    // has no local port: wait for it (Linux gives the port at once).
    let pending = || sk.a.r.up_slot(sk.s).req.load(Ordering::Acquire) & layout::req::CONNECT != 0;
    let waited = pending() && {
        block_on_change(sk, 1000, &mut || !pending());
        true
    };
    count(sk.a, call("getsockname"), !waited);
    // SAFETY: getsockname(2)'s contract.
    unsafe {
        let mut local = sk.a.r.down_slot(sk.s).local.load(Ordering::Relaxed);
        // A socket bound to any address reads it back as any until a
        // connection gives it one (Linux: 0.0.0.0, or `::`).
        if sk.e.flags.load(Ordering::Relaxed) & fl::BOUND_ANY != 0
            && matches!(sk.state(), st::OPEN | st::LISTEN)
        {
            local = pack(0, unpack(local).1);
        }
        put_sa(addr, len, local, sk.inet6())
    };
    0
}

/// Whether TCP socket `sk` shut its side, read its peer's FIN, and its
/// connection is through (TIME-WAIT, or closed): Linux's socket is then
/// CLOSE (`tcp_time_wait`, `tcp_done`), and `getpeername` says `ENOTCONN`.
/// The stack is asked (`asked`) only for a socket both ways shut:
/// TIME-WAIT begins with no event the service passes on.
fn both_fins_through(sk: Sock, asked: &mut bool) -> bool {
    if sk.dgram()
        || sk.flags() & layout::flag::EOF == 0
        || sk.a.r.up_slot(sk.s).req.load(Ordering::Acquire) & layout::req::SHUT_WR == 0
    {
        return false;
    }
    *asked = true;
    let (r, tail) = state::request_tail(sk.a, Msg::new(op::INFO, sk.s, 0, 0));
    // (7: Linux's TCP_CLOSE, which TIME-WAIT reads as; no connection left
    // at all says ENOTCONN.)
    r.a < 0 || TcpInfo::decode(&tail).is_some_and(|t| t.state == 7)
}

/// getpeername(2).
#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || {
            real!(getpeername: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)(fd, addr, len)
        });
    };
    if addr.is_null() || len.is_null() {
        count(sk.a, call("getpeername"), true);
        return fail(libc::EFAULT);
    }
    let remote = sk.a.r.down_slot(sk.s).remote.load(Ordering::Relaxed);
    let mut asked = false;
    let connected = remote != 0
        && matches!(sk.state(), st::ESTABLISHED | st::CONNECTING)
        && !both_fins_through(sk, &mut asked);
    count(sk.a, call("getpeername"), !asked);
    if !connected {
        return fail(libc::ENOTCONN);
    }
    // SAFETY: getpeername(2)'s contract.
    unsafe { put_sa(addr, len, remote, sk.inet6()) };
    0
}
