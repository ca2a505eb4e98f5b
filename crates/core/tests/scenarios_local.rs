//! A connection from the stack to its own address: its frames carry the
//! stack's own MAC (no ARP is asked), the caller hands them back through
//! `handle_local`, and the connection opens, carries data both ways and
//! closes like any other — while a frame from the wire claiming the
//! stack's own address as its source is still dropped (RFC 1122
//! §3.2.1.3: such a source is not a valid one from outside).

mod common;
use common::*;
use ixora_core::{DropReason, Event, IpOpts, State};
use std::net::SocketAddrV4;

/// Run the stack to quiescence, looping every frame it sends back into
/// it (all must be addressed to itself); returns the events.
fn settle(h: &mut Harness, events: &mut Vec<Event>) {
    let mut buf = vec![0u8; h.stack.max_frame_len()];
    for _ in 0..1000 {
        let mut moved = false;
        while let Some(n) = h.stack.poll_transmit(h.now, &mut buf) {
            let f = buf[..n].to_vec();
            assert!(
                h.stack.is_local_frame(&f),
                "a frame for the wire: {:?}",
                decode(&f)
            );
            h.stack.handle_local(h.now, f);
            moved = true;
        }
        while let Some(e) = h.stack.poll_event() {
            events.push(e);
            moved = true;
        }
        if !moved {
            return;
        }
    }
    panic!("the stack never settled");
}

/// `f` from the wire is dropped for `reason`, and nothing answers it.
fn dropped_silently(h: &mut Harness, f: Vec<u8>, reason: DropReason) {
    let before = h.stack.counters().drops(reason);
    h.send_raw(f);
    h.expect_silence();
    assert_eq!(
        h.stack.counters().drops(reason),
        before + 1,
        "not dropped as {reason}"
    );
}

#[test]
fn a_connection_to_its_own_address_loops_inside_the_stack() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(80, None, 7).unwrap();
    let (tx0, rx0) = (h.stack.counters().tx_frames, h.stack.counters().rx_frames);
    let c = h
        .stack
        .tcp_connect(h.now, 1, SocketAddrV4::new(US, 80))
        .expect("connect to our own address");
    let mut ev = Vec::new();
    settle(&mut h, &mut ev);
    let s = ev
        .iter()
        .find_map(|e| match e {
            Event::Knock { handle, remote, .. } => {
                assert_eq!(*remote.ip(), US);
                Some(*handle)
            }
            _ => None,
        })
        .expect("the listener was knocked");
    h.stack.tcp_accept(s, 2).unwrap();
    settle(&mut h, &mut ev);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Connected { handle, .. } if *handle == c)));
    assert_eq!(h.stack.tcp_state(c).unwrap(), State::Established);
    assert_eq!(h.stack.tcp_state(s).unwrap(), State::Established);
    let (cl, cr) = h.stack.tcp_addrs(c).unwrap();
    let (sl, sr) = h.stack.tcp_addrs(s).unwrap();
    assert_eq!((cl, cr), (sr, sl), "the two ends mirror each other");
    assert_ne!(cl.port(), 80, "a connection never meets itself on one port");

    // Data both ways, every byte in order.
    let a: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let b: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    assert_eq!(h.stack.tcp_send(h.now, c, a.clone()).unwrap(), a.len());
    assert_eq!(h.stack.tcp_send(h.now, s, b.clone()).unwrap(), b.len());
    settle(&mut h, &mut ev);
    let mut got = vec![0u8; 8000];
    let n = h.stack.tcp_read(h.now, s, &mut got).unwrap();
    assert_eq!(&got[..n], &a[..]);
    let n = h.stack.tcp_read(h.now, c, &mut got).unwrap();
    assert_eq!(&got[..n], &b[..]);

    // Close: the client first, then the server; both ends finish.
    h.stack.tcp_close(h.now, c).unwrap();
    settle(&mut h, &mut ev);
    h.stack.tcp_close(h.now, s).unwrap();
    settle(&mut h, &mut ev);
    let (tx, rx) = (h.stack.counters().tx_frames, h.stack.counters().rx_frames);
    assert_eq!(tx - tx0, rx - rx0, "every frame sent came back");
    assert!(
        tx - tx0 >= 10,
        "handshake, data, ACKs and FINs: {}",
        tx - tx0
    );
    assert_eq!(h.stack.counters().local_frames, tx - tx0);
    assert_eq!(h.stack.counters().total_drops(), 0);
    // The active closer waits in TIME-WAIT; the other end is gone.
    let states = h.stack.tcp_state_counts();
    assert!(
        states
            .iter()
            .all(|&(st, n)| n == 0 || st == State::TimeWait),
        "{states:?}"
    );
    h.stack.check_invariants().unwrap();
}

