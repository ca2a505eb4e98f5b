//! The transmission records: SACK scoreboard and RACK loss detection
//! (RFC 2018, RFC 6675, RFC 8985 §6).
//!
//! Every segment sent and not yet cumulatively acknowledged has a record:
//! where it ends (the start is where the previous record ends, the first
//! starting at SND.UNA), when it was last (re)transmitted, and whether it is
//! SACKed, marked lost, or was retransmitted. As in Linux, the SACK
//! scoreboard is these per-segment marks, so it never forgets a block and
//! costs nothing when there is no loss. The records give
//!
//! * RTT samples that obey Karn's rule without a separate timer (a record
//!   never retransmitted measures its own round trip, RFC 6298 §3);
//! * RFC 6675 `IsLost`: more than (DupThresh−1)·SMSS bytes, or DupThresh
//!   discontiguous runs, SACKed above a segment;
//! * RACK: a segment sent before the most recently delivered one, and not
//!   delivered itself within an RTT plus a reordering window, is lost —
//!   whatever the number of duplicate ACKs. This finds lost
//!   retransmissions, losses in small windows and tail losses that the
//!   duplicate-ACK rules cannot;
//! * the bytes in flight (`pipe`): sent, neither SACKed nor marked lost.
//!
//! Times are microseconds in a wrapping `u32` (differences are only taken
//! between times less than an hour apart).

use crate::wire::tcp::{SackBlock, SeqNum};
use std::collections::VecDeque;

/// RFC 6675 DupThresh.
pub const DUP_THRESH: u32 = 3;

/// Flags of a record.
mod f {
    pub const SACKED: u8 = 1 << 0;
    pub const LOST: u8 = 1 << 1;
    pub const RETRANS: u8 = 1 << 2;
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    end: SeqNum,
    xmit: u32,
    flags: u8,
}

/// A range of sequence space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: SeqNum,
    /// One past the last byte.
    pub end: SeqNum,
    /// Retransmitted at least once.
    pub retransmitted: bool,
}

/// Microseconds, wrapping: is `a` after `b`?
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The records of one connection and its RACK state.
#[derive(Debug, Default)]
pub struct RtxRecords {
    recs: VecDeque<Rec>,
    /// Records marked SACKed / retransmitted / lost (to skip the loss scans
    /// when there is nothing to find).
    n_sacked: u32,
    n_rtx: u32,
    n_lost: u32,
    /// RACK.xmit_ts / RACK.end_seq: the most recently sent segment known
    /// delivered.
    rack_xmit: u32,
    rack_end: SeqNum,
    /// RACK.rtt: the RTT of that segment, µs (0: none yet).
    rack_rtt: u32,
    /// Smallest RTT seen, µs (0: none yet).
    min_rtt: u32,
    /// RACK.fack (RFC 8985 §6.2 step 3): the highest end SACKed, while
    /// anything is (else the cumulative ACK is the highest delivered).
    fack: SeqNum,
}

/// What an acknowledgment did to the records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AckOutcome {
    /// An RTT sample from a record never retransmitted (Karn's rule), µs.
    pub rtt_sample: Option<u32>,
    /// Bytes newly SACKed by this ACK.
    pub newly_sacked: usize,
    /// A segment never retransmitted was delivered (cumulatively or by a
    /// SACK) below one delivered before it: the path reorders (RFC 8985
    /// §6.2 step 3, `RACK.reordering_seen`).
    pub reordered: bool,
}

