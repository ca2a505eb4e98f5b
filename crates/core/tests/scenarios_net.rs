//! Scenario tests: ARP, ICMP, UDP and malformed input.
//!
//! Most tests use the scripted-peer harness (the peer 198.18.0.1 is already
//! resolved); those about the very first frames or about resolution build a
//! bare `Stack` and read its raw frames.

mod common;
use common::*;
use ixora_core::wire::arp::{ArpPacket, ArpRepr, Operation};
use ixora_core::wire::checksum;
use ixora_core::wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_core::wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_core::wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_core::wire::tcp::Flags;
use ixora_core::wire::udp::UdpPacket;
use ixora_core::wire::Checksum;
use ixora_core::{
    DeadReason, DropReason, Duration, Error, Event, Instant, Stack, StackConfig, State,
};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Another host on the subnet, unknown to the stack at first.
const OTHER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 7);
const OTHER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 7]);

// ===== frame helpers ======================================================

/// An ARP packet in an Ethernet frame (optionally 802.1Q-tagged).
fn arp_frame(
    op: Operation,
    sender: (MacAddr, Ipv4Addr),
    target: (MacAddr, Ipv4Addr),
    eth_dst: MacAddr,
    vlan: Option<u16>,
) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: sender.0,
        dst_addr: eth_dst,
        ethertype: EtherType::Arp,
        vlan,
    };
    let repr = ArpRepr {
        operation: op,
        sender_mac: sender.0,
        sender_ip: sender.1,
        target_mac: target.0,
        target_ip: target.1,
    };
    let mut f = vec![0u8; eth.header_len() + repr.buffer_len()];
    let l = eth.emit(&mut f);
    repr.emit(&mut f[l..]);
    f
}

/// A frame's Ethernet header and, for ARP, its parsed body.
fn parse_arp(f: &[u8]) -> Option<(EthernetRepr, ArpRepr)> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    let e = EthernetRepr::parse(&eth).ok()?;
    if e.ethertype != EtherType::Arp {
        return None;
    }
    let p = ArpPacket::new_checked(eth.payload()).ok()?;
    Some((e, ArpRepr::parse(&p).ok()?))
}

/// The IPv4 part of an untagged frame.
fn ip_of(f: &[u8]) -> Ipv4Packet<&[u8]> {
    Ipv4Packet::new_checked(&f[14..]).expect("ipv4")
}

/// Recompute the IPv4 header checksum of an untagged frame (20-byte header).
fn fix_ip_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let c = !checksum::data(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Recompute the TCP checksum of an untagged frame from the peer.
fn fix_tcp_checksum(f: &mut [u8]) {
    f[50] = 0;
    f[51] = 0;
    let len = f.len() - 34;
    let c = !checksum::combine(&[
        checksum::pseudo_header_v4(PEER, US, 6, len as u32),
        checksum::data(&f[34..]),
    ]);
    f[50..52].copy_from_slice(&c.to_be_bytes());
}

/// Every frame the stack wants to send now, raw.
fn raw_drain(stack: &mut TestStack, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; stack.max_frame_len()];
    std::iter::from_fn(|| {
        stack
            .poll_transmit(now, &mut buf)
            .map(|n| buf[..n].to_vec())
    })
    .collect()
}

/// The other host broadcasts an ARP request for our address.
fn other_asks_for_us(h: &mut Harness) {
    h.stack.handle_frame(
        h.now,
        arp_frame(
            Operation::Request,
            (OTHER_MAC, OTHER),
            (MacAddr::UNSPECIFIED, US),
            MacAddr::BROADCAST,
            None,
        ),
    );
}

/// A stack built directly: no ARP exchange with the peer beforehand.
struct Bare {
    stack: TestStack,
    now: Instant,
}

impl Bare {
    fn new(tweak: impl FnOnce(&mut StackConfig)) -> Bare {
        let mut c = config();
        tweak(&mut c);
        let now = Instant::from_millis(1_000);
        Bare {
            stack: Stack::new(c, now).expect("valid config"),
            now,
        }
    }

    fn drain(&mut self) -> Vec<Vec<u8>> {
        raw_drain(&mut self.stack, self.now)
    }

    fn input(&mut self, f: Vec<u8>) -> Vec<Vec<u8>> {
        self.stack.handle_frame(self.now, f);
        self.drain()
    }

    /// Run timers for `d`; every frame sent, with the time since the start.
    fn run(&mut self, d: Duration) -> Vec<(Duration, Vec<u8>)> {
        let start = self.now;
        let end = start + d;
        let mut out: Vec<(Duration, Vec<u8>)> = Vec::new();
        for _ in 0..1_000_000 {
            match self.stack.poll_timeout() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.stack.handle_timeout(self.now);
                    for f in self.drain() {
                        out.push((self.now - start, f));
                    }
                }
                _ => {
                    self.now = end;
                    self.stack.handle_timeout(end);
                    for f in self.drain() {
                        out.push((self.now - start, f));
                    }
                    return out;
                }
            }
        }
        panic!("timers did not converge");
    }
}

/// ARP requests in `frames` asking for `ip`.
fn requests_for(frames: &[Vec<u8>], ip: Ipv4Addr) -> usize {
    frames
        .iter()
        .filter_map(|f| parse_arp(f))
        .filter(|(_, a)| a.operation == Operation::Request && a.target_ip == ip)
        .count()
}

