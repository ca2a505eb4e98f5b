//! Reads and writes on Ixora sockets: read, recv and their kin, write, send and their kin, sendfile.

use super::*;

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
/// peek waits until the ring holds it all). `MSG_OOB`: the peer's urgent
/// byte ([`Sock::recv_urgent`]; until 2026-11-30 `EINVAL`, the stack
/// ignoring urgent pointers).
pub(crate) fn do_recv(sk: Sock, bufs: &mut [&mut [u8]], flags: c_int) -> ssize_t {
    if sk.dgram() {
        return do_recv_dgram(sk, bufs, flags, None).0;
    }
    if flags & libc::MSG_OOB != 0 {
        count(sk.a, call("read"), true);
        return match sk.recv_urgent(flags & libc::MSG_PEEK != 0) {
            // (With no room for it, the byte is taken all the same and 0
            // returned, as Linux's `tcp_recv_urg`.)
            Ok(b) => match bufs.iter_mut().find(|b| !b.is_empty()) {
                Some(buf) => {
                    buf[0] = b;
                    1
                }
                None => 0,
            },
            Err(0) => 0,
            Err(e) => fail(e),
        };
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
                // (A read that reached the peer's urgent byte stops there,
                // as Linux's does once it has copied anything.)
                if !peek && n > 0 && got < target && !sk.at_mark() {
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
    /// Its IPv4 header's TOS (`IP_RECVTOS`), if known.
    tos: Option<u8>,
    /// Its IPv4 header's TTL (`IP_RECVTTL`), if known.
    ttl: Option<u8>,
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
            Ok(d) => {
                let (n, full, src) = (d.n, d.len, d.src);
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
                let ctl = Ctl {
                    dst: None,
                    stamp: d.stamp,
                    tos: Some(d.tos),
                    ttl: Some(d.ttl),
                };
                return (r as ssize_t, src, full > n, ctl);
            }
            Err(libc::EAGAIN) if !dontwait => {
                let ready =
                    &mut || sk.readable() > 0 || sk.dead() || !sk.live() || sk.icmp_error_pending();
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
                (libc::IPPROTO_IP, libc::IP_TOS) => ctl.tos = Some(*data),
                (libc::IPPROTO_IP, libc::IP_TTL) => {
                    ctl.ttl = Some(std::ptr::read_unaligned(data as *const c_int) as u8);
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
pub(super) mod tstamp {
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
fn do_send_dgram(
    sk: Sock,
    bufs: &[&[u8]],
    flags: c_int,
    dst: Option<(u32, u16)>,
    ip: MsgIp,
) -> ssize_t {
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
        match sk.send_dgram(bufs, to, ip) {
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
                let need = need();
                wait_for_room(sk, &mut user, &mut || dgram_sendable(sk, need));
            }
            Err(libc::EAGAIN) if !dontwait => {
                let need = need();
                let ready = &mut || dgram_sendable(sk, need);
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

/// How long a non-blocking send that finds its ring full waits for the
/// service to make room (see [`do_send_dgram`] and [`hand_over`]).
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
        return do_send_dgram(sk, bufs, flags, None, MsgIp::default());
    }
    // MSG_MORE (send(2)): as TCP_CORK for this call's bytes, until a send
    // without it (set before they are written, cleared after: the service
    // reads the options before the ring's tail). Until 2026-11-30 it was
    // ignored: the bytes went as a segment of their own, and with Nagle
    // on the next send's could wait for the peer's delayed ACK.
    let more = flags & libc::MSG_MORE != 0;
    let corked = sk.a.r.up_slot(sk.s).opts.load(Ordering::Relaxed) & layout::opts::MORE != 0;
    if more && !corked {
        set_stack_opt(sk.a, sk.s, StackOpt::More(true));
    }
    let r = if flags & libc::MSG_OOB != 0 {
        send_urgent(sk, bufs, flags)
    } else {
        send_stream(sk, bufs, flags)
    };
    if !more && corked {
        set_stack_opt(sk.a, sk.s, StackOpt::More(false));
    }
    r
}

/// [`send_stream`] with `MSG_OOB`: what it writes ends urgent data (RFC
/// 9293 §3.8.5), which the service tells the stack once it has given it
/// those bytes ([`layout::UpUrgent::tx`]; until 2026-11-30 the flag was
/// ignored). Where it will end is said before the bytes are written, so
/// that the service finds it with them; a short write says again.
fn send_urgent(sk: Sock, bufs: &[&[u8]], flags: c_int) -> ssize_t {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let tail = sk.a.r.up_slot(sk.s).tx_tail.load(Ordering::Relaxed);
    let urg = &sk.a.r.up_urgent(sk.s).tx;
    let was = urg.load(Ordering::Relaxed);
    if total > 0 {
        urg.store(tail + total as u64, Ordering::Release);
        (sk.a.r.up_slot(sk.s).req).fetch_or(layout::req::URGENT, Ordering::Release);
    }
    let r = send_stream(sk, bufs, flags);
    if r <= 0 && total > 0 {
        urg.store(was, Ordering::Release);
    } else if (r as usize) < total {
        urg.store(tail + r as u64, Ordering::Release);
        state::signal(sk.a, sk.s);
    }
    r
}

/// [`do_send`] on a TCP socket.
fn send_stream(sk: Sock, bufs: &[&[u8]], flags: c_int) -> ssize_t {
    let dontwait = flags & libc::MSG_DONTWAIT != 0 || sk.nonblock();
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total == 0 {
        return 0;
    }
    let mut user = true;
    let mut done = 0usize;
    let mut rest: Vec<&[u8]> = Vec::new();
    let mut start = None; // when the call first waits
    let mut handed = false;
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
                if done == total || dontwait && !hand_over(sk, total - done, &mut handed, &mut user)
                {
                    count(sk.a, call("write"), user);
                    return done as ssize_t;
                }
                if dontwait {
                    continue;
                }
            }
            Err(libc::EAGAIN) if !dontwait => {}
            Err(libc::EAGAIN) if hand_over(sk, total - done, &mut handed, &mut user) => continue,
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

/// A non-blocking TCP send found socket `sk`'s transmit ring full with
/// `left` bytes still to write: if the stack has room for more
/// ([`layout::flag::STACK_FULL`] clear) and the call has not done so yet
/// (`handed`), hand the ring to the service and wait until it has taken
/// enough for them (or the stack filled), for at most
/// [`NONBLOCK_HANDOVER_MS`]; true then (send again). Linux's send runs
/// the stack itself and its send buffer grows with the connection, so a
/// burst of writes (a server's pipelined answers) is not cut short while
/// the peer keeps up; here the ring (64 KiB by default) waits for the
/// service, which may not have had a turn (it shares our CPU, or sleeps).
/// A program that mishandles a partial write (NSD reads into its
/// half-sent answer and closes) then broke only on Ixora. Where the
/// stack is full (a slower peer), the send says so at once, as Linux's
/// would: no wait per attempt.
fn hand_over(sk: Sock, left: usize, handed: &mut bool, user: &mut bool) -> bool {
    let full = || sk.flags() & layout::flag::STACK_FULL != 0;
    if *handed || full() {
        return false;
    }
    *handed = true;
    let want = (left as u64).min(u64::from(sk.a.r.layout().ring));
    wait_for_room(sk, user, &mut || {
        sk.writable() >= want || full() || !can_send_more(sk)
    });
    true
}

/// A non-blocking send's hand-over: ring the service about socket `sk`
/// and wait until `ready` (room in its transmit ring), for at most
/// [`NONBLOCK_HANDOVER_MS`], as a blocking send waits; `user` turns false
/// if the wait entered the kernel.
fn wait_for_room(sk: Sock, user: &mut bool, ready: &mut dyn FnMut() -> bool) {
    let s = [sk.s];
    state::block_until(
        sk.a,
        state::ms_limit(NONBLOCK_HANDOVER_MS),
        OnSignal::RESTART,
        &mut [],
        None,
        state::Interest::Slots { rx: &[], tx: &s },
        ready,
    );
    *user &= !state::blocked_in_kernel();
}

/// What a blocked send of a datagram of `need` ring bytes waits for on
/// UDP socket `sk`: room for it, an error (an ICMP one too), or the
/// socket gone.
fn dgram_sendable(sk: Sock, need: usize) -> bool {
    sk.writable() as usize >= need || sk.dead() || !sk.live() || sk.icmp_error_pending()
}

/// What a blocked send waits for on a TCP socket: room in its ring, an
/// error, or a state in which sending fails at once.
pub(crate) fn can_send(sk: Sock) -> bool {
    sk.writable() > 0 || !can_send_more(sk)
}

/// Whether a send on TCP socket `sk` may wait for room: not failed, and
/// in a state to send.
fn can_send_more(sk: Sock) -> bool {
    !sk.dead() && sk.state() == st::ESTABLISHED
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

/// read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(sk) = state::sock(fd) else {
        let r = kernel_read_fd(fd, 0, || {
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

/// recv(2): recvfrom(2) without an address, as in the C library.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: recv(2)'s contract is recvfrom(2)'s with null address arguments.
    unsafe {
        recvfrom(
            fd,
            buf,
            n,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
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
        let r = kernel_read_fd(fd, flags, || {
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
    if r >= 0 && !addr.is_null() && !alen.is_null() {
        // TCP names no source: Linux's `tcp_recvmsg` leaves the address
        // length 0, which `recvfrom` writes back.
        // SAFETY: recvfrom(2)'s contract: `alen` is writable.
        unsafe { *alen = 0 };
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
        return kernel_read_fd(fd, 0, || {
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
        let mut r = kernel_read_fd(fd, flags, || {
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
        // TCP names no source (as `recvfrom` above).
        if !m.msg_name.is_null() {
            m.msg_namelen = 0;
        }
        m.msg_controllen = 0;
        // The urgent byte says so (Linux's `tcp_recv_urg`).
        m.msg_flags = if flags & libc::MSG_OOB != 0 && r > 0 {
            libc::MSG_OOB
        } else {
            0
        };
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
///   and, after the `_NEW` options, as their `_NEW` types;
/// - its IPv4 header's TTL (`IP_RECVTTL`: an int) and TOS (`IP_RECVTOS`:
///   a byte), after `IP_PKTINFO`, as Linux's `ip_cmsg_recv_offset` puts
///   them (until 2026-11-30 neither came: the options were kept and read
///   back only).
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
    let o = sk.a.r.up_slot(sk.s).opts.load(Ordering::Relaxed);
    let want_tos = ctl.tos.is_some() && o & layout::opts::RECVTOS != 0;
    let want_ttl = ctl.ttl.is_some() && o & layout::opts::RECVTTL != 0;
    if !(v4 || v6 || ts || tsing || want_tos || want_ttl) {
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
    let (tos, ttl) = (ctl.tos.unwrap_or(0), c_int::from(ctl.ttl.unwrap_or(0)));
    // The messages asked for, in Linux's order: the socket's timestamps
    // (`sock_recv_timestamp`), then the IP level's (`ip_cmsg_recv`):
    // (wanted, level, type, data, length).
    let msgs: [(bool, c_int, c_int, *const u8, u32); 6] = [
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
            want_ttl,
            libc::IPPROTO_IP,
            libc::IP_TTL,
            &ttl as *const c_int as *const u8,
            4,
        ),
        (
            want_tos,
            libc::IPPROTO_IP,
            libc::IP_TOS,
            &tos as *const u8,
            1,
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
        return do_send_dgram(sk, &[b], flags, dst, MsgIp::default());
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
        // SAFETY: as above: `msg_control` has `msg_controllen` bytes.
        let ip = match unsafe { msg_ip(m) } {
            Ok(ip) => ip,
            Err(e) => {
                count(sk.a, call("write"), true);
                return fail(e);
            }
        };
        return do_send_dgram(sk, &v, flags, dst, ip);
    }
    do_send(sk, &v, flags)
}

/// The `IP_TOS` and `IP_TTL` control messages of `m`, a datagram's
/// `sendmsg`: for it alone, as Linux's `ip_cmsg_send` takes them — TTL an
/// `int` of 1 to 255, TOS an `int` or a byte of 0 to 255; `EINVAL` for
/// one of another size or value. (TCP's `sendmsg` takes none, as Linux's.)
///
/// # Safety
/// `m.msg_control` points to `m.msg_controllen` readable bytes (or is
/// null).
unsafe fn msg_ip(m: &msghdr) -> Result<MsgIp, c_int> {
    let mut ip = MsgIp::default();
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return Ok(ip);
    }
    let int_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
    let byte_len = libc::CMSG_LEN(1) as usize;
    // SAFETY: the caller's contract; CMSG_* walk within `msg_controllen`
    // bytes, and each message's data is read only as long as its
    // `cmsg_len` says it is.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize;
            let int = || std::ptr::read_unaligned(data as *const c_int);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_TTL) => {
                    let v = if len == int_len { int() } else { -1 };
                    ip.ttl = Some(
                        u8::try_from(v)
                            .ok()
                            .filter(|&t| t > 0)
                            .ok_or(libc::EINVAL)?,
                    );
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => {
                    let v = match len {
                        l if l == int_len => int(),
                        l if l == byte_len => c_int::from(*data),
                        _ => -1,
                    };
                    ip.tos = Some(u8::try_from(v).map_err(|_| libc::EINVAL)?);
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    Ok(ip)
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
        let r = kernel_read_fd(fd, flags, || {
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
}
