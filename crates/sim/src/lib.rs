//! A deterministic simulated network for Ixora's sans-I/O core.
//!
//! Two [`Stack`]s are joined by a full-duplex [`Link`] that can delay,
//! rate-limit, queue, drop, duplicate, reorder and corrupt frames. Time is
//! virtual: the simulation jumps from one event (a frame arriving, a timer)
//! to the next, so an hour of TCP runs in milliseconds and every run with the
//! same seed is identical, bit for bit.
//!
//! [`Transfer`] is the standard scenario: host A connects to host B, both
//! send the same number of pattern bytes, verify every byte received, close
//! in order and wait out TIME-WAIT.

pub mod fuzz;

use bytes::Bytes;
use ixora_core::wire::ethernet::MacAddr;
use ixora_core::{CcAlgorithm, ConnHandle, Counters, Duration, Event, Instant, Stack, StackConfig};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddrV4};

/// The stack type the simulator drives: frames are `Vec<u8>`, application
/// buffers are `Bytes` (cheap to slice and share).
pub type SimStack = Stack<Vec<u8>, Bytes>;

/// Impairments and capacity of each direction of the link.
#[derive(Debug, Clone, Serialize)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Bits per second (serialization delay); 0 means unlimited.
    pub rate_bps: u64,
    /// Bytes that may wait to be serialized; beyond it frames are dropped
    /// (a drop-tail queue). 0 means unlimited.
    pub queue_bytes: usize,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back and delivered after later ones.
    pub reorder: f64,
    /// How long a reordered frame is held (uniform in 0..=this, on top of
    /// the delay).
    pub reorder_delay: Duration,
    /// Probability one random bit of a frame is flipped.
    pub corrupt: f64,
    /// Mean time between stalls of the whole path (exponentially
    /// distributed: stalls come as a Poisson process); zero: none.
    pub stall_every: Duration,
    /// How long a stall lasts: a frame that enters the path meanwhile
    /// waits for its end and then leaves at the link's rate, behind the
    /// others, as a radio handover or a paused virtual machine holds
    /// frames (the queue limit applies: what does not fit is dropped).
    pub stall: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_micros(500),
            rate_bps: 1_000_000_000,
            queue_bytes: 256 * 1024,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(2),
            corrupt: 0.0,
            stall_every: Duration::ZERO,
            stall: Duration::ZERO,
        }
    }
}

/// What the link did, per direction summed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames offered to the link.
    pub sent: u64,
    /// Frames delivered (duplicates included).
    pub delivered: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped because the queue was full.
    pub queue_drops: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// Stalls of the path that held a frame.
    pub stalls: u64,
    /// Frames that met a stall (held, or dropped if the queue was full).
    pub stalled: u64,
}

/// What a [`Link`] does with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Dropped by the loss model.
    Lost,
    /// Dropped because the transmitter's queue was full (tail drop).
    QueueFull,
    /// Delivered at `at`; a second copy at `copy_at` if duplicated; with
    /// bit `flip_bit` (counted from the frame's first byte, lowest bit
    /// first) flipped if corrupted.
    Deliver {
        /// When the frame arrives.
        at: Instant,
        /// When its duplicate arrives, if it has one.
        copy_at: Option<Instant>,
        /// The bit flipped in both copies, if any.
        flip_bit: Option<usize>,
    },
}

/// A full-duplex impaired link.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: fastrand::Rng,
    /// When each direction's transmitter is free again.
    busy_until: [Instant; 2],
    /// The next (or current) stall's start; `Instant::ZERO` until drawn.
    next_stall: Instant,
    /// The start of the last stall counted in `stats.stalls`.
    stall_counted: Instant,
    stats: LinkStats,
}

/// Items (frames on a link) waiting for their time, taken in time order,
/// ties in the order they were put in: a frame held back is overtaken by
/// those behind it, the others keep their order. The simulator's link
/// and `ixora impair` both hold their frames in one.
#[derive(Debug)]
pub struct Departures<T> {
    heap: BinaryHeap<Reverse<Due<T>>>,
    seq: u64,
}

