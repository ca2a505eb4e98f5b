//! `ixora loadgen http`: a closed-loop HTTP/1.1 load generator on the
//! native API, in the manner of wrk — `conns` connections, each sending its
//! next `GET` as soon as the previous response has arrived — but with the
//! client's TCP in user space, so that the client is not what saturates
//! first when a server is measured on one CPU and the client on another.
//!
//! Keep-alive by default; with `per_conn` = N a connection's N-th request
//! carries `Connection: close`, the server closes, and a new connection
//! replaces it at once. Every response is parsed: status 200, a
//! `Content-Length` (chunked bodies are refused as errors), and, when asked,
//! the body's exact length. A server that ends a keep-alive connection after
//! a response that said `Connection: close` (nginx and lighttpd do after
//! 1000 requests) is followed by a new connection, not counted as an error.

use crate::apps::client::{merge_hist, wind_down, Latency};
use hdrhistogram::Histogram;
use ixora_engine::ev::{Closed, Conn, Ctl, Handler, Service};
use serde::Serialize;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest response head accepted (status line and headers).
const MAX_HEAD: usize = 16 * 1024;

/// What to run.
#[derive(Debug, Clone)]
pub struct HttpPlan {
    /// Server address.
    pub server: SocketAddrV4,
    /// Path to request.
    pub path: String,
    /// Connections open at once, over all cores.
    pub conns: usize,
    /// Requests per connection before it closes (0: keep-alive).
    pub per_conn: usize,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// Expected body length of every response.
    pub body_len: Option<usize>,
}

/// Results merged over the cores.
#[derive(Debug, Default)]
pub struct HttpTotals {
    /// Responses completed in the measured window.
    pub requests: u64,
    /// Connections opened in the measured window.
    pub connections: u64,
    /// Responses that were not `200` or not of the expected length,
    /// malformed responses, connections that died or closed mid-request.
    pub errors: u64,
    /// Responses with another status than 200 (part of `errors`).
    pub status_errors: u64,
    /// Times a connection waited for a free local port.
    pub port_waits: u64,
    /// Connections whose handshake had not completed when the run ended.
    pub unopened: u64,
    /// Request latency in nanoseconds.
    pub hist: Option<Histogram<u64>>,
    /// The first error seen, in words.
    pub first_error: Option<String>,
}

/// Printed by `ixora loadgen http` (one JSON line).
#[derive(Debug, Serialize)]
pub struct HttpReport {
    /// `http://server/path`.
    pub url: String,
    /// Concurrent connections.
    pub conns: usize,
    /// Requests per connection (0: keep-alive).
    pub per_conn: usize,
    /// Cores.
    pub cores: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// Responses per second.
    pub rps: f64,
    /// Responses completed in the measured window.
    pub requests: u64,
    /// New connections per second.
    pub conns_per_sec: f64,
    /// Request latency percentiles in microseconds (send of the request
    /// to the last byte of its response).
    pub latency_us: Latency,
    /// Errors (see [`HttpTotals::errors`]).
    pub errors: u64,
    /// Non-200 responses.
    pub status_errors: u64,
    /// Times opening a connection waited for a free local port.
    pub port_waits: u64,
    /// Connections whose handshake had not completed when the run ended
    /// (a server that does not answer, or refuses SYNs for ports it holds
    /// in TIME-WAIT).
    pub unopened: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
    /// CPU seconds the dataplane cores used.
    pub cpu_seconds: f64,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(100, 60_000_000_000, 3).expect("valid histogram bounds")
}

struct CoreState {
    plan: HttpPlan,
    /// The request line and headers of a keep-alive request, and of the
    /// last request of a connection.
    req: Vec<u8>,
    req_close: Vec<u8>,
    start: Instant,
    hist: Histogram<u64>,
    requests: u64,
    connections: u64,
    errors: u64,
    status_errors: u64,
    first_error: Option<String>,
    open: usize,
    /// Connections opened whose handshake has not completed.
    handshaking: usize,
    port_waits: u64,
}

impl CoreState {
    fn measuring(&self, now: Instant) -> bool {
        let t = now - self.start;
        t >= self.plan.warmup && t < self.plan.warmup + self.plan.duration
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }
}

/// One core's share of the load.
pub struct HttpService {
    st: Rc<RefCell<CoreState>>,
    conns: usize,
    totals: Arc<Mutex<HttpTotals>>,
    done: Arc<AtomicBool>,
}

