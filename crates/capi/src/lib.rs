//! The C API of Ixora's native dataplane; see `include/ixora.h`.
//!
//! A thin layer over [`ixora_engine`]: `ixora_run` opens the port and runs
//! the engine with an application that forwards events to the C callbacks;
//! the batched calls operate on the `ixora_io` the callbacks receive.
//! Foreign pointers are only dereferenced inside calls, under the contract
//! the header states.
#![allow(unsafe_code)]

use bytes::Bytes;
use ixora_core::{ConnHandle, DeadReason};
use ixora_engine::{App, EngineConfig, Event, Io};
use ixora_io::Port;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `ixora_config` (see the header).
#[repr(C)]
pub struct IxoraConfig {
    backend: *const c_char,
    iface: *const c_char,
    ip: *const c_char,
    gateway: *const c_char,
    cores: u32,
    batch: u32,
    poll: c_int,
}

type StartFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void);
type KnockFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u32, u16);
type ConnectedFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u64);
type RecvFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u64, *const u8, usize);
type SentFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u64, usize, usize);
type PeerClosedFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u64);
type DeadFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void, u64, u64, c_int);
type BatchFn = unsafe extern "C" fn(*mut IxoraIo, *mut c_void);

/// `ixora_callbacks` (see the header).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IxoraCallbacks {
    user: *mut c_void,
    start: Option<StartFn>,
    knock: Option<KnockFn>,
    connected: Option<ConnectedFn>,
    recv: Option<RecvFn>,
    sent: Option<SentFn>,
    peer_closed: Option<PeerClosedFn>,
    dead: Option<DeadFn>,
    end_of_batch: Option<BatchFn>,
}

// SAFETY: the callbacks struct is only copied between the engine's core
// threads; calling into C from several threads with the same `user`
// pointer is the contract the header documents (cores > 1 means the C code
// must be thread-safe).
unsafe impl Send for IxoraCallbacks {}
// SAFETY: as above; the struct itself is immutable plain data.
unsafe impl Sync for IxoraCallbacks {}

/// Per connection (handle bits): how many bytes at the front of its
/// readable data `recv` has already handed out that `ixora_recv_done` has
/// not released yet. Each received byte is handed out exactly once.
type Delivered = RefCell<HashMap<u64, usize>>;

/// `ixora_io`: a core's native API for the duration of one callback.
pub struct IxoraIo {
    io: *mut c_void,
    delivered: *const Delivered,
}

impl IxoraIo {
    /// The `Io` this wraps.
    ///
    /// # Safety
    /// `p` must be the pointer a callback received, used during that
    /// callback (the header's contract); the `Io` then lives on the
    /// engine's stack frame that invoked the callback.
    unsafe fn get<'a>(p: *mut IxoraIo) -> Option<&'a mut Io<'a>> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the function contract, `p` points to a live IxoraIo
        // whose `io` points to a live `Io` exclusively lent to this call.
        unsafe { ((*p).io as *mut Io).as_mut() }
    }

    /// The core's delivery bookkeeping.
    ///
    /// # Safety
    /// As [`IxoraIo::get`]; the map lives in the core's `CApp`, which
    /// outlives the callback. Borrows of the `RefCell` must not be held
    /// across a call into C.
    unsafe fn delivered<'a>(p: *const IxoraIo) -> Option<&'a Delivered> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the function contract, `p` points to a live IxoraIo
        // whose `delivered` points to its core's live map (or is NULL).
        unsafe { (*p).delivered.as_ref() }
    }
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the header requires NUL-terminated strings that stay valid
    // for the duration of `ixora_run`'s setup.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_owned)
}

fn errno(e: &std::io::Error) -> c_int {
    -e.raw_os_error().unwrap_or(libc_einval())
}

const fn libc_einval() -> c_int {
    22
}

fn core_errno(e: ixora_core::Error) -> c_int {
    use ixora_core::Error::*;
    -match e {
        InvalidHandle => 9,    // EBADF
        AddrInUse => 98,       // EADDRINUSE
        NoPorts => 99,         // EADDRNOTAVAIL
        InvalidState => 107,   // ENOTCONN
        Unreachable => 113,    // EHOSTUNREACH
        WouldBlock => 11,      // EAGAIN
        MessageTooLong => 90,  // EMSGSIZE
        InvalidArgument => 22, // EINVAL
    }
}

