//! Ixora's I/O layer: network ports and their queues, and the per-core
//! packet-buffer pools they fill and drain. Beneath the engine; knows
//! nothing of TCP.
//!
//! A [`Port`] is one interface opened with a backend (AF_XDP, AF_PACKET,
//! TAP, a shared-memory wire, or an in-process loopback). It is opened on
//! the main thread and shared; each core then opens its own [`Queue`] on it
//! with its own [`Pool`], and from then on the queue and the pool belong to
//! that core alone — no locks, no shared writable memory on the fast path.
//!
//! Frames are [`PacketBuf`]s: handles to fixed-size chunks of the core's
//! pool. A received frame is handed to the stack as is (zero copy); a frame
//! to send is written by the stack straight into a chunk and posted. Where
//! a backend cannot share memory with the kernel it copies once, at the
//! boundary.
//!
//! `unsafe` lives only in [`pool`] (raw chunk memory) and in the backends'
//! system-call and ring code, every block with a `SAFETY:` comment.

pub mod af_packet;
pub mod af_xdp;
pub mod loopback;
pub mod netns;
pub mod pool;
pub mod shm;
pub mod sys;
pub mod tap;

pub use pool::{PacketBuf, Pool, PoolConfig};

use ixora_wire::ethernet::MacAddr;
use std::io;
use std::os::fd::RawFd;

/// What a port can do; the engine adapts to it and says what it lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Backend name (`af_xdp`, `af_packet`, `tap`, `shm`, `loopback`).
    pub backend: &'static str,
    /// Queues that can be opened (one per core).
    pub queues: u32,
    /// Frames move between the wire and our buffers without a copy.
    pub zero_copy: bool,
    /// The port spreads received flows over its queues consistently (a flow
    /// always lands on the same queue); otherwise the engine steers in
    /// software.
    pub flow_steering: bool,
    /// Received TCP/UDP checksums may be incomplete (the peer offloaded
    /// them to a device that never computed them, as veth does): the stack
    /// must not drop frames for a bad checksum.
    pub rx_checksum_unreliable: bool,
    /// The port completes the TCP/UDP checksum of a frame flagged with
    /// [`PacketBuf::set_partial_checksum`] (AF_XDP TX metadata); frames
    /// of other ports must carry complete checksums.
    pub tx_checksum_offload: bool,
    /// Bytes a transmitted frame needs free before it in its chunk for the
    /// offload's metadata (0 when the port needs none, or the offload is
    /// off): with a pool whose headroom is smaller the port completes
    /// flagged checksums in software instead.
    pub tx_headroom: u16,
    /// Largest frame the port carries (MTU plus Ethernet header).
    pub max_frame: usize,
    /// A human-readable note on how the port was set up (attach mode,
    /// fallbacks taken) for logs and `--verbose`.
    pub note: String,
}

/// An opened network interface, shared by the cores.
pub trait Port: Send + Sync {
    /// What the port supports.
    fn caps(&self) -> Caps;
    /// The interface's Ethernet address.
    fn mac(&self) -> MacAddr;
    /// The pool geometry this port can work with, given what the engine
    /// would like (a port whose pool lives in memory shared with its peer
    /// dictates chunk size and count).
    fn fit_pool(&self, want: PoolConfig) -> PoolConfig {
        want
    }
    /// The pool for queue `queue`, made on the calling core's thread. Most
    /// backends use an anonymous region; one that shares memory with its
    /// peer (the shared-memory wire) maps it here.
    fn pool(&self, queue: u32, cfg: PoolConfig) -> io::Result<Pool> {
        let _ = queue;
        Pool::new(cfg)
    }
    /// Open queue `queue` for the calling core, with its pool (from
    /// [`Port::pool`]). Call on the thread that will use the queue.
    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>>;
    /// The backend's own counters, summed over queues, as `(name, value)`
    /// (kernel drops, ring stalls, wake-ups), for reports.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// One queue of a port, owned by one core.
pub trait Queue {
    /// Receive up to `max` frames, appending them to `out`; returns how
    /// many. Never blocks.
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize>;
    /// Send frames from the front of `frames`, removing those taken; frames
    /// the queue has no room for stay (retry later). Never blocks. Taken
    /// frames return to the pool once the device is done with them.
    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize>;
    /// A file descriptor that becomes readable when frames arrive, for the
    /// engine to sleep on when idle; `None` if the queue can only be polled.
    fn poll_fd(&self) -> Option<RawFd>;
    /// Return buffers the device has finished with (transmit completions)
    /// to the pool, and refill receive buffers. Cheap; called every cycle.
    fn reclaim(&mut self) {}
}

/// A clear error for a port that cannot be opened.
pub fn port_error(what: &str, iface: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} on {iface}: {e}"))
}