impl RtxRecords {
    /// Forget everything (connection gone).
    pub fn clear(&mut self) {
        self.recs.clear();
        self.n_sacked = 0;
        self.n_rtx = 0;
        self.n_lost = 0;
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// None held?
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Is anything SACKed?
    pub fn any_sacked(&self) -> bool {
        self.n_sacked > 0
    }

    /// Is anything marked lost (and not retransmitted since)?
    pub fn any_lost(&self) -> bool {
        self.n_lost > 0
    }

    /// The smallest RTT seen, µs (0 before any sample).
    pub fn min_rtt(&self) -> u32 {
        self.min_rtt
    }

    /// Records SACKed (RACK.segs_sacked; records split at block edges,
    /// so a segment may count more than once).
    pub fn sacked(&self) -> u32 {
        self.n_sacked
    }

    /// Records retransmitted and not yet cumulatively acknowledged.
    pub fn retransmitted(&self) -> u32 {
        self.n_rtx
    }

    /// Was any of `[l, r)` (above SND.UNA `una`) retransmitted?
    pub fn any_retransmitted(&self, una: SeqNum, l: SeqNum, r: SeqNum) -> bool {
        if self.n_rtx == 0 {
            return false;
        }
        let mut start = una;
        for rec in &self.recs {
            let s = start;
            start = rec.end;
            if s.diff(r) >= 0 {
                break;
            }
            if rec.end.diff(l) > 0 && rec.flags & f::RETRANS != 0 {
                return true;
            }
        }
        false
    }

    /// `[s, e)` was just sent at `now`. New data (`s` at the old SND.MAX)
    /// appends a record; a retransmission restamps the records it covers,
    /// splitting at its edges, and clears their lost marks.
    pub fn on_send(&mut self, una: SeqNum, s: SeqNum, e: SeqNum, max_before: SeqNum, now: u32) {
        if e.diff(s) <= 0 {
            return;
        }
        if s.diff(max_before) >= 0 {
            self.recs.push_back(Rec {
                end: e,
                xmit: now,
                flags: 0,
            });
            return;
        }
        if e.diff(max_before) > 0 {
            // Old data and new in one segment (a resend after a timeout
            // that reaches past SND.MAX): a record for the new part.
            self.on_send(una, s, max_before, max_before, now);
            self.recs.push_back(Rec {
                end: e,
                xmit: now,
                flags: 0,
            });
            return;
        }
        // Retransmission: split at `s` and `e` so records align, then mark.
        self.split_at(una, s);
        self.split_at(una, e);
        let mut start = una;
        for r in self.recs.iter_mut() {
            if start.diff(e) >= 0 {
                break;
            }
            if start.diff(s) >= 0 {
                r.xmit = now;
                if r.flags & f::RETRANS == 0 {
                    self.n_rtx += 1;
                }
                if r.flags & f::LOST != 0 {
                    self.n_lost -= 1;
                }
                r.flags = (r.flags | f::RETRANS) & !f::LOST;
            }
            start = r.end;
        }
    }

    /// Split the record containing `at` (strictly inside) into two.
    fn split_at(&mut self, una: SeqNum, at: SeqNum) {
        let mut start = una;
        for i in 0..self.recs.len() {
            let r = self.recs[i];
            if at.diff(r.end) < 0 {
                if at.diff(start) > 0 {
                    self.recs.insert(i, Rec { end: at, ..r });
                    if r.flags & f::SACKED != 0 {
                        self.n_sacked += 1;
                    }
                    if r.flags & f::RETRANS != 0 {
                        self.n_rtx += 1;
                    }
                    if r.flags & f::LOST != 0 {
                        self.n_lost += 1;
                    }
                }
                return;
            }
            start = r.end;
        }
    }

    /// An ACK arrived at `now`: the cumulative ACK is `ack`, at or above
    /// SND.UNA and at most `max` (SND.MAX), with SACK `blocks`. Blocks
    /// outside `(ack, max]` are ignored (RFC 2018 §8, RFC 6675 §5).
    /// Updates the delivered marks and RACK's view of the latest delivery.
    pub fn on_ack(
        &mut self,
        ack: SeqNum,
        blocks: &[SackBlock],
        max: SeqNum,
        now: u32,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        let mut newest: Option<Rec> = None;
        // RFC 8985 §6.2 step 3: RACK.fack before this ACK, if anything
        // above the cumulative ACK had been delivered (with nothing
        // SACKed, the old cumulative ACK is the highest delivered, and no
        // record can be below it). Records this ACK delivers, taken in
        // ascending order, never count against each other.
        let fack = (self.n_sacked > 0).then_some(self.fack);
        let reordered =
            |r: &Rec| r.flags & f::RETRANS == 0 && fack.is_some_and(|fk| r.end.diff(fk) < 0);
        // Cumulatively acknowledged records leave.
        while let Some(r) = self.recs.front().copied() {
            if r.end.diff(ack) > 0 {
                break;
            }
            self.recs.pop_front();
            if r.flags & f::RETRANS != 0 {
                self.n_rtx -= 1;
            }
            if r.flags & f::LOST != 0 {
                self.n_lost -= 1;
            }
            if r.flags & f::SACKED != 0 {
                self.n_sacked -= 1;
            } else {
                out.reordered |= reordered(&r);
                if r.flags & f::RETRANS == 0 {
                    // Karn: only a segment sent once measures the path.
                    out.rtt_sample = Some(now.wrapping_sub(r.xmit));
                }
                newest = pick_newest(newest, r);
            }
        }
        // Newly SACKed records; a record counts when a block covers all of
        // it (records are split at block edges first).
        for b in blocks {
            let (l, e) = (b.left.max(ack), b.right);
            if b.left.diff(b.right) >= 0 || e.diff(l) <= 0 || e.diff(max) > 0 {
                continue;
            }
            self.split_at(ack, l);
            self.split_at(ack, e);
            let mut start = ack;
            for r in self.recs.iter_mut() {
                let s = start;
                start = r.end;
                if s.diff(e) >= 0 {
                    break;
                }
                if s.diff(l) < 0 || r.flags & f::SACKED != 0 {
                    continue;
                }
                if r.flags & f::LOST != 0 {
                    self.n_lost -= 1;
                }
                out.reordered |= reordered(r);
                if self.n_sacked == 0 || r.end.diff(self.fack) > 0 {
                    self.fack = r.end;
                }
                r.flags = (r.flags | f::SACKED) & !f::LOST;
                self.n_sacked += 1;
                out.newly_sacked += r.end.since(s);
                newest = pick_newest(newest, *r);
            }
        }
        if let Some(s) = out.rtt_sample {
            if self.min_rtt == 0 || s < self.min_rtt {
                self.min_rtt = s.max(1);
            }
        }
        if let Some(r) = newest {
            let rtt = now.wrapping_sub(r.xmit);
            // RFC 8985 §6.2 step 2: a retransmitted segment delivered
            // sooner than the smallest RTT was delivered by its original.
            let ambiguous = r.flags & f::RETRANS != 0 && self.min_rtt != 0 && rtt < self.min_rtt;
            if !ambiguous
                && (self.rack_rtt == 0
                    || after(r.xmit, self.rack_xmit)
                    || (r.xmit == self.rack_xmit && r.end.diff(self.rack_end) > 0))
            {
                self.rack_xmit = r.xmit;
                self.rack_end = r.end;
                self.rack_rtt = rtt.max(1);
            }
        }
        out
    }

    /// Mark lost what RACK (RFC 8985 §6.2 step 5, `RACK_detect_loss`)
    /// says is lost, at `now` with reordering window `reo_wnd` (µs), and
    /// with `dupthresh` what RFC 6675 `IsLost` says (a path that reorders
    /// is left to RACK's window: DupThresh SACKed above a segment would
    /// call it lost however short the reordering). Returns (bytes newly
    /// marked lost, µs until the last record not yet overdue would be —
    /// 0 if none is pending).
    pub fn detect_loss(
        &mut self,
        una: SeqNum,
        now: u32,
        reo_wnd: u32,
        mss: u32,
        dupthresh: bool,
    ) -> (usize, u32) {
        let mut lost = 0;
        if dupthresh && self.n_sacked > 0 {
            lost += self.mark_is_lost(una, mss);
        }
        if self.rack_rtt == 0 || (self.n_sacked == 0 && self.n_rtx == 0) {
            // Without SACKs or retransmissions every record still held was
            // sent after everything delivered.
            return (lost, 0);
        }
        let mut wait = 0u32;
        let mut start = una;
        for r in self.recs.iter_mut() {
            let s = start;
            start = r.end;
            if r.flags & (f::SACKED | f::LOST) != 0 {
                continue;
            }
            let sent_before = after(self.rack_xmit, r.xmit)
                || (r.xmit == self.rack_xmit && self.rack_end.diff(r.end) > 0);
            if !sent_before {
                continue;
            }
            let deadline = r.xmit.wrapping_add(self.rack_rtt).wrapping_add(reo_wnd);
            let remaining = deadline.wrapping_sub(now) as i32;
            if remaining <= 0 {
                r.flags |= f::LOST;
                self.n_lost += 1;
                lost += r.end.since(s);
            } else {
                wait = wait.max(remaining as u32);
            }
        }
        (lost, wait)
    }

    /// RFC 6675 §4 `IsLost` for every record not yet retransmitted (a lost
    /// retransmission is RACK's to find): more than (DupThresh−1)·SMSS
    /// bytes, or DupThresh discontiguous runs, SACKed above it.
    fn mark_is_lost(&mut self, una: SeqNum, mss: u32) -> usize {
        let limit = ((DUP_THRESH - 1) * mss) as usize;
        // Starts are implicit: compute them going forward, judge backward.
        let n = self.recs.len();
        let mut sacked_above = 0usize;
        let mut runs_above = 0u32;
        let mut prev_sacked = false;
        let mut lost = 0;
        let mut newly = 0;
        for i in (0..n).rev() {
            let start = if i == 0 { una } else { self.recs[i - 1].end };
            let r = &mut self.recs[i];
            let len = r.end.since(start);
            if r.flags & f::SACKED != 0 {
                if !prev_sacked {
                    runs_above += 1;
                }
                prev_sacked = true;
                sacked_above += len;
                continue;
            }
            prev_sacked = false;
            if sacked_above == 0 {
                continue;
            }
            if r.flags & (f::LOST | f::RETRANS) == 0
                && (sacked_above > limit || runs_above >= DUP_THRESH)
            {
                r.flags |= f::LOST;
                newly += 1;
                lost += len;
            }
        }
        self.n_lost += newly;
        lost
    }

    /// The first record marked lost (and not retransmitted since).
    pub fn first_lost(&self, una: SeqNum) -> Option<Span> {
        let mut start = una;
        for r in &self.recs {
            let s = start;
            start = r.end;
            if r.flags & f::LOST != 0 {
                return Some(Span {
                    start: s,
                    end: r.end,
                    retransmitted: r.flags & f::RETRANS != 0,
                });
            }
        }
        None
    }

    /// The first run of un-SACKed records, from SND.UNA (empty if the
    /// first record is SACKed).
    pub fn first_hole(&self, una: SeqNum) -> Span {
        let mut end = una;
        let mut retransmitted = false;
        for r in &self.recs {
            if r.flags & f::SACKED != 0 {
                break;
            }
            retransmitted |= r.flags & f::RETRANS != 0;
            end = r.end;
        }
        Span {
            start: una,
            end,
            retransmitted,
        }
    }

    /// RFC 6675 NextSeg (3): the first record never retransmitted, not
    /// SACKed, with SACKed data above it.
    pub fn next_unsent_hole(&self, una: SeqNum) -> Option<Span> {
        if self.n_sacked == 0 {
            return None;
        }
        let last_sacked = self.recs.iter().rposition(|r| r.flags & f::SACKED != 0)?;
        let mut start = una;
        for r in self.recs.iter().take(last_sacked) {
            let s = start;
            start = r.end;
            if r.flags & (f::SACKED | f::RETRANS) == 0 {
                return Some(Span {
                    start: s,
                    end: r.end,
                    retransmitted: false,
                });
            }
        }
        None
    }

    /// Bytes in flight: sent, neither SACKed nor marked lost (a
    /// retransmitted record counts once).
    pub fn pipe(&self, una: SeqNum) -> usize {
        let mut n = 0;
        let mut start = una;
        for r in &self.recs {
            if r.flags & (f::SACKED | f::LOST) == 0 {
                n += r.end.since(start);
            }
            start = r.end;
        }
        n
    }

    /// After a retransmission timeout: forget SACK marks (the receiver may
    /// have reneged, RFC 2018 §8) and lost marks; the go-back resend
    /// restamps every record.
    pub fn on_rto(&mut self) {
        for r in self.recs.iter_mut() {
            r.flags &= !(f::SACKED | f::LOST);
        }
        self.n_sacked = 0;
        self.n_lost = 0;
    }

    /// Consistency: records end strictly increasing, all within
    /// `(una, max]`, the last ending at `max`; the mark counts agree.
    pub fn check(&self, una: SeqNum, max: SeqNum) -> Result<(), &'static str> {
        let mut prev = una;
        let (mut sacked, mut rtx, mut lost) = (0, 0, 0);
        for r in &self.recs {
            if r.end.diff(prev) <= 0 {
                return Err("transmission records out of order");
            }
            prev = r.end;
            sacked += u32::from(r.flags & f::SACKED != 0);
            rtx += u32::from(r.flags & f::RETRANS != 0);
            lost += u32::from(r.flags & f::LOST != 0);
        }
        if let Some(last) = self.recs.back() {
            if last.end != max {
                return Err("transmission records do not reach SND.MAX");
            }
        }
        if (sacked, rtx, lost) != (self.n_sacked, self.n_rtx, self.n_lost) {
            return Err("transmission record counts wrong");
        }
        Ok(())
    }
}

