//! Core runtime tests (issue 2) on the default backend: host in CI, cuda on the GPU.

mod common;
use common::{kit, waits};
use sluice::memory::BufferKind;
use sluice::module::Module;
use sluice::ops;
use sluice::{BackendKind, Buffer, Device, ErrorCode, Stream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn device_props_and_priority_range() {
    let k = kit();
    let p = k.dev.props().unwrap();
    assert!(!p.name.is_empty());
    assert!(p.total_memory > 0);
    assert!(p.multiprocessor_count > 0);
    let (least, greatest) = k.dev.priority_range().unwrap();
    assert!(greatest <= least);
    let again = Device::open(k.dev.kind(), k.dev.ordinal()).unwrap();
    assert!(
        Arc::ptr_eq(&again, &k.dev),
        "a device is opened once per process"
    );
}

#[test]
fn missing_device_is_a_clear_error() {
    let e = Device::open(BackendKind::Host, 1000).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoDevice);
    assert!(e.message.contains("1000"), "{e}");
}

#[test]
fn stream_flags_are_validated_and_priority_clamped() {
    let k = kit();
    let e = Stream::create(&k.dev, 0x80, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let s = Stream::create(&k.dev, 0, -1000).unwrap();
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}

#[test]
fn copies_roundtrip_byte_for_byte_at_offsets() {
    let k = kit();
    let s = k.stream();
    let n = 1 << 20;
    let src = pattern(n, 7);
    let d1 = Buffer::alloc(&s, n + 4096).unwrap();
    let d2 = Buffer::alloc(&s, n + 8192).unwrap();
    let pin = Buffer::alloc_pinned(&k.dev, n).unwrap();
    assert_eq!(pin.kind, BufferKind::Pinned);
    // pageable -> device at an offset, device -> device, device -> pinned
    ops::copy_from_host(&s, &d1, 4096, &src).unwrap();
    ops::copy(&s, &d2, 100, &d1, 4096, n).unwrap();
    ops::copy(&s, &pin, 0, &d2, 100, n).unwrap();
    pin.sync.wait_read().unwrap();
    // SAFETY: pinned memory of n bytes, no copy in flight after wait_read.
    let got = unsafe { std::slice::from_raw_parts(pin.host_ptr().unwrap(), n) };
    assert_eq!(got, &src[..]);
    // pinned -> device -> pageable
    let d3 = Buffer::alloc(&s, n).unwrap();
    ops::copy(&s, &d3, 0, &pin, 0, n).unwrap();
    let mut back = vec![0u8; n];
    ops::copy_to_host(&s, &mut back, &d3, 0).unwrap();
    assert_eq!(back, src);
}

#[test]
fn registered_host_memory_copies() {
    let k = kit();
    let s = k.stream();
    let n = 256 * 1024;
    let mut host = pattern(n, 3);
    let expect = host.clone();
    // SAFETY: host outlives the buffer (dropped below before host).
    let reg = unsafe { Buffer::register(&k.dev, host.as_mut_ptr(), n) }.unwrap();
    let d = Buffer::alloc(&s, n).unwrap();
    ops::copy(&s, &d, 0, &reg, 0, n).unwrap();
    ops::memset(&s, &d, 10, 0xAB, 5).unwrap();
    ops::copy(&s, &reg, 0, &d, 0, n).unwrap();
    drop(reg); // waits for the copy that writes host memory
    let mut want = expect;
    want[10..15].fill(0xAB);
    assert_eq!(host, want);
}

#[test]
fn copy_all_copies_every_pair_after_the_writer_on_another_stream() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let sizes = [4096usize, 0, 300];
    let src: Vec<Arc<Buffer>> = sizes
        .iter()
        .map(|&n| Buffer::alloc(&a, n.max(1)).unwrap())
        .collect();
    let dst: Vec<Arc<Buffer>> = sizes
        .iter()
        .map(|&n| Buffer::alloc(&b, n.max(1)).unwrap())
        .collect();
    for round in 0..20u8 {
        for (i, (&n, s)) in sizes.iter().zip(&src).enumerate() {
            ops::copy_from_host(&a, s, 0, &pattern(n, round ^ i as u8)).unwrap();
        }
        let pairs: Vec<_> = (0..3).map(|i| (&*dst[i], &*src[i], sizes[i])).collect();
        let waits0 = waits(&b);
        ops::copy_all(&b, &pairs).unwrap();
        assert!(waits(&b) > waits0, "stream b waited for a's writes");
        for (i, &n) in sizes.iter().enumerate() {
            let mut back = vec![0u8; n];
            ops::copy_to_host(&b, &mut back, &dst[i], 0).unwrap();
            assert_eq!(back, pattern(n, round ^ i as u8), "round {round} pair {i}");
        }
    }
}

