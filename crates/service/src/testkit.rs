//! A service to attack, for tests and fuzzing (feature `testkit`).
//!
//! [`Rig`] runs the stack service in-process on one end of the loopback
//! wire (`ixora_io::loopback`), with an echo server (port 7) on a second
//! engine at the other end. [`RawApp`] is an application that speaks the
//! channel by hand — the control messages and the two shared regions —
//! without the preload library, so that it can send what the shim never
//! would: any control message, any word anywhere in its up region.
//! [`RawApp::echo`] is the well-behaved conversation a test uses to show
//! that the service still serves everyone else.
//!
//! Addresses: 198.18.9.2/24 (the service) and 198.18.9.1 (the echo peer),
//! on an in-process wire: nothing reaches a real interface.
#![allow(unsafe_code)]

use crate::{start, Service, ServiceConfig};
use ixora_channel::ctl::{op, Msg};
use ixora_channel::layout::{pack, req, state, Regions};
use ixora_channel::os::{self, Mapping};
use ixora_core::wire::ethernet::MacAddr;
use ixora_engine::echo::EchoService;
use ixora_engine::ev::{EvApp, EvConfig};
use ixora_engine::{run, EngineConfig, EngineReport};
use ixora_io::loopback;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The service's address on the rig's wire.
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 2);
/// The echo peer's address.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 1);
/// The echo peer's port.
pub const ECHO_PORT: u16 = 7;

/// The service and an echo peer on an in-process wire. Stopped on drop.
pub struct Rig {
    /// The service's control socket.
    pub socket: PathBuf,
    stop: Arc<AtomicBool>,
    service: Option<JoinHandle<io::Result<EngineReport>>>,
    peer: Option<JoinHandle<io::Result<EngineReport>>>,
    _control: crate::Control,
}

