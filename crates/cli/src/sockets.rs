//! `ixora serve`, `ixora run` and `ixora stats`: POSIX sockets without
//! system calls for unmodified programs (issue 4, NewtOS).

use crate::dataplane;
use clap::Args;
use ixora_channel::reach::{reach_of, Reach};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the service listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/ixora/ixora.sock";

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub dp: dataplane::DataplaneArgs,
    /// Control socket that applications attach to (`ixora run --socket`).
    #[arg(long, env = "IXORA_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Sockets per application (a multiple of 64, at most 65536), all its
    /// processes together: a connection beyond them waits in the stack's
    /// accept queue (up to the listener's backlog) until the program frees
    /// one, and it is said. Each takes a receive and a transmit ring of
    /// shared memory (`--ring`), touched only once used.
    #[arg(long, default_value_t = 4096)]
    pub slots: u32,
    /// Bytes of each socket's receive ring and of its transmit ring (a
    /// power of two, 4 KiB to 16 MiB). The receive ring bounds the TCP
    /// window the service advertises; a listener's accept ring holds
    /// `RING / 8` connections (more wait in the stack's accept queue).
    #[arg(long, default_value_t = 65536)]
    pub ring: u32,
    /// Permission bits of the control socket, in octal: who may attach
    /// programs (attaching needs write permission). The default admits
    /// the service's user alone; 0660 with --socket-group admits a
    /// group's members, 0666 every local user. A root program that drops
    /// to another user (a daemon's own, or a wrapper's such as setpriv or
    /// su starting a program as that user) attaches before it does, so it
    /// needs no wider mode. Whoever attaches, a port below
    /// net.ipv4.ip_unprivileged_port_start (1024) is bound only for a
    /// process with CAP_NET_BIND_SERVICE, as Linux binds it.
    #[arg(long, value_name = "OCTAL", default_value = "600", value_parser = parse_mode)]
    pub socket_mode: u32,
    /// Group (name or number) to own the control socket, for
    /// --socket-mode 0660.
    #[arg(long, value_name = "GROUP", value_parser = parse_group)]
    pub socket_group: Option<u32>,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Real-time priority of the service's core thread (SCHED_FIFO, 1–99;
    /// 0: normal scheduling). On a CPU it shares with programs, the
    /// service then runs the moment a frame or a doorbell arrives — as
    /// the kernel's own network processing preempts programs — so a busy
    /// program finds its next requests already in its rings instead of
    /// blocking for them. Needs root or CAP_SYS_NICE. Not with --poll on
    /// a shared CPU.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub rt_priority: u8,
    /// Longest look (µs) an idle service takes at its interface and
    /// programs before it sleeps, yielding its CPU between looks (a
    /// program on that CPU runs at once). The look adapts to the pauses in
    /// the traffic: it doubles when work ends it, halves when it runs out,
    /// and stops below a quarter of this, so an idle service still sleeps;
    /// under load it spares the sleep and wake-up of each short pause, and
    /// a virtual CPU its halt. `ixora stats` shows it. 0: sleep at once.
    /// Ignored with --poll, which never sleeps, and with --rt-priority (a
    /// real-time thread yields to no program).
    #[arg(
        long,
        value_name = "US",
        default_value_t = 50,
        value_parser = clap::value_parser!(u64).range(0..=100_000)
    )]
    pub idle_spin_us: u64,
}

