//! Scenario tests: TCP data transfer and timers — IX flow control, window
//! scaling, SWS avoidance, Nagle, delayed ACKs, SACK generation, the
//! retransmission timer, tail loss probes, fast retransmit and recovery,
//! zero-window probing, keepalive and the initial window.
//!
//! The test plays the peer (198.18.0.1) against the stack (198.18.0.2) in
//! virtual time. Sequence offsets below are relative to the first data byte
//! of each direction: `ours(c, n)` is our ISS + 1 + n, `theirs(n)` is the
//! peer's ISS + 1 + n.

mod common;
use common::*;
use ixora_core::wire::arp::Operation;
use ixora_core::wire::icmpv4::Icmpv4Repr;
use ixora_core::wire::tcp::Flags;
use ixora_core::{CcAlgorithm, ConnHandle, DeadReason, Duration, Event, State, TcpInfo};

/// Tolerance for timer expiries: the timing wheel rounds deadlines up to
/// its 16 µs tick.
const SLACK: Duration = Duration::from_millis(1);

/// An established connection, seen from the peer.
#[derive(Debug, Clone, Copy)]
struct Conn {
    h: ConnHandle,
    port: u16,
    /// The stack's ISS.
    iss: u32,
}

/// Our sequence number `n` bytes into our data stream.
fn ours(c: &Conn, n: u32) -> u32 {
    c.iss.wrapping_add(1).wrapping_add(n)
}

/// The peer's sequence number `n` bytes into its data stream.
fn theirs(n: u32) -> u32 {
    PEER_ISS.wrapping_add(1).wrapping_add(n)
}

/// The peer acknowledges `n` bytes of our data (window 65535 unless changed).
fn ack(c: &Conn, n: u32) -> Seg {
    Seg::to(c.port).seq(theirs(0)).ack(ours(c, n))
}

/// The peer sends `d` at offset `off` of its stream, acknowledging nothing
/// of ours beyond the SYN.
fn data(c: &Conn, off: u32, d: &[u8]) -> Seg {
    Seg::to(c.port).seq(theirs(off)).ack(ours(c, 0)).data(d)
}

/// Passive open on `port`: the peer's SYN is `syn` applied to a bare SYN,
/// the handshake's final ACK arrives `rtt` after our SYN-ACK (so the stack
/// takes an RTT sample of `rtt`) and carries window `win`.
fn open(h: &mut Harness, port: u16, rtt: Duration, win: u16, syn: impl FnOnce(Seg) -> Seg) -> Conn {
    h.stack.tcp_listen(port, None, 77).unwrap();
    h.send(syn(Seg::to(port).syn()));
    let synack = h.expect_tcp();
    assert!(synack.is(Flags::SYN), "{synack:?}");
    assert_eq!(synack.ack, Some(theirs(0)));
    h.advance(rtt);
    h.expect_silence();
    let mut a = Seg::to(port).seq(theirs(0)).ack(synack.seq + 1).win(win);
    if let Some((val, _)) = synack.opts.timestamp {
        a = a.ts(100, val);
    }
    h.send(a);
    let handle = match h.events().as_slice() {
        [Event::Knock { handle, .. }] => *handle,
        other => panic!("expected one knock, got {other:?}"),
    };
    h.stack.tcp_accept(handle, 5).unwrap();
    h.expect_silence();
    Conn {
        h: handle,
        port,
        iss: synack.seq,
    }
}

/// A plain connection: peer MSS 1460, no other options, RTT 100 ms.
fn open_plain(h: &mut Harness) -> Conn {
    open(h, 8080, Duration::from_millis(100), 65535, |s| s.mss(1460))
}

/// A connection with SACK agreed: peer MSS 1460, RTT 100 ms.
fn open_sack(h: &mut Harness) -> Conn {
    open(h, 8080, Duration::from_millis(100), 65535, |s| {
        s.mss(1460).sack_perm()
    })
}

/// Local port of a connection.
fn hc_port(h: &Harness, hc: ConnHandle) -> u16 {
    h.stack.tcp_addrs(hc).unwrap().0.port()
}

/// The peer's first data segment to `port`, acknowledging our SYN.
fn data_to(port: u16, iss: u32, d: &[u8]) -> Seg {
    Seg::to(port)
        .seq(theirs(0))
        .ack(iss.wrapping_add(1))
        .data(d)
}

/// The SACK blocks of segment `s`, as `(left, right)`.
fn sacks(s: &Seg) -> Vec<(u32, u32)> {
    s.opts
        .sacks()
        .iter()
        .map(|b| (b.left.0, b.right.0))
        .collect()
}

/// Everything the stack sent, as TCP segments.
fn segs(h: &mut Harness) -> Vec<Seg> {
    std::iter::from_fn(|| h.out.pop_front())
        .map(|o| match o {
            Out::Tcp(s) => s,
            other => panic!("expected TCP, got {other:?}"),
        })
        .collect()
}

/// Payload bytes in `s`.
fn bytes(s: &[Seg]) -> usize {
    s.iter().map(|s| s.payload.len()).sum()
}

/// `(seq, payload length)` of each segment, for assertion messages.
fn brief(s: &[Seg]) -> Vec<(u32, usize)> {
    s.iter().map(|s| (s.seq, s.payload.len())).collect()
}

/// The application offers `d`; whatever the stack then sends is collected.
fn app_send(h: &mut Harness, c: &Conn, d: Vec<u8>) -> usize {
    let n = h.stack.tcp_send(h.now, c.h, d).unwrap();
    h.drain();
    n
}

/// The peer answers the stack's ARP cache refreshes (the entry learned at
/// the start ages out after `arp_timeout`), so long idle periods keep the
/// link layer resolved.
fn answer_arp(h: &mut Harness) {
    while let Some(i) = h.out.iter().position(|o| matches!(o, Out::Arp(_))) {
        let Some(Out::Arp(a)) = h.out.remove(i) else {
            unreachable!()
        };
        assert_eq!((a.operation, a.target_ip), (Operation::Request, PEER));
        h.inject_arp(Operation::Reply, US);
        h.drain();
    }
}

/// Run timers until the stack sends something (other than an ARP refresh,
/// which the peer answers) or `limit` passes; returns how long that took
/// (`None`: nothing within `limit`).
fn run_until_output(h: &mut Harness, limit: Duration) -> Option<Duration> {
    let start = h.now;
    let end = start + limit;
    for _ in 0..1_000_000 {
        answer_arp(h);
        if !h.out.is_empty() {
            return Some(h.now - start);
        }
        match h.stack.poll_timeout() {
            Some(t) if t <= end => {
                h.now = h.now.max(t);
                h.stack.handle_timeout(h.now);
                h.drain();
            }
            _ => {
                h.now = end;
                h.stack.handle_timeout(end);
                h.drain();
                answer_arp(h);
                return (!h.out.is_empty()).then(|| h.now - start);
            }
        }
    }
    panic!("timers did not converge");
}

/// `got` is `want`, give or take a timer tick.
fn assert_close(got: Duration, want: Duration, what: &str) {
    assert!(
        got >= want.saturating_sub(SLACK) && got <= want + SLACK,
        "{what}: got {got:?}, want {want:?}"
    );
}

// ===== IX flow control ====================================================

/// IX: `tcp_send` takes only what the peer's window allows; `Sent` reports acked bytes and window.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6
//= type=test
#[test]
fn ix_send_accepts_only_what_the_window_allows() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(100), 4000, |s| {
        s.mss(1460)
    });
    assert_eq!(h.stack.tcp_send_space(c.h).unwrap(), 4000);
    // Offer more than the window: partial acceptance.
    assert_eq!(app_send(&mut h, &c, vec![7u8; 10_000]), 4000);
    // The window is full: nothing more is taken.
    assert_eq!(app_send(&mut h, &c, vec![8u8; 10]), 0);
    assert_eq!(h.stack.tcp_send_space(c.h).unwrap(), 0);
    let out = segs(&mut h);
    let lens: Vec<_> = out.iter().map(|s| s.payload.len()).collect();
    assert_eq!(lens, [1460, 1460, 1080]);
    assert_eq!(out[0].seq, ours(&c, 0));
    assert_eq!(out[2].seq, ours(&c, 2920));
    assert!(out.iter().all(|s| s.payload.iter().all(|&b| b == 7)));
    // The peer acknowledges part of it; the window slides.
    h.send(ack(&c, 2920).win(4000));
    assert_eq!(
        h.events(),
        [Event::Sent {
            handle: c.h,
            cookie: 5,
            acked: 2920,
            window: 2920
        }]
    );
    h.send(ack(&c, 4000).win(4000));
    assert_eq!(
        h.events(),
        [Event::Sent {
            handle: c.h,
            cookie: 5,
            acked: 1080,
            window: 4000
        }]
    );
    // The application offers the rest again.
    assert_eq!(app_send(&mut h, &c, vec![9u8; 6000]), 4000);
    assert_eq!(bytes(&segs(&mut h)), 4000);
}

/// A POSIX socket's send buffer (`send_beyond_window`, the socket
/// service): `tcp_send` takes what the send buffer has room for, beyond
/// the peer's window too; only the window's worth goes out, the rest as
/// acknowledgements open it, in order and whole, and a closed window is
/// probed meanwhile.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6
//= type=test
#[test]
fn a_socket_send_buffer_holds_what_waits_for_the_window() {
    let mut h = Harness::new(|c| {
        c.tcp.send_beyond_window = true;
        c.tcp.send_buffer = 16384;
        c.tcp.send_buffer_max = 16384;
    });
    let c = open(&mut h, 8080, Duration::from_millis(100), 4000, |s| {
        s.mss(1460)
    });
    assert_eq!(h.stack.tcp_send_space(c.h).unwrap(), 16384);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    // Beyond the window, up to the send buffer.
    assert_eq!(app_send(&mut h, &c, data.clone()), 16384);
    assert_eq!(h.stack.tcp_send_space(c.h).unwrap(), 0);
    let mut got = Vec::new();
    let out = segs(&mut h);
    // (The last 1,080 bytes of the window wait for more of it: sender
    // SWS avoidance, RFC 9293 §3.8.6.2.1, with more data queued.)
    assert_eq!(bytes(&out), 2920, "no more than the window goes out");
    got.extend(out.iter().flat_map(|s| s.payload.clone()));
    // A zero window: the rest waits, probed.
    h.send(ack(&c, 2920).win(0));
    h.advance(Duration::from_secs(1));
    let probes = segs(&mut h);
    assert!(
        !probes.is_empty() && bytes(&probes) <= probes.len(),
        "zero-window probes: {probes:?}"
    );
    // The window opens: the rest follows, in order.
    let mut acked = 2920u32;
    let mut rounds = 0;
    while got.len() < 16384 && rounds < 20 {
        h.send(ack(&c, acked).win(4000));
        for s in segs(&mut h) {
            let at = s.seq.wrapping_sub(ours(&c, 0)) as usize;
            if at == got.len() {
                got.extend(&s.payload);
            }
        }
        acked = got.len() as u32;
        rounds += 1;
    }
    assert_eq!(got, data[..16384], "the buffered bytes, whole and in order");
    // Room again for the rest once acknowledged.
    h.send(ack(&c, acked).win(4000));
    assert_eq!(app_send(&mut h, &c, data[16384..].to_vec()), 20_000 - 16384);
}

/// IX: data is read in place; the window shrinks while unread and re-opens on `tcp_recv_done`.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn ix_recv_in_place_window_reopens_after_recv_done() {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 16384);
    let c = open_plain(&mut h);
    let mut sent = Vec::new();
    let mut windows = Vec::new();
    for i in 0..6u32 {
        let d = vec![i as u8 + 1; 1460];
        h.send(data(&c, i * 1460, &d));
        sent.extend_from_slice(&d);
        // Every second full segment is acknowledged at once.
        if i % 2 == 1 {
            let a = h.expect_tcp();
            assert_eq!(a.ack, Some(theirs((i + 1) * 1460)));
            windows.push(a.win);
        }
        h.expect_silence();
    }
    assert_eq!(windows, [16384 - 2920, 16384 - 5840, 16384 - 8760]);
    assert_eq!(
        h.events(),
        [Event::Recv {
            handle: c.h,
            cookie: 5,
            readable: 8760
        }]
    );
    // Zero copy: one chunk per received frame, the bytes as sent.
    let chunks: Vec<Vec<u8>> = h
        .stack
        .tcp_recv_chunks(c.h)
        .unwrap()
        .map(|s| s.to_vec())
        .collect();
    assert_eq!(chunks.len(), 6);
    assert_eq!(chunks.concat(), sent);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().rcv_wnd, 16384 - 8760);
    // Releasing a little does not justify a window update by itself.
    h.stack.tcp_recv_done(h.now, c.h, 1000).unwrap();
    h.drain();
    h.expect_silence();
    assert_eq!(h.stack.tcp_readable(c.h).unwrap(), 7760);
    // The peer uses the window it was offered (three more segments)...
    for i in 6..9u32 {
        h.send(data(&c, i * 1460, &[i as u8 + 1; 1460]));
    }
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(11680)), 16384 - 11680));
    h.expect_silence();
    // ...and releasing the rest re-opens the whole window at once.
    h.stack.tcp_recv_done(h.now, c.h, 7760 + 4380).unwrap();
    h.drain();
    let upd = h.expect_tcp();
    assert_eq!(upd.ack, Some(theirs(13140)));
    assert_eq!(upd.win, 16384);
    assert!(upd.payload.is_empty());
    h.expect_silence();
}

/// A release that leaves the peer four or more segments of window is not
/// announced by a pure ACK: the peer is not held back, and the ACK of its
/// next segments carries the new edge.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn a_release_with_window_to_spare_waits_for_the_next_ack() {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 16384);
    let c = open_plain(&mut h);
    for i in 0..6u32 {
        h.send(data(&c, i * 1460, &[i as u8 + 1; 1460]));
    }
    let acks = segs(&mut h);
    assert_eq!(acks.last().map(|a| a.win), Some(16384 - 8760));
    // 7,624 bytes (five segments) of window left: the release is silent.
    h.stack.tcp_recv_done(h.now, c.h, 8760).unwrap();
    h.drain();
    h.expect_silence();
    assert_eq!(h.stack.tcp_info(c.h).unwrap().rcv_wnd, 16384 - 8760);
    // The peer's next two segments are acknowledged with the whole buffer
    // less what they hold.
    h.send(data(&c, 8760, &[7; 1460]));
    h.send(data(&c, 10220, &[8; 1460]));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(11680)), 16384 - 2920));
    h.expect_silence();
}

