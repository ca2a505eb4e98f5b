//! The AF_XDP backend: frames move between the interface and the core's
//! [`Pool`] through an AF_XDP socket per queue, with our own XDP program
//! steering each queue's frames to its socket (and stamping IPv4 UDP
//! frames with their receive time: [`PacketBuf::take_rx_stamp`]). No
//! libbpf or libxdp: the program is 31 instruction slots loaded with raw
//! `bpf(2)` (see `bpf`), the rings are mapped and driven here (see
//! `ring`).
//!
//! Setup, in order:
//!
//! - [`AfXdpPort::open`] (main thread, in the interface's network
//!   namespace) creates an XSKMAP with one slot per queue, loads the
//!   redirect program, and attaches it with a BPF link — native (driver)
//!   mode, or generic (skb) mode, or native falling back to skb. The link
//!   file descriptor belongs to the port: dropping the port, or the process
//!   ending in any way, detaches the program.
//! - [`Port::open_queue`] (on the core's thread, same namespace) registers
//!   the core's whole pool region as the socket's UMEM, sizes and maps the
//!   fill, completion, RX and TX rings, binds the socket to the queue, lends
//!   about half the pool to the fill ring, and only then puts the socket in
//!   the XSKMAP. Until a queue's socket is in the map its frames go to the
//!   kernel stack (the program's fallback action is `XDP_PASS`), and so do
//!   frames of queues beyond the map.
//!
//! What the engine must know:
//!
//! - **Chunks lent to the kernel.** The fill ring holds
//!   `min(ring_size, chunks / 2)` chunks at all times; frames the engine
//!   holds and frames in flight on TX come out of the rest. If the pool runs
//!   dry the fill ring is not topped up (counted in
//!   [`AfXdpStats::fill_starved`]) and the kernel drops frames
//!   ([`AfXdpStats::kernel_fill_ring_empty`]). A dropped queue leaves the
//!   chunks it had lent marked lent: the kernel may touch them until the
//!   socket is really gone, so the pool never reuses them.
//! - **Transmit.** Frames should come from the queue's own pool; a frame
//!   from another pool is copied into this one. In copy mode (always the
//!   case on veth) the kernel sends only inside `sendto()`, so `tx_burst`
//!   kicks every time it posts, and `reclaim()` kicks again if frames are
//!   still waiting in the ring. Completions are read in `tx_burst` and
//!   `reclaim()`.
//! - **need_wakeup** (on by default) lets a zero-copy driver sleep instead
//!   of spinning; the queue wakes it when the ring flags ask. It changes
//!   nothing in copy mode.
//! - **Re-binding.** After a socket on a queue closes, binding a new one to
//!   the same queue fails with `EBUSY` for a while (the kernel frees the old
//!   buffer pool from a work queue; 20–70 ms measured on an idle machine, up
//!   to about a second seen under load; longer if a child process forked at
//!   that moment still holds the old descriptor); `open_queue` retries for
//!   up to two seconds.
//! - **Checksums.** On veth, frames sent by the Linux peer with checksum
//!   offload on (veth's default) arrive with the TCP/UDP checksum field
//!   holding only the pseudo-header sum, in native and in skb mode alike, so
//!   [`Caps::rx_checksum_unreliable`] is set for veth. On transmit, a
//!   frame flagged with [`PacketBuf::set_partial_checksum`] gets a
//!   `struct xsk_tx_metadata` ([`TX_META_LEN`] bytes, right before the
//!   frame in its chunk) asking the kernel to complete the checksum, and
//!   the kernel passes it on as `CHECKSUM_PARTIAL` (the UMEM is registered
//!   with `XDP_UMEM_TX_METADATA_LEN`, only for a pool whose headroom
//!   holds the metadata); without kernel support, in zero-copy mode, or
//!   with a pool without that headroom, the queue completes it in
//!   software.
//! - **Queues on veth** are chosen by the *sender's* transmit hash of each
//!   flow (its socket), not by CPU: a UDP flow stays on one queue, a TCP
//!   flow can move when the sender re-hashes it. Hence no
//!   [`Caps::flow_steering`].
//! - **skb mode** keeps the veth peer's segmentation offloads on, so
//!   TSO/USO super-frames arrive whole, do not fit a chunk, and are dropped
//!   (counted in [`AfXdpStats::kernel_rx_dropped`]); native mode makes the
//!   peer segment. Prefer native; in skb mode turn TSO/USO off on the
//!   sender.
#![allow(unsafe_code)]

mod bpf;
mod ring;

use crate::{port_error, sys, Caps, PacketBuf, Pool, PoolConfig, Port, Queue};
use ixora_wire::ethernet::MacAddr;
use ring::{MmapOffsets, Ring, XdpDesc};
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// linux/if_xdp.h
const SOL_XDP: c_int = 283;
const XDP_MMAP_OFFSETS: c_int = 1;
const XDP_RX_RING: c_int = 2;
const XDP_TX_RING: c_int = 3;
const XDP_UMEM_REG: c_int = 4;
const XDP_UMEM_FILL_RING: c_int = 5;
const XDP_UMEM_COMPLETION_RING: c_int = 6;
const XDP_STATISTICS: c_int = 7;
const XDP_OPTIONS: c_int = 8;
/// Frames one copy-mode `sendto()` may send (Linux 6.17+; 32 before).
const XDP_MAX_TX_SKB_BUDGET: c_int = 9;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;
/// `xdp_umem_reg.flags`: honour `tx_metadata_len` (recent kernels; older
/// kernels refuse the flag).
const XDP_UMEM_TX_METADATA_LEN: u32 = 1 << 2;
/// `xdp_desc.options`: `struct xsk_tx_metadata` precedes the frame.
const XDP_TX_METADATA: u32 = 1 << 1;
/// `xsk_tx_metadata.flags`: complete the checksum at
/// `csum_start + csum_offset`.
const XDP_TXMD_FLAGS_CHECKSUM: u64 = 1 << 1;
/// `sizeof(struct xsk_tx_metadata)` (flags; csum_start, csum_offset,
/// launch_time): the bytes reserved before each transmitted frame.
pub const TX_META_LEN: usize = 24;

