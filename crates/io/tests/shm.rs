//! Tests of the shared-memory wire (`ixora_io::shm`): two threads, two
//! processes (the test binary re-runs itself as the child), a misbehaving
//! peer, a dying peer, and sleeping on the doorbell.
//!
//! Socket paths live under a per-test directory
//! `/tmp/ixora-shm-test-<pid>-<n>/`, removed at the end. Every loop is
//! bounded in count and time. The heavy tests take one lock so that they do
//! not compete for the (two) CPUs.

use ixora_io::shm::{ShmConfig, ShmPort, ShmStats};
use ixora_io::{PacketBuf, Pool, PoolConfig, Port, Queue};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "IXORA_SHM_TEST_CHILD";

static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A per-test temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(format!("/tmp/ixora-shm-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (by its pid) and reaped when dropped.
struct ChildGuard(Child);

impl ChildGuard {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Run this test binary again as a child playing `role` against `path`.
fn spawn_child(role: &str, path: &Path) -> ChildGuard {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{role}:{}", path.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child test process");
    ChildGuard(child)
}

fn pin_to(cpu: usize) {
    let n = thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu % n).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// Both ends of a wire in this process: (listener side, connector side).
fn pair(dir: &TempDir, cfg: ShmConfig) -> (ShmPort, ShmPort) {
    let path = dir.path("wire");
    let l = ShmPort::listen(&path, cfg).unwrap();
    let p2 = path.clone();
    let t = thread::spawn(move || ShmPort::connect(&p2, Duration::from_secs(10)));
    let a = l.accept(Duration::from_secs(10)).unwrap();
    let b = t.join().unwrap().unwrap();
    assert!(!path.exists(), "the socket file is removed after accept");
    (a, b)
}

/// Frame `seq` of direction `dir`: a varying length in 14..=2048 and
/// bytes derived from (seq, dir).
fn frame_len(seq: u64) -> usize {
    14 + (seq.wrapping_mul(7919) % 2035) as usize
}

fn fill(buf: &mut PacketBuf, seq: u64, dir: u8, len: usize) {
    let s = buf.spare_mut();
    s[..8].copy_from_slice(&seq.to_le_bytes());
    s[8] = dir;
    for (i, b) in s[9..len].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_mul(31).wrapping_add(i * 7) as u8 ^ dir;
    }
    buf.set_len(len);
}

fn verify(buf: &PacketBuf, seq: u64, dir: u8, len: usize) {
    let s = buf.as_slice();
    assert_eq!(s.len(), len, "length of frame {seq}");
    assert_eq!(u64::from_le_bytes(s[..8].try_into().unwrap()), seq);
    assert_eq!(s[8], dir);
    for (i, b) in s[9..].iter().enumerate() {
        let want = (seq as usize).wrapping_mul(31).wrapping_add(i * 7) as u8 ^ dir;
        assert_eq!(*b, want, "frame {seq} byte {}", i + 9);
    }
}

/// One side of the two-thread exchange: send `n` frames, receive `n`,
/// verify every byte, then wait for all chunks to come back.
fn exchange(port: &ShmPort, me: u8, n: u64, done: &Barrier) -> ShmStats {
    let pool = port.pool(0, port.pool_config()).unwrap();
    let mut q = port.open_queue(0, &pool).unwrap();
    let chunks = pool.chunks() as usize;
    let peer = 1 - me;
    let (mut sent, mut got) = (0u64, 0u64);
    let mut out: Vec<PacketBuf> = Vec::with_capacity(64);
    let mut rx: Vec<PacketBuf> = Vec::with_capacity(64);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut rounds = 0u64;
    while sent < n || got < n || !out.is_empty() {
        rounds += 1;
        assert!(
            Instant::now() < deadline && rounds < 200_000_000,
            "exchange stuck: side {me} sent {sent} got {got}"
        );
        q.reclaim();
        while sent < n && out.len() < 32 {
            let Some(mut b) = pool.alloc() else { break };
            let len = frame_len(sent);
            fill(&mut b, sent, me, len);
            out.push(b);
            sent += 1;
        }
        q.tx_burst(&mut out).unwrap();
        q.rx_burst(&mut rx, 64).unwrap();
        for b in rx.drain(..) {
            verify(&b, got, peer, frame_len(got));
            got += 1;
        }
    }
    // Every chunk lent to the peer comes back (the peer keeps polling
    // until both sides reach the barrier).
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.lent() > 0 {
        assert!(Instant::now() < deadline, "chunks never came back");
        q.reclaim();
        let _ = q.rx_burst(&mut rx, 64).unwrap();
        thread::yield_now();
    }
    assert!(rx.is_empty());
    q.reclaim();
    assert_eq!(pool.available(), chunks, "side {me}: pool fully returned");
    done.wait();
    port.stats(0).unwrap()
}

#[test]
fn two_threads_exchange_100k_frames_both_ways() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 256,
        chunks: 512,
        chunk_size: 2048,
    };
    let path = dir.path("wire");
    let listener = ShmPort::listen(&path, cfg).unwrap();
    const N: u64 = 100_000;
    let done = Arc::new(Barrier::new(2));
    let d2 = done.clone();
    let t = thread::spawn(move || {
        let port = listener.accept(Duration::from_secs(10)).unwrap();
        exchange(&port, 0, N, &d2)
    });
    let port = ShmPort::connect(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(
        port.config(),
        cfg,
        "the connector adopts the listener's config"
    );
    let sb = exchange(&port, 1, N, &done);
    let sa = t.join().unwrap();
    for s in [sa, sb] {
        assert_eq!((s.rx_frames, s.tx_frames), (N, N), "{s:?}");
        assert_eq!(
            (s.bad_descriptors, s.bad_indices, s.bad_returns),
            (0, 0, 0),
            "{s:?}"
        );
        assert_eq!(
            (s.rx_dropped, s.tx_dropped, s.tx_copied),
            (0, 0, 0),
            "{s:?}"
        );
    }
    eprintln!("listener {sa:?}\nconnector {sb:?}");
}

