//! Tests of the CUDA backend; those that need a GPU return early without one.

use super::device::*;
use super::driver::*;
use super::expect_err;
use super::stream::host_fn_trampoline;
use crate::backend::*;
use crate::error::ErrorCode;
use std::ptr::null_mut;
use std::sync::Arc;

#[test]
fn trampoline_runs_once_and_swallows_panics() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let h2 = hits.clone();
    let f: HostFn = Box::new(move || {
        h2.fetch_add(1, Ordering::SeqCst);
    });
    host_fn_trampoline(Box::into_raw(Box::new(f)).cast());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let p: HostFn = Box::new(|| panic!("callback panic (expected by the test)"));
    host_fn_trampoline(Box::into_raw(Box::new(p)).cast());
    host_fn_trampoline(null_mut());
}

const FILL_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 n)
{
.reg .pred p;
.reg .b32 r<5>;
.reg .b64 rd<5>;
ld.param.u64 rd1, [out];
ld.param.u32 r1, [n];
mov.u32 r2, %ctaid.x;
mov.u32 r3, %ntid.x;
mov.u32 r4, %tid.x;
mad.lo.s32 r2, r2, r3, r4;
setp.ge.u32 p, r2, r1;
@p bra DONE;
cvta.to.global.u64 rd2, rd1;
mul.wide.u32 rd3, r2, 4;
add.s64 rd4, rd2, rd3;
st.global.u32 [rd4], r2;
DONE:
ret;
}
"#;

