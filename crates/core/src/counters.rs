//! Counters: MIB-style protocol statistics and drops by named reason.
//!
//! Every frame the stack does not fully accept is counted under exactly one
//! [`DropReason`]; nothing is dropped silently. Names follow the Linux MIB
//! (`RetransSegs`, `ListenOverflows`) in Prometheus form.

macro_rules! drop_reasons {
    ($( $(#[$m:meta])* $variant:ident = $name:literal, $desc:literal; )*) => {
        /// Why a frame (or part of one) was not accepted.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $( $(#[$m])* #[doc = $desc] $variant, )*
        }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];

            /// Stable snake_case name (a metric label).
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$variant => $name,)* }
            }

            /// One-line description for operators.
            pub fn description(self) -> &'static str {
                match self { $(DropReason::$variant => $desc,)* }
            }
        }
    };
}

drop_reasons! {
    EthTruncated = "eth_truncated", "Ethernet frame shorter than its header";
    EthNotForUs = "eth_not_for_us", "destination MAC is neither ours nor broadcast";
    EthUnknownType = "eth_unknown_type", "EtherType is not IPv4 or ARP";
    EthVlanMismatch = "eth_vlan_mismatch", "802.1Q tag absent, unexpected or for another VLAN";
    ArpMalformed = "arp_malformed", "ARP packet truncated or not Ethernet/IPv4";
    ArpNotForUs = "arp_not_for_us", "ARP packet about another host (cache may still learn)";
    ArpBadSender = "arp_bad_sender", "ARP sender address is ours, broadcast or multicast";
    Ipv4Truncated = "ipv4_truncated", "IPv4 datagram shorter than its header or total length";
    Ipv4Malformed = "ipv4_malformed", "IPv4 version or length fields impossible";
    Ipv4BadChecksum = "ipv4_bad_checksum", "IPv4 header checksum mismatch";
    Ipv4Fragment = "ipv4_fragment", "IPv4 fragment of a TCP segment or of an unknown protocol (not reassembled)";
    Ipv4FragMalformed = "ipv4_frag_malformed", "IPv4 fragment past 65535 bytes, or not the last and not a multiple of 8 bytes";
    Ipv4FragOverlap = "ipv4_frag_overlap", "IPv4 fragment overlapping another of its datagram or moving its end: the datagram is discarded";
    Ipv4FragDuplicate = "ipv4_frag_duplicate", "IPv4 fragment already received";
    Ipv4FragNoRoom = "ipv4_frag_no_room", "IPv4 fragment dropped: reassembly memory or datagram limit reached";
    Ipv4FragTimeout = "ipv4_frag_timeout", "IPv4 datagram not complete in time: its fragments are discarded (RFC 1122 §3.3.2)";
    Ipv4NotForUs = "ipv4_not_for_us", "IPv4 destination is not our address";
    Ipv4BadSource = "ipv4_bad_source", "IPv4 source is ours, broadcast, multicast or zero";
    Ipv4UnknownProtocol = "ipv4_unknown_protocol", "IP protocol not ICMP, UDP or TCP";
    IcmpMalformed = "icmp_malformed", "ICMP message truncated";
    IcmpBadChecksum = "icmp_bad_checksum", "ICMP checksum mismatch";
    IcmpUnsupported = "icmp_unsupported", "ICMP type not handled";
    IcmpNoMatch = "icmp_no_match", "ICMP error about no connection of ours, or out of window (RFC 5927)";
    UdpMalformed = "udp_malformed", "UDP datagram truncated or length field impossible";
    UdpBadChecksum = "udp_bad_checksum", "UDP checksum mismatch";
    UdpNoSocket = "udp_no_socket", "no UDP socket bound to the port";
    UdpQueueFull = "udp_queue_full", "UDP socket receive queue full";
    TcpMalformed = "tcp_malformed", "TCP header truncated, zero port or illegal option length";
    TcpBadChecksum = "tcp_bad_checksum", "TCP checksum mismatch";
    TcpBadFlags = "tcp_bad_flags", "impossible flag combination (SYN+FIN, SYN+RST, none)";
    TcpNoConnection = "tcp_no_connection", "no connection or listener for the segment";
    TcpOutOfWindow = "tcp_out_of_window", "sequence number not acceptable (RFC 9293 §3.10.7.4)";
    TcpPaws = "tcp_paws", "timestamp older than TS.Recent (RFC 7323 §5 PAWS)";
    TcpAckInvalid = "tcp_ack_invalid", "ACK outside the acceptable range (RFC 5961 §5)";
    TcpRstInvalid = "tcp_rst_invalid", "RST not exactly at RCV.NXT: challenge ACK (RFC 5961 §3)";
    TcpSynInvalid = "tcp_syn_invalid", "SYN on a synchronized connection: challenge ACK (RFC 5961 §4)";
    TcpNoAck = "tcp_no_ack", "segment without ACK on a synchronized connection";
    TcpDuplicate = "tcp_duplicate", "data entirely already received";
    TcpListenOverflow = "tcp_listen_overflow", "accept queue full: SYN or handshake completion dropped";
    TcpSynQueueFull = "tcp_syn_queue_full", "SYN queue full and SYN cookies disabled";
    TcpBadCookie = "tcp_bad_cookie", "ACK to a listener with no valid SYN cookie";
    TcpRxQueueFull = "tcp_rx_queue_full", "connection holds its maximum of received segments";
    TcpOooQueueFull = "tcp_ooo_queue_full", "connection holds its maximum of out-of-order segments";
    TcpDataAfterClose = "tcp_data_after_close", "data for a connection the application closed (reset)";
    TcpIgnored = "tcp_ignored", "segment with nothing to act on in this state";
    NeighborUnresolved = "neighbor_unresolved", "outgoing packet dropped: next hop did not answer ARP";
    NoRoute = "no_route", "outgoing packet dropped: destination off-link and no gateway";
    TxQueueFull = "tx_queue_full", "outgoing control packet dropped: control queue full";
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! counters {
    ($( $(#[$m:meta])* $field:ident = $prom:literal, $help:literal; )*) => {
        /// Protocol counters (monotonic).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Counters {
            $( #[doc = $help] pub $field: u64, )*
            drops: [u64; DropReason::ALL.len()],
        }

        impl Default for Counters {
            fn default() -> Self {
                Counters { $( $field: 0, )* drops: [0; DropReason::ALL.len()] }
            }
        }

        impl Counters {
            /// `(prometheus_name, help, value)` for every counter except drops.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> + '_ {
                [$( ($prom, $help, self.$field), )*].into_iter()
            }

            /// Add another set of counters (per-core counters are summed on read).
            pub fn merge(&mut self, other: &Counters) {
                $( self.$field += other.$field; )*
                for (d, o) in self.drops.iter_mut().zip(other.drops.iter()) {
                    *d += o;
                }
            }
        }
    };
}

counters! {
    rx_frames = "ixora_rx_frames_total", "Frames handed to the stack";
    tx_frames = "ixora_tx_frames_total", "Frames produced by the stack";
    local_frames = "ixora_local_frames_total", "Frames to the stack's own address, taken back without the wire";
    arp_requests_sent = "ixora_arp_requests_sent_total", "ARP requests sent";
    arp_replies_sent = "ixora_arp_replies_sent_total", "ARP replies sent";
    icmp_echo_replies = "ixora_icmp_echo_replies_total", "ICMP echo replies sent";
    icmp_errors_sent = "ixora_icmp_errors_sent_total", "ICMP error messages sent (destination unreachable, reassembly time exceeded)";
    icmp_errors_rate_limited = "ixora_icmp_errors_rate_limited_total", "ICMP errors not sent because of the rate limit";
    ipv4_reasm_reqds = "ixora_ipv4_reasm_reqds_total", "IPv4 fragments received for reassembly (ReasmReqds)";
    ipv4_reasm_oks = "ixora_ipv4_reasm_oks_total", "IPv4 datagrams reassembled (ReasmOKs)";
    ipv4_frag_oks = "ixora_ipv4_frag_oks_total", "IPv4 datagrams sent in fragments (FragOKs)";
    ipv4_frag_creates = "ixora_ipv4_frag_creates_total", "IPv4 fragments sent (FragCreates)";
    udp_in_datagrams = "ixora_udp_in_datagrams_total", "UDP datagrams delivered";
    udp_out_datagrams = "ixora_udp_out_datagrams_total", "UDP datagrams sent";
    tcp_active_opens = "ixora_tcp_active_opens_total", "Connections opened by connect (RFC 4022 tcpActiveOpens)";
    tcp_passive_opens = "ixora_tcp_passive_opens_total", "Connections opened from a listener (tcpPassiveOpens)";
    tcp_attempt_fails = "ixora_tcp_attempt_fails_total", "Opening handshakes that failed (tcpAttemptFails)";
    tcp_estab_resets = "ixora_tcp_estab_resets_total", "Established connections reset (tcpEstabResets)";
    tcp_in_segs = "ixora_tcp_in_segs_total", "TCP segments received (tcpInSegs)";
    tcp_out_segs = "ixora_tcp_out_segs_total", "TCP segments sent (tcpOutSegs)";
    tcp_retrans_segs = "ixora_tcp_retrans_segs_total", "TCP segments retransmitted (tcpRetransSegs)";
    tcp_out_rsts = "ixora_tcp_out_rsts_total", "TCP segments sent with RST (tcpOutRsts)";
    tcp_in_rsts = "ixora_tcp_in_rsts_total", "Acceptable RST segments received";
    tcp_timeouts = "ixora_tcp_timeouts_total", "Retransmission timeouts (TCPTimeouts)";
    tcp_fast_retrans = "ixora_tcp_fast_retrans_total", "Loss recoveries entered on duplicate ACKs or SACK (TCPFastRetrans)";
    tcp_sack_recoveries = "ixora_tcp_sack_recoveries_total", "Loss recoveries driven by SACK (TCPSackRecovery)";
    tcp_challenge_acks = "ixora_tcp_challenge_acks_total", "Challenge ACKs sent (TCPChallengeACK)";
    tcp_challenge_acks_limited = "ixora_tcp_challenge_acks_limited_total", "Challenge ACKs suppressed by the rate limit";
    tcp_acks_skipped = "ixora_tcp_acks_skipped_total", "Unacceptable segments carrying nothing (out of window, failing PAWS) left unanswered: one ACK per 500 ms per connection, against ACK loops (TCPACKSkippedSeq, TCPACKSkippedPAWS)";
    tcp_delayed_acks = "ixora_tcp_delayed_acks_total", "ACKs sent when the delayed-ACK timer fired (DelayedACKs)";
    tcp_listen_overflows = "ixora_tcp_listen_overflows_total", "Handshakes dropped: accept queue full (ListenOverflows)";
    tcp_syncookies_sent = "ixora_tcp_syncookies_sent_total", "SYN cookies sent (SyncookiesSent)";
    tcp_syncookies_recv = "ixora_tcp_syncookies_recv_total", "Valid SYN cookies received (SyncookiesRecv)";
    tcp_syncookies_failed = "ixora_tcp_syncookies_failed_total", "Invalid SYN cookies received (SyncookiesFailed)";
    tcp_zero_window_probes = "ixora_tcp_zero_window_probes_total", "Window probes sent by the persist timer";
    tcp_keepalive_probes = "ixora_tcp_keepalive_probes_total", "Keepalive probes sent";
    tcp_ooo_segments = "ixora_tcp_ooo_segments_total", "Segments queued out of order (TCPOFOQueue)";
    tcp_timewait_recycled = "ixora_tcp_timewait_recycled_total", "TIME-WAIT connections replaced by a new SYN (RFC 6191)";
    tcp_pmtu_reductions = "ixora_tcp_pmtu_reductions_total", "Segment size lowered by ICMP fragmentation-needed (RFC 1191)";
    tcp_loss_probes = "ixora_tcp_loss_probes_total", "Tail loss probes sent (RFC 8985 §7, TCPLossProbes)";
    tcp_dsack_recv = "ixora_tcp_dsack_recv_total", "ACKs received with a D-SACK: data of ours arrived twice (RFC 2883, TCPDSACKRecv)";
    tcp_dsack_undo = "ixora_tcp_dsack_undo_total", "Window reductions given back: every segment their recovery sent again was D-SACKed (TCPDSACKUndo)";
    tcp_spurious_rtos = "ixora_tcp_spurious_rtos_total", "Timeouts found needless and their window cut given back: by timestamps (RFC 3522 Eifel) or, without them, by F-RTO (RFC 5682); TCPSpuriousRTOs";
    tcp_dsack_not_sent = "ixora_tcp_dsack_not_sent_total", "Duplicates not reported by a D-SACK because four others, apart from each other, were already waiting for an ACK each";
}

impl Counters {
    /// Count one drop.
    #[inline]
    pub fn drop(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }

    /// Drops for one reason.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }

    /// Drops by reason, zeros included.
    pub fn drop_iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.drops[r as usize]))
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_described() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::ALL.len());
        assert!(DropReason::ALL.iter().all(|r| !r.description().is_empty()));
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = Counters {
            tcp_in_segs: 3,
            tcp_timewait_recycled: 1,
            ..Default::default()
        };
        a.drop(DropReason::TcpPaws);
        let mut b = a.clone();
        b.merge(&a);
        assert_eq!(b.tcp_in_segs, 6);
        assert_eq!(b.tcp_timewait_recycled, 2);
        assert_eq!(b.drops(DropReason::TcpPaws), 2);
        assert_eq!(b.iter().count(), 44);
    }
}
