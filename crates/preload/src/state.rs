//! Process state of the shim: the descriptor table, the attachment to the
//! service, waiters, and the ring operations behind the calls.

use crate::real::{self, set_errno};
use ixora_channel::ctl::{op, Msg};
use ixora_channel::layout::{self, flag, state, Regions};
use ixora_channel::os;
use libc::c_int;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Highest descriptor number the shim tracks.
pub const MAXFD: usize = 65536;

/// What a descriptor is.
pub mod kind {
    /// Not ours: the kernel's.
    pub const NONE: u8 = 0;
    /// An Ixora socket.
    pub const IXORA: u8 = 1;
    /// A kernel TCP/IPv4 socket that becomes Ixora's if bound to our
    /// address or connected to our subnet.
    pub const MAYBE: u8 = 2;
    /// One of the shim's own descriptors (control socket, doorbell, waiters).
    pub const INTERNAL: u8 = 3;
    /// A closed Ixora socket's placeholder, kept open in the pool for the
    /// next `accept`: to the program it is a closed descriptor (EBADF).
    pub const POOLED: u8 = 4;
    /// A kernel rtnetlink socket: its address dumps get the service's
    /// address (see `netlink`).
    pub const NETLINK: u8 = 5;
}

/// The `IP_TOS` and `IP_TTL` of one datagram's `sendmsg` control data,
/// which take the place of the socket's options for it (Linux's
/// `ip_cmsg_send`); None: the socket's.
#[derive(Debug, Clone, Copy, Default)]
pub struct MsgIp {
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
}

/// Per-descriptor flags.
pub mod fl {
    /// O_NONBLOCK.
    pub const NONBLOCK: u32 = 1;
    /// SHUT_RD done.
    pub const SHUT_RD: u32 = 2;
    /// TCP_NODELAY off (Nagle on) was asked.
    pub const NAGLE: u32 = 4;
    /// SO_REUSEADDR.
    pub const REUSEADDR: u32 = 8;
    /// SO_REUSEPORT.
    pub const REUSEPORT: u32 = 16;
    /// SO_KEEPALIVE.
    pub const KEEPALIVE: u32 = 32;
    /// SO_LINGER with a zero timeout: reset on close.
    pub const LINGER0: u32 = 64;
    /// Listening.
    pub const LISTENING: u32 = 128;
    /// An AF_INET6 socket (dual-stack): its IPv4 addresses are shown to
    /// the program as v4-mapped IPv6 ones (`::ffff:a.b.c.d`).
    pub const INET6: u32 = 256;
    /// IPV6_V6ONLY was set: the socket cannot carry IPv4, so it is never
    /// Ixora's.
    pub const V6ONLY: u32 = 512;
    /// Bound to any address (0.0.0.0 or `::`): until it is connected,
    /// getsockname says so, as Linux does.
    pub const BOUND_ANY: u32 = 1024;
    /// A UDP socket (`SOCK_DGRAM`): its rings hold datagrams.
    pub const DGRAM: u32 = 2048;
    /// IP_PKTINFO: each datagram received comes with its destination and
    /// interface (`recvmsg`'s control data).
    pub const PKTINFO: u32 = 4096;
    /// A socket on any address (a TCP listener, a UDP socket) whose
    /// kernel socket (the descriptor itself) is bound to the same port
    /// too, for the kernel's own addresses (127.0.0.1, other interfaces):
    /// `accept`, the receive calls, `poll` and `epoll` take from both.
    pub const KSIDE: u32 = 8192;
    /// A socket with a kernel side: the next receive (or accept) takes
    /// from the kernel side first — the last peek or FIONREAD described
    /// the kernel side's next datagram.
    pub const NEXT_KERNEL: u32 = 16384;
    /// The next receive takes from Ixora's side first (the last peek or
    /// FIONREAD described Ixora's next datagram).
    pub const NEXT_IXORA: u32 = 32768;
    /// Which side a socket with a kernel side looks at first when both
    /// may have something: flipped at each look, so neither starves.
    pub const TURN: u32 = 65536;
    /// A UDP socket whose kernel side went when it connected to an Ixora
    /// peer: `connect(AF_UNSPEC)` gives it back.
    pub const KSIDE_DROPPED: u32 = 131072;
    /// The program asked for `IPV6_PKTINFO` (`IPV6_RECVPKTINFO`) on a
    /// dual-stack UDP socket.
    pub const PKTINFO6: u32 = 1 << 18;
    /// SO_BROADCAST.
    pub const BROADCAST: u32 = 1 << 19;
    /// SO_TIMESTAMP or SO_TIMESTAMPNS (`SOCK_RCVTSTAMP`): each datagram
    /// received comes with its receive time (`SCM_TIMESTAMP`).
    pub const TSTAMP: u32 = 1 << 23;
    /// SO_TIMESTAMPNS: as a `timespec` (`SCM_TIMESTAMPNS`).
    pub const TSTAMP_NS: u32 = 1 << 24;
    /// The last timestamp option set was a `_NEW` one (Linux's
    /// `SOCK_TSTAMP_NEW`): the control messages are the `_NEW` types.
    pub const TSTAMP_NEW: u32 = 1 << 25;
    /// SO_TIMESTAMPING with software receive stamps reported
    /// (`SCM_TIMESTAMPING`, the stamp in its first `timespec`).
    pub const TSTAMPING: u32 = 1 << 26;
    /// The descriptor's file went to another process, or came from one,
    /// with a connection handed over (`SCM_RIGHTS`): another process may
    /// hold the file, so it is closed, never pooled (the service names a
    /// passed connection by its file: a pooled placeholder must be this
    /// process's alone).
    pub const PASSED: u32 = 1 << 20;
    /// [`CLOEXEC`] says whether the kernel descriptor (the socket, or an
    /// Ixora socket's placeholder) is close-on-exec. Set only where the
    /// shim itself made or changed that flag; without it, the kernel is
    /// asked.
    pub const CLOEXEC_KNOWN: u32 = 1 << 21;
    /// The descriptor is close-on-exec (meaningful with [`CLOEXEC_KNOWN`]).
    pub const CLOEXEC: u32 = 1 << 22;
    /// A connect returned `EINPROGRESS` (or was interrupted) and no
    /// connect call has looked since: the next on the established socket
    /// returns 0, then `EISCONN` (Linux's `SS_CONNECTING`, which only a
    /// connect call ends).
    pub const IN_PROGRESS: u32 = 1 << 27;
    /// A UDP socket that gave up the port it was given (not one the
    /// program chose) at a disconnect: its next send binds another, as
    /// Linux's `inet_send_prepare` binds an unbound socket.
    pub const UNBOUND: u32 = 1 << 28;
    /// SO_RCVLOWAT above 1 on a TCP socket (its value kept with the
    /// options): it polls readable, and a blocking receive returns, only
    /// once that many bytes are there ([`Sock::lowat`]).
    pub const LOWAT: u32 = 1 << 29;
    /// A connect call reported that the socket's connection failed: the
    /// socket is not connected, and the next connect starts a new
    /// connection (Linux's `SS_UNCONNECTED` after `__inet_stream_connect`'s
    /// `sock_error`, which disconnects the socket).
    pub const UNCONNECTED: u32 = 1 << 30;
    /// SO_OOBINLINE: the peer's urgent byte stays in the stream (without
    /// it a read skips it, and `recv` with `MSG_OOB` takes it).
    pub const OOBINLINE: u32 = 1 << 31;

    /// The close-on-exec bits for a descriptor known to be (or not to be)
    /// close-on-exec.
    pub fn cloexec(on: bool) -> u32 {
        CLOEXEC_KNOWN | if on { CLOEXEC } else { 0 }
    }

    /// Whether `flags` know the descriptor close-on-exec (Some) or not.
    pub fn cloexec_of(flags: u32) -> Option<bool> {
        (flags & CLOEXEC_KNOWN != 0).then_some(flags & CLOEXEC != 0)
    }
}

/// Record that `fd`'s kernel descriptor is now close-on-exec or not (the
/// shim just set it, or a call it passed on did).
pub fn note_cloexec(fd: c_int, on: bool) {
    if let Some(e) = entry(fd) {
        let f = e.flags.load(Ordering::Relaxed) & !(fl::CLOEXEC_KNOWN | fl::CLOEXEC);
        e.flags.store(f | fl::cloexec(on), Ordering::Relaxed);
    }
}

/// One descriptor's entry.
pub struct FdEntry {
    /// [`kind`].
    pub kind: AtomicU8,
    /// [`fl`] bits.
    pub flags: AtomicU32,
    /// Slot of an Ixora socket.
    pub slot: AtomicU32,
    /// Generation of the slot when the descriptor was made.
    pub gen: AtomicU32,
}

static TABLE: OnceLock<Box<[FdEntry]>> = OnceLock::new();

/// Values for which all-zero bytes are a valid value (the value a fresh
/// entry of a descriptor table starts with): integers' and pointers'
/// atomics, and structs of them.
///
/// # Safety
/// Implement only for types whose every field is such a value.
pub(crate) unsafe trait Zeroed {}
// SAFETY: a zero atomic integer or boolean is that type's 0 or false, a
// zero atomic pointer is null: valid values of each.
unsafe impl Zeroed for AtomicU8 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicU32 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicU64 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicI32 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicBool {}
// SAFETY: as above.
unsafe impl<T> Zeroed for AtomicPtr<T> {}
// SAFETY: every field is an atomic integer; zero is `kind::NONE`, no
// flags, slot and generation 0.
unsafe impl Zeroed for FdEntry {}

/// A table of `n` zeroed entries, allocated zeroed: its pages stay the
/// kernel's zero page until an entry on them is written, where building
/// it entry by entry wrote them all. The descriptor table (65,536
/// entries, 1 MiB) took 256 page faults so, 0.4–0.7 ms of a program's
/// first `socket()` (until 2026-11-30; a one-shot `curl` pays it).
pub(crate) fn zeroed_table<T: Zeroed>(n: usize) -> Box<[T]> {
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return (0..n)
            .map(|_| {
                // SAFETY: `T: Zeroed`: all-zero bytes are a valid `T`.
                unsafe { std::mem::zeroed() }
            })
            .collect();
    }
    let layout = std::alloc::Layout::array::<T>(n).expect("table size overflows");
    // SAFETY: the layout's size is not zero (checked above).
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `p` is a live allocation of the global allocator with the
    // layout of `[T; n]`, whose bytes are zero: a valid `[T; n]`
    // (`T: Zeroed`), owned by the box from here on.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) }
}

/// The entry of `fd`, if in range.
pub fn entry(fd: c_int) -> Option<&'static FdEntry> {
    if fd < 0 || fd as usize >= MAXFD {
        return None;
    }
    let t = TABLE.get_or_init(|| zeroed_table(MAXFD));
    Some(&t[fd as usize])
}

/// Kind of `fd` (cheap; NONE when out of range).
pub fn kind_of(fd: c_int) -> u8 {
    match TABLE.get() {
        Some(t) if fd >= 0 && (fd as usize) < MAXFD => t[fd as usize].kind.load(Ordering::Acquire),
        _ => kind::NONE,
    }
}

/// The attachment to the service.
pub struct Attached {
    /// Control connection (replaced in a forked child).
    pub ctl: Mutex<OwnedFd>,
    /// The regions.
    pub r: Regions,
    /// The service's doorbell.
    pub bell: c_int,
    /// A process descriptor of the service (-1: none), readable once it
    /// has exited (see [`service_gone`]).
    pub svc: c_int,
    /// Our app id at the service.
    pub app_id: u32,
    /// The service's address, prefix and gateway.
    pub ip: u32,
    /// Prefix length.
    pub prefix: u32,
    /// Gateway (0: none).
    pub gateway: u32,
    /// Closed descriptors kept for reuse.
    pub pool: Mutex<Vec<c_int>>,
    /// Spin before blocking, in microseconds.
    pub spin: Duration,
    /// Socket options the program set that the shim keeps for it (read
    /// back by getsockopt; SO_RCVTIMEO/SO_SNDTIMEO also honoured), per
    /// slot, for the slot's generation.
    pub opts: Mutex<std::collections::HashMap<u32, SlotOpts>>,
    /// A SO_RCVTIMEO or SO_SNDTIMEO was ever kept (else blocking calls
    /// need not look).
    pub timeouts: AtomicBool,
    /// The wait end of waiter 0, which the service made with `ATTACH`
    /// for this process, and [`FORK_GEN`] then: taken by the first thread
    /// of the process that sleeps ([`Waiter::new`]).
    first_waiter: Mutex<Option<(c_int, u64)>>,
}

/// Options set on undecided (MAYBE) sockets, by descriptor: moved to the
/// slot when the socket becomes Ixora's.
/// An option kept for a descriptor: `(fd, (level, name), value)`.
type FdOpt = (c_int, (c_int, c_int), Vec<u8>);
static PENDING_OPTS: Mutex<Vec<FdOpt>> = Mutex::new(Vec::new());

/// Keep an option set on the undecided socket `fd` (for each of its
/// descriptors).
pub fn pend_opt(fd: c_int, key: (c_int, c_int), val: &[u8]) {
    // (Its duplicates' too: an option is the socket's. Most sockets have
    // none, and this allocates nothing for them.)
    let dups = undecided_dups(fd, false);
    let v = val[..val.len().min(OPT_MAX)].to_vec();
    let mut p = PENDING_OPTS.lock().unwrap_or_else(|e| e.into_inner());
    p.retain(|(f, k, _)| !((*f == fd || dups.contains(f)) && *k == key));
    for &d in &dups {
        p.push((d, key, v.clone()));
    }
    p.push((fd, key, v));
}

/// An int option kept for the undecided socket `fd`.
pub fn pending_int(fd: c_int, key: (c_int, c_int)) -> Option<c_int> {
    let p = PENDING_OPTS.lock().unwrap_or_else(|e| e.into_inner());
    let (_, _, v) = p.iter().find(|(f, k, _)| *f == fd && *k == key)?;
    Some(c_int::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// Forget the options kept for descriptor `fd` (a new socket there), or
/// move them to slot `s` of `a` (it became Ixora's).
pub fn take_pending(fd: c_int, to: Option<(&Attached, u32, u32)>) {
    let mut p = PENDING_OPTS.lock().unwrap_or_else(|e| e.into_inner());
    if p.is_empty() {
        return;
    }
    let mine: Vec<_> = p.iter().filter(|(f, _, _)| *f == fd).cloned().collect();
    p.retain(|(f, _, _)| *f != fd);
    drop(p);
    if let Some((a, s, gen)) = to {
        for (_, k, v) in mine {
            a.set_opt(s, gen, k, &v);
        }
    }
}

/// The options kept for one slot generation: `(level, name) -> bytes`.
#[derive(Clone, Default)]
pub struct SlotOpts {
    gen: u32,
    vals: Vec<((c_int, c_int), Vec<u8>)>,
}

/// Longest option value kept (a `struct linger`, a timeval, an int, a
/// congestion control name).
pub const OPT_MAX: usize = 32;

impl Attached {
    /// Keep option `(level, name) = val` for slot `s` (generation `gen`).
    pub fn set_opt(&self, s: u32, gen: u32, key: (c_int, c_int), val: &[u8]) {
        let mut m = self.opts.lock().unwrap_or_else(|e| e.into_inner());
        let o = m.entry(s).or_default();
        if o.gen != gen {
            *o = SlotOpts {
                gen,
                vals: Vec::new(),
            };
        }
        if key.0 == libc::SOL_SOCKET && matches!(key.1, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) {
            self.timeouts.store(true, Ordering::Relaxed);
        }
        let v = val[..val.len().min(OPT_MAX)].to_vec();
        match o.vals.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = v,
            None => o.vals.push((key, v)),
        }
    }

    /// The value kept for option `key` of slot `s` (generation `gen`).
    pub fn opt(&self, s: u32, gen: u32, key: (c_int, c_int)) -> Option<Vec<u8>> {
        let m = self.opts.lock().unwrap_or_else(|e| e.into_inner());
        let o = m.get(&s).filter(|o| o.gen == gen)?;
        o.vals
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    /// Every value kept for slot `s` (generation `gen`), in the order set.
    pub fn opts(&self, s: u32, gen: u32) -> Vec<((c_int, c_int), Vec<u8>)> {
        let m = self.opts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&s)
            .filter(|o| o.gen == gen)
            .map(|o| o.vals.clone())
            .unwrap_or_default()
    }

    /// A connection accepted from listener `from` inherits its options
    /// (Linux copies them from the listening socket).
    pub fn inherit_opts(&self, from: (u32, u32), to: (u32, u32)) {
        let mut m = self.opts.lock().unwrap_or_else(|e| e.into_inner());
        let vals = match m.get(&from.0) {
            Some(o) if o.gen == from.1 && !o.vals.is_empty() => o.vals.clone(),
            _ => {
                m.remove(&to.0);
                return;
            }
        };
        m.insert(to.0, SlotOpts { gen: to.1, vals });
    }

    /// SO_RCVTIMEO (`send` false) or SO_SNDTIMEO of slot `s`, in
    /// milliseconds for a blocking wait: -1 (none) when unset or zero, 0
    /// (fail at once) when negative.
    pub fn timeout_ms(&self, s: u32, gen: u32, send: bool) -> c_int {
        let name = if send {
            libc::SO_SNDTIMEO
        } else {
            libc::SO_RCVTIMEO
        };
        let Some(v) = self.opt(s, gen, (libc::SOL_SOCKET, name)) else {
            return -1;
        };
        if v.len() < std::mem::size_of::<libc::timeval>() {
            return -1;
        }
        // SAFETY: `v` holds at least a timeval's bytes (checked).
        let tv = unsafe { std::ptr::read_unaligned(v.as_ptr() as *const libc::timeval) };
        if tv.tv_sec < 0 {
            return 0; // Linux: a negative timeout fails at once
        }
        let ms = (tv.tv_sec as i64)
            .saturating_mul(1000)
            .saturating_add((tv.tv_usec.max(0) as i64 + 999) / 1000);
        if ms == 0 {
            -1 // zero: no timeout
        } else {
            ms.min(c_int::MAX as i64) as c_int
        }
    }
}

static ATTACHED: OnceLock<Option<Attached>> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);
/// Incremented in every forked child: waiters made before are not ours.
pub static FORK_GEN: AtomicU64 = AtomicU64::new(0);

/// The attachment, if this process is attached (without attaching).
pub fn attached() -> Option<&'static Attached> {
    ATTACHED.get().and_then(|a| a.as_ref())
}

/// Attach on first need; `None` if no service is configured or reachable
/// (then sockets stay the kernel's; a warning is printed once).
pub fn attach() -> Option<&'static Attached> {
    ATTACHED
        .get_or_init(|| match try_attach() {
            Ok(a) => Some(a),
            Err(e) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    let m = format!(
                        "ixora-preload: not using Ixora ({e}); sockets stay the kernel's\n"
                    );
                    real::sys_write(2, m.as_bytes());
                }
                None
            }
        })
        .as_ref()
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// The lowest number our own descriptors take, if the descriptor limit
/// allows: out of the way of the numbers programs put their descriptors
/// at with `dup2` (sshd passes its configuration to its re-executed self
/// on descriptor 5; a shell keeps its script on 255), which one of ours
/// there would refuse (`EBUSY`).
const INTERNAL_MIN: c_int = 900;

/// The soft descriptor limit (`RLIMIT_NOFILE`; 1024 if it cannot be read).
fn soft_nofile() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(c_int::MAX as u64) as c_int
    } else {
        1024
    }
}

/// Move our descriptor `fd` to the lowest free number from
/// [`INTERNAL_MIN`] (below the soft descriptor limit, less a margin),
/// keeping its close-on-exec flag, and mark it ours. Returns its number:
/// the new one, or `fd` itself if it is there already or cannot move.
pub(crate) fn internal(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    let min = INTERNAL_MIN.min(soft_nofile() - 64);
    let mut at = fd;
    if fd < min && min > 2 {
        let cloexec = real::sys3(libc::SYS_fcntl, fd.into(), libc::F_GETFD.into(), 0)
            & libc::FD_CLOEXEC as libc::c_long
            != 0;
        let cmd = if cloexec {
            libc::F_DUPFD_CLOEXEC
        } else {
            libc::F_DUPFD
        };
        let high = real::sys3(libc::SYS_fcntl, fd.into(), cmd.into(), min.into());
        if high >= 0 {
            forget_internal(fd);
            real::sys_close(fd);
            at = high as c_int;
        }
    }
    mark_internal(at);
    at
}

/// [`internal`] for an owned descriptor.
pub(crate) fn internal_owned(fd: OwnedFd) -> OwnedFd {
    // SAFETY: `internal` returns a descriptor we own in place of the one
    // it took (the same one, or a duplicate after closing the original).
    unsafe { OwnedFd::from_raw_fd(internal(fd.into_raw_fd())) }
}

pub(crate) fn mark_internal(fd: c_int) {
    if let Some(e) = entry(fd) {
        e.kind.store(kind::INTERNAL, Ordering::Release);
    }
}

