//! The property harness for the TCP engine: arbitrary sequences of network
//! events (deliver, drop, reorder, duplicate, corrupt, forge, raw bytes) and
//! application calls applied to two real stacks. It runs as a proptest in
//! `cargo test` and as the `engine_ops` cargo-fuzz target.
//!
//! Checked after every operation: nothing panics, every connection's
//! invariants hold ([`Stack::check_invariants`]), and — as long as no forged
//! or raw segment was injected — every byte an application reads is the byte
//! its peer sent at that offset.

use crate::{host_config, pattern, SimStack, IP_B};
use arbitrary::Arbitrary;
use bytes::Bytes;
use ixora_core::wire::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use ixora_core::wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_core::wire::tcp::{Flags, SackBlock, SeqNum, TcpOptions, TcpPacket, TcpRepr};
use ixora_core::wire::Checksum;
use ixora_core::{ConnHandle, Duration, Event, Instant, Stack};
use std::net::SocketAddrV4;

/// One step of a fuzzed scenario.
#[derive(Debug, Clone, Arbitrary)]
pub enum Op {
    /// Let `n * 37` µs of virtual time pass, running timers.
    Advance(u16),
    /// Let `n` ms pass.
    AdvanceMs(u8),
    /// Deliver the oldest frame in flight.
    Deliver,
    /// Deliver the frame at this index (reordering).
    DeliverAt(u8),
    /// Lose the frame at this index.
    Drop(u8),
    /// Deliver a copy of the frame at this index, keep the original.
    Duplicate(u8),
    /// Flip bits of one byte of a frame in flight.
    Corrupt(u8, u16, u8),
    /// Host A opens a connection to host B.
    Connect,
    /// The application on a side offers bytes.
    Send(bool, u16),
    /// The application on a side reads and releases up to n bytes.
    RecvDone(bool, u16),
    /// Half-close.
    Shutdown(bool),
    /// Close.
    Close(bool),
    /// Abort.
    Abort(bool),
    /// Nagle on/off.
    Nodelay(bool, bool),
    /// Keepalive on/off.
    Keepalive(bool, bool),
    /// Inject a segment into a side, shaped like the last one its peer sent
    /// and shifted by the given amounts.
    Forge(Forge),
    /// Inject arbitrary bytes as the TCP segment of a well-formed frame.
    RawTcp(bool, Vec<u8>),
    /// Inject arbitrary bytes as a whole frame.
    RawFrame(bool, Vec<u8>),
}

/// A forged segment.
#[derive(Debug, Clone, Arbitrary)]
pub struct Forge {
    to_b: bool,
    seq_delta: i32,
    ack_delta: i32,
    flags: u8,
    window: u16,
    payload: u8,
    ts: Option<(u32, u32)>,
    sack: Vec<(i32, u16)>,
    mss: Option<u16>,
    wscale: Option<u8>,
}

struct Side {
    conns: Vec<ConnHandle>,
    /// Bytes offered and accepted, per connection index (only the first
    /// connection of a side is checked for content).
    sent: usize,
    received: usize,
    pattern: Bytes,
}

/// The two hosts and the frames between them.
pub struct Harness {
    hosts: [SimStack; 2],
    now: Instant,
    in_flight: Vec<(usize, Vec<u8>)>,
    /// Last TCP header each host sent (ports, seq, ack).
    last_sent: [Option<(u16, u16, u32, u32)>; 2],
    sides: [Side; 2],
    forged: bool,
    buf: Vec<u8>,
}

