//! One open queue of a shared-memory port: the data path.

use super::ring::{Desc, RawRing, RawWord};
use super::{bump, Shared, MAX_FRAME};
use crate::{PacketBuf, Pool, Queue};
use ixora_channel::os;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Empty polls before the clock is read to decide on arming.
const SPIN_POLLS: u32 = 64;
/// With the transmit ring full, look at the control socket every this many
/// calls.
const CHECK_EVERY: u32 = 256;
/// While armed and idle, arm afresh (look at the control socket, drain a
/// late doorbell) this often.
const REARM_EVERY: Duration = Duration::from_millis(1);
/// Publish returns at the latest after this many.
const RET_BATCH: u32 = 32;

pub(super) struct ShmQueue {
    shared: Arc<Shared>,
    q: usize,
    pool: Pool,
    epoll: OwnedFd,
    /// Our end of our doorbell (ours alone: polled and drained).
    doorbell: RawFd,
    /// The end of our doorbell the peer rings (to ring ourselves).
    self_bell: RawFd,
    peer_doorbell: RawFd,
    size: u32,

    /// Our descriptors to the peer: we produce.
    tx: RawRing<Desc>,
    tx_prod: u32,
    tx_cons_cache: u32,
    /// Offsets the peer hands back: we consume.
    txret: RawRing<AtomicU64>,
    txret_cons: u32,
    /// The peer's descriptors: we consume.
    rx: RawRing<Desc>,
    rx_cons: u32,
    rx_prod_cache: u32,
    /// Offsets we hand back: we produce.
    rxret: RawRing<AtomicU64>,
    rxret_prod: u32,
    /// `rxret_prod` as last published.
    rxret_published: u32,
    rxret_cons_cache: u32,

    wake_me_rx: RawWord,
    wake_me_ret: RawWord,
    wake_peer_rx: RawWord,
    wake_peer_ret: RawWord,

    peer_base: *const u8,
    peer_len: u64,
    own_base: usize,
    own_len: usize,
    chunk: u64,
    max_frame: usize,
    /// Chunks lent to the peer and not yet returned.
    inflight: u32,

    rx_armed: bool,
    ret_armed: bool,
    /// A doorbell may have rung (for returns) while armed for frames.
    stale: bool,
    /// Frames wait in the ring that we could not take (no buffer, or no
    /// room to return them): not idle.
    rx_pending: bool,
    idle_polls: u32,
    idle_since: Option<Instant>,
    armed_at: Instant,
    full_polls: u32,
    sleep_after: Duration,
    death_handled: bool,
}

