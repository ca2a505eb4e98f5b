//! TAP backend against the Linux stack: the TAP device is created in a
//! scratch namespace, moved into namespace B and given 198.18.x.2/24 there;
//! the test thread holds its queues and plays Ixora at 198.18.x.1.
//! Addresses from 198.18.0.0/15 only; every loop is bounded in count and
//! time; the device goes away with the port, the namespaces on drop, also
//! when an assertion fails.

mod common;

use ixora_io::netns::{unique_name, NetNs};
use ixora_io::tap::{TapConfig, TapPort};
use ixora_io::{sys, PacketBuf, Pool, PoolConfig, Port, Queue};
use ixora_wire::arp::{ArpPacket, ArpRepr, Operation};
use ixora_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_wire::udp::{UdpPacket, UdpRepr};
use ixora_wire::{Checksum, Ipv4Addr};
use std::collections::BTreeMap;
use std::net::{SocketAddrV4, UdpSocket};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn root() -> bool {
    ixora_io::netns::need_root()
}

/// Run `f` on a fresh thread inside `ns` (the caller's thread stays put).
fn in_ns<T: Send>(ns: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    ns.run(f)
}

/// No IPv6 chatter (router solicitations, MLD) on the test link.
fn quiet(ns: &NetNs) {
    ns.disable_ipv6().expect("sysctl");
}

/// A TAP port whose Linux side sits in namespace `b` with `peer_ip`/24.
struct TapNet {
    // Field order: the port (and with it the device) goes first.
    port: TapPort,
    b: NetNs,
    _scratch: NetNs,
}

fn tap_net(tag: &str, cfg: TapConfig, peer_ip: Ipv4Addr) -> TapNet {
    let scratch = NetNs::new(tag).expect("scratch netns");
    let b = NetNs::new(tag).expect("netns b");
    quiet(&b);
    let name = unique_name("ixt", true);
    let port = in_ns(&scratch, || TapPort::create(Some(&name), cfg)).expect("create TAP");
    assert_eq!(port.name(), name);
    port.move_to_netns(&b).expect("move TAP");
    b.addr(&name, peer_ip, 24).expect("peer address");
    TapNet {
        port,
        b,
        _scratch: scratch,
    }
}

fn pool(chunks: u32) -> Pool {
    Pool::new(PoolConfig {
        chunks,
        hugepages: false,
        ..PoolConfig::default()
    })
    .expect("pool")
}

/// The reply to an ARP request for `ip` or to an ICMP echo request to it.
fn answer(frame: &[u8], mac: MacAddr, ip: Ipv4Addr) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        EtherType::Arp => {
            let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            if r.operation != Operation::Request || r.target_ip != ip {
                return None;
            }
            let reply = ArpRepr {
                operation: Operation::Reply,
                sender_mac: mac,
                sender_ip: ip,
                target_mac: r.sender_mac,
                target_ip: r.sender_ip,
            };
            let e = EthernetRepr {
                src_addr: mac,
                dst_addr: r.sender_mac,
                ethertype: EtherType::Arp,
                vlan: None,
            };
            let mut out = vec![0u8; e.header_len() + reply.buffer_len()];
            let hl = e.emit(&mut out);
            reply.emit(&mut out[hl..]);
            Some(out)
        }
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(eth.payload()).ok()?;
            let ipr = Ipv4Repr::parse(&p, Checksum::Both).ok()?;
            if ipr.dst_addr != ip || ipr.protocol != Protocol::Icmp {
                return None;
            }
            let icmp = Icmpv4Packet::new_checked(p.payload()).ok()?;
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
            let e = EthernetRepr {
                src_addr: mac,
                dst_addr: eth.src_addr(),
                ethertype: EtherType::Ipv4,
                vlan: None,
            };
            let mut out = vec![0u8; e.header_len() + ip_out.buffer_len()];
            let hl = e.emit(&mut out);
            ip_out.emit(&mut out[hl..], Checksum::Both);
            reply.emit(&mut out[hl + ip_out.header_len()..], Checksum::Both);
            Some(out)
        }
        _ => None,
    }
}