const PORT: u16 = 80;
const MAX_IN_FLIGHT: usize = 512;
const STREAM: usize = 1 << 20;

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// Two fresh hosts; B listens on port 80.
    pub fn new() -> Harness {
        Harness::with_options(true, true)
    }

    /// The same, host A offering timestamps and SACK or not (so its
    /// connections use them or not).
    pub fn with_options(timestamps: bool, sack: bool) -> Harness {
        let now = Instant::from_millis(1);
        let mk = |i: usize| {
            let mut c = host_config(i, 3);
            if i == 0 {
                c.tcp.timestamps = timestamps;
                c.tcp.sack = sack;
            }
            // Small buffers reach window edges quickly.
            c.tcp.recv_buffer = 16 * 1024;
            c.tcp.send_buffer = 16 * 1024;
            c.tcp.msl = Duration::from_millis(500);
            c.tcp.syn_backlog = 4;
            c.tcp.max_ooo_segments = 8;
            c.tcp.max_rx_segments = 32;
            Stack::new(c, now).expect("valid config")
        };
        let mut hosts = [mk(0), mk(1)];
        hosts[1].tcp_listen(PORT, Some(4), 1).expect("listen");
        let buf = vec![0u8; hosts[0].max_frame_len()];
        Harness {
            hosts,
            now,
            in_flight: Vec::new(),
            last_sent: [None, None],
            sides: [0, 1].map(|i| Side {
                conns: Vec::new(),
                sent: 0,
                received: 0,
                pattern: pattern(11, i, STREAM),
            }),
            forged: false,
            buf,
        }
    }

    /// Apply one operation, then move output onto the wire and check.
    pub fn step(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Advance(n) => self.advance(Duration::from_micros(u64::from(*n) * 37)),
            Op::AdvanceMs(n) => self.advance(Duration::from_millis(u64::from(*n))),
            Op::Deliver => {
                if !self.in_flight.is_empty() {
                    let (to, f) = self.in_flight.remove(0);
                    self.hosts[to].handle_frame(self.now, f);
                }
            }
            Op::DeliverAt(i) => {
                if !self.in_flight.is_empty() {
                    let k = usize::from(*i) % self.in_flight.len();
                    let (to, f) = self.in_flight.remove(k);
                    self.hosts[to].handle_frame(self.now, f);
                }
            }
            Op::Drop(i) => {
                if !self.in_flight.is_empty() {
                    let k = usize::from(*i) % self.in_flight.len();
                    self.in_flight.remove(k);
                }
            }
            Op::Duplicate(i) => {
                if !self.in_flight.is_empty() {
                    let k = usize::from(*i) % self.in_flight.len();
                    let (to, f) = self.in_flight[k].clone();
                    self.hosts[to].handle_frame(self.now, f);
                }
            }
            Op::Corrupt(i, at, x) => {
                if !self.in_flight.is_empty() && *x != 0 {
                    let k = usize::from(*i) % self.in_flight.len();
                    let f = &mut self.in_flight[k].1;
                    // Past the Ethernet header, where checksums must catch it.
                    if f.len() > 14 {
                        let j = 14 + usize::from(*at) % (f.len() - 14);
                        f[j] ^= x;
                    }
                }
            }
            Op::Connect => {
                if let Ok(h) = self.hosts[0].tcp_connect(self.now, 1, SocketAddrV4::new(IP_B, PORT))
                {
                    self.sides[0].conns.push(h);
                }
            }
            Op::Send(side, len) => {
                let i = usize::from(*side);
                if let Some(&h) = self.sides[i].conns.first() {
                    let s = &mut self.sides[i];
                    let end = (s.sent + usize::from(*len)).min(STREAM);
                    let chunk = s.pattern.slice(s.sent..end);
                    if let Ok(n) = self.hosts[i].tcp_send(self.now, h, chunk) {
                        s.sent += n;
                    }
                }
            }
            Op::RecvDone(side, n) => self.read(usize::from(*side), usize::from(*n))?,
            Op::Shutdown(side) => {
                let i = usize::from(*side);
                if let Some(&h) = self.sides[i].conns.first() {
                    let _ = self.hosts[i].tcp_shutdown(self.now, h);
                }
            }
            Op::Close(side) | Op::Abort(side) => {
                let i = usize::from(*side);
                if !self.sides[i].conns.is_empty() {
                    let h = self.sides[i].conns.remove(0);
                    let _ = if matches!(op, Op::Close(_)) {
                        self.hosts[i].tcp_close(self.now, h)
                    } else {
                        self.hosts[i].tcp_abort(self.now, h)
                    };
                    // A new first connection starts a new stream.
                    self.sides[i].sent = 0;
                    self.sides[i].received = 0;
                    self.forged = true;
                }
            }
            Op::Nodelay(side, on) => {
                let i = usize::from(*side);
                if let Some(&h) = self.sides[i].conns.first() {
                    let _ = self.hosts[i].tcp_set_nodelay(h, *on);
                }
            }
            Op::Keepalive(side, on) => {
                let i = usize::from(*side);
                if let Some(&h) = self.sides[i].conns.first() {
                    let _ = self.hosts[i].tcp_set_keepalive(h, *on);
                }
            }
            Op::Forge(f) => self.forge(f),
            Op::RawTcp(side, bytes) => {
                self.forged = true;
                let to = usize::from(*side);
                let frame = ip_frame(1 - to, to, bytes);
                self.hosts[to].handle_frame(self.now, frame);
            }
            Op::RawFrame(side, bytes) => {
                self.forged = true;
                self.hosts[usize::from(*side)].handle_frame(self.now, bytes.clone());
            }
        }
        self.settle()
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        for _ in 0..10_000 {
            match self.hosts.iter().filter_map(|h| h.poll_timeout()).min() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for h in &mut self.hosts {
                        h.handle_timeout(self.now);
                    }
                    self.collect();
                }
                _ => break,
            }
        }
        self.now = end;
        for h in &mut self.hosts {
            h.handle_timeout(self.now);
        }
    }

    fn read(&mut self, i: usize, n: usize) -> Result<(), String> {
        let Some(&h) = self.sides[i].conns.first() else {
            return Ok(());
        };
        let peer = &self.sides[1 - i].pattern;
        let mut got = 0;
        if let Ok(chunks) = self.hosts[i].tcp_recv_chunks(h) {
            for c in chunks {
                let take = c.len().min(n - got);
                let at = self.sides[i].received + got;
                if !self.forged && peer.get(at..at + take) != Some(&c[..take]) {
                    return Err(format!(
                        "side {i}: bytes at offset {at} differ from what the peer sent"
                    ));
                }
                got += take;
                if got == n {
                    break;
                }
            }
        }
        if self.hosts[i].tcp_recv_done(self.now, h, got).is_ok() {
            self.sides[i].received += got;
        }
        Ok(())
    }

    fn forge(&mut self, f: &Forge) {
        let to = usize::from(f.to_b);
        let from = 1 - to;
        let Some((sport, dport, seq, ack)) = self.last_sent[from] else {
            return;
        };
        self.forged = true;
        let seq = seq.wrapping_add(f.seq_delta as u32);
        let ack = ack.wrapping_add(f.ack_delta as u32);
        let flags = Flags(u16::from(f.flags));
        let mut opts = TcpOptions {
            mss: f.mss,
            window_scale: f.wscale,
            timestamp: f.ts,
            ..Default::default()
        };
        for (k, (l, len)) in f.sack.iter().take(3).enumerate() {
            let left = ack.wrapping_add(*l as u32);
            opts.sack_blocks[k] = SackBlock {
                left: SeqNum(left),
                right: SeqNum(left.wrapping_add(u32::from(*len))),
            };
            opts.sack_len = k as u8 + 1;
        }
        let payload = vec![0xA5u8; usize::from(f.payload) * 7];
        let repr = TcpRepr {
            src_port: sport,
            dst_port: dport,
            seq: SeqNum(seq),
            ack: flags.ack().then_some(SeqNum(ack)),
            flags,
            window_len: f.window,
            // (Any pointer: it counts only with URG.)
            urgent: u16::from(f.payload) * 5,
            options: opts,
            payload: &payload,
        };
        let mut t = vec![0u8; repr.buffer_len()];
        let (src, dst) = (host_config(from, 3).ip, host_config(to, 3).ip);
        repr.emit(&mut t, src, dst, Checksum::Both);
        let frame = ip_frame(from, to, &t);
        self.hosts[to].handle_frame(self.now, frame);
    }

    /// Move output to the wire, run the applications, check invariants.
    fn settle(&mut self) -> Result<(), String> {
        self.collect();
        for i in 0..2 {
            while let Some(e) = self.hosts[i].poll_event() {
                match e {
                    Event::Knock { handle, .. } if self.hosts[i].tcp_accept(handle, 2).is_ok() => {
                        self.sides[i].conns.push(handle);
                    }
                    Event::Dead { handle, .. } => {
                        let _ = self.hosts[i].tcp_close(self.now, handle);
                        if self.sides[i].conns.first() == Some(&handle) {
                            self.sides[i].sent = 0;
                            self.sides[i].received = 0;
                            self.forged = true;
                        }
                        self.sides[i].conns.retain(|&c| c != handle);
                    }
                    _ => {}
                }
            }
        }
        self.collect();
        for (i, h) in self.hosts.iter().enumerate() {
            h.check_invariants()
                .map_err(|e| format!("host {}: {e}", ["A", "B"][i]))?;
        }
        Ok(())
    }

    fn collect(&mut self) {
        for from in 0..2 {
            while let Some(n) = self.hosts[from].poll_transmit(self.now, &mut self.buf) {
                let frame = self.buf[..n].to_vec();
                if let Some(h) = tcp_header(&frame) {
                    self.last_sent[from] = Some(h);
                }
                if self.in_flight.len() < MAX_IN_FLIGHT {
                    self.in_flight.push((1 - from, frame));
                }
            }
        }
    }

    /// Deliver everything and let timers run until both hosts are quiet or
    /// `limit` virtual seconds pass; checks invariants throughout.
    pub fn finish(&mut self, limit_s: u64) -> Result<(), String> {
        let end = self.now + Duration::from_secs(limit_s);
        let mut rounds = 0;
        while self.now < end && rounds < 100_000 {
            rounds += 1;
            if !self.in_flight.is_empty() {
                self.step(&Op::Deliver)?;
                continue;
            }
            for i in 0..2 {
                self.read(i, usize::MAX / 4)?;
            }
            match self.hosts.iter().filter_map(|h| h.poll_timeout()).min() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for h in &mut self.hosts {
                        h.handle_timeout(self.now);
                    }
                    self.settle()?;
                }
                _ => break,
            }
        }
        Ok(())
    }
}

