//! Interop (issue 18): foreign device memory as buffers, DLPack import and export
//! with the stream exchange, and the launch's argument-count check. Default
//! backend: host in CI, cuda on the GPU.

mod common;
use common::{kit, kit_alone, waits};
use sluice::dlpack::{
    self, DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use sluice::memory::{BufferKind, Release};
use sluice::module::Module;
use sluice::ops;
use sluice::{BackendKind, Buffer, Device, ErrorCode, Stream};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;

/// A counter of release calls.
fn counter() -> (Arc<AtomicUsize>, Release) {
    let n = Arc::new(AtomicUsize::new(0));
    let m = n.clone();
    (
        n,
        Release::new(move || {
            m.fetch_add(1, Ordering::SeqCst);
        }),
    )
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A stream blocked by a host callback until `open` (or the guard's drop: a failed
/// assertion must not leave the callback blocking, on CUDA, the driver's one
/// callback thread and with it every other test's host work). Tests that gate run
/// alone (`kit_alone`): another test's module unload, which waits for the whole
/// device, would otherwise hold up the driver calls made before the gate opens.
struct Gate(Arc<AtomicBool>);

impl Gate {
    fn open(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// A tracked host callback on `s` that writes `b` and blocks its stream until the
/// returned gate opens, or fails after 20 s (so that a driver call that waits for the
/// whole device, as under compute-sanitizer, fails the test instead of hanging it).
fn gate(s: &Stream, b: &Buffer) -> Gate {
    let open = Arc::new(AtomicBool::new(false));
    let o = open.clone();
    ops::host_callback(
        s,
        move || {
            let end = Instant::now() + Duration::from_secs(20);
            while !o.load(Ordering::Acquire) {
                if Instant::now() > end {
                    return 99;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            0
        },
        &[],
        std::slice::from_ref(&b.sync),
    )
    .expect("gate");
    Gate(open)
}

fn read(s: &Stream, b: &Buffer) -> Vec<u8> {
    let mut out = vec![0u8; b.size];
    ops::copy_to_host(s, &mut out, b, 0).expect("copy to host");
    out
}

#[test]
fn wrapped_memory_is_a_buffer_for_copies_and_memsets() {
    let k = kit();
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&s, 4096).unwrap();
    s.synchronize().unwrap();
    let (released, rel) = counter();
    let f = Buffer::wrap_device(&k.dev, owner.addr, 4096, Some(rel), None, None).unwrap();
    assert_eq!(f.kind, BufferKind::Foreign);
    assert_eq!(f.addr, owner.addr);
    assert!(f.host_ptr().is_none());
    assert!(!Arc::ptr_eq(&f.sync, &owner.sync), "its own sync object");

    let data: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
    ops::copy_from_host(&s, &f, 0, &data).unwrap();
    ops::memset(&s, &f, 100, 0xAB, 50).unwrap();
    // A device-to-device copy out of it, on another stream: ordered by its sync object.
    let t = Stream::create(&k.dev, 0, 0).unwrap();
    let dst = Buffer::alloc(&t, 4096).unwrap();
    ops::copy(&t, &dst, 0, &f, 0, 4096).unwrap();
    let mut want = data.clone();
    want[100..150].fill(0xAB);
    assert_eq!(read(&t, &dst), want);
    // The owner sees the bytes too: it is the same memory.
    assert_eq!(read(&s, &owner), want);

    assert_eq!(released.load(Ordering::SeqCst), 0);
    drop(f);
    wait_until("the release", || released.load(Ordering::SeqCst) == 1);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(released.load(Ordering::SeqCst), 1, "exactly once");
}

#[test]
fn release_waits_for_outstanding_use_without_blocking_the_free() {
    let k = kit_alone(); // it gates a stream with a host callback
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&s, 1024).unwrap();
    s.synchronize().unwrap();
    let (released, rel) = counter();
    let f = Buffer::wrap_device(&k.dev, owner.addr, 1024, Some(rel), None, None).unwrap();
    let open = gate(&s, &f);
    ops::memset(&s, &f, 0, 3, 1024).unwrap();
    let t0 = Instant::now();
    drop(f);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "the free did not block on the gate"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        released.load(Ordering::SeqCst),
        0,
        "released while a use was outstanding"
    );
    open.open();
    wait_until("the release after the gate", || {
        released.load(Ordering::SeqCst) == 1
    });
    s.synchronize().unwrap();
    assert_eq!(read(&s, &owner), vec![3u8; 1024]);
    assert_eq!(released.load(Ordering::SeqCst), 1);
}

#[test]
fn release_is_not_called_when_wrapping_fails() {
    let k = kit();
    let (released, rel) = counter();
    let e = Buffer::wrap_device(&k.dev, 0, 16, Some(rel), None, None).unwrap_err();
    assert_eq!(e.code, ErrorCode::NullArgument);
    assert!(e.message.contains("device pointer is NULL"), "{e}");
    let (released2, rel2) = counter();
    let e = Buffer::wrap_device(&k.dev, 0x1000, 0, Some(rel2), None, None).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("size must be > 0"), "{e}");
    let (released3, rel3) = counter();
    let e = Buffer::wrap_device(&k.dev, u64::MAX - 4, 16, Some(rel3), None, None).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("wraps"), "{e}");
    std::thread::sleep(Duration::from_millis(20));
    for r in [released, released2, released3] {
        assert_eq!(r.load(Ordering::SeqCst), 0);
    }
}

#[test]
fn cuda_refuses_a_pointer_of_no_device_allocation() {
    let k = kit();
    if k.dev.kind() != BackendKind::Cuda {
        return; // host takes any address (documented)
    }
    let on_stack = [0u8; 64];
    let e =
        Buffer::wrap_device(&k.dev, on_stack.as_ptr() as u64, 64, None, None, None).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("cuPointerGetAttribute"), "{e}");
    // Past the end of a real allocation.
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&s, 1 << 20).unwrap();
    s.synchronize().unwrap();
    let e = Buffer::wrap_device(&k.dev, owner.addr, (1 << 20) + (4 << 20), None, None, None)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("past the end of its allocation"), "{e}");
}

