//! Runtime kernel compilation (issue 14, part 1): `Module::compile` with NVRTC.
//!
//! On host every compile must give `Unsupported` naming the host backend. On cuda
//! (NVRTC must be installed there: a missing NVRTC fails these tests) kernels are
//! compiled, launched and their data checked: the default (device) architecture, an
//! explicit virtual one (PTX), `<sluice/rng.cuh>` against the host Philox, a syntax
//! error (`Compile` with the log), and the kernel cache (miss, hit, a corrupted and a
//! truncated entry refused and rewritten, include paths bypassing it).

mod common;
use common::{kit, Kit};
use sluice::kernel_cache::{self, CacheOutcome};
use sluice::module::{Function, Module};
use sluice::ops;
use sluice::rng::philox::PhiloxState;
use sluice::{Buffer, ErrorCode, LaunchDims, Stream};
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::Arc;

/// y[i] = a * x[i] + i, for i < n.
const SAXPY: &CStr = c"
extern \"C\" __global__ void saxpy_i(float* y, const float* x, float a, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + (float)i;
}
";

/// out[i] = the first draw of Philox(seed, subsequence i, offset 7).
const RNG_DRAWS: &CStr = c"
#include <sluice/rng.cuh>
extern \"C\" __global__ void first_draws(unsigned int* out, unsigned long long seed, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    sluice_rng_state s;
    sluice_rng_init(seed, i, 7, &s);
    out[i] = sluice_rng_next(&s);
}
";

/// p[i] = 3 p[i] + 1 once the kernel ahead on the stream completed: written for
/// programmatic dependent launch (it lets the next kernel start at once, then waits).
const BUMP: &CStr = c"
extern \"C\" __global__ void bump(unsigned int* p, unsigned int n) {
    asm volatile(\"griddepcontrol.launch_dependents;\");
    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * 3u + 1u;
}
";

/// 64 KiB of dynamic shared memory: s[i] = 3i, then out[i] = s[n - 1 - i].
const BIG: &CStr = c"
extern \"C\" __global__ void big(unsigned *out) {
    extern __shared__ unsigned s[];
    unsigned n = 64 * 1024 / 4;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 3u;
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}
";

/// A cluster of 16 blocks (non-portable): each block writes its rank in the cluster
/// and the cluster's size.
const CLUSTER16: &CStr = c"
extern \"C\" __global__ void __cluster_dims__(16, 1, 1) ranks(unsigned *out) {
    unsigned rank, size;
    asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));
    asm(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(size));
    if (threadIdx.x == 0) out[blockIdx.x] = rank | size << 16;
}
";

const N: usize = 10_007;

/// Launches `f`, a kernel whose one parameter is `unsigned* out`, writing `out`.
fn launch_into(
    s: &Arc<Stream>,
    f: &Function,
    dims: LaunchDims,
    out: &Arc<Buffer>,
) -> sluice::Result<()> {
    let mut p = out.addr;
    let mut args = [&mut p as *mut u64 as *mut c_void];
    let w = [out.sync.clone()];
    // SAFETY: args match f(unsigned*), as the callers' kernels are.
    unsafe { ops::launch(s, f, dims, &mut args, &[], &w) }
}

