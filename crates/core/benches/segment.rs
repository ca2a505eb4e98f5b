//! The core's cost per segment in steady state, in nanoseconds: the receive
//! path (parse, TCP input, zero-copy queueing, the application's
//! `recv_done`, the ACK it owes) and the transmit path (one `tcp_send`,
//! building the segment with payload copy and checksum, processing the ACK
//! that comes back), for full-sized (1448 B) and small (64 B) segments —
//! each application write goes out as its own segment.
//!
//! Two stacks are connected in memory; frames live in a recycled pool, as
//! they do in the dataplane, so allocation is not measured. Checksums are
//! computed and verified in software (no offload).
//!
//! Run: `cargo bench -p ixora-core --bench segment` (or `make bench-core`,
//! which also writes docs/bench/core.{json,md,png}).

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ixora_core::wire::ethernet::MacAddr;
use ixora_core::{ConnHandle, Event, Instant, Stack, StackConfig};
use std::cell::RefCell;
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

/// A frame buffer that returns to its pool when the stack drops it.
struct Frame {
    buf: Vec<u8>,
    len: usize,
    pool: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        let b = std::mem::take(&mut self.buf);
        self.pool.borrow_mut().push(b);
    }
}

type S = Stack<Frame, Bytes>;

struct Pair {
    a: S,
    b: S,
    ha: ConnHandle,
    hb: ConnHandle,
    now: Instant,
    pool: Rc<RefCell<Vec<Vec<u8>>>>,
    data: Bytes,
    msg: usize,
    offered: usize,
}

impl Pair {
    fn new(msg: usize) -> Pair {
        let cfg = |i: u8| {
            let mut c = StackConfig::new(
                MacAddr([2, 0, 0, 0, 0, i]),
                Ipv4Addr::new(198, 18, 0, i),
                24,
            );
            c.tcp.recv_buffer = 4 << 20;
            c.tcp.send_buffer = 4 << 20;
            c
        };
        let now = Instant::from_millis(1);
        let pool = Rc::new(RefCell::new(Vec::new()));
        let mut p = Pair {
            a: Stack::new(cfg(1), now).unwrap(),
            b: Stack::new(cfg(2), now).unwrap(),
            ha: ConnHandle::clone(&dummy()),
            hb: dummy(),
            now,
            pool,
            data: Bytes::from(vec![0x5a; 1 << 20]),
            msg,
            offered: 0,
        };
        p.b.tcp_listen(80, None, 0).unwrap();
        p.ha =
            p.a.tcp_connect(now, 1, SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80))
                .unwrap();
        let mut hb = None;
        for _ in 0..20 {
            p.shuttle_all();
            while let Some(e) = p.b.poll_event() {
                if let Event::Knock { handle, .. } = e {
                    p.b.tcp_accept(handle, 2).unwrap();
                    hb = Some(handle);
                }
            }
            while p.a.poll_event().is_some() {}
        }
        p.hb = hb.expect("connection established");
        p
    }

    fn frame(&self, src: &[u8]) -> Frame {
        let mut buf = self
            .pool
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| vec![0u8; 2048]);
        buf[..src.len()].copy_from_slice(src);
        Frame {
            buf,
            len: src.len(),
            pool: self.pool.clone(),
        }
    }

    /// Move frames both ways until quiet (setup only).
    fn shuttle_all(&mut self) {
        let mut buf = vec![0u8; 2048];
        loop {
            let mut moved = false;
            while let Some(n) = self.a.poll_transmit(self.now, &mut buf) {
                let f = self.frame(&buf[..n]);
                self.b.handle_frame(self.now, f);
                moved = true;
            }
            while let Some(n) = self.b.poll_transmit(self.now, &mut buf) {
                let f = self.frame(&buf[..n]);
                self.a.handle_frame(self.now, f);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    /// One application write of `msg` bytes.
    fn write(&mut self) {
        let start = self.offered % (self.data.len() - self.msg);
        let chunk = self.data.slice(start..start + self.msg);
        if let Ok(n) = self.a.tcp_send(self.now, self.ha, chunk) {
            self.offered += n;
        }
    }
}

fn dummy() -> ConnHandle {
    // Replaced during setup; a handle from a throwaway stack.
    let mut s: Stack<Vec<u8>, Vec<u8>> = Stack::new(
        StackConfig::new(
            MacAddr([2, 0, 0, 0, 0, 9]),
            Ipv4Addr::new(198, 18, 0, 9),
            24,
        ),
        Instant::ZERO,
    )
    .unwrap();
    s.tcp_connect(
        Instant::ZERO,
        0,
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 8), 1),
    )
    .unwrap()
}

/// Run `segments` segments through the pair, timing only `which` side.
fn run(p: &mut Pair, segments: u64, which: Side) -> Duration {
    const BATCH: usize = 32;
    let mut buf = vec![0u8; 2048];
    let mut frames: Vec<Frame> = Vec::with_capacity(BATCH);
    let mut acks: Vec<Frame> = Vec::with_capacity(BATCH);
    let mut tx = Duration::ZERO;
    let mut rx = Duration::ZERO;
    let mut done = 0u64;
    while done < segments {
        p.now += ixora_core::Duration::from_micros(1);
        // Transmit path: one application write, sent as one segment.
        let t = std::time::Instant::now();
        while frames.len() < BATCH {
            p.write();
            match p.a.poll_transmit(p.now, &mut buf) {
                Some(n) => frames.push(p.frame(&buf[..n])),
                None => break,
            }
        }
        tx += t.elapsed();
        let n = frames.len() as u64;
        // Receive path: input, delivery to the application, ACK out.
        let t = std::time::Instant::now();
        for f in frames.drain(..) {
            p.b.handle_frame(p.now, f);
        }
        while let Some(e) = p.b.poll_event() {
            if let Event::Recv {
                handle, readable, ..
            } = e
            {
                let mut sum = 0usize;
                for c in p.b.tcp_recv_chunks(handle).unwrap() {
                    sum += c.len();
                }
                black_box(sum);
                p.b.tcp_recv_done(p.now, handle, readable).unwrap();
            }
        }
        while let Some(n) = p.b.poll_transmit(p.now, &mut buf) {
            acks.push(p.frame(&buf[..n]));
        }
        rx += t.elapsed();
        // Transmit path again: the ACKs coming back.
        let t = std::time::Instant::now();
        for f in acks.drain(..) {
            p.a.handle_frame(p.now, f);
        }
        while p.a.poll_event().is_some() {}
        tx += t.elapsed();
        done += n.max(1);
    }
    match which {
        Side::Rx => rx,
        Side::Tx => tx,
    }
}

#[derive(Clone, Copy)]
enum Side {
    Rx,
    Tx,
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("segment");
    g.measurement_time(Duration::from_secs(4));
    g.warm_up_time(Duration::from_secs(1));
    for msg in [1448usize, 64] {
        for (name, side) in [("rx", Side::Rx), ("tx", Side::Tx)] {
            g.throughput(Throughput::Elements(1));
            g.bench_with_input(BenchmarkId::new(name, msg), &msg, |bch, &msg| {
                let mut p = Pair::new(msg);
                run(&mut p, 10_000, side);
                bch.iter_custom(|iters| run(&mut p, iters, side));
                assert!(p.b.check_invariants().is_ok());
                assert_eq!(p.a.counters().tcp_retrans_segs, 0);
            });
        }
    }
    g.finish();
    eprintln!(
        "per-connection state: {} bytes (data buffers excluded)",
        Stack::<Frame, Bytes>::connection_state_size()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
