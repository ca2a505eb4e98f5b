//! `ixora loadgen memcached`: an open-loop memcached load generator on the
//! native API, modelled on mutilate as the IX paper used it (§5.4).
//!
//! Every core opens `--conns` connections to the server. Each connection
//! has its own Poisson arrival process (exponential gaps) at
//! `rate / (conns × cores)`, so all of them together make a Poisson process
//! at the target rate. A request is sent at its scheduled time unless its
//! connection already has `--depth` requests outstanding; then it waits for
//! a reply (it is *queued*), and its latency still counts from the
//! scheduled time, so queueing shows in the latency as in mutilate.
//!
//! Requests use the memcached text protocol. Keys are deterministic strings
//! made from the key index; a value is determined by its key and a
//! *version* that travels in the item's flags, so every GET reply is
//! checked (key, flags, length and every byte).
//!
//! Timing: arrivals are kept in a heap per core and dispatched from the
//! engine's `end_of_batch` (and `tick`); the application's `poll` hook tells
//! the engine when the next arrival is due. Before the core sleeps, the
//! `sleep` hook sets an alarm (a timerfd whose helper thread rings the
//! core's doorbell) for the next arrival, early by the wake-up delay it has
//! learned, and the core spins the rest; with `--poll` the core never
//! sleeps. `send_lag_us` shows how late the generator itself sent requests,
//! `cpu_seconds` and `busy_seconds` (time spent working rather than
//! spinning idle) how loaded it was: together they tell whether the
//! generator kept up.

use crate::dataplane::DataplaneArgs;
use bytes::{Bytes, BytesMut};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use ixora_core::ConnHandle;
use ixora_engine::ev::{Closed, Conn, Ctl, EvApp, EvConfig, Handler, Service};
use ixora_engine::{App, Event, Io};
use serde::Serialize;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
// nix's `time` feature (clock_gettime, timerfd) comes with ixora-engine,
// which uses it too.
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

/// The request mixes of the Facebook memcached study (Atikoglu et al.,
/// SIGMETRICS 2012) that IX measured with mutilate. Key popularity is
/// uniform over `--keys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// ETC, the largest pool: keys of 20–70 B (GEV μ=30.80 σ=8.20 ξ=0.0787,
    /// truncated), values of 1–1024 B (generalized Pareto σ=214.5
    /// ξ=0.348, truncated; median ≈ 150 B, mean ≈ 230 B), 75% GET / 25% SET.
    Etc,
    /// USR, user-account status: keys of 16–19 B (uniform), values of
    /// 2 B, 99% GET / 1% SET.
    Usr,
}

impl Workload {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Etc => "etc",
            Workload::Usr => "usr",
        }
    }

    fn set_fraction(self) -> f64 {
        match self {
            Workload::Etc => 0.25,
            Workload::Usr => 0.01,
        }
    }
}

const AFTER_HELP: &str = "\
How it runs: connect (--conns per core), preload (SET every key once), then for each rate
--warmup unmeasured seconds and --duration measured seconds, back to back. Each connection
has its own Poisson arrival process; a request due while its connection has --depth requests
outstanding waits (it is counted as queued) and its latency still counts from its scheduled
time. Arrivals still unsent when a rate's window ends are counted as unsent and dropped.
Between arrivals the core sleeps with an alarm set early by its learned wake-up delay and
spins the rest; with --poll it spins throughout (lowest latency, a whole core per core).

Keys are 'k' + the 10-digit key index + filler up to the key's size; a SET carries a version
in the item's flags and the value's bytes follow from key and version, so every GET reply is
checked: key, flags, length and each byte. A wrong reply, an error reply or a malformed reply
is an error; END alone is a miss.

Output, one JSON line per rate on stdout: workload, target_rps, achieved_rps (answered requests
scheduled in the measured window, per second), requests, gets, sets, misses, errors,
latency_us {avg, p50, p90, p99, p999, max}, get_latency_us and set_latency_us (the same, each
kind alone), conns (all cores), depth, cores, seconds, cpu_seconds, busy_seconds (time the cores worked rather than spun idle: the generator's own
load), queued, unsent, incomplete (no reply within 2 s of the window's end) and send_lag_us
{p50, p99, max} (how late the generator sent requests that did not wait for depth). A summary
line per rate goes to stderr.";

/// Options of `ixora loadgen memcached`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("load").required(true).args(["rate", "sweep"])))]
#[command(after_long_help = AFTER_HELP)]
pub struct MemcachedArgs {
    #[command(flatten)]
    pub dp: DataplaneArgs,
    /// The memcached server, e.g. 198.18.11.1:11211.
    #[arg(long, value_name = "IP:PORT")]
    pub server: SocketAddrV4,
    /// Request mix. etc: keys 20–70 B, values 1 B–1 KiB (Facebook ETC
    /// size fits, truncated), 75% GET / 25% SET. usr: keys 16–19 B,
    /// values 2 B, 99% GET / 1% SET. Keys are chosen uniformly.
    #[arg(long, value_enum, default_value = "etc")]
    pub workload: Workload,
    /// Connections per core, all opened at start and kept for the run
    /// (the target rate is split evenly over conns × cores).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub conns: u32,
    /// Most requests outstanding (pipelined) per connection, 1..=64. A
    /// request due on a connection with this many outstanding waits for a
    /// reply; its latency counts from its scheduled time.
    #[arg(long, value_name = "D", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub depth: u32,
    /// Target rate in requests per second over all connections (open
    /// loop, Poisson arrivals), e.g. 20000 or 20k. Give --rate or --sweep.
    #[arg(long, value_name = "R", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Several target rates measured one after the other, e.g.
    /// 10k,20k,40k: one JSON line per rate.
    #[arg(long, value_name = "R1,R2,...", value_delimiter = ',', value_parser = parse_rate)]
    pub sweep: Option<Vec<f64>>,
    /// Seconds measured per rate.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = parse_duration)]
    pub duration: f64,
    /// Unmeasured seconds at each rate before its measured part.
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = parse_warmup)]
    pub warmup: f64,
    /// Key space: keys 0..N, chosen uniformly (at most 10 million).
    #[arg(long, value_name = "N", default_value_t = 10000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub keys: u32,
    /// SET every key once before measuring (not measured), so GETs hit;
    /// `--preload false` to skip (GETs of keys not yet set are misses).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub preload: bool,
    /// Seed of the arrival times, key choices and the value bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1e3),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1e6),
        _ => (t, 1.0),
    };
    let r: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (requests/s, e.g. 20000, 20k, 1.5M)"))?;
    let r = r * mult;
    if r.is_finite() && r > 0.0 && r <= 1e9 {
        Ok(r)
    } else {
        Err(format!(
            "{s:?}: the rate must be above 0 and at most 1G requests/s"
        ))
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Ok(d),
        _ => Err(format!("{s:?}: want seconds above 0 (at most 86400)")),
    }
}

