//! An event library over the native API, in the spirit of IX's `libix`:
//! per-connection callbacks (libevent style), write coalescing per batch,
//! and a limit on bytes pending per connection.
//!
//! An application implements [`Service`] (what to do at start, how to make a
//! handler for each new connection) and [`Handler`] (one per connection:
//! data arrived, the connection became writable, it closed). Inside the
//! callbacks, [`Conn::write`] appends to the connection's pending output;
//! at the end of each batch the library issues one `sendv` per connection
//! with everything written during the batch (coalescing), keeps what the
//! window did not take, and offers it again when a `Sent` event says the
//! window opened. A write beyond [`EvConfig::max_pending`] is refused with
//! [`WouldBlock`]; `writable` is called once the backlog has drained below
//! half of it.

use crate::api::{App, Event, Io};
use bytes::{Bytes, BytesMut};
use ixora_core::{ConnHandle, DeadReason};
use std::collections::VecDeque;
use std::net::SocketAddrV4;

/// A write refused because the connection's pending bytes are at the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WouldBlock;

impl std::fmt::Display for WouldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("pending-send limit reached; wait for `writable`")
    }
}

impl std::error::Error for WouldBlock {}

/// Why a connection ended, as the handler learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The peer closed its side and we had nothing more to say (or we
    /// closed): an orderly end.
    Orderly,
    /// The connection died.
    Dead(DeadReason),
}

/// Library settings.
#[derive(Debug, Clone)]
pub struct EvConfig {
    /// Most bytes written but not yet accepted by the window, per
    /// connection.
    pub max_pending: usize,
    /// Close a connection automatically when the peer closes and our
    /// output is flushed.
    pub close_on_peer_close: bool,
}

impl Default for EvConfig {
    fn default() -> Self {
        EvConfig {
            max_pending: 1 << 20,
            close_on_peer_close: true,
        }
    }
}

/// The per-connection view given to a [`Handler`]. Writes are buffered and
/// leave at the end of the batch.
pub struct Conn<'a> {
    st: &'a mut ConnState,
    limit: usize,
}

impl Conn<'_> {
    /// Queue `data` (copied) for sending at the end of the batch.
    pub fn write(&mut self, data: &[u8]) -> Result<(), WouldBlock> {
        if self.st.pending + data.len() > self.limit {
            self.st.blocked = true;
            return Err(WouldBlock);
        }
        self.st.coalesce.extend_from_slice(data);
        self.st.pending += data.len();
        Ok(())
    }

    /// Queue `data` without copying (it is kept until acknowledged).
    pub fn write_bytes(&mut self, data: Bytes) -> Result<(), WouldBlock> {
        if self.st.pending + data.len() > self.limit {
            self.st.blocked = true;
            return Err(WouldBlock);
        }
        self.flush_coalesced();
        self.st.pending += data.len();
        self.st.out.push_back(data);
        Ok(())
    }

    fn flush_coalesced(&mut self) {
        if !self.st.coalesce.is_empty() {
            let b = self.st.coalesce.split().freeze();
            self.st.out.push_back(b);
        }
    }

    /// Bytes written and not yet taken by the window.
    pub fn pending(&self) -> usize {
        self.st.pending
    }

    /// Close once everything written is sent (our FIN follows the data).
    pub fn close(&mut self) {
        self.st.closing = true;
    }

    /// Reset at once.
    pub fn abort(&mut self) {
        self.st.abort = true;
    }

    /// The connection's handle.
    pub fn handle(&self) -> ConnHandle {
        self.st.handle
    }

    /// The peer.
    pub fn peer(&self) -> SocketAddrV4 {
        self.st.peer
    }
}

