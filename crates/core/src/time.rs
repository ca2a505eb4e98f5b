//! Time as the core sees it: a monotonic count of microseconds passed in by
//! the caller. The core never reads a clock.

use core::ops::{Add, AddAssign, Sub};
pub use core::time::Duration;

/// A point in time, in microseconds since an arbitrary epoch chosen by the
/// caller (the engine uses a monotonic clock; tests and the simulator use
/// virtual time starting at zero).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// Later than any time the stack will see; used as "never".
    pub const NEVER: Instant = Instant(u64::MAX);
    /// The latest real time (adding durations saturates here, below NEVER).
    const LAST: u64 = u64::MAX - 1;

    /// From microseconds since the epoch.
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us)
    }
    /// From milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms * 1000)
    }
    /// From a `Duration` since the epoch.
    pub fn from_duration(d: Duration) -> Instant {
        Instant(d.as_micros().min(u128::from(u64::MAX - 1)) as u64)
    }
    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    /// Milliseconds since the epoch (truncated).
    pub const fn as_millis(self) -> u64 {
        self.0 / 1000
    }
    /// Is this the "never" sentinel?
    pub const fn is_never(self) -> bool {
        self.0 == u64::MAX
    }
    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(us).min(Self::LAST))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl core::fmt::Display for Instant {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}
