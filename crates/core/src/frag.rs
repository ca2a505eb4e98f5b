//! IPv4 reassembly (RFC 791 §3.2, RFC 1122 §3.3.2) and the arithmetic of
//! fragmentation.
//!
//! Sans-I/O like the rest of the core: the stack hands each fragment of a
//! datagram for us to [`Reassembly::insert`], which answers with the whole
//! payload once every piece is there, and calls [`Reassembly::expire`]
//! from its timers. Bounded: at most [`MAX_QUEUES`] datagrams in progress,
//! [`MAX_PIECES`] fragments each, and `memory` bytes (payload plus
//! [`PIECE_COST`] per fragment) across all of them. A fragment that
//! overlaps another of its datagram other than as an exact duplicate, or
//! disagrees with it about where the datagram ends, discards the whole
//! datagram, as Linux does (no fragment can then rewrite bytes another
//! already supplied, RFC 5722's rule carried over to IPv4).

use crate::counters::DropReason;
use crate::time::{Duration, Instant};
use crate::wire::ipv4::Protocol;
use std::net::Ipv4Addr;

/// Most datagrams reassembled at once.
pub const MAX_QUEUES: usize = 256;
/// Most fragments of one datagram (a 64 KiB datagram over a 576-byte MTU
/// is 117).
pub const MAX_PIECES: usize = 512;
/// What each fragment costs besides its payload, against `memory`.
pub const PIECE_COST: usize = 64;
/// Largest payload of an IPv4 datagram with a 20-byte header.
pub const MAX_PAYLOAD: usize = 65535 - 20;
/// Zero bytes before the payload in a reassembled datagram's buffer: room
/// for the caller to write an IPv4 header.
pub const HEAD_ROOM: usize = 20;

/// The bytes of a datagram's first fragment an ICMP error quotes: its IP
/// header and the first 8 bytes of its payload (RFC 792), at most 68.
pub type Quote = ([u8; 68], u8);

struct Piece {
    start: usize,
    data: Vec<u8>,
}

impl Piece {
    fn end(&self) -> usize {
        self.start + self.data.len()
    }
}

struct Queue {
    src: Ipv4Addr,
    proto: Protocol,
    ident: u16,
    deadline: Instant,
    /// Sorted by `start`, never overlapping.
    pieces: Vec<Piece>,
    /// Payload length, once the last fragment came.
    total: Option<usize>,
    cost: usize,
    /// From fragment zero, for the ICMP time-exceeded message.
    quote: Option<Quote>,
}

/// One fragment as the stack parsed it.
pub struct Fragment<'a> {
    /// Source address.
    pub src: Ipv4Addr,
    /// Protocol of the datagram.
    pub proto: Protocol,
    /// Identification field.
    pub ident: u16,
    /// Offset of `data` in the datagram's payload, in bytes.
    pub offset: usize,
    /// More Fragments flag.
    pub more: bool,
    /// This fragment's payload.
    pub data: &'a [u8],
    /// The fragment's IP header and payload (quoted by an ICMP error if
    /// this is fragment zero).
    pub packet: &'a [u8],
}

/// What became of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Kept; the datagram is not complete yet.
    Held,
    /// The datagram is complete: [`HEAD_ROOM`] zero bytes, then its whole
    /// payload.
    Done(Vec<u8>),
    /// Dropped for this reason (with its datagram for the overlap reason).
    Dropped(DropReason),
}

/// Datagrams in reassembly.
pub struct Reassembly {
    queues: Vec<Queue>,
    held: usize,
    memory: usize,
    timeout: Duration,
}

impl Reassembly {
    /// Hold at most `memory` bytes; give each datagram `timeout` from its
    /// first fragment.
    pub fn new(memory: usize, timeout: Duration) -> Reassembly {
        Reassembly {
            queues: Vec::new(),
            held: 0,
            memory,
            timeout,
        }
    }

    /// Datagrams in progress.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Nothing in progress?
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Bytes held, overhead included.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The earliest deadline ([`Instant::NEVER`] when idle).
    pub fn deadline(&self) -> Instant {
        self.queues
            .iter()
            .map(|q| q.deadline)
            .min()
            .unwrap_or(Instant::NEVER)
    }

