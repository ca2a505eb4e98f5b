//! Scenario tests: the TCP connection lifecycle — opening, closing, resets,
//! sequence and timestamp checks, the listen queues and handles
//! (RFC 9293 §3.5, §3.6, §3.10; RFC 5961; RFC 7323; RFC 4987; RFC 6191;
//! RFC 1337). The test plays the peer 198.18.0.1; the stack is 198.18.0.2.

mod common;
use common::*;
use ixora_core::wire::tcp::Flags;
use ixora_core::{ConnHandle, DeadReason, DropReason, Duration, Error, Event, State};
use std::net::SocketAddrV4;

/// The port the stack listens on in passive scenarios.
const PORT: u16 = 80;
/// The peer's first sequence number after its SYN.
const P1: u32 = PEER_ISS + 1;
/// A short MSL so TIME-WAIT (2·MSL) is quick to walk through.
const MSL: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A segment to our listening `PORT` from the peer's port `sport`.
fn from(sport: u16) -> Seg {
    Seg {
        src_port: sport,
        ..Seg::to(PORT)
    }
}

/// Drops counted for `r` so far.
fn drops(h: &Harness, r: DropReason) -> u64 {
    h.stack.counters().drops(r)
}

/// Every connection the stack holds, by state (TIME-WAIT and closed-but-
/// unreaped included).
fn states(h: &Harness) -> Vec<State> {
    h.stack
        .tcp_state_counts()
        .into_iter()
        .flat_map(|(s, n)| std::iter::repeat_n(s, n))
        .collect()
}

/// The next segment is a pure ACK `<SEQ=seq><ACK=ack><CTL=ACK>`.
#[track_caller]
fn expect_ack(h: &mut Harness, seq: u32, ack: u32) -> Seg {
    let s = h.expect_tcp();
    assert!(
        s.seq == seq
            && s.ack == Some(ack)
            && !s.is(Flags::SYN)
            && !s.is(Flags::FIN)
            && !s.is(Flags::RST)
            && s.payload.is_empty(),
        "expected <SEQ={seq}><ACK={ack}><CTL=ACK>, got {s:?}"
    );
    s
}

/// The next segment is a RST with sequence number `seq`.
#[track_caller]
fn expect_rst(h: &mut Harness, seq: u32) -> Seg {
    let s = h.expect_tcp();
    assert!(
        s.is(Flags::RST) && s.seq == seq && !s.is(Flags::SYN) && !s.is(Flags::FIN),
        "expected <SEQ={seq}><CTL=RST>, got {s:?}"
    );
    s
}

/// The next segment is our FIN `<SEQ=seq><ACK=ack><CTL=FIN,ACK>`.
#[track_caller]
fn expect_fin(h: &mut Harness, seq: u32, ack: u32) -> Seg {
    let s = h.expect_tcp();
    assert!(
        s.is(Flags::FIN) && s.seq == seq && s.ack == Some(ack) && s.payload.is_empty(),
        "expected <SEQ={seq}><ACK={ack}><CTL=FIN,ACK>, got {s:?}"
    );
    s
}

/// A passive open from the peer without options, accepted; nothing else
/// pending. Returns the handle and our ISS.
fn established(h: &mut Harness) -> (ConnHandle, u32) {
    let (c, iss) = h.passive_open(PORT, |s| s);
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    (c, iss)
}

/// `tcp_connect` to the peer; returns the handle and the SYN it sent.
fn connect(h: &mut Harness) -> (ConnHandle, Seg) {
    let c = h
        .stack
        .tcp_connect(h.now, 9, SocketAddrV4::new(PEER, PEER_PORT))
        .expect("connect");
    h.drain();
    let syn = h.expect_tcp();
    assert!(syn.is(Flags::SYN) && syn.ack.is_none(), "{syn:?}");
    (c, syn)
}

/// Passive SYN from `sport` with `seq`; returns our ISS from the SYN-ACK.
#[track_caller]
fn syn_from(h: &mut Harness, sport: u16, seq: u32) -> u32 {
    h.send(from(sport).syn().seq(seq));
    let synack = h.expect_tcp();
    assert!(
        synack.is(Flags::SYN) && synack.ack == Some(seq + 1) && synack.dst_port == sport,
        "{synack:?}"
    );
    synack.seq
}

/// Our close reaches TIME-WAIT: FIN out, the peer's FIN+ACK in, our ACK out.
fn close_into_time_wait(h: &mut Harness, c: ConnHandle, iss: u32) {
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(h, iss + 1, P1);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin());
    expect_ack(h, iss + 2, P1 + 1);
    assert_eq!(states(h), vec![State::TimeWait]);
}

// ===== 1. Opening ========================================================

/// Passive 3WHS with options: SYN-ACK echoes them, Knock after the final ACK, options in use.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.5
//= type=test
#[test]
fn passive_open_with_options() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 7).unwrap();
    h.send(
        Seg::to(PORT)
            .syn()
            .mss(1400)
            .wscale(7)
            .sack_perm()
            .ts(10, 0),
    );
    let synack = h.expect_tcp();
    assert!(synack.is(Flags::SYN), "{synack:?}");
    assert_eq!(synack.ack, Some(P1));
    assert_eq!(synack.opts.mss, Some(1460));
    assert!(synack.opts.window_scale.is_some());
    assert!(synack.opts.sack_permitted);
    let (our_ts, echoed) = synack.opts.timestamp.expect("timestamps offered back");
    assert_eq!(echoed, 10);
    // RFC 7323 §2.2: the window of a SYN segment is never scaled.
    assert_eq!(synack.win, 65535);
    // Half-open: nothing for the application yet.
    assert_eq!(h.events(), vec![]);
    assert_eq!(states(&h), vec![State::SynReceived]);

    h.send(Seg::to(PORT).seq(P1).ack(synack.seq + 1).ts(11, our_ts));
    h.expect_silence();
    let ev = h.events();
    let [Event::Knock {
        handle,
        listener_cookie: 7,
        local_port: PORT,
        remote,
    }] = ev[..]
    else {
        panic!("expected one knock, got {ev:?}")
    };
    assert_eq!(remote, SocketAddrV4::new(PEER, PEER_PORT));
    h.stack.tcp_accept(handle, 1).unwrap();
    assert_eq!(h.stack.tcp_state(handle), Ok(State::Established));
    let info = h.stack.tcp_info(handle).unwrap();
    assert!(info.sack && info.timestamps);
    assert_eq!(info.wscale.map(|w| w.0), Some(7));
    // min(1400, 1460) less 12 bytes of timestamp option on every segment.
    assert_eq!(info.mss, 1388);
    assert_eq!(h.stack.counters().tcp_passive_opens, 1);
}

/// Active open: SYN with our options, SYN-ACK, ACK echoing its TSval, `Connected`.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.3
//= type=test
#[test]
fn active_open_with_options() {
    let mut h = Harness::new(|_| {});
    let (c, syn) = connect(&mut h);
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    assert_eq!(syn.opts.mss, Some(1460));
    assert!(syn.opts.window_scale.is_some() && syn.opts.sack_permitted);
    let (syn_ts, zero) = syn.opts.timestamp.expect("timestamps offered");
    assert_eq!(zero, 0);
    let iss = syn.seq;

    h.send(
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(iss + 1)
            .mss(1400)
            .wscale(2)
            .sack_perm()
            .ts(500, syn_ts),
    );
    let ack = expect_ack(&mut h, iss + 1, P1);
    assert_eq!(ack.opts.timestamp.map(|t| t.1), Some(500));
    assert_eq!(
        h.events(),
        vec![Event::Connected {
            handle: c,
            cookie: 9
        }]
    );
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    let info = h.stack.tcp_info(c).unwrap();
    assert!(info.sack && info.timestamps);
    assert_eq!(info.wscale.map(|w| w.0), Some(2));
    assert_eq!(h.stack.counters().tcp_active_opens, 1);
}

/// Simultaneous open: SYN in SYN-SENT -> SYN-RECEIVED, SYN-ACK with original ISS, ESTABLISHED.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.5
//= type=test
#[test]
fn simultaneous_open_syn_received_with_original_iss() {
    let mut h = Harness::new(|_| {});
    let (c, syn) = connect(&mut h);
    let (lport, iss) = (syn.src_port, syn.seq);

    // Line 3 of Figure 7: the peer's SYN crosses ours.
    h.send(Seg::to(lport).syn().seq(PEER_ISS).mss(1400));
    let synack = h.expect_tcp();
    assert!(synack.is(Flags::SYN), "{synack:?}");
    assert_eq!((synack.seq, synack.ack), (iss, Some(P1)), "original ISS");
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynReceived));
    assert_eq!(h.events(), vec![]);

    // The peer acknowledges our SYN.
    h.send(Seg::to(lport).seq(P1).ack(iss + 1));
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    assert_eq!(
        h.events(),
        vec![Event::Connected {
            handle: c,
            cookie: 9
        }]
    );
    h.expect_silence();
}

/// Simultaneous open, Figure 7 line 6: the peer's SYN-ACK takes SYN-RECEIVED to ESTABLISHED.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.5
//= type=test
#[test]
fn simultaneous_open_peer_synack_establishes() {
    let mut h = Harness::new(|_| {});
    let (c, syn) = connect(&mut h);
    let (lport, iss) = (syn.src_port, syn.seq);
    h.send(Seg::to(lport).syn().seq(PEER_ISS));
    let synack = h.expect_tcp();
    assert_eq!((synack.seq, synack.ack), (iss, Some(P1)));
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynReceived));

    // Line 6: the peer, in SYN-RECEIVED too, sends its SYN-ACK. Its SYN
    // occupies only IRS (< RCV.NXT); trimmed off (§3.10.7.4: "trimming off
    // any portions that lie outside the window (including SYN and FIN)"),
    // what remains sits at RCV.NXT and its ACK of our SYN is acceptable.
    h.send(Seg::to(lport).syn().seq(PEER_ISS).ack(iss + 1));
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    assert_eq!(
        h.events(),
        vec![Event::Connected {
            handle: c,
            cookie: 9
        }]
    );
    // Whatever we answer, it is not a SYN or a RST.
    for o in h.out.drain(..) {
        let Out::Tcp(s) = o else { panic!("{o:?}") };
        assert!(!s.is(Flags::SYN) && !s.is(Flags::RST), "{s:?}");
    }
}

