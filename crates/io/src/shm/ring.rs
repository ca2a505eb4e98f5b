//! The ring area of one queue: its layout, and raw views of the rings in
//! it.
//!
//! Every word another process can write is an atomic, so a peer writing
//! anything at any time can make us read wrong *values* (which we
//! validate) but never create a data race on non-atomic Rust data.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Cache-line size the layout is padded to.
pub(super) const LINE: usize = 64;

/// A 32-bit word alone on its cache line (a ring index or a wake flag), so
/// the producer's and the consumer's writes never share a line.
#[repr(C, align(64))]
pub(super) struct Line {
    /// The word.
    pub(super) word: AtomicU32,
}

/// A transmit descriptor: a frame at `off` in the *sender's* pool region,
/// `len` bytes long.
#[repr(C)]
pub(super) struct Desc {
    /// Byte offset of the frame from the start of the sender's region.
    pub(super) off: AtomicU64,
    /// Frame length.
    pub(super) len: AtomicU32,
    /// Reserved (zero).
    pub(super) flags: AtomicU32,
}

/// Bytes of one descriptor.
pub(super) const DESC: usize = std::mem::size_of::<Desc>();
/// Bytes of one return entry (a u64 offset).
pub(super) const RET: usize = std::mem::size_of::<u64>();

const _: () = assert!(std::mem::size_of::<Line>() == LINE);
const _: () = assert!(std::mem::align_of::<Line>() == LINE);
const _: () = assert!(DESC == 16);

/// Where everything sits in a queue's ring area. Side 0 is the listener,
/// side 1 the connector; direction `d` carries frames from side `d` to side
/// `1 - d`.
///
/// ```text
/// 0              wake_rx[0]   Line  side 0 sleeps, wants a ring on frames
/// 64             wake_rx[1]   Line  side 1 likewise
/// 128            wake_ret[0]  Line  side 0 sleeps, wants a ring on returns
/// 192            wake_ret[1]  Line  side 1 likewise
/// 256            direction 0:
///   +0             desc.prod  Line  written by side 0 (sender)
///   +64            desc.cons  Line  written by side 1 (receiver)
///   +128           desc[N]    16 B each, written by side 0
///   +128+16N       ret.prod   Line  written by side 1
///   +192+16N       ret.cons   Line  written by side 0
///   +256+16N       ret[N]     u64 offsets, written by side 1
/// 256+DIR        direction 1: the same with the sides swapped
///                (DIR = 256 + 24N, a multiple of 64 for N >= 8)
/// ```
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Entries per ring (a power of two).
    pub(super) n: usize,
}

impl Layout {
    fn dir_len(&self) -> usize {
        4 * LINE + (DESC + RET) * self.n
    }
    fn dir(&self, d: usize) -> usize {
        4 * LINE + d * self.dir_len()
    }
    /// The wake-on-frames flag of `side`.
    pub(super) fn wake_rx(&self, side: usize) -> usize {
        side * LINE
    }
    /// The wake-on-returns flag of `side`.
    pub(super) fn wake_ret(&self, side: usize) -> usize {
        (2 + side) * LINE
    }
    /// (prod, cons, entries) of the descriptor ring of direction `d`.
    pub(super) fn desc(&self, d: usize) -> (usize, usize, usize) {
        let b = self.dir(d);
        (b, b + LINE, b + 2 * LINE)
    }
    /// (prod, cons, entries) of the return ring of direction `d`.
    pub(super) fn ret(&self, d: usize) -> (usize, usize, usize) {
        let b = self.dir(d) + 2 * LINE + DESC * self.n;
        (b, b + LINE, b + 2 * LINE)
    }
    /// Bytes of the whole area, page-rounded.
    pub(super) fn len(&self) -> usize {
        (4 * LINE + 2 * self.dir_len()).next_multiple_of(4096)
    }
}

/// A raw view of one single-producer single-consumer ring in a mapped
/// ring area. Copyable; valid only while the mapping lives (see [`new`]).
///
/// [`new`]: RawRing::new
pub(super) struct RawRing<E> {
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    ents: *const E,
    mask: u32,
}

impl<E> Clone for RawRing<E> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E> Copy for RawRing<E> {}

impl<E> RawRing<E> {
    /// A view of the ring whose (prod, cons, entries) offsets are `at`
    /// within the area at `base`.
    ///
    /// # Safety
    /// `base` must be the start of a live, 64-byte-aligned mapping of at
    /// least `Layout { n }.len()` bytes, `at` offsets from that layout, and
    /// the mapping must outlive every use of the returned value (its users
    /// keep the owning `Arc` beside it).
    pub(super) unsafe fn new(base: *mut u8, at: (usize, usize, usize), n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        RawRing {
            prod: base.add(at.0).cast(),
            cons: base.add(at.1).cast(),
            ents: base.add(at.2).cast(),
            mask: (n - 1) as u32,
        }
    }

    /// The producer index (free-running).
    #[inline]
    pub(super) fn prod(&self) -> &AtomicU32 {
        // SAFETY: in bounds and aligned by the layout; live by `new`'s
        // contract; atomics may be written concurrently by the peer.
        unsafe { &*self.prod }
    }

    /// The consumer index (free-running).
    #[inline]
    pub(super) fn cons(&self) -> &AtomicU32 {
        // SAFETY: as `prod`.
        unsafe { &*self.cons }
    }

    /// The entry for free-running index `i` (masked).
    #[inline]
    pub(super) fn ent(&self, i: u32) -> &E {
        // SAFETY: `i & mask < n`, so the entry lies inside the ring's
        // entries (layout); alignment 8 holds because the entries start on
        // a cache line and `E` is 8 or 16 bytes; live by `new`'s contract.
        unsafe { &*self.ents.add((i & self.mask) as usize) }
    }
}

/// A raw pointer to one shared flag word.
#[derive(Clone, Copy)]
pub(super) struct RawWord(*const AtomicU32);

impl RawWord {
    /// The word at offset `at` of the area at `base`.
    ///
    /// # Safety
    /// As [`RawRing::new`]: `at` is a `Line` offset of the layout and the
    /// mapping outlives every use.
    pub(super) unsafe fn new(base: *mut u8, at: usize) -> Self {
        RawWord(base.add(at).cast())
    }

    /// The word.
    #[inline]
    pub(super) fn get(&self) -> &AtomicU32 {
        // SAFETY: in bounds, aligned, live (constructor contract); atomic.
        unsafe { &*self.0 }
    }
}
