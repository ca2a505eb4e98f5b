//! The echo client of IX §5.3 (and of the mTCP and MegaPipe papers): `c`
//! connections, each making `n` round trips of `s` bytes and then closing,
//! replaced at once by a new connection, for a fixed time. Reports
//! messages per second and the round-trip latency distribution.

use hdrhistogram::Histogram;
use ixora_engine::ev::{Closed, Conn, Ctl, Handler, Service};
use serde::Serialize;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// Server address.
    pub server: SocketAddrV4,
    /// Connections open at once, over all cores.
    pub conns: usize,
    /// Round trips per connection before it closes (`n`).
    pub rounds: usize,
    /// Message size (`s`).
    pub size: usize,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// Check every echoed byte.
    pub verify: bool,
    /// Open each connection once and stop when all have finished (a
    /// transfer test): everything is measured, `duration` is a time limit.
    pub once: bool,
}

/// Results merged over the cores.
#[derive(Debug, Default)]
pub struct ClientTotals {
    /// Round trips completed in the measured window.
    pub messages: u64,
    /// Connections completed (n round trips then closed) in the window.
    pub connections: u64,
    /// Connections that failed, or echoes that differed.
    pub errors: u64,
    /// Times a connection waited for a free local port.
    pub port_waits: u64,
    /// Round-trip latency in nanoseconds.
    pub hist: Option<Histogram<u64>>,
}

/// Printed by `ixora echo-client`.
#[derive(Debug, Serialize)]
pub struct ClientReport {
    /// Message size.
    pub size: usize,
    /// Round trips per connection.
    pub rounds: usize,
    /// Concurrent connections.
    pub conns: usize,
    /// Cores.
    pub cores: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// Round trips per second.
    pub msgs_per_sec: f64,
    /// Connections per second (completed).
    pub conns_per_sec: f64,
    /// Round-trip latency percentiles in microseconds.
    pub rtt_us: Latency,
    /// Round trips completed in the measured window.
    pub messages: u64,
    /// Connections that finished their round trips in the window.
    pub connections: u64,
    /// Errors (failed connections, wrong bytes).
    pub errors: u64,
    /// Times opening a connection waited for a free local port (all in
    /// use or in TIME-WAIT); not an error, but it limits the rate.
    pub port_waits: u64,
    /// CPU seconds the dataplane cores used.
    pub cpu_seconds: f64,
}

/// Latency summary.
#[derive(Debug, Serialize, Default)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Mean.
    pub mean: f64,
    /// Samples.
    pub samples: u64,
}

impl Latency {
    /// Summarise a histogram of nanoseconds.
    pub fn from_hist(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50: h.value_at_quantile(0.5) as f64 / 1e3,
            p99: h.value_at_quantile(0.99) as f64 / 1e3,
            p999: h.value_at_quantile(0.999) as f64 / 1e3,
            mean: h.mean() / 1e3,
            samples: h.len(),
        }
    }
}

