//! Control requests of a well-behaved application against the service, in
//! process (the testkit's loopback wire and echo peer).

use ixora_channel::ctl::{op, Msg};
use ixora_channel::layout::{self, pack, req};
use ixora_service::testkit::{RawApp, Rig, ECHO_PORT, PEER_IP, SERVICE_IP};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The service keeps spare TCP sockets in each app's up header: the app
/// takes one and asks for its connect in shared memory (`req::CONNECT`
/// and the destination), with no request; the service connects it, and
/// puts a new spare in the empty entry. Spares are not the app's sockets
/// until taken (not counted). A connect refused at once (to port 0) is
/// left on the socket as its error.
#[test]
fn a_spare_socket_connects_without_a_request() {
    let rig = Rig::start("spare").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let h = app.regions().up_header();
    let sockets = || {
        app.sync().unwrap();
        app.stats().unwrap()["apps"][0]["sockets"].as_u64().unwrap()
    };
    let entries = || {
        h.spares
            .iter()
            .map(|e| e.load(Ordering::Acquire))
            .collect::<Vec<_>>()
    };
    assert!(
        entries().iter().all(|&e| layout::spare_of(e).is_some()),
        "{:?}",
        entries()
    );
    assert_eq!(sockets(), 0, "spares are not the app's sockets");

    let take = |dest: u64| {
        let s = layout::spare_of(h.spares[0].swap(0, Ordering::AcqRel)).expect("a spare");
        let u = app.regions().up_slot(s);
        u.dest.store(dest, Ordering::Relaxed);
        u.req.fetch_or(req::CONNECT, Ordering::Release);
        app.kick(s);
        s
    };
    let s = take(pack(u32::from(PEER_IP), ECHO_PORT));
    app.wait_established(s, Duration::from_secs(5)).unwrap();
    assert_eq!(app.write(s, b"spare"), 5);
    assert_eq!(app.read_n(s, 5), b"spare");
    assert_eq!(sockets(), 1);
    let e = entries();
    assert!(
        e.iter().all(|&e| layout::spare_of(e).is_some()),
        "refilled: {e:?}"
    );
    assert!(
        !e.contains(&layout::spare_entry(s)),
        "{s} is no spare now: {e:?}"
    );

    // Port 0: refused at once, as a peer would; the socket carries the
    // error.
    let s2 = take(pack(u32::from(PEER_IP), 0));
    app.sync().unwrap();
    let d = app.regions().down_slot(s2);
    assert_eq!(d.state.load(Ordering::Acquire), layout::state::CLOSED);
    assert_eq!(
        d.err.load(Ordering::Acquire),
        libc::ECONNREFUSED,
        "an error is left on the socket"
    );
    assert_eq!(
        app.regions().up_slot(s2).req.load(Ordering::Acquire) & req::CONNECT,
        0
    );
    assert!(rig.alive());
    drop(app);
    rig.finish().unwrap();
}

/// A connect of a socket whose connection failed — which the shim asks
/// only after a call told the program so — starts a new connection on
/// the same socket, as Linux's `tcp_disconnect` after `sock_error` (a
/// reset SYN-SENT connection goes to CLOSED, RFC 9293 §3.10.7.1): from
/// the port the program bound it to, with its error and flags cleared
/// and what its transmit ring held dropped. A connected socket still
/// says `EISCONN`.
#[test]
fn a_failed_connection_connects_again() {
    let rig = Rig::start("reconnect").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let s = app.socket().unwrap();
    let b = app
        .request(Msg::new(op::BIND, s, pack(0, 7300) as i64, 0))
        .unwrap();
    assert_eq!(b.a, 0, "{b:?}");
    // Nothing listens on the peer's port 9: the peer resets the SYN.
    app.connect(s, PEER_IP, 9).unwrap();
    let d = app.regions().down_slot(s);
    let t = std::time::Instant::now();
    while app.state(s) != layout::state::CLOSED && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(app.state(s), layout::state::CLOSED);
    assert_eq!(d.err.load(Ordering::Acquire), libc::ECONNREFUSED);
    assert_eq!(
        d.flags.load(Ordering::Acquire) & layout::flag::ERROR,
        layout::flag::ERROR
    );
    // Bytes left in the transmit ring are not the next connection's.
    assert_eq!(app.write(s, b"stale"), 5);
    app.sync().unwrap();

    app.connect(s, PEER_IP, ECHO_PORT).unwrap();
    app.wait_established(s, Duration::from_secs(5)).unwrap();
    assert_eq!(d.err.load(Ordering::Acquire), 0);
    assert_eq!(d.flags.load(Ordering::Acquire), 0);
    assert_eq!(layout::unpack(d.local.load(Ordering::Acquire)).1, 7300);
    assert_eq!(
        d.tx_head.load(Ordering::Acquire),
        app.regions().up_slot(s).tx_tail.load(Ordering::Acquire),
        "the stale bytes were dropped"
    );
    assert_eq!(app.write(s, b"fresh"), 5);
    assert_eq!(app.read_n(s, 5), b"fresh");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(app.read(s, 16), b"", "nothing stale came back");
    let again = app.connect(s, PEER_IP, ECHO_PORT).unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EISCONN));
    assert!(rig.alive());
    drop(app);
    rig.finish().unwrap();
}