/// The child side of the two-process tests (runs only when spawned with
/// the environment variable set): connect and echo every frame back until
/// the parent goes away.
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (role, path) = spec.split_once(':').expect("role:path");
    assert_eq!(role, "echo");
    pin_to(1);
    let port = ShmPort::connect(Path::new(path), Duration::from_secs(30)).unwrap();
    let pool = port.pool(0, port.pool_config()).unwrap();
    let mut q = port.open_queue(0, &pool).unwrap();
    let mut bufs = Vec::with_capacity(64);
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        for _ in 0..1024 {
            q.reclaim();
            if q.rx_burst(&mut bufs, 64).is_err() {
                return;
            }
            while !bufs.is_empty() {
                if q.tx_burst(&mut bufs).is_err() {
                    return;
                }
                q.reclaim();
            }
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Send one 64-byte frame and wait for its echo; returns the round trip.
fn ping(q: &mut Box<dyn Queue>, pool: &Pool, seq: u64, rx: &mut Vec<PacketBuf>) -> Duration {
    let mut b = pool.alloc().expect("pool has a buffer");
    fill(&mut b, seq, 0, 64);
    let mut out = vec![b];
    let t0 = Instant::now();
    q.tx_burst(&mut out).unwrap();
    assert!(out.is_empty());
    let mut spins = 0u64;
    while rx.is_empty() {
        spins += 1;
        assert!(spins < 2_000_000_000, "no echo");
        q.rx_burst(rx, 1).unwrap();
        if spins.is_multiple_of(1_000_000) {
            assert!(t0.elapsed() < Duration::from_secs(10), "no echo for 10 s");
        }
    }
    let rtt = t0.elapsed();
    verify(&rx[0], seq, 0, 64);
    rx.clear();
    q.reclaim();
    rtt
}

#[test]
fn two_processes_round_trip_latency() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = heavy();
    let dir = TempDir::new();
    let path = dir.path("wire");
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 1024,
        chunks: 2048,
        chunk_size: 2048,
    };
    let listener = ShmPort::listen(&path, cfg).unwrap();
    let mut child = spawn_child("echo", &path);
    let port = listener.accept(Duration::from_secs(30)).unwrap();
    assert_eq!(port.peer_pid(), Some(child.0.id()));
    pin_to(0);
    let pool = port.pool(0, port.pool_config()).unwrap();
    let mut q = port.open_queue(0, &pool).unwrap();
    let mut rx = Vec::with_capacity(64);

    for i in 0..10_000 {
        ping(&mut q, &pool, i, &mut rx);
    }
    const N: usize = 100_000;
    let mut rtts = Vec::with_capacity(N);
    let t = Instant::now();
    for i in 0..N as u64 {
        rtts.push(ping(&mut q, &pool, i, &mut rx).as_nanos() as u64);
    }
    let total = t.elapsed();
    rtts.sort_unstable();
    eprintln!(
        "shm 64-byte round trip over {N}: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns; \
         {:.0} round trips/s",
        pct(&rtts, 0.50),
        pct(&rtts, 0.99),
        pct(&rtts, 0.999),
        rtts[N - 1],
        N as f64 / total.as_secs_f64()
    );

    // Throughput: keep a window of frames in flight, count echoes.
    const WINDOW: u64 = 512;
    const FRAMES: u64 = 2_000_000;
    let (mut sent, mut got) = (0u64, 0u64);
    let mut out = Vec::with_capacity(64);
    let t = Instant::now();
    let limit = Duration::from_secs(10);
    while got < FRAMES && t.elapsed() < limit {
        for _ in 0..64 {
            q.reclaim();
            while sent < FRAMES && sent - got < WINDOW && out.len() < 32 {
                let Some(mut b) = pool.alloc() else { break };
                fill(&mut b, sent, 0, 64);
                out.push(b);
                sent += 1;
            }
            q.tx_burst(&mut out).unwrap();
            q.rx_burst(&mut rx, 64).unwrap();
            got += rx.len() as u64;
            rx.clear();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "shm 64-byte echo throughput: {got} frames echoed in {secs:.3} s = {:.2} M frames/s \
         each way",
        got as f64 / secs / 1e6
    );
    assert!(got > 0);
    let s = port.stats(0).unwrap();
    eprintln!("parent {s:?}");
    assert_eq!((s.bad_descriptors, s.bad_indices, s.bad_returns), (0, 0, 0));
    child.kill();
}