#[test]
fn copy_all_checks_every_pair_before_copying_any() {
    let k = kit();
    let s = k.stream();
    let (x, y, small) = (
        Buffer::alloc(&s, 1024).unwrap(),
        Buffer::alloc(&s, 1024).unwrap(),
        Buffer::alloc(&s, 16).unwrap(),
    );
    ops::copy_from_host(&s, &x, 0, &[1u8; 1024]).unwrap();
    ops::copy_from_host(&s, &y, 0, &[2u8; 1024]).unwrap();
    let e = ops::copy_all(&s, &[(&y, &x, 1024), (&small, &x, 17)]).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("destination"), "{e}");
    let e = ops::copy_all(&s, &[(&y, &x, 8), (&x, &x, 8)]).unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::InvalidArgument,
        "a pair within one buffer"
    );
    ops::copy_all(&s, &[]).unwrap();
    ops::copy_all(&s, &[(&y, &x, 0)]).unwrap();
    let mut back = vec![0u8; 1024];
    ops::copy_to_host(&s, &mut back, &y, 0).unwrap();
    assert!(back.iter().all(|&b| b == 2), "a refused copy_all copied");
}

#[test]
fn out_of_range_copies_fail_and_change_nothing() {
    let k = kit();
    let s = k.stream();
    let d = Buffer::alloc(&s, 1024).unwrap();
    ops::copy_from_host(&s, &d, 0, &[0x5A; 1024]).unwrap();
    let e = ops::copy_from_host(&s, &d, 1000, &[1u8; 100]).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("1000"), "{e}");
    let e = ops::copy(&s, &d, usize::MAX - 2, &d, 0, 8).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    let e = ops::memset(&s, &d, 1024, 0, 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    let mut small = [0u8; 8];
    let e = ops::copy_to_host(&s, &mut small, &d, 1020).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    let e = ops::copy(&s, &d, 0, &d, 4, 100).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "overlap is refused");
    ops::copy(&s, &d, 0, &d, 0, 0).unwrap();
    let mut back = vec![0u8; 1024];
    ops::copy_to_host(&s, &mut back, &d, 0).unwrap();
    assert!(
        back.iter().all(|&b| b == 0x5A),
        "a failed copy changed memory"
    );
    assert_eq!(
        Buffer::alloc(&s, 0).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}

#[test]
fn host_callbacks_run_in_stream_order_and_report_failures() {
    let k = kit();
    let s = k.stream();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..1000 {
        let o = order.clone();
        sluice::ops::host_callback(
            &s,
            move || {
                o.lock().unwrap().push(i);
                0
            },
            &[],
            &[],
        )
        .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), (0..1000).collect::<Vec<_>>());
    sluice::ops::host_callback(&s, || 42, &[], &[]).unwrap();
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code, ErrorCode::CallbackFailed);
    assert!(e.message.contains("42"), "{e}");
    s.synchronize().unwrap();
}

