//! TAP backend: a multi-queue TAP device, one file descriptor per queue.
//!
//! The TAP interface is the *Linux side* of a point-to-point Ethernet link
//! whose other end is Ixora: frames the kernel sends out of the interface
//! are read by Ixora, frames Ixora writes arrive in the kernel as received
//! on it. The interface's own MAC address therefore belongs to the kernel;
//! Ixora uses a different, locally administered address of its own
//! ([`TapPort::mac`], derived from the device name and our pid), and the
//! two ends need different IP addresses in one subnet.
//!
//! [`TapPort::create`] makes the device (`IFF_TAP | IFF_NO_PI |
//! IFF_MULTI_QUEUE`, plus `IFF_VNET_HDR` when asked) in the calling
//! thread's network namespace and opens all its queues at once (the same
//! name given to `TUNSETIFF` once per queue). The device lives as long as
//! the port: dropping it closes the descriptors and Linux deletes the
//! interface. It can be moved to another namespace
//! ([`TapPort::move_to_netns`]); the descriptors stay attached. It must be
//! brought up (and given an address) on the Linux side by the caller.
//!
//! **Receive** reads one frame per `read(2)` straight into a pool buffer:
//! no copy beyond the kernel's. **Transmit** writes one frame per
//! `write(2)` (`writev` with the virtio-net header), copied by the kernel.
//!
//! **Queues.** For frames from the kernel the tun driver picks the queue by
//! a symmetric flow hash of the frame's addresses and ports, except that a
//! flow Ixora has *sent* on some queue is steered to that queue (tun's
//! "automq" flow table; entries age out when the flow goes idle). Both
//! verified by the tests. So all frames of one flow arrive on one queue as
//! long as Ixora sends each flow on the queue it receives it on, and the
//! port reports [`Caps::flow_steering`]; a flow Ixora opens from another
//! queue follows it there while active, and may fall back to its hash
//! queue after an idle pause.
//!
//! **virtio-net header and checksums.** With `vnet_hdr` the port asks the
//! kernel to skip checksumming what it sends us (`TUNSETOFFLOAD
//! TUN_F_CSUM`, no segmentation offloads): such frames come with
//! `VIRTIO_NET_HDR_F_NEEDS_CSUM` and the checksum is completed here in
//! software, at `csum_start`/`csum_offset`, before the frame is handed on
//! (measured: every UDP datagram from a kernel socket arrives so). Without
//! it the kernel completes every checksum itself. Either way every
//! delivered frame carries a complete checksum, and the port does *not*
//! report [`Caps::rx_checksum_unreliable`]. A frame we send whose checksum
//! is left partial ([`PacketBuf::set_partial_checksum`]) goes with
//! `NEEDS_CSUM` and its positions in the header, as a virtio guest sends
//! it: the kernel takes it as `CHECKSUM_PARTIAL`, accepts it locally and
//! completes the checksum when it forwards the frame to a device without
//! offload (hence [`Caps::tx_checksum_offload`] with `vnet_hdr`; without
//! the header such a checksum is completed here). Other frames carry a
//! zeroed header: their checksums must be complete, and the kernel
//! verifies them.
#![allow(unsafe_code)]

use crate::netns::NetNs;
use crate::{sys, Caps, PacketBuf, Pool, Port, Queue};
use ixora_wire::ethernet::MacAddr;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How to create a TAP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapConfig {
    /// Queues (file descriptors), one per core; at most 256.
    pub queues: u32,
    /// Exchange a virtio-net header with each frame, letting the kernel
    /// hand over frames with incomplete checksums that we complete.
    pub vnet_hdr: bool,
}

impl Default for TapConfig {
    /// One queue, with the virtio-net header.
    fn default() -> Self {
        TapConfig {
            queues: 1,
            vnet_hdr: true,
        }
    }
}

