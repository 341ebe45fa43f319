//! The shipped C library: the `sluice` crate's C ABI (its `#[no_mangle]`
//! functions) linked as a cdylib and a staticlib of their own, so that the
//! release profile's LTO applies (cargo gives none to a crate that is also an
//! rlib) and the op path reaches its statics without the GOT
//! (`docs/decisions.md`).

pub use sluice_core::ffi;
