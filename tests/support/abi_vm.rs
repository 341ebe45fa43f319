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

/// The same check, for callbacks, which must not panic.
fn check_quiet(e: *mut sluice_error_t) {
    if e.is_null() {
        return;
    }
    let code = sluice_error_code(e);
    // SAFETY: as in check_err.
    let empty = unsafe { *sluice_error_message(e) } == 0;
    if !(2..=22).contains(&code) || empty {
        BAD.fetch_add(1, SeqCst);
    }
    sluice_error_free(e);
}

unsafe extern "C" fn host_cb(ud: *mut c_void) -> i32 {
    // SAFETY: ud is the i32 box made in op_host_func.
    unsafe { *(ud as *const i32) }
}

unsafe extern "C" fn host_free(ud: *mut c_void) {
    // SAFETY: made by Box::into_raw in op_host_func, freed once by contract.
    drop(unsafe { Box::from_raw(ud as *mut i32) });
    CB_FREED.fetch_add(1, SeqCst);
}

unsafe extern "C" fn host_cb_static(_ud: *mut c_void) -> i32 {
    0
}

unsafe extern "C" fn body_fn(ud: *mut c_void, stream: sluice_stream_t) -> i32 {
    // SAFETY: ud is the Body on run's stack, live during the call.
    let b = unsafe { &*(ud as *const Body) };
    if b.ops & 1 != 0 {
        check_quiet(sluice_stream_memset(
            stream,
            bu(b.buffer),
            b.offset,
            7,
            b.len,
        ));
    }
    if b.ops & 2 != 0 {
        let rd = [sy(b.buffer)];
        check_quiet(sluice_stream_launch_host_func(
            stream,
            Some(host_cb_static),
            std::ptr::null_mut(),
            None,
            rd.as_ptr(),
            1,
            std::ptr::null(),
            0,
        ));
    }
    if b.ops & 4 != 0 {
        let mut e = sluice_event_t { bits: 0 };
        if sluice_event_record(stream, 0, &mut e).is_null() {
            check_quiet(sluice_event_destroy(e));
        }
    }
    b.rc
}

unsafe extern "C" fn log_cb(_level: u32, msg: *const c_char, _ud: *mut c_void) {
    if msg.is_null() {
        BAD.fetch_add(1, SeqCst);
    }
    LOGS.fetch_add(1, SeqCst);
}

unsafe extern "C" fn release_fn(ud: *mut c_void) {
    // SAFETY: a Vec<u8> box made in op_wrap_device, released once by contract.
    drop(unsafe { Box::from_raw(ud as *mut Vec<u8>) });
    REL_DONE.fetch_add(1, SeqCst);
}

unsafe extern "C" fn fill_fn(ud: *mut c_void, fill: *mut sluice_prefetch_fill_t) -> i32 {
    // SAFETY: ud is the FillCfg the VM keeps until the prefetcher is destroyed.
    let c = unsafe { &*(ud as *const FillCfg) };
    // SAFETY: the prefetcher passes a valid fill for this call.
    let f = unsafe { &mut *fill };
    let n = c.n.fetch_add(1, SeqCst);
    if n >= c.end_after {
        return SLUICE_PREFETCH_END;
    }
    if n == c.fail_at {
        return 5;
    }
    for i in 0..(f.segments as usize).min(8) {
        let len = (f.capacity[i]).min(64);
        // SAFETY: host[i] holds capacity[i] bytes.
        unsafe { std::ptr::write_bytes(f.host[i] as *mut u8, n as u8, len) };
        f.len[i] = if c.over { f.capacity[i] + 1 } else { len };
    }
    0
}

unsafe extern "C" fn own_deleter_v(t: *mut DLManagedTensorVersioned) {
    // SAFETY: manager_ctx is the OwnTensor box; the deleter runs once.
    drop(unsafe { Box::from_raw((*t).manager_ctx as *mut OwnTensor) });
    DL_DONE.fetch_add(1, SeqCst);
}

unsafe extern "C" fn own_deleter_u(t: *mut DLManagedTensor) {
    // SAFETY: as above.
    drop(unsafe { Box::from_raw((*t).manager_ctx as *mut OwnTensor) });
    DL_DONE.fetch_add(1, SeqCst);
}

