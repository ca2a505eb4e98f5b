//! The dataplane applications behind `ixora echo-server`, `ixora
//! echo-client`, `ixora netpipe` and `ixora loadgen`, written on the
//! native API (the event library, but for the memcached generator).

pub mod client;
pub mod echo;
pub mod http;
pub mod loadgen;
pub mod netpipe;
