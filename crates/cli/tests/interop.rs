//! Interop with the Linux stack, through the `ixora` binary, over every
//! backend (issue 3's proof):
//!
//! * Linux (ping, arping, socat, a `std::net` client) against `ixora
//!   echo-server`, and `ixora echo-client` against a Linux echo server
//!   (socat);
//! * 100 MB echoed and checked byte for byte at 0%, 1% and 5% random loss
//!   in both directions (nftables `numgen random` on the Linux side of the
//!   link, ingress and egress);
//! * garbage frames injected with scapy are counted as drops by reason and
//!   the server keeps serving;
//! * the same between two Ixora processes over the shared-memory wire.
//!
//! Each test builds its own namespaces and links (names carry the PID),
//! uses addresses in 198.18.0.0/15 only, bounds every transfer in bytes and
//! time, and ends the processes it started by their PID — also when an
//! assertion fails. The heavy tests run one at a time.
//!
//! `IXORA_INTEROP_MB` changes the transfer size (default 100) and
//! `IXORA_INTEROP_LOSS` the loss rates (default `0,1,5`).

use ixora_io::netns::{unique_name, NetNs, Veth};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ixora");

mod common;
use common::{have, root, serial, Proc};

fn transfer_bytes() -> usize {
    let mb: usize = std::env::var("IXORA_INTEROP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    mb * 1_000_000
}

/// Loss rates in percent (`IXORA_INTEROP_LOSS=0,1,5` by default).
fn loss_rates() -> Vec<u32> {
    std::env::var("IXORA_INTEROP_LOSS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1, 5])
}

/// A child killed (by its PID) if the test fails before collecting it.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// No IPv6 chatter (router solicitations, MLD) on the test link.
fn quiet(ns: &NetNs) {
    ns.disable_ipv6().expect("sysctl");
}

fn run_ok(out: std::io::Result<Output>, what: &str) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Where Ixora runs and where Linux talks to it.
///
/// ```text
///  ix: Ixora on ixora_if ── wire: bridge with wire_ix, wire_lx ── lx: Linux on linux_if
/// ```
///
/// For the veth backends (af_xdp, af_packet) `ixora_if` is one end of a
/// veth pair whose other end, `wire_ix`, sits in the wire namespace's
/// bridge. For tap, Ixora creates `ixora_if` (a TAP device) in `ix`, and
/// `ix` is also the wire: the test bridges the TAP device once it exists.
/// Loss is dropped at the ingress of the two bridge ports, so each
/// direction loses frames on the wire (not in a sender's own stack).
struct Net {
    backend: &'static str,
    ixora_if: String,
    linux_if: String,
    /// Bridge ports: frames from Ixora enter at `wire_ix`, from Linux at
    /// `wire_lx`.
    wire_ix: String,
    wire_lx: String,
    ixora_ip: Ipv4Addr,
    linux_ip: Ipv4Addr,
    // Drop order: links before their namespaces.
    _links: Vec<Veth>,
    lx: NetNs,
    wire: Option<NetNs>,
    ix: NetNs,
}

impl Net {
    fn new(backend: &'static str, subnet: u8) -> Net {
        let tag = match backend {
            "af_xdp" => "ix",
            "af_packet" => "ip",
            _ => "it",
        };
        let ix = NetNs::new(tag).expect("namespace");
        let lx = NetNs::new(tag).expect("namespace");
        quiet(&ix);
        quiet(&lx);
        let ixora_ip = Ipv4Addr::new(198, 18, subnet, 2);
        let linux_ip = Ipv4Addr::new(198, 18, subnet, 1);
        let (wire, ixora_if, wire_ix, mut links) = if backend == "tap" {
            let tap = unique_name("ixt", true);
            (None, tap.clone(), tap, vec![])
        } else {
            let wire = NetNs::new(tag).expect("namespace");
            quiet(&wire);
            let v = Veth::new(tag, 1, Some(&ix), Some(&wire)).expect("veth");
            ix.ip(&["link", "set", &v.a, "up"]).expect("link up");
            let (a, b) = (v.a.clone(), v.b.clone());
            (Some(wire), a, b, vec![v])
        };
        let wns = wire.as_ref().unwrap_or(&ix);
        let l = Veth::new(tag, 1, Some(wns), Some(&lx)).expect("veth");
        let (wire_lx, linux_if) = (l.a.clone(), l.b.clone());
        links.push(l);
        lx.addr(&linux_if, linux_ip, 24).expect("address");
        run_ok(wns.ip(&["link", "add", "ixbr", "type", "bridge"]), "bridge");
        for dev in [&wire_lx, &wire_ix] {
            if backend == "tap" && dev == &wire_ix {
                continue; // bridged once Ixora has created it
            }
            run_ok(
                wns.ip(&["link", "set", dev, "master", "ixbr", "up"]),
                "bridge port",
            );
        }
        run_ok(wns.ip(&["link", "set", "ixbr", "up"]), "bridge up");
        // A bridge must not judge IP headers (garbage frames are the test).
        let _ = wns.exec("sysctl", &["-qw", "net.bridge.bridge-nf-call-iptables=0"]);
        // Frames towards Ixora must fit a packet buffer (af_packet and skb
        // XDP take what the device hands them): no TSO/GSO super-frames on
        // the port that feeds it (docs: backends).
        if backend != "tap" {
            run_ok(
                wns.exec("ethtool", &["-K", &wire_ix, "tso", "off", "gso", "off"]),
                "ethtool",
            );
        }
        Net {
            backend,
            ixora_if,
            linux_if,
            wire_ix,
            wire_lx,
            ixora_ip,
            linux_ip,
            _links: links,
            lx,
            wire,
            ix,
        }
    }

    fn wire(&self) -> &NetNs {
        self.wire.as_ref().unwrap_or(&self.ix)
    }

    /// The Linux side's namespace.
    fn lx(&self) -> &NetNs {
        &self.lx
    }

    /// `ixora <cmd> --backend .. --iface .. --ip ..` inside Ixora's namespace.
    fn ixora(&self, cmd: &str, extra: &[&str]) -> Command {
        let mut c = self.ix.command(BIN);
        c.args([
            cmd,
            "--backend",
            self.backend,
            "--iface",
            &self.ixora_if,
            "--ip",
            &format!("{}/24", self.ixora_ip),
        ]);
        c.args(extra);
        c
    }

    /// After Ixora started: put its TAP device on the bridge.
    fn link_up(&self, mut p: Option<&mut Proc>) {
        if self.backend != "tap" {
            return;
        }
        let t = Instant::now();
        loop {
            if let Some(p) = p.as_mut() {
                assert!(p.running(), "ixora exited:\n{}", p.log());
            }
            if self.ix.ip(&["link", "show", &self.ixora_if]).is_ok() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no TAP device");
            std::thread::sleep(Duration::from_millis(10));
        }
        run_ok(
            self.ix
                .ip(&["link", "set", &self.ixora_if, "master", "ixbr", "up"]),
            "bridge the TAP device",
        );
    }

    /// Random loss on the wire, both directions (0: none). ARP is spared:
    /// a connect fails, as Linux's does, when four ARP requests in 3 s go
    /// unanswered, which these tests do not test. With the TAP device down
    /// for an Ixora client's first two requests (it exists only once the
    /// client runs), 5% loss made both of the other two exchanges fail in
    /// about one run of a hundred (a fresh clone's `make test`, 2026-11-28).
    fn set_loss(&self, percent: u32) {
        let rule = (percent > 0).then(|| format!("numgen random mod 100 < {percent} drop"));
        self.wire_rules("ixloss", rule.as_deref(), rule.as_deref());
    }

    /// nftables rules on the wire (table `table`), for the frames from
    /// Ixora and from Linux, ARP spared; neither: the table goes.
    fn wire_rules(&self, table: &str, from_ixora: Option<&str>, from_linux: Option<&str>) {
        let w = self.wire();
        let _ = w.exec("nft", &["delete", "table", "netdev", table]);
        if from_ixora.is_none() && from_linux.is_none() {
            return;
        }
        let chain = |name: &str, dev: &str, rule: Option<&str>| {
            rule.map_or(String::new(), |r| {
                format!(
                    "chain {name} {{ type filter hook ingress device \"{dev}\" priority 0; policy accept; ether type arp accept; {r}; }}\n"
                )
            })
        };
        let rules = format!(
            "table netdev {table} {{\n{}{}}}\n",
            chain("from_ixora", &self.wire_ix, from_ixora),
            chain("from_linux", &self.wire_lx, from_linux)
        );
        let mut c = w.command("nft");
        c.args(["-f", "-"]).stdin(Stdio::piped());
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nft");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .expect("nft rules");
        run_ok(child.wait_with_output(), "nft drop rules");
    }

    /// Run `f` on a thread inside the Linux namespace.
    fn in_linux<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.lx().run(f)
    }

    /// Wait until Ixora's echo server answers a TCP connection.
    fn wait_ready(&self, p: &mut Proc, port: u16) {
        let addr = SocketAddrV4::new(self.ixora_ip, port);
        let t = Instant::now();
        loop {
            assert!(p.running(), "echo-server exited:\n{}", p.log());
            let ok = self.in_linux(|| {
                TcpStream::connect_timeout(&addr.into(), Duration::from_millis(500)).is_ok()
            });
            if ok {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "echo-server not reachable:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The test pattern: byte `i` of a transfer.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// A Linux TCP client: send `total` bytes to the echo server at `addr`
/// while reading the echo back, and check every byte. Bounded by `limit`.
fn linux_echo_transfer(addr: SocketAddrV4, total: usize, limit: Duration) -> Result<f64, String> {
    let t0 = Instant::now();
    let s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    s.set_write_timeout(Some(Duration::from_secs(20))).ok();
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> Result<(), String> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut sent = 0;
        while sent < total {
            if t0.elapsed() > limit {
                return Err(format!("time limit after sending {sent} bytes"));
            }
            let n = buf.len().min(total - sent);
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(sent + k);
            }
            w.write_all(&buf[..n])
                .map_err(|e| format!("write at {sent}: {e}"))?;
            sent += n;
        }
        Ok(())
    });
    let mut r = s;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    let mut result = Ok(());
    while got < total {
        if t0.elapsed() > limit {
            result = Err(format!("time limit after receiving {got} of {total} bytes"));
            break;
        }
        match r.read(&mut buf) {
            Ok(0) => {
                result = Err(format!("connection closed after {got} of {total} bytes"));
                break;
            }
            Ok(n) => {
                if let Some(k) = (0..n).find(|&k| buf[k] != pattern(got + k)) {
                    result = Err(format!("byte {} differs", got + k));
                    break;
                }
                got += n;
            }
            Err(e) => {
                result = Err(format!("read at {got}: {e}"));
                break;
            }
        }
    }
    let _ = r.shutdown(std::net::Shutdown::Both);
    let w = writer.join().map_err(|_| "writer panicked".to_string())?;
    result?;
    w?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Parse `  drop <reason> <n>` lines of an Ixora command's report.
fn drops(log: &str) -> Vec<(String, u64)> {
    log.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("drop")).then_some(())?;
            let reason = it.next()?.to_string();
            let n = it.next()?.parse().ok()?;
            Some((reason, n))
        })
        .collect()
}

