//! C stdio streams on Ixora sockets.
//!
//! glibc's `FILE` streams read and write their descriptor with the C
//! library's internal `read` and `write`, which no preloaded library can
//! interpose: a stream on an Ixora socket's descriptor would read and
//! write its placeholder, a kernel socket that carries nothing (a write
//! fails with `EPIPE`). Programs meet this in two ways: one `exec`ed with
//! a connection on its standard input and output (inetd-style services;
//! `git upload-pack` under `git daemon` writes its refs through `stdout`
//! and was killed by SIGPIPE), and one that calls `fdopen` on a socket.
//!
//! Such streams are made with `fopencookie` instead, whose reads and
//! writes call the interposed `read` and `write` on the descriptor (so
//! they follow the descriptor: a `dup2` onto it later redirects the
//! stream, as with a stream of the C library's own). The stream's
//! descriptor field is set, so `fileno` gives the descriptor. After an
//! `exec`, `stdin`, `stdout` and `stderr` are replaced by such streams
//! for the standard descriptors that are Ixora sockets, before `main`
//! (standard error unbuffered, the others fully buffered, as the C
//! library buffers a socket); `fdopen` of an Ixora socket returns one.
//! Not covered: `freopen` of a replaced standard stream fails (a cookie
//! stream cannot be reopened), and streams the program made on the
//! descriptor before it became Ixora's.

use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` on 64-bit Linux
/// (x86-64, aarch64): its layout is the C library's ABI.
#[cfg(target_pointer_width = "64")]
const FILENO_OFFSET: usize = 112;

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: the stream passes its buffer of `n` writable bytes.
    unsafe { crate::shim::io::read(c as usize as c_int, buf.cast(), n) }
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: the stream passes `n` readable bytes.
    let r = unsafe { crate::shim::io::write(c as usize as c_int, buf.cast(), n) };
    // fopencookie: a write returns the bytes written, 0 on error.
    r.max(0)
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    crate::shim::close(c as usize as c_int)
}

/// A stream on descriptor `fd` with `mode` (fopen's), reading and writing
/// through the shim; null if the C library refused it.
fn stream(fd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: None,
        close: Some(cookie_close),
    };
    // SAFETY: `mode` is a C string (the caller's, or ours); the cookie is
    // the descriptor's number, not a pointer.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !f.is_null() {
        // SAFETY: `f` is a live glibc FILE, whose `_fileno` int is at
        // FILENO_OFFSET; a cookie stream keeps -1 there and never reads it
        // but for `fileno`.
        unsafe { *(f as *mut u8).add(FILENO_OFFSET).cast::<c_int>() = fd };
    }
    f
}

/// After an `exec` took up Ixora sockets: replace the standard streams
/// whose descriptors are Ixora sockets (see the module's documentation).
/// Runs before `main`, when nothing was written to them yet.
pub fn adopt_standard_streams() {
    for fd in 0..=2 {
        if crate::state::sock(fd).is_none() {
            continue;
        }
        let mode = if fd == 0 { c"r" } else { c"w" };
        let f = stream(fd, mode.as_ptr());
        if f.is_null() {
            continue;
        }
        // SAFETY: before `main`, in the process's only thread: the C
        // library's standard stream variables are ours to set.
        unsafe {
            match fd {
                0 => stdin = f,
                1 => stdout = f,
                _ => {
                    libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
                    stderr = f;
                }
            }
        }
    }
}

/// fdopen(3): on an Ixora socket, a stream that reads and writes through
/// the shim.
#[no_mangle]
pub extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if crate::state::sock(fd).is_some() && !mode.is_null() {
        return stream(fd, mode);
    }
    crate::real::real!(fdopen: fn(c_int, *const c_char) -> *mut FILE)(fd, mode)
}
