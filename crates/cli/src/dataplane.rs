//! Options shared by the dataplane commands, and opening the port.

use clap::{Args, ValueEnum};
use ixora_engine::EngineConfig;
use ixora_io::Port;
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// NIC backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// XDP sockets on a Linux interface (one per queue); Ixora attaches its
    /// own XDP program and removes it on exit. Copy mode on veth.
    #[value(name = "af_xdp")]
    AfXdp,
    /// TPACKET_V3 rings with PACKET_FANOUT hash across queues: works on any
    /// interface.
    #[value(name = "af_packet")]
    AfPacket,
    /// A multi-queue TAP device Ixora creates (`--iface` names it); the
    /// kernel sees the other end of the link.
    #[value(name = "tap")]
    Tap,
    /// A shared-memory wire to another Ixora process: `--iface` is the
    /// Unix socket path; `--shm-role listen` on one side, `connect` on the
    /// other.
    #[value(name = "shm")]
    Shm,
}

/// Role on a shared-memory wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShmRole {
    /// Create the socket and wait for the peer.
    Listen,
    /// Connect to a listening peer.
    Connect,
}

/// XDP attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum XdpAttach {
    /// Native (driver) mode if the driver has it, else generic (skb).
    Auto,
    /// Driver mode only.
    Native,
    /// Generic (skb) mode.
    Skb,
}

/// How to run the dataplane.
#[derive(Debug, Clone, Args)]
pub struct DataplaneArgs {
    /// NIC backend.
    #[arg(long, value_enum, default_value = "af_xdp")]
    pub backend: Backend,
    /// Interface to own (af_xdp, af_packet), TAP device to create (tap),
    /// or Unix socket path (shm).
    #[arg(long)]
    pub iface: String,
    /// Our IPv4 address and prefix length, e.g. 198.18.0.2/24. With a
    /// Linux interface, do not configure this address in Linux as well.
    #[arg(long, value_parser = parse_cidr)]
    pub ip: (Ipv4Addr, u8),
    /// Default gateway (must be on the local subnet).
    #[arg(long)]
    pub gateway: Option<Ipv4Addr>,
    /// Cores (threads), each owning one queue of the interface.
    #[arg(long, default_value_t = 1)]
    pub cores: usize,
    /// Most frames taken per cycle (IX's batch bound B).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Spin when idle for the lowest latency (uses a whole core each)
    /// instead of sleeping until traffic arrives.
    #[arg(long)]
    pub poll: bool,
    /// Pin core i to CPU cpus[i], e.g. --cpus 0,1.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// XDP attach mode (af_xdp).
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpAttach,
    /// Compute every TCP checksum in software (af_xdp). By default Ixora
    /// leaves them to the kernel through AF_XDP TX metadata, which hands
    /// them to the interface's checksum offload (on a veth they are never
    /// computed, as for the kernel's own TCP) or completes them itself; a
    /// kernel without TX metadata refuses it at start, and then Ixora
    /// computes them.
    #[arg(long)]
    pub no_tx_checksum_offload: bool,
    /// Role on the shared-memory wire (shm).
    #[arg(long, value_enum, default_value = "listen")]
    pub shm_role: ShmRole,
    /// Packet buffers per core.
    #[arg(long, default_value_t = 8192)]
    pub buffers: u32,
    /// Entries of each of a queue's four AF_XDP rings (fill, receive,
    /// transmit, completion; af_xdp): a power of two, 64 to 65536. The
    /// receive ring holds what arrives while the service is off its CPU;
    /// a burst longer than it (or than the fill ring's buffers, at most
    /// half of --buffers) is dropped by the kernel, which `ixora stats`
    /// shows as kernel_rx_ring_full and kernel_fill_ring_empty.
    #[arg(long, value_parser = parse_queue_entries, default_value_t = 2048)]
    pub queue_entries: u32,
    /// Local ports for outgoing connections, LOW-HIGH (the IANA dynamic
    /// range by default). A port still in TIME-WAIT is reused for a new
    /// connection after a second, with timestamps.
    #[arg(long, value_parser = parse_port_range, default_value = "49152-65535")]
    pub local_ports: (u16, u16),
}

/// Parse `low-high`.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?} is not a port range, e.g. 49152-65535"))?;
    let lo: u16 = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not a port"))?;
    let hi: u16 = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a port"))?;
    if lo == 0 || lo > hi {
        return Err(format!("{s:?}: want 1 <= low <= high <= 65535"));
    }
    Ok((lo, hi))
}

/// Parse a ring's entry count: a power of two in 64..=65536.
pub fn parse_queue_entries(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of ring entries"))?;
    if !n.is_power_of_two() || !(64..=65536).contains(&n) {
        return Err(format!(
            "{n} ring entries: want a power of two from 64 to 65536, e.g. 4096"
        ));
    }
    Ok(n)
}

/// Parse `a.b.c.d/len`.
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (ip, len) = s.split_once('/').ok_or_else(|| {
        format!("{s:?} is not an address with a prefix length, e.g. 198.18.0.2/24")
    })?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| (1..=32).contains(l))
        .ok_or_else(|| format!("prefix length {len:?} is not in 1..=32"))?;
    Ok((ip, len))
}

impl DataplaneArgs {
    /// The engine configuration these options describe.
    pub fn engine_config(&self) -> EngineConfig {
        let mut c = EngineConfig::new(self.ip.0, self.ip.1);
        c.gateway = self.gateway;
        c.cores = self.cores;
        c.batch = self.batch;
        c.poll = self.poll;
        c.cpus = self.cpus.clone();
        c.pool_chunks = self.buffers;
        c.tcp.ephemeral_ports = self.local_ports;
        c
    }
}

/// Stop flag set by SIGINT and SIGTERM.
pub fn stop_on_signals() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    stop
}

/// Open the port the options name.
pub fn open_port(a: &DataplaneArgs) -> std::io::Result<Arc<dyn Port>> {
    crate::backends::open(a)
}
