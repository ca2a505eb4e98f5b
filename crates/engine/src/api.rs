//! The native API (IX Table 1): batched calls an application makes on its
//! core's dataplane, and the event conditions it receives.
//!
//! An application is an [`App`] per core. The engine calls it from the
//! run-to-completion loop — with the events of the batch just processed,
//! then once at the end of the batch — and it answers with calls on the
//! [`Io`] it is handed. Calls take effect at once on that core's stack; the
//! frames they produce leave at the end of the cycle, with everything else
//! the batch produced (IX Fig. 1b steps 3–6).
//!
//! | IX call / event | here |
//! |---|---|
//! | `connect(cookie, dst_IP, dst_port)` | [`Io::connect`] |
//! | `accept(handle, cookie)` | [`Io::accept`] |
//! | `sendv(handle, scatter_gather_array)` | [`Io::sendv`] — returns the bytes the window accepted |
//! | `recv_done(handle, bytes_acked)` | [`Io::recv_done`] |
//! | `close(handle)` | [`Io::close`] |
//! | `knock`, `connected`, `recv`, `sent`, `dead` | [`Event`] (`Knock`, `Connected`, `Recv`, `Sent`, `Dead`, and `PeerClosed`) |
//!
//! `recv` is zero-copy: [`Io::recv`] lends the received bytes in place, in
//! the frames that carried them, until `recv_done`. `sendv` keeps the
//! application's [`Bytes`] (reference-counted, immutable) until the peer
//! acknowledges them. Handles belong to the core that made them.

use crate::steer;
use bytes::Bytes;
use ixora_core::{ConnHandle, Error, Instant, IpOpts, Stack, UdpHandle};
use ixora_io::PacketBuf;
use nix::time::ClockId;
use std::net::SocketAddrV4;
use std::time::Duration;

pub use ixora_core::Event;

/// A UDP datagram taken from a socket ([`Io::udp_recv`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Sender.
    pub src: SocketAddrV4,
    /// Payload.
    pub data: Bytes,
    /// When the frame came in, `CLOCK_MONOTONIC` nanoseconds, if the
    /// backend stamped it (AF_XDP's XDP program stamps IPv4 UDP frames;
    /// see [`PacketBuf::take_rx_stamp`]).
    pub at: Option<u64>,
    /// Its IPv4 header's TOS and TTL (`IP_RECVTOS`, `IP_RECVTTL`).
    pub tos: u8,
    /// (See `tos`.)
    pub ttl: u8,
}

/// Turns receive stamps ([`Received::at`], `CLOCK_MONOTONIC`) into
/// `CLOCK_REALTIME` nanoseconds, what `SO_TIMESTAMP*` give. It reads both
/// clocks once, at first use, so one per batch of datagrams costs two
/// vDSO reads; a datagram the backend did not stamp gets that reading.
#[derive(Debug, Default)]
pub struct WallClock {
    /// (monotonic, realtime) ns, read together.
    now: Option<(u64, u64)>,
}

impl WallClock {
    /// The realtime of stamp `at` (None: now).
    pub fn realtime(&mut self, at: Option<u64>) -> u64 {
        let (mono, real) = *self.now.get_or_insert_with(|| {
            (
                clock_ns(ClockId::CLOCK_MONOTONIC),
                clock_ns(ClockId::CLOCK_REALTIME),
            )
        });
        match at {
            Some(t) if t <= mono => real.saturating_sub(mono - t),
            Some(t) => real.saturating_add(t - mono),
            None => real,
        }
    }
}

