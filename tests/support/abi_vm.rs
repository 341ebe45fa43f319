//! A byte-driven VM over the C ABI, shared by `tests/fuzz_abi.rs` (proptest, stable)
//! and `fuzz/fuzz_targets/abi.rs` (libFuzzer). Each op reads its arguments from the
//! bytes: live handles, or NULL, stale, forged and wrong-type ones, random sizes and
//! offsets. After each call: a documented code, a non-empty message, never
//! `SLUICE_ERROR_PANIC`. At the end everything is destroyed and the live-handle
//! count, callback frees and foreign releases must balance.
#![allow(dead_code, clippy::missing_safety_doc)]

use sluice::dlpack::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use sluice::ffi::*;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

#[path = "abi_vm/callbacks.rs"]
mod callbacks;
#[path = "abi_vm/device_stream.rs"]
mod device_stream;
#[path = "abi_vm/memory.rs"]
mod memory;
#[path = "abi_vm/misc.rs"]
mod misc;
#[path = "abi_vm/module_prefetch.rs"]
mod module_prefetch;
#[path = "abi_vm/rng_dlpack.rs"]
mod rng_dlpack;
#[path = "abi_vm/teardown.rs"]
mod teardown;

use callbacks::*;

/// Reads the input; zeros once it runs out.
pub struct Src<'a> {
    d: &'a [u8],
    i: usize,
}

