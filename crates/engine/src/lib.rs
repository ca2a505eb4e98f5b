//! Ixora's dataplane engine: one run-to-completion loop per core (IX §3,
//! Fig. 1b), each owning one queue of the port, its own packet-buffer pool,
//! its own protocol stack (flow table, timing wheel, counters) and its own
//! application instance. Nothing writable is shared between cores on the
//! fast path; the only cross-core traffic is the hand-over of a frame that
//! arrived on the wrong core's queue (see [`steer`]).
//!
//! The cycle:
//! 1. poll the queue for at most `batch` frames (adaptive, bounded batching:
//!    take what is waiting, never wait to fill a batch);
//! 2. run the protocols on them;
//! 3. hand the resulting events to the application;
//! 4. the application answers with batched calls ([`Io`]);
//! 5. run the timers that are due;
//! 6. build outgoing frames straight into pool buffers and post them, then
//!    reclaim buffers the device has finished with.
//!
//! When a cycle finds nothing to do the core sleeps on the queue's file
//! descriptor (and its hand-over doorbell) until a frame or the next timer
//! — an idle dataplane uses no CPU — unless `poll` asks it to spin for the
//! lowest latency.

pub mod api;
pub mod echo;
pub mod ev;
pub mod spin;
pub mod steer;

pub use api::{App, CoreStack, Event, Io, Received, WallClock};

use crossbeam_queue::ArrayQueue;
use ixora_core::wire::Checksum;
use ixora_core::{Counters, Duration, Instant, Stack, StackConfig, TcpConfig};
use ixora_io::{PacketBuf, PoolConfig, Port, Queue};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeValLike;
use spin::IdleSpin;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How to run the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Our address on the port.
    pub ip: Ipv4Addr,
    /// Prefix length of the local subnet.
    pub prefix_len: u8,
    /// Default gateway, if any.
    pub gateway: Option<Ipv4Addr>,
    /// Cores (threads), each with one queue of the port.
    pub cores: usize,
    /// Most frames taken from the queue per cycle (IX's B; default 64).
    pub batch: usize,
    /// Spin when idle instead of sleeping (lowest latency, a full core).
    pub poll: bool,
    /// Longest idle spin before a sleep (see [`spin`]): an idle core looks
    /// again for up to an adaptive window of at most this, yielding its
    /// CPU between looks. Zero: sleep at once (the default). Not with
    /// `poll` (never sleeps) nor `rt_priority` (a real-time thread's yield
    /// would keep the normal threads of its CPU off it).
    pub idle_spin: std::time::Duration,
    /// Pin core `i` to CPU `cpus[i]` when given.
    pub cpus: Option<Vec<usize>>,
    /// Run the core threads under `SCHED_FIFO` at this priority (1–99):
    /// they preempt the normal threads of their CPU whenever they have
    /// work, as the kernel's softirq processing does (a shared CPU then
    /// serves frames at once instead of after the running program's time
    /// slice). `None`: normal scheduling. Never with `poll` on a shared
    /// CPU: a spinning real-time thread starves the others.
    pub rt_priority: Option<u8>,
    /// Packet buffers per core.
    pub pool_chunks: u32,
    /// Back pools with hugepages when the machine has them.
    pub hugepages: bool,
    /// TCP parameters.
    pub tcp: TcpConfig,
    /// Interval of the application's `tick`.
    pub tick: Duration,
}

impl EngineConfig {
    /// Defaults for address `ip/prefix_len`: one core, batch 64, sleeping
    /// when idle.
    pub fn new(ip: Ipv4Addr, prefix_len: u8) -> EngineConfig {
        EngineConfig {
            ip,
            prefix_len,
            gateway: None,
            cores: 1,
            batch: 64,
            poll: false,
            idle_spin: std::time::Duration::ZERO,
            cpus: None,
            rt_priority: None,
            pool_chunks: 8192,
            hugepages: true,
            tcp: TcpConfig::default(),
            tick: Duration::from_millis(1),
        }
    }
}