fn parse_warmup(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && (0.0..=86_400.0).contains(&d) => Ok(d),
        _ => Err(format!("{s:?}: want seconds from 0 to 86400")),
    }
}

/// A validated run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Server address.
    pub server: SocketAddrV4,
    /// Request mix.
    pub workload: Workload,
    /// Connections per core.
    pub conns: usize,
    /// Outstanding requests per connection.
    pub depth: usize,
    /// Target rates, one measurement each.
    pub rates: Vec<f64>,
    /// Measured time per rate.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// Key space.
    pub keys: u32,
    /// Set every key first.
    pub preload: bool,
    /// Random seed.
    pub seed: u64,
    /// Cores.
    pub cores: usize,
}

impl Plan {
    /// Check the options; the error names the offending option.
    pub fn from_args(a: &MemcachedArgs) -> Result<Plan, String> {
        let rates = match (&a.rate, &a.sweep) {
            (Some(r), None) => vec![*r],
            (None, Some(v)) if !v.is_empty() => v.clone(),
            _ => return Err("give one of --rate or --sweep".into()),
        };
        if rates.len() > 100 {
            return Err(format!("--sweep: {} rates given, at most 100", rates.len()));
        }
        if a.dp.cores == 0 || a.dp.cores > 64 {
            return Err(format!("--cores {}: want 1..=64", a.dp.cores));
        }
        Ok(Plan {
            server: a.server,
            workload: a.workload,
            conns: a.conns as usize,
            depth: a.depth as usize,
            rates,
            duration: Duration::from_secs_f64(a.duration),
            warmup: Duration::from_secs_f64(a.warmup),
            keys: a.keys,
            preload: a.preload,
            seed: a.seed,
            cores: a.dp.cores,
        })
    }
}

// ---------------------------------------------------------------------
// Deterministic keys and values.

const MAX_KEY: usize = 72;
/// Values are slices of one random printable pattern, at an offset in
/// `0..PATTERN_SPAN` determined by key and version.
const PATTERN_SPAN: usize = 4096;
const MAX_VALUE: usize = 1024;

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in 0..n.
    fn below(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * n as u64) >> 32) as u32
    }
}

/// A number in (0, 1) from a hash.
fn hash_unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Inverse CDF of the generalized extreme value distribution.
fn gev_inv(u: f64, mu: f64, sigma: f64, xi: f64) -> f64 {
    mu + sigma / xi * ((-u.ln()).powf(-xi) - 1.0)
}

fn gev_cdf(x: f64, mu: f64, sigma: f64, xi: f64) -> f64 {
    (-(1.0 + xi * (x - mu) / sigma).powf(-1.0 / xi)).exp()
}

/// Inverse CDF of the generalized Pareto distribution (location 0).
fn gpd_inv(u: f64, sigma: f64, xi: f64) -> f64 {
    sigma / xi * ((1.0 - u).powf(-xi) - 1.0)
}

fn gpd_cdf(x: f64, sigma: f64, xi: f64) -> f64 {
    1.0 - (1.0 + xi * x / sigma).powf(-1.0 / xi)
}

/// Key and value sizes (per key, fixed) and the value pattern.
pub struct Keyspace {
    keys: u32,
    key_len: Vec<u8>,
    val_len: Vec<u16>,
    pattern: Vec<u8>,
    salt: u64,
    set_threshold: u64,
}

impl Keyspace {
    /// Draw every key's sizes (deterministic in `seed`).
    pub fn new(workload: Workload, keys: u32, seed: u64) -> Keyspace {
        let salt = mix64(seed ^ 0x6b65_7973_7061_6365);
        let n = keys as usize;
        let mut key_len = Vec::with_capacity(n);
        let mut val_len = Vec::with_capacity(n);
        // ETC: sizes by inverse transform of the fits, truncated to the
        // ranges (a draw is conditioned on the range, not clamped to it).
        let (k_mu, k_sigma, k_xi) = (30.7984, 8.20449, 0.078688);
        let (k_lo, k_hi) = (
            gev_cdf(20.0, k_mu, k_sigma, k_xi),
            gev_cdf(71.0, k_mu, k_sigma, k_xi),
        );
        let (v_sigma, v_xi) = (214.476, 0.348238);
        let v_hi = gpd_cdf(MAX_VALUE as f64, v_sigma, v_xi);
        for k in 0..keys {
            let h1 = mix64(salt ^ (k as u64));
            let h2 = mix64(h1 ^ 0x7661_6c75_6573);
            match workload {
                Workload::Etc => {
                    let u = k_lo + hash_unit(h1) * (k_hi - k_lo);
                    let kl = gev_inv(u, k_mu, k_sigma, k_xi).floor().clamp(20.0, 70.0);
                    key_len.push(kl as u8);
                    let u = hash_unit(h2) * v_hi;
                    let vl = gpd_inv(u, v_sigma, v_xi).floor() + 1.0;
                    val_len.push(vl.clamp(1.0, MAX_VALUE as f64) as u16);
                }
                Workload::Usr => {
                    key_len.push(16 + (h1 % 4) as u8);
                    val_len.push(2);
                }
            }
        }
        let mut r = Rng(seed ^ 0x7061_7474_6572_6e00);
        let pattern = (0..PATTERN_SPAN + MAX_VALUE)
            .map(|_| b'!' + (r.next() % 94) as u8)
            .collect();
        let set_threshold = (workload.set_fraction() * 18_446_744_073_709_551_616.0) as u64;
        Keyspace {
            keys,
            key_len,
            val_len,
            pattern,
            salt,
            set_threshold,
        }
    }

    /// Key `k`: `k` + 10 digits + `:` + filler to its length.
    fn key<'a>(&self, k: u32, out: &'a mut [u8; MAX_KEY]) -> &'a [u8] {
        let len = self.key_len[k as usize] as usize;
        out[0] = b'k';
        let mut v = k;
        for i in (1..11).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out[11] = b':';
        for (j, b) in out[12..len].iter_mut().enumerate() {
            *b = b'a' + ((k as usize).wrapping_mul(7).wrapping_add(j * 13) % 26) as u8;
        }
        &out[..len]
    }

    /// The value of key `k` at version `ver`.
    fn value(&self, k: u32, ver: u32) -> &[u8] {
        let len = self.val_len[k as usize] as usize;
        let off = self.value_offset(k, ver);
        &self.pattern[off..off + len]
    }

    fn value_offset(&self, k: u32, ver: u32) -> usize {
        (mix64(self.salt ^ ((k as u64) << 32 | ver as u64)) % PATTERN_SPAN as u64) as usize
    }

    /// Mean value size over the key space (for the banner).
    pub fn mean_value(&self) -> f64 {
        self.val_len.iter().map(|&v| v as f64).sum::<f64>() / self.keys.max(1) as f64
    }

    /// Mean key size over the key space (for the banner).
    pub fn mean_key(&self) -> f64 {
        self.key_len.iter().map(|&v| v as f64).sum::<f64>() / self.keys.max(1) as f64
    }
}

