//! AF_PACKET backend: one `SOCK_RAW`/`ETH_P_ALL` packet socket per queue,
//! each with a receive ring and a transmit ring mapped into our memory, the
//! sockets joined in one fanout group so the kernel spreads received flows
//! over the queues.
//!
//! **Receive.** By default ([`RxRing::Blocks`], TPACKET_V3) the kernel
//! packs frames into fixed-size *blocks* and hands a block over when it is
//! full or when the 1 ms retire timer fires. That gives the highest rate
//! and fewest wake-ups, but below line rate every received frame waits for
//! the timer: ≈0.5 ms on average (measured). [`RxRing::Frames`]
//! (TPACKET_V2) hands over each frame in its own slot at once, for
//! latency-sensitive use. Either way `rx_burst` copies
//! each frame into a buffer of the queue's pool — the one copy — and
//! returns the slot or block to the kernel as soon as it is consumed. If
//! the pool runs dry the rest stays in the ring for the next call (nothing
//! is dropped by us); frames the kernel could not place because the ring
//! was full are counted from `PACKET_STATISTICS`
//! ([`AfPacketStats::rx_ring_drops`]). An 802.1Q tag the kernel stripped
//! into the frame's metadata is put back into the copy. Frames larger than
//! a pool buffer (or a V2 slot) cannot be delivered; they are dropped and
//! counted ([`AfPacketStats::rx_oversize`]). Note that a Linux TCP peer on
//! the other end of a veth sends TSO super-frames of up to 64 KiB (measured:
//! 65160-byte frames) unless TSO is off on *its* end (`ethtool -K <peer>
//! tso off`).
//!
//! **Checksums.** A frame the Linux peer sent over veth with checksum
//! offload on (the default) arrives as the kernel built it:
//! `CHECKSUM_PARTIAL`, the TCP/UDP checksum field holding only the
//! pseudo-header sum, flagged `TP_STATUS_CSUMNOTREADY`. Such frames are
//! handed on unchanged (counted in [`AfPacketStats::rx_csum_not_ready`]),
//! so the port reports [`Caps::rx_checksum_unreliable`]: the stack must
//! not drop TCP/UDP frames for a bad checksum. A bridge that sends them
//! on sets [`AfPacketConfig::complete_rx_checksums`], and the checksum is
//! completed in software as the device would have. (Measured: every UDP
//! datagram from a veth peer with default offloads arrives so; ICMP, whose
//! checksum the sender computes itself, arrives complete.)
//!
//! **Transmit.** Frames are copied into slots of the transmit ring, each
//! marked `TP_STATUS_SEND_REQUEST`, and one `send(MSG_DONTWAIT)` per burst
//! makes the kernel send them all (bypassing the qdisc). Slots come back
//! when the kernel frees the sent frame; a burst that finds no free slot
//! leaves its frames with the caller. A kick that hit a full device queue
//! is repeated from [`Queue::reclaim`]. Frames longer than
//! [`Caps::max_frame`] are dropped and counted.
//!
//! **Queues and fanout.** All sockets are made, bound and joined to the
//! fanout group in [`AfPacketPort::open`], on the caller's thread and in
//! its network namespace; [`Port::open_queue`] then hands socket `i` to the
//! core. Building the whole group up front means the flow→queue mapping
//! never changes while traffic runs, and the cores' threads need not be in
//! the interface's namespace. With [`Fanout::Hash`] the kernel picks the
//! queue from a *symmetric* hash of the frame's addresses and ports
//! (recomputed per frame, so it does not follow the sender's socket hash
//! and is the same for both directions of a flow); IP fragments hash by
//! addresses only. The group id comes from the kernel
//! (`PACKET_FANOUT_FLAG_UNIQUEID`), so it cannot clash with another
//! program's group on the same interface. Frames for a queue nobody opens
//! pile up in its ring and are then dropped: open all of them.
//!
//! Outgoing frames are not looped back to our receive rings
//! (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, which unlike the per-socket
//! option also holds inside a fanout group).
//!
//! Ixora uses the interface's own MAC address; the interface must not also
//! carry Ixora's IP address in the kernel, or the kernel will answer (and
//! reset) the same traffic.
#![allow(unsafe_code)]

use crate::{port_error, sys, Caps, PacketBuf, Pool, Port, Queue};
use ixora_wire::ethernet::MacAddr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How the kernel spreads received frames over the port's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fanout {
    /// By flow hash (`PACKET_FANOUT_HASH`): all frames of a flow land on the
    /// same queue.
    #[default]
    Hash,
    /// By the CPU the kernel received the frame on (`PACKET_FANOUT_CPU`).
    Cpu,
    /// Round robin (`PACKET_FANOUT_LB`): even load, flows scattered.
    Lb,
}