/// What one core did.
#[derive(Debug, Clone, Default)]
pub struct CoreReport {
    /// Core index.
    pub core: usize,
    /// Frames taken from the queue.
    pub rx_frames: u64,
    /// Frames posted to the queue.
    pub tx_frames: u64,
    /// Frames handed to another core (they arrived on the wrong queue).
    pub steered_out: u64,
    /// Frames handed over by other cores.
    pub steered_in: u64,
    /// Hand-overs dropped (the receiving core's mailbox was full).
    pub steer_drops: u64,
    /// Loop iterations.
    pub cycles: u64,
    /// Times the core slept waiting for work.
    pub sleeps: u64,
    /// Buffer allocations refused (pool exhausted).
    pub pool_exhausted: u64,
    /// CPU time the core's thread used, in seconds.
    pub cpu_seconds: f64,
    /// The stack's counters.
    pub counters: Counters,
    /// Largest batch seen.
    pub max_batch: usize,
    /// Connections the core held when it stopped (all forgotten).
    pub closed_at_stop: u64,
    /// Of those, the ones reset (their peers told with a RST rather than
    /// left to time out; not those in SYN-SENT or TIME-WAIT).
    pub reset_at_stop: u64,
}

/// What the whole engine did.
#[derive(Debug, Clone, Default)]
pub struct EngineReport {
    /// Per core.
    pub cores: Vec<CoreReport>,
}

impl EngineReport {
    /// Stack counters summed over the cores.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for r in &self.cores {
            c.merge(&r.counters);
        }
        c
    }
}

/// Frames handed between cores, and the doorbells to wake a sleeping core.
struct Mailboxes {
    boxes: Vec<ArrayQueue<Vec<u8>>>,
    bells: Vec<EventFd>,
    sleeping: Vec<AtomicBool>,
}

