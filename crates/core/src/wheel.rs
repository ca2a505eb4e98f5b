//! A hierarchical timing wheel (Varghese & Lauck, SOSP '87), as IX uses for
//! TCP timers: O(1) insert, O(1) cancel, expiry in amortised O(1).
//!
//! Six levels of 64 slots. A slot at level `L` spans `64^L` ticks; with the
//! default 16 µs tick the levels reach 1 ms, 65 ms, 4.2 s, 4.5 min, 4.8 h and
//! 12.7 days. A timer sits in the level where its deadline first differs from
//! the wheel's current time, and moves down ("cascades") as time approaches
//! it; one further out than the top level is parked in the top level and
//! re-filed when that slot comes round. Timers are keyed by a dense `u32` id
//! (the owner's slot index); each id has at most one pending deadline.
//!
//! The wheel is optimised for the common case of IX: most timers (a TCP
//! retransmission timer restarted by every ACK) are cancelled or moved long
//! before they expire, and both are a few pointer writes.
//!
//! [`TimerWheel::next_expiration`] may return a time earlier than any real
//! deadline (the moment a higher-level slot must cascade); calling
//! [`TimerWheel::advance`] then simply fires nothing. It is never later than
//! the earliest deadline, rounded up to a tick.

use crate::time::{Duration, Instant};

const LEVELS: usize = 6;
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Ticks covered by the whole wheel.
const MAX_TICKS: u64 = 1 << (SLOT_BITS as usize * LEVELS);
const NIL: u32 = u32::MAX;
/// `Node::level` for a timer that is due now (kept on the `due` list).
const DUE: u8 = u8::MAX;
/// `Node::level` for an id with no pending timer.
const IDLE: u8 = u8::MAX - 1;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Deadline in ticks (rounded up).
    when: u64,
    prev: u32,
    next: u32,
    level: u8,
    slot: u8,
}

const IDLE_NODE: Node = Node {
    when: 0,
    prev: NIL,
    next: NIL,
    level: IDLE,
    slot: 0,
};

/// A hierarchical timing wheel keyed by dense `u32` ids.
#[derive(Debug, Clone)]
pub struct TimerWheel {
    tick_us: u64,
    /// Current time in ticks: everything at or before it has fired.
    elapsed: u64,
    heads: [[u32; SLOTS]; LEVELS],
    occupied: [u64; LEVELS],
    due: u32,
    nodes: Vec<Node>,
    len: usize,
}

impl TimerWheel {
    /// A wheel with the given tick (resolution), starting at `now`.
    /// A tick shorter than 1 µs is taken as 1 µs.
    pub fn new(tick: Duration, now: Instant) -> TimerWheel {
        let tick_us = (tick.as_micros() as u64).max(1);
        TimerWheel {
            tick_us,
            elapsed: now.as_micros() / tick_us,
            heads: [[NIL; SLOTS]; LEVELS],
            occupied: [0; LEVELS],
            due: NIL,
            nodes: Vec::new(),
            len: 0,
        }
    }

