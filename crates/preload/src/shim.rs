//! The interposed C functions. Each looks up its descriptor: an Ixora
//! socket is served from shared memory; anything else goes to the C
//! library's own definition unchanged.
//!
//! Raw pointers come from the application exactly as the C library would
//! receive them; each function trusts them as far as the C function it
//! replaces would (a bad pointer faults in the application either way).

use crate::handover;
use crate::real::{errno, real, set_errno, sys_poll};
use crate::state::{self, fl, kind, Attached, Epoll, Item, OnSignal, Sock};
use ixora_channel::ctl::{op, Msg, TcpInfo};
use ixora_channel::layout::{self, call, pack, state as st, unpack};
use libc::{
    c_int, c_long, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, off_t,
    pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::sync::atomic::Ordering;

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
        limit,
        OnSignal::RESTART,
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

/// Whether a read that took `took` bytes out of the receive ring, which
/// held `before` when the call looked, must tell the service it made
/// room: when the ring was more than a quarter full, the service may hold
/// bytes (or a datagram) it had no room for, and it fills the ring again
/// only when told. `took` counts as well as `before`: the service may
/// fill the ring between the look and the read, and a read that found
/// the ring empty, then took a whole ring, told no one until 2026-11-28 —
/// the connection's last bytes stayed in the service, and the program
/// slept on an empty ring for good (about one run in 25 of the sockets
/// test `a_program_that_does_not_read_...`, after a full ring).
pub(crate) fn ring_was_filling(sk: Sock, before: u64, took: usize) -> bool {
    before.max(took as u64) > (sk.a.r.layout().ring as u64) / 4
}

/// Receive on an Ixora socket with recv(2) semantics. `MSG_WAITALL`
/// (blocking) goes on until the buffers are full, as Linux's
/// `tcp_recvmsg`: it returns less only at end of file, an error, a signal
/// or the receive timeout, and then what it got so far if anything (a
/// peek waits until the ring holds it all). `MSG_OOB`: the stack keeps no
/// urgent byte apart (the urgent pointer is ignored and the byte arrives
/// in line, as with `SO_OOBINLINE`), so, as Linux says then, `EINVAL`.
pub(crate) fn do_recv(sk: Sock, bufs: &mut [&mut [u8]], flags: c_int) -> ssize_t {
    if sk.dgram() {
        return do_recv_dgram(sk, bufs, flags, None).0;
    }
    if flags & libc::MSG_OOB != 0 {
        count(sk.a, call("read"), true);
        return fail(libc::EINVAL);
    }
    let peek = flags & libc::MSG_PEEK != 0;
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let want: usize = bufs.iter().map(|b| b.len()).sum();
    if want == 0 {
        return 0;
    }
    // What a blocking call waits for: all it asked (`MSG_WAITALL`), or
    // the low-water mark (`SO_RCVLOWAT`, as Linux's `sock_rcvlowat`), at
    // most what it asked. A non-blocking one takes what is there.
    let target = match (dontwait, flags & libc::MSG_WAITALL != 0) {
        (true, _) => 1,
        (false, true) => want,
        (false, false) => (sk.lowat() as usize).min(want),
    };
    let mut user = true;
    let mut start = None; // when the call first waits
    let mut got = 0; // what a read towards `target` took so far
    let done = || sk.flags() & (layout::flag::EOF | layout::flag::ERROR) != 0 || !sk.live();
    // A peek waits until the ring holds the target (or, for a low-water
    // mark, the ring can take no more).
    let peeked_enough = |have: usize| {
        have >= target || (flags & libc::MSG_WAITALL == 0 && sk.lowat_reached(have as u64))
    };
    loop {
        let before = sk.readable();
        let r = if peek && target > 1 && !peeked_enough(before as usize) && !done() {
            Err(libc::EAGAIN) // (not all there yet)
        } else if got == 0 {
            sk.recv(bufs, peek)
        } else {
            sk.recv(&mut rest_of(bufs, got), peek)
        };
        match r {
            Ok(n) => {
                if n > 0 && !peek && ring_was_filling(sk, before, n) && state::signal(sk.a, sk.s) {
                    user = false;
                }
                got += n;
                if !peek && n > 0 && got < target {
                    continue; // (the ring may hold more already)
                }
                count(sk.a, call("read"), user);
                return got as ssize_t;
            }
            Err(libc::EAGAIN) if !dontwait => {
                let ready = &mut || {
                    let have = sk.readable() as usize;
                    (if peek && target > 1 {
                        peeked_enough(have)
                    } else {
                        have > 0
                    }) || done()
                };
                if let Err(r) = wait_ring(sk, false, &mut start, &mut user, ready) {
                    // (A timeout or a signal after some bytes: those.)
                    return if got > 0 { got as ssize_t } else { r };
                }
            }
            Err(_) if got > 0 => {
                count(sk.a, call("read"), user);
                return got as ssize_t;
            }
            Err(e) => {
                count(sk.a, call("read"), user);
                return fail(e);
            }
        }
    }
}

/// Whether a receive with `flags` on Ixora socket `sk` discards rather
/// than copies: `MSG_TRUNC` (without `MSG_PEEK`) on TCP, where Linux's
/// `tcp_recvmsg` drops the bytes it would have copied (the buffer may be
/// null).
fn discards(sk: Sock, flags: c_int) -> bool {
    !sk.dgram() && flags & libc::MSG_TRUNC != 0 && flags & libc::MSG_PEEK == 0
}

/// Receive `n` bytes on TCP socket `sk` into nothing ([`discards`]): as
/// a read of that many (blocking, `MSG_WAITALL`, end of file alike).
/// Until 2026-11-29 a null buffer got `EFAULT` and any other one the
/// bytes (`socket_ops.c`).
fn discard(sk: Sock, n: size_t, flags: c_int) -> ssize_t {
    let flags = flags & !libc::MSG_TRUNC;
    let mut tmp = vec![0u8; n.min(sk.a.r.layout().ring as usize)];
    let mut got = 0;
    loop {
        let want = (n - got).min(tmp.len());
        let r = do_recv(sk, &mut [&mut tmp[..want]], flags);
        if r <= 0 {
            return if got > 0 { got as ssize_t } else { r };
        }
        got += r as usize;
        if got == n || flags & libc::MSG_WAITALL == 0 {
            return got as ssize_t;
        }
    }
}

/// What is left of `bufs` past their first `skip` bytes.
fn rest_of<'a>(bufs: &'a mut [&mut [u8]], mut skip: usize) -> Vec<&'a mut [u8]> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        out.push(&mut b[skip..]);
        skip = 0;
    }
    out
}

/// One datagram received: the result, the source ([`pack`]ed, or
/// [`KERNEL_WROTE`]), whether it was longer than the buffers
/// (`MSG_TRUNC`), and what its control data says ([`Ctl`]).
type Dgram = (ssize_t, u64, bool, Ctl);

/// What a datagram's control data says.
#[derive(Clone, Copy, Default)]
struct Ctl {
    /// For one that came in at the kernel's side, the kernel's
    /// `IP_PKTINFO` for it.
    dst: Option<libc::in_pktinfo>,
    /// When it was received, `CLOCK_REALTIME` ns (0: not known).
    stamp: u64,
}

/// The source of a [`Dgram`] taken at the kernel side of a dual-stack
/// socket by the kernel's own `recvmsg`, which wrote its address (an
/// IPv6 one: v4-mapped, or a real IPv6 peer such as `::1`) and control
/// data into the caller's [`Name`].
const KERNEL_WROTE: u64 = u64::MAX;

/// Where a receive call wants a datagram's address and control data: the
/// kernel side of a dual-stack socket lets the kernel fill them in.
struct Name {
    name: *mut c_void,
    len: socklen_t,
    control: *mut c_void,
    controllen: usize,
    flags: c_int,
}

impl Name {
    /// recvfrom's address buffer (None without one).
    ///
    /// # Safety
    /// recvfrom(2)'s contract: `alen` is null or readable, and `addr` has
    /// `*alen` writable bytes.
    unsafe fn of(addr: *mut sockaddr, alen: *mut socklen_t) -> Option<Name> {
        if addr.is_null() || alen.is_null() {
            return None;
        }
        Some(Name {
            name: addr as *mut c_void,
            // SAFETY (caller): `alen` is readable.
            len: unsafe { *alen },
            control: std::ptr::null_mut(),
            controllen: 0,
            flags: 0,
        })
    }

    /// recvmsg's name and control buffers.
    fn whole(m: &msghdr) -> Name {
        Name {
            name: m.msg_name,
            len: m.msg_namelen,
            control: m.msg_control,
            controllen: m.msg_controllen,
            flags: 0,
        }
    }

    /// What the kernel wrote, back into the caller's msghdr.
    fn back(&self, m: &mut msghdr) {
        if !m.msg_name.is_null() {
            m.msg_namelen = self.len;
        }
        m.msg_controllen = self.controllen as _;
        m.msg_flags = self.flags;
    }
}