/// One connection's callbacks.
pub trait Handler {
    /// The connection is open (accepted, or our connect completed).
    fn open(&mut self, c: &mut Conn) {
        let _ = c;
    }
    /// Bytes arrived, in place in their frames; return how many were
    /// consumed (the rest is offered again with the next data).
    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize;
    /// The pending backlog drained below half the limit after a refused
    /// write.
    fn writable(&mut self, c: &mut Conn) {
        let _ = c;
    }
    /// The peer closed its side (end of stream).
    fn peer_closed(&mut self, c: &mut Conn) {
        let _ = c;
    }
    /// The connection is gone.
    fn closed(&mut self, why: Closed) {
        let _ = why;
    }
}

/// The application: makes a handler per connection.
pub trait Service {
    /// The per-connection handler type.
    type H: Handler;
    /// Once per core at start: listen, open connections.
    fn start(&mut self, ctl: &mut Ctl<Self::H>);
    /// A connection arrived on a listener: its handler, or `None` to
    /// refuse it.
    fn accept(&mut self, local_port: u16, peer: SocketAddrV4) -> Option<Self::H>;
    /// Called every engine tick.
    fn tick(&mut self, ctl: &mut Ctl<Self::H>) {
        let _ = ctl;
    }
    /// Called at the end of every batch, before writes are flushed (open
    /// replacement connections here, without waiting for a tick).
    fn end_of_batch(&mut self, ctl: &mut Ctl<Self::H>) {
        let _ = ctl;
    }
}

struct ConnState {
    handle: ConnHandle,
    peer: SocketAddrV4,
    out: VecDeque<Bytes>,
    coalesce: BytesMut,
    pending: usize,
    blocked: bool,
    closing: bool,
    abort: bool,
    peer_closed: bool,
    shut: bool,
    /// The handler left received bytes unconsumed (back-pressure): offer
    /// them again once the output drains.
    rx_stalled: bool,
}

impl ConnState {
    fn new(handle: ConnHandle, peer: SocketAddrV4) -> ConnState {
        ConnState {
            handle,
            peer,
            out: VecDeque::new(),
            coalesce: BytesMut::new(),
            pending: 0,
            blocked: false,
            closing: false,
            abort: false,
            peer_closed: false,
            shut: false,
            rx_stalled: false,
        }
    }
}

struct Slot<H> {
    st: ConnState,
    h: H,
}

/// Control surface for [`Service::start`] and [`Service::tick`].
pub struct Ctl<'a, 'b, H> {
    io: &'a mut Io<'b>,
    pending: &'a mut Vec<(ConnHandle, SocketAddrV4, H)>,
}

impl<'b, H> Ctl<'_, 'b, H> {
    /// Listen on a port.
    pub fn listen(&mut self, port: u16) -> Result<(), ixora_core::Error> {
        self.io.listen(port, None, 0)
    }

    /// Open a connection served by `h` (its `open` runs when connected).
    pub fn connect(&mut self, dst: SocketAddrV4, h: H) -> Result<(), ixora_core::Error> {
        let handle = self.io.connect(0, dst)?;
        self.pending.push((handle, dst, h));
        Ok(())
    }

    /// The core's native API.
    pub fn io(&mut self) -> &mut Io<'b> {
        self.io
    }
}

/// Runs a [`Service`] as a core's [`App`].
pub struct EvApp<S: Service> {
    svc: S,
    cfg: EvConfig,
    conns: Vec<Option<Slot<S::H>>>,
    connecting: Vec<(ConnHandle, SocketAddrV4, S::H)>,
    dirty: Vec<usize>,
}

