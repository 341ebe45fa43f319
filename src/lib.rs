//! sluice: a GPU stream runtime with a stable C ABI.
//!
//! Layers: [`backend`] (the device seam: cuda and host), the safe core
//! (devices, streams, event pools, sync objects, buffers, graphs), and `ffi`
//! (the C ABI only). Nothing here keeps a current stream or a thread-local error.

mod atomic_max;
pub mod backend;
#[doc(hidden)]
pub mod c_enum;
pub mod capture;
pub mod compile;
pub mod counters;
pub mod device;
pub mod dlpack;
pub mod engine;
mod epoch;
pub mod error;
pub mod event;
pub mod graph;
pub mod graph_cache;
mod handle;
mod hot;
mod inline;
pub mod kernel_cache;
pub mod log;
pub mod memory;
pub mod module;
mod objlock;
pub mod ops;
pub mod prefetch;
mod pycapsule;
pub mod rng;
pub mod stream;
pub mod sync;
mod tls;
pub mod trace;

pub mod ffi;

pub use backend::{BackendKind, LaunchDims};
pub use device::Device;
pub use error::{Error, ErrorCode, Result};
pub use event::{RecRef, Recording};
pub use memory::{Buffer, BufferKind};
pub use stream::Stream;
pub use sync::SyncObject;
