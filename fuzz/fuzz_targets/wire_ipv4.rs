//! IPv4: `new_checked` then every accessor, `parse` with and without checksum
//! verification, and an emit/re-parse round trip.
#![no_main]

use ixora_wire::ipv4::{Ipv4Packet, Ipv4Repr, HEADER_LEN};
use ixora_wire::{Checksum, Error};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };

    let version = p.version();
    let hl = p.header_len();
    let _ = p.dscp_ecn();
    let total = usize::from(p.total_len());
    let _ = p.ident();
    let df = p.dont_frag();
    let mf = p.more_frags();
    let off = p.frag_offset();
    assert_eq!(p.is_fragment(), mf || off != 0);
    assert_eq!(off % 8, 0);
    let _ = (
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    );
    let csum_ok = p.verify_checksum();
    let payload = p.payload();
    let range = p.payload_range();
    // payload_range lies within the buffer and matches payload().
    assert!(HEADER_LEN <= range.start);
    assert!(range.start <= range.end);
    assert!(range.end <= data.len());
    assert_eq!((range.start, range.end), (hl, total));
    assert_eq!(&data[range.clone()], payload);

    // The mutable accessors, on a copy.
    let mut copy = data.to_vec();
    let mut m = Ipv4Packet::new_checked(&mut copy[..]).unwrap();
    m.set_ttl(m.ttl().wrapping_add(1));
    m.fill_checksum();
    assert!(
        m.verify_checksum(),
        "fill_checksum must produce a valid checksum"
    );
    assert_eq!(m.payload_mut().len(), payload.len());
    let _ = m.into_inner();

    let both = Ipv4Repr::parse(&p, Checksum::Both);
    let none = Ipv4Repr::parse(&p, Checksum::None);
    match (&both, &none) {
        (Ok(b), Ok(n)) => assert_eq!(b, n),
        (Err(Error::Checksum), Ok(_)) => assert!(!csum_ok),
        (Err(e1), Err(e2)) => assert_eq!(e1, e2),
        (b, n) => panic!("Both={b:?} None={n:?}"),
    }
    if both.is_ok() {
        assert!(csum_ok);
    }
    let Ok(repr) = none else {
        assert_ne!(version, 4);
        return;
    };
    assert_eq!(repr.payload_len, payload.len());
    assert_eq!(repr.dont_frag, df);

    // Round trip: a 20-byte header and the payload, into exactly buffer_len().
    let mut buf = vec![0u8; repr.buffer_len()];
    assert_eq!(buf.len(), HEADER_LEN + payload.len());
    repr.emit(&mut buf, Checksum::Both);
    buf[HEADER_LEN..].copy_from_slice(payload);
    let again = Ipv4Packet::new_checked(&buf[..]).expect("emitted header must be checked-valid");
    assert!(
        again.verify_checksum(),
        "emit with Checksum::Both must verify"
    );
    // Exceptions to byte identity (the repr is still equal):
    //  * options are dropped on emit (IHL is always 5);
    //  * the MF flag, fragment offset and reserved bit are not in the repr
    //    and are emitted as zero, so a fragment re-parses as a whole datagram;
    //  * bytes past the total length (Ethernet padding) are not emitted;
    //  * the checksum is recomputed (0x0000 and 0xffff can both verify).
    assert_eq!(Ipv4Repr::parse(&again, Checksum::Both).unwrap(), repr);
    assert_eq!(again.payload(), payload);
    assert!(!again.is_fragment());

    // Byte identity where none of the exceptions apply.
    let flags_off = u16::from_be_bytes([data[6], data[7]]);
    if hl == HEADER_LEN && flags_off & !0x4000 == 0 && both.is_ok() {
        assert_eq!(&buf[..10], &data[..10]);
        assert_eq!(&buf[12..], &data[12..total]);
        let (c1, c2) = (again.checksum(), p.checksum());
        assert!(c1 == c2 || (c1 == 0 && c2 == 0xffff), "{c1:#x} vs {c2:#x}");
    }

    // Emit without computing the checksum leaves it zero.
    let mut raw = vec![0u8; repr.buffer_len()];
    repr.emit(&mut raw, Checksum::None);
    assert_eq!(&raw[10..12], &[0, 0]);
});
