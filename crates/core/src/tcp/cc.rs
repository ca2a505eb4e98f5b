//! Congestion control as a pluggable trait.
//!
//! The connection owns loss *detection* and *recovery* (RFC 6675 SACK-based,
//! or RFC 6582 NewReno without SACK); a controller only decides the window:
//! how it grows on ACKs and how it shrinks on a congestion event or a
//! retransmission timeout. Two controllers ship: [`NewReno`] (RFC 5681) and
//! [`Cubic`] (RFC 9438, the default). A new algorithm implements
//! [`CongestionControl`] and gets a variant in [`Controller`], which keeps the
//! state inline in the connection (no allocation, no virtual call).

use crate::config::CcAlgorithm;
use crate::time::{Duration, Instant};

/// The window state a controller acts on, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Congestion window.
    pub cwnd: u32,
    /// Slow-start threshold.
    pub ssthresh: u32,
    /// Sender maximum segment size.
    pub mss: u32,
}

impl Window {
    /// Initial window (RFC 6928: min(10·MSS, max(2·MSS, 14600))) with an
    /// "infinite" ssthresh (RFC 5681 §3.1).
    pub fn initial(mss: u32) -> Window {
        Window {
            cwnd: (10 * mss).min((2 * mss).max(14600)),
            ssthresh: u32::MAX,
            mss,
        }
    }

    /// In slow start?
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// RFC 5681 (3.2)-(4) / RFC 3465 slow start: grow by the bytes acked,
    /// at most 2·SMSS per ACK (appropriate byte counting, L = 2).
    fn slow_start(&mut self, acked: u32) -> u32 {
        let inc = acked.min(2 * self.mss);
        let room = self.ssthresh.saturating_sub(self.cwnd);
        let used = inc.min(room);
        self.cwnd = self.cwnd.saturating_add(used);
        acked.saturating_sub(used)
    }
}

/// What every congestion controller provides.
pub trait CongestionControl {
    /// Bytes newly acknowledged outside loss recovery. `rtt` is the
    /// connection's smoothed RTT.
    fn on_ack(&mut self, now: Instant, w: &mut Window, acked: u32, flight: u32, rtt: Duration);
    /// A loss was detected (entering fast recovery): set `ssthresh` and the
    /// window to continue with (RFC 5681 (4), RFC 9438 §4.6).
    fn on_congestion_event(&mut self, now: Instant, w: &mut Window, flight: u32);
    /// The retransmission timer expired (RFC 5681 (4)-(5)): the window falls
    /// to one segment.
    fn on_rto(&mut self, now: Instant, w: &mut Window, flight: u32);
    /// Loss recovery ended (RFC 6582 §3.2 step 3 / RFC 6675 §5).
    fn on_recovery_end(&mut self, now: Instant, w: &mut Window, flight: u32) {
        let _ = now;
        // RFC 6582 §3.2 step 3 (option 1): cwnd = min(ssthresh,
        // max(FlightSize, SMSS) + SMSS).
        w.cwnd = w.ssthresh.min(flight.max(w.mss).saturating_add(w.mss));
    }
    /// Stable algorithm name.
    fn name(&self) -> &'static str;
}

/// RFC 5681 slow start and congestion avoidance.
#[derive(Debug, Clone, Default)]
pub struct NewReno {
    /// Bytes acked since cwnd last grew by one MSS in congestion avoidance.
    bytes_acked: u32,
}

