//! The shared-memory wire: two Ixora processes on one host joined by
//! single-producer single-consumer rings in shared memory, with no kernel
//! on the data path (the idea of DPDK's memif). For same-host links and
//! benchmarks.
//!
//! # Use
//!
//! ```no_run
//! use ixora_io::shm::{ShmConfig, ShmPort};
//! use ixora_io::Port;
//! use std::{path::Path, time::Duration};
//! # fn main() -> std::io::Result<()> {
//! // Process A
//! let listener = ShmPort::listen(Path::new("/run/ixora/wire0"), ShmConfig::default())?;
//! let port = listener.accept(Duration::from_secs(10))?;
//! // Process B: ShmPort::connect(Path::new("/run/ixora/wire0"), Duration::from_secs(10))?
//! // Then, on each core's thread, for its queue q:
//! let pool = port.pool(0, port.pool_config())?;
//! let mut queue = port.open_queue(0, &pool)?;
//! # Ok(()) }
//! ```
//!
//! The listener decides the [`ShmConfig`]; the connector adopts it. Queue
//! `q` of one side talks to queue `q` of the other.
//!
//! # Memory
//!
//! Per queue there are three memfds, all exchanged once over the control
//! socket with `SCM_RIGHTS`:
//!
//! * **each side's pool region** (`chunks × chunk_size` bytes), created by
//!   its owner, mapped read-write by the owner *before* it is sealed with
//!   `F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, then
//!   sent. The peer can therefore only map it read-only (it cannot regain
//!   write access by `mprotect`, `write(2)`, hole punching or reopening
//!   through `/proc`), and cannot shrink it under our mapping. Our
//!   [`Port::pool`] builds the queue's [`Pool`] over this mapping, so a
//!   frame the stack writes is already in shared memory.
//! * **the ring area** (see `ring::Layout`), created by the listener,
//!   mapped read-write by both, sealed against shrinking and growing.
//!
//! Each side also sends, per queue, one end of its *doorbell*: a Unix
//! stream socket pair ([`os::socket_bell`]) whose other end it keeps to
//! itself, polls and drains; the peer rings it with a one-byte
//! `send(MSG_DONTWAIT)`. Every received memfd is checked before it is
//! mapped (sealable, on tmpfs — hugetlbfs is refused —, large enough,
//! carrying the seals above) and every received doorbell must be a Unix
//! stream socket. Offsets, never pointers, cross the process boundary.
//!
//! Doorbells were eventfds up to protocol version 1. An eventfd's
//! `O_NONBLOCK` flag and counter belong to the file description, which
//! both sides held: a peer could make its doorbell blocking and fill it,
//! and our next ring of it blocked the engine (or empty ours between our
//! poll and our read). With the socket pair the ring is non-blocking
//! whatever the file's flags, and the end we read is ours alone. What a
//! peer can still do to it is refused or contained: descriptors sent to
//! our end are refused by the kernel (`SO_PASSRIGHTS` off, Linux 6.16+;
//! a received one would be closed by our drain, and a close can block),
//! the control socket refuses them too once the handshake is done, and a
//! doorbell the peer shut down (end of file: readable for good) makes
//! the peer count as gone.
//!
//! # Handshake (Unix `SOCK_SEQPACKET` at `path`)
//!
//! Sequenced packets keep message boundaries and tie descriptors to their
//! message. Every message is 48 bytes: magic `IXORASHM`, version, kind,
//! payload.
//!
//! 1. listener → connector `HELLO` (queues, ring size, chunks, chunk size,
//!    listener MAC);
//! 2. listener → connector, per queue, `QUEUE q` + [ring memfd, listener
//!    pool memfd, listener doorbell];
//! 3. connector → listener `REPLY` (connector MAC), then per queue `QUEUE
//!    q` + [connector pool memfd, connector doorbell];
//! 4. listener → connector `ACK`.
//!
//! The connector validates the configuration it is given like any other
//! untrusted input. After the handshake nobody speaks on the socket: its
//! only job is to report the peer's death (hang-up), and a byte arriving
//! on it is treated as a dead (misbehaving) peer.
//!
//! # Rings
//!
//! Per queue and direction: a **descriptor ring** (producer = sender) of
//! `(offset into the sender's region, len)` and a **return ring**
//! (producer = receiver) of offsets handed back. `tx_burst` posts
//! `buf.addr()` and lends the chunk with [`crate::PacketBuf::into_raw`] (no
//! copy);
//! `rx_burst` validates each descriptor, copies the frame into a buffer of
//! our own pool ([`Pool::alloc`] + one `memcpy`) and writes the offset to
//! the return ring at once; the return ring's index is published at the end
//! of the engine's cycle (`reclaim`), on an empty poll, or every 32 frames,
//! which keeps its fence off the path from a frame arriving to the answer
//! leaving. `reclaim` drains our return ring with
//! [`Pool::give_back`], which refuses any chunk that is not lent to the peer.
//!
//! Indices are free-running `u32`s masked by `size - 1`, each alone on its
//! cache line. Each side keeps its own cursors in private memory and only
//! *publishes* them (never reads its own back), so a peer scribbling on the
//! ring area can only lie about *its* indices and entries, all of which we
//! validate.
//!
//! **Memory ordering.** The producer writes entries (relaxed atomic stores),
//! then publishes `prod` with `Release`; the consumer loads `prod` with
//! `Acquire`, reads the entries (relaxed), and publishes `cons` with
//! `Release`; the producer loads `cons` with `Acquire` before reusing a
//! slot. For the frame bytes the same pairs do the work: the sender's
//! writes into a chunk happen-before its `Release` of `prod`, our `Acquire`
//! of `prod` happens-before our copy, our copy happens-before our `Release`
//! of the return ring's `prod`, and the sender only reuses the chunk after
//! `Acquire`-loading that. These are hardware atomics on the same physical
//! memory, address-free, so the argument holds across processes. Only a
//! peer that breaks the protocol can write a chunk while we copy it; then
//! we copy torn bytes (every `u8` is valid) from memory we only ever touch
//! through raw pointers, never references.
//!
//! **Untrusted indices.** A consumer that sees the producer index more than
//! `size` entries ahead of its own (e.g. racing ahead by 2³¹) reads
//! nothing, counts a bad index, and looks again next time: a producer index
//! is never trusted to be more than one ring ahead. Likewise for a consumer
//! index claiming more than was produced.
//!
//! **Untrusted descriptors.** A descriptor is accepted only if `len` is
//! `1..=max_frame`, `offset + len` lies within the sender's region and the
//! frame does not cross a chunk boundary (`offset % chunk + len <= chunk`).
//! Anything else is skipped and counted ([`ShmStats::bad_descriptors`]);
//! the receiver never reads outside the mapping and never panics. A return
//! entry is accepted only if `give_back` confirms that chunk is lent.
//!
//! # Doorbells (sleeping without syscalls on the busy path)
//!
//! Each side has, per queue, two flag words in the ring area: `wake_rx`
//! ("ring me when you post frames") and `wake_ret` ("ring me when you post
//! returns"). A producer, after publishing, issues a `SeqCst` fence and
//! loads the peer's flag; only if it is set does it `swap` it to zero and
//! ring the peer's doorbell. The consumer arms by storing the flag, a
//! `SeqCst` fence, and looking at the rings once more. Either the
//! consumer's second look sees the new index, or the producer's load sees
//! the flag (store-fence-load on both sides, Dekker): no lost wake-up.
//! While busy the flags stay clear and the data path makes no system call.
//!
//! [`Queue`] has no "about to sleep" call, so the queue decides itself:
//! after [`ShmPort::set_sleep_after`] (default 50 µs) of empty `rx_burst`
//! calls it arms (drain the doorbell, set `wake_rx`, fence, look again).
//! To make that safe for an engine that goes to sleep earlier, the queue
//! keeps the invariant **"not armed ⇒ the doorbell is readable"**: the
//! doorbell is rung once when made and only drained when arming;
//! disarming after frames arrive re-rings our own doorbell if the peer
//! never did. An engine
//! that blocks on [`Queue::poll_fd`] before the queue armed just wakes at
//! once and polls again; once armed it really sleeps until a doorbell.
//! `wake_ret` is armed by `reclaim` when our pool is empty and chunks are
//! out with the peer, so a sender starved of buffers is woken by returns.
//!
//! `poll_fd()` is an epoll descriptor holding our doorbell and the control
//! socket, so a peer's death (hang-up) wakes a sleeping engine too.
//!
//! # Peer death
//!
//! The control socket hangs up when the peer process dies (or drops the
//! port). The queues look at it with a non-blocking `recv(MSG_PEEK)` only
//! on slow paths: when arming, every millisecond while armed and idle
//! (re-arming), and every 256 `tx_burst` calls that find the ring full. [`ShmPort::peer_alive`]
//! looks at once. Once the peer is gone every `rx_burst`/`tx_burst` returns
//! [`io::ErrorKind::BrokenPipe`] and the chunks lent to the peer are taken
//! back into the pool (it will never return them). Nothing blocks: the
//! data path never waits on the peer, and the shared mappings stay valid in
//! our process whatever the peer does (the memfds are sealed against
//! shrinking).
//!
//! # What the engine must know
//!
//! * Make each queue's pool with `port.pool(q, port.pool_config())` on the
//!   core's thread, once (a second call fails), and open the queue with
//!   that pool (any other is refused). Headroom is allowed; received frames
//!   longer than `chunk_size - headroom` are dropped and counted. A frame
//!   from another pool handed to `tx_burst` is copied (counted).
//! * Call `reclaim()` every cycle: besides taking our chunks back, it
//!   publishes the returns for the frames we received (also done on an
//!   empty `rx_burst` and every 32 frames).
//! * Watch `poll_fd()` level-triggered (`poll(2)`, or epoll without
//!   `EPOLLET`) and never read it. Before the queue has armed it is
//!   readable, so an engine that sleeps early just polls again.
//!   [`ShmPort::set_sleep_after`]: `Duration::MAX` for pure polling (no
//!   system call ever while the peer lives), `Duration::ZERO` to sleep at
//!   once.
//! * `BrokenPipe` from `rx_burst`/`tx_burst` means the peer is gone for
//!   good: drop the queue and the port (`poll_fd()` stays readable).
//! * `mac()` is ours, [`ShmPort::peer_mac`] the peer's (it can seed the
//!   neighbour table). Checksums are whatever the peer's stack wrote: no
//!   offload is involved.
//! * The listener accepts one connector and removes its socket file. The
//!   peer sees us gone when our port and all its queues are dropped, or
//!   the process exits.
//!
//! # Zero copy
//!
//! Transmit is zero-copy; receive copies once. Receiving without a copy
//! would mean handing the stack buffers that live in the *peer's* memory
//! (which it may keep writing, and whose chunks the stack may hold for a
//! long time — TCP keeps received frames until the application reads them,
//! which would stall the sender's pool) or letting the peer write into
//! ours. The copy is where untrusted memory becomes ours.
#![allow(unsafe_code)]