#[derive(Args)]
pub struct RunArgs {
    /// Control socket of the service to use.
    #[arg(long, env = "IXORA_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// The preload library (default: libixora_preload.so next to this
    /// binary, then in ../lib).
    #[arg(long, env = "IXORA_PRELOAD")]
    pub preload: Option<PathBuf>,
    /// Microseconds a blocking call (read, accept, epoll_wait, poll, ...)
    /// spins on the rings before it sleeps in the kernel (0: sleep at
    /// once). A thread on the CPU the service runs on does not spin, which
    /// would only keep the service off the CPU: while the service is awake
    /// it yields the CPU to it and looks again, as long, instead.
    #[arg(long, default_value_t = 50)]
    pub spin_us: u64,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct StatsArgs {
    /// Control socket of the service to ask.
    #[arg(long, env = "IXORA_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the raw JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// List every socket of the attached programs instead, as `ss` does
    /// for the kernel's: its state, addresses, the bytes its program has
    /// not read or not yet had sent (RECV-Q, SEND-Q: in its rings plus
    /// in the stack), for a connection the stack's TCP state, window,
    /// RTT and retransmissions, and how many of the program's threads
    /// sleep until it changes. A listener's RECV-Q is its accept queue.
    #[arg(long)]
    pub sockets: bool,
    /// Print one line every SECS seconds instead, as vmstat does: the
    /// applications and their open sockets; socket calls per second, the
    /// share of them answered in user space and those that entered the
    /// kernel, over that interval (the totals since the service started
    /// say little about the load of the moment); the stack's frames in
    /// and out, drops, TCP connections opened and segments retransmitted
    /// per second. Until interrupted, or --count lines.
    #[arg(long, value_name = "SECS", value_parser = parse_interval, conflicts_with_all = ["json", "sockets"])]
    pub interval: Option<std::time::Duration>,
    /// With --interval: stop after this many lines.
    #[arg(long, value_name = "N", requires = "interval")]
    pub count: Option<u64>,
}

/// An interval in seconds, e.g. 1 or 0.5 (10 ms to a day).
fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| (0.01..=86400.0).contains(x))
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| {
            format!("{s:?} is not an interval in seconds from 0.01 to 86400, e.g. 1 or 0.5")
        })
}

/// An octal permission mode such as 660 or 0666 (no set-id or sticky
/// bits: they mean nothing on a socket).
fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim(), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not a permission mode in octal, e.g. 600, 660 or 666"))
}

/// A group by name, or by number.
fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(gid) = s.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(s) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(format!("no group named {s:?}")),
        Err(e) => Err(format!("group {s:?}: {e}")),
    }
}

pub fn serve(a: ServeArgs) -> ExitCode {
    let mut cfg = a.dp.engine_config();
    ixora_service::tune_tcp(&mut cfg.tcp);
    cfg.idle_spin = std::time::Duration::from_micros(a.idle_spin_us);
    if a.rt_priority > 0 && a.dp.poll && a.dp.cpus.is_none() {
        eprintln!(
            "ixora serve: --rt-priority with --poll would starve every other thread of the \
             service's CPU; give the service a CPU of its own (--cpus N) or drop one of them"
        );
        return ExitCode::from(2);
    }
    cfg.rt_priority = (a.rt_priority > 0).then_some(a.rt_priority);
    if cfg.cores != 1 {
        eprintln!(
            "ixora serve: --cores {} is not supported yet; the service runs on one core",
            cfg.cores
        );
        return ExitCode::from(2);
    }
    cfg.cores = 1;
    let port = match dataplane::open_port(&a.dp) {
        Ok(p) => p,
        Err(e) => return crate::fail("serve", e),
    };
    let stop = dataplane::stop_on_signals();
    if let Some(secs) = a.duration {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(secs));
            s.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let mut scfg = ixora_service::ServiceConfig::new(a.socket.clone());
    scfg.slots = a.slots;
    scfg.ring = a.ring;
    scfg.socket_mode = a.socket_mode;
    scfg.socket_group = a.socket_group;
    scfg.ifindex = ixora_io::sys::ifindex(&a.dp.iface).unwrap_or(0);
    let (svc, control) = match ixora_service::start(&scfg, stop.clone()) {
        Ok(x) => x,
        Err(e) => return crate::fail("serve", e),
    };
    eprintln!(
        "ixora serve: {} on {} ({}), {}/{}; applications attach at {} (ixora run --socket {} -- PROGRAM)",
        port.caps().backend,
        a.dp.iface,
        port.caps().note,
        a.dp.ip.0,
        a.dp.ip.1,
        a.socket.display(),
        a.socket.display(),
    );
    let mut svc = svc;
    svc.report_port(port.clone());
    let svc = std::sync::Mutex::new(Some(svc));
    let keep = port.clone();
    let r = ixora_engine::run(
        port,
        &cfg,
        |_| svc.lock().unwrap().take().expect("one core"),
        stop,
    );
    drop(control);
    match r {
        Ok(r) => {
            crate::print_engine("serve", &r, keep.as_ref());
            ExitCode::SUCCESS
        }
        Err(e) => crate::fail("serve", e),
    }
}