/// A window that grows while the peer still has most of what it was last
/// offered is not announced by a pure ACK: the first request of a
/// connection (a few bytes of the SYN-ACK's unscaled 64 KiB) read by the
/// application does not cost a segment when the window grows to the whole
/// buffer; the reply carries the new edge. Once the peer has used half its
/// window, a release of half the buffer is announced at once.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn a_window_the_peer_barely_used_grows_without_a_pure_ack() {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 256 * 1024);
    let c = open(&mut h, 8080, Duration::from_millis(100), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    h.send(data(&c, 0, b"GET / HTTP/1.1\r\n\r\n"));
    h.drain();
    h.expect_silence();
    h.stack.tcp_recv_done(h.now, c.h, 18).unwrap();
    h.drain();
    h.expect_silence();
    h.stack
        .tcp_send(h.now, c.h, b"HTTP/1.1 200 OK\r\n\r\n".to_vec())
        .unwrap();
    h.drain();
    let r = h.expect_tcp();
    assert_eq!(r.ack, Some(theirs(18)));
    assert!(!r.payload.is_empty());
    let wnd = h.stack.tcp_info(c.h).unwrap().rcv_wnd;
    assert!(
        wnd > 200 * 1024,
        "the reply carries the grown window: {wnd}"
    );
    h.expect_silence();
    // A peer that the window holds back (less than four segments left)
    // hears of a release of half the buffer at once.
    let mut seq = 18;
    while h.stack.tcp_info(c.h).unwrap().rcv_wnd >= 4 * 1460 {
        h.send(data(&c, seq, &[7; 1460]));
        seq += 1460;
    }
    h.drain();
    let _acks = segs(&mut h);
    h.stack
        .tcp_recv_done(h.now, c.h, (seq - 18) as usize)
        .unwrap();
    h.drain();
    let upd = h.expect_tcp();
    assert_eq!(upd.ack, Some(theirs(seq)));
    assert!(upd.payload.is_empty());
    h.expect_silence();
}

/// A connection with a 4096-byte receive buffer that the peer filled
/// (three segments, unread): the window is zero.
fn window_filled() -> (Harness, Conn) {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 4096);
    let c = open_plain(&mut h);
    h.send(data(&c, 0, &[1; 1460]));
    h.send(data(&c, 1460, &[2; 1460]));
    assert_eq!(h.expect_tcp().win, 4096 - 2920);
    h.send(data(&c, 2920, &[3; 1176]));
    h.advance(Duration::from_millis(40));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(4096)), 0));
    (h, c)
}

/// IX: unread data closes the window to zero until `tcp_recv_done` re-opens it.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn ix_unread_data_closes_window_until_recv_done() {
    let (mut h, c) = window_filled();
    // More data does not fit: acknowledged but not taken.
    h.send(data(&c, 4096, &[4; 100]));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(4096)), 0));
    assert_eq!(h.stack.tcp_readable(c.h).unwrap(), 4096);
    h.stack.tcp_recv_done(h.now, c.h, 4096).unwrap();
    h.drain();
    let upd = h.expect_tcp();
    assert_eq!((upd.ack, upd.win), (Some(theirs(4096)), 4096));
}

/// Bytes taken out to be held unread (`tcp_recv_hold`: their frames go
/// back) keep the window shut; `tcp_recv_release` opens it, as
/// `tcp_recv_done` would have; a close with held bytes unread resets the
/// connection (RFC 2525 §2.17), as with bytes unread in the stack.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn held_bytes_keep_the_window_shut_until_released() {
    let (mut h, c) = window_filled();
    // All of it taken out: nothing left to read in the stack, and the
    // window stays shut (no update; more data is not taken).
    h.stack.tcp_recv_hold(h.now, c.h, 4096).unwrap();
    assert_eq!(h.stack.tcp_readable(c.h).unwrap(), 0);
    h.drain();
    h.expect_silence();
    h.send(data(&c, 4096, &[4; 100]));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(4096)), 0));
    // Half released: the window opens by that much.
    h.stack.tcp_recv_release(h.now, c.h, 2048).unwrap();
    h.drain();
    let upd = h.expect_tcp();
    assert_eq!((upd.ack, upd.win), (Some(theirs(4096)), 2048));
    // Closed with the other half still held: reset.
    h.stack.tcp_close(h.now, c.h).unwrap();
    h.drain();
    let rst = h.expect_tcp();
    assert!(rst.is(Flags::RST), "{rst:?}");
}

// ===== window scaling =====================================================

/// RFC 7323 §2: negotiated shifts scale both directions; the SYN-ACK window is unscaled.
//= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
//= type=test
#[test]
fn window_scaling_negotiated_shift_used_both_ways() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(8080, None, 1).unwrap();
    h.send(Seg::to(8080).syn().mss(1460).wscale(2).win(1000));
    let synack = h.expect_tcp();
    // The shift offered is the one the receive buffer's auto-tuning limit
    // (6 MiB) needs: 7. The SYN-ACK window itself is never scaled.
    assert_eq!(synack.opts.window_scale, Some(7));
    assert_eq!(synack.win, 65535);
    h.send(Seg::to(8080).seq(theirs(0)).ack(synack.seq + 1).win(1000));
    let Event::Knock { handle, .. } = h.events()[0] else {
        panic!()
    };
    h.stack.tcp_accept(handle, 5).unwrap();
    let c = Conn {
        h: handle,
        port: 8080,
        iss: synack.seq,
    };
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.wscale, Some((2, 7)));
    // The peer's window field 1000 means 1000 << 2.
    assert_eq!(info.snd_wnd, 4000);
    assert_eq!(app_send(&mut h, &c, vec![0; 10_000]), 4000);
    assert_eq!(bytes(&segs(&mut h)), 4000);
    // Our window field is scaled down by our shift (rounded up).
    h.send(data(&c, 0, &[5; 1000]).ack(ours(&c, 4000)).win(1000));
    h.advance(Duration::from_millis(40));
    let a = h.expect_tcp();
    assert_eq!(a.win, (262_144u32 - 1000).div_ceil(128) as u16);
}

/// RFC 7323 §2.2: without the option in the peer's SYN, neither side scales.
//= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
//= type=test
#[test]
fn window_scaling_unused_without_peer_option() {
    let mut h = Harness::new(|_| {});
    h.stack.tcp_listen(8080, None, 1).unwrap();
    h.send(Seg::to(8080).syn().mss(1460));
    let synack = h.expect_tcp();
    assert_eq!(synack.opts.window_scale, None);
    assert_eq!(synack.win, 65535);
    h.send(Seg::to(8080).seq(theirs(0)).ack(synack.seq + 1).win(1000));
    let Event::Knock { handle, .. } = h.events()[0] else {
        panic!()
    };
    h.stack.tcp_accept(handle, 5).unwrap();
    let c = Conn {
        h: handle,
        port: 8080,
        iss: synack.seq,
    };
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.wscale, None);
    assert_eq!(info.snd_wnd, 1000);
    h.send(data(&c, 0, &[5; 1000]));
    h.advance(Duration::from_millis(40));
    // A 256 KiB buffer is advertised as the largest unscaled window.
    assert_eq!(h.expect_tcp().win, 65535);
}

/// RFC 7323 §2.2: an active open offers scaling and drops it if the SYN-ACK lacks the option.
//= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
//= type=test
#[test]
fn window_scaling_active_open_declined_by_peer() {
    let mut h = Harness::new(|_| {});
    let (hc, iss) = h.active_open(|syn| {
        assert_eq!(syn.opts.window_scale, Some(7));
        assert_eq!(syn.win, 65535);
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1460)
            .win(1000)
    });
    let a = h.expect_tcp();
    assert_eq!(a.win, 65535);
    let info = h.stack.tcp_info(hc).unwrap();
    assert_eq!(info.wscale, None);
    assert_eq!(info.snd_wnd, 1000);
    // Our ACK of the SYN-ACK and later windows stay unscaled.
    h.send(data_to(hc_port(&h, hc), iss, b"x").win(1000));
    h.advance(Duration::from_millis(40));
    assert_eq!(h.expect_tcp().win, 65535);
    assert_eq!(h.stack.tcp_info(hc).unwrap().snd_wnd, 1000);
}

/// RFC 7323 §2.3: after an active open our ACKs and the peer's windows use the shifts.
//= https://www.rfc-editor.org/rfc/rfc7323#section-2.3
//= type=test
#[test]
fn window_scaling_active_open_uses_negotiated_shift() {
    let mut h = Harness::new(|_| {});
    let (hc, iss) = h.active_open(|syn| {
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1460)
            .wscale(2)
            .win(1000)
    });
    let a = h.expect_tcp();
    assert_eq!(u32::from(a.win), 262_144 / 128);
    assert_eq!(h.stack.tcp_info(hc).unwrap().wscale, Some((2, 7)));
    let port = hc_port(&h, hc);
    h.send(Seg::to(port).seq(theirs(0)).ack(iss + 1).win(1000));
    assert_eq!(h.stack.tcp_info(hc).unwrap().snd_wnd, 4000);
}

/// RFC 7323 §2.2: the window of the SYN-ACK completing an active open must not be scaled.
//= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
//= type=test
#[test]
fn active_open_does_not_scale_the_syn_ack_window() {
    // RFC 7323 §2.2: "The window field in a segment where the SYN bit is set
    // (i.e., a <SYN> or <SYN,ACK>) MUST NOT be scaled." The SYN-ACK that
    // completes an active open advertises 1000 bytes, whatever its shift.
    let mut h = Harness::new(|_| {});
    let (hc, _) = h.active_open(|syn| {
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1460)
            .wscale(2)
            .win(1000)
    });
    h.expect_tcp();
    let info = h.stack.tcp_info(hc).unwrap();
    assert_eq!(info.snd_wnd, 1000, "SYN-ACK window must not be scaled");
    assert_eq!(h.stack.tcp_send_space(hc).unwrap(), 1000);
}

// ===== silly window syndrome, Nagle =======================================

/// RFC 1122 §4.2.3.3: the right edge moves only by at least min(RCV.BUFF/2, MSS).
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.3
//= type=test
#[test]
fn receiver_sws_avoidance() {
    let mut h = Harness::new(|c| c.tcp.recv_buffer = 8192);
    let c = open_plain(&mut h);
    let mut off = 0;
    for len in [1460u32, 1460, 1460, 1460, 1460, 892] {
        h.send(data(&c, off, &vec![1; len as usize]));
        off += len;
    }
    let wins: Vec<_> = segs(&mut h).iter().map(|s| s.win).collect();
    assert_eq!(wins, [8192 - 2920, 8192 - 5840, 0]);
    // The application frees less than an MSS: no window update...
    h.stack.tcp_recv_done(h.now, c.h, 1000).unwrap();
    h.drain();
    h.expect_silence();
    // ...and an ACK sent for another reason still offers zero.
    h.send(data(&c, 0, &[1; 1460]));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(8192)), 0));
    // A full MSS freed: the window opens (and the update goes out at once
    // because it was closed).
    h.stack.tcp_recv_done(h.now, c.h, 460).unwrap();
    h.drain();
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.win), (Some(theirs(8192)), 1460));
}

/// RFC 1122 §4.2.3.4: no window-limited segment below min(MSS, max window/2) is sent.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.4
//= type=test
#[test]
fn sender_sws_avoidance() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(100), 20_000, |s| {
        s.mss(1000)
    });
    assert_eq!(app_send(&mut h, &c, vec![3; 20_000]), 20_000);
    // Initial window: ten segments.
    assert_eq!(bytes(&segs(&mut h)), 10_000);
    // The peer acknowledges them but (discouragingly) shrinks its window
    // to 5500 bytes beyond: five full segments, then 500 bytes are held.
    h.send(ack(&c, 10_000).win(5500));
    let out = segs(&mut h);
    assert_eq!(out.len(), 5);
    assert!(out.iter().all(|s| s.payload.len() == 1000));
    h.send(ack(&c, 15_000).win(500));
    h.expect_silence();
    h.send(ack(&c, 15_000).win(800));
    h.expect_silence();
    // A window worth sending: full segments again.
    h.send(ack(&c, 15_000).win(5000));
    let out = segs(&mut h);
    assert_eq!(out.len(), 5);
    assert_eq!(out[0].seq, ours(&c, 15_000));
    assert!(out.iter().all(|s| s.payload.len() == 1000));
}

/// RFC 1122 §4.2.3.4: Nagle is off by default and on after
/// `tcp_set_nodelay(h, false)`, in Minshall's variant as Linux's: a small
/// segment waits while a small one sent before is unacknowledged.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.4
//= type=test
#[test]
fn nagle_off_by_default_and_on_with_set_nodelay_false() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    app_send(&mut h, &c, vec![1; 100]);
    app_send(&mut h, &c, vec![2; 100]);
    let out = segs(&mut h);
    assert_eq!(out.len(), 2, "Nagle must be off by default");
    h.send(ack(&c, 200));
    h.events();

    h.stack.tcp_set_nodelay(c.h, false).unwrap();
    app_send(&mut h, &c, vec![3; 100]);
    // Nothing in flight: the small segment goes.
    assert_eq!(segs(&mut h).len(), 1);
    app_send(&mut h, &c, vec![4; 100]);
    // Unacknowledged data in flight: the small segment is held.
    h.expect_silence();
    // A full segment is never held...
    app_send(&mut h, &c, vec![5; 2000]);
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 300), 1460));
    // ...and the tail goes once the small segment is acknowledged, the
    // full one still in flight (Minshall; Linux's `tcp_minshall_check`).
    h.send(ack(&c, 300));
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 1760), 640));
    // A reply of a full segment and a tail, no small segment before it
    // unacknowledged: the tail goes at once, not after the peer's
    // delayed ACK (until 2026-11-30 it waited: nginx after clearing
    // TCP_NODELAY).
    h.send(ack(&c, 2400));
    h.expect_silence();
    app_send(&mut h, &c, vec![6; 2000]);
    let out = segs(&mut h);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 2400), 1460));
    assert_eq!((out[1].seq, out[1].payload.len()), (ours(&c, 3860), 540));
    // That tail is small and unacknowledged: the next small write waits.
    app_send(&mut h, &c, vec![7; 10]);
    h.expect_silence();
    h.send(ack(&c, 4400));
    let out = segs(&mut h);
    assert_eq!((out.len(), out[0].payload.len()), (1, 10));
}

/// tcp(7) `TCP_CORK`: while corked, a partial segment waits — with data
/// in flight or not, Nagle off — and full segments go; uncorking sends
/// what waited at once; a segment left corked goes by itself one
/// retransmission timeout (at least 200 ms) after nothing is in flight,
/// as Linux's probe timer sends it; a FIN rides on the segment the cork
/// held.
#[test]
fn cork_holds_partial_segments_until_uncorked_or_its_ceiling() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    h.stack.tcp_set_cork(c.h, true).unwrap();
    app_send(&mut h, &c, vec![1; 100]);
    app_send(&mut h, &c, vec![2; 100]);
    h.expect_silence();
    // A full segment's worth goes, the tail waits (data in flight or not).
    app_send(&mut h, &c, vec![3; 1400]);
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 0), 1460));
    h.send(ack(&c, 1460));
    h.expect_silence();
    // Uncorked: the rest goes at once.
    h.stack.tcp_set_cork(c.h, false).unwrap();
    h.drain();
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 1460), 140));
    h.send(ack(&c, 1600));
    h.expect_silence();
    // Corked again and left so: the cork's ceiling sends it.
    h.stack.tcp_set_cork(c.h, true).unwrap();
    app_send(&mut h, &c, vec![4; 10]);
    h.expect_silence();
    let t = run_until_output(&mut h, Duration::from_secs(5)).expect("the cork's ceiling");
    let min = h.stack.config().tcp.rto_min;
    assert!(
        t >= min.saturating_sub(SLACK) && t <= Duration::from_secs(1) + SLACK,
        "the cork's ceiling after {t:?}"
    );
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 1600), 10));
    h.send(ack(&c, 1610));
    h.expect_silence();
    // Still corked: the next partial segment waits again, and a FIN
    // rides on it.
    app_send(&mut h, &c, vec![5; 10]);
    h.expect_silence();
    h.stack.tcp_shutdown(h.now, c.h).unwrap();
    h.drain();
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 1610), 10));
    assert!(out[0].is(Flags::FIN), "{:?}", out[0]);
}

// ===== urgent data ========================================================

