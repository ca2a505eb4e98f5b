//! Control messages between an application and the service, over a Unix
//! `SOCK_SEQPACKET` socket (one message per packet; descriptors ride with
//! the message they belong to).
//!
//! Every request and reply is a [`Msg`] of [`Msg::LEN`] bytes; a reply
//! carries the result in `a` (`>= 0` success, `< 0` a negated errno). The
//! `STATS` and `SOCKETS` replies are followed by text in the same packet;
//! an `INFO` reply's fields carry what it says.

/// Magic at the start of every message.
pub const MAGIC: u32 = u32::from_le_bytes(*b"IXCT");

/// Operations.
pub mod op {
    /// Attach a new application (`a` = pid). Reply: `a` = app id, `b` =
    /// slots, `c` = ring bytes; descriptors: down memfd, up memfd, the
    /// service's doorbell.
    pub const ATTACH: u32 = 1;
    /// Join an attached application (`a` = app id, `b` = the app's join
    /// key from its down header) on a new connection that a process opens
    /// for the child it is about to fork (the child keeps the connection;
    /// it ends with the child). Reply: `slot` = the child's row of the
    /// holders table (`layout::NO_ROW`: none free); `EPERM` if the key is
    /// wrong.
    pub const JOIN: u32 = 2;
    /// Set up waiter `slot`. The reply carries the wait end of a wake-up
    /// line the service rings ([`crate::os::wake_line`]); a descriptor
    /// sent with the request is ignored.
    pub const WAITER: u32 = 3;
    /// Create a socket: `a` = 0 a TCP socket, 1 a UDP socket. Reply: `a`
    /// = slot, `b` = generation. With `c` non-zero, then bind or connect
    /// it in the same round trip: `c`'s low 32 bits are [`BIND`] or
    /// [`CONNECT`], its high 32 bits that request's `b`, and `b` its `a`;
    /// the reply's `c` is that request's reply `b`. If that request
    /// fails, the new socket is closed and the reply is its error.
    pub const SOCKET: u32 = 4;
    /// Bind socket `slot` to the packed address `a` (a UDP socket: port 0
    /// picks a free one; the reply's `b` is the port bound). `b` bit 0: the
    /// socket set SO_REUSEPORT (a TCP port may then be shared with other
    /// such sockets of the same user; each connection goes to one); bit 1:
    /// it set SO_REUSEADDR (a TCP port may then be bound by other such
    /// sockets while none of them listens, as Linux's
    /// `inet_csk_bind_conflict` allows).
    pub const BIND: u32 = 5;
    /// Listen on socket `slot` with backlog `a`.
    pub const LISTEN: u32 = 6;
    /// Connect socket `slot` to the packed address `a` (completes
    /// asynchronously: watch the slot's state). A UDP socket: set its
    /// peer (bound to a free port first if it was not), at once; address
    /// 0 removes the peer.
    pub const CONNECT: u32 = 7;
    // 8 was SETOPT: options are set in shared memory now
    // (`layout::UpSlot::opts`, `layout::req::OPTS`).
    /// Statistics of the service and every app, as JSON text after the
    /// reply.
    pub const STATS: u32 = 9;
    /// The process on this (joined) connection is now pid `a` (sent by a
    /// forked child; the pid is shown by `ixora stats`, never trusted).
    pub const HELLO: u32 = 10;
    /// The sockets of every app, as JSON text after the reply, from the
    /// cursor `b` (0: the first; `app id << 32 | slot`): at most
    /// a page of them, and the cursor of the next page (`null`: none).
    pub const SOCKETS: u32 = 11;
    /// Hand socket `slot` (generation `b`) over: the requesting
    /// process is about to pass its descriptor `a` to another process over
    /// a Unix socket (`SCM_RIGHTS`). The service takes the connection out
    /// of the application — the slot fails with `ECONNABORTED` — and keeps
    /// it, with the bytes the program had not read and those the window
    /// had no room for, until a process that holds the same file claims
    /// it (`CLAIM`) or [`PASS_TIMEOUT_S`](super::PASS_TIMEOUT_S) passes
    /// (then it is reset). The file is named by its inode, which the
    /// service reads from `/proc/<pid>/fd/<a>` of the process that sent
    /// the request (the kernel vouches for the pid). `b` bit 32: the
    /// descriptor's O_NONBLOCK, bit 33: bound to any address, both given
    /// back with the claim. A listener, or a socket merely bound, is not
    /// taken out at once: it moves at the claim, a listener with its
    /// accept queue; a UDP socket too, with its unread datagrams, into
    /// its port's group. `EOPNOTSUPP`: a UDP socket not bound; `ENOTCONN`: neither
    /// bound, listening nor connected; `EAGAIN`: too many passes wait (per
    /// user, or bytes in all).
    pub const PASS: u32 = 12;
    /// Claim the connection passed with the file the requesting process
    /// holds as descriptor `a` (received over a Unix socket). Reply: `slot`
    /// and `b` = generation of the socket's new slot in the requester's
    /// application, `c` bit 0: it listens, bit 1: O_NONBLOCK, bit 2: its
    /// sender had it bound to any address; `ENOENT`: nothing was passed
    /// with that file (or the listener went, or the port is another's).
    pub const CLAIM: u32 = 13;
    /// The message that was to carry socket `slot` (generation `b`),
    /// passed just before, did not go: take the newest such pass back (a
    /// connection returns to its slot as it was). `ENOENT`: none.
    pub const CANCEL: u32 = 14;
    /// The application's regions and doorbell again, for a program that
    /// this process `exec`ed with Ixora sockets open (its mappings went
    /// with the old image; its control connection, rows and sockets did
    /// not). Asked on the control connection the old image left open for
    /// it; the reply is `ATTACH`'s (`a` = app id, `b` = slots, `c` = ring
    /// bytes; descriptors: down memfd, up memfd, doorbell). The old
    /// image's waiters are given back first: its threads are gone.
    pub const REMAP: u32 = 15;
    /// The state of socket `slot`'s TCP connection, for `TCP_INFO`:
    /// replied in the reply's fields ([`TcpInfo::to_reply`](super::TcpInfo::to_reply));
    /// `ENOTCONN`: the socket has no connection.
    pub const INFO: u32 = 16;
    /// A reply.
    pub const REPLY: u32 = 100;
}