/// `fd`, one of ours, is about to be closed: its number becomes the
/// kernel's again.
pub(crate) fn forget_internal(fd: c_int) {
    if let Some(e) = entry(fd) {
        let _ = e.kind.compare_exchange(
            kind::INTERNAL,
            kind::NONE,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// What `ixora run` put in the environment, as the process started.
pub struct Env {
    /// `IXORA_SOCKET`: the service's control socket (None: not under
    /// `ixora run`; every socket stays the kernel's).
    pub socket: Option<std::ffi::OsString>,
    /// `IXORA_SPIN_US`: how long a blocking call spins first.
    pub spin_us: u64,
    /// The entry of `LD_PRELOAD` that names this library (None: it was
    /// loaded another way), for the programs this one executes.
    pub preload: Option<std::ffi::OsString>,
}

static ENV: std::sync::OnceLock<Env> = std::sync::OnceLock::new();

/// The environment `ixora run` set, read once, when the library is
/// loaded: a program may empty its environment later (nginx keeps only
/// `TZ`, then opens its upstream connections and forks its workers).
pub fn env() -> &'static Env {
    ENV.get_or_init(|| Env {
        socket: std::env::var_os("IXORA_SOCKET"),
        spin_us: std::env::var("IXORA_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50),
        preload: std::env::var_os("LD_PRELOAD").and_then(|v| {
            use std::os::unix::ffi::{OsStrExt, OsStringExt};
            v.as_bytes()
                .split(|&b| b == b':' || b == b' ')
                .find(|e| e.windows(16).any(|w| w == b"libixora_preload"))
                .map(|e| std::ffi::OsString::from_vec(e.to_vec()))
        }),
    })
}

extern "C" fn at_load() {
    crate::secure::restore();
    let _ = env();
    let _ = crate::real::syscall_fn();
    crate::exec::adopt();
    crate::exec::adopt_spawned();
}

/// Read the environment when the dynamic loader runs the library's
/// constructors, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// Set in a forked child that has no control connection of its own (the
/// service could not be reached before the fork): its control requests
/// fail with EIO rather than cross the parent's on a shared connection.
static CTL_LOST: AtomicBool = AtomicBool::new(false);

fn try_attach() -> Result<Attached, String> {
    let path = env().socket.as_ref().ok_or("IXORA_SOCKET is not set")?;
    let path = std::path::PathBuf::from(path);
    let sock = os::connect_once(&path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            // SAFETY: getuid(2) cannot fail and touches no memory.
            let uid = unsafe { libc::getuid() };
            format!(
                ": the control socket does not admit user {uid}; start the service with \
                 --socket-mode 0666, or 0660 with --socket-group, to admit other users"
            )
        } else {
            String::new()
        };
        format!("service {}: {e}{hint}", path.display())
    })?;
    let sock = internal_owned(sock);
    let g = ixora_channel::attach::attach(sock.as_fd(), std::process::id(), deadline())
        .map_err(|e| e.to_string())?;
    Ok(attached_on(sock, g))
}

/// The attachment of this process over control connection `sock`, with
/// what the service granted on it (`ATTACH`, or `REMAP` after an exec).
fn attached_on(sock: OwnedFd, g: ixora_channel::attach::Granted) -> Attached {
    // SAFETY: the mappings are leaked below: they stay mapped, at the
    // layout's lengths, for the life of the process.
    let r = unsafe { Regions::new(g.down.as_ptr(), g.up.as_ptr(), g.layout) };
    std::mem::forget(g.down);
    std::mem::forget(g.up);
    let h = r.down_header();
    let bell_fd = internal(g.bell.into_raw_fd());
    // The service is our peer on the control connection; a descriptor of
    // its process lets a sleeping thread learn that it died.
    let svc = os::peer_pid(sock.as_fd())
        .and_then(|pid| os::pidfd_open(pid).ok())
        .map_or(-1, |f| internal(f.into_raw_fd()));
    let spin = env().spin_us;
    let first_waiter = g
        .waiter
        .map(|w| (internal(w.into_raw_fd()), FORK_GEN.load(Ordering::Relaxed)));
    // SAFETY: registers plain function pointers with no preconditions.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
        libc::atexit(kick_at_exit);
    }
    Attached {
        ctl: Mutex::new(sock),
        r,
        bell: bell_fd,
        svc,
        app_id: h.app_id.load(Ordering::Relaxed),
        ip: h.ip.load(Ordering::Relaxed),
        prefix: h.prefix.load(Ordering::Relaxed),
        gateway: h.gateway.load(Ordering::Relaxed),
        pool: Mutex::new(Vec::new()),
        spin: Duration::from_micros(spin),
        opts: Mutex::new(std::collections::HashMap::new()),
        timeouts: AtomicBool::new(false),
        first_waiter: Mutex::new(first_waiter),
    }
}

/// In a program just `exec`ed by a process of an application, with
/// Ixora sockets open (see `exec`): take up the application again on the
/// control connection `sock` the old image left open, as holders-table
/// row `row` (the process's, which the old image held its descriptors
/// in). The regions are mapped again (`REMAP`).
pub fn attach_after_exec(sock: OwnedFd, row: u32) -> Result<&'static Attached, String> {
    let sock = internal_owned(sock);
    let g = ixora_channel::attach::remap(sock.as_fd(), deadline()).map_err(|e| e.to_string())?;
    let a = attached_on(sock, g);
    ROW.store(row, Ordering::SeqCst);
    ATTACHED
        .set(Some(a))
        .map_err(|_| "already attached".to_string())?;
    attached().ok_or_else(|| "not attached".to_string())
}

/// This process's row of the holders table ([`layout::NO_ROW`]: none).
pub fn row() -> u32 {
    ROW.load(Ordering::Relaxed)
}

/// Whether this process has a control connection of its own (a forked
/// child whose parent could not reach the service has none).
pub fn has_ctl() -> bool {
    !CTL_LOST.load(Ordering::Relaxed)
}

/// The Ixora sockets in this process's descriptor table: descriptor,
/// slot, generation and [`fl`] bits of each.
pub fn ixora_fds() -> Vec<(c_int, u32, u32, u32)> {
    let mut v = Vec::new();
    if let Some(t) = TABLE.get() {
        for (fd, e) in t.iter().enumerate() {
            if e.kind.load(Ordering::Acquire) == kind::IXORA {
                v.push((
                    fd as c_int,
                    e.slot.load(Ordering::Relaxed),
                    e.gen.load(Ordering::Relaxed),
                    e.flags.load(Ordering::Relaxed),
                ));
            }
        }
    }
    v
}

/// This process's descriptors that name socket `sk` (its duplicates).
pub fn descriptors(sk: Sock) -> Vec<c_int> {
    if sk.a.r.up_slot(sk.s).refs.load(Ordering::Acquire) <= 1 {
        return vec![sk.fd];
    }
    let gen = sk.e.gen.load(Ordering::Relaxed);
    ixora_fds()
        .into_iter()
        .filter(|&(_, s, g, _)| s == sk.s && g == gen)
        .map(|(fd, ..)| fd)
        .collect()
}

/// This process's row in the holders table ([`layout::NO_ROW`]: none).
static ROW: AtomicU32 = AtomicU32::new(0);

/// One more descriptor of this process refers to socket `s`: the total
/// first, then our row (a process killed in between leaks a reference
/// rather than closing a socket another process still holds).
pub fn hold(a: &Attached, s: u32) {
    a.r.up_slot(s).refs.fetch_add(1, Ordering::AcqRel);
    let row = ROW.load(Ordering::Relaxed);
    if row < layout::MAX_PROCS {
        a.r.held(row, s).fetch_add(1, Ordering::AcqRel);
    }
}

/// A spare TCP socket of the service's (`UpHeader::spares`), taken: its
/// slot and generation, or None when there is none (or the service is
/// known gone).
pub fn take_spare(a: &Attached) -> Option<(u32, u32)> {
    if GONE.is_completed() || SVC_EXITED.load(Ordering::Relaxed) {
        return None;
    }
    for e in &a.r.up_header().spares {
        if e.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let v = e.swap(0, Ordering::AcqRel);
        match layout::spare_of(v) {
            Some(s) if s < a.r.layout().slots => {
                return Some((s, a.r.down_slot(s).gen.load(Ordering::Acquire)));
            }
            _ => {}
        }
    }
    None
}

/// One descriptor fewer refers to `s`: our row first, then the total.
/// Returns the total before.
fn unhold(a: &Attached, s: u32) -> u32 {
    let row = ROW.load(Ordering::Relaxed);
    if row < layout::MAX_PROCS {
        let h = a.r.held(row, s);
        let _ = h.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
    }
    a.r.up_slot(s).refs.fetch_sub(1, Ordering::AcqRel)
}

/// A control connection the parent opened for a child it is about to fork,
/// the holders-table row the service reserved on it, and the sockets whose
/// references were raised for the child (one entry per descriptor).
struct Pending {
    fd: c_int,
    row: u32,
    counted: Vec<u32>,
}

thread_local! {
    /// The forking thread's pending child connection, between the prepare
    /// handler and the parent's or child's handler (the child's only thread
    /// is a copy of the forking one, so it finds it here too).
    static PENDING: std::cell::RefCell<Option<Pending>> = const { std::cell::RefCell::new(None) };
}

/// Pending child connections of every thread: a child closes those of
/// other threads' forks, which it inherited by accident, so that each
/// connection ends with the one process it belongs to.
static PENDING_FDS: [std::sync::atomic::AtomicI32; 16] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 16];

/// The Ixora sockets in this process's descriptor table, one entry per
/// descriptor.
fn ixora_slots() -> Vec<u32> {
    ixora_fds().into_iter().map(|(_, s, _, _)| s).collect()
}

/// A new control connection on which the service reserves a row for a
/// child (JOIN); `None` if the service cannot be reached. A process that
/// the control socket's file no longer admits (it attached as root, then
/// changed its user: `crate::creds`) has the service make the connection
/// (`SPLIT`, on its own): else its children would have none, and their
/// slow-path calls would fail.
fn join(a: &Attached) -> Option<(OwnedFd, u32)> {
    let path = env().socket.as_ref()?;
    let sock = match os::connect_once(std::path::Path::new(path)) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let (rep, mut fds) = request_fds(a, Msg::new(op::SPLIT, 0, 0, 0), &[]);
            if rep.a < 0 || fds.is_empty() {
                return None;
            }
            fds.swap_remove(0)
        }
        Err(_) => return None,
    };
    let sock = internal_owned(sock);
    let key = a.r.down_header().join_key.load(Ordering::Relaxed);
    let msg = Msg::new(op::JOIN, 0, a.app_id as i64, key);
    os::send_msg(sock.as_fd(), &msg.encode(), &[], deadline()).ok()?;
    let mut buf = [0u8; 64];
    let (n, _) = os::recv_msg(sock.as_fd(), &mut buf, deadline()).ok()?;
    let rep = Msg::decode(&buf[..n])?;
    (rep.a >= 0).then_some((sock, rep.slot))
}

/// For a child that `posix_spawn` is about to start: a control connection
/// on which the service reserves the child's row (JOIN), and one more
/// reference to each socket of `slots`, counted in the total and in that
/// row, which the child trades for its real descriptors
/// ([`take_offer`]). If the child never takes them up (the spawn fails,
/// the child is killed, or its image is not under the shim), the
/// connection ends and the service subtracts the row, as for a forked
/// child. Listed as pending until [`offer_done`]: a child that another
/// thread forks meanwhile closes its copy.
pub fn offer(a: &Attached, slots: &[u32]) -> Option<(c_int, u32)> {
    let (sock, row) = join(a)?;
    // Numbered high (`internal`), out of the way of the descriptors a
    // spawn's file actions set up (a `dup2` onto it would cut the child
    // off).
    let fd = sock.into_raw_fd();
    hold_for_row(a, row, slots);
    list_pending(fd);
    Some((fd, row))
}

/// The spawn is over: our copy of the child's connection `fd` goes (the
/// child has its own, if it was started).
pub fn offer_done(fd: c_int) {
    unlist_pending(fd);
    forget_internal(fd);
    real::sys_close(fd);
}

/// In a child that `posix_spawn` started: install and hold each socket of
/// `found` (descriptor, slot, generation, flags), then give back the
/// reference the parent offered for each slot of `offered` (the last
/// reference closes its socket, as on Linux, if neither process keeps
/// it). Then say our pid.
pub fn take_offer(a: &Attached, found: &[(c_int, u32, u32, u32)], offered: &[u32]) {
    for &(fd, s, gen, flags) in found {
        install(fd, s, gen, flags);
        hold(a, s);
    }
    for &s in offered {
        drop_ref(a, s, false);
    }
    request(a, Msg::new(op::HELLO, 0, std::process::id() as i64, 0), &[]);
}

/// Before `fork`, in the parent: the child's control connection is opened
/// *now*, and the service reserves the child's row of the holders table on
/// it; every Ixora socket gets one more reference, counted in the total
/// and in that row, for the child's copy of its descriptor. Whatever
/// happens next — the fork fails, or the child is killed before it runs a
/// single instruction — the connection ends with the last process holding
/// it and the service subtracts the row: no reference is ever leaked, and
/// a parent closing its copy at once cannot close the socket under the
/// child.
extern "C" fn before_fork() {
    let Some(a) = attached() else { return };
    let counted = ixora_slots();
    let joined = join(a);
    let row = joined.as_ref().map_or(layout::NO_ROW, |j| j.1);
    hold_for_row(a, row, &counted);
    let Some((sock, row)) = joined else {
        hold_locks_over_fork(a);
        return;
    };
    let fd = sock.into_raw_fd();
    list_pending(fd);
    PENDING.with(|p| *p.borrow_mut() = Some(Pending { fd, row, counted }));
    hold_locks_over_fork(a);
}

/// A fork made past the C library's `fork` (a raw `clone` that shares
/// neither memory nor thread group, or `SYS_fork`, through `syscall(3)`),
/// whose `pthread_atfork` handlers never run: the shim's run around it
/// (`fork`: the raw call; its result is returned).
pub fn around_raw_fork(fork: impl FnOnce() -> libc::c_long) -> libc::c_long {
    before_fork();
    let r = fork();
    if r == 0 {
        after_fork_child();
    } else {
        after_fork_parent();
    }
    r
}

/// The shim's own locks, held by the forking thread over `fork` so that
/// the child never inherits one another thread held (it would wait for
/// ever). Taken last in the prepare handler, dropped first after it.
struct ForkLocks {
    _pool: std::sync::MutexGuard<'static, Vec<c_int>>,
    _opts: std::sync::MutexGuard<'static, std::collections::HashMap<u32, SlotOpts>>,
    _pending: std::sync::MutexGuard<'static, Vec<FdOpt>>,
}

thread_local! {
    static FORK_LOCKS: std::cell::RefCell<Option<ForkLocks>> = const { std::cell::RefCell::new(None) };
}

/// (No code path takes two of these locks at once: any order is safe.)
fn hold_locks_over_fork(a: &'static Attached) {
    let locks = ForkLocks {
        _pool: a.pool.lock().unwrap_or_else(|e| e.into_inner()),
        _opts: a.opts.lock().unwrap_or_else(|e| e.into_inner()),
        _pending: PENDING_OPTS.lock().unwrap_or_else(|e| e.into_inner()),
    };
    FORK_LOCKS.with(|l| *l.borrow_mut() = Some(locks));
}

fn release_fork_locks() {
    FORK_LOCKS.with(|l| l.borrow_mut().take());
}

/// One more reference to each socket of `slots` for the process in row
/// `row` (a child about to be forked or spawned): the total first, then
/// the row (as [`hold`]).
fn hold_for_row(a: &Attached, row: u32, slots: &[u32]) {
    for &s in slots {
        a.r.up_slot(s).refs.fetch_add(1, Ordering::SeqCst);
        if row < layout::MAX_PROCS {
            a.r.held(row, s).fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// List the pending connection `fd` in the shared list (full: unlisted).
fn list_pending(fd: c_int) {
    for p in &PENDING_FDS {
        if p.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
    }
}

/// Forget the pending connection `fd` in the shared list.
fn unlist_pending(fd: c_int) {
    for p in &PENDING_FDS {
        if p.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
    }
}

/// After `fork` in the parent (or after a failed fork): the child's
/// connection is the child's; the parent's copy goes (a failed fork's
/// connection then ends, and the service gives back what it counted).
extern "C" fn after_fork_parent() {
    release_fork_locks();
    if let Some(p) = PENDING.with(|p| p.borrow_mut().take()) {
        unlist_pending(p.fd);
        forget_internal(p.fd);
        real::sys_close(p.fd);
    }
}

/// In a forked child: adopt the connection and row the parent reserved,
/// make the counts match the descriptors we really have (another thread
/// of the parent may have opened or closed one between the prepare
/// handler and the fork), and tell the service our pid.
extern "C" fn after_fork_child() {
    release_fork_locks();
    let Some(a) = attached() else { return };
    FORK_GEN.fetch_add(1, Ordering::SeqCst);
    let mine = PENDING.with(|p| p.borrow_mut().take());
    // Other threads' pending connections are not ours.
    for p in &PENDING_FDS {
        let fd = p.swap(-1, Ordering::AcqRel);
        if fd >= 0 && mine.as_ref().is_none_or(|m| m.fd != fd) {
            forget_internal(fd);
            real::sys_close(fd);
        }
    }
    let Some(Pending { fd, row, counted }) = mine else {
        // The service could not be reached before the fork: this process
        // goes untracked (its references stay until their sockets' other
        // holders close them or the application ends) and has no control
        // connection: its slow-path calls fail with EIO.
        ROW.store(layout::NO_ROW, Ordering::SeqCst);
        CTL_LOST.store(true, Ordering::SeqCst);
        return;
    };
    ROW.store(row, Ordering::SeqCst);
    let mut have = ixora_slots();
    let mut counted = counted;
    have.sort_unstable();
    counted.sort_unstable();
    let (mut i, mut j) = (0, 0);
    while i < have.len() || j < counted.len() {
        match (have.get(i), counted.get(j)) {
            (Some(h), Some(c)) if h == c => {
                i += 1;
                j += 1;
            }
            (Some(&h), c) if c.is_none_or(|&c| h < c) => {
                hold(a, h);
                i += 1;
            }
            (_, Some(&c)) => {
                unhold(a, c);
                j += 1;
            }
            _ => unreachable!("one of the lists has an element left"),
        }
    }
    // SAFETY: `fd` is the pending connection's descriptor, which this
    // process owns (the parent's copy is the parent's to close).
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let hello = Msg::new(op::HELLO, 0, std::process::id() as i64, 0);
    if os::send_msg(sock.as_fd(), &hello.encode(), &[], deadline()).is_ok() {
        let mut buf = [0u8; 64];
        let _ = os::recv_msg(sock.as_fd(), &mut buf, deadline());
    }
    // The lock may have been held by a thread of the parent that does not
    // exist here: replace it without waiting.
    let m = match a.ctl.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(_) => None,
    };
    match m {
        Some(mut g) => {
            let old = std::mem::replace(&mut *g, sock).into_raw_fd();
            // Our copy of the parent's connection: closed, so that it ends
            // with the parent (the service then subtracts the parent's
            // row even while we live on).
            forget_internal(old);
            real::sys_close(old);
        }
        None => {
            // Cannot happen in practice (the child is single-threaded);
            // keep the parent's connection rather than block.
            std::mem::forget(sock);
        }
    }
}

/// One control request; the reply.
pub fn request(a: &Attached, m: Msg, fds: &[c_int]) -> Msg {
    request_fds(a, m, fds).0
}

/// One control request; the reply and the descriptors it carried.
pub fn request_fds(a: &Attached, m: Msg, fds: &[c_int]) -> (Msg, Vec<OwnedFd>) {
    let (m, fds, _) = exchange(a, m, fds, &mut [0u8; 64]);
    (m, fds)
}

/// One control request whose reply is followed by bytes (`op::INFO`):
/// the reply and those bytes (at most 256).
pub fn request_tail(a: &Attached, m: Msg) -> (Msg, Vec<u8>) {
    let mut buf = [0u8; Msg::LEN + 256];
    let (m, _, tail) = exchange(a, m, &[], &mut buf);
    (m, tail.to_vec())
}

/// Send `m` with `fds`; receive the reply into `buf`: the reply, its
/// descriptors and the bytes after it.
fn exchange<'b>(
    a: &Attached,
    m: Msg,
    fds: &[c_int],
    buf: &'b mut [u8],
) -> (Msg, Vec<OwnedFd>, &'b [u8]) {
    // The request could not be made: the network is down if the service
    // is gone; else (no control connection of our own) an I/O error.
    let eio = || {
        let e = if gone(a) { libc::ENETDOWN } else { libc::EIO };
        (Msg::reply(-(e as i64)), Vec::new(), &[][..])
    };
    if CTL_LOST.load(Ordering::Relaxed) {
        return eio();
    }
    let g = a.ctl.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the descriptors are live for the call (owned by the caller).
    let bfds: Vec<_> = fds
        .iter()
        .map(|&f| unsafe { std::os::fd::BorrowedFd::borrow_raw(f) })
        .collect();
    if os::send_msg(g.as_fd(), &m.encode(), &bfds, deadline()).is_err() {
        return eio();
    }
    match os::recv_msg(g.as_fd(), buf, deadline()) {
        Ok((n, fds)) => match Msg::decode(&buf[..n]) {
            Some(m) => (m, fds, &buf[Msg::LEN.min(n)..n]),
            None => eio(),
        },
        Err(_) => eio(),
    }
}

/// Count a call: resolved in user space or not.
#[inline]
pub fn count(a: &Attached, call: usize, user: bool) {
    // (A global load first: a thread's flag is looked at only while some
    // thread runs [`uncounted`].)
    if UNCOUNTED.load(Ordering::Relaxed) != 0 && call < SOCKET_CALLS && QUIET.with(|q| q.get()) {
        return;
    }
    a.r.up_header().counters[call][if user { 0 } else { 1 }].fetch_add(1, Ordering::Relaxed);
    // SIGURG is raised where no lock of the shim is held: at a call's end
    // (it comes after the call), or in a wait (it cuts the wait short).
    // (Not at a `scan`, counted with an epoll set's lock held: a handler
    // that used the set would wait for it for ever.)
    const IN_WAIT: [usize; 3] = [
        layout::call("wakeup"),
        layout::call("wait"),
        layout::call("look"),
    ];
    if call < SOCKET_CALLS {
        note_urgent(a, false);
    } else if IN_WAIT.contains(&call) {
        note_urgent(a, true);
    }
}

/// The app's urgent count ([`layout::DownHeader::urgent`]) this process
/// last looked at.
static URGENT_SEEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread, waiting, raised `SIGURG` for its own process (or
    /// thread, or process group): its handler has run, as a signal that
    /// cut the wait short would have.
    static SIGNALLED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread raised `SIGURG` for itself since it last asked
/// ([`send_sigurg`]): a sleep it woke from then ends as one a signal
/// interrupted (`EINTR`, or a restart), as Linux's would.
fn signalled_here() -> bool {
    SIGNALLED_HERE.with(|s| s.replace(false))
}

/// At the end of each socket call: if a connection of the app has learned
/// of new urgent data since this process last looked, `SIGURG` goes to
/// the owner of each such socket it holds ([`raise_sigurg`]). Linux sends
/// it from the stack as the urgent pointer arrives; here it goes at the
/// program's next socket call, or as a sleeping one wakes (the service
/// wakes the socket's sleepers).
#[inline]
fn note_urgent(a: &Attached, in_wait: bool) {
    let now = a.r.down_header().urgent.load(Ordering::Acquire);
    if now != URGENT_SEEN.load(Ordering::Relaxed) {
        raise_sigurg(a, now, in_wait);
    }
}

/// [`note_urgent`]'s rare part: each Ixora socket of this process whose
/// urgent mark no process of the app has raised `SIGURG` for yet (the
/// first to claim it raises it: one signal per mark, as Linux sends one)
/// has its owner signalled — the owner `F_SETOWN` gave the socket, which
/// its kernel placeholder keeps (none set: no signal, as Linux).
#[cold]
fn raise_sigurg(a: &Attached, now: u64, in_wait: bool) {
    if URGENT_SEEN.swap(now, Ordering::AcqRel) == now {
        return;
    }
    let Some(t) = TABLE.get() else { return };
    // The descriptors given an owner, or (more than the list holds) all.
    let all = OWNED_FULL.load(Ordering::Acquire) != 0;
    let listed = OWNED.iter().map(|f| f.load(Ordering::Acquire));
    let fds = listed
        .filter(|_| !all)
        .filter_map(|f| usize::try_from(f).ok())
        .chain((0..t.len()).filter(|_| all));
    for fd in fds {
        let Some(e) = t.get(fd) else { continue };
        if e.kind.load(Ordering::Acquire) != kind::IXORA {
            continue;
        }
        let s = e.slot.load(Ordering::Relaxed);
        if s >= a.r.layout().slots {
            continue;
        }
        let d = a.r.down_slot(s);
        if d.gen.load(Ordering::Acquire) != e.gen.load(Ordering::Relaxed)
            || d.flags.load(Ordering::Acquire) & flag::URGENT == 0
        {
            continue;
        }
        let Some((mark, _)) = layout::unpack_urgent(a.r.urgent(s).load(Ordering::Acquire)) else {
            continue;
        };
        let told = &a.r.up_urgent(s).signalled;
        let was = told.load(Ordering::Acquire);
        if was == mark + 1
            || told
                .compare_exchange(was, mark + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        if send_sigurg(fd as c_int) && in_wait {
            SIGNALLED_HERE.with(|s| s.set(true));
        }
    }
}

/// Descriptors of Ixora sockets this process gave an owner (-1: none),
/// which [`raise_sigurg`] looks at rather than the whole table (a peer
/// may move its urgent pointer with every segment).
static OWNED: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];
/// More were given an owner than [`OWNED`] holds: look at every one.
static OWNED_FULL: AtomicU32 = AtomicU32::new(0);

/// Ixora socket `sk` (descriptor `fd`) was given an owner for `SIGURG`
/// (`F_SETOWN`, `FIOSETOWN` and the like), or none (`owner` false).
pub fn note_owner(sk: Sock, fd: c_int, owner: bool) {
    if !owner {
        return;
    }
    sk.a.r.up_urgent(sk.s).owned.store(1, Ordering::Release);
    if OWNED.iter().any(|f| f.load(Ordering::Acquire) == fd) {
        return;
    }
    // A free entry, or one whose descriptor is no longer an Ixora socket.
    for f in &OWNED {
        let was = f.load(Ordering::Acquire);
        if (was < 0 || kind_of(was) != kind::IXORA)
            && f.compare_exchange(was, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
    }
    OWNED_FULL.store(1, Ordering::Release);
}

/// `SIGURG` to the owner of `fd` (`F_GETOWN_EX` of its kernel side): a
/// thread, a process or a process group. Owned by this process (or this
/// thread), it goes to this thread, as the process's would go to any of
/// its threads. True if a handler of it has run here (not ignored, not
/// blocked by this thread): the wait it ran in ends as Linux's would.
fn send_sigurg(fd: c_int) -> bool {
    // <linux/fcntl.h> (not in the libc crate).
    #[repr(C)]
    struct FOwnerEx {
        kind: c_int,
        pid: libc::pid_t,
    }
    const F_GETOWN_EX: c_int = 16;
    const F_OWNER_TID: c_int = 0;
    const F_OWNER_PGRP: c_int = 2;
    let mut own = FOwnerEx { kind: 0, pid: 0 };
    // SAFETY: F_GETOWN_EX writes the f_owner_ex it is given.
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, F_GETOWN_EX, &mut own) };
    if r != 0 || own.pid <= 0 {
        return false;
    }
    // SAFETY: getpid and gettid take nothing and cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    // (Asked before it is sent: a one-shot handler is gone after.) Not
    // handled here (blocked by this thread), a process's signal goes to
    // the process, for a thread that takes it.
    let here = match own.kind {
        F_OWNER_TID => own.pid == tid,
        F_OWNER_PGRP => false,
        _ => own.pid == pid,
    } && sigurg_handled();
    // SAFETY: kill, tkill and tgkill take plain integers.
    unsafe {
        match own.kind {
            _ if here => {
                libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGURG);
            }
            F_OWNER_TID => {
                libc::syscall(libc::SYS_tkill, own.pid, libc::SIGURG);
            }
            F_OWNER_PGRP => {
                libc::kill(-own.pid, libc::SIGURG);
            }
            _ => {
                libc::kill(own.pid, libc::SIGURG);
            }
        }
    }
    here
}

