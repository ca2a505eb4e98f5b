//! UDP (RFC 768).
//!
//! [`UdpPacket::new_checked`] checks the length field (at least 8, at most
//! the buffer); after it succeeds no accessor panics. A zero checksum means
//! "none" and is accepted; on transmit a computed zero is sent as 0xffff.

use crate::{be16, checksum, put16, Checksum, Error, Result};
use std::net::Ipv4Addr;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap without checking.
    pub fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Wrap, checking the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(p.len());
        if l < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if l > len {
            return Err(Error::Truncated);
        }
        Ok(p)
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Is the payload empty?
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Payload (up to the length field).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
    /// Byte range of the payload in the buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        HEADER_LEN..usize::from(self.len())
    }
    /// Does the checksum verify (a zero checksum always does)?
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let b = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::combine(&[
            checksum::pseudo_header_v4(src, dst, 17, u32::from(self.len())),
            checksum::data(b),
        ]) == 0xffff
    }
}

/// Plain-data UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse a checked datagram; `Malformed` for a zero destination port,
    /// `Checksum` when verification is on and fails.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        csum: Checksum,
    ) -> Result<UdpRepr> {
        if p.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        if csum.rx() && !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// Header plus payload length.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Write header and payload into `buf` (at least `buffer_len(payload.len())`
    /// bytes) and fill the checksum when `csum.tx()`.
    pub fn emit(
        &self,
        buf: &mut [u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        payload: &[u8],
        csum: Checksum,
    ) {
        let len = HEADER_LEN + payload.len();
        put16(buf, field::SRC_PORT, self.src_port);
        put16(buf, field::DST_PORT, self.dst_port);
        put16(buf, field::LENGTH, len as u16);
        put16(buf, field::CHECKSUM, 0);
        buf[HEADER_LEN..len].copy_from_slice(payload);
        if csum.tx() {
            let c = !checksum::combine(&[
                checksum::pseudo_header_v4(src, dst, 17, len as u32),
                checksum::data(&buf[..len]),
            ]);
            // RFC 768: a computed zero is transmitted as all ones.
            put16(buf, field::CHECKSUM, if c == 0 { 0xffff } else { c });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    #[test]
    fn roundtrip() {
        let r = UdpRepr {
            src_port: 4000,
            dst_port: 53,
        };
        let mut buf = vec![0u8; r.buffer_len(5)];
        r.emit(&mut buf, SRC, DST, b"hello", Checksum::Both);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(SRC, Ipv4Addr::new(198, 18, 0, 3)));
        assert_eq!(UdpRepr::parse(&p, SRC, DST, Checksum::Both).unwrap(), r);
        assert_eq!(p.payload(), b"hello");
    }

    #[test]
    fn zero_checksum_is_none() {
        let b = hex("0fa0 0035 000a 0000 6869");
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(UdpRepr::parse(&p, SRC, DST, Checksum::Both).is_ok());
    }

    #[test]
    fn lengths() {
        let b = hex("0fa0 0035 000a 0000 6869");
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            UdpPacket::new_checked(&b[..9]).unwrap_err(),
            Error::Truncated
        );
        let mut small = b.clone();
        small[5] = 4;
        assert_eq!(
            UdpPacket::new_checked(&small[..]).unwrap_err(),
            Error::Malformed
        );
        let mut zero_port = b;
        zero_port[3] = 0;
        zero_port[2] = 0;
        let p = UdpPacket::new_checked(&zero_port[..]).unwrap();
        assert_eq!(
            UdpRepr::parse(&p, SRC, DST, Checksum::None).unwrap_err(),
            Error::Malformed
        );
    }
}
