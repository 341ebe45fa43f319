//! The checkpointable on-device RNG (issue 13), host side so far: the Philox
//! generator that follows cuRAND state for state, and the versioned checkpoint
//! format. The device kernels, the C API and the bindings are still to come.

pub mod checkpoint;
pub mod philox;
