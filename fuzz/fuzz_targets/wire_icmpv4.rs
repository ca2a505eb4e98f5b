//! ICMPv4: `new_checked` then every accessor, `parse` with and without
//! checksum verification, and an emit/re-parse round trip.
#![no_main]

use ixora_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr, HEADER_LEN};
use ixora_wire::{Checksum, Error};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Icmpv4Packet::new_checked(data) else {
        return;
    };

    let ty = p.msg_type();
    let code = p.msg_code();
    let _ = (p.checksum(), p.echo_ident(), p.echo_seq_no());
    let rest = p.rest();
    assert_eq!(&rest[..], &data[4..8]);
    assert_eq!(p.data(), &data[HEADER_LEN..]);
    let csum_ok = p.verify_checksum();

    let both = Icmpv4Repr::parse(&p, Checksum::Both);
    let none = Icmpv4Repr::parse(&p, Checksum::None);
    match (&both, &none) {
        (Ok(b), Ok(n)) => assert_eq!(b, n),
        (Err(Error::Checksum), _) => assert!(!csum_ok),
        (Err(e1), Err(e2)) => assert_eq!(e1, e2),
        (b, n) => panic!("Both={b:?} None={n:?}"),
    }
    let Ok(repr) = none else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    // The whole message is in the repr (no trailing bytes are dropped).
    assert_eq!(buf.len(), data.len());
    repr.emit(&mut buf, Checksum::Both);
    let again = Icmpv4Packet::new_checked(&buf[..]).expect("emitted message must be checked-valid");
    assert!(
        again.verify_checksum(),
        "emit with Checksum::Both must verify"
    );
    assert_eq!(Icmpv4Repr::parse(&again, Checksum::Both).unwrap(), repr);

    // Byte identity, except:
    //  * dest-unreachable: the unused 16 bits before the next-hop MTU are not
    //    in the repr and are emitted as zero;
    //  * time-exceeded: all four "rest of header" bytes are emitted as zero;
    //  * the checksum: compared only when the original verified, and then
    //    0x0000 and 0xffff are the same one's-complement value.
    let mut expect = data.to_vec();
    match (ty, repr) {
        (3, Icmpv4Repr::DstUnreachable { code: c, .. }) => {
            assert_eq!(c, code);
            expect[4..6].copy_from_slice(&[0, 0]);
        }
        (11, Icmpv4Repr::TimeExceeded { code: c, .. }) => {
            assert_eq!(c, code);
            expect[4..8].copy_from_slice(&[0; 4]);
        }
        (8, Icmpv4Repr::EchoRequest { .. }) | (0, Icmpv4Repr::EchoReply { .. }) => {
            assert_eq!(code, 0)
        }
        (t, r) => panic!("type {t} parsed as {r:?}"),
    }
    assert_eq!(buf[..2], expect[..2]);
    assert_eq!(buf[4..], expect[4..]);
    if csum_ok && ty != 3 && ty != 11 {
        let (c1, c2) = (again.checksum(), p.checksum());
        assert!(c1 == c2 || (c1 == 0 && c2 == 0xffff), "{c1:#x} vs {c2:#x}");
    }

    // Emit without computing the checksum leaves it zero.
    let mut raw = vec![0u8; repr.buffer_len()];
    repr.emit(&mut raw, Checksum::None);
    assert_eq!(&raw[2..4], &[0, 0]);
});