fn find_preload(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("preload library {} does not exist", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let dir = exe.parent().unwrap_or(std::path::Path::new("."));
    for c in [
        dir.join("libixora_preload.so"),
        dir.join("../lib/libixora_preload.so"),
    ] {
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(format!(
        "libixora_preload.so is not next to {} (build it with `cargo build --release`, or pass --preload)",
        exe.display()
    ))
}

/// The file `exec` would run for `prog`: itself if it names a path, else
/// the first executable match on `PATH`.
fn resolve(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if prog.contains('/') {
        return Some(PathBuf::from(prog));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(prog))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

pub fn run(a: RunArgs) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let lib = match find_preload(a.preload) {
        Ok(l) => l,
        Err(e) => return crate::fail("run", e),
    };
    // A program the shim cannot reach still runs, on the kernel stack, as
    // it would without a service: say so before it fails to bind Ixora's
    // address, which the kernel does not have.
    // (Read in the few places the headers name, not whole.)
    let image = resolve(&a.command[0]).and_then(|p| std::fs::File::open(p).ok());
    let reach = image.map_or(Reach::All, reach_of);
    match reach {
        Reach::All => {}
        Reach::Nothing(why) => eprintln!(
            "ixora run: {} {why}; its sockets stay on the kernel stack (where a bind or \
             connect to Ixora's address fails). Running it anyway.",
            a.command[0]
        ),
        Reach::Partly(why) => eprintln!(
            "ixora run: {} {why}. If it moves its network I/O through io_uring, run it on the \
             kernel stack. Running it.",
            a.command[0]
        ),
    }
    if let Err(e) = std::os::unix::net::UnixStream::connect(&a.socket).or_else(|e| {
        // SEQPACKET sockets refuse stream connects with EPROTOTYPE: the
        // service is there.
        if e.raw_os_error() == Some(libc::EPROTOTYPE) {
            Ok(std::os::unix::net::UnixStream::pair()?.0)
        } else {
            Err(e)
        }
    }) {
        eprintln!(
            "ixora run: no service at {} ({e}); start one with `ixora serve`. Running the program on the kernel stack.",
            a.socket.display()
        );
    }
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut s = lib.into_os_string();
            s.push(":");
            s.push(old);
            s
        }
        _ => lib.into_os_string(),
    };
    let err = std::process::Command::new(&a.command[0])
        .args(&a.command[1..])
        .env("LD_PRELOAD", preload)
        .env("IXORA_SOCKET", &a.socket)
        .env("IXORA_SPIN_US", a.spin_us.to_string())
        .exec();
    crate::fail("run", format!("{}: {err}", a.command[0]))
}

