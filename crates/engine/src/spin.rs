//! Yielding the CPU without losing it: the idle spin of a sleeping core,
//! and the pacer that stops yields beside a thread competing for the CPU.
//!
//! **Idle spin.** An idle core that goes to sleep and is woken again a few
//! microseconds later pays for both: the sleep and the wake-up system
//! calls, and on a virtual machine the halt of its idle virtual CPU, which
//! the next interrupt must first take out of the hypervisor. Under load
//! those gaps are the norm — a closed-loop client's next requests come back
//! tens of microseconds after the replies left — and the round trip they
//! lengthen is the client's. With [`EngineConfig::idle_spin`] set, an idle
//! core first looks again for up to a window, yielding its CPU between
//! looks (`sched_yield`: a program on the same CPU runs at once), and only
//! then sleeps. The window adapts, much as Linux's `cpuidle-haltpoll`
//! governor adapts its guest halt polling: it grows (from a quarter of the
//! maximum, doubling) when work ended a spin, or a sleep ended within the
//! maximum — a longer spin would have caught it — and halves when a spin
//! ran out, so a lightly loaded or idle core stops spinning by itself.
//! (`haltpoll` shrinks on idle stretches longer than the maximum instead;
//! a core's idle stretch here also holds the turns of the programs on its
//! CPU, which made every stretch under load look long.)
//!
//! [`EngineConfig::idle_spin`]: crate::EngineConfig::idle_spin

use std::time::{Duration, Instant};

/// A yield to a program thread just woken that takes longer than this ran
/// some other thread: the woken thread's turn is one batch of requests
/// (memcached at 150 k requests/s: tens of µs), while a competing thread
/// gets a time slice (Linux's base slice: 0.7 ms) — or the hypervisor took
/// the CPU during the yield (a stall).
pub const LONG_YIELD: Duration = Duration::from_micros(250);
/// A yield of the idle spin that takes longer than this ran a thread that
/// competes for the CPU. The spin yields to whatever runs on the CPU — a
/// program working through a batch of requests (nginx with 128 kept-alive
/// connections: 85 of its 8,263 yields took over 250 µs in 5 s, which with
/// [`LONG_YIELD`]'s bound stopped the spin 7 times) as much as a thread
/// that never sleeps, which gets a whole tick's slice (4 ms, measured with
/// a spinning process beside a yielding one on one CPU of the test
/// machine).
pub const LONG_SPIN_YIELD: Duration = Duration::from_millis(2);
/// Yields turn off when two long ones come within this many yields. A
/// competing thread makes every yield long, so it is found at the
/// second; a stall of the virtual CPU makes one long now and then (about
/// one in 7,000 yields on the test machine: 2–3 a second at 10–20 k
/// yields/s), and while a single long yield turned yields off, they were
/// off for half of every second or more.
pub const LONG_YIELD_WINDOW: u64 = 16;
/// How long yields stay off once they ran long.
pub const YIELD_BACKOFF: Duration = Duration::from_secs(1);

/// Whether a thread may yield its CPU, from how long its recent yields
/// took. A yield hands the CPU to *any* runnable thread: beside a thread
/// that competes for the CPU it hands that thread a whole time slice while
/// the work waits, so yields then stay off for [`YIELD_BACKOFF`].
#[derive(Debug, Clone)]
pub struct YieldPacer {
    /// What counts as a long yield.
    long_after: Duration,
    made: u64,
    long: u64,
    backoffs: u64,
    /// `made` at the last long yield not yet paired with another.
    last_long: Option<u64>,
    /// No yields before this.
    off_until: Option<Instant>,
}

impl YieldPacer {
    /// A pacer for which a yield longer than `long_after` is long
    /// ([`LONG_YIELD`], [`LONG_SPIN_YIELD`]).
    pub fn new(long_after: Duration) -> YieldPacer {
        YieldPacer {
            long_after,
            made: 0,
            long: 0,
            backoffs: 0,
            last_long: None,
            off_until: None,
        }
    }