use ixora_channel::os;
mod queue;
mod ring;

use crate::pool::Region;
use crate::{Caps, Pool, PoolConfig, Port, Queue};
use ixora_wire::ethernet::MacAddr;
use os::Mapping;
use ring::Layout;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest frame the wire carries (a 9000-byte jumbo MTU plus the Ethernet
/// header and a VLAN tag).
pub const MAX_FRAME: usize = 9018;
/// Most queues a port may have.
pub const MAX_QUEUES: u32 = 64;
/// Largest ring (entries).
pub const MAX_RING: u32 = 32768;
/// Largest pool region per queue and side (1 GiB).
pub const MAX_REGION: usize = 1 << 30;
/// Default idle time after which a queue arms its doorbell.
pub const DEFAULT_SLEEP_AFTER: Duration = Duration::from_micros(50);

/// How a shared-memory wire is built; the listener chooses, the connector
/// adopts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConfig {
    /// Queues (one per core), `1..=64`.
    pub queues: u32,
    /// Entries per ring, a power of two in `16..=32768` (default 1024).
    pub ring_size: u32,
    /// Pool chunks per queue per side.
    pub chunks: u32,
    /// Bytes per chunk: a power of two in `2048..=65536`.
    pub chunk_size: usize,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            queues: 1,
            ring_size: 1024,
            chunks: 4096,
            chunk_size: 2048,
        }
    }
}

impl ShmConfig {
    /// Check the limits (also applied to a configuration received from a
    /// listener).
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return bad(format!(
                "shm queues {} not in 1..={MAX_QUEUES}",
                self.queues
            ));
        }
        if !self.ring_size.is_power_of_two() || !(16..=MAX_RING).contains(&self.ring_size) {
            return bad(format!(
                "shm ring_size {} is not a power of two in 16..={MAX_RING}",
                self.ring_size
            ));
        }
        if !self.chunk_size.is_power_of_two() || !(2048..=65536).contains(&self.chunk_size) {
            return bad(format!(
                "shm chunk_size {} is not a power of two in 2048..=65536",
                self.chunk_size
            ));
        }
        if self.chunks == 0 || self.region_len() > MAX_REGION {
            return bad(format!(
                "shm pool of {} chunks of {} bytes is empty or larger than {MAX_REGION} bytes",
                self.chunks, self.chunk_size
            ));
        }
        Ok(())
    }

    /// Bytes of one side's pool region for one queue.
    pub fn region_len(&self) -> usize {
        self.chunks as usize * self.chunk_size
    }

    /// The pool configuration [`Port::pool`] expects (no headroom; a
    /// smaller `chunks` or some headroom are fine too).
    pub fn pool_config(&self) -> PoolConfig {
        PoolConfig {
            chunks: self.chunks,
            chunk_size: self.chunk_size,
            headroom: 0,
            hugepages: false,
        }
    }

    fn layout(&self) -> Layout {
        Layout {
            n: self.ring_size as usize,
        }
    }
}

