//! poll, ppoll, select and pselect over Ixora sockets and kernel descriptors.

use super::*;
use std::time::Duration;

/// poll(2) and ppoll(2) (`sigmask`: ppoll's, null for poll) of a set with
/// Ixora sockets; None: none in it (the kernel's call then). As Linux's,
/// it returns 0 only once `timeout` has passed: a wait woken by a
/// readiness that was gone at the final look (another thread took the
/// bytes) waits on for what is left. `timeout`: None, no limit; kept to
/// the nanosecond (`ppoll`, `select`, `pselect`: a wait for 1 µs does not
/// sleep a millisecond).
fn poll_common(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: Option<Duration>,
    name: usize,
    sigmask: *const sigset_t,
) -> Option<c_int> {
    // (The clock only for a wait that can end by its time.)
    let start = timeout
        .filter(|t| !t.is_zero())
        .map(|_| std::time::Instant::now());
    let mut left = timeout;
    loop {
        let n = poll_once(fds, nfds, left, name, sigmask)?;
        if n != 0 || timeout.is_some_and(|t| t.is_zero()) {
            return Some(n);
        }
        if let (Some(start), Some(t)) = (start, timeout) {
            let spent = start.elapsed();
            if spent >= t {
                return Some(0);
            }
            left = Some(t - spent);
        }
    }
}

thread_local! {
    /// When this thread's `poll` or `select` last looked at the kernel
    /// descriptors of a set with ready sockets.
    static POLL_KERNEL_SEEN: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
    /// The slots (to read, to write) of the thread's poll and select waits.
    static POLL_SLOTS: std::cell::Cell<(Vec<u32>, Vec<u32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
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
    timeout: Option<Duration>,
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
    if n + k as usize == 0 && timeout.is_none_or(|t| !t.is_zero()) {
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
pub(super) fn kernel_side(sk: Sock) -> bool {
    sk.e.flags.load(Ordering::Relaxed) & fl::KSIDE != 0
}

/// Whether the descriptor of `sk` may listen or be bound in the kernel (a
/// socket with a kernel side; also a listener on any address a `fork`
/// child made listen, or whose kernel side failed after its bind, and a
/// UDP socket on any address, whose `dup` may hold one), or whose file
/// another process may hold ([`fl::PASSED`]): it is closed, never pooled
/// as a placeholder.
pub(super) fn kernel_may_hold(sk: Sock) -> bool {
    kernel_side(sk)
        || sk.e.flags.load(Ordering::Relaxed) & fl::PASSED != 0
        || (sk.e.flags.load(Ordering::Relaxed) & fl::BOUND_ANY != 0
            && (sk.dgram() || sk.state() == st::LISTEN))
}

/// poll(2).
#[no_mangle]
pub extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    match poll_common(
        fds,
        nfds,
        state::ms_limit(timeout),
        call("poll"),
        std::ptr::null(),
    ) {
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

/// A `ppoll`/`pselect` timeout (null: none). A negative one is taken as
/// zero, as the shim always took it (Linux says `EINVAL`).
fn ts_limit(ts: *const timespec) -> Option<Duration> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: ppoll(2)'s contract: a readable timespec or null.
    let t = unsafe { &*ts };
    if t.tv_sec < 0 || t.tv_nsec < 0 {
        return Some(Duration::ZERO);
    }
    Some(Duration::new(
        t.tv_sec as u64,
        (t.tv_nsec as u32).min(999_999_999),
    ))
}

/// ppoll(2) (the signal mask applies when the call passes to the kernel).
#[no_mangle]
pub extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    ts: *const timespec,
    ss: *const sigset_t,
) -> c_int {
    match poll_common(fds, nfds, ts_limit(ts), call("poll"), ss) {
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
    limit: Option<Duration>,
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
        limit,
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
    let limit = if tv.is_null() {
        None
    } else {
        // SAFETY: select's contract: a readable timeval or null.
        let t = unsafe { &*tv };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            Some(Duration::ZERO) // (as ever here; Linux: EINVAL)
        } else {
            let us = (t.tv_usec as u64).min(999_999);
            Some(Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(us))
        }
    };
    match select_common(nfds, r, w, e, limit, std::ptr::null()) {
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
    match select_common(nfds, r, w, e, ts_limit(ts), ss) {
        Some(x) => x,
        None => {
            state::passthrough();
            real!(pselect: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int)(
                nfds, r, w, e, ts, ss,
            )
        }
    }
}