/// One datagram from the kernel side of UDP socket `fd` (non-blocking in
/// the kernel) by the kernel's own recvmsg into `bufs` and the buffers of
/// `n`, which it updates (address and control lengths, flags); None if
/// none waits there. The source is [`KERNEL_WROTE`].
fn kernel_recv_into(
    fd: c_int,
    bufs: &mut [&mut [u8]],
    flags: c_int,
    n: &mut Name,
) -> Option<Dgram> {
    let mut iov: Vec<iovec> = bufs
        .iter_mut()
        .map(|b| iovec {
            iov_base: b.as_mut_ptr() as *mut c_void,
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: msghdr is plain data, valid when zeroed.
    let mut m: msghdr = unsafe { std::mem::zeroed() };
    m.msg_name = n.name;
    m.msg_namelen = if n.name.is_null() { 0 } else { n.len };
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = iov.len() as _;
    m.msg_control = n.control;
    m.msg_controllen = if n.control.is_null() {
        0
    } else {
        n.controllen as _
    };
    crate::kwatch::side_asking(fd);
    let keep = flags & (libc::MSG_PEEK | libc::MSG_TRUNC);
    // The buffers of `n` and `bufs`, which the caller's own call's
    // contract (or the caller) makes writable.
    let r = real!(recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t)(
        fd,
        &mut m,
        keep | libc::MSG_DONTWAIT,
    );
    let e = errno();
    if r < 0 && e == libc::EAGAIN {
        return None;
    }
    crate::kwatch::side_answered(fd, 1);
    set_errno(e);
    n.len = m.msg_namelen;
    n.controllen = m.msg_controllen;
    n.flags = m.msg_flags;
    Some((
        r,
        KERNEL_WROTE,
        r >= 0 && m.msg_flags & libc::MSG_TRUNC != 0,
        Ctl::default(),
    ))
}

/// Receive one datagram on an Ixora UDP socket with recvmsg(2)
/// semantics; one with a kernel side ([`fl::KSIDE`]) takes from both (on
/// a dual-stack socket the kernel writes that side's addresses into
/// `name`, when the call has one).
fn do_recv_dgram(
    sk: Sock,
    bufs: &mut [&mut [u8]],
    flags: c_int,
    mut name: Option<&mut Name>,
) -> Dgram {
    let peek = flags & libc::MSG_PEEK != 0;
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let mut user = true;
    let mut start = None; // when the call first waits
    let kside = kernel_side(sk);
    let fd = sk.fd;
    let mut woken_by_kernel = false;
    loop {
        if kside && kernel_side_first(sk, sk.readable() > 0, woken_by_kernel) {
            user = false;
            let got = match name.as_deref_mut() {
                Some(n) if sk.inet6() => kernel_recv_into(fd, bufs, flags, n),
                _ => kernel_recv_dgram(fd, bufs, flags),
            };
            next_side(sk, got.as_ref().filter(|g| g.0 >= 0 && peek).map(|_| true));
            if let Some(got) = got {
                count(sk.a, call("read"), false);
                return got;
            }
        }
        if sk.shut_rd() && sk.readable() == 0 {
            count(sk.a, call("read"), user);
            return (0, 0, false, Ctl::default());
        }
        let before = sk.readable();
        match sk.recv_dgram(bufs, peek) {
            Ok((n, full, src, stamp)) => {
                let took = layout::DGRAM_HDR + full;
                if !peek && ring_was_filling(sk, before, took) && state::signal(sk.a, sk.s) {
                    user = false;
                }
                count(sk.a, call("read"), user);
                // MSG_TRUNC: the datagram's real length, as Linux does.
                let r = if flags & libc::MSG_TRUNC != 0 {
                    full
                } else {
                    n
                };
                if kside {
                    next_side(sk, peek.then_some(false));
                }
                return (r as ssize_t, src, full > n, Ctl { dst: None, stamp });
            }
            Err(libc::EAGAIN) if !dontwait => {
                let ready = &mut || sk.readable() > 0 || sk.dead() || !sk.live();
                let mut kp = [pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let kslice: &mut [pollfd] = if kside { &mut kp } else { &mut [] };
                if let Err(r) = wait_ring_or(sk, false, &mut start, &mut user, kslice, ready) {
                    return (r, 0, false, Ctl::default());
                }
                woken_by_kernel = kp[0].revents != 0;
            }
            Err(e) => {
                count(sk.a, call("read"), user);
                return (fail(e), 0, false, Ctl::default());
            }
        }
    }
}

/// One datagram from the kernel side of an IPv4 UDP socket (descriptor
/// `fd`, non-blocking in the kernel), with recvmsg(2) semantics: its
/// source [`pack`]ed and its `IP_PKTINFO`; None if none waits there.
fn kernel_recv_dgram(fd: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> Option<Dgram> {
    // SAFETY: plain data, valid when zeroed.
    let mut src: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    // IP_PKTINFO (32 bytes with its header) and the timestamps the
    // program asked for (SCM_TIMESTAMPING: 64).
    let mut control = [0u64; 24];
    let mut n = Name {
        name: &mut src as *mut libc::sockaddr_in as *mut c_void,
        len: std::mem::size_of::<libc::sockaddr_in>() as socklen_t,
        control: control.as_mut_ptr() as *mut c_void,
        controllen: std::mem::size_of_val(&control),
        flags: 0,
    };
    let (r, _, trunc, _) = kernel_recv_into(fd, bufs, flags, &mut n)?;
    if r < 0 {
        return Some((r, 0, false, Ctl::default()));
    }
    let from = pack(
        u32::from_be(src.sin_addr.s_addr),
        u16::from_be(src.sin_port),
    );
    // SAFETY: msghdr is plain data, valid when zeroed.
    let mut m: msghdr = unsafe { std::mem::zeroed() };
    m.msg_control = n.control;
    m.msg_controllen = n.controllen as _;
    let mut ctl = Ctl::default();
    // SAFETY: the kernel wrote `controllen` bytes of control messages
    // into `control`, which `m` describes; CMSG_* walk within them, and
    // each message's data is as long as its type says.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    ctl.dst = Some(std::ptr::read_unaligned(data as *const libc::in_pktinfo));
                }
                // (On 64-bit Linux the old and new layouts are the same:
                // seconds and micro- or nanoseconds, 64 bits each.)
                (libc::SOL_SOCKET, t) if ctl.stamp == 0 => {
                    let ts = |i: usize| std::ptr::read_unaligned((data as *const i64).add(i));
                    ctl.stamp = match t {
                        tstamp::SCM_TIMESTAMP | tstamp::SCM_TIMESTAMP_NEW => {
                            wall_ns(ts(0), ts(1).saturating_mul(1000))
                        }
                        tstamp::SCM_TIMESTAMPNS
                        | tstamp::SCM_TIMESTAMPNS_NEW
                        | tstamp::SCM_TIMESTAMPING
                        | tstamp::SCM_TIMESTAMPING_NEW => wall_ns(ts(0), ts(1)),
                        _ => 0,
                    };
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
    }
    Some((r, from, trunc, ctl))
}

/// Receive timestamp options and control messages (asm-generic/socket.h,
/// linux/net_tstamp.h): each `SCM_*` type is its option's number.
mod tstamp {
    use std::ffi::c_int;
    pub const SO_TIMESTAMP: c_int = 29;
    pub const SO_TIMESTAMPNS: c_int = 35;
    pub const SO_TIMESTAMPING: c_int = 37;
    pub const SO_TIMESTAMP_NEW: c_int = 63;
    pub const SO_TIMESTAMPNS_NEW: c_int = 64;
    pub const SO_TIMESTAMPING_NEW: c_int = 65;
    pub const SCM_TIMESTAMP: c_int = SO_TIMESTAMP;
    pub const SCM_TIMESTAMPNS: c_int = SO_TIMESTAMPNS;
    pub const SCM_TIMESTAMPING: c_int = SO_TIMESTAMPING;
    pub const SCM_TIMESTAMP_NEW: c_int = SO_TIMESTAMP_NEW;
    pub const SCM_TIMESTAMPNS_NEW: c_int = SO_TIMESTAMPNS_NEW;
    pub const SCM_TIMESTAMPING_NEW: c_int = SO_TIMESTAMPING_NEW;
    /// `SOF_TIMESTAMPING_RX_SOFTWARE`, `_SOFTWARE`, `_OPT_RX_FILTER`.
    pub const RX_SOFTWARE: u32 = 1 << 3;
    pub const SOFTWARE: u32 = 1 << 4;
    pub const OPT_RX_FILTER: u32 = 1 << 17;
}

/// Nanoseconds of a `CLOCK_REALTIME` time (0 for one before 1970).
fn wall_ns(sec: i64, nsec: i64) -> u64 {
    u64::try_from(sec.saturating_mul(1_000_000_000).saturating_add(nsec)).unwrap_or(0)
}

/// Where a datagram of UDP socket `sk` goes.
enum Route {
    /// To the service, for this destination (None: the socket's peer).
    Service(Option<(u32, u16)>),
    /// The program's own call, by the kernel side ([`kernel_side_send`]).
    Kernel,
    /// Refused with this errno.
    Refused(c_int),
}

/// The route of a datagram of UDP socket `sk` (descriptor `fd`) to the
/// caller's address `addr` (`len` bytes; null: the socket's peer):
/// - a broadcast address ([`broadcast`]): `EACCES` without SO_BROADCAST,
///   as on Linux; with it, the kernel side (Ixora sends no broadcast: the
///   stack would look for the address's neighbour and drop the datagram);
/// - an address only the kernel reaches (`0.0.0.0` is the local host, as
///   on Linux), on a socket that has a kernel side, or a real IPv6 one:
///   the kernel side ([`kernel_side_send`] answers `ENETUNREACH` without
///   one);
/// - any other: the service; a malformed address: `EINVAL`.
///
/// # Safety
/// `len` readable bytes at `addr` (if not null).
unsafe fn dgram_route(fd: c_int, sk: Sock, addr: *const sockaddr, len: socklen_t) -> Route {
    if let Err(e) = bind_at_send(sk) {
        return Route::Refused(e);
    }
    if addr.is_null() {
        return Route::Service(None);
    }
    // SAFETY (caller): as above.
    match unsafe { dgram_dst(fd, addr, len) } {
        Some((ip, _)) if broadcast(sk.a, ip) => match may_broadcast(sk) {
            true => Route::Kernel,
            false => Route::Refused(libc::EACCES),
        },
        Some((ip, port)) if port != 0 && (ip == 0 || !reaches(sk.a, ip)) && kernel_side(sk) => {
            Route::Kernel
        }
        Some(d) => Route::Service(Some(d)),
        // SAFETY (caller): as above.
        None if unsafe { is_inet6_addr(sk, addr, len) } => Route::Kernel,
        None => Route::Refused(libc::EINVAL),
    }
}

/// A UDP socket that gave its port up at a disconnect ([`fl::UNBOUND`])
/// binds to any address and a free port at its next send, whatever the
/// send does then (Linux's `inet_send_prepare`: `EAGAIN` if it cannot),
/// and gets its kernel side back with it.
fn bind_at_send(sk: Sock) -> Result<(), c_int> {
    if sk.e.flags.load(Ordering::Relaxed) & fl::UNBOUND == 0 {
        return Ok(());
    }
    let r = state::request(sk.a, Msg::new(op::BIND, sk.s, pack(0, 0) as i64, 0), &[]);
    if r.a < 0 {
        // (Bound by another thread's send meanwhile: the service took
        // that one first.)
        let port = unpack(sk.a.r.down_slot(sk.s).local.load(Ordering::Acquire)).1;
        return if port != 0 { Ok(()) } else { Err(libc::EAGAIN) };
    }
    state::flag_socket(sk, fl::UNBOUND, false);
    open_kernel_side(sk.fd, sk, None);
    Ok(())
}

/// A datagram by the kernel side of UDP socket `sk` (its descriptor, a
/// kernel socket bound to the same port, non-blocking in the kernel), to
/// an address only the kernel reaches: `send(flags)` makes the program's
/// own call (its address and control data as it gave them) with these
/// flags; a blocking socket waits for room, as long as SO_SNDTIMEO lets
/// it. Without a kernel side, `ENETUNREACH`.
fn kernel_side_send(sk: Sock, flags: c_int, mut send: impl FnMut(c_int) -> ssize_t) -> ssize_t {
    count(sk.a, call("write"), false);
    if !kernel_side(sk) {
        return fail(libc::ENETUNREACH);
    }
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let mut start = None;
    loop {
        let r = send(flags | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
        if r >= 0 || errno() != libc::EAGAIN || dontwait {
            return r;
        }
        let limit = sk.wait_limit(true, &mut start);
        if limit == 0 {
            return fail(libc::EAGAIN);
        }
        let mut p = [pollfd {
            fd: sk.fd,
            events: libc::POLLOUT,
            revents: 0,
        }];
        if sys_poll(&mut p, limit) < 0 && errno() == libc::EINTR {
            return -1;
        }
    }
}

/// Send one datagram on an Ixora UDP socket to `dst` (`None`: its peer).
fn do_send_dgram(sk: Sock, bufs: &[&[u8]], flags: c_int, dst: Option<(u32, u16)>) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        // (UDP has no urgent data: Linux's `udp_sendmsg`.)
        count(sk.a, call("write"), true);
        return fail(libc::EOPNOTSUPP);
    }
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let to = match dst {
        // (One only the kernel reaches went by the kernel side: see
        // [`dgram_route`].)
        Some((ip, port)) => {
            if ip == 0 || port == 0 {
                count(sk.a, call("write"), true);
                return fail(libc::EINVAL);
            }
            if !reaches(sk.a, ip) {
                count(sk.a, call("write"), true);
                return fail(libc::ENETUNREACH);
            }
            pack(ip, port)
        }
        None => match sk.a.r.down_slot(sk.s).remote.load(Ordering::Acquire) {
            0 => {
                count(sk.a, call("write"), true);
                return fail(libc::EDESTADDRREQ);
            }
            p => p,
        },
    };
    let mut user = true;
    let mut start = None; // when the call first waits
    let mut handed = false;
    // Ring bytes the datagram takes (asked only when the ring is full).
    let need = || layout::DGRAM_HDR + bufs.iter().map(|b| b.len()).sum::<usize>();
    loop {
        match sk.send_dgram(bufs, to) {
            Ok(n) => {
                if state::signal(sk.a, sk.s) {
                    user = false;
                }
                count(sk.a, call("write"), user);
                return n as ssize_t;
            }
            Err(libc::EAGAIN) if dontwait && !handed => {
                // Linux's send runs the stack: a burst goes out as it is
                // sent, and a non-blocking socket says EAGAIN only past
                // its send buffer (208 KiB). Here the ring (64 KiB by
                // default) waits for the service, which may not have had
                // a turn (its doorbell deferred, it shares our CPU, or it
                // sleeps) and publishes room once it has sent what the
                // ring held: hand the ring over and wait for room, as a
                // blocking send does, for at most NONBLOCK_HANDOVER_MS —
                // about what Linux's own send of a ring's worth of
                // datagrams costs the caller — before saying EAGAIN.
                handed = true;
                let s = [sk.s];
                let need = need();
                let ready = &mut || sk.writable() as usize >= need || sk.dead() || !sk.live();
                state::block_until(
                    sk.a,
                    NONBLOCK_HANDOVER_MS,
                    OnSignal::RESTART,
                    &mut [],
                    None,
                    state::Interest::Slots { rx: &[], tx: &s },
                    ready,
                );
                user &= !state::blocked_in_kernel();
            }
            Err(libc::EAGAIN) if !dontwait => {
                let need = need();
                let ready = &mut || sk.writable() as usize >= need || sk.dead() || !sk.live();
                if let Err(r) = wait_ring(sk, true, &mut start, &mut user, ready) {
                    return r;
                }
                if !sk.live() {
                    count(sk.a, call("write"), user);
                    return fail(libc::EBADF);
                }
            }
            Err(e) => {
                count(sk.a, call("write"), user);
                return fail(e);
            }
        }
    }
}

/// How long a non-blocking UDP send that finds its ring full waits for
/// the service to make room (see [`do_send_dgram`]).
const NONBLOCK_HANDOVER_MS: c_int = 1;

/// A MAYBE UDP socket's first sendto/sendmsg to `addr`: if Ixora reaches
/// the address, the socket becomes Ixora's, bound to a free port (as the
/// kernel binds an unbound socket at its first send).
unsafe fn dgram_first_send(fd: c_int, addr: *const sockaddr, alen: socklen_t) -> Option<Sock> {
    if state::kind_of(fd) != kind::MAYBE
        || state::entry(fd)?.flags.load(Ordering::Relaxed) & fl::DGRAM == 0
    {
        return None;
    }
    // SAFETY (caller): `alen` readable bytes at `addr`.
    let (ip, _) = unsafe { dgram_dst(fd, addr, alen) }?;
    let a = state::attach()?;
    if ip == 0 || !reaches(a, ip) {
        // The kernel's: it binds the socket at this send, and the
        // replies come to that kernel port — the socket stays the
        // kernel's from now on.
        state::decide_kernel(fd);
        return None;
    }
    become_ixora(fd, a, (op::BIND, pack(0, 0) as i64, 0)).ok()?;
    state::flag_socket(state::sock(fd)?, fl::BOUND_ANY, true);
    // Bound to any address, as Linux binds it at its first send: the
    // kernel's own addresses (127.0.0.1) reach it, and it them, through
    // its kernel side, as a socket bound to any address explicitly.
    let sk = state::sock(fd)?;
    open_kernel_side(fd, sk, None);
    Some(sk)
}

/// Send on an Ixora socket with send(2) semantics (blocking sockets send
/// everything).
pub(crate) fn do_send(sk: Sock, bufs: &[&[u8]], flags: c_int) -> ssize_t {
    if sk.dgram() {
        if let Err(e) = bind_at_send(sk) {
            count(sk.a, call("write"), true);
            return fail(e);
        }
        return do_send_dgram(sk, bufs, flags, None);
    }
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total == 0 {
        return 0;
    }
    let mut user = true;
    let mut done = 0usize;
    let mut rest: Vec<&[u8]> = Vec::new();
    let mut start = None; // when the call first waits
    loop {
        // The part of `bufs` not yet sent (no allocation for the usual
        // first and only turn).
        let part: &[&[u8]] = if done == 0 {
            bufs
        } else {
            rest.clear();
            let mut skip = done;
            for b in bufs {
                if skip >= b.len() {
                    skip -= b.len();
                    continue;
                }
                rest.push(&b[skip..]);
                skip = 0;
            }
            &rest
        };
        match sk.send(part) {
            Ok(n) => {
                done += n;
                if state::signal(sk.a, sk.s) {
                    user = false;
                }
                if done == total || dontwait {
                    count(sk.a, call("write"), user);
                    return done as ssize_t;
                }
            }
            Err(libc::EAGAIN) if !dontwait => {}
            Err(libc::EAGAIN) if done > 0 => {
                count(sk.a, call("write"), user);
                return done as ssize_t;
            }
            Err(e) => {
                count(sk.a, call("write"), user);
                if done > 0 {
                    return done as ssize_t;
                }
                return send_failed(e, flags & libc::MSG_NOSIGNAL != 0);
            }
        }
        // SO_SNDTIMEO: what was sent so far, or EAGAIN, once it has passed.
        if let Err(r) = wait_ring(sk, true, &mut start, &mut user, &mut || can_send(sk)) {
            return if done > 0 { done as ssize_t } else { r };
        }
    }
}

/// What a blocked send waits for on a TCP socket: room in its ring, an
/// error, or a state in which sending fails at once.
pub(crate) fn can_send(sk: Sock) -> bool {
    sk.writable() > 0 || sk.dead() || sk.state() != st::ESTABLISHED
}

/// A send that failed with `e`: EPIPE raises SIGPIPE unless `nosignal`
/// (MSG_NOSIGNAL), as Linux does; -1 with errno `e`.
pub(crate) fn send_failed(e: c_int, nosignal: bool) -> ssize_t {
    if e == libc::EPIPE && !nosignal {
        // SAFETY: raise(3) has no memory arguments.
        unsafe {
            libc::raise(libc::SIGPIPE);
        }
    }
    fail(e)
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
    for name in [libc::TCP_KEEPIDLE, libc::TCP_KEEPINTVL, libc::TCP_KEEPCNT] {
        if let Some(v) = state::pending_int(fd, (libc::IPPROTO_TCP, name)) {
            opts.push(StackOpt::Keep(name, v.clamp(0, 32767) as u16));
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
        return kernel_fd(fd, || {
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
                & (fl::NAGLE | fl::KEEPALIVE | fl::LINGER0 | fl::INET6 | fl::LOWAT);
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
            limit,
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
            let r = state::request(
                sk.a,
                Msg::new(op::CONNECT, sk.s, pack(ip, port) as i64, 0),
                &[],
            );
            if r.a < 0 {
                return fail(-r.a as c_int);
            }
            return connect_wait(sk);
        }
        kind::IXORA => {
            let sk = state::sock(fd).unwrap();
            count(sk.a, call("connect"), true);
            let in_progress = sk.e.flags.load(Ordering::Relaxed) & fl::IN_PROGRESS != 0;
            if in_progress && sk.state() != st::CONNECTING {
                state::flag_socket(sk, fl::IN_PROGRESS, false);
            }
            return match sk.state() {
                st::CONNECTING => fail(libc::EALREADY),
                // The first connect to look after EINPROGRESS says it
                // is done, as Linux's (`__inet_stream_connect`); a
                // listener is "connected" there too.
                st::ESTABLISHED if in_progress => 0,
                st::ESTABLISHED | st::LISTEN => fail(libc::EISCONN),
                // A failed connection: its error if no call reported it
                // yet, else ECONNABORTED (Linux's `inet_stream_connect`).
                _ => fail(match sk.take_error() {
                    0 if sk.dead() => libc::ECONNABORTED,
                    0 => libc::EINVAL,
                    e => e,
                }),
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
        _ => fail(match sk.take_error() {
            0 => libc::ECONNREFUSED,
            e => e,
        }),
    }
}

/// Block (interruptibly, up to `limit` ms) until `ready()`, woken by
/// changes of `sk`'s socket: see [`state::block_until`].
fn block_on_change(sk: Sock, limit: c_int, ready: &mut dyn FnMut() -> bool) -> bool {
    state::block_until(
        sk.a,
        limit,
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
    if sk.state() != st::ESTABLISHED && sk.state() != st::CONNECTING {
        count(sk.a, call("shutdown"), true);
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
            state::pool(sk.a, fd);
            count(sk.a, call("close"), !sys);
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
    set(w.as_ref().map_or(new, |w| w as *const libc::rlimit))
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

// ------------------------------------------------------------ read / write

/// read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, || {
            real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n)
        });
        // SAFETY: read(2)'s contract: `buf` has `n` writable bytes.
        return unsafe { netlink_received(fd, buf, n, r, 0) }.0;
    };
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: read(2)'s contract: `buf` has `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    do_read(sk, &mut [b])
}

/// read(2) and readv(2) on an Ixora socket: as `recv` without flags, but
/// a read of nothing returns 0 at once and takes nothing — a waiting
/// datagram stays, as Linux's `sock_read_iter` leaves it (a `recv` of
/// nothing takes it; until 2026-11-29 a read did too: `socket_ops.c`).
fn do_read(sk: Sock, bufs: &mut [&mut [u8]]) -> ssize_t {
    if bufs.iter().all(|b| b.is_empty()) {
        count(sk.a, call("read"), true);
        return 0;
    }
    do_recv(sk, bufs, 0)
}

/// __read_chk (glibc fortify).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's own answer to an overflow.
        unsafe { libc::abort() }
    }
    // SAFETY: same contract as read.
    unsafe { read(fd, buf, n) }
}

/// recv(2).
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, || {
            real!(recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags)
        });
        // SAFETY: recv(2)'s contract: `buf` has `n` writable bytes.
        return unsafe { netlink_received(fd, buf, n, r, flags) }.0;
    };
    if discards(sk, flags) {
        return discard(sk, n, flags);
    }
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: recv(2)'s contract.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    do_recv(sk, &mut [b], flags)
}

/// __recv_chk.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's own answer to an overflow.
        unsafe { libc::abort() }
    }
    // SAFETY: same contract.
    unsafe { recv(fd, buf, n, flags) }
}

/// recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, || {
            real!(recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t)(
                fd, buf, n, flags, addr, alen,
            )
        });
        // SAFETY: recvfrom(2)'s contract: `buf` has `n` writable bytes.
        return unsafe { netlink_received(fd, buf, n, r, flags) }.0;
    };
    if discards(sk, flags) {
        return discard(sk, n, flags);
    }
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: recvfrom(2)'s contract.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    if sk.dgram() {
        // SAFETY: recvfrom(2)'s contract on `addr`/`alen`.
        let mut name = unsafe { Name::of(addr, alen) };
        let (r, src, _, _) = do_recv_dgram(sk, &mut [b], flags, name.as_mut());
        if r >= 0 && src != 0 && src != KERNEL_WROTE {
            // SAFETY: as above, for the address buffer.
            unsafe { put_sa(addr, alen, src, sk.inet6()) };
        }
        if let Some(n) = name.filter(|_| src == KERNEL_WROTE) {
            // SAFETY: as above.
            unsafe { *alen = n.len };
        }
        return r;
    }
    let r = do_recv(sk, &mut [b], flags);
    if r >= 0 {
        // SAFETY: as above, for the address buffer.
        unsafe {
            put_sa(
                addr,
                alen,
                sk.a.r.down_slot(sk.s).remote.load(Ordering::Relaxed),
                sk.inet6(),
            )
        };
    }
    r
}

/// __recvfrom_chk.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: glibc's own answer to an overflow.
        unsafe { libc::abort() }
    }
    // SAFETY: same contract.
    unsafe { recvfrom(fd, buf, n, flags, addr, alen) }
}

/// readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || {
            real!(readv: fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, n)
        });
    };
    // SAFETY: readv(2)'s contract.
    let mut v = unsafe { iovs(iov, n) };
    do_read(sk, &mut v)
}

/// recvmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let mut r = kernel_fd(fd, || {
            real!(recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t)(fd, msg, flags)
        });
        if r > 0 && state::kind_of(fd) == kind::NETLINK {
            // SAFETY: the kernel filled in `msg` (valid, as it succeeded);
            // its first iovec is a writable buffer.
            if let Some(m) = unsafe { msg.as_mut() }.filter(|m| m.msg_iovlen > 0) {
                // SAFETY: as above.
                let v = unsafe { &*m.msg_iov };
                let trunc;
                // SAFETY: as above.
                (r, trunc) = unsafe { netlink_received(fd, v.iov_base, v.iov_len, r, flags) };
                if trunc {
                    m.msg_flags |= libc::MSG_TRUNC;
                }
            }
            return r;
        }
        // Ixora connections another process passed (a peek's copies are
        // left as they came: the real receive follows).
        if r >= 0 && flags & libc::MSG_PEEK == 0 {
            // SAFETY: the kernel filled in `msg` (valid, as it succeeded).
            if let Some(m) = unsafe { msg.as_ref() } {
                handover::adopt_received(m);
            }
        }
        return r;
    };
    if flags & libc::MSG_ERRQUEUE != 0 {
        // The stack queues no errors for a socket (no IP_RECVERR): the
        // queue is empty, as Linux's says with EAGAIN; what waits to be
        // read is not taken (chronyd asks after each datagram).
        count(sk.a, call("read"), true);
        return fail(libc::EAGAIN);
    }
    if msg.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: recvmsg(2)'s contract: `msg` is a valid msghdr.
    let m = unsafe { &mut *msg };
    // SAFETY: its iovecs describe writable buffers.
    let mut v = unsafe { iovs(m.msg_iov, m.msg_iovlen as c_int) };
    if sk.dgram() {
        let mut whole = Name::whole(m);
        let (r, src, trunc, ctl) = do_recv_dgram(sk, &mut v, flags, Some(&mut whole));
        if src == KERNEL_WROTE {
            // The kernel side's own recvmsg filled in `m`.
            whole.back(m);
            return r;
        }
        if r >= 0 {
            let mut nl = m.msg_namelen;
            // SAFETY: msg_name has msg_namelen writable bytes (or is null).
            unsafe { put_sa(m.msg_name as *mut sockaddr, &mut nl, src, sk.inet6()) };
            if !m.msg_name.is_null() {
                m.msg_namelen = nl;
            }
            let ctrunc = put_control(m, sk, ctl);
            m.msg_flags = if trunc { libc::MSG_TRUNC } else { 0 } | ctrunc;
        }
        return r;
    }
    let r = do_recv(sk, &mut v, flags);
    if r >= 0 {
        let mut nl = m.msg_namelen;
        // SAFETY: msg_name has msg_namelen writable bytes (or is null).
        unsafe {
            put_sa(
                m.msg_name as *mut sockaddr,
                &mut nl,
                sk.a.r.down_slot(sk.s).remote.load(Ordering::Relaxed),
                sk.inet6(),
            )
        };
        if !m.msg_name.is_null() {
            m.msg_namelen = nl;
        }
        m.msg_controllen = 0;
        m.msg_flags = 0;
    }
    r
}