    /// The resolution.
    pub fn tick(&self) -> Duration {
        Duration::from_micros(self.tick_us)
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No pending timers?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Set (or move) the timer of `id` to fire at `deadline`, rounded up to
    /// the next tick. A deadline in the past fires at the next `advance`.
    pub fn schedule(&mut self, id: u32, deadline: Instant) {
        let i = id as usize;
        if i >= self.nodes.len() {
            self.nodes.resize(i + 1, IDLE_NODE);
        }
        if self.nodes[i].level != IDLE {
            self.unlink(id);
        } else {
            self.len += 1;
        }
        let when = deadline.as_micros().div_ceil(self.tick_us);
        self.nodes[i].when = when;
        self.file(id);
    }

    /// Cancel the timer of `id`, if any.
    pub fn cancel(&mut self, id: u32) {
        let i = id as usize;
        if i < self.nodes.len() && self.nodes[i].level != IDLE {
            self.unlink(id);
            self.nodes[i] = IDLE_NODE;
            self.len -= 1;
        }
    }

    /// The pending deadline of `id` (in whole ticks), if any.
    pub fn deadline(&self, id: u32) -> Option<Instant> {
        let n = self.nodes.get(id as usize)?;
        (n.level != IDLE).then(|| Instant::from_micros(n.when.saturating_mul(self.tick_us)))
    }

    /// When `advance` next needs to be called: never later than the earliest
    /// deadline. `None` when no timer is pending.
    pub fn next_expiration(&self) -> Option<Instant> {
        self.next_tick()
            .map(|t| Instant::from_micros(t.saturating_mul(self.tick_us)))
    }

    fn next_tick(&self) -> Option<u64> {
        if self.due != NIL {
            return Some(self.elapsed);
        }
        for level in 0..LEVELS {
            if let Some(t) = self.next_in_level(level) {
                return Some(t);
            }
        }
        None
    }

    /// Start tick of the first occupied slot of `level` after `elapsed`.
    fn next_in_level(&self, level: usize) -> Option<u64> {
        let occ = self.occupied[level];
        if occ == 0 {
            return None;
        }
        let shift = SLOT_BITS * level as u32;
        let now_slot = (self.elapsed >> shift) & SLOT_MASK;
        let zeros = occ.rotate_right(now_slot as u32).trailing_zeros() as u64;
        let slot = (now_slot + zeros) & SLOT_MASK;
        let slot_range = 1u64 << shift;
        let level_range = slot_range << SLOT_BITS;
        let level_start = self.elapsed & !(level_range - 1);
        let mut t = level_start + slot * slot_range;
        if t <= self.elapsed {
            // Only a slot on the top level can be "behind" the current time
            // (a deadline beyond the wheel's span); it comes round next lap.
            t += level_range;
        }
        Some(t)
    }

    /// Move time forward to `now`, pushing every id whose deadline has come
    /// onto `fired` (in deadline order, ties in insertion order per slot).
    pub fn advance(&mut self, now: Instant, fired: &mut Vec<u32>) {
        let target = now.as_micros() / self.tick_us;
        // Timers scheduled at or before the current tick.
        while self.due != NIL {
            let id = self.due;
            self.unlink(id);
            self.nodes[id as usize] = IDLE_NODE;
            self.len -= 1;
            fired.push(id);
        }
        if target < self.elapsed {
            return;
        }
        // The lowest occupied level holds the earliest slot.
        while let Some((level, t)) = (0..LEVELS).find_map(|l| self.next_in_level(l).map(|t| (l, t)))
        {
            if t > target {
                break;
            }
            self.elapsed = t;
            let shift = SLOT_BITS * level as u32;
            let slot = ((t >> shift) & SLOT_MASK) as usize;
            let mut id = self.heads[level][slot];
            self.heads[level][slot] = NIL;
            self.occupied[level] &= !(1u64 << slot);
            while id != NIL {
                let next = self.nodes[id as usize].next;
                if self.nodes[id as usize].when <= self.elapsed {
                    self.nodes[id as usize] = IDLE_NODE;
                    self.len -= 1;
                    fired.push(id);
                } else {
                    self.file(id);
                }
                id = next;
            }
        }
        self.elapsed = self.elapsed.max(target);
    }

    /// Put `id` (its `when` set, not linked anywhere) into its list.
    fn file(&mut self, id: u32) {
        let when = self.nodes[id as usize].when;
        if when <= self.elapsed {
            self.nodes[id as usize].level = DUE;
            self.push_front(id, DUE, 0);
            return;
        }
        let mut masked = (self.elapsed ^ when) | SLOT_MASK;
        if masked >= MAX_TICKS {
            masked = MAX_TICKS - 1;
        }
        let significant = 63 - masked.leading_zeros();
        let level = (significant / SLOT_BITS) as usize;
        // A far-future deadline is parked in the top level's slot for the
        // last reachable tick and re-filed when it comes round.
        let reach = when.min(self.elapsed + MAX_TICKS - 1);
        let slot = ((reach >> (SLOT_BITS * level as u32)) & SLOT_MASK) as u8;
        self.push_front(id, level as u8, slot);
    }

    fn push_front(&mut self, id: u32, level: u8, slot: u8) {
        let head = if level == DUE {
            self.due
        } else {
            self.heads[level as usize][slot as usize]
        };
        {
            let n = &mut self.nodes[id as usize];
            n.level = level;
            n.slot = slot;
            n.prev = NIL;
            n.next = head;
        }
        if head != NIL {
            self.nodes[head as usize].prev = id;
        }
        if level == DUE {
            self.due = id;
        } else {
            self.heads[level as usize][slot as usize] = id;
            self.occupied[level as usize] |= 1u64 << slot;
        }
    }

    fn unlink(&mut self, id: u32) {
        let Node {
            prev,
            next,
            level,
            slot,
            ..
        } = self.nodes[id as usize];
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else if level == DUE {
            self.due = next;
        } else {
            self.heads[level as usize][slot as usize] = next;
            if next == NIL {
                self.occupied[level as usize] &= !(1u64 << slot);
            }
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn us(x: u64) -> Instant {
        Instant::from_micros(x)
    }

    fn wheel() -> TimerWheel {
        TimerWheel::new(Duration::from_micros(16), Instant::ZERO)
    }

    #[test]
    fn fires_at_deadline_not_before() {
        let mut w = wheel();
        w.schedule(1, us(1000));
        let mut out = vec![];
        w.advance(us(990), &mut out);
        assert!(out.is_empty());
        w.advance(us(1008), &mut out);
        assert_eq!(out, vec![1]);
        assert!(w.is_empty());
    }

    #[test]
    fn next_expiration_never_late() {
        let mut w = wheel();
        w.schedule(3, us(5_000_000));
        let mut now = 0;
        let mut out = vec![];
        while out.is_empty() {
            let t = w.next_expiration().unwrap().as_micros();
            assert!(t <= 5_000_000 + 16, "{t}");
            assert!(t >= now);
            now = t;
            w.advance(us(now), &mut out);
        }
        assert_eq!(out, vec![3]);
        assert!(now >= 5_000_000);
    }

    #[test]
    fn cancel_and_move() {
        let mut w = wheel();
        w.schedule(1, us(100));
        w.schedule(2, us(200));
        w.cancel(1);
        w.schedule(2, us(50));
        assert_eq!(w.len(), 1);
        let mut out = vec![];
        w.advance(us(100), &mut out);
        assert_eq!(out, vec![2]);
        w.cancel(2); // already fired: no-op
        w.cancel(77); // never seen: no-op
        assert!(w.is_empty());
        assert_eq!(w.next_expiration(), None);
    }

    #[test]
    fn past_deadline_fires_next_advance() {
        let mut w = wheel();
        let mut out = vec![];
        w.advance(us(10_000), &mut out);
        w.schedule(9, us(5));
        assert_eq!(w.next_expiration(), Some(us(10_000 / 16 * 16)));
        w.advance(us(10_000), &mut out);
        assert_eq!(out, vec![9]);
    }

    #[test]
    fn beyond_span_is_refiled() {
        let mut w = wheel();
        let far = 16 * MAX_TICKS * 3 + 12345 * 16;
        w.schedule(4, us(far));
        let mut out = vec![];
        let mut steps = 0;
        while out.is_empty() {
            let t = w.next_expiration().unwrap();
            w.advance(t, &mut out);
            steps += 1;
            assert!(steps < 100);
        }
        assert_eq!(out, vec![4]);
    }

    proptest::proptest! {
        /// Against a model: random schedules, cancels and advances; every
        /// timer fires exactly once, at the first advance at or after its
        /// (tick-rounded) deadline.
        #[test]
        fn matches_model(ops in proptest::collection::vec((0u8..4, 0u32..64, 0u64..3_000_000), 1..400)) {
            let mut w = wheel();
            let mut model: BTreeMap<u32, u64> = BTreeMap::new();
            let mut now = 0u64;
            let mut out = vec![];
            for (op, id, x) in ops {
                match op {
                    0 | 1 => {
                        let d = now + x;
                        w.schedule(id, us(d));
                        model.insert(id, d.div_ceil(16) * 16);
                    }
                    2 => { w.cancel(id); model.remove(&id); }
                    _ => {
                        now += x / 4;
                        // Advance in steps as an engine would, via next_expiration.
                        loop {
                            match w.next_expiration() {
                                Some(t) if t.as_micros() <= now => w.advance(t, &mut out),
                                _ => break,
                            }
                        }
                        w.advance(us(now), &mut out);
                        let mut expect: Vec<u32> = model.iter()
                            .filter(|(_, &d)| d <= now / 16 * 16).map(|(&k, _)| k).collect();
                        expect.sort();
                        out.sort();
                        proptest::prop_assert_eq!(&out, &expect);
                        for k in &expect { model.remove(k); }
                        out.clear();
                    }
                }
                proptest::prop_assert_eq!(w.len(), model.len());
                if let (Some(next), Some(min)) = (w.next_expiration(), model.values().min()) {
                    proptest::prop_assert!(next.as_micros() <= *min.max(&(now / 16 * 16)));
                }
            }
        }
    }
}
