//! IPv4 fragmentation and reassembly through the stack (RFC 791 §3.2,
//! RFC 1122 §3.3.2): long UDP datagrams and echo replies leave in
//! fragments; fragments from the peer are reassembled in any order,
//! duplicates ignored, overlaps and stale datagrams discarded and counted.

mod common;
use common::*;
use ixora_core::wire::checksum;
use ixora_core::wire::ethernet::{EtherType, EthernetRepr};
use ixora_core::wire::icmpv4::Icmpv4Repr;
use ixora_core::wire::ipv4::{Ipv4Repr, Protocol};
use ixora_core::wire::udp::{UdpPacket, UdpRepr};
use ixora_core::wire::Checksum;
use ixora_core::{DropReason, Duration, Event, MAX_UDP_PAYLOAD};
use std::net::SocketAddrV4;

/// The peer's datagram of `l4` (a whole IP payload) cut into fragments of
/// `chunk` bytes (a multiple of 8), as frames.
fn fragments(proto: Protocol, ident: u16, l4: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let eth = EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: US_MAC,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    l4.chunks(chunk)
        .enumerate()
        .map(|(i, piece)| {
            let offset = i * chunk;
            let ip = Ipv4Repr {
                src_addr: PEER,
                dst_addr: US,
                protocol: proto,
                payload_len: piece.len(),
                ttl: 64,
                dscp_ecn: 0,
                ident,
                dont_frag: false,
            };
            let mut f = vec![0u8; 34 + piece.len()];
            eth.emit(&mut f);
            ip.emit_fragment(
                &mut f[14..],
                Checksum::Both,
                offset,
                offset + piece.len() < l4.len(),
            );
            f[34..].copy_from_slice(piece);
            f
        })
        .collect()
}

fn udp_l4(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut u = vec![0u8; repr.buffer_len(payload.len())];
    repr.emit(&mut u, PEER, US, payload, Checksum::Both);
    u
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + i / 1000) as u8).collect()
}

/// Collect the fragments the stack sent and put them back together:
/// (protocol, the whole IP payload). Checks RFC 791 §3.2's rules on the way.
fn collect_fragments(h: &mut Harness) -> (Protocol, Vec<u8>, usize) {
    let mut whole = Vec::new();
    let mut id = None;
    let mut proto = None;
    let mut n = 0;
    loop {
        match h.expect_out() {
            Out::Frag {
                proto: p,
                ident,
                offset,
                more,
                data,
            } => {
                assert_eq!(
                    offset,
                    whole.len(),
                    "fragments leave in order, back to back"
                );
                assert_eq!(*id.get_or_insert(ident), ident, "one identification");
                assert_eq!(*proto.get_or_insert(p), p);
                if more {
                    assert_eq!(data.len() % 8, 0, "a multiple of 8 but the last");
                    assert_eq!(data.len(), 1480, "as long as the MTU allows");
                }
                whole.extend_from_slice(&data);
                n += 1;
                if !more {
                    return (p, whole, n);
                }
            }
            other => panic!("expected a fragment, got {other:?}"),
        }
    }
}

/// RFC 791 §3.2: a datagram longer than the MTU leaves in fragments; its
/// UDP checksum covers the whole datagram.
//= https://www.rfc-editor.org/rfc/rfc791#section-3.2
//= type=test
#[test]
fn long_udp_datagrams_leave_in_fragments() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 1).unwrap();
    let dst = SocketAddrV4::new(PEER, 4000);
    // What one frame holds still leaves whole.
    h.stack.udp_send(u, dst, pattern(1472)).unwrap();
    h.drain();
    assert!(matches!(h.expect_out(), Out::Udp { payload, .. } if payload.len() == 1472));
    for (len, frags) in [(1473, 2), (4000, 3), (MAX_UDP_PAYLOAD, 45)] {
        let data = pattern(len);
        h.stack.udp_send(u, dst, data.clone()).unwrap();
        h.drain();
        let (proto, whole, n) = collect_fragments(&mut h);
        assert_eq!((proto, n), (Protocol::Udp, frags), "{len} bytes");
        let p = UdpPacket::new_checked(&whole[..]).unwrap();
        assert!(
            p.verify_checksum(US, PEER),
            "{len} bytes: checksum of the whole"
        );
        assert_eq!((p.src_port(), p.dst_port()), (5353, 4000));
        assert_eq!(p.payload(), &data[..]);
        h.expect_silence();
    }
    let c = h.stack.counters();
    assert_eq!((c.ipv4_frag_oks, c.ipv4_frag_creates), (3, 50));
    assert_eq!(c.udp_out_datagrams, 4);
}

/// Fragments from the peer are reassembled whatever their order, and a
/// duplicate is ignored.
#[test]
fn fragments_from_the_peer_are_reassembled_in_any_order() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 1).unwrap();
    let data = pattern(6000);
    let mut frames = fragments(Protocol::Udp, 77, &udp_l4(4000, 5353, &data), 1480);
    assert_eq!(frames.len(), 5);
    frames.swap(0, 3);
    frames.insert(2, frames[0].clone());
    let last = frames.len() - 1;
    for (i, f) in frames.into_iter().enumerate() {
        h.send_raw(f);
        h.expect_silence();
        assert_eq!(
            h.stack.udp_recv(u).unwrap().is_some(),
            i == last,
            "after fragment {i}"
        );
        if i == last {
            break;
        }
    }
    let c = h.stack.counters();
    assert_eq!((c.ipv4_reasm_reqds, c.ipv4_reasm_oks), (6, 1));
    assert_eq!(c.drops(DropReason::Ipv4FragDuplicate), 1);
    // Once more, checking the bytes this time.
    for f in fragments(Protocol::Udp, 78, &udp_l4(4000, 5353, &data), 2960) {
        h.send_raw(f);
    }
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, Event::UdpRecv { cookie: 1, .. })));
    let d = h.stack.udp_recv(u).unwrap().expect("reassembled");
    assert_eq!(d.payload(), &data[..]);
    assert_eq!(d.src, SocketAddrV4::new(PEER, 4000));
}