/// A JSON array's items as "a, b, c" (the empty string for none).
fn join(v: &serde_json::Value) -> String {
    let mut items: Vec<u64> = v
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default();
    items.sort_unstable();
    items
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn stats(a: StatsArgs) -> ExitCode {
    if a.sockets {
        return sockets(&a);
    }
    if let Some(every) = a.interval {
        return crate::watch::watch(&a.socket, every, a.count);
    }
    let text = match ixora_service::query_stats(&a.socket) {
        Ok(t) => t,
        Err(e) => return crate::fail("stats", e),
    };
    if a.json {
        out!("{text}");
        return ExitCode::SUCCESS;
    }
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return crate::fail("stats", format!("malformed reply: {e}")),
    };
    out!(
        "service {} up {:.1} s, listening on {}, {} connection(s) rejected, {} protocol error(s), \
         {} datagram(s) refused, {} dropped for a full SO_REUSEPORT member, {} dropped for a \
         full socket while packet buffers ran low, {} received longer than a ring, {} bind(s) \
         to a privileged port refused",
        v["ip"].as_str().unwrap_or("?"),
        v["uptime_s"].as_f64().unwrap_or(0.0),
        match join(&v["listeners"]).as_str() {
            "" => "no TCP port".to_string(),
            l => format!("TCP port(s) {l}"),
        },
        v["rejected_connections"],
        v["protocol_errors"],
        v["udp_refused"],
        v["udp_group_drops"],
        v["udp_full_drops"],
        v["udp_too_long"],
        v["binds_denied"]
    );
    let waits = &v["accept_waits"];
    if waits["waited"].as_u64().unwrap_or(0) > 0 {
        out!(
            "{} connection(s) waited in the stack's accept queue for room in a program's accept \
             ring or for a free socket slot, {} waiting now",
            waits["waited"],
            waits["waiting"]
        );
    }
    let spills = &v["receive_spills"];
    if spills["spills"].as_u64().unwrap_or(0) > 0 {
        out!(
            "packet buffers ran low: {} time(s) received bytes a program had not read ({} bytes) \
             were moved out of them into the service's memory, {} bytes waiting now",
            spills["spills"],
            spills["bytes"],
            spills["waiting"]
        );
    }
    let budget = &v["transmit_budget"];
    if budget["deferred"].as_u64().unwrap_or(0) > 0 {
        out!(
            "transmit budget ({} bytes per program per cycle) spent before a connection's bytes \
             were all taken: {} time(s) a connection waited for the next cycle (one program \
             writing to many connections at once), {} waiting now",
            budget["bytes_per_cycle"],
            budget["deferred"],
            budget["waiting"]
        );
    }
    out!(
        "CPU yielded to a woken app thread on the service's CPU {} time(s), {} of them long \
         (over 250 us: a stall, or another thread ran); paused {} time(s) for 1 s after two \
         long ones close together (another thread competes for the CPU); not needed {} \
         time(s) (the woken threads had run already, inside the wake-up)",
        v["yields"]["made"],
        v["yields"]["long"],
        v["yields"]["backoffs"],
        v["yields"]["already_ran"]
    );
    let spin = &v["idle_spin"];
    if spin["max_us"].as_u64().unwrap_or(0) > 0 {
        out!(
            "idle look before sleeping (--idle-spin-us {}): window now {} us; {} look(s), {} ended \
             by work without a sleep; {} yield(s) of the CPU meanwhile, {} long; paused {} \
             time(s) for 1 s (another thread competes for the CPU)",
            spin["max_us"],
            spin["window_us"],
            spin["spins"],
            spin["hits"],
            spin["yields"],
            spin["long_yields"],
            spin["backoffs"]
        );
    }
    let passed = &v["passed_connections"];
    if passed["passed"].as_u64().unwrap_or(0) > 0 {
        out!(
            "sockets handed from one process to another over a Unix socket: {} passed, {} \
             claimed by the receiver, {} waiting, {} reset unclaimed",
            passed["passed"],
            passed["claimed"],
            passed["waiting"],
            passed["expired"]
        );
    }
    let ended = &v["ended_with_program"];
    let n = |k: &str| ended[k].as_u64().unwrap_or(0);
    if n("finished") + n("reset") + n("expired") + n("sending") > 0 {
        out!(
            "connections still open when their program ended: {} ended gracefully (their \
             unsent bytes sent, then a FIN), {} still sending {} byte(s), {} reset (bytes left \
             unread, as Linux resets them), {} reset after their peer took nothing for 60 s",
            n("finished"),
            n("sending"),
            n("bytes"),
            n("reset"),
            n("expired")
        );
    }
    for app in v["apps"].as_array().cloned().unwrap_or_default() {
        out!(
            "\napp {} (pids {}): {} socket(s) of {} (--slots), {} of them UDP; socket calls: {} in user space, {} entered the kernel ({:.2}% user); {} calls on kernel descriptors",
            app["app"],
            join(&app["pids"]),
            app["sockets"],
            app["slots"],
            app["udp_sockets"],
            app["user_calls"],
            app["kernel_calls"],
            app["user_share"].as_f64().unwrap_or(0.0) * 100.0,
            app["passthrough_calls"],
        );
        out!("  {:<14} {:>14} {:>14}", "call", "user space", "kernel");
        if let Some(calls) = app["calls"].as_object() {
            for (name, c) in calls {
                // (A JSON value ignores width: padded as text.)
                out!(
                    "  {:<14} {:>14} {:>14}",
                    name,
                    c["user"].to_string(),
                    c["kernel"].to_string()
                );
            }
        }
        let w = &app["waits"];
        out!(
            "  blocking waits: {} answered while spinning, {} after yielding the CPU to the service \
             (on its CPU), {} slept in the kernel; service doorbell rung {} times",
            w["spun"],
            w["looked"],
            w["slept"],
            w["doorbells"]
        );
        out!(
            "  wake-ups by the service: {} found what they waited for, {} spurious",
            w["woken"],
            w["spurious"]
        );
        let e = &app["epoll_scans"];
        out!(
            "  epoll_wait looked at {} sockets in all ({} looks at every socket of a set)",
            e["sockets_looked_at"],
            e["full_scans"]
        );
    }
    if let Some(st) = v["stack"].as_object() {
        out!("\nstack counters:");
        for (k, c) in st {
            out!("  {k:<28} {c}");
        }
    }
    if let Some(d) = v["drops"].as_object().filter(|d| !d.is_empty()) {
        out!("\nframes the stack dropped, by reason:");
        for (k, c) in d {
            out!("  {k:<28} {c}");
        }
    }
    if let Some(c) = v["interface"]["counters"].as_object() {
        out!(
            "\ninterface ({}; kernel_*: what the kernel counted on its side):",
            v["interface"]["backend"].as_str().unwrap_or("?")
        );
        for (k, n) in c {
            out!("  {k:<28} {n}");
        }
    }
    ExitCode::SUCCESS
}

