//! `libixora_preload.so`: POSIX sockets without system calls (NewtOS,
//! "On Sockets and System Calls" §4–§6) for unmodified programs, loaded
//! with `LD_PRELOAD` by `ixora run`.
//!
//! The library interposes the socket calls of the C library. A TCP/IPv4
//! socket becomes an *Ixora socket* when it is bound to the service's
//! address (or `INADDR_ANY`) or connects to an address on the service's
//! subnet (its own address included: the service loops such a
//! connection inside its stack); so does a dual-stack TCP/IPv6 socket bound to `::` or using a
//! v4-mapped address (`::ffff:a.b.c.d`), whose addresses then read back
//! v4-mapped; UDP sockets too, the same way (or at their first send to
//! the service's subnet). Everything else — files, pipes, Unix sockets,
//! IPv6-only sockets, real IPv6 addresses, sockets on other addresses —
//! goes to the kernel unchanged.
//!
//! An Ixora socket is a slot in the shared-memory regions the service
//! gave this application (`ixora_channel::layout`). Reads copy out of the
//! receive ring, writes copy into the transmit ring, `accept` pops an
//! already established connection from the listener's accept queue,
//! `close` sets a request bit (the service finishes it), and
//! `epoll_wait`/`poll`/`select` evaluate readiness from the rings. None of
//! that enters the kernel; a call enters it only to create or configure a
//! socket (control socket), to block when nothing is ready, to wake a
//! sleeping service, or to look at kernel descriptors in a mixed set.
//!
//! Every Ixora socket still owns a kernel descriptor (an unconnected
//! socket) so that its number is unique in the process and survives
//! `fork`; closed ones are kept in a pool and reused by `accept` without a
//! system call. To the program a pooled number is closed: calls on it fail
//! with EBADF, `dup2`/`dup3` onto it give it back, and `close_range` /
//! `closefrom` release what they cover while sparing the shim's own
//! descriptors.
//!
//! Behaviour across `fork`: the child keeps every Ixora socket (the
//! regions are shared mappings; a reference count in shared memory makes
//! the last `close` in any process close the socket) and opens its own
//! control connection. Across `exec`, as on Linux, a descriptor without
//! close-on-exec stays open and one with it is closed: the new program,
//! under the shim too, takes up the application again (see `exec`). A
//! child that `posix_spawn` starts takes up what its file actions left
//! it, and so does one of `system` or `popen` (see `exec`).
//!
//! A socket passed to another process over a Unix socket (`SCM_RIGHTS`)
//! moves to the receiver's application through the service (see
//! `handover`).

#![allow(unsafe_code)]

mod creds;
mod exec;
mod handover;
mod kwatch;
mod netlink;
mod real;
mod secure;
mod shim;
mod splice;
mod state;
mod stdio;
