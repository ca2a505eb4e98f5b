//! IPv4 (RFC 791).
//!
//! [`Ipv4Packet::new_checked`] checks that the buffer holds the header the IHL
//! field describes and the datagram the total-length field describes; after it
//! succeeds no accessor panics. Options are skipped: the payload starts at
//! `IHL * 4`. Bytes past the total length (Ethernet padding) are ignored.
//! Fragments are recognised ([`Ipv4Packet::is_fragment`]); the core reassembles them
//! (`ixora_core::frag`), and [`Ipv4Repr::emit_fragment`] writes a fragment's header.
//! [`Ipv4Repr::emit`] writes a 20-byte header without options.

use crate::{be16, checksum, put16, Checksum, Error, Result};
use std::net::Ipv4Addr;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: core::ops::Range<usize> = 12..16;
    pub const DST: core::ops::Range<usize> = 16..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// IP protocol numbers this stack knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// 1
    Icmp,
    /// 6
    Tcp,
    /// 17
    Udp,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Protocol {
    fn from(v: u8) -> Self {
        match v {
            1 => Protocol::Icmp,
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            x => Protocol::Unknown(x),
        }
    }
}

impl From<Protocol> for u8 {
    fn from(v: Protocol) -> u8 {
        match v {
            Protocol::Icmp => 1,
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Unknown(x) => x,
        }
    }
}

/// A view of an IPv4 datagram.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap without checking.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap, checking the header and total lengths against the buffer.
    /// `Malformed` when IHL < 5 or total length < IHL*4; `Truncated` when the
    /// buffer is shorter than either.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = p.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = usize::from(p.total_len());
        if total < hl {
            return Err(Error::Malformed);
        }
        if len < hl || len < total {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN byte.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }
    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }
    /// Is this a fragment of a larger datagram (MF set or non-zero offset)?
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> Protocol {
        self.buffer.as_ref()[field::PROTOCOL].into()
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Does the header checksum verify?
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
    /// The payload: from the end of the header (options skipped) to the total
    /// length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
    /// Byte range of the payload within the buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..usize::from(self.total_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set the TTL (checksum not updated).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }
    /// Recompute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        put16(self.buffer.as_mut(), field::CHECKSUM, 0);
        let hl = self.header_len();
        let c = !checksum::data(&self.buffer.as_ref()[..hl]);
        put16(self.buffer.as_mut(), field::CHECKSUM, c);
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }
}

/// Plain-data IPv4 header (no options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: Protocol,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Validate a checked packet: version 4, header checksum when `csum.rx()`.
    /// Fragments parse (the caller decides); options are skipped.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>, csum: Checksum) -> Result<Ipv4Repr> {
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        if csum.rx() && !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Header length `emit` writes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Write the header into the first 20 bytes of `buf`. The payload length
    /// must fit the 16-bit total length (callers size payloads by MTU).
    pub fn emit(&self, buf: &mut [u8], csum: Checksum) {
        self.emit_fragment(buf, csum, 0, false);
    }

    /// [`emit`](Self::emit) for one fragment of a larger datagram: this
    /// header's payload starts `offset` bytes into the datagram's (a
    /// multiple of 8, RFC 791 §3.1), and `more` says fragments follow.
    pub fn emit_fragment(&self, buf: &mut [u8], csum: Checksum, offset: usize, more: bool) {
        debug_assert!(offset.is_multiple_of(8) && offset < 65536);
        buf[field::VER_IHL] = 0x45;
        buf[field::DSCP_ECN] = self.dscp_ecn;
        let total = (HEADER_LEN + self.payload_len).min(usize::from(u16::MAX)) as u16;
        put16(buf, field::LENGTH, total);
        put16(buf, field::IDENT, self.ident);
        let flags = if self.dont_frag { 0x4000 } else { 0 } | if more { 0x2000 } else { 0 };
        put16(buf, field::FLG_OFF, flags | (offset / 8) as u16);
        buf[field::TTL] = self.ttl;
        buf[field::PROTOCOL] = self.protocol.into();
        put16(buf, field::CHECKSUM, 0);
        buf[field::SRC].copy_from_slice(&self.src_addr.octets());
        buf[field::DST].copy_from_slice(&self.dst_addr.octets());
        if csum.tx() {
            let c = !checksum::data(&buf[..HEADER_LEN]);
            put16(buf, field::CHECKSUM, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // 198.18.0.1 -> 198.18.0.2, UDP, 4 bytes of payload, checksum valid.
    fn fixture() -> Vec<u8> {
        let mut b = hex("4500 0018 1234 4000 4011 0000 c6120001 c6120002 deadbeef");
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        b
    }

    #[test]
    fn deconstruct() {
        let b = fixture();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.protocol(), Protocol::Udp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(198, 18, 0, 1));
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn roundtrip() {
        let b = fixture();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        let r = Ipv4Repr::parse(&p, Checksum::Both).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out, Checksum::Both);
        out[20..].copy_from_slice(p.payload());
        assert_eq!(out, b);
    }

    #[test]
    fn options_are_skipped() {
        // IHL 6: one word of options (NOP NOP NOP EOL).
        let mut b = hex("4600 001c 0000 0000 4006 0000 c6120001 c6120002 01010100 aabbccdd");
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(Ipv4Repr::parse(&p, Checksum::Both).is_ok());
    }

    #[test]
    fn padding_is_ignored() {
        let mut b = fixture();
        b.extend_from_slice(&[0; 22]); // Ethernet minimum-frame padding
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn truncated_and_impossible_lengths() {
        let b = fixture();
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut small_ihl = b.clone();
        small_ihl[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&small_ihl[..]).unwrap_err(),
            Error::Malformed
        );
        let mut small_total = b.clone();
        small_total[3] = 10;
        assert_eq!(
            Ipv4Packet::new_checked(&small_total[..]).unwrap_err(),
            Error::Malformed
        );
        let mut big_ihl = b.clone();
        big_ihl[0] = 0x4f; // 60-byte header in a 24-byte packet
        assert!(Ipv4Packet::new_checked(&big_ihl[..]).is_err());
    }

    #[test]
    fn bad_version_and_checksum() {
        let mut b = fixture();
        b[15] ^= 1;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Ipv4Repr::parse(&p, Checksum::Both).unwrap_err(),
            Error::Checksum
        );
        assert!(Ipv4Repr::parse(&p, Checksum::None).is_ok());
        let mut v6 = fixture();
        v6[0] = 0x65;
        let p = Ipv4Packet::new_checked(&v6[..]).unwrap();
        assert_eq!(
            Ipv4Repr::parse(&p, Checksum::None).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn fragments_are_recognised() {
        let mut b = fixture();
        b[6] = 0x20; // MF
        assert!(Ipv4Packet::new_checked(&b[..]).unwrap().is_fragment());
        b[6] = 0x00;
        b[7] = 0x10; // offset 128
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 128);
    }

    #[test]
    fn fragment_headers_round_trip() {
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::new(198, 18, 0, 1),
            dst_addr: Ipv4Addr::new(198, 18, 0, 2),
            protocol: Protocol::Udp,
            payload_len: 1480,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0x1234,
            dont_frag: false,
        };
        let mut b = vec![0u8; 1500];
        repr.emit_fragment(&mut b, Checksum::Both, 65528, true);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 65528);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.verify_checksum());
        repr.emit_fragment(&mut b, Checksum::Both, 2960, false);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(!p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 2960);
        assert_eq!(Ipv4Repr::parse(&p, Checksum::Both).unwrap(), repr);
    }
}