/// `ixora stats --sockets`: one line per socket.
fn sockets(a: &StatsArgs) -> ExitCode {
    let list = match ixora_service::query_sockets(&a.socket) {
        Ok(l) => l,
        Err(e) => return crate::fail("stats", e),
    };
    if a.json {
        out!("{}", serde_json::Value::Array(list));
        return ExitCode::SUCCESS;
    }
    out!(
        "{:<5} {:<5} {:<5} {:<11} {:>8} {:>8}  {:<21} {:<21} stack",
        "app",
        "slot",
        "proto",
        "state",
        "recv-q",
        "send-q",
        "local",
        "remote"
    );
    for s in &list {
        out!("{}", socket_line(s));
    }
    if list.is_empty() {
        out!("(no sockets: no program is attached, or none has a socket open)");
    }
    ExitCode::SUCCESS
}

/// A socket of `ixora stats --sockets --json` as a line of the table.
fn socket_line(s: &serde_json::Value) -> String {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let t = &s["tcp"];
    let listen = s["state"] == "listen";
    let (recv, send) = if listen {
        // (As `ss`: a listener's receive queue is its accept queue.)
        (n(&s["accept_queue"]) + n(&s["accept_waiting"]), 0)
    } else {
        (
            n(&s["ring_unread"]) + n(&s["spilled"]) + n(&t["readable"]),
            n(&s["ring_unsent"]) + n(&t["unsent"]) + n(&t["unacked"]),
        )
    };
    let mut stack = String::new();
    if t.is_object() {
        stack = format!(
            "{} wnd {}/{} cwnd {} rtt {:.3} ms rto {} ms retrans {}",
            t["state"].as_str().unwrap_or("?"),
            n(&t["snd_wnd"]),
            n(&t["rcv_wnd"]),
            n(&t["cwnd"]),
            n(&t["srtt_us"]) as f64 / 1000.0,
            n(&t["rto_ms"]),
            n(&t["retransmits"]),
        );
    }
    if s["eof"] == true {
        stack.push_str(" eof");
    }
    let waiting = n(&s["accept_waiting"]);
    if waiting > 0 {
        stack.push_str(&format!(
            " {waiting} more waiting in the stack's accept queue (its ring full, or no free socket)"
        ));
    }
    let sleepers = n(&s["sleepers"]);
    if sleepers > 0 {
        stack.push_str(&format!(" ({sleepers} thread(s) asleep on it)"));
    }
    let err = s["error"].as_i64().unwrap_or(0);
    if err != 0 {
        let e = std::io::Error::from_raw_os_error(err as i32);
        stack.push_str(&format!(" error: {e}"));
    }
    format!(
        "{:<5} {:<5} {:<5} {:<11} {:>8} {:>8}  {:<21} {:<21} {}",
        n(&s["app"]),
        n(&s["slot"]),
        s["proto"].as_str().unwrap_or("?"),
        s["state"].as_str().unwrap_or("?"),
        recv,
        send,
        s["local"].as_str().unwrap_or("*"),
        s["remote"].as_str().unwrap_or("*"),
        stack.trim_start()
    )
}
