//! The [`Stack`]: one interface's worth of protocols, driven sans I/O.

use crate::arp::{ArpCache, Lookup};
use crate::config::{IpOpts, StackConfig};
use crate::counters::{Counters, DropReason};
use crate::frag::{self, Fragment, Outcome, Reassembly, HEAD_ROOM};
use crate::tcp::syncookie::{self, Keyed, Tuple};
use crate::tcp::tcb::{
    ev, flag, scale_for, Ctx, IcmpKind, RateLimiter, RstReply, Segment, Tcb, MIN_LOCKED_BUFFER,
};
use crate::tcp::{ConnHandle, DeadReason, State, TcpInfo};
use crate::time::{Duration, Instant};
use crate::wheel::TimerWheel;
use crate::wire::arp::{ArpPacket, ArpRepr, Operation};
use crate::wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use crate::wire::icmpv4::{self, Icmpv4Packet, Icmpv4Repr};
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr, Protocol};
use crate::wire::tcp::{Flags, SeqNum, TcpOptions, TcpPacket, TcpRepr};
use crate::wire::udp::{UdpPacket, UdpRepr};
use crate::wire::{self, Checksum};
use crate::{same_subnet, Error, KeyedState};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Most control packets (RSTs, ARP, ICMP, cookie SYN-ACKs) waiting to go out.
const CTRL_QUEUE_LIMIT: usize = 4096;
/// Most packets parked waiting for ARP resolution.
const ARP_WAIT_LIMIT: usize = 1024;
/// Most packets parked on one unresolved neighbour.
const ARP_WAIT_PER_NEIGHBOR: usize = 64;
/// Most UDP datagrams queued for transmit.
const UDP_TX_LIMIT: usize = 4096;

/// Largest UDP payload: what fits a 65535-byte IPv4 datagram (sent in
/// fragments when longer than the MTU allows).
pub const MAX_UDP_PAYLOAD: usize = frag::MAX_PAYLOAD - 8;

/// A UDP socket, named by its local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UdpHandle(u16);

impl UdpHandle {
    /// The bound port.
    pub fn port(self) -> u16 {
        self.0
    }
}

/// A received packet's bytes: still in its frame, or reassembled from
/// fragments into a buffer of the stack's (an IPv4 header, then the
/// payload).
#[derive(Debug)]
enum Buf<R> {
    Frame(R),
    Owned(Vec<u8>),
}

impl<R: AsRef<[u8]>> AsRef<[u8]> for Buf<R> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Buf::Frame(f) => f.as_ref(),
            Buf::Owned(v) => v,
        }
    }
}

/// A received UDP datagram, still in its frame (or, reassembled from
/// fragments, in a buffer of its own).
#[derive(Debug)]
pub struct Datagram<R> {
    /// Sender.
    pub src: SocketAddrV4,
    /// Its IPv4 header's TOS (DSCP and ECN) and TTL, as `IP_RECVTOS` and
    /// `IP_RECVTTL` give them (of the fragment that completed a
    /// reassembled one).
    pub tos: u8,
    /// (See `tos`.)
    pub ttl: u8,
    buf: Buf<R>,
    start: usize,
    end: usize,
}

impl<R: AsRef<[u8]>> Datagram<R> {
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.start..self.end]
    }
    /// The frame holding it, in place (`None` for one reassembled from
    /// fragments): where a backend left per-frame metadata.
    pub fn frame_mut(&mut self) -> Option<&mut R> {
        match &mut self.buf {
            Buf::Frame(f) => Some(f),
            Buf::Owned(_) => None,
        }
    }
    /// The frame holding it, to return it to its pool (`None` for a
    /// datagram reassembled from fragments, whose frames went back
    /// already).
    pub fn into_frame(self) -> Option<R> {
        match self.buf {
            Buf::Frame(f) => Some(f),
            Buf::Owned(_) => None,
        }
    }
}

/// Events for the application (IX Table 1 event conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A remotely initiated connection completed its handshake on a
    /// listener; `tcp_accept` or `tcp_close` (reject) it.
    Knock {
        /// The new connection.
        handle: ConnHandle,
        /// The listener's cookie.
        listener_cookie: u64,
        /// Local port it arrived on.
        local_port: u16,
        /// The peer.
        remote: SocketAddrV4,
    },
    /// A `tcp_connect` completed.
    Connected {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
    },
    /// The peer sent urgent data (RFC 9293 §3.8.5), or its urgent byte
    /// arrived: the byte before its urgent pointer, as BSD and Linux take
    /// it. Comes before the `Recv` of the data it is in.
    Urgent {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
        /// The urgent byte's offset in the stream (the data bytes before
        /// it, from the connection's first).
        mark: u64,
        /// The byte, once it has arrived.
        byte: Option<u8>,
    },
    /// In-order data is readable (`tcp_recv_chunks`, then `tcp_recv_done`).
    Recv {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
        /// Readable bytes now.
        readable: usize,
    },
    /// Sent bytes were acknowledged, and/or the send window changed.
    Sent {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
        /// Bytes acknowledged since the last `Sent`.
        acked: usize,
        /// Bytes `tcp_send` would accept now.
        window: usize,
    },
    /// The peer sent FIN: no more data will arrive after what is readable.
    PeerClosed {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
    },
    /// The connection was terminated abnormally; `tcp_close` the handle.
    Dead {
        /// The connection.
        handle: ConnHandle,
        /// Its cookie.
        cookie: u64,
        /// Why.
        reason: DeadReason,
    },
    /// A datagram is waiting on a UDP socket (`udp_recv`).
    UdpRecv {
        /// The socket.
        handle: UdpHandle,
        /// Its cookie.
        cookie: u64,
    },
}

/// Key of the connection table: (remote address, remote port, local port);
/// the local address is the stack's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ConnKey(u64);

impl ConnKey {
    fn new(remote: Ipv4Addr, rport: u16, lport: u16) -> ConnKey {
        ConnKey((u64::from(u32::from(remote)) << 32) | (u64::from(rport) << 16) | u64::from(lport))
    }
}

#[derive(Debug)]
struct Listener {
    cookie: u64,
    backlog: u32,
    syn_count: u32,
    accept_count: u32,
    /// Buffers its connections are given ([`Stack::tcp_listener_lock_buffers`]).
    lock: (Option<u32>, Option<u32>),
    /// How long a connection waits for data before it is announced
    /// ([`Stack::tcp_listener_defer_accept`]).
    defer: Duration,
    /// What its SYN-ACKs and its connections' packets carry in their IPv4
    /// header ([`Stack::tcp_listener_ip_opts`]).
    ip: IpOpts,
}

struct Slot<R, T> {
    gen: u32,
    tcb: Option<Tcb<R, T>>,
}

#[derive(Debug)]
struct UdpSocket<R> {
    cookie: u64,
    rxq: VecDeque<Datagram<R>>,
    in_evq: bool,
    /// The last ICMP destination-unreachable about a datagram it sent:
    /// where that datagram went and the ICMP code ([`Stack::udp_take_error`]).
    err: Option<(SocketAddrV4, u8)>,
}

struct UdpOut<T> {
    src_port: u16,
    dst: SocketAddrV4,
    data: T,
    ip: IpOpts,
}

#[derive(Debug, Clone, Copy)]
enum EvSrc {
    Tcp(u32),
    Udp(u16),
}

/// Packets the stack sends on its own behalf.
enum Ctrl<R> {
    Arp {
        op: Operation,
        eth_dst: MacAddr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
    },
    Rst {
        remote: Ipv4Addr,
        rport: u16,
        lport: u16,
        rst: RstReply,
    },
    SynAck {
        remote: Ipv4Addr,
        rport: u16,
        lport: u16,
        iss: SeqNum,
        ack: SeqNum,
        wnd: u16,
        opts: TcpOptions,
        /// The listener's IPv4 header options.
        ip: IpOpts,
    },
    EchoReply {
        dst: Ipv4Addr,
        frame: Buf<R>,
        icmp_off: usize,
        icmp_len: usize,
    },
    IcmpError {
        dst: Ipv4Addr,
        kind: IcmpErr,
        orig: [u8; 68],
        orig_len: u8,
    },
}

/// Which ICMP error to send.
#[derive(Debug, Clone, Copy)]
enum IcmpErr {
    /// Destination unreachable with this code.
    Unreachable(u8),
    /// Time exceeded, code 1: fragment reassembly time exceeded.
    ReassemblyTime,
}

/// A datagram too long for one frame, leaving in fragments (RFC 791 §3.2),
/// one per `poll_transmit`.
struct FragOut {
    dst: Ipv4Addr,
    mac: MacAddr,
    proto: Protocol,
    ident: u16,
    /// The sending socket's IPv4 header options.
    ip: IpOpts,
    /// The whole IP payload, its checksum complete (a device cannot sum
    /// across fragments).
    l4: Vec<u8>,
    sent: usize,
}

impl<R> Ctrl<R> {
    /// IPv4 destination (None for ARP).
    fn ip_dst(&self) -> Option<Ipv4Addr> {
        match self {
            Ctrl::Arp { .. } => None,
            Ctrl::Rst { remote, .. } | Ctrl::SynAck { remote, .. } => Some(*remote),
            Ctrl::EchoReply { dst, .. } | Ctrl::IcmpError { dst, .. } => Some(*dst),
        }
    }
}

enum Waiter<R, T> {
    Conn(ConnHandle),
    Ctrl(Ctrl<R>),
    Udp(UdpOut<T>),
}

/// IPv4 identification counters ([`Stack::next_ident`]): as many as
/// Linux's `IP_IDENTS_SZ` (2,048; 4 KiB).
const IDENT_COUNTERS: usize = 2048;

/// One interface's protocols: ARP, IPv4, ICMP, UDP, TCP. See the crate docs
/// for how to drive it.
pub struct Stack<R, T> {
    cfg: StackConfig,
    keyed: Keyed,
    local_mss: u16,
    now: Instant,
    counters: Counters,
    challenge: RateLimiter,
    icmp_limit: RateLimiter,
    wheel: TimerWheel,
    fired: Vec<u32>,
    conns: Vec<Slot<R, T>>,
    free: Vec<u32>,
    table: HashMap<ConnKey, u32, KeyedState>,
    listeners: HashMap<u16, Listener, KeyedState>,
    udp: HashMap<u16, UdpSocket<R>, KeyedState>,
    arp: ArpCache,
    arp_wait: Vec<(Ipv4Addr, Waiter<R, T>)>,
    ctrlq: VecDeque<Ctrl<R>>,
    txq: VecDeque<u32>,
    evq: VecDeque<EvSrc>,
    udp_txq: VecDeque<UdpOut<T>>,
    reasm: Reassembly,
    frag_out: Option<FragOut>,
    next_ephemeral: u32,
    /// Draws of [`Stack::draw_free_port`] so far.
    port_draws: u64,
    /// IPv4 identification counters ([`IDENT_COUNTERS`], see
    /// [`Stack::next_ident`]).
    ip_idents: Box<[u16]>,
    /// Cost of the frames held out of order by all connections.
    ooo_held: usize,
    /// Bytes by which the receive buffers of all connections grew past
    /// `tcp.recv_buffer` (`rcv_tune_memory` bounds it).
    tune_held: usize,
    scratch_ips: (Vec<Ipv4Addr>, Vec<Ipv4Addr>),
}

impl<R: AsRef<[u8]>, T: AsRef<[u8]>> Stack<R, T> {
    /// A stack for one interface. Fails with a message naming the bad
    /// setting. A gratuitous ARP announcing our address is queued.
    pub fn new(cfg: StackConfig, now: Instant) -> Result<Self, String> {
        cfg.validate()?;
        let hs = KeyedState::new(cfg.secret);
        let mut s = Stack {
            keyed: Keyed::new(cfg.secret, cfg.clock_key, cfg.clock_base),
            local_mss: cfg.local_mss(),
            now,
            counters: Counters::default(),
            challenge: RateLimiter::randomized(cfg.tcp.challenge_ack_limit, cfg.secret),
            icmp_limit: RateLimiter::new(cfg.icmp_error_limit),
            wheel: TimerWheel::new(cfg.timer_tick, now),
            fired: Vec::new(),
            conns: Vec::new(),
            free: Vec::new(),
            table: HashMap::with_hasher(hs.clone()),
            listeners: HashMap::with_hasher(hs.clone()),
            udp: HashMap::with_hasher(hs.clone()),
            arp: ArpCache::new(
                hs,
                cfg.arp_timeout,
                cfg.arp_retry,
                cfg.arp_retries,
                cfg.arp_capacity,
            ),
            arp_wait: Vec::new(),
            ctrlq: VecDeque::new(),
            txq: VecDeque::new(),
            evq: VecDeque::new(),
            udp_txq: VecDeque::new(),
            reasm: Reassembly::new(cfg.frag_memory, cfg.frag_timeout),
            frag_out: None,
            next_ephemeral: 0,
            port_draws: 0,
            ip_idents: Vec::new().into_boxed_slice(),
            ooo_held: 0,
            tune_held: 0,
            scratch_ips: (Vec::new(), Vec::new()),
            cfg,
        };
        // RFC 5227-style announcement: a request with our address as both
        // sender and target.
        s.ctrlq.push_back(Ctrl::Arp {
            op: Operation::Request,
            eth_dst: MacAddr::BROADCAST,
            target_mac: MacAddr::UNSPECIFIED,
            target_ip: s.cfg.ip,
        });
        Ok(s)
    }

