//! The sender's SACK scoreboard (RFC 6675 §3): which bytes above SND.UNA the
//! receiver reported holding, and the derived notions of "lost" and "pipe".

use crate::wire::tcp::{SackBlock, SeqNum};

/// Most disjoint SACKed ranges remembered. Forgetting a range is always
/// safe (the data is merely resent); inventing one never happens.
const MAX_RANGES: usize = 8;

/// RFC 6675 DupThresh.
pub const DUP_THRESH: u32 = 3;

/// Sorted, disjoint SACKed ranges, all above SND.UNA.
#[derive(Debug, Clone, Default)]
pub struct Scoreboard {
    ranges: [(SeqNum, SeqNum); MAX_RANGES],
    n: u8,
}

/// A run of un-SACKed bytes between SND.UNA and SND.MAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hole {
    /// First byte.
    pub start: SeqNum,
    /// One past the last byte.
    pub end: SeqNum,
    /// Is every byte of it lost by RFC 6675 `IsLost`?
    pub lost: bool,
    /// Is there SACKed data above it (RFC 6675 NextSeg (1.b))?
    pub below_sacked: bool,
}

impl Scoreboard {
    /// Ranges held.
    pub fn ranges(&self) -> &[(SeqNum, SeqNum)] {
        &self.ranges[..self.n as usize]
    }

    /// Nothing SACKed?
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Forget everything (after a retransmission timeout the receiver may
    /// have reneged, RFC 2018 §8).
    pub fn clear(&mut self) {
        self.n = 0;
    }

    /// Bytes SACKed in total.
    pub fn sacked_bytes(&self) -> usize {
        self.ranges().iter().map(|(s, e)| e.since(*s)).sum()
    }

    /// Highest SACKed sequence number (one past).
    pub fn highest(&self) -> Option<SeqNum> {
        self.ranges().last().map(|r| r.1)
    }

    /// Merge reported blocks; blocks outside `(snd_una, snd_max]` are
    /// ignored (RFC 2018 §8 / RFC 6675 §5). Returns bytes newly SACKed.
    pub fn update(&mut self, snd_una: SeqNum, snd_max: SeqNum, blocks: &[SackBlock]) -> usize {
        let before = self.sacked_bytes();
        for b in blocks {
            let (l, r) = (b.left.max(snd_una), b.right);
            if r.diff(l) <= 0 || r.diff(snd_max) > 0 || b.left.diff(b.right) >= 0 {
                continue;
            }
            self.insert(l, r);
        }
        self.sacked_bytes().saturating_sub(before)
    }

    fn insert(&mut self, mut l: SeqNum, mut r: SeqNum) {
        let mut out: [(SeqNum, SeqNum); MAX_RANGES + 1] = Default::default();
        let mut k = 0;
        let mut placed = false;
        for &(s, e) in self.ranges() {
            if e.diff(l) < 0 {
                out[k] = (s, e);
                k += 1;
            } else if r.diff(s) < 0 {
                if !placed {
                    out[k] = (l, r);
                    k += 1;
                    placed = true;
                }
                out[k] = (s, e);
                k += 1;
            } else {
                l = l.min(s);
                r = r.max(e);
            }
        }
        if !placed {
            out[k] = (l, r);
            k += 1;
        }
        // Too many: forget the highest range (the least useful for
        // retransmission decisions, which work upwards from SND.UNA).
        let k = k.min(MAX_RANGES);
        self.ranges[..k].copy_from_slice(&out[..k]);
        self.n = k as u8;
    }

    /// Drop what the cumulative ACK now covers.
    pub fn ack(&mut self, snd_una: SeqNum) {
        let mut k = 0;
        for i in 0..self.n as usize {
            let (s, e) = self.ranges[i];
            if e.diff(snd_una) <= 0 {
                continue;
            }
            self.ranges[k] = (s.max(snd_una), e);
            k += 1;
        }
        self.n = k as u8;
    }

    /// The un-SACKed holes in `[snd_una, snd_max)`, lowest first, each with
    /// RFC 6675 `IsLost`: more than (DupThresh-1)·SMSS bytes SACKed above it,
    /// or DupThresh discontiguous SACKed ranges above it.
    pub fn holes(
        &self,
        snd_una: SeqNum,
        snd_max: SeqNum,
        mss: u32,
    ) -> impl Iterator<Item = Hole> + '_ {
        let ranges = self.ranges();
        let total = self.sacked_bytes();
        let mut cursor = snd_una;
        let mut sacked_below = 0usize;
        let mut i = 0usize;
        let mut done = false;
        std::iter::from_fn(move || loop {
            if done {
                return None;
            }
            let (hole_end, next_cursor) = if i < ranges.len() {
                (ranges[i].0, ranges[i].1)
            } else {
                done = true;
                (snd_max, snd_max)
            };
            let above = total - sacked_below;
            let ranges_above = ranges.len() - i;
            let start = cursor;
            if i < ranges.len() {
                sacked_below += ranges[i].1.since(ranges[i].0);
                i += 1;
            }
            cursor = next_cursor;
            if hole_end.diff(start) > 0 {
                return Some(Hole {
                    start,
                    end: hole_end,
                    lost: above > ((DUP_THRESH - 1) * mss) as usize
                        || ranges_above >= DUP_THRESH as usize,
                    below_sacked: ranges_above > 0,
                });
            }
        })
    }