impl HttpService {
    /// The share of core `core` of `cores`.
    pub fn new(
        plan: HttpPlan,
        core: usize,
        cores: usize,
        totals: Arc<Mutex<HttpTotals>>,
        done: Arc<AtomicBool>,
    ) -> HttpService {
        let conns = plan.conns / cores + usize::from(core < plan.conns % cores);
        let head = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: ixora-loadgen\r\n",
            plan.path, plan.server
        );
        HttpService {
            st: Rc::new(RefCell::new(CoreState {
                req: format!("{head}\r\n").into_bytes(),
                req_close: format!("{head}Connection: close\r\n\r\n").into_bytes(),
                plan,
                start: Instant::now(),
                hist: new_hist(),
                requests: 0,
                connections: 0,
                errors: 0,
                status_errors: 0,
                first_error: None,
                open: 0,
                handshaking: 0,
                port_waits: 0,
            })),
            conns,
            totals,
            done,
        }
    }

    fn open_more(&mut self, ctl: &mut Ctl<HttpConn>) {
        if self.st.borrow().open >= self.conns {
            return; // the common case, every batch: no clock read
        }
        let (server, over) = {
            let st = self.st.borrow();
            let p = &st.plan;
            (p.server, Instant::now() - st.start >= p.warmup + p.duration)
        };
        if over {
            return;
        }
        while self.st.borrow().open < self.conns {
            match ctl.connect(server, HttpConn::new(self.st.clone())) {
                Ok(()) => {
                    let mut st = self.st.borrow_mut();
                    st.open += 1;
                    st.handshaking += 1;
                    if st.measuring(Instant::now()) {
                        st.connections += 1;
                    }
                }
                // Every local port is in use (TIME-WAIT included, reused
                // after a second): open more once some are free.
                Err(ixora_core::Error::NoPorts) => {
                    self.st.borrow_mut().port_waits += 1;
                    break;
                }
                Err(e) => {
                    self.st.borrow_mut().error(format!("connect: {e:?}"));
                    break;
                }
            }
        }
    }
}

impl Drop for HttpService {
    fn drop(&mut self) {
        let st = self.st.borrow();
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.requests += st.requests;
        t.connections += st.connections;
        t.errors += st.errors;
        t.status_errors += st.status_errors;
        t.port_waits += st.port_waits;
        t.unopened += st.handshaking as u64;
        if t.first_error.is_none() {
            t.first_error.clone_from(&st.first_error);
        }
        merge_hist(&mut t.hist, &st.hist);
    }
}

impl Service for HttpService {
    type H = HttpConn;

    fn start(&mut self, ctl: &mut Ctl<HttpConn>) {
        self.st.borrow_mut().start = Instant::now();
        self.open_more(ctl);
    }

    fn accept(&mut self, _: u16, _: SocketAddrV4) -> Option<HttpConn> {
        None
    }

    fn end_of_batch(&mut self, ctl: &mut Ctl<HttpConn>) {
        self.open_more(ctl);
    }

    fn tick(&mut self, ctl: &mut Ctl<HttpConn>) {
        let st = self.st.borrow();
        let over = Instant::now() - st.start >= st.plan.warmup + st.plan.duration;
        let idle = st.open == 0;
        drop(st);
        if !wind_down(ctl, &self.done, over, idle) {
            self.open_more(ctl);
        }
    }
}

/// What a response head says.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// Bytes of body that follow.
    pub body_len: usize,
    /// The server closes the connection after this response
    /// (`Connection: close`, or HTTP/1.0 without keep-alive).
    pub closes: bool,
}

/// Why a head was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// A well-formed response, but not `200`: its status line.
    Status(String),
    /// Not a response this client understands, in words.
    Bad(String),
}