/// Put the control data a datagram of UDP socket `sk` comes with, as
/// the program asked for it, into `m`'s control buffer:
/// - its `IP_PKTINFO`, and on a dual-stack socket that asked
///   (`IPV6_RECVPKTINFO`) its `IPV6_PKTINFO`, the address v4-mapped, as
///   Linux gives both for an IPv4 datagram: for one Ixora received (its
///   destination is always the service's address: no broadcast or
///   multicast is received), or one that came in at the kernel's side
///   (`ctl.dst`, its destination and interface);
/// - its receive time (`ctl.stamp`) as `SO_TIMESTAMP`/`SO_TIMESTAMPNS`
///   (`SCM_TIMESTAMP` or `SCM_TIMESTAMPNS`) and `SO_TIMESTAMPING`
///   (`SCM_TIMESTAMPING`, the software stamp first) ask, in Linux's order
///   and, after the `_NEW` options, as their `_NEW` types.
///
/// Returns `MSG_CTRUNC` if they do not fit (the buffer is then left
/// empty), else 0.
fn put_control(m: &mut msghdr, sk: Sock, ctl: Ctl) -> c_int {
    let f = sk.e.flags.load(Ordering::Relaxed);
    let (v4, v6) = (f & fl::PKTINFO != 0, f & fl::PKTINFO6 != 0 && sk.inet6());
    let stamp = ctl.stamp != 0;
    let (ts, ts_ns) = (stamp && f & fl::TSTAMP != 0, f & fl::TSTAMP_NS != 0);
    let tsing = stamp && f & fl::TSTAMPING != 0;
    let new = f & fl::TSTAMP_NEW != 0;
    if !(v4 || v6 || ts || tsing) {
        m.msg_controllen = 0;
        return 0;
    }
    let h = sk.a.r.down_header();
    let ip = libc::in_addr {
        s_addr: sk.a.ip.to_be(),
    };
    let info = ctl.dst.unwrap_or(libc::in_pktinfo {
        ipi_ifindex: h.ifindex.load(Ordering::Relaxed) as c_int,
        ipi_spec_dst: ip,
        ipi_addr: ip,
    });
    let mut mapped = [0u8; 16];
    mapped[10] = 0xff;
    mapped[11] = 0xff;
    mapped[12..].copy_from_slice(&info.ipi_addr.s_addr.to_ne_bytes());
    let info6 = libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr { s6_addr: mapped },
        ipi6_ifindex: info.ipi_ifindex as u32,
    };
    // A timeval or timespec (two 64-bit words on 64-bit Linux, old and
    // new alike), then SO_TIMESTAMPING's three timespecs (software first).
    let (sec, nsec) = (
        (ctl.stamp / 1_000_000_000) as i64,
        (ctl.stamp % 1_000_000_000) as i64,
    );
    let (ts_type, ts_words) = match (ts_ns, new) {
        (false, false) => (tstamp::SCM_TIMESTAMP, [sec, nsec / 1000]),
        (false, true) => (tstamp::SCM_TIMESTAMP_NEW, [sec, nsec / 1000]),
        (true, false) => (tstamp::SCM_TIMESTAMPNS, [sec, nsec]),
        (true, true) => (tstamp::SCM_TIMESTAMPNS_NEW, [sec, nsec]),
    };
    let tsing_type = if new {
        tstamp::SCM_TIMESTAMPING_NEW
    } else {
        tstamp::SCM_TIMESTAMPING
    };
    let three: [i64; 6] = [sec, nsec, 0, 0, 0, 0];
    // The messages asked for, in Linux's order: the socket's timestamps
    // (`sock_recv_timestamp`), then the IP level's (`ip_cmsg_recv`):
    // (wanted, level, type, data, length).
    let msgs: [(bool, c_int, c_int, *const u8, u32); 4] = [
        (
            ts,
            libc::SOL_SOCKET,
            ts_type,
            ts_words.as_ptr() as *const u8,
            16,
        ),
        (
            tsing,
            libc::SOL_SOCKET,
            tsing_type,
            three.as_ptr() as *const u8,
            48,
        ),
        (
            v4,
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            &info as *const libc::in_pktinfo as *const u8,
            std::mem::size_of::<libc::in_pktinfo>() as u32,
        ),
        (
            v6,
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            &info6 as *const libc::in6_pktinfo as *const u8,
            std::mem::size_of::<libc::in6_pktinfo>() as u32,
        ),
    ];
    let wanted = msgs.iter().filter(|m| m.0);
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space: usize = wanted
        .clone()
        .map(|m| unsafe { libc::CMSG_SPACE(m.4) } as usize)
        .sum();
    if m.msg_control.is_null() || m.msg_controllen < space {
        m.msg_controllen = 0;
        return libc::MSG_CTRUNC;
    }
    m.msg_controllen = space as _;
    // SAFETY: recvmsg(2)'s contract: `msg_control` has `msg_controllen`
    // writable bytes, at least the space of every message wanted
    // (checked; `msg_controllen` says just that now, so CMSG_NXTHDR
    // stays within it and gives a non-null header for each); each data
    // pointer has its length of readable bytes (locals above); the data
    // is written unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        for &(_, level, ty, data, len) in wanted {
            (*c).cmsg_level = level;
            (*c).cmsg_type = ty;
            (*c).cmsg_len = libc::CMSG_LEN(len) as _;
            std::ptr::copy_nonoverlapping(data, libc::CMSG_DATA(c), len as usize);
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    0
}

/// write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, || {
            real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n)
        });
        // SAFETY: write(2)'s contract: `buf` has `n` readable bytes.
        unsafe { netlink_sent(fd, buf, n, r) };
        return r;
    };
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: write(2)'s contract: `buf` has `n` readable bytes.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    do_send(sk, &[b], 0)
}

/// send(2).
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, || {
            real!(send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t)(fd, buf, n, flags)
        });
        // SAFETY: send(2)'s contract: `buf` has `n` readable bytes.
        unsafe { netlink_sent(fd, buf, n, r) };
        return r;
    };
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: send(2)'s contract.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    do_send(sk, &[b], flags)
}

/// sendto(2) (the address is ignored on a connected stream, as Linux does).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    // SAFETY: sendto(2)'s contract on `addr`/`alen`.
    let first = unsafe { dgram_first_send(fd, addr, alen) };
    let Some(sk) = first.or_else(|| state::sock(fd)) else {
        let r = kernel_fd(fd, || {
            real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t)(
                fd, buf, n, flags, addr, alen,
            )
        });
        // SAFETY: sendto(2)'s contract: `buf` has `n` readable bytes.
        unsafe { netlink_sent(fd, buf, n, r) };
        return r;
    };
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: sendto(2)'s contract.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    if sk.dgram() {
        // SAFETY: sendto(2)'s contract: `alen` readable bytes at `addr`.
        let dst = match unsafe { dgram_route(fd, sk, addr, alen) } {
            Route::Service(dst) => dst,
            Route::Kernel => {
                return kernel_side_send(sk, flags, |fl| {
                    real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t)(
                        fd, buf, n, fl, addr, alen,
                    )
                })
            }
            Route::Refused(e) => {
                count(sk.a, call("write"), true);
                return fail(e);
            }
        };
        return do_send_dgram(sk, &[b], flags, dst);
    }
    do_send(sk, &[b], flags)
}

/// writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || {
            real!(writev: fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, n)
        });
    };
    // SAFETY: writev(2)'s contract (we only read through the slices).
    let v = unsafe { iovs(iov, n) };
    let v: Vec<&[u8]> = v.into_iter().map(|b| &*b).collect();
    do_send(sk, &v, 0)
}

/// sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: sendmsg(2)'s contract: `msg` is null or a valid msghdr.
    let first = unsafe { msg.as_ref() }.and_then(|m| {
        // SAFETY: msg_name has msg_namelen readable bytes (or is null).
        unsafe { dgram_first_send(fd, m.msg_name as *const sockaddr, m.msg_namelen) }
    });
    let Some(sk) = first.or_else(|| state::sock(fd)) else {
        // Ixora connections it passes to another process go through the
        // service (see `handover`).
        // SAFETY: as above.
        let passed = unsafe { msg.as_ref() }.map_or(Vec::new(), handover::pass_out);
        let r = kernel_fd(fd, || {
            real!(sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t)(fd, msg, flags)
        });
        if r < 0 && !passed.is_empty() {
            handover::take_back(&passed);
        }
        if r > 0 && state::kind_of(fd) == kind::NETLINK {
            // SAFETY: the kernel took `msg` (valid, as it succeeded); a
            // request is one buffer (rtnetlink programs send one iovec).
            if let Some(m) = unsafe { msg.as_ref() }.filter(|m| m.msg_iovlen > 0) {
                // SAFETY: as above: its first iovec is a readable buffer.
                let v = unsafe { &*m.msg_iov };
                // SAFETY: as above.
                unsafe { netlink_sent(fd, v.iov_base, v.iov_len, r) };
            }
        }
        return r;
    };
    if msg.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: sendmsg(2)'s contract.
    let m = unsafe { &*msg };
    // SAFETY: its iovecs describe readable buffers.
    let v = unsafe { iovs(m.msg_iov, m.msg_iovlen as c_int) };
    let v: Vec<&[u8]> = v.into_iter().map(|b| &*b).collect();
    if sk.dgram() {
        // (By the kernel side, the program's own message: its control data
        // goes too.)
        // SAFETY: as above.
        let dst = match unsafe { dgram_route(fd, sk, m.msg_name as *const sockaddr, m.msg_namelen) }
        {
            Route::Service(dst) => dst,
            Route::Kernel => {
                return kernel_side_send(sk, flags, |fl| {
                    real!(sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t)(fd, msg, fl)
                })
            }
            Route::Refused(e) => {
                count(sk.a, call("write"), true);
                return fail(e);
            }
        };
        return do_send_dgram(sk, &v, flags, dst);
    }
    do_send(sk, &v, flags)
}

/// sendmmsg(2): each message by [`sendmsg`] on an Ixora socket; the count
/// sent, or -1 if the first failed.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    vec: *mut libc::mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    // (A MAYBE UDP socket may become Ixora's at its first message.)
    if state::sock(fd).is_none() && state::kind_of(fd) != kind::MAYBE {
        // Ixora connections the messages pass to another process go
        // through the service, as with sendmsg (see `handover`); the
        // kernel takes at most UIO_MAXIOV (1024) messages.
        let msgs: &[libc::mmsghdr] = if vec.is_null() {
            &[]
        } else {
            // SAFETY: sendmmsg(2)'s contract: `vec` has `vlen` entries,
            // each with a valid msghdr (only read here).
            unsafe { std::slice::from_raw_parts(vec, vlen.min(1024) as usize) }
        };
        // (Nothing to look at, and no allocation, without control data.)
        let passed: Vec<Vec<c_int>> = if msgs.iter().any(|m| m.msg_hdr.msg_controllen > 0) {
            msgs.iter()
                .map(|m| handover::pass_out(&m.msg_hdr))
                .collect()
        } else {
            Vec::new()
        };
        let r = kernel_fd(fd, || {
            real!(sendmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int)(
                fd, vec, vlen, flags,
            )
        });
        // The messages from the first not sent on did not go: their
        // sockets come back.
        for p in passed.iter().skip(r.max(0) as usize) {
            if !p.is_empty() {
                handover::take_back(p);
            }
        }
        return r;
    }
    if vec.is_null() {
        return fail(libc::EFAULT);
    }
    let n = vlen.min(1024) as usize;
    for i in 0..n {
        // SAFETY: sendmmsg(2)'s contract: `vec` has `vlen` entries.
        let m = unsafe { &mut *vec.add(i) };
        // SAFETY: each entry's header is a valid msghdr.
        let r = unsafe { sendmsg(fd, &m.msg_hdr, flags) };
        if r < 0 {
            return if i > 0 { i as c_int } else { -1 };
        }
        m.msg_len = r as c_uint;
    }
    n as c_int
}

/// recvmmsg(2): each message by [`recvmsg`] on an Ixora socket. After the
/// first, the rest are taken without waiting under `MSG_WAITFORONE`;
/// otherwise each may wait, and `timeout` is checked after each message,
/// as Linux does.
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    vec: *mut libc::mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    if state::sock(fd).is_none() {
        let r = kernel_fd(fd, || {
            real!(recvmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int, *mut timespec) -> c_int)(
                fd, vec, vlen, flags, timeout,
            )
        });
        // Ixora connections another process passed, as with recvmsg.
        if flags & libc::MSG_PEEK == 0 {
            for i in 0..r.max(0) as usize {
                // SAFETY: the kernel filled in the first `r` entries.
                handover::adopt_received(unsafe { &(*vec.add(i)).msg_hdr });
            }
        }
        return r;
    }
    if vec.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: a non-null timeout points at a timespec (recvmmsg(2)).
    let limit = unsafe { timeout.as_ref() }.map(|t| {
        std::time::Instant::now()
            + std::time::Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            )
    });
    let mut fl = flags & !libc::MSG_WAITFORONE;
    let n = vlen.min(1024) as usize;
    for i in 0..n {
        // SAFETY: recvmmsg(2)'s contract: `vec` has `vlen` entries.
        let m = unsafe { &mut *vec.add(i) };
        // SAFETY: each entry's header is a valid msghdr with writable buffers.
        let r = unsafe { recvmsg(fd, &mut m.msg_hdr, fl) };
        if r < 0 {
            return if i > 0 { i as c_int } else { -1 };
        }
        m.msg_len = r as c_uint;
        if flags & libc::MSG_WAITFORONE != 0 {
            fl |= libc::MSG_DONTWAIT;
        }
        if limit.is_some_and(|l| std::time::Instant::now() >= l) {
            return i as c_int + 1;
        }
    }
    n as c_int
}

/// sendfile(2) into an Ixora socket (from one: into a pipe, see
/// [`crate::splice::sendfile_from_socket`]): the kernel reads the file straight
/// into the transmit ring (the one copy), `readv` at the file's position
/// or `preadv` at `*offset`. As on Linux: a blocking socket waits for room
/// before the first byte (honouring SO_SNDTIMEO and signals), a
/// non-blocking one fails with EAGAIN when its ring is full, and what was
/// sent is returned once some was (the file's position or `*offset`
/// advanced by exactly that).
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    inf: c_int,
    offset: *mut off_t,
    n: size_t,
) -> ssize_t {
    if state::sock(inf).is_some() {
        return crate::splice::sendfile_from_socket(out, inf, offset.is_null(), n);
    }
    let Some(sk) = state::sock(out) else {
        return kernel_fd(out, || {
            real!(sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t)(out, inf, offset, n)
        });
    };
    // It reads the file: a system call whatever the ring holds.
    count(sk.a, call("sendfile"), false);
    if sk.dgram() {
        // Each read goes out as one datagram, as through write(2).
        return sendfile_dgram(sk, inf, offset, n);
    }
    let (mut start, mut user) = (None, false);
    let mut sent = 0usize;
    while sent < n {
        let at = if offset.is_null() {
            None
        } else {
            // SAFETY: sendfile(2)'s contract: a non-null `offset` is valid.
            Some(unsafe { *offset } + sent as off_t)
        };
        let r = sk.send_with(n - sent, |spans| {
            let iov = spans.map(|(p, len)| libc::iovec {
                iov_base: p as *mut c_void,
                iov_len: len,
            });
            let k = if iov[1].iov_len > 0 { 2 } else { 1 };
            // SAFETY: the spans are free bytes of our transmit ring, in our
            // writable mapping, which the service reads only once the tail
            // is published past them (after this call).
            let got = unsafe {
                match at {
                    None => libc::readv(inf, iov.as_ptr(), k),
                    Some(o) => libc::preadv(inf, iov.as_ptr(), k, o),
                }
            };
            if got < 0 {
                Err(errno())
            } else {
                Ok(got as usize)
            }
        });
        match r {
            Ok(Ok(0)) => break, // the end of the file
            Ok(Ok(w)) => {
                sent += w;
                state::signal(sk.a, sk.s);
            }
            // A blocking socket waits for room, as Linux's sendfile does
            // until all is sent (it returned what fitted the ring: vsftpd
            // made 620 calls per 5 MB); a signal or SO_SNDTIMEO ends the
            // call with what was sent.
            Err(libc::EAGAIN) if !sk.nonblock() => {
                if let Err(r) = wait_ring(sk, true, &mut start, &mut user, &mut || can_send(sk)) {
                    if sent == 0 {
                        return r;
                    }
                    break;
                }
            }
            Ok(Err(_)) | Err(_) if sent > 0 => break,
            Ok(Err(e)) => return fail(e),
            Err(e) => return send_failed(e, false),
        }
    }
    if !offset.is_null() {
        // SAFETY: as above.
        unsafe { *offset += sent as off_t };
    }
    sent as ssize_t
}

/// sendfile(2) into an Ixora UDP socket: one read of at most the largest
/// IPv4 datagram, sent as one datagram through [`do_send`].
fn sendfile_dgram(sk: Sock, inf: c_int, offset: *mut off_t, n: size_t) -> ssize_t {
    let mut buf = vec![0u8; n.min(65_507)];
    // SAFETY: reads at most `buf.len()` bytes into our buffer; `offset` is
    // the caller's (valid or null, as sendfile(2) requires).
    let got = unsafe {
        if offset.is_null() {
            libc::read(inf, buf.as_mut_ptr() as *mut c_void, buf.len())
        } else {
            libc::pread(inf, buf.as_mut_ptr() as *mut c_void, buf.len(), *offset)
        }
    };
    if got <= 0 {
        return got;
    }
    let w = do_send(sk, &[&buf[..got as usize]], 0);
    if w > 0 && !offset.is_null() {
        // SAFETY: as above.
        unsafe { *offset += w as off_t };
    }
    if w < 0 && offset.is_null() {
        // Give back what was not sent.
        // SAFETY: lseek has no memory arguments.
        unsafe { libc::lseek(inf, -got as off_t, libc::SEEK_CUR) };
    }
    w
}

/// sendfile64 (the same on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inf: c_int,
    offset: *mut off_t,
    n: size_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { sendfile(out, inf, offset, n) }
}

// ------------------------------------------------------------------ epoll

/// epoll_create1(2).
#[no_mangle]
pub extern "C" fn epoll_create1(flags: c_int) -> c_int {
    let fd = real!(epoll_create1: fn(c_int) -> c_int)(flags);
    if fd >= 0 {
        state::epoll_new(fd);
        if let Some(a) = state::attached() {
            count(a, call("epoll_create"), false);
        }
    }
    fd
}

/// epoll_create(2).
#[no_mangle]
pub extern "C" fn epoll_create(size: c_int) -> c_int {
    if size <= 0 {
        return fail(libc::EINVAL);
    }
    epoll_create1(0)
}

/// epoll_ctl(2): Ixora sockets are kept in user space.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    opn: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    let real_ctl =
        || real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(epfd, opn, fd, ev);
    let Some(ep) = state::epoll(epfd) else {
        return kernel_fd(fd, real_ctl);
    };
    let Some(sk) = state::sock(fd) else {
        if state::pooled(fd) {
            // A closed socket's number (its placeholder would be added).
            return fail(libc::EBADF);
        }
        let r = real_ctl();
        if r == 0 {
            let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
            match opn {
                libc::EPOLL_CTL_ADD => g.kernel += 1,
                libc::EPOLL_CTL_DEL => g.kernel = g.kernel.saturating_sub(1),
                _ => {}
            }
            // An undecided socket may become Ixora's later: remember the
            // interest, to move it then.
            let (events, data) = if ev.is_null() {
                (0, 0)
            } else {
                // SAFETY: epoll_ctl(2)'s contract: `ev` is readable (the
                // kernel just read it).
                let e = unsafe { std::ptr::read_unaligned(ev) };
                (e.events, e.u64)
            };
            state::note_undecided(&mut g, opn, fd, events, data);
            if let (libc::EPOLL_CTL_ADD, Some(a)) = (opn, state::attached()) {
                state::epoll_changed(a, &mut g, None, || false);
            }
        }
        state::passthrough();
        return r;
    };
    count(sk.a, call("epoll_ctl"), true);
    let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
    // An item whose descriptor was closed (and its number reused by a new
    // socket) is gone, as the kernel forgets closed descriptors.
    // (The descriptor's items are found through the set's index: no pass
    // over the set.)
    let gen = sk.e.gen.load(Ordering::Relaxed);
    let stale = |i: &Item| i.slot != sk.s || i.gen != gen;
    // (The temporary iterator borrows the set until the match ends.)
    loop {
        let Some(i) = g.of_fd(fd).find(|&i| stale(&g.items()[i])) else {
            break;
        };
        g.forget(i);
    }
    let pos = g.of_fd(fd).next();
    let (events, data) = if ev.is_null() {
        (0, 0)
    } else {
        // SAFETY: epoll_ctl(2)'s contract: `ev` is readable.
        let e = unsafe { std::ptr::read_unaligned(ev) };
        (e.events, e.u64)
    };
    // A socket on any address with a kernel side (a listener, a UDP
    // socket): its kernel side is watched by the real epoll instance,
    // with the same data and the same events but writability (Ixora's
    // rings decide that; the kernel side would always be writable).
    let kside = sk.e.flags.load(Ordering::Relaxed) & fl::KSIDE != 0;
    let kctl = |events: u32| {
        let mut e = epoll_event {
            events: kernel_side_events(events),
            u64: data,
        };
        real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(epfd, opn, fd, &mut e)
    };
    // EPOLLEXCLUSIVE (fs/eventpoll.c do_epoll_ctl): asked for at ADD only,
    // with no flag beyond EXCLUSIVE_OK; an exclusive item is not changed.
    let exclusive = libc::EPOLLEXCLUSIVE as u32;
    if !ev.is_null()
        && events & exclusive != 0
        && (opn == libc::EPOLL_CTL_MOD
            || (opn == libc::EPOLL_CTL_ADD && events & !EXCLUSIVE_OK != 0))
    {
        return fail(libc::EINVAL);
    }
    match (opn, pos) {
        (libc::EPOLL_CTL_MOD, Some(i)) if g.items()[i].events & exclusive != 0 => {
            fail(libc::EINVAL)
        }
        (libc::EPOLL_CTL_ADD, Some(_)) => fail(libc::EEXIST),
        (libc::EPOLL_CTL_ADD, None) => {
            if ev.is_null() {
                return fail(libc::EFAULT);
            }
            let kernel = kside && kctl(events) == 0;
            g.kernel += usize::from(kernel);
            let mut it = Item::new(fd, sk.s, gen, events, data, sk.seq());
            it.kernel = kernel;
            g.push(it);
            tell_sleepers(&sk, &mut g, events);
            state::poke_kernel_sleepers(epfd, &mut g);
            0
        }
        (libc::EPOLL_CTL_MOD, Some(i)) => {
            if ev.is_null() {
                return fail(libc::EFAULT);
            }
            g.set_events(i, events);
            let it = g.item_mut(i);
            it.data = data;
            it.disabled = false;
            it.seen = sk.seq().wrapping_sub(1);
            if it.kernel {
                kctl(events);
            }
            g.pending.push(sk.s);
            tell_sleepers(&sk, &mut g, events);
            0
        }
        (libc::EPOLL_CTL_DEL, Some(i)) => {
            if g.forget(i).kernel {
                kctl(0);
            }
            0
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None) => fail(libc::ENOENT),
        _ => fail(libc::EINVAL),
    }
}

