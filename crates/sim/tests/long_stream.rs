//! One connection carrying more than 2^32 bytes: sequence numbers wrap and
//! the distance from the ISS passes 2^31 (a review found the send path
//! broke there). Every byte is checked.

use bytes::Bytes;
use ixora_core::wire::ChecksumCaps;
use ixora_core::{Duration, Event};
use ixora_sim::{host_config, LinkConfig, Network, IP_B};
use std::net::SocketAddrV4;

/// A pattern with a period no segment size divides.
const PERIOD: usize = 251;

#[test]
fn more_than_4_gib_on_one_connection() {
    let total: u64 = (1u64 << 32) + (64 << 20);
    let mut cfgs = [host_config(0, 1), host_config(1, 1)];
    for c in &mut cfgs {
        c.mtu = 9000;
        c.tcp.send_buffer = 4 << 20;
        c.tcp.recv_buffer = 4 << 20;
        // Checksums are tested elsewhere; here they would only cost time.
        c.checksums = ChecksumCaps::ignored();
    }
    let [a, b] = cfgs;
    let link = LinkConfig {
        delay: Duration::from_micros(50),
        rate_bps: 0,
        queue_bytes: 0,
        ..LinkConfig::default()
    };
    let mut net = Network::new(a, b, link, 1).unwrap();
    net.hosts[1].tcp_listen(5001, None, 7).unwrap();
    let ha = net.hosts[0]
        .tcp_connect(net.now(), 1, SocketAddrV4::new(IP_B, 5001))
        .unwrap();
    let pat: Bytes = (0..PERIOD * 8192)
        .map(|i| (i % PERIOD) as u8)
        .collect::<Vec<u8>>()
        .into();
    let (mut sent, mut recvd) = (0u64, 0u64);
    let mut connected = false;
    while recvd < total {
        let now = net.now();
        while let Some(e) = net.hosts[0].poll_event() {
            match e {
                Event::Connected { .. } => connected = true,
                Event::Dead { reason, .. } => panic!("sender died: {reason:?} at {sent}"),
                _ => {}
            }
        }
        while let Some(e) = net.hosts[1].poll_event() {
            match e {
                Event::Knock { handle, .. } => net.hosts[1].tcp_accept(handle, 2).unwrap(),
                Event::Recv { handle, .. } => {
                    let mut n = 0u64;
                    for c in net.hosts[1].tcp_recv_chunks(handle).unwrap() {
                        let off = ((recvd + n) % PERIOD as u64) as usize;
                        assert!(
                            &pat[off..off + c.len()] == c,
                            "corrupt near byte {}",
                            recvd + n
                        );
                        n += c.len() as u64;
                    }
                    recvd += n;
                    net.hosts[1].tcp_recv_done(now, handle, n as usize).unwrap();
                }
                Event::Dead { reason, .. } => panic!("receiver died: {reason:?} at {recvd}"),
                _ => {}
            }
        }
        if connected {
            while sent < total {
                let off = (sent % PERIOD as u64) as usize;
                let len = (pat.len() - off).min((total - sent) as usize);
                match net.hosts[0].tcp_send(now, ha, pat.slice(off..off + len)) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sent += n as u64,
                }
            }
        }
        net.flush();
        let t = net
            .next_time()
            .expect("a transfer in progress always has a next event");
        net.advance_to(t);
    }
    net.hosts[0].check_invariants().unwrap();
    net.hosts[1].check_invariants().unwrap();
    assert_eq!(net.hosts[0].counters().tcp_retrans_segs, 0);
}