impl ShmQueue {
    pub(super) fn open(shared: Arc<Shared>, q: usize, pool: Pool) -> io::Result<ShmQueue> {
        let qs = &shared.queues[q];
        let cfg = shared.cfg;
        let l = cfg.layout();
        let me = shared.side;
        let peer = 1 - me;
        let base = qs.rings.as_ptr();
        // SAFETY: `base` is the ring-area mapping of `l.len()` bytes (page
        // aligned), the offsets come from the same layout, and the mapping
        // lives in `shared`, which this queue holds for its whole life.
        let (tx, txret, rx, rxret, wake_me_rx, wake_me_ret, wake_peer_rx, wake_peer_ret) = unsafe {
            (
                RawRing::<Desc>::new(base, l.desc(me), l.n),
                RawRing::<AtomicU64>::new(base, l.ret(me), l.n),
                RawRing::<Desc>::new(base, l.desc(peer), l.n),
                RawRing::<AtomicU64>::new(base, l.ret(peer), l.n),
                RawWord::new(base, l.wake_rx(me)),
                RawWord::new(base, l.wake_ret(me)),
                RawWord::new(base, l.wake_rx(peer)),
                RawWord::new(base, l.wake_ret(peer)),
            )
        };
        let size = cfg.ring_size;
        // Resume from what was published (a queue may be reopened); the
        // peer's indices only seed caches and are checked like any other.
        let seed = |mine: u32, theirs: u32| {
            if mine.wrapping_sub(theirs) <= size {
                theirs
            } else {
                mine.wrapping_sub(size)
            }
        };
        let tx_prod = tx.prod().load(Ordering::Acquire);
        let rx_cons = rx.cons().load(Ordering::Acquire);
        let rxret_prod = rxret.prod().load(Ordering::Acquire);
        let doorbell = qs.doorbell.as_raw_fd();
        let epoll = os::epoll(&[doorbell, shared.sock.as_raw_fd()])?;
        // Not armed: keep the doorbell readable (see the module docs).
        wake_me_rx.get().store(0, Ordering::Relaxed);
        wake_me_ret.get().store(0, Ordering::Relaxed);
        os::ring_socket(qs.self_bell.as_raw_fd());
        let sleep_after = Duration::from_nanos(shared.sleep_after_ns.load(Ordering::Relaxed));
        Ok(ShmQueue {
            q,
            epoll,
            doorbell,
            self_bell: qs.self_bell.as_raw_fd(),
            peer_doorbell: qs.peer_doorbell.as_raw_fd(),
            size,
            tx,
            tx_prod,
            tx_cons_cache: seed(tx_prod, tx.cons().load(Ordering::Acquire)),
            txret,
            txret_cons: txret.cons().load(Ordering::Acquire),
            rx,
            rx_cons,
            rx_prod_cache: rx_cons,
            rxret,
            rxret_prod,
            rxret_published: rxret_prod,
            rxret_cons_cache: seed(rxret_prod, rxret.cons().load(Ordering::Acquire)),
            wake_me_rx,
            wake_me_ret,
            wake_peer_rx,
            wake_peer_ret,
            peer_base: qs.peer_pool.as_ptr(),
            peer_len: qs.peer_pool.len() as u64,
            own_base: pool.base() as usize,
            own_len: pool.region_len(),
            chunk: cfg.chunk_size as u64,
            max_frame: cfg.chunk_size.min(MAX_FRAME),
            inflight: pool.lent() as u32,
            pool,
            rx_armed: false,
            ret_armed: false,
            stale: false,
            rx_pending: false,
            idle_polls: 0,
            idle_since: None,
            armed_at: Instant::now(),
            full_polls: 0,
            sleep_after,
            death_handled: false,
            shared,
        })
    }

    fn stats(&self) -> &super::StatCells {
        &self.shared.queues[self.q].stats
    }

    /// The peer is gone: take back every chunk lent to it (it will never
    /// return them) and report.
    fn gone(&mut self) -> io::Error {
        if !self.death_handled {
            self.death_handled = true;
            for i in 0..self.pool.chunks() {
                self.pool.give_back(i);
            }
            self.inflight = 0;
        }
        io::Error::new(io::ErrorKind::BrokenPipe, "shm peer is gone")
    }

    #[inline]
    fn dead(&self) -> bool {
        self.shared.dead.load(Ordering::Relaxed)
    }

    /// Validate a descriptor from the peer: a frame of `1..=max_frame`
    /// bytes inside one chunk of the peer's region.
    #[inline]
    fn check(&self, off: u64, len: u32) -> Option<usize> {
        let len = len as usize;
        if len == 0 || len > self.max_frame {
            return None;
        }
        let end = off.checked_add(len as u64)?;
        if end > self.peer_len || (off & (self.chunk - 1)) + len as u64 > self.chunk {
            return None;
        }
        Some(len)
    }