/// The `Urgent` events `h` has, as (mark, byte), and whether each came
/// before the `Recv` of the same batch.
fn urgents(h: &mut Harness) -> Vec<(u64, Option<u8>)> {
    h.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Urgent { mark, byte, .. } => Some((mark, byte)),
            _ => None,
        })
        .collect()
}

/// RFC 9293 §3.10.7.4 sixth step and §3.8.5 (MUST-30, MUST-31): the
/// peer's urgent pointer names the octet after its urgent data; the octet
/// before it is the urgent byte (BSD's and Linux's reading), reported at
/// once with its stream offset, before the data it is in, and again when
/// it arrives if the pointer came first. A pointer not past the current
/// one, or into data already received, changes nothing.
#[test]
fn the_peer_s_urgent_pointer_names_the_byte_before_it() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    h.send(data(&c, 0, b"abcd").urg(4));
    let evs = h.events();
    let kinds: Vec<&str> = evs
        .iter()
        .map(|e| match e {
            Event::Urgent { .. } => "urgent",
            Event::Recv { .. } => "recv",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["urgent", "recv"], "{evs:?}");
    assert!(
        matches!(
            evs[0],
            Event::Urgent {
                mark: 3,
                byte: Some(b'd'),
                ..
            }
        ),
        "{evs:?}"
    );
    // A newer pointer in the next segment.
    h.send(data(&c, 4, b"efgh").urg(2));
    assert_eq!(urgents(&mut h), [(5, Some(b'f'))]);
    // The first segment again (its pointer into data received): nothing;
    // nor a pointer that is not past the current one.
    h.send(data(&c, 0, b"abcd").urg(4));
    h.send(data(&c, 4, b"efgh").urg(1));
    assert_eq!(urgents(&mut h), []);
    // A pointer ahead of the data: told at once, the byte when it comes;
    // meanwhile a pointer short of it changes nothing.
    h.send(data(&c, 8, b"ij").urg(10));
    assert_eq!(urgents(&mut h), [(17, None)]);
    h.send(data(&c, 10, b"klmnop").urg(3));
    assert_eq!(urgents(&mut h), []);
    h.send(data(&c, 16, b"qrs"));
    assert_eq!(urgents(&mut h), [(17, Some(b'r'))]);
    // The data stream is unchanged: the urgent bytes are in line.
    let mut all = Vec::new();
    for chunk in h.stack.tcp_recv_chunks(c.h).unwrap() {
        all.extend_from_slice(chunk);
    }
    assert_eq!(all, b"abcdefghijklmnopqrs");
}

/// RFC 9293 §3.8.5: urgent data the application marks (`send` with
/// `MSG_OOB`) is pointed past by every segment before its end — a
/// retransmission too — until it is acknowledged; later segments carry no
/// URG. Nagle does not hold it (Linux's `tcp_nagle_test` in urgent mode).
#[test]
fn urgent_data_sent_is_pointed_past_until_acknowledged() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    h.stack.tcp_set_nodelay(c.h, false).unwrap();
    app_send(&mut h, &c, b"hello".to_vec());
    assert_eq!(segs(&mut h).len(), 1);
    // Small data in flight: Nagle holds the next small write...
    app_send(&mut h, &c, b"wait".to_vec());
    h.expect_silence();
    // ...but not urgent data.
    h.stack.tcp_send(h.now, c.h, b"!".to_vec()).unwrap();
    h.stack.tcp_mark_urgent(h.now, c.h, 0).unwrap();
    h.drain();
    let out = segs(&mut h);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].seq, out[0].payload.as_slice()),
        (ours(&c, 5), &b"wait!"[..])
    );
    assert!(out[0].is(Flags::URG), "{out:?}");
    assert_eq!(out[0].urg, 5, "points past the urgent byte");
    // The peer acknowledges the first segment only: the retransmission
    // still points past the urgent byte.
    h.send(ack(&c, 5));
    let rexmit = run_until_output(&mut h, Duration::from_secs(5)).map(|_| segs(&mut h));
    let rexmit = rexmit.expect("a retransmission");
    assert_eq!(rexmit[0].seq, ours(&c, 5));
    assert!(rexmit[0].is(Flags::URG) && rexmit[0].urg == 5, "{rexmit:?}");
    // Acknowledged: urgent mode ends.
    h.send(ack(&c, 10));
    h.events();
    app_send(&mut h, &c, b"after".to_vec());
    let out = segs(&mut h);
    assert_eq!(out.len(), 1);
    assert!(!out[0].is(Flags::URG) && out[0].urg == 0, "{out:?}");
}

// ===== delayed ACK, SACK generation =======================================

/// RFC 1122 §4.2.3.2: one segment is ACKed after the delay, every second one at once.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.2
//= type=test
#[test]
fn delayed_ack_timer_and_every_second_segment() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    let delack = h.stack.config().tcp.delayed_ack;
    h.send(data(&c, 0, &[1; 500]));
    h.expect_silence();
    let t = run_until_output(&mut h, Duration::from_secs(1)).expect("delayed ACK");
    assert_close(t, delack, "delayed ACK");
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(500)));
    assert_eq!(h.stack.counters().tcp_delayed_acks, 1);
    // Two full segments: ACK at once.
    h.send(data(&c, 500, &[2; 1460]));
    h.expect_silence();
    h.send(data(&c, 1960, &[3; 1460]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(3420)));
    h.expect_silence();
    // Nothing left to acknowledge: the timer does not fire an extra ACK.
    assert_eq!(run_until_output(&mut h, Duration::from_secs(1)), None);
    assert_eq!(h.stack.counters().tcp_delayed_acks, 1);
}

/// RFC 1122 §4.2.3.2 counts *full-sized* segments: small ones (the requests
/// of a pipelining client) wait for the reply that carries their ACK, until
/// more than a full segment's worth is unacknowledged (in bytes, as Linux).
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.2
//= type=test
#[test]
fn small_segments_wait_for_the_reply_that_acknowledges_them() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    // Three 60-byte requests back to back: no pure ACK.
    for i in 0..3 {
        h.send(data(&c, i * 60, &[7; 60]));
        h.expect_silence();
    }
    // The reply acknowledges all three.
    assert_eq!(app_send(&mut h, &c, vec![1; 100]), 100);
    let r = h.expect_tcp();
    assert_eq!((r.ack, r.payload.len()), (Some(theirs(180)), 100));
    h.expect_silence();
    // Small segments adding up to more than the largest the peer sent (no
    // full one yet: 536 bytes, RFC 1122's default) are ACKed at once.
    for i in 0..8 {
        h.send(data(&c, 180 + i * 60, &[8; 60]));
        h.expect_silence();
    }
    h.send(data(&c, 660, &[9; 60]));
    let a = h.expect_tcp();
    assert_eq!((a.ack, a.payload.len()), (Some(theirs(720)), 0));
    h.expect_silence();
}