/// How the receive ring hands frames over to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxRing {
    /// TPACKET_V3: frames packed into blocks, a block handed over when full
    /// or when the 1 ms retire timer fires. Fewest wake-ups and the highest
    /// rate, but below line rate every frame waits for the timer: up to
    /// 1 ms, ≈0.5 ms on average (measured: ping RTT through Ixora
    /// 0.4–0.7 ms).
    #[default]
    Blocks,
    /// TPACKET_V2: one `frame_size` slot per frame, each handed over at
    /// once (measured: ping RTT 0.03–0.1 ms). More per-frame overhead;
    /// frames longer than a slot (`frame_size` − 66 bytes) are dropped.
    Frames,
}

/// How to open an AF_PACKET port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Queues (sockets in the fanout group), one per core.
    pub queues: u32,
    /// Bytes per ring block: a multiple of the page size, at least
    /// `frame_size`. Both rings use it.
    pub block_size: u32,
    /// Blocks in each queue's receive ring.
    pub block_count: u32,
    /// Bytes per frame slot (transmit ring; receive ring in
    /// [`RxRing::Frames`]): a multiple of 16 holding the slot header (48
    /// bytes; 66 in frame mode) and a frame of MTU + 18 bytes.
    pub frame_size: u32,
    /// How received frames are spread over the queues.
    pub fanout: Fanout,
    /// How the receive ring hands frames over.
    pub rx_ring: RxRing,
    /// Complete in software the TCP/UDP checksum of every received IPv4 or
    /// IPv6 frame the sender left to offload (`TP_STATUS_CSUMNOTREADY`),
    /// so the frame is whole when sent on elsewhere (a bridge such as
    /// `ixora impair`). A stack that does not check checksums of such
    /// frames need not.
    pub complete_rx_checksums: bool,
}

impl Default for AfPacketConfig {
    /// One queue; a receive ring of 16 blocks of 256 KiB (4 MiB) in block
    /// mode, 2 KiB frame slots, flow-hash fanout.
    fn default() -> Self {
        AfPacketConfig {
            queues: 1,
            block_size: 256 << 10,
            block_count: 16,
            frame_size: 2048,
            fanout: Fanout::Hash,
            rx_ring: RxRing::Blocks,
            complete_rx_checksums: false,
        }
    }
}

/// Counters of an AF_PACKET port, summed over its queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames delivered by `rx_burst`.
    pub rx_frames: u64,
    /// Frames the kernel dropped because a receive ring was full.
    pub rx_ring_drops: u64,
    /// Frames dropped because they did not fit a pool buffer.
    pub rx_oversize: u64,
    /// Delivered frames whose TCP/UDP checksum the sender left incomplete
    /// (`TP_STATUS_CSUMNOTREADY`).
    pub rx_csum_not_ready: u64,
    /// Of those, the ones whose checksum was completed here
    /// ([`AfPacketConfig::complete_rx_checksums`]).
    pub rx_csum_completed: u64,
    /// Frames handed to the kernel for sending.
    pub tx_frames: u64,
    /// Frames dropped because they were longer than the port carries.
    pub tx_oversize: u64,
}

/// Receive-block retire timeout in milliseconds (block mode): the longest
/// a frame waits in a half-filled block.
const RETIRE_TOV_MS: u32 = 1;
/// Transmit slots per queue (rounded up to whole blocks).
const TX_SLOTS: usize = 1024;
/// Bytes of Ethernet header (with one 802.1Q tag) on top of the MTU.
const ETH_OVERHEAD: usize = 18;

/// `TPACKET_ALIGN(sizeof(hdr))`: where the kernel reads a transmitted frame
/// from in a slot, for the ring version in use.
const fn data_off(mode: RxRing) -> usize {
    let hdr = match mode {
        RxRing::Blocks => size_of::<libc::tpacket3_hdr>(),
        RxRing::Frames => size_of::<libc::tpacket2_hdr>(),
    };
    (hdr + 15) & !15
}