    /// Whether a yield may be made at `now`.
    pub fn allowed(&self, now: Instant) -> bool {
        self.off_until.is_none_or(|t| now >= t)
    }

    /// Record a yield that took `took`, ending at `now`.
    pub fn record(&mut self, took: Duration, now: Instant) {
        self.made += 1;
        if took <= self.long_after {
            return;
        }
        self.long += 1;
        match self.last_long {
            Some(at) if self.made - at <= LONG_YIELD_WINDOW => {
                self.backoffs += 1;
                self.off_until = Some(now + YIELD_BACKOFF);
                self.last_long = None;
            }
            _ => self.last_long = Some(self.made),
        }
    }

    /// Yield the CPU if allowed (see [`YieldPacer::allowed`]) and record
    /// how long it took; whether a yield was made.
    pub fn yield_cpu(&mut self) -> bool {
        let t0 = Instant::now();
        if !self.allowed(t0) {
            return false;
        }
        std::thread::yield_now();
        let t1 = Instant::now();
        self.record(t1 - t0, t1);
        true
    }

    /// Yields made.
    pub fn made(&self) -> u64 {
        self.made
    }

    /// Yields that took long.
    pub fn long(&self) -> u64 {
        self.long
    }

    /// Times yields were turned off.
    pub fn backoffs(&self) -> u64 {
        self.backoffs
    }
}

/// What a core's idle spin did (see the module documentation).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpinStats {
    /// The longest spin configured, µs (0: the core never spins).
    pub max_us: u64,
    /// The spin window now, µs.
    pub window_us: u64,
    /// Idle stretches that began with a spin.
    pub spins: u64,
    /// Of those, the ones work ended before the core slept.
    pub hits: u64,
    /// Yields made while spinning.
    pub yields: u64,
    /// Of those, the ones longer than [`LONG_SPIN_YIELD`].
    pub long_yields: u64,
    /// Times spinning stopped for [`YIELD_BACKOFF`] (two long yields close
    /// together: another thread competes for the CPU).
    pub backoffs: u64,
}

/// The adaptive idle spin of one core.
#[derive(Debug)]
pub(crate) struct IdleSpin {
    max: Duration,
    window: Duration,
    /// When the current idle stretch began (its first idle cycle).
    since: Option<Instant>,
    /// Whether the current stretch spun.
    spun: bool,
    spins: u64,
    hits: u64,
    pacer: YieldPacer,
}

impl IdleSpin {
    pub(crate) fn new(max: Duration) -> IdleSpin {
        IdleSpin {
            max,
            window: Duration::ZERO,
            since: None,
            spun: false,
            spins: 0,
            hits: 0,
            pacer: YieldPacer::new(LONG_SPIN_YIELD),
        }
    }