/// The flags an `EPOLLEXCLUSIVE` interest may have (`EPOLLEXCLUSIVE_OK_BITS`
/// of fs/eventpoll.c).
const EXCLUSIVE_OK: u32 = (libc::EPOLLIN
    | libc::EPOLLOUT
    | libc::EPOLLERR
    | libc::EPOLLHUP
    | libc::EPOLLWAKEUP
    | libc::EPOLLET
    | libc::EPOLLEXCLUSIVE) as u32;

/// An Ixora socket's interest `events` was added to set `g` or changed:
/// threads asleep on the set learn of it (state::epoll_changed).
fn tell_sleepers(sk: &state::Sock, g: &mut Epoll, events: u32) {
    let want = events | (libc::EPOLLERR | libc::EPOLLHUP) as u32;
    let tx = events & state::EPOLL_WRITE != 0;
    state::epoll_changed(sk.a, g, Some((sk.s, tx)), || {
        sk.revents() as u16 as u32 & want != 0
    });
}

/// The events of an epoll interest in a socket's kernel side
/// ([`fl::KSIDE`]): all but writability, which Ixora's rings decide.
fn kernel_side_events(events: u32) -> u32 {
    events & !state::EPOLL_WRITE
}

/// Ready Ixora sockets of an epoll set into `out` (at most `max`): the
/// sockets that may be ready ([`Epoll`]'s doc says which), or every one
/// when the service's change log cannot be trusted.
fn epoll_scan(epfd: c_int, g: &mut Epoll, out: *mut epoll_event, max: usize) -> usize {
    let Some(a) = state::attached() else {
        return 0;
    };
    let h = a.r.down_header();
    let head = h.chlog_head.load(Ordering::Acquire);
    if g.needs_full_scan(head) {
        g.full_scan_starts(head);
        return full_scan(a, epfd, g, out, max);
    }
    // Left by a full batch or changed by epoll_ctl first, then what the
    // service changed, then the level-triggered items reported last time.
    let mut slots = std::mem::take(&mut g.scratch);
    slots.clear();
    slots.append(&mut g.pending);
    for k in g.cursor..head {
        slots.push(a.r.chlog(k).load(Ordering::Relaxed));
    }
    // Pairs with the service's release fence before it overwrites entries
    // (layout::DownHeader::chlog_head).
    std::sync::atomic::fence(Ordering::Acquire);
    if h.chlog_reserve
        .load(Ordering::Relaxed)
        .wrapping_sub(g.cursor)
        > layout::CHLOG
    {
        // Overwritten while read.
        g.scratch = slots;
        g.full_scan_starts(head);
        return full_scan(a, epfd, g, out, max);
    }
    g.cursor = head;
    slots.append(&mut g.ready);
    let pass = g.next_pass();
    let (mut n, mut looked) = (0, 0);
    let mut gone = Vec::new();
    for &s in &slots {
        let mut i = g.first_of(s);
        while i != state::NO_ITEM {
            let at = i as usize;
            i = g.items()[at].next;
            if g.items()[at].pass == pass {
                continue;
            }
            if n == max {
                // The rest at the next call.
                g.pending.push(s);
                break;
            }
            looked += 1;
            n += usize::from(look_at(epfd, g, at, pass, out, n, &mut gone));
        }
    }
    g.scratch = slots;
    forget_gone(g, gone);
    if looked > 0 {
        a.r.up_header().counters[call("scan")][0].fetch_add(looked, Ordering::Relaxed);
    }
    n
}

/// Every item of set `g`, from where the last full batch stopped.
fn full_scan(a: &Attached, epfd: c_int, g: &mut Epoll, out: *mut epoll_event, max: usize) -> usize {
    let len = g.items().len();
    let first = if g.start < len { g.start } else { 0 };
    let pass = g.pass;
    let (mut n, mut looked) = (0, 0);
    let mut gone = Vec::new();
    for k in 0..len {
        let at = (first + k) % len;
        if n == max {
            // The rest are not looked at: the next scan is a full one
            // again, from here.
            g.synced = false;
            g.start = at;
            break;
        }
        looked += 1;
        n += usize::from(look_at(epfd, g, at, pass, out, n, &mut gone));
    }
    forget_gone(g, gone);
    a.r.up_header().counters[call("scan")][0].fetch_add(looked, Ordering::Relaxed);
    count(a, call("scan"), false);
    n
}

/// Look at item `at` of set `g` in scan `pass`: true when it had an
/// event, written to `out[n]`; its index goes to `gone` if its descriptor
/// was closed.
fn look_at(
    epfd: c_int,
    g: &mut Epoll,
    at: usize,
    pass: u32,
    out: *mut epoll_event,
    n: usize,
    gone: &mut Vec<usize>,
) -> bool {
    g.item_mut(at).pass = pass;
    let it = &g.items()[at];
    let sk = match state::sock(it.fd) {
        Some(sk) if sk.s == it.slot && sk.e.gen.load(Ordering::Relaxed) == it.gen => sk,
        // Closed without EPOLL_CTL_DEL: gone, as in the kernel.
        _ => {
            gone.push(at);
            return false;
        }
    };
    if it.disabled {
        return false;
    }
    let it = g.item_mut(at);
    let rev = it.report(|| sk.seq(), || sk.revents() as u16 as u32);
    if rev == 0 {
        return false;
    }
    let oneshot = it.events & libc::EPOLLONESHOT as u32 != 0;
    if oneshot {
        it.disabled = true;
        if it.kernel {
            // A listener's kernel side is the same descriptor: disarmed
            // too, until the program re-arms both.
            let mut ev = epoll_event {
                events: libc::EPOLLONESHOT as u32,
                u64: it.data,
            };
            real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(
                epfd,
                libc::EPOLL_CTL_MOD,
                it.fd,
                &mut ev,
            );
        }
    }
    let e = epoll_event {
        events: rev,
        u64: it.data,
    };
    // Level-triggered: ready until the program reads it, so looked at
    // again next time.
    if !oneshot && it.events & libc::EPOLLET as u32 == 0 {
        let slot = it.slot;
        g.ready.push(slot);
    }
    // SAFETY: `out` has room for `max` events (epoll_wait's contract) and
    // the callers keep `n < max`.
    unsafe { std::ptr::write_unaligned(out.add(n), e) };
    true
}

/// Take out of `g` the items at `gone` (whose descriptors were closed).
fn forget_gone(g: &mut Epoll, mut gone: Vec<usize>) {
    // From the highest: each removal moves only a later item.
    gone.sort_unstable_by(|a, b| b.cmp(a));
    for at in gone {
        g.forget(at);
    }
}

/// Without io_uring (see `kwatch`): how often a busy program's
/// `epoll_wait` also looks at the kernel descriptors of a mixed set (at
/// most this late for them under load).
const KERNEL_PEEK: std::time::Duration = std::time::Duration::from_micros(200);

/// Ask the kernel for the events of the kernel descriptors of `epfd`
/// (no timeout), keeping `kwatch`'s view of them up to date.
fn kernel_events(
    epfd: c_int,
    wait: &dyn Fn(*mut epoll_event, c_int, c_int) -> c_int,
    out: *mut epoll_event,
    max: c_int,
) -> c_int {
    crate::kwatch::asking(epfd);
    let mut k = wait(out, max, 0);
    crate::kwatch::answered(epfd, k);
    if k > 0 {
        // SAFETY: the kernel wrote `k` events to `out`.
        let evs = unsafe { std::slice::from_raw_parts_mut(out, k as usize) };
        // A poke no sleeper took (it woke for something else first): not
        // the program's.
        k = state::strip_poke(epfd, evs, true).0 as c_int;
    }
    k
}

fn epoll_common(
    epfd: c_int,
    out: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    let real_wait = |o: *mut epoll_event, m: c_int, t: c_int| {
        if sigmask.is_null() {
            real!(epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int)(epfd, o, m, t)
        } else {
            real!(epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int)(
                epfd, o, m, t, sigmask,
            )
        }
    };
    let Some(ep) = state::epoll(epfd) else {
        state::passthrough();
        return real_wait(out, max, timeout);
    };
    // Whether the set has Ixora sockets, and if not, this thread counted
    // as asleep in the kernel on it, under one lock: an `epoll_ctl` adding
    // a socket between the two would otherwise find no sleeper to poke.
    let attached = state::attached();
    let a = {
        let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
        match attached {
            Some(a) if !g.items().is_empty() => Some(a),
            // (Not attached yet, too: the program's first socket may be
            // added while this thread sleeps — gRPC's poller thread waits
            // before the server makes its listener, and slept a day.)
            _ if timeout != 0 && max > 0 && !out.is_null() => {
                g.in_kernel += 1;
                None
            }
            _ => {
                drop(g);
                state::passthrough();
                return real_wait(out, max, timeout);
            }
        }
    };
    let Some(a) = a else {
        // No Ixora socket in the set yet; another thread may add one
        // while this one sleeps in the kernel (state::poke_kernel_sleepers).
        state::passthrough();
        let start = std::time::Instant::now();
        let r = real_wait(out, max, timeout);
        let e = errno();
        ep.lock().unwrap_or_else(|p| p.into_inner()).in_kernel -= 1;
        if r <= 0 {
            set_errno(e);
            return r;
        }
        // SAFETY: the kernel wrote `r` events to `out`.
        let evs = unsafe { std::slice::from_raw_parts_mut(out, r as usize) };
        let (n, poked) = state::strip_poke(epfd, evs, false);
        if !poked || n > 0 {
            return n as c_int;
        }
        // Poked: the set has Ixora sockets now; wait on, for what is
        // left of the timeout.
        return epoll_common(epfd, out, max, left_of(timeout, start), sigmask);
    };
    if max <= 0 || out.is_null() {
        return fail(libc::EINVAL);
    }
    let max = max as usize;
    // The kernel descriptors of a mixed set: may they have events? Read
    // from io_uring completions in our memory (kwatch), no system call.
    let watched = if ep.lock().unwrap_or_else(|p| p.into_inner()).kernel > 0 {
        crate::kwatch::maybe_ready(epfd)
    } else {
        Some(false)
    };
    let (n, kernel, peek) = {
        let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
        let n = epoll_scan(epfd, &mut g, out, max);
        let peek = match watched {
            _ if g.kernel == 0 => false,
            Some(maybe) => maybe,
            // Without io_uring: while Ixora sockets keep the program busy,
            // kernel descriptors are looked at once per KERNEL_PEEK (not
            // starved; nor does every call enter the kernel for them).
            None => {
                let now = std::time::Instant::now();
                let due = n == 0 || now - g.kernel_seen >= KERNEL_PEEK;
                if due {
                    g.kernel_seen = now;
                }
                due
            }
        };
        (n, g.kernel, peek)
    };
    // A ring owed to a sleeping service: now, or (with events to return)
    // perhaps at the next call.
    let kicked = if n > 0 {
        state::kick_unless_busy(a)
    } else {
        state::kick(a)
    };
    if kernel > 0 && (n == 0 || n < max) && (n > 0 || timeout == 0) {
        count(a, call("kernel_fds"), !peek);
    }
    if n > 0 {
        // Ready sockets: answered in user space.
        if peek && n < max {
            // SAFETY: `out + n` has room for `max - n` events.
            let k = kernel_events(epfd, &real_wait, unsafe { out.add(n) }, (max - n) as c_int);
            count(a, call("epoll_wait"), false);
            return merge_kernel_side(ep, out, n, k.max(0) as usize) as c_int;
        }
        count(a, call("epoll_wait"), !kicked);
        return n as c_int;
    }
    if timeout == 0 {
        let k = if peek {
            let k = kernel_events(epfd, &real_wait, out, max as c_int);
            if k < 0 {
                count(a, call("epoll_wait"), false);
                return k;
            }
            merge_kernel_side(ep, out, 0, k as usize) as c_int
        } else {
            0
        };
        count(a, call("epoll_wait"), !peek && !kicked);
        return k;
    }
    // Nothing ready: spin, then sleep on the real epoll (kernel
    // descriptors) and our waiter (Ixora sockets) together. Another
    // thread's epoll_ctl may change the set meanwhile (state::Sleeper):
    // then look again, with what is left of the timeout.
    let start = std::time::Instant::now();
    let mut found = 0usize;
    let mut pfd = [pollfd {
        fd: epfd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // (The thread's bitmaps of its last wait, reused: no allocation per
    // wait. A wait in a signal handler meanwhile finds them taken and
    // makes its own.)
    let (mut rx_bits, mut tx_bits, mut ex_bits) = INTEREST_BITS.take();
    let (ok, n) = loop {
        let left = left_of(timeout, start);
        // Woken only by changes of the sockets in this set; by transmit
        // progress only where EPOLLOUT is asked for (the set keeps both
        // bitmaps: no pass over its items).
        let (kernel, id, seen) = {
            let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
            g.copy_interest(&mut rx_bits, &mut tx_bits, &mut ex_bits);
            let kernel = g.kernel;
            (kernel, g.id, state::sleep_on(a, &mut g, kernel > 0))
        };
        let kslice: &mut [pollfd] = if kernel > 0 { &mut pfd } else { &mut [] };
        // The set's kernel side may be nested in the thread's waiter: one
        // system call to sleep on both (state::Nest).
        let nest = (kernel > 0).then_some(id);
        let mut moved = false;
        let ok = state::block_until(
            a,
            left,
            OnSignal::masked(sigmask),
            kslice,
            nest,
            state::Interest::Bits {
                rx: &rx_bits,
                tx: &tx_bits,
                excl: &ex_bits,
            },
            &mut || {
                let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
                found = epoll_scan(epfd, &mut g, out, max);
                moved = seen.is_some_and(|s| s != g.gen);
                found > 0 || moved
            },
        );
        if seen.is_some() {
            state::woke_from(&mut ep.lock().unwrap_or_else(|p| p.into_inner()));
        }
        let interrupted = !ok && errno() == libc::EINTR;
        let mut n = found;
        if kernel > 0 && n < max && pfd[0].revents != 0 && !(interrupted && n == 0) {
            // SAFETY: `out + n` has room for `max - n` events.
            let k = kernel_events(epfd, &real_wait, unsafe { out.add(n) }, (max - n) as c_int);
            n = merge_kernel_side(ep, out, n, k.max(0) as usize);
        }
        // Nothing after all (the set changed, or its kernel events were
        // taken by another thread, or were a poke of ours): on, as the
        // kernel's epoll_wait would not have returned.
        if ok && n == 0 && (moved || pfd[0].revents != 0) && left != 0 {
            pfd[0].revents = 0;
            continue;
        }
        break (ok, n);
    };
    INTEREST_BITS.set((rx_bits, tx_bits, ex_bits));
    // Found while spinning: answered in user space.
    count(
        a,
        call("epoll_wait"),
        !kicked && !state::blocked_in_kernel(),
    );
    if !ok && errno() == libc::EINTR && n == 0 {
        return -1;
    }
    n as c_int
}

thread_local! {
    /// The interest bitmaps (receive, transmit, exclusive) of the
    /// thread's epoll waits.
    static INTEREST_BITS: std::cell::Cell<(Vec<u64>, Vec<u64>, Vec<u64>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new(), Vec::new())) };
    /// The slots (to read, to write) of the thread's poll and select waits.
    static POLL_SLOTS: std::cell::Cell<(Vec<u32>, Vec<u32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// What is left at `start`'s elapsed time of a timeout of `timeout_ms`
/// (-1: none, which stays -1; never below 0).
fn left_of(timeout_ms: c_int, start: std::time::Instant) -> c_int {
    if timeout_ms < 0 {
        return -1;
    }
    let spent = start.elapsed().as_millis().min(c_int::MAX as u128) as c_int;
    (timeout_ms - spent).max(0)
}

/// `out` holds `n` events of Ixora sockets, then `k` of kernel
/// descriptors. A socket with a kernel side ([`fl::KSIDE`]) is in both:
/// ready on both sides, it is reported once, as the kernel reports a
/// descriptor once; a one-shot one reported by the kernel is disabled on
/// the Ixora side too; the kernel side's watch is marked ready. Returns
/// the number of events left.
fn merge_kernel_side(
    ep: &std::sync::Mutex<Epoll>,
    out: *mut epoll_event,
    n: usize,
    k: usize,
) -> usize {
    if k == 0 {
        return n;
    }
    let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
    // The set's sockets with a kernel side (few, usually none): one pass
    // over the set, then each kernel event is checked against them only.
    let sides: Vec<usize> = (0..g.items().len())
        .filter(|&i| g.items()[i].kernel)
        .collect();
    if sides.is_empty() {
        return n + k;
    }
    // SAFETY: `out` holds `n + k` initialised events (written above).
    let evs = unsafe { std::slice::from_raw_parts_mut(out, n + k) };
    let mut len = n + k;
    let mut j = n;
    while j < len {
        let (ev, data) = (evs[j].events, evs[j].u64);
        let mut dual = false;
        for &i in &sides {
            let it = g.item_mut(i);
            if it.data != data {
                continue;
            }
            dual = true;
            if it.events & libc::EPOLLONESHOT as u32 != 0 {
                it.disabled = true;
            }
            // The kernel side has something: the next accept or receive
            // looks there even if the watch's completion lags.
            crate::kwatch::side_answered(it.fd, 1);
        }
        if !dual {
            j += 1;
            continue;
        }
        match (0..n).find(|&i| evs[i].u64 == data) {
            Some(i) => {
                evs[i].events |= ev;
                evs.copy_within(j + 1..len, j);
                len -= 1;
            }
            _ => j += 1,
        }
    }
    len
}

/// epoll_wait(2).
#[no_mangle]
pub extern "C" fn epoll_wait(
    epfd: c_int,
    out: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    epoll_common(epfd, out, max, timeout, std::ptr::null())
}

/// epoll_pwait(2) (the signal mask applies only when the call blocks in
/// the kernel).
#[no_mangle]
pub extern "C" fn epoll_pwait(
    epfd: c_int,
    out: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    epoll_common(epfd, out, max, timeout, sigmask)
}

/// epoll_pwait2(2): epoll_pwait with a `timespec` timeout (NULL: none).
/// A set with Ixora sockets keeps it to the millisecond (rounded up, so it
/// never returns early); a set of kernel descriptors only goes to the
/// kernel's call as it is. A negative or malformed timeout is `EINVAL`, as
/// for the kernel.
#[no_mangle]
pub extern "C" fn epoll_pwait2(
    epfd: c_int,
    out: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let ixora_set = state::epoll(epfd).is_some_and(|ep| {
        !ep.lock()
            .unwrap_or_else(|p| p.into_inner())
            .items()
            .is_empty()
    });
    if !ixora_set {
        state::passthrough();
        return real!(epoll_pwait2: fn(c_int, *mut epoll_event, c_int, *const timespec, *const sigset_t) -> c_int)(
            epfd, out, max, timeout, sigmask,
        );
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: epoll_pwait2(2)'s contract: a non-null `timeout` points
        // to a readable timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            set_errno(libc::EINVAL);
            return -1;
        }
        let ms = (t.tv_sec as i128) * 1000 + (t.tv_nsec as i128 + 999_999) / 1_000_000;
        ms.min(c_int::MAX as i128) as c_int
    };
    epoll_common(epfd, out, max, ms, sigmask)
}

// ------------------------------------------------------------ poll/select

/// poll(2) and ppoll(2) (`sigmask`: ppoll's, null for poll) of a set with
/// Ixora sockets; None: none in it (the kernel's call then). As Linux's,
/// it returns 0 only once `timeout` has passed: a wait woken by a
/// readiness that was gone at the final look (another thread took the
/// bytes) waits on for what is left.
fn poll_common(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    name: usize,
    sigmask: *const sigset_t,
) -> Option<c_int> {
    // (The clock only for a wait that can end by its time.)
    let start = (timeout > 0).then(std::time::Instant::now);
    let mut left = timeout;
    loop {
        let n = poll_once(fds, nfds, left, name, sigmask)?;
        if n != 0 || timeout == 0 {
            return Some(n);
        }
        if let Some(start) = start {
            let spent = start.elapsed().as_millis().min(c_int::MAX as u128) as c_int;
            if spent >= timeout {
                return Some(0);
            }
            left = timeout - spent;
        }
    }
}

thread_local! {
    /// When this thread's `poll` or `select` last looked at the kernel
    /// descriptors of a set with ready sockets.
    static POLL_KERNEL_SEEN: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// Whether this thread's `poll`/`select` should look at the kernel
/// descriptors of its set beside the ready sockets now (once per
/// [`KERNEL_PEEK`]); if so, the look is noted.
fn kernel_peek_due() -> bool {
    POLL_KERNEL_SEEN.with(|c| {
        let now = std::time::Instant::now();
        let due = c.get().is_none_or(|t| now - t >= KERNEL_PEEK);
        if due {
            c.set(Some(now));
        }
        due
    })
}

/// One look (and wait) of [`poll_common`].
fn poll_once(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    name: usize,
    sigmask: *const sigset_t,
) -> Option<c_int> {
    if fds.is_null() || nfds == 0 {
        return None;
    }
    // SAFETY: poll(2)'s contract: `nfds` readable and writable pollfds.
    let p = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    let ours = |fd: c_int| matches!(state::kind_of(fd), kind::IXORA | kind::POOLED);
    if !p.iter().any(|f| ours(f.fd)) {
        return None;
    }
    let a = state::attached()?;
    // Kernel descriptors, and sockets with a kernel side (the same
    // descriptor: polled beside the kernel descriptors, after them in
    // `kp`), found in one walk.
    let (mut kidx, mut lidx): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    for (i, f) in p.iter_mut().enumerate() {
        f.revents = 0;
        if f.fd >= 0 && !ours(f.fd) {
            kidx.push(i);
        } else if f.events & state::POLL_READ != 0
            && state::entry(f.fd).is_some_and(|e| e.flags.load(Ordering::Relaxed) & fl::KSIDE != 0)
        {
            lidx.push(i);
        }
    }
    let scan = |p: &mut [pollfd]| -> usize {
        let mut r = 0;
        for f in p.iter_mut() {
            if state::pooled(f.fd) {
                // A closed descriptor, as the kernel reports it.
                f.revents = libc::POLLNVAL;
                r += 1;
            } else if let Some(sk) = state::sock(f.fd) {
                let want = f.events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
                f.revents = sk.revents() & want;
                if f.revents != 0 {
                    r += 1;
                }
            }
        }
        r
    };
    let mut kp: Vec<pollfd> = kidx
        .iter()
        .map(|&i| pollfd {
            fd: p[i].fd,
            events: p[i].events,
            revents: 0,
        })
        .chain(lidx.iter().map(|&i| pollfd {
            fd: p[i].fd,
            events: p[i].events & state::POLL_READ,
            revents: 0,
        }))
        .collect();
    let n = scan(p);
    // A ring owed to a sleeping service: now, or (with descriptors ready)
    // perhaps at the next call.
    let kicked = if n > 0 {
        state::kick_unless_busy(a)
    } else {
        state::kick(a)
    };
    // Kernel descriptors are part of the answer; a kernel side when its
    // watch says it may have something (a blocking call sees it anyway:
    // the wait below polls it).
    let side_maybe = |kp: &[pollfd]| {
        kp[kidx.len()..]
            .iter()
            .any(|f| crate::kwatch::side_maybe_ready(f.fd) != Some(false))
    };
    let look = if n > 0 && !kidx.is_empty() && !side_maybe(&kp) {
        // Sockets are ready: the kernel descriptors are looked at once per
        // KERNEL_PEEK, as an epoll set's are (at most that late under
        // load; puma's `IO.select` of a pipe and its listener entered the
        // kernel on every call).
        kernel_peek_due()
    } else {
        !kidx.is_empty() || side_maybe(&kp)
    };
    if n > 0 && !look {
        count(a, name, !kicked);
        return Some(n as c_int);
    }
    let kpoll = |kp: &mut [pollfd]| -> c_int {
        for f in &kp[kidx.len()..] {
            crate::kwatch::side_asking(f.fd);
        }
        let k = sys_poll(kp, 0).max(0);
        for f in &kp[kidx.len()..] {
            crate::kwatch::side_answered(f.fd, c_int::from(f.revents != 0));
        }
        k
    };
    // Look at them now.
    let k = if look { kpoll(&mut kp) } else { 0 };
    // Without kernel descriptors the call stays in user space unless it
    // has to ring the doorbell or sleep.
    let mut user = !look && !kicked;
    if n + k as usize == 0 && timeout != 0 {
        let mut found = 0;
        // Woken by transmit progress only where POLLOUT is asked for.
        // (The thread's lists of its last wait, reused, as epoll's bitmaps.)
        let (mut interest, mut tx_interest) = POLL_SLOTS.take();
        interest.clear();
        tx_interest.clear();
        for f in p.iter() {
            if let Some(sk) = state::sock(f.fd) {
                if f.events & state::POLL_WRITE != 0 {
                    tx_interest.push(sk.s);
                } else {
                    interest.push(sk.s);
                }
            }
        }
        let pp = p as *mut [pollfd];
        let ok = state::block_until(
            a,
            timeout,
            OnSignal::masked(sigmask),
            &mut kp,
            None,
            state::Interest::Slots {
                rx: &interest,
                tx: &tx_interest,
            },
            &mut || {
                // SAFETY: `pp` is the caller's array, borrowed for this call.
                found = scan(unsafe { &mut *pp });
                found > 0
            },
        );
        POLL_SLOTS.set((interest, tx_interest));
        user &= !state::blocked_in_kernel();
        if !ok && errno() == libc::EINTR {
            count(a, name, false);
            return Some(-1);
        }
        // The kernel descriptors' events; a kernel side's only if the
        // wait was woken by it or its watch says it may have something.
        let woke = kp.iter().any(|f| f.revents != 0);
        if !kidx.is_empty() || woke || side_maybe(&kp) {
            kpoll(&mut kp);
        }
    }
    scan(p);
    for (j, &i) in kidx.iter().enumerate() {
        p[i].revents = kp[j].revents;
    }
    for (j, &i) in lidx.iter().enumerate() {
        p[i].revents |= kp[kidx.len() + j].revents & state::POLL_READ;
    }
    let total = p.iter().filter(|f| f.revents != 0).count();
    count(a, name, user);
    Some(total as c_int)
}

/// Whether `sk` is a socket on any address with a kernel side
/// ([`fl::KSIDE`]: a listener listening there too, a UDP socket bound).
fn kernel_side(sk: Sock) -> bool {
    sk.e.flags.load(Ordering::Relaxed) & fl::KSIDE != 0
}

/// Whether the descriptor of `sk` may listen or be bound in the kernel (a
/// socket with a kernel side; also a listener on any address a `fork`
/// child made listen, or whose kernel side failed after its bind, and a
/// UDP socket on any address, whose `dup` may hold one), or whose file
/// another process may hold ([`fl::PASSED`]): it is closed, never pooled
/// as a placeholder.
fn kernel_may_hold(sk: Sock) -> bool {
    kernel_side(sk)
        || sk.e.flags.load(Ordering::Relaxed) & fl::PASSED != 0
        || (sk.e.flags.load(Ordering::Relaxed) & fl::BOUND_ANY != 0
            && (sk.dgram() || sk.state() == st::LISTEN))
}

/// poll(2).
#[no_mangle]
pub extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    match poll_common(fds, nfds, timeout, call("poll"), std::ptr::null()) {
        Some(r) => r,
        None => {
            state::passthrough();
            real!(poll: fn(*mut pollfd, nfds_t, c_int) -> c_int)(fds, nfds, timeout)
        }
    }
}

/// __poll_chk.
#[no_mangle]
pub extern "C" fn __poll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if (nfds as usize).saturating_mul(std::mem::size_of::<pollfd>()) > fdslen {
        // SAFETY: glibc's own answer to an overflow.
        unsafe { libc::abort() }
    }
    poll(fds, nfds, timeout)
}