/// An open AF_PACKET port: an interface and one ready socket per queue.
pub struct AfPacketPort {
    ifname: String,
    mac: MacAddr,
    max_frame: usize,
    cfg: AfPacketConfig,
    group: u16,
    rings: Mutex<Vec<Option<Ring>>>,
    counters: Vec<Arc<Counters>>,
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("ifname", &self.ifname)
            .field("mac", &self.mac)
            .field("cfg", &self.cfg)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl AfPacketPort {
    /// Open interface `iface` (in the calling thread's network namespace):
    /// record its index, MAC and MTU and make `cfg.queues` sockets with
    /// their rings, bound to it and joined in one fanout group. The
    /// interface should be up.
    pub fn open(iface: &str, cfg: AfPacketConfig) -> io::Result<AfPacketPort> {
        let err = |e| port_error("AF_PACKET port", iface, e);
        let ifindex = sys::ifindex(iface).map_err(err)?;
        let mac = sys::hwaddr(iface).map_err(err)?;
        let mtu = sys::mtu(iface).map_err(err)?;
        let max_frame = mtu as usize + ETH_OVERHEAD;
        let geo = Geometry::new(&cfg, max_frame).map_err(err)?;
        let mut rings = Vec::with_capacity(cfg.queues as usize);
        let mut group = 0u16;
        for i in 0..cfg.queues {
            let ring = Ring::new(&geo, ifindex, cfg.fanout, (i > 0).then_some(group))
                .map_err(|e| err(io::Error::new(e.kind(), format!("queue {i}: {e}"))))?;
            if i == 0 {
                group = ring.fanout_group().map_err(err)?;
            }
            rings.push(Some(ring));
        }
        Ok(AfPacketPort {
            ifname: iface.to_string(),
            mac,
            max_frame,
            cfg,
            group,
            rings: Mutex::new(rings),
            counters: (0..cfg.queues).map(|_| Arc::default()).collect(),
        })
    }

    /// The fanout group id the kernel gave the port's sockets.
    pub fn fanout_group(&self) -> u16 {
        self.group
    }

    /// Counters summed over the queues.
    pub fn stats(&self) -> AfPacketStats {
        let mut s = AfPacketStats::default();
        for c in &self.counters {
            let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
            s.rx_frames += l(&c.rx_frames);
            s.rx_ring_drops += l(&c.rx_ring_drops);
            s.rx_oversize += l(&c.rx_oversize);
            s.rx_csum_not_ready += l(&c.rx_csum_not_ready);
            s.rx_csum_completed += l(&c.rx_csum_completed);
            s.tx_frames += l(&c.tx_frames);
            s.tx_oversize += l(&c.tx_oversize);
        }
        s
    }
}

impl Port for AfPacketPort {
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = AfPacketPort::stats(self);
        vec![
            ("rx_frames", s.rx_frames),
            ("rx_ring_drops", s.rx_ring_drops),
            ("rx_oversize", s.rx_oversize),
            ("rx_csum_not_ready", s.rx_csum_not_ready),
            ("rx_csum_completed", s.rx_csum_completed),
            ("tx_frames", s.tx_frames),
            ("tx_oversize", s.tx_oversize),
        ]
    }

    fn caps(&self) -> Caps {
        let kib = self.cfg.block_size >> 10;
        let rx = match self.cfg.rx_ring {
            RxRing::Blocks => format!(
                "TPACKET_V3 RX ring {}x{kib} KiB blocks ({RETIRE_TOV_MS} ms retire)",
                self.cfg.block_count
            ),
            RxRing::Frames => format!(
                "TPACKET_V2 RX ring {} slots of {} B",
                self.cfg.block_count as usize
                    * (self.cfg.block_size / self.cfg.frame_size) as usize,
                self.cfg.frame_size
            ),
        };
        Caps {
            backend: "af_packet",
            queues: self.cfg.queues,
            zero_copy: false,
            flow_steering: self.cfg.fanout == Fanout::Hash,
            rx_checksum_unreliable: true,
            tx_checksum_offload: false,
            tx_headroom: 0,
            max_frame: self.max_frame,
            note: format!(
                "AF_PACKET on {}: {} queue(s), {rx}, TX ring {TX_SLOTS} slots, fanout {:?} \
                 group {:#06x}; one copy each way",
                self.ifname, self.cfg.queues, self.cfg.fanout, self.group
            ),
        }
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>> {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let slot = rings.get_mut(queue as usize).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "AF_PACKET port on {} has {} queues, not {}",
                    self.ifname,
                    self.cfg.queues,
                    queue + 1
                ),
            )
        })?;
        let ring = slot.take().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("AF_PACKET queue {queue} on {} is already open", self.ifname),
            )
        })?;
        Ok(Box::new(AfPacketQueue {
            max_tx: ring.geo.tx_room().min(self.max_frame),
            ring,
            pool: pool.clone(),
            room: pool.chunk_size() - usize::from(pool.headroom()),
            rx_pos: 0,
            rx_left: 0,
            rx_off: 0,
            tx_head: 0,
            tx_kick_pending: false,
            complete_csum: self.cfg.complete_rx_checksums,
            local: Local::default(),
            shared: self.counters[queue as usize].clone(),
        }))
    }
}

/// Ring sizes, checked once per port.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    mode: RxRing,
    block_size: usize,
    rx_blocks: usize,
    frame_size: usize,
    /// Frame slots per block.
    per_block: usize,
    tx_blocks: usize,
}