impl Mailboxes {
    fn new(cores: usize) -> io::Result<Mailboxes> {
        let mut bells = Vec::with_capacity(cores);
        for _ in 0..cores {
            bells.push(
                EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                    .map_err(io::Error::from)?,
            );
        }
        Ok(Mailboxes {
            boxes: (0..cores).map(|_| ArrayQueue::new(4096)).collect(),
            bells,
            sleeping: (0..cores).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// Give `frame` to core `to`; false if its mailbox is full.
    fn post(&self, to: usize, frame: Vec<u8>) -> bool {
        let ok = self.boxes[to].push(frame).is_ok();
        if ok && self.sleeping[to].load(Ordering::Acquire) {
            let _ = self.bells[to].write(1);
        }
        ok
    }
}

/// Random bytes for the stack's keyed hashes (ISNs, cookies, ports).
fn secret() -> [u8; 16] {
    use std::io::Read;
    let mut s = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut s);
    }
    // Mix in the time and pid in case /dev/urandom is unavailable.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for (i, b) in t
        .to_le_bytes()
        .iter()
        .chain(std::process::id().to_le_bytes().iter())
        .enumerate()
    {
        s[i % 16] ^= b;
    }
    s
}

/// The keys and clock origin of every core's stack.
#[derive(Clone, Copy)]
struct Keys {
    secret: [u8; 16],
    clock_key: [u8; 16],
    clock_base: Duration,
}

/// Where the machine's clock key is kept (tmpfs: one per boot).
const CLOCK_KEY_FILE: &str = "/run/ixora/clock-key";

/// The key of the ISN and timestamp clocks, the same for every Ixora
/// process since boot (`StackConfig::clock_key`): read from
/// [`CLOCK_KEY_FILE`], made (root-only, 16 random bytes) by the first
/// process that needs it. Where that cannot be done (no permission, a
/// read-only /run) a random key of this process's own: then a restarted
/// process may see its first SYNs to a peer that still holds its earlier
/// connections in TIME-WAIT refused, as before.
fn clock_key(fallback: [u8; 16]) -> [u8; 16] {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let read = || -> Option<[u8; 16]> {
        let mut k = [0u8; 16];
        std::fs::File::open(CLOCK_KEY_FILE)
            .and_then(|mut f| f.read_exact(&mut k))
            .ok()?;
        Some(k)
    };
    if let Some(k) = read() {
        return k;
    }
    let path = std::path::Path::new(CLOCK_KEY_FILE);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // Written whole under another name, then linked into place: a
    // concurrent starter never reads half a key, and the first one wins.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&secret()))
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match (made, read()) {
        (_, Some(k)) => k,
        _ => fallback,
    }
}

/// Run the engine on `port` until `stop` is set or every core's
/// application asked to stop. `make_app(core)` builds each core's
/// application on that core's thread.
pub fn run<P, A, F>(
    port: Arc<P>,
    cfg: &EngineConfig,
    make_app: F,
    stop: Arc<AtomicBool>,
) -> io::Result<EngineReport>
where
    P: Port + ?Sized,
    A: App,
    F: Fn(usize) -> A + Sync,
{
    let caps = port.caps();
    if cfg.cores == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cores: must be at least 1",
        ));
    }
    if cfg.cores as u32 > caps.queues {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cores: {} asked but the {} port has {} queue(s); one queue per core",
                cfg.cores, caps.backend, caps.queues
            ),
        ));
    }
    if cfg.batch == 0 || cfg.batch > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "batch: must be in 1..=4096",
        ));
    }
    if let Some(cpus) = &cfg.cpus {
        if cpus.len() < cfg.cores {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cpus: {} given for {} cores", cpus.len(), cfg.cores),
            ));
        }
    }
    let mail = Mailboxes::new(cfg.cores)?;
    let secret = secret();
    let start = std::time::Instant::now();
    let keys = Keys {
        secret,
        clock_key: clock_key(secret),
        clock_base: ixora_io::sys::monotonic(),
    };
    let results: Vec<io::Result<CoreReport>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.cores)
            .map(|i| {
                let (port, mail, make_app, stop) = (&port, &mail, &make_app, &stop);
                std::thread::Builder::new()
                    .name(format!("ixora-core-{i}"))
                    .spawn_scoped(s, move || {
                        let r = run_core(i, &**port, cfg, mail, make_app, stop, keys, start);
                        if r.is_err() {
                            // One core failing stops the others.
                            stop.store(true, Ordering::Relaxed);
                            for b in &mail.bells {
                                let _ = b.write(1);
                            }
                        }
                        r
                    })
                    .expect("spawn core thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("core thread panicked")))
            })
            .collect()
    });
    let mut report = EngineReport::default();
    for r in results {
        report.cores.push(r?);
    }
    Ok(report)
}

fn thread_cpu_seconds() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.num_nanoseconds() as f64 / 1e9)
        .unwrap_or(0.0)
}

