//! The channel between an application and Ixora's stack service: what the
//! preload shim (`ixora-preload`) and the service (`ixora-service`) agree
//! on, and nothing of the stack itself (DESIGN.md: the shim depends on the
//! channel, never on `core`).
//!
//! * [`layout`] — the two shared-memory regions of an attached
//!   application: the *down* region the service writes and the app maps
//!   read-only (receive rings, transmit heads, socket state), and the *up*
//!   region the app writes (transmit rings, receive heads, requests, the
//!   activity word and bitmap, waiter bits, call counters). NewtOS §4's
//!   exposed socket buffers.
//! * [`ctl`] — the fixed-size messages of the Unix-domain control socket
//!   (slow path: attach, socket, bind, listen, connect, options, stats).
//! * [`os`] — memfds and seals, mappings, descriptor passing, wake-ups
//!   across processes.
//! * [`attach`] — the application's side of `ATTACH`.
//! * [`reach`] — whether the shim can serve a program, from its image.

#[allow(unsafe_code)]
pub mod attach;
#[allow(unsafe_code)]
pub mod layout;
#[allow(unsafe_code)]
pub mod os;

pub mod ctl;
pub mod reach;
