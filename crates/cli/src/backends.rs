//! Opening a port for the backend named on the command line.

use crate::dataplane::{Backend, DataplaneArgs, ShmRole, XdpAttach};
use ixora_io::{af_packet, af_xdp, shm, tap, Port};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Open the port `a` describes, one queue per core.
pub fn open(a: &DataplaneArgs) -> io::Result<Arc<dyn Port>> {
    let queues = a.cores.max(1) as u32;
    Ok(match a.backend {
        Backend::AfXdp => {
            let mode = match a.xdp_mode {
                XdpAttach::Auto => af_xdp::XdpMode::Auto,
                XdpAttach::Native => af_xdp::XdpMode::Native,
                XdpAttach::Skb => af_xdp::XdpMode::Skb,
            };
            Arc::new(af_xdp::AfXdpPort::open(
                &a.iface,
                af_xdp::AfXdpConfig {
                    queues: Some(queues),
                    mode,
                    tx_checksum_offload: !a.no_tx_checksum_offload,
                    ring_size: a.queue_entries,
                    ..af_xdp::AfXdpConfig::default()
                },
            )?)
        }
        Backend::AfPacket => Arc::new(af_packet::AfPacketPort::open(
            &a.iface,
            af_packet::AfPacketConfig {
                queues,
                // Per-frame slots: no wait for a block timer on a quiet
                // link (the block ring adds ~0.5 ms per frame below line
                // rate).
                rx_ring: af_packet::RxRing::Frames,
                ..af_packet::AfPacketConfig::default()
            },
        )?),
        Backend::Tap => Arc::new(tap::TapPort::create(
            Some(&a.iface),
            tap::TapConfig {
                queues,
                ..tap::TapConfig::default()
            },
        )?),
        Backend::Shm => {
            let path = Path::new(&a.iface);
            match a.shm_role {
                ShmRole::Listen => {
                    eprintln!("ixora: waiting for the peer on {}", path.display());
                    Arc::new(
                        shm::ShmPort::listen(
                            path,
                            shm::ShmConfig {
                                queues,
                                ..shm::ShmConfig::default()
                            },
                        )?
                        .accept(ixora_io::SHM_ACCEPT_TIMEOUT)?,
                    )
                }
                ShmRole::Connect => Arc::new(shm::ShmPort::connect(
                    path,
                    std::time::Duration::from_secs(30),
                )?),
            }
        }
    })
}