/// Frees a tensor of ours that sluice did not take.
unsafe fn free_own(t: *mut OwnTensor) {
    // SAFETY: the caller passes a box of ours, freed once.
    drop(unsafe { Box::from_raw(t) });
    DL_DONE.fetch_add(1, SeqCst);
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
            calls: 0,
            failures: 0,
        }
    }

    /// Runs the whole input, then tears down and checks the balances.
    pub fn run(data: &[u8]) {
        // The counters are process-wide: one VM at a time.
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
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

    fn op_device_open(&mut self, s: &mut Src) {
        let backend = match s.u8() % 4 {
            0 => SLUICE_BACKEND_CUDA,
            1 => s.u32(),
            _ => SLUICE_BACKEND_HOST,
        };
        let ordinal = if s.likely() {
            0
        } else {
            s.u32() % 4 + (s.u8() as u32) * 7
        };
        let mut d = dev(0);
        let p = Self::out(s, &mut d);
        if self.chk("device_open", sluice_device_open(backend, ordinal, p)) == 0 {
            self.add(K::Device, d.bits);
        }
    }

    fn op_device_query(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 3 {
            0 => {
                let mut p: sluice_device_props_t = zeroed();
                let o = Self::out(s, &mut p);
                if self.chk("device_props", sluice_device_props(dev(d), o)) == 0 {
                    assert!(p.name.contains(&0), "device name not NUL-terminated");
                }
            }
            1 => {
                let (mut a, mut b) = (0i32, 0i32);
                let (pa, pb) = (Self::out(s, &mut a), Self::out(s, &mut b));
                self.chk(
                    "device_priority_range",
                    sluice_device_priority_range(dev(d), pa, pb),
                );
            }
            _ => {
                let mut n = 0u32;
                let backend = if s.likely() {
                    (s.u8() % 3) as u32
                } else {
                    s.u32()
                };
                let p = Self::out(s, &mut n);
                self.chk("device_count", sluice_device_count(backend, p));
            }
        }
    }

    fn op_pinned(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 3 {
            0 => {
                let mut p: sluice_pinned_stats_t = zeroed();
                let o = Self::out(s, &mut p);
                self.chk("device_pinned_stats", sluice_device_pinned_stats(dev(d), o));
            }
            1 => {
                self.chk("device_pinned_trim", sluice_device_pinned_trim(dev(d)));
            }
            _ => {
                let n = self.size(s) as u64;
                self.chk(
                    "device_pinned_set_limit",
                    sluice_device_pinned_set_limit(dev(d), n),
                );
            }
        }
    }

    fn op_stream_create(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let flags = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let prio = if s.likely() {
            (s.u8() % 5) as i32 - 2
        } else {
            s.u32() as i32
        };
        let mut b = st(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "stream_create",
            sluice_stream_create(dev(d), flags, prio, p),
        ) == 0
        {
            self.add(K::Stream, b.bits);
        }
    }

    fn op_stream_wrap(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let raw: *mut c_void = match s.u8() % 4 {
            0 => std::ptr::null_mut(),
            1 => s.u64() as *mut c_void,
            _ => {
                let b = self.pick(s, K::Stream);
                let mut r: *mut c_void = std::ptr::null_mut();
                if self.chk("stream_raw", sluice_stream_raw(st(b), &mut r)) == 0 {
                    r
                } else {
                    std::ptr::null_mut()
                }
            }
        };
        let mut b = st(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "stream_wrap_external",
            sluice_stream_wrap_external(dev(d), raw, p),
        ) == 0
        {
            self.add(K::Stream, b.bits);
        }
    }

    fn op_stream_query(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        match s.u8() % 6 {
            0 => {
                let mut idle = false;
                let p = Self::out(s, &mut idle);
                self.chk("stream_query", sluice_stream_query(st(b), p));
            }
            1 => {
                self.chk("stream_synchronize", sluice_stream_synchronize(st(b)));
            }
            2 => {
                let label = match s.u8() % 3 {
                    0 => None,
                    _ => Some(std::ffi::CString::new(format!("l{}", s.u16())).unwrap()),
                };
                let p = label.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
                self.chk("stream_set_label", sluice_stream_set_label(st(b), p));
            }
            3 => {
                let mut x: sluice_stream_stats_t = zeroed();
                let p = Self::out(s, &mut x);
                self.chk("stream_stats", sluice_stream_stats(st(b), p));
            }
            4 => {
                let mut r: *mut c_void = std::ptr::null_mut();
                let p = Self::out(s, &mut r);
                self.chk("stream_raw", sluice_stream_raw(st(b), p));
            }
            _ => {
                let mut c = false;
                let p = Self::out(s, &mut c);
                if self.chk("stream_is_capturing", sluice_stream_is_capturing(st(b), p)) == 0
                    && c
                    && !self.capturing.contains(&b)
                {
                    // A joined fork reports capturing too; nothing to end for it.
                }
            }
        }
    }

    fn op_event_record(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let flags = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let mut e = ev(0);
        let p = Self::out(s, &mut e);
        if self.chk("event_record", sluice_event_record(st(b), flags, p)) == 0 {
            self.add(K::Event, e.bits);
        }
    }

    fn op_event_query(&mut self, s: &mut Src) {
        let e = self.pick(s, K::Event);
        match s.u8() % 4 {
            0 => {
                let mut done = false;
                let p = Self::out(s, &mut done);
                self.chk("event_query", sluice_event_query(ev(e), p));
            }
            1 => {
                self.chk("event_synchronize", sluice_event_synchronize(ev(e)));
            }
            2 => {
                let f = self.pick(s, K::Event);
                let mut ms = 0f32;
                let p = Self::out(s, &mut ms);
                self.chk("event_elapsed_ms", sluice_event_elapsed_ms(ev(e), ev(f), p));
            }
            _ => {
                let (mut a, mut b) = (0u64, 0u64);
                let (pa, pb) = (Self::out(s, &mut a), Self::out(s, &mut b));
                self.chk("event_sequence", sluice_event_sequence(ev(e), pa, pb));
            }
        }
    }

    fn end_capture(&mut self, s: &mut Src, b: u64) {
        let mut g = gr(0);
        let p = Self::out(s, &mut g);
        let c = self.chk("graph_capture_end", sluice_graph_capture_end(st(b), p));
        if c == 0 {
            self.add(K::Graph, g.bits);
        }
        // Ended on success and on failure alike (unless the call never reached it).
        if c == 0 || (c != SLUICE_ERROR_NULL_ARGUMENT && c != SLUICE_ERROR_INVALID_HANDLE) {
            self.capturing.retain(|&x| x != b);
        }
    }

    fn op_graph_query(&mut self, s: &mut Src) {
        let g = self.pick(s, K::Graph);
        if s.bool() {
            let mut n = 0usize;
            let p = Self::out(s, &mut n);
            self.chk("graph_node_count", sluice_graph_node_count(gr(g), p));
        } else {
            let path = match s.u8() % 4 {
                0 => None,
                1 => Some(std::ffi::CString::new("/nonexistent-dir/x.dot").unwrap()),
                _ => Some(
                    std::ffi::CString::new(self.tmp.join("g.dot").to_string_lossy().as_bytes())
                        .unwrap(),
                ),
            };
            let p = path.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
            let verbose = s.bool();
            self.chk("graph_debug_dot", sluice_graph_debug_dot(gr(g), p, verbose));
        }
    }

    fn op_cache_run(&mut self, s: &mut Src) {
        let c = self.pick(s, K::Cache);
        let key = (s.u8() % 4) as u64;
        let b = self.pick(s, K::Stream);
        let buf = self.pick(s, K::Buffer);
        let size = self.size_of(buf);
        let mut body = Body {
            buffer: buf,
            offset: self.within(s, size),
            len: self.within(s, size),
            rc: if s.u8() % 8 == 0 { 3 } else { 0 },
            ops: s.u8(),
        };
        let f: sluice_graph_body_fn = if s.u8() % 16 == 0 {
            None
        } else {
            Some(body_fn)
        };
        let ud = &mut body as *mut Body as *mut c_void;
        self.chk(
            "graph_cache_run",
            sluice_graph_cache_run(gc(c), key, st(b), f, ud),
        );
        assert_eq!(BAD.load(SeqCst), 0, "graph cache body saw a bad error");
    }

    fn op_cache_misc(&mut self, s: &mut Src) {
        match s.u8() % 3 {
            0 => {
                let c = self.pick(s, K::Cache);
                let mut x: sluice_graph_cache_stats_t = zeroed();
                let p = Self::out(s, &mut x);
                if self.chk("graph_cache_stats", sluice_graph_cache_stats(gc(c), p)) == 0 {
                    assert!(x.entries <= 4, "more entries than keys used: {}", x.entries);
                }
            }
            1 => {
                let c = self.pick(s, K::Cache);
                let n = if s.likely() {
                    (s.u8() % 4) as usize
                } else {
                    s.u64() as usize
                };
                self.chk(
                    "graph_cache_set_max_entries",
                    sluice_graph_cache_set_max_entries(gc(c), n),
                );
            }
            _ => {
                let on = s.likely();
                self.chk(
                    "graph_cache_set_enabled",
                    sluice_graph_cache_set_enabled(on),
                );
            }
        }
    }

    fn op_counters(&mut self, s: &mut Src) {
        if s.bool() {
            let d = if s.bool() { 0 } else { self.pick(s, K::Device) };
            let mut c: sluice_counters_t = zeroed();
            let p = Self::out(s, &mut c);
            self.chk("counters", sluice_counters(dev(d), p));
        } else {
            let on = s.bool();
            self.chk("counters_set_enabled", sluice_counters_set_enabled(on));
        }
    }

    fn new_buffer(&mut self, bits: u64, size: usize) {
        self.add(K::Buffer, bits);
        self.sizes.push((bits, size));
    }

    fn op_buffer_alloc(&mut self, s: &mut Src) {
        let n = self.alloc_size(s);
        let mut b = bu(0);
        let pinned = s.u8() % 3 == 0;
        let p = Self::out(s, &mut b);
        let c = if pinned {
            let d = self.pick(s, K::Device);
            self.chk(
                "buffer_alloc_pinned",
                sluice_buffer_alloc_pinned(dev(d), n, p),
            )
        } else {
            let st_ = self.pick(s, K::Stream);
            self.chk("buffer_alloc", sluice_buffer_alloc(st(st_), n, p))
        };
        if c == 0 {
            self.new_buffer(b.bits, n);
        } else if n >= HUGE && !p.is_null() {
            // A huge request fails cleanly, never aborts.
            assert!(
                [
                    SLUICE_ERROR_OUT_OF_MEMORY,
                    SLUICE_ERROR_OUT_OF_RANGE,
                    SLUICE_ERROR_INVALID_HANDLE,
                    SLUICE_ERROR_CAPTURE_UNSUPPORTED,
                    SLUICE_ERROR_INVALID_ARGUMENT,
                    SLUICE_ERROR_WRONG_DEVICE,
                ]
                .contains(&c),
                "alloc of {n} bytes gave {c}"
            );
        }
    }

    fn op_register_host(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let n = (s.u16() as usize).max(s.u8() as usize % 2);
        let mut mem = vec![0u8; n.max(1)];
        let (ptr, len) = match s.u8() % 8 {
            0 => (std::ptr::null_mut(), n),
            1 => (mem.as_mut_ptr(), 0),
            2 => (mem.as_mut_ptr(), usize::MAX),
            _ => (mem.as_mut_ptr(), n.max(1)),
        };
        let mut b = bu(0);
        let p = Self::out(s, &mut b);
        if self.chk(
            "buffer_register_host",
            sluice_buffer_register_host(dev(d), ptr as *mut c_void, len, p),
        ) == 0
        {
            self.new_buffer(b.bits, len);
        }
        // Kept to the end of the run: graphs may still use it after the free.
        self.host_mem.push(mem);
    }

    fn op_wrap_device(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let n = 1 + s.u16() as usize;
        let mem = Box::new(vec![0u8; n]);
        let addr = mem.as_ptr() as u64;
        let (ptr, len) = match s.u8() % 8 {
            0 => (0, n),
            1 => (addr, 0),
            2 => (addr, usize::MAX - s.u8() as usize),
            _ => (addr, 1 + s.u32() as usize % n),
        };
        let with_release = s.likely();
        if !with_release {
            // Nobody can tell when sluice is done with it: wrap process-static memory.
            static MEM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            let base = *MEM
                .get_or_init(|| Box::leak(vec![0u8; 1 << 16].into_boxed_slice()).as_ptr() as usize);
            let len = if len == n { 1 + len % (1 << 16) } else { len };
            let ptr = if ptr == 0 { 0 } else { base as u64 };
            let mut b = bu(0);
            let p = Self::out(s, &mut b);
            let c = self.chk(
                "buffer_wrap_device",
                sluice_buffer_wrap_device(dev(d), ptr, len, None, std::ptr::null_mut(), p),
            );
            if c == 0 {
                self.new_buffer(b.bits, len);
            }
            return;
        }
        let ud = Box::into_raw(mem) as *mut c_void;
        let mut b = bu(0);
        let p = Self::out(s, &mut b);
        let rel: sluice_release_fn = Some(release_fn);
        let c = self.chk(
            "buffer_wrap_device",
            sluice_buffer_wrap_device(dev(d), ptr, len, rel, ud, p),
        );
        if c == 0 {
            self.new_buffer(b.bits, len);
            REL_MADE.fetch_add(1, SeqCst);
            return;
        }
        // On error the caller still owns the memory.
        // SAFETY: ud is the box made above, not released on error by contract.
        drop(unsafe { Box::from_raw(ud as *mut Vec<u8>) });
    }

    fn op_buffer_query(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        if s.bool() {
            let mut i: sluice_buffer_info_t = zeroed();
            let p = Self::out(s, &mut i);
            if self.chk("buffer_info", sluice_buffer_info(bu(b), p)) == 0
                && self.is_live(K::Buffer, b)
            {
                assert!((1..=4).contains(&i.kind), "buffer kind {}", i.kind);
                assert_eq!(i.size as usize, self.size_of(b), "buffer size");
            }
        } else {
            let mut d: sluice_tensor_desc_t = zeroed();
            let p = Self::out(s, &mut d);
            self.chk("buffer_tensor", sluice_buffer_tensor(bu(b), p));
        }
    }

    fn op_buffer_sync(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        let mut y = sy(0);
        let p = Self::out(s, &mut y);
        if self.chk("buffer_sync", sluice_buffer_sync(bu(b), p)) == 0 {
            self.add(K::Sync, y.bits);
        }
    }

    fn op_copy(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (d, x) = (self.pick(s, K::Buffer), self.pick(s, K::Buffer));
        let (dn, xn) = (self.size_of(d), self.size_of(x));
        let doff = self.within(s, dn);
        let xoff = self.within(s, xn);
        let len = self.within(s, dn.min(xn));
        self.chk(
            "stream_copy",
            sluice_stream_copy(st(b), bu(d), doff, bu(x), xoff, len),
        );
    }

    fn op_copy_host(&mut self, s: &mut Src, from: bool) {
        let b = self.pick(s, K::Stream);
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let want = self.within(s, n);
        let (ptr, len) = self.host_range(s, want);
        if from {
            self.chk(
                "stream_copy_from_host",
                sluice_stream_copy_from_host(st(b), bu(x), off, ptr as *const c_void, len),
            );
        } else {
            self.chk(
                "stream_copy_to_host",
                sluice_stream_copy_to_host(st(b), ptr as *mut c_void, bu(x), off, len),
            );
        }
    }

    fn op_memset(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let len = self.within(s, n);
        let v = s.u8();
        self.chk(
            "stream_memset",
            sluice_stream_memset(st(b), bu(x), off, v, len),
        );
    }

    fn op_sync_query(&mut self, s: &mut Src) {
        let y = self.pick(s, K::Sync);
        match s.u8() % 3 {
            0 => {
                self.chk("sync_wait_read", sluice_sync_wait_read(sy(y)));
            }
            1 => {
                self.chk("sync_wait_write", sluice_sync_wait_write(sy(y)));
            }
            _ => {
                let mut i: sluice_sync_info_t = zeroed();
                let p = Self::out(s, &mut i);
                if self.chk("sync_info", sluice_sync_info(sy(y), p)) == 0 {
                    assert!(i.has_writer <= 1, "has_writer {}", i.has_writer);
                }
            }
        }
    }

    fn op_op_begin(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (r, nr, rnull) = self.syncs(s);
        let (w, nw, wnull) = self.syncs(s);
        let mut o = op(0);
        let p = Self::out(s, &mut o);
        if self.chk(
            "op_begin",
            sluice_op_begin(
                st(b),
                Self::ptr_or_null(&r, rnull),
                nr,
                Self::ptr_or_null(&w, wnull),
                nw,
                p,
            ),
        ) == 0
        {
            self.add(K::Op, o.bits);
        }
    }

    fn op_host_func(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (r, nr, rnull) = self.syncs(s);
        let (w, nw, wnull) = self.syncs(s);
        let rc: i32 = if s.u8() % 16 == 0 { 9 } else { 0 };
        let with_free = s.likely();
        let cb: sluice_host_fn = if s.u8() % 24 == 0 {
            None
        } else {
            Some(host_cb)
        };
        // Without a free function nobody can tell when the callback is done with its
        // data, so it gets a static one.
        static RCS: [i32; 2] = [0, 9];
        let ud = if with_free {
            CB_MADE.fetch_add(1, SeqCst);
            Box::into_raw(Box::new(rc)) as *mut c_void
        } else {
            &RCS[(rc != 0) as usize] as *const i32 as *mut c_void
        };
        let free: sluice_free_fn = if with_free { Some(host_free) } else { None };
        self.chk(
            "stream_launch_host_func",
            sluice_stream_launch_host_func(
                st(b),
                cb,
                ud,
                free,
                Self::ptr_or_null(&r, rnull),
                nr,
                Self::ptr_or_null(&w, wnull),
                nw,
            ),
        );
    }

    fn op_module(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        match s.u8() % 6 {
            0 => {
                let n = (s.u8() % 32) as usize;
                let img = s.bytes(n);
                let (ptr, len) = if s.u8() % 8 == 0 {
                    (std::ptr::null(), img.len())
                } else {
                    (img.as_ptr(), img.len())
                };
                let mut m = mo(0);
                let p = Self::out(s, &mut m);
                if self.chk(
                    "module_load",
                    sluice_module_load(dev(d), ptr as *const c_void, len, p),
                ) == 0
                {
                    self.add(K::Module, m.bits);
                }
            }
            1 => {
                let src = c"extern \"C\" __global__ void k(int *p) { *p = 1; }";
                let opt = [c"-default-device".as_ptr()];
                let nopt = (s.u8() % 2) as usize;
                let mut m = mo(0);
                let p = Self::out(s, &mut m);
                let srcp = if s.u8() % 8 == 0 {
                    std::ptr::null()
                } else {
                    src.as_ptr()
                };
                if self.chk(
                    "module_compile",
                    sluice_module_compile(dev(d), srcp, std::ptr::null(), opt.as_ptr(), nopt, p),
                ) == 0
                {
                    self.add(K::Module, m.bits);
                }
            }
            2 => {
                let m = self.pick(s, K::Module);
                let name = if s.bool() {
                    c"k".as_ptr()
                } else {
                    c"".as_ptr()
                };
                let mut f = fu(0);
                let p = Self::out(s, &mut f);
                if self.chk(
                    "module_get_function",
                    sluice_module_get_function(mo(m), name, p),
                ) == 0
                {
                    self.add(K::Function, f.bits);
                }
            }
            3 => {
                let m = self.pick(s, K::Module);
                if self.chk("module_unload", sluice_module_unload(mo(m))) == 0 {
                    self.kill(K::Module, m);
                }
            }
            4 => {
                let f = self.pick(s, K::Function);
                if self.chk("function_destroy", sluice_function_destroy(fu(f))) == 0 {
                    self.kill(K::Function, f);
                }
            }
            _ => {
                let b = self.pick(s, K::Stream);
                let f = self.pick(s, K::Function);
                let dims = sluice_launch_dims_t {
                    grid: [s.u8() as u32 % 3, 1, 1],
                    block: [s.u8() as u32 % 3, 1, 1],
                    shared_mem_bytes: 0,
                };
                let dp = if s.u8() % 8 == 0 {
                    std::ptr::null()
                } else {
                    &dims as *const _
                };
                let (r, nr, rnull) = self.syncs(s);
                self.chk(
                    "stream_launch",
                    sluice_stream_launch(
                        st(b),
                        fu(f),
                        dp,
                        std::ptr::null_mut(),
                        0,
                        Self::ptr_or_null(&r, rnull),
                        nr,
                        std::ptr::null(),
                        0,
                    ),
                );
            }
        }
    }

    fn op_prefetcher_create(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let mut cfg: sluice_prefetcher_config_t = zeroed();
        cfg.depth = if s.likely() {
            (s.u8() % 4) as u32
        } else {
            s.u32() % 80
        };
        cfg.segments = if s.likely() {
            1 + (s.u8() % 3) as u32
        } else {
            (s.u8() % 10) as u32
        };
        for i in 0..8 {
            cfg.capacity[i] = match s.u8() % 16 {
                0 => 0,
                1 => [HUGE, usize::MAX, 1 << 62][s.u8() as usize % 3],
                _ => 1 + s.u16() as usize % 4096,
            };
        }
        let pull = s.u8() % 3 == 0;
        let fc = Box::new(FillCfg {
            end_after: (s.u8() % 8) as u64,
            fail_at: (s.u8() % 16) as u64,
            over: s.u8() % 16 == 0,
            n: AtomicU64::new(0),
        });
        if pull {
            cfg.fill = Some(fill_fn);
            cfg.user_data = &*fc as *const FillCfg as *mut c_void;
            cfg.producer_threads = (s.u8() % 3) as u32;
        }
        let mut p = pf(0);
        let out = Self::out(s, &mut p);
        let cp = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            &cfg as *const _
        };
        if self.chk(
            "prefetcher_create",
            sluice_prefetcher_create(dev(d), cp, out),
        ) == 0
        {
            self.add(K::Prefetcher, p.bits);
            self.fill_cfgs.push((p.bits, fc));
        }
    }

    fn destroy_prefetcher(&mut self, p: u64) -> u32 {
        // A taken fill must be given back first, or the destroy waits for it.
        let mine: Vec<_> = self
            .fills
            .iter()
            .filter(|f| f.0 == p)
            .map(|f| dup(&f.1))
            .collect();
        for f in mine {
            self.chk("prefetcher_cancel", sluice_prefetcher_cancel(pf(p), &f));
        }
        self.fills.retain(|f| f.0 != p);
        let c = self.chk("prefetcher_destroy", sluice_prefetcher_destroy(pf(p)));
        if c == 0 {
            self.kill(K::Prefetcher, p);
            self.fill_cfgs.retain(|f| f.0 != p);
        }
        c
    }

    fn op_prefetcher_destroy(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        self.destroy_prefetcher(p);
    }

    fn timeout(s: &mut Src) -> u32 {
        (s.u8() % 3) as u32
    }

    fn op_prefetcher_push(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        let n = (s.u8() % 10) as u32;
        let mut segs = Vec::new();
        for _ in 0..n {
            let want = if s.likely() {
                s.u16() as usize % 4097
            } else {
                self.size(s)
            };
            let (ptr, len) = self.host_range(s, want);
            segs.push(sluice_prefetch_segment_t {
                ptr: ptr as *const c_void,
                len,
            });
        }
        let mut seq = 0u64;
        let sp = if s.bool() {
            std::ptr::null_mut()
        } else {
            &mut seq as *mut u64
        };
        let segp = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            segs.as_ptr()
        };
        let t = Self::timeout(s);
        self.chk(
            "prefetcher_push",
            sluice_prefetcher_push(pf(p), segp, n, t, sp),
        );
    }

    fn op_prefetcher_acquire(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        if s.u8() % 3 != 0 || self.fills.is_empty() {
            let mut f: sluice_prefetch_fill_t = zeroed();
            let o = Self::out(s, &mut f);
            let t = Self::timeout(s);
            if self.chk("prefetcher_acquire", sluice_prefetcher_acquire(pf(p), t, o)) == 0 {
                assert!(f.segments as usize <= 8 && f.token != 0, "bad fill");
                self.fills.push((p, f));
            }
            return;
        }
        let i = s.u8() as usize % self.fills.len();
        let (owner, mut f) = (self.fills[i].0, dup(&self.fills[i].1));
        for j in 0..(f.segments as usize).min(8) {
            f.len[j] = match s.u8() % 8 {
                0 => f.capacity[j] + 1,
                1 => usize::MAX,
                _ => s.u16() as usize % (f.capacity[j] + 1),
            };
        }
        let target = if s.likely() { owner } else { p };
        if s.u8() % 8 == 0 {
            f.token = s.u64();
        }
        let c = if s.bool() {
            self.chk(
                "prefetcher_submit",
                sluice_prefetcher_submit(pf(target), &f),
            )
        } else {
            self.chk(
                "prefetcher_cancel",
                sluice_prefetcher_cancel(pf(target), &f),
            )
        };
        // The fill is used up when the call reached it: forget it then.
        if target == owner && f.token == self.fills[i].1.token && c != SLUICE_ERROR_NULL_ARGUMENT {
            self.fills.swap_remove(i);
        }
    }

    fn op_prefetcher_next(&mut self, s: &mut Src) {
        let p = self.pick(s, K::Prefetcher);
        let b = self.pick(s, K::Stream);
        let t = Self::timeout(s);
        let mut view: sluice_batch_view_t = zeroed();
        if s.bool() {
            let mut bt = ba(0);
            let o = Self::out(s, &mut bt);
            let vp = Self::out(s, &mut view);
            if self.chk(
                "prefetcher_next",
                sluice_prefetcher_next(pf(p), st(b), t, o, vp),
            ) == 0
            {
                self.add(K::Batch, bt.bits);
            }
        } else {
            let n = (s.u8() % 10) as u32;
            let dst: Vec<_> = (0..n).map(|_| bu(self.pick(s, K::Buffer))).collect();
            let dp = if s.u8() % 16 == 0 {
                std::ptr::null()
            } else {
                dst.as_ptr()
            };
            let vp = Self::out(s, &mut view);
            self.chk(
                "prefetcher_next_into",
                sluice_prefetcher_next_into(pf(p), st(b), dp, n, t, vp),
            );
        }
    }

    fn op_prefetcher_misc(&mut self, s: &mut Src) {
        match s.u8() % 3 {
            0 => {
                let b = self.pick(s, K::Batch);
                self.chk("batch_release", sluice_batch_release(ba(b)));
                self.kill(K::Batch, b);
            }
            1 => {
                let p = self.pick(s, K::Prefetcher);
                self.chk(
                    "prefetcher_close_input",
                    sluice_prefetcher_close_input(pf(p)),
                );
            }
            _ => {
                let p = self.pick(s, K::Prefetcher);
                let mut x: sluice_prefetcher_stats_t = zeroed();
                let o = Self::out(s, &mut x);
                self.chk("prefetcher_stats", sluice_prefetcher_stats(pf(p), o));
            }
        }
    }

    fn op_rng_create(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let seed = s.u64();
        let n = match s.u8() % 8 {
            0 => 0,
            1 => [HUGE, usize::MAX, 1 << 58, usize::MAX / 64 + 1][s.u8() as usize % 4],
            _ => 1 + s.u16() as usize % 2048,
        };
        let mut r = rn(0);
        let p = Self::out(s, &mut r);
        if self.chk("rng_create", sluice_rng_create(st(b), seed, n, p)) == 0 {
            self.add(K::Rng, r.bits);
        }
    }

    fn op_rng_misc(&mut self, s: &mut Src) {
        let r = self.pick(s, K::Rng);
        match s.u8() % 3 {
            0 => {
                if self.chk("rng_destroy", sluice_rng_destroy(rn(r))) == 0 {
                    self.kill(K::Rng, r);
                }
            }
            1 => {
                let (mut n, mut seed) = (0usize, 0u64);
                let (pn, ps) = (Self::out(s, &mut n), Self::out(s, &mut seed));
                self.chk("rng_info", sluice_rng_info(rn(r), pn, ps));
            }
            _ => {
                let mut b = bu(0);
                let p = Self::out(s, &mut b);
                if self.chk("rng_states", sluice_rng_states(rn(r), p)) == 0 {
                    let mut n = 0usize;
                    check_err(
                        "rng_info",
                        sluice_rng_info(rn(r), &mut n, std::ptr::null_mut()),
                    );
                    self.new_buffer(b.bits, n * 64);
                }
            }
        }
    }

    fn op_rng_generate(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let r = self.pick(s, K::Rng);
        let dist = if s.likely() {
            (s.u8() % 4) as u32
        } else {
            s.u32()
        };
        let layout = if s.likely() {
            (s.u8() % 3) as u32
        } else {
            s.u32()
        };
        let x = self.pick(s, K::Buffer);
        let n = self.size_of(x);
        let off = self.within(s, n);
        let count = if s.likely() {
            s.u8() as usize % 16
        } else {
            self.size(s)
        };
        self.chk(
            "rng_generate",
            sluice_rng_generate(st(b), rn(r), dist, layout, bu(x), off, count),
        );
    }

    fn op_ckpt(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            0 => {
                let (b, r) = (self.pick(s, K::Stream), self.pick(s, K::Rng));
                let mut c = ck(0);
                let p = Self::out(s, &mut c);
                if self.chk(
                    "rng_checkpoint_create",
                    sluice_rng_checkpoint_create(st(b), rn(r), p),
                ) == 0
                {
                    self.add(K::Ckpt, c.bits);
                }
            }
            1 => {
                let c = self.pick(s, K::Ckpt);
                if self.chk(
                    "rng_checkpoint_destroy",
                    sluice_rng_checkpoint_destroy(ck(c)),
                ) == 0
                {
                    self.kill(K::Ckpt, c);
                }
            }
            2 => {
                let c = self.pick(s, K::Ckpt);
                let (mut n, mut seed) = (0usize, 0u64);
                let (pn, ps) = (Self::out(s, &mut n), Self::out(s, &mut seed));
                self.chk(
                    "rng_checkpoint_info",
                    sluice_rng_checkpoint_info(ck(c), pn, ps),
                );
            }
            _ => {
                let (b, r, c) = (
                    self.pick(s, K::Stream),
                    self.pick(s, K::Rng),
                    self.pick(s, K::Ckpt),
                );
                if s.bool() {
                    self.chk("rng_save", sluice_rng_save(st(b), rn(r), ck(c)));
                } else {
                    self.chk("rng_restore", sluice_rng_restore(st(b), rn(r), ck(c)));
                }
            }
        }
    }

    fn op_ckpt_serialize(&mut self, s: &mut Src) {
        let c = self.pick(s, K::Ckpt);
        let mut need = 0usize;
        let lp = Self::out(s, &mut need);
        match s.u8() % 3 {
            0 => {
                self.chk(
                    "rng_checkpoint_serialize",
                    sluice_rng_checkpoint_serialize(ck(c), std::ptr::null_mut(), 0, lp),
                );
            }
            _ => {
                let cap = if s.likely() {
                    SCRATCH
                } else {
                    s.u16() as usize
                };
                let out = self.scratch.as_mut_ptr();
                let code = self.chk(
                    "rng_checkpoint_serialize",
                    sluice_rng_checkpoint_serialize(ck(c), out, cap, lp),
                );
                if code == 0 && !lp.is_null() {
                    assert!(need <= cap, "serialize wrote {need} into {cap}");
                    self.serialized = self.scratch[..need].to_vec();
                }
            }
        }
    }

    fn op_ckpt_deserialize(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let mut bytes = match s.u8() % 4 {
            0 => {
                let n = s.u8() as usize;
                s.bytes(n)
            }
            _ => self.serialized.clone(),
        };
        // Mutate: flip bytes, truncate, or extend.
        for _ in 0..(s.u8() % 4) {
            match s.u8() % 3 {
                0 if !bytes.is_empty() => {
                    let i = s.u16() as usize % bytes.len();
                    bytes[i] ^= s.u8() | 1;
                }
                1 if !bytes.is_empty() => {
                    let n = s.u16() as usize % bytes.len();
                    bytes.truncate(n);
                }
                _ => bytes.push(s.u8()),
            }
        }
        let ptr = if s.u8() % 16 == 0 {
            std::ptr::null()
        } else {
            bytes.as_ptr()
        };
        let mut c = ck(0);
        let p = Self::out(s, &mut c);
        if self.chk(
            "rng_checkpoint_deserialize",
            sluice_rng_checkpoint_deserialize(dev(d), ptr, bytes.len(), p),
        ) == 0
        {
            self.add(K::Ckpt, c.bits);
        }
    }

    fn op_to_dlpack(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Buffer);
        let consumer = if s.bool() { 0 } else { self.pick(s, K::Stream) };
        let format = if s.likely() {
            1 + (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        let shape = [s.u8() as i64 - 2, s.u8() as i64, s.u8() as i64 % 4];
        let desc = sluice_tensor_desc_t {
            dtype_code: s.u8() % 8,
            dtype_bits: [8, 16, 32, 64, 1, 4, 0, 128][s.u8() as usize % 8],
            dtype_lanes: (s.u8() % 3) as u16,
            ndim: (s.u8() % 5) as i32 - 1,
            shape: if s.u8() % 8 == 0 {
                std::ptr::null()
            } else {
                shape.as_ptr()
            },
            read_only: 0,
        };
        let dp = if s.bool() {
            std::ptr::null()
        } else {
            &desc as *const _
        };
        let dp = if desc.ndim > 3 { std::ptr::null() } else { dp };
        let mut t: *mut c_void = std::ptr::null_mut();
        let tp = Self::out(s, &mut t);
        if self.chk(
            "buffer_to_dlpack",
            sluice_buffer_to_dlpack(bu(b), st(consumer), format, dp, tp),
        ) == 0
        {
            assert!(!t.is_null(), "to_dlpack gave NULL");
            self.exported.push(Exported { ptr: t, format });
        }
    }

    fn delete_exported(e: Exported) {
        // SAFETY: a tensor sluice exported in this format, deleted exactly once.
        unsafe {
            if e.format == SLUICE_DLPACK_VERSIONED {
                let t = e.ptr as *mut DLManagedTensorVersioned;
                ((*t).deleter.expect("deleter"))(t);
            } else {
                let t = e.ptr as *mut DLManagedTensor;
                ((*t).deleter.expect("deleter"))(t);
            }
        }
    }

    fn op_dlpack_delete(&mut self, s: &mut Src) {
        if !self.exported.is_empty() {
            let i = s.u8() as usize % self.exported.len();
            Self::delete_exported(self.exported.swap_remove(i));
        } else if !self.own_tensors.is_empty() {
            let i = s.u8() as usize % self.own_tensors.len();
            let t = self.own_tensors.swap_remove(i);
            // SAFETY: still ours.
            unsafe { free_own(t) };
        }
    }

    fn make_own_tensor(&mut self, s: &mut Src, versioned: bool) -> *mut c_void {
        let n = 1 + s.u16() as usize % 4096;
        // Room for n elements of up to 255 bits: the tensor never claims more than it has.
        let mut t = Box::new(OwnTensor {
            v: zeroed(),
            u: zeroed(),
            shape: [n as i64, 1, 1, 1],
            data: vec![0u8; n * 32],
        });
        match s.u8() % 16 {
            0 => t.shape[0] = -1 - s.u8() as i64,
            1 => t.shape = [i64::MAX, i64::MAX, 2, 1],
            2 => t.shape[1] = 0,
            _ => {}
        }
        let mut ndim = if s.likely() { 1 } else { s.u8() as i32 % 6 - 1 };
        if t.shape[0] == i64::MAX {
            // Only as an overflow: one such dimension alone would claim memory we lack.
            ndim = ndim.max(2);
        }
        let dl = DLTensor {
            data: if s.u8() % 16 == 0 {
                std::ptr::null_mut()
            } else {
                t.data.as_mut_ptr() as *mut c_void
            },
            device: DLDevice {
                device_type: if s.likely() { 1 } else { s.u8() as i32 % 16 },
                device_id: if s.likely() { 0 } else { s.u8() as i32 },
            },
            ndim: ndim.min(4),
            dtype: DLDataType {
                code: 1,
                bits: if s.likely() { 8 } else { s.u8() },
                lanes: 1,
            },
            shape: if s.u8() % 16 == 0 {
                std::ptr::null_mut()
            } else {
                t.shape.as_mut_ptr()
            },
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let raw = Box::into_raw(t);
        // SAFETY: raw is a fresh box; the tensors point into it.
        unsafe {
            if versioned {
                (*raw).v = DLManagedTensorVersioned {
                    version: DLPackVersion {
                        major: if s.likely() { 1 } else { s.u8() as u32 },
                        minor: 1,
                    },
                    manager_ctx: raw as *mut c_void,
                    deleter: Some(own_deleter_v),
                    flags: 0,
                    dl_tensor: dl,
                };
                &mut (*raw).v as *mut _ as *mut c_void
            } else {
                (*raw).u = DLManagedTensor {
                    dl_tensor: dl,
                    manager_ctx: raw as *mut c_void,
                    deleter: Some(own_deleter_u),
                };
                &mut (*raw).u as *mut _ as *mut c_void
            }
        }
    }

    fn op_from_dlpack(&mut self, s: &mut Src) {
        let d = self.pick(s, K::Device);
        let ready = if s.bool() { 0 } else { self.pick(s, K::Stream) };
        let mut b = bu(0);
        // A tensor sluice exported (round trip), or one of our own.
        if !self.exported.is_empty() && s.bool() {
            let i = s.u8() as usize % self.exported.len();
            let (ptr, format) = (self.exported[i].ptr, self.exported[i].format);
            let p = Self::out(s, &mut b);
            if self.chk(
                "buffer_from_dlpack",
                sluice_buffer_from_dlpack(dev(d), ptr, format, st(ready), p),
            ) == 0
            {
                self.exported.swap_remove(i);
                let mut info: sluice_buffer_info_t = zeroed();
                check_err("buffer_info", sluice_buffer_info(b, &mut info));
                self.new_buffer(b.bits, info.size as usize);
            }
            return;
        }
        let versioned = s.bool();
        let format = if s.likely() {
            if versioned {
                SLUICE_DLPACK_VERSIONED
            } else {
                SLUICE_DLPACK_UNVERSIONED
            }
        } else {
            s.u32()
        };
        let t = self.make_own_tensor(s, versioned);
        DL_MADE.fetch_add(1, SeqCst);
        let p = Self::out(s, &mut b);
        let tp = if s.u8() % 16 == 0 {
            std::ptr::null_mut()
        } else {
            t
        };
        if self.chk(
            "buffer_from_dlpack",
            sluice_buffer_from_dlpack(dev(d), tp, format, st(ready), p),
        ) == 0
        {
            let mut info: sluice_buffer_info_t = zeroed();
            check_err("buffer_info", sluice_buffer_info(b, &mut info));
            self.new_buffer(b.bits, info.size as usize);
        } else {
            // Still ours on error.
            let ot = if versioned {
                // SAFETY: t is the `v` field of an OwnTensor.
                unsafe { (*(t as *mut DLManagedTensorVersioned)).manager_ctx as *mut OwnTensor }
            } else {
                // SAFETY: t is the `u` field of an OwnTensor.
                unsafe { (*(t as *mut DLManagedTensor)).manager_ctx as *mut OwnTensor }
            };
            self.own_tensors.push(ot);
        }
    }

    fn op_log(&mut self, s: &mut Src) {
        if s.bool() {
            let lvl = if s.likely() {
                (s.u8() % 5) as u32
            } else {
                s.u32()
            };
            self.chk("log_set_level", sluice_log_set_level(lvl));
        } else {
            // NULL would log to stderr; keep a callback (the same one) instead.
            self.chk(
                "log_set_callback",
                sluice_log_set_callback(Some(log_cb), s.u64() as *mut c_void),
            );
        }
    }

    fn op_engine(&mut self, s: &mut Src) {
        let m = if s.likely() {
            (s.u8() % 2) as u32
        } else {
            s.u32()
        };
        self.chk("engine_set_mode", sluice_engine_set_mode(m));
        assert!(sluice_engine_mode() <= 1);
    }

    fn op_trace(&mut self, s: &mut Src) {
        match s.u8() % 4 {
            0 => {
                let path = match s.u8() % 4 {
                    0 => None,
                    1 => Some(std::ffi::CString::new("/nonexistent-dir/t.json").unwrap()),
                    _ => Some(
                        std::ffi::CString::new(
                            self.tmp.join("trace.json").to_string_lossy().as_bytes(),
                        )
                        .unwrap(),
                    ),
                };
                let p = path.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
                self.chk("trace_start", sluice_trace_start(p));
            }
            1 => {
                self.chk("trace_flush", sluice_trace_flush());
            }
            _ => {
                self.chk("trace_stop", sluice_trace_stop());
            }
        }
    }

    fn op_misc(&mut self, s: &mut Src) {
        let code = s.u32() % 30;
        // SAFETY: static NUL-terminated strings.
        let name = unsafe { CStr::from_ptr(sluice_error_code_name(code)) };
        assert!(!name.to_bytes().is_empty());
        assert_eq!(sluice_error_code(std::ptr::null()), 0);
        assert_eq!(sluice_error_driver_code(std::ptr::null()), 0);
        // SAFETY: "" for NULL.
        assert!(
            unsafe { CStr::from_ptr(sluice_error_message(std::ptr::null())) }
                .to_bytes()
                .is_empty()
        );
        sluice_error_free(std::ptr::null_mut());
        // SAFETY: static.
        let v = unsafe { CStr::from_ptr(sluice_version()) };
        assert_eq!(v.to_bytes(), b"0.1.1");
        assert_eq!(sluice_abi_version(), SLUICE_ABI_VERSION);
        let _ = sluice_live_handles();
    }

    #[allow(deprecated)]
    fn op_deprecated(&mut self, s: &mut Src) {
        let b = self.pick(s, K::Stream);
        let (d, x) = (self.pick(s, K::Buffer), self.pick(s, K::Buffer));
        let n = self.size_of(d);
        let off = self.within(s, n);
        let len = self.within(s, n);
        match s.u8() % 9 {
            0 => {
                self.chk("copy", sluice_copy(st(b), bu(d), off, bu(x), 0, len));
            }
            1 => {
                let (p, l) = self.host_range(s, len);
                self.chk(
                    "copy_from_host",
                    sluice_copy_from_host(st(b), bu(d), off, p as *const c_void, l),
                );
            }
            2 => {
                let (p, l) = self.host_range(s, len);
                self.chk(
                    "copy_to_host",
                    sluice_copy_to_host(st(b), p as *mut c_void, bu(d), off, l),
                );
            }
            3 => {
                self.chk("memset", sluice_memset(st(b), bu(d), off, 1, len));
            }
            4 => {
                let mut y = sy(0);
                if self.chk("sync_new", sluice_sync_new(&mut y)) == 0 {
                    self.add(K::Sync, y.bits);
                }
            }
            5 => {
                let dd = self.pick(s, K::Device);
                let mut c = gc(0);
                if self.chk("graph_cache_new", sluice_graph_cache_new(dev(dd), &mut c)) == 0 {
                    self.add(K::Cache, c.bits);
                }
            }
            6 => {
                let on = s.likely();
                self.chk("graphs_set_enabled", sluice_graphs_set_enabled(on));
            }
            7 => {
                let m = self.pick(s, K::Module);
                let mut f = fu(0);
                if self.chk(
                    "module_function",
                    sluice_module_function(mo(m), c"k".as_ptr(), &mut f),
                ) == 0
                {
                    self.add(K::Function, f.bits);
                }
            }
            _ => {
                let dims = sluice_launch_dims_t {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem_bytes: 0,
                };
                let f = self.pick(s, K::Function);
                self.chk(
                    "launch",
                    sluice_launch(
                        st(b),
                        fu(f),
                        &dims,
                        std::ptr::null_mut(),
                        0,
                        std::ptr::null(),
                        0,
                        std::ptr::null(),
                        0,
                    ),
                );
                let ud = Box::into_raw(Box::new(0i32)) as *mut c_void;
                CB_MADE.fetch_add(1, SeqCst);
                self.chk(
                    "stream_host_callback",
                    sluice_stream_host_callback(
                        st(b),
                        Some(host_cb),
                        ud,
                        Some(host_free),
                        std::ptr::null(),
                        0,
                        std::ptr::null(),
                        0,
                    ),
                );
            }
        }
    }

    /// Destroys everything, restores the process-wide settings, checks the balances.
    pub fn teardown(&mut self) {
        for o in std::mem::take(&mut self.live[K::Op as usize]) {
            check_err("op_end", sluice_op_end(op(o)));
        }
        for b in std::mem::take(&mut self.capturing) {
            let mut g = gr(0);
            if check_err("graph_capture_end", sluice_graph_capture_end(st(b), &mut g)) == 0 {
                self.add(K::Graph, g.bits);
            }
        }
        for (p, f) in std::mem::take(&mut self.fills) {
            check_err("prefetcher_cancel", sluice_prefetcher_cancel(pf(p), &f));
        }
        for b in std::mem::take(&mut self.live[K::Batch as usize]) {
            check_err("batch_release", sluice_batch_release(ba(b)));
        }
        for e in std::mem::take(&mut self.exported) {
            Self::delete_exported(e);
        }
        for t in std::mem::take(&mut self.own_tensors) {
            // SAFETY: still ours.
            unsafe { free_own(t) };
        }
        // Streams stay until the end so that the frees have their home streams.
        let order = [
            K::Exec,
            K::Graph,
            K::Cache,
            K::Event,
            K::Function,
            K::Module,
            K::Ckpt,
            K::Rng,
            K::Prefetcher,
            K::Sync,
            K::Buffer,
            K::Stream,
        ];
        for k in order {
            for b in std::mem::take(&mut self.live[k as usize]) {
                let e = match k {
                    K::Exec => sluice_graph_exec_destroy(ex(b)),
                    K::Graph => sluice_graph_destroy(gr(b)),
                    K::Cache => sluice_graph_cache_destroy(gc(b)),
                    K::Event => sluice_event_destroy(ev(b)),
                    K::Function => sluice_function_destroy(fu(b)),
                    K::Module => sluice_module_unload(mo(b)),
                    K::Ckpt => sluice_rng_checkpoint_destroy(ck(b)),
                    K::Rng => sluice_rng_destroy(rn(b)),
                    K::Prefetcher => {
                        self.live[k as usize].push(b);
                        let c = self.destroy_prefetcher(b);
                        assert_eq!(c, 0, "prefetcher_destroy at teardown");
                        continue;
                    }
                    K::Sync => sluice_sync_destroy(sy(b)),
                    K::Buffer => sluice_buffer_free(bu(b)),
                    _ => sluice_stream_destroy(st(b)),
                };
                assert_eq!(
                    check_err("teardown destroy", e),
                    0,
                    "{k:?} destroy at teardown"
                );
            }
        }
        // Wait for the devices, then close them.
        for d in std::mem::take(&mut self.live[K::Device as usize]) {
            let c = check_err("device_wait_all", sluice_device_wait_all(dev(d)));
            assert!(
                c == 0 || c == SLUICE_ERROR_CALLBACK_FAILED || c == SLUICE_ERROR_DEVICE_FAULT,
                "wait_all {c}"
            );
            assert_eq!(check_err("device_close", sluice_device_close(dev(d))), 0);
        }
        check_err("trace_stop", sluice_trace_stop());
        check_err("log_set_level", sluice_log_set_level(SLUICE_LOG_OFF));
        check_err(
            "engine_set_mode",
            sluice_engine_set_mode(SLUICE_ENGINE_ASYNC),
        );
        check_err(
            "graph_cache_set_enabled",
            sluice_graph_cache_set_enabled(true),
        );
        check_err("counters_set_enabled", sluice_counters_set_enabled(false));
        self.fill_cfgs.clear();
        assert_eq!(
            sluice_live_handles(),
            self.baseline,
            "live handles after destroying everything"
        );
        // Frees and releases may trail on library threads: wait a little for them.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let ok = CB_MADE.load(SeqCst) == CB_FREED.load(SeqCst)
                && REL_MADE.load(SeqCst) == REL_DONE.load(SeqCst)
                && DL_MADE.load(SeqCst) == DL_DONE.load(SeqCst);
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "unbalanced: callbacks {}/{} freed, releases {}/{}, dlpack {}/{}",
                CB_FREED.load(SeqCst),
                CB_MADE.load(SeqCst),
                REL_DONE.load(SeqCst),
                REL_MADE.load(SeqCst),
                DL_DONE.load(SeqCst),
                DL_MADE.load(SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.host_mem.clear();
        assert_eq!(BAD.load(SeqCst), 0, "a callback saw a bad error object");
    }
}