/// How long a shared-memory listener waits for its peer in [`open_named`].
pub const SHM_ACCEPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Open a port by backend name with `queues` queues and each backend's
/// latency-oriented defaults:
///
/// | name | `iface` | opens |
/// |---|---|---|
/// | `af_xdp` | interface | [`af_xdp::AfXdpPort`], native attach when the driver has it |
/// | `af_packet` | interface | [`af_packet::AfPacketPort`], per-frame ring (no block-timer latency) |
/// | `tap` | device name to create | [`tap::TapPort`] |
/// | `shm` or `shm-listen` | socket path | [`shm::ShmPort::listen`], waits for the peer |
/// | `shm-connect` | socket path | [`shm::ShmPort::connect`] |
pub fn open_named(backend: &str, iface: &str, queues: u32) -> io::Result<std::sync::Arc<dyn Port>> {
    use std::sync::Arc;
    let q = queues.max(1);
    Ok(match backend {
        "af_xdp" => Arc::new(af_xdp::AfXdpPort::open(
            iface,
            af_xdp::AfXdpConfig {
                queues: Some(q),
                ..af_xdp::AfXdpConfig::default()
            },
        )?),
        "af_packet" => Arc::new(af_packet::AfPacketPort::open(
            iface,
            af_packet::AfPacketConfig {
                queues: q,
                rx_ring: af_packet::RxRing::Frames,
                ..af_packet::AfPacketConfig::default()
            },
        )?),
        "tap" => Arc::new(tap::TapPort::create(
            Some(iface),
            tap::TapConfig {
                queues: q,
                ..tap::TapConfig::default()
            },
        )?),
        "shm" | "shm-listen" => Arc::new(
            shm::ShmPort::listen(
                std::path::Path::new(iface),
                shm::ShmConfig {
                    queues: q,
                    ..shm::ShmConfig::default()
                },
            )?
            .accept(SHM_ACCEPT_TIMEOUT)?,
        ),
        "shm-connect" => Arc::new(shm::ShmPort::connect(
            std::path::Path::new(iface),
            std::time::Duration::from_secs(30),
        )?),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "unknown backend {other:?}: expected af_xdp, af_packet, tap, shm-listen or shm-connect"
                ),
            ))
        }
    })
}

/// Complete the TCP or UDP checksum of an Ethernet frame (one 802.1Q tag
/// at most) carrying IPv4 (not a fragment) or IPv6 (TCP or UDP as the
/// first next header), whose checksum field holds only the pseudo-header
/// sum, as a sender that left it to offload wrote it. The sum stops at the
/// IP packet's end (Ethernet padding is not summed). False (frame
/// untouched) for anything else, and where the field does not hold that
/// packet's pseudo-header sum (the offload pending is another header's:
/// an encapsulated packet's).
pub(crate) fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    let mut l3 = 14;
    let mut ethertype = match frame.get(12..14) {
        Some(t) => u16::from_be_bytes([t[0], t[1]]),
        None => return false,
    };
    if ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = match frame.get(16..18) {
            Some(t) => u16::from_be_bytes([t[0], t[1]]),
            None => return false,
        };
        l3 = 18;
    }
    // The pseudo-header (RFC 9293 §3.1; RFC 8200 §8.1) as bytes to sum.
    let mut pseudo = [0u8; 40];
    let (proto, start, end, plen) = match ethertype {
        0x0800 => {
            let Some(h) = frame.get(l3..l3 + 20) else {
                return false;
            };
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let fragment = u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0;
            if h[0] >> 4 != 4 || ihl < 20 || total < ihl || fragment {
                return false;
            }
            pseudo[..8].copy_from_slice(&h[12..20]);
            pseudo[9] = h[9];
            pseudo[10..12].copy_from_slice(&((total - ihl) as u16).to_be_bytes());
            (h[9], l3 + ihl, l3 + total, 12)
        }
        0x86dd => {
            let Some(h) = frame.get(l3..l3 + 40) else {
                return false;
            };
            if h[0] >> 4 != 6 {
                return false;
            }
            let payload = u16::from_be_bytes([h[4], h[5]]);
            pseudo[..32].copy_from_slice(&h[8..40]);
            pseudo[34..36].copy_from_slice(&payload.to_be_bytes());
            pseudo[39] = h[6];
            (h[6], l3 + 40, l3 + 40 + usize::from(payload), 40)
        }
        _ => return false,
    };
    let offset = match proto {
        6 => 16,
        17 => 6,
        _ => return false,
    };
    if end > frame.len() || start + offset + 2 > end {
        return false;
    }
    let field = u16::from_be_bytes([frame[start + offset], frame[start + offset + 1]]);
    let want = ixora_wire::checksum::data(&pseudo[..plen]);
    // (0 and 0xffff are one value in one's complement.)
    let same = field == want || (field == 0 && want == 0xffff) || (field == 0xffff && want == 0);
    if !same {
        return false;
    }
    complete_checksum(&mut frame[..end], start, offset)
}

