//! Keyed hashes for TCP: RFC 6528 initial sequence numbers, per-connection
//! timestamp offsets, and RFC 4987 §3.6 SYN cookies.

use crate::time::Instant;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;
use std::net::Ipv4Addr;

/// A connection's addresses, as hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// Our address.
    pub local_ip: Ipv4Addr,
    /// Our port.
    pub local_port: u16,
    /// Peer address.
    pub remote_ip: Ipv4Addr,
    /// Peer port.
    pub remote_port: u16,
}

/// Domain-separated keyed hashing with the stack secret (cookies, ports)
/// and the machine's clock key (ISNs, timestamp offsets).
#[derive(Clone)]
pub struct Keyed {
    key: [u8; 16],
    clock_key: [u8; 16],
    /// Machine time at the stack's zero instant.
    base: core::time::Duration,
}

impl core::fmt::Debug for Keyed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Keyed(..)")
    }
}

/// Domain tags, so that no two uses of the secret collide.
mod domain {
    pub const ISN: u8 = 1;
    pub const TS_OFFSET: u8 = 2;
    pub const COOKIE: u8 = 3;
    pub const PORT: u8 = 4;
    pub const PORT_DRAW: u8 = 5;
    pub const IP_ID: u8 = 6;
    pub const IP_ID_START: u8 = 7;
}

impl Keyed {
    /// With the stack secret, the clock key and the machine time at the
    /// stack's zero instant (see `StackConfig::clock_key`).
    pub fn new(key: [u8; 16], clock_key: [u8; 16], base: core::time::Duration) -> Keyed {
        Keyed {
            key,
            clock_key,
            base,
        }
    }

    fn hash(&self, domain: u8, t: &Tuple, extra: u64) -> u64 {
        Self::hash_with(&self.key, domain, t, extra)
    }

    fn hash_with(key: &[u8; 16], domain: u8, t: &Tuple, extra: u64) -> u64 {
        let mut h = SipHasher24::new_with_key(key);
        h.write_u8(domain);
        h.write(&t.local_ip.octets());
        h.write_u16(t.local_port);
        h.write(&t.remote_ip.octets());
        h.write_u16(t.remote_port);
        h.write_u64(extra);
        h.finish()
    }

    /// RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport,
    /// secretkey), with M a 4 µs timer (of machine time, so it keeps
    /// running across a restart of the process) and F a keyed hash
    /// (SipHash-2-4) with the clock key.
    pub fn isn(&self, t: &Tuple, now: Instant) -> u32 {
        let m = ((self.base.as_micros() as u64 + now.as_micros()) / 4) as u32;
        m.wrapping_add(Self::hash_with(&self.clock_key, domain::ISN, t, 0) as u32)
    }

    /// RFC 7323 §7.1: an offset for TSval so that timestamps do not
    /// reveal the clock, keyed by the pair of hosts (as Linux does) and
    /// holding the machine time at the stack's zero: TSval = stack ms +
    /// offset then grows across connections to the same host and across a
    /// restart of the process, which RFC 6191's TIME-WAIT reuse needs.
    pub fn ts_offset(&self, t: &Tuple) -> u32 {
        let pair = Tuple {
            local_port: 0,
            remote_port: 0,
            ..*t
        };
        (Self::hash_with(&self.clock_key, domain::TS_OFFSET, &pair, 0) as u32)
            .wrapping_add(self.base.as_millis() as u32)
    }

    /// RFC 6056 algorithm 3: where to start searching for a free ephemeral
    /// port for this destination.
    pub fn port_offset(&self, local_ip: Ipv4Addr, remote_ip: Ipv4Addr, remote_port: u16) -> u32 {
        let t = Tuple {
            local_ip,
            local_port: 0,
            remote_ip,
            remote_port,
        };
        self.hash(domain::PORT, &t, 0) as u32
    }

    /// RFC 6056 algorithm 1: where to start searching for a free port for
    /// a bind to port 0, the `n`th draw: a keyed hash of a counter, which
    /// no one without the secret can tell from random.
    pub fn port_draw(&self, local_ip: Ipv4Addr, n: u64) -> u32 {
        let t = Tuple {
            local_ip,
            local_port: 0,
            remote_ip: Ipv4Addr::UNSPECIFIED,
            remote_port: 0,
        };
        self.hash(domain::PORT_DRAW, &t, n) as u32
    }