/// Counters of a TAP port, summed over its queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames delivered by `rx_burst`.
    pub rx_frames: u64,
    /// Frames whose checksum we completed (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
    pub rx_csum_completed: u64,
    /// Frames dropped: longer than a pool buffer, or with a header we
    /// cannot honour (segmentation offload, checksum position outside the
    /// frame).
    pub rx_dropped: u64,
    /// Frames written to the device.
    pub tx_frames: u64,
    /// Frames the device refused (dropped).
    pub tx_errors: u64,
    /// Frames written with their checksum left to the kernel (virtio-net
    /// header `NEEDS_CSUM`).
    pub tx_csum_offloaded: u64,
}

/// Size of `struct virtio_net_hdr` (no `num_buffers`), set explicitly.
const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
/// Bytes of Ethernet header (with one 802.1Q tag) on top of the MTU.
const ETH_OVERHEAD: usize = 18;
/// Queues the tun driver allows (`MAX_TAP_QUEUES`).
const MAX_QUEUES: u32 = 256;

/// An open TAP device and its queues.
pub struct TapPort {
    name: String,
    mac: MacAddr,
    kernel_mac: MacAddr,
    max_frame: usize,
    cfg: TapConfig,
    fds: Mutex<Vec<Option<OwnedFd>>>,
    /// The namespace the device is in (for moving it from any thread).
    netns: Mutex<File>,
    counters: Vec<Arc<Counters>>,
}

impl std::fmt::Debug for TapPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPort")
            .field("name", &self.name)
            .field("mac", &self.mac)
            .field("kernel_mac", &self.kernel_mac)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn ioctl_err(name: &str, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("TAP {name}: {what}: {e}"))
}

/// Open one queue of TAP device `name` (a `%d` pattern the first time);
/// returns the descriptor and the device's actual name.
fn open_queue_fd(name: &str, flags: libc::c_int) -> io::Result<(OwnedFd, String)> {
    let path = c"/dev/net/tun";
    // SAFETY: a NUL-terminated path and plain flags; the result is checked.
    let fd = sys::cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })
        .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")))?;
    // SAFETY: `fd` is a fresh descriptor we own from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // The name was checked to fit (15 bytes + NUL) by the caller.
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is
    // and which outlives the call.
    sys::cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETIFF,
            &mut req as *mut libc::ifreq,
        )
    })
    .map_err(|e| {
        if e.raw_os_error() == Some(libc::EBUSY) && flags & libc::IFF_TUN_EXCL != 0 {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("TAP {name}: an interface of that name already exists"),
            )
        } else {
            ioctl_err(name, "TUNSETIFF", e)
        }
    })?;
    let bytes: Vec<u8> = req.ifr_name.iter().map(|&c| c as u8).collect();
    let actual = CStr::from_bytes_until_nul(&bytes)
        .map_err(|_| io::Error::other(format!("TAP {name}: kernel returned an unterminated name")))?
        .to_string_lossy()
        .into_owned();
    Ok((fd, actual))
}

