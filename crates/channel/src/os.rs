//! System calls for processes that share memory: memfds and their seals,
//! mappings, eventfds, epoll, and Unix `SOCK_SEQPACKET` sockets that carry
//! descriptors (`SCM_RIGHTS`). Used by the shared-memory wire (`ixora-io`),
//! the socket service and the preload shim.
//!
//! Everything here is slow path (handshake, arming a doorbell, checking on
//! the peer) except [`ring`], which a producer calls only when the consumer
//! asked to be woken.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// A shared mapping of a memfd. Unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Map `len` bytes of `fd` shared, populated; writable or read-only.
    pub fn map(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Mapping> {
        Mapping::map_with(fd, len, writable, true)
    }

    /// Map `len` bytes of `fd` shared; `populate` faults every page in now
    /// (otherwise pages are allocated on first touch).
    pub fn map_with(
        fd: BorrowedFd<'_>,
        len: usize,
        writable: bool,
        populate: bool,
    ) -> io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping with no address hint touches no
        // existing memory; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 },
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
        })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping (never made by `map`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly one mapping made by `map` and not
        // unmapped before; every user holds the `Arc` that owns this value,
        // so nothing uses the memory any more.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: the mapping is process-wide memory with no thread affinity. All
// accesses to it go through atomics or raw byte copies to and from private
// memory, never through `&`/`&mut` to plain data, so sharing the handle
// between threads cannot create a data race on Rust references.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful system call that
    // created it; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The CPU the calling thread runs on (glibc reads it from the rseq area
/// or the vDSO: no system call on Linux ≥ 4.18).
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu(3) has no arguments and no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as u32)
}

/// The current CPU plus one, as the layout stores CPUs (`svc_cpu`,
/// `waiter_cpu`): 0 when unknown.
pub fn cpu_tag() -> u16 {
    current_cpu().map_or(0, |c| (c + 1).min(u16::MAX as u32) as u16)
}

/// Keep freed heap memory in the process instead of returning it to the
/// kernel (glibc: no trimming of the heap's top below 256 MiB, no mmap for
/// blocks under 32 MiB). For a process that allocates and frees large
/// buffers at a high rate — the socket service holds each transmitted
/// chunk until it is acknowledged — this saves a page fault per 4 KiB
/// each time memory is reused. Best effort.
pub fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; it touches no
    // memory of ours.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

/// A sealable memfd of `len` bytes, close-on-exec, not executable.
pub fn memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = CString::new(name).expect("memfd names have no NUL");
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `cname` is a valid NUL-terminated string for the call.
    let mut fd = unsafe { libc::memfd_create(cname.as_ptr(), flags | libc::MFD_NOEXEC_SEAL) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Kernels before 6.3 know no MFD_NOEXEC_SEAL.
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    }
    let fd = owned(cvt(fd)?);
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd too large"))?;
    // SAFETY: ftruncate on a descriptor we own; no memory arguments.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(fd)
}

/// Add `seals` to a memfd.
pub fn seal(fd: BorrowedFd<'_>, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl(F_ADD_SEALS) takes an int argument; no memory involved.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(())
}

/// Check a memfd received from the peer before mapping it: a tmpfs (not
/// hugetlbfs) file of at least `len` bytes carrying at least `seals`, so
/// the peer can neither shrink it under our mapping (SIGBUS) nor punch
/// holes that a hugetlb fault could not fill.
pub fn check_memfd(fd: BorrowedFd<'_>, len: usize, seals: libc::c_int) -> io::Result<()> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    // SAFETY: fcntl(F_GET_SEALS) has no memory arguments.
    let have = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if have < 0 {
        return Err(bad(format!(
            "peer sent a descriptor that is not a sealable memfd: {}",
            io::Error::last_os_error()
        )));
    }
    if have & seals != seals {
        return Err(bad(format!(
            "peer memfd lacks seals {:#x} (has {have:#x})",
            seals & !have
        )));
    }
    // SAFETY: fstatfs/fstat fill the zeroed plain-data structs we pass.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `sfs` is valid and writable.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) })?;
    if sfs.f_type != libc::TMPFS_MAGIC {
        return Err(bad(format!(
            "peer memfd is not on tmpfs (f_type {:#x}); hugetlb memfds are refused",
            sfs.f_type
        )));
    }
    // SAFETY: as above.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid and writable.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if (st.st_size as u64) < len as u64 {
        return Err(bad(format!(
            "peer memfd holds {} bytes, {len} expected",
            st.st_size
        )));
    }
    Ok(())
}

