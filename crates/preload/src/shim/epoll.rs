//! epoll on sets that may mix Ixora sockets and kernel descriptors.

use super::*;
use std::time::Duration;

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
pub(super) fn kernel_side_events(events: u32) -> u32 {
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
pub(super) const KERNEL_PEEK: Duration = Duration::from_micros(200);

/// Ask the kernel for the events of the kernel descriptors of `epfd`
/// (no timeout), keeping `kwatch`'s view of them up to date.
fn kernel_events(
    epfd: c_int,
    wait: &dyn Fn(*mut epoll_event, c_int, Timeout) -> c_int,
    out: *mut epoll_event,
    max: c_int,
) -> c_int {
    crate::kwatch::asking(epfd);
    let mut k = wait(out, max, Some(Duration::ZERO));
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

/// A wait's timeout: `None` waits for ever.
type Timeout = Option<Duration>;

/// The timeout of a call that takes milliseconds (negative: none).
fn timeout_ms(ms: c_int) -> Timeout {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

fn epoll_common(
    epfd: c_int,
    out: *mut epoll_event,
    max: c_int,
    timeout: Timeout,
    sigmask: *const sigset_t,
    fine: bool,
) -> c_int {
    // The kernel's wait: by `epoll_pwait2` (Linux 5.11, which the program's
    // kernel has) for a program that asked it (`fine`) a timeout that is
    // not whole milliseconds; else by `epoll_[p]wait`, to the millisecond,
    // rounded up (what is left of a timeout after a look is not whole).
    let real_wait = |o: *mut epoll_event, m: c_int, t: Timeout| match t {
        Some(d) if fine && d.subsec_nanos() % 1_000_000 != 0 => {
            let ts = timespec {
                tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            real!(epoll_pwait2: fn(c_int, *mut epoll_event, c_int, *const timespec, *const sigset_t) -> c_int)(
                epfd, o, m, &ts, sigmask,
            )
        }
        _ => {
            let t = t.map_or(-1, |d| {
                d.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int
            });
            if sigmask.is_null() {
                real!(epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int)(epfd, o, m, t)
            } else {
                real!(epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int)(
                    epfd, o, m, t, sigmask,
                )
            }
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
            _ if timeout != Some(Duration::ZERO) && max > 0 && !out.is_null() => {
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
        return epoll_common(epfd, out, max, left_of(timeout, start), sigmask, fine);
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
    if kernel > 0 && (n == 0 || n < max) && (n > 0 || timeout == Some(Duration::ZERO)) {
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
    if timeout == Some(Duration::ZERO) {
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
        if ok && n == 0 && (moved || pfd[0].revents != 0) && left != Some(Duration::ZERO) {
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
}

/// What is left at `start`'s elapsed time of `timeout` (none stays none;
/// never below zero).
fn left_of(timeout: Timeout, start: std::time::Instant) -> Timeout {
    timeout.map(|t| t.saturating_sub(start.elapsed()))
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
    epoll_common(epfd, out, max, timeout_ms(timeout), std::ptr::null(), false)
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
    epoll_common(epfd, out, max, timeout_ms(timeout), sigmask, false)
}

/// epoll_pwait2(2): epoll_pwait with a `timespec` timeout (NULL: none),
/// kept to the nanosecond (until 2026-11-30, for a set with Ixora
/// sockets, rounded up to the millisecond); a set of kernel descriptors
/// only goes to the kernel's call as it is. A negative or malformed
/// timeout is `EINVAL`, as for the kernel.
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
    let t = if timeout.is_null() {
        None
    } else {
        // SAFETY: epoll_pwait2(2)'s contract: a non-null `timeout` points
        // to a readable timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            set_errno(libc::EINVAL);
            return -1;
        }
        Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    };
    epoll_common(epfd, out, max, t, sigmask, true)
}
