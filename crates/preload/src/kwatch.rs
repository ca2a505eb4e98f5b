//! The kernel descriptors of a mixed epoll set, watched without a system
//! call per `epoll_wait`.
//!
//! An epoll set that holds both Ixora sockets and kernel descriptors keeps
//! the kernel ones in a real epoll instance. To learn whether one of them
//! became ready, `epoll_wait` would have to ask the kernel — a system call
//! on every call that the rings alone could have answered. Instead, each
//! such epoll instance is watched by a multishot `IORING_OP_POLL_ADD` on
//! an io_uring of this process: the kernel posts a completion into the
//! ring's shared memory every time something is added to the instance's
//! ready list, and `epoll_wait` reads the completion queue in user space.
//! It enters the kernel for the kernel descriptors only when a completion
//! says they may have events (or the last look found some: they are
//! level-triggered and may still be ready).
//!
//! The kernel side of a socket on any address (its descriptor is bound
//! in the kernel too, for the kernel's own addresses: a listener, a UDP
//! socket) is watched the same way, through a private epoll instance that
//! holds only it ([`side_maybe_ready`]): a poll request holds a reference
//! to the file it polls, and one on the socket itself would keep a closed
//! listener listening if its cancel were lost; an epoll registration
//! holds none. A completion is posted by task work of the thread that
//! armed the poll, so it may lag an arrival: callers also mark the watch
//! ready ([`side_answered`]) whenever the program learns of the kernel
//! side by another way (an `epoll_wait` or `poll` that reports it).
//!
//! Where io_uring is not available (an old kernel, a seccomp filter), or
//! the ring is busy in another thread, callers fall back to looking at the
//! kernel descriptors at a bounded interval. Every lock here is taken with
//! `try_lock`: a thread never waits for another (nor for one that existed
//! only in the parent of a forked child).

use crate::state::{self, FORK_GEN, MAXFD};
use io_uring::{cqueue, opcode, types, IoUring};
use libc::c_int;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Completion queue entries (twice the submission entries): one
/// completion per wake-up of a watched instance, drained at every look.
const ENTRIES: u32 = 64;

struct Watch {
    ring: IoUring,
    /// [`FORK_GEN`] when the ring was made: a forked child makes its own.
    fork_gen: u64,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);
/// io_uring could not be set up here: never try again.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
/// Tokens of the polls: epoll descriptor in the high half, a sequence
/// number in the low (a completion of a closed instance's poll is not
/// taken for a new instance with the same number).
static SEQ: AtomicU32 = AtomicU32::new(1);

struct Table {
    /// Per epoll descriptor: the token of its poll in this process's ring
    /// (0: not watched).
    armed: Box<[AtomicU64]>,
    /// Per epoll descriptor: its kernel descriptors may have events.
    ready: Box<[AtomicBool]>,
    /// Per kernel side's descriptor: 1 + the private epoll instance that
    /// watches it (0: none yet).
    side_ep_of: Box<[AtomicI32]>,
}

static TABLE: OnceLock<Table> = OnceLock::new();

fn table() -> &'static Table {
    TABLE.get_or_init(|| Table {
        armed: state::zeroed_table(MAXFD),
        ready: state::zeroed_table(MAXFD),
        side_ep_of: state::zeroed_table(MAXFD),
    })
}

fn index(epfd: c_int) -> Option<usize> {
    (epfd >= 0 && (epfd as usize) < MAXFD).then_some(epfd as usize)
}

/// This process's ring (made on first use, and anew in a forked child,
/// whose inherited copy is the parent's).
fn ring(w: &mut Option<Watch>) -> Option<&mut IoUring> {
    let gen = FORK_GEN.load(Ordering::Relaxed);
    if w.as_ref().is_some_and(|w| w.fork_gen != gen) {
        // Inherited: what it watches is the parent's business. Our copy
        // of the descriptor and the mappings go; nothing of ours is armed.
        if let Some(old) = w.take() {
            state::forget_internal(old.ring.as_raw_fd());
            drop(old);
        }
        let t = table();
        for a in t.armed.iter() {
            a.store(0, Ordering::Relaxed);
        }
    }
    if w.is_none() {
        if UNAVAILABLE.load(Ordering::Relaxed) {
            return None;
        }
        match IoUring::new(ENTRIES).and_then(numbered_high) {
            Ok(ring) => {
                *w = Some(Watch {
                    ring,
                    fork_gen: gen,
                });
            }
            Err(_) => {
                UNAVAILABLE.store(true, Ordering::Relaxed);
                return None;
            }
        }
    }
    w.as_mut().map(|w| &mut w.ring)
}

