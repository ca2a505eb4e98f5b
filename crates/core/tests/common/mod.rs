//! A scripted peer for scenario tests: the test plays the remote host,
//! crafting segments by hand and checking each one the stack sends — in the
//! spirit of packetdrill, in virtual time.
#![allow(dead_code)]

use ixora_core::wire::arp::{ArpPacket, ArpRepr, Operation};
use ixora_core::wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_core::wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_core::wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_core::wire::tcp::{Flags, SackBlock, SeqNum, TcpOptions, TcpPacket, TcpRepr};
use ixora_core::wire::udp::{UdpPacket, UdpRepr};
use ixora_core::wire::Checksum;
use ixora_core::{ConnHandle, Duration, Event, Instant, Stack, StackConfig};
use std::net::{Ipv4Addr, SocketAddrV4};

/// The stack under test.
pub const US: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The scripted peer.
pub const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const US_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
pub const PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
pub const PEER_PORT: u16 = 40000;
pub const PEER_ISS: u32 = 1_000_000;

pub type TestStack = Stack<Vec<u8>, Vec<u8>>;

/// A TCP segment, owned, as sent or received by the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: Option<u32>,
    pub flags: Flags,
    pub win: u16,
    /// The urgent pointer (as sent: 0 without URG).
    pub urg: u16,
    pub opts: TcpOptions,
    pub payload: Vec<u8>,
}

impl Seg {
    /// A segment from the peer to our `port`.
    pub fn to(port: u16) -> Seg {
        Seg {
            src_port: PEER_PORT,
            dst_port: port,
            seq: PEER_ISS,
            ack: None,
            flags: Flags::default(),
            win: 65535,
            urg: 0,
            opts: TcpOptions::default(),
            payload: vec![],
        }
    }
    /// URG, the urgent pointer `p` (the offset of the octet after the
    /// urgent data).
    pub fn urg(mut self, p: u16) -> Seg {
        self.flags |= Flags::URG;
        self.urg = p;
        self
    }
    /// From the peer's port `p` (not [`PEER_PORT`]).
    pub fn from(mut self, p: u16) -> Seg {
        self.src_port = p;
        self
    }
    pub fn seq(mut self, s: u32) -> Seg {
        self.seq = s;
        self
    }
    pub fn ack(mut self, a: u32) -> Seg {
        self.ack = Some(a);
        self
    }
    pub fn flags(mut self, f: Flags) -> Seg {
        self.flags |= f;
        self
    }
    pub fn syn(self) -> Seg {
        self.flags(Flags::SYN)
    }
    pub fn fin(self) -> Seg {
        self.flags(Flags::FIN)
    }
    pub fn rst(self) -> Seg {
        self.flags(Flags::RST)
    }
    pub fn win(mut self, w: u16) -> Seg {
        self.win = w;
        self
    }
    pub fn data(mut self, d: &[u8]) -> Seg {
        self.payload = d.to_vec();
        self
    }
    pub fn mss(mut self, m: u16) -> Seg {
        self.opts.mss = Some(m);
        self
    }
    pub fn wscale(mut self, w: u8) -> Seg {
        self.opts.window_scale = Some(w);
        self
    }
    pub fn sack_perm(mut self) -> Seg {
        self.opts.sack_permitted = true;
        self
    }
    pub fn ts(mut self, val: u32, ecr: u32) -> Seg {
        self.opts.timestamp = Some((val, ecr));
        self
    }
    pub fn sack(mut self, blocks: &[(u32, u32)]) -> Seg {
        for (i, (l, r)) in blocks.iter().enumerate() {
            self.opts.sack_blocks[i] = SackBlock {
                left: SeqNum(*l),
                right: SeqNum(*r),
            };
        }
        self.opts.sack_len = blocks.len() as u8;
        self
    }
    pub fn is(&self, f: Flags) -> bool {
        self.flags.contains(f)
    }
    /// SEG.LEN.
    pub fn len(&self) -> u32 {
        self.payload.len() as u32 + u32::from(self.flags.syn()) + u32::from(self.flags.fin())
    }
}

/// What the stack sent, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Tcp(Seg),
    Arp(ArpRepr),
    Icmp {
        ty: u8,
        code: u8,
        data: Vec<u8>,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
        payload: Vec<u8>,
    },
    /// One fragment of a larger datagram (its payload undecoded).
    Frag {
        proto: Protocol,
        ident: u16,
        offset: usize,
        more: bool,
        data: Vec<u8>,
    },
}

/// The stack under test and the time.
pub struct Harness {
    pub stack: TestStack,
    pub now: Instant,
    buf: Vec<u8>,
    pub out: std::collections::VecDeque<Out>,
    /// The IPv4 headers of what the stack sent, beside `out`.
    pub ip_out: std::collections::VecDeque<Ipv4Repr>,
}

/// Default configuration for the stack under test.
pub fn config() -> StackConfig {
    let mut c = StackConfig::new(US_MAC, US, 24);
    c.secret = [9; 16];
    c
}

