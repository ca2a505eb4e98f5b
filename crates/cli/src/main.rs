//! `ixora`: the command-line face of the Ixora dataplane.

use clap::{Args, Parser, Subcommand};
use ixora_core::{CcAlgorithm, Duration};
use ixora_sim::{LinkConfig, Transfer, TransferConfig};
use std::process::ExitCode;

/// `println!` for `ixora stats`: a reader that went away (`ixora stats |
/// head`) ends the program quietly, as with `ss`, instead of a panic.
/// (Before the modules, which use it.)
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

mod apps;
mod backends;
mod dataplane;
mod impair;
mod kernel;
mod kernel_echo;
mod sockets;
mod watch;

/// Ixora — a userspace TCP/IP dataplane.
///
/// The native dataplane (echo-server, echo-client, netpipe), the
/// POSIX-socket service for unmodified programs (serve, run, stats) and
/// the simulated network (sim).
#[derive(Parser)]
#[command(name = "ixora", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Transfer data both ways between two TCP stacks over a simulated,
    /// lossy link in virtual time, verify every byte, and print one JSON
    /// line.
    ///
    /// The run is deterministic: the same options and seed give the same
    /// result, bit for bit. Exit status is 0 when both directions arrived
    /// intact and the connection closed cleanly, 1 otherwise, 2 on bad
    /// options.
    ///
    /// Example: ixora sim --bytes 16MiB --loss 0.05 --reorder 0.05 --seed 7
    Sim(SimArgs),
    /// Serve TCP echo on the dataplane: every byte received is sent back,
    /// so any TCP client (socat, nc, Linux, another Ixora) is a valid peer.
    ///
    /// Example: ixora echo-server --backend af_xdp --iface veth1 --ip 198.18.0.2/24 --port 7
    EchoServer(EchoServerArgs),
    /// Measure an echo server: c connections each make n round trips of s
    /// bytes, then close and are replaced, for a fixed time (the benchmark
    /// of IX §5.3, mTCP and MegaPipe). Prints one JSON line: messages/s,
    /// connections/s, round-trip latency percentiles.
    EchoClient(EchoClientArgs),
    /// Ping-pong latency and goodput by message size, as NetPIPE, against
    /// any echo server. Prints one JSON line per size.
    Netpipe(NetpipeArgs),
    /// Load generators on the dataplane (`ixora loadgen memcached --help`).
    Loadgen(LoadgenArgs),
    /// Run the stack service: own an interface and serve the sockets of
    /// programs started with `ixora run` over shared memory.
    ///
    /// Example: ixora serve --iface veth0 --ip 198.18.0.2/24 &
    ///
    /// SIGINT or SIGTERM stops it: every open connection is reset on the way
    /// out (its peer told at once) and its programs see ECONNABORTED on
    /// them; programs live on but their listeners get nothing more until
    /// they are restarted (so do they if the service is killed).
    Serve(sockets::ServeArgs),
    /// Run an unmodified program on the service: its TCP and UDP sockets
    /// on the service's address (or INADDR_ANY), and connections and
    /// datagrams to its subnet, are served by Ixora without system calls
    /// on the data path; everything else (files, pipes, Unix sockets,
    /// other interfaces) goes to the kernel.
    ///
    /// Dual-stack IPv6 sockets (bound to `::`, or to and from v4-mapped
    /// `::ffff:a.b.c.d` addresses) carry IPv4 on Ixora too; IPv6-only
    /// sockets stay the kernel's. A socket on INADDR_ANY also serves the
    /// kernel's own addresses (127.0.0.1) through the kernel. Forked
    /// children share the program's sockets, and the programs it executes
    /// run under `ixora run` too, also with an environment of its own
    /// making (give one `IXORA_SOCKET=` to keep it off); a socket passed to
    /// another process over a Unix socket (SCM_RIGHTS: Node.js's cluster,
    /// HAProxy's reload) moves there if that process runs under `ixora
    /// run` too. Two programs on one service reach each other at its
    /// address inside the service. Statically linked and Go programs are
    /// out of reach (said, and run on the kernel); so is the socket I/O a
    /// program submits to an io_uring (said for one that links liburing,
    /// and by the program itself when it sets up a ring through the C
    /// library's `syscall`).
    ///
    /// Example: ixora run -- memcached -p 11211 -t 1
    Run(sockets::RunArgs),
    /// What the service and its applications are doing: socket calls
    /// resolved in user space versus calls that entered the kernel, per
    /// call type; the stack's counters and the frames it dropped, by reason; and the interface's
    /// own counters (for AF_XDP, frames the kernel dropped before the stack saw them).
    Stats(sockets::StatsArgs),
    /// Join two interfaces by a bridge that drops, delays, rate-limits,
    /// reorders and duplicates frames, as `ixora sim`'s link does (the
    /// same options and rules): netem for a kernel without it. Stops by
    /// itself after --duration-s and prints what it did to each
    /// direction.
    ///
    /// Frames go out as they came, but for a TCP/UDP checksum the sender
    /// left to offload, which the bridge completes (as a NIC would). A
    /// frame held back is overtaken by those behind it; a rate limit
    /// queues up to --queue bytes and drops the rest. Frames longer than
    /// the MTU cannot pass: turn segmentation offload off on the senders
    /// (`ethtool -K DEV tso off gso off`; a veth's is on). It sees every
    /// frame of a veth; put another device in promiscuous mode.
    ///
    /// Example (in a namespace between two others, its two veth ends up
    /// and without addresses): ixora impair r0 r1 --loss 0.01 --reorder
    /// 0.02 --reorder-delay-us 1000 --delay-us 500 --rate-mbps 500
    Impair(impair::ImpairArgs),
    /// Show what this build is: version, sizes, defaults, drop reasons.
    Info(InfoArgs),
    /// Measure the Linux kernel TCP stack for comparison (used by the
    /// benchmark scripts inside a private network namespace).
    #[command(hide = true)]
    BenchKernel(BenchKernelArgs),
    /// An epoll echo server on the Linux kernel stack (the benchmark's
    /// baseline; same behaviour as echo-server).
    KernelEchoServer(KernelEchoServerArgs),
    /// An epoll echo client on the Linux kernel stack (same plan and
    /// report as echo-client).
    KernelEchoClient(KernelEchoClientArgs),
}