/// Counters of one queue of a shared-memory port (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Frames received and handed up.
    pub rx_frames: u64,
    /// Frames posted to the peer.
    pub tx_frames: u64,
    /// Descriptors from the peer refused (offset or length out of bounds,
    /// crossing a chunk, empty or too long).
    pub bad_descriptors: u64,
    /// Ring indices from the peer that could not be true (a producer more
    /// than a ring ahead, a consumer ahead of the producer).
    pub bad_indices: u64,
    /// Returned offsets that named no chunk lent to the peer.
    pub bad_returns: u64,
    /// Valid frames dropped on receive because they do not fit our buffers
    /// (chunk minus headroom).
    pub rx_dropped: u64,
    /// Frames dropped on transmit (empty, longer than `max_frame`, or from
    /// another pool with ours exhausted).
    pub tx_dropped: u64,
    /// Frames from another pool copied into ours before sending.
    pub tx_copied: u64,
    /// Doorbells we rang (one-byte sends to the peer's).
    pub doorbells: u64,
    /// Times the queue armed its doorbell to sleep.
    pub sleeps: u64,
}

/// Counter cells written only by the open queue (load + store, no locked
/// instructions), read by [`ShmPort::stats`].
#[derive(Default)]
#[repr(align(64))]
struct StatCells {
    rx_frames: AtomicU64,
    tx_frames: AtomicU64,
    bad_descriptors: AtomicU64,
    bad_indices: AtomicU64,
    bad_returns: AtomicU64,
    rx_dropped: AtomicU64,
    tx_dropped: AtomicU64,
    tx_copied: AtomicU64,
    doorbells: AtomicU64,
    sleeps: AtomicU64,
}

impl StatCells {
    fn snapshot(&self) -> ShmStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ShmStats {
            rx_frames: g(&self.rx_frames),
            tx_frames: g(&self.tx_frames),
            bad_descriptors: g(&self.bad_descriptors),
            bad_indices: g(&self.bad_indices),
            bad_returns: g(&self.bad_returns),
            rx_dropped: g(&self.rx_dropped),
            tx_dropped: g(&self.tx_dropped),
            tx_copied: g(&self.tx_copied),
            doorbells: g(&self.doorbells),
            sleeps: g(&self.sleeps),
        }
    }
}

/// Bump a counter that only one thread writes.
#[inline]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// One queue's shared resources.
struct QueueShared {
    rings: Mapping,
    peer_pool: Mapping,
    /// Our pool region until [`Port::pool`] takes it.
    own_pool: Mutex<Option<Region>>,
    /// Base address of our pool's mapping once made (0 before).
    own_base: AtomicUsize,
    doorbell: OwnedFd,
    self_bell: OwnedFd,
    peer_doorbell: OwnedFd,
    open: AtomicBool,
    stats: StatCells,
}

/// What the port and its queues share.
struct Shared {
    sock: OwnedFd,
    /// 0: listener, 1: connector.
    side: usize,
    cfg: ShmConfig,
    mac: MacAddr,
    peer_mac: MacAddr,
    peer_pid: Option<u32>,
    path: PathBuf,
    dead: AtomicBool,
    sleep_after_ns: AtomicU64,
    queues: Vec<QueueShared>,
}

impl Drop for Shared {
    /// The last close of a file the peer could have put in an epoll set of
    /// its own (a doorbell end), or sent descriptors to (they are closed
    /// with it), can block as long as the peer likes (see
    /// `os::refuse_descriptors`). So those last references are dropped on
    /// a thread of their own: the fields dropped here are only duplicates.
    fn drop(&mut self) {
        let mut last: Vec<OwnedFd> = Vec::new();
        for q in &self.queues {
            for f in [&q.doorbell, &q.self_bell, &q.peer_doorbell] {
                last.extend(f.try_clone());
            }
        }
        last.extend(self.sock.try_clone());
        let _ = std::thread::Builder::new()
            .name("ixora-shm-close".into())
            .spawn(move || drop(last));
    }
}