#[allow(clippy::too_many_arguments)]
fn run_core<P, A, F>(
    i: usize,
    port: &P,
    cfg: &EngineConfig,
    mail: &Mailboxes,
    make_app: &F,
    stop: &AtomicBool,
    keys: Keys,
    start: std::time::Instant,
) -> io::Result<CoreReport>
where
    P: Port + ?Sized,
    A: App,
    F: Fn(usize) -> A,
{
    if let Some(cpus) = &cfg.cpus {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpus[i]).map_err(io::Error::from)?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
            .map_err(io::Error::from)?;
    }
    if let Some(p) = cfg.rt_priority {
        ixora_io::sys::set_fifo(p).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "core {i}: SCHED_FIFO priority {p}: {e} (needs root or CAP_SYS_NICE; \
                     --rt-priority 0 runs at normal priority)"
                ),
            )
        })?;
    }
    // Timers to the microsecond (sleeps are as short as a tick).
    let _ = ixora_io::sys::set_timer_slack(1_000);
    let caps = port.caps();
    let chunk = caps.max_frame.next_power_of_two().max(2048);
    let want = PoolConfig {
        chunks: cfg.pool_chunks,
        chunk_size: chunk,
        // Room before each frame built here for the port's per-frame
        // metadata (AF_XDP checksum offload).
        headroom: caps.tx_headroom,
        hugepages: cfg.hugepages,
    };
    let pool = port.pool(i as u32, port.fit_pool(want))?;
    let mut queue: Box<dyn Queue> = port.open_queue(i as u32, &pool)?;
    let clock = |s: std::time::Instant| Instant::from_micros(s.elapsed().as_micros() as u64);

    let mut scfg = StackConfig::new(port.mac(), cfg.ip, cfg.prefix_len);
    scfg.gateway = cfg.gateway;
    scfg.tcp = cfg.tcp.clone();
    scfg.secret = keys.secret;
    scfg.clock_key = keys.clock_key;
    scfg.clock_base = keys.clock_base;
    // The cores share the secret, so the identification counters too:
    // each sends in a lane of its own.
    scfg.ident_lane = (i as u16, cfg.cores as u16);
    scfg.mtu = scfg
        .mtu
        .min((caps.max_frame.saturating_sub(18)).min(9000) as u16);
    if caps.rx_checksum_unreliable {
        // The peer's checksums may never have been computed (offloaded to a
        // virtual device): compute ours, do not judge theirs.
        scfg.checksums.tcp = Checksum::Tx;
        scfg.checksums.udp = Checksum::Tx;
    }
    // TCP segments carry only the pseudo-header sum; the port completes
    // it (see `partial_tcp_checksum`). UDP stays in software: few bytes.
    let tx_offload = caps.tx_checksum_offload;
    if tx_offload {
        scfg.checksums.tcp = scfg.checksums.tcp.with_partial_tx();
    }
    let mut stack: CoreStack = Stack::new(scfg, clock(start))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut app = make_app(i);
    let mut rep = CoreReport {
        core: i,
        ..CoreReport::default()
    };
    let cores = cfg.cores;
    let mut local_stop = false;
    let mut spin = IdleSpin::new(if cfg.poll || cfg.rt_priority.is_some() {
        std::time::Duration::ZERO
    } else {
        cfg.idle_spin
    });
    // The application's handle on this core at time `$now`.
    macro_rules! io {
        ($now:expr) => {
            Io {
                stack: &mut stack,
                now: $now,
                core: i,
                cores,
                stop: &mut local_stop,
                bell: mail.bells[i].as_fd(),
                spin: &spin,
                pool: &pool,
            }
        };
    }
    app.start(&mut io!(clock(start)));
    let mut rx: Vec<PacketBuf> = Vec::with_capacity(cfg.batch);
    let mut tx: Vec<PacketBuf> = Vec::with_capacity(cfg.batch);
    let mut next_tick = clock(start) + cfg.tick;
    let qfd = queue.poll_fd();
    let bell = mail.bells[i].as_raw_fd();
    let extra = app.wait_fd();

    // An idle polling core reads the clock only every few cycles (timers
    // need no finer time); a cycle with frames always reads it.
    const IDLE_CLOCK_EVERY: u32 = 8;
    let mut idle_cycles: u32 = 0;
    let mut now = clock(start);
    // A transmit buffer kept from a cycle that had nothing to send.
    let mut spare: Option<PacketBuf> = None;
    // Frames the stack sent to its own address (a connection between two
    // of this core's sockets): received next cycle, never on the wire.
    let mut looped: Vec<PacketBuf> = Vec::new();

    // Most frames sent in one cycle: a bulk sender's cycle ends there, so
    // that the application's rings and the timers are looked at again.
    let tx_cap = cfg.batch.saturating_mul(TX_CYCLE_BATCHES);
    while !stop.load(Ordering::Relaxed) && !local_stop {
        rep.cycles += 1;
        let mut work = false;
        let batched;

        // (1) receive at most `batch` frames, (2) run the protocols.
        let n = queue.rx_burst(&mut rx, cfg.batch)?;
        if n > 0 || idle_cycles.is_multiple_of(IDLE_CLOCK_EVERY) {
            now = clock(start);
        }
        rep.rx_frames += n as u64;
        rep.max_batch = rep.max_batch.max(n);
        work |= n > 0;
        deliver(&mut rx, now, i, &mut stack, mail, &mut rep);
        for f in looped.drain(..) {
            work = true;
            stack.handle_local(now, f);
        }
        // Frames other cores steered here (none with a single core).
        for _ in 0..if cores > 1 { cfg.batch } else { 0 } {
            let Some(v) = mail.boxes[i].pop() else { break };
            work = true;
            rep.steered_in += 1;
            match pool.copy_in(&v) {
                Some(b) => stack.handle_frame(now, b),
                None => rep.pool_exhausted += 1,
            }
        }

        // (5) timers (before the application, so their events go with this
        // batch's).
        if stack.poll_timeout().is_some_and(|t| t <= now) {
            stack.handle_timeout(now);
        }

        // (3)-(4) events to the application, its batched calls back.
        {
            let mut io = io!(now);
            while let Some(ev) = io.stack.poll_event() {
                work = true;
                app.event(&mut io, ev);
            }
            if app.poll(&mut io) {
                work = true;
                // Calls made in `poll` may have produced events.
                while let Some(ev) = io.stack.poll_event() {
                    app.event(&mut io, ev);
                }
            }
            let mut ticked = false;
            if now >= next_tick {
                next_tick = now + cfg.tick;
                app.tick(&mut io);
                ticked = true;
            }
            // After a batch (or the application's tick): flush its calls.
            batched = work || ticked;
            if batched {
                app.end_of_batch(&mut io);
            }
        }

        // (6) transmit: frames built straight into pool buffers, at most
        // `tx_cap` (work is left: the core does not sleep).
        let mut sent_now = 0usize;
        loop {
            if sent_now >= tx_cap {
                break;
            }
            // At most a batch of frames to ourselves per cycle, as of
            // frames from the wire.
            if looped.len() >= cfg.batch {
                break;
            }
            if tx.len() >= cfg.batch {
                queue.tx_burst(&mut tx)?;
                if !tx.is_empty() {
                    break; // the device is full; retry next cycle
                }
                // Between two bursts of a long transmit, take what came
                // in (a bulk sender's ACKs, at the time they are seen):
                // the kernel fills the receive ring meanwhile, and one
                // cycle's transmit can outlast its 2,048 entries (then
                // frames are dropped at the ring, ACKs first).
                let k = queue.rx_burst(&mut rx, cfg.batch)?;
                if k > 0 {
                    now = clock(start);
                    rep.rx_frames += k as u64;
                    deliver(&mut rx, now, i, &mut stack, mail, &mut rep);
                }
            }
            let Some(mut b) = spare.take().or_else(|| pool.alloc()) else {
                rep.pool_exhausted += 1;
                break;
            };
            match stack.poll_transmit(now, b.spare_mut()) {
                Some(n) => {
                    b.set_len(n);
                    work = true;
                    if tx_offload {
                        if let Some(start) = partial_tcp_checksum(b.as_slice()) {
                            b.set_partial_checksum(start, TCP_CHECKSUM_OFFSET);
                        }
                    }
                    if stack.is_local_frame(b.as_slice()) {
                        // Received by this stack, which may verify it.
                        b.complete_checksum();
                        looped.push(b);
                        continue;
                    }
                    tx.push(b);
                    sent_now += 1;
                    rep.tx_frames += 1;
                }
                None => {
                    spare = Some(b);
                    break;
                }
            }
        }
        if !tx.is_empty() {
            queue.tx_burst(&mut tx)?;
        }
        if batched {
            app.transmitted(&mut io!(now));
        }
        queue.reclaim();
        idle_cycles = if work { 0 } else { idle_cycles.wrapping_add(1) };

        if work {
            spin.worked();
        } else if tx.is_empty() && spin.keep_spinning() {
            continue;
        }
        if !work && tx.is_empty() && !cfg.poll {
            // Idle: sleep until a frame, a hand-over or the next timer.
            let now = clock(start);
            let timer = stack.poll_timeout().unwrap_or(Instant::NEVER);
            mail.sleeping[i].store(true, Ordering::SeqCst);
            let mut io = io!(now);
            if mail.boxes[i].is_empty() && !stop.load(Ordering::Relaxed) && app.sleep(&mut io) {
                rep.sleeps += 1;
                // Asked only of a sleep that happens: the application may
                // lengthen its next one.
                let wake = timer.min(app.max_nap().map_or(next_tick, |d| now + d));
                let nap = if wake <= now {
                    Duration::ZERO
                } else {
                    (wake - now).clamp(MIN_NAP, MAX_NAP)
                };
                // Drain the doorbell if it rang (a wake-up by a frame
                // costs no more system call).
                let (rang, extra_ready) = sleep_on(qfd, bell, extra, nap);
                if rang {
                    let _ = mail.bells[i].read();
                }
                idle_cycles = 0; // time has passed: read the clock next cycle
                if extra_ready {
                    app.wait_fd_ready(&mut io);
                }
                app.wake(&mut io);
                spin.woke();
            }
            mail.sleeping[i].store(false, Ordering::Release);
        }
    }
    // Stopping: reset every connection the core still holds, so that its
    // peers learn it now rather than by their own timeouts (RFC 9293
    // §3.10.5, ABORT), a queue's worth at a time, each batch sent
    // before the next is made. Bounded: a device that takes nothing more
    // ends it.
    loop {
        let now = clock(start);
        let (n, reset) = stack.tcp_abort_all(now, ABORT_BATCH);
        rep.closed_at_stop += n as u64;
        rep.reset_at_stop += reset as u64;
        let mut sent = 0;
        while let Some(mut b) = pool.alloc() {
            let Some(len) = stack.poll_transmit(now, b.spare_mut()) else {
                break;
            };
            b.set_len(len);
            if stack.is_local_frame(b.as_slice()) {
                continue; // to ourselves: nobody is listening any more
            }
            if tx_offload {
                if let Some(start) = partial_tcp_checksum(b.as_slice()) {
                    b.set_partial_checksum(start, TCP_CHECKSUM_OFFSET);
                }
            }
            tx.push(b);
            sent += 1;
            if tx.len() >= cfg.batch {
                queue.tx_burst(&mut tx)?;
                queue.reclaim();
            }
        }
        for _ in 0..3 {
            if tx.is_empty() {
                break;
            }
            queue.tx_burst(&mut tx)?;
            queue.reclaim();
        }
        rep.tx_frames += sent;
        if n == 0 || !tx.is_empty() {
            break;
        }
    }
    queue.reclaim();
    rep.counters = stack.counters().clone();
    rep.cpu_seconds = thread_cpu_seconds();
    Ok(rep)
}