fn clock_ns(id: ClockId) -> u64 {
    nix::time::clock_gettime(id)
        .map(|t| (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The stack type of a core.
pub type CoreStack = Stack<PacketBuf, Bytes>;

/// One core's view of the dataplane, handed to the application's callbacks.
pub struct Io<'a> {
    pub(crate) stack: &'a mut CoreStack,
    pub(crate) now: Instant,
    pub(crate) core: usize,
    pub(crate) cores: usize,
    pub(crate) stop: &'a mut bool,
    pub(crate) bell: std::os::fd::BorrowedFd<'a>,
    pub(crate) spin: &'a crate::spin::IdleSpin,
    pub(crate) pool: &'a ixora_io::Pool,
}

impl Io<'_> {
    /// This core's index (0-based).
    pub fn core(&self) -> usize {
        self.core
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// The time of this cycle.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// What this core's idle spin did so far.
    pub fn idle_spin(&self) -> crate::spin::SpinStats {
        self.spin.stats()
    }

    /// The core's doorbell: an eventfd; writing a non-zero 8-byte count to
    /// it wakes the core from its idle sleep. Valid while the engine runs;
    /// `dup` it to hand it to another thread. Not to another process: the
    /// core reads it, and a process holding the same file description could
    /// make that read block (clear `O_NONBLOCK`, empty the counter). Wake
    /// the core from other processes through [`App::wait_fd`].
    pub fn doorbell(&self) -> std::os::fd::BorrowedFd<'_> {
        self.bell
    }

    /// Ask this core to stop after the current cycle.
    pub fn stop(&mut self) {
        *self.stop = true;
    }

    /// Listen on a TCP port (every core that wants connections listens; a
    /// connection is delivered to the core its flow hashes to).
    pub fn listen(&mut self, port: u16, backlog: Option<u32>, cookie: u64) -> Result<(), Error> {
        self.stack.tcp_listen(port, backlog, cookie)
    }

    /// Stop listening on `port`; connections not yet accepted are reset.
    pub fn unlisten(&mut self, port: u16) -> Result<(), Error> {
        self.stack.tcp_unlisten(port)
    }

    /// Open a connection (IX `connect`). The local port is chosen so the
    /// flow hashes to this core.
    pub fn connect(&mut self, cookie: u64, dst: SocketAddrV4) -> Result<ConnHandle, Error> {
        let (core, cores) = (self.core, self.cores);
        let local = self.stack.config().ip;
        self.stack.tcp_connect_with(self.now, cookie, dst, |port| {
            cores <= 1
                || steer::flow_hash(*dst.ip(), local, dst.port(), port) as usize % cores == core
        })
    }

    /// Open a connection from local port `port` (a socket bound before it
    /// connects). With several cores the flow must hash to this one
    /// (`InvalidArgument` otherwise: the frames of the connection would
    /// arrive on another core).
    pub fn connect_from(
        &mut self,
        cookie: u64,
        dst: SocketAddrV4,
        port: u16,
    ) -> Result<ConnHandle, Error> {
        let local = self.stack.config().ip;
        if self.cores > 1
            && steer::flow_hash(*dst.ip(), local, dst.port(), port) as usize % self.cores
                != self.core
        {
            return Err(Error::InvalidArgument);
        }
        self.stack.tcp_connect_from(self.now, cookie, dst, port)
    }

    /// Accept a knocked connection (IX `accept`), giving it a cookie.
    pub fn accept(&mut self, h: ConnHandle, cookie: u64) -> Result<(), Error> {
        self.stack.tcp_accept(h, cookie)
    }

    /// Give connection `h` a new cookie (see `Stack::tcp_set_cookie`).
    pub fn set_cookie(&mut self, h: ConnHandle, cookie: u64) -> Result<(), Error> {
        self.stack.tcp_set_cookie(h, cookie)
    }

    /// Send a scatter-gather list (IX `sendv`): returns how many bytes the
    /// window accepted, from the front of `bufs`. The stack keeps the
    /// accepted buffers (cheap `Bytes` clones) until acknowledged; offer
    /// the rest again after a `Sent` event.
    pub fn sendv(&mut self, h: ConnHandle, bufs: &[Bytes]) -> Result<usize, Error> {
        let mut total = 0;
        for b in bufs {
            let n = self.stack.tcp_send(self.now, h, b.clone())?;
            total += n;
            if n < b.len() {
                break;
            }
        }
        Ok(total)
    }

    /// Send one buffer; returns the bytes accepted.
    pub fn send(&mut self, h: ConnHandle, buf: Bytes) -> Result<usize, Error> {
        self.stack.tcp_send(self.now, h, buf)
    }

    /// What was sent so far, less its last `back` bytes, ends urgent data
    /// (`send` with `MSG_OOB`): `Stack::tcp_mark_urgent`.
    pub fn mark_urgent(&mut self, h: ConnHandle, back: usize) -> Result<(), Error> {
        self.stack.tcp_mark_urgent(self.now, h, back)
    }

    /// The peer's latest urgent data (`Stack::tcp_urgent`).
    pub fn urgent(&self, h: ConnHandle) -> Result<Option<(u64, Option<u8>)>, Error> {
        self.stack.tcp_urgent(h)
    }

    /// Bytes `sendv` would accept now.
    pub fn send_space(&self, h: ConnHandle) -> Result<usize, Error> {
        self.stack.tcp_send_space(h)
    }

    /// More is waiting to be sent than `send_space` allowed (and was not
    /// offered): a `Sent` event follows when the window opens
    /// (`Stack::tcp_send_blocked`).
    pub fn send_blocked(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.stack.tcp_send_blocked(self.now, h)
    }

    /// The received bytes, in place in their frames (IX `recv`: read-only,
    /// zero-copy, valid until `recv_done`).
    pub fn recv(&self, h: ConnHandle) -> Result<impl Iterator<Item = &[u8]> + '_, Error> {
        self.stack.tcp_recv_chunks(h)
    }

    /// Bytes readable now.
    pub fn readable(&self, h: ConnHandle) -> Result<usize, Error> {
        self.stack.tcp_readable(h)
    }

    /// Done with `n` received bytes (IX `recv_done`): frees their frames and
    /// opens the window.
    pub fn recv_done(&mut self, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.stack.tcp_recv_done(self.now, h, n)
    }

    /// Take `n` received bytes (copied out first) to hold them unread:
    /// frees their frames but keeps them in the window until
    /// [`Io::recv_release`]. For an application whose reader is behind
    /// while this core's packet buffers run low ([`Io::buffers_low`]).
    pub fn recv_hold(&mut self, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.stack.tcp_recv_hold(self.now, h, n)
    }

    /// `n` bytes taken by [`Io::recv_hold`] are read: opens the window.
    pub fn recv_release(&mut self, h: ConnHandle, n: usize) -> Result<(), Error> {
        self.stack.tcp_recv_release(self.now, h, n)
    }

    /// Is this core's packet-buffer pool running low (under a quarter of
    /// its buffers free)? Received bytes waiting for a reader hold their
    /// frames; when they hold too many, the interface has none left to
    /// receive into and drops every connection's frames.
    pub fn buffers_low(&self) -> bool {
        self.pool.available() < self.pool.chunks() as usize / 4
    }

    /// Half-close: FIN after the queued data.
    pub fn shutdown(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.stack.tcp_shutdown(self.now, h)
    }

    /// Close or reject (IX `close`); the handle is gone afterwards.
    pub fn close(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.stack.tcp_close(self.now, h)
    }

    /// Reset the connection; the handle is gone afterwards.
    pub fn abort(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.stack.tcp_abort(self.now, h)
    }

    /// Nagle off (`true`, the default) or on.
    pub fn set_nodelay(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.tcp_set_nodelay(h, on)
    }

    /// `TCP_CORK` on or off (`Stack::tcp_set_cork`): uncorked, what it
    /// held goes.
    pub fn set_cork(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.tcp_set_cork(h, on)
    }

    /// What the connection's packets carry in their IPv4 header from now
    /// on (`IP_TOS`, `IP_TTL`; `Stack::tcp_set_ip_opts`).
    pub fn set_ip_opts(&mut self, h: ConnHandle, ip: IpOpts) -> Result<(), Error> {
        self.stack.tcp_set_ip_opts(h, ip)
    }

    /// The same for listener `port`'s SYN-ACKs and the connections it
    /// makes from now on (`Stack::tcp_listener_ip_opts`).
    pub fn listener_ip_opts(&mut self, port: u16, ip: IpOpts) -> Result<(), Error> {
        self.stack.tcp_listener_ip_opts(port, ip)
    }

    /// Keepalive probes on or off.
    pub fn set_keepalive(&mut self, h: ConnHandle, on: bool) -> Result<(), Error> {
        self.stack.tcp_set_keepalive(h, on)
    }

    /// Keepalive timing: idle and interval seconds, probes (0: default).
    pub fn set_keepalive_timing(&mut self, h: ConnHandle, t: (u32, u32, u8)) -> Result<(), Error> {
        self.stack.tcp_set_keepalive_timing(h, t.0, t.1, t.2)
    }

    /// Fix a connection's buffers, as `SO_RCVBUF` and `SO_SNDBUF` do
    /// (`None` leaves one as it is; `Stack::tcp_lock_buffers`).
    pub fn lock_buffers(
        &mut self,
        h: ConnHandle,
        rcv: Option<u32>,
        snd: Option<u32>,
    ) -> Result<(), Error> {
        self.stack.tcp_lock_buffers(h, rcv, snd)
    }

    /// The same for the connections listener `port` makes from now on.
    pub fn listener_lock_buffers(
        &mut self,
        port: u16,
        rcv: Option<u32>,
        snd: Option<u32>,
    ) -> Result<(), Error> {
        self.stack.tcp_listener_lock_buffers(port, rcv, snd)
    }

    /// A free ephemeral port for a bind to port 0, one `taken` does not
    /// hold, searched from a start no one can guess (see
    /// `Stack::draw_free_port`).
    pub fn draw_free_port(&mut self, taken: impl Fn(u16) -> bool) -> Option<u16> {
        self.stack.draw_free_port(taken)
    }

    /// Take the ICMP destination-unreachable last received about a
    /// datagram of UDP socket `h` (see `Stack::udp_take_error`).
    pub fn udp_take_error(&mut self, h: UdpHandle) -> Result<Option<(SocketAddrV4, u8)>, Error> {
        self.stack.udp_take_error(h)
    }

    /// `TCP_DEFER_ACCEPT` on listener `port`: a connection waits up to
    /// `secs` for its first data before it is announced (see
    /// `Stack::tcp_listener_defer_accept`; 0: at once).
    pub fn listener_defer_accept(&mut self, port: u16, secs: u32) -> Result<(), Error> {
        self.stack
            .tcp_listener_defer_accept(port, Duration::from_secs(u64::from(secs)))
    }

    /// Bind a UDP socket on this core (port 0: ephemeral).
    pub fn udp_bind(&mut self, port: u16, cookie: u64) -> Result<UdpHandle, Error> {
        self.stack.udp_bind(port, cookie)
    }

    /// Give UDP socket `h` a new cookie (see `Stack::udp_set_cookie`).
    pub fn udp_set_cookie(&mut self, h: UdpHandle, cookie: u64) -> Result<(), Error> {
        self.stack.udp_set_cookie(h, cookie)
    }

    /// Close a UDP socket (datagrams queued for it are dropped).
    pub fn udp_close(&mut self, h: UdpHandle) -> Result<(), Error> {
        self.stack.udp_close(h)
    }

    /// Send a datagram.
    pub fn udp_send(&mut self, h: UdpHandle, dst: SocketAddrV4, data: Bytes) -> Result<(), Error> {
        self.stack.udp_send(h, dst, data)
    }

    /// Send a datagram with IPv4 header options (`Stack::udp_send_with`).
    pub fn udp_send_with(
        &mut self,
        h: UdpHandle,
        dst: SocketAddrV4,
        data: Bytes,
        ip: IpOpts,
    ) -> Result<(), Error> {
        self.stack.udp_send_with(h, dst, data, ip)
    }

    /// The next datagram received on `h`: source, payload (copied out of
    /// its frame, which is released) and the receive stamp the backend
    /// left with the frame, if any.
    pub fn udp_recv(&mut self, h: UdpHandle) -> Result<Option<Received>, Error> {
        Ok(self.stack.udp_recv(h)?.map(|mut d| {
            let at = d.frame_mut().and_then(|f| f.take_rx_stamp());
            Received {
                src: d.src,
                data: Bytes::copy_from_slice(d.payload()),
                at,
                tos: d.tos,
                ttl: d.ttl,
            }
        }))
    }

    /// The core's stack, for anything the calls above do not cover
    /// (`tcp_info`, counters).
    pub fn stack(&self) -> &CoreStack {
        self.stack
    }
}