/// Answer ARP and ICMP echo for `ip` on `q` until `ping` exits (at most
/// `limit`); returns (ping succeeded, ARP replies, echo replies).
fn serve_ping(
    q: &mut dyn Queue,
    pool: &Pool,
    mac: MacAddr,
    ip: Ipv4Addr,
    mut ping: std::process::Child,
    limit: Duration,
) -> (bool, u32, u32) {
    let deadline = Instant::now() + limit;
    let (mut arp, mut echo) = (0, 0);
    let mut rx = Vec::new();
    let ok = loop {
        if let Some(st) = ping.try_wait().expect("wait ping") {
            break st.success();
        }
        if Instant::now() > deadline {
            let _ = ping.kill();
            let _ = ping.wait();
            break false;
        }
        sys::wait_readable(q.poll_fd().expect("poll fd"), 10).expect("poll");
        q.rx_burst(&mut rx, 32).expect("rx");
        let mut tx: Vec<PacketBuf> = Vec::new();
        for f in rx.drain(..) {
            if let Some(reply) = answer(f.as_slice(), mac, ip) {
                match EthernetFrame::new_checked(f.as_slice())
                    .unwrap()
                    .ethertype()
                {
                    EtherType::Arp => arp += 1,
                    _ => echo += 1,
                }
                tx.push(pool.copy_in(&reply).expect("tx buffer"));
            }
        }
        let mut tries = 0;
        while !tx.is_empty() && tries < 100 {
            q.tx_burst(&mut tx).expect("tx");
            tries += 1;
        }
        q.reclaim();
    };
    (ok, arp, echo)
}

#[test]
fn arp_and_ping_round_trip() {
    if !root() {
        return;
    }
    let (ours, peer) = (Ipv4Addr::new(198, 18, 81, 1), Ipv4Addr::new(198, 18, 81, 2));
    let n = tap_net("tpp", TapConfig::default(), peer);
    let port = &n.port;
    let caps = port.caps();
    assert_eq!(caps.backend, "tap");
    assert_eq!(caps.queues, 1);
    assert!(caps.flow_steering && !caps.rx_checksum_unreliable && !caps.zero_copy);
    assert_eq!(caps.max_frame, 1500 + 18);
    // Ixora's end has its own locally administered unicast address, not
    // the interface's (which Linux in B reports).
    let mac = port.mac();
    assert!(mac.is_unicast() && mac.0[0] & 2 != 0, "{mac}");
    assert_ne!(mac, port.kernel_mac());
    let link = n.b.ip(&["link", "show", port.name()]).expect("ip link");
    assert!(String::from_utf8_lossy(&link.stdout).contains(&port.kernel_mac().to_string()));

    let p = pool(256);
    let mut q = port.open_queue(0, &p).expect("open queue");
    assert_eq!(
        port.open_queue(0, &p).err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AlreadyExists)
    );
    assert!(port.open_queue(1, &p).is_err());

    let ping =
        n.b.command("ping")
            .args(["-c", "1", "-W", "2", &ours.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ping");
    let (ok, arp, echo) = serve_ping(&mut *q, &p, mac, ours, ping, Duration::from_secs(8));
    assert!(ok, "ping failed (ARP answered {arp}, echo answered {echo})");
    assert!(arp >= 1 && echo >= 1, "arp {arp} echo {echo}");
    // Linux learnt Ixora's address for 198.18.81.1.
    let neigh =
        n.b.ip(&["neigh", "show", &ours.to_string()])
            .expect("ip neigh");
    assert!(String::from_utf8_lossy(&neigh.stdout).contains(&mac.to_string()));
    let st = port.stats();
    assert!(
        st.tx_frames >= 2 && st.rx_frames >= 2 && st.tx_errors == 0,
        "{st:?}"
    );
    drop(q);
    assert_eq!(p.available(), 256, "pool buffers leaked");
}

/// Send `per_flow` UDP datagrams of `size` bytes from each source port in
/// `ports` (round robin) from namespace `ns` to `dst`.
fn udp_blast(
    ns: &NetNs,
    src: Ipv4Addr,
    ports: &[u16],
    dst: SocketAddrV4,
    per_flow: usize,
    size: usize,
) {
    ns.enter().expect("enter namespace");
    let socks: Vec<UdpSocket> = ports
        .iter()
        .map(|&p| UdpSocket::bind(SocketAddrV4::new(src, p)).expect("bind"))
        .collect();
    let payload = vec![0x5au8; size];
    for i in 0..per_flow {
        for s in &socks {
            // Transient ENOBUFS is possible under load; the count tells.
            let _ = s.send_to(&payload, dst);
        }
        if i % 64 == 63 {
            std::thread::yield_now();
        }
    }
}

/// Static neighbour entry in `ns` so Linux sends to `ip` without ARP.
fn neigh(ns: &NetNs, dev: &str, ip: Ipv4Addr, mac: MacAddr) {
    ns.ip(&[
        "neigh",
        "replace",
        &ip.to_string(),
        "lladdr",
        &mac.to_string(),
        "dev",
        dev,
        "nud",
        "permanent",
    ])
    .expect("neigh");
}

/// A received UDP frame to `port`: (source port, checksum verifies).
fn udp_info(frame: &[u8], port: u16) -> Option<(u16, bool)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.protocol() != Protocol::Udp {
        return None;
    }
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    if udp.dst_port() != port {
        return None;
    }
    Some((
        udp.src_port(),
        udp.checksum() != 0 && udp.verify_checksum(ip.src_addr(), ip.dst_addr()),
    ))
}