/// An Ixora command's report line `  count <name> <n>` (0 if absent).
fn count(log: &str, name: &str) -> u64 {
    log.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("count") && it.next() == Some(name)).then_some(())?;
            it.next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Garbage at Ixora's address and MAC from the Linux side (scapy).
const GARBAGE: &str = r#"
import random, sys
from scapy.all import Ether, IP, TCP, UDP, Raw, sendp, conf, get_if_hwaddr
conf.verb = 0
iface, dst_mac, dst_ip, src_ip = sys.argv[1:5]
random.seed(7)
src_mac = get_if_hwaddr(iface)
e = Ether(dst=dst_mac, src=src_mac)
frames = []
for i in range(60):
    frames.append(Ether(dst=dst_mac, src=src_mac, type=0x0800) / Raw(bytes(random.randrange(256) for _ in range(random.randrange(0, 40)))))
    frames.append(e / IP(src=src_ip, dst=dst_ip, chksum=0x1234) / TCP(dport=7))
    frames.append(e / IP(src=src_ip, dst=dst_ip, ihl=15) / Raw(b"x" * 8))
    frames.append(e / IP(src=src_ip, dst=dst_ip) / TCP(dport=7, chksum=0xbeef) / Raw(b"bad"))
    frames.append(e / IP(src=src_ip, dst=dst_ip, flags="MF", frag=0) / UDP(dport=9) / Raw(b"frag"))
    frames.append(e / IP(src=src_ip, dst=dst_ip) / TCP(dport=7, dataofs=15, flags="A"))
    frames.append(e / IP(src=src_ip, dst=dst_ip) / TCP(dport=7, flags="A", seq=random.randrange(2**32), ack=random.randrange(2**32)) / Raw(b"stray"))
    frames.append(e / IP(src=src_ip, dst=dst_ip) / TCP(dport=9, flags="S"))
    frames.append(e / IP(src=src_ip, dst=dst_ip, proto=99) / Raw(b"?"))
    frames.append(Ether(dst=dst_mac, src=src_mac, type=0x88b5) / Raw(b"unknown ethertype"))