fn ts_ms(ts: *const timespec) -> c_int {
    if ts.is_null() {
        return -1;
    }
    // SAFETY: ppoll(2)'s contract: a readable timespec or null.
    let t = unsafe { &*ts };
    (t.tv_sec * 1000 + (t.tv_nsec + 999_999) / 1_000_000).clamp(0, c_int::MAX as i64) as c_int
}

/// ppoll(2) (the signal mask applies when the call passes to the kernel).
#[no_mangle]
pub extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    ts: *const timespec,
    ss: *const sigset_t,
) -> c_int {
    match poll_common(fds, nfds, ts_ms(ts), call("poll"), ss) {
        Some(r) => r,
        None => {
            state::passthrough();
            real!(ppoll: fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int)(
                fds, nfds, ts, ss,
            )
        }
    }
}

/// __ppoll_chk.
#[no_mangle]
pub extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    ts: *const timespec,
    ss: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if (nfds as usize).saturating_mul(std::mem::size_of::<pollfd>()) > fdslen {
        // SAFETY: glibc's own answer to an overflow.
        unsafe { libc::abort() }
    }
    ppoll(fds, nfds, ts, ss)
}

fn select_common(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ms: c_int,
    sigmask: *const sigset_t,
) -> Option<c_int> {
    let n = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    let mut p: Vec<pollfd> = Vec::new();
    let mut any = false;
    for fd in 0..n {
        // SAFETY: the sets are null or valid fd_sets (select's contract).
        let (ri, wi, ei) = unsafe {
            (
                !r.is_null() && libc::FD_ISSET(fd, r),
                !w.is_null() && libc::FD_ISSET(fd, w),
                !e.is_null() && libc::FD_ISSET(fd, e),
            )
        };
        if ri || wi || ei {
            if state::pooled(fd) {
                return Some(fail(libc::EBADF)); // closed, as far as the program knows
            }
            any |= state::kind_of(fd) == kind::IXORA;
            let mut ev = 0;
            if ri {
                ev |= libc::POLLIN;
            }
            if wi {
                ev |= libc::POLLOUT;
            }
            if ei {
                ev |= libc::POLLPRI;
            }
            p.push(pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    if !any {
        return None;
    }
    let res = poll_common(
        p.as_mut_ptr(),
        p.len() as nfds_t,
        ms,
        call("select"),
        sigmask,
    )?;
    if res < 0 {
        return Some(res);
    }
    let mut total = 0;
    // SAFETY: as above; FD_ZERO/FD_SET write inside the sets.
    unsafe {
        for s in [r, w, e] {
            if !s.is_null() {
                libc::FD_ZERO(s);
            }
        }
        for f in &p {
            if f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                && f.events & libc::POLLIN != 0
            {
                libc::FD_SET(f.fd, r);
                total += 1;
            }
            if f.revents & (libc::POLLOUT | libc::POLLERR) != 0 && f.events & libc::POLLOUT != 0 {
                libc::FD_SET(f.fd, w);
                total += 1;
            }
            if f.revents & libc::POLLPRI != 0 && f.events & libc::POLLPRI != 0 {
                libc::FD_SET(f.fd, e);
                total += 1;
            }
        }
    }
    Some(total)
}

/// select(2).
#[no_mangle]
pub extern "C" fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    tv: *mut timeval,
) -> c_int {
    let ms = if tv.is_null() {
        -1
    } else {
        // SAFETY: select's contract: a readable timeval or null.
        let t = unsafe { &*tv };
        (t.tv_sec * 1000 + (t.tv_usec + 999) / 1000).clamp(0, c_int::MAX as i64) as c_int
    };
    match select_common(nfds, r, w, e, ms, std::ptr::null()) {
        Some(x) => x,
        None => {
            state::passthrough();
            real!(select: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int)(
                nfds, r, w, e, tv,
            )
        }
    }
}

/// pselect(2).
#[no_mangle]
pub extern "C" fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    ss: *const sigset_t,
) -> c_int {
    match select_common(nfds, r, w, e, ts_ms(ts), ss) {
        Some(x) => x,
        None => {
            state::passthrough();
            real!(pselect: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int)(
                nfds, r, w, e, ts, ss,
            )
        }
    }
}

// ------------------------------------------------------- descriptors, opts

fn dup_into(sk: Sock, nfd: c_int, cloexec: bool) {
    state::hold(sk.a, sk.s);
    // (Close-on-exec is the new descriptor's own.)
    let flags = sk.e.flags.load(Ordering::Relaxed) & !(fl::CLOEXEC_KNOWN | fl::CLOEXEC);
    state::install(
        nfd,
        sk.s,
        sk.e.gen.load(Ordering::Relaxed),
        flags | fl::cloexec(cloexec),
    );
}

/// `nfd` (if a descriptor) was made a duplicate of kernel descriptor
/// `fd`: if `fd` is an undecided socket, `nfd` is the same undecided
/// socket, and goes where the socket is decided (see
/// [`state::dup_undecided`]); if it is an epoll set, `nfd` names the same
/// set ([`state::epoll_dup`]).
fn dup_kernel(fd: c_int, nfd: c_int, cloexec: bool) {
    if nfd >= 0 && state::kind_of(fd) == kind::MAYBE {
        state::dup_undecided(fd, nfd, cloexec);
    }
    if nfd >= 0 && state::epoll(fd).is_some() {
        state::epoll_dup(fd, nfd);
    }
}

/// Before `newfd` is replaced by dup2/dup3: drop its Ixora socket.
fn displace(newfd: c_int) {
    if let Some(sk) = state::sock(newfd) {
        if kernel_may_hold(sk) {
            crate::kwatch::side_forget(newfd);
        }
        state::release_sock(sk);
    } else if state::pooled(newfd) {
        // The number is the program's again.
        state::unpool(newfd);
    }
}

/// Descriptor `fd` was replaced by dup2/dup3 (its Ixora socket dropped
/// before, by [`displace`]): the kernel's until the caller says what it
/// is now; no longer an epoll set's.
fn replaced(fd: c_int) {
    if let Some(e) = state::entry(fd) {
        e.kind.store(kind::NONE, Ordering::Release);
    }
    if state::epoll(fd).is_some() {
        state::epoll_forget(fd);
    }
}

/// dup(2).
#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    if state::pooled(fd) {
        return fail(libc::EBADF);
    }
    let nfd = real!(dup: fn(c_int) -> c_int)(fd);
    match state::sock(fd) {
        Some(sk) if nfd >= 0 => {
            dup_into(sk, nfd, false);
            count(sk.a, call("dup"), false);
        }
        _ => {
            dup_kernel(fd, nfd, false);
            state::passthrough();
        }
    }
    nfd
}

/// dup2(2).
#[no_mangle]
pub extern "C" fn dup2(fd: c_int, newfd: c_int) -> c_int {
    if state::pooled(fd) {
        return fail(libc::EBADF);
    }
    if fd == newfd {
        return real!(dup2: fn(c_int, c_int) -> c_int)(fd, newfd);
    }
    if state::kind_of(newfd) == kind::INTERNAL {
        return fail(libc::EBUSY);
    }
    displace(newfd);
    let r = real!(dup2: fn(c_int, c_int) -> c_int)(fd, newfd);
    if r >= 0 {
        replaced(r);
        if let Some(sk) = state::sock(fd) {
            dup_into(sk, r, false);
            count(sk.a, call("dup"), false);
        } else {
            dup_kernel(fd, r, false);
        }
    }
    r
}

/// dup3(2).
#[no_mangle]
pub extern "C" fn dup3(fd: c_int, newfd: c_int, flags: c_int) -> c_int {
    if state::pooled(fd) {
        return fail(libc::EBADF);
    }
    if state::kind_of(newfd) == kind::INTERNAL {
        return fail(libc::EBUSY);
    }
    if fd != newfd {
        displace(newfd);
    }
    let r = real!(dup3: fn(c_int, c_int, c_int) -> c_int)(fd, newfd, flags);
    if r >= 0 {
        replaced(r);
        if let Some(sk) = state::sock(fd) {
            dup_into(sk, r, flags & libc::O_CLOEXEC != 0);
        } else {
            dup_kernel(fd, r, flags & libc::O_CLOEXEC != 0);
        }
    }
    r
}

/// fcntl(2). Declared with one argument word: on x86-64 and aarch64 a
/// variadic integer or pointer argument arrives where a fixed one would.
#[no_mangle]
pub extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let real_fcntl = || real!(fcntl: fn(c_int, c_int; ...) -> c_int)(fd, cmd, arg);
    let k = state::kind_of(fd);
    if k == kind::MAYBE && cmd == libc::F_SETFL {
        state::flag_undecided(fd, fl::NONBLOCK, arg as c_int & libc::O_NONBLOCK != 0);
    }
    let Some(sk) = state::sock(fd) else {
        let r = kernel_fd(fd, real_fcntl);
        if r == 0 && cmd == libc::F_SETFD && k == kind::MAYBE {
            state::note_cloexec(fd, arg as c_int & libc::FD_CLOEXEC != 0);
        }
        if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
            dup_kernel(fd, r, cmd == libc::F_DUPFD_CLOEXEC);
        }
        return r;
    };
    let known = fl::cloexec_of(sk.e.flags.load(Ordering::Relaxed));
    match cmd {
        // Close-on-exec, where the shim knows it: no system call (a
        // pre-forking server sets it on every connection it accepts).
        libc::F_GETFD if known.is_some() => {
            count(sk.a, call("fcntl"), true);
            if known == Some(true) {
                libc::FD_CLOEXEC
            } else {
                0
            }
        }
        libc::F_GETFD => {
            count(sk.a, call("fcntl"), false);
            let r = real_fcntl();
            if r >= 0 {
                state::note_cloexec(fd, r & libc::FD_CLOEXEC != 0);
            }
            r
        }
        libc::F_SETFD => {
            let on = arg as c_int & libc::FD_CLOEXEC != 0;
            if known == Some(on) && arg as c_int & !libc::FD_CLOEXEC == 0 {
                count(sk.a, call("fcntl"), true);
                return 0;
            }
            count(sk.a, call("fcntl"), false);
            let r = real_fcntl();
            if r == 0 {
                state::note_cloexec(fd, on);
            }
            r
        }
        libc::F_GETFL => {
            count(sk.a, call("fcntl"), true);
            libc::O_RDWR | if sk.nonblock() { libc::O_NONBLOCK } else { 0 }
        }
        libc::F_SETFL => {
            count(sk.a, call("fcntl"), true);
            // The open file description's flag: every duplicate's.
            state::flag_socket(sk, fl::NONBLOCK, arg as c_int & libc::O_NONBLOCK != 0);
            0
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            count(sk.a, call("fcntl"), false);
            let nfd = real_fcntl();
            if nfd >= 0 {
                dup_into(sk, nfd, cmd == libc::F_DUPFD_CLOEXEC);
            }
            nfd
        }
        _ => {
            count(sk.a, call("fcntl"), false);
            real_fcntl()
        }
    }
}

/// fcntl64 (glibc's name for the same call with 64-bit offsets).
#[no_mangle]
pub extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // (A pooled placeholder too: fcntl says EBADF for it.)
    if state::kind_of(fd) != kind::NONE {
        return fcntl(fd, cmd, arg);
    }
    real!(fcntl64: fn(c_int, c_int; ...) -> c_int)(fd, cmd, arg)
}

/// sockatmark(3)'s request (not in the `libc` crate for Linux).
const SIOCATMARK: c_ulong = 0x8905;
/// Bytes written and not yet acknowledged (`linux/sockios.h`; the
/// terminal's `TIOCOUTQ`).
const SIOCOUTQ: c_ulong = 0x5411;
/// Bytes written and not yet sent (`linux/sockios.h`).
const SIOCOUTQNSD: c_ulong = 0x894b;

