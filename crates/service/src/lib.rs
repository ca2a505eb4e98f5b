//! Ixora's stack service: the process that owns the stack and serves the
//! sockets of unmodified applications (NewtOS, "On Sockets and System
//! Calls" §3–§7, adapted to Linux).
//!
//! An application (under the preload shim, `ixora-preload`) attaches over
//! a Unix-domain control socket ([`ixora_channel::ctl`]); the service gives
//! it two shared-memory regions ([`ixora_channel::layout`]) and its
//! doorbell. From then on the data path is shared memory:
//!
//! * receive: the stack's in-order bytes are copied from the received
//!   frames into the socket's receive ring (the one copy on this side),
//!   and `recv_done` opens the TCP window only as the ring has room — the
//!   app's reads are the flow control;
//! * transmit: bytes the app wrote into its transmit ring are taken as the
//!   send window allows (copied into the stack's send queue, so the ring
//!   space is free at once and a closed socket's slot can be reused while
//!   its last bytes are still in flight);
//! * accept: connections are established and mapped before the app sees
//!   them: the listener's accept queue holds ready slots;
//! * close is lazy: the app sets a request bit and forgets the socket; the
//!   service sends what is left, then closes, then frees the slot.
//!
//! The service runs as the [`App`] of one engine core. It polls each
//! application's activity word once per cycle (not each socket), and
//! before the core sleeps it sets each application's sleeping flag so
//! that apps ring its doorbell. Every index an application wrote is
//! validated before use; a socket whose indices are impossible is reset
//! with `EPROTO` — only that socket suffers. An application whose every
//! control connection is gone (it exited or was killed) is torn down: its
//! connections reset, its listeners closed, its memory unmapped.

#[cfg(feature = "testkit")]
pub mod testkit;

use bytes::Bytes;
use ixora_channel::ctl::{op, Msg, TcpInfo, PASS_TIMEOUT_S};
use ixora_channel::layout::{
    self, flag, opts, pack, req, state, unpack, Layout, Regions, CALLS, NOT_CALLS,
};
use ixora_channel::os::{self, Mapping};
use ixora_core::{ConnHandle, DeadReason, Error, Event, IpOpts, State, UdpHandle};
use ixora_engine::spin::{YieldPacer, LONG_YIELD};
use ixora_engine::{App, Io, Received, WallClock};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Sockets reset because their app wrote impossible indices.
static PROTOCOL_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Connections the apps reset (close with SO_LINGER 0).
static APP_ABORTS: AtomicU64 = AtomicU64::new(0);
/// Times a connection's bytes waited for the next engine cycle, its app's
/// transmit budget spent ([`TX_BUDGET`]; one connection may wait several
/// cycles). Process-wide, as the other counters here.
static TX_DEFERRED: AtomicU64 = AtomicU64::new(0);
/// Datagrams an app wrote that the stack refused (too long, no route):
/// the shim checks both first, so only a buggy or hostile app's.
static UDP_TX_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Datagrams for a member of a SO_REUSEPORT UDP group that were dropped
/// because its receive ring was full and one already waited for it.
static UDP_GROUP_DROPS: AtomicU64 = AtomicU64::new(0);

/// Received datagrams dropped while the packet buffers ran low because
/// their socket's receive ring was full (see [`Service::spill`]), as Linux
/// drops a datagram for a full socket buffer.
static UDP_FULL_DROPS: AtomicU64 = AtomicU64::new(0);

/// Received datagrams dropped because they could never fit the socket's
/// receive ring (a peer's datagram longer than a ring of `--ring` bytes).
static UDP_RX_TOO_LONG: AtomicU64 = AtomicU64::new(0);

/// The largest UDP payload the service sends: what an IPv4 datagram holds
/// (the stack fragments it), but no more than a ring holds with its header.
fn max_dgram(ring: u32) -> usize {
    ixora_core::MAX_UDP_PAYLOAD.min(ring as usize - layout::DGRAM_HDR)
}

/// The largest UDP payload one frame carries: the MTU less the IPv4 and
/// UDP headers.
fn frame_dgram(io: &Io) -> usize {
    usize::from(io.stack().config().mtu).saturating_sub(28)
}

/// Internal operation: a control connection ended.
const DETACH: u32 = 200;

/// Service settings.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The control socket's path.
    pub socket: PathBuf,
    /// Socket slots per application (a multiple of 64).
    pub slots: u32,
    /// Bytes per receive and per transmit ring.
    pub ring: u32,
    /// The interface index of the port (0: none), told to apps for
    /// `IP_PKTINFO`.
    pub ifindex: u32,
    /// How long a connection handed to another process (`PASS`) waits to
    /// be claimed before it is reset.
    pub pass_timeout: Duration,
    /// Permission bits of the control socket's file: who may attach
    /// (connecting needs write permission). Default 0o600, its owner
    /// (the service's user) alone.
    pub socket_mode: u32,
    /// Group to give the control socket's file, if any.
    pub socket_group: Option<u32>,
}

impl ServiceConfig {
    /// Defaults: 4096 sockets per application, 64 KiB rings.
    pub fn new(socket: PathBuf) -> ServiceConfig {
        ServiceConfig {
            socket,
            slots: 4096,
            ring: 64 * 1024,
            ifindex: 0,
            pass_timeout: Duration::from_secs(PASS_TIMEOUT_S),
            socket_mode: 0o600,
            socket_group: None,
        }
    }
}

/// A request from a control connection to the core.
struct Request {
    conn: u64,
    pid: u32,
    /// The connecting process's user id (`u32::MAX`: unknown).
    uid: u32,
    /// A bind: whether its sender may bind a port below the unprivileged
    /// range (read by the connection's thread: [`may_bind_low`]).
    may_bind_low: bool,
    msg: Msg,
    reply: Option<SyncSender<Reply>>,
    /// An `ATTACH`'s new application, prepared on the connection's thread.
    prepared: Option<Box<PreparedApp>>,
}

struct Reply {
    msg: Msg,
    fds: Vec<OwnedFd>,
    /// Bytes that follow the reply in its packet (`STATS`' and
    /// `SOCKETS`' text, `INFO`'s figures).
    tail: Vec<u8>,
}

/// State shared between the control threads and the core.
struct Shared {
    /// The layout of every application's regions.
    layout: Layout,
    /// An application prepared ahead, for the next `ATTACH`
    /// ([`Shared::prepared_app`]).
    spare_app: Mutex<Option<PreparedApp>>,
    queue: Mutex<VecDeque<Request>>,
    queued: AtomicBool,
    bell: OnceLock<OwnedFd>,
    stop: Arc<AtomicBool>,
    next_conn: AtomicU64,
    /// The threads of the control connections (accepted, or made by
    /// [`op::SPLIT`]), joined when the service stops.
    conns: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Shared {
    /// A new application's regions and tables: the spare made ahead, or
    /// made now if there is none.
    fn prepared_app(&self) -> io::Result<PreparedApp> {
        match self.spare_app.lock().unwrap().take() {
            Some(p) => Ok(p),
            None => PreparedApp::new(self.layout),
        }
    }

    /// A prepared application an `ATTACH` refused on the core: the spare
    /// again if there is none (not let go of on the core, nor made anew
    /// for the next).
    fn give_back(&self, p: Option<Box<PreparedApp>>) {
        if let Some(p) = p {
            self.offer_spare(*p);
        }
    }

    /// `p` is the spare if there is none (else it is let go of).
    fn offer_spare(&self, p: PreparedApp) {
        let mut spare = self.spare_app.lock().unwrap();
        if spare.is_none() {
            *spare = Some(p);
        }
    }

    /// Make the spare application if there is none (on a control thread,
    /// after the reply that used it): the next `ATTACH` waits for none of
    /// it (0.07–0.15 ms: two memfds, 4,096 slots' tables).
    fn refill_spare_app(&self) {
        if self.spare_app.lock().unwrap().is_some() {
            return;
        }
        if let Ok(p) = PreparedApp::new(self.layout) {
            self.offer_spare(p);
        }
    }

    fn push(&self, r: Request) {
        self.queue.lock().unwrap().push_back(r);
        self.queued.store(true, Ordering::SeqCst);
        if let Some(b) = self.bell.get() {
            os::ring(b.as_raw_fd());
        }
    }
}

/// The control socket: a listener thread and one thread per attached
/// process (slow path only). Removes the socket file on drop.
pub struct Control {
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the service needs of its stack's TCP: a send buffer that holds
/// what waits for the peer's window, as a POSIX socket's does
/// (`send_beyond_window`). Apply to the configuration of the engine that
/// runs the service.
pub fn tune_tcp(tcp: &mut ixora_core::TcpConfig) {
    tcp.send_beyond_window = true;
}

/// Create the service: bind the control socket at `cfg.socket` and return
/// the engine application (run it on one core) and the control handle
/// (keep it alive while the engine runs). `stop` ends both.
pub fn start(cfg: &ServiceConfig, stop: Arc<AtomicBool>) -> io::Result<(Service, Control)> {
    // Transmit chunks are allocated and freed at the data rate.
    os::keep_freed_memory();
    let layout = Layout::new(cfg.slots, cfg.ring)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if let Some(dir) = cfg.socket.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| {
                io::Error::new(e.kind(), format!("socket directory {}: {e}", dir.display()))
            })?;
        }
    }
    // Owner and mode set before the socket listens: nobody else can
    // attach in between.
    let (mode, group) = (cfg.socket_mode, cfg.socket_group);
    let admit = move |path: &Path| -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
                io::Error::new(e.kind(), format!("group {gid} for {}: {e}", path.display()))
            })?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    };
    let bind = |path: &Path| os::bind_listen_with(path, 128, &admit);
    let listener = match bind(&cfg.socket) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // A live service answers; a stale file does not.
            if os::connect_once(&cfg.socket).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "a service already listens on {} (choose another --socket)",
                        cfg.socket.display()
                    ),
                ));
            }
            std::fs::remove_file(&cfg.socket)?;
            bind(&cfg.socket)?
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("control socket {}: {e}", cfg.socket.display()),
            ))
        }
    };
    // No request carries descriptors: the kernel refuses them from the
    // first message on (the connections inherit this from the listener;
    // Linux 6.16+, else `conn_loop` closes what came).
    os::refuse_descriptors(listener.as_fd());
    let shared = Arc::new(Shared {
        layout,
        spare_app: Mutex::new(None),
        queue: Mutex::new(VecDeque::new()),
        queued: AtomicBool::new(false),
        bell: OnceLock::new(),
        stop,
        next_conn: AtomicU64::new(1),
        conns: Mutex::new(Vec::new()),
    });
    let sh = shared.clone();
    let thread = std::thread::Builder::new()
        .name("ixora-control".into())
        .spawn(move || listen_loop(listener, sh))?;
    let service = Service {
        layout,
        shared: shared.clone(),
        apps: HashMap::new(),
        conn_app: HashMap::new(),
        next_app: 1,
        ifindex: cfg.ifindex,
        listeners: HashMap::new(),
        udp_groups: HashMap::new(),
        active: Vec::new(),
        marked: Vec::new(),
        started: Instant::now(),
        rejected: 0,
        held: HashMap::new(),
        accept_waits: 0,
        spills: SpillCounts::default(),
        spill_looked: None,
        unprivileged_ports: std::fs::read_to_string(
            "/proc/sys/net/ipv4/ip_unprivileged_port_start",
        )
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1024),
        bind_denied: 0,
        may_bind_low: false,
        yields: YieldPacer::new(LONG_YIELD),
        yields_already_ran: 0,
        bells: os::epoll(&[])?,
        closer: Closer::start()?,
        udp_retry: Vec::new(),
        passes: HashMap::new(),
        orphans: HashMap::new(),
        orphan_bytes: 0,
        next_orphan: 0,
        orphan_counts: OrphanCounts::default(),
        doomed: Vec::new(),
        orphan_check: Instant::now(),
        nap: NAP_MIN,
        pass_bytes: 0,
        pass_timeout: cfg.pass_timeout,
        pass_check: Instant::now(),
        next_pass: 0,
        next_epoch: 0,
        moved: HashMap::new(),
        pass_counts: PassCounts::default(),
        port: None,
    };
    Ok((
        service,
        Control {
            path: cfg.socket.clone(),
            thread: Some(thread),
            shared,
        },
    ))
}

fn listen_loop(listener: OwnedFd, shared: Arc<Shared>) {
    shared.refill_spare_app();
    // A thread started ahead serves the next connection: the connecting
    // process's ATTACH does not wait for a thread to start (~0.1 ms).
    let mut standby = standby_conn(&shared).ok();
    while !shared.stop.load(Ordering::Relaxed) {
        let deadline = Instant::now() + Duration::from_millis(100);
        if os::wait(listener.as_raw_fd(), libc::POLLIN, deadline).is_err() {
            continue;
        }
        if let Ok(conn) = os::accept(listener.as_fd()) {
            match standby.take() {
                Some(tx) => {
                    if let Err(e) = tx.send(conn) {
                        // (Its thread is gone: cannot happen while we run.)
                        let _ = serve_conn(&shared, e.0, None);
                    }
                }
                None => {
                    let _ = serve_conn(&shared, conn, None);
                }
            }
            standby = standby_conn(&shared).ok();
        }
    }
    // (The standby thread ends as its sender goes.)
    drop(standby);
    let conns = std::mem::take(&mut *shared.conns.lock().unwrap());
    for t in conns {
        let _ = t.join();
    }
}

/// Serve control connection `sock` on a thread of its own ([`conn_loop`],
/// `peer` as there), kept to be joined when the service stops.
fn serve_conn(shared: &Arc<Shared>, sock: OwnedFd, peer: Option<(u32, u32)>) -> io::Result<()> {
    spawn_ctl(shared, move |id, sh| conn_loop(sock, id, sh, peer))
}

/// A control thread (connection `id`) running `body`, kept to be joined
/// when the service stops.
fn spawn_ctl(
    shared: &Arc<Shared>,
    body: impl FnOnce(u64, Arc<Shared>) + Send + 'static,
) -> io::Result<()> {
    let sh = shared.clone();
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let t = std::thread::Builder::new()
        .name(format!("ixora-ctl-{id}"))
        .spawn(move || body(id, sh))?;
    let mut conns = shared.conns.lock().unwrap();
    conns.retain(|t| !t.is_finished());
    conns.push(t);
    Ok(())
}

/// A control thread started ahead: it serves the connection sent to it
/// ([`conn_loop`]; none: it ends), kept to be joined when the service
/// stops.
fn standby_conn(shared: &Arc<Shared>) -> io::Result<std::sync::mpsc::SyncSender<OwnedFd>> {
    let (tx, rx) = sync_channel::<OwnedFd>(1);
    spawn_ctl(shared, move |id, sh| {
        if let Ok(sock) = rx.recv() {
            conn_loop(sock, id, sh, None);
        }
    })?;
    Ok(tx)
}

/// One control connection's requests, on its own thread, until it ends.
/// `peer`: the pid and user to record for it (one made by [`op::SPLIT`],
/// whose kernel peer is this process), else its kernel peer's.
fn conn_loop(sock: OwnedFd, conn: u64, shared: Arc<Shared>, peer: Option<(u32, u32)>) {
    let (pid, uid) = peer
        .or_else(|| os::peer_cred(sock.as_fd()))
        .unwrap_or((0, u32::MAX));
    // Each message then names its sender (a forked child speaks on the
    // connection its parent opened): PASS and CLAIM look at its files.
    let creds = os::pass_credentials(sock.as_fd()).is_ok();
    let mut buf = [0u8; 256];
    let mut attached = false;
    while !shared.stop.load(Ordering::Relaxed) {
        let deadline = Instant::now() + Duration::from_millis(200);
        // No request carries descriptors; any that came are closed here,
        // on this connection's thread: a close can block (see
        // `os::refuse_descriptors`), and never on the core's.
        let (n, fds, sender) = match os::recv_msg_from(sock.as_fd(), &mut buf, deadline) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
            Err(_) => break,
        };
        drop(fds);
        let Some(mut msg) = Msg::decode(&buf[..n]) else {
            break; // not our protocol: hang up
        };
        if msg.op == op::SPLIT {
            // Answered here: a new connection for a member of this one's
            // application that the socket file no longer admits.
            let (rep, fd) = match attached.then(|| split(&shared, (pid, uid))) {
                Some(Ok(fd)) => (Msg::reply(0), Some(fd)),
                Some(Err(e)) => (
                    Msg::reply(-(e.raw_os_error().unwrap_or(libc::EIO) as i64)),
                    None,
                ),
                None => (Msg::reply(-(libc::EPERM as i64)), None),
            };
            let fds: Vec<_> = fd.iter().map(|f| f.as_fd()).collect();
            let deadline = Instant::now() + Duration::from_secs(5);
            if os::send_msg(sock.as_fd(), &rep.encode(), &fds, deadline).is_err() {
                break;
            }
            continue;
        }
        // A new application's regions and tables come from here (made
        // ahead), not from the core (a second ATTACH is refused there:
        // nothing to take).
        let mut prepared = None;
        let refill = msg.op == op::ATTACH && !attached;
        if refill {
            match shared.prepared_app() {
                Ok(p) => prepared = Some(Box::new(p)),
                Err(e) => {
                    let rep = Msg::reply(-i64::from(e.raw_os_error().unwrap_or(libc::ENOMEM)));
                    let deadline = Instant::now() + Duration::from_secs(5);
                    if os::send_msg(sock.as_fd(), &rep.encode(), &[], deadline).is_err() {
                        break;
                    }
                    continue;
                }
            }
        }
        attached |= matches!(msg.op, op::ATTACH | op::JOIN);
        if matches!(msg.op, op::PASS | op::CLAIM) {
            // The file is named by its inode, read here (not on the core)
            // from the sender's descriptor table; `c` carries it to the
            // core, 0 if it could not be read (the errno in `b`).
            msg.c = 0;
            match sender
                .as_ref()
                .filter(|_| creds)
                .ok_or(libc::EPERM)
                .and_then(|p| {
                    let fd = i32::try_from(msg.a).map_err(|_| libc::EBADF)?;
                    let ino = socket_inode(p.pid, fd)?;
                    // The pid read is the sender's only if it was not reaped
                    // (and the pid reused) before the look: its pidfd says.
                    p.still_there().then_some(ino).ok_or(libc::ESRCH)
                }) {
                Ok(ino) => msg.c = ino,
                Err(e) => msg.b = e as u64,
            }
        }
        let binds = msg.op == op::BIND || (msg.op == op::SOCKET && msg.c as u32 == op::BIND);
        let may_bind_low = binds && may_bind_low(sender.as_ref().filter(|_| creds), uid);
        let (tx, rx) = sync_channel(1);
        shared.push(Request {
            conn,
            pid,
            uid,
            may_bind_low,
            msg,
            reply: Some(tx),
            prepared,
        });
        let Ok(rep) = rx.recv_timeout(Duration::from_secs(10)) else {
            break;
        };
        let mut out = rep.msg.encode().to_vec();
        out.extend_from_slice(&rep.tail);
        let fds: Vec<_> = rep.fds.iter().map(|f| f.as_fd()).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        if os::send_msg(sock.as_fd(), &out, &fds, deadline).is_err() {
            break;
        }
        if refill {
            // The next application's, made after this one's reply.
            shared.refill_spare_app();
        }
    }
    if attached {
        shared.push(Request {
            conn,
            pid,
            uid,
            may_bind_low: false,
            msg: Msg::new(DETACH, 0, 0, 0),
            reply: None,
            prepared: None,
        });
    }
}

/// [`op::SPLIT`]: a socket pair, one end served as a control connection
/// of its own (on a thread of its own, recorded with `peer`, the asking
/// connection's pid and user), the other returned for the asker to pass on
/// to the child it forks.
fn split(shared: &Arc<Shared>, peer: (u32, u32)) -> io::Result<OwnedFd> {
    let (ours, theirs) = os::seqpacket_pair()?;
    serve_conn(shared, ours, Some(peer))?;
    Ok(theirs)
}

/// Whether the sender of a bind may bind a port below
/// `net.ipv4.ip_unprivileged_port_start`, as Linux decides it: with
/// CAP_NET_BIND_SERVICE in its effective set, read from `/proc` while
/// its pidfd says the pid is still the sender's (the kernel vouches for
/// the pid, `SCM_CREDENTIALS`: a program cannot name another). One we
/// cannot look at (no credentials, another PID namespace) may if the
/// connection's user is root.
fn may_bind_low(sender: Option<&os::Sender>, uid: u32) -> bool {
    sender
        .and_then(|p| {
            let may = os::may_bind_privileged(p.pid)?;
            p.still_there().then_some(may)
        })
        .unwrap_or(uid == 0)
}

/// The inode of the socket that process `pid` holds as descriptor `fd`
/// (from the `socket:[N]` link in `/proc`); the errno if there is none.
fn socket_inode(pid: u32, fd: i32) -> Result<u64, i32> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EBADF))?;
    let l = link.to_string_lossy();
    l.strip_prefix("socket:[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|n| n.parse().ok())
        .filter(|&n| n != 0)
        .ok_or(libc::ENOTSOCK)
}

/// What the service knows of one socket slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Free,
    Open,
    Bound(u16),
    Listen(u16),
    Conn(ConnHandle),
    /// A UDP socket, bound (its peer, if connected, in [`Sock::peer`]).
    Udp(UdpHandle),
    /// The connection ended; waiting for the app to close the socket.
    Gone,
}

#[derive(Debug, Clone, Copy)]
struct Sock {
    kind: Kind,
    /// Bytes taken from the transmit ring.
    sent: u64,
    /// Bytes written into the receive ring.
    rx_tail: u64,
    /// Accept-queue entries written.
    acc_tail: u32,
    peer_closed: bool,
    shut: bool,
    nodelay: bool,
    /// `TCP_CORK` (passed from a listener to its connections, as Linux
    /// copies the listening socket).
    cork: bool,
    /// SO_KEEPALIVE, and TCP_KEEPIDLE/KEEPINTVL (s)/KEEPCNT (0: the
    /// stack's default): kept for a socket not yet connected, and passed
    /// from a listener to the connections it accepts, as Linux does.
    keepalive: bool,
    ka: (u32, u32, u8),
    /// A listener's `TCP_DEFER_ACCEPT` (SYN-ACK retransmissions, as Linux
    /// keeps it: [`layout::defer_retrans`]), given to the stack's
    /// listener.
    defer: u8,
    /// `IP_TOS` and `IP_TTL` given to its connection or listener (a UDP
    /// socket's go with each datagram: [`layout::with_ip`]).
    ip: IpOpts,
    /// A UDP socket (`Open` until bound).
    dgram: bool,
    /// A UDP socket's peer ([`pack`]ed; 0: none): only its datagrams are
    /// received, as Linux does for a connected UDP socket.
    peer: u64,
    /// SO_REUSEPORT was set when it was bound: it may share its port with
    /// other such sockets of the same user.
    reuseport: bool,
    /// SO_REUSEADDR was set when it was bound (TCP): while it does not
    /// listen, it may share its port with other such sockets.
    reuseaddr: bool,
    /// Bound to port 0: the port was ours to pick, so a connect may move
    /// it to another if that 4-tuple is taken. A UDP socket's (bound to
    /// any address, or at its first send or connect) is given up at its
    /// disconnect.
    auto_port: bool,
    /// A spare TCP socket not yet taken by the app ([`AppState::spares`]):
    /// not counted or listed as one of its sockets.
    spare: bool,
    /// Bound to the service's address, not to any (`0.0.0.0`): among the
    /// sockets sharing a port, those take what comes to it, as Linux
    /// ranks a socket bound to the packet's address above a wildcard one
    /// (ntpd binds both).
    specific: bool,
    /// The port the program bound a connection's socket to before it
    /// connected (0: none, or one we picked for a bind to port 0): a
    /// connect after its connection failed starts from it again, as
    /// Linux's `SOCK_BINDPORT_LOCK` keeps it ([`Service::unconnect`]).
    bind_lock: u16,
    /// `SO_RCVBUF` and `SO_SNDBUF` as set ([`layout::pack_bufs`]; 0:
    /// neither, the stack's buffers, which grow).
    bufs: u64,
    /// What the slot's `rx_beyond` says.
    beyond: u32,
    /// A listener's `listen` backlog: at most one more connection than
    /// this waits in its accept ring, as in a Linux listener's accept
    /// queue (the rest wait in the stack's, up to the stack listener's
    /// backlog; beyond that SYNs are dropped).
    backlog: u32,
    /// Its receive ring's offset less the stream's, for the stack's urgent
    /// marks (stream offsets): a connection passed from another app starts
    /// its ring at what that app had read (negative), a socket that
    /// connected again goes on from its ring's tail (positive).
    rx_shift: i64,
    /// The transmit-ring offset up to which the stack was told the data
    /// is urgent ([`layout::UpUrgent::tx`]).
    urg_marked: u64,
}

impl Sock {
    fn free() -> Sock {
        Sock {
            kind: Kind::Free,
            spare: false,
            dgram: false,
            peer: 0,
            reuseport: false,
            reuseaddr: false,
            auto_port: false,
            specific: false,
            bind_lock: 0,
            sent: 0,
            rx_tail: 0,
            acc_tail: 0,
            peer_closed: false,
            shut: false,
            nodelay: true,
            cork: false,
            keepalive: false,
            ka: (0, 0, 0),
            defer: 0,
            ip: IpOpts::default(),
            bufs: 0,
            beyond: 0,
            backlog: 0,
            rx_shift: 0,
            urg_marked: 0,
        }
    }

    /// Its options as an [`UpSlot::opts`](layout::UpSlot::opts) word.
    fn opts_word(&self) -> u32 {
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        bit(!self.nodelay, opts::NAGLE)
            | bit(self.cork, opts::CORK)
            | bit(self.keepalive, opts::KEEPALIVE)
            | u32::from(self.ip.tos) << opts::TOS_SHIFT
            | u32::from(self.ip.ttl) << opts::TTL_SHIFT
    }

