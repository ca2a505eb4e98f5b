//! Per-connection data held by the core, without copying it.
//!
//! * [`SendQueue`] keeps the buffers the application handed to `send` until
//!   the peer acknowledges them (IX: a transmit is a scatter-gather list the
//!   app keeps immutable until acknowledged). Bytes are copied exactly once,
//!   into the outgoing frame.
//! * [`RecvQueue`] keeps received frames themselves: in-order payload is
//!   read in place until the application calls `recv_done` (IX: zero-copy
//!   receive), and out-of-order frames wait in a sorted list. Overlaps are
//!   resolved by trimming ranges, never by copying or splitting a frame.

use crate::wire::tcp::{SackBlock, SeqNum, MAX_SACK_BLOCKS};
use std::collections::VecDeque;

/// Data accepted from the application and not yet acknowledged.
#[derive(Debug)]
pub struct SendQueue<T> {
    chunks: VecDeque<(T, u32)>,
    /// Bytes of the front chunk already acknowledged.
    head_off: u32,
    /// Bytes held (acknowledged ones excluded).
    len: u32,
    /// Read cursor: (byte offset from head, chunk index, offset in chunk).
    cursor: (u32, u32, u32),
    /// Bytes acknowledged that the application has not been told of yet
    /// ([`SendQueue::take_acked`]; kept here, in what would be this
    /// struct's padding, so a connection's state stays within IX's 512
    /// bytes).
    acked: u32,
}

impl<T> Default for SendQueue<T> {
    fn default() -> Self {
        SendQueue {
            chunks: VecDeque::new(),
            head_off: 0,
            len: 0,
            cursor: (0, 0, 0),
            acked: 0,
        }
    }
}

impl<T: AsRef<[u8]>> SendQueue<T> {
    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Nothing held?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append the first `len` bytes of `buf`.
    pub fn push(&mut self, buf: T, len: usize) {
        debug_assert!(len <= buf.as_ref().len());
        if len == 0 {
            return;
        }
        self.chunks.push_back((buf, len as u32));
        self.len += len as u32;
    }

    /// `n` more bytes were acknowledged, for the application to be told.
    pub fn note_acked(&mut self, n: u32) {
        self.acked = self.acked.saturating_add(n);
    }

    /// The bytes acknowledged since the application was last told.
    pub fn take_acked(&mut self) -> u32 {
        std::mem::take(&mut self.acked)
    }

    /// Release `n` acknowledged bytes from the front (dropping, and so
    /// returning, every buffer fully acknowledged).
    pub fn ack(&mut self, mut n: usize) {
        n = n.min(self.len as usize);
        self.len -= n as u32;
        let mut released_chunks = 0u32;
        let consumed = n as u32;
        while n > 0 {
            let (_, clen) = self.chunks.front().expect("len accounts for chunks");
            let avail = (*clen - self.head_off) as usize;
            if n >= avail {
                n -= avail;
                self.chunks.pop_front();
                self.head_off = 0;
                released_chunks += 1;
            } else {
                self.head_off += n as u32;
                n = 0;
            }
        }
        // Keep the cursor valid relative to the new head.
        let (off, idx, _) = self.cursor;
        if off >= consumed && idx >= released_chunks {
            self.cursor.0 = off - consumed;
            self.cursor.1 = idx - released_chunks;
            if self.cursor.1 == 0 && released_chunks > 0 {
                // In-chunk offset unchanged: head_off only moves within the
                // new front chunk from zero.
            }
        } else {
            self.cursor = (0, 0, self.head_off);
        }
        if self.chunks.is_empty() {
            self.cursor = (0, 0, 0);
        }
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.head_off = 0;
        self.len = 0;
        self.cursor = (0, 0, 0);
    }

