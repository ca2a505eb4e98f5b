//! Control messages between an application and the service, over a Unix
//! `SOCK_SEQPACKET` socket (one message per packet; descriptors ride with
//! the message they belong to).
//!
//! Every request and reply is a [`Msg`] of [`Msg::LEN`] bytes; a reply
//! carries the result in `a` (`>= 0` success, `< 0` a negated errno). The
//! `STATS` and `SOCKETS` replies are followed by text in the same packet;
//! so are an `INFO` reply's [`TcpInfo`] bytes.

/// Magic at the start of every message.
pub const MAGIC: u32 = u32::from_le_bytes(*b"IXCT");

/// Operations.
pub mod op {
    /// Attach a new application (`a` = pid). Reply: `a` = app id, `b` =
    /// slots, `c` = ring bytes; descriptors: down memfd, up memfd, the
    /// service's doorbell, and the wait end of waiter 0, made for the
    /// attaching process (row 0 of the holders table), which the service
    /// marks its own in the up header (as [`WAITER`] after the app took
    /// the index): its first sleep needs no `WAITER` round trip.
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
    /// the bytes of [`TcpInfo::encode`](super::TcpInfo::encode) follow the reply;
    /// `ENOTCONN`: the socket has no connection.
    pub const INFO: u32 = 16;
    /// A new control connection, made by the service (a socket pair) and
    /// passed back with the reply, for a process of this connection's
    /// application that the control socket's file no longer admits: one
    /// that attached as root and then changed its user, opening the
    /// connection for a child it is about to fork ([`JOIN`] on it still
    /// needs the application's key). Only on a connection that attached
    /// or joined (`EPERM` otherwise); the new connection's records carry
    /// this one's peer (its pid and user).
    pub const SPLIT: u32 = 17;
    /// A reply.
    pub const REPLY: u32 = 100;
}

/// How long a passed connection ([`op::PASS`]) waits to be claimed
/// before the service resets it, in seconds.
pub const PASS_TIMEOUT_S: u64 = 60;

/// What an [`op::INFO`] reply says of a connection: the bytes of
/// [`TcpInfo::encode`] follow the reply in its packet.
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
    /// Send MSS: payload bytes per segment, bytes.
    pub mss: u16,
    /// MSS before options (the path MTU less 40), bytes.
    pub mss_base: u16,
    /// The largest payload the peer sent in one segment (at least 536).
    pub rcv_mss: u16,
    /// Segments retransmitted over the connection's life.
    pub retrans: u32,
    /// SACK in use.
    pub sack: bool,
    /// Timestamps in use.
    pub timestamps: bool,
    /// Window-scale shifts, ours to the peer and the peer's to us, if
    /// negotiated (each below 16).
    pub wscale: Option<(u8, u8)>,
    /// The peer's receive window, bytes.
    pub snd_wnd: u32,
    /// The window we advertise, bytes.
    pub rcv_wnd: u32,
    /// Segments in flight.
    pub unacked_segs: u32,
    /// Bytes written and not sent yet: those the stack holds and those
    /// still in the socket's transmit ring (Linux's `tcpi_notsent_bytes`,
    /// `SIOCOUTQNSD`).
    pub notsent: u32,
    /// Segments received and sent (pure ACKs and retransmissions
    /// included).
    pub segs_in: u32,
    /// See `segs_in`.
    pub segs_out: u32,
    /// Sequence space acknowledged by the peer (SYN and FIN included).
    pub bytes_acked: u64,
    /// Sequence space received in order (the FIN included).
    pub bytes_received: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Payload bytes retransmitted.
    pub bytes_retrans: u64,
    /// The receive auto-tuning's measure of a round trip's reading, bytes
    /// (Linux's `tcpi_rcv_space`).
    pub rcv_space: u32,
    /// Sequence space sent and not acknowledged, bytes (the FIN counts
    /// one); with `notsent`, Linux's `SIOCOUTQ`.
    pub unacked: u32,
}

impl TcpInfo {
    /// Bytes of [`TcpInfo::encode`].
    pub const LEN: usize = 4 + 12 * 4 + 4 * 2 + 4 * 8 + 4 + 4;

