//! AF_XDP backend against the Linux stack: each test builds its own pair of
//! network namespaces joined by a veth (addresses from 198.18.0.0/15 only,
//! names carrying the pid), opens an `AfXdpPort` on the end in namespace A
//! and talks to Linux on the end in namespace B. The guards delete
//! everything on drop, also when a test fails. Every loop is bounded in
//! count and time. Tests skip (pass with a note) when not run as root.

mod common;

use ixora_io::af_xdp::{AfXdpConfig, AfXdpPort, XdpMode, ZeroCopy};
use ixora_io::netns::{NetNs, Veth};
use ixora_io::{sys, PacketBuf, Pool, PoolConfig, Port, Queue};
use ixora_wire::arp::{ArpPacket, ArpRepr, Operation};
use ixora_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_wire::tcp::TcpPacket;
use ixora_wire::udp::UdpPacket;
use ixora_wire::{checksum, Checksum};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Two namespaces and a veth between them: `veth.a` in `a` (ours, no
/// address in Linux), `veth.b` in `b` with 198.18.`net`.2/24.
struct Net {
    // Field order is drop order: the pair first, then the namespaces.
    veth: Veth,
    a: NetNs,
    b: NetNs,
    net: u8,
}

impl Net {
    fn new(tag: &str, queues: u32, net: u8) -> Option<Net> {
        if !ixora_io::netns::need_root() {
            return None;
        }
        let a = NetNs::new(tag).expect("netns a");
        let b = NetNs::new(tag).expect("netns b");
        let veth = Veth::new(tag, queues, Some(&a), Some(&b)).expect("veth");
        b.addr(&veth.b, Self::ip_in(net, 2), 24).expect("addr b");
        a.ip(&["link", "set", &veth.a, "up"]).expect("a up");
        Some(Net { veth, a, b, net })
    }

    fn ip_in(net: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, net, host)
    }

    /// Our address (served by the test through the XSK, unknown to Linux).
    fn ours(&self) -> Ipv4Addr {
        Self::ip_in(self.net, 1)
    }

    /// Linux's address in namespace B.
    fn theirs(&self) -> Ipv4Addr {
        Self::ip_in(self.net, 2)
    }

    /// Tell Linux in B that our address lives at `mac` (no ARP needed).
    fn static_neigh(&self, mac: MacAddr) {
        self.b
            .ip(&[
                "neigh",
                "replace",
                &self.ours().to_string(),
                "lladdr",
                &mac.to_string(),
                "dev",
                &self.veth.b,
                "nud",
                "permanent",
            ])
            .expect("static neighbour");
    }

    /// Frames from B to A the veth dropped: B's TX drops (A's receive
    /// ring full) and A's RX drops (XDP redirect failures: XSK fill ring
    /// empty or RX ring full).
    fn b_to_a_drops(&self) -> u64 {
        link_drops(&self.a, &self.veth.a).0 + link_drops(&self.b, &self.veth.b).1
    }

    /// `ip -d link show dev <ours>` in namespace A.
    fn link_a(&self) -> String {
        let out = self
            .a
            .ip(&["-d", "link", "show", "dev", &self.veth.a])
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn small_pool_cfg(chunks: u32) -> PoolConfig {
    PoolConfig {
        chunks,
        hugepages: false,
        ..PoolConfig::default()
    }
}

/// Poll `q` until `want` frames that `f` counts (returns true for)
/// arrived, `total` passed, or nothing came for `idle`.
fn receive(
    q: &mut dyn Queue,
    want: usize,
    total: Duration,
    idle: Duration,
    mut f: impl FnMut(PacketBuf) -> bool,
) -> usize {
    let start = Instant::now();
    let mut last = Instant::now();
    let mut got = 0;
    let mut bufs = Vec::with_capacity(64);
    while got < want && start.elapsed() < total && last.elapsed() < idle {
        let n = q.rx_burst(&mut bufs, 64).expect("rx_burst");
        if n == 0 {
            q.reclaim();
            std::hint::spin_loop();
            continue;
        }
        last = Instant::now();
        for b in bufs.drain(..) {
            got += usize::from(f(b));
        }
    }
    got
}

/// Reclaim until every transmitted chunk is back, within a bound.
fn settle(q: &mut dyn Queue, pool: &Pool, lent_at_rest: usize) {
    let start = Instant::now();
    while pool.lent() > lent_at_rest && start.elapsed() < Duration::from_secs(2) {
        q.reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Answer an ARP request or ICMP echo request for `ip` at `mac`; `None`
/// for anything else.
fn answer(frame: &[u8], mac: MacAddr, ip: Ipv4Addr) -> Option<(Vec<u8>, bool)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let peer_mac = eth.src_addr();
    match eth.ethertype() {
        EtherType::Arp => {
            let req = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            if req.operation != Operation::Request || req.target_ip != ip {
                return None;
            }
            let reply = ArpRepr {
                operation: Operation::Reply,
                sender_mac: mac,
                sender_ip: ip,
                target_mac: req.sender_mac,
                target_ip: req.sender_ip,
            };
            let hdr = EthernetRepr {
                src_addr: mac,
                dst_addr: req.sender_mac,
                ethertype: EtherType::Arp,
                vlan: None,
            };
            let mut out = vec![0u8; hdr.header_len() + reply.buffer_len()];
            let h = hdr.emit(&mut out);
            reply.emit(&mut out[h..]);
            Some((out, true))
        }
        EtherType::Ipv4 => {
            let ipp = Ipv4Packet::new_checked(eth.payload()).ok()?;
            let ipr = Ipv4Repr::parse(&ipp, Checksum::Both).ok()?;
            if ipr.dst_addr != ip || ipr.protocol != Protocol::Icmp {
                return None;
            }
            let icmp = Icmpv4Packet::new_checked(ipp.payload()).ok()?;
            let Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } = Icmpv4Repr::parse(&icmp, Checksum::Both).ok()?
            else {
                return None;
            };
            let reply = Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            };
            let ip_out = Ipv4Repr {
                src_addr: ip,
                dst_addr: ipr.src_addr,
                protocol: Protocol::Icmp,
                payload_len: reply.buffer_len(),
                ttl: 64,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: true,
            };
            let hdr = EthernetRepr {
                src_addr: mac,
                dst_addr: peer_mac,
                ethertype: EtherType::Ipv4,
                vlan: None,
            };
            let mut out = vec![0u8; hdr.header_len() + ip_out.buffer_len()];
            let h = hdr.emit(&mut out);
            ip_out.emit(&mut out[h..], Checksum::Both);
            reply.emit(&mut out[h + ip_out.header_len()..], Checksum::Both);
            Some((out, false))
        }
        _ => None,
    }
}

/// ARP and ping through the XSK: Linux in B pings 198.18.11.1, which only
/// this test (answering by hand through `tx_burst`) knows about.
#[test]
fn arp_and_ping_round_trip() {
    let Some(net) = Net::new("xp", 1, 11) else {
        return;
    };
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let stop = AtomicBool::new(false);
    let (arps, pings) = std::thread::scope(|s| {
        let responder = s.spawn(|| {
            net.a.enter().expect("enter A");
            let port = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("open");
            let caps = port.caps();
            assert_eq!(caps.backend, "af_xdp");
            assert_eq!(caps.queues, 1);
            assert!(!caps.zero_copy, "veth has no zero-copy: {}", caps.note);
            assert!(caps.rx_checksum_unreliable, "veth: {}", caps.note);
            assert_eq!(caps.max_frame, 1518);
            let pool = port.pool(0, small_pool_cfg(256)).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("open_queue");
            let at_rest = pool.lent();
            assert_eq!(at_rest, 128, "half the pool waits in the fill ring");
            let note = port.caps().note;
            ready_tx.send(()).unwrap();
            let (mac, ip) = (port.mac(), net.ours());
            let (mut arps, mut pings) = (0, 0);
            let start = Instant::now();
            let mut bufs = Vec::new();
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(15) {
                let fd = q.poll_fd().expect("an XSK has a poll fd");
                sys::wait_readable(fd, 10).expect("poll");
                q.rx_burst(&mut bufs, 32).expect("rx");
                for b in bufs.drain(..) {
                    if let Some((frame, is_arp)) = answer(b.as_slice(), mac, ip) {
                        if is_arp {
                            arps += 1;
                        } else {
                            pings += 1;
                        }
                        out.push(pool.copy_in(&frame).expect("a free chunk"));
                    }
                }
                let mut tries = 0;
                while !out.is_empty() && tries < 100 {
                    q.tx_burst(&mut out).expect("tx");
                    tries += 1;
                }
                q.reclaim();
            }
            settle(q.as_mut(), &pool, at_rest);
            assert_eq!(pool.lent(), at_rest, "every sent chunk came back");
            assert_eq!(pool.available() + pool.lent(), pool.chunks() as usize);
            let st = port.stats();
            assert_eq!(st.bad_descs, 0);
            assert_eq!(st.tx_frames, (arps + pings) as u64);
            eprintln!("{note}\nstats: {st:?}");
            (arps, pings)
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("responder ready");
        let out = net
            .b
            .command("ping")
            .args(["-c", "1", "-W", "5", &net.ours().to_string()])
            .output()
            .expect("run ping");
        stop.store(true, Ordering::Relaxed);
        let r = responder.join().expect("responder");
        assert!(
            out.status.success(),
            "ping failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        r
    });
    assert!(arps >= 1, "answered an ARP request");
    assert!(pings >= 1, "answered an echo request");
}

/// What a TCP SYN and a UDP datagram sent by Linux in B look like to our
/// XSK: for each, (checksum verifies, checksum field holds just the
/// pseudo-header sum, as a device with checksum offload would get it).
fn observe_checksums(mode: XdpMode, offload: bool, net_no: u8) -> Option<[(bool, bool); 2]> {
    let net = Net::new("xc", 1, net_no)?;
    let on_off = if offload { "on" } else { "off" };
    net.b
        .exec("ethtool", &["-K", &net.veth.b, "tx", on_off])
        .expect("ethtool -K");
    let net = &net;
    let (mac_tx, mac_rx) = mpsc::channel::<MacAddr>();
    let seen = std::thread::scope(|s| {
        let rx = s.spawn(move || {
            net.a.enter().expect("enter A");
            let cfg = AfXdpConfig {
                mode,
                ..AfXdpConfig::default()
            };
            let port = AfXdpPort::open(&net.veth.a, cfg).expect("open");
            assert!(port.caps().rx_checksum_unreliable);
            let pool = port.pool(0, small_pool_cfg(256)).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("open_queue");
            mac_tx.send(port.mac()).unwrap();
            let (mut tcp, mut udp) = (None, None);
            receive(
                q.as_mut(),
                2,
                Duration::from_secs(10),
                Duration::from_secs(10),
                |b| {
                    let Ok(eth) = EthernetFrame::new_checked(b.as_slice()) else {
                        return false;
                    };
                    let Ok(ipp) = Ipv4Packet::new_checked(eth.payload()) else {
                        return false;
                    };
                    if eth.ethertype() != EtherType::Ipv4 || ipp.dst_addr() != net.ours() {
                        return false;
                    }
                    let (src, dst, seg) = (ipp.src_addr(), ipp.dst_addr(), ipp.payload());
                    let partial = |proto: u8, field: u16| {
                        field == checksum::pseudo_header_v4(src, dst, proto, seg.len() as u32)
                    };
                    match ipp.protocol() {
                        Protocol::Tcp if tcp.is_none() => {
                            let t = TcpPacket::new_checked(seg).expect("tcp");
                            tcp = Some((t.verify_checksum(src, dst), partial(6, t.checksum())));
                            true
                        }
                        Protocol::Udp if udp.is_none() => {
                            let u = UdpPacket::new_checked(seg).expect("udp");
                            udp = Some((u.verify_checksum(src, dst), partial(17, u.checksum())));
                            true
                        }
                        _ => false,
                    }
                },
            );
            [
                tcp.expect("saw the TCP SYN"),
                udp.expect("saw the UDP datagram"),
            ]
        });
        let mac = mac_rx.recv_timeout(Duration::from_secs(10)).expect("mac");
        net.static_neigh(mac);
        s.spawn(move || {
            net.b.enter().expect("enter B");
            let u = UdpSocket::bind(SocketAddrV4::new(net.theirs(), 0)).unwrap();
            u.send_to(b"checksum probe", SocketAddrV4::new(net.ours(), 9))
                .unwrap();
            // A SYN nobody answers; the first one is all we need.
            let _ = std::net::TcpStream::connect_timeout(
                &SocketAddrV4::new(net.ours(), 80).into(),
                Duration::from_millis(300),
            );
        });
        rx.join().expect("receiver")
    });
    Some(seen)
}

/// Linux in B with transmit checksum offload on (veth's default) sends TCP
/// and UDP with the checksum field holding only the pseudo-header sum, and
/// that is what reaches the XSK, in native and in skb mode; with offload
/// off the checksums are complete. Hence `rx_checksum_unreliable` on veth.
#[test]
fn veth_peer_checksum_offload_reaches_the_xsk_unfilled() {
    let mut net_no = 40;
    for mode in [XdpMode::Native, XdpMode::Skb] {
        for offload in [true, false] {
            net_no += 1;
            let Some([tcp, udp]) = observe_checksums(mode, offload, net_no) else {
                return;
            };
            eprintln!(
                "{mode:?}, peer tx offload {offload}: TCP (valid, partial) = {tcp:?}, UDP = \
                 {udp:?}"
            );
            if offload {
                assert_eq!(tcp, (false, true), "{mode:?}: TCP checksum left to offload");
                assert_eq!(udp, (false, true), "{mode:?}: UDP checksum left to offload");
            } else {
                assert!(
                    tcp.0 && udp.0,
                    "{mode:?}: complete checksums without offload"
                );
            }
        }
    }
}

/// What Linux in B receives of TCP segments our XSK in A sends with only
/// the pseudo-header sum in the checksum field, flagged for the port to
/// complete (`set_partial_checksum`), for each payload length: (checksum
/// verifies, field holds just the pseudo-header sum). `a_tx_csum`: A's
/// veth end offloads checksums (its default); off, the kernel has to
/// complete them itself before the veth (as for a device without
/// offload), which it can only do where the XSK told it where they are.
fn send_partial_checksums(
    offload: bool,
    a_tx_csum: bool,
    roomy: bool,
    net_no: u8,
    lens: &[usize],
) -> Option<(Vec<(bool, bool)>, ixora_io::af_xdp::AfXdpStats)> {
    let net = Net::new("xo", 1, net_no)?;
    let on_off = if a_tx_csum { "on" } else { "off" };
    net.a
        .exec("ethtool", &["-K", &net.veth.a, "tx", on_off])
        .expect("ethtool -K");
    let net = &net;
    let (ready_tx, ready_rx) = mpsc::channel::<MacAddr>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        // B: an AF_PACKET port sees what arrives, bytes as they are.
        let watcher = s.spawn(move || {
            net.b.enter().expect("enter B");
            let port = ixora_io::af_packet::AfPacketPort::open(
                &net.veth.b,
                ixora_io::af_packet::AfPacketConfig::default(),
            )
            .expect("af_packet in B");
            let pool = port.pool(0, small_pool_cfg(256)).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("queue");
            ready_tx.send(port.mac()).unwrap();
            let mut seen = Vec::new();
            receive(
                q.as_mut(),
                lens.len(),
                Duration::from_secs(10),
                Duration::from_secs(5),
                |b| {
                    let Ok(eth) = EthernetFrame::new_checked(b.as_slice()) else {
                        return false;
                    };
                    let Ok(ipp) = Ipv4Packet::new_checked(eth.payload()) else {
                        return false;
                    };
                    if ipp.protocol() != Protocol::Tcp || ipp.src_addr() != net.ours() {
                        return false;
                    }
                    let (src, dst, seg) = (ipp.src_addr(), ipp.dst_addr(), ipp.payload());
                    let t = TcpPacket::new_checked(seg).expect("tcp");
                    let pseudo = checksum::pseudo_header_v4(src, dst, 6, seg.len() as u32);
                    seen.push((t.verify_checksum(src, dst), t.checksum() == pseudo));
                    true
                },
            );
            done_tx.send(()).unwrap();
            seen
        });
        let theirs = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("B ready");
        let sender = s.spawn(move || {
            net.a.enter().expect("enter A");
            let cfg = AfXdpConfig {
                tx_checksum_offload: offload,
                ..AfXdpConfig::default()
            };
            let port = AfXdpPort::open(&net.veth.a, cfg).expect("open");
            let caps = port.caps();
            assert_eq!(caps.tx_checksum_offload, offload);
            // Without the headroom the port asks for, no TX metadata.
            let pool_cfg = PoolConfig {
                headroom: if roomy { caps.tx_headroom } else { 0 },
                ..small_pool_cfg(256)
            };
            let pool = port.pool(0, pool_cfg).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("open_queue");
            let at_rest = pool.lent();
            let mut out = Vec::new();
            for &len in lens {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                out.push(common::partial_tcp_buf(
                    &pool,
                    (port.mac(), theirs),
                    net.ours(),
                    net.theirs(),
                    &payload,
                ));
            }
            let mut tries = 0;
            while !out.is_empty() && tries < 100 {
                q.tx_burst(&mut out).expect("tx");
                tries += 1;
            }
            let _ = done_rx.recv_timeout(Duration::from_secs(15));
            settle(q.as_mut(), &pool, at_rest);
            port.stats()
        });
        let stats = sender.join().expect("sender");
        Some((watcher.join().expect("watcher"), stats))
    })
}

/// Frames our stack sends with a partial TCP checksum reach the wire
/// correct (RFC 9293 §3.1: the checksum MUST cover the pseudo-header,
/// header and data): from AF_XDP TX metadata the kernel completes them
/// where the device cannot (A's checksum offload off), and leaves them to
/// the device where it can (on: the field still holds the pseudo-header
/// sum, as the kernel's own TCP sends on a veth); with the offload turned
/// off in the port, or a pool without room for the metadata, the XSK
/// completes them in software.
#[test]
fn partial_tcp_checksums_are_completed_on_the_way_out() {
    let lens = [0usize, 1, 2, 5, 100, 1001, 1460];
    let mut net_no = 50;
    for (offload, a_tx_csum, roomy) in [
        (true, false, true),
        (true, true, true),
        (false, false, true),
        (true, false, false),
    ] {
        net_no += 1;
        let Some((seen, st)) = send_partial_checksums(offload, a_tx_csum, roomy, net_no, &lens)
        else {
            return;
        };
        eprintln!(
            "offload {offload}, A tx-checksumming {a_tx_csum}, headroom {roomy}: {seen:?}; {st:?}"
        );
        assert_eq!(seen.len(), lens.len(), "every segment arrived");
        assert_eq!(st.kernel_tx_invalid_descs, 0, "no descriptor refused");
        let n = lens.len() as u64;
        if offload && roomy {
            // A kernel without TX metadata (older than this one) completes
            // them in software instead; this machine's has it.
            assert_eq!((st.tx_csum_offloaded, st.tx_csum_software), (n, 0));
        } else {
            assert_eq!((st.tx_csum_offloaded, st.tx_csum_software), (0, n));
        }
        for (i, &(valid, partial)) in seen.iter().enumerate() {
            if offload && a_tx_csum {
                assert!(
                    partial && !valid,
                    "segment {i}: left to the device: {seen:?}"
                );
            } else {
                assert!(
                    valid,
                    "segment {i} ({} bytes): checksum complete: {seen:?}",
                    lens[i]
                );
            }
        }
    }
}

/// Sum of `ip -s` drop counters (rx and tx) of `dev` in `ns`.
fn link_drops(ns: &NetNs, dev: &str) -> (u64, u64) {
    let out = ns
        .ip(&["-s", "-j", "link", "show", "dev", dev])
        .expect("ip -s");
    let j = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |dir: &str| -> u64 {
        let Some(at) = j.find(&format!("\"{dir}\":{{")) else {
            return 0;
        };
        let rest = &j[at..];
        let Some(d) = rest.find("\"dropped\":") else {
            return 0;
        };
        rest[d + 10..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    (field("rx"), field("tx"))
}

/// Send `n` UDP datagrams from `u` (a socket in B) to our address, port
/// 9000, in bursts of `burst` with `pause` between; returns how many were
/// sent.
fn blast(net: &Net, u: &UdpSocket, n: usize, burst: usize, pause: Duration) -> usize {
    let dst = SocketAddrV4::new(net.ours(), 9000);
    let mut sent = 0;
    let mut payload = [0u8; 32];
    let start = Instant::now();
    while sent < n && start.elapsed() < Duration::from_secs(30) {
        for _ in 0..burst.min(n - sent) {
            payload[..8].copy_from_slice(&(sent as u64).to_be_bytes());
            if u.send_to(&payload, dst).is_ok() {
                sent += 1;
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    sent
}

/// Is `b` an IPv4/UDP frame to port `port`?
fn is_udp_to(b: &PacketBuf, port: u16) -> bool {
    let f = b.as_slice();
    f.len() >= 42 && f[12..14] == [0x08, 0x00] && f[23] == 17 && f[36..38] == port.to_be_bytes()
}

/// Turn a received UDP frame around in place (addresses and ports
/// swapped, UDP checksum off): forwarding from RX to TX without a copy.
fn turn_around(b: &mut PacketBuf) -> bool {
    let f = b.as_mut_slice();
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 17 {
        return false;
    }
    let mut t = [0u8; 6];
    t.copy_from_slice(&f[0..6]);
    f.copy_within(6..12, 0);
    f[6..12].copy_from_slice(&t);
    let mut a = [0u8; 4];
    a.copy_from_slice(&f[26..30]);
    f.copy_within(30..34, 26);
    f[30..34].copy_from_slice(&a);
    let mut p = [0u8; 2];
    p.copy_from_slice(&f[34..36]);
    f.copy_within(36..38, 34);
    f[36..38].copy_from_slice(&p);
    f[40..42].copy_from_slice(&[0, 0]);
    true
}

/// 20 000 frames blasted from Linux (all received, or every drop accounted
/// for), then ten rounds of receive-and-echo: the pool ends each round
/// exactly where it started.
#[test]
fn many_frames_accounting_and_no_leak() {
    let Some(net) = Net::new("xm", 1, 12) else {
        return;
    };
    const BLAST: usize = 20_000;
    const ROUND: usize = 2_000;
    let (mac_tx, mac_rx) = mpsc::channel::<MacAddr>();
    let (want_tx, want_rx) = mpsc::channel::<(usize, bool)>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, usize)>();
    let net = &net;
    std::thread::scope(|s| {
        let receiver = s.spawn(move || {
            net.a.enter().expect("enter A");
            let port = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("open");
            let pool = port.pool(0, small_pool_cfg(4096)).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("open_queue");
            let at_rest = pool.lent();
            assert_eq!(at_rest, 2048);
            mac_tx.send(port.mac()).unwrap();
            let mut rest_state = None;
            let mut out = Vec::with_capacity(64);
            while let Ok((want, echo)) = want_rx.recv_timeout(Duration::from_secs(30)) {
                let before = port.stats();
                let start = Instant::now();
                let mut echoed = 0;
                let mut got = 0;
                let mut last = Instant::now();
                let mut bufs = Vec::with_capacity(64);
                // Receive, and echo each burst straight back (RX chunks
                // posted to TX as they are).
                while got < want
                    && start.elapsed() < Duration::from_secs(20)
                    && last.elapsed() < Duration::from_millis(1500)
                {
                    if q.rx_burst(&mut bufs, 64).expect("rx") == 0 {
                        q.reclaim();
                        continue;
                    }
                    last = Instant::now();
                    for mut b in bufs.drain(..) {
                        if is_udp_to(&b, 9000) {
                            got += 1;
                            if echo && turn_around(&mut b) {
                                out.push(b);
                            }
                        }
                    }
                    let mut tries = 0;
                    while !out.is_empty() && tries < 1000 {
                        let before_len = out.len();
                        q.tx_burst(&mut out).expect("tx");
                        echoed += before_len - out.len();
                        tries += 1;
                    }
                }
                let secs = start.elapsed().as_secs_f64();
                assert!(out.is_empty(), "TX took every frame");
                // Frames that arrived after the idle cut-off.
                let late = receive(
                    q.as_mut(),
                    usize::MAX,
                    Duration::from_millis(300),
                    Duration::from_millis(300),
                    |b| is_udp_to(&b, 9000),
                );
                settle(q.as_mut(), &pool, at_rest);
                // Let the kernel counters refresh (idle polls, 100 ms).
                let t = Instant::now();
                let mut none = Vec::new();
                while t.elapsed() < Duration::from_millis(250) {
                    q.rx_burst(&mut none, 64).unwrap();
                    none.clear();
                    std::thread::sleep(Duration::from_millis(5));
                }
                let st = port.stats();
                assert_eq!(st.bad_descs, 0, "{st:?}");
                assert_eq!(st.tx_frames - before.tx_frames, echoed as u64, "{st:?}");
                assert_eq!(pool.available() + pool.lent(), pool.chunks() as usize);
                assert_eq!(pool.lent(), at_rest, "only the fill ring holds chunks");
                match rest_state {
                    None => rest_state = Some(pool.available()),
                    Some(a) => assert_eq!(pool.available(), a, "no chunk leaked"),
                }
                let kdrops = (st.kernel_rx_dropped + st.kernel_rx_ring_full)
                    - (before.kernel_rx_dropped + before.kernel_rx_ring_full);
                eprintln!(
                    "round: {got}+{late} of {want} in {secs:.3}s ({:.0} frames/s), kernel \
                     XSK drops {kdrops}, echoed {echoed}",
                    got as f64 / secs
                );
                done_tx.send((got + late, kdrops as usize)).unwrap();
            }
        });
        let mac = mac_rx.recv_timeout(Duration::from_secs(10)).expect("mac");
        net.static_neigh(mac);
        let drops0 = net.b_to_a_drops();

        // The blast: as fast as Linux sends.
        want_tx.send((BLAST, false)).unwrap();
        let sent = std::thread::scope(|s2| {
            s2.spawn(|| {
                net.b.enter().expect("enter B");
                let u = UdpSocket::bind(SocketAddrV4::new(net.theirs(), 9001)).unwrap();
                blast(net, &u, BLAST, BLAST, Duration::ZERO)
            })
            .join()
            .unwrap()
        });
        let (got, kdrops) = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("round");
        let link = net.b_to_a_drops() - drops0;
        eprintln!("blast: sent {sent}, received {got}, XSK drops {kdrops}, veth drops {link}");
        assert_eq!(sent, BLAST);
        // veth counts a frame the XSK could not take (fill ring empty,
        // RX ring full) as its own RX drop too, so its counters hold the
        // kernel's XSK drops and whatever it dropped before XDP.
        assert!(kdrops <= link as usize, "XSK drops show up at the veth");
        assert_eq!(
            got + link as usize,
            sent,
            "every frame received or counted as dropped"
        );
        assert!(got >= BLAST / 2, "most frames arrive");

        // Ten rounds of receive and echo, paced, with Linux counting echoes.
        let echo_sock = {
            let (tx, rx) = mpsc::channel();
            std::thread::scope(|s2| {
                s2.spawn(move || {
                    net.b.enter().expect("enter B");
                    let u = UdpSocket::bind(SocketAddrV4::new(net.theirs(), 9002)).unwrap();
                    u.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    tx.send(u).unwrap();
                });
            });
            rx.recv().unwrap()
        };
        let mut echoes_total = 0;
        let mut drops = net.b_to_a_drops();
        for _ in 0..10 {
            want_tx.send((ROUND, true)).unwrap();
            let echoes = std::thread::scope(|s2| {
                let counter = s2.spawn(|| {
                    let mut n = 0;
                    let mut buf = [0u8; 64];
                    let start = Instant::now();
                    let mut idle = 0;
                    while idle < 10 && start.elapsed() < Duration::from_secs(20) && n < ROUND {
                        match echo_sock.recv_from(&mut buf) {
                            Ok(_) => {
                                n += 1;
                                idle = 0;
                            }
                            Err(_) => idle += 1,
                        }
                    }
                    n
                });
                s2.spawn(|| blast(net, &echo_sock, ROUND, 50, Duration::from_millis(1)))
                    .join()
                    .unwrap();
                counter.join().unwrap()
            });
            let (got, kdrops) = done_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("round");
            let dropped = net.b_to_a_drops() - drops;
            drops += dropped;
            assert!(kdrops as u64 <= dropped, "XSK drops show up at the veth");
            assert_eq!(
                got as u64 + dropped,
                ROUND as u64,
                "frames arrive or are counted"
            );
            echoes_total += echoes;
        }
        drop(want_tx);
        receiver.join().unwrap();
        eprintln!("echoes seen by Linux: {echoes_total} of {}", 10 * ROUND);
        assert!(echoes_total >= 10 * ROUND * 9 / 10, "echoes reach Linux");
    });
}

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).expect("cpu index");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("pin");
}

/// Two queues, each opened by its own thread with its own pool; Linux sends
/// from two threads pinned to CPUs 0 and 1, each from eight source ports.
/// Both queues receive, every frame arrives once (or is counted dropped),
/// and each flow sticks to one queue. (Measured: on veth the sender's flow
/// hash picks the queue, not its CPU — one CPU's flows land on both.)
#[test]
fn two_queues_both_receive() {
    let Some(net) = Net::new("x2", 2, 13) else {
        return;
    };
    const PER_SENDER: usize = 3000;
    const SOURCES: u16 = 8;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let net = &net;
    let (mac_tx, mac_rx) = mpsc::channel::<MacAddr>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let total = std::sync::atomic::AtomicUsize::new(0);
    let total = &total;
    let counts = std::thread::scope(|s| {
        let port_thread = s.spawn(move || {
            net.a.enter().expect("enter A");
            let port = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("open");
            assert_eq!(port.caps().queues, 2);
            mac_tx.send(port.mac()).unwrap();
            let port = &port;
            std::thread::scope(|s2| {
                let queues: Vec<_> = (0..2u32)
                    .map(|qi| {
                        let ready_tx = ready_tx.clone();
                        s2.spawn(move || {
                            net.a.enter().expect("enter A");
                            let pool = port.pool(qi, small_pool_cfg(4096)).expect("pool");
                            let mut q = port.open_queue(qi, &pool).expect("open_queue");
                            ready_tx.send(()).unwrap();
                            let mut seen = std::collections::BTreeMap::new();
                            let start = Instant::now();
                            let mut last = Instant::now();
                            let mut bufs = Vec::new();
                            while total.load(Ordering::Relaxed) < 2 * PER_SENDER
                                && start.elapsed() < Duration::from_secs(20)
                                && last.elapsed() < Duration::from_secs(3)
                            {
                                if q.rx_burst(&mut bufs, 64).unwrap() == 0 {
                                    std::thread::yield_now();
                                    continue;
                                }
                                last = Instant::now();
                                for b in bufs.drain(..) {
                                    if is_udp_to(&b, 9000) {
                                        let f = b.as_slice();
                                        let key = (f[50], u16::from_be_bytes([f[34], f[35]]));
                                        *seen.entry(key).or_insert(0usize) += 1;
                                        total.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                            assert_eq!(port.queue_stats(qi).unwrap().bad_descs, 0);
                            seen
                        })
                    })
                    .collect();
                queues
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
        });
        let mac = mac_rx.recv_timeout(Duration::from_secs(10)).expect("mac");
        net.static_neigh(mac);
        for _ in 0..2 {
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("queue ready");
        }
        let drops_before = net.b_to_a_drops();
        let senders: Vec<_> = (0..2usize)
            .map(|k| {
                s.spawn(move || {
                    net.b.enter().expect("enter B");
                    pin_to(k % cpus);
                    let socks: Vec<UdpSocket> = (0..SOURCES)
                        .map(|i| {
                            let port = 20000 + 100 * k as u16 + i;
                            UdpSocket::bind(SocketAddrV4::new(net.theirs(), port)).unwrap()
                        })
                        .collect();
                    let dst = SocketAddrV4::new(net.ours(), 9000);
                    let mut payload = [0u8; 32];
                    payload[8] = k as u8;
                    for i in 0..PER_SENDER {
                        socks[i % socks.len()].send_to(&payload, dst).unwrap();
                        if i % 100 == 99 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        for h in senders {
            h.join().unwrap();
        }
        let counts = port_thread.join().unwrap();
        (counts, net.b_to_a_drops() - drops_before)
    });
    let (counts, dropped) = counts;
    for (qi, seen) in counts.iter().enumerate() {
        eprintln!("queue {qi}: (sender cpu, source port) -> frames: {seen:?}");
    }
    let per_queue: Vec<usize> = counts.iter().map(|m| m.values().sum()).collect();
    eprintln!("per queue {per_queue:?}, dropped {dropped}");
    assert_eq!(
        per_queue.iter().sum::<usize>() + dropped as usize,
        2 * PER_SENDER,
        "{per_queue:?}, dropped {dropped}"
    );
    // Each flow (source port) lands on one queue only.
    for key in counts[0].keys() {
        assert!(!counts[1].contains_key(key), "flow {key:?} on both queues");
    }
    assert!(
        per_queue.iter().all(|&n| n > 0),
        "both queues receive: {per_queue:?}"
    );
}

/// Does `ip -d link show` output show an XDP program?
fn shows_xdp(link: &str) -> bool {
    link.contains("prog/xdp") || link.split_whitespace().any(|w| w.starts_with("xdp"))
}

/// Dropping the port detaches the program (the BPF link closes), in both
/// attach modes; a queue re-bound right after its predecessor closed comes
/// up (open_queue rides out the kernel's EBUSY window).
#[test]
fn detach_on_drop_and_rebind() {
    let Some(net) = Net::new("xd", 1, 14) else {
        return;
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            net.a.enter().expect("enter A");
            assert!(!shows_xdp(&net.link_a()));
            for mode in [XdpMode::Native, XdpMode::Skb, XdpMode::Auto] {
                let cfg = AfXdpConfig {
                    mode,
                    ..AfXdpConfig::default()
                };
                let port = AfXdpPort::open(&net.veth.a, cfg).expect("open");
                let link = net.link_a();
                assert!(shows_xdp(&link), "{mode:?}: attached: {link}");
                let generic = link.contains("xdpgeneric");
                assert_eq!(generic, mode == XdpMode::Skb, "{mode:?}: {link}");
                let pool = port.pool(0, small_pool_cfg(64)).expect("pool");
                let t = Instant::now();
                let q = port.open_queue(0, &pool).expect("open_queue (re-bind)");
                eprintln!(
                    "{mode:?}: queue bound after {:?}; {}",
                    t.elapsed(),
                    port.caps().note
                );
                drop(q);
                // The same queue again at once, on the same port.
                let t = Instant::now();
                let q = port
                    .open_queue(0, &pool)
                    .expect("open_queue right after close");
                eprintln!("{mode:?}: re-bound right after close in {:?}", t.elapsed());
                drop(q);
                drop(port);
                let link = net.link_a();
                assert!(!shows_xdp(&link), "{mode:?}: detached on drop: {link}");
            }
        })
        .join()
        .expect("lifecycle");
    });
}

/// Helper for `detach_on_process_exit`, run in a child process: opens a
/// port and a queue, says READY, and waits to be killed.
#[test]
#[ignore = "helper run by detach_on_process_exit in a child process"]
fn child_holds_port() {
    let (Ok(ns), Ok(iface)) = (
        std::env::var("IXORA_XDP_CHILD_NS"),
        std::env::var("IXORA_XDP_CHILD_IF"),
    ) else {
        return;
    };
    let f = std::fs::File::open(ns).expect("netns file");
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let port = AfXdpPort::open(&iface, AfXdpConfig::default()).expect("child open");
    let pool = port.pool(0, small_pool_cfg(64)).expect("pool");
    let _q = port.open_queue(0, &pool).expect("child open_queue");
    println!("READY");
    std::thread::sleep(Duration::from_secs(30));
}

/// A process killed with SIGKILL while holding a port leaves no XDP
/// program behind (the kernel closes the link fd), and the queue can be
/// bound again right after.
#[test]
fn detach_on_process_exit() {
    let Some(net) = Net::new("xk", 1, 15) else {
        return;
    };
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_holds_port",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IXORA_XDP_CHILD_NS", net.a.path())
        .env("IXORA_XDP_CHILD_IF", &net.veth.a)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // libtest prints "test child_holds_port ... " on the same line.
            if line.trim_end().ends_with("READY") {
                let _ = tx.send(());
            }
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(20));
    let attached = shows_xdp(&net.link_a());
    // Killed by its pid (the child we spawned), not by name.
    child.kill().expect("kill child");
    child.wait().expect("reap child");
    ready.expect("child opened the port");
    assert!(attached, "the child's program was attached");
    let start = Instant::now();
    while shows_xdp(&net.link_a()) && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!shows_xdp(&net.link_a()), "detached when the process died");
    std::thread::scope(|s| {
        s.spawn(|| {
            net.a.enter().expect("enter A");
            let port = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("reopen");
            let pool = port.pool(0, small_pool_cfg(64)).expect("pool");
            let t = Instant::now();
            port.open_queue(0, &pool)
                .expect("re-bind after the owner died");
            eprintln!("re-bound after the child's death in {:?}", t.elapsed());
        })
        .join()
        .expect("reopen");
    });
}

fn err_text<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            eprintln!("error as expected: {e}");
            e.to_string()
        }
    }
}

/// Errors are clear and name the interface.
#[test]
fn errors_are_clear() {
    let Some(net) = Net::new("xe", 1, 16) else {
        return;
    };
    // This thread's namespace, to leave A again later.
    let home = std::fs::File::open("/proc/thread-self/ns/net").expect("own netns");
    let home = &home;
    std::thread::scope(|s| {
        s.spawn(|| {
            net.a.enter().expect("enter A");
            let e = err_text(AfXdpPort::open("ixnosuch0", AfXdpConfig::default()));
            assert!(e.contains("ixnosuch0"), "{e}");

            let bad_ring = AfXdpConfig {
                ring_size: 1000,
                ..AfXdpConfig::default()
            };
            let e = err_text(AfXdpPort::open(&net.veth.a, bad_ring));
            assert!(e.contains("ring_size"), "{e}");
            let too_many = AfXdpConfig {
                queues: Some(4),
                ..AfXdpConfig::default()
            };
            let e = err_text(AfXdpPort::open(&net.veth.a, too_many));
            assert!(e.contains("queues"), "{e}");
            assert!(
                !shows_xdp(&net.link_a()),
                "failed opens leave nothing attached"
            );

            let first = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("open");
            for mode in [XdpMode::Auto, XdpMode::Native, XdpMode::Skb] {
                let cfg = AfXdpConfig {
                    mode,
                    ..AfXdpConfig::default()
                };
                let e = err_text(AfXdpPort::open(&net.veth.a, cfg));
                assert!(
                    e.contains(&net.veth.a) && e.contains("already attached"),
                    "{mode:?}: {e}"
                );
            }

            let e = err_text(first.pool(
                0,
                PoolConfig {
                    chunk_size: 8192,
                    ..small_pool_cfg(8)
                },
            ));
            assert!(e.contains("2048 or 4096"), "{e}");
            let pool = first.pool(0, small_pool_cfg(64)).expect("pool");
            let e = err_text(first.open_queue(1, &pool));
            assert!(e.contains("queue 1") && e.contains(&net.veth.a), "{e}");
            let q = first.open_queue(0, &pool).expect("open_queue");
            let pool2 = first.pool(0, small_pool_cfg(64)).expect("pool");
            let e = err_text(first.open_queue(0, &pool2));
            assert!(e.contains("already open"), "{e}");
            drop(q);

            // From a thread outside the port's namespace.
            let e = std::thread::scope(|s2| {
                s2.spawn(|| {
                    nix::sched::setns(home, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                    let pool = first.pool(0, small_pool_cfg(64)).expect("pool");
                    err_text(first.open_queue(0, &pool))
                })
                .join()
                .unwrap()
            });
            assert!(e.contains("namespace"), "{e}");
            drop(first);

            // veth offers no zero-copy: demanding it fails at the bind
            // (native) or at once (skb).
            let zc = AfXdpConfig {
                zero_copy: ZeroCopy::On,
                mode: XdpMode::Native,
                ..AfXdpConfig::default()
            };
            let port = AfXdpPort::open(&net.veth.a, zc).expect("open, zero-copy required");
            let pool = port.pool(0, small_pool_cfg(64)).expect("pool");
            let e = err_text(port.open_queue(0, &pool));
            assert!(e.contains("zero-copy"), "{e}");
            drop(port);
            let zc_skb = AfXdpConfig {
                zero_copy: ZeroCopy::On,
                mode: XdpMode::Skb,
                ..AfXdpConfig::default()
            };
            let e = err_text(AfXdpPort::open(&net.veth.a, zc_skb));
            assert!(e.contains("zero-copy"), "{e}");
        })
        .join()
        .expect("errors");
    });
}

/// A 60-byte UDP frame from B to us, port 9001 -> 9000, checksum off.
fn udp_frame(src_mac: MacAddr, dst_mac: MacAddr, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let payload = [0u8; 18];
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: Protocol::Udp,
        payload_len: 8 + payload.len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
    };
    let eth = EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let mut f = vec![0u8; eth.header_len() + ip.buffer_len()];
    let h = eth.emit(&mut f);
    ip.emit(&mut f[h..], Checksum::Both);
    let udp = ixora_wire::udp::UdpRepr {
        src_port: 9001,
        dst_port: 9000,
    };
    udp.emit(&mut f[h + 20..], src, dst, &payload, Checksum::None);
    f
}

/// Receive rate through one XSK, with an XSK in B as the sender (both in
/// copy mode). Prints frames/s; asserts only that frames flowed and that
/// every frame was received or counted as dropped by the kernel.
#[test]
#[ignore = "benchmark: cargo test --release -p ixora-io --test af_xdp -- --ignored rx_rate --nocapture"]
fn rx_rate() {
    let Some(net) = Net::new("xr", 1, 17) else {
        return;
    };
    let net = &net;
    const SECS: f64 = 3.0;
    let (mac_tx, mac_rx) = mpsc::channel::<MacAddr>();
    let done = AtomicBool::new(false);
    let done = &done;
    std::thread::scope(|s| {
        let rx = s.spawn(move || {
            net.a.enter().expect("enter A");
            let port = AfXdpPort::open(&net.veth.a, AfXdpConfig::default()).expect("open");
            let pool = port.pool(0, small_pool_cfg(4096)).expect("pool");
            let mut q = port.open_queue(0, &pool).expect("open_queue");
            mac_tx.send(port.mac()).unwrap();
            let mut bufs = Vec::with_capacity(64);
            let (mut got, mut first, mut last) = (0u64, None, Instant::now());
            let start = Instant::now();
            let mut spins = 0u32;
            loop {
                let n = q.rx_burst(&mut bufs, 64).unwrap();
                if n > 0 {
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                    got += n as u64;
                    bufs.clear();
                    continue;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(1024)
                    && (start.elapsed() > Duration::from_secs(30)
                        || (done.load(Ordering::Relaxed)
                            && last.elapsed() > Duration::from_millis(300)))
                {
                    break;
                }
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(250) {
                q.rx_burst(&mut bufs, 64).unwrap();
                bufs.clear();
                std::thread::sleep(Duration::from_millis(5));
            }
            let secs = first.map_or(1.0, |f| (last - f).as_secs_f64());
            (got, got as f64 / secs, port.stats())
        });
        let mac_a = mac_rx.recv_timeout(Duration::from_secs(10)).expect("mac");
        let tx = s.spawn(move || {
            net.b.enter().expect("enter B");
            let port = AfXdpPort::open(&net.veth.b, AfXdpConfig::default()).expect("open B");
            let pool = port.pool(0, small_pool_cfg(4096)).expect("pool B");
            let mut q = port.open_queue(0, &pool).expect("open_queue B");
            let frame = udp_frame(port.mac(), mac_a, net.theirs(), net.ours());
            let mut out = Vec::with_capacity(64);
            let mut sent = 0u64;
            let start = Instant::now();
            let mut rounds = 0u32;
            while !rounds.is_multiple_of(256) || start.elapsed().as_secs_f64() < SECS {
                rounds = rounds.wrapping_add(1);
                while out.len() < 64 {
                    match pool.copy_in(&frame) {
                        Some(b) => out.push(b),
                        None => break,
                    }
                }
                sent += q.tx_burst(&mut out).unwrap() as u64;
                q.reclaim();
            }
            let secs = start.elapsed().as_secs_f64();
            out.clear();
            settle(
                q.as_mut(),
                &pool,
                pool.lent() - port.stats().tx_frames as usize,
            );
            done.store(true, Ordering::Relaxed);
            (sent, sent as f64 / secs)
        });
        let (sent, tx_rate) = tx.join().expect("sender");
        let (got, rx_rate, st) = rx.join().expect("receiver");
        eprintln!(
            "sent {sent} ({:.2} Mpps), received {got} ({:.2} Mpps); kernel drops: rx_dropped \
             {} rx_ring_full {} fill_ring_empty {}",
            tx_rate / 1e6,
            rx_rate / 1e6,
            st.kernel_rx_dropped,
            st.kernel_rx_ring_full,
            st.kernel_fill_ring_empty
        );
        assert!(got > 0);
    });
}
