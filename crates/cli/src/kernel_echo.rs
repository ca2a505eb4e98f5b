//! The Linux-kernel side of the echo benchmark: an epoll echo server and an
//! epoll echo client (one event loop per thread, via mio), doing exactly
//! what `ixora echo-server` / `ixora echo-client` do, so the comparison is
//! the stack and nothing else.

use crate::apps::client::{ClientReport, Latency};
use hdrhistogram::Histogram;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LISTENER: Token = Token(usize::MAX);

fn reuseport_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(TcpListener::from_std(s.into()))
}

/// Serve echo on `addr` with `threads` event loops (SO_REUSEPORT) until
/// `stop`.
pub fn server(addr: SocketAddr, threads: usize, stop: Arc<AtomicBool>) -> io::Result<()> {
    let mut handles = vec![];
    for _ in 0..threads.max(1) {
        let listener = reuseport_listener(addr)?;
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || server_loop(listener, stop)));
    }
    for h in handles {
        h.join()
            .map_err(|_| io::Error::other("server thread panicked"))??;
    }
    Ok(())
}

struct EchoConn {
    s: TcpStream,
    pending: Vec<u8>,
}

fn server_loop(mut listener: TcpListener, stop: Arc<AtomicBool>) -> io::Result<()> {
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(1024);
    let mut conns: HashMap<usize, EchoConn> = HashMap::new();
    let mut next = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))?;
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nodelay(true);
                    let t = next;
                    next += 1;
                    poll.registry().register(
                        &mut s,
                        Token(t),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    conns.insert(
                        t,
                        EchoConn {
                            s,
                            pending: Vec::new(),
                        },
                    );
                }
                continue;
            }
            let t = ev.token().0;
            let mut close = false;
            if let Some(c) = conns.get_mut(&t) {
                loop {
                    if !c.pending.is_empty() {
                        match c.s.write(&c.pending) {
                            Ok(n) => {
                                c.pending.drain(..n);
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(_) => {
                                close = true;
                                break;
                            }
                        }
                        if !c.pending.is_empty() {
                            break;
                        }
                    }
                    match c.s.read(&mut buf) {
                        Ok(0) => {
                            close = true;
                            break;
                        }
                        Ok(n) => match c.s.write(&buf[..n]) {
                            Ok(w) if w == n => {}
                            Ok(w) => c.pending.extend_from_slice(&buf[w..n]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                c.pending.extend_from_slice(&buf[..n])
                            }
                            Err(_) => {
                                close = true;
                                break;
                            }
                        },
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            close = true;
                            break;
                        }
                    }
                }
            }
            if close {
                if let Some(mut c) = conns.remove(&t) {
                    let _ = poll.registry().deregister(&mut c.s);
                }
            }
        }
    }
    Ok(())
}

/// What the kernel echo client runs (the same plan as `ixora echo-client`).
#[derive(Debug, Clone)]
pub struct KernelClientPlan {
    /// Server.
    pub server: SocketAddr,
    /// Concurrent connections (over all threads).
    pub conns: usize,
    /// Round trips per connection.
    pub rounds: usize,
    /// Message size.
    pub size: usize,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Event-loop threads.
    pub threads: usize,
}

struct ClientConn {
    s: TcpStream,
    sent_at: Instant,
    round: usize,
    got: usize,
    written: usize,
    connected: bool,
}

#[derive(Default)]
struct Totals {
    messages: u64,
    connections: u64,
    errors: u64,
    hist: Option<Histogram<u64>>,
}

/// Run the plan; returns the same report shape as `ixora echo-client`.
pub fn client(plan: KernelClientPlan) -> io::Result<ClientReport> {
    let totals = Arc::new(Mutex::new(Totals::default()));
    let cpu0 = cpu_seconds();
    let mut handles = vec![];
    let threads = plan.threads.max(1);
    for t in 0..threads {
        let conns = plan.conns / threads + usize::from(t < plan.conns % threads);
        let (plan, totals) = (plan.clone(), totals.clone());
        handles.push(std::thread::spawn(move || client_loop(plan, conns, totals)));
    }
    for h in handles {
        h.join()
            .map_err(|_| io::Error::other("client thread panicked"))??;
    }
    let t = totals.lock().unwrap_or_else(|e| e.into_inner());
    let secs = plan.duration.as_secs_f64();
    Ok(ClientReport {
        size: plan.size,
        rounds: plan.rounds,
        conns: plan.conns,
        cores: threads,
        seconds: secs,
        msgs_per_sec: t.messages as f64 / secs,
        conns_per_sec: t.connections as f64 / secs,
        rtt_us: t.hist.as_ref().map(Latency::from_hist).unwrap_or_default(),
        messages: t.messages,
        connections: t.connections,
        errors: t.errors,
        port_waits: 0,
        cpu_seconds: cpu_seconds() - cpu0,
    })
}

