//! `ixora impair`, the bridge that impairs a real path: numbered UDP
//! datagrams sent across it arrive delayed, some lost, some late
//! (overtaken), some twice, and the bridge's report accounts for every
//! one; its rate limit spaces frames and tail-drops; its stalls hold
//! frames and lose none; it stops by itself; bad options get clear
//! errors.
//!
//! Test network: namespaces A, R (the bridge) and B, joined A — R — B by
//! two veth pairs, 198.18.91.0/24, static neighbours (no ARP to lose),
//! IPv6 off (nothing else crosses), all removed on drop.

mod common;

use common::{root, serial, Proc};
use ixora_io::netns::{NetNs, Veth};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

const A_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 91, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 91, 2);
const PORT: u16 = 9100;

struct Path {
    a: NetNs,
    r: NetNs,
    b: NetNs,
    /// The bridge's two ends (towards A, towards B).
    ends: (String, String),
    _links: Vec<Veth>,
}

fn mac(ns: &NetNs, dev: &str) -> String {
    let out = ns
        .ip(&["-br", "link", "show", "dev", dev])
        .expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // "NAME@PEER  UP  aa:bb:cc:dd:ee:ff <FLAGS>"
    text.split_whitespace()
        .find(|w| w.len() == 17 && w.matches(':').count() == 5)
        .unwrap_or_else(|| panic!("no MAC for {dev} in {text:?}"))
        .to_string()
}

impl Path {
    fn new() -> Path {
        let (a, r, b) = (
            NetNs::new("imp").expect("namespace"),
            NetNs::new("imp").expect("namespace"),
            NetNs::new("imp").expect("namespace"),
        );
        for ns in [&a, &r, &b] {
            ns.disable_ipv6().expect("sysctl");
        }
        let ar = Veth::new("ima", 1, Some(&a), Some(&r)).expect("veth");
        let rb = Veth::new("imb", 1, Some(&r), Some(&b)).expect("veth");
        a.addr(&ar.a, A_IP, 24).expect("address");
        b.addr(&rb.b, B_IP, 24).expect("address");
        for dev in [&ar.b, &rb.a] {
            r.ip(&["link", "set", dev, "up"]).expect("link up");
        }
        // Frames as a wire carries them (no super-frames); checksums left
        // to offload, as a veth does by default: the bridge completes
        // them, or B's kernel drops every datagram.
        for (ns, dev) in [(&a, &ar.a), (&b, &rb.b)] {
            ns.exec("ethtool", &["-K", dev, "tso", "off", "gso", "off"])
                .expect("ethtool");
        }
        let (ma, mb) = (mac(&a, &ar.a), mac(&b, &rb.b));
        a.ip(&[
            "neigh",
            "replace",
            &B_IP.to_string(),
            "lladdr",
            &mb,
            "dev",
            &ar.a,
            "nud",
            "permanent",
        ])
        .expect("neighbour");
        b.ip(&[
            "neigh",
            "replace",
            &A_IP.to_string(),
            "lladdr",
            &ma,
            "dev",
            &rb.b,
            "nud",
            "permanent",
        ])
        .expect("neighbour");
        Path {
            ends: (ar.b.clone(), rb.a.clone()),
            a,
            r,
            b,
            _links: vec![ar, rb],
        }
    }

    /// The bridge with `opts`, its report on standard output.
    fn bridge(&self, opts: &[&str]) -> Proc {
        let mut c = self.r.command(env!("CARGO_BIN_EXE_ixora"));
        c.args(["impair", &self.ends.0, &self.ends.1, "--json"])
            .args(opts);
        Proc::spawn_with_stdout(c, "impair")
    }
}

/// A datagram B received: its number, when (µs since the exchange
/// began) and its one-way delay.
#[derive(Debug)]
struct Arrival {
    seq: u32,
    at: u64,
    delay: Duration,
}

/// A datagram: its number and when it was sent (CLOCK_MONOTONIC, µs:
/// both namespaces share the host's clock), padded to `len` bytes.
fn datagram(seq: u32, t0: Instant, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len.max(12)];
    d[..4].copy_from_slice(&seq.to_be_bytes());
    d[4..12].copy_from_slice(&(t0.elapsed().as_micros() as u64).to_be_bytes());
    d
}

