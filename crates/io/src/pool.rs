//! Per-core packet-buffer pools: one memory region cut into fixed-size
//! chunks, and [`PacketBuf`] handles that own one chunk each.
//!
//! The region is an anonymous mapping (hugepage-backed when asked and
//! available) or a mapping supplied by a backend (an AF_XDP UMEM is just a
//! pool's region; a shared-memory wire maps a memfd). A chunk is always in
//! exactly one place: the free list, one `PacketBuf`, or *lent* to a device
//! (the kernel's fill or transmit ring, a peer process). A bitmap records
//! lent chunks, so taking one back is checked: an index that was not lent
//! (a device bug, a corrupted or malicious descriptor from another process)
//! is refused instead of creating two handles to one chunk.
//!
//! The pool is `!Send`: it and its buffers belong to the core that made it.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::io;
use std::ptr::NonNull;
use std::rc::Rc;

/// A mapped memory region.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    hugepages: bool,
}

impl Region {
    /// An anonymous private mapping of `len` bytes, populated. With
    /// `hugepages`, 2 MiB pages are tried first (falling back to 4 KiB
    /// pages when none are reserved).
    pub fn anonymous(len: usize, hugepages: bool) -> io::Result<Region> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if hugepages {
            let huge_len = len.next_multiple_of(2 << 20);
            // SAFETY: an anonymous mapping with no address hint touches no
            // existing memory; the result is checked against MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    huge_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    base | libc::MAP_HUGETLB,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Region {
                    ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
                    len: huge_len,
                    hugepages: true,
                });
            }
        }
        // SAFETY: as above.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                base,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            hugepages: false,
        })
    }

    /// A shared mapping of `len` bytes of `fd` from `offset` (for memory
    /// shared with another process). The region unmaps on drop; the file
    /// descriptor is not taken.
    pub fn map_shared(fd: std::os::fd::RawFd, len: usize, offset: i64) -> io::Result<Region> {
        // SAFETY: a fresh shared mapping of a file the caller opened; no
        // existing memory is touched; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            hugepages: false,
        })
    }

    /// Start of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (regions are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Backed by hugepages?
    pub fn hugepages(&self) -> bool {
        self.hugepages
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly one mapping made by this
        // type and not unmapped before; nothing borrows it any more (pools
        // and their buffers hold an `Rc` to the region's owner).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: a Region is plain memory with no thread affinity; moving the
// owner to another thread is sound. (Pools built on it are !Send.)
unsafe impl Send for Region {}

/// How to build a pool.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// Number of chunks.
    pub chunks: u32,
    /// Bytes per chunk: a power of two from 2048 (AF_XDP needs 2048 or
    /// 4096 for its UMEM).
    pub chunk_size: usize,
    /// Bytes reserved at the front of each chunk before the frame.
    pub headroom: u16,
    /// Back the pool with 2 MiB hugepages when the machine has them.
    pub hugepages: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            chunks: 4096,
            chunk_size: 2048,
            headroom: 0,
            hugepages: true,
        }
    }
}

struct Inner {
    region: Region,
    chunk: usize,
    nchunks: u32,
    headroom: u16,
    free: RefCell<Vec<u32>>,
    /// One bit per chunk: lent to a device.
    lent: RefCell<Vec<u64>>,
    alloc_failures: Cell<u64>,
}

/// A pool of packet buffers owned by one core.
#[derive(Clone)]
pub struct Pool {
    inner: Rc<Inner>,
}

impl Pool {
    /// A pool in a fresh anonymous region.
    pub fn new(cfg: PoolConfig) -> io::Result<Pool> {
        Self::check(&cfg)?;
        let len = cfg.chunks as usize * cfg.chunk_size;
        let region = Region::anonymous(len, cfg.hugepages)?;
        Ok(Self::with_region(region, cfg))
    }