/// Ask the kernel to back `len` bytes at `ptr` with pages now (best
/// effort; first-touch faults otherwise).
pub fn populate_write(ptr: *mut u8, len: usize) {
    // SAFETY: madvise does not access the memory as Rust data; the range
    // is one whole writable mapping we own. Errors (old kernels) are
    // ignored: pages then fault in on first touch.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE);
    }
}

/// A non-blocking, close-on-exec eventfd with initial value `init`.
pub fn eventfd(init: u32) -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) has no memory arguments.
    let fd = cvt(unsafe { libc::eventfd(init, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    Ok(owned(fd))
}

/// Ring an eventfd: add one. Errors are ignored: EAGAIN means the counter
/// is saturated, which is readable anyway. Only for an eventfd no
/// untrusted process holds (ours, or a [`wake_line`]'s ring end): one that
/// does could have made it blocking.
#[inline]
pub fn ring(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
    }
}

/// An epoll instance watching `fds` for input (and hang-up).
pub fn epoll(fds: &[RawFd]) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = owned(cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
    for (i, fd) in fds.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: i as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, *fd, &mut ev) })?;
    }
    Ok(ep)
}

/// A wake-up line from a ringer to a sleeper in another process that
/// neither can use to block the other.
///
/// An eventfd shared between two processes is not safe for that: its
/// `O_NONBLOCK` flag and its counter belong to the open file description,
/// which both hold. The peer can clear the flag and then fill the counter
/// (our next write blocks) or empty it (our next read blocks). So nothing
/// shared is ever read or written. The ringer keeps the eventfd, the
/// *ring end*, to itself and rings it with [`ring`]; the sleeper gets the
/// *wait end*: an epoll instance that watches the eventfd edge-triggered.
/// The wait end is readable after a ring until the sleeper takes the edge
/// with [`take_edges`]; the sleeper never touches the counter (it only
/// grows, by one per ring). Whatever the sleeper does to its epoll
/// instance (make it blocking, add its own descriptors) cannot make the
/// ringer's write block.
///
/// Returns `(ring end, wait end)`.
pub fn wake_line() -> io::Result<(OwnedFd, OwnedFd)> {
    let e = eventfd(0)?;
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = owned(cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
    watch_edges(ep.as_fd(), e.as_raw_fd(), 0)?;
    Ok((e, ep))
}

/// Watch `fd` for input in epoll instance `ep`, edge-triggered, with
/// `token` as the event's data.
pub fn watch_edges(ep: BorrowedFd<'_>, fd: RawFd, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: token,
    };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    Ok(())
}

/// Stop watching `fd` in epoll instance `ep` (errors ignored: a closed
/// descriptor is no longer watched anyway).
pub fn unwatch(ep: BorrowedFd<'_>, fd: RawFd) {
    // SAFETY: a null event is allowed for EPOLL_CTL_DEL (Linux >= 2.6.9).
    unsafe {
        libc::epoll_ctl(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            fd,
            std::ptr::null_mut(),
        );
    }
}

/// Edges taken per `epoll_pwait` by [`take_edges`] (and by the callers of
/// [`wait_edges`] that size their buffer with it).
pub const EDGES: usize = 16;

/// Take the pending edges of epoll instance `ep` without waiting, so it
/// is readable again only after a new ring. Returns how many were taken.
pub fn take_edges(ep: RawFd) -> usize {
    take_edges_with(ep, |_| {})
}