impl<'a> Src<'a> {
    pub fn new(d: &'a [u8]) -> Self {
        Src { d, i: 0 }
    }
    pub fn done(&self) -> bool {
        self.i >= self.d.len()
    }
    pub fn u8(&mut self) -> u8 {
        let v = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    /// Mostly true: 7 in 8.
    fn likely(&mut self) -> bool {
        self.u8() & 7 != 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

// Counters of the VM's own callbacks, checked at the end of a run.
static CB_MADE: AtomicU64 = AtomicU64::new(0);
static CB_FREED: AtomicU64 = AtomicU64::new(0);
static REL_MADE: AtomicU64 = AtomicU64::new(0);
static REL_DONE: AtomicU64 = AtomicU64::new(0);
static DL_MADE: AtomicU64 = AtomicU64::new(0);
static DL_DONE: AtomicU64 = AtomicU64::new(0);
static LOGS: AtomicU64 = AtomicU64::new(0);
static BAD: AtomicU64 = AtomicU64::new(0);

const SCRATCH: usize = 1 << 18;
const MIB: usize = 1 << 20;
/// Sizes above this and below `HUGE` are folded down: a real allocation that large
/// trips libFuzzer's malloc limit, not a library bug.
const CAP: usize = 64 * MIB;
const HUGE: usize = 1 << 44;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum K {
    Device,
    Stream,
    Event,
    Graph,
    Exec,
    Cache,
    Buffer,
    Sync,
    Op,
    Prefetcher,
    Batch,
    Rng,
    Ckpt,
    Module,
    Function,
}
const NK: usize = 15;
const KINDS: [K; NK] = [
    K::Device,
    K::Stream,
    K::Event,
    K::Graph,
    K::Exec,
    K::Cache,
    K::Buffer,
    K::Sync,
    K::Op,
    K::Prefetcher,
    K::Batch,
    K::Rng,
    K::Ckpt,
    K::Module,
    K::Function,
];

struct Exported {
    ptr: *mut c_void,
    format: u32,
}

/// A DLPack tensor the VM made itself, over its own memory.
#[repr(C)]
struct OwnTensor {
    v: DLManagedTensorVersioned,
    u: DLManagedTensor,
    shape: [i64; 4],
    data: Vec<u8>,
}

struct FillCfg {
    end_after: u64,
    fail_at: u64,
    over: bool,
    n: AtomicU64,
}

/// What a graph cache body does.
#[repr(C)]
struct Body {
    buffer: u64,
    offset: usize,
    len: usize,
    rc: i32,
    ops: u8,
}

pub struct Vm {
    live: [Vec<u64>; NK],
    stale: Vec<u64>,
    /// Buffer sizes, by handle bits.
    sizes: Vec<(u64, usize)>,
    capturing: Vec<u64>,
    fills: Vec<(u64, sluice_prefetch_fill_t)>,
    fill_cfgs: Vec<(u64, Box<FillCfg>)>,
    exported: Vec<Exported>,
    own_tensors: Vec<*mut OwnTensor>,
    host_mem: Vec<Vec<u8>>,
    serialized: Vec<u8>,
    scratch: Vec<u8>,
    tmp: std::path::PathBuf,
    baseline: u64,
    /// A device handle that no op closes: teardown waits on it for all the work
    /// the run queued, after every other handle is gone, before it frees the memory
    /// that work may still write (`host_mem`). Without it, a run that closed every
    /// device handle left its destroyed streams' work unwaited.
    anchor: Option<u64>,
    pub calls: u64,
    pub failures: u64,
}

fn dev(bits: u64) -> sluice_device_t {
    sluice_device_t { bits }
}
fn st(bits: u64) -> sluice_stream_t {
    sluice_stream_t { bits }
}
fn ev(bits: u64) -> sluice_event_t {
    sluice_event_t { bits }
}
fn gr(bits: u64) -> sluice_graph_t {
    sluice_graph_t { bits }
}
fn ex(bits: u64) -> sluice_graph_exec_t {
    sluice_graph_exec_t { bits }
}
fn gc(bits: u64) -> sluice_graph_cache_t {
    sluice_graph_cache_t { bits }
}
fn bu(bits: u64) -> sluice_buffer_t {
    sluice_buffer_t { bits }
}
fn sy(bits: u64) -> sluice_sync_t {
    sluice_sync_t { bits }
}
fn op(bits: u64) -> sluice_op_t {
    sluice_op_t { bits }
}
fn pf(bits: u64) -> sluice_prefetcher_t {
    sluice_prefetcher_t { bits }
}
fn ba(bits: u64) -> sluice_batch_t {
    sluice_batch_t { bits }
}
fn rn(bits: u64) -> sluice_rng_t {
    sluice_rng_t { bits }
}
fn ck(bits: u64) -> sluice_rng_checkpoint_t {
    sluice_rng_checkpoint_t { bits }
}
fn mo(bits: u64) -> sluice_module_t {
    sluice_module_t { bits }
}
fn fu(bits: u64) -> sluice_function_t {
    sluice_function_t { bits }
}

fn dup(f: &sluice_prefetch_fill_t) -> sluice_prefetch_fill_t {
    // SAFETY: a plain C struct of integers and pointers.
    unsafe { std::ptr::read(f) }
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the ABI's plain C structs (integers, pointers, Options).
    unsafe { std::mem::zeroed() }
}

/// `SLUICE_ABI_VM_VERBOSE=1` prints every call (to read a failing input).
fn verbose() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var_os("SLUICE_ABI_VM_VERBOSE").is_some())
}

/// An error object's code, checked: documented, not a panic, with a message.
pub fn check_err(what: &str, e: *mut sluice_error_t) -> u32 {
    if e.is_null() {
        return 0;
    }
    let code = sluice_error_code(e);
    // SAFETY: the message is NUL-terminated and lives until the free below.
    let msg = unsafe { CStr::from_ptr(sluice_error_message(e)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(sluice_error_code_name(code)) }
        .to_string_lossy()
        .into_owned();
    sluice_error_free(e);
    assert!(
        (2..=22).contains(&code),
        "{what}: undocumented or panic code {code} ({name}): {msg}"
    );
    assert!(!msg.is_empty(), "{what}: empty message for {name}");
    assert_ne!(name, "SLUICE_ERROR_UNKNOWN", "{what}: code {code}");
    code
}

impl Default for Vm {
    fn default() -> Self {
        Self::new()
    }
}

impl Vm {
    pub fn new() -> Vm {
        let tmp = std::env::temp_dir().join(format!("sluice-abi-vm-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&tmp);
        check_err(
            "log_set_callback",
            sluice_log_set_callback(Some(log_cb), std::ptr::null_mut()),
        );
        Vm {
            live: Default::default(),
            stale: Vec::new(),
            sizes: Vec::new(),
            capturing: Vec::new(),
            fills: Vec::new(),
            fill_cfgs: Vec::new(),
            exported: Vec::new(),
            own_tensors: Vec::new(),
            host_mem: Vec::new(),
            serialized: Vec::new(),
            scratch: vec![0u8; SCRATCH],
            tmp,
            baseline: sluice_live_handles(),
            anchor: None,
            calls: 0,
            failures: 0,
        }
    }

    /// Runs the whole input, then tears down and checks the balances.
    pub fn run(data: &[u8]) {
        // The counters are process-wide: one VM at a time.
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
        // `SLUICE_ABI_VM_DUMP=path` keeps the input being run there, for a crash or a
        // sanitizer's abort to leave behind (replay it with the fuzz target).
        if let Some(path) = std::env::var_os("SLUICE_ABI_VM_DUMP") {
            std::fs::write(path, data).expect("SLUICE_ABI_VM_DUMP: write the input");
        }
        let mut vm = Vm::new();
        let mut s = Src::new(data);
        // Always start with a device and a stream so that short inputs do something.
        vm.boot();
        let mut steps = 0;
        while !s.done() && steps < 400 {
            vm.step(&mut s);
            steps += 1;
        }
        vm.teardown();
    }

    fn boot(&mut self) {
        let mut a = dev(0);
        if check_err("device_open_default", sluice_device_open_default(&mut a)) == 0 {
            self.anchor = Some(a.bits);
        }
        let mut d = dev(0);
        if self.chk("device_open_default", sluice_device_open_default(&mut d)) == 0 {
            self.add(K::Device, d.bits);
            let mut s = st(0);
            if self.chk("stream_create", sluice_stream_create(d, 0, 0, &mut s)) == 0 {
                self.add(K::Stream, s.bits);
            }
        }
    }

    fn chk(&mut self, what: &str, e: *mut sluice_error_t) -> u32 {
        self.calls += 1;
        if verbose() && !e.is_null() {
            // SAFETY: NUL-terminated, live until check_err frees it.
            let m = unsafe { CStr::from_ptr(sluice_error_message(e)) };
            eprintln!("  {what}: {}", m.to_string_lossy());
        } else if verbose() {
            eprintln!("  {what}: ok");
        }
        let c = check_err(what, e);
        if c != 0 {
            self.failures += 1;
        }
        c
    }

    fn add(&mut self, k: K, bits: u64) {
        assert_ne!(bits, 0, "{k:?}: 0 returned as a handle");
        self.live[k as usize].push(bits);
    }

    fn kill(&mut self, k: K, bits: u64) {
        let v = &mut self.live[k as usize];
        if let Some(i) = v.iter().position(|&b| b == bits) {
            v.swap_remove(i);
            self.stale.push(bits);
            if self.stale.len() > 64 {
                self.stale.remove(0);
            }
        }
        if k == K::Buffer {
            self.sizes.retain(|&(b, _)| b != bits);
        }
    }

    fn is_live(&self, k: K, bits: u64) -> bool {
        self.live[k as usize].contains(&bits)
    }

    /// A handle of kind `k`: mostly live, else 0, stale, forged or of another kind.
    fn pick(&mut self, s: &mut Src, k: K) -> u64 {
        let sel = s.u8();
        let idx = s.u8() as usize;
        let live = &self.live[k as usize];
        match sel % 32 {
            0 => 0,
            1 if !self.stale.is_empty() => self.stale[idx % self.stale.len()],
            2 => s.u64(),
            3 => {
                let other = &self.live[KINDS[idx % NK] as usize];
                if other.is_empty() {
                    s.u64() | 1
                } else {
                    other[(idx / NK) % other.len()]
                }
            }
            // Near-valid: a live handle with its generation or index changed.
            4 if !live.is_empty() => {
                let b = live[idx % live.len()];
                if idx & 1 == 0 {
                    b ^ (1 << (32 + (idx >> 1) % 24))
                } else {
                    b ^ (1 << ((idx >> 1) % 32))
                }
            }
            _ if !live.is_empty() => live[idx % live.len()],
            _ => 0,
        }
    }

    fn size_of(&self, bits: u64) -> usize {
        self.sizes
            .iter()
            .find(|&&(b, _)| b == bits)
            .map(|&(_, n)| n)
            .unwrap_or(0)
    }

    /// A size: mostly small, sometimes up to 4 MiB, sometimes huge or random.
    fn size(&self, s: &mut Src) -> usize {
        match s.u8() % 16 {
            0 => 0,
            1..=7 => 1 + s.u8() as usize,
            8..=11 => s.u16() as usize,
            12 => s.u32() as usize % (4 * MIB),
            13 => [HUGE, 1 << 62, usize::MAX, usize::MAX - 255, 1 << 63][s.u8() as usize % 5],
            14 => s.u64() as usize,
            _ => 4 * (1 + s.u8() as usize),
        }
    }

    /// A size to allocate: `size` with the range that would really be mapped folded down.
    fn alloc_size(&self, s: &mut Src) -> usize {
        let n = self.size(s);
        if n > CAP && n < HUGE {
            n % CAP
        } else {
            n
        }
    }

    /// An offset or length within a buffer of `n` bytes, or past it.
    fn within(&self, s: &mut Src, n: usize) -> usize {
        match s.u8() % 8 {
            0 => 0,
            1..=4 if n > 0 => s.u32() as usize % (n + 1),
            5 => n,
            6 => self.size(s),
            _ => s.u8() as usize,
        }
    }

    /// A host range in the scratch buffer: (pointer, len), or NULL.
    fn host_range(&mut self, s: &mut Src, want: usize) -> (*mut u8, usize) {
        match s.u8() % 16 {
            0 => (std::ptr::null_mut(), want),
            1 => (std::ptr::null_mut(), 0),
            _ => (self.scratch.as_mut_ptr(), want.min(SCRATCH)),
        }
    }

    fn syncs(&mut self, s: &mut Src) -> (Vec<sluice_sync_t>, usize, bool) {
        let n = (s.u8() % 4) as usize;
        let v: Vec<_> = (0..n).map(|_| sy(self.pick(s, K::Sync))).collect();
        // Sometimes NULL with a count, or a count under the length.
        let null = s.u8() % 16 == 0;
        (v, n, null)
    }

    fn ptr_or_null<T>(v: &[T], null: bool) -> *const T {
        if null {
            std::ptr::null()
        } else {
            v.as_ptr()
        }
    }

    /// An out pointer, occasionally NULL.
    fn out<T>(s: &mut Src, v: &mut T) -> *mut T {
        if s.u8() % 24 == 0 {
            std::ptr::null_mut()
        } else {
            v
        }
    }

    pub fn step(&mut self, s: &mut Src) {
        let code = s.u8();
        match code % 72 {
            0 => self.op_device_open(s),
            1 => {
                let mut d = dev(0);
                let p = Self::out(s, &mut d);
                if self.chk("device_open_default", sluice_device_open_default(p)) == 0 {
                    self.add(K::Device, d.bits);
                }
            }
            2 => {
                let d = self.pick(s, K::Device);
                if self.chk("device_close", sluice_device_close(dev(d))) == 0 {
                    self.kill(K::Device, d);
                }
            }
            3 => self.op_device_query(s),
            4 => {
                let d = self.pick(s, K::Device);
                self.chk("device_wait_all", sluice_device_wait_all(dev(d)));
            }
            5 => self.op_pinned(s),
            6 | 7 => self.op_stream_create(s),
            8 => {
                let b = self.pick(s, K::Stream);
                if self.chk("stream_destroy", sluice_stream_destroy(st(b))) == 0 {
                    self.kill(K::Stream, b);
                    self.capturing.retain(|&c| c != b);
                }
            }
            9 => self.op_stream_query(s),
            10 => {
                let b = self.pick(s, K::Stream);
                let n = self.size(s) as u64;
                self.chk(
                    "stream_set_block_cache_limit",
                    sluice_stream_set_block_cache_limit(st(b), n),
                );
            }
            11 | 12 => self.op_event_record(s),
            13 => {
                let (a, e) = (self.pick(s, K::Stream), self.pick(s, K::Event));
                self.chk("stream_wait_event", sluice_stream_wait_event(st(a), ev(e)));
            }
            14 => self.op_event_query(s),
            15 => {
                let e = self.pick(s, K::Event);
                if self.chk("event_destroy", sluice_event_destroy(ev(e))) == 0 {
                    self.kill(K::Event, e);
                }
            }
            16 => {
                let b = self.pick(s, K::Stream);
                let mode = if s.likely() {
                    (s.u8() % 3) as u32
                } else {
                    s.u32()
                };
                if self.chk(
                    "graph_capture_begin",
                    sluice_graph_capture_begin(st(b), mode),
                ) == 0
                {
                    self.capturing.push(b);
                }
            }
            17 => {
                let b = if !self.capturing.is_empty() && s.likely() {
                    self.capturing[s.u8() as usize % self.capturing.len()]
                } else {
                    self.pick(s, K::Stream)
                };
                self.end_capture(s, b);
            }
            18 => self.op_graph_query(s),
            19 => {
                let g = self.pick(s, K::Graph);
                if self.chk("graph_destroy", sluice_graph_destroy(gr(g))) == 0 {
                    self.kill(K::Graph, g);
                }
            }
            20 => {
                let g = self.pick(s, K::Graph);
                let mut e = ex(0);
                let p = Self::out(s, &mut e);
                if self.chk("graph_instantiate", sluice_graph_instantiate(gr(g), p)) == 0 {
                    self.add(K::Exec, e.bits);
                }
            }
            21 => {
                let (e, b) = (self.pick(s, K::Exec), self.pick(s, K::Stream));
                if s.bool() {
                    self.chk("graph_exec_upload", sluice_graph_exec_upload(ex(e), st(b)));
                } else {
                    self.chk("graph_exec_launch", sluice_graph_exec_launch(ex(e), st(b)));
                }
            }
            22 => {
                let (e, g) = (self.pick(s, K::Exec), self.pick(s, K::Graph));
                let mut info: sluice_graph_update_info_t = zeroed();
                let p = if s.bool() {
                    std::ptr::null_mut()
                } else {
                    &mut info as *mut _
                };
                if self.chk(
                    "graph_exec_update",
                    sluice_graph_exec_update(ex(e), gr(g), p),
                ) == 0
                    && !p.is_null()
                {
                    assert!(info.result <= 1, "update result {}", info.result);
                    assert!(info.reason.contains(&0), "reason not NUL-terminated");
                }
            }
            23 => {
                let e = self.pick(s, K::Exec);
                if self.chk("graph_exec_destroy", sluice_graph_exec_destroy(ex(e))) == 0 {
                    self.kill(K::Exec, e);
                }
            }
            24 => {
                let d = self.pick(s, K::Device);
                let mut c = gc(0);
                let p = Self::out(s, &mut c);
                if self.chk("graph_cache_create", sluice_graph_cache_create(dev(d), p)) == 0 {
                    self.add(K::Cache, c.bits);
                }
            }
            25 => {
                let c = self.pick(s, K::Cache);
                if self.chk("graph_cache_destroy", sluice_graph_cache_destroy(gc(c))) == 0 {
                    self.kill(K::Cache, c);
                }
            }
            26 | 27 => self.op_cache_run(s),
            28 => self.op_cache_misc(s),
            29..=31 => self.op_buffer_alloc(s),
            32 => self.op_register_host(s),
            33 => self.op_wrap_device(s),
            34 => {
                let b = self.pick(s, K::Buffer);
                if self.chk("buffer_free", sluice_buffer_free(bu(b))) == 0 {
                    self.kill(K::Buffer, b);
                }
            }
            35 => self.op_buffer_query(s),
            36 | 37 => self.op_copy(s),
            38 => self.op_copy_host(s, true),
            39 => self.op_copy_host(s, false),
            40 => self.op_memset(s),
            41 => {
                let mut y = sy(0);
                let p = Self::out(s, &mut y);
                if self.chk("sync_create", sluice_sync_create(p)) == 0 {
                    self.add(K::Sync, y.bits);
                }
            }
            42 => {
                let y = self.pick(s, K::Sync);
                if self.chk("sync_destroy", sluice_sync_destroy(sy(y))) == 0 {
                    self.kill(K::Sync, y);
                }
            }
            43 => self.op_sync_query(s),
            44 => self.op_op_begin(s),
            45 => {
                let o = self.pick(s, K::Op);
                self.chk("op_end", sluice_op_end(op(o)));
                // Consumed also on error.
                self.kill(K::Op, o);
            }
            46 | 47 => self.op_host_func(s),
            48 => self.op_module(s),
            49 => self.op_prefetcher_create(s),
            50 => self.op_prefetcher_destroy(s),
            51 => self.op_prefetcher_push(s),
            52 => self.op_prefetcher_acquire(s),
            53 => self.op_prefetcher_next(s),
            54 => self.op_prefetcher_misc(s),
            55 => self.op_rng_create(s),
            56 => self.op_rng_misc(s),
            57 => self.op_rng_generate(s),
            58 => self.op_ckpt(s),
            59 => self.op_ckpt_serialize(s),
            60 => self.op_ckpt_deserialize(s),
            61 => self.op_to_dlpack(s),
            62 => self.op_from_dlpack(s),
            63 => self.op_dlpack_delete(s),
            64 => self.op_log(s),
            65 => self.op_engine(s),
            66 => self.op_trace(s),
            67 => self.op_misc(s),
            68 => self.op_deprecated(s),
            69 => self.op_stream_wrap(s),
            70 => self.op_buffer_sync(s),
            _ => self.op_counters(s),
        }
        assert_eq!(BAD.load(SeqCst), 0, "a callback saw a bad error object");
    }
}
