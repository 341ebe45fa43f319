//! GPU overhead benchmark: sluice through its C ABI against the raw CUDA driver, in
//! the same process and the same run. Prints Markdown tables.
//!
//! Run: `cargo bench --bench overhead` (or the built binary directly).
//! `SLUICE_BENCH_QUICK=1` cuts iteration counts about 10x; `SLUICE_BENCH_ONLY=ping-pong`
//! runs only the ping-pong chain; `SLUICE_BENCH_STRICT=1`
//! exits 1 when a goal fails. Without a CUDA device it prints
//! "no CUDA device: skipping" and exits 0. How every row is measured is in
//! docs/benchmarks-method.md.
//!
//! Every sluice and driver call is checked; any failure, and any wrong result of a
//! verified copy or kernel, aborts the run with a message (exit 1), so a table is
//! never printed from broken work.

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule, CUstream,
};
use sluice::backend::cuda::{self, Driver};
use sluice::ffi::*;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shared test kernels (kernels/test_kernels.cu).
const PTX: &[u8] = include_bytes!("../kernels/test_kernels.ptx");

const CU_STREAM_NON_BLOCKING: u32 = 1;
const CU_EVENT_DISABLE_TIMING: u32 = 2;

const MIB: usize = 1 << 20;
/// Size of every bandwidth transfer.
const COPY_BYTES: usize = 64 * MIB;
/// Size of each allocation in the alloc/free row.
const ALLOC_BYTES: usize = MIB;
/// Calls between two (untimed) stream synchronisations in host-cost rows.
const BATCH: usize = 1000;
/// 32-bit elements of each ping-pong buffer.
const PP_WORDS: usize = 4096;
const PP_BLOCK: u32 = 256;

// ---------------------------------------------------------------------------------
// Failing loudly.