/// [`take_edges`], handing each batch of the events taken to `seen`
/// (their data says which descriptor each edge was for).
pub fn take_edges_with(ep: RawFd, mut seen: impl FnMut(&[libc::epoll_event])) -> usize {
    // SAFETY: epoll_event is plain old data; all-zero is valid.
    let mut evs: [libc::epoll_event; EDGES] = unsafe { std::mem::zeroed() };
    let mut total = 0;
    loop {
        let n = wait_edges(ep, 0, &mut evs);
        if n <= 0 {
            return total;
        }
        seen(&evs[..n as usize]);
        total += n as usize;
        if (n as usize) < EDGES {
            return total;
        }
    }
}

/// Sleep until epoll instance `ep` has an edge or `timeout_ms` passes
/// (negative: no limit; 0: do not sleep), taking up to `evs.len()` of its
/// edges into `evs` (their data says which descriptor each edge was for,
/// as registered by [`watch_edges`]): one system call where a poll and
/// [`take_edges`] make two. Made through `libc::syscall` with the call's
/// number, not libc's `epoll_pwait` symbol, which the preload library
/// interposes (its `syscall` passes every number but `SYS_close` and
/// `SYS_close_range` through untouched). Returns how many
/// edges were taken, or -1 with `errno` set (`EINTR` for a signal).
pub fn wait_edges(ep: RawFd, timeout_ms: libc::c_int, evs: &mut [libc::epoll_event]) -> isize {
    wait_edges_masked(ep, timeout_ms, evs, None)
}

/// [`wait_edges`] with the signal mask `mask` (None: unchanged) in force
/// while it sleeps, as `epoll_pwait` sets it.
pub fn wait_edges_masked(
    ep: RawFd,
    timeout_ms: libc::c_int,
    evs: &mut [libc::epoll_event],
    mask: Option<&libc::sigset_t>,
) -> isize {
    let max = evs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    let mask = mask.map_or(std::ptr::null(), |m| m as *const libc::sigset_t);
    // SAFETY: the kernel writes at most `max` events into the live slice;
    // `mask` is null (none changed) or a live signal set, of which the
    // kernel reads its 8 bytes (glibc's sigset_t starts with them).
    unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            ep,
            evs.as_mut_ptr(),
            max,
            timeout_ms,
            mask,
            8usize,
        ) as isize
    }
}

/// [`wait_edges_masked`] with a timeout to the nanosecond (None: no
/// limit), by `epoll_pwait2` (Linux 5.11); where the kernel lacks it, by
/// `epoll_pwait` with the timeout rounded up to the millisecond. A
/// program's `select` or `poll` for 1 µs must not sleep a millisecond
/// (wget asks that of each kept-alive connection before reusing it).
pub fn wait_edges_masked_for(
    ep: RawFd,
    timeout: Option<Duration>,
    evs: &mut [libc::epoll_event],
    mask: Option<&libc::sigset_t>,
) -> isize {
    let Some(t) = timeout else {
        return wait_edges_masked(ep, -1, evs, mask);
    };
    let max = evs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    let maskp = mask.map_or(std::ptr::null(), |m| m as *const libc::sigset_t);
    let ts = libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    };
    // SAFETY: as `wait_edges_masked`; `ts` is a live timespec the kernel
    // only reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait2,
            ep,
            evs.as_mut_ptr(),
            max,
            &ts as *const libc::timespec,
            maskp,
            8usize,
        ) as isize
    };
    if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        let ms = t
            .as_nanos()
            .div_ceil(1_000_000)
            .min(libc::c_int::MAX as u128);
        return wait_edges_masked(ep, ms as libc::c_int, evs, mask);
    }
    r
}