/// The stack still completes a handshake on `port` and moves data both
/// ways.
fn assert_serves(h: &mut Harness, port: u16) {
    let (hc, iss) = h.passive_open(port, |s| s.mss(1460));
    h.send(Seg::to(port).seq(PEER_ISS + 1).ack(iss + 1).data(b"ping"));
    let mut buf = [0u8; 16];
    let n = h.stack.tcp_read(h.now, hc, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(h.stack.tcp_send(h.now, hc, b"pong".to_vec()).unwrap(), 4);
    h.drain();
    let s = h.expect_tcp();
    assert_eq!(
        (s.seq, s.ack, s.payload.as_slice()),
        (iss + 1, Some(PEER_ISS + 5), &b"pong"[..])
    );
    h.send(Seg::to(port).seq(PEER_ISS + 5).ack(iss + 5));
    h.expect_silence();
    h.events();
}

/// Deliver `f`; it must be dropped for `reason`, counted once, and answered
/// with nothing.
fn assert_dropped(h: &mut Harness, f: Vec<u8>, reason: DropReason) {
    let before = h.stack.counters().clone();
    h.send_raw(f);
    let after = h.stack.counters();
    assert_eq!(
        after.drops(reason),
        before.drops(reason) + 1,
        "not counted as {reason}"
    );
    assert_eq!(
        after.total_drops(),
        before.total_drops() + 1,
        "{reason}: counted more than once"
    );
    h.expect_silence();
}

// ===== ARP ================================================================

/// RFC 826 / RFC 1122 §2.3.2: a request for us gets a unicast reply; the asker is learned.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2
//= type=test
#[test]
fn arp_request_for_us_is_answered_and_asker_learned() {
    let mut h = Harness::new(|_| {});
    let replies = h.stack.counters().arp_replies_sent;
    other_asks_for_us(&mut h);
    let out = raw_drain(&mut h.stack, h.now);
    assert_eq!(out.len(), 1);
    let (eth, a) = parse_arp(&out[0]).expect("an ARP reply");
    assert_eq!((eth.src_addr, eth.dst_addr), (US_MAC, OTHER_MAC));
    assert_eq!(a.operation, Operation::Reply);
    assert_eq!((a.sender_mac, a.sender_ip), (US_MAC, US));
    assert_eq!((a.target_mac, a.target_ip), (OTHER_MAC, OTHER));
    assert_eq!(h.stack.counters().arp_replies_sent, replies + 1);
    // The asker is now known: a datagram to it needs no request.
    let u = h.stack.udp_bind(5000, 1).unwrap();
    h.stack
        .udp_send(u, SocketAddrV4::new(OTHER, 9), b"hi".to_vec())
        .unwrap();
    let out = raw_drain(&mut h.stack, h.now);
    assert_eq!(out.len(), 1);
    let eth = EthernetRepr::parse(&EthernetFrame::new_checked(&out[0][..]).unwrap()).unwrap();
    assert_eq!((eth.ethertype, eth.dst_addr), (EtherType::Ipv4, OTHER_MAC));
}

/// RFC 5227 §3: a fresh interface announces its address with a gratuitous ARP request.
//= https://www.rfc-editor.org/rfc/rfc5227#section-3
//= type=test
#[test]
fn gratuitous_arp_announcement_at_start() {
    let mut b = Bare::new(|_| {});
    let out = b.drain();
    assert_eq!(out.len(), 1, "exactly one frame at start");
    let (eth, a) = parse_arp(&out[0]).expect("an ARP announcement");
    assert_eq!((eth.src_addr, eth.dst_addr), (US_MAC, MacAddr::BROADCAST));
    assert_eq!(a.operation, Operation::Request);
    assert_eq!((a.sender_mac, a.sender_ip), (US_MAC, US));
    assert_eq!((a.target_mac, a.target_ip), (MacAddr::UNSPECIFIED, US));
    assert_eq!(b.stack.counters().arp_requests_sent, 1);
    assert!(b.run(Duration::from_secs(10)).is_empty());
}

/// RFC 1122 §2.3.2.2: the ARP request for a new neighbour leaves in the same poll loop.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2.2
//= type=test
#[test]
fn arp_request_for_new_neighbour_goes_out_at_once() {
    // RFC 1122 §2.3.2.2: a connection to an unresolved neighbour first sends
    // an ARP request — in the same `poll_transmit` loop that follows the call
    // — and its SYN, kept meanwhile, goes out when the reply arrives.
    let mut b = Bare::new(|_| {});
    b.drain();
    let hc = b
        .stack
        .tcp_connect(b.now, 3, SocketAddrV4::new(PEER, 80))
        .unwrap();
    let out = b.drain();
    assert_eq!(
        requests_for(&out, PEER),
        1,
        "ARP request must leave in the poll loop after tcp_connect, got {} frames",
        out.len()
    );
    assert!(
        out.iter().all(|f| parse_arp(f).is_some()),
        "no SYN before ARP"
    );
    let out = b.input(arp_frame(
        Operation::Reply,
        (PEER_MAC, PEER),
        (US_MAC, US),
        US_MAC,
        None,
    ));
    assert_eq!(out.len(), 1);
    let Out::Tcp(syn) = decode(&out[0]) else {
        panic!("expected the SYN")
    };
    assert!(syn.is(Flags::SYN) && syn.dst_port == 80);
    assert_eq!(b.stack.tcp_state(hc).unwrap(), State::SynSent);
}

/// RFC 1122 §2.3.2.2: the SYN is kept while resolving and sent on the ARP reply.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2.2
//= type=test
#[test]
fn syn_waits_for_arp_reply() {
    let mut b = Bare::new(|_| {});
    b.drain();
    let hc = b
        .stack
        .tcp_connect(b.now, 3, SocketAddrV4::new(PEER, 80))
        .unwrap();
    let mut out = b.drain();
    out.extend(
        b.run(Duration::from_millis(1500))
            .into_iter()
            .map(|(_, f)| f),
    );
    assert!(requests_for(&out, PEER) >= 1, "an ARP request for the peer");
    assert!(
        out.iter().all(|f| parse_arp(f).is_some()),
        "no SYN before ARP"
    );
    let out = b.input(arp_frame(
        Operation::Reply,
        (PEER_MAC, PEER),
        (US_MAC, US),
        US_MAC,
        None,
    ));
    assert_eq!(out.len(), 1);
    let Out::Tcp(syn) = decode(&out[0]) else {
        panic!("expected the SYN")
    };
    assert!(syn.is(Flags::SYN) && syn.dst_port == 80);
    // The handshake completes as usual.
    b.stack.handle_frame(
        b.now,
        Harness::tcp_frame(&Seg {
            src_port: 80,
            ..Seg::to(syn.src_port)
                .syn()
                .seq(PEER_ISS)
                .ack(syn.seq + 1)
                .mss(1460)
        }),
    );
    assert_eq!(b.stack.tcp_state(hc).unwrap(), State::Established);
}

/// RFC 1122 §2.3.2.1: `arp_retries` requests, then give up; the waiting packet is a drop.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2.1
//= type=test
#[test]
fn arp_retries_then_gives_up() {
    let mut b = Bare::new(|_| {});
    b.drain();
    let u = b.stack.udp_bind(5000, 1).unwrap();
    b.stack
        .udp_send(u, SocketAddrV4::new(OTHER, 9), b"x".to_vec())
        .unwrap();
    let mut out: Vec<(Duration, Vec<u8>)> =
        b.drain().into_iter().map(|f| (Duration::ZERO, f)).collect();
    out.extend(b.run(Duration::from_secs(10)));
    let asked: Vec<Duration> = out
        .iter()
        .filter(|(_, f)| requests_for(std::slice::from_ref(f), OTHER) == 1)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(asked.len(), 3, "arp_retries requests: {asked:?}");
    assert!(asked.iter().all(|t| *t <= Duration::from_secs(3)));
    assert_eq!(out.len(), 3, "nothing but the requests");
    assert_eq!(b.stack.counters().drops(DropReason::NeighborUnresolved), 1);
}

/// RFC 1122 §2.3.2.1: ARP requests for one destination are at most one per second.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2.1
//= type=test
#[test]
fn arp_requests_at_most_one_per_second() {
    // RFC 1122 §2.3.2.1: requests for one destination are limited to one per
    // second.
    let mut b = Bare::new(|_| {});
    b.drain();
    let u = b.stack.udp_bind(5000, 1).unwrap();
    b.stack
        .udp_send(u, SocketAddrV4::new(OTHER, 9), b"x".to_vec())
        .unwrap();
    let mut out: Vec<(Duration, Vec<u8>)> =
        b.drain().into_iter().map(|f| (Duration::ZERO, f)).collect();
    out.extend(b.run(Duration::from_secs(10)));
    let asked: Vec<Duration> = out
        .iter()
        .filter(|(_, f)| requests_for(std::slice::from_ref(f), OTHER) == 1)
        .map(|(t, _)| *t)
        .collect();
    for w in asked.windows(2) {
        assert!(
            w[1] - w[0] >= Duration::from_secs(1),
            "two requests within a second: {asked:?}"
        );
    }
}

/// RFC 1122 §4.2.3.5: a connect to a host that never answers ARP must eventually fail.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.5
//= type=test
#[test]
fn connect_to_unresolvable_neighbour_fails() {
    // RFC 9293 §3.8.1 / RFC 1122 §4.2.3.5: a connection to a neighbour that
    // never answers ARP must still fail (its SYN can never be sent, so the
    // connection attempt times out) instead of asking forever.
    let mut b = Bare::new(|_| {});
    b.drain();
    let hc = b
        .stack
        .tcp_connect(b.now, 3, SocketAddrV4::new(OTHER, 80))
        .unwrap();
    b.drain();
    let out = b.run(Duration::from_secs(600));
    let dead = std::iter::from_fn(|| b.stack.poll_event()).any(|e| {
        matches!(e, Event::Dead { handle, reason, .. }
            if handle == hc && matches!(reason, DeadReason::TimedOut | DeadReason::Unreachable))
    });
    assert!(
        dead,
        "no Dead event after 10 minutes; {} ARP requests sent, state {:?}",
        requests_for(
            &out.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
            OTHER
        ),
        b.stack.tcp_state(hc)
    );
}

/// RFC 826: ARP about another host is a counted drop, adds no entry, updates an existing one.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.2
//= type=test
#[test]
fn arp_about_another_host_is_a_counted_drop() {
    let mut h = Harness::new(|_| {});
    let not_us = Ipv4Addr::new(198, 18, 0, 50);
    let before = h.stack.counters().drops(DropReason::ArpNotForUs);
    h.stack.handle_frame(
        h.now,
        arp_frame(
            Operation::Request,
            (OTHER_MAC, OTHER),
            (MacAddr::UNSPECIFIED, not_us),
            MacAddr::BROADCAST,
            None,
        ),
    );
    assert!(raw_drain(&mut h.stack, h.now).is_empty(), "no reply");
    assert_eq!(
        h.stack.counters().drops(DropReason::ArpNotForUs),
        before + 1
    );
    // OTHER was not added: sending to it needs resolution.
    let u = h.stack.udp_bind(5000, 1).unwrap();
    h.stack
        .udp_send(u, SocketAddrV4::new(OTHER, 9), b"x".to_vec())
        .unwrap();
    let mut asked = requests_for(&raw_drain(&mut h.stack, h.now), OTHER);
    h.advance(Duration::from_millis(1500));
    for o in h.out.drain(..) {
        match o {
            Out::Arp(a) if a.operation == Operation::Request && a.target_ip == OTHER => asked += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(asked >= 1, "OTHER must be resolved first");
    // The peer, already cached, moves to a new MAC: the entry is updated
    // even though the announcement is not for us.
    let new_mac = MacAddr([2, 0, 0, 0, 0, 0xaa]);
    h.stack.handle_frame(
        h.now,
        arp_frame(
            Operation::Request,
            (new_mac, PEER),
            (MacAddr::UNSPECIFIED, PEER),
            MacAddr::BROADCAST,
            None,
        ),
    );
    assert_eq!(
        h.stack.counters().drops(DropReason::ArpNotForUs),
        before + 2
    );
    h.stack
        .udp_send(u, SocketAddrV4::new(PEER, 9), b"y".to_vec())
        .unwrap();
    let out = raw_drain(&mut h.stack, h.now);
    assert_eq!(out.len(), 1);
    let eth = EthernetRepr::parse(&EthernetFrame::new_checked(&out[0][..]).unwrap()).unwrap();
    assert_eq!((eth.ethertype, eth.dst_addr), (EtherType::Ipv4, new_mac));
}

// ===== ICMP ===============================================================

/// RFC 1122 §3.2.2.6: an echo reply carries the request's identifier, sequence and data.
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2.6
//= type=test
#[test]
fn echo_request_gets_identical_reply() {
    let mut h = Harness::new(|_| {});
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    h.stack.handle_frame(
        h.now,
        Harness::icmp_frame(&Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 0xbeef,
            data: &data,
        }),
    );
    let out = raw_drain(&mut h.stack, h.now);
    assert_eq!(out.len(), 1);
    let eth = EthernetRepr::parse(&EthernetFrame::new_checked(&out[0][..]).unwrap()).unwrap();
    assert_eq!(eth.dst_addr, PEER_MAC);
    let ip = ip_of(&out[0]);
    let ipr = Ipv4Repr::parse(&ip, Checksum::Both).unwrap();
    assert_eq!(
        (ipr.src_addr, ipr.dst_addr, ipr.protocol),
        (US, PEER, Protocol::Icmp)
    );
    let p = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(
        Icmpv4Repr::parse(&p, Checksum::Both).unwrap(),
        Icmpv4Repr::EchoReply {
            ident: 0x1234,
            seq_no: 0xbeef,
            data: &data
        }
    );
    assert_eq!(h.stack.counters().icmp_echo_replies, 1);
}

/// RFC 1122 §4.1.3.1: UDP to an unbound port gets a rate-limited port unreachable.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.3.1
//= type=test
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2
//= type=test
#[test]
fn udp_to_unbound_port_gets_rate_limited_port_unreachable() {
    let mut h = Harness::new(|c| c.icmp_error_limit = 3);
    let f = Harness::udp_frame(4000, 9, b"nobody home");
    h.send_raw(f.clone());
    match h.expect_out() {
        Out::Icmp { ty, code, data } => {
            assert_eq!((ty, code), (3, 3));
            // `data` follows the 8-byte ICMP header: the quote itself.
            assert_eq!(data, f[14..14 + 28].to_vec(), "IP header + 8 bytes");
        }
        other => panic!("expected ICMP, got {other:?}"),
    }
    assert_eq!(h.stack.counters().drops(DropReason::UdpNoSocket), 1);
    for _ in 0..5 {
        h.send_raw(f.clone());
    }
    let errors = h
        .out
        .drain(..)
        .filter(|o| matches!(o, Out::Icmp { ty: 3, code: 3, .. }))
        .count();
    assert_eq!(errors, 2, "3 per second in all");
    let c = h.stack.counters();
    assert_eq!((c.icmp_errors_sent, c.icmp_errors_rate_limited), (3, 3));
    assert_eq!(c.drops(DropReason::UdpNoSocket), 6);
    h.advance(Duration::from_secs(1));
    h.send_raw(f);
    assert!(matches!(h.expect_out(), Out::Icmp { ty: 3, code: 3, .. }));
}

/// RFC 1122 §3.2.2.1: a datagram for an unsupported protocol gets protocol unreachable.
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2.1
//= type=test
#[test]
fn unknown_protocol_gets_protocol_unreachable() {
    let mut h = Harness::new(|_| {});
    let f = Harness::ip_frame(Protocol::Unknown(253), b"experimental payload");
    h.send_raw(f.clone());
    match h.expect_out() {
        Out::Icmp { ty, code, data } => {
            assert_eq!((ty, code), (3, 2));
            assert_eq!(data, f[14..14 + 28].to_vec());
        }
        other => panic!("expected ICMP, got {other:?}"),
    }
    assert_eq!(h.stack.counters().drops(DropReason::Ipv4UnknownProtocol), 1);
    h.expect_silence();
}

/// Our IP header and the first 8 TCP bytes, as an ICMP error quotes them.
fn quote_tcp(sport: u16, dport: u16, seq: u32) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: US,
        dst_addr: PEER,
        protocol: Protocol::Tcp,
        payload_len: 20,
        ttl: 64,
        dscp_ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    let mut q = vec![0u8; 28];
    ip.emit(&mut q, Checksum::Both);
    q[20..22].copy_from_slice(&sport.to_be_bytes());
    q[22..24].copy_from_slice(&dport.to_be_bytes());
    q[24..28].copy_from_slice(&seq.to_be_bytes());
    q
}

/// A quote of a UDP datagram of ours (`sport` to `dport`): [`quote_tcp`]
/// with the UDP protocol (its 8 bytes: ports, length, checksum).
fn quote_udp(sport: u16, dport: u16) -> Vec<u8> {
    let mut q = quote_tcp(sport, dport, 0x0009_0000);
    q[9] = 17;
    // (The header checksum again, for the protocol changed.)
    q[10..12].copy_from_slice(&[0, 0]);
    let c = !checksum::data(&q[..20]);
    q[10..12].copy_from_slice(&c.to_be_bytes());
    q
}

/// RFC 1122 §4.1.3.3: an ICMP error about a datagram a UDP socket sent
/// reaches that socket (announced as a datagram is, taken once); one
/// about a port nothing is bound to is dropped.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.3.3
//= type=test
#[test]
fn udp_icmp_errors_reach_the_socket() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 9).unwrap();
    h.send_raw(unreachable(3, &quote_udp(5353, 53)));
    assert_eq!(
        h.events(),
        [Event::UdpRecv {
            handle: u,
            cookie: 9
        }]
    );
    assert_eq!(
        h.stack.udp_take_error(u),
        Ok(Some((SocketAddrV4::new(PEER, 53), 3)))
    );
    assert_eq!(h.stack.udp_take_error(u), Ok(None));
    assert_eq!(h.stack.udp_recv(u).map(|d| d.is_none()), Ok(true));
    h.send_raw(unreachable(3, &quote_udp(5354, 53)));
    assert_eq!(h.events(), []);
    assert_eq!(h.stack.counters().drops(DropReason::IcmpNoMatch), 1);
}