impl Geometry {
    fn new(cfg: &AfPacketConfig, max_frame: usize) -> io::Result<Geometry> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        // SAFETY: sysconf has no memory arguments.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let (bs, fs) = (cfg.block_size as usize, cfg.frame_size as usize);
        // Transmit: the frame starts after the slot header. Receive (V2):
        // the kernel puts the MAC header at TPACKET_ALIGN(TPACKET2_HDRLEN +
        // 16) - 14 = 66.
        let off = match cfg.rx_ring {
            RxRing::Blocks => data_off(RxRing::Blocks),
            RxRing::Frames => {
                let hdrlen = data_off(RxRing::Frames) + size_of::<libc::sockaddr_ll>();
                ((hdrlen + 16 + 15) & !15) - 14
            }
        };
        if cfg.queues == 0 || cfg.queues > 256 {
            return bad(format!("queues must be 1..=256, not {}", cfg.queues));
        }
        if cfg.block_count == 0 {
            return bad("block_count must be at least 1".into());
        }
        if fs % 16 != 0 || fs < off + max_frame {
            return bad(format!(
                "frame_size {fs} must be a multiple of 16 holding {off} bytes of slot header \
                 and a {max_frame}-byte frame (MTU + {ETH_OVERHEAD})"
            ));
        }
        if bs == 0 || bs % page != 0 || bs < fs {
            return bad(format!(
                "block_size {bs} must be a multiple of the page size ({page}) and at least \
                 frame_size ({fs})"
            ));
        }
        let per_block = bs / fs;
        Ok(Geometry {
            mode: cfg.rx_ring,
            block_size: bs,
            rx_blocks: cfg.block_count as usize,
            frame_size: fs,
            per_block,
            tx_blocks: TX_SLOTS.div_ceil(per_block),
        })
    }

    fn rx_len(&self) -> usize {
        self.block_size * self.rx_blocks
    }

    fn rx_slots(&self) -> usize {
        self.rx_blocks * self.per_block
    }

    fn tx_slots(&self) -> usize {
        self.tx_blocks * self.per_block
    }

    /// Largest frame a transmit slot holds.
    fn tx_room(&self) -> usize {
        self.frame_size - data_off(self.mode)
    }

    fn map_len(&self) -> usize {
        self.rx_len() + self.block_size * self.tx_blocks
    }

    /// Offset in the mapping of frame slot `i` of the ring starting at
    /// `base` (slots never straddle blocks).
    fn slot_off(&self, base: usize, i: usize) -> usize {
        base + (i / self.per_block) * self.block_size + (i % self.per_block) * self.frame_size
    }
}

/// One packet socket and its mapped rings (receive ring first, then the
/// transmit ring, as the kernel lays them out).
struct Ring {
    fd: OwnedFd,
    map: NonNull<u8>,
    geo: Geometry,
}

// SAFETY: the mapping is plain shared memory owned by this value (and the
// kernel); nothing in it is tied to the thread that made it, and only the
// one owner touches it, so moving the owner to another thread is sound.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `map` is the one mapping of `map_len()` bytes made in
        // `Ring::new` and not unmapped before; no references into it outlive
        // the ring (queues hold the ring by value). The socket closes after.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.geo.map_len());
        }
    }
}

/// Set a socket option from a plain value.
fn setsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of exactly the size passed; the
    // kernel only reads that many bytes during the call.
    sys::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Plain integer data: every bit pattern, all-zero included, is a valid
/// value.
///
/// # Safety
/// Only implement for integers and `repr(C)` structs of integers.
unsafe trait Plain: Copy {}
// SAFETY: an integer.
unsafe impl Plain for u32 {}
// SAFETY: a repr(C) struct of two c_uint.
unsafe impl Plain for libc::tpacket_stats {}
// SAFETY: a repr(C) struct of three c_uint.
unsafe impl Plain for libc::tpacket_stats_v3 {}

/// Read a socket option into a plain value.
fn getsockopt<T: Plain>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int) -> io::Result<T> {
    // SAFETY: `T: Plain`, so all-zero bytes are a valid `T`.
    let mut val: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is writable for `len` bytes and the kernel writes at
    // most `len` bytes, reporting how many in `len`; any bytes it writes
    // form a valid `T` (`T: Plain`).
    sys::cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut val as *mut T).cast(),
            &mut len,
        )
    })?;
    Ok(val)
}