    /// Take up to `max` frames from the peer's descriptor ring.
    fn receive(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        self.rx_pending = false;
        let size = self.size;
        let mut avail = self.rx_prod_cache.wrapping_sub(self.rx_cons);
        if avail == 0 {
            let p = self.rx.prod().load(Ordering::Acquire);
            let a = p.wrapping_sub(self.rx_cons);
            if a > size {
                // An honest producer is never more than a ring ahead.
                bump(&self.stats().bad_indices, 1);
                return 0;
            }
            if a == 0 {
                return 0;
            }
            self.rx_prod_cache = p;
            avail = a;
        }
        let want = avail.min(u32::try_from(max).unwrap_or(u32::MAX));
        let mut room = size - self.rxret_prod.wrapping_sub(self.rxret_cons_cache);
        if room < want {
            let c = self.rxret.cons().load(Ordering::Acquire);
            let used = self.rxret_prod.wrapping_sub(c);
            if used <= size {
                self.rxret_cons_cache = c;
                room = size - used;
            } else {
                bump(&self.stats().bad_indices, 1);
            }
        }
        let n = want.min(room);
        let (mut taken, mut returned, mut delivered) = (0u32, 0u32, 0u64);
        let (mut bad, mut dropped) = (0u64, 0u64);
        while taken < n {
            let d = self.rx.ent(self.rx_cons.wrapping_add(taken));
            let off = d.off.load(Ordering::Relaxed);
            let Some(len) = self.check(off, d.len.load(Ordering::Relaxed)) else {
                bad += 1;
                taken += 1;
                continue;
            };
            let Some(mut b) = self.pool.alloc() else {
                self.rx_pending = true;
                break;
            };
            if len <= b.capacity() {
                let dst = b.spare_mut();
                // SAFETY: `check` proved `off + len <= peer_len`, the
                // length of our read-only mapping of the peer's region,
                // which `self.shared` keeps alive; `dst` is a buffer we own
                // exclusively with at least `len` bytes; the two are
                // different mappings, so they do not overlap. No reference
                // to the peer's memory is formed, and any byte value is a
                // valid `u8`. An honest peer does not write the chunk until
                // we return it below (ordering: module docs).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.peer_base.add(off as usize),
                        dst.as_mut_ptr(),
                        len,
                    );
                }
                b.set_len(len);
                out.push(b);
                delivered += 1;
            } else {
                dropped += 1;
            }
            self.rxret
                .ent(self.rxret_prod.wrapping_add(returned))
                .store(off, Ordering::Relaxed);
            returned += 1;
            taken += 1;
        }
        if taken < avail && taken == 0 {
            self.rx_pending = true;
        }
        if taken > 0 {
            self.rx_cons = self.rx_cons.wrapping_add(taken);
            self.rx.cons().store(self.rx_cons, Ordering::Release);
        }
        if returned > 0 {
            self.rxret_prod = self.rxret_prod.wrapping_add(returned);
            // Published later (end of the cycle, an empty poll, or a full
            // batch) to keep the fence off the path from a frame arriving
            // to the answer leaving.
            if self.rxret_prod.wrapping_sub(self.rxret_published) >= RET_BATCH {
                self.publish_returns();
            }
        }
        let st = self.stats();
        if delivered > 0 {
            bump(&st.rx_frames, delivered);
        }
        if bad > 0 {
            bump(&st.bad_descriptors, bad);
        }
        if dropped > 0 {
            bump(&st.rx_dropped, dropped);
        }
        delivered as usize
    }

    /// Publish the offsets written to the return ring so far, and ring
    /// the peer if it waits for them.
    fn publish_returns(&mut self) {
        if self.rxret_published == self.rxret_prod {
            return;
        }
        self.rxret_published = self.rxret_prod;
        self.rxret.prod().store(self.rxret_prod, Ordering::Release);
        // Store (index) - fence - load (flag): pairs with the peer's store
        // (flag) - fence - load (index) when it arms in its reclaim.
        fence(Ordering::SeqCst);
        let w = self.wake_peer_ret.get();
        if w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::AcqRel) != 0 {
            os::ring_socket(self.peer_doorbell);
            bump(&self.stats().doorbells, 1);
        }
    }

    /// Drain our return ring into the pool.
    fn reclaim_returns(&mut self) {
        let p = self.txret.prod().load(Ordering::Acquire);
        let n = p.wrapping_sub(self.txret_cons);
        if n == 0 {
            return;
        }
        if n > self.size {
            bump(&self.stats().bad_indices, 1);
            return;
        }
        let mut bad = 0;
        for i in 0..n {
            let off = self
                .txret
                .ent(self.txret_cons.wrapping_add(i))
                .load(Ordering::Relaxed);
            let idx = off / self.chunk;
            if off < self.own_len as u64 && self.pool.give_back(idx as u32) {
                self.inflight = self.inflight.saturating_sub(1);
            } else {
                bad += 1;
            }
        }
        self.txret_cons = p;
        self.txret.cons().store(p, Ordering::Release);
        if bad > 0 {
            bump(&self.stats().bad_returns, bad);
        }
    }

    /// Arm the doorbell so the engine can sleep, then look at the rings
    /// once more (anything published before the peer could see the flag).
    fn arm(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        if !self.shared.check_peer() {
            return Err(self.gone());
        }
        self.publish_returns();
        // Drain first, then set the flag: a ring after the flag is visible
        // must not be eaten by this drain. A doorbell the peer shut down
        // would stay readable (we would never sleep): a misbehaving peer,
        // treated as a gone one.
        if !os::drain_socket(self.doorbell) {
            self.shared.dead.store(true, Ordering::Relaxed);
            return Err(self.gone());
        }
        self.stale = false;
        self.wake_me_rx.get().store(1, Ordering::Relaxed);
        if self.ret_armed {
            self.wake_me_ret.get().store(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        self.rx_armed = true;
        self.armed_at = Instant::now();
        bump(&self.stats().sleeps, 1);
        self.reclaim_returns();
        let n = self.receive(out, max);
        if n > 0 || self.rx_pending {
            self.busy();
        }
        Ok(n)
    }

    /// Frames arrived: leave the sleeping state, keeping the doorbell
    /// readable while not armed.
    fn busy(&mut self) {
        self.idle_polls = 0;
        self.idle_since = None;
        if self.rx_armed {
            self.rx_armed = false;
            if self.wake_me_rx.get().swap(0, Ordering::AcqRel) != 0 {
                // We took the flag back before the peer rang: the doorbell
                // may be empty since we drained it. Restore the invariant.
                os::ring_socket(self.self_bell);
            }
        }
    }

    /// An `rx_burst` found nothing: count idleness, arm when it is time.
    fn idle(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        self.publish_returns();
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.rx_armed {
            // A ring we did not consume (returns, or a peer that rang with
            // nothing to take) leaves the doorbell readable: re-arm so the
            // engine can really sleep.
            if self.stale
                || self.wake_me_rx.get().load(Ordering::Relaxed) == 0
                || (self.ret_armed && self.wake_me_ret.get().load(Ordering::Relaxed) == 0)
            {
                return self.arm(out, max);
            }
            // Now and then (REARM_EVERY) arm afresh: that looks at the
            // peer and drains a doorbell rung late by a peer that had taken
            // our flag before we went back to sleep. Timed, not counted, so
            // a busy poller makes no system calls for it while idle.
            if self.idle_polls.is_multiple_of(16) && self.armed_at.elapsed() >= REARM_EVERY {
                return self.arm(out, max);
            }
            return Ok(0);
        }
        if self.sleep_after.is_zero() {
            return self.arm(out, max);
        }
        if self.idle_polls < SPIN_POLLS || !self.idle_polls.is_multiple_of(16) {
            return Ok(0);
        }
        let now = Instant::now();
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) >= self.sleep_after {
            return self.arm(out, max);
        }
        Ok(0)
    }
}

