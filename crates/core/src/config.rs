//! Stack configuration with defaults suitable for a datacenter dataplane.

use crate::time::Duration;
use crate::wire::ethernet::MacAddr;
use crate::wire::ChecksumCaps;
use std::net::Ipv4Addr;

/// Which congestion controller new connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CcAlgorithm {
    /// RFC 5681 slow start and congestion avoidance with RFC 6582 NewReno
    /// recovery for peers without SACK.
    NewReno,
    /// CUBIC (RFC 9438); the default, as in Linux.
    #[default]
    Cubic,
}

impl CcAlgorithm {
    /// Stable name (`newreno`, `cubic`).
    pub fn name(self) -> &'static str {
        match self {
            CcAlgorithm::NewReno => "newreno",
            CcAlgorithm::Cubic => "cubic",
        }
    }
}

impl core::str::FromStr for CcAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "newreno" | "reno" => Ok(CcAlgorithm::NewReno),
            "cubic" => Ok(CcAlgorithm::Cubic),
            other => Err(format!(
                "unknown congestion control {other:?} (expected \"cubic\" or \"newreno\")"
            )),
        }
    }
}

/// TCP parameters. Durations follow Linux's defaults unless said otherwise.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Receive buffer per connection in bytes, to begin with: the most
    /// data accepted but not yet released by `recv_done`, hence the
    /// largest window advertised. It grows up to `recv_buffer_max` for a
    /// connection whose application reads as fast as the bytes come.
    pub recv_buffer: u32,
    /// The most a connection's receive buffer grows to (receive-buffer
    /// auto-tuning, as Linux's `tcp_rcv_space_adjust` up to `tcp_rmem[2]`):
    /// each round trip it becomes twice what the application read in the
    /// last one, when that is more, so the window keeps ahead of a sender
    /// on a long path (one window per round trip: 256 KiB over 20 ms is
    /// 105 Mbit/s). The window scale offered in the SYN is the one this
    /// needs. At most `recv_buffer`: no auto-tuning.
    pub recv_buffer_max: u32,
    /// Most bytes a connection holds that the peer has not acknowledged
    /// (sent or waiting), to begin with; `send` accepts no more than this,
    /// nor beyond the peer's window unless `send_beyond_window`. It grows
    /// with the congestion window (twice it, as Linux's
    /// `tcp_sndbuf_expand`) up to `send_buffer_max`.
    pub send_buffer: u32,
    /// The most a connection's send buffer grows to (Linux `tcp_wmem[2]`,
    /// 4 MiB). At most `send_buffer`: no auto-tuning.
    pub send_buffer_max: u32,
    /// MSS we advertise and the ceiling of the one we use; derived from the
    /// MTU when `None`.
    pub mss: Option<u16>,
    /// Congestion controller of new connections.
    pub cc: CcAlgorithm,
    /// Offer and accept SACK (RFC 2018).
    pub sack: bool,
    /// Offer and accept timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer and accept window scaling (RFC 7323).
    pub window_scaling: bool,
    /// Nagle's algorithm for new connections (off: segments go out at once).
    pub nagle: bool,
    /// Delayed-ACK timeout; zero acknowledges every segment at once. RFC 1122
    /// §4.2.3.2 requires it below 500 ms.
    pub delayed_ack: Duration,
    /// Lower bound of the retransmission timeout.
    pub rto_min: Duration,
    /// Upper bound of the retransmission timeout (RFC 6298 (2.5): at least 60 s).
    pub rto_max: Duration,
    /// RTO before any RTT sample (RFC 6298 (2.1): 1 s).
    pub rto_initial: Duration,
    /// Retransmissions of a SYN or SYN-ACK before giving up.
    pub syn_retries: u8,
    /// Retransmissions of data before the connection is declared dead.
    pub data_retries: u8,
    /// Maximum segment lifetime; TIME-WAIT lasts 2·MSL (RFC 9293 §3.4.2).
    pub msl: Duration,
    /// How long FIN-WAIT-2 waits for the peer's FIN after the application
    /// closed (Linux `tcp_fin_timeout`).
    pub fin_wait2_timeout: Duration,
    /// Keepalive for new connections (off by default, RFC 1122 §4.2.3.6).
    pub keepalive: bool,
    /// Idle time before the first keepalive probe (RFC 1122: ≥ 2 h default).
    pub keepalive_idle: Duration,
    /// Interval between unanswered keepalive probes.
    pub keepalive_interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub keepalive_probes: u8,
    /// Default listen backlog (connections established but not yet accepted).
    pub backlog: u32,
    /// Half-open connections per listener before SYN cookies take over.
    pub syn_backlog: u32,
    /// Send SYN cookies when the SYN queue is full (RFC 4987 §3.6).
    pub syn_cookies: bool,
    /// Challenge ACKs per second, stack-wide (RFC 5961 §7).
    pub challenge_ack_limit: u32,
    /// Out-of-order segments held per connection before more are dropped.
    pub max_ooo_segments: u16,
    /// In-order segments (frames) held per connection before more are dropped.
    pub max_rx_segments: u16,
    /// The least a held received frame is charged against a connection's
    /// memory budget (twice `recv_buffer` for in-order and again for
    /// out-of-order data): the size of a packet buffer, so a peer sending
    /// tiny segments cannot pin more buffers than a full window would.
    pub frame_truesize: u32,
    /// Zero-window probes an orphaned connection (closed by the application)
    /// sends before it is dropped (Linux `tcp_orphan_retries`).
    pub orphan_retries: u8,
    /// First and last port for outgoing connections (RFC 6056).
    pub ephemeral_ports: (u16, u16),
    /// `send` takes what the send buffer has room for, beyond the peer's
    /// window too, as a POSIX socket's send buffer holds what waits for
    /// the window (the socket service). Off, the default: only what the
    /// window allows, IX's `sendv`, so that a native application keeps
    /// what the peer cannot take yet.
    pub send_beyond_window: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            recv_buffer: 256 * 1024,
            recv_buffer_max: 6 << 20,
            send_buffer: 256 * 1024,
            send_buffer_max: 4 << 20,
            mss: None,
            cc: CcAlgorithm::Cubic,
            sack: true,
            timestamps: true,
            window_scaling: true,
            nagle: false,
            delayed_ack: Duration::from_millis(40),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            rto_initial: Duration::from_secs(1),
            syn_retries: 6,
            data_retries: 15,
            msl: Duration::from_secs(30),
            fin_wait2_timeout: Duration::from_secs(60),
            keepalive: false,
            keepalive_idle: Duration::from_secs(7200),
            keepalive_interval: Duration::from_secs(75),
            keepalive_probes: 9,
            backlog: 1024,
            syn_backlog: 1024,
            syn_cookies: true,
            challenge_ack_limit: 1000,
            max_ooo_segments: 256,
            max_rx_segments: 1024,
            frame_truesize: 2048,
            orphan_retries: 8,
            ephemeral_ports: (49152, 65535),
            send_beyond_window: false,
        }
    }
}