    /// An idle cycle: true to look again (after a yield) rather than sleep.
    pub(crate) fn keep_spinning(&mut self) -> bool {
        if self.max.is_zero() {
            return false;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since < self.window && self.pacer.yield_cpu() {
            if !self.spun {
                self.spun = true;
                self.spins += 1;
            }
            return true;
        }
        if self.spun {
            // A miss: the window passed without work.
            self.spun = false;
            self.shrink();
        }
        false
    }

    /// A cycle that did work.
    pub(crate) fn worked(&mut self) {
        if self.since.take().is_some() && self.spun {
            self.hits += 1;
            self.grow();
        }
        self.spun = false;
    }

    /// The core woke from a sleep: if the whole idle stretch (spin and
    /// sleep) was within the maximum, a longer spin would have caught it.
    pub(crate) fn woke(&mut self) {
        if let Some(since) = self.since.take() {
            if !self.max.is_zero() && since.elapsed() <= self.max {
                self.grow();
            }
        }
        self.spun = false;
    }

    /// From a quarter of the maximum, doubling, capped.
    fn grow(&mut self) {
        self.window = (self.window * 2).clamp(self.max / 4, self.max);
    }

    /// Halving, then off below a quarter of the maximum.
    fn shrink(&mut self) {
        self.window /= 2;
        if self.window < self.max / 4 {
            self.window = Duration::ZERO;
        }
    }

    pub(crate) fn stats(&self) -> SpinStats {
        SpinStats {
            max_us: self.max.as_micros() as u64,
            window_us: self.window.as_micros() as u64,
            spins: self.spins,
            hits: self.hits,
            yields: self.pacer.made(),
            long_yields: self.pacer.long(),
            backoffs: self.pacer.backoffs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_long_yield_does_not_stop_yields_but_two_close_together_do() {
        let t = Instant::now();
        let (short, long) = (Duration::from_micros(20), Duration::from_millis(1));
        let mut p = YieldPacer::new(LONG_YIELD);
        // A stall now and then: one long yield among many short ones.
        for round in 0..3 {
            p.record(long, t);
            for _ in 0..LONG_YIELD_WINDOW {
                p.record(short, t);
            }
            assert!(
                p.allowed(t),
                "round {round}: a lone long yield turned yields off"
            );
        }
        assert_eq!(
            (p.made(), p.long(), p.backoffs()),
            (3 * (LONG_YIELD_WINDOW + 1), 3, 0)
        );
        // A competing thread: every yield long; off at the second, for
        // YIELD_BACKOFF.
        p.record(long, t);
        assert!(p.allowed(t));
        p.record(long, t);
        assert!(!p.allowed(t));
        assert!(!p.allowed(t + YIELD_BACKOFF - Duration::from_millis(1)));
        assert!(p.allowed(t + YIELD_BACKOFF));
        assert_eq!(p.backoffs(), 1);
        // The pair is used up: the next long yield starts a new one.
        p.record(long, t + YIELD_BACKOFF);
        assert!(p.allowed(t + YIELD_BACKOFF));
        // Two long yields LONG_YIELD_WINDOW apart still count as a pair.
        for _ in 0..LONG_YIELD_WINDOW - 1 {
            p.record(short, t + YIELD_BACKOFF);
        }
        p.record(long, t + YIELD_BACKOFF);
        assert!(!p.allowed(t + YIELD_BACKOFF));
    }

    #[test]
    fn the_window_grows_with_hits_and_short_sleeps_and_shrinks_with_misses() {
        let max = Duration::from_micros(80);
        let us = Duration::from_micros;
        let mut s = IdleSpin::new(max);
        // Off until a sleep shows that a spin would have caught the work.
        assert_eq!(s.window, Duration::ZERO);
        assert!(!s.keep_spinning());
        std::thread::sleep(us(200));
        s.woke();
        assert_eq!(
            s.window,
            Duration::ZERO,
            "a long sleep does not start spinning"
        );
        assert!(!s.keep_spinning());
        s.woke(); // at once: within the maximum
        assert_eq!(s.window, us(20), "from a quarter of the maximum");
        // Hits double it, up to the maximum.
        s.grow();
        assert_eq!(s.window, us(40));
        s.grow();
        s.grow();
        assert_eq!(s.window, max);
        // Misses halve it, then turn it off.
        s.shrink();
        assert_eq!(s.window, us(40));
        s.shrink();
        assert_eq!(s.window, us(20));
        s.shrink();
        assert_eq!(s.window, Duration::ZERO);
        // A spin that runs out is a miss.
        s.window = us(40);
        let t = Instant::now();
        while s.keep_spinning() {
            assert!(t.elapsed() < Duration::from_secs(1));
        }
        assert_eq!(s.window, us(20));
    }

    #[test]
    fn a_spin_that_work_ends_counts_as_a_hit() {
        let mut s = IdleSpin::new(Duration::from_millis(50));
        s.window = Duration::from_millis(25);
        assert!(s.keep_spinning());
        assert!(s.keep_spinning());
        s.worked();
        assert_eq!((s.stats().spins, s.stats().hits), (1, 1));
        assert_eq!(
            s.window,
            Duration::from_millis(50),
            "a hit doubles the window"
        );
        // A zero maximum never spins.
        let mut off = IdleSpin::new(Duration::ZERO);
        assert!(!off.keep_spinning());
        assert_eq!(off.stats(), SpinStats::default());
    }
}