#[test]
fn misbehaving_peer_is_contained() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 64,
        chunks: 64,
        chunk_size: 2048,
    };
    let (a, b) = pair(&dir, cfg);
    let pa = a.pool(0, a.pool_config()).unwrap();
    let pb = b.pool(0, b.pool_config()).unwrap();
    let mut qb = b.open_queue(0, &pb).unwrap();
    let raw = a.raw_tx_ring(0).unwrap();
    let region = raw.peer_region_len() as u64;
    assert_eq!(region, cfg.region_len() as u64);
    let chunk = cfg.chunk_size as u64;
    let garbage: [(u64, u32); 8] = [
        (region + 4096, 64),                // beyond the region
        (0, u32::MAX),                      // huge length
        (chunk - 10, 100),                  // crosses a chunk boundary
        (region - 10, 64),                  // runs off the end
        (u64::MAX - 5, 64),                 // offset + len overflows
        (64, 0),                            // empty
        (0, 9019),                          // longer than any frame
        (region - chunk + 1, chunk as u32), // last chunk, one byte too far
    ];
    let start = raw.prod();
    for (i, (off, len)) in garbage.iter().enumerate() {
        raw.write(start + i as u32, *off, *len);
    }
    let end = start + garbage.len() as u32;
    raw.publish(end);
    let mut rx = Vec::new();
    assert_eq!(qb.rx_burst(&mut rx, 64).unwrap(), 0);
    let s = b.stats(0).unwrap();
    assert_eq!(s.bad_descriptors, garbage.len() as u64, "{s:?}");
    assert_eq!(raw.cons(), end, "bad descriptors are consumed");

    // A producer index racing ahead: read nothing, count, keep going.
    for ahead in [1u32 << 31, cfg.ring_size + 1, u32::MAX] {
        raw.publish(end.wrapping_add(ahead));
        assert_eq!(qb.rx_burst(&mut rx, 64).unwrap(), 0);
        assert_eq!(raw.cons(), end, "nothing consumed for ahead={ahead}");
    }
    let s = b.stats(0).unwrap();
    assert_eq!(s.bad_indices, 3, "{s:?}");
    assert_eq!(s.bad_descriptors, garbage.len() as u64);
    raw.publish(end);

    // Good frames still flow, from a queue resuming at the published index.
    let mut qa = a.open_queue(0, &pa).unwrap();
    let mut out: Vec<PacketBuf> = (0..10)
        .map(|i| {
            let mut f = pa.alloc().unwrap();
            fill(&mut f, i, 7, frame_len(i));
            f
        })
        .collect();
    assert_eq!(qa.tx_burst(&mut out).unwrap(), 10);
    let mut got = 0;
    for _ in 0..100 {
        qb.rx_burst(&mut rx, 64).unwrap();
        if rx.len() == 10 {
            break;
        }
    }
    for (i, f) in rx.drain(..).enumerate() {
        verify(&f, i as u64, 7, frame_len(i as u64));
        got += 1;
    }
    assert_eq!(got, 10);
    qb.reclaim(); // end of the receiver's cycle: returns are published
    qa.reclaim();
    assert_eq!(pa.available(), cfg.chunks as usize, "all chunks returned");
    assert_eq!(pa.lent(), 0);
    let s = a.stats(0).unwrap();
    assert_eq!(s.bad_returns, 0, "{s:?}");
    assert!(a.peer_alive() && b.peer_alive());
}