/// Run the engine on `port` with one [`EvApp`] per core, each wrapping the
/// service `make(core)` with the default [`EvConfig`] (see [`crate::run`]).
pub fn run<P, S, F>(
    port: std::sync::Arc<P>,
    cfg: &crate::EngineConfig,
    make: F,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<crate::EngineReport>
where
    P: ixora_io::Port + ?Sized,
    S: Service,
    F: Fn(usize) -> S + Sync,
{
    crate::run(
        port,
        cfg,
        |core| EvApp::new(make(core), EvConfig::default()),
        stop,
    )
}

impl<S: Service> EvApp<S> {
    /// Wrap a service.
    pub fn new(svc: S, cfg: EvConfig) -> EvApp<S> {
        EvApp {
            svc,
            cfg,
            conns: Vec::new(),
            connecting: Vec::new(),
            dirty: Vec::new(),
        }
    }

    /// The service (for reading results after the run).
    pub fn service(&self) -> &S {
        &self.svc
    }

    /// Live connections.
    pub fn connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    fn insert(&mut self, handle: ConnHandle, peer: SocketAddrV4, h: S::H) {
        let i = handle.index() as usize;
        if self.conns.len() <= i {
            self.conns.resize_with(i + 1, || None);
        }
        self.conns[i] = Some(Slot {
            st: ConnState::new(handle, peer),
            h,
        });
        self.with(i, |h, c| h.open(c));
    }

    /// Run a callback on connection slot `i` and remember it needs a flush.
    fn with(&mut self, i: usize, f: impl FnOnce(&mut S::H, &mut Conn)) {
        let limit = self.cfg.max_pending;
        if let Some(Some(slot)) = self.conns.get_mut(i) {
            let mut c = Conn {
                st: &mut slot.st,
                limit,
            };
            f(&mut slot.h, &mut c);
            self.dirty.push(i);
        }
    }

    /// Offer the received bytes, in place, to the handler; release what
    /// it consumed (zero copy: the handler reads the frames themselves).
    fn deliver(&mut self, io: &mut Io, handle: ConnHandle) {
        let i = handle.index() as usize;
        let Some(Some(slot)) = self.conns.get_mut(i) else {
            return;
        };
        let limit = self.cfg.max_pending;
        let mut consumed = 0usize;
        slot.st.rx_stalled = false;
        if let Ok(chunks) = io.recv(handle) {
            for chunk in chunks {
                let mut c = Conn {
                    st: &mut slot.st,
                    limit,
                };
                let took = slot.h.data(&mut c, chunk).min(chunk.len());
                consumed += took;
                if took < chunk.len() {
                    slot.st.rx_stalled = true;
                    break;
                }
            }
        }
        if consumed > 0 {
            let _ = io.recv_done(handle, consumed);
        }
        self.dirty.push(i);
    }

    /// Send what each touched connection has pending; close those done.
    fn flush(&mut self, io: &mut Io) {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        let half = self.cfg.max_pending / 2;
        let mut again = Vec::new();
        for i in dirty.drain(..) {
            self.flush_one(io, i);
            // Input held back for lack of output room: offer it again once
            // the output has drained below half the limit.
            if let Some(Some(s)) = self.conns.get(i) {
                if s.st.rx_stalled && s.st.pending <= half {
                    again.push(s.st.handle);
                }
            }
        }
        self.dirty = dirty;
        for h in again {
            self.deliver(io, h);
            let i = h.index() as usize;
            self.flush_one(io, i);
        }
    }

    fn flush_one(&mut self, io: &mut Io, i: usize) {
        let Some(Some(slot)) = self.conns.get_mut(i) else {
            return;
        };
        let st = &mut slot.st;
        if st.abort {
            let _ = io.abort(st.handle);
            let slot = self.conns[i].take();
            if let Some(mut s) = slot {
                s.h.closed(Closed::Dead(DeadReason::Aborted));
            }
            return;
        }
        if !st.coalesce.is_empty() {
            let b = st.coalesce.split().freeze();
            st.out.push_back(b);
        }
        while let Some(front) = st.out.front() {
            let n = match io.send(st.handle, front.clone()) {
                Ok(n) => n,
                Err(_) => break,
            };
            st.pending -= n;
            if n == front.len() {
                st.out.pop_front();
            } else {
                let rest = front.slice(n..);
                *st.out.front_mut().expect("front exists") = rest;
                break;
            }
        }
        let done_writing = st.out.is_empty();
        let close_now =
            done_writing && (st.closing || (st.peer_closed && self.cfg.close_on_peer_close));
        if close_now && !st.shut {
            st.shut = true;
            if st.peer_closed {
                let _ = io.close(st.handle);
                if let Some(mut s) = self.conns[i].take() {
                    s.h.closed(Closed::Orderly);
                }
            } else {
                let _ = io.shutdown(st.handle);
            }
        } else if st.shut && st.peer_closed && done_writing {
            let _ = io.close(st.handle);
            if let Some(mut s) = self.conns[i].take() {
                s.h.closed(Closed::Orderly);
            }
        }
    }
}

impl<S: Service> App for EvApp<S> {
    fn start(&mut self, io: &mut Io) {
        let mut pending = Vec::new();
        let mut ctl = Ctl {
            io,
            pending: &mut pending,
        };
        self.svc.start(&mut ctl);
        self.connecting.extend(pending);
    }

    fn event(&mut self, io: &mut Io, ev: Event) {
        match ev {
            Event::Knock {
                handle,
                local_port,
                remote,
                ..
            } => match self.svc.accept(local_port, remote) {
                Some(h) => {
                    if io.accept(handle, 0).is_ok() {
                        self.insert(handle, remote, h);
                    }
                }
                None => {
                    let _ = io.close(handle);
                }
            },
            Event::Connected { handle, .. } => {
                if let Some(k) = self.connecting.iter().position(|c| c.0 == handle) {
                    let (handle, peer, h) = self.connecting.swap_remove(k);
                    self.insert(handle, peer, h);
                }
            }
            Event::Recv { handle, .. } => self.deliver(io, handle),
            // (Urgent data is read in line here: the event library's
            // services have no use for the mark.)
            Event::Urgent { .. } => {}
            Event::Sent { handle, .. } => {
                let i = handle.index() as usize;
                self.dirty.push(i);
                let half = self.cfg.max_pending / 2;
                let wake = matches!(self.conns.get(i), Some(Some(s)) if s.st.blocked && s.st.pending <= half);
                if wake {
                    if let Some(Some(s)) = self.conns.get_mut(i) {
                        s.st.blocked = false;
                    }
                    self.with(i, |h, c| h.writable(c));
                }
            }
            Event::PeerClosed { handle, .. } => {
                let i = handle.index() as usize;
                if let Some(Some(s)) = self.conns.get_mut(i) {
                    s.st.peer_closed = true;
                }
                self.with(i, |h, c| h.peer_closed(c));
            }
            Event::Dead { handle, reason, .. } => {
                let _ = io.close(handle);
                if let Some(k) = self.connecting.iter().position(|c| c.0 == handle) {
                    let (_, _, mut h) = self.connecting.swap_remove(k);
                    h.closed(Closed::Dead(reason));
                    return;
                }
                let i = handle.index() as usize;
                if let Some(Some(slot)) = self.conns.get_mut(i) {
                    if slot.st.handle == handle {
                        if let Some(mut s) = self.conns[i].take() {
                            s.h.closed(Closed::Dead(reason));
                        }
                    }
                }
            }
            Event::UdpRecv { .. } => {}
        }
    }

    fn end_of_batch(&mut self, io: &mut Io) {
        // Flush first: connections that finish here must be seen by the
        // service's end_of_batch (a client opens the next one now, not at
        // the next tick).
        self.flush(io);
        let mut pending = Vec::new();
        let mut ctl = Ctl {
            io,
            pending: &mut pending,
        };
        self.svc.end_of_batch(&mut ctl);
        self.connecting.extend(pending);
        self.flush(io);
    }

    fn tick(&mut self, io: &mut Io) {
        let mut pending = Vec::new();
        let mut ctl = Ctl {
            io,
            pending: &mut pending,
        };
        self.svc.tick(&mut ctl);
        self.connecting.extend(pending);
    }
}
