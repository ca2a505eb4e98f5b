//! The transmission control block: one connection's state machine
//! (RFC 9293 §3.10), loss recovery (RFC 6675, RFC 6582), timers (RFC 6298,
//! RFC 1122) and the zero-copy data queues.
//!
//! The TCB never touches the world. It reads a parsed [`Segment`], the time
//! and the configuration from a [`Ctx`], and records what must happen as
//! flags: events for the application (`ev`), output wanted (`wants_tx`),
//! deadlines (`next_deadline`). The [`Stack`](crate::Stack) turns those into
//! event-queue entries, transmit-queue entries and timing-wheel slots.

use super::buffers::{OooInsert, RecvQueue, SendQueue};
use super::cc::{CongestionControl, Controller, Window};
use super::rack::{AckOutcome, RtxRecords};
use super::rtt::RttEstimator;
use super::syncookie::Tuple;
use super::{DeadReason, State, TcpInfo};
use crate::config::{IpOpts, TcpConfig};
use crate::counters::{Counters, DropReason};
use crate::time::{Duration, Instant};
use crate::wire::tcp::{Flags, SackBlock, SeqNum, TcpOptions, TcpRepr, MAX_SACK_BLOCKS};
use crate::wire::Checksum;

/// Connection flags.
pub(crate) mod flag {
    pub const SACK_OK: u32 = 1 << 0;
    pub const TS_OK: u32 = 1 << 1;
    pub const WS_OK: u32 = 1 << 2;
    pub const NODELAY: u32 = 1 << 3;
    pub const KEEPALIVE: u32 = 1 << 4;
    /// Created from a listener.
    pub const PASSIVE: u32 = 1 << 5;
    /// The application holds a handle (active open, or knocked).
    pub const OWNED: u32 = 1 << 6;
    /// The application called close or abort: no more events.
    pub const APP_CLOSED: u32 = 1 << 7;
    /// Our FIN is queued after the data (shutdown or close).
    pub const SHUT_WR: u32 = 1 << 8;
    /// The peer's FIN has been received in order.
    pub const FIN_RCVD: u32 = 1 << 9;
    /// An ACK must go out at the next transmit opportunity.
    pub const ACK_NOW: u32 = 1 << 10;
    /// `send` accepted less than offered; report when the window opens.
    pub const SEND_BLOCKED: u32 = 1 << 11;
    pub const IN_RECOVERY: u32 = 1 << 12;
    /// Retransmit the segment at SND.UNA now (fast retransmit, partial ACK).
    pub const RETX_FIRST: u32 = 1 << 13;
    /// Parked on ARP resolution (stack bookkeeping).
    pub const ARP_WAIT: u32 = 1 << 14;
    /// Send a window or keepalive probe.
    pub const PROBE_PENDING: u32 = 1 << 15;
    /// Send (or resend) our SYN / SYN-ACK.
    pub const SYN_PENDING: u32 = 1 << 16;
    /// The peer's FIN arrived out of order at `fin_in`.
    pub const OOO_FIN: u32 = 1 << 17;
    pub const IN_TXQ: u32 = 1 << 18;
    pub const IN_EVQ: u32 = 1 << 19;
    /// A passive connection completed its handshake and was announced.
    pub const KNOCKED: u32 = 1 << 20;
    pub const SYN_RETRANSMITTED: u32 = 1 << 21;
    /// The handshake RTT is being measured (`mark_us`); data segments are
    /// timed by their transmission records.
    pub const TIMING: u32 = 1 << 22;
    /// `t_rtx` is the persist timer, not the retransmission timer.
    pub const PERSIST: u32 = 1 << 23;
    /// Our FIN has been acknowledged.
    pub const FIN_ACKED: u32 = 1 << 24;
    /// The application accepted a knocked connection.
    pub const ACCEPTED: u32 = 1 << 25;
    /// Counted in its listener's SYN queue (stack bookkeeping).
    pub const SYNQ: u32 = 1 << 26;
    /// Counted in its listener's accept queue (stack bookkeeping).
    pub const ACCEPTQ: u32 = 1 << 27;
    /// `t_rtx` is the tail-loss-probe timer (RFC 8985 §7).
    pub const TLP_TIMER: u32 = 1 << 28;
    /// Send a tail loss probe now.
    pub const TLP_PROBE: u32 = 1 << 29;
    /// A probe is out and not yet acknowledged (`tlp_end`).
    pub const TLP_OUT: u32 = 1 << 30;
    /// The application fixed the receive buffer (`SO_RCVBUF`): it does
    /// not auto-tune ([`Tcb::lock_buffers`]).
    pub const RCVBUF_LOCK: u32 = 1 << 31;
}

/// A passive connection not yet asked about its listener's
/// `TCP_DEFER_ACCEPT` ([`Tcb::defers_knock`]).
const DEFER_NOT: Instant = Instant::NEVER;
/// A passive connection announced, or to be, whatever its listener's
/// `TCP_DEFER_ACCEPT` (no deadline is the epoch: the wait starts at the
/// handshake, and `defers_knock` sets none for no wait).
const DEFER_OVER: Instant = Instant::ZERO;

/// `TCP_CORK` state ([`Tcb::set_cork`]).
mod cork {
    /// The application corked the connection: partial segments wait.
    pub const ON: u8 = 1 << 0;
    /// The cork's ceiling passed: the partial segment waiting may go.
    pub const PUSH: u8 = 1 << 1;
}

/// Pending application events.
pub(crate) mod ev {
    pub const KNOCK: u8 = 1 << 0;
    pub const CONNECTED: u8 = 1 << 1;
    pub const RECV: u8 = 1 << 2;
    pub const SENT: u8 = 1 << 3;
    pub const PEER_CLOSED: u8 = 1 << 4;
    pub const DEAD: u8 = 1 << 5;
    pub const URGENT: u8 = 1 << 6;
}

use flag::*;

/// A parsed TCP segment, without borrowing the frame it came in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNum,
    pub ack: Option<SeqNum>,
    pub flags: Flags,
    pub wnd: u16,
    pub opts: TcpOptions,
    /// The urgent pointer (significant with URG).
    pub urgent: u16,
    /// Offset of the payload within the frame.
    pub payload_off: usize,
    pub payload_len: usize,
}

impl Segment {
    /// Sequence space used (RFC 9293 §3.4 SEG.LEN).
    pub fn len(&self) -> usize {
        self.payload_len + usize::from(self.flags.syn()) + usize::from(self.flags.fin())
    }
}

/// What few connections need, kept out of line (the state stays within
/// IX's 512 bytes): urgent data (RFC 9293 §3.8.5), duplicates to
/// report (RFC 2883, up to four), and RACK's reordering state once the path has shown
/// reordering or the peer a D-SACK (RFC 8985 §6.2 steps 3 and 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rare {
    /// Urgent mode: the sequence number after the urgent data the
    /// application marked, which each segment before it points to (URG)
    /// until it is acknowledged.
    pub snd_up: Option<SeqNum>,
    /// The peer's latest urgent data.
    pub rcv: Option<RcvUrgent>,
    /// Data that came again (RFC 2883 D-SACK), not yet reported: each is
    /// the first SACK block of a segment of its own, once.
    pub dsack: DsackQueue,
    /// RACK.reordering_seen: a segment sent once was delivered below one
    /// sent after it. From then on the reordering window is kept in
    /// recovery too, and RFC 6675's DupThresh no longer marks losses.
    pub reordering_seen: bool,
    /// RACK.reo_wnd_mult less one: grown by one per round trip in which
    /// the peer reported a D-SACK (our retransmission was needless).
    pub reo_steps: u8,
    /// RACK.reo_wnd_persist: recoveries without a D-SACK left before
    /// `reo_steps` falls back to 0.
    pub reo_persist: u8,
    /// RACK.dsack_round: SND.NXT when `reo_steps` last grew; one growth per
    /// round trip.
    pub dsack_round: Option<SeqNum>,
    /// What the last window reduction took, until its retransmissions
    /// are all reported needless ([`Tcb::try_undo`]).
    pub undo: Option<Undo>,
    /// SND.MAX when everything was last resent ([`Tcb::go_back`]: a
    /// timeout, a smaller path MTU), until SND.UNA is two windows past it
    /// ([`Tcb::expire_rare`]): the SACKs were forgotten (RFC 2018 §8), so
    /// D-SACKs of that data show what the receiver held, not reordering.
    pub rto_high: Option<SeqNum>,
    /// Segments reported twice by D-SACKs so far: more than were ever
    /// sent twice and the rest are the network's duplicates, or lies
    /// (Linux's `dsack_dups`; not kept when the rest goes).
    pub dsack_dups: u32,
}

/// Most duplicates waiting for a D-SACK of their own ([`DsackQueue`]).
pub(crate) const DSACK_QUEUE: usize = 4;

/// Duplicates to report, oldest first. Linux acknowledges each duplicate
/// at once with its own D-SACK; a receive batch may bring several before
/// the next ACK leaves, so they wait here and each goes out first in an
/// ACK of its own (the same cumulative ACK, repeated, is harmless to a
/// SACK sender): a sender that hears of every needless retransmission of
/// a recovery gives back the window it cut (Linux's `undo_retrans`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DsackQueue {
    blocks: [SackBlock; DSACK_QUEUE],
    len: u8,
}

impl DsackQueue {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next to report.
    pub fn first(&self) -> Option<SackBlock> {
        (self.len > 0).then(|| self.blocks[0])
    }

    /// Data `[left, right)` came again. One it overlaps or continues
    /// grows to cover it (the segments of a go-back-N retransmission, as
    /// Linux's `tcp_dsack_extend`); otherwise it is queued. False when
    /// the queue is full: not reported.
    pub fn note(&mut self, left: SeqNum, right: SeqNum) -> bool {
        // One pass: every queued block the new one touches is taken into
        // it, and the merged block keeps the oldest one's place. (Queued
        // blocks never touch each other, so a block the grown one touches
        // touched the new one already: no byte is reported twice, which
        // matters as a sender counts what is D-SACKed and may undo a cut
        // on it.)
        let mut new = SackBlock { left, right };
        let (mut kept, mut at) = (0, None);
        for i in 0..usize::from(self.len) {
            let d = self.blocks[i];
            if left.diff(d.right) <= 0 && right.diff(d.left) >= 0 {
                if d.left.diff(new.left) < 0 {
                    new.left = d.left;
                }
                if d.right.diff(new.right) > 0 {
                    new.right = d.right;
                }
                if at.is_some() {
                    continue;
                }
                at = Some(kept);
            }
            self.blocks[kept] = d;
            kept += 1;
        }
        let at = match at {
            Some(at) => at,
            None if kept == DSACK_QUEUE => return false,
            None => {
                kept += 1;
                kept - 1
            }
        };
        self.blocks[at] = new;
        self.len = kept as u8;
        true
    }

    /// Every block is non-empty and no two touch (`note` merges them),
    /// so no byte is reported twice.
    pub fn check(&self) -> Result<(), &'static str> {
        let q = &self.blocks[..usize::from(self.len)];
        for (i, a) in q.iter().enumerate() {
            if a.right.diff(a.left) <= 0 {
                return Err("an empty D-SACK block queued");
            }
            if q[i + 1..]
                .iter()
                .any(|b| a.left.diff(b.right) <= 0 && a.right.diff(b.left) >= 0)
            {
                return Err("queued D-SACK blocks touch");
            }
        }
        Ok(())
    }

    /// The first was reported.
    pub fn pop(&mut self) {
        if self.len > 0 {
            self.blocks.copy_within(1..usize::from(self.len), 0);
            self.len -= 1;
        }
    }
}

/// A window reduction that may prove needless: every segment its episode
/// sent again came back in a D-SACK (RFC 3708: the original arrived,
/// only late), so nothing was lost and the window is given back; or, for
/// a timeout's, an ACK echoes a timestamp older than the first resend
/// (RFC 3522, Eifel: the original was acknowledged). Kept until then, or
/// until the next reduction (as Linux's `undo_marker`, `undo_retrans`,
/// `prior_cwnd`, `prior_ssthresh` and `retrans_stamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Undo {
    /// SND.UNA when the episode began: a D-SACK below it is older.
    marker: SeqNum,
    /// Segments the episode sent again, and of those not yet D-SACKed.
    sent: u32,
    left: u32,
    /// The window and threshold before the reduction.
    cwnd: u32,
    ssthresh: u32,
    /// A timeout's reduction: what else its undo needs.
    rto: Option<RtoCut>,
}

/// What a timeout's [`Undo`] keeps beside a recovery's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RtoCut {
    /// RFC 4015's `pipe_prev`: max(FlightSize, ssthresh) before the cut.
    pipe: u32,
    /// With timestamps, the TSval the timeout's first resend carries (or
    /// a later one), until the first ACK that moves SND.UNA decides.
    ts: Option<u32>,
    /// Without them, where F-RTO stands ([`Frto`]).
    frto: Option<Frto>,
}

/// F-RTO (RFC 5682 §2): a timeout found needless without timestamps. The
/// timeout resends only the first segment; the ACK of it sends new data
/// instead of resending more; the ACK after that decides — if it moves
/// SND.UNA, it acknowledges an original never sent again, so the
/// timeout was needless; if it is a duplicate, the loss was real and
/// the resend goes on. Linux does the same (`tcp_process_loss`, its
/// `tp->frto`), also with timestamps, where Ixora leaves the decision to
/// the Eifel test ([`Tcb::undo_spurious_rto`]), which needs one ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frto {
    /// Step 1 done (the go-back resend began); waiting for the first ACK
    /// that moves SND.UNA.
    Resent,
    /// Step 2 b: new data from `from` on (up to two segments) instead of
    /// resends; waiting for the next ACK (step 3). `resent`: the
    /// episode's resends then ([`Undo`]'s `sent`): one more since (a tail
    /// loss probe, the go-back resend when no new data could go) and an
    /// ACK moving SND.UNA no longer shows an original arrived.
    NewSent { from: SeqNum, resent: u32 },
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.snd_up.is_none()
            && self.rcv.is_none()
            && self.dsack.is_empty()
            && !self.reordering_seen
            && self.reo_steps == 0
            && self.dsack_round.is_none()
            && self.undo.is_none()
            && self.rto_high.is_none()
    }
}

/// The peer's urgent data (RFC 9293 §3.8.5): the octet before its urgent
/// pointer, which BSD and Linux take as *the* urgent byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RcvUrgent {
    /// Its sequence number.
    pub seq: SeqNum,
    /// Its offset in the byte stream (data bytes before it).
    pub mark: u64,
    /// The byte, once it has arrived.
    pub byte: Option<u8>,
}

/// How an ICMP destination-unreachable bears on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// Protocol or port unreachable.
    Hard,
    /// Fragmentation needed, with the next-hop MTU.
    FragNeeded(u16),
    /// Anything else.
    Soft,
}

/// A RST the stack must send on the TCB's behalf (the TCB may be gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RstReply {
    pub seq: SeqNum,
    pub ack: Option<SeqNum>,
}

/// A per-second budget (RFC 5961 §7 challenge ACKs, ICMP errors), shared
/// by a stack.
///
/// With a key, each one-second window's budget is drawn from
/// [limit/2, 3·limit/2] and the windows' phase is shifted, both by a keyed
/// hash: an off-path attacker can no longer count the shared budget down to
/// learn whether a spoofed segment hit another connection's window (the
/// CVE-2016-5696 side channel). Deterministic for a given secret.
#[derive(Debug, Clone)]
pub(crate) struct RateLimiter {
    per_sec: u32,
    key: Option<[u8; 16]>,
    phase_us: u64,
    window: u64,
    budget: u32,
    used: u32,
}

impl RateLimiter {
    pub fn new(per_sec: u32) -> RateLimiter {
        RateLimiter {
            per_sec,
            key: None,
            phase_us: 0,
            window: u64::MAX,
            budget: per_sec,
            used: 0,
        }
    }

    pub fn randomized(per_sec: u32, key: [u8; 16]) -> RateLimiter {
        let phase_us = keyed(&key, u64::MAX) % 1_000_000;
        RateLimiter {
            key: Some(key),
            phase_us,
            ..RateLimiter::new(per_sec)
        }
    }

    pub fn allow(&mut self, now: Instant) -> bool {
        let w = (now.as_micros() + self.phase_us) / 1_000_000;
        if w != self.window {
            self.window = w;
            self.used = 0;
            self.budget = match self.key {
                Some(k) => {
                    let spread = u64::from(self.per_sec) + 1;
                    self.per_sec / 2 + (keyed(&k, w) % spread) as u32
                }
                None => self.per_sec,
            };
        }
        if self.used < self.budget {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

fn keyed(key: &[u8; 16], x: u64) -> u64 {
    use std::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_key(key);
    h.write_u64(x);
    h.finish()
}

/// Least probe timeout of the tail loss probe (RFC 8985 §7.2).
/// The microsecond clock of the transmission records (wrapping).
#[inline]
fn us_clock(now: Instant) -> u32 {
    now.as_micros() as u32
}

const TLP_MIN_PTO: Duration = Duration::from_millis(10);

/// RFC 8985 §6.2 step 4: recoveries without a D-SACK before a grown
/// reordering window falls back to min_RTT/4 (`RACK.reo_wnd_persist`).
const REO_WND_PERSIST: u8 = 16;

/// The least buffer [`Tcb::lock_buffers`] sets: half Linux's least
/// `SO_RCVBUF` (2,304 bytes of memory, about half of it payload).
pub const MIN_LOCKED_BUFFER: u32 = 1152;

/// HyStart: ACKs at most this far apart (µs) are one train (Linux
/// `hystart_ack_delta_us`).
const HYSTART_ACK_DELTA_US: u32 = 2000;

/// At most one challenge ACK, or ACK in reply to an unacceptable segment
/// that carries nothing, per connection in this many milliseconds (Linux
/// `tcp_invalid_ratelimit`), besides the challenge ACKs' stack-wide
/// budget.
const CHALLENGE_INTERVAL_MS: u32 = 500;

/// What a TCB may use of its stack while handling one input.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub cfg: &'a TcpConfig,
    pub counters: &'a mut Counters,
    pub challenge: &'a mut RateLimiter,
    /// Timer granularity G of RFC 6298.
    pub tick: Duration,
    /// Out-of-order memory still available stack-wide.
    pub ooo_room: usize,
    /// Bytes receive buffers may still grow by, stack-wide.
    pub tune_room: usize,
}

/// What the next segment out of this connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Syn,
    /// Data and/or FIN from `seq`.
    Data {
        seq: SeqNum,
        len: u32,
        fin: bool,
        rexmit: bool,
    },
    Probe,
    Ack,
}

/// The timestamp clock: 1 ms per tick (RFC 7323 §5.4 recommends 1 ms–1 s).
fn ts_clock(now: Instant) -> u32 {
    now.as_millis() as u32
}

/// PAWS: TS.Recent is invalid after 24 days idle (RFC 7323 §5.5).
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// PAWS: a TSval this many ticks older than TS.Recent still passes in a
/// synchronized state other than TIME-WAIT (as Linux's
/// `TCP_PAWS_WINDOW`; its `tcp_paws_reject` for SYN-RECEIVED and
/// TIME-WAIT allows none). A sender's clock may tick between its
/// retransmission of one late segment and the late original of the next
/// hole, which then comes with a TSval one tick older than TS.Recent:
/// new data, whose drop turns a needless retransmission into a needed
/// one (the sender can no longer undo its window cut). The price: an old
/// duplicate from the sequence space's previous lap passes if it is one
/// tick old, which needs 2^31 bytes within one tick — beyond 17 Tbit/s
/// at Linux's 1 ms, 17 Gbit/s at RFC 7323's slowest clock of 1 s.
const PAWS_WINDOW: u32 = 1;

/// PAWS replay window for a reordered duplicate ACK, in the peer's ticks
/// per second of our RTO: RFC 7323 §5.4 has the clock tick at 1 ms to 1 s,
/// and some systems tick at 1200 Hz (as Linux's `tcp_tsval_replay`).
const PAWS_ACK_TICKS_PER_S: u64 = 1200;

/// Window-scale shift that lets `buf` be advertised (RFC 7323 §2.3: ≤ 14).
pub(crate) fn scale_for(buf: u32) -> u8 {
    let mut s = 0u8;
    while (buf >> s) > 65535 && s < 14 {
        s += 1;
    }
    s
}

/// Per-connection state (see the module docs).
pub(crate) struct Tcb<R, T> {
    pub tuple: Tuple,
    pub cookie: u64,
    pub state: State,
    pub flags: u32,
    /// Pending application events.
    pub ev: u8,
    pub dead: Option<DeadReason>,
    /// When the stack last filed this TCB in the timing wheel.
    pub wheel_at: Instant,