/// Prefix an error with what was being done.
fn ctx(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Ring {
    /// A socket with both rings, bound to `ifindex` and in the fanout group:
    /// a new one (kernel-chosen id) when `join` is `None`, else `join`.
    fn new(geo: &Geometry, ifindex: u32, fanout: Fanout, join: Option<u16>) -> io::Result<Ring> {
        // Protocol 0: the socket receives nothing until bound.
        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(ctx("socket"))?;
        let version = match geo.mode {
            RxRing::Blocks => libc::tpacket_versions::TPACKET_V3,
            RxRing::Frames => libc::tpacket_versions::TPACKET_V2,
        } as libc::c_int;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(ctx("PACKET_VERSION"))?;
        let on: libc::c_int = 1;
        // Skip frames the kernel cannot send instead of stalling the ring.
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_LOSS, &on).map_err(ctx("PACKET_LOSS"))?;
        // Straight to the driver; best effort (old kernels lack it).
        let _ = setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &on);
        // Our own frames are not received (until the socket is in the group,
        // whose own flag then applies).
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &on)
            .map_err(ctx("PACKET_IGNORE_OUTGOING"))?;
        let rx = libc::tpacket_req3 {
            tp_block_size: geo.block_size as u32,
            tp_block_nr: geo.rx_blocks as u32,
            tp_frame_size: geo.frame_size as u32,
            tp_frame_nr: geo.rx_slots() as u32,
            tp_retire_blk_tov: if geo.mode == RxRing::Blocks {
                RETIRE_TOV_MS
            } else {
                0
            },
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        // The V2 request is the first four fields of the V3 one.
        let req_len = match geo.mode {
            RxRing::Blocks => size_of::<libc::tpacket_req3>(),
            RxRing::Frames => size_of::<libc::tpacket_req>(),
        };
        let tx = libc::tpacket_req3 {
            tp_block_size: geo.block_size as u32,
            tp_block_nr: geo.tx_blocks as u32,
            tp_frame_size: geo.frame_size as u32,
            tp_frame_nr: geo.tx_slots() as u32,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        for (name, req, what) in [
            (libc::PACKET_RX_RING, &rx, "PACKET_RX_RING"),
            (libc::PACKET_TX_RING, &tx, "PACKET_TX_RING"),
        ] {
            // SAFETY: `req` is a live tpacket_req3; `req_len` is its size or
            // the size of its tpacket_req prefix (same layout), so the kernel
            // reads only initialised bytes of it.
            sys::cvt(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    name,
                    (req as *const libc::tpacket_req3).cast(),
                    req_len as libc::socklen_t,
                )
            })
            .map_err(ctx(what))?;
        }
        // SAFETY: a fresh shared mapping of the socket's rings, of exactly
        // the size the two ring requests define; no existing memory is
        // touched and the result is checked.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                geo.map_len(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ctx("mmap rings")(io::Error::last_os_error()));
        }
        let ring = Ring {
            fd,
            map: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            geo: *geo,
        };
        // A socket joining an existing group would get every frame between
        // bind and join twice (itself and via the group): a drop-all filter
        // covers that window.
        let mut drop_all = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        if join.is_some() {
            let prog = libc::sock_fprog {
                len: 1,
                filter: drop_all.as_mut_ptr(),
            };
            setsockopt(&ring.fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
                .map_err(ctx("SO_ATTACH_FILTER"))?;
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        sys::cvt(unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(ctx("bind"))?;
        let mode = match fanout {
            Fanout::Hash => libc::PACKET_FANOUT_HASH,
            Fanout::Cpu => libc::PACKET_FANOUT_CPU,
            Fanout::Lb => libc::PACKET_FANOUT_LB,
        } | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
        let arg: u32 = match join {
            None => (mode | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16,
            Some(id) => u32::from(id) | (mode << 16),
        };
        setsockopt(&ring.fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
            .map_err(ctx("PACKET_FANOUT"))?;
        if join.is_some() {
            setsockopt(&ring.fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &on)
                .map_err(ctx("SO_DETACH_FILTER"))?;
        }
        Ok(ring)
    }

    /// The fanout group id this socket is in.
    fn fanout_group(&self) -> io::Result<u16> {
        let v: u32 = getsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_FANOUT)
            .map_err(ctx("PACKET_FANOUT"))?;
        Ok(v as u16)
    }

    /// Address `off` bytes into the mapping (only dereferenced after a
    /// bounds check).
    fn at(&self, off: usize) -> *mut u8 {
        self.map.as_ptr().wrapping_add(off)
    }

    /// The 32-bit status word at `off` (a block descriptor's or a slot
    /// header's), shared with the kernel.
    fn status_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.geo.map_len());
        // SAFETY: the word is inside the mapping and 4-byte aligned (the
        // mapping is page aligned; checked above), and the mapping lives as
        // long as `self`. It is shared with the kernel, so our side only
        // ever accesses status words atomically.
        unsafe { AtomicU32::from_ptr(self.at(off).cast::<u32>()) }
    }

    /// The `len` bytes at `off`.
    ///
    /// # Safety
    /// The kernel must not write them while the slice lives: they belong to
    /// a slot or block we own (status `TP_STATUS_USER`).
    unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(off + len <= self.geo.map_len());
        // SAFETY: in bounds (checked above), initialised shared memory the
        // kernel leaves alone while we own it (the caller's promise).
        unsafe { std::slice::from_raw_parts(self.at(off), len) }
    }

    /// Offset of receive block `i` (block mode).
    fn block_off(&self, i: usize) -> usize {
        i * self.geo.block_size
    }

    /// Offset of a status word in receive block or slot `i`.
    fn rx_status_off(&self, i: usize) -> usize {
        match self.geo.mode {
            RxRing::Blocks => {
                self.block_off(i)
                    + std::mem::offset_of!(libc::tpacket_block_desc, hdr)
                    + std::mem::offset_of!(libc::tpacket_hdr_v1, block_status)
            }
            RxRing::Frames => {
                self.geo.slot_off(0, i) + std::mem::offset_of!(libc::tpacket2_hdr, tp_status)
            }
        }
    }

    /// Offset of transmit slot `i`.
    fn tx_off(&self, i: usize) -> usize {
        self.geo.slot_off(self.geo.rx_len(), i)
    }

    /// Offset of the status word of transmit slot `i`.
    fn tx_status_off(&self, i: usize) -> usize {
        self.tx_off(i)
            + match self.geo.mode {
                RxRing::Blocks => std::mem::offset_of!(libc::tpacket3_hdr, tp_status),
                RxRing::Frames => std::mem::offset_of!(libc::tpacket2_hdr, tp_status),
            }
    }
}