// ---------------------------------------------------------------------
// Results.

fn new_hist(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(100, 60_000_000_000, sigfig).expect("valid histogram bounds")
}

/// One rate's numbers on one core (and, merged, over all cores).
#[derive(Clone)]
struct PhaseStats {
    hist: Histogram<u64>,
    /// The SETs alone (`hist` has both kinds).
    set_hist: Histogram<u64>,
    lag: Histogram<u64>,
    requests: u64,
    gets: u64,
    sets: u64,
    misses: u64,
    errors: u64,
    queued: u64,
    unsent: u64,
    incomplete: u64,
    cpu_ns: u64,
    busy_ns: u64,
    /// Measured requests sent and not yet answered (per core).
    outstanding: u64,
    finalized: bool,
}

impl PhaseStats {
    fn new() -> PhaseStats {
        PhaseStats {
            hist: new_hist(3),
            set_hist: new_hist(3),
            lag: new_hist(2),
            requests: 0,
            gets: 0,
            sets: 0,
            misses: 0,
            errors: 0,
            queued: 0,
            unsent: 0,
            incomplete: 0,
            cpu_ns: 0,
            busy_ns: 0,
            outstanding: 0,
            finalized: false,
        }
    }

    fn add(&mut self, o: &PhaseStats) {
        let _ = self.hist.add(&o.hist);
        let _ = self.set_hist.add(&o.set_hist);
        let _ = self.lag.add(&o.lag);
        self.requests += o.requests;
        self.gets += o.gets;
        self.sets += o.sets;
        self.misses += o.misses;
        self.errors += o.errors;
        self.queued += o.queued;
        self.unsent += o.unsent;
        self.incomplete += o.incomplete;
        self.cpu_ns += o.cpu_ns;
        self.busy_ns += o.busy_ns;
    }
}

/// Latency summary in microseconds.
#[derive(Debug, Serialize, Default, Clone)]
pub struct LatencyUs {
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// How late the generator sent requests that did not wait for depth.
#[derive(Debug, Serialize, Default, Clone)]
pub struct LagUs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// One JSON line per rate.
#[derive(Debug, Serialize, Clone)]
pub struct RateReport {
    /// `etc` or `usr`.
    pub workload: &'static str,
    /// Requests per second asked for.
    pub target_rps: f64,
    /// Requests answered per measured second (scheduled in the window).
    pub achieved_rps: f64,
    /// Requests scheduled in the measured window and answered.
    pub requests: u64,
    /// Of which GETs.
    pub gets: u64,
    /// Of which SETs.
    pub sets: u64,
    /// GETs answered with a miss (END only).
    pub misses: u64,
    /// Malformed replies, error replies, wrong keys, flags, lengths or bytes
    /// (this rate, warm-up included).
    pub errors: u64,
    /// Latency from the scheduled send time to the complete reply.
    pub latency_us: LatencyUs,
    /// The same, GETs alone.
    pub get_latency_us: LatencyUs,
    /// The same, SETs alone.
    pub set_latency_us: LatencyUs,
    /// Connections over all cores.
    pub conns: usize,
    /// Most outstanding requests per connection.
    pub depth: usize,
    /// Cores.
    pub cores: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// CPU seconds the cores used in the measured window (with `--poll`
    /// they spin: about `seconds × cores`).
    pub cpu_seconds: f64,
    /// Estimated seconds the cores were working rather than spinning idle.
    pub busy_seconds: f64,
    /// Requests that found their connection at `depth` and waited.
    pub queued: u64,
    /// Requests scheduled in the window but never sent before it ended
    /// (connections saturated).
    pub unsent: u64,
    /// Requests sent in the window and not answered within 2 s after it.
    pub incomplete: u64,
    /// How late requests left relative to their schedule, not counting
    /// waits for depth (the generator's own delay).
    pub send_lag_us: LagUs,
}

struct Merge {
    totals: PhaseStats,
    cores: usize,
}

/// State shared by the cores (and read by `main` afterwards).
pub struct Shared {
    plan: Plan,
    ks: Arc<Keyspace>,
    base: Instant,
    /// Cores done connecting and preloading.
    ready: AtomicUsize,
    /// The start of the first rate (ns since `base`), set by the first
    /// core to see all cores ready.
    t0: OnceLock<u64>,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    /// Errors outside the rates' counts (preload, late replies).
    other_errors: AtomicU64,
    /// Connections that failed or closed unexpectedly.
    conn_errors: AtomicU64,
    merges: Mutex<Vec<Merge>>,
    reports: Mutex<Vec<RateReport>>,
}

const CONNECT_LIMIT: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_secs(2);
const CLOSE_LIMIT: Duration = Duration::from_secs(1);
const START_DELAY: Duration = Duration::from_millis(20);

impl Shared {
    /// Prepare a run of `plan` (draws the key space).
    pub fn new(plan: Plan) -> Arc<Shared> {
        let ks = Arc::new(Keyspace::new(plan.workload, plan.keys, plan.seed));
        let merges = plan
            .rates
            .iter()
            .map(|_| Merge {
                totals: PhaseStats::new(),
                cores: 0,
            })
            .collect();
        Arc::new(Shared {
            plan,
            ks,
            base: Instant::now(),
            ready: AtomicUsize::new(0),
            t0: OnceLock::new(),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            other_errors: AtomicU64::new(0),
            conn_errors: AtomicU64::new(0),
            merges: Mutex::new(merges),
            reports: Mutex::new(Vec::new()),
        })
    }

    /// The key space (sizes, for the banner).
    pub fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn preload_limit(&self) -> Duration {
        if self.plan.preload {
            Duration::from_secs(30) + Duration::from_secs_f64(self.plan.keys as f64 / 10_000.0)
        } else {
            Duration::ZERO
        }
    }

    /// The longest the run can take if all goes well, plus slack: the
    /// caller stops the engine then, whatever happens.
    pub fn time_limit(&self) -> Duration {
        let per = self.plan.warmup + self.plan.duration;
        CONNECT_LIMIT
            + self.preload_limit()
            + START_DELAY
            + per * self.plan.rates.len() as u32
            + GRACE
            + CLOSE_LIMIT
            + Duration::from_secs(10)
    }

