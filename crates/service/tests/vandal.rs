//! Misbehaving applications against the service, in-process (the testkit's
//! loopback wire; no network namespace needed): whatever an application
//! sends on its control connection and writes into its shared memory, the
//! service keeps running, every other application's connections carry
//! their bytes intact, and the application's own state is torn down when
//! it goes. The same interpreter is the fuzz target `service_app`.

use arbitrary::{Arbitrary, Unstructured};
use ixora_channel::ctl::{op, Msg};
use ixora_channel::os;
use ixora_service::testkit::{self, wait_gone, RawApp, Rig, VandalOp};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn msg(app_socket: &std::path::Path, m: Msg) -> Msg {
    let c = os::connect_once(app_socket).unwrap();
    let d = Instant::now() + Duration::from_secs(5);
    os::send_msg(c.as_fd(), &m.encode(), &[], d).unwrap();
    let mut b = [0u8; 64];
    let (n, _) = os::recv_msg(c.as_fd(), &mut b, d).unwrap();
    Msg::decode(&b[..n]).unwrap()
}

/// Only a process of an application can join it: a JOIN must carry the
/// key from the app's down region (which only its processes map). Before,
/// any local process could join any app by its (sequential) id and then
/// act on that app's sockets.
#[test]
fn joining_an_app_needs_its_key() {
    let rig = Rig::start("join").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let key = app.regions().down_header().join_key.load(Ordering::Relaxed);
    let id = i64::from(app.id);
    for wrong in [0, key ^ 1, key.wrapping_add(1 << 40)] {
        let r = msg(&rig.socket, Msg::new(op::JOIN, 0, id, wrong));
        assert_eq!(r.a, -i64::from(libc::EPERM), "join with key {wrong:#x}");
    }
    let r = msg(&rig.socket, Msg::new(op::JOIN, 0, id, key));
    assert_eq!(r.a, 0, "join with the app's key");
    assert!(rig.alive());
    drop(app);
    rig.finish().unwrap();
}

/// A second ATTACH on a connection that already has an application is
/// refused: it used to make a new app and orphan the first, which then
/// outlived the connection (memory a program could leak without end).
#[test]
fn a_second_attach_on_one_connection_is_refused() {
    let rig = Rig::start("reattach").unwrap();
    let app = RawApp::attach(&rig).unwrap();
    let r = app.request(Msg::new(op::ATTACH, 0, 1, 0)).unwrap();
    assert_eq!(r.a, -i64::from(libc::EISCONN));
    let watcher = RawApp::attach(&rig).unwrap();
    let id = app.id;
    drop(app);
    wait_gone(&watcher, id, Duration::from_secs(5)).unwrap();
    let st = watcher.stats().unwrap();
    assert_eq!(st["apps"].as_array().unwrap().len(), 1, "{st}");
    drop(watcher);
    rig.finish().unwrap();
}

/// Rounds of random misbehaviour (seeded: a failure names its seed and
/// round). After each round the vandal disconnects; the service must
/// still run, have torn the vandal's app down, and carry a well-behaved
/// app's new and long-lived connections with every byte intact.
#[test]
fn random_misbehaviour_hurts_only_the_misbehaving_app() {
    let seed = std::env::var("IXORA_VANDAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rounds: usize = std::env::var("IXORA_VANDAL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut rng = fastrand::Rng::with_seed(seed);
    let rig = Rig::start("vandal").unwrap();
    let good = RawApp::attach(&rig).unwrap();
    // A connection of the good app that lives through every round.
    let lasting = good.socket().unwrap();
    good.connect(lasting, testkit::PEER_IP, testkit::ECHO_PORT)
        .unwrap();
    good.wait_established(lasting, Duration::from_secs(5))
        .unwrap();
    let t = Instant::now();
    let mut ops_played = 0;
    for round in 0..rounds {
        let ctx = format!("seed {seed} round {round}");
        let bytes: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
        let mut u = Unstructured::new(&bytes);
        let ops: Vec<VandalOp> = (0..64)
            .map_while(|_| VandalOp::arbitrary(&mut u).ok())
            .collect();
        ops_played += ops.len();
        let vandal = RawApp::attach(&rig).unwrap();
        let id = vandal.id;
        let mut socks = Vec::new();
        testkit::vandalise(&vandal, &ops, &mut socks)
            .unwrap_or_else(|e| panic!("{ctx}: the service stopped answering: {e}"));
        assert!(rig.alive(), "{ctx}: the service died");
        // The good app meanwhile: a new connection, and the lasting one.
        let data: Vec<u8> = (0..3000).map(|i| (i * 7 + round) as u8).collect();
        good.echo(&data, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{ctx}: good app's echo: {e}"));
        assert_eq!(good.write(lasting, &data[..100]), 100, "{ctx}");
        let mut back = Vec::new();
        let t0 = Instant::now();
        while back.len() < 100 && t0.elapsed() < Duration::from_secs(5) {
            back.extend(good.read(lasting, 100 - back.len()));
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(back, &data[..100], "{ctx}: the lasting connection");
        // The vandal goes (as a killed process would): all of its state
        // with it.
        drop(vandal);
        wait_gone(&good, id, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let st = good.stats().unwrap();
        assert_eq!(
            st["apps"].as_array().unwrap().len(),
            1,
            "{ctx}: apps left behind: {st}"
        );
    }
    let st = good.stats().unwrap();
    eprintln!(
        "{rounds} rounds, {ops_played} vandal steps in {:.1} s; protocol errors {}",
        t.elapsed().as_secs_f64(),
        st["protocol_errors"]
    );
    // The garbage was seen (some index was impossible) — the test did
    // reach the validation it is about.
    assert!(st["protocol_errors"].as_u64().unwrap() > 0, "{st}");
    good.close(lasting);
    drop(good);
    rig.finish().unwrap();
}
