//! `ixora impair`: a bridge between two interfaces that delays,
//! rate-limits, drops, holds back (reorders) and duplicates the frames it
//! passes — what `tc qdisc … netem` does, for machines whose kernel has no
//! netem (this one) and for tests that want the simulator's link model on
//! a real path.
//!
//! Each frame received on one interface (an AF_PACKET socket with a
//! per-frame ring, so no block timer adds latency) is given its fate by
//! the simulator's [`Link::plan`] for its direction — the same rules,
//! options and counters as `ixora sim` — and sent out of the other
//! interface when its time comes. Frames wait in the simulator's [`Departures`], ordered by
//! departure time (ties in arrival order), so a frame held back is
//! overtaken by those behind it, and a rate limit queues and tail-drops as
//! a link would.
//!
//! The bridge is transparent: frames go out unchanged, so ARP and every
//! protocol pass. It sees every frame on a veth; on another device, put
//! it in promiscuous mode (`ip link set DEV promisc on`). Frames longer
//! than the MTU (a sender's TSO/GSO super-frames) cannot be bridged:
//! turn segmentation offload off on the senders (`ethtool -K DEV tso off
//! gso off`); the report counts such frames and says so. It is bounded: it stops by itself after `--duration-s`
//! (or on SIGINT/SIGTERM) and prints what it did.
//!
//! Checksums: a sender with checksum offload on (a Linux veth's default,
//! or Ixora's AF_XDP transmit metadata) hands its frames over with the
//! TCP/UDP checksum left to a device, which on this path never computes
//! it: the bridge completes it in software (IPv4 and IPv6, TCP and UDP;
//! [`AfPacketConfig::complete_rx_checksums`]) before sending the frame
//! on, as a NIC would have. The report counts such frames, and warns of
//! any it could not complete.

use clap::Args;
use ixora_core::{Duration, Instant};
use ixora_io::af_packet::{AfPacketConfig, AfPacketPort, RxRing};
use ixora_io::{PacketBuf, Pool, PoolConfig, Port, Queue};
use ixora_sim::{Departures, Fate, Link, LinkStats};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use serde::Serialize;
use std::os::fd::{AsFd, AsRawFd};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// Frames read from one interface before the other is looked at.
const BURST: usize = 64;
/// A departure this close is waited for by polling again, not by a timer.
const SPIN: Duration = Duration::from_micros(20);
/// Longest sleep, so the stop flag and the deadline are seen.
const MAX_SLEEP: std::time::Duration = std::time::Duration::from_millis(50);

/// Options of `ixora impair`.
#[derive(Args)]
pub struct ImpairArgs {
    /// The first interface to join: every frame received on it is sent
    /// out of the second, and the other way round. Both must be up and
    /// carry no address the kernel answers on (the kernel would see the
    /// frames too).
    #[arg(value_name = "IFACE_A")]
    iface_a: String,
    /// The second interface to join.
    #[arg(value_name = "IFACE_B")]
    iface_b: String,
    #[command(flatten)]
    imp: crate::Impairments,
    /// Rate of each direction in Mbit/s (0: as fast as frames come).
    #[arg(long, default_value_t = 0)]
    rate_mbps: u64,
    /// One-way delay added to every frame, in microseconds.
    #[arg(long, default_value_t = 0)]
    delay_us: u64,
    /// Seed of the random choices (the second direction uses the next
    /// one).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    duration_s: f64,
    /// Print the report as one JSON line instead of text.
    #[arg(long)]
    json: bool,
}

/// What one direction did, for the report.
#[derive(Serialize)]
struct DirReport {
    from: String,
    to: String,
    #[serde(flatten)]
    link: LinkStats,
    /// Frames still held when the bridge stopped (not sent).
    unsent_at_exit: u64,
    /// Frames that arrived with their checksum left to offload (see the
    /// module notes), and of those the ones completed here.
    csum_not_ready: u64,
    csum_completed: u64,
    /// Frames the kernel dropped because the receive ring was full (as
    /// last counted: drops after the last frame read are not).
    ring_drops: u64,
    /// Frames too long to bridge: received longer than a ring slot (a
    /// sender's TSO/GSO super-frame), or longer than the other interface
    /// carries. Neither is in `sent` or `delivered`.
    too_long_in: u64,
    too_long_out: u64,
    /// Duplicates decided but not made (no free buffer for the copy);
    /// counted in `duplicated` too.
    duplicates_not_made: u64,
}

/// The options the bridge ran with, each direction.
#[derive(Serialize)]
struct PathConfig {
    delay_us: u64,
    rate_mbps: u64,
    #[serde(flatten)]
    imp: crate::Impairments,
    seed: u64,
}

#[derive(Serialize)]
struct Report {
    seconds: f64,
    config: PathConfig,
    directions: [DirReport; 2],
}

