//! A root process that drops its privileges (or changes its root
//! directory) attaches first.
//!
//! The shim attaches to the service at a process's first socket, and the
//! control socket admits the users its mode names (`ixora serve
//! --socket-mode`, by default the service's own: root). Many daemons
//! started as root change to a user of their own before they open their
//! sockets (mosquitto, unbound): their first socket then came as that
//! user, the service refused it, and the program stayed on the kernel
//! stack, saying so, unless the control socket admitted every user (and
//! one that changed its root directory first could not reach the control
//! socket's path at all). So a call that changes a root process's user,
//! group, supplementary groups or root directory attaches before it is
//! made, as root: the attachment is then the process's, as a descriptor
//! opened before the change is. What the service checks at each call is
//! checked against the process as it is then (a bind below port 1024
//! needs CAP_NET_BIND_SERVICE at the bind).
//! A process not running as root, or not under `ixora run`, is left to
//! attach at its first socket. An attachment made so crosses `exec` even
//! without a socket: a root wrapper (`setpriv`, `runuser`, `su`) starts
//! the program as another user on Ixora, as root chose.

use crate::real::real;
use crate::state;
use libc::{c_char, c_int, gid_t, size_t, uid_t};

/// Before a change of credentials: attach, if the process is root under
/// `ixora run` and not attached yet. Such an attachment crosses `exec`
/// even without a socket ([`crate::exec::carry_always`]): a program a
/// root wrapper starts as another user — `setpriv`, `runuser`, `su`,
/// `sudo -u` under `ixora run` — is served as root chose, not refused as
/// that user.
pub(crate) fn before_change() {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if state::attached().is_none()
        && state::env().socket.is_some()
        && unsafe { libc::geteuid() } == 0
        && state::attach().is_some()
    {
        crate::exec::carry_always();
    }
}

/// Interposers that attach first ([`before_change`]), then make the C
/// library's call with the caller's arguments.
macro_rules! attach_first {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $t:ty),*);)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> c_int {
            before_change();
            real!($name: fn($($t),*) -> c_int)($($arg),*)
        }
    )*};
}

attach_first! {
    /// setuid(2).
    setuid(uid: uid_t);
    /// seteuid(3).
    seteuid(uid: uid_t);
    /// setreuid(2).
    setreuid(r: uid_t, e: uid_t);
    /// setresuid(2).
    setresuid(r: uid_t, e: uid_t, s: uid_t);
    /// setgid(2).
    setgid(gid: gid_t);
    /// setegid(3).
    setegid(gid: gid_t);
    /// setregid(2).
    setregid(r: gid_t, e: gid_t);
    /// setresgid(2).
    setresgid(r: gid_t, e: gid_t, s: gid_t);
    /// setgroups(2).
    setgroups(n: size_t, list: *const gid_t);
    /// initgroups(3), which sets the groups inside the C library, past
    /// [`setgroups`].
    initgroups(user: *const c_char, group: gid_t);
    /// chroot(2): the control socket's path may not be reachable from
    /// the new root.
    chroot(path: *const c_char);
}