#[derive(Args)]
struct EchoServerArgs {
    #[command(flatten)]
    dp: dataplane::DataplaneArgs,
    /// TCP port to serve.
    #[arg(long, default_value_t = 7)]
    port: u16,
    /// Stop after this many seconds (default: until SIGINT or SIGTERM).
    #[arg(long)]
    duration: Option<u64>,
}

#[derive(Args)]
struct EchoClientArgs {
    #[command(flatten)]
    dp: dataplane::DataplaneArgs,
    /// Echo server address, e.g. 198.18.0.2:7.
    #[arg(long)]
    server: std::net::SocketAddrV4,
    /// Concurrent connections (spread over the cores).
    #[arg(long, short = 'c', default_value_t = 1)]
    conns: usize,
    /// Round trips per connection before it closes and is replaced.
    #[arg(long, short = 'n', default_value_t = 1024)]
    rounds: usize,
    /// Message size in bytes.
    #[arg(long, short = 's', default_value_t = 64)]
    size: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Check every echoed byte (on by default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    verify: bool,
    /// Transfer mode: open the --conns connections once, run their --rounds
    /// round trips, and exit when all are done (exit status 1 unless every
    /// one finished with identical bytes). --duration becomes a time limit
    /// and --warmup is ignored. Example, 100 MB echoed and checked:
    /// `--once -c 1 -s 65536 -n 1526 --duration 120`.
    #[arg(long)]
    once: bool,
}

#[derive(Args)]
struct LoadgenArgs {
    #[command(subcommand)]
    kind: LoadgenKind,
}

#[derive(Subcommand)]
enum LoadgenKind {
    /// Open-loop memcached load (mutilate-style, as in the IX paper):
    /// Poisson arrivals at --rate (or each rate of --sweep) over --conns
    /// connections per core, at most --depth requests pipelined per
    /// connection, Facebook ETC or USR request mix, every GET reply
    /// checked. Prints one JSON line per rate: achieved rate, latency
    /// percentiles (from the scheduled send time), misses, errors.
    ///
    /// Exit status: 0 when every rate was measured with replies and no
    /// errors, 1 otherwise, 2 on bad options.
    ///
    /// Example: ixora loadgen memcached --iface veth0 --ip 198.18.11.2/24 --server 198.18.11.1:11211 --sweep 10k,20k,40k --workload usr
    Memcached(apps::loadgen::MemcachedArgs),
    /// Closed-loop HTTP/1.1 load, as wrk makes it but with the client's
    /// TCP in user space: --conns connections each send their next GET as
    /// soon as the response arrived; keep-alive, or --per-conn N requests
    /// per connection (the last with `Connection: close`, then a new
    /// connection). Every response is checked (status 200, Content-Length,
    /// --body-len). Prints one JSON line: requests/s, latency percentiles,
    /// errors.
    ///
    /// Exit status: 0 when responses arrived and none was wrong, 1
    /// otherwise, 2 on bad options.
    ///
    /// Example: ixora loadgen http --iface veth0 --ip 198.18.11.2/24 --server 198.18.11.1:80 --path /index.html -c 32 --per-conn 10
    Http(HttpLoadArgs),
}

#[derive(Args)]
struct HttpLoadArgs {
    #[command(flatten)]
    dp: dataplane::DataplaneArgs,
    /// HTTP server address, e.g. 198.18.0.2:80.
    #[arg(long)]
    server: std::net::SocketAddrV4,
    /// Path to GET.
    #[arg(long, default_value = "/")]
    path: String,
    /// Concurrent connections (spread over the cores).
    #[arg(long, short = 'c', default_value_t = 32)]
    conns: usize,
    /// Requests per connection, the last with `Connection: close` (0:
    /// keep-alive; the server may still end a connection, and a new one
    /// replaces it).
    #[arg(long, default_value_t = 0)]
    per_conn: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Every response body must be this many bytes.
    #[arg(long)]
    body_len: Option<usize>,
}

#[derive(Args)]
struct NetpipeArgs {
    #[command(flatten)]
    dp: dataplane::DataplaneArgs,
    /// Echo server address.
    #[arg(long)]
    server: std::net::SocketAddrV4,
    /// Largest message size (sizes are powers of two ±3 bytes up to it).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    max_size: usize,
    /// Milliseconds spent on each size (at least --min-rounds round trips).
    #[arg(long, default_value_t = 200)]
    per_size_ms: u64,
    /// Fewest round trips per size.
    #[arg(long, default_value_t = 50)]
    min_rounds: usize,
}

#[derive(Args)]
struct KernelEchoServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7")]
    addr: std::net::SocketAddr,
    /// Event-loop threads (SO_REUSEPORT).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Stop after this many seconds (default: until SIGINT or SIGTERM).
    #[arg(long)]
    duration: Option<u64>,
}