/// Run the bridge until the deadline or a signal.
pub fn run(a: ImpairArgs) -> ExitCode {
    match bridge(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ixora impair: {e}");
            ExitCode::from(1)
        }
    }
}

fn bridge(a: &ImpairArgs) -> Result<(), String> {
    let ifaces = [&a.iface_a, &a.iface_b];
    let (ia, ib) = (ifaces[0], ifaces[1]);
    if ia == ib {
        return Err(format!("both interfaces are {ia}: give two different ones"));
    }
    if !(a.duration_s > 0.0 && a.duration_s <= 7.0 * 86400.0) {
        return Err(format!(
            "--duration-s {} is not between 0 and a week",
            a.duration_s
        ));
    }
    let cfg = a.imp.link(a.delay_us, a.rate_mbps, 0.0);
    let pcfg = AfPacketConfig {
        rx_ring: RxRing::Frames,
        complete_rx_checksums: true,
        ..AfPacketConfig::default()
    };
    let open = |i: &str| {
        AfPacketPort::open(i, pcfg).map_err(|e| {
            format!("{e} (the bridge needs root or CAP_NET_RAW, and must run in the interface's network namespace)")
        })
    };
    let ports = [open(ia)?, open(ib)?];
    let pool = Pool::new(PoolConfig {
        chunks: 8192,
        hugepages: false,
        ..PoolConfig::default()
    })
    .map_err(|e| format!("frame pool: {e}"))?;
    let mut queues: Vec<Box<dyn Queue>> = Vec::with_capacity(2);
    for (p, name) in ports.iter().zip([ia, ib]) {
        queues.push(
            p.open_queue(0, &pool)
                .map_err(|e| format!("AF_PACKET queue on {name}: {e}"))?,
        );
    }
    let mut links = [
        Link::new(cfg.clone(), a.seed),
        Link::new(cfg, a.seed.wrapping_add(1)),
    ];
    let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK)
        .map_err(|e| format!("timerfd: {e}"))?;
    let mut poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let fds: Vec<i32> = queues
        .iter()
        .map(|q| q.poll_fd().unwrap_or(-1))
        .chain([timer.as_fd().as_raw_fd()])
        .collect();
    for (i, fd) in fds.iter().enumerate() {
        poll.registry()
            .register(&mut SourceFd(fd), Token(i), Interest::READABLE)
            .map_err(|e| format!("epoll: {e}"))?;
    }
    let stop = crate::dataplane::stop_on_signals();
    eprintln!(
        "ixora impair: joining {ia} and {ib} for {} s: loss {}, reorder {} (held up to {} µs), duplicate {}, delay {} µs, rate {}{}",
        a.duration_s,
        a.imp.loss,
        a.imp.reorder,
        a.imp.reorder_delay_us,
        a.imp.duplicate,
        a.delay_us,
        if a.rate_mbps == 0 {
            "unlimited".to_string()
        } else {
            format!("{} Mbit/s", a.rate_mbps)
        },
        match (a.imp.stall_ms, a.imp.stall_every_ms) {
            (Some(len), Some(every)) => {
                format!(", stalls of {len} ms every {every} ms on average")
            }
            _ => String::new(),
        }
    );

    let t0 = std::time::Instant::now();
    let deadline = std::time::Duration::from_secs_f64(a.duration_s);
    let now = || Instant::from_micros(t0.elapsed().as_micros() as u64);
    // Frames waiting for their departure: (direction, frame); direction
    // 0 leaves by the second interface, 1 by the first.
    let mut held: Departures<(usize, PacketBuf)> = Departures::default();
    let mut rx: Vec<PacketBuf> = Vec::with_capacity(BURST);
    let mut out: [Vec<PacketBuf>; 2] = [Vec::new(), Vec::new()];
    let mut events = Events::with_capacity(8);
    let mut dup_failed = [0u64; 2];
    // When frames last went out: a send the device refused for a moment
    // (a full peer backlog) is retried by `reclaim`, so the bridge then
    // does not sleep long.
    let mut last_tx = t0;
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < deadline {
        let mut got = 0;
        for (dir, q) in queues.iter_mut().enumerate() {
            rx.clear();
            q.rx_burst(&mut rx, BURST)
                .map_err(|e| format!("receive on {}: {e}", ifaces[dir]))?;
            got += rx.len();
            let t = now();
            for buf in rx.drain(..) {
                if let Fate::Deliver { at, copy_at, .. } = links[dir].plan(t, 0, buf.len()) {
                    if let Some(c) = copy_at {
                        match pool.copy_in(buf.as_slice()) {
                            Some(copy) => held.push(c, (dir, copy)),
                            None => dup_failed[dir] += 1,
                        }
                    }
                    held.push(at, (dir, buf));
                }
            }
        }
        let t = now();
        while let Some((dir, buf)) = held.pop_due(t) {
            out[dir].push(buf);
        }
        for dir in 0..2 {
            let q = &mut queues[1 - dir];
            if !out[dir].is_empty() {
                let sent = q
                    .tx_burst(&mut out[dir])
                    .map_err(|e| format!("send on {}: {e}", ifaces[1 - dir]))?;
                for _ in 0..sent {
                    links[dir].delivered();
                }
                if sent > 0 {
                    last_tx = std::time::Instant::now();
                }
            }
            q.reclaim();
        }
        if got > 0 {
            continue;
        }
        // Nothing came in: sleep until the next departure, a frame, or
        // (with frames waiting for ring space) a short while.
        let t = now();
        let mut wait = if out.iter().any(|o| !o.is_empty()) {
            Duration::from_micros(50)
        } else {
            match held.next_at() {
                Some(at) => at.saturating_since(t),
                None => Duration::from_millis(50),
            }
        };
        if last_tx.elapsed() < std::time::Duration::from_millis(10) {
            wait = wait.min(Duration::from_millis(1));
        }
        if wait <= SPIN {
            continue;
        }
        timer
            .set(
                Expiration::OneShot(TimeSpec::from_duration(std::time::Duration::from_micros(
                    wait.as_micros() as u64,
                ))),
                TimerSetTimeFlags::empty(),
            )
            .map_err(|e| format!("timerfd: {e}"))?;
        match poll.poll(&mut events, Some(MAX_SLEEP)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("epoll: {e}")),
        }
        let _ = timer.wait(); // reset a fired timer (non-blocking)
    }

    // Frames already in the transmit rings: a last few kicks (bounded).
    for _ in 0..10 {
        for q in queues.iter_mut() {
            q.reclaim();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let seconds = t0.elapsed().as_secs_f64();
    let mut unsent = [0u64; 2];
    for (dir, _) in held.iter() {
        unsent[*dir] += 1;
    }
    for (dir, o) in out.iter().enumerate() {
        unsent[dir] += o.len() as u64;
    }
    let st = [ports[0].stats(), ports[1].stats()];
    let dir_report = |dir: usize| {
        let mut link = links[dir].stats().clone();
        // `tx_burst` takes a frame too long for the other side and drops it.
        link.delivered -= st[1 - dir].tx_oversize.min(link.delivered);
        DirReport {
            from: ifaces[dir].clone(),
            to: ifaces[1 - dir].clone(),
            link,
            unsent_at_exit: unsent[dir],
            csum_not_ready: st[dir].rx_csum_not_ready,
            csum_completed: st[dir].rx_csum_completed,
            ring_drops: st[dir].rx_ring_drops,
            too_long_in: st[dir].rx_oversize,
            too_long_out: st[1 - dir].tx_oversize,
            duplicates_not_made: dup_failed[dir],
        }
    };
    let report = Report {
        seconds,
        config: PathConfig {
            delay_us: a.delay_us,
            rate_mbps: a.rate_mbps,
            imp: a.imp.clone(),
            seed: a.seed,
        },
        directions: [dir_report(0), dir_report(1)],
    };
    if a.json {
        let s = serde_json::to_string(&report).map_err(|e| format!("report: {e}"))?;
        out!("{s}");
    } else {
        out!("ixora impair: ran {seconds:.1} s");
        for d in &report.directions {
            let l = &d.link;
            out!(
                "  {} -> {}: {} received, {} sent, {} lost, {} tail-dropped, {} held back, {} duplicated, {} held by stalls, {} unsent at exit, {} dropped by the kernel (ring full)",
                d.from,
                d.to,
                l.sent,
                l.delivered,
                l.lost,
                l.queue_drops,
                l.reordered,
                l.duplicated,
                l.stalled,
                d.unsent_at_exit,
                d.ring_drops
            );
        }
    }
    for d in &report.directions {
        if d.too_long_in > 0 {
            eprintln!(
                "ixora impair: warning: {} frames from {} were longer than the bridge carries and were dropped: segmentation offload on the sender (run `ethtool -K <sender's interface> tso off gso off` there)",
                d.too_long_in, d.from
            );
        }
        if d.too_long_out > 0 {
            eprintln!(
                "ixora impair: warning: {} frames from {} were longer than {} carries (a smaller MTU) and were dropped",
                d.too_long_out, d.from, d.to
            );
        }
        let left = d.csum_not_ready - d.csum_completed;
        if left > 0 {
            eprintln!(
                "ixora impair: warning: {left} frames from {} arrived with a checksum left to offload that the bridge could not complete (not IPv4 or IPv6 TCP or UDP) and were forwarded so; a receiver that checks drops them (run `ethtool -K <sender's interface> tx off` there)",
                d.from
            );
        }
    }
    Ok(())
}