    /// Give connection `h` the options this socket holds (a listener's
    /// are passed to the connections it accepts).
    fn apply(&self, io: &mut Io, h: ConnHandle) {
        if !self.nodelay {
            let _ = io.set_nodelay(h, false);
        }
        if self.cork {
            let _ = io.set_cork(h, true);
        }
        if self.keepalive {
            let _ = io.set_keepalive(h, true);
        }
        if self.ka != (0, 0, 0) {
            let _ = io.set_keepalive_timing(h, self.ka);
        }
        if self.ip != IpOpts::default() {
            let _ = io.set_ip_opts(h, self.ip);
        }
        if self.bufs != 0 {
            let (rcv, snd) = layout::unpack_bufs(self.bufs);
            let _ = io.lock_buffers(h, rcv, snd);
        }
    }
}

/// One attached application (every process that shares its regions).
struct AppState {
    _down: Mapping,
    _up: Mapping,
    /// The memfds of both regions (down, up), for `REMAP`: a process of
    /// the app that `exec`s another program maps them again.
    memfds: [OwnedFd; 2],
    r: Regions,
    /// Its join key (in its down header): `JOIN` must present it.
    key: u64,
    /// The user id of the process that attached it (SO_PEERCRED;
    /// `u32::MAX`: unknown): only sockets of one user share a port.
    uid: u32,
    /// Its processes, by control connection.
    procs: HashMap<u64, Proc>,
    /// Its doorbell (an eventfd only this app and we hold; watched in
    /// [`Service::bells`], never read or written by us). Always there
    /// while it is attached; taken out to be closed by the closer.
    bell: Option<OwnedFd>,
    /// Ring ends of its waiters' wake-up lines ([`os::wake_line`]).
    waiters: Vec<Option<OwnedFd>>,
    socks: Vec<Sock>,
    free: Vec<u32>,
    last_activity: u64,
    dirty: bool,
    /// Sockets changed since the last end of batch (bit per slot): only
    /// waiters interested in one of them are rung.
    changed_bits: Vec<u64>,
    /// Sockets whose only change since the last end of batch may be
    /// transmit progress: rung only for waiters that want room to write.
    tx_bits: Vec<u64>,
    /// Changed listeners and UDP sockets some waiters watch exclusively
    /// (`EPOLLEXCLUSIVE`, a blocking accept or UDP receive): slot, how
    /// many of those were rung in this end of batch, and how many may be
    /// (see `wants_change`). Cleared after each ringing.
    claims: Vec<(u32, u32, u32)>,
    /// Process rows of the holders table in use (bit per row).
    rows: [u64; layout::MAX_PROCS as usize / 64],
    /// Per slot: a datagram taken from the stack that its socket's full
    /// receive ring had no room for (delivered when the app reads).
    udp_held: Vec<Option<Received>>,
    /// Per slot: bytes a connection received that its full receive ring
    /// had no room for, taken out of the stack's packet buffers while they
    /// ran low (see [`Service::spill`]); they go to the ring first.
    spill: HashMap<u32, Spill>,
    /// Per slot: the last `TCP_INFO` of a connection that died (reset,
    /// timed out) while the program still holds its socket, which Linux
    /// goes on reporting (state CLOSE) until the socket is closed.
    gone_info: HashMap<u32, TcpInfo>,
    /// Connections its program closed with a reset, their sockets freed:
    /// reset once this cycle's frames are out ([`Service::pump_tx`]).
    doomed: Vec<ConnHandle>,
    /// When it was last said that all its sockets were in use.
    full_said: Option<std::time::Instant>,
    /// New urgent data came on one of its connections: every sleeper is
    /// rung at the end of the batch, whatever it waits for (the process
    /// that owns the socket must raise `SIGURG` though it sleeps on
    /// another, as a Linux signal cuts any sleep short).
    wake_all: bool,
    /// The spare socket put in each entry of its up header's `spares`
    /// (`None`: none), as we wrote it: the app may have taken it since.
    spares: [Option<u32>; layout::SPARES],
    /// Bytes its transmit rings may still give the stack in this engine
    /// cycle ([`TX_BUDGET`]).
    tx_left: usize,
    /// Connections with bytes left in their transmit ring for want of
    /// budget, in the order they ran out (each once: `later_bits`, a bit
    /// per slot, cleared when its entry is taken).
    later: VecDeque<u32>,
    later_bits: Vec<u64>,
}

/// The sockets listening on one port. The stack holds one listener per
/// port (its cookie is [`listener_cookie`]); with SO_REUSEPORT several
/// sockets, of one user, share it and each new connection goes to one of
/// them by a hash of its remote address, as Linux spreads them.
#[derive(Debug)]
struct Listener {
    /// (app, slot) of each listening socket, in the order they listened.
    members: Vec<(u32, u32)>,
    /// Every member set SO_REUSEPORT before its bind.
    reuseport: bool,
    /// The members' user id.
    uid: u32,
    /// Which group this is (a group made anew on the port after this one
    /// closed has another): a listener passed again joins only its own.
    epoch: u64,
}

impl Listener {
    /// The member that takes a connection from `remote`: one flow always
    /// goes to the same member while the group is unchanged.
    /// Members bound to the service's address (`specific`) rank above
    /// wildcard ones, as Linux looks a listener up by the packet's
    /// address before `INADDR_ANY`.
    fn pick(&self, remote: SocketAddrV4, specific: impl Fn((u32, u32)) -> bool) -> (u32, u32) {
        let n = self.members.iter().filter(|&&m| specific(m)).count();
        if n == 0 {
            return flow_pick(&self.members, remote);
        }
        *self
            .members
            .iter()
            .filter(|&&m| specific(m))
            .nth(flow_index(remote, n))
            .expect("specific members counted")
    }

    /// Whether a socket of user `uid` (with SO_REUSEPORT or not) may
    /// join.
    fn admits(&self, reuseport: bool, uid: u32) -> bool {
        reuseport && self.reuseport && uid == self.uid && uid != u32::MAX
    }
}

/// The member of a SO_REUSEPORT group that takes what comes from
/// `remote`: a hash of its address and port, so one flow always goes to
/// one member while the group is unchanged. `members` is not empty.
fn flow_pick(members: &[(u32, u32)], remote: SocketAddrV4) -> (u32, u32) {
    members[flow_index(remote, members.len())]
}

/// Which of `n` (> 0) members takes what comes from `remote` (see
/// [`flow_pick`]).
fn flow_index(remote: SocketAddrV4, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let k = u64::from(u32::from(*remote.ip())) << 16 | u64::from(remote.port());
    let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (h % n as u64) as usize
}

/// A connection the stack completed for a listener that cannot take it
/// yet ([`Service::held`]).
#[derive(Debug, Clone, Copy)]
struct Held {
    h: ConnHandle,
    remote: SocketAddrV4,
    port: u16,
}

/// What became of a connection offered to a listener's accept queue.
enum Admit {
    /// In the queue (or gone while it waited: its handle is closed).
    Queued,
    /// The queue is full, or the program has no free socket slot.
    Wait,
    /// The program's head index is beyond its tail: a protocol error.
    Broken,
}

/// UDP sockets of one user sharing a port with SO_REUSEPORT: one stack
/// socket (its cookie is [`udp_group_cookie`]); each datagram goes to one
/// member by a hash of its source.
#[derive(Debug)]
struct UdpGroup {
    h: UdpHandle,
    /// (app, slot) of each member. Checked against the sockets before use
    /// ([`Service::prune_udp_group`]): a member that failed or went is
    /// dropped there.
    members: Vec<(u32, u32)>,
    uid: u32,
}

/// One process of an application: the one at the other end of a control
/// connection.
#[derive(Debug, Clone, Copy)]
struct Proc {
    /// Its pid, as it says (shown by `ixora stats`).
    pid: u32,
    /// Its row of the holders table (`layout::NO_ROW`: untracked).
    row: u32,
}

/// The service: an engine application serving attached applications.
pub struct Service {
    layout: Layout,
    shared: Arc<Shared>,
    apps: HashMap<u32, AppState>,
    conn_app: HashMap<u64, u32>,
    next_app: u32,
    /// Listening ports: the sockets that listen on each (more than one
    /// only with SO_REUSEPORT).
    listeners: HashMap<u16, Listener>,
    /// [`ServiceConfig::ifindex`].
    ifindex: u32,
    /// UDP ports that may be shared (SO_REUSEPORT, or SO_REUSEADDR).
    udp_groups: HashMap<u16, UdpGroup>,
    /// Applications with activity this cycle (reused buffer).
    active: Vec<u32>,
    /// An active application's marked bitmap words: (index, bits) (reused
    /// buffer).
    marked: Vec<(u32, u64)>,
    started: Instant,
    rejected: u64,
    /// Connections the stack completed for a listener whose program's
    /// accept ring is full, or that has no free socket slot, by listener
    /// (app, slot), in order: they wait in the stack's accept queue,
    /// counted against the listener's backlog (beyond it the stack drops
    /// the handshake's last ACK and the peer retries, as with Linux), and
    /// are offered again each cycle ([`Service::admit_held`]). A program
    /// that takes an entry from a full ring (`acc_room`) signals its
    /// listener.
    held: HashMap<(u32, u32), VecDeque<Held>>,
    /// Connections that waited so.
    accept_waits: u64,
    /// Receive spills ([`Service::spill`]), and when the last look for
    /// bytes to spill was.
    spills: SpillCounts,
    spill_looked: Option<Instant>,
    /// Ports below this need CAP_NET_BIND_SERVICE (the service's network
    /// namespace's `net.ipv4.ip_unprivileged_port_start`, as Linux).
    unprivileged_ports: u16,
    /// Binds refused for a privileged port.
    bind_denied: u64,
    /// [`Request::may_bind_low`] of the request being handled.
    may_bind_low: bool,
    /// When to yield the CPU to a woken thread of an app on it.
    yields: YieldPacer,
    /// Yields not made: every woken thread had run and slept again.
    yields_already_ran: u64,
    /// Each app's doorbell, watched edge-triggered: the core sleeps on
    /// this set too ([`App::wait_fd`]) and never reads a doorbell an app
    /// holds (see [`os::wake_line`] for why).
    bells: OwnedFd,
    /// Where the core sends descriptors to be closed.
    closer: Closer,
    /// UDP sockets (app, slot) whose datagrams the stack's full transmit
    /// queue refused: offered again next cycle.
    udp_retry: Vec<(u32, u32)>,
    /// Sockets handed from one process to another over a Unix socket
    /// (`PASS`) and not yet claimed, by the id in their cookie
    /// ([`pass_cookie`]).
    passes: HashMap<u32, Pass>,
    /// Bytes the waiting passes hold (their unread and unsent bytes).
    pass_bytes: usize,
    /// [`ServiceConfig::pass_timeout`].
    pass_timeout: Duration,
    /// When to look for expired passes next.
    pass_check: Instant,
    next_pass: u32,
    /// The last [`Listener::epoch`] given.
    next_epoch: u64,
    /// Listeners that moved to another process (app, slot, generation in
    /// the sender's app): passed again by their sender, which still holds
    /// the descriptor, they are joined, as the same socket would be.
    moved: HashMap<(u32, u32, u32), Moved>,
    pass_counts: PassCounts,
    /// Connections whose program ended with bytes still in their transmit
    /// rings (see [`Service::orphan`]), by the id in their cookie.
    orphans: HashMap<u32, Orphan>,
    /// Bytes the orphans still hold.
    orphan_bytes: usize,
    /// Connections of programs gone to reset once this cycle's frames are
    /// out (what they wrote goes first: see [`Service::orphan`]).
    doomed: Vec<ConnHandle>,
    next_orphan: u32,
    orphan_counts: OrphanCounts,
    /// When to look for orphans that waited too long next.
    orphan_check: Instant,
    /// How long the idle core may sleep next ([`App::max_nap`]): 1 ms
    /// after work, doubling with each sleep that found none, to 16 ms.
    nap: Duration,
    /// The port the engine runs the service on, for its counters in
    /// `ixora stats` ([`Service::report_port`]).
    port: Option<Arc<dyn ixora_io::Port>>,
}

/// A socket a program handed to another process over a Unix socket
/// (`SCM_RIGHTS`; [`op::PASS`]), held by the service until the process
/// that receives the descriptor claims it ([`op::CLAIM`]).
struct Pass {
    /// The passed file's inode: the claimant must hold that file.
    ino: u64,
    /// The app it came from.
    from: u32,
    /// Its user (each may have at most `--slots` passes waiting).
    uid: u32,
    /// O_NONBLOCK of the sender's descriptor: it belongs to the file, which
    /// the receiver shares.
    nonblock: bool,
    /// The sender's socket was bound to any address (its kernel side
    /// listens too once the receiver listens on it).
    bound_any: bool,
    since: Instant,
    what: Passed,
}

/// A connection whose program ended (its last process exited, was killed
/// or execed away from it) while its transmit ring still held bytes the
/// window had no room for: as the kernel keeps a closed socket's send
/// buffer, the service keeps them and sends them as the window opens,
/// then the FIN.
struct Orphan {
    h: ConnHandle,
    /// What the stack has not taken yet.
    tx: Bytes,
    since: Instant,
}

/// What became of the connections still open when their program ended.
#[derive(Default)]
struct OrphanCounts {
    /// Ended gracefully (what was left in the ring sent, then a FIN).
    finished: u64,
    /// Reset instead: unread bytes (as Linux resets a socket closed with
    /// data unread), no room under [`MAX_ORPHAN_BYTES`], an impossible
    /// ring, or data arriving after the end.
    reset: u64,
    /// Reset because the peer took nothing for [`ORPHAN_TIMEOUT`].
    expired: u64,
}

/// The most bytes all orphans may hold (each up to a ring).
const MAX_ORPHAN_BYTES: usize = 256 << 20;

/// How long an orphan may wait for its peer's window before it is reset
/// (Linux gives up on an orphaned socket's zero window after some
/// minutes of probes: its `tcp_orphan_retries`).
const ORPHAN_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether socket `s` (generation `gen`) of app `id` waits in `passes`
/// for its claim as a listener or bound socket: such a socket outlives
/// its sender's close until it moves (or its pass ends unclaimed).
fn passing(passes: &HashMap<u32, Pass>, id: u32, s: u32, gen: u32) -> bool {
    passes.values().any(|p| {
        p.from == id && matches!(p.what, Passed::Held { slot, gen: g } if slot == s && g == gen)
    })
}

/// What was passed.
enum Passed {
    /// A connection, out of the sender's application since the `PASS`.
    Conn(ConnPass),
    /// A listener, a TCP socket merely bound or a UDP socket (slot and
    /// generation in the sender's application): it stays there until the
    /// claim moves it, a listener with its accept queue, a UDP socket with
    /// its unread datagrams.
    Held { slot: u32, gen: u32 },
    /// A held socket passed again (one file sent to several processes)
    /// that an earlier claim moved: the claimant joins its port's group,
    /// which then spreads connections or datagrams over its members by
    /// flow, as `SO_REUSEPORT` does; a bound socket's claimant gets a
    /// socket bound to the port beside it (Node.js's cluster with
    /// `SCHED_NONE` sends each worker the bound socket to listen on).
    Join(Moved),
}

/// Where a held socket handed over went, and what a socket that joins
/// it there takes.
#[derive(Clone, Copy)]
struct Moved {
    port: u16,
    /// The group's [`Listener::epoch`] (a listener's).
    epoch: u64,
    /// The socket as it was, with its options: `Listen` or `Bound` for a
    /// TCP socket, `Udp` naming its group's stack socket.
    sock: Sock,
    /// Its packed local address.
    local: u64,
}

/// A connection out of an application, on its way to another: its data
/// stays in the stack meanwhile (the window closes as it fills).
struct ConnPass {
    h: ConnHandle,
    /// Its slot, generation and flags in the sender's application (a
    /// `CANCEL` puts it back there).
    slot: u32,
    gen: u32,
    flags: u32,
    /// The socket as the sender left it (options, peer closed, shut down).
    sock: Sock,
    /// What the sender's program had read of its receive ring: the new
    /// ring starts there.
    head: u64,
    /// Bytes the sender's program had not read.
    rx: Vec<u8>,
    /// Bytes received that were spilled, not yet in its ring.
    spill: Option<Spill>,
    /// Bytes it had written that the window had no room for.
    tx: Vec<u8>,
    /// A shutdown for writing it asked, waiting for `tx` to drain.
    shut_wr: bool,
    /// Packed local and remote addresses.
    local: u64,
    remote: u64,
    /// The connection died meanwhile (its errno; the handle is closed).
    err: Option<i32>,
}

/// A connection's received bytes taken out of the stack's packet buffers
/// for a program that does not read them yet (see [`Service::spill`]).
/// They keep their place in the connection's window (`Io::recv_hold`)
/// until they go into its receive ring (`Io::recv_release`), so a
/// connection's spill is at most its window.
#[derive(Debug, Default)]
struct Spill {
    buf: Vec<u8>,
    /// Bytes of `buf` already in the ring.
    off: usize,
}

impl Spill {
    fn left(&self) -> &[u8] {
        &self.buf[self.off..]
    }
}

/// Receive spills: how often connections' bytes were taken out of the
/// stack's packet buffers, how many bytes, and how many wait now.
#[derive(Debug, Default, Clone, Copy)]
struct SpillCounts {
    spills: u64,
    bytes: u64,
    scans: u64,
}

/// Sockets handed over, claimed, and reset unclaimed.
#[derive(Debug, Default, Clone, Copy)]
struct PassCounts {
    passed: u64,
    claimed: u64,
    expired: u64,
}

impl Drop for Service {
    /// At shutdown too, the apps' descriptors are closed by the closer.
    fn drop(&mut self) {
        for (_, app) in self.apps.drain() {
            let mut last: Vec<OwnedFd> = app.waiters.into_iter().flatten().collect();
            last.extend(app.bell);
            self.closer.close(last);
        }
    }
}

/// A thread that closes what the core lets go of and an app may have put
/// in an epoll set of its own (its waiters' ring ends, its doorbell): the
/// last close of such a file takes that set's lock, which the app can hold
/// as long as it likes (an `epoll_wait` that copies out to a
/// userfaultfd-registered page; measured: the close then blocks). A stuck
/// close delays the closes queued after it, never the core; while more
/// than [`MAX_PENDING_CLOSES`] wait, the core makes no new descriptors
/// (WAITER and ATTACH get `EAGAIN`), so a stuck close cannot make the
/// service run out of them. A second thread, the retirer, lets go of gone
/// applications ([`Closer::retire`]), apart: a stuck close does not hold
/// their memory, and they do not count as closes waiting.
struct Closer {
    tx: std::sync::mpsc::Sender<Vec<OwnedFd>>,
    pending: Arc<AtomicUsize>,
    retire_tx: std::sync::mpsc::Sender<Box<AppState>>,
}

/// Closes waiting for the closer thread beyond which new descriptors are
/// refused.
const MAX_PENDING_CLOSES: usize = 256;

impl Closer {
    fn start() -> io::Result<Closer> {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<OwnedFd>>();
        let pending = Arc::new(AtomicUsize::new(0));
        let p = pending.clone();
        std::thread::Builder::new()
            .name("ixora-closer".into())
            .spawn(move || {
                for fds in rx {
                    let n = fds.len();
                    drop(fds);
                    p.fetch_sub(n, Ordering::Relaxed);
                }
            })?;
        let (retire_tx, retire_rx) = std::sync::mpsc::channel::<Box<AppState>>();
        std::thread::Builder::new()
            .name("ixora-retirer".into())
            .spawn(move || {
                for app in retire_rx {
                    drop(app);
                }
            })?;
        Ok(Closer {
            tx,
            pending,
            retire_tx,
        })
    }

    /// Close `fds` on the closer thread.
    fn close(&self, fds: Vec<OwnedFd>) {
        self.pending.fetch_add(fds.len(), Ordering::Relaxed);
        if let Err(e) = self.tx.send(fds) {
            // The thread is gone (cannot happen while we live): close here.
            self.pending.fetch_sub(e.0.len(), Ordering::Relaxed);
        }
    }

    /// Let go of a gone application (its doorbell and waiters' ring ends
    /// taken out and given to [`Closer::close`]) on the retirer thread:
    /// its two regions are unmapped and their memfds closed, the last
    /// holder of them (the kernel frees every page its rings used), and
    /// its tables freed. On the core that held every other application's
    /// packets: 6–11 ms for a program that exited with 800 connections of
    /// 60 kB unsent each, 0.1–0.2 ms for any (until 2026-11-30).
    fn retire(&self, app: AppState) {
        // (If the thread is gone — it cannot be while we live — it is
        // let go of here.)
        let _ = self.retire_tx.send(Box::new(app));
    }

    /// Whether closes are piling up behind a stuck one.
    fn backed_up(&self) -> bool {
        self.pending.load(Ordering::Relaxed) > MAX_PENDING_CLOSES
    }
}

/// Bytes one application's TCP transmit rings give the stack in one engine
/// cycle (its `Sent` events and its look at the apps; reset in
/// [`App::transmitted`]): what is left waits for the next, its connections
/// first, in the order they ran out. One program writing to many
/// connections at once would otherwise hold the core for the copy of all
/// of it, and every other program's packets with it: 400 connections given
/// 64 KiB each held it 8–14 ms (docs/bench/sockets-burst.md,
/// ARCHITECTURE.md "One program's burst"). Not budgeted: UDP datagrams,
/// the bytes of a program that exited ([`Service::orphan`]), a reset.
const TX_BUDGET: usize = 256 * 1024;

/// The idle core's longest sleep while it has applications, right after
/// work: what a program's bytes wait, at most, when it wrote them while
/// the service slept and then neither blocked nor polled (its doorbell
/// is rung at its next blocking call or poll, not by each write).
const NAP_MIN: Duration = Duration::from_millis(1);
/// ... and once nothing happened for a while (1 + 2 + 4 + 8 ms): an idle
/// service wakes about 60 times a second, not 1,000 (it took 2.4% of a
/// CPU doing nothing, and woke the CPU of the programs beside it).
const NAP_MAX: Duration = Duration::from_millis(16);

/// A fresh random join key for an application.
fn join_key() -> io::Result<u64> {
    use std::io::Read;
    let mut k = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .map_err(|e| io::Error::new(e.kind(), format!("join key from /dev/urandom: {e}")))?;
    Ok(u64::from_le_bytes(k))
}

fn cookie(app: u32, slot: u32) -> u64 {
    (app as u64) << 32 | slot as u64
}

fn uncookie(c: u64) -> (u32, u32) {
    ((c >> 32) as u32, c as u32)
}

/// The stack's cookie for the listener of `port` (never an app's
/// [`cookie`]: app ids stay below 2^30).
fn listener_cookie(port: u16) -> u64 {
    1 << 63 | u64::from(port)
}

/// Whether socket `m` (app, slot) is bound to the service's address
/// rather than to any ([`Sock::specific`]).
fn is_specific(apps: &HashMap<u32, AppState>, (id, s): (u32, u32)) -> bool {
    apps.get(&id)
        .and_then(|a| a.socks.get(s as usize))
        .is_some_and(|k| k.specific)
}

/// Whether slot `s` of `app` holds a UDP socket.
fn slot_is_dgram(app: Option<&AppState>, s: u32) -> bool {
    app.and_then(|a| a.socks.get(s as usize))
        .is_some_and(|k| k.dgram)
}

/// The stack's cookie for the UDP socket of a SO_REUSEPORT group on
/// `port` (never an app's [`cookie`] nor a [`listener_cookie`]).
fn udp_group_cookie(port: u16) -> u64 {
    1 << 62 | u64::from(port)
}

/// The stack's cookie for passed connection `id` (bits 63 and 62 set:
/// never an app's [`cookie`], a [`listener_cookie`] nor a
/// [`udp_group_cookie`]).
fn pass_cookie(id: u32) -> u64 {
    3 << 62 | u64::from(id)
}

/// The id of a [`pass_cookie`], if `c` is one.
fn pass_of(c: u64) -> Option<u32> {
    (c >> 61 == 6).then_some(c as u32)
}

/// The stack's cookie for orphan `id` (bits 63 to 61 set: never any
/// other cookie; a [`pass_cookie`] leaves bit 61 clear).
fn orphan_cookie(id: u32) -> u64 {
    7 << 61 | u64::from(id)
}

/// The id of an [`orphan_cookie`], if `c` is one.
fn orphan_of(c: u64) -> Option<u32> {
    (c >> 61 == 7).then_some(c as u32)
}

/// The port of a [`udp_group_cookie`], if `c` is one.
fn udp_group_of(c: u64) -> Option<u16> {
    (c >> 48 == 1 << 14).then_some(c as u16)
}

/// The connection and cookie an event of an established connection
/// names.
fn conn_of(ev: &Event) -> Option<(ConnHandle, u64)> {
    match *ev {
        Event::Recv { handle, cookie, .. }
        | Event::Sent { handle, cookie, .. }
        | Event::Connected { handle, cookie }
        | Event::PeerClosed { handle, cookie }
        | Event::Dead { handle, cookie, .. } => Some((handle, cookie)),
        _ => None,
    }
}

fn errno_of(e: Error) -> i64 {
    -(match e {
        Error::InvalidHandle => libc::EBADF,
        Error::AddrInUse => libc::EADDRINUSE,
        Error::NoPorts => libc::EADDRNOTAVAIL,
        Error::InvalidState => libc::EINVAL,
        Error::Unreachable => libc::ENETUNREACH,
        Error::WouldBlock => libc::EAGAIN,
        Error::MessageTooLong => libc::EMSGSIZE,
        Error::InvalidArgument => libc::EINVAL,
    } as i64)
}