    fn fail(&self, msg: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(msg);
        }
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Add one core's numbers for rate `i`; the last core prints the rate.
    fn merge(&self, i: usize, st: &PhaseStats) {
        let mut m = self.merges.lock().unwrap_or_else(|e| e.into_inner());
        m[i].totals.add(st);
        m[i].cores += 1;
        if m[i].cores < self.plan.cores {
            return;
        }
        let t = &m[i].totals;
        let p = &self.plan;
        let secs = p.duration.as_secs_f64();
        let q = |h: &Histogram<u64>, x: f64| h.value_at_quantile(x) as f64 / 1e3;
        let summary = |h: &Histogram<u64>| {
            if h.is_empty() {
                LatencyUs::default()
            } else {
                LatencyUs {
                    avg: h.mean() / 1e3,
                    p50: q(h, 0.5),
                    p90: q(h, 0.9),
                    p99: q(h, 0.99),
                    p999: q(h, 0.999),
                    max: h.max() as f64 / 1e3,
                }
            }
        };
        let latency_us = summary(&t.hist);
        let mut gets = t.hist.clone();
        let _ = gets.subtract(&t.set_hist);
        let get_latency_us = summary(&gets);
        let set_latency_us = summary(&t.set_hist);
        let send_lag_us = if t.lag.is_empty() {
            LagUs::default()
        } else {
            LagUs {
                p50: q(&t.lag, 0.5),
                p99: q(&t.lag, 0.99),
                max: t.lag.max() as f64 / 1e3,
            }
        };
        let r = RateReport {
            workload: p.workload.name(),
            target_rps: p.rates[i],
            achieved_rps: t.requests as f64 / secs,
            requests: t.requests,
            gets: t.gets,
            sets: t.sets,
            misses: t.misses,
            errors: t.errors,
            latency_us,
            get_latency_us,
            set_latency_us,
            conns: p.conns * p.cores,
            depth: p.depth,
            cores: p.cores,
            seconds: secs,
            cpu_seconds: t.cpu_ns as f64 / 1e9,
            busy_seconds: t.busy_ns as f64 / 1e9,
            queued: t.queued,
            unsent: t.unsent,
            incomplete: t.incomplete,
            send_lag_us,
        };
        // Printed under the lock, so the lines come out in rate order.
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
        eprintln!(
            "ixora loadgen memcached: [{}/{}] {} at {:.0} rps: {:.0} achieved, latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs; {} misses, {} errors, {} queued, {} unsent; CPU {:.2} s, busy {:.2} s, send lag p99 {:.1} µs",
            i + 1,
            p.rates.len(),
            r.workload,
            r.target_rps,
            r.achieved_rps,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.latency_us.max,
            r.misses,
            r.errors,
            r.queued,
            r.unsent,
            r.cpu_seconds,
            r.busy_seconds,
            r.send_lag_us.p99
        );
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
    }

    /// After the run: say what went wrong, if anything; true if the run
    /// was good (every rate measured, requests answered, no errors).
    pub fn finish(&self) -> bool {
        let mut ok = true;
        if let Some(f) = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            eprintln!("ixora loadgen memcached: {f}");
            ok = false;
        }
        let reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if reports.len() < self.plan.rates.len() {
            eprintln!(
                "ixora loadgen memcached: {} of {} rates measured",
                reports.len(),
                self.plan.rates.len()
            );
            ok = false;
        }
        let errors: u64 = reports.iter().map(|r| r.errors).sum();
        let other = self.other_errors.load(Ordering::Relaxed);
        let conn = self.conn_errors.load(Ordering::Relaxed);
        if errors + other + conn > 0 {
            eprintln!(
                "ixora loadgen memcached: errors: {errors} in measured rates, {other} outside them (preload, late replies), {conn} connection failures"
            );
            ok = false;
        }
        if let Some(r) = reports.iter().find(|r| r.requests == 0) {
            eprintln!(
                "ixora loadgen memcached: no request completed at {:.0} rps",
                r.target_rps
            );
            ok = false;
        }
        ok
    }
}

fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------
// One core.

const PRELOAD: u16 = u16::MAX;

#[derive(Clone, Copy)]
struct Req {
    /// Scheduled send time (ns since the shared base).
    sched: u64,
    key: u32,
    ver: u32,
    /// Rate index, or PRELOAD.
    phase: u16,
    measured: bool,
    set: bool,
}

/// Reply parser position.
#[derive(Clone, Copy)]
enum Rx {
    /// Reading a line.
    Line,
    /// Reading a value's bytes.
    Data { left: usize, pos: usize, off: usize },
    /// The `\r\n` after a value: how many of its bytes seen.
    Crlf(u8),
}

const MAX_LINE: usize = 1024;

struct ConnSt {
    handle: Option<ConnHandle>,
    alive: bool,
    broken: bool,
    out: BytesMut,
    unsent: VecDeque<Bytes>,
    dirty: bool,
    inflight: VecDeque<Req>,
    next_at: u64,
    scheduled: bool,
    blocked: bool,
    in_ready: bool,
    rng: Rng,
    rx: Rx,
    line: Vec<u8>,
    got_value: bool,
    value_ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Connecting,
    Preload,
    WaitAll,
    Running,
    Draining,
    Closing,
    Done,
}

/// Per-core bookkeeping apart from the connections (so the parser can
/// borrow a connection and this at once).
struct Sx {
    stage: Stage,
    depth: usize,
    phases: Vec<PhaseStats>,
    ready: Vec<u32>,
    open: usize,
    preload_pending: u64,
    other_errors: u64,
    // Busy accounting (see `LoadgenApp::poll`).
    busy_ns: u64,
    last_poll: u64,
    events: bool,
    prev_busy: bool,
}

enum Outcome {
    Stored,
    Hit,
    Miss,
    Error,
}

/// One core's generator.
struct Core {
    sh: Arc<Shared>,
    ks: Arc<Keyspace>,
    core: usize,
    cores: usize,
    conns: Vec<ConnSt>,
    sx: Sx,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    dirty: Vec<u32>,
    started: u64,
    deadline: u64,
    t0: u64,
    cur: usize,
    win_started: bool,
    cpu_mark: u64,
    busy_mark: u64,
    finalize_next: usize,
    preload_next: u64,
    ver: u32,
    /// Mean gap between arrivals on one connection, per rate, in ns.
    gaps: Vec<f64>,
    /// When the core next has something to do without traffic.
    wake_at: u64,
}

