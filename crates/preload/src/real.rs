//! The C library's own definitions of the calls we interpose, found with
//! `dlsym(RTLD_NEXT, ..)` on first use, and raw system calls for the
//! shim's own needs (so they are neither interposed nor counted).

use libc::{c_int, c_long, c_void};

/// Resolve `name` (NUL-terminated) in the next object after us.
pub fn next(name: &'static [u8]) -> usize {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: `name` is a NUL-terminated static string; dlsym only reads
    // it. RTLD_NEXT looks past this library, finding the C library's
    // definition.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) as usize }
}

/// The real function `$name` with the given signature, resolved once.
/// A variadic C function is written `fn(fixed; ...)`.
macro_rules! real {
    ($name:ident : fn($($t:ty),* ; ...) -> $r:ty) => {
        $crate::real::real!(@imp $name, extern "C" fn($($t),* , ...) -> $r)
    };
    ($name:ident : fn($($t:ty),*) -> $r:ty) => {
        $crate::real::real!(@imp $name, extern "C" fn($($t),*) -> $r)
    };
    (@imp $name:ident, $fty:ty) => {{
        static P: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = P.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            p = $crate::real::next(concat!(stringify!($name), "\0").as_bytes());
            if p == 0 {
                $crate::real::missing(stringify!($name));
            }
            P.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: `p` is the C library's definition of `$name`, whose C
        // prototype is the signature given here. It is typed as a safe
        // function because every caller is an interposed function that
        // forwards its own caller's arguments unchanged: the obligations
        // on those arguments are the application's, as without the shim.
        unsafe { std::mem::transmute::<usize, $fty>(p) }
    }};
}
pub(crate) use real;

/// A symbol the C library lacks: nothing sensible can continue.
pub fn missing(name: &str) -> ! {
    let msg = format!("ixora-preload: the C library has no `{name}`\n");
    sys_write(2, msg.as_bytes());
    // SAFETY: abort(3) has no preconditions.
    unsafe { libc::abort() }
}

fn ret(r: c_long) -> isize {
    r as isize
}

/// write(2) without interposition.
pub fn sys_write(fd: c_int, b: &[u8]) -> isize {
    // SAFETY: `b` is a live buffer of `b.len()` bytes.
    ret(unsafe {
        crate::real::syscall_fn()(libc::SYS_write, fd, b.as_ptr() as *const c_void, b.len())
    })
}

/// Say `what` on standard error, once per process for each `said`.
pub fn say_once(said: &std::sync::atomic::AtomicBool, what: &str) {
    if !said.swap(true, std::sync::atomic::Ordering::Relaxed) {
        sys_write(2, what.as_bytes());
    }
}

/// Ring an eventfd (the app's doorbell).
pub fn sys_ring(fd: c_int) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    unsafe {
        crate::real::syscall_fn()(
            libc::SYS_write,
            fd,
            &one as *const u64 as *const c_void,
            8usize,
        );
    }
}

/// poll(2) without interposition (timeout in ms, -1 forever). Like the C
/// call: -1 with errno set on failure.
pub fn sys_poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> c_int {
    sys_ppoll(fds, timeout_ms, None)
}

/// [`sys_poll`] with the signal mask `mask` (None: unchanged) in force
/// while it sleeps, as `ppoll` sets it.
pub fn sys_ppoll(
    fds: &mut [libc::pollfd],
    timeout_ms: c_int,
    mask: Option<&libc::sigset_t>,
) -> c_int {
    let t = (timeout_ms >= 0).then(|| std::time::Duration::from_millis(timeout_ms as u64));
    sys_ppoll_for(fds, t, mask)
}

/// [`sys_ppoll`] with a timeout to the nanosecond (None: no limit).
pub fn sys_ppoll_for(
    fds: &mut [libc::pollfd],
    timeout: Option<std::time::Duration>,
    mask: Option<&libc::sigset_t>,
) -> c_int {
    let mask = mask.map_or(std::ptr::null(), |m| m as *const libc::sigset_t);
    let ts;
    let tsp = match timeout {
        None => std::ptr::null(),
        Some(t) => {
            ts = libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
            };
            &ts as *const libc::timespec
        }
    };
    // SAFETY: `fds` is a live array; `tsp` is null or a live timespec;
    // `mask` is null or a live signal set, of which the kernel reads 8
    // bytes.
    unsafe {
        crate::real::syscall_fn()(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            mask,
            8usize,
        ) as c_int
    }
}

/// A system call of at most three integer arguments (descriptors,
/// flags, commands: no pointers) through the C library's `syscall`, not
/// the shim's (which takes socket calls on descriptors it knows for
/// itself).
pub fn sys3(n: c_long, a: c_long, b: c_long, c: c_long) -> c_long {
    // SAFETY: by this function's contract no argument is a pointer; a
    // system call given integers reads or writes no memory of ours.
    unsafe { syscall_fn()(n, a, b, c) }
}

/// The C library's `syscall`, resolved once (at load: a program's first
/// `syscall` may come from a signal handler, where `dlsym` is unsafe).
///
/// The shim's own raw system calls go through this, never through
/// `libc::syscall`: that name is the shim's interposed [`syscall`]
/// (crate::shim::syscall), which hands socket calls on the shim's own
/// descriptors to the interposed functions.
pub fn syscall_fn() -> unsafe extern "C" fn(c_long, ...) -> c_long {
    real!(syscall: fn(c_long; ...) -> c_long)
}

/// read(2) without interposition.
pub fn sys_read(fd: c_int, b: &mut [u8]) -> isize {
    // SAFETY: `b` is a live, writable buffer of `b.len()` bytes.
    ret(unsafe {
        crate::real::syscall_fn()(libc::SYS_read, fd, b.as_mut_ptr() as *mut c_void, b.len())
    })
}

/// epoll_ctl(2) without interposition.
pub fn sys_epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: &mut libc::epoll_event) -> c_int {
    // SAFETY: `ev` is a live epoll_event.
    unsafe {
        crate::real::syscall_fn()(
            libc::SYS_epoll_ctl,
            ep,
            op,
            fd,
            ev as *mut libc::epoll_event,
        ) as c_int
    }
}

/// eventfd2(2) (not interposed).
pub fn sys_eventfd(flags: c_int) -> c_int {
    // SAFETY: eventfd2(2) has no memory arguments.
    unsafe { crate::real::syscall_fn()(libc::SYS_eventfd2, 0, flags) as c_int }
}

/// close(2) without interposition.
pub fn sys_close(fd: c_int) {
    sys3(libc::SYS_close, fd as c_long, 0, 0);
}

/// dup3(2) without the shim (`newfd` becomes `fd`'s file, atomically).
pub fn sys_dup3(fd: c_int, newfd: c_int, flags: c_int) -> c_int {
    // SAFETY: dup3(2) has no memory arguments.
    unsafe { crate::real::syscall_fn()(libc::SYS_dup3, fd, newfd, flags) as c_int }
}

/// An unconnected TCP socket to hold an Ixora socket's number, or -1.
pub fn sys_placeholder(cloexec: bool) -> c_int {
    let flags = if cloexec { libc::SOCK_CLOEXEC } else { 0 };
    // SAFETY: socket(2) has no memory arguments.
    unsafe {
        crate::real::syscall_fn()(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_STREAM | flags,
            0,
        ) as c_int
    }
}

/// Set errno.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

/// Read errno.
pub fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}