/// Bytes the kernel keeps in front of every received frame in a chunk.
const XDP_PACKET_HEADROOM: usize = 256;
/// Ethernet header plus one VLAN tag plus FCS room: `max_frame = MTU + 18`.
const FRAME_OVERHEAD: usize = 18;

/// How long `open_queue` keeps retrying a bind that fails with `EBUSY`.
const BIND_RETRY: Duration = Duration::from_secs(2);
/// How often an idle queue refreshes the kernel's drop counters.
const KERNEL_STATS_EVERY: Duration = Duration::from_millis(100);

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Native if the driver takes it, else generic (skb).
    #[default]
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic XDP, on the skb after the driver (works on any interface).
    Skb,
}

/// Whether frames may move without a copy between the device and the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy when the driver offers it (native attach only), else copy.
    #[default]
    Auto,
    /// Zero-copy or fail.
    On,
    /// Always copy.
    Off,
}

/// How to open an AF_XDP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Queues to serve (one per core); `None`: all the interface has.
    pub queues: Option<u32>,
    /// Where the XDP program runs.
    pub mode: XdpMode,
    /// Zero-copy policy.
    pub zero_copy: ZeroCopy,
    /// Entries in each of the four rings of a queue: a power of two from 64
    /// to 65536 (default 2048).
    pub ring_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP` (default true).
    pub need_wakeup: bool,
    /// Take frames whose TCP/UDP checksum is left partial
    /// ([`PacketBuf::set_partial_checksum`]) and have the kernel complete
    /// it from TX metadata (default true; see the module docs).
    pub tx_checksum_offload: bool,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            queues: None,
            mode: XdpMode::Auto,
            zero_copy: ZeroCopy::Auto,
            ring_size: 2048,
            need_wakeup: true,
            tx_checksum_offload: true,
        }
    }
}

/// Counters of an AF_XDP queue (or of all queues of a port, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames received and handed to the caller.
    pub rx_frames: u64,
    /// Frames whose transmission the kernel completed.
    pub tx_frames: u64,
    /// Frames taken by `tx_burst` but not sent: empty, longer than the
    /// port's `max_frame`, or from another pool when this one had no chunk
    /// to copy them into.
    pub tx_dropped: u64,
    /// Descriptors from the kernel naming a chunk that was not lent to it
    /// (refused by the pool). Always zero unless something is broken.
    pub bad_descs: u64,
    /// Times the fill ring could not be topped up because the pool was
    /// empty.
    pub fill_starved: u64,
    /// `sendto()` / `recvfrom()` calls made to wake the kernel.
    pub kicks: u64,
    /// Kernel: frames dropped for want of a fill-ring buffer or too long
    /// for a chunk (`XDP_STATISTICS`; these and the other kernel counters
    /// are refreshed at most every 100 ms, when the queue is polled idle).
    pub kernel_rx_dropped: u64,
    /// Kernel: frames dropped because the RX ring was full.
    pub kernel_rx_ring_full: u64,
    /// Kernel: times it found the fill ring empty.
    pub kernel_fill_ring_empty: u64,
    /// Kernel: invalid RX descriptors.
    pub kernel_rx_invalid_descs: u64,
    /// Kernel: invalid TX descriptors (their chunks are not completed).
    pub kernel_tx_invalid_descs: u64,
    /// Frames sent with their TCP/UDP checksum left to the kernel (TX
    /// metadata).
    pub tx_csum_offloaded: u64,
    /// Frames whose partial checksum was completed here in software (the
    /// kernel lacks TX metadata, the queue is zero-copy, or the frame had
    /// no headroom for the metadata).
    pub tx_csum_software: u64,
}

impl AfXdpStats {
    /// Take the kernel's counters from `XDP_STATISTICS` (`len` bytes of
    /// it filled: kernels before 5.9 lack the last three).
    fn set_kernel(&mut self, k: &XdpStatistics, len: usize) {
        self.kernel_rx_dropped = k.rx_dropped;
        self.kernel_rx_invalid_descs = k.rx_invalid_descs;
        self.kernel_tx_invalid_descs = k.tx_invalid_descs;
        if len >= std::mem::size_of::<XdpStatistics>() {
            self.kernel_rx_ring_full = k.rx_ring_full;
            self.kernel_fill_ring_empty = k.rx_fill_ring_empty_descs;
        }
    }

    fn add(&mut self, o: &AfXdpStats) {
        self.rx_frames += o.rx_frames;
        self.tx_frames += o.tx_frames;
        self.tx_dropped += o.tx_dropped;
        self.bad_descs += o.bad_descs;
        self.fill_starved += o.fill_starved;
        self.kicks += o.kicks;
        self.kernel_rx_dropped += o.kernel_rx_dropped;
        self.kernel_rx_ring_full += o.kernel_rx_ring_full;
        self.kernel_fill_ring_empty += o.kernel_fill_ring_empty;
        self.kernel_rx_invalid_descs += o.kernel_rx_invalid_descs;
        self.kernel_tx_invalid_descs += o.kernel_tx_invalid_descs;
        self.tx_csum_offloaded += o.tx_csum_offloaded;
        self.tx_csum_software += o.tx_csum_software;
    }
}

const NSTATS: usize = 13;

/// One queue's published counters, written only by that queue's core; on a
/// line of its own so cores do not share it.
#[repr(align(128))]
#[derive(Default)]
struct QueueCounters([AtomicU64; NSTATS]);

impl QueueCounters {
    fn publish(&self, s: &AfXdpStats) {
        let v = [
            s.rx_frames,
            s.tx_frames,
            s.tx_dropped,
            s.bad_descs,
            s.fill_starved,
            s.kicks,
            s.kernel_rx_dropped,
            s.kernel_rx_ring_full,
            s.kernel_fill_ring_empty,
            s.kernel_rx_invalid_descs,
            s.kernel_tx_invalid_descs,
            s.tx_csum_offloaded,
            s.tx_csum_software,
        ];
        for (c, v) in self.0.iter().zip(v) {
            c.store(v, Ordering::Relaxed);
        }
    }

    fn read(&self) -> AfXdpStats {
        let v: [u64; NSTATS] = std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed));
        AfXdpStats {
            rx_frames: v[0],
            tx_frames: v[1],
            tx_dropped: v[2],
            bad_descs: v[3],
            fill_starved: v[4],
            kicks: v[5],
            kernel_rx_dropped: v[6],
            kernel_rx_ring_full: v[7],
            kernel_fill_ring_empty: v[8],
            kernel_rx_invalid_descs: v[9],
            kernel_tx_invalid_descs: v[10],
            tx_csum_offloaded: v[11],
            tx_csum_software: v[12],
        }
    }
}

/// Zero-copy state learnt when the first queue binds.
const ZC_UNKNOWN: u8 = 0;
const ZC_COPY: u8 = 1;
const ZC_ON: u8 = 2;

/// State the port shares with its queues.
struct Shared {
    /// Queue `i` has a live socket from this port.
    open: Vec<AtomicBool>,
    counters: Vec<QueueCounters>,
    /// Each open queue's socket (-1: none), for reading the kernel's
    /// counters when they are asked for: a queue refreshes its own only
    /// when polled idle, and a sleeping service polls nothing. The queue
    /// clears it, under the lock, before it closes the socket.
    sockets: Vec<Mutex<RawFd>>,
    zc: AtomicU8,
}

/// An interface opened for AF_XDP: our XDP program attached, one AF_XDP
/// socket per opened queue.
///
/// Dropping the port detaches the program (queues still open stop
/// receiving; their sockets close when they drop).
pub struct AfXdpPort {
    // Drop order: the link first (`Drop` detaches it, closing releases
    // it), then the program, then the map.
    link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    iface: String,
    ifindex: u32,
    mac: MacAddr,
    mtu: u32,
    queues: u32,
    cfg: AfXdpConfig,
    /// Native or Skb: where the program actually runs.
    attached: XdpMode,
    /// Why native attach was refused when `Auto` fell back to skb.
    native_refused: Option<String>,
    driver: String,
    shared: Arc<Shared>,
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        // Detach explicitly: closing the link descriptor detaches only when
        // it is the last reference, and a child process forked elsewhere in
        // the program holds one until it execs. (If the process dies, the
        // kernel closes every reference and the program goes anyway.)
        let _ = bpf::detach_link(&self.link);
    }
}

fn errno_is(e: &io::Error, codes: &[c_int]) -> bool {
    e.raw_os_error().is_some_and(|c| codes.contains(&c))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl AfXdpPort {
    /// Open `iface` (in the calling thread's network namespace): load and
    /// attach the redirect program. Queues are opened per core with
    /// [`Port::open_queue`]. Fails if another XDP program is already
    /// attached to the interface.
    pub fn open(iface: &str, cfg: AfXdpConfig) -> io::Result<AfXdpPort> {
        let fail = |e: io::Error| port_error("AF_XDP: cannot open", iface, e);
        if !cfg.ring_size.is_power_of_two() || !(64..=65536).contains(&cfg.ring_size) {
            return Err(fail(invalid(format!(
                "ring_size {} is not a power of two in 64..=65536",
                cfg.ring_size
            ))));
        }
        if cfg.zero_copy == ZeroCopy::On && cfg.mode == XdpMode::Skb {
            return Err(fail(invalid(
                "zero-copy needs the XDP program in native mode, not skb mode".into(),
            )));
        }
        let ifindex = sys::ifindex(iface).map_err(fail)?;
        let mac = sys::hwaddr(iface).map_err(fail)?;
        let mtu = sys::mtu(iface).map_err(fail)?;
        let have = sys::rx_queues(iface);
        let queues = match cfg.queues {
            None => have,
            Some(n) if n == 0 || n > have => {
                return Err(fail(invalid(format!(
                    "{n} queues asked for, the interface has {have}"
                ))))
            }
            Some(n) => n,
        };
        let driver = sys::driver(iface).unwrap_or_default();

        let map = bpf::create_xskmap(queues).map_err(|e| {
            fail(io::Error::new(
                e.kind(),
                format!("creating the XSKMAP: {e}"),
            ))
        })?;
        let prog = bpf::load_redirect_prog(&map).map_err(fail)?;

        let attach = |mode: XdpMode| {
            let flags = if mode == XdpMode::Skb {
                bpf::XDP_FLAGS_SKB_MODE
            } else {
                bpf::XDP_FLAGS_DRV_MODE
            };
            bpf::attach_xdp_link(&prog, ifindex, flags)
        };
        let attach_error = |mode: &str, e: io::Error| {
            let msg = if errno_is(&e, &[libc::EBUSY, libc::EEXIST]) {
                format!(
                    "an XDP program is already attached to {iface} (another AfXdpPort, or a \
                     tool: see `ip link show dev {iface}`); AF_XDP needs the interface to itself \
                     ({e})"
                )
            } else if errno_is(&e, &[libc::EPERM, libc::EACCES]) {
                format!("attaching XDP needs CAP_NET_ADMIN and CAP_BPF ({e})")
            } else {
                format!("attaching the XDP program in {mode} mode: {e}")
            };
            fail(io::Error::new(e.kind(), msg))
        };
        let (link, attached, native_refused) = match cfg.mode {
            XdpMode::Native => (
                attach(XdpMode::Native).map_err(|e| attach_error("native", e))?,
                XdpMode::Native,
                None,
            ),
            XdpMode::Skb => (
                attach(XdpMode::Skb).map_err(|e| attach_error("skb", e))?,
                XdpMode::Skb,
                None,
            ),
            XdpMode::Auto => match attach(XdpMode::Native) {
                Ok(l) => (l, XdpMode::Native, None),
                // Busy or forbidden: skb mode would fail the same way. And
                // zero-copy is impossible in skb mode.
                Err(e)
                    if errno_is(&e, &[libc::EBUSY, libc::EEXIST, libc::EPERM])
                        || cfg.zero_copy == ZeroCopy::On =>
                {
                    return Err(attach_error("native", e))
                }
                Err(native) => (
                    attach(XdpMode::Skb).map_err(|e| attach_error("skb", e))?,
                    XdpMode::Skb,
                    Some(native.to_string()),
                ),
            },
        };
        let shared = Arc::new(Shared {
            open: (0..queues).map(|_| AtomicBool::new(false)).collect(),
            sockets: (0..queues).map(|_| Mutex::new(-1)).collect(),
            counters: (0..queues).map(|_| QueueCounters::default()).collect(),
            zc: AtomicU8::new(ZC_UNKNOWN),
        });
        Ok(AfXdpPort {
            link,
            _prog: prog,
            map,
            iface: iface.to_string(),
            ifindex,
            mac,
            mtu,
            queues,
            cfg,
            attached,
            native_refused,
            driver,
            shared,
        })
    }

    /// Counters of all queues, summed.
    pub fn stats(&self) -> AfXdpStats {
        let mut s = AfXdpStats::default();
        for q in 0..self.shared.counters.len() {
            s.add(&self.read_queue(q));
        }
        s
    }

    /// Counters of queue `queue` (`None` past the last queue).
    pub fn queue_stats(&self, queue: u32) -> Option<AfXdpStats> {
        ((queue as usize) < self.shared.counters.len()).then(|| self.read_queue(queue as usize))
    }

    /// Queue `q`'s published counters, with the kernel's as they are now
    /// when its socket is open.
    fn read_queue(&self, q: usize) -> AfXdpStats {
        let mut s = self.shared.counters[q].read();
        let fd = lock(&self.shared.sockets[q]);
        if *fd >= 0 {
            if let Ok((k, len)) = get_opt::<XdpStatistics>(*fd, XDP_STATISTICS) {
                s.set_kernel(&k, len);
            }
        }
        s
    }

    fn is_veth(&self) -> bool {
        self.driver == "veth"
    }

    fn max_frame(&self) -> usize {
        self.mtu as usize + FRAME_OVERHEAD
    }

    fn note(&self) -> String {
        let mode = match self.attached {
            XdpMode::Skb => "skb (generic)",
            _ => "native (driver)",
        };
        let driver = if self.driver.is_empty() {
            "driver unknown"
        } else {
            &self.driver
        };
        let mut n = format!(
            "{} ({driver}): XDP redirect program attached in {mode} mode through a BPF link",
            self.iface
        );
        if let Some(e) = &self.native_refused {
            n += &format!(" (native attach refused: {e})");
        }
        n += "; ";
        n += match (self.shared.zc.load(Ordering::Relaxed), self.cfg.zero_copy) {
            (ZC_ON, _) => "zero-copy",
            (ZC_COPY, ZeroCopy::Auto) if self.attached == XdpMode::Native => {
                "copy mode (the driver offers no AF_XDP zero-copy)"
            }
            (ZC_COPY, _) => "copy mode",
            (_, ZeroCopy::Off) => "copy mode",
            (_, _) if self.attached == XdpMode::Skb => "copy mode (skb attach)",
            (_, ZeroCopy::Auto) => "zero-copy if the driver offers it (known once a queue binds)",
            (_, ZeroCopy::On) => "zero-copy required",
        };
        n += &format!(
            "; {} queue(s), rings of {} entries; need_wakeup {}",
            self.queues,
            self.cfg.ring_size,
            if self.cfg.need_wakeup { "on" } else { "off" }
        );
        n += if self.cfg.tx_checksum_offload {
            "; TCP checksums left to the kernel through TX metadata (computed here if it \
             refuses: see the tx_csum_* counters)"
        } else {
            "; TCP checksums computed in software"
        };
        if self.attached == XdpMode::Skb {
            n += "; skb mode: frames longer than a chunk (TSO/USO super-frames from a veth \
                  peer) are dropped by the kernel, so turn segmentation offload off on the \
                  sender";
        }
        if self.is_veth() {
            n += "; veth: TCP/UDP checksums from the peer may arrive unfilled (its checksum \
                  offload), do not drop frames for them";
        }
        n
    }

    fn check_pool_shape(&self, chunk: usize) -> io::Result<()> {
        if chunk != 2048 && chunk != 4096 {
            return Err(invalid(format!(
                "AF_XDP needs pool chunks of 2048 or 4096 bytes, not {chunk}"
            )));
        }
        if self.max_frame() > chunk - XDP_PACKET_HEADROOM {
            let hint = if self.max_frame() <= 4096 - XDP_PACKET_HEADROOM {
                "use 4096-byte chunks"
            } else {
                "lower the MTU: frames must fit one chunk"
            };
            return Err(invalid(format!(
                "a {chunk}-byte chunk holds at most {} bytes of frame after the kernel's \
                 {XDP_PACKET_HEADROOM}-byte headroom; MTU {} needs {} ({hint})",
                chunk - XDP_PACKET_HEADROOM,
                self.mtu,
                self.max_frame()
            )));
        }
        Ok(())
    }
}

impl Port for AfXdpPort {
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = AfXdpPort::stats(self);
        vec![
            ("rx_frames", s.rx_frames),
            ("tx_frames", s.tx_frames),
            ("tx_dropped", s.tx_dropped),
            ("bad_descs", s.bad_descs),
            ("fill_starved", s.fill_starved),
            ("kicks", s.kicks),
            ("kernel_rx_dropped", s.kernel_rx_dropped),
            ("kernel_rx_ring_full", s.kernel_rx_ring_full),
            ("kernel_fill_ring_empty", s.kernel_fill_ring_empty),
            ("kernel_rx_invalid_descs", s.kernel_rx_invalid_descs),
            ("kernel_tx_invalid_descs", s.kernel_tx_invalid_descs),
            ("tx_csum_offloaded", s.tx_csum_offloaded),
            ("tx_csum_software", s.tx_csum_software),
        ]
    }

    fn caps(&self) -> Caps {
        Caps {
            backend: "af_xdp",
            queues: self.queues,
            zero_copy: self.shared.zc.load(Ordering::Relaxed) == ZC_ON,
            flow_steering: false,
            rx_checksum_unreliable: self.is_veth(),
            tx_checksum_offload: self.cfg.tx_checksum_offload,
            tx_headroom: if self.cfg.tx_checksum_offload {
                TX_META_LEN as u16
            } else {
                0
            },
            max_frame: self.max_frame(),
            note: self.note(),
        }
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn pool(&self, queue: u32, cfg: PoolConfig) -> io::Result<Pool> {
        let _ = queue;
        self.check_pool_shape(cfg.chunk_size)
            .map_err(|e| port_error("AF_XDP pool", &self.iface, e))?;
        // An anonymous mapping: page aligned, as a UMEM must be.
        Pool::new(cfg)
    }

    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>> {
        let what = format!("AF_XDP queue {queue}");
        let fail = |e: io::Error| port_error(&what, &self.iface, e);
        if queue >= self.queues {
            return Err(fail(invalid(format!(
                "the port has {} queue(s)",
                self.queues
            ))));
        }
        self.check_pool_shape(pool.chunk_size()).map_err(fail)?;
        // SAFETY: sysconf has no memory arguments.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        if !(pool.base() as usize).is_multiple_of(page) {
            return Err(fail(invalid("the pool region is not page aligned".into())));
        }
        // The socket binds to the ifindex in the calling thread's namespace.
        match sys::ifindex(&self.iface) {
            Ok(i) if i == self.ifindex => {}
            _ => {
                return Err(fail(invalid(
                    "open_queue must run on a thread in the port's network namespace".into(),
                )))
            }
        }
        if self.shared.open[queue as usize].swap(true, Ordering::AcqRel) {
            return Err(fail(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the queue is already open on this port",
            )));
        }
        let claim = OpenClaim {
            shared: self.shared.clone(),
            queue,
        };
        let q = XskSetup {
            port: self,
            queue,
            pool,
        }
        .run(claim)
        .map_err(fail)?;
        Ok(Box::new(q))
    }
}

/// Marks a queue open on the port until dropped.
struct OpenClaim {
    shared: Arc<Shared>,
    queue: u32,
}

impl Drop for OpenClaim {
    fn drop(&mut self) {
        self.shared.open[self.queue as usize].store(false, Ordering::Release);
    }
}

/// Types every bit pattern of which is a valid value, so the kernel may
/// fill them.
///
/// # Safety
/// Only for `#[repr(C)]` structs of integers (or integers).
unsafe trait Pod: Copy + Default {}
// SAFETY: repr(C) structs of u64 fields.
unsafe impl Pod for MmapOffsets {}
// SAFETY: a repr(C) struct of one u32.
unsafe impl Pod for XdpOptions {}
// SAFETY: a repr(C) struct of u64 fields.
unsafe impl Pod for XdpStatistics {}

