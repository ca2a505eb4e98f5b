//! Opening a port for the backend named on the command line.

use crate::dataplane::DataplaneArgs;
use ixora_io::Port;
use std::io;
use std::sync::Arc;

/// Open the port `a` describes.
pub fn open(a: &DataplaneArgs) -> io::Result<Arc<dyn Port>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the {:?} backend is not wired in yet", a.backend),
    ))
}