/// Ixora's own MAC for a TAP link: locally administered, unicast, from a
/// hash of the device name, our pid and a counter; never the kernel's.
fn ixora_mac(name: &str, kernel: MacAddr) -> MacAddr {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    for b in name
        .bytes()
        .chain(std::process::id().to_le_bytes())
        .chain(seq.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let b = h.to_le_bytes();
    let mut m = [(b[0] & 0xfc) | 0x02, b[1], b[2], b[3], b[4], b[5]];
    if MacAddr(m) == kernel {
        m[5] ^= 1;
    }
    MacAddr(m)
}

impl TapPort {
    /// Create a TAP device named `name` (at most 15 bytes; `None`: the
    /// kernel picks `ixtap<N>`) in the calling thread's network namespace,
    /// with `cfg.queues` queues. Fails with `AlreadyExists` rather than
    /// attach to an existing interface of that name. Needs CAP_NET_ADMIN;
    /// the caller brings the interface up.
    pub fn create(name: Option<&str>, cfg: TapConfig) -> io::Result<TapPort> {
        let want = name.unwrap_or("ixtap%d");
        if want.is_empty() || want.len() >= libc::IFNAMSIZ || want.contains(['\0', '/']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "TAP name {want:?} is not a valid interface name (1 to {} bytes, no '/' or NUL)",
                    libc::IFNAMSIZ - 1
                ),
            ));
        }
        if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "TAP {want}: queues must be 1..={MAX_QUEUES}, not {}",
                    cfg.queues
                ),
            ));
        }
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE;
        if cfg.vnet_hdr {
            flags |= libc::IFF_VNET_HDR;
        }
        // The first open creates the device and must not attach to an
        // existing one; the others attach to it.
        let (first, actual) = open_queue_fd(want, flags | libc::IFF_TUN_EXCL)?;
        let mut fds = vec![Some(first)];
        for _ in 1..cfg.queues {
            let (fd, _) = open_queue_fd(&actual, flags)?;
            fds.push(Some(fd));
        }
        let fd0 = fds[0].as_ref().expect("queue 0 was just opened");
        if cfg.vnet_hdr {
            let len = VNET_HDR_LEN as libc::c_int;
            // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer,
            // which is live for the call.
            sys::cvt(unsafe {
                libc::ioctl(
                    fd0.as_raw_fd(),
                    libc::TUNSETVNETHDRSZ,
                    &len as *const libc::c_int,
                )
            })
            .map_err(|e| ioctl_err(&actual, "TUNSETVNETHDRSZ", e))?;
            // Checksum offload only: the kernel may leave checksums for us
            // to complete, but never hands us segmentation work.
            // SAFETY: TUNSETOFFLOAD takes its argument by value.
            sys::cvt(unsafe {
                libc::ioctl(
                    fd0.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    libc::TUN_F_CSUM as libc::c_ulong,
                )
            })
            .map_err(|e| ioctl_err(&actual, "TUNSETOFFLOAD", e))?;
        }
        let kernel_mac = sys::hwaddr(&actual).map_err(|e| ioctl_err(&actual, "hwaddr", e))?;
        let mtu = sys::mtu(&actual).map_err(|e| ioctl_err(&actual, "mtu", e))?;
        let netns = File::open("/proc/thread-self/ns/net")?;
        Ok(TapPort {
            mac: ixora_mac(&actual, kernel_mac),
            name: actual,
            kernel_mac,
            max_frame: mtu as usize + ETH_OVERHEAD,
            cfg,
            fds: Mutex::new(fds),
            netns: Mutex::new(netns),
            counters: (0..cfg.queues).map(|_| Arc::default()).collect(),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MAC address of the Linux side of the link (the interface's).
    pub fn kernel_mac(&self) -> MacAddr {
        self.kernel_mac
    }

    /// Move the interface into namespace `ns` (from any thread; the queues
    /// stay attached). Its addresses and up state are lost, as with any
    /// move: configure it there.
    pub fn move_to_netns(&self, ns: &NetNs) -> io::Result<()> {
        let mut cur = self.netns.lock().unwrap_or_else(|e| e.into_inner());
        let here = format!("--net=/proc/{}/fd/{}", std::process::id(), cur.as_raw_fd());
        let out = std::process::Command::new("nsenter")
            .args([
                &here,
                "--",
                "ip",
                "link",
                "set",
                "dev",
                &self.name,
                "netns",
                ns.name(),
            ])
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "TAP {}: moving to namespace {} failed: {}",
                self.name,
                ns.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        *cur = File::open(ns.path())?;
        Ok(())
    }

    /// Counters summed over the queues.
    pub fn stats(&self) -> TapStats {
        let mut s = TapStats::default();
        for c in &self.counters {
            let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
            s.rx_frames += l(&c.rx_frames);
            s.rx_csum_completed += l(&c.rx_csum_completed);
            s.rx_dropped += l(&c.rx_dropped);
            s.tx_frames += l(&c.tx_frames);
            s.tx_errors += l(&c.tx_errors);
            s.tx_csum_offloaded += l(&c.tx_csum_offloaded);
        }
        s
    }
}

impl Port for TapPort {
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = TapPort::stats(self);
        vec![
            ("rx_frames", s.rx_frames),
            ("rx_csum_completed", s.rx_csum_completed),
            ("rx_dropped", s.rx_dropped),
            ("tx_frames", s.tx_frames),
            ("tx_errors", s.tx_errors),
            ("tx_csum_offloaded", s.tx_csum_offloaded),
        ]
    }

    fn caps(&self) -> Caps {
        Caps {
            backend: "tap",
            queues: self.cfg.queues,
            zero_copy: false,
            flow_steering: true,
            rx_checksum_unreliable: false,
            // The virtio-net header carries the checksum's position.
            tx_checksum_offload: self.cfg.vnet_hdr,
            tx_headroom: 0,
            max_frame: self.max_frame,
            note: format!(
                "TAP {}: {} queue(s), {}; one read/write per frame; Ixora's MAC {} (Linux side {})",
                self.name,
                self.cfg.queues,
                if self.cfg.vnet_hdr {
                    "virtio-net header, checksums completed in software"
                } else {
                    "no virtio-net header, kernel completes checksums"
                },
                self.mac,
                self.kernel_mac
            ),
        }
    }

    /// Ixora's end of the link (not the interface's own address).
    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>> {
        let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        let slot = fds.get_mut(queue as usize).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "TAP {} has {} queues, not {}",
                    self.name,
                    self.cfg.queues,
                    queue + 1
                ),
            )
        })?;
        let fd = slot.take().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("TAP {} queue {queue} is already open", self.name),
            )
        })?;
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory arguments.
        let set = unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 {
                fl
            } else {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK)
            }
        };
        if let Err(e) = sys::cvt(set) {
            *slot = Some(fd);
            return Err(ioctl_err(&self.name, "O_NONBLOCK", e));
        }
        Ok(Box::new(TapQueue {
            fd,
            pool: pool.clone(),
            vnet_hdr: self.cfg.vnet_hdr,
            local: Local::default(),
            shared: self.counters[queue as usize].clone(),
        }))
    }
}