/// A doorbell between two processes that do not trust each other, which
/// neither can use to block the other: a Unix stream socket pair. Returns
/// `(ours, theirs)`: we keep `ours` to ourselves (poll it, empty it with
/// [`drain_socket`]) and hand `theirs` to the peer, which rings it with
/// [`ring_socket`] (so can we, holding it too).
///
/// Unlike an eventfd (see [`wake_line`]), nothing here has state that
/// the other side can turn against us: the ring is a `send` with
/// `MSG_DONTWAIT`, non-blocking whatever the file's flags, which fails
/// with `EAGAIN` when the peer lets its buffer fill (measured on this
/// kernel: it does not block either while another thread holds the
/// socket in a read or send that faults on a userfaultfd page — a pipe's
/// `RWF_NOWAIT` write does, on the pipe's mutex), and the end we read is
/// ours alone. It costs 1.3 µs a ring against the eventfd's 0.3 µs:
/// for wake-ups of a sleeper, not for the data path.
pub fn socket_bell() -> io::Result<(OwnedFd, OwnedFd)> {
    // (Our end also refuses descriptors: see [`refuse_descriptors`].)
    let mut sv = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two descriptors into the live local array.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    })?;
    let (ours, theirs) = (owned(sv[0]), owned(sv[1]));
    refuse_descriptors(ours.as_fd());
    Ok((ours, theirs))
}

/// Check that a doorbell received from a peer is what [`socket_bell`]
/// hands out: a Unix stream socket (anything else could make a ring
/// block, or mean something else).
pub fn check_socket_bell(fd: BorrowedFd<'_>) -> io::Result<()> {
    let opt = |name: libc::c_int| -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are live locals of the sizes given.
        cvt(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        Ok(v)
    };
    match (opt(libc::SO_DOMAIN), opt(libc::SO_TYPE)) {
        (Ok(libc::AF_UNIX), Ok(libc::SOCK_STREAM)) => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "peer doorbell is not a Unix stream socket",
        )),
    }
}

/// Ring a socket doorbell: one byte, never blocking, never raising
/// SIGPIPE. Errors are ignored: `EAGAIN` means the sleeper has bytes
/// waiting (it is readable anyway), `EPIPE` that it is gone.
#[inline]
pub fn ring_socket(fd: RawFd) {
    // SAFETY: sends one byte from a live local.
    unsafe {
        libc::send(
            fd,
            b"!".as_ptr().cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        );
    }
}

/// Empty our end of a socket doorbell without blocking. Bounded: a peer
/// that floods it leaves it readable, which costs us a spurious wake-up,
/// not a hang. Returns false if the ringing side was shut down (end of
/// file: the end would stay readable for good — a peer that did that is
/// misbehaving, or gone).
pub fn drain_socket(fd: RawFd) -> bool {
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        // SAFETY: receives at most `buf.len()` bytes into the live local.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n == 0 {
            return false;
        }
        if n < buf.len() as isize {
            return true;
        }
    }
    true
}

/// `SO_PASSRIGHTS` (Linux 6.16; not yet in the libc crate).
const SO_PASSRIGHTS: libc::c_int = 83;

/// Make the kernel refuse descriptors sent to Unix socket `fd` (the
/// sender's `sendmsg` fails with EPERM), where the kernel can (Linux
/// 6.16 and later; earlier kernels ignore the request: returns false).
///
/// A descriptor a peer sends us is ours to close, and closing can block
/// for as long as the peer likes (a TCP socket with `SO_LINGER` and
/// unsent data; the last reference to a file in an epoll set whose lock
/// the peer holds). Even a message read without a control buffer closes
/// the descriptors it carried, on the reading thread.
pub fn refuse_descriptors(fd: BorrowedFd<'_>) -> bool {
    let zero: libc::c_int = 0;
    // SAFETY: passes a live int of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PASSRIGHTS,
            (&zero as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// What a non-blocking look at the control socket says about the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Connected and quiet.
    Alive,
    /// Hung up, reset, or broke the protocol by speaking after the
    /// handshake.
    Gone,
}

/// Peek at the control socket without blocking.
pub fn peer_state(sock: RawFd) -> PeerState {
    let mut b = [0u8; 1];
    // SAFETY: receives at most one byte into a live local buffer.
    let n = unsafe {
        libc::recv(
            sock,
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => PeerState::Alive,
            _ => PeerState::Gone,
        }
    } else {
        // 0: orderly hang-up; >0: the peer spoke after the handshake,
        // which the protocol never does.
        PeerState::Gone
    }
}

/// The peer's process id (SO_PEERCRED).
pub fn peer_pid(sock: BorrowedFd<'_>) -> Option<u32> {
    peer_cred(sock).map(|(pid, _)| pid)
}

/// The peer's process id and user id (SO_PEERCRED), as they were when it
/// connected.
pub fn peer_cred(sock: BorrowedFd<'_>) -> Option<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred`/`len` are valid and sized for SO_PEERCRED.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some((cred.pid as u32, cred.uid))
}

/// Whether process `pid` holds CAP_NET_BIND_SERVICE in its effective set
/// now (its `/proc/<pid>/status`): it may bind ports below
/// `net.ipv4.ip_unprivileged_port_start`. None if that cannot be read
/// (no such process here: another PID namespace).
pub fn may_bind_privileged(pid: u32) -> Option<bool> {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
    Some(caps >> CAP_NET_BIND_SERVICE & 1 == 1)
}

/// A `sockaddr_un` for `path` and its length.
fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.contains(&0) || bytes.len() >= a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is empty, has a NUL, or is longer than {} bytes",
                path.display(),
                a.sun_path.len() - 1
            ),
        ));
    }
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in a.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((a, len as libc::socklen_t))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory arguments.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    Ok(owned(fd))
}

