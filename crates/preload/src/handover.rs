//! Handing an Ixora connection to another process over a Unix socket
//! (`SCM_RIGHTS`), as Node.js's cluster module hands each connection its
//! primary accepts to a worker.
//!
//! What travels between the processes is the connection's placeholder, a
//! kernel socket that carries nothing; the rings stay in the sender's
//! application, which the receiver (often another program, `exec`ed, with
//! an application of its own) cannot map. So the connection goes through
//! the service instead: before the message leaves, the sender asks the
//! service to take the connection out of its application (`PASS`, naming
//! the descriptor; the service reads the file's inode from `/proc`), and
//! after a message with descriptors arrives, the receiver asks it for the
//! connection passed with each file that may be a placeholder (`CLAIM`):
//! the connection becomes a socket of the receiver's application under
//! the descriptor that came, with the bytes the sender had not read still
//! to read. Holding the file is the proof: the service looks at the
//! claimant's own descriptor, from the pid the kernel vouches for.
//!
//! A listener is handed over the same way, but moves only when it is
//! claimed, with the connections in its accept queue (until then the
//! sender's socket listens on). Unlike Linux, where sender and receiver
//! then share one socket, the socket *moves*: the sender's descriptor
//! reports `ECONNABORTED` afterwards (a listener: `EINVAL`, not
//! listening); the programs that pass sockets close their copy (Node.js's
//! cluster primary, a server handing its listeners to its successor). A
//! TCP socket merely bound moves the same way (Node.js's cluster with
//! `SCHED_NONE` sends it to each worker, which listens on it: each
//! claimant after the first gets a socket bound beside it, and their
//! listeners share the port). A UDP socket moves too, with the datagrams
//! its sender had not read; passed to several processes (Node.js's
//! cluster hands its UDP sockets to each worker), the later claimants
//! join its port's group.

use crate::real::{errno, say_once};
use crate::state::{self, fl, kind};
use ixora_channel::ctl::{op, Msg};
use libc::{c_int, msghdr};
use std::sync::atomic::{AtomicBool, Ordering};

/// The descriptors that the `SCM_RIGHTS` messages of `m`'s control data
/// carry.
fn rights(m: &msghdr) -> Vec<c_int> {
    let mut v = Vec::new();
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return v;
    }
    // SAFETY: `m` is a msghdr whose `msg_control` has `msg_controllen`
    // readable bytes of control messages (sendmsg's contract for the
    // program's message; the kernel's for one it filled in); CMSG_* walk
    // within them, and an SCM_RIGHTS message's data is that many ints,
    // read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                let fds = libc::CMSG_DATA(c) as *const c_int;
                v.extend((0..n).map(|i| std::ptr::read_unaligned(fds.add(i))));
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    v
}

/// Before a `sendmsg` on a kernel descriptor: hand each Ixora connection
/// among the descriptors it passes to the service (`PASS`). Returns those
/// handed over, for [`take_back`] if the message does not go.
pub fn pass_out(m: &msghdr) -> Vec<c_int> {
    static SAID_FAIL: AtomicBool = AtomicBool::new(false);
    let mut passed = Vec::new();
    for fd in rights(m) {
        let Some(sk) = state::sock(fd) else { continue };
        if passed.contains(&fd) {
            continue; // one descriptor twice in a message: one hand-over
        }
        // O_NONBLOCK belongs to the file, which the receiver shares: the
        // service carries it to the claim (bit 32), and whether the socket
        // is bound to any address (bit 33).
        let any = sk.e.flags.load(Ordering::Relaxed) & fl::BOUND_ANY != 0;
        let b = u64::from(sk.gen()) | u64::from(sk.nonblock()) << 32 | u64::from(any) << 33;
        let r = state::request(sk.a, Msg::new(op::PASS, sk.s, fd as i64, b), &[]);
        if r.a < 0 {
            let e = match (-r.a) as i32 {
                libc::ENOTCONN => "only listening, bound and connected TCP sockets are handed \
                                   over, not a fresh one"
                    .to_string(),
                e => std::io::Error::from_raw_os_error(e).to_string(),
            };
            say_once(
                &SAID_FAIL,
                &format!(
                    "ixora-preload: descriptor {fd}, an Ixora socket, could not be handed to \
                     another process ({e}); the receiver gets a kernel socket that carries \
                     nothing\n"
                ),
            );
            continue;
        }
        // Every descriptor of the socket here (a dup) closes its file for
        // good rather than pooling it: another process holds it now.
        state::flag_socket(sk, fl::PASSED, true);
        passed.push(fd);
    }
    passed
}