#[derive(Args)]
struct KernelEchoClientArgs {
    /// Echo server address.
    #[arg(long)]
    server: std::net::SocketAddr,
    /// Concurrent connections.
    #[arg(long, short = 'c', default_value_t = 1)]
    conns: usize,
    /// Round trips per connection.
    #[arg(long, short = 'n', default_value_t = 1024)]
    rounds: usize,
    /// Message size.
    #[arg(long, short = 's', default_value_t = 64)]
    size: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Event-loop threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

#[derive(Args)]
struct InfoArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchKernelArgs {
    /// Address to listen on and connect to (must be in 198.18.0.0/15).
    #[arg(long)]
    addr: std::net::SocketAddrV4,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1448)]
    size: usize,
    /// Messages to send.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
}

#[derive(Args)]
struct SimArgs {
    /// Bytes each side sends (suffixes: k, KiB, M, MiB, G, GiB).
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    bytes: usize,
    #[command(flatten)]
    imp: Impairments,
    /// Probability that one bit of a frame is flipped (0 to 1); checksums
    /// must catch it.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    corrupt: f64,
    /// Seed of the link's random choices and of the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Congestion control of both stacks.
    #[arg(long, default_value = "cubic", value_parser = parse_cc)]
    cc: CcAlgorithm,
    /// Link rate in Mbit/s (0: unlimited).
    #[arg(long, default_value_t = 1000)]
    rate_mbps: u64,
    /// One-way link delay in microseconds.
    #[arg(long, default_value_t = 500)]
    delay_us: u64,
    /// Give up after this many seconds of virtual time.
    #[arg(long, default_value_t = 3600)]
    time_limit_s: u64,
    /// Both stacks leave out TCP timestamps (RFC 7323), as Windows does
    /// by default: a needless timeout is then found by F-RTO (RFC 5682)
    /// instead of the Eifel test (RFC 3522).
    #[arg(long)]
    no_timestamps: bool,
    /// Both stacks leave out SACK (RFC 2018): loss recovery is NewReno's
    /// (RFC 6582).
    #[arg(long)]
    no_sack: bool,
    /// Print a readable summary instead of the JSON line.
    #[arg(long)]
    text: bool,
}