/// Per-queue counters, published for [`AfPacketPort::stats`].
#[derive(Default)]
#[repr(align(64))]
struct Counters {
    rx_frames: AtomicU64,
    rx_ring_drops: AtomicU64,
    rx_oversize: AtomicU64,
    rx_csum_not_ready: AtomicU64,
    rx_csum_completed: AtomicU64,
    tx_frames: AtomicU64,
    tx_oversize: AtomicU64,
}

/// The queue's own running totals (single writer), copied to [`Counters`]
/// after each burst that changed them.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct Local {
    rx_frames: u64,
    rx_ring_drops: u64,
    rx_oversize: u64,
    rx_csum_not_ready: u64,
    rx_csum_completed: u64,
    tx_frames: u64,
    tx_oversize: u64,
}

/// A received frame's metadata from its slot header.
struct Meta {
    /// Offset of the frame in the mapping.
    data: usize,
    snaplen: usize,
    len: usize,
    status: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
}

/// What became of one received frame.
enum Took {
    /// Copied into a pool buffer.
    Delivered,
    /// Dropped (too long) and counted.
    Dropped,
    /// The pool is empty: leave the frame in the ring.
    NoBuffer,
}

struct AfPacketQueue {
    ring: Ring,
    pool: Pool,
    /// Bytes a pool buffer holds from the frame start.
    room: usize,
    max_tx: usize,
    /// Receive block (block mode) or slot (frame mode) to read next.
    rx_pos: usize,
    /// Block mode: frames left in block `rx_pos`; 0 when we do not hold it.
    rx_left: u32,
    /// Block mode: offset in the mapping of the next frame's header.
    rx_off: usize,
    tx_head: usize,
    /// Slots were filled but the last kick did not get them all out.
    tx_kick_pending: bool,
    /// [`AfPacketConfig::complete_rx_checksums`].
    complete_csum: bool,
    local: Local,
    shared: Arc<Counters>,
}

impl AfPacketQueue {
    fn publish(&self) {
        let (l, s) = (&self.local, &self.shared);
        let st = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        st(&s.rx_frames, l.rx_frames);
        st(&s.rx_ring_drops, l.rx_ring_drops);
        st(&s.rx_oversize, l.rx_oversize);
        st(&s.rx_csum_not_ready, l.rx_csum_not_ready);
        st(&s.rx_csum_completed, l.rx_csum_completed);
        st(&s.tx_frames, l.tx_frames);
        st(&s.tx_oversize, l.tx_oversize);
    }

    /// Add the kernel's ring-full drops (reading resets them).
    fn collect_drops(&mut self) {
        let drops = match self.ring.geo.mode {
            RxRing::Blocks => getsockopt::<libc::tpacket_stats_v3>(
                &self.ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
            )
            .map(|s| s.tp_drops),
            RxRing::Frames => getsockopt::<libc::tpacket_stats>(
                &self.ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
            )
            .map(|s| s.tp_drops),
        };
        if let Ok(d) = drops {
            self.local.rx_ring_drops += u64::from(d);
        }
    }