/// Send `n` datagrams of `len` bytes from A, `gap` apart, while B
/// records each arrival until `quiet` passes with nothing.
fn exchange(p: &Path, n: u32, len: usize, gap: Duration, quiet: Duration) -> Vec<Arrival> {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let recv = s.spawn(|| {
            p.b.run(move || {
                let sock = UdpSocket::bind(SocketAddrV4::new(B_IP, PORT)).expect("bind in B");
                sock.set_read_timeout(Some(quiet)).expect("timeout");
                ready_tx.send(()).expect("ready");
                let mut got = Vec::new();
                let mut buf = [0u8; 2048];
                let limit = Instant::now() + Duration::from_secs(30);
                while Instant::now() < limit {
                    match sock.recv(&mut buf) {
                        Ok(k) if k >= 12 => {
                            let seq = u32::from_be_bytes(buf[..4].try_into().expect("4"));
                            let sent = u64::from_be_bytes(buf[4..12].try_into().expect("8"));
                            let at = t0.elapsed().as_micros() as u64;
                            got.push(Arrival {
                                seq,
                                at,
                                delay: Duration::from_micros(at.saturating_sub(sent)),
                            });
                        }
                        Ok(_) => {}
                        Err(_) => break, // quiet for `quiet`: all in
                    }
                }
                got
            })
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("receiver ready");
        p.a.run(|| {
            let sock = UdpSocket::bind(SocketAddrV4::new(A_IP, 0)).expect("bind in A");
            for seq in 0..n {
                sock.send_to(&datagram(seq, t0, len), SocketAddrV4::new(B_IP, PORT))
                    .expect("send");
                std::thread::sleep(gap);
            }
        });
        recv.join().expect("receiver")
    })
}