#[test]
fn many_frames_with_vnet_header() {
    many_frames(true, 82);
}

#[test]
fn many_frames_without_vnet_header() {
    many_frames(false, 83);
}

fn many_frames(vnet_hdr: bool, net_id: u8) {
    if !root() {
        return;
    }
    const N: usize = 20_000;
    let (ours, peer) = (
        Ipv4Addr::new(198, 18, net_id, 1),
        Ipv4Addr::new(198, 18, net_id, 2),
    );
    let cfg = TapConfig {
        queues: 1,
        vnet_hdr,
    };
    let n = tap_net("tpm", cfg, peer);
    neigh(&n.b, n.port.name(), ours, n.port.mac());
    // Room for the whole burst in the device's queue to us, so a slow
    // (debug-build, shared-CPU) reader loses nothing.
    n.b.ip(&["link", "set", n.port.name(), "txqueuelen", "25000"])
        .expect("txqueuelen");
    let p = pool(1024);
    let mut q = n.port.open_queue(0, &p).expect("open queue");
    let (mut got, mut bad_csum) = (0usize, 0usize);
    let mut first = None;
    let mut last = Instant::now();
    std::thread::scope(|s| {
        let sender =
            s.spawn(|| udp_blast(&n.b, peer, &[40000], SocketAddrV4::new(ours, 9000), N, 18));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut idle_since: Option<Instant> = None;
        let mut rx = Vec::with_capacity(256);
        while got < N && Instant::now() < deadline {
            sys::wait_readable(q.poll_fd().unwrap(), 5).unwrap();
            let k = q.rx_burst(&mut rx, 256).expect("rx");
            for f in rx.drain(..) {
                if let Some((_, ok)) = udp_info(f.as_slice(), 9000) {
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                    got += 1;
                    bad_csum += usize::from(!ok);
                }
            }
            // Once the sender is done, stop after 500 ms without frames.
            if k == 0 && sender.is_finished() {
                let t = *idle_since.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_millis(500) {
                    break;
                }
            } else {
                idle_since = None;
            }
        }
        sender.join().expect("sender");
    });
    let st = n.port.stats();
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    eprintln!(
        "tap vnet_hdr={vnet_hdr}: received {got}/{N} UDP frames in {secs:.3} s ({:.0} kpps); \
         bad checksums {bad_csum}; completed by us {}; dropped {}",
        got as f64 / secs.max(1e-9) / 1e3,
        st.rx_csum_completed,
        st.rx_dropped
    );
    if got < N {
        let link =
            n.b.ip(&["-s", "link", "show", n.port.name()])
                .expect("ip link");
        eprintln!("{}", String::from_utf8_lossy(&link.stdout));
    }
    assert!(got >= N * 99 / 100, "only {got} of {N} frames");
    // Every delivered checksum is complete, whoever completed it.
    assert_eq!(bad_csum, 0);
    if vnet_hdr {
        assert!(st.rx_csum_completed >= got as u64, "{st:?}");
    } else {
        assert_eq!(st.rx_csum_completed, 0);
    }
    assert_eq!(st.rx_dropped, 0);
    drop(q);
    assert_eq!(p.available(), 1024, "pool buffers leaked");
}

