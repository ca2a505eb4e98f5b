//! The preload's rtnetlink rewriting (`crates/preload/src/netlink.rs`,
//! included by path: the preload library itself interposes the C
//! library's calls and cannot be linked into a fuzzer) against any
//! request a program sends and any datagram the kernel answers with: no
//! panic, and the program's buffer only ever grows by one whole
//! `RTM_NEWADDR`, put in before the dump's `NLMSG_DONE`, every other byte
//! kept in its order.
//!
//! Input layout: 1 byte of flags (bit 0 peek; bits 1–7 the room the
//! buffer has past the datagram, in 2-byte units), 1 byte the request's
//! length, the request, then the datagram. Half the time (bit 0 of the
//! request length) a well-formed IPv4 dump request with the datagram's
//! first sequence number is sent first, so that the datagram's own
//! messages are read as a dump's.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/preload/src/netlink.rs"]
mod netlink;

use libfuzzer_sys::fuzz_target;
use netlink::{received, sent, Iface, Received};

const FD: i32 = 3;

fn me() -> Option<Iface> {
    let mut name = [0u8; 16];
    name[..5].copy_from_slice(b"veth0");
    Some(Iface {
        ip: 0xc612_0902,
        prefix: 24,
        index: 7,
        name,
    })
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 2 {
        return;
    }
    let (flags, req_len) = (input[0], usize::from(input[1]));
    let rest = &input[2..];
    let (req, datagram) = rest.split_at(req_len.min(rest.len()));
    sent(FD, req);
    if req_len & 1 == 1 && datagram.len() >= 12 {
        let seq = u32::from_ne_bytes(datagram[8..12].try_into().unwrap());
        let mut r = 24u32.to_ne_bytes().to_vec();
        r.extend_from_slice(&22u16.to_ne_bytes()); // RTM_GETADDR
        r.extend_from_slice(&0x301u16.to_ne_bytes()); // REQUEST | DUMP
        r.extend_from_slice(&seq.to_ne_bytes());
        r.extend_from_slice(&[0; 4]);
        r.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]); // AF_INET, any interface
        sent(FD, &r);
    }
    let peek = flags & 1 == 1;
    let room = usize::from(flags >> 1) * 2;
    let n = datagram.len();
    let mut buf = datagram.to_vec();
    buf.resize(n + room, 0xee);
    match received(FD, &mut buf, n, peek, me) {
        Received::AsItCame => assert_eq!(&buf[..n], datagram),
        Received::NoRoom(len) => {
            assert!(len > n + room);
            assert_eq!(&buf[..n], datagram);
        }
        Received::Grew(len) => {
            assert!(len <= buf.len() && len > n);
            let e = len - n;
            let u16_at = |i: usize| u16::from_ne_bytes([buf[i], buf[i + 1]]);
            // Somewhere the kernel's bytes part around one whole
            // RTM_NEWADDR (20) of length `e`, an NLMSG_DONE (3) after it.
            let whole = (0..=n).any(|i| {
                buf[..i] == datagram[..i]
                    && buf[i + e..len] == datagram[i..]
                    && i + e + 6 <= len
                    && u32::from_ne_bytes(buf[i..i + 4].try_into().unwrap()) as usize == e
                    && u16_at(i + 4) == 20
                    && u16_at(i + e + 4) == 3
            });
            assert!(whole, "the kernel's bytes around one entry");
        }
    }
    netlink::forget(FD);
});