/// Per-queue counters, published for [`TapPort::stats`].
#[derive(Default)]
#[repr(align(64))]
struct Counters {
    rx_frames: AtomicU64,
    rx_csum_completed: AtomicU64,
    rx_dropped: AtomicU64,
    tx_frames: AtomicU64,
    tx_errors: AtomicU64,
    tx_csum_offloaded: AtomicU64,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct Local {
    rx_frames: u64,
    rx_csum_completed: u64,
    rx_dropped: u64,
    tx_frames: u64,
    tx_errors: u64,
    tx_csum_offloaded: u64,
}

struct TapQueue {
    fd: OwnedFd,
    pool: Pool,
    vnet_hdr: bool,
    local: Local,
    shared: Arc<Counters>,
}

impl TapQueue {
    fn publish(&self) {
        let (l, s) = (&self.local, &self.shared);
        let st = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        st(&s.rx_frames, l.rx_frames);
        st(&s.rx_csum_completed, l.rx_csum_completed);
        st(&s.rx_dropped, l.rx_dropped);
        st(&s.tx_frames, l.tx_frames);
        st(&s.tx_errors, l.tx_errors);
        st(&s.tx_csum_offloaded, l.tx_csum_offloaded);
    }

    /// Read one frame into `b` (header into `hdr`); bytes read.
    fn read_one(&self, hdr: &mut [u8; VNET_HDR_LEN], b: &mut PacketBuf) -> io::Result<usize> {
        let room = b.spare_mut();
        let r = if self.vnet_hdr {
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr().cast(),
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: room.as_mut_ptr().cast(),
                    iov_len: room.len(),
                },
            ];
            // SAFETY: both iovecs describe live, writable, disjoint buffers
            // (a local array and the spare room of a buffer we own) that
            // outlive the call; the kernel writes at most their lengths.
            unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), 2) }
        } else {
            // SAFETY: `room` is live and writable for its length.
            unsafe { libc::read(self.fd.as_raw_fd(), room.as_mut_ptr().cast(), room.len()) }
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Check a received frame's virtio-net header and complete its checksum;
    /// false if the frame must be dropped.
    fn fix_up(&mut self, hdr: &[u8; VNET_HDR_LEN], frame: &mut [u8]) -> bool {
        let (flags, gso) = (hdr[0], hdr[1]);
        if gso != VIRTIO_NET_HDR_GSO_NONE {
            return false; // never asked for; cannot segment
        }
        if flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
            // Legacy virtio-net headers are in native byte order.
            let start = u16::from_ne_bytes([hdr[6], hdr[7]]);
            let offset = u16::from_ne_bytes([hdr[8], hdr[9]]);
            if !crate::complete_checksum(frame, usize::from(start), usize::from(offset)) {
                return false;
            }
            self.local.rx_csum_completed += 1;
        }
        true
    }
}