    /// Copy `out.len()` bytes starting `offset` bytes after the head into
    /// `out`. The caller keeps `offset + out.len() <= len()`.
    pub fn copy_out(&mut self, offset: usize, out: &mut [u8]) {
        debug_assert!(offset + out.len() <= self.len as usize);
        let offset = offset as u32;
        // Start from the cursor when reading at or past it, else from the head.
        let (mut pos, mut idx, mut in_chunk) = if self.cursor.0 <= offset {
            self.cursor
        } else {
            (0, 0, self.head_off)
        };
        // Walk to `offset`.
        while pos < offset {
            let clen = self.chunks[idx as usize].1;
            let left = clen - in_chunk;
            let step = left.min(offset - pos);
            pos += step;
            in_chunk += step;
            if in_chunk == clen {
                idx += 1;
                in_chunk = 0;
            }
        }
        let mut written = 0usize;
        while written < out.len() {
            let (buf, clen) = &self.chunks[idx as usize];
            let src = &buf.as_ref()[in_chunk as usize..*clen as usize];
            let n = src.len().min(out.len() - written);
            out[written..written + n].copy_from_slice(&src[..n]);
            written += n;
            in_chunk += n as u32;
            pos += n as u32;
            if in_chunk == *clen {
                idx += 1;
                in_chunk = 0;
            }
        }
        self.cursor = (pos, idx, in_chunk);
    }
}

/// A run of payload bytes inside a received frame, and what the frame
/// costs to hold.
#[derive(Debug)]
struct Seg<R> {
    buf: R,
    start: u32,
    end: u32,
    cost: u32,
}

/// An out-of-order run, with its sequence number.
#[derive(Debug)]
struct OooSeg<R> {
    seq: SeqNum,
    seg: Seg<R>,
    /// When it (or a duplicate of it) last arrived, in
    /// [`RecvQueue::arrivals`]: the SACK blocks go most recent first.
    arrived: u32,
}

impl<R> OooSeg<R> {
    fn end_seq(&self) -> SeqNum {
        self.seq + (self.seg.end - self.seg.start) as usize
    }
}

/// Outcome of offering an out-of-order segment.
#[derive(Debug, PartialEq, Eq)]
pub enum OooInsert {
    /// Queued (possibly after trimming others).
    Queued,
    /// Every byte was already queued.
    Duplicate,
    /// The out-of-order list is at its limit (segments or memory); nothing
    /// held was changed.
    Full,
}

/// Received data held for the application.
///
/// Every held frame is charged a *cost* (its length, at least the size of
/// a packet buffer — the caller decides), so a peer sending tiny segments
/// cannot pin more buffers than a peer filling the window legitimately.
#[derive(Debug)]
pub struct RecvQueue<R> {
    ready: VecDeque<Seg<R>>,
    ready_len: u32,
    ready_cost: u32,
    ooo: Vec<OooSeg<R>>,
    ooo_cost: u32,
    /// Out-of-order segments offered so far (wrapping): the clock of
    /// `OooSeg::arrived`, which orders the SACK blocks (RFC 2018 §4).
    arrivals: u32,
    /// In-order bytes the application took out to hold them itself and
    /// has not released ([`RecvQueue::hold`]; in what would be padding,
    /// as [`SendQueue`]'s count of bytes acknowledged).
    held: u32,
}

impl<R> Default for RecvQueue<R> {
    fn default() -> Self {
        RecvQueue {
            ready: VecDeque::new(),
            ready_len: 0,
            ready_cost: 0,
            ooo: Vec::new(),
            ooo_cost: 0,
            arrivals: 0,
            held: 0,
        }
    }
}

impl<R: AsRef<[u8]>> RecvQueue<R> {
    /// Take `n` in-order bytes out (their frames released) for the
    /// application to hold: they count as held until [`release_held`](Self::release_held).
    /// Returns how many were taken.
    pub fn hold(&mut self, n: usize) -> usize {
        let done = self.consume(n);
        self.held += done as u32;
        done
    }

    /// `n` held bytes were read (at most those held); returns how many.
    pub fn release_held(&mut self, n: usize) -> usize {
        let n = n.min(self.held as usize);
        self.held -= n as u32;
        n
    }

    /// Bytes held ([`RecvQueue::hold`]).
    pub fn held(&self) -> usize {
        self.held as usize
    }

