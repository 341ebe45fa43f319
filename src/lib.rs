//! sluice: a GPU stream runtime with a stable C ABI.
//!
//! Layers: [`backend`] (the device seam: cuda and host), the safe core
//! (devices, streams, event pools, sync objects, buffers, graphs), and `ffi`
//! (the C ABI only). Nothing here keeps a current stream or a thread-local error.

pub mod backend;
pub mod error;

pub use error::{Error, ErrorCode, Result};