struct CApp {
    cb: IxoraCallbacks,
    delivered: Delivered,
}

impl CApp {
    fn call<R>(&self, io: &mut Io, f: impl FnOnce(*mut IxoraIo, *mut c_void) -> R) -> R {
        let mut w = IxoraIo {
            io: io as *mut Io as *mut c_void,
            delivered: &self.delivered,
        };
        f(&mut w, self.cb.user)
    }
}

fn dead_code(r: DeadReason) -> c_int {
    match r {
        DeadReason::Reset => 1,
        DeadReason::Refused => 2,
        DeadReason::TimedOut => 3,
        DeadReason::Unreachable => 4,
        DeadReason::Aborted => 5,
    }
}

impl App for CApp {
    fn start(&mut self, io: &mut Io) {
        if let Some(f) = self.cb.start {
            // SAFETY: a C function pointer supplied by the caller, called
            // with a valid io wrapper and the caller's user pointer.
            self.call(io, |w, u| unsafe { f(w, u) });
        }
    }

    fn event(&mut self, io: &mut Io, ev: Event) {
        let cb = self.cb;
        match ev {
            Event::Knock { handle, remote, .. } => match cb.knock {
                Some(f) => {
                    let ip = u32::from(*remote.ip()).to_be();
                    // SAFETY: as in `start`.
                    self.call(io, |w, u| unsafe {
                        f(w, u, handle.to_bits(), ip, remote.port())
                    });
                }
                None => {
                    let _ = io.close(handle);
                }
            },
            Event::Connected { handle, cookie } => {
                if let Some(f) = cb.connected {
                    // SAFETY: as in `start`.
                    self.call(io, |w, u| unsafe { f(w, u, handle.to_bits(), cookie) });
                }
            }
            // (The C API has no urgent data: it comes in line.)
            Event::Urgent { .. } => {}
            Event::Recv { handle, cookie, .. } => {
                let Some(f) = cb.recv else { return };
                let key = handle.to_bits();
                // Hand out each received byte once, one contiguous piece per
                // call, starting after what earlier calls handed out and
                // ixora_recv_done has not released yet. The callback may
                // call recv_done (releasing from the front) or close the
                // handle; re-read the list each time so no pointer to a
                // released frame escapes. Every round hands out at least
                // one byte, so the loop ends.
                loop {
                    let Ok(readable) = io.readable(handle) else {
                        self.delivered.borrow_mut().remove(&key);
                        break;
                    };
                    let done = self.delivered.borrow().get(&key).copied().unwrap_or(0);
                    if done >= readable {
                        break;
                    }
                    let mut skip = done;
                    let mut piece: Option<(*const u8, usize)> = None;
                    if let Ok(chunks) = io.recv(handle) {
                        for c in chunks {
                            if skip >= c.len() {
                                skip -= c.len();
                                continue;
                            }
                            let rest = &c[skip..];
                            piece = Some((rest.as_ptr(), rest.len()));
                            break;
                        }
                    }
                    let Some((p, n)) = piece else { break };
                    self.delivered.borrow_mut().insert(key, done + n);
                    // SAFETY: `p..p+n` lies in a frame the stack holds until
                    // recv_done releases it (the header's contract).
                    self.call(io, |w, u| unsafe { f(w, u, key, cookie, p, n) });
                }
            }
            Event::Sent {
                handle,
                cookie,
                acked,
                window,
            } => {
                if let Some(f) = cb.sent {
                    // SAFETY: as in `start`.
                    self.call(io, |w, u| unsafe {
                        f(w, u, handle.to_bits(), cookie, acked, window)
                    });
                }
            }
            Event::PeerClosed { handle, cookie } => {
                if let Some(f) = cb.peer_closed {
                    // SAFETY: as in `start`.
                    self.call(io, |w, u| unsafe { f(w, u, handle.to_bits(), cookie) });
                }
            }
            Event::Dead {
                handle,
                cookie,
                reason,
            } => match cb.dead {
                Some(f) => {
                    let r = dead_code(reason);
                    // SAFETY: as in `start`.
                    self.call(io, |w, u| unsafe { f(w, u, handle.to_bits(), cookie, r) });
                }
                None => {
                    self.delivered.borrow_mut().remove(&handle.to_bits());
                    let _ = io.close(handle);
                }
            },
            Event::UdpRecv { .. } => {}
        }
    }