/// RFC 6056 §3.3.1 (algorithm 1): a bind to port 0 draws a port no one
/// can guess without the stack's secret (RFC 5452 §9.2: a resolver's
/// query port must not be predictable): within the ephemeral range, and
/// another secret draws others; until 2026-11-29 the first was always the
/// range's lowest free port (49152), the next 49153.
//= https://www.rfc-editor.org/rfc/rfc6056#section-3.3.1
//= type=test
#[test]
fn a_bind_to_port_zero_draws_an_unguessable_port() {
    let ports = |secret: u8| {
        let mut h = Harness::new(|c| c.secret = [secret; 16]);
        let (lo, hi) = h.stack.config().tcp.ephemeral_ports;
        let p: Vec<u16> = (0..4)
            .map(|i| h.stack.udp_bind(0, i).unwrap().port())
            .collect();
        assert!(p.iter().all(|&x| (lo..=hi).contains(&x)), "{p:?}");
        p
    };
    let (a, b) = (ports(1), ports(2));
    assert_ne!(a, b);
    assert!(a.windows(2).any(|w| w[1] != w[0].wrapping_add(1)), "{a:?}");
    assert!(b.windows(2).any(|w| w[1] != w[0].wrapping_add(1)), "{b:?}");
}

fn unreachable(code: u8, quote: &[u8]) -> Vec<u8> {
    Harness::icmp_frame(&Icmpv4Repr::DstUnreachable {
        code,
        next_hop_mtu: 0,
        original: quote,
    })
}