fn dims(n: usize) -> LaunchDims {
    LaunchDims {
        grid: [n.div_ceil(256) as u32, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

fn opts(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A fresh directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn floats(k: &Kit, s: &Stream, b: &Buffer) -> Vec<f32> {
    k.read(s, b).into_iter().map(f32::from_bits).collect()
}

/// Launches `saxpy_i` from `m` and checks every word.
fn run_saxpy(k: &Kit, s: &Arc<Stream>, m: &Arc<Module>, label: &str) {
    let f = m
        .function(c"saxpy_i")
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let (x, y) = (k.buffer(s, N), k.buffer(s, N));
    let xs: Vec<u32> = (0..N).map(|i| (i as f32 * 0.5).to_bits()).collect();
    k.write(s, &x, &xs);
    let (mut py, mut px, mut a, mut n) = (y.addr, x.addr, 3.0f32, N as u64);
    let mut args = [
        &mut py as *mut u64 as *mut c_void,
        &mut px as *mut u64 as *mut c_void,
        &mut a as *mut f32 as *mut c_void,
        &mut n as *mut u64 as *mut c_void,
    ];
    let (r, w) = ([x.sync.clone()], [y.sync.clone()]);
    // SAFETY: args match saxpy_i(float*, const float*, float, unsigned long long).
    unsafe { ops::launch(s, &f, dims(N), &mut args, &r, &w) }
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let got = floats(k, s, &y);
    for (i, v) in got.iter().enumerate() {
        let want = 3.0 * (i as f32 * 0.5) + i as f32;
        assert_eq!(*v, want, "{label}: y[{i}]");
    }
}

#[test]
fn host_compile_is_unsupported() {
    let k = kit();
    if k.is_cuda() {
        return;
    }
    let dir = temp_dir("kc-host");
    for cache in [None, Some(dir.as_path())] {
        let e = Module::compile_cached(&k.dev, SAXPY, None, &[], cache)
            .err()
            .expect("host cannot compile");
        assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
        assert!(e.message.contains("host"), "{}", e.message);
    }
    assert!(!dir.exists(), "a failed compile must not create the cache");
    // The argument checks come first on every backend.
    let e = Module::compile(&k.dev, c"", None, &[])
        .err()
        .expect("empty");
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let e = Module::compile(&k.dev, SAXPY, None, &opts(&[""]))
        .err()
        .expect("empty option");
    assert_eq!(e.code, ErrorCode::InvalidArgument);
}

#[test]
fn compile_launch_and_check() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let s = k.stream();
    let (m, outcome) = Module::compile_cached(
        &k.dev,
        SAXPY,
        Some(c"saxpy.cu"),
        &opts(&["--std=c++17"]),
        None,
    )
    .expect("compile saxpy");
    assert_eq!(outcome, CacheOutcome::Off);
    run_saxpy(&k, &s, &m, "default architecture");

    // An explicit virtual architecture: PTX, compiled for the device by the driver.
    let (major, minor) = k.dev.props().expect("props").compute_capability;
    let arch = format!("--gpu-architecture=compute_{major}{minor}");
    let m = Module::compile(&k.dev, SAXPY, None, std::slice::from_ref(&arch))
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
    run_saxpy(&k, &s, &m, &arch);

    // Without extern "C" the name is mangled: a clean NotFound.
    let m = Module::compile(
        &k.dev,
        c"__global__ void mangled(int* p) { *p = 1; }",
        None,
        &[],
    )
    .expect("compile");
    assert_eq!(
        m.function(c"mangled").err().map(|e| e.code),
        Some(ErrorCode::NotFound)
    );
}

#[test]
fn builtin_rng_header_matches_the_host_philox() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let s = k.stream();
    let m = Module::compile(&k.dev, RNG_DRAWS, Some(c"rng_draws.cu"), &[])
        .expect("compile with <sluice/rng.cuh>");
    let f = m.function(c"first_draws").expect("first_draws");
    let out = k.buffer(&s, N);
    let seed = 0x1234_5678_9abc_def0u64;
    let (mut p, mut sd, mut n) = (out.addr, seed, N as u32);
    let mut args = [
        &mut p as *mut u64 as *mut c_void,
        &mut sd as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
    ];
    let w = [out.sync.clone()];
    // SAFETY: args match first_draws(unsigned*, unsigned long long, unsigned).
    unsafe { ops::launch(&s, &f, dims(N), &mut args, &[], &w) }.expect("launch");
    let got = k.read(&s, &out);
    for (i, v) in got.iter().enumerate() {
        let want = PhiloxState::new(seed, i as u64, 7).next_u32();
        assert_eq!(*v, want, "draw of subsequence {i}");
    }
}

#[test]
fn a_syntax_error_gives_the_compile_log() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let src = c"extern \"C\" __global__ void broken(int* p) {\n  *p = 1\n}\n";
    let e = Module::compile(&k.dev, src, Some(c"broken_kernel.cu"), &[])
        .err()
        .expect("a syntax error");
    assert_eq!(e.code, ErrorCode::Compile, "{e:?}");
    assert!(
        e.message.contains("broken_kernel.cu(") && e.message.contains("error"),
        "no compile log in: {}",
        e.message
    );
    assert!(e.message.contains("compile log"), "{}", e.message);

    let e = Module::compile(&k.dev, SAXPY, None, &opts(&["--no-such-option"]))
        .err()
        .expect("a bad option");
    assert_eq!(e.code, ErrorCode::Compile, "{e:?}");
}

#[test]
fn the_kernel_cache_hits_and_refuses_bad_entries() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let s = k.stream();
    let dir = temp_dir("kc");
    let o = opts(&["--std=c++17", "-DSLUICE_CACHE_TEST=1"]);
    let compile = |label: &str| {
        let before = kernel_cache::stats();
        let (m, outcome) = Module::compile_cached(&k.dev, SAXPY, None, &o, Some(&dir))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        run_saxpy(&k, &s, &m, label);
        let after = kernel_cache::stats();
        if outcome == CacheOutcome::Hit {
            assert!(after.hits > before.hits, "{label}");
        }
        outcome
    };
    assert_eq!(compile("first"), CacheOutcome::Miss);
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = entries[0].clone();
    assert!(entry.to_string_lossy().ends_with(".sluicebin"), "{entry:?}");
    let good = std::fs::read(&entry).expect("read entry");
    assert_eq!(compile("second"), CacheOutcome::Hit);

    // One flipped bit in the image: refused, recompiled, rewritten.
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x10;
    std::fs::write(&entry, &bad).expect("corrupt");
    assert_eq!(compile("corrupted"), CacheOutcome::Rejected);
    assert_eq!(std::fs::read(&entry).expect("reread"), good);
    assert_eq!(compile("after corruption"), CacheOutcome::Hit);

    // Truncated: the same.
    std::fs::write(&entry, &good[..good.len() - 100]).expect("truncate");
    assert_eq!(compile("truncated"), CacheOutcome::Rejected);
    assert_eq!(compile("after truncation"), CacheOutcome::Hit);

    // Another option is another key; an include path bypasses the cache.
    let (_, outcome) =
        Module::compile_cached(&k.dev, SAXPY, None, &opts(&["-lineinfo"]), Some(&dir))
            .expect("-lineinfo");
    assert_eq!(outcome, CacheOutcome::Miss);
    let (_, outcome) =
        Module::compile_cached(&k.dev, SAXPY, None, &opts(&["-I/nonexistent"]), Some(&dir))
            .expect("-I");
    assert_eq!(outcome, CacheOutcome::Bypassed);
    let n = std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(n, 2, "no temporary files left, one entry per key");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Launches with programmatic stream serialization (`set_programmatic_launch`):
/// a chain of kernels that each wait for the one ahead (`griddepcontrol.wait`)
/// gives the serial result, eagerly and replayed from a captured graph; the switch
/// turns off again. On a device below compute capability 9.0 turning it on is
/// `Unsupported`.
#[test]
fn programmatic_launch_keeps_a_chain_in_order() {
    use sluice::backend::CaptureMode;
    use sluice::capture;
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let s = k.stream();
    let m = Module::compile(&k.dev, BUMP, None, &[]).expect("compile");
    let f = m.function(c"bump").expect("bump");
    assert!(!f.programmatic_launch());
    let (major, _) = k.dev.props().unwrap().compute_capability;
    if major < 9 {
        let e = f.set_programmatic_launch(true).expect_err("below 9.0");
        assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
        return;
    }
    f.set_programmatic_launch(true).unwrap();
    assert!(f.programmatic_launch());
    const WORDS: usize = 1 << 20;
    const CHAIN: usize = 40;
    let p = k.buffer(&s, WORDS);
    let start: Vec<u32> = (0..WORDS as u32).collect();
    k.write(&s, &p, &start);
    let bump_all = |s: &Stream| {
        let (mut pp, mut n) = (p.addr, WORDS as u32);
        let mut args = [
            &mut pp as *mut u64 as *mut c_void,
            &mut n as *mut u32 as *mut c_void,
        ];
        let w = [p.sync.clone()];
        // SAFETY: args match bump(unsigned int*, unsigned int).
        unsafe { ops::launch(s, &f, dims(WORDS), &mut args, &[], &w) }.unwrap();
    };
    let serial = |times: usize| -> Vec<u32> {
        start
            .iter()
            .map(|&v| (0..times).fold(v, |x, _| x.wrapping_mul(3).wrapping_add(1)))
            .collect()
    };
    for _ in 0..CHAIN {
        bump_all(&s);
    }
    assert!(k.read(&s, &p) == serial(CHAIN), "eager chain");
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    for _ in 0..CHAIN {
        bump_all(&s);
    }
    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    assert!(k.read(&s, &p) == serial(4 * CHAIN), "replayed chain");
    f.set_programmatic_launch(false).unwrap();
    assert!(!f.programmatic_launch());
    bump_all(&s);
    assert!(
        k.read(&s, &p) == serial(4 * CHAIN + 1),
        "plain launch after"
    );
}

/// `set_max_dynamic_shared_memory`: a launch asking for 64 KiB of dynamic shared
/// memory fails until the kernel opts in, then runs and every word is right; asking
/// for more than the device allows is `InvalidArgument` naming the limit.
#[test]
fn more_than_48_kib_of_dynamic_shared_memory() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    const BYTES: u32 = 64 * 1024;
    const WORDS: usize = BYTES as usize / 4;
    let s = k.stream();
    let m = Module::compile(&k.dev, BIG, Some(c"big.cu"), &[]).expect("compile");
    let f = m.function(c"big").expect("big");
    let out = k.buffer(&s, WORDS);
    let dims = LaunchDims {
        grid: [1, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: BYTES,
    };
    let launch = || launch_into(&s, &f, dims, &out);
    let e = launch().expect_err("64 KiB without opting in");
    assert_eq!(e.code, ErrorCode::Driver, "{e:?}");

    f.set_max_dynamic_shared_memory(BYTES).expect("opt in");
    launch().expect("64 KiB after opting in");
    let got = k.read(&s, &out);
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, (WORDS - 1 - i) as u32 * 3, "out[{i}]");
    }

    let e = f
        .set_max_dynamic_shared_memory(1 << 30)
        .expect_err("over the device's limit");
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e:?}");
    assert!(
        e.message.contains("'big'")
            && e.message.contains("1073741824")
            && e.message.contains("at most"),
        "{}",
        e.message
    );
}