/// The impairments of a link that `ixora sim` and `ixora impair` share,
/// each direction.
#[derive(Args, Clone, serde::Serialize)]
struct Impairments {
    /// Probability that the link drops a frame (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    loss: f64,
    /// Probability that a frame is held back and overtaken (0 to 1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    reorder: f64,
    /// How long a frame held back may be held, in microseconds (each is
    /// held a uniformly random time up to this, on top of the delay).
    #[arg(long, default_value_t = 2000)]
    reorder_delay_us: u64,
    /// Probability that a frame is delivered twice (0 to 1); the copy
    /// follows within the one-way delay.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    duplicate: f64,
    /// Bytes that may wait for the rate limit before frames are dropped
    /// (tail drop; suffixes k, KiB, M, MiB; 0: unlimited).
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    queue: usize,
    /// Mean time between stalls of the whole path, in milliseconds
    /// (stalls come as a Poisson process); with --stall-ms.
    #[arg(long, requires = "stall_ms", value_parser = clap::value_parser!(u64).range(1..))]
    stall_every_ms: Option<u64>,
    /// How long each stall lasts, in milliseconds: frames entering the
    /// path meanwhile wait for its end, then leave in order at the link's
    /// rate behind --queue (what does not fit is dropped) — as a radio
    /// handover or a paused virtual machine holds them (`ixora sim`
    /// stalls both ways at once, `ixora impair` each way on its own
    /// schedule). A stall longer than a sender's retransmission timeout
    /// (200 ms at least) makes it time out needlessly.
    #[arg(long, requires = "stall_every_ms", value_parser = clap::value_parser!(u64).range(1..))]
    stall_ms: Option<u64>,
}

impl Impairments {
    /// The link these impairments, a one-way delay, a rate (0:
    /// unlimited) and a corruption probability describe.
    fn link(&self, delay_us: u64, rate_mbps: u64, corrupt: f64) -> LinkConfig {
        LinkConfig {
            delay: Duration::from_micros(delay_us),
            rate_bps: rate_mbps.saturating_mul(1_000_000),
            queue_bytes: self.queue,
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_delay: Duration::from_micros(self.reorder_delay_us),
            corrupt,
            stall_every: Duration::from_millis(self.stall_every_ms.unwrap_or(0)),
            stall: Duration::from_millis(self.stall_ms.unwrap_or(0)),
        }
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 16MiB, 100k, 4096)"))?;
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "kB" | "KB" => 1000,
        "KiB" | "Ki" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "MiB" | "Mi" => 1 << 20,
        "G" | "GB" => 1_000_000_000,
        "GiB" | "Gi" => 1 << 30,
        u => {
            return Err(format!(
                "unknown size unit {u:?} (use k, KiB, M, MiB, G, GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_prob(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability between 0 and 1"))
    }
}

fn parse_cc(s: &str) -> Result<CcAlgorithm, String> {
    s.parse()
}