#[test]
fn garbage_returns_are_refused() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 16,
        chunks: 32,
        chunk_size: 2048,
    };
    let (a, b) = pair(&dir, cfg);
    let pa = a.pool(0, a.pool_config()).unwrap();
    let mut qa = a.open_queue(0, &pa).unwrap();
    // Lend two chunks to the peer (b never opens its queue: b plays the
    // misbehaving receiver through its return ring).
    let mut out = vec![
        pa.copy_in(&[1; 100]).unwrap(),
        pa.copy_in(&[2; 100]).unwrap(),
    ];
    let lent: Vec<u64> = out.iter().map(|f| f.addr()).collect();
    assert_eq!(qa.tx_burst(&mut out).unwrap(), 2);
    assert_eq!((pa.lent(), pa.available()), (2, 30));
    let ret = b.raw_return_ring(0).unwrap();
    let region = cfg.region_len() as u64;
    let garbage = [
        region,      // beyond the region
        u64::MAX,    // far beyond
        5 * 2048,    // a chunk that was never lent
        lent[0],     // a real one ...
        lent[0] + 7, // ... returned twice (inside the same chunk)
    ];
    let p = ret.prod();
    for (i, off) in garbage.iter().enumerate() {
        ret.write(p + i as u32, *off);
    }
    ret.publish(p + garbage.len() as u32);
    qa.reclaim();
    let s = a.stats(0).unwrap();
    assert_eq!(s.bad_returns, 4, "{s:?}");
    assert_eq!(
        (pa.lent(), pa.available()),
        (1, 31),
        "only the real one came back"
    );
    // A producer index racing ahead is ignored.
    let p = ret.prod();
    ret.publish(p.wrapping_add(1 << 31));
    qa.reclaim();
    assert_eq!(a.stats(0).unwrap().bad_indices, 1);
    ret.write(p, lent[1]);
    ret.publish(p + 1);
    qa.reclaim();
    assert_eq!((pa.lent(), pa.available()), (0, 32));
    // Fresh buffers are whole and distinct: nothing was aliased.
    let all: Vec<PacketBuf> = (0..32).map(|_| pa.alloc().unwrap()).collect();
    let mut idx: Vec<u32> = all.iter().map(|f| f.index()).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), 32);
}