/// A TCP socket's send queue for `SIOCOUTQ` (`unsent_only`: for
/// `SIOCOUTQNSD`), as Linux's `tcp_ioctl` counts it: what was written
/// and not yet acknowledged (`write_seq - snd_una`, the FIN counting
/// one), or not yet sent (`write_seq - snd_nxt`); 0 for a socket that
/// never had a connection. Asked of the service (a round trip, as
/// `TCP_INFO`), which adds what the transmit ring still holds to the
/// stack's part: one snapshot, taken where the ring's bytes move.
fn send_queue(sk: Sock, unsent_only: bool) -> u64 {
    let (r, tail) = state::request_tail(sk.a, Msg::new(op::INFO, sk.s, 0, 0));
    match TcpInfo::decode(&tail) {
        Some(t) if r.a >= 0 => {
            u64::from(t.notsent) + if unsent_only { 0 } else { u64::from(t.unacked) }
        }
        // Never connected, or the connection is gone whole.
        _ => 0,
    }
}

/// ioctl(2): FIONREAD, FIONBIO, SIOCATMARK, SIOCOUTQ and SIOCOUTQNSD on
/// Ixora sockets.
#[no_mangle]
pub extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    let Some(sk) = state::sock(fd) else {
        if state::kind_of(fd) == kind::MAYBE && req == libc::FIONBIO && arg != 0 {
            // SAFETY: FIONBIO's argument is a readable int pointer.
            let on = unsafe { *(arg as *const c_int) } != 0;
            state::flag_undecided(fd, fl::NONBLOCK, on);
        }
        let real_ioctl = || real!(ioctl: fn(c_int, c_ulong; ...) -> c_int)(fd, req, arg);
        let r = if is_iface_ioctl(req) && !state::pooled(fd) {
            state::passthrough();
            // SAFETY: the ioctl's contract on `arg`.
            unsafe { iface_ioctl(req, arg, real_ioctl) }
        } else {
            kernel_fd(fd, real_ioctl)
        };
        if r == 0 && state::kind_of(fd) == kind::MAYBE {
            note_ioctl_cloexec(fd, req);
        }
        return r;
    };
    if passes_to_placeholder(req) {
        // The descriptor's own flag, or the kernel's interfaces and
        // routes: the placeholder (an AF_INET socket) answers as the
        // program's socket would.
        count(sk.a, call("ioctl"), false);
        let real_ioctl = || real!(ioctl: fn(c_int, c_ulong; ...) -> c_int)(fd, req, arg);
        let r = if is_iface_ioctl(req) {
            // SAFETY: the ioctl's contract on `arg`.
            unsafe { iface_ioctl(req, arg, real_ioctl) }
        } else {
            real_ioctl()
        };
        if r == 0 {
            note_ioctl_cloexec(fd, req);
        }
        return r;
    }
    let listener = sk.state() == st::LISTEN;
    // A TCP connection's send queue is asked of the service (a round
    // trip through the kernel).
    let asks = matches!(req, SIOCOUTQ | SIOCOUTQNSD)
        && !sk.dgram()
        && matches!(sk.state(), st::ESTABLISHED | st::CLOSED);
    count(sk.a, call("ioctl"), !asks);
    if arg == 0 {
        return fail(libc::EFAULT);
    }
    match req {
        // A listener has no queue of bytes: Linux's `tcp_ioctl` says
        // EINVAL (until 2026-11-29 FIONREAD of an Ixora listener said 0).
        libc::FIONREAD | SIOCOUTQ | SIOCOUTQNSD if listener => fail(libc::EINVAL),
        libc::FIONREAD => {
            let n = if sk.dgram() {
                // The next datagram's length, as Linux's UDP answers; with
                // a kernel side, of the datagram the next receive takes.
                match sk.next_dgram_len() {
                    Some(n) if kernel_side(sk) => {
                        next_side(sk, Some(false));
                        n as u64
                    }
                    Some(n) => n as u64,
                    None if kernel_side(sk) => {
                        let mut v: c_int = 0;
                        let r = real!(ioctl: fn(c_int, c_ulong; ...) -> c_int)(
                            fd,
                            libc::FIONREAD,
                            &mut v as *mut c_int,
                        );
                        if r == 0 && v > 0 {
                            next_side(sk, Some(true));
                        }
                        v.max(0) as u64
                    }
                    None => 0,
                }
            } else {
                sk.queued().min(c_int::MAX as u64)
            };
            // SAFETY: FIONREAD's argument is a writable int pointer.
            unsafe { *(arg as *mut c_int) = n as c_int };
            0
        }
        libc::FIONBIO => {
            // SAFETY: FIONBIO's argument is a readable int pointer.
            let on = unsafe { *(arg as *const c_int) } != 0;
            state::flag_socket(sk, fl::NONBLOCK, on);
            0
        }
        // sockatmark(3)'s request (glibc's own sockatmark reaches the
        // placeholder, an unconnected TCP socket, which says 0 too):
        // never at the urgent mark, as the stack delivers urgent bytes in
        // line and keeps no mark (Linux's TCP says 1 only once the bytes
        // before an urgent one are read); UDP knows no mark (ENOTTY, as
        // Linux's). Until 2026-11-29 TCP said ENOTTY.
        SIOCATMARK if !sk.dgram() => {
            // SAFETY: SIOCATMARK's argument is a writable int pointer.
            unsafe { *(arg as *mut c_int) = 0 };
            0
        }
        // A UDP socket's send queue: the datagrams its transmit ring
        // holds, with their records (Linux counts the memory of those
        // not yet sent out, `sk_wmem_alloc`); it has no SIOCOUTQNSD
        // (ENOTTY, as Linux's `udp_ioctl`).
        SIOCOUTQ | SIOCOUTQNSD => {
            let n = match (sk.dgram(), req) {
                (true, SIOCOUTQ) => sk.tx_queued(),
                (true, _) => return fail(libc::ENOTTY),
                (false, r) if asks => send_queue(sk, r == SIOCOUTQNSD),
                (false, _) => 0,
            };
            // SAFETY: the requests' argument is a writable int pointer.
            unsafe { *(arg as *mut c_int) = n.min(c_int::MAX as u64) as c_int };
            0
        }
        _ => fail(libc::ENOTTY),
    }
}

// ------------------------------------------------------- stat of a number

/// Whether a stat through descriptor `fd` with `path` (the `*at` forms; null
/// for `fstat`) is of a pooled placeholder, a number the program closed:
/// the kernel would say EBADF for it, where the placeholder, a socket the
/// kernel still holds, would be described. An absolute path ignores the
/// descriptor; an empty one (`AT_EMPTY_PATH`) or a relative one resolves
/// against it.
fn stat_through_pooled(fd: c_int, path: *const libc::c_char) -> bool {
    // SAFETY: a non-null `path` is the NUL-terminated string the program
    // passed to the stat call; only its first byte is read.
    fd >= 0 && state::pooled(fd) && (path.is_null() || unsafe { *path } != b'/' as libc::c_char)
}

/// An interposed stat call `$name`: EBADF through a pooled number
/// ([`stat_through_pooled`] of descriptor `$fd` and path `$path`), else
/// the C library's.
macro_rules! stat_call {
    ($(#[$doc:meta])* $name:ident($($a:ident: $t:ty),*), $fd:ident, $path:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> c_int {
            if stat_through_pooled($fd, $path) {
                return fail(libc::EBADF);
            }
            real!($name: fn($($t),*) -> c_int)($($a),*)
        }
    };
}

/// A path argument of a stat call (a C string).
type CPath = *const libc::c_char;
const NO_PATH: CPath = std::ptr::null();

stat_call!(
    /// fstat(2) (glibc 2.33 and later).
    fstat(fd: c_int, buf: *mut c_void), fd, NO_PATH
);
stat_call!(
    /// fstat64(2).
    fstat64(fd: c_int, buf: *mut c_void), fd, NO_PATH
);
stat_call!(
    /// fstat as programs built against glibc before 2.33 call it.
    __fxstat(ver: c_int, fd: c_int, buf: *mut c_void), fd, NO_PATH
);
stat_call!(
    /// fstat64 as programs built against glibc before 2.33 call it.
    __fxstat64(ver: c_int, fd: c_int, buf: *mut c_void), fd, NO_PATH
);
stat_call!(
    /// fstatat(2).
    fstatat(fd: c_int, path: CPath, buf: *mut c_void, flags: c_int), fd, path
);
stat_call!(
    /// fstatat64(2).
    fstatat64(fd: c_int, path: CPath, buf: *mut c_void, flags: c_int), fd, path
);
stat_call!(
    /// fstatat as programs built against glibc before 2.33 call it.
    __fxstatat(ver: c_int, fd: c_int, path: CPath, buf: *mut c_void, flags: c_int), fd, path
);
stat_call!(
    /// fstatat64 as programs built against glibc before 2.33 call it.
    __fxstatat64(ver: c_int, fd: c_int, path: CPath, buf: *mut c_void, flags: c_int), fd, path
);
stat_call!(
    /// statx(2).
    statx(fd: c_int, path: CPath, flags: c_int, mask: c_uint, buf: *mut c_void), fd, path
);

// ------------------------------------------------------------ interfaces

/// The entry the shim adds to `getifaddrs`'s list: the service's address,
/// on the service's interface. The kernel's interfaces do not hold it
/// (Ixora owns it), so a program that binds one socket per listed address
/// (BIND's `named`) or looks its local address up among them never found
/// it.
#[repr(C)]
struct ServiceIfa {
    ifa: libc::ifaddrs,
    name: [libc::c_char; libc::IFNAMSIZ],
    addr: libc::sockaddr_in,
    mask: libc::sockaddr_in,
    bcast: libc::sockaddr_in,
}

/// The service's address as an interface of this host shows it: on the
/// interface of the service's port (its name; "ixora" if that is not
/// this namespace's), with the subnet's mask.
struct ServiceIface {
    name: [libc::c_char; libc::IFNAMSIZ],
    ip: u32,
    mask: u32,
    prefix: u8,
    /// Its interface's index (0 when not this namespace's).
    index: u32,
}

impl ServiceIface {
    /// The service's, attaching to it; None without one, or before it
    /// has an address.
    fn get() -> Option<ServiceIface> {
        let a = state::attach()?;
        let h = a.r.down_header();
        let ip = h.ip.load(Ordering::Relaxed);
        let prefix = h.prefix.load(Ordering::Relaxed).min(32);
        if ip == 0 {
            return None;
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        let index = h.ifindex.load(Ordering::Relaxed);
        // SAFETY: if_indextoname(3) writes at most IFNAMSIZ bytes into `name`.
        let named =
            index != 0 && !unsafe { libc::if_indextoname(index, name.as_mut_ptr()) }.is_null();
        let index = if named { index } else { 0 };
        if !named {
            for (d, s) in name.iter_mut().zip(b"ixora\0") {
                *d = *s as libc::c_char;
            }
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Some(ServiceIface {
            name,
            ip,
            mask,
            prefix: prefix as u8,
            index,
        })
    }
}

/// The shim's answer after the kernel's receive of `r` bytes into the
/// program's buffer (`buf`, `n` bytes) on descriptor `fd`: an rtnetlink
/// socket's address dump gets the service's address (see `netlink`).
/// Returns the length to give the program, and whether the datagram was
/// longer than the buffer (a peek that found no room for the entry).
///
/// # Safety
/// `buf` has `n` writable bytes (or is null), the kernel's `r` of them
/// received.
unsafe fn netlink_received(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    r: ssize_t,
    flags: c_int,
) -> (ssize_t, bool) {
    if r <= 0 || buf.is_null() || state::kind_of(fd) != kind::NETLINK {
        return (r, false);
    }
    // SAFETY (caller): `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    let peek = flags & libc::MSG_PEEK != 0;
    let iface = || {
        ServiceIface::get().map(|s| crate::netlink::Iface {
            ip: s.ip,
            prefix: s.prefix,
            index: s.index,
            name: s.name.map(|c| c as u8),
        })
    };
    match crate::netlink::received(fd, b, r as usize, peek, iface) {
        crate::netlink::Received::Grew(len) => (len as ssize_t, false),
        // (A peek with MSG_TRUNC is told the whole length, as the kernel
        // tells it; the bytes are a view of the datagram cut short.)
        crate::netlink::Received::NoRoom(len) if peek => {
            let told = if flags & libc::MSG_TRUNC != 0 {
                len
            } else {
                r as usize
            };
            (told as ssize_t, true)
        }
        _ => (r, false),
    }
}

/// After the kernel took `r` bytes of the program's `n` at `buf` on
/// descriptor `fd`: an rtnetlink socket's request may open an address
/// dump (see `netlink`).
///
/// # Safety
/// `buf` has `n` readable bytes (or is null).
unsafe fn netlink_sent(fd: c_int, buf: *const c_void, n: size_t, r: ssize_t) {
    if r > 0 && !buf.is_null() && state::kind_of(fd) == kind::NETLINK {
        // SAFETY (caller): `n` readable bytes, of which the kernel took `r`.
        let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n.min(r as usize)) };
        crate::netlink::sent(fd, b);
    }
}

/// SIOCGIFCONF, SIOCGIFADDR, SIOCGIFNETMASK and SIOCGIFBRDADDR on any
/// socket (`real`: the kernel's answer): as for [`getifaddrs`], the
/// service's address is listed, after the kernel's, on the service's
/// interface, which no kernel address is on (Java's `NetworkInterface`
/// lists interfaces with SIOCGIFCONF); asked by that interface's name,
/// the address calls answer with it.
///
/// # Safety
/// `arg` is what the ioctl's contract says: an `ifconf` or `ifreq`.
unsafe fn iface_ioctl(req: c_ulong, arg: usize, real: impl FnOnce() -> c_int) -> c_int {
    const IFREQ: usize = std::mem::size_of::<libc::ifreq>();
    if arg == 0 {
        return real();
    }
    if req == libc::SIOCGIFCONF {
        // SAFETY (caller): an ifconf.
        let ifc = unsafe { &mut *(arg as *mut libc::ifconf) };
        let room = ifc.ifc_len.max(0) as usize;
        let r = real();
        let Some(svc) = (r == 0).then(ServiceIface::get).flatten() else {
            return r;
        };
        // SAFETY: the union's pointer member is the buffer (or null).
        let buf = unsafe { ifc.ifc_ifcu.ifcu_req };
        let used = ifc.ifc_len.max(0) as usize;
        if buf.is_null() {
            // The length a full list needs.
            ifc.ifc_len = (used + IFREQ) as c_int;
            return r;
        }
        // SAFETY: the kernel wrote `used` bytes of ifreqs into `buf`.
        let listed = unsafe { std::slice::from_raw_parts(buf, used / IFREQ) };
        let has = listed.iter().any(|q| {
            // SAFETY: SIOCGIFCONF's entries hold AF_INET addresses.
            let a = unsafe { &*(&q.ifr_ifru.ifru_addr as *const _ as *const libc::sockaddr_in) };
            u32::from_be(a.sin_addr.s_addr) == svc.ip
        });
        if !has && used + IFREQ <= room {
            // SAFETY: room for one more entry (checked).
            let q = unsafe { &mut *buf.add(used / IFREQ) };
            // SAFETY: all-zero is a valid ifreq.
            *q = unsafe { std::mem::zeroed() };
            q.ifr_name = svc.name;
            // SAFETY: a sockaddr_in fits the union's sockaddr.
            unsafe { put_ifr_addr(q, svc.ip) };
            ifc.ifc_len = (used + IFREQ) as c_int;
        }
        return r;
    }
    let r = real();
    if r == 0 || errno() != libc::EADDRNOTAVAIL {
        return r;
    }
    // SAFETY (caller): an ifreq.
    let q = unsafe { &mut *(arg as *mut libc::ifreq) };
    match ServiceIface::get() {
        Some(svc) if svc.name == q.ifr_name => {
            let v = match req {
                libc::SIOCGIFADDR => svc.ip,
                libc::SIOCGIFNETMASK => svc.mask,
                _ => svc.ip | !svc.mask,
            };
            // SAFETY: as above.
            unsafe { put_ifr_addr(q, v) };
            0
        }
        _ => r,
    }
}

/// An ifreq's address: AF_INET `ip`.
///
/// # Safety
/// `q` is a whole ifreq.
unsafe fn put_ifr_addr(q: &mut libc::ifreq, ip: u32) {
    // SAFETY (caller): the union is as large as a sockaddr, which a
    // sockaddr_in fills.
    unsafe {
        std::ptr::write_unaligned(
            &mut q.ifr_ifru.ifru_addr as *mut sockaddr as *mut libc::sockaddr_in,
            sin(ip, 0),
        )
    };
}

/// The [`ServiceIfa`]s handed out and not yet freed (their addresses).
static SERVICE_IFAS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// getifaddrs(3): the kernel's list, and the service's address at its end
/// (on the interface of the service's port, up) unless the kernel's
/// interfaces hold it too. Programs that ask the kernel for its addresses
/// over rtnetlink themselves (dnsmasq, `ip addr`) get it too: see
/// `netlink`.
#[no_mangle]
pub unsafe extern "C" fn getifaddrs(out: *mut *mut libc::ifaddrs) -> c_int {
    let r = real!(getifaddrs: fn(*mut *mut libc::ifaddrs) -> c_int)(out);
    if r != 0 || out.is_null() {
        return r;
    }
    let Some(svc) = ServiceIface::get() else {
        return r;
    };
    let (ip, mask) = (svc.ip, svc.mask);
    // SAFETY: `*out` is the list the C library just built, every node
    // with a valid (or null) address.
    let mut last: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut p = unsafe { *out };
    while !p.is_null() {
        // SAFETY: as above.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null()
            // SAFETY: as above; an AF_INET address is a sockaddr_in.
            && unsafe { (*i.ifa_addr).sa_family } == libc::AF_INET as libc::sa_family_t
            && u32::from_be(unsafe { (*(i.ifa_addr as *const libc::sockaddr_in)).sin_addr.s_addr })
                == ip
        {
            return r;
        }
        last = p;
        p = i.ifa_next;
    }
    // SAFETY: all-zero is a valid ifaddrs (null pointers) and name.
    let mut node: Box<ServiceIfa> = Box::new(unsafe { std::mem::zeroed() });
    node.addr = sin(ip, 0);
    node.mask = sin(mask, 0);
    node.bcast = sin(ip | !mask, 0);
    node.name = svc.name;
    let raw = Box::into_raw(node);
    // SAFETY: `raw` is ours until freeifaddrs; its pointers point into it.
    unsafe {
        let n = &mut *raw;
        n.ifa.ifa_name = n.name.as_mut_ptr();
        n.ifa.ifa_flags = (libc::IFF_UP
            | libc::IFF_RUNNING
            | libc::IFF_LOWER_UP
            | libc::IFF_BROADCAST
            | libc::IFF_MULTICAST) as c_uint;
        n.ifa.ifa_addr = &mut n.addr as *mut libc::sockaddr_in as *mut sockaddr;
        n.ifa.ifa_netmask = &mut n.mask as *mut libc::sockaddr_in as *mut sockaddr;
        n.ifa.ifa_ifu = &mut n.bcast as *mut libc::sockaddr_in as *mut sockaddr;
        if last.is_null() {
            *out = raw as *mut libc::ifaddrs;
        } else {
            (*last).ifa_next = raw as *mut libc::ifaddrs;
        }
    }
    SERVICE_IFAS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(raw as usize);
    r
}

/// freeifaddrs(3): the shim's entry, then the C library's list.
#[no_mangle]
pub unsafe extern "C" fn freeifaddrs(list: *mut libc::ifaddrs) {
    let mut ours = SERVICE_IFAS.lock().unwrap_or_else(|p| p.into_inner());
    let mut prev: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut p = list;
    while !ours.is_empty() && !p.is_null() {
        // SAFETY: a list getifaddrs returned, as freeifaddrs's contract
        // says.
        let next = unsafe { (*p).ifa_next };
        if let Some(k) = ours.iter().position(|&x| x == p as usize) {
            ours.swap_remove(k);
            if !prev.is_null() {
                // SAFETY: as above.
                unsafe { (*prev).ifa_next = next };
            }
            // SAFETY: made by Box::into_raw in getifaddrs, freed once.
            drop(unsafe { Box::from_raw(p as *mut ServiceIfa) });
            if p == list {
                // The kernel's list was empty.
                return;
            }
            break;
        }
        prev = p;
        p = next;
    }
    drop(ours);
    real!(freeifaddrs: fn(*mut libc::ifaddrs) -> ())(list)
}