/// SYN-SENT: an ACK not acknowledging our SYN gets `<SEQ=SEG.ACK><CTL=RST>` and is dropped.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.3
//= type=test
#[test]
fn syn_sent_unacceptable_ack_gets_reset() {
    let mut h = Harness::new(|_| {});
    let (c, syn) = connect(&mut h);
    let (lport, iss) = (syn.src_port, syn.seq);

    // An ACK for something never sent (an old duplicate's reply).
    h.send(Seg::to(lport).seq(PEER_ISS).ack(iss + 1000));
    let rst = expect_rst(&mut h, iss + 1000);
    assert_eq!(rst.ack, None);
    // A SYN-ACK acknowledging the ISS itself (SEG.ACK =< ISS).
    h.send(Seg::to(lport).syn().seq(PEER_ISS).ack(iss));
    let rst = expect_rst(&mut h, iss);
    assert_eq!(rst.ack, None);
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpAckInvalid), 2);
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    assert_eq!(h.events(), vec![]);

    // The real SYN-ACK still completes the handshake.
    h.send(Seg::to(lport).syn().seq(PEER_ISS).ack(iss + 1));
    expect_ack(&mut h, iss + 1, P1);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
}

/// SYN-SENT: RST without (or with a bad) ACK ignored; with an acceptable ACK -> `Dead{Refused}`.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.3
//= type=test
#[test]
fn syn_sent_rst_handling() {
    let mut h = Harness::new(|_| {});
    let (c, syn) = connect(&mut h);
    let (lport, iss) = (syn.src_port, syn.seq);

    h.send(Seg::to(lport).rst().seq(0));
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    h.send(Seg::to(lport).rst().seq(0).ack(iss + 7));
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    assert_eq!(h.events(), vec![]);

    h.send(Seg::to(lport).rst().seq(0).ack(iss + 1));
    h.expect_silence();
    assert_eq!(
        h.events(),
        vec![Event::Dead {
            handle: c,
            cookie: 9,
            reason: DeadReason::Refused
        }]
    );
    assert_eq!(h.stack.counters().tcp_attempt_fails, 1);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Closed));
    h.stack.tcp_close(h.now, c).unwrap();
    assert_eq!(h.stack.tcp_state(c), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_connection_count(), 0);
}

/// The SYN is retransmitted at 1, 2, 4 s backoff, then `Dead{TimedOut}` after `syn_retries`.
//= https://www.rfc-editor.org/rfc/rfc6298#section-5
//= type=test
#[test]
fn syn_retransmitted_with_backoff_then_times_out() {
    let mut h = Harness::new(|c| c.tcp.syn_retries = 3);
    let (c, syn) = connect(&mut h);
    for wait in [1, 2, 4] {
        h.advance(secs(wait) - ms(1));
        h.expect_silence();
        h.advance(ms(1));
        let again = h.expect_tcp();
        assert!(again.is(Flags::SYN) && again.ack.is_none(), "{again:?}");
        assert_eq!(again.seq, syn.seq, "same ISS");
        h.expect_silence();
        assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    }
    h.advance(secs(8) - ms(1));
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    h.advance(ms(1));
    h.expect_silence();
    assert_eq!(
        h.events(),
        vec![Event::Dead {
            handle: c,
            cookie: 9,
            reason: DeadReason::TimedOut
        }]
    );
    let k = h.stack.counters();
    assert_eq!(
        (k.tcp_attempt_fails, k.tcp_timeouts, k.tcp_retrans_segs),
        (1, 3, 3)
    );
}

/// SYN-RECEIVED: a retransmitted SYN gets the same SYN-ACK again.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn syn_received_resends_synack_for_retransmitted_syn() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 1).unwrap();
    let iss = syn_from(&mut h, PEER_PORT, PEER_ISS);
    h.send(Seg::to(PORT).syn().seq(PEER_ISS));
    let again = h.expect_tcp();
    assert!(again.is(Flags::SYN), "{again:?}");
    assert_eq!((again.seq, again.ack), (iss, Some(P1)));
    h.expect_silence();
    assert_eq!(states(&h), vec![State::SynReceived]);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// SYN-RECEIVED: an unacceptable ACK gets `<SEQ=SEG.ACK><CTL=RST>`; the half-open survives.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn syn_received_unacceptable_ack_gets_reset() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 1).unwrap();
    let iss = syn_from(&mut h, PEER_PORT, PEER_ISS);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1000));
    let rst = expect_rst(&mut h, iss + 1000);
    assert_eq!(rst.ack, None);
    // SEG.ACK = SND.UNA does not acknowledge the SYN either.
    h.send(Seg::to(PORT).seq(P1).ack(iss));
    expect_rst(&mut h, iss);
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(states(&h), vec![State::SynReceived]);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// SYN-RECEIVED (passive): an acceptable RST returns it to LISTEN silently.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn syn_received_rst_returns_to_listen() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 1).unwrap();
    syn_from(&mut h, PEER_PORT, PEER_ISS);
    h.send(Seg::to(PORT).rst().seq(P1));
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_connection_count(), 0);

    let iss = syn_from(&mut h, PEER_PORT, PEER_ISS + 50_000);
    h.send(Seg::to(PORT).seq(PEER_ISS + 50_001).ack(iss + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// LISTEN: an ACK-bearing segment gets `<SEQ=SEG.ACK><CTL=RST>`; a RST is ignored.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.2
//= type=test
#[test]
fn listen_resets_acks_and_ignores_rsts() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 1).unwrap();

    h.send(Seg::to(PORT).seq(5000).ack(123_456));
    let rst = expect_rst(&mut h, 123_456);
    assert_eq!(rst.ack, None);
    h.send(Seg::to(PORT).syn().seq(5000).ack(777));
    let rst = expect_rst(&mut h, 777);
    assert_eq!(rst.ack, None);

    h.send(Seg::to(PORT).rst().seq(5000));
    h.send(Seg::to(PORT).rst().seq(5000).ack(1));
    h.expect_silence();
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.events(), vec![]);
}

/// CLOSED port: no ACK -> RST,ACK with ACK=SEG.SEQ+SEG.LEN; ACK -> RST SEQ=SEG.ACK; RST ignored.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.1
//= type=test
#[test]
fn closed_port_resets() {
    let mut h = Harness::new(|_| {});
    h.send(Seg::to(81).syn().seq(PEER_ISS));
    let rst = expect_rst(&mut h, 0);
    assert_eq!(rst.ack, Some(PEER_ISS + 1));
    assert_eq!((rst.src_port, rst.dst_port), (81, PEER_PORT));

    // Without ACK, SEG.LEN counts the data and the FIN.
    h.send(Seg::to(81).seq(100).data(b"abc"));
    assert_eq!(expect_rst(&mut h, 0).ack, Some(103));
    h.send(Seg::to(81).seq(200).data(b"abc").fin());
    assert_eq!(expect_rst(&mut h, 0).ack, Some(204));

    h.send(Seg::to(81).seq(7).ack(4242).data(b"x"));
    let rst = expect_rst(&mut h, 4242);
    assert_eq!(rst.ack, None);

    h.send(Seg::to(81).rst().seq(7));
    h.send(Seg::to(81).rst().seq(7).ack(9));
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_out_rsts, 4);
    assert_eq!(drops(&h, DropReason::TcpNoConnection), 6);
}

// ===== 2. Closing ========================================================

/// Active close: ESTABLISHED -> FIN-WAIT-1 -> FIN-WAIT-2 -> TIME-WAIT -> CLOSED after 2·MSL.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn active_close_through_time_wait() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (c, iss) = established(&mut h);
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    h.expect_silence();
    assert_eq!(states(&h), vec![State::FinWait1]);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 2));
    h.expect_silence();
    assert_eq!(states(&h), vec![State::FinWait2]);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin());
    expect_ack(&mut h, iss + 2, P1 + 1);
    h.expect_silence();
    assert_eq!(states(&h), vec![State::TimeWait]);
    // The application closed: no events at all.
    assert_eq!(h.events(), vec![]);

    h.advance(2 * MSL - ms(1));
    assert_eq!(states(&h), vec![State::TimeWait]);
    h.advance(ms(2));
    assert_eq!(h.stack.tcp_connection_count(), 0);
    h.expect_silence();
}

/// An outgoing connection may take a port still in TIME-WAIT once a second
/// has passed, with timestamps (Linux `tcp_tw_reuse`): the new SYN's TSval
/// is newer than any the old incarnation sent, so the peer (RFC 6191) and
/// PAWS tell them apart. Without a free port and before that second, the
/// connect fails with `NoPorts`.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn connect_reuses_a_time_wait_port_after_a_second() {
    let mut h = Harness::new(|c| {
        c.tcp.msl = Duration::from_secs(30);
        c.tcp.ephemeral_ports = (50_000, 50_000);
    });
    let (c, syn) = connect(&mut h);
    let iss = syn.seq;
    let (syn_ts, _) = syn.opts.timestamp.expect("timestamps offered");
    h.send(
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(iss + 1)
            .ts(500, syn_ts),
    );
    expect_ack(&mut h, iss + 1, P1);
    h.events();
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    h.send(
        Seg::to(syn.src_port)
            .seq(P1)
            .ack(iss + 2)
            .fin()
            .ts(501, syn_ts),
    );
    expect_ack(&mut h, iss + 2, P1 + 1);
    assert_eq!(states(&h), vec![State::TimeWait]);

    // The only port is in TIME-WAIT for 60 s: not yet.
    h.advance(ms(500));
    assert_eq!(
        h.stack
            .tcp_connect(h.now, 9, SocketAddrV4::new(PEER, PEER_PORT))
            .unwrap_err(),
        Error::NoPorts
    );
    // A second into TIME-WAIT: the port is taken over.
    h.advance(ms(600));
    let (c2, syn2) = connect(&mut h);
    assert_eq!(syn2.src_port, syn.src_port);
    let (ts2, _) = syn2.opts.timestamp.expect("timestamps");
    assert!(ts2.wrapping_sub(syn_ts) as i32 > 0, "newer TSval");
    assert_eq!(h.stack.tcp_state(c2), Ok(State::SynSent));
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
    assert_eq!(h.stack.tcp_connection_count(), 1);
}

