//! Control requests of a well-behaved application against the service, in
//! process (the testkit's loopback wire and echo peer).

use ixora_channel::ctl::{op, Msg};
use ixora_channel::layout::pack;
use ixora_service::testkit::{RawApp, Rig, ECHO_PORT, PEER_IP};
use std::time::{Duration, Instant};

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
    let t = Instant::now();
    let mut got = Vec::new();
    while got.len() < 4 && t.elapsed() < Duration::from_secs(5) {
        got.extend(app.read(s, 4 - got.len()));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, b"ping");

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