/// The core's `TCP_INFO` snapshot in the form the `INFO` reply carries.
fn wire_info(t: &ixora_core::TcpInfo) -> TcpInfo {
    let sat = |v: u128| v.min(u128::from(u32::MAX)) as u32;
    TcpInfo {
        state: linux_tcp_state(t.state),
        rtt_us: sat(t.srtt.as_micros()),
        rttvar_us: sat(t.rttvar.as_micros()),
        rto_ms: sat(t.rto.as_millis()),
        cwnd: t.cwnd,
        ssthresh: t.ssthresh,
        mss: t.mss,
        mss_base: t.mss_base,
        rcv_mss: t.rcv_mss,
        retrans: t.retransmits,
        sack: t.sack,
        timestamps: t.timestamps,
        wscale: t.wscale,
        snd_wnd: t.snd_wnd,
        rcv_wnd: t.rcv_wnd,
        unacked_segs: t.unacked_segs,
        notsent: t.unsent,
        segs_in: t.segs_in,
        segs_out: t.segs_out,
        bytes_acked: t.bytes_acked,
        bytes_received: t.bytes_received,
        bytes_sent: t.bytes_sent,
        bytes_retrans: t.bytes_retrans,
        rcv_space: t.rcv_space,
        unacked: t.unacked,
    }
}

/// A connection state as Linux numbers it (`include/net/tcp_states.h`),
/// for a program's `TCP_INFO`. TIME-WAIT reads as CLOSE: Linux hands
/// that state to a separate time-wait socket and closes the program's
/// (`tcp_time_wait`, `tcp_done`), so its `TCP_INFO` never says 6 (until
/// 2026-11-29 Ixora's did).
fn linux_tcp_state(s: State) -> u8 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait | State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

fn dead_errno(r: DeadReason) -> i32 {
    match r {
        DeadReason::Reset => libc::ECONNRESET,
        DeadReason::Refused => libc::ECONNREFUSED,
        DeadReason::TimedOut => libc::ETIMEDOUT,
        DeadReason::Unreachable => libc::EHOSTUNREACH,
        DeadReason::Aborted => libc::ECONNABORTED,
    }
}

/// The most bytes all waiting passes may hold (each connection up to two
/// rings): past it, `PASS` gets `EAGAIN`.
const MAX_PASS_BYTES: usize = 256 << 20;

/// How often the service looks for passes that waited too long.
const PASS_CHECK_EVERY: Duration = Duration::from_millis(100);

/// How often the service may say that an application ran out of sockets.
const FULL_SAID_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// What a new application's state holds that does not depend on the
/// stack: its two regions (memfds, mapped and sealed), its join key and
/// its per-slot tables. Made ahead on a control thread (one spare:
/// [`Shared::prepared_app`]) and sent with the `ATTACH` to the core, which
/// only fills in the headers and takes it. Made on the core (until
/// 2026-11-30), it held every application's packets for 0.1–0.2 ms per
/// attaching process — the page faults of a 4,096-slot table — and a
/// one-shot `curl` waited for it in its first connect.
struct PreparedApp {
    down_fd: OwnedFd,
    up_fd: OwnedFd,
    down: Mapping,
    up: Mapping,
    key: u64,
    socks: Vec<Sock>,
    free: Vec<u32>,
    changed_bits: Vec<u64>,
    tx_bits: Vec<u64>,
    udp_held: Vec<Option<Received>>,
    waiters: Vec<Option<OwnedFd>>,
}

impl PreparedApp {
    /// The regions and tables of an application of layout `l`.
    fn new(l: Layout) -> io::Result<PreparedApp> {
        let down_fd = os::memfd("ixora-app-down", l.down_len())?;
        let up_fd = os::memfd("ixora-app-up", l.up_len())?;
        let down = Mapping::map_with(down_fd.as_fd(), l.down_len(), true, false)?;
        let up = Mapping::map_with(up_fd.as_fd(), l.up_len(), true, false)?;
        // The app may only read the down region: sealed against new
        // writable mappings after ours exists.
        os::seal(
            down_fd.as_fd(),
            libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
        os::seal(
            up_fd.as_fd(),
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
        Ok(PreparedApp {
            down_fd,
            up_fd,
            down,
            up,
            key: join_key()?,
            socks: vec![Sock::free(); l.slots as usize],
            free: (0..l.slots).rev().collect(),
            changed_bits: vec![0; l.slots as usize / 64],
            tx_bits: vec![0; l.slots as usize / 64],
            udp_held: vec![None; l.slots as usize],
            waiters: (0..layout::MAX_WAITERS).map(|_| None).collect(),
        })
    }
}

impl AppState {
    /// A socket was refused to application `id` for want of a free slot
    /// (`what` was refused): say so on standard error, at most every
    /// [`FULL_SAID_EVERY`], so that an operator learns why (the program
    /// sees only `EMFILE`, or its clients' connections wait unaccepted).
    fn say_full(&mut self, id: u32, what: &str) {
        let now = std::time::Instant::now();
        if self
            .full_said
            .is_some_and(|t| now.duration_since(t) < FULL_SAID_EVERY)
        {
            return;
        }
        self.full_said = Some(now);
        let mut pids: Vec<u32> = self.procs.values().map(|p| p.pid).collect();
        pids.sort_unstable();
        eprintln!(
            "ixora serve: application {id} (pid {pids:?}) has all its {} sockets in use: {what}; \
             start the service with more (`ixora serve --slots N`, a multiple of 64)",
            self.socks.len()
        );
    }

    fn alloc(&mut self) -> Option<u32> {
        let Some(s) = self.free.pop() else {
            // The last slots: a spare the app has not taken comes back.
            let s = self.reclaim_spare()?;
            self.release(s);
            return self.alloc();
        };
        let d = self.r.down_slot(s);
        let u = self.r.up_slot(s);
        // The service owns a free slot's up half too: reset it before the
        // app learns the slot.
        u.rx_head.store(0, Ordering::Relaxed);
        u.tx_tail.store(0, Ordering::Relaxed);
        u.acc_head.store(0, Ordering::Relaxed);
        u.req.store(0, Ordering::Relaxed);
        u.refs.store(0, Ordering::Relaxed);
        // No process holds a fresh socket yet (whatever a crashed process
        // left in its row for the slot's previous life is forgotten).
        for row in 0..layout::MAX_PROCS {
            self.r.held(row, s).store(0, Ordering::Relaxed);
        }
        u.opts.store(0, Ordering::Relaxed);
        u.keep.store(0, Ordering::Relaxed);
        u.bufs.store(0, Ordering::Relaxed);
        u.seen.store(0, Ordering::Relaxed);
        u.errs_seen.store(0, Ordering::Relaxed);
        u.dest.store(0, Ordering::Relaxed);
        let uu = self.r.up_urgent(s);
        uu.tx.store(0, Ordering::Relaxed);
        uu.read.store(0, Ordering::Relaxed);
        uu.signalled.store(0, Ordering::Relaxed);
        uu.owned.store(0, Ordering::Relaxed);
        self.r.urgent(s).store(0, Ordering::Relaxed);
        d.rx_tail.store(0, Ordering::Relaxed);
        d.tx_head.store(0, Ordering::Relaxed);
        d.flags.store(0, Ordering::Relaxed);
        d.err.store(0, Ordering::Relaxed);
        d.acc_tail.store(0, Ordering::Relaxed);
        d.local.store(0, Ordering::Relaxed);
        d.remote.store(0, Ordering::Relaxed);
        d.rx_beyond.store(0, Ordering::Relaxed);
        d.acc_room.store(0, Ordering::Relaxed);
        d.state.store(state::OPEN, Ordering::Release);
        self.socks[s as usize] = Sock {
            kind: Kind::Open,
            ..Sock::free()
        };
        Some(s)
    }

    /// A new socket like `like` (a listener or bound socket handed over
    /// from another app: its kind and options) at packed address `local`;
    /// a listener's empty accept queue is the caller's to fill.
    fn alloc_like(&mut self, like: Sock, local: u64) -> Option<u32> {
        let s = self.alloc()?;
        // (Its rings start at 0.)
        self.socks[s as usize] = Sock {
            acc_tail: 0,
            rx_tail: 0,
            sent: 0,
            rx_shift: 0,
            urg_marked: 0,
            ..like
        };
        let d = self.r.down_slot(s);
        d.local.store(local, Ordering::Relaxed);
        if matches!(like.kind, Kind::Listen(_)) {
            self.set_backlog(s, like.backlog);
            self.r
                .down_slot(s)
                .state
                .store(state::LISTEN, Ordering::Release);
        }
        Some(s)
    }

    /// Listener `s`'s `listen` backlog: its accept ring holds that many
    /// and one more (as a Linux listener's accept queue), which its down
    /// slot tells the app (`acc_room`).
    fn set_backlog(&mut self, s: u32, backlog: u32) {
        self.socks[s as usize].backlog = backlog;
        let room = self.acc_room(s);
        self.r.down_slot(s).acc_room.store(room, Ordering::Relaxed);
    }

    /// How many connections listener `s`'s accept ring may hold.
    fn acc_room(&self, s: u32) -> u32 {
        let backlog = self.socks[s as usize].backlog;
        self.r.acc_capacity().min(backlog.saturating_add(1))
    }

    /// Spare TCP sockets in every empty entry of the app's `spares`, and
    /// those it took since become its own (its connect on one is a
    /// [`req::CONNECT`], see [`Service::activity`]). Only while it has
    /// more free slots than entries: the last ones stay for its requests.
    fn refill_spares(&mut self) {
        for i in 0..layout::SPARES {
            let e = self.r.up_header().spares[i].load(Ordering::Acquire);
            if let Some(s) = self.spares[i] {
                if e == layout::spare_entry(s) {
                    continue; // still there
                }
                // Taken (or overwritten: the app's own loss).
                self.socks[s as usize].spare = false;
                self.spares[i] = None;
            }
            if e != 0 || self.free.len() <= layout::SPARES {
                continue;
            }
            let Some(s) = self.alloc() else { return };
            self.socks[s as usize].spare = true;
            self.spares[i] = Some(s);
            self.r.up_header().spares[i].store(layout::spare_entry(s), Ordering::Release);
        }
    }

    /// A spare socket taken back from the app's up header before it took
    /// it (None: it took them all).
    fn reclaim_spare(&mut self) -> Option<u32> {
        for i in 0..layout::SPARES {
            let Some(s) = self.spares[i] else { continue };
            self.spares[i] = None;
            self.socks[s as usize].spare = false;
            let e = &self.r.up_header().spares[i];
            if e.compare_exchange(
                layout::spare_entry(s),
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
            {
                return Some(s);
            }
        }
        None
    }

    /// The reply that gives the app socket `s`: its slot and generation.
    fn slot_reply(&self, s: u32) -> Msg {
        let gen = self.r.down_slot(s).gen.load(Ordering::Relaxed);
        Msg {
            op: op::REPLY,
            slot: s,
            a: s as i64,
            b: gen as u64,
            c: 0,
        }
    }

    fn release(&mut self, s: u32) {
        if self.socks[s as usize].kind == Kind::Free {
            return;
        }
        let d = self.r.down_slot(s);
        d.state.store(state::FREE, Ordering::Release);
        d.gen.fetch_add(1, Ordering::Release);
        d.seq.fetch_add(1, Ordering::Release);
        self.socks[s as usize] = Sock::free();
        // (A datagram held for a UDP socket, or bytes for a connection,
        // are not the next one's.)
        self.udp_held[s as usize] = None;
        self.spill.remove(&s);
        self.gone_info.remove(&s);
        self.free.push(s);
        self.mark(s);
    }

    /// Socket `s` changed in this batch.
    fn mark(&mut self, s: u32) {
        self.changed_bits[s as usize / 64] |= 1 << (s % 64);
        self.dirty = true;
    }

    /// A free process row, cleared and marked used (NO_ROW when all are
    /// taken: that process's references are then not tracked).
    fn take_row(&mut self) -> u32 {
        let Some(w) = self.rows.iter().position(|&r| r != u64::MAX) else {
            return layout::NO_ROW;
        };
        let b = (!self.rows[w]).trailing_zeros();
        self.rows[w] |= 1 << b;
        let row = w as u32 * 64 + b;
        for s in 0..self.r.layout().slots {
            self.r.held(row, s).store(0, Ordering::Relaxed);
        }
        row
    }

    fn changed(&mut self, s: u32) {
        self.r.down_slot(s).seq.fetch_add(1, Ordering::Release);
        self.mark(s);
    }

    /// Up to `want` bytes socket `s` may give the stack now out of the
    /// app's budget ([`TX_BUDGET`]): fewer when the budget runs out, and
    /// the socket is then looked at again before the app's next marks.
    fn tx_budget(&mut self, s: u32, want: usize) -> usize {
        let n = want.min(self.tx_left);
        self.tx_left -= n;
        let bit = 1u64 << (s % 64);
        if n < want && self.later_bits[s as usize / 64] & bit == 0 {
            TX_DEFERRED.fetch_add(1, Ordering::Relaxed);
            self.later_bits[s as usize / 64] |= bit;
            self.later.push_back(s);
        }
        n
    }

    /// The service took bytes from socket `s`'s transmit ring: only
    /// waiters that want room to write are rung for it.
    fn tx_progress(&mut self, s: u32) {
        self.r.down_slot(s).seq.fetch_add(1, Ordering::Release);
        self.tx_bits[s as usize / 64] |= 1 << (s % 64);
        self.dirty = true;
    }

    /// Say in socket `s`'s down slot whether the stack's send buffer
    /// has room beyond what its transmit ring held ([`flag::STACK_FULL`]),
    /// when that changed.
    fn stack_full(&self, s: u32, full: bool) {
        let d = self.r.down_slot(s);
        if self.says_stack_full(s) != full {
            match full {
                true => d.flags.fetch_or(flag::STACK_FULL, Ordering::Release),
                false => d.flags.fetch_and(!flag::STACK_FULL, Ordering::Release),
            };
        }
    }

    /// Whether socket `s`'s down slot says [`flag::STACK_FULL`].
    fn says_stack_full(&self, s: u32) -> bool {
        self.r.down_slot(s).flags.load(Ordering::Relaxed) & flag::STACK_FULL != 0
    }

    fn fail(&mut self, s: u32, errno: i32) {
        let d = self.r.down_slot(s);
        d.err.store(errno, Ordering::Relaxed);
        d.flags.fetch_or(flag::ERROR, Ordering::Release);
        d.state.store(state::CLOSED, Ordering::Release);
        self.socks[s as usize].kind = Kind::Gone;
        self.changed(s);
    }
}

impl Service {
    /// Show `port`'s counters (and the kernel's drops on it) in
    /// `ixora stats`: the port the engine runs this service on.
    pub fn report_port(&mut self, port: Arc<dyn ixora_io::Port>) {
        self.port = Some(port);
    }

    /// The JSON the `STATS` request returns.
    fn stats(&self, io: &Io) -> String {
        let spin = io.idle_spin();
        let mut counters = serde_json::Map::new();
        for (_, name, v) in io.stack().counters().iter() {
            if v != 0 {
                counters.insert(name.to_string(), v.into());
            }
        }
        let drops: serde_json::Map<_, _> = io
            .stack()
            .counters()
            .drop_iter()
            .filter(|d| d.1 > 0)
            .map(|(r, n)| (r.name().to_string(), n.into()))
            .collect();
        let interface = self.port.as_ref().map(|p| {
            let c: serde_json::Map<_, _> = p
                .stats()
                .into_iter()
                .filter(|d| d.1 > 0)
                .map(|(name, n)| (name.to_string(), n.into()))
                .collect();
            serde_json::json!({"backend": p.caps().backend, "counters": c})
        });
        let mut apps = Vec::new();
        let mut ids: Vec<_> = self.apps.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let a = &self.apps[&id];
            let h = a.r.up_header();
            let mut calls = serde_json::Map::new();
            let (mut user, mut kernel) = (0u64, 0u64);
            for (i, name) in CALLS.iter().enumerate() {
                let u = h.counters[i][0].load(Ordering::Relaxed);
                let k = h.counters[i][1].load(Ordering::Relaxed);
                if NOT_CALLS.contains(name) {
                    continue;
                }
                if u + k > 0 {
                    calls.insert(
                        name.to_string(),
                        serde_json::json!({"user": u, "kernel": k}),
                    );
                }
                user += u;
                kernel += k;
            }
            let open = a
                .socks
                .iter()
                .filter(|s| !matches!(s.kind, Kind::Free) && !s.spare)
                .count();
            let udp = a.socks.iter().filter(|s| s.dgram).count();
            let mut pids: Vec<_> = a.procs.values().map(|p| p.pid).collect();
            pids.sort_unstable();
            apps.push(serde_json::json!({
                "app": id,
                "pids": pids,
                "sockets": open,
                "slots": a.socks.len(),
                "udp_sockets": udp,
                "calls": calls,
                "user_calls": user,
                "kernel_calls": kernel,
                "user_share": if user + kernel > 0 { user as f64 / (user + kernel) as f64 } else { 0.0 },
                "passthrough_calls": h.passthrough.load(Ordering::Relaxed),
                // Threads (of all its processes) that have blocked on
                // Ixora's sockets: each holds a waiter until it ends.
                "waiters": h.waiter_owner.iter().filter(|o| o.load(Ordering::Relaxed) != 0).count(),
                // How blocking calls ended, each counted once: found it
                // while spinning, or after yielding the CPU to the service
                // (on its CPU), or slept in the kernel (`look_ran_out`:
                // those that slept, or timed out, after a look); and
                // doorbells rung to wake the sleeping service.
                "waits": {
                    "spun": h.counters[layout::call("wait")][0].load(Ordering::Relaxed),
                    "looked": h.counters[layout::call("look")][0].load(Ordering::Relaxed),
                    "look_ran_out": h.counters[layout::call("look")][1].load(Ordering::Relaxed),
                    "slept": h.counters[layout::call("wait")][1].load(Ordering::Relaxed),
                    "doorbells": h.counters[layout::call("doorbell")][1].load(Ordering::Relaxed),
                    "woken": h.counters[layout::call("wakeup")][0].load(Ordering::Relaxed),
                    "spurious": h.counters[layout::call("wakeup")][1].load(Ordering::Relaxed),
                    // epoll_wait on mixed sets: the kernel descriptors
                    // known idle without asking, or asked.
                    "kernel_fds_skipped": h.counters[layout::call("kernel_fds")][0].load(Ordering::Relaxed),
                    "kernel_fds_asked": h.counters[layout::call("kernel_fds")][1].load(Ordering::Relaxed),
                },
                // epoll_wait's looks at its sets: the sockets looked at
                // (those the service changed, and a few more), and the
                // looks at every socket of a set.
                "epoll_scans": {
                    "sockets_looked_at": h.counters[layout::call("scan")][0].load(Ordering::Relaxed),
                    "full_scans": h.counters[layout::call("scan")][1].load(Ordering::Relaxed),
                },
            }));
        }
        serde_json::json!({
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "ip": format!("{}", Ipv4Addr::from(self.ip(io))),
            "apps": apps,
            "listeners": self.listeners.keys().collect::<Vec<_>>(),
            "protocol_errors": PROTOCOL_ERRORS.load(Ordering::Relaxed),
            "app_resets": APP_ABORTS.load(Ordering::Relaxed),
            "udp_refused": UDP_TX_REFUSED.load(Ordering::Relaxed),
            "udp_group_drops": UDP_GROUP_DROPS.load(Ordering::Relaxed),
            "udp_full_drops": UDP_FULL_DROPS.load(Ordering::Relaxed),
            "udp_too_long": UDP_RX_TOO_LONG.load(Ordering::Relaxed),
            "rejected_connections": self.rejected,
            // Connections that waited in the stack's accept queue for
            // room in their program's (see `Service::held`), and those
            // waiting now.
            "accept_waits": {"waited": self.accept_waits, "waiting": self.held.values().map(VecDeque::len).sum::<usize>()},
            // Connections' received bytes taken out of the packet buffers
            // while they ran low, for programs not reading them (see
            // `Service::spill`): times, bytes, and bytes waiting now.
            "receive_spills": {"spills": self.spills.spills, "bytes": self.spills.bytes, "looks": self.spills.scans, "waiting": self.apps.values().flat_map(|a| a.spill.values()).map(|sp| sp.left().len()).sum::<usize>()},
            "binds_denied": self.bind_denied,
            // Times a connection's bytes waited for the next cycle, its
            // app's budget of bytes per cycle spent, and those waiting now.
            "transmit_budget": {"bytes_per_cycle": TX_BUDGET, "deferred": TX_DEFERRED.load(Ordering::Relaxed), "waiting": self.apps.values().map(|a| a.later.len()).sum::<usize>()},
            "passed_connections": {"passed": self.pass_counts.passed, "claimed": self.pass_counts.claimed, "expired": self.pass_counts.expired, "waiting": self.passes.len()},
            "ended_with_program": {"finished": self.orphan_counts.finished, "reset": self.orphan_counts.reset, "expired": self.orphan_counts.expired, "sending": self.orphans.len(), "bytes": self.orphan_bytes},
            "yields": {"made": self.yields.made(), "long": self.yields.long(), "backoffs": self.yields.backoffs(), "already_ran": self.yields_already_ran},
            // The idle core's look before it sleeps (`--idle-spin-us`).
            "idle_spin": {"max_us": spin.max_us, "window_us": spin.window_us, "spins": spin.spins, "hits": spin.hits, "yields": spin.yields, "long_yields": spin.long_yields, "backoffs": spin.backoffs},
            // Descriptors waiting for the closer thread (see `Closer`).
            "pending_closes": self.closer.pending.load(Ordering::Relaxed),
            "stack": counters,
            // Frames the stack dropped, by reason.
            "drops": drops,
            // The port's own counters (AF_XDP: what the kernel dropped
            // before the stack saw it, and why).
            "interface": interface,
        })
        .to_string()
    }

    /// Sockets per `SOCKETS` reply: a page of them stays well within a
    /// control packet (at most about 400 bytes each; a Unix socket's send
    /// buffer is 208 KiB by default).
    const SOCKETS_PAGE: usize = 256;

    /// The JSON the `SOCKETS` request returns: the apps' sockets from
    /// `cursor` on (`app id << 32 | slot`), a page at most, each as the
    /// app sees it (state, addresses, bytes in its rings) and, for a
    /// connection, as the stack holds it (TCP state, window, RTT, bytes
    /// not yet in the ring or not yet acknowledged).
    fn sockets(&self, io: &Io, cursor: u64) -> String {
        let mut ids: Vec<u32> = self.apps.keys().copied().collect();
        ids.sort_unstable();
        let mut list = Vec::new();
        let mut next = None;
        'apps: for id in ids.into_iter().filter(|&id| u64::from(id) >= cursor >> 32) {
            let a = &self.apps[&id];
            // The app's sleeping threads (armed waiters), looked up once.
            let armed = &a.r.up_header().armed;
            let sleeping: Vec<u32> = (0..layout::MAX_WAITERS as u32)
                .filter(|&w| armed[w as usize / 64].load(Ordering::Acquire) & 1 << (w % 64) != 0)
                .collect();
            let first = if u64::from(id) == cursor >> 32 {
                cursor as u32
            } else {
                0
            };
            for s in first..a.socks.len() as u32 {
                let sock = &a.socks[s as usize];
                if matches!(sock.kind, Kind::Free) || sock.spare {
                    continue;
                }
                if list.len() == Self::SOCKETS_PAGE {
                    next = Some(u64::from(id) << 32 | u64::from(s));
                    break 'apps;
                }
                let mut v = Self::socket_json(a, io, id, s, &sleeping);
                if let Some(q) = self.held.get(&(id, s)) {
                    // Completed, waiting for room in its accept ring or
                    // for a free slot (see `Service::held`).
                    v["accept_waiting"] = q.len().into();
                }
                list.push(v);
            }
        }
        serde_json::json!({"sockets": list, "next": next}).to_string()
    }

    fn socket_json(a: &AppState, io: &Io, id: u32, s: u32, sleeping: &[u32]) -> serde_json::Value {
        let (d, u) = (a.r.down_slot(s), a.r.up_slot(s));
        let sock = &a.socks[s as usize];
        let addr = |v: u64| {
            let (ip, port) = unpack(v);
            (v != 0).then(|| SocketAddrV4::new(Ipv4Addr::from(ip), port).to_string())
        };
        let flags = d.flags.load(Ordering::Acquire);
        let state = d.state.load(Ordering::Acquire);
        let local = d.local.load(Ordering::Relaxed);
        // A UDP socket: bound, or with a peer (connect), whose datagrams
        // alone it receives.
        let (name, remote) = match (sock.dgram, state) {
            (true, state::OPEN | state::ESTABLISHED) if sock.peer != 0 => ("connected", sock.peer),
            (true, state::OPEN) if local != 0 => ("bound", 0),
            (_, state::OPEN) => ("open", 0),
            (_, state::LISTEN) => ("listen", 0),
            (_, state::CONNECTING) => ("connecting", d.remote.load(Ordering::Relaxed)),
            (_, state::ESTABLISHED) => ("established", d.remote.load(Ordering::Relaxed)),
            _ => ("closed", d.remote.load(Ordering::Relaxed)),
        };
        let mut v = serde_json::json!({
            "app": id,
            "slot": s,
            "proto": if sock.dgram { "udp" } else { "tcp" },
            "state": name,
            "local": addr(local),
            "remote": addr(remote),
            // What the app has yet to read, and to have sent, in its rings
            // (an app-written index past the service's counts as none).
            "ring_unread": d.rx_tail.load(Ordering::Acquire)
                .saturating_sub(u.rx_head.load(Ordering::Relaxed)),
            "ring_unsent": u.tx_tail.load(Ordering::Relaxed)
                .saturating_sub(d.tx_head.load(Ordering::Acquire)),
            // Received bytes the ring had no room for, spilled out of the
            // packet buffers (`Service::spill`).
            "spilled": a.spill.get(&s).map_or(0, |sp| sp.left().len()),
            "refs": u.refs.load(Ordering::Relaxed),
            // The program marked it changed and the service has not
            // looked yet (its bit in the activity bitmap).
            "marked": a.r.bitmap_word(s / 64).load(Ordering::Relaxed) & 1 << (s % 64) != 0,
            "eof": flags & flag::EOF != 0,
            "error": if flags & flag::ERROR != 0 { d.err.load(Ordering::Relaxed) } else { 0 },
        });
        // Threads of the app asleep until this socket changes (armed
        // waiters whose interest names it; not those that want any
        // change). One still asleep a second later on a socket ready for
        // what it waits for is a wake-up lost.
        let (word, bit) = (s / 64, 1u64 << (s % 64));
        let sleepers = (sleeping.iter())
            .filter(|&&w| a.r.interest(w, word).load(Ordering::Relaxed) & bit != 0)
            .count();
        v["sleepers"] = sleepers.into();
        if state == state::LISTEN {
            v["accept_queue"] = d
                .acc_tail
                .load(Ordering::Acquire)
                .wrapping_sub(u.acc_head.load(Ordering::Relaxed))
                .min(a.r.acc_capacity())
                .into();
        }
        if let Kind::Conn(h) = sock.kind {
            if let Ok(t) = io.stack().tcp_info(h) {
                v["tcp"] = serde_json::json!({
                    "state": t.state.name(),
                    "readable": t.readable,
                    "unsent": t.unsent,
                    "unacked": t.unacked,
                    "snd_wnd": t.snd_wnd,
                    "rcv_wnd": t.rcv_wnd,
                    "cwnd": t.cwnd,
                    "mss": t.mss,
                    "srtt_us": t.srtt.as_micros() as u64,
                    "rto_ms": t.rto.as_millis() as u64,
                    "retransmits": t.retransmits,
                });
            }
        }
        v
    }

    fn ip(&self, io: &Io) -> u32 {
        u32::from(io.stack().config().ip)
    }

    fn attach(
        &mut self,
        io: &Io,
        conn: u64,
        pid: u32,
        uid: u32,
        prepared: Option<Box<PreparedApp>>,
    ) -> io::Result<Reply> {
        if self.closer.backed_up() {
            self.shared.give_back(prepared);
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        let id = self.next_app;
        if id >= 1 << 30 {
            // Ids name apps in the stack's cookies, beside listeners' and
            // UDP groups' (bits 63 and 62).
            self.shared.give_back(prepared);
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let l = self.layout;
        let p = match prepared {
            Some(p) => *p,
            None => PreparedApp::new(l)?,
        };
        let PreparedApp {
            down_fd,
            up_fd,
            down,
            up,
            key,
            socks,
            free,
            changed_bits,
            tx_bits,
            udp_held,
            waiters,
        } = p;
        // SAFETY: both mappings are owned by the AppState built below and
        // outlive every use of `r`, at the layout's lengths, page-aligned.
        let r = unsafe_regions(&down, &up, l);
        let h = r.down_header();
        h.version.store(layout::VERSION, Ordering::Relaxed);
        h.slots.store(l.slots, Ordering::Relaxed);
        h.ring.store(l.ring, Ordering::Relaxed);
        h.ip.store(self.ip(io), Ordering::Relaxed);
        h.svc_cpu
            .store(os::current_cpu().map_or(0, |c| c + 1), Ordering::Relaxed);
        h.prefix
            .store(io.stack().config().prefix_len as u32, Ordering::Relaxed);
        h.gateway.store(
            io.stack().config().gateway.map(u32::from).unwrap_or(0),
            Ordering::Relaxed,
        );
        h.app_id.store(id, Ordering::Relaxed);
        h.max_dgram
            .store(max_dgram(l.ring) as u32, Ordering::Relaxed);
        h.frame_dgram
            .store(frame_dgram(io) as u32, Ordering::Relaxed);
        h.ifindex.store(self.ifindex, Ordering::Relaxed);
        let tcp = &io.stack().config().tcp;
        h.tcp_rcvbuf.store(tcp.recv_buffer, Ordering::Relaxed);
        h.tcp_rcvbuf_max
            .store(tcp.recv_buffer_limit(), Ordering::Relaxed);
        h.tcp_sndbuf.store(tcp.send_buffer, Ordering::Relaxed);
        h.tcp_sndbuf_max
            .store(tcp.send_buffer_limit(), Ordering::Relaxed);
        h.join_key.store(key, Ordering::Relaxed);
        h.magic.store(layout::MAGIC_DOWN, Ordering::Release);
        r.up_header()
            .magic
            .store(layout::MAGIC_UP, Ordering::Release);
        // A doorbell of its own: an app that blocks or floods its doorbell
        // (the flag and counter are shared with whoever holds it) harms
        // only itself, never the core or other apps.
        let bell = os::eventfd(0)?;
        os::watch_edges(self.bells.as_fd(), bell.as_raw_fd(), u64::from(id))?;
        let app_bell = bell.try_clone()?;
        // Waiter 0, the attaching process's (row 0), made now: its first
        // sleep needs no WAITER round trip (~0.1 ms of a one-shot client's
        // first connect, which outlasts the spin).
        let (ring, wait) = os::wake_line()?;
        let mut waiters = waiters;
        waiters[0] = Some(ring);
        r.up_header().waiter_owner[0].store(layout::waiter_tag(0), Ordering::Release);
        let sent = vec![down_fd.try_clone()?, up_fd.try_clone()?, bell, wait];
        let app = AppState {
            _down: down,
            _up: up,
            memfds: [down_fd, up_fd],
            r,
            key,
            uid,
            // Row 0 of the holders table is the attaching process's.
            procs: HashMap::from([(conn, Proc { pid, row: 0 })]),
            bell: Some(app_bell),
            waiters,
            socks,
            free,
            last_activity: 0,
            dirty: false,
            changed_bits,
            tx_bits,
            claims: Vec::new(),
            rows: std::array::from_fn(|w| u64::from(w == 0)),
            udp_held,
            spill: HashMap::new(),
            gone_info: HashMap::new(),
            doomed: Vec::new(),
            full_said: None,
            wake_all: false,
            spares: [None; layout::SPARES],
            tx_left: TX_BUDGET,
            later: VecDeque::new(),
            later_bits: vec![0; l.slots as usize / 64],
        };
        self.apps.insert(id, app);
        if let Some(app) = self.apps.get_mut(&id) {
            app.refill_spares();
        }
        self.conn_app.insert(conn, id);
        self.next_app += 1;
        Ok(Reply {
            msg: Msg {
                op: op::REPLY,
                slot: 0,
                a: id as i64,
                b: l.slots as u64,
                c: l.ring as u64,
            },
            fds: sent,
            tail: Vec::new(),
        })
    }

    /// One process of a still-attached application went (exit, kill, or
    /// exec): drop the references its descriptors held, so a socket only
    /// it still held is closed (gracefully: what was written is sent).
    fn process_gone(&mut self, io: &mut Io, id: u32, row: u32) {
        self.free_waiters(id, row);
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        if row >= layout::MAX_PROCS {
            return;
        }
        app.rows[row as usize / 64] &= !(1 << (row % 64));
        let mut closing = Vec::new();
        for s in 0..app.r.layout().slots {
            let h = app.r.held(row, s).swap(0, Ordering::AcqRel) as u32;
            if h == 0 || app.socks[s as usize].kind == Kind::Free {
                continue;
            }
            let u = app.r.up_slot(s);
            // The app owns `refs`; a nonsense value only hurts its own
            // socket, which is closed.
            let prev = u
                .refs
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                    Some(r.saturating_sub(h))
                })
                .unwrap_or(0);
            if prev <= h {
                u.req.fetch_or(req::CLOSE, Ordering::Release);
                closing.push(s);
            }
        }
        for s in closing {
            self.activity(io, id, s);
        }
    }

    /// Give back the waiters of the process in holders-table row `row` of
    /// app `id`: it went, or its new image (`exec`) starts with none. Its
    /// threads could not: killed, or gone with the old image. Without this
    /// each such thread kept its index (256 per application) and we its
    /// wake-up line's descriptor.
    fn free_waiters(&mut self, id: u32, row: u32) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        if row >= layout::MAX_PROCS {
            return;
        }
        let tag = layout::waiter_tag(row);
        let h = app.r.up_header();
        let mut lines = Vec::new();
        for (idx, owner) in h.waiter_owner.iter().enumerate() {
            // Taken back only from that process: one of another process
            // has another tag, and a free one 0.
            if owner
                .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let (w, bit) = (idx / 64, 1u64 << (idx % 64));
            h.armed[w].fetch_and(!bit, Ordering::AcqRel);
            h.wants_any[w].fetch_and(!bit, Ordering::AcqRel);
            h.excl_any[w].fetch_and(!bit, Ordering::AcqRel);
            lines.extend(app.waiters[idx].take());
        }
        if !lines.is_empty() {
            self.closer.close(lines);
        }
    }

