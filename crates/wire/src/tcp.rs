//! TCP segments (RFC 9293 §3.1) and the options of RFC 9293 §3.2 (MSS),
//! RFC 7323 (window scale, timestamps) and RFC 2018 (SACK).
//!
//! [`TcpPacket::new_checked`] checks that the buffer holds the header the
//! data-offset field describes; after it succeeds no accessor panics.
//! [`TcpRepr::parse`] validates ports, the checksum and every option's length:
//! an option with an impossible length (zero, one, running past the header)
//! is `Malformed` — RFC 1122 §4.2.2.5: "a TCP MUST be prepared to handle an
//! illegal option length (e.g., zero) without crashing". Unknown options are
//! skipped by their length. [`TcpRepr::emit`] never panics into a buffer of
//! `buffer_len()` bytes; it writes at most 40 bytes of options, dropping SACK
//! blocks that do not fit.

use crate::{be16, be32, checksum, put16, put32, Checksum, Error, Result};
use core::{cmp::Ordering, fmt, ops};
use std::net::Ipv4Addr;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Longest options area (data offset 15).
pub const MAX_OPTIONS_LEN: usize = 40;
/// Most SACK blocks one segment can carry.
pub const MAX_SACK_BLOCKS: usize = 4;

/// A TCP sequence number: arithmetic and comparison modulo 2^32
/// (RFC 9293 §3.4). `a < b` means `b` is ahead of `a` by less than 2^31.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// Signed distance `self - other`.
    #[inline]
    pub fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// The later of two sequence numbers.
    #[inline]
    pub fn max(self, other: SeqNum) -> SeqNum {
        if self.diff(other) >= 0 {
            self
        } else {
            other
        }
    }
    /// The earlier of two sequence numbers.
    #[inline]
    pub fn min(self, other: SeqNum) -> SeqNum {
        if self.diff(other) <= 0 {
            self
        } else {
            other
        }
    }
    /// `self - other` as a byte count; 0 when `other` is ahead.
    #[inline]
    pub fn since(self, other: SeqNum) -> usize {
        let d = self.diff(other);
        if d > 0 {
            d as usize
        } else {
            0
        }
    }
}

impl ops::Add<usize> for SeqNum {
    type Output = SeqNum;
    #[inline]
    fn add(self, rhs: usize) -> SeqNum {
        SeqNum(self.0.wrapping_add(rhs as u32))
    }
}

impl ops::AddAssign<usize> for SeqNum {
    #[inline]
    fn add_assign(&mut self, rhs: usize) {
        *self = *self + rhs;
    }
}

impl ops::Sub<usize> for SeqNum {
    type Output = SeqNum;
    #[inline]
    fn sub(self, rhs: usize) -> SeqNum {
        SeqNum(self.0.wrapping_sub(rhs as u32))
    }
}

impl PartialOrd for SeqNum {
    #[inline]
    fn partial_cmp(&self, other: &SeqNum) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// TCP control bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x002);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x004);
    /// Push function.
    pub const PSH: Flags = Flags(0x008);
    /// Acknowledgment field significant.
    pub const ACK: Flags = Flags(0x010);
    /// Urgent pointer field significant.
    pub const URG: Flags = Flags(0x020);
    /// ECN-Echo.
    pub const ECE: Flags = Flags(0x040);
    /// Congestion Window Reduced.
    pub const CWR: Flags = Flags(0x080);

    /// All bits of `other` set?
    #[inline]
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// SYN set?
    #[inline]
    pub fn syn(self) -> bool {
        self.contains(Flags::SYN)
    }
    /// FIN set?
    #[inline]
    pub fn fin(self) -> bool {
        self.contains(Flags::FIN)
    }
    /// RST set?
    #[inline]
    pub fn rst(self) -> bool {
        self.contains(Flags::RST)
    }
    /// PSH set?
    #[inline]
    pub fn psh(self) -> bool {
        self.contains(Flags::PSH)
    }
    /// ACK set?
    #[inline]
    pub fn ack(self) -> bool {
        self.contains(Flags::ACK)
    }
    /// URG set?
    #[inline]
    pub fn urg(self) -> bool {
        self.contains(Flags::URG)
    }
}

