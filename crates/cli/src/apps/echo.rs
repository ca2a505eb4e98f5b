//! The echo server (`ixora echo-server`) lives in the engine, where tests
//! use it too.

pub use ixora_engine::echo::EchoService;