/// A producer's tensor: a boxed `DLManagedTensorVersioned` over `mem`, whose
/// deleter counts its calls (`repr(C)`: the managed tensor comes first).
#[repr(C)]
struct Produced {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    deleted: Arc<AtomicUsize>,
}

unsafe extern "C" fn produced_deleter(p: *mut DLManagedTensorVersioned) {
    // SAFETY: `p` is the first field of a boxed Produced, deleted once.
    let b = unsafe { Box::from_raw(p.cast::<Produced>()) };
    b.deleted.fetch_add(1, Ordering::SeqCst);
}

fn produce(
    dev: &Device,
    addr: u64,
    shape: &[i64],
    dtype: DLDataType,
    strides: Option<&[i64]>,
) -> (*mut c_void, Arc<AtomicUsize>) {
    let deleted = Arc::new(AtomicUsize::new(0));
    let mut p = Box::new(Produced {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(produced_deleter),
            flags: 0,
            dl_tensor: DLTensor {
                data: addr as *mut c_void,
                device: DLDevice {
                    device_type: if dev.kind() == BackendKind::Cuda {
                        KDL_CUDA
                    } else {
                        KDL_CPU
                    },
                    device_id: dev.ordinal() as i32,
                },
                ndim: shape.len() as i32,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: shape.to_vec(),
        strides: strides.map(|s| s.to_vec()),
        deleted: deleted.clone(),
    });
    p.managed.dl_tensor.shape = p.shape.as_mut_ptr();
    if let Some(st) = p.strides.as_mut() {
        p.managed.dl_tensor.strides = st.as_mut_ptr();
    }
    (Box::into_raw(p).cast(), deleted)
}

const F32: DLDataType = DLDataType {
    code: 2,
    bits: 32,
    lanes: 1,
};

#[test]
fn dlpack_import_reads_shape_and_dtype_and_deletes_after_last_use() {
    let k = kit_alone(); // it gates a stream with a host callback
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&s, 2 * 3 * 4).unwrap();
    s.synchronize().unwrap();
    let (t, deleted) = produce(&k.dev, owner.addr, &[2, 3], F32, Some(&[3, 1]));
    let b = unsafe { dlpack::import(&k.dev, t, true, None) }.unwrap();
    assert_eq!(b.kind, BufferKind::Foreign);
    assert_eq!(b.size, 24);
    let d = b.tensor().unwrap();
    assert_eq!(&*d.shape, &[2, 3]);
    assert_eq!(d.dtype, F32);
    let vals: Vec<u8> = [1.5f32, 2.0, -3.0, 4.25, 0.0, 9.0]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let open = gate(&s, &b);
    ops::copy_from_host(&s, &b, 0, &vals).unwrap();
    drop(b);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(deleted.load(Ordering::SeqCst), 0, "deleted during a use");
    open.open();
    wait_until("the DLPack deleter", || deleted.load(Ordering::SeqCst) == 1);
    assert_eq!(read(&s, &owner), vals);
}