sendp(frames, iface=iface)
print(len(frames))
"#;

/// Ixora's MAC as Linux learned it (after a ping).
fn neighbour_mac(ns: &NetNs, ip: Ipv4Addr) -> String {
    let out = run_ok(
        ns.exec("ip", &["neigh", "show", &ip.to_string()]),
        "ip neigh",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    while let Some(w) = it.next() {
        if w == "lladdr" {
            return it.next().unwrap_or_default().to_string();
        }
    }
    panic!("no neighbour entry for {ip}: {text}");
}

/// Linux against Ixora's echo server: ping, arping, socat, garbage, and
/// 100 MB at each loss rate.
fn linux_to_ixora(net: &Net, bytes: usize) {
    let mut srv = Proc::spawn(
        net.ixora("echo-server", &["--port", "7"]),
        &format!("{}-echo-server", net.backend),
    );
    net.link_up(Some(&mut srv));
    net.wait_ready(&mut srv, 7);
    let lx = net.lx();
    let ip = net.ixora_ip.to_string();

    // ICMP echo and ARP.
    run_ok(
        lx.exec("ping", &["-c", "3", "-i", "0.2", "-W", "2", &ip]),
        "ping",
    );
    // Longer than the MTU: the request is reassembled and the reply leaves
    // in fragments (RFC 791 §3.2); Linux checks the echoed bytes.
    run_ok(
        lx.exec(
            "ping",
            &["-c", "2", "-i", "0.2", "-W", "2", "-s", "6000", &ip],
        ),
        "ping -s 6000",
    );
    run_ok(
        lx.exec("arping", &["-c", "2", "-w", "5", "-I", &net.linux_if, &ip]),
        "arping",
    );
    // Any TCP client is a valid peer: socat.
    let mut c = lx.command("socat");
    c.args(["-t", "2", "-T", "5", "-", &format!("TCP4:{ip}:7")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("socat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello, ixora\n")
        .expect("socat stdin");
    let out = run_ok(child.wait_with_output(), "socat");
    assert_eq!(out.stdout, b"hello, ixora\n", "socat echo");

    // Garbage frames: counted as drops, and the server keeps serving.
    if have("python3") || ixora_io::netns::skip("python3 is missing: no garbage frames") {
        let mac = neighbour_mac(lx, net.ixora_ip);
        let out = run_ok(
            lx.exec(
                "/usr/bin/python3",
                &[
                    "-c",
                    GARBAGE,
                    &net.linux_if,
                    &mac,
                    &ip,
                    &net.linux_ip.to_string(),
                ],
            ),
            "scapy garbage",
        );
        let sent: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(sent >= 600, "scapy sent {sent} frames");
    }

    // The D-SACK blocks Linux received (RFC 2883: Ixora reports data
    // that came again; with loss, some of Linux's retransmissions are
    // needless).
    let dsacks = || linux_counter(lx, "TcpExtTCPDSACKRecv");
    let before = dsacks();
    for loss in loss_rates() {
        net.set_loss(loss);
        let addr = SocketAddrV4::new(net.ixora_ip, 7);
        let r = net.in_linux(|| linux_echo_transfer(addr, bytes, Duration::from_secs(240)));
        net.set_loss(0);
        match r {
            Ok(secs) => eprintln!(
                "{}: Linux -> Ixora echo, {} MB at {loss}% loss: intact, {:.1} s ({:.0} Mbit/s each way)",
                net.backend,
                bytes / 1_000_000,
                secs,
                bytes as f64 * 8.0 / secs / 1e6
            ),
            Err(e) => panic!(
                "{}: Linux -> Ixora echo at {loss}% loss: {e}\n{}",
                net.backend,
                srv.log()
            ),
        }
    }

    eprintln!(
        "{}: Linux received {} D-SACK block(s) from Ixora in the transfers",
        net.backend,
        dsacks() - before
    );
    // A needless retransmission for sure: Ixora's segments with data are
    // dropped after Linux writes (its echo, which acknowledges the write),
    // so Linux sends the write again, and again as its timer backs off;
    // Ixora's pure acknowledgement of each copy (under 100 bytes of IP,
    // let through) carries a D-SACK (RFC 2883 §4), which Linux counts.
    // The drop holds until Linux has counted one (5 s at most: one that
    // rode on a data segment is dropped, the next copy brings another),
    // then the echo comes. (None before 2026-11-30.)
    let before = dsacks();
    let addr = SocketAddrV4::new(net.ixora_ip, 7);
    let r = net.in_linux(|| -> Result<bool, String> {
        let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let mut buf = [0u8; 100];
        let mut counted = false;
        for b in [1u8, 2] {
            if b == 2 {
                net.wire_rules("ixdata", Some("ip length > 100 drop"), None);
            }
            s.write_all(&[b; 100]).map_err(|e| e.to_string())?;
            if b == 2 {
                let t = Instant::now();
                while !counted && t.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(50));
                    counted = dsacks() != before;
                }
                net.wire_rules("ixdata", None, None);
            }
            s.read_exact(&mut buf)
                .map_err(|e| format!("echo {b}: {e}"))?;
            if buf != [b; 100] {
                return Err(format!("echo {b}: other bytes"));
            }
        }
        Ok(counted)
    });
    net.wire_rules("ixdata", None, None);
    let counted = r.unwrap_or_else(|e| {
        panic!(
            "{}: needless retransmission: {e}\n{}",
            net.backend,
            srv.log()
        )
    });
    assert!(
        counted,
        "{}: Linux got no D-SACK for the data it sent again",
        net.backend
    );

    // The other way: Ixora's needless retransmission. Linux's
    // acknowledgements (under 100 bytes of IP) are dropped once it has
    // written, so Ixora sends its echo again (a tail loss probe, then by
    // its timer) and Linux answers each copy with a D-SACK
    // (TcpExtTCPDSACKOldSent). The drop holds until Linux has sent one (5 s
    // at most); the next copy's D-SACK reaches Ixora, which counts it
    // (`tcp_dsack_recv` in the report checked below; RFC 8985 §6.2 and
    // RFC 3708 act on it). (Not read before 2026-11-30.)
    let old_sent = || linux_counter(lx, "TcpExtTCPDSACKOldSent");
    let before = old_sent();
    let r = net.in_linux(|| -> Result<u64, String> {
        let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        net.wire_rules("ixacks", None, Some("ip length < 100 drop"));
        s.write_all(&[3u8; 100]).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 100];
        s.read_exact(&mut buf).map_err(|e| format!("echo: {e}"))?;
        if buf != [3u8; 100] {
            return Err("echo: other bytes".into());
        }
        for n in [1, 2] {
            let t = Instant::now();
            while old_sent() < before + n && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            net.wire_rules("ixacks", None, None);
        }
        Ok(old_sent() - before)
    });
    net.wire_rules("ixacks", None, None);
    let sent = r.unwrap_or_else(|e| {
        panic!(
            "{}: Ixora's needless retransmission: {e}\n{}",
            net.backend,
            srv.log()
        )
    });
    assert!(
        sent >= 2,
        "{}: Linux sent {sent} D-SACK(s) for Ixora's copies, not 2",
        net.backend
    );

    let log = srv.stop();
    let d = drops(&log);
    eprintln!("{}: echo-server report:\n{log}", net.backend);
    let got = count(&log, "tcp_dsack_recv");
    assert!(
        got >= 1,
        "{}: Ixora counted no D-SACK of Linux's ({sent} sent)\n{log}",
        net.backend
    );
    if have("python3") || ixora_io::netns::skip("python3 is missing: drops not checked") {
        let reasons = d.iter().filter(|(_, n)| *n > 0).count();
        let total: u64 = d.iter().map(|(_, n)| n).sum();
        assert!(
            reasons >= 5 && total >= 300,
            "garbage not counted by reason: {d:?}\n{log}"
        );
    }
}