/// How long a passed connection ([`op::PASS`]) waits to be claimed
/// before the service resets it, in seconds.
pub const PASS_TIMEOUT_S: u64 = 60;

/// What an [`op::INFO`] reply says of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfo {
    /// The connection's state, as Linux numbers it (`TCP_ESTABLISHED` 1
    /// ... `TCP_CLOSING` 11).
    pub state: u8,
    /// Smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// Round-trip time variation, µs.
    pub rttvar_us: u32,
    /// Retransmission timeout, ms.
    pub rto_ms: u32,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes (`u32::MAX`: none yet).
    pub ssthresh: u32,
    /// Send MSS, bytes.
    pub mss: u16,
    /// Segments retransmitted over the connection's life.
    pub retrans: u32,
    /// SACK in use.
    pub sack: bool,
    /// Timestamps in use.
    pub timestamps: bool,
    /// Window-scale shifts, ours to the peer and the peer's to us, if
    /// negotiated (each below 16).
    pub wscale: Option<(u8, u8)>,
}

impl TcpInfo {
    /// The reply that carries it: `a` = retransmissions | MSS << 32 |
    /// flags << 48 (bit 48 SACK, 49 timestamps, 50 window scaling; the
    /// shifts in bits 52–55 and 56–59: `a` stays positive), `b` = RTT |
    /// RTT variation << 32, `c` = congestion window | threshold << 32,
    /// `slot` = RTO (below 2²⁴ ms) | state << 24.
    pub fn to_reply(&self) -> Msg {
        let (ws, snd, rcv) = self.wscale.map_or((0, 0, 0), |(s, r)| (1, s & 15, r & 15));
        let a = u64::from(self.retrans)
            | u64::from(self.mss) << 32
            | u64::from(self.sack) << 48
            | u64::from(self.timestamps) << 49
            | ws << 50
            | u64::from(snd) << 52
            | u64::from(rcv) << 56;
        Msg {
            op: op::REPLY,
            slot: self.rto_ms.min(0xff_ffff) | u32::from(self.state) << 24,
            a: a as i64,
            b: u64::from(self.rtt_us) | u64::from(self.rttvar_us) << 32,
            c: u64::from(self.cwnd) | u64::from(self.ssthresh) << 32,
        }
    }

