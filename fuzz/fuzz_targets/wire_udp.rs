//! UDP: `new_checked` then every accessor, `parse` with and without checksum
//! verification, and an emit/re-parse round trip.
//!
//! Input layout: 4 bytes source address, 4 bytes destination address (the
//! pseudo-header), then the UDP datagram.
#![no_main]

use ixora_wire::udp::{UdpPacket, UdpRepr, HEADER_LEN};
use ixora_wire::{Checksum, Error, Ipv4Addr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if input.len() < 8 {
        return;
    }
    let src = Ipv4Addr::new(input[0], input[1], input[2], input[3]);
    let dst = Ipv4Addr::new(input[4], input[5], input[6], input[7]);
    let data = &input[8..];
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };

    let _ = (p.src_port(), p.dst_port());
    let len = usize::from(p.len());
    assert!((HEADER_LEN..=data.len()).contains(&len));
    assert_eq!(p.is_empty(), len == HEADER_LEN);
    let orig_csum = p.checksum();
    let payload = p.payload();
    let range = p.payload_range();
    assert!(range.start <= range.end && range.end <= data.len());
    assert_eq!(&data[range], payload);
    let csum_ok = p.verify_checksum(src, dst);
    if orig_csum == 0 {
        assert!(csum_ok, "a zero checksum means none and always verifies");
    }

    let both = UdpRepr::parse(&p, src, dst, Checksum::Both);
    let none = UdpRepr::parse(&p, src, dst, Checksum::None);
    match (&both, &none) {
        (Ok(b), Ok(n)) => assert_eq!(b, n),
        (Err(Error::Checksum), Ok(_)) => assert!(!csum_ok),
        (Err(e1), Err(e2)) => assert_eq!(e1, e2),
        (b, n) => panic!("Both={b:?} None={n:?}"),
    }
    let Ok(repr) = none else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len(payload.len())];
    repr.emit(&mut buf, src, dst, payload, Checksum::Both);
    let again = UdpPacket::new_checked(&buf[..]).expect("emitted datagram must be checked-valid");
    assert_ne!(again.checksum(), 0, "a computed zero is sent as 0xffff");
    assert!(
        again.verify_checksum(src, dst),
        "emit with Checksum::Both must verify"
    );
    assert_eq!(
        UdpRepr::parse(&again, src, dst, Checksum::Both).unwrap(),
        repr
    );
    assert_eq!(again.payload(), payload);

    // Byte identity of the datagram up to its length field. Exceptions:
    // bytes past the length field are not emitted, and the checksum is only
    // comparable when the original carried one (non-zero) that verified. A
    // valid non-zero checksum is unique (the 0x0000/0xffff ambiguity is
    // resolved by RFC 768's rule that a computed zero is sent as 0xffff).
    assert_eq!(buf[..6], data[..6]);
    assert_eq!(buf[8..], data[8..len]);
    if orig_csum != 0 && csum_ok {
        assert_eq!(again.checksum(), orig_csum);
    }

    // Without Checksum::tx the field is zero ("no checksum") and still parses.
    let mut raw = vec![0u8; repr.buffer_len(payload.len())];
    repr.emit(&mut raw, src, dst, payload, Checksum::None);
    let raw_p = UdpPacket::new_checked(&raw[..]).unwrap();
    assert_eq!(raw_p.checksum(), 0);
    assert_eq!(
        UdpRepr::parse(&raw_p, src, dst, Checksum::Both).unwrap(),
        repr
    );
});