fn put_u64(out: &mut BytesMut, mut v: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    loop {
        i -= 1;
        b[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&b[i..]);
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    Some(v)
}

fn is_error_line(l: &[u8]) -> bool {
    l == b"ERROR" || l.starts_with(b"SERVER_ERROR") || l.starts_with(b"CLIENT_ERROR")
}

impl Core {
    fn new(sh: Arc<Shared>, core: usize) -> Core {
        let p = &sh.plan;
        let n = p.conns;
        let seed = p.seed;
        let conns = (0..n)
            .map(|ci| ConnSt {
                handle: None,
                alive: false,
                broken: false,
                out: BytesMut::with_capacity(8 << 10),
                unsent: VecDeque::with_capacity(8),
                dirty: false,
                inflight: VecDeque::with_capacity(p.depth),
                next_at: u64::MAX,
                scheduled: false,
                blocked: false,
                in_ready: false,
                rng: Rng(mix64(
                    seed ^ ((core as u64) << 40) ^ ((ci as u64) << 8) ^ 0x51,
                )),
                rx: Rx::Line,
                line: Vec::with_capacity(MAX_LINE),
                got_value: false,
                value_ok: false,
            })
            .collect();
        let total_conns = (p.conns * p.cores) as f64;
        let gaps = p.rates.iter().map(|r| 1e9 * total_conns / r).collect();
        let phases = p.rates.iter().map(|_| PhaseStats::new()).collect();
        Core {
            ks: sh.ks.clone(),
            core,
            cores: p.cores,
            conns,
            sx: Sx {
                stage: Stage::Connecting,
                depth: p.depth,
                phases,
                ready: Vec::with_capacity(n),
                open: 0,
                preload_pending: 0,
                other_errors: 0,
                busy_ns: 0,
                last_poll: 0,
                events: false,
                prev_busy: false,
            },
            heap: BinaryHeap::with_capacity(n + 1),
            dirty: Vec::with_capacity(n),
            started: 0,
            deadline: 0,
            t0: 0,
            cur: 0,
            win_started: false,
            cpu_mark: 0,
            busy_mark: 0,
            finalize_next: 0,
            preload_next: core as u64,
            ver: core as u32,
            gaps,
            wake_at: u64::MAX,
            sh,
        }
    }

    fn window(&self, p: usize) -> (u64, u64) {
        let w = self.sh.plan.warmup.as_nanos() as u64;
        let d = self.sh.plan.duration.as_nanos() as u64;
        let s = self.t0 + p as u64 * (w + d);
        (s + w, s + w + d)
    }

    fn fail(&mut self, msg: String) {
        self.sh.fail(format!("core {}: {msg}", self.core));
    }

    fn next_version(&mut self) -> u32 {
        self.ver = self.ver.wrapping_add(self.cores as u32);
        self.ver
    }

    /// Queue a request's bytes on connection `ci`.
    fn write_req(&mut self, ci: usize, r: Req) {
        let mut kb = [0u8; MAX_KEY];
        let key = self.ks.key(r.key, &mut kb);
        let c = &mut self.conns[ci];
        if r.set {
            let val = self.ks.value(r.key, r.ver);
            c.out.extend_from_slice(b"set ");
            c.out.extend_from_slice(key);
            c.out.extend_from_slice(b" ");
            put_u64(&mut c.out, r.ver as u64);
            c.out.extend_from_slice(b" 0 ");
            put_u64(&mut c.out, val.len() as u64);
            c.out.extend_from_slice(b"\r\n");
            c.out.extend_from_slice(val);
            c.out.extend_from_slice(b"\r\n");
        } else {
            c.out.extend_from_slice(b"get ");
            c.out.extend_from_slice(key);
            c.out.extend_from_slice(b"\r\n");
        }
        c.inflight.push_back(r);
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(ci as u32);
        }
    }

    /// Send what the connections have queued; keep what the window did
    /// not take for the next batch.
    fn flush(&mut self, io: &mut Io) {
        let mut keep = 0;
        for k in 0..self.dirty.len() {
            let ci = self.dirty[k] as usize;
            let c = &mut self.conns[ci];
            let Some(h) = c.handle.filter(|_| c.alive) else {
                c.out.clear();
                c.unsent.clear();
                c.dirty = false;
                continue;
            };
            if !c.out.is_empty() {
                c.unsent.push_back(c.out.split().freeze());
            }
            while let Some(front) = c.unsent.front_mut() {
                match io.send(h, front.clone()) {
                    Ok(n) if n == front.len() => {
                        c.unsent.pop_front();
                    }
                    Ok(n) => {
                        let rest = front.slice(n..);
                        *front = rest;
                        break;
                    }
                    Err(_) => break,
                }
            }
            if c.unsent.is_empty() {
                c.dirty = false;
            } else {
                self.dirty[keep] = ci as u32;
                keep += 1;
            }
        }
        self.dirty.truncate(keep);
    }

    /// Keep every connection `depth` deep in preload SETs.
    fn preload_fill(&mut self) {
        let mut ready = std::mem::take(&mut self.sx.ready);
        for &ci in &ready {
            let ci = ci as usize;
            self.conns[ci].in_ready = false;
            while self.conns[ci].alive
                && self.conns[ci].inflight.len() < self.sx.depth
                && self.preload_next < self.sh.plan.keys as u64
            {
                let key = self.preload_next as u32;
                self.preload_next += self.cores as u64;
                let ver = self.next_version();
                self.sx.preload_pending += 1;
                self.write_req(
                    ci,
                    Req {
                        sched: 0,
                        key,
                        ver,
                        phase: PRELOAD,
                        measured: false,
                        set: true,
                    },
                );
            }
        }
        ready.clear();
        self.sx.ready = ready;
    }

    /// Send connection `ci`'s due requests (up to depth). `queued`: they
    /// waited for depth.
    fn issue(&mut self, ci: usize, now: u64, queued: bool) {
        let gap = self.gaps[self.cur];
        let (ws, we) = self.window(self.cur);
        let keys = self.sh.plan.keys;
        loop {
            let c = &mut self.conns[ci];
            if !c.alive || c.broken {
                return;
            }
            if c.next_at > now || c.next_at >= we {
                if !c.scheduled && c.next_at < we {
                    self.heap.push(Reverse((c.next_at, ci as u32)));
                    c.scheduled = true;
                }
                return;
            }
            if c.inflight.len() >= self.sx.depth {
                c.blocked = true;
                return;
            }
            let sched = c.next_at;
            c.next_at = sched + (-c.rng.unit().ln() * gap + 0.5) as u64;
            let key = c.rng.below(keys);
            let set = c.rng.next() < self.ks.set_threshold;
            let measured = sched >= ws;
            let ver = if set { self.next_version() } else { 0 };
            self.write_req(
                ci,
                Req {
                    sched,
                    key,
                    ver,
                    phase: self.cur as u16,
                    measured,
                    set,
                },
            );
            if measured {
                let ph = &mut self.sx.phases[self.cur];
                ph.outstanding += 1;
                if queued {
                    ph.queued += 1;
                } else {
                    ph.lag.saturating_record((now - sched).max(100));
                }
            }
        }
    }

    /// Send everything due: connections a reply unblocked, then arrivals.
    fn dispatch(&mut self, now: u64) {
        let mut ready = std::mem::take(&mut self.sx.ready);
        for &ci in &ready {
            let ci = ci as usize;
            self.conns[ci].in_ready = false;
            if self.conns[ci].blocked {
                self.conns[ci].blocked = false;
                self.issue(ci, now, true);
            }
        }
        ready.clear();
        self.sx.ready = ready;
        while let Some(&Reverse((t, ci))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            self.conns[ci as usize].scheduled = false;
            self.issue(ci as usize, now, false);
        }
    }

    /// Rate `p` ended at `end`: close its books, start the next.
    fn rollover(&mut self, end: u64) {
        let p = self.cur;
        let (ws, _) = self.window(p);
        let gap = self.gaps[p];
        if self.win_started {
            self.sx.phases[p].cpu_ns = thread_cpu_ns().saturating_sub(self.cpu_mark);
            self.sx.phases[p].busy_ns = self.sx.busy_ns.saturating_sub(self.busy_mark);
        }
        let mut unsent = 0;
        for c in &mut self.conns {
            if c.alive && !c.broken {
                // Arrivals that were due but never sent (saturated).
                while c.next_at < end {
                    if c.next_at >= ws {
                        unsent += 1;
                    }
                    c.next_at += (-c.rng.unit().ln() * gap + 0.5) as u64;
                }
            }
            c.scheduled = false;
            c.blocked = false;
        }
        self.sx.phases[p].unsent += unsent;
        self.heap.clear();
        self.cur += 1;
        self.win_started = false;
        if self.cur < self.gaps.len() {
            let gap = self.gaps[self.cur];
            for (ci, c) in self.conns.iter_mut().enumerate() {
                if c.alive && !c.broken {
                    c.next_at = end + (-c.rng.unit().ln() * gap + 0.5) as u64;
                    c.scheduled = true;
                    self.heap.push(Reverse((c.next_at, ci as u32)));
                }
            }
        } else {
            self.sx.stage = Stage::Draining;
        }
    }

    /// Hand finished rates to the shared totals, in order.
    fn try_finalize(&mut self, now: u64) {
        while self.finalize_next < self.cur {
            let j = self.finalize_next;
            let (_, end) = self.window(j);
            let ph = &mut self.sx.phases[j];
            if ph.outstanding > 0 && now < end + GRACE.as_nanos() as u64 {
                break;
            }
            ph.incomplete += ph.outstanding;
            ph.outstanding = 0;
            ph.finalized = true;
            self.sh.merge(j, &self.sx.phases[j]);
            self.finalize_next += 1;
        }
    }

    fn start_running(&mut self, t0: u64) {
        self.t0 = t0;
        self.cur = 0;
        self.sx.stage = Stage::Running;
        let gap = self.gaps[0];
        self.heap.clear();
        for (ci, c) in self.conns.iter_mut().enumerate() {
            c.blocked = false;
            c.scheduled = false;
            if c.alive && !c.broken {
                c.next_at = t0 + (-c.rng.unit().ln() * gap + 0.5) as u64;
                c.scheduled = true;
                self.heap.push(Reverse((c.next_at, ci as u32)));
            }
        }
    }

    fn begin_closing(&mut self, io: &mut Io, now: u64) {
        self.flush(io);
        for c in &mut self.conns {
            if let Some(h) = c.handle.filter(|_| c.alive) {
                let _ = io.shutdown(h);
            }
        }
        self.heap.clear();
        self.sx.stage = Stage::Closing;
        self.deadline = now + CLOSE_LIMIT.as_nanos() as u64;
    }

    fn mark_ready(&mut self, now: u64) {
        self.sh.ready.fetch_add(1, Ordering::AcqRel);
        self.sx.stage = Stage::WaitAll;
        self.deadline = now
            + (self.sh.preload_limit() + CONNECT_LIMIT + Duration::from_secs(1)).as_nanos() as u64;
    }

    /// The core's clockwork: run from `tick` and `end_of_batch`.
    fn drive(&mut self, io: &mut Io) {
        let now = self.sh.now();
        if self.sh.failed.load(Ordering::Relaxed)
            && !matches!(self.sx.stage, Stage::Closing | Stage::Done)
        {
            self.begin_closing(io, now);
        }
        match self.sx.stage {
            Stage::Connecting => {
                if self.sx.open == self.conns.len() {
                    if self.sh.plan.preload {
                        self.sx.stage = Stage::Preload;
                        self.deadline = now + self.sh.preload_limit().as_nanos() as u64;
                        for (ci, c) in self.conns.iter_mut().enumerate() {
                            c.in_ready = true;
                            self.sx.ready.push(ci as u32);
                        }
                    } else {
                        self.mark_ready(now);
                    }
                } else if now > self.started + CONNECT_LIMIT.as_nanos() as u64 {
                    let msg = format!(
                        "{} of {} connections to {} opened within {} s",
                        self.sx.open,
                        self.conns.len(),
                        self.sh.plan.server,
                        CONNECT_LIMIT.as_secs()
                    );
                    self.fail(msg);
                }
            }
            Stage::Preload => {}
            Stage::WaitAll => {
                if self.sh.ready.load(Ordering::Acquire) >= self.cores {
                    let t0 = *self
                        .sh
                        .t0
                        .get_or_init(|| now + START_DELAY.as_nanos() as u64);
                    self.start_running(t0);
                } else if now > self.deadline {
                    self.fail("other cores did not get ready in time".into());
                }
            }
            Stage::Running => {
                loop {
                    let (ws, we) = self.window(self.cur);
                    if !self.win_started && now >= ws {
                        self.win_started = true;
                        self.cpu_mark = thread_cpu_ns();
                        self.busy_mark = self.sx.busy_ns;
                    }
                    if now < we {
                        break;
                    }
                    self.rollover(we);
                    if self.sx.stage != Stage::Running {
                        break;
                    }
                }
                if self.sx.stage == Stage::Running {
                    self.dispatch(now);
                }
                self.try_finalize(now);
            }
            Stage::Draining => {
                self.sx.ready.clear();
                self.try_finalize(now);
                if self.finalize_next >= self.gaps.len() {
                    self.begin_closing(io, now);
                }
            }
            Stage::Closing => {
                if self.sx.open == 0 || now > self.deadline {
                    self.sx.stage = Stage::Done;
                    io.stop();
                }
            }
            Stage::Done => {}
        }
        if self.sx.stage == Stage::Preload {
            self.preload_fill();
            if self.preload_next >= self.sh.plan.keys as u64 && self.sx.preload_pending == 0 {
                self.mark_ready(now);
            } else if now > self.deadline {
                let msg = format!(
                    "preload not finished within {:.0} s ({} SETs unanswered)",
                    self.sh.preload_limit().as_secs_f64(),
                    self.sx.preload_pending
                );
                self.fail(msg);
            }
        }
        self.flush(io);
        self.wake_at = match self.sx.stage {
            Stage::Running => {
                let (ws, we) = self.window(self.cur);
                let mut w = if self.win_started { we } else { ws };
                if let Some(Reverse((t, _))) = self.heap.peek() {
                    w = w.min(*t);
                }
                if self.finalize_next < self.cur {
                    w = w.min(self.window(self.finalize_next).1 + GRACE.as_nanos() as u64);
                }
                w
            }
            _ => u64::MAX,
        };
    }

    fn on_open(&mut self, ci: usize, h: ConnHandle) {
        let c = &mut self.conns[ci];
        c.handle = Some(h);
        c.alive = true;
        self.sx.open += 1;
    }

    fn on_closed(&mut self, ci: usize, why: Closed) {
        let c = &mut self.conns[ci];
        let was_open = c.alive;
        c.alive = false;
        if was_open {
            self.sx.open -= 1;
        }
        for r in c.inflight.drain(..) {
            if r.phase == PRELOAD {
                self.sx.preload_pending -= 1;
                self.sx.other_errors += 1;
            } else {
                let ph = &mut self.sx.phases[r.phase as usize];
                if r.measured && !ph.finalized {
                    ph.outstanding -= 1;
                    ph.incomplete += 1;
                }
            }
        }
        c.out.clear();
        c.unsent.clear();
        match self.sx.stage {
            Stage::Closing | Stage::Done => {}
            _ if c.broken => {}
            stage => {
                self.sh.conn_errors.fetch_add(1, Ordering::Relaxed);
                let what = match why {
                    Closed::Orderly => "closed by the server".to_string(),
                    Closed::Dead(r) => format!("failed ({r:?})"),
                };
                if matches!(stage, Stage::Connecting | Stage::Preload | Stage::WaitAll) {
                    let msg = format!("connection to {} {what}", self.sh.plan.server);
                    self.fail(msg);
                } else {
                    eprintln!(
                        "ixora loadgen memcached: core {}: a connection to {} {what}",
                        self.core, self.sh.plan.server
                    );
                }
            }
        }
    }

    /// Replies arrived on `ci`. False: the stream is garbled (abort it).
    fn on_data(&mut self, ci: usize, data: &[u8]) -> bool {
        if self.conns[ci].broken {
            return true;
        }
        let now = self.sh.now();
        let ok = parse(&mut self.conns[ci], ci, &self.ks, &mut self.sx, data, now);
        if !ok {
            let c = &mut self.conns[ci];
            c.broken = true;
            if !c.inflight.is_empty() {
                complete(c, ci, &mut self.sx, Outcome::Error, now);
            } else {
                self.sx.other_errors += 1;
            }
        }
        ok
    }
}