/// Complete a partial checksum: the 16-bit field at `start + offset` holds
/// the pseudo-header sum; sum everything from `start` and store the
/// complement. False (frame untouched) if the positions are outside it.
pub(crate) fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) -> bool {
    let field = start + offset;
    if start >= frame.len() || field + 2 > frame.len() {
        return false;
    }
    let c = !ixora_wire::checksum::data(&frame[start..]);
    // 0 and 0xffff are the same one's-complement value; UDP reserves 0.
    let c = if c == 0 { 0xffff } else { c };
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::complete_l4_checksum;
    use ixora_wire::checksum;
    use std::net::Ipv4Addr;

    /// An Ethernet frame of IPv4 (behind `vlan` tag if set) carrying a
    /// TCP (6) or UDP (17) segment of `payload`, its transport checksum
    /// whole, and `pad` bytes of Ethernet padding after it; and where the
    /// checksum field is.
    fn frame_v4(proto: u8, payload: &[u8], vlan: bool, pad: usize) -> (Vec<u8>, usize) {
        let (src, dst) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let l4_len = if proto == 6 { 20 } else { 8 } + payload.len();
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        f.extend_from_slice(&ip);
        let l4 = f.len();
        let mut seg = vec![0u8; l4_len - payload.len()];
        seg[0..2].copy_from_slice(&4321u16.to_be_bytes());
        seg[2..4].copy_from_slice(&80u16.to_be_bytes());
        if proto == 6 {
            seg[12] = 5 << 4;
        } else {
            seg[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        }
        seg.extend_from_slice(payload);
        let field = if proto == 6 { 16 } else { 6 };
        let pseudo = checksum::pseudo_header_v4(src, dst, proto, l4_len as u32);
        let c = !checksum::combine(&[pseudo, checksum::data(&seg)]);
        seg[field..field + 2].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&seg);
        f.extend(std::iter::repeat_n(0xee, pad));
        (f, l4 + field)
    }

    /// As a sender leaving the checksum to offload writes it: the
    /// pseudo-header sum only.
    fn partial(f: &mut [u8], field: usize, proto: u8, l4_len: usize) {
        let (src, dst) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let p = checksum::pseudo_header_v4(src, dst, proto, l4_len as u32);
        f[field..field + 2].copy_from_slice(&p.to_be_bytes());
    }

    #[test]
    fn a_checksum_left_to_offload_is_completed_as_the_sender_would_have() {
        for (proto, vlan, pad) in [(6, false, 0), (17, false, 0), (6, true, 0), (6, false, 6)] {
            let payload = b"a payload of odd length";
            let (whole, field) = frame_v4(proto, payload, vlan, pad);
            let mut f = whole.clone();
            let l4_len = if proto == 6 { 20 } else { 8 } + payload.len();
            partial(&mut f, field, proto, l4_len);
            assert_ne!(f, whole);
            assert!(
                complete_l4_checksum(&mut f),
                "proto {proto} vlan {vlan} pad {pad}"
            );
            assert_eq!(f, whole, "proto {proto} vlan {vlan} pad {pad}");
        }
    }

    #[test]
    fn an_ipv6_checksum_left_to_offload_is_completed_too() {
        // UDP over IPv6 (documentation addresses; the frame goes nowhere).
        let (src, dst) = ([0x20, 0x01, 0x0d, 0xb8], [0x20, 0x01, 0x0d, 0xb9]);
        let payload = b"abc";
        let l4_len = 8 + payload.len();
        let mut pseudo = Vec::new();
        for a in [src, dst] {
            pseudo.extend_from_slice(&a);
            pseudo.extend_from_slice(&[0; 12]);
        }
        pseudo.extend_from_slice(&(l4_len as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
        let mut seg = vec![0x10, 0x00, 0x00, 0x35, 0, l4_len as u8, 0, 0];
        seg.extend_from_slice(payload);
        let whole_sum = !checksum::combine(&[checksum::data(&pseudo), checksum::data(&seg)]);
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, l4_len as u8, 17, 64]);
        f.extend_from_slice(&pseudo[..32]);
        let field = f.len() + 6;
        f.extend_from_slice(&seg);
        let mut whole = f.clone();
        whole[field..field + 2].copy_from_slice(&whole_sum.to_be_bytes());
        let p = checksum::data(&pseudo);
        f[field..field + 2].copy_from_slice(&p.to_be_bytes());
        assert!(complete_l4_checksum(&mut f));
        assert_eq!(f, whole);
    }

    #[test]
    fn frames_it_cannot_place_are_left_alone() {
        let (whole, _) = frame_v4(6, b"x", false, 0);
        // A fragment, ICMP, ARP, a truncated header, a length past the end.
        let mut frag = whole.clone();
        frag[14 + 6] = 0x20; // more fragments
        let mut icmp = whole.clone();
        icmp[14 + 9] = 1;
        let mut arp = whole.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let short = whole[..30].to_vec();
        let mut long = whole.clone();
        long[16..18].copy_from_slice(&2000u16.to_be_bytes());
        // A field that holds no pseudo-header sum of this packet (the
        // offload pending is an inner header's): left as it is.
        let (mut other, field) = frame_v4(17, b"outer", false, 0);
        other[field..field + 2].copy_from_slice(&[0x12, 0x34]);
        for mut f in [frag, icmp, arp, short, long, other] {
            let before = f.clone();
            assert!(!complete_l4_checksum(&mut f));
            assert_eq!(f, before);
        }
    }
}
