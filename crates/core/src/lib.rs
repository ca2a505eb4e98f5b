//! Ixora's protocol core: ARP, IPv4, ICMPv4, UDP and TCP, **sans I/O**.
//!
//! The core has no clock, no randomness and no I/O. A caller — the
//! dataplane engine, the simulator, a test — drives a [`Stack`] through a
//! handful of verbs and decides everything about time and packets:
//!
//! | verb | when to call it |
//! |---|---|
//! | [`Stack::handle_frame`] | a frame arrived from the link |
//! | [`Stack::handle_timeout`] | the time from [`Stack::poll_timeout`] has come |
//! | [`Stack::poll_transmit`] | repeatedly, until `None`, after any other call |
//! | [`Stack::poll_event`] | repeatedly, until `None`: events for the application |
//! | `tcp_*` / `udp_*` | the application's batched calls (IX Table 1) |
//!
//! Time is an [`Instant`] passed in; the keyed hash for initial sequence
//! numbers, SYN cookies and ports takes its key from [`StackConfig::secret`].
//! The same code runs in the dataplane and in the simulated network.
//!
//! Buffers are generic. `R` is a received frame the stack may keep: TCP
//! payload is handed to the application in place (IX zero-copy receive) and
//! released by `tcp_recv_done`. `T` is an application buffer given to
//! `tcp_send`: kept, not copied, until the peer acknowledges it, then
//! dropped. Use a reference-counted or pool-backed type for both.
//!
//! Every frame that is not fully accepted is counted under a
//! [`DropReason`]; no input panics.
//!
//! IPv4 datagrams of UDP and ICMP are reassembled from fragments and
//! fragmented to the MTU ([`frag`]); TCP in fragments is a counted drop (TCP
//! sizes its segments to the path: RFC 1191 reductions on ICMP
//! fragmentation-needed).
//!
//! TCP urgent data (RFC 9293 §3.8.5) is marked, not taken out of the
//! stream: the urgent byte stays in line and [`Event::Urgent`] says where it
//! is (the sockets service keeps it apart for a program that asks, as
//! Linux's `SO_OOBINLINE` off).
//!
//! Not implemented (yet): IPv6, path-MTU probing (RFC 4821), ECN, TCP Fast
//! Open, SACK reneging detection.

#![deny(unsafe_code)]

pub use ixora_wire as wire;

mod arp;
pub mod config;
pub mod counters;
pub mod frag;
mod stack;
pub mod tcp;
pub mod time;
pub mod wheel;

pub use config::{CcAlgorithm, IpOpts, StackConfig, TcpConfig};
pub use counters::{Counters, DropReason};
pub use stack::{Datagram, Event, Stack, UdpHandle, MAX_UDP_PAYLOAD};
pub use tcp::{ConnHandle, DeadReason, State, TcpInfo};
pub use time::{Duration, Instant};

use std::net::Ipv4Addr;

/// Errors of the application-facing calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The handle does not name a live connection or socket of this stack.
    InvalidHandle,
    /// The port is already bound or listened on.
    AddrInUse,
    /// No free ephemeral port for this destination.
    NoPorts,
    /// The operation is not valid in the connection's current state.
    InvalidState,
    /// The destination is not reachable (no route, or not a unicast address).
    Unreachable,
    /// A queue is full; retry after progress.
    WouldBlock,
    /// The datagram does not fit the MTU.
    MessageTooLong,
    /// An argument is out of range (port 0 where one is needed, ...).
    InvalidArgument,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::InvalidHandle => "invalid or stale handle",
            Error::AddrInUse => "address in use",
            Error::NoPorts => "no free ephemeral port",
            Error::InvalidState => "operation invalid in this connection state",
            Error::Unreachable => "destination unreachable",
            Error::WouldBlock => "queue full, try again",
            Error::MessageTooLong => "message too long for the MTU",
            Error::InvalidArgument => "invalid argument",
        })
    }
}

impl std::error::Error for Error {}

/// Are `a` and `b` on the same /`prefix_len` subnet?
pub fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix_len: u8) -> bool {
    let mask = if prefix_len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix_len.min(32)))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

/// A `BuildHasher` keyed with the stack secret (SipHash-1-3): lookups that
/// attackers choose keys for (the connection table) stay O(1), and the
/// table is deterministic for a given secret.
#[derive(Clone, Debug)]
pub(crate) struct KeyedState {
    k0: u64,
    k1: u64,
}

impl KeyedState {
    pub fn new(secret: [u8; 16]) -> KeyedState {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&secret[..8]);
        b.copy_from_slice(&secret[8..]);
        // Distinct from the keys used for ISNs and cookies.
        KeyedState {
            k0: u64::from_le_bytes(a) ^ 0x7461_626c_6568_6173,
            k1: u64::from_le_bytes(b),
        }
    }
}

impl std::hash::BuildHasher for KeyedState {
    type Hasher = siphasher::sip::SipHasher13;
    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(self.k0, self.k1)
    }
}