#[derive(Debug)]
struct Due<T> {
    at: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<T> Eq for Due<T> {}
impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Due<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

impl<T> Default for Departures<T> {
    fn default() -> Self {
        Departures {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> Departures<T> {
    /// `item` is due at `at`.
    pub fn push(&mut self, at: Instant, item: T) {
        self.seq += 1;
        self.heap.push(Reverse(Due {
            at,
            seq: self.seq,
            item,
        }));
    }

    /// When the next item is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|d| d.0.at)
    }

    /// The next item due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.next_at()? > now {
            return None;
        }
        self.heap.pop().map(|d| d.0.item)
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Nothing waiting?
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The items waiting, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.heap.iter().map(|d| &d.0.item)
    }
}

impl Link {
    /// A link with its own random stream.
    pub fn new(cfg: LinkConfig, seed: u64) -> Link {
        Link {
            cfg,
            rng: fastrand::Rng::with_seed(seed),
            busy_until: [Instant::ZERO; 2],
            next_stall: Instant::ZERO,
            stall_counted: Instant::ZERO,
            stats: LinkStats::default(),
        }
    }

    /// The end of the stall the path is in at `now`, if it is in one
    /// (stalls begin an exponentially distributed time apart, each after
    /// the last one's end).
    fn stalled_until(&mut self, now: Instant) -> Option<Instant> {
        let (every, len) = (self.cfg.stall_every, self.cfg.stall);
        if every.is_zero() || len.is_zero() {
            return None;
        }
        let gap = |rng: &mut fastrand::Rng| {
            // (1 - U is in (0, 1]: its logarithm is finite.)
            let x = -(1.0 - rng.f64()).ln() * every.as_micros() as f64;
            Duration::from_micros(x as u64)
        };
        if self.next_stall == Instant::ZERO {
            self.next_stall = now + gap(&mut self.rng);
        }
        while self.next_stall + len <= now {
            self.next_stall = self.next_stall + len + gap(&mut self.rng);
        }
        if self.next_stall > now {
            return None;
        }
        if self.stall_counted != self.next_stall {
            self.stall_counted = self.next_stall;
            self.stats.stalls += 1;
        }
        self.stats.stalled += 1;
        Some(self.next_stall + len)
    }

    /// Statistics so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Decide the fate of a frame of `len` bytes leaving host `from`
    /// (0 or 1: each direction has its own transmitter) at `now`, and
    /// count it. The simulator applies it to its frames; `ixora impair`
    /// to real ones, so both impair a path by the same rules.
    pub fn plan(&mut self, now: Instant, from: usize, len: usize) -> Fate {
        self.stats.sent += 1;
        // A stalled path sends nothing until the stall ends; what waits
        // for it then leaves at the link's rate, behind the queue.
        let free = self.stalled_until(now).unwrap_or(now);
        let c = &self.cfg;
        let start = self.busy_until[from].max(free);
        if c.queue_bytes > 0 && c.rate_bps > 0 {
            let backlog_s = (start - free).as_secs_f64();
            let queued = (backlog_s * c.rate_bps as f64 / 8.0) as usize;
            if queued + len > c.queue_bytes {
                self.stats.queue_drops += 1;
                return Fate::QueueFull;
            }
        }
        let ser = if c.rate_bps > 0 {
            Duration::from_nanos((len as u64 * 8 * 1_000_000_000).div_ceil(c.rate_bps))
        } else {
            Duration::ZERO
        };
        self.busy_until[from] = start + ser;
        let mut at = start + ser + c.delay;
        if self.rng.f64() < c.loss {
            self.stats.lost += 1;
            return Fate::Lost;
        }
        let mut flip_bit = None;
        if self.rng.f64() < c.corrupt && len > 0 {
            flip_bit = Some(self.rng.usize(0..len * 8));
            self.stats.corrupted += 1;
        }
        if self.rng.f64() < c.reorder {
            let extra = self.rng.u64(0..=c.reorder_delay.as_micros() as u64);
            at += Duration::from_micros(extra);
            self.stats.reordered += 1;
        }
        let mut copy_at = None;
        if self.rng.f64() < c.duplicate {
            let extra = self.rng.u64(0..=c.delay.as_micros() as u64);
            copy_at = Some(at + Duration::from_micros(extra));
            self.stats.duplicated += 1;
        }
        Fate::Deliver {
            at,
            copy_at,
            flip_bit,
        }
    }

