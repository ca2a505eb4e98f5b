//! An in-process wire between two ports, for tests and examples: queue `i`
//! of one end delivers to queue `i` of the other. Frames are copied across
//! (each end has its own pools); a mutex guards each direction, so this is
//! for correctness, not speed.

use crate::sys::EventFd;
use crate::{Caps, PacketBuf, Pool, Port, Queue};
use ixora_wire::ethernet::MacAddr;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// One direction of one queue: frames and the receiver's doorbell.
struct LaneInner {
    frames: Mutex<VecDeque<Vec<u8>>>,
    bell: EventFd,
}

type Lane = Arc<LaneInner>;

/// One end of a loopback wire.
pub struct LoopbackPort {
    mac: MacAddr,
    rx: Vec<Lane>,
    tx: Vec<Lane>,
    max_frame: usize,
}

/// Most frames waiting in one direction of one queue before more are
/// dropped (a full device queue).
const LANE_LIMIT: usize = 4096;

/// Two ports joined by `queues` lanes each way.
pub fn pair(macs: (MacAddr, MacAddr), queues: u32, mtu: usize) -> (LoopbackPort, LoopbackPort) {
    let lanes = |n: u32| -> Vec<Lane> {
        (0..n)
            .map(|_| {
                Arc::new(LaneInner {
                    frames: Mutex::new(VecDeque::new()),
                    bell: EventFd::new().expect("eventfd"),
                })
            })
            .collect()
    };
    let ab = lanes(queues);
    let ba = lanes(queues);
    let max_frame = mtu + 18;
    (
        LoopbackPort {
            mac: macs.0,
            rx: ba.clone(),
            tx: ab.clone(),
            max_frame,
        },
        LoopbackPort {
            mac: macs.1,
            rx: ab,
            tx: ba,
            max_frame,
        },
    )
}

impl Port for LoopbackPort {
    fn caps(&self) -> Caps {
        Caps {
            backend: "loopback",
            queues: self.rx.len() as u32,
            zero_copy: false,
            flow_steering: false,
            rx_checksum_unreliable: false,
            tx_checksum_offload: false,
            tx_headroom: 0,
            max_frame: self.max_frame,
            note: "in-process loopback wire (copies frames)".into(),
        }
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn open_queue(&self, queue: u32, pool: &Pool) -> io::Result<Box<dyn Queue>> {
        let q = queue as usize;
        if q >= self.rx.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "loopback port has {} queues, not {}",
                    self.rx.len(),
                    queue + 1
                ),
            ));
        }
        Ok(Box::new(LoopbackQueue {
            rx: self.rx[q].clone(),
            tx: self.tx[q].clone(),
            pool: pool.clone(),
        }))
    }
}

struct LoopbackQueue {
    rx: Lane,
    tx: Lane,
    pool: Pool,
}

impl Queue for LoopbackQueue {
    fn rx_burst(&mut self, out: &mut Vec<PacketBuf>, max: usize) -> io::Result<usize> {
        let mut lane = self.rx.frames.lock().unwrap_or_else(|e| e.into_inner());
        if lane.is_empty() {
            self.rx.bell.drain();
        }
        let mut n = 0;
        while n < max {
            let Some(f) = lane.front() else { break };
            let Some(b) = self.pool.copy_in(f) else { break };
            lane.pop_front();
            out.push(b);
            n += 1;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, frames: &mut Vec<PacketBuf>) -> io::Result<usize> {
        let mut lane = self.tx.frames.lock().unwrap_or_else(|e| e.into_inner());
        let n = frames.len();
        for f in frames.drain(..) {
            if lane.len() < LANE_LIMIT {
                lane.push_back(f.as_slice().to_vec());
            }
        }
        drop(lane);
        if n > 0 {
            self.tx.bell.ring();
        }
        Ok(n)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.rx.bell.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolConfig;

    #[test]
    fn frames_cross() {
        let (a, b) = pair(
            (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])),
            2,
            1500,
        );
        let cfg = PoolConfig {
            chunks: 8,
            hugepages: false,
            ..PoolConfig::default()
        };
        let (pa, pb) = (Pool::new(cfg).unwrap(), Pool::new(cfg).unwrap());
        let mut qa = a.open_queue(1, &pa).unwrap();
        let mut qb = b.open_queue(1, &pb).unwrap();
        assert!(b.open_queue(2, &pb).is_err());
        let mut out = vec![pa.copy_in(b"ping").unwrap()];
        assert_eq!(qa.tx_burst(&mut out).unwrap(), 1);
        assert!(out.is_empty());
        assert_eq!(pa.available(), 8);
        let mut got = vec![];
        assert_eq!(qb.rx_burst(&mut got, 64).unwrap(), 1);
        assert_eq!(got[0].as_slice(), b"ping");
    }
}