/// An application running on one core. Every method runs inside the
/// core's loop; none may block.
pub trait App {
    /// Once, before the first cycle (listen, connect).
    fn start(&mut self, io: &mut Io) {
        let _ = io;
    }
    /// One event condition.
    fn event(&mut self, io: &mut Io, ev: Event);
    /// After the events of a batch: the place to flush coalesced writes.
    fn end_of_batch(&mut self, io: &mut Io) {
        let _ = io;
    }
    /// After the cycle's frames went to the device (every cycle that
    /// called [`App::end_of_batch`]): the place to wake other processes.
    /// On a shared CPU a woken process runs at once and would otherwise
    /// hold back the frames of this cycle for its whole time slice.
    fn transmitted(&mut self, io: &mut Io) {
        let _ = io;
    }
    /// Every cycle, after the events of the batch: poll sources of work
    /// the engine does not know (shared-memory rings of other processes).
    /// Return true if there was work.
    fn poll(&mut self, io: &mut Io) -> bool {
        let _ = io;
        false
    }
    /// The core's sleep ended with [`App::wait_fd`] readable (called
    /// before [`App::wake`]): the place to take what made it readable, so
    /// the next sleep does not end at once.
    fn wait_fd_ready(&mut self, io: &mut Io) {
        let _ = io;
    }
    /// How long the idle core may sleep at most (asked once [`App::sleep`]
    /// agreed to a sleep, before it begins), whatever its timers: `None` keeps the engine
    /// configuration's `tick`, so that [`App::poll`] and [`App::tick`]
    /// run at least that often. An application with nothing that needs
    /// looking at meanwhile returns longer, and the idle core wakes less
    /// (the engine still wakes for frames, its doorbell, the stack's
    /// timers, and at least every 100 ms).
    fn max_nap(&mut self) -> Option<Duration> {
        None
    }
    /// The core is about to sleep (after a cycle with no work; not in
    /// `--poll` mode). Return false to stay awake: work arrived since
    /// `poll`. Whoever may bring work while the core sleeps must then ring
    /// [`Io::doorbell`].
    fn sleep(&mut self, io: &mut Io) -> bool {
        let _ = io;
        true
    }
    /// A descriptor the core also waits on while it sleeps (readable wakes
    /// it); asked once, after [`App::start`]. For wake-ups from other
    /// processes, which must not share [`Io::doorbell`] (see there): an
    /// epoll set of per-client eventfds watched edge-triggered, say.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// The core woke from a sleep.
    fn wake(&mut self, io: &mut Io) {
        let _ = io;
    }
    /// When the core has been idle for a while (at most every `tick` of
    /// the engine configuration): timers of the application.
    fn tick(&mut self, io: &mut Io) {
        let _ = io;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monotonic_stamp_becomes_the_realtime_of_that_moment() {
        let mut c = WallClock::default();
        let mono = clock_ns(ClockId::CLOCK_MONOTONIC);
        let real = clock_ns(ClockId::CLOCK_REALTIME);
        // A stamp from 2 ms ago reads as 2 ms before now (within the
        // time between the clock reads).
        let got = c.realtime(Some(mono - 2_000_000));
        let want = real - 2_000_000;
        assert!(got.abs_diff(want) < 1_000_000, "{got} vs {want}");
        // One reading per clock: a later stamp is measured from it too.
        assert_eq!(c.realtime(Some(mono)) - got, 2_000_000);
        // No stamp: the reading itself, taken after `real`.
        let none = c.realtime(None);
        assert!(
            none >= real && none - real < 1_000_000_000,
            "{none} vs {real}"
        );
    }
}