    /// Count a frame handed to its receiver.
    pub fn delivered(&mut self) {
        self.stats.delivered += 1;
    }
}

/// Two hosts and a link, in virtual time.
pub struct Network {
    /// The two stacks (A = 0, B = 1).
    pub hosts: [SimStack; 2],
    /// The link between them.
    pub link: Link,
    now: Instant,
    /// Frames on the link: (receiving host, frame).
    queue: Departures<(usize, Vec<u8>)>,
    txbuf: Vec<u8>,
    trace: bool,
}

/// Host A's address.
pub const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Host B's address.
pub const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// A default configuration for host `i` (0 = A, 1 = B) on 198.18.0.0/24.
pub fn host_config(i: usize, seed: u64) -> StackConfig {
    let mac = MacAddr([0x02, 0, 0, 0, 0, 1 + i as u8]);
    let ip = if i == 0 { IP_A } else { IP_B };
    let mut c = StackConfig::new(mac, ip, 24);
    let mut secret = [0u8; 16];
    secret[..8].copy_from_slice(&seed.to_le_bytes());
    secret[8] = i as u8;
    c.secret = secret;
    c
}

impl Network {
    /// Build from two stack configurations and a link.
    pub fn new(
        a: StackConfig,
        b: StackConfig,
        link: LinkConfig,
        seed: u64,
    ) -> Result<Network, String> {
        let now = Instant::ZERO;
        let hosts = [Stack::new(a, now)?, Stack::new(b, now)?];
        let cap = hosts[0].max_frame_len().max(hosts[1].max_frame_len());
        Ok(Network {
            hosts,
            link: Link::new(link, seed ^ 0x5eed_1ce5),
            now,
            queue: Departures::default(),
            txbuf: vec![0u8; cap],
            trace: std::env::var_os("IXORA_SIM_TRACE").is_some(),
        })
    }

    /// Virtual time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Move every frame the hosts want to send onto the link.
    pub fn flush(&mut self) {
        for from in 0..2 {
            while let Some(n) = self.hosts[from].poll_transmit(self.now, &mut self.txbuf) {
                let fate = self.link.plan(self.now, from, n);
                if self.trace {
                    let what = match fate {
                        Fate::Deliver {
                            copy_at: Some(_), ..
                        } => "DUP",
                        Fate::Deliver { .. } => "",
                        _ => "LOST",
                    };
                    eprintln!(
                        "{} {} {} {}",
                        self.now,
                        ["A>B", "B>A"][from],
                        describe(&self.txbuf[..n]),
                        what
                    );
                }
                if let Fate::Deliver {
                    at,
                    copy_at,
                    flip_bit,
                } = fate
                {
                    let mut frame = self.txbuf[..n].to_vec();
                    if let Some(bit) = flip_bit {
                        frame[bit / 8] ^= 1 << (bit % 8);
                    }
                    if let Some(t) = copy_at {
                        self.queue.push(t, (1 - from, frame.clone()));
                    }
                    self.queue.push(at, (1 - from, frame));
                }
            }
        }
    }

    /// The next moment something happens (a delivery or a timer).
    pub fn next_time(&self) -> Option<Instant> {
        let q = self.queue.next_at();
        let t0 = self.hosts[0].poll_timeout();
        let t1 = self.hosts[1].poll_timeout();
        [q, t0, t1].into_iter().flatten().min()
    }

    /// Jump to `t` (not before now): deliver due frames, run due timers.
    pub fn advance_to(&mut self, t: Instant) {
        if t > self.now {
            self.now = t;
        }
        while let Some((to, frame)) = self.queue.pop_due(self.now) {
            self.link.delivered();
            self.hosts[to].handle_frame(self.now, frame);
        }
        for h in &mut self.hosts {
            if h.poll_timeout().is_some_and(|d| d <= self.now) {
                h.handle_timeout(self.now);
            }
        }
    }

