//! libFuzzer target: the input bytes are a call sequence over the C ABI, decoded
//! by the VM that `tests/fuzz_abi.rs` also runs (see that file and docs/reliability.md).
#![no_main]

#[path = "../../tests/support/abi_vm.rs"]
mod abi_vm;

use libfuzzer_sys::fuzz_target;

/// Deliberately huge allocations must come back as `SLUICE_ERROR_OUT_OF_MEMORY`,
/// so ASan returns NULL for them instead of aborting.
#[no_mangle]
pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
    c"allocator_may_return_null=1".as_ptr()
}

fuzz_target!(|data: &[u8]| {
    abi_vm::Vm::run(data);
});
