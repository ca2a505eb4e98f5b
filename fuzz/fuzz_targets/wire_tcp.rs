//! TCP: `new_checked` then every accessor, `parse` with and without checksum
//! verification, and an emit/re-parse round trip.
//!
//! Input layout: 4 bytes source address, 4 bytes destination address (the
//! pseudo-header), then the TCP segment (the whole rest is the segment, as
//! when the caller passes the IP payload).
#![no_main]

use ixora_wire::tcp::{TcpOptions, TcpPacket, TcpRepr, HEADER_LEN, MAX_OPTIONS_LEN};
use ixora_wire::{Checksum, Error, Ipv4Addr};
use libfuzzer_sys::fuzz_target;

/// How many of `o`'s SACK blocks the emitter can fit next to the other
/// options (it drops the rest): the 40-byte options area minus the fixed
/// options minus the 4 bytes of NOP NOP kind len.
fn sacks_that_fit(o: &TcpOptions) -> usize {
    let fixed = TcpOptions { sack_len: 0, ..*o }.buffer_len();
    o.sacks()
        .len()
        .min(MAX_OPTIONS_LEN.saturating_sub(fixed + 4) / 8)
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 8 {
        return;
    }
    let src = Ipv4Addr::new(input[0], input[1], input[2], input[3]);
    let dst = Ipv4Addr::new(input[4], input[5], input[6], input[7]);
    let data = &input[8..];
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };

    let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
    let hl = p.header_len();
    assert!((HEADER_LEN..=HEADER_LEN + MAX_OPTIONS_LEN).contains(&hl) && hl <= data.len());
    let flags = p.flags();
    let _ = (format!("{flags:?}"), flags.urg(), flags.psh(), flags.rst());
    let _ = (p.window_len(), p.checksum(), p.urgent_at());
    assert_eq!(p.options().len(), hl - HEADER_LEN);
    let payload = p.payload();
    assert_eq!(payload.len(), data.len() - hl);
    assert_eq!(
        p.segment_len(),
        payload.len() + usize::from(flags.syn()) + usize::from(flags.fin())
    );
    let csum_ok = p.verify_checksum(src, dst);

    // The mutable accessors, on a copy.
    let mut copy = data.to_vec();
    let mut m = TcpPacket::new_checked(&mut copy[..]).unwrap();
    m.fill_checksum(src, dst);
    assert!(
        m.verify_checksum(src, dst),
        "fill_checksum must produce a valid checksum"
    );
    assert_eq!(m.payload_mut().len(), payload.len());
    let _ = m.into_inner();

    let both = TcpRepr::parse(&p, src, dst, Checksum::Both);
    let none = TcpRepr::parse(&p, src, dst, Checksum::None);
    match (&both, &none) {
        (Ok(b), Ok(n)) => assert_eq!(b, n),
        (Err(Error::Checksum), _) => assert!(!csum_ok),
        (Err(e1), Err(e2)) => assert_eq!(e1, e2),
        (b, n) => panic!("Both={b:?} None={n:?}"),
    }
    let Ok(repr) = none else {
        return;
    };
    assert_eq!(repr.ack.is_some(), flags.ack());
    assert!(!repr.flags.ack(), "ACK is carried by `ack`, not `flags`");
    assert_eq!(repr.payload, payload);
    assert_eq!(repr.segment_len(), p.segment_len());

    let len = repr.buffer_len();
    assert!(repr.header_len() <= HEADER_LEN + MAX_OPTIONS_LEN);
    assert_eq!(repr.header_len() % 4, 0);
    let mut buf = vec![0u8; len];
    assert_eq!(repr.emit(&mut buf, src, dst, Checksum::Both), len);
    let again = TcpPacket::new_checked(&buf[..]).expect("emitted segment must be checked-valid");
    assert!(
        again.verify_checksum(src, dst),
        "emit with Checksum::Both must verify"
    );
    assert_eq!(again.header_len(), repr.header_len());
    let back = TcpRepr::parse(&again, src, dst, Checksum::Both).expect("re-parse");

    // Everything but the options survives exactly. The urgent pointer is not
    // in the repr (emitted as 0) and the NS bit is ignored.
    assert_eq!(
        (
            back.src_port,
            back.dst_port,
            back.seq,
            back.ack,
            back.flags,
            back.window_len
        ),
        (
            repr.src_port,
            repr.dst_port,
            repr.seq,
            repr.ack,
            repr.flags,
            repr.window_len
        )
    );
    assert_eq!(back.payload, repr.payload);
    // Options: the known ones survive; unknown options are dropped (not in
    // the repr), and SACK blocks that do not fit next to the other options in
    // 40 bytes are dropped by the emitter (a received header can carry e.g.
    // MSS + WS + SACK-perm + TS + 3 SACK blocks packed without NOPs, which
    // the emitter's NOP-aligned layout cannot fit).
    let (o, b) = (&repr.options, &back.options);
    assert_eq!(
        (b.mss, b.window_scale, b.sack_permitted, b.timestamp),
        (o.mss, o.window_scale, o.sack_permitted, o.timestamp)
    );
    let fit = sacks_that_fit(o);
    assert_eq!(b.sacks(), &o.sacks()[..fit]);
    if fit == o.sacks().len() {
        assert_eq!(
            back, repr,
            "a repr whose options all fit round-trips exactly"
        );
    }

    // The emitter's output is canonical: emitting the re-parsed repr gives
    // the same bytes.
    let mut buf2 = vec![0u8; back.buffer_len()];
    back.emit(&mut buf2, src, dst, Checksum::Both);
    assert_eq!(buf2, buf);

    // Emit without computing the checksum leaves it zero.
    let mut raw = vec![0u8; len];
    repr.emit(&mut raw, src, dst, Checksum::None);
    assert_eq!(&raw[16..18], &[0, 0]);
});