    /// Frames on the link.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

/// Settings of a [`Transfer`].
#[derive(Debug, Clone)]
pub struct TransferConfig {
    /// Bytes each side sends.
    pub bytes: usize,
    /// Seed of the link and of the data pattern.
    pub seed: u64,
    /// Congestion control of both hosts.
    pub cc: CcAlgorithm,
    /// The link.
    pub link: LinkConfig,
    /// Largest buffer handed to `tcp_send` at once.
    pub write_size: usize,
    /// Give up after this much virtual time.
    pub time_limit: Duration,
    /// Host settings applied to both (the defaults of `host_config` when
    /// `None`).
    pub tweak: Option<fn(&mut StackConfig)>,
    /// Mark the data sent so far as urgent each time another this many
    /// bytes were offered (0: never): each side checks that every urgent
    /// byte the other's stack reports is at one of its marks and is the
    /// byte sent there, and that the last mark was reported.
    pub urgent_every: usize,
    /// Both hosts offer timestamps (RFC 7323); without them a needless
    /// timeout is found by F-RTO (RFC 5682) instead of the Eifel test.
    pub timestamps: bool,
    /// Both hosts offer SACK (RFC 2018).
    pub sack: bool,
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            bytes: 1 << 20,
            seed: 1,
            cc: CcAlgorithm::Cubic,
            link: LinkConfig::default(),
            write_size: 64 * 1024,
            time_limit: Duration::from_secs(3600),
            tweak: None,
            urgent_every: 0,
            timestamps: true,
            sack: true,
        }
    }
}

/// Result of a [`Transfer`], as `ixora sim` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct TransferReport {
    /// Bytes each direction carried (as asked).
    pub bytes: usize,
    /// Both directions delivered exactly the bytes sent, in order.
    pub intact: bool,
    /// Both connections closed in order: each side saw the other's FIN
    /// after all the data, closed without an abort, accepted no RST, and
    /// both stacks ended with no connection left (TIME-WAIT included).
    pub clean_close: bool,
    /// RSTs sent. A stack answers a stray segment that arrives after its
    /// side of the connection is gone (a delayed duplicate ACK) with a RST,
    /// as RFC 9293 §3.10.7.1 requires; such RSTs do not spoil a clean close.
    pub rsts_sent: u64,
    /// Segments retransmitted, both hosts.
    pub retransmits: u64,
    /// Retransmission timeouts, both hosts.
    pub timeouts: u64,
    /// Fast-retransmit recoveries, both hosts.
    pub fast_retransmits: u64,
    /// ACKs that reported data sent twice (D-SACK, RFC 2883), both hosts:
    /// a retransmission that was needless, or a duplicate of the link's.
    pub dsacks: u64,
    /// Window reductions given back because every segment their recovery
    /// sent again was D-SACKed, both hosts.
    pub undos: u64,
    /// Timeouts found needless, both hosts: by timestamps (RFC 3522) or,
    /// without them, by F-RTO (RFC 5682).
    pub spurious_rtos: u64,
    /// Virtual time until both sides had all data and EOF.
    pub sim_time_ms: f64,
    /// Per-direction goodput over `sim_time_ms`.
    pub goodput_mbps: f64,
    /// Wall-clock time of the run (filled by the caller).
    pub wall_ms: f64,
    /// Congestion control used.
    pub cc: &'static str,
    /// Seed.
    pub seed: u64,
    /// Link statistics.
    pub link: LinkStats,
    /// Frames the stacks dropped, by reason (non-zero ones).
    pub drops: Vec<(String, u64)>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
}

