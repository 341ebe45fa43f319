//! The shared harness: failing loudly, timing and statistics, formatting, the
//! sluice buffer and launch helpers, and `Bench`, the open device with its two
//! streams on each side (sluice and raw) and the test kernels, which every table
//! measures with.

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream,
};
use sluice::backend::cuda::Driver;
use sluice::backend::BackendKind;
use sluice::ffi::*;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shared test kernels (kernels/test_kernels.cu).
const PTX: &[u8] = include_bytes!("../../kernels/test_kernels.ptx");

const CU_STREAM_NON_BLOCKING: u32 = 1;
pub const CU_EVENT_DISABLE_TIMING: u32 = 2;

/// Calls between two (untimed) stream synchronisations in host-cost rows.
pub const BATCH: usize = 1000;

// ---------------------------------------------------------------------------------
// Failing loudly.

#[cold]
pub fn fail(msg: &str) -> ! {
    eprintln!("\nFATAL (overhead bench): {msg}");
    println!("\n**FATAL: {msg}**");
    std::process::exit(1);
}

pub fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: sluice and the driver return NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Takes a sluice error (NULL is success) and turns it into a message.
pub fn error_text(err: *mut sluice_error_t) -> Option<String> {
    if err.is_null() {
        return None;
    }
    let code = sluice_error_code(err);
    let text = format!(
        "{} (driver code {}): {}",
        cstr(sluice_error_code_name(code)),
        sluice_error_driver_code(err),
        cstr(sluice_error_message(err))
    );
    sluice_error_free(err);
    Some(text)
}

/// Checks a sluice call.
#[inline]
pub fn ck(err: *mut sluice_error_t, what: &str) {
    if !err.is_null() {
        ck_fail(err, what)
    }
}

#[cold]
fn ck_fail(err: *mut sluice_error_t, what: &str) -> ! {
    let text = error_text(err).unwrap_or_default();
    fail(&format!("{what} failed: {text}"))
}

/// Checks a raw driver call.
#[inline]
pub fn cu(d: &Driver, res: u32, what: &str) {
    if res != 0 {
        cu_fail(d, res, what)
    }
}

#[cold]
fn cu_fail(d: &Driver, res: u32, what: &str) -> ! {
    let mut p: *const c_char = null();
    // SAFETY: cuGetErrorName only writes a pointer to a static string.
    let name = if unsafe { (d.cuGetErrorName)(res, &mut p) } == 0 {
        cstr(p)
    } else {
        "CUDA_ERROR_UNRECOGNIZED".to_string()
    };
    fail(&format!("{what} failed: CUresult {res} ({name})"))
}

// ---------------------------------------------------------------------------------
// Configuration, statistics, formatting.

#[derive(Clone, Copy)]
pub struct Cfg {
    pub quick: bool,
    pub reps: usize,
}

impl Cfg {
    /// `full` iterations, or a tenth of them (at least 1) in quick mode.
    pub fn n(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(1)
        } else {
            full
        }
    }
}

/// Median of timing samples; a sample that is not a positive number stops the run.
pub fn median(v: Vec<f64>) -> f64 {
    if v.iter().any(|x| !x.is_finite() || *x <= 0.0) {
        fail(&format!(
            "non-positive or non-finite timing sample in {v:?}"
        ));
    }
    median_of(v)
}

pub fn median_of(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "median of no samples");
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Runs each measurement once as warm-up, then `reps` times, rotating which one goes
/// first in each repetition; returns each one's median (seconds per unit).
pub fn measure(reps: usize, fs: &mut [&mut dyn FnMut() -> f64]) -> Vec<f64> {
    for f in fs.iter_mut() {
        f();
    }
    let k = fs.len();
    let mut samples = vec![Vec::with_capacity(reps); k];
    for rep in 0..reps {
        for j in 0..k {
            let i = (rep + j) % k;
            samples[i].push(fs[i]());
        }
    }
    samples.into_iter().map(median).collect()
}

pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Host cost of `op`: `batches` timed batches of `BATCH` calls, with `settle`
/// (a stream sync) run untimed after each batch. Seconds per call.
pub fn per_call(batches: usize, mut op: impl FnMut(), mut settle: impl FnMut()) -> f64 {
    let mut t = Duration::ZERO;
    for _ in 0..batches {
        let t0 = Instant::now();
        for _ in 0..BATCH {
            op();
        }
        t += t0.elapsed();
        settle();
    }
    secs(t) / (batches * BATCH) as f64
}

/// Throughput of `op`: wall time of `n` calls followed by `finish` (the sync that
/// waits for them, or nothing), in seconds per call.
pub fn per_op(n: usize, mut op: impl FnMut(), finish: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        op();
    }
    finish();
    secs(t0.elapsed()) / n as f64
}

/// A raw event without timing (on any thread with the context bound).
pub fn raw_event(d: &Driver) -> CUevent {
    let mut e: CUevent = null_mut();
    // SAFETY: writes one event handle.
    cu(
        d,
        unsafe { (d.cuEventCreate)(&mut e, CU_EVENT_DISABLE_TIMING) },
        "cuEventCreate",
    );
    e
}

/// Destroys an event made by [`raw_event`], once.
pub fn raw_event_destroy(d: &Driver, e: CUevent) {
    // SAFETY: an event created by raw_event, destroyed once.
    cu(d, unsafe { (d.cuEventDestroy_v2)(e) }, "cuEventDestroy");
}

/// `cuStreamSynchronize` on a raw stream; any error stops the run.
pub fn raw_sync(d: &Driver, s: CUstream) {
    // SAFETY: a live stream of the bound context.
    cu(
        d,
        unsafe { (d.cuStreamSynchronize)(s) },
        "cuStreamSynchronize",
    );
}

pub fn us(s: f64) -> String {
    format!("{:.3} µs", s * 1e6)
}

pub fn gbps(bytes: usize, s: f64) -> String {
    format!("{:.2} GB/s", bytes as f64 / s / 1e9)
}

pub fn added(s: f64, r: f64) -> String {
    format!("{:+.0} ns", (s - r) * 1e9)
}

/// Goals evaluated so far, and how many failed.
#[derive(Default)]
pub struct Goals {
    pub total: usize,
    pub fails: usize,
}

impl Goals {
    /// Counts one goal; returns its result cell, "PASS" or "FAIL".
    pub fn check(&mut self, ok: bool) -> &'static str {
        self.total += 1;
        if ok {
            "PASS"
        } else {
            self.fails += 1;
            "FAIL"
        }
    }
}