impl Queue for ShmQueue {
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        if self.dead() {
            return Err(self.gone());
        }
        if max == 0 {
            return Ok(0);
        }
        let n = self.receive(out, max);
        if n > 0 || self.rx_pending {
            if self.idle_polls != 0 || self.rx_armed {
                self.busy();
            }
            return Ok(n);
        }
        self.idle(out, max)
    }

    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize> {
        if self.dead() {
            return Err(self.gone());
        }
        if frames.is_empty() {
            return Ok(0);
        }
        let size = self.size;
        let mut free = size - self.tx_prod.wrapping_sub(self.tx_cons_cache);
        if (free as usize) < frames.len() {
            let c = self.tx.cons().load(Ordering::Acquire);
            let used = self.tx_prod.wrapping_sub(c);
            if used <= size {
                self.tx_cons_cache = c;
                free = size - used;
            } else {
                bump(&self.stats().bad_indices, 1);
            }
        }
        let n = (free as usize).min(frames.len());
        if n == 0 {
            self.full_polls = self.full_polls.wrapping_add(1);
            if self.full_polls.is_multiple_of(CHECK_EVERY) && !self.shared.check_peer() {
                return Err(self.gone());
            }
            return Ok(0);
        }
        self.full_polls = 0;
        let (mut posted, mut dropped, mut copied) = (0u32, 0u64, 0u64);
        for f in frames.drain(..n) {
            let len = f.len();
            if len == 0 || len > self.max_frame {
                dropped += 1;
                continue;
            }
            // A buffer of our pool lies in our shared region (no other
            // live mapping can overlap it); any other is copied in.
            let at = f.as_slice().as_ptr() as usize;
            let f = if at.wrapping_sub(self.own_base) < self.own_len {
                f
            } else {
                match self.pool.copy_in(f.as_slice()) {
                    Some(c) => {
                        copied += 1;
                        c
                    }
                    None => {
                        dropped += 1;
                        continue;
                    }
                }
            };
            let addr = f.addr();
            f.into_raw();
            let d = self.tx.ent(self.tx_prod.wrapping_add(posted));
            d.off.store(addr, Ordering::Relaxed);
            d.len.store(len as u32, Ordering::Relaxed);
            posted += 1;
        }
        if posted > 0 {
            self.tx_prod = self.tx_prod.wrapping_add(posted);
            self.inflight += posted;
            self.tx.prod().store(self.tx_prod, Ordering::Release);
            // Store (index) - fence - load (flag): pairs with the peer's
            // arming, store (flag) - fence - load (index).
            fence(Ordering::SeqCst);
            let w = self.wake_peer_rx.get();
            if w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::AcqRel) != 0 {
                os::ring_socket(self.peer_doorbell);
                bump(&self.stats().doorbells, 1);
            }
            bump(&self.stats().tx_frames, u64::from(posted));
        }
        if dropped > 0 {
            bump(&self.stats().tx_dropped, dropped);
        }
        if copied > 0 {
            bump(&self.stats().tx_copied, copied);
        }
        Ok(n)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    fn reclaim(&mut self) {
        if self.dead() {
            let _ = self.gone();
            return;
        }
        self.publish_returns();
        self.reclaim_returns();
        let low = self.pool.available() == 0 && self.inflight > 0;
        if low && !self.ret_armed {
            // Starved of buffers with chunks out at the peer: ask to be
            // woken when it returns some.
            self.ret_armed = true;
            self.wake_me_ret.get().store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            self.reclaim_returns();
        } else if !low && self.ret_armed {
            self.ret_armed = false;
            if self.wake_me_ret.get().swap(0, Ordering::AcqRel) == 0 && self.rx_armed {
                // The peer rang for returns while we sleep for frames.
                self.stale = true;
            }
        }
    }
}

impl Drop for ShmQueue {
    fn drop(&mut self) {
        if !self.dead() {
            self.publish_returns();
        }
        self.wake_me_rx.get().store(0, Ordering::Relaxed);
        self.wake_me_ret.get().store(0, Ordering::Relaxed);
        self.shared.queues[self.q]
            .open
            .store(false, Ordering::Release);
    }
}