/// `SOCKET` with a follow-up (`c`): the socket and its connect or bind in
/// one round trip, which is how the shim makes a socket Ixora's. A
/// follow-up that fails leaves no socket behind (the service closes it)
/// and its error is the reply's; one that is neither a bind nor a connect
/// is refused before any socket is made.
#[test]
fn a_socket_is_made_and_connected_or_bound_in_one_request() {
    let rig = Rig::start("fused").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let fused = |then: u32, a: i64, b: u64| {
        app.request(Msg {
            c: u64::from(then) | b << 32,
            ..Msg::new(op::SOCKET, 0, 0, a as u64)
        })
        .unwrap()
    };
    let open = || {
        app.sync().unwrap();
        app.stats().unwrap()["apps"][0]["sockets"].as_u64().unwrap()
    };

    // Connected: a conversation with the echo peer.
    let r = fused(op::CONNECT, pack(u32::from(PEER_IP), ECHO_PORT) as i64, 0);
    assert!(r.a >= 0, "socket and connect: {r:?}");
    let s = r.slot;
    app.wait_established(s, Duration::from_secs(5)).unwrap();
    assert_eq!(app.write(s, b"ping"), 4);
    assert_eq!(app.read_n(s, 4), b"ping");

    // A bind that fails: its error, and no socket left open.
    let l = app.socket().unwrap();
    app.listen(l, 7200).unwrap();
    let before = open();
    let r = fused(op::BIND, pack(0, 7200) as i64, 0);
    assert_eq!(r.a, -i64::from(libc::EADDRINUSE), "{r:?}");
    assert_eq!(open(), before, "the failed socket was closed");

    // A bound socket: the port is free.
    let r = fused(op::BIND, pack(0, 7201) as i64, 0);
    assert!(r.a >= 0, "socket and bind: {r:?}");
    assert_eq!(open(), before + 1);

    // Only bind and connect follow.
    for then in [op::LISTEN, op::SOCKET, u32::MAX] {
        let r = fused(then, 16, 0);
        assert_eq!(r.a, -i64::from(libc::EINVAL), "follow-up {then}: {r:?}");
    }
    assert_eq!(open(), before + 1, "nothing made for a refused follow-up");
    assert!(rig.alive());
    drop(app);
    rig.finish().unwrap();
}

/// `REMAP` (what a program `exec`ed with Ixora sockets open asks): the
/// application's regions again, on its own control connection — the same
/// app, its sockets and unread bytes as they were, both ways. A
/// connection that attached nothing gets `ENOTCONN`.
#[test]
fn an_execed_image_maps_its_application_again() {
    let rig = Rig::start("remap").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let s = app.connect_echo(Duration::from_secs(5)).unwrap();
    assert_eq!(app.write(s, b"before"), 6);
    // Echoed, and left unread in the ring by the old image.
    let again = app.remap().unwrap();
    assert_eq!(again.id, app.id);
    assert_eq!(again.read_n(s, 6), b"before");
    assert_eq!(again.write(s, b"after"), 5);
    assert_eq!(again.read_n(s, 5), b"after");
    assert_eq!(
        app.regions().up_slot(s).rx_head.load(Ordering::Acquire),
        11,
        "one application: the first mapping sees the reads of the second"
    );
    drop(app);

    let stranger = ixora_channel::os::connect_once(&rig.socket).unwrap();
    let err = ixora_channel::attach::remap(
        std::os::fd::AsFd::as_fd(&stranger),
        std::time::Instant::now() + Duration::from_secs(5),
    )
    .err()
    .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::NotConnected, "{err}");
    assert!(rig.alive());
    drop(again);
    rig.finish().unwrap();
}