#[cold]
fn fail(msg: &str) -> ! {
    eprintln!("\nFATAL (overhead bench): {msg}");
    println!("\n**FATAL: {msg}**");
    std::process::exit(1);
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: sluice and the driver return NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Takes a sluice error (NULL is success) and turns it into a message.
fn error_text(err: *mut sluice_error_t) -> Option<String> {
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
fn ck(err: *mut sluice_error_t, what: &str) {
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
fn cu(d: &Driver, res: u32, what: &str) {
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
struct Cfg {
    quick: bool,
    reps: usize,
}

impl Cfg {
    /// `full` iterations, or a tenth of them (at least 1) in quick mode.
    fn n(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(1)
        } else {
            full
        }
    }
}

/// Median of timing samples; a sample that is not a positive number stops the run.
fn median(v: Vec<f64>) -> f64 {
    if v.iter().any(|x| !x.is_finite() || *x <= 0.0) {
        fail(&format!(
            "non-positive or non-finite timing sample in {v:?}"
        ));
    }
    median_of(v)
}

fn median_of(mut v: Vec<f64>) -> f64 {
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
fn measure(reps: usize, fs: &mut [&mut dyn FnMut() -> f64]) -> Vec<f64> {
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

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Host cost of `op`: `batches` timed batches of `BATCH` calls, with `settle`
/// (a stream sync) run untimed after each batch. Seconds per call.
fn per_call(batches: usize, mut op: impl FnMut(), mut settle: impl FnMut()) -> f64 {
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

/// `cuStreamSynchronize` on a raw stream; any error stops the run.
fn raw_sync(d: &Driver, s: CUstream) {
    // SAFETY: a live stream of the bound context.
    cu(
        d,
        unsafe { (d.cuStreamSynchronize)(s) },
        "cuStreamSynchronize",
    );
}

fn us(s: f64) -> String {
    format!("{:.3} µs", s * 1e6)
}

fn gbps(bytes: usize, s: f64) -> String {
    format!("{:.2} GB/s", bytes as f64 / s / 1e9)
}

fn added(s: f64, r: f64) -> String {
    format!("{:+.0} ns", (s - r) * 1e9)
}

fn verdict(ok: bool, fails: &mut usize) -> &'static str {
    if ok {
        "PASS"
    } else {
        *fails += 1;
        "FAIL"
    }
}

/// Civil date and time (UTC) of the current moment, without a date crate.
fn utc_now() -> String {
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
fn pattern(buf: &mut [u8], seed: u64) {
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
fn check_bytes(got: &[u8], want: &[u8], what: &str) {
    if got.len() != want.len() {
        fail(&format!("{what}: length {} != {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        fail(&format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        ));
    }
}

fn check_words(got: &[u32], want: &[u32], what: &str) {
    if got.len() != want.len() {
        fail(&format!("{what}: length {} != {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        fail(&format!(
            "{what}: element {i} is {:#010x}, expected {:#010x}",
            got[i], want[i]
        ));
    }
}

fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bytes_to_words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A kernel argument slot: `cuLaunchKernel` takes a pointer to each value.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

// ---------------------------------------------------------------------------------
// sluice helpers.

/// A sluice buffer with its sync handle and addresses.
struct SBuf {
    h: sluice_buffer_t,
    sync: sluice_sync_t,
    dptr: u64,
    host: *mut u8,
    size: usize,
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

    fn device(s: sluice_stream_t, size: usize) -> SBuf {
        let mut h = sluice_buffer_t { bits: 0 };
        ck(sluice_buffer_alloc(s, size, &mut h), "sluice_buffer_alloc");
        SBuf::with_info(h, size, "device buffer")
    }

    fn pinned(dev: sluice_device_t, size: usize) -> SBuf {
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
    fn host_fill(&self, f: impl FnOnce(&mut [u8])) {
        assert!(!self.host.is_null());
        // SAFETY: a live pinned buffer of `size` bytes; the bench synchronises the
        // stream before the host touches it, and no other view exists meanwhile.
        f(unsafe { std::slice::from_raw_parts_mut(self.host, self.size) })
    }

    /// The bytes of a pinned buffer. Call only while no copy writes it.
    fn host_bytes(&self) -> &[u8] {
        assert!(!self.host.is_null());
        // SAFETY: as for host_fill; the view ends before the next copy is enqueued.
        unsafe { std::slice::from_raw_parts(self.host, self.size) }
    }

    fn free(self) {
        ck(sluice_sync_destroy(self.sync), "sluice_sync_destroy");
        ck(sluice_buffer_free(self.h), "sluice_buffer_free");
    }
}

fn s_sync(s: sluice_stream_t) {
    ck(sluice_stream_synchronize(s), "sluice_stream_synchronize");
}

fn s_write(s: sluice_stream_t, b: &SBuf, data: &[u8]) {
    ck(
        sluice_stream_copy_from_host(s, b.h, 0, data.as_ptr().cast(), data.len()),
        "sluice_stream_copy_from_host",
    );
}

fn s_read(s: sluice_stream_t, b: &SBuf) -> Vec<u8> {
    let mut out = vec![0u8; b.size];
    ck(
        sluice_stream_copy_to_host(s, out.as_mut_ptr().cast(), b.h, 0, b.size),
        "sluice_stream_copy_to_host",
    );
    out
}

fn dims(grid: u32, block: u32) -> sluice_launch_dims_t {
    sluice_launch_dims_t {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    }
}

fn stats(s: sluice_stream_t) -> sluice_stream_stats_t {
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

/// One tracked launch.
#[allow(clippy::too_many_arguments)]
fn s_launch(
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
// Result tables.

enum Goal {
    /// Per-call overhead: ratio <= 1.10 or under 100 ns added per sluice call. The
    /// number is how many sluice calls the row makes per raw unit.
    Overhead(u32),
    /// Bandwidth at least this fraction of raw.
    Bandwidth(f64),
    /// sluice at most this many seconds per unit.
    AtMost(f64),
    /// No goal: printed for information, with the reason.
    Info(&'static str),
}

struct Row {
    name: String,
    /// Seconds per unit (call, pair or copy).
    sluice: f64,
    raw: f64,
    /// Bytes per unit for bandwidth rows.
    bytes: usize,
    goal: Goal,
}

struct PingPong {
    tracked: f64,
    raw_events: f64,
    sync_mode: f64,
    raw_host_sync: f64,
    ops: usize,
    waits_per_op: f64,
}

struct GraphRow {
    k: usize,
    s_eager: f64,
    r_eager: f64,
    s_replay: f64,
    r_replay: f64,
    /// Capture + instantiate, seconds.
    s_inst: f64,
    r_inst: f64,
}

struct OpRow {
    objects: usize,
    threads: usize,
    shared: bool,
    per_pair: f64,
    worst_thread: f64,
    total_rate: f64,
}

// ---------------------------------------------------------------------------------
// The bench.

struct Bench {
    d: &'static Driver,
    cfg: Cfg,
    dev: sluice_device_t,
    sa: sluice_stream_t,
    sb: sluice_stream_t,
    ra: CUstream,
    rb: CUstream,
    smod: sluice_module_t,
    rmod: CUmodule,
    s_empty: sluice_function_t,
    s_add: sluice_function_t,
    s_fill: sluice_function_t,
    s_spin_fill: sluice_function_t,
    s_spin_add: sluice_function_t,
    s_spin_copy: sluice_function_t,
    r_empty: CUfunction,
    r_add: CUfunction,
    /// Goals evaluated so far, and how many failed.
    goals: usize,
    fails: usize,
}

impl Bench {
    fn report(&mut self, r: Row) {
        if !matches!(r.goal, Goal::Info(_)) {
            self.goals += 1;
        }
        print_row(&r, &mut self.fails);
    }

    fn cu(&self, res: u32, what: &str) {
        cu(self.d, res, what)
    }

    fn r_sync(&self, s: CUstream) {
        // SAFETY: a live stream of the bound context.
        self.cu(
            unsafe { (self.d.cuStreamSynchronize)(s) },
            "cuStreamSynchronize",
        );
    }

    fn r_event(&self) -> CUevent {
        let mut e: CUevent = null_mut();
        // SAFETY: writes one event handle.
        self.cu(
            unsafe { (self.d.cuEventCreate)(&mut e, CU_EVENT_DISABLE_TIMING) },
            "cuEventCreate",
        );
        e
    }

    fn r_event_destroy(&self, e: CUevent) {
        // SAFETY: an event created by r_event, destroyed once.
        self.cu(unsafe { (self.d.cuEventDestroy_v2)(e) }, "cuEventDestroy");
    }

    fn r_alloc(&self, size: usize) -> CUdeviceptr {
        let mut p: CUdeviceptr = 0;
        // SAFETY: writes one device pointer; ra is live.
        self.cu(
            unsafe { (self.d.cuMemAllocAsync)(&mut p, size, self.ra) },
            "cuMemAllocAsync",
        );
        self.r_sync(self.ra);
        p
    }

    fn r_free(&self, p: CUdeviceptr) {
        // SAFETY: p came from r_alloc and is freed once.
        self.cu(
            unsafe { (self.d.cuMemFreeAsync)(p, self.ra) },
            "cuMemFreeAsync",
        );
        self.r_sync(self.ra);
    }

    /// A raw copy in any direction (unified addressing), ordered on `s`.
    fn r_copy(&self, dst: u64, src: u64, len: usize, s: CUstream) {
        // SAFETY: the bench passes live ranges of at least len bytes.
        self.cu(
            unsafe { (self.d.cuMemcpyAsync)(dst, src, len, s) },
            "cuMemcpyAsync",
        );
    }

    fn r_write(&self, dst: CUdeviceptr, data: &[u8], s: CUstream) {
        // SAFETY: dst holds at least data.len() bytes.
        self.cu(
            unsafe { (self.d.cuMemcpyHtoDAsync_v2)(dst, data.as_ptr().cast(), data.len(), s) },
            "cuMemcpyHtoDAsync",
        );
        self.r_sync(s);
    }

    fn r_read(&self, src: CUdeviceptr, len: usize, s: CUstream) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.r_copy(out.as_mut_ptr() as u64, src, len, s);
        self.r_sync(s);
        out
    }

    fn r_launch(&self, f: CUfunction, grid: u32, block: u32, s: CUstream, args: *mut *mut c_void) {
        // SAFETY: args matches the kernel's parameters (or is NULL for none).
        let res =
            unsafe { (self.d.cuLaunchKernel)(f, grid, 1, 1, block, 1, 1, 0, s, args, null_mut()) };
        self.cu(res, "cuLaunchKernel");
    }

    // -----------------------------------------------------------------------------

    /// Runs every test kernel once through sluice and checks its output.
    fn self_test(&mut self) {
        let s = self.sa;
        let n: usize = 100_003; // not a multiple of the grid: exercises the stride loops
        let grid = dims(8, 256);
        let (a, b, c) = (
            SBuf::device(s, n * 4),
            SBuf::device(s, n * 4),
            SBuf::device(s, n * 4),
        );
        let mut n64 = n as u64;
        let read = |buf: &SBuf| bytes_to_words(&s_read(s, buf));

        // fill
        let (mut pa, mut val) = (a.dptr, 0xDEAD_BEEFu32);
        s_launch(
            s,
            self.s_fill,
            &grid,
            &mut [arg(&mut pa), arg(&mut n64), arg(&mut val)],
            &[],
            &[a.sync],
            "launch sluice_fill",
        );
        check_words(&read(&a), &vec![0xDEAD_BEEF; n], "sluice_fill");

        // upload a per-element pattern into b
        let p: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) ^ 0xA5A5_A5A5)
            .collect();
        s_write(s, &b, &words_to_bytes(&p));

        // spin_fill, timed against its spin
        let spin_ns: u64 = 2_000_000;
        let (mut pc, mut seven, mut spin) = (c.dptr, 7u32, spin_ns);
        s_sync(s);
        let t0 = Instant::now();
        s_launch(
            s,
            self.s_spin_fill,
            &grid,
            &mut [arg(&mut pc), arg(&mut n64), arg(&mut seven), arg(&mut spin)],
            &[],
            &[c.sync],
            "launch sluice_spin_fill",
        );
        s_sync(s);
        let took = t0.elapsed();
        check_words(&read(&c), &vec![7; n], "sluice_spin_fill");
        if took < Duration::from_nanos(spin_ns * 9 / 10) {
            eprintln!(
                "WARNING: sluice_spin_fill with a {} µs spin finished in {:.1} µs: \
                 %globaltimer spins are shorter than asked on this GPU",
                spin_ns / 1000,
                took.as_secs_f64() * 1e6
            );
        }

        // add: a += b (wrapping)
        let (mut pa, mut pb) = (a.dptr, b.dptr);
        s_launch(
            s,
            self.s_add,
            &grid,
            &mut [arg(&mut pa), arg(&mut pb), arg(&mut n64)],
            &[b.sync],
            &[a.sync],
            "launch sluice_add",
        );
        let want: Vec<u32> = p.iter().map(|x| 0xDEAD_BEEFu32.wrapping_add(*x)).collect();
        check_words(&read(&a), &want, "sluice_add");

        // spin_add: a += b again
        let (mut pa, mut pb, mut spin) = (a.dptr, b.dptr, 100_000u64);
        s_launch(
            s,
            self.s_spin_add,
            &grid,
            &mut [arg(&mut pa), arg(&mut pb), arg(&mut n64), arg(&mut spin)],
            &[b.sync],
            &[a.sync],
            "launch sluice_spin_add",
        );
        let want: Vec<u32> = want
            .iter()
            .zip(&p)
            .map(|(x, y)| x.wrapping_add(*y))
            .collect();
        check_words(&read(&a), &want, "sluice_spin_add");

        // spin_copy: c = a
        let (mut pc, mut pa, mut spin) = (c.dptr, a.dptr, 100_000u64);
        s_launch(
            s,
            self.s_spin_copy,
            &grid,
            &mut [arg(&mut pc), arg(&mut pa), arg(&mut n64), arg(&mut spin)],
            &[a.sync],
            &[c.sync],
            "launch sluice_spin_copy",
        );
        check_words(&read(&c), &want, "sluice_spin_copy");

        // bounds: n smaller than the grid leaves the rest alone
        ck(
            sluice_stream_memset(s, b.h, 0, 0, 64),
            "sluice_stream_memset",
        );
        let (mut pb, mut five, mut one) = (b.dptr, 5u64, 1u32);
        s_launch(
            s,
            self.s_fill,
            &grid,
            &mut [arg(&mut pb), arg(&mut five), arg(&mut one)],
            &[],
            &[b.sync],
            "launch sluice_fill (n = 5)",
        );
        let got = read(&b);
        check_words(
            &got[..16],
            &[1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            "sluice_fill bounds",
        );

        // empty
        s_launch(
            s,
            self.s_empty,
            &dims(1, 32),
            &mut [],
            &[],
            &[],
            "launch sluice_empty",
        );
        s_sync(s);

        for buf in [a, b, c] {
            buf.free();
        }
        s_sync(s);
        println!("- kernel self-test: all 6 test kernels gave correct results\n");
    }

    // -----------------------------------------------------------------------------

    fn bench_wait_event(&mut self) {
        let batches = self.cfg.n(100);
        let (sa, sb, ra, rb, d) = (self.sa, self.sb, self.ra, self.rb, self.d);

        let mut ev = sluice_event_t { bits: 0 };
        ck(sluice_event_record(sa, 0, &mut ev), "sluice_event_record");
        s_sync(sa);
        let rev = self.r_event();
        // SAFETY: live event and stream.
        self.cu(unsafe { (d.cuEventRecord)(rev, ra) }, "cuEventRecord");
        self.r_sync(ra);

        let mut sl = || {
            per_call(
                batches,
                || ck(sluice_stream_wait_event(sb, ev), "sluice_stream_wait_event"),
                || s_sync(sb),
            )
        };
        let mut raw = || {
            per_call(
                batches,
                // SAFETY: live stream and event.
                || {
                    cu(
                        d,
                        unsafe { (d.cuStreamWaitEvent)(rb, rev, 0) },
                        "cuStreamWaitEvent",
                    )
                },
                || raw_sync(d, rb),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        ck(sluice_event_destroy(ev), "sluice_event_destroy");
        self.r_event_destroy(rev);
        self.report(Row {
            name: "stream wait on event (cross-stream)".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_event_record(&mut self) {
        let batches = self.cfg.n(100);
        let calls = (batches * BATCH) as f64;
        let (sa, ra, d) = (self.sa, self.ra, self.d);

        // record + destroy (the pooled event is recycled) vs re-recording one event.
        let rev = self.r_event();
        let mut sl = || {
            let mut e = sluice_event_t { bits: 0 };
            per_call(
                batches,
                || {
                    ck(sluice_event_record(sa, 0, &mut e), "sluice_event_record");
                    ck(sluice_event_destroy(e), "sluice_event_destroy");
                },
                || s_sync(sa),
            )
        };
        let mut raw = || {
            per_call(
                batches,
                // SAFETY: live event and stream.
                || cu(d, unsafe { (d.cuEventRecord)(rev, ra) }, "cuEventRecord"),
                || raw_sync(d, ra),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name: "event record + destroy (pooled): 2 sluice calls vs 1 raw record".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(2),
        });

        // record only: BATCH live recordings (the pool was warmed to BATCH events by
        // the warm-up pass), destroyed after the timed part; raw records BATCH
        // distinct pre-created events.
        let revs: Vec<CUevent> = (0..BATCH).map(|_| self.r_event()).collect();
        let mut handles = vec![sluice_event_t { bits: 0 }; BATCH];
        let mut created = Vec::new();
        let mut sl = || {
            let before = stats(sa).events_created;
            let mut t = Duration::ZERO;
            for _ in 0..batches {
                let t0 = Instant::now();
                for h in handles.iter_mut() {
                    ck(sluice_event_record(sa, 0, h), "sluice_event_record");
                }
                t += t0.elapsed();
                for h in handles.iter() {
                    ck(sluice_event_destroy(*h), "sluice_event_destroy");
                }
                s_sync(sa);
            }
            created.push(stats(sa).events_created - before);
            secs(t) / calls
        };
        let mut raw = || {
            let mut t = Duration::ZERO;
            for _ in 0..batches {
                let t0 = Instant::now();
                for e in revs.iter() {
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(*e, ra) }, "cuEventRecord");
                }
                t += t0.elapsed();
                // SAFETY: live stream.
                cu(
                    d,
                    unsafe { (d.cuStreamSynchronize)(ra) },
                    "cuStreamSynchronize",
                );
            }
            secs(t) / calls
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        // After the warm-up pass the pool must serve every recording.
        if created.iter().skip(1).any(|&c| c != 0) {
            eprintln!(
                "WARNING: record-only: the event pool created events after warm-up \
                 ({created:?}); that row includes cuEventCreate calls"
            );
        }
        for e in revs {
            self.r_event_destroy(e);
        }
        self.r_event_destroy(rev);
        self.report(Row {
            name: format!("event record only ({BATCH} live, pool warm)"),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_launch(&mut self) {
        let n = self.cfg.n(20_000);
        let (sa, ra) = (self.sa, self.ra);
        let (sf, rf) = (self.s_empty, self.r_empty);
        let dm = dims(1, 32);
        let mut sl = || {
            let t0 = Instant::now();
            for _ in 0..n {
                ck(
                    sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                    "sluice_stream_launch(sluice_empty)",
                );
            }
            s_sync(sa);
            secs(t0.elapsed()) / n as f64
        };
        let me = &*self;
        let mut raw = || {
            let t0 = Instant::now();
            for _ in 0..n {
                me.r_launch(rf, 1, 32, ra, null_mut());
            }
            me.r_sync(ra);
            secs(t0.elapsed()) / n as f64
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name: format!("empty-kernel launch ({n} back-to-back + sync)"),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_pinned(&mut self) {
        let copies = self.cfg.n(20);
        let (sa, ra, dev) = (self.sa, self.ra, self.dev);
        let len = COPY_BYTES;

        // Both sides copy between the same memory: sluice's pinned blocks come from
        // cuMemHostAlloc(PORTABLE) and its device buffer from cuMemAllocAsync, so the
        // raw side uses their addresses directly. Only the API path differs (no NUMA
        // or placement differences between two sets of allocations).
        let (src, dst, dbuf) = (
            SBuf::pinned(dev, len),
            SBuf::pinned(dev, len),
            SBuf::device(sa, len),
        );
        s_sync(sa);
        src.host_fill(|b| pattern(b, 1));
        dst.host_fill(|b| b.fill(0));

        // Correctness once per path: host -> device -> host round trip, byte for byte.
        ck(
            sluice_stream_copy(sa, dbuf.h, 0, src.h, 0, len),
            "sluice_stream_copy H2D",
        );
        ck(
            sluice_stream_copy(sa, dst.h, 0, dbuf.h, 0, len),
            "sluice_stream_copy D2H",
        );
        s_sync(sa);
        check_bytes(
            dst.host_bytes(),
            src.host_bytes(),
            "sluice pinned round trip",
        );
        dst.host_fill(|b| b.fill(0));
        ck(
            sluice_stream_memset(sa, dbuf.h, 0, 0, len),
            "sluice_stream_memset",
        );
        s_sync(sa);
        self.r_copy(dbuf.dptr, src.host as u64, len, ra);
        self.r_copy(dst.host as u64, dbuf.dptr, len, ra);
        self.r_sync(ra);
        check_bytes(dst.host_bytes(), src.host_bytes(), "raw pinned round trip");
        dst.host_fill(|b| b.fill(0));

        let me = &*self;
        let timed = |to: sluice_buffer_t, from: sluice_buffer_t| {
            let t0 = Instant::now();
            for _ in 0..copies {
                ck(
                    sluice_stream_copy(sa, to, 0, from, 0, len),
                    "sluice_stream_copy",
                );
            }
            s_sync(sa);
            secs(t0.elapsed()) / copies as f64
        };
        let raw_timed = |to: u64, from: u64| {
            let t0 = Instant::now();
            for _ in 0..copies {
                me.r_copy(to, from, len, ra);
            }
            me.r_sync(ra);
            secs(t0.elapsed()) / copies as f64
        };
        let (hsrc, hdst) = (src.host as u64, dst.host as u64);
        let h2d = measure(
            self.cfg.reps,
            &mut [&mut || timed(dbuf.h, src.h), &mut || {
                raw_timed(dbuf.dptr, hsrc)
            }],
        );
        let d2h = measure(
            self.cfg.reps,
            &mut [&mut || timed(dst.h, dbuf.h), &mut || {
                raw_timed(hdst, dbuf.dptr)
            }],
        );
        // The timed D2H copies landed (dst was zeroed before them).
        s_sync(sa);
        self.r_sync(ra);
        check_bytes(
            dst.host_bytes(),
            src.host_bytes(),
            "pinned D2H after timing",
        );

        for b in [src, dst, dbuf] {
            b.free();
        }
        s_sync(sa);
        // Release the cached pinned blocks (and the recordings they keep).
        ck(sluice_device_pinned_trim(dev), "sluice_device_pinned_trim");
        self.report(Row {
            name: "H2D pinned, 64 MiB (sluice_stream_copy vs cuMemcpyAsync)".into(),
            sluice: h2d[0],
            raw: h2d[1],
            bytes: len,
            goal: Goal::Bandwidth(0.97),
        });
        self.report(Row {
            name: "D2H pinned, 64 MiB (sluice_stream_copy vs cuMemcpyAsync)".into(),
            sluice: d2h[0],
            raw: d2h[1],
            bytes: len,
            goal: Goal::Bandwidth(0.97),
        });
    }

    fn bench_pageable(&mut self) {
        let copies = self.cfg.n(10);
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let len = COPY_BYTES;
        // As for pinned copies, both sides use the same device buffer and host memory.
        let s_dev = SBuf::device(sa, len);
        let r_dev = s_dev.dptr;
        let mut src = vec![0u8; len];
        pattern(&mut src, 3);
        let mut dst = vec![0u8; len]; // zeroed and touched: resident pages

        // Correctness once, both paths.
        s_write(sa, &s_dev, &src);
        ck(
            sluice_stream_copy_to_host(sa, dst.as_mut_ptr().cast(), s_dev.h, 0, len),
            "sluice_stream_copy_to_host",
        );
        check_bytes(&dst, &src, "sluice pageable round trip");
        dst.fill(0);
        ck(
            sluice_stream_memset(sa, s_dev.h, 0, 0, len),
            "sluice_stream_memset",
        );
        s_sync(sa);
        self.r_write(r_dev, &src, ra);
        self.r_copy(dst.as_mut_ptr() as u64, r_dev, len, ra);
        self.r_sync(ra);
        check_bytes(&dst, &src, "raw pageable round trip");
        dst.fill(0);

        let src_p = src.as_ptr();
        let h2d = {
            let mut sl = || {
                let t0 = Instant::now();
                for _ in 0..copies {
                    ck(
                        sluice_stream_copy_from_host(sa, s_dev.h, 0, src_p.cast(), len),
                        "sluice_stream_copy_from_host",
                    );
                }
                s_sync(sa);
                secs(t0.elapsed()) / copies as f64
            };
            let mut raw = || {
                let t0 = Instant::now();
                for _ in 0..copies {
                    // SAFETY: the device buffer holds len bytes; src is live for len bytes.
                    let res = unsafe { (d.cuMemcpyHtoDAsync_v2)(r_dev, src_p.cast(), len, ra) };
                    cu(d, res, "cuMemcpyHtoDAsync");
                }
                // SAFETY: live stream.
                cu(
                    d,
                    unsafe { (d.cuStreamSynchronize)(ra) },
                    "cuStreamSynchronize",
                );
                secs(t0.elapsed()) / copies as f64
            };
            measure(self.cfg.reps, &mut [&mut sl, &mut raw])
        };
        let dst_p = dst.as_mut_ptr();
        let d2h = {
            let mut sl = || {
                let t0 = Instant::now();
                for _ in 0..copies {
                    ck(
                        sluice_stream_copy_to_host(sa, dst_p.cast(), s_dev.h, 0, len),
                        "sluice_stream_copy_to_host",
                    );
                }
                secs(t0.elapsed()) / copies as f64
            };
            let mut raw = || {
                let t0 = Instant::now();
                for _ in 0..copies {
                    // SAFETY: dst is live for len bytes; the device buffer holds len bytes.
                    let res = unsafe { (d.cuMemcpyAsync)(dst_p as u64, r_dev, len, ra) };
                    cu(d, res, "cuMemcpyAsync (D2H pageable)");
                    // SAFETY: live stream.
                    cu(
                        d,
                        unsafe { (d.cuStreamSynchronize)(ra) },
                        "cuStreamSynchronize",
                    );
                }
                secs(t0.elapsed()) / copies as f64
            };
            measure(self.cfg.reps, &mut [&mut sl, &mut raw])
        };
        // The device buffer holds `src`, so the timed D2H copies left `src` in dst.
        check_bytes(&dst, &src, "pageable D2H after timing");

        s_dev.free();
        s_sync(sa);
        self.report(Row {
            name: "H2D pageable, 64 MiB (sluice_stream_copy_from_host vs cuMemcpyHtoDAsync)".into(),
            sluice: h2d[0],
            raw: h2d[1],
            bytes: len,
            goal: Goal::Info("none (issue 2 sets a goal for pinned copies only)"),
        });
        self.report(Row {
            name: "D2H pageable, 64 MiB (sluice_stream_copy_to_host vs cuMemcpyAsync + sync)"
                .into(),
            sluice: d2h[0],
            raw: d2h[1],
            bytes: len,
            goal: Goal::Info("none (issue 2 sets a goal for pinned copies only)"),
        });
    }

    fn bench_alloc(&mut self) {
        let batches = self.cfg.n(100);
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let mut sl = || {
            let mut b = sluice_buffer_t { bits: 0 };
            per_call(
                batches,
                || {
                    ck(
                        sluice_buffer_alloc(sa, ALLOC_BYTES, &mut b),
                        "sluice_buffer_alloc",
                    );
                    ck(sluice_buffer_free(b), "sluice_buffer_free");
                },
                || s_sync(sa),
            )
        };
        let mut raw = || {
            let mut p: CUdeviceptr = 0;
            per_call(
                batches,
                || {
                    // SAFETY: writes one pointer, then frees it once, both on ra.
                    cu(
                        d,
                        unsafe { (d.cuMemAllocAsync)(&mut p, ALLOC_BYTES, ra) },
                        "cuMemAllocAsync",
                    );
                    // SAFETY: as above.
                    cu(d, unsafe { (d.cuMemFreeAsync)(p, ra) }, "cuMemFreeAsync");
                },
                || raw_sync(d, ra),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name:
                "alloc + free pair, 1 MiB, stream block cache (sluice_buffer_alloc/free vs cuMemAllocAsync/FreeAsync)"
                    .into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::AtMost(0.6e-6),
        });
        // The same with the stream's block cache off: every pair goes to the driver.
        ck(
            sluice_stream_set_block_cache_limit(sa, 0),
            "set_block_cache_limit",
        );
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        ck(
            sluice_stream_set_block_cache_limit(sa, 64 << 20),
            "set_block_cache_limit",
        );
        self.report(Row {
            name: "alloc + free pair, 1 MiB, cache off (driver path)".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Info(
                "none: the 0.6 µs goal is for the default path above; raw's own pair is the floor here",
            ),
        });
    }

    /// Issue 4: K tiny kernels, eager and as a replayed graph, sluice and raw.
    fn bench_graphs(&mut self) -> Vec<GraphRow> {
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let (sf, rf) = (self.s_empty, self.r_empty);
        let dm = dims(1, 32);
        let mut rows = Vec::new();
        for k in [10usize, 100, 1000] {
            let iters = self.cfg.n((20_000 / k).max(20));
            let s_eager = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    for _ in 0..k {
                        ck(
                            sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                            "sluice_stream_launch",
                        );
                    }
                }
                s_sync(sa);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            let me = &*self;
            let r_eager = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    for _ in 0..k {
                        me.r_launch(rf, 1, 32, ra, null_mut());
                    }
                }
                me.r_sync(ra);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            // sluice graph
            let t0 = Instant::now();
            ck(
                sluice_graph_capture_begin(sa, SLUICE_CAPTURE_RELAXED),
                "sluice_graph_capture_begin",
            );
            for _ in 0..k {
                ck(
                    sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                    "sluice_stream_launch (captured)",
                );
            }
            let mut g = sluice_graph_t { bits: 0 };
            ck(
                sluice_graph_capture_end(sa, &mut g),
                "sluice_graph_capture_end",
            );
            let s_capture = secs(t0.elapsed());
            let mut nodes = 0usize;
            ck(
                sluice_graph_node_count(g, &mut nodes),
                "sluice_graph_node_count",
            );
            if nodes != k {
                fail(&format!("captured graph has {nodes} nodes, expected {k}"));
            }
            let mut ex = sluice_graph_exec_t { bits: 0 };
            let t0 = Instant::now();
            ck(
                sluice_graph_instantiate(g, &mut ex),
                "sluice_graph_instantiate",
            );
            let s_inst = secs(t0.elapsed());
            ck(sluice_graph_exec_upload(ex, sa), "sluice_graph_exec_upload");
            let s_replay = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    ck(sluice_graph_exec_launch(ex, sa), "sluice_graph_exec_launch");
                }
                s_sync(sa);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            // raw graph
            let t0 = Instant::now();
            // SAFETY: a live stream; relaxed mode (2).
            cu(
                d,
                unsafe { (d.cuStreamBeginCapture_v2)(ra, 2) },
                "cuStreamBeginCapture",
            );
            for _ in 0..k {
                self.r_launch(rf, 1, 32, ra, null_mut());
            }
            let mut rg: CUgraph = null_mut();
            // SAFETY: ends the capture begun above.
            cu(
                d,
                unsafe { (d.cuStreamEndCapture)(ra, &mut rg) },
                "cuStreamEndCapture",
            );
            let r_capture = secs(t0.elapsed());
            let mut rex: CUgraphExec = null_mut();
            let t0 = Instant::now();
            // SAFETY: a captured graph; writes one exec handle.
            cu(
                d,
                unsafe { (d.cuGraphInstantiateWithFlags)(&mut rex, rg, 0) },
                "cuGraphInstantiateWithFlags",
            );
            let r_inst = secs(t0.elapsed());
            // SAFETY: a live exec and stream.
            cu(d, unsafe { (d.cuGraphUpload)(rex, ra) }, "cuGraphUpload");
            let me = &*self;
            let r_replay = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    // SAFETY: a live exec and stream.
                    me.cu(unsafe { (me.d.cuGraphLaunch)(rex, ra) }, "cuGraphLaunch");
                }
                me.r_sync(ra);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            let (mut a, mut b, mut c, mut e) = (s_eager, r_eager, s_replay, r_replay);
            let m = measure(self.cfg.reps, &mut [&mut a, &mut b, &mut c, &mut e]);
            rows.push(GraphRow {
                k,
                s_eager: m[0],
                r_eager: m[1],
                s_replay: m[2],
                r_replay: m[3],
                s_inst: s_inst + s_capture,
                r_inst: r_inst + r_capture,
            });
            ck(sluice_graph_exec_destroy(ex), "sluice_graph_exec_destroy");
            ck(sluice_graph_destroy(g), "sluice_graph_destroy");
            // SAFETY: destroyed once each.
            cu(
                d,
                unsafe { (d.cuGraphExecDestroy)(rex) },
                "cuGraphExecDestroy",
            );
            // SAFETY: as above.
            cu(d, unsafe { (d.cuGraphDestroy)(rg) }, "cuGraphDestroy");
        }
        rows
    }

    fn bench_ping_pong(&mut self) -> PingPong {
        let ops = self.cfg.n(10_000);
        let (sa, sb, ra, rb) = (self.sa, self.sb, self.ra, self.rb);
        let n = PP_WORDS;
        let bytes = n * 4;
        let grid = (n as u32).div_ceil(PP_BLOCK);
        let dm = dims(grid, PP_BLOCK);

        let x0: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let y0: Vec<u32> = (0..n as u32).map(|i| i ^ 0x9E37_79B9).collect();
        let (x0b, y0b) = (words_to_bytes(&x0), words_to_bytes(&y0));
        // Expected result, with u32 wrapping: op k even: x += y (on A); odd: y += x (on B).
        let (mut xe, mut ye) = (x0.clone(), y0.clone());
        for k in 0..ops {
            if k % 2 == 0 {
                xe.iter_mut()
                    .zip(&ye)
                    .for_each(|(a, b)| *a = a.wrapping_add(*b));
            } else {
                ye.iter_mut()
                    .zip(&xe)
                    .for_each(|(a, b)| *a = a.wrapping_add(*b));
            }
        }

        let (x, y) = (SBuf::device(sa, bytes), SBuf::device(sa, bytes));
        let (rx, ry) = (self.r_alloc(bytes), self.r_alloc(bytes));
        let (eva, evb) = (self.r_event(), self.r_event());
        let sf = self.s_add;
        let rf = self.r_add;

        let s_reset = || {
            s_sync(sb);
            s_write(sa, &x, &x0b);
            s_write(sa, &y, &y0b);
            s_sync(sa);
        };
        let s_verify = |what: &str| {
            check_words(&bytes_to_words(&s_read(sa, &x)), &xe, &format!("{what}: x"));
            check_words(&bytes_to_words(&s_read(sa, &y)), &ye, &format!("{what}: y"));
        };
        // One sluice chain: the engine inserts every cross-stream wait.
        let s_chain = || {
            let (mut xa, mut ya, mut na) = (x.dptr, y.dptr, n as u64);
            let (mut yb, mut xb, mut nb) = (y.dptr, x.dptr, n as u64);
            let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
            let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
            let t0 = Instant::now();
            for k in 0..ops {
                if k % 2 == 0 {
                    s_launch(
                        sa,
                        sf,
                        &dm,
                        &mut args_a,
                        &[y.sync],
                        &[x.sync],
                        "ping-pong launch on A",
                    );
                } else {
                    s_launch(
                        sb,
                        sf,
                        &dm,
                        &mut args_b,
                        &[x.sync],
                        &[y.sync],
                        "ping-pong launch on B",
                    );
                }
            }
            s_sync(sa);
            s_sync(sb);
            secs(t0.elapsed()) / ops as f64
        };

        let mut waits_seen = Vec::new();
        let mut tracked = || {
            s_reset();
            let w0 = stats(sa).waits + stats(sb).waits;
            let t = s_chain();
            let w = stats(sa).waits + stats(sb).waits - w0;
            // Each op depends on the previous one on the other stream; the data check
            // below is the real test, the count is reported (waits/op in the table).
            if (w as usize) < ops - 1 {
                eprintln!(
                    "WARNING: ping-pong (tracked): the engine inserted {w} waits for {ops} \
                     alternating ops (expected {})",
                    ops - 1
                );
            }
            waits_seen.push(w as f64 / ops as f64);
            s_verify("ping-pong (tracked)");
            t
        };
        let mut sync_mode = || {
            s_reset();
            let e0 = stats(sa).engine_syncs + stats(sb).engine_syncs;
            ck(
                sluice_engine_set_mode(SLUICE_ENGINE_SYNC),
                "sluice_engine_set_mode(SYNC)",
            );
            if sluice_engine_mode() != SLUICE_ENGINE_SYNC {
                fail("sluice_engine_mode() does not report SYNC after setting it");
            }
            let t = s_chain();
            ck(
                sluice_engine_set_mode(SLUICE_ENGINE_ASYNC),
                "sluice_engine_set_mode(ASYNC)",
            );
            let e = stats(sa).engine_syncs + stats(sb).engine_syncs - e0;
            if (e as usize) < ops {
                fail(&format!(
                    "ping-pong (sync mode): {e} engine host syncs for {ops} ops (expected {ops})"
                ));
            }
            s_verify("ping-pong (sync mode)");
            t
        };

        let me = &*self;
        let r_reset = || {
            me.r_sync(rb);
            me.r_write(rx, &x0b, ra);
            me.r_write(ry, &y0b, ra);
        };
        let r_verify = |what: &str| {
            check_words(
                &bytes_to_words(&me.r_read(rx, bytes, ra)),
                &xe,
                &format!("{what}: x"),
            );
            check_words(
                &bytes_to_words(&me.r_read(ry, bytes, ra)),
                &ye,
                &format!("{what}: y"),
            );
        };
        let mut raw_events = || {
            r_reset();
            let (mut xa, mut ya, mut na) = (rx, ry, n as u64);
            let (mut yb, mut xb, mut nb) = (ry, rx, n as u64);
            let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
            let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
            let d = me.d;
            let t0 = Instant::now();
            for k in 0..ops {
                if k % 2 == 0 {
                    if k > 0 {
                        // SAFETY: live stream and event.
                        cu(
                            d,
                            unsafe { (d.cuStreamWaitEvent)(ra, evb, 0) },
                            "cuStreamWaitEvent",
                        );
                    }
                    me.r_launch(rf, grid, PP_BLOCK, ra, args_a.as_mut_ptr());
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(eva, ra) }, "cuEventRecord");
                } else {
                    // SAFETY: live stream and event.
                    cu(
                        d,
                        unsafe { (d.cuStreamWaitEvent)(rb, eva, 0) },
                        "cuStreamWaitEvent",
                    );
                    me.r_launch(rf, grid, PP_BLOCK, rb, args_b.as_mut_ptr());
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(evb, rb) }, "cuEventRecord");
                }
            }
            me.r_sync(ra);
            me.r_sync(rb);
            let t = secs(t0.elapsed()) / ops as f64;
            r_verify("ping-pong (raw events)");
            t
        };
        let mut raw_host_sync = || {
            r_reset();
            let (mut xa, mut ya, mut na) = (rx, ry, n as u64);
            let (mut yb, mut xb, mut nb) = (ry, rx, n as u64);
            let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
            let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
            let t0 = Instant::now();
            for k in 0..ops {
                if k % 2 == 0 {
                    me.r_launch(rf, grid, PP_BLOCK, ra, args_a.as_mut_ptr());
                    me.r_sync(ra);
                } else {
                    me.r_launch(rf, grid, PP_BLOCK, rb, args_b.as_mut_ptr());
                    me.r_sync(rb);
                }
            }
            let t = secs(t0.elapsed()) / ops as f64;
            r_verify("ping-pong (raw host sync)");
            t
        };

        let m = measure(
            self.cfg.reps,
            &mut [
                &mut tracked,
                &mut raw_events,
                &mut sync_mode,
                &mut raw_host_sync,
            ],
        );
        let waits_per_op = median_of(waits_seen);

        x.free();
        y.free();
        s_sync(sa);
        self.r_event_destroy(eva);
        self.r_event_destroy(evb);
        self.r_free(rx);
        self.r_free(ry);
        PingPong {
            tracked: m[0],
            raw_events: m[1],
            sync_mode: m[2],
            raw_host_sync: m[3],
            ops,
            waits_per_op,
        }
    }

    fn bench_ops(&mut self) -> Vec<OpRow> {
        const THREADS: usize = 8;
        const MAX_OBJ: usize = 16;
        let batches = self.cfg.n(50);
        let dev = self.dev;

        let streams: Vec<sluice_stream_t> = (0..THREADS)
            .map(|_| {
                let mut s = sluice_stream_t { bits: 0 };
                ck(
                    sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &mut s),
                    "sluice_stream_create",
                );
                s
            })
            .collect();
        let bufs: Vec<Vec<SBuf>> = (0..THREADS)
            .map(|_| (0..MAX_OBJ).map(|_| SBuf::device(self.sa, 256)).collect())
            .collect();
        s_sync(self.sa);
        let syncs: Vec<Vec<sluice_sync_t>> = bufs
            .iter()
            .map(|v| v.iter().map(|b| b.sync).collect())
            .collect();

        // One thread's loop: `batches` x BATCH op_begin/op_end pairs reading `objs`.
        let worker = |s: sluice_stream_t, objs: &[sluice_sync_t], barrier: &Barrier| -> f64 {
            let mut op = sluice_op_t { bits: 0 };
            let pair = |op: &mut sluice_op_t| {
                ck(
                    sluice_op_begin(s, objs.as_ptr(), objs.len(), null(), 0, op),
                    "sluice_op_begin",
                );
                ck(sluice_op_end(*op), "sluice_op_end");
            };
            for _ in 0..BATCH {
                pair(&mut op); // warm-up: binds the context on this thread
            }
            s_sync(s);
            barrier.wait();
            per_call(batches, || pair(&mut op), || s_sync(s))
        };

        let mut rows = Vec::new();
        for &k in &[1usize, 4, 16] {
            for &(threads, shared) in &[(1usize, true), (THREADS, true), (THREADS, false)] {
                let mut means = Vec::new();
                let mut worsts = Vec::new();
                let mut rates = Vec::new();
                for rep in 0..=self.cfg.reps {
                    let barrier = Barrier::new(threads);
                    let per_thread: Vec<f64> = std::thread::scope(|sc| {
                        let hs: Vec<_> = (0..threads)
                            .map(|t| {
                                let objs = if shared {
                                    &syncs[0][..k]
                                } else {
                                    &syncs[t][..k]
                                };
                                let (s, b, w) = (streams[t], &barrier, &worker);
                                sc.spawn(move || w(s, objs, b))
                            })
                            .collect();
                        hs.into_iter()
                            .map(|h| {
                                h.join()
                                    .unwrap_or_else(|_| fail("op bench thread panicked"))
                            })
                            .collect()
                    });
                    if rep == 0 {
                        continue; // warm-up repetition
                    }
                    let worst = per_thread.iter().copied().fold(0.0, f64::max);
                    means.push(per_thread.iter().sum::<f64>() / threads as f64);
                    worsts.push(worst);
                    rates.push(threads as f64 / worst);
                }
                rows.push(OpRow {
                    objects: k,
                    threads,
                    shared,
                    per_pair: median(means),
                    worst_thread: median(worsts),
                    total_rate: median(rates),
                });
            }
        }

        for v in bufs {
            for b in v {
                b.free();
            }
        }
        s_sync(self.sa);
        for s in streams {
            ck(sluice_stream_destroy(s), "sluice_stream_destroy");
        }
        rows
    }
}

// ---------------------------------------------------------------------------------

fn print_rows_header() {
    println!("## Per-call overhead and bandwidth\n");
    println!("| primitive | sluice | raw CUDA | sluice/raw | added | goal | result |");
    println!("|---|---:|---:|---:|---:|---|---|");
}

/// Prints one row at once (so a later fatal error keeps the rows measured so far).
/// Rows with bytes are shown as bandwidth, the others as time per unit.
fn print_row(r: &Row, fails: &mut usize) {
    let bandwidth = r.bytes > 0;
    let value = |t: f64| if bandwidth { gbps(r.bytes, t) } else { us(t) };
    let (ratio, per_copy) = if bandwidth {
        (r.raw / r.sluice, " per copy")
    } else {
        (r.sluice / r.raw, "")
    };
    let add = r.sluice - r.raw;
    let mut added_col = format!("{}{per_copy}", added(r.sluice, r.raw));
    let (goal, ok) = match r.goal {
        Goal::Overhead(calls) => {
            let per_call = add / calls as f64;
            let suffix = if calls > 1 {
                added_col += &format!(" ({:+.0} ns per call)", per_call * 1e9);
                " per call"
            } else {
                ""
            };
            (
                format!("≤ 1.10x or < 100 ns added{suffix}"),
                Some(ratio <= 1.10 || per_call < 100e-9),
            )
        }
        Goal::Bandwidth(min) => (format!("≥ {min:.2}x raw GB/s"), Some(ratio >= min)),
        Goal::AtMost(limit) => (format!("sluice ≤ {}", us(limit)), Some(r.sluice <= limit)),
        Goal::Info(why) => (why.to_string(), None),
    };
    let result = ok.map_or("info", |ok| verdict(ok, fails));
    println!(
        "| {} | {} | {} | {ratio:.3}x | {added_col} | {goal} | {result} |",
        r.name,
        value(r.sluice),
        value(r.raw),
    );
}

fn print_ping_pong(p: &PingPong, fails: &mut usize) {
    println!(
        "## Cross-stream ping-pong chain ({} ops, {} u32 per buffer, sluice_add)\n",
        p.ops, PP_WORDS
    );
    println!("| variant | µs/op | ratio of | ratio | goal | result |");
    println!("|---|---:|---|---:|---|---|");
    let ab = p.tracked / p.raw_events;
    let ca = p.sync_mode / p.tracked;
    println!(
        "| (a) sluice tracked (engine waits, {:.2} waits/op) | {:.3} | (a)/(b) | {:.3}x | ≤ 1.10x | {} |",
        p.waits_per_op,
        p.tracked * 1e6,
        ab,
        verdict(ab <= 1.10, fails)
    );
    println!(
        "| (b) raw CUDA, cuEventRecord + cuStreamWaitEvent | {:.3} | — | — | — | — |",
        p.raw_events * 1e6
    );
    println!(
        "| (c) sluice SLUICE_ENGINE_SYNC | {:.3} | (c)/(a) | {:.3}x | ≥ 2.3x | {} |",
        p.sync_mode * 1e6,
        ca,
        verdict(ca >= 2.3, fails)
    );
    println!(
        "| (d) raw CUDA, cuStreamSynchronize per op (reference) | {:.3} | (c)/(d) | {:.3}x | — | info |",
        p.raw_host_sync * 1e6,
        p.sync_mode / p.raw_host_sync
    );
    println!();
}

fn print_graphs(rows: &[GraphRow], goals: &mut usize, fails: &mut usize) {
    println!("## Graphs: K empty kernels, eager vs replay (µs per kernel)\n");
    println!("| K | sluice eager | raw eager | eager ratio (≤ 1.10x) | sluice replay | raw replay | replay ratio (≤ 1.05x) | capture+instantiate sluice / raw |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (er, rr) = (r.s_eager / r.r_eager, r.s_replay / r.r_replay);
        *goals += 2;
        println!(
            "| {} | {:.3} | {:.3} | {:.3}x {} | {:.3} | {:.3} | {:.3}x {} | {:.1} µs / {:.1} µs |",
            r.k,
            r.s_eager * 1e6,
            r.r_eager * 1e6,
            er,
            verdict(er <= 1.10, fails),
            r.s_replay * 1e6,
            r.r_replay * 1e6,
            rr,
            verdict(rr <= 1.05, fails),
            r.s_inst * 1e6,
            r.r_inst * 1e6
        );
    }
    println!();
}

fn print_ops(rows: &[OpRow]) {
    println!("## Op bookkeeping without kernels (sluice_op_begin + sluice_op_end, read sets)\n");
    println!("| sync objects | threads | objects | ns/pair (mean per thread) | slowest thread ns/pair | total Mpairs/s |");
    println!("|---:|---:|---|---:|---:|---:|");
    for r in rows {
        let objs = if r.threads == 1 {
            "—"
        } else if r.shared {
            "shared (read-only)"
        } else {
            "disjoint"
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} |",
            r.objects,
            r.threads,
            objs,
            r.per_pair * 1e9,
            r.worst_thread * 1e9,
            r.total_rate / 1e6
        );
    }
    println!();
}

fn main() {
    // Ignore cargo's `--bench` and any filter arguments.
    let mut count = 0u32;
    let err = sluice_device_count(SLUICE_BACKEND_CUDA, &mut count);
    if let Some(reason) = error_text(err) {
        eprintln!("({reason})");
        println!("no CUDA device: skipping");
        return;
    }
    if count == 0 {
        println!("no CUDA device: skipping");
        return;
    }
    let d: &'static Driver =
        cuda::driver().unwrap_or_else(|e| fail(&format!("cuda::driver(): {e}")));

    let quick = std::env::var("SLUICE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let strict = std::env::var("SLUICE_BENCH_STRICT").is_ok_and(|v| v == "1");
    let cfg = Cfg {
        quick,
        reps: if quick { 5 } else { 7 },
    };

    // sluice side.
    let mut dev = sluice_device_t { bits: 0 };
    ck(
        sluice_device_open(SLUICE_BACKEND_CUDA, 0, &mut dev),
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
    let name = cstr(props.name.as_ptr());
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
    // The raw rows run on sluice's own CUstreams, so both sides use the same
    // hardware queues; SLUICE_BENCH_SEPARATE_STREAMS=1 gives raw its own streams.
    let separate_streams = std::env::var_os("SLUICE_BENCH_SEPARATE_STREAMS").is_some();
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

    let mut b = Bench {
        d,
        cfg,
        dev,
        sa,
        sb,
        ra,
        rb,
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
        goals: 0,
        fails: 0,
    };

    let v = d.version();
    println!("# sluice overhead benchmark\n");
    println!("- date: {}", utc_now());
    println!(
        "- device: {name} (compute {}.{}, {} SMs, {:.1} GiB)",
        props.compute_capability_major,
        props.compute_capability_minor,
        props.multiprocessor_count,
        props.total_memory as f64 / (1u64 << 30) as f64
    );
    println!("- CUDA driver: {}.{} ({v})", v / 1000, (v % 1000) / 10);
    println!(
        "- sluice {} (ABI {}){}",
        cstr(sluice_version()),
        sluice_abi_version(),
        if cfg!(debug_assertions) {
            ", DEBUG BUILD: timings are not representative"
        } else {
            ""
        }
    );
    println!(
        "- mode: {} ({} repetitions after a warm-up; medians; sluice and raw alternate \
         within each repetition)",
        if quick {
            "quick (SLUICE_BENCH_QUICK=1)"
        } else {
            "full"
        },
        cfg.reps
    );
    println!(
        "- raw rows run on {}",
        if separate_streams {
            "their own CUstreams (SLUICE_BENCH_SEPARATE_STREAMS=1)"
        } else {
            "the same CUstreams as sluice's (sluice_stream_raw)"
        }
    );
    if sluice_engine_mode() != SLUICE_ENGINE_ASYNC {
        ck(
            sluice_engine_set_mode(SLUICE_ENGINE_ASYNC),
            "sluice_engine_set_mode(ASYNC)",
        );
        println!("- note: SLUICE_ENGINE was sync; the bench switched the engine to async");
    }

    // Each section prints as soon as it is measured: a fatal error later keeps the
    // results above it.
    b.self_test();
    {
        // The context check every entry point makes before calling the driver.
        let n = 1_000_000;
        let mut cur: CUcontext = null_mut();
        let t0 = Instant::now();
        for _ in 0..n {
            // SAFETY: writes one context handle.
            cu(
                d,
                unsafe { (d.cuCtxGetCurrent)(&mut cur) },
                "cuCtxGetCurrent",
            );
        }
        println!(
            "- context check (cuCtxGetCurrent), made once per driver call: {:.1} ns\n",
            secs(t0.elapsed()) / n as f64 * 1e9
        );
    }
    {
        // Informational: do stream-taking calls work with no current context?
        let (ra, rf) = (b.ra, b.r_empty);
        let mut ev: CUevent = null_mut();
        // SAFETY: writes one event handle (context bound on this thread).
        cu(
            d,
            unsafe { (d.cuEventCreate)(&mut ev, CU_EVENT_DISABLE_TIMING) },
            "cuEventCreate",
        );
        let (ra_bits, ev_bits, f_bits) = (ra as usize, ev as usize, rf as usize);
        let codes = std::thread::spawn(move || {
            let (s, e, f) = (
                ra_bits as CUstream,
                ev_bits as CUevent,
                f_bits as CUfunction,
            );
            // SAFETY: live handles; this thread has no current context on purpose.
            unsafe {
                [
                    (d.cuEventRecord)(e, s),
                    (d.cuStreamWaitEvent)(s, e, 0),
                    (d.cuLaunchKernel)(f, 1, 1, 1, 32, 1, 1, 0, s, null_mut(), null_mut()),
                    (d.cuStreamSynchronize)(s),
                ]
            }
        })
        .join()
        .unwrap_or([u32::MAX; 4]);
        println!(
            "- calls from a thread with no current context (record, wait, launch, sync): CUresult {:?}\n",
            codes
        );
        // SAFETY: created above, destroyed once.
        cu(d, unsafe { (d.cuEventDestroy_v2)(ev) }, "cuEventDestroy");
    }
    // SLUICE_BENCH_ONLY=ping-pong runs that table alone (for repeated A/B runs).
    let only_ping_pong = std::env::var("SLUICE_BENCH_ONLY").is_ok_and(|v| v == "ping-pong");
    if !only_ping_pong {
        print_rows_header();
        b.bench_wait_event();
        b.bench_event_record();
        b.bench_launch();
        b.bench_pinned();
        b.bench_pageable();
        b.bench_alloc();
        println!();
        let ops = b.bench_ops();
        print_ops(&ops);
        let graphs = b.bench_graphs();
        print_graphs(&graphs, &mut b.goals, &mut b.fails);
    }
    let pp = b.bench_ping_pong();
    b.goals += 2;
    print_ping_pong(&pp, &mut b.fails);

    // Teardown, every call checked.
    let fns = [
        b.s_empty,
        b.s_add,
        b.s_fill,
        b.s_spin_fill,
        b.s_spin_add,
        b.s_spin_copy,
    ];
    for f in fns {
        ck(sluice_function_destroy(f), "sluice_function_destroy");
    }
    ck(sluice_module_unload(b.smod), "sluice_module_unload");
    for s in [b.sa, b.sb] {
        s_sync(s);
        ck(sluice_stream_destroy(s), "sluice_stream_destroy");
    }
    ck(sluice_device_wait_all(b.dev), "sluice_device_wait_all");
    ck(
        sluice_device_pinned_trim(b.dev),
        "sluice_device_pinned_trim",
    );
    ck(sluice_device_close(b.dev), "sluice_device_close");
    for s in [b.ra, b.rb] {
        if separate_streams {
            b.r_sync(s);
            // SAFETY: a stream created above, destroyed once.
            cu(d, unsafe { (d.cuStreamDestroy_v2)(s) }, "cuStreamDestroy");
        }
    }
    // SAFETY: the module loaded above, unloaded once.
    cu(d, unsafe { (d.cuModuleUnload)(b.rmod) }, "cuModuleUnload");
    // SAFETY: balances the retain above.
    cu(
        d,
        unsafe { (d.cuDevicePrimaryCtxRelease_v2)(cudev) },
        "cuDevicePrimaryCtxRelease",
    );

    let live = sluice_live_handles();
    if live != 0 {
        eprintln!("WARNING: {live} sluice handles still live at exit (a leak in the bench?)");
    }
    let (total, fails) = (b.goals, b.fails);
    println!(
        "**Goals: {} of {total} PASS, {fails} FAIL.**",
        total - fails
    );
    if strict && fails > 0 {
        std::process::exit(1);
    }
}