impl Shared {
    /// Look at the control socket now; latches death.
    fn check_peer(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return false;
        }
        if os::peer_state(self.sock.as_raw_fd()) == os::PeerState::Gone {
            self.dead.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// A listening end of a shared-memory wire, bound at a path. Dropping it
/// removes the socket file (if it is still ours).
pub struct ShmListener {
    sock: OwnedFd,
    path: PathBuf,
    cfg: ShmConfig,
    /// (device, inode) of the socket file we bound.
    id: (u64, u64),
}

/// One end of a shared-memory wire.
pub struct ShmPort {
    shared: Arc<Shared>,
}

static PORTS: AtomicU32 = AtomicU32::new(0);

/// A locally administered MAC 02:49:58:xx:xx:xx ("IX") from our pid, a
/// per-process port counter and the side, so the two ends of a wire always
/// differ (even within one process).
fn local_mac(side: usize) -> MacAddr {
    let pid = std::process::id();
    let n = PORTS.fetch_add(1, Ordering::Relaxed);
    let v = ((pid << 1) | side as u32) ^ (n << 23) ^ ((n >> 1) << 22);
    let v = v & 0x00ff_ffff;
    MacAddr([0x02, 0x49, 0x58, (v >> 16) as u8, (v >> 8) as u8, v as u8])
}

impl ShmPort {
    /// Bind a listening socket at `path` for a wire built with `cfg`. A
    /// stale socket file (no listener behind it) is replaced; a path held
    /// by a live listener, or that is not a socket, is an error.
    pub fn listen(path: &Path, cfg: ShmConfig) -> io::Result<ShmListener> {
        cfg.validate()?;
        let sock = match os::bind_listen(path) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                let meta = std::fs::symlink_metadata(path)?;
                if !meta.file_type().is_socket() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} exists and is not a socket", path.display()),
                    ));
                }
                match os::connect_once(path) {
                    Err(c) if c.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        std::fs::remove_file(path)?;
                        os::bind_listen(path)?
                    }
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("{} is in use by a live listener", path.display()),
                        ))
                    }
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("shm listen on {}: {e}", path.display()),
                ))
            }
        };
        let meta = std::fs::symlink_metadata(path)?;
        Ok(ShmListener {
            sock,
            path: path.to_path_buf(),
            cfg,
            id: (meta.dev(), meta.ino()),
        })
    }

    /// Connect to the listener at `path`, waiting up to `timeout` for it to
    /// appear and for the handshake. The configuration comes from the
    /// listener.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<ShmPort> {
        let deadline = Instant::now() + timeout;
        let conn = loop {
            match os::connect_once(path) {
                Ok(s) => break s,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ECONNREFUSED) | Some(libc::EAGAIN)
                    ) =>
                {
                    os::backoff(deadline).map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("shm connect to {}: {e} (timed out)", path.display()),
                        )
                    })?
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("shm connect to {}: {e}", path.display()),
                    ))
                }
            }
        };
        connector_handshake(conn, path, deadline).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("shm handshake with {}: {e}", path.display()),
            )
        })
    }

    /// The wire's configuration.
    pub fn config(&self) -> ShmConfig {
        self.shared.cfg
    }

    /// The pool configuration to pass to [`Port::pool`].
    pub fn pool_config(&self) -> PoolConfig {
        self.shared.cfg.pool_config()
    }

    /// The peer's Ethernet address (from the handshake).
    pub fn peer_mac(&self) -> MacAddr {
        self.shared.peer_mac
    }

    /// The peer's process id, when the kernel told us.
    pub fn peer_pid(&self) -> Option<u32> {
        self.shared.peer_pid
    }

    /// Is the peer still there? A non-blocking look at the control socket
    /// (one system call); once false, stays false.
    pub fn peer_alive(&self) -> bool {
        self.shared.check_peer()
    }

    /// Counters of queue `queue`.
    pub fn stats(&self, queue: u32) -> Option<ShmStats> {
        self.shared
            .queues
            .get(queue as usize)
            .map(|q| q.stats.snapshot())
    }

    /// How long a queue polls an empty ring before it arms its doorbell so
    /// that the engine can sleep on `poll_fd()` (default 50 µs). Zero arms
    /// on the first empty poll (an engine that sleeps at once); a long time
    /// keeps busy pollers free of system calls across gaps. Applies to
    /// queues opened afterwards.
    pub fn set_sleep_after(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.shared.sleep_after_ns.store(ns, Ordering::Relaxed);
    }

    /// Direct access to our transmit descriptor ring of `queue`, for tests
    /// that play a misbehaving peer. Not for production use: writing it
    /// while a queue is open breaks that queue (never memory safety).
    #[doc(hidden)]
    pub fn raw_tx_ring(&self, queue: u32) -> Option<RawTxRing> {
        (queue < self.shared.cfg.queues).then(|| RawTxRing {
            shared: self.shared.clone(),
            queue: queue as usize,
        })
    }

    /// Direct access to the return ring we produce for the peer's frames
    /// on `queue`, for tests that play a misbehaving peer (as
    /// [`ShmPort::raw_tx_ring`]).
    #[doc(hidden)]
    pub fn raw_return_ring(&self, queue: u32) -> Option<RawReturnRing> {
        (queue < self.shared.cfg.queues).then(|| RawReturnRing {
            shared: self.shared.clone(),
            queue: queue as usize,
        })
    }

    fn queue(&self, queue: u32) -> io::Result<&QueueShared> {
        self.shared.queues.get(queue as usize).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shm port has {} queues, not {}",
                    self.shared.cfg.queues,
                    queue + 1
                ),
            )
        })
    }
}

impl Port for ShmPort {
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut t = ShmStats::default();
        for q in 0..self.shared.queues.len() as u32 {
            if let Some(s) = ShmPort::stats(self, q) {
                t.rx_frames += s.rx_frames;
                t.tx_frames += s.tx_frames;
                t.bad_descriptors += s.bad_descriptors;
                t.bad_indices += s.bad_indices;
                t.bad_returns += s.bad_returns;
                t.rx_dropped += s.rx_dropped;
                t.tx_dropped += s.tx_dropped;
                t.tx_copied += s.tx_copied;
            }
        }
        vec![
            ("rx_frames", t.rx_frames),
            ("tx_frames", t.tx_frames),
            ("bad_descriptors", t.bad_descriptors),
            ("bad_indices", t.bad_indices),
            ("bad_returns", t.bad_returns),
            ("rx_dropped", t.rx_dropped),
            ("tx_dropped", t.tx_dropped),
            ("tx_copied", t.tx_copied),
        ]
    }

    fn fit_pool(&self, want: PoolConfig) -> PoolConfig {
        // The pools live in the shared regions the handshake sized.
        PoolConfig {
            headroom: want.headroom,
            ..self.shared.cfg.pool_config()
        }
    }

    fn caps(&self) -> Caps {
        let c = &self.shared.cfg;
        Caps {
            backend: "shm",
            queues: c.queues,
            zero_copy: false,
            flow_steering: false,
            rx_checksum_unreliable: false,
            tx_checksum_offload: false,
            tx_headroom: 0,
            max_frame: c.chunk_size.min(MAX_FRAME),
            note: format!(
                "shared-memory wire {} ({}, peer pid {}): tx zero-copy, rx one copy; \
                 {} queue(s), rings of {}, {} chunks of {} B per queue and side",
                self.shared.path.display(),
                if self.shared.side == 0 {
                    "listener"
                } else {
                    "connector"
                },
                self.shared
                    .peer_pid
                    .map_or_else(|| "?".to_string(), |p| p.to_string()),
                c.queues,
                c.ring_size,
                c.chunks,
                c.chunk_size
            ),
        }
    }

    fn mac(&self) -> MacAddr {
        self.shared.mac
    }

    /// The pool of queue `queue`, over this side's shared region. Made once
    /// per queue; `cfg.chunk_size` must match the wire's and `cfg.chunks`
    /// may not exceed it (`hugepages` is ignored).
    fn pool(&self, queue: u32, cfg: PoolConfig) -> io::Result<Pool> {
        let c = self.shared.cfg;
        let qs = self.queue(queue)?;
        if cfg.chunk_size != c.chunk_size || cfg.chunks == 0 || cfg.chunks > c.chunks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shm wire pools have {} chunks of {} bytes; asked for {} of {} \
                     (use ShmPort::pool_config)",
                    c.chunks, c.chunk_size, cfg.chunks, cfg.chunk_size
                ),
            ));
        }
        if usize::from(cfg.headroom) >= cfg.chunk_size / 2 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "pool headroom must be below half a chunk",
            ));
        }
        let region = qs
            .own_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("the pool of shm queue {queue} was already made"),
                )
            })?;
        let base = region.as_ptr() as usize;
        let pool = Pool::from_region(
            region,
            PoolConfig {
                hugepages: false,
                ..cfg
            },
        )?;
        qs.own_base.store(base, Ordering::Release);
        Ok(pool)
    }

    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>> {
        let qs = self.queue(queue)?;
        let base = qs.own_base.load(Ordering::Acquire);
        if base == 0 || pool.base() as usize != base {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shm queue {queue} needs the pool made by ShmPort::pool({queue}, ..)"),
            ));
        }
        if qs.open.swap(true, Ordering::AcqRel) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("shm queue {queue} is already open"),
            ));
        }
        match queue::ShmQueue::open(self.shared.clone(), queue as usize, pool.clone()) {
            Ok(q) => Ok(Box::new(q)),
            Err(e) => {
                qs.open.store(false, Ordering::Release);
                Err(e)
            }
        }
    }
}

