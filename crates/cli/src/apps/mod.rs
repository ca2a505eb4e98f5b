//! The dataplane applications behind `ixora echo-server`, `ixora
//! echo-client` and `ixora netpipe`, written on the native API's event
//! library.

pub mod client;
pub mod echo;
pub mod loadgen;
pub mod netpipe;