#[test]
fn dlpack_import_refuses_what_it_cannot_represent_and_keeps_the_tensor() {
    let k = kit();
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&s, 256).unwrap();
    s.synchronize().unwrap();
    let try_import = |t: *mut c_void| unsafe { dlpack::import(&k.dev, t, true, None) }.unwrap_err();
    type Mutate = Box<dyn Fn(*mut DLManagedTensorVersioned)>;
    let cases: Vec<(Mutate, ErrorCode, &str)> = vec![
        (Box::new(|_| {}), ErrorCode::InvalidArgument, "not compact"),
        (
            Box::new(|m| unsafe { (*m).version.major = 2 }),
            ErrorCode::Unsupported,
            "DLPack version 2.0 is not supported",
        ),
        (
            Box::new(|m| unsafe { (*m).dl_tensor.device.device_type = 8 }),
            ErrorCode::WrongDevice,
            "device type 8",
        ),
        (
            Box::new(|m| unsafe { (*m).dl_tensor.dtype.bits = 4 }),
            ErrorCode::InvalidArgument,
            "whole number of bytes",
        ),
        (
            Box::new(|m| unsafe { (*m).dl_tensor.ndim = -1 }),
            ErrorCode::InvalidArgument,
            "ndim -1",
        ),
        (
            Box::new(|m| unsafe { (*m).dl_tensor.data = std::ptr::null_mut() }),
            ErrorCode::NullArgument,
            "data is NULL",
        ),
    ];
    for (i, (mutate, code, msg)) in cases.into_iter().enumerate() {
        // Case 0 keeps the strides: transposed, so not compact.
        let strides: Option<&[i64]> = if i == 0 { Some(&[1, 4]) } else { None };
        let (t, deleted) = produce(&k.dev, owner.addr, &[4, 4], F32, strides);
        mutate(t.cast());
        let e = try_import(t);
        assert_eq!(e.code, code, "case {i}: {e}");
        assert!(e.message.contains(msg), "case {i}: {e}");
        assert_eq!(
            deleted.load(Ordering::SeqCst),
            0,
            "case {i}: the caller keeps it"
        );
        // SAFETY: still ours.
        unsafe { produced_deleter(t.cast()) };
        assert_eq!(deleted.load(Ordering::SeqCst), 1);
    }
    let (t, deleted) = produce(&k.dev, owner.addr, &[0, 4], F32, None);
    let e = try_import(t);
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("is empty"), "{e}");
    unsafe { produced_deleter(t.cast()) };
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}

#[test]
fn dlpack_export_round_trips_and_keeps_the_buffer_alive() {
    let k = kit();
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let b = Buffer::alloc(&s, 64).unwrap();
    let data: Vec<u8> = (0..64u8).collect();
    ops::copy_from_host(&s, &b, 0, &data).unwrap();
    let desc = dlpack::TensorDesc {
        dtype: DLDataType {
            code: 1,
            bits: 32,
            lanes: 1,
        },
        shape: Box::new([4, 4]),
        read_only: false,
    };
    let t = dlpack::export(&b, Some(&s), Some(desc), true).unwrap();
    {
        // SAFETY: what export returned.
        let m = unsafe { &*t.cast::<DLManagedTensorVersioned>() };
        assert_eq!((m.version.major, m.version.minor), (1, 1));
        assert_eq!(m.dl_tensor.ndim, 2);
        assert_eq!(m.dl_tensor.data as u64, b.addr);
        assert_eq!(m.dl_tensor.device, dlpack::device_of(&b));
        assert_eq!(
            m.dl_tensor.device.device_type,
            if k.dev.kind() == BackendKind::Cuda {
                KDL_CUDA
            } else {
                KDL_CPU
            }
        );
        assert_eq!(
            unsafe { std::slice::from_raw_parts(m.dl_tensor.shape, 2) },
            &[4, 4]
        );
        assert!(m.dl_tensor.strides.is_null());
        assert!(m.deleter.is_some());
    }
    let addr = b.addr;
    let weak = Arc::downgrade(&b);
    drop(b); // the tensor keeps the memory
    assert!(weak.upgrade().is_some(), "the export holds the buffer");
    // Import it back: the import's release is the export's deleter.
    let back = unsafe { dlpack::import(&k.dev, t, true, Some(&s)) }.unwrap();
    assert_eq!(back.addr, addr);
    assert_eq!(&*back.tensor().unwrap().shape, &[4, 4]);
    assert_eq!(read(&s, &back), data);
    drop(back);
    wait_until("the export's deleter", || weak.upgrade().is_none());
}