/// `struct xdp_umem_reg` as Linux 6.8+ has it (with `tx_metadata_len`; the
/// padding of the older layout must be zero, which this makes explicit).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_options`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct XdpOptions {
    flags: u32,
}

/// `struct xdp_statistics` (Linux 5.9+ layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct XdpStatistics {
    rx_dropped: u64,
    rx_invalid_descs: u64,
    tx_invalid_descs: u64,
    rx_ring_full: u64,
    rx_fill_ring_empty_descs: u64,
    tx_ring_empty_descs: u64,
}

/// `setsockopt(fd, SOL_XDP, name, val)`.
fn set_opt<T>(fd: RawFd, name: c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live T of exactly the length passed, which the
    // kernel only reads.
    sys::cvt(unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            name,
            val as *const T as *const c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt(fd, SOL_XDP, name)`: the value and the length the kernel
/// wrote.
fn get_opt<T: Pod>(fd: RawFd, name: c_int) -> io::Result<(T, usize)> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live, writable T of `len` bytes; the kernel writes at
    // most `len` bytes and any bit pattern is a valid T (Pod).
    sys::cvt(unsafe {
        libc::getsockopt(fd, SOL_XDP, name, &mut v as *mut T as *mut c_void, &mut len)
    })?;
    Ok((v, len as usize))
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The steps of `open_queue`.
struct XskSetup<'a> {
    port: &'a AfXdpPort,
    queue: u32,
    pool: &'a Pool,
}

impl XskSetup<'_> {
    fn run(self, claim: OpenClaim) -> io::Result<AfXdpQueue> {
        let port = self.port;
        let pool = self.pool;
        let size = port.cfg.ring_size;
        let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0)
            .map_err(|e| ctx("creating the AF_XDP socket", e))?;
        let raw = fd.as_raw_fd();

        let reg = UmemReg {
            addr: pool.base() as u64,
            len: pool.region_len() as u64,
            chunk_size: pool.chunk_size() as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        // TX metadata (checksum offload) where the kernel has it. A kernel
        // without it refuses the flag with EINVAL (flags are checked since
        // Linux 5.4); then `tx_burst` completes checksums in software.
        // With metadata registered the kernel refuses every descriptor
        // whose frame has less than TX_META_LEN bytes before it in its
        // chunk, so only a pool that keeps that headroom gets it.
        let mut tx_meta = false;
        let mut registered = None;
        if port.cfg.tx_checksum_offload && usize::from(pool.headroom()) >= TX_META_LEN {
            let with_meta = UmemReg {
                flags: XDP_UMEM_TX_METADATA_LEN,
                tx_metadata_len: TX_META_LEN as u32,
                ..reg
            };
            match set_opt(raw, XDP_UMEM_REG, &with_meta) {
                Ok(()) => {
                    tx_meta = true;
                    registered = Some(Ok(()));
                }
                Err(e) if errno_is(&e, &[libc::EINVAL]) => {}
                Err(e) => registered = Some(Err(e)),
            }
        }
        let registered = registered.unwrap_or_else(|| set_opt(raw, XDP_UMEM_REG, &reg));
        registered.map_err(|e| {
            ctx(
                &format!(
                    "registering the {} KiB pool as UMEM (needs CAP_IPC_LOCK or a large \
                     enough RLIMIT_MEMLOCK)",
                    pool.region_len() / 1024
                ),
                e,
            )
        })?;
        for (opt, name) in [
            (XDP_UMEM_FILL_RING, "fill"),
            (XDP_UMEM_COMPLETION_RING, "completion"),
            (XDP_RX_RING, "RX"),
            (XDP_TX_RING, "TX"),
        ] {
            set_opt(raw, opt, &size).map_err(|e| ctx(&format!("sizing the {name} ring"), e))?;
        }
        let (off, len) = get_opt::<MmapOffsets>(raw, XDP_MMAP_OFFSETS)
            .map_err(|e| ctx("reading the ring offsets", e))?;
        if len != std::mem::size_of::<MmapOffsets>() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel predates ring flags (need Linux 5.4 or later)",
            ));
        }
        fn map_err(name: &'static str) -> impl Fn(io::Error) -> io::Error {
            move |e| ctx(&format!("mapping the {name} ring"), e)
        }
        let fill = Ring::<u64>::map(raw, XDP_UMEM_PGOFF_FILL_RING, size, &off.fr, true)
            .map_err(map_err("fill"))?;
        let comp = Ring::<u64>::map(raw, XDP_UMEM_PGOFF_COMPLETION_RING, size, &off.cr, false)
            .map_err(map_err("completion"))?;
        let rx = Ring::<XdpDesc>::map(raw, XDP_PGOFF_RX_RING, size, &off.rx, false)
            .map_err(map_err("RX"))?;
        let tx = Ring::<XdpDesc>::map(raw, XDP_PGOFF_TX_RING, size, &off.tx, true)
            .map_err(map_err("TX"))?;

        self.bind(raw)?;
        let (opts, _) =
            get_opt::<XdpOptions>(raw, XDP_OPTIONS).map_err(|e| ctx("reading XDP_OPTIONS", e))?;
        let zc = opts.flags & XDP_OPTIONS_ZEROCOPY != 0;
        if port.cfg.zero_copy == ZeroCopy::On && !zc {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "bound, but not in zero-copy mode",
            ));
        }
        port.shared
            .zc
            .store(if zc { ZC_ON } else { ZC_COPY }, Ordering::Relaxed);
        if !zc {
            // Let one sendto() send the whole ring rather than 32 frames
            // (Linux 6.17+; older kernels refuse, which only costs kicks).
            let _ = set_opt(raw, XDP_MAX_TX_SKB_BUDGET, &size);
        }

        let chunks = pool.chunks();
        let mut q = AfXdpQueue {
            fill,
            comp,
            rx,
            tx,
            fd,
            _claim: claim,
            pool: pool.clone(),
            shared: port.shared.clone(),
            queue: self.queue,
            chunk: pool.chunk_size() as u64,
            region_base: pool.base() as usize,
            max_frame: port.max_frame(),
            fill_target: (chunks / 2).max(1).min(size),
            in_fill: 0,
            tx_outstanding: 0,
            copy_mode: !zc,
            // In zero-copy mode the driver may ignore the request.
            tx_meta: tx_meta && !zc,
            stats: AfXdpStats::default(),
            last_kernel_stats: Instant::now(),
            idle_polls: 0,
        };
        q.refill();
        // Only now may the program redirect frames to the socket.
        bpf::xskmap_set(&port.map, self.queue, raw)
            .map_err(|e| ctx("inserting the socket into the XSKMAP", e))?;
        *lock(&port.shared.sockets[self.queue as usize]) = raw;
        Ok(q)
    }

    fn bind(&self, fd: RawFd) -> io::Result<()> {
        let port = self.port;
        let mut flags = match (port.cfg.zero_copy, port.attached) {
            (ZeroCopy::Off, _) | (_, XdpMode::Skb) => XDP_COPY,
            (ZeroCopy::On, _) => XDP_ZEROCOPY,
            // Neither flag: the kernel tries zero-copy and falls back to copy.
            (ZeroCopy::Auto, _) => 0,
        };
        if port.cfg.need_wakeup {
            flags |= XDP_USE_NEED_WAKEUP;
        }
        let sa = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags,
            ifindex: port.ifindex,
            queue_id: self.queue,
            shared_umem_fd: 0,
        };
        let deadline = Instant::now() + BIND_RETRY;
        loop {
            // SAFETY: `sa` is a live sockaddr_xdp of the length passed, only
            // read by the kernel.
            let r = sys::cvt(unsafe {
                libc::bind(
                    fd,
                    &sa as *const SockaddrXdp as *const libc::sockaddr,
                    std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            });
            match r {
                Ok(_) => return Ok(()),
                Err(e) if errno_is(&e, &[libc::EBUSY]) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if errno_is(&e, &[libc::EBUSY]) => {
                    return Err(ctx(
                        "binding: the queue is busy (another AF_XDP socket is bound to it, or \
                         one closed less than a second or two ago)",
                        e,
                    ))
                }
                Err(e) if errno_is(&e, &[libc::EOPNOTSUPP]) && flags & XDP_ZEROCOPY != 0 => {
                    return Err(ctx(
                        &format!(
                            "binding in zero-copy mode: driver {:?} does not support it",
                            port.driver
                        ),
                        e,
                    ))
                }
                Err(e) => return Err(ctx("binding the socket to the queue", e)),
            }
        }
    }
}

/// One AF_XDP socket bound to one queue, with its UMEM (the core's pool).
///
/// Fields drop in order: the ring mappings, then the socket, then the pool
/// handle — the UMEM region outlives the socket.
struct AfXdpQueue {
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    fd: OwnedFd,
    _claim: OpenClaim,
    pool: Pool,
    shared: Arc<Shared>,
    queue: u32,
    chunk: u64,
    region_base: usize,
    max_frame: usize,
    /// Chunks to keep in the fill ring.
    fill_target: u32,
    /// Chunks in the fill ring (posted, not yet come back through RX).
    in_fill: u32,
    /// TX frames posted and not yet completed.
    tx_outstanding: u32,
    copy_mode: bool,
    /// The kernel completes checksums from TX metadata.
    tx_meta: bool,
    stats: AfXdpStats,
    last_kernel_stats: Instant,
    idle_polls: u32,
}

impl Drop for AfXdpQueue {
    fn drop(&mut self) {
        // Before the socket closes (its field drops after this): a stats
        // reader must not ask a reused descriptor number.
        *lock(&self.shared.sockets[self.queue as usize]) = -1;
    }
}

/// A lock whose holder cannot leave the value half-written (an `i32`):
/// a panic while it was held does not matter.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AfXdpQueue {
    fn publish(&self) {
        self.shared.counters[self.queue as usize].publish(&self.stats);
    }

    /// Top the fill ring up to its target from the pool.
    fn refill(&mut self) {
        let want = self.fill_target.saturating_sub(self.in_fill);
        if want == 0 {
            return;
        }
        let room = self.fill.free(want);
        let mut n = 0;
        while n < room {
            let Some(idx) = self.pool.lend() else {
                self.stats.fill_starved += 1;
                break;
            };
            if !self.fill.push(u64::from(idx) * self.chunk) {
                // Cannot happen (room was counted); never lose the chunk.
                self.pool.give_back(idx);
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.fill.submit();
            self.in_fill += n;
        }
    }

    /// Return completed TX chunks to the pool.
    fn drain_completions(&mut self) -> u32 {
        let n = self.comp.ready(self.comp.size());
        for i in 0..n {
            let addr = self.comp.read(i);
            let ok = u32::try_from(addr / self.chunk).is_ok_and(|idx| self.pool.give_back(idx));
            if !ok {
                self.stats.bad_descs += 1;
            }
        }
        self.comp.release(n);
        self.tx_outstanding = self.tx_outstanding.saturating_sub(n);
        self.stats.tx_frames += u64::from(n);
        n
    }

    /// Make the kernel send what the TX ring holds (copy mode sends only
    /// inside `sendto`; a zero-copy driver only when it asked to be woken).
    fn kick(&mut self) -> io::Result<()> {
        if !self.copy_mode && !self.tx.needs_wakeup() {
            return Ok(());
        }
        // Each call sends up to the socket's budget (the whole ring on 6.17+,
        // 32 frames before); bounded retries for what is left.
        let mut rounds = 1 + self.tx.size() / 32;
        loop {
            self.stats.kicks += 1;
            // SAFETY: a zero-length send with no buffer and no address;
            // the kernel reads nothing from us.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error().unwrap_or(0) {
                    // More to send (budget spent, or the device was busy).
                    libc::EAGAIN | libc::EINTR => {}
                    // Dropped by the device or the queue is stopped/down:
                    // what is left stays in the ring for the next kick.
                    libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN => return Ok(()),
                    _ => return Err(ctx("waking the kernel to transmit", e)),
                }
            }
            rounds -= 1;
            if !self.copy_mode || rounds == 0 || self.tx.unconsumed() == 0 {
                return Ok(());
            }
        }
    }

    /// Is `buf` a chunk of this queue's pool (the UMEM)?
    fn owns(&self, buf: &PacketBuf) -> bool {
        // A buffer's address is relative to its own pool's region; only a
        // buffer of ours sits at our base plus that address.
        buf.as_slice().as_ptr() as usize == self.region_base + buf.addr() as usize
    }

    fn refresh_kernel_stats(&mut self) {
        self.last_kernel_stats = Instant::now();
        if let Ok((k, len)) = get_opt::<XdpStatistics>(self.fd.as_raw_fd(), XDP_STATISTICS) {
            self.stats.set_kernel(&k, len);
            self.publish();
        }
    }
}

impl Queue for AfXdpQueue {
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        let n = self.rx.ready(u32::try_from(max).unwrap_or(u32::MAX));
        let mut taken: u32 = 0;
        for i in 0..n {
            let d = self.rx.read(i);
            let idx = d.addr / self.chunk;
            let off = (d.addr % self.chunk) as usize;
            let buf = u32::try_from(idx)
                .ok()
                .and_then(|idx| self.pool.adopt(idx, off, d.len as usize));
            match buf {
                Some(b) => {
                    out.push(b);
                    taken += 1;
                }
                // Not a chunk we lent: leave it alone, count it.
                None => self.stats.bad_descs += 1,
            }
        }
        self.rx.release(n);
        self.in_fill = self.in_fill.saturating_sub(n);
        self.refill();
        if n > 0 {
            self.stats.rx_frames += u64::from(taken);
            self.publish();
        } else {
            if !self.copy_mode && self.fill.needs_wakeup() {
                self.stats.kicks += 1;
                // SAFETY: a zero-length receive into no buffer; it only
                // wakes the driver's RX processing.
                unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    );
                }
            }
            // Reading the clock costs more than an empty poll: look only
            // every 64th time.
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls.is_multiple_of(64)
                && self.last_kernel_stats.elapsed() >= KERNEL_STATS_EVERY
            {
                self.refresh_kernel_stats();
            }
        }
        Ok(taken as usize)
    }

    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize> {
        if frames.is_empty() {
            return Ok(0);
        }
        self.drain_completions();
        let want = u32::try_from(frames.len()).unwrap_or(u32::MAX);
        // Never more in flight than the completion ring can report.
        let cq_room = self.comp.size().saturating_sub(self.tx_outstanding);
        let room = self.tx.free(want.min(cq_room));
        if room == 0 {
            // Full: make sure the kernel is working on it.
            self.kick()?;
            return Ok(0);
        }
        let mut posted = 0;
        let tx_meta = self.tx_meta;
        for buf in frames.drain(..room as usize) {
            let len = buf.len();
            if len == 0 || len > self.max_frame {
                self.stats.tx_dropped += 1;
                continue;
            }
            // With TX metadata registered the kernel refuses a descriptor
            // whose frame has less than TX_META_LEN bytes before it in its
            // chunk: such a frame of ours is moved, as a foreign one is
            // (into a chunk at the pool's headroom, which is enough: see
            // `XskSetup::run`).
            let fits = !tx_meta || buf.offset() >= TX_META_LEN;
            let mut buf = if fits && self.owns(&buf) {
                buf
            } else {
                match self.pool.copy_in(buf.as_slice()) {
                    Some(mut b) => {
                        if let Some((start, off)) = buf.partial_checksum() {
                            b.set_partial_checksum(start, off);
                        }
                        b
                    }
                    None => {
                        self.stats.tx_dropped += 1;
                        continue;
                    }
                }
            };
            let mut options = 0;
            if let Some((start, off)) = buf.partial_checksum() {
                if tx_meta {
                    // struct xsk_tx_metadata, right before the frame.
                    let room = buf.headroom_mut();
                    let at = room.len() - TX_META_LEN;
                    let meta = &mut room[at..];
                    meta[..8].copy_from_slice(&XDP_TXMD_FLAGS_CHECKSUM.to_ne_bytes());
                    meta[8..10].copy_from_slice(&start.to_ne_bytes());
                    meta[10..12].copy_from_slice(&off.to_ne_bytes());
                    meta[12..].fill(0);
                    options = XDP_TX_METADATA;
                    self.stats.tx_csum_offloaded += 1;
                } else if buf.complete_checksum() {
                    self.stats.tx_csum_software += 1;
                } else {
                    self.stats.tx_dropped += 1;
                    continue;
                }
            }
            let desc = XdpDesc {
                addr: buf.addr(),
                len: len as u32,
                options,
            };
            if self.tx.push(desc) {
                // The chunk is the kernel's until its completion comes back.
                buf.into_raw();
                posted += 1;
            } else {
                // Cannot happen (room was reserved); never lose the chunk.
                self.stats.tx_dropped += 1;
            }
        }
        if posted > 0 {
            self.tx.submit();
            self.tx_outstanding += posted;
            self.kick()?;
            self.drain_completions();
        }
        self.publish();
        Ok(room as usize)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn reclaim(&mut self) {
        if self.tx_outstanding > 0 {
            let done = self.drain_completions();
            if self.copy_mode && self.tx_outstanding > 0 && self.tx.unconsumed() > 0 {
                let _ = self.kick();
                self.drain_completions();
            }
            if done > 0 {
                self.publish();
            }
        }
        self.refill();
    }
}