impl ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Flags, &str); 8] = [
            (Flags::SYN, "S"),
            (Flags::FIN, "F"),
            (Flags::RST, "R"),
            (Flags::PSH, "P"),
            (Flags::ACK, "."),
            (Flags::URG, "U"),
            (Flags::ECE, "E"),
            (Flags::CWR, "W"),
        ];
        f.write_str("[")?;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                f.write_str(name)?;
            }
        }
        f.write_str("]")
    }
}

/// A SACK block: bytes `[left, right)` received out of order (RFC 2018 §3).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SackBlock {
    /// First sequence number of the block.
    pub left: SeqNum,
    /// Sequence number just past the block.
    pub right: SeqNum,
}

/// The TCP options this stack reads and writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2), SYN only.
    pub mss: Option<u16>,
    /// Window scale shift (kind 3), SYN only. Values above 14 are kept as
    /// received; RFC 7323 §2.3 says the receiver uses 14 then.
    pub window_scale: Option<u8>,
    /// SACK permitted (kind 4), SYN only.
    pub sack_permitted: bool,
    /// Timestamps (kind 8): `(TSval, TSecr)`.
    pub timestamp: Option<(u32, u32)>,
    /// SACK blocks (kind 5), `sack_len` of them valid.
    pub sack_blocks: [SackBlock; MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack_blocks`.
    pub sack_len: u8,
}

impl TcpOptions {
    /// The valid SACK blocks.
    pub fn sacks(&self) -> &[SackBlock] {
        &self.sack_blocks[..usize::from(self.sack_len.min(MAX_SACK_BLOCKS as u8))]
    }

    /// Parse an options area. Unknown kinds are skipped by length; an
    /// impossible length is `Malformed`.
    pub fn parse(mut b: &[u8]) -> Result<TcpOptions> {
        let mut o = TcpOptions::default();
        while let Some(&kind) = b.first() {
            match kind {
                0 => break, // End of option list
                1 => {
                    b = &b[1..]; // No-operation
                    continue;
                }
                _ => {}
            }
            let len = usize::from(*b.get(1).ok_or(Error::Malformed)?);
            if len < 2 || len > b.len() {
                return Err(Error::Malformed);
            }
            let body = &b[2..len];
            match (kind, len) {
                (2, 4) => o.mss = Some(be16(body, 0)),
                (3, 3) => o.window_scale = Some(body[0]),
                (4, 2) => o.sack_permitted = true,
                (8, 10) => o.timestamp = Some((be32(body, 0), be32(body, 4))),
                (5, _) => {
                    if (len - 2) % 8 != 0 || len == 2 {
                        return Err(Error::Malformed);
                    }
                    let n = ((len - 2) / 8).min(MAX_SACK_BLOCKS);
                    // A later SACK option replaces an earlier one whole: no
                    // stale blocks past `sack_len` (they would break `==`).
                    o.sack_blocks = [SackBlock::default(); MAX_SACK_BLOCKS];
                    for i in 0..n {
                        o.sack_blocks[i] = SackBlock {
                            left: SeqNum(be32(body, i * 8)),
                            right: SeqNum(be32(body, i * 8 + 4)),
                        };
                    }
                    o.sack_len = n as u8;
                }
                // A known kind with the wrong length.
                (2 | 3 | 4 | 8, _) => return Err(Error::Malformed),
                _ => {} // unknown option: skip
            }
            b = &b[len..];
        }
        Ok(o)
    }

    /// SACK blocks that fit alongside the other options in 40 bytes.
    fn sacks_that_fit(&self) -> usize {
        let fixed = self.fixed_len();
        let room = MAX_OPTIONS_LEN.saturating_sub(fixed + 4) / 8;
        self.sacks().len().min(room)
    }

    fn fixed_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.timestamp.is_some() || self.sack_permitted {
            n += if self.timestamp.is_some() { 12 } else { 4 };
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        n
    }

    /// Bytes `emit` writes (a multiple of 4, at most 40).
    pub fn buffer_len(&self) -> usize {
        let s = self.sacks_that_fit();
        self.fixed_len() + if s > 0 { 4 + 8 * s } else { 0 }
    }

    /// Write the options, padded to a multiple of 4 with NOPs, into `buf`
    /// (at least `buffer_len()` bytes). Returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let mut i = 0;
        if let Some(mss) = self.mss {
            buf[i..i + 2].copy_from_slice(&[2, 4]);
            put16(buf, i + 2, mss);
            i += 4;
        }
        match (self.sack_permitted, self.timestamp) {
            (true, Some(_)) => {
                buf[i..i + 2].copy_from_slice(&[4, 2]);
                i += 2;
            }
            (false, Some(_)) => {
                buf[i..i + 2].copy_from_slice(&[1, 1]);
                i += 2;
            }
            (true, None) => {
                buf[i..i + 4].copy_from_slice(&[1, 1, 4, 2]);
                i += 4;
            }
            (false, None) => {}
        }
        if let Some((val, ecr)) = self.timestamp {
            buf[i..i + 2].copy_from_slice(&[8, 10]);
            put32(buf, i + 2, val);
            put32(buf, i + 6, ecr);
            i += 10;
        }
        if let Some(ws) = self.window_scale {
            buf[i..i + 4].copy_from_slice(&[1, 3, 3, ws]);
            i += 4;
        }
        let n = self.sacks_that_fit();
        if n > 0 {
            buf[i..i + 4].copy_from_slice(&[1, 1, 5, (2 + 8 * n) as u8]);
            i += 4;
            for blk in &self.sack_blocks[..n] {
                put32(buf, i, blk.left.0);
                put32(buf, i + 4, blk.right.0);
                i += 8;
            }
        }
        i
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wrap without checking.
    pub fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }
    /// Wrap, checking the data offset against the buffer: `Malformed` for a
    /// data offset below 5, `Truncated` for a header longer than the buffer.
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
        if hl > len {
            return Err(Error::Truncated);
        }
        Ok(p)
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq_number(&self) -> SeqNum {
        SeqNum(be32(self.buffer.as_ref(), field::SEQ))
    }
    /// Acknowledgment number (meaningful when ACK is set).
    pub fn ack_number(&self) -> SeqNum {
        SeqNum(be32(self.buffer.as_ref(), field::ACK))
    }
    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS] >> 4) * 4
    }
    /// Control bits (including ECE, CWR; the NS bit is ignored).
    pub fn flags(&self) -> Flags {
        Flags(be16(self.buffer.as_ref(), field::FLAGS) & 0x0ff)
    }
    /// Window field (unscaled).
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }
    /// The options area.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// The payload (everything after the header).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Sequence space the segment occupies: payload plus one each for SYN
    /// and FIN (RFC 9293 §3.4).
    pub fn segment_len(&self) -> usize {
        let f = self.flags();
        self.payload().len() + usize::from(f.syn()) + usize::from(f.fin())
    }
    /// Does the checksum verify for this pseudo-header?
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        checksum::combine(&[
            checksum::pseudo_header_v4(src, dst, 6, b.len() as u32),
            checksum::data(b),
        ]) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Recompute and store the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        put16(self.buffer.as_mut(), field::CHECKSUM, 0);
        let b = self.buffer.as_ref();
        let c = !checksum::combine(&[
            checksum::pseudo_header_v4(src, dst, 6, b.len() as u32),
            checksum::data(b),
        ]);
        put16(self.buffer.as_mut(), field::CHECKSUM, c);
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// Plain-data TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: SeqNum,
    /// Acknowledgment number, present iff the ACK bit is set.
    pub ack: Option<SeqNum>,
    /// Control bits other than ACK (SYN, FIN, RST, PSH, URG, ECE, CWR).
    pub flags: Flags,
    /// Window field as sent (unscaled).
    pub window_len: u16,
    /// Urgent pointer: significant only with URG, else sent as 0 (RFC
    /// 9293 §3.1: the sequence number of the octet following the urgent
    /// data, as an offset from this segment's).
    pub urgent: u16,
    /// Options.
    pub options: TcpOptions,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Parse a checked segment. `Malformed` for a zero port or a bad option;
    /// `Checksum` when verification is on and fails.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        p: &TcpPacket<&'a T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        csum: Checksum,
    ) -> Result<TcpRepr<'a>> {
        if p.src_port() == 0 || p.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        if csum.rx() && !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let b: &'a [u8] = T::as_ref(p.buffer);
        let hl = p.header_len();
        let options = TcpOptions::parse(&b[HEADER_LEN..hl])?;
        let raw = p.flags();
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq_number(),
            ack: raw.ack().then(|| p.ack_number()),
            flags: Flags(raw.0 & !Flags::ACK.0),
            window_len: p.window_len(),
            urgent: p.urgent_at(),
            options,
            payload: &b[hl..],
        })
    }

    /// Header length `emit` writes (20 plus options).
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.buffer_len()
    }

    /// Header plus payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Sequence space used: payload plus SYN and FIN.
    pub fn segment_len(&self) -> usize {
        self.payload.len() + usize::from(self.flags.syn()) + usize::from(self.flags.fin())
    }

    /// Write the header and `self.payload` into `buf` (at least
    /// `buffer_len()` bytes) and the checksum when `csum.tx()` (only the
    /// pseudo-header sum, for the device to complete, when
    /// `csum.partial()`).
    pub fn emit(&self, buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr, csum: Checksum) -> usize {
        let payload = self.payload;
        self.emit_with(buf, src, dst, payload.len(), csum, |out| {
            out.copy_from_slice(payload)
        })
    }

    /// Like [`emit`](Self::emit), but the payload (`payload_len` bytes, not
    /// `self.payload`) is written by `fill` into the slice it is given; used
    /// to gather a payload from several buffers without an extra copy.
    /// Returns the segment length in bytes.
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        payload_len: usize,
        csum: Checksum,
        fill: impl FnOnce(&mut [u8]),
    ) -> usize {
        let hl = self.header_len();
        let total = hl + payload_len;
        let buf = &mut buf[..total];
        put16(buf, field::SRC_PORT, self.src_port);
        put16(buf, field::DST_PORT, self.dst_port);
        put32(buf, field::SEQ, self.seq.0);
        put32(buf, field::ACK, self.ack.map_or(0, |a| a.0));
        let mut flags = self.flags.0 & 0x0ff & !Flags::ACK.0;
        if self.ack.is_some() {
            flags |= Flags::ACK.0;
        }
        put16(buf, field::FLAGS, ((hl as u16 / 4) << 12) | flags);
        put16(buf, field::WINDOW, self.window_len);
        put16(buf, field::CHECKSUM, 0);
        let urgent = if self.flags.urg() { self.urgent } else { 0 };
        put16(buf, field::URGENT, urgent);
        let written = self.options.emit(&mut buf[HEADER_LEN..hl]);
        debug_assert_eq!(HEADER_LEN + written, hl);
        fill(&mut buf[hl..]);
        if csum.tx() {
            let c = !checksum::combine(&[
                checksum::pseudo_header_v4(src, dst, 6, total as u32),
                checksum::data(buf),
            ]);
            put16(buf, field::CHECKSUM, c);
        } else if csum.partial() {
            // The device sums from the TCP header on and adds this in.
            let c = checksum::pseudo_header_v4(src, dst, 6, total as u32);
            put16(buf, field::CHECKSUM, c);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    /// A SYN as Linux sends it: MSS 1460, SACK-permitted, timestamps, NOP,
    /// window scale 7.
    const LINUX_SYN: &str = "c350 0007 00000064 00000000 a002 faf0 0000 0000 \
                             020405b4 0402 080a 0000c350 00000000 01 030307";

    #[test]
    fn deconstruct_linux_syn() {
        let b = hex(LINUX_SYN);
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 50000);
        assert_eq!(p.dst_port(), 7);
        assert_eq!(p.seq_number(), SeqNum(100));
        assert_eq!(p.header_len(), 40);
        assert!(p.flags().syn() && !p.flags().ack());
        assert_eq!(p.window_len(), 64240);
        let r = TcpRepr::parse(&p, SRC, DST, Checksum::None).unwrap();
        assert_eq!(r.ack, None);
        assert_eq!(r.options.mss, Some(1460));
        assert!(r.options.sack_permitted);
        assert_eq!(r.options.timestamp, Some((50000, 0)));
        assert_eq!(r.options.window_scale, Some(7));
        assert_eq!(r.segment_len(), 1);
    }

    #[test]
    fn emit_parse_roundtrip_with_checksum() {
        let mut opts = TcpOptions {
            timestamp: Some((1, 2)),
            ..Default::default()
        };
        opts.sack_blocks[0] = SackBlock {
            left: SeqNum(10),
            right: SeqNum(20),
        };
        opts.sack_len = 1;
        let r = TcpRepr {
            src_port: 7,
            dst_port: 50000,
            seq: SeqNum(0xffff_fff0),
            ack: Some(SeqNum(5)),
            flags: Flags::PSH | Flags::URG,
            window_len: 1234,
            urgent: 6,
            options: opts,
            payload: b"hello world",
        };
        let mut buf = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut buf, SRC, DST, Checksum::Both), buf.len());
        let p = TcpPacket::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(SRC, DST));
        assert_eq!(TcpRepr::parse(&p, SRC, DST, Checksum::Both).unwrap(), r);
        buf[25] ^= 0x40;
        let p = TcpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(
            TcpRepr::parse(&p, SRC, DST, Checksum::Both).unwrap_err(),
            Error::Checksum
        );
    }

    /// A partial checksum is what a device completes as Linux does for
    /// `CHECKSUM_PARTIAL` (sum from the TCP header on, the field holding
    /// the pseudo-header sum, store the complement): the result is the
    /// full checksum, for odd and even payload lengths.
    #[test]
    fn partial_checksum_completes_to_the_full_one() {
        for payload in [&b""[..], b"a", b"hello world", &[0xffu8; 1448][..]] {
            let r = TcpRepr {
                src_port: 8080,
                dst_port: 40000,
                seq: SeqNum(0x8000_0001),
                ack: Some(SeqNum(77)),
                flags: Flags::PSH,
                window_len: 512,
                urgent: 0,
                options: TcpOptions::default(),
                payload,
            };
            let mut full = vec![0u8; r.buffer_len()];
            r.emit(&mut full, SRC, DST, Checksum::Both);
            for mode in [Checksum::Partial, Checksum::RxPartial] {
                let mut part = vec![0u8; r.buffer_len()];
                r.emit(&mut part, SRC, DST, mode);
                assert_ne!(part, full, "a partial checksum is not the full one");
                let sum = !checksum::data(&part);
                part[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&sum.to_be_bytes());
                assert_eq!(part, full, "{} payload bytes", payload.len());
            }
        }
        assert!(Checksum::RxPartial.rx() && !Checksum::Partial.rx());
        assert!(!Checksum::RxPartial.tx() && !Checksum::Partial.tx());
        assert_eq!(Checksum::Both.with_partial_tx(), Checksum::RxPartial);
        assert_eq!(Checksum::Tx.with_partial_tx(), Checksum::Partial);
    }

    #[test]
    fn syn_options_roundtrip() {
        let opts = TcpOptions {
            mss: Some(1460),
            window_scale: Some(9),
            sack_permitted: true,
            timestamp: Some((7, 0)),
            ..Default::default()
        };
        let mut b = vec![0u8; opts.buffer_len()];
        assert_eq!(opts.emit(&mut b), 20);
        assert_eq!(TcpOptions::parse(&b).unwrap(), opts);
    }

    #[test]
    fn too_many_sack_blocks_are_clamped() {
        let mut opts = TcpOptions {
            timestamp: Some((1, 1)),
            ..Default::default()
        };
        for i in 0..4 {
            opts.sack_blocks[i] = SackBlock {
                left: SeqNum(i as u32 * 100),
                right: SeqNum(i as u32 * 100 + 10),
            };
        }
        opts.sack_len = 4;
        assert!(opts.buffer_len() <= MAX_OPTIONS_LEN);
        let mut b = vec![0u8; opts.buffer_len()];
        opts.emit(&mut b);
        let parsed = TcpOptions::parse(&b).unwrap();
        assert_eq!(parsed.sacks().len(), 3);
    }

    #[test]
    fn illegal_option_lengths_are_malformed() {
        // RFC 1122 §4.2.2.5: an illegal option length must not crash.
        for bad in [
            &[2u8, 0][..],
            &[2, 1],
            &[8, 200],
            &[3],
            &[2, 3, 0],
            &[5, 6, 0, 0, 0, 0],
        ] {
            assert_eq!(
                TcpOptions::parse(bad).unwrap_err(),
                Error::Malformed,
                "{bad:?}"
            );
        }
        // Unknown kinds are skipped; EOL stops parsing.
        let ok = TcpOptions::parse(&[30, 4, 0, 0, 1, 0, 0xff, 0xff]).unwrap();
        assert_eq!(ok, TcpOptions::default());
    }

    #[test]
    fn repeated_sack_option_leaves_no_stale_blocks() {
        // Found by fuzzing (wire_tcp_options): a SACK option with two blocks
        // then one with one block parsed to sack_len 1 but kept the first
        // option's second block in `sack_blocks`, so the parsed value was
        // not equal to the same options emitted and parsed again.
        let b = hex("0512 00000001 00000002 00000003 00000004 050a 0000000a 0000000b");
        let o = TcpOptions::parse(&b).unwrap();
        let mut expect = TcpOptions::default();
        expect.sack_blocks[0] = SackBlock {
            left: SeqNum(10),
            right: SeqNum(11),
        };
        expect.sack_len = 1;
        assert_eq!(o, expect);
        let mut out = vec![0u8; o.buffer_len()];
        o.emit(&mut out);
        assert_eq!(TcpOptions::parse(&out).unwrap(), o);
    }

    #[test]
    fn truncated_and_bad_offset() {
        let b = hex(LINUX_SYN);
        assert_eq!(
            TcpPacket::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            TcpPacket::new_checked(&b[..39]).unwrap_err(),
            Error::Truncated
        );
        let mut low = b.clone();
        low[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&low[..]).unwrap_err(),
            Error::Malformed
        );
        let mut zero_port = b;
        zero_port[0] = 0;
        zero_port[1] = 0;
        let p = TcpPacket::new_checked(&zero_port[..]).unwrap();
        assert_eq!(
            TcpRepr::parse(&p, SRC, DST, Checksum::None).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn seq_arithmetic_wraps() {
        let a = SeqNum(u32::MAX - 5);
        let b = a + 10;
        assert_eq!(b, SeqNum(4));
        assert!(a < b);
        assert_eq!(b.diff(a), 10);
        assert_eq!(b.since(a), 10);
        assert_eq!(a.since(b), 0);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }
}