    iss: SeqNum,
    snd_una: SeqNum,
    snd_nxt: SeqNum,
    snd_max: SeqNum,
    snd_wnd: u32,
    max_snd_wnd: u32,
    snd_wl1: SeqNum,
    snd_wl2: SeqNum,
    /// Sequence number of our FIN (valid with SHUT_WR).
    fin_seq: SeqNum,
    snd_wscale: u8,
    rcv_wscale: u8,
    /// Payload bytes per segment (MSS less the options we always send).
    seg_mss: u16,
    /// RFC 9293 §3.7.1 Eff.snd.MSS before options: min(peer MSS, ours).
    mss_base: u16,
    local_mss: u16,
    sendq: SendQueue<T>,

    /// Urgent data either way, a D-SACK to send (rare: boxed, the state
    /// stays small).
    rare: Option<Box<Rare>>,
    irs: SeqNum,
    rcv_nxt: SeqNum,
    /// Right edge of the window we last advertised.
    rcv_adv: SeqNum,
    /// RCV.NXT when that edge was advertised: the peer has used
    /// `rcv_nxt - rcv_adv_at` of the `rcv_adv - rcv_adv_at` it was offered.
    rcv_adv_at: SeqNum,
    rcv_buf: u32,
    /// With the bytes the application took out to hold them itself
    /// ([`Tcb::recv_hold`]) and has not released: they still fill the
    /// window, as if unread.
    rcvq: RecvQueue<R>,
    /// Receive-buffer auto-tuning ([`Tcb::rcv_space_adjust`], Linux's
    /// `rcvq_space`): the window's base when this round trip's count of
    /// consumed bytes began (when: `mark_us`), and the most consumed in
    /// one round trip so far, in KiB (saturating; 0: not begun).
    rcv_space_seq: SeqNum,
    rcv_space_kib: u16,
    /// The send buffer the application fixed (`SO_SNDBUF`), in KiB; 0:
    /// it follows the congestion window ([`Tcb::snd_buf`]).
    snd_lock_kib: u16,
    /// Where the peer's out-of-order FIN sits (with OOO_FIN).
    fin_in: SeqNum,

    ts_recent: u32,
    ts_offset: u32,
    last_ack_sent: SeqNum,

    rtt: RttEstimator,
    /// A µs clock mark: while TIMING, when our first SYN left; after
    /// the handshake, when the receive-buffer auto-tuning's round trip
    /// began (`rcv_space_seq`).
    mark_us: u32,
    /// One record per segment in flight; RACK (RFC 8985 §6).
    recs: RtxRecords,
    /// HyStart's ACK train ([`Tcb::hystart`]): where this slow-start round
    /// ends (SND.NXT when it began), when it began and when its last ACK
    /// of the train came (µs clock).
    hs_end: SeqNum,
    hs_round_us: u32,
    hs_ack_us: u32,

    win: Window,
    cc: Controller,
    /// RFC 6582 `recover` / RFC 6675 `RecoveryPoint`.
    recover: SeqNum,
    /// RFC 8985 TLP.end_seq.
    tlp_end: SeqNum,
    /// The end of the last segment of new data sent shorter than the MSS
    /// (Linux's `snd_sml`): Nagle holds a small segment only while such
    /// a one is unacknowledged (Minshall's variant).
    snd_sml: SeqNum,
    dupacks: u8,

    t_rtx: Instant,
    /// RACK's reordering timer (RFC 8985 §6.2 step 5).
    t_reo: Instant,
    t_delack: Instant,
    t_ka: Instant,
    t_wait: Instant,
    /// `TCP_CORK` ([`cork`] bits).
    cork: u8,
    /// `TCP_DEFER_ACCEPT`: until when this passive connection waits for
    /// data before it is announced ([`Tcb::defers_knock`]); [`DEFER_NOT`]
    /// before it is asked, [`DEFER_OVER`] once it is announced or to be.
    /// (A bare time: the state of a connection stays within IX's 512
    /// bytes.)
    defer_until: Instant,
    /// What its packets carry in their IPv4 header (`IP_TOS`, `IP_TTL`),
    /// its ECN bits clear.
    pub ip: IpOpts,
    retries: u8,
    /// Keepalive probes sent without an answer.
    probes: u8,
    /// This connection's keepalive timing (TCP_KEEPIDLE, TCP_KEEPINTVL,
    /// TCP_KEEPCNT): idle and interval in seconds, probes; 0 is the
    /// configuration's.
    ka_idle_s: u16,
    ka_intvl_s: u16,
    ka_cnt: u8,
    /// Persist-timer backoff shift; reset when the window opens.
    persist_shift: u8,
    /// Window probes sent since the peer last answered.
    zwp: u8,
    /// When this connection last sent a challenge ACK or answered an
    /// unacceptable segment that carried nothing (ms clock, 0: never; one
    /// clock for both, as Linux's `last_oow_ack_time`).
    last_challenge_ms: u32,
    /// The largest payload the peer has sent in one segment (at least
    /// 536, at most our MSS): the "full-sized segment" of the delayed-ACK
    /// rule, as Linux's `rcv_mss`.
    rcv_mss: u16,
    last_rx: Instant,
    retrans_total: u32,
    /// `TCP_INFO`'s counts, in 14 bytes (IX's 512-byte budget): segments
    /// received and sent, payload bytes retransmitted (saturating at 4
    /// GiB), and how often SND.UNA and RCV.NXT went a whole 2³² past ISS
    /// and IRS — the bytes acknowledged, received and sent follow from
    /// those, and wrap after 1 TiB (Linux's after 2⁶⁴).
    segs_in: u32,
    segs_out: u32,
    bytes_retrans: u32,
    una_wraps: u8,
    rcv_wraps: u8,
}

impl<R: AsRef<[u8]>, T: AsRef<[u8]>> Tcb<R, T> {
    fn blank(ctx: &Ctx, tuple: Tuple, iss: SeqNum, ts_offset: u32, local_mss: u16) -> Self {
        let cfg = ctx.cfg;
        let mut flags = 0;
        if !cfg.nagle {
            flags |= NODELAY;
        }
        if cfg.keepalive {
            flags |= KEEPALIVE;
        }
        let mss = u32::from(local_mss);
        Tcb {
            tuple,
            cookie: 0,
            state: State::Closed,
            flags,
            ev: 0,
            dead: None,
            wheel_at: Instant::NEVER,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: SeqNum(0),
            snd_wl2: iss,
            fin_seq: iss,
            snd_wscale: 0,
            rcv_wscale: if cfg.window_scaling {
                scale_for(cfg.recv_buffer_limit())
            } else {
                0
            },
            seg_mss: local_mss,
            mss_base: local_mss,
            local_mss,
            sendq: SendQueue::default(),
            rare: None,
            irs: SeqNum(0),
            rcv_nxt: SeqNum(0),
            rcv_adv: SeqNum(0),
            rcv_adv_at: SeqNum(0),
            rcv_buf: cfg.recv_buffer,
            rcvq: RecvQueue::default(),
            rcv_space_seq: SeqNum(0),
            rcv_space_kib: 0,
            snd_lock_kib: 0,
            fin_in: SeqNum(0),
            ts_recent: 0,
            ts_offset,
            last_ack_sent: SeqNum(0),
            rtt: RttEstimator::new(cfg.rto_initial),
            mark_us: 0,
            recs: RtxRecords::default(),
            hs_end: iss,
            hs_round_us: 0,
            hs_ack_us: 0,
            win: Window::initial(mss),
            cc: Controller::new(cfg.cc),
            recover: iss,
            tlp_end: iss,
            snd_sml: iss,
            dupacks: 0,
            t_rtx: Instant::NEVER,
            t_reo: Instant::NEVER,
            t_delack: Instant::NEVER,
            t_ka: Instant::NEVER,
            ka_idle_s: 0,
            ka_intvl_s: 0,
            ka_cnt: 0,
            t_wait: Instant::NEVER,
            cork: 0,
            defer_until: DEFER_NOT,
            ip: IpOpts::default(),
            retries: 0,
            probes: 0,
            persist_shift: 0,
            zwp: 0,
            last_challenge_ms: 0,
            rcv_mss: local_mss.min(536),
            last_rx: ctx.now,
            retrans_total: 0,
            segs_in: 0,
            segs_out: 0,
            bytes_retrans: 0,
            una_wraps: 0,
            rcv_wraps: 0,
        }
    }

    /// An active open: SYN-SENT with a SYN to send (RFC 9293 §3.10.1).
    pub fn connect(
        ctx: &mut Ctx,
        tuple: Tuple,
        iss: SeqNum,
        ts_offset: u32,
        local_mss: u16,
        cookie: u64,
    ) -> Self {
        let mut t = Self::blank(ctx, tuple, iss, ts_offset, local_mss);
        t.cookie = cookie;
        t.state = State::SynSent;
        t.flags |= OWNED | SYN_PENDING;
        ctx.counters.tcp_active_opens += 1;
        t
    }

    /// A passive open from a SYN (RFC 9293 §3.10.7.2): SYN-RECEIVED with a
    /// SYN-ACK to send.
    pub fn from_syn(
        ctx: &mut Ctx,
        tuple: Tuple,
        iss: SeqNum,
        ts_offset: u32,
        local_mss: u16,
        seg: &Segment,
    ) -> Self {
        let mut t = Self::blank(ctx, tuple, iss, ts_offset, local_mss);
        t.state = State::SynReceived;
        t.flags |= PASSIVE | SYN_PENDING;
        t.irs = seg.seq;
        t.rcv_nxt = seg.seq + 1;
        t.segs_in = 1; // the SYN
        t.negotiate(ctx, &seg.opts);
        // RFC 7323 §2.2: the window field of a SYN is never scaled.
        t.snd_wnd = u32::from(seg.wnd);
        t.max_snd_wnd = t.snd_wnd;
        t.snd_wl1 = seg.seq;
        t.rcv_adv = t.rcv_nxt + t.syn_window() as usize;
        t.rcv_adv_at = t.rcv_nxt;
        ctx.counters.tcp_passive_opens += 1;
        t
    }

    /// A passive open completed by a valid SYN cookie in `seg` (an ACK):
    /// ESTABLISHED straight away (RFC 4987 §3.6).
    #[allow(clippy::too_many_arguments)]
    pub fn from_cookie(
        ctx: &mut Ctx,
        tuple: Tuple,
        iss: SeqNum,
        ts_offset: u32,
        local_mss: u16,
        seg: &Segment,
        peer_mss: u16,
        wscale: Option<u8>,
        sack: bool,
    ) -> Self {
        let mut t = Self::blank(ctx, tuple, iss, ts_offset, local_mss);
        t.state = State::Established;
        t.flags |= PASSIVE;
        t.irs = seg.seq - 1;
        t.rcv_nxt = seg.seq;
        t.segs_in = 1; // the ACK that carried the cookie
        t.snd_una = iss + 1;
        t.snd_nxt = iss + 1;
        t.snd_max = iss + 1;
        // RFC 6582 §3.2: `recover` starts at the ISS.
        t.recover = iss;
        let opts = TcpOptions {
            mss: Some(peer_mss),
            window_scale: wscale,
            sack_permitted: sack,
            timestamp: seg.opts.timestamp,
            ..Default::default()
        };
        t.negotiate(ctx, &opts);
        if seg.opts.timestamp.is_none() {
            t.flags &= !TS_OK;
        }
        t.snd_wnd = u32::from(seg.wnd) << t.snd_wscale;
        t.max_snd_wnd = t.snd_wnd;
        t.snd_wl1 = seg.seq;
        t.snd_wl2 = seg.ack.unwrap_or(iss + 1);
        t.rcv_adv = t.rcv_nxt + t.syn_window() as usize;
        t.rcv_adv_at = t.rcv_nxt;
        t.ev |= ev::KNOCK;
        ctx.counters.tcp_passive_opens += 1;
        t
    }

    /// Options from the peer's SYN (RFC 7323 §1.3, §2.2; RFC 2018 §2;
    /// RFC 9293 §3.7.1).
    fn negotiate(&mut self, ctx: &Ctx, opts: &TcpOptions) {
        let cfg = ctx.cfg;
        // RFC 9293 §3.7.1: without an MSS option assume 536.
        let peer_mss = opts.mss.unwrap_or(536).max(64);
        let mut mss = peer_mss.min(self.local_mss);
        self.mss_base = mss;
        if cfg.window_scaling && opts.window_scale.is_some() {
            self.flags |= WS_OK;
            // RFC 7323 §2.3: a shift above 14 is taken as 14.
            self.snd_wscale = opts.window_scale.unwrap_or(0).min(14);
        } else {
            self.flags &= !WS_OK;
            self.snd_wscale = 0;
            self.rcv_wscale = 0;
        }
        if cfg.timestamps {
            if let Some((tsval, _)) = opts.timestamp {
                self.flags |= TS_OK;
                self.ts_recent = tsval;
                // Every segment carries 12 bytes of timestamp option.
                mss = mss.saturating_sub(12).max(64);
            }
        }
        if cfg.sack && opts.sack_permitted {
            self.flags |= SACK_OK;
        }
        self.seg_mss = mss;
        self.win = Window::initial(u32::from(mss));
    }

    // ----- small helpers -------------------------------------------------

    fn has(&self, f: u32) -> bool {
        self.flags & f != 0
    }

    fn mss(&self) -> u32 {
        u32::from(self.seg_mss)
    }

    /// Payload that fits the next segment given the options it will carry
    /// now (SACK blocks shrink it, RFC 9293 §3.7.1).
    fn cur_mss(&self) -> usize {
        let mut opts = 0;
        if self.has(TS_OK) {
            opts += 12;
        }
        if let Some((_, n)) = self.sack_option(self.has(TS_OK)) {
            opts += 4 + 8 * n;
        }
        usize::from(self.mss_base).saturating_sub(opts).max(1)
    }

    /// First sequence number of the data stream.
    fn data_base(&self) -> SeqNum {
        // Not a sequence comparison: after 2 GiB SND.UNA is "behind" ISS+1
        // in modular order. Before the SYN is acknowledged the data starts
        // after it; afterwards at SND.UNA.
        if matches!(self.state, State::SynSent | State::SynReceived) {
            self.iss + 1
        } else {
            self.snd_una
        }
    }

    /// The end of the sequence space in use: the data, and the FIN once
    /// queued.
    fn seq_end(&self) -> SeqNum {
        if self.has(SHUT_WR) {
            self.fin_seq + 1
        } else {
            self.data_end()
        }
    }

    /// One past the last byte accepted from the application.
    fn data_end(&self) -> SeqNum {
        if self.has(SHUT_WR) {
            self.fin_seq
        } else {
            self.data_base() + self.sendq.len()
        }
    }

    /// RCV.NXT moves forward to `to`, counting its wraps past IRS.
    fn advance_rcv_nxt(&mut self, to: SeqNum) {
        if to.0.wrapping_sub(self.irs.0) < self.rcv_nxt.0.wrapping_sub(self.irs.0) {
            self.rcv_wraps = self.rcv_wraps.wrapping_add(1);
        }
        self.rcv_nxt = to;
    }

    /// Is our FIN in sequence space yet (sent at least once)?
    fn fin_sent(&self) -> bool {
        self.has(SHUT_WR) && self.snd_max.diff(self.fin_seq) > 0
    }

    fn window_end(&self) -> SeqNum {
        self.snd_una + self.snd_wnd as usize
    }

    fn emit_event(&mut self, e: u8) {
        if self.has(OWNED) && !self.has(APP_CLOSED) {
            self.ev |= e;
        }
    }

    /// End the connection: CLOSED, with a `dead` event if the application
    /// still holds the handle.
    fn die(&mut self, reason: DeadReason) {
        self.state = State::Closed;
        self.dead = Some(reason);
        self.emit_event(ev::DEAD);
        self.sendq.clear();
        self.rcvq.clear();
        self.recs.clear();
        self.t_rtx = Instant::NEVER;
        self.t_reo = Instant::NEVER;
        self.t_delack = Instant::NEVER;
        self.t_ka = Instant::NEVER;
        self.t_wait = Instant::NEVER;
        self.flags &= !(ACK_NOW | PROBE_PENDING | SYN_PENDING | RETX_FIRST);
    }

    fn rto(&self, ctx: &Ctx) -> Duration {
        self.rtt.rto(ctx.cfg.rto_max)
    }

    /// Answer an unacceptable segment (out of the window, or failing
    /// PAWS) with an ACK (RFC 9293 §3.10.7.4, RFC 7323 §5.3) — for a pure
    /// ACK, at most one per `CHALLENGE_INTERVAL_MS`, as Linux's
    /// `tcp_oow_rate_limited`: two ends that each find the other's ACKs
    /// unacceptable (a middlebox that rewrote sequence numbers or
    /// timestamps) would otherwise answer each other's answers at the rate
    /// of the path. Data or a FIN is always answered (no ACK loop carries
    /// either, and its ACK may carry a D-SACK). A SYN, whatever its
    /// sequence number, draws a challenge ACK, limited as those are
    /// (RFC 5961 §4.2, §7; Linux's `syn_challenge`).
    ///
    /// In TIME-WAIT a FIN is the peer's FIN again (it did not hear our
    /// ACK): 2·MSL starts over (RFC 9293 §3.10.7.4; Linux also when PAWS
    /// rejects it).
    fn ack_unacceptable(&mut self, ctx: &mut Ctx, seg: &Segment) {
        if self.state == State::TimeWait && seg.flags.fin() {
            self.t_wait = ctx.now + 2 * ctx.cfg.msl;
        }
        if seg.flags.syn() {
            return self.challenge_ack(ctx);
        }
        if seg.len() == 0 {
            if self.answered_lately(ctx.now) {
                ctx.counters.tcp_acks_skipped += 1;
                return;
            }
            self.last_challenge_ms = (ctx.now.as_millis() as u32).max(1);
        }
        self.flags |= ACK_NOW;
    }

    /// Did this connection send a challenge ACK, or answer an unacceptable
    /// pure ACK, within `CHALLENGE_INTERVAL_MS`? (One clock for both.)
    fn answered_lately(&self, now: Instant) -> bool {
        let now_ms = now.as_millis() as u32;
        self.last_challenge_ms != 0
            && now_ms.wrapping_sub(self.last_challenge_ms) < CHALLENGE_INTERVAL_MS
    }

    fn challenge_ack(&mut self, ctx: &mut Ctx) {
        // RFC 5961 §7: limit the rate of challenge ACKs — per connection,
        // so one connection cannot drain the shared budget, and stack-wide.
        if !self.answered_lately(ctx.now) && ctx.challenge.allow(ctx.now) {
            self.last_challenge_ms = (ctx.now.as_millis() as u32).max(1);
            ctx.counters.tcp_challenge_acks += 1;
            self.flags |= ACK_NOW;
        } else {
            ctx.counters.tcp_challenge_acks_limited += 1;
        }
    }

    // ----- public surface used by the stack ------------------------------

    /// Can the application still be told about this connection?
    pub fn owned(&self) -> bool {
        self.has(OWNED) && !self.has(APP_CLOSED)
    }

    /// May the TCB be freed?
    pub fn reapable(&self) -> bool {
        self.state == State::Closed && (!self.has(OWNED) || self.has(APP_CLOSED)) && self.ev == 0
    }