/// A socket bound to its port takes over that port's TIME-WAIT tuple at
/// once when the old connection used timestamps (Linux's
/// `tcp_twsk_unique` for a bound socket: an FTP server's active-mode data
/// connection from port 20 to a client port used a moment before), its
/// first sequence number a window past the old connection's (Linux:
/// `tw_snd_nxt + 65535 + 2`); without timestamps the tuple stays taken.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn connect_from_a_bound_port_takes_over_its_time_wait_at_once() {
    for timestamps in [true, false] {
        let mut h = Harness::new(|c| c.tcp.msl = Duration::from_secs(30));
        let peer = SocketAddrV4::new(PEER, PEER_PORT);
        let c = h.stack.tcp_connect_from(h.now, 9, peer, 20).unwrap();
        h.drain();
        let syn = h.expect_tcp();
        let iss = syn.seq;
        let (syn_ts, _) = syn.opts.timestamp.expect("timestamps offered");
        let synack = Seg::to(20).syn().seq(PEER_ISS).ack(iss + 1);
        h.send(if timestamps {
            synack.ts(500, syn_ts)
        } else {
            synack
        });
        expect_ack(&mut h, iss + 1, P1);
        h.events();
        h.stack.tcp_close(h.now, c).unwrap();
        h.drain();
        expect_fin(&mut h, iss + 1, P1);
        let fin = Seg::to(20).seq(P1).ack(iss + 2).fin();
        h.send(if timestamps { fin.ts(501, syn_ts) } else { fin });
        expect_ack(&mut h, iss + 2, P1 + 1);
        assert_eq!(states(&h), vec![State::TimeWait]);
        h.advance(ms(10));
        let again = h.stack.tcp_connect_from(h.now, 10, peer, 20);
        if !timestamps {
            assert_eq!(again.unwrap_err(), Error::AddrInUse);
            assert_eq!(states(&h), vec![State::TimeWait]);
            continue;
        }
        let c2 = again.expect("the bound port's TIME-WAIT tuple taken over");
        h.drain();
        let syn2 = h.expect_tcp();
        assert!(syn2.is(Flags::SYN) && syn2.src_port == 20, "{syn2:?}");
        assert!(
            (syn2.seq - (iss + 2)) as i32 >= 65535,
            "new ISS {} not a window past the old connection's next sequence {}",
            syn2.seq,
            iss + 2
        );
        assert_eq!(h.stack.tcp_state(c2), Ok(State::SynSent));
        assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
        assert_eq!(h.stack.tcp_connection_count(), 1);
    }
}

/// The TIME-WAIT timeout (2·MSL) deletes the TCB and frees the tuple.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.8
//= type=test
#[test]
fn time_wait_timeout_deletes_tcb() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (c, iss) = established(&mut h);
    close_into_time_wait(&mut h, c, iss);
    h.advance(2 * MSL - ms(1));
    assert_eq!(states(&h), vec![State::TimeWait]);
    h.advance(ms(2));
    assert_eq!(states(&h), vec![]);
    // The tuple is free: a segment for it now finds no connection.
    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 2).data(b"late"));
    expect_rst(&mut h, iss + 2);
}

/// Passive close: FIN -> CLOSE-WAIT (`PeerClosed`), close -> LAST-ACK, ACK -> CLOSED.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn passive_close_through_last_ack() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).fin());
    expect_ack(&mut h, iss + 1, P1 + 1);
    assert_eq!(
        h.events(),
        vec![Event::PeerClosed {
            handle: c,
            cookie: 5
        }]
    );
    assert_eq!(h.stack.tcp_state(c), Ok(State::CloseWait));
    assert_eq!(h.stack.tcp_peer_closed(c), Ok(true));

    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1 + 1);
    assert_eq!(states(&h), vec![State::LastAck]);

    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 2));
    h.expect_silence();
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.events(), vec![]);
}

/// Simultaneous close: FIN-WAIT-1 -> CLOSING -> TIME-WAIT -> CLOSED after 2·MSL.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn simultaneous_close_through_closing() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (c, iss) = established(&mut h);
    h.stack.tcp_shutdown(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    assert_eq!(h.stack.tcp_state(c), Ok(State::FinWait1));

    // The peer's FIN does not acknowledge ours.
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).fin());
    expect_ack(&mut h, iss + 2, P1 + 1);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Closing));
    assert_eq!(
        h.events(),
        vec![Event::PeerClosed {
            handle: c,
            cookie: 5
        }]
    );

    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 2));
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::TimeWait));
    h.advance(2 * MSL + ms(1));
    assert_eq!(h.stack.tcp_state(c), Ok(State::Closed));
    assert_eq!(h.events(), vec![], "an orderly close raises no Dead");
    h.stack.tcp_close(h.now, c).unwrap();
    assert_eq!(h.stack.tcp_connection_count(), 0);
    h.expect_silence();
}

/// Half-close: after our shutdown, data the peer keeps sending is still received.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn half_close_we_shut_down_peer_keeps_sending() {
    let mut h = Harness::new(|c| c.tcp.delayed_ack = Duration::ZERO);
    let (c, iss) = established(&mut h);
    h.stack.tcp_shutdown(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    assert_eq!(
        h.stack.tcp_send(h.now, c, b"no".to_vec()),
        Err(Error::InvalidState)
    );
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2));
    assert_eq!(h.stack.tcp_state(c), Ok(State::FinWait2));

    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).data(b"more data"));
    expect_ack(&mut h, iss + 2, P1 + 9);
    assert_eq!(
        h.events(),
        vec![Event::Recv {
            handle: c,
            cookie: 5,
            readable: 9
        }]
    );
    let mut buf = [0u8; 32];
    let n = h.stack.tcp_read(h.now, c, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"more data");

    h.send(Seg::to(PORT).seq(P1 + 9).ack(iss + 2).fin());
    expect_ack(&mut h, iss + 2, P1 + 10);
    assert_eq!(
        h.events(),
        vec![Event::PeerClosed {
            handle: c,
            cookie: 5
        }]
    );
    assert_eq!(h.stack.tcp_state(c), Ok(State::TimeWait));
}

/// Half-close: after the peer's FIN (CLOSE-WAIT) we keep sending data.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn half_close_peer_shuts_down_we_keep_sending() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).fin());
    expect_ack(&mut h, iss + 1, P1 + 1);
    assert_eq!(
        h.events(),
        vec![Event::PeerClosed {
            handle: c,
            cookie: 5
        }]
    );

    assert_eq!(h.stack.tcp_send(h.now, c, b"response".to_vec()), Ok(8));
    h.drain();
    let d = h.expect_tcp();
    assert_eq!((d.seq, d.ack), (iss + 1, Some(P1 + 1)));
    assert_eq!(d.payload, b"response");
    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 9));
    let ev = h.events();
    assert!(
        matches!(ev[..], [Event::Sent { acked: 8, .. }]),
        "expected Sent of 8 bytes, got {ev:?}"
    );
    assert_eq!(h.stack.tcp_state(c), Ok(State::CloseWait));

    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 9, P1 + 1);
    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 10));
    assert_eq!(h.stack.tcp_connection_count(), 0);
}

/// TIME-WAIT re-ACKs a retransmitted FIN and restarts the 2·MSL timeout.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn time_wait_reacks_retransmitted_fin_and_restarts_timer() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (c, iss) = established(&mut h);
    close_into_time_wait(&mut h, c, iss);

    h.advance(ms(1500));
    h.expect_silence();
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin());
    expect_ack(&mut h, iss + 2, P1 + 1);
    h.expect_silence();

    // The first 2·MSL would have ended 500 ms from now.
    h.advance(ms(1500));
    assert_eq!(states(&h), vec![State::TimeWait]);
    h.advance(ms(499));
    assert_eq!(states(&h), vec![State::TimeWait]);
    h.advance(ms(2));
    assert_eq!(states(&h), vec![]);
}

/// TIME-WAIT ignores RST (RFC 1337 TW1, a documented deviation from RFC 9293 in tcb.rs).
//= https://www.rfc-editor.org/rfc/rfc1337#section-3
//= type=test
#[test]
fn rst_in_time_wait_is_ignored() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (c, iss) = established(&mut h);
    close_into_time_wait(&mut h, c, iss);
    let ignored = drops(&h, DropReason::TcpIgnored);

    h.send(Seg::to(PORT).rst().seq(P1 + 1));
    h.send(Seg::to(PORT).rst().seq(P1 + 1).ack(iss + 2));
    h.expect_silence();
    assert_eq!(states(&h), vec![State::TimeWait]);
    assert_eq!(drops(&h, DropReason::TcpIgnored), ignored + 2);
    assert_eq!(h.stack.counters().tcp_in_rsts, 0);

    h.advance(2 * MSL + ms(1));
    assert_eq!(states(&h), vec![]);
}