fn sim(a: SimArgs) -> ExitCode {
    let cfg = TransferConfig {
        bytes: a.bytes,
        seed: a.seed,
        cc: a.cc,
        link: a.imp.link(a.delay_us, a.rate_mbps, a.corrupt),
        time_limit: Duration::from_secs(a.time_limit_s),
        timestamps: !a.no_timestamps,
        sack: !a.no_sack,
        ..TransferConfig::default()
    };
    let start = std::time::Instant::now();
    let mut report = Transfer::new(cfg).run();
    report.wall_ms = start.elapsed().as_secs_f64() * 1e3;
    if a.text {
        print_text(&report, &a);
    } else {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("ixora sim: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if report.intact && report.clean_close {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_text(r: &ixora_sim::TransferReport, a: &SimArgs) {
    let mib = r.bytes as f64 / (1 << 20) as f64;
    let verdict = if r.intact && r.clean_close {
        "OK"
    } else {
        "FAILED"
    };
    println!(
        "{verdict}: {mib:.1} MiB each way, {} congestion control, link {} Mbit/s, {} µs one way, loss {:.1}%, reorder {:.1}%, seed {}",
        r.cc, a.rate_mbps, a.delay_us, a.imp.loss * 100.0, a.imp.reorder * 100.0, r.seed
    );
    println!(
        "  data intact both ways: {}   clean close: {}",
        if r.intact { "yes" } else { "NO" },
        if r.clean_close { "yes" } else { "NO" }
    );
    println!(
        "  {:.1} Mbit/s per direction over {:.0} ms of virtual time ({:.0} ms of wall time)",
        r.goodput_mbps, r.sim_time_ms, r.wall_ms
    );
    println!(
        "  link: {} frames, {} lost, {} reordered, {} duplicated, {} corrupted, {} queue drops, {} held by {} stalls",
        r.link.sent,
        r.link.lost,
        r.link.reordered,
        r.link.duplicated,
        r.link.corrupted,
        r.link.queue_drops,
        r.link.stalled,
        r.link.stalls
    );
    println!(
        "  TCP: {} retransmitted segments, {} fast recoveries, {} timeouts ({} found needless by timestamps or F-RTO), {} D-SACKs received, {} window reductions undone by D-SACKs",
        r.retransmits, r.fast_retransmits, r.timeouts, r.spurious_rtos, r.dsacks, r.undos
    );
    if let Some(e) = &r.error {
        println!("  error: {e}");
    }
}

fn info(a: InfoArgs) -> ExitCode {
    use ixora_core::{DropReason, Stack, StackConfig};
    let state = Stack::<Vec<u8>, Vec<u8>>::connection_state_size();
    let d = StackConfig::new(
        ixora_core::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
        std::net::Ipv4Addr::new(198, 18, 0, 1),
        24,
    );
    if a.json {
        let drops: Vec<_> = DropReason::ALL
            .iter()
            .map(|r| serde_json::json!({"name": r.name(), "description": r.description()}))
            .collect();
        let v = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "connection_state_bytes": state,
            "defaults": {
                "mtu": d.mtu,
                "timer_tick_us": d.timer_tick.as_micros() as u64,
                "cc": d.tcp.cc.name(),
                "recv_buffer": d.tcp.recv_buffer,
                "recv_buffer_max": d.tcp.recv_buffer_limit(),
                "send_buffer": d.tcp.send_buffer,
                "send_buffer_max": d.tcp.send_buffer_limit(),
                "delayed_ack_ms": d.tcp.delayed_ack.as_millis() as u64,
                "rto_min_ms": d.tcp.rto_min.as_millis() as u64,
                "msl_s": d.tcp.msl.as_secs(),
            },
            "drop_reasons": drops,
        });
        println!("{v}");
    } else {
        println!("ixora {}", env!("CARGO_PKG_VERSION"));
        println!("connection state: {state} bytes per TCP connection (data buffers excluded)");
        println!(
            "defaults: MTU {}, timer tick {} µs, {} congestion control, {} KiB receive buffer (grows to {} KiB) / {} KiB send buffer (to {} KiB),",
            d.mtu,
            d.timer_tick.as_micros(),
            d.tcp.cc.name(),
            d.tcp.recv_buffer / 1024,
            d.tcp.recv_buffer_limit() / 1024,
            d.tcp.send_buffer / 1024,
            d.tcp.send_buffer_limit() / 1024
        );
        println!(
            "          delayed ACK {} ms, minimum RTO {} ms, TIME-WAIT {} s",
            d.tcp.delayed_ack.as_millis(),
            d.tcp.rto_min.as_millis(),
            2 * d.tcp.msl.as_secs()
        );
        println!("drop reasons ({}):", DropReason::ALL.len());
        for r in DropReason::ALL {
            println!("  {:<24} {}", r.name(), r.description());
        }
    }
    ExitCode::SUCCESS
}

fn bench_kernel(a: BenchKernelArgs) -> ExitCode {
    let o = a.addr.ip().octets();
    if !(o[0] == 198 && (o[1] == 18 || o[1] == 19)) {
        eprintln!(
            "ixora bench-kernel: --addr {} is outside 198.18.0.0/15, the benchmarking range",
            a.addr
        );
        return ExitCode::from(2);
    }
    match kernel::run(std::net::SocketAddr::V4(a.addr), a.size, a.count) {
        Ok(r) => {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ixora bench-kernel: {e}");
            ExitCode::FAILURE
        }
    }
}