/// RFC 2883 §4 (D-SACK): data that comes again is reported, once, as
/// the first SACK block of the ACK it triggers at once — wholly old data,
/// the old part of a segment that also brings new data, and data already
/// queued out of order (then the block that holds it comes second, so the
/// sender can tell it from new SACK information). Without SACK agreed, no
/// option. (Linux's sender undoes a needless retransmission's window cut
/// on it; until 2026-11-30 duplicates were acknowledged without one.)
#[test]
fn duplicate_data_is_reported_by_a_dsack_block_once() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    h.send(data(&c, 0, &[1; 1000]));
    h.drain();
    // Wholly old: D-SACK, at once (no delayed ACK).
    h.send(data(&c, 0, &[1; 1000]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(1000)));
    assert_eq!(sacks(&a), [(theirs(0), theirs(1000))]);
    // Reported once: the next ACK has none.
    h.send(data(&c, 1000, &[2; 500]));
    h.advance(Duration::from_millis(300));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(1500)));
    assert_eq!(sacks(&a), []);
    // Part old, part new: the old part, and the new data taken.
    h.send(data(&c, 1200, &[2; 800]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(2000)));
    assert_eq!(sacks(&a), [(theirs(1200), theirs(1500))]);
    // Two needless retransmissions in one receive batch (go-back-N): one
    // block covers both, as Linux's `tcp_dsack_extend` (the last alone
    // before the review).
    for (at, n) in [(0, 1000), (1000, 500)] {
        let f = Harness::tcp_frame(&data(&c, at, &vec![1; n]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let a = h.expect_tcp();
    assert_eq!(sacks(&a), [(theirs(0), theirs(1500))]);
    assert!(segs(&mut h).is_empty(), "one ACK for the batch");
    // Old data on a RST: dropped unanswered (RFC 5961 §3.2).
    h.send(data(&c, 0, &[1; 100]).rst());
    h.expect_silence();
    // Out of order, twice, beside an older block: D-SACK, then the block
    // that holds it, then the other.
    h.send(data(&c, 5000, &[5; 500]));
    h.send(data(&c, 3000, &[3; 1000]));
    let dupacks = segs(&mut h);
    assert_eq!(
        sacks(&dupacks[1]),
        [(theirs(3000), theirs(4000)), (theirs(5000), theirs(5500))]
    );
    h.send(data(&c, 5000, &[5; 500]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(2000)));
    assert_eq!(
        sacks(&a),
        [
            (theirs(5000), theirs(5500)),
            (theirs(5000), theirs(5500)),
            (theirs(3000), theirs(4000))
        ]
    );
    // The same duplicate and, in the same receive batch, new data further
    // on (the most recent arrival): the block holding the duplicate still
    // comes second, the most recent third.
    for (at, n) in [(5000, 500), (7000, 500)] {
        let f = Harness::tcp_frame(&data(&c, at, &vec![5; n]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let a = h.expect_tcp();
    assert_eq!(
        sacks(&a),
        [
            (theirs(5000), theirs(5500)),
            (theirs(5000), theirs(5500)),
            (theirs(7000), theirs(7500)),
            (theirs(3000), theirs(4000))
        ]
    );
    assert!(segs(&mut h).is_empty(), "one ACK for the batch");

    // No SACK agreed: a duplicate's ACK carries no option.
    h.events();
    let c = open(&mut h, 8081, Duration::from_millis(100), 65535, |s| {
        s.mss(1460)
    });
    h.send(data(&c, 0, &[1; 1000]));
    h.drain();
    h.send(data(&c, 0, &[1; 1000]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(1000)));
    assert_eq!(sacks(&a), []);
}

/// RFC 2883: duplicates that come apart from each other in one receive
/// batch (the retransmissions a RACK sender sent for reordered segments)
/// are each reported, every one first in an ACK of its own, as Linux's
/// receiver acknowledges each at once: a sender undoes its window cut
/// only when every retransmission of the episode was D-SACKed. Before
/// 2026-12-01 the second was forgotten. Beyond four waiting, a duplicate
/// is counted (`tcp_dsack_not_sent`).
//= https://www.rfc-editor.org/rfc/rfc2883#section-4
//= type=test
#[test]
fn each_duplicate_of_a_batch_gets_a_dsack_of_its_own() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    h.send(data(&c, 0, &[1; 4000]));
    h.advance(Duration::from_millis(300));
    h.out.clear();
    h.send(data(&c, 6000, &[6; 1000]));
    assert_eq!(sacks(&h.expect_tcp()), [(theirs(6000), theirs(7000))]);
    // One batch: old data twice (apart), then a copy of the queued block.
    for (at, n) in [(0, 500), (2000, 500), (6000, 1000)] {
        let f = Harness::tcp_frame(&data(&c, at, &vec![1; n]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let acks = segs(&mut h);
    let got: Vec<_> = acks.iter().map(sacks).collect();
    assert_eq!(
        got,
        [
            vec![(theirs(0), theirs(500)), (theirs(6000), theirs(7000))],
            vec![(theirs(2000), theirs(2500)), (theirs(6000), theirs(7000))],
            vec![(theirs(6000), theirs(7000)), (theirs(6000), theirs(7000))],
        ],
        "one D-SACK per ACK, oldest first"
    );
    assert!(acks.iter().all(|a| a.ack == Some(theirs(4000))));
    // Contiguous ones share a block; six apart: four reported.
    for at in [0, 100, 500, 1000, 1500, 2000, 3000] {
        let f = Harness::tcp_frame(&data(&c, at, &[1; 100]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let firsts: Vec<_> = segs(&mut h).iter().map(|a| sacks(a)[0]).collect();
    assert_eq!(
        firsts,
        [
            (theirs(0), theirs(200)),
            (theirs(500), theirs(600)),
            (theirs(1000), theirs(1100)),
            (theirs(1500), theirs(1600)),
        ]
    );
    assert_eq!(h.stack.counters().tcp_dsack_not_sent, 2);
    // One that bridges two waiting joins them: no byte is reported twice
    // (a sender counts what is D-SACKed).
    for (at, n) in [(0, 100), (200, 100), (50, 200)] {
        let f = Harness::tcp_frame(&data(&c, at, &vec![1; n]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let firsts: Vec<_> = segs(&mut h).iter().map(|a| sacks(a)[0]).collect();
    assert_eq!(firsts, [(theirs(0), theirs(300))]);
    h.expect_silence();
}

/// RFC 2018 §4: after the block of the segment that triggered the ACK,
/// the SACK option repeats the blocks most recently reported first, not
/// the highest: a block that led an earlier option (one the sender may
/// have missed, or several touched in one receive batch) is repeated
/// before older ones. Before 2026-12-01 the others went highest first.
//= https://www.rfc-editor.org/rfc/rfc2018#section-4
//= type=test
#[test]
fn sack_blocks_after_the_first_are_the_most_recently_reported() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    for at in [1000, 3000, 5000, 7000, 9000] {
        h.send(data(&c, at, &[1; 500]));
        h.drain();
    }
    h.out.clear();
    // Extend the block at 3000, then the one at 1000: the block at 3000
    // comes second although three blocks lie above it.
    h.send(data(&c, 3500, &[1; 500]));
    h.drain();
    h.out.clear();
    h.send(data(&c, 1500, &[1; 500]));
    let a = h.expect_tcp();
    assert_eq!(
        sacks(&a),
        [
            (theirs(1000), theirs(2000)),
            (theirs(3000), theirs(4000)),
            (theirs(9000), theirs(9500)),
            (theirs(7000), theirs(7500)),
        ]
    );
    // Two arrivals in one batch: both blocks lead the one ACK, the later
    // first.
    for at in [5500, 7500] {
        let f = Harness::tcp_frame(&data(&c, at, &[1; 500]));
        h.stack.handle_frame(h.now, f);
    }
    h.drain();
    let a = h.expect_tcp();
    assert_eq!(
        sacks(&a),
        [
            (theirs(7000), theirs(8000)),
            (theirs(5000), theirs(6000)),
            (theirs(1000), theirs(2000)),
            (theirs(3000), theirs(4000)),
        ]
    );
    h.expect_silence();
}

/// RFC 5681 §4.2, RFC 2018 §4: out-of-order data gets an immediate dup ACK with SACK blocks.
//= https://www.rfc-editor.org/rfc/rfc2018#section-4
//= type=test
//= https://www.rfc-editor.org/rfc/rfc5681#section-4.2
//= type=test
#[test]
fn out_of_order_data_gets_immediate_dupack_with_sack() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    assert!(h.stack.tcp_info(c.h).unwrap().sack);
    h.send(data(&c, 1000, &[2; 1000]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(0)));
    assert_eq!(sacks(&a), [(theirs(1000), theirs(2000))]);
    h.send(data(&c, 3000, &[4; 1000]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(0)));
    assert_eq!(
        sacks(&a),
        [(theirs(3000), theirs(4000)), (theirs(1000), theirs(2000))]
    );
    // Adjacent to the second block: the merged block leads.
    h.send(data(&c, 4000, &[5; 500]));
    let a = h.expect_tcp();
    assert_eq!(
        sacks(&a),
        [(theirs(3000), theirs(4500)), (theirs(1000), theirs(2000))]
    );
    // Extending the older block: that block leads now.
    h.send(data(&c, 2000, &[3; 500]));
    let a = h.expect_tcp();
    assert_eq!(
        sacks(&a),
        [(theirs(1000), theirs(2500)), (theirs(3000), theirs(4500))]
    );
    assert_eq!(h.stack.counters().tcp_ooo_segments, 4);
    // Filling the first hole: immediate ACK, remaining block reported.
    h.send(data(&c, 0, &[1; 1000]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(2500)));
    assert_eq!(sacks(&a), [(theirs(3000), theirs(4500))]);
    h.send(data(&c, 2500, &[9; 500]));
    let a = h.expect_tcp();
    assert_eq!(a.ack, Some(theirs(4500)));
    assert!(sacks(&a).is_empty());
    h.expect_silence();
    assert_eq!(h.stack.tcp_readable(c.h).unwrap(), 4500);
}

// ===== retransmission timer ===============================================

/// RFC 6298 (2.1), (5.5): the RTO is 1 s before any sample (the SYN) and doubles per expiry.
//= https://www.rfc-editor.org/rfc/rfc6298#section-2
//= type=test
//= https://www.rfc-editor.org/rfc/rfc6298#section-5
//= type=test
#[test]
fn rto_is_one_second_before_any_sample_and_doubles() {
    let mut h = Harness::new(|_| {});
    h.stack
        .tcp_connect(h.now, 1, std::net::SocketAddrV4::new(PEER, PEER_PORT))
        .unwrap();
    h.drain();
    let syn = h.expect_tcp();
    for (i, want) in [1u64, 2, 4, 8].into_iter().enumerate() {
        let t = run_until_output(&mut h, Duration::from_secs(100)).unwrap();
        assert_close(t, Duration::from_secs(want), "SYN retransmission");
        let again = h.expect_tcp();
        assert!(again.is(Flags::SYN));
        assert_eq!(again.seq, syn.seq);
        assert_eq!(h.stack.counters().tcp_timeouts, i as u64 + 1);
    }
}

/// RFC 6298 (5.7), RFC 5681 §3.1: after a lost SYN, data RTO is 3 s and IW one segment.
//= https://www.rfc-editor.org/rfc/rfc6298#section-5
//= type=test
//= https://www.rfc-editor.org/rfc/rfc5681#section-3.1
//= type=test
#[test]
fn rto_is_three_seconds_after_lost_syn() {
    let mut h = Harness::new(|_| {});
    let hc = h
        .stack
        .tcp_connect(h.now, 1, std::net::SocketAddrV4::new(PEER, PEER_PORT))
        .unwrap();
    h.drain();
    let syn = h.expect_tcp();
    run_until_output(&mut h, Duration::from_secs(2)).unwrap();
    h.expect_tcp();
    h.send(
        Seg::to(syn.src_port)
            .syn()
            .seq(PEER_ISS)
            .ack(syn.seq + 1)
            .mss(1460),
    );
    h.expect_tcp();
    let info = h.stack.tcp_info(hc).unwrap();
    assert_eq!(info.rto, Duration::from_secs(3));
    assert_eq!(info.cwnd, 1460);
    h.stack.tcp_send(h.now, hc, vec![1; 5000]).unwrap();
    h.drain();
    let out = segs(&mut h);
    assert_eq!(out.len(), 1, "initial window of one segment");
    let t = run_until_output(&mut h, Duration::from_secs(10)).unwrap();
    assert_close(t, Duration::from_secs(3), "first data RTO");
    assert_eq!(h.expect_tcp().seq, syn.seq + 1);
}

/// RFC 6298 (2.2), (2.3): SRTT, RTTVAR and RTO from the first and a later RTT sample.
//= https://www.rfc-editor.org/rfc/rfc6298#section-2
//= type=test
#[test]
fn rto_computed_from_rtt_samples() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    // First sample: the handshake, R = 100 ms.
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.srtt, Duration::from_millis(100));
    assert_eq!(info.rttvar, Duration::from_millis(50));
    assert_eq!(info.rto, Duration::from_millis(300));
    // Second sample, R' = 50 ms.
    app_send(&mut h, &c, vec![1; 1000]);
    segs(&mut h);
    h.advance(Duration::from_millis(50));
    h.send(ack(&c, 1000));
    let info = h.stack.tcp_info(c.h).unwrap();
    // RTTVAR = 3/4·50 + 1/4·|100 − 50| = 50; SRTT = 7/8·100 + 1/8·50.
    assert_eq!(info.rttvar, Duration::from_millis(50));
    assert_eq!(info.srtt, Duration::from_micros(93_750));
    assert_eq!(info.rto, Duration::from_micros(293_750));
}

/// RFC 6298 (5.4)-(5.6): expiry resends the first unacked segment; the RTO doubles.
//= https://www.rfc-editor.org/rfc/rfc6298#section-5
//= type=test
#[test]
fn rto_retransmits_first_unacked_segment_with_backoff() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    let rto = h.stack.tcp_info(c.h).unwrap().rto;
    app_send(&mut h, &c, vec![1; 2920]);
    assert_eq!(segs(&mut h).len(), 2);
    for i in 0..3u32 {
        let t = run_until_output(&mut h, Duration::from_secs(60)).unwrap();
        assert_close(t, rto * (1 << i), "retransmission timeout");
        let out = segs(&mut h);
        // After a timeout cwnd is one segment: only the first goes.
        assert_eq!(out.len(), 1, "{:?}", brief(&out));
        assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 0), 1460));
    }
    let ctr = h.stack.counters();
    assert_eq!(ctr.tcp_timeouts, 3);
    assert_eq!(ctr.tcp_retrans_segs, 3);
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.retransmits, 3);
    assert_eq!(info.cwnd, 1460);
    assert_eq!(info.rto, rto * 8);
}

/// RFC 6298 §3 (Karn): an ACK of retransmitted data yields no RTT sample.
//= https://www.rfc-editor.org/rfc/rfc6298#section-3
//= type=test
#[test]
fn karn_no_rtt_sample_from_retransmitted_segment() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    let before = h.stack.tcp_info(c.h).unwrap();
    app_send(&mut h, &c, vec![1; 1000]);
    segs(&mut h);
    let t = run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    segs(&mut h);
    // The ACK comes RTO + 10 ms after the original: not a sample.
    h.advance(Duration::from_millis(10));
    h.send(ack(&c, 1000));
    assert!(t > before.srtt);
    let after = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(after.srtt, before.srtt);
    assert_eq!(after.rttvar, before.rttvar);
    // A segment sent after that is timed again.
    app_send(&mut h, &c, vec![2; 1000]);
    segs(&mut h);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, 2000));
    let later = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(later.srtt, Duration::from_millis(100));
    assert_eq!(later.rttvar, Duration::from_micros(37_500));
}

/// RFC 6298 §5, RFC 9293 §3.8.1: the backed-off RTO is kept until a valid RTT sample.
//= https://www.rfc-editor.org/rfc/rfc6298#section-5
//= type=test
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.1
//= type=test
#[test]
fn rto_backoff_kept_until_a_valid_rtt_sample() {
    // RFC 6298 §5 (note after 5.7) and RFC 9293 §3.8.1: the backed-off RTO is
    // kept until a new RTT measurement — which a retransmitted segment cannot
    // give (Karn) — so the next new segment still waits for the doubled RTO.
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    let rto = h.stack.tcp_info(c.h).unwrap().rto;
    app_send(&mut h, &c, vec![1; 1000]);
    segs(&mut h);
    run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    segs(&mut h);
    // The retransmission is acknowledged: no sample (Karn).
    h.advance(Duration::from_millis(10));
    h.send(ack(&c, 1000));
    h.events();
    app_send(&mut h, &c, vec![2; 1000]);
    segs(&mut h);
    let t = run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_close(t, rto * 2, "RTO after an unsampled ACK");
}

/// RFC 1122 §4.2.3.5: after `data_retries` retransmissions the connection is dead.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.5
//= type=test
#[test]
fn connection_times_out_after_data_retries() {
    let mut h = Harness::new(|c| c.tcp.data_retries = 3);
    let c = open_plain(&mut h);
    app_send(&mut h, &c, vec![1; 1000]);
    segs(&mut h);
    let mut retrans = 0;
    while let Some(_t) = run_until_output(&mut h, Duration::from_secs(120)) {
        let out = segs(&mut h);
        assert!(out
            .iter()
            .all(|s| s.seq == ours(&c, 0) && !s.is(Flags::RST)));
        retrans += out.len();
    }
    assert_eq!(retrans, 3);
    assert_eq!(h.stack.counters().tcp_timeouts, 3);
    assert_timed_out(&mut h, &c);
    assert_eq!(h.stack.tcp_state(c.h).unwrap(), State::Closed);
    h.stack.tcp_close(h.now, c.h).unwrap();
    assert_eq!(h.stack.tcp_connection_count(), 0);
}

/// RFC 8985 §7: with SACK a tail loss probe goes out after 2·SRTT, then the RTO.
//= https://www.rfc-editor.org/rfc/rfc8985#section-7
//= type=test
#[test]
fn tail_loss_probe_then_rto() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    let rto = h.stack.tcp_info(c.h).unwrap().rto;
    app_send(&mut h, &c, vec![1; 2920]);
    assert_eq!(segs(&mut h).len(), 2);
    let t = run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_close(t, Duration::from_millis(200), "probe timeout 2·SRTT");
    let probe = segs(&mut h);
    assert_eq!(probe.len(), 1);
    assert_eq!(
        (probe[0].seq, probe[0].payload.len()),
        (ours(&c, 1460), 1460)
    );
    assert_eq!(h.stack.counters().tcp_timeouts, 0);
    let t = run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_close(t, rto, "RTO after the probe");
    let out = segs(&mut h);
    assert_eq!((out[0].seq, out[0].payload.len()), (ours(&c, 0), 1460));
    assert_eq!(h.stack.counters().tcp_timeouts, 1);
}

/// RFC 3708: when every segment a recovery sent again comes back in a
/// D-SACK, the originals only arrived late, and nothing was lost: the
/// window and threshold it cut are given back (as Linux's
/// `tcp_try_undo_dsack`). Not while one of them is unreported.
#[test]
fn a_needless_recovery_is_undone_once_every_resend_is_dsacked() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let before = h.stack.tcp_info(c.h).unwrap();
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    let cut = h.stack.tcp_info(c.h).unwrap();
    assert!(cut.ssthresh < before.ssthresh && cut.cwnd < before.cwnd);
    // The original arrives: recovery ends, the cut stays.
    h.send(ack(&c, b + 10_000));
    assert!(h.stack.tcp_info(c.h).unwrap().cwnd < before.cwnd);
    // Then the resent copy, reported: the cut is given back.
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(1000))]));
    let undone = h.stack.tcp_info(c.h).unwrap();
    assert!(undone.cwnd >= before.cwnd, "{undone:?}");
    assert_eq!(undone.ssthresh, before.ssthresh);
    assert_eq!(h.stack.counters().tcp_dsack_undo, 1);
    h.events();

    // Two segments sent again (after RACK's window: the path reorders
    // now), one of them reported: the cut stays until the other is.
    let b = b + 10_000;
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(2000), o(5000))]));
    h.advance(Duration::from_millis(60));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    // (The window lets more go once the first is acknowledged: the
    // second hole, and the tail by RFC 6675 NextSeg (4).)
    h.send(ack(&c, b + 1000).sack(&[(o(2000), o(5000))]));
    let resent: Vec<u32> = std::iter::once(o(0))
        .chain(brief(&segs(&mut h)).iter().map(|s| s.0))
        .collect();
    assert_eq!(resent[1], o(1000));
    h.send(ack(&c, b + 10_000));
    let cut = h.stack.tcp_info(c.h).unwrap().cwnd;
    for (i, &s) in resent.iter().enumerate() {
        assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd, cut);
        assert_eq!(h.stack.counters().tcp_dsack_undo, 1);
        h.send(ack(&c, b + 10_000).sack(&[(s, s + 1000)]));
        if i + 1 < resent.len() {
            h.expect_silence();
        }
    }
    assert!(h.stack.tcp_info(c.h).unwrap().cwnd > cut);
    assert_eq!(h.stack.counters().tcp_dsack_undo, 2);
}

/// TSval of a segment the stack sent.
fn tsval(s: &Seg) -> u32 {
    s.opts.timestamp.expect("a timestamp").0
}

/// A NewReno connection with timestamps, peer MSS 1000 (988 bytes of data
/// per segment beside the option), whose first segment was sent and
/// acknowledged. Returns the connection and the segment size, which is
/// also the offset of the next data byte.
fn warmed_up_with_timestamps(h: &mut Harness) -> (Conn, u32) {
    let c = open(h, 8080, Duration::from_millis(100), 65535, |s| {
        s.mss(1000).ts(10, 0)
    });
    let m = 988;
    assert_eq!(app_send(h, &c, vec![0; m as usize]), m as usize);
    let first = segs(h);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, m).ts(101, tsval(&first[0])));
    h.events();
    (c, m)
}

/// Spurious timeout detection (RFC 3522, Eifel, as Linux's
/// `tcp_packet_delayed`): after a timeout, an ACK that moves SND.UNA and
/// echoes a timestamp older than the first resend acknowledges an
/// original — the path stalled, nothing was lost — so the window and
/// threshold the timeout cut are given back, and sending goes on with new
/// data instead of resending what arrived (RFC 4015 §2). An ACK that
/// echoes the resend's timestamp proves nothing: the cut stays. Until
/// 2026-12-01 every timeout kept its cut and resent the whole flight.
//= https://www.rfc-editor.org/rfc/rfc3522#section-3
//= type=test
#[test]
fn a_timeout_an_original_s_ack_shows_needless_is_undone() {
    let mut h = Harness::new(newreno);
    let (c, m) = warmed_up_with_timestamps(&mut h);
    let o = |n: u32| ours(&c, m + n);

    // Ten segments; the path stalls past the RTO.
    app_send(&mut h, &c, vec![1; 10 * m as usize]);
    let out = segs(&mut h);
    assert_eq!(out.len(), 10);
    let before = h.stack.tcp_info(c.h).unwrap();
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    let resend = segs(&mut h);
    assert_eq!(brief(&resend), [(o(0), m as usize)]);
    assert!(tsval(&resend[0]) > tsval(&out[0]));
    let cut = h.stack.tcp_info(c.h).unwrap();
    assert!(cut.cwnd < before.cwnd && cut.ssthresh < before.ssthresh);
    // The originals' ACK (half of them) comes: their timestamp echoed.
    h.send(ack(&c, m + 5 * m).ts(102, tsval(&out[0])));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 1);
    // The Eifel response (RFC 4015 §4): the threshold back to what it was
    // (`pipe_prev`, above the flight), the window what is in flight plus
    // what this ACK acknowledged (up to the initial window), not the old
    // window at once: slow start regains it in a round trip or two.
    let undone = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(undone.ssthresh, before.ssthresh);
    assert_eq!(
        undone.cwnd,
        5 * m + 5 * m,
        "{undone:?} (before: {before:?})"
    );
    // The other five are not sent again (go-back-N stopped) ...
    h.expect_silence();
    h.send(ack(&c, m + 10 * m).ts(103, tsval(&out[5])));
    h.events();
    // ... and new data goes out at the window kept.
    app_send(&mut h, &c, vec![2; 10 * m as usize]);
    assert_eq!(segs(&mut h).len(), 10);
    assert_eq!(h.stack.counters().tcp_retrans_segs, 1);

    // Another stall; this time the ACK echoes the resend: the cut stays,
    // and the go-back resend goes on.
    let b = 11 * m;
    let before = h.stack.tcp_info(c.h).unwrap();
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    let resend = segs(&mut h);
    assert_eq!(brief(&resend), [(ours(&c, b), m as usize)]);
    let cut = h.stack.tcp_info(c.h).unwrap();
    assert!(cut.cwnd < before.cwnd);
    h.send(ack(&c, b + m).ts(104, tsval(&resend[0])));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 1);
    let after = h.stack.tcp_info(c.h).unwrap();
    assert!(after.cwnd < before.cwnd, "{after:?}");
    let more = segs(&mut h);
    assert_eq!(more[0].seq, ours(&c, b + m), "{:?}", brief(&more));
}

