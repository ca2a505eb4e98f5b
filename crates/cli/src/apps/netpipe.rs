//! NetPIPE-style ping-pong: for message sizes from 1 byte upward, send a
//! message to an echo server and wait for all of it to come back, many
//! times; report latency (half the round trip) and goodput per size.

use ixora_engine::ev::{Closed, Conn, Ctl, Handler, Service};
use serde::Serialize;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One size's result.
#[derive(Debug, Clone, Serialize)]
pub struct NetpipePoint {
    /// Message size in bytes.
    pub size: usize,
    /// Round trips timed.
    pub rounds: usize,
    /// Median one-way latency (half the round trip), microseconds.
    pub latency_us: f64,
    /// Goodput in Mbit/s (message bytes both ways over the time taken).
    pub mbps: f64,
}

/// The sizes NetPIPE uses: powers of two from 1, each with a perturbation
/// of ±3 bytes (to expose alignment effects), up to `max`.
pub fn sizes(max: usize) -> Vec<usize> {
    let mut v = vec![];
    let mut s = 1usize;
    while s <= max {
        for d in [-3i64, 0, 3] {
            let x = s as i64 + d;
            if x >= 1 && (x as usize) <= max && !v.contains(&(x as usize)) {
                v.push(x as usize);
            }
        }
        s *= 2;
    }
    v
}

struct State {
    sizes: Vec<usize>,
    idx: usize,
    budget: Duration,
    min_rounds: usize,
    points: Vec<NetpipePoint>,
    failed: Option<String>,
    done: bool,
}

/// The NetPIPE client on one core (run it on one core).
pub struct NetpipeService {
    server: SocketAddrV4,
    st: Rc<RefCell<State>>,
    out: Arc<Mutex<Vec<NetpipePoint>>>,
    err: Arc<Mutex<Option<String>>>,
    started: bool,
}

impl NetpipeService {
    /// Measure `sizes` against `server`, spending about `per_size` on each
    /// (at least `min_rounds` round trips).
    pub fn new(
        server: SocketAddrV4,
        sizes: Vec<usize>,
        per_size: Duration,
        min_rounds: usize,
        out: Arc<Mutex<Vec<NetpipePoint>>>,
        err: Arc<Mutex<Option<String>>>,
    ) -> NetpipeService {
        NetpipeService {
            server,
            st: Rc::new(RefCell::new(State {
                sizes,
                idx: 0,
                budget: per_size,
                min_rounds,
                points: vec![],
                failed: None,
                done: false,
            })),
            out,
            err,
            started: false,
        }
    }
}

impl Drop for NetpipeService {
    fn drop(&mut self) {
        let st = self.st.borrow();
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = st.points.clone();
        *self.err.lock().unwrap_or_else(|e| e.into_inner()) = st.failed.clone();
    }
}

impl Service for NetpipeService {
    type H = PingPong;

    fn start(&mut self, ctl: &mut Ctl<PingPong>) {
        if ctl.io().core() != 0 {
            return;
        }
        let h = PingPong::new(self.st.clone());
        if let Err(e) = ctl.connect(self.server, h) {
            self.st.borrow_mut().failed = Some(format!("connect: {e}"));
            ctl.io().stop();
        }
        self.started = true;
    }

    fn accept(&mut self, _: u16, _: SocketAddrV4) -> Option<PingPong> {
        None
    }

    fn tick(&mut self, ctl: &mut Ctl<PingPong>) {
        let st = self.st.borrow();
        if st.done || st.failed.is_some() || !self.started {
            ctl.io().stop();
        }
    }
}

/// The single ping-pong connection.
pub struct PingPong {
    st: Rc<RefCell<State>>,
    size: usize,
    got: usize,
    sent_at: Instant,
    size_started: Instant,
    rtts: Vec<u64>,
}

impl PingPong {
    fn new(st: Rc<RefCell<State>>) -> PingPong {
        let size = st.borrow().sizes.first().copied().unwrap_or(1);
        PingPong {
            st,
            size,
            got: 0,
            sent_at: Instant::now(),
            size_started: Instant::now(),
            rtts: vec![],
        }
    }

    fn send(&mut self, c: &mut Conn) {
        let msg = vec![0x5a; self.size];
        self.sent_at = Instant::now();
        if c.write(&msg).is_err() {
            self.st.borrow_mut().failed = Some("write refused".into());
        }
    }
}

impl Handler for PingPong {
    fn open(&mut self, c: &mut Conn) {
        self.size_started = Instant::now();
        self.send(c);
    }

    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize {
        self.got += data.len();
        if self.got < self.size {
            return data.len();
        }
        let now = Instant::now();
        self.rtts.push((now - self.sent_at).as_nanos() as u64);
        self.got = 0;
        let mut st = self.st.borrow_mut();
        let spent = now - self.size_started;
        if spent >= st.budget && self.rtts.len() >= st.min_rounds {
            let mut r = std::mem::take(&mut self.rtts);
            r.sort_unstable();
            let median = r[r.len() / 2] as f64;
            let total: u64 = r.iter().sum();
            st.points.push(NetpipePoint {
                size: self.size,
                rounds: r.len(),
                latency_us: median / 2.0 / 1e3,
                mbps: (2 * self.size * r.len()) as f64 * 8.0 / (total as f64 / 1e9) / 1e6,
            });
            st.idx += 1;
            if st.idx >= st.sizes.len() {
                st.done = true;
                drop(st);
                c.close();
                return data.len();
            }
            self.size = st.sizes[st.idx];
            self.size_started = now;
        }
        drop(st);
        self.send(c);
        data.len()
    }

    fn closed(&mut self, why: Closed) {
        let mut st = self.st.borrow_mut();
        if !st.done && st.failed.is_none() {
            st.failed = Some(format!("connection ended early: {why:?}"));
        }
    }
}