impl CongestionControl for NewReno {
    fn on_ack(&mut self, _now: Instant, w: &mut Window, acked: u32, _flight: u32, _rtt: Duration) {
        let rest = if w.in_slow_start() {
            w.slow_start(acked)
        } else {
            acked
        };
        if rest > 0 && !w.in_slow_start() {
            // RFC 5681 (3): cwnd += SMSS per cwnd bytes acknowledged (byte
            // counting variant of RFC 3465 §2.1).
            self.bytes_acked = self.bytes_acked.saturating_add(rest);
            if self.bytes_acked >= w.cwnd {
                self.bytes_acked -= w.cwnd;
                w.cwnd = w.cwnd.saturating_add(w.mss);
            }
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, w: &mut Window, flight: u32) {
        // RFC 5681 (4): ssthresh = max(FlightSize / 2, 2*SMSS).
        w.ssthresh = (flight / 2).max(2 * w.mss);
        w.cwnd = w.ssthresh;
        self.bytes_acked = 0;
    }

    fn on_rto(&mut self, _now: Instant, w: &mut Window, flight: u32) {
        w.ssthresh = (flight / 2).max(2 * w.mss);
        // RFC 5681 (5): LW = 1 SMSS.
        w.cwnd = w.mss;
        self.bytes_acked = 0;
    }

    fn name(&self) -> &'static str {
        "newreno"
    }
}

/// CUBIC (RFC 9438) with fast convergence and the Reno-friendly region.
/// Window arithmetic is in segments as `f64`, as the RFC writes it; `f64`
/// operations are deterministic, so the simulator stays reproducible. The
/// state is kept as `f32` (24 bits of mantissa: windows to 16 M segments,
/// times to a tenth of a millisecond over a day), 20 bytes of a
/// connection's 512.
#[derive(Debug, Clone)]
pub struct Cubic {
    /// W_max: window before the last reduction, in segments.
    w_max: f32,
    /// K: time to reach W_max again, in seconds.
    k: f32,
    /// Start of the current congestion-avoidance epoch (`NEVER`: none
    /// begun; an `Option` would cost the connection 8 bytes).
    epoch_start: Instant,
    /// W_est: the Reno-friendly estimate, in segments.
    w_est: f32,
    /// Fractional-byte accumulator for slow growth.
    acc: f32,
}

impl Default for Cubic {
    fn default() -> Cubic {
        Cubic {
            w_max: 0.0,
            k: 0.0,
            epoch_start: Instant::NEVER,
            w_est: 0.0,
            acc: 0.0,
        }
    }
}

/// RFC 9438 §5: C = 0.4.
const CUBIC_C: f64 = 0.4;
/// RFC 9438 §5: β_cubic = 0.7.
const CUBIC_BETA: f64 = 0.7;

impl Cubic {
    fn reduce(&mut self, w: &mut Window) {
        let cwnd = f64::from(w.cwnd) / f64::from(w.mss);
        // RFC 9438 §4.7 fast convergence.
        self.w_max = if cwnd < f64::from(self.w_max) {
            cwnd * (1.0 + CUBIC_BETA) / 2.0
        } else {
            cwnd
        } as f32;
        self.epoch_start = Instant::NEVER;
        // RFC 9438 §4.6: ssthresh = max(cwnd * β, 2).
        let ss = (cwnd * CUBIC_BETA).max(2.0);
        w.ssthresh = (ss * f64::from(w.mss)) as u32;
    }
}

