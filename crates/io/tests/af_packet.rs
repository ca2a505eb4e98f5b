//! AF_PACKET backend against a real Linux peer: two namespaces joined by a
//! veth pair, Ixora's side opened with [`AfPacketPort`] in namespace A,
//! Linux (ping, UDP sockets) in namespace B. Addresses from 198.18.0.0/15
//! only; every loop is bounded in count and time; namespaces and veths go
//! away on drop, also when an assertion fails.

use ixora_io::af_packet::{AfPacketConfig, AfPacketPort, Fanout, RxRing};
use ixora_io::netns::{NetNs, Veth};
use ixora_io::{sys, PacketBuf, Pool, PoolConfig, Port, Queue};
use ixora_wire::arp::{ArpPacket, ArpRepr, Operation};
use ixora_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_wire::udp::UdpPacket;
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

/// Namespaces A (Ixora, interface up without an address) and B (Linux,
/// `peer_ip`/24), joined by a veth pair.
struct Net {
    // Field order: the veth goes before its namespaces.
    veth: Veth,
    b: NetNs,
    a: NetNs,
}

fn net(tag: &str, peer_ip: Ipv4Addr) -> Net {
    let a = NetNs::new(tag).expect("netns a");
    let b = NetNs::new(tag).expect("netns b");
    quiet(&a);
    quiet(&b);
    let veth = Veth::new(tag, 1, Some(&a), Some(&b)).expect("veth");
    a.ip(&["link", "set", &veth.a, "up"]).expect("link up");
    b.addr(&veth.b, peer_ip, 24).expect("peer address");
    Net { veth, b, a }
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
/// `limit`); returns (ping succeeded, ARP replies, echo replies, frames
/// received that we sent ourselves).
fn serve_ping(
    q: &mut dyn Queue,
    pool: &Pool,
    mac: MacAddr,
    ip: Ipv4Addr,
    mut ping: std::process::Child,
    limit: Duration,
) -> (bool, u32, u32, u32) {
    let deadline = Instant::now() + limit;
    let (mut arp, mut echo, mut own) = (0, 0, 0);
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
            let eth = EthernetFrame::new_checked(f.as_slice()).expect("ethernet");
            if eth.src_addr() == mac {
                own += 1;
            }
            if let Some(reply) = answer(f.as_slice(), mac, ip) {
                match eth.ethertype() {
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
    (ok, arp, echo, own)
}

fn cfg(rx_ring: RxRing) -> AfPacketConfig {
    AfPacketConfig {
        rx_ring,
        ..AfPacketConfig::default()
    }
}

#[test]
fn arp_and_ping_round_trip_blocks() {
    ping_round_trip(RxRing::Blocks, 61);
}

#[test]
fn arp_and_ping_round_trip_frames() {
    ping_round_trip(RxRing::Frames, 65);
}

fn ping_round_trip(mode: RxRing, net_id: u8) {
    if !root() {
        return;
    }
    let (ours, peer) = (
        Ipv4Addr::new(198, 18, net_id, 1),
        Ipv4Addr::new(198, 18, net_id, 2),
    );
    let n = net("afp", peer);
    let port = in_ns(&n.a, || AfPacketPort::open(&n.veth.a, cfg(mode))).expect("open port");
    let caps = port.caps();
    assert_eq!(caps.backend, "af_packet");
    assert_eq!(caps.queues, 1);
    assert!(caps.rx_checksum_unreliable && caps.flow_steering && !caps.zero_copy);
    assert_eq!(caps.max_frame, 1500 + 18);
    let mac = port.mac();
    assert!(mac.is_unicast());
    let p = pool(256);
    let mut q = port.open_queue(0, &p).expect("open queue");
    // A queue is handed out once; there is no queue 1.
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
    let (ok, arp, echo, own) = serve_ping(&mut *q, &p, mac, ours, ping, Duration::from_secs(8));
    assert!(ok, "ping failed (ARP answered {arp}, echo answered {echo})");
    assert!(arp >= 1 && echo >= 1, "arp {arp} echo {echo}");
    assert_eq!(own, 0, "our own transmitted frames came back");
    let st = port.stats();
    assert!(st.tx_frames >= 2 && st.rx_frames >= 2, "{st:?}");
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
        udp.verify_checksum(ip.src_addr(), ip.dst_addr()),
    ))
}

#[test]
fn many_frames_are_all_counted_blocks() {
    many_frames(RxRing::Blocks, 62);
}

#[test]
fn many_frames_are_all_counted_frames() {
    many_frames(RxRing::Frames, 66);
}

fn many_frames(mode: RxRing, net_id: u8) {
    if !root() {
        return;
    }
    const N: usize = 20_000;
    let (ours, peer) = (
        Ipv4Addr::new(198, 18, net_id, 1),
        Ipv4Addr::new(198, 18, net_id, 2),
    );
    let n = net("afm", peer);
    let port = in_ns(&n.a, || AfPacketPort::open(&n.veth.a, cfg(mode))).expect("open port");
    neigh(&n.b, &n.veth.b, ours, port.mac());
    let p = pool(1024);
    let mut q = port.open_queue(0, &p).expect("open queue");
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
    let st = port.stats();
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    eprintln!(
        "af_packet {mode:?}: received {got}/{N} UDP frames in {secs:.3} s ({:.0} kpps); \
         checksum incomplete {bad_csum} (CSUMNOTREADY {}); ring drops {}",
        got as f64 / secs.max(1e-9) / 1e3,
        st.rx_csum_not_ready,
        st.rx_ring_drops
    );
    // veth itself may drop under a burst (the peer's backlog), so allow a
    // little loss, but every frame the kernel dropped in our ring is
    // counted and the rest were delivered. How many the ring drops
    // depends on the scheduler, not on the port: a receiver the VM
    // stops for 30 ms lets the blast (20,000 frames in some 70 ms)
    // overrun its 2,048 slots (a workspace test run on 2026-11-28:
    // 13,663 received, 6,337 counted as ring drops; a VM here has stopped
    // a vCPU for 68 ms). It must still have received a full ring's worth,
    // which the ring holds until the receiver runs.
    let drops = st.rx_ring_drops as usize;
    assert!(
        got + drops >= N * 9 / 10,
        "only {got} of {N} frames, {drops} counted as dropped"
    );
    assert!(
        got >= 2_000,
        "only {got} of {N} frames ({drops} ring drops)"
    );
    assert!(got + drops <= N);
    // Incomplete checksums are exactly the ones flagged CSUMNOTREADY.
    assert!(
        bad_csum as u64 <= st.rx_csum_not_ready,
        "{bad_csum} bad, {st:?}"
    );
    drop(q);
    assert_eq!(p.available(), 1024, "pool buffers leaked");
}

#[test]
fn empty_pool_leaves_frames_in_the_ring_blocks() {
    empty_pool(RxRing::Blocks, 63);
}

#[test]
fn empty_pool_leaves_frames_in_the_ring_frames() {
    empty_pool(RxRing::Frames, 67);
}

fn empty_pool(mode: RxRing, net_id: u8) {
    if !root() {
        return;
    }
    const N: usize = 300;
    let (ours, peer) = (
        Ipv4Addr::new(198, 18, net_id, 1),
        Ipv4Addr::new(198, 18, net_id, 2),
    );
    let n = net("afe", peer);
    let port = in_ns(&n.a, || AfPacketPort::open(&n.veth.a, cfg(mode))).expect("open port");
    neigh(&n.b, &n.veth.b, ours, port.mac());
    let p = pool(64);
    let mut q = port.open_queue(0, &p).expect("open queue");
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
    assert!(p.alloc_failures() > 0);
    assert_eq!(port.stats().rx_ring_drops, 0);
    drop(q);
    assert_eq!(p.available(), 64);
}

#[test]
fn fanout_hash_keeps_each_flow_on_one_queue() {
    if !root() {
        return;
    }
    const FLOWS: u16 = 16;
    const PER_FLOW: usize = 60;
    let (ours, peer) = (Ipv4Addr::new(198, 18, 64, 1), Ipv4Addr::new(198, 18, 64, 2));
    let n = net("aff", peer);
    let cfg = AfPacketConfig {
        queues: 2,
        fanout: Fanout::Hash,
        ..AfPacketConfig::default()
    };
    let port = in_ns(&n.a, || AfPacketPort::open(&n.veth.a, cfg)).expect("open port");
    assert_eq!(port.caps().queues, 2);
    neigh(&n.b, &n.veth.b, ours, port.mac());
    let pools = [pool(512), pool(512)];
    let mut qs: Vec<Box<dyn Queue>> = (0..2)
        .map(|i| port.open_queue(i, &pools[i as usize]).expect("open queue"))
        .collect();
    let ports: Vec<u16> = (0..FLOWS).map(|i| 41000 + i).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            udp_blast(
                &n.b,
                peer,
                &ports,
                SocketAddrV4::new(ours, 9002),
                PER_FLOW,
                40,
            )
        });
    });
    // flow (source port) -> frames per queue
    let mut seen: BTreeMap<u16, [usize; 2]> = BTreeMap::new();
    let total = FLOWS as usize * PER_FLOW;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rx = Vec::new();
    let mut got = 0;
    while got < total && Instant::now() < deadline {
        for (i, q) in qs.iter_mut().enumerate() {
            q.rx_burst(&mut rx, 256).expect("rx");
            for f in rx.drain(..) {
                if let Some((sport, _)) = udp_info(f.as_slice(), 9002) {
                    seen.entry(sport).or_default()[i] += 1;
                    got += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!("af_packet fanout: {seen:?}");
    assert_eq!(got, total, "frames missing");
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
    // Both sockets are in one kernel-chosen group.
    assert!(port
        .caps()
        .note
        .contains(&format!("{:#06x}", port.fanout_group())));
    drop(qs);
    for p in &pools {
        assert_eq!(p.available(), 512);
    }
}

#[test]
fn open_errors_are_clear() {
    let e = AfPacketPort::open("ixnosuch0", AfPacketConfig::default()).unwrap_err();
    assert!(e.to_string().contains("ixnosuch0"), "{e}");
    // Loopback's 64 KiB MTU does not fit 2 KiB transmit slots: refused with
    // a message saying so, before any socket is made.
    let e = AfPacketPort::open("lo", AfPacketConfig::default()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("frame_size"), "{e}");
    for cfg in [
        AfPacketConfig {
            queues: 0,
            ..AfPacketConfig::default()
        },
        AfPacketConfig {
            block_size: 5000,
            ..AfPacketConfig::default()
        },
        AfPacketConfig {
            block_count: 0,
            ..AfPacketConfig::default()
        },
    ] {
        let e = AfPacketPort::open("lo", cfg).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{cfg:?}: {e}");
    }
}
