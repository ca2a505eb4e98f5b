//! getsockopt and setsockopt: options the shim answers, keeps, passes to the stack or refuses.

use super::*;

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
                // As kept (`setsockopt`; an accepted socket's from its
                // listener), or as the flag says.
                let l = match sk.a.opt(sk.s, sk.gen(), (level, name)) {
                    Some(v) if v.len() >= std::mem::size_of::<libc::linger>() => {
                        std::ptr::read_unaligned(v.as_ptr() as *const libc::linger)
                    }
                    _ => libc::linger {
                        l_onoff: b(fl::LINGER0),
                        l_linger: 0,
                    },
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
/// on (TCP_NODELAY, TCP_CORK, SO_KEEPALIVE and its timing, ...) are set
/// in the socket's up slot for the service ([`set_stack_opt`]).
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
    let mut kept: Option<Ints> = None;
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
            let on = int().unwrap_or(0) != 0;
            setf(fl::REUSEADDR, on);
            svc = Some(StackOpt::Reuse(name, on));
        }
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => {
            let on = int().unwrap_or(0) != 0;
            setf(fl::REUSEPORT, on);
            svc = Some(StackOpt::Reuse(name, on));
        }
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => {
            setf(fl::BROADCAST, int().unwrap_or(0) != 0);
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => {
            setf(fl::OOBINLINE, int().unwrap_or(0) != 0);
        }
        (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
            setf(fl::PKTINFO, int().unwrap_or(0) != 0);
        }
        // Acted on since 2026-11-30: each datagram received comes with
        // its TOS or TTL (`put_control`), as the socket's options word
        // says (one load per receive, shared by its duplicates).
        (libc::IPPROTO_IP, libc::IP_RECVTOS | libc::IP_RECVTTL) if known.is_some() => {
            kept = known.map(|v| Ints::of(&[v]));
            svc = Some(StackOpt::RecvIp(name, known != Some(0)));
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
            // Kept as Linux's `sk_setsockopt` keeps it: on or off, and the
            // time last set with it on (off keeps the time). Until
            // 2026-11-29 a time other than 0 read back as {0, 0}.
            let time = if l.l_onoff != 0 {
                l.l_linger
            } else {
                state::sock(fd)
                    .and_then(|sk| sk.a.opt(sk.s, sk.gen(), (level, name)))
                    .and_then(|v| Some(c_int::from_ne_bytes(v.get(4..8)?.try_into().ok()?)))
                    .unwrap_or(0)
            };
            // (A linger is two ints: on or off, and the time.)
            kept = Some(Ints::of(&[(l.l_onoff != 0) as c_int, time]));
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
        // As Linux's `do_tcp_setsockopt` keeps it: seconds as SYN-ACK
        // retransmissions, read back as the seconds those take (4 reads
        // 7); a listener's connection that brings no data waits that long
        // in the stack before `accept` sees it (uWSGI sets 4 on its
        // listeners: until 2026-11-29 the option was kept and not acted
        // on, and an idle client held a synchronous worker for its 4 s
        // read timeout).
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT)
            if e.flags.load(Ordering::Relaxed) & fl::DGRAM == 0 =>
        {
            match int() {
                Some(v) => {
                    let r = layout::defer_retrans(v);
                    kept = Some(Ints::of(&[layout::defer_secs(r) as c_int]));
                    svc = Some(StackOpt::Defer(r));
                }
                None if k == kind::IXORA => return fail(libc::EINVAL),
                None => {} // (the kernel socket says)
            }
        }
        // Put on the socket's packets, as Linux keeps them (a TCP
        // socket's TOS without its ECN bits; TTL -1 is the default).
        // Until 2026-11-30 they were kept and read back only: every
        // packet went with TOS 0 and TTL 64 (coturn copies a client's
        // TOS to what it relays; VoIP and SIP servers mark theirs).
        (libc::IPPROTO_IP, libc::IP_TOS | libc::IP_TTL) if known.is_some() => {
            let v = known.unwrap_or(0);
            kept = Some(Ints::of(&[v]));
            svc = Some(StackOpt::Ip(name, v as u8));
        }
        // Acted on by the stack (partial segments wait while it is set):
        // nginx's `tcp_nopush` sets it around a response sent with
        // `sendfile`. Until 2026-11-30 it was kept and not acted on.
        (libc::IPPROTO_TCP, libc::TCP_CORK) => match int() {
            Some(v) => svc = Some(StackOpt::Cork(v != 0)),
            None if k == kind::IXORA => return fail(libc::EINVAL),
            None => {} // (the kernel socket says)
        },
        // Kept as set, any int (HAProxy's quick ACKs: on every
        // connection, so no system call).
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => {}
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
                kept = Some(Ints::of(&[v]));
                setf(fl::LOWAT, tcp && v > 1);
            }
            None if k == kind::IXORA => return fail(libc::EINVAL),
            None => {} // (the kernel socket says)
        },
        // Linux takes these by rules of its own, checked here (Erlang's
        // sockets set SO_PRIORITY and IP_TOS again and again: 45 system
        // calls per connection when the kernel was asked).
        _ if k == kind::IXORA && known.is_some() => kept = known.map(|v| Ints::of(&[v])),
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
    let bytes: &[u8] = if let Some(k) = &kept {
        k.bytes()
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
pub(super) fn scratch_socket(e: &state::FdEntry) -> Result<c_int, c_int> {
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

/// A value the shim keeps for an option in place of the one given: one
/// or two ints' bytes (a `linger` is two), without an allocation.
struct Ints {
    b: [u8; 8],
    n: usize,
}

impl Ints {
    fn of(v: &[c_int]) -> Ints {
        let mut b = [0u8; 8];
        for (i, x) in v.iter().take(2).enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&x.to_ne_bytes());
        }
        Ints {
            b,
            n: 4 * v.len().min(2),
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

/// An option the stack acts on.
#[derive(Clone, Copy)]
pub(super) enum StackOpt {
    /// Nagle's algorithm on (`TCP_NODELAY` off).
    Nagle(bool),
    /// `TCP_CORK`.
    Cork(bool),
    /// A send with `MSG_MORE` (on), or one without it after one (off).
    More(bool),
    /// `IP_RECVTOS` or `IP_RECVTTL` (the option's name), on or off.
    RecvIp(c_int, bool),
    /// `SO_KEEPALIVE`.
    KeepAlive(bool),
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL` or `TCP_KEEPCNT` (the option's
    /// name), within Linux's range.
    Keep(c_int, u16),
    /// `SO_RCVBUF` or `SO_SNDBUF` (or their `FORCE` forms; the option's
    /// name) as the program gave it.
    Buf(c_int, c_int),
    /// A listener's `TCP_DEFER_ACCEPT`, as SYN-ACK retransmissions
    /// ([`layout::defer_retrans`]).
    Defer(u8),
    /// `IP_TOS` (`IP_TOS`, as Linux keeps it) or `IP_TTL` (the option's
    /// name) and its value.
    Ip(c_int, u8),
    /// `SO_REUSEADDR` or `SO_REUSEPORT` (the option's name), on or off.
    Reuse(c_int, bool),
}

/// The options that set a socket's buffers (the `FORCE` forms, which
/// Linux lets only `CAP_NET_ADMIN` exceed `net.core.rmem_max` with, set
/// them within the stack's limits as the others do).
pub(super) const BUFFER_OPTS: [c_int; 4] = [
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
pub(super) fn set_stack_opt(a: &Attached, s: u32, o: StackOpt) {
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
        StackOpt::Cork(on) => bit(opts::CORK, on),
        StackOpt::More(on) => bit(opts::MORE, on),
        StackOpt::RecvIp(libc::IP_RECVTOS, on) => bit(opts::RECVTOS, on),
        StackOpt::RecvIp(_, on) => bit(opts::RECVTTL, on),
        StackOpt::KeepAlive(on) => bit(opts::KEEPALIVE, on),
        StackOpt::Reuse(libc::SO_REUSEPORT, on) => bit(opts::REUSEPORT, on),
        StackOpt::Reuse(_, on) => bit(opts::REUSEADDR, on),
        StackOpt::Defer(r) => {
            let _ = u
                .opts
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                    Some(o & !opts::DEFER_MASK | u32::from(r) << opts::DEFER_SHIFT)
                });
        }
        StackOpt::Ip(name, v) => {
            let shift = match name {
                libc::IP_TOS => opts::TOS_SHIFT,
                _ => opts::TTL_SHIFT,
            };
            let _ = u
                .opts
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                    Some(o & !(0xff << shift) | u32::from(v) << shift)
                });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