/// Parse a response head (status line and headers, up to and including
/// the blank line). Only `200` with a `Content-Length` is accepted; a
/// chunked body is refused (the benchmark's servers send lengths). Never
/// panics, whatever the bytes.
pub fn parse_head(head: &[u8]) -> Result<Head, HeadError> {
    let bad = |s: String| Err(HeadError::Bad(s));
    let Ok(text) = std::str::from_utf8(head) else {
        return bad("response head is not UTF-8".into());
    };
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or("");
    let mut parts = status.splitn(3, ' ');
    let (ver, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if ver != "HTTP/1.1" && ver != "HTTP/1.0" {
        return bad(format!("not an HTTP/1 response: {status:?}"));
    }
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return bad(format!("malformed status line {status:?}"));
    }
    if code != "200" {
        return Err(HeadError::Status(status.to_string()));
    }
    let mut len = None;
    let mut closes = ver == "HTTP/1.0";
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            match v.parse::<usize>() {
                Ok(n) if len.is_none_or_eq(n) => len = Some(n),
                _ => return bad(format!("bad or conflicting Content-Length {v:?}")),
            }
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            return bad(format!("Transfer-Encoding {v:?} is not supported"));
        } else if k.eq_ignore_ascii_case("connection") {
            if v.eq_ignore_ascii_case("close") {
                closes = true;
            } else if v.eq_ignore_ascii_case("keep-alive") {
                closes = false;
            }
        }
    }
    match len {
        Some(body_len) => Ok(Head { body_len, closes }),
        None => bad("response without Content-Length".into()),
    }
}

/// `None`, or the same value.
trait NoneOrEq {
    fn is_none_or_eq(&self, v: usize) -> bool;
}

impl NoneOrEq for Option<usize> {
    fn is_none_or_eq(&self, v: usize) -> bool {
        self.is_none_or(|x| x == v)
    }
}

/// Where a response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request outstanding.
    Idle,
    /// Reading the status line and headers.
    Head,
    /// Reading `n` more body bytes.
    Body(usize),
    /// The last response arrived; waiting for the server to close.
    Closing,
}

/// One connection.
pub struct HttpConn {
    st: Rc<RefCell<CoreState>>,
    phase: Phase,
    head: Vec<u8>,
    /// Requests sent on this connection.
    sent: usize,
    sent_at: Instant,
    /// The current response said `Connection: close`.
    server_closes: bool,
    body_len: usize,
    /// The handshake completed.
    opened: bool,
}

impl HttpConn {
    fn new(st: Rc<RefCell<CoreState>>) -> HttpConn {
        HttpConn {
            st,
            phase: Phase::Idle,
            head: Vec::with_capacity(512),
            sent: 0,
            sent_at: Instant::now(),
            server_closes: false,
            body_len: 0,
            opened: false,
        }
    }

    fn send(&mut self, c: &mut Conn) {
        self.sent += 1;
        let last = {
            let st = self.st.borrow();
            st.plan.per_conn > 0 && self.sent >= st.plan.per_conn
        };
        self.sent_at = Instant::now();
        let r = {
            let st = self.st.borrow();
            c.write(if last { &st.req_close } else { &st.req })
        };
        if r.is_err() {
            self.fail(c, "request refused by the send window".into());
            return;
        }
        self.phase = Phase::Head;
        self.head.clear();
    }

    fn fail(&mut self, c: &mut Conn, what: String) {
        self.st.borrow_mut().error(what);
        self.phase = Phase::Closing;
        c.abort();
    }

    /// The head is complete (`self.head` ends with CRLF CRLF): check it.
    fn parse_head(&mut self) -> Result<usize, String> {
        match parse_head(&self.head) {
            Ok(h) => {
                self.server_closes = h.closes;
                Ok(h.body_len)
            }
            Err(HeadError::Status(s)) => {
                self.st.borrow_mut().status_errors += 1;
                Err(format!("status {s:?}"))
            }
            Err(HeadError::Bad(e)) => Err(e),
        }
    }

    /// The whole response arrived.
    fn done(&mut self, c: &mut Conn) {
        let now = Instant::now();
        let last = {
            let mut st = self.st.borrow_mut();
            if let Some(want) = st.plan.body_len {
                if self.body_len != want {
                    st.error(format!("body of {} bytes, expected {want}", self.body_len));
                }
            }
            if st.measuring(now) {
                let ns = (now - self.sent_at).as_nanos() as u64;
                let _ = st.hist.record(ns.max(100));
                st.requests += 1;
            }
            st.plan.per_conn > 0 && self.sent >= st.plan.per_conn
        };
        if last || self.server_closes {
            // The server closes now; a new connection replaces this one.
            self.phase = Phase::Closing;
        } else {
            self.phase = Phase::Idle;
            self.send(c);
        }
    }
}

impl Handler for HttpConn {
    fn open(&mut self, c: &mut Conn) {
        self.opened = true;
        self.st.borrow_mut().handshaking -= 1;
        self.send(c);
    }