    /// Tear down an application: end its connections as Linux ends a
    /// process's sockets at its exit ([`Service::orphan`]), close its
    /// listeners.
    fn detach_app(&mut self, io: &mut Io, id: u32) {
        // What the app asked before it went (writes, lazy closes whose
        // doorbell it never rang) is carried out: closed sockets end
        // gracefully; the rest end below.
        // (Only the slots in use: one look per slot of the 4,096 took the
        // core ~0.15 ms per exiting process until 2026-11-30.)
        let live: Vec<u32> = match self.apps.get(&id) {
            Some(app) => (0..self.layout.slots)
                .filter(|&s| app.socks[s as usize].kind != Kind::Free)
                .collect(),
            None => return,
        };
        for &s in &live {
            self.activity(io, id, s);
        }
        let Some(mut app) = self.apps.remove(&id) else {
            return;
        };
        // (Reset after what they sent: this cycle's frames.)
        self.doomed.append(&mut app.doomed);
        // A process of it may live on holding the doorbell: no more
        // wake-ups from it.
        if let Some(b) = &app.bell {
            os::unwatch(self.bells.as_fd(), b.as_raw_fd());
        }
        let mut last: Vec<OwnedFd> = app.waiters.drain(..).flatten().collect();
        for s in live {
            let s = s as usize;
            match app.socks[s].kind {
                Kind::Conn(h) => self.orphan(io, &mut app, s as u32, h),
                Kind::Udp(h) if !app.socks[s].reuseport => {
                    let _ = io.udp_close(h);
                }
                Kind::Listen(p) => Self::unlisten(&mut self.listeners, io, p, (id, s as u32)),
                _ => {}
            }
            app.socks[s] = Sock::free();
        }
        last.extend(app.bell.take());
        self.conn_app.retain(|_, a| *a != id);
        // Its shared ports lose their members of it (a UDP group's socket
        // and a listener close with their last; a listener of it that
        // failed is still a member until this).
        let of_app = |m: &Vec<(u32, u32)>| m.iter().any(|m| m.0 == id);
        let udp: Vec<u16> = (self.udp_groups.iter())
            .filter_map(|(&p, g)| of_app(&g.members).then_some(p))
            .collect();
        let tcp: Vec<u16> = (self.listeners.iter())
            .filter_map(|(&p, l)| of_app(&l.members).then_some(p))
            .collect();
        for p in udp {
            self.prune_udp_group(io, p);
        }
        for p in tcp {
            self.prune_listener(io, p);
        }
        self.closer.close(last);
        self.closer.retire(app);
    }

    fn control(&mut self, io: &mut Io, r: Request) {
        let Request {
            conn,
            pid,
            uid,
            may_bind_low,
            msg,
            reply,
            prepared,
        } = r;
        self.may_bind_low = may_bind_low;
        let rep = match msg.op {
            // One application per control connection: a second ATTACH
            // would orphan the first app, which then outlived the
            // connection.
            op::ATTACH if self.conn_app.contains_key(&conn) => Reply {
                msg: Msg::reply(-i64::from(libc::EISCONN)),
                fds: Vec::new(),
                tail: Vec::new(),
            },
            op::ATTACH => match self.attach(io, conn, pid, uid, prepared) {
                Ok(rep) => rep,
                Err(e) => Reply {
                    msg: Msg::reply(-(e.raw_os_error().unwrap_or(libc::ENOMEM) as i64)),
                    fds: Vec::new(),
                    tail: Vec::new(),
                },
            },
            op::STATS => Reply {
                msg: Msg::reply(0),
                fds: Vec::new(),
                tail: self.stats(io).into_bytes(),
            },
            op::SOCKETS => Reply {
                msg: Msg::reply(0),
                fds: Vec::new(),
                tail: self.sockets(io, msg.b).into_bytes(),
            },
            DETACH => {
                if let Some(id) = self.conn_app.remove(&conn) {
                    let Some(a) = self.apps.get_mut(&id) else {
                        return;
                    };
                    let gone = a.procs.remove(&conn);
                    if a.procs.is_empty() {
                        self.detach_app(io, id);
                    } else if let Some(p) = gone {
                        self.process_gone(io, id, p.row);
                    }
                }
                return;
            }
            _ => {
                let (mut out, mut tail) = (Vec::new(), Vec::new());
                let res = self.app_request(io, conn, pid, msg, &mut out, &mut tail);
                Reply {
                    msg: res,
                    fds: out,
                    tail,
                }
            }
        };
        if let Some(tx) = reply {
            let _ = tx.try_send(rep);
        }
    }

    fn app_request(
        &mut self,
        io: &mut Io,
        conn: u64,
        pid: u32,
        msg: Msg,
        out: &mut Vec<OwnedFd>,
        tail: &mut Vec<u8>,
    ) -> Msg {
        let bad = |e: i32| Msg::reply(-(e as i64));
        if msg.op == op::SOCKET && msg.c != 0 {
            // A socket and its bind or connect in one round trip (see
            // `op::SOCKET`).
            let then = msg.c as u32;
            if then != op::BIND && then != op::CONNECT {
                return bad(libc::EINVAL);
            }
            let r = self.app_request(io, conn, pid, Msg::new(op::SOCKET, 0, msg.a, 0), out, tail);
            if r.a < 0 {
                return r;
            }
            let s = r.a as u32;
            let t = self.app_request(
                io,
                conn,
                pid,
                Msg::new(then, s, msg.b as i64, msg.c >> 32),
                out,
                tail,
            );
            if t.a < 0 {
                // No process holds it yet, and it is still just made.
                if let Some(app) = self
                    .conn_app
                    .get(&conn)
                    .and_then(|id| self.apps.get_mut(id))
                {
                    app.release(s);
                }
                return t;
            }
            return Msg { c: t.b, ..r };
        }
        if msg.op == op::JOIN {
            let id = msg.a as u32;
            let Some(app) = self.apps.get_mut(&id) else {
                return bad(libc::ENOENT);
            };
            // Only a process of the app knows its key (it is in the app's
            // down region): no other local process may join the app and
            // then act on its sockets.
            if msg.b != app.key {
                return bad(libc::EPERM);
            }
            if self.conn_app.contains_key(&conn) {
                return bad(libc::EISCONN);
            }
            let row = app.take_row();
            // The parent opened this connection for its child: the pid
            // is the parent's until the child says HELLO.
            app.procs.insert(conn, Proc { pid, row });
            self.conn_app.insert(conn, id);
            return Msg {
                slot: row,
                ..Msg::reply(0)
            };
        }
        let Some(&id) = self.conn_app.get(&conn) else {
            return bad(libc::ENOTCONN);
        };
        if matches!(msg.op, op::BIND | op::LISTEN) {
            // What the program did before it asked comes first: a server
            // that closes its listener and at once binds a new one to
            // the port (iperf3 after each test) found the port still
            // taken by the old one, whose close waited in the bitmap for
            // the cycle's scan (EADDRINUSE; iperf3 exited).
            let mut marked = std::mem::take(&mut self.marked);
            self.scan_app(io, id, &mut marked);
            self.marked = marked;
        }
        let ip = self.ip(io);
        let slots = self.layout.slots;
        // A TCP bind's port (port 0: a free one) and whether it is taken
        // (by any app: ports are the service's), before `app` is borrowed.
        let tcp_bind = msg.op == op::BIND
            && self
                .apps
                .get(&id)
                .and_then(|a| a.socks.get(msg.slot as usize))
                .is_some_and(|s| !s.dgram);
        // Members that went no longer hold the port.
        if msg.op == op::BIND && !tcp_bind {
            self.prune_udp_group(io, layout::unpack(msg.a as u64).1);
        }
        if tcp_bind {
            self.prune_listener(io, layout::unpack(msg.a as u64).1);
        }
        if msg.op == op::LISTEN {
            let bound = self
                .apps
                .get(&id)
                .and_then(|a| a.socks.get(msg.slot as usize));
            if let Some(&Sock {
                kind: Kind::Bound(p),
                ..
            }) = bound
            {
                self.prune_listener(io, p);
            }
        }
        if msg.op == op::BIND {
            // A port below the unprivileged range only for a process with
            // CAP_NET_BIND_SERVICE, as Linux: the control socket may admit
            // other users than the service's (--socket-mode), and the
            // service's own privilege must not become theirs.
            let port = layout::unpack(msg.a as u64).1;
            if port != 0 && port < self.unprivileged_ports && !self.may_bind_low {
                self.bind_denied += 1;
                return bad(libc::EACCES);
            }
        }
        if msg.op == op::BIND && msg.b & 1 != 0 && slot_is_dgram(self.apps.get(&id), msg.slot) {
            self.share_udp_port(io, id, layout::unpack(msg.a as u64).1);
        }
        let (bind_port, port_taken) = match layout::unpack(msg.a as u64).1 {
            _ if !tcp_bind => (0, false),
            0 => self.free_tcp_port(io).map_or((0, true), |p| (p, false)),
            p => (p, self.port_taken(id, p, msg.b & 1 != 0, msg.b & 2 != 0)),
        };
        match msg.op {
            // The control thread could not read the file's inode (its
            // errno in `b`).
            op::PASS | op::CLAIM if msg.c == 0 => {
                return bad(if msg.b == 0 {
                    libc::EBADF
                } else {
                    msg.b as i32
                })
            }
            op::PASS => return self.pass(io, id, msg),
            op::CLAIM => return self.claim(io, id, msg),
            op::CANCEL => return self.cancel(io, id, msg),
            _ => {}
        }
        if msg.op == op::REMAP {
            // A new image (`exec`): the old one's threads are gone.
            if let Some(row) = self.apps[&id].procs.get(&conn).map(|p| p.row) {
                self.free_waiters(id, row);
            }
        }
        let app = self.apps.get_mut(&id).expect("conn_app names live apps");
        let slot = msg.slot;
        let valid = slot < slots;
        match msg.op {
            op::REMAP => {
                // The regions are sealed as at attach (the down one against
                // writable mappings): mapping them again grants nothing new.
                let fds: io::Result<Vec<OwnedFd>> = (app.memfds.iter())
                    .chain(app.bell.as_ref())
                    .map(|f| f.try_clone())
                    .collect();
                match fds {
                    Ok(fds) => {
                        out.extend(fds);
                        Msg {
                            op: op::REPLY,
                            slot: 0,
                            a: i64::from(id),
                            b: u64::from(slots),
                            c: u64::from(self.layout.ring),
                        }
                    }
                    Err(e) => bad(e.raw_os_error().unwrap_or(libc::ENOMEM)),
                }
            }
            op::HELLO => {
                if let Some(p) = app.procs.get_mut(&conn) {
                    p.pid = u32::try_from(msg.a).unwrap_or(0);
                }
                Msg::reply(0)
            }
            op::WAITER => {
                // The app gets the wait end of a line whose ring end only
                // we hold: it cannot make our rings block (a descriptor
                // it sent, as an older protocol did, is ignored).
                let w = slot as usize;
                if w >= layout::MAX_WAITERS {
                    return bad(libc::EINVAL);
                }
                // The index must be the asking process's (it takes it in
                // the up header first). One it gave up on — its wait for
                // this reply failed, and it let the index go — may be
                // another's by now: replacing that one's ring end would
                // close it, and its thread would sleep for ever (vsftpd's
                // sessions, whose pre-login process cannot poll: until
                // 2026-11-28).
                let row = app.procs.get(&conn).map_or(layout::NO_ROW, |p| p.row);
                let owner = app.r.up_header().waiter_owner[w].load(Ordering::Acquire);
                if owner != layout::waiter_tag(row) {
                    return bad(libc::EBUSY);
                }
                if self.closer.backed_up() {
                    return bad(libc::EAGAIN);
                }
                match os::wake_line() {
                    Ok((ring, wait)) => {
                        if let Some(old) = app.waiters[w].replace(ring) {
                            self.closer.close(vec![old]);
                        }
                        out.push(wait);
                        Msg::reply(0)
                    }
                    Err(e) => bad(e.raw_os_error().unwrap_or(libc::ENOMEM)),
                }
            }
            op::SOCKET if !matches!(msg.a, 0 | 1) => bad(libc::EPROTONOSUPPORT),
            op::SOCKET => match app.alloc() {
                Some(s) => {
                    app.socks[s as usize].dgram = msg.a == 1;
                    app.slot_reply(s)
                }
                None => {
                    app.say_full(id, "a new socket got EMFILE");
                    bad(libc::EMFILE)
                }
            },
            op::BIND if valid && app.socks[slot as usize].dgram => {
                let (aip, port) = layout::unpack(msg.a as u64);
                if app.socks[slot as usize].kind != Kind::Open {
                    return bad(libc::EINVAL);
                }
                if aip != 0 && aip != ip {
                    return bad(libc::EADDRNOTAVAIL);
                }
                app.socks[slot as usize].specific = aip != 0;
                if msg.b & 1 != 0 && port != 0 {
                    // SO_REUSEPORT (or for UDP SO_REUSEADDR, which the
                    // shim sends as the same flag): join the port's group,
                    // or start one.
                    let h = match self.udp_groups.get_mut(&port) {
                        Some(g) if app.uid == g.uid && app.uid != u32::MAX => {
                            if !g.members.contains(&(id, slot)) {
                                g.members.push((id, slot));
                            }
                            g.h
                        }
                        Some(_) => return bad(libc::EADDRINUSE),
                        None => match io.udp_bind(port, udp_group_cookie(port)) {
                            Ok(h) => {
                                self.udp_groups.insert(
                                    port,
                                    UdpGroup {
                                        h,
                                        members: vec![(id, slot)],
                                        uid: app.uid,
                                    },
                                );
                                h
                            }
                            Err(e) => return Msg::reply(errno_of(e)),
                        },
                    };
                    app.socks[slot as usize].kind = Kind::Udp(h);
                    app.socks[slot as usize].reuseport = true;
                    app.r
                        .down_slot(slot)
                        .local
                        .store(pack(ip, port), Ordering::Release);
                    return Msg {
                        b: u64::from(port),
                        ..Msg::reply(0)
                    };
                }
                match Self::udp_bind(app, io, id, slot, port, ip) {
                    Ok(p) => {
                        // (Bound to Ixora's address, Linux keeps the
                        // address at a disconnect and gives the port up;
                        // here it keeps both: see ARCHITECTURE.)
                        app.socks[slot as usize].auto_port = port == 0 && aip == 0;
                        Msg {
                            b: u64::from(p),
                            ..Msg::reply(0)
                        }
                    }
                    Err(e) => Msg::reply(errno_of(e)),
                }
            }
            op::LISTEN if valid && app.socks[slot as usize].dgram => bad(libc::EOPNOTSUPP),
            op::CONNECT if valid && app.socks[slot as usize].dgram => {
                if app.socks[slot as usize].kind == Kind::Open {
                    if let Err(e) = Self::udp_bind(app, io, id, slot, 0, ip) {
                        return Msg::reply(errno_of(e));
                    }
                    app.socks[slot as usize].auto_port = true;
                }
                if !matches!(app.socks[slot as usize].kind, Kind::Udp(_)) {
                    return bad(libc::EINVAL);
                }
                let peer = msg.a as u64;
                let (dip, dport) = layout::unpack(peer);
                if peer != 0 && (dip == 0 || dport == 0) {
                    return bad(libc::EINVAL);
                }
                app.socks[slot as usize].peer = peer;
                let d = app.r.down_slot(slot);
                d.remote.store(peer, Ordering::Relaxed);
                d.state.store(
                    if peer == 0 {
                        state::OPEN
                    } else {
                        state::ESTABLISHED
                    },
                    Ordering::Release,
                );
                // Disconnected (the shim asks with bit 0 of `b`): a port
                // we picked is given up, as Linux's `__udp_disconnect`
                // unhashes a socket bound without SOCK_BINDPORT_LOCK.
                let released = peer == 0
                    && msg.b & 1 != 0
                    && app.socks[slot as usize].auto_port
                    && Self::udp_unbind(app, io, slot, ip);
                app.changed(slot);
                Msg {
                    b: u64::from(released),
                    ..Msg::reply(0)
                }
            }
            op::BIND if valid => {
                let (aip, port) = layout::unpack(msg.a as u64);
                if app.socks[slot as usize].kind != Kind::Open {
                    return bad(libc::EINVAL);
                }
                if aip != 0 && aip != ip {
                    return bad(libc::EADDRNOTAVAIL);
                }
                debug_assert!(port == 0 || port == bind_port);
                let port = bind_port;
                if port_taken {
                    // (Port 0: no free port left, as Linux says it.)
                    return bad(libc::EADDRINUSE);
                }
                let sk = &mut app.socks[slot as usize];
                sk.kind = Kind::Bound(port);
                sk.specific = aip != 0;
                sk.reuseport = msg.b & 1 != 0;
                sk.reuseaddr = msg.b & 2 != 0;
                sk.auto_port = layout::unpack(msg.a as u64).1 == 0;
                app.r
                    .down_slot(slot)
                    .local
                    .store(pack(ip, port), Ordering::Release);
                Msg {
                    b: u64::from(port),
                    ..Msg::reply(0)
                }
            }
            op::LISTEN if valid => {
                // (A negative backlog is the most, as Linux reads it.)
                let asked = if msg.a < 0 { 65535 } else { msg.a.min(65535) } as u32;
                let port = match app.socks[slot as usize].kind {
                    Kind::Bound(p) => p,
                    Kind::Listen(_) => {
                        // Listening again changes the backlog, as Linux.
                        app.set_backlog(slot, asked);
                        return Msg::reply(0);
                    }
                    _ => return bad(libc::EINVAL),
                };
                app.set_backlog(slot, asked);
                let backlog = asked.max(1);
                Self::take_opts(app, io, slot);
                let reuseport = app.socks[slot as usize].reuseport;
                match self.listeners.get_mut(&port) {
                    // SO_REUSEPORT: one more socket on the stack's
                    // listener (its backlog stays the first one's; each
                    // socket's accept queue is its own).
                    Some(l) if l.admits(reuseport, app.uid) => l.members.push((id, slot)),
                    Some(_) => return bad(libc::EADDRINUSE),
                    None => {
                        if let Err(e) = io.listen(port, Some(backlog), listener_cookie(port)) {
                            return Msg::reply(errno_of(e));
                        }
                        self.listeners.insert(
                            port,
                            Listener {
                                members: vec![(id, slot)],
                                reuseport,
                                uid: app.uid,
                                epoch: {
                                    self.next_epoch += 1;
                                    self.next_epoch
                                },
                            },
                        );
                    }
                }
                app.socks[slot as usize].kind = Kind::Listen(port);
                let bufs = app.socks[slot as usize].bufs;
                if bufs != 0 {
                    // SO_RCVBUF/SO_SNDBUF set before listen (with
                    // SO_REUSEPORT, the last listening socket's).
                    let (rcv, snd) = layout::unpack_bufs(bufs);
                    let _ = io.listener_lock_buffers(port, rcv, snd);
                }
                let defer = app.socks[slot as usize].defer;
                if defer != 0 {
                    // TCP_DEFER_ACCEPT set before listen (the last
                    // listening socket's, as the buffers).
                    let _ = io.listener_defer_accept(port, layout::defer_secs(defer));
                }
                let ip = app.socks[slot as usize].ip;
                if ip != IpOpts::default() {
                    // IP_TOS and IP_TTL set before listen (as above).
                    let _ = io.listener_ip_opts(port, ip);
                }
                app.r
                    .down_slot(slot)
                    .state
                    .store(state::LISTEN, Ordering::Release);
                app.changed(slot);
                Msg::reply(0)
            }
            op::INFO if valid => {
                let info = match app.socks[slot as usize].kind {
                    Kind::Conn(h) => io.stack().tcp_info(h).ok().map(|t| {
                        // What the program wrote is not sent while it is
                        // still in the transmit ring too (an impossible
                        // tail counts as none; the ring's next look
                        // resets the socket).
                        let tail = app.r.up_slot(slot).tx_tail.load(Ordering::Acquire);
                        let sent = app.socks[slot as usize].sent;
                        let ring = tail
                            .checked_sub(sent)
                            .filter(|&n| n <= u64::from(app.r.layout().ring))
                            .unwrap_or(0);
                        let mut w = wire_info(&t);
                        w.notsent = w.notsent.saturating_add(ring as u32);
                        w
                    }),
                    Kind::Gone => app.gone_info.get(&slot).copied(),
                    _ => None,
                };
                match info {
                    Some(t) => {
                        tail.extend_from_slice(&t.encode());
                        Msg::reply(0)
                    }
                    None => bad(libc::ENOTCONN),
                }
            }
            op::CONNECT
                if valid
                    && app.socks[slot as usize].kind == Kind::Gone
                    && !self.moved.contains_key(&(
                        id,
                        slot,
                        app.r.down_slot(slot).gen.load(Ordering::Relaxed),
                    )) =>
            {
                // A connect after the program was told its connection
                // failed (the shim asks only then): a new connection.
                Self::unconnect(app, slot);
                match Self::tcp_connect(app, io, id, slot, msg.a as u64) {
                    Ok(()) => Msg::reply(0),
                    Err(e) => {
                        // Failed at once: not connected, as before.
                        Msg::reply(e)
                    }
                }
            }
            op::CONNECT if valid => match Self::tcp_connect(app, io, id, slot, msg.a as u64) {
                Ok(()) => Msg::reply(0),
                Err(e) => Msg::reply(e),
            },
            _ => bad(libc::EINVAL),
        }
    }