/// Whether SIGURG has a handler (not the default, which ignores it, nor
/// SIG_IGN) that this thread does not block.
fn sigurg_handled() -> bool {
    let handler = action_of(libc::SIGURG)
        .is_some_and(|a| a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN);
    // SAFETY: pthread_sigmask with a null new set only reads the mask into
    // `mask`, a zeroed plain-old-data set.
    handler
        && unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) == 0
                && libc::sigismember(&mask, libc::SIGURG) == 0
        }
}

/// The action of signal `sig` now (None: sigaction refused).
fn action_of(sig: c_int) -> Option<libc::sigaction> {
    // SAFETY: sigaction(2) with a null new action only reads the current
    // one into `old`, a zeroed plain-old-data struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(sig, std::ptr::null(), &mut old) == 0).then_some(old)
    }
}

/// The socket calls of [`layout::CALLS`]: how a call waited follows them
/// ([`layout::NOT_CALLS`]), counted also within [`uncounted`].
const SOCKET_CALLS: usize = layout::CALLS.len() - layout::NOT_CALLS.len();
const _: () = assert!(SOCKET_CALLS == layout::call("wait"));

/// Threads in [`uncounted`] now.
static UNCOUNTED: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread is in [`uncounted`].
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, the socket calls it makes not counted: part of a call
/// counted as itself (a `splice` receives or sends through the socket's
/// own paths, which would count a read or a write as well). How it waits
/// (a sleep, a wake-up) is counted.
pub fn uncounted<R>(f: impl FnOnce() -> R) -> R {
    UNCOUNTED.fetch_add(1, Ordering::Relaxed);
    QUIET.with(|q| q.set(true));
    let r = f();
    QUIET.with(|q| q.set(false));
    UNCOUNTED.fetch_sub(1, Ordering::Relaxed);
    r
}

/// Count a call on a descriptor that is not Ixora's.
#[inline]
pub fn passthrough() {
    if let Some(a) = attached() {
        a.r.up_header().passthrough.fetch_add(1, Ordering::Relaxed);
    }
}

/// A datagram [`Sock::recv_dgram`] took.
pub struct DgramIn {
    /// The bytes copied.
    pub n: usize,
    /// Its full length (more than `n`: the rest did not fit and is
    /// dropped, as `MSG_TRUNC` tells).
    pub len: usize,
    /// Its source ([`layout::pack`]ed).
    pub src: u64,
    /// When the stack received it (`CLOCK_REALTIME` ns,
    /// [`layout::dgram_stamp`]).
    pub stamp: u64,
    /// Its IPv4 header's TOS ([`layout::dgram_rx_ip`]).
    pub tos: u8,
    /// Its IPv4 header's TTL.
    pub ttl: u8,
}

/// A doorbell ring owed to a sleeping service.
static KICK: AtomicBool = AtomicBool::new(false);

/// Tell the service socket `s` changed. If the service sleeps, the ring of
/// its doorbell is deferred to [`kick`]: the next time the application
/// polls, blocks or exits — one system call per turn of its event loop,
/// not one per write (doorbells batched as IX batches its calls).
pub fn signal(a: &Attached, s: u32) -> bool {
    if a.r.signal(s) && !KICK.load(Ordering::Relaxed) {
        KICK_SINCE.store(now_ns(), Ordering::Relaxed);
        KICK_BY.store(thread_tag(), Ordering::Relaxed);
        KICK.store(true, Ordering::SeqCst);
    }
    false
}

/// The thread whose change made the ring now owed ([`thread_tag`]).
static KICK_BY: AtomicU64 = AtomicU64::new(0);

/// How long a ring owed by another thread may wait for that thread
/// before a wait of this one makes it ([`kick_owed`]).
const KICK_OTHERS_AFTER: Duration = Duration::from_micros(200);