    /// Take the bytes acknowledged since the last `sent` event.
    pub fn take_acked(&mut self) -> u32 {
        self.sendq.take_acked()
    }

    /// Bytes `send` would accept now: limited by the send buffer and, but
    /// with `send_beyond_window`, by the peer's window (IX: the
    /// application learns what the window took).
    pub fn send_space(&self, cfg: &TcpConfig) -> usize {
        if !matches!(self.state, State::Established | State::CloseWait) || self.has(SHUT_WR) {
            return 0;
        }
        let limit = self.snd_una + self.snd_buf(cfg) as usize;
        let limit = match cfg.send_beyond_window {
            true => limit,
            false => limit.min(self.window_end()),
        };
        limit.since(self.data_end())
    }

    /// The send buffer: `send_buffer`, or twice the congestion window when
    /// that is more (Linux `tcp_sndbuf_expand`), so that a window's worth
    /// can be in flight while the next is queued; at most
    /// `send_buffer_limit`. (It shrinks with the window after a loss:
    /// `send` then takes nothing until enough is acknowledged.) The one
    /// the application fixed ([`Tcb::lock_buffers`]) instead, if it did.
    fn snd_buf(&self, cfg: &TcpConfig) -> u32 {
        if self.snd_lock_kib != 0 {
            return u32::from(self.snd_lock_kib) * 1024;
        }
        self.win
            .cwnd
            .saturating_mul(2)
            .min(cfg.send_buffer_limit())
            .max(cfg.send_buffer)
    }

    /// Cost of the frames this connection holds out of order.
    pub fn ooo_cost(&self) -> usize {
        self.rcvq.ooo_cost()
    }

    /// Readable in-order bytes.
    pub fn readable(&self) -> usize {
        self.rcvq.ready_len()
    }

    /// The readable bytes as slices of received frames.
    pub fn recv_chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.rcvq.chunks()
    }

    /// Copy readable bytes without releasing them.
    pub fn peek(&self, out: &mut [u8]) -> usize {
        self.rcvq.peek(out)
    }

    /// Has the peer's FIN arrived (end of stream once the data is read)?
    pub fn peer_closed(&self) -> bool {
        self.has(FIN_RCVD)
    }

    /// The application has accepted a knocked connection.
    pub fn accept(&mut self, cookie: u64) {
        self.cookie = cookie;
        self.flags |= ACCEPTED;
        // Data, urgent data or a FIN may have arrived between the knock
        // and the accept (their events went before it owned a cookie).
        if self.rcv_urgent().is_some() {
            self.emit_event(ev::URGENT);
        }
        if self.rcvq.ready_len() > 0 {
            self.emit_event(ev::RECV);
        }
        if self.has(FIN_RCVD) {
            self.emit_event(ev::PEER_CLOSED);
        }
    }

    /// Mark the connection as announced to the application (knock).
    pub fn set_owned(&mut self) {
        self.flags |= OWNED | KNOCKED;
    }

    /// Did the handshake complete and get announced?
    pub fn knocked(&self) -> bool {
        self.has(KNOCKED)
    }

    /// Created from a listener?
    pub fn passive(&self) -> bool {
        self.has(PASSIVE)
    }

    /// The port of the listener a passive open came through (its local
    /// port; listeners are by port): 0 for an active open.
    pub fn listener(&self) -> u16 {
        if self.passive() {
            self.tuple.local_port
        } else {
            0
        }
    }

    /// Set or clear TCP_NODELAY.
    pub fn set_nodelay(&mut self, on: bool) {
        if on {
            self.flags |= NODELAY;
        } else {
            self.flags &= !NODELAY;
        }
    }

    /// Set or clear `TCP_CORK` (tcp(7)): while set, a segment shorter
    /// than the MSS is held — whatever `TCP_NODELAY` says and whether or
    /// not data is in flight — until the cork is cleared, the FIN can ride
    /// on it, or the cork's ceiling passes: as Linux's probe timer sends a
    /// held segment (`tcp_write_wakeup`), one retransmission timeout (at
    /// least `rto_min`, 200 ms) after nothing is left in flight: here the
    /// persist timer, which runs then too (the data waits, nothing else
    /// will send it), and sends the held segment instead of a window
    /// probe when the window has room ([`Tcb::on_persist`]). Full
    /// segments go as the windows allow. Clearing it lets what it held go
    /// (the caller transmits), under Nagle if `TCP_NODELAY` is off.
    pub fn set_cork(&mut self, on: bool) {
        self.cork = if on { self.cork | cork::ON } else { 0 };
    }

    /// Whether `TCP_CORK` holds the unsent tail now: a partial segment
    /// waits, its ceiling not yet passed.
    fn cork_holds(&self) -> bool {
        self.cork == cork::ON
    }

    /// Enable or disable keepalive.
    pub fn set_keepalive(&mut self, on: bool) {
        if on {
            self.flags |= KEEPALIVE;
        } else {
            self.flags &= !KEEPALIVE;
            self.t_ka = Instant::NEVER;
        }
    }

    /// This connection's keepalive timing: idle time before the first
    /// probe and between probes in seconds, and unanswered probes before
    /// it is dropped (0: the configuration's; times above 65,535 s count
    /// as that — Linux refuses more than 32,767). Takes effect from the
    /// next probe on.
    pub fn set_keepalive_timing(&mut self, idle_s: u32, intvl_s: u32, cnt: u8) {
        self.ka_idle_s = idle_s.min(u32::from(u16::MAX)) as u16;
        self.ka_intvl_s = intvl_s.min(u32::from(u16::MAX)) as u16;
        self.ka_cnt = cnt;
        if self.t_ka != Instant::NEVER {
            self.t_ka = Instant::NEVER; // re-armed by `refresh`
        }
    }

    fn ka_idle(&self, cfg: &TcpConfig) -> Duration {
        if self.ka_idle_s > 0 {
            Duration::from_secs(u64::from(self.ka_idle_s))
        } else {
            cfg.keepalive_idle
        }
    }

    fn ka_interval(&self, cfg: &TcpConfig) -> Duration {
        if self.ka_intvl_s > 0 {
            Duration::from_secs(u64::from(self.ka_intvl_s))
        } else {
            cfg.keepalive_interval
        }
    }

    fn ka_probes(&self, cfg: &TcpConfig) -> u8 {
        if self.ka_cnt > 0 {
            self.ka_cnt
        } else {
            cfg.keepalive_probes
        }
    }

    /// The application has more to send than [`Tcb::send_space`] allows,
    /// and did not offer it: as after a short [`Tcb::send`], a `Sent`
    /// event follows when the window opens, and a zero window is probed
    /// meanwhile (RFC 9293 §3.8.6.1).
    pub fn mark_send_blocked(&mut self) {
        if matches!(self.state, State::Established | State::CloseWait) {
            self.flags |= SEND_BLOCKED;
        }
    }

    /// Queue application data; returns the bytes accepted.
    pub fn send(&mut self, ctx: &mut Ctx, data: T) -> usize {
        let offered = data.as_ref().len();
        let n = offered.min(self.send_space(ctx.cfg));
        if n < offered {
            self.flags |= SEND_BLOCKED;
        }
        if n > 0 {
            self.sendq.push(data, n);
        }
        n
    }

    /// The application is done with `n` readable bytes (IX `recv_done`):
    /// release them and open the window.
    pub fn recv_done(&mut self, n: usize) -> usize {
        let old_wnd = self.rcv_adv.since(self.rcv_nxt) as u32;
        let done = self.rcvq.consume(n);
        self.window_opened(done, old_wnd);
        done
    }

    /// The application takes `n` readable bytes (copied out first) to hold
    /// them itself, not yet read: their frames are released, but the bytes
    /// keep their place in the window until [`Tcb::recv_release`], so the
    /// peer sends no more for them. (A program that does not read must not
    /// pin the interface's packet buffers; its connections' bytes move to
    /// the application's memory and its window stays shut.)
    pub fn recv_hold(&mut self, n: usize) -> usize {
        self.rcvq.hold(n)
    }

    /// `n` held bytes ([`Tcb::recv_hold`]) are read: open the window.
    pub fn recv_release(&mut self, n: usize) -> usize {
        let old_wnd = self.rcv_adv.since(self.rcv_nxt) as u32;
        let n = self.rcvq.release_held(n);
        self.window_opened(n, old_wnd);
        n
    }

    /// Receive-buffer auto-tuning (Linux `tcp_rcv_space_adjust`), at each
    /// in-order arrival: once a round trip (the smoothed RTT), if the
    /// application consumed more in it than in any round trip before, the
    /// buffer becomes what lets a sender that doubles its window each
    /// round trip go on doing so — twice what was consumed plus 16
    /// segments, and that again twice in the proportion consumption grew —
    /// at most `recv_buffer_limit`. It never shrinks. A reader that falls
    /// behind consumes little and leaves the buffer as it is, so a
    /// connection's window only grows while its bytes are being taken.
    fn rcv_space_adjust(&mut self, ctx: &Ctx) {
        let limit = u64::from(ctx.cfg.recv_buffer_limit())
            .min(u64::from(self.rcv_buf) + ctx.tune_room as u64);
        if u64::from(self.rcv_buf) >= limit
            || !self.rtt.has_sample()
            || self.has(TIMING | RCVBUF_LOCK)
        {
            return;
        }
        let now = us_clock(ctx.now);
        let base = self.consumed_seq();
        let mss = u64::from(self.rcv_mss);
        if self.rcv_space_kib == 0 {
            self.rcv_space_seq = base;
            self.mark_us = now;
            // Linux starts from the initial window's ten segments.
            self.rcv_space_kib = (10 * mss / 1024).max(1) as u16;
            return;
        }
        let rtt = self
            .rtt
            .srtt()
            .as_micros()
            .clamp(1, u128::from(u32::MAX / 2)) as u32;
        if now.wrapping_sub(self.mark_us) < rtt {
            return;
        }
        let copied = base.since(self.rcv_space_seq) as u64;
        let space = u64::from(self.rcv_space_kib) * 1024;
        if copied > space {
            let mut win = 2 * copied + 16 * mss;
            win += 2 * win * (copied - space) / space;
            self.rcv_buf = win.min(limit).max(u64::from(self.rcv_buf)) as u32;
            self.rcv_space_kib = (copied / 1024).clamp(1, u64::from(u16::MAX)) as u16;
        }
        self.rcv_space_seq = base;
        self.mark_us = now;
    }

    /// The auto-tuning's measure of a round trip's reading ([`TcpInfo`]'s
    /// `rcv_space`): Linux starts it at ten segments of its advertised MSS
    /// (`tcp_init_buffer_space`), which the first measurement here rounds
    /// down to whole KiB.
    fn rcv_space(&self) -> u32 {
        let ts = if self.has(TS_OK) { 12 } else { 0 };
        let first = (10 * u32::from(self.local_mss.saturating_sub(ts))).min(self.rcv_buf);
        (u32::from(self.rcv_space_kib) * 1024).max(first)
    }

    /// Fix this connection's buffers, as `SO_RCVBUF` and `SO_SNDBUF` do on
    /// Linux (`SOCK_RCVBUF_LOCK`, `SOCK_SNDBUF_LOCK`): the receive buffer
    /// (the most window it offers) becomes `rcv` bytes and no longer
    /// auto-tunes; the send buffer becomes `snd` bytes (rounded up to a
    /// KiB) instead of following the congestion window. Each is at least
    /// [`MIN_LOCKED_BUFFER`] (the receive buffer at least two of our MSS)
    /// and at most the configuration's limit; the
    /// receive buffer grows past `recv_buffer` only by the stack-wide room
    /// left (`rcv_tune_memory`). A smaller buffer takes back no window
    /// already offered (RFC 9293 §3.8.6.2.2; [`Tcb::rcv_window_field`]) and
    /// drops none of the bytes sent within it: the edge stays until the
    /// bytes before it are consumed.
    pub fn lock_buffers(&mut self, ctx: &Ctx, rcv: Option<u32>, snd: Option<u32>) {
        let cfg = ctx.cfg;
        if let Some(v) = rcv {
            let room = u64::from(self.rcv_buf.max(cfg.recv_buffer)) + ctx.tune_room as u64;
            // At least two segments of our MSS. Offered less than one, a
            // Linux sender sends nothing until its persist timer fires,
            // then one window's worth, every 200 ms (`tcp_snd_wnd_test`
            // wants a whole segment inside the window); with one, a
            // window left below a segment cannot move its edge by the
            // receiver's SWS step (half the buffer), and the same
            // happens. Linux as a receiver escapes it by rounding its
            // window up to its scale's unit (3 KiB at `wscale` 10 for
            // the least buffer); on loopback (MSS 65,483) it crawls too.
            // Found by `socket_ops.c` (seed 102: 46 s against Linux's
            // 0.3 s over veth).
            let least = MIN_LOCKED_BUFFER.max(2 * u32::from(self.local_mss));
            let v = u64::from(v.clamp(least, cfg.recv_buffer_limit().max(least))).min(room);
            self.rcv_buf = v as u32;
            self.flags |= RCVBUF_LOCK;
        }
        if let Some(v) = snd {
            let v = v.clamp(MIN_LOCKED_BUFFER, cfg.send_buffer_limit());
            self.snd_lock_kib = v.div_ceil(1024).min(u32::from(u16::MAX)) as u16;
        }
    }

    /// [`Tcb::lock_buffers`] for a passive open as it is made, with its
    /// listener's buffers: the SYN-ACK offers the receive buffer's window.
    /// (A listener that fixed neither leaves the connection as made.)
    pub fn lock_passive_buffers(&mut self, ctx: &Ctx, rcv: Option<u32>, snd: Option<u32>) {
        if (rcv, snd) == (None, None) {
            return;
        }
        self.lock_buffers(ctx, rcv, snd);
        self.rcv_adv = self.rcv_adv_at + self.syn_window() as usize;
    }

    /// Bytes this connection's receive buffer grew past `recv_buffer`.
    pub fn rcv_grown(&self, cfg: &TcpConfig) -> usize {
        self.rcv_buf.saturating_sub(cfg.recv_buffer) as usize
    }

    /// How many frames (in order, or out of order when `ooo`) this
    /// connection may hold: the configured count, multiplied as its
    /// receive buffer grew past `recv_buffer` (the bytes are bounded by
    /// the buffer itself; this bounds the frames).
    fn segment_limit(&self, cfg: &TcpConfig, ooo: bool) -> usize {
        let n = if ooo {
            cfg.max_ooo_segments
        } else {
            cfg.max_rx_segments
        };
        usize::from(n) * (self.rcv_buf / cfg.recv_buffer.max(1)).max(1) as usize
    }

    /// The first sequence number not yet consumed (read, or released after
    /// a hold): the window's base.
    fn consumed_seq(&self) -> SeqNum {
        self.rcv_nxt - self.rcvq.ready_len() - self.rcvq.held()
    }

    /// `done` bytes were consumed (the window was `old_wnd`): ask for a
    /// window update when it opens enough.
    fn window_opened(&mut self, done: usize, old_wnd: u32) {
        if done == 0 || !self.state.is_synchronized() || self.has(FIN_RCVD) {
            return;
        }
        let new_right = self.consumed_seq() + self.rcv_buf as usize;
        let gain = new_right.since(self.rcv_adv) as u32;
        let mss = u32::from(self.local_mss);
        // Send a window update when the window was (nearly) closed or opens
        // by half the buffer; otherwise the next ACK carries it. Not when
        // the peer still has four full segments of window and has used
        // less than half of what it was last offered (as we ACK every
        // second segment, mostly: four segments left): it is not held back,
        // and its next segments' ACKs carry the new edge. So the first
        // request of a connection (a few bytes of the SYN-ACK's 64 KiB, a
        // window never scaled, RFC 7323 §2.2) costs no pure ACK when the
        // window grows to the whole buffer.
        let offered = self.rcv_adv.since(self.rcv_adv_at) as u32;
        let used = self.rcv_nxt.since(self.rcv_adv_at) as u32;
        let unhindered = old_wnd >= 4 * mss && used < offered / 2;
        if (old_wnd < mss && gain >= mss) || (gain >= self.rcv_buf / 2 && !unhindered) {
            self.flags |= ACK_NOW;
        }
    }

    /// Half-close: send FIN after the queued data (RFC 9293 §3.10.4).
    pub fn shutdown(&mut self) -> bool {
        if self.has(SHUT_WR) {
            return true;
        }
        match self.state {
            State::SynSent | State::SynReceived => {
                self.fin_seq = self.data_end();
                self.flags |= SHUT_WR;
                true
            }
            State::Established => {
                self.fin_seq = self.data_end();
                self.flags |= SHUT_WR;
                self.state = State::FinWait1;
                true
            }
            State::CloseWait => {
                self.fin_seq = self.data_end();
                self.flags |= SHUT_WR;
                self.state = State::LastAck;
                true
            }
            _ => false,
        }
    }

    /// The application closes (or rejects) the connection and forgets the
    /// handle. Unread data or a rejected connection resets it (RFC 9293
    /// §3.10.4 ABORT; RFC 2525 §2.17).
    /// Returns the RST to send, if the connection is reset.
    #[must_use]
    pub fn close(&mut self, ctx: &mut Ctx) -> Option<RstReply> {
        let unread = self.rcvq.ready_len() > 0 || self.rcvq.held() > 0;
        // Closing a knocked connection that was never accepted rejects it.
        let rejected = self.has(PASSIVE) && !self.has(ACCEPTED);
        self.flags |= APP_CLOSED;
        self.ev = 0;
        match self.state {
            State::Closed => None,
            State::SynSent => {
                self.die(DeadReason::Aborted);
                None
            }
            _ if unread || rejected => self.abort(ctx),
            State::TimeWait | State::Closing | State::LastAck | State::FinWait1 => None,
            State::FinWait2 => {
                self.t_wait = ctx.now + ctx.cfg.fin_wait2_timeout;
                None
            }
            _ => {
                self.shutdown();
                None
            }
        }
    }

    /// Reset the connection now (RFC 9293 §3.10.5 ABORT): CLOSED at once;
    /// the RST `<SEQ=SND.NXT><ACK=RCV.NXT><CTL=RST,ACK>` is returned for the
    /// stack to send without state, so a peer that cannot be reached (no
    /// ARP answer, no route) never keeps the TCB alive.
    #[must_use]
    pub fn abort(&mut self, ctx: &mut Ctx) -> Option<RstReply> {
        let live = self.state.is_synchronized() || self.state == State::SynReceived;
        let rst = (live && self.state != State::TimeWait).then(|| {
            if matches!(self.state, State::Established | State::CloseWait) {
                ctx.counters.tcp_estab_resets += 1;
            }
            RstReply {
                seq: self.snd_max,
                ack: Some(self.rcv_nxt),
            }
        });
        self.flags |= APP_CLOSED;
        self.ev = 0;
        self.die(DeadReason::Aborted);
        rst
    }

    /// A snapshot for `tcp_info`.
    pub fn info(&self, cfg: &TcpConfig) -> TcpInfo {
        let unacked = self.snd_nxt.since(self.snd_una) as u32;
        // The SYN and FIN count, as Linux's `bytes_acked`.
        let bytes_acked =
            u64::from(self.una_wraps) << 32 | u64::from(self.snd_una.0.wrapping_sub(self.iss.0));
        TcpInfo {
            state: self.state,
            cwnd: self.win.cwnd,
            ssthresh: self.win.ssthresh,
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            rto: self.rtt.rto(cfg.rto_max),
            mss: self.seg_mss,
            snd_wnd: self.snd_wnd,
            rcv_wnd: self.rcv_adv.since(self.rcv_nxt) as u32,
            unacked,
            unsent: if self.has(FIN_ACKED) {
                0
            } else {
                self.data_end().since(self.snd_nxt.max(self.data_base())) as u32
            },
            readable: self.rcvq.ready_len() as u32,
            retransmits: self.retrans_total,
            unacked_segs: self.recs.len() as u32,
            mss_base: self.mss_base,
            rcv_mss: self.rcv_mss,
            rcv_space: self.rcv_space(),
            segs_in: self.segs_in,
            segs_out: self.segs_out,
            bytes_acked,
            bytes_received: (u64::from(self.rcv_wraps) << 32
                | u64::from(self.rcv_nxt.0.wrapping_sub(self.irs.0)))
            .saturating_sub(1),
            // Sequence space sent once (less the SYN and the FIN), and
            // the retransmissions.
            bytes_sent: (bytes_acked + self.snd_max.since(self.snd_una) as u64)
                .saturating_sub(u64::from(self.snd_max != self.iss) + u64::from(self.fin_sent()))
                + u64::from(self.bytes_retrans),
            bytes_retrans: u64::from(self.bytes_retrans),
            sack: self.has(SACK_OK),
            timestamps: self.has(TS_OK),
            wscale: self
                .has(WS_OK)
                .then_some((self.snd_wscale, self.rcv_wscale)),
            cc: self.cc.name(),
        }
    }