fn fail(cmd: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("ixora {cmd}: {e}");
    ExitCode::FAILURE
}

fn print_engine(cmd: &str, r: &ixora_engine::EngineReport, port: &dyn ixora_io::Port) {
    let c = r.counters();
    let cpu: f64 = r.cores.iter().map(|x| x.cpu_seconds).sum();
    let rx: u64 = r.cores.iter().map(|x| x.rx_frames).sum();
    let tx: u64 = r.cores.iter().map(|x| x.tx_frames).sum();
    eprintln!(
        "ixora {cmd}: {} core(s), {rx} frames in, {tx} out, {:.2} CPU s; TCP {} passive / {} active opens, {} retransmits; {} drops",
        r.cores.len(),
        cpu,
        c.tcp_passive_opens,
        c.tcp_active_opens,
        c.tcp_retrans_segs,
        c.total_drops()
    );
    let closed: u64 = r.cores.iter().map(|x| x.closed_at_stop).sum();
    let reset: u64 = r.cores.iter().map(|x| x.reset_at_stop).sum();
    if closed > 0 {
        eprintln!(
            "  {closed} connection(s) held at stop: {reset} reset (their peers told with a RST), \
             {} in TIME-WAIT or SYN-SENT forgotten",
            closed - reset
        );
    }
    for (name, _, n) in c.iter().filter(|d| d.2 > 0) {
        let name = name.trim_start_matches("ixora_").trim_end_matches("_total");
        eprintln!("  count {name:<26} {n}");
    }
    for (reason, n) in c.drop_iter().filter(|d| d.1 > 0) {
        eprintln!("  drop {:<27} {n}", reason.name());
    }
    for (name, n) in port.stats().into_iter().filter(|d| d.1 > 0) {
        eprintln!("  {} {name:<23} {n}", port.caps().backend);
    }
}

fn echo_server(a: EchoServerArgs) -> ExitCode {
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return fail("echo-server", e),
    };
    let stop = dataplane::stop_on_signals();
    if let Some(secs) = a.duration {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(secs));
            s.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let cfg = a.dp.engine_config();
    eprintln!(
        "ixora echo-server: {} on {} ({}), {}/{} port {}, {} core(s)",
        port.caps().backend,
        a.dp.iface,
        port.caps().note,
        a.dp.ip.0,
        a.dp.ip.1,
        a.port,
        cfg.cores
    );
    let svc_port = a.port;
    let keep = port.clone();
    let r = ixora_engine::ev::run(
        port,
        &cfg,
        |_| apps::echo::EchoService { port: svc_port },
        stop,
    );
    match r {
        Ok(r) => {
            print_engine("echo-server", &r, keep.as_ref());
            ExitCode::SUCCESS
        }
        Err(e) => fail("echo-server", e),
    }
}