impl CongestionControl for Cubic {
    fn on_ack(&mut self, now: Instant, w: &mut Window, acked: u32, _flight: u32, rtt: Duration) {
        let rest = if w.in_slow_start() {
            w.slow_start(acked)
        } else {
            acked
        };
        if rest == 0 || w.in_slow_start() {
            return;
        }
        let mss = f64::from(w.mss);
        let cwnd = f64::from(w.cwnd) / mss;
        let start = match self.epoch_start {
            t if !t.is_never() => t,
            _ => {
                // RFC 9438 §4.2: a new epoch begins with the first ACK in
                // congestion avoidance.
                self.epoch_start = now;
                self.w_est = cwnd as f32;
                if f64::from(self.w_max) < cwnd {
                    self.w_max = cwnd as f32;
                }
                let k = ((f64::from(self.w_max) - cwnd) / CUBIC_C).max(0.0).cbrt();
                self.k = k as f32;
                now
            }
        };
        let (w_max, k) = (f64::from(self.w_max), f64::from(self.k));
        let t = (now - start).as_secs_f64();
        let rtt_s = rtt.as_secs_f64();
        // RFC 9438 eq. 1 evaluated one RTT ahead, target clamped to
        // [cwnd, 1.5 cwnd] (§4.4).
        let w_cubic = |t: f64| CUBIC_C * (t - k).powi(3) + w_max;
        let target = w_cubic(t + rtt_s).clamp(cwnd, 1.5 * cwnd);
        let segs_acked = f64::from(rest) / mss;
        // RFC 9438 §4.3 Reno-friendly region: α = 3(1-β)/(1+β).
        let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        let w_est = f64::from(self.w_est) + alpha * segs_acked / cwnd;
        self.w_est = w_est as f32;
        let grow = if w_cubic(t) < w_est {
            (w_est - cwnd).max(0.0)
        } else {
            // §4.4/4.5: cwnd += (target - cwnd) / cwnd per acknowledged segment.
            (target - cwnd) / cwnd * segs_acked
        };
        let mut acc = f64::from(self.acc) + grow * mss;
        if acc >= 1.0 {
            let add = acc.floor();
            acc -= add;
            w.cwnd = w.cwnd.saturating_add(add as u32);
        }
        self.acc = acc as f32;
    }

    fn on_congestion_event(&mut self, _now: Instant, w: &mut Window, _flight: u32) {
        self.reduce(w);
        w.cwnd = w.ssthresh.max(2 * w.mss);
        self.acc = 0.0;
    }

    fn on_rto(&mut self, _now: Instant, w: &mut Window, _flight: u32) {
        self.reduce(w);
        w.cwnd = w.mss;
        self.acc = 0.0;
    }

    fn name(&self) -> &'static str {
        "cubic"
    }
}

/// The controllers this build knows, stored inline in each connection.
#[derive(Debug, Clone)]
pub enum Controller {
    /// RFC 5681.
    NewReno(NewReno),
    /// RFC 9438.
    Cubic(Cubic),
}

impl Controller {
    /// A fresh controller of the given kind.
    pub fn new(kind: CcAlgorithm) -> Controller {
        match kind {
            CcAlgorithm::NewReno => Controller::NewReno(NewReno::default()),
            CcAlgorithm::Cubic => Controller::Cubic(Cubic::default()),
        }
    }

    fn inner(&mut self) -> &mut dyn CongestionControl {
        match self {
            Controller::NewReno(c) => c,
            Controller::Cubic(c) => c,
        }
    }
}