/// Wait (10 s at most) until the bridge says it is forwarding.
fn joined(p: &Proc) {
    let t = Instant::now();
    while !p.log().contains("joining") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the bridge did not start: {}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn report(p: Proc) -> serde_json::Value {
    let out = p.stop();
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report from ixora impair:\n{out}"));
    serde_json::from_str(line).expect("report is JSON")
}

fn num(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn the_bridge_delays_drops_reorders_and_duplicates_and_accounts_for_every_frame() {
    if !root() {
        return;
    }
    let _g = serial();
    let p = Path::new();
    let bridge = p.bridge(&[
        "--delay-us",
        "3000",
        "--loss",
        "0.2",
        "--reorder",
        "0.3",
        "--reorder-delay-us",
        "4000",
        "--duplicate",
        "0.1",
        "--seed",
        "5",
        "--duration-s",
        "60",
    ]);
    joined(&bridge);
    let n = 400;
    let got = exchange(
        &p,
        n,
        100,
        Duration::from_micros(300),
        Duration::from_secs(2),
    );
    let r = report(bridge);
    let there = &r["directions"][0];

    // Every one of A's datagrams passed the bridge's first end, and what
    // it says it delivered is exactly what B received.
    assert_eq!(num(there, "sent"), u64::from(n), "report: {r}");
    assert_eq!(num(there, "delivered"), got.len() as u64, "report: {r}");
    assert_eq!(
        num(there, "sent") - num(there, "lost") + num(there, "duplicated"),
        num(there, "delivered"),
        "report: {r}"
    );
    assert_eq!(num(there, "unsent_at_exit"), 0);
    // Each arrived with its UDP checksum left to offload, and the bridge
    // completed it (B's kernel checked it: the counts above match).
    assert_eq!(num(there, "csum_not_ready"), u64::from(n), "report: {r}");
    assert_eq!(num(there, "csum_completed"), u64::from(n), "report: {r}");
    // Nothing came back from B.
    assert_eq!(num(&r["directions"][1], "sent"), 0, "report: {r}");

    // Delayed: nothing arrives before the 3 ms the bridge adds.
    let fastest = got.iter().map(|g| g.delay).min().expect("some arrived");
    assert!(
        fastest >= Duration::from_micros(2900),
        "fastest one-way {fastest:?}"
    );
    // Lost: about a fifth (binomial, 400 draws: 5 standard deviations).
    let mut seen: Vec<u32> = got.iter().map(|g| g.seq).collect();
    seen.sort_unstable();
    let copies = seen.len();
    seen.dedup();
    let lost = n as usize - seen.len();
    assert_eq!(lost as u64, num(there, "lost"));
    assert!((40..=120).contains(&lost), "{lost} of {n} lost at 20%");
    // Duplicated and reordered, as often as the report says.
    assert_eq!((copies - seen.len()) as u64, num(there, "duplicated"));
    assert!(num(there, "duplicated") > 10, "report: {r}");
    let overtaken = got.windows(2).filter(|w| w[1].seq < w[0].seq).count();
    assert!(
        overtaken > 20,
        "only {overtaken} arrivals came after a later datagram"
    );
    assert!(num(there, "reordered") > 50, "report: {r}");
}

#[test]
fn the_rate_limit_spaces_frames_and_drops_what_its_queue_cannot_hold() {
    if !root() {
        return;
    }
    let _g = serial();
    let p = Path::new();
    // 8 Mbit/s: a 1042-byte frame (1000 B of UDP payload) takes 1.04 ms;
    // the queue holds 4 of them.
    let bridge = p.bridge(&["--rate-mbps", "8", "--queue", "4200", "--duration-s", "60"]);
    joined(&bridge);
    let got = exchange(&p, 40, 1000, Duration::ZERO, Duration::from_secs(1));
    let r = report(bridge);
    let there = &r["directions"][0];
    assert_eq!(num(there, "sent"), 40, "report: {r}");
    let drops = num(there, "queue_drops");
    assert!(
        drops >= 10,
        "a burst of 40 into a queue of 4: only {drops} dropped"
    );
    assert_eq!(num(there, "delivered") + drops, 40, "report: {r}");
    assert_eq!(got.len() as u64, num(there, "delivered"));
    // In order, and no faster than the rate: each frame takes 1.042 ms
    // (8336 bits at 8 Mbit/s), so the k-th delivered (from 0) cannot
    // arrive before k + 1 of them were serialized after the first was
    // sent. (A bound from the sender's clock: a receiver late to look
    // only makes arrivals later.)
    assert!(got.len() >= 4, "{} arrived", got.len());
    assert!(
        got.windows(2).all(|w| w[0].seq < w[1].seq),
        "out of order: {got:?}"
    );
    let sent0 = got[0].at - got[0].delay.as_micros() as u64;
    for (k, g) in got.iter().enumerate() {
        assert!(
            g.at >= sent0 + (k as u64 + 1) * 1000,
            "arrival {k} {} µs after the first was sent: {got:?}",
            g.at - sent0
        );
    }
}

#[test]
fn a_stall_holds_what_enters_the_path_and_loses_none() {
    if !root() {
        return;
    }
    let _g = serial();
    let p = Path::new();
    // Stalls of 100 ms about every 200 ms; datagrams every 5 ms for 1.5 s.
    let bridge = p.bridge(&[
        "--stall-every-ms",
        "200",
        "--stall-ms",
        "100",
        "--duration-s",
        "60",
    ]);
    joined(&bridge);
    let got = exchange(
        &p,
        300,
        200,
        Duration::from_millis(5),
        Duration::from_secs(1),
    );
    let r = report(bridge);
    let there = &r["directions"][0];
    assert_eq!(num(there, "sent"), 300, "report: {r}");
    assert_eq!(num(there, "delivered"), 300, "report: {r}");
    assert_eq!(got.len(), 300, "report: {r}");
    assert!(
        got.windows(2).all(|w| w[0].seq < w[1].seq),
        "out of order: {got:?}"
    );
    let (stalls, stalled) = (num(there, "stalls"), num(there, "stalled"));
    assert!(stalls >= 2 && stalled >= 20, "report: {r}");
    // Each stall holds what meets it until its end: those waited up to
    // 100 ms (but the one that met a stall's last 1.5 ms, at most, per
    // stall; a slow reader may make a few others late), the others not.
    let held = got
        .iter()
        .filter(|g| g.delay >= Duration::from_micros(1500))
        .count() as u64;
    assert!(
        held + stalls >= stalled && held <= stalled + 5,
        "{held} datagrams late, {stalled} stalled in {stalls} stalls: {got:?}"
    );
    assert!(
        got.iter().all(|g| g.delay < Duration::from_millis(150)),
        "{got:?}"
    );
}

#[test]
fn the_bridge_stops_by_itself_and_refuses_bad_options() {
    if !root() {
        return;
    }
    let _g = serial();
    let p = Path::new();
    let mut b = p.bridge(&["--duration-s", "1"]);
    let st = b.wait_exit(Duration::from_secs(15));
    assert!(st.success(), "exit {st:?}: {}", b.log());

    let run = |args: &[&str]| {
        let out =
            p.r.command(env!("CARGO_BIN_EXE_ixora"))
                .arg("impair")
                .args(args)
                .output()
                .expect("run ixora impair");
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&[&p.ends.0, &p.ends.0]);
    assert!(e.contains("both interfaces are"), "{e}");
    let e = run(&[&p.ends.0, "nosuch0", "--duration-s", "1"]);
    assert!(e.contains("nosuch0"), "{e}");
    let e = run(&[&p.ends.0, &p.ends.1, "--loss", "2"]);
    assert!(e.contains("probability"), "{e}");
    let e = run(&[&p.ends.0, &p.ends.1, "--duration-s", "0"]);
    assert!(e.contains("--duration-s"), "{e}");
    let e = run(&[&p.ends.0, &p.ends.1, "--stall-ms", "100"]);
    assert!(e.contains("--stall-every-ms"), "{e}");
}