/// RFC 1122 §4.2.3.9, RFC 5461 §4: a port unreachable aborts a connection in SYN-SENT.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.9
//= type=test
//= https://www.rfc-editor.org/rfc/rfc5461#section-4
//= type=test
#[test]
fn port_unreachable_aborts_syn_sent() {
    let mut h = Harness::new(|_| {});
    let hc = h
        .stack
        .tcp_connect(h.now, 4, SocketAddrV4::new(PEER, PEER_PORT))
        .unwrap();
    h.drain();
    let syn = h.expect_tcp();
    h.send_raw(unreachable(3, &quote_tcp(syn.src_port, PEER_PORT, syn.seq)));
    assert_eq!(
        h.events(),
        [Event::Dead {
            handle: hc,
            cookie: 4,
            reason: DeadReason::Unreachable
        }]
    );
    assert_eq!(h.stack.counters().tcp_attempt_fails, 1);
    h.advance(Duration::from_secs(10));
    h.expect_silence();
}

/// RFC 5461 §4: in ESTABLISHED a port or protocol unreachable is only a soft error.
//= https://www.rfc-editor.org/rfc/rfc5461#section-4
//= type=test
#[test]
fn port_unreachable_does_not_abort_established() {
    let mut h = Harness::new(|_| {});
    let (hc, iss) = h.active_open(|syn| {
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1460)
    });
    h.expect_tcp();
    h.events();
    let lport = h.stack.tcp_addrs(hc).unwrap().0.port();
    h.stack.tcp_send(h.now, hc, b"hello".to_vec()).unwrap();
    h.drain();
    assert_eq!(h.expect_tcp().seq, iss + 1);
    let no_match = h.stack.counters().drops(DropReason::IcmpNoMatch);
    for code in [2, 3] {
        h.send_raw(unreachable(code, &quote_tcp(lport, PEER_PORT, iss + 1)));
        h.expect_silence();
    }
    // It matched the connection (not a drop) but changed nothing.
    assert_eq!(h.stack.counters().drops(DropReason::IcmpNoMatch), no_match);
    assert!(h.events().is_empty());
    assert_eq!(h.stack.tcp_state(hc).unwrap(), State::Established);
    h.send(Seg::to(lport).seq(PEER_ISS + 1).ack(iss + 6));
    assert!(matches!(h.events()[..], [Event::Sent { acked: 5, .. }]));
}

