//! TCP (RFC 9293) — read RFC 9293, RFC 1122 §4.2, RFC 7323, RFC 5961,
//! RFC 6298, RFC 5681, RFC 6582, RFC 6675, RFC 2018 and RFC 9438 first.
//!
//! The connection state machine lives in [`tcb`]; this module holds the
//! types the application sees. The [`Stack`](crate::Stack) owns connections
//! and drives them: it demultiplexes segments, runs timers and collects
//! output.

pub mod buffers;
pub mod cc;
pub mod rack;
pub mod rtt;
pub mod syncookie;
pub(crate) mod tcb;

/// Connection states, named as in RFC 9293 §3.3.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection.
    Closed,
    /// Waiting for a connection request (listeners only).
    Listen,
    /// SYN sent, waiting for a matching SYN.
    SynSent,
    /// SYN received and SYN sent, waiting for the ACK of our SYN.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// We closed; waiting for the ACK of our FIN or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer closed; waiting for our application to close.
    CloseWait,
    /// Both closed at once; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both closed; waiting 2·MSL so late segments die out.
    TimeWait,
}

impl State {
    /// RFC 9293 "synchronized" states (after the handshake).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// Upper-case RFC name.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }
}

impl core::fmt::Display for State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a connection ended abnormally (the `dead` event of IX). An orderly
/// close raises no `dead`: the application sees the peer's FIN as
/// `PeerClosed` and its own data acknowledged as `Sent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadReason {
    /// The peer reset the connection.
    Reset,
    /// The peer refused the connection (RST or ICMP unreachable in SYN-SENT).
    Refused,
    /// Retransmissions, SYN retries or keepalive probes ran out.
    TimedOut,
    /// The peer or its network is unreachable (ICMP).
    Unreachable,
    /// The stack aborted it (data arrived after close, listener closed).
    Aborted,
}

impl DeadReason {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            DeadReason::Reset => "reset",
            DeadReason::Refused => "refused",
            DeadReason::TimedOut => "timed_out",
            DeadReason::Unreachable => "unreachable",
            DeadReason::Aborted => "aborted",
        }
    }
}

/// A connection, as the application names it. Handles belong to one
/// stack instance (one core); a stale handle is rejected, never confused
/// with a newer connection in the same slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnHandle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl ConnHandle {
    /// Slot index (dense; useful as an application-side array index).
    pub fn index(self) -> u32 {
        self.idx
    }

    /// The handle as one number (never 0), for foreign-language APIs.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.gen) << 32) | u64::from(self.idx)
    }

    /// A handle from [`to_bits`](Self::to_bits). Any number is accepted;
    /// a stack rejects one that does not name a live connection.
    pub fn from_bits(bits: u64) -> ConnHandle {
        ConnHandle {
            idx: bits as u32,
            gen: (bits >> 32) as u32,
        }
    }
}

/// A snapshot of one connection (like Linux `TCP_INFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpInfo {
    /// State.
    pub state: State,
    /// Congestion window in bytes.
    pub cwnd: u32,
    /// Slow-start threshold in bytes (`u32::MAX` until the first loss).
    pub ssthresh: u32,
    /// Smoothed RTT.
    pub srtt: crate::time::Duration,
    /// RTT variation.
    pub rttvar: crate::time::Duration,
    /// Current retransmission timeout.
    pub rto: crate::time::Duration,
    /// Send MSS.
    pub mss: u16,
    /// Peer's receive window in bytes.
    pub snd_wnd: u32,
    /// Our advertised receive window in bytes.
    pub rcv_wnd: u32,
    /// Bytes sent and not acknowledged.
    pub unacked: u32,
    /// Bytes accepted from the application and not yet sent.
    pub unsent: u32,
    /// In-order bytes waiting for `recv_done`.
    pub readable: u32,
    /// Segments retransmitted over the connection's life.
    pub retransmits: u32,
    /// Segments in flight (sent, not acknowledged; Linux's `packets_out`).
    pub unacked_segs: u32,
    /// MSS before options: what the path carries (`advmss`; + 40 is the
    /// path MTU).
    pub mss_base: u16,
    /// The largest payload the peer sent in one segment (at least 536),
    /// as Linux's `rcv_mss`.
    pub rcv_mss: u16,
    /// What the receive auto-tuning last measured the application read in
    /// a round trip, and so grew the buffer for (Linux's
    /// `rcvq_space.space`, `tcpi_rcv_space`): until a round trip read
    /// more, ten segments of our MSS, at most the buffer. It never falls.
    pub rcv_space: u32,
    /// Segments received (every one, pure ACKs included) and sent.
    pub segs_in: u32,
    /// Segments sent, retransmissions and pure ACKs included.
    pub segs_out: u32,
    /// Sequence space the peer acknowledged (SYN and FIN count one each,
    /// as Linux's `bytes_acked`). This and the other byte counts wrap
    /// after 1 TiB; `bytes_retrans` stops at 4 GiB.
    pub bytes_acked: u64,
    /// Sequence space received in order (the FIN counts one), as
    /// Linux's `bytes_received`.
    pub bytes_received: u64,
    /// Payload bytes sent, retransmissions included (RFC 4898
    /// `HCDataOctetsOut`).
    pub bytes_sent: u64,
    /// Payload bytes retransmitted.
    pub bytes_retrans: u64,
    /// Options negotiated: SACK, timestamps, window scaling (send, recv).
    pub sack: bool,
    /// Timestamps in use.
    pub timestamps: bool,
    /// Window scale shifts (ours to them, theirs to us), if negotiated.
    pub wscale: Option<(u8, u8)>,
    /// Congestion controller name.
    pub cc: &'static str,
}