    fn end_of_batch(&mut self, io: &mut Io) {
        if let Some(f) = self.cb.end_of_batch {
            // SAFETY: as in `start`.
            self.call(io, |w, u| unsafe { f(w, u) });
        }
    }
}

/// Memory the C caller lends to `ixora_sendv`, valid until acknowledged.
struct Lent {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the C caller guarantees the memory stays valid and unchanged
// until acknowledged; it is only read, from the core that was handed it.
unsafe impl Send for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the header's zero-copy contract: `ptr..ptr+len` stays
        // valid and unchanged until the bytes are acknowledged, which is
        // as long as the stack holds this value.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// See the header.
///
/// # Safety
/// `cfg` and `cb` must point to valid structures; strings in `cfg` must be
/// NUL-terminated; `stop`, if not NULL, must stay valid while this runs.
#[no_mangle]
pub unsafe extern "C" fn ixora_run(
    cfg: *const IxoraConfig,
    cb: *const IxoraCallbacks,
    stop: *const c_int,
) -> c_int {
    // SAFETY: the caller passes valid pointers (function contract).
    let (Some(cfg), Some(cb)) = (unsafe { cfg.as_ref() }, unsafe { cb.as_ref() }) else {
        eprintln!("ixora_run: NULL config or callbacks");
        return -libc_einval();
    };
    let cb = *cb;
    let backend = cstr(cfg.backend).unwrap_or_else(|| "af_xdp".into());
    let Some(iface) = cstr(cfg.iface) else {
        eprintln!("ixora_run: config.iface is required");
        return -libc_einval();
    };
    let Some(ipstr) = cstr(cfg.ip) else {
        eprintln!("ixora_run: config.ip is required (e.g. \"198.18.0.2/24\")");
        return -libc_einval();
    };
    let Some((ip, len)) = ipstr
        .split_once('/')
        .and_then(|(a, l)| Some((a.parse::<Ipv4Addr>().ok()?, l.parse::<u8>().ok()?)))
    else {
        eprintln!("ixora_run: config.ip {ipstr:?} is not address/prefix");
        return -libc_einval();
    };
    let mut ec = EngineConfig::new(ip, len);
    ec.cores = cfg.cores.max(1) as usize;
    ec.batch = if cfg.batch == 0 {
        64
    } else {
        cfg.batch as usize
    };
    ec.poll = cfg.poll != 0;
    ec.gateway = cstr(cfg.gateway).and_then(|g| g.parse().ok());
    let port: Arc<dyn Port> = match ixora_io::open_named(&backend, &iface, ec.cores as u32) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ixora_run: {e}");
            return errno(&e);
        }
    };
    let flag = Arc::new(AtomicBool::new(false));
    let watcher = {
        let flag = flag.clone();
        let stop = stop as usize;
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                // SAFETY: the caller keeps `stop` valid while ixora_run runs
                // (function contract); a volatile read sees its updates.
                if stop != 0 && unsafe { std::ptr::read_volatile(stop as *const c_int) } != 0 {
                    flag.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let r = ixora_engine::run(
        port,
        &ec,
        |_| CApp {
            cb,
            delivered: RefCell::new(HashMap::new()),
        },
        flag.clone(),
    );
    flag.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    match r {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("ixora_run: {e}");
            errno(&e)
        }
    }
}