#[test]
fn empty_pool_leaves_frames_queued() {
    if !root() {
        return;
    }
    const N: usize = 300;
    let (ours, peer) = (Ipv4Addr::new(198, 18, 84, 1), Ipv4Addr::new(198, 18, 84, 2));
    let n = tap_net("tpe", TapConfig::default(), peer);
    neigh(&n.b, n.port.name(), ours, n.port.mac());
    let p = pool(64);
    let mut q = n.port.open_queue(0, &p).expect("open queue");
    std::thread::scope(|s| {
        s.spawn(|| udp_blast(&n.b, peer, &[40001], SocketAddrV4::new(ours, 9001), N, 32));
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut got, mut stalls) = (0usize, 0);
    let mut held = Vec::new();
    while got < N && Instant::now() < deadline {
        sys::wait_readable(q.poll_fd().unwrap(), 5).unwrap();
        let before = held.len();
        q.rx_burst(&mut held, 1000).expect("rx");
        got += held[before..]
            .iter()
            .filter(|f| udp_info(f.as_slice(), 9001).is_some())
            .count();
        if p.available() == 0 {
            // Exhausted: nothing more comes, nothing is lost.
            assert_eq!(q.rx_burst(&mut held, 1000).unwrap(), 0);
            stalls += 1;
            held.clear();
        }
    }
    drop(held);
    assert_eq!(got, N, "frames lost while the pool was empty");
    assert!(stalls >= 4, "pool never ran dry ({stalls})");
    drop(q);
    assert_eq!(p.available(), 64);
}

#[test]
fn multiqueue_keeps_each_flow_on_one_queue() {
    if !root() {
        return;
    }
    const FLOWS: u16 = 16;
    const PER_FLOW: usize = 60;
    let (ours, peer) = (Ipv4Addr::new(198, 18, 85, 1), Ipv4Addr::new(198, 18, 85, 2));
    let cfg = TapConfig {
        queues: 2,
        vnet_hdr: true,
    };
    let n = tap_net("tpf", cfg, peer);
    assert_eq!(n.port.caps().queues, 2);
    neigh(&n.b, n.port.name(), ours, n.port.mac());
    let pools = [pool(512), pool(512)];
    let mut qs: Vec<Box<dyn Queue>> = (0..2)
        .map(|i| {
            n.port
                .open_queue(i, &pools[i as usize])
                .expect("open queue")
        })
        .collect();
    let ports: Vec<u16> = (0..FLOWS).map(|i| 42000 + i).collect();
    let mut seen: BTreeMap<u16, [usize; 2]> = BTreeMap::new();
    let total = FLOWS as usize * PER_FLOW;
    let mut got = 0;
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            udp_blast(
                &n.b,
                peer,
                &ports,
                SocketAddrV4::new(ours, 9002),
                PER_FLOW,
                40,
            )
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut rx = Vec::new();
        let mut idle = 0;
        while got < total && Instant::now() < deadline && idle < 500 {
            let mut k = 0;
            for (i, q) in qs.iter_mut().enumerate() {
                k += q.rx_burst(&mut rx, 256).expect("rx");
                for f in rx.drain(..) {
                    if let Some((sport, _)) = udp_info(f.as_slice(), 9002) {
                        seen.entry(sport).or_default()[i] += 1;
                        got += 1;
                    }
                }
            }
            if k == 0 && sender.is_finished() {
                idle += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    eprintln!("tap queues: {seen:?}");
    assert!(got >= total * 9 / 10, "only {got} of {total} frames");
    assert_eq!(seen.len(), FLOWS as usize);
    for (sport, per_q) in &seen {
        assert!(
            per_q[0] == 0 || per_q[1] == 0,
            "flow {sport} split over queues: {per_q:?}"
        );
    }
    let on_q0 = seen.values().filter(|c| c[0] > 0).count();
    assert!(
        on_q0 > 0 && on_q0 < FLOWS as usize,
        "all flows on one queue"
    );
    drop(qs);
    for p in &pools {
        assert_eq!(p.available(), 512);
    }
}

#[test]
fn a_flow_follows_the_queue_we_send_it_on() {
    if !root() {
        return;
    }
    let (ours, peer) = (Ipv4Addr::new(198, 18, 86, 1), Ipv4Addr::new(198, 18, 86, 2));
    let cfg = TapConfig {
        queues: 2,
        vnet_hdr: true,
    };
    let n = tap_net("tpx", cfg, peer);
    neigh(&n.b, n.port.name(), ours, n.port.mac());
    let pools = [pool(256), pool(256)];
    let mut qs: Vec<Box<dyn Queue>> = (0..2)
        .map(|i| {
            n.port
                .open_queue(i, &pools[i as usize])
                .expect("open queue")
        })
        .collect();
    // Frames of flow `sport` -> 9003 from Linux, per queue.
    let blast = |qs: &mut Vec<Box<dyn Queue>>, sport: u16| -> [usize; 2] {
        std::thread::scope(|s| {
            s.spawn(|| udp_blast(&n.b, peer, &[sport], SocketAddrV4::new(ours, 9003), 20, 40));
        });
        let mut c = [0; 2];
        let mut rx = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while c[0] + c[1] < 20 && Instant::now() < deadline {
            for (i, q) in qs.iter_mut().enumerate() {
                q.rx_burst(&mut rx, 64).expect("rx");
                for f in rx.drain(..) {
                    c[i] += usize::from(udp_info(f.as_slice(), 9003).is_some());
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        c
    };
    for sport in [43000u16, 43001] {
        let before = blast(&mut qs, sport);
        assert!(before[0] == 0 || before[1] == 0, "{before:?}");
        let other = usize::from(before[1] == 0);
        // One datagram of the reverse direction, sent on the other queue.
        let udp = UdpRepr {
            src_port: 9003,
            dst_port: sport,
        };
        let ip = Ipv4Repr {
            src_addr: ours,
            dst_addr: peer,
            protocol: Protocol::Udp,
            payload_len: udp.buffer_len(8),
            ttl: 64,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: true,
        };
        let eth = EthernetRepr {
            src_addr: n.port.mac(),
            dst_addr: n.port.kernel_mac(),
            ethertype: EtherType::Ipv4,
            vlan: None,
        };
        let mut out = vec![0u8; eth.header_len() + ip.buffer_len()];
        let hl = eth.emit(&mut out);
        ip.emit(&mut out[hl..], Checksum::Both);
        udp.emit(&mut out[hl + 20..], ours, peer, &[7; 8], Checksum::Both);
        let mut tx = vec![pools[other].copy_in(&out).expect("buffer")];
        assert_eq!(qs[other].tx_burst(&mut tx).expect("tx"), 1);
        let after = blast(&mut qs, sport);
        eprintln!("flow {sport}: {before:?}, after sending on queue {other}: {after:?}");
        assert_eq!(after[other], 20, "flow {sport} did not follow: {after:?}");
    }
}

#[test]
fn device_naming_and_lifetime() {
    if !root() {
        return;
    }
    let ns = NetNs::new("tpn").expect("netns");
    let port = in_ns(&ns, || TapPort::create(None, TapConfig::default())).expect("create");
    assert!(port.name().starts_with("ixtap"), "{}", port.name());
    let name = port.name().to_string();
    assert!(ns.ip(&["link", "show", &name]).is_ok());
    // Never attaches to an existing interface, TAP or not.
    for taken in [name.as_str(), "lo"] {
        let e = in_ns(&ns, || TapPort::create(Some(taken), TapConfig::default())).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{taken}: {e}");
        assert!(e.to_string().contains(taken), "{e}");
    }
    drop(port);
    assert!(
        ns.ip(&["link", "show", &name]).is_err(),
        "{name} outlived its port"
    );
}

#[test]
fn bad_names_and_configs_are_refused_clearly() {
    let long = "a-name-much-too-long-for-linux";
    let e = TapPort::create(Some(long), TapConfig::default()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let msg = e.to_string();
    assert!(msg.contains(long) && msg.contains("15 bytes"), "{msg}");
    for bad in ["", "a/b"] {
        assert!(TapPort::create(Some(bad), TapConfig::default()).is_err());
    }
    for queues in [0, 257] {
        let cfg = TapConfig {
            queues,
            vnet_hdr: false,
        };
        let e = TapPort::create(Some("ixtapq"), cfg).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
}

/// TCP segments sent with their checksum left partial (virtio-net header
/// `NEEDS_CSUM`) leave the kernel complete (RFC 9293 §3.1: the checksum
/// MUST cover pseudo-header, header and data). The TAP is bridged in B to
/// a veth whose checksum offload is off, so the kernel must complete each
/// segment from the header's positions before the veth; an AF_PACKET port
/// in C reads them. Without the header the port completes them itself.
#[test]
fn partial_tcp_checksums_leave_complete() {
    if !root() {
        return;
    }
    let lens = [0usize, 1, 2, 5, 100, 1001, 1460];
    let (ours, theirs) = (Ipv4Addr::new(198, 18, 86, 1), Ipv4Addr::new(198, 18, 86, 2));
    for vnet_hdr in [true, false] {
        let scratch = NetNs::new("tpc").expect("scratch netns");
        let b = NetNs::new("tpc").expect("netns b");
        let c = NetNs::new("tpc").expect("netns c");
        quiet(&b);
        quiet(&c);
        let cfg = TapConfig {
            vnet_hdr,
            ..TapConfig::default()
        };
        let name = unique_name("ixt", true);
        let port = in_ns(&scratch, || TapPort::create(Some(&name), cfg)).expect("create TAP");
        assert_eq!(port.caps().tx_checksum_offload, vnet_hdr);
        port.move_to_netns(&b).expect("move TAP");
        let veth = ixora_io::netns::Veth::new("tpc", 1, Some(&b), Some(&c)).expect("veth");
        let br = unique_name("ixb", true);
        for args in [
            &["link", "add", &br, "type", "bridge"][..],
            &["link", "set", &br, "up"],
            &["link", "set", &name, "master", &br],
            &["link", "set", &name, "up"],
            &["link", "set", &veth.a, "master", &br],
            &["link", "set", &veth.a, "up"],
        ] {
            b.ip(args).expect("bridge setup");
        }
        b.exec("ethtool", &["-K", &veth.a, "tx", "off"])
            .expect("ethtool");
        c.addr(&veth.b, theirs, 24).expect("address in C");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<MacAddr>();
        let seen = std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                in_ns(&c, || {
                    let port = ixora_io::af_packet::AfPacketPort::open(
                        &veth.b,
                        ixora_io::af_packet::AfPacketConfig::default(),
                    )
                    .expect("af_packet in C");
                    let p = pool(256);
                    let mut q = port.open_queue(0, &p).expect("queue");
                    ready_tx.send(port.mac()).unwrap();
                    let mut seen = Vec::new();
                    let mut bufs = Vec::new();
                    let start = Instant::now();
                    while seen.len() < lens.len() && start.elapsed() < Duration::from_secs(10) {
                        if q.rx_burst(&mut bufs, 32).expect("rx") == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        for f in bufs.drain(..) {
                            let Ok(eth) = EthernetFrame::new_checked(f.as_slice()) else {
                                continue;
                            };
                            let Ok(ipp) = Ipv4Packet::new_checked(eth.payload()) else {
                                continue;
                            };
                            if ipp.protocol() != Protocol::Tcp || ipp.src_addr() != ours {
                                continue;
                            }
                            let t = ixora_wire::tcp::TcpPacket::new_checked(ipp.payload())
                                .expect("tcp");
                            seen.push((ipp.payload().len(), t.verify_checksum(ours, theirs)));
                        }
                    }
                    seen
                })
            });
            let peer_mac = ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("C ready");
            let p = pool(256);
            let mut q = port.open_queue(0, &p).expect("open queue");
            let mut out = Vec::new();
            for &len in &lens {
                let payload: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
                out.push(common::partial_tcp_buf(
                    &p,
                    (port.mac(), peer_mac),
                    ours,
                    theirs,
                    &payload,
                ));
            }
            let start = Instant::now();
            while !out.is_empty() && start.elapsed() < Duration::from_secs(5) {
                q.tx_burst(&mut out).expect("tx");
            }
            watcher.join().expect("watcher")
        });
        let st = port.stats();
        eprintln!("vnet_hdr {vnet_hdr}: (TCP bytes, checksum valid) {seen:?}; {st:?}");
        assert_eq!(seen.len(), lens.len(), "every segment crossed the bridge");
        assert!(
            seen.iter().all(|&(_, ok)| ok),
            "complete checksums: {seen:?}"
        );
        let offloaded = if vnet_hdr { lens.len() as u64 } else { 0 };
        assert_eq!(st.tx_csum_offloaded, offloaded, "{st:?}");
        assert_eq!(st.tx_errors, 0, "{st:?}");
        drop(veth);
        drop(port);
    }
}