fn echo_client(a: EchoClientArgs) -> ExitCode {
    use std::sync::{Arc, Mutex};
    if a.conns == 0 || a.rounds == 0 || a.size == 0 {
        return fail(
            "echo-client",
            "--conns, --rounds and --size must be at least 1",
        );
    }
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return fail("echo-client", e),
    };
    let stop = dataplane::stop_on_signals();
    let cfg = a.dp.engine_config();
    let plan = apps::client::ClientPlan {
        server: a.server,
        conns: a.conns,
        rounds: a.rounds,
        size: a.size,
        duration: std::time::Duration::from_secs_f64(a.duration),
        warmup: std::time::Duration::from_secs_f64(if a.once { 0.0 } else { a.warmup }),
        verify: a.verify,
        once: a.once,
    };
    let started = std::time::Instant::now();
    let totals = Arc::new(Mutex::new(apps::client::ClientTotals::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    watchdog(&stop, a.warmup + a.duration + 5.0);
    let cores = cfg.cores;
    let keep = port.clone();
    let r = ixora_engine::ev::run(
        port,
        &cfg,
        |core| {
            apps::client::ClientService::new(
                plan.clone(),
                core,
                cores,
                totals.clone(),
                done.clone(),
            )
        },
        stop,
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail("echo-client", e),
    };
    let t = totals.lock().unwrap_or_else(|e| e.into_inner());
    let secs = if a.once {
        started.elapsed().as_secs_f64()
    } else {
        a.duration
    };
    let rep = apps::client::ClientReport {
        size: a.size,
        rounds: a.rounds,
        conns: a.conns,
        cores,
        seconds: secs,
        msgs_per_sec: t.messages as f64 / secs,
        conns_per_sec: t.connections as f64 / secs,
        rtt_us: t
            .hist
            .as_ref()
            .map(apps::client::Latency::from_hist)
            .unwrap_or_default(),
        messages: t.messages,
        connections: t.connections,
        errors: t.errors,
        port_waits: t.port_waits,
        cpu_seconds: r.cores.iter().map(|c| c.cpu_seconds).sum(),
    };
    println!("{}", serde_json::to_string(&rep).unwrap_or_default());
    print_engine("echo-client", &r, keep.as_ref());
    let unfinished = a.once && t.connections < a.conns as u64;
    if unfinished {
        eprintln!(
            "echo-client: {} of {} connections finished their {} round trips in {:.1} s",
            t.connections, a.conns, a.rounds, secs
        );
    }
    if t.messages == 0 || t.errors > 0 || unfinished {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Stop a little after the measured window even if some connection hangs:
/// set `stop` after `secs`.
fn watchdog(stop: &std::sync::Arc<std::sync::atomic::AtomicBool>, secs: f64) {
    let s = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        s.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

fn loadgen_http(a: HttpLoadArgs) -> ExitCode {
    use apps::http::{HttpPlan, HttpReport, HttpService, HttpTotals};
    use std::sync::{Arc, Mutex};
    const WHAT: &str = "loadgen http";
    if a.conns == 0 {
        return fail(WHAT, "--conns must be at least 1");
    }
    if !a.path.starts_with('/') || a.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return fail(
            WHAT,
            format!(
                "--path {:?} must start with / and hold no spaces or control characters",
                a.path
            ),
        );
    }
    if !(a.duration > 0.0 && a.warmup >= 0.0) {
        return fail(
            WHAT,
            "--duration must be positive and --warmup not negative",
        );
    }
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return fail(WHAT, e),
    };
    let stop = dataplane::stop_on_signals();
    let cfg = a.dp.engine_config();
    let plan = HttpPlan {
        server: a.server,
        path: a.path.clone(),
        conns: a.conns,
        per_conn: a.per_conn,
        duration: std::time::Duration::from_secs_f64(a.duration),
        warmup: std::time::Duration::from_secs_f64(a.warmup),
        body_len: a.body_len,
    };
    let totals = Arc::new(Mutex::new(HttpTotals::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    watchdog(&stop, a.warmup + a.duration + 5.0);
    let cores = cfg.cores;
    let keep = port.clone();
    let r = ixora_engine::ev::run(
        port,
        &cfg,
        |core| HttpService::new(plan.clone(), core, cores, totals.clone(), done.clone()),
        stop,
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail(WHAT, e),
    };
    let t = totals.lock().unwrap_or_else(|e| e.into_inner());
    let rep = HttpReport {
        url: format!("http://{}{}", a.server, a.path),
        conns: a.conns,
        per_conn: a.per_conn,
        cores,
        seconds: a.duration,
        rps: t.requests as f64 / a.duration,
        requests: t.requests,
        conns_per_sec: t.connections as f64 / a.duration,
        latency_us: t
            .hist
            .as_ref()
            .map(apps::client::Latency::from_hist)
            .unwrap_or_default(),
        errors: t.errors,
        status_errors: t.status_errors,
        port_waits: t.port_waits,
        unopened: t.unopened,
        first_error: t.first_error.clone(),
        cpu_seconds: r.cores.iter().map(|c| c.cpu_seconds).sum(),
    };
    println!("{}", serde_json::to_string(&rep).unwrap_or_default());
    print_engine(WHAT, &r, keep.as_ref());
    if let Some(e) = &t.first_error {
        eprintln!("{WHAT}: {} error(s); the first: {e}", t.errors);
    }
    if t.requests == 0 && t.unopened > 0 {
        eprintln!(
            "{WHAT}: {} connection(s) to {} never completed the handshake (is the server up, and \
             its address reachable from --ip?)",
            t.unopened, a.server
        );
    }
    if t.requests == 0 || t.errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn netpipe(a: NetpipeArgs) -> ExitCode {
    use std::sync::{Arc, Mutex};
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return fail("netpipe", e),
    };
    let stop = dataplane::stop_on_signals();
    let mut cfg = a.dp.engine_config();
    cfg.cores = 1;
    let out = Arc::new(Mutex::new(Vec::new()));
    let err = Arc::new(Mutex::new(None));
    let sizes = apps::netpipe::sizes(a.max_size);
    let r = ixora_engine::ev::run(
        port,
        &cfg,
        |_| {
            apps::netpipe::NetpipeService::new(
                a.server,
                sizes.clone(),
                std::time::Duration::from_millis(a.per_size_ms),
                a.min_rounds,
                out.clone(),
                err.clone(),
            )
        },
        stop,
    );
    if let Err(e) = r {
        return fail("netpipe", e);
    }
    for p in out.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("{}", serde_json::to_string(p).unwrap_or_default());
    }
    if let Some(e) = err.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return fail("netpipe", e);
    }
    ExitCode::SUCCESS
}

fn loadgen_memcached(a: apps::loadgen::MemcachedArgs) -> ExitCode {
    use apps::loadgen;
    let plan = match loadgen::Plan::from_args(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ixora loadgen memcached: {e}");
            return ExitCode::from(2);
        }
    };
    let shared = loadgen::Shared::new(plan.clone());
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return fail("loadgen memcached", e),
    };
    if plan.cores as u32 > port.caps().queues {
        eprintln!(
            "ixora loadgen memcached: --cores {}: {} has {} queue(s), one per core",
            plan.cores,
            a.dp.iface,
            port.caps().queues
        );
        return ExitCode::from(2);
    }
    let stop = dataplane::stop_on_signals();
    {
        // A watchdog: the run stops by itself; this only bounds a hang.
        let (s, d) = (stop.clone(), shared.time_limit());
        std::thread::spawn(move || {
            std::thread::sleep(d);
            s.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let cfg = a.dp.engine_config();
    let ks = shared.keyspace();
    eprintln!(
        "ixora loadgen memcached: {} on {} ({}), {} core(s) x {} conns, depth {}, {} to {}, {} keys (mean key {:.1} B, value {:.1} B), {} rate(s) x ({} s warm-up + {} s)",
        port.caps().backend,
        a.dp.iface,
        port.caps().note,
        cfg.cores,
        plan.conns,
        plan.depth,
        plan.workload.name(),
        plan.server,
        plan.keys,
        ks.mean_key(),
        ks.mean_value(),
        plan.rates.len(),
        a.warmup,
        a.duration
    );
    let keep = port.clone();
    let r = ixora_engine::run(
        port,
        &cfg,
        |core| loadgen::LoadgenApp::new(shared.clone(), core),
        stop,
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail("loadgen memcached", e),
    };
    print_engine("loadgen memcached", &r, keep.as_ref());
    if shared.finish() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim(a) => sim(a),
        Cmd::EchoServer(a) => echo_server(a),
        Cmd::Serve(a) => sockets::serve(a),
        Cmd::Run(a) => sockets::run(a),
        Cmd::Stats(a) => sockets::stats(a),
        Cmd::EchoClient(a) => echo_client(a),
        Cmd::Netpipe(a) => netpipe(a),
        Cmd::Loadgen(a) => match a.kind {
            LoadgenKind::Memcached(m) => loadgen_memcached(m),
            LoadgenKind::Http(h) => loadgen_http(h),
        },
        Cmd::Impair(a) => impair::run(a),
        Cmd::Info(a) => info(a),
        Cmd::BenchKernel(a) => bench_kernel(a),
        Cmd::KernelEchoServer(a) => {
            let stop = dataplane::stop_on_signals();
            if let Some(secs) = a.duration {
                let s = stop.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_secs(secs));
                    s.store(true, std::sync::atomic::Ordering::Relaxed);
                });
            }
            match kernel_echo::server(a.addr, a.threads, stop) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail("kernel-echo-server", e),
            }
        }
        Cmd::KernelEchoClient(a) => {
            let plan = kernel_echo::KernelClientPlan {
                server: a.server,
                conns: a.conns,
                rounds: a.rounds,
                size: a.size,
                duration: std::time::Duration::from_secs_f64(a.duration),
                warmup: std::time::Duration::from_secs_f64(a.warmup),
                threads: a.threads,
            };
            match kernel_echo::client(plan) {
                Ok(r) => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default());
                    if r.msgs_per_sec > 0.0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => fail("kernel-echo-client", e),
            }
        }
    }
}