/// See the header.
///
/// # Safety
/// `io` must be the pointer a callback received, used during it.
#[no_mangle]
pub unsafe extern "C" fn ixora_listen(io: *mut IxoraIo, port: u16) -> c_int {
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -libc_einval();
    };
    match io.listen(port, None, 0) {
        Ok(()) => 0,
        Err(e) => core_errno(e),
    }
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_connect(
    io: *mut IxoraIo,
    cookie: u64,
    ip_be: u32,
    port: u16,
) -> i64 {
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -22;
    };
    let dst = SocketAddrV4::new(Ipv4Addr::from(u32::from_be(ip_be)), port);
    match io.connect(cookie, dst) {
        Ok(h) => h.to_bits() as i64,
        Err(e) => i64::from(core_errno(e)),
    }
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_accept(io: *mut IxoraIo, h: u64, cookie: u64) -> c_int {
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -libc_einval();
    };
    match io.accept(ConnHandle::from_bits(h), cookie) {
        Ok(()) => 0,
        Err(e) => core_errno(e),
    }
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`]; `iov` must point to `iovcnt` valid iovecs whose
/// memory stays valid and unchanged until acknowledged.
#[no_mangle]
pub unsafe extern "C" fn ixora_sendv(
    io: *mut IxoraIo,
    h: u64,
    iov: *const Iovec,
    iovcnt: c_int,
) -> isize {
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -22;
    };
    if iovcnt == 0 {
        return 0;
    }
    if iov.is_null() || iovcnt < 0 {
        return -22;
    }
    // SAFETY: the caller passes `iovcnt` valid iovecs.
    let iov = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
    let h = ConnHandle::from_bits(h);
    let mut total = 0isize;
    for v in iov {
        if v.len == 0 {
            continue;
        }
        let b = Bytes::from_owner(Lent {
            ptr: v.base as *const u8,
            len: v.len,
        });
        match io.send(h, b) {
            Ok(n) => {
                total += n as isize;
                if n < v.len {
                    break;
                }
            }
            Err(e) => {
                return if total > 0 {
                    total
                } else {
                    core_errno(e) as isize
                }
            }
        }
    }
    total
}

/// `struct iovec`.
#[repr(C)]
pub struct Iovec {
    base: *mut c_void,
    len: usize,
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`]; `data` must point to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ixora_send_copy(
    io: *mut IxoraIo,
    h: u64,
    data: *const c_void,
    len: usize,
) -> isize {
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -22;
    };
    if data.is_null() && len > 0 {
        return -22;
    }
    if len == 0 {
        return 0;
    }
    let h = ConnHandle::from_bits(h);
    let room = match io.send_space(h) {
        Ok(r) => r.min(len),
        Err(e) => return core_errno(e) as isize,
    };
    // SAFETY: the caller passes `len` readable bytes at `data`.
    let src = unsafe { std::slice::from_raw_parts(data as *const u8, len) };
    // Copy only what the window takes now.
    let mut total = 0;
    if room > 0 {
        match io.send(h, Bytes::copy_from_slice(&src[..room])) {
            Ok(n) => total = n,
            Err(e) => return core_errno(e) as isize,
        }
    }
    if total < len {
        // Offer the next byte as well. With the window full (the usual
        // case) the stack takes nothing but notes that the application
        // is waiting, so `sent` follows when the peer's window opens;
        // without this a window update that acknowledges no new data
        // would report nothing and the caller would wait forever. Should
        // the window have room after all, the byte goes like the others.
        if let Ok(n) = io.send(h, Bytes::copy_from_slice(&src[total..total + 1])) {
            total += n;
        }
    }
    total as isize
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_recv_done(io: *mut IxoraIo, h: u64, n: usize) -> c_int {
    // SAFETY: function contract.
    let delivered = unsafe { IxoraIo::delivered(io) };
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -libc_einval();
    };
    match io.recv_done(ConnHandle::from_bits(h), n) {
        Ok(()) => {
            // The released bytes leave the front of what was handed out.
            if let Some(d) = delivered {
                let mut d = d.borrow_mut();
                if let Some(k) = d.get_mut(&h) {
                    *k = k.saturating_sub(n);
                    if *k == 0 {
                        d.remove(&h);
                    }
                }
            }
            0
        }
        Err(e) => core_errno(e),
    }
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_close(io: *mut IxoraIo, h: u64) -> c_int {
    // SAFETY: function contract.
    if let Some(d) = unsafe { IxoraIo::delivered(io) } {
        d.borrow_mut().remove(&h);
    }
    // SAFETY: function contract.
    let Some(io) = (unsafe { IxoraIo::get(io) }) else {
        return -libc_einval();
    };
    match io.close(ConnHandle::from_bits(h)) {
        Ok(()) => 0,
        Err(e) => core_errno(e),
    }
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_core(io: *const IxoraIo) -> u32 {
    // SAFETY: function contract.
    unsafe { IxoraIo::get(io as *mut IxoraIo) }.map_or(0, |io| io.core() as u32)
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_cores(io: *const IxoraIo) -> u32 {
    // SAFETY: function contract.
    unsafe { IxoraIo::get(io as *mut IxoraIo) }.map_or(0, |io| io.cores() as u32)
}

/// See the header.
///
/// # Safety
/// As [`ixora_listen`].
#[no_mangle]
pub unsafe extern "C" fn ixora_stop(io: *mut IxoraIo) {
    // SAFETY: function contract.
    if let Some(io) = unsafe { IxoraIo::get(io) } {
        io.stop();
    }
}