/// An idle service with an application wakes rarely: its naps grow from
/// 1 ms after work to 16 ms while nothing happens (it woke every 1 ms
/// before, 2.4% of a CPU doing nothing). What a program writes while the
/// service sleeps, with no doorbell rung after it (the shim rings at the
/// program's next blocking call or poll, not at each write), still goes
/// out within the longest nap.
#[test]
fn an_idle_service_naps_longer_and_still_sends_what_was_written_unrung() {
    let rig = Rig::start("naps").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let s = app.connect_echo(Duration::from_secs(5)).unwrap();
    app.set_ringing(false);
    let idle = Duration::from_millis(1500);
    for round in 0..3 {
        // Long enough for the naps to reach their longest.
        std::thread::sleep(idle / 3);
        let t = std::time::Instant::now();
        assert_eq!(app.write(s, b"unrung"), 6);
        let mut got = Vec::new();
        while got.len() < 6 {
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "round {round}: bytes written while the service slept, unrung, \
                 not sent within 1 s (got {got:?})"
            );
            got.extend(app.read(s, 6 - got.len()));
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got, b"unrung");
    }
    let rep = rig.finish().unwrap();
    let sleeps = rep.cores[0].sleeps;
    // About 100 at 16 ms over the 1.5 s idle (and some after each echo);
    // 1,500 and more when it woke every 1 ms.
    assert!(sleeps < 500, "the idle service slept {sleeps} times");
}

/// The service says in a connection's down slot whether the stack's send
/// buffer had room beyond what the transmit ring held
/// (`flag::STACK_FULL`): clear while the peer keeps up, so a non-blocking
/// send that finds the ring full hands the service the CPU; set once a
/// peer that stopped reading has filled the stack, so such a send says so
/// at once; clear again after the peer read.
#[test]
fn the_stack_says_when_its_send_buffer_is_full() {
    let rig = Rig::start("stackfull").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let s = app.connect_echo(Duration::from_secs(5)).unwrap();
    let full =
        || app.regions().down_slot(s).flags.load(Ordering::Acquire) & layout::flag::STACK_FULL != 0;
    // A ring's worth, echoed and read back: room left.
    let chunk = vec![b'f'; 16 * 1024];
    let mut wrote = 0;
    until("a ring's worth taken", || {
        wrote += app.write(s, &chunk[wrote..]);
        wrote == chunk.len()
    });
    until("the echo read back", || {
        wrote -= app.read(s, wrote).len();
        wrote == 0
    });
    assert!(
        !full(),
        "STACK_FULL after the stack took a ring's worth and the peer kept up"
    );
    // Not reading the echoes: the peer's writes stop, then its reads,
    // then ours; the stack's buffer fills.
    let mut written = 0;
    let t = std::time::Instant::now();
    while !full() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "STACK_FULL not set after {written} bytes written unread"
        );
        written += app.write(s, &chunk);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Drained: the flag clears at the next look at the ring.
    let mut got = 0;
    until("the flag cleared once read", || {
        got += app.read(s, 1 << 20).len();
        if app.write(s, b"x") == 1 {
            written += 1;
        }
        !full()
    });
    assert!(
        written > 16 * 1024,
        "only {written} bytes written before the stack filled"
    );
    app.close(s);
}