    /// In-order bytes not yet released by the application.
    pub fn ready_len(&self) -> usize {
        self.ready_len as usize
    }

    /// Frames holding in-order bytes.
    pub fn ready_segments(&self) -> usize {
        self.ready.len()
    }

    /// Cost of the frames holding in-order bytes.
    pub fn ready_cost(&self) -> usize {
        self.ready_cost as usize
    }

    /// Frames waiting out of order.
    pub fn ooo_segments(&self) -> usize {
        self.ooo.len()
    }

    /// Cost of the frames waiting out of order.
    pub fn ooo_cost(&self) -> usize {
        self.ooo_cost as usize
    }

    /// Out-of-order bytes held.
    pub fn ooo_len(&self) -> usize {
        self.ooo
            .iter()
            .map(|o| (o.seg.end - o.seg.start) as usize)
            .sum()
    }

    /// Append in-order payload `buf[start..end]`; the frame costs `cost`.
    pub fn push_ready(&mut self, buf: R, start: usize, end: usize, cost: usize) {
        if end > start {
            self.ready.push_back(Seg {
                buf,
                start: start as u32,
                end: end as u32,
                cost: cost as u32,
            });
            self.ready_len += (end - start) as u32;
            self.ready_cost += cost as u32;
        }
    }

    /// The in-order bytes, as slices of the frames holding them.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.ready
            .iter()
            .map(|s| &s.buf.as_ref()[s.start as usize..s.end as usize])
    }

    /// Copy up to `out.len()` in-order bytes without releasing them.
    pub fn peek(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for c in self.chunks() {
            let k = c.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&c[..k]);
            n += k;
            if n == out.len() {
                break;
            }
        }
        n
    }

    /// Release `n` in-order bytes (the application is done with them).
    /// Returns the bytes actually released.
    pub fn consume(&mut self, n: usize) -> usize {
        let n = n.min(self.ready_len as usize);
        let mut left = n as u32;
        while left > 0 {
            let front = self
                .ready
                .front_mut()
                .expect("ready_len accounts for segments");
            let len = front.end - front.start;
            if left >= len {
                left -= len;
                self.ready_cost -= front.cost;
                self.ready.pop_front();
            } else {
                front.start += left;
                left = 0;
            }
        }
        self.ready_len -= n as u32;
        n
    }

    /// Queue `buf[start..end]`, which begins at `seq` beyond RCV.NXT and
    /// whose frame costs `cost`. Existing segments it overlaps are trimmed
    /// or dropped, so the list stays sorted and disjoint without splitting
    /// any frame. Refused (`Full`, nothing changed) when the list would hold
    /// more than `max_segments` frames or `max_cost`.
    pub fn insert_ooo(
        &mut self,
        seq: SeqNum,
        buf: R,
        (start, end): (usize, usize),
        cost: usize,
        (max_segments, max_cost): (usize, usize),
    ) -> OooInsert {
        let new_end = seq + (end - start);
        // The most recent arrival leads the SACK option (RFC 2018 §4), even
        // when it brings nothing new.
        self.arrivals = self.arrivals.wrapping_add(1);
        let now = self.arrivals;
        // Fully covered by one existing segment?
        if let Some(o) = self
            .ooo
            .iter_mut()
            .find(|o| o.seq.diff(seq) <= 0 && o.end_seq().diff(new_end) >= 0)
        {
            o.arrived = now;
            return OooInsert::Duplicate;
        }
        let inside = |o: &OooSeg<R>| o.seq.diff(seq) >= 0 && o.end_seq().diff(new_end) <= 0;
        // Decide before touching anything: segments entirely inside the new
        // one go, everything else stays.
        let (gone, gone_cost) = self
            .ooo
            .iter()
            .filter(|o| inside(o))
            .fold((0usize, 0usize), |(n, c), o| {
                (n + 1, c + o.seg.cost as usize)
            });
        if self.ooo.len() - gone >= max_segments
            || self.ooo_cost as usize - gone_cost + cost > max_cost
        {
            return OooInsert::Full;
        }
        self.ooo.retain(|o| !inside(o));
        self.ooo_cost -= gone_cost as u32;
        for o in &mut self.ooo {
            if o.seq.diff(seq) < 0 && o.end_seq().diff(seq) > 0 {
                // o overlaps our head: cut o's tail at `seq`.
                let cut = o.end_seq().diff(seq) as u32;
                o.seg.end -= cut;
            } else if o.seq.diff(new_end) < 0 && o.end_seq().diff(new_end) > 0 {
                // o overlaps our tail: cut o's head at `new_end`.
                let cut = new_end.diff(o.seq) as u32;
                o.seg.start += cut;
                o.seq = new_end;
            }
        }
        let at = self
            .ooo
            .iter()
            .position(|o| o.seq.diff(seq) > 0)
            .unwrap_or(self.ooo.len());
        self.ooo.insert(
            at,
            OooSeg {
                seq,
                seg: Seg {
                    buf,
                    start: start as u32,
                    end: end as u32,
                    cost: cost as u32,
                },
                arrived: now,
            },
        );
        self.ooo_cost += cost as u32;
        OooInsert::Queued
    }

    /// Move out-of-order segments that now continue the stream at
    /// `rcv_nxt` to the ready list; returns the new RCV.NXT.
    pub fn drain_ooo(&mut self, mut rcv_nxt: SeqNum) -> SeqNum {
        let mut taken = 0;
        for o in self.ooo.iter_mut() {
            if o.seq.diff(rcv_nxt) > 0 {
                break;
            }
            taken += 1;
            if o.end_seq().diff(rcv_nxt) > 0 {
                let skip = rcv_nxt.diff(o.seq) as u32;
                o.seg.start += skip;
                o.seq = rcv_nxt;
                rcv_nxt = o.end_seq();
            } else {
                o.seg.end = o.seg.start; // stale: entirely before rcv_nxt
            }
        }
        for o in self.ooo.drain(..taken) {
            self.ooo_cost -= o.seg.cost;
            let len = o.seg.end - o.seg.start;
            if len > 0 {
                self.ready_len += len;
                self.ready_cost += o.seg.cost;
                self.ready.push_back(o.seg);
            }
        }
        rcv_nxt
    }

    /// SACK blocks describing the out-of-order data, as many as fit in
    /// `out`, the most recently arrived first (RFC 2018 §4): the first
    /// block holds the segment that came last, and the others repeat the
    /// blocks that led the SACK options before it, so a sender that lost
    /// an ACK, or took several arrivals in one, still hears of every
    /// block. Returns the number written.
    pub fn sack_blocks(&self, out: &mut [SackBlock]) -> usize {
        // Merge contiguous segments into blocks on the fly, each as recent
        // as its most recent segment; keep the most recent few, newest
        // first (insertion into a short sorted array).
        let mut best = [(SackBlock::default(), 0u32); MAX_SACK_BLOCKS];
        let want = out.len().min(best.len());
        if want == 0 {
            return 0;
        }
        // Age relative to the newest arrival (the clock wraps).
        let age = |t: u32| self.arrivals.wrapping_sub(t);
        let mut kept = 0usize;
        let mut put = |b: SackBlock, at: u32| {
            let mut i = kept;
            while i > 0 && age(best[i - 1].1) > age(at) {
                i -= 1;
            }
            if i == want {
                return; // older than every block kept
            }
            // Make room at `i`, dropping the oldest when full.
            let last = kept.min(want - 1);
            best.copy_within(i..last, i + 1);
            best[i] = (b, at);
            kept = (kept + 1).min(want);
        };
        let mut cur: Option<(SackBlock, u32)> = None;
        for o in &self.ooo {
            let (s, e) = (o.seq, o.end_seq());
            cur = match cur {
                Some((mut b, at)) if b.right == s => {
                    b.right = e;
                    Some((
                        b,
                        if age(o.arrived) < age(at) {
                            o.arrived
                        } else {
                            at
                        },
                    ))
                }
                Some((b, at)) => {
                    put(b, at);
                    Some((SackBlock { left: s, right: e }, o.arrived))
                }
                None => Some((SackBlock { left: s, right: e }, o.arrived)),
            };
        }
        if let Some((b, at)) = cur {
            put(b, at);
        }
        for (o, (b, _)) in out.iter_mut().zip(&best[..kept]) {
            *o = *b;
        }
        kept
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.ready.clear();
        self.ready_len = 0;
        self.ready_cost = 0;
        self.ooo.clear();
        self.ooo_cost = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn send_queue_copy_and_ack() {
        let mut q = SendQueue::default();
        q.push(v("hello "), 6);
        q.push(v("world!xxx"), 6);
        assert_eq!(q.len(), 12);
        let mut out = [0u8; 5];
        q.copy_out(4, &mut out);
        assert_eq!(&out, b"o wor");
        q.ack(3);
        let mut out = [0u8; 9];
        q.copy_out(0, &mut out);
        assert_eq!(&out, b"lo world!");
        q.ack(6);
        let mut out = [0u8; 3];
        q.copy_out(0, &mut out);
        assert_eq!(&out, b"ld!");
        q.ack(100);
        assert!(q.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn send_queue_matches_model(
            chunks in proptest::collection::vec(1usize..50, 1..20),
            ops in proptest::collection::vec((0u8..2, 0usize..80, 0usize..40), 1..50))
        {
            let mut q = SendQueue::default();
            let mut model: Vec<u8> = vec![];
            let mut n = 0u8;
            for c in chunks {
                let buf: Vec<u8> = (0..c + 3).map(|_| { n = n.wrapping_add(1); n }).collect();
                model.extend_from_slice(&buf[..c]);
                q.push(buf, c);
            }
            for (op, a, b) in ops {
                if op == 0 {
                    let off = a.min(model.len());
                    let len = b.min(model.len() - off);
                    let mut out = vec![0u8; len];
                    q.copy_out(off, &mut out);
                    proptest::prop_assert_eq!(&out[..], &model[off..off + len]);
                } else {
                    let k = a.min(model.len()) / 3;
                    q.ack(k);
                    model.drain(..k);
                }
                proptest::prop_assert_eq!(q.len(), model.len());
            }
        }
    }

    #[test]
    fn recv_queue_reassembles() {
        let mut q: RecvQueue<Vec<u8>> = RecvQueue::default();
        let mut nxt = SeqNum(100);
        // bytes 100..105 "abcde", 105..110 "fghij", 110..115 "klmno"
        assert_eq!(
            q.insert_ooo(SeqNum(110), v("__klmno"), (2, 7), 1, (8, usize::MAX)),
            OooInsert::Queued
        );
        assert_eq!(
            q.insert_ooo(SeqNum(105), v("fghij"), (0, 5), 1, (8, usize::MAX)),
            OooInsert::Queued
        );
        let mut blocks = [SackBlock::default(); 4];
        assert_eq!(q.sack_blocks(&mut blocks), 1);
        assert_eq!(
            blocks[0],
            SackBlock {
                left: SeqNum(105),
                right: SeqNum(115)
            }
        );
        q.push_ready(v("abcde"), 0, 5, 5);
        nxt += 5;
        nxt = q.drain_ooo(nxt);
        assert_eq!(nxt, SeqNum(115));
        let mut out = [0u8; 15];
        assert_eq!(q.peek(&mut out), 15);
        assert_eq!(&out, b"abcdefghijklmno");
        assert_eq!(q.consume(7), 7);
        let joined: Vec<u8> = q.chunks().flatten().copied().collect();
        assert_eq!(joined, b"hijklmno");
    }

    #[test]
    fn ooo_overlaps_are_trimmed() {
        let mut q: RecvQueue<Vec<u8>> = RecvQueue::default();
        q.insert_ooo(SeqNum(10), v("0123456789"), (0, 10), 1, (8, usize::MAX)); // 10..20
        assert_eq!(
            q.insert_ooo(SeqNum(12), v("23"), (0, 2), 1, (8, usize::MAX)),
            OooInsert::Duplicate
        );
        q.insert_ooo(SeqNum(15), v("56789ABCDE"), (0, 10), 1, (8, usize::MAX)); // 15..25 trims first to 10..15
        q.insert_ooo(SeqNum(30), v("UVWXY"), (0, 5), 1, (8, usize::MAX)); // 30..35
        q.insert_ooo(SeqNum(28), v("STUVWXYZ[]"), (0, 10), 1, (8, usize::MAX)); // 28..38 swallows 30..35
        assert_eq!(q.ooo_segments(), 3);
        let nxt = q.drain_ooo(SeqNum(10));
        assert_eq!(nxt, SeqNum(25));
        let joined: Vec<u8> = q.chunks().flatten().copied().collect();
        assert_eq!(joined, b"0123456789ABCDE");
        let mut blocks = [SackBlock::default(); 4];
        assert_eq!(q.sack_blocks(&mut blocks), 1);
        assert_eq!(
            blocks[0],
            SackBlock {
                left: SeqNum(28),
                right: SeqNum(38)
            }
        );
    }

    #[test]
    fn ooo_limit() {
        let mut q: RecvQueue<Vec<u8>> = RecvQueue::default();
        assert_eq!(
            q.insert_ooo(SeqNum(10), v("a"), (0, 1), 1, (1, usize::MAX)),
            OooInsert::Queued
        );
        assert_eq!(
            q.insert_ooo(SeqNum(20), v("b"), (0, 1), 1, (1, usize::MAX)),
            OooInsert::Full
        );
    }

    #[test]
    fn sack_first_block_is_most_recent() {
        // RFC 2018 §4: the first SACK block MUST specify the contiguous block
        // containing the segment which triggered this ACK.
        let mut q: RecvQueue<Vec<u8>> = RecvQueue::default();
        q.insert_ooo(SeqNum(10), v("a"), (0, 1), 1, (8, usize::MAX));
        q.insert_ooo(SeqNum(30), v("b"), (0, 1), 1, (8, usize::MAX));
        q.insert_ooo(SeqNum(20), v("c"), (0, 1), 1, (8, usize::MAX));
        let mut blocks = [SackBlock::default(); 3];
        assert_eq!(q.sack_blocks(&mut blocks), 3);
        assert_eq!(blocks[0].left, SeqNum(20));
        assert_eq!(blocks[1].left, SeqNum(30));
        assert_eq!(blocks[2].left, SeqNum(10));
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;

    proptest::proptest! {
        /// Segments of a byte stream arriving in any order, duplicated and
        /// overlapping, reassemble into exactly the stream.
        #[test]
        fn reassembly_matches_stream(
            segs in proptest::collection::vec((0usize..2000, 1usize..300, 0usize..8), 1..80),
            base in proptest::num::u32::ANY)
        {
            let stream: Vec<u8> = (0..2400u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            let mut q: RecvQueue<Vec<u8>> = RecvQueue::default();
            let isn = SeqNum(base);
            let mut nxt = isn;
            for (start, len, pad) in segs {
                let end = (start + len).min(stream.len());
                // A frame with `pad` header bytes before the payload.
                let mut frame = vec![0xEE; pad];
                frame.extend_from_slice(&stream[start..end]);
                let seq = isn + start;
                let (mut off, mut s) = (pad, seq);
                let skip = nxt.since(s);
                if skip >= end - start { continue; }
                off += skip;
                s += skip;
                let plen = frame.len() - off;
                if s == nxt {
                    q.push_ready(frame, off, off + plen, 1);
                    nxt += plen;
                    nxt = q.drain_ooo(nxt);
                } else {
                    q.insert_ooo(s, frame, (off, off + plen), 1, (1000, usize::MAX));
                }
            }
            let got: Vec<u8> = q.chunks().flatten().copied().collect();
            let n = nxt.since(isn);
            proptest::prop_assert_eq!(got.len(), n);
            proptest::prop_assert_eq!(&got[..], &stream[..n]);
        }
    }
}