    /// Little-endian, fixed layout: state, option flags (bit 0 SACK, 1
    /// timestamps, 2 window scaling), the two shifts; the `u32` figures;
    /// the MSSes; the `u64` byte counts; `rcv_space`; `unacked`.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let (ws, snd, rcv) = self.wscale.map_or((0, 0, 0), |(s, r)| (4, s & 15, r & 15));
        b[0] = self.state;
        b[1] = u8::from(self.sack) | u8::from(self.timestamps) << 1 | ws;
        b[2] = snd;
        b[3] = rcv;
        let words = [
            self.rtt_us,
            self.rttvar_us,
            self.rto_ms,
            self.cwnd,
            self.ssthresh,
            self.retrans,
            self.snd_wnd,
            self.rcv_wnd,
            self.unacked_segs,
            self.notsent,
            self.segs_in,
            self.segs_out,
        ];
        let mut at = 4;
        for w in words {
            b[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        }
        for h in [self.mss, self.mss_base, self.rcv_mss, 0] {
            b[at..at + 2].copy_from_slice(&h.to_le_bytes());
            at += 2;
        }
        for q in [
            self.bytes_acked,
            self.bytes_received,
            self.bytes_sent,
            self.bytes_retrans,
        ] {
            b[at..at + 8].copy_from_slice(&q.to_le_bytes());
            at += 8;
        }
        b[at..at + 4].copy_from_slice(&self.rcv_space.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&self.unacked.to_le_bytes());
        b
    }

    /// What [`TcpInfo::encode`] wrote; `None` if `b` is too short.
    pub fn decode(b: &[u8]) -> Option<TcpInfo> {
        let b = b.get(..Self::LEN)?;
        let w = |i: usize| u32::from_le_bytes(b[4 + 4 * i..8 + 4 * i].try_into().unwrap());
        let h = |i: usize| u16::from_le_bytes(b[52 + 2 * i..54 + 2 * i].try_into().unwrap());
        let q = |i: usize| u64::from_le_bytes(b[60 + 8 * i..68 + 8 * i].try_into().unwrap());
        Some(TcpInfo {
            state: b[0],
            sack: b[1] & 1 != 0,
            timestamps: b[1] & 2 != 0,
            wscale: (b[1] & 4 != 0).then_some((b[2] & 15, b[3] & 15)),
            rtt_us: w(0),
            rttvar_us: w(1),
            rto_ms: w(2),
            cwnd: w(3),
            ssthresh: w(4),
            retrans: w(5),
            snd_wnd: w(6),
            rcv_wnd: w(7),
            unacked_segs: w(8),
            notsent: w(9),
            segs_in: w(10),
            segs_out: w(11),
            mss: h(0),
            mss_base: h(1),
            rcv_mss: h(2),
            bytes_acked: q(0),
            bytes_received: q(1),
            bytes_sent: q(2),
            bytes_retrans: q(3),
            rcv_space: u32::from_le_bytes(b[92..96].try_into().unwrap()),
            unacked: u32::from_le_bytes(b[96..100].try_into().unwrap()),
        })
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
    fn tcp_info_reads_back_from_its_bytes() {
        let i = TcpInfo {
            state: 8,
            rtt_us: 123_456,
            rttvar_us: 7_890,
            rto_ms: 204,
            cwnd: 14_480,
            ssthresh: u32::MAX,
            mss: 1448,
            mss_base: 1460,
            rcv_mss: 536,
            retrans: 3,
            sack: true,
            timestamps: true,
            wscale: Some((7, 9)),
            snd_wnd: 64_000,
            rcv_wnd: 65_535,
            unacked_segs: 10,
            notsent: 4096,
            segs_in: 77,
            segs_out: 99,
            bytes_acked: 5 << 32,
            bytes_received: 1 << 40,
            bytes_sent: (5 << 32) + 7,
            bytes_retrans: 7,
            rcv_space: 14_480,
            unacked: 2 << 20,
        };
        assert_eq!(TcpInfo::decode(&i.encode()), Some(i));
        let none = TcpInfo {
            wscale: None,
            sack: false,
            ..i
        };
        assert_eq!(TcpInfo::decode(&none.encode()), Some(none));
        assert_eq!(TcpInfo::decode(&i.encode()[..TcpInfo::LEN - 1]), None);
    }
}
