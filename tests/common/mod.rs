//! Shared test kit: the same u32 "kernels" on both backends. On cuda they are the
//! PTX kernels in kernels/test_kernels.ptx; on host they are tracked host callbacks.
#![allow(dead_code)]

use sluice::module::{Function, Module};
use sluice::ops;
use sluice::{BackendKind, Buffer, Device, LaunchDims, Stream, SyncObject};
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const PTX: &[u8] = include_bytes!("../../kernels/test_kernels.ptx");

pub struct Kit {
    pub dev: Arc<Device>,
    funcs: Option<Funcs>,
    _turn: Turn, // last: the module unloads before another test's turn
}

/// Tests in one process run beside each other, except those that take `kit_alone`:
/// on CUDA, freeing page-locked memory or unloading a module waits for the whole
/// device, so a test that blocks a stream with a host callback (or times a stream
/// against a long kernel) must not share the process with them.
static TURNS: Mutex<isize> = Mutex::new(0); // tests running; -1: one alone
static TURN_ENDED: Condvar = Condvar::new();

struct Funcs {
    _module: Arc<Module>,
    spin_fill: Arc<Function>,
    spin_add: Arc<Function>,
    spin_copy: Arc<Function>,
}

/// A test's turn (a reader-writer lock's guard that threads may move).
struct Turn {
    alone: bool,
}