/// `set_non_portable_cluster_size_allowed`: a kernel declared with clusters of 16
/// blocks fails to launch until it opts in, then runs with every block at its rank
/// in a cluster of 16; below compute capability 9.0 opting in is `Unsupported`.
#[test]
fn clusters_of_16_blocks_after_opting_in() {
    let k = kit();
    if !k.is_cuda() {
        return;
    }
    let (major, _) = k.dev.props().unwrap().compute_capability;
    if major < 9 {
        let m = Module::compile(&k.dev, BUMP, None, &[]).expect("compile");
        let f = m.function(c"bump").expect("bump");
        let e = f
            .set_non_portable_cluster_size_allowed(true)
            .expect_err("below 9.0");
        assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
        return;
    }
    const BLOCKS: usize = 64;
    let s = k.stream();
    let m = Module::compile(&k.dev, CLUSTER16, Some(c"cluster16.cu"), &[]).expect("compile");
    let f = m.function(c"ranks").expect("ranks");
    let out = k.buffer(&s, BLOCKS);
    let dims = LaunchDims {
        grid: [BLOCKS as u32, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
    };
    let launch = || launch_into(&s, &f, dims, &out);
    let e = launch().expect_err("16 blocks per cluster without opting in");
    assert_eq!(e.code, ErrorCode::Driver, "{e:?}");
    f.set_non_portable_cluster_size_allowed(true)
        .expect("opt in");
    launch().expect("16 blocks per cluster after opting in");
    let got = k.read(&s, &out);
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, (i % 16) as u32 | 16 << 16, "out[{i}]");
    }
    f.set_non_portable_cluster_size_allowed(false)
        .expect("opt out");
}