#[test]
fn peer_process_death_mid_transfer() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let _g = heavy();
    let dir = TempDir::new();
    let path = dir.path("wire");
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 256,
        chunks: 1024,
        chunk_size: 2048,
    };
    let listener = ShmPort::listen(&path, cfg).unwrap();
    let mut child = spawn_child("echo", &path);
    let port = listener.accept(Duration::from_secs(30)).unwrap();
    let pool = port.pool(0, port.pool_config()).unwrap();
    let mut q = port.open_queue(0, &pool).unwrap();
    let (mut sent, mut got) = (0u64, 0u64);
    let mut out = Vec::new();
    let mut rx = Vec::new();
    let mut killed_at = None;
    let mut error = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rounds = 0u64;
    while Instant::now() < deadline && rounds < 100_000_000 {
        rounds += 1;
        q.reclaim();
        while out.len() < 32 {
            let Some(mut b) = pool.alloc() else { break };
            fill(&mut b, sent, 0, frame_len(sent));
            out.push(b);
            sent += 1;
        }
        if let Err(e) = q.tx_burst(&mut out) {
            error = Some(e);
            break;
        }
        match q.rx_burst(&mut rx, 64) {
            Ok(_) => {
                for f in rx.drain(..) {
                    verify(&f, got, 0, frame_len(got));
                    got += 1;
                }
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
        if killed_at.is_none() && got >= 20_000 {
            child.kill(); // SIGKILL by pid, mid-transfer
            killed_at = Some(Instant::now());
        }
    }
    let killed_at = killed_at.expect("transfer reached the kill point");
    let e = error.expect("rx_burst or tx_burst reported the death");
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    eprintln!(
        "peer death noticed {:?} after the kill ({got} frames echoed before)",
        killed_at.elapsed()
    );
    assert!(!port.peer_alive());
    // Everything keeps failing fast; nothing hangs.
    assert!(q.rx_burst(&mut rx, 64).is_err());
    assert!(q.tx_burst(&mut out).is_err());
    // The doorbell fd wakes a sleeper (hang-up).
    assert!(ixora_io::sys::wait_readable(q.poll_fd().unwrap(), 1000).unwrap());
    // The chunks the dead peer held are ours again.
    drop(out);
    q.reclaim();
    assert_eq!(pool.lent(), 0);
    assert_eq!(pool.available(), cfg.chunks as usize);
}

#[test]
fn peer_dropping_its_port_is_noticed() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 64,
        chunks: 128,
        chunk_size: 2048,
    };
    let (a, b) = pair(&dir, cfg);
    let pa = a.pool(0, a.pool_config()).unwrap();
    let mut qa = a.open_queue(0, &pa).unwrap();
    {
        let pb = b.pool(0, b.pool_config()).unwrap();
        let _qb = b.open_queue(0, &pb).unwrap();
        let mut out: Vec<PacketBuf> = (0..10).map(|_| pa.copy_in(&[1; 60]).unwrap()).collect();
        assert_eq!(qa.tx_burst(&mut out).unwrap(), 10);
        assert_eq!(pa.lent(), 10);
    }
    drop(b);
    let mut out: Vec<PacketBuf> = (0..500).filter_map(|_| pa.copy_in(&[2; 60])).collect();
    let mut rx = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        assert!(Instant::now() < deadline, "death never noticed");
        if let Err(e) = qa.tx_burst(&mut out) {
            break e;
        }
        if let Err(e) = qa.rx_burst(&mut rx, 64) {
            break e;
        }
        qa.reclaim();
    };
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    assert!(!a.peer_alive());
    drop(out);
    qa.reclaim();
    assert_eq!(pa.available(), cfg.chunks as usize);
}