/// One side's view of the transfer.
struct Side {
    conn: Option<ConnHandle>,
    pattern: Bytes,
    sent: usize,
    received: usize,
    corrupt_at: Option<usize>,
    /// Where this side marked its data urgent (the offset after it).
    marks: Vec<u64>,
    /// The peer's urgent bytes this side was told of: (mark, byte).
    urgent: Vec<(u64, u8)>,
    /// An urgent byte unlike the one sent at its mark.
    urgent_wrong: Option<String>,
    eof: bool,
    shut: bool,
    closed: bool,
    dead: bool,
    done_at: Option<Instant>,
}

impl Side {
    fn summary(&self) -> String {
        format!(
            "sent={} received={} eof={} shut={} closed={} dead={}",
            self.sent, self.received, self.eof, self.shut, self.closed, self.dead
        )
    }
}

/// The pattern host `i` sends: deterministic from the seed, different per
/// direction, not periodic at any small stride.
pub fn pattern(seed: u64, i: usize, len: usize) -> Bytes {
    let mut rng =
        fastrand::Rng::with_seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1));
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    Bytes::from(v)
}

/// A bidirectional bulk transfer over a simulated link.
pub struct Transfer {
    cfg: TransferConfig,
}

const PORT: u16 = 5001;

impl Transfer {
    /// Prepare a transfer.
    pub fn new(cfg: TransferConfig) -> Transfer {
        Transfer { cfg }
    }

    /// Run to completion (or the time limit) and report.
    pub fn run(&self) -> TransferReport {
        match self.run_inner() {
            Ok(r) => r,
            Err(e) => TransferReport {
                bytes: self.cfg.bytes,
                intact: false,
                clean_close: false,
                rsts_sent: 0,
                retransmits: 0,
                timeouts: 0,
                fast_retransmits: 0,
                dsacks: 0,
                undos: 0,
                spurious_rtos: 0,
                sim_time_ms: 0.0,
                goodput_mbps: 0.0,
                wall_ms: 0.0,
                cc: self.cfg.cc.name(),
                seed: self.cfg.seed,
                link: LinkStats::default(),
                drops: vec![],
                error: Some(e),
            },
        }
    }