/// `r` as a result: the OS error when negative.
pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Bind a non-blocking listening SEQPACKET socket at `path`.
pub fn bind_listen(path: &Path) -> io::Result<OwnedFd> {
    bind_listen_backlog(path, 4)
}

/// Bind a non-blocking listening SEQPACKET socket at `path` with room for
/// `backlog` pending connections.
pub fn bind_listen_backlog(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    bind_listen_with(path, backlog, &|_| Ok(()))
}

/// [`bind_listen_backlog`], calling `before_listen` with the socket's path
/// between the bind and the listen (no process can connect yet: set the
/// file's owner and mode there).
pub fn bind_listen_with(
    path: &Path,
    backlog: i32,
    before_listen: &dyn Fn(&Path) -> io::Result<()>,
) -> io::Result<OwnedFd> {
    let (a, len) = sockaddr(path)?;
    let s = seqpacket()?;
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    if let Err(e) = before_listen(path) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    // SAFETY: listen(2) has no memory arguments.
    cvt(unsafe { libc::listen(s.as_raw_fd(), backlog) })?;
    Ok(s)
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets (non-blocking,
/// close-on-exec), as [`connect_once`] and [`accept`] make one.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair(2) writes two descriptors into `fds`.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    Ok((owned(fds[0]), owned(fds[1])))
}

/// One non-blocking connection attempt to `path`.
pub fn connect_once(path: &Path) -> io::Result<OwnedFd> {
    let (a, len) = sockaddr(path)?;
    let s = seqpacket()?;
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(s)
}

/// Accept one connection (non-blocking; `WouldBlock` when none waits).
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: accept4 with null address arguments writes no memory.
    let fd = cvt(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    })?;
    Ok(owned(fd))
}

/// Milliseconds left until `deadline` for poll(2), at least 1 unless past.
fn left_ms(deadline: Instant) -> io::Result<i32> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "timed out waiting on the control socket",
        ));
    }
    Ok(left.as_millis().clamp(1, i32::MAX as u128) as i32)
}

/// Wait for `events` on `fd` until `deadline`.
pub fn wait(fd: RawFd, events: i16, deadline: Instant) -> io::Result<()> {
    loop {
        let ms = left_ms(deadline)?;
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                // RLIMIT_NOFILE below one (vsftpd's pre-login process
                // sets it to 0): poll refuses any descriptor. Look again
                // in a moment; the caller's non-blocking call tries
                // meanwhile. Failing here instead left the request's
                // reply unread, to be taken as the next request's.
                std::thread::sleep(Duration::from_millis(1));
                return Ok(());
            }
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Most descriptors one handshake message carries.
pub const MAX_FDS: usize = 4;

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 128]);

