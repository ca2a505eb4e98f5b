//! The shared-memory layout of one attached application (NewtOS §4: socket
//! buffers exposed to the application).
//!
//! Two memfds per application, both created by the service:
//!
//! * **down** — written only by the service, mapped *read-only* by the app
//!   (sealed with `F_SEAL_FUTURE_WRITE` after the service mapped it, so the
//!   app cannot regain write access). A header page (addresses, the
//!   service's sleeping flag, the event sequence), the change log (the
//!   slots of the sockets each batch changed, [`CHLOG`] entries), one
//!   [`DownSlot`] per socket (receive tail, transmit head, state, error,
//!   addresses), then one receive ring of `ring` bytes per socket. A
//!   listening socket's receive ring holds its accept queue instead: `u64` entries
//!   `slot | gen << 32` of connections already established and mapped.
//! * **up** — written by the app, read by the service, which validates
//!   every index it reads: a header page (the activity word, waiter bits,
//!   per-call counters), the activity bitmap (one bit per socket), one
//!   [`UpSlot`] per socket (receive head, transmit tail, accept head,
//!   requests), then one transmit ring per socket, then the holders
//!   table: for each of [`MAX_PROCS`] process rows, how many of that
//!   process's descriptors refer to each socket. `refs` in the up slot is
//!   the total; when a process goes (exits, is killed, or execs: its
//!   control connection is close-on-exec) the service subtracts its row,
//!   so sockets only it still held are closed.
//!
//! A UDP socket's rings hold datagrams instead of a byte stream: each is
//! a [`DGRAM_HDR`]-byte header ([`dgram_hdr`]: payload length, IPv4
//! address and port — the source in the receive ring, the destination in
//! the transmit ring —, and in the receive ring the time it was received,
//! [`dgram_stamp`], and its IPv4 header's TOS and TTL, [`dgram_rx_ip`])
//! followed by the payload, back to back, wrapping
//! like the stream bytes. The indices count bytes as for a stream, and
//! move by whole datagrams only.
//!
//! Each index is written by one side only, and a consumer's head lives in
//! the other region from the producer's tail, so they never share a cache
//! line. Indices are free-running byte counts (`u64`); a ring position is
//! the count modulo `ring`.
//!
//! Activity: after changing a socket's up slot, the app sets the socket's
//! bit in the bitmap and increments the activity word; the service polls
//! the word once per application per cycle, not every socket. If the
//! service's sleeping flag is set, the app rings its doorbell (an eventfd
//! of its own, which the service watches edge-triggered and never reads).
//! Waiting: an app thread that must block writes its interest bitmaps (the
//! sockets it waits for; or sets its `wants_any` bit), sets its waiter bit,
//! re-checks, and sleeps on the wait end of its wake-up line (set up over
//! the control socket; [`crate::os::wake_line`]); the service, after a batch that changed the app's sockets,
//! clears the bit of, and rings, every armed waiter that wants one of the
//! changes. Each waiter has two bitmaps: [`Regions::interest`] (any change
//! but transmit progress: data or EOF to read, a connection to accept, a
//! state change, an error) and [`Regions::tx_interest`] (the service took
//! bytes from the transmit ring: room to write). A thread that waits to
//! read is thus not woken each time the service takes its last reply.
//! A waiter whose `excl_any` bit is set has a third, [`Regions::excl_interest`]:
//! the listeners and UDP sockets it waits on exclusively (`EPOLLEXCLUSIVE`
//! epoll items, a blocking accept or UDP receive), for which the service
//! rings, in index order, as many armed waiters as the socket has
//! connections or datagrams queued, as Linux wakes one exclusive sleeper
//! per connection or datagram.