/// Add a core's histogram to the merged one.
pub fn merge_hist(into: &mut Option<Histogram<u64>>, h: &Histogram<u64>) {
    match into {
        Some(m) => {
            let _ = m.add(h);
        }
        None => *into = Some(h.clone()),
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(100, 60_000_000_000, 3).expect("valid histogram bounds")
}

struct CoreState {
    plan: ClientPlan,
    start: Instant,
    hist: Histogram<u64>,
    messages: u64,
    connections: u64,
    errors: u64,
    open: usize,
    /// Connections opened so far.
    opened: usize,
    /// Times no local port was free for a new connection.
    port_waits: u64,
}

impl CoreState {
    fn measuring(&self, now: Instant) -> bool {
        if self.plan.once {
            return true;
        }
        let t = now - self.start;
        t >= self.plan.warmup && t < self.plan.warmup + self.plan.duration
    }
}

/// One core's share of the client.
pub struct ClientService {
    st: Rc<RefCell<CoreState>>,
    conns: usize,
    totals: Arc<Mutex<ClientTotals>>,
    done: Arc<AtomicBool>,
    seed: u64,
}

impl ClientService {
    /// The share of core `core` of `cores`.
    pub fn new(
        plan: ClientPlan,
        core: usize,
        cores: usize,
        totals: Arc<Mutex<ClientTotals>>,
        done: Arc<AtomicBool>,
    ) -> ClientService {
        let conns = plan.conns / cores + usize::from(core < plan.conns % cores);
        ClientService {
            st: Rc::new(RefCell::new(CoreState {
                plan,
                start: Instant::now(),
                hist: new_hist(),
                messages: 0,
                connections: 0,
                errors: 0,
                open: 0,
                opened: 0,
                port_waits: 0,
            })),
            conns,
            totals,
            done,
            seed: core as u64 * 1_000_003,
        }
    }

    fn open_more(&mut self, ctl: &mut Ctl<ClientConn>) {
        if self.st.borrow().open >= self.conns {
            return; // the common case, every batch: no clock read
        }
        let (server, rounds, size, verify, elapsed_out) = {
            let st = self.st.borrow();
            let p = &st.plan;
            (
                p.server,
                p.rounds,
                p.size,
                p.verify,
                Instant::now() - st.start >= p.warmup + p.duration,
            )
        };
        if elapsed_out {
            return;
        }
        while self.st.borrow().open < self.conns {
            if self.st.borrow().plan.once && self.st.borrow().opened >= self.conns {
                return;
            }
            self.seed += 1;
            let h = ClientConn {
                st: self.st.clone(),
                rounds,
                size,
                verify,
                round: 0,
                got: 0,
                sent_at: Instant::now(),
                salt: self.seed as u8,
            };
            match ctl.connect(server, h) {
                Ok(()) => {
                    let mut st = self.st.borrow_mut();
                    st.open += 1;
                    st.opened += 1;
                }
                // Every local port is in use (TIME-WAIT included, reused
                // after a second): open more once some are free.
                Err(ixora_core::Error::NoPorts) => {
                    self.st.borrow_mut().port_waits += 1;
                    break;
                }
                Err(_) => {
                    self.st.borrow_mut().errors += 1;
                    break;
                }
            }
        }
    }
}

/// The end of a timed closed-loop run, at a tick: once `over`, say so in
/// `done` and stop this core when its connections are `idle` (closed);
/// false while the run goes on (the caller opens more connections).
pub(crate) fn wind_down<H: Handler>(
    ctl: &mut Ctl<H>,
    done: &AtomicBool,
    over: bool,
    idle: bool,
) -> bool {
    if over {
        done.store(true, Ordering::Relaxed);
        if idle {
            ctl.io().stop();
        }
    }
    over
}

impl Drop for ClientService {
    fn drop(&mut self) {
        let st = self.st.borrow();
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.messages += st.messages;
        t.connections += st.connections;
        t.errors += st.errors;
        t.port_waits += st.port_waits;
        merge_hist(&mut t.hist, &st.hist);
    }
}

impl Service for ClientService {
    type H = ClientConn;

    fn start(&mut self, ctl: &mut Ctl<ClientConn>) {
        self.st.borrow_mut().start = Instant::now();
        self.open_more(ctl);
    }

    fn accept(&mut self, _: u16, _: SocketAddrV4) -> Option<ClientConn> {
        None
    }

    fn end_of_batch(&mut self, ctl: &mut Ctl<ClientConn>) {
        self.open_more(ctl);
    }

    fn tick(&mut self, ctl: &mut Ctl<ClientConn>) {
        let st = self.st.borrow();
        let finished = st.plan.once && st.opened >= self.conns && st.open == 0;
        let over = finished || Instant::now() - st.start >= st.plan.warmup + st.plan.duration;
        let idle = st.open == 0;
        drop(st);
        if !wind_down(ctl, &self.done, over, idle) {
            self.open_more(ctl);
        }
    }
}

/// One client connection.
pub struct ClientConn {
    st: Rc<RefCell<CoreState>>,
    rounds: usize,
    size: usize,
    verify: bool,
    round: usize,
    got: usize,
    sent_at: Instant,
    salt: u8,
}

impl ClientConn {
    fn byte(&self, k: usize) -> u8 {
        (k as u8)
            .wrapping_mul(7)
            .wrapping_add(self.salt ^ self.round as u8)
    }

    fn send(&mut self, c: &mut Conn) {
        // Small messages (the benchmark's 64 B) are built on the stack.
        let mut small = [0u8; 256];
        let large: Vec<u8>;
        let data: &[u8] = if self.size <= small.len() {
            for (k, b) in small[..self.size].iter_mut().enumerate() {
                *b = self.byte(k);
            }
            &small[..self.size]
        } else {
            large = (0..self.size).map(|k| self.byte(k)).collect();
            &large
        };
        self.sent_at = Instant::now();
        if c.write(data).is_err() {
            self.st.borrow_mut().errors += 1;
            c.abort();
        }
    }
}

impl Handler for ClientConn {
    fn open(&mut self, c: &mut Conn) {
        self.send(c);
    }

    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize {
        let mut bad = false;
        if self.verify {
            for (k, &b) in data.iter().enumerate() {
                if b != self.byte(self.got + k) {
                    bad = true;
                }
            }
        }
        self.got += data.len();
        if bad {
            self.st.borrow_mut().errors += 1;
        }
        if self.got >= self.size {
            let now = Instant::now();
            {
                let mut st = self.st.borrow_mut();
                if st.measuring(now) {
                    let ns = (now - self.sent_at).as_nanos() as u64;
                    let _ = st.hist.record(ns.max(100));
                    st.messages += 1;
                }
            }
            self.got = 0;
            self.round += 1;
            if self.round >= self.rounds {
                c.close();
            } else {
                self.send(c);
            }
        }
        data.len()
    }

    fn closed(&mut self, why: Closed) {
        let now = Instant::now();
        let mut st = self.st.borrow_mut();
        st.open = st.open.saturating_sub(1);
        match why {
            Closed::Orderly if self.round >= self.rounds => {
                if st.measuring(now) {
                    st.connections += 1;
                }
            }
            _ => st.errors += 1,
        }
    }
}