/// Without timestamps, D-SACKs show a timeout needless as they show a
/// recovery needless (RFC 3708; Linux's `tcp_try_undo_loss` once
/// `undo_retrans` is 0): every segment sent again since it — the tail
/// loss probe before it included — reported as a duplicate, the cut is
/// given back. Until 2026-12-01 a timeout always kept its cut.
//= https://www.rfc-editor.org/rfc/rfc3708#section-2
//= type=test
#[test]
fn a_timeout_whose_resends_all_come_back_dsacked_is_undone() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    let o = |n: u32| ours(&c, b + n);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let before = h.stack.tcp_info(c.h).unwrap();
    // The tail loss probe, then the RTO's resend.
    run_until_output(&mut h, Duration::from_secs(5)).expect("the probe");
    assert_eq!(brief(&segs(&mut h)), [(o(9000), 1000)]);
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    assert_eq!(h.stack.counters().tcp_timeouts, 1);
    assert!(h.stack.tcp_info(c.h).unwrap().cwnd < before.cwnd);
    // Everything arrived; then both copies, reported one by one.
    h.send(ack(&c, b + 10_000).sack(&[(o(9000), o(10_000))]));
    assert!(h.stack.tcp_info(c.h).unwrap().cwnd < before.cwnd);
    assert_eq!(h.stack.counters().tcp_dsack_undo, 0);
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(1000))]));
    // The threshold is back (RFC 4015's `pipe_prev`: it was above the
    // flight), the window is what is in flight (nothing) plus the
    // initial window: slow start regains the rest.
    let undone = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(undone.ssthresh, before.ssthresh);
    assert_eq!(undone.cwnd, 10_000, "{undone:?}");
    assert_eq!(h.stack.counters().tcp_dsack_undo, 1);
}

/// F-RTO's scenes: a connection without timestamps (SACK or not) sends
/// eleven segments, a window, with four more waiting; the path holds
/// them past the RTO (with SACK a tail loss probe of new data goes
/// first), which resends the first segment alone (RFC 5682 §2 step 1).
/// Returns the connection, where its data starts, and its `TCP_INFO`
/// before the timeout and after it.
fn timed_out_with_more_to_send(h: &mut Harness, sack: bool) -> (Conn, u32, [TcpInfo; 2]) {
    let (c, b) = warmed_up(h, sack);
    let o = |n: u32| ours(&c, b + n);
    app_send(h, &c, vec![1; 15_000]);
    assert_eq!(segs(h).len(), 11);
    let before = h.stack.tcp_info(c.h).unwrap();
    if sack {
        run_until_output(h, Duration::from_secs(5)).expect("the probe");
        assert_eq!(brief(&segs(h)), [(o(11_000), 1000)]);
    }
    run_until_output(h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(brief(&segs(h)), [(o(0), 1000)]);
    let cut = h.stack.tcp_info(c.h).unwrap();
    (c, b, [before, cut])
}

/// The same with SACK, and the resend's ACK 100 ms later: F-RTO's step
/// 2 b sends two new segments (after the probe's). Returns the
/// connection, where its data starts, and its `TCP_INFO` after the
/// timeout.
fn new_data_after_a_timeout_with_sack(h: &mut Harness) -> (Conn, u32, TcpInfo) {
    let (c, b, [_, cut]) = timed_out_with_more_to_send(h, true);
    let o = |n: u32| ours(&c, b + n);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(h)), [(o(12_000), 1000), (o(13_000), 1000)]);
    (c, b, cut)
}

/// F-RTO (RFC 5682 §2) finds a timeout needless without timestamps: the
/// timeout resends only the first segment; its ACK sends two new segments
/// instead of resending more (step 2 b); the next ACK acknowledges
/// originals never sent again (step 3 b), so the path only stalled — the
/// cut is given back by RFC 4015's response and nothing else is resent.
/// Until 2026-12-01 such a timeout kept its cut and resent the whole
/// flight go-back-N (the other nine segments here).
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn f_rto_finds_a_timeout_needless_without_timestamps() {
    let mut h = Harness::new(newreno);
    let (c, b, [before, _]) = timed_out_with_more_to_send(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    assert_eq!(h.stack.counters().tcp_timeouts, 1);
    // The original first segment's ACK: step 2 b, two new segments.
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(&mut h)), [(o(11_000), 1000), (o(12_000), 1000)]);
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
    // The second original's ACK: step 3 b, the timeout was needless.
    h.send(ack(&c, b + 2000));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 1);
    let undone = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(undone.ssthresh, before.ssthresh, "{undone:?}");
    // In flight (11 segments) plus what this ACK acknowledged.
    assert_eq!(undone.cwnd, 11_000 + 1000, "{undone:?}");
    // The rest are acknowledged as they arrive; none is sent again.
    // (The window: 11 segments in flight plus this ACK's one.)
    assert_eq!(brief(&segs(&mut h)), [(o(13_000), 1000)]);
    h.send(ack(&c, b + 13_000));
    segs(&mut h);
    h.send(ack(&c, b + 15_000));
    assert_eq!(h.stack.counters().tcp_retrans_segs, 1);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().unacked_segs, 0);
}

/// The ACKs a stall held come together: the one that decides may arrive
/// before step 2's new data has left. It acknowledges originals never
/// sent again all the same, so the timeout is undone. Found on a real
/// path (`ixora impair` stalling the ACK direction, Linux receiving
/// without timestamps) on 2026-12-01, when a fix from review required
/// the new data to have left first: no timeout was found needless, and
/// each resent a window (491–742 resends per 10 s run against 162–188).
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn f_rto_undoes_when_the_held_acks_come_together() {
    let mut h = Harness::new(newreno);
    let (c, b, [before, _]) = timed_out_with_more_to_send(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    // Both ACKs in one batch, nothing sent between them.
    for n in [1000, 2000] {
        h.stack
            .handle_frame(h.now, Harness::tcp_frame(&ack(&c, b + n)));
    }
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 1);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().ssthresh, before.ssthresh);
    h.drain();
    // New data only (SND.NXT at SND.MAX): nothing is resent.
    let out = segs(&mut h);
    assert_eq!(out[0].seq, o(11_000), "{:?}", brief(&out));
    assert_eq!(h.stack.counters().tcp_retrans_segs, 1);
}

/// F-RTO step 3 a (RFC 5682 §2): when the segments after the first were
/// lost too, the new data of step 2 b arrives out of order and the peer
/// answers with duplicate ACKs: the timeout stays a timeout (no undo, the
/// threshold stays cut) and the go-back resend goes on from SND.UNA with
/// a window of at most three segments. A dupack in step 2 (before any new
/// data) also ends F-RTO.
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn f_rto_goes_back_when_the_loss_was_real() {
    let mut h = Harness::new(newreno);
    let (c, b, [_, cut]) = timed_out_with_more_to_send(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    // The resend's ACK (all the others were lost): new data, step 2 b.
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(&mut h)), [(o(11_000), 1000), (o(12_000), 1000)]);
    // It arrives above the hole: a duplicate ACK, step 3 a.
    h.send(ack(&c, b + 1000));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
    let after = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(after.ssthresh, cut.ssthresh);
    assert!(after.cwnd <= 3000, "{after:?}");
    // The resend goes on from SND.UNA.
    let more = segs(&mut h);
    assert_eq!(more[0].seq, o(1000), "{:?}", brief(&more));
    assert!(bytes(&more) <= 3000, "{:?}", brief(&more));
    // A later ACK of the resends undoes nothing.
    h.send(ack(&c, b + 3000));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);

    // Another timeout; a dupack comes first: F-RTO ends at step 2 a, and
    // the resend's ACK then goes on resending, no new data.
    let mut h = Harness::new(newreno);
    let (c, b, _) = timed_out_with_more_to_send(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b));
    h.send(ack(&c, b + 1000));
    let more = segs(&mut h);
    assert_eq!(more[0].seq, o(1000), "{:?}", brief(&more));
    assert!(
        more.iter().all(|s| s.seq.wrapping_sub(o(0)) < 11_000),
        "{:?}",
        brief(&more)
    );
}

/// With SACK, F-RTO's step 3 a reads the loss from SACKs (RFC 5682 §3):
/// the peer SACKs the new data of step 2 b; RACK marks the originals sent
/// before it lost, and SACK recovery resends those (not the SACKed new
/// data), without cutting the window again.
//= https://www.rfc-editor.org/rfc/rfc5682#section-3
//= type=test
#[test]
fn f_rto_with_sack_repairs_a_real_loss_from_the_sacks() {
    let mut h = Harness::new(newreno);
    let (c, b, cut) = new_data_after_a_timeout_with_sack(&mut h);
    let o = |n: u32| ours(&c, b + n);
    // The peer SACKs them: the originals from o(1000) were lost.
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, b + 1000).sack(&[(o(12_000), o(13_000))]));
    h.send(ack(&c, b + 1000).sack(&[(o(12_000), o(14_000))]));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
    let after = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(after.ssthresh, cut.ssthresh, "{after:?}");
    // SACK recovery resends the originals, and not the SACKed new data,
    // as the peer acknowledges them.
    let mut sent = segs(&mut h);
    assert_eq!(sent[0].seq, o(1000), "{:?}", brief(&sent));
    for _ in 0..30 {
        let top = sent
            .iter()
            .map(|s| s.seq.wrapping_sub(o(0)) + s.payload.len() as u32)
            .max()
            .unwrap_or(0);
        if top >= 12_000 {
            break;
        }
        h.advance(Duration::from_millis(10));
        h.send(ack(&c, b + top).sack(&[(o(12_000), o(14_000))]));
        let more = segs(&mut h);
        assert!(!more.is_empty(), "stuck at {top}");
        sent.extend(more);
    }
    let off = |s: &Seg| s.seq.wrapping_sub(o(0));
    assert!(
        sent.iter().all(|s| !(12_000..14_000).contains(&off(s))),
        "{:?}",
        brief(&sent)
    );
    // Once the peer has all, the last of the data goes (if it has not).
    h.send(ack(&c, b + 14_000));
    sent.extend(segs(&mut h));
    assert!(
        sent.iter().any(|s| s.seq == o(14_000)),
        "{:?}",
        brief(&sent)
    );
}

/// F-RTO's new data passes the cork (and Nagle: RFC 5682 §2 step 2 b
/// "MAY override the Nagle algorithm"; Linux pushes it with
/// `TCP_NAGLE_OFF`): with `TCP_CORK` on and a small write waiting, step
/// 2 sends the write; the duplicate ACK it draws shows the loss real, and
/// the resend goes on. (A first version of this, found by review on
/// 2026-12-01, had step 2 find the write sendable and the send path then
/// hold it, with nothing sent until a second timeout.)
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn f_rto_new_data_passes_the_cork() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    h.stack.tcp_set_cork(c.h, true).unwrap();
    app_send(&mut h, &c, vec![1; 2000]);
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000), (o(1000), 1000)]);
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    // A partial segment: the cork holds it.
    app_send(&mut h, &c, vec![2; 200]);
    assert!(segs(&mut h).is_empty());
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(&mut h)), [(o(2000), 200)]);
    // (Go-back-N: the resend runs on through the new data.)
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(&mut h)), [(o(1000), 1000), (o(2000), 200)]);
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
}

/// When our segments carry SACK blocks (the peer's data arrived out of
/// order), they are shorter than the one-segment window after a timeout,
/// and the go-back resends it in two pieces. The first piece's ACK is not
/// F-RTO's step 2 (it does not cover all that was resent), so the
/// second's cannot pass for step 3's and undo a real loss. Found by
/// review on 2026-12-01 (step 2 then asked only for the first piece).
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn f_rto_waits_for_the_whole_resend_when_it_goes_in_pieces() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    let o = |n: u32| ours(&c, b + n);
    // The peer's bytes 100.. arrive before 0..100: our ACKs SACK them.
    h.send(Seg::to(c.port).seq(theirs(100)).ack(o(0)).data(&[7; 100]));
    segs(&mut h);
    app_send(&mut h, &c, vec![1; 15_000]);
    let first = segs(&mut h);
    let piece = first[0].payload.len() as u32;
    assert!(piece < 1000, "{:?}", brief(&first));
    // The probe, then the timeout: the resend in two pieces.
    run_until_output(&mut h, Duration::from_secs(5)).expect("the probe");
    segs(&mut h);
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(
        brief(&segs(&mut h)),
        [(o(0), piece as usize), (o(piece), (1000 - piece) as usize)]
    );
    // Each piece acknowledged on its own (all else was lost).
    h.send(ack(&c, b + piece));
    h.send(ack(&c, b + 1000));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
}

/// While F-RTO waits for the ACK that decides, no tail loss probe goes
/// (its ACK would move SND.UNA over a resend and pass for an original's),
/// and an ACK that moves SND.UNA while SACKing the new data above a hole
/// shows the loss real (RFC 5682 §3 step 3 a): no undo either way. Found
/// by review on 2026-12-01: the probe's ACK undid a real loss episode.
//= https://www.rfc-editor.org/rfc/rfc5682#section-3
//= type=test
#[test]
fn f_rto_is_not_fooled_by_a_probe_or_a_partial_ack_with_sacks() {
    let mut h = Harness::new(newreno);
    let (c, b, cut) = new_data_after_a_timeout_with_sack(&mut h);
    let o = |n: u32| ours(&c, b + n);
    // Silence: the next thing sent is the timeout's resend, not a probe.
    let probes = h.stack.counters().tcp_loss_probes;
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(h.stack.counters().tcp_loss_probes, probes);
    assert_eq!(h.stack.counters().tcp_timeouts, 2);
    assert_eq!(segs(&mut h)[0].seq, o(1000));

    // Again, and the ACK after the new data moves SND.UNA by one segment
    // while SACKing the new data: segments 3 to 11 were lost.
    let mut h = Harness::new(newreno);
    let (c, b, cut2) = new_data_after_a_timeout_with_sack(&mut h);
    let o = |n: u32| ours(&c, b + n);
    assert_eq!(cut2.ssthresh, cut.ssthresh);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, b + 2000).sack(&[(o(12_000), o(13_000))]));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
    let after = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(after.ssthresh, cut2.ssthresh, "{after:?}");
    let more = segs(&mut h);
    assert_eq!(more[0].seq, o(2000), "{:?}", brief(&more));
}