    /// `PASS` of socket `msg.slot` of app `id` (generation in `msg.b`'s
    /// low half, the descriptor's O_NONBLOCK in bit 32; the file's inode
    /// in `msg.c`, read by the control thread).
    fn pass(&mut self, io: &mut Io, id: u32, msg: Msg) -> Msg {
        let bad = |e: i32| Msg::reply(-(e as i64));
        let s = msg.slot;
        if s >= self.layout.slots {
            return bad(libc::EBADF);
        }
        let Some(app) = self.apps.get_mut(&id) else {
            return bad(libc::ENOTCONN);
        };
        // What waits is bounded (a connection holds up to two rings of
        // bytes until claimed or reset), per user — an application that
        // detaches and attaches again is the same user — and in all.
        let uid = app.uid;
        let ring = self.layout.ring as usize;
        if self.passes.values().filter(|p| p.uid == uid).count() >= self.layout.slots as usize
            || self.pass_bytes + 2 * ring > MAX_PASS_BYTES
        {
            return bad(libc::EAGAIN);
        }
        let gen = msg.b as u32;
        if app.r.down_slot(s).gen.load(Ordering::Relaxed) != gen {
            return bad(libc::EBADF);
        }
        let sock = app.socks[s as usize];
        let what = match sock.kind {
            Kind::Listen(_) => Passed::Held { slot: s, gen },
            Kind::Bound(_) if !sock.dgram => Passed::Held { slot: s, gen },
            Kind::Udp(_) => Passed::Held { slot: s, gen },
            Kind::Gone if self.moved.contains_key(&(id, s, gen)) => {
                Passed::Join(self.moved[&(id, s, gen)])
            }
            Kind::Conn(_) => match Self::take_out(app, io, s) {
                Some(c) => Passed::Conn(c),
                None => return bad(libc::ENOTCONN),
            },
            _ if sock.dgram => return bad(libc::EOPNOTSUPP),
            _ => return bad(libc::ENOTCONN),
        };
        let k = self.next_pass;
        self.next_pass = k.wrapping_add(1);
        if let Passed::Conn(c) = &what {
            self.pass_bytes += c.rx.len() + c.tx.len();
            let _ = io.set_cookie(c.h, pass_cookie(k));
            // The sender's descriptor carries nothing now.
            app.fail(s, libc::ECONNABORTED);
        }
        self.passes.insert(
            k,
            Pass {
                ino: msg.c,
                from: id,
                uid,
                nonblock: msg.b >> 32 & 1 != 0,
                bound_any: msg.b >> 33 & 1 != 0,
                since: Instant::now(),
                what,
            },
        );
        self.pass_counts.passed += 1;
        Msg::reply(0)
    }

    /// `CLAIM` by app `id` of the socket passed with the file whose inode
    /// is `msg.c`: its new slot and generation, and in `c` bit 0 whether
    /// it listens, bit 1 the sender's O_NONBLOCK, bit 2 whether its sender
    /// had it bound to any address (PASS's `b` bit 33).
    fn claim(&mut self, io: &mut Io, id: u32, msg: Msg) -> Msg {
        let bad = |e: i32| Msg::reply(-(e as i64));
        // The oldest passed with that file: one file may carry several, in
        // order, over a stream socket.
        let Some(k) = (self.passes.iter())
            .filter_map(|(&k, p)| (p.ino == msg.c).then_some(k))
            .min_by_key(|&k| k.wrapping_sub(self.next_pass))
        else {
            return bad(libc::ENOENT);
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return bad(libc::ENOTCONN);
        };
        if app.free.is_empty() {
            app.say_full(id, "a socket another process handed over stays unclaimed");
            return bad(libc::EMFILE);
        }
        let p = self.take_pass(k);
        let (s, listens) = match p.what {
            Passed::Conn(c) => {
                let app = self.apps.get_mut(&id).expect("looked up above");
                let s = app.alloc().expect("a free slot (checked)");
                Self::take_in(app, io, id, s, c);
                (s, false)
            }
            Passed::Held { slot, gen } => match self.move_held(io, p.from, slot, gen, id) {
                Some(x) => x,
                None => return bad(libc::ENOENT),
            },
            Passed::Join(m) => match self.join_moved(m, id) {
                Some(s) => (s, matches!(m.sock.kind, Kind::Listen(_))),
                None => return bad(libc::ENOENT),
            },
        };
        self.pass_counts.claimed += 1;
        let app = self.apps.get(&id).expect("looked up above");
        Msg {
            c: u64::from(listens) | u64::from(p.nonblock) << 1 | u64::from(p.bound_any) << 2,
            ..app.slot_reply(s)
        }
    }

    /// Move listener `slot` (generation `gen`) of app `from` to app `to`
    /// (which has a free slot), with the connections in its accept queue,
    /// or the bound socket there: its slot in `to` and whether it listens;
    /// None if it is neither any more. The sender's socket fails
    /// (`EINVAL`, as `accept` or `listen` on a socket that does not listen
    /// or is not bound) and the connections it had queued leave it
    /// unaccepted (their generations move on: an `accept` racing in the
    /// sender skips them).
    fn move_held(
        &mut self,
        io: &mut Io,
        from: u32,
        slot: u32,
        gen: u32,
        to: u32,
    ) -> Option<(u32, bool)> {
        let a = self.apps.get_mut(&from)?;
        if matches!(a.socks[slot as usize].kind, Kind::Udp(_)) {
            return self.move_udp(io, from, slot, gen, to).map(|s| (s, false));
        }
        let (port, listens) = match a.socks[slot as usize].kind {
            Kind::Listen(port) => (port, true),
            Kind::Bound(port) if !a.socks[slot as usize].dgram => (port, false),
            _ => return None,
        };
        if a.r.down_slot(slot).gen.load(Ordering::Relaxed) != gen {
            return None;
        }
        let mut lsock = a.socks[slot as usize];
        // A bound socket passed to several processes becomes one socket
        // bound in each: they share the port, as one file shared does.
        lsock.reuseport |= !listens;
        let local = a.r.down_slot(slot).local.load(Ordering::Relaxed);
        let queued = if listens {
            Self::take_queue(a, io, slot, lsock.acc_tail)
        } else {
            Vec::new()
        };
        a.fail(slot, libc::EINVAL);
        if a.r.up_slot(slot).req.load(Ordering::Acquire) & (req::CLOSE | req::ABORT) != 0 {
            a.release(slot); // its sender closed it while it waited
        }
        let b = self.apps.get_mut(&to).expect("the claimant's app");
        let s = b.alloc_like(lsock, local).expect("a free slot (checked)");
        for cp in queued {
            let Some(c) = b.alloc() else {
                if cp.err.is_none() {
                    let _ = io.abort(cp.h);
                }
                self.rejected += 1;
                continue;
            };
            Self::take_in(b, io, to, c, cp);
            let cgen = b.r.down_slot(c).gen.load(Ordering::Relaxed);
            let tail = b.socks[s as usize].acc_tail;
            b.r.acc_entry(s, tail)
                .store(c as u64 | (cgen as u64) << 32, Ordering::Release);
            b.socks[s as usize].acc_tail = tail.wrapping_add(1);
            b.r.down_slot(s)
                .acc_tail
                .store(tail.wrapping_add(1), Ordering::Release);
        }
        b.changed(s);
        // The port's group: the receiver's socket in the sender's place.
        if let Some(l) = self.listeners.get_mut(&port) {
            for m in l.members.iter_mut().filter(|m| **m == (from, slot)) {
                *m = (to, s);
            }
        }
        // The same listener passed to other processes too, or passed again
        // later by its sender: they join.
        let epoch = self.listeners.get(&port).map_or(0, |l| l.epoch);
        let m = Moved {
            port,
            epoch,
            sock: lsock,
            local,
        };
        self.note_moved((from, slot, gen), m);
        Some((s, listens))
    }

    /// Move UDP socket `slot` (generation `gen`) of app `from` to app `to`
    /// (which has a free slot): what the sender wrote is sent first; the
    /// datagrams it had not read go with it. It moves into its port's
    /// group ([`UdpGroup`], made now for a socket that had a port of its
    /// own), so that the other processes it was passed to join it there
    /// (Node.js's cluster hands every worker the primary's UDP socket).
    /// Its new slot in `to`; None if it is no longer a UDP socket.
    fn move_udp(&mut self, io: &mut Io, from: u32, slot: u32, gen: u32, to: u32) -> Option<u32> {
        let a = self.apps.get_mut(&from)?;
        let Kind::Udp(h) = a.socks[slot as usize].kind else {
            return None;
        };
        if a.r.down_slot(slot).gen.load(Ordering::Relaxed) != gen {
            return None;
        }
        let _ = Self::pump_udp_tx(a, io, slot);
        if a.socks[slot as usize].kind != Kind::Udp(h) {
            return None; // its sender closed it meanwhile
        }
        let sock = a.socks[slot as usize];
        let local = a.r.down_slot(slot).local.load(Ordering::Relaxed);
        // Unread datagrams: the ring's bytes (whole records, as written),
        // then the one held for a full ring.
        let head = a.r.up_slot(slot).rx_head.load(Ordering::Acquire);
        let n = sock.rx_tail.wrapping_sub(head);
        let n = if n <= a.r.layout().ring as u64 {
            n as usize
        } else {
            0
        };
        let mut unread = vec![0; n];
        a.r.rx_read(slot, head, &mut unread);
        let held = a.udp_held[slot as usize].take();
        a.fail(slot, libc::EINVAL);
        if a.r.up_slot(slot).req.load(Ordering::Acquire) & (req::CLOSE | req::ABORT) != 0 {
            a.release(slot); // its sender closed it while it waited
        }
        let port = h.port();
        let (group, queued) = match self.udp_groups.get_mut(&port) {
            Some(g) if g.h == h => {
                g.members.retain(|&m| m != (from, slot));
                (h, Vec::new())
            }
            _ => {
                // A socket with a port of its own: the group's stack socket
                // takes its place, with what waited in the old one's queue
                // (nothing arrives meanwhile: this is the core's turn).
                let mut queued = Vec::new();
                while let Ok(Some(d)) = io.udp_recv(h) {
                    queued.push(d);
                }
                let _ = io.udp_close(h);
                let g = io.udp_bind(port, udp_group_cookie(port)).ok()?;
                let uid = self.apps.get(&to)?.uid;
                let members = Vec::new();
                (self.udp_groups).insert(port, UdpGroup { h: g, members, uid });
                (g, queued)
            }
        };
        let b = self.apps.get_mut(&to)?;
        let t = Self::alloc_udp(b, group, sock, local, &unread)?;
        b.udp_held[t as usize] = held;
        Self::fill_udp(b, io, t, None);
        for d in queued {
            // (Into the ring while they fit; then one is held and the rest
            // dropped, as a full socket buffer drops.)
            if b.udp_held[t as usize].is_none() {
                b.udp_held[t as usize] = Some(d);
                Self::fill_udp(b, io, t, None);
            }
        }
        self.udp_groups.get_mut(&port)?.members.push((to, t));
        let sock = Sock {
            kind: Kind::Udp(group),
            ..sock
        };
        let m = Moved {
            port,
            epoch: 0,
            sock,
            local,
        };
        self.note_moved((from, slot, gen), m);
        Some(t)
    }

    /// A UDP socket of `app` (which has a free slot) on group socket `g`,
    /// with the options of `like`, at packed address `local`, holding
    /// the datagram records `unread` to read.
    fn alloc_udp(
        app: &mut AppState,
        g: UdpHandle,
        like: Sock,
        local: u64,
        unread: &[u8],
    ) -> Option<u32> {
        let t = app.alloc()?;
        app.r.rx_write(t, 0, unread);
        app.socks[t as usize] = Sock {
            kind: Kind::Udp(g),
            reuseport: true,
            rx_tail: unread.len() as u64,
            sent: 0,
            acc_tail: 0,
            ..like
        };
        let d = app.r.down_slot(t);
        d.local.store(local, Ordering::Relaxed);
        d.remote.store(like.peer, Ordering::Relaxed);
        d.rx_tail.store(unread.len() as u64, Ordering::Release);
        if like.peer != 0 {
            d.state.store(state::ESTABLISHED, Ordering::Release);
        }
        app.changed(t);
        Some(t)
    }

    /// Remember where held socket `(app, slot, generation)` went (`m`),
    /// for the other processes it was passed to, or its sender passing it
    /// again: their waiting passes of it become joins. (Entries whose
    /// sender's socket is gone are dropped first.)
    fn note_moved(&mut self, (from, slot, gen): (u32, u32, u32), m: Moved) {
        let apps = &self.apps;
        self.moved.retain(|&(id, s, g), _| {
            apps.get(&id).is_some_and(|a| {
                a.socks[s as usize].kind == Kind::Gone
                    && a.r.down_slot(s).gen.load(Ordering::Relaxed) == g
            })
        });
        self.moved.insert((from, slot, gen), m);
        for p in self.passes.values_mut().filter(|p| p.from == from) {
            if matches!(p.what, Passed::Held { slot: x, gen: y } if x == slot && y == gen) {
                p.what = Passed::Join(m);
            }
        }
    }

    /// A UDP socket of app `to` (which has a free slot) in the group a UDP
    /// socket moved to (see [`Service::move_udp`]); None if that group is
    /// gone.
    fn join_udp(&mut self, m: Moved, to: u32) -> Option<u32> {
        let g = self.udp_groups.get(&m.port).map(|g| g.h)?;
        if m.sock.kind != Kind::Udp(g) {
            return None; // closed, or another group there now
        }
        let b = self.apps.get_mut(&to)?;
        let t = Self::alloc_udp(b, g, m.sock, m.local, &[])?;
        self.udp_groups.get_mut(&m.port)?.members.push((to, t));
        Some(t)
    }

