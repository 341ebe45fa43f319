//! Random call sequences over the C ABI (the VM of `tests/support/abi_vm.rs`, shared
//! with the cargo-fuzz target `fuzz/fuzz_targets/abi.rs`), and a replay of the
//! committed fuzz corpus. Bounded: `PROPTEST_CASES` (default 48) inputs of up to
//! 3 KiB each; on 2 cores the pass takes well under a minute.
#[path = "support/abi_vm.rs"]
mod abi_vm;

use proptest::collection::vec;
use proptest::prelude::*;

/// The VM forges raw driver pointers (`sluice_stream_wrap_external`), which only the
/// host backend can check: it runs where no CUDA device is (CI, the fuzzer).
fn skip_with_cuda() -> bool {
    let mut n = 0u32;
    let e = sluice::ffi::sluice_device_count(sluice::ffi::SLUICE_BACKEND_CUDA, &mut n);
    sluice::ffi::sluice_error_free(e);
    if n > 0 {
        eprintln!("skipped: a CUDA device is present (the VM forges driver pointers)");
    }
    n > 0
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn abi_random_call_sequences(data in vec(any::<u8>(), 0..3072)) {
        if skip_with_cuda() {
            return Ok(());
        }
        abi_vm::Vm::run(&data);
    }
}

/// Every input of the committed corpus (the fuzzer's findings included) still passes.
#[test]
fn abi_fuzz_corpus_replays() {
    if skip_with_cuda() {
        return;
    }
    // `SLUICE_ABI_VM_CORPUS=dir` replays another folder (one input kept by
    // `SLUICE_ABI_VM_DUMP`, say).
    let dir = std::env::var_os("SLUICE_ABI_VM_CORPUS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/abi")
        });
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("fuzz/corpus/abi") {
        let p = e.expect("entry").path();
        abi_vm::Vm::run(&std::fs::read(&p).expect("read corpus file"));
        n += 1;
    }
    assert!(n > 0, "empty corpus");
}

/// A sequence that uses every kind of handle, stale ones included, balances.
#[test]
fn abi_vm_fixed_sequence() {
    if skip_with_cuda() {
        return;
    }
    let data: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    abi_vm::Vm::run(&data);
}