/// RFC 5927 §4.1: an ICMP error quoting a sequence number not in flight is ignored.
//= https://www.rfc-editor.org/rfc/rfc5927#section-4.1
//= type=test
#[test]
fn icmp_error_quoting_unsent_sequence_is_ignored() {
    let mut h = Harness::new(|_| {});
    let hc = h
        .stack
        .tcp_connect(h.now, 4, SocketAddrV4::new(PEER, PEER_PORT))
        .unwrap();
    h.drain();
    let syn = h.expect_tcp();
    for seq in [syn.seq.wrapping_sub(1), syn.seq + 1, syn.seq + 100_000] {
        h.send_raw(unreachable(3, &quote_tcp(syn.src_port, PEER_PORT, seq)));
    }
    // And one for a connection that does not exist.
    h.send_raw(unreachable(3, &quote_tcp(1, PEER_PORT, syn.seq)));
    assert_eq!(h.stack.counters().drops(DropReason::IcmpNoMatch), 4);
    assert!(h.events().is_empty());
    assert_eq!(h.stack.tcp_state(hc).unwrap(), State::SynSent);
}

// ===== UDP ================================================================

/// RFC 768 / RFC 1122 §4.1.3: bind, receive (payload, source) and send with a checksum.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.3.4
//= type=test
#[test]
fn udp_bind_receive_and_send() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 11).unwrap();
    assert_eq!(u.port(), 5353);
    h.send_raw(Harness::udp_frame(4000, 5353, b"hello"));
    assert_eq!(
        h.events(),
        [Event::UdpRecv {
            handle: u,
            cookie: 11
        }]
    );
    let d = h.stack.udp_recv(u).unwrap().expect("a datagram");
    assert_eq!(d.payload(), b"hello");
    assert_eq!(d.src, SocketAddrV4::new(PEER, 4000));
    assert!(h.stack.udp_recv(u).unwrap().is_none());
    assert_eq!(h.stack.counters().udp_in_datagrams, 1);

    h.stack
        .udp_send(u, SocketAddrV4::new(PEER, 4000), b"world".to_vec())
        .unwrap();
    let out = raw_drain(&mut h.stack, h.now);
    assert_eq!(out.len(), 1);
    assert_eq!(
        decode(&out[0]),
        Out::Udp {
            src_port: 5353,
            dst_port: 4000,
            payload: b"world".to_vec()
        }
    );
    let ip = ip_of(&out[0]);
    let p = UdpPacket::new_checked(ip.payload()).unwrap();
    assert_ne!(p.checksum(), 0, "a checksum is sent");
    assert!(p.verify_checksum(US, PEER));
    assert_eq!(usize::from(p.len()), 8 + 5);
    assert_eq!(h.stack.counters().udp_out_datagrams, 1);
}

/// RFC 1122 §4.1.3.4: a zero UDP checksum is accepted, a wrong one discarded.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.3.4
//= type=test
#[test]
fn udp_checksum_zero_accepted_wrong_discarded() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 11).unwrap();
    let mut f = Harness::udp_frame(4000, 5353, b"no checksum");
    f[40] = 0;
    f[41] = 0;
    h.send_raw(f);
    assert_eq!(
        h.stack.udp_recv(u).unwrap().unwrap().payload(),
        b"no checksum"
    );
    let mut f = Harness::udp_frame(4000, 5353, b"bad checksum");
    f[40] ^= 0x55;
    assert_dropped(&mut h, f, DropReason::UdpBadChecksum);
    assert!(h.stack.udp_recv(u).unwrap().is_none());
}