    /// The configuration.
    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Size in bytes of one connection's state, data buffers excluded.
    pub fn connection_state_size() -> usize {
        std::mem::size_of::<Tcb<R, T>>()
    }

    /// The largest frame `poll_transmit` writes: MTU plus Ethernet and
    /// 802.1Q headers.
    pub fn max_frame_len(&self) -> usize {
        usize::from(self.cfg.mtu) + wire::ethernet::HEADER_LEN + wire::ethernet::VLAN_TAG_LEN
    }

    fn advance_clock(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    // ===== timers ======================================================

    /// When to call [`handle_timeout`](Self::handle_timeout) next (`None`:
    /// no timer pending). Never later than the earliest deadline; may be
    /// earlier (the call then does nothing).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let w = self.wheel.next_expiration().unwrap_or(Instant::NEVER);
        let t = w.min(self.arp.deadline()).min(self.reasm.deadline());
        (!t.is_never()).then_some(t)
    }

    /// Run every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance_clock(now);
        let mut fired = std::mem::take(&mut self.fired);
        self.wheel.advance(self.now, &mut fired);
        for &idx in &fired {
            let Some(tcb) = self.tcb_mut(idx) else {
                continue;
            };
            tcb.wheel_at = Instant::NEVER;
            self.with_tcb(idx, |tcb, ctx| tcb.on_timers(ctx));
            self.after(idx);
        }
        fired.clear();
        self.fired = fired;
        if self.arp.deadline() <= self.now {
            let (mut ask, mut failed) = std::mem::take(&mut self.scratch_ips);
            self.arp.on_timeout(self.now, &mut ask, &mut failed);
            for &ip in &ask {
                self.queue_arp_request(ip);
            }
            for &ip in &failed {
                self.release_waiters(ip, None);
            }
            ask.clear();
            failed.clear();
            self.scratch_ips = (ask, failed);
        }
        if self.reasm.deadline() <= self.now {
            let mut quotes = Vec::new();
            for _ in 0..self.reasm.expire(self.now, &mut quotes) {
                self.counters.drop(DropReason::Ipv4FragTimeout);
            }
            // RFC 1122 §3.3.2: a time-exceeded message MUST go to the source
            // of a datagram whose fragment zero came.
            for (src, (orig, n)) in quotes {
                self.icmp_error_of(src, IcmpErr::ReassemblyTime, &orig[..usize::from(n)]);
            }
        }
    }

    fn tcb_mut(&mut self, idx: u32) -> Option<&mut Tcb<R, T>> {
        self.conns.get_mut(idx as usize)?.tcb.as_mut()
    }

    /// Run `f` on a TCB with a context borrowed from the stack.
    fn with_tcb<X>(
        &mut self,
        idx: u32,
        f: impl FnOnce(&mut Tcb<R, T>, &mut Ctx) -> X,
    ) -> Option<X> {
        let Stack {
            conns,
            cfg,
            counters,
            challenge,
            now,
            ooo_held,
            tune_held,
            ..
        } = self;
        let tcb = conns.get_mut(idx as usize)?.tcb.as_mut()?;
        let before = tcb.ooo_cost();
        let grown = tcb.rcv_grown(&cfg.tcp);
        let mut ctx = Ctx {
            now: *now,
            cfg: &cfg.tcp,
            counters,
            challenge,
            tick: cfg.timer_tick,
            ooo_room: cfg.ooo_memory.saturating_sub(*ooo_held),
            tune_room: cfg.rcv_tune_memory.saturating_sub(*tune_held),
        };
        let x = f(tcb, &mut ctx);
        // Out-of-order memory and receive-buffer growth across all
        // connections (stack-wide caps).
        *ooo_held = *ooo_held - before + tcb.ooo_cost();
        *tune_held = *tune_held - grown + tcb.rcv_grown(&cfg.tcp);
        Some(x)
    }

    /// After anything touched a TCB: file its events, output and timer,
    /// and free it when it is done.
    fn after(&mut self, idx: u32) {
        self.with_tcb(idx, |tcb, ctx| tcb.refresh(ctx));
        let Some(tcb) = self
            .conns
            .get_mut(idx as usize)
            .and_then(|s| s.tcb.as_mut())
        else {
            return;
        };
        let mut held = false;
        if tcb.ev & ev::KNOCK != 0 && !tcb.knocked() {
            let defer = self
                .listeners
                .get(&tcb.listener())
                .map_or(Duration::ZERO, |l| l.defer);
            held = tcb.defers_knock(defer, self.now);
        }
        if tcb.ev & ev::KNOCK != 0 && !tcb.knocked() && !held {
            // Handshake complete: from the SYN queue to the accept queue.
            tcb.set_owned();
            let was_synq = tcb.flags & flag::SYNQ != 0;
            tcb.flags &= !flag::SYNQ;
            tcb.flags |= flag::ACCEPTQ;
            if let Some(l) = self.listeners.get_mut(&tcb.listener()) {
                if was_synq {
                    l.syn_count = l.syn_count.saturating_sub(1);
                }
                l.accept_count += 1;
            }
        }
        // (A connection held back is announced first: its other events
        // wait for that.)
        if tcb.ev != 0 && tcb.flags & flag::IN_EVQ == 0 && !held {
            tcb.flags |= flag::IN_EVQ;
            self.evq.push_back(EvSrc::Tcp(idx));
        }
        if tcb.wants_tx() && tcb.flags & flag::IN_TXQ == 0 {
            tcb.flags |= flag::IN_TXQ;
            self.txq.push_back(idx);
        }
        let d = tcb.next_deadline();
        if d < tcb.wheel_at {
            tcb.wheel_at = d;
            self.wheel.schedule(idx, d);
        }
        if tcb.reapable() {
            self.reap(idx);
        }
    }

    fn reap(&mut self, idx: u32) {
        let slot = &mut self.conns[idx as usize];
        let Some(tcb) = slot.tcb.take() else { return };
        slot.gen = slot.gen.wrapping_add(1).max(1);
        self.ooo_held -= tcb.ooo_cost();
        self.tune_held -= tcb.rcv_grown(&self.cfg.tcp);
        self.wheel.cancel(idx);
        // Stale queue entries would otherwise point at the slot's next
        // occupant (rare: an application closed with events unread).
        if tcb.flags & flag::IN_TXQ != 0 {
            self.txq.retain(|&i| i != idx);
        }
        if tcb.flags & flag::IN_EVQ != 0 {
            self.evq
                .retain(|s| !matches!(s, EvSrc::Tcp(i) if *i == idx));
        }
        let t = tcb.tuple;
        self.table
            .remove(&ConnKey::new(t.remote_ip, t.remote_port, t.local_port));
        if let Some(l) = self.listeners.get_mut(&tcb.listener()) {
            if tcb.flags & flag::SYNQ != 0 {
                l.syn_count = l.syn_count.saturating_sub(1);
            }
            if tcb.flags & flag::ACCEPTQ != 0 {
                l.accept_count = l.accept_count.saturating_sub(1);
            }
        }
        self.free.push(idx);
    }

    fn insert_tcb(&mut self, tcb: Tcb<R, T>) -> u32 {
        let t = tcb.tuple;
        let idx = match self.free.pop() {
            Some(i) => {
                self.conns[i as usize].tcb = Some(tcb);
                i
            }
            None => {
                self.conns.push(Slot {
                    gen: 1,
                    tcb: Some(tcb),
                });
                (self.conns.len() - 1) as u32
            }
        };
        self.table
            .insert(ConnKey::new(t.remote_ip, t.remote_port, t.local_port), idx);
        idx
    }

    fn lookup_handle(&self, h: ConnHandle) -> Result<&Tcb<R, T>, Error> {
        let slot = self.conns.get(h.idx as usize).ok_or(Error::InvalidHandle)?;
        if slot.gen != h.gen {
            return Err(Error::InvalidHandle);
        }
        let tcb = slot.tcb.as_ref().ok_or(Error::InvalidHandle)?;
        if !tcb.owned() {
            return Err(Error::InvalidHandle);
        }
        Ok(tcb)
    }

    fn handle_of(&self, idx: u32) -> ConnHandle {
        ConnHandle {
            idx,
            gen: self.conns[idx as usize].gen,
        }
    }

    // ===== events ======================================================

    /// The next event for the application, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        while let Some(&src) = self.evq.front() {
            match src {
                EvSrc::Udp(port) => {
                    self.evq.pop_front();
                    if let Some(s) = self.udp.get_mut(&port) {
                        s.in_evq = false;
                        if !s.rxq.is_empty() || s.err.is_some() {
                            return Some(Event::UdpRecv {
                                handle: UdpHandle(port),
                                cookie: s.cookie,
                            });
                        }
                    }
                }
                EvSrc::Tcp(idx) => {
                    let handle = self.handle_of(idx);
                    let listeners = &self.listeners;
                    let cfg = &self.cfg.tcp;
                    let Some(tcb) = self.conns[idx as usize].tcb.as_mut() else {
                        self.evq.pop_front();
                        continue;
                    };
                    let cookie = tcb.cookie;
                    let e = if tcb.ev & ev::KNOCK != 0 {
                        tcb.ev &= !ev::KNOCK;
                        let t = tcb.tuple;
                        Some(Event::Knock {
                            handle,
                            listener_cookie: listeners.get(&tcb.listener()).map_or(0, |l| l.cookie),
                            local_port: t.local_port,
                            remote: SocketAddrV4::new(t.remote_ip, t.remote_port),
                        })
                    } else if tcb.ev & ev::CONNECTED != 0 {
                        tcb.ev &= !ev::CONNECTED;
                        Some(Event::Connected { handle, cookie })
                    } else if tcb.ev & ev::URGENT != 0 {
                        tcb.ev &= !ev::URGENT;
                        tcb.urgent().map(|(mark, byte)| Event::Urgent {
                            handle,
                            cookie,
                            mark,
                            byte,
                        })
                    } else if tcb.ev & ev::RECV != 0 {
                        tcb.ev &= !ev::RECV;
                        let readable = tcb.readable();
                        (readable > 0).then_some(Event::Recv {
                            handle,
                            cookie,
                            readable,
                        })
                    } else if tcb.ev & ev::SENT != 0 {
                        tcb.ev &= !ev::SENT;
                        Some(Event::Sent {
                            handle,
                            cookie,
                            acked: tcb.take_acked() as usize,
                            window: tcb.send_space(cfg),
                        })
                    } else if tcb.ev & ev::PEER_CLOSED != 0 {
                        tcb.ev &= !ev::PEER_CLOSED;
                        Some(Event::PeerClosed { handle, cookie })
                    } else if tcb.ev & ev::DEAD != 0 {
                        tcb.ev &= !ev::DEAD;
                        Some(Event::Dead {
                            handle,
                            cookie,
                            reason: tcb.dead.unwrap_or(DeadReason::Aborted),
                        })
                    } else {
                        tcb.ev = 0;
                        None
                    };
                    if tcb.ev == 0 {
                        tcb.flags &= !flag::IN_EVQ;
                        self.evq.pop_front();
                        if tcb.reapable() {
                            self.reap(idx);
                        }
                    }
                    if e.is_some() {
                        return e;
                    }
                }
            }
        }
        None
    }

    // ===== TCP application calls =======================================

    /// Listen on `port`. `backlog` bounds connections completed but not yet
    /// accepted (default from the configuration); `cookie` comes back in
    /// every `Knock`.
    pub fn tcp_listen(
        &mut self,
        port: u16,
        backlog: Option<u32>,
        cookie: u64,
    ) -> Result<(), Error> {
        if port == 0 {
            return Err(Error::InvalidArgument);
        }
        if self.listeners.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        self.listeners.insert(
            port,
            Listener {
                cookie,
                backlog: backlog.unwrap_or(self.cfg.tcp.backlog).max(1),
                syn_count: 0,
                accept_count: 0,
                lock: (None, None),
                defer: Duration::ZERO,
                ip: IpOpts::default(),
            },
        );
        Ok(())
    }

    /// `TCP_DEFER_ACCEPT` on listener `port`: a connection whose
    /// handshake completes without data waits, up to `defer`, for data
    /// or the peer's FIN before it is announced (`Knock`); one reset
    /// meanwhile never is. Zero: announced at once.
    pub fn tcp_listener_defer_accept(&mut self, port: u16, defer: Duration) -> Result<(), Error> {
        self.listeners
            .get_mut(&port)
            .ok_or(Error::InvalidHandle)?
            .defer = defer;
        Ok(())
    }

    /// The IPv4 header options of listener `port`'s SYN-ACKs and of the
    /// connections it makes from now on (a Linux listener's accepted
    /// sockets inherit its `IP_TOS` and `IP_TTL`, and its SYN-ACK carries
    /// them).
    pub fn tcp_listener_ip_opts(&mut self, port: u16, ip: IpOpts) -> Result<(), Error> {
        self.listeners
            .get_mut(&port)
            .ok_or(Error::InvalidHandle)?
            .ip = ip.for_tcp();
        Ok(())
    }

    /// Fix the buffers of the connections listener `port` makes from now
    /// on, as [`Stack::tcp_lock_buffers`] (a Linux listener's accepted
    /// sockets inherit its `SO_RCVBUF` and `SO_SNDBUF`, and its SYN-ACK
    /// offers the receive buffer's window). `None` leaves that buffer as
    /// it was.
    pub fn tcp_listener_lock_buffers(
        &mut self,
        port: u16,
        rcv: Option<u32>,
        snd: Option<u32>,
    ) -> Result<(), Error> {
        let l = self.listeners.get_mut(&port).ok_or(Error::InvalidHandle)?;
        l.lock = (rcv.or(l.lock.0), snd.or(l.lock.1));
        Ok(())
    }

    /// Stop listening. Every connection from the listener that the
    /// application has not accepted is reset: half-open ones silently,
    /// knocked ones with a `Dead` event (the application must still close
    /// their handles).
    pub fn tcp_unlisten(&mut self, port: u16) -> Result<(), Error> {
        self.listeners.remove(&port).ok_or(Error::InvalidHandle)?;
        for idx in 0..self.conns.len() as u32 {
            let orphan = matches!(self.conns[idx as usize].tcb.as_ref(),
                Some(t) if t.passive() && t.listener() == port && t.flags & flag::ACCEPTED == 0);
            if orphan {
                let was_knocked = self.tcb_mut(idx).is_some_and(|t| t.knocked());
                let rst = self
                    .with_tcb(idx, |tcb, ctx| {
                        let rst = tcb.abort(ctx);
                        // The listener is gone: its queues no longer count
                        // this connection (a new listener starts at zero).
                        tcb.flags &= !(flag::SYNQ | flag::ACCEPTQ);
                        if was_knocked {
                            // The application saw the knock: tell it.
                            tcb.flags &= !flag::APP_CLOSED;
                            tcb.ev |= ev::DEAD;
                        }
                        rst.map(|r| (tcb.tuple, r))
                    })
                    .flatten();
                self.send_rst(rst);
                self.after(idx);
            }
        }
        Ok(())
    }

    /// Open a connection (IX `connect`); `Connected` or `Dead` follows.
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        cookie: u64,
        remote: SocketAddrV4,
    ) -> Result<ConnHandle, Error> {
        self.tcp_connect_with(now, cookie, remote, |_| true)
    }

    /// Like [`tcp_connect`](Self::tcp_connect), choosing a local port for
    /// which `accept_port` is true (the engine uses this to pick a port
    /// whose flow hash lands on the calling core, IX §4.4).
    pub fn tcp_connect_with(
        &mut self,
        now: Instant,
        cookie: u64,
        remote: SocketAddrV4,
        accept_port: impl Fn(u16) -> bool,
    ) -> Result<ConnHandle, Error> {
        self.advance_clock(now);
        let rip = *remote.ip();
        let to_self = self.connectable(remote)?;
        // RFC 6056 algorithm 3: a per-destination starting point, then a
        // sequential search.
        let (lo, hi) = self.cfg.tcp.ephemeral_ports;
        let range = u32::from(hi - lo) + 1;
        let offset = self.keyed.port_offset(self.cfg.ip, rip, remote.port());
        let (mut port, mut beyond) = (None, None);
        for i in 0..range {
            let p =
                lo + ((offset.wrapping_add(self.next_ephemeral).wrapping_add(i)) % range) as u16;
            // (A connection to ourselves never gets its own port as the
            // local one: that would be one TCB meeting itself.)
            if self.listeners.contains_key(&p) || !accept_port(p) || (to_self && p == remote.port())
            {
                continue;
            }
            let free = match self.table.get(&ConnKey::new(rip, remote.port(), p)) {
                None => true,
                // Held only by a TIME-WAIT connection old enough to reuse
                // (Linux `tcp_tw_reuse`): take it over, as the first
                // candidate in order, so a busy client does not scan the
                // whole range on every connect.
                Some(&idx) => match self.time_wait_to_reuse(idx, false) {
                    Some(after) => {
                        beyond = Some(after);
                        true
                    }
                    None => false,
                },
            };
            if free {
                self.next_ephemeral = self.next_ephemeral.wrapping_add(i + 1);
                port = Some(p);
                break;
            }
        }
        let lport = port.ok_or(Error::NoPorts)?;
        Ok(self.open_active(cookie, remote, lport, beyond))
    }

    /// Take over TIME-WAIT connection `idx` for a new outgoing one if it may
    /// be (see `Tcb::time_wait_reusable_by_connect`; `bound`: the new
    /// socket was bound to the port): the sequence number the new one must
    /// start beyond.
    fn time_wait_to_reuse(&mut self, idx: u32, bound: bool) -> Option<SeqNum> {
        let msl = self.cfg.tcp.msl;
        let t = self.conns[idx as usize].tcb.as_ref()?;
        if t.owned() || !t.time_wait_reusable_by_connect(self.now, msl, bound) {
            return None;
        }
        let after = t.snd_nxt();
        self.recycle_time_wait(idx);
        Some(after)
    }

    /// Like [`tcp_connect`](Self::tcp_connect), from local port
    /// `local_port` (a socket bound before it connects). `AddrInUse` if a
    /// connection holds that 4-tuple (one in TIME-WAIT too, unless old
    /// enough to reuse, as in `tcp_connect`).
    pub fn tcp_connect_from(
        &mut self,
        now: Instant,
        cookie: u64,
        remote: SocketAddrV4,
        local_port: u16,
    ) -> Result<ConnHandle, Error> {
        self.advance_clock(now);
        let rip = *remote.ip();
        if local_port == 0 {
            return Err(Error::InvalidArgument);
        }
        let to_self = self.connectable(remote)?;
        if to_self && local_port == remote.port() {
            // One TCB meeting itself.
            return Err(Error::AddrInUse);
        }
        let beyond = match self
            .table
            .get(&ConnKey::new(rip, remote.port(), local_port))
        {
            Some(&idx) => Some(self.time_wait_to_reuse(idx, true).ok_or(Error::AddrInUse)?),
            None => None,
        };
        Ok(self.open_active(cookie, remote, local_port, beyond))
    }

    /// Whether `remote` can be connected to; true if it is our own
    /// address (reachable: its frames carry our own MAC, and the caller
    /// hands them back through `handle_local`).
    fn connectable(&self, remote: SocketAddrV4) -> Result<bool, Error> {
        let rip = *remote.ip();
        if remote.port() == 0 {
            return Err(Error::InvalidArgument);
        }
        let to_self = rip == self.cfg.ip;
        if rip.is_unspecified()
            || rip.is_broadcast()
            || rip.is_multicast()
            || (!to_self && self.next_hop(rip).is_none())
        {
            return Err(Error::Unreachable);
        }
        Ok(to_self)
    }

    /// Start an active open from `lport` to `remote` (both checked).
    /// Open a connection from `lport` to `remote`. `beyond`: the next
    /// sequence number of a TIME-WAIT connection on the same tuple that
    /// this one takes over; it starts a window's worth past it, as Linux
    /// does (`tw_snd_nxt + 65535 + 2`), unless its own initial sequence
    /// number (RFC 6528) is further on already.
    fn open_active(
        &mut self,
        cookie: u64,
        remote: SocketAddrV4,
        lport: u16,
        beyond: Option<SeqNum>,
    ) -> ConnHandle {
        let tuple = Tuple {
            local_ip: self.cfg.ip,
            local_port: lport,
            remote_ip: *remote.ip(),
            remote_port: remote.port(),
        };
        let mut iss = SeqNum(self.keyed.isn(&tuple, self.now));
        if let Some(b) = beyond {
            let past = b + 65537;
            if iss.diff(past) < 0 {
                iss = past;
            }
        }
        let ts_offset = self.keyed.ts_offset(&tuple);
        let local_mss = self.local_mss;
        let tcb = {
            let mut ctx = Ctx {
                now: self.now,
                cfg: &self.cfg.tcp,
                counters: &mut self.counters,
                challenge: &mut self.challenge,
                tick: self.cfg.timer_tick,
                ooo_room: 0,
                tune_room: 0,
            };
            Tcb::connect(&mut ctx, tuple, iss, ts_offset, local_mss, cookie)
        };
        let idx = self.insert_tcb(tcb);
        self.after(idx);
        self.handle_of(idx)
    }

    /// Accept a knocked connection (IX `accept`), giving it a cookie.
    pub fn tcp_accept(&mut self, h: ConnHandle, cookie: u64) -> Result<(), Error> {
        let tcb = self.lookup_handle(h)?;
        if !tcb.passive() || tcb.flags & flag::ACCEPTED != 0 {
            return Err(Error::InvalidState);
        }
        let tcb = self.tcb_mut(h.idx).ok_or(Error::InvalidHandle)?;
        tcb.accept(cookie);
        let port = tcb.listener();
        if tcb.flags & flag::ACCEPTQ != 0 {
            tcb.flags &= !flag::ACCEPTQ;
            if let Some(l) = self.listeners.get_mut(&port) {
                l.accept_count = l.accept_count.saturating_sub(1);
            }
        }
        self.after(h.idx);
        Ok(())
    }

    /// Give an accepted or connected connection a new cookie: its events
    /// name the new one from now on, those not yet taken included (the
    /// socket service moves a connection from one application to another
    /// this way when a program hands it over a Unix socket).
    pub fn tcp_set_cookie(&mut self, h: ConnHandle, cookie: u64) -> Result<(), Error> {
        self.lookup_handle(h)?;
        let tcb = self.tcb_mut(h.idx).ok_or(Error::InvalidHandle)?;
        tcb.cookie = cookie;
        Ok(())
    }

    /// Offer `data` for sending (IX `sendv`); returns the bytes the window
    /// accepted — possibly fewer than offered, possibly zero. The stack
    /// keeps `data` until those bytes are acknowledged; offer the rest
    /// again after a `Sent` event.
    pub fn tcp_send(&mut self, now: Instant, h: ConnHandle, data: T) -> Result<usize, Error> {
        self.advance_clock(now);
        let tcb = self.lookup_handle(h)?;
        if !matches!(tcb.state, State::Established | State::CloseWait) {
            return Err(Error::InvalidState);
        }
        let n = self
            .with_tcb(h.idx, |tcb, ctx| tcb.send(ctx, data))
            .unwrap_or(0);
        self.after(h.idx);
        Ok(n)
    }

    /// Bytes `tcp_send` would accept now.
    pub fn tcp_send_space(&self, h: ConnHandle) -> Result<usize, Error> {
        Ok(self.lookup_handle(h)?.send_space(&self.cfg.tcp))
    }

    /// The application has more to send than [`tcp_send_space`]
    /// (Self::tcp_send_space) allows and holds it back rather than offer
    /// it (a caller that asks the space first, as the sockets service
    /// does): as after a short `tcp_send`, a `Sent` event follows when the
    /// peer's window opens — also by a pure window update, which
    /// acknowledges nothing new — and a zero window is probed meanwhile
    /// (RFC 9293 §3.8.6.1). Without it a sender whose peer closed its
    /// window with everything acknowledged waited for ever.
    pub fn tcp_send_blocked(&mut self, now: Instant, h: ConnHandle) -> Result<(), Error> {
        self.advance_clock(now);
        self.lookup_handle(h)?;
        self.with_tcb(h.idx, |tcb, _| tcb.mark_send_blocked());
        self.after(h.idx);
        Ok(())
    }

    /// The data queued so far, less its last `back` bytes, ends urgent
    /// data (`send` with `MSG_OOB`): segments point past it (URG) until it
    /// is acknowledged, and go out though Nagle or a cork would hold them
    /// (RFC 9293 §3.8.5).
    pub fn tcp_mark_urgent(
        &mut self,
        now: Instant,
        h: ConnHandle,
        back: usize,
    ) -> Result<(), Error> {
        self.advance_clock(now);
        self.lookup_handle(h)?;
        self.with_tcb(h.idx, |tcb, _| tcb.mark_urgent(back));
        self.after(h.idx);
        Ok(())
    }

    /// The peer's latest urgent data: the urgent byte's offset in the
    /// stream and the byte once it has come (what the last
    /// [`Event::Urgent`] said).
    pub fn tcp_urgent(&self, h: ConnHandle) -> Result<Option<(u64, Option<u8>)>, Error> {
        Ok(self.lookup_handle(h)?.urgent())
    }

    /// The readable bytes, in place in the frames that carried them (IX
    /// `recv`: read-only, zero-copy, valid until `tcp_recv_done`).
    pub fn tcp_recv_chunks(
        &self,
        h: ConnHandle,
    ) -> Result<impl Iterator<Item = &[u8]> + '_, Error> {
        Ok(self.lookup_handle(h)?.recv_chunks())
    }

    /// Copy up to `out.len()` readable bytes and release them.
    pub fn tcp_read(
        &mut self,
        now: Instant,
        h: ConnHandle,
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let n = self.lookup_handle(h)?.peek(out);
        self.tcp_recv_done(now, h, n)?;
        Ok(n)
    }

    /// Readable bytes.
    pub fn tcp_readable(&self, h: ConnHandle) -> Result<usize, Error> {
        Ok(self.lookup_handle(h)?.readable())
    }

    /// The application is done with `n` readable bytes (IX `recv_done`):
    /// their frames are released and the window advances.
    pub fn tcp_recv_done(&mut self, now: Instant, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.advance_clock(now);
        self.lookup_handle(h)?;
        self.tcp_mut(h)?.recv_done(n);
        self.after(h.idx);
        Ok(())
    }

    /// Take `n` readable bytes (the caller copied them out first) to hold
    /// them, unread: their frames are released, their place in the window
    /// is kept until [`Stack::tcp_recv_release`] (see `Tcb::recv_hold`).
    pub fn tcp_recv_hold(&mut self, now: Instant, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.advance_clock(now);
        self.tcp_mut(h)?.recv_hold(n);
        self.after(h.idx);
        Ok(())
    }

    /// `n` bytes taken by [`Stack::tcp_recv_hold`] are read: open the
    /// window for them.
    pub fn tcp_recv_release(&mut self, now: Instant, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.advance_clock(now);
        self.tcp_mut(h)?.recv_release(n);
        self.after(h.idx);
        Ok(())
    }

    fn tcp_mut(&mut self, h: ConnHandle) -> Result<&mut Tcb<R, T>, Error> {
        self.lookup_handle(h)?;
        self.tcb_mut(h.idx).ok_or(Error::InvalidHandle)
    }

    /// Has the peer closed its side (after the readable bytes, EOF)?
    pub fn tcp_peer_closed(&self, h: ConnHandle) -> Result<bool, Error> {
        Ok(self.lookup_handle(h)?.peer_closed())
    }

    /// Half-close: FIN after the queued data; reading continues.
    pub fn tcp_shutdown(&mut self, now: Instant, h: ConnHandle) -> Result<(), Error> {
        self.advance_clock(now);
        let ok = self.tcp_mut(h)?.shutdown();
        self.after(h.idx);
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidState)
        }
    }

    /// Close (or reject) and forget the handle (IX `close`). Queued data is
    /// still delivered and the connection closes in order; with unread
    /// data it is reset instead (as Linux does).
    pub fn tcp_close(&mut self, now: Instant, h: ConnHandle) -> Result<(), Error> {
        self.advance_clock(now);
        self.lookup_handle(h)?;
        let accepted = self.tcb_mut(h.idx).map(|t| t.flags & flag::ACCEPTQ != 0);
        let rst = self
            .with_tcb(h.idx, |tcb, ctx| tcb.close(ctx).map(|r| (tcb.tuple, r)))
            .flatten();
        self.send_rst(rst);
        if accepted == Some(true) {
            if let Some(tcb) = self.tcb_mut(h.idx) {
                tcb.flags &= !flag::ACCEPTQ;
                let port = tcb.listener();
                if let Some(l) = self.listeners.get_mut(&port) {
                    l.accept_count = l.accept_count.saturating_sub(1);
                }
            }
        }
        self.after(h.idx);
        Ok(())
    }

    /// Reset the connection and forget the handle.
    pub fn tcp_abort(&mut self, now: Instant, h: ConnHandle) -> Result<(), Error> {
        self.advance_clock(now);
        self.lookup_handle(h)?;
        let rst = self
            .with_tcb(h.idx, |tcb, ctx| tcb.abort(ctx).map(|r| (tcb.tuple, r)))
            .flatten();
        self.send_rst(rst);
        self.after(h.idx);
        Ok(())
    }

    /// Abort connections for a stack that is shutting down, so that their
    /// peers learn it now rather than by their own timeouts: each is reset
    /// as [`Stack::tcp_abort`] would (a RST in the synchronized states but
    /// TIME-WAIT, RFC 9293 §3.10.5) and forgotten, handles and all. At
    /// most `max` per call (each RST waits in a bounded queue for
    /// [`Stack::poll_transmit`]); returns how many were forgotten and how
    /// many of those were sent a RST — call again after transmitting until
    /// the first is 0.
    pub fn tcp_abort_all(&mut self, now: Instant, max: usize) -> (usize, usize) {
        self.advance_clock(now);
        let max = max.min(CTRL_QUEUE_LIMIT.saturating_sub(self.ctrlq.len()));
        let (mut n, mut reset) = (0, 0);
        for idx in 0..self.conns.len() {
            if n == max {
                break;
            }
            if self.conns[idx].tcb.is_none() {
                continue;
            }
            let idx = idx as u32;
            let rst = self
                .with_tcb(idx, |tcb, ctx| tcb.abort(ctx).map(|r| (tcb.tuple, r)))
                .flatten();
            reset += usize::from(rst.is_some());
            self.send_rst(rst);
            self.after(idx);
            n += 1;
        }
        (n, reset)
    }

    /// Nagle off (`true`, the default) or on.
    pub fn tcp_set_nodelay(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.tcp_mut(h)?.set_nodelay(on);
        // Data Nagle was holding may go now.
        self.after(h.idx);
        Ok(())
    }

    /// `TCP_CORK` on or off (see `Tcb::set_cork`): uncorked, what the
    /// cork held may go now.
    pub fn tcp_set_cork(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.tcp_mut(h)?.set_cork(on);
        self.after(h.idx);
        Ok(())
    }

    /// What connection `h`'s packets carry in their IPv4 header from now
    /// on (`IP_TOS`, its ECN bits left clear, and `IP_TTL`).
    pub fn tcp_set_ip_opts(&mut self, h: ConnHandle, ip: IpOpts) -> Result<(), Error> {
        self.tcp_mut(h)?.ip = ip.for_tcp();
        Ok(())
    }

    /// Keepalive on or off.
    pub fn tcp_set_keepalive(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.tcp_mut(h)?.set_keepalive(on);
        self.after(h.idx);
        Ok(())
    }

    /// A connection's keepalive timing (Linux's TCP_KEEPIDLE,
    /// TCP_KEEPINTVL, TCP_KEEPCNT): seconds idle before the first probe,
    /// seconds between probes, unanswered probes before it is dropped; 0
    /// keeps the configuration's.
    pub fn tcp_set_keepalive_timing(
        &mut self,
        h: ConnHandle,
        idle_s: u32,
        intvl_s: u32,
        cnt: u8,
    ) -> Result<(), Error> {
        self.tcp_mut(h)?.set_keepalive_timing(idle_s, intvl_s, cnt);
        self.after(h.idx);
        Ok(())
    }

    /// Fix a connection's buffers, as `SO_RCVBUF` and `SO_SNDBUF` do on
    /// Linux: the receive buffer (bytes of window) no longer auto-tunes,
    /// and the send buffer no longer follows the congestion window; each
    /// within the configuration's limits, the receive buffer's growth past
    /// `tcp.recv_buffer` within `rcv_tune_memory` (`Tcb::lock_buffers`).
    /// `None` leaves that buffer as it was.
    pub fn tcp_lock_buffers(
        &mut self,
        h: ConnHandle,
        rcv: Option<u32>,
        snd: Option<u32>,
    ) -> Result<(), Error> {
        self.lookup_handle(h)?;
        self.with_tcb(h.idx, |tcb, ctx| tcb.lock_buffers(ctx, rcv, snd));
        self.after(h.idx);
        Ok(())
    }

    /// Connection state.
    pub fn tcp_state(&self, h: ConnHandle) -> Result<State, Error> {
        Ok(self.lookup_handle(h)?.state)
    }

    /// A `TCP_INFO`-like snapshot.
    pub fn tcp_info(&self, h: ConnHandle) -> Result<TcpInfo, Error> {
        Ok(self.lookup_handle(h)?.info(&self.cfg.tcp))
    }

    /// Local and remote address of a connection.
    pub fn tcp_addrs(&self, h: ConnHandle) -> Result<(SocketAddrV4, SocketAddrV4), Error> {
        let t = self.lookup_handle(h)?.tuple;
        Ok((
            SocketAddrV4::new(t.local_ip, t.local_port),
            SocketAddrV4::new(t.remote_ip, t.remote_port),
        ))
    }

    /// Connections held, by state (TIME-WAIT and unreaped ones included).
    pub fn tcp_state_counts(&self) -> Vec<(State, usize)> {
        let mut out: Vec<(State, usize)> = Vec::new();
        for t in self.conns.iter().filter_map(|s| s.tcb.as_ref()) {
            match out.iter_mut().find(|(s, _)| *s == t.state) {
                Some(e) => e.1 += 1,
                None => out.push((t.state, 1)),
            }
        }
        out
    }

    /// Connections held in any state.
    pub fn tcp_connection_count(&self) -> usize {
        self.conns.iter().filter(|s| s.tcb.is_some()).count()
    }

    /// Check every connection's invariants (for tests and fuzzing).
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, s) in self.conns.iter().enumerate() {
            if let Some(t) = &s.tcb {
                t.check_invariants()
                    .map_err(|e| format!("connection {i}: {e}"))?;
                let key = ConnKey::new(t.tuple.remote_ip, t.tuple.remote_port, t.tuple.local_port);
                if self.table.get(&key) != Some(&(i as u32)) {
                    return Err(format!("connection {i} missing from the table"));
                }
            }
        }
        if self.table.len() != self.tcp_connection_count() {
            return Err("table holds entries for freed connections".into());
        }
        Ok(())
    }

    // ===== UDP application calls =======================================

    //= https://www.rfc-editor.org/rfc/rfc6056#section-3.3.1
    /// A free ephemeral port for a bind to port 0: the first of the range
    /// that `taken` does not hold, searched in order from a drawn start
    /// (RFC 6056 algorithm 1): unpredictable without the stack's secret,
    /// so an off-path attacker cannot guess the port of a resolver's
    /// query (RFC 5452 §9.2) or of a connection from a bound socket. (A
    /// connect picks its port by RFC 6056 algorithm 3.)
    pub fn draw_free_port(&mut self, taken: impl Fn(u16) -> bool) -> Option<u16> {
        let start = self.next_port_draw();
        free_port_from(start, self.cfg.tcp.ephemeral_ports, taken)
    }

    /// The next start of [`Stack::draw_free_port`]'s search.
    fn next_port_draw(&mut self) -> u32 {
        self.port_draws += 1;
        self.keyed.port_draw(self.cfg.ip, self.port_draws)
    }

    /// Bind a UDP socket (`port` 0: an ephemeral port, [`Stack::draw_free_port`]).
    pub fn udp_bind(&mut self, port: u16, cookie: u64) -> Result<UdpHandle, Error> {
        let port = if port == 0 {
            let start = self.next_port_draw();
            free_port_from(start, self.cfg.tcp.ephemeral_ports, |p| {
                self.udp.contains_key(&p)
            })
            .ok_or(Error::NoPorts)?
        } else {
            port
        };
        if self.udp.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        self.udp.insert(
            port,
            UdpSocket {
                cookie,
                rxq: VecDeque::new(),
                in_evq: false,
                err: None,
            },
        );
        Ok(UdpHandle(port))
    }

    /// Give UDP socket `h` a new cookie (its later events carry it: a
    /// socket that comes to share its port with others).
    pub fn udp_set_cookie(&mut self, h: UdpHandle, cookie: u64) -> Result<(), Error> {
        let u = self.udp.get_mut(&h.0).ok_or(Error::InvalidHandle)?;
        u.cookie = cookie;
        Ok(())
    }

    /// Close a UDP socket, dropping queued datagrams.
    pub fn udp_close(&mut self, h: UdpHandle) -> Result<(), Error> {
        self.udp
            .remove(&h.0)
            .map(|_| ())
            .ok_or(Error::InvalidHandle)
    }

    /// Queue a datagram; the stack keeps `data` until it is transmitted.
    pub fn udp_send(&mut self, h: UdpHandle, dst: SocketAddrV4, data: T) -> Result<(), Error> {
        self.udp_send_with(h, dst, data, IpOpts::default())
    }

    /// [`udp_send`](Self::udp_send) with IPv4 header options (a socket's
    /// `IP_TOS` and `IP_TTL`).
    pub fn udp_send_with(
        &mut self,
        h: UdpHandle,
        dst: SocketAddrV4,
        data: T,
        ip: IpOpts,
    ) -> Result<(), Error> {
        if !self.udp.contains_key(&h.0) {
            return Err(Error::InvalidHandle);
        }
        if dst.port() == 0 {
            return Err(Error::InvalidArgument);
        }
        // Longer than one frame carries: sent in fragments.
        if data.as_ref().len() > MAX_UDP_PAYLOAD {
            return Err(Error::MessageTooLong);
        }
        let to = *dst.ip();
        // Our own address: the frame carries our MAC and comes back by
        // `handle_local`, as a TCP connection to ourselves does.
        if to.is_unspecified()
            || to.is_multicast()
            || (to != self.cfg.ip && self.next_hop(to).is_none())
        {
            return Err(Error::Unreachable);
        }
        if self.udp_txq.len() >= UDP_TX_LIMIT {
            return Err(Error::WouldBlock);
        }
        self.udp_txq.push_back(UdpOut {
            src_port: h.0,
            dst,
            data,
            ip,
        });
        Ok(())
    }

    /// Take the next received datagram.
    pub fn udp_recv(&mut self, h: UdpHandle) -> Result<Option<Datagram<R>>, Error> {
        let s = self.udp.get_mut(&h.0).ok_or(Error::InvalidHandle)?;
        Ok(s.rxq.pop_front())
    }

    /// Take the ICMP destination-unreachable last received about a
    /// datagram UDP socket `h` sent, if any: where that datagram went and
    /// the ICMP code (announced with `UdpRecv`, as a datagram is).
    pub fn udp_take_error(&mut self, h: UdpHandle) -> Result<Option<(SocketAddrV4, u8)>, Error> {
        let s = self.udp.get_mut(&h.0).ok_or(Error::InvalidHandle)?;
        Ok(s.err.take())
    }

    // ===== input =======================================================

    /// A frame arrived. The stack may keep it (TCP payload, UDP datagrams,
    /// echo requests) or drop it (returning it to its pool).
    pub fn handle_frame(&mut self, now: Instant, frame: R) {
        self.input(now, frame, false);
    }

    /// Take back a frame this stack sent to its own address (its
    /// destination MAC is ours: see [`is_local_frame`](Self::is_local_frame)).
    /// Unlike [`handle_frame`](Self::handle_frame) it may carry our own
    /// address as its source, which from the wire is spoofing and dropped.
    pub fn handle_local(&mut self, now: Instant, frame: R) {
        self.counters.local_frames += 1;
        self.input(now, frame, true);
    }

    /// Whether a frame from [`poll_transmit`](Self::poll_transmit) is
    /// addressed to this stack itself (a connection to its own address):
    /// the caller gives it to [`handle_local`](Self::handle_local)
    /// instead of the wire.
    pub fn is_local_frame(&self, frame: &[u8]) -> bool {
        frame.len() >= 6 && frame[..6] == self.cfg.mac.0
    }

    fn input(&mut self, now: Instant, frame: R, local: bool) {
        self.advance_clock(now);
        self.counters.rx_frames += 1;
        let (ethertype, off) = {
            let Ok(eth) = EthernetFrame::new_checked(frame.as_ref()) else {
                self.counters.drop(DropReason::EthTruncated);
                return;
            };
            let dst = eth.dst_addr();
            if dst != self.cfg.mac && !dst.is_broadcast() {
                self.counters.drop(DropReason::EthNotForUs);
                return;
            }
            if eth.vlan_id() != self.cfg.vlan {
                self.counters.drop(DropReason::EthVlanMismatch);
                return;
            }
            (eth.ethertype(), eth.header_len())
        };
        match ethertype {
            EtherType::Arp => self.arp_input(&frame.as_ref()[off..]),
            EtherType::Ipv4 => self.ipv4_input(frame, off, local),
            _ => self.counters.drop(DropReason::EthUnknownType),
        }
    }

    fn arp_input(&mut self, b: &[u8]) {
        let Ok(repr) = ArpPacket::new_checked(b).and_then(|p| ArpRepr::parse(&p)) else {
            self.counters.drop(DropReason::ArpMalformed);
            return;
        };
        let sip = repr.sender_ip;
        // (Our own MAC as a sender's would make frames for that sender
        // look like frames to ourselves.)
        if !repr.sender_mac.is_unicast()
            || repr.sender_mac == self.cfg.mac
            || sip == self.cfg.ip
            || sip.is_broadcast()
            || sip.is_multicast()
        {
            self.counters.drop(DropReason::ArpBadSender);
            return;
        }
        let for_us = repr.target_ip == self.cfg.ip;
        // RFC 826: merge the sender into an existing entry; add it when the
        // packet is for us.
        let merged = !sip.is_unspecified() && self.arp.update(sip, repr.sender_mac, self.now);
        if for_us
            && !merged
            && !sip.is_unspecified()
            && same_subnet(sip, self.cfg.ip, self.cfg.prefix_len)
        {
            self.arp.insert(sip, repr.sender_mac, self.now);
            self.release_evicted();
        }
        if !sip.is_unspecified() {
            self.release_waiters(sip, Some(repr.sender_mac));
        }
        if !for_us {
            self.counters.drop(DropReason::ArpNotForUs);
            return;
        }
        if repr.operation == Operation::Request {
            self.push_ctrl(Ctrl::Arp {
                op: Operation::Reply,
                eth_dst: repr.sender_mac,
                target_mac: repr.sender_mac,
                target_ip: sip,
            });
        }
    }

    fn ipv4_input(&mut self, frame: R, off: usize, local: bool) {
        let (repr, l4_off, frag) = match parse_ipv4(&frame.as_ref()[off..], self.cfg.checksums.ipv4)
        {
            Ok((repr, hl, frag)) => (repr, off + hl, frag),
            Err(r) => return self.counters.drop(r),
        };
        if repr.dst_addr != self.cfg.ip {
            self.counters.drop(DropReason::Ipv4NotForUs);
            return;
        }
        let src = repr.src_addr;
        if (src == self.cfg.ip && !local)
            || src.is_unspecified()
            || src.is_broadcast()
            || src.is_multicast()
            || src.is_loopback()
        {
            self.counters.drop(DropReason::Ipv4BadSource);
            return;
        }
        let l4 = l4_off..l4_off + repr.payload_len;
        if let Some((offset, more)) = frag {
            return self.fragment_input(
                &frame.as_ref()[off..l4.end],
                &repr,
                l4_off - off,
                offset,
                more,
            );
        }
        match repr.protocol {
            Protocol::Tcp => self.tcp_input(frame, src, l4),
            Protocol::Udp => self.udp_input(Buf::Frame(frame), src, l4, (repr.dscp_ecn, repr.ttl)),
            Protocol::Icmp => self.icmp_input(Buf::Frame(frame), src, l4),
            Protocol::Unknown(_) => {
                self.counters.drop(DropReason::Ipv4UnknownProtocol);
                self.icmp_error(
                    src,
                    icmpv4::unreachable::PROTOCOL,
                    &frame.as_ref()[off..l4.end],
                );
            }
        }
    }

    /// One fragment of a datagram for us (`packet`: its IP header and
    /// payload; `hl`: the header's length).
    fn fragment_input(
        &mut self,
        packet: &[u8],
        repr: &Ipv4Repr,
        hl: usize,
        offset: usize,
        more: bool,
    ) {
        if !matches!(repr.protocol, Protocol::Udp | Protocol::Icmp) {
            self.counters.drop(DropReason::Ipv4Fragment);
            return;
        }
        self.counters.ipv4_reasm_reqds += 1;
        let f = Fragment {
            src: repr.src_addr,
            proto: repr.protocol,
            ident: repr.ident,
            offset,
            more,
            data: &packet[hl..],
            packet,
        };
        let mut v = match self.reasm.insert(self.now, &f) {
            Outcome::Held => return,
            Outcome::Dropped(r) => return self.counters.drop(r),
            Outcome::Done(v) => v,
        };
        self.counters.ipv4_reasm_oks += 1;
        // The whole datagram behind a header of its own, as if it had come
        // in one piece (an ICMP error about it quotes this header).
        let len = v.len();
        Ipv4Repr {
            payload_len: len - HEAD_ROOM,
            dont_frag: false,
            ..*repr
        }
        .emit(&mut v[..HEAD_ROOM], Checksum::None);
        let l4 = HEAD_ROOM..len;
        match repr.protocol {
            Protocol::Udp => {
                self.udp_input(Buf::Owned(v), repr.src_addr, l4, (repr.dscp_ecn, repr.ttl))
            }
            _ => self.icmp_input(Buf::Owned(v), repr.src_addr, l4),
        }
    }

    fn udp_input(
        &mut self,
        frame: Buf<R>,
        src: Ipv4Addr,
        l4: core::ops::Range<usize>,
        (tos, ttl): (u8, u8),
    ) {
        let b = &frame.as_ref()[l4.clone()];
        // A reassembled datagram's checksum was complete when it was cut up
        // (a device sums no fragments): check it whatever the port says.
        let csum = match frame {
            Buf::Owned(_) => Checksum::Both,
            Buf::Frame(_) => self.cfg.checksums.udp,
        };
        let (repr, range) = match parse_udp(b, src, self.cfg.ip, csum) {
            Ok((repr, r)) => (repr, l4.start + r.start..l4.start + r.end),
            Err(r) => return self.counters.drop(r),
        };
        let limit = self.cfg.udp_rx_queue;
        match self.udp.get_mut(&repr.dst_port) {
            None => {
                self.counters.drop(DropReason::UdpNoSocket);
                let ip_start = l4.start - ipv4::HEADER_LEN;
                let orig = frame.as_ref()[ip_start..l4.end].to_vec();
                self.icmp_error(src, icmpv4::unreachable::PORT, &orig);
            }
            Some(s) if s.rxq.len() >= limit => self.counters.drop(DropReason::UdpQueueFull),
            Some(s) => {
                s.rxq.push_back(Datagram {
                    src: SocketAddrV4::new(src, repr.src_port),
                    tos,
                    ttl,
                    buf: frame,
                    start: range.start,
                    end: range.end,
                });
                self.counters.udp_in_datagrams += 1;
                if !s.in_evq {
                    s.in_evq = true;
                    self.evq.push_back(EvSrc::Udp(repr.dst_port));
                }
            }
        }
    }

    fn icmp_input(&mut self, frame: Buf<R>, src: Ipv4Addr, l4: core::ops::Range<usize>) {
        enum Act {
            Echo,
            Error {
                code: u8,
                mtu: u16,
                original: [u8; 28],
            },
            Nothing,
        }
        let act = {
            let b = &frame.as_ref()[l4.clone()];
            let Ok(p) = Icmpv4Packet::new_checked(b) else {
                self.counters.drop(DropReason::IcmpMalformed);
                return;
            };
            match Icmpv4Repr::parse(&p, self.cfg.checksums.icmpv4) {
                Ok(Icmpv4Repr::EchoRequest { .. }) => Act::Echo,
                Ok(Icmpv4Repr::DstUnreachable {
                    code,
                    next_hop_mtu,
                    original,
                }) => {
                    let mut o = [0u8; 28];
                    // The quoted header may carry options: keep its first
                    // 20 bytes and the 8 after the options.
                    let ihl = usize::from(original[0] & 0x0f) * 4;
                    if ihl < 20 || original.len() < ihl + 8 {
                        self.counters.drop(DropReason::IcmpMalformed);
                        return;
                    }
                    o[..20].copy_from_slice(&original[..20]);
                    o[20..].copy_from_slice(&original[ihl..ihl + 8]);
                    Act::Error {
                        code,
                        mtu: next_hop_mtu,
                        original: o,
                    }
                }
                Ok(Icmpv4Repr::TimeExceeded { .. }) | Ok(Icmpv4Repr::EchoReply { .. }) => {
                    Act::Nothing
                }
                Err(wire::Error::Checksum) => {
                    self.counters.drop(DropReason::IcmpBadChecksum);
                    return;
                }
                Err(wire::Error::Unrecognized) => {
                    self.counters.drop(DropReason::IcmpUnsupported);
                    return;
                }
                Err(_) => {
                    self.counters.drop(DropReason::IcmpMalformed);
                    return;
                }
            }
        };
        match act {
            Act::Echo => {
                self.push_ctrl(Ctrl::EchoReply {
                    dst: src,
                    frame,
                    icmp_off: l4.start,
                    icmp_len: l4.len(),
                });
            }
            Act::Error {
                code,
                mtu,
                original,
            } => self.icmp_error_input(code, mtu, &original),
            Act::Nothing => self.counters.drop(DropReason::IcmpUnsupported),
        }
    }

    /// An ICMP destination-unreachable about one of our segments.
    fn icmp_error_input(&mut self, code: u8, mtu: u16, o: &[u8; 28]) {
        let proto = o[9];
        let osrc = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
        let odst = Ipv4Addr::new(o[16], o[17], o[18], o[19]);
        if proto == 17 && osrc == self.cfg.ip {
            return self.udp_icmp_error(code, odst, o);
        }
        if proto != 6 || osrc != self.cfg.ip {
            self.counters.drop(DropReason::IcmpNoMatch);
            return;
        }
        let sport = u16::from_be_bytes([o[20], o[21]]);
        let dport = u16::from_be_bytes([o[22], o[23]]);
        let seq = SeqNum(u32::from_be_bytes([o[24], o[25], o[26], o[27]]));
        let Some(&idx) = self.table.get(&ConnKey::new(odst, dport, sport)) else {
            self.counters.drop(DropReason::IcmpNoMatch);
            return;
        };
        // RFC 1122 §4.2.3.9: protocol and port unreachable are hard errors
        // (RFC 5461: act on them only while connecting); "fragmentation
        // needed" lowers the path MTU (RFC 1191).
        let kind = match code {
            icmpv4::unreachable::PROTOCOL | icmpv4::unreachable::PORT => IcmpKind::Hard,
            icmpv4::unreachable::FRAG_NEEDED => IcmpKind::FragNeeded(mtu),
            _ => IcmpKind::Soft,
        };
        let matched = self.with_tcb(idx, |tcb, ctx| tcb.icmp_error(ctx, kind, seq));
        if matched != Some(true) {
            self.counters.drop(DropReason::IcmpNoMatch);
        }
        self.after(idx);
    }

    /// An ICMP destination-unreachable about a UDP datagram we sent to
    /// `odst` (`o`: its quoted IP header and first 8 bytes).
    //= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.3.3
    //# UDP MUST pass to the application layer all ICMP error messages
    //# that it receives from the IP layer.
    /// Kept on the socket bound to the datagram's source port, which is
    /// announced (`UdpRecv`); what the application makes of it is its own
    /// (the socket service reports a hard error to a socket connected to
    /// `odst`, as Linux does).
    fn udp_icmp_error(&mut self, code: u8, odst: Ipv4Addr, o: &[u8; 28]) {
        let sport = u16::from_be_bytes([o[20], o[21]]);
        let dport = u16::from_be_bytes([o[22], o[23]]);
        let Some(s) = self.udp.get_mut(&sport) else {
            self.counters.drop(DropReason::IcmpNoMatch);
            return;
        };
        s.err = Some((SocketAddrV4::new(odst, dport), code));
        if !s.in_evq {
            s.in_evq = true;
            self.evq.push_back(EvSrc::Udp(sport));
        }
    }

    fn tcp_input(&mut self, frame: R, src: Ipv4Addr, l4: core::ops::Range<usize>) {
        let b = &frame.as_ref()[l4.clone()];
        let seg = match parse_tcp(b, l4.start, src, self.cfg.ip, self.cfg.checksums.tcp) {
            Ok(seg) => seg,
            Err(r) => return self.counters.drop(r),
        };
        self.counters.tcp_in_segs += 1;
        let f = seg.flags;
        if (f.syn() && (f.fin() || f.rst()))
            || (!f.syn() && !f.rst() && seg.ack.is_none() && !f.fin()) && seg.payload_len == 0
        {
            self.counters.drop(DropReason::TcpBadFlags);
            return;
        }
        let key = ConnKey::new(src, seg.src_port, seg.dst_port);
        if let Some(&idx) = self.table.get(&key) {
            let tcb = self.conns[idx as usize]
                .tcb
                .as_ref()
                .expect("table points at live TCBs");
            let recyclable = f.syn()
                && seg.ack.is_none()
                && tcb.time_wait_reusable(&seg)
                && !tcb.owned()
                && self.listeners.contains_key(&seg.dst_port);
            if recyclable {
                // RFC 6191: a new SYN may take over a TIME-WAIT tuple.
                self.recycle_time_wait(idx);
            } else {
                if tcb.state == State::SynReceived
                    && tcb.passive()
                    && seg.ack.is_some()
                    && !f.rst()
                    && !f.syn()
                {
                    let full = self
                        .listeners
                        .get(&tcb.listener())
                        .is_some_and(|l| l.accept_count >= l.backlog);
                    if full {
                        // Linux behaviour: drop the handshake's last ACK; the
                        // peer retransmits and we retry when there is room.
                        self.counters.tcp_listen_overflows += 1;
                        self.counters.drop(DropReason::TcpListenOverflow);
                        return;
                    }
                }
                let rst = self
                    .with_tcb(idx, |tcb, ctx| tcb.on_segment(ctx, &seg, frame))
                    .flatten();
                if let Some(rst) = rst {
                    self.push_ctrl(Ctrl::Rst {
                        remote: src,
                        rport: seg.src_port,
                        lport: seg.dst_port,
                        rst,
                    });
                }
                self.after(idx);
                return;
            }
        }
        if self.listeners.contains_key(&seg.dst_port) {
            self.listen_input(frame, src, &seg);
        } else {
            self.counters.drop(DropReason::TcpNoConnection);
            self.reset_for(src, &seg);
        }
    }

    /// RFC 9293 §3.10.7.1: a segment for no connection gets a RST (unless
    /// it is one).
    fn reset_for(&mut self, src: Ipv4Addr, seg: &Segment) {
        if seg.flags.rst() {
            return;
        }
        let rst = match seg.ack {
            Some(ack) => RstReply {
                seq: ack,
                ack: None,
            },
            None => RstReply {
                seq: SeqNum(0),
                ack: Some(seg.seq + seg.len()),
            },
        };
        self.push_ctrl(Ctrl::Rst {
            remote: src,
            rport: seg.src_port,
            lport: seg.dst_port,
            rst,
        });
    }

    /// RFC 9293 §3.10.7.2: LISTEN.
    fn listen_input(&mut self, frame: R, src: Ipv4Addr, seg: &Segment) {
        let f = seg.flags;
        let port = seg.dst_port;
        let tuple = Tuple {
            local_ip: self.cfg.ip,
            local_port: port,
            remote_ip: src,
            remote_port: seg.src_port,
        };
        if f.rst() {
            self.counters.drop(DropReason::TcpIgnored);
            return;
        }
        if let Some(ack) = seg.ack {
            if f.syn() {
                self.counters.drop(DropReason::TcpNoConnection);
                self.reset_for(src, seg);
                return;
            }
            // An ACK for a listener: a SYN cookie coming back (RFC 4987).
            let mss = self
                .cfg
                .tcp
                .syn_cookies
                .then(|| {
                    self.keyed
                        .check_cookie(&tuple, (ack - 1).0, seg.seq.0, self.now)
                })
                .flatten();
            let Some(mss) = mss else {
                if self.cfg.tcp.syn_cookies {
                    self.counters.tcp_syncookies_failed += 1;
                }
                self.counters.drop(DropReason::TcpBadCookie);
                self.reset_for(src, seg);
                return;
            };
            let l = self.listeners.get(&port).expect("caller checked");
            if l.accept_count >= l.backlog {
                self.counters.tcp_listen_overflows += 1;
                self.counters.drop(DropReason::TcpListenOverflow);
                return;
            }
            let (lock, ip) = (l.lock, l.ip);
            self.counters.tcp_syncookies_recv += 1;
            let (wscale, sack) = match seg.opts.timestamp {
                Some((_, ecr)) => syncookie::ts_decode(ecr),
                None => (None, false),
            };
            let ts_offset = self.keyed.ts_offset(&tuple);
            let local_mss = self.local_mss;
            let tcb = {
                let mut ctx = Ctx {
                    now: self.now,
                    cfg: &self.cfg.tcp,
                    counters: &mut self.counters,
                    challenge: &mut self.challenge,
                    tick: self.cfg.timer_tick,
                    ooo_room: 0,
                    tune_room: 0,
                };
                let mut t = Tcb::from_cookie(
                    &mut ctx,
                    tuple,
                    ack - 1,
                    ts_offset,
                    local_mss,
                    seg,
                    mss,
                    wscale,
                    sack,
                );
                debug_assert_eq!(t.listener(), port);
                t.lock_passive_buffers(&ctx, lock.0, lock.1);
                t.ip = ip;
                t
            };
            let idx = self.insert_tcb(tcb);
            // Deliver whatever the ACK carried.
            if seg.payload_len > 0 || f.fin() {
                let rst = self
                    .with_tcb(idx, |tcb, ctx| {
                        tcb.on_segment(ctx, seg, frame).map(|r| (tcb.tuple, r))
                    })
                    .flatten();
                self.send_rst(rst);
            }
            self.after(idx);
            return;
        }
        if !f.syn() {
            self.counters.drop(DropReason::TcpIgnored);
            return;
        }
        let l = self.listeners.get(&port).expect("caller checked");
        if l.accept_count >= l.backlog {
            // Linux behaviour (`tcp_conn_request`, ListenOverflows): with the
            // accept queue full a SYN is dropped, not answered, so the peer's
            // connect waits for its SYN retransmission rather than completing
            // into a queue with no room (and its first data with it). A SYN
            // admitted before the queue filled still completes later: its
            // final ACK is dropped until there is room (`tcp_input`).
            self.counters.tcp_listen_overflows += 1;
            self.counters.drop(DropReason::TcpListenOverflow);
            return;
        }
        let (lock, ip) = (l.lock, l.ip);
        if l.syn_count >= self.cfg.tcp.syn_backlog {
            if !self.cfg.tcp.syn_cookies {
                self.counters.drop(DropReason::TcpSynQueueFull);
                return;
            }
            self.send_syn_cookie(src, seg, &tuple, lock.0, ip);
            return;
        }
        let iss = SeqNum(self.keyed.isn(&tuple, self.now));
        let ts_offset = self.keyed.ts_offset(&tuple);
        let local_mss = self.local_mss;
        let mut tcb = {
            let mut ctx = Ctx {
                now: self.now,
                cfg: &self.cfg.tcp,
                counters: &mut self.counters,
                challenge: &mut self.challenge,
                tick: self.cfg.timer_tick,
                ooo_room: 0,
                tune_room: 0,
            };
            let mut t = Tcb::from_syn(&mut ctx, tuple, iss, ts_offset, local_mss, seg);
            t.lock_passive_buffers(&ctx, lock.0, lock.1);
            t.ip = ip;
            t
        };
        debug_assert_eq!(tcb.listener(), port);
        tcb.flags |= flag::SYNQ;
        if let Some(l) = self.listeners.get_mut(&port) {
            l.syn_count += 1;
        }
        let idx = self.insert_tcb(tcb);
        self.after(idx);
    }

    /// Answer a SYN without keeping state (RFC 4987 §3.6).
    /// `rcv`: the listener's locked receive buffer, if any; `ip`: its
    /// IPv4 header options.
    fn send_syn_cookie(
        &mut self,
        src: Ipv4Addr,
        seg: &Segment,
        tuple: &Tuple,
        rcv: Option<u32>,
        ip: IpOpts,
    ) {
        let peer_mss = seg.opts.mss.unwrap_or(536);
        // The cookie remembers the peer's MSS rounded down to its table.
        let (cookie, _) = self.keyed.cookie(tuple, seg.seq.0, peer_mss, self.now);
        let tcp = &self.cfg.tcp;
        let ts = (tcp.timestamps)
            .then_some(seg.opts.timestamp)
            .flatten()
            .map(|(tsval, _)| {
                let ours = (self.now.as_millis() as u32).wrapping_add(self.keyed.ts_offset(tuple));
                let ws = (tcp.window_scaling)
                    .then_some(seg.opts.window_scale)
                    .flatten();
                let sack = tcp.sack && seg.opts.sack_permitted;
                (syncookie::ts_encode(ours, ws, sack), tsval)
            });
        // Without timestamps the cookie cannot carry window scale or SACK,
        // so neither is offered (RFC 4987 §3.6 trade-off).
        let opts = TcpOptions {
            mss: Some(self.local_mss),
            window_scale: ts.and(
                (tcp.window_scaling && seg.opts.window_scale.is_some())
                    .then(|| scale_for(tcp.recv_buffer_limit())),
            ),
            sack_permitted: ts.is_some() && tcp.sack && seg.opts.sack_permitted,
            timestamp: ts,
            ..Default::default()
        };
        self.counters.tcp_syncookies_sent += 1;
        self.push_ctrl(Ctrl::SynAck {
            remote: src,
            rport: seg.src_port,
            lport: seg.dst_port,
            iss: SeqNum(cookie),
            ack: seg.seq + 1,
            // The window the connection made from the cookie offers
            // (`Tcb::lock_passive_buffers`).
            wnd: rcv
                .map_or(tcp.recv_buffer, |v| {
                    v.max(MIN_LOCKED_BUFFER).max(2 * u32::from(self.local_mss))
                })
                .min(65535) as u16,
            opts,
            ip,
        });
    }

    /// Queue a stateless RST for a connection's tuple.
    fn send_rst(&mut self, rst: Option<(Tuple, RstReply)>) {
        if let Some((t, rst)) = rst {
            self.push_ctrl(Ctrl::Rst {
                remote: t.remote_ip,
                rport: t.remote_port,
                lport: t.local_port,
                rst,
            });
        }
    }

    fn push_ctrl(&mut self, c: Ctrl<R>) {
        if self.ctrlq.len() < CTRL_QUEUE_LIMIT {
            self.ctrlq.push_back(c);
        } else {
            self.counters.drop(DropReason::TxQueueFull);
        }
    }

    /// Queue an ICMP error quoting `orig` (the offending datagram from its
    /// IP header), rate-limited.
    fn icmp_error(&mut self, dst: Ipv4Addr, code: u8, orig: &[u8]) {
        self.icmp_error_of(dst, IcmpErr::Unreachable(code), orig);
    }

    fn icmp_error_of(&mut self, dst: Ipv4Addr, kind: IcmpErr, orig: &[u8]) {
        if !self.icmp_limit.allow(self.now) {
            self.counters.icmp_errors_rate_limited += 1;
            return;
        }
        let ihl = orig.first().map_or(20, |b| usize::from(b & 0x0f) * 4);
        let n = orig.len().min(ihl + 8).min(68);
        let mut o = [0u8; 68];
        o[..n].copy_from_slice(&orig[..n]);
        self.push_ctrl(Ctrl::IcmpError {
            dst,
            kind,
            orig: o,
            orig_len: n as u8,
        });
    }

    // ===== ARP and routing =============================================

    fn next_hop(&self, ip: Ipv4Addr) -> Option<Ipv4Addr> {
        if same_subnet(ip, self.cfg.ip, self.cfg.prefix_len) {
            Some(ip)
        } else {
            self.cfg.gateway
        }
    }

    fn queue_arp_request(&mut self, ip: Ipv4Addr) {
        self.push_ctrl(Ctrl::Arp {
            op: Operation::Request,
            eth_dst: MacAddr::BROADCAST,
            target_mac: MacAddr::UNSPECIFIED,
            target_ip: ip,
        });
    }

    /// The MAC to send to `dst`, or `None` (a request went out or is
    /// pending; the caller parks its packet).
    fn resolve(&mut self, dst: Ipv4Addr) -> Result<Option<MacAddr>, DropReason> {
        if dst == self.cfg.ip {
            // Ourselves: no ARP; the frame comes back by `handle_local`.
            return Ok(Some(self.cfg.mac));
        }
        let hop = self.next_hop(dst).ok_or(DropReason::NoRoute)?;
        match self.arp.lookup(hop, self.now) {
            Lookup::Hit(m) => Ok(Some(m)),
            Lookup::HitRefresh(m) => {
                self.queue_arp_request(hop);
                Ok(Some(m))
            }
            Lookup::MissRequest => {
                self.queue_arp_request(hop);
                self.release_evicted();
                Ok(None)
            }
            Lookup::Pending => Ok(None),
        }
    }

    /// Hold a packet (or a connection's turn to send) until `dst`'s next hop
    /// resolves. Bounded overall and per neighbour; a connection is parked
    /// once however often it asks.
    fn park(&mut self, dst: Ipv4Addr, w: Waiter<R, T>) {
        let hop = self.next_hop(dst).unwrap_or(dst);
        if let Waiter::Conn(h) = &w {
            let Some(tcb) = self.tcb_mut(h.idx) else {
                return;
            };
            if tcb.flags & flag::ARP_WAIT != 0 {
                return;
            }
            tcb.flags |= flag::ARP_WAIT;
        }
        let per_hop = self.arp_wait.iter().filter(|(h, _)| *h == hop).count();
        if self.arp_wait.len() < ARP_WAIT_LIMIT && per_hop < ARP_WAIT_PER_NEIGHBOR {
            self.arp_wait.push((hop, w));
        } else {
            if let Waiter::Conn(h) = &w {
                if let Some(t) = self.tcb_mut(h.idx) {
                    t.flags &= !flag::ARP_WAIT;
                }
            }
            self.counters.drop(DropReason::NeighborUnresolved);
        }
    }

    /// Release the waiters of ARP entries the cache evicted while still
    /// unresolved (they would otherwise wait forever).
    /// Free a TIME-WAIT connection whose tuple a new one takes over.
    fn recycle_time_wait(&mut self, idx: u32) {
        self.counters.tcp_timewait_recycled += 1;
        let Some(tcb) = self.tcb_mut(idx) else {
            return;
        };
        tcb.state = State::Closed;
        tcb.flags &= !(flag::IN_TXQ | flag::IN_EVQ);
        tcb.ev = 0;
        self.txq.retain(|&i| i != idx);
        self.evq
            .retain(|s| !matches!(s, EvSrc::Tcp(i) if *i == idx));
        self.reap(idx);
    }

    fn release_evicted(&mut self) {
        for ip in self.arp.take_evicted() {
            self.release_waiters(ip, None);
        }
    }

    /// `ip` resolved (`Some`) or failed (`None`): release what waited on it.
    fn release_waiters(&mut self, ip: Ipv4Addr, mac: Option<MacAddr>) {
        if !self.arp_wait.iter().any(|(h, _)| *h == ip) {
            return;
        }
        let waiting = std::mem::take(&mut self.arp_wait);
        for (hop, w) in waiting {
            if hop != ip {
                self.arp_wait.push((hop, w));
                continue;
            }
            match (w, mac) {
                (Waiter::Conn(h), _) => {
                    if self
                        .conns
                        .get(h.idx as usize)
                        .is_some_and(|s| s.gen == h.gen)
                    {
                        if let Some(t) = self.tcb_mut(h.idx) {
                            t.flags &= !flag::ARP_WAIT;
                        }
                        if mac.is_none() {
                            self.with_tcb(h.idx, |tcb, ctx| tcb.neighbor_failed(ctx));
                        }
                        self.after(h.idx);
                    }
                }
                (Waiter::Ctrl(c), Some(_)) => self.push_ctrl(c),
                (Waiter::Udp(u), Some(_)) => self.udp_txq.push_back(u),
                (_, None) => self.counters.drop(DropReason::NeighborUnresolved),
            }
        }
    }

    // ===== output ======================================================

    /// Write the next frame to send into `buf` and return its length;
    /// `None` when there is nothing to send. `buf` must be at least
    /// [`max_frame_len`](Self::max_frame_len) bytes (a shorter one gets
    /// `None`). Call until `None` after every other call (IX: post
    /// transmits at the end of the run-to-completion cycle).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.advance_clock(now);
        if buf.len() < self.max_frame_len() {
            return None;
        }
        // Parking a packet on ARP queues a request on `ctrlq`: go round
        // again so it leaves in this same call.
        'again: loop {
            // A datagram's fragments leave back to back.
            if self.frag_out.is_some() {
                return self.next_fragment(buf);
            }
            while let Some(c) = self.ctrlq.pop_front() {
                if let Some(n) = self.emit_ctrl(c, buf) {
                    self.counters.tx_frames += 1;
                    return Some(n);
                }
            }
            while let Some(&idx) = self.txq.front() {
                let Some(tcb) = self.conns[idx as usize].tcb.as_mut() else {
                    self.txq.pop_front();
                    continue;
                };
                if !tcb.wants_tx() {
                    tcb.flags &= !flag::IN_TXQ;
                    self.txq.pop_front();
                    self.after(idx);
                    continue;
                }
                let remote = tcb.tuple.remote_ip;
                let mac = match self.resolve(remote) {
                    Ok(Some(m)) => m,
                    Ok(None) => {
                        self.txq.pop_front();
                        if let Some(t) = self.tcb_mut(idx) {
                            t.flags &= !flag::IN_TXQ;
                        }
                        let h = self.handle_of(idx);
                        self.park(remote, Waiter::Conn(h));
                        continue 'again;
                    }
                    Err(reason) => {
                        // No route: nothing will ever go out; the connection's
                        // own timers end it.
                        self.counters.drop(reason);
                        self.txq.pop_front();
                        if let Some(t) = self.tcb_mut(idx) {
                            t.flags &= !flag::IN_TXQ;
                        }
                        continue;
                    }
                };
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                let l4 = l3 + ipv4::HEADER_LEN;
                let csum = self.cfg.checksums.tcp;
                let n = self
                    .with_tcb(idx, |tcb, ctx| {
                        let n = tcb.poll_segment(ctx, &mut buf[l4..], csum)?;
                        Some((n, tcb.ip))
                    })
                    .flatten();
                self.txq.pop_front();
                if let Some(t) = self.tcb_mut(idx) {
                    t.flags &= !flag::IN_TXQ;
                }
                // Round robin: back of the queue if it has more.
                self.after(idx);
                if let Some((n, ip)) = n {
                    self.write_ipv4(&mut buf[l3..], remote, Protocol::Tcp, n, true, ip);
                    self.counters.tx_frames += 1;
                    return Some(l4 + n);
                }
            }
            while let Some(u) = self.udp_txq.pop_front() {
                let dst = *u.dst.ip();
                let mac = match self.resolve(dst) {
                    Ok(Some(m)) => m,
                    Ok(None) => {
                        self.park(dst, Waiter::Udp(u));
                        continue 'again;
                    }
                    Err(reason) => {
                        self.counters.drop(reason);
                        continue;
                    }
                };
                let repr = UdpRepr {
                    src_port: u.src_port,
                    dst_port: u.dst.port(),
                };
                let payload = u.data.as_ref();
                self.counters.udp_out_datagrams += 1;
                if repr.buffer_len(payload.len()) + ipv4::HEADER_LEN > usize::from(self.cfg.mtu) {
                    let mut l4 = vec![0u8; repr.buffer_len(payload.len())];
                    repr.emit(&mut l4, self.cfg.ip, dst, payload, Checksum::Both);
                    return self.start_fragments(dst, mac, Protocol::Udp, l4, u.ip, buf);
                }
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                let l4 = l3 + ipv4::HEADER_LEN;
                repr.emit(
                    &mut buf[l4..],
                    self.cfg.ip,
                    dst,
                    payload,
                    self.cfg.checksums.udp,
                );
                let n = repr.buffer_len(payload.len());
                // (DF as Linux's UDP sets it, path MTU discovery on:
                // `ip_dont_fragment` with IP_PMTUDISC_WANT.)
                self.write_ipv4(&mut buf[l3..], dst, Protocol::Udp, n, true, u.ip);
                self.counters.tx_frames += 1;
                return Some(l4 + n);
            }
            return None;
        }
    }

    /// Send `l4` (a whole IP payload, checksummed) to `dst` in fragments:
    /// the first now, the rest by the next calls of `poll_transmit`.
    fn start_fragments(
        &mut self,
        dst: Ipv4Addr,
        mac: MacAddr,
        proto: Protocol,
        l4: Vec<u8>,
        ip: IpOpts,
        buf: &mut [u8],
    ) -> Option<usize> {
        // RFC 6864 §4.1: one identification for all fragments of a datagram.
        let ident = self.next_ident(dst, proto);
        self.counters.ipv4_frag_oks += 1;
        self.frag_out = Some(FragOut {
            dst,
            mac,
            proto,
            ident,
            ip,
            l4,
            sent: 0,
        });
        self.next_fragment(buf)
    }

    /// The next fragment of `frag_out` (RFC 791 §3.2): each but the last
    /// carries a multiple of 8 bytes, all share the identification, and
    /// the offset field counts 8-byte units.
    fn next_fragment(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mut f = self.frag_out.take()?;
        let n = (f.l4.len() - f.sent).min(frag::fragment_payload(self.cfg.mtu));
        let more = f.sent + n < f.l4.len();
        let l3 = self.write_eth(buf, f.mac, EtherType::Ipv4);
        let l4 = l3 + ipv4::HEADER_LEN;
        Ipv4Repr {
            src_addr: self.cfg.ip,
            dst_addr: f.dst,
            protocol: f.proto,
            payload_len: n,
            ttl: f.ip.ttl_or(self.cfg.ttl),
            dscp_ecn: f.ip.tos,
            ident: f.ident,
            dont_frag: false,
        }
        .emit_fragment(&mut buf[l3..], self.cfg.checksums.ipv4, f.sent, more);
        buf[l4..l4 + n].copy_from_slice(&f.l4[f.sent..f.sent + n]);
        f.sent += n;
        if more {
            self.frag_out = Some(f);
        }
        self.counters.ipv4_frag_creates += 1;
        self.counters.tx_frames += 1;
        Some(l4 + n)
    }

    //= https://www.rfc-editor.org/rfc/rfc7739#section-5.3
    /// The IPv4 identification of the next datagram to `dst` of
    /// `protocol` that may be fragmented (an atomic one's is 0: see
    /// `write_ipv4`): the next value of one of [`IDENT_COUNTERS`] counters,
    /// the one a keyed hash of the addresses and protocol picks, each
    /// started at a value drawn with the secret (RFC 7739 §5.3; Linux's
    /// `ip_idents`), in this stack's lane (`StackConfig::ident_lane`).
    /// Unique per source, destination and protocol for 65,536 datagrams
    /// (divided among the lanes), as RFC 6864 §4.1 asks of datagrams that
    /// may be fragmented; and a host that sees our identifications learns
    /// only what we send it and the hosts that share its counter (one in
    /// 2,048; Linux also adds random increments to a counter that rests,
    /// which this does not). With one counter for all (until 2026-11-30)
    /// every packet to anyone moved it: anyone could count our traffic,
    /// or use us for an idle scan (RFC 7739 §3).
    fn next_ident(&mut self, dst: Ipv4Addr, protocol: Protocol) -> u16 {
        if self.ip_idents.is_empty() {
            // (Drawn at the first datagram, not at every stack's making.)
            self.ip_idents = (0..IDENT_COUNTERS as u64)
                .map(|i| self.keyed.ident_start(i))
                .collect();
        }
        let h = self.keyed.ident_bucket(self.cfg.ip, dst, protocol.into());
        let c = &mut self.ip_idents[(h % IDENT_COUNTERS as u64) as usize];
        *c = c.wrapping_add(1);
        // This stack's lane (`StackConfig::ident_lane`).
        let (i, n) = self.cfg.ident_lane;
        (u32::from(*c) * u32::from(n) + u32::from(i)) as u16
    }

    fn write_eth(&self, buf: &mut [u8], dst: MacAddr, ethertype: EtherType) -> usize {
        EthernetRepr {
            src_addr: self.cfg.mac,
            dst_addr: dst,
            ethertype,
            vlan: self.cfg.vlan,
        }
        .emit(buf)
    }

    /// ICMP message `repr` to `dst` and its IPv4 header, at `l3` in `buf`
    /// (after the Ethernet header): where the frame ends.
    fn write_icmp(&mut self, buf: &mut [u8], l3: usize, dst: Ipv4Addr, repr: &Icmpv4Repr) -> usize {
        let l4 = l3 + ipv4::HEADER_LEN;
        repr.emit(&mut buf[l4..], self.cfg.checksums.icmpv4);
        let n = repr.buffer_len();
        let ip = IpOpts::default();
        self.write_ipv4(&mut buf[l3..], dst, Protocol::Icmp, n, false, ip);
        l4 + n
    }

    /// The IPv4 header of a packet to `dst`, with a socket's `ip` options
    /// (the default for the stack's own packets).
    fn write_ipv4(
        &mut self,
        buf: &mut [u8],
        dst: Ipv4Addr,
        protocol: Protocol,
        payload_len: usize,
        df: bool,
        ip: IpOpts,
    ) {
        // RFC 6864 §4.1: an atomic datagram's (DF, whole) identification
        // may be any value; 0, as FreeBSD's `net.inet.ip.rfc6864` and
        // Linux for a packet without a socket: nothing to count, no hash
        // per segment. The others count per destination.
        let ident = if df {
            0
        } else {
            self.next_ident(dst, protocol)
        };
        Ipv4Repr {
            src_addr: self.cfg.ip,
            dst_addr: dst,
            protocol,
            payload_len,
            ttl: ip.ttl_or(self.cfg.ttl),
            dscp_ecn: ip.tos,
            ident,
            dont_frag: df,
        }
        .emit(buf, self.cfg.checksums.ipv4);
    }

    /// Emit a control packet, or park it on ARP and return `None`.
    fn emit_ctrl(&mut self, c: Ctrl<R>, buf: &mut [u8]) -> Option<usize> {
        let mac = match c.ip_dst() {
            None => MacAddr::BROADCAST,
            Some(dst) => match self.resolve(dst) {
                Ok(Some(m)) => m,
                Ok(None) => {
                    self.park(dst, Waiter::Ctrl(c));
                    return None;
                }
                Err(r) => {
                    self.counters.drop(r);
                    return None;
                }
            },
        };
        match c {
            Ctrl::Arp {
                op,
                eth_dst,
                target_mac,
                target_ip,
            } => {
                let l3 = self.write_eth(buf, eth_dst, EtherType::Arp);
                ArpRepr {
                    operation: op,
                    sender_mac: self.cfg.mac,
                    sender_ip: self.cfg.ip,
                    target_mac,
                    target_ip,
                }
                .emit(&mut buf[l3..]);
                match op {
                    Operation::Reply => self.counters.arp_replies_sent += 1,
                    _ => self.counters.arp_requests_sent += 1,
                }
                Some(l3 + wire::arp::PACKET_LEN)
            }
            Ctrl::Rst {
                remote,
                rport,
                lport,
                rst,
            } => {
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                let l4 = l3 + ipv4::HEADER_LEN;
                let repr = TcpRepr {
                    src_port: lport,
                    dst_port: rport,
                    seq: rst.seq,
                    ack: rst.ack,
                    flags: Flags::RST,
                    window_len: 0,
                    urgent: 0,
                    options: TcpOptions::default(),
                    payload: &[],
                };
                let n = repr.emit(&mut buf[l4..], self.cfg.ip, remote, self.cfg.checksums.tcp);
                self.write_ipv4(
                    &mut buf[l3..],
                    remote,
                    Protocol::Tcp,
                    n,
                    true,
                    IpOpts::default(),
                );
                self.counters.tcp_out_rsts += 1;
                self.counters.tcp_out_segs += 1;
                Some(l4 + n)
            }
            Ctrl::SynAck {
                remote,
                rport,
                lport,
                iss,
                ack,
                wnd,
                opts,
                ip,
            } => {
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                let l4 = l3 + ipv4::HEADER_LEN;
                let repr = TcpRepr {
                    src_port: lport,
                    dst_port: rport,
                    seq: iss,
                    ack: Some(ack),
                    flags: Flags::SYN,
                    window_len: wnd,
                    urgent: 0,
                    options: opts,
                    payload: &[],
                };
                let n = repr.emit(&mut buf[l4..], self.cfg.ip, remote, self.cfg.checksums.tcp);
                self.write_ipv4(&mut buf[l3..], remote, Protocol::Tcp, n, true, ip);
                self.counters.tcp_out_segs += 1;
                Some(l4 + n)
            }
            Ctrl::EchoReply {
                dst,
                frame,
                icmp_off,
                icmp_len,
            } => {
                let b = &frame.as_ref()[icmp_off..icmp_off + icmp_len];
                let p = Icmpv4Packet::new_unchecked(b);
                let repr = Icmpv4Repr::EchoReply {
                    ident: p.echo_ident(),
                    seq_no: p.echo_seq_no(),
                    data: p.data(),
                };
                self.counters.icmp_echo_replies += 1;
                // The reply to a reassembled request leaves in fragments.
                if repr.buffer_len() + ipv4::HEADER_LEN > usize::from(self.cfg.mtu) {
                    let mut l4 = vec![0u8; repr.buffer_len()];
                    repr.emit(&mut l4, Checksum::Both);
                    return self.start_fragments(
                        dst,
                        mac,
                        Protocol::Icmp,
                        l4,
                        IpOpts::default(),
                        buf,
                    );
                }
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                Some(self.write_icmp(buf, l3, dst, &repr))
            }
            Ctrl::IcmpError {
                dst,
                kind,
                orig,
                orig_len,
            } => {
                let l3 = self.write_eth(buf, mac, EtherType::Ipv4);
                let original = &orig[..usize::from(orig_len)];
                let repr = match kind {
                    IcmpErr::Unreachable(code) => Icmpv4Repr::DstUnreachable {
                        code,
                        next_hop_mtu: 0,
                        original,
                    },
                    IcmpErr::ReassemblyTime => Icmpv4Repr::TimeExceeded { code: 1, original },
                };
                let end = self.write_icmp(buf, l3, dst, &repr);
                self.counters.icmp_errors_sent += 1;
                Some(end)
            }
        }
    }
}