/// A smaller path MTU while F-RTO waits for the ACK that decides ends
/// it: everything goes again at the new size from SND.UNA (RFC 1191), and
/// the ACK of that resend is not taken for an original's. Found by review
/// on 2026-12-01: the go-back was ignored while F-RTO's new data had used
/// its two segments, and nothing went until the next timeout.
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn a_smaller_path_mtu_ends_f_rto() {
    let mut h = Harness::new(newreno);
    let (c, b, _) = timed_out_with_more_to_send(&mut h, false);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b + 1000));
    assert_eq!(brief(&segs(&mut h)), [(o(11_000), 1000), (o(12_000), 1000)]);
    // "Fragmentation needed, next-hop MTU 800" for the first new segment.
    let mut quoted = [0u8; 28];
    quoted[0] = 0x45;
    quoted[9] = 6;
    quoted[12..16].copy_from_slice(&US.octets());
    quoted[16..20].copy_from_slice(&PEER.octets());
    quoted[20..22].copy_from_slice(&c.port.to_be_bytes());
    quoted[22..24].copy_from_slice(&PEER_PORT.to_be_bytes());
    quoted[24..28].copy_from_slice(&o(11_000).to_be_bytes());
    h.send_raw(Harness::icmp_frame(&Icmpv4Repr::DstUnreachable {
        code: 4,
        next_hop_mtu: 800,
        original: &quoted,
    }));
    assert_eq!(h.stack.counters().tcp_pmtu_reductions, 1);
    // (The window after step 2's ACK: two segments of the old size.)
    let again = segs(&mut h);
    assert_eq!(brief(&again[..1]), [(o(1000), 760)]);
    assert_eq!(bytes(&again), 2000, "{:?}", brief(&again));
    h.send(ack(&c, b + 1760));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
}

/// A second timeout in one loss episode keeps the first one's record: an
/// ACK that echoes a resend of the episode (sent after the first timeout,
/// before the second) shows nothing needless (Linux keeps `retrans_stamp`
/// through its Loss state). Found by review on 2026-12-01: the second
/// timeout took its own time for the test, the ACK of the go-back
/// resends "undid" the episode and the segments really lost waited for a
/// third timeout.
//= https://www.rfc-editor.org/rfc/rfc3522#section-3
//= type=test
#[test]
fn a_second_timeout_of_a_loss_episode_is_not_undone_by_its_resends() {
    let mut h = Harness::new(newreno);
    let (c, m) = warmed_up_with_timestamps(&mut h);
    let o = |n: u32| ours(&c, m + n);
    app_send(&mut h, &c, vec![1; 10 * m as usize]);
    assert_eq!(segs(&mut h).len(), 10);
    // All ten are lost; the first timeout resends the first.
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    let r1 = segs(&mut h);
    assert_eq!(brief(&r1), [(o(0), m as usize)]);
    // Its ACK echoes the resend: the timeout was needed; go-back goes on.
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, 2 * m).ts(102, tsval(&r1[0])));
    let r2 = segs(&mut h);
    assert_eq!(r2[0].seq, o(m));
    // The path stalls: a second timeout.
    run_until_output(&mut h, Duration::from_secs(5)).expect("the second RTO");
    segs(&mut h);
    assert_eq!(h.stack.counters().tcp_timeouts, 2);
    let cut = h.stack.tcp_info(c.h).unwrap();
    // The go-back resends sent between the two arrive: no undo.
    h.advance(Duration::from_millis(50));
    let to = 2 * m + r2.len() as u32 * m;
    h.send(ack(&c, to).ts(103, tsval(&r2[0])));
    assert_eq!(h.stack.counters().tcp_spurious_rtos, 0);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().ssthresh, cut.ssthresh);
    // And the go-back resend goes on from SND.UNA at once.
    let next = segs(&mut h);
    assert_eq!(
        next.first().map(|s| s.seq),
        Some(ours(&c, to)),
        "{:?}",
        brief(&next)
    );
}

/// The D-SACK that completes a timeout's undo may ride on an ACK that
/// moves SND.UNA: the window given back counts what is in flight after
/// it (here nothing) plus the initial window, not the bytes it
/// acknowledged too (review, 2026-12-01: 22,000 bytes, twice the window
/// before the timeout).
//= https://www.rfc-editor.org/rfc/rfc3708#section-2
//= type=test
#[test]
fn a_timeout_undone_by_a_dsack_on_an_advancing_ack_counts_the_flight_after_it() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    let o = |n: u32| ours(&c, b + n);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    run_until_output(&mut h, Duration::from_secs(5)).expect("the probe");
    assert_eq!(brief(&segs(&mut h)), [(o(9000), 1000)]);
    run_until_output(&mut h, Duration::from_secs(5)).expect("the RTO");
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    // The probe's duplicate, D-SACKed inside the second block.
    h.send(ack(&c, b).sack(&[(o(9000), o(10_000)), (o(5000), o(10_000))]));
    segs(&mut h);
    // Everything acknowledged, with the D-SACK of the resend.
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(1000))]));
    assert_eq!(h.stack.counters().tcp_dsack_undo, 1);
    let undone = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(undone.cwnd, 10_000, "{undone:?}");
}

/// A D-SACK is believed only of data sent twice (as Linux's
/// `tcp_dsack_seen`): above the cumulative ACK, of a segment never resent,
/// or for more segments than were ever resent, it is the network's
/// duplicate or a lie, and gives no window back.
#[test]
fn a_dsack_of_data_never_sent_twice_gives_nothing_back() {
    for lie in ["never resent", "more than resent"] {
        let mut h = Harness::new(newreno);
        let (c, b) = warmed_up(&mut h, true);
        app_send(&mut h, &c, vec![1; 10_000]);
        assert_eq!(segs(&mut h).len(), 10);
        let before = h.stack.tcp_info(c.h).unwrap().cwnd;
        let o = |n: u32| ours(&c, b + n);
        h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
        assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
        if lie == "never resent" {
            // Segment 2 again, inside the SACKed block (RFC 2883 §4).
            h.send(ack(&c, b).sack(&[(o(2000), o(3000)), (o(1000), o(4000))]));
            h.send(ack(&c, b + 10_000));
        } else {
            h.send(ack(&c, b + 10_000));
            h.send(ack(&c, b + 10_000).sack(&[(o(5000), o(8000))]));
        }
        assert_eq!(h.stack.counters().tcp_dsack_recv, 1, "{lie}");
        assert_eq!(h.stack.counters().tcp_dsack_undo, 0, "{lie}");
        assert!(h.stack.tcp_info(c.h).unwrap().cwnd < before, "{lie}");
    }
}

/// A D-SACK of a segment sent again shows the path reordering (the
/// original was late, not lost: as Linux's `tcp_sacktag_one`), so a hole
/// then has RACK's reordering window to arrive (RFC 8985 §6.2). Not a
/// tail loss probe's (RFC 8985 §7.4: a probe goes out while the original
/// is most likely delivered, and its duplicate says nothing of the path).
#[test]
fn a_dsack_shows_reordering_unless_of_a_tail_loss_probe() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    app_send(&mut h, &c, vec![1; 2000]);
    assert_eq!(segs(&mut h).len(), 2);
    let o = |n: u32| ours(&c, b + n);
    run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_eq!(brief(&segs(&mut h)), [(o(1000), 1000)]); // the probe
    h.send(ack(&c, b + 2000));
    h.send(ack(&c, b + 2000).sack(&[(o(1000), o(2000))]));
    assert_eq!(h.stack.counters().tcp_dsack_recv, 1);
    h.events();
    // Three segments SACKed above a hole still make it lost at once.
    let b = b + 2000;
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    // That was needless: the D-SACK shows reordering.
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(1000))]));
    assert_eq!(h.stack.counters().tcp_dsack_recv, 2);
    h.events();
    let b = grow_cwnd(&mut h, &c, b + 10_000, 4000);
    app_send(&mut h, &c, vec![1; 4000]);
    assert_eq!(segs(&mut h).len(), 4);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    h.expect_silence();
}

/// Send and acknowledge a segment at a time (from SND.UNA `b`) until the
/// congestion window is `cwnd`; returns the new SND.UNA.
fn grow_cwnd(h: &mut Harness, c: &Conn, mut b: u32, cwnd: u32) -> u32 {
    while h.stack.tcp_info(c.h).unwrap().cwnd < cwnd {
        b += app_send(h, c, vec![1; 1000]) as u32;
        segs(h);
        h.send(ack(c, b));
        h.events();
    }
    b
}

/// After a timeout everything unacknowledged is sent again, SACKs
/// forgotten (RFC 2018 §8): D-SACKs of what the receiver already held
/// show no reordering (three SACKs above a hole still mark it lost).
#[test]
fn a_dsack_of_what_a_timeout_resent_is_no_reordering() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    app_send(&mut h, &c, vec![1; 3000]);
    assert_eq!(segs(&mut h).len(), 3);
    let o = |n: u32| ours(&c, b + n);
    // The ACKs are lost: a probe, then the timeout's resend.
    run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_eq!(brief(&segs(&mut h)), [(o(2000), 1000)]);
    run_until_output(&mut h, Duration::from_secs(5)).unwrap();
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    assert_eq!(h.stack.counters().tcp_timeouts, 1);
    h.send(ack(&c, b + 3000).sack(&[(o(0), o(1000))]));
    assert_eq!(h.stack.counters().tcp_dsack_recv, 1);
    h.events();
    let b = grow_cwnd(&mut h, &c, b + 3000, 4000);
    app_send(&mut h, &c, vec![1; 4000]);
    assert_eq!(segs(&mut h).len(), 4);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
}

// ===== fast retransmit and recovery =======================================

/// Configuration tweak: NewReno, whose window arithmetic RFC 5681 fixes.
fn newreno(c: &mut ixora_core::StackConfig) {
    c.tcp.cc = CcAlgorithm::NewReno;
}

/// A NewReno connection with peer MSS 1000 (`sack`: SACK permitted) whose
/// first 1000 bytes were sent and acknowledged (cwnd 11000 after that ACK).
/// Returns the connection and the offset of the next data byte.
fn warmed_up(h: &mut Harness, sack: bool) -> (Conn, u32) {
    let c = open(h, 8080, Duration::from_millis(100), 65535, |s| {
        let s = s.mss(1000);
        if sack {
            s.sack_perm()
        } else {
            s
        }
    });
    assert_eq!(app_send(h, &c, vec![0; 1000]), 1000);
    assert_eq!(segs(h).len(), 1);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, 1000));
    h.events();
    assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd, 11_000);
    (c, 1000)
}

/// RFC 5681 §3.2: the third dup ACK resends SND.UNA; cwnd = ssthresh + 3·SMSS.
//= https://www.rfc-editor.org/rfc/rfc5681#section-3.2
//= type=test
#[test]
fn fast_retransmit_on_third_duplicate_ack() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    h.send(ack(&c, b));
    h.send(ack(&c, b));
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_fast_retrans, 0);
    h.send(ack(&c, b));
    let out = segs(&mut h);
    assert_eq!(brief(&out), [(ours(&c, b), 1000)]);
    assert_eq!(h.stack.counters().tcp_fast_retrans, 1);
    assert_eq!(h.stack.counters().tcp_timeouts, 0);
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.ssthresh, 5000);
    assert_eq!(info.cwnd, 8000);
    h.send(ack(&c, b));
    assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd, 9000);
}

/// RFC 6582 §3.2: `recover` starts at the ISS, so a lost first segment is fast-retransmitted.
//= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
//= type=test
#[test]
fn first_segment_loss_is_fast_retransmitted() {
    // RFC 6582 §3.2 step 1: `recover` starts at the ISS, so three duplicate
    // ACKs of the very first data byte (the first segment lost) are a fast
    // retransmit like any other — not a wait for the RTO.
    let mut h = Harness::new(newreno);
    let c = open(&mut h, 8080, Duration::from_millis(100), 65535, |s| {
        s.mss(1000)
    });
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    for _ in 0..3 {
        h.send(ack(&c, 0));
    }
    let out = segs(&mut h);
    assert_eq!(brief(&out), [(ours(&c, 0), 1000)], "fast retransmit");
    assert_eq!(h.stack.counters().tcp_fast_retrans, 1);
}

/// RFC 6675 §5: with SACK, a lost first segment starts loss recovery (no `recover` gate).
//= https://www.rfc-editor.org/rfc/rfc6675#section-5
//= type=test
#[test]
fn first_segment_loss_starts_sack_recovery() {
    // RFC 6675 §5: with SACK, loss recovery starts once DupThresh duplicate
    // ACKs arrive or IsLost(HighACK + 1) — there is no `recover` gate — so a
    // lost first segment is retransmitted at once.
    let mut h = Harness::new(newreno);
    let c = open(&mut h, 8080, Duration::from_millis(100), 65535, |s| {
        s.mss(1000).sack_perm()
    });
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    h.send(ack(&c, 0).sack(&[(ours(&c, 1000), ours(&c, 2000))]));
    h.send(ack(&c, 0).sack(&[(ours(&c, 1000), ours(&c, 3000))]));
    h.send(ack(&c, 0).sack(&[(ours(&c, 1000), ours(&c, 4000))]));
    let out = segs(&mut h);
    assert_eq!(brief(&out), [(ours(&c, 0), 1000)], "SACK recovery");
    assert_eq!(h.stack.counters().tcp_sack_recoveries, 1);
}

/// RFC 3042 §2: each of the first two dup ACKs releases one new segment, cwnd unchanged.
//= https://www.rfc-editor.org/rfc/rfc3042#section-2
//= type=test
#[test]
fn limited_transmit_on_first_two_dupacks() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    app_send(&mut h, &c, vec![1; 20_000]);
    assert_eq!(segs(&mut h).len(), 11);
    for i in 0..2u32 {
        h.send(ack(&c, b));
        let out = segs(&mut h);
        assert_eq!(brief(&out), [(ours(&c, b + 11_000 + i * 1000), 1000)]);
        assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd, 11_000);
    }
    h.send(ack(&c, b));
    let out = segs(&mut h);
    assert_eq!(brief(&out)[0], (ours(&c, b), 1000), "fast retransmit");
}

/// RFC 5681 §3.2 step 2: ssthresh must not count data sent by limited transmit.
//= https://www.rfc-editor.org/rfc/rfc5681#section-3.2
//= type=test
#[test]
fn ssthresh_excludes_limited_transmit_segments() {
    // RFC 5681 §3.2 step 2: "When [RFC3042] is in use, additional data sent in
    // limited transmit MUST NOT be included in this calculation" — ssthresh is
    // half of the 11 segments in flight before the two limited transmits.
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    app_send(&mut h, &c, vec![1; 20_000]);
    assert_eq!(segs(&mut h).len(), 11);
    for _ in 0..3 {
        h.send(ack(&c, b));
    }
    assert_eq!(
        segs(&mut h).len(),
        3,
        "two limited transmits, one retransmit"
    );
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.ssthresh, 5500, "FlightSize excludes limited transmit");
    assert_eq!(info.cwnd, 8500);
}

/// RFC 6582 §3.2 step 5: a partial ACK resends the next hole and deflates cwnd.
//= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
//= type=test
#[test]
fn newreno_partial_ack_retransmits_next_hole() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    app_send(&mut h, &c, vec![1; 10_000]);
    segs(&mut h);
    for _ in 0..3 {
        h.send(ack(&c, b));
    }
    assert_eq!(brief(&segs(&mut h)), [(ours(&c, b), 1000)]);
    // Segments 0–2 arrive, segment 3 was lost as well.
    h.send(ack(&c, b + 3000));
    let out = segs(&mut h);
    assert_eq!(brief(&out), [(ours(&c, b + 3000), 1000)]);
    // cwnd = 8000 − 3000 acked + 1 SMSS.
    assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd, 6000);
    assert_eq!(h.stack.counters().tcp_fast_retrans, 1);
    assert_eq!(h.stack.counters().tcp_timeouts, 0);
}