/// Frames sent in one engine cycle: at most this many batches.
const TX_CYCLE_BATCHES: usize = 64;

/// Hand the frames in `rx` (emptied) to core `i`'s stack, or to the core
/// each is steered to (a copy to every other core for a frame all need).
fn deliver(
    rx: &mut Vec<PacketBuf>,
    now: Instant,
    i: usize,
    stack: &mut CoreStack,
    mail: &Mailboxes,
    rep: &mut CoreReport,
) {
    let cores = mail.boxes.len();
    for f in rx.drain(..) {
        match steer::target(f.as_slice(), i, cores) {
            steer::Target::Core(c) if c == i => stack.handle_frame(now, f),
            steer::Target::Core(c) => {
                rep.steered_out += 1;
                if !mail.post(c, f.as_slice().to_vec()) {
                    rep.steer_drops += 1;
                }
            }
            steer::Target::All => {
                for c in (0..cores).filter(|&c| c != i) {
                    if !mail.post(c, f.as_slice().to_vec()) {
                        rep.steer_drops += 1;
                    }
                }
                stack.handle_frame(now, f);
            }
        }
    }
}

/// Connections reset per round when a core stops.
const ABORT_BATCH: usize = 1024;

/// Shortest sleep for a timer (the wheel's tick is 16 µs).
const MIN_NAP: Duration = Duration::from_micros(16);
/// Longest sleep without a reason to wake (stop is noticed by then).
const MAX_NAP: Duration = Duration::from_millis(100);