#[test]
fn a_frame_from_the_wire_with_our_own_source_is_still_dropped() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(80, None, 7).unwrap();
    // A SYN "from" our own address, arriving from the wire.
    let mut f = Harness::tcp_frame(&Seg::to(80).syn());
    f[26..30].copy_from_slice(&US.octets());
    // (IP header checksum fixed after the edit.)
    f[24] = 0;
    f[25] = 0;
    let c = !ixora_core::wire::checksum::data(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    dropped_silently(&mut h, f, DropReason::Ipv4BadSource);
}

/// A datagram to our own address loops inside the stack too (the frame
/// carries our MAC; no ARP), arriving with our address as its source.
#[test]
fn a_datagram_to_its_own_address_loops_inside_the_stack() {
    let mut h = Harness::new(|_| {});
    let a = h.stack.udp_bind(5000, 1).unwrap();
    let b = h.stack.udp_bind(0, 2).unwrap();
    let (tx0, l0) = (
        h.stack.counters().tx_frames,
        h.stack.counters().local_frames,
    );
    h.stack
        .udp_send(b, SocketAddrV4::new(US, 5000), b"to myself".to_vec())
        .expect("a datagram to our own address");
    let mut ev = Vec::new();
    settle(&mut h, &mut ev);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::UdpRecv { cookie: 1, .. })));
    let d = h.stack.udp_recv(a).unwrap().expect("the datagram arrived");
    assert_eq!(d.payload(), b"to myself");
    assert_eq!(d.src, SocketAddrV4::new(US, b.port()));
    // `settle` fails on any frame for the wire: the one frame sent came
    // back as a local one.
    assert_eq!(h.stack.counters().tx_frames, tx0 + 1);
    assert_eq!(h.stack.counters().local_frames, l0 + 1);
    // A datagram comes with its IPv4 header's TOS and TTL (what
    // `IP_RECVTOS` and `IP_RECVTTL` give): the sender's, or the stack's
    // default TTL.
    assert_eq!((d.tos, d.ttl), (0, h.stack.config().ttl));
    let ip = IpOpts { tos: 0x28, ttl: 33 };
    h.stack
        .udp_send_with(b, SocketAddrV4::new(US, 5000), b"marked".to_vec(), ip)
        .unwrap();
    settle(&mut h, &mut ev);
    let d = h
        .stack
        .udp_recv(a)
        .unwrap()
        .expect("the marked datagram arrived");
    assert_eq!((d.payload(), d.tos, d.ttl), (&b"marked"[..], 0x28, 33));
}

/// A datagram to our own address that is longer than the MTU leaves in
/// fragments and is reassembled on its way back in.
#[test]
fn a_long_datagram_to_its_own_address_is_fragmented_and_reassembled() {
    let mut h = Harness::new(|_| {});
    let a = h.stack.udp_bind(5000, 1).unwrap();
    let b = h.stack.udp_bind(0, 2).unwrap();
    let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
    h.stack
        .udp_send(b, SocketAddrV4::new(US, 5000), data.clone())
        .unwrap();
    let mut ev = Vec::new();
    settle(&mut h, &mut ev);
    let d = h.stack.udp_recv(a).unwrap().expect("the datagram arrived");
    assert_eq!(d.payload(), &data[..]);
    assert!(d.into_frame().is_none(), "reassembled, not in one frame");
    let c = h.stack.counters();
    assert_eq!((c.ipv4_frag_oks, c.ipv4_frag_creates), (1, 7));
    assert_eq!((c.ipv4_reasm_reqds, c.ipv4_reasm_oks), (7, 1));
}

/// An ARP packet claiming our own MAC for another address is refused:
/// frames for that address would otherwise carry our own MAC and be
/// taken for frames to ourselves.
#[test]
fn an_arp_sender_with_our_own_mac_is_refused() {
    use ixora_core::wire::arp::{ArpRepr, Operation};
    use ixora_core::wire::ethernet::{EtherType, EthernetRepr, MacAddr};
    let mut h = Harness::new(|_| {});
    let repr = ArpRepr {
        operation: Operation::Request,
        sender_mac: US_MAC,
        sender_ip: std::net::Ipv4Addr::new(198, 18, 0, 9),
        target_mac: MacAddr::UNSPECIFIED,
        target_ip: US,
    };
    let eth = EthernetRepr {
        src_addr: US_MAC,
        dst_addr: MacAddr::BROADCAST,
        ethertype: EtherType::Arp,
        vlan: None,
    };
    let mut f = vec![0u8; 14 + 28];
    eth.emit(&mut f);
    repr.emit(&mut f[14..]);
    dropped_silently(&mut h, f, DropReason::ArpBadSender);
}