/// A reassembled datagram's UDP checksum is checked over the whole.
#[test]
fn a_reassembled_datagram_with_a_bad_checksum_is_dropped() {
    let mut h = Harness::new(|c| c.checksums.udp = Checksum::None);
    let u = h.stack.udp_bind(5353, 1).unwrap();
    let mut l4 = udp_l4(4000, 5353, &pattern(3000));
    l4[2000] ^= 1;
    for f in fragments(Protocol::Udp, 5, &l4, 1480) {
        h.send_raw(f);
    }
    assert!(h.stack.udp_recv(u).unwrap().is_none());
    assert_eq!(h.stack.counters().drops(DropReason::UdpBadChecksum), 1);
}

/// A fragment that overlaps another of its datagram discards the datagram.
#[test]
fn an_overlapping_fragment_discards_its_datagram() {
    let mut h = Harness::new(|_| {});
    let u = h.stack.udp_bind(5353, 1).unwrap();
    let l4 = udp_l4(4000, 5353, &pattern(3000));
    let frames = fragments(Protocol::Udp, 9, &l4, 1480);
    h.send_raw(frames[0].clone());
    // 8 bytes in, 1480 long: over the first.
    let overlap = fragments(Protocol::Udp, 9, &l4[8..], 1480);
    let mut f = overlap[0].clone();
    f[20..22].copy_from_slice(&(0x2000u16 | 1).to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = !checksum::data(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    h.send_raw(f);
    assert_eq!(h.stack.counters().drops(DropReason::Ipv4FragOverlap), 1);
    // The rest no longer completes anything.
    h.send_raw(frames[1].clone());
    h.send_raw(frames[2].clone());
    assert!(h.stack.udp_recv(u).unwrap().is_none());
    h.expect_silence();
}

/// RFC 1122 §3.3.2: a datagram not complete when the timer runs out MUST
/// be discarded, and a time-exceeded message (code 1) sent to its source
/// if its fragment zero came.
//= https://www.rfc-editor.org/rfc/rfc1122#section-3.3.2
//= type=test
#[test]
fn an_incomplete_datagram_times_out_with_an_icmp_time_exceeded() {
    let mut h = Harness::new(|_| {});
    h.stack.udp_bind(5353, 1).unwrap();
    let l4 = udp_l4(4000, 5353, &pattern(3000));
    let frames = fragments(Protocol::Udp, 11, &l4, 1480);
    h.send_raw(frames[0].clone());
    // Another datagram, without its fragment zero: discarded silently.
    let other = fragments(Protocol::Udp, 12, &l4, 1480);
    h.send_raw(other[1].clone());
    h.expect_silence();
    h.advance(Duration::from_secs(29));
    h.expect_silence();
    h.advance(Duration::from_secs(2));
    match h.expect_out() {
        Out::Icmp {
            ty: 11,
            code: 1,
            data,
        } => {
            // The quote: fragment zero's IP header and 8 bytes of its payload.
            assert_eq!(&data[..20], &frames[0][14..34]);
            assert_eq!(&data[20..28], &l4[..8]);
        }
        other => panic!("expected a time-exceeded message, got {other:?}"),
    }
    h.expect_silence();
    assert_eq!(h.stack.counters().drops(DropReason::Ipv4FragTimeout), 2);
}

/// A ping longer than the MTU is reassembled and answered in fragments.
#[test]
fn a_long_ping_is_answered_in_fragments() {
    let mut h = Harness::new(|_| {});
    let data = pattern(4000);
    let req = Icmpv4Repr::EchoRequest {
        ident: 0x77,
        seq_no: 3,
        data: &data,
    };
    let mut l4 = vec![0u8; req.buffer_len()];
    req.emit(&mut l4, Checksum::Both);
    for f in fragments(Protocol::Icmp, 40, &l4, 1480).into_iter().rev() {
        h.send_raw(f);
    }
    let (proto, whole, n) = collect_fragments(&mut h);
    assert_eq!((proto, n), (Protocol::Icmp, 3));
    let p = ixora_core::wire::icmpv4::Icmpv4Packet::new_checked(&whole[..]).unwrap();
    assert!(p.verify_checksum());
    match Icmpv4Repr::parse(&p, Checksum::Both).unwrap() {
        Icmpv4Repr::EchoReply {
            ident: 0x77,
            seq_no: 3,
            data: d,
        } => assert_eq!(d, &data[..]),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.stack.counters().icmp_echo_replies, 1);
}

/// A reassembled datagram to a port nobody holds draws a port
/// unreachable, as one in a single frame does.
#[test]
fn a_reassembled_datagram_to_no_socket_draws_port_unreachable() {
    let mut h = Harness::new(|_| {});
    let l4 = udp_l4(4000, 6000, &pattern(2000));
    for f in fragments(Protocol::Udp, 13, &l4, 1480) {
        h.send_raw(f);
    }
    match h.expect_out() {
        Out::Icmp {
            ty: 3,
            code: 3,
            data,
        } => assert_eq!(&data[20..28], &l4[..8]),
        other => panic!("expected a port unreachable, got {other:?}"),
    }
    assert_eq!(h.stack.counters().drops(DropReason::UdpNoSocket), 1);
}