fn pick_newest(cur: Option<Rec>, r: Rec) -> Option<Rec> {
    match cur {
        Some(c) if after(c.xmit, r.xmit) || (c.xmit == r.xmit && c.end.diff(r.end) >= 0) => Some(c),
        _ => Some(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u32) -> SeqNum {
        SeqNum(x)
    }

    fn blk(l: u32, r: u32) -> SackBlock {
        SackBlock {
            left: s(l),
            right: s(r),
        }
    }

    /// Segments of 100 bytes sent at t = 0, 10, 20, ... µs.
    fn sent(n: u32) -> RtxRecords {
        let mut r = RtxRecords::default();
        for i in 0..n {
            r.on_send(s(0), s(i * 100), s(i * 100 + 100), s(i * 100), i * 10);
        }
        r
    }

    #[test]
    fn rtt_sample_from_a_segment_sent_once() {
        let mut r = sent(5);
        let o = r.on_ack(s(200), &[], s(500), 1000);
        assert_eq!(o.rtt_sample, Some(1000 - 10));
        r.check(s(200), s(500)).unwrap();
    }

    #[test]
    fn karn_no_sample_from_a_retransmission() {
        // RFC 6298 §3 (Karn): no RTT from a retransmitted segment.
        let mut r = sent(5);
        r.on_send(s(0), s(0), s(100), s(500), 500);
        let o = r.on_ack(s(100), &[], s(500), 700);
        assert_eq!(o.rtt_sample, None);
        r.check(s(100), s(500)).unwrap();
    }

    #[test]
    fn sack_blocks_mark_records_and_bad_blocks_are_ignored() {
        // RFC 2018 §8 / RFC 6675 §5: blocks below SND.UNA, beyond SND.MAX
        // or inverted are ignored.
        let mut r = sent(10);
        let o = r.on_ack(
            s(0),
            &[blk(300, 500), blk(50, 60), blk(900, 1100), blk(700, 600)],
            s(1000),
            100,
        );
        assert_eq!(o.newly_sacked, 200 + 10);
        // A block edge inside a record splits it: 50..60 is its own record.
        r.check(s(0), s(1000)).unwrap();
        let o = r.on_ack(s(0), &[blk(300, 500)], s(1000), 110);
        assert_eq!(o.newly_sacked, 0);
        assert_eq!(r.pipe(s(0)), 1000 - 210);
    }

    #[test]
    fn is_lost_rfc6675() {
        // RFC 6675 §4 IsLost: more than (DupThresh - 1) * SMSS bytes SACKed
        // above, or DupThresh discontiguous SACKed sequences above.
        let mss = 100;
        let mut r = sent(10);
        r.on_ack(s(0), &[blk(100, 300)], s(1000), 100);
        assert_eq!(r.detect_loss(s(0), 100, 1_000_000, mss, true).0, 0); // 200: not > 200
        r.on_ack(s(0), &[blk(300, 400)], s(1000), 100);
        assert_eq!(r.detect_loss(s(0), 100, 1_000_000, mss, true).0, 100);
        assert_eq!(r.first_lost(s(0)).unwrap().start, s(0));
        let mut r = sent(10);
        r.on_ack(
            s(0),
            &[blk(100, 200), blk(300, 400), blk(500, 600)],
            s(1000),
            100,
        );
        let (lost, _) = r.detect_loss(s(0), 100, 1_000_000, mss, true);
        // Segment 0 has three runs above it: lost. 200..300 has two runs
        // and 200 bytes above: not lost.
        assert_eq!(lost, 100);
        assert_eq!(r.first_hole(s(0)).end, s(100));
        assert_eq!(r.next_unsent_hole(s(0)).unwrap().start, s(0));
    }

    #[test]
    fn rack_marks_older_undelivered_segments_lost_after_rtt_plus_window() {
        // RFC 8985 §6.2: segment 0 is lost when segment 3 (sent later) is
        // delivered and RACK.rtt + reo_wnd has passed since segment 0 left.
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(300, 400)], s(500), 1030);
        // RACK.rtt = 1030 - 30 = 1000; segment 0 sent at 0: due at 1050.
        let (lost, wait) = r.detect_loss(s(0), 1040, 50, 1000, true);
        assert_eq!(lost, 0);
        // The timer covers the last pending record (segment 2, due at
        // 1070), as RACK_detect_loss takes the maximum.
        assert_eq!(wait, 30);
        let (lost, _) = r.detect_loss(s(0), 1060, 50, 1000, true);
        // 0 (due 1050) and 1 (due 1060) are lost; 2 (due 1070) not yet.
        assert_eq!(lost, 200);
        assert_eq!(r.first_lost(s(0)).unwrap().start, s(0));
        // Pipe: segments 2 and 4 (3 is SACKed, 0 and 1 lost).
        assert_eq!(r.pipe(s(0)), 200);
    }

    #[test]
    fn lost_retransmission_is_detected_again() {
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(100, 200)], s(500), 1010);
        r.detect_loss(s(0), 2000, 0, 1000, true);
        assert!(r.first_lost(s(0)).is_some());
        // Retransmit 0..100 at 2000: only segment 0 was lost, and its
        // retransmission clears the mark.
        r.on_send(s(0), s(0), s(100), s(500), 2000);
        assert!(r.first_lost(s(0)).is_none());
        // Segments sent after the retransmission are delivered while it is
        // not: it is lost again.
        r.on_send(s(0), s(500), s(600), s(500), 2100);
        r.on_ack(s(0), &[blk(100, 200), blk(500, 600)], s(600), 3100);
        let (lost, _) = r.detect_loss(s(0), 5000, 0, 1000, true);
        assert!(lost >= 100);
        let l = r.first_lost(s(0)).unwrap();
        assert_eq!(l.start, s(0));
        assert!(l.retransmitted);
        r.check(s(0), s(600)).unwrap();
    }

    #[test]
    fn a_resend_reaching_past_snd_max_records_the_new_part() {
        let mut r = sent(2);
        r.on_send(s(0), s(100), s(250), s(200), 50);
        r.check(s(0), s(250)).unwrap();
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn retransmission_splits_records() {
        let mut r = sent(5);
        r.on_send(s(0), s(150), s(250), s(500), 100);
        r.check(s(0), s(500)).unwrap();
        assert_eq!(r.len(), 7);
    }

    #[test]
    fn ambiguous_retransmission_does_not_move_rack() {
        let mut r = sent(5);
        r.on_ack(s(100), &[], s(500), 1000); // min_rtt = 1000
        r.on_send(s(100), s(100), s(200), s(500), 1500);
        // Acked 100 µs after the retransmission: faster than min_rtt, so it
        // was the original that arrived.
        r.on_ack(s(200), &[], s(500), 1600);
        assert_eq!(r.rack_xmit, 0);
    }

    #[test]
    fn a_segment_delivered_below_one_delivered_before_it_shows_reordering() {
        // RFC 8985 §6.2 step 3: a never retransmitted segment delivered
        // below RACK.fack was delivered out of order.
        //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
        //= type=test
        let mut r = sent(5);
        // The first SACK, even with its blocks out of order: no reordering
        // seen (segments one ACK delivers never count against each other).
        let o = r.on_ack(s(0), &[blk(300, 400), blk(100, 200)], s(500), 100);
        assert!(!o.reordered);
        // Segment 2, below segment 3 SACKed before: reordered.
        assert!(r.on_ack(s(0), &[blk(100, 400)], s(500), 110).reordered);
        // The cumulative ACK fills segment 0, never resent, below them.
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(200, 300)], s(500), 100);
        assert!(r.on_ack(s(300), &[], s(500), 110).reordered);
        // The same once segment 0 and 1 were resent: not told apart from
        // the retransmissions' arrival.
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(200, 300)], s(500), 100);
        r.on_send(s(0), s(0), s(200), s(500), 105);
        assert!(!r.on_ack(s(300), &[], s(500), 110).reordered);
        // In order, no SACK ever: none.
        let mut r = sent(5);
        assert!(!r.on_ack(s(200), &[], s(500), 100).reordered);
        assert!(!r.on_ack(s(500), &[], s(500), 110).reordered);
    }

    #[test]
    fn without_dupthresh_only_rack_marks_losses() {
        // Three segments SACKed above segment 0 make it lost by RFC 6675
        // IsLost, not by RACK while its window has not passed.
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(100, 400)], s(500), 1030);
        let (lost, wait) = r.detect_loss(s(0), 1031, 500, 100, false);
        assert_eq!((lost, wait > 0), (0, true));
        assert_eq!(r.detect_loss(s(0), 1031, 500, 100, true).0, 100);
    }

    #[test]
    fn rto_forgets_sacks() {
        // RFC 2018 §8: after a timeout the SACK information is discarded.
        let mut r = sent(5);
        r.on_ack(s(0), &[blk(200, 300)], s(500), 100);
        assert!(r.any_sacked());
        r.on_rto();
        assert!(!r.any_sacked());
        assert_eq!(r.pipe(s(0)), 500);
        r.check(s(0), s(500)).unwrap();
    }
}
