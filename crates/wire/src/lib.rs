//! Ixora's wire layer: packet formats as zero-copy views and plain-data
//! representations.
//!
//! Every format follows the same two-level pattern (after smoltcp):
//!
//! * a **view**, `XxxPacket<T: AsRef<[u8]>>`, that reads and (where
//!   `T: AsMut<[u8]>`) writes header fields in place. `XxxPacket::new_checked`
//!   verifies that the buffer is long enough for every field the view exposes;
//!   **after `new_checked` succeeds no accessor panics**, whatever the bytes are.
//! * a **representation**, `XxxRepr`, a plain value holding the meaningful
//!   fields. `XxxRepr::parse` validates the semantics (versions, lengths,
//!   checksums); `XxxRepr::emit` writes a header and **never panics into a
//!   buffer of at least `XxxRepr::buffer_len()` bytes**.
//!
//! Formats: Ethernet II with an optional 802.1Q tag ([`ethernet`]), ARP for
//! Ethernet/IPv4 ([`arp`]), IPv4 ([`ipv4`], options skipped, fragments
//! recognised so the caller can drop them), ICMPv4 ([`icmpv4`]: echo,
//! destination unreachable, time exceeded), UDP ([`udp`]) and TCP ([`tcp`],
//! with the MSS, window scale, SACK-permitted, SACK and timestamp options).
//! The Internet checksum, with incremental update, is in [`checksum`].
//!
//! Not implemented: IPv6, IP options on emit, IPv4 reassembly (fragments are
//! recognised and left to the caller), TCP-AO/MD5. (The TCP urgent pointer
//! is parsed and emitted, with URG; what it means is the stack's.)

#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod ipv4;
pub mod tcp;
pub mod udp;

pub use std::net::Ipv4Addr;

/// Why a buffer could not be read as a packet of some format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field says).
    Truncated,
    /// A field has a value the format does not allow (bad version, a length
    /// smaller than the header, an option with an impossible length, ...).
    Malformed,
    /// The checksum does not match the contents.
    Checksum,
    /// Well formed, but a kind this layer does not handle (an ARP packet for
    /// another protocol, an ICMP type we do not parse, ...).
    Unrecognized,
}

impl Error {
    /// A short stable name, usable as a metric label.
    pub fn name(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::Checksum => "bad_checksum",
            Error::Unrecognized => "unrecognized",
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            Error::Truncated => "buffer shorter than the header or its length field",
            Error::Malformed => "header field has an impossible value",
            Error::Checksum => "checksum mismatch",
            Error::Unrecognized => "well-formed but unsupported packet kind",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}

/// Result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// Whether a checksum is computed on transmit and verified on receive.
///
/// A NIC (or veth) that offloads checksums fills them on transmit and
/// validates them on receive; the stack then skips that work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksum {
    /// Verify on receive and compute on transmit.
    #[default]
    Both,
    /// Verify on receive only.
    Rx,
    /// Compute on transmit only.
    Tx,
    /// Neither (fully offloaded).
    None,
    /// Verify on receive; on transmit write only the pseudo-header sum
    /// and leave the rest to the device (Linux's `CHECKSUM_PARTIAL`): the
    /// sender must tell the device where the sum starts and where it goes.
    RxPartial,
    /// Do not verify on receive; on transmit as [`Checksum::RxPartial`].
    Partial,
}

impl Checksum {
    /// Verify received checksums?
    pub fn rx(self) -> bool {
        matches!(self, Checksum::Both | Checksum::Rx | Checksum::RxPartial)
    }
    /// Compute transmitted checksums?
    pub fn tx(self) -> bool {
        matches!(self, Checksum::Both | Checksum::Tx)
    }
    /// Write only the pseudo-header sum on transmit, for the device to
    /// complete?
    pub fn partial(self) -> bool {
        matches!(self, Checksum::RxPartial | Checksum::Partial)
    }
    /// The same on receive, with the transmit side left to the device.
    pub fn with_partial_tx(self) -> Checksum {
        if self.rx() {
            Checksum::RxPartial
        } else {
            Checksum::Partial
        }
    }
}

/// Per-protocol checksum behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChecksumCaps {
    /// IPv4 header checksum.
    pub ipv4: Checksum,
    /// TCP checksum.
    pub tcp: Checksum,
    /// UDP checksum.
    pub udp: Checksum,
    /// ICMPv4 checksum.
    pub icmpv4: Checksum,
}

impl ChecksumCaps {
    /// Neither verify nor compute any checksum.
    pub fn ignored() -> Self {
        ChecksumCaps {
            ipv4: Checksum::None,
            tcp: Checksum::None,
            udp: Checksum::None,
            icmpv4: Checksum::None,
        }
    }
}

/// Read a big-endian u16 at `at`. Callers guarantee the range is in bounds
/// (checked construction).
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Read a big-endian u32 at `at`.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