impl ShmListener {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration offered to the connector.
    pub fn config(&self) -> ShmConfig {
        self.cfg
    }

    /// Wait up to `timeout` for a connector and complete the handshake.
    /// Connections that hang up before answering (for instance another
    /// `listen` probing whether the path is live) are skipped. The socket
    /// file is removed when this returns.
    pub fn accept(self, timeout: Duration) -> io::Result<ShmPort> {
        let deadline = Instant::now() + timeout;
        loop {
            os::wait(self.sock.as_raw_fd(), libc::POLLIN, deadline).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("shm accept on {}: {e}", self.path.display()),
                )
            })?;
            let conn = match os::accept(self.sock.as_fd()) {
                Ok(c) => c,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) || e.raw_os_error() == Some(libc::ECONNABORTED) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            match listener_handshake(conn, self.cfg, &self.path, deadline) {
                Ok(p) => return Ok(p),
                Err(Fail::Retry) => continue,
                Err(Fail::Fatal(e)) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("shm handshake on {}: {e}", self.path.display()),
                    ))
                }
            }
        }
    }
}

impl Drop for ShmListener {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Test hook: our transmit descriptor ring of one queue, written directly.
/// Every access is atomic, so nothing done through it is unsound; it only
/// lets a test behave like a misbehaving peer.
#[doc(hidden)]
pub struct RawTxRing {
    shared: Arc<Shared>,
    queue: usize,
}

impl RawTxRing {
    fn ring(&self) -> ring::RawRing<ring::Desc> {
        let q = &self.shared.queues[self.queue];
        let l = self.shared.cfg.layout();
        // SAFETY: the ring area mapping has the layout's length and lives
        // in `self.shared`, which outlives the returned view's uses here.
        unsafe { ring::RawRing::new(q.rings.as_ptr(), l.desc(self.shared.side), l.n) }
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.shared.cfg.ring_size
    }

    /// The published producer index.
    pub fn prod(&self) -> u32 {
        self.ring().prod().load(Ordering::Acquire)
    }

    /// The peer's consumer index.
    pub fn cons(&self) -> u32 {
        self.ring().cons().load(Ordering::Acquire)
    }

    /// Write descriptor slot `i` (masked).
    pub fn write(&self, i: u32, off: u64, len: u32) {
        let r = self.ring();
        let d = r.ent(i);
        d.off.store(off, Ordering::Relaxed);
        d.len.store(len, Ordering::Relaxed);
    }

    /// Publish producer index `prod` and ring the peer's doorbell.
    pub fn publish(&self, prod: u32) {
        self.ring().prod().store(prod, Ordering::Release);
        os::ring_socket(self.shared.queues[self.queue].peer_doorbell.as_raw_fd());
    }

    /// Length of the peer's pool region as we mapped it.
    pub fn peer_region_len(&self) -> usize {
        self.shared.queues[self.queue].peer_pool.len()
    }
}

/// Test hook: the return ring we produce for the peer's frames on one
/// queue, written directly (atomics only, as [`RawTxRing`]).
#[doc(hidden)]
pub struct RawReturnRing {
    shared: Arc<Shared>,
    queue: usize,
}

impl RawReturnRing {
    fn ring(&self) -> ring::RawRing<AtomicU64> {
        let q = &self.shared.queues[self.queue];
        let l = self.shared.cfg.layout();
        // SAFETY: as in `RawTxRing::ring`; direction `1 - side` carries the
        // peer's frames, whose return ring we produce.
        unsafe { ring::RawRing::new(q.rings.as_ptr(), l.ret(1 - self.shared.side), l.n) }
    }

    /// The published producer index.
    pub fn prod(&self) -> u32 {
        self.ring().prod().load(Ordering::Acquire)
    }

    /// Write return slot `i` (masked).
    pub fn write(&self, i: u32, off: u64) {
        self.ring().ent(i).store(off, Ordering::Relaxed);
    }

    /// Publish producer index `prod`.
    pub fn publish(&self, prod: u32) {
        self.ring().prod().store(prod, Ordering::Release);
    }
}

// ---------------------------------------------------------------------
// Handshake
// ---------------------------------------------------------------------

const MAGIC: [u8; 8] = *b"IXORASHM";
const VERSION: u32 = 2;
const MSG_LEN: usize = 48;
const HELLO: u32 = 1;
const QUEUE: u32 = 2;
const REPLY: u32 = 3;
const ACK: u32 = 4;

/// Seals on a pool region: the peer can map it read-only only, and nobody
/// can resize it.
const POOL_SEALS: libc::c_int =
    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
/// Seals on the ring area (both sides write it).
const RING_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
/// Seals we insist on in what the peer sends.
const PEER_POOL_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_FUTURE_WRITE;
const PEER_RING_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

fn msg(kind: u32) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    m[..8].copy_from_slice(&MAGIC);
    m[8..12].copy_from_slice(&VERSION.to_le_bytes());
    m[12..16].copy_from_slice(&kind.to_le_bytes());
    m
}