/// Run a whole scenario; `Err` describes the first broken property. Its
/// length picks whether the connections use timestamps and SACK (each
/// of the four ways a quarter of the time: without timestamps a timeout
/// runs F-RTO, without SACK recovery is NewReno's).
pub fn run(ops: &[Op]) -> Result<(), String> {
    let mut h = Harness::with_options(ops.len().is_multiple_of(2), ops.len() % 4 < 2);
    for (i, op) in ops.iter().enumerate() {
        h.step(op)
            .map_err(|e| format!("after op {i} ({op:?}): {e}"))?;
    }
    h.finish(600)
}

fn ip_frame(from: usize, to: usize, l4: &[u8]) -> Vec<u8> {
    let (a, b) = (host_config(from, 3), host_config(to, 3));
    let eth = EthernetRepr {
        src_addr: a.mac,
        dst_addr: b.mac,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let ip = Ipv4Repr {
        src_addr: a.ip,
        dst_addr: b.ip,
        protocol: Protocol::Tcp,
        payload_len: l4.len().min(1480),
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
    };
    let l4 = &l4[..l4.len().min(1480)];
    let mut f = vec![0u8; 34 + l4.len()];
    eth.emit(&mut f);
    ip.emit(&mut f[14..], Checksum::Both);
    f[34..].copy_from_slice(l4);
    f
}

fn tcp_header(frame: &[u8]) -> Option<(u16, u16, u32, u32)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    Some((
        t.src_port(),
        t.dst_port(),
        t.seq_number().0,
        t.ack_number().0,
    ))
}