    /// RFC 6675 `IsLost(seq)` for the byte at `seq`.
    pub fn is_lost(&self, seq: SeqNum, mss: u32) -> bool {
        let mut above = 0usize;
        let mut ranges = 0usize;
        for &(s, e) in self.ranges() {
            if s.diff(seq) > 0 {
                above += e.since(s);
                ranges += 1;
            }
        }
        above > ((DUP_THRESH - 1) * mss) as usize || ranges >= DUP_THRESH as usize
    }

    /// RFC 6675 `SetPipe`: bytes presumed in the network. An un-SACKed
    /// byte counts once unless lost, and once more if it was retransmitted
    /// (at or below HighRxt).
    pub fn pipe(&self, snd_una: SeqNum, snd_max: SeqNum, high_rxt: SeqNum, mss: u32) -> u32 {
        let mut pipe = 0usize;
        for h in self.holes(snd_una, snd_max, mss) {
            let len = h.end.since(h.start);
            if !h.lost {
                pipe += len;
            }
            let rexmitted_end = high_rxt.min(h.end);
            pipe += rexmitted_end.since(h.start);
        }
        pipe.min(u32::MAX as usize) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(l: u32, r: u32) -> SackBlock {
        SackBlock {
            left: SeqNum(l),
            right: SeqNum(r),
        }
    }

    #[test]
    fn merge_and_ack() {
        let mut sb = Scoreboard::default();
        let una = SeqNum(1000);
        let max = SeqNum(20000);
        assert_eq!(sb.update(una, max, &[blk(3000, 4000)]), 1000);
        assert_eq!(
            sb.update(una, max, &[blk(5000, 6000), blk(3500, 5000)]),
            2000
        );
        assert_eq!(sb.ranges(), &[(SeqNum(3000), SeqNum(6000))]);
        // Ignored: below SND.UNA, beyond SND.MAX, inverted.
        assert_eq!(
            sb.update(una, max, &[blk(0, 900), blk(19000, 21000), blk(9, 5)]),
            0
        );
        sb.ack(SeqNum(4000));
        assert_eq!(sb.ranges(), &[(SeqNum(4000), SeqNum(6000))]);
        sb.ack(SeqNum(7000));
        assert!(sb.is_empty());
    }

    #[test]
    fn is_lost_rfc6675() {
        // RFC 6675 §4 IsLost: more than (DupThresh - 1) * SMSS bytes SACKed
        // above, or DupThresh discontiguous SACKed sequences above.
        let mss = 1000;
        let mut sb = Scoreboard::default();
        sb.update(SeqNum(0), SeqNum(10_000), &[blk(1000, 3000)]);
        assert!(!sb.is_lost(SeqNum(0), mss)); // 2000 bytes: not > 2000
        sb.update(SeqNum(0), SeqNum(10_000), &[blk(3000, 3001)]);
        assert!(sb.is_lost(SeqNum(0), mss));
        let mut sb = Scoreboard::default();
        sb.update(
            SeqNum(0),
            SeqNum(10_000),
            &[blk(1000, 1100), blk(2000, 2100), blk(3000, 3100)],
        );
        assert!(sb.is_lost(SeqNum(0), mss));
        assert!(!sb.is_lost(SeqNum(1500), mss));
    }

    #[test]
    fn holes_and_pipe() {
        let mss = 1000;
        let mut sb = Scoreboard::default();
        // Sent 0..10000; SACKed 1000..4000 and 5000..6000.
        sb.update(
            SeqNum(0),
            SeqNum(10_000),
            &[blk(1000, 4000), blk(5000, 6000)],
        );
        let holes: Vec<Hole> = sb.holes(SeqNum(0), SeqNum(10_000), mss).collect();
        assert_eq!(holes.len(), 3);
        assert_eq!(
            (holes[0].start, holes[0].end, holes[0].lost),
            (SeqNum(0), SeqNum(1000), true)
        );
        assert_eq!(
            (holes[1].start, holes[1].end, holes[1].lost),
            (SeqNum(4000), SeqNum(5000), false)
        );
        assert!(holes[1].below_sacked);
        assert_eq!(
            (holes[2].start, holes[2].end, holes[2].lost),
            (SeqNum(6000), SeqNum(10_000), false)
        );
        assert!(!holes[2].below_sacked);
        // pipe: hole0 lost (0) ; hole1 1000 ; hole2 4000 => 5000
        assert_eq!(sb.pipe(SeqNum(0), SeqNum(10_000), SeqNum(0), mss), 5000);
        // After retransmitting 0..1000 (HighRxt = 1000) it counts again.
        assert_eq!(sb.pipe(SeqNum(0), SeqNum(10_000), SeqNum(1000), mss), 6000);
    }

    #[test]
    fn keeps_at_most_max_ranges() {
        let mut sb = Scoreboard::default();
        for i in 0..20u32 {
            sb.update(
                SeqNum(0),
                SeqNum(1_000_000),
                &[blk(i * 100 + 50, i * 100 + 60)],
            );
        }
        assert_eq!(sb.ranges().len(), MAX_RANGES);
        assert_eq!(sb.ranges()[0].0, SeqNum(50));
    }
}