fn put32(m: &mut [u8], at: usize, v: u32) {
    m[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get32(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().expect("4 bytes"))
}

fn invalid(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

/// Receive one message of `kind` with exactly `nfds` descriptors.
fn expect(
    sock: BorrowedFd<'_>,
    kind: u32,
    nfds: usize,
    deadline: Instant,
) -> io::Result<([u8; MSG_LEN], Vec<OwnedFd>)> {
    let mut buf = [0u8; 64];
    let (n, fds) = os::recv_msg(sock, &mut buf, deadline)?;
    if n != MSG_LEN || buf[..8] != MAGIC {
        return Err(invalid("peer is not an Ixora shm endpoint"));
    }
    let v = get32(&buf, 8);
    if v != VERSION {
        return Err(invalid(format!(
            "peer speaks shm protocol version {v}, we speak {VERSION}"
        )));
    }
    let k = get32(&buf, 12);
    if k != kind {
        return Err(invalid(format!(
            "handshake message kind {k} where {kind} was due"
        )));
    }
    if fds.len() != nfds {
        return Err(invalid(format!(
            "handshake message carried {} descriptors, {nfds} expected",
            fds.len()
        )));
    }
    let mut m = [0u8; MSG_LEN];
    m.copy_from_slice(&buf[..MSG_LEN]);
    Ok((m, fds))
}

/// This side's resources for one queue.
struct OwnQueue {
    pool_fd: OwnedFd,
    region: Region,
    /// Our end of the doorbell ([`os::socket_bell`]): ours alone.
    doorbell: OwnedFd,
    /// The end the peer rings (we keep it too, to ring ourselves).
    bell_tx: OwnedFd,
}

fn own_queue(cfg: &ShmConfig, side: usize, q: usize) -> io::Result<OwnQueue> {
    let len = cfg.region_len();
    let pool_fd = os::memfd(&format!("ixora-shm-pool-{side}-{q}"), len)?;
    let region = Region::map_shared(pool_fd.as_raw_fd(), len, 0)?;
    os::populate_write(region.as_ptr(), len);
    // Sealed only now, after our writable mapping exists: from here on no
    // writable mapping can be made, by anyone.
    os::seal(pool_fd.as_fd(), POOL_SEALS)?;
    let (doorbell, bell_tx) = os::socket_bell()?;
    // Readable until the queue first arms (see "Sleeping").
    os::ring_socket(bell_tx.as_raw_fd());
    Ok(OwnQueue {
        pool_fd,
        region,
        doorbell,
        bell_tx,
    })
}

fn ring_area(layout: Layout, q: usize) -> io::Result<(OwnedFd, Mapping)> {
    let fd = os::memfd(&format!("ixora-shm-rings-{q}"), layout.len())?;
    let map = Mapping::map(fd.as_fd(), layout.len(), true)?;
    os::seal(fd.as_fd(), RING_SEALS)?;
    Ok((fd, map))
}

/// Map a pool region the peer sent, read-only, after checking it.
fn peer_pool(fd: &OwnedFd, cfg: &ShmConfig) -> io::Result<Mapping> {
    os::check_memfd(fd.as_fd(), cfg.region_len(), PEER_POOL_SEALS)?;
    Mapping::map(fd.as_fd(), cfg.region_len(), false)
}

fn peer_doorbell(fd: OwnedFd) -> io::Result<OwnedFd> {
    os::check_socket_bell(fd.as_fd())?;
    // Descriptors queued on it would be closed with it (the peer holds it
    // too and could allow them again: see `Drop for Shared`).
    os::refuse_descriptors(fd.as_fd());
    Ok(fd)
}

enum Fail {
    /// The connection went away before answering: accept another.
    Retry,
    Fatal(io::Error),
}

fn listener_handshake(
    conn: OwnedFd,
    cfg: ShmConfig,
    path: &Path,
    deadline: Instant,
) -> Result<ShmPort, Fail> {
    let fatal = Fail::Fatal;
    let layout = cfg.layout();
    let mac = local_mac(0);
    let mut own = Vec::new();
    let mut rings = Vec::new();
    for q in 0..cfg.queues as usize {
        own.push(own_queue(&cfg, 0, q).map_err(fatal)?);
        rings.push(ring_area(layout, q).map_err(fatal)?);
    }
    let early = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset => Fail::Retry,
        _ => Fail::Fatal(e),
    };
    let mut hello = msg(HELLO);
    put32(&mut hello, 16, cfg.queues);
    put32(&mut hello, 20, cfg.ring_size);
    put32(&mut hello, 24, cfg.chunks);
    hello[32..40].copy_from_slice(&(cfg.chunk_size as u64).to_le_bytes());
    hello[40..46].copy_from_slice(&mac.0);
    os::send_msg(conn.as_fd(), &hello, &[], deadline).map_err(early)?;
    for (q, (o, r)) in own.iter().zip(&rings).enumerate() {
        let mut m = msg(QUEUE);
        put32(&mut m, 16, q as u32);
        let fds = [r.0.as_fd(), o.pool_fd.as_fd(), o.bell_tx.as_fd()];
        os::send_msg(conn.as_fd(), &m, &fds, deadline).map_err(early)?;
    }
    let (reply, _) = expect(conn.as_fd(), REPLY, 0, deadline).map_err(early)?;
    let peer_mac = MacAddr::from_bytes(&reply[40..46]);
    let mut queues = Vec::new();
    for (q, (o, r)) in own.into_iter().zip(rings).enumerate() {
        let (m, mut fds) = expect(conn.as_fd(), QUEUE, 2, deadline).map_err(fatal)?;
        if get32(&m, 16) != q as u32 {
            return Err(fatal(invalid("handshake queues out of order")));
        }
        let bell = peer_doorbell(fds.pop().expect("2 fds")).map_err(fatal)?;
        let pool_fd = fds.pop().expect("2 fds");
        queues.push(QueueShared {
            rings: r.1,
            peer_pool: peer_pool(&pool_fd, &cfg).map_err(fatal)?,
            own_pool: Mutex::new(Some(o.region)),
            own_base: AtomicUsize::new(0),
            doorbell: o.doorbell,
            self_bell: o.bell_tx,
            peer_doorbell: bell,
            open: AtomicBool::new(false),
            stats: StatCells::default(),
        });
    }
    os::send_msg(conn.as_fd(), &msg(ACK), &[], deadline).map_err(fatal)?;
    // Nothing more is sent on it, descriptors least of all.
    os::refuse_descriptors(conn.as_fd());
    let peer_pid = os::peer_pid(conn.as_fd());
    Ok(ShmPort {
        shared: Arc::new(Shared {
            sock: conn,
            side: 0,
            cfg,
            mac,
            peer_mac,
            peer_pid,
            path: path.to_path_buf(),
            dead: AtomicBool::new(false),
            sleep_after_ns: AtomicU64::new(DEFAULT_SLEEP_AFTER.as_nanos() as u64),
            queues,
        }),
    })
}

fn connector_handshake(conn: OwnedFd, path: &Path, deadline: Instant) -> io::Result<ShmPort> {
    let (hello, _) = expect(conn.as_fd(), HELLO, 0, deadline)?;
    let chunk_size = u64::from_le_bytes(hello[32..40].try_into().expect("8 bytes"));
    let cfg = ShmConfig {
        queues: get32(&hello, 16),
        ring_size: get32(&hello, 20),
        chunks: get32(&hello, 24),
        chunk_size: usize::try_from(chunk_size).unwrap_or(usize::MAX),
    };
    cfg.validate()
        .map_err(|e| invalid(format!("listener offered a bad configuration: {e}")))?;
    let peer_mac = MacAddr::from_bytes(&hello[40..46]);
    let layout = cfg.layout();
    let mut theirs = Vec::new();
    for q in 0..cfg.queues as usize {
        let (m, mut fds) = expect(conn.as_fd(), QUEUE, 3, deadline)?;
        if get32(&m, 16) != q as u32 {
            return Err(invalid("handshake queues out of order"));
        }
        let bell = peer_doorbell(fds.pop().expect("3 fds"))?;
        let pool_fd = fds.pop().expect("3 fds");
        let ring_fd = fds.pop().expect("3 fds");
        os::check_memfd(ring_fd.as_fd(), layout.len(), PEER_RING_SEALS)?;
        let rings = Mapping::map(ring_fd.as_fd(), layout.len(), true)?;
        let pool = peer_pool(&pool_fd, &cfg)?;
        theirs.push((rings, pool, bell));
    }
    let mut mac = local_mac(1);
    if mac == peer_mac {
        mac.0[5] ^= 0x80;
    }
    let own = (0..cfg.queues as usize)
        .map(|q| own_queue(&cfg, 1, q))
        .collect::<io::Result<Vec<_>>>()?;
    let mut reply = msg(REPLY);
    reply[40..46].copy_from_slice(&mac.0);
    os::send_msg(conn.as_fd(), &reply, &[], deadline)?;
    for (q, o) in own.iter().enumerate() {
        let mut m = msg(QUEUE);
        put32(&mut m, 16, q as u32);
        let fds = [o.pool_fd.as_fd(), o.bell_tx.as_fd()];
        os::send_msg(conn.as_fd(), &m, &fds, deadline)?;
    }
    let (ack, _) = expect(conn.as_fd(), ACK, 0, deadline)?;
    // Nothing more is sent on it, descriptors least of all.
    os::refuse_descriptors(conn.as_fd());
    if get32(&ack, 16) != 0 {
        return Err(invalid("listener refused the handshake"));
    }
    let queues = own
        .into_iter()
        .zip(theirs)
        .map(|(o, (rings, pool, bell))| QueueShared {
            rings,
            peer_pool: pool,
            own_pool: Mutex::new(Some(o.region)),
            own_base: AtomicUsize::new(0),
            doorbell: o.doorbell,
            self_bell: o.bell_tx,
            peer_doorbell: bell,
            open: AtomicBool::new(false),
            stats: StatCells::default(),
        })
        .collect();
    let peer_pid = os::peer_pid(conn.as_fd());
    Ok(ShmPort {
        shared: Arc::new(Shared {
            sock: conn,
            side: 1,
            cfg,
            mac,
            peer_mac,
            peer_pid,
            path: path.to_path_buf(),
            dead: AtomicBool::new(false),
            sleep_after_ns: AtomicU64::new(DEFAULT_SLEEP_AFTER.as_nanos() as u64),
            queues,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_aligned_and_disjoint() {
        for n in [16usize, 64, 1024, 32768] {
            let l = Layout { n };
            let mut spans = vec![
                (l.wake_rx(0), ring::LINE),
                (l.wake_rx(1), ring::LINE),
                (l.wake_ret(0), ring::LINE),
                (l.wake_ret(1), ring::LINE),
            ];
            for d in 0..2 {
                let (p, c, e) = l.desc(d);
                spans.extend([(p, ring::LINE), (c, ring::LINE), (e, ring::DESC * n)]);
                let (p, c, e) = l.ret(d);
                spans.extend([(p, ring::LINE), (c, ring::LINE), (e, ring::RET * n)]);
            }
            spans.sort();
            for w in spans.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "overlap at n={n}: {w:?}");
            }
            for (s, _) in &spans {
                assert_eq!(s % ring::LINE, 0, "misaligned at n={n}");
            }
            let (s, len) = spans.last().unwrap();
            assert!(s + len <= l.len());
        }
    }

    #[test]
    fn config_limits() {
        assert!(ShmConfig::default().validate().is_ok());
        let bad = [
            ShmConfig {
                queues: 0,
                ..ShmConfig::default()
            },
            ShmConfig {
                ring_size: 1000,
                ..ShmConfig::default()
            },
            ShmConfig {
                ring_size: 8,
                ..ShmConfig::default()
            },
            ShmConfig {
                chunk_size: 1024,
                ..ShmConfig::default()
            },
            ShmConfig {
                chunks: 1 << 20,
                chunk_size: 4096,
                ..ShmConfig::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    /// A fake listener at a fresh path that runs `script` on the accepted
    /// connection; returns what `ShmPort::connect` made of it.
    fn against_fake_listener(
        name: &str,
        script: impl FnOnce(BorrowedFd<'_>, Instant) + Send + 'static,
    ) -> io::Error {
        let dir =
            std::env::temp_dir().join(format!("ixora-shm-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let l = os::bind_listen(&path).unwrap();
        let t = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            os::wait(l.as_raw_fd(), libc::POLLIN, deadline).unwrap();
            let c = os::accept(l.as_fd()).unwrap();
            script(c.as_fd(), deadline);
            // Hold the connection until the connector gave up.
            let _ = os::wait(c.as_raw_fd(), libc::POLLIN, deadline);
        });
        let r = ShmPort::connect(&path, Duration::from_secs(2));
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        r.err().expect("connect must refuse a bad listener")
    }

    fn hello(cfg: ShmConfig) -> [u8; MSG_LEN] {
        let mut m = msg(HELLO);
        put32(&mut m, 16, cfg.queues);
        put32(&mut m, 20, cfg.ring_size);
        put32(&mut m, 24, cfg.chunks);
        m[32..40].copy_from_slice(&(cfg.chunk_size as u64).to_le_bytes());
        m[40..46].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        m
    }

    const SMALL: ShmConfig = ShmConfig {
        queues: 1,
        ring_size: 16,
        chunks: 4,
        chunk_size: 2048,
    };

    #[test]
    fn connector_refuses_a_bad_configuration() {
        let e = against_fake_listener("cfg", |c, d| {
            let bad = ShmConfig {
                chunks: u32::MAX,
                chunk_size: 65536,
                ..SMALL
            };
            os::send_msg(c, &hello(bad), &[], d).unwrap();
        });
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("bad configuration"), "{e}");
    }

    #[test]
    fn connector_refuses_a_stranger_or_another_version() {
        let e = against_fake_listener("magic", |c, d| {
            os::send_msg(c, &[b'x'; MSG_LEN], &[], d).unwrap();
        });
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let e = against_fake_listener("version", |c, d| {
            let mut m = hello(SMALL);
            put32(&mut m, 8, 99);
            os::send_msg(c, &m, &[], d).unwrap();
        });
        assert!(e.to_string().contains("version 99"), "{e}");
    }

    /// Send HELLO and a QUEUE message carrying `fds` (ring, pool, bell).
    fn queue_with(fds: [OwnedFd; 3]) -> io::Error {
        against_fake_listener("fds", move |c, d| {
            os::send_msg(c, &hello(SMALL), &[], d).unwrap();
            let mut m = msg(QUEUE);
            put32(&mut m, 16, 0);
            let b: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            os::send_msg(c, &m, &b, d).unwrap();
        })
    }

    fn good_ring() -> OwnedFd {
        let l = SMALL.layout();
        let fd = os::memfd("t-ring", l.len()).unwrap();
        os::seal(fd.as_fd(), RING_SEALS).unwrap();
        fd
    }

    fn good_pool() -> OwnedFd {
        let fd = os::memfd("t-pool", SMALL.region_len()).unwrap();
        os::seal(fd.as_fd(), POOL_SEALS).unwrap();
        fd
    }

    /// A peer that shuts down the end of our doorbell it rings (an end of
    /// file: our end would stay readable and the engine never sleep)
    /// counts as gone; descriptors sent to our end are refused.
    #[test]
    fn a_peer_that_shuts_our_doorbell_counts_as_gone() {
        let dir = std::env::temp_dir().join(format!("ixora-shm-unit-{}-shut", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let l = ShmPort::listen(&path, SMALL).unwrap();
        let p2 = path.clone();
        let t = std::thread::spawn(move || ShmPort::connect(&p2, Duration::from_secs(5)));
        let a = l.accept(Duration::from_secs(5)).unwrap();
        let b = t.join().unwrap().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // `a` holds the end of b's doorbell that a rings.
        let theirs = a.shared.queues[0].peer_doorbell.as_fd();
        let e = os::eventfd(0).unwrap();
        let sent = os::send_msg(
            theirs,
            b"x",
            &[e.as_fd()],
            Instant::now() + Duration::from_secs(1),
        );
        // (Where the kernel can refuse descriptors: Linux 6.16+.)
        let (probe, _) = os::socket_bell().unwrap();
        if os::refuse_descriptors(probe.as_fd()) {
            assert_eq!(
                sent.err().and_then(|e| e.raw_os_error()),
                Some(libc::EPERM),
                "a descriptor sent to our doorbell"
            );
        }
        // SAFETY: shutdown has no memory arguments.
        assert_eq!(
            unsafe { libc::shutdown(theirs.as_raw_fd(), libc::SHUT_WR) },
            0
        );
        b.set_sleep_after(Duration::ZERO);
        let pb = b.pool(0, b.pool_config()).unwrap();
        let mut qb = b.open_queue(0, &pb).unwrap();
        let mut rx = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let err = loop {
            assert!(Instant::now() < deadline, "the queue kept running");
            match qb.rx_burst(&mut rx, 64) {
                Ok(_) => std::thread::sleep(Duration::from_micros(100)),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        assert!(!b.peer_alive());
        drop(a);
    }

    #[test]
    fn connector_refuses_bad_descriptors() {
        // An eventfd where the ring memfd belongs.
        let e = queue_with([
            os::eventfd(0).unwrap(),
            good_pool(),
            os::socket_bell().unwrap().1,
        ]);
        assert!(e.to_string().contains("not a sealable memfd"), "{e}");
        // An unsealed ring: the listener could shrink it under us.
        let unsealed = os::memfd("t", SMALL.layout().len()).unwrap();
        let e = queue_with([unsealed, good_pool(), os::socket_bell().unwrap().1]);
        assert!(e.to_string().contains("lacks seals"), "{e}");
        // A pool the listener could still map writable elsewhere is fine for
        // it, but we insist on FUTURE_WRITE (it also forbids hole punching).
        let weak = os::memfd("t", SMALL.region_len()).unwrap();
        os::seal(weak.as_fd(), RING_SEALS).unwrap();
        let e = queue_with([good_ring(), weak, os::socket_bell().unwrap().1]);
        assert!(e.to_string().contains("lacks seals"), "{e}");
        // A pool smaller than the configuration says.
        let short = os::memfd("t", 4096).unwrap();
        os::seal(short.as_fd(), POOL_SEALS).unwrap();
        let e = queue_with([good_ring(), short, os::socket_bell().unwrap().1]);
        assert!(e.to_string().contains("holds"), "{e}");
        // A memfd where the doorbell belongs (writing it could block).
        let e = queue_with([good_ring(), good_pool(), good_pool()]);
        assert!(e.to_string().contains("not a Unix stream socket"), "{e}");
        // An eventfd (protocol version 1's doorbell): the peer shares its
        // flag and counter, so it could make our ring block.
        let e = queue_with([good_ring(), good_pool(), os::eventfd(0).unwrap()]);
        assert!(e.to_string().contains("not a Unix stream socket"), "{e}");
    }

    #[test]
    fn our_pool_cannot_be_mapped_writable_by_the_peer() {
        let o = own_queue(&SMALL, 0, 0).unwrap();
        assert!(Mapping::map(o.pool_fd.as_fd(), SMALL.region_len(), true).is_err());
        let ro = Mapping::map(o.pool_fd.as_fd(), SMALL.region_len(), false).unwrap();
        // SAFETY: test-only: writes through our own writable mapping and
        // reads through the fresh read-only one (same memfd), both in
        // bounds, no references kept.
        unsafe {
            o.region.as_ptr().add(100).write(0xab);
            assert_eq!(ro.as_ptr().add(100).read_volatile(), 0xab);
        }
        // SAFETY: mprotect on the whole read-only mapping we just made;
        // it only changes protections (and must fail).
        let r = unsafe {
            libc::mprotect(
                ro.as_ptr().cast(),
                ro.len(),
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert!(r < 0, "a read-only mapping cannot be made writable");
        // SAFETY: write(2) of one byte from a live local to our own fd.
        let w = unsafe { libc::pwrite(o.pool_fd.as_raw_fd(), [1u8].as_ptr().cast(), 1, 0) };
        assert!(w < 0, "nor can the memfd be written");
        // SAFETY: ftruncate on our own descriptor, no memory arguments.
        let r = unsafe { libc::ftruncate(o.pool_fd.as_raw_fd(), 0) };
        assert!(r < 0, "a sealed pool cannot be shrunk");
    }

    #[test]
    fn macs_differ_between_sides() {
        let a = local_mac(0);
        let b = local_mac(1);
        assert_ne!(a, b);
        assert!(a.is_unicast() && b.is_unicast());
        assert_eq!(a.0[0] & 2, 2, "locally administered");
    }
}