/// A SYN with a greater TSval recycles a TIME-WAIT tuple (counted) with a larger ISS.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn time_wait_recycled_by_syn_with_greater_timestamp() {
    let mut h = Harness::new(|c| c.tcp.msl = Duration::from_secs(30));
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    let fin = expect_fin(&mut h, iss + 1, P1);
    let our_ts = fin.opts.timestamp.unwrap().0;
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin().ts(200, our_ts));
    expect_ack(&mut h, iss + 2, P1 + 1);
    assert_eq!(states(&h), vec![State::TimeWait]);

    h.advance(ms(100));
    let new_isn = PEER_ISS + 100_000;
    h.send(Seg::to(PORT).syn().seq(new_isn).ts(300, 0));
    let synack = h.expect_tcp();
    assert!(synack.is(Flags::SYN), "{synack:?}");
    assert_eq!(synack.ack, Some(new_isn + 1));
    assert!(
        synack.seq.wrapping_sub(iss + 2) as i32 > 0,
        "new ISS {} is not beyond the old SND.NXT {}",
        synack.seq,
        iss + 2
    );
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
    assert_eq!(states(&h), vec![State::SynReceived]);

    h.send(
        Seg::to(PORT)
            .seq(new_isn + 1)
            .ack(synack.seq + 1)
            .ts(301, synack.opts.timestamp.unwrap().0),
    );
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// Without timestamps only a SYN beyond the old RCV.NXT recycles a TIME-WAIT tuple.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn time_wait_recycled_by_syn_with_greater_sequence() {
    let mut h = Harness::new(|c| c.tcp.msl = Duration::from_secs(30));
    let (c, iss) = established(&mut h);
    close_into_time_wait(&mut h, c, iss);

    // An old duplicate SYN of the previous incarnation.
    h.send(Seg::to(PORT).syn().seq(PEER_ISS));
    for o in h.out.drain(..) {
        let Out::Tcp(s) = o else { panic!("{o:?}") };
        assert!(
            !s.is(Flags::SYN),
            "no new incarnation from an old SYN: {s:?}"
        );
    }
    assert_eq!(states(&h), vec![State::TimeWait]);
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 0);

    let new_isn = P1 + 1 + 10_000;
    let new_iss = syn_from(&mut h, PEER_PORT, new_isn);
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
    assert_eq!(states(&h), vec![State::SynReceived]);
    h.send(Seg::to(PORT).seq(new_isn + 1).ack(new_iss + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// RFC 6191 rule 2: equal TSval and greater sequence number must recycle TIME-WAIT.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn time_wait_recycled_by_equal_timestamp_and_greater_sequence() {
    let mut h = Harness::new(|c| c.tcp.msl = Duration::from_secs(30));
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    let fin = expect_fin(&mut h, iss + 1, P1);
    let our_ts = fin.opts.timestamp.unwrap().0;
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin().ts(200, our_ts));
    expect_ack(&mut h, iss + 2, P1 + 1);

    // TS.Recent is 200 (from the FIN); the new SYN repeats it, with a
    // sequence number beyond anything seen (RCV.NXT is P1 + 1).
    let new_isn = P1 + 1 + 10_000;
    h.send(Seg::to(PORT).syn().seq(new_isn).ts(200, 0));
    let synack = h.expect_tcp();
    assert!(
        synack.is(Flags::SYN) && synack.ack == Some(new_isn + 1),
        "expected a SYN-ACK for the new incarnation, got {synack:?}"
    );
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
}

/// RFC 6191 rule 3: a SYN without timestamps (old incarnation had them) must recycle.
//= https://www.rfc-editor.org/rfc/rfc6191#section-2
//= type=test
#[test]
fn time_wait_recycled_by_syn_without_timestamp() {
    let mut h = Harness::new(|c| c.tcp.msl = Duration::from_secs(30));
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    let fin = expect_fin(&mut h, iss + 1, P1);
    let our_ts = fin.opts.timestamp.unwrap().0;
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin().ts(200, our_ts));
    expect_ack(&mut h, iss + 2, P1 + 1);

    // No TSopt: the new incarnation will not use timestamps. The rule does
    // not depend on the sequence number, so pick one below the old RCV.NXT.
    let new_isn = PEER_ISS - 500_000;
    h.send(Seg::to(PORT).syn().seq(new_isn));
    let synack = h.expect_tcp();
    assert!(
        synack.is(Flags::SYN) && synack.ack == Some(new_isn + 1),
        "expected a SYN-ACK for the new incarnation, got {synack:?}"
    );
    assert_eq!(h.stack.counters().tcp_timewait_recycled, 1);
}

/// `tcp_close` with unread received data sends RST instead of FIN.
//= https://www.rfc-editor.org/rfc/rfc2525#section-2.17
//= type=test
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.4
//= type=test
#[test]
fn close_with_unread_data_sends_rst() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(b"unread"));
    assert!(matches!(h.events()[..], [Event::Recv { readable: 6, .. }]));
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    let rst = expect_rst(&mut h, iss + 1);
    assert!(!rst.is(Flags::FIN));
    h.expect_silence();
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.counters().tcp_estab_resets, 1);
}

/// `tcp_abort` sends `<SEQ=SND.NXT><CTL=RST>` at once, raises no event, forgets the TCB.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.5
//= type=test
#[test]
fn abort_sends_rst() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    assert_eq!(h.stack.tcp_send(h.now, c, b"hello".to_vec()), Ok(5));
    h.drain();
    let d = h.expect_tcp();
    assert_eq!((d.seq, d.payload.len()), (iss + 1, 5));

    h.stack.tcp_abort(h.now, c).unwrap();
    h.drain();
    expect_rst(&mut h, iss + 6);
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.stack.tcp_state(c), Err(Error::InvalidHandle));
    assert_eq!(h.stack.counters().tcp_out_rsts, 1);
    // Nothing is retransmitted afterwards.
    h.advance(secs(5));
    h.expect_silence();
}

/// A stopping stack aborts every connection, a bounded number per call: a
/// RST for the synchronized one, none for the one still in SYN-SENT, no
/// events, nothing held afterwards.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.5
//= type=test
#[test]
fn abort_all_resets_every_connection_in_bounded_rounds() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    let (c2, _syn) = connect(&mut h);
    assert_eq!(h.stack.tcp_state(c2), Ok(State::SynSent));
    assert_eq!(h.stack.tcp_abort_all(h.now, 1), (1, 1));
    assert_eq!(h.stack.tcp_abort_all(h.now, 1), (1, 0));
    assert_eq!(h.stack.tcp_abort_all(h.now, 1), (0, 0));
    h.drain();
    expect_rst(&mut h, iss + 1);
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.stack.tcp_state(c), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_state(c2), Err(Error::InvalidHandle));
    h.advance(secs(5));
    h.expect_silence();
}

/// Closing a knocked, never-accepted connection rejects it with RST and frees its place.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.5
//= type=test
#[test]
fn close_of_unaccepted_knock_rejects_with_rst() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, Some(1), 1).unwrap();
    let iss = syn_from(&mut h, 40_000, PEER_ISS);
    h.send(from(40_000).seq(P1).ack(iss + 1));
    let ev = h.events();
    let [Event::Knock { handle, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    h.stack.tcp_close(h.now, handle).unwrap();
    h.drain();
    let rst = expect_rst(&mut h, iss + 1);
    assert_eq!(rst.dst_port, 40_000);
    h.expect_silence();
    assert_eq!(h.stack.tcp_connection_count(), 0);
    assert_eq!(h.events(), vec![]);

    // The accept queue (backlog 1) has room again.
    let iss2 = syn_from(&mut h, 40_001, PEER_ISS);
    h.send(from(40_001).seq(P1).ack(iss2 + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
}

/// FIN-WAIT-2 ends after `fin_wait2_timeout` once the application has closed.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn fin_wait2_times_out_after_app_close() {
    let mut h = Harness::new(|c| c.tcp.fin_wait2_timeout = secs(5));
    let (c, iss) = established(&mut h);
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2));
    assert_eq!(states(&h), vec![State::FinWait2]);

    h.advance(secs(5) - ms(1));
    assert_eq!(states(&h), vec![State::FinWait2]);
    h.advance(ms(2));
    assert_eq!(states(&h), vec![]);
    // A late FIN finds no connection.
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin());
    expect_rst(&mut h, iss + 2);
}

/// After a mere shutdown FIN-WAIT-2 waits; a later close starts `fin_wait2_timeout`.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.6
//= type=test
#[test]
fn fin_wait2_waits_after_shutdown_until_close() {
    let mut h = Harness::new(|c| c.tcp.fin_wait2_timeout = secs(5));
    let (c, iss) = established(&mut h);
    h.stack.tcp_shutdown(h.now, c).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2));
    assert_eq!(h.stack.tcp_state(c), Ok(State::FinWait2));
    h.advance(secs(20));
    assert_eq!(h.stack.tcp_state(c), Ok(State::FinWait2));

    h.stack.tcp_close(h.now, c).unwrap();
    h.advance(secs(5) - ms(1));
    assert_eq!(states(&h), vec![State::FinWait2]);
    h.advance(ms(2));
    assert_eq!(states(&h), vec![]);
    h.expect_silence();
}

// ===== 3. RFC 5961 =======================================================

/// A RST exactly at RCV.NXT resets: `Dead{Reset}` and `tcp_estab_resets`.
//= https://www.rfc-editor.org/rfc/rfc5961#section-3.2
//= type=test
#[test]
fn rst_at_rcv_nxt_resets() {
    let mut h = Harness::new(|_| {});
    let (c, _iss) = established(&mut h);
    h.send(Seg::to(PORT).rst().seq(P1));
    h.expect_silence();
    assert_eq!(
        h.events(),
        vec![Event::Dead {
            handle: c,
            cookie: 5,
            reason: DeadReason::Reset
        }]
    );
    let k = h.stack.counters();
    assert_eq!((k.tcp_estab_resets, k.tcp_in_rsts), (1, 1));
    assert_eq!(h.stack.tcp_state(c), Ok(State::Closed));
    h.stack.tcp_close(h.now, c).unwrap();
    assert_eq!(h.stack.tcp_state(c), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_connection_count(), 0);
    h.expect_silence();
}

