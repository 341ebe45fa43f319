//! A DLPack import's `ready_on`: host waits, a CPU export and the deleter follow
//! the producer's work on it (host backend: its gate is a host callback).

mod common;
use common::kit_alone;
use sluice::dlpack::{
    self, DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use sluice::ops;
use sluice::{BackendKind, Buffer, Device, Stream};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[repr(C)]
struct Produced {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    deleted: Arc<AtomicUsize>,
}

unsafe extern "C" fn produced_deleter(p: *mut DLManagedTensorVersioned) {
    let b = unsafe { Box::from_raw(p.cast::<Produced>()) };
    b.deleted.fetch_add(1, Ordering::SeqCst);
}

fn produce(dev: &Device, addr: u64, shape: &[i64]) -> (*mut c_void, Arc<AtomicUsize>) {
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
                        2
                    } else {
                        1
                    },
                    device_id: dev.ordinal() as i32,
                },
                ndim: shape.len() as i32,
                dtype: DLDataType {
                    code: 1,
                    bits: 8,
                    lanes: 1,
                },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: shape.to_vec(),
        deleted: deleted.clone(),
    });
    p.managed.dl_tensor.shape = p.shape.as_mut_ptr();
    (Box::into_raw(p).cast(), deleted)
}

/// A host callback on `s` that writes `b` and blocks `s` until the flag is set.
fn gate(s: &Stream, b: &Buffer) -> Arc<AtomicBool> {
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
    open
}

fn open_later(flag: &Arc<AtomicBool>, ms: u64) -> std::thread::JoinHandle<()> {
    let f = flag.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        f.store(true, Ordering::Release);
    })
}

/// The producer's work is pending on `ready_on`; a host wait on the imported
/// buffer (what `sluice_sync_wait_read` does, and what the docs of
/// `sluice_buffer_info` name as the way to read host-backend memory) must wait for it.
#[test]
fn host_wait_read_on_import_waits_for_ready_on() {
    let k = kit_alone();
    if k.dev.kind() != BackendKind::Host {
        return; // reads the memory on the host
    }
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&p, 64).unwrap();
    ops::memset(&p, &owner, 0, 0, 64).unwrap();
    p.synchronize().unwrap();
    // The producer: a gate, then its write of the tensor, in p's order.
    let g = gate(&p, &owner);
    ops::memset(&p, &owner, 0, 0x77, 64).unwrap();
    let (t, _deleted) = produce(&k.dev, owner.addr, &[64]);
    let b = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap();
    let opener = open_later(&g, 300);
    let t0 = Instant::now();
    b.sync.wait_read().unwrap();
    let waited = t0.elapsed();
    let first = unsafe { *(b.addr as *const u8) };
    opener.join().unwrap();
    p.synchronize().unwrap();
    assert!(
        waited >= Duration::from_millis(200) && first == 0x77,
        "wait_read returned after {waited:?} and the host read {first:#x}, not 0x77: \
         the producer's write on ready_on was still pending"
    );
}

/// The same through an export with no consumer stream: documented to block until
/// the buffer's pending work completed ("what a CPU consumer needs").
#[test]
fn export_without_consumer_of_an_import_waits_for_ready_on() {
    let k = kit_alone();
    if k.dev.kind() != BackendKind::Host {
        return; // reads the memory on the host
    }
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&p, 64).unwrap();
    ops::memset(&p, &owner, 0, 0, 64).unwrap();
    p.synchronize().unwrap();
    let g = gate(&p, &owner);
    ops::memset(&p, &owner, 0, 0x55, 64).unwrap();
    let (t, _deleted) = produce(&k.dev, owner.addr, &[64]);
    let b = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap();
    let opener = open_later(&g, 300);
    let t0 = Instant::now();
    let out = dlpack::export(&b, None, None, false).unwrap();
    let waited = t0.elapsed();
    // A kDLCPU consumer reads the bytes now.
    let m = unsafe { &*out.cast::<dlpack::DLManagedTensor>() };
    let first = unsafe { *(m.dl_tensor.data as *const u8) };
    opener.join().unwrap();
    p.synchronize().unwrap();
    unsafe { (m.deleter.unwrap())(out.cast()) };
    assert!(
        waited >= Duration::from_millis(200) && first == 0x55,
        "export returned after {waited:?} and the CPU consumer read {first:#x}, not 0x55"
    );
}

/// Freed unused, an import calls its deleter only after the producer's work on
/// `ready_on` completed.
#[test]
fn deleter_of_an_unused_import_waits_for_ready_on() {
    let k = kit_alone();
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&p, 64).unwrap();
    let g = gate(&p, &owner);
    let (t, deleted) = produce(&k.dev, owner.addr, &[64]);
    let b = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap();
    drop(b);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        0,
        "deleted before ready_on's work ran"
    );
    g.store(true, Ordering::Release);
    p.synchronize().unwrap();
    let t0 = Instant::now();
    while deleted.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}

/// A `ready_on` that is capturing is refused: its work runs only with the graph.
#[test]
fn import_with_a_capturing_ready_on_is_refused() {
    let k = kit_alone();
    let p = Stream::create(&k.dev, 0, 0).unwrap();
    let owner = Buffer::alloc(&p, 64).unwrap();
    ops::memset(&p, &owner, 0, 1, 64).unwrap();
    p.synchronize().unwrap();
    sluice::capture::capture_begin(&p, sluice::backend::CaptureMode::Relaxed).unwrap();
    let (t, deleted) = produce(&k.dev, owner.addr, &[64]);
    let e = unsafe { dlpack::import(&k.dev, t, true, Some(&p)) }.unwrap_err();
    assert_eq!(e.code, sluice::ErrorCode::CaptureUnsupported, "{e}");
    assert!(e.message.contains("capturing"), "{e}");
    sluice::capture::capture_end(&p).unwrap();
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        0,
        "the caller still owns the tensor"
    );
    // SAFETY: refused, so the tensor is still ours to delete.
    unsafe { produced_deleter(t.cast()) };
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}