/// After a successful `FIOCLEX` / `FIONCLEX` on `fd`: its close-on-exec.
fn note_ioctl_cloexec(fd: c_int, req: c_ulong) {
    match req {
        libc::FIOCLEX => state::note_cloexec(fd, true),
        libc::FIONCLEX => state::note_cloexec(fd, false),
        _ => {}
    }
}

/// ioctl requests on an Ixora socket that its kernel placeholder answers
/// rightly: close-on-exec (`FIOCLEX`, `FIONCLEX`: Python's
/// `os.set_inheritable`), and the socket-configuration calls about the
/// kernel's interfaces, routes and ARP table (`SIOCGIFCONF`,
/// `SIOCGIFADDR`, `SIOCETHTOOL`, ..., `SIOCGSKNS`), which Linux answers on
/// any socket. Not `SIOCOUTQNSD` (this socket's unsent bytes, which the
/// placeholder would call 0): like the other requests about the socket's
/// data that Ixora does not answer, `ENOTTY`.
/// The interface ioctls [`iface_ioctl`] answers.
fn is_iface_ioctl(req: c_ulong) -> bool {
    matches!(
        req,
        libc::SIOCGIFCONF | libc::SIOCGIFADDR | libc::SIOCGIFNETMASK | libc::SIOCGIFBRDADDR
    )
}

fn passes_to_placeholder(req: c_ulong) -> bool {
    const SIOCOUTQNSD: c_ulong = 0x894B;
    matches!(req, libc::FIOCLEX | libc::FIONCLEX)
        || (req != SIOCOUTQNSD && (libc::SIOCADDRT..=0x89FF).contains(&req))
}

unsafe fn put_int(val: *mut c_void, len: *mut socklen_t, v: c_int) -> c_int {
    if val.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY (caller): `len` readable/writable, `val` has `*len` bytes.
    unsafe {
        let n = (*len as usize).min(4);
        std::ptr::copy_nonoverlapping(&v as *const c_int as *const u8, val as *mut u8, n);
        *len = n as socklen_t;
    }
    0
}

/// getsockopt(2).
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let Some(sk) = state::sock(fd) else {
        return kernel_fd(fd, || {
            real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(
                fd, level, name, val, len,
            )
        });
    };
    // TCP_INFO of a connection asks the service (a round trip); so does
    // one of a closed socket: a connection that died (reset, timed out)
    // reads its last figures, as on Linux.
    let asks = (level, name) == (libc::IPPROTO_TCP, libc::TCP_INFO)
        && !sk.dgram()
        && matches!(sk.state(), st::ESTABLISHED | st::CLOSED);
    // What the program set (kept as it was set), if anything: looked up
    // (a lock) only for the options not answered by the shim's own arms
    // (SO_ERROR and TCP_INFO are asked on every connection).
    let by_shim = answered_by_shim(level, name);
    let kept = if by_shim {
        None
    } else {
        sk.a.opt(sk.s, sk.gen(), (level, name))
    };
    // An option never set is answered by a new kernel socket (Linux's
    // default), or for a connection's MSS by the service: system calls.
    let asks = asks
        || (kept.is_none()
            && !by_shim
            && shim_default((level, name)).is_none()
            && !(level == libc::IPPROTO_TCP && sk.dgram()));
    count(sk.a, call("getsockopt"), !asks);
    if level == libc::IPPROTO_TCP && sk.dgram() {
        // A UDP socket has no TCP options (Linux: `do_ip_getsockopt`).
        return fail(libc::EOPNOTSUPP);
    }
    let f = sk.e.flags.load(Ordering::Relaxed);
    let b = |x: u32| (f & x != 0) as c_int;
    let ring = sk.a.r.layout().ring as c_int;
    // SAFETY (all arms): getsockopt(2)'s contract on `val`/`len`.
    unsafe {
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => put_int(val, len, sk.take_error()),
            (libc::SOL_SOCKET, libc::SO_TYPE) => put_int(
                val,
                len,
                if sk.dgram() {
                    libc::SOCK_DGRAM
                } else {
                    libc::SOCK_STREAM
                },
            ),
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => put_int(
                val,
                len,
                if sk.inet6() {
                    libc::AF_INET6
                } else {
                    libc::AF_INET
                },
            ),
            // A dual-stack socket of Ixora's carries IPv4: never IPv6-only.
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) if sk.inet6() => put_int(val, len, 0),
            (libc::SOL_SOCKET, libc::SO_PROTOCOL) => put_int(
                val,
                len,
                if sk.dgram() {
                    libc::IPPROTO_UDP
                } else {
                    libc::IPPROTO_TCP
                },
            ),
            (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => {
                put_int(val, len, (sk.state() == st::LISTEN) as c_int)
            }
            (libc::SOL_SOCKET, n @ (libc::SO_RCVBUF | libc::SO_SNDBUF)) if !sk.dgram() => {
                put_int(val, len, tcp_buffer_said(sk.a, sk.s, n))
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => put_int(val, len, ring),
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => put_int(val, len, b(fl::REUSEADDR)),
            (libc::SOL_SOCKET, libc::SO_REUSEPORT) => put_int(val, len, b(fl::REUSEPORT)),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => put_int(val, len, b(fl::KEEPALIVE)),
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                if val.is_null()
                    || len.is_null()
                    || (*len as usize) < std::mem::size_of::<libc::linger>()
                {
                    return fail(libc::EINVAL);
                }
                let l = libc::linger {
                    l_onoff: b(fl::LINGER0),
                    l_linger: 0,
                };
                std::ptr::write_unaligned(val as *mut libc::linger, l);
                *len = std::mem::size_of::<libc::linger>() as socklen_t;
                0
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => put_int(val, len, 1 - b(fl::NAGLE)),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG)
                if kept.is_none() && sk.state() == st::ESTABLISHED =>
            {
                // A connection's: the MSS it sends with (Linux's
                // `mss_cache`); before one, what was set or Linux's default.
                let (r, tail) = state::request_tail(sk.a, Msg::new(op::INFO, sk.s, 0, 0));
                match TcpInfo::decode(&tail) {
                    Some(t) if r.a >= 0 && t.mss > 0 => put_int(val, len, c_int::from(t.mss)),
                    _ => default_opt(sk, level, name, val, len),
                }
            }
            (libc::IPPROTO_TCP, libc::TCP_INFO) => {
                if val.is_null() || len.is_null() {
                    return fail(libc::EFAULT);
                }
                let mut info: libc::tcp_info = std::mem::zeroed();
                info.tcpi_state = match sk.state() {
                    st::ESTABLISHED => 1,
                    st::CONNECTING => 2,
                    st::LISTEN => 10,
                    _ => 7,
                };
                info.tcpi_rcv_space = ring as u32;
                if sk.state() == st::LISTEN {
                    listener_tcp_info(sk, fd, &mut info);
                }
                if asks {
                    let (r, tail) = state::request_tail(sk.a, Msg::new(op::INFO, sk.s, 0, 0));
                    if let (true, Some(t)) = (r.a >= 0, TcpInfo::decode(&tail)) {
                        fill_tcp_info(&mut info, &t);
                    }
                }
                let n = (*len as usize).min(std::mem::size_of::<libc::tcp_info>());
                std::ptr::copy_nonoverlapping(&info as *const _ as *const u8, val as *mut u8, n);
                *len = n as socklen_t;
                0
            }
            // Anything else the program set is read back as it was set;
            // never set, a default ([`shim_default`], [`default_opt`]).
            key => match kept.or_else(|| shim_default(key)) {
                // (Linux reads a flag back as 0 or 1, whatever was set.)
                Some(v) if flag_opt(level, name) && !val.is_null() && !len.is_null() => {
                    put_int(val, len, c_int::from(v.iter().any(|&b| b != 0)))
                }
                Some(v) if !val.is_null() && !len.is_null() => {
                    let n = (*len as usize).min(v.len());
                    std::ptr::copy_nonoverlapping(v.as_ptr(), val as *mut u8, n);
                    *len = n as socklen_t;
                    0
                }
                Some(_) => fail(libc::EFAULT),
                // Never set: Linux's default, or its error for an option
                // it does not know (until 2026-11-29 ENOPROTOOPT for
                // every option the shim did not keep: TCP_KEEPIDLE,
                // TCP_MAXSEG, IP_TTL, TCP_CONGESTION; `socket_ops.c`).
                None => default_opt(sk, level, name, val, len),
            },
        }
    }
}

/// Whether `getsockopt` of option `(level, name)` on an Ixora socket is
/// answered by the shim whatever was set (the arms of [`getsockopt`]
/// before the options kept as set).
fn answered_by_shim(level: c_int, name: c_int) -> bool {
    matches!(
        (level, name),
        (
            libc::SOL_SOCKET,
            libc::SO_ERROR
                | libc::SO_TYPE
                | libc::SO_DOMAIN
                | libc::SO_PROTOCOL
                | libc::SO_ACCEPTCONN
                | libc::SO_RCVBUF
                | libc::SO_SNDBUF
                | libc::SO_REUSEADDR
                | libc::SO_REUSEPORT
                | libc::SO_KEEPALIVE
                | libc::SO_LINGER
        ) | (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
            | (libc::IPPROTO_TCP, libc::TCP_NODELAY | libc::TCP_INFO)
    )
}

/// An option never set that the shim answers itself: timeouts read 0
/// (none), a device never bound reads as none (sshd's VRF lookup), the
/// low-water marks 1 (gRPC reads `SO_RCVLOWAT` on every connection, and
/// logged ENOPROTOOPT), and `TCP_CONGESTION` the stack's own, CUBIC, not
/// the kernel's default. Others go to [`default_opt`].
fn shim_default(key: (c_int, c_int)) -> Option<Vec<u8>> {
    match key {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) => {
            Some(vec![0u8; std::mem::size_of::<libc::timeval>()])
        }
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE) => Some(Vec::new()),
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT | libc::SO_SNDLOWAT) => {
            Some(1i32.to_ne_bytes().to_vec())
        }
        // (Erlang reads these of every socket: no scratch socket each.)
        (libc::IPPROTO_IP, libc::IP_TOS | libc::IP_RECVTOS | libc::IP_RECVTTL) => {
            Some(0i32.to_ne_bytes().to_vec())
        }
        (libc::IPPROTO_IP, libc::IP_TTL) => Some(default_ttl().to_ne_bytes().to_vec()),
        // (Linux's name buffer: TCP_CA_NAME_MAX bytes, zero-padded.)
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            let mut name = b"cubic".to_vec();
            name.resize(16, 0);
            Some(name)
        }
        _ => None,
    }
}

/// The TTL a socket of this network namespace sends with unless told
/// (`net.ipv4.ip_default_ttl`, read once).
fn default_ttl() -> c_int {
    static TTL: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();
    *TTL.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_default_ttl")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(64)
    })
}

/// Options Linux keeps as a flag and reads back as 0 or 1 whatever int
/// was set (`sock_valbool_flag`, the `inet` flag bits): kept as set here,
/// so read back so (until 2026-11-29 as set: `SO_BROADCAST` 2 read 2).
fn flag_opt(level: c_int, name: c_int) -> bool {
    match level {
        libc::SOL_SOCKET => matches!(
            name,
            libc::SO_BROADCAST
                | libc::SO_DONTROUTE
                | libc::SO_OOBINLINE
                | libc::SO_PASSCRED
                | libc::SO_DEBUG
                | libc::SO_TIMESTAMP
                | libc::SO_TIMESTAMPNS
        ),
        libc::IPPROTO_TCP => name == libc::TCP_CORK,
        libc::IPPROTO_IP => matches!(
            name,
            libc::IP_PKTINFO
                | libc::IP_RECVTTL
                | libc::IP_RECVTOS
                | libc::IP_FREEBIND
                | libc::IP_TRANSPARENT
                | libc::IP_RECVERR
        ),
        libc::IPPROTO_IPV6 => name == libc::IPV6_RECVPKTINFO,
        _ => false,
    }
}

/// Linux's answer to `getsockopt` of an option no one set on Ixora
/// socket `sk`: what a new kernel socket of its family and type says
/// (`TCP_KEEPIDLE` 7200, `IP_TTL` 64), or its error for an option it does
/// not have. Made and closed each time: no descriptor of the shim's lives
/// on where the program could close or reuse it, and an option read back
/// unset is rare.
unsafe fn default_opt(
    sk: Sock,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let Ok(k) = scratch_socket(sk.e) else {
        return fail(libc::ENOPROTOOPT);
    };
    // (getsockopt(2)'s contract on `val`/`len` is the caller's.)
    let r = real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(
        k, level, name, val, len,
    );
    let e = errno();
    crate::real::sys_close(k);
    if r < 0 {
        return fail(e);
    }
    r
}

/// `TCP_INFO` of a listener, as Linux's `tcp_get_info` gives it: the
/// state, the congestion window and reordering a new socket starts with,
/// and two fields aliased: `tcpi_unacked` the connections ready for
/// accept (Ixora's and, on any address, the kernel side's), `tcpi_sacked`
/// the `listen` backlog. Nothing else.
fn listener_tcp_info(sk: Sock, fd: c_int, info: &mut libc::tcp_info) {
    const TCP_INIT_CWND: u32 = 10;
    const TCP_REORDERING: u32 = 3;
    info.tcpi_rcv_space = 0;
    info.tcpi_snd_cwnd = TCP_INIT_CWND;
    info.tcpi_reordering = TCP_REORDERING;
    info.tcpi_unacked = sk.acceptable();
    // The accept ring holds the backlog and one more (at most its
    // capacity).
    let room = sk.a.r.down_slot(sk.s).acc_room.load(Ordering::Relaxed);
    info.tcpi_sacked = room.saturating_sub(1);
    if kernel_side(sk) {
        // SAFETY: a zeroed plain-old-data struct and its length, for the
        // kernel side's own figures.
        let mut k: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as socklen_t;
        let r = real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int)(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut k as *mut _ as *mut c_void,
            &mut len,
        );
        if r == 0 {
            info.tcpi_unacked += k.tcpi_unacked;
        }
    }
}

/// The figures of the service's `INFO` reply in Linux's `tcp_info`
/// terms: times in µs, the congestion window and threshold in segments
/// (no threshold yet: `TCP_INFINITE_SSTHRESH`), the peer's window scale
/// as `snd_wscale` and ours as `rcv_wscale`, the path MTU as the MSS
/// before options + 40.
fn fill_tcp_info(info: &mut libc::tcp_info, t: &TcpInfo) {
    const TCPI_OPT_TIMESTAMPS: u8 = 1;
    const TCPI_OPT_SACK: u8 = 2;
    const TCPI_OPT_WSCALE: u8 = 4;
    let mss = u32::from(t.mss.max(1));
    if t.state != 0 {
        // The stack's own (CLOSE_WAIT once the peer's FIN came: puma
        // skips requests of clients that closed so).
        info.tcpi_state = t.state;
    }
    info.tcpi_rto = t.rto_ms.saturating_mul(1000);
    info.tcpi_snd_mss = mss;
    info.tcpi_rcv_mss = u32::from(t.rcv_mss);
    // Linux's advmss leaves out the timestamps option, as the send MSS.
    info.tcpi_advmss = mss;
    info.tcpi_pmtu = u32::from(t.mss_base) + 40;
    info.tcpi_rtt = t.rtt_us;
    info.tcpi_rttvar = t.rttvar_us;
    info.tcpi_snd_cwnd = t.cwnd / mss;
    info.tcpi_snd_ssthresh = match t.ssthresh {
        u32::MAX => 0x7fff_ffff,
        s => s / mss,
    };
    info.tcpi_total_retrans = t.retrans;
    info.tcpi_unacked = t.unacked_segs;
    info.tcpi_snd_wnd = t.snd_wnd;
    info.tcpi_rcv_wnd = t.rcv_wnd;
    if t.rcv_space != 0 {
        info.tcpi_rcv_space = t.rcv_space;
    }
    info.tcpi_notsent_bytes = t.notsent;
    info.tcpi_segs_in = t.segs_in;
    info.tcpi_segs_out = t.segs_out;
    info.tcpi_bytes_acked = t.bytes_acked;
    info.tcpi_bytes_received = t.bytes_received;
    info.tcpi_bytes_sent = t.bytes_sent;
    info.tcpi_bytes_retrans = t.bytes_retrans;
    info.tcpi_options =
        if t.timestamps { TCPI_OPT_TIMESTAMPS } else { 0 } | if t.sack { TCPI_OPT_SACK } else { 0 };
    if let Some((ours, theirs)) = t.wscale {
        info.tcpi_options |= TCPI_OPT_WSCALE;
        info.tcpi_snd_rcv_wscale = (theirs & 15) | (ours & 15) << 4;
    }
}