/// A RST in the window but not at RCV.NXT draws a challenge ACK; nothing changes.
//= https://www.rfc-editor.org/rfc/rfc5961#section-3.2
//= type=test
#[test]
fn rst_in_window_gets_challenge_ack() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).rst().seq(P1 + 100));
    expect_ack(&mut h, iss + 1, P1);
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_challenge_acks, 1);
    assert_eq!(drops(&h, DropReason::TcpRstInvalid), 1);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    assert_eq!(h.events(), vec![]);

    // A peer that really lost the connection answers with RST at SEG.ACK.
    h.send(Seg::to(PORT).rst().seq(P1));
    assert!(matches!(
        h.events()[..],
        [Event::Dead {
            reason: DeadReason::Reset,
            ..
        }]
    ));
}

/// A RST outside the receive window is dropped silently.
//= https://www.rfc-editor.org/rfc/rfc5961#section-3.2
//= type=test
#[test]
fn rst_outside_window_is_dropped() {
    let mut h = Harness::new(|_| {});
    let (c, _iss) = established(&mut h);
    // The window is [RCV.NXT, RCV.NXT + 65535).
    h.send(Seg::to(PORT).rst().seq(P1 + 65_536));
    h.send(Seg::to(PORT).rst().seq(P1 + 1_000_000));
    h.send(Seg::to(PORT).rst().seq(P1 - 1));
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpOutOfWindow), 3);
    assert_eq!(h.stack.counters().tcp_challenge_acks, 0);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    assert_eq!(h.events(), vec![]);
}

/// A RST at exactly RCV.NXT + RCV.WND is outside the window: dropped, not challenged.
//= https://www.rfc-editor.org/rfc/rfc5961#section-3.2
//= type=test
#[test]
fn rst_at_right_window_edge_is_dropped_silently() {
    let mut h = Harness::new(|_| {});
    let (c, _iss) = established(&mut h);
    // RCV.WND is 65535: the window is [P1, P1 + 65535), RFC 5961 §3.2 (1).
    h.send(Seg::to(PORT).rst().seq(P1 + 65_535));
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpOutOfWindow), 1);
    assert_eq!(h.stack.counters().tcp_challenge_acks, 0);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
}

/// A SYN in ESTABLISHED draws a challenge ACK whatever its sequence number.
//= https://www.rfc-editor.org/rfc/rfc5961#section-4.2
//= type=test
#[test]
fn syn_in_established_gets_challenge_ack() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).syn().seq(P1 + 1000));
    expect_ack(&mut h, iss + 1, P1);
    assert_eq!(h.stack.counters().tcp_challenge_acks, 1);
    assert_eq!(drops(&h, DropReason::TcpSynInvalid), 1);

    // Whatever its sequence number (RFC 5961 §4.2), a SYN draws a
    // challenge ACK, as limited (§7): within 500 ms, none. Until
    // 2026-12-01 one out of the window was answered every time.
    h.send(Seg::to(PORT).syn().seq(PEER_ISS.wrapping_add(0x4000_0000)));
    h.send(Seg::to(PORT).syn().seq(PEER_ISS));
    h.expect_silence();
    let k = h.stack.counters();
    assert_eq!((k.tcp_challenge_acks, k.tcp_challenge_acks_limited), (1, 2));
    h.advance(ms(600));
    h.send(Seg::to(PORT).syn().seq(PEER_ISS.wrapping_add(0x4000_0000)));
    expect_ack(&mut h, iss + 1, P1);
    assert_eq!(h.stack.counters().tcp_challenge_acks, 2);
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    assert_eq!(h.events(), vec![]);

    // Still fully working.
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(b"ok"));
    assert!(matches!(h.events()[..], [Event::Recv { readable: 2, .. }]));
}

/// Challenge ACKs are rate-limited per connection (one per 500 ms, as
/// Linux) besides the stack-wide budget; suppressed ones are counted.
//= https://www.rfc-editor.org/rfc/rfc5961#section-7
//= type=test
#[test]
fn challenge_acks_are_rate_limited() {
    let mut h = Harness::new(|_| {});
    let (_c, iss) = established(&mut h);
    h.send(Seg::to(PORT).rst().seq(P1 + 10));
    expect_ack(&mut h, iss + 1, P1);
    h.send(Seg::to(PORT).syn().seq(P1 + 20));
    h.expect_silence();
    let k = h.stack.counters();
    assert_eq!((k.tcp_challenge_acks, k.tcp_challenge_acks_limited), (1, 1));

    h.advance(ms(600));
    h.send(Seg::to(PORT).rst().seq(P1 + 40));
    expect_ack(&mut h, iss + 1, P1);
    assert_eq!(h.stack.counters().tcp_challenge_acks, 2);
}

/// An ACK of data never sent (SEG.ACK > SND.NXT): send an ACK, drop the segment.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn ack_of_unsent_data_is_acked_and_dropped() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1000).data(b"xyz"));
    expect_ack(&mut h, iss + 1, P1);
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpAckInvalid), 1);
    assert_eq!(h.stack.tcp_readable(c), Ok(0));
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
}

/// An ACK below SND.UNA - MAX.SND.WND is dropped with an ACK.
//= https://www.rfc-editor.org/rfc/rfc5961#section-5.2
//= type=test
#[test]
fn ack_too_old_is_dropped_with_ack() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    // MAX.SND.WND is 65535 (the peer's unscaled window).
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1 - 70_000).data(b"old"));
    expect_ack(&mut h, iss + 1, P1);
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpAckInvalid), 1);
    assert_eq!(h.stack.tcp_readable(c), Ok(0));

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1 - 60_000).data(b"new"));
    assert_eq!(h.stack.tcp_readable(c), Ok(3));
    assert_eq!(drops(&h, DropReason::TcpAckInvalid), 1);
}

// ===== 4. Sequence acceptability =========================================

/// Data beyond the receive window: ACK and drop (`tcp_out_of_window`).
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn out_of_window_data_is_acked_and_dropped() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    // RCV.WND is 65535: [P1, P1 + 65535) is acceptable.
    h.send(Seg::to(PORT).seq(P1 + 70_000).ack(iss + 1).data(b"far"));
    expect_ack(&mut h, iss + 1, P1);
    h.send(Seg::to(PORT).seq(P1 + 65_535).ack(iss + 1).data(b"edge"));
    expect_ack(&mut h, iss + 1, P1);
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpOutOfWindow), 2);
    assert_eq!(h.stack.counters().tcp_ooo_segments, 0);

    // The last byte of the window is acceptable (queued out of order).
    h.send(Seg::to(PORT).seq(P1 + 65_534).ack(iss + 1).data(b"z"));
    expect_ack(&mut h, iss + 1, P1);
    assert_eq!(h.stack.counters().tcp_ooo_segments, 1);
    assert_eq!(drops(&h, DropReason::TcpOutOfWindow), 2);
    assert_eq!(h.stack.tcp_readable(c), Ok(0));
}

/// Old duplicate data: ACK and drop (`tcp_duplicate`); only new parts are taken.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn old_duplicate_data_is_acked() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = established(&mut h);
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(b"hello"));
    h.advance(ms(40));
    expect_ack(&mut h, iss + 1, P1 + 5);
    assert!(matches!(h.events()[..], [Event::Recv { readable: 5, .. }]));

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(b"hello"));
    expect_ack(&mut h, iss + 1, P1 + 5);
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpDuplicate), 1);
    assert_eq!(h.stack.tcp_readable(c), Ok(5));

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(b"hello world"));
    assert_eq!(h.stack.tcp_readable(c), Ok(11));
    let mut buf = [0u8; 16];
    let n = h.stack.tcp_read(h.now, c, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello world");
}

/// With a zero window only SEG.SEQ = RCV.NXT is acceptable (its ACK and RST processed).
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn zero_window_accepts_only_rcv_nxt() {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 2048);
    let (c, iss) = established(&mut h);
    // Fill the 2048-byte window; the application reads nothing.
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).data(&[1; 1024]));
    h.send(Seg::to(PORT).seq(P1 + 1024).ack(iss + 1).data(&[2; 1024]));
    let full = P1 + 2048;
    let ack = expect_ack(&mut h, iss + 1, full);
    assert_eq!(ack.win, 0);
    h.events();
    // Something of ours in flight, for the peer to acknowledge.
    assert_eq!(h.stack.tcp_send(h.now, c, b"ping".to_vec()), Ok(4));
    h.drain();
    assert_eq!(h.expect_tcp().payload, b"ping");

    // Beyond RCV.NXT: not acceptable, its ACK field is not looked at.
    h.send(Seg::to(PORT).seq(full + 1).ack(iss + 5).data(b"a"));
    assert_eq!(expect_ack(&mut h, iss + 5, full).win, 0);
    assert_eq!(drops(&h, DropReason::TcpOutOfWindow), 1);
    assert_eq!(h.stack.tcp_info(c).unwrap().unacked, 4);
    assert_eq!(h.events(), vec![]);
    // A zero-length segment below RCV.NXT is not acceptable either.
    h.send(Seg::to(PORT).seq(full - 1).ack(iss + 5));
    assert_eq!(expect_ack(&mut h, iss + 5, full).win, 0);
    assert_eq!(h.stack.tcp_info(c).unwrap().unacked, 4);

    // At RCV.NXT: the ACK is processed, the data is not accepted.
    h.send(Seg::to(PORT).seq(full).ack(iss + 5).data(b"b"));
    assert_eq!(expect_ack(&mut h, iss + 5, full).win, 0);
    assert_eq!(h.stack.tcp_info(c).unwrap().unacked, 0);
    assert!(matches!(h.events()[..], [Event::Sent { acked: 4, .. }]));
    assert_eq!(h.stack.tcp_readable(c), Ok(2048));

    // RSTs: beyond RCV.NXT dropped silently, at RCV.NXT accepted.
    h.send(Seg::to(PORT).rst().seq(full + 1));
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(c), Ok(State::Established));
    h.send(Seg::to(PORT).rst().seq(full));
    h.expect_silence();
    assert!(matches!(
        h.events()[..],
        [Event::Dead {
            reason: DeadReason::Reset,
            ..
        }]
    ));
}