impl TcpConfig {
    /// The most a connection's receive buffer grows to: `recv_buffer_max`,
    /// never below `recv_buffer`.
    pub fn recv_buffer_limit(&self) -> u32 {
        self.recv_buffer.max(self.recv_buffer_max)
    }

    /// The most a connection's send buffer grows to: `send_buffer_max`,
    /// never below `send_buffer`.
    pub fn send_buffer_limit(&self) -> u32 {
        self.send_buffer.max(self.send_buffer_max)
    }
}

/// Interface and stack-wide parameters.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// Our Ethernet address.
    pub mac: MacAddr,
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of the local subnet.
    pub prefix_len: u8,
    /// Next hop for destinations outside the subnet; without one they are
    /// unreachable.
    pub gateway: Option<Ipv4Addr>,
    /// 802.1Q VLAN to tag frames with and to accept; untagged when `None`.
    pub vlan: Option<u16>,
    /// IP MTU of the link.
    pub mtu: u16,
    /// Which checksums to verify and compute (offloads turn some off).
    pub checksums: ChecksumCaps,
    /// Secret for the keyed hashes: RFC 6528 initial sequence numbers,
    /// RFC 6056 port selection, SYN cookies, timestamp offsets and the
    /// connection table. The caller supplies it (the core has no randomness);
    /// use 16 random bytes in production.
    pub secret: [u8; 16],
    /// Key of the sequence-number and timestamp clocks (RFC 6528's F and
    /// the RFC 7323 timestamp offset). Unlike `secret` it should be the
    /// same for every stack on the machine since boot (the engine keeps
    /// one in /run): a restarted process then continues the ISN and TSval
    /// clocks its earlier connections left, so a peer still holding them
    /// in TIME-WAIT accepts the new SYN (RFC 6191) — as Linux keys both
    /// with one secret per boot.
    pub clock_key: [u8; 16],
    /// Machine time (`CLOCK_MONOTONIC`) at this stack's zero instant: the
    /// ISN and TSval clocks run on machine time, not on the process's.
    pub clock_base: Duration,
    /// This stack's lane of the IPv4 identifications, and how many stacks
    /// send from the address (the engine's cores, which share the secret
    /// and so the counters' choice and start): stack `i` of `n` sends only
    /// identifications `≡ i (mod n)`, so two cores never give datagrams to
    /// one host the same identification (whose fragments its reassembly
    /// would mix). `(0, 1)`: alone.
    pub ident_lane: (u16, u16),
    /// TTL of datagrams we originate.
    pub ttl: u8,
    /// How long a resolved ARP entry is trusted.
    pub arp_timeout: Duration,
    /// Interval between ARP requests for an unresolved address.
    pub arp_retry: Duration,
    /// Requests before an address is declared unresolvable (the waiting
    /// connections are then told through their own timers).
    pub arp_retries: u8,
    /// Most entries in the ARP cache.
    pub arp_capacity: usize,
    /// ICMP errors (port/protocol unreachable) per second.
    pub icmp_error_limit: u32,
    /// Datagrams queued per UDP socket before more are dropped.
    pub udp_rx_queue: usize,
    /// Most memory (frame cost, see `tcp.frame_truesize`) held in
    /// out-of-order queues by all connections together; beyond it
    /// out-of-order segments are dropped (and retransmitted later), so
    /// many connections with holes cannot exhaust the packet buffers.
    pub ooo_memory: usize,
    /// Most bytes by which all connections' receive buffers together may
    /// have grown past `tcp.recv_buffer` (auto-tuning, see
    /// `tcp.recv_buffer_max`); past it no buffer grows, so the programs
    /// of a socket service that read fast and then stop cannot make it
    /// hold more than this beyond their initial windows (Linux bounds the
    /// same with `tcp_mem`).
    pub rcv_tune_memory: usize,
    /// Resolution of the timer wheel (IX: 16 µs).
    pub timer_tick: Duration,
    /// How long the fragments of an IPv4 datagram wait for the rest
    /// (Linux's `ipfrag_time`: 30 s).
    pub frag_timeout: Duration,
    /// Most memory held by datagrams in reassembly (payload plus 64 bytes
    /// per fragment; Linux's `ipfrag_high_thresh`: 4 MiB); beyond it new
    /// fragments are dropped.
    pub frag_memory: usize,
    /// TCP parameters.
    pub tcp: TcpConfig,
}