thread_local! {
    static TAG: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A number of this thread's own, never 0 (no system call).
fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    TAG.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// When the ring now owed became owed (ns of [`now_ns`]).
static KICK_SINCE: AtomicU64 = AtomicU64::new(0);

/// How long a ring may be held back while the program has events to
/// handle on the service's own CPU (see [`kick_unless_busy`]).
const KICK_DEFER: Duration = Duration::from_micros(50);

/// Monotonic nanoseconds since the first call (vDSO clock: no system call).
fn now_ns() -> u64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Whether the service said it is going to sleep (a program's change must
/// then ring its doorbell, and a yield to it would only spin).
fn service_sleeping(a: &Attached) -> bool {
    a.r.down_header().svc_sleeping.load(Ordering::SeqCst) != 0
}

/// Whether this thread runs on the CPU the service last ran on (read
/// through rseq: no system call).
fn on_service_cpu(a: &Attached) -> bool {
    let svc = a.r.down_header().svc_cpu.load(Ordering::Relaxed);
    svc != 0 && u32::from(os::cpu_tag()) == svc
}

/// [`kick`] for a call that has events to return. On the service's own
/// CPU a ring cannot make the service run beside the program, only instead
/// of it: the ring is held back while the program still has work, until it
/// blocks (or polls with nothing ready) or for at most [`KICK_DEFER`], so
/// the service finds one turn's writes together and the program makes no
/// system call. With the service on another CPU it rings at once.
pub fn kick_unless_busy(a: &Attached) -> bool {
    if !KICK.load(Ordering::Relaxed) {
        return false;
    }
    if on_service_cpu(a)
        && now_ns().saturating_sub(KICK_SINCE.load(Ordering::Relaxed))
            < KICK_DEFER.as_nanos() as u64
    {
        return false;
    }
    kick(a)
}

/// [`kick`] before a wait the shim does not otherwise see (a condition
/// variable, a semaphore, a sleep, a futex: see `shim::waits`), if this
/// thread's change made the ring owed — it may not poll again for long,
/// and no other may either — or if it has been owed for over
/// [`KICK_OTHERS_AFTER`]. (Another thread's ring is its own to make: an
/// event loop's, at its next poll, held back while it has events on the
/// service's CPU; memcached's LRU maintainer sleeps 3,200 times a second
/// beside its worker.) One relaxed load when no ring is owed.
#[inline]
pub fn kick_owed() {
    if KICK.load(Ordering::Relaxed) {
        kick_owed_slow();
    }
}

#[cold]
fn kick_owed_slow() {
    if owed_here() {
        if let Some(a) = attached() {
            kick(a);
        }
    }
}

/// Whether the ring now owed is this thread's to make before it waits:
/// its own change made it owed, or it has been owed for over
/// [`KICK_OTHERS_AFTER`] (see [`kick_owed`]).
fn owed_here() -> bool {
    KICK_BY.load(Ordering::Relaxed) == thread_tag()
        || now_ns().saturating_sub(KICK_SINCE.load(Ordering::Relaxed))
            > KICK_OTHERS_AFTER.as_nanos() as u64
}

/// [`kick_owed`] before a call that reads kernel descriptor `fd` and may
/// wait for it there (`dontwait`: the call's own `MSG_DONTWAIT`, which
/// cannot). A worker thread that writes its reply to an Ixora socket and
/// then blocks reading a pipe or a Unix socket for its next job makes no
/// poll or wait the shim sees: its reply waited for the service's nap (1
/// to 16 ms). The ring is made only if the read can wait: `fd` is not
/// `O_NONBLOCK` (an event loop's descriptors are: its ring stays its own
/// to make at its next poll), nor a regular file or a block device, which
/// never wait for another program. The two system calls that tell are
/// made only when a ring is owed and this thread is to make it; one
/// relaxed load otherwise.
#[inline]
pub fn kick_before_read(fd: c_int, dontwait: bool) {
    if KICK.load(Ordering::Relaxed) && !dontwait {
        kick_before_read_slow(fd);
    }
}

#[cold]
fn kick_before_read_slow(fd: c_int) {
    if !owed_here() {
        return;
    }
    if SANDBOXED.load(Ordering::Relaxed) {
        // A seccomp filter may kill the process for the `fcntl` or
        // `fstat` below (sshd's sandboxed child reads its monitor's
        // socket after each write to the client); the ring is a `write`,
        // which such filters allow: made without asking.
        if let Some(a) = attached() {
            kick(a);
        }
        return;
    }
    let fl = real::sys3(libc::SYS_fcntl, fd.into(), libc::F_GETFL.into(), 0);
    if fl < 0 || fl as c_int & libc::O_NONBLOCK != 0 {
        return;
    }
    // SAFETY: `stat` is plain old data, for which zeroes are a value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) writes one `stat` into the live local.
    let r = unsafe {
        real::syscall_fn()(
            libc::SYS_fstat,
            fd,
            &mut st as *mut libc::stat as *mut libc::c_void,
        )
    };
    let fmt = st.st_mode & libc::S_IFMT;
    if r == 0 && (fmt == libc::S_IFREG || fmt == libc::S_IFBLK) {
        return;
    }
    if let Some(a) = attached() {
        kick(a);
    }
}

/// Ring the service's doorbell if a change is waiting for it; true if
/// that took a system call.
pub fn kick(a: &Attached) -> bool {
    if KICK.load(Ordering::Relaxed) && KICK.swap(false, Ordering::SeqCst) {
        real::sys_ring(a.bell);
        count(a, layout::call("doorbell"), false);
        return true;
    }
    false
}

extern "C" fn kick_at_exit() {
    if let Some(a) = attached() {
        kick(a);
    }
}

/// A waiter: an index the service knows and the wait end of a wake-up
/// line the service rings ([`os::wake_line`]: an epoll descriptor,
/// readable after a ring until [`os::take_edges`]).
pub struct Waiter {
    /// Index.
    pub idx: u32,
    /// The wait end.
    pub efd: c_int,
    /// An eventfd of ours watched by the wait end ([`NUDGE_TOKEN`]): the
    /// program's other threads ring it to make this one look again (an
    /// epoll set it sleeps on changed, [`Sleeper`]; a socket it waits on
    /// was shut down, [`wake_blocked_on`]); -1 if the kernel refused it.
    nudge: c_int,
    fork_gen: u64,
    /// Epoll sets of the program nested in the wait end (see [`Nest`]).
    nested: Vec<Nest>,
}

/// A program's epoll set (its kernel descriptors) watched, edge-triggered,
/// inside a thread's wait end, so that one `epoll_pwait` on the wait end
/// sleeps on the service's ring and the set's kernel descriptors together
/// (where a `ppoll` of both and a second call to take the ring's edge make
/// two system calls).
///
/// The nested watch is edge-triggered: it reports that an event *came*,
/// not that one is *pending*. So the one-call wait is used only while the
/// set is `clean`: nothing of it pending that has no edge still to come.
/// A set stops being clean when its edge is taken and it is found ready
/// (the program harvests it, and level-triggered events it leaves unread
/// stay pending with no new edge), or when another wait took its edge; the
/// next wait on it is then a level-triggered `ppoll`, and a set found not
/// ready there is clean again. (A harvest alone leaves a clean set clean:
/// it takes no edge, so the edge of whatever it leaves is still queued.)
struct Nest {
    /// The set's descriptor.
    fd: c_int,
    /// [`Epoll::id`]: the number may be closed and reused for another set.
    id: u64,
    /// Registered (the kernel may refuse: nesting too deep, a loop).
    ok: bool,
    clean: bool,
}

/// Sets nested per waiter (a thread rarely waits on more); the oldest is
/// dropped for a new one.
const NESTED_MAX: usize = 4;

/// The event data of a set nested in a wait end (the service's ring has 0).
const NEST_TOKEN: u64 = 1 << 63;

/// The event data of the service's process descriptor in a wait end.
const GONE_TOKEN: u64 = 1 << 62;

/// The event data of a waiter's nudge line in its wait end ([`Waiter`]).
const NUDGE_TOKEN: u64 = 1 << 61;

/// The nudge line of each waiter this process made (by index; -1: none),
/// for [`wake_blocked_on`].
static NUDGES: [std::sync::atomic::AtomicI32; layout::MAX_WAITERS] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; layout::MAX_WAITERS];

/// Wake this process's threads blocked on socket `s` (in a read, accept
/// or epoll_wait armed for it): something only this process knows
/// changed, which the service will not ring them for (a `shutdown` of its
/// reading side). Each looks again.
pub fn wake_blocked_on(a: &Attached, s: u32) {
    let h = a.r.up_header();
    let slots = a.r.layout().slots;
    let me = layout::waiter_tag(row());
    for (idx, n) in NUDGES.iter().enumerate() {
        let fd = n.load(Ordering::Acquire);
        let (w, bit) = (idx / 64, 1u64 << (idx % 64));
        if fd < 0
            || h.waiter_owner[idx].load(Ordering::Acquire) != me
            || h.armed[w].load(Ordering::SeqCst) & bit == 0
        {
            continue;
        }
        let wanted = h.wants_any[w].load(Ordering::Relaxed) & bit != 0
            || (s < slots
                && a.r.interest(idx as u32, s / 64).load(Ordering::Relaxed) & (1 << (s % 64)) != 0);
        if wanted {
            os::ring(fd);
        }
    }
}

/// A wait end reported the service's exit ([`service_gone`] to follow).
static SVC_EXITED: AtomicBool = AtomicBool::new(false);

/// Done once the service is known gone.
static GONE: std::sync::Once = std::sync::Once::new();

/// Whether the service is gone: known already, or its process has exited
/// (then [`service_gone`] is done first).
pub fn gone(a: &Attached) -> bool {
    if GONE.is_completed() {
        return true;
    }
    if SVC_EXITED.load(Ordering::Relaxed) || (a.svc >= 0 && os::exited(a.svc)) {
        service_gone(a);
        return true;
    }
    false
}

/// The service died (it was killed, or crashed): its sockets will never
/// change again. Do for the program what it can no longer do — abort every
/// connection, as a reset would (`ECONNABORTED`, readiness for reading and
/// writing, the change counter bumped), in a private copy of the socket
/// table that replaces the service's read-only one — and say so once on
/// standard error. Data already in a receive ring is still read first.
/// Listening and UDP sockets stay as they are and get nothing more. Once
/// per process; other threads wait for it to be done.
fn service_gone(a: &Attached) {
    GONE.call_once(|| {
        // SAFETY: the service's process has exited: nothing writes the down
        // region any more.
        if let Err(e) = unsafe { a.r.privatize_down_slots() } {
            let m = format!(
                "ixora-preload: the stack service is gone, and its connections could not be \
                 marked aborted ({e}); they stay silent\n"
            );
            real::sys_write(2, m.as_bytes());
            return;
        }
        let mut aborted = 0;
        for s in 0..a.r.layout().slots {
            let d = a.r.down_slot(s);
            let live = match d.state.load(Ordering::Acquire) {
                layout::state::CONNECTING | layout::state::ESTABLISHED => true,
                // A spare's connect asked for and not yet taken up.
                layout::state::OPEN => {
                    a.r.up_slot(s).req.load(Ordering::Acquire) & layout::req::CONNECT != 0
                }
                _ => false,
            };
            if live {
                d.err.store(libc::ECONNABORTED, Ordering::Relaxed);
                d.flags.fetch_or(layout::flag::ERROR, Ordering::Release);
                d.state.store(layout::state::CLOSED, Ordering::Release);
                d.seq.fetch_add(1, Ordering::Release);
                aborted += 1;
            }
        }
        note_local_change();
        let m = format!(
            "ixora-preload: the stack service is gone (it exited or was killed): {aborted} \
             connection(s) aborted (ECONNABORTED); listening and UDP sockets get nothing more \
             until the program is restarted\n"
        );
        real::sys_write(2, m.as_bytes());
    });
}

impl Waiter {
    /// A new waiter registered with the service: the one `ATTACH` gave
    /// this process if no thread took it yet, else one asked for now.
    pub fn new(a: &Attached) -> Option<Waiter> {
        if let Some(w) = Waiter::first(a) {
            return Some(w);
        }
        let h = a.r.up_header();
        let tag = layout::waiter_tag(row());
        // Free ones only are tried (a failed compare-and-swap still takes
        // the cache line).
        let idx = h.waiter_owner.iter().position(|o| {
            o.load(Ordering::Relaxed) == 0
                && o.compare_exchange(0, tag, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        })? as u32;
        let (r, mut fds) = request_fds(a, Msg::new(op::WAITER, idx, 0, 0), &[]);
        if r.a < 0 || fds.len() != 1 {
            let _ = h.waiter_owner[idx as usize].compare_exchange(
                tag,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            return None;
        }
        let efd = internal(fds.pop().expect("one descriptor").into_raw_fd());
        Some(Waiter::on_line(a, idx, efd))
    }

    /// Waiter 0, which the service made with `ATTACH` (and marked this
    /// process's in the up header), if no thread took it yet. A forked
    /// child does not take its parent's: the index is the parent's row's,
    /// and the descriptor is left open (as an inherited thread's waiter's:
    /// the number may be the child's own file by now).
    fn first(a: &Attached) -> Option<Waiter> {
        // (Never waited for: the lock is not among those held over fork,
        // and a thread that finds it taken asks for a waiter instead.)
        let (efd, gen) = a.first_waiter.try_lock().ok()?.take()?;
        (gen == FORK_GEN.load(Ordering::Relaxed)).then(|| Waiter::on_line(a, 0, efd))
    }

    /// Waiter `idx`, the index this process holds, sleeping on wait end
    /// `efd`.
    fn on_line(a: &Attached, idx: u32, efd: c_int) -> Waiter {
        if a.svc >= 0 {
            // The service's exit wakes a sleeper too (once: edge-triggered).
            // SAFETY: the wait end was just received and is ours.
            let ep = unsafe { std::os::fd::BorrowedFd::borrow_raw(efd) };
            let _ = os::watch_edges(ep, a.svc, GONE_TOKEN);
        }
        let mut w = Waiter {
            idx,
            efd,
            nudge: -1,
            fork_gen: FORK_GEN.load(Ordering::Relaxed),
            nested: Vec::new(),
        };
        let _ = w.nudge_fd();
        w
    }

    /// Epoll set `fd` (id `id`) nested in the wait end, registered now if
    /// it is not: None if the kernel refused it, else whether it is clean
    /// (the one-call wait may be used; see [`Nest`]).
    fn nest(&mut self, fd: c_int, id: u64) -> Option<bool> {
        let i = match self.nested.iter().position(|n| n.fd == fd) {
            Some(i) if self.nested[i].id == id => i,
            found => {
                if let Some(i) = found {
                    // The number names another set now: the old watch went
                    // with the old set's file (or names nothing we use).
                    self.nested.remove(i);
                    // SAFETY: the wait end is ours, open while we live.
                    os::unwatch(unsafe { std::os::fd::BorrowedFd::borrow_raw(self.efd) }, fd);
                } else if self.nested.len() >= NESTED_MAX {
                    let old = self.nested.remove(0);
                    // SAFETY: as above.
                    os::unwatch(
                        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.efd) },
                        old.fd,
                    );
                }
                // A set with events pending when it is added has its edge
                // queued at once: registered is clean.
                // SAFETY: as above.
                let ok = os::watch_edges(
                    unsafe { std::os::fd::BorrowedFd::borrow_raw(self.efd) },
                    fd,
                    NEST_TOKEN | fd as u64,
                )
                .is_ok();
                self.nested.push(Nest {
                    fd,
                    id,
                    ok,
                    clean: ok,
                });
                self.nested.len() - 1
            }
        };
        let n = &self.nested[i];
        n.ok.then_some(n.clean)
    }

    fn set_clean(&mut self, fd: c_int, clean: bool) {
        if let Some(n) = self.nested.iter_mut().find(|n| n.fd == fd) {
            n.clean = clean;
        }
    }

    /// Edges taken from the wait end: whether the ring's (data 0) and set
    /// `own`'s are among them. The edge of any other nested set was taken
    /// by a wait that does not look at that set: it is no longer clean.
    fn note_edges(&mut self, evs: &[libc::epoll_event], own: Option<c_int>) -> (bool, bool) {
        let (mut rung, mut mine) = (false, false);
        for e in evs {
            let data = e.u64;
            if data == GONE_TOKEN {
                SVC_EXITED.store(true, Ordering::Relaxed);
            }
            if data & NEST_TOKEN == 0 {
                rung = true;
                continue;
            }
            let fd = (data & !NEST_TOKEN) as c_int;
            if Some(fd) == own {
                mine = true;
            } else {
                self.set_clean(fd, false);
            }
        }
        (rung, mine)
    }

    /// Take every pending edge of the wait end (see [`Waiter::note_edges`]).
    fn take_edges(&mut self, own: Option<c_int>) -> (bool, bool) {
        let (mut rung, mut mine) = (false, false);
        let efd = self.efd;
        os::take_edges_with(efd, |evs| {
            let (r, m) = self.note_edges(evs, own);
            rung |= r;
            mine |= m;
        });
        (rung, mine)
    }

    /// Not to be rung any more: whether it was still armed (not rung
    /// since it armed).
    fn disarm(&self, a: &Attached) -> bool {
        let (w, bit) = (self.idx as usize / 64, 1u64 << (self.idx % 64));
        let h = a.r.up_header();
        // (A load first: most waits end rung, the bit cleared already.)
        h.armed[w].load(Ordering::Relaxed) & bit != 0
            && h.armed[w].fetch_and(!bit, Ordering::AcqRel) & bit != 0
    }

    /// Ask to be rung after the service's next change of one of the
    /// sockets of `interest` (of any socket when it names none); for
    /// those it asks transmit progress of, also after the service took
    /// bytes from their transmit rings (room to write).
    pub fn arm(&self, a: &Attached, interest: Interest<'_>) {
        let h = a.r.up_header();
        let (w, bit) = (self.idx as usize / 64, 1u64 << (self.idx % 64));
        let slots = a.r.layout().slots;
        // The bitmaps are stored a word at a time: an epoll set of a
        // thousand sockets is one store per 64 of them, not an atomic
        // update per socket.
        let store = |rx: &[u64], tx: &[u64], excl: &[u64]| {
            // The exclusive bitmap is read only while the bit says so.
            if excl.is_empty() {
                if h.excl_any[w].load(Ordering::Relaxed) & bit != 0 {
                    h.excl_any[w].fetch_and(!bit, Ordering::Relaxed);
                }
            } else {
                h.excl_any[w].fetch_or(bit, Ordering::Relaxed);
            }
            if rx.iter().all(|&r| r == 0) {
                h.wants_any[w].fetch_or(bit, Ordering::Relaxed);
                return;
            }
            h.wants_any[w].fetch_and(!bit, Ordering::Relaxed);
            for i in 0..slots / 64 {
                let word = |b: &[u64]| b.get(i as usize).copied().unwrap_or(0);
                a.r.interest(self.idx, i).store(word(rx), Ordering::Relaxed);
                a.r.tx_interest(self.idx, i)
                    .store(word(tx), Ordering::Relaxed);
                if !excl.is_empty() {
                    a.r.excl_interest(self.idx, i)
                        .store(word(excl), Ordering::Relaxed);
                }
            }
        };
        match interest {
            Interest::Slots {
                rx: interest,
                tx: tx_interest,
            } => {
                let mut rx = vec![0u64; slots as usize / 64];
                let mut tx = vec![0u64; slots as usize / 64];
                // Room to write is also a reason to wake for the other
                // changes (an error, a closed connection).
                for &s in interest.iter().chain(tx_interest) {
                    if s < slots {
                        rx[s as usize / 64] |= 1 << (s % 64);
                    }
                }
                for &s in tx_interest {
                    if s < slots {
                        tx[s as usize / 64] |= 1 << (s % 64);
                    }
                }
                store(&rx, &tx, &[]);
            }
            Interest::Bits { rx, tx, excl } => store(rx, tx, excl),
            Interest::Exclusive(s) => {
                let mut rx = vec![0u64; slots as usize / 64];
                if s < slots {
                    rx[s as usize / 64] |= 1 << (s % 64);
                }
                store(&rx, &[], &rx);
            }
        }
        h.waiter_cpu[self.idx as usize].store(os::cpu_tag(), Ordering::Relaxed);
        // Published by this (the service reads `armed` first).
        h.armed[w].fetch_or(bit, Ordering::SeqCst);
    }

    /// The nudge line (made and watched when the waiter is, or on a later
    /// use if that failed); None if the kernel refused it.
    fn nudge_fd(&mut self) -> Option<c_int> {
        if self.nudge < 0 {
            let e = internal_owned(os::eventfd(0).ok()?);
            // SAFETY: the wait end is ours, open while we live.
            let ep = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.efd) };
            os::watch_edges(ep, e.as_raw_fd(), NUDGE_TOKEN).ok()?;
            self.nudge = e.into_raw_fd();
            NUDGES[self.idx as usize].store(self.nudge, Ordering::Release);
        }
        Some(self.nudge)
    }

    /// Release the index (the wait end is closed).
    pub fn release(self, a: &Attached) {
        let _ = NUDGES[self.idx as usize].compare_exchange(
            self.nudge,
            -1,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        for fd in [self.efd, self.nudge] {
            if fd < 0 {
                continue;
            }
            if let Some(e) = entry(fd) {
                e.kind.store(kind::NONE, Ordering::Release);
            }
            real::sys_close(fd);
        }
        // Ours unless the service already took it back (it saw this
        // process go, which it is not, or exec, which it has not).
        let _ = a.r.up_header().waiter_owner[self.idx as usize].compare_exchange(
            layout::waiter_tag(row()),
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Made in this process (not inherited over fork).
    pub fn current(&self) -> bool {
        self.fork_gen == FORK_GEN.load(Ordering::Relaxed)
    }
}

struct ThreadWaiter(Option<Waiter>);

impl ThreadWaiter {
    /// Make the thread's waiter if it has none (or one inherited over
    /// fork); true if it asked the service for one now (system calls).
    fn ensure(&mut self, a: &Attached) -> bool {
        if self.0.as_ref().is_some_and(|w| !w.current()) {
            // Inherited over fork: not ours to use. Its descriptor is left
            // open (one per fork): the child may have closed the number
            // behind our back (close_range) and reused it for a file of
            // its own, which a close here would take from it.
            self.0 = None;
        }
        if self.0.is_some() {
            return false;
        }
        self.0 = Waiter::new(a);
        true
    }
}

impl Drop for ThreadWaiter {
    fn drop(&mut self) {
        if let (Some(w), Some(a)) = (self.0.take(), attached()) {
            if w.current() {
                w.release(a);
            }
        }
    }
}

thread_local! {
    static THREAD_WAITER: std::cell::RefCell<ThreadWaiter> = const { std::cell::RefCell::new(ThreadWaiter(None)) };
}

/// Give back the calling thread's waiter (its index and wait end) now:
/// the thread's image is about to go (`exec`). A later wait, if the exec
/// fails, makes a new one.
pub fn release_thread_waiter() {
    let w = THREAD_WAITER.with(|tw| tw.try_borrow_mut().ok()?.0.take());
    if let (Some(w), Some(a)) = (w, attached()) {
        if w.current() {
            w.release(a);
        }
    }
}

/// One reference to socket `s` went (a descriptor closed, or one the
/// kernel closed at `exec` for being close-on-exec): the last one asks
/// the service to close the socket (`abort`: reset it, SO_LINGER 0).
/// True if that took a system call.
pub fn drop_ref(a: &Attached, s: u32, abort: bool) -> bool {
    if unhold(a, s) > 1 {
        return false;
    }
    let bit = if abort {
        layout::req::ABORT
    } else {
        layout::req::CLOSE
    };
    a.r.up_slot(s).req.fetch_or(bit, Ordering::Release);
    signal(a, s)
}

thread_local! {
    static IN_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread's last [`block_until`] made a system call (rang the
/// doorbell or slept) rather than finding its condition while spinning.
pub fn blocked_in_kernel() -> bool {
    IN_KERNEL.with(|k| k.get())
}

/// The process put a seccomp filter on itself (sshd's pre-authentication
/// child does, as do browsers' and some daemons' workers): system calls
/// the filter does not list kill it, and the shim's sleep on its waiter
/// needs some no such filter lists (a request on the control connection
/// for a waiter, `epoll_pwait` on its wait end). From then on a blocking
/// call polls its kernel descriptors and looks at the rings in short
/// sleeps instead (`ppoll`, `nanosleep`: what sandboxes of network code
/// allow). Reads and writes of Ixora sockets make no system call but the
/// doorbell's `write`.
static SANDBOXED: AtomicBool = AtomicBool::new(false);

/// See [`SANDBOXED`]: set before the program's `prctl(PR_SET_SECCOMP)` or
/// `seccomp(SET_MODE_*)`.
pub fn sandboxed_from_now() {
    SANDBOXED.store(true, Ordering::SeqCst);
}

/// How long a sandboxed blocking call sleeps between looks at the rings.
const SANDBOX_NAP: Duration = Duration::from_micros(200);

/// [`block_until`] in a sandboxed process ([`SANDBOXED`]), or a thread
/// that could get no waiter: short sleeps and looks.
fn block_sandboxed(
    limit: Option<Duration>,
    start: Instant,
    sig: OnSignal,
    kernel: &mut [libc::pollfd],
    ready: &mut dyn FnMut() -> bool,
    sleep: &mut Sleep,
) -> bool {
    loop {
        if ready() {
            return true;
        }
        let mut nap = SANDBOX_NAP;
        if let Some(l) = limit {
            let e = start.elapsed();
            if e >= l {
                set_errno(0);
                return false;
            }
            nap = nap.min(l - e);
        }
        sleep.now();
        let n = if kernel.is_empty() {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: nap.as_nanos() as libc::c_long,
            };
            // SAFETY: ppoll(2) of no descriptors: a sleep of `ts` with the
            // live (or null) signal mask in force.
            unsafe {
                crate::real::syscall_fn()(
                    libc::SYS_ppoll,
                    std::ptr::null_mut::<libc::pollfd>(),
                    0,
                    &ts,
                    sig.mask()
                        .map_or(std::ptr::null(), |m| m as *const libc::sigset_t),
                    8usize,
                ) as c_int
            }
        } else {
            real::sys_ppoll(kernel, 1, sig.mask())
        };
        if n < 0 && real::errno() == libc::EINTR {
            if sig.restart && limit.is_none() && restarts_after_signal() {
                continue;
            }
            set_errno(libc::EINTR);
            return false;
        }
        if n > 0 && !kernel.is_empty() {
            return true;
        }
        // (No wake-up comes to a nap: new urgent data is looked for after
        // each, and a SIGURG this thread handled ends it as above.)
        note_urgent(sleep.a, true);
        if cut_by_sigurg(sig, limit) {
            return false;
        }
    }
}

/// How a blocking call ended, counted once (the `waits` of `ixora
/// stats`): found while spinning (`spun`), found after yielding the CPU to
/// the service (`looked`; also when the look ran out but the condition
/// came before the call slept), or slept in the kernel (`slept`; after a
/// look that ran out also `look_ran_out`). The call counts as one that
/// entered the kernel only if it made a system call: the sleep, or
/// before it the look's yields, a doorbell, or the asking for a waiter.
struct Sleep<'a> {
    a: &'a Attached,
    /// The sleep was counted.
    counted: bool,
    /// The call yielded the CPU to the service while it looked.
    looked: bool,
}

impl Sleep<'_> {
    /// The call is about to sleep (or poll) in the kernel.
    fn now(&mut self) {
        if !self.counted {
            self.counted = true;
            IN_KERNEL.with(|k| k.set(true));
            if self.looked {
                count(self.a, layout::call("look"), false);
            }
            count(self.a, layout::call("wait"), false);
        }
    }

    /// The call ends (`found`: its condition came) without a sleep
    /// counted: it is counted as spun or looked; one that timed out after
    /// a look, as a look that ran out.
    fn end(&mut self, found: bool) {
        if self.counted {
            return;
        }
        self.counted = true;
        match (found, self.looked) {
            (true, looked) => count(
                self.a,
                layout::call(if looked { "look" } else { "wait" }),
                true,
            ),
            (false, true) => count(self.a, layout::call("look"), false),
            (false, false) => {}
        }
    }
}

/// What a signal does to a call that [`block_until`] sleeps for.
#[derive(Clone, Copy)]
pub struct OnSignal {
    /// The call is one Linux restarts after a signal (a read, write or
    /// accept without a timeout; never a poll): a signal whose handler
    /// asked for that, or that only stopped and continued the process,
    /// does not end the wait (see [`restarts_after_signal`]).
    pub restart: bool,
    /// The signal mask in force while the call sleeps (`ppoll`,
    /// `pselect`, `epoll_pwait`; null: the thread's own): a program that
    /// blocks SIGCHLD and lets it in only there (sshd) is woken by it.
    pub mask: *const libc::sigset_t,
    /// A wait for room to send: a signal ends it even when the room has
    /// come, as Linux's `sk_stream_wait_memory` looks for a signal before
    /// it looks for room (a receive or a poll returns what has come).
    pub sending: bool,
}

impl OnSignal {
    /// A call Linux restarts.
    pub const RESTART: OnSignal = OnSignal {
        restart: true,
        mask: std::ptr::null(),
        sending: false,
    };
    /// A call a signal always ends (EINTR).
    pub const INTERRUPT: OnSignal = OnSignal {
        restart: false,
        mask: std::ptr::null(),
        sending: false,
    };
    /// A poll with signal mask `mask` (null: none) while it sleeps.
    pub fn masked(mask: *const libc::sigset_t) -> OnSignal {
        OnSignal {
            restart: false,
            mask,
            sending: false,
        }
    }

    fn mask(&self) -> Option<&libc::sigset_t> {
        // SAFETY: `mask` is null or the signal set the program passed to
        // the call being served (ppoll, pselect, epoll_pwait), readable
        // for the call's length by their contract.
        unsafe { self.mask.as_ref() }
    }
}

/// After a wait ended by a signal (EINTR): would Linux have restarted the
/// call? It restarts a read, write or accept when the handler that ran
/// was set with SA_RESTART, or when no handler ran (a stop and continue).
/// Which signal it was is not known here, so the call is restarted only
/// if no handler of the process lacks SA_RESTART: exact for programs whose
/// handlers agree; one that has a handler without it gets EINTR, as that
/// handler may have asked to stop.
pub(crate) fn restarts_after_signal() -> bool {
    (1..=libc::SIGRTMAX()).all(|sig| {
        action_of(sig).is_none_or(|old| {
            old.sa_sigaction == libc::SIG_DFL
                || old.sa_sigaction == libc::SIG_IGN
                || old.sa_flags & libc::SA_RESTART != 0
        })
    })
}