/// RFC 1122 §4.1.4: double bind is `AddrInUse`; a datagram over 65507
/// bytes (what an IPv4 datagram holds) is refused.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.1.4
//= type=test
#[test]
fn udp_double_bind_and_oversize() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 1).unwrap();
    assert_eq!(h.stack.udp_bind(5353, 2), Err(Error::AddrInUse));
    let dst = SocketAddrV4::new(PEER, 4000);
    assert_eq!(
        h.stack.udp_send(u, dst, vec![0; 65508]),
        Err(Error::MessageTooLong)
    );
    h.stack.udp_send(u, dst, vec![0; 1500 - 28]).unwrap();
    h.drain();
    match h.expect_out() {
        Out::Udp { payload, .. } => assert_eq!(payload.len(), 1472),
        other => panic!("{other:?}"),
    }
    // After close the port is free again.
    h.stack.udp_close(u).unwrap();
    h.stack.udp_bind(5353, 3).unwrap();
}

// ===== malformed input ====================================================

/// A valid frame to start corrupting: UDP to an unbound port would draw an
/// ICMP error, so use a bound one.
fn good_udp() -> Vec<u8> {
    Harness::udp_frame(4000, 5353, b"payload!")
}

/// A valid SYN to port 80 with an MSS option.
fn good_syn() -> Vec<u8> {
    Harness::tcp_frame(&Seg::to(80).syn().mss(1460))
}

/// RFC 1122 §1.2.2: malformed Ethernet framing is a counted drop; the stack serves on.
//= https://www.rfc-editor.org/rfc/rfc1122#section-1.2.2
//= type=test
#[test]
fn malformed_ethernet_is_a_counted_drop() {
    let mut h = Harness::new(|_| {});
    h.stack.udp_bind(5353, 1).unwrap();
    assert_dropped(&mut h, good_udp()[..10].to_vec(), DropReason::EthTruncated);
    let mut f = good_udp();
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    assert_dropped(&mut h, f, DropReason::EthNotForUs);
    let mut f = good_udp();
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert_dropped(&mut h, f, DropReason::EthUnknownType);
    // A VLAN tag on an untagged interface.
    let mut f = vec![0u8; 18];
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: US_MAC,
        ethertype: EtherType::Ipv4,
        vlan: Some(42),
    }
    .emit(&mut f);
    f.extend_from_slice(&good_udp()[14..]);
    assert_dropped(&mut h, f, DropReason::EthVlanMismatch);
    // A tag header cut short.
    let mut f = good_udp()[..16].to_vec();
    f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
    assert_dropped(&mut h, f, DropReason::EthTruncated);
    assert_serves(&mut h, 80);
}

/// RFC 1122 §1.2.2: a VLAN interface accepts only its own tag and tags its replies.
//= https://www.rfc-editor.org/rfc/rfc1122#section-1.2.2
//= type=test
#[test]
fn vlan_interface_accepts_only_its_vlan() {
    let mut b = Bare::new(|c| c.vlan = Some(100));
    b.drain();
    let req = |vlan| {
        arp_frame(
            Operation::Request,
            (PEER_MAC, PEER),
            (MacAddr::UNSPECIFIED, US),
            MacAddr::BROADCAST,
            vlan,
        )
    };
    for vlan in [None, Some(200)] {
        assert!(b.input(req(vlan)).is_empty());
    }
    assert_eq!(b.stack.counters().drops(DropReason::EthVlanMismatch), 2);
    let out = b.input(req(Some(100)));
    assert_eq!(out.len(), 1);
    let (eth, a) = parse_arp(&out[0]).unwrap();
    assert_eq!((eth.vlan, a.operation), (Some(100), Operation::Reply));
}

/// RFC 1122 §3.2.1.1-2: bad version, checksum, lengths and fragments are counted drops.
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.2.1.1
//= type=test
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.2.1.2
//= type=test
#[test]
fn malformed_ipv4_is_a_counted_drop() {
    let mut h = Harness::new(|_| {});
    h.stack.udp_bind(5353, 1).unwrap();
    assert_dropped(&mut h, good_udp()[..24].to_vec(), DropReason::Ipv4Truncated);
    // Total length beyond the frame.
    let mut f = good_udp();
    f[16..18].copy_from_slice(&200u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4Truncated);
    // Version 6 in an IPv4 EtherType.
    let mut f = good_udp();
    f[14] = 0x65;
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4Malformed);
    // IHL below 5.
    let mut f = good_udp();
    f[14] = 0x44;
    assert_dropped(&mut h, f, DropReason::Ipv4Malformed);
    // Total length below the header length.
    let mut f = good_udp();
    f[16..18].copy_from_slice(&10u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4Malformed);
    let mut f = good_udp();
    f[24] ^= 0xff;
    assert_dropped(&mut h, f, DropReason::Ipv4BadChecksum);
    // Fragments: of TCP (not reassembled); not the last and not a multiple
    // of 8 bytes; past 65535 bytes (RFC 791 §3.1).
    let mut f = good_syn();
    f[20..22].copy_from_slice(&0x2000u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4Fragment);
    let mut f = Harness::udp_frame(4000, 5353, b"payload");
    f[20..22].copy_from_slice(&0x2000u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4FragMalformed);
    let mut f = good_udp();
    f[20..22].copy_from_slice(&0x1fffu16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4FragMalformed);
    // For another address; from a broadcast source.
    let mut f = good_udp();
    f[30..34].copy_from_slice(&[198, 18, 0, 99]);
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4NotForUs);
    let mut f = good_udp();
    f[26..30].copy_from_slice(&[255, 255, 255, 255]);
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::Ipv4BadSource);
    assert_serves(&mut h, 80);
}