impl Queue for TapQueue {
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        let before = self.local;
        let hl = if self.vnet_hdr { VNET_HDR_LEN } else { 0 };
        let mut hdr = [0u8; VNET_HDR_LEN];
        let mut n = 0;
        let mut err = None;
        // Bounded even if every frame read is dropped.
        let mut tries = max.saturating_mul(2).saturating_add(16);
        while n < max && tries > 0 {
            tries -= 1;
            let Some(mut b) = self.pool.alloc() else {
                break;
            };
            let got = match self.read_one(&mut hdr, &mut b) {
                Ok(g) => g,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock
                        && e.kind() != io::ErrorKind::Interrupted
                        && e.raw_os_error() != Some(libc::EIO)
                    {
                        err = Some(e);
                    }
                    break;
                }
            };
            if got < hl + 14 || got - hl > b.capacity() {
                // Runt, or truncated: longer than the buffer.
                self.local.rx_dropped += 1;
                continue;
            }
            let len = got - hl;
            b.set_len(len);
            if self.vnet_hdr && !self.fix_up(&hdr, b.as_mut_slice()) {
                self.local.rx_dropped += 1;
                continue;
            }
            out.push(b);
            n += 1;
        }
        self.local.rx_frames += n as u64;
        if self.local != before {
            self.publish();
        }
        match err {
            Some(e) if n == 0 => Err(e),
            _ => Ok(n),
        }
    }

    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize> {
        let mut taken = 0;
        let mut sent = 0u64;
        let mut err = None;
        for f in frames.iter_mut() {
            // A checksum left partial goes to the kernel in the virtio-net
            // header (legacy headers: native byte order), which makes the
            // skb CHECKSUM_PARTIAL; without the header it is completed here.
            let mut hdr = [0u8; VNET_HDR_LEN];
            let mut offloaded = 0;
            if let Some((start, offset)) = f.partial_checksum() {
                if self.vnet_hdr {
                    hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
                    hdr[6..8].copy_from_slice(&start.to_ne_bytes());
                    hdr[8..10].copy_from_slice(&offset.to_ne_bytes());
                    offloaded = 1;
                } else if !f.complete_checksum() {
                    // Positions outside the frame: refused, as the kernel
                    // would refuse the header.
                    self.local.tx_errors += 1;
                    taken += 1;
                    continue;
                }
            }
            let data = f.as_slice();
            let r = if self.vnet_hdr {
                let iov = [
                    libc::iovec {
                        iov_base: hdr.as_ptr() as *mut libc::c_void,
                        iov_len: VNET_HDR_LEN,
                    },
                    libc::iovec {
                        iov_base: data.as_ptr() as *mut libc::c_void,
                        iov_len: data.len(),
                    },
                ];
                // SAFETY: both iovecs describe live buffers (a local header
                // and a frame we hold) that outlive the call; writev only
                // reads them despite the `*mut` in `iovec`.
                unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) }
            } else {
                // SAFETY: `data` is live and readable for its length.
                unsafe { libc::write(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len()) }
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    // No room now: the frame stays for the next burst.
                    Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => break,
                    // The device is down (its kernel side not up yet, or
                    // taken down): the frame is lost, as on a wire without
                    // carrier; counted, not an error.
                    Some(libc::EIO) => self.local.tx_errors += 1,
                    // Refused (malformed): dropped, counted.
                    _ => {
                        self.local.tx_errors += 1;
                        err = Some(e);
                    }
                }
            } else {
                sent += 1;
                self.local.tx_csum_offloaded += offloaded;
            }
            taken += 1;
        }
        frames.drain(..taken);
        if taken > 0 {
            self.local.tx_frames += sent;
            self.publish();
        }
        match err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(taken),
        }
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}
