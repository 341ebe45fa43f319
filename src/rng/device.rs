//! Where the RNG's work runs: the library's own kernels (kernels/rng.ptx, loaded
//! once per device on first use) on cuda, and the Rust Philox in a host job on the
//! host backend. Both write the same bits (normals: see `philox::box_muller`).

use super::philox::PhiloxState;
use super::{Distribution, Layout};
use crate::backend::{BackendKind, LaunchDims};
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::module::{Function, Module};
use crate::ops;
use crate::stream::Stream;
use crate::sync::Access;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

/// The PTX of kernels/rng.cu (built with nvcc; the GPU suite checks it is current).
static RNG_PTX: &[u8] = concat!(include_str!("../../kernels/rng.ptx"), "\0").as_bytes();

const BLOCK: u32 = 256;

struct Kernels {
    init: Arc<Function>,
    /// One thread per state, which also advances it.
    draw: [Arc<Function>; 3],
    /// Several threads per state (reading it), then one that advances it.
    split: [Arc<Function>; 3],
    advance: [Arc<Function>; 3],
    /// Sample-major, four adjacent states per thread with 16-byte stores (None in
    /// a PTX built before they existed).
    quad: Option<[Arc<Function>; 3]>,
    /// The raw CRC32C of a range (None in a PTX built before it existed).
    crc32c: Option<Arc<Function>>,
}

/// Threads a split draw aims for: a few waves of a large GPU.
const TARGET_THREADS: usize = 512 << 10;
/// Threads the quad kernel aims for. On the H200 (run 94) 64K to 128K threads drew
/// fastest at 8K to 64K states (3.4 to 3.5 TB/s); 512K threads gave 3.2 at 64K.
const QUAD_TARGET_THREADS: usize = 96 << 10;
/// From this many states up, sample-major draws take one thread per state, which
/// also advances it: 3.66 TB/s at 64K states on the H200 (run 94), against 3.42 for
/// the best quad split and 3.61 for `curandGenerateUniform`.
const PER_STATE_MIN: usize = 64 << 10;
/// The fewest draws a split thread makes (each starts with one skipahead).
const MIN_DRAWS_PER_THREAD: usize = 16;

fn kernels(device: &Arc<Device>) -> Result<Arc<Kernels>> {
    static LOADED: OnceLock<Mutex<HashMap<u32, Arc<Kernels>>>> = OnceLock::new();
    let mut map = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(k) = map.get(&device.ordinal()) {
        return Ok(k.clone());
    }
    let module = match std::env::var_os("SLUICE_RNG_PTX") {
        Some(path) => {
            let mut ptx = std::fs::read(&path).map_err(|e| {
                Error::new(
                    ErrorCode::InvalidArgument,
                    format!("SLUICE_RNG_PTX={}: {e}", path.to_string_lossy()),
                )
            })?;
            ptx.push(0);
            Module::load(device, &ptx)
        }
        None => Module::load(device, RNG_PTX),
    }
    .map_err(|e| e.context("loading the RNG kernels (kernels/rng.ptx)"))?;
    let f = |name: &CStr| module.function(name);
    let k = Arc::new(Kernels {
        init: f(c"sluice_rng_kernel_init")?,
        draw: [
            f(c"sluice_rng_kernel_u32")?,
            f(c"sluice_rng_kernel_uniform")?,
            f(c"sluice_rng_kernel_normal")?,
        ],
        split: [
            f(c"sluice_rng_kernel_u32_split")?,
            f(c"sluice_rng_kernel_uniform_split")?,
            f(c"sluice_rng_kernel_normal_split")?,
        ],
        advance: [
            f(c"sluice_rng_kernel_u32_advance")?,
            f(c"sluice_rng_kernel_uniform_advance")?,
            f(c"sluice_rng_kernel_normal_advance")?,
        ],
        quad: match (
            f(c"sluice_rng_kernel_u32_quad"),
            f(c"sluice_rng_kernel_uniform_quad"),
            f(c"sluice_rng_kernel_normal_quad"),
        ) {
            (Ok(a), Ok(b), Ok(c)) => Some([a, b, c]),
            _ => None,
        },
        crc32c: f(c"sluice_crc32c_raw").ok(),
    });
    map.insert(device.ordinal(), k.clone());
    Ok(k)
}

/// Bytes per thread of the CRC kernel: a multiple of 16, at least 64, so that
/// the grid stays within a few waves.
pub(super) fn crc_segment(len: usize) -> usize {
    len.div_ceil(CRC_THREADS).next_multiple_of(16).max(64)
}

/// Threads the CRC kernel aims for.
const CRC_THREADS: usize = 64 << 10;

/// The CRC kernel and the stream it runs on, beside the io stream's bulk copy.
pub(super) struct DeviceCrc {
    pub(super) stream: Arc<Stream>,
    kernel: Arc<Function>,
}