/// Exercises every method on a real GPU; returns early where there is no driver.
#[test]
fn gpu_smoke() {
    if driver().is_err() || device_count().unwrap_or(0) == 0 {
        return;
    }
    let dev = open(0).expect("open");
    assert_eq!(
        expect_err(open(u32::MAX).map(|_| ())).code,
        ErrorCode::NoDevice
    );
    let props = dev.props().expect("props");
    assert!(!props.name.is_empty() && props.total_memory > 0);
    assert!(props.compute_capability.0 >= 5 && props.multiprocessor_count > 0);
    let (least, greatest) = dev.priority_range().expect("priority range");
    assert!(greatest <= least);

    for bad in [0u64, 1, 2] {
        assert_eq!(
            expect_err(dev.stream_adopt_external(bad)).code,
            ErrorCode::InvalidArgument
        );
    }
    let s = dev.stream_create(true, greatest).expect("stream");
    let s2 = dev.stream_create(false, 0).expect("stream 2");
    dev.stream_adopt_external(s)
        .expect("own stream is adoptable");

    // Memory, copies, memset, events.
    let n = 1 << 20;
    let buf = dev.mem_alloc_async(n, s).expect("alloc");
    let pinned = dev.pinned_alloc(n).expect("pinned");
    let mut host = vec![7u8; n];
    dev.host_register(host.as_mut_ptr(), n).expect("register");
    let (e0, e1) = (
        dev.event_create(true).expect("ev"),
        dev.event_create(true).expect("ev"),
    );
    dev.event_record(e0, s).expect("record");
    dev.memset_async(buf, 0xAB, n, s).expect("memset");
    dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
    dev.event_record(e1, s).expect("record");
    dev.stream_wait_event(s2, e1).expect("wait");
    dev.memcpy_async(host.as_mut_ptr() as u64, buf, n, s2)
        .expect("d2h 2");
    dev.stream_synchronize(s2).expect("sync");
    dev.event_synchronize(e1).expect("ev sync");
    assert!(dev.event_query(e1).expect("query"));
    assert!(dev.event_elapsed_ms(e0, e1).expect("elapsed") >= 0.0);
    // SAFETY: pinned holds n initialised bytes after the synchronised copy.
    let got = unsafe { std::slice::from_raw_parts(pinned, n) };
    assert!(got.iter().all(|&b| b == 0xAB) && host.iter().all(|&b| b == 0xAB));
    let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
    dev.memcpy_from_pageable(buf, &src, s)
        .expect("h2d pageable");
    dev.memcpy_from_pageable(buf, &host, s)
        .expect("h2d registered");
    dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
    dev.stream_synchronize(s).expect("sync");
    // SAFETY: as above.
    let got = unsafe { std::slice::from_raw_parts(pinned, n) };
    assert!(got.iter().all(|&b| b == 0xAB));

    // Host callbacks.
    let (tx, rx) = std::sync::mpsc::channel();
    dev.launch_host_fn(s, Box::new(move || tx.send(42).unwrap_or(())))
        .expect("host fn");
    dev.launch_host_fn(s, Box::new(|| panic!("expected callback panic")))
        .expect("host fn 2");
    dev.stream_synchronize(s).expect("sync");
    assert_eq!(rx.recv().ok(), Some(42));
    assert!(dev.stream_query(s).expect("query"));

    // Modules and kernels.
    let m = dev.module_load(FILL_PTX.as_bytes()).expect("module");
    let f = dev.module_function(m, c"fill").expect("function");
    assert_eq!(
        expect_err(dev.module_function(m, c"nope")).code,
        ErrorCode::NotFound
    );
    let bad = expect_err(dev.module_load(b".version 7.0\n.target sm_50\nbogus;"));
    assert_eq!(bad.code, ErrorCode::ModuleLoad);
    assert!(bad.message.contains("JIT error log"), "{}", bad.message);
    let count = (n / 4) as u32;
    let mut out = buf;
    let mut cnt = count;
    let mut args = [
        (&mut out as *mut u64).cast::<c_void>(),
        (&mut cnt as *mut u32).cast::<c_void>(),
    ];
    let dims = LaunchDims {
        grid: [count.div_ceil(256), 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    // SAFETY: two args matching fill(u64, u32).
    unsafe { dev.launch_kernel(f, dims, false, args.as_mut_ptr(), s) }.expect("launch");
    dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
    dev.stream_synchronize(s).expect("sync");
    // SAFETY: as above.
    let words = unsafe { std::slice::from_raw_parts(pinned.cast::<u32>(), n / 4) };
    assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));

    // Capture, graphs, update.
    let capture = |value: u8, twice: bool| {
        dev.capture_begin(s, CaptureMode::Relaxed).expect("begin");
        assert!(dev.capture_active(s).expect("active"));
        assert_eq!(
            expect_err(dev.launch_host_fn(s, Box::new(|| ()))).code,
            ErrorCode::CaptureUnsupported
        );
        dev.memset_async(buf, value, n, s).expect("memset");
        if twice {
            dev.memset_async(buf, value, n / 2, s).expect("memset 2");
        }
        let g = dev.capture_end(s).expect("end");
        assert!(!dev.capture_active(s).expect("inactive"));
        g
    };
    let g1 = capture(1, false);
    assert_eq!(dev.graph_node_count(g1).expect("count"), 1);
    let exec = dev.graph_instantiate(g1).expect("instantiate");
    dev.graph_upload(exec, s).expect("upload");
    let g2 = capture(2, false);
    assert_eq!(dev.graph_exec_update(exec, g2).expect("update"), Ok(()));
    dev.graph_launch(exec, s).expect("launch");
    dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
    dev.stream_synchronize(s).expect("sync");
    // SAFETY: as above.
    let got = unsafe { std::slice::from_raw_parts(pinned, n) };
    assert!(got.iter().all(|&b| b == 2));
    let g3 = capture(3, true);
    let refused = dev.graph_exec_update(exec, g3).expect("update call");
    let reason = refused.expect_err("topology changed");
    assert!(reason.contains("topology"), "{reason}");
    let dot = std::env::temp_dir().join("sluice_cuda_smoke.dot");
    let dot_c = std::ffi::CString::new(dot.to_string_lossy().into_owned()).expect("path");
    dev.graph_debug_dot(g3, &dot_c, true).expect("dot");
    assert!(std::fs::metadata(&dot)
        .map(|m| m.len() > 0)
        .unwrap_or(false));

    // Teardown.
    dev.graph_exec_destroy(exec);
    for g in [g1, g2, g3] {
        dev.graph_destroy(g);
    }
    dev.module_unload(m);
    dev.mem_free_async(buf, s).expect("free");
    dev.stream_synchronize(s).expect("sync");
    dev.host_unregister(host.as_mut_ptr());
    dev.pinned_free(pinned);
    dev.event_destroy(e0);
    dev.event_destroy(e1);
    dev.stream_destroy(s);
    dev.stream_destroy(s2);

    // Binding from another thread, where no context is current yet.
    std::thread::scope(|t| {
        t.spawn(|| {
            let s = dev.stream_create(true, 0).expect("stream on new thread");
            dev.stream_synchronize(s).expect("sync");
            dev.stream_destroy(s);
        });
    });
}
