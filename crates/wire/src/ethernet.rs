//! Ethernet II frames, with an optional IEEE 802.1Q VLAN tag.
//!
//! After [`EthernetFrame::new_checked`] succeeds no accessor panics. A frame
//! whose outer EtherType is 0x8100 is read as tagged: [`EthernetFrame::vlan_id`]
//! is the tag's VID and [`EthernetFrame::ethertype`] the inner EtherType.
//! Stacked tags (QinQ) are not looked into: a frame whose inner type is again a
//! VLAN type reports that type and the caller drops it.

use crate::{be16, put16, Error, Result};
use core::fmt;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_ETHERTYPE: usize = 16;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A 48-bit Ethernet (MAC) address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00
    pub const UNSPECIFIED: MacAddr = MacAddr([0; 6]);

    /// Build from the first six bytes of `b`. Panics if `b` is shorter.
    pub fn from_bytes(b: &[u8]) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        MacAddr(a)
    }
    /// The all-ones broadcast address?
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// Group bit set (multicast or broadcast)?
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
    /// An individual (unicast) address that is not all zeros?
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && *self != Self::UNSPECIFIED
    }
    /// The octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for MacAddr {
    type Err = Error;
    /// Parse `aa:bb:cc:dd:ee:ff` (or with `-`).
    fn from_str(s: &str) -> Result<MacAddr> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.len() != 2 {
                return Err(Error::Malformed);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
            n += 1;
        }
        if n != 6 {
            return Err(Error::Malformed);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values this stack knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800
    Ipv4,
    /// 0x0806
    Arp,
    /// 0x8100 (an 802.1Q tag)
    Vlan,
    /// 0x86dd
    Ipv6,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap without checking. Accessors may panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap, checking that the buffer holds the whole header (including the
    /// 802.1Q tag when the outer EtherType says there is one).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        let len = f.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if f.outer_ethertype() == 0x8100 && len < HEADER_LEN + VLAN_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(f)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn outer_ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Is there an 802.1Q tag?
    pub fn is_tagged(&self) -> bool {
        self.outer_ethertype() == 0x8100
    }

    /// Header length: 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DST])
    }

    /// Source address.
    pub fn src_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SRC])
    }

    /// The EtherType of the payload (the inner one when tagged).
    pub fn ethertype(&self) -> EtherType {
        if self.is_tagged() {
            be16(self.buffer.as_ref(), field::INNER_ETHERTYPE).into()
        } else {
            self.outer_ethertype().into()
        }
    }

    /// The 12-bit VLAN identifier, if tagged.
    pub fn vlan_id(&self) -> Option<u16> {
        self.is_tagged()
            .then(|| be16(self.buffer.as_ref(), field::TCI) & 0x0fff)
    }

    /// The 3-bit priority code point, if tagged.
    pub fn vlan_pcp(&self) -> Option<u8> {
        self.is_tagged()
            .then(|| (be16(self.buffer.as_ref(), field::TCI) >> 13) as u8)
    }

    /// Bytes after the header (including any trailing padding).
    pub fn payload(&self) -> &[u8] {
        let hl = self.header_len();
        &self.buffer.as_ref()[hl..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// Mutable payload (after the header as it currently reads).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// Plain-data Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source address.
    pub src_addr: MacAddr,
    /// Destination address.
    pub dst_addr: MacAddr,
    /// Payload type.
    pub ethertype: EtherType,
    /// 802.1Q VLAN id (priority 0) when tagged.
    pub vlan: Option<u16>,
}

impl EthernetRepr {
    /// Read the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
            vlan: frame.vlan_id(),
        })
    }

    /// Header length this repr emits.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header to the front of `buf`, which must be at least
    /// `header_len()` bytes long. Returns the header length.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        buf[field::DST].copy_from_slice(&self.dst_addr.0);
        buf[field::SRC].copy_from_slice(&self.src_addr.0);
        match self.vlan {
            Some(vid) => {
                put16(buf, field::ETHERTYPE, 0x8100);
                put16(buf, field::TCI, vid & 0x0fff);
                put16(buf, field::INNER_ETHERTYPE, self.ethertype.into());
            }
            None => put16(buf, field::ETHERTYPE, self.ethertype.into()),
        }
        self.header_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    const UNTAGGED: &str = "ffffffffffff 020000000001 0806 aabb";
    const TAGGED: &str = "020000000002 020000000001 8100 a064 0800 4500";

    #[test]
    fn deconstruct_untagged() {
        let b = hex(UNTAGGED);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.src_addr(), "02:00:00:00:00:01".parse().unwrap());
        assert_eq!(f.ethertype(), EtherType::Arp);
        assert_eq!(f.vlan_id(), None);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn deconstruct_tagged() {
        let b = hex(TAGGED);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(f.vlan_pcp(), Some(5));
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn construct_roundtrip() {
        for vlan in [None, Some(100u16)] {
            let r = EthernetRepr {
                src_addr: MacAddr([2, 0, 0, 0, 0, 1]),
                dst_addr: MacAddr([2, 0, 0, 0, 0, 2]),
                ethertype: EtherType::Ipv4,
                vlan,
            };
            let mut buf = vec![0u8; r.header_len()];
            r.emit(&mut buf);
            let f = EthernetFrame::new_checked(&buf[..]).unwrap();
            assert_eq!(EthernetRepr::parse(&f).unwrap(), r);
        }
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(),
            Error::Truncated
        );
        let mut b = hex(TAGGED);
        b.truncate(17);
        assert_eq!(
            EthernetFrame::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn mac_parse_rejects_garbage() {
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("zz:00:00:00:00:00".parse::<MacAddr>().is_err());
        assert!(MacAddr([2, 0, 0, 0, 0, 1]).is_unicast());
        assert!(!MacAddr::BROADCAST.is_unicast());
    }
}