/// RFC 6582 §3.2 step 3: the full ACK sets cwnd to min(ssthresh, max(Flight, SMSS)+SMSS).
//= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
//= type=test
#[test]
fn newreno_full_ack_sets_cwnd_per_rfc6582() {
    // RFC 6582 §3.2 step 3: on the full ACK cwnd becomes
    // min(ssthresh, max(FlightSize, SMSS) + SMSS) or ssthresh — with nothing
    // left in flight that is 2·SMSS or 5000, never 1·SMSS.
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, false);
    app_send(&mut h, &c, vec![1; 10_000]);
    segs(&mut h);
    for _ in 0..3 {
        h.send(ack(&c, b));
    }
    assert_eq!(brief(&segs(&mut h)), [(ours(&c, b), 1000)]);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().ssthresh, 5000);
    h.send(ack(&c, b + 10_000));
    let cwnd = h.stack.tcp_info(c.h).unwrap().cwnd;
    assert!(
        cwnd == 2000 || cwnd == 5000,
        "cwnd after full ACK {cwnd}, want 2000 or 5000"
    );
}

/// RFC 6675 §5: SACKed data above > 2·SMSS marks a hole lost; lost holes are resent.
//= https://www.rfc-editor.org/rfc/rfc6675#section-5
//= type=test
#[test]
fn sack_recovery_retransmits_lost_holes() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let o = |n: u32| ours(&c, b + n);
    // Two segments SACKed above the hole: not yet lost.
    h.send(ack(&c, b).sack(&[(o(1000), o(3000))]));
    h.expect_silence();
    // Three: segment 0 is lost.
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    let ctr = h.stack.counters();
    assert_eq!((ctr.tcp_fast_retrans, ctr.tcp_sack_recoveries), (1, 1));
    let info = h.stack.tcp_info(c.h).unwrap();
    assert_eq!((info.ssthresh, info.cwnd), (5000, 5000));
    // Segment 5 lost too: once SACKs show it, it is retransmitted.
    h.send(ack(&c, b).sack(&[(o(6000), o(10_000)), (o(1000), o(5000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(5000), 1000)]);
    // Everything acknowledged: recovery over, no timeout on the way.
    h.send(ack(&c, b + 10_000));
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_timeouts, 0);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().unacked, 0);
}

/// `TCP_INFO`'s counts follow the connection: bytes and segments sent,
/// retransmitted, acknowledged and received, and segments in flight.
#[test]
fn tcp_info_counts_what_was_sent_resent_and_acknowledged() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    let i0 = h.stack.tcp_info(c.h).unwrap();
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    assert_eq!(h.stack.tcp_info(c.h).unwrap().unacked_segs, 10);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    h.send(ack(&c, b).sack(&[(o(6000), o(10_000)), (o(1000), o(5000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(5000), 1000)]);
    h.send(ack(&c, b + 10_000));
    h.expect_silence();
    let i1 = h.stack.tcp_info(c.h).unwrap();
    assert_eq!(
        i1.bytes_sent - i0.bytes_sent,
        12_000,
        "ten segments and two resent"
    );
    assert_eq!(i1.bytes_retrans - i0.bytes_retrans, 2_000);
    assert_eq!(i1.bytes_acked - i0.bytes_acked, 10_000);
    assert_eq!(
        i1.bytes_received, i0.bytes_received,
        "the peer sent no data"
    );
    assert_eq!(i1.segs_out - i0.segs_out, 12);
    assert_eq!(i1.segs_in - i0.segs_in, 3);
    assert_eq!(i1.unacked_segs, 0);
    // From the handshake on: the SYN counts one acknowledged.
    assert!(i0.bytes_acked >= 1 && i0.segs_in >= 1 && i0.segs_out >= 1);
}

/// Show the connection reordering (RFC 8985 §6.2 step 3): of two
/// segments, the second is SACKed, then the first arrives, never resent.
/// Returns the new SND.UNA.
fn reorder_once(h: &mut Harness, c: &Conn, b: u32) -> u32 {
    app_send(h, c, vec![1; 2000]);
    assert_eq!(segs(h).len(), 2);
    h.advance(Duration::from_millis(100));
    h.send(ack(c, b).sack(&[(ours(c, b + 1000), ours(c, b + 2000))]));
    h.send(ack(c, b + 2000));
    h.expect_silence();
    assert_eq!(h.stack.counters().tcp_retrans_segs, 0);
    b + 2000
}

/// RFC 8985 §6.2: a lost retransmission is found by RACK once a segment
/// sent no earlier than it is delivered and RACK.rtt + reo_wnd has passed,
/// and is sent again without waiting for the RTO. Step 4: until the path
/// has shown reordering, a sender in recovery keeps no reordering window,
/// so that is at once. (The reordering timer: the test below.)
//= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
//= type=test
#[test]
fn rack_without_reordering_resends_a_lost_retransmission_at_once_in_recovery() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let o = |n: u32| ours(&c, b + n);
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, b).sack(&[(o(1000), o(10_000))]));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    assert_eq!(h.stack.counters().tcp_retrans_segs, 2);
}

/// RFC 8985 §6.2 step 3: once the path has reordered, segments SACKed
/// above a hole no longer make it lost by count (RFC 6675's DupThresh):
/// the hole has RACK.rtt + min_RTT/4 to arrive. Step 4: a D-SACK (RFC 2883
/// §4: the first block below the cumulative ACK) says a retransmission was
/// needless, and the window grows by min_RTT/4 for the next round trips;
/// one beyond what was sent is not believed.
//= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
//= type=test
#[test]
fn a_dsack_widens_the_reordering_window() {
    let mut h = Harness::new(newreno);
    let (c, b) = warmed_up(&mut h, true); // min RTT 100 ms: window 25 ms
    let b = reorder_once(&mut h, &c, b);
    app_send(&mut h, &c, vec![1; 10_000]);
    assert_eq!(segs(&mut h).len(), 10);
    let o = |n: u32| ours(&c, b + n);
    h.advance(Duration::from_millis(100));
    // Three segments SACKed above segment 0: not lost by count.
    h.send(ack(&c, b).sack(&[(o(1000), o(4000))]));
    h.expect_silence();
    h.advance(Duration::from_millis(20));
    h.expect_silence();
    h.advance(Duration::from_millis(6));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    // The original was only late: both arrive, the second a duplicate.
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(1000))]));
    assert_eq!(h.stack.counters().tcp_dsack_recv, 1);
    // A block beyond SND.MAX is no D-SACK of ours.
    h.send(ack(&c, b + 10_000).sack(&[(o(0), o(20_000))]));
    assert_eq!(h.stack.counters().tcp_dsack_recv, 1);
    h.events();

    // Now the window is 50 ms.
    let b = b + 10_000;
    app_send(&mut h, &c, vec![1; 2000]);
    assert_eq!(segs(&mut h).len(), 2);
    let o = |n: u32| ours(&c, b + n);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, b).sack(&[(o(1000), o(2000))]));
    h.advance(Duration::from_millis(45));
    h.expect_silence();
    h.advance(Duration::from_millis(6));
    assert_eq!(brief(&segs(&mut h)), [(o(0), 1000)]);
    assert_eq!(h.stack.counters().tcp_retrans_segs, 2);
}

// ===== zero window, keepalive =============================================

/// RFC 9293 §3.8.6.1: zero-window probes back off and never time out while answered.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.1
//= type=test
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.2.17
//= type=test
#[test]
fn zero_window_probes_back_off_and_never_time_out() {
    let mut h = Harness::new(|c| c.tcp.data_retries = 3);
    let c = open_plain(&mut h);
    assert_eq!(app_send(&mut h, &c, vec![1; 3000]), 3000);
    h.drain();
    segs(&mut h);
    h.advance(Duration::from_millis(100));
    h.send(ack(&c, 3000).win(0));
    assert_eq!(
        h.events(),
        [Event::Sent {
            handle: c.h,
            cookie: 5,
            acked: 3000,
            window: 0
        }]
    );
    assert_eq!(app_send(&mut h, &c, vec![2; 1000]), 0);
    h.drain();
    h.expect_silence();
    let base = h.stack.tcp_info(c.h).unwrap().rto;
    let max = h.stack.config().tcp.rto_max;
    for k in 0..14u32 {
        let t = run_until_output(&mut h, Duration::from_secs(300)).expect("probe");
        let want = (base * (1 << k)).min(max);
        assert_close(t, want, "persist interval");
        let p = h.expect_tcp();
        assert!(p.payload.is_empty() && p.flags == Flags::default(), "{p:?}");
        assert_eq!(p.seq, ours(&c, 3000).wrapping_sub(1));
        assert_eq!(p.ack, Some(theirs(0)));
        h.expect_silence();
        h.send(ack(&c, 3000).win(0));
        h.expect_silence();
    }
    assert_eq!(h.stack.counters().tcp_zero_window_probes, 14);
    assert_eq!(h.stack.tcp_state(c.h).unwrap(), State::Established);
    assert!(h.events().is_empty());
    // The window opens.
    h.send(ack(&c, 3000).win(5000));
    assert_eq!(
        h.events(),
        [Event::Sent {
            handle: c.h,
            cookie: 5,
            acked: 0,
            window: 5000
        }]
    );
    assert_eq!(app_send(&mut h, &c, vec![3; 5000]), 5000);
    let out = segs(&mut h);
    assert_eq!(bytes(&out), 5000);
    assert_eq!(out[0].seq, ours(&c, 3000));
}

/// An application that asks the send space and holds back what does not
/// fit (the sockets service) says so with `tcp_send_blocked`: the zero
/// window is probed (RFC 9293 §3.8.6.1), and when the peer opens it by a
/// pure window update — acknowledging nothing new, as a peer whose
/// receive ring filled does once its program reads — a `Sent` event
/// says so. Without the call nothing is probed and the update passes
/// unseen: the sender waited for ever (redis replication and iperf3
/// between two programs on one service stalled).
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.1
//= type=test
#[test]
fn a_sender_holding_data_back_hears_of_the_window_opening() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    assert_eq!(app_send(&mut h, &c, vec![1; 3000]), 3000);
    h.drain();
    segs(&mut h);
    h.send(ack(&c, 3000).win(0));
    assert_eq!(h.events().len(), 1, "the acknowledgement's Sent");
    assert_eq!(h.stack.tcp_send_space(c.h).unwrap(), 0);
    // Unmarked: the opening is not reported.
    h.send(ack(&c, 3000).win(1000));
    assert!(h.events().is_empty());
    h.send(ack(&c, 3000).win(0));
    h.stack.tcp_send_blocked(h.now, c.h).unwrap();
    let t = run_until_output(&mut h, Duration::from_secs(10)).expect("a zero-window probe");
    assert!(t <= Duration::from_secs(2), "probed after {t:?}");
    let p = h.expect_tcp();
    assert!(p.payload.is_empty(), "{p:?}");
    assert_eq!(p.seq, ours(&c, 3000).wrapping_sub(1));
    h.send(ack(&c, 3000).win(0));
    h.expect_silence();
    h.send(ack(&c, 3000).win(5000));
    assert_eq!(
        h.events(),
        [Event::Sent {
            handle: c.h,
            cookie: 5,
            acked: 0,
            window: 5000
        }]
    );
    assert_eq!(app_send(&mut h, &c, vec![2; 5000]), 5000);
    assert_eq!(bytes(&segs(&mut h)), 5000);
}

/// A zero-window probe acknowledges too, so while the peer's data is out
/// of order it carries the SACK blocks every such ACK carries (RFC 2018
/// §4: "SHOULD be included in all ACKs which do not ACK the highest
/// sequence number in the data receiver's queue"; Linux's probe does).
/// Until 2026-12-01 it carried a timestamp only, and a D-SACK waiting for
/// its ACK was taken as sent with it.
//= https://www.rfc-editor.org/rfc/rfc2018#section-4
//= type=test
#[test]
fn a_zero_window_probe_carries_the_sack_blocks() {
    let mut h = Harness::new(|_| {});
    let c = open_sack(&mut h);
    assert_eq!(app_send(&mut h, &c, vec![1; 1000]), 1000);
    segs(&mut h);
    h.send(ack(&c, 1000).win(0));
    h.events();
    h.stack.tcp_send_blocked(h.now, c.h).unwrap();
    // The peer's data from byte 100 on, the first 100 missing.
    h.send(data(&c, 100, &[9; 50]).ack(ours(&c, 1000)).win(0));
    let a = h.expect_tcp();
    assert_eq!(sacks(&a), [(theirs(100), theirs(150))]);
    run_until_output(&mut h, Duration::from_secs(10)).expect("a zero-window probe");
    let p = h.expect_tcp();
    assert!(p.payload.is_empty(), "{p:?}");
    assert_eq!(p.seq, ours(&c, 1000).wrapping_sub(1));
    assert_eq!(p.ack, Some(theirs(0)));
    assert_eq!(sacks(&p), [(theirs(100), theirs(150))]);
}

/// RFC 1122 §4.2.3.6: keepalive probes after idle; answered they keep, unanswered they kill.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.6
//= type=test
#[test]
fn keepalive_probes_and_timeout() {
    let mut h = Harness::new(|c| {
        c.tcp.keepalive_idle = Duration::from_secs(10);
        c.tcp.keepalive_interval = Duration::from_secs(1);
        c.tcp.keepalive_probes = 3;
    });
    // Off by default, and the default idle time is at least two hours.
    let defaults = ixora_core::TcpConfig::default();
    assert!(!defaults.keepalive);
    assert!(defaults.keepalive_idle >= Duration::from_secs(2 * 3600));
    let c = open_plain(&mut h);
    assert_eq!(run_until_output(&mut h, Duration::from_secs(3600)), None);
    // Idle counts from the last segment received.
    h.send(ack(&c, 0));
    h.stack.tcp_set_keepalive(c.h, true).unwrap();
    let t = run_until_output(&mut h, Duration::from_secs(60)).unwrap();
    assert_close(t, Duration::from_secs(10), "first keepalive");
    let p = h.expect_tcp();
    assert!(p.payload.is_empty());
    assert_eq!(p.seq, ours(&c, 0).wrapping_sub(1));
    assert_eq!(h.stack.counters().tcp_keepalive_probes, 1);
    // Answered: the connection lives, the next probe after another idle.
    h.send(ack(&c, 0));
    h.expect_silence();
    let t = run_until_output(&mut h, Duration::from_secs(60)).unwrap();
    assert_close(t, Duration::from_secs(10), "keepalive after an answer");
    h.expect_tcp();
    // Unanswered: two more probes one interval apart, then death.
    for _ in 0..2 {
        let t = run_until_output(&mut h, Duration::from_secs(60)).unwrap();
        assert_close(t, Duration::from_secs(1), "keepalive interval");
        h.expect_tcp();
    }
    assert!(h.events().is_empty());
    assert_eq!(run_until_output(&mut h, Duration::from_secs(60)), None);
    assert_eq!(h.stack.counters().tcp_keepalive_probes, 4);
    assert_timed_out(&mut h, &c);
}

/// The connection `c` died of a timeout (its only event).
fn assert_timed_out(h: &mut Harness, c: &Conn) {
    assert_eq!(
        h.events(),
        [Event::Dead {
            handle: c.h,
            cookie: 5,
            reason: DeadReason::TimedOut
        }]
    );
}