/// A reply to the oldest outstanding request of `c`.
fn complete(c: &mut ConnSt, ci: usize, sx: &mut Sx, out: Outcome, now: u64) {
    let Some(r) = c.inflight.pop_front() else {
        return;
    };
    let err = matches!(out, Outcome::Error);
    if r.phase == PRELOAD {
        sx.preload_pending -= 1;
        if err {
            sx.other_errors += 1;
        }
        if !c.in_ready {
            c.in_ready = true;
            sx.ready.push(ci as u32);
        }
        return;
    }
    let ph = &mut sx.phases[r.phase as usize];
    if ph.finalized {
        if err {
            sx.other_errors += 1;
        }
    } else {
        if err {
            ph.errors += 1;
        }
        if r.measured {
            ph.outstanding -= 1;
            ph.requests += 1;
            if r.set {
                ph.sets += 1;
            } else {
                ph.gets += 1;
            }
            if matches!(out, Outcome::Miss) {
                ph.misses += 1;
            }
            let ns = now.saturating_sub(r.sched).max(100);
            ph.hist.saturating_record(ns);
            if r.set {
                ph.set_hist.saturating_record(ns);
            }
        }
    }
    if c.blocked && !c.in_ready {
        c.in_ready = true;
        sx.ready.push(ci as u32);
    }
}