/// Poll until the queue has armed its doorbell (the fd stops being
/// readable), bounded.
fn poll_until_armed(q: &mut Box<dyn Queue>) {
    let fd = q.poll_fd().unwrap();
    let mut rx = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < deadline, "queue never armed its doorbell");
        assert_eq!(q.rx_burst(&mut rx, 64).unwrap(), 0);
        q.reclaim();
        if !ixora_io::sys::wait_readable(fd, 0).unwrap() {
            return;
        }
        thread::sleep(Duration::from_micros(20));
    }
}

#[test]
fn idle_consumer_sleeps_and_doorbell_wakes_it() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 64,
        chunks: 64,
        chunk_size: 2048,
    };
    for sleep_after in [Duration::from_micros(50), Duration::ZERO] {
        let (a, b) = pair(&dir, cfg);
        b.set_sleep_after(sleep_after);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel::<Instant>();
        const ROUNDS: u64 = 5;
        let producer = thread::spawn(move || {
            let pa = a.pool(0, a.pool_config()).unwrap();
            let mut qa = a.open_queue(0, &pa).unwrap();
            for i in 0..ROUNDS {
                go_rx.recv_timeout(Duration::from_secs(10)).unwrap();
                thread::sleep(Duration::from_millis(20));
                let mut f = pa.alloc().unwrap();
                fill(&mut f, i, 3, 100);
                let mut out = vec![f];
                let t = Instant::now();
                assert_eq!(qa.tx_burst(&mut out).unwrap(), 1);
                sent_tx.send(t).unwrap();
                qa.reclaim();
            }
            // Returns come back before we go.
            let deadline = Instant::now() + Duration::from_secs(5);
            while pa.lent() > 0 && Instant::now() < deadline {
                qa.reclaim();
                thread::yield_now();
            }
            assert_eq!(pa.lent(), 0);
            a.stats(0).unwrap()
        });
        let pb = b.pool(0, b.pool_config()).unwrap();
        let mut qb = b.open_queue(0, &pb).unwrap();
        let fd = qb.poll_fd().unwrap();
        let mut rx = Vec::new();
        for i in 0..ROUNDS {
            poll_until_armed(&mut qb);
            if i == 0 {
                // Armed and nothing to do: a real sleep, no spurious wake.
                assert!(!ixora_io::sys::wait_readable(fd, 100).unwrap());
            }
            go_tx.send(()).unwrap();
            assert!(
                ixora_io::sys::wait_readable(fd, 5000).unwrap(),
                "doorbell never rang"
            );
            let woke = Instant::now();
            let sent = sent_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let mut polls = 0;
            while rx.is_empty() {
                polls += 1;
                assert!(polls < 1000, "woken but no frame");
                qb.rx_burst(&mut rx, 64).unwrap();
            }
            verify(&rx[0], i, 3, 100);
            rx.clear();
            let lat = woke.saturating_duration_since(sent);
            eprintln!("sleep_after {sleep_after:?}: woken {lat:?} after the send");
            assert!(lat < Duration::from_secs(1));
        }
        // Keep returning until the producer has everything back.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !producer.is_finished() {
            assert!(Instant::now() < deadline);
            let _ = qb.rx_burst(&mut rx, 64);
            thread::sleep(Duration::from_millis(1));
        }
        let sa = producer.join().unwrap();
        let sb = b.stats(0).unwrap();
        eprintln!("producer {sa:?}\nconsumer {sb:?}");
        assert!(sb.sleeps >= ROUNDS, "{sb:?}");
        assert!(sa.doorbells >= ROUNDS, "{sa:?}");
        assert_eq!(sb.rx_frames, ROUNDS);
    }
}