/// setsockopt(2). Options are kept by the shim; the ones the stack acts
/// on (TCP_NODELAY, SO_KEEPALIVE and its timing) are set in the socket's
/// up slot for the service ([`set_stack_opt`]).
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let real_set = || {
        real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(
            fd, level, name, val, len,
        )
    };
    let k = state::kind_of(fd);
    if k != kind::IXORA && k != kind::MAYBE {
        return kernel_fd(fd, real_set);
    }
    let e = state::entry(fd).unwrap();
    if level == libc::IPPROTO_TCP && e.flags.load(Ordering::Relaxed) & fl::DGRAM != 0 {
        // A UDP socket has no TCP options (Linux: `ip_setsockopt`); an
        // undecided one is a kernel socket, which says so itself.
        if let Some(sk) = state::sock(fd) {
            count(sk.a, call("setsockopt"), true);
            return fail(libc::ENOPROTOOPT);
        }
        return real_set();
    }
    if let Some(e) = refused_opt(level, name, len, val.is_null()) {
        if k == kind::IXORA || e == libc::EINVAL || e == libc::EFAULT {
            if let Some(sk) = state::sock(fd) {
                count(sk.a, call("setsockopt"), true);
            }
            return fail(e);
        }
    }
    let int = || -> Option<c_int> {
        if val.is_null() || (len as usize) < 4 {
            return None;
        }
        // SAFETY: setsockopt(2)'s contract: `len` readable bytes at `val`.
        Some(unsafe { std::ptr::read_unaligned(val as *const c_int) })
    };
    // An option is the socket's: every duplicate of its descriptor sees
    // it, decided or not (until 2026-11-29 only the one it was set on).
    let setf = |bit: u32, on: bool| {
        let was = e.flags.load(Ordering::Relaxed);
        match state::sock(fd) {
            Some(sk) => state::flag_socket(sk, bit, on),
            None => state::flag_undecided(fd, bit, on),
        }
        was
    };
    // An option the stack acts on, for the service.
    let mut svc: Option<StackOpt> = None;
    // The value kept, where it is not the one given.
    let mut kept: Option<[u8; 4]> = None;
    // The kernel was asked whether it takes the option.
    let mut checked = false;
    let known = known_int_opt(e, level, name, int());
    match (level, name) {
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
            if e.flags.load(Ordering::Relaxed) & fl::INET6 != 0 =>
        {
            if k == kind::IXORA {
                // Bound or connected already: the kernel says EINVAL too.
                return fail(libc::EINVAL);
            }
            // IPv6-only: the socket can never carry IPv4, so it will be
            // the kernel's (decided at bind/connect) — if the kernel took
            // the option.
            let r = real_set();
            if r == 0 {
                setf(fl::V6ONLY, int().unwrap_or(0) != 0);
            }
            return r;
        }
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            setf(fl::REUSEADDR, int().unwrap_or(0) != 0);
        }
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => {
            setf(fl::REUSEPORT, int().unwrap_or(0) != 0);
        }
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => {
            setf(fl::BROADCAST, int().unwrap_or(0) != 0);
        }
        (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
            setf(fl::PKTINFO, int().unwrap_or(0) != 0);
        }
        (
            libc::SOL_SOCKET,
            n @ (tstamp::SO_TIMESTAMP
            | tstamp::SO_TIMESTAMPNS
            | tstamp::SO_TIMESTAMP_NEW
            | tstamp::SO_TIMESTAMPNS_NEW),
        ) => {
            // As Linux's `sock_set_timestamp`: on, it says which form
            // (and old or new); off, both forms go.
            if int().unwrap_or(0) != 0 {
                setf(fl::TSTAMP, true);
                let ns = matches!(n, tstamp::SO_TIMESTAMPNS | tstamp::SO_TIMESTAMPNS_NEW);
                setf(fl::TSTAMP_NS, ns);
                let new = matches!(n, tstamp::SO_TIMESTAMP_NEW | tstamp::SO_TIMESTAMPNS_NEW);
                setf(fl::TSTAMP_NEW, new);
            } else {
                setf(fl::TSTAMP | fl::TSTAMP_NS, false);
            }
        }
        (libc::SOL_SOCKET, n @ (tstamp::SO_TIMESTAMPING | tstamp::SO_TIMESTAMPING_NEW)) => {
            // An int of SOF_TIMESTAMPING_* flags (or a struct
            // so_timestamping, which starts with them). Software receive
            // stamps are reported as Linux's `__sock_recv_timestamp` does.
            let f = int().unwrap_or(0) as u32;
            let rx = f & tstamp::SOFTWARE != 0
                && (f & tstamp::RX_SOFTWARE != 0 || f & tstamp::OPT_RX_FILTER == 0);
            setf(fl::TSTAMPING, rx);
            setf(fl::TSTAMP_NEW, n == tstamp::SO_TIMESTAMPING_NEW);
        }
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO) => {
            setf(fl::PKTINFO6, int().unwrap_or(0) != 0);
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            let on = int().unwrap_or(0) != 0;
            setf(fl::KEEPALIVE, on);
            svc = Some(StackOpt::KeepAlive(on));
        }
        (libc::SOL_SOCKET, libc::SO_LINGER)
            if !val.is_null() && (len as usize) >= std::mem::size_of::<libc::linger>() =>
        {
            // SAFETY: as above.
            let l = unsafe { std::ptr::read_unaligned(val as *const libc::linger) };
            setf(fl::LINGER0, l.l_onoff != 0 && l.l_linger == 0);
        }
        (libc::IPPROTO_TCP, n @ (libc::TCP_KEEPIDLE | libc::TCP_KEEPINTVL | libc::TCP_KEEPCNT)) => {
            // Linux's ranges: 1–32767 s, 1–127 probes.
            let max = if n == libc::TCP_KEEPCNT { 127 } else { 32767 };
            match int() {
                Some(v) if (1..=max).contains(&v) => svc = Some(StackOpt::Keep(n, v as u16)),
                _ if k == kind::IXORA => return fail(libc::EINVAL),
                _ => {} // the kernel socket says
            }
        }
        (libc::IPPROTO_IP, n) if k == kind::IXORA && membership(n) => {
            let sk = state::sock(fd).unwrap();
            count(sk.a, call("setsockopt"), false);
            if kernel_side(sk) {
                // Ixora serves no multicast: a group's datagrams can reach
                // the socket only through the kernel's own interfaces, so
                // its kernel side joins (or refuses, as the kernel says).
                return real_set();
            }
            no_multicast(fd);
            return fail(libc::ENODEV);
        }
        (libc::SOL_SOCKET, n) if BUFFER_OPTS.contains(&n) => {
            // A TCP socket's buffers are the stack's (a UDP socket's
            // datagrams wait in its ring and the stack's bounded queue).
            match int() {
                Some(v) if e.flags.load(Ordering::Relaxed) & fl::DGRAM == 0 => {
                    svc = Some(StackOpt::Buf(n, v))
                }
                None if k == kind::IXORA => return fail(libc::EINVAL),
                _ => {}
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            let on = int().unwrap_or(1) != 0;
            let was_nagle = setf(fl::NAGLE, !on) & fl::NAGLE != 0;
            if was_nagle == on {
                svc = Some(StackOpt::Nagle(!on));
            }
        }
        // Kept as set, any int (nginx's `tcp_nopush`, HAProxy's quick
        // ACKs: on every connection, so no system call).
        (libc::IPPROTO_TCP, libc::TCP_CORK | libc::TCP_QUICKACK) => {}
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) => {}
        // As Linux's `sock_setsockopt` and `tcp_set_rcvlowat` keep it: a
        // negative mark is the most, 0 is 1, and TCP's is at most half
        // the receive buffer. Only TCP acts on it (Linux's UDP polls
        // readable for any datagram). Until 2026-11-29 it was kept and
        // not acted on.
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => match int() {
            Some(v) => {
                let tcp = e.flags.load(Ordering::Relaxed) & fl::DGRAM == 0;
                let mut v = if v < 0 { c_int::MAX } else { v };
                if let Some(sk) = state::sock(fd).filter(|_| tcp) {
                    v = v.min(rcvlowat_cap(sk));
                }
                let v = v.max(1);
                kept = Some(v.to_ne_bytes());
                setf(fl::LOWAT, tcp && v > 1);
            }
            None if k == kind::IXORA => return fail(libc::EINVAL),
            None => {} // (the kernel socket says)
        },
        // Linux takes these by rules of its own, checked here (Erlang's
        // sockets set SO_PRIORITY and IP_TOS again and again: 45 system
        // calls per connection when the kernel was asked).
        _ if k == kind::IXORA && known.is_some() => kept = known.map(c_int::to_ne_bytes),
        _ if k == kind::IXORA => {
            // Kept as set, after the kernel said it takes it: an option
            // Linux does not have, or a value it refuses, fails as on
            // Linux (until 2026-11-29 every one was kept: `socket_ops.c`).
            if let Err(err) = kernel_takes_opt(e, level, name, val, len) {
                if let Some(sk) = state::sock(fd) {
                    count(sk.a, call("setsockopt"), false);
                }
                return fail(err);
            }
            checked = true;
        }
        _ => {}
    }
    // The value as the program gave it (kept to be read back; no more
    // than the shim keeps, so no more than it reads).
    let bytes: &[u8] = if let Some(b) = &kept {
        b
    } else if val.is_null() {
        &[]
    } else {
        // SAFETY: setsockopt(2)'s contract: `len` readable bytes at `val`,
        // of which we read at most OPT_MAX.
        unsafe { std::slice::from_raw_parts(val as *const u8, (len as usize).min(state::OPT_MAX)) }
    };
    if level == libc::SOL_SOCKET && matches!(name, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) {
        // As Linux: a whole timeval, its microseconds below a second.
        if bytes.len() < std::mem::size_of::<libc::timeval>() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `bytes` holds a timeval's bytes (checked).
        let tv = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const libc::timeval) };
        if !(0..1_000_000).contains(&tv.tv_usec) {
            return fail(libc::EDOM);
        }
    }
    if k == kind::MAYBE {
        // Not ours yet: the kernel socket gets the option too, and the
        // shim keeps it for the Ixora socket this may become.
        let r = real_set();
        if r == 0 {
            state::pend_opt(fd, (level, name), bytes);
        }
        return r;
    }
    let sk = state::sock(fd).unwrap();
    sk.a.set_opt(sk.s, sk.gen(), (level, name), bytes);
    // The kernel side gets it too, for the connections it accepts (nginx
    // sets options after listen) and the datagrams it sends.
    let mirrored = kernel_side(sk) && replayable(level, name) && {
        real_set();
        true
    };
    if let Some(o) = svc {
        set_stack_opt(sk.a, sk.s, o);
    }
    count(sk.a, call("setsockopt"), !mirrored && !checked);
    0
}

/// The value Linux keeps of option `(level, name)` set to int `v` (None:
/// fewer than 4 bytes) on an IPv4 socket such as descriptor entry `e`'s,
/// where it takes the option by rules this knows, with no need to ask
/// it: `IP_TOS` (a byte; TCP keeps its ECN bits, 0 here), `IP_TTL` (-1,
/// the system's default, or 1 to 255), `IP_RECVTOS`, `IP_RECVTTL`, and
/// `SO_PRIORITY` from 0 to 6 (beyond, CAP_NET_ADMIN or CAP_NET_RAW). None:
/// the kernel is asked.
fn known_int_opt(e: &state::FdEntry, level: c_int, name: c_int, v: Option<c_int>) -> Option<c_int> {
    let v = v?;
    let f = e.flags.load(Ordering::Relaxed);
    if f & fl::INET6 != 0 {
        return None;
    }
    match (level, name) {
        (libc::IPPROTO_IP, libc::IP_TOS) if f & fl::DGRAM == 0 => Some(v & 0xfc),
        (libc::IPPROTO_IP, libc::IP_TOS) => Some(v & 0xff),
        (libc::IPPROTO_IP, libc::IP_TTL) if v == -1 => Some(default_ttl()),
        (libc::IPPROTO_IP, libc::IP_TTL) => (1..=255).contains(&v).then_some(v),
        (libc::IPPROTO_IP, libc::IP_RECVTOS | libc::IP_RECVTTL) => Some(v),
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => (0..=6).contains(&v).then_some(v),
        _ => None,
    }
}

/// A new kernel socket of the family and type of descriptor entry `e`
/// (for the caller to ask and close), or the kernel's error.
fn scratch_socket(e: &state::FdEntry) -> Result<c_int, c_int> {
    let f = e.flags.load(Ordering::Relaxed);
    let family = if f & fl::INET6 != 0 {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    let ty = if f & fl::DGRAM != 0 {
        libc::SOCK_DGRAM
    } else {
        libc::SOCK_STREAM
    };
    // SAFETY: socket(2) has no memory arguments.
    let k = unsafe {
        crate::real::syscall_fn()(libc::SYS_socket, family, ty | libc::SOCK_CLOEXEC, 0) as c_int
    };
    if k < 0 {
        Err(errno())
    } else {
        Ok(k)
    }
}

/// Whether the kernel takes option `(level, name)` with the `len` bytes
/// at `val` on a new socket of the family and type of descriptor entry
/// `e` (made and closed here): `Err` with its error if not.
fn kernel_takes_opt(
    e: &state::FdEntry,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<(), c_int> {
    let k = scratch_socket(e)?;
    // (setsockopt(2)'s contract on `val` is the caller's.)
    let r = real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int)(
        k, level, name, val, len,
    );
    let err = errno();
    crate::real::sys_close(k);
    if r < 0 {
        Err(err)
    } else {
        Ok(())
    }
}

/// TCP options that take a string or a structure rather than an int
/// (Linux's `do_tcp_setsockopt` reads them before it requires an int).
const TCP_NOT_INT: [c_int; 8] = [
    libc::TCP_CONGESTION,
    libc::TCP_MD5SIG,
    libc::TCP_ULP,
    libc::TCP_MD5SIG_EXT,
    libc::TCP_FASTOPEN_KEY,
    38, // TCP_AO_ADD_KEY
    39, // TCP_AO_DEL_KEY
    40, // TCP_AO_INFO
];

/// The error `setsockopt` of `(level, name)` with `len` bytes gets before
/// the shim keeps it, as Linux's: `EINVAL` for less than an int where
/// Linux wants one (every socket-level option but `SO_BINDTODEVICE`, and
/// TCP's but those of [`TCP_NOT_INT`]), `EFAULT` for no value; and, on an
/// Ixora socket, `ENOPROTOOPT` for what the stack cannot do and whose
/// absence a program must not mistake for success: kernel TLS (`TCP_ULP`,
/// level `SOL_TLS`: OpenSSL would hand plaintext to a socket it believed
/// encrypted), TCP-MD5 and TCP-AO signatures (a BGP session believed
/// signed), `SO_ZEROCOPY` (completions that never come) and TCP repair.
/// Until 2026-11-29 all of these were kept and succeeded (`socket_ops.c`).
fn refused_opt(level: c_int, name: c_int, len: socklen_t, null: bool) -> Option<c_int> {
    const SOL_TLS: c_int = 282;
    let wants_int = match level {
        libc::SOL_SOCKET => name != libc::SO_BINDTODEVICE,
        libc::IPPROTO_TCP => !TCP_NOT_INT.contains(&name),
        _ => false,
    };
    if wants_int && (len as usize) < std::mem::size_of::<c_int>() {
        return Some(libc::EINVAL);
    }
    if null && len > 0 {
        return Some(libc::EFAULT);
    }
    let unsupported = match level {
        SOL_TLS => true,
        libc::SOL_SOCKET => name == libc::SO_ZEROCOPY,
        libc::IPPROTO_TCP => matches!(
            name,
            libc::TCP_ULP
                | libc::TCP_MD5SIG
                | libc::TCP_MD5SIG_EXT
                | libc::TCP_REPAIR
                | libc::TCP_REPAIR_QUEUE
                | libc::TCP_QUEUE_SEQ
                | libc::TCP_REPAIR_OPTIONS
                | libc::TCP_REPAIR_WINDOW
                | 38..=42 // TCP_AO_ADD_KEY .. TCP_AO_REPAIR
        ),
        _ => false,
    };
    unsupported.then_some(libc::ENOPROTOOPT)
}

/// An option the stack acts on.
#[derive(Clone, Copy)]
enum StackOpt {
    /// Nagle's algorithm on (`TCP_NODELAY` off).
    Nagle(bool),
    /// `SO_KEEPALIVE`.
    KeepAlive(bool),
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL` or `TCP_KEEPCNT` (the option's
    /// name), within Linux's range.
    Keep(c_int, u16),
    /// `SO_RCVBUF` or `SO_SNDBUF` (or their `FORCE` forms; the option's
    /// name) as the program gave it.
    Buf(c_int, c_int),
}

/// The options that set a socket's buffers (the `FORCE` forms, which
/// Linux lets only `CAP_NET_ADMIN` exceed `net.core.rmem_max` with, set
/// them within the stack's limits as the others do).
const BUFFER_OPTS: [c_int; 4] = [
    libc::SO_RCVBUF,
    libc::SO_SNDBUF,
    libc::SO_RCVBUFFORCE,
    libc::SO_SNDBUFFORCE,
];

/// What `getsockopt` says of TCP socket `s`'s buffer `name` (`SO_RCVBUF`
/// or `SO_SNDBUF`), as Linux: twice the bytes set (the kernel counts its
/// own bookkeeping in a buffer, about half of it), at least 2,304 for
/// receiving and 4,608 for sending. Here twice the stack's buffer: as
/// the program set it, within the stack's limit, or else the one a
/// connection starts with.
fn tcp_buffer_said(a: &Attached, s: u32, name: c_int) -> c_int {
    let h = a.r.down_header();
    let (rcv, snd) = layout::unpack_bufs(a.r.up_slot(s).bufs.load(Ordering::Relaxed));
    let (set, start, max, least) = if name == libc::SO_RCVBUF {
        (rcv, &h.tcp_rcvbuf, &h.tcp_rcvbuf_max, 2304)
    } else {
        (snd, &h.tcp_sndbuf, &h.tcp_sndbuf_max, 4608)
    };
    let max = max.load(Ordering::Relaxed);
    let bytes = set.map_or(start.load(Ordering::Relaxed), |v| v.min(max));
    (2 * u64::from(bytes)).clamp(least, c_int::MAX as u64) as c_int
}

/// The most a TCP socket's `SO_RCVLOWAT` is, as Linux's
/// `tcp_set_rcvlowat`: half its receive buffer if the program set one
/// (`SO_RCVBUF` reads back twice the bytes), else half the most the
/// stack's buffer grows to (Linux: `tcp_rmem[2]`).
fn rcvlowat_cap(sk: Sock) -> c_int {
    let (rcv, _) = layout::unpack_bufs(sk.a.r.up_slot(sk.s).bufs.load(Ordering::Relaxed));
    if rcv.is_some() {
        tcp_buffer_said(sk.a, sk.s, libc::SO_RCVBUF) / 2
    } else {
        let max = sk.a.r.down_header().tcp_rcvbuf_max.load(Ordering::Relaxed);
        (max / 2).min(c_int::MAX as u32) as c_int
    }
}

/// Set an option the stack acts on in socket `s`'s up slot and ask the
/// service to apply it (`req::OPTS`; it does before it next acts on the
/// socket): no request, no system call.
fn set_stack_opt(a: &Attached, s: u32, o: StackOpt) {
    use layout::opts;
    let u = a.r.up_slot(s);
    let bit = |b: u32, on: bool| {
        if on {
            u.opts.fetch_or(b, Ordering::Relaxed);
        } else {
            u.opts.fetch_and(!b, Ordering::Relaxed);
        }
    };
    match o {
        StackOpt::Nagle(on) => bit(opts::NAGLE, on),
        StackOpt::KeepAlive(on) => bit(opts::KEEPALIVE, on),
        StackOpt::Buf(name, v) => {
            // As Linux reads it: an unsigned count (a negative one is the
            // most), 0 the least (0 in the word means "not set").
            let v = (v as u32).max(1);
            let rcv = matches!(name, libc::SO_RCVBUF | libc::SO_RCVBUFFORCE);
            let _ = u
                .bufs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                    let (r, s) = layout::unpack_bufs(w);
                    let (r, s) = if rcv { (Some(v), s) } else { (r, Some(v)) };
                    Some(layout::pack_bufs(r.unwrap_or(0), s.unwrap_or(0)))
                });
        }
        StackOpt::Keep(name, v) => {
            let _ = u
                .keep
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                    let (idle, intvl, cnt) = layout::unpack_keep(k);
                    Some(match name {
                        libc::TCP_KEEPIDLE => layout::pack_keep(v, intvl, cnt),
                        libc::TCP_KEEPINTVL => layout::pack_keep(idle, v, cnt),
                        _ => layout::pack_keep(idle, intvl, v as u8),
                    })
                });
        }
    }
    u.req.fetch_or(layout::req::OPTS, Ordering::Release);
    state::signal(a, s);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a `MSG_WAITALL` read continues into: the buffers past what it
    /// took, across their boundaries.
    #[test]
    fn rest_of_skips_whole_and_part_buffers() {
        let (mut a, mut b, mut c) = ([0u8; 3], [0u8; 4], [0u8; 5]);
        let mut bufs: [&mut [u8]; 3] = [&mut a, &mut b, &mut c];
        let mut lens =
            |skip| -> Vec<usize> { rest_of(&mut bufs, skip).iter().map(|x| x.len()).collect() };
        assert_eq!(lens(0), [3, 4, 5]);
        assert_eq!(lens(2), [1, 4, 5]);
        assert_eq!(lens(3), [4, 5]);
        assert_eq!(lens(8), [4]);
        assert_eq!(lens(12), Vec::<usize>::new());
    }

    /// setsockopt's errors before an option is kept, as Linux's.
    #[test]
    fn options_too_short_or_beyond_the_stack_are_refused() {
        let int = std::mem::size_of::<c_int>() as socklen_t;
        // Less than an int where Linux wants one (`sk_setsockopt`,
        // `do_tcp_setsockopt`): EINVAL; a name takes any length.
        assert_eq!(
            refused_opt(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, false),
            Some(libc::EINVAL)
        );
        assert_eq!(
            refused_opt(libc::IPPROTO_TCP, libc::TCP_NODELAY, 2, false),
            Some(libc::EINVAL)
        );
        assert_eq!(
            refused_opt(libc::SOL_SOCKET, libc::SO_BINDTODEVICE, 2, false),
            None
        );
        assert_eq!(
            refused_opt(libc::IPPROTO_TCP, libc::TCP_CONGESTION, 4, false),
            None
        );
        // IP-level options take a byte too (`do_ip_setsockopt`).
        assert_eq!(refused_opt(libc::IPPROTO_IP, libc::IP_TOS, 1, false), None);
        assert_eq!(
            refused_opt(libc::SOL_SOCKET, libc::SO_KEEPALIVE, int, true),
            Some(libc::EFAULT)
        );
        // What the stack cannot do: kernel TLS, signatures, zero copy.
        for (level, name) in [
            (libc::IPPROTO_TCP, libc::TCP_ULP),
            (282, 1), // SOL_TLS, TLS_TX
            (libc::IPPROTO_TCP, libc::TCP_MD5SIG),
            (libc::IPPROTO_TCP, 38), // TCP_AO_ADD_KEY
            (libc::SOL_SOCKET, libc::SO_ZEROCOPY),
            (libc::IPPROTO_TCP, libc::TCP_REPAIR),
        ] {
            assert_eq!(
                refused_opt(level, name, 64, false),
                Some(libc::ENOPROTOOPT),
                "{level} {name}"
            );
        }
        assert_eq!(
            refused_opt(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, int, false),
            None
        );
    }
}