/// Parse replies incrementally (any split across segments). False on a
/// reply that cannot be parsed.
fn parse(c: &mut ConnSt, ci: usize, ks: &Keyspace, sx: &mut Sx, data: &[u8], now: u64) -> bool {
    let mut i = 0;
    while i < data.len() {
        match c.rx {
            Rx::Line => {
                let rest = &data[i..];
                match rest.iter().position(|&b| b == b'\n') {
                    None => {
                        if c.line.len() + rest.len() > MAX_LINE {
                            return false;
                        }
                        c.line.extend_from_slice(rest);
                        i = data.len();
                    }
                    Some(j) => {
                        if c.line.len() + j > MAX_LINE {
                            return false;
                        }
                        c.line.extend_from_slice(&rest[..j]);
                        i += j + 1;
                        let mut line = std::mem::take(&mut c.line);
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        let ok = reply_line(c, ci, ks, sx, &line, now);
                        line.clear();
                        c.line = line;
                        if !ok {
                            return false;
                        }
                    }
                }
            }
            Rx::Data { left, pos, off } => {
                let n = left.min(data.len() - i);
                if c.value_ok && data[i..i + n] != ks.pattern[off + pos..off + pos + n] {
                    c.value_ok = false;
                }
                i += n;
                c.rx = if n == left {
                    Rx::Crlf(0)
                } else {
                    Rx::Data {
                        left: left - n,
                        pos: pos + n,
                        off,
                    }
                };
            }
            Rx::Crlf(k) => {
                if data[i] != b"\r\n"[k as usize] {
                    return false;
                }
                i += 1;
                c.rx = if k == 1 { Rx::Line } else { Rx::Crlf(1) };
            }
        }
    }
    true
}

/// One reply line (without `\r\n`) for the oldest outstanding request.
fn reply_line(c: &mut ConnSt, ci: usize, ks: &Keyspace, sx: &mut Sx, l: &[u8], now: u64) -> bool {
    let Some(&front) = c.inflight.front() else {
        return false; // a reply to nothing
    };
    if front.set {
        let out = if l == b"STORED" {
            Outcome::Stored
        } else if is_error_line(l) || l == b"NOT_STORED" {
            Outcome::Error
        } else {
            return false;
        };
        complete(c, ci, sx, out, now);
        return true;
    }
    if l == b"END" {
        let out = match (c.got_value, c.value_ok) {
            (false, _) => Outcome::Miss,
            (true, true) => Outcome::Hit,
            (true, false) => Outcome::Error,
        };
        c.got_value = false;
        complete(c, ci, sx, out, now);
        return true;
    }
    if is_error_line(l) {
        c.got_value = false;
        complete(c, ci, sx, Outcome::Error, now);
        return true;
    }
    let Some(rest) = l.strip_prefix(b"VALUE ") else {
        return false;
    };
    if c.got_value {
        return false; // one key asked, two values
    }
    let mut f = rest.split(|&b| b == b' ');
    let (Some(key), Some(flags), Some(bytes)) = (f.next(), f.next(), f.next()) else {
        return false;
    };
    let Some(len) = parse_u64(bytes).filter(|&n| n <= 1 << 20) else {
        return false;
    };
    let len = len as usize;
    let mut kb = [0u8; MAX_KEY];
    let want_key = ks.key(front.key, &mut kb);
    let ver = parse_u64(flags).filter(|&v| v <= u32::MAX as u64);
    let want_len = ks.val_len[front.key as usize] as usize;
    c.got_value = true;
    c.value_ok = key == want_key && ver.is_some() && len == want_len;
    // A wrong key, flags or length is an error; the bytes are still read
    // (to stay in step with the stream) but not compared.
    let off = match ver {
        Some(v) if c.value_ok => ks.value_offset(front.key, v as u32),
        _ => 0,
    };
    c.rx = if len == 0 {
        Rx::Crlf(0)
    } else {
        Rx::Data {
            left: len,
            pos: 0,
            off,
        }
    };
    true
}

// ---------------------------------------------------------------------
// The event-library pieces.

/// One core's service: opens the connections and runs the clockwork.
pub struct LoadgenService {
    core: Rc<RefCell<Core>>,
}