/// Civil date and time (UTC) of the current moment, without a date crate.
pub fn utc_now() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((t / 86_400) as i64, t % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// A deterministic byte pattern (xorshift64*), different for every `seed`.
pub fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Fails unless `got == want`, naming the first differing byte.
pub fn check_bytes(got: &[u8], want: &[u8], what: &str) {
    check_eq(got, want, what, "byte")
}

/// Fails unless `got == want`, naming the first differing element.
pub fn check_words(got: &[u32], want: &[u32], what: &str) {
    check_eq(got, want, what, "element")
}

/// Fails unless `got == want`, naming the first differing `item` and both values
/// in hex, zero-padded to the width of `T`.
fn check_eq<T: PartialEq + std::fmt::LowerHex>(got: &[T], want: &[T], what: &str, item: &str) {
    if got.len() != want.len() {
        fail(&format!("{what}: length {} != {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let w = 2 + 2 * std::mem::size_of::<T>();
        fail(&format!(
            "{what}: {item} {i} is {:#0w$x}, expected {:#0w$x}",
            got[i], want[i]
        ));
    }
}

pub fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn bytes_to_words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A kernel argument slot: `cuLaunchKernel` takes a pointer to each value.
pub fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

// ---------------------------------------------------------------------------------
// sluice helpers.

/// A sluice buffer with its sync handle and addresses.
pub struct SBuf {
    pub h: sluice_buffer_t,
    pub sync: sluice_sync_t,
    pub dptr: u64,
    pub host: *mut u8,
    pub size: usize,
}

impl SBuf {
    fn with_info(h: sluice_buffer_t, size: usize, what: &str) -> SBuf {
        let mut info = sluice_buffer_info_t {
            kind: 0,
            size: 0,
            device_ptr: 0,
            host_ptr: null_mut(),
        };
        ck(sluice_buffer_info(h, &mut info), what);
        if info.size != size as u64 || info.device_ptr == 0 {
            fail(&format!(
                "{what}: buffer info reports size {} at {:#x}",
                info.size, info.device_ptr
            ));
        }
        let mut sync = sluice_sync_t { bits: 0 };
        ck(sluice_buffer_sync(h, &mut sync), "sluice_buffer_sync");
        SBuf {
            h,
            sync,
            dptr: info.device_ptr,
            host: info.host_ptr.cast(),
            size,
        }
    }

    pub fn device(s: sluice_stream_t, size: usize) -> SBuf {
        let mut h = sluice_buffer_t { bits: 0 };
        ck(sluice_buffer_alloc(s, size, &mut h), "sluice_buffer_alloc");
        SBuf::with_info(h, size, "device buffer")
    }

    pub fn pinned(dev: sluice_device_t, size: usize) -> SBuf {
        let mut h = sluice_buffer_t { bits: 0 };
        ck(
            sluice_buffer_alloc_pinned(dev, size, &mut h),
            "sluice_buffer_alloc_pinned",
        );
        let b = SBuf::with_info(h, size, "pinned buffer");
        if b.host.is_null() {
            fail("pinned buffer has no host pointer");
        }
        b
    }

    /// Fills a pinned buffer from the host. Call only while no copy uses it.
    pub fn host_fill(&self, f: impl FnOnce(&mut [u8])) {
        assert!(!self.host.is_null());
        // SAFETY: a live pinned buffer of `size` bytes; the bench synchronises the
        // stream before the host touches it, and no other view exists meanwhile.
        f(unsafe { std::slice::from_raw_parts_mut(self.host, self.size) })
    }

    /// The bytes of a pinned buffer. Call only while no copy writes it.
    pub fn host_bytes(&self) -> &[u8] {
        assert!(!self.host.is_null());
        // SAFETY: as for host_fill; the view ends before the next copy is enqueued.
        unsafe { std::slice::from_raw_parts(self.host, self.size) }
    }

    pub fn free(self) {
        ck(sluice_sync_destroy(self.sync), "sluice_sync_destroy");
        ck(sluice_buffer_free(self.h), "sluice_buffer_free");
    }
}

pub fn s_sync(s: sluice_stream_t) {
    ck(sluice_stream_synchronize(s), "sluice_stream_synchronize");
}

pub fn s_write(s: sluice_stream_t, b: &SBuf, data: &[u8]) {
    ck(
        sluice_stream_copy_from_host(s, b.h, 0, data.as_ptr().cast(), data.len()),
        "sluice_stream_copy_from_host",
    );
}

pub fn s_read(s: sluice_stream_t, b: &SBuf) -> Vec<u8> {
    let mut out = vec![0u8; b.size];
    ck(
        sluice_stream_copy_to_host(s, out.as_mut_ptr().cast(), b.h, 0, b.size),
        "sluice_stream_copy_to_host",
    );
    out
}

pub fn dims(grid: u32, block: u32) -> sluice_launch_dims_t {
    sluice_launch_dims_t {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    }
}

pub fn stats(s: sluice_stream_t) -> sluice_stream_stats_t {
    let mut st = sluice_stream_stats_t {
        id: 0,
        waits: 0,
        records: 0,
        events_created: 0,
        engine_syncs: 0,
    };
    ck(sluice_stream_stats(s, &mut st), "sluice_stream_stats");
    st
}

/// The ping-pong chain's sluice op (`sluice_add` on `n` words): op `k` even on the
/// first stream (x += y: reads y, writes x), odd on the second (y += x).
pub struct SPingPong {
    streams: (sluice_stream_t, sluice_stream_t),
    f: sluice_function_t,
    dims: sluice_launch_dims_t,
    syncs: (sluice_sync_t, sluice_sync_t),
    /// Each side's argument values (dst, src, n), boxed: `args` points into them.
    _vals: Box<[[u64; 3]; 2]>,
    args: [[*mut c_void; 3]; 2],
}

impl SPingPong {
    pub fn new(
        streams: (sluice_stream_t, sluice_stream_t),
        f: sluice_function_t,
        dims: sluice_launch_dims_t,
        (x, y): (&SBuf, &SBuf),
        n: usize,
    ) -> Self {
        let mut vals = Box::new([[x.dptr, y.dptr, n as u64], [y.dptr, x.dptr, n as u64]]);
        let mut args = [[std::ptr::null_mut(); 3]; 2];
        for (side, v) in args.iter_mut().zip(vals.iter_mut()) {
            for (a, v) in side.iter_mut().zip(v.iter_mut()) {
                *a = arg(v);
            }
        }
        SPingPong {
            streams,
            f,
            dims,
            syncs: (x.sync, y.sync),
            _vals: vals,
            args,
        }
    }

    /// Launches op `k` of the chain.
    pub fn op(&mut self, k: usize, what: &str) {
        let (x, y) = self.syncs;
        if k % 2 == 0 {
            let s = self.streams.0;
            s_launch(s, self.f, &self.dims, &mut self.args[0], &[y], &[x], what);
        } else {
            let s = self.streams.1;
            s_launch(s, self.f, &self.dims, &mut self.args[1], &[x], &[y], what);
        }
    }
}

/// One tracked launch.
#[allow(clippy::too_many_arguments)]
pub fn s_launch(
    s: sluice_stream_t,
    f: sluice_function_t,
    dims: &sluice_launch_dims_t,
    args: &mut [*mut c_void],
    reads: &[sluice_sync_t],
    writes: &[sluice_sync_t],
    what: &str,
) {
    ck(
        sluice_stream_launch(
            s,
            f,
            dims,
            args.as_mut_ptr(),
            args.len(),
            reads.as_ptr(),
            reads.len(),
            writes.as_ptr(),
            writes.len(),
        ),
        what,
    );
}

// ---------------------------------------------------------------------------------
// The bench.

/// Both sides of the comparison, open on device 0, and the goal tally so far.
pub struct Bench {
    pub d: &'static Driver,
    pub cfg: Cfg,
    pub dev: sluice_device_t,
    pub props: sluice_device_props_t,
    pub sa: sluice_stream_t,
    pub sb: sluice_stream_t,
    pub ra: CUstream,
    pub rb: CUstream,
    /// Whether `ra` and `rb` are streams of their own (destroyed at the end) rather
    /// than the CUstreams of `sa` and `sb`.
    pub separate_streams: bool,
    cudev: CUdevice,
    smod: sluice_module_t,
    rmod: CUmodule,
    pub s_empty: sluice_function_t,
    pub s_add: sluice_function_t,
    pub s_fill: sluice_function_t,
    pub s_spin_fill: sluice_function_t,
    pub s_spin_add: sluice_function_t,
    pub s_spin_copy: sluice_function_t,
    pub r_empty: CUfunction,
    pub r_add: CUfunction,
    /// Goals evaluated so far, and how many failed.
    pub goals: Goals,
}

impl Bench {
    /// Opens device 0 on both sides: the sluice device with two non-blocking
    /// streams and the test kernels, and the same device's primary context, bound
    /// on this thread, with the same kernels. The raw streams are sluice's own
    /// CUstreams unless `separate_streams`.
    pub fn open(d: &'static Driver, cfg: Cfg, separate_streams: bool) -> Bench {
        // sluice side.
        let mut dev = sluice_device_t { bits: 0 };
        ck(
            sluice_device_open(BackendKind::Cuda as u32, 0, &mut dev),
            "sluice_device_open",
        );
        let mut props = sluice_device_props_t {
            name: [0; 256],
            total_memory: 0,
            compute_capability_major: 0,
            compute_capability_minor: 0,
            multiprocessor_count: 0,
            backend: 0,
            ordinal: 0,
        };
        ck(sluice_device_props(dev, &mut props), "sluice_device_props");
        let mk_stream = || {
            let mut s = sluice_stream_t { bits: 0 };
            ck(
                sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &mut s),
                "sluice_stream_create",
            );
            s
        };
        let (sa, sb) = (mk_stream(), mk_stream());
        let mut smod = sluice_module_t { bits: 0 };
        ck(
            sluice_module_load(dev, PTX.as_ptr().cast(), PTX.len(), &mut smod),
            "sluice_module_load(kernels/test_kernels.ptx)",
        );
        let sfn = |n: &CStr| {
            let mut f = sluice_function_t { bits: 0 };
            ck(
                sluice_module_get_function(smod, n.as_ptr(), &mut f),
                &format!("sluice_module_get_function({})", n.to_string_lossy()),
            );
            f
        };

        // Raw side: the same device's primary context, bound on this thread.
        let mut cudev: CUdevice = 0;
        // SAFETY: writes one device handle.
        cu(d, unsafe { (d.cuDeviceGet)(&mut cudev, 0) }, "cuDeviceGet");
        let mut ctx: CUcontext = null_mut();
        // SAFETY: writes one context handle; released at the end.
        cu(
            d,
            unsafe { (d.cuDevicePrimaryCtxRetain)(&mut ctx, cudev) },
            "cuDevicePrimaryCtxRetain",
        );
        // SAFETY: a retained context.
        cu(d, unsafe { (d.cuCtxSetCurrent)(ctx) }, "cuCtxSetCurrent");
        let mk_raw_stream = || {
            let mut s: CUstream = null_mut();
            // SAFETY: writes one stream handle.
            let res = unsafe { (d.cuStreamCreateWithPriority)(&mut s, CU_STREAM_NON_BLOCKING, 0) };
            cu(d, res, "cuStreamCreateWithPriority");
            s
        };
        let (ra, rb) = if separate_streams {
            (mk_raw_stream(), mk_raw_stream())
        } else {
            let raw_of = |s: sluice_stream_t| {
                let mut r = null_mut();
                ck(sluice_stream_raw(s, &mut r), "sluice_stream_raw");
                r as CUstream
            };
            (raw_of(sa), raw_of(sb))
        };
        let mut ptx_nul = PTX.to_vec();
        ptx_nul.push(0);
        let mut rmod: CUmodule = null_mut();
        // SAFETY: NUL-terminated PTX; no JIT options.
        let res = unsafe {
            (d.cuModuleLoadDataEx)(
                &mut rmod,
                ptx_nul.as_ptr().cast(),
                0,
                null_mut(),
                null_mut(),
            )
        };
        cu(d, res, "cuModuleLoadDataEx(kernels/test_kernels.ptx)");
        let rfn = |n: &CStr| {
            let mut f: CUfunction = null_mut();
            // SAFETY: a loaded module; NUL-terminated name.
            let res = unsafe { (d.cuModuleGetFunction)(&mut f, rmod, n.as_ptr()) };
            cu(
                d,
                res,
                &format!("cuModuleGetFunction({})", n.to_string_lossy()),
            );
            f
        };

        Bench {
            d,
            cfg,
            dev,
            props,
            sa,
            sb,
            ra,
            rb,
            separate_streams,
            cudev,
            smod,
            rmod,
            s_empty: sfn(c"sluice_empty"),
            s_add: sfn(c"sluice_add"),
            s_fill: sfn(c"sluice_fill"),
            s_spin_fill: sfn(c"sluice_spin_fill"),
            s_spin_add: sfn(c"sluice_spin_add"),
            s_spin_copy: sfn(c"sluice_spin_copy"),
            r_empty: rfn(c"sluice_empty"),
            r_add: rfn(c"sluice_add"),
            goals: Goals::default(),
        }
    }

    /// Tears both sides down, every call checked; returns the goal tally.
    pub fn close(self) -> Goals {
        let d = self.d;
        let fns = [
            self.s_empty,
            self.s_add,
            self.s_fill,
            self.s_spin_fill,
            self.s_spin_add,
            self.s_spin_copy,
        ];
        for f in fns {
            ck(sluice_function_destroy(f), "sluice_function_destroy");
        }
        ck(sluice_module_unload(self.smod), "sluice_module_unload");
        for s in [self.sa, self.sb] {
            s_sync(s);
            ck(sluice_stream_destroy(s), "sluice_stream_destroy");
        }
        ck(sluice_device_wait_all(self.dev), "sluice_device_wait_all");
        ck(
            sluice_device_pinned_trim(self.dev),
            "sluice_device_pinned_trim",
        );
        ck(sluice_device_close(self.dev), "sluice_device_close");
        for s in [self.ra, self.rb] {
            if self.separate_streams {
                self.r_sync(s);
                // SAFETY: a stream created by open, destroyed once.
                cu(d, unsafe { (d.cuStreamDestroy_v2)(s) }, "cuStreamDestroy");
            }
        }
        // SAFETY: the module loaded by open, unloaded once.
        cu(
            d,
            unsafe { (d.cuModuleUnload)(self.rmod) },
            "cuModuleUnload",
        );
        // SAFETY: balances the retain in open.
        cu(
            d,
            unsafe { (d.cuDevicePrimaryCtxRelease_v2)(self.cudev) },
            "cuDevicePrimaryCtxRelease",
        );
        self.goals
    }

    pub fn cu(&self, res: u32, what: &str) {
        cu(self.d, res, what)
    }

    pub fn r_sync(&self, s: CUstream) {
        raw_sync(self.d, s)
    }

    pub fn r_event(&self) -> CUevent {
        raw_event(self.d)
    }

    pub fn r_event_destroy(&self, e: CUevent) {
        raw_event_destroy(self.d, e)
    }

    pub fn r_alloc(&self, size: usize) -> CUdeviceptr {
        let mut p: CUdeviceptr = 0;
        // SAFETY: writes one device pointer; ra is live.
        self.cu(
            unsafe { (self.d.cuMemAllocAsync)(&mut p, size, self.ra) },
            "cuMemAllocAsync",
        );
        self.r_sync(self.ra);
        p
    }

    pub fn r_free(&self, p: CUdeviceptr) {
        // SAFETY: p came from r_alloc and is freed once.
        self.cu(
            unsafe { (self.d.cuMemFreeAsync)(p, self.ra) },
            "cuMemFreeAsync",
        );
        self.r_sync(self.ra);
    }

    /// A raw copy in any direction (unified addressing), ordered on `s`.
    pub fn r_copy(&self, dst: u64, src: u64, len: usize, s: CUstream) {
        // SAFETY: the bench passes live ranges of at least len bytes.
        self.cu(
            unsafe { (self.d.cuMemcpyAsync)(dst, src, len, s) },
            "cuMemcpyAsync",
        );
    }

    pub fn r_write(&self, dst: CUdeviceptr, data: &[u8], s: CUstream) {
        // SAFETY: dst holds at least data.len() bytes.
        self.cu(
            unsafe { (self.d.cuMemcpyHtoDAsync_v2)(dst, data.as_ptr().cast(), data.len(), s) },
            "cuMemcpyHtoDAsync",
        );
        self.r_sync(s);
    }

    pub fn r_read(&self, src: CUdeviceptr, len: usize, s: CUstream) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.r_copy(out.as_mut_ptr() as u64, src, len, s);
        self.r_sync(s);
        out
    }

    pub fn r_launch(
        &self,
        f: CUfunction,
        grid: u32,
        block: u32,
        s: CUstream,
        args: *mut *mut c_void,
    ) {
        // SAFETY: args matches the kernel's parameters (or is NULL for none).
        let res =
            unsafe { (self.d.cuLaunchKernel)(f, grid, 1, 1, block, 1, 1, 0, s, args, null_mut()) };
        self.cu(res, "cuLaunchKernel");
    }
}