#[test]
fn dlpack_export_orders_the_consumer_stream_on_the_device() {
    let k = kit_alone(); // it gates a stream with a host callback
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let c = Stream::create(&k.dev, 0, 0).unwrap();
    let b = Buffer::alloc(&p, 256).unwrap();
    let probe = Buffer::alloc(&c, 256).unwrap();
    let raw = Buffer::wrap_device(&k.dev, b.addr, 256, None, None, None).unwrap();
    c.synchronize().unwrap();
    let open = gate(&p, &b);
    ops::memset(&p, &b, 0, 0x5A, 256).unwrap();
    let before = waits(&c);
    let t0 = Instant::now();
    let t = dlpack::export(&b, Some(&c), None, true).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "export blocked the host"
    );
    assert_eq!(
        waits(&c),
        before + 1,
        "the consumer stream waits on the device"
    );
    // The consumer's own work on `c` (a copy out of the raw memory) sees the memset.
    ops::copy(&c, &probe, 0, &raw, 0, 256).unwrap();
    open.open();
    assert_eq!(read(&c, &probe), vec![0x5A; 256]);
    // The deleter publishes the consumer's end: a later write on `p` waits for it.
    unsafe {
        let m = t.cast::<DLManagedTensorVersioned>();
        ((*m).deleter.unwrap())(m);
    }
    assert!(b.sync.has_writer());
}

#[test]
fn dlpack_export_without_a_consumer_waits_on_the_host() {
    let k = kit_alone(); // it gates a stream with a host callback
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let b = Buffer::alloc(&p, 128).unwrap();
    let open = gate(&p, &b);
    ops::memset(&p, &b, 0, 7, 128).unwrap();
    let o = open.0.clone();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        o.store(true, Ordering::Release);
    });
    let t0 = Instant::now();
    let t = dlpack::export(&b, None, None, false).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "returned before the writes completed"
    );
    opener.join().unwrap();
    if k.dev.kind() == BackendKind::Host {
        // kDLCPU: the consumer reads the bytes directly.
        let m = unsafe { &*t.cast::<dlpack::DLManagedTensor>() };
        assert_eq!(m.dl_tensor.device.device_type, KDL_CPU);
        let bytes = unsafe { std::slice::from_raw_parts(m.dl_tensor.data.cast::<u8>(), 128) };
        assert_eq!(bytes, &[7u8; 128][..]);
    }
    unsafe {
        let m = t.cast::<dlpack::DLManagedTensor>();
        ((*m).deleter.unwrap())(m);
    }
}

#[test]
fn dlpack_export_checks_the_description_against_the_buffer() {
    let k = kit();
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let b = Buffer::alloc(&s, 64).unwrap();
    let too_big = dlpack::TensorDesc {
        dtype: F32,
        shape: Box::new([17]),
        read_only: false,
    };
    let e = dlpack::export(&b, Some(&s), Some(too_big), true).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("needs 68 bytes"), "{e}");
}

#[test]
fn dlpack_import_ready_on_orders_the_first_use_on_another_stream() {
    let k = kit();
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let c = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&p, 16).unwrap();
    p.synchronize().unwrap();
    let (t, _deleted) = produce(&k.dev, owner.addr, &[4], F32, None);
    let b = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap();
    let before = waits(&c);
    ops::memset(&c, &b, 0, 1, 16).unwrap();
    assert_eq!(waits(&c), before + 1, "waited for the producer's stream");
    c.synchronize().unwrap();
}