    /// Take one fragment.
    pub fn insert(&mut self, now: Instant, f: &Fragment<'_>) -> Outcome {
        let start = f.offset;
        let end = start + f.data.len();
        // RFC 791 §3.1: every fragment but the last carries a multiple of 8
        // bytes, and no datagram is longer than 65535.
        if end > MAX_PAYLOAD || (f.more && (f.data.is_empty() || !f.data.len().is_multiple_of(8))) {
            return Outcome::Dropped(DropReason::Ipv4FragMalformed);
        }
        let qi = match self
            .queues
            .iter()
            .position(|q| q.src == f.src && q.proto == f.proto && q.ident == f.ident)
        {
            Some(i) => i,
            None => {
                if self.queues.len() >= MAX_QUEUES
                    || self.held + f.data.len() + PIECE_COST > self.memory
                {
                    return Outcome::Dropped(DropReason::Ipv4FragNoRoom);
                }
                self.queues.push(Queue {
                    src: f.src,
                    proto: f.proto,
                    ident: f.ident,
                    deadline: now + self.timeout,
                    pieces: Vec::new(),
                    total: None,
                    cost: 0,
                    quote: None,
                });
                self.queues.len() - 1
            }
        };
        let q = &mut self.queues[qi];
        // Where the datagram ends must not move once known, and no piece may
        // lie beyond it.
        let last = q.pieces.last().map_or(0, Piece::end);
        let conflict = match (q.total, f.more) {
            (Some(t), false) => t != end,
            (Some(t), true) => end > t,
            (None, false) => last > end,
            (None, true) => false,
        };
        // Sorted and disjoint: the pieces that could touch [start, end).
        let at = q.pieces.partition_point(|p| p.end() <= start);
        let dup = q
            .pieces
            .get(at)
            .is_some_and(|p| p.start == start && p.end() == end);
        let overlap = !dup && q.pieces.get(at).is_some_and(|p| p.start < end);
        if conflict || overlap || (dup && q.pieces[at].data != f.data) {
            self.remove(qi);
            return Outcome::Dropped(DropReason::Ipv4FragOverlap);
        }
        if dup {
            return Outcome::Dropped(DropReason::Ipv4FragDuplicate);
        }
        let cost = f.data.len() + PIECE_COST;
        if q.pieces.len() >= MAX_PIECES || self.held + cost > self.memory {
            return Outcome::Dropped(DropReason::Ipv4FragNoRoom);
        }
        q.pieces.insert(
            at,
            Piece {
                start,
                data: f.data.to_vec(),
            },
        );
        q.cost += cost;
        self.held += cost;
        if !f.more {
            q.total = Some(end);
        }
        if start == 0 {
            let ihl = f.packet.first().map_or(20, |b| usize::from(b & 0x0f) * 4);
            let n = f.packet.len().min(ihl + 8).min(68);
            let mut o = [0u8; 68];
            o[..n].copy_from_slice(&f.packet[..n]);
            q.quote = Some((o, n as u8));
        }
        let Some(total) = q.total else {
            return Outcome::Held;
        };
        // Complete when the pieces, in order, leave no hole up to the end.
        let mut next = 0;
        for p in &q.pieces {
            if p.start != next {
                return Outcome::Held;
            }
            next = p.end();
        }
        if next != total {
            return Outcome::Held;
        }
        let q = self.remove(qi);
        let mut out = Vec::with_capacity(HEAD_ROOM + total);
        out.resize(HEAD_ROOM, 0);
        for p in q.pieces {
            out.extend_from_slice(&p.data);
        }
        Outcome::Done(out)
    }

