//! The four single-producer/single-consumer rings an AF_XDP socket shares
//! with the kernel, mapped into our address space.
//!
//! Each ring is a page-aligned mapping holding a producer index, a consumer
//! index, a flags word and an array of `size` descriptors (`size` a power of
//! two; indices run freely and are masked). One side only ever writes the
//! producer, the other only the consumer. The protocol, as the kernel's
//! `xsk_queue.h` spells it:
//!
//! - producer: write descriptors, then store the producer index with
//!   *release* ordering (publishes the descriptors);
//! - consumer: load the producer index with *acquire* ordering, read the
//!   descriptors, then store the consumer index with *release* ordering
//!   (hands the slots back only after the reads are done).
//!
//! We produce into the fill and TX rings and consume from the RX and
//! completion rings. Slots between the consumer and the producer index
//! belong to the consumer; the others to the producer — we read or write
//! only slots that belong to us, so the kernel never touches the same
//! descriptor concurrently.
#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// `XDP_RING_NEED_WAKEUP` in a ring's flags word.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// `struct xdp_ring_offset`: where the parts of a ring sit in its mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `struct xdp_desc`: an RX or TX descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// A ring mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly one live mapping made by
        // `Ring::map` and unmapped nowhere else; the ring that owned the
        // raw pointers into it is being dropped with it.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// One mapped ring with descriptors of type `T` (`u64` UMEM addresses for
/// the fill and completion rings, [`XdpDesc`] for RX and TX).
pub(super) struct Ring<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    /// Our copy of the index we own (the producer for fill/TX, the consumer
    /// for RX/completion), ahead of the shared one until published.
    local: u32,
    /// Last seen value of the index the kernel owns.
    cached: u32,
    _map: Mapping,
    _t: PhantomData<T>,
}

impl<T: Copy> Ring<T> {
    /// Map the ring of `size` entries at page offset `pgoff` of AF_XDP
    /// socket `fd`, laid out as `off` says. `we_produce`: we are the
    /// producer (fill, TX) rather than the consumer (RX, completion).
    pub fn map(
        fd: RawFd,
        pgoff: i64,
        size: u32,
        off: &RingOffset,
        we_produce: bool,
    ) -> io::Result<Ring<T>> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kernel reported an unusable AF_XDP ring layout ({what})"),
            )
        };
        if !size.is_power_of_two() {
            return Err(bad("size"));
        }
        let desc_bytes = (size as usize)
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| bad("size"))?;
        let len = usize::try_from(off.desc)
            .ok()
            .and_then(|d| d.checked_add(desc_bytes))
            .ok_or_else(|| bad("descriptor offset"))?;
        // Every part must lie inside the mapping and be aligned for its type,
        // so the pointers made below are valid for as long as we hold it.
        for (what, at, width, align) in [
            ("producer", off.producer, 4, 4),
            ("consumer", off.consumer, 4, 4),
            ("flags", off.flags, 4, 4),
            ("descriptors", off.desc, 0, std::mem::align_of::<T>() as u64),
        ] {
            if at.checked_add(width).is_none_or(|end| end > len as u64) || at % align != 0 {
                return Err(bad(what));
            }
        }
        // SAFETY: a fresh shared mapping of the socket's ring; no existing
        // memory is touched; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        let map = Mapping { ptr: base, len };
        // SAFETY: the offsets were checked to lie inside the `len`-byte
        // mapping just made (mmap returns page-aligned memory, so the
        // alignment checks on the offsets carry over to the addresses).
        let (producer, consumer, flags, descs) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        let mut r = Ring {
            producer,
            consumer,
            flags,
            descs,
            mask: size - 1,
            size,
            local: 0,
            cached: 0,
            _map: map,
            _t: PhantomData,
        };
        // A fresh ring starts at zero, but read what is there rather than
        // assume it.
        let (prod, cons) = (
            r.index(true).load(Ordering::Acquire),
            r.index(false).load(Ordering::Acquire),
        );
        (r.local, r.cached) = if we_produce {
            (prod, cons)
        } else {
            (cons, prod)
        };
        Ok(r)
    }

    fn index(&self, producer: bool) -> &AtomicU32 {
        let p = if producer {
            self.producer
        } else {
            self.consumer
        };
        // SAFETY: `p` points into our live mapping (checked in `map`),
        // 4-byte aligned; the kernel accesses these words only atomically
        // (READ_ONCE/WRITE_ONCE, smp_load_acquire/smp_store_release), so
        // viewing them as AtomicU32 for the lifetime of `&self` is sound.
        unsafe { &*p }
    }

    fn flags_word(&self) -> &AtomicU32 {
        // SAFETY: as `index`.
        unsafe { &*self.flags }
    }

    /// The kernel asks to be woken (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.flags_word().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Ring size in entries.
    pub fn size(&self) -> u32 {
        self.size
    }

    // --- Producer side (fill, TX) ---

    /// Free slots, at most `want`: re-reads the kernel's consumer index only
    /// when the cached view shows fewer than `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let mut free = self
            .size
            .saturating_sub(self.local.wrapping_sub(self.cached));
        if free < want {
            self.cached = self.index(false).load(Ordering::Acquire);
            free = self
                .size
                .saturating_sub(self.local.wrapping_sub(self.cached));
        }
        free.min(want)
    }

    /// Write `d` into the next free slot (invisible to the kernel until
    /// [`Ring::submit`]). Returns false, writing nothing, when full.
    pub fn push(&mut self, d: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        let slot = (self.local & self.mask) as usize;
        // SAFETY: slot < size, inside the descriptor array of our mapping;
        // the slot lies outside [consumer, producer) as the kernel last
        // published its consumer index, so it is ours to write and the kernel
        // reads it only after our release store in `submit`.
        unsafe { self.descs.add(slot).write(d) };
        self.local = self.local.wrapping_add(1);
        true
    }

    /// Publish the pushed entries to the kernel.
    pub fn submit(&mut self) {
        self.index(true).store(self.local, Ordering::Release);
    }

    /// Entries published (or pushed) that the kernel has not consumed yet.
    pub fn unconsumed(&mut self) -> u32 {
        self.cached = self.index(false).load(Ordering::Acquire);
        self.local.wrapping_sub(self.cached).min(self.size)
    }

    // --- Consumer side (RX, completion) ---

    /// Entries ready to read, at most `max`: re-reads the kernel's producer
    /// index when fewer than `max` are known.
    pub fn ready(&mut self, max: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n < max {
            self.cached = self.index(true).load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        // A producer index more than `size` ahead would be a kernel bug;
        // never read past one lap.
        n.min(self.size).min(max)
    }

    /// The `i`-th ready entry (`i` below what [`Ring::ready`] returned).
    pub fn read(&self, i: u32) -> T {
        let avail = self.cached.wrapping_sub(self.local).min(self.size);
        assert!(i < avail, "AF_XDP ring read past the producer");
        let slot = (self.local.wrapping_add(i) & self.mask) as usize;
        // SAFETY: slot < size, inside our mapping; it lies in
        // [consumer, producer) as published with release ordering by the
        // kernel and loaded with acquire ordering in `ready`, so its
        // contents are complete and the kernel will not rewrite it until we
        // move the consumer index past it in `release`.
        unsafe { self.descs.add(slot).read() }
    }

    /// Hand `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.local = self.local.wrapping_add(n);
        self.index(false).store(self.local, Ordering::Release);
    }
}