    /// What [`TcpInfo::to_reply`] packed.
    pub fn from_reply(m: &Msg) -> TcpInfo {
        let a = m.a as u64;
        TcpInfo {
            rtt_us: m.b as u32,
            rttvar_us: (m.b >> 32) as u32,
            rto_ms: m.slot & 0xff_ffff,
            state: (m.slot >> 24) as u8,
            cwnd: m.c as u32,
            ssthresh: (m.c >> 32) as u32,
            mss: (a >> 32) as u16,
            retrans: a as u32,
            sack: a >> 48 & 1 != 0,
            timestamps: a >> 49 & 1 != 0,
            wscale: (a >> 50 & 1 != 0).then_some(((a >> 52 & 15) as u8, (a >> 56 & 15) as u8)),
        }
    }
}

/// One control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Msg {
    /// [`op`].
    pub op: u32,
    /// Socket slot (or waiter index).
    pub slot: u32,
    /// Argument or result.
    pub a: i64,
    /// Argument or result.
    pub b: u64,
    /// Argument or result.
    pub c: u64,
}

impl Msg {
    /// Encoded length.
    pub const LEN: usize = 40;

    /// A request.
    pub fn new(op: u32, slot: u32, a: i64, b: u64) -> Msg {
        Msg {
            op,
            slot,
            a,
            b,
            c: 0,
        }
    }

    /// A reply with result `a`.
    pub fn reply(a: i64) -> Msg {
        Msg {
            op: op::REPLY,
            a,
            ..Msg::default()
        }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.op.to_le_bytes());
        b[8..12].copy_from_slice(&self.slot.to_le_bytes());
        b[16..24].copy_from_slice(&self.a.to_le_bytes());
        b[24..32].copy_from_slice(&self.b.to_le_bytes());
        b[32..40].copy_from_slice(&self.c.to_le_bytes());
        b
    }

    /// Decode the first [`Msg::LEN`] bytes of `b`; `None` if short or the
    /// magic is wrong.
    pub fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() < Self::LEN || b[0..4] != MAGIC.to_le_bytes() {
            return None;
        }
        let u32at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Msg {
            op: u32at(4),
            slot: u32at(8),
            a: u64at(16) as i64,
            b: u64at(24),
            c: u64at(32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let m = Msg {
            op: op::CONNECT,
            slot: 9,
            a: -104,
            b: 1 << 40,
            c: 3,
        };
        assert_eq!(Msg::decode(&m.encode()), Some(m));
        assert_eq!(Msg::decode(&m.encode()[..39]), None);
        let mut bad = m.encode();
        bad[0] = b'X';
        assert_eq!(Msg::decode(&bad), None);
    }

    #[test]
    fn tcp_info_reads_back_from_its_reply() {
        let i = TcpInfo {
            state: 8,
            rtt_us: 123_456,
            rttvar_us: 7_890,
            rto_ms: 204,
            cwnd: 14_480,
            ssthresh: u32::MAX,
            mss: 1448,
            retrans: 3,
            sack: true,
            timestamps: true,
            wscale: Some((7, 9)),
        };
        let m = i.to_reply();
        assert!(m.a >= 0, "a reply's a is its result: success");
        assert_eq!(TcpInfo::from_reply(&Msg::decode(&m.encode()).unwrap()), i);
        let none = TcpInfo {
            wscale: None,
            sack: false,
            ..i
        };
        assert_eq!(TcpInfo::from_reply(&none.to_reply()), none);
    }
}
