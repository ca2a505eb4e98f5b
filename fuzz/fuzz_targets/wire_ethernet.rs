//! Ethernet II / 802.1Q: `new_checked` then every accessor, `parse`, and an
//! emit/re-parse round trip.
//!
//! `EthernetRepr::parse` takes no `Checksum` (Ethernet has no checksum the
//! stack sees; the FCS is stripped by the NIC), so there is only one parse.
#![no_main]

use ixora_wire::ethernet::{EthernetFrame, EthernetRepr, HEADER_LEN, VLAN_TAG_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return;
    };

    // Every accessor: none may panic after new_checked.
    let tagged = frame.is_tagged();
    let hl = frame.header_len();
    let dst = frame.dst_addr();
    let src = frame.src_addr();
    let ethertype = frame.ethertype();
    let vid = frame.vlan_id();
    let pcp = frame.vlan_pcp();
    let payload = frame.payload();
    let _ = (
        dst.is_broadcast(),
        dst.is_multicast(),
        dst.is_unicast(),
        dst.as_bytes(),
    );
    let _ = (src.to_string(), format!("{dst:?}"));
    assert_eq!(
        hl,
        if tagged {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    );
    assert_eq!(vid.is_some(), tagged);
    assert_eq!(pcp.is_some(), tagged);
    assert_eq!(hl + payload.len(), data.len());
    let _ = u16::from(ethertype);

    // The mutable accessors, on a copy.
    let mut copy = data.to_vec();
    let mut m = EthernetFrame::new_checked(&mut copy[..]).unwrap();
    m.set_dst_addr(src);
    m.set_src_addr(dst);
    assert_eq!(m.payload_mut().len(), payload.len());
    assert_eq!(m.dst_addr(), src);
    let _ = m.into_inner();

    let repr = EthernetRepr::parse(&frame).expect("parse of a checked frame never fails");
    assert_eq!(repr.header_len(), hl);

    // Round trip: header then the payload, into exactly the stated length.
    let mut buf = vec![0u8; repr.header_len() + payload.len()];
    assert_eq!(repr.emit(&mut buf), hl);
    buf[hl..].copy_from_slice(payload);
    let again = EthernetFrame::new_checked(&buf[..]).expect("emitted frame must be checked-valid");
    assert_eq!(EthernetRepr::parse(&again).unwrap(), repr);
    assert_eq!(again.payload(), payload);

    // Byte identity. Exception: the 802.1Q PCP and DEI bits are not in the
    // repr and are emitted as zero; the VID, addresses and types are kept.
    // (Ethernet padding is part of `payload()` and is copied as is.)
    if tagged {
        assert_eq!(again.vlan_pcp(), Some(0));
        let mut expect = data.to_vec();
        expect[14] &= 0x0f; // clear PCP (3 bits) and DEI (1 bit)
        assert_eq!(buf, expect);
    } else {
        assert_eq!(buf, data);
    }
});