// ===== 5. PAWS ===========================================================

/// PAWS: a TSval older than TS.Recent is dropped with an ACK (`tcp_paws`).
//= https://www.rfc-editor.org/rfc/rfc7323#section-5.3
//= type=test
#[test]
fn paws_drops_old_timestamp_with_ack() {
    let mut h = Harness::new(|_| {});
    // The handshake's last ACK carries TSval 100: TS.Recent = 100.
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(50, 0).data(b"stale"));
    let ack = expect_ack(&mut h, iss + 1, P1);
    assert_eq!(ack.opts.timestamp.map(|t| t.1), Some(100));
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpPaws), 1);
    assert_eq!(h.stack.tcp_readable(c), Ok(0));
    assert_eq!(h.events(), vec![]);

    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(101, 0).data(b"fresh"));
    assert_eq!(h.stack.tcp_readable(c), Ok(5));
    assert!(matches!(h.events()[..], [Event::Recv { readable: 5, .. }]));

    // RFC 7323 §5.2: a RST is acceptable whatever its timestamp.
    h.send(Seg::to(PORT).rst().seq(P1 + 5).ts(1, 0));
    assert!(matches!(
        h.events()[..],
        [Event::Dead {
            reason: DeadReason::Reset,
            ..
        }]
    ));
}

/// PAWS, a departure from RFC 7323 §5.3 R1 as Linux (`TCP_PAWS_WINDOW`):
/// a TSval one tick older than TS.Recent passes. A sender's clock may
/// tick between a retransmission and the reordered original it stood in
/// for; dropping the original when it fills the next hole turned the
/// sender's needless retransmission of *that* one into a needed one (no
/// D-SACK, no undo: Ixora received over a reordering path at 0.8x the
/// kernel's rate until 2026-12-01). Two ticks old is still dropped.
//= https://www.rfc-editor.org/rfc/rfc7323#section-5.3
//= type=test
#[test]
fn paws_lets_a_tsval_one_tick_old_through() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    // TS.Recent = 100 (the handshake's last ACK).
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(99, 0).data(b"late"));
    assert_eq!(drops(&h, DropReason::TcpPaws), 0);
    assert_eq!(h.stack.tcp_readable(c), Ok(4));
    // (TS.Recent stays 100: an older TSval never moves it.)
    h.send(
        Seg::to(PORT)
            .seq(P1 + 4)
            .ack(iss + 1)
            .ts(98, 0)
            .data(b"older"),
    );
    assert_eq!(drops(&h, DropReason::TcpPaws), 1);
    assert_eq!(h.stack.tcp_readable(c), Ok(4));
    // In TIME-WAIT none is allowed (as Linux's `tcp_paws_reject`): the
    // peer's FIN again, one tick old, is dropped.
    h.stack.tcp_read(h.now, c, &mut [0; 4]).unwrap();
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    h.out.clear();
    let fin = Seg::to(PORT).seq(P1 + 4).ack(iss + 2).fin();
    h.send(fin.clone().ts(100, 0));
    h.out.clear();
    assert_eq!(states(&h), vec![State::TimeWait]);
    h.advance(ms(100));
    h.send(fin.ts(99, 0));
    assert_eq!(drops(&h, DropReason::TcpPaws), 2);
    // Still answered (a FIN), and 2·MSL starts over (as Linux).
    expect_ack(&mut h, iss + 2, P1 + 5);
    h.advance(2 * MSL - ms(50));
    assert_eq!(states(&h), vec![State::TimeWait]);
}

/// PAWS, a departure from RFC 7323 §5.3 R1 as Linux
/// (`tcp_disordered_ack`): a pure duplicate ACK that the path put behind
/// a newer one is taken, TSval older or not, when it is at RCV.NXT,
/// acknowledges SND.UNA, leaves the window as it is and is within an
/// RTO's worth of ticks: its SACK blocks count. One that would change
/// the window, or is older than that, is dropped as before.
//= https://www.rfc-editor.org/rfc/rfc7323#section-5.3
//= type=test
#[test]
fn paws_takes_a_reordered_duplicate_ack() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0).sack_perm().mss(1000));
    // Four full segments (MSS 1000 less the timestamp option's 12).
    let m = 988;
    h.stack.tcp_send(h.now, c, vec![7; 4 * m as usize]).unwrap();
    h.drain();
    assert_eq!(h.out.len(), 4);
    h.out.clear();
    let una = iss + 1;
    let dupack = |ts: u32, sack: &[(u32, u32)]| {
        Seg::to(PORT)
            .seq(P1)
            .ack(una)
            .win(65535)
            .ts(ts, 0)
            .sack(sack)
    };
    // The newer duplicate ACK (TS.Recent = 105) SACKs the fourth segment.
    h.send(dupack(105, &[(una + 3 * m, una + 4 * m)]));
    // The older one (two ticks: more than PAWS_WINDOW), which SACKs the
    // second and third, comes after it:
    // taken, so only the first segment is missing and resent (the
    // second and third too, were it dropped: sent before the fourth,
    // SACKed, RACK would take them for lost).
    h.send(dupack(103, &[(una + m, una + 3 * m)]));
    assert_eq!(drops(&h, DropReason::TcpPaws), 0);
    // (Within the RTO: the first may go twice, fast and then timed out.)
    h.advance(Duration::from_millis(300));
    let mut resent: Vec<_> = std::iter::from_fn(|| h.out.pop_front())
        .filter_map(|o| match o {
            Out::Tcp(s) if !s.payload.is_empty() => Some((s.seq, s.payload.len())),
            _ => None,
        })
        .collect();
    resent.dedup();
    assert_eq!(resent, [(una, m as usize)]);
    // A duplicate ACK as old that would change the window, or one older
    // than an RTO's worth of ticks, is dropped.
    h.send(dupack(103, &[]).win(1000));
    assert_eq!(drops(&h, DropReason::TcpPaws), 1);
    h.send(dupack(105u32.wrapping_sub(200_000), &[]));
    assert_eq!(drops(&h, DropReason::TcpPaws), 2);
}

/// An unacceptable pure ACK (out of the window, or failing PAWS) is
/// answered with an ACK at most once per 500 ms per connection, the clock
/// challenge ACKs use too (as Linux's `tcp_oow_rate_limited` and
/// `last_oow_ack_time`): two ends that each find the other's ACKs
/// unacceptable — a middlebox that rewrote sequence numbers or timestamps
/// — would otherwise answer each other's answers for ever, at the rate of
/// the path. Data, a FIN or a SYN is answered every time. Until
/// 2026-12-01 every one was answered.
//= https://www.rfc-editor.org/rfc/rfc5961#section-7
//= type=test
#[test]
fn unacceptable_pure_acks_are_answered_once_per_500_ms() {
    let mut h = Harness::new(|_| {});
    let (_c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    let ahead = Seg::to(PORT).seq(P1 + 200_000).ack(iss + 1).ts(100, 0);
    h.send(ahead.clone());
    expect_ack(&mut h, iss + 1, P1);
    // A loop's next turn: not answered, counted.
    h.send(ahead.clone());
    h.expect_silence();
    // Nor one that fails PAWS (TSval far older than TS.Recent).
    let old = Seg::to(PORT)
        .seq(P1)
        .ack(iss + 1)
        .ts(100u32.wrapping_sub(200_000), 0);
    h.send(old.clone());
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_acks_skipped, 2);
    // Data out of the window, and a FIN, are answered all the same.
    h.send(ahead.clone().data(b"x"));
    expect_ack(&mut h, iss + 1, P1);
    h.send(ahead.clone().fin());
    expect_ack(&mut h, iss + 1, P1);
    // 500 ms on, one again.
    h.advance(ms(600));
    h.send(old);
    expect_ack(&mut h, iss + 1, P1);
    h.send(ahead);
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_acks_skipped, 3);
    assert_eq!(drops(&h, DropReason::TcpPaws), 2);
}

/// The leniencies of PAWS (a TSval one tick old, a reordered duplicate
/// ACK) apply only where Linux's `tcp_paws_discard` applies them: in
/// SYN-RECEIVED and TIME-WAIT its `tcp_paws_reject` allows neither (RFC
/// 7323 §5.3 R1 as written). The handshake's ACK one tick older than the
/// SYN is dropped; in TIME-WAIT a duplicate ACK that ESTABLISHED would
/// take as reordered is dropped.
//= https://www.rfc-editor.org/rfc/rfc7323#section-5.3
//= type=test
#[test]
fn paws_is_strict_in_syn_received_and_time_wait() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    h.stack.tcp_listen(PORT, None, 7).unwrap();
    h.send(Seg::to(PORT).syn().ts(100, 0));
    let synack = h.expect_tcp();
    let iss = synack.seq;
    let (val, _) = synack.opts.timestamp.expect("timestamps");
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(99, val));
    assert_eq!(drops(&h, DropReason::TcpPaws), 1);
    assert_eq!(h.events(), vec![]);
    h.out.clear();
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(100, val));
    let c = match h.events().as_slice() {
        [Event::Knock { handle, .. }] => *handle,
        other => panic!("expected one knock, got {other:?}"),
    };
    h.stack.tcp_accept(c, 5).unwrap();
    assert_eq!(drops(&h, DropReason::TcpPaws), 1);

    // Into TIME-WAIT, TS.Recent = 100.
    h.stack.tcp_close(h.now, c).unwrap();
    h.drain();
    h.out.clear();
    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).ts(100, 0).fin());
    expect_ack(&mut h, iss + 2, P1 + 1);
    assert_eq!(states(&h), vec![State::TimeWait]);
    // A duplicate ACK two ticks old, at RCV.NXT, acknowledging SND.UNA,
    // the same window: `disordered_ack` in ESTABLISHED; dropped here.
    h.send(Seg::to(PORT).seq(P1 + 1).ack(iss + 2).ts(98, 0));
    assert_eq!(drops(&h, DropReason::TcpPaws), 2);
}