/// The first port of the range `lo..=hi` that `taken` does not hold,
/// searched in order from offset `start` ([`Stack::draw_free_port`]).
fn free_port_from(start: u32, (lo, hi): (u16, u16), taken: impl Fn(u16) -> bool) -> Option<u16> {
    let range = u32::from(hi - lo) + 1;
    (0..range)
        .map(|i| lo + (start.wrapping_add(i) % range) as u16)
        .find(|&p| !taken(p))
}

/// What a wire error means at a layer: a bad checksum or a malformed packet.
fn wire_reason(e: wire::Error, bad_checksum: DropReason, malformed: DropReason) -> DropReason {
    if e == wire::Error::Checksum {
        bad_checksum
    } else {
        malformed
    }
}

/// Fragments are refused (no reassembly yet).
/// Parse an IPv4 header: the repr, the header length and, for a fragment,
/// its offset in bytes and its More Fragments flag.
#[allow(clippy::type_complexity)]
fn parse_ipv4(
    b: &[u8],
    csum: Checksum,
) -> Result<(Ipv4Repr, usize, Option<(usize, bool)>), DropReason> {
    let p = Ipv4Packet::new_checked(b).map_err(|e| match e {
        wire::Error::Truncated => DropReason::Ipv4Truncated,
        _ => DropReason::Ipv4Malformed,
    })?;
    let repr = Ipv4Repr::parse(&p, csum)
        .map_err(|e| wire_reason(e, DropReason::Ipv4BadChecksum, DropReason::Ipv4Malformed))?;
    let frag = p
        .is_fragment()
        .then(|| (usize::from(p.frag_offset()), p.more_frags()));
    Ok((repr, p.header_len(), frag))
}