use std::sync::atomic::{AtomicI32, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// Magic of the down header.
pub const MAGIC_DOWN: u64 = u64::from_le_bytes(*b"IXSKDOWN");
/// Magic of the up header.
pub const MAGIC_UP: u64 = u64::from_le_bytes(*b"IXSKUP01");
/// Layout version.
pub const VERSION: u32 = 25;
/// Entries of the change log ([`DownHeader::chlog_head`]): a power of
/// two.
pub const CHLOG: u64 = 4096;
const CHLOG_BYTES: usize = CHLOG as usize * 4;
/// Waiters (blocking threads, epoll instances) per application.
pub const MAX_WAITERS: usize = 256;
/// Processes of one application whose descriptor references are tracked
/// (the attaching process and up to 255 forked children at a time:
/// nginx's master and a worker per core on a large machine).
pub const MAX_PROCS: u32 = 256;
/// A process row that is not tracked (the table was full).
pub const NO_ROW: u32 = u32::MAX;

/// The [`UpHeader::waiter_owner`] of a waiter used by the process in
/// holders-table row `row` (a process without a row: a tag the service
/// never frees, whose waiters thread exit alone gives back).
pub fn waiter_tag(row: u32) -> u16 {
    if row < MAX_PROCS {
        row as u16 + 1
    } else {
        u16::MAX
    }
}
/// Page size the layout aligns to.
pub const PAGE: usize = 4096;

/// Socket states ([`DownSlot::state`]).
pub mod state {
    /// Not in use.
    pub const FREE: u32 = 0;
    /// Created, not yet listening or connected.
    pub const OPEN: u32 = 1;
    /// Listening; the receive ring is the accept queue.
    pub const LISTEN: u32 = 2;
    /// Connecting (SYN sent).
    pub const CONNECTING: u32 = 3;
    /// Connected.
    pub const ESTABLISHED: u32 = 4;
    /// The connection is gone (see `flags`/`err`).
    pub const CLOSED: u32 = 5;
}

/// Flags of a socket ([`DownSlot::flags`]).
pub mod flag {
    /// The peer closed its side and every byte before the FIN is in the
    /// receive ring.
    pub const EOF: u32 = 1;
    /// The connection failed; `err` holds the errno.
    pub const ERROR: u32 = 2;
    /// At the service's last look at the transmit ring, the stack's send
    /// buffer had no room for more of it (a peer slower than the program,
    /// or a small `SO_SNDBUF`). Clear, a full ring only waits for the
    /// service's turn: a non-blocking send that finds it full hands the
    /// service the CPU once before it says how much it wrote (the
    /// shim's `do_send`), where set it says so at once.
    pub const STACK_FULL: u32 = 4;
    /// The socket's urgent word ([`Regions::urgent`](super::Regions::urgent))
    /// has been set: readers look at it (one load of this line, which
    /// they read anyway, spares the rest a load of another).
    pub const URGENT: u32 = 8;
}

/// Requests of the app ([`UpSlot::req`]).
pub mod req {
    /// Close when the transmit ring has drained (lazy close).
    pub const CLOSE: u32 = 1;
    /// Send FIN when the transmit ring has drained.
    pub const SHUT_WR: u32 = 2;
    /// Reset the connection now (close with `SO_LINGER` 0).
    pub const ABORT: u32 = 4;
    /// Connect to [`UpSlot::dest`](super::UpSlot::dest): set on a spare
    /// socket the app took ([`UpHeader::spares`](super::UpHeader::spares));
    /// the service clears it once the socket is connecting (or failed).
    pub const CONNECT: u32 = 8;
    /// [`UpSlot::opts`] or [`UpSlot::keep`] changed: the service applies
    /// them before it next acts on the socket, and clears this.
    pub const OPTS: u32 = 16;
    /// The app has sent urgent data ([`UpUrgent::tx`](super::UpUrgent::tx)
    /// says where it ends): the service looks there at each transmit.
    /// Stays set.
    pub const URGENT: u32 = 32;
}

/// [`UpSlot::opts`] bits: the options the stack acts on, as the app last
/// set them (0, the default: `TCP_NODELAY` on, keep-alive off).
pub mod opts {
    /// Nagle's algorithm on (`TCP_NODELAY` off).
    pub const NAGLE: u32 = 1;
    /// `SO_KEEPALIVE`.
    pub const KEEPALIVE: u32 = 2;
    /// `SO_REUSEPORT`, as the app last set it. A socket's bind takes its
    /// sharing from the bind request; these two say whether a socket
    /// already bound lets a later bind share its port (Linux looks at the
    /// holder's flags as they are at that bind: ntpd sets `SO_REUSEADDR`
    /// on its bound wildcard socket before it binds one to an address).
    pub const REUSEPORT: u32 = 4;
    /// `SO_REUSEADDR`, as the app last set it (see [`REUSEPORT`]).
    pub const REUSEADDR: u32 = 8;
    /// `TCP_CORK` (partial segments wait until it is cleared).
    pub const CORK: u32 = 16;
    /// The last send had `MSG_MORE`: its bytes wait as under [`CORK`]
    /// until a send without it.
    pub const MORE: u32 = 32;
    /// `IP_RECVTOS`: the program's receives give each datagram's TOS
    /// (the shim's alone: the service writes it into every datagram's
    /// header anyway).
    pub const RECVTOS: u32 = 64;
    /// `IP_RECVTTL`: the same for its TTL.
    pub const RECVTTL: u32 = 128;
    /// `TCP_DEFER_ACCEPT` of a listener, as Linux keeps it: a count of
    /// SYN-ACK retransmissions ([`super::defer_retrans`]) in these bits.
    pub const DEFER_SHIFT: u32 = 8;
    /// The bits of [`DEFER_SHIFT`].
    pub const DEFER_MASK: u32 = 0xff << DEFER_SHIFT;
    /// `IP_TOS` as Linux keeps it (TCP: its ECN bits clear) in these bits.
    pub const TOS_SHIFT: u32 = 16;
    /// `IP_TTL` in these bits (0: the stack's default).
    pub const TTL_SHIFT: u32 = 24;
}

/// The `IP_TOS` and `IP_TTL` an [`UpSlot::opts`] word holds ([`opts`]).
pub fn opts_ip(word: u32) -> (u8, u8) {
    (
        (word >> opts::TOS_SHIFT) as u8,
        (word >> opts::TTL_SHIFT) as u8,
    )
}

/// `TCP_DEFER_ACCEPT` seconds as Linux keeps them (`secs_to_retrans`
/// with a 1 s initial timeout and a 120 s most): the SYN-ACK
/// retransmissions whose backed-off timeouts add up to at least
/// `seconds` (0 for none).
pub const fn defer_retrans(seconds: i32) -> u8 {
    if seconds <= 0 {
        return 0;
    }
    let (mut res, mut timeout, mut period) = (1u8, 1i32, 1i32);
    while seconds > period && res < 255 {
        res += 1;
        timeout = if timeout * 2 > 120 { 120 } else { timeout * 2 };
        period += timeout;
    }
    res
}

/// The seconds `retrans` SYN-ACK retransmissions take (Linux's
/// `retrans_to_secs`): what `TCP_DEFER_ACCEPT` reads back, and how long
/// a listener holds a connection that brings no data.
pub const fn defer_secs(retrans: u8) -> u32 {
    if retrans == 0 {
        return 0;
    }
    let (mut left, mut timeout, mut period) = (retrans - 1, 1u32, 1u32);
    while left > 0 {
        timeout = if timeout * 2 > 120 { 120 } else { timeout * 2 };
        period += timeout;
        left -= 1;
    }
    period
}

/// The keep-alive timing in [`UpSlot::keep`]: `TCP_KEEPIDLE` and
/// `TCP_KEEPINTVL` (seconds) and `TCP_KEEPCNT` (probes), each 0 for the
/// stack's default.
pub const fn pack_keep(idle: u16, intvl: u16, cnt: u8) -> u64 {
    idle as u64 | (intvl as u64) << 16 | (cnt as u64) << 32
}

/// What [`pack_keep`] packed, each value within Linux's range (1–32,767
/// seconds, 1–127 probes; 0 stays the default): a word the app wrote is
/// taken for no more than the app could have set.
pub const fn unpack_keep(v: u64) -> (u16, u16, u8) {
    const fn within(v: u64, max: u64) -> u64 {
        if v > max {
            max
        } else {
            v
        }
    }
    (
        within(v & 0xffff, 32767) as u16,
        within(v >> 16 & 0xffff, 32767) as u16,
        within(v >> 32 & 0xff, 127) as u8,
    )
}

/// The buffers in [`UpSlot::bufs`]: `SO_RCVBUF` and `SO_SNDBUF` in bytes,
/// each 0 when not set (the stack's, which grow).
pub const fn pack_bufs(rcv: u32, snd: u32) -> u64 {
    rcv as u64 | (snd as u64) << 32
}

/// What [`pack_bufs`] packed: the receive and send buffers, `None` when
/// not set. (Any value is one the app could have set; the stack bounds
/// it.)
pub const fn unpack_bufs(v: u64) -> (Option<u32>, Option<u32>) {
    const fn set(v: u32) -> Option<u32> {
        if v == 0 {
            None
        } else {
            Some(v)
        }
    }
    (set(v as u32), set((v >> 32) as u32))
}

/// Spare TCP sockets the service keeps ready for each app
/// ([`UpHeader::spares`]).
pub const SPARES: usize = 8;

/// A [`UpHeader::spares`] entry for socket `slot` (never 0, which means
/// empty; the socket's generation is its down slot's).
pub fn spare_entry(slot: u32) -> u64 {
    1 << 63 | u64::from(slot)
}

/// The socket a [`UpHeader::spares`] entry names, if it names one.
pub fn spare_of(v: u64) -> Option<u32> {
    (v >> 63 == 1 && v >> 32 == 1 << 31).then_some(v as u32)
}

/// The calls the shim counts, in the order of [`UpHeader::counters`].
pub const CALLS: [&str; 30] = [
    "socket",
    "bind",
    "listen",
    "accept",
    "connect",
    "read",
    "write",
    "close",
    "shutdown",
    "epoll_ctl",
    "epoll_wait",
    "poll",
    "select",
    "fcntl",
    "ioctl",
    "getsockopt",
    "setsockopt",
    "getsockname",
    "getpeername",
    "dup",
    "sendfile",
    "splice",
    "epoll_create",
    "other",
    // Not calls: how the shim waited. `wait` user = a blocking call found
    // its condition while spinning, kernel = it slept in the kernel;
    // `doorbell` kernel = the service's doorbell was rung; `wakeup` user =
    // the service rang a sleeping thread and what it waited for was
    // there, kernel = it was not (a spurious wake-up); `kernel_fds`, per
    // epoll_wait on a set that mixes kernel descriptors with Ixora
    // sockets: user = the kernel ones were known to have nothing (io_uring
    // completions said so), kernel = the kernel was asked for them;
    // `look`, per blocking call on the service's CPU while the service was
    // awake: user = it found its condition after yielding the CPU to the
    // service, kernel = the look ran out and it slept; `scan`, per
    // epoll_wait's look at its set: user = the sockets it looked at,
    // kernel = looks at every socket of the set (the service's change log
    // could not say which changed).
    "wait",
    "doorbell",
    "wakeup",
    "kernel_fds",
    "look",
    "scan",
];

/// Entries of [`CALLS`] that are not socket calls (left out of the
/// user-space share).
pub const NOT_CALLS: [&str; 6] = ["wait", "doorbell", "wakeup", "kernel_fds", "look", "scan"];

/// Index of `name` in [`CALLS`].
pub const fn call(name: &str) -> usize {
    let mut i = 0;
    while i < CALLS.len() {
        if str_eq(CALLS[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("unknown call name");
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The header page of the down region.
#[repr(C, align(64))]
pub struct DownHeader {
    /// [`MAGIC_DOWN`].
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: AtomicU32,
    /// Socket slots.
    pub slots: AtomicU32,
    /// Ring size in bytes.
    pub ring: AtomicU32,
    /// The service's IPv4 address (`u32::from(Ipv4Addr)`).
    pub ip: AtomicU32,
    /// Prefix length of its subnet.
    pub prefix: AtomicU32,
    /// Default gateway (0: none).
    pub gateway: AtomicU32,
    /// The application's id at the service.
    pub app_id: AtomicU32,
    /// Largest UDP payload the service sends: 65507 bytes (what one IPv4
    /// datagram holds; longer than a frame, it leaves in fragments), less
    /// when a ring is smaller (a datagram and its header fit one ring).
    pub max_dgram: AtomicU32,
    /// The application's join key: a `JOIN` for this app must carry it
    /// (`Msg::b`). Random per app; only the app's processes, which map
    /// this region, can read it, so no other local process can make itself
    /// a member of the app and act on its sockets.
    pub join_key: AtomicU64,
    /// The interface index of the service's port in its network
    /// namespace (0: none, as the shared-memory wire), for `IP_PKTINFO`.
    pub ifindex: AtomicU32,
    /// Largest UDP payload one frame carries (the MTU less the IPv4 and
    /// UDP headers): a UDP socket is writable (`POLLOUT`) while its
    /// transmit ring has room for one this long.
    pub frame_dgram: AtomicU32,
    _pad0: [u32; 2],
    /// A TCP connection's receive buffer (window) and send buffer as they
    /// start, and the most either grows to or may be set to (the stack's
    /// `tcp.recv_buffer`, `recv_buffer_max`, `send_buffer`,
    /// `send_buffer_max`), for `SO_RCVBUF` and `SO_SNDBUF`.
    pub tcp_rcvbuf: AtomicU32,
    /// See `tcp_rcvbuf`.
    pub tcp_rcvbuf_max: AtomicU32,
    /// See `tcp_rcvbuf`.
    pub tcp_sndbuf: AtomicU32,
    /// See `tcp_rcvbuf`.
    pub tcp_sndbuf_max: AtomicU32,
    /// Non-zero while the service sleeps: ring its doorbell after activity.
    pub svc_sleeping: AtomicU32,
    /// The CPU the service last ran on, plus one (0: not known). A program
    /// on the same CPU does not spin before it blocks: spinning there
    /// only keeps the service, which it waits for, off the CPU.
    pub svc_cpu: AtomicU32,
    _pad1: [u32; 14],
    /// Incremented after every batch that changed one of the app's sockets.
    pub event_seq: AtomicU64,
    _pad2: [u64; 7],
    /// Change log: entries ever published. After each batch that changed
    /// some of the app's sockets, and before `event_seq` moves, the service
    /// appends their slots to the log ([`Regions::chlog`], entry `k` at
    /// `k % CHLOG`; each slot once per batch), so that an epoll set looks
    /// only at the sockets that changed since it last looked, not at all
    /// of them. It first moves `chlog_reserve` past what it will write,
    /// then writes the entries, then moves this: a reader that took the
    /// entries from `cursor` to this, and then (after an acquire fence)
    /// finds `chlog_reserve - cursor > CHLOG`, may have read overwritten
    /// ones and must look at every socket. A batch that changed more than
    /// half the log's length moves both by more than `CHLOG`, writing
    /// nothing, with the same effect.
    pub chlog_head: AtomicU64,
    /// See `chlog_head`.
    pub chlog_reserve: AtomicU64,
    _pad3: [u64; 6],
    /// Incremented each time a connection of the app learns of new urgent
    /// data ([`Regions::urgent`]): a process that sees it move looks for
    /// the sockets whose owner must get `SIGURG`.
    pub urgent: AtomicU64,
}

/// A socket as the service publishes it.
#[repr(C, align(64))]
pub struct DownSlot {
    /// Bytes ever written into the receive ring.
    pub rx_tail: AtomicU64,
    /// Bytes ever taken from the transmit ring.
    pub tx_head: AtomicU64,
    /// Generation: incremented each time the slot is freed.
    pub gen: AtomicU32,
    /// [`state`].
    pub state: AtomicU32,
    /// [`flag`] bits.
    pub flags: AtomicU32,
    /// errno of a failed connection.
    pub err: AtomicI32,
    /// Accept-queue entries ever written (listening sockets); of a UDP
    /// socket, the ICMP errors ever posted to it, [`DownSlot::err`]
    /// holding the last one's errno (reported once each: the app counts
    /// them in [`UpSlot::errs_seen`]).
    pub acc_tail: AtomicU32,
    /// Incremented on every change of this socket.
    pub seq: AtomicU32,
    /// Local address, [`pack`]ed.
    pub local: AtomicU64,
    /// Remote address, [`pack`]ed.
    pub remote: AtomicU64,
    /// A connection's received bytes that wait beyond its full receive
    /// ring (in the stack, or copied out of its buffers), for `FIONREAD`:
    /// stored before the `rx_tail` that moves bytes out of it, so a
    /// reader that loads `rx_tail` first may count too few for a moment,
    /// never too many. 0 while the ring has room.
    pub rx_beyond: AtomicU32,
    /// A listener's accept-ring room: its `listen` backlog + 1, at most
    /// the ring's capacity (0: not set). A program that takes an entry
    /// from a ring holding this many signals its listener: connections
    /// may wait in the stack's queue for the room it made.
    pub acc_room: AtomicU32,
}

/// The header page of the up region.
#[repr(C, align(64))]
pub struct UpHeader {
    /// [`MAGIC_UP`].
    pub magic: AtomicU64,
    _pad0: [u64; 7],
    /// Incremented by the app after it set bits in the activity bitmap.
    pub activity: AtomicU64,
    _pad1: [u64; 7],
    /// One bit per waiter that wants to be rung.
    pub armed: [AtomicU64; MAX_WAITERS / 64],
    /// Per waiter: who uses it, [`waiter_tag`] of its process's row (0:
    /// free). The app takes a free one by compare-and-swap and gives it
    /// back when its thread ends; the service gives back those of a
    /// process that went (exit, kill) or replaced its image (`exec`),
    /// whose threads could not.
    pub waiter_owner: [AtomicU16; MAX_WAITERS],
    /// One bit per armed waiter that wants any change of the app's
    /// sockets; the others want a change of a socket in their interest
    /// bitmap ([`Regions::interest`]).
    pub wants_any: [AtomicU64; MAX_WAITERS / 64],
    /// One bit per armed waiter whose exclusive-interest bitmap
    /// ([`Regions::excl_interest`]) names sockets; the others have none
    /// (the bitmap is then stale and not read).
    pub excl_any: [AtomicU64; MAX_WAITERS / 64],
    /// Per call of [`CALLS`]: `[resolved in user space, entered the kernel]`.
    pub counters: [[AtomicU64; 2]; 32],
    /// Calls on descriptors that are not Ixora's (passed to the kernel).
    pub passthrough: AtomicU64,
    /// Per waiter: the CPU its thread was on when it armed, plus one (0:
    /// unknown). A hint only: the service yields its CPU after ringing a
    /// waiter that sleeps on that same CPU, so the woken thread runs now.
    pub waiter_cpu: [AtomicU16; MAX_WAITERS],
    /// Spare TCP sockets, made by the service ([`spare_entry`]; 0:
    /// none): the app takes one by swapping its entry to 0, sets the
    /// destination and [`req::CONNECT`], and its connect needs no
    /// request. The service makes new ones as they are taken.
    pub spares: [AtomicU64; SPARES],
}

/// A socket as the app drives it.
#[repr(C, align(64))]
pub struct UpSlot {
    /// Bytes ever consumed from the receive ring.
    pub rx_head: AtomicU64,
    /// Bytes ever written into the transmit ring.
    pub tx_tail: AtomicU64,
    /// Accept-queue entries ever consumed.
    pub acc_head: AtomicU32,
    /// [`req`] bits.
    pub req: AtomicU32,
    /// Descriptors (in every process of the app) that refer to the socket.
    pub refs: AtomicU32,
    /// [`opts`] bits set by the app, which the service applies (with
    /// [`req::OPTS`]): set in shared memory, an option takes no request.
    pub opts: AtomicU32,
    /// Where [`req::CONNECT`] connects (packed, [`pack`]).
    pub dest: AtomicU64,
    /// Keep-alive timing ([`pack_keep`]), applied as [`UpSlot::opts`].
    pub keep: AtomicU64,
    /// `SO_RCVBUF` and `SO_SNDBUF` as the app set them ([`pack_bufs`]),
    /// applied as [`UpSlot::opts`].
    pub bufs: AtomicU64,
    /// Bit 0: a call has reported the connection's error
    /// ([`DownSlot::err`]) to the program; later calls see the connection
    /// closed, as Linux reports `sk_err` once. The app's alone (the
    /// service only clears it for a new socket).
    pub seen: AtomicU32,
    /// A UDP socket's ICMP errors reported to the program (as
    /// [`DownSlot::acc_tail`] counts those posted): one is pending while
    /// the two differ. The app's alone.
    pub errs_seen: AtomicU32,
}

/// A TCP socket's urgent data, as the app keeps it (up region, a table
/// apart from the slots, which have no room left).
#[repr(C, align(32))]
pub struct UpUrgent {
    /// The transmit-ring offset after the app's latest urgent data
    /// (`send` with `MSG_OOB`; 0: none): the service marks the stream
    /// urgent up to there once it has given the stack those bytes.
    pub tx: AtomicU64,
    /// The urgent word ([`Regions::urgent`]) whose byte a `recv` with
    /// `MSG_OOB` took (0: none): it is read.
    pub read: AtomicU64,
    /// The urgent word a process of the app raised `SIGURG` for.
    pub signalled: AtomicU64,
    /// Non-zero once a process of the app gave the socket an owner
    /// (`F_SETOWN` and the like): only then does its new urgent data ring
    /// every sleeper of the app (for `SIGURG`).
    pub owned: AtomicU64,
}

/// A socket's urgent word ([`Regions::urgent`]): the peer's urgent byte
/// at stream offset `mark` (its receive-ring offset), and the byte once
/// it has arrived. Bits 0–47: `mark + 1`; 48–55: the byte; 56: arrived.
pub fn pack_urgent(mark: u64, byte: Option<u8>) -> u64 {
    (mark + 1) & ((1 << 48) - 1) | byte.map_or(0, |b| u64::from(b) << 48 | 1 << 56)
}

/// What [`pack_urgent`] packed (`None`: no urgent data).
pub fn unpack_urgent(w: u64) -> Option<(u64, Option<u8>)> {
    let m = w & ((1 << 48) - 1);
    (m != 0).then(|| (m - 1, (w >> 56 & 1 != 0).then_some((w >> 48) as u8)))
}

/// Bytes of a datagram's header in a UDP socket's ring (until 2026-11-30
/// 16: the received TOS and TTL had no room).
pub const DGRAM_HDR: usize = 24;

/// The ring header of a datagram of `len` bytes from or to `ip:port`:
/// length (`u16`), port (`u16`), address (`u32`), then the receive time
/// ([`with_stamp`]; 0 here), little-endian.
pub fn dgram_hdr(len: u16, ip: u32, port: u16) -> [u8; DGRAM_HDR] {
    let mut h = [0u8; DGRAM_HDR];
    h[0..2].copy_from_slice(&len.to_le_bytes());
    h[2..4].copy_from_slice(&port.to_le_bytes());
    h[4..8].copy_from_slice(&ip.to_le_bytes());
    h
}

/// Header `h` with the datagram's receive time: `CLOCK_REALTIME`
/// nanoseconds when the stack received it (what `SO_TIMESTAMP*` give).
pub fn with_stamp(mut h: [u8; DGRAM_HDR], realtime_ns: u64) -> [u8; DGRAM_HDR] {
    h[8..16].copy_from_slice(&realtime_ns.to_le_bytes());
    h
}

/// What [`dgram_hdr`] wrote: `(len, ip, port)`.
pub fn parse_dgram_hdr(h: &[u8; DGRAM_HDR]) -> (u16, u32, u16) {
    (
        u16::from_le_bytes([h[0], h[1]]),
        u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        u16::from_le_bytes([h[2], h[3]]),
    )
}

/// Header `h` of a datagram to send with the socket's `IP_TOS` and
/// `IP_TTL` as they were when it was sent (TTL 0: the stack's), in the
/// bytes a received datagram's time takes: Linux builds a datagram's
/// header at its `sendmsg`, so an option changed later does not apply to
/// datagrams already written.
pub fn with_ip(mut h: [u8; DGRAM_HDR], tos: u8, ttl: u8) -> [u8; DGRAM_HDR] {
    h[8] = tos;
    h[9] = ttl;
    h
}

/// The `IP_TOS` and `IP_TTL` [`with_ip`] wrote.
pub fn dgram_ip(h: &[u8; DGRAM_HDR]) -> (u8, u8) {
    (h[8], h[9])
}

/// Header `h` of a received datagram with its IPv4 header's TOS (DSCP
/// and ECN) and TTL, what `IP_RECVTOS` and `IP_RECVTTL` give.
pub fn with_rx_ip(mut h: [u8; DGRAM_HDR], tos: u8, ttl: u8) -> [u8; DGRAM_HDR] {
    h[16] = tos;
    h[17] = ttl;
    h
}

/// The TOS and TTL [`with_rx_ip`] wrote.
pub fn dgram_rx_ip(h: &[u8; DGRAM_HDR]) -> (u8, u8) {
    (h[16], h[17])
}

/// The receive time [`with_stamp`] wrote (0: none).
pub fn dgram_stamp(h: &[u8; DGRAM_HDR]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[8..16]);
    u64::from_le_bytes(b)
}

/// Pack an IPv4 address and port into a `u64` (`ip << 16 | port`).
pub const fn pack(ip: u32, port: u16) -> u64 {
    ((ip as u64) << 16) | port as u64
}

/// Unpack what [`pack`] packed.
pub const fn unpack(v: u64) -> (u32, u16) {
    ((v >> 16) as u32, v as u16)
}

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Sizes and offsets of the two regions of one application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Socket slots (a multiple of 64).
    pub slots: u32,
    /// Bytes per ring (a power of two).
    pub ring: u32,
}

impl Layout {
    /// Largest slot count.
    pub const MAX_SLOTS: u32 = 65536;

    /// A layout of `slots` sockets with rings of `ring` bytes; the error
    /// names the bad value.
    pub fn new(slots: u32, ring: u32) -> Result<Layout, String> {
        if slots == 0 || !slots.is_multiple_of(64) || slots > Self::MAX_SLOTS {
            return Err(format!(
                "slots: {slots} is not a multiple of 64 in 64..={}",
                Self::MAX_SLOTS
            ));
        }
        if !ring.is_power_of_two() || !(4096..=(16 << 20)).contains(&ring) {
            return Err(format!(
                "ring: {ring} bytes is not a power of two in 4 KiB..=16 MiB"
            ));
        }
        Ok(Layout { slots, ring })
    }

    fn slots_bytes(&self) -> usize {
        round_up(self.slots as usize * 64, PAGE)
    }

    /// Offset of the change log.
    pub fn chlog(&self) -> usize {
        PAGE
    }

    /// Offset of down slot `i`.
    pub fn down_slot(&self, i: u32) -> usize {
        PAGE + CHLOG_BYTES + i as usize * 64
    }

    /// Offset of the receive ring of socket `i`.
    pub fn rx_ring(&self, i: u32) -> usize {
        self.down_slot(0) + self.slots_bytes() + i as usize * self.ring as usize
    }

    /// Offset of socket `i`'s urgent word ([`Regions::urgent`]), after
    /// the receive rings.
    pub fn urgent(&self, i: u32) -> usize {
        self.rx_ring(0) + self.slots as usize * self.ring as usize + i as usize * 8
    }

    /// Length of the down region.
    pub fn down_len(&self) -> usize {
        self.urgent(0) + round_up(self.slots as usize * 8, PAGE)
    }

    fn bitmap_bytes(&self) -> usize {
        round_up(self.slots as usize / 8, PAGE)
    }

    /// Offset of the activity bitmap (`slots / 64` words).
    pub fn bitmap(&self) -> usize {
        PAGE
    }

    /// Offset of up slot `i`.
    pub fn up_slot(&self, i: u32) -> usize {
        PAGE + self.bitmap_bytes() + i as usize * 64
    }

    /// Offset of the transmit ring of socket `i`.
    pub fn tx_ring(&self, i: u32) -> usize {
        PAGE + self.bitmap_bytes() + self.slots_bytes() + i as usize * self.ring as usize
    }

    /// Offset of the holders table: per socket, per process row, how many
    /// of that process's descriptors refer to the socket (`u16` each).
    /// A socket's rows are contiguous (`MAX_PROCS * 2` bytes), so clearing
    /// them when the slot is reused — once per accepted connection —
    /// touches a few cache lines, not one per row.
    pub fn held(&self, row: u32, i: u32) -> usize {
        PAGE + self.bitmap_bytes()
            + self.slots_bytes()
            + self.slots as usize * self.ring as usize
            + (i as usize * MAX_PROCS as usize + row as usize) * 2
    }

    fn held_bytes(&self) -> usize {
        round_up(MAX_PROCS as usize * self.slots as usize * 2, PAGE)
    }

    /// Offset of word `word` of waiter `w`'s interest bitmaps, after the
    /// holders table: per waiter, `slots / 64` words of change interest,
    /// `slots / 64` words of transmit-progress interest, then `slots / 64`
    /// words of exclusive interest (one bit per socket each).
    pub fn interest(&self, w: u32, word: u32) -> usize {
        self.held(0, 0)
            + self.held_bytes()
            + (w as usize * (3 * self.slots as usize / 64) + word as usize) * 8
    }

    fn interest_bytes(&self) -> usize {
        round_up(MAX_WAITERS * 3 * self.slots as usize / 8, PAGE)
    }

    /// Offset of socket `i`'s [`UpUrgent`], after the interest bitmaps.
    pub fn up_urgent(&self, i: u32) -> usize {
        self.interest(0, 0) + self.interest_bytes() + i as usize * 32
    }

    /// Length of the up region.
    pub fn up_len(&self) -> usize {
        self.up_urgent(0) + round_up(self.slots as usize * 32, PAGE)
    }
}

const _: () = assert!(std::mem::size_of::<DownHeader>() <= PAGE);
const _: () = assert!(std::mem::size_of::<UpHeader>() <= PAGE);
const _: () = assert!(std::mem::size_of::<DownSlot>() == 64);
const _: () = assert!(std::mem::size_of::<UpUrgent>() == 32);
const _: () = assert!(std::mem::size_of::<UpSlot>() == 64);

/// Typed access to one application's two regions, given their base
/// addresses. Both the service and the shim use it; neither trusts what
/// the other side wrote beyond what the type of each field allows (every
/// field is an atomic integer, every ring access is bounded by `ring`).
#[derive(Clone, Copy)]
pub struct Regions {
    down: *mut u8,
    up: *mut u8,
    layout: Layout,
}

// SAFETY: the pointers address shared mappings that outlive the value (the
// owner keeps the mappings alive); all access is through atomics or
// bounded byte copies.
unsafe impl Send for Regions {}
// SAFETY: as above.
unsafe impl Sync for Regions {}

impl Regions {
    /// Access regions mapped at `down` (at least `layout.down_len()`
    /// bytes) and `up` (at least `layout.up_len()` bytes).
    ///
    /// # Safety
    /// Both mappings must stay mapped, at those lengths, for as long as the
    /// value or any copy of it is used, and be aligned to a page.
    pub unsafe fn new(down: *mut u8, up: *mut u8, layout: Layout) -> Regions {
        Regions { down, up, layout }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The down header.
    pub fn down_header(&self) -> &DownHeader {
        // SAFETY: offset 0 of a page-aligned mapping longer than a page;
        // DownHeader is all atomics, valid for any bit pattern.
        unsafe { &*(self.down as *const DownHeader) }
    }

    /// The up header.
    pub fn up_header(&self) -> &UpHeader {
        // SAFETY: as for `down_header`.
        unsafe { &*(self.up as *const UpHeader) }
    }

    /// Entry `k` of the change log (down; see
    /// [`DownHeader::chlog_head`]): entry `k % CHLOG`.
    pub fn chlog(&self, k: u64) -> &AtomicU32 {
        let at = self.layout.chlog() + (k % CHLOG) as usize * 4;
        // SAFETY: in bounds (CHLOG entries of 4 bytes at `chlog()`, before
        // the slots), 4-byte aligned (page-aligned start); an atomic.
        unsafe { &*(self.down.add(at) as *const AtomicU32) }
    }

    /// Down slot `i`. Panics if `i` is out of range.
    pub fn down_slot(&self, i: u32) -> &DownSlot {
        assert!(i < self.layout.slots, "slot {i} out of range");
        // SAFETY: in bounds by the assert and the layout; 64-byte aligned
        // (page-aligned base, 64-byte stride); all atomics.
        unsafe { &*(self.down.add(self.layout.down_slot(i)) as *const DownSlot) }
    }

    /// Socket `i`'s urgent word (down, written by the service: see
    /// [`pack_urgent`]; 0: no urgent data). Panics if out of range.
    pub fn urgent(&self, i: u32) -> &AtomicU64 {
        assert!(i < self.layout.slots, "slot {i} out of range");
        // SAFETY: in bounds by the assert and the layout (the table ends
        // the down region), 8-byte aligned; an atomic.
        unsafe { &*(self.down.add(self.layout.urgent(i)) as *const AtomicU64) }
    }

    /// Socket `i`'s urgent data as the app keeps it (up). Panics if out of
    /// range.
    pub fn up_urgent(&self, i: u32) -> &UpUrgent {
        assert!(i < self.layout.slots, "slot {i} out of range");
        // SAFETY: in bounds by the assert and the layout (the table ends
        // the up region), 32-byte aligned (page-aligned table, 32-byte
        // stride); all atomics.
        unsafe { &*(self.up.add(self.layout.up_urgent(i)) as *const UpUrgent) }
    }

    /// Up slot `i`. Panics if `i` is out of range.
    pub fn up_slot(&self, i: u32) -> &UpSlot {
        assert!(i < self.layout.slots, "slot {i} out of range");
        // SAFETY: as for `down_slot`.
        unsafe { &*(self.up.add(self.layout.up_slot(i)) as *const UpSlot) }
    }

    /// How many descriptors of process `row` refer to socket `i` (up:
    /// written by that process; read and cleared by the service when the
    /// process goes). Panics if out of range.
    pub fn held(&self, row: u32, i: u32) -> &AtomicU16 {
        assert!(
            row < MAX_PROCS && i < self.layout.slots,
            "held({row}, {i}) out of range"
        );
        // SAFETY: in bounds of the up region (the holders table ends it),
        // 2-byte aligned (page-aligned base, even offset).
        unsafe { &*(self.up.add(self.layout.held(row, i)) as *const AtomicU16) }
    }

    /// Word `word` of waiter `w`'s change-interest bitmap (up: written by
    /// the waiting thread before it arms): wake on any change of these
    /// sockets but transmit progress. Panics if out of range.
    pub fn interest(&self, w: u32, word: u32) -> &AtomicU64 {
        assert!(
            (w as usize) < MAX_WAITERS && word < self.layout.slots / 64,
            "interest({w}, {word}) out of range"
        );
        self.interest_word(w, word)
    }

    /// Word `word` of waiter `w`'s transmit-interest bitmap: wake also
    /// when the service takes bytes from these sockets' transmit rings.
    /// Panics if out of range.
    pub fn tx_interest(&self, w: u32, word: u32) -> &AtomicU64 {
        assert!(
            (w as usize) < MAX_WAITERS && word < self.layout.slots / 64,
            "tx_interest({w}, {word}) out of range"
        );
        self.interest_word(w, self.layout.slots / 64 + word)
    }

    /// Word `word` of waiter `w`'s exclusive-interest bitmap, read by the
    /// service only while the waiter's `excl_any` bit is set: of the
    /// sockets of its change interest, those it waits on only exclusively
    /// (`EPOLLEXCLUSIVE` items, a blocking accept or UDP receive). A new
    /// connection of such a listener, or datagram of such a UDP socket,
    /// rings one armed waiter that wants it, not every one. Panics if out
    /// of range.
    pub fn excl_interest(&self, w: u32, word: u32) -> &AtomicU64 {
        assert!(
            (w as usize) < MAX_WAITERS && word < self.layout.slots / 64,
            "excl_interest({w}, {word}) out of range"
        );
        self.interest_word(w, 2 * (self.layout.slots / 64) + word)
    }

    fn interest_word(&self, w: u32, word: u32) -> &AtomicU64 {
        // SAFETY: in bounds of the up region (the interest bitmaps end
        // it; callers check `w` and `word`), 8-byte aligned (page-aligned
        // start, 8-byte steps).
        unsafe { &*(self.up.add(self.layout.interest(w, word)) as *const AtomicU64) }
    }

    /// Word `w` of the activity bitmap. Panics if out of range.
    pub fn bitmap_word(&self, w: u32) -> &AtomicU64 {
        assert!(w < self.layout.slots / 64, "bitmap word {w} out of range");
        // SAFETY: in bounds (slots/64 words at `bitmap()`), 8-byte aligned.
        unsafe { &*(self.up.add(self.layout.bitmap() + w as usize * 8) as *const AtomicU64) }
    }

    /// Give this process a private, writable copy of the down region's
    /// header and socket table, in place ([`crate::os::privatize`]; the
    /// receive rings stay as they are), so that the app may write there
    /// what the service would have.
    ///
    /// # Safety
    /// Only once the service that writes the down region is gone for good.
    pub unsafe fn privatize_down_slots(&self) -> std::io::Result<()> {
        // SAFETY: the header page, the change log and the slot pages are
        // whole pages at the start of the down mapping; the caller promises
        // no writer is left.
        unsafe { crate::os::privatize(self.down, self.layout.rx_ring(0)) }
    }

    /// Mark socket `i` active and bump the activity word; true when the
    /// service sleeps and must be woken.
    pub fn signal(&self, i: u32) -> bool {
        self.bitmap_word(i / 64)
            .fetch_or(1 << (i % 64), Ordering::SeqCst);
        self.up_header().activity.fetch_add(1, Ordering::SeqCst);
        self.down_header().svc_sleeping.load(Ordering::SeqCst) != 0
    }

    /// Copy `dst.len()` bytes out of socket `i`'s receive ring (down)
    /// starting at free-running position `pos`.
    pub fn rx_read(&self, i: u32, pos: u64, dst: &mut [u8]) {
        let base = self.layout.rx_ring(i);
        copy_out(self.down, base, self.layout.ring, pos, dst);
    }

    /// Copy `src` into socket `i`'s receive ring (down) at `pos`. Service
    /// only.
    pub fn rx_write(&self, i: u32, pos: u64, src: &[u8]) {
        let base = self.layout.rx_ring(i);
        copy_in(self.down, base, self.layout.ring, pos, src);
    }

    /// Copy out of socket `i`'s transmit ring (up) at `pos`.
    pub fn tx_read(&self, i: u32, pos: u64, dst: &mut [u8]) {
        let base = self.layout.tx_ring(i);
        copy_out(self.up, base, self.layout.ring, pos, dst);
    }

    /// `n` bytes of socket `i`'s transmit ring (up) from `pos`, as a new
    /// buffer (not zeroed first: the copy fills it).
    pub fn tx_take(&self, i: u32, pos: u64, n: usize) -> Vec<u8> {
        let base = self.layout.tx_ring(i);
        let mut v = Vec::with_capacity(n);
        // SAFETY: `v` has capacity for `n` bytes; `copy_out_raw` writes all
        // `n` (or panics before `set_len`), so they are initialised.
        unsafe {
            copy_out_raw(self.up, base, self.layout.ring, pos, v.as_mut_ptr(), n);
            v.set_len(n);
        }
        v
    }

    /// Copy `src` into socket `i`'s transmit ring (up) at `pos`. App only.
    pub fn tx_write(&self, i: u32, pos: u64, src: &[u8]) {
        let base = self.layout.tx_ring(i);
        copy_in(self.up, base, self.layout.ring, pos, src);
    }

    /// Where `len` bytes from `pos` of socket `i`'s receive ring (down)
    /// lie: up to two spans, the second non-empty when the ring wraps. For
    /// an app that has the kernel copy straight out of its ring (splice);
    /// it may read them only while they are unread (before the head it
    /// publishes). App only.
    pub fn rx_spans(&self, i: u32, pos: u64, len: usize) -> [(*const u8, usize); 2] {
        assert!(i < self.layout.slots, "socket out of range");
        self.spans(self.down, self.layout.rx_ring(i), pos, len)
            .map(|(p, n)| (p as *const u8, n))
    }

    /// Where `len` bytes from `pos` of socket `i`'s transmit ring (up)
    /// lie: up to two spans, the second non-empty when the ring wraps. For
    /// an app that has the kernel read straight into its ring (sendfile,
    /// splice); it may write them only while they are free (past the tail
    /// it publishes). App only.
    pub fn tx_spans(&self, i: u32, pos: u64, len: usize) -> [(*mut u8, usize); 2] {
        assert!(i < self.layout.slots, "socket out of range");
        self.spans(self.up, self.layout.tx_ring(i), pos, len)
    }

    /// The spans of `len` bytes from `pos` of the ring at `base` of the
    /// mapping at `region` (a socket's ring, checked by the caller).
    fn spans(&self, region: *mut u8, base: usize, pos: u64, len: usize) -> [(*mut u8, usize); 2] {
        let ring = self.layout.ring as usize;
        assert!(len <= ring, "span longer than the ring");
        let off = (pos % ring as u64) as usize;
        let first = len.min(ring - off);
        // SAFETY: `base + off + first` and `base + len - first` are within
        // the ring at `base` (a socket's, in range: the caller checked;
        // off < ring, first <= ring - off, len <= ring), inside `region`'s
        // mapping; no memory is read or written here.
        unsafe {
            [
                (region.add(base + off), first),
                (region.add(base), len - first),
            ]
        }
    }

    /// Accept-queue entry `k` of listening socket `i` (in its receive
    /// ring).
    pub fn acc_entry(&self, i: u32, k: u32) -> &AtomicU64 {
        let cap = self.layout.ring / 8;
        let off = self.layout.rx_ring(i) + (k % cap) as usize * 8;
        // SAFETY: inside socket i's receive ring (asserted by rx_ring's
        // caller contract via slot bounds: down_slot(i) panics first for a
        // bad i), 8-byte aligned.
        assert!(i < self.layout.slots);
        unsafe { &*(self.down.add(off) as *const AtomicU64) }
    }

    /// Entries an accept queue holds.
    pub fn acc_capacity(&self) -> u32 {
        self.layout.ring / 8
    }
}

/// Copy from a ring at `base` (of `ring` bytes) in the region at `region`.
fn copy_out(region: *mut u8, base: usize, ring: u32, pos: u64, dst: &mut [u8]) {
    // SAFETY: `dst` is `dst.len()` writable bytes.
    unsafe { copy_out_raw(region, base, ring, pos, dst.as_mut_ptr(), dst.len()) }
}

/// [`copy_out`] into `len` bytes at `dst`, which may be uninitialised.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
unsafe fn copy_out_raw(
    region: *mut u8,
    base: usize,
    ring: u32,
    pos: u64,
    dst: *mut u8,
    len: usize,
) {
    assert!(len <= ring as usize, "copy larger than the ring");
    let ring = ring as usize;
    let off = (pos % ring as u64) as usize;
    let first = len.min(ring - off);
    // SAFETY: `base..base+ring` is one ring inside the mapping (layout);
    // `off + first <= ring` and the wrapped part is `< ring`; `dst` has
    // `len` writable bytes (caller). The other side may write these bytes
    // concurrently; that can only garble the bytes of its own stream,
    // which we copy as plain bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(region.add(base + off), dst, first);
        std::ptr::copy_nonoverlapping(region.add(base), dst.add(first), len - first);
    }
}

/// Copy into a ring (see [`copy_out`]).
fn copy_in(region: *mut u8, base: usize, ring: u32, pos: u64, src: &[u8]) {
    assert!(src.len() <= ring as usize, "copy larger than the ring");
    let ring = ring as usize;
    let off = (pos % ring as u64) as usize;
    let first = src.len().min(ring - off);
    // SAFETY: as in `copy_out`; the destination is a writable mapping of
    // the caller's side.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), region.add(base + off), first);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(first), region.add(base), src.len() - first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TCP_DEFER_ACCEPT` reads back as Linux 6.18 printed: 1→1, 4→7,
    /// 10→15, 30→31; none for 0 or less; the backed-off timeouts stop
    /// growing at 120 s.
    #[test]
    fn defer_accept_rounds_as_linux() {
        let back = |s| defer_secs(defer_retrans(s));
        assert_eq!([back(1), back(4), back(10), back(30)], [1, 7, 15, 31]);
        assert_eq!([back(0), back(-5)], [0, 0]);
        assert_eq!(defer_retrans(7), 3);
        assert_eq!(back(200), 247);
        assert_eq!(defer_retrans(i32::MAX), 255);
    }

    #[test]
    fn keep_alive_timing_reads_back_within_linux_ranges() {
        assert_eq!(unpack_keep(pack_keep(7200, 75, 9)), (7200, 75, 9));
        assert_eq!(unpack_keep(0), (0, 0, 0));
        // Whatever an app wrote: no more than setsockopt accepts
        // (TCP_KEEPIDLE/TCP_KEEPINTVL 1–32,767 s, TCP_KEEPCNT 1–127).
        assert_eq!(unpack_keep(u64::MAX), (32767, 32767, 127));
    }

    #[test]
    fn a_datagram_header_reads_back_as_written() {
        for (len, ip, port) in [
            (0, 0, 0),
            (1472, 0xc612_0902, 7005),
            (u16::MAX, u32::MAX, 1),
        ] {
            let h = dgram_hdr(len, ip, port);
            assert_eq!(parse_dgram_hdr(&h), (len, ip, port));
            assert_eq!(dgram_stamp(&h), 0);
            let t = 1_795_000_000_123_456_789;
            let h = with_stamp(h, t);
            assert_eq!((parse_dgram_hdr(&h), dgram_stamp(&h)), ((len, ip, port), t));
            assert_eq!(dgram_rx_ip(&h), (0, 0));
            let h = with_rx_ip(h, 0x28, 33);
            assert_eq!(
                (parse_dgram_hdr(&h), dgram_stamp(&h), dgram_rx_ip(&h)),
                ((len, ip, port), t, (0x28, 33))
            );
        }
        // Little-endian, length first: what a ring dump shows.
        assert_eq!(
            with_rx_ip(
                with_stamp(dgram_hdr(5, 0x0102_0304, 0x0a0b), 0x1122),
                0x28,
                33
            ),
            [
                5, 0, 0x0b, 0x0a, 4, 3, 2, 1, 0x22, 0x11, 0, 0, 0, 0, 0, 0, 0x28, 33, 0, 0, 0, 0,
                0, 0
            ]
        );
    }

    #[test]
    fn an_urgent_word_reads_back_as_packed() {
        assert_eq!(unpack_urgent(0), None);
        assert_eq!(unpack_urgent(pack_urgent(0, None)), Some((0, None)));
        assert_eq!(
            unpack_urgent(pack_urgent(77_000, Some(0))),
            Some((77_000, Some(0)))
        );
        assert_eq!(
            unpack_urgent(pack_urgent((1 << 48) - 2, Some(0xff))),
            Some(((1 << 48) - 2, Some(0xff)))
        );
    }

    #[test]
    fn layout_rejects_bad_sizes() {
        assert!(Layout::new(0, 65536).is_err());
        assert!(Layout::new(65, 65536).is_err());
        assert!(Layout::new(64, 5000).is_err());
        assert!(Layout::new(64, 1 << 25).is_err());
        let l = Layout::new(128, 65536).unwrap();
        assert_eq!(l.down_slot(0) % PAGE, 0);
        assert_eq!(l.chlog() + CHLOG as usize * 4, l.down_slot(0));
        assert_eq!(l.rx_ring(0) % PAGE, 0);
        assert_eq!(l.tx_ring(0) % PAGE, 0);
        // The urgent words follow the last receive ring and end the down
        // region.
        assert_eq!(l.rx_ring(127) + 65536, l.urgent(0));
        assert_eq!(l.urgent(0) % PAGE, 0);
        assert_eq!(l.urgent(0) + PAGE, l.down_len());
        // The holders table follows the last transmit ring and ends the
        // up region.
        assert_eq!(l.tx_ring(127) + 65536, l.held(0, 0));
        assert_eq!(l.held(0, 0) % PAGE, 0);
        assert!(l.held(MAX_PROCS - 1, 127) + 2 <= l.interest(0, 0));
        assert_eq!(l.interest(0, 0) % PAGE, 0);
        // Per waiter: change, transmit and exclusive interest, 2 words
        // each; then the urgent table ends the up region.
        assert_eq!(l.interest(MAX_WAITERS as u32 - 1, 5) + 8, l.up_urgent(0));
        assert_eq!(l.up_urgent(127) + 32, l.up_len());
        assert_eq!(l.up_len() % PAGE, 0);
        assert!(l.up_slot(0) >= l.bitmap() + 128 / 8);
    }

    #[test]
    fn ring_copies_wrap() {
        let l = Layout::new(64, 4096).unwrap();
        // Page-aligned, as the mappings are (the headers are 64-byte
        // aligned types).
        #[repr(C, align(4096))]
        struct Page([u8; PAGE]);
        let pages =
            |n: usize| -> Vec<Page> { (0..n.div_ceil(PAGE)).map(|_| Page([0; PAGE])).collect() };
        let mut down = pages(l.down_len());
        let mut up = pages(l.up_len());
        // SAFETY: both vectors outlive `r`, are page-aligned and at least
        // the layout's lengths.
        let r = unsafe { Regions::new(down.as_mut_ptr().cast(), up.as_mut_ptr().cast(), l) };
        let src: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        r.tx_write(3, 4096 * 5 + 2000, &src);
        let mut dst = vec![0u8; 3000];
        r.tx_read(3, 2000, &mut dst);
        assert_eq!(src, dst);
        // The same bytes as a new buffer, across the wrap and not.
        assert_eq!(r.tx_take(3, 2000, 3000), src);
        assert_eq!(r.tx_take(3, 4096 + 2000, 1000), src[..1000].to_vec());
        assert!(r.tx_take(3, 2000, 0).is_empty());
        // The spans a read(2) fills in place: what tx_write would write.
        let [(p0, n0), (p1, n1)] = r.tx_spans(4, 4096 * 2 + 3000, 3000);
        assert_eq!((n0, n1), (1096, 1904));
        // SAFETY: the spans lie in `up` (socket 4's ring), which outlives
        // this; nothing else touches it.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), p0, n0);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(n0), p1, n1);
        }
        assert_eq!(r.tx_take(4, 3000, 3000), src);
        assert_eq!(
            r.tx_spans(4, 4096, 4096)[1].1,
            0,
            "no wrap from the ring's start"
        );
        r.rx_write(63, 4095, &src[..10]);
        let mut d2 = [0u8; 10];
        r.rx_read(63, 4095, &mut d2);
        assert_eq!(&src[..10], &d2);
        assert!(!r.signal(5));
        assert_eq!(r.bitmap_word(0).load(Ordering::Relaxed), 1 << 5);
        assert_eq!(call("read"), 5);
        assert_eq!(unpack(pack(0xc6120002, 7)), (0xc6120002, 7));
        // The holders table: rows do not overlap.
        for row in 0..MAX_PROCS {
            for s in 0..64 {
                r.held(row, s)
                    .store((row * 64 + s) as u16, Ordering::Relaxed);
            }
        }
        for row in 0..MAX_PROCS {
            for s in 0..64 {
                assert_eq!(
                    r.held(row, s).load(Ordering::Relaxed),
                    (row * 64 + s) as u16
                );
            }
        }
        // Nothing spilled into the last transmit ring.
        let mut tail = vec![0u8; 4096];
        r.tx_read(63, 0, &mut tail);
        assert!(tail.iter().all(|&b| b == 0));
    }
}