    /// The next hop did not answer ARP: a connection still opening fails
    /// (RFC 1122 §4.2.3.5: the application is told); an open one carries
    /// on and its retransmission timer decides.
    pub fn neighbor_failed(&mut self, ctx: &mut Ctx) {
        if self.state == State::SynSent {
            ctx.counters.tcp_attempt_fails += 1;
            self.die(DeadReason::Unreachable);
        }
    }

    /// An ICMP error names this connection (RFC 1122 §4.2.3.9, RFC 5461):
    /// hard errors abort a connection still in SYN-SENT; "fragmentation
    /// needed" lowers the path MTU (RFC 1191); other errors are only
    /// counted (soft errors).
    pub fn icmp_error(&mut self, ctx: &mut Ctx, kind: IcmpKind, seq: SeqNum) -> bool {
        // RFC 5927 §4.1: the quoted sequence number must be in flight.
        if seq.diff(self.snd_una) < 0 || seq.diff(self.snd_max) >= 0 {
            return false;
        }
        match kind {
            IcmpKind::Hard if self.state == State::SynSent => {
                ctx.counters.tcp_attempt_fails += 1;
                self.die(DeadReason::Unreachable);
            }
            IcmpKind::FragNeeded(mtu) => self.reduce_pmtu(ctx, mtu),
            _ => {}
        }
        true
    }

    /// RFC 1191 §6.3: a Datagram Too Big message with next-hop MTU `mtu`
    /// lowers the segment size, and what is in flight is sent again at
    /// that size (not a congestion signal: cwnd is untouched). The MTU is
    /// floored at 576 bytes (RFC 1191 allows 68; a tiny MTU is an attack on
    /// throughput — Linux floors at 552); `mtu` 0 (old routers, RFC 1191
    /// §5) is ignored.
    fn reduce_pmtu(&mut self, ctx: &mut Ctx, mtu: u16) {
        if mtu == 0 {
            return;
        }
        let base = mtu.max(576) - 40;
        if base >= self.mss_base {
            return;
        }
        self.mss_base = base;
        self.seg_mss = if self.has(TS_OK) { base - 12 } else { base };
        self.win.mss = u32::from(self.seg_mss);
        // (Everything goes again: nothing is left for F-RTO to tell.)
        self.frto_off();
        self.go_back();
        ctx.counters.tcp_pmtu_reductions += 1;
    }

    /// Resend everything from SND.UNA (a timeout, a smaller path MTU):
    /// recovery and probes end, SACKs are forgotten (RFC 2018 §8: the
    /// receiver may have reneged), and D-SACKs of what was sent before are
    /// no sign of reordering ([`Rare::rto_high`]).
    fn go_back(&mut self) {
        self.snd_nxt = self.snd_una;
        self.recover = self.snd_max;
        self.flags &= !(IN_RECOVERY | RETX_FIRST | TLP_PROBE | TLP_OUT);
        self.recs.on_rto();
        if self.has(SACK_OK) {
            self.rare.get_or_insert_default().rto_high = Some(self.snd_max);
        }
        self.t_reo = Instant::NEVER;
    }

    // ----- input ---------------------------------------------------------

    /// Process one segment for this connection (RFC 9293 §3.10.7.3 and
    /// §3.10.7.4). The frame is kept if it carries payload to deliver.
    #[must_use]
    pub fn on_segment(&mut self, ctx: &mut Ctx, seg: &Segment, frame: R) -> Option<RstReply> {
        self.segs_in = self.segs_in.wrapping_add(1);
        match self.state {
            State::SynSent => return self.on_segment_syn_sent(ctx, seg),
            State::Closed | State::Listen => {
                // A dead connection the application has not closed yet
                // answers as CLOSED does (RFC 9293 §3.10.7.1).
                ctx.counters.drop(DropReason::TcpNoConnection);
                return match (seg.flags.rst(), seg.ack) {
                    (true, _) => None,
                    (false, Some(ack)) => Some(RstReply {
                        seq: ack,
                        ack: None,
                    }),
                    (false, None) => Some(RstReply {
                        seq: SeqNum(0),
                        ack: Some(seg.seq + seg.len()),
                    }),
                };
            }
            _ => {}
        }
        // RFC 7323 §5.3 R1 (PAWS): a segment whose TSval is older than
        // TS.Recent is a duplicate: acknowledge and drop it (not for RST).
        // Two departures, as Linux: a TSval one tick old passes
        // (`PAWS_WINDOW`), and so does a reordered duplicate ACK
        // (`disordered_ack`).
        if self.has(TS_OK) && !seg.flags.rst() {
            if let Some((tsval, _)) = seg.opts.timestamp {
                // RFC 7323 §5.5: after 24 days idle, TS.Recent is no
                // longer valid. Idle since the last acceptable segment
                // (`last_rx`, set after this check; TS.Recent moves only
                // with such a one: until 2026-11-30 a clock of its own,
                // 4 bytes the state of a connection could not spare).
                let stale = ctx.now.saturating_since(self.last_rx) > PAWS_IDLE;
                let behind = self.ts_recent.wrapping_sub(tsval) as i32;
                let lenient = !matches!(self.state, State::SynReceived | State::TimeWait);
                let window = if lenient { PAWS_WINDOW as i32 } else { 0 };
                if behind > window
                    && !stale
                    && !(lenient && self.disordered_ack(ctx, seg, behind as u32))
                {
                    ctx.counters.drop(DropReason::TcpPaws);
                    self.ack_unacceptable(ctx, seg);
                    // (Its old data a D-SACK, as Linux's `tcp_send_dupack`.)
                    self.note_old(ctx, seg);
                    return None;
                }
            }
        }

        // Simultaneous open: in SYN-RECEIVED the peer's SYN-ACK repeats its
        // SYN at IRS, left of the window. RFC 9293 §3.10.7.4 trims sequence
        // space outside the window: drop the SYN and process the rest (a
        // zero-length segment at RCV.NXT whose ACK may complete the
        // handshake), as Linux does.
        let trimmed;
        let seg = if self.state == State::SynReceived
            && seg.flags.syn()
            && seg.ack.is_some()
            && seg.seq == self.irs
        {
            trimmed = Segment {
                seq: seg.seq + 1,
                flags: Flags(seg.flags.0 & !Flags::SYN.0),
                // Its window is unscaled (RFC 7323 §2.2); expressed in our
                // scaled units it rounds down, which is safe.
                wnd: seg.wnd >> self.snd_wscale,
                ..*seg
            };
            &trimmed
        } else {
            seg
        };

        // First: is the segment acceptable? (RFC 9293 §3.10.7.4, the
        // four-case table).
        let seg_len = seg.len();
        let wnd = self.rcv_adv.since(self.rcv_nxt);
        let seq = seg.seq;
        let in_wnd = |s: SeqNum| s.diff(self.rcv_nxt) >= 0 && s.diff(self.rcv_nxt + wnd) < 0;
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == self.rcv_nxt,
            // A zero-length segment exactly at the right edge is accepted
            // too (as Linux does): a peer whose data filled our window has
            // no other sequence number to put on its ACKs.
            (0, _) => in_wnd(seq) || (seq == self.rcv_nxt + wnd && !seg.flags.rst()),
            // RFC 9293: with a zero window still process ACKs and RSTs
            // of a segment at RCV.NXT (its data is then trimmed).
            (_, 0) => seq == self.rcv_nxt,
            (l, _) => in_wnd(seq) || in_wnd(seq + (l - 1)),
        };
        if !acceptable {
            if self.state == State::SynReceived
                && seg.flags.syn()
                && seg.ack.is_none()
                && seq == self.irs
            {
                // The peer did not see our SYN-ACK: send it again.
                self.flags |= SYN_PENDING;
                ctx.counters.drop(DropReason::TcpDuplicate);
                return None;
            }
            if !seg.flags.rst() {
                // RFC 9293: "<SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>", drop.
                // (A FIN in TIME-WAIT restarts 2·MSL there.)
                self.ack_unacceptable(ctx, seg);
            }
            let old = seg_len > 0 && (seq + seg_len).diff(self.rcv_nxt) <= 0;
            if old {
                self.note_old(ctx, seg);
            }
            ctx.counters.drop(if old {
                DropReason::TcpDuplicate
            } else {
                DropReason::TcpOutOfWindow
            });
            return None;
        }

        // RFC 7323 §4.3 (2): remember TSval if SEG.TSval >= TS.Recent and
        // SEG.SEQ <= Last.ACK.sent.
        if self.has(TS_OK) {
            if let Some((tsval, _)) = seg.opts.timestamp {
                if (tsval.wrapping_sub(self.ts_recent) as i32) >= 0
                    && seq.diff(self.last_ack_sent) <= 0
                {
                    self.ts_recent = tsval;
                }
            }
        }

        // Second: RST (RFC 5961 §3.2 — exact match resets, otherwise a
        // challenge ACK).
        if seg.flags.rst() {
            if self.state == State::TimeWait {
                // RFC 1337 §3 (TW1): ignore RST in TIME-WAIT, so a stray
                // RST cannot cut it short ("TIME-WAIT assassination"). A
                // deliberate departure from RFC 9293, which deletes the TCB.
                ctx.counters.drop(DropReason::TcpIgnored);
                return None;
            }
            if seq != self.rcv_nxt {
                ctx.counters.drop(DropReason::TcpRstInvalid);
                self.challenge_ack(ctx);
                return None;
            }
            ctx.counters.tcp_in_rsts += 1;
            match self.state {
                State::SynReceived => {
                    // RFC 9293: a passive open returns to LISTEN (nobody was
                    // told of it); an active one was refused.
                    if self.has(PASSIVE) {
                        self.die(DeadReason::Reset);
                    } else {
                        ctx.counters.tcp_attempt_fails += 1;
                        self.die(DeadReason::Refused);
                    }
                }
                State::Established | State::FinWait1 | State::FinWait2 | State::CloseWait => {
                    ctx.counters.tcp_estab_resets += 1;
                    self.die(DeadReason::Reset);
                }
                _ => self.die(DeadReason::Reset),
            }
            return None;
        }

        // Fourth: SYN in a synchronized state (RFC 5961 §4.2: challenge ACK).
        if seg.flags.syn() {
            if self.state == State::SynReceived && self.has(PASSIVE) {
                // RFC 9293 §3.10.7.4: return to LISTEN.
                ctx.counters.drop(DropReason::TcpSynInvalid);
                self.die(DeadReason::Reset);
                return None;
            }
            ctx.counters.drop(DropReason::TcpSynInvalid);
            self.challenge_ack(ctx);
            return None;
        }

        // Fifth: the ACK field.
        let Some(ack) = seg.ack else {
            ctx.counters.drop(DropReason::TcpNoAck);
            return None;
        };
        if self.state == State::SynReceived {
            if self.snd_una.diff(ack) < 0 && ack.diff(self.snd_max) <= 0 {
                self.establish(ctx);
                self.snd_wnd = u32::from(seg.wnd) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
            } else {
                ctx.counters.drop(DropReason::TcpAckInvalid);
                return Some(RstReply {
                    seq: ack,
                    ack: None,
                });
            }
        }
        // RFC 5961 §5.2: acceptable iff SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT.
        if ack.diff(self.snd_max) > 0 {
            ctx.counters.drop(DropReason::TcpAckInvalid);
            self.challenge_ack(ctx);
            return None;
        }
        if ack.diff(self.snd_una - self.max_snd_wnd.max(1) as usize) < 0 {
            ctx.counters.drop(DropReason::TcpAckInvalid);
            self.challenge_ack(ctx);
            return None;
        }
        self.last_rx = ctx.now;
        self.probes = 0;
        self.zwp = 0;
        self.t_ka = Instant::NEVER;
        self.process_ack(ctx, seg, ack);
        if self.state == State::Closed {
            return None;
        }

