//! ARP (RFC 826) for Ethernet hardware and IPv4 protocol addresses.
//!
//! After [`ArpPacket::new_checked`] no accessor panics. [`ArpRepr::parse`]
//! accepts only hardware type 1 (Ethernet, 6-byte addresses) and protocol
//! type 0x0800 (IPv4, 4-byte addresses); others are `Unrecognized`.

use crate::ethernet::MacAddr;
use crate::{be16, put16, Error, Result};
use std::net::Ipv4Addr;

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: core::ops::Range<usize> = 8..14;
    pub const SPA: core::ops::Range<usize> = 14..18;
    pub const THA: core::ops::Range<usize> = 18..24;
    pub const TPA: core::ops::Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// 1
    Request,
    /// 2
    Reply,
    /// Any other code.
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            x => Operation::Unknown(x),
        }
    }
}

impl From<Operation> for u16 {
    fn from(v: Operation) -> u16 {
        match v {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(x) => x,
        }
    }
}

/// A view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn ip(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wrap without checking.
    pub fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }
    /// Wrap, checking the buffer holds an Ethernet/IPv4-sized packet.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(ArpPacket { buffer })
    }
    /// Hardware type (1 = Ethernet).
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE)
    }
    /// Protocol type (0x0800 = IPv4).
    pub fn protocol_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PTYPE)
    }
    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation.
    pub fn operation(&self) -> Operation {
        be16(self.buffer.as_ref(), field::OPER).into()
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SHA])
    }
    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip(&self.buffer.as_ref()[field::SPA])
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::THA])
    }
    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        ip(&self.buffer.as_ref()[field::TPA])
    }
}

/// Plain-data Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: Operation,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parse, accepting only Ethernet/IPv4 requests and replies.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        if p.hardware_type() != 1
            || p.protocol_type() != 0x0800
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::Unrecognized);
        }
        let operation = p.operation();
        if let Operation::Unknown(_) = operation {
            return Err(Error::Unrecognized);
        }
        Ok(ArpRepr {
            operation,
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Write into `buf` (at least [`PACKET_LEN`] bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, field::HTYPE, 1);
        put16(buf, field::PTYPE, 0x0800);
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        put16(buf, field::OPER, self.operation.into());
        buf[field::SHA].copy_from_slice(&self.sender_mac.0);
        buf[field::SPA].copy_from_slice(&self.sender_ip.octets());
        buf[field::THA].copy_from_slice(&self.target_mac.0);
        buf[field::TPA].copy_from_slice(&self.target_ip.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    // who-has 198.18.0.2 tell 198.18.0.1 (captured layout)
    const REQUEST: &str = "0001 0800 06 04 0001 020000000001 c6120001 000000000000 c6120002";

    #[test]
    fn deconstruct() {
        let b = hex(REQUEST);
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.operation(), Operation::Request);
        assert_eq!(p.sender_ip(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(p.target_ip(), Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(p.sender_mac(), MacAddr([2, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn roundtrip() {
        let b = hex(REQUEST);
        let r = ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(out, b);
    }

    #[test]
    fn truncated_and_foreign() {
        let b = hex(REQUEST);
        assert_eq!(
            ArpPacket::new_checked(&b[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut b2 = b.clone();
        b2[1] = 6; // hardware type 6 (IEEE 802)
        let p = ArpPacket::new_checked(&b2[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap_err(), Error::Unrecognized);
        let mut b3 = b;
        b3[7] = 9; // unknown operation
        let p = ArpPacket::new_checked(&b3[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap_err(), Error::Unrecognized);
    }
}