    /// The connections waiting in the accept queue of listener `slot` of
    /// `app` (its tail at `tail`), taken out of it. They are taken the way
    /// the program's `accept` takes one: by moving its head (to the tail,
    /// all at once), so an entry is either the program's, accepted, or
    /// ours — never both. (Bounded: the head is the app's to write.)
    fn take_queue(app: &mut AppState, io: &mut Io, slot: u32, tail: u32) -> Vec<ConnPass> {
        let up = app.r.up_slot(slot);
        let mut head = up.acc_head.load(Ordering::Acquire);
        for _ in 0..64 {
            match up
                .acc_head
                .compare_exchange(head, tail, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        if up.acc_head.load(Ordering::Acquire) != tail {
            return Vec::new();
        }
        let slots = app.r.layout().slots;
        let mut queued = Vec::new();
        for k in 0..tail.wrapping_sub(head).min(app.r.acc_capacity()) {
            let e = (app.r.acc_entry(slot, head.wrapping_add(k))).load(Ordering::Acquire);
            let (c, cgen) = (e as u32, (e >> 32) as u32);
            if c < slots && app.r.down_slot(c).gen.load(Ordering::Acquire) == cgen {
                queued.extend(Self::take_out(app, io, c));
                app.release(c);
            }
        }
        queued
    }

    /// A socket of app `to` (which has a free slot) listening beside the
    /// members of the group a listener moved to (see [`Passed::Join`]),
    /// or bound beside the bound socket that moved, with its options;
    /// None if that group is gone (or the port another's).
    fn join_moved(&mut self, m: Moved, to: u32) -> Option<u32> {
        match m.sock.kind {
            Kind::Udp(_) => return self.join_udp(m, to),
            Kind::Bound(_) => {
                if self.port_taken(to, m.port, true, m.sock.reuseaddr) {
                    return None;
                }
                let b = self.apps.get_mut(&to)?;
                let s = b.alloc_like(m.sock, m.local)?;
                b.changed(s);
                return Some(s);
            }
            _ => {}
        }
        if self.listeners.get(&m.port).map(|l| l.epoch) != Some(m.epoch) {
            return None; // closed, or another group there now
        }
        let b = self.apps.get_mut(&to)?;
        let s = b.alloc_like(m.sock, m.local)?;
        b.changed(s);
        self.listeners.get_mut(&m.port)?.members.push((to, s));
        Some(s)
    }

    /// `CANCEL` by app `id` of its newest pass of socket `msg.slot`
    /// (generation `msg.b`): the message that was to carry it did not go.
    /// A connection goes back into its slot, as it was (its descriptor and
    /// the epoll sets that watch it are unchanged); a listener, which had
    /// not moved, simply stays.
    fn cancel(&mut self, io: &mut Io, id: u32, msg: Msg) -> Msg {
        let (s, gen) = (msg.slot, msg.b as u32);
        let mine = |p: &Pass| {
            p.from == id
                && match &p.what {
                    Passed::Conn(c) => c.slot == s && c.gen == gen,
                    Passed::Held { slot, gen: g } => *slot == s && *g == gen,
                    Passed::Join(_) => false,
                }
        };
        let Some(k) = (self.passes.iter())
            .filter_map(|(&k, p)| mine(p).then_some(k))
            .max_by_key(|&k| k.wrapping_sub(self.next_pass))
        else {
            return Msg::reply(-i64::from(libc::ENOENT));
        };
        let p = self.take_pass(k);
        self.pass_counts.passed -= 1;
        let Passed::Conn(c) = p.what else {
            return Msg::reply(0);
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return Msg::reply(-i64::from(libc::ENOTCONN));
        };
        let d = app.r.down_slot(s);
        if app.socks[s as usize].kind != Kind::Gone || d.gen.load(Ordering::Relaxed) != gen {
            // (Cannot be: the sender holds the slot while it sends.)
            if c.err.is_none() {
                let _ = io.abort(c.h);
            }
            return Msg::reply(-i64::from(libc::ENOENT));
        }
        app.socks[s as usize] = c.sock;
        if let Some(sp) = c.spill {
            app.spill.insert(s, sp);
        }
        d.err.store(0, Ordering::Relaxed);
        d.flags.store(c.flags, Ordering::Release);
        d.state.store(state::ESTABLISHED, Ordering::Release);
        match c.err {
            Some(e) => app.fail(s, e),
            None => {
                let _ = io.set_cookie(c.h, cookie(id, s));
                Self::urgent_again(app, io, s, c.h);
                app.changed(s);
                Self::pump_tx(app, io, s);
                Self::pump_rx(app, io, s);
            }
        }
        Msg::reply(0)
    }

    /// Take connection `s` out of `app` (for `PASS`, or with a listener
    /// that moves): what the program wrote goes to the window first, and
    /// what it did not read or the window had no room for leaves with the
    /// connection. None if it is no longer a live connection.
    fn take_out(app: &mut AppState, io: &mut Io, s: u32) -> Option<ConnPass> {
        let Kind::Conn(h) = app.socks[s as usize].kind else {
            return None;
        };
        Self::pump_tx(app, io, s);
        if app.socks[s as usize].kind != Kind::Conn(h) {
            return None; // reset for an impossible index, or closed
        }
        let (rq, sent, tail) = Self::tx_pending(app, io, s)?;
        let tx = app.r.tx_take(s, sent, (tail - sent) as usize);
        let ring = app.r.layout().ring as u64;
        let sock = app.socks[s as usize];
        let head = app.r.up_slot(s).rx_head.load(Ordering::Acquire);
        if head > sock.rx_tail || sock.rx_tail - head > ring {
            Self::violation(app, io, s);
            return None;
        }
        let mut rx = vec![0; (sock.rx_tail - head) as usize];
        app.r.rx_read(s, head, &mut rx);
        let d = app.r.down_slot(s);
        Some(ConnPass {
            h,
            slot: s,
            gen: d.gen.load(Ordering::Relaxed),
            flags: d.flags.load(Ordering::Relaxed),
            sock,
            head,
            rx,
            spill: app.spill.remove(&s),
            tx,
            shut_wr: rq & req::SHUT_WR != 0 && !sock.shut,
            local: d.local.load(Ordering::Relaxed),
            remote: d.remote.load(Ordering::Relaxed),
            err: None,
        })
    }

    /// Make passed connection `p` socket `s` (fresh from `alloc`) of app
    /// `id`: the bytes its sender had not read are in its receive ring,
    /// those the window had no room for in its transmit ring, as if the
    /// program had written them; then it goes on as any connection.
    fn take_in(app: &mut AppState, io: &mut Io, id: u32, s: u32, p: ConnPass) {
        // (Both fit: they came out of rings of this layout.)
        app.r.rx_write(s, 0, &p.rx);
        app.r.tx_write(s, 0, &p.tx);
        let u = app.r.up_slot(s);
        u.tx_tail.store(p.tx.len() as u64, Ordering::Release);
        if p.shut_wr {
            u.req.fetch_or(req::SHUT_WR, Ordering::Release);
        }
        let d = app.r.down_slot(s);
        d.local.store(p.local, Ordering::Relaxed);
        d.remote.store(p.remote, Ordering::Relaxed);
        d.rx_tail.store(p.rx.len() as u64, Ordering::Release);
        if let Some(sp) = p.spill {
            app.spill.insert(s, sp);
        }
        let c = &mut app.socks[s as usize];
        *c = Sock {
            kind: Kind::Conn(p.h),
            rx_tail: p.rx.len() as u64,
            sent: 0,
            acc_tail: 0,
            beyond: 0,
            // (The ring starts at what the sender's program had read; the
            // transmit ring anew.)
            rx_shift: p.sock.rx_shift - p.head as i64,
            urg_marked: 0,
            ..p.sock
        };
        if let Some(e) = p.err {
            app.fail(s, e);
            return;
        }
        let _ = io.set_cookie(p.h, cookie(id, s));
        // Its handshake may have ended, or a FIN come, while it was held
        // (their events named the pass).
        let tcp = io.stack().tcp_info(p.h).map(|i| i.state);
        if matches!(
            tcp,
            Ok(State::CloseWait | State::LastAck | State::Closing | State::TimeWait)
        ) {
            c.peer_closed = true;
        }
        let st = if matches!(tcp, Ok(State::SynSent | State::SynReceived)) {
            state::CONNECTING
        } else {
            state::ESTABLISHED
        };
        d.state.store(st, Ordering::Release);
        Self::urgent_again(app, io, s, p.h);
        app.changed(s);
        Self::pump_tx(app, io, s);
        Self::pump_rx(app, io, s);
    }

    /// An event of a passed connection (true: it was one). Its data waits
    /// in the stack; a FIN or its end is remembered for the claimant.
    fn passed_event(&mut self, io: &mut Io, ev: &Event) -> bool {
        let Some((h, c)) = conn_of(ev) else {
            return false;
        };
        let Some(id) = pass_of(c) else {
            return false;
        };
        let p = match self.passes.get_mut(&id).map(|p| &mut p.what) {
            Some(Passed::Conn(c)) if c.h == h && c.err.is_none() => Some(c),
            _ => None,
        };
        match *ev {
            Event::PeerClosed { .. } => {
                if let Some(p) = p {
                    p.sock.peer_closed = true;
                }
            }
            Event::Dead { reason, .. } => {
                let _ = io.close(h);
                if let Some(p) = p {
                    p.err = Some(dead_errno(reason));
                }
            }
            _ => {}
        }
        true
    }

    /// Reset the passed connections nobody claimed within
    /// [`ServiceConfig::pass_timeout`] (the receiver never ran under
    /// Ixora, or died).
    fn expire_passes(&mut self, io: &mut Io) {
        let now = Instant::now();
        if now < self.pass_check {
            return;
        }
        self.pass_check = now + PASS_CHECK_EVERY;
        let limit = self.pass_timeout;
        let old: Vec<u32> = (self.passes.iter())
            .filter_map(|(&k, p)| (now.duration_since(p.since) > limit).then_some(k))
            .collect();
        let mut said = false;
        for k in old {
            let p = self.take_pass(k);
            self.pass_counts.expired += 1;
            let c = match p.what {
                Passed::Conn(c) => c,
                Passed::Held { slot, .. } => {
                    // It stays where it was; closed meanwhile, it closes now.
                    self.activity(io, p.from, slot);
                    continue;
                }
                Passed::Join(_) => continue,
            };
            if c.err.is_none() {
                let _ = io.abort(c.h);
            }
            if std::mem::replace(&mut said, true) {
                continue; // one line per look (a flood of them says no more)
            }
            let (ip, port) = layout::unpack(c.remote);
            eprintln!(
                "ixora serve: a connection from {}:{port} handed to another process over a Unix \
                 socket was not claimed within {:.0?} (the receiver is not under `ixora run`, \
                 or never read the message): reset",
                Ipv4Addr::from(ip),
                limit
            );
        }
    }

    /// Connection `s` of `app` (handle `h`), still open when the app's
    /// last process went, ends as Linux ends a socket at its process's
    /// exit: reset if bytes it received were never read (the program's
    /// receive ring or the stack still holds some), else what its
    /// transmit ring still holds is sent, then a FIN. What the window has
    /// no room for now waits here, an [`Orphan`], sent as the window
    /// opens (`Sent` events under its [`orphan_cookie`]). Before
    /// 2026-11-26 every such connection was reset: a program that wrote
    /// a reply and exited without closing, or whose peer read slowly,
    /// lost the end of what it wrote.
    fn orphan(&mut self, io: &mut Io, app: &mut AppState, s: u32, h: ConnHandle) {
        let unread = Self::unread(app, io, s, h);
        // (An impossible tail resets the connection.)
        let Some((_, sent, tail)) = Self::tx_pending(app, io, s) else {
            self.orphan_counts.reset += 1;
            return;
        };
        let n = (tail - sent) as usize;
        if unread {
            // Linux's exit closes the socket with bytes unread: a reset,
            // after what the program wrote, which Linux sent at the write
            // as far as the window let it (the rest goes with the reset).
            let room = io.send_space(h).unwrap_or(0).min(n);
            if room > 0 {
                let _ = io.send(h, Bytes::from(app.r.tx_take(s, sent, room)));
            }
            self.doomed.push(h); // reset in `transmitted`
            self.orphan_counts.reset += 1;
            return;
        }
        if self.orphan_bytes + n > MAX_ORPHAN_BYTES {
            let _ = io.abort(h);
            self.orphan_counts.reset += 1;
            return;
        }
        if n == 0 {
            let _ = io.close(h); // the stack sends what it holds, then a FIN
            self.orphan_counts.finished += 1;
            return;
        }
        let k = self.next_orphan;
        self.next_orphan = k.wrapping_add(1);
        let _ = io.set_cookie(h, orphan_cookie(k));
        let o = Orphan {
            h,
            tx: Bytes::from(app.r.tx_take(s, sent, n)),
            since: Instant::now(),
        };
        self.orphan_bytes += n;
        self.orphans.insert(k, o);
        self.pump_orphan(io, k);
    }

    /// Give orphan `k` to the stack as far as the window lets it; once all
    /// is given, close the connection (the FIN follows its bytes).
    fn pump_orphan(&mut self, io: &mut Io, k: u32) {
        let Some(o) = self.orphans.get_mut(&k) else {
            return;
        };
        let room = io.send_space(o.h).unwrap_or(0).min(o.tx.len());
        let took = if room > 0 {
            io.send(o.h, o.tx.slice(..room)).unwrap_or(0)
        } else {
            0
        };
        o.tx = o.tx.slice(took..);
        self.orphan_bytes -= took;
        if o.tx.is_empty() {
            let _ = io.close(o.h);
            self.orphans.remove(&k);
            self.orphan_counts.finished += 1;
        } else if took == 0 {
            // As in `pump_tx`: told when the window opens.
            let _ = io.send_blocked(o.h);
        }
    }

    /// An event of an orphan's connection: true if `ev` was one.
    fn orphan_event(&mut self, io: &mut Io, ev: &Event) -> bool {
        let Some((h, c)) = conn_of(ev) else {
            return false;
        };
        let Some(k) = orphan_of(c) else {
            return false;
        };
        if self.orphans.get(&k).is_none_or(|o| o.h != h) {
            return true; // finished or reset already
        }
        match *ev {
            Event::Sent { .. } => self.pump_orphan(io, k),
            // Data for a program that is gone: Linux resets.
            Event::Recv { .. } | Event::Dead { .. } => {
                self.drop_orphan(io, k, matches!(ev, Event::Recv { .. }));
                self.orphan_counts.reset += 1;
            }
            _ => {}
        }
        true
    }

    /// Orphan `k` ends without its bytes: reset (`abort`), or dead
    /// already (its handle closed).
    fn drop_orphan(&mut self, io: &mut Io, k: u32, abort: bool) {
        if let Some(o) = self.orphans.remove(&k) {
            self.orphan_bytes -= o.tx.len();
            if abort {
                let _ = io.abort(o.h);
            } else {
                let _ = io.close(o.h);
            }
        }
    }

    /// Reset the orphans whose peers took nothing for [`ORPHAN_TIMEOUT`].
    fn expire_orphans(&mut self, io: &mut Io) {
        let now = Instant::now();
        if now < self.orphan_check {
            return;
        }
        self.orphan_check = now + PASS_CHECK_EVERY;
        let old: Vec<u32> = (self.orphans.iter())
            .filter_map(|(&k, o)| (now.duration_since(o.since) > ORPHAN_TIMEOUT).then_some(k))
            .collect();
        self.orphan_counts.expired += old.len() as u64;
        for k in old {
            self.drop_orphan(io, k, true);
        }
    }

    /// Remove pass `k` (it exists), its bytes no longer counted.
    fn take_pass(&mut self, k: u32) -> Pass {
        let p = self.passes.remove(&k).expect("a waiting pass");
        if let Passed::Conn(c) = &p.what {
            self.pass_bytes -= c.rx.len() + c.tx.len();
        }
        p
    }

    /// The urgent data of connection `h` (socket `s`) as the stack holds
    /// it, for one that was passed: its event, told meanwhile, named the
    /// pass.
    fn urgent_again(app: &mut AppState, io: &mut Io, s: u32, h: ConnHandle) {
        if let Ok(Some((mark, byte))) = io.urgent(h) {
            Self::urgent(app, s, mark, byte);
        }
    }

    /// The peer's urgent byte at stream offset `mark` (and the byte once
    /// it came), for the program: its socket's urgent word; a new mark
    /// moves the app's urgent count, so that a process of it raises
    /// `SIGURG` for the socket's owner; sleepers wake (`POLLPRI`).
    fn urgent(app: &mut AppState, s: u32, mark: u64, byte: Option<u8>) {
        let Ok(at) = u64::try_from(mark as i64 + app.socks[s as usize].rx_shift) else {
            return; // before what a passed connection's ring holds
        };
        let w = app.r.urgent(s);
        let new = layout::unpack_urgent(w.load(Ordering::Relaxed)).map(|u| u.0) != Some(at);
        w.store(layout::pack_urgent(at, byte), Ordering::Release);
        app.r
            .down_slot(s)
            .flags
            .fetch_or(flag::URGENT, Ordering::Release);
        if new {
            app.r.down_header().urgent.fetch_add(1, Ordering::Release);
            // (Only for a socket with an owner to signal: a peer that moves
            // its pointer with every segment wakes no one else for it.)
            if app.r.up_urgent(s).owned.load(Ordering::Relaxed) != 0 {
                app.wake_all = true;
            }
        }
        app.changed(s);
    }

    /// Copy what the stack holds for a connection into its receive ring.
    fn pump_rx(app: &mut AppState, io: &mut Io, s: u32) {
        let Kind::Conn(h) = app.socks[s as usize].kind else {
            return;
        };
        let ring = app.r.layout().ring as u64;
        let tail = app.socks[s as usize].rx_tail;
        let head = app.r.up_slot(s).rx_head.load(Ordering::Acquire);
        if head > tail || tail - head > ring {
            Self::violation(app, io, s);
            return;
        }
        let mut room = (ring - (tail - head)) as usize;
        // Spilled bytes first: they came before what the stack holds.
        let mut spilled = 0usize;
        // (Most cycles no connection has a spill: no lookup.)
        let spill = !app.spill.is_empty();
        if let Some(sp) = spill.then(|| app.spill.get_mut(&s)).flatten() {
            let k = sp.left().len().min(room);
            app.r.rx_write(s, tail, &sp.left()[..k]);
            sp.off += k;
            spilled = k;
            room -= k;
            if sp.left().is_empty() {
                app.spill.remove(&s);
            }
        }
        let mut n = 0usize;
        if room > 0 && !(spill && app.spill.contains_key(&s)) {
            if let Ok(chunks) = io.recv(h) {
                for c in chunks {
                    if room == 0 {
                        break;
                    }
                    let k = c.len().min(room);
                    app.r.rx_write(s, tail + (spilled + n) as u64, &c[..k]);
                    n += k;
                    room -= k;
                }
            }
        }
        if spilled > 0 {
            let _ = io.recv_release(h, spilled);
        }
        if n > 0 {
            let _ = io.recv_done(h, n);
        }
        // What waits beyond a full ring, for FIONREAD (before the tail:
        // see `DownSlot::rx_beyond`).
        let beyond = if room == 0 {
            let left = app.spill.get(&s).map_or(0, |sp| sp.left().len());
            u32::try_from(io.readable(h).unwrap_or(0) + left).unwrap_or(u32::MAX)
        } else {
            0
        };
        if beyond != app.socks[s as usize].beyond {
            app.socks[s as usize].beyond = beyond;
            app.r
                .down_slot(s)
                .rx_beyond
                .store(beyond, Ordering::Relaxed);
        }
        if spilled + n > 0 {
            let sock = &mut app.socks[s as usize];
            sock.rx_tail += (spilled + n) as u64;
            app.r
                .down_slot(s)
                .rx_tail
                .store(sock.rx_tail, Ordering::Release);
            app.changed(s);
        }
        let sock = app.socks[s as usize];
        if sock.peer_closed && io.readable(h).unwrap_or(0) == 0 && !app.spill.contains_key(&s) {
            let d = app.r.down_slot(s);
            if d.flags.load(Ordering::Relaxed) & flag::EOF == 0 {
                d.flags.fetch_or(flag::EOF, Ordering::Release);
                app.changed(s);
            }
        }
    }

    /// While this core's packet buffers run low ([`Io::buffers_low`]), at
    /// most once a millisecond: the bytes connections received that their
    /// programs' full receive rings have no room for are copied out of
    /// the buffers into the service's memory ([`Spill`]) and their buffers
    /// freed. Their place in each connection's window stays taken until
    /// they reach its ring, so a spill is bounded by the window, as the
    /// buffers were. Without this, a program that stops reading pins
    /// buffers with every byte its peers send up to their windows (256 KiB
    /// each, up to 6 MiB once auto-tuned); some tens of such connections
    /// took all 8,192, the
    /// interface had none left to receive into, and every connection of
    /// every program on the service stalled. Linux copies such bytes out
    /// of the device's buffers at once (an skb per segment). A UDP socket
    /// whose ring is full (a datagram already waits for room) has the
    /// datagrams the stack still queues for it (up to
    /// `tcp.udp_rx_queue`, 1,024, each in a buffer) dropped instead, as
    /// Linux drops datagrams for a full socket buffer (`udp_full_drops`).
    fn spill(&mut self, io: &mut Io) {
        // (Each cycle: the pool's count first, the clock only when low.)
        if !io.buffers_low() {
            return;
        }
        let now = Instant::now();
        if (self.spill_looked).is_some_and(|t| now.duration_since(t) < Duration::from_millis(1)) {
            return;
        }
        self.spill_looked = Some(now);
        self.spills.scans += 1;
        for app in self.apps.values_mut() {
            for s in 0..app.socks.len() as u32 {
                let h = match app.socks[s as usize].kind {
                    Kind::Conn(h) => h,
                    Kind::Udp(u) if app.udp_held[s as usize].is_some() => {
                        // (A port group's queue is emptied at each of its
                        // events, over its members: none waits there.)
                        if self.udp_groups.get(&u.port()).is_none_or(|g| g.h != u) {
                            while let Ok(Some(_)) = io.udp_recv(u) {
                                UDP_FULL_DROPS.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        continue;
                    }
                    _ => continue,
                };
                // What the ring had room for went there already (each
                // arrival is offered to it): the rest waits for a reader.
                let n = io.readable(h).unwrap_or(0);
                if n == 0 {
                    continue;
                }
                let Ok(chunks) = io.recv(h) else {
                    continue;
                };
                let sp = app.spill.entry(s).or_default();
                // (What the ring took is dropped first: a reader that
                // keeps up a little at a time would otherwise grow it.)
                sp.buf.drain(..sp.off);
                sp.off = 0;
                for c in chunks {
                    sp.buf.extend_from_slice(c);
                }
                let _ = io.recv_hold(h, n);
                self.spills.spills += 1;
                self.spills.bytes += n as u64;
            }
        }
    }

    /// Whether connection `s` of `app` (handle `h`) holds received bytes
    /// its program never read: in its receive ring, spilled, or in the
    /// stack.
    fn unread(app: &AppState, io: &mut Io, s: u32, h: ConnHandle) -> bool {
        app.r.down_slot(s).rx_tail.load(Ordering::Acquire)
            != app.r.up_slot(s).rx_head.load(Ordering::Acquire)
            || io.readable(h).unwrap_or(0) > 0
            || app.spill.contains_key(&s)
    }

    /// Offer what the app wrote to the send window; carry out close and
    /// shutdown requests once the ring has drained. A close with received
    /// bytes unread resets the connection, as Linux's `tcp_close` does
    /// (RFC 9293 §3.10.4, RFC 1122 §4.2.2.13: the peer learns that data
    /// was lost); until 2026-11-29 only bytes still in the stack did:
    /// those in the ring, most of them, were closed with a FIN
    /// (`listen_ops.c`). A reset (that, or `SO_LINGER` 0) first lets out
    /// what Linux's sends would have sent already: what the program wrote
    /// goes to the window now, and a shutdown asked before the close its
    /// FIN; the reset follows once this cycle's frames are out
    /// ([`Service::transmitted`]). What the window has no room for goes
    /// with it, as on Linux.
    fn pump_tx(app: &mut AppState, io: &mut Io, s: u32) {
        let Kind::Conn(h) = app.socks[s as usize].kind else {
            return;
        };
        let Some((mut rq, sent, tail)) = Self::tx_pending(app, io, s) else {
            return;
        };
        if rq & req::CLOSE != 0 && rq & req::ABORT == 0 && Self::unread(app, io, s, h) {
            rq |= req::ABORT;
        }
        // Urgent data (`send` with `MSG_OOB`) the stack has had all of
        // without being told (the program said so after the service took
        // its bytes): told now, where it ends.
        let urg = if rq & req::URGENT != 0 {
            app.r.up_urgent(s).tx.load(Ordering::Acquire)
        } else {
            0
        };
        if urg > app.socks[s as usize].urg_marked && urg <= sent {
            app.socks[s as usize].urg_marked = urg;
            // (The stack holds the ring's bytes up to `sent`.)
            let _ = io.mark_urgent(h, (sent - urg) as usize);
        }
        let avail = (tail - sent) as usize;
        if avail == 0 && app.says_stack_full(s) {
            // An acknowledgement or a window update made room.
            app.stack_full(s, io.send_space(h).unwrap_or(0) == 0);
        }
        if avail > 0 {
            let space = io.send_space(h).unwrap_or(0);
            let want = avail.min(space);
            // (A reset takes what it can now: the rest is lost with it.)
            let n = if rq & req::ABORT != 0 {
                want
            } else {
                app.tx_budget(s, want)
            };
            app.stack_full(s, space <= avail);
            if want == 0 {
                // All of it waits in the ring: the stack says when the
                // window opens, also by a pure window update (a peer whose
                // ring filled acknowledges everything with a zero window,
                // and then only opens it). When some was taken, its
                // acknowledgement brings a `Sent` and this look again.
                let _ = io.send_blocked(h);
            }
            if n > 0 {
                // Urgent data that ends in what goes now: up to its end,
                // the mark, then the rest.
                let marks =
                    urg > app.socks[s as usize].urg_marked && urg > sent && urg <= sent + n as u64;
                let cut = if marks { (urg - sent) as usize } else { n };
                let v = app.r.tx_take(s, sent, cut);
                let mut k = io.send(h, Bytes::from(v)).unwrap_or(0);
                if marks && k == cut {
                    app.socks[s as usize].urg_marked = urg;
                    let _ = io.mark_urgent(h, 0);
                    if cut < n {
                        let v = app.r.tx_take(s, urg, n - cut);
                        k += io.send(h, Bytes::from(v)).unwrap_or(0);
                    }
                }
                let sock = &mut app.socks[s as usize];
                sock.sent += k as u64;
                app.r
                    .down_slot(s)
                    .tx_head
                    .store(sock.sent, Ordering::Release);
                app.tx_progress(s);
            }
        }
        let drained = app.socks[s as usize].sent == tail;
        if rq & req::ABORT != 0 {
            APP_ABORTS.fetch_add(1, Ordering::Relaxed);
            if rq & req::SHUT_WR != 0 && drained && !app.socks[s as usize].shut {
                let _ = io.shutdown(h);
            }
            app.doomed.push(h);
            app.release(s);
        } else if rq & req::CLOSE != 0 && drained {
            let _ = io.close(h);
            app.release(s);
        } else if rq & req::SHUT_WR != 0 && drained && !app.socks[s as usize].shut {
            app.socks[s as usize].shut = true;
            let _ = io.shutdown(h);
        }
    }

    /// Apply the options the app set in socket `s`'s up slot, if it set
    /// any since ([`req::OPTS`]): before the service acts on the socket.
    fn take_opts(app: &mut AppState, io: &mut Io, s: u32) {
        if app.r.up_slot(s).req.load(Ordering::Acquire) & req::OPTS != 0 {
            Self::apply_opts(app, io, s);
        }
    }

    /// Take socket `s`'s options from its up slot (TCP_NODELAY, keep-alive
    /// and its timing, SO_RCVBUF and SO_SNDBUF): kept for a socket not yet
    /// connected and for a listener's connections, given to its
    /// connection if it has one (and a listener's buffers to the stack's
    /// listener, whose SYN-ACK offers the receive buffer).
    fn apply_opts(app: &mut AppState, io: &mut Io, s: u32) {
        let u = app.r.up_slot(s);
        // Cleared first: a change made meanwhile asks again.
        u.req.fetch_and(!req::OPTS, Ordering::AcqRel);
        let o = u.opts.load(Ordering::Acquire);
        let (idle, intvl, cnt) = layout::unpack_keep(u.keep.load(Ordering::Acquire));
        let (nodelay, keepalive) = (o & opts::NAGLE == 0, o & opts::KEEPALIVE != 0);
        // (`MSG_MORE` corks until the next send without it.)
        let cork = o & (opts::CORK | opts::MORE) != 0;
        let ka = (u32::from(idle), u32::from(intvl), cnt);
        let bufs = u.bufs.load(Ordering::Acquire);
        let defer = ((o & opts::DEFER_MASK) >> opts::DEFER_SHIFT) as u8;
        let (tos, ttl) = layout::opts_ip(o);
        let ip = IpOpts { tos, ttl };
        let sock = &mut app.socks[s as usize];
        if let Kind::Listen(port) = sock.kind {
            if defer != sock.defer {
                let _ = io.listener_defer_accept(port, layout::defer_secs(defer));
            }
            if ip != sock.ip {
                let _ = io.listener_ip_opts(port, ip);
            }
        }
        sock.defer = defer;
        if bufs != sock.bufs {
            // Only what changed: `None` leaves a buffer as it is.
            let (rcv, snd) = layout::unpack_bufs(bufs);
            let (was_rcv, was_snd) = layout::unpack_bufs(sock.bufs);
            let rcv = rcv.filter(|_| rcv != was_rcv);
            let snd = snd.filter(|_| snd != was_snd);
            let _ = match sock.kind {
                Kind::Conn(h) => io.lock_buffers(h, rcv, snd),
                Kind::Listen(port) => io.listener_lock_buffers(port, rcv, snd),
                _ => Ok(()),
            };
            sock.bufs = bufs;
        }
        if let Kind::Conn(h) = sock.kind {
            if nodelay != sock.nodelay {
                let _ = io.set_nodelay(h, nodelay);
            }
            if cork != sock.cork {
                let _ = io.set_cork(h, cork);
            }
            if keepalive != sock.keepalive {
                let _ = io.set_keepalive(h, keepalive);
            }
            if ka != sock.ka {
                let _ = io.set_keepalive_timing(h, ka);
            }
            if ip != sock.ip {
                let _ = io.set_ip_opts(h, ip);
            }
        }
        sock.ip = ip;
        (sock.nodelay, sock.cork, sock.keepalive, sock.ka) = (nodelay, cork, keepalive, ka);
    }

    /// Socket `s`'s requests, the bytes taken from its transmit ring so
    /// far and the app's tail: `(req, sent, tail)`; None, the socket
    /// reset, if the tail is impossible. The requests are read first:
    /// every byte written before a close or shutdown was asked is then
    /// within the tail read next.
    fn tx_pending(app: &mut AppState, io: &mut Io, s: u32) -> Option<(u32, u64, u64)> {
        let ring = app.r.layout().ring as u64;
        let u = app.r.up_slot(s);
        let rq = u.req.load(Ordering::Acquire);
        if rq & req::OPTS != 0 {
            // Options set before these bytes were written apply to them.
            Self::apply_opts(app, io, s);
        }
        let u = app.r.up_slot(s);
        let tail = u.tx_tail.load(Ordering::Acquire);
        let sent = app.socks[s as usize].sent;
        if tail < sent || tail - sent > ring {
            Self::violation(app, io, s);
            return None;
        }
        Some((rq, sent, tail))
    }

    /// Bind UDP socket `s` of app `id` to `port` (0: a free one); its
    /// local address is published. Returns the port.
    fn udp_bind(
        app: &mut AppState,
        io: &mut Io,
        id: u32,
        s: u32,
        port: u16,
        ip: u32,
    ) -> Result<u16, Error> {
        let h = io.udp_bind(port, cookie(id, s))?;
        app.socks[s as usize].kind = Kind::Udp(h);
        app.r
            .down_slot(s)
            .local
            .store(pack(ip, h.port()), Ordering::Release);
        Ok(h.port())
    }

    /// Give UDP socket `s`'s port up (false if it shares it): the
    /// datagrams its transmit ring holds go first, and those the stack
    /// holds for it move to its receive ring while they fit (the rest
    /// are dropped, as a datagram past a full SO_RCVBUF is). Its address
    /// reads port 0 until the shim binds it again (at its next send, as
    /// Linux's `inet_send_prepare` binds an unbound socket).
    fn udp_unbind(app: &mut AppState, io: &mut Io, s: u32, ip: u32) -> bool {
        let Kind::Udp(h) = app.socks[s as usize].kind else {
            return false;
        };
        if app.socks[s as usize].reuseport {
            return false;
        }
        Self::pump_udp_tx(app, io, s);
        if app.socks[s as usize].kind != Kind::Udp(h) {
            return false; // closed meanwhile (or reset for a bad ring)
        }
        Self::fill_udp(app, io, s, Some(h));
        let _ = io.udp_close(h);
        app.socks[s as usize].kind = Kind::Open;
        app.socks[s as usize].auto_port = false;
        app.r
            .down_slot(s)
            .local
            .store(pack(ip, 0), Ordering::Release);
        true
    }

    /// Move the datagrams the stack holds for UDP socket `s` into its
    /// receive ring, each with its source, while they fit (the rest wait
    /// in the stack, whose queue is bounded, until the app reads).
    /// An ICMP destination-unreachable (`code`) about a datagram UDP
    /// socket `s` sent to `to`. As Linux's `__udp4_lib_err` without
    /// `IP_RECVERR`: a hard error (`icmp_err_convert`'s fatal codes: port
    /// or protocol unreachable, ...) is reported to a socket connected to
    /// `to`, once, at its next receive, send or `SO_ERROR`, and polls as
    /// `POLLERR` meanwhile; anything else is dropped. Posted in the down
    /// slot: its errno in `err`, counted in `acc_tail`.
    fn udp_icmp_error(app: &mut AppState, s: u32, to: SocketAddrV4, code: u8) {
        let errno = match code {
            2 => libc::ENOPROTOOPT,
            3 => libc::ECONNREFUSED,
            6 | 9 => libc::ENETUNREACH,
            7 => libc::EHOSTDOWN,
            8 => libc::ENONET,
            10 | 13..=15 => libc::EHOSTUNREACH,
            _ => return,
        };
        if app.socks[s as usize].peer != pack(u32::from(*to.ip()), to.port()) {
            return;
        }
        let d = app.r.down_slot(s);
        d.err.store(errno, Ordering::Relaxed);
        d.acc_tail.fetch_add(1, Ordering::Release);
        app.changed(s);
    }

    fn pump_udp_rx(app: &mut AppState, io: &mut Io, s: u32) {
        let Kind::Udp(h) = app.socks[s as usize].kind else {
            return;
        };
        Self::fill_udp(app, io, s, Some(h));
    }

    /// Move datagrams into UDP socket `s`'s receive ring while they fit:
    /// first the one held for it, then (`from`) the stack's queue.
    fn fill_udp(app: &mut AppState, io: &mut Io, s: u32, from: Option<UdpHandle>) {
        if !matches!(app.socks[s as usize].kind, Kind::Udp(_)) {
            return;
        }
        let ring = app.r.layout().ring as u64;
        let head = app.r.up_slot(s).rx_head.load(Ordering::Acquire);
        let start = app.socks[s as usize].rx_tail;
        if head > start || start - head > ring {
            Self::violation(app, io, s);
            return;
        }
        let mut tail = start;
        let mut clock = WallClock::default();
        loop {
            let next = match (app.udp_held[s as usize].take(), from) {
                (Some(d), _) => Some(d),
                (None, Some(h)) => io.udp_recv(h).ok().flatten(),
                (None, None) => None,
            };
            let Some(d) = next else { break };
            let src = d.src;
            let peer = app.socks[s as usize].peer;
            if peer != 0 && pack(u32::from(*src.ip()), src.port()) != peer {
                continue; // not from the connected peer: dropped
            }
            let need = (layout::DGRAM_HDR + d.data.len()) as u64;
            if need > ring {
                // Longer than the ring: it never fits (as a datagram over
                // SO_RCVBUF is dropped).
                UDP_RX_TOO_LONG.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if ring - (tail - head) < need {
                app.udp_held[s as usize] = Some(d);
                break;
            }
            let hdr = layout::dgram_hdr(d.data.len() as u16, u32::from(*src.ip()), src.port());
            let hdr = layout::with_stamp(hdr, clock.realtime(d.at));
            let hdr = layout::with_rx_ip(hdr, d.tos, d.ttl);
            app.r.rx_write(s, tail, &hdr);
            app.r.rx_write(s, tail + layout::DGRAM_HDR as u64, &d.data);
            tail += need;
        }
        if tail != start {
            app.socks[s as usize].rx_tail = tail;
            app.r.down_slot(s).rx_tail.store(tail, Ordering::Release);
            app.changed(s);
        }
    }

    /// Send the datagrams the app wrote into UDP socket `s`'s transmit
    /// ring; close it when asked. False when the stack's transmit queue
    /// was full (the rest stay in the ring: try again next cycle).
    fn pump_udp_tx(app: &mut AppState, io: &mut Io, s: u32) -> bool {
        let Kind::Udp(h) = app.socks[s as usize].kind else {
            return true;
        };
        let Some((rq, start, tail)) = Self::tx_pending(app, io, s) else {
            return true;
        };
        let mut sent = start;
        let mut all = true;
        while sent < tail {
            let avail = tail - sent;
            let mut hdr = [0u8; layout::DGRAM_HDR];
            if avail < hdr.len() as u64 {
                Self::violation(app, io, s);
                return true;
            }
            app.r.tx_read(s, sent, &mut hdr);
            let (len, dip, dport) = layout::parse_dgram_hdr(&hdr);
            let need = (layout::DGRAM_HDR + usize::from(len)) as u64;
            if need > avail {
                Self::violation(app, io, s);
                return true;
            }
            let data = app
                .r
                .tx_take(s, sent + layout::DGRAM_HDR as u64, usize::from(len));
            let dst = SocketAddrV4::new(Ipv4Addr::from(dip), dport);
            let (tos, ttl) = layout::dgram_ip(&hdr);
            match io.udp_send_with(h, dst, Bytes::from(data), IpOpts { tos, ttl }) {
                Err(Error::WouldBlock) => {
                    all = false;
                    break;
                }
                Ok(()) => {}
                // Checked by the shim before it wrote: only a buggy or
                // hostile app gets here; its datagram is dropped.
                Err(_) => {
                    UDP_TX_REFUSED.fetch_add(1, Ordering::Relaxed);
                }
            }
            sent += need;
        }
        if sent != start {
            app.socks[s as usize].sent = sent;
            app.r.down_slot(s).tx_head.store(sent, Ordering::Release);
            app.tx_progress(s);
        }
        if rq & (req::CLOSE | req::ABORT) != 0 && (sent == tail || rq & req::ABORT != 0) {
            // (A group's socket closes with its last member.)
            if !app.socks[s as usize].reuseport {
                let _ = io.udp_close(h);
            }
            app.udp_held[s as usize] = None;
            app.release(s);
        }
        all
    }

    /// The app wrote an impossible index: reset this socket only.
    fn violation(app: &mut AppState, io: &mut Io, s: u32) {
        PROTOCOL_ERRORS.fetch_add(1, Ordering::Relaxed);
        match app.socks[s as usize].kind {
            Kind::Conn(h) => {
                let _ = io.abort(h);
            }
            Kind::Udp(h) => {
                if !app.socks[s as usize].reuseport {
                    let _ = io.udp_close(h);
                }
                app.udp_held[s as usize] = None;
            }
            _ => {}
        }
        app.fail(s, libc::EPROTO);
    }

    /// Connect TCP socket `slot` of app `id` to packed `dest`: the
    /// stack's connection opened, the socket connecting. Err: the negative
    /// errno.
    fn tcp_connect(
        app: &mut AppState,
        io: &mut Io,
        id: u32,
        slot: u32,
        dest: u64,
    ) -> Result<(), i64> {
        if !matches!(app.socks[slot as usize].kind, Kind::Open | Kind::Bound(_)) {
            return Err(-i64::from(libc::EISCONN));
        }
        Self::take_opts(app, io, slot);
        if let Kind::Bound(p) = app.socks[slot as usize].kind {
            if !app.socks[slot as usize].auto_port {
                app.socks[slot as usize].bind_lock = p;
            }
        }
        let (dip, dport) = layout::unpack(dest);
        if dport == 0 {
            // No one listens on port 0: Linux sends the SYN and its peer
            // resets it. Refused here, as from the peer: a blocking
            // connect says ECONNREFUSED, a non-blocking one EINPROGRESS
            // and then the error.
            app.fail(slot, libc::ECONNREFUSED);
            return Ok(());
        }
        let dst = SocketAddrV4::new(Ipv4Addr::from(dip), dport);
        // A socket bound first connects from its port.
        let opened = match app.socks[slot as usize].kind {
            Kind::Bound(p) => match io.connect_from(cookie(id, slot), dst, p) {
                // The bind picked a port a connection to `dst` holds
                // (bind(0) knows only the sockets' ports): the stack picks
                // another.
                Err(Error::AddrInUse) if app.socks[slot as usize].auto_port => {
                    io.connect(cookie(id, slot), dst)
                }
                r => r,
            },
            _ => io.connect(cookie(id, slot), dst),
        };
        let h = opened.map_err(|e| match e {
            // The 4-tuple is taken (by a live connection, or a TIME-WAIT
            // that may not be taken over): Linux's `__inet_hash_connect`
            // says EADDRNOTAVAIL.
            Error::AddrInUse => -i64::from(libc::EADDRNOTAVAIL),
            e => errno_of(e),
        })?;
        app.socks[slot as usize].kind = Kind::Conn(h);
        // Options set before the connect (TCP_NODELAY off, keep-alive)
        // take effect now.
        app.socks[slot as usize].apply(io, h);
        let d = app.r.down_slot(slot);
        if let Ok((l, _)) = io.stack().tcp_addrs(h) {
            d.local
                .store(pack(u32::from(*l.ip()), l.port()), Ordering::Relaxed);
        }
        d.remote.store(dest, Ordering::Relaxed);
        d.state.store(state::CONNECTING, Ordering::Release);
        app.changed(slot);
        Ok(())
    }

    /// Make TCP socket `s`, whose connection ended (`Kind::Gone`), a
    /// socket not connected, to connect again: Linux's `tcp_disconnect`,
    /// which a connect that reported the failure runs (RFC 9293 §3.10.7.1:
    /// a connection that was reset goes to CLOSED). What its rings held
    /// is dropped — the shim drops the receive ring's bytes, the service
    /// those of the transmit ring — and its error and flags are cleared;
    /// its options stay, and a port the program bound it to is the new
    /// connection's.
    fn unconnect(app: &mut AppState, s: u32) {
        let tx_tail = app.r.up_slot(s).tx_tail.load(Ordering::Acquire);
        let sk = &mut app.socks[s as usize];
        sk.kind = match sk.bind_lock {
            0 => Kind::Open,
            p => Kind::Bound(p),
        };
        sk.sent = tx_tail;
        sk.peer_closed = false;
        sk.shut = false;
        sk.beyond = 0;
        // The next connection's stream starts at the ring's tail; urgent
        // data of this one is forgotten.
        sk.rx_shift = sk.rx_tail as i64;
        sk.urg_marked = tx_tail;
        app.r.urgent(s).store(0, Ordering::Release);
        let uu = app.r.up_urgent(s);
        uu.read.store(0, Ordering::Relaxed);
        uu.signalled.store(0, Ordering::Relaxed);
        app.spill.remove(&s);
        app.gone_info.remove(&s);
        let unbound = sk.bind_lock == 0;
        let d = app.r.down_slot(s);
        if unbound {
            // (The port we picked is given up, as Linux's `inet_put_port`.)
            d.local.store(0, Ordering::Relaxed);
        }
        d.remote.store(0, Ordering::Relaxed);
        d.tx_head.store(tx_tail, Ordering::Release);
        d.rx_beyond.store(0, Ordering::Relaxed);
        d.err.store(0, Ordering::Relaxed);
        d.flags.store(0, Ordering::Release);
        d.state.store(state::OPEN, Ordering::Release);
        app.changed(s);
    }

    /// Socket `s` of `app` had activity.
    fn activity(&mut self, io: &mut Io, id: u32, s: u32) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        match app.socks[s as usize].kind {
            Kind::Conn(_) => {
                Self::pump_tx(app, io, s);
                Self::pump_rx(app, io, s);
            }
            Kind::Udp(h) => {
                if !Self::pump_udp_tx(app, io, s) {
                    self.udp_retry.push((id, s));
                }
                if app.socks[s as usize].reuseport || app.socks[s as usize].kind != Kind::Udp(h) {
                    // A group's member (it may have closed just now: the
                    // group's socket closes with the last).
                    if self.udp_groups.get(&h.port()).is_some_and(|g| g.h == h) {
                        self.pump_udp_group(io, h.port());
                    }
                } else {
                    Self::pump_udp_rx(app, io, s);
                }
            }
            Kind::Listen(port) => {
                Self::take_opts(app, io, s);
                let rq = app.r.up_slot(s).req.load(Ordering::Acquire);
                // A listener handed to another process and not yet
                // claimed outlives its sender's close (it moves at the
                // claim; it closes when its pass ends unclaimed).
                let closing = rq & (req::CLOSE | req::ABORT) != 0;
                let gen = app.r.down_slot(s).gen.load(Ordering::Relaxed);
                if closing && !passing(&self.passes, id, s, gen) {
                    Self::unlisten(&mut self.listeners, io, port, (id, s));
                    Self::abort_held(&mut self.held, io, (id, s));
                    // Connections queued but never accepted die with it.
                    let tail = app.socks[s as usize].acc_tail;
                    let head = app.r.up_slot(s).acc_head.load(Ordering::Acquire);
                    let pending = tail.wrapping_sub(head).min(app.r.acc_capacity());
                    for k in 0..pending {
                        let e = app
                            .r
                            .acc_entry(s, head.wrapping_add(k))
                            .load(Ordering::Acquire);
                        let c = e as u32;
                        if c < app.r.layout().slots {
                            if let Kind::Conn(h) = app.socks[c as usize].kind {
                                let _ = io.abort(h);
                                app.release(c);
                            }
                        }
                    }
                    app.release(s);
                }
            }
            Kind::Open | Kind::Bound(_) | Kind::Gone => {
                Self::take_opts(app, io, s);
                let rq = app.r.up_slot(s).req.load(Ordering::Acquire);
                // (A bound socket handed over waits for its claim too.)
                let gen = app.r.down_slot(s).gen.load(Ordering::Relaxed);
                if rq & (req::CLOSE | req::ABORT) != 0 && !passing(&self.passes, id, s, gen) {
                    app.release(s);
                } else if rq & req::CONNECT != 0 {
                    // A spare socket the app took, to connect: as
                    // `op::CONNECT` would, the error (refused at once)
                    // left on the socket. Then spares for its next ones.
                    let sk = app.socks[s as usize];
                    if sk.kind == Kind::Open && !sk.dgram {
                        let dest = app.r.up_slot(s).dest.load(Ordering::Acquire);
                        app.socks[s as usize].spare = false;
                        if let Err(e) = Self::tcp_connect(app, io, id, s, dest) {
                            app.fail(s, -e as i32);
                        }
                    }
                    app.r
                        .up_slot(s)
                        .req
                        .fetch_and(!req::CONNECT, Ordering::AcqRel);
                    app.refill_spares();
                }
            }
            Kind::Free => {}
        }
    }

    fn knock(&mut self, io: &mut Io, h: ConnHandle, listener: u64, remote: SocketAddrV4) {
        let port = listener as u16;
        // Members that stopped listening (a protocol error, their app
        // gone) leave first: only live listeners take connections.
        if listener != listener_cookie(port) || !self.prune_listener(io, port) {
            let _ = io.close(h);
            return;
        }
        let Some(l) = self.listeners.get(&port) else {
            let _ = io.close(h);
            return;
        };
        let apps = &self.apps;
        let key = l.pick(remote, |m| is_specific(apps, m));
        let c = Held { h, remote, port };
        // Behind those that already wait for this listener (in order).
        if let Some(q) = (!self.held.is_empty())
            .then(|| self.held.get_mut(&key))
            .flatten()
        {
            q.push_back(c);
            self.accept_waits += 1;
            return;
        }
        let ip = self.ip(io);
        let Some(app) = self.apps.get_mut(&key.0) else {
            let _ = io.close(h);
            return;
        };
        match Self::admit(app, io, ip, key, c) {
            Admit::Queued => {}
            Admit::Wait => {
                self.held.insert(key, VecDeque::from([c]));
                self.accept_waits += 1;
            }
            Admit::Broken => {
                self.rejected += 1;
                let _ = io.close(h);
                self.listener_broken(io, key, port);
            }
        }
    }

    /// The program of listener `key` wrote an accept-queue head beyond
    /// its tail: it no longer listens (the port's group loses it), and
    /// the connections waiting for it are reset.
    fn listener_broken(&mut self, io: &mut Io, key: (u32, u32), port: u16) {
        if let Some(app) = self.apps.get_mut(&key.0) {
            Self::violation(app, io, key.1);
        }
        Self::abort_held(&mut self.held, io, key);
        self.prune_listener(io, port);
    }

    /// Reset the connections waiting for listener `key` (it closed, or
    /// broke its queue): Linux resets a closed listener's queue.
    fn abort_held(held: &mut HashMap<(u32, u32), VecDeque<Held>>, io: &mut Io, key: (u32, u32)) {
        for c in held.remove(&key).unwrap_or_default() {
            let _ = io.abort(c.h);
        }
    }

    /// Put connection `c` in the accept queue of listener `ls` of `app`
    /// (whose id is `id`), with a socket slot of its own.
    fn admit(app: &mut AppState, io: &mut Io, ip: u32, (id, ls): (u32, u32), c: Held) -> Admit {
        let head = app.r.up_slot(ls).acc_head.load(Ordering::Acquire);
        let tail = app.socks[ls as usize].acc_tail;
        let queued = tail.wrapping_sub(head);
        if queued > app.r.acc_capacity() {
            return Admit::Broken;
        }
        // As a Linux listener's accept queue: backlog + 1 at most.
        if queued >= app.acc_room(ls) {
            return Admit::Wait;
        }
        let Some(s) = app.alloc() else {
            app.say_full(
                id,
                &format!(
                    "connections to port {} wait in the stack's accept queue (up to the \
                     listener's backlog; beyond it handshakes are dropped, as Linux does)",
                    c.port
                ),
            );
            return Admit::Wait;
        };
        let (h, remote, port) = (c.h, c.remote, c.port);
        if io.accept(h, cookie(id, s)).is_err() {
            // Gone while it waited (its peer reset it).
            app.release(s);
            return Admit::Queued;
        }
        // The listener's options pass to the connection (Linux copies
        // them from the listening socket), and to its up slot, where the
        // app changes them.
        Self::take_opts(app, io, ls);
        let l = app.socks[ls as usize];
        l.apply(io, h);
        let c = &mut app.socks[s as usize];
        c.kind = Kind::Conn(h);
        c.nodelay = l.nodelay;
        c.cork = l.cork;
        c.keepalive = l.keepalive;
        c.ka = l.ka;
        c.ip = l.ip;
        c.bufs = l.bufs;
        let u = app.r.up_slot(s);
        u.opts.store(l.opts_word(), Ordering::Relaxed);
        u.bufs.store(l.bufs, Ordering::Relaxed);
        u.keep.store(
            layout::pack_keep(l.ka.0 as u16, l.ka.1 as u16, l.ka.2),
            Ordering::Relaxed,
        );
        let d = app.r.down_slot(s);
        d.local.store(pack(ip, port), Ordering::Relaxed);
        d.remote.store(
            pack(u32::from(*remote.ip()), remote.port()),
            Ordering::Relaxed,
        );
        d.state.store(state::ESTABLISHED, Ordering::Release);
        let gen = d.gen.load(Ordering::Relaxed);
        app.r
            .acc_entry(ls, tail)
            .store(s as u64 | (gen as u64) << 32, Ordering::Release);
        app.socks[ls as usize].acc_tail = tail.wrapping_add(1);
        app.r
            .down_slot(ls)
            .acc_tail
            .store(tail.wrapping_add(1), Ordering::Release);
        app.changed(ls);
        // Data may have come with the handshake's last segment.
        Self::pump_rx(app, io, s);
        Admit::Queued
    }

    /// Offer the connections that wait for their listeners again (see
    /// [`Service::held`]): those of a listener that is no longer one go to
    /// the port's other members, or are reset with the port's last.
    fn admit_held(&mut self, io: &mut Io) {
        let (apps, listeners) = (&self.apps, &self.listeners);
        let live = |&(id, ls): &(u32, u32), port: u16| {
            apps.get(&id)
                .and_then(|a| a.socks.get(ls as usize))
                .is_some_and(|k| k.kind == Kind::Listen(port))
                && listeners
                    .get(&port)
                    .is_some_and(|l| l.members.contains(&(id, ls)))
        };
        let moved = self
            .held
            .iter()
            .find(|(k, q)| q.front().is_none_or(|c| !live(k, c.port)))
            .map(|(&k, _)| k);
        if let Some(key) = moved {
            for c in self.held.remove(&key).unwrap_or_default() {
                self.knock(io, c.h, listener_cookie(c.port), c.remote);
            }
            return; // the rest next cycle
        }
        let ip = self.ip(io);
        let mut broken = None;
        self.held.retain(|&key, q| {
            let Some(app) = self.apps.get_mut(&key.0) else {
                return true;
            };
            while let Some(&c) = q.front() {
                match Self::admit(app, io, ip, key, c) {
                    Admit::Queued => {
                        q.pop_front();
                    }
                    Admit::Wait => return true,
                    Admit::Broken => {
                        broken = Some((key, c.port));
                        return true;
                    }
                }
            }
            false
        });
        if let Some((key, port)) = broken {
            self.listener_broken(io, key, port);
        }
    }

    /// Drop the members of UDP group `port` that are no longer its
    /// sockets (closed, failed, their app gone); the group's socket closes
    /// with the last. False if the group is gone.
    fn prune_udp_group(&mut self, io: &mut Io, port: u16) -> bool {
        let Some(g) = self.udp_groups.get_mut(&port) else {
            return false;
        };
        let (apps, h) = (&self.apps, g.h);
        g.members.retain(|&(id, s)| {
            apps.get(&id)
                .and_then(|a| a.socks.get(s as usize))
                .is_some_and(|k| k.kind == Kind::Udp(h) && k.reuseport)
        });
        if g.members.is_empty() {
            let _ = io.udp_close(h);
            self.udp_groups.remove(&port);
            return false;
        }
        true
    }

    /// Deliver what UDP group `port` received: each member's held
    /// datagram first, then the stack's queue, each datagram to the member
    /// its source hashes to. A member whose ring is full holds one; more
    /// for it are dropped (counted), as a full socket buffer drops, so one
    /// slow reader does not stop the others.
    fn pump_udp_group(&mut self, io: &mut Io, port: u16) {
        if !self.prune_udp_group(io, port) {
            return;
        }
        let Some(g) = self.udp_groups.get(&port) else {
            return;
        };
        let apps = &mut self.apps;
        if let [(id, s)] = g.members[..] {
            // One member (a socket that may share its port, alone on it):
            // as a socket of its own, datagrams wait in the stack's queue
            // while its ring is full.
            if let Some(app) = apps.get_mut(&id) {
                Self::fill_udp(app, io, s, Some(g.h));
            }
            return;
        }
        for &(id, s) in &g.members {
            if let Some(app) = apps.get_mut(&id) {
                Self::fill_udp(app, io, s, None);
            }
        }
        // Who may take what, settled once for the datagrams waiting (no
        // member connects or binds meanwhile). A member connected to the
        // source takes it (Linux ranks a connected socket above the
        // group's hash); the rest go by hash among the members connected
        // to no one — those bound to the service's address, if any, ahead
        // of the wildcard ones (Linux's `compute_score`; every datagram
        // the stack takes is to that address).
        let peers: Vec<u64> = g
            .members
            .iter()
            .map(|&(id, s)| {
                apps.get(&id)
                    .and_then(|a| a.socks.get(s as usize))
                    .map_or(u64::MAX, |k| k.peer)
            })
            .collect();
        let unconnected = || g.members.iter().zip(&peers).filter(|(_, &p)| p == 0);
        let only_specific = unconnected().any(|(&m, _)| is_specific(apps, m));
        let open: Vec<(u32, u32)> = unconnected()
            .filter(|(&m, _)| !only_specific || is_specific(apps, m))
            .map(|(&m, _)| m)
            .collect();
        while let Ok(Some(d)) = io.udp_recv(g.h) {
            let src = d.src;
            let key = pack(u32::from(*src.ip()), src.port());
            let to = match g.members.iter().zip(&peers).find(|(_, &p)| p == key) {
                Some((&m, _)) => m,
                None if open.is_empty() => continue, // every member is another's
                None => open[flow_index(src, open.len())],
            };
            let (id, s) = to;
            let Some(app) = apps.get_mut(&id) else {
                continue;
            };
            if app.udp_held[s as usize].is_some() {
                UDP_GROUP_DROPS.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            app.udp_held[s as usize] = Some(d);
            Self::fill_udp(app, io, s, None);
        }
    }

    /// Drop the members of `port`'s listener group that no longer listen
    /// there (failed on a protocol error, their app gone); the stack's
    /// listener closes with the last. False if the port has none left.
    fn prune_listener(&mut self, io: &mut Io, port: u16) -> bool {
        let Some(l) = self.listeners.get_mut(&port) else {
            return false;
        };
        let apps = &self.apps;
        l.members.retain(|&(id, s)| {
            apps.get(&id)
                .and_then(|a| a.socks.get(s as usize))
                .is_some_and(|k| k.kind == Kind::Listen(port))
        });
        if l.members.is_empty() {
            let _ = io.unlisten(port);
            self.listeners.remove(&port);
            return false;
        }
        true
    }

    /// Socket `member` stops listening on `port`; the stack's listener
    /// closes with the last one.
    fn unlisten(
        listeners: &mut HashMap<u16, Listener>,
        io: &mut Io,
        port: u16,
        member: (u32, u32),
    ) {
        let Some(l) = listeners.get_mut(&port) else {
            return;
        };
        l.members.retain(|m| *m != member);
        if l.members.is_empty() {
            let _ = io.unlisten(port);
            listeners.remove(&port);
        }
    }

    /// Before a bind of a UDP socket of app `id` that may share `port`:
    /// if a socket bound to it alone lets it be shared now — it set
    /// `SO_REUSEADDR` or `SO_REUSEPORT` after its own bind (the up slot's
    /// [`opts::REUSEADDR`]/[`opts::REUSEPORT`]) — and is the same user's,
    /// it becomes the first member of the port's group, which the bind
    /// then joins. Linux's `udp_lib_lport_inuse` looks at the holder's
    /// flags as they are at the new bind: ntpd binds its wildcard socket
    /// alone, then sets `SO_REUSEADDR` on it before it binds one to each
    /// address (until 2026-11-30 those binds failed with `EADDRINUSE`, and
    /// ntpd answered no request).
    fn share_udp_port(&mut self, io: &mut Io, id: u32, port: u16) {
        if port == 0 || self.udp_groups.contains_key(&port) {
            return;
        }
        let uid = self.apps.get(&id).map_or(u32::MAX, |a| a.uid);
        let holder = self.apps.iter().find_map(|(&hid, a)| {
            a.socks.iter().enumerate().find_map(|(s, k)| match k.kind {
                Kind::Udp(h) if h.port() == port => Some((hid, s as u32, h)),
                _ => None,
            })
        });
        let Some((hid, hs, h)) = holder else {
            return;
        };
        let a = &self.apps[&hid];
        let now = a.r.up_slot(hs).opts.load(Ordering::Acquire);
        let shares =
            a.socks[hs as usize].reuseport || now & (opts::REUSEADDR | opts::REUSEPORT) != 0;
        if !shares
            || a.uid != uid
            || uid == u32::MAX
            || io.udp_set_cookie(h, udp_group_cookie(port)).is_err()
        {
            return;
        }
        self.udp_groups.insert(
            port,
            UdpGroup {
                h,
                members: vec![(hid, hs)],
                uid,
            },
        );
        if let Some(a) = self.apps.get_mut(&hid) {
            a.socks[hs as usize].reuseport = true;
        }
    }

    /// A TCP port for a bind to port 0: one of the stack's ephemeral range
    /// that no socket holds bound or listening, searched from a start no
    /// one can guess (RFC 6056 algorithm 1, `Stack::draw_free_port`; until
    /// 2026-11-29 from the last one given: ProFTPD's active-mode data
    /// connections came from 49152, 49153, ...).
    fn free_tcp_port(&mut self, io: &mut Io) -> Option<u16> {
        let held: std::collections::HashSet<u16> = self
            .apps
            .values()
            .flat_map(|a| a.socks.iter())
            .filter_map(|s| match s.kind {
                Kind::Bound(p) | Kind::Listen(p) => Some(p),
                _ => None,
            })
            .collect();
        io.draw_free_port(|p| held.contains(&p) || self.listeners.contains_key(&p))
    }

    /// Whether TCP `port` is taken for a socket of app `id` that asks to
    /// bind it (with SO_REUSEPORT or not): a socket bound or listening on
    /// it may share it only if both set SO_REUSEPORT and are one user's,
    /// as on Linux.
    fn port_taken(&self, id: u32, port: u16, reuseport: bool, reuseaddr: bool) -> bool {
        let uid = self.apps.get(&id).map_or(u32::MAX, |a| a.uid);
        if let Some(l) = self.listeners.get(&port) {
            if !l.admits(reuseport, uid) {
                return true;
            }
        }
        // A socket bound and not listening shares its port with one that
        // SO_REUSEPORT groups with it, or if both set SO_REUSEADDR (Linux's
        // `inet_csk_bind_conflict`: FTP servers bind each active-mode data
        // connection to port 20).
        // (The holder's flags as they are now, as Linux's: set after its
        // bind, they count.)
        self.apps.values().any(|a| {
            a.socks.iter().enumerate().any(|(i, s)| {
                let now = || a.r.up_slot(i as u32).opts.load(Ordering::Relaxed);
                s.kind == Kind::Bound(port)
                    && !(reuseport
                        && (s.reuseport || now() & opts::REUSEPORT != 0)
                        && a.uid == uid
                        && uid != u32::MAX)
                    && !(reuseaddr && (s.reuseaddr || now() & opts::REUSEADDR != 0))
            })
        })
    }

    /// Take up what app `id` marked in its bitmap: the marked words first
    /// (one look-up of the app; `marked` is scratch), then the sockets
    /// they name.
    fn scan_app(&mut self, io: &mut Io, id: u32, marked: &mut Vec<(u32, u64)>) {
        marked.clear();
        if let Some(app) = self.apps.get_mut(&id) {
            // First the connections the last budget left bytes in, in
            // turn (one that runs out again goes to the back).
            for _ in 0..app.later.len() {
                let Some(s) = app.later.pop_front() else {
                    break;
                };
                app.later_bits[s as usize / 64] &= !(1 << (s % 64));
                Self::pump_tx(app, io, s);
            }
            for w in 0..self.layout.slots / 64 {
                let word = app.r.bitmap_word(w);
                if word.load(Ordering::Relaxed) != 0 {
                    marked.push((w, word.swap(0, Ordering::AcqRel)));
                }
            }
        }
        for &(w, mut bits) in marked.iter() {
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                self.activity(io, id, w * 64 + b);
            }
        }
    }

    fn with_conn(&mut self, cookie: u64, h: ConnHandle) -> Option<(&mut AppState, u32)> {
        let (id, s) = uncookie(cookie);
        let app = self.apps.get_mut(&id)?;
        match app.socks.get(s as usize)?.kind {
            Kind::Conn(x) if x == h => Some((app, s)),
            _ => None,
        }
    }
}

/// Whether waiter `w` is to be rung for the sockets changed (`changed`)
/// or given transmit room (`tx`): for a change of a socket in its
/// interest ([`Regions::interest`], [`Regions::tx_interest`]). A waiter
/// that watches some sockets only exclusively (`exclusive`:
/// `EPOLLEXCLUSIVE` epoll items, a blocking accept or UDP receive;
/// [`Regions::excl_interest`]) shares their wake-ups with the others: Linux
/// wakes one exclusive sleeper per new connection of a listener or
/// datagram of a UDP socket, and every sleeper for a change of a
/// listener's state. So a changed listener still listening, or UDP socket
/// without an error to report, rings as many of its exclusive waiters (in
/// index order) as it had connections or datagrams queued when this
/// ringing first looked at it, at least one (`claims`: by slot, the
/// waiters rung so far in this ringing and that number; the queue itself
/// shrinks as the threads rung first take from it, which left the third
/// of three blocked acceptors asleep with a connection queued); any other
/// change rings the waiter as any waiter. A rung waiter counts as one for
/// each such socket it wants.
fn wants_change(
    (r, socks): (&Regions, &[Sock]),
    w: u32,
    (changed, tx): (&[u64], &[u64]),
    exclusive: bool,
    claims: &mut Vec<(u32, u32, u32)>,
) -> bool {
    let mut wanted = false;
    let mut mine = [0u32; 4];
    let mut n_mine = 0;
    for i in 0..changed.len() {
        if changed[i] | tx[i] == 0 {
            continue;
        }
        let word = i as u32;
        let hit = (changed[i] & r.interest(w, word).load(Ordering::Relaxed))
            | (tx[i] & r.tx_interest(w, word).load(Ordering::Relaxed));
        if hit == 0 {
            continue;
        }
        let e = if exclusive {
            r.excl_interest(w, word).load(Ordering::Relaxed)
        } else {
            0
        };
        if hit & !e != 0 {
            if !exclusive {
                return true;
            }
            wanted = true;
        }
        let mut bits = hit & e;
        while bits != 0 {
            let s = word * 64 + bits.trailing_zeros();
            bits &= bits - 1;
            let (rung, budget) = match claims.iter().find(|c| c.0 == s) {
                Some(c) => (c.1, c.2),
                None => match exclusive_queue(r, socks, s) {
                    Some(queued) => {
                        claims.push((s, 0, queued.max(1)));
                        (0, queued.max(1))
                    }
                    None => {
                        wanted = true;
                        continue;
                    }
                },
            };
            wanted |= rung < budget;
            if n_mine < mine.len() {
                mine[n_mine] = s;
                n_mine += 1;
            } else {
                // (More such sockets than kept: the rest ring as any waiter.)
                wanted = true;
            }
        }
    }
    if wanted {
        for c in claims.iter_mut().filter(|c| mine[..n_mine].contains(&c.0)) {
            c.1 += 1;
        }
    }
    wanted
}

/// What socket `s`, watched exclusively, holds for its exclusive waiters,
/// one each: a listener's connections queued, a UDP socket's datagrams in
/// its receive ring (counted by their headers, from the app's head to our
/// tail: an app that moved its head elsewhere only miscounts its own
/// wake-ups; at most 1,024). None for any other change (a listener that
/// stopped listening, a UDP error): every waiter is rung.
fn exclusive_queue(r: &Regions, socks: &[Sock], s: u32) -> Option<u32> {
    let d = r.down_slot(s);
    match socks.get(s as usize) {
        Some(k) if k.dgram => {
            if d.flags.load(Ordering::Acquire) & flag::ERROR != 0 {
                return None;
            }
            let (head, tail) = (r.up_slot(s).rx_head.load(Ordering::Acquire), k.rx_tail);
            if head > tail || tail - head > u64::from(r.layout().ring) {
                return Some(1);
            }
            let (mut at, mut n) = (head, 0u32);
            while at < tail && n < 1024 {
                let mut len = [0u8; 2];
                r.rx_read(s, at, &mut len);
                at += (layout::DGRAM_HDR + usize::from(u16::from_le_bytes(len))) as u64;
                n += 1;
            }
            Some(n)
        }
        _ if d.state.load(Ordering::Acquire) == state::LISTEN => Some(
            d.acc_tail
                .load(Ordering::Acquire)
                .wrapping_sub(r.up_slot(s).acc_head.load(Ordering::Acquire))
                .min(r.acc_capacity()),
        ),
        _ => None,
    }
}

/// Append the slots of the sockets a batch changed (`changed` or `tx`
/// bits set) to the app's change log, each once (see
/// [`layout::DownHeader::chlog_head`]); more than half the log's length
/// moves its indices past every reader's reach instead, so that each looks
/// at all its sockets.
fn publish_changes(r: &Regions, changed: &[u64], tx: &[u64]) {
    let h = r.down_header();
    let n: u64 = changed
        .iter()
        .zip(tx)
        .map(|(&c, &t)| u64::from((c | t).count_ones()))
        .sum();
    if n == 0 {
        return;
    }
    let head = h.chlog_head.load(Ordering::Relaxed);
    if n > layout::CHLOG / 2 {
        let end = head + layout::CHLOG + 1;
        h.chlog_reserve.store(end, Ordering::Relaxed);
        h.chlog_head.store(end, Ordering::Release);
        return;
    }
    h.chlog_reserve.store(head + n, Ordering::Relaxed);
    // Entries written after this are seen by a reader that also sees the
    // reserve above (the reader's fence pairs with this one).
    fence(Ordering::Release);
    let mut k = head;
    for (w, (&c, &t)) in changed.iter().zip(tx).enumerate() {
        let mut bits = c | t;
        while bits != 0 {
            let b = bits.trailing_zeros();
            bits &= bits - 1;
            r.chlog(k).store(w as u32 * 64 + b, Ordering::Relaxed);
            k += 1;
        }
    }
    h.chlog_head.store(k, Ordering::Release);
}

/// Build [`Regions`] over two mappings.
fn unsafe_regions(down: &Mapping, up: &Mapping, l: Layout) -> Regions {
    assert!(down.len() >= l.down_len() && up.len() >= l.up_len());
    regions_of(down.as_ptr(), up.as_ptr(), l)
}

#[allow(unsafe_code)]
fn regions_of(down: *mut u8, up: *mut u8, l: Layout) -> Regions {
    // SAFETY: callers pass the bases of two live, page-aligned mappings of
    // at least the layout's lengths (asserted in `unsafe_regions`) that
    // their AppState owns for as long as the Regions is used.
    unsafe { Regions::new(down, up, l) }
}

impl App for Service {
    fn start(&mut self, io: &mut Io) {
        if let Ok(b) = io.doorbell().try_clone_to_owned() {
            let _ = self.shared.bell.set(b);
        }
    }

    fn event(&mut self, io: &mut Io, ev: Event) {
        self.nap = NAP_MIN;
        if self.passed_event(io, &ev) || self.orphan_event(io, &ev) {
            return;
        }
        match ev {
            Event::Knock {
                handle,
                listener_cookie,
                remote,
                ..
            } => self.knock(io, handle, listener_cookie, remote),
            Event::Connected { handle, cookie } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    app.r
                        .down_slot(s)
                        .state
                        .store(state::ESTABLISHED, Ordering::Release);
                    app.changed(s);
                    Self::pump_tx(app, io, s);
                }
            }
            Event::Recv { handle, cookie, .. } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    Self::pump_rx(app, io, s);
                }
            }
            Event::Urgent {
                handle,
                cookie,
                mark,
                byte,
            } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    Self::urgent(app, s, mark, byte);
                }
            }
            Event::UdpRecv { handle, cookie } if udp_group_of(cookie).is_some() => {
                // (A group's members are not connected: no error is theirs.)
                let _ = io.udp_take_error(handle);
                let port = udp_group_of(cookie).unwrap_or(0);
                if self.udp_groups.get(&port).is_some_and(|g| g.h == handle) {
                    self.pump_udp_group(io, port);
                }
            }
            Event::UdpRecv { handle, cookie } => {
                let (id, s) = uncookie(cookie);
                if let Some(app) = self.apps.get_mut(&id) {
                    // (Not a group's member: a handle names only its port,
                    // and a stale event may find the slot in a group now.)
                    if app
                        .socks
                        .get(s as usize)
                        .is_some_and(|k| k.kind == Kind::Udp(handle) && !k.reuseport)
                    {
                        if let Ok(Some((to, code))) = io.udp_take_error(handle) {
                            Self::udp_icmp_error(app, s, to, code);
                        }
                        Self::pump_udp_rx(app, io, s);
                    } else {
                        let _ = io.udp_take_error(handle);
                    }
                }
            }
            Event::Sent { handle, cookie, .. } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    Self::pump_tx(app, io, s);
                }
            }
            Event::PeerClosed { handle, cookie } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    app.socks[s as usize].peer_closed = true;
                    Self::pump_rx(app, io, s);
                }
            }
            Event::Dead {
                handle,
                cookie,
                reason,
            } => {
                if let Some((app, s)) = self.with_conn(cookie, handle) {
                    let rq = app.r.up_slot(s).req.load(Ordering::Acquire);
                    if rq & (req::CLOSE | req::ABORT) != 0 {
                        app.release(s);
                    } else {
                        // The program holds the socket: keep the
                        // connection's last figures, read before the stack
                        // lets it go (below).
                        if let Ok(t) = io.stack().tcp_info(handle) {
                            // Linux's `tcp_done`: the state is CLOSE.
                            let info = TcpInfo {
                                state: linux_tcp_state(State::Closed),
                                ..wire_info(&t)
                            };
                            app.gone_info.insert(s, info);
                        }
                        // Reset after the peer's FIN (CLOSE-WAIT): EPIPE,
                        // as Linux's `tcp_reset` says there.
                        let e = match reason {
                            DeadReason::Reset if app.socks[s as usize].peer_closed => libc::EPIPE,
                            r => dead_errno(r),
                        };
                        app.fail(s, e);
                    }
                }
                let _ = io.close(handle);
            }
        }
    }

    fn poll(&mut self, io: &mut Io) -> bool {
        let mut work = false;
        if self.shared.queued.load(Ordering::Acquire) {
            self.shared.queued.store(false, Ordering::SeqCst);
            let reqs: Vec<Request> = self.shared.queue.lock().unwrap().drain(..).collect();
            for r in reqs {
                work = true;
                self.control(io, r);
            }
        }
        if !self.passes.is_empty() {
            self.expire_passes(io);
        }
        if !self.orphans.is_empty() {
            self.expire_orphans(io);
        }
        // UDP sockets the stack's full transmit queue held back.
        for (id, s) in std::mem::take(&mut self.udp_retry) {
            work = true;
            self.activity(io, id, s);
        }
        // Only applications whose activity word moved; the list is reused
        // (no allocation per cycle).
        let mut ids = std::mem::take(&mut self.active);
        ids.clear();
        for (id, app) in self.apps.iter_mut() {
            let act = app.r.up_header().activity.load(Ordering::Acquire);
            if act != app.last_activity || !app.later.is_empty() {
                app.last_activity = act;
                ids.push(*id);
            }
        }
        let mut marked = std::mem::take(&mut self.marked);
        for &id in &ids {
            work = true;
            self.scan_app(io, id, &mut marked);
        }
        self.active = ids;
        self.marked = marked;
        if !self.held.is_empty() {
            self.admit_held(io);
        }
        self.spill(io);
        if work {
            self.nap = NAP_MIN;
        }
        work
    }

    fn max_nap(&mut self) -> Option<Duration> {
        if self.apps.is_empty() {
            // Nothing to look at: a request rings the core's doorbell, and
            // orphans and passes wait in seconds.
            return Some(Duration::from_millis(100));
        }
        if !self.held.is_empty() {
            // Connections wait for room that a program's close or accept
            // may make without a signal the core sleeps on.
            return None;
        }
        let nap = self.nap;
        self.nap = (nap * 2).min(NAP_MAX);
        // Right after work, the engine's own tick (1 ms, aligned to its
        // clock), as before naps grew: memcached's median at 20 k
        // requests/s was 1.2 µs higher with `now + 1 ms` (one A/B, four
        // rounds each) and the same with this.
        (nap > NAP_MIN).then_some(nap)
    }

    /// Waiters are rung once the cycle's frames are out. Having rung one
    /// that sleeps on the service's own CPU, the service yields that CPU,
    /// so the woken thread runs now rather than when the service next
    /// sleeps: its replies are then in the rings at the service's next
    /// cycle, and it need not ring the doorbell of a sleeping service.
    fn transmitted(&mut self, io: &mut Io) {
        for h in self.doomed.drain(..) {
            let _ = io.abort(h);
        }
        // The service's CPU, read at the first ring (most cycles ring none).
        let mut here = None;
        // The waiters rung on this CPU (app, index), the first few.
        let mut rung_here = [(0u32, 0usize); 8];
        let mut n_here = 0usize;
        for (&id, app) in self.apps.iter_mut() {
            // A new cycle's budget (one that took none never comes here).
            app.tx_left = TX_BUDGET;
            if !app.dirty {
                continue;
            }
            app.dirty = false;
            // (A closing reset frees its socket, which marks the app.)
            for h in app.doomed.drain(..) {
                let _ = io.abort(h);
            }
            publish_changes(&app.r, &app.changed_bits, &app.tx_bits);
            app.r.down_header().event_seq.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let h = app.r.up_header();
            let all = std::mem::take(&mut app.wake_all);
            for (w, word) in h.armed.iter().enumerate() {
                let mut bits = word.load(Ordering::Acquire);
                let any = if all {
                    u64::MAX
                } else {
                    h.wants_any[w].load(Ordering::Acquire)
                };
                let excl = h.excl_any[w].load(Ordering::Acquire);
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let idx = w * 64 + b;
                    // Ring a waiter only for a change it waits for (a
                    // thread blocked on its listener is not woken by
                    // another thread's connections).
                    let (w32, r) = (idx as u32, &app.r);
                    let wanted = any & (1 << b) != 0
                        || wants_change(
                            (r, &app.socks),
                            w32,
                            (&app.changed_bits, &app.tx_bits),
                            excl & (1 << b) != 0,
                            &mut app.claims,
                        );
                    if !wanted {
                        continue;
                    }
                    word.fetch_and(!(1 << b), Ordering::AcqRel);
                    if let Some(fd) = &app.waiters[idx] {
                        os::ring(fd.as_raw_fd());
                        let here = *here.get_or_insert_with(os::cpu_tag);
                        if here != 0 && h.waiter_cpu[idx].load(Ordering::Relaxed) == here {
                            if let Some(slot) = rung_here.get_mut(n_here) {
                                *slot = (id, idx);
                            }
                            n_here += 1;
                        }
                    }
                }
            }
            app.changed_bits.fill(0);
            app.tx_bits.fill(0);
            app.claims.clear();
        }
        if n_here == 0 {
            return;
        }
        // A woken thread often runs at once, inside the ring's system call
        // (the scheduler lets it preempt the service), and is back asleep
        // — armed again — when the ring returns: then a yield would only
        // cost a system call.
        let ran = n_here <= rung_here.len()
            && rung_here[..n_here].iter().all(|&(id, idx)| {
                self.apps.get(&id).is_some_and(|app| {
                    let h = app.r.up_header();
                    h.armed[idx / 64].load(Ordering::Acquire) & 1 << (idx % 64) != 0
                })
            });
        if ran {
            self.yields_already_ran += 1;
        } else {
            // Unless recent yields showed another thread competing for
            // the CPU (see `YieldPacer`).
            self.yields.yield_cpu();
        }
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.bells.as_raw_fd())
    }

    fn wait_fd_ready(&mut self, _io: &mut Io) {
        // Taken here, after a sleep the doorbells ended, rather than
        // before every sleep: a ring before this is answered by the scan
        // of activity words that follows; one after it leaves a new edge.
        // A ring while awake leaves an edge that ends the next sleep at
        // once (one spurious cycle, which takes it), instead of a system
        // call before each sleep.
        os::take_edges(self.bells.as_raw_fd());
    }

    fn sleep(&mut self, _io: &mut Io) -> bool {
        // A ring after the flag below is seen by the scan, or ends the
        // core's sleep at once.
        for app in self.apps.values() {
            app.r.down_header().svc_sleeping.store(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
        let busy = self.shared.queued.load(Ordering::SeqCst)
            || self
                .apps
                .values()
                .any(|a| a.r.up_header().activity.load(Ordering::SeqCst) != a.last_activity);
        if busy {
            self.wake(_io);
        }
        !busy
    }

    fn wake(&mut self, _io: &mut Io) {
        let cpu = u32::from(os::cpu_tag());
        for app in self.apps.values() {
            let h = app.r.down_header();
            h.svc_sleeping.store(0, Ordering::SeqCst);
            h.svc_cpu.store(cpu, Ordering::Relaxed);
        }
    }
}

/// Ask the service at `socket` for its statistics (JSON).
pub fn query_stats(socket: &Path) -> io::Result<String> {
    query(socket, op::STATS, 0)
}

/// Ask the service at `socket` for every socket of its applications
/// (the JSON objects of `SOCKETS` replies, page after page; each page is
/// a fresh look, so a socket may move between two of them).
pub fn query_sockets(socket: &Path) -> io::Result<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    let mut cursor = 0u64;
    loop {
        let text = query(socket, op::SOCKETS, cursor)?;
        let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
        let mut v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| bad(format!("malformed sockets reply: {e}")))?;
        match v["sockets"].take() {
            serde_json::Value::Array(page) => all.extend(page),
            _ => return Err(bad("sockets reply without a list".into())),
        }
        match v["next"].as_u64() {
            Some(n) if n > cursor => cursor = n,
            _ => return Ok(all),
        }
    }
}