impl CongestionControl for Controller {
    fn on_ack(&mut self, now: Instant, w: &mut Window, acked: u32, flight: u32, rtt: Duration) {
        self.inner().on_ack(now, w, acked, flight, rtt)
    }
    fn on_congestion_event(&mut self, now: Instant, w: &mut Window, flight: u32) {
        self.inner().on_congestion_event(now, w, flight)
    }
    fn on_rto(&mut self, now: Instant, w: &mut Window, flight: u32) {
        self.inner().on_rto(now, w, flight)
    }
    fn on_recovery_end(&mut self, now: Instant, w: &mut Window, flight: u32) {
        self.inner().on_recovery_end(now, w, flight)
    }
    fn name(&self) -> &'static str {
        match self {
            Controller::NewReno(c) => c.name(),
            Controller::Cubic(c) => c.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    #[test]
    fn initial_window_rfc6928() {
        assert_eq!(Window::initial(1460).cwnd, 14600);
        assert_eq!(Window::initial(536).cwnd, 5360);
        assert_eq!(Window::initial(9000).cwnd, 18000);
    }

    #[test]
    fn slow_start_then_linear_growth_newreno() {
        // RFC 5681 §3.1: slow start below ssthresh, ~1 SMSS per RTT above.
        let mut cc = NewReno::default();
        let mut w = Window::initial(MSS);
        w.ssthresh = 20 * MSS;
        let now = Instant::ZERO;
        for _ in 0..10 {
            {
                let f = w.cwnd;
                cc.on_ack(now, &mut w, MSS, f, Duration::from_millis(1));
            }
        }
        assert_eq!(w.cwnd, 20 * MSS);
        let before = w.cwnd;
        // One window's worth of ACKs grows cwnd by one MSS.
        for _ in 0..20 {
            {
                let f = w.cwnd;
                cc.on_ack(now, &mut w, MSS, f, Duration::from_millis(1));
            }
        }
        assert_eq!(w.cwnd, before + MSS);
    }

    #[test]
    fn newreno_halves_and_rto_collapses() {
        let mut cc = NewReno::default();
        let mut w = Window::initial(MSS);
        cc.on_congestion_event(Instant::ZERO, &mut w, 40 * MSS);
        assert_eq!((w.ssthresh, w.cwnd), (20 * MSS, 20 * MSS));
        cc.on_rto(Instant::ZERO, &mut w, 3 * MSS);
        assert_eq!((w.ssthresh, w.cwnd), (2 * MSS, MSS));
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows_to_wmax() {
        // RFC 9438 §4.6: multiplicative decrease by β = 0.7; the cubic
        // function returns to W_max after K seconds.
        let mut cc = Cubic::default();
        let mut w = Window {
            cwnd: 100 * MSS,
            ssthresh: u32::MAX,
            mss: MSS,
        };
        cc.on_congestion_event(Instant::ZERO, &mut w, 100 * MSS);
        assert_eq!(w.ssthresh, 70 * MSS);
        assert_eq!(w.cwnd, 70 * MSS);
        // A long RTT keeps the Reno-friendly estimate (≈0.53 segment per
        // RTT) below the cubic curve.
        let rtt = Duration::from_millis(100);
        let mut now = Instant::ZERO;
        // K = cbrt(100*0.3/0.4) ≈ 4.2 s; after ~5 s of ACK clocking cwnd is
        // back near W_max.
        for _ in 0..50 {
            now += rtt;
            let segs = w.cwnd / MSS;
            for _ in 0..segs {
                {
                    let f = w.cwnd;
                    cc.on_ack(now, &mut w, MSS, f, rtt);
                }
            }
        }
        let cwnd = w.cwnd / MSS;
        assert!((95..=110).contains(&cwnd), "cwnd {cwnd}");
    }

    #[test]
    fn cubic_reno_friendly_region_at_short_rtt() {
        // RFC 9438 §4.3: where standard TCP would grow faster, CUBIC follows
        // W_est (α = 3(1-β)/(1+β) segments per RTT).
        let mut cc = Cubic::default();
        let mut w = Window {
            cwnd: 100 * MSS,
            ssthresh: u32::MAX,
            mss: MSS,
        };
        cc.on_congestion_event(Instant::ZERO, &mut w, 0);
        let rtt = Duration::from_millis(1);
        let mut now = Instant::ZERO;
        for _ in 0..1000 {
            now += rtt;
            for _ in 0..w.cwnd / MSS {
                let f = w.cwnd;
                cc.on_ack(now, &mut w, MSS, f, rtt);
            }
        }
        let cwnd = f64::from(w.cwnd / MSS);
        let reno = 70.0 + 1000.0 * 3.0 * 0.3 / 1.7;
        assert!((cwnd - reno).abs() / reno < 0.1, "cwnd {cwnd} vs {reno}");
    }

    #[test]
    fn cubic_fast_convergence() {
        let mut cc = Cubic::default();
        let mut w = Window {
            cwnd: 100 * MSS,
            ssthresh: u32::MAX,
            mss: MSS,
        };
        cc.on_congestion_event(Instant::ZERO, &mut w, 0);
        // A second loss below the previous W_max releases bandwidth:
        // W_max = cwnd * (1 + β) / 2.
        cc.on_congestion_event(Instant::ZERO, &mut w, 0);
        assert!((cc.w_max - 70.0 * 0.85).abs() < 1e-9);
    }
}