    fn run_inner(&self) -> Result<TransferReport, String> {
        let c = &self.cfg;
        let mut cfgs = [host_config(0, c.seed), host_config(1, c.seed)];
        for h in &mut cfgs {
            h.tcp.cc = c.cc;
            h.tcp.timestamps = c.timestamps;
            h.tcp.sack = c.sack;
            if let Some(f) = c.tweak {
                f(h);
            }
        }
        let [a, b] = cfgs;
        let mut net = Network::new(a, b, c.link.clone(), c.seed)?;
        net.hosts[1]
            .tcp_listen(PORT, None, 7)
            .map_err(|e| format!("listen: {e}"))?;
        let mut sides = [0, 1].map(|i| Side {
            conn: None,
            pattern: pattern(c.seed, i, c.bytes),
            sent: 0,
            received: 0,
            corrupt_at: None,
            marks: Vec::new(),
            urgent: Vec::new(),
            urgent_wrong: None,
            eof: false,
            shut: false,
            closed: false,
            dead: false,
            done_at: None,
        });
        let h = net.hosts[0]
            .tcp_connect(net.now(), 1, SocketAddrV4::new(IP_B, PORT))
            .map_err(|e| format!("connect: {e}"))?;
        sides[0].conn = Some(h);
        let limit = Instant::ZERO + c.time_limit;
        let mut error = None;
        let mut steps: u64 = 0;
        loop {
            // Run to completion at this instant: events, app calls, output.
            for _ in 0..1000 {
                let mut progressed = false;
                for i in 0..2 {
                    progressed |= self.drive_app(&mut net, i, &mut sides);
                }
                net.flush();
                if !progressed {
                    break;
                }
            }
            let all_done = sides.iter().all(|s| s.closed || s.dead);
            if all_done
                && net.in_flight() == 0
                && net.hosts.iter().all(|h| h.tcp_connection_count() == 0)
            {
                break;
            }
            if sides.iter().any(|s| s.dead) {
                error = Some("a connection died".to_string());
                break;
            }
            let Some(t) = net.next_time() else {
                error = Some(format!(
                    "stalled at {}: no frames in flight and no timers; A {:?} {}, B {:?} {}",
                    net.now(),
                    net.hosts[0].tcp_state_counts(),
                    sides[0].summary(),
                    net.hosts[1].tcp_state_counts(),
                    sides[1].summary(),
                ));
                break;
            };
            if t > limit {
                error = Some(format!("time limit of {:?} reached", c.time_limit));
                break;
            }
            net.advance_to(t);
            steps += 1;
            if steps > 200_000_000 {
                error = Some("step limit reached".into());
                break;
            }
        }
        let mut counters = Counters::default();
        for h in &net.hosts {
            counters.merge(h.counters());
            h.check_invariants()?;
        }
        let intact = sides
            .iter()
            .all(|s| s.received == c.bytes && s.corrupt_at.is_none() && s.eof);
        if let Some(s) = sides.iter().find(|s| s.corrupt_at.is_some()) {
            error.get_or_insert(format!("byte {} differs", s.corrupt_at.unwrap_or(0)));
        }
        if let Some(w) = sides.iter().find_map(|s| s.urgent_wrong.clone()) {
            error.get_or_insert(w);
        }
        if c.urgent_every > 0 {
            // Each side's last mark is the last urgent byte the other was
            // told of (its segments point to it until it is acknowledged).
            for i in 0..2 {
                let (last, told) = (sides[i].marks.last(), sides[1 - i].urgent.last());
                if last.map(|m| m - 1) != told.map(|t| t.0) {
                    error.get_or_insert(format!(
                        "host {i} marked urgent data up to {last:?}; the other was told last of \
                         {told:?}"
                    ));
                }
            }
        }
        let clean_close = error.is_none()
            && intact
            && counters.tcp_in_rsts == 0
            && sides.iter().all(|s| s.closed && !s.dead)
            && net.hosts.iter().all(|h| h.tcp_connection_count() == 0);
        let done = sides
            .iter()
            .filter_map(|s| s.done_at)
            .max()
            .unwrap_or(net.now());
        let secs = done.as_micros() as f64 / 1e6;
        let drops = counters
            .drop_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.name().to_string(), n))
            .collect();
        Ok(TransferReport {
            bytes: c.bytes,
            intact,
            clean_close,
            rsts_sent: counters.tcp_out_rsts,
            retransmits: counters.tcp_retrans_segs,
            timeouts: counters.tcp_timeouts,
            fast_retransmits: counters.tcp_fast_retrans,
            dsacks: counters.tcp_dsack_recv,
            undos: counters.tcp_dsack_undo,
            spurious_rtos: counters.tcp_spurious_rtos,
            sim_time_ms: secs * 1e3,
            goodput_mbps: if secs > 0.0 {
                c.bytes as f64 * 8.0 / secs / 1e6
            } else {
                0.0
            },
            wall_ms: 0.0,
            cc: c.cc.name(),
            seed: c.seed,
            link: net.link.stats().clone(),
            drops,
            error,
        })
    }

    /// Handle host `i`'s events and make its application calls; true if
    /// anything happened.
    fn drive_app(&self, net: &mut Network, i: usize, sides: &mut [Side; 2]) -> bool {
        let now = net.now();
        let mut progressed = false;
        while let Some(e) = net.hosts[i].poll_event() {
            progressed = true;
            let side = &mut sides[i];
            match e {
                Event::Knock { handle, .. } => {
                    net.hosts[i].tcp_accept(handle, 2).expect("knocked handle");
                    side.conn = Some(handle);
                }
                Event::Connected { .. } | Event::Sent { .. } => {}
                Event::Urgent {
                    mark,
                    byte: Some(b),
                    ..
                } => {
                    let sent = pattern_of(sides, 1 - i).get(mark as usize).copied();
                    let marked = sides[1 - i].marks.contains(&(mark + 1));
                    let side = &mut sides[i];
                    if (sent != Some(b) || !marked) && side.urgent_wrong.is_none() {
                        side.urgent_wrong = Some(format!(
                            "urgent byte at {mark}: told {b:#04x}, sent {sent:?}, marked \
                             there: {marked}"
                        ));
                    }
                    side.urgent.push((mark, b));
                }
                Event::Urgent { .. } => {}
                Event::Recv { handle, .. } => {
                    let stack = &mut net.hosts[i];
                    let peer_pattern = pattern_of(sides, 1 - i);
                    let side = &mut sides[i];
                    let mut n = 0;
                    for chunk in stack.tcp_recv_chunks(handle).expect("live handle") {
                        let at = side.received + n;
                        let want = peer_pattern.get(at..at + chunk.len());
                        if want != Some(chunk) && side.corrupt_at.is_none() {
                            let off = want
                                .map(|w| w.iter().zip(chunk).position(|(a, b)| a != b).unwrap_or(0))
                                .unwrap_or(0);
                            side.corrupt_at = Some(at + off);
                        }
                        n += chunk.len();
                    }
                    side.received += n;
                    stack.tcp_recv_done(now, handle, n).expect("live handle");
                }
                Event::PeerClosed { .. } => side.eof = true,
                Event::Dead { handle, .. } => {
                    side.dead = true;
                    let _ = net.hosts[i].tcp_close(now, handle);
                }
                Event::UdpRecv { .. } => {}
            }
        }
        let side = &mut sides[i];
        let Some(h) = side.conn else {
            return progressed;
        };
        if side.closed || side.dead {
            return progressed;
        }
        let stack = &mut net.hosts[i];
        let Ok(state) = stack.tcp_state(h) else {
            return progressed;
        };
        if matches!(
            state,
            ixora_core::State::SynSent | ixora_core::State::SynReceived
        ) {
            return progressed;
        }
        // Offer data as the window allows.
        while side.sent < self.cfg.bytes {
            let end = (side.sent + self.cfg.write_size).min(self.cfg.bytes);
            let chunk = side.pattern.slice(side.sent..end);
            match stack.tcp_send(now, h, chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let every = self.cfg.urgent_every;
                    if every > 0 && (side.sent + n) / every > side.sent / every {
                        stack.tcp_mark_urgent(now, h, 0).expect("live handle");
                        side.marks.push((side.sent + n) as u64);
                    }
                    side.sent += n;
                    progressed = true;
                }
            }
        }
        if side.sent == self.cfg.bytes && !side.shut {
            side.shut = stack.tcp_shutdown(now, h).is_ok();
            progressed = true;
        }
        if side.eof && side.done_at.is_none() && side.received == self.cfg.bytes {
            side.done_at = Some(now);
        }
        // Close once our data is acknowledged and the peer is done.
        if side.shut && side.eof {
            if let Ok(info) = stack.tcp_info(h) {
                if info.unacked == 0 && info.unsent == 0 && info.readable == 0 {
                    stack.tcp_close(now, h).expect("live handle");
                    side.closed = true;
                    progressed = true;
                }
            }
        }
        progressed
    }
}

fn pattern_of(sides: &[Side; 2], i: usize) -> Bytes {
    sides[i].pattern.clone()
}

/// One-line summary of a frame (for `IXORA_SIM_TRACE`).
pub fn describe(frame: &[u8]) -> String {
    use ixora_core::wire::{
        ethernet::EthernetFrame, ipv4::Ipv4Packet, tcp::TcpOptions, tcp::TcpPacket,
    };
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return "short".into();
    };
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return format!("{:?}", eth.ethertype());
    };
    let Ok(t) = TcpPacket::new_checked(ip.payload()) else {
        return format!("ip proto {:?}", ip.protocol());
    };
    let o = TcpOptions::parse(t.options()).unwrap_or_default();
    let sacks: Vec<String> = o
        .sacks()
        .iter()
        .map(|b| format!("{}-{}", b.left, b.right))
        .collect();
    format!(
        "{:?} seq={} ack={} len={} win={} ts={:?} sack=[{}]",
        t.flags(),
        t.seq_number(),
        t.ack_number(),
        t.payload().len(),
        t.window_len(),
        o.timestamp,
        sacks.join(",")
    )
}