/// Challenge ACKs and the replies to unacceptable pure ACKs are limited
/// by one clock per connection (Linux's `last_oow_ack_time` serves both):
/// either one sent holds back the other for 500 ms.
//= https://www.rfc-editor.org/rfc/rfc5961#section-7
//= type=test
#[test]
fn challenge_acks_and_out_of_window_replies_share_one_clock() {
    let mut h = Harness::new(|_| {});
    let (_c, iss) = established(&mut h);
    let ahead = Seg::to(PORT).seq(P1 + 200_000).ack(iss + 1);
    // A challenge ACK (a RST in the window, not at RCV.NXT) ...
    h.send(Seg::to(PORT).rst().seq(P1 + 10));
    expect_ack(&mut h, iss + 1, P1);
    // ... holds back the reply to a pure ACK out of the window.
    h.send(ahead.clone());
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_acks_skipped, 1);
    // And the other way round.
    h.advance(ms(600));
    h.send(ahead);
    expect_ack(&mut h, iss + 1, P1);
    h.send(Seg::to(PORT).rst().seq(P1 + 10));
    h.expect_silence();
    let k = h.stack.counters();
    assert_eq!((k.tcp_challenge_acks, k.tcp_challenge_acks_limited), (1, 1));
}

/// PAWS: after 24 days with no acceptable segment, TS.Recent is no longer
/// valid (RFC 7323 §5.5), and a segment with an older TSval is taken.
//= https://www.rfc-editor.org/rfc/rfc7323#section-5.5
//= type=test
#[test]
fn paws_forgets_ts_recent_after_24_days_idle() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    h.send(Seg::to(PORT).seq(P1).ack(iss + 1).ts(101, 0).data(b"one"));
    assert_eq!(h.stack.tcp_readable(c), Ok(3));
    h.events();
    // 23 days on, an older TSval is still a duplicate; that drop is no
    // acceptable segment, so two days later (25 idle) it is taken.
    for (days, readable) in [(23, 3), (2, 6)] {
        h.advance(Duration::from_secs(days * 24 * 3600));
        h.drain();
        let seg = Seg::to(PORT).seq(P1 + 3).ack(iss + 1).ts(50, 0);
        h.send(seg.data(b"two"));
        assert_eq!(drops(&h, DropReason::TcpPaws), 1, "after {days} more days");
        assert_eq!(
            h.stack.tcp_readable(c),
            Ok(readable),
            "after {days} more days"
        );
        h.drain();
    }
}

/// TS.Recent takes SEG.TSval only if SEG.TSval >= TS.Recent and SEG.SEQ =< Last.ACK.sent.
//= https://www.rfc-editor.org/rfc/rfc7323#section-4.3
//= type=test
#[test]
fn ts_recent_update_rule() {
    let mut h = Harness::new(|_| {});
    let (c, iss) = h.passive_open(PORT, |s| s.ts(10, 0));
    // A: at Last.ACK.sent — TS.Recent becomes 200; the ACK is delayed.
    h.send(
        Seg::to(PORT)
            .seq(P1)
            .ack(iss + 1)
            .ts(200, 0)
            .data(&[0; 1000]),
    );
    h.expect_silence();
    // B: beyond Last.ACK.sent — TS.Recent stays 200; a second full-sized
    // segment is ACKed at once.
    h.send(
        Seg::to(PORT)
            .seq(P1 + 1000)
            .ack(iss + 1)
            .ts(300, 0)
            .data(&[0; 1000]),
    );
    let ack = expect_ack(&mut h, iss + 1, P1 + 2000);
    assert_eq!(ack.opts.timestamp.map(|t| t.1), Some(200));

    // C: TSval 250 passes PAWS only because 300 was not recorded.
    h.send(
        Seg::to(PORT)
            .seq(P1 + 2000)
            .ack(iss + 1)
            .ts(250, 0)
            .data(&[0; 1000]),
    );
    assert_eq!(drops(&h, DropReason::TcpPaws), 0);
    h.advance(ms(40));
    let ack = expect_ack(&mut h, iss + 1, P1 + 3000);
    assert_eq!(ack.opts.timestamp.map(|t| t.1), Some(250));
    assert_eq!(h.stack.tcp_readable(c), Ok(3000));
}

// ===== 6. Listen queues ==================================================

/// SYN queue full: SYN cookie without state; a valid cookie ACK establishes (Knock).
//= https://www.rfc-editor.org/rfc/rfc4987#section-3.6
//= type=test
#[test]
fn syn_cookies_when_syn_queue_full() {
    let mut h = Harness::new(|c| c.tcp.syn_backlog = 1);
    h.stack.tcp_listen(PORT, None, 3).unwrap();
    syn_from(&mut h, 40_000, PEER_ISS);
    assert_eq!(h.stack.counters().tcp_syncookies_sent, 0);

    h.send(from(40_001).syn().seq(5_000_000).mss(1460));
    let synack = h.expect_tcp();
    assert!(
        synack.is(Flags::SYN) && synack.ack == Some(5_000_001),
        "{synack:?}"
    );
    assert_eq!(synack.dst_port, 40_001);
    assert_eq!(h.stack.counters().tcp_syncookies_sent, 1);
    assert_eq!(h.stack.tcp_connection_count(), 1, "no state for the cookie");

    h.send(from(40_001).seq(5_000_001).ack(synack.seq + 1));
    h.expect_silence();
    let ev = h.events();
    let [Event::Knock {
        handle,
        listener_cookie: 3,
        remote,
        ..
    }] = ev[..]
    else {
        panic!("expected a knock, got {ev:?}")
    };
    assert_eq!(remote.port(), 40_001);
    assert_eq!(h.stack.counters().tcp_syncookies_recv, 1);
    h.stack.tcp_accept(handle, 8).unwrap();
    assert_eq!(h.stack.tcp_state(handle), Ok(State::Established));
    assert_eq!(h.stack.tcp_info(handle).unwrap().mss, 1460);
    // And it carries data both ways.
    assert_eq!(h.stack.tcp_send(h.now, handle, b"hi".to_vec()), Ok(2));
    h.drain();
    let d = h.expect_tcp();
    assert_eq!((d.seq, d.ack), (synack.seq + 1, Some(5_000_001)));
}

/// With timestamps a SYN cookie restores window scaling and SACK.
//= https://www.rfc-editor.org/rfc/rfc4987#section-3.6
//= type=test
#[test]
fn syn_cookie_restores_options_through_timestamps() {
    let mut h = Harness::new(|c| c.tcp.syn_backlog = 1);
    h.stack.tcp_listen(PORT, None, 3).unwrap();
    syn_from(&mut h, 40_000, PEER_ISS);

    h.send(
        from(40_001)
            .syn()
            .seq(5_000_000)
            .mss(1460)
            .wscale(7)
            .sack_perm()
            .ts(1000, 0),
    );
    let synack = h.expect_tcp();
    assert_eq!(h.stack.counters().tcp_syncookies_sent, 1);
    assert!(synack.opts.window_scale.is_some() && synack.opts.sack_permitted);
    let (tsval, ecr) = synack.opts.timestamp.expect("timestamps");
    assert_eq!(ecr, 1000);

    h.send(
        from(40_001)
            .seq(5_000_001)
            .ack(synack.seq + 1)
            .ts(1001, tsval),
    );
    let ev = h.events();
    let [Event::Knock { handle, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    h.stack.tcp_accept(handle, 8).unwrap();
    let info = h.stack.tcp_info(handle).unwrap();
    assert!(info.sack && info.timestamps);
    assert_eq!(info.wscale.map(|w| w.0), Some(7));
    assert_eq!(info.mss, 1460 - 12);
}

/// A tampered SYN cookie gets `<SEQ=SEG.ACK><CTL=RST>` and creates nothing.
//= https://www.rfc-editor.org/rfc/rfc4987#section-3.6
//= type=test
#[test]
fn tampered_syn_cookie_is_reset() {
    let mut h = Harness::new(|c| c.tcp.syn_backlog = 1);
    h.stack.tcp_listen(PORT, None, 3).unwrap();
    syn_from(&mut h, 40_000, PEER_ISS);
    h.send(from(40_001).syn().seq(5_000_000));
    let cookie = h.expect_tcp().seq;

    let bad = (cookie ^ 0x0000_0100).wrapping_add(1);
    h.send(from(40_001).seq(5_000_001).ack(bad));
    let rst = expect_rst(&mut h, bad);
    assert_eq!(rst.ack, None);
    // The right cookie for a different client ISN fails too.
    h.send(from(40_001).seq(6_000_001).ack(cookie + 1));
    expect_rst(&mut h, cookie + 1);
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_syncookies_failed, 2);
    assert_eq!(h.stack.counters().tcp_syncookies_recv, 0);
    assert_eq!(drops(&h, DropReason::TcpBadCookie), 2);
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.tcp_connection_count(), 1);
}

/// Without SYN cookies a SYN beyond `syn_backlog` is dropped (`tcp_syn_queue_full`).
//= https://www.rfc-editor.org/rfc/rfc4987#section-3.2
//= type=test
#[test]
fn syn_dropped_when_syn_queue_full_without_cookies() {
    let mut h = Harness::new(|c| {
        c.tcp.syn_backlog = 1;
        c.tcp.syn_cookies = false;
    });
    h.stack.tcp_listen(PORT, None, 3).unwrap();
    let iss = syn_from(&mut h, 40_000, PEER_ISS);
    h.send(from(40_001).syn().seq(5_000_000));
    h.expect_silence();
    assert_eq!(drops(&h, DropReason::TcpSynQueueFull), 1);
    assert_eq!(h.stack.counters().tcp_syncookies_sent, 0);
    assert_eq!(h.stack.tcp_connection_count(), 1);

    h.send(from(40_000).seq(P1).ack(iss + 1));
    assert!(matches!(h.events()[..], [Event::Knock { .. }]));
    syn_from(&mut h, 40_001, 5_000_000);
}