/// Send one message with `fds` attached, waiting for room until
/// `deadline`. Never raises SIGPIPE.
pub fn send_msg(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
    deadline: Instant,
) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut cbuf = CmsgBuf([0; 128]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = (fds.len() * std::mem::size_of::<RawFd>()) as u32;
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        assert!(space <= cbuf.0.len());
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` writable, aligned bytes,
        // enough for one header and `fds.len()` descriptors, so the first
        // header and its data are inside the buffer.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` and everything it points to (iov, data, cbuf) are
        // live for the call; sendmsg only reads them.
        let n = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &msg,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            if n as usize != data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short control message send",
                ));
            }
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => wait(sock.as_raw_fd(), libc::POLLOUT, deadline)?,
            io::ErrorKind::Interrupted => {}
            _ => return Err(e),
        }
    }
}

/// Receive one message of at most `buf.len()` bytes and the descriptors
/// attached to it, waiting until `deadline`. Every received descriptor is
/// owned (closed on drop) before anything is checked; a truncated message
/// or control part is an error.
pub fn recv_msg(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    recv_msg_from(sock, buf, deadline).map(|(n, fds, _)| (n, fds))
}

/// The process that sent a message, as the kernel vouches for it.
#[derive(Debug)]
pub struct Sender {
    /// Its pid (`SCM_CREDENTIALS`).
    pub pid: u32,
    /// A pidfd for it (`SCM_PIDFD`, Linux 6.5+; `None` on older kernels):
    /// with it, [`Sender::still_there`] tells whether `pid` still names
    /// that process.
    pub pidfd: Option<OwnedFd>,
    /// The kernel could make no pidfd for it: it was gone (reaped) by the
    /// time the message was read.
    pub gone: bool,
}

impl Sender {
    /// Whether `pid` still names the process that sent the message: it
    /// has not exited, so its pid cannot have gone to another process,
    /// and what was read under `/proc/<pid>` before a `true` was that
    /// process's. On a kernel without pidfds, `true` (nothing to check
    /// with).
    pub fn still_there(&self) -> bool {
        !self.gone && !self.pidfd.as_ref().is_some_and(|p| exited(p.as_raw_fd()))
    }
}

/// `SO_PASSPIDFD` and `SCM_PIDFD` (asm-generic/socket.h; not in `libc`).
const SO_PASSPIDFD: libc::c_int = 76;
const SCM_PIDFD: libc::c_int = 4;

/// [`recv_msg`], and the process that sent the message, as the kernel
/// vouches for it (`SCM_CREDENTIALS` and `SCM_PIDFD`, which come with
/// every message once [`pass_credentials`] is on; `None` without it).
/// Unlike `SO_PEERCRED`, which names the process that connected, it names
/// the sender of this message: a forked child speaks on the connection
/// its parent opened.
pub fn recv_msg_from(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<(usize, Vec<OwnedFd>, Option<Sender>)> {
    loop {
        wait(sock.as_raw_fd(), libc::POLLIN, deadline)?;
        let mut cbuf = CmsgBuf([0; 128]);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.0.len() as _;
        // SAFETY: `msg` points at a live, writable iovec/buffer and
        // control buffer of the lengths given.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        let mut fds = Vec::new();
        let mut pid = None;
        let mut pidfd = None;
        let mut gone = false;
        // SAFETY: the kernel filled `msg_controllen` bytes of `cbuf` with
        // well-formed control messages; CMSG_FIRSTHDR/NXTHDR stay inside
        // that length, an SCM_RIGHTS payload holds `cmsg_len -
        // CMSG_LEN(0)` bytes of descriptors that were installed in our
        // table for us to own, an SCM_PIDFD payload one such descriptor,
        // and an SCM_CREDENTIALS payload a `ucred`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                if (*c).cmsg_level == libc::SOL_SOCKET
                    && (*c).cmsg_type == libc::SCM_CREDENTIALS
                    && (*c).cmsg_len as usize
                        >= libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as usize
                {
                    let cred = libc::CMSG_DATA(c).cast::<libc::ucred>().read_unaligned();
                    pid = u32::try_from(cred.pid).ok().filter(|&p| p > 0);
                }
                if (*c).cmsg_level == libc::SOL_SOCKET
                    && (*c).cmsg_type == SCM_PIDFD
                    && (*c).cmsg_len as usize
                        >= libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize
                {
                    // (A negative errno where the kernel could make none.)
                    let fd = libc::CMSG_DATA(c).cast::<RawFd>().read_unaligned();
                    if fd >= 0 {
                        pidfd = Some(OwnedFd::from_raw_fd(fd));
                    } else {
                        gone = true;
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "oversized control message",
            ));
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer hung up on the control socket",
            ));
        }
        return Ok((n as usize, fds, pid.map(|pid| Sender { pid, pidfd, gone })));
    }
}