fn cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|ru| {
            let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            tv(ru.user_time()) + tv(ru.system_time())
        })
        .unwrap_or(0.0)
}

fn client_loop(plan: KernelClientPlan, conns: usize, totals: Arc<Mutex<Totals>>) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut hist = Histogram::<u64>::new_with_bounds(100, 60_000_000_000, 3)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let (mut messages, mut connections, mut errors) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let end = start + plan.warmup + plan.duration;
    let measuring = |now: Instant| now - start >= plan.warmup && now < end;
    let msg = vec![0x42u8; plan.size];
    let mut buf = vec![0u8; 256 * 1024];
    let mut live: HashMap<usize, ClientConn> = HashMap::new();
    let mut next = 0usize;
    let open = |poll: &mut Poll,
                next: &mut usize,
                live: &mut HashMap<usize, ClientConn>|
     -> io::Result<()> {
        let mut s = TcpStream::connect(plan.server)?;
        let t = *next;
        *next += 1;
        poll.registry()
            .register(&mut s, Token(t), Interest::READABLE | Interest::WRITABLE)?;
        live.insert(
            t,
            ClientConn {
                s,
                sent_at: Instant::now(),
                round: 0,
                got: 0,
                written: 0,
                connected: false,
            },
        );
        Ok(())
    };
    for _ in 0..conns {
        if open(&mut poll, &mut next, &mut live).is_err() {
            errors += 1;
        }
    }
    while Instant::now() < end {
        poll.poll(&mut events, Some(Duration::from_millis(10)))?;
        let mut reopen = 0;
        for ev in events.iter() {
            let t = ev.token().0;
            let mut done = false;
            let mut failed = false;
            if let Some(c) = live.get_mut(&t) {
                if !c.connected && ev.is_writable() {
                    c.connected = true;
                    let _ = c.s.set_nodelay(true);
                    c.sent_at = Instant::now();
                }
                // Write what remains of the current message.
                while c.connected && c.written < plan.size {
                    match c.s.write(&msg[c.written..]) {
                        Ok(n) => c.written += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                loop {
                    match c.s.read(&mut buf) {
                        Ok(0) => {
                            failed = true;
                            break;
                        }
                        Ok(n) => {
                            c.got += n;
                            while c.got >= plan.size {
                                c.got -= plan.size;
                                let now = Instant::now();
                                if measuring(now) {
                                    let _ =
                                        hist.record(((now - c.sent_at).as_nanos() as u64).max(100));
                                    messages += 1;
                                }
                                c.round += 1;
                                if c.round >= plan.rounds {
                                    done = true;
                                    break;
                                }
                                c.sent_at = now;
                                c.written = 0;
                                while c.written < plan.size {
                                    match c.s.write(&msg[c.written..]) {
                                        Ok(n) => c.written += n,
                                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                        Err(_) => {
                                            failed = true;
                                            break;
                                        }
                                    }
                                }
                            }
                            if done || failed {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => break,
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
            }
            if done || failed {
                if let Some(mut c) = live.remove(&t) {
                    let _ = poll.registry().deregister(&mut c.s);
                }
                if done {
                    if measuring(Instant::now()) {
                        connections += 1;
                    }
                } else {
                    errors += 1;
                }
                reopen += 1;
            }
        }
        for _ in 0..reopen {
            if Instant::now() < end && open(&mut poll, &mut next, &mut live).is_err() {
                errors += 1;
            }
        }
    }
    let mut t = totals.lock().unwrap_or_else(|e| e.into_inner());
    t.messages += messages;
    t.connections += connections;
    t.errors += errors;
    match &mut t.hist {
        Some(h) => {
            let _ = h.add(&hist);
        }
        None => t.hist = Some(hist),
    }
    Ok(())
}