/// Linux's TCP counter `name` (`nstat` in namespace `ns`; 0 if unread).
fn linux_counter(ns: &NetNs, name: &str) -> u64 {
    let out = ns.exec("nstat", &["-asz", name]).ok();
    out.and_then(|o| {
        String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
            l.strip_prefix(name)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    })
    .unwrap_or(0)
}

/// A Linux echo server (socat PIPE) in the Linux namespace.
fn linux_echo_server(net: &Net, port: u16) -> Proc {
    let mut c = net.lx().command("socat");
    c.args([
        &format!("TCP4-LISTEN:{port},bind={},reuseaddr,fork", net.linux_ip),
        "PIPE",
    ]);
    let p = Proc::spawn(c, "socat-echo");
    // Wait for the listener.
    let addr = SocketAddrV4::new(net.linux_ip, port);
    let t = Instant::now();
    while net
        .in_linux(|| TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200)).is_err())
    {
        assert!(t.elapsed() < Duration::from_secs(10), "socat not listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

/// Ixora's client against a Linux echo server: 100 MB at each loss rate.
fn ixora_to_linux(net: &Net, bytes: usize) {
    let _srv = linux_echo_server(net, 7);
    let server = format!("{}:7", net.linux_ip);
    let msg = 65_536usize;
    let rounds = bytes.div_ceil(msg).to_string();
    for loss in loss_rates() {
        if net.backend != "tap" {
            net.set_loss(loss);
        }
        let mut cmd = net.ixora(
            "echo-client",
            &[
                "--server",
                &server,
                "--once",
                "-c",
                "1",
                "-s",
                "65536",
                "-n",
                &rounds,
                "--duration",
                "240",
            ],
        );
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        // The TAP device exists only while the client runs: bridge it as
        // soon as it appears (the client retries ARP meanwhile).
        let mut child = Guard(Some(cmd.spawn().expect("echo-client")));
        net.link_up(None);
        if net.backend == "tap" {
            net.set_loss(loss);
        }
        let out = child
            .0
            .take()
            .expect("child")
            .wait_with_output()
            .expect("echo-client");
        check_client(net, loss, bytes, &out);
        net.set_loss(0);
    }
}

/// The echo client's JSON report, after checking that it succeeded with
/// one connection finished and no error.
fn client_report(what: &str, out: &Output, context: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{stderr}\n{context}"
    );
    let rep: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{what} report: {e}: {stdout}"));
    assert_eq!(
        (rep["errors"].as_u64(), rep["connections"].as_u64()),
        (Some(0), Some(1)),
        "{what}: {rep}"
    );
    rep
}

fn check_client(net: &Net, loss: u32, bytes: usize, out: &Output) {
    let what = format!("{}: Ixora -> Linux at {loss}% loss", net.backend);
    let rep = client_report(&what, out, "");
    let secs = rep["seconds"].as_f64().unwrap_or(0.0);
    eprintln!(
        "{}: Ixora -> Linux echo, {} MB at {loss}% loss: intact, {:.1} s ({:.0} Mbit/s each way)",
        net.backend,
        bytes / 1_000_000,
        secs,
        bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
    );
}

fn interop(backend: &'static str, subnet: u8) {
    if !root() {
        return;
    }
    let _g = serial();
    let bytes = transfer_bytes();
    let net = Net::new(backend, subnet);
    linux_to_ixora(&net, bytes);
    if backend == "af_xdp" {
        // The kernel refuses to re-bind a queue right after a close.
        std::thread::sleep(Duration::from_millis(1500));
    }
    ixora_to_linux(&net, bytes);
}

#[test]
fn af_xdp_interop_with_linux() {
    interop("af_xdp", 41);
}

#[test]
fn af_packet_interop_with_linux() {
    interop("af_packet", 42);
}

#[test]
fn tap_interop_with_linux() {
    interop("tap", 43);
}

/// Two Ixora processes over the shared-memory wire: 100 MB echoed and
/// checked.
#[test]
fn shm_between_two_ixora_processes() {
    if !root() {
        return;
    }
    let _g = serial();
    let bytes = transfer_bytes();
    let sock = std::env::temp_dir().join(unique_name("ixshm", false) + ".sock");
    let sock_s = sock.to_string_lossy().to_string();
    let mut srv_cmd = Command::new(BIN);
    srv_cmd.args([
        "echo-server",
        "--backend",
        "shm",
        "--shm-role",
        "listen",
        "--iface",
        &sock_s,
        "--ip",
        "198.18.44.2/24",
    ]);
    let mut srv = Proc::spawn(srv_cmd, "shm-echo-server");
    let t = Instant::now();
    while !sock.exists() {
        assert!(srv.running(), "server exited:\n{}", srv.log());
        assert!(t.elapsed() < Duration::from_secs(10), "no shm socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rounds = bytes.div_ceil(65_536).to_string();
    let out = Command::new(BIN)
        .args([
            "echo-client",
            "--backend",
            "shm",
            "--shm-role",
            "connect",
            "--iface",
            &sock_s,
            "--ip",
            "198.18.44.1/24",
            "--server",
            "198.18.44.2:7",
            "--once",
            "-c",
            "1",
            "-s",
            "65536",
            "-n",
            &rounds,
            "--duration",
            "120",
        ])
        .output()
        .expect("echo-client");
    let rep = client_report("shm client", &out, &format!("server:\n{}", srv.log()));
    eprintln!(
        "shm: {} MB echoed intact in {:.2} s",
        bytes / 1_000_000,
        rep["seconds"].as_f64().unwrap_or(0.0)
    );
    let log = srv.stop();
    let _ = std::fs::remove_file(&sock);
    // The server ends when its peer leaves the wire.
    assert!(
        log.contains("peer is gone") || log.contains("passive"),
        "server did not end cleanly:\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}
