//! An echo server on the event library: every byte received on a
//! connection is sent back on it (RFC 862 semantics over TCP), so any TCP
//! client is a valid peer. `ixora echo-server`, and the peer of tests.

use crate::ev::{Conn, Ctl, Handler, Service};
use std::net::SocketAddrV4;

/// Listens on one port on every core.
pub struct EchoService {
    /// The port.
    pub port: u16,
}

/// One echoed connection.
pub struct EchoConn;

impl Handler for EchoConn {
    fn data(&mut self, c: &mut Conn, data: &[u8]) -> usize {
        // Take what fits under the pending limit; the rest stays in the
        // receive window (back-pressure to the sender).
        let room = (1usize << 20).saturating_sub(c.pending());
        let n = data.len().min(room);
        if n > 0 && c.write(&data[..n]).is_err() {
            return 0;
        }
        n
    }

    fn writable(&mut self, _c: &mut Conn) {}
}

impl Service for EchoService {
    type H = EchoConn;

    fn start(&mut self, ctl: &mut Ctl<EchoConn>) {
        if let Err(e) = ctl.listen(self.port) {
            eprintln!("echo: cannot listen on port {}: {e}", self.port);
            ctl.io().stop();
        }
    }

    fn accept(&mut self, _port: u16, _peer: SocketAddrV4) -> Option<EchoConn> {
        Some(EchoConn)
    }
}
