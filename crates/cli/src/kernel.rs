//! A reference measurement of the Linux kernel TCP stack: one connection
//! over the loopback device carrying fixed-size messages, reporting CPU time
//! per message (sender and receiver together). The benchmark scripts run it
//! inside a private network namespace on a 198.18.0.0/15 address.

use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

/// What one run measured.
#[derive(Serialize)]
pub struct KernelReport {
    /// Message size in bytes.
    pub size: usize,
    /// Messages sent (and received, verified by count).
    pub messages: u64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// User plus system CPU seconds of the process (both threads).
    pub cpu_s: f64,
    /// CPU nanoseconds per message, both ends.
    pub cpu_ns_per_msg: f64,
    /// Messages per wall-clock second.
    pub msgs_per_s: f64,
}

fn cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(ru) => {
            let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            tv(ru.user_time()) + tv(ru.system_time())
        }
        Err(_) => 0.0,
    }
}

/// Stream `messages` writes of `size` bytes (TCP_NODELAY) to a reader on
/// `addr` and measure.
pub fn run(addr: SocketAddr, size: usize, messages: u64) -> std::io::Result<KernelReport> {
    let listener = TcpListener::bind(addr)?;
    let total = size as u64 * messages;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0u64;
        while got < total {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        Ok(got)
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let msg = vec![0x5au8; size];
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    for _ in 0..messages {
        s.write_all(&msg)?;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let got = reader
        .join()
        .map_err(|_| std::io::Error::other("reader thread panicked"))??;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu0;
    if got != total {
        return Err(std::io::Error::other(format!(
            "receiver got {got} of {total} bytes"
        )));
    }
    Ok(KernelReport {
        size,
        messages,
        wall_s,
        cpu_s,
        cpu_ns_per_msg: cpu_s * 1e9 / messages as f64,
        msgs_per_s: messages as f64 / wall_s,
    })
}