    /// Copy one frame (in a slot or block we own) into a pool buffer,
    /// putting back a stripped VLAN tag.
    fn take(&mut self, m: &Meta, out: &mut Vec<PacketBuf>) -> Took {
        let vlan = m.status & libc::TP_STATUS_VLAN_VALID != 0 && m.snaplen >= 12;
        let total = m.snaplen + if vlan { 4 } else { 0 };
        if total > self.room || m.snaplen < m.len {
            self.local.rx_oversize += 1;
            return Took::Dropped;
        }
        let Some(mut b) = self.pool.alloc() else {
            return Took::NoBuffer;
        };
        // SAFETY: callers pass frames of a slot or block we own (status
        // USER), which the kernel leaves alone until we hand it back; the
        // slice dies before that.
        let data = unsafe { self.ring.bytes(m.data, m.snaplen) };
        let dst = b.spare_mut();
        if vlan {
            let tpid = if m.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                m.vlan_tpid
            } else {
                0x8100
            };
            dst[..12].copy_from_slice(&data[..12]);
            dst[12..14].copy_from_slice(&tpid.to_be_bytes());
            dst[14..16].copy_from_slice(&m.vlan_tci.to_be_bytes());
            dst[16..total].copy_from_slice(&data[12..]);
        } else {
            dst[..total].copy_from_slice(data);
        }
        b.set_len(total);
        if m.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
            self.local.rx_csum_not_ready += 1;
            if self.complete_csum && crate::complete_l4_checksum(b.as_mut_slice()) {
                self.local.rx_csum_completed += 1;
            }
        }
        out.push(b);
        self.local.rx_frames += 1;
        Took::Delivered
    }

    /// Block mode: give the current block back and move to the next.
    fn release_block(&mut self) {
        self.ring
            .status_at(self.ring.rx_status_off(self.rx_pos))
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx_pos = (self.rx_pos + 1) % self.ring.geo.rx_blocks;
        self.rx_left = 0;
    }

    fn rx_blocks(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let bs = self.ring.geo.block_size;
        let mut n = 0;
        while n < max {
            let block = self.ring.block_off(self.rx_pos);
            if self.rx_left == 0 {
                let st = self
                    .ring
                    .status_at(self.ring.rx_status_off(self.rx_pos))
                    .load(Ordering::Acquire);
                if st & libc::TP_STATUS_USER == 0 {
                    break;
                }
                if st & libc::TP_STATUS_LOSING != 0 {
                    self.collect_drops();
                }
                let bd = self.ring.at(block).cast::<libc::tpacket_block_desc>();
                // SAFETY: rx_pos < rx_blocks (wrapped in `release_block`),
                // so the descriptor at the block's start lies inside the
                // mapping, page aligned; the block is ours (status USER,
                // acquired above), so the kernel does not write it until we
                // release it.
                let (num, first) = unsafe {
                    (
                        ptr::read(ptr::addr_of!((*bd).hdr.bh1.num_pkts)),
                        ptr::read(ptr::addr_of!((*bd).hdr.bh1.offset_to_first_pkt)),
                    )
                };
                if num == 0 {
                    self.release_block();
                    continue;
                }
                self.rx_left = num;
                self.rx_off = block + first as usize;
            }
            let end = block + bs;
            while n < max && self.rx_left > 0 {
                let off = self.rx_off;
                if off + size_of::<libc::tpacket3_hdr>() > end {
                    // A corrupt descriptor: give up on the rest of the block.
                    self.release_block();
                    break;
                }
                // SAFETY: the header lies inside the block (checked above),
                // which we own until we release it; read unaligned so even a
                // bogus offset is sound.
                let h: libc::tpacket3_hdr =
                    unsafe { ptr::read_unaligned(self.ring.at(off).cast::<libc::tpacket3_hdr>()) };
                let m = Meta {
                    data: off + usize::from(h.tp_mac),
                    snaplen: h.tp_snaplen as usize,
                    len: h.tp_len as usize,
                    status: h.tp_status,
                    vlan_tci: h.hv1.tp_vlan_tci as u16,
                    vlan_tpid: h.hv1.tp_vlan_tpid,
                };
                if m.data + m.snaplen > end {
                    self.release_block();
                    break;
                }
                match self.take(&m, out) {
                    Took::NoBuffer => return n,
                    Took::Delivered => n += 1,
                    Took::Dropped => {}
                }
                self.rx_off = off + h.tp_next_offset as usize;
                self.rx_left -= 1;
                if self.rx_left == 0 {
                    self.release_block();
                }
            }
        }
        n
    }

    fn rx_frames(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let slots = self.ring.geo.rx_slots();
        let fs = self.ring.geo.frame_size;
        let mut n = 0;
        while n < max {
            let slot = self.ring.geo.slot_off(0, self.rx_pos);
            let status_off = self.ring.rx_status_off(self.rx_pos);
            let st = self.ring.status_at(status_off).load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            if st & libc::TP_STATUS_LOSING != 0 {
                self.collect_drops();
            }
            // SAFETY: rx_pos < rx_slots (wrapped below), so the header at the
            // slot's start lies inside the mapping, 16-byte aligned; the slot
            // is ours (status USER, acquired), so the kernel does not touch it
            // until we set it back to KERNEL.
            let h: libc::tpacket2_hdr =
                unsafe { ptr::read(self.ring.at(slot).cast::<libc::tpacket2_hdr>()) };
            let m = Meta {
                data: slot + usize::from(h.tp_mac),
                snaplen: h.tp_snaplen as usize,
                len: h.tp_len as usize,
                status: h.tp_status,
                vlan_tci: h.tp_vlan_tci,
                vlan_tpid: h.tp_vlan_tpid,
            };
            if usize::from(h.tp_mac) + m.snaplen <= fs {
                match self.take(&m, out) {
                    Took::NoBuffer => break,
                    Took::Delivered => n += 1,
                    Took::Dropped => {}
                }
            } else {
                self.local.rx_oversize += 1; // a corrupt header
            }
            self.ring
                .status_at(status_off)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_pos = (self.rx_pos + 1) % slots;
        }
        n
    }

    /// Ask the kernel to send the requested slots.
    fn kick(&mut self) -> io::Result<()> {
        // SAFETY: a zero-length send with no buffer; the kernel reads the
        // frames from the transmit ring we mapped.
        let r = unsafe { libc::send(self.ring.fd.as_raw_fd(), ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r >= 0 {
            self.tx_kick_pending = false;
            return Ok(());
        }
        self.tx_kick_pending = true;
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Ok(()),
            _ => Err(e),
        }
    }
}