    /// RFC 7739 §5.3: which IPv4 identification counter a datagram from
    /// `src` to `dst` of protocol `proto` takes (a keyed hash of the three,
    /// as Linux's `ip_idents`).
    pub fn ident_bucket(&self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> u64 {
        let t = Tuple {
            local_ip: src,
            local_port: 0,
            remote_ip: dst,
            remote_port: u16::from(proto),
        };
        self.hash(domain::IP_ID, &t, 0)
    }

    /// The starting value of IPv4 identification counter `i`: drawn with
    /// the secret, so that the first values are not guessable either.
    pub fn ident_start(&self, i: u64) -> u16 {
        let t = Tuple {
            local_ip: Ipv4Addr::UNSPECIFIED,
            local_port: 0,
            remote_ip: Ipv4Addr::UNSPECIFIED,
            remote_port: 0,
        };
        self.hash(domain::IP_ID_START, &t, i) as u16
    }

    fn cookie_mac(&self, t: &Tuple, counter: u32, client_isn: u32) -> u32 {
        (self.hash(
            domain::COOKIE,
            t,
            (u64::from(counter) << 32) | u64::from(client_isn),
        ) & 0x00ff_ffff) as u32
    }
}

/// MSS values a cookie can carry (3 bits).
const MSS_TABLE: [u16; 8] = [536, 1220, 1300, 1440, 1460, 4312, 8960, 8960];
/// A cookie's time counter ticks every 64 s and is valid for two ticks.
const COOKIE_PERIOD_S: u64 = 64;

/// What a SYN cookie remembers of the SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CookieState {
    /// Peer MSS, rounded down to a table entry.
    pub mss: u16,
    /// Peer's window-scale shift, if it offered one (needs timestamps).
    pub wscale: Option<u8>,
    /// Peer offered SACK (needs timestamps).
    pub sack: bool,
}

/// Bits of TSval that carry the peer's SYN options when timestamps are on.
pub const TS_COOKIE_BITS: u32 = 5;

impl Keyed {
    /// The initial sequence number of a SYN-ACK sent without state:
    /// `t (5 bits) | mss index (3 bits) | MAC (24 bits)` (RFC 4987 §3.6).
    pub fn cookie(&self, t: &Tuple, client_isn: u32, peer_mss: u16, now: Instant) -> (u32, u16) {
        let counter = ((now.as_micros() / 1_000_000 / COOKIE_PERIOD_S) & 31) as u32;
        let idx = MSS_TABLE
            .iter()
            .rposition(|&m| m <= peer_mss)
            .unwrap_or(0)
            .min(6) as u32;
        let mac = self.cookie_mac(t, counter, client_isn);
        ((counter << 27) | (idx << 24) | mac, MSS_TABLE[idx as usize])
    }

    /// Check the cookie echoed in an ACK (`ack - 1`) for the segment whose
    /// sequence number is `seq` (`client_isn + 1`); returns the MSS.
    pub fn check_cookie(&self, t: &Tuple, cookie: u32, seq: u32, now: Instant) -> Option<u16> {
        let counter = cookie >> 27;
        let idx = ((cookie >> 24) & 7) as usize;
        let now_c = ((now.as_micros() / 1_000_000 / COOKIE_PERIOD_S) & 31) as u32;
        let age = now_c.wrapping_sub(counter) & 31;
        if age > 1 {
            return None;
        }
        let client_isn = seq.wrapping_sub(1);
        (self.cookie_mac(t, counter, client_isn) == cookie & 0x00ff_ffff).then_some(MSS_TABLE[idx])
    }
}

/// Encode the SYN's window scale and SACK into the low bits of TSval.
pub fn ts_encode(tsval: u32, wscale: Option<u8>, sack: bool) -> u32 {
    let ws = u32::from(wscale.map_or(0xf, |w| w.min(14)));
    (tsval & !((1 << TS_COOKIE_BITS) - 1)) | (u32::from(sack) << 4) | ws
}