#[test]
fn listen_paths_and_misuse_are_refused_clearly() {
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 2,
        ring_size: 16,
        chunks: 16,
        chunk_size: 2048,
    };
    // A live listener holds its path; the probe does not spoil its accept.
    let path = dir.path("live");
    let l = ShmPort::listen(&path, cfg).unwrap();
    let e = ShmPort::listen(&path, cfg).err().expect("path in use");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    let p2 = path.clone();
    let t = thread::spawn(move || ShmPort::connect(&p2, Duration::from_secs(10)));
    let a = l.accept(Duration::from_secs(10)).unwrap();
    let b = t.join().unwrap().unwrap();
    assert_eq!(a.mac(), b.peer_mac());
    assert_eq!(b.mac(), a.peer_mac());
    assert_ne!(a.mac(), b.mac());
    assert_eq!(a.peer_pid(), Some(std::process::id()));
    let caps = a.caps();
    assert_eq!(
        (caps.backend, caps.queues, caps.zero_copy, caps.max_frame),
        ("shm", 2, false, 2048)
    );
    assert!(
        caps.note.contains("tx zero-copy, rx one copy"),
        "{}",
        caps.note
    );

    // A stale socket file is replaced.
    let stale = dir.path("stale");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let l2 = ShmPort::listen(&stale, cfg).unwrap();
    drop(l2);
    assert!(!stale.exists(), "the listener removes its socket file");

    // A regular file is not ours to remove.
    let file = dir.path("file");
    std::fs::write(&file, b"keep me").unwrap();
    assert!(ShmPort::listen(&file, cfg).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    // Path too long, bad config, nobody listening.
    let long = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
    assert_eq!(
        ShmPort::listen(&long, cfg).err().unwrap().kind(),
        io::ErrorKind::InvalidInput
    );
    let bad = ShmConfig {
        ring_size: 100,
        ..cfg
    };
    assert!(ShmPort::listen(&dir.path("bad"), bad).is_err());
    let e = ShmPort::connect(&dir.path("nobody"), Duration::from_millis(50))
        .err()
        .unwrap();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");

    // Pools and queues.
    let anon = Pool::new(PoolConfig {
        chunks: 16,
        hugepages: false,
        ..PoolConfig::default()
    })
    .unwrap();
    assert!(a.open_queue(0, &anon).is_err(), "needs its own pool first");
    let too_big = PoolConfig {
        chunks: 17,
        ..a.pool_config()
    };
    assert!(a.pool(0, too_big).is_err());
    let pa = a.pool(1, a.pool_config()).unwrap();
    assert!(a.pool(1, a.pool_config()).is_err(), "one pool per queue");
    assert!(a.pool(2, a.pool_config()).is_err(), "no queue 2");
    assert!(a.open_queue(1, &anon).is_err(), "foreign pool refused");
    let mut qa = a.open_queue(1, &pa).unwrap();
    assert!(a.open_queue(1, &pa).is_err(), "already open");
    let pb = b.pool(1, b.pool_config()).unwrap();
    let mut qb = b.open_queue(1, &pb).unwrap();

    // A frame from another pool is copied in; queue 1 works on its own.
    let mut out = vec![anon.copy_in(b"from an anonymous pool").unwrap()];
    assert_eq!(qa.tx_burst(&mut out).unwrap(), 1);
    assert_eq!(anon.available(), 16, "the foreign buffer went back home");
    let mut rx = Vec::new();
    assert_eq!(qb.rx_burst(&mut rx, 8).unwrap(), 1);
    assert_eq!(rx[0].as_slice(), b"from an anonymous pool");
    assert_eq!(a.stats(1).unwrap().tx_copied, 1);

    // Reopening a dropped queue resumes where it left off.
    drop(qb);
    let mut qb = b.open_queue(1, &pb).unwrap();
    let mut out = vec![pa.copy_in(b"again").unwrap()];
    assert_eq!(qa.tx_burst(&mut out).unwrap(), 1);
    rx.clear();
    assert_eq!(qb.rx_burst(&mut rx, 8).unwrap(), 1);
    assert_eq!(rx[0].as_slice(), b"again");
    qb.reclaim();
    qa.reclaim();
    assert_eq!(pa.lent(), 0);
}