impl Queue for AfPacketQueue {
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        let before = self.local;
        let start = out.len();
        match self.ring.geo.mode {
            RxRing::Blocks => self.rx_blocks(out, max),
            RxRing::Frames => self.rx_frames(out, max),
        };
        if self.local != before {
            self.publish();
        }
        Ok(out.len() - start)
    }

    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize> {
        let slots = self.ring.geo.tx_slots();
        let off = data_off(self.ring.geo.mode);
        let mut taken = 0;
        let mut queued = 0;
        for f in frames.iter() {
            let len = f.len();
            if len > self.max_tx {
                self.local.tx_oversize += 1;
                taken += 1;
                continue;
            }
            let st = self.ring.status_at(self.ring.tx_status_off(self.tx_head));
            let s = st.load(Ordering::Acquire);
            if s != libc::TP_STATUS_AVAILABLE && s != libc::TP_STATUS_WRONG_FORMAT {
                break; // ring full: the kernel still holds this slot
            }
            let slot = self.ring.at(self.ring.tx_off(self.tx_head));
            // SAFETY: tx_head < tx_slots (wrapped below), so the slot lies
            // inside the transmit ring; it is free (status AVAILABLE,
            // acquired), so the kernel does not read it until we set
            // SEND_REQUEST below; the frame fits the slot (len <= max_tx <=
            // frame_size - off) and comes from a live pool buffer, which
            // cannot overlap the ring; the header fields written lie at the
            // slot's start, 16-byte aligned.
            unsafe {
                ptr::copy_nonoverlapping(f.as_slice().as_ptr(), slot.add(off), len);
                match self.ring.geo.mode {
                    RxRing::Blocks => {
                        let h = slot.cast::<libc::tpacket3_hdr>();
                        ptr::addr_of_mut!((*h).tp_next_offset).write(0);
                        ptr::addr_of_mut!((*h).tp_len).write(len as u32);
                        ptr::addr_of_mut!((*h).tp_snaplen).write(len as u32);
                    }
                    RxRing::Frames => {
                        let h = slot.cast::<libc::tpacket2_hdr>();
                        ptr::addr_of_mut!((*h).tp_len).write(len as u32);
                        ptr::addr_of_mut!((*h).tp_snaplen).write(len as u32);
                    }
                }
            }
            st.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_head = (self.tx_head + 1) % slots;
            taken += 1;
            queued += 1;
        }
        frames.drain(..taken);
        self.local.tx_frames += queued;
        if taken > 0 {
            self.publish();
        }
        if queued > 0 || self.tx_kick_pending {
            self.kick()?;
        }
        Ok(taken)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.ring.fd.as_raw_fd())
    }

    fn reclaim(&mut self) {
        if self.tx_kick_pending {
            let _ = self.kick();
        }
    }
}