/// Sleep until `qfd`, `bell` or the app's `extra` descriptor is readable,
/// or `nap` passes. Returns whether the bell rang and whether `extra` is
/// readable (both true if the wait failed: then drain them anyway).
fn sleep_on(qfd: Option<i32>, bell: i32, extra: Option<i32>, nap: Duration) -> (bool, bool) {
    let mut fds = [bell, -1, -1];
    let mut n = 1;
    for f in [qfd, extra].into_iter().flatten() {
        fds[n] = f;
        n += 1;
    }
    match ixora_io::sys::wait_any(&fds[..n], Some(nap)) {
        Ok(m) => (m & 1 != 0, extra.is_some() && m & (1 << (n - 1)) != 0),
        Err(_) => (true, extra.is_some()),
    }
}

/// Where a TCP checksum sits in its header.
const TCP_CHECKSUM_OFFSET: u16 = 16;

/// The offset of the TCP header of `frame` (Ethernet, an optional 802.1Q
/// tag, IPv4), where a device completing the stack's partial checksum must
/// start summing; `None` for any other frame (ARP, ICMP, UDP), whose
/// checksums the stack computed in full.
fn partial_tcp_checksum(frame: &[u8]) -> Option<u16> {
    const VLAN: u16 = 0x8100;
    const IPV4: u16 = 0x0800;
    let be16 = |at: usize| Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]));
    let (ethertype, l3) = match be16(12)? {
        VLAN => (be16(16)?, 18),
        t => (t, 14),
    };
    let ver_ihl = *frame.get(l3)?;
    if ethertype != IPV4 || ver_ihl >> 4 != 4 || *frame.get(l3 + 9)? != 6 {
        return None;
    }
    let l4 = l3 + usize::from(ver_ihl & 0x0f) * 4;
    // The header must hold the checksum field.
    (l4 + usize::from(TCP_CHECKSUM_OFFSET) + 2 <= frame.len()).then_some(l4 as u16)
}