/// A small xorshift generator for test timing jitter.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Both sides sleep whenever they have nothing to do (arming at once), the
/// consumer stalls now and then so the producer's tiny pool runs dry and it
/// must sleep until returns wake it. Any lost wake-up shows as a wait that
/// times out while work is pending.
#[test]
fn no_lost_wakeups_when_both_sides_sleep() {
    let _g = heavy();
    let dir = TempDir::new();
    let cfg = ShmConfig {
        queues: 1,
        ring_size: 16,
        chunks: 16,
        chunk_size: 2048,
    };
    let (a, b) = pair(&dir, cfg);
    a.set_sleep_after(Duration::ZERO);
    b.set_sleep_after(Duration::ZERO);
    const N: u64 = 20_000;
    const WAIT_MS: i32 = 2000;
    let producer = thread::spawn(move || {
        let pa = a.pool(0, a.pool_config()).unwrap();
        let mut qa = a.open_queue(0, &pa).unwrap();
        let fd = qa.poll_fd().unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut sent, mut sleeps) = (0u64, 0u64);
        let mut rx = Vec::new();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while sent < N {
            assert!(Instant::now() < deadline, "producer stuck at {sent}");
            qa.reclaim();
            let burst = 1 + rng.next() % 8;
            while (out.len() as u64) < burst && sent < N {
                let Some(mut f) = pa.alloc() else { break };
                fill(&mut f, sent, 5, frame_len(sent));
                out.push(f);
                sent += 1;
            }
            qa.tx_burst(&mut out).unwrap();
            if out.is_empty() && !rng.next().is_multiple_of(4) {
                continue;
            }
            // Nothing more we can do now (no buffer, or a full ring), or a
            // pause: go to sleep like an engine.
            assert_eq!(qa.rx_burst(&mut rx, 8).unwrap(), 0);
            qa.reclaim();
            if out.is_empty() && pa.available() > 0 {
                continue;
            }
            sleeps += 1;
            assert!(
                ixora_io::sys::wait_readable(fd, WAIT_MS).unwrap(),
                "lost wake-up: producer slept {WAIT_MS} ms with {} frames unsent, pool {}",
                out.len(),
                pa.available()
            );
        }
        while pa.lent() > 0 {
            assert!(Instant::now() < deadline, "returns never came");
            let _ = qa.rx_burst(&mut rx, 8).unwrap();
            qa.reclaim();
            if pa.lent() > 0 {
                // With buffers to spare, returns ring no doorbell (by
                // design); poll them in at leisure.
                let _ = ixora_io::sys::wait_readable(fd, 5);
            }
        }
        (sleeps, a.stats(0).unwrap())
    });
    let pb = b.pool(0, b.pool_config()).unwrap();
    let mut qb = b.open_queue(0, &pb).unwrap();
    let fd = qb.poll_fd().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut rx = Vec::new();
    let (mut got, mut sleeps) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < N {
        assert!(Instant::now() < deadline, "consumer stuck at {got}");
        let n = qb.rx_burst(&mut rx, 1 + (rng.next() % 8) as usize).unwrap();
        for f in rx.drain(..) {
            verify(&f, got, 5, frame_len(got));
            got += 1;
        }
        if rng.next().is_multiple_of(64) {
            // Stall without returning: the producer runs dry.
            thread::sleep(Duration::from_micros(rng.next() % 300));
        }
        qb.reclaim();
        if n == 0 {
            sleeps += 1;
            assert!(
                ixora_io::sys::wait_readable(fd, WAIT_MS).unwrap(),
                "lost wake-up: consumer slept {WAIT_MS} ms at frame {got}"
            );
        }
    }
    // Keep answering until the producer has all its chunks back.
    while !producer.is_finished() {
        assert!(Instant::now() < deadline);
        if let Err(e) = qb.rx_burst(&mut rx, 8) {
            // The producer finished and dropped its port.
            assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
            break;
        }
        qb.reclaim();
        let _ = ixora_io::sys::wait_readable(fd, 10);
    }
    let (psleeps, sa) = producer.join().unwrap();
    let sb = b.stats(0).unwrap();
    eprintln!("producer slept {psleeps} times {sa:?}\nconsumer slept {sleeps} times {sb:?}");
    assert_eq!(sb.rx_frames, N);
    assert!(psleeps > 0 && sleeps > 0);
}