/// Accept queue full: the final ACK of a handshake begun while there was
/// room is dropped (`tcp_listen_overflows`) until accept.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
//= type=test
#[test]
fn accept_queue_full_drops_final_ack_until_room() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, Some(1), 1).unwrap();
    let iss_a = syn_from(&mut h, 40_000, PEER_ISS);
    // B's SYN comes while the queue has room: it is answered.
    let iss_b = syn_from(&mut h, 40_001, PEER_ISS);
    h.send(from(40_000).seq(P1).ack(iss_a + 1));
    let ev = h.events();
    let [Event::Knock { handle: a, .. }] = ev[..] else {
        panic!("{ev:?}")
    };

    h.send(from(40_001).seq(P1).ack(iss_b + 1));
    h.expect_silence();
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.counters().tcp_listen_overflows, 1);
    assert_eq!(drops(&h, DropReason::TcpListenOverflow), 1);

    // Still half-open: the SYN-ACK is retransmitted, the peer re-ACKs.
    h.advance(secs(1));
    let again = h.expect_tcp();
    assert!(
        again.is(Flags::SYN) && again.dst_port == 40_001,
        "{again:?}"
    );
    assert_eq!(again.seq, iss_b);
    h.send(from(40_001).seq(P1).ack(iss_b + 1));
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.stack.counters().tcp_listen_overflows, 2);

    h.stack.tcp_accept(a, 1).unwrap();
    h.send(from(40_001).seq(P1).ack(iss_b + 1));
    let ev = h.events();
    let [Event::Knock { remote, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(remote.port(), 40_001);
}

/// Accept queue full: a new SYN is dropped, not answered, as Linux's
/// `tcp_conn_request` drops it (ListenOverflows), so the peer's connect
/// waits for its retransmission instead of completing into a queue with
/// no room; with room again, the retransmitted SYN is answered. Also with
/// SYN cookies on: no cookie is sent for a full accept queue.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.2
//= type=test
#[test]
fn accept_queue_full_drops_new_syns_until_room() {
    for cookies in [false, true] {
        let mut h = Harness::new(|c| {
            c.tcp.syn_cookies = cookies;
            c.tcp.syn_backlog = if cookies { 1 } else { 16 };
        });
        h.stack.tcp_listen(PORT, Some(1), 1).unwrap();
        if cookies {
            // A half-open connection fills the SYN queue: further SYNs
            // are answered with cookies (A's among them).
            syn_from(&mut h, 40_009, PEER_ISS);
        }
        let iss_a = syn_from(&mut h, 40_000, PEER_ISS);
        h.send(from(40_000).seq(P1).ack(iss_a + 1));
        let ev = h.events();
        let [Event::Knock { handle: a, .. }] = ev[..] else {
            panic!("{ev:?}")
        };

        h.send(from(40_001).syn().seq(5_000_000));
        h.expect_silence();
        assert_eq!(h.stack.counters().tcp_listen_overflows, 1);
        assert_eq!(drops(&h, DropReason::TcpListenOverflow), 1);
        // A's handshake took a cookie; B's SYN none.
        assert_eq!(h.stack.counters().tcp_syncookies_sent, u64::from(cookies));
        // No state kept for it: only A's connection (and the half-open).
        assert_eq!(h.stack.tcp_connection_count(), 1 + usize::from(cookies));

        h.stack.tcp_accept(a, 1).unwrap();
        // The peer's SYN again: answered now.
        let iss = syn_from(&mut h, 40_001, 5_000_000);
        h.send(from(40_001).seq(5_000_001).ack(iss + 1));
        let ev = h.events();
        let [Event::Knock { remote, .. }] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(remote.port(), 40_001);
    }
}

/// `tcp_unlisten` resets unaccepted connections and leaves accepted ones alone.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.4
//= type=test
#[test]
fn unlisten_resets_unaccepted_connections() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(PORT, None, 1).unwrap();
    // A: accepted.
    let iss_a = syn_from(&mut h, 40_000, PEER_ISS);
    h.send(from(40_000).seq(P1).ack(iss_a + 1));
    let [Event::Knock { handle: a, .. }] = h.events()[..] else {
        panic!()
    };
    h.stack.tcp_accept(a, 10).unwrap();
    // B: knocked, not accepted.
    let iss_b = syn_from(&mut h, 40_001, PEER_ISS);
    h.send(from(40_001).seq(P1).ack(iss_b + 1));
    let [Event::Knock { handle: b, .. }] = h.events()[..] else {
        panic!()
    };
    // C: half-open.
    let iss_c = syn_from(&mut h, 40_002, PEER_ISS);
    h.expect_silence();

    h.stack.tcp_unlisten(PORT).unwrap();
    h.drain();
    let out: Vec<Seg> = h
        .out
        .drain(..)
        .map(|o| match o {
            Out::Tcp(s) => s,
            other => panic!("{other:?}"),
        })
        .collect();
    let to = |p: u16| out.iter().filter(move |s| s.dst_port == p);
    assert_eq!(to(40_000).count(), 0, "accepted connection untouched");
    let rst_b: Vec<_> = to(40_001).collect();
    assert!(
        rst_b.len() == 1 && rst_b[0].is(Flags::RST) && rst_b[0].seq == iss_b + 1,
        "{rst_b:?}"
    );
    assert!(to(40_002).all(|s| s.is(Flags::RST)), "{out:?}");
    let ev = h.events();
    assert!(
        matches!(ev[..], [Event::Dead { handle, reason: DeadReason::Aborted, .. }] if handle == b),
        "expected Dead{{Aborted}} for the unaccepted connection, got {ev:?}"
    );
    h.stack.tcp_close(h.now, b).unwrap();
    assert_eq!(h.stack.tcp_state(a), Ok(State::Established));
    assert_eq!(h.stack.tcp_connection_count(), 1);

    // C's completing ACK and any new SYN find a closed port.
    h.send(from(40_002).seq(P1).ack(iss_c + 1));
    expect_rst(&mut h, iss_c + 1);
    h.send(from(40_003).syn().seq(PEER_ISS));
    assert_eq!(expect_rst(&mut h, 0).ack, Some(P1));
    assert_eq!(h.stack.tcp_unlisten(PORT), Err(Error::InvalidHandle));
}

// ===== 7. Handles ========================================================

/// A closed handle is stale at once and never reaches a newer connection in its slot.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.9.1.1
//= type=test
#[test]
fn stale_handles_are_rejected() {
    let mut h = Harness::new(|c| c.tcp.msl = MSL);
    let (old, iss) = established(&mut h);
    h.stack.tcp_close(h.now, old).unwrap();
    h.drain();
    expect_fin(&mut h, iss + 1, P1);
    assert_eq!(states(&h), vec![State::FinWait1]);
    assert_eq!(h.stack.tcp_state(old), Err(Error::InvalidHandle));
    assert_eq!(
        h.stack.tcp_send(h.now, old, b"x".to_vec()),
        Err(Error::InvalidHandle)
    );
    assert_eq!(h.stack.tcp_close(h.now, old), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_abort(h.now, old), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_shutdown(h.now, old), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_info(old).err(), Some(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_accept(old, 1), Err(Error::InvalidHandle));

    h.send(Seg::to(PORT).seq(P1).ack(iss + 2).fin());
    expect_ack(&mut h, iss + 2, P1 + 1);
    h.advance(2 * MSL + ms(1));
    assert_eq!(h.stack.tcp_connection_count(), 0);

    // Same tuple, same slot, new connection.
    let (new, new_iss) = established(&mut h);
    assert_eq!(new.index(), old.index(), "the slot is reused");
    assert_ne!(new, old);
    assert_eq!(h.stack.tcp_state(old), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_abort(h.now, old), Err(Error::InvalidHandle));
    assert_eq!(h.stack.tcp_close(h.now, old), Err(Error::InvalidHandle));
    h.drain();
    h.expect_silence();
    assert_eq!(h.stack.tcp_state(new), Ok(State::Established));
    assert_eq!(h.stack.tcp_send(h.now, new, b"x".to_vec()), Ok(1));
    h.drain();
    assert_eq!(h.expect_tcp().seq, new_iss + 1);
}

/// A socket bound before it connects sends from its port, inside the
/// ephemeral range or not; a second connection on the same 4-tuple is
/// refused while the first lives (RFC 9293 §3.4: a connection is named by
/// its pair of sockets), and a connection to another peer port from the
/// same local port is not.
#[test]
fn connect_from_a_bound_port_sends_from_it() {
    let mut h = Harness::new(|c| c.tcp.ephemeral_ports = (50_000, 50_010));
    let peer = SocketAddrV4::new(PEER, PEER_PORT);
    let c = h
        .stack
        .tcp_connect_from(h.now, 9, peer, 1023)
        .expect("connect");
    h.drain();
    let syn = h.expect_tcp();
    assert!(syn.is(Flags::SYN) && syn.src_port == 1023, "{syn:?}");
    assert_eq!(h.stack.tcp_state(c), Ok(State::SynSent));
    assert_eq!(
        h.stack.tcp_connect_from(h.now, 10, peer, 1023).unwrap_err(),
        Error::AddrInUse
    );
    let other = SocketAddrV4::new(PEER, PEER_PORT + 1);
    h.stack
        .tcp_connect_from(h.now, 11, other, 1023)
        .expect("another peer port");
    assert_eq!(
        h.stack.tcp_connect_from(h.now, 12, peer, 0).unwrap_err(),
        Error::InvalidArgument
    );
    assert_eq!(h.stack.tcp_connection_count(), 2);
}