/// Have every message received on `sock` say which process sent it (see
/// [`recv_msg_from`]): its pid, and a pidfd where the kernel has them
/// (Linux 6.5+; not an error without).
pub fn pass_credentials(sock: BorrowedFd<'_>) -> io::Result<()> {
    let on = |opt| {
        let one: libc::c_int = 1;
        // SAFETY: passes a live int of the size given.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    on(libc::SO_PASSCRED)?;
    let _ = on(SO_PASSPIDFD);
    Ok(())
}

/// Sleep a little between connection attempts.
pub fn backoff(deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "timed out connecting to the control socket",
        ));
    }
    std::thread::sleep(left.min(Duration::from_millis(2)));
    Ok(())
}

/// A process descriptor of `pid` (`pidfd_open`, Linux 5.3+): readable
/// once the process has exited.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open has no memory arguments; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    cvt(fd).map(owned)
}

/// Whether the process of `pidfd` has exited (a look, no wait).
pub fn exited(pidfd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

/// Replace the `len` bytes of memory at `ptr` (page aligned, whole pages
/// of one mapping) with a private, writable copy of what they hold now.
/// The switch is one `mremap`: a thread reading them meanwhile sees the
/// old pages or the copy, never a hole.
///
/// # Safety
/// `ptr..ptr + len` must be mapped and readable, and nothing may write it
/// meanwhile (the copy would miss the write).
pub unsafe fn privatize(ptr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: a fresh anonymous mapping touches no existing memory; the
    // result is checked against MAP_FAILED.
    let copy = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if copy == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both ranges are `len` bytes, mapped (the caller's promise and
    // the fresh mapping), and distinct.
    unsafe { std::ptr::copy_nonoverlapping(ptr, copy.cast::<u8>(), len) };
    // SAFETY: moves the fresh mapping over the caller's range, which the
    // caller promises is whole pages of a mapping; the old pages there are
    // unmapped by the move.
    let r = unsafe {
        libc::mremap(
            copy,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            ptr.cast::<libc::c_void>(),
        )
    };
    if r == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // SAFETY: the fresh mapping is still ours and unused.
        unsafe { libc::munmap(copy, len) };
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `f` on a thread; fail if it does not return within 10 s (a
    /// ring that blocked).
    fn within_10s(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a ring blocked");
    }

    fn set_blocking(fd: RawFd) {
        // SAFETY: fcntl with int arguments.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK), 0);
        }
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn a_wake_line_is_an_edge_its_sleeper_cannot_turn_into_a_block() {
        let (ring_end, wait) = wake_line().unwrap();
        // The most the sleeper can do: make its end blocking. The counter
        // is out of its reach (an epoll descriptor cannot be read).
        set_blocking(wait.as_raw_fd());
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into a live local.
        let n = unsafe { libc::read(wait.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!(n, -1);
        assert!(!readable(wait.as_raw_fd()));
        let r = ring_end.as_raw_fd();
        let rings = ring_end.try_clone().unwrap();
        within_10s(move || {
            for _ in 0..100_000 {
                ring(rings.as_raw_fd());
            }
        });
        assert!(readable(wait.as_raw_fd()));
        assert!(take_edges(wait.as_raw_fd()) >= 1);
        assert!(!readable(wait.as_raw_fd()), "taken edges leave it quiet");
        ring(r);
        assert!(readable(wait.as_raw_fd()), "a new ring is a new edge");
    }

    #[test]
    fn a_socket_bell_never_blocks_its_ringer() {
        let (ours, theirs) = socket_bell().unwrap();
        assert!(check_socket_bell(theirs.as_fd()).is_ok());
        let e = eventfd(0).unwrap();
        assert!(check_socket_bell(e.as_fd()).is_err());
        // A sleeper that never drains and made the shared end blocking
        // (the flag is the file description's, which both hold): the
        // buffer fills, and every further ring still returns at once.
        set_blocking(theirs.as_raw_fd());
        let t = theirs.try_clone().unwrap();
        within_10s(move || {
            for _ in 0..200_000 {
                ring_socket(t.as_raw_fd());
            }
        });
        assert!(readable(ours.as_raw_fd()));
        for _ in 0..100 {
            drain_socket(ours.as_raw_fd());
        }
        assert!(!readable(ours.as_raw_fd()));
        ring_socket(theirs.as_raw_fd());
        assert!(readable(ours.as_raw_fd()));
        // The sleeper gone: a ring is EPIPE, not SIGPIPE.
        drop(ours);
        ring_socket(theirs.as_raw_fd());
    }

    #[test]
    fn privatize_gives_a_private_writable_copy_in_place() {
        let fd = memfd("ixora-privatize-test", 2 * 4096).unwrap();
        let w = Mapping::map(fd.as_fd(), 2 * 4096, true).unwrap();
        // SAFETY: within the two-page mapping.
        unsafe { *w.as_ptr() = 7 };
        let r = Mapping::map(fd.as_fd(), 2 * 4096, false).unwrap();
        // SAFETY: the first page of a read-only mapping no one else writes
        // through now (w is idle).
        unsafe { privatize(r.as_ptr(), 4096).unwrap() };
        // SAFETY: the first page is now private and writable; both pages
        // are mapped.
        unsafe {
            assert_eq!(*r.as_ptr(), 7, "the copy holds what was there");
            *r.as_ptr() = 9;
            assert_eq!(*w.as_ptr(), 7, "the shared page is untouched");
            *w.as_ptr().add(4096) = 5;
            assert_eq!(*r.as_ptr().add(4096), 5, "the second page is still shared");
        }
    }

    #[test]
    fn a_message_names_its_sender_until_the_sender_is_gone() {
        let dir = std::env::temp_dir().join(format!("ixora-sender-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s");
        let l = bind_listen(&path).unwrap();
        // Another process sends one message, then exits.
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); \
                 s.connect({:?}); s.recv(1); s.send(b'hi'); s.recv(1)",
                path.display().to_string()
            ))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        wait(l.as_raw_fd(), libc::POLLIN, deadline).unwrap();
        let c = accept(l.as_fd()).unwrap();
        pass_credentials(c.as_fd()).unwrap();
        send_msg(c.as_fd(), b"!", &[], deadline).unwrap(); // now it may send
        let mut buf = [0u8; 8];
        let (n, _, who) = recv_msg_from(c.as_fd(), &mut buf, deadline).unwrap();
        assert_eq!(&buf[..n], b"hi");
        let who = who.expect("the kernel names the sender");
        assert_eq!(who.pid, child.id());
        assert!(who.still_there());
        drop(c); // its recv ends: it exits
        child.wait().unwrap();
        // A kernel with SCM_PIDFD (6.5+) says it is gone; without, the
        // pid is all there is.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(['.', '-'])
            .map(|x| x.parse::<u32>().unwrap_or(0));
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 5) {
            assert!(who.pidfd.is_some(), "Linux {release} has SCM_PIDFD");
        }
        assert_eq!(who.still_there(), who.pidfd.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_process_descriptor_says_when_its_process_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let pfd = pidfd_open(child.id()).unwrap();
        assert!(!exited(pfd.as_raw_fd()));
        child.wait().unwrap();
        assert!(exited(pfd.as_raw_fd()));
    }
}
