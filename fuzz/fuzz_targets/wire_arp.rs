//! ARP: `new_checked` then every accessor, `parse`, and an emit/re-parse
//! round trip. `ArpRepr::parse` takes no `Checksum` (ARP has none).
#![no_main]

use ixora_wire::arp::{ArpPacket, ArpRepr, Operation, PACKET_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ArpPacket::new_checked(data) else {
        return;
    };

    let htype = p.hardware_type();
    let ptype = p.protocol_type();
    let hlen = p.hardware_len();
    let plen = p.protocol_len();
    let op = p.operation();
    let sha = p.sender_mac();
    let spa = p.sender_ip();
    let tha = p.target_mac();
    let tpa = p.target_ip();
    let _ = (u16::from(op), format!("{sha}{tha}{spa}{tpa}"));

    let Ok(repr) = ArpRepr::parse(&p) else {
        return;
    };
    // parse accepts only Ethernet/IPv4 requests and replies.
    assert_eq!((htype, ptype, hlen, plen), (1, 0x0800, 6, 4));
    assert!(matches!(
        repr.operation,
        Operation::Request | Operation::Reply
    ));

    let mut buf = vec![0u8; repr.buffer_len()];
    assert_eq!(buf.len(), PACKET_LEN);
    repr.emit(&mut buf);
    let again = ArpPacket::new_checked(&buf[..]).expect("emitted packet must be checked-valid");
    assert_eq!(ArpRepr::parse(&again).unwrap(), repr);
    // Every byte of an accepted Ethernet/IPv4 ARP packet is in the repr or
    // fixed by the checks above, so the emitted bytes are the original
    // first 28 (anything after them, e.g. Ethernet padding, is not ARP).
    assert_eq!(&buf[..], &data[..PACKET_LEN]);
});
