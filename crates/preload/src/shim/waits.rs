//! Waits the shim does not otherwise see: condition variables,
//! semaphores and sleeps. A thread about to block in one first rings the
//! service's doorbell if a ring is owed ([`state::kick_owed`]).
//!
//! Why: a write to an Ixora socket while the service sleeps defers the
//! ring to the program's next poll, block or exit (`state::signal`), one
//! per turn of an event loop. A thread-pool worker that writes its reply
//! and then waits for its next job on a condition variable makes none of
//! those: its reply waited for the service's next nap to end (1 ms after
//! work, up to 16 ms when idle). OpenLDAP's slapd (workers park in
//! `pthread_cond_wait` after each reply) took 2.2 ms per modify where the
//! kernel took 0.2–0.3 ms. Each wrapper costs one relaxed load when
//! nothing is owed.
//!
//! The C library's own names are wrapped (its internal calls, `sleep`
//! through `nanosleep` for instance, do not come here, so each is wrapped
//! on its own); the raw `futex` wait through `syscall(3)` (Rust's locks
//! and channels) is wrapped in the shim's `syscall`.

use super::*;
use libc::{clockid_t, pthread_cond_t, pthread_mutex_t, sem_t, timespec};

/// pthread_cond_wait(3).
#[no_mangle]
pub extern "C" fn pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int {
    state::kick_owed();
    real!(pthread_cond_wait: fn(*mut pthread_cond_t, *mut pthread_mutex_t) -> c_int)(c, m)
}

/// pthread_cond_timedwait(3).
#[no_mangle]
pub extern "C" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    state::kick_owed();
    real!(pthread_cond_timedwait: fn(*mut pthread_cond_t, *mut pthread_mutex_t, *const timespec) -> c_int)(
        c, m, t,
    )
}

/// pthread_cond_clockwait(3).
#[no_mangle]
pub extern "C" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    state::kick_owed();
    real!(pthread_cond_clockwait: fn(*mut pthread_cond_t, *mut pthread_mutex_t, clockid_t, *const timespec) -> c_int)(
        c, m, clock, t,
    )
}

/// sem_wait(3).
#[no_mangle]
pub extern "C" fn sem_wait(s: *mut sem_t) -> c_int {
    state::kick_owed();
    real!(sem_wait: fn(*mut sem_t) -> c_int)(s)
}

/// sem_timedwait(3).
#[no_mangle]
pub extern "C" fn sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int {
    state::kick_owed();
    real!(sem_timedwait: fn(*mut sem_t, *const timespec) -> c_int)(s, t)
}

/// sem_clockwait(3).
#[no_mangle]
pub extern "C" fn sem_clockwait(s: *mut sem_t, clock: clockid_t, t: *const timespec) -> c_int {
    state::kick_owed();
    real!(sem_clockwait: fn(*mut sem_t, clockid_t, *const timespec) -> c_int)(s, clock, t)
}

/// nanosleep(2).
#[no_mangle]
pub extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    state::kick_owed();
    real!(nanosleep: fn(*const timespec, *mut timespec) -> c_int)(req, rem)
}

/// clock_nanosleep(2).
#[no_mangle]
pub extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    state::kick_owed();
    real!(clock_nanosleep: fn(clockid_t, c_int, *const timespec, *mut timespec) -> c_int)(
        clock, flags, req, rem,
    )
}

/// usleep(3).
#[no_mangle]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    state::kick_owed();
    real!(usleep: fn(libc::useconds_t) -> c_int)(us)
}

/// sleep(3).
#[no_mangle]
pub extern "C" fn sleep(s: c_uint) -> c_uint {
    state::kick_owed();
    real!(sleep: fn(c_uint) -> c_uint)(s)
}