#[test]
fn cross_stream_handoff_through_an_event() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, 1 << 16);
    k.fill(&a, &x, 0xC0FFEE, 20_000_000);
    let ev = a.record(false).unwrap();
    b.wait_event(&ev).unwrap();
    // An untracked read on B after the event wait.
    let mut out = vec![0u8; x.size];
    let seen = Arc::new(AtomicUsize::new(0));
    if k.is_cuda() {
        let d = sluice::backend::cuda::driver().unwrap();
        // SAFETY: out has x.size bytes; x is live device memory.
        unsafe {
            assert_eq!(
                (d.cuMemcpyAsync)(out.as_mut_ptr() as u64, x.addr, out.len(), b.raw() as _),
                0
            );
            assert_eq!((d.cuStreamSynchronize)(b.raw() as _), 0);
        }
    } else {
        let (addr, n, s2) = (x.addr as usize, x.size, seen.clone());
        let o = Arc::new(Mutex::new(Vec::new()));
        let o2 = o.clone();
        b.launch_host_fn(Box::new(move || {
            // SAFETY: ordered after A's fill by the event wait.
            let v = unsafe { std::slice::from_raw_parts(addr as *const u8, n) }.to_vec();
            *o2.lock().unwrap() = v;
            s2.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        b.synchronize().unwrap();
        out = o.lock().unwrap().clone();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }
    assert!(out
        .chunks_exact(4)
        .all(|c| u32::from_le_bytes(c.try_into().unwrap()) == 0xC0FFEE));
}

#[test]
fn events_sequence_query_and_timing() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, 1024);
    let e1 = s.record(true).unwrap();
    k.fill(&s, &x, 1, 5_000_000);
    let e2 = s.record(true).unwrap();
    assert!(e2.seq > e1.seq);
    assert_eq!(e1.stream_id(), s.id);
    e2.synchronize().unwrap();
    assert!(e2.query().unwrap());
    let ms = e1.elapsed_ms(&e2).unwrap();
    assert!(ms >= 4.0, "elapsed {ms} ms across a 5 ms spin");
    let plain = s.record(false).unwrap();
    plain.synchronize().unwrap();
    assert_eq!(
        e1.elapsed_ms(&plain).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
}

#[test]
fn pinned_pool_caches_and_trims() {
    let dev = Device::open(BackendKind::Host, 0).unwrap();
    let before = dev.pinned.stats();
    let a = Buffer::alloc_pinned(&dev, 100_000).unwrap();
    let addr = a.addr;
    drop(a);
    let s = dev.pinned.stats();
    assert_eq!(s.misses, before.misses + 1);
    assert!(s.bytes_cached >= 100_000 && s.bytes_cached % 4096 == 0);
    let b = Buffer::alloc_pinned(&dev, 90_000).unwrap();
    assert_eq!(b.addr, addr, "a close size reuses the cached block");
    assert_eq!(dev.pinned.stats().hits, before.hits + 1);
    drop(b);
    dev.pinned.trim_to(&dev, 0);
    assert_eq!(dev.pinned.stats().bytes_cached, 0);
    dev.pinned.set_limit(&dev, 0);
    drop(Buffer::alloc_pinned(&dev, 4096).unwrap());
    assert_eq!(
        dev.pinned.stats().bytes_cached,
        0,
        "a zero limit caches nothing"
    );
    dev.pinned
        .set_limit(&dev, sluice::memory::DEFAULT_PINNED_CACHE_LIMIT);
}

#[test]
fn kernels_load_and_launch_or_are_unsupported_on_host() {
    let k = kit();
    match Module::load(&k.dev, common::PTX) {
        Ok(m) => {
            assert!(k.is_cuda());
            let e = m.function(c"no_such_kernel").err().unwrap();
            assert_eq!(e.code, ErrorCode::NotFound);
            let s = k.stream();
            let x = k.buffer(&s, 4096);
            k.fill(&s, &x, 77, 0);
            assert!(k.read(&s, &x).iter().all(|&v| v == 77));
            let bad = Module::load(&k.dev, b".version 8.0\n.target sm_90\nthis is not ptx\n")
                .err()
                .unwrap();
            assert_eq!(bad.code, ErrorCode::ModuleLoad);
        }
        Err(e) => {
            assert!(!k.is_cuda());
            assert_eq!(e.code, ErrorCode::Unsupported);
            assert!(e.message.contains("module_load"), "{e}");
        }
    }
}

#[test]
fn destroyed_stream_finishes_its_work_and_keeps_memory_alive() {
    let k = kit();
    let s = k.stream();
    let reader = k.stream();
    let x = k.buffer(&s, 1 << 16);
    k.fill(&s, &x, 3, 20_000_000);
    drop(s); // the caller's handle goes; enqueued work and the buffer stay valid
    assert!(k.read(&reader, &x).iter().all(|&v| v == 3));
    assert_eq!(waits(&reader), 1);
}

#[test]
fn wait_all_drains_every_stream() {
    let k = kit();
    let streams: Vec<_> = (0..3).map(|_| k.stream()).collect();
    let bufs: Vec<_> = streams.iter().map(|s| k.buffer(s, 1024)).collect();
    for (s, b) in streams.iter().zip(&bufs) {
        k.fill(s, b, 8, 10_000_000);
    }
    k.dev.wait_all().unwrap();
    for s in &streams {
        assert!(s.query().unwrap());
    }
}

#[test]
fn freed_blocks_are_reused_in_stream_order_and_trimmed() {
    let k = kit();
    let s = k.stream();
    let a = Buffer::alloc(&s, 1 << 20).unwrap();
    let addr = a.addr;
    drop(a);
    let b = Buffer::alloc(&s, 1 << 20).unwrap();
    assert_eq!(
        b.addr, addr,
        "an exact-size block freed on the same stream is reused"
    );
    let c = Buffer::alloc(&s, 1 << 19).unwrap();
    assert_ne!(c.addr, addr);
    k.fill(&s, &b, 12, 0);
    assert!(k.read(&s, &b).iter().all(|&v| v == 12));
    drop(b);
    s.trim_block_cache().unwrap();
    s.synchronize().unwrap();
}

#[test]
fn a_context_switched_away_between_calls_is_bound_again() {
    use sluice::ffi::*;
    let k = kit();
    if !k.is_cuda() {
        return; // the host backend has no contexts
    }
    let d = sluice::backend::cuda::driver().unwrap();
    let mut dev = sluice_device_t { bits: 0 };
    assert!(sluice_device_open(sluice::BackendKind::Cuda as u32, 0, &mut dev).is_null());
    let mut s = sluice_stream_t { bits: 0 };
    assert!(sluice_stream_create(dev, 0, 0, &mut s).is_null());
    let mut buf = sluice_buffer_t { bits: 0 };
    assert!(sluice_buffer_alloc(s, 4096, &mut buf).is_null());
    // Another library on this thread unbinds the context between our calls.
    // SAFETY: setting no current context is always allowed.
    assert_eq!(unsafe { (d.cuCtxSetCurrent)(std::ptr::null_mut()) }, 0);
    assert!(sluice_stream_memset(s, buf, 0, 0x3C, 4096).is_null());
    let mut out = [0u8; 4096];
    assert!(sluice_stream_copy_to_host(s, out.as_mut_ptr().cast(), buf, 0, 4096).is_null());
    assert!(out.iter().all(|&b| b == 0x3C));
    for e in [
        sluice_buffer_free(buf),
        sluice_stream_destroy(s),
        sluice_device_close(dev),
    ] {
        assert!(e.is_null());
    }
}
