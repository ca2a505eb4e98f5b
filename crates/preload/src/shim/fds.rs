//! Descriptor calls: dup, dup2, dup3, fcntl, ioctl, and the stat family on a socket's number.

use super::*;

pub(super) fn dup_into(sk: Sock, nfd: c_int, cloexec: bool) {
    state::hold(sk.a, sk.s);
    // (Close-on-exec is the new descriptor's own.)
    let flags = sk.e.flags.load(Ordering::Relaxed) & !(fl::CLOEXEC_KNOWN | fl::CLOEXEC);
    state::install(
        nfd,
        sk.s,
        sk.e.gen.load(Ordering::Relaxed),
        flags | fl::cloexec(cloexec),
    );
    // The owner is the socket's: a duplicate is one to signal for too.
    if sk.a.r.up_urgent(sk.s).owned.load(Ordering::Acquire) != 0 {
        state::note_owner(sk, nfd, true);
    }
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
            let r = real_fcntl();
            // F_SETOWN, F_SETOWN_EX: the owner SIGURG goes to ([`state::note_owner`]).
            const F_SETOWN_EX: c_int = 15;
            if r == 0 && (cmd == libc::F_SETOWN && arg as c_int != 0 || cmd == F_SETOWN_EX) {
                state::note_owner(sk, fd, true);
            }
            r
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
            // FIOSETOWN, SIOCSPGRP: an owner for SIGURG.
            if matches!(req, 0x8901 | 0x8902) && arg != 0 {
                // SAFETY: their argument is a readable int pointer (the
                // kernel just read it).
                let owner = unsafe { *(arg as *const c_int) } != 0;
                state::note_owner(sk, fd, owner);
            }
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
        // sockatmark(3)'s request: 1 once the bytes before the peer's
        // urgent byte are read ([`Sock::at_mark`]; until 2026-11-30 never,
        // the stack ignoring urgent pointers); UDP knows no mark (ENOTTY,
        // as Linux's).
        SIOCATMARK if !sk.dgram() => {
            // SAFETY: SIOCATMARK's argument is a writable int pointer.
            unsafe { *(arg as *mut c_int) = c_int::from(sk.at_mark()) };
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
