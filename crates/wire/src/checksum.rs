//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums here are one's-complement sums *before* the final complement; a
//! header's checksum field holds `!combine(..)`. A buffer whose checksum is
//! valid sums (checksum field included) to `0xffff`.

use std::net::Ipv4Addr;

/// Fold a wide accumulator into a 16-bit one's-complement sum.
#[inline]
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// One's-complement sum of `data` taken as big-endian 16-bit words (an odd
/// final byte is padded with zero). Not complemented.
pub fn data(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        // Eight 32-bit words per round; a u64 cannot overflow here for any
        // buffer shorter than 2^35 bytes.
        for w in c.chunks_exact(4) {
            acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// One's-complement sum of partial sums.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// Sum of the IPv4 pseudo-header used by TCP and UDP (RFC 9293 §3.1,
/// RFC 768): source, destination, zero, protocol, upper-layer length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u64::from(u16::from_be_bytes([s[0], s[1]]))
        + u64::from(u16::from_be_bytes([s[2], s[3]]))
        + u64::from(u16::from_be_bytes([d[0], d[1]]))
        + u64::from(u16::from_be_bytes([d[2], d[3]]))
        + u64::from(protocol)
        + u64::from(length >> 16)
        + u64::from(length & 0xffff);
    fold(acc)
}

/// Update a checksum field after one 16-bit word of the covered data changed
/// from `old` to `new`, without re-summing (RFC 1624 eqn. 3:
/// `HC' = ~(~HC + ~m + m')`).
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    let acc = u64::from(!checksum) + u64::from(!old) + u64::from(new);
    !fold(acc)
}

/// Update a checksum after a 32-bit field (an address, a sequence number)
/// changed.
pub fn update32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: 16 bits at a time, no tricks.
    fn naive(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for (i, b) in data.iter().enumerate() {
            acc += if i % 2 == 0 {
                u32::from(*b) << 8
            } else {
                u32::from(*b)
            };
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(data(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(data(&[]), 0);
    }

    #[test]
    fn known_ipv4_header() {
        // A real header (Wikipedia's example) with checksum b861.
        let h = crate::hex("4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7");
        assert_eq!(data(&h), 0xffff);
    }

    proptest::proptest! {
        #[test]
        fn fast_sum_matches_naive(v in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            proptest::prop_assert_eq!(data(&v), naive(&v));
        }

        /// RFC 1624 eqn. 3 agrees with recomputing.
        #[test]
        fn incremental_update_matches_full(
            v in proptest::collection::vec(proptest::num::u8::ANY, 4..64),
            idx in 0usize..30, new in proptest::num::u16::ANY)
        {
            let mut v = v;
            if v.len() % 2 == 1 { v.push(0); }
            let i = (idx % (v.len() / 2)) * 2;
            let csum = !data(&v);
            let old = u16::from_be_bytes([v[i], v[i + 1]]);
            v[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let full = !data(&v);
            let inc = update(csum, old, new);
            // 0x0000 and 0xffff are the same value in one's complement.
            proptest::prop_assert!(inc == full || (inc == 0 && full == 0xffff) || (inc == 0xffff && full == 0));
        }
    }
}