/// Decode what [`ts_encode`] stored (from the echoed TSecr).
pub fn ts_decode(tsecr: u32) -> (Option<u8>, bool) {
    let ws = (tsecr & 0xf) as u8;
    ((ws != 0xf).then_some(ws), tsecr & 0x10 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn tuple() -> Tuple {
        Tuple {
            local_ip: Ipv4Addr::new(198, 18, 0, 2),
            local_port: 80,
            remote_ip: Ipv4Addr::new(198, 18, 0, 1),
            remote_port: 40000,
        }
    }

    /// RFC 6528 §3: ISN = M + F(4-tuple, secret).
    #[test]
    fn isn_depends_on_tuple_and_time_rfc6528() {
        let k = Keyed::new([7; 16], [7; 16], Duration::ZERO);
        let t = tuple();
        let a = k.isn(&t, Instant::from_micros(0));
        let b = k.isn(&t, Instant::from_micros(400));
        assert_eq!(b.wrapping_sub(a), 100); // M advances every 4 µs
        let mut t2 = t;
        t2.remote_port += 1;
        assert_ne!(k.isn(&t2, Instant::ZERO), a);
        assert_ne!(
            Keyed::new([7; 16], [8; 16], Duration::ZERO).isn(&t, Instant::ZERO),
            a
        );
    }

    /// A process that starts later (its stack's zero is later machine
    /// time) continues the ISN and TSval clocks of an earlier one with the
    /// same clock key, whatever its own secret: a peer that holds the
    /// earlier connection in TIME-WAIT sees a larger ISN and a newer TSval
    /// and accepts the SYN (RFC 6191 §2). TSval offsets are per host pair,
    /// the same for every port.
    #[test]
    fn clocks_continue_across_processes_rfc6191() {
        let t = tuple();
        let first = Keyed::new([1; 16], [9; 16], Duration::from_secs(1000));
        let second = Keyed::new([2; 16], [9; 16], Duration::from_secs(1030));
        // The first stack 29 s into its life, the second just started.
        let late = Instant::from_micros(29_000_000);
        let isn_gap = second
            .isn(&t, Instant::ZERO)
            .wrapping_sub(first.isn(&t, late));
        assert_eq!(isn_gap, 1_000_000 / 4);
        let ts_first = (late.as_millis() as u32).wrapping_add(first.ts_offset(&t));
        let ts_second = second.ts_offset(&t);
        assert_eq!(ts_second.wrapping_sub(ts_first), 1000);
        let mut other_port = t;
        other_port.local_port = 81;
        other_port.remote_port = 50000;
        assert_eq!(first.ts_offset(&other_port), first.ts_offset(&t));
        let mut other_host = t;
        other_host.remote_ip = Ipv4Addr::new(198, 18, 0, 9);
        assert_ne!(first.ts_offset(&other_host), first.ts_offset(&t));
    }

    /// RFC 4987 §3.6: the cookie round trip.
    #[test]
    fn cookie_roundtrip_and_expiry() {
        let k = Keyed::new([1; 16], [1; 16], Duration::ZERO);
        let t = tuple();
        let now = Instant::from_micros(5_000_000_000);
        let (c, mss) = k.cookie(&t, 1000, 1460, now);
        assert_eq!(mss, 1460);
        assert_eq!(k.check_cookie(&t, c, 1001, now), Some(1460));
        // Still valid one period later, not two.
        let later = now + crate::time::Duration::from_secs(64);
        assert_eq!(k.check_cookie(&t, c, 1001, later), Some(1460));
        let much_later = now + crate::time::Duration::from_secs(200);
        assert_eq!(k.check_cookie(&t, c, 1001, much_later), None);
        // Wrong ISN, tuple or forged MAC.
        assert_eq!(k.check_cookie(&t, c, 1002, now), None);
        let mut t2 = t;
        t2.remote_port = 1;
        assert_eq!(k.check_cookie(&t2, c, 1001, now), None);
        assert_eq!(k.check_cookie(&t, c ^ 1, 1001, now), None);
    }

    #[test]
    fn cookie_mss_rounds_down() {
        let k = Keyed::new([1; 16], [1; 16], Duration::ZERO);
        assert_eq!(k.cookie(&tuple(), 0, 1400, Instant::ZERO).1, 1300);
        assert_eq!(k.cookie(&tuple(), 0, 100, Instant::ZERO).1, 536);
        assert_eq!(k.cookie(&tuple(), 0, 9000, Instant::ZERO).1, 8960);
    }

    #[test]
    fn ts_option_bits() {
        let v = ts_encode(0x1234_5678, Some(7), true);
        assert_eq!(ts_decode(v), (Some(7), true));
        assert_eq!(ts_decode(ts_encode(99, None, false)), (None, false));
        assert!(v <= 0x1234_5678);
    }
}