impl Service for LoadgenService {
    type H = LoadgenConn;

    fn start(&mut self, ctl: &mut Ctl<LoadgenConn>) {
        let (server, n) = {
            let mut c = self.core.borrow_mut();
            c.started = c.sh.now();
            (c.sh.plan.server, c.conns.len())
        };
        for ci in 0..n {
            let h = LoadgenConn {
                core: self.core.clone(),
                ci,
            };
            if let Err(e) = ctl.connect(server, h) {
                self.core
                    .borrow_mut()
                    .fail(format!("cannot open connection {ci} to {server}: {e}"));
                break;
            }
        }
    }

    fn accept(&mut self, _: u16, _: SocketAddrV4) -> Option<LoadgenConn> {
        None
    }

    fn tick(&mut self, ctl: &mut Ctl<LoadgenConn>) {
        self.core.borrow_mut().drive(ctl.io());
    }

    fn end_of_batch(&mut self, ctl: &mut Ctl<LoadgenConn>) {
        self.core.borrow_mut().drive(ctl.io());
    }
}

/// One connection's callbacks: replies in, close.
pub struct LoadgenConn {
    core: Rc<RefCell<Core>>,
    ci: usize,
}

impl Handler for LoadgenConn {
    fn open(&mut self, c: &mut Conn) {
        self.core.borrow_mut().on_open(self.ci, c.handle());
    }

    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize {
        if !self.core.borrow_mut().on_data(self.ci, data) {
            c.abort();
        }
        data.len()
    }

    fn closed(&mut self, why: Closed) {
        self.core.borrow_mut().on_closed(self.ci, why);
    }
}

/// Wakes a sleeping core when its next arrival is due: a timerfd (exact,
/// no timer slack) that a helper thread waits on, ringing the core's
/// doorbell when it fires.
struct Alarm {
    tfd: Arc<TimerFd>,
    quit: Arc<AtomicBool>,
}

impl Alarm {
    fn new(io: &Io) -> std::io::Result<Alarm> {
        let tfd = Arc::new(TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_CLOEXEC,
        )?);
        let mut bell = std::fs::File::from(io.doorbell().try_clone_to_owned()?);
        let quit = Arc::new(AtomicBool::new(false));
        let (t, q) = (tfd.clone(), quit.clone());
        std::thread::Builder::new()
            .name(format!("ixora-alarm-{}", io.core()))
            .spawn(move || {
                use std::io::Write;
                while t.wait().is_ok() && !q.load(Ordering::Relaxed) {
                    let _ = bell.write(&1u64.to_ne_bytes());
                }
            })?;
        Ok(Alarm { tfd, quit })
    }

    /// Ring the doorbell in `ns` nanoseconds (replacing the last setting).
    fn set(&self, ns: u64) {
        let ts = TimeSpec::from_duration(Duration::from_nanos(ns.max(1)));
        let _ = self
            .tfd
            .set(Expiration::OneShot(ts), TimerSetTimeFlags::empty());
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        self.set(1); // wake the helper so it sees `quit`
    }
}

/// Spin rather than sleep when the next arrival is this close.
const SPIN_NS: u64 = 20_000;
/// Most the alarm is set early to make up for the wake-up delay.
const MAX_LEAD_NS: u64 = 200_000;

/// The core's application: the event library running the service, plus
/// the engine hooks that keep arrivals on time: `poll` says when the next
/// one is due, and before the core sleeps `sleep` sets an alarm for it
/// (with `--poll` the core never sleeps).
pub struct LoadgenApp {
    ev: EvApp<LoadgenService>,
    core: Rc<RefCell<Core>>,
    alarm: Option<Alarm>,
    /// When the alarm was set to ring (0: not set).
    alarm_for: u64,
    /// How late the core wakes after the alarm (moving average, ns): the
    /// alarm is set this much early and the core spins the rest.
    lead: u64,
}

impl LoadgenApp {
    /// Core `core`'s share of the run.
    pub fn new(sh: Arc<Shared>, core: usize) -> LoadgenApp {
        let core = Rc::new(RefCell::new(Core::new(sh, core)));
        LoadgenApp {
            ev: EvApp::new(LoadgenService { core: core.clone() }, EvConfig::default()),
            core,
            alarm: None,
            alarm_for: 0,
            lead: 0,
        }
    }
}

impl Drop for LoadgenApp {
    fn drop(&mut self) {
        let mut c = self.core.borrow_mut();
        let errs = std::mem::take(&mut c.sx.other_errors);
        c.sh.other_errors.fetch_add(errs, Ordering::Relaxed);
    }
}

impl App for LoadgenApp {
    fn start(&mut self, io: &mut Io) {
        match Alarm::new(io) {
            Ok(a) => self.alarm = Some(a),
            Err(e) => self
                .core
                .borrow_mut()
                .fail(format!("cannot set up the arrival timer: {e}")),
        }
        self.ev.start(io);
    }

    fn event(&mut self, io: &mut Io, ev: Event) {
        self.core.borrow_mut().sx.events = true;
        self.ev.event(io, ev);
    }

    fn end_of_batch(&mut self, io: &mut Io) {
        self.ev.end_of_batch(io);
    }

    fn poll(&mut self, _io: &mut Io) -> bool {
        let mut c = self.core.borrow_mut();
        let now = c.sh.now();
        let due = now >= c.wake_at;
        // Busy time: the time since the last poll counts as work if this
        // cycle had events, or the last one had events or sent requests
        // (its flush and transmit ran in that time); otherwise it was an
        // idle spin.
        let sx = &mut c.sx;
        let busy = sx.events || due;
        if sx.events || sx.prev_busy {
            sx.busy_ns += now.saturating_sub(sx.last_poll);
        }
        sx.last_poll = now;
        sx.prev_busy = busy;
        sx.events = false;
        due
    }

    fn sleep(&mut self, _io: &mut Io) -> bool {
        let c = self.core.borrow();
        if c.sx.stage != Stage::Running {
            return true; // the tick (1 ms) is enough
        }
        let now = c.sh.now();
        let lead = self.lead.min(MAX_LEAD_NS);
        if c.wake_at <= now + lead + SPIN_NS {
            return false; // due soon: spin
        }
        if let Some(a) = &self.alarm {
            let at = c.wake_at - lead;
            a.set(at - now);
            self.alarm_for = at;
        }
        true
    }

    fn wake(&mut self, _io: &mut Io) {
        let mut c = self.core.borrow_mut();
        let now = c.sh.now();
        c.sx.last_poll = now;
        c.sx.prev_busy = false;
        if self.alarm_for != 0 && now >= self.alarm_for {
            // Woken by the alarm (or after it): learn the delay.
            let late = (now - self.alarm_for).min(4 * MAX_LEAD_NS);
            self.lead = (7 * self.lead + late) / 8;
        }
        self.alarm_for = 0;
    }

    fn tick(&mut self, io: &mut Io) {
        self.ev.tick(io);
    }
}
