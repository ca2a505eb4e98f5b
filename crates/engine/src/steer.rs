//! Flow-consistent steering: which core owns a flow.
//!
//! Every core computes the same Toeplitz hash (the RSS hash, with the
//! well-known Microsoft key) over a frame's (source address, destination
//! address, source port, destination port) and the flow belongs to core
//! `hash % cores`. A frame that arrives on another core's queue (a device
//! that does not steer by flow, such as veth, or whose hash we cannot
//! predict) is handed over in software; an outgoing connection picks an
//! ephemeral port whose hash lands on the calling core (IX §4.4), so its
//! replies come home without a hand-over when the device hashes the same
//! way.

use ixora_wire::ethernet::{EtherType, EthernetFrame};
use ixora_wire::ipv4::{Ipv4Packet, Protocol};
use std::net::Ipv4Addr;

/// The default RSS key (Microsoft's, used by most NICs).
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The Toeplitz hash of `input` under `key` (key at least input + 4 bytes).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut result = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            let next_bit = (key[i + 4] >> (7 - bit)) & 1;
            window = (window << 1) | u32::from(next_bit);
        }
    }
    result
}

/// The RSS hash of an IPv4 TCP/UDP 4-tuple as a receiver sees it.
pub fn flow_hash(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> u32 {
    let mut input = [0u8; 12];
    input[..4].copy_from_slice(&src.octets());
    input[4..8].copy_from_slice(&dst.octets());
    input[8..10].copy_from_slice(&sport.to_be_bytes());
    input[10..12].copy_from_slice(&dport.to_be_bytes());
    toeplitz(&RSS_KEY, &input)
}

/// Where a received frame should be processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The core that owns its flow.
    Core(usize),
    /// Every core (ARP: each core keeps its own cache).
    All,
}

/// Decide which core a frame belongs to. Frames that are not TCP/UDP over
/// IPv4 (ICMP, fragments, garbage) stay where they arrived, except ARP,
/// which every core must see.
pub fn target(frame: &[u8], here: usize, cores: usize) -> Target {
    if cores <= 1 {
        return Target::Core(here);
    }
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Target::Core(here);
    };
    match eth.ethertype() {
        EtherType::Arp => return Target::All,
        EtherType::Ipv4 => {}
        _ => return Target::Core(here),
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return Target::Core(here);
    };
    if ip.is_fragment() || !matches!(ip.protocol(), Protocol::Tcp | Protocol::Udp) {
        return Target::Core(here);
    }
    let l4 = ip.payload();
    if l4.len() < 4 {
        return Target::Core(here);
    }
    let sport = u16::from_be_bytes([l4[0], l4[1]]);
    let dport = u16::from_be_bytes([l4[2], l4[3]]);
    let h = flow_hash(ip.src_addr(), ip.dst_addr(), sport, dport);
    Target::Core(h as usize % cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verification vectors of Microsoft's RSS specification
    /// ("Verifying the RSS Hash Calculation"), IPv4 with TCP ports.
    #[test]
    fn microsoft_rss_test_vectors() {
        let cases = [
            (
                (66, 9, 149, 187),
                2794,
                (161, 142, 100, 80),
                1766,
                0x51cc_c178,
            ),
            (
                (199, 92, 111, 2),
                14230,
                (65, 69, 140, 83),
                4739,
                0xc626_b0ea,
            ),
            (
                (24, 19, 198, 95),
                12898,
                (12, 22, 207, 184),
                38024,
                0x5c2b_394a,
            ),
            (
                (38, 27, 205, 30),
                48228,
                (209, 142, 163, 6),
                2217,
                0xafc7_327f,
            ),
            (
                (153, 39, 163, 191),
                44251,
                (202, 188, 127, 2),
                1303,
                0x10e8_28a2,
            ),
        ];
        for ((a, b, c, d), sport, (e, f, g, h), dport, want) in cases {
            let got = flow_hash(
                Ipv4Addr::new(a, b, c, d),
                Ipv4Addr::new(e, f, g, h),
                sport,
                dport,
            );
            assert_eq!(got, want, "{a}.{b}.{c}.{d}:{sport}");
        }
    }

    #[test]
    fn single_core_keeps_everything() {
        assert_eq!(target(&[0u8; 3], 0, 1), Target::Core(0));
        assert_eq!(target(&[0u8; 3], 1, 2), Target::Core(1));
    }
}