/// One request `op` (with argument `b`) to the service at `socket`; the
/// text after its reply.
fn query(socket: &Path, op: u32, b: u64) -> io::Result<String> {
    let sock = os::connect_once(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "no Ixora service on {} ({e}); start one with `ixora serve`",
                socket.display()
            ),
        )
    })?;
    let deadline = Instant::now() + Duration::from_secs(5);
    os::send_msg(sock.as_fd(), &Msg::new(op, 0, 0, b).encode(), &[], deadline)?;
    let mut buf = vec![0u8; 1 << 20];
    let (n, _) = os::recv_msg(sock.as_fd(), &mut buf, deadline)?;
    let rep = (n >= Msg::LEN).then(|| Msg::decode(&buf)).flatten();
    match rep {
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed reply from the service",
        )),
        Some(m) if m.a < 0 => Err(io::Error::from_raw_os_error(-m.a as i32)),
        Some(_) => Ok(String::from_utf8_lossy(&buf[Msg::LEN..n]).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u32, reuseport: bool, uid: u32) -> Listener {
        Listener {
            members: (0..n).map(|s| (1, s)).collect(),
            reuseport,
            uid,
            epoch: 1,
        }
    }

    #[test]
    fn a_reuseport_group_spreads_flows_and_keeps_each_on_one_member() {
        let g = group(3, true, 0);
        let mut hits = [0u32; 3];
        for port in 32768..(32768 + 3000u16) {
            let r = SocketAddrV4::new(Ipv4Addr::new(198, 18, 9, 1), port);
            let (_, s) = g.pick(r, |_| false);
            assert_eq!(g.pick(r, |_| false), (1, s), "one flow, one member");
            hits[s as usize] += 1;
        }
        // 3000 flows over 3 members: each within 25% of its share.
        assert!(hits.iter().all(|&h| (750..=1250).contains(&h)), "{hits:?}");
    }

    #[test]
    fn only_reuseport_sockets_of_the_same_user_join() {
        assert!(group(1, true, 1000).admits(true, 1000));
        assert!(!group(1, true, 1000).admits(false, 1000));
        assert!(!group(1, false, 1000).admits(true, 1000));
        assert!(!group(1, true, 1000).admits(true, 0), "another user");
        assert!(
            !group(1, true, u32::MAX).admits(true, u32::MAX),
            "unknown user"
        );
    }

    #[test]
    fn listener_cookies_never_name_an_app_socket() {
        for port in [0u16, 1, 80, 65535] {
            let c = listener_cookie(port);
            assert_eq!(c as u16, port);
            assert!(uncookie(c).0 >= 1 << 30, "app ids stay below 2^30");
            assert_eq!(udp_group_of(c), None);
            let u = udp_group_cookie(port);
            assert_eq!(udp_group_of(u), Some(port));
            assert!(uncookie(u).0 >= 1 << 30);
        }
        for id in [0u32, 1, (1 << 30) - 1] {
            for slot in [0u32, 65535, u32::MAX] {
                let c = cookie(id, slot);
                assert_eq!(udp_group_of(c), None, "app {id} slot {slot}");
                assert_eq!((pass_of(c), orphan_of(c)), (None, None));
            }
        }
        // Passes and orphans: each its own, none an app's, a listener's or
        // a UDP group's.
        for id in [0u32, 1, u32::MAX] {
            let (p, o) = (pass_cookie(id), orphan_cookie(id));
            assert_eq!((pass_of(p), orphan_of(p)), (Some(id), None));
            assert_eq!((pass_of(o), orphan_of(o)), (None, Some(id)));
            for c in [p, o] {
                assert!(uncookie(c).0 >= 1 << 30);
                assert_eq!(udp_group_of(c), None);
            }
        }
        for port in [0u16, 80, 65535] {
            for c in [listener_cookie(port), udp_group_cookie(port)] {
                assert_eq!((pass_of(c), orphan_of(c)), (None, None));
            }
        }
    }
}