impl Turn {
    fn take(alone: bool) -> Turn {
        let mut running = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        while *running < 0 || (alone && *running > 0) {
            running = TURN_ENDED.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running = if alone { -1 } else { *running + 1 };
        Turn { alone }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut running = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        *running = if self.alone { 0 } else { *running - 1 };
        TURN_ENDED.notify_all();
    }
}

/// Opens the default device (`SLUICE_BACKEND`, host in CI) and loads kernels on cuda.
pub fn kit() -> Kit {
    open(Turn::take(false))
}

/// As `kit`, with no other test of this process running until it drops.
pub fn kit_alone() -> Kit {
    open(Turn::take(true))
}

fn open(turn: Turn) -> Kit {
    let dev = Device::open_default().expect("open default device");
    let funcs = (dev.kind() == BackendKind::Cuda).then(|| {
        let m = Module::load(&dev, PTX).expect("load test PTX");
        let f = |n: &std::ffi::CStr| m.function(n).expect("kernel");
        Funcs {
            spin_fill: f(c"sluice_spin_fill"),
            spin_add: f(c"sluice_spin_add"),
            spin_copy: f(c"sluice_spin_copy"),
            _module: m,
        }
    });
    Kit {
        dev,
        funcs,
        _turn: turn,
    }
}

fn spin(ns: u64) {
    let end = Instant::now() + Duration::from_nanos(ns);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn words(b: &Buffer) -> u64 {
    (b.size / 4) as u64
}

fn dims(n: u64) -> LaunchDims {
    let blocks = n.div_ceil(256).clamp(1, 1024) as u32;
    LaunchDims {
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    }
}

struct Addr(u64);
impl Addr {
    fn get(&self) -> u64 {
        self.0
    }
}

impl Kit {
    pub fn is_cuda(&self) -> bool {
        self.funcs.is_some()
    }

    pub fn stream(&self) -> Arc<Stream> {
        Stream::create(&self.dev, sluice::stream::STREAM_NON_BLOCKING, 0).expect("stream")
    }

    pub fn buffer(&self, s: &Arc<Stream>, words: usize) -> Arc<Buffer> {
        Buffer::alloc(s, words * 4).expect("alloc")
    }

    /// buf[i] = value for all i, after spinning `spin_ns` on the device.
    pub fn fill(&self, s: &Stream, buf: &Buffer, value: u32, spin_ns: u64) {
        self.fill_at(
            s,
            buf.addr,
            words(buf),
            value,
            spin_ns,
            std::slice::from_ref(&buf.sync),
        )
    }

    /// `words` u32 at device address `addr` = value, after spinning; declares no
    /// access (foreign work, which the caller orders, e.g. inside a foreign op).
    pub fn fill_untracked(&self, s: &Stream, addr: u64, words: u64, value: u32, spin_ns: u64) {
        self.fill_at(s, addr, words, value, spin_ns, &[])
    }

    /// `n` words at `addr` = value, after spinning; a tracked op writing `w`.
    pub fn fill_at(
        &self,
        s: &Stream,
        addr: u64,
        n: u64,
        value: u32,
        spin_ns: u64,
        w: &[Arc<SyncObject>],
    ) {
        match &self.funcs {
            Some(f) => {
                let (mut p, mut n, mut v, mut sp) = (addr, n, value, spin_ns);
                let mut args = [
                    &mut p as *mut u64 as *mut c_void,
                    &mut n as *mut u64 as *mut c_void,
                    &mut v as *mut u32 as *mut c_void,
                    &mut sp as *mut u64 as *mut c_void,
                ];
                // SAFETY: args match sluice_spin_fill's parameters.
                unsafe { ops::launch(s, &f.spin_fill, dims(n), &mut args, &[], w) }
                    .expect("launch spin_fill");
            }
            None => {
                let a = Addr(addr);
                ops::host_callback(
                    s,
                    move || {
                        spin(spin_ns);
                        // SAFETY: the engine (or the caller) orders this write; the
                        // memory outlives it.
                        let d = unsafe {
                            std::slice::from_raw_parts_mut(a.get() as *mut u32, n as usize)
                        };
                        d.fill(value);
                        0
                    },
                    &[],
                    w,
                )
                .expect("host fill");
            }
        }
    }

    /// dst[i] += src[i] (wrapping), after spinning.
    pub fn add(&self, s: &Stream, dst: &Buffer, src: &Buffer, spin_ns: u64) {
        self.binary(s, dst, src, spin_ns, true)
    }

    /// dst[i] = src[i], after spinning.
    pub fn copy(&self, s: &Stream, dst: &Buffer, src: &Buffer, spin_ns: u64) {
        self.binary(s, dst, src, spin_ns, false)
    }

    fn binary(&self, s: &Stream, dst: &Buffer, src: &Buffer, spin_ns: u64, add: bool) {
        let n = words(dst).min(words(src));
        self.binary_at(s, (dst, 0), (src, 0), n, spin_ns, add)
    }

    /// dst[dst_word] = src[src_word] (one word), after spinning; tracked like `copy`.
    pub fn copy_word(
        &self,
        s: &Stream,
        dst: &Buffer,
        dst_word: usize,
        src: &Buffer,
        src_word: usize,
        spin_ns: u64,
    ) {
        assert!(dst_word < words(dst) as usize && src_word < words(src) as usize);
        self.binary_at(s, (dst, dst_word), (src, src_word), 1, spin_ns, false)
    }

    /// `n` words from `src` at a word offset into `dst` at a word offset (`+=` when
    /// `add`, else `=`), after spinning; a tracked op reading src, writing dst.
    fn binary_at(
        &self,
        s: &Stream,
        (dst, dst_word): (&Buffer, usize),
        (src, src_word): (&Buffer, usize),
        n: u64,
        spin_ns: u64,
        add: bool,
    ) {
        self.binary_tracked(s, (dst, dst_word), (src, src_word), n, spin_ns, add, true)
    }

    /// dst[i] = src[i], after spinning; declares only the write of `dst` (the read
    /// of `src` is ordered by the caller, as foreign work is).
    pub fn copy_untracked_src(&self, s: &Stream, dst: &Buffer, src: &Buffer, spin_ns: u64) {
        let n = words(dst).min(words(src));
        self.binary_tracked(s, (dst, 0), (src, 0), n, spin_ns, false, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn binary_tracked(
        &self,
        s: &Stream,
        (dst, dst_word): (&Buffer, usize),
        (src, src_word): (&Buffer, usize),
        n: u64,
        spin_ns: u64,
        add: bool,
        track_src: bool,
    ) {
        let r: Vec<_> = track_src.then(|| src.sync.clone()).into_iter().collect();
        let w = [dst.sync.clone()];
        let (da, sa) = (
            dst.addr + 4 * dst_word as u64,
            src.addr + 4 * src_word as u64,
        );
        match &self.funcs {
            Some(f) => {
                let (mut d, mut sp, mut n2, mut t) = (da, sa, n, spin_ns);
                let mut args = [
                    &mut d as *mut u64 as *mut c_void,
                    &mut sp as *mut u64 as *mut c_void,
                    &mut n2 as *mut u64 as *mut c_void,
                    &mut t as *mut u64 as *mut c_void,
                ];
                let k = if add { &f.spin_add } else { &f.spin_copy };
                // SAFETY: args match the kernel's parameters.
                unsafe { ops::launch(s, k, dims(n), &mut args, &r, &w) }.expect("launch");
            }
            None => {
                let (da, sa) = (Addr(da), Addr(sa));
                ops::host_callback(
                    s,
                    move || {
                        spin(spin_ns);
                        // SAFETY: the engine orders these accesses; buffers outlive them.
                        let (d, sr) = unsafe {
                            (
                                std::slice::from_raw_parts_mut(da.get() as *mut u32, n as usize),
                                std::slice::from_raw_parts(sa.get() as *const u32, n as usize),
                            )
                        };
                        for (x, y) in d.iter_mut().zip(sr) {
                            *x = if add { x.wrapping_add(*y) } else { *y };
                        }
                        0
                    },
                    &r,
                    &w,
                )
                .expect("host binary op");
            }
        }
    }

    /// Reads the buffer back through a tracked copy (blocks until the data arrived).
    pub fn read(&self, s: &Stream, buf: &Buffer) -> Vec<u32> {
        let mut bytes = vec![0u8; buf.size];
        sluice::ops::copy_to_host(s, &mut bytes, buf, 0).expect("copy_to_host");
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    pub fn write(&self, s: &Stream, buf: &Buffer, data: &[u32]) {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        sluice::ops::copy_from_host(s, buf, 0, &bytes).expect("copy_from_host");
    }
}

/// Scales an op count down under `SLUICE_TEST_QUICK=1` (compute-sanitizer runs).
pub fn scaled(n: usize) -> usize {
    if std::env::var("SLUICE_TEST_QUICK").as_deref() == Ok("1") {
        (n / 50).max(100)
    } else {
        n
    }
}

pub fn sync_of(b: &Buffer) -> Arc<SyncObject> {
    b.sync.clone()
}

pub fn waits(s: &Stream) -> u64 {
    s.waits()
}

/// Arms a host backend pause of `d` at the next call of `entry`, runs `start`
/// (which starts the thread that makes that call) and returns what it returned
/// once the pause has begun. Panics with `what` when it has not begun in 10 s.
pub fn paused_at<T>(entry: &'static str, d: Duration, what: &str, start: impl FnOnce() -> T) -> T {
    use sluice::backend::faults;
    let begun = faults::pauses_begun();
    faults::pause_next(entry, d);
    let started = start();
    let deadline = Instant::now() + Duration::from_secs(10);
    while faults::pauses_begun() == begun {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    started
}