impl StackConfig {
    /// Defaults for an interface with this address.
    pub fn new(mac: MacAddr, ip: Ipv4Addr, prefix_len: u8) -> StackConfig {
        StackConfig {
            mac,
            ip,
            prefix_len,
            gateway: None,
            vlan: None,
            mtu: 1500,
            checksums: ChecksumCaps::default(),
            secret: [0x5a; 16],
            clock_key: [0xa5; 16],
            clock_base: Duration::ZERO,
            ident_lane: (0, 1),
            ttl: 64,
            arp_timeout: Duration::from_secs(60),
            arp_retry: Duration::from_secs(1),
            arp_retries: 3,
            arp_capacity: 4096,
            icmp_error_limit: 1000,
            udp_rx_queue: 1024,
            ooo_memory: 64 << 20,
            rcv_tune_memory: 128 << 20,
            timer_tick: Duration::from_micros(16),
            frag_timeout: Duration::from_secs(30),
            frag_memory: 4 << 20,
            tcp: TcpConfig::default(),
        }
    }

    /// Check the configuration; the error names the offending setting.
    pub fn validate(&self) -> Result<(), String> {
        if !self.mac.is_unicast() {
            return Err(format!("mac: {} is not a unicast address", self.mac));
        }
        if self.prefix_len == 0 || self.prefix_len > 32 {
            return Err(format!("prefix_len: {} is not in 1..=32", self.prefix_len));
        }
        let (lane, lanes) = self.ident_lane;
        if lanes == 0 || lane >= lanes {
            return Err(format!(
                "ident_lane: ({lane}, {lanes}) needs a count above 0 and a lane below it"
            ));
        }
        if self.ip.is_unspecified() || self.ip.is_broadcast() || self.ip.is_multicast() {
            return Err(format!("ip: {} cannot be an interface address", self.ip));
        }
        if self.mtu < 576 || self.mtu > 9216 {
            return Err(format!("mtu: {} is not in 576..=9216", self.mtu));
        }
        if let Some(v) = self.vlan {
            if v == 0 || v >= 4095 {
                return Err(format!("vlan: {v} is not in 1..=4094"));
            }
        }
        if let Some(gw) = self.gateway {
            if !crate::same_subnet(gw, self.ip, self.prefix_len) {
                return Err(format!(
                    "gateway: {gw} is not on the local subnet {}/{}",
                    self.ip, self.prefix_len
                ));
            }
        }
        let t = &self.tcp;
        if t.recv_buffer < 2048 || t.recv_buffer > (1 << 30) {
            return Err(format!(
                "tcp.recv_buffer: {} is not in 2048..=1GiB",
                t.recv_buffer
            ));
        }
        if t.send_buffer < 2048 || t.send_buffer > (1 << 30) {
            return Err(format!(
                "tcp.send_buffer: {} is not in 2048..=1GiB",
                t.send_buffer
            ));
        }
        if t.recv_buffer_max > (1 << 30) || t.send_buffer_max > (1 << 30) {
            return Err(format!(
                "tcp.recv_buffer_max ({}) and tcp.send_buffer_max ({}): at most 1GiB",
                t.recv_buffer_max, t.send_buffer_max
            ));
        }
        if let Some(mss) = t.mss {
            if mss < 88 {
                return Err(format!("tcp.mss: {mss} is below 88"));
            }
        }
        if t.delayed_ack >= Duration::from_millis(500) {
            return Err("tcp.delayed_ack: must be below 500 ms (RFC 1122 §4.2.3.2)".into());
        }
        if t.rto_min.is_zero() || t.rto_min > t.rto_max {
            return Err("tcp.rto_min: must be non-zero and at most tcp.rto_max".into());
        }
        if t.ephemeral_ports.0 == 0 || t.ephemeral_ports.0 > t.ephemeral_ports.1 {
            return Err(format!(
                "tcp.ephemeral_ports: {:?} is not a non-empty range of non-zero ports",
                t.ephemeral_ports
            ));
        }
        if t.backlog == 0 || t.syn_backlog == 0 {
            return Err("tcp.backlog and tcp.syn_backlog: must be at least 1".into());
        }
        if t.max_ooo_segments == 0 || t.max_rx_segments == 0 {
            return Err("tcp.max_ooo_segments and tcp.max_rx_segments: must be at least 1".into());
        }
        if self.timer_tick.is_zero() || self.timer_tick > Duration::from_millis(10) {
            return Err("timer_tick: must be in 1 µs..=10 ms".into());
        }
        if self.frag_timeout.is_zero() || self.frag_timeout > Duration::from_secs(255) {
            // RFC 791 §3.2: the reassembly timer is bounded by a TTL's 255 s.
            return Err("frag_timeout: must be in 1 µs..=255 s (RFC 791 §3.2)".into());
        }
        Ok(())
    }