    fn data(&mut self, c: &mut Conn, mut data: &[u8]) -> usize {
        let n = data.len();
        while !data.is_empty() {
            match self.phase {
                Phase::Head => {
                    // Look for the blank line, also across the boundary
                    // with what is already buffered.
                    let from = self.head.len().saturating_sub(3);
                    self.head.extend_from_slice(data);
                    match self.head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                        Some(p) => {
                            let end = from + p + 4;
                            let rest = self.head.len() - end;
                            data = &data[data.len() - rest..];
                            self.head.truncate(end);
                            match self.parse_head() {
                                Ok(len) => {
                                    self.body_len = len;
                                    self.phase = Phase::Body(len);
                                    if len == 0 {
                                        self.done(c);
                                    }
                                }
                                Err(e) => {
                                    self.fail(c, e);
                                    return n;
                                }
                            }
                        }
                        None if self.head.len() > MAX_HEAD => {
                            self.fail(c, format!("response head over {MAX_HEAD} bytes"));
                            return n;
                        }
                        None => data = &[],
                    }
                }
                Phase::Body(left) => {
                    let take = left.min(data.len());
                    data = &data[take..];
                    self.phase = Phase::Body(left - take);
                    if take == left {
                        self.done(c);
                    }
                }
                Phase::Idle | Phase::Closing => {
                    self.fail(c, format!("{} bytes nobody asked for", data.len()));
                    return n;
                }
            }
        }
        n
    }

    fn peer_closed(&mut self, c: &mut Conn) {
        if self.phase != Phase::Closing && self.phase != Phase::Idle {
            let what = format!("server closed during a request ({:?})", self.phase);
            self.st.borrow_mut().error(what);
        }
        self.phase = Phase::Closing;
        c.close();
    }

    fn closed(&mut self, why: Closed) {
        let mut st = self.st.borrow_mut();
        st.open = st.open.saturating_sub(1);
        if !self.opened {
            st.handshaking = st.handshaking.saturating_sub(1);
        }
        if let Closed::Dead(r) = why {
            if self.phase != Phase::Closing || !matches!(r, ixora_core::DeadReason::Aborted) {
                st.error(format!("connection died: {r:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(h: &str) -> Head {
        parse_head(h.as_bytes()).expect("accepted")
    }

    #[test]
    fn heads_of_the_benchmark_servers() {
        let nginx =
            "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: application/octet-stream\r\n\
                     Content-Length: 20\r\nConnection: keep-alive\r\nAccept-Ranges: bytes\r\n\r\n";
        assert_eq!(
            ok(nginx),
            Head {
                body_len: 20,
                closes: false
            }
        );
        let last = "HTTP/1.1 200 OK\r\ncontent-length: 11000\r\nConnection: close\r\n\r\n";
        assert_eq!(
            ok(last),
            Head {
                body_len: 11000,
                closes: true
            }
        );
        let old = "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            ok(old),
            Head {
                body_len: 0,
                closes: true
            }
        );
    }

    #[test]
    fn refusals_name_the_problem() {
        let e = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n");
        assert_eq!(e, Err(HeadError::Status("HTTP/1.1 404 Not Found".into())));
        for (h, word) in [
            ("SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1"),
            ("HTTP/1.1 2x0 OK\r\n\r\n", "malformed status"),
            ("HTTP/1.1 200 OK\r\n\r\n", "without Content-Length"),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                "not supported",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                "Content-Length",
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "conflicting",
            ),
        ] {
            match parse_head(h.as_bytes()) {
                Err(HeadError::Bad(m)) => assert!(m.contains(word), "{h:?}: {m}"),
                other => panic!("{h:?}: {other:?}"),
            }
        }
        assert!(matches!(parse_head(&[0xff, 0xfe]), Err(HeadError::Bad(_))));
    }

    proptest::proptest! {
        /// Arbitrary bytes never panic the parser.
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = parse_head(&b);
        }

        /// Any length and header case round-trips.
        #[test]
        fn lengths_round_trip(n in 0usize..10_000_000, upper in proptest::bool::ANY) {
            let k = if upper { "CONTENT-LENGTH" } else { "content-length" };
            let h = format!("HTTP/1.1 200 OK\r\n{k}:  {n} \r\n\r\n");
            proptest::prop_assert_eq!(parse_head(h.as_bytes()), Ok(Head { body_len: n, closes: false }));
        }
    }
}