        // Sixth: URG, in ESTABLISHED and FIN-WAIT-1/2 (after a FIN it
        // cannot be: ignored).
        if seg.flags.urg()
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
        {
            self.urgent_pointer(seg);
        }
        // Seventh and eighth: text and FIN.
        if seg.payload_len > 0 || seg.flags.fin() {
            return self.process_data(ctx, seg, frame);
        }
        None
    }

    /// RFC 9293 §3.10.7.3: SYN-SENT.
    fn on_segment_syn_sent(&mut self, ctx: &mut Ctx, seg: &Segment) -> Option<RstReply> {
        // First: the ACK must acknowledge our SYN.
        if let Some(ack) = seg.ack {
            if ack.diff(self.iss) <= 0 || ack.diff(self.snd_max) > 0 {
                ctx.counters.drop(DropReason::TcpAckInvalid);
                if seg.flags.rst() {
                    return None;
                }
                return Some(RstReply {
                    seq: ack,
                    ack: None,
                });
            }
        }
        // Second: RST, acceptable only with an acceptable ACK (RFC 5961 §3.2).
        if seg.flags.rst() {
            if seg.ack.is_some() {
                ctx.counters.tcp_in_rsts += 1;
                ctx.counters.tcp_attempt_fails += 1;
                self.die(DeadReason::Refused);
            } else {
                ctx.counters.drop(DropReason::TcpRstInvalid);
            }
            return None;
        }
        // Fourth: SYN.
        if !seg.flags.syn() {
            ctx.counters.drop(DropReason::TcpIgnored);
            return None;
        }
        self.irs = seg.seq;
        self.rcv_nxt = seg.seq + 1;
        self.negotiate(ctx, &seg.opts);
        self.snd_wl1 = seg.seq;
        if let Some(ack) = seg.ack {
            // Our SYN is acknowledged: ESTABLISHED.
            self.on_syn_acked(ctx, ack);
            self.snd_una = ack;
            // RFC 7323 §2.2: the window of a SYN-ACK is never scaled.
            self.snd_wnd = u32::from(seg.wnd);
            self.max_snd_wnd = self.snd_wnd;
            self.snd_wl2 = ack;
            self.rcv_adv = self.rcv_nxt;
            self.rcv_adv_at = self.rcv_nxt;
            self.establish(ctx);
            self.flags |= ACK_NOW;
            if seg.payload_len > 0 || seg.flags.fin() {
                // Data on a SYN-ACK is unusual; acknowledge only what we
                // hold (nothing), the peer will retransmit.
                ctx.counters.drop(DropReason::TcpIgnored);
            }
        } else {
            // Simultaneous open (RFC 9293 Figure 7): SYN-RECEIVED, send
            // SYN-ACK with our original ISS.
            self.state = State::SynReceived;
            self.snd_wnd = u32::from(seg.wnd);
            self.max_snd_wnd = self.snd_wnd;
            self.rcv_adv = self.rcv_nxt + self.syn_window() as usize;
            self.rcv_adv_at = self.rcv_nxt;
            self.flags |= SYN_PENDING;
        }
        None
    }

    /// RTT sample of the handshake, unless the SYN was retransmitted.
    fn on_syn_acked(&mut self, ctx: &mut Ctx, ack: SeqNum) {
        if self.has(TIMING) && ack.diff(self.iss + 1) >= 0 {
            let r = Duration::from_micros(u64::from(us_clock(ctx.now).wrapping_sub(self.mark_us)));
            self.rtt
                .sample(r, ctx.tick, ctx.cfg.rto_min, ctx.cfg.rto_max);
        }
        self.flags &= !TIMING;
        self.retries = 0;
        self.t_rtx = Instant::NEVER;
    }

    /// Enter ESTABLISHED (from SYN-SENT or SYN-RECEIVED), completing the
    /// three-way handshake of RFC 9293 §3.5.
    fn establish(&mut self, ctx: &mut Ctx) {
        if self.state == State::SynReceived {
            self.on_syn_acked(ctx, self.iss + 1);
            self.snd_una = self.iss + 1;
            if self.snd_nxt.diff(self.snd_una) < 0 {
                self.snd_nxt = self.snd_una;
            }
        }
        self.state = State::Established;
        // RFC 6582 §3.2: `recover` starts at the ISS.
        self.recover = self.iss;
        if self.has(SYN_RETRANSMITTED) {
            // RFC 5681 §3.1: after a lost SYN the initial window is one
            // segment; RFC 6298 (5.7): without an RTT sample the RTO is 3 s.
            self.win.cwnd = self.mss();
            if !self.rtt.has_sample() {
                self.rtt = RttEstimator::new(Duration::from_secs(3).max(ctx.cfg.rto_min));
            }
        }
        if self.has(PASSIVE) {
            self.ev |= ev::KNOCK;
        } else {
            self.emit_event(ev::CONNECTED);
        }
        if self.has(SHUT_WR) {
            self.fin_seq = self.data_end();
            self.state = State::FinWait1;
        }
    }

    /// The fifth step for synchronized states: SND.UNA, the send window,
    /// loss detection, and FIN acknowledgment.
    fn process_ack(&mut self, ctx: &mut Ctx, seg: &Segment, ack: SeqNum) {
        let new_wnd = u32::from(seg.wnd) << self.snd_wscale;
        let outstanding = self.snd_max.diff(self.snd_una) > 0;
        let mut acked = AckOutcome::default();
        if outstanding && ack.diff(self.snd_una) >= 0 && ack.diff(self.snd_max) <= 0 {
            let sacks = if self.has(SACK_OK) {
                seg.opts.sacks()
            } else {
                &[]
            };
            acked = self
                .recs
                .on_ack(ack, sacks, self.snd_max, us_clock(ctx.now));
        }
        let newly_sacked = acked.newly_sacked;
        // (Not while what a timeout resent is acknowledged: the SACKs it
        // forgot, re-reported a few blocks at a time, look like
        // reordering.)
        let rto_high = self.rare.as_ref().and_then(|r| r.rto_high);
        if acked.reordered && rto_high.is_none_or(|h| self.snd_una.diff(h) >= 0) {
            self.rare.get_or_insert_default().reordering_seen = true;
        }
        if self.has(SACK_OK) {
            self.note_dsack_received(ctx, seg, ack);
        }
        let advanced = ack.diff(self.snd_una) > 0;
        if advanced {
            self.on_new_ack(ctx, seg, ack, acked.rtt_sample);
        } else if ack == self.snd_una && outstanding {
            // RFC 6675 §2: with SACK, an ACK that SACKs new data is a
            // duplicate even if it carries data (bidirectional transfers
            // piggyback every ACK). Without SACK, RFC 5681 §2: no data, no
            // FIN, window unchanged.
            let dup = if self.has(SACK_OK) && !seg.opts.sacks().is_empty() {
                newly_sacked > 0
            } else {
                seg.payload_len == 0 && !seg.flags.fin() && new_wnd == self.snd_wnd
            };
            if dup {
                self.frto_on_dupack();
                self.on_dupack(ctx);
            }
        }
        // A reduction whose resends were all D-SACKed (by this ACK or
        // before) is given back — after SND.UNA moved, so a timeout's
        // response counts only what is still in flight.
        self.try_undo(ctx);
        if self.has(SACK_OK) && self.snd_max.diff(self.snd_una) > 0 {
            self.detect_losses(ctx);
        }

        // Send window update (RFC 9293 §3.10.7.4: SND.WL1 < SEG.SEQ, or
        // SND.WL1 = SEG.SEQ and SND.WL2 =< SEG.ACK).
        if self.snd_wl1.diff(seg.seq) < 0
            || (self.snd_wl1 == seg.seq && self.snd_wl2.diff(ack) <= 0)
        {
            let opened = new_wnd > self.snd_wnd;
            if new_wnd > 0 {
                self.persist_shift = 0;
            }
            self.snd_wnd = new_wnd;
            self.max_snd_wnd = self.max_snd_wnd.max(new_wnd);
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = ack;
            if opened && self.has(SEND_BLOCKED) && self.send_space(ctx.cfg) > 0 {
                self.flags &= !SEND_BLOCKED;
                self.emit_event(ev::SENT);
            }
        }
        if advanced {
            // (With the window this ACK offers.)
            self.frto_step2(ack);
        }

        let fin_acked = self.fin_sent() && ack.diff(self.fin_seq) > 0;
        if fin_acked && !self.has(FIN_ACKED) {
            self.flags |= FIN_ACKED;
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.has(APP_CLOSED) {
                        // Do not wait forever for a peer that never closes.
                        self.t_wait = ctx.now + ctx.cfg.fin_wait2_timeout;
                    }
                }
                State::Closing => self.enter_time_wait(ctx),
                State::LastAck => {
                    self.state = State::Closed;
                    self.t_rtx = Instant::NEVER;
                    self.t_delack = Instant::NEVER;
                }
                _ => {}
            }
        }
        if self.state == State::TimeWait && seg.flags.fin() {
            // A retransmitted FIN: acknowledge it and restart 2·MSL.
            self.flags |= ACK_NOW;
            self.t_wait = ctx.now + 2 * ctx.cfg.msl;
        }
    }

    /// Loss detection with SACK: RACK (RFC 8985 §6.2) and, until the path
    /// is seen to reorder, RFC 6675 `IsLost` mark transmission records
    /// lost; a first loss starts recovery (RFC 6675 §5 (4)), and RACK's
    /// reordering timer is armed for records not yet overdue.
    fn detect_losses(&mut self, ctx: &mut Ctx) {
        let mss = self.mss();
        let seen = self.reordering_seen();
        let (lost, wait) =
            self.recs
                .detect_loss(self.snd_una, us_clock(ctx.now), self.reo_wnd(), mss, !seen);
        self.t_reo = if wait > 0 {
            ctx.now + Duration::from_micros(u64::from(wait))
        } else {
            Instant::NEVER
        };
        let _ = lost;
        if self.recs.any_lost() && !self.has(IN_RECOVERY) {
            self.enter_recovery(ctx);
        }
    }

    /// RACK.reo_wnd, µs (RFC 8985 §6.2 step 4, `RACK_update_reo_wnd`):
    /// until the path has shown reordering, 0 in recovery and once
    /// DupThresh segments are SACKed (a hole below them is lost at once);
    /// else min_RTT/4 times the multiplier D-SACKs grew
    /// ([`Tcb::note_dsack_received`]), at most SRTT.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
    fn reo_wnd(&self) -> u32 {
        let rare = self.rare.as_deref();
        if !self.reordering_seen()
            && (self.in_recovery() || self.recs.sacked() >= super::rack::DUP_THRESH)
        {
            return 0;
        }
        let srtt_us = self.rtt.srtt().as_micros().min(u128::from(u32::MAX)) as u32;
        let mult = 1 + rare.map_or(0, |r| u32::from(r.reo_steps));
        (self.recs.min_rtt() / 4).saturating_mul(mult).min(srtt_us)
    }

    /// RACK.reordering_seen (with SACK: without, there is no RACK).
    fn reordering_seen(&self) -> bool {
        self.has(SACK_OK) && self.rare.as_ref().is_some_and(|r| r.reordering_seen)
    }

    /// In fast recovery, or repairing what a timeout found lost (until
    /// SND.UNA passes what was sent before it): RFC 8985's "Fast or RTO
    /// recovery".
    fn in_recovery(&self) -> bool {
        self.has(IN_RECOVERY) || self.snd_una.diff(self.recover) < 0
    }

    /// The ACK being processed (cumulative `ack`) may carry a D-SACK
    /// (RFC 2883 §4: its first block lies below the cumulative ACK, or
    /// within its second block): data of ours arrived twice, so a
    /// retransmission was needless (or the network duplicated it). RFC
    /// 8985 §6.2 step 4: the first in a round trip (since SND.NXT when the
    /// last grew it) grows the reordering window by min_RTT/4, to be kept
    /// for the next 16 recoveries. A block beyond what was sent, or more
    /// than the peer's largest window below SND.UNA, is not believed; the
    /// duplicate of a tail loss probe is only counted.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
    fn note_dsack_received(&mut self, ctx: &mut Ctx, seg: &Segment, ack: SeqNum) {
        let sacks = seg.opts.sacks();
        let Some(&b) = sacks.first() else {
            return;
        };
        let dsack = b.left.diff(ack) < 0
            || sacks
                .get(1)
                .is_some_and(|c| b.left.diff(c.left) >= 0 && b.right.diff(c.right) <= 0);
        let len = b.right.diff(b.left);
        let believed = len > 0
            && len as u32 <= self.max_snd_wnd.max(self.mss())
            && b.right.diff(self.snd_max) <= 0
            && self.snd_una.diff(b.left) <= self.max_snd_wnd.min(i32::MAX as u32) as i32;
        if !dsack || !believed {
            return;
        }
        ctx.counters.tcp_dsack_recv += 1;
        // Segments reported (our FIN's sequence number is no segment's),
        // believed only while no more were reported than ever sent twice,
        // and, above SND.UNA, only of data sent twice: else the network
        // duplicated them (or the peer lies), which says nothing of ours.
        let fin = self.fin_sent() && b.right == self.fin_seq + 1;
        let mss = self.mss().max(1);
        let segs = (len as u32 - u32::from(fin)).div_ceil(mss).max(1);
        let r = self.rare.get_or_insert_default();
        r.dsack_dups = r.dsack_dups.saturating_add(segs);
        // (The records of this ACK's cumulative part are gone already.)
        if r.dsack_dups > self.retrans_total
            || (b.left.diff(ack) >= 0 && !self.recs.any_retransmitted(ack, b.left, b.right))
        {
            self.tidy_rare();
            return;
        }
        if let Some(u) = r.undo.as_mut() {
            if b.right.diff(u.marker) > 0 {
                u.left = u.left.saturating_sub(segs);
            }
        }
        // (`process_ack` gives the reduction back, if this was the last
        // D-SACK it waited for, once SND.UNA has moved with this ACK.)
        // The duplicate of a tail loss probe (RFC 8985 §7.4: the original
        // was not lost after all) says nothing of the path's reordering: a
        // probe is sent with the original most likely delivered (Linux
        // leaves these out too). Nor does one of what a timeout resent.
        let rto_high = self.rare.as_ref().and_then(|r| r.rto_high);
        let probe = b.right == self.tlp_end && len as u32 <= mss;
        if probe || rto_high.is_some_and(|h| b.right.diff(h) <= 0) {
            return;
        }
        let una = self.snd_una;
        let r = self.rare.get_or_insert_default();
        // Data we sent twice arrived twice: the original was late, not
        // lost. Where DupThresh SACKs mark a hole lost at once (step 4,
        // before reordering is seen), the retransmission always wins that
        // race and step 3 never sees an original delivered out of order;
        // as Linux (`tcp_sacktag_one`), a D-SACK shows the reordering.
        r.reordering_seen = true;
        if r.dsack_round.is_some_and(|end| una.diff(end) >= 0) {
            r.dsack_round = None;
        }
        if r.dsack_round.is_none() {
            r.dsack_round = Some(self.snd_nxt);
            r.reo_steps = r.reo_steps.saturating_add(1);
            r.reo_persist = REO_WND_PERSIST;
        }
    }

    /// A fast recovery or (`rto`) a timeout is about to cut the window:
    /// keep what it cuts ([`Undo`]). Resends still unacknowledged from
    /// before may be D-SACKed too: they count, as Linux's
    /// `tcp_init_undo`.
    fn keep_undo(&mut self, rto: Option<RtoCut>) {
        let before = self.recs.retransmitted();
        self.rare.get_or_insert_default().undo = Some(Undo {
            marker: self.snd_una,
            sent: before,
            left: before,
            cwnd: self.win.cwnd,
            ssthresh: self.win.ssthresh,
            rto,
        });
    }

    /// Spurious timeout detection (RFC 3522, Eifel; Linux's
    /// `tcp_packet_delayed` in `tcp_try_undo_loss`): an ACK that moves
    /// SND.UNA and echoes a timestamp older than the timeout's first
    /// resend acknowledges an original, so the timeout was needless — the
    /// path stalled, nothing was lost. Its reduction is given back
    /// ([`Tcb::give_back`]). (As with Linux, the ACK of a tail loss probe
    /// sent before the timeout echoes an older TSval too: a timeout after
    /// a probe that repaired a tail loss is taken for needless, and any
    /// loss left is found by RACK or the next timeout.)
    /// Called for every ACK that moves SND.UNA: the first after the
    /// timeout decides (RFC 3522), and the TSval kept for it goes either
    /// way (later ACKs echo the resends or newer; one kept would compare
    /// as newer after 2³¹ ms). Not in a recovery that repairs what the
    /// timeout resent. True if it was undone (the window this ACK leaves
    /// is the response's).
    fn undo_spurious_rto(&mut self, ctx: &mut Ctx, seg: &Segment, acked: u32) -> bool {
        let in_recovery = self.has(IN_RECOVERY);
        let Some(r) = self.rare.as_deref_mut() else {
            return false;
        };
        let Some(ts) = r.undo.as_mut().and_then(|u| u.rto.as_mut()?.ts.take()) else {
            return false;
        };
        let ecr = seg.opts.timestamp.map_or(0, |(_, e)| e);
        if in_recovery || ecr == 0 || (ecr.wrapping_sub(ts) as i32) >= 0 {
            return false;
        }
        let Some(u) = r.undo.take() else {
            return false;
        };
        ctx.counters.tcp_spurious_rtos += 1;
        self.give_back(u, acked);
        true
    }

    /// Where F-RTO stands, if it runs ([`Frto`]).
    fn frto(&self) -> Option<Frto> {
        self.rare.as_deref()?.undo?.rto?.frto
    }

    fn set_frto(&mut self, f: Option<Frto>) {
        if let Some(c) = self
            .rare
            .as_deref_mut()
            .and_then(|r| r.undo.as_mut()?.rto.as_mut())
        {
            c.frto = f;
        }
    }

    fn frto_off(&mut self) {
        self.set_frto(None);
    }

    /// F-RTO step 2 (RFC 5682 §2), at the first ACK after a timeout that
    /// moved SND.UNA (to `ack`): (a) if it does not cover all that was
    /// resent (the window after a timeout is one segment, but the resend
    /// may go in two pieces when SACK blocks shorten our segments: the
    /// first piece's ACK must not pass, nor the second's decide), or
    /// covers all that was sent before the timeout (nothing is left to
    /// tell apart), or SACKs show a hole above it (RFC 5682 §3), the
    /// resend goes on; (b) otherwise up to two segments of new data go
    /// instead of resends, if there is any and the window takes it
    /// (else as (a)). Called after the ACK's window is taken.
    //= https://www.rfc-editor.org/rfc/rfc5682#section-2
    fn frto_step2(&mut self, ack: SeqNum) {
        if self.frto() != Some(Frto::Resent) {
            return;
        }
        let seq_end = self.seq_end();
        let mss = self.cur_mss();
        let go_on = ack.diff(self.snd_nxt) < 0
            || ack.diff(self.recover) >= 0
            || self.recs.sacked() > 0
            || self
                .new_data(self.snd_max, mss, 2 * mss as u32, seq_end, true)
                .is_none();
        let resent = self.rare.as_deref().and_then(|r| r.undo).map(|u| u.sent);
        match resent {
            Some(resent) if !go_on => self.set_frto(Some(Frto::NewSent {
                from: self.snd_max,
                resent,
            })),
            _ => self.frto_off(),
        }
    }

    /// F-RTO step 3 b (RFC 5682 §2), at an ACK that moved SND.UNA after
    /// step 2 sent new data: it acknowledges data that was not sent again
    /// (only the first segment was, and step 2's ACK covered all of it), so the
    /// timeout was needless — its reduction is given back (RFC 4015,
    /// [`Tcb::give_back`]). True if so.
    //= https://www.rfc-editor.org/rfc/rfc5682#section-2
    fn frto_step3(&mut self, ctx: &mut Ctx, acked: u32) -> bool {
        let Some(Frto::NewSent { resent, .. }) = self.frto() else {
            return false;
        };
        let Some(u) = self.rare.as_deref().and_then(|r| r.undo) else {
            return false;
        };
        if u.sent != resent {
            // Something was sent again since (the go-back resend, when no
            // new data could go after all): this ACK may be a resend's.
            // The timeout stands. (One that comes before the new data
            // left — the ACKs a stall held arrive together — acknowledges
            // originals all the same.)
            self.frto_off();
            return false;
        }
        if self.recs.sacked() > 0 {
            // It SACKs data with a hole below (RFC 5682 §3 step 3 a: the
            // new data arrived, originals did not).
            self.frto_real_loss();
            return false;
        }
        if let Some(r) = self.rare.as_deref_mut() {
            r.undo = None;
        }
        ctx.counters.tcp_spurious_rtos += 1;
        self.give_back(u, acked);
        true
    }

    /// F-RTO at a duplicate ACK (RFC 5682 §2 steps 2 a and 3 a): the
    /// loss was real; the resend goes on ([`Tcb::frto_real_loss`] after
    /// step 2's new data).
    //= https://www.rfc-editor.org/rfc/rfc5682#section-2
    fn frto_on_dupack(&mut self) {
        match self.frto() {
            Some(Frto::NewSent { .. }) => self.frto_real_loss(),
            Some(Frto::Resent) => self.frto_off(),
            None => {}
        }
    }

    /// F-RTO step 3 a: the loss was real. The window is at most three
    /// segments; without SACK the go-back resend goes on from SND.NXT
    /// (where it stopped at step 2); with SACK, SACK recovery repairs what
    /// RACK marks lost (the originals sent before the new data the peer
    /// SACKed), which it does only with SND.NXT at SND.MAX.
    fn frto_real_loss(&mut self) {
        self.frto_off();
        self.win.cwnd = self.win.cwnd.min(3 * self.mss());
        // (A duplicate without SACK blocks leaves RACK nothing to mark:
        // the go-back goes on.)
        if self.has(SACK_OK) && self.recs.sacked() > 0 {
            self.snd_nxt = self.snd_max;
        }
    }

    /// A needless reduction is given back: a recovery's window and
    /// threshold are what they were before it, or more (RFC 3708, as
    /// Linux). A timeout's, by the Eifel response (RFC 4015 §4): the
    /// threshold is back to `pipe_prev` (step 6), and the window is what
    /// is in flight plus min(`acked`, IW) (step 7), from which slow start
    /// regains the rest in a few round trips — not the old window at
    /// once, which, with the ACKs a stall held arriving together, would
    /// go out in one burst (Linux restores it and paces it out; Ixora
    /// does not pace). Sending goes on with new data (SND.NXT back to
    /// SND.MAX, step 3) instead of resending what arrived — a segment
    /// lost all the same is found by RACK or the next timeout — and a
    /// loss found from here on is a new congestion event (Linux: back to
    /// `TCP_CA_Open`).
    fn give_back(&mut self, u: Undo, acked: u32) {
        if let Some(rto) = u.rto {
            let flight = self.snd_max.since(self.snd_una) as u32;
            let iw = super::cc::Window::initial(self.mss()).cwnd;
            let cwnd = flight.saturating_add(acked.min(iw)).max(self.mss());
            self.win.cwnd = self.win.cwnd.max(cwnd);
            self.win.ssthresh = self.win.ssthresh.max(rto.pipe);
            if self.snd_nxt.diff(self.snd_max) < 0 {
                self.snd_nxt = self.snd_max;
            }
            if self.in_recovery() {
                self.recover = SeqNum(self.snd_una.0.wrapping_sub(1));
                self.recovery_ended();
            }
        } else {
            self.win.cwnd = self.win.cwnd.max(u.cwnd);
            self.win.ssthresh = self.win.ssthresh.max(u.ssthresh);
        }
        self.tidy_rare();
    }

    /// Give back the last window reduction if every segment its episode
    /// sent again has come back in a D-SACK ([`Undo`]): the window and
    /// threshold are what they were before it, or more. Out of recovery
    /// only (at its end the last D-SACKs may still be on their way).
    fn try_undo(&mut self, ctx: &mut Ctx) {
        if self.has(IN_RECOVERY) {
            return;
        }
        let Some(r) = self.rare.as_deref_mut() else {
            return;
        };
        let Some(u) = r.undo.filter(|u| u.sent > 0 && u.left == 0) else {
            return;
        };
        r.undo = None;
        ctx.counters.tcp_dsack_undo += 1;
        // (For a timeout's, no bytes newly acknowledged: the initial
        // window's worth as the allowance.)
        self.give_back(u, u32::MAX);
    }

    /// SND.UNA moved on: RACK.dsack_round ends once SND.UNA reaches it
    /// (RFC 8985 §6.2 step 4), and what is kept of a timeout or a window
    /// reduction goes once SND.UNA is twice the peer's largest window past
    /// it (no D-SACK so far back is believed; and sequence numbers compare
    /// only within 2³¹).
    fn expire_rare(&mut self) {
        let una = self.snd_una;
        let far = |s: SeqNum| i64::from(una.diff(s)) > 2 * i64::from(self.max_snd_wnd);
        let Some(r) = self.rare.as_deref_mut() else {
            return;
        };
        if r.dsack_round.is_some_and(|end| una.diff(end) >= 0) {
            r.dsack_round = None;
        }
        if r.rto_high.is_some_and(far) {
            r.rto_high = None;
        }
        if r.undo.is_some_and(|u| far(u.marker)) {
            r.undo = None;
        }
        self.tidy_rare();
    }

    /// A fast or RTO recovery ended: RFC 8985 §6.2 step 4, a grown
    /// reordering window lasts [`REO_WND_PERSIST`] recoveries without a
    /// D-SACK.
    fn recovery_ended(&mut self) {
        let Some(r) = self.rare.as_deref_mut() else {
            return;
        };
        r.reo_persist = r.reo_persist.saturating_sub(1);
        if r.reo_persist == 0 {
            r.reo_steps = 0;
        }
        self.tidy_rare();
    }

    /// HyStart's ACK-train exit from slow start (Ha and Rhee, "Taming the
    /// elephants", 2008; Linux CUBIC's `hystart_update`): a round of slow
    /// start lasts from its first ACK until what was sent when it began
    /// is acknowledged. While the ACKs of a round come in a train (each
    /// within 2 ms of the last) that has lasted more than half the least
    /// RTT, the window already fills half the path, and the doubling of
    /// the next round would overflow a queue shorter than the path:
    /// slow start ends there (ssthresh = cwnd) and the controller's
    /// congestion avoidance goes on. Not below 16 segments (Linux's
    /// `hystart_low_window`). Without it, a bulk sender on a 1 Gbit/s,
    /// 1 ms path with a 256 KiB queue lost a third of its segments each
    /// time slow start overshot, unless its send buffer was held under
    /// the queue.
    fn hystart(&mut self, ctx: &Ctx, ack: SeqNum) {
        if !self.win.in_slow_start() {
            return;
        }
        let now = us_clock(ctx.now);
        if ack.diff(self.hs_end) > 0 {
            self.hs_end = self.snd_max;
            self.hs_round_us = now;
            self.hs_ack_us = now;
            return;
        }
        let min = self.recs.min_rtt();
        if self.win.cwnd < 16 * self.win.mss || min == 0 {
            return;
        }
        if now.wrapping_sub(self.hs_ack_us) <= HYSTART_ACK_DELTA_US {
            self.hs_ack_us = now;
            if now.wrapping_sub(self.hs_round_us) > min / 2 {
                self.win.ssthresh = self.win.cwnd;
            }
        }
    }

    fn on_new_ack(&mut self, ctx: &mut Ctx, seg: &Segment, ack: SeqNum, rtt_sample: Option<u32>) {
        let acked = ack.since(self.snd_una) as u32;
        let fin_part =
            u32::from(self.fin_sent() && ack.diff(self.fin_seq) > 0 && !self.has(FIN_ACKED));
        let data_acked = acked.saturating_sub(fin_part);
        self.sendq.ack(data_acked as usize);
        if data_acked > 0 {
            self.sendq.note_acked(data_acked);
            self.emit_event(ev::SENT);
        }
        // Urgent data acknowledged: urgent mode ends (Linux's `tcp_ack`),
        // and a pointer left standing would point again 2³¹ bytes on.
        if let Some(u) = self.rare.as_deref_mut() {
            if u.snd_up.is_some_and(|up| up.diff(ack) <= 0) {
                u.snd_up = None;
                self.tidy_rare();
            }
        }
        // RTT (RFC 6298 §3 with Karn's rule: the transmission records give
        // a sample only from a segment never retransmitted), else RFC 7323
        // §4 RTTM.
        let mut sampled = false;
        if let Some(us) = rtt_sample {
            let r = Duration::from_micros(u64::from(us));
            self.rtt
                .sample(r, ctx.tick, ctx.cfg.rto_min, ctx.cfg.rto_max);
            sampled = true;
        }
        if !sampled && self.has(TS_OK) {
            if let Some((_, ecr)) = seg.opts.timestamp {
                if ecr != 0 {
                    let now_ts = ts_clock(ctx.now).wrapping_add(self.ts_offset);
                    let ms = now_ts.wrapping_sub(ecr);
                    if (ms as i32) >= 0 && ms < 60_000 {
                        self.rtt.sample(
                            Duration::from_millis(u64::from(ms)),
                            ctx.tick.max(Duration::from_millis(1)),
                            ctx.cfg.rto_min,
                            ctx.cfg.rto_max,
                        );
                    }
                }
            }
        }
        // The RTO backoff stays until a valid RTT sample clears it (Karn's
        // algorithm, RFC 6298 §5 note); `sample` resets it.
        self.retries = 0;
        let flight_before = self.snd_max.since(self.snd_una) as u32;
        if ack.0.wrapping_sub(self.iss.0) < self.snd_una.0.wrapping_sub(self.iss.0) {
            self.una_wraps = self.una_wraps.wrapping_add(1);
        }
        let recovered = self.in_recovery() && ack.diff(self.recover) >= 0;
        self.snd_una = ack;
        if recovered {
            self.recovery_ended();
        }
        let undone = self.undo_spurious_rto(ctx, seg, acked) || self.frto_step3(ctx, acked);
        if self.rare.is_some() {
            self.expire_rare();
        }
        if self.snd_nxt.diff(ack) < 0 {
            self.snd_nxt = ack;
        }

        if self.has(IN_RECOVERY) {
            if ack.diff(self.recover) >= 0 {
                // Full acknowledgment: recovery ends (RFC 6582 §3.2 step 3,
                // RFC 6675 §5).
                self.flags &= !(IN_RECOVERY | RETX_FIRST);
                let flight = self.snd_max.since(self.snd_una) as u32;
                self.cc.on_recovery_end(ctx.now, &mut self.win, flight);
                self.dupacks = 0;
                self.try_undo(ctx);
            } else if !self.has(SACK_OK) {
                // Partial acknowledgment (RFC 6582 §3.2 step 5):
                // retransmit the next unacknowledged segment and deflate.
                self.flags |= RETX_FIRST;
                let mss = self.mss();
                self.win.cwnd = self.win.cwnd.saturating_sub(data_acked);
                if data_acked >= mss {
                    self.win.cwnd += mss;
                }
                self.win.cwnd = self.win.cwnd.max(mss);
            }
        } else {
            self.dupacks = 0;
            // (The Eifel response set this ACK's window already.)
            if !undone {
                self.hystart(ctx, ack);
                let srtt = self.rtt.srtt();
                self.cc
                    .on_ack(ctx.now, &mut self.win, data_acked, flight_before, srtt);
            }
            // An application- or receiver-limited flow would inflate cwnd
            // without bound; more than twice the peer's largest window can
            // never be used (RFC 7661 spirit).
            let cap = (2 * self.max_snd_wnd).max(4 * self.mss());
            self.win.cwnd = self.win.cwnd.min(cap);
            // `recover` trails SND.UNA out of recovery: left 2³¹ behind,
            // it would compare as ahead, a recovery in progress (and RFC
            // 6582's guard would take the next loss for an old one).
            if self.snd_una.diff(self.recover) > 0 {
                self.recover = SeqNum(self.snd_una.0.wrapping_sub(1));
            }
        }

        if self.has(TLP_OUT) && ack.diff(self.tlp_end) >= 0 {
            self.flags &= !TLP_OUT;
        }
        // RFC 6298 (5.2)/(5.3): stop the timer when everything is
        // acknowledged, else restart it (RFC 8985 §7.2: as a loss probe
        // timer when a probe is allowed).
        if self.snd_una == self.snd_max {
            self.t_rtx = Instant::NEVER;
            self.t_reo = Instant::NEVER;
            self.flags &= !(PERSIST | TLP_TIMER);
        } else {
            self.arm_rtx(ctx);
        }
    }

    /// May a tail loss probe be scheduled (RFC 8985 §7.2)?
    fn tlp_allowed(&self) -> bool {
        self.has(SACK_OK)
            && matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait1 | State::LastAck
            )
            && !self.has(IN_RECOVERY | TLP_OUT)
            && self.retries == 0
            && self.rtt.has_sample()
            // (F-RTO's step 3 reads the next ACK: a probe's would mislead.)
            && self.frto().is_none()
    }

    /// Start the retransmission timer — as a probe timeout when TLP is
    /// allowed, else the RTO (RFC 6298 (5.1), RFC 8985 §7.2).
    fn arm_rtx(&mut self, ctx: &mut Ctx) {
        self.flags &= !(PERSIST | TLP_TIMER);
        let rto = self.rto(ctx);
        if self.tlp_allowed() {
            // PTO = 2·SRTT, plus the peer's worst-case delayed ACK when a
            // single segment is in flight; never beyond the RTO.
            let mut pto = self.rtt.srtt() * 2;
            if self.snd_max.since(self.snd_una) <= self.mss() as usize {
                pto += Duration::from_millis(200);
            }
            // Floor of 10 ms (as Linux): at microsecond RTTs, scheduling
            // jitter alone exceeds 2·SRTT and would trigger spurious probes.
            let pto = pto.max(TLP_MIN_PTO).min(rto);
            self.flags |= TLP_TIMER;
            self.t_rtx = ctx.now + pto;
        } else {
            self.t_rtx = ctx.now + rto;
        }
    }

    /// The probe timeout fired: send one probe, then wait for the RTO
    /// (RFC 8985 §7.3).
    fn on_pto(&mut self, ctx: &mut Ctx) {
        self.flags &= !TLP_TIMER;
        if self.snd_una == self.snd_max || !self.tlp_allowed() {
            self.t_rtx = ctx.now + self.rto(ctx);
            return;
        }
        self.flags |= TLP_PROBE | TLP_OUT;
        ctx.counters.tcp_loss_probes += 1;
        self.t_rtx = ctx.now + self.rto(ctx);
    }

    fn on_dupack(&mut self, ctx: &mut Ctx) {
        self.dupacks = self.dupacks.saturating_add(1);
        let mss = self.mss();
        if !self.has(IN_RECOVERY) {
            // (With SACK on a path seen to reorder, recovery waits for RACK
            // to find a segment lost: RFC 8985 §6.2 step 4.)
            if u32::from(self.dupacks) >= super::rack::DUP_THRESH && !self.reordering_seen() {
                self.enter_recovery(ctx);
            }
        } else if !self.has(SACK_OK) {
            // RFC 5681 (4.4): inflate by one segment per further dupack.
            self.win.cwnd = self.win.cwnd.saturating_add(mss);
        }
    }

    /// Fast retransmit and fast recovery (RFC 6675 §5, RFC 6582 §3.2).
    fn enter_recovery(&mut self, ctx: &mut Ctx) {
        // (A loss found: what F-RTO would tell apart is known.)
        self.frto_off();
        // RFC 6582 §3.2 step 2: only if the ACK covers more than `recover`
        // (one window reduction per loss episode) — or, with SACK, when a
        // segment sent after the last reduction is known lost (a new
        // episode).
        let una = self.snd_una;
        let sack_new_episode = self.has(SACK_OK)
            && self
                .recs
                .first_lost(una)
                .is_some_and(|l| l.start.diff(self.recover) >= 0);
        if una.diff(self.recover) <= 0 && !sack_new_episode {
            if self.has(SACK_OK) && self.snd_nxt == self.snd_max && self.recs.any_lost() {
                // Retransmissions lost after a timeout (found by RACK): repair
                // them by SACK recovery, without reducing the window again.
                self.flags |= IN_RECOVERY;
                self.flags &= !(TLP_TIMER | TLP_PROBE);
                self.recover = self.snd_max;
            }
            return;
        }
        let mss = self.mss();
        self.flags |= IN_RECOVERY | RETX_FIRST;
        self.flags &= !(TLP_TIMER | TLP_PROBE);
        // RFC 5681 §3.2 (2): FlightSize excludes what limited transmit
        // (RFC 3042) sent beyond cwnd.
        let flight = (self.snd_max.since(self.snd_una) as u32).min(self.win.cwnd);
        self.recover = self.snd_max;
        if self.has(SACK_OK) {
            self.keep_undo(None);
        } else if let Some(r) = self.rare.as_deref_mut() {
            // (Without SACK no D-SACK can give a reduction back: what an
            // earlier timeout kept is dead.)
            r.undo = None;
        }
        self.cc.on_congestion_event(ctx.now, &mut self.win, flight);
        ctx.counters.tcp_fast_retrans += 1;
        if self.has(SACK_OK) {
            ctx.counters.tcp_sack_recoveries += 1;
        } else {
            // RFC 6582 step 3 / RFC 5681 (4.3): cwnd = ssthresh + 3*SMSS.
            self.win.cwnd = self.win.ssthresh + 3 * mss;
        }
        if self.t_rtx.is_never() || self.has(TLP_TIMER) {
            self.flags &= !TLP_TIMER;
            self.t_rtx = ctx.now + self.rto(ctx);
        }
    }

    /// The seventh and eighth steps: segment text and FIN
    /// (RFC 9293 §3.10.7.4).
    fn process_data(&mut self, ctx: &mut Ctx, seg: &Segment, frame: R) -> Option<RstReply> {
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {}
            _ => {
                // The peer already sent FIN: ignore text.
                if seg.payload_len > 0 {
                    ctx.counters.drop(DropReason::TcpIgnored);
                }
                return None;
            }
        }
        let mut seq = seg.seq;
        let mut off = seg.payload_off;
        let mut len = seg.payload_len;
        let mut fin = seg.flags.fin();
        // Trim what we already have (reported as a duplicate).
        let skip = self.rcv_nxt.since(seq);
        if skip > 0 {
            self.note_duplicate(ctx, seq, seq + skip.min(len));
            if skip > len {
                // Old data and an old FIN (impossible here: FIN_RCVD states
                // returned above) — nothing new.
                fin = false;
                len = 0;
            } else {
                off += skip;
                len -= skip;
            }
            seq = self.rcv_nxt;
        }
        // Trim what lies beyond the window (a FIN beyond it is dropped too).
        let right = self.rcv_adv.max(self.rcv_nxt);
        let room = right.since(seq);
        let beyond_window = len > room;
        if beyond_window {
            len = room;
            fin = false;
        }
        if len == 0 && !fin {
            if seg.payload_len > 0 {
                ctx.counters.drop(if beyond_window {
                    DropReason::TcpOutOfWindow
                } else {
                    DropReason::TcpDuplicate
                });
                self.flags |= ACK_NOW;
            }
            return None;
        }
        if len > 0 && self.has(APP_CLOSED) {
            // New data nobody will read: reset (RFC 2525 §2.17, as Linux).
            // Checked after trimming: a retransmission of old data with a
            // new FIN is an orderly close.
            ctx.counters.drop(DropReason::TcpDataAfterClose);
            return self.abort(ctx);
        }
        // What holding this frame costs (at least a packet buffer), so tiny
        // segments cannot pin more buffers than a window's worth.
        // The budget is the buffer's, or the window already offered when
        // that is more (a buffer made smaller takes back no window).
        let cost = frame.as_ref().len().max(ctx.cfg.frame_truesize as usize);
        let offered = self.rcv_adv.since(self.consumed_seq());
        let budget = 2 * offered.max(self.rcv_buf as usize);
        if seq == self.rcv_nxt {
            if len > 0 {
                if self.rcvq.ready_segments() >= self.segment_limit(ctx.cfg, false)
                    || self.rcvq.ready_cost() + cost > budget
                {
                    ctx.counters.drop(DropReason::TcpRxQueueFull);
                    self.flags |= ACK_NOW;
                    return None;
                }
                let had_ooo = self.rcvq.ooo_segments() > 0;
                self.rcvq.push_ready(frame, off, off + len, cost);
                let to = self.rcvq.drain_ooo(self.rcv_nxt + len);
                self.advance_rcv_nxt(to);
                self.catch_urgent_byte();
                self.rcv_space_adjust(ctx);
                if had_ooo {
                    // RFC 5681 §4.2: ACK at once when a gap is filled.
                    self.flags |= ACK_NOW;
                } else {
                    self.delay_ack(ctx, len);
                }
                self.emit_event(ev::RECV);
                if self.has(OOO_FIN) && self.fin_in == self.rcv_nxt {
                    fin = true;
                }
            }
            if fin {
                self.process_fin(ctx);
            }
        } else {
            if len > 0 {
                let budget = budget.min(self.rcvq.ooo_cost() + ctx.ooo_room);
                let limits = (self.segment_limit(ctx.cfg, true), budget);
                match self
                    .rcvq
                    .insert_ooo(seq, frame, (off, off + len), cost, limits)
                {
                    OooInsert::Queued => ctx.counters.tcp_ooo_segments += 1,
                    OooInsert::Duplicate => {
                        self.note_duplicate(ctx, seq, seq + len);
                        ctx.counters.drop(DropReason::TcpDuplicate);
                    }
                    OooInsert::Full => ctx.counters.drop(DropReason::TcpOooQueueFull),
                }
            }
            if fin {
                self.flags |= OOO_FIN;
                self.fin_in = seq + len;
            }
            // RFC 5681 §4.2: an out-of-order segment is acknowledged at once
            // (a duplicate ACK, with SACK blocks).
            self.flags |= ACK_NOW;
        }
        None
    }

    /// RFC 9293 §3.10.7.4 sixth step: "If the URG bit is set, RCV.UP <-
    /// max(RCV.UP,SEG.UP), and signal the user that the remote side has
    /// urgent data if the urgent pointer (RCV.UP) is in advance of the data
    /// consumed" (MUST-31: tell the application asynchronously; MUST-30:
    /// urgent data of any length). The pointer names the octet after the
    /// urgent data (§3.8.5, RFC 6093); the octet before it is the urgent
    /// byte of BSD and Linux (`tcp_check_urg`), whose rules follow: a
    /// pointer into data already received is not replayed, one not past
    /// the current urgent byte changes nothing.
    fn urgent_pointer(&mut self, seg: &Segment) {
        let at = seg.seq + usize::from(seg.urgent.max(1)) - 1;
        if at.diff(self.rcv_nxt) < 0 {
            return;
        }
        // (Only while its byte has not come: once it has, a new pointer is
        // past it, and the old one compared against would point again 2³¹
        // bytes on.)
        if self
            .rcv_urgent()
            .is_some_and(|u| u.byte.is_none() && at.diff(u.seq) <= 0)
        {
            return;
        }
        // The data bytes before RCV.NXT (no FIN has come: the states above).
        let before = (u64::from(self.rcv_wraps) << 32
            | u64::from(self.rcv_nxt.0.wrapping_sub(self.irs.0)))
        .saturating_sub(1);
        self.rare.get_or_insert_default().rcv = Some(RcvUrgent {
            seq: at,
            mark: before + at.since(self.rcv_nxt) as u64,
            byte: None,
        });
        self.emit_event(ev::URGENT);
        self.catch_urgent_byte();
    }

    fn rcv_urgent(&self) -> Option<RcvUrgent> {
        self.rare.as_ref().and_then(|u| u.rcv)
    }

    /// The urgent byte, if it has just arrived in order (it is then among
    /// the bytes not yet taken: it lay at or past RCV.NXT when its pointer
    /// came, and nothing past RCV.NXT is taken).
    fn catch_urgent_byte(&mut self) {
        let Some(u) = self.rcv_urgent().filter(|u| u.byte.is_none()) else {
            return;
        };
        if u.seq.diff(self.rcv_nxt) >= 0 {
            return;
        }
        let Some(mut k) = self.rcvq.ready_len().checked_sub(self.rcv_nxt.since(u.seq)) else {
            return;
        };
        let mut byte = None;
        for c in self.rcvq.chunks() {
            if k < c.len() {
                byte = Some(c[k]);
                break;
            }
            k -= c.len();
        }
        if let (Some(_), Some(urg)) = (byte, self.rare.as_mut()) {
            urg.rcv = Some(RcvUrgent { byte, ..u });
            self.emit_event(ev::URGENT);
        }
    }

    /// The peer's latest urgent data: its offset in the stream and the
    /// byte once it has arrived.
    pub fn urgent(&self) -> Option<(u64, Option<u8>)> {
        self.rcv_urgent().map(|u| (u.mark, u.byte))
    }

    /// Mark what the application has queued so far, less its last `back`
    /// bytes, as ending urgent data (`send(MSG_OOB)`): the segments before
    /// its end carry URG and point past it until it is acknowledged (RFC
    /// 9293 §3.8.5: the pointer names the octet after the urgent data),
    /// and neither Nagle nor a cork holds them (as Linux's
    /// `tcp_nagle_test` in urgent mode). An end already acknowledged
    /// changes nothing.
    pub fn mark_urgent(&mut self, back: usize) {
        if back > self.sendq.len() {
            return;
        }
        let end = self.data_end() - back;
        if end.diff(self.snd_una) > 0 {
            self.rare.get_or_insert_default().snd_up = Some(end);
        }
    }

    /// The end of urgent data sent and not yet acknowledged (urgent mode).
    fn snd_up(&self) -> Option<SeqNum> {
        let up = self.rare.as_ref()?.snd_up?;
        (up.diff(self.snd_una) > 0).then_some(up)
    }

    /// In urgent mode: urgent data not yet acknowledged.
    fn urgent_mode(&self) -> bool {
        self.snd_up().is_some()
    }

    /// URG and the urgent pointer for a segment at `repr.seq` before the
    /// end of the urgent data. An end more than 65,535 octets on is
    /// pointed at as 65,535 only by a segment within 65,535 of SND.MAX (as
    /// Linux's `tcp_transmit_skb`): a retransmission far behind would
    /// name a byte the peer may already hold out of order.
    fn put_urgent(&self, repr: &mut TcpRepr) {
        let Some(up) = self.snd_up() else { return };
        let ahead = up.diff(repr.seq);
        if ahead <= 0 {
            return;
        }
        if ahead < 0x10000 {
            repr.flags |= Flags::URG;
            repr.urgent = ahead as u16;
        } else if (repr.seq + 0xFFFF).diff(self.snd_max) > 0 {
            repr.flags |= Flags::URG;
            repr.urgent = 0xFFFF;
        }
    }

    /// RFC 1122 §4.2.3.2 (RFC 9293 §3.8.6.3): ACK at least every second
    /// full-sized segment, and within the delayed-ACK timeout. Counted in
    /// bytes, as Linux does: more than one full segment's worth unacknowledged
    /// gets an ACK at once. Small segments (requests of a pipelining client)
    /// wait for the reply that carries their ACK, where counting segments
    /// sent a pure ACK after every second request of a pipeline.
    fn delay_ack(&mut self, ctx: &mut Ctx, len: usize) {
        let len = len.min(usize::from(self.local_mss)) as u16;
        self.rcv_mss = self.rcv_mss.max(len);
        let unacked = self.rcv_nxt.diff(self.last_ack_sent);
        if unacked > i32::from(self.rcv_mss) || ctx.cfg.delayed_ack.is_zero() {
            self.flags |= ACK_NOW;
        } else if self.t_delack.is_never() {
            self.t_delack = ctx.now + ctx.cfg.delayed_ack;
        }
    }

    /// The peer's FIN, in order (RFC 9293 §3.10.7.4 eighth step).
    fn process_fin(&mut self, ctx: &mut Ctx) {
        self.advance_rcv_nxt(self.rcv_nxt + 1);
        self.flags |= FIN_RCVD | ACK_NOW;
        self.flags &= !OOO_FIN;
        self.emit_event(ev::PEER_CLOSED);
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.has(FIN_ACKED) {
                    self.enter_time_wait(ctx);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(ctx),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, ctx: &mut Ctx) {
        self.state = State::TimeWait;
        self.t_wait = ctx.now + 2 * ctx.cfg.msl;
        self.t_rtx = Instant::NEVER;
        self.t_ka = Instant::NEVER;
        self.flags &= !(PERSIST | PROBE_PENDING);
    }

    /// May a new outgoing connection take this TIME-WAIT tuple (as Linux's
    /// `tcp_tw_reuse`)? Only with timestamps, so the peer (RFC 6191) and
    /// PAWS (RFC 7323 §5) tell the incarnations apart, and only a second
    /// after TIME-WAIT began, so the new timestamps are strictly newer —
    /// unless the new connection's socket was `bound` to the port: then at
    /// once, as Linux's `tcp_twsk_unique` allows a bound socket (an FTP
    /// server's active-mode data connection from port 20 to a client port
    /// the client used a moment before).
    pub fn time_wait_reusable_by_connect(&self, now: Instant, msl: Duration, bound: bool) -> bool {
        self.state == State::TimeWait
            && self.has(TS_OK)
            && (bound || now + 2 * msl >= self.t_wait + Duration::from_secs(1))
    }

    /// The next sequence number this connection would have sent: a new
    /// connection that takes over its TIME-WAIT tuple starts beyond it.
    pub fn snd_nxt(&self) -> SeqNum {
        self.snd_nxt
    }

    /// RFC 6191: may a new SYN reuse this TIME-WAIT connection's tuple?
    pub fn time_wait_reusable(&self, seg: &Segment) -> bool {
        if self.state != State::TimeWait {
            return false;
        }
        match (self.has(TS_OK), seg.opts.timestamp) {
            // RFC 6191 §2 (1) a newer timestamp, (2) an equal one with a
            // higher sequence number.
            (true, Some((tsval, _))) => {
                let d = tsval.wrapping_sub(self.ts_recent) as i32;
                d > 0 || (d == 0 && seg.seq.diff(self.rcv_nxt) > 0)
            }
            // RFC 6191 §2 (3): the old connection used timestamps, the SYN
            // has none: honour it.
            (true, None) => true,
            // RFC 9293 §3.10.7 / RFC 1122 §4.2.2.13: no timestamps, a
            // sequence number beyond the old connection's.
            (false, _) => seg.seq.diff(self.rcv_nxt) > 0,
        }
    }

    // ----- timers --------------------------------------------------------

    /// Earliest pending deadline.
    pub fn next_deadline(&self) -> Instant {
        let defer = if self.defer_until == DEFER_OVER {
            Instant::NEVER
        } else {
            self.defer_until
        };
        self.t_rtx
            .min(self.t_reo)
            .min(self.t_delack)
            .min(self.t_ka)
            .min(self.t_wait)
            .min(defer)
    }

    /// Whether this passive connection, its handshake complete, is still
    /// held back from its listener's accept queue by the listener's
    /// `TCP_DEFER_ACCEPT` of `defer` (zero: none). As Linux's (tcp(7);
    /// `tcp_check_req` drops the bare ACK that would complete it): it is
    /// announced when data or the peer's FIN arrives, or once `defer` has
    /// passed since the handshake (Linux then accepts it at its last
    /// SYN-ACK's ACK); reset or timed out meanwhile, it is never
    /// announced (its events are dropped here, and it is freed as a
    /// half-open connection is).
    pub fn defers_knock(&mut self, defer: Duration, now: Instant) -> bool {
        if self.defer_until == DEFER_OVER {
            return false;
        }
        if self.state == State::Closed && self.defer_until != DEFER_NOT {
            self.ev = 0;
            return true;
        }
        if defer.is_zero() || self.readable() > 0 || self.has(FIN_RCVD) {
            self.defer_until = DEFER_OVER;
            return false;
        }
        if self.defer_until == DEFER_NOT {
            self.defer_until = now + defer;
        }
        true
    }

    /// Run the timers that are due.
    pub fn on_timers(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        if self.t_wait <= now {
            self.t_wait = Instant::NEVER;
            if matches!(self.state, State::TimeWait | State::FinWait2) {
                self.state = State::Closed;
                self.t_rtx = Instant::NEVER;
                self.t_delack = Instant::NEVER;
                self.t_ka = Instant::NEVER;
                return;
            }
        }
        if self.t_delack <= now {
            self.t_delack = Instant::NEVER;
            if self.state.is_synchronized() {
                ctx.counters.tcp_delayed_acks += 1;
                self.flags |= ACK_NOW;
            }
        }
        if self.t_reo <= now {
            self.t_reo = Instant::NEVER;
            // RFC 8985 §6.3: the reordering window has passed.
            if self.state.is_synchronized() && self.snd_una != self.snd_max {
                self.detect_losses(ctx);
            }
        }
        if self.t_rtx <= now {
            self.t_rtx = Instant::NEVER;
            if self.has(PERSIST) {
                self.on_persist(ctx);
            } else if self.has(TLP_TIMER) {
                self.on_pto(ctx);
            } else {
                self.on_rto(ctx);
            }
        }
        if self.t_ka <= now {
            self.t_ka = Instant::NEVER;
            self.on_keepalive(ctx);
        }
        if self.defer_until != DEFER_OVER && self.defer_until <= now {
            self.defer_until = DEFER_OVER;
        }
    }

    /// The retransmission timer expired (RFC 6298 §5.4–5.7, RFC 5681 §3.1).
    fn on_rto(&mut self, ctx: &mut Ctx) {
        match self.state {
            State::SynSent | State::SynReceived => {
                if self.retries >= ctx.cfg.syn_retries {
                    ctx.counters.tcp_attempt_fails += 1;
                    self.die(DeadReason::TimedOut);
                    return;
                }
                self.retries += 1;
                self.rtt.back_off();
                self.flags |= SYN_PENDING | SYN_RETRANSMITTED;
                self.flags &= !TIMING;
                ctx.counters.tcp_timeouts += 1;
                self.t_rtx = ctx.now + self.rto(ctx);
            }
            State::Closed | State::Listen | State::TimeWait => {}
            _ => {
                if self.snd_una == self.snd_max {
                    return;
                }
                if self.snd_wnd == 0 {
                    // The peer shrank its window to zero under our data.
                    // RFC 1122 §4.2.2.16: probe it the standard way, and do
                    // not time out while it answers; resend from SND.UNA
                    // once it opens.
                    self.snd_nxt = self.snd_una;
                    self.flags &= !(IN_RECOVERY | RETX_FIRST | TLP_PROBE | TLP_OUT);
                    self.frto_off();
                    self.rtt.back_off();
                    self.send_window_probe(ctx);
                    if self.state != State::Closed {
                        self.t_rtx = ctx.now + self.rto(ctx);
                    }
                    return;
                }
                if self.retries >= ctx.cfg.data_retries {
                    self.die(DeadReason::TimedOut);
                    return;
                }
                // The first timeout of an episode, outside any recovery,
                // keeps what it cuts, to give it back if it proves
                // needless; one within a recovery leaves that recovery's
                // record (a fast recovery's, or the first timeout's with
                // the TSval of its first resend: as Linux keeps
                // `retrans_stamp` through the Loss state, an ACK echoing a
                // resend of this episode shows nothing needless;
                // `tcp_enter_loss`).
                if self.retries == 0 && !self.in_recovery() {
                    let flight = self.snd_max.since(self.snd_una) as u32;
                    // F-RTO (RFC 5682 §2 step 1) without timestamps, and
                    // only with no sign of a loss yet: a SACKed segment
                    // or a duplicate ACK says a segment before it is
                    // missing, which a stall does not do (RFC 5682 §3's
                    // SACK-enhanced version reads the same from SACKs).
                    let frto = (!self.has(TS_OK) && self.recs.sacked() == 0 && self.dupacks == 0)
                        .then_some(Frto::Resent);
                    self.keep_undo(Some(RtoCut {
                        pipe: flight.max(self.win.ssthresh),
                        // (Its resends leave after this, at this tick or
                        // later.)
                        ts: self
                            .has(TS_OK)
                            .then(|| ts_clock(ctx.now).wrapping_add(self.ts_offset)),
                        frto,
                    }));
                } else {
                    // (RFC 5682 §2 step 1: not for a timeout within a
                    // recovery, nor again for one that recurs.)
                    self.frto_off();
                }
                self.retries += 1;
                ctx.counters.tcp_timeouts += 1;
                let flight = self.snd_max.since(self.snd_una) as u32;
                self.cc.on_rto(ctx.now, &mut self.win, flight);
                // (5.5) back off; (5.4) retransmit the earliest unacknowledged
                // segment — go back to SND.UNA and resend in slow start.
                self.rtt.back_off();
                self.go_back();
                self.dupacks = 0;
                // (5.6) restart the timer with the new RTO.
                self.t_rtx = ctx.now + self.rto(ctx);
            }
        }
    }

    /// The persist timer: probe the peer's zero window (RFC 9293 §3.8.6.1,
    /// RFC 1122 §4.2.2.17 — never give up while the peer answers).
    fn on_persist(&mut self, ctx: &mut Ctx) {
        self.flags &= !PERSIST;
        if !matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck
        ) {
            return;
        }
        if self.cork_holds() && self.window_end().since(self.snd_nxt) > 0 {
            // Not the window: `TCP_CORK` holds a partial segment, which
            // goes now (its ceiling; Linux's `tcp_write_wakeup` sends it
            // from the same timer).
            self.cork |= cork::PUSH;
            return;
        }
        self.send_window_probe(ctx);
    }

    /// Send a zero-window probe — unless the peer stopped answering them
    /// (`data_retries` in a row), or the connection is an orphan that has
    /// probed `orphan_retries` times: a peer holding its window shut must
    /// not pin a connection nobody will use (RFC 1122 §4.2.2.17 only asks to
    /// keep it while the peer acknowledges; Linux `tcp_orphan_retries`).
    fn send_window_probe(&mut self, ctx: &mut Ctx) {
        self.persist_shift = self.persist_shift.saturating_add(1);
        self.zwp = self.zwp.saturating_add(1);
        if self.zwp > ctx.cfg.data_retries
            || (self.has(APP_CLOSED) && self.persist_shift > ctx.cfg.orphan_retries)
        {
            self.die(DeadReason::TimedOut);
            return;
        }
        self.flags |= PROBE_PENDING;
        ctx.counters.tcp_zero_window_probes += 1;
    }

    /// Keepalive (RFC 1122 §4.2.3.6).
    fn on_keepalive(&mut self, ctx: &mut Ctx) {
        if !self.has(KEEPALIVE) || !matches!(self.state, State::Established | State::CloseWait) {
            return;
        }
        let idle = ctx.now.saturating_since(self.last_rx);
        if idle < self.ka_idle(ctx.cfg) {
            return; // refresh() re-arms from last_rx
        }
        if self.probes >= self.ka_probes(ctx.cfg) {
            self.die(DeadReason::TimedOut);
            return;
        }
        self.probes += 1;
        ctx.counters.tcp_keepalive_probes += 1;
        self.flags |= PROBE_PENDING;
        self.t_ka = ctx.now + self.ka_interval(ctx.cfg);
    }

    /// Re-derive timers after any input, output or application call:
    /// RFC 6298 (5.1) start the retransmission timer when something is in
    /// flight; the persist timer when data waits on a closed window;
    /// keepalive when idle.
    pub fn refresh(&mut self, ctx: &mut Ctx) {
        let handshake = matches!(self.state, State::SynSent | State::SynReceived);
        let in_flight = self.snd_una != self.snd_max;
        if handshake || (in_flight && self.state.is_synchronized() && self.state != State::TimeWait)
        {
            if self.has(PERSIST) {
                self.flags &= !PERSIST;
                self.t_rtx = Instant::NEVER;
            }
            // The handshake timer runs from `connect`, before the SYN can go
            // out (it may wait for ARP), so SYN retries bound the wait.
            if self.t_rtx.is_never() {
                if handshake {
                    self.t_rtx = ctx.now + self.rto(ctx);
                } else {
                    self.arm_rtx(ctx);
                }
            }
        } else if self.window_blocked(ctx.cfg) {
            if !self.has(PERSIST) || self.t_rtx.is_never() {
                self.flags |= PERSIST;
                let base = self.rto(ctx).max(ctx.cfg.rto_min);
                let shift = u32::from(self.persist_shift.min(16));
                let d = base.saturating_mul(1 << shift).min(ctx.cfg.rto_max);
                self.t_rtx = ctx.now + d;
            }
        } else if !in_flight {
            self.t_rtx = Instant::NEVER;
            self.flags &= !PERSIST;
        }
        if self.cork & cork::PUSH != 0 && self.data_end() == self.snd_nxt {
            // What the ceiling let go has gone: the cork holds again.
            self.cork = cork::ON;
        }
        if self.has(KEEPALIVE)
            && matches!(self.state, State::Established | State::CloseWait)
            && self.t_ka.is_never()
        {
            self.t_ka = self.last_rx + self.ka_idle(ctx.cfg);
            if self.t_ka <= ctx.now {
                self.t_ka = ctx.now + self.ka_interval(ctx.cfg);
            }
        }
    }

    /// Nothing in flight, data (or the application) waiting, and the
    /// peer's window too small to send any of it.
    fn window_blocked(&self, cfg: &TcpConfig) -> bool {
        if !matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck
        ) || self.snd_una != self.snd_max
        {
            return false;
        }
        let unsent = self.data_end().since(self.snd_nxt) > 0;
        let app_waiting = self.has(SEND_BLOCKED) && self.window_end().since(self.data_end()) == 0;
        let _ = cfg;
        (unsent || app_waiting) && self.next_out().is_none()
    }

    // ----- output --------------------------------------------------------

    /// Does this connection have a segment to send now?
    pub fn wants_tx(&self) -> bool {
        self.next_out().is_some()
    }

    /// The segment to send next, without side effects.
    fn next_out(&self) -> Option<Out> {
        match self.state {
            State::Closed | State::Listen => return None,
            State::SynSent | State::SynReceived => {
                if self.has(SYN_PENDING) {
                    return Some(Out::Syn);
                }
                return self.has(ACK_NOW).then_some(Out::Ack);
            }
            State::TimeWait => return self.has(ACK_NOW).then_some(Out::Ack),
            _ => {}
        }
        if let Some(d) = self.next_data() {
            return Some(d);
        }
        // (An ACK owed goes first: a probe's is not read, being below the
        // window, and would end it and its D-SACK.)
        if self.has(PROBE_PENDING) && !self.has(ACK_NOW) {
            return Some(Out::Probe);
        }
        self.has(ACK_NOW).then_some(Out::Ack)
    }

    /// A data/FIN segment covering `[s, e)` of sequence space, clamped to
    /// the data and the FIN.
    fn range(&self, s: SeqNum, e: SeqNum, rexmit: bool) -> Option<Out> {
        let data_end = self.data_end();
        let data_to = e.min(data_end);
        let len = data_to.since(s) as u32;
        let fin = self.has(SHUT_WR)
            && !self.has(FIN_ACKED)
            && e.diff(data_end) > 0
            && s.diff(data_end) <= 0;
        (len > 0 || fin).then_some(Out::Data {
            seq: s,
            len,
            fin,
            rexmit,
        })
    }

    fn next_data(&self) -> Option<Out> {
        if self.has(FIN_ACKED) {
            return None;
        }
        let mss = self.cur_mss();
        let seq_end = self.seq_end();
        if self.has(IN_RECOVERY) {
            if self.has(RETX_FIRST) {
                // RFC 6675 (4.3) / RFC 6582 step 3 and 5: retransmit the
                // first unacknowledged segment now, whatever the window.
                let first_end = if self.has(SACK_OK) {
                    self.recs.first_hole(self.snd_una).end
                } else {
                    self.snd_max
                };
                let e = (self.snd_una + mss).min(first_end).min(self.snd_max);
                return self.range(self.snd_una, e, true);
            }
            if self.has(SACK_OK) {
                return self.next_seg_sack(mss, seq_end);
            }
            // NewReno: new data within the (inflated) window.
            let flight = self.snd_max.since(self.snd_una) as u32;
            if flight >= self.win.cwnd {
                return None;
            }
            return self.new_data(self.snd_max, mss, self.win.cwnd - flight, seq_end, false);
        }
        if self.has(TLP_PROBE) {
            // RFC 8985 §7.3: new data if the peer's window allows, else the
            // last segment again.
            if self.snd_nxt == self.snd_max {
                if let Some(o) = self.new_data(self.snd_max, mss, u32::MAX, seq_end, false) {
                    return Some(o);
                }
            }
            let start = (self.snd_max - mss).max(self.snd_una);
            if self.snd_max.diff(start) > 0 {
                return self.range(start, self.snd_max, true);
            }
        }
        if let Some(Frto::NewSent { from, .. }) = self.frto() {
            // F-RTO step 2 b (RFC 5682 §2): up to two new segments, whatever
            // is in flight (the window allows two segments; F-RTO only
            // chooses which), then wait for the ACK that decides. SND.NXT
            // stays where the go-back resend is: if none could go after
            // all (the window shrank since step 2), it goes on from there
            // (and step 3 finds nothing to decide).
            let room = (2 * mss as u32).saturating_sub(self.snd_max.since(from) as u32);
            if let Some(o) = self.new_data(self.snd_max, mss, room, seq_end, true) {
                return Some(o);
            }
            if self.snd_max != from {
                return None;
            }
        }
        // Normal operation, including the go-back-N resend after an RTO
        // (SND.NXT < SND.MAX). RFC 3042 limited transmit: the first two
        // duplicate ACKs each allow one more new segment.
        let flight = self.snd_nxt.since(self.snd_una) as u32;
        let limited = if self.snd_nxt == self.snd_max {
            u32::from(self.dupacks.min(2)) * self.mss()
        } else {
            0
        };
        let cwnd = self.win.cwnd.saturating_add(limited);
        if flight >= cwnd {
            return None;
        }
        self.new_data(self.snd_nxt, mss, cwnd - flight, seq_end, false)
    }

    /// Data starting at `from` under congestion room `cwnd_room`, with
    /// sender SWS avoidance (RFC 1122 §4.2.3.4) and Nagle — unless `push`
    /// (F-RTO's new data, RFC 5682 §2 step 2 b, which may override Nagle:
    /// as Linux's `tcp_xmit_recovery`, `TCP_CORK` too).
    fn new_data(
        &self,
        from: SeqNum,
        mss: usize,
        cwnd_room: u32,
        seq_end: SeqNum,
        push: bool,
    ) -> Option<Out> {
        let data_end = self.data_end();
        let avail = data_end.since(from);
        let rexmit = from.diff(self.snd_max) < 0;
        if avail == 0 {
            // Only the FIN (if not already beyond it).
            if self.has(SHUT_WR) && from.diff(self.fin_seq) <= 0 && seq_end.diff(from) > 0 {
                return self.range(from, self.fin_seq + 1, rexmit);
            }
            return None;
        }
        let wnd_room = self.window_end().since(from);
        let usable = avail.min(wnd_room).min(cwnd_room as usize);
        let len = usable.min(mss);
        if len == 0 {
            return None;
        }
        if len < mss && len < avail {
            // Window-limited to less than a segment: RFC 1122 §4.2.3.4 —
            // send only if at least half the largest window seen.
            let rwnd_limited = wnd_room <= cwnd_room as usize;
            if !rexmit && (!rwnd_limited || len < (self.max_snd_wnd as usize) / 2) {
                return None;
            }
        }
        let urgent = self.urgent_mode();
        if len == avail
            && len < mss
            && !rexmit
            && !push
            && self.cork_holds()
            && !self.has(SHUT_WR)
            && !urgent
        {
            // TCP_CORK (tcp(7)): a partial segment waits for the cork to
            // come off, or its ceiling (the persist timer: `on_persist`);
            // a FIN rides.
            return None;
        }
        if len == avail && len < mss && !rexmit && !push && !self.has(NODELAY) && !urgent {
            // Nagle (RFC 1122 §4.2.3.4) in Minshall's variant, as Linux's
            // `tcp_nagle_check`: hold a small segment while a small one
            // sent before is unacknowledged. (Holding it while any data is
            // in flight, the tail of a reply longer than a segment waited
            // for the peer's delayed ACK: 40 ms per response of nginx
            // once it had cleared TCP_NODELAY, until 2026-11-30.)
            let small_out =
                self.snd_sml.diff(self.snd_una) > 0 && self.snd_sml.diff(self.snd_nxt) <= 0;
            if self.snd_nxt != self.snd_una && small_out && !self.has(SHUT_WR) {
                return None;
            }
        }
        let end = from + len;
        // Let the FIN ride on the segment that ends the data.
        let e = if self.has(SHUT_WR) && end == data_end {
            end + 1
        } else {
            end
        };
        self.range(from, e, rexmit)
    }

    /// RFC 6675 §4 NextSeg, under the pipe limit of §5 (C).
    fn next_seg_sack(&self, mss: usize, seq_end: SeqNum) -> Option<Out> {
        let m = self.mss();
        // Pipe: sent, neither SACKed nor marked lost (a retransmitted
        // record counts once; RFC 6675 §4 SetPipe with RACK's marks).
        let pipe = self.recs.pipe(self.snd_una) as u32;
        if self.win.cwnd.saturating_sub(pipe) < m {
            return None;
        }
        // (1) the first segment marked lost (by IsLost or RACK) and not
        // retransmitted since — a lost retransmission included.
        if let Some(l) = self.recs.first_lost(self.snd_una) {
            return self.range(l.start, (l.start + mss).min(l.end), true);
        }
        // (2) new data.
        if self.snd_nxt == self.snd_max {
            if let Some(o) = self.new_data(
                self.snd_max,
                mss,
                self.win.cwnd.saturating_sub(pipe),
                seq_end,
                false,
            ) {
                return Some(o);
            }
        }
        // (3) a segment below SACKed data, not yet retransmitted, even if
        // not yet deemed lost — unless the path reorders: then a hole is
        // given RACK's reordering window (RFC 8985 §6.2), as Linux does.
        if self.reordering_seen() {
            return None;
        }
        let h = self.recs.next_unsent_hole(self.snd_una)?;
        self.range(h.start, (h.start + mss).min(h.end), true)
    }

    /// The window field to advertise, applying receiver SWS avoidance
    /// (RFC 1122 §4.2.3.3: the right edge moves only by at least
    /// min(RCV.BUFF/2, MSS)) and never shrinking the window (RFC 9293
    /// §3.8.6.2.2).
    fn rcv_window_field(&mut self) -> u16 {
        let ideal = self.consumed_seq() + self.rcv_buf as usize;
        let step = (self.rcv_buf / 2).min(u32::from(self.local_mss)) as usize;
        if self.rcv_adv.diff(self.rcv_nxt) < 0 {
            self.rcv_adv = self.rcv_nxt;
        }
        if ideal.since(self.rcv_adv) >= step {
            self.rcv_adv = ideal;
        }
        let wnd = self.rcv_adv.since(self.rcv_nxt) as u64;
        // Round up so scaling never retracts the edge (RFC 7323 §2.4).
        let unit = 1u64 << self.rcv_wscale;
        let field = wnd.div_ceil(unit).min(65535);
        self.rcv_adv = self.rcv_nxt + (field * unit) as usize;
        self.rcv_adv_at = self.rcv_nxt;
        field as u16
    }

    fn syn_window(&self) -> u16 {
        self.rcv_buf.min(65535) as u16
    }

    fn ts_option(&self, now: Instant) -> Option<(u32, u32)> {
        self.has(TS_OK)
            .then(|| (ts_clock(now).wrapping_add(self.ts_offset), self.ts_recent))
    }

    /// Write the next segment (TCP header and payload) into `buf`; `None`
    /// if there is nothing to send. `buf` must hold an MSS-sized segment
    /// plus 60 bytes of header.
    pub fn poll_segment(&mut self, ctx: &mut Ctx, buf: &mut [u8], csum: Checksum) -> Option<usize> {
        let out = self.next_out()?;
        let src = self.tuple.local_ip;
        let dst = self.tuple.remote_ip;
        let mut repr = TcpRepr {
            src_port: self.tuple.local_port,
            dst_port: self.tuple.remote_port,
            // RFC 9293 SND.NXT is our SND.MAX: `snd_nxt` is only the
            // resend pointer after a timeout, and a pure ACK carrying it
            // would fall left of the peer's window and be ignored.
            seq: self.snd_max,
            ack: Some(self.rcv_nxt),
            flags: Flags::default(),
            window_len: 0,
            urgent: 0,
            options: TcpOptions::default(),
            payload: &[],
        };
        let n = match out {
            Out::Syn => {
                repr.flags = Flags::SYN;
                repr.seq = self.iss;
                repr.window_len = self.syn_window();
                let cfg = ctx.cfg;
                let mut o = TcpOptions {
                    mss: Some(self.local_mss),
                    ..Default::default()
                };
                if self.state == State::SynSent {
                    repr.ack = None;
                    if cfg.window_scaling {
                        o.window_scale = Some(self.rcv_wscale);
                    }
                    o.sack_permitted = cfg.sack;
                    if cfg.timestamps {
                        o.timestamp = Some((ts_clock(ctx.now).wrapping_add(self.ts_offset), 0));
                    }
                } else {
                    if self.has(WS_OK) {
                        o.window_scale = Some(self.rcv_wscale);
                    }
                    o.sack_permitted = self.has(SACK_OK);
                    o.timestamp = self.ts_option(ctx.now);
                }
                repr.options = o;
                self.flags &= !SYN_PENDING;
                if self.has(SYN_RETRANSMITTED) {
                    ctx.counters.tcp_retrans_segs += 1;
                    self.retrans_total += 1;
                } else if !self.has(TIMING) {
                    self.flags |= TIMING;
                    self.mark_us = us_clock(ctx.now);
                }
                self.snd_nxt = self.iss + 1;
                if self.snd_max.diff(self.snd_nxt) < 0 {
                    self.snd_max = self.snd_nxt;
                }
                if self.t_rtx.is_never() {
                    self.t_rtx = ctx.now + self.rto(ctx);
                }
                let n = repr.emit(buf, src, dst, csum);
                // (A SYN carries no SACK blocks: a queued D-SACK waits.)
                self.after_ack_sent(false);
                n
            }
            Out::Probe => {
                // A zero-length segment just below SND.UNA: the peer must
                // answer with an ACK carrying its window (RFC 9293
                // §3.10.7.4; Linux uses the same probe). It acknowledges
                // too, so it carries SACK blocks as every ACK does while
                // data is out of order (RFC 2018 §4; Linux's
                // `tcp_xmit_probe_skb`).
                self.flags &= !PROBE_PENDING;
                repr.seq = self.snd_una - 1;
                repr.window_len = self.rcv_window_field();
                self.fill_options(ctx, &mut repr.options);
                self.put_urgent(&mut repr);
                let n = repr.emit(buf, src, dst, csum);
                self.after_ack_sent(true);
                n
            }
            Out::Ack => {
                repr.seq = self.snd_max;
                repr.window_len = self.rcv_window_field();
                self.fill_options(ctx, &mut repr.options);
                self.put_urgent(&mut repr);
                let n = repr.emit(buf, src, dst, csum);
                self.after_ack_sent(true);
                n
            }
            Out::Data {
                seq,
                mut len,
                mut fin,
                rexmit,
            } => {
                repr.seq = seq;
                repr.window_len = self.rcv_window_field();
                self.fill_options(ctx, &mut repr.options);
                // RFC 9293 §3.7.1: the payload shrinks by the options
                // actually sent (SACK blocks come and go).
                let room =
                    u32::from(self.mss_base).saturating_sub(repr.options.buffer_len() as u32);
                if len > room {
                    len = room;
                    fin = false;
                }
                if fin {
                    repr.flags |= Flags::FIN;
                }
                let end_of_data = seq + len as usize == self.data_end();
                if len > 0 && end_of_data {
                    repr.flags |= Flags::PSH;
                }
                self.put_urgent(&mut repr);
                let offset = seq.since(self.data_base());
                let sendq = &mut self.sendq;
                let n = repr.emit_with(buf, src, dst, len as usize, csum, |out| {
                    sendq.copy_out(offset, out)
                });
                let end = seq + len as usize + usize::from(fin);
                if !rexmit && len > 0 && len < room {
                    // (Linux's `tcp_minshall_update`.)
                    self.snd_sml = seq + len as usize;
                }
                self.recs
                    .on_send(self.snd_una, seq, end, self.snd_max, us_clock(ctx.now));
                if seq == self.snd_nxt {
                    self.snd_nxt = end;
                }
                if end.diff(self.snd_max) > 0 {
                    self.snd_max = end;
                }
                if rexmit {
                    ctx.counters.tcp_retrans_segs += 1;
                    self.retrans_total += 1;
                    self.bytes_retrans = self.bytes_retrans.saturating_add(len);
                    if let Some(u) = self.rare.as_deref_mut().and_then(|r| r.undo.as_mut()) {
                        u.sent += 1;
                        u.left += 1;
                    }
                    self.flags &= !RETX_FIRST;
                }
                if self.has(TLP_PROBE) {
                    // The probe is out: the RTO (armed in on_pto) now runs.
                    self.flags &= !TLP_PROBE;
                    self.tlp_end = self.snd_max;
                } else if self.t_rtx.is_never()
                    || self.has(PERSIST)
                    || (self.has(TLP_TIMER) && !rexmit)
                {
                    // RFC 6298 (5.1); RFC 8985 §7.2: restart the probe timer
                    // after new data.
                    self.arm_rtx(ctx);
                }
                self.after_ack_sent(true);
                n
            }
        };
        ctx.counters.tcp_out_segs += 1;
        self.segs_out = self.segs_out.wrapping_add(1);
        Some(n)
    }

    /// Timestamps and SACK blocks for a non-SYN segment.
    fn fill_options(&self, ctx: &Ctx, o: &mut TcpOptions) {
        o.timestamp = self.ts_option(ctx.now);
        if let Some((blocks, n)) = self.sack_option(o.timestamp.is_some()) {
            o.sack_blocks = blocks;
            o.sack_len = n as u8;
        }
    }

    /// The SACK blocks the next segment carries (as many as fit beside a
    /// timestamp, `ts`), if any: a D-SACK first (RFC 2883 §4: the first
    /// block of the option should be the duplicate that triggered the
    /// acknowledgement; for a duplicate above RCV.NXT the block of data
    /// that holds it comes second, so the sender can tell it from a new
    /// SACK), then the out-of-order data, the most recent first (RFC 2018
    /// §4).
    fn sack_option(&self, ts: bool) -> Option<([SackBlock; MAX_SACK_BLOCKS], usize)> {
        if !self.has(SACK_OK) {
            return None;
        }
        let dsack = self.rare.as_ref().and_then(|r| r.dsack.first());
        if self.rcvq.ooo_segments() == 0 && dsack.is_none() {
            return None;
        }
        let max = if ts { 3 } else { MAX_SACK_BLOCKS };
        let mut blocks = [SackBlock::default(); MAX_SACK_BLOCKS];
        let Some(d) = dsack else {
            let n = self.rcvq.sack_blocks(&mut blocks[..max]);
            return (n > 0).then_some((blocks, n));
        };
        blocks[0] = d;
        let n = 1 + self.rcvq.sack_blocks(&mut blocks[1..max]);
        // The block that holds a duplicate above RCV.NXT goes second.
        let holds = |b: &SackBlock| b.left.diff(d.left) <= 0 && b.right.diff(d.right) >= 0;
        if let Some(i) = (2..n).find(|&i| holds(&blocks[i])) {
            blocks[1..=i].rotate_right(1);
        }
        Some((blocks, n))
    }

    /// A pure duplicate ACK that PAWS would drop only because the path
    /// reordered it (Linux's `tcp_disordered_ack`): it is at RCV.NXT,
    /// acknowledges SND.UNA, leaves the send window as it is, and its
    /// TSval is within an RTO's worth of ticks (`behind`) of TS.Recent.
    /// Taken, its SACK blocks still count; it cannot move TS.Recent (an
    /// older TSval) nor the window.
    fn disordered_ack(&self, ctx: &Ctx, seg: &Segment, behind: u32) -> bool {
        let replay = self.rto(ctx).as_millis() as u64 * PAWS_ACK_TICKS_PER_S / 1000;
        seg.len() == 0
            && seg.seq == self.rcv_nxt
            && seg.ack == Some(self.snd_una)
            && u32::from(seg.wnd) << self.snd_wscale == self.snd_wnd
            && u64::from(behind) <= replay
    }

    /// The data of dropped segment `seg` that lies before RCV.NXT came
    /// again (not for a RST, which is dropped unanswered).
    fn note_old(&mut self, ctx: &mut Ctx, seg: &Segment) {
        // (A SYN's sequence number comes before its data.)
        let left = seg.seq + usize::from(seg.flags.syn());
        if seg.flags.rst() || seg.payload_len == 0 || left.diff(self.rcv_nxt) >= 0 {
            return;
        }
        let right = left + seg.payload_len;
        let right = if right.diff(self.rcv_nxt) > 0 {
            self.rcv_nxt
        } else {
            right
        };
        self.note_duplicate(ctx, left, right);
    }

    /// Data `[left, right)` came again: say so in a segment's SACK option
    /// (RFC 2883 D-SACK), if SACK was agreed, each duplicate in an ACK
    /// of its own ([`DsackQueue`]). Linux's sender, for one, then learns
    /// that its retransmission was needless and may undo the window it
    /// cut for it.
    fn note_duplicate(&mut self, ctx: &mut Ctx, left: SeqNum, right: SeqNum) {
        if !self.has(SACK_OK) || right.diff(left) <= 0 {
            return;
        }
        let r = self.rare.get_or_insert_default();
        if !r.dsack.note(left, right) {
            ctx.counters.tcp_dsack_not_sent += 1;
        }
        // (At once, as Linux's `tcp_send_dupack`.)
        self.flags |= ACK_NOW;
    }

    /// Let the rarely-used part go once nothing in it is needed.
    fn tidy_rare(&mut self) {
        if self.rare.as_deref().is_some_and(Rare::is_empty) {
            self.rare = None;
        }
    }

    /// Every segment but a RST carries an ACK: the pending one is done.
    /// `sack`: the segment carried SACK blocks as `fill_options` makes
    /// them, so the first queued D-SACK with them.
    fn after_ack_sent(&mut self, sack: bool) {
        let mut more = false;
        if let Some(r) = self.rare.as_deref_mut() {
            // (A D-SACK is reported once: RFC 2883 §4.) The next one, if
            // any, goes in an ACK of its own, at once.
            if sack {
                r.dsack.pop();
            }
            more = !r.dsack.is_empty();
            self.tidy_rare();
        }
        self.flags &= !ACK_NOW;
        if more {
            self.flags |= ACK_NOW;
        }
        self.t_delack = Instant::NEVER;
        self.last_ack_sent = self.rcv_nxt;
    }

    /// Consistency checks for tests and fuzzing; returns the first broken
    /// invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        let e = |m: &str| Err(format!("{m} in {}", self.state));
        if self.snd_una.diff(self.snd_nxt) > 0 {
            return e("SND.UNA > SND.NXT");
        }
        if self.snd_nxt.diff(self.snd_max) > 0 {
            return e("SND.NXT > SND.MAX");
        }
        if self.state.is_synchronized() && !self.has(FIN_ACKED) {
            if self.snd_max.diff(self.seq_end()) > 0 {
                return e("SND.MAX beyond the data and FIN");
            }
            if self.has(SHUT_WR) && self.fin_seq != self.data_base() + self.sendq.len() {
                return e("FIN not right after the queued data");
            }
        }
        if self.state.is_synchronized()
            && self.rcv_adv.diff(self.rcv_nxt) < 0
            && self.state != State::TimeWait
        {
            return e("advertised right edge behind RCV.NXT");
        }
        let offered = self.rcv_adv.since(self.consumed_seq());
        if self.rcvq.ready_len() > offered.max(self.rcv_buf as usize) + (1 << 14) + 65536 {
            return e("more readable data than the receive buffer allows");
        }
        if self.has(IN_RECOVERY) && !self.state.is_synchronized() {
            return e("loss recovery outside a synchronized state");
        }
        if self.state != State::Closed {
            if let Err(m) = self.recs.check(self.snd_una, self.snd_max) {
                return e(m);
            }
        }
        if let Err(m) = self.rare.as_ref().map_or(Ok(()), |r| r.dsack.check()) {
            return e(m);
        }
        if let Some(f) = self.frto() {
            let beyond = matches!(f, Frto::NewSent { from, .. } if from.diff(self.snd_max) > 0);
            if self.has(IN_RECOVERY) || self.has(TS_OK) || beyond {
                return e("F-RTO running in a recovery, with timestamps, or beyond SND.MAX");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever duplicates come, in any order and overlap: the queued
        /// blocks never touch (no byte reported twice), each noted range
        /// lies within one queued block unless the queue was full, and a
        /// range that touches none queues behind the others.
        #[test]
        fn dsack_queue_covers_each_duplicate_once(
            ranges in proptest::collection::vec((0u32..400, 1u32..60), 1..24),
            pops in proptest::collection::vec(proptest::bool::weighted(0.2), 24),
        ) {
            let mut q = DsackQueue::default();
            // Base near the wrap, so sequence arithmetic is exercised.
            let base = SeqNum(u32::MAX - 200);
            for (&(off, len), &pop) in ranges.iter().zip(&pops) {
                let (left, right) = (base + off as usize, base + (off + len) as usize);
                let before = q;
                let touched = before.blocks[..usize::from(before.len)]
                    .iter()
                    .any(|b| left.diff(b.right) <= 0 && right.diff(b.left) >= 0);
                let taken = q.note(left, right);
                proptest::prop_assert!(q.check().is_ok(), "{:?}", q);
                if taken {
                    let held = q.blocks[..usize::from(q.len)]
                        .iter()
                        .any(|b| b.left.diff(left) <= 0 && b.right.diff(right) >= 0);
                    proptest::prop_assert!(held, "[{left:?}, {right:?}) lost in {q:?}");
                    if !touched {
                        proptest::prop_assert_eq!(q.len, before.len + 1);
                        proptest::prop_assert_eq!(
                            q.blocks[usize::from(q.len) - 1],
                            SackBlock { left, right }
                        );
                    }
                } else {
                    proptest::prop_assert!(!touched && usize::from(before.len) == DSACK_QUEUE);
                    proptest::prop_assert_eq!(q, before);
                }
                if pop {
                    q.pop();
                }
            }
        }
    }
}