/// Poll `f` until it holds (3 s at most).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{what}: not within 3 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Connections that complete their handshake while their listener's app
/// has no free socket slot are not reset: they wait in the stack's accept
/// queue, and the app's next free slots take them, in the order they came.
/// When the listener closes, those still waiting are reset with it, as
/// Linux resets a closed listener's queue.
#[test]
fn connections_wait_for_a_slot_in_order_and_die_with_their_listener() {
    let rig = Rig::start("held").unwrap();
    let (a, b) = (RawApp::attach(&rig).unwrap(), RawApp::attach(&rig).unwrap());
    let sa = ixora_service::testkit::SERVICE_IP;
    let l = a.socket().unwrap();
    a.listen(l, 7400).unwrap();
    // Every other slot of a in use.
    let mut fill = Vec::new();
    while let Ok(s) = a.socket() {
        fill.push(s);
    }
    let conns: Vec<u32> = (0..6)
        .map(|_| {
            let c = b.socket().unwrap();
            b.connect(c, sa, 7400).unwrap();
            b.wait_established(c, Duration::from_secs(5)).unwrap();
            c
        })
        .collect();
    let acc_tail = || a.regions().down_slot(l).acc_tail.load(Ordering::Acquire);
    let waiting = || a.stats().unwrap()["accept_waits"]["waiting"].as_u64();
    until("six connections waiting", || waiting() == Some(6));
    assert_eq!(acc_tail(), 0, "a connection was queued without a slot");
    // Two slots free: the first two connections take them.
    for s in fill.drain(..2) {
        a.close(s);
        a.kick(s);
    }
    until("two connections queued", || acc_tail() == 2);
    for (k, &c) in conns[..2].iter().enumerate() {
        let e = a.regions().acc_entry(l, k as u32).load(Ordering::Acquire);
        let remote = a
            .regions()
            .down_slot(e as u32)
            .remote
            .load(Ordering::Acquire);
        let local = b.regions().down_slot(c).local.load(Ordering::Acquire);
        assert_eq!(remote, local, "queue entry {k} is not connection {k}");
    }
    assert_eq!(waiting(), Some(4));
    let st = a.stats().unwrap();
    assert_eq!(st["accept_waits"]["waited"], 6, "{st}");
    assert_eq!(st["rejected_connections"], 0, "{st}");
    // The listener closes: every connection not accepted is reset.
    a.close(l);
    a.kick(l);
    until("the waiting connections reset", || {
        conns
            .iter()
            .all(|&c| b.regions().down_slot(c).err.load(Ordering::Acquire) != 0)
    });
    assert_eq!(waiting(), Some(0));
    assert!(rig.alive());
    drop((a, b));
    rig.finish().unwrap();
}

/// A member of a SO_REUSEPORT group that closes resets the connections
/// waiting for it (Linux does not move a closed listener's queue to the
/// other members); the other member's keep waiting, and take slots as
/// they free.
#[test]
fn a_closing_group_member_resets_only_the_connections_waiting_for_it() {
    let rig = Rig::start("heldgroup").unwrap();
    let (a, b) = (RawApp::attach(&rig).unwrap(), RawApp::attach(&rig).unwrap());
    let sa = ixora_service::testkit::SERVICE_IP;
    let (l1, l2) = (
        a.shared_socket(false, 7401).unwrap(),
        a.shared_socket(false, 7401).unwrap(),
    );
    let mut fill = Vec::new();
    while let Ok(s) = a.socket() {
        fill.push(s);
    }
    let n = 12;
    let conns: Vec<u32> = (0..n)
        .map(|_| {
            let c = b.socket().unwrap();
            b.connect(c, sa, 7401).unwrap();
            b.wait_established(c, Duration::from_secs(5)).unwrap();
            c
        })
        .collect();
    let waiting = || a.stats().unwrap()["accept_waits"]["waiting"].as_u64();
    until("every connection waiting", || waiting() == Some(n));
    let reset = || {
        conns
            .iter()
            .filter(|&&c| b.regions().down_slot(c).err.load(Ordering::Acquire) != 0)
            .count() as u64
    };
    a.close(l1);
    a.kick(l1);
    until("the first member's connections reset", || reset() > 0);
    std::thread::sleep(Duration::from_millis(100));
    let gone = reset();
    assert!(gone < n, "the second member's connections were reset too");
    // (The first member's slot, free now, took one of the second's.)
    let queued = || a.regions().down_slot(l2).acc_tail.load(Ordering::Acquire);
    assert_eq!(
        waiting().unwrap() + u64::from(queued()),
        n - gone,
        "the second member's wait or are queued"
    );
    // Slots free: the second member takes its connections.
    for s in fill.drain(..) {
        a.close(s);
        a.kick(s);
    }
    until("the second member's connections queued", || {
        u64::from(queued()) == n - gone
    });
    assert_eq!(reset(), gone);
    assert!(rig.alive());
    drop((a, b));
    rig.finish().unwrap();
}

