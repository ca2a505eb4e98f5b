//! Scenario tests: opening handshakes (RFC 9293 §3.5, §3.10.7).

mod common;
use common::*;
use ixora_core::wire::tcp::Flags;
use ixora_core::{Duration, Event, State};

/// RFC 9293 §3.5 Figure 6: the three-way handshake, passive side.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.5
//= type=test
#[test]
fn passive_open_three_way_handshake() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(80, None, 1).unwrap();
    h.send(Seg::to(80).syn().mss(1460).wscale(7).sack_perm().ts(10, 0));
    let synack = h.expect_tcp();
    assert!(synack.is(Flags::SYN));
    assert_eq!(synack.ack, Some(PEER_ISS + 1));
    assert_eq!(synack.opts.mss, Some(1460));
    assert!(synack.opts.window_scale.is_some());
    assert!(synack.opts.sack_permitted);
    assert_eq!(synack.opts.timestamp.map(|t| t.1), Some(10));
    h.send(
        Seg::to(80)
            .seq(PEER_ISS + 1)
            .ack(synack.seq + 1)
            .ts(11, synack.opts.timestamp.unwrap().0),
    );
    let ev = h.events();
    let Event::Knock {
        handle,
        listener_cookie,
        local_port,
        ..
    } = ev[0]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((listener_cookie, local_port), (1, 80));
    h.stack.tcp_accept(handle, 42).unwrap();
    assert_eq!(h.stack.tcp_state(handle).unwrap(), State::Established);
    h.expect_silence();
}

/// RFC 9293 §3.5: active open, SYN-SENT -> ESTABLISHED on SYN-ACK.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.3
//= type=test
#[test]
fn active_open() {
    let mut h = Harness::new(|_| {});
    let (handle, iss) = h.active_open(|syn| {
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1400)
    });
    let ack = h.expect_tcp();
    assert_eq!((ack.seq, ack.ack), (iss + 1, Some(PEER_ISS + 1)));
    assert!(matches!(
        h.events()[..],
        [Event::Connected { cookie: 9, .. }]
    ));
    assert_eq!(h.stack.tcp_state(handle).unwrap(), State::Established);
    // Without the peer's options, none are used (RFC 7323 §2.2, §3.2).
    let info = h.stack.tcp_info(handle).unwrap();
    assert!(!info.timestamps && !info.sack && info.wscale.is_none());
    assert_eq!(info.mss, 1400);
}

/// RFC 9293 §3.7.1: Eff.snd.MSS counts options — timestamps and SACK
/// blocks shrink the payload so the segment never exceeds the peer's MSS
/// plus headers; without an MSS option the peer gets 536 (§3.7.1 default).
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.7.1
//= type=test
#[test]
fn effective_mss_excludes_options() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = h.passive_open(80, |s| s.mss(1000).sack_perm().ts(1, 0));
    h.stack.tcp_send(h.now, c, vec![7u8; 3000]).unwrap();
    h.drain();
    let first = h.expect_tcp();
    assert_eq!(first.payload.len(), 1000 - 12, "timestamps take 12 bytes");
    while !h.out.is_empty() {
        h.expect_tcp();
    }
    // Out-of-order data from the peer: our next segments carry a SACK block.
    let ts = first.opts.timestamp.unwrap().0;
    h.send(
        Seg::to(80)
            .seq(PEER_ISS + 1 + 100)
            .ack(iss + 1)
            .ts(200, ts)
            .data(&[1; 50]),
    );
    let dupack = h.expect_tcp();
    assert_eq!(dupack.opts.sacks().len(), 1);
    h.stack.tcp_send(h.now, c, vec![8u8; 3000]).unwrap();
    h.drain();
    let with_sack = h.expect_tcp();
    assert_eq!(with_sack.opts.sacks().len(), 1);
    assert_eq!(
        with_sack.payload.len(),
        1000 - 12 - 12,
        "one SACK block takes 12 more"
    );

    // No MSS option: 536 (RFC 9293 §3.7.1, RFC 1122 §4.2.2.6).
    let mut h = Harness::new(|_| {});
    let (c, _) = h.passive_open(81, |s| s);
    h.stack.tcp_send(h.now, c, vec![7u8; 3000]).unwrap();
    h.drain();
    assert_eq!(h.expect_tcp().payload.len(), 536);
}

/// Complete a handshake on `port` from peer port `sport` (no data).
fn handshake_from(h: &mut Harness, port: u16, sport: u16) -> u32 {
    h.send(Seg::to(port).from(sport).syn());
    // (Past what the stack sent the earlier connections.)
    let synack = loop {
        let s = h.expect_tcp();
        if s.is(Flags::SYN) && s.dst_port == sport {
            break s;
        }
    };
    h.send(
        Seg::to(port)
            .from(sport)
            .seq(PEER_ISS + 1)
            .ack(synack.seq + 1),
    );
    synack.seq
}

/// `TCP_DEFER_ACCEPT` (tcp(7)): a connection whose handshake completes
/// without data is not announced until its first data, then with that
/// data readable; one that sends nothing is announced once the period
/// has passed; one reset meanwhile never is (Linux's `tcp_check_req`
/// drops the bare ACK, and a request it never established is not
/// accepted).
#[test]
fn defer_accept_announces_a_connection_at_its_data() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(80, None, 1).unwrap();
    h.stack
        .tcp_listener_defer_accept(80, Duration::from_secs(7))
        .unwrap();
    // Data after a while: announced then, with the data.
    let iss = handshake_from(&mut h, 80, 4001);
    assert_eq!(h.events(), vec![]);
    h.advance(Duration::from_secs(2));
    assert_eq!(h.events(), vec![]);
    h.send(
        Seg::to(80)
            .from(4001)
            .seq(PEER_ISS + 1)
            .ack(iss + 1)
            .data(b"GET /"),
    );
    let ev = h.events();
    let [Event::Knock { handle, .. }] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    h.stack.tcp_accept(*handle, 42).unwrap();
    let ev = h.events();
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Recv {
                readable: 5,
                cookie: 42,
                ..
            }]
        ),
        "{ev:?}"
    );
    // Nothing sent: announced when the period has passed.
    handshake_from(&mut h, 80, 4002);
    h.advance(Duration::from_secs(6));
    assert_eq!(h.events(), vec![]);
    h.advance(Duration::from_secs(2));
    let ev = h.events();
    assert!(matches!(ev.as_slice(), [Event::Knock { .. }]), "{ev:?}");
    // Reset while held back: never announced.
    let iss = handshake_from(&mut h, 80, 4003);
    h.send(Seg::to(80).from(4003).seq(PEER_ISS + 1).ack(iss + 1).rst());
    h.advance(Duration::from_secs(10));
    assert_eq!(h.events(), vec![]);
    // The FIN alone announces it, as data does.
    let iss = handshake_from(&mut h, 80, 4004);
    h.send(Seg::to(80).from(4004).seq(PEER_ISS + 1).ack(iss + 1).fin());
    let ev = h.events();
    assert!(matches!(ev.first(), Some(Event::Knock { .. })), "{ev:?}");
}