impl Harness {
    /// A stack with `tweak`ed defaults, which already knows the peer's MAC.
    pub fn new(tweak: impl FnOnce(&mut StackConfig)) -> Harness {
        let mut c = config();
        tweak(&mut c);
        let now = Instant::from_millis(1_000);
        let stack = Stack::new(c, now).expect("valid config");
        let buf = vec![0u8; stack.max_frame_len()];
        let mut h = Harness {
            stack,
            now,
            buf,
            out: Default::default(),
            ip_out: Default::default(),
        };
        // The peer asks for us, so we learn its MAC (RFC 826).
        h.inject_arp(Operation::Request, US);
        h.drain();
        h.out.clear();
        h
    }

    /// Deliver an ARP packet from the peer.
    pub fn inject_arp(&mut self, op: Operation, target: Ipv4Addr) {
        let repr = ArpRepr {
            operation: op,
            sender_mac: PEER_MAC,
            sender_ip: PEER,
            target_mac: if op == Operation::Reply {
                US_MAC
            } else {
                MacAddr::UNSPECIFIED
            },
            target_ip: target,
        };
        let eth = EthernetRepr {
            src_addr: PEER_MAC,
            dst_addr: if op == Operation::Reply {
                US_MAC
            } else {
                MacAddr::BROADCAST
            },
            ethertype: EtherType::Arp,
            vlan: None,
        };
        let mut f = vec![0u8; 14 + 28];
        eth.emit(&mut f);
        repr.emit(&mut f[14..]);
        self.stack.handle_frame(self.now, f);
    }

    /// Wrap an IPv4 payload from the peer in Ethernet and IP headers.
    pub fn ip_frame(proto: Protocol, payload: &[u8]) -> Vec<u8> {
        let eth = EthernetRepr {
            src_addr: PEER_MAC,
            dst_addr: US_MAC,
            ethertype: EtherType::Ipv4,
            vlan: None,
        };
        let ip = Ipv4Repr {
            src_addr: PEER,
            dst_addr: US,
            protocol: proto,
            payload_len: payload.len(),
            ttl: 64,
            dscp_ecn: 0,
            ident: 7,
            dont_frag: true,
        };
        let mut f = vec![0u8; 14 + 20 + payload.len()];
        eth.emit(&mut f);
        ip.emit(&mut f[14..], Checksum::Both);
        f[34..].copy_from_slice(payload);
        f
    }

    /// A UDP datagram from the peer's `sport` to our `dport`.
    pub fn udp_frame(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let repr = UdpRepr {
            src_port: sport,
            dst_port: dport,
        };
        let mut u = vec![0u8; repr.buffer_len(payload.len())];
        repr.emit(&mut u, PEER, US, payload, Checksum::Both);
        Self::ip_frame(Protocol::Udp, &u)
    }

