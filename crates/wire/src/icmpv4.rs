//! ICMPv4 (RFC 792): echo request/reply, destination unreachable, time
//! exceeded.
//!
//! After [`Icmpv4Packet::new_checked`] (at least the 8-byte header) no
//! accessor panics. Error messages carry the offending datagram's IP header
//! and at least 8 bytes of its payload (RFC 792; RFC 1812 allows more); that
//! prefix is exposed raw as `original` so the caller can look inside it with
//! [`crate::ipv4::Ipv4Packet`].

use crate::{be16, checksum, put16, Checksum, Error, Result};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const IDENT: usize = 4;
    pub const SEQ_NO: usize = 6;
    pub const REST: core::ops::Range<usize> = 4..8;
}

/// Length of the ICMP header (type, code, checksum, 4 bytes of "rest").
pub const HEADER_LEN: usize = 8;

/// Destination-unreachable codes used by this stack.
pub mod unreachable {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set.
    pub const FRAG_NEEDED: u8 = 4;
}

/// A view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wrap without checking.
    pub fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }
    /// Wrap, checking for the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SEQ_NO)
    }
    /// The four "rest of header" bytes (e.g. next-hop MTU for code 4).
    pub fn rest(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::REST];
        [b[0], b[1], b[2], b[3]]
    }
    /// Bytes after the header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// Does the checksum verify over the whole message?
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

/// Plain-data ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    /// Type 8.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed.
        data: &'a [u8],
    },
    /// Type 0.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Type 3.
    DstUnreachable {
        /// Reason code (see [`unreachable`]).
        code: u8,
        /// Next-hop MTU for code 4, else 0.
        next_hop_mtu: u16,
        /// The original datagram's header and leading payload bytes.
        original: &'a [u8],
    },
    /// Type 11.
    TimeExceeded {
        /// 0 = TTL exceeded in transit, 1 = reassembly time exceeded.
        code: u8,
        /// The original datagram's header and leading payload bytes.
        original: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parse a checked message, verifying the checksum when `csum.rx()`.
    /// Types other than 0, 3, 8 and 11 are `Unrecognized`; an error message
    /// too short to hold an IP header and 8 bytes is `Truncated`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        p: &Icmpv4Packet<&'a T>,
        csum: Checksum,
    ) -> Result<Icmpv4Repr<'a>> {
        if csum.rx() && !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        let data: &'a [u8] = &T::as_ref(p.buffer)[HEADER_LEN..];
        match (p.msg_type(), p.msg_code()) {
            (8, 0) => Ok(Icmpv4Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            }),
            (0, 0) => Ok(Icmpv4Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            }),
            (3, code) => {
                if data.len() < 28 {
                    return Err(Error::Truncated);
                }
                Ok(Icmpv4Repr::DstUnreachable {
                    code,
                    next_hop_mtu: be16(p.buffer.as_ref(), field::SEQ_NO),
                    original: data,
                })
            }
            (11, code) => {
                if data.len() < 28 {
                    return Err(Error::Truncated);
                }
                Ok(Icmpv4Repr::TimeExceeded {
                    code,
                    original: data,
                })
            }
            _ => Err(Error::Unrecognized),
        }
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => {
                    data.len()
                }
                Icmpv4Repr::DstUnreachable { original, .. }
                | Icmpv4Repr::TimeExceeded { original, .. } => original.len(),
            }
    }

    /// Write into `buf` (at least `buffer_len()` bytes), checksum included
    /// when `csum.tx()`.
    pub fn emit(&self, buf: &mut [u8], csum: Checksum) {
        let (ty, code, rest, body): (u8, u8, [u8; 4], &[u8]) = match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (8, 0, join(ident, seq_no), data),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (0, 0, join(ident, seq_no), data),
            Icmpv4Repr::DstUnreachable {
                code,
                next_hop_mtu,
                original,
            } => (3, code, join(0, next_hop_mtu), original),
            Icmpv4Repr::TimeExceeded { code, original } => (11, code, [0; 4], original),
        };
        buf[field::TYPE] = ty;
        buf[field::CODE] = code;
        put16(buf, field::CHECKSUM, 0);
        buf[field::REST].copy_from_slice(&rest);
        let end = HEADER_LEN + body.len();
        buf[HEADER_LEN..end].copy_from_slice(body);
        if csum.tx() {
            let c = !checksum::data(&buf[..end]);
            put16(buf, field::CHECKSUM, c);
        }
    }
}

fn join(a: u16, b: u16) -> [u8; 4] {
    let a = a.to_be_bytes();
    let b = b.to_be_bytes();
    [a[0], a[1], b[0], b[1]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    #[test]
    fn echo_roundtrip_and_checksum() {
        let r = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data: b"abcdefgh",
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, Checksum::Both);
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Icmpv4Repr::parse(&p, Checksum::Both).unwrap(), r);
    }

    #[test]
    fn known_echo_request() {
        // type 8 code 0, id 1 seq 1, "ab": checksum computed by hand
        // ~(0x0800 + 0x0001 + 0x0001 + 0x6162) = ~0x6964 = 0x969b
        let b = hex("0800 969b 0001 0001 6162");
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        match Icmpv4Repr::parse(&p, Checksum::Both).unwrap() {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                assert_eq!((ident, seq_no, data), (1, 1, &b"ab"[..]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unreachable_needs_original_header() {
        let r = Icmpv4Repr::DstUnreachable {
            code: unreachable::PORT,
            next_hop_mtu: 0,
            original: &[0x45; 28],
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, Checksum::Both);
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, Checksum::Both).unwrap(), r);
        let short = &buf[..20];
        let p = Icmpv4Packet::new_checked(short).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&p, Checksum::None).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn truncated_bad_checksum_unknown_type() {
        assert_eq!(
            Icmpv4Packet::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        let b = hex("0800 969c 0001 0001 6162");
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&p, Checksum::Both).unwrap_err(),
            Error::Checksum
        );
        let b = hex("0d00 0000 0000 0000");
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&p, Checksum::None).unwrap_err(),
            Error::Unrecognized
        );
    }
}