#[test]
fn launch_checks_the_argument_count_where_the_driver_can() {
    let k = kit();
    if k.dev.kind() != BackendKind::Cuda {
        return; // no modules on host
    }
    let m = Module::load(&k.dev, common::PTX).unwrap();
    let f = m.function(c"sluice_fill").unwrap();
    let Some(n) = f.param_count else {
        eprintln!("driver older than 12.4: no cuFuncGetParamInfo, count not checked");
        return;
    };
    assert_eq!(n, 3);
    let s = Stream::create(&k.dev, 0, 0).unwrap();
    let mut a = 0u64;
    let mut args = [(&mut a as *mut u64).cast::<c_void>(); 2];
    let dims = sluice::LaunchDims {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let e = unsafe { ops::launch(&s, &f, dims, &mut args, &[], &[]) }.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(
        e.message
            .contains("kernel 'sluice_fill' takes 3 parameters, 2 arguments were given"),
        "{e}"
    );
}

// ---- an import's `ready_on` (the thirty-sixth session's review) -----------------------

const U8: DLDataType = DLDataType {
    code: 1,
    bits: 8,
    lanes: 1,
};

/// Host waits on an import, and its export to a CPU consumer (no consumer stream),
/// wait for the producer's write pending on `ready_on`; they returned at once.
#[test]
fn host_waits_and_a_cpu_export_of_an_import_wait_for_ready_on() {
    let k = kit_alone();
    if k.is_cuda() {
        return; // reads the memory on the host
    }
    for (value, via_export) in [(0x77u8, false), (0x55, true)] {
        let p = k.stream();
        let owner = Buffer::alloc(&p, 64).unwrap();
        ops::memset(&p, &owner, 0, 0, 64).unwrap();
        let g = gate(&p, &owner);
        ops::memset(&p, &owner, 0, value, 64).unwrap(); // the producer's write
        let (t, _) = produce(&k.dev, owner.addr, &[64], U8, None);
        // SAFETY: a live versioned tensor, handed over.
        let b = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap();
        let flag = g.0.clone();
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::Release);
        });
        let t0 = Instant::now();
        let first = if via_export {
            let out = dlpack::export(&b, None, None, false).unwrap();
            // SAFETY: an unversioned tensor that export made, deleted once below.
            let m = unsafe { &*out.cast::<dlpack::DLManagedTensor>() };
            let byte = unsafe { *(m.dl_tensor.data as *const u8) };
            unsafe { (m.deleter.unwrap())(out.cast()) };
            byte
        } else {
            b.sync.wait_read().unwrap();
            // SAFETY: host-backend memory of 64 bytes, its writer complete.
            unsafe { *(b.addr as *const u8) }
        };
        let waited = t0.elapsed();
        opener.join().unwrap();
        p.synchronize().unwrap();
        assert!(
            waited >= Duration::from_millis(150) && first == value,
            "export {via_export}: returned after {waited:?}, read {first:#x}, not {value:#x}"
        );
    }
}

/// Freed unused, an import calls its deleter only after the producer's work on
/// `ready_on` completed.
#[test]
fn the_deleter_of_an_unused_import_waits_for_ready_on() {
    let k = kit_alone();
    let p = k.stream();
    let owner = Buffer::alloc(&p, 64).unwrap();
    let g = gate(&p, &owner);
    let (t, deleted) = produce(&k.dev, owner.addr, &[64], U8, None);
    // SAFETY: a live versioned tensor, handed over.
    drop(unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        0,
        "deleted before ready_on's work ran"
    );
    g.open();
    p.synchronize().unwrap();
    wait_until("the deleter", || deleted.load(Ordering::SeqCst) == 1);
}

/// A `ready_on` that is capturing is refused: its work runs only with the graph.
#[test]
fn an_import_with_a_capturing_ready_on_is_refused() {
    let k = kit_alone();
    let p = k.stream();
    let owner = Buffer::alloc(&p, 64).unwrap();
    sluice::capture::capture_begin(&p, sluice::backend::CaptureMode::Relaxed).unwrap();
    let (t, deleted) = produce(&k.dev, owner.addr, &[64], U8, None);
    // SAFETY: a live versioned tensor; refused, so still ours.
    let e = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap_err();
    assert_eq!(e.code, ErrorCode::CaptureUnsupported, "{e}");
    assert!(e.message.contains("capturing"), "{e}");
    sluice::capture::capture_end(&p).unwrap();
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        0,
        "the caller still owns the tensor"
    );
    // SAFETY: refused, so the tensor is still ours to delete, once.
    unsafe { produced_deleter(t.cast()) };
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}