/// The message that was to carry `fds` (handed over by [`pass_out`]) did
/// not go: take their sockets back (`CANCEL`), each into its own slot,
/// so the descriptors and the epoll sets that watch them are unchanged.
pub fn take_back(fds: &[c_int]) {
    let e = errno();
    for &fd in fds {
        if let Some(sk) = state::sock(fd) {
            let r = state::request(
                sk.a,
                Msg::new(op::CANCEL, sk.s, 0, u64::from(sk.gen())),
                &[],
            );
            if r.a >= 0 {
                state::flag_socket(sk, fl::PASSED, false);
            }
        }
    }
    crate::real::set_errno(e);
}

/// After a `recvmsg` on a kernel descriptor: claim the connection passed
/// with each descriptor that came and may be a placeholder (a TCP socket
/// of the kernel's that is not connected).
pub fn adopt_received(m: &msghdr) {
    if state::env().socket.is_none() {
        return;
    }
    let fds = rights(m);
    if fds.is_empty() {
        return;
    }
    let e = errno();
    for fd in fds {
        if state::kind_of(fd) == kind::NONE && may_be_placeholder(fd).is_some() {
            claim(fd);
        }
    }
    crate::real::set_errno(e);
}

/// Whether `fd` is a TCP or UDP socket of the kernel's that is not
/// connected (a placeholder is never connected); its domain if so.
fn may_be_placeholder(fd: c_int) -> Option<c_int> {
    let domain = int_opt(fd, libc::SO_DOMAIN)?;
    if !matches!(domain, libc::AF_INET | libc::AF_INET6)
        || !matches!(
            int_opt(fd, libc::SO_TYPE)?,
            libc::SOCK_STREAM | libc::SOCK_DGRAM
        )
    {
        return None;
    }
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername(2) into a live buffer of the length given.
    let r = unsafe {
        crate::real::syscall_fn()(
            libc::SYS_getpeername,
            fd,
            &mut sa as *mut libc::sockaddr_storage,
            &mut len as *mut libc::socklen_t,
        )
    };
    (r < 0 && errno() == libc::ENOTCONN).then_some(domain)
}

/// Socket option `name` (level `SOL_SOCKET`) of `fd`, an int, from the
/// kernel (raw: not the shim's own getsockopt).
pub(crate) fn int_opt(fd: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) into a live int of the size given.
    let r = unsafe {
        crate::real::syscall_fn()(
            libc::SYS_getsockopt,
            fd,
            libc::SOL_SOCKET,
            name,
            &mut v as *mut c_int,
            &mut len as *mut libc::socklen_t,
        )
    };
    (r == 0).then_some(v)
}

/// Ask the service for the socket passed with `fd`'s file; on success
/// `fd` is that socket. Whether it was claimed.
fn claim(fd: c_int) -> bool {
    let Some(a) = state::attach() else {
        return false;
    };
    let r = state::request(a, Msg::new(op::CLAIM, 0, fd as i64, 0), &[]);
    if r.a < 0 {
        return false;
    }
    let (s, gen) = (r.slot, r.b as u32);
    let mut flags = fl::PASSED;
    if r.c & 2 != 0 {
        flags |= fl::NONBLOCK;
    }
    if may_be_placeholder(fd) == Some(libc::AF_INET6) {
        flags |= fl::INET6;
    }
    if r.c & 1 != 0 {
        flags |= fl::LISTENING;
        // A listener on any address listens in the kernel too, on this
        // very file (its kernel side): accept and epoll take from both.
        if int_opt(fd, libc::SO_ACCEPTCONN) == Some(1) {
            flags |= fl::KSIDE | fl::BOUND_ANY;
        }
    } else if int_opt(fd, libc::SO_TYPE) == Some(libc::SOCK_DGRAM) {
        flags |= fl::DGRAM;
        // A UDP socket on any address: its kernel side is this very file,
        // bound by the sender (receive calls and epoll take from both).
        if r.c & 4 != 0 {
            flags |= fl::BOUND_ANY | fl::KSIDE;
        }
    } else if r.c & 4 != 0 {
        // A socket bound to any address: once listening, its kernel side
        // listens too (see `shim::listen`).
        flags |= fl::BOUND_ANY;
    }
    state::hold(a, s);
    state::install(fd, s, gen, flags & !(fl::CLOEXEC_KNOWN | fl::CLOEXEC));
    true
}