/// A connection's own keepalive timing (Linux's TCP_KEEPIDLE, TCP_KEEPINTVL,
/// TCP_KEEPCNT) replaces the configuration's: first probe after its idle
/// time, then its interval, dead after its count unanswered.
//= https://www.rfc-editor.org/rfc/rfc1122#section-4.2.3.6
//= type=test
#[test]
fn keepalive_timing_per_connection() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    h.send(ack(&c, 0));
    h.stack.tcp_set_keepalive(c.h, true).unwrap();
    h.stack.tcp_set_keepalive_timing(c.h, 30, 5, 2).unwrap();
    let t = run_until_output(&mut h, Duration::from_secs(3600)).unwrap();
    assert_close(
        t,
        Duration::from_secs(30),
        "first keepalive at TCP_KEEPIDLE",
    );
    h.expect_tcp();
    let t = run_until_output(&mut h, Duration::from_secs(3600)).unwrap();
    assert_close(t, Duration::from_secs(5), "next at TCP_KEEPINTVL");
    h.expect_tcp();
    assert!(h.events().is_empty());
    // TCP_KEEPCNT = 2 unanswered: dead one interval later.
    assert_eq!(run_until_output(&mut h, Duration::from_secs(60)), None);
    assert_timed_out(&mut h, &c);
}

// ===== initial window, state size =========================================

/// RFC 6928 §2: the initial window is min(10·MSS, max(2·MSS, 14600)).
//= https://www.rfc-editor.org/rfc/rfc6928#section-2
//= type=test
#[test]
fn initial_window_is_iw10() {
    for (mtu, peer_mss, want) in [
        (1500u16, Some(1460u16), 14_600usize),
        (1500, None, 5360),
        (9000, Some(8960), 17_920),
    ] {
        let mut h = Harness::new(|c| c.mtu = mtu);
        let c = open(
            &mut h,
            8080,
            Duration::from_millis(100),
            65535,
            |s| match peer_mss {
                Some(m) => s.mss(m),
                None => s,
            },
        );
        assert_eq!(h.stack.tcp_info(c.h).unwrap().cwnd as usize, want);
        app_send(&mut h, &c, vec![1; 60_000]);
        let out = segs(&mut h);
        assert_eq!(bytes(&out), want, "mtu {mtu}, peer MSS {peer_mss:?}");
        let mss = usize::from(peer_mss.unwrap_or(536));
        assert!(out.iter().all(|s| s.payload.len() == mss));
    }
}

/// IX: per-connection state (buffers aside) is at most 512 bytes.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.3.1
//= type=test
#[test]
fn connection_state_is_small() {
    let n = TestStack::connection_state_size();
    println!("connection state: {n} bytes");
    assert!(n <= 512, "connection state is {n} bytes");
}

/// A connection given a new cookie (the socket service moving it to
/// another application) names the new one in every event from then on,
/// the events already pending included; a stale handle is refused.
#[test]
fn a_new_cookie_names_the_connection_in_its_pending_and_later_events() {
    let mut h = Harness::new(|_| {});
    let c = open_plain(&mut h);
    h.send(data(&c, 0, b"before"));
    // The Recv event is pending, not yet taken, when the cookie changes.
    h.stack.tcp_set_cookie(c.h, 9).unwrap();
    assert_eq!(
        h.events(),
        [Event::Recv {
            handle: c.h,
            cookie: 9,
            readable: 6
        }]
    );
    h.send(Seg::to(c.port).seq(theirs(6)).ack(ours(&c, 0)).fin());
    let evs = h.events();
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::PeerClosed { handle, cookie: 9 } if *handle == c.h)),
        "{evs:?}"
    );
    h.stack.tcp_abort(h.now, c.h).unwrap();
    assert_eq!(
        h.stack.tcp_set_cookie(c.h, 10),
        Err(ixora_core::Error::InvalidHandle)
    );
}

// ===== receive-buffer auto-tuning =========================================

/// What a buffer of `buf` bytes may end up holding: each ACK rounds the
/// window up to the scale's unit (128 bytes at shift 7) so that its edge
/// never retracts (RFC 7323 §2.4), as Linux's `tcp_select_window` aligns
/// it; against a reader that stopped, the edge so creeps by up to a unit
/// per ACK (an ACK per two segments): under 4.5% of the buffer.
fn with_creep(buf: usize) -> usize {
    buf + buf / 2920 * 128 + 1460
}

/// A peer that sends, each 10 ms round trip, all the window allows (at
/// most `cap` segments), to an application that reads all of it (`read`)
/// or none; returns the bytes the peer sent over `rounds`.
fn fill_rounds(h: &mut Harness, c: &Conn, seq: &mut u32, rounds: usize, read: bool) -> usize {
    let mut sent = 0;
    for _ in 0..rounds {
        let n = (h.stack.tcp_info(c.h).unwrap().rcv_wnd / 1460).min(1200);
        for _ in 0..n {
            h.send(data(c, *seq, &[7; 1460]));
            *seq += 1460;
        }
        h.drain();
        let _acks = segs(h);
        let r = h.stack.tcp_readable(c.h).unwrap();
        if read {
            h.stack.tcp_recv_done(h.now, c.h, r).unwrap();
        }
        sent += n as usize * 1460;
        h.advance(Duration::from_millis(10));
        h.drain();
        let _updates = segs(h);
    }
    sent
}

/// A connection to a listener of `port` over a 10 ms round trip (peer MSS
/// 1460, window scale 7) whose application reads everything for `read` round trips, then nothing
/// for `idle`: what the stack then holds unread, and the peer's next
/// sequence offset.
fn held_after(h: &mut Harness, port: u16, read: usize, idle: usize) -> (Conn, usize, u32) {
    let c = open(h, port, Duration::from_millis(10), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    let mut seq = 0;
    fill_rounds(h, &c, &mut seq, read, true);
    fill_rounds(h, &c, &mut seq, idle, false);
    let held = h.stack.tcp_readable(c.h).unwrap();
    (c, held, seq)
}

/// Receive-buffer auto-tuning (Linux `tcp_rcv_space_adjust`): while the
/// application reads everything each round trip, the window grows past
/// `tcp.recv_buffer` (256 KiB) towards `tcp.recv_buffer_max`; once it
/// stops reading, what arrives fills the grown buffer, the window shuts
/// (less than a segment left), and round trips without reading neither
/// open nor grow it.
#[test]
fn the_receive_window_grows_while_the_application_reads() {
    let mut h = Harness::new(|_| {});
    let (c, held, mut seq) = held_after(&mut h, 8080, 8, 6);
    assert!(held > 1 << 20, "held {held} after eight read round trips");
    assert!(
        held <= with_creep(6 << 20),
        "held {held} past tcp.recv_buffer_max"
    );
    assert!(h.stack.tcp_info(c.h).unwrap().rcv_wnd < 1460);
    assert_eq!(fill_rounds(&mut h, &c, &mut seq, 3, false), 0);
}

/// `tcp_info`'s `rcv_space` (Linux's `tcpi_rcv_space`) is what the tuning
/// measured: ten of our segments at first, then what a round trip read
/// when that grew the buffer; it does not fall when the reader stops.
#[test]
fn rcv_space_follows_what_a_round_trip_read() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(10), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    let space = |h: &Harness| h.stack.tcp_info(c.h).unwrap().rcv_space;
    assert_eq!(space(&h), 14_600, "ten segments of 1460");
    let mut seq = 0;
    fill_rounds(&mut h, &c, &mut seq, 6, true);
    let grown = space(&h);
    assert!(
        grown > 256 * 1024,
        "rcv_space {grown} after six read round trips"
    );
    fill_rounds(&mut h, &c, &mut seq, 3, false);
    assert_eq!(space(&h), grown);
}

/// A reader that never reads keeps the initial buffer: the window never
/// offers more than `tcp.recv_buffer`, however many round trips pass.
#[test]
fn a_connection_whose_application_does_not_read_keeps_its_initial_buffer() {
    let mut h = Harness::new(|_| {});
    let (c, held, _) = held_after(&mut h, 8080, 0, 10);
    assert!(held <= with_creep(256 * 1024), "held {held}");
    assert!(h.stack.tcp_info(c.h).unwrap().rcv_wnd < 1460);
}

/// `rcv_tune_memory` bounds the growth of all connections' receive
/// buffers together (a socket service's programs that read fast and then
/// stop cannot make it hold more than that beyond their initial windows).
#[test]
fn receive_buffer_growth_is_bounded_stack_wide() {
    let mut h = Harness::new(|c| c.rcv_tune_memory = 100_000);
    let (_, held, _) = held_after(&mut h, 8080, 8, 4);
    assert!(held <= with_creep(256 * 1024 + 100_000), "held {held}");
    assert!(
        held > with_creep(256 * 1024),
        "held {held}: it grew as far as allowed"
    );
}

/// The stack-wide room for growth comes back when a connection that grew
/// goes away: a long-running stack does not run out of it.
#[test]
fn receive_buffer_growth_room_returns_when_the_connection_ends() {
    let mut h = Harness::new(|c| c.rcv_tune_memory = 100_000);
    let (a, _, _) = held_after(&mut h, 8080, 8, 0);
    h.stack.tcp_abort(h.now, a.h).unwrap();
    h.drain();
    let _rst = segs(&mut h);
    let (_, held, _) = held_after(&mut h, 8081, 8, 4);
    assert!(
        held > with_creep(256 * 1024),
        "held {held}: the second connection grew too"
    );
}

/// `SO_RCVBUF` (`tcp_lock_buffers`): a connection whose application
/// reads everything keeps the buffer it was given — it does not auto-tune
/// — and the window never offers more than that.
#[test]
fn a_locked_receive_buffer_does_not_grow() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(10), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    h.stack.tcp_lock_buffers(c.h, Some(100_000), None).unwrap();
    let mut seq = 0;
    fill_rounds(&mut h, &c, &mut seq, 8, true);
    fill_rounds(&mut h, &c, &mut seq, 4, false);
    let held = h.stack.tcp_readable(c.h).unwrap();
    assert!(held <= with_creep(100_000), "held {held}");
    assert!(held > 90_000, "held {held}: the locked buffer filled");
}

/// `SO_RCVBUF` and `SO_SNDBUF` set on a listener reach the connections it
/// makes, as a Linux listener's accepted sockets inherit them: the SYN-ACK
/// offers the receive buffer's window (whether the connection is kept in
/// the SYN queue or made from a SYN cookie), the window never offers more,
/// and `send` takes no more than the send buffer.
#[test]
fn a_listeners_locked_buffers_reach_its_connections() {
    for cookies in [false, true] {
        let mut h = Harness::new(|c| c.tcp.syn_backlog = 1);
        h.stack.tcp_listen(8080, None, 3).unwrap();
        h.stack
            .tcp_listener_lock_buffers(8080, Some(4000), Some(8192))
            .unwrap();
        if cookies {
            // Another peer's SYN fills the SYN queue: the next is
            // answered with a cookie.
            h.send(Seg {
                src_port: 40_001,
                ..Seg::to(8080).syn()
            });
            assert_eq!(h.expect_tcp().win, 4000);
        }
        h.send(Seg::to(8080).syn().mss(1460).wscale(7).ts(1000, 0));
        let synack = h.expect_tcp();
        assert_eq!(synack.win, 4000, "cookies {cookies}");
        assert_eq!(h.stack.counters().tcp_syncookies_sent, u64::from(cookies));
        let (tsval, _) = synack.opts.timestamp.unwrap();
        h.send(
            Seg::to(8080)
                .seq(theirs(0))
                .ack(synack.seq + 1)
                .win(65535)
                .ts(1001, tsval),
        );
        let handle = match h.events().as_slice() {
            [Event::Knock { handle, .. }] => *handle,
            other => panic!("{other:?}"),
        };
        h.stack.tcp_accept(handle, 5).unwrap();
        let c = Conn {
            h: handle,
            port: 8080,
            iss: synack.seq,
        };
        assert!(h.stack.tcp_info(c.h).unwrap().rcv_wnd <= 4000);
        let mut seq = 0;
        fill_rounds(&mut h, &c, &mut seq, 3, true);
        assert!(h.stack.tcp_info(c.h).unwrap().rcv_wnd <= 4000 + 128);
        let took = h.stack.tcp_send(h.now, c.h, vec![1u8; 100_000]).unwrap();
        assert_eq!(took, 8192, "cookies {cookies}");
    }
}

/// A receive buffer fixed below one segment (`SO_RCVBUF` 1000, Linux's
/// least, 1,152 bytes of window) still offers two segments of our MSS,
/// and a window left below a segment opens again once read: a sender
/// that, as Linux's, sends only whole segments inside the window would
/// otherwise send one window's worth per persist timeout (200 ms).
#[test]
fn a_tiny_receive_buffer_still_offers_two_whole_segments() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(10), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    h.stack.tcp_lock_buffers(c.h, Some(1152), None).unwrap();
    let mut seq = 0;
    // The window offered before is used up first.
    fill_rounds(&mut h, &c, &mut seq, 3, true);
    let wnd = h.stack.tcp_info(c.h).unwrap().rcv_wnd;
    assert!((2920..=2920 + 128).contains(&wnd), "window {wnd}");
    let sent = fill_rounds(&mut h, &c, &mut seq, 4, true);
    assert_eq!(sent, 4 * 2920, "two whole segments each round trip");
}

/// A receive buffer made smaller under a connection that holds more
/// unread takes back no window already offered (RFC 9293 §3.8.6.2.2:
/// the right edge SHOULD NOT move left) and no byte it holds; once the
/// application has read them, the window offers no more than the new
/// buffer.
//= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.2
//= type=test
#[test]
fn a_smaller_receive_buffer_takes_back_no_window() {
    let mut h = Harness::new(|_| {});
    let c = open(&mut h, 8080, Duration::from_millis(10), 65535, |s| {
        s.mss(1460).wscale(7)
    });
    let mut seq = 0;
    for _ in 0..20 {
        h.send(data(&c, seq, &[7; 1460]));
        seq += 1460;
    }
    h.drain();
    let acks = segs(&mut h);
    let last = acks.last().expect("ACKs");
    let edge = last.ack.unwrap().wrapping_add(u32::from(last.win) << 7);
    h.stack.tcp_lock_buffers(c.h, Some(4096), None).unwrap();
    // The peer may still send up to the edge it was offered: taken.
    let mut room = edge.wrapping_sub(theirs(seq));
    assert!(room > 40_000, "room {room}");
    while room > 0 {
        let n = room.min(1460);
        h.send(data(&c, seq, &vec![7; n as usize]));
        seq += n;
        room -= n;
    }
    h.drain();
    for a in segs(&mut h) {
        let e = a.ack.unwrap().wrapping_add(u32::from(a.win) << 7);
        assert!(e.wrapping_sub(edge) as i32 >= 0, "edge {e} left of {edge}");
    }
    let held = h.stack.tcp_readable(c.h).unwrap();
    assert_eq!(held, seq as usize, "bytes within the window were dropped");
    h.stack.tcp_recv_done(h.now, c.h, held).unwrap();
    h.drain();
    let _ = segs(&mut h);
    // What is left of the old offer (its edge crept by the ACKs' rounding
    // to the scale's unit meanwhile) is used up in a few read round trips.
    fill_rounds(&mut h, &c, &mut seq, 3, true);
    let info = h.stack.tcp_info(c.h).unwrap();
    assert!(info.rcv_wnd <= 4096 + 128, "{info:?}");
}
