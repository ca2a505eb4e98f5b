//! Frames both backends' integration tests send.

use ixora_io::{PacketBuf, Pool};
use ixora_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use ixora_wire::ipv4::{Ipv4Repr, Protocol};
use ixora_wire::tcp::{Flags, SeqNum, TcpRepr};
use ixora_wire::Checksum;
use std::net::Ipv4Addr;

/// A TCP segment from `src` to `dst` carrying `payload` in a buffer of
/// `pool`, its checksum left partial (the pseudo-header sum) and the
/// buffer flagged for the device to complete it, as the engine sends.
pub fn partial_tcp_buf(
    pool: &Pool,
    macs: (MacAddr, MacAddr),
    src: Ipv4Addr,
    dst: Ipv4Addr,
    payload: &[u8],
) -> PacketBuf {
    let tcp = TcpRepr {
        src_port: 40001,
        dst_port: 9,
        seq: SeqNum(0x1234_5678),
        ack: Some(SeqNum(1)),
        flags: Flags::PSH,
        window_len: 1000,
        urgent: 0,
        options: Default::default(),
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: Protocol::Tcp,
        payload_len: tcp.buffer_len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
    };
    let eth = EthernetRepr {
        src_addr: macs.0,
        dst_addr: macs.1,
        ethertype: EtherType::Ipv4,
        vlan: None,
    };
    let mut f = vec![0u8; eth.header_len() + ip.buffer_len()];
    let h = eth.emit(&mut f);
    ip.emit(&mut f[h..], Checksum::Both);
    tcp.emit(&mut f[h + 20..], src, dst, Checksum::Partial);
    let mut b = pool.alloc().expect("a buffer");
    b.spare_mut()[..f.len()].copy_from_slice(&f);
    b.set_len(f.len());
    b.set_partial_checksum((h + 20) as u16, 16);
    b
}