    /// A pool over a region a backend mapped (it must hold `cfg.chunks`
    /// chunks of `cfg.chunk_size`).
    pub fn from_region(region: Region, cfg: PoolConfig) -> io::Result<Pool> {
        Self::check(&cfg)?;
        if (cfg.chunks as usize) * cfg.chunk_size > region.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "region smaller than the pool's chunks",
            ));
        }
        Ok(Self::with_region(region, cfg))
    }

    fn check(cfg: &PoolConfig) -> io::Result<()> {
        if !cfg.chunk_size.is_power_of_two() || cfg.chunk_size < 2048 || cfg.chunk_size > 65536 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pool chunk_size {} is not a power of two in 2048..=65536",
                    cfg.chunk_size
                ),
            ));
        }
        if cfg.chunks == 0 || usize::from(cfg.headroom) >= cfg.chunk_size / 2 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "pool needs at least one chunk and headroom below half a chunk",
            ));
        }
        Ok(())
    }

    fn with_region(region: Region, cfg: PoolConfig) -> Pool {
        // Hand out low indices first (better locality).
        let free: Vec<u32> = (0..cfg.chunks).rev().collect();
        let words = (cfg.chunks as usize).div_ceil(64);
        Pool {
            inner: Rc::new(Inner {
                region,
                chunk: cfg.chunk_size,
                nchunks: cfg.chunks,
                headroom: cfg.headroom,
                free: RefCell::new(free),
                lent: RefCell::new(vec![0; words]),
                alloc_failures: Cell::new(0),
            }),
        }
    }

    /// A free buffer (empty, at the headroom), or `None` when exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<PacketBuf> {
        match self.inner.free.borrow_mut().pop() {
            Some(idx) => Some(PacketBuf {
                pool: self.inner.clone(),
                idx,
                off: self.inner.headroom,
                len: 0,
                csum: None,
            }),
            None => {
                self.inner
                    .alloc_failures
                    .set(self.inner.alloc_failures.get() + 1);
                None
            }
        }
    }

    /// A buffer holding a copy of `data` (for backends that must copy).
    pub fn copy_in(&self, data: &[u8]) -> Option<PacketBuf> {
        let mut b = self.alloc()?;
        let room = b.capacity();
        if data.len() > room {
            return None;
        }
        b.spare_mut()[..data.len()].copy_from_slice(data);
        b.set_len(data.len());
        Some(b)
    }

    /// Lend a free chunk to a device (a receive fill ring); returns its
    /// index, or `None` when the pool is exhausted.
    pub fn lend(&self) -> Option<u32> {
        self.alloc().map(PacketBuf::into_raw)
    }

    /// Take back a lent chunk as a frame of `len` bytes at `off`. Refused
    /// (`None`, chunk left as it was) unless `idx` is lent and the frame
    /// fits the chunk — so a bad descriptor can never alias a buffer.
    pub fn adopt(&self, idx: u32, off: usize, len: usize) -> Option<PacketBuf> {
        if idx >= self.inner.nchunks || off.checked_add(len)? > self.inner.chunk {
            return None;
        }
        if !self.take_lent(idx) {
            return None;
        }
        Some(PacketBuf {
            pool: self.inner.clone(),
            idx,
            off: off as u16,
            len: len as u16,
            csum: None,
        })
    }

    /// A lent chunk comes back unused (a transmit completion): free it.
    /// Returns false (and does nothing) if it was not lent.
    pub fn give_back(&self, idx: u32) -> bool {
        if idx >= self.inner.nchunks || !self.take_lent(idx) {
            return false;
        }
        self.inner.free.borrow_mut().push(idx);
        true
    }

    fn take_lent(&self, idx: u32) -> bool {
        let mut lent = self.inner.lent.borrow_mut();
        let (w, b) = ((idx / 64) as usize, idx % 64);
        if lent[w] & (1 << b) == 0 {
            return false;
        }
        lent[w] &= !(1 << b);
        true
    }

    /// Free buffers.
    pub fn available(&self) -> usize {
        self.inner.free.borrow().len()
    }

    /// Chunks lent to devices.
    pub fn lent(&self) -> usize {
        self.inner
            .lent
            .borrow()
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// Allocations refused because the pool was empty.
    pub fn alloc_failures(&self) -> u64 {
        self.inner.alloc_failures.get()
    }

    /// Start of the region (for registering it with a device).
    pub fn base(&self) -> *mut u8 {
        self.inner.region.as_ptr()
    }

    /// Length of the region in bytes.
    pub fn region_len(&self) -> usize {
        self.inner.nchunks as usize * self.inner.chunk
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> usize {
        self.inner.chunk
    }

    /// Number of chunks.
    pub fn chunks(&self) -> u32 {
        self.inner.nchunks
    }

    /// Headroom before each frame.
    pub fn headroom(&self) -> u16 {
        self.inner.headroom
    }

    /// Is the region backed by hugepages?
    pub fn hugepages(&self) -> bool {
        self.inner.region.hugepages()
    }
}

/// Bytes of a receive stamp in a frame's headroom, just before the frame:
/// `CLOCK_MONOTONIC` nanoseconds when it was received (`u64`, native
/// order), then [`RX_STAMP_MAGIC`]. A backend puts it there (AF_XDP's XDP
/// program, as metadata; others with [`PacketBuf::set_rx_stamp`]); the
/// stack reads it with [`PacketBuf::take_rx_stamp`] for the frames it
/// stamps (UDP, for `SO_TIMESTAMP*`).
pub const RX_STAMP_LEN: usize = 16;

/// The word after a receive stamp that says it is one: a chunk's headroom
/// may hold anything else (a transmitted frame's offload metadata, or
/// nothing the kernel copied).
pub const RX_STAMP_MAGIC: u64 = 0x6978_6f72_615f_7473; // "ixora_ts"

/// One packet buffer: a chunk of its core's pool, holding a frame of `len`
/// bytes at offset `off`. Dropping it returns the chunk to the pool.
pub struct PacketBuf {
    pool: Rc<Inner>,
    idx: u32,
    off: u16,
    len: u16,
    /// A TCP/UDP checksum left for the device to complete: (start,
    /// offset) as Linux's `csum_start`/`csum_offset`, from the frame start.
    csum: Option<(u16, u16)>,
}

impl PacketBuf {
    #[inline]
    fn chunk_ptr(&self) -> *mut u8 {
        // SAFETY: idx < nchunks (checked when the buffer was made), so the
        // offset stays inside the region.
        unsafe {
            self.pool
                .region
                .as_ptr()
                .add(self.idx as usize * self.pool.chunk)
        }
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// No bytes?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes from the frame start to the end of the chunk.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.pool.chunk - usize::from(self.off)
    }

    /// Set the frame length (at most `capacity()`).
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "frame longer than its buffer");
        self.len = len as u16;
    }

    /// The frame.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: this handle owns the chunk exclusively (pool invariant), so
        // no `&mut` to these bytes exists elsewhere; off + len <= chunk.
        unsafe {
            std::slice::from_raw_parts(self.chunk_ptr().add(usize::from(self.off)), self.len())
        }
    }

    /// The frame, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: exclusive ownership of the chunk and `&mut self` make this
        // the only reference to these bytes; off + len <= chunk.
        unsafe {
            std::slice::from_raw_parts_mut(self.chunk_ptr().add(usize::from(self.off)), self.len())
        }
    }

    /// Everything from the frame start to the end of the chunk, writable
    /// (write a frame here, then `set_len`).
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [u8] {
        let cap = self.capacity();
        // SAFETY: as `as_mut_slice`; off + capacity == chunk size.
        unsafe { std::slice::from_raw_parts_mut(self.chunk_ptr().add(usize::from(self.off)), cap) }
    }

    /// Leave this frame's checksum to the device (checksum offload): the
    /// 16-bit field at `start + offset` holds only the pseudo-header sum,
    /// and the device sums everything from `start` on, as Linux does for a
    /// `CHECKSUM_PARTIAL` frame. Only for a port whose
    /// [`Caps::tx_checksum_offload`](crate::Caps::tx_checksum_offload) is
    /// set; [`complete_checksum`](Self::complete_checksum) does it in
    /// software.
    #[inline]
    pub fn set_partial_checksum(&mut self, start: u16, offset: u16) {
        self.csum = Some((start, offset));
    }

    /// The checksum left to the device, if any: (start, offset).
    #[inline]
    pub fn partial_checksum(&self) -> Option<(u16, u16)> {
        self.csum
    }

    /// Put receive stamp `mono_ns` (`CLOCK_MONOTONIC`) before the frame
    /// ([`RX_STAMP_LEN`]); false if the headroom has no room for it.
    pub fn set_rx_stamp(&mut self, mono_ns: u64) -> bool {
        let Some(h) = self.stamp_bytes() else {
            return false;
        };
        h[..8].copy_from_slice(&mono_ns.to_ne_bytes());
        h[8..].copy_from_slice(&RX_STAMP_MAGIC.to_ne_bytes());
        true
    }

    /// The receive stamp before the frame (`CLOCK_MONOTONIC` ns), if a
    /// backend put one there; taken: its magic is cleared, so the chunk's
    /// next frame never shows it.
    pub fn take_rx_stamp(&mut self) -> Option<u64> {
        let h = self.stamp_bytes()?;
        let magic = u64::from_ne_bytes(h[8..].try_into().ok()?);
        if magic != RX_STAMP_MAGIC {
            return None;
        }
        h[8..].fill(0);
        Some(u64::from_ne_bytes(h[..8].try_into().ok()?))
    }

    fn stamp_bytes(&mut self) -> Option<&mut [u8]> {
        let h = self.headroom_mut();
        let n = h.len();
        n.checked_sub(RX_STAMP_LEN).map(|s| &mut h[s..])
    }

    /// Complete a checksum left to the device here, in software (a port or
    /// a frame that cannot take the offload). False, frame untouched, if
    /// the positions lie outside the frame.
    pub fn complete_checksum(&mut self) -> bool {
        match self.csum.take() {
            None => true,
            Some((start, offset)) => crate::complete_checksum(
                self.as_mut_slice(),
                usize::from(start),
                usize::from(offset),
            ),
        }
    }

    /// The chunk's bytes before the frame (its headroom), writable: where
    /// a device expects per-frame metadata.
    #[inline]
    pub fn headroom_mut(&mut self) -> &mut [u8] {
        // SAFETY: exclusive ownership of the chunk and `&mut self` make this
        // the only reference to these bytes; off <= chunk size.
        unsafe { std::slice::from_raw_parts_mut(self.chunk_ptr(), usize::from(self.off)) }
    }

    /// Chunk index in the pool.
    #[inline]
    pub fn index(&self) -> u32 {
        self.idx
    }

    /// Offset of the frame in its chunk.
    #[inline]
    pub fn offset(&self) -> usize {
        usize::from(self.off)
    }

    /// Address of the frame relative to the region start (an AF_XDP UMEM
    /// address).
    #[inline]
    pub fn addr(&self) -> u64 {
        (self.idx as u64) * self.pool.chunk as u64 + u64::from(self.off)
    }

    /// Lend the chunk to a device; it comes back through
    /// [`Pool::adopt`] or [`Pool::give_back`].
    pub fn into_raw(self) -> u32 {
        let idx = self.idx;
        {
            let mut lent = self.pool.lent.borrow_mut();
            lent[(idx / 64) as usize] |= 1 << (idx % 64);
        }
        // The chunk now belongs to the device, not the free list.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this.pool` is a valid Rc we are forgetting the owner of;
        // reading it out and dropping it releases exactly one reference.
        drop(unsafe { std::ptr::read(&this.pool) });
        idx
    }
}