    /// An ICMP message from the peer.
    pub fn icmp_frame(repr: &Icmpv4Repr) -> Vec<u8> {
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut b, Checksum::Both);
        Self::ip_frame(Protocol::Icmp, &b)
    }

    /// The frame bytes of a segment from the peer.
    pub fn tcp_frame(seg: &Seg) -> Vec<u8> {
        let repr = TcpRepr {
            src_port: seg.src_port,
            dst_port: seg.dst_port,
            seq: SeqNum(seg.seq),
            ack: seg.ack.map(SeqNum),
            flags: seg.flags,
            window_len: seg.win,
            urgent: seg.urg,
            options: seg.opts,
            payload: &seg.payload,
        };
        let mut t = vec![0u8; repr.buffer_len()];
        repr.emit(&mut t, PEER, US, Checksum::Both);
        Self::ip_frame(Protocol::Tcp, &t)
    }

    /// Deliver a segment from the peer, then collect what the stack sends.
    pub fn send(&mut self, seg: Seg) {
        let f = Self::tcp_frame(&seg);
        self.stack.handle_frame(self.now, f);
        self.drain();
    }

    /// Deliver raw frame bytes.
    pub fn send_raw(&mut self, f: Vec<u8>) {
        self.stack.handle_frame(self.now, f);
        self.drain();
    }

    /// Collect everything the stack wants to send now.
    pub fn drain(&mut self) {
        while let Some(n) = self.stack.poll_transmit(self.now, &mut self.buf) {
            let frame = self.buf[..n].to_vec();
            self.out.push_back(decode(&frame));
            let eth = EthernetFrame::new_checked(&frame[..]).expect("ethernet");
            if eth.ethertype() == EtherType::Ipv4 {
                let ip = Ipv4Packet::new_checked(eth.payload()).expect("ipv4");
                let repr = Ipv4Repr::parse(&ip, Checksum::Both).expect("ipv4 header");
                self.ip_out.push_back(repr);
            }
        }
    }

    /// Move time forward by `d`, running timers as they come due.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.stack.poll_timeout() {
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            self.stack.handle_timeout(self.now);
            self.drain();
        }
        self.now = end;
        self.stack.handle_timeout(self.now);
        self.drain();
    }

    /// The next TCP segment the stack sent (skipping nothing: panics on any
    /// other kind of frame or none).
    pub fn expect_tcp(&mut self) -> Seg {
        match self.out.pop_front() {
            Some(Out::Tcp(s)) => s,
            other => panic!("expected a TCP segment, got {other:?}"),
        }
    }

    /// The next frame, whatever it is.
    pub fn expect_out(&mut self) -> Out {
        self.out.pop_front().expect("expected a frame, got none")
    }

    /// Nothing was sent.
    pub fn expect_silence(&mut self) {
        assert!(
            self.out.is_empty(),
            "expected nothing sent, got {:?}",
            self.out
        );
    }

    /// All pending events.
    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.stack.poll_event()).collect()
    }

    /// Listen on `port`, complete a passive open from the peer (with the
    /// given SYN options applied by `syn`), accept it, and return the handle
    /// with the stack's ISS.
    pub fn passive_open(&mut self, port: u16, syn: impl FnOnce(Seg) -> Seg) -> (ConnHandle, u32) {
        let _ = self.stack.tcp_listen(port, None, 77);
        self.send(syn(Seg::to(port).syn()));
        let synack = self.expect_tcp();
        assert!(
            synack.is(Flags::SYN) && synack.ack == Some(PEER_ISS + 1),
            "{synack:?}"
        );
        let iss = synack.seq;
        let mut ack = Seg::to(port).seq(PEER_ISS + 1).ack(iss + 1);
        if let Some((val, _)) = synack.opts.timestamp {
            ack = ack.ts(100, val);
        }
        self.send(ack);
        let h = match self.events().as_slice() {
            [Event::Knock { handle, .. }] => *handle,
            other => panic!("expected one knock, got {other:?}"),
        };
        self.stack.tcp_accept(h, 5).expect("accept");
        (h, iss)
    }

    /// Active open to the peer's port; the peer answers with `synack`
    /// (built from our SYN). Returns the handle and our ISS.
    pub fn active_open(&mut self, synack: impl FnOnce(&Seg) -> Seg) -> (ConnHandle, u32) {
        let h = self
            .stack
            .tcp_connect(self.now, 9, SocketAddrV4::new(PEER, PEER_PORT))
            .expect("connect");
        self.drain();
        let syn = self.expect_tcp();
        assert!(syn.is(Flags::SYN) && syn.ack.is_none(), "{syn:?}");
        let reply = synack(&syn);
        self.send(reply);
        (h, syn.seq)
    }
}

/// Decode a frame the stack sent.
pub fn decode(frame: &[u8]) -> Out {
    let eth = EthernetFrame::new_checked(frame).expect("ethernet");
    match eth.ethertype() {
        EtherType::Arp => {
            let p = ArpPacket::new_checked(eth.payload()).expect("arp");
            Out::Arp(ArpRepr::parse(&p).expect("arp repr"))
        }
        EtherType::Ipv4 => {
            assert_eq!(eth.dst_addr(), PEER_MAC, "unicast to the peer");
            let ip = Ipv4Packet::new_checked(eth.payload()).expect("ipv4");
            let repr = Ipv4Repr::parse(&ip, Checksum::Both).expect("valid ipv4 header checksum");
            assert_eq!(repr.src_addr, US);
            if ip.is_fragment() {
                assert!(eth.payload().len() <= 1500, "a fragment fits the MTU");
                return Out::Frag {
                    proto: repr.protocol,
                    ident: repr.ident,
                    offset: usize::from(ip.frag_offset()),
                    more: ip.more_frags(),
                    data: ip.payload().to_vec(),
                };
            }
            match repr.protocol {
                Protocol::Tcp => {
                    let t = TcpPacket::new_checked(ip.payload()).expect("tcp");
                    let r = TcpRepr::parse(&t, US, repr.dst_addr, Checksum::Both)
                        .expect("valid TCP checksum and options");
                    Out::Tcp(Seg {
                        src_port: r.src_port,
                        dst_port: r.dst_port,
                        seq: r.seq.0,
                        ack: r.ack.map(|a| a.0),
                        flags: r.flags,
                        win: r.window_len,
                        urg: r.urgent,
                        opts: r.options,
                        payload: r.payload.to_vec(),
                    })
                }
                Protocol::Icmp => {
                    let p = Icmpv4Packet::new_checked(ip.payload()).expect("icmp");
                    assert!(p.verify_checksum());
                    let _ = Icmpv4Repr::parse(&p, Checksum::Both);
                    Out::Icmp {
                        ty: p.msg_type(),
                        code: p.msg_code(),
                        data: p.data().to_vec(),
                    }
                }
                Protocol::Udp => {
                    let p = UdpPacket::new_checked(ip.payload()).expect("udp");
                    assert!(p.verify_checksum(US, repr.dst_addr));
                    Out::Udp {
                        src_port: p.src_port(),
                        dst_port: p.dst_port(),
                        payload: p.payload().to_vec(),
                    }
                }
                other => panic!("unexpected protocol {other:?}"),
            }
        }
        other => panic!("unexpected ethertype {other:?}"),
    }
}