impl DeviceCrc {
    /// None on the host backend, or when the embedded PTX predates the kernel.
    pub(super) fn of(device: &Arc<Device>) -> Result<Option<DeviceCrc>> {
        if device.kind() != BackendKind::Cuda {
            return Ok(None);
        }
        let Some(kernel) = kernels(device)?.crc32c.clone() else {
            return Ok(None);
        };
        let stream = super::internal_stream(device, "sluice rng crc")?;
        Ok(Some(DeviceCrc { stream, kernel }))
    }

    /// Launches the CRC of `len` bytes at `data` (16-byte aligned) on the CRC
    /// stream, as one op over `set`: XORs their raw CRC32C (zero initial value, no
    /// final XOR) into the word at `out`, which must be zero.
    pub(super) fn launch(&self, data: u64, len: usize, out: u64, set: &[Access<'_>]) -> Result<()> {
        let seg = crc_segment(len);
        let (mut d, mut l, mut s, mut o) = (data, len as u64, seg as u64, out);
        let mut powers = *super::crc::powers();
        let mut args = [
            &mut d as *mut u64 as *mut c_void,
            &mut l as *mut u64 as *mut c_void,
            &mut s as *mut u64 as *mut c_void,
            &mut o as *mut u64 as *mut c_void,
            &mut powers as *mut super::crc::Powers as *mut c_void,
        ];
        // SAFETY: the kernel's five parameters (8-byte pointers and counts, then the
        // 192-byte table by value); `data` holds `len` bytes and `out` one word,
        // both in `set`.
        unsafe {
            ops::launch_set(
                &self.stream,
                &self.kernel,
                dims(len.div_ceil(seg)),
                args.as_mut_ptr(),
                args.len(),
                set,
            )
        }
    }
}

fn dims(n: usize) -> LaunchDims {
    let grid = n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32;
    LaunchDims {
        grid: [grid, 1, 1],
        block: [BLOCK, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// Sets `n` states at `states` to `curand_init(seed, i, 0)`, as one op over `set`.
pub(super) fn init(
    stream: &Stream,
    states: u64,
    n: usize,
    seed: u64,
    set: &[Access<'_>],
) -> Result<()> {
    match stream.device.kind() {
        BackendKind::Cuda => {
            let k = kernels(&stream.device)?;
            let (mut p, mut n64, mut s, mut first) = (states, n as u64, seed, 0u64);
            let mut args = [
                &mut p as *mut u64 as *mut c_void,
                &mut n64 as *mut u64 as *mut c_void,
                &mut s as *mut u64 as *mut c_void,
                &mut first as *mut u64 as *mut c_void,
            ];
            // SAFETY: four 8-byte parameters, as the kernel declares them; the
            // states buffer holds n states and is in `set` as written.
            unsafe { ops::launch_set(stream, &k.init, dims(n), args.as_mut_ptr(), args.len(), set) }
        }
        BackendKind::Host => ops::host_callback_set(
            stream,
            move || {
                // SAFETY: the buffer holds n states and outlives the op (its sync
                // object orders the free after it).
                let st = unsafe { std::slice::from_raw_parts_mut(states as *mut PhiloxState, n) };
                for (i, s) in st.iter_mut().enumerate() {
                    *s = PhiloxState::new(seed, i as u64, 0);
                }
                0
            },
            set,
        ),
    }
}

/// The sample-major draw with four adjacent states per thread: `parts` threads per
/// group of four, each drawing a multiple of four draws; with one part the kernel
/// also advances the states, otherwise the advance kernel follows.
#[allow(clippy::too_many_arguments)]
fn generate_quad(
    stream: &Stream,
    quad: &Arc<Function>,
    advance: &Arc<Function>,
    states: u64,
    n: usize,
    out: u64,
    count: usize,
    set: &[Access<'_>],
) -> Result<()> {
    let groups = n / 4;
    let want = QUAD_TARGET_THREADS
        .div_ceil(groups)
        .min(count / MIN_DRAWS_PER_THREAD)
        .max(1);
    let per = count.div_ceil(want).next_multiple_of(4);
    let parts = count.div_ceil(per).max(1);
    let arg = |v: &mut u64| v as *mut u64 as *mut c_void;
    let (mut p, mut n64, mut o, mut c) = (states, n as u64, out, count as u64);
    let (mut parts64, mut per64, mut own) = (parts as u64, per as u64, u32::from(parts == 1));
    let mut args = [
        arg(&mut p),
        arg(&mut n64),
        arg(&mut o),
        arg(&mut c),
        arg(&mut parts64),
        arg(&mut per64),
        &mut own as *mut u32 as *mut c_void,
    ];
    // SAFETY: the quad kernel's seven parameters (8 bytes each, 4 for `own`); the
    // output range holds n * count words, 16-byte aligned, n a multiple of 4.
    unsafe {
        ops::launch_set(
            stream,
            quad,
            dims(groups * parts),
            args.as_mut_ptr(),
            args.len(),
            set,
        )
    }?;
    if parts == 1 {
        return Ok(());
    }
    advance_states(stream, advance, states, n, count, set)
}

/// Moves each of `n` states past `count` draws (after a kernel that only read them).
fn advance_states(
    stream: &Stream,
    advance: &Arc<Function>,
    states: u64,
    n: usize,
    count: usize,
    set: &[Access<'_>],
) -> Result<()> {
    let (mut p, mut n64, mut c) = (states, n as u64, count as u64);
    let arg = |v: &mut u64| v as *mut u64 as *mut c_void;
    let mut args = [arg(&mut p), arg(&mut n64), arg(&mut c)];
    // SAFETY: three 8-byte parameters; the states hold n states.
    unsafe { ops::launch_set(stream, advance, dims(n), args.as_mut_ptr(), args.len(), set) }
}

/// Draws `count` values of `dist` from each of `n` states into `out` (32-bit words,
/// in `layout`), as one op over `set`.
#[allow(clippy::too_many_arguments)]
pub(super) fn generate(
    stream: &Stream,
    states: u64,
    n: usize,
    dist: Distribution,
    out: u64,
    count: usize,
    layout: Layout,
    set: &[Access<'_>],
) -> Result<()> {
    let layout_arg = match layout {
        Layout::SampleMajor => 0u32,
        Layout::StateMajor => 1u32,
    };
    match stream.device.kind() {
        BackendKind::Cuda => {
            let k = kernels(&stream.device)?;
            let d = dist as usize - 1;
            // Four states per thread pays where one thread per state is too few
            // threads: below 64K states (run 94: 32K states 3.48 TB/s quad, 3.13 per
            // state; 16K 3.45 against 1.58).
            if let Some(quad) = &k.quad {
                if layout == Layout::SampleMajor && n % 4 == 0 && out % 16 == 0 && n < PER_STATE_MIN
                {
                    return generate_quad(
                        stream,
                        &quad[d],
                        &k.advance[d],
                        states,
                        n,
                        out,
                        count,
                        set,
                    );
                }
            }
            let parts = if layout == Layout::SampleMajor && n >= PER_STATE_MIN {
                1
            } else {
                TARGET_THREADS
                    .div_ceil(n)
                    .min(count / MIN_DRAWS_PER_THREAD)
                    .max(1)
            };
            let (mut p, mut n64, mut o, mut c, mut l) =
                (states, n as u64, out, count as u64, layout_arg);
            let (mut parts64, mut per) = (parts as u64, count.div_ceil(parts) as u64);
            let arg = |v: &mut u64| v as *mut u64 as *mut c_void;
            if parts == 1 {
                let mut args = [
                    arg(&mut p),
                    arg(&mut n64),
                    arg(&mut o),
                    arg(&mut c),
                    &mut l as *mut u32 as *mut c_void,
                ];
                // SAFETY: the kernel's five parameters (8, 8, 8, 8 and 4 bytes); the
                // output range was checked to hold n * count words.
                return unsafe {
                    ops::launch_set(
                        stream,
                        &k.draw[d],
                        dims(n),
                        args.as_mut_ptr(),
                        args.len(),
                        set,
                    )
                };
            }
            let mut args = [
                arg(&mut p),
                arg(&mut n64),
                arg(&mut o),
                arg(&mut c),
                &mut l as *mut u32 as *mut c_void,
                arg(&mut parts64),
                arg(&mut per),
            ];
            // SAFETY: the split kernel's seven parameters (4 bytes for the layout, 8
            // for the others); as above for the ranges.
            unsafe {
                ops::launch_set(
                    stream,
                    &k.split[d],
                    dims(n * parts),
                    args.as_mut_ptr(),
                    args.len(),
                    set,
                )
            }?;
            advance_states(stream, &k.advance[d], states, n, count, set)
        }
        BackendKind::Host => ops::host_callback_set(
            stream,
            move || {
                // SAFETY: as in `init`; `out` holds n * count 32-bit words.
                let st = unsafe { std::slice::from_raw_parts_mut(states as *mut PhiloxState, n) };
                let o = unsafe { std::slice::from_raw_parts_mut(out as *mut u32, n * count) };
                for (i, s) in st.iter_mut().enumerate() {
                    for j in 0..count {
                        let v = match dist {
                            Distribution::U32 => s.next_u32(),
                            Distribution::Uniform => s.next_uniform().to_bits(),
                            Distribution::Normal => s.next_normal().to_bits(),
                        };
                        match layout {
                            Layout::SampleMajor => o[j * n + i] = v,
                            Layout::StateMajor => o[i * count + j] = v,
                        }
                    }
                }
                0
            },
            set,
        ),
    }
}