impl AsRef<[u8]> for PacketBuf {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PacketBuf(#{} +{} len {})", self.idx, self.off, self.len)
    }
}

impl Drop for PacketBuf {
    #[inline]
    fn drop(&mut self) {
        self.pool.free.borrow_mut().push(self.idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: u32) -> Pool {
        Pool::new(PoolConfig {
            chunks: n,
            hugepages: false,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn alloc_write_free() {
        let p = pool(4);
        let mut a = p.alloc().unwrap();
        a.spare_mut()[..3].copy_from_slice(b"abc");
        a.set_len(3);
        assert_eq!(a.as_slice(), b"abc");
        let b = p.alloc().unwrap();
        assert_ne!(a.index(), b.index());
        assert_eq!(p.available(), 2);
        drop(a);
        drop(b);
        assert_eq!(p.available(), 4);
    }

    #[test]
    fn a_receive_stamp_is_read_once_and_only_where_one_was_put() {
        let p = pool(2);
        let i = p.lend().unwrap();
        // No headroom before the frame: no stamp fits, none is read.
        let mut b = p.adopt(i, 0, 10).unwrap();
        assert!(!b.set_rx_stamp(5));
        assert_eq!(b.take_rx_stamp(), None);
        drop(b);
        let i = p.lend().unwrap();
        let mut b = p.adopt(i, 256, 10).unwrap();
        // Whatever the headroom held is not a stamp.
        b.headroom_mut().fill(0xab);
        assert_eq!(b.take_rx_stamp(), None);
        assert!(b.set_rx_stamp(123_456_789));
        assert_eq!(b.take_rx_stamp(), Some(123_456_789));
        // Taken: the chunk's next frame does not show it.
        assert_eq!(b.take_rx_stamp(), None);
    }

    #[test]
    fn exhaustion_is_counted() {
        let p = pool(1);
        let _a = p.alloc().unwrap();
        assert!(p.alloc().is_none());
        assert_eq!(p.alloc_failures(), 1);
    }

    #[test]
    fn lend_adopt_give_back() {
        let p = pool(4);
        let i = p.lend().unwrap();
        assert_eq!(p.lent(), 1);
        // Not lent: refused.
        assert!(p.adopt(i + 1, 0, 10).is_none());
        assert!(!p.give_back(i + 1));
        // Out of range or too long: refused.
        assert!(p.adopt(99, 0, 10).is_none());
        assert!(p.adopt(i, 2000, 100).is_none());
        let b = p.adopt(i, 64, 100).unwrap();
        assert_eq!((b.offset(), b.len()), (64, 100));
        // Adopted once only.
        assert!(p.adopt(i, 64, 100).is_none());
        drop(b);
        let j = p.lend().unwrap();
        assert!(p.give_back(j));
        assert!(!p.give_back(j));
        assert_eq!(p.available(), 4);
        assert_eq!(p.lent(), 0);
    }

    #[test]
    fn pool_outlives_nothing_it_lent() {
        // Buffers keep the region alive after the pool handle is gone.
        let b = {
            let p = pool(2);
            p.copy_in(b"hello").unwrap()
        };
        assert_eq!(b.as_slice(), b"hello");
    }

    #[test]
    fn bad_configs_are_refused() {
        for (chunk, headroom) in [(1000, 0), (2048, 1024), (1 << 20, 0)] {
            let cfg = PoolConfig {
                chunks: 2,
                chunk_size: chunk,
                headroom,
                hugepages: false,
            };
            assert!(Pool::new(cfg).is_err(), "{chunk} {headroom}");
        }
    }
}