impl Rig {
    /// Start the service (control socket named after `tag` and this
    /// process) and the echo peer.
    pub fn start(tag: &str) -> io::Result<Rig> {
        let (a, b) = loopback::pair(
            (MacAddr([2, 0, 0, 0, 9, 1]), MacAddr([2, 0, 0, 0, 9, 2])),
            1,
            1500,
        );
        let socket =
            std::env::temp_dir().join(format!("ixora-testkit-{tag}-{}.sock", std::process::id()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut cfg = ServiceConfig::new(socket.clone());
        cfg.slots = SLOTS;
        cfg.ring = 16 * 1024;
        cfg.pass_timeout = PASS_TIMEOUT;
        let (svc, control) = start(&cfg, stop.clone())?;
        let mut ecfg = EngineConfig::new(SERVICE_IP, 24);
        ecfg.hugepages = false;
        ecfg.pool_chunks = 2048;
        let mut pcfg = ecfg.clone();
        pcfg.ip = PEER_IP;
        crate::tune_tcp(&mut ecfg.tcp);
        let svc: Mutex<Option<Service>> = Mutex::new(Some(svc));
        let st = stop.clone();
        let service = std::thread::Builder::new()
            .name("testkit-service".into())
            .spawn(move || {
                run(
                    Arc::new(b),
                    &ecfg,
                    |_| svc.lock().unwrap().take().expect("one core"),
                    st,
                )
            })?;
        let st = stop.clone();
        let peer = std::thread::Builder::new()
            .name("testkit-peer".into())
            .spawn(move || {
                run(
                    Arc::new(a),
                    &pcfg,
                    |_| EvApp::new(EchoService { port: ECHO_PORT }, EvConfig::default()),
                    st,
                )
            })?;
        // (`start` bound the control socket: apps may attach at once.)
        Ok(Rig {
            socket,
            stop,
            service: Some(service),
            peer: Some(peer),
            _control: control,
        })
    }

    /// Whether the service's engine still runs (it ends only when stopped,
    /// on an error, or when it panicked).
    pub fn alive(&self) -> bool {
        self.service.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stop both engines; the service's result (an error if it failed or
    /// panicked).
    pub fn finish(mut self) -> io::Result<EngineReport> {
        self.halt()
    }

    fn halt(&mut self) -> io::Result<EngineReport> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.peer.take() {
            let _ = p.join();
        }
        match self.service.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the service panicked"))),
            None => Err(io::Error::other("already stopped")),
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if self.service.is_some() {
            let _ = self.halt();
        }
    }
}

/// An application attached by hand: its control connection and its two
/// regions. Dropping it ends the connection, as a process's exit would.
pub struct RawApp {
    ctl: OwnedFd,
    r: Regions,
    bell: OwnedFd,
    /// Whether [`RawApp::kick`] rings the doorbell (see
    /// [`RawApp::set_ringing`]).
    ringing: AtomicBool,
    /// The application's id at the service.
    pub id: u32,
    /// The wait end of waiter 0, given with `ATTACH` (none after `REMAP`).
    first_waiter: Option<OwnedFd>,
    // Declared after `r`: unmapped only after the last use of it.
    _down: Mapping,
    up: Mapping,
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

impl RawApp {
    /// Attach to the service at `rig`.
    pub fn attach(rig: &Rig) -> io::Result<RawApp> {
        let ctl = os::connect_once(&rig.socket)?;
        let g = ixora_channel::attach::attach(ctl.as_fd(), std::process::id(), deadline())?;
        Ok(RawApp::granted(ctl, g))
    }

    fn granted(ctl: OwnedFd, g: ixora_channel::attach::Granted) -> RawApp {
        // SAFETY: `down` and `up` are page-aligned mappings of the layout's
        // lengths, owned by the RawApp built below, which drops them only
        // after its last use of `r`.
        let r = unsafe { Regions::new(g.down.as_ptr(), g.up.as_ptr(), g.layout) };
        RawApp {
            ctl,
            r,
            bell: g.bell,
            ringing: AtomicBool::new(true),
            id: g.id,
            first_waiter: g.waiter,
            _down: g.down,
            up: g.up,
        }
    }

    /// The same application seen afresh, as a program this process
    /// `exec`ed sees it: its regions mapped again (`REMAP`) on a copy of
    /// this control connection (the service sees one connection).
    pub fn remap(&self) -> io::Result<RawApp> {
        let ctl = self.ctl.try_clone()?;
        let g = ixora_channel::attach::remap(ctl.as_fd(), deadline())?;
        Ok(RawApp::granted(ctl, g))
    }

    /// The wait end of waiter 0, which `ATTACH` gave this (attaching)
    /// process; none after `REMAP`.
    pub fn first_waiter(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.first_waiter.as_ref().map(|w| w.as_fd())
    }

    /// The inodes of this app's two regions (memfds), as this process's
    /// own mappings of them name them in `/proc/self/maps`.
    pub fn region_inodes(&self) -> Vec<u64> {
        let bases = [self._down.as_ptr() as u64, self.up.as_ptr() as u64];
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        maps.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let start = u64::from_str_radix(f.next()?.split('-').next()?, 16).ok()?;
                let inode = f.nth(3)?.parse::<u64>().ok()?;
                bases.contains(&start).then_some(inode)
            })
            .collect()
    }

    /// The regions, as the shim would use them.
    pub fn regions(&self) -> &Regions {
        &self.r
    }

    /// Send control message `m` with `fds`; the reply's length in `buf`
    /// and the descriptors it carried.
    fn exchange(
        &self,
        m: Msg,
        fds: &[std::os::fd::BorrowedFd<'_>],
        buf: &mut [u8],
    ) -> io::Result<(usize, Vec<OwnedFd>)> {
        os::send_msg(self.ctl.as_fd(), &m.encode(), fds, deadline())?;
        os::recv_msg(self.ctl.as_fd(), buf, deadline())
    }

    /// Send control message `m` (no descriptors) and wait for the reply.
    pub fn request(&self, m: Msg) -> io::Result<Msg> {
        // Room for a STATS reply's text (the vandal sends STATS too).
        let mut buf = [0u8; 64 * 1024];
        let (n, _) = self.exchange(m, &[], &mut buf)?;
        Msg::decode(&buf[..n]).ok_or_else(|| io::Error::other("malformed reply"))
    }

    /// A barrier: once it returns, the service's core has run a whole
    /// cycle after everything written before the call. (The core answers
    /// control messages at the start of a cycle, before it looks at the
    /// apps' activity: the second round trip is answered in a later cycle
    /// than the first.) HELLO with our own pid changes nothing.
    pub fn sync(&self) -> io::Result<()> {
        let hello = Msg::new(op::HELLO, 0, i64::from(std::process::id()), 0);
        self.request(hello)?;
        self.request(hello).map(|_| ())
    }

    /// The service's statistics (JSON).
    pub fn stats(&self) -> io::Result<serde_json::Value> {
        let mut buf = vec![0u8; 1 << 20];
        let (n, _) = self.exchange(Msg::new(op::STATS, 0, 0, 0), &[], &mut buf)?;
        if n < Msg::LEN {
            return Err(io::Error::other("short stats reply"));
        }
        serde_json::from_slice(&buf[Msg::LEN..n]).map_err(io::Error::other)
    }

    /// Bytes in the up region.
    pub fn up_len(&self) -> usize {
        self.up.len()
    }

    /// Store `v` at byte `off` of the up region (rounded down to a multiple
    /// of 8 and wrapped into the region): what a buggy or hostile program
    /// may do to the memory it shares with the service.
    pub fn poke(&self, off: usize, v: u64) {
        let off = (off % self.up.len()) & !7;
        // SAFETY: `off + 8 <= len` (len is a multiple of the page size and
        // `off` a multiple of 8 below it) and the mapping is alive and
        // 8-byte aligned; every access to shared words is atomic.
        let w = unsafe { &*(self.up.as_ptr().add(off) as *const AtomicU64) };
        w.store(v, Ordering::SeqCst);
    }

    /// Mark socket `s` active (wrapped into the slots) and ring the
    /// service's doorbell (unless ringing is off).
    pub fn kick(&self, s: u32) {
        self.r.signal(s % self.r.layout().slots);
        if self.ringing.load(Ordering::Relaxed) {
            os::ring(self.bell.as_raw_fd());
        }
    }

    /// Turn the doorbell rings of [`RawApp::kick`] on or off (activity is
    /// still marked; the service sees it when something else wakes it).
    pub fn set_ringing(&self, on: bool) {
        self.ringing.store(on, Ordering::Relaxed);
    }

    /// The doorbell the service gave this app.
    pub fn bell(&self) -> std::os::fd::BorrowedFd<'_> {
        self.bell.as_fd()
    }

    /// Set up waiter `idx`, sending `fd` along (as the protocol before
    /// layout version 9 did); the descriptor the reply carries (the wait
    /// end of the waiter's wake-up line).
    pub fn waiter(
        &self,
        idx: u32,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> io::Result<Option<OwnedFd>> {
        // The index is the attaching process's (row 0), as the shim
        // takes it before asking.
        if let Some(o) = self.r.up_header().waiter_owner.get(idx as usize) {
            o.store(ixora_channel::layout::waiter_tag(0), Ordering::Release);
        }
        let mut buf = [0u8; 64];
        let (n, mut fds) =
            self.exchange(Msg::new(op::WAITER, idx, 0, 0), fd.as_slice(), &mut buf)?;
        let r = Msg::decode(&buf[..n]).ok_or_else(|| io::Error::other("malformed reply"))?;
        if r.a < 0 {
            return Err(io::Error::from_raw_os_error(-r.a as i32));
        }
        Ok(fds.pop())
    }

    /// Arm waiter `idx` for any change of the app's sockets (the service
    /// rings it once, then it must be armed again).
    pub fn arm_any(&self, idx: u32) {
        let h = self.r.up_header();
        let (w, bit) = (idx as usize / 64, 1u64 << (idx % 64));
        h.wants_any[w].fetch_or(bit, Ordering::SeqCst);
        h.armed[w].fetch_or(bit, Ordering::SeqCst);
    }

    /// A new socket; its slot. Holds it as the shim does (total and this
    /// process's row 0).
    pub fn socket(&self) -> io::Result<u32> {
        self.new_socket(0)
    }

    /// A new socket of type `ty` (`op::SOCKET`'s `a`), held as by
    /// [`socket`](Self::socket).
    fn new_socket(&self, ty: i64) -> io::Result<u32> {
        let m = self.request(Msg::new(op::SOCKET, 0, ty, 0))?;
        if m.a < 0 {
            return Err(io::Error::from_raw_os_error(-m.a as i32));
        }
        let s = m.slot;
        self.r.up_slot(s).refs.fetch_add(1, Ordering::AcqRel);
        self.r.held(0, s).fetch_add(1, Ordering::AcqRel);
        Ok(s)
    }

    /// A new UDP socket bound to `port` of the service's address (0: a
    /// free port); its slot.
    pub fn udp_socket(&self, port: u16) -> io::Result<u32> {
        let s = self.new_socket(1)?;
        let b = self.request(Msg::new(op::BIND, s, pack(0, port) as i64, 0))?;
        if b.a < 0 {
            self.close(s);
            return Err(io::Error::from_raw_os_error(-b.a as i32));
        }
        Ok(s)
    }

    /// A new socket with SO_REUSEPORT bound to `port` of the service's
    /// address: UDP, or TCP and listening; its slot.
    pub fn shared_socket(&self, udp: bool, port: u16) -> io::Result<u32> {
        let s = self.new_socket(i64::from(udp))?;
        let mut ms = vec![Msg::new(op::BIND, s, pack(0, port) as i64, 1)];
        if !udp {
            ms.push(Msg::new(op::LISTEN, s, 16, 0));
        }
        for m in ms {
            let r = self.request(m)?;
            if r.a < 0 {
                self.close(s);
                return Err(io::Error::from_raw_os_error(-r.a as i32));
            }
        }
        Ok(s)
    }

    /// Connect socket `s` to `ip:port` (returns once the service took the
    /// request; the handshake completes later).
    pub fn connect(&self, s: u32, ip: Ipv4Addr, port: u16) -> io::Result<()> {
        let m = self.request(Msg::new(
            op::CONNECT,
            s,
            pack(u32::from(ip), port) as i64,
            0,
        ))?;
        if m.a < 0 {
            return Err(io::Error::from_raw_os_error(-m.a as i32));
        }
        Ok(())
    }

    /// Bind socket `s` to the service's address and `port`, and listen.
    pub fn listen(&self, s: u32, port: u16) -> io::Result<()> {
        for m in [
            Msg::new(op::BIND, s, pack(0, port) as i64, 0),
            Msg::new(op::LISTEN, s, 16, 0),
        ] {
            let r = self.request(m)?;
            if r.a < 0 {
                return Err(io::Error::from_raw_os_error(-r.a as i32));
            }
        }
        Ok(())
    }

    /// Read `n` bytes from socket `s` (what came within 5 s).
    pub fn read_n(&self, s: u32, n: usize) -> Vec<u8> {
        let t0 = Instant::now();
        let mut got = Vec::new();
        while got.len() < n && t0.elapsed() < Duration::from_secs(5) {
            got.extend(self.read(s, n - got.len()));
            std::thread::sleep(Duration::from_millis(1));
        }
        got
    }

    /// Write as much of `data` as the transmit ring of `s` takes; bytes
    /// written.
    pub fn write(&self, s: u32, data: &[u8]) -> usize {
        let n = self.write_unmarked(s, data);
        if n > 0 {
            self.kick(s);
        }
        n
    }

    /// [`RawApp::write`] without marking the socket active: the service
    /// takes the bytes at a later mark ([`RawApp::kick_all`]).
    pub fn write_unmarked(&self, s: u32, data: &[u8]) -> usize {
        let ring = u64::from(self.r.layout().ring);
        let tail = self.r.up_slot(s).tx_tail.load(Ordering::Relaxed);
        let head = self.r.down_slot(s).tx_head.load(Ordering::Acquire);
        let room = ring.saturating_sub(tail.wrapping_sub(head)).min(ring);
        let n = (data.len() as u64).min(room) as usize;
        if n > 0 {
            self.r.tx_write(s, tail, &data[..n]);
            self.r
                .up_slot(s)
                .tx_tail
                .store(tail + n as u64, Ordering::Release);
        }
        n
    }

    /// Mark sockets `socks` active at once (one move of the activity
    /// word: the service's next look sees them all) and ring.
    pub fn kick_all(&self, socks: &[u32]) {
        for &s in socks {
            self.r
                .bitmap_word(s / 64)
                .fetch_or(1 << (s % 64), Ordering::SeqCst);
        }
        self.r.up_header().activity.fetch_add(1, Ordering::SeqCst);
        if self.ringing.load(Ordering::Relaxed) {
            os::ring(self.bell.as_raw_fd());
        }
    }

    /// Read what the receive ring of `s` holds (at most `max` bytes).
    pub fn read(&self, s: u32, max: usize) -> Vec<u8> {
        let head = self.r.up_slot(s).rx_head.load(Ordering::Relaxed);
        let tail = self.r.down_slot(s).rx_tail.load(Ordering::Acquire);
        let n = tail
            .saturating_sub(head)
            .min(u64::from(self.r.layout().ring))
            .min(max as u64) as usize;
        let mut v = vec![0u8; n];
        if n > 0 {
            self.r.rx_read(s, head, &mut v);
            self.r
                .up_slot(s)
                .rx_head
                .store(head + n as u64, Ordering::Release);
            self.kick(s);
        }
        v
    }

    /// Ask the service to close socket `s` (after what was written is
    /// sent), dropping this process's reference, as the shim's `close`.
    pub fn close(&self, s: u32) {
        self.r.held(0, s).fetch_sub(1, Ordering::AcqRel);
        self.r.up_slot(s).refs.fetch_sub(1, Ordering::AcqRel);
        self.r
            .up_slot(s)
            .req
            .fetch_or(req::CLOSE, Ordering::Release);
        self.kick(s);
    }

    /// The state of socket `s` (`layout::state`).
    pub fn state(&self, s: u32) -> u32 {
        self.r.down_slot(s).state.load(Ordering::Acquire)
    }

    /// Wait (up to `limit`) until socket `s` is connected.
    pub fn wait_established(&self, s: u32, limit: Duration) -> Result<(), String> {
        let t = Instant::now();
        while self.state(s) != state::ESTABLISHED {
            let err = self.r.down_slot(s).err.load(Ordering::Acquire);
            if err != 0 || t.elapsed() > limit {
                return Err(format!(
                    "not connected (state {}, errno {err})",
                    self.state(s)
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// A new socket connected to the echo peer (within `limit`); an
    /// error says which step failed.
    pub fn connect_echo(&self, limit: Duration) -> Result<u32, String> {
        let s = self.socket().map_err(|e| format!("socket: {e}"))?;
        self.connect(s, PEER_IP, ECHO_PORT)
            .map_err(|e| format!("connect: {e}"))?;
        if let Err(e) = self.wait_established(s, limit) {
            self.close(s);
            return Err(e);
        }
        Ok(s)
    }

    /// A well-behaved conversation: a connection to the echo peer, `data`
    /// written and read back, the connection closed. An error says what
    /// went wrong (within `limit`).
    pub fn echo(&self, data: &[u8], limit: Duration) -> Result<(), String> {
        let t = Instant::now();
        let s = self.connect_echo(limit)?;
        let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
        while got.len() < data.len() {
            if t.elapsed() > limit {
                self.close(s);
                return Err(format!(
                    "echo stalled: {sent} of {} bytes sent, {} back",
                    data.len(),
                    got.len()
                ));
            }
            if sent < data.len() {
                sent += self.write(s, &data[sent..]);
            }
            let v = self.read(s, data.len() - got.len());
            if v.is_empty() {
                std::thread::sleep(Duration::from_micros(100));
            }
            got.extend_from_slice(&v);
        }
        self.close(s);
        if got != data {
            let at = got.iter().zip(data).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!("echo corrupted at byte {at}"));
        }
        Ok(())
    }
}

/// How long a passed connection waits to be claimed on the rig (its
/// `ServiceConfig::pass_timeout`).
pub const PASS_TIMEOUT: Duration = Duration::from_secs(1);

/// Slots of the rig's applications (its `ServiceConfig::slots`).
pub const SLOTS: u32 = 128;

/// Whether app `id` is still listed by the service's statistics `st`.
pub fn listed(st: &serde_json::Value, id: u32) -> bool {
    st["apps"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x["app"].as_u64() == Some(u64::from(id))))
}

/// One step of a misbehaving application ([`vandalise`]): well-formed
/// calls that give it live sockets and connections, interleaved with
/// control messages of any content and stores of any value into its up
/// region — its indices, request bits, reference counts, holders rows,
/// waiter interests, counters.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
pub enum VandalOp {
    /// A control message: `op` picks one of the operations (or an unknown
    /// one), the other fields go as they are (a CONNECT's address is kept
    /// in the rig's subnet).
    Ctl {
        /// Which operation.
        op: u8,
        /// `Msg::slot` (wrapped a little beyond the slots).
        slot: u8,
        /// `Msg::a`.
        a: i64,
        /// `Msg::b`.
        b: u64,
    },
    /// A new socket.
    Socket,
    /// Connect one of its sockets to the echo peer, or to its own listener.
    Connect {
        /// Which of its sockets.
        sock: u8,
        /// The echo peer (else the service's own address, port 7000+).
        peer: bool,
        /// Port offset for the own-address case.
        port: u8,
    },
    /// Bind and listen on port 7000 + `port % 8`.
    Listen {
        /// Which of its sockets.
        sock: u8,
        /// Port offset.
        port: u8,
    },
    /// Write `len` bytes (as room allows).
    Write {
        /// Which of its sockets.
        sock: u8,
        /// How many bytes.
        len: u16,
    },
    /// Read what is there.
    Read {
        /// Which of its sockets.
        sock: u8,
    },
    /// Set request bits (close, shutdown, abort, or garbage).
    Request {
        /// Which of its sockets.
        sock: u8,
        /// The bits.
        bits: u32,
    },
    /// Store into word `field % 8` of a socket's up slot.
    PokeSlot {
        /// Which of its sockets.
        sock: u8,
        /// Which word.
        field: u8,
        /// The value.
        val: u64,
    },
    /// Store into the holders row `row` of a socket.
    PokeHeld {
        /// Which of its sockets.
        sock: u8,
        /// Which row.
        row: u8,
        /// The value.
        val: u64,
    },
    /// Store anywhere in the up region.
    Poke {
        /// Byte offset (wrapped, rounded down to 8).
        off: u32,
        /// The value.
        val: u64,
    },
    /// A new UDP socket, bound to port 7100 + `port % 8` (0: a free
    /// port).
    UdpSocket {
        /// Port offset (`u8::MAX`: a free port).
        port: u8,
    },
    /// A new socket with SO_REUSEPORT on port 7200 + `port % 4`: UDP, or
    /// a TCP listener (several may share each port).
    Shared {
        /// UDP (else TCP).
        udp: bool,
        /// Port offset.
        port: u8,
    },
    /// Write one datagram record into a socket's transmit ring (a TCP
    /// socket takes it as bytes): a well-formed header to the echo peer
    /// or the service's own address, or `garbage` as the header.
    Datagram {
        /// Which of its sockets.
        sock: u8,
        /// Payload bytes.
        len: u16,
        /// To the echo peer (else the service's address, port 7100+).
        peer: bool,
        /// A header of any content instead.
        garbage: Option<u64>,
    },
    /// Mark a slot active and ring the doorbell.
    Kick {
        /// Which slot.
        slot: u8,
    },
    /// Wait for the service to run a cycle.
    Sync,
}

/// Play `ops` as application `app`. `socks` collects the slots the service
/// gave it. Errors of the calls are the point and are ignored; an `Err`
/// means the service stopped answering its control connection.
pub fn vandalise(app: &RawApp, ops: &[VandalOp], socks: &mut Vec<u32>) -> io::Result<()> {
    let l = app.regions().layout();
    let pick = |socks: &Vec<u32>, k: u8| -> u32 {
        if socks.is_empty() {
            u32::from(k) % l.slots
        } else {
            socks[k as usize % socks.len()]
        }
    };
    for o in ops {
        match *o {
            VandalOp::Ctl { op: o, slot, a, b } => {
                const OPS: [u32; 13] = [
                    op::ATTACH,
                    op::JOIN,
                    op::WAITER,
                    op::SOCKET,
                    op::BIND,
                    op::LISTEN,
                    op::CONNECT,
                    8, // SETOPT, retired: an unknown op now
                    op::STATS,
                    op::HELLO,
                    op::SPLIT,
                    0,
                    99,
                ];
                let code = OPS[o as usize % OPS.len()];
                let a = if code == op::CONNECT {
                    let (ip, port) = ixora_channel::layout::unpack(a as u64);
                    pack(u32::from(SERVICE_IP) & !0xff | ip & 0xff, port) as i64
                } else if code == op::SOCKET && a >= 0 {
                    a % 3 // TCP, UDP, or a type the service refuses
                } else {
                    a
                };
                let m = Msg::new(code, u32::from(slot) % (l.slots + 8), a, b);
                let r = app.request(m)?;
                if code == op::SOCKET && r.a >= 0 && r.slot < l.slots {
                    socks.push(r.slot);
                }
            }
            VandalOp::Socket => {
                if let Ok(s) = app.socket() {
                    socks.push(s);
                }
            }
            VandalOp::Connect { sock, peer, port } => {
                let s = pick(socks, sock);
                let _ = if peer {
                    app.connect(s, PEER_IP, ECHO_PORT)
                } else {
                    app.connect(s, SERVICE_IP, 7000 + u16::from(port % 8))
                };
            }
            VandalOp::Listen { sock, port } => {
                let _ = app.listen(pick(socks, sock), 7000 + u16::from(port % 8));
            }
            VandalOp::Write { sock, len } => {
                let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
                app.write(pick(socks, sock), &data);
            }
            VandalOp::Read { sock } => {
                app.read(pick(socks, sock), 1 << 20);
            }
            VandalOp::Request { sock, bits } => {
                let s = pick(socks, sock);
                app.regions()
                    .up_slot(s)
                    .req
                    .fetch_or(bits, Ordering::Release);
                app.kick(s);
            }
            VandalOp::PokeSlot { sock, field, val } => {
                let s = pick(socks, sock);
                app.poke(l.up_slot(s) + usize::from(field % 8) * 8, val);
                app.kick(s);
            }
            VandalOp::PokeHeld { sock, row, val } => {
                let s = pick(socks, sock);
                app.poke(l.held(u32::from(row), s), val);
            }
            VandalOp::Poke { off, val } => app.poke(off as usize, val),
            VandalOp::UdpSocket { port } => {
                let p = if port == u8::MAX {
                    0
                } else {
                    7100 + u16::from(port % 8)
                };
                if let Ok(s) = app.udp_socket(p) {
                    socks.push(s);
                }
            }
            VandalOp::Shared { udp, port } => {
                if let Ok(s) = app.shared_socket(udp, 7200 + u16::from(port % 4)) {
                    socks.push(s);
                }
            }
            VandalOp::Datagram {
                sock,
                len,
                peer,
                garbage,
            } => {
                let s = pick(socks, sock);
                let len = len % 2048;
                let hdr = match garbage {
                    Some(g) => {
                        // A garbage header: its length, port and address
                        // (a transmit header's time is not read).
                        let mut h = [0u8; ixora_channel::layout::DGRAM_HDR];
                        h[..8].copy_from_slice(&g.to_le_bytes());
                        h
                    }
                    None if peer => {
                        ixora_channel::layout::dgram_hdr(len, u32::from(PEER_IP), ECHO_PORT)
                    }
                    None => {
                        ixora_channel::layout::dgram_hdr(len, u32::from(SERVICE_IP), 7100 + len % 8)
                    }
                };
                let mut rec = hdr.to_vec();
                rec.extend((0..len).map(|i| i as u8));
                app.write(s, &rec);
            }
            VandalOp::Kick { slot } => app.kick(u32::from(slot)),
            VandalOp::Sync => app.sync()?,
        }
    }
    app.sync()
}

/// Wait (up to `limit`) until the service no longer lists app `id`, asked
/// through `by`.
pub fn wait_gone(by: &RawApp, id: u32, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let st = by.stats().map_err(|e| format!("stats: {e}"))?;
        if !listed(&st, id) {
            return Ok(());
        }
        if t.elapsed() > limit {
            return Err(format!("app {id} still attached after {limit:?}: {st}"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