#[cfg(test)]
mod checksum_tests {
    use super::partial_tcp_checksum;

    fn frame(ethertype: &[u8], ver_ihl: u8, proto: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12..12 + ethertype.len()].copy_from_slice(ethertype);
        let l3 = 12 + ethertype.len();
        f[l3] = ver_ihl;
        f[l3 + 9] = proto;
        f
    }

    #[test]
    fn finds_the_tcp_header_and_nothing_else() {
        assert_eq!(partial_tcp_checksum(&frame(&[8, 0], 0x45, 6, 54)), Some(34));
        // IPv4 options move the TCP header.
        assert_eq!(partial_tcp_checksum(&frame(&[8, 0], 0x46, 6, 58)), Some(38));
        // An 802.1Q tag.
        let tagged = frame(&[0x81, 0, 0, 7, 8, 0], 0x45, 6, 58);
        assert_eq!(partial_tcp_checksum(&tagged), Some(38));
        // UDP, ICMP, ARP, IPv6, runts: none.
        assert_eq!(partial_tcp_checksum(&frame(&[8, 0], 0x45, 17, 54)), None);
        assert_eq!(partial_tcp_checksum(&frame(&[8, 0], 0x45, 1, 54)), None);
        assert_eq!(partial_tcp_checksum(&frame(&[8, 6], 0x45, 6, 54)), None);
        assert_eq!(
            partial_tcp_checksum(&frame(&[0x86, 0xdd], 0x60, 6, 74)),
            None
        );
        assert_eq!(partial_tcp_checksum(&frame(&[8, 0], 0x45, 6, 40)), None);
        assert_eq!(partial_tcp_checksum(&[0u8; 10]), None);
    }
}
