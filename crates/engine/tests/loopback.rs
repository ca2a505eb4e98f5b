//! Two engines joined by the in-process loopback wire: an echo service on
//! one, clients on the other; every byte echoed intact, on one and two
//! cores, through the event library.

use ixora_core::wire::ethernet::MacAddr;
use ixora_engine::echo::EchoService;
use ixora_engine::ev::{Closed, Conn, Ctl, EvApp, EvConfig, Handler, Service};
use ixora_engine::{run, EngineConfig};
use ixora_io::loopback;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);

/// `rounds` round trips of `size` bytes, checking every byte.
struct Client {
    conns: usize,
    rounds: usize,
    size: usize,
    done: Arc<AtomicU64>,
    bad: Arc<AtomicU64>,
}

struct ClientConn {
    round: usize,
    rounds: usize,
    size: usize,
    got: usize,
    done: Arc<AtomicU64>,
    bad: Arc<AtomicU64>,
    seed: u8,
}

impl ClientConn {
    fn msg(&self) -> Vec<u8> {
        (0..self.size)
            .map(|k| {
                (k as u8)
                    .wrapping_mul(31)
                    .wrapping_add(self.round as u8 ^ self.seed)
            })
            .collect()
    }
}

impl Handler for ClientConn {
    fn open(&mut self, c: &mut Conn) {
        c.write(&self.msg()).unwrap();
    }
    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize {
        let want = self.msg();
        for &b in data {
            if b != want[self.got] {
                self.bad.fetch_add(1, Ordering::Relaxed);
            }
            self.got += 1;
            if self.got == self.size {
                self.got = 0;
                self.round += 1;
                self.done.fetch_add(1, Ordering::Relaxed);
                if self.round == self.rounds {
                    c.close();
                } else {
                    c.write(&self.msg()).unwrap();
                }
            }
        }
        data.len()
    }
    fn closed(&mut self, why: Closed) {
        if why != Closed::Orderly {
            self.bad.fetch_add(1_000_000, Ordering::Relaxed);
        }
    }
}

impl Service for Client {
    type H = ClientConn;
    fn start(&mut self, ctl: &mut Ctl<ClientConn>) {
        let core = ctl.io().core();
        for k in 0..self.conns {
            let h = ClientConn {
                round: 0,
                rounds: self.rounds,
                size: self.size,
                got: 0,
                done: self.done.clone(),
                bad: self.bad.clone(),
                seed: (k + core * 100) as u8,
            };
            ctl.connect(SocketAddrV4::new(SERVER, 7), h).unwrap();
        }
    }
    fn accept(&mut self, _: u16, _: SocketAddrV4) -> Option<ClientConn> {
        None
    }
}

fn echo_over_loopback(cores: usize, conns: usize, rounds: usize, size: usize) {
    let (a, b) = loopback::pair(
        (MacAddr([2, 0, 0, 0, 7, 1]), MacAddr([2, 0, 0, 0, 7, 2])),
        cores as u32,
        1500,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let mut scfg = EngineConfig::new(SERVER, 24);
    scfg.cores = cores;
    scfg.hugepages = false;
    scfg.pool_chunks = 2048;
    let mut ccfg = scfg.clone();
    ccfg.ip = CLIENT;
    let total = (cores * conns * rounds) as u64;
    std::thread::scope(|s| {
        let st = stop.clone();
        let server = s.spawn(move || {
            run(
                Arc::new(b),
                &scfg,
                |_| EvApp::new(EchoService { port: 7 }, EvConfig::default()),
                st,
            )
        });
        let st = stop.clone();
        let (d, bd) = (done.clone(), bad.clone());
        let client = s.spawn(move || {
            run(
                Arc::new(a),
                &ccfg,
                |_| {
                    EvApp::new(
                        Client {
                            conns,
                            rounds,
                            size,
                            done: d.clone(),
                            bad: bd.clone(),
                        },
                        EvConfig::default(),
                    )
                },
                st,
            )
        });
        let t0 = std::time::Instant::now();
        while done.load(Ordering::Relaxed) < total && t0.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Let the closes finish, then stop both engines.
        std::thread::sleep(std::time::Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let cr = client.join().unwrap().unwrap();
        let sr = server.join().unwrap().unwrap();
        assert_eq!(done.load(Ordering::Relaxed), total, "round trips completed");
        assert_eq!(bad.load(Ordering::Relaxed), 0, "every byte echoed intact");
        let (c, s) = (cr.counters(), sr.counters());
        // Nothing is lost on this wire: no timeouts, no fast retransmits.
        // (Tail loss probes may fire when the test threads are descheduled
        // for longer than the probe timeout; they are harmless duplicates.)
        assert_eq!(c.tcp_timeouts + s.tcp_timeouts, 0);
        assert_eq!(c.tcp_fast_retrans + s.tcp_fast_retrans, 0);
        // The only frames not accepted are the other host's gratuitous ARP
        // and the duplicates such probes create.
        use ixora_core::DropReason::{ArpNotForUs, TcpDuplicate};
        for k in [&c, &s] {
            let drops: Vec<_> = k.drop_iter().filter(|d| d.1 > 0).collect();
            assert!(
                drops
                    .iter()
                    .all(|(r, _)| matches!(r, ArpNotForUs | TcpDuplicate)),
                "{drops:?}"
            );
        }
        if cores > 1 {
            // Connections were spread over the server's cores.
            assert!(
                sr.cores.iter().all(|r| r.counters.tcp_passive_opens > 0),
                "{:?}",
                sr.cores
            );
        }
    });
}

#[test]
fn echo_one_core() {
    echo_over_loopback(1, 4, 200, 64);
}

#[test]
fn echo_two_cores_large_messages() {
    echo_over_loopback(2, 8, 20, 20_000);
}
