//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use crate::time::Duration;

/// SRTT, RTTVAR and RTO in microseconds, plus the backoff count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttEstimator {
    srtt_us: u32,
    rttvar_us: u32,
    rto_us: u32,
    /// Exponential-backoff shift applied to the RTO (RFC 6298 (5.5)).
    backoff: u8,
    sampled: bool,
}

impl RttEstimator {
    /// Before any sample the RTO is `initial` (RFC 6298 (2.1)).
    pub fn new(initial: Duration) -> RttEstimator {
        RttEstimator {
            srtt_us: 0,
            rttvar_us: 0,
            rto_us: initial.as_micros().min(u128::from(u32::MAX)) as u32,
            backoff: 0,
            sampled: false,
        }
    }

    /// Feed one RTT measurement `r` (RFC 6298 (2.2)-(2.3)); clears the
    /// backoff. `granularity` is G, the clock granularity.
    pub fn sample(&mut self, r: Duration, granularity: Duration, min: Duration, max: Duration) {
        let r = r.as_micros().min(u128::from(u32::MAX / 2)) as u32;
        if !self.sampled {
            // RFC 6298 (2.2): SRTT <- R, RTTVAR <- R/2
            self.srtt_us = r;
            self.rttvar_us = r / 2;
            self.sampled = true;
        } else {
            // RFC 6298 (2.3): RTTVAR <- (1 - 1/4) RTTVAR + 1/4 |SRTT - R'|
            //       SRTT <- (1 - 1/8) SRTT + 1/8 R'
            let delta = self.srtt_us.abs_diff(r);
            self.rttvar_us = (3 * u64::from(self.rttvar_us) / 4 + u64::from(delta) / 4) as u32;
            self.srtt_us = (7 * u64::from(self.srtt_us) / 8 + u64::from(r) / 8) as u32;
        }
        let g = granularity.as_micros() as u64;
        // RTO <- SRTT + max(G, K*RTTVAR), K = 4, then (2.4)/(2.5) bounds.
        let rto = u64::from(self.srtt_us) + g.max(4 * u64::from(self.rttvar_us));
        self.rto_us = clamp_us(rto, min, max);
        self.backoff = 0;
    }

    /// The timer expired: double the RTO (RFC 6298 (5.5)), up to `max`.
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(30);
    }

    /// Forget the backoff (new data was acknowledged).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Current RTO including backoff, clamped to `max`.
    pub fn rto(&self, max: Duration) -> Duration {
        let base = u64::from(self.rto_us);
        let v = base
            .checked_shl(u32::from(self.backoff))
            .unwrap_or(u64::MAX);
        Duration::from_micros(v.min(max.as_micros() as u64))
    }

    /// Smoothed RTT (zero before the first sample).
    pub fn srtt(&self) -> Duration {
        Duration::from_micros(u64::from(self.srtt_us))
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        Duration::from_micros(u64::from(self.rttvar_us))
    }

    /// Has any sample been taken?
    pub fn has_sample(&self) -> bool {
        self.sampled
    }

    /// Current backoff count.
    pub fn backoff(&self) -> u8 {
        self.backoff
    }
}

fn clamp_us(v: u64, min: Duration, max: Duration) -> u32 {
    let lo = min.as_micros() as u64;
    let hi = max.as_micros() as u64;
    v.clamp(lo, hi).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Duration = Duration::from_micros(16);
    const MIN: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(60);

    /// RFC 6298 (2.2): the first measurement.
    #[test]
    fn first_sample_rfc6298_2_2() {
        let mut e = RttEstimator::new(Duration::from_secs(1));
        assert_eq!(e.rto(MAX), Duration::from_secs(1));
        e.sample(Duration::from_millis(100), G, Duration::from_millis(1), MAX);
        assert_eq!(e.srtt(), Duration::from_millis(100));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        // RTO = 100 + 4*50 = 300 ms
        assert_eq!(e.rto(MAX), Duration::from_millis(300));
    }

    /// RFC 6298 (2.3): later measurements.
    #[test]
    fn subsequent_samples_rfc6298_2_3() {
        let mut e = RttEstimator::new(Duration::from_secs(1));
        e.sample(Duration::from_millis(100), G, Duration::from_millis(1), MAX);
        e.sample(Duration::from_millis(200), G, Duration::from_millis(1), MAX);
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.srtt(), Duration::from_micros(112_500));
    }

    /// RFC 6298 (2.4), (2.5) bounds and RFC 6298 (5.5) backoff.
    #[test]
    fn bounds_and_backoff_rfc6298_5_5() {
        let mut e = RttEstimator::new(Duration::from_secs(1));
        e.sample(Duration::from_micros(50), G, MIN, MAX);
        assert_eq!(e.rto(MAX), MIN);
        e.back_off();
        e.back_off();
        assert_eq!(e.rto(MAX), MIN * 4);
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(MAX), MAX);
        e.sample(Duration::from_micros(50), G, MIN, MAX);
        assert_eq!(e.backoff(), 0);
    }
}