/// One program's transmit rings give the stack at most the service's
/// budget of bytes per engine cycle (256 KiB): a burst over many
/// connections at once waits its turn over several cycles, so that the
/// core goes back to every other program's packets in between, and every
/// connection's bytes still arrive whole and in order, its close (asked
/// while they waited) after them. Those cut short go first at the next
/// cycle; with more than two budgets' worth, some wait twice. Before the
/// budget the whole burst was copied in one look (400 connections of
/// 64 KiB held the core 8–14 ms).
#[test]
fn a_burst_over_many_connections_waits_its_turn_and_arrives_whole() {
    const N: usize = 40;
    const BUDGET: usize = 256 * 1024;
    const EACH: usize = 16 * 1024; // the rig's ring
    let rig = Rig::start("txbudget").unwrap();
    let (reader, writer) = (RawApp::attach(&rig).unwrap(), RawApp::attach(&rig).unwrap());
    let l = reader.socket().unwrap();
    reader.listen(l, 7420).unwrap();
    // Accepted as they come (the listener's backlog is 16: beyond it a
    // handshake would wait for its SYN-ACK again, a second).
    let mut accepted = Vec::new();
    let accept = |accepted: &mut Vec<u32>| {
        let up = reader.regions().up_slot(l);
        let head = up.acc_head.load(Ordering::Acquire);
        let tail = reader
            .regions()
            .down_slot(l)
            .acc_tail
            .load(Ordering::Acquire);
        for k in head..tail {
            let e = reader.regions().acc_entry(l, k).load(Ordering::Acquire);
            accepted.push(e as u32);
        }
        up.acc_head.store(tail, Ordering::Release);
        reader.kick(l);
        accepted.len() == N
    };
    let mut conns = Vec::new();
    for _ in 0..N {
        let c = writer.socket().unwrap();
        writer.connect(c, SERVICE_IP, 7420).unwrap();
        writer.wait_established(c, Duration::from_secs(5)).unwrap();
        accept(&mut accepted);
        conns.push(c);
    }
    until("all connections accepted", || accept(&mut accepted));
    // Each connection its own bytes, with no period of a ring's length.
    let data: Vec<Vec<u8>> = (0..N as u32)
        .map(|i| {
            let mut x = 0x9e37_79b9u32 ^ (i + 1).wrapping_mul(0x85eb_ca6b);
            (0..EACH)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect()
        })
        .collect();
    for (c, d) in conns.iter().zip(&data) {
        assert_eq!(writer.write_unmarked(*c, d), EACH, "a ring's worth");
    }
    // (The counter is the process's: other tests' services count too.)
    let deferred = || {
        writer.stats().unwrap()["transmit_budget"]["deferred"]
            .as_u64()
            .unwrap()
    };
    let before = deferred();
    // 640 KiB in one look's sight; closed at once (each after its bytes).
    writer.kick_all(&conns);
    for &c in &conns {
        writer.close(c);
    }
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); N];
    until("every connection's bytes and end", || {
        let mut done = 0;
        for (e, g) in accepted.iter().zip(got.iter_mut()) {
            g.extend(reader.read(*e, EACH));
            let eof = reader.regions().down_slot(*e).flags.load(Ordering::Acquire)
                & layout::flag::EOF
                != 0;
            done += usize::from(eof && g.len() >= EACH);
        }
        done == N
    });
    // Every connection's bytes are those of one writer's connection.
    let mut seen = [false; N];
    for g in &got {
        assert_eq!(g.len(), EACH, "a connection got {} bytes", g.len());
        let i = data
            .iter()
            .position(|d| d == g)
            .expect("bytes of no connection (misplaced)");
        assert!(!seen[i], "two connections got the same bytes");
        seen[i] = true;
    }
    // 16 rings make a budget: 24 waited for the second cycle, 8 of them
    // again for the third.
    let waits = (N * EACH - BUDGET) / EACH + (N * EACH - 2 * BUDGET) / EACH;
    assert!(
        deferred() - before >= waits as u64,
        "the burst was not spread over cycles: {} waits, not {waits}",
        deferred() - before
    );
    let budget = &reader.stats().unwrap()["transmit_budget"];
    assert_eq!(budget["bytes_per_cycle"], BUDGET, "{budget}");
    assert_eq!(budget["waiting"], 0, "{budget}");
    for &e in &accepted {
        let flags = reader.regions().down_slot(e).flags.load(Ordering::Acquire);
        assert_eq!(flags & layout::flag::ERROR, 0, "reset instead of closed");
        reader.close(e);
    }
    assert!(rig.alive());
}