    /// The MSS we advertise: configured, or MTU minus 40 bytes of headers.
    pub fn local_mss(&self) -> u16 {
        let from_mtu = self.mtu - 40;
        self.tcp.mss.map_or(from_mtu, |m| m.min(from_mtu))
    }
}

/// What a socket puts in the IPv4 header of the packets it sends
/// (`IP_TOS` and `IP_TTL` on Linux). The default: TOS 0 and the stack's
/// TTL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct IpOpts {
    /// The DS field and ECN bits (RFC 2474 §3, RFC 3168 §5). A TCP
    /// connection sends its DS field only: it does not negotiate ECN, so
    /// it never marks its packets ECN-capable (RFC 3168 §5–6; Linux's
    /// `IP_TOS` on a TCP socket keeps the stack's own ECN bits).
    pub tos: u8,
    /// Time to live; 0: the stack's ([`StackConfig::ttl`]).
    pub ttl: u8,
}

impl IpOpts {
    /// The TTL to send with, the stack's being `default`.
    pub fn ttl_or(self, default: u8) -> u8 {
        if self.ttl == 0 {
            default
        } else {
            self.ttl
        }
    }

    /// These options as a TCP connection sends them: the ECN bits clear.
    pub fn for_tcp(self) -> IpOpts {
        IpOpts {
            tos: self.tos & !0b11,
            ..self
        }
    }
}