/// RFC 1122 §4.2.2.5: bad TCP checksum, offset, option length or flags is a counted drop.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.2.5
//= type=test
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.1
//= type=test
#[test]
fn malformed_tcp_is_a_counted_drop() {
    let mut h = Harness::new(|_| {});
    let (hc, iss) = h.passive_open(80, |s| s.mss(1460));
    // Bad checksum, aimed at the live connection.
    let mut f = Harness::tcp_frame(&Seg::to(80).seq(PEER_ISS + 1).ack(iss + 1).data(b"corrupt"));
    f[60] ^= 0x01;
    assert_dropped(&mut h, f, DropReason::TcpBadChecksum);
    // Data offset below 5 words; beyond the segment.
    let mut f = good_syn();
    f[46] = 4 << 4;
    assert_dropped(&mut h, f, DropReason::TcpMalformed);
    let mut f = good_syn();
    f[46] = 15 << 4;
    fix_tcp_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::TcpMalformed);
    // Truncated header.
    let mut f = good_syn()[..34 + 12].to_vec();
    f[16..18].copy_from_slice(&32u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::TcpMalformed);
    // Illegal option lengths (checksum fixed so only the options are bad).
    for len in [0u8, 1, 3, 200] {
        let mut f = good_syn();
        f[55] = len;
        fix_tcp_checksum(&mut f);
        assert_dropped(&mut h, f, DropReason::TcpMalformed);
    }
    // Impossible flag combinations.
    for seg in [
        Seg::to(80).syn().fin(),
        Seg::to(80).syn().rst(),
        Seg::to(80).seq(PEER_ISS + 1),
    ] {
        assert_dropped(&mut h, Harness::tcp_frame(&seg), DropReason::TcpBadFlags);
    }
    assert_eq!(h.stack.counters().tcp_out_rsts, 0);
    // The live connection still works, and so do new ones.
    h.send(Seg::to(80).seq(PEER_ISS + 1).ack(iss + 1).data(b"fine"));
    assert_eq!(h.stack.tcp_readable(hc).unwrap(), 4);
    assert!(matches!(h.events()[..], [Event::Recv { readable: 4, .. }]));
    assert_serves(&mut h, 81);
}

/// RFC 1122 §1.2.2: malformed UDP, ICMP and ARP are counted drops; the stack serves on.
//= https://www.rfc-editor.org/rfc/rfc1122#section-1.2.2
//= type=test
#[test]
fn malformed_udp_icmp_arp_are_counted_drops() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 1).unwrap();
    // UDP length beyond the datagram; below the header.
    for len in [200u16, 4] {
        let mut f = good_udp();
        f[38..40].copy_from_slice(&len.to_be_bytes());
        assert_dropped(&mut h, f, DropReason::UdpMalformed);
    }
    // UDP header cut short (IP length adjusted).
    let mut f = good_udp()[..34 + 6].to_vec();
    f[16..18].copy_from_slice(&26u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_dropped(&mut h, f, DropReason::UdpMalformed);
    // UDP to port zero.
    let f = Harness::udp_frame(4000, 0, b"x");
    assert_dropped(&mut h, f, DropReason::UdpMalformed);
    assert!(h.stack.udp_recv(u).unwrap().is_none());
    // ICMP: truncated, bad checksum, an error too short to quote.
    assert_dropped(
        &mut h,
        Harness::ip_frame(Protocol::Icmp, &[8, 0, 0]),
        DropReason::IcmpMalformed,
    );
    let mut f = Harness::icmp_frame(&Icmpv4Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"abc",
    });
    f[36] ^= 0xff;
    assert_dropped(&mut h, f, DropReason::IcmpBadChecksum);
    let mut short = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
    short.extend_from_slice(&[0x45; 12]);
    let c = !checksum::data(&short);
    short[2..4].copy_from_slice(&c.to_be_bytes());
    assert_dropped(
        &mut h,
        Harness::ip_frame(Protocol::Icmp, &short),
        DropReason::IcmpMalformed,
    );
    // ARP cut short.
    let f = arp_frame(
        Operation::Request,
        (PEER_MAC, PEER),
        (MacAddr::UNSPECIFIED, US),
        MacAddr::BROADCAST,
        None,
    );
    assert_dropped(&mut h, f[..30].to_vec(), DropReason::ArpMalformed);
    assert_serves(&mut h, 80);
}

/// RFC 1122 §1.2.2: every truncation of a valid frame is counted once and never answered.
//= https://www.rfc-editor.org/rfc/rfc1122#section-1.2.2
//= type=test
#[test]
fn every_truncation_is_a_counted_drop() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(80, None, 1).unwrap();
    h.stack.udp_bind(5353, 1).unwrap();
    let frames = [
        good_syn(),
        good_udp(),
        Harness::icmp_frame(&Icmpv4Repr::EchoRequest {
            ident: 1,
            seq_no: 2,
            data: b"0123456789",
        }),
        arp_frame(
            Operation::Request,
            (PEER_MAC, PEER),
            (MacAddr::UNSPECIFIED, US),
            MacAddr::BROADCAST,
            None,
        ),
    ];
    for f in &frames {
        for n in 0..f.len() {
            let before = h.stack.counters().total_drops();
            h.send_raw(f[..n].to_vec());
            assert_eq!(
                h.stack.counters().total_drops(),
                before + 1,
                "prefix of {n} of {} bytes",
                f.len()
            );
            h.expect_silence();
        }
    }
    assert!(h.stack.check_invariants().is_ok());
    assert_serves(&mut h, 81);
}

/// RFC 1122 §2.3.3: Ethernet padding after the IP datagram is not delivered as data.
//= https://www.rfc-editor.org/rfc/rfc1122#section-2.3.3
//= type=test
#[test]
fn ethernet_padding_is_not_payload() {
    let mut h = Harness::new(|_| {});
    let (hc, iss) = h.passive_open(80, |s| s.mss(1460));
    let mut f = Harness::tcp_frame(&Seg::to(80).seq(PEER_ISS + 1).ack(iss + 1).data(b"abc"));
    f.resize(60, 0xee);
    h.send_raw(f);
    let chunks: Vec<Vec<u8>> = h
        .stack
        .tcp_recv_chunks(hc)
        .unwrap()
        .map(|c| c.to_vec())
        .collect();
    assert_eq!(chunks.concat(), b"abc");
    let u = h.stack.udp_bind(5353, 1).unwrap();
    let mut f = Harness::udp_frame(4000, 5353, b"u");
    f.resize(60, 0xee);
    h.send_raw(f);
    assert_eq!(h.stack.udp_recv(u).unwrap().unwrap().payload(), b"u");
}