    /// Discard every datagram whose time is up (RFC 1122 §3.3.2: "the
    /// partially-reassembled datagram MUST be discarded"); for each that
    /// had its fragment zero, `quotes` gets the source and the quote for
    /// the ICMP time-exceeded message the same section requires. Returns
    /// how many were discarded.
    pub fn expire(&mut self, now: Instant, quotes: &mut Vec<(Ipv4Addr, Quote)>) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.queues.len() {
            if self.queues[i].deadline <= now {
                let q = self.remove(i);
                if let Some(quote) = q.quote {
                    quotes.push((q.src, quote));
                }
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }

    fn remove(&mut self, i: usize) -> Queue {
        // Order does not matter: lookups scan, deadlines take the minimum.
        let q = self.queues.swap_remove(i);
        self.held -= q.cost;
        q
    }
}

/// The payload bytes each fragment but the last carries for this MTU: the
/// room after a 20-byte header, rounded down to a multiple of 8 (RFC 791).
pub fn fragment_payload(mtu: u16) -> usize {
    (usize::from(mtu) - 20) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

    fn frag(ident: u16, offset: usize, more: bool, data: &[u8]) -> Fragment<'_> {
        Fragment {
            src: SRC,
            proto: Protocol::Udp,
            ident,
            offset,
            more,
            data,
            packet: data,
        }
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 256) as u8).collect()
    }

    fn headed(p: &[u8]) -> Vec<u8> {
        let mut v = vec![0; HEAD_ROOM];
        v.extend_from_slice(p);
        v
    }

    fn r() -> Reassembly {
        Reassembly::new(4 << 20, Duration::from_secs(30))
    }

    #[test]
    fn in_order_and_reversed_pieces_give_the_datagram() {
        let p = payload(4000);
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let mut r = r();
            let pieces = [(0, 1480), (1480, 2960), (2960, 4000)];
            let mut out = None;
            for (k, &i) in order.iter().enumerate() {
                let (s, e) = pieces[i];
                let o = r.insert(Instant::ZERO, &frag(9, s, e != 4000, &p[s..e]));
                if k < 2 {
                    assert_eq!(o, Outcome::Held);
                } else {
                    out = Some(o);
                }
            }
            assert_eq!(out, Some(Outcome::Done(headed(&p))));
            assert!(r.is_empty());
            assert_eq!(r.held(), 0);
        }
    }

    /// RFC 791 §3.1: fragments other than the last carry multiples of 8
    /// bytes; a datagram ends by 65535.
    #[test]
    fn malformed_fragments_are_dropped_alone() {
        let mut r = r();
        let d = [0u8; 12];
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 0, true, &d)),
            Outcome::Dropped(DropReason::Ipv4FragMalformed)
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 65512, false, &d)),
            Outcome::Dropped(DropReason::Ipv4FragMalformed)
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 8, true, &[])),
            Outcome::Dropped(DropReason::Ipv4FragMalformed)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn an_exact_duplicate_is_ignored_and_an_overlap_discards_the_datagram() {
        let p = payload(24);
        let mut r = r();
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 0, true, &p[..8])),
            Outcome::Held
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 0, true, &p[..8])),
            Outcome::Dropped(DropReason::Ipv4FragDuplicate)
        );
        // Same place, other bytes: an attempt to rewrite.
        let mut other = p[..8].to_vec();
        other[0] ^= 1;
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 0, true, &other)),
            Outcome::Dropped(DropReason::Ipv4FragOverlap)
        );
        assert!(r.is_empty());
        assert_eq!(r.held(), 0);
        // A partial overlap.
        assert_eq!(
            r.insert(Instant::ZERO, &frag(2, 0, true, &p[..16])),
            Outcome::Held
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(2, 8, false, &p[8..])),
            Outcome::Dropped(DropReason::Ipv4FragOverlap)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn the_end_may_not_move() {
        let p = payload(32);
        let mut r = r();
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 16, false, &p[16..])),
            Outcome::Held
        );
        // A piece beyond the end.
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 32, true, &p[..8])),
            Outcome::Dropped(DropReason::Ipv4FragOverlap)
        );
        assert!(r.is_empty());
        // A second last fragment that ends elsewhere.
        assert_eq!(
            r.insert(Instant::ZERO, &frag(2, 16, false, &p[16..])),
            Outcome::Held
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(2, 8, false, &p[8..16])),
            Outcome::Dropped(DropReason::Ipv4FragOverlap)
        );
        // A last fragment before pieces already held.
        assert_eq!(
            r.insert(Instant::ZERO, &frag(3, 16, true, &p[16..])),
            Outcome::Held
        );
        assert_eq!(
            r.insert(Instant::ZERO, &frag(3, 0, false, &p[..8])),
            Outcome::Dropped(DropReason::Ipv4FragOverlap)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn datagrams_are_told_apart_by_source_protocol_and_ident() {
        let p = payload(16);
        let mut r = r();
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 0, true, &p[..8])),
            Outcome::Held
        );
        let mut f = frag(1, 8, false, &p[8..]);
        f.proto = Protocol::Icmp;
        assert_eq!(r.insert(Instant::ZERO, &f), Outcome::Held);
        f.src = Ipv4Addr::new(198, 18, 0, 9);
        f.proto = Protocol::Udp;
        assert_eq!(r.insert(Instant::ZERO, &f), Outcome::Held);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r.insert(Instant::ZERO, &frag(1, 8, false, &p[8..])),
            Outcome::Done(headed(&p))
        );
        assert_eq!(r.len(), 2);
    }

    /// RFC 1122 §3.3.2: a datagram not complete in time MUST be discarded,
    /// and a time-exceeded message sent if fragment zero came.
    #[test]
    fn time_up_discards_and_quotes_fragment_zero() {
        let p = payload(16);
        let mut r = r();
        let t0 = Instant::from_millis(5);
        assert_eq!(r.insert(t0, &frag(1, 0, true, &p[..8])), Outcome::Held);
        assert_eq!(r.insert(t0, &frag(2, 8, false, &p[8..])), Outcome::Held);
        assert_eq!(r.deadline(), t0 + Duration::from_secs(30));
        let mut q = Vec::new();
        assert_eq!(r.expire(t0 + Duration::from_secs(29), &mut q), 0);
        assert_eq!(r.expire(t0 + Duration::from_secs(30), &mut q), 2);
        assert_eq!(q.len(), 1, "only the datagram whose fragment zero came");
        assert_eq!(&q[0].1 .0[..8], &p[..8]);
        assert!(r.is_empty());
        assert_eq!(r.held(), 0);
        assert_eq!(r.deadline(), Instant::NEVER);
    }

    #[test]
    fn memory_and_queue_limits_hold() {
        let mut r = Reassembly::new(3 * (1480 + PIECE_COST), Duration::from_secs(30));
        let p = payload(1480);
        for i in 0..3 {
            assert_eq!(
                r.insert(Instant::ZERO, &frag(i, 0, true, &p)),
                Outcome::Held
            );
        }
        assert_eq!(
            r.insert(Instant::ZERO, &frag(9, 0, true, &p)),
            Outcome::Dropped(DropReason::Ipv4FragNoRoom)
        );
        assert_eq!(r.len(), 3);
        let mut r = Reassembly::new(usize::MAX, Duration::from_secs(30));
        for i in 0..MAX_QUEUES as u16 {
            assert_eq!(
                r.insert(Instant::ZERO, &frag(i, 0, true, &p[..8])),
                Outcome::Held
            );
        }
        assert_eq!(
            r.insert(Instant::ZERO, &frag(u16::MAX, 0, true, &p[..8])),
            Outcome::Dropped(DropReason::Ipv4FragNoRoom)
        );
    }

    proptest::proptest! {
        /// Any cut of a datagram into pieces of multiples of 8, delivered
        /// in any order with any duplicates, gives back exactly the
        /// datagram, once, and frees everything it held.
        #[test]
        fn any_order_and_duplicates_reassemble(
            len in 1usize..20_000,
            cuts in proptest::collection::vec(1usize..300, 1..40),
            order in proptest::collection::vec(proptest::prelude::any::<u16>(), 1..80),
        ) {
            let p = payload(len);
            let mut bounds = vec![0];
            for c in cuts {
                let next = bounds.last().unwrap() + c * 8;
                if next >= len { break; }
                bounds.push(next);
            }
            bounds.push(len);
            let pieces: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
            // Every piece once, in an order the strategy picked, with
            // repeats of earlier ones between them.
            let mut seq: Vec<usize> = (0..pieces.len()).collect();
            for (i, o) in order.iter().enumerate() {
                let j = usize::from(*o) % seq.len();
                let n = seq.len();
                if i % 2 == 0 { seq.swap(i % n, j); } else { let k = seq[j]; seq.insert(j, k); }
            }
            let mut r = r();
            let mut done = 0;
            let mut seen = vec![false; pieces.len()];
            for &i in &seq {
                let (s, e) = pieces[i];
                let out = r.insert(Instant::ZERO, &frag(1, s, e != len, &p[s..e]));
                let first_time = !seen[i];
                seen[i] = true;
                match out {
                    Outcome::Done(v) => { proptest::prop_assert_eq!(&v[HEAD_ROOM..], &p[..]); done += 1; }
                    Outcome::Held => proptest::prop_assert!(first_time),
                    // A repeat after completion starts a new datagram, so
                    // only repeats before it are duplicates.
                    Outcome::Dropped(d) => proptest::prop_assert_eq!(d, DropReason::Ipv4FragDuplicate),
                }
                if done == 1 { break; }
            }
            proptest::prop_assert_eq!(done, 1);
            proptest::prop_assert!(r.is_empty());
            proptest::prop_assert_eq!(r.held(), 0);
        }

        /// Arbitrary fragments never panic, and the memory held is what
        /// the datagrams in progress hold.
        #[test]
        fn arbitrary_fragments_keep_the_books(
            frags in proptest::collection::vec((0u16..4, 0usize..8200, proptest::prelude::any::<bool>(), 0usize..3000), 0..60),
        ) {
            let mut r = Reassembly::new(64 << 10, Duration::from_secs(30));
            let data = payload(3000);
            for (t, (ident, off8, more, n)) in frags.into_iter().enumerate() {
                let _ = r.insert(Instant::from_millis(t as u64 * 1000), &frag(ident, off8 * 8, more, &data[..n]));
                let held: usize = r.queues.iter().map(|q| q.cost).sum();
                proptest::prop_assert_eq!(held, r.held());
                proptest::prop_assert!(r.held() <= 64 << 10);
                for q in &r.queues {
                    for w in q.pieces.windows(2) {
                        proptest::prop_assert!(w[0].end() <= w[1].start);
                    }
                }
            }
            let mut quotes = Vec::new();
            r.expire(Instant::from_millis(100_000), &mut quotes);
            proptest::prop_assert!(r.is_empty());
            proptest::prop_assert_eq!(r.held(), 0);
        }
    }

    #[test]
    fn fragment_payloads_are_multiples_of_8() {
        assert_eq!(fragment_payload(1500), 1480);
        assert_eq!(fragment_payload(576), 552);
        assert_eq!(fragment_payload(1006), 984);
    }
}