/// Drain the completion queue: mark the instances it names as maybe
/// ready; a poll that ended (no `F_MORE`: an error, or an overflow of the
/// queue) is re-armed at its instance's next look.
/// The ring, its descriptor numbered high and ours (`state::internal`):
/// made again on the moved descriptor, the first one's mappings and
/// number let go.
fn numbered_high(ring: IoUring) -> std::io::Result<IoUring> {
    let low = ring.as_raw_fd();
    // SAFETY: dup(2) has no memory arguments; the copy is ours.
    let copy = unsafe { crate::real::syscall_fn()(libc::SYS_dup, low) } as c_int;
    if copy < 0 {
        state::mark_internal(low);
        return Ok(ring);
    }
    let high = state::internal(copy);
    let params = ring.params().clone();
    drop(ring);
    // SAFETY: `high` is ours and refers to the ring `params` describe
    // (a duplicate of its descriptor; the ring lives on through it).
    unsafe { IoUring::from_fd(high, params) }
}

fn drain(ring: &mut IoUring) {
    let t = table();
    let mut overflow = false;
    {
        let mut cq = ring.completion();
        overflow |= cq.overflow() > 0;
        for e in &mut cq {
            let token = e.user_data();
            let Some(i) = index((token >> 32) as c_int) else {
                continue;
            };
            if t.armed[i].load(Ordering::Relaxed) != token {
                continue; // a poll of a closed instance
            }
            t.ready[i].store(true, Ordering::Release);
            if !cqueue::more(e.flags()) {
                t.armed[i].store(0, Ordering::Relaxed);
            }
        }
    }
    if overflow || ring.submission().cq_overflow() {
        // Completions were lost to an overflow: every watched instance
        // may be ready; flush the kernel's backlog.
        for (a, r) in t.armed.iter().zip(t.ready.iter()) {
            if a.load(Ordering::Relaxed) != 0 {
                r.store(true, Ordering::Release);
            }
        }
        let _ = ring.submit();
        for _ in ring.completion() {}
    }
}

/// Whether the kernel descriptors of the epoll set `epfd` may have events
/// (or the listening socket `epfd` a connection):
/// `Some(false)` is a promise that they had none the last time the kernel
/// was asked and that nothing was added to the instance's ready list
/// since; `None`: not known here (no io_uring, or the ring is busy) — look
/// at the kernel as if without this module. The first look at an instance
/// arms its poll (one system call) and answers `Some(true)`.
pub fn maybe_ready(epfd: c_int) -> Option<bool> {
    let mut g = WATCH.try_lock().ok()?;
    look(&mut g, epfd)
}