/// Parse a UDP datagram: the repr and the payload range within `b`.
fn parse_udp(
    b: &[u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    csum: Checksum,
) -> Result<(UdpRepr, core::ops::Range<usize>), DropReason> {
    let p = UdpPacket::new_checked(b).map_err(|_| DropReason::UdpMalformed)?;
    let repr = UdpRepr::parse(&p, src, dst, csum)
        .map_err(|e| wire_reason(e, DropReason::UdpBadChecksum, DropReason::UdpMalformed))?;
    Ok((repr, p.payload_range()))
}

/// Parse a TCP segment found at `base` in its frame into a [`Segment`].
fn parse_tcp(
    b: &[u8],
    base: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    csum: Checksum,
) -> Result<Segment, DropReason> {
    let p = TcpPacket::new_checked(b).map_err(|_| DropReason::TcpMalformed)?;
    let r = TcpRepr::parse(&p, src, dst, csum)
        .map_err(|e| wire_reason(e, DropReason::TcpBadChecksum, DropReason::TcpMalformed))?;
    Ok(Segment {
        src_port: r.src_port,
        dst_port: r.dst_port,
        seq: r.seq,
        ack: r.ack,
        flags: r.flags,
        wnd: r.window_len,
        opts: r.options,
        urgent: r.urgent,
        payload_off: base + p.header_len(),
        payload_len: r.payload.len(),
    })
}