/// Feed arbitrary bytes to a stack that has a listener, an established
/// connection and a bound UDP socket: the first byte picks how the rest is
/// framed (raw frame, as the TCP/UDP/ICMP/ARP payload of valid headers
/// from the peer, or as an IPv4 fragment with fuzzed offset and flags),
/// so every parser, the reassembly and the TCP engine behind it see it.
/// Nothing may panic and the invariants must hold after each frame.
pub fn frames(data: &[u8]) -> Result<(), String> {
    let mut h = Harness::new();
    // Establish one connection A -> B and exchange a little data.
    for op in [
        Op::Connect,
        Op::Deliver,
        Op::Deliver,
        Op::Deliver,
        Op::Deliver,
        Op::Deliver,
    ] {
        h.step(&op)?;
    }
    let _ = h.hosts[1].udp_bind(53, 0);
    for chunk in data.split(|&b| b == 0xFF).take(64) {
        let Some((&kind, rest)) = chunk.split_first() else {
            continue;
        };
        let frame = match kind % 7 {
            0 => rest.to_vec(),
            1 => ip_frame(0, 1, rest),
            2 => ip_proto_frame(Protocol::Udp, rest),
            3 => ip_proto_frame(Protocol::Icmp, rest),
            5 | 6 if rest.len() >= 3 => {
                // A fragment: ident from a few values (so pieces meet),
                // offset and More Fragments from the next two bytes.
                let proto = [Protocol::Udp, Protocol::Icmp, Protocol::Tcp][usize::from(kind % 3)];
                let mut f = ip_proto_frame(proto, &rest[3..]);
                f[18..20].copy_from_slice(&u16::from(rest[0] % 4).to_be_bytes());
                f[20..22].copy_from_slice(
                    &(u16::from_be_bytes([rest[1], rest[2]]) & 0x3fff).to_be_bytes(),
                );
                f[24..26].copy_from_slice(&[0, 0]);
                let c = !ixora_core::wire::checksum::data(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
                f
            }
            5 | 6 => continue,
            _ => {
                let a = host_config(0, 3);
                let eth = EthernetRepr {
                    src_addr: a.mac,
                    dst_addr: ixora_core::wire::ethernet::MacAddr::BROADCAST,
                    ethertype: EtherType::Arp,
                    vlan: None,
                };
                let mut f = vec![0u8; 14 + rest.len()];
                eth.emit(&mut f);
                f[14..].copy_from_slice(rest);
                f
            }
        };
        h.forged = true;
        h.hosts[1].handle_frame(h.now, frame);
        h.settle()?;
    }
    h.finish(60)
}

fn ip_proto_frame(protocol: Protocol, l4: &[u8]) -> Vec<u8> {
    let mut f = ip_frame(0, 1, l4);
    let n = f.len() - 34;
    let ip = Ipv4Repr {
        src_addr: host_config(0, 3).ip,
        dst_addr: host_config(1, 3).ip,
        protocol,
        payload_len: n,
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: false,
    };
    ip.emit(&mut f[14..], Checksum::Both);
    f
}