/// [`maybe_ready`] with the ring's lock held.
fn look(g: &mut Option<Watch>, epfd: c_int) -> Option<bool> {
    let i = index(epfd)?;
    let t = table();
    let ring = ring(g)?;
    drain(ring);
    if t.armed[i].load(Ordering::Relaxed) == 0 {
        let token = (i as u64) << 32 | u64::from(SEQ.fetch_add(1, Ordering::Relaxed));
        let sqe = opcode::PollAdd::new(types::Fd(epfd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(token);
        // Armed before it is submitted: a `forget` from now on sees the
        // token and cancels it (it waits for this lock).
        t.armed[i].store(token, Ordering::Relaxed);
        // SAFETY: a poll request holds no pointer into our memory (only a
        // descriptor and an event mask), so nothing must outlive the call.
        if unsafe { ring.submission().push(&sqe) }.is_err() || ring.submit().is_err() {
            let _ = t.armed[i].compare_exchange(token, 0, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        t.ready[i].store(true, Ordering::Release);
        return Some(true);
    }
    Some(t.ready[i].load(Ordering::Acquire))
}

/// The caller is about to ask the kernel (`epoll_wait` with no timeout) for
/// the events of `epfd`: anything added to its ready list from now on posts
/// a new completion.
pub fn asking(epfd: c_int) {
    if let Some(i) = index(epfd) {
        table().ready[i].store(false, Ordering::Release);
    }
}

/// The kernel returned `k` events of `epfd`: if any, they may still be
/// ready (level-triggered), so look again next time.
pub fn answered(epfd: c_int, k: c_int) {
    if let Some(i) = index(epfd) {
        if k != 0 {
            table().ready[i].store(true, Ordering::Release);
        }
    }
}

/// The epoll instance `epfd` is being closed: cancel its poll (the ring
/// would otherwise keep the instance alive).
pub fn forget(epfd: c_int) {
    let mut g = lock_bounded();
    cancel(g.as_deref_mut(), epfd);
}

/// The ring's lock, waited for a little: it is held for microseconds at
/// a time, but a lock copied locked into a forked child is never
/// released. None: not had.
fn lock_bounded() -> Option<std::sync::MutexGuard<'static, Option<Watch>>> {
    let t0 = std::time::Instant::now();
    loop {
        match WATCH.try_lock() {
            Ok(g) => return Some(g),
            Err(_) if t0.elapsed() < std::time::Duration::from_millis(2) => {
                std::thread::yield_now()
            }
            Err(_) => return None,
        }
    }
}

/// Disarm the watch of `epfd` and cancel its poll, if the ring (`w`, its
/// lock held) is had and is this process's.
fn cancel(w: Option<&mut Option<Watch>>, epfd: c_int) {
    let Some(i) = index(epfd) else { return };
    let Some(t) = TABLE.get() else { return };
    let token = t.armed[i].swap(0, Ordering::Relaxed);
    t.ready[i].store(false, Ordering::Relaxed);
    if token == 0 {
        return;
    }
    if let Some(w) = w.and_then(|w| w.as_mut()) {
        if w.fork_gen == FORK_GEN.load(Ordering::Relaxed) {
            let sqe = opcode::PollRemove::new(token).build().user_data(0);
            // SAFETY: as above; the request names the poll by its token.
            if unsafe { w.ring.submission().push(&sqe) }.is_ok() {
                let _ = w.ring.submit();
            }
        }
    }
}

/// The private epoll instance that watches the kernel side `fd`
/// (made on first use), or None if it cannot be made.
fn side_ep(fd: c_int) -> Option<c_int> {
    let i = index(fd)?;
    if UNAVAILABLE.load(Ordering::Relaxed) {
        // No io_uring to watch it with: no instance either.
        return None;
    }
    let t = table();
    let cur = t.side_ep_of[i].load(Ordering::Acquire);
    if cur > 0 {
        return Some(cur - 1);
    }
    // SAFETY: epoll_create1(2) has no memory arguments.
    let ep =
        unsafe { crate::real::syscall_fn()(libc::SYS_epoll_create1, libc::EPOLL_CLOEXEC) } as c_int;
    if ep < 0 {
        return None;
    }
    let ep = state::internal(ep);
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: `ev` is a valid event for the duration of the call.
    let r = unsafe {
        crate::real::syscall_fn()(
            libc::SYS_epoll_ctl,
            ep,
            libc::EPOLL_CTL_ADD,
            fd,
            &mut ev as *mut libc::epoll_event,
        )
    };
    if r < 0
        || t.side_ep_of[i]
            .compare_exchange(0, ep + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        state::forget_internal(ep);
        crate::real::sys_close(ep);
        let cur = t.side_ep_of[i].load(Ordering::Acquire);
        return (cur > 0).then(|| cur - 1);
    }
    Some(ep)
}

/// Whether the kernel side `fd` may have a connection or datagram
/// waiting: `Some(false)` is a promise that it had none when last asked
/// and that none arrived since, as far as the posted completions tell
/// (they may lag by task work: see the module's comment); `None`: not
/// known here. The first look arms the watch and answers `Some(true)`.
pub fn side_maybe_ready(fd: c_int) -> Option<bool> {
    // Under the ring's lock from the instance's number to its poll, so
    // that a `side_forget` cannot close the instance (and its number be
    // reused by a program's descriptor) in between.
    let mut g = WATCH.try_lock().ok()?;
    let ep = side_ep(fd)?;
    look(&mut g, ep)
}

/// The caller is about to accept, receive on or poll the kernel side `fd`.
pub fn side_asking(fd: c_int) {
    if let Some(ep) =
        index(fd).and_then(|i| TABLE.get().map(|t| t.side_ep_of[i].load(Ordering::Acquire)))
    {
        if ep > 0 {
            asking(ep - 1);
        }
    }
}

/// The kernel gave `k` connections, datagrams or events of the kernel
/// side `fd`: if any, there may be more.
pub fn side_answered(fd: c_int, k: c_int) {
    if let Some(ep) =
        index(fd).and_then(|i| TABLE.get().map(|t| t.side_ep_of[i].load(Ordering::Acquire)))
    {
        if ep > 0 {
            answered(ep - 1, k);
        }
    }
}

/// The kernel side `fd` is being closed: its watch goes.
pub fn side_forget(fd: c_int) {
    let Some(i) = index(fd) else { return };
    let Some(t) = TABLE.get() else { return };
    let mut g = lock_bounded();
    let ep = t.side_ep_of[i].swap(0, Ordering::AcqRel);
    if ep > 0 {
        cancel(g.as_deref_mut(), ep - 1);
        state::forget_internal(ep - 1);
        crate::real::sys_close(ep - 1);
    }
}