/// `IP_TOS` and `IP_TTL`: what a socket asks for goes in the IPv4 header
/// of every packet it sends — a listener's SYN-ACKs and the connections
/// it makes, a connection changed later, a UDP socket's datagrams (with
/// DF, as Linux's UDP with path MTU discovery) and each fragment of a
/// long one (RFC 791 §3.2: the fragments copy the header's TOS and TTL).
/// TCP's TOS goes without ECN bits (RFC 3168 §5–6: only the end points
/// of a transport that negotiated ECN mark packets ECT; Linux clears them); a UDP socket's goes as given.
/// The stack's own packets (a reset for a closed port) keep TOS 0 and
/// the stack's TTL.
#[test]
fn sockets_put_their_tos_and_ttl_on_their_packets() {
    use ixora_core::IpOpts;
    let mut h = Harness::new(|_| {});
    let hdr = |h: &mut Harness| {
        let r = h.ip_out.pop_front().expect("a packet");
        (r.dscp_ecn, r.ttl, r.dont_frag)
    };
    let _ = h.stack.tcp_listen(80, None, 77);
    let ef = IpOpts { tos: 0xb9, ttl: 7 }; // DSCP EF, ECT(1)
    h.stack.tcp_listener_ip_opts(80, ef).unwrap();
    h.ip_out.clear();
    let (c, _) = h.passive_open(80, |s| s);
    assert_eq!(hdr(&mut h), (0xb8, 7, true), "the SYN-ACK");
    h.out.clear();
    assert_eq!(h.stack.tcp_send(h.now, c, b"data".to_vec()).unwrap(), 4);
    h.drain();
    assert_eq!(
        hdr(&mut h),
        (0xb8, 7, true),
        "the accepted connection's data"
    );
    // Changed on the connection: TTL 0 is the stack's own.
    h.stack
        .tcp_set_ip_opts(c, IpOpts { tos: 0x28, ttl: 0 })
        .unwrap();
    assert_eq!(h.stack.tcp_send(h.now, c, b"more".to_vec()).unwrap(), 4);
    h.drain();
    assert_eq!(hdr(&mut h), (0x28, 64, true), "after the change");
    // UDP: as given, ECN bits too; DF on a datagram that fits a frame,
    // the header copied into each fragment of one that does not.
    let u = h.stack.udp_bind(5000, 1).unwrap();
    let ip = IpOpts { tos: 0xb9, ttl: 3 };
    h.ip_out.clear();
    h.stack
        .udp_send_with(u, SocketAddrV4::new(PEER, 9), b"hi".to_vec(), ip)
        .unwrap();
    h.drain();
    assert_eq!(hdr(&mut h), (0xb9, 3, true), "a datagram");
    h.stack
        .udp_send_with(u, SocketAddrV4::new(PEER, 9), vec![7u8; 3000], ip)
        .unwrap();
    h.drain();
    let frags: Vec<_> = h
        .ip_out
        .drain(..)
        .map(|r| (r.dscp_ecn, r.ttl, r.dont_frag))
        .collect();
    assert_eq!(frags, [(0xb9, 3, false); 3], "its fragments");
    // Without options: TOS 0, the stack's TTL.
    h.stack
        .udp_send(u, SocketAddrV4::new(PEER, 9), b"plain".to_vec())
        .unwrap();
    h.drain();
    assert_eq!(hdr(&mut h), (0, 64, true), "a plain datagram");
    h.send(Seg::to(81).syn());
    assert_eq!(hdr(&mut h), (0, 64, true), "the stack's reset");
}

/// RFC 7739 §5.3 (as Linux's `ip_idents`): the IPv4 identification of a
/// datagram that may be fragmented comes from one of 2,048 counters, the
/// one a keyed hash of the addresses and protocol picks, each started at
/// a value drawn with the secret; an atomic datagram's (DF) is 0 (RFC
/// 6864 §4.1). So one destination's identifications count only what it
/// (and the few that share its counter) got: a host learns nothing of
/// what we send others, and cannot use us for an idle scan (RFC 7739 §3).
/// With one counter for all, the datagrams to another host showed in the
/// gap (this test then fails).
//= https://www.rfc-editor.org/rfc/rfc7739#section-5.3
//= type=test
#[test]
fn ipv4_identifications_are_counted_per_destination() {
    let ids = |secret: [u8; 16], lane: (u16, u16)| {
        let mut h = Harness::new(|c| {
            c.secret = secret;
            c.ident_lane = lane;
        });
        // The other host asks for us: its address is learned.
        other_asks_for_us(&mut h);
        raw_drain(&mut h.stack, h.now);
        let u = h.stack.udp_bind(5000, 1).unwrap();
        // A datagram in two fragments (one identification), or a small
        // one (DF: 0).
        let send_len = |h: &mut Harness, to: Ipv4Addr, len: usize| {
            h.stack
                .udp_send(u, SocketAddrV4::new(to, 9), vec![1u8; len])
                .unwrap();
            let out = raw_drain(&mut h.stack, h.now);
            let ids: Vec<u16> = out
                .iter()
                .map(|f| {
                    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
                    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                    assert_eq!(ip.dst_addr(), to);
                    ip.ident()
                })
                .collect();
            assert_eq!(ids.len(), if len > 1472 { 2 } else { 1 });
            assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
            ids[0]
        };
        assert_eq!(send_len(&mut h, PEER, 10), 0, "an atomic datagram's");
        let send = |h: &mut Harness, to: Ipv4Addr| send_len(h, to, 2000);
        let peer: Vec<u16> = (0..2).map(|_| send(&mut h, PEER)).collect();
        let other: Vec<u16> = (0..5).map(|_| send(&mut h, OTHER)).collect();
        let peer_after = send(&mut h, PEER);
        (peer, other, peer_after)
    };
    let (peer, other, after) = ids([9; 16], (0, 1));
    assert_eq!(
        peer[1],
        peer[0].wrapping_add(1),
        "one destination counts on"
    );
    for w in other.windows(2) {
        assert_eq!(w[1], w[0].wrapping_add(1), "{other:?}");
    }
    assert_eq!(
        after,
        peer[1].wrapping_add(1),
        "the peer's identifications moved with datagrams to another host \
         (peer {peer:?}, other {other:?}, then {after})"
    );
    // The first values are drawn with the secret, not 1, 2, 3...
    let (peer2, _, _) = ids([3; 16], (0, 1));
    assert_ne!(
        peer2[0], peer[0],
        "the same first identification under another secret"
    );
    // Two cores share the secret: each sends in its own lane, so their
    // datagrams to one host never share an identification.
    let (a, _, _) = ids([9; 16], (0, 2));
    let (b, _, _) = ids([9; 16], (1, 2));
    assert!(
        a.iter().all(|i| i % 2 == 0) && b.iter().all(|i| i % 2 == 1),
        "{a:?} {b:?}"
    );
    assert_eq!(a[1], a[0].wrapping_add(2), "{a:?}");
    let mut c = config();
    c.ident_lane = (2, 2);
    assert!(c.validate().unwrap_err().contains("ident_lane"));
}