/// A wait limit from a call's milliseconds (negative: none).
pub fn ms_limit(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// Look at `ready()` for up to `spin`: off the service's CPU by spinning
/// (user space only). On it, spinning would only keep the service from
/// producing what we wait for: there, while the service is awake (it
/// looks again before it sleeps, `ixora serve --idle-spin-us`), each look
/// first hands it the CPU. A yield is a system call (the call then counts
/// as entering the kernel), but it spares a sleep, the service's wake-up
/// of this thread and the context switches of both; not in a seccomp
/// sandbox, whose filter may forbid it. Returns whether `ready()` was
/// found, and whether the CPU was yielded.
fn spin_for(a: &Attached, spin: Duration, ready: &mut dyn FnMut() -> bool) -> (bool, bool) {
    let start = Instant::now();
    let on_svc = on_service_cpu(a);
    let spin = if on_svc && SANDBOXED.load(Ordering::Relaxed) {
        Duration::ZERO
    } else {
        spin
    };
    let mut yielded = false;
    while start.elapsed() < spin {
        if ready() {
            return (true, yielded);
        }
        if !on_svc {
            std::hint::spin_loop();
            continue;
        }
        if service_sleeping(a) {
            break;
        }
        if !yielded {
            yielded = true;
            IN_KERNEL.with(|k| k.set(true));
        }
        std::thread::yield_now();
    }
    (false, yielded)
}

/// Block the calling thread until `ready()`, a descriptor of `kernel`
/// has an event (its `revents` are set), or `timeout_ms` (-1: forever)
/// passes; true if something is ready. Spins on `ready()` first, then
/// sleeps in the kernel on `kernel` and the thread's waiter together; the
/// service rings the waiter after a change of a socket in `interest`, or
/// transmit progress of one in `tx_interest` (see [`Waiter::arm`]).
/// `nest`: `kernel` is one descriptor, an epoll set of the program with
/// this [`Epoll::id`], which may be nested in the waiter (see [`Nest`]).
/// `sig`: what a signal does to the call. `limit`: how long at most
/// (None: no limit; [`ms_limit`] from a call's milliseconds), kept to the
/// nanosecond: a `select` or `poll` for 1 µs does not sleep a millisecond.
#[allow(clippy::too_many_arguments)]
pub fn block_until(
    a: &Attached,
    limit: Option<Duration>,
    sig: OnSignal,
    kernel: &mut [libc::pollfd],
    nest: Option<u64>,
    interest: Interest<'_>,
    ready: &mut dyn FnMut() -> bool,
) -> bool {
    let start = Instant::now();
    // (Only a SIGURG raised during this wait interrupts it.)
    SIGNALLED_HERE.with(|s| s.set(false));
    IN_KERNEL.with(|k| k.set(kick(a)));
    // Look at the rings again before sleeping (kernel descriptors of a
    // mixed set are not looked at meanwhile: they are seen by the
    // blocking poll below, at most the spin time late).
    let (found, yielded) = spin_for(a, a.spin.min(limit.unwrap_or(Duration::MAX)), ready);
    // From here on the call sleeps (or polls) in the kernel, unless its
    // condition comes before it does (`Sleep`, which counts how it ended).
    let mut sleep = Sleep {
        a,
        counted: false,
        looked: yielded,
    };
    if found {
        sleep.end(true);
        return unless_signalled(true, sig, limit);
    }
    let r = if SANDBOXED.load(Ordering::Relaxed) {
        block_sandboxed(limit, start, sig, kernel, ready, &mut sleep)
    } else {
        block_on_waiter(
            a, limit, start, sig, kernel, nest, interest, ready, &mut sleep,
        )
    };
    sleep.end(r);
    unless_signalled(r, sig, limit)
}

/// A wait's result `r`, unless this thread raised `SIGURG` for itself
/// meanwhile (its handler ran: [`note_urgent`] at a count): then the wait
/// ends as one a signal cut short (`EINTR`), unless Linux would have
/// restarted the call. Linux's signal interrupts a blocked `sendfile` or
/// `send` at once; vsftpd answers `ABOR` from its handler only once the
/// transfer call returns (it went on for seconds until 2026-11-30).
fn unless_signalled(r: bool, sig: OnSignal, limit: Option<Duration>) -> bool {
    if !signalled_here() || (r && !sig.sending) || restarted(sig, limit) {
        return r;
    }
    set_errno(libc::EINTR);
    false
}

/// Whether this thread's SIGURG handler ran and ends a wait with `sig`
/// and `limit` before its sleep (`EINTR` set), as Linux's would.
fn cut_by_sigurg(sig: OnSignal, limit: Option<Duration>) -> bool {
    let cut = signalled_here() && !restarted(sig, limit);
    if cut {
        set_errno(libc::EINTR);
    }
    cut
}

/// Whether a call waiting with `sig` and `limit` goes on after this
/// thread's SIGURG handler ran (it would restart under Linux: a call that
/// restarts, without a timeout, its handler set with `SA_RESTART`).
fn restarted(sig: OnSignal, limit: Option<Duration>) -> bool {
    sig.restart
        && limit.is_none()
        && action_of(libc::SIGURG).is_some_and(|a| a.sa_flags & libc::SA_RESTART != 0)
}

/// [`block_until`]'s sleep on the thread's waiter (and `kernel`), after
/// its spin or look found nothing. The waiter is disarmed when the call
/// ends, as Linux takes a waiter off the wait queue: one the service still
/// thinks asleep would take an exclusive wake-up (`EPOLLEXCLUSIVE`, a
/// blocking accept) meant for a thread that is, and ring this one for
/// nothing at its next wait.
#[allow(clippy::too_many_arguments)]
fn block_on_waiter(
    a: &Attached,
    limit: Option<Duration>,
    start: Instant,
    sig: OnSignal,
    kernel: &mut [libc::pollfd],
    nest: Option<u64>,
    interest: Interest<'_>,
    ready: &mut dyn FnMut() -> bool,
    sleep: &mut Sleep,
) -> bool {
    // (Each `return` in the closure ends the sleep, the waiter armed.)
    let r = THREAD_WAITER.with(|tw| {
        // A handler that runs inside this thread's own sleep (a signal, or
        // the SIGURG the shim raised there) and waits itself: it naps.
        let Ok(mut tw) = tw.try_borrow_mut() else {
            return block_sandboxed(limit, start, sig, kernel, ready, sleep);
        };
        if tw.ensure(a) {
            IN_KERNEL.with(|k| k.set(true));
        }
        // With kernel descriptors, the waiter is polled after them; with
        // none, the waiter alone is slept on (below).
        let mut fds: Vec<libc::pollfd> = Vec::new();
        if let (Some(w), false) = (&tw.0, kernel.is_empty()) {
            fds.extend_from_slice(kernel);
            fds.push(libc::pollfd {
                fd: w.efd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        loop {
            if ready() {
                return true;
            }
            let left = match limit {
                Some(l) => {
                    let e = start.elapsed();
                    if e >= l {
                        set_errno(0);
                        return false;
                    }
                    Some(l - e)
                }
                None => None,
            };
            match tw.0.as_mut() {
                Some(w) => {
                    w.arm(a, interest);
                    if ready() {
                        return true;
                    }
                    // The kernel side, an epoll set nested in the waiter
                    // (its descriptor), and clean?
                    let (nested, clean) = match (nest, kernel.len()) {
                        (Some(id), 1) => match w.nest(kernel[0].fd, id) {
                            Some(clean) => (Some(kernel[0].fd), clean),
                            None => (None, false),
                        },
                        _ => (None, false),
                    };
                    // Only the waiter to wait on, or a clean nested set:
                    // sleep on the waiter and take its edges in one system
                    // call. Otherwise poll the kernel descriptors and the
                    // waiter (level-triggered), then take the edges.
                    sleep.now();
                    // (Counting that the call sleeps may raise SIGURG: its
                    // handler has run, so the sleep does not begin.)
                    if cut_by_sigurg(sig, limit) {
                        return false;
                    }
                    let (n, rung, kernel_ready) = if fds.is_empty() || clean {
                        // SAFETY: epoll_event is plain old data.
                        let mut evs: [libc::epoll_event; os::EDGES] = unsafe { std::mem::zeroed() };
                        let n = os::wait_edges_masked_for(w.efd, left, &mut evs, sig.mask());
                        let (rung, mine) = w.note_edges(&evs[..n.max(0) as usize], nested);
                        // The set's edge says an event came; it may be gone
                        // (harvested meanwhile): look, without sleeping.
                        let ready_k = mine && {
                            kernel[0].revents = 0;
                            real::sys_poll(kernel, 0) > 0
                        };
                        if let (Some(fd), true) = (nested, ready_k) {
                            w.set_clean(fd, false);
                        }
                        (n, rung, ready_k)
                    } else {
                        for f in fds.iter_mut() {
                            f.revents = 0;
                        }
                        let n = real::sys_ppoll_for(&mut fds, left, sig.mask()) as isize;
                        let last = fds.len() - 1;
                        let (k, waiter) = fds.split_at_mut(last);
                        let (rung, mine) = if n > 0 && waiter[0].revents != 0 {
                            w.take_edges(nested)
                        } else {
                            (false, false)
                        };
                        let mut ready_k = n > 0 && k.iter().any(|f| f.revents != 0);
                        if mine && !ready_k {
                            // An event came after the poll looked.
                            ready_k = real::sys_poll(k, 0) > 0;
                        }
                        if let (Some(fd), true) = (nested, n >= 0) {
                            // Not ready now: whatever comes next has an edge.
                            // (A poll a signal cut short looked at nothing.)
                            w.set_clean(fd, !ready_k);
                        }
                        if ready_k {
                            kernel.copy_from_slice(k);
                        }
                        (n, rung, ready_k)
                    };
                    // A signal: return so the program sees EINTR (its
                    // handler may have asked it to stop), unless Linux
                    // would have restarted the call.
                    if n < 0 && real::errno() == libc::EINTR {
                        if sig.restart && limit.is_none() && restarts_after_signal() {
                            continue;
                        }
                        set_errno(libc::EINTR);
                        return false;
                    }
                    if rung {
                        if SVC_EXITED.load(Ordering::Relaxed) {
                            service_gone(a);
                        }
                        // Rung by the service: for what we wait for?
                        let found = ready();
                        // (Counting may raise SIGURG: urgent data came on
                        // another socket, and the service woke every
                        // sleeper of the app for it.)
                        count(a, layout::call("wakeup"), found);
                        if found {
                            return true;
                        }
                        // (A SIGURG it raised ends the wait before the
                        // next sleep: after `sleep.now()` below.)
                    }
                    if kernel_ready {
                        return true;
                    }
                }
                None if gone(a) => {
                    // Nothing of Ixora's can change now: wait on the
                    // kernel's descriptors alone (or out the timeout).
                    sleep.now();
                    let n = real::sys_ppoll_for(kernel, left, sig.mask());
                    if n < 0 && real::errno() == libc::EINTR {
                        if sig.restart && limit.is_none() && restarts_after_signal() {
                            continue;
                        }
                        set_errno(libc::EINTR);
                        return false;
                    }
                    if n > 0 {
                        return true;
                    }
                }
                // No waiter available (the service's limit): look in short
                // sleeps, as a sandboxed process does.
                None => return block_sandboxed(limit, start, sig, kernel, ready, sleep),
            }
        }
    });
    let rung = THREAD_WAITER.with(|tw| {
        tw.try_borrow()
            .is_ok_and(|tw| tw.0.as_ref().is_some_and(|w| !w.disarm(a)))
    });
    if !r && rung && ready() {
        // Rung as the call gave up (a timeout, a signal): what rang it is
        // the call's, as Linux's `ep_poll` and `inet_csk_wait_for_connect`
        // look once more when their sleep ends and return what came, also
        // at a timeout or with a signal pending. An exclusive wake-up
        // (EPOLLEXCLUSIVE, a blocking accept or UDP receive) rang no other
        // waiter, in this process or another, for what it found.
        set_errno(0);
        return true;
    }
    r
}

/// Validated view of an Ixora descriptor.
#[derive(Clone, Copy)]
pub struct Sock {
    /// The attachment.
    pub a: &'static Attached,
    /// Slot.
    pub s: u32,
    /// The descriptor's entry.
    pub e: &'static FdEntry,
    /// The descriptor.
    pub fd: c_int,
}

/// The Ixora socket behind `fd`, if it is one.
pub fn sock(fd: c_int) -> Option<Sock> {
    if kind_of(fd) != kind::IXORA {
        return None;
    }
    let a = attached()?;
    let e = entry(fd)?;
    Some(Sock {
        a,
        s: e.slot.load(Ordering::Acquire),
        e,
        fd,
    })
}

impl Sock {
    /// Still the socket the descriptor was made for (the slot was not
    /// freed and reused).
    pub fn live(&self) -> bool {
        self.a.r.down_slot(self.s).gen.load(Ordering::Acquire) == self.e.gen.load(Ordering::Relaxed)
    }

    /// State.
    pub fn state(&self) -> u32 {
        if !self.live() {
            return state::CLOSED;
        }
        let d = self.a.r.down_slot(self.s);
        match d.state.load(Ordering::Acquire) {
            // A spare socket whose connect the service has not yet taken
            // up (it clears the request once the socket is connecting).
            state::OPEN => {
                if self.a.r.up_slot(self.s).req.load(Ordering::Acquire) & layout::req::CONNECT != 0
                {
                    return state::CONNECTING;
                }
                // The service stores the new state before it clears the
                // request: a cleared request is seen with the state that
                // followed, so read it again. (An `OPEN` read before the
                // service took the connect up, with the request read after
                // it cleared it, made a connecting socket unconnected for a
                // moment: a blocking connect failed with EINPROGRESS, a
                // poll woke with POLLOUT|POLLHUP; about one connect in 400
                // of a Python client, until 2026-11-27.)
                d.state.load(Ordering::Acquire)
            }
            st => st,
        }
    }

    /// Flags.
    pub fn flags(&self) -> u32 {
        self.a.r.down_slot(self.s).flags.load(Ordering::Acquire)
    }

    /// Bytes readable.
    pub fn readable(&self) -> u64 {
        let tail = self.a.r.down_slot(self.s).rx_tail.load(Ordering::Acquire);
        let head = self.a.r.up_slot(self.s).rx_head.load(Ordering::Relaxed);
        tail.saturating_sub(head)
    }

    /// Bytes received and not yet read (`FIONREAD`): the receive ring's
    /// and those waiting beyond it (see `DownSlot::rx_beyond`).
    pub fn queued(&self) -> u64 {
        let d = self.a.r.down_slot(self.s);
        // (The tail first: a move out of `rx_beyond` into the ring may
        // then be counted in neither for a moment, never in both.)
        let n = self.readable();
        n + u64::from(d.rx_beyond.load(Ordering::Relaxed))
    }

    /// Bytes writable.
    pub fn writable(&self) -> u64 {
        (self.a.r.layout().ring as u64).saturating_sub(self.tx_queued())
    }

    /// Bytes written into the transmit ring that the service has not
    /// taken yet.
    pub fn tx_queued(&self) -> u64 {
        let head = self.a.r.down_slot(self.s).tx_head.load(Ordering::Acquire);
        let tail = self.a.r.up_slot(self.s).tx_tail.load(Ordering::Relaxed);
        tail.saturating_sub(head)
    }

    /// Connections waiting in the accept queue.
    pub fn acceptable(&self) -> u32 {
        let tail = self.a.r.down_slot(self.s).acc_tail.load(Ordering::Acquire);
        let head = self.a.r.up_slot(self.s).acc_head.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.a.r.acc_capacity())
    }

    /// The connection's error if it failed and no call has reported it
    /// yet (0 if none; EBADF for a closed descriptor).
    pub fn error(&self) -> c_int {
        if !self.live() {
            return libc::EBADF;
        }
        if self.dead() && self.a.r.up_slot(self.s).seen.load(Ordering::Acquire) & 1 == 0 {
            self.a.r.down_slot(self.s).err.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Report the connection's error to the program: [`error`](Self::error),
    /// which no later call sees (it sees the connection closed: end of
    /// file, EPIPE), as Linux's `sock_error` clears `sk_err`. One of two
    /// threads that ask at once gets it.
    pub fn take_error(&self) -> c_int {
        let e = self.error();
        if e == 0 && self.dgram() {
            return self.take_icmp_error();
        }
        if e == 0 || e == libc::EBADF {
            return e;
        }
        if self.a.r.up_slot(self.s).seen.fetch_or(1, Ordering::AcqRel) & 1 != 0 {
            return 0;
        }
        e
    }

    /// Whether a UDP socket has an error from an ICMP message that no
    /// call has reported yet (the service posts them: [`layout::DownSlot::acc_tail`]).
    pub fn icmp_error_pending(&self) -> bool {
        let posted = self.a.r.down_slot(self.s).acc_tail.load(Ordering::Acquire);
        posted != self.a.r.up_slot(self.s).errs_seen.load(Ordering::Acquire)
    }

    /// Report a UDP socket's pending ICMP error ([`icmp_error_pending`](Self::icmp_error_pending))
    /// to the program: its errno, or 0 if none (or another thread took
    /// it). As Linux's `sock_error`, one call sees it, whichever of a
    /// receive, a send or `SO_ERROR` comes first; the socket goes on
    /// working.
    pub fn take_icmp_error(&self) -> c_int {
        let d = self.a.r.down_slot(self.s);
        let posted = d.acc_tail.load(Ordering::Acquire);
        let seen = &self.a.r.up_slot(self.s).errs_seen;
        let was = seen.load(Ordering::Acquire);
        if posted == was
            || seen
                .compare_exchange(was, posted, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return 0;
        }
        d.err.load(Ordering::Relaxed)
    }

    /// The connection failed (reset, refused, timed out, ...), whether or
    /// not a call has reported its error yet.
    pub fn dead(&self) -> bool {
        self.flags() & flag::ERROR != 0
    }

    /// The change counter (for edge-triggered epoll).
    pub fn seq(&self) -> u32 {
        self.a.r.down_slot(self.s).seq.load(Ordering::Acquire)
    }

    /// poll(2)-style readiness, with the `POLLRDNORM` / `POLLWRNORM`
    /// (and for UDP `POLLWRBAND`) that Linux's `tcp_poll` and
    /// `datagram_poll` report beside `POLLIN` / `POLLOUT`: a program may
    /// ask for those alone (Varnish's connect waits for `POLLWRNORM`).
    pub fn revents(&self) -> i16 {
        let mut r = self.readiness();
        if r & libc::POLLIN != 0 {
            r |= libc::POLLRDNORM;
        }
        if r & libc::POLLOUT != 0 {
            r |= libc::POLLWRNORM;
        }
        r
    }

    /// [`revents`](Self::revents) in `POLLIN` / `POLLOUT` terms.
    fn readiness(&self) -> i16 {
        let st = self.state();
        let fl = self.flags();
        let mut r: i16 = 0;
        if !self.live() {
            return libc::POLLNVAL;
        }
        if self.dgram() {
            // A datagram to read; room for the largest one to write.
            if self.readable() > 0 {
                r |= libc::POLLIN;
            }
            if fl & flag::ERROR != 0 && self.error() != 0 || self.icmp_error_pending() {
                r |= libc::POLLERR;
            }
            if self.writable() >= (layout::DGRAM_HDR + self.frame_dgram()) as u64 {
                r |= libc::POLLOUT | libc::POLLWRBAND;
            }
            return r;
        }
        let shut_rd = self.shut_rd();
        if st == state::LISTEN {
            if shut_rd {
                // Shut down, it listens no more: unconnected, as Linux
                // polls a listener it disconnected.
                return libc::POLLOUT | libc::POLLHUP;
            }
            if self.acceptable() > 0 {
                r |= libc::POLLIN;
            }
            return r;
        }
        let mut have = self.readable();
        if fl & flag::URGENT != 0 {
            // The peer's urgent byte: `POLLPRI` until it is taken or read
            // past; one the stream passes over (no `SO_OOBINLINE`) next
            // is not a byte to read (Linux's `tcp_poll`).
            if self.urgent_ready() {
                r |= libc::POLLPRI;
            }
            if have > 0 && !self.oobinline() && self.at_mark() {
                have -= 1;
            }
        }
        if (have > 0 && self.lowat_reached(have)) || fl & flag::EOF != 0 || shut_rd {
            r |= libc::POLLIN;
        }
        if fl & flag::EOF != 0 || shut_rd {
            r |= libc::POLLRDHUP;
        }
        if fl & flag::ERROR != 0 {
            // Closed both ways (Linux: SHUTDOWN_MASK), and the error while
            // no call has reported it.
            r |= libc::POLLHUP | libc::POLLIN | libc::POLLRDHUP | libc::POLLOUT;
            if self.error() != 0 {
                r |= libc::POLLERR;
            }
        }
        // Shut for writing (by any descriptor of it): always writable (a
        // write fails at once, EPIPE), and hung up once the other way is
        // shut too, as Linux's `tcp_poll` (SHUTDOWN_MASK; until 2026-11-29
        // no POLLHUP at end of file after shutdown(SHUT_WR): `socket_ops.c`).
        let shut_wr = st == state::ESTABLISHED
            && self.a.r.up_slot(self.s).req.load(Ordering::Acquire) & layout::req::SHUT_WR != 0;
        if shut_wr {
            r |= libc::POLLOUT;
            if fl & flag::EOF != 0 || shut_rd {
                r |= libc::POLLHUP;
            }
        }
        if st == state::ESTABLISHED && self.writable() > 0 {
            r |= libc::POLLOUT;
        }
        if st == state::OPEN {
            r |= libc::POLLOUT | libc::POLLHUP;
        }
        r
    }

    /// The receive low-water mark of a TCP socket (`SO_RCVLOWAT`, 1
    /// unless set above it).
    pub fn lowat(&self) -> u64 {
        if self.e.flags.load(Ordering::Relaxed) & fl::LOWAT == 0 {
            return 1;
        }
        let v = self
            .a
            .opt(self.s, self.gen(), (libc::SOL_SOCKET, libc::SO_RCVLOWAT));
        v.and_then(|b| Some(c_int::from_ne_bytes(b.get(..4)?.try_into().ok()?)))
            .map_or(1, |v| v.max(1) as u64)
    }

    /// Whether the `have` bytes in the receive ring reach the low-water
    /// mark, as Linux's `tcp_epollin_ready`: those and any waiting
    /// beyond the ring are at least [`lowat`](Self::lowat), or the ring
    /// is too full to take another segment (the window closed: more
    /// cannot come until the program reads).
    pub fn lowat_reached(&self, have: u64) -> bool {
        if self.e.flags.load(Ordering::Relaxed) & fl::LOWAT == 0 {
            return true;
        }
        let ring = self.a.r.layout().ring as u64;
        have + self.frame_dgram() as u64 >= ring || self.queued() >= self.lowat()
    }

    /// Its reading side was shut down (`shutdown` SHUT_RD or SHUT_RDWR
    /// through this descriptor).
    pub fn shut_rd(&self) -> bool {
        self.e.flags.load(Ordering::Relaxed) & fl::SHUT_RD != 0
    }

    /// Non-blocking.
    pub fn nonblock(&self) -> bool {
        self.e.flags.load(Ordering::Relaxed) & fl::NONBLOCK != 0
    }

    /// The generation of the slot this descriptor refers to.
    pub fn gen(&self) -> u32 {
        self.e.gen.load(Ordering::Relaxed)
    }

    /// The blocking limit of SO_RCVTIMEO (`send` false) or SO_SNDTIMEO
    /// from the call's first wait (`start`, set here), in milliseconds: -1
    /// for none; 0 once it has passed. Reads no clock and takes no lock
    /// unless the program ever set a timeout.
    pub fn wait_limit(&self, send: bool, start: &mut Option<Instant>) -> c_int {
        if !self.a.timeouts.load(Ordering::Relaxed) {
            return -1;
        }
        let t = self.a.timeout_ms(self.s, self.gen(), send);
        if t < 0 {
            return -1;
        }
        let left = t as i64 - start.get_or_insert_with(Instant::now).elapsed().as_millis() as i64;
        left.max(0) as c_int
    }

    /// A UDP socket.
    pub fn dgram(&self) -> bool {
        self.e.flags.load(Ordering::Relaxed) & fl::DGRAM != 0
    }

    /// The largest datagram payload the service sends.
    pub fn max_dgram(&self) -> usize {
        self.a.r.down_header().max_dgram.load(Ordering::Relaxed) as usize
    }

    /// The largest UDP payload one frame carries (no more than
    /// [`max_dgram`](Self::max_dgram)): `POLLOUT` means room for one.
    pub fn frame_dgram(&self) -> usize {
        let h = self.a.r.down_header();
        (h.frame_dgram.load(Ordering::Relaxed) as usize).min(self.max_dgram())
    }

    /// Length of the next datagram in the receive ring (a UDP socket).
    pub fn next_dgram_len(&self) -> Option<usize> {
        if self.readable() < layout::DGRAM_HDR as u64 {
            return None;
        }
        let head = self.a.r.up_slot(self.s).rx_head.load(Ordering::Relaxed);
        let mut h = [0u8; layout::DGRAM_HDR];
        self.a.r.rx_read(self.s, head, &mut h);
        Some(usize::from(layout::parse_dgram_hdr(&h).0))
    }

    /// Take the next datagram of a UDP socket into `bufs` (`peek`: leave
    /// it); `Err(EAGAIN)` if none is there.
    pub fn recv_dgram(&self, bufs: &mut [&mut [u8]], peek: bool) -> Result<DgramIn, c_int> {
        // An ICMP error comes before the datagrams waiting (Linux's
        // `__skb_recv_udp` asks `sock_error` first).
        let e = self.take_icmp_error();
        if e != 0 {
            return Err(e);
        }
        loop {
            let (head, avail) = match self.unread_at() {
                Some((head, avail)) if avail >= layout::DGRAM_HDR as u64 => (head, avail),
                _ => {
                    let e = self.take_error();
                    return Err(if e != 0 { e } else { libc::EAGAIN });
                }
            };
            let mut h = [0u8; layout::DGRAM_HDR];
            self.a.r.rx_read(self.s, head, &mut h);
            let (len, ip, port) = layout::parse_dgram_hdr(&h);
            let len = usize::from(len);
            // The service wrote it; a length past the tail would be its
            // bug (or a torn read of a record another reader took), never
            // a read past the ring.
            let len = len.min((avail - layout::DGRAM_HDR as u64) as usize);
            let mut n = 0usize;
            for b in bufs.iter_mut() {
                let k = b.len().min(len - n);
                self.a
                    .r
                    .rx_read(self.s, head + (layout::DGRAM_HDR + n) as u64, &mut b[..k]);
                n += k;
                if n == len {
                    break;
                }
            }
            if peek || self.took(head, (layout::DGRAM_HDR + len) as u64) {
                let (tos, ttl) = layout::dgram_rx_ip(&h);
                return Ok(DgramIn {
                    n,
                    len,
                    src: layout::pack(ip, port),
                    stamp: layout::dgram_stamp(&h),
                    tos,
                    ttl,
                });
            }
        }
    }

    /// Queue one datagram of the gathered `bufs` to `dst` ([`layout::pack`]ed)
    /// on a UDP socket: all of it, or `Err(EAGAIN)` when the transmit ring
    /// has no room for it.
    pub fn send_dgram(&self, bufs: &[&[u8]], dst: u64, ip: MsgIp) -> Result<usize, c_int> {
        // A pending ICMP error fails the send, which sends nothing (Linux's
        // `sock_alloc_send_pskb` asks `sock_error`).
        let e = self.take_icmp_error();
        if e != 0 {
            return Err(e);
        }
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len > self.max_dgram() {
            return Err(libc::EMSGSIZE);
        }
        if self.a.r.up_slot(self.s).req.load(Ordering::Acquire) & layout::req::SHUT_WR != 0 {
            return Err(libc::EPIPE);
        }
        if (self.writable() as usize) < layout::DGRAM_HDR + len {
            return Err(libc::EAGAIN);
        }
        let (addr, port) = layout::unpack(dst);
        let u = self.a.r.up_slot(self.s);
        let (tos, ttl) = layout::opts_ip(u.opts.load(Ordering::Relaxed));
        let (tos, ttl) = (ip.tos.unwrap_or(tos), ip.ttl.unwrap_or(ttl));
        let hdr = layout::with_ip(layout::dgram_hdr(len as u16, addr, port), tos, ttl);
        let tail = u.tx_tail.load(Ordering::Relaxed);
        self.a.r.tx_write(self.s, tail, &hdr);
        let mut n = layout::DGRAM_HDR as u64;
        for b in bufs {
            self.a.r.tx_write(self.s, tail + n, b);
            n += b.len() as u64;
        }
        self.a
            .r
            .up_slot(self.s)
            .tx_tail
            .store(tail + n, Ordering::Release);
        Ok(len)
    }

    /// An AF_INET6 (dual-stack) socket: addresses go out v4-mapped.
    pub fn inet6(&self) -> bool {
        self.e.flags.load(Ordering::Relaxed) & fl::INET6 != 0
    }

    /// Copy up to the total length of `bufs` out of the receive ring;
    /// `peek` leaves the bytes. Returns bytes copied (0 at EOF), or
    /// `Err(errno)`.
    pub fn recv(&self, bufs: &mut [&mut [u8]], peek: bool) -> Result<usize, c_int> {
        loop {
            let (head, avail) = match self.unread() {
                Ok(at) => at,
                Err(r) => return r,
            };
            let mut n = 0u64;
            for b in bufs.iter_mut() {
                let k = (b.len() as u64).min(avail - n) as usize;
                self.a.r.rx_read(self.s, head + n, &mut b[..k]);
                n += k as u64;
                if n == avail {
                    break;
                }
            }
            if peek || n == 0 || self.took(head, n) {
                return Ok(n as usize);
            }
        }
    }

    /// The receive ring's head and the bytes from it to the tail, if any.
    /// A read stops before the peer's urgent byte (the mark), as Linux's
    /// `tcp_recvmsg` does; at the mark, without `SO_OOBINLINE`, the byte
    /// is not part of the stream and is passed over.
    fn unread_at(&self) -> Option<(u64, u64)> {
        loop {
            let head = self.a.r.up_slot(self.s).rx_head.load(Ordering::Acquire);
            let d = self.a.r.down_slot(self.s);
            let tail = d.rx_tail.load(Ordering::Acquire);
            if tail <= head {
                return None;
            }
            // (The flag shares the tail's line: no other load unless the
            // peer ever sent urgent data.)
            if d.flags.load(Ordering::Acquire) & flag::URGENT != 0 {
                if let Some((mark, _)) = self.urgent() {
                    if mark == head && !self.oobinline() {
                        // Passed over (by whichever reader moves the head).
                        self.took(head, 1);
                        continue;
                    }
                    if mark > head && mark < tail {
                        return Some((head, mark - head));
                    }
                }
            }
            return Some((head, tail - head));
        }
    }

    /// `SO_OOBINLINE` is set.
    pub fn oobinline(&self) -> bool {
        self.e.flags.load(Ordering::Relaxed) & fl::OOBINLINE != 0
    }

    /// The peer's latest urgent byte: its receive-ring offset (the mark)
    /// and the byte once it came ([`layout::unpack_urgent`]).
    pub fn urgent(&self) -> Option<(u64, Option<u8>)> {
        layout::unpack_urgent(self.a.r.urgent(self.s).load(Ordering::Acquire))
    }

    /// The peer's urgent data still stands: its mark not yet read past
    /// (Linux's `tp->urg_data` is cleared once the reader passes it).
    /// Returns the mark and the byte.
    fn urgent_pending(&self) -> Option<(u64, Option<u8>)> {
        if self.flags() & flag::URGENT == 0 {
            return None;
        }
        let head = self.a.r.up_slot(self.s).rx_head.load(Ordering::Acquire);
        self.urgent().filter(|&(mark, _)| head <= mark)
    }

    /// At the urgent mark (`SIOCATMARK`, `sockatmark`): the next byte
    /// read would be the urgent one (Linux: `urg_data && urg_seq ==
    /// copied_seq`).
    pub fn at_mark(&self) -> bool {
        let head = self.a.r.up_slot(self.s).rx_head.load(Ordering::Acquire);
        self.urgent_pending().is_some_and(|(mark, _)| mark == head)
    }

    /// The urgent byte has come and `recv` with `MSG_OOB` has not taken
    /// it (`POLLPRI`; Linux's `TCP_URG_VALID`).
    pub fn urgent_ready(&self) -> bool {
        match self.urgent_pending() {
            Some((mark, Some(_))) => {
                self.a.r.up_urgent(self.s).read.load(Ordering::Acquire) != mark + 1
            }
            _ => false,
        }
    }

    /// `recv` with `MSG_OOB` (Linux's `tcp_recv_urg`): the urgent byte
    /// once (a peek leaves it), `EINVAL` with `SO_OOBINLINE`, with no
    /// urgent data, or once it was taken or read past; before it comes,
    /// `EAGAIN` (whether the socket blocks or not, as Linux), or end of
    /// file once the peer has closed.
    pub fn recv_urgent(&self, peek: bool) -> Result<u8, c_int> {
        if self.oobinline() {
            return Err(libc::EINVAL);
        }
        let Some((mark, byte)) = self.urgent_pending() else {
            return Err(libc::EINVAL);
        };
        let read = &self.a.r.up_urgent(self.s).read;
        if read.load(Ordering::Acquire) == mark + 1 {
            return Err(libc::EINVAL);
        }
        match byte {
            Some(b) => {
                if !peek && read.swap(mark + 1, Ordering::AcqRel) == mark + 1 {
                    return Err(libc::EINVAL); // another thread took it
                }
                Ok(b)
            }
            None if self.flags() & (flag::EOF | flag::ERROR) != 0 || self.shut_rd() => Err(0),
            None => Err(libc::EAGAIN),
        }
    }

    /// Move the receive ring's head from `head` past the `n` bytes this
    /// thread copied from there: false if another reader of the socket (a
    /// thread, or a process it was forked into) moved it first, whose
    /// bytes those were — the copy is then thrown away and the read made
    /// again. Two threads reading one socket at once got the same bytes
    /// (or a UDP socket's datagram twice and the next not at all) until
    /// 2026-11-29, when the head was stored, not exchanged.
    fn took(&self, head: u64, n: u64) -> bool {
        let h = &self.a.r.up_slot(self.s).rx_head;
        h.compare_exchange(head, head + n, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The receive ring's head and the bytes from it to the tail, or,
    /// when it holds none, what a receive says instead
    /// ([`Sock::recv_nothing`]).
    fn unread(&self) -> Result<(u64, u64), Result<usize, c_int>> {
        if let Some(at) = self.unread_at() {
            return Ok(at);
        }
        // One look at the flags decides, and the ring is looked at again
        // after it: the service publishes bytes (a release of the tail)
        // before it sets EOF or ERROR (a release of the flags, acquired
        // here), so the bytes that came before either are seen. Until
        // 2026-11-28 the flags were read again to decide: EOF set after
        // the look at the ring then ended a non-blocking reader's stream
        // with the peer's last bytes unread (HAProxy relayed empty
        // replies).
        let f = self.flags();
        if f & (flag::EOF | flag::ERROR) != 0 {
            if let Some(at) = self.unread_at() {
                return Ok(at);
            }
        }
        Err(self.recv_nothing(f))
    }

    /// Receive up to `max` of the bytes the ring holds, which `take`
    /// reads straight out of it (the spans it is given, in order) and
    /// counts: `Ok(Ok(n))` the bytes taken (the head moves past them; 0:
    /// end of file), `Ok(Err(e))` `take`'s error (nothing taken), `Err(e)`
    /// why there is nothing to take, as [`Sock::recv`].
    pub fn recv_with(
        &self,
        max: usize,
        take: impl FnOnce(&[(*const u8, usize); 2]) -> Result<usize, c_int>,
    ) -> Result<Result<usize, c_int>, c_int> {
        let (head, avail) = match self.unread() {
            Ok(at) => at,
            Err(r) => return r.map(Ok),
        };
        let k = avail.min(max as u64) as usize;
        let spans = self.a.r.rx_spans(self.s, head, k);
        Ok(take(&spans).map(|n| {
            let n = n.min(k);
            // (The bytes are the program's pipe's now: a reader that took
            // them at the same time got them too — splicing one socket
            // from two threads at once is not served.)
            if n > 0 {
                self.took(head, n as u64);
            }
            n
        }))
    }

    /// What a receive from an empty ring says, by the flags `f` looked at
    /// after it was found empty: end of file after the peer's FIN (before
    /// any error, as Linux looks at SOCK_DONE first) or once the error
    /// was reported; the error; `EAGAIN` while the connection lives (or
    /// fails as we look: the next call says so).
    fn recv_nothing(&self, f: u32) -> Result<usize, c_int> {
        if f & flag::EOF != 0 || self.shut_rd() {
            return Ok(0);
        }
        if !self.live() {
            return Err(libc::EBADF);
        }
        if f & flag::ERROR != 0 {
            return match self.take_error() {
                0 => Ok(0),
                e => Err(e),
            };
        }
        match self.state() {
            state::ESTABLISHED | state::CONNECTING | state::CLOSED => Err(libc::EAGAIN),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// Copy as much of `bufs` as fits into the transmit ring.
    pub fn send(&self, bufs: &[&[u8]]) -> Result<usize, c_int> {
        let room = self.send_room()?;
        let tail = self.a.r.up_slot(self.s).tx_tail.load(Ordering::Relaxed);
        let mut n = 0u64;
        for b in bufs {
            let k = (b.len() as u64).min(room - n) as usize;
            self.a.r.tx_write(self.s, tail + n, &b[..k]);
            n += k as u64;
            if n == room {
                break;
            }
        }
        if n > 0 {
            self.a
                .r
                .up_slot(self.s)
                .tx_tail
                .store(tail + n, Ordering::Release);
        }
        Ok(n as usize)
    }

    /// Room for sending: bytes free in the transmit ring (at least one),
    /// or why nothing can be sent now (EAGAIN: the ring is full or the
    /// connection not yet up).
    fn send_room(&self) -> Result<u64, c_int> {
        let e = self.take_error();
        if e != 0 {
            return Err(e);
        }
        match self.state() {
            state::ESTABLISHED => {}
            state::CONNECTING => return Err(libc::EAGAIN),
            _ => return Err(libc::EPIPE),
        }
        // After shutdown(SHUT_WR) (by any descriptor of the socket):
        // EPIPE, as Linux (RFC 9293 §3.10.2: SEND after CLOSE is "connection
        // closing").
        if self.a.r.up_slot(self.s).req.load(Ordering::Acquire) & layout::req::SHUT_WR != 0 {
            return Err(libc::EPIPE);
        }
        match self.writable() {
            0 => Err(libc::EAGAIN),
            room => Ok(room),
        }
    }

    /// Whether a send would take bytes now: room in the ring, and no
    /// error to report or closed side first (what [`Sock::send`] checks,
    /// without taking the error).
    pub fn takes_bytes(&self) -> bool {
        self.error() == 0
            && self.state() == state::ESTABLISHED
            && self.a.r.up_slot(self.s).req.load(Ordering::Acquire) & layout::req::SHUT_WR == 0
            && self.writable() > 0
    }

    /// Send up to `max` bytes that `fill` writes straight into the
    /// transmit ring (the free spans it is given, in order) and counts:
    /// `Ok(Ok(n))` the bytes sent (0 when `fill` had none), `Ok(Err(e))`
    /// `fill`'s error (nothing sent), `Err(e)` why nothing can be sent now,
    /// as [`Sock::send`].
    pub fn send_with(
        &self,
        max: usize,
        fill: impl FnOnce(&[(*mut u8, usize); 2]) -> Result<usize, c_int>,
    ) -> Result<Result<usize, c_int>, c_int> {
        let room = self.send_room()?;
        let k = (max as u64).min(room) as usize;
        let tail = self.a.r.up_slot(self.s).tx_tail.load(Ordering::Relaxed);
        let spans = self.a.r.tx_spans(self.s, tail, k);
        Ok(fill(&spans).map(|n| {
            let n = n.min(k);
            if n > 0 {
                self.a
                    .r
                    .up_slot(self.s)
                    .tx_tail
                    .store(tail + n as u64, Ordering::Release);
            }
            n
        }))
    }
}

/// A thread in `epoll_wait` on a set with Ixora sockets, about to sleep
/// or asleep on its waiter. Another thread's `epoll_ctl` must reach it,
/// as the kernel's reaches a thread in its `epoll_wait`: the waiter was
/// armed for the set's sockets as they were ([`epoll_changed`]).
pub struct Sleeper {
    idx: u32,
    nudge: c_int,
    /// It sleeps on the set's kernel descriptors too.
    kernel: bool,
}

/// Register the calling thread as about to sleep on set `g` (`kernel`:
/// on its kernel descriptors too); returns the set's change count to
/// compare with [`Epoll::gen`] when woken. None: no waiter (the thread
/// cannot be nudged; it sleeps in short steps anyway).
pub fn sleep_on(a: &Attached, g: &mut Epoll, kernel: bool) -> Option<u64> {
    let (idx, nudge) = THREAD_WAITER.with(|tw| {
        let mut tw = tw.try_borrow_mut().ok()?;
        tw.ensure(a);
        let w = tw.0.as_mut()?;
        Some((w.idx, w.nudge_fd()?))
    })?;
    g.sleepers.push(Sleeper { idx, nudge, kernel });
    Some(g.gen)
}

/// The calling thread no longer sleeps on set `g`.
pub fn woke_from(g: &mut Epoll) {
    let Some(idx) = THREAD_WAITER.with(|tw| tw.try_borrow().ok()?.0.as_ref().map(|w| w.idx)) else {
        return;
    };
    if let Some(i) = g.sleepers.iter().position(|s| s.idx == idx) {
        g.sleepers.swap_remove(i);
    }
}

/// Set `g` changed (`epoll_ctl` ADD or MOD): an Ixora socket's interest
/// (`item`: its slot and whether transmit progress counts), or a kernel
/// descriptor's. Its sleepers learn of it: the socket joins their waiters'
/// interest, so that the service rings them for its next change; then, if
/// it has an event to report now (`ready()`, looked at after the join: a
/// change after the look rings them), or a kernel descriptor came that a
/// sleeper does not watch, they are nudged to look again. A sleeper that
/// had not armed yet (arming rewrites its interest) sees [`Epoll::gen`]
/// moved when it looks before sleeping.
pub fn epoll_changed(
    a: &Attached,
    g: &mut Epoll,
    item: Option<(u32, bool)>,
    ready: impl FnOnce() -> bool,
) {
    if g.sleepers.is_empty() {
        return;
    }
    g.gen = g.gen.wrapping_add(1);
    if let Some((slot, tx)) = item.filter(|&(slot, _)| slot < a.r.layout().slots) {
        let bit = 1u64 << (slot % 64);
        for s in &g.sleepers {
            // (No longer exclusive for them: the set changed.)
            a.r.excl_interest(s.idx, slot / 64)
                .fetch_and(!bit, Ordering::SeqCst);
            a.r.interest(s.idx, slot / 64)
                .fetch_or(bit, Ordering::SeqCst);
            if tx {
                a.r.tx_interest(s.idx, slot / 64)
                    .fetch_or(bit, Ordering::SeqCst);
            }
        }
    }
    let ready = item.is_some() && ready();
    for s in &g.sleepers {
        if ready || (g.kernel > 0 && !s.kernel) {
            os::ring(s.nudge);
        }
    }
}

/// The event data of a set's poke line in the program's epoll instance:
/// not a user-space address, a descriptor or a small number, so not data
/// a program gives its own descriptors.
pub const POKE_TOKEN: u64 = 0xffff_8a7e_1c0d_a5ed;

/// An Ixora socket joined set `g` (descriptor `epfd`) while threads sleep
/// in the kernel's `epoll_wait` on it (it had none when they called):
/// wake them, as the kernel's epoll_ctl would have for a descriptor of
/// its own, through a poke line of ours in the program's epoll instance
/// (an eventfd, made on first need, which stays registered, unreadable
/// until the next poke). A semaphore eventfd with one count per sleeper:
/// each takes one ([`strip_poke`]).
pub fn poke_kernel_sleepers(epfd: c_int, g: &mut Epoll) {
    if g.in_kernel == 0 {
        return;
    }
    if g.poke < 0 {
        let fd = internal(real::sys_eventfd(
            libc::EFD_CLOEXEC | libc::EFD_NONBLOCK | libc::EFD_SEMAPHORE,
        ));
        if fd < 0 {
            return;
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: POKE_TOKEN,
        };
        if real::sys_epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
            forget_internal(fd);
            real::sys_close(fd);
            return;
        }
        g.poke = fd;
    }
    if real::sys_write(g.poke, &u64::from(g.in_kernel).to_ne_bytes()) == 8 {
        g.pokes += u64::from(g.in_kernel);
    }
}

/// Events `evs` the kernel reported for set `epfd`: our poke, if it is
/// among them, is taken out, with one count of the poke line (a sleeper's
/// own; `drain`: the counts no sleeper still in the kernel is owed —
/// pokes whose sleeper woke for something else first — so that the line
/// does not stay readable). Returns the events left and whether the poke
/// was there.
///
/// A thread not sleeping on the set (a look with timeout 0, or a wait
/// that found a kernel descriptor ready) sees the poke too while it is
/// pending. Until 2026-11-27 such a look drained every count, and a
/// sleeper the poke had woken found the line empty when the kernel
/// checked it again and slept on: MariaDB's thread pool, whose workers
/// look with timeout 0 before they sleep while its listener thread
/// sleeps in the kernel on the same set, left connections unserved for
/// seconds or for good.
pub fn strip_poke(epfd: c_int, evs: &mut [libc::epoll_event], drain: bool) -> (usize, bool) {
    let Some(i) = evs.iter().position(|e| e.u64 == POKE_TOKEN) else {
        return (evs.len(), false);
    };
    if let Some(ep) = epoll(epfd) {
        let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
        let keep = if drain {
            u64::from(g.in_kernel)
        } else {
            g.pokes.saturating_sub(1)
        };
        while g.poke >= 0 && g.pokes > keep {
            if real::sys_read(g.poke, &mut [0u8; 8]) != 8 {
                g.pokes = 0; // (the line is empty)
                break;
            }
            g.pokes -= 1;
        }
    }
    evs.copy_within(i + 1.., i);
    (evs.len() - 1, true)
}

/// No item: the end of a chain of [`Epoll`]'s slot index
/// ([`Epoll::first_of`]).
pub const NO_ITEM: u32 = u32::MAX;

/// Per-epoll-instance state (user-space interest in Ixora sockets).
///
/// A scan of the set looks only at the sockets that may be ready: those
/// the service changed since the last scan (its change log,
/// [`layout::DownHeader::chlog_head`]), those added or changed by
/// `epoll_ctl`, the level-triggered ones reported ready last time (ready
/// until the program reads them), and those a full batch left. It looks
/// at every item when it cannot trust the log: the first time, when it
/// fell more than the log's length behind, after a change the program
/// made itself ([`note_local_change`]), and after enough of the program's
/// closes to collect the items of closed descriptors
/// ([`Epoll::needs_full_scan`]). A program with a thousand connections
/// thus no longer reads a thousand sockets' state per `epoll_wait`.
pub struct Epoll {
    /// Unique in the process (a closed set's number may name a new one).
    pub id: u64,
    /// Interest in Ixora sockets: change only through [`Epoll::push`],
    /// [`Epoll::remove`] and [`Epoll::set_events`], which keep the
    /// indexes and the interest bitmaps.
    items: Vec<Item>,
    /// Per socket slot, the first item watching it (NO_ITEM: none); the others
    /// follow [`Item::next`].
    heads: Vec<u32>,
    /// The same by descriptor: [`Item::next_fd`]'s chains (a closed
    /// descriptor's items stay until found gone, so a reused number may
    /// have several).
    fd_heads: Vec<u32>,
    /// By slot, a bit for each socket an item watches (`rx`), and for
    /// each one an item asks `EPOLLOUT` of (`tx`): what a thread blocked
    /// on the set is woken for ([`Interest::Bits`]), kept as items come,
    /// go and change, so that a blocking wait costs no pass over them.
    rx_bits: Vec<u64>,
    /// See `rx_bits`.
    tx_bits: Vec<u64>,
    /// By slot, a bit for each socket watched only by `EPOLLEXCLUSIVE`
    /// items: a new connection of such a listener rings one of the threads
    /// asleep on such sets, not all ([`Interest::Bits`]).
    ex_bits: Vec<u64>,
    /// Bits set in `ex_bits`.
    ex_count: usize,
    /// The change log is read up to here (valid while `synced`).
    pub cursor: u64,
    /// The last scan could trust the log (see the type's doc).
    pub synced: bool,
    /// [`LOCAL_CHANGES`] and [`CLOSES`] at the last full scan.
    local_seen: u64,
    /// See `local_seen`.
    closes_seen: u64,
    /// Slots to look at first in the next scan: added or changed by
    /// `epoll_ctl`, or left by a full batch.
    pub pending: Vec<u32>,
    /// Slots to look at last in the next scan: level-triggered items
    /// reported ready.
    pub ready: Vec<u32>,
    /// Scans so far: an item is looked at once per scan.
    pub pass: u32,
    /// Where the next full scan starts (round robin: a full batch does
    /// not starve the items after it).
    pub start: usize,
    /// A scan's list of slots, kept for its memory.
    pub scratch: Vec<u32>,
    /// Kernel descriptors registered in the real epoll.
    pub kernel: usize,
    /// When the kernel descriptors of the set were last looked at.
    pub kernel_seen: Instant,
    /// Undecided sockets (not yet Ixora's nor the kernel's) the set
    /// watches, registered in the real epoll too: (descriptor, events,
    /// data). One that becomes Ixora's moves to `items`
    /// ([`adopt_undecided`]).
    pub undecided: Vec<(c_int, u32, u64)>,
    /// Threads in `epoll_wait` on the set ([`sleep_on`]).
    pub sleepers: Vec<Sleeper>,
    /// Threads in the kernel's `epoll_wait` on it: the set had no Ixora
    /// socket when they called ([`poke_kernel_sleepers`]).
    pub in_kernel: u32,
    /// The poke line registered in the program's epoll instance, or -1.
    pub poke: c_int,
    /// Counts written to the poke line and not yet read: those of the
    /// threads still in the kernel ([`Epoll::in_kernel`]) are theirs.
    pub pokes: u64,
    /// Changes made while a thread slept on the set ([`epoll_changed`]).
    pub gen: u64,
    /// Descriptors that name the set: its own and its duplicates
    /// ([`epoll_dup`]); the last one closed ends it.
    names: u32,
}

/// The chains an [`Epoll`] keeps its items in.
#[derive(Clone, Copy)]
enum Chain {
    /// By socket slot ([`Item::next`]).
    Slot,
    /// By descriptor ([`Item::next_fd`]).
    Fd,
}

impl Chain {
    /// Item `it`'s key in this chain and its link to the next.
    fn of(self, it: &Item) -> (usize, u32) {
        match self {
            Chain::Slot => (it.slot as usize, it.next),
            Chain::Fd => (it.fd.max(0) as usize, it.next_fd),
        }
    }
}

/// What a thread that blocks is woken for (see [`Waiter::arm`]).
#[derive(Clone, Copy)]
pub enum Interest<'a> {
    /// Changes of the sockets in `rx` and `tx`; transmit progress (room
    /// to write) of those in `tx` too. Both empty: a change of any socket.
    Slots { rx: &'a [u32], tx: &'a [u32] },
    /// The same as bitmaps by slot, `tx` and `excl` subsets of `rx` (an
    /// epoll set's, [`Epoll::copy_interest`]); a new connection of a
    /// listener, or datagram of a UDP socket, in `excl` rings one of the
    /// armed waiters that want it (one per connection or datagram
    /// queued), not all. No bit of `rx` set: a change of any socket.
    Bits {
        rx: &'a [u64],
        tx: &'a [u64],
        excl: &'a [u64],
    },
    /// Changes of the socket in this slot, waited for exclusively: by a
    /// blocking accept on a listener, or a blocking receive on a UDP
    /// socket. As Linux's accept and UDP receive wait, a new connection
    /// or datagram rings one of the waiters blocked on it (one per
    /// connection or datagram queued), a change of a listener's state or
    /// a UDP error every one.
    Exclusive(u32),
}

/// One Ixora socket in an epoll set.
pub struct Item {
    /// Descriptor.
    pub fd: c_int,
    /// Slot and generation it referred to when added.
    pub slot: u32,
    /// Generation.
    pub gen: u32,
    /// Interest (EPOLL* bits).
    pub events: u32,
    /// The application's data.
    pub data: u64,
    /// Change counter last reported (edge-triggered).
    pub seen: u32,
    /// One-shot item already reported.
    pub disabled: bool,
    /// The next item watching the same slot (NO_ITEM: none).
    pub next: u32,
    /// The next item of the same descriptor (NO_ITEM: none).
    pub next_fd: u32,
    /// The last scan ([`Epoll::pass`]) that looked at it.
    pub pass: u32,
    /// Also registered in the real epoll instance (the kernel side of a
    /// socket on any address, [`fl::KSIDE`]), with the same data and
    /// events but writability.
    pub kernel: bool,
}

impl Item {
    /// The events to report for this item now (0: none): its interest
    /// met by the socket's readiness `revents`, and, edge-triggered, only
    /// if the socket changed since the last report (its change counter
    /// `seq` moved; read for edge-triggered items only). The counter is
    /// read before the readiness. The
    /// service publishes a change (data in the ring, a state) before it
    /// counts it, so a change made between the two reads is counted after
    /// the counter was read: it is reported again at the next scan. Read
    /// the other way round, such a change (data arriving just after the
    /// readiness said "nothing to read") would be marked seen but never
    /// reported, and a program that reads until the ring is empty — nginx
    /// trusting `FIONREAD` — would wait for an edge that never comes.
    pub fn report(&mut self, seq: impl FnOnce() -> u32, revents: impl FnOnce() -> u32) -> u32 {
        let et = self.events & libc::EPOLLET as u32 != 0;
        let seq = if et { seq() } else { 0 };
        let want = self.events | (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        let rev = revents() & want;
        if rev == 0 || (et && seq == self.seen) {
            return 0;
        }
        self.seen = seq;
        rev
    }
}

impl Item {
    /// An item of interest `events` (with the program's `data`) in Ixora
    /// socket `slot`/`gen` under descriptor `fd`; `seq` is the socket's
    /// change counter now (an edge-triggered item reports what is ready).
    pub fn new(fd: c_int, slot: u32, gen: u32, events: u32, data: u64, seq: u32) -> Item {
        Item {
            fd,
            slot,
            gen,
            events,
            data,
            seen: seq.wrapping_sub(1),
            disabled: false,
            next: NO_ITEM,
            next_fd: NO_ITEM,
            pass: 0,
            kernel: false,
        }
    }
}

/// The poll events that ask for writability (Linux reports
/// `POLLWRNORM` with every `POLLOUT`, and `POLLWRBAND` for UDP).
pub const POLL_WRITE: i16 = libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND;
/// The poll events that ask for readability.
pub const POLL_READ: i16 = libc::POLLIN | libc::POLLRDNORM;
/// [`POLL_WRITE`] for epoll.
pub const EPOLL_WRITE: u32 = (libc::EPOLLOUT | libc::EPOLLWRNORM | libc::EPOLLWRBAND) as u32;

/// Changes the program made itself that may make its sockets ready (a
/// shutdown of reading; the service's loss): each makes every epoll set's
/// next scan a full one.
static LOCAL_CHANGES: AtomicU64 = AtomicU64::new(0);

/// Closes of Ixora descriptors (see [`Epoll::needs_full_scan`]).
static CLOSES: AtomicU64 = AtomicU64::new(0);

/// The program changed one of its sockets in a way that may make it ready
/// without the service's telling: shutdown(SHUT_RD).
pub fn note_local_change() {
    LOCAL_CHANGES.fetch_add(1, Ordering::Release);
}

/// The program closed an Ixora descriptor: an epoll set that watched it
/// keeps its item until a full scan finds it gone.
pub fn note_close() {
    CLOSES.fetch_add(1, Ordering::Relaxed);
}

impl Epoll {
    fn new(id: u64) -> Epoll {
        Epoll {
            id,
            items: Vec::new(),
            heads: Vec::new(),
            fd_heads: Vec::new(),
            rx_bits: Vec::new(),
            tx_bits: Vec::new(),
            ex_bits: Vec::new(),
            ex_count: 0,
            cursor: 0,
            synced: false,
            local_seen: 0,
            closes_seen: 0,
            pending: Vec::new(),
            ready: Vec::new(),
            pass: 0,
            start: 0,
            scratch: Vec::new(),
            kernel: 0,
            kernel_seen: Instant::now(),
            undecided: Vec::new(),
            sleepers: Vec::new(),
            gen: 0,
            in_kernel: 0,
            poke: -1,
            pokes: 0,
            names: 1,
        }
    }

    /// The items.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Item `i`, to change its flags (not its slot nor its interest:
    /// [`Epoll::set_events`]).
    pub fn item_mut(&mut self, i: usize) -> &mut Item {
        &mut self.items[i]
    }

    /// Take item `i` out for good, its kernel side's count with it (the
    /// program deleted it, or closed its descriptor). [`Epoll::remove`]
    /// leaves the count to callers that register the item elsewhere.
    pub fn forget(&mut self, i: usize) -> Item {
        let it = self.remove(i);
        if it.kernel {
            self.kernel = self.kernel.saturating_sub(1);
        }
        it
    }

    /// Change item `i`'s interest to `events`.
    pub fn set_events(&mut self, i: usize, events: u32) {
        self.items[i].events = events;
        self.rebit(self.items[i].slot);
    }

    /// What a thread blocked on the set is woken for, copied into `rx`,
    /// `tx` and `excl` (their memory reused): as [`Interest::Bits`], a
    /// change of any socket it watches, transmit progress of those asked
    /// `EPOLLOUT`; `excl` those watched only exclusively (left empty when
    /// there are none).
    pub fn copy_interest(&self, rx: &mut Vec<u64>, tx: &mut Vec<u64>, excl: &mut Vec<u64>) {
        rx.clone_from(&self.rx_bits);
        tx.clone_from(&self.tx_bits);
        if self.ex_count == 0 {
            excl.clear();
        } else {
            excl.clone_from(&self.ex_bits);
        }
    }

    /// Set slot `s`'s bits from the items that watch it now.
    fn rebit(&mut self, s: u32) {
        let (w, bit) = (s as usize / 64, 1u64 << (s % 64));
        if self.rx_bits.len() <= w {
            self.rx_bits.resize(w + 1, 0);
            self.tx_bits.resize(w + 1, 0);
            self.ex_bits.resize(w + 1, 0);
        }
        let (mut rx, mut tx, mut ex) = (false, false, true);
        let mut i = self.first_of(s);
        while i != NO_ITEM {
            let it = &self.items[i as usize];
            rx = true;
            tx |= it.events & EPOLL_WRITE != 0;
            ex &= it.events & libc::EPOLLEXCLUSIVE as u32 != 0;
            i = it.next;
        }
        let ex = rx && ex;
        if (self.ex_bits[w] & bit != 0) != ex {
            self.ex_count = if ex {
                self.ex_count + 1
            } else {
                self.ex_count - 1
            };
        }
        for (words, on) in [
            (&mut self.rx_bits, rx),
            (&mut self.tx_bits, tx),
            (&mut self.ex_bits, ex),
        ] {
            if on {
                words[w] |= bit;
            } else {
                words[w] &= !bit;
            }
        }
    }

    /// Add an item; the next scan looks at it.
    pub fn push(&mut self, mut it: Item) {
        let (s, fd) = (it.slot as usize, it.fd.max(0) as usize);
        if self.heads.len() <= s {
            self.heads.resize(s + 1, NO_ITEM);
        }
        if self.fd_heads.len() <= fd {
            self.fd_heads.resize(fd + 1, NO_ITEM);
        }
        it.next = self.heads[s];
        self.heads[s] = self.items.len() as u32;
        it.next_fd = self.fd_heads[fd];
        self.fd_heads[fd] = self.items.len() as u32;
        self.pending.push(it.slot);
        let slot = it.slot;
        self.items.push(it);
        self.rebit(slot);
    }

    /// Take item `i` out (the last item takes its place).
    pub fn remove(&mut self, i: usize) -> Item {
        for by in [Chain::Slot, Chain::Fd] {
            let it = &self.items[i];
            let (key, next) = by.of(it);
            self.relink(by, key, i as u32, next);
        }
        let last = self.items.len() - 1;
        if i != last {
            // The last item moves to `i`: its links in its chains follow.
            for by in [Chain::Slot, Chain::Fd] {
                let (key, _) = by.of(&self.items[last]);
                self.relink(by, key, last as u32, i as u32);
            }
        }
        let it = self.items.swap_remove(i);
        self.rebit(it.slot);
        it
    }

    /// Make the link to item `from` in chain `by` of `key` point at `to`.
    fn relink(&mut self, by: Chain, key: usize, from: u32, to: u32) {
        let head = match by {
            Chain::Slot => &mut self.heads[key],
            Chain::Fd => &mut self.fd_heads[key],
        };
        if *head == from {
            *head = to;
            return;
        }
        let mut p = *head as usize;
        while by.of(&self.items[p]).1 != from {
            p = by.of(&self.items[p]).1 as usize;
        }
        match by {
            Chain::Slot => self.items[p].next = to,
            Chain::Fd => self.items[p].next_fd = to,
        }
    }

    /// The items of descriptor `fd`.
    pub fn of_fd(&self, fd: c_int) -> impl Iterator<Item = usize> + '_ {
        let first = self
            .fd_heads
            .get(fd.max(0) as usize)
            .copied()
            .unwrap_or(NO_ITEM);
        std::iter::successors((first != NO_ITEM).then_some(first), |&i| {
            let n = self.items[i as usize].next_fd;
            (n != NO_ITEM).then_some(n)
        })
        .map(|i| i as usize)
    }

    /// The first item watching `slot` (NO_ITEM: none); the others follow
    /// [`Item::next`].
    pub fn first_of(&self, slot: u32) -> u32 {
        self.heads.get(slot as usize).copied().unwrap_or(NO_ITEM)
    }

    /// Whether this scan must look at every item rather than trust the
    /// change log (whose `head` is read before the scan): see the type's
    /// doc. Closes of the program's descriptors count once they are a
    /// quarter of the items (at least 64), so that collecting the items of
    /// closed descriptors costs a bounded amount per close.
    pub fn needs_full_scan(&self, head: u64) -> bool {
        !self.synced
            || head.wrapping_sub(self.cursor) > layout::CHLOG
            || LOCAL_CHANGES.load(Ordering::Acquire) != self.local_seen
            || CLOSES
                .load(Ordering::Relaxed)
                .wrapping_sub(self.closes_seen)
                > (self.items.len() as u64 / 4).max(64)
    }

    /// A full scan starts, the log read up to `head`.
    pub fn full_scan_starts(&mut self, head: u64) {
        self.synced = true;
        self.cursor = head;
        self.local_seen = LOCAL_CHANGES.load(Ordering::Acquire);
        self.closes_seen = CLOSES.load(Ordering::Relaxed);
        self.pending.clear();
        self.ready.clear();
        self.next_pass();
    }

    /// A new scan: items it looks at are marked with the new number.
    pub fn next_pass(&mut self) -> u32 {
        self.pass = self.pass.wrapping_add(1);
        if self.pass == 0 {
            // Wrapped: no item may carry the new number already.
            for it in self.items.iter_mut() {
                it.pass = 0;
            }
            self.pass = 1;
        }
        self.pass
    }
}

static EPOLLS: OnceLock<Box<[AtomicPtr<Mutex<Epoll>>]>> = OnceLock::new();

/// One more than the highest descriptor number an epoll set ever had:
/// scans of the sets stop there, not at the table's end (65,536 entries,
/// twice per connection of a program that watches its sockets before
/// connecting them: nginx as a proxy spent a third of its CPU so).
static EPOLLS_END: AtomicUsize = AtomicUsize::new(0);

/// The descriptor numbers an epoll set may have.
fn epoll_fds() -> std::ops::Range<usize> {
    0..EPOLLS_END.load(Ordering::Acquire).min(MAXFD)
}

/// The epoll state of `epfd`, if we track it.
pub fn epoll(epfd: c_int) -> Option<&'static Mutex<Epoll>> {
    if epfd < 0 || epfd as usize >= MAXFD {
        return None;
    }
    let p = EPOLLS.get()?[epfd as usize].load(Ordering::Acquire);
    // SAFETY: entries are leaked boxes, never freed (an epoll closed while
    // another thread waits on it keeps a valid, if stale, object).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Take out of every epoll set of this process its interest in `fd` as
/// Ixora socket `slot`/`gen`, which is becoming a kernel socket: each
/// item with its set, to be registered with the kernel's epoll instead
/// (or given back with [`restore_epoll_interest`]). A scan of the table:
/// a rare event.
pub fn take_epoll_interest(
    fd: c_int,
    slot: u32,
    gen: u32,
) -> Vec<(c_int, &'static Mutex<Epoll>, Item)> {
    let mut out = Vec::new();
    for epfd in epoll_fds() {
        let Some(ep) = epoll(epfd as c_int) else {
            continue;
        };
        let mut g = ep.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(i) = g
            .items
            .iter()
            .position(|i| i.fd == fd && i.slot == slot && i.gen == gen)
        {
            out.push((epfd as c_int, ep, g.remove(i)));
        }
    }
    out
}

/// Move the interest of every epoll set of this process that watches
/// Ixora socket `slot`/`gen` (under any of its descriptors) into (`to`)
/// or out of the kernel's epoll instance (a scan of the table: a rare
/// event), each under its set's lock: `ctl(epfd, fd, events, data)`
/// registers (or removes) the kernel side of descriptor `fd` and says
/// whether it did; the item is marked accordingly and the set's count of
/// kernel registrations follows. A one-shot item already reported is
/// registered disarmed, as the kernel keeps it.
pub fn epoll_interest_kernel(
    slot: u32,
    gen: u32,
    to: bool,
    ctl: &mut dyn FnMut(c_int, c_int, u32, u64) -> bool,
) {
    each_epoll(&mut |epfd, g| {
        let mut moved = 0;
        for it in g.items.iter_mut() {
            if it.slot == slot && it.gen == gen && it.kernel != to {
                let events = if it.disabled {
                    libc::EPOLLONESHOT as u32
                } else {
                    it.events
                };
                if ctl(epfd as c_int, it.fd, events, it.data) {
                    it.kernel = to;
                    moved += 1;
                }
            }
        }
        if to {
            g.kernel += moved;
        } else {
            g.kernel = g.kernel.saturating_sub(moved);
        }
    });
}

/// Run `f` on every epoll set of the process, locked, with its number:
/// a set that has duplicates ([`epoll_dup`]) once per number. Every
/// caller changes an item once (it takes it out, or marks it moved), so a
/// second visit of the same set finds nothing left to do.
fn each_epoll(f: &mut dyn FnMut(c_int, &mut Epoll)) {
    for epfd in epoll_fds() {
        if let Some(ep) = epoll(epfd as c_int) {
            f(
                epfd as c_int,
                &mut ep.lock().unwrap_or_else(|e| e.into_inner()),
            );
        }
    }
}

/// Undecided sockets watched by some epoll set (so that a new socket need
/// not scan the sets when there are none).
static UNDECIDED: AtomicUsize = AtomicUsize::new(0);

/// An epoll_ctl `opn` (done in the kernel already) on descriptor `fd` of
/// set `g`: keep `g`'s record of the undecided sockets it watches.
pub fn note_undecided(g: &mut Epoll, opn: c_int, fd: c_int, events: u32, data: u64) {
    let before = g.undecided.len();
    g.undecided.retain(|u| u.0 != fd);
    if opn != libc::EPOLL_CTL_DEL && kind_of(fd) == kind::MAYBE {
        g.undecided.push((fd, events, data));
    }
    let after = g.undecided.len();
    if after > before {
        UNDECIDED.fetch_add(after - before, Ordering::Relaxed);
    } else {
        UNDECIDED.fetch_sub(before - after, Ordering::Relaxed);
    }
}

/// Each epoll set's record of undecided descriptor `fd`, taken out
/// (all of them, through `each`).
fn take_undecided(fd: c_int, each: &mut dyn FnMut(c_int, &mut Epoll, u32, u64)) {
    if UNDECIDED.load(Ordering::Relaxed) == 0 {
        return;
    }
    each_epoll(&mut |epfd, g| {
        if let Some(i) = g.undecided.iter().position(|u| u.0 == fd) {
            let (_, events, data) = g.undecided.swap_remove(i);
            UNDECIDED.fetch_sub(1, Ordering::Relaxed);
            each(epfd, g, events, data);
        }
    });
}

/// A new socket took descriptor number `fd`: what the sets recorded for
/// an earlier undecided socket of that number is stale (the kernel
/// forgot it with its file).
pub fn forget_undecided(fd: c_int) {
    take_undecided(fd, &mut |_, _, _, _| {});
}

/// Undecided descriptor `fd` became Ixora socket `sk`: every epoll set
/// that watched it while undecided (nginx registers an upstream socket
/// before it connects) now watches the Ixora socket, and no longer its
/// placeholder in the kernel (an unconnected socket, which the kernel
/// reports writable and hung up), which `unwatch` takes out of the real
/// epoll instance `epfd` (true if it did).
pub fn adopt_undecided(fd: c_int, sk: Sock, unwatch: &mut dyn FnMut(c_int) -> bool) {
    take_undecided(fd, &mut |epfd, g, events, data| {
        if unwatch(epfd) {
            g.kernel = g.kernel.saturating_sub(1);
        }
        g.push(Item::new(fd, sk.s, sk.gen(), events, data, sk.seq()));
    });
}

/// Descriptors that name one undecided socket, as `(fd, inode)`: an
/// undecided descriptor's duplicates (dup, dup2, dup3, `F_DUPFD`), made
/// before the socket's bind, connect or first send. Kept only while such
/// duplicates exist (rarely), so that the socket's decision, its options
/// and `O_NONBLOCK` reach each of its descriptors, as they reach every
/// descriptor of one kernel socket. A record whose descriptor no longer
/// names that socket (closed, replaced, decided) is stale: its inode or
/// kind tells, and it goes at the next look.
static UNDECIDED_DUPS: Mutex<Vec<(c_int, u64)>> = Mutex::new(Vec::new());

/// [`UNDECIDED_DUPS`] is not empty (else no undecided socket looks).
static ANY_UNDECIDED_DUPS: AtomicBool = AtomicBool::new(false);

/// The inode of open descriptor `fd` if it is a socket (the same in every
/// descriptor of one socket, in every process).
pub fn socket_inode(fd: c_int) -> Option<u64> {
    // SAFETY: stat is plain old data; fstat(2) writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    let r = unsafe { libc::fstat(fd, &mut st) };
    (r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino)
}

/// `nfd` was made a duplicate of undecided descriptor `fd` (in the
/// kernel already): it is undecided too, with `fd`'s flags and kept
/// options, and close-on-exec as `cloexec` says.
pub fn dup_undecided(fd: c_int, nfd: c_int, cloexec: bool) {
    let (Some(e), Some(n)) = (entry(fd), entry(nfd)) else {
        return;
    };
    let Some(ino) = socket_inode(fd) else { return };
    let f = e.flags.load(Ordering::Relaxed) & !(fl::CLOEXEC_KNOWN | fl::CLOEXEC);
    n.flags.store(f | fl::cloexec(cloexec), Ordering::Relaxed);
    forget_undecided(nfd);
    {
        let mut p = PENDING_OPTS.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|(f, _, _)| *f != nfd);
        let mine: Vec<_> = p.iter().filter(|(f, _, _)| *f == fd).cloned().collect();
        p.extend(mine.into_iter().map(|(_, k, v)| (nfd, k, v)));
    }
    n.kind.store(kind::MAYBE, Ordering::Release);
    let mut d = UNDECIDED_DUPS.lock().unwrap_or_else(|e| e.into_inner());
    d.retain(|&(f, i)| f != nfd && !(f == fd && i != ino));
    if !d.contains(&(fd, ino)) {
        d.push((fd, ino));
    }
    d.push((nfd, ino));
    ANY_UNDECIDED_DUPS.store(true, Ordering::Relaxed);
}

/// The other descriptors of this process that name the same undecided
/// socket as `fd` (its duplicates, still undecided); `take`: the socket
/// is being decided through `fd`, and its record goes. Empty at once
/// when no undecided socket has a duplicate.
pub fn undecided_dups(fd: c_int, take: bool) -> Vec<c_int> {
    if !ANY_UNDECIDED_DUPS.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let mut d = UNDECIDED_DUPS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ino) = socket_inode(fd) else {
        return Vec::new();
    };
    d.retain(|&(f, i)| f == fd || (kind_of(f) == kind::MAYBE && socket_inode(f) == Some(i)));
    let dups = d
        .iter()
        .filter(|&&(f, i)| i == ino && f != fd)
        .map(|&(f, _)| f)
        .collect();
    if take {
        d.retain(|&(_, i)| i != ino);
    }
    if d.is_empty() {
        ANY_UNDECIDED_DUPS.store(false, Ordering::Relaxed);
    }
    dups
}

/// Set (`on`) or clear flag `bit` of undecided descriptor `fd` and its
/// duplicates (an option, `O_NONBLOCK`: the socket's, not one
/// descriptor's).
pub fn flag_undecided(fd: c_int, bit: u32, on: bool) {
    for f in std::iter::once(fd).chain(undecided_dups(fd, false)) {
        if let Some(e) = entry(f) {
            set_flag(e, bit, on);
        }
    }
}

/// Set (`on`) or clear flag `bit` in one descriptor's entry.
fn set_flag(e: &FdEntry, bit: u32, on: bool) {
    if on {
        e.flags.fetch_or(bit, Ordering::Relaxed);
    } else {
        e.flags.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// Undecided descriptor `fd` stays the kernel's (bound or connected
/// where Ixora does not serve): so do its duplicates.
pub fn decide_kernel(fd: c_int) {
    for f in std::iter::once(fd).chain(undecided_dups(fd, true)) {
        if let Some(e) = entry(f) {
            e.kind.store(kind::NONE, Ordering::Release);
        }
    }
}

/// Set (`on`) or clear flag `bit` on every descriptor of this process
/// that is Ixora socket `sk` (a scan of the table, unless `sk`'s
/// descriptor is its only holder).
pub fn flag_socket(sk: Sock, bit: u32, on: bool) {
    let set = |e: &FdEntry| set_flag(e, bit, on);
    set(sk.e);
    if sk.a.r.up_slot(sk.s).refs.load(Ordering::Acquire) <= 1 {
        return;
    }
    let Some(t) = TABLE.get() else { return };
    let gen = sk.e.gen.load(Ordering::Relaxed);
    for e in t.iter() {
        if e.kind.load(Ordering::Acquire) == kind::IXORA
            && e.slot.load(Ordering::Relaxed) == sk.s
            && e.gen.load(Ordering::Relaxed) == gen
        {
            set(e);
        }
    }
}

/// Give back what [`take_epoll_interest`] took.
pub fn restore_epoll_interest(taken: Vec<(c_int, &'static Mutex<Epoll>, Item)>) {
    for (_, ep, it) in taken {
        ep.lock().unwrap_or_else(|e| e.into_inner()).push(it);
    }
}

/// Track a new epoll instance.
pub fn epoll_new(epfd: c_int) {
    if epfd < 0 || epfd as usize >= MAXFD {
        return;
    }
    let t = EPOLLS.get_or_init(|| zeroed_table(MAXFD));
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let b = Box::into_raw(Box::new(Mutex::new(Epoll::new(
        NEXT_ID.fetch_add(1, Ordering::Relaxed),
    ))));
    t[epfd as usize].store(b, Ordering::Release);
    EPOLLS_END.fetch_max(epfd as usize + 1, Ordering::AcqRel);
}

/// `new` was made a duplicate of epoll descriptor `old` (`dup`, `dup2`,
/// `dup3`, `F_DUPFD`): it names the same set, as the kernel's duplicate
/// names the same instance. mio (tokio's reactor) registers through a
/// duplicate of the descriptor it waits on: its Ixora sockets went into
/// the kernel's instance, as kernel placeholders, and it spun.
pub fn epoll_dup(old: c_int, new: c_int) {
    let (Some(ep), Some(t)) = (epoll(old), EPOLLS.get()) else {
        return;
    };
    if new < 0 || new as usize >= MAXFD || new == old {
        return;
    }
    epoll_forget(new);
    ep.lock().unwrap_or_else(|p| p.into_inner()).names += 1;
    t[new as usize].store(ep as *const _ as *mut _, Ordering::Release);
    EPOLLS_END.fetch_max(new as usize + 1, Ordering::AcqRel);
}

/// Forget descriptor `epfd` of an epoll set; the set ends with the last
/// descriptor that names it (its memory is leaked on purpose; see
/// [`epoll`]).
pub fn epoll_forget(epfd: c_int) {
    crate::kwatch::forget(epfd);
    if let Some(ep) = epoll(epfd) {
        let mut g = ep.lock().unwrap_or_else(|p| p.into_inner());
        g.names = g.names.saturating_sub(1);
        if g.names == 0 && g.poke >= 0 {
            if let Some(e) = entry(g.poke) {
                e.kind.store(kind::NONE, Ordering::Release);
            }
            real::sys_close(g.poke);
            g.poke = -1;
        }
    }
    if let Some(t) = EPOLLS.get() {
        if epfd >= 0 && (epfd as usize) < MAXFD {
            t[epfd as usize].store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// Whether `fd` is a pooled placeholder (closed, as far as the program
/// knows).
pub fn pooled(fd: c_int) -> bool {
    kind_of(fd) == kind::POOLED
}

/// The soft descriptor limit as last read for the pool's cap (0: to be
/// read again).
static NOFILE_SEEN: AtomicI32 = AtomicI32::new(0);

/// The program changed its descriptor limit: the pool's cap follows.
pub fn nofile_changed() {
    NOFILE_SEEN.store(0, Ordering::Relaxed);
}

/// How many placeholders the pool may hold: an eighth of the soft
/// descriptor limit, from 16 to 4,096. The pool spares `accept` a system
/// call per connection; the numbers it holds are the program's limit
/// too, so a burst of connections that closed must not leave the program
/// without descriptors for its files (a server at Debian's limit of
/// 1,024 that once held 1,000 connections could open 24 files after
/// they closed).
fn pool_cap() -> usize {
    let mut soft = NOFILE_SEEN.load(Ordering::Relaxed);
    if soft == 0 {
        soft = soft_nofile().max(1);
        NOFILE_SEEN.store(soft, Ordering::Relaxed);
    }
    (soft as usize / 8).clamp(16, 4096)
}

/// Put the placeholder of a just-closed Ixora socket in the pool, or, if
/// the pool holds its cap ([`pool_cap`]), close the highest of its
/// numbers and `fd` in the kernel (the lowest stay: POSIX gives the lowest
/// free number to a new descriptor). Returns whether that took a system
/// call. A number is marked pooled under the pool's lock, before another
/// thread can take it: marked after, a thread's `accept` or `socket` that
/// took the number meanwhile and installed its new socket had it marked
/// pooled again — the program got EBADF on the socket it had just
/// accepted, and its connection was never closed.
pub fn pool(a: &Attached, fd: c_int) -> bool {
    let mut p = a.pool.lock().unwrap_or_else(|p| p.into_inner());
    // (The limit is not even looked at while the pool is small.)
    let out = if p.len() < 16 || p.len() < pool_cap() {
        None
    } else {
        match p.iter().enumerate().max_by_key(|(_, &f)| f) {
            Some((i, &high)) if high > fd => {
                p.swap_remove(i);
                Some(high)
            }
            _ => Some(fd),
        }
    };
    if out != Some(fd) {
        if let Some(e) = entry(fd) {
            e.kind.store(kind::POOLED, Ordering::Release);
        }
        p.push(fd);
    }
    if let Some(c) = out {
        // (The entry first: once closed, the number may be another thread's.)
        if let Some(e) = entry(c) {
            e.kind.store(kind::NONE, Ordering::Release);
        }
        real::sys_close(c);
    }
    out.is_some()
}

/// Take `fd` out of the pool (the program is about to reuse its number,
/// e.g. as the target of dup2, or the kernel is about to close it).
pub fn unpool(fd: c_int) {
    let clear = || {
        if let Some(e) = entry(fd) {
            e.kind.store(kind::NONE, Ordering::Release);
        }
    };
    match attached() {
        Some(a) => {
            let mut p = a.pool.lock().unwrap_or_else(|p| p.into_inner());
            p.retain(|&p| p != fd);
            clear();
        }
        None => clear(),
    }
}

/// A placeholder descriptor for a new Ixora socket: from the pool, or a
/// fresh one (a system call), close-on-exec if `cloexec`. A pooled one is
/// as its last socket left it (its entry's [`fl::CLOEXEC_KNOWN`] bits).
pub fn placeholder(a: &Attached, cloexec: bool) -> (c_int, bool) {
    if let Some(fd) = take_lowest_pooled(a, c_int::MAX) {
        return (fd, false);
    }
    (real::sys_placeholder(cloexec), true)
}

/// Take the lowest pooled number below `below` out of the pool, if any:
/// to the program pooled numbers are closed, and POSIX gives the lowest
/// free number to a new descriptor.
pub fn take_lowest_pooled(a: &Attached, below: c_int) -> Option<c_int> {
    let mut p = a.pool.lock().unwrap_or_else(|p| p.into_inner());
    let (i, &fd) = p
        .iter()
        .enumerate()
        .filter(|(_, &f)| f < below)
        .min_by_key(|(_, &f)| f)?;
    p.swap_remove(i);
    Some(fd)
}

/// Make `fd` an Ixora socket for slot `s` of generation `gen`.
pub fn install(fd: c_int, s: u32, gen: u32, flags: u32) {
    if let Some(e) = entry(fd) {
        e.slot.store(s, Ordering::Relaxed);
        e.gen.store(gen, Ordering::Relaxed);
        e.flags.store(flags, Ordering::Relaxed);
        e.kind.store(kind::IXORA, Ordering::Release);
    }
}

/// Drop our claim on `fd`'s Ixora socket: the last reference asks the
/// service to close it. Returns true if that took a system call.
pub fn release_sock(sk: Sock) -> bool {
    sk.e.kind.store(kind::NONE, Ordering::Release);
    note_close();
    if !sk.live() {
        return false;
    }
    let linger0 = sk.e.flags.load(Ordering::Relaxed) & fl::LINGER0 != 0;
    drop_ref(sk.a, sk.s, linger0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn item(events: u32) -> Item {
        Item::new(3, 0, 0, events, 7, 1)
    }

    fn minor_faults() -> i64 {
        // SAFETY: getrusage(2) fills a live, zeroed plain-old-data struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
        u.ru_minflt
    }

    /// The descriptor table (1 MiB) costs its first user no page faults
    /// up front: built entry by entry it took 256, 0.4–0.7 ms of a
    /// program's first `socket()`. Its entries start as "not ours".
    #[test]
    fn a_new_descriptor_table_touches_no_pages() {
        let before = minor_faults();
        let t: Box<[FdEntry]> = zeroed_table(MAXFD);
        let after = minor_faults();
        assert!(
            after - before < 16,
            "{} page faults to make a {}-byte table",
            after - before,
            std::mem::size_of_val(&*t)
        );
        for fd in [0, 1, MAXFD / 2, MAXFD - 1] {
            let e = &t[fd];
            assert_eq!(e.kind.load(Ordering::Relaxed), kind::NONE);
            assert_eq!(e.flags.load(Ordering::Relaxed), 0);
            assert_eq!(
                (
                    e.slot.load(Ordering::Relaxed),
                    e.gen.load(Ordering::Relaxed)
                ),
                (0, 0)
            );
        }
        let p: Box<[AtomicPtr<u8>]> = zeroed_table(3);
        assert!(p.iter().all(|p| p.load(Ordering::Relaxed).is_null()));
        assert!(zeroed_table::<AtomicU64>(0).is_empty());
    }

    /// The indexes follow every push, removal and change: each slot's and
    /// each descriptor's chain holds exactly its items, the interest
    /// bitmaps say which slots are watched (asked `EPOLLOUT` of, watched
    /// only by `EPOLLEXCLUSIVE` items), and each added item is looked at
    /// by the next scan.
    #[test]
    fn the_indexes_follow_the_items() {
        let mut g = Epoll::new(1);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (inp, out) = (libc::EPOLLIN as u32, libc::EPOLLOUT as u32);
        let ex = libc::EPOLLEXCLUSIVE as u32;
        for step in 0..5000 {
            match rnd(5) {
                0 | 1 => {
                    // Slots past the first bitmap word too.
                    let slot = rnd(100) as u32;
                    let ev = if rnd(2) == 0 { inp } else { inp | out };
                    let ev = if rnd(3) == 0 { ev | ex } else { ev };
                    g.push(Item::new(rnd(30) as c_int, slot, 0, ev, 0, 0));
                    assert_eq!(g.pending.last(), Some(&slot));
                }
                2 if !g.items().is_empty() => {
                    let i = rnd(g.items().len() as u64) as usize;
                    let fd = g.items()[i].fd;
                    assert_eq!(g.remove(i).fd, fd);
                }
                3 if !g.items().is_empty() => {
                    let i = rnd(g.items().len() as u64) as usize;
                    let ev = g.items()[i].events ^ out;
                    g.set_events(i, ev);
                }
                _ => {
                    let cut = rnd(100) as u32;
                    while let Some(i) = g.items().iter().position(|it| it.slot == cut) {
                        g.remove(i);
                    }
                }
            }
            // The interest bitmaps: a bit for each slot watched, and for
            // each one asked EPOLLOUT of.
            let (mut rx, mut tx, mut excl) = (Vec::new(), Vec::new(), Vec::new());
            g.copy_interest(&mut rx, &mut tx, &mut excl);
            for slot in 0..100u32 {
                let bit = |b: &[u64]| {
                    b.get(slot as usize / 64)
                        .is_some_and(|w| w >> (slot % 64) & 1 == 1)
                };
                let its = || g.items().iter().filter(|it| it.slot == slot);
                assert_eq!(
                    bit(&rx),
                    its().count() > 0,
                    "rx of {slot} after step {step}"
                );
                assert_eq!(
                    bit(&tx),
                    its().any(|it| it.events & out != 0),
                    "tx of {slot} after step {step}"
                );
                assert_eq!(
                    bit(&excl),
                    its().count() > 0 && its().all(|it| it.events & ex != 0),
                    "excl of {slot} after step {step}"
                );
            }
            g.pending.clear();
            for fd in 0..30 {
                let mut chain: Vec<usize> = g.of_fd(fd).collect();
                chain.sort_unstable();
                let want: Vec<usize> = (0..g.items().len())
                    .filter(|&i| g.items()[i].fd == fd)
                    .collect();
                assert_eq!(chain, want, "descriptor {fd} after step {step}");
            }
            for slot in 0..100u32 {
                let mut chain = Vec::new();
                let mut i = g.first_of(slot);
                while i != NO_ITEM {
                    chain.push(i as usize);
                    i = g.items()[i as usize].next;
                }
                chain.sort_unstable();
                let want: Vec<usize> = (0..g.items().len())
                    .filter(|&i| g.items()[i].slot == slot)
                    .collect();
                assert_eq!(chain, want, "slot {slot} after step {step}");
            }
        }
    }

    /// Data that arrives while a scan looks at a socket (after it found
    /// nothing to read, before it took the change counter) is reported at
    /// the next scan: the edge is not consumed unseen.
    #[test]
    fn a_change_during_a_scan_is_reported_at_the_next() {
        let (inn, out) = (libc::EPOLLIN as u32, libc::EPOLLOUT as u32);
        let mut it = item(inn | out | libc::EPOLLET as u32);
        let seq = Cell::new(1u32);
        let readable = Cell::new(false);
        let ready = |r: &Cell<bool>| if r.get() { inn | out } else { out };
        // The scan: writable, nothing to read; the service then writes
        // data into the ring and counts the change.
        let first = it.report(
            || seq.get(),
            || {
                let rev = ready(&readable);
                readable.set(true);
                seq.set(seq.get() + 1);
                rev
            },
        );
        assert_eq!(first, out);
        let next = it.report(|| seq.get(), || ready(&readable));
        assert_eq!(next, inn | out, "the data's edge was lost");
        // Reported once: edge-triggered.
        assert_eq!(it.report(|| seq.get(), || ready(&readable)), 0);
    }

    /// Level-triggered: reported while ready, whatever the counter.
    #[test]
    fn level_triggered_items_report_while_ready() {
        let mut it = item(libc::EPOLLIN as u32);
        for _ in 0..3 {
            assert_eq!(
                it.report(|| 5, || libc::EPOLLIN as u32),
                libc::EPOLLIN as u32
            );
        }
        assert_eq!(it.report(|| 5, || libc::EPOLLOUT as u32), 0);
    }
}
