//! Fault injection (issue 16): every call of every host-backend entry point that a
//! scenario makes is failed in turn, one per run. After each run: the error is
//! clear (the injected one, or none where a cleanup path absorbs it), nothing
//! leaked (live handles, backend objects, device and pinned bytes), nothing hung,
//! and the library still works. Host backend only (the hooks are the host's);
//! scenarios go through the C ABI, as a careful C caller would.

use sluice::backend::faults;
use sluice::ffi::*;
use sluice::ErrorCode;
use std::collections::BTreeMap;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::Duration;

type R = Result<(), (u32, String)>;

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

fn ck(e: *mut sluice_error_t) -> R {
    if e.is_null() {
        return Ok(());
    }
    let code = sluice_error_code(e);
    // SAFETY: a live error's message is a NUL-terminated string.
    let msg = unsafe { CStr::from_ptr(sluice_error_message(e)) }
        .to_string_lossy()
        .into_owned();
    sluice_error_free(e);
    Err((code, msg))
}

/// Destroys what a scenario made, newest first, however the scenario ended.
#[derive(Default)]
struct Bag(Vec<Box<dyn FnOnce() -> *mut sluice_error_t>>);

impl Bag {
    fn add(&mut self, f: impl FnOnce() -> *mut sluice_error_t + 'static) {
        self.0.push(Box::new(f));
    }
}

impl Drop for Bag {
    fn drop(&mut self) {
        while let Some(f) = self.0.pop() {
            if let Err((_, m)) = ck(f()) {
                panic!("a destroy failed: {m}");
            }
        }
    }
}

fn host_device() -> sluice_device_t {
    let mut d = sluice_device_t { bits: 0 };
    ck(sluice_device_open(
        sluice::BackendKind::Host as u32,
        0,
        &mut d,
    ))
    .expect("open host:0");
    d
}

fn stream(dev: sluice_device_t, bag: &mut Bag) -> Result<sluice_stream_t, (u32, String)> {
    let mut s = sluice_stream_t { bits: 0 };
    ck(sluice_stream_create(dev, 0, 0, &mut s))?;
    bag.add(move || sluice_stream_destroy(s));
    Ok(s)
}

fn buffer(s: sluice_stream_t, n: usize, bag: &mut Bag) -> Result<sluice_buffer_t, (u32, String)> {
    let mut b = sluice_buffer_t { bits: 0 };
    ck(sluice_buffer_alloc(s, n, &mut b))?;
    bag.add(move || sluice_buffer_free(b));
    Ok(b)
}

fn pinned(dev: sluice_device_t, n: usize, bag: &mut Bag) -> Result<sluice_buffer_t, (u32, String)> {
    let mut b = sluice_buffer_t { bits: 0 };
    ck(sluice_buffer_alloc_pinned(dev, n, &mut b))?;
    bag.add(move || sluice_buffer_free(b));
    Ok(b)
}

fn read(s: sluice_stream_t, b: sluice_buffer_t, n: usize) -> Result<Vec<u8>, (u32, String)> {
    let mut out = vec![0u8; n];
    ck(sluice_stream_copy_to_host(
        s,
        out.as_mut_ptr().cast(),
        b,
        0,
        n,
    ))?;
    Ok(out)
}

fn expect(cond: bool, what: &str) -> R {
    if cond {
        Ok(())
    } else {
        Err((0, format!("wrong data: {what}")))
    }
}

const N: usize = 4096;

fn streams(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let a = stream(dev, &mut bag)?;
    let b = stream(dev, &mut bag)?;
    let mut raw: *mut c_void = null_mut();
    ck(sluice_stream_raw(a, &mut raw))?;
    let mut w = sluice_stream_t { bits: 0 };
    ck(sluice_stream_wrap_external(dev, raw, &mut w))?;
    bag.add(move || sluice_stream_destroy(w));
    ck(sluice_stream_synchronize(b))?;
    let mut done = false;
    ck(sluice_stream_query(w, &mut done))?;
    ck(sluice_device_wait_all(dev))
}

fn events(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let a = stream(dev, &mut bag)?;
    let b = stream(dev, &mut bag)?;
    let x = buffer(a, N, &mut bag)?;
    ck(sluice_stream_memset(a, x, 0, 3, N))?;
    let mut ev = sluice_event_t { bits: 0 };
    ck(sluice_event_record(a, 0, &mut ev))?;
    bag.add(move || sluice_event_destroy(ev));
    ck(sluice_stream_wait_event(b, ev))?;
    let mut done = false;
    ck(sluice_event_query(ev, &mut done))?;
    ck(sluice_event_synchronize(ev))?;
    expect(read(b, x, N)?.iter().all(|&v| v == 3), "memset seen by b")
}

fn buffers_and_copies(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let t = stream(dev, &mut bag)?;
    let x = buffer(s, N, &mut bag)?;
    let y = buffer(t, N, &mut bag)?;
    let p = pinned(dev, N, &mut bag)?;
    let src: Vec<u8> = (0..N).map(|i| i as u8).collect();
    ck(sluice_stream_copy_from_host(
        s,
        x,
        0,
        src.as_ptr().cast(),
        N,
    ))?;
    ck(sluice_stream_copy(t, y, 0, x, 0, N))?;
    ck(sluice_stream_copy(s, p, 0, y, 0, N))?;
    ck(sluice_stream_memset(t, x, 0, 0xEE, N / 2))?;
    expect(read(t, p, N)? == src, "round trip through y and pinned p")?;
    expect(read(s, x, N)?[..N / 2].iter().all(|&v| v == 0xEE), "memset")?;
    ck(sluice_device_pinned_trim(dev))
}

/// Counts callback runs; static, because a callback may outlive a failed scenario.
static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn add_one(_user: *mut c_void) -> i32 {
    RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    0
}

fn sync_and_callbacks(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let t = stream(dev, &mut bag)?;
    let mut o = sluice_sync_t { bits: 0 };
    ck(sluice_sync_create(&mut o))?;
    bag.add(move || sluice_sync_destroy(o));
    let runs0 = RUNS.load(std::sync::atomic::Ordering::SeqCst);
    let user = null_mut();
    ck(sluice_stream_launch_host_func(
        s,
        Some(add_one),
        user,
        None,
        null(),
        0,
        &o,
        1,
    ))?;
    let mut op = sluice_op_t { bits: 0 };
    ck(sluice_op_begin(t, &o, 1, null(), 0, &mut op))?;
    ck(sluice_op_end(op))?;
    ck(sluice_stream_launch_host_func(
        t,
        Some(add_one),
        user,
        None,
        &o,
        1,
        null(),
        0,
    ))?;
    ck(sluice_sync_wait_write(o))?;
    ck(sluice_device_wait_all(dev))?;
    let runs = RUNS.load(std::sync::atomic::Ordering::SeqCst) - runs0;
    expect(runs == 2, "both callbacks ran")
}

fn graphs(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let x = buffer(s, N, &mut bag)?;
    let y = buffer(s, N, &mut bag)?;
    let capture = |v: u8, bag: &mut Bag| -> Result<sluice_graph_t, (u32, String)> {
        ck(sluice_graph_capture_begin(s, 0))?;
        let body = ck(sluice_stream_memset(s, x, 0, v, N))
            .and_then(|()| ck(sluice_stream_copy(s, y, 0, x, 0, N)));
        let mut g = sluice_graph_t { bits: 0 };
        let end = ck(sluice_graph_capture_end(s, &mut g));
        body?;
        end?;
        bag.add(move || sluice_graph_destroy(g));
        Ok(g)
    };
    let g1 = capture(5, &mut bag)?;
    let mut e = sluice_graph_exec_t { bits: 0 };
    ck(sluice_graph_instantiate(g1, &mut e))?;
    bag.add(move || sluice_graph_exec_destroy(e));
    ck(sluice_graph_exec_launch(e, s))?;
    expect(read(s, y, N)?.iter().all(|&v| v == 5), "graph 1")?;
    let g2 = capture(6, &mut bag)?;
    // SAFETY: an all-zero info is a valid out value.
    let mut info: sluice_graph_update_info_t = unsafe { std::mem::zeroed() };
    ck(sluice_graph_exec_update(e, g2, &mut info))?;
    ck(sluice_graph_exec_upload(e, s))?;
    ck(sluice_graph_exec_launch(e, s))?;
    expect(read(s, y, N)?.iter().all(|&v| v == 6), "updated graph")
}

struct Body {
    x: sluice_buffer_t,
    err: Option<(u32, String)>,
}

extern "C" fn cached_body(user: *mut c_void, s: sluice_stream_t) -> i32 {
    // SAFETY: user is the scenario's Body, alive during the run.
    let b = unsafe { &mut *(user as *mut Body) };
    match ck(sluice_stream_memset(s, b.x, 0, 0x42, N)) {
        Ok(()) => 0,
        Err(e) => {
            b.err = Some(e);
            1
        }
    }
}

fn graph_cache(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let x = buffer(s, N, &mut bag)?;
    let mut c = sluice_graph_cache_t { bits: 0 };
    ck(sluice_graph_cache_create(dev, &mut c))?;
    bag.add(move || sluice_graph_cache_destroy(c));
    let mut body = Box::new(Body { x, err: None });
    for _ in 0..3 {
        let user = &mut *body as *mut Body as *mut c_void;
        // The body's own error says more than "the body returned 1".
        ck(sluice_graph_cache_run(c, 7, s, Some(cached_body), user))
            .map_err(|e| body.err.take().unwrap_or(e))?;
    }
    expect(read(s, x, N)?.iter().all(|&v| v == 0x42), "cached region")
}

fn rng(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let out = buffer(s, 4 * 256, &mut bag)?;
    let mut r = sluice_rng_t { bits: 0 };
    ck(sluice_rng_create(s, 1234, 64, &mut r))?;
    bag.add(move || sluice_rng_destroy(r));
    let mut cp = sluice_rng_checkpoint_t { bits: 0 };
    ck(sluice_rng_checkpoint_create(s, r, &mut cp))?;
    bag.add(move || sluice_rng_checkpoint_destroy(cp));
    ck(sluice_rng_save(s, r, cp))?;
    ck(sluice_rng_generate(s, r, 1, 1, out, 0, 4))?;
    let first = read(s, out, 4 * 256)?;
    ck(sluice_rng_restore(s, r, cp))?;
    ck(sluice_rng_generate(s, r, 1, 1, out, 0, 4))?;
    expect(read(s, out, 4 * 256)? == first, "restore replays the draws")?;
    let mut len = 0usize;
    let e = ck(sluice_rng_checkpoint_serialize(cp, null_mut(), 0, &mut len));
    let mut bytes = vec![0u8; len.max(1)];
    if e.is_err() {
        ck(sluice_rng_checkpoint_serialize(
            cp,
            bytes.as_mut_ptr(),
            bytes.len(),
            &mut len,
        ))?;
    } else {
        ck(sluice_rng_checkpoint_serialize(
            cp,
            bytes.as_mut_ptr(),
            len,
            &mut len,
        ))?;
    }
    let mut cp2 = sluice_rng_checkpoint_t { bits: 0 };
    ck(sluice_rng_checkpoint_deserialize(
        dev,
        bytes.as_ptr(),
        len,
        &mut cp2,
    ))?;
    bag.add(move || sluice_rng_checkpoint_destroy(cp2));
    ck(sluice_rng_restore(s, r, cp2))
}

fn prefetcher(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    // SAFETY: all-zero is a valid config to fill in (no fill function: push mode).
    let mut cfg: sluice_prefetcher_config_t = unsafe { std::mem::zeroed() };
    cfg.depth = 2;
    cfg.segments = 1;
    cfg.capacity[0] = N;
    let mut p = sluice_prefetcher_t { bits: 0 };
    ck(sluice_prefetcher_create(dev, &cfg, &mut p))?;
    bag.add(move || sluice_prefetcher_destroy(p));
    for round in 0..3u8 {
        let data = vec![round; N];
        let seg = sluice_prefetch_segment_t {
            ptr: data.as_ptr().cast(),
            len: N,
        };
        let mut seq = 0u64;
        ck(sluice_prefetcher_push(p, &seg, 1, 1000, &mut seq))?;
        let mut batch = sluice_batch_t { bits: 0 };
        // SAFETY: all-zero is a valid out value.
        let mut view: sluice_batch_view_t = unsafe { std::mem::zeroed() };
        ck(sluice_prefetcher_next(p, s, 1000, &mut batch, &mut view))?;
        let mut got = vec![0u8; N];
        // On host, device memory is host memory: read the batch in stream order.
        let synced = ck(sluice_stream_synchronize(s));
        if synced.is_ok() {
            // SAFETY: the batch is leased and its copy completed.
            unsafe {
                std::ptr::copy_nonoverlapping(view.device_ptr[0] as *const u8, got.as_mut_ptr(), N)
            };
        }
        let released = ck(sluice_batch_release(batch));
        synced?;
        released?;
        expect(got == data, "prefetched batch")?;
    }
    ck(sluice_prefetcher_close_input(p))
}

type Scenario = (&'static str, fn(sluice_device_t) -> R);

/// Serialize in pieces on several threads (3 MiB and a state), into pageable and
/// into pinned memory: a failure anywhere leaves nothing in flight into either.
fn rng_serialize_in_pieces(dev: sluice_device_t) -> R {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag)?;
    let mut r = sluice_rng_t { bits: 0 };
    ck(sluice_rng_create(s, 99, 3 * 16384 + 1, &mut r))?;
    bag.add(move || sluice_rng_destroy(r));
    let mut cp = sluice_rng_checkpoint_t { bits: 0 };
    ck(sluice_rng_checkpoint_create(s, r, &mut cp))?;
    bag.add(move || sluice_rng_checkpoint_destroy(cp));
    let mut len = 0usize;
    ck(sluice_rng_checkpoint_serialize(cp, null_mut(), 0, &mut len))?;
    let mut pageable = vec![0u8; len];
    ck(sluice_rng_checkpoint_serialize(
        cp,
        pageable.as_mut_ptr(),
        len,
        &mut len,
    ))?;
    let mut pb = sluice_buffer_t { bits: 0 };
    ck(sluice_buffer_alloc_pinned(dev, len, &mut pb))?;
    bag.add(move || sluice_buffer_free(pb));
    let mut info = sluice_buffer_info_t {
        kind: 0,
        size: 0,
        device_ptr: 0,
        host_ptr: null_mut(),
    };
    ck(sluice_buffer_info(pb, &mut info))?;
    let pinned = info.host_ptr.cast::<u8>();
    ck(sluice_rng_checkpoint_serialize(cp, pinned, len, &mut len))?;
    // SAFETY: the pinned buffer holds `len` bytes, all written above.
    let direct = unsafe { std::slice::from_raw_parts(pinned, len) };
    expect(direct == pageable.as_slice(), "pinned and pageable bytes")
}

const SCENARIOS: &[Scenario] = &[
    ("streams", streams),
    ("events", events),
    ("buffers and copies", buffers_and_copies),
    ("sync objects and host callbacks", sync_and_callbacks),
    ("captures and graphs", graphs),
    ("graph cache", graph_cache),
    ("rng", rng),
    ("rng serialize in pieces", rng_serialize_in_pieces),
    ("prefetcher", prefetcher),
];

/// Runs a scenario on its own thread; None when it did not finish in time.
fn run_bounded(f: fn(sluice_device_t) -> R, dev: sluice_device_t) -> Option<R> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| f(dev))
            .unwrap_or_else(|_| Err((u32::MAX, "the scenario panicked".into())));
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

/// What is left once everything is destroyed and drained.
fn leftovers(dev: sluice_device_t, handles0: u64) -> Option<String> {
    ck(sluice_device_wait_all(dev)).ok()?;
    ck(sluice_device_pinned_trim(dev)).ok()?;
    let l = faults::ledger();
    let h = sluice_live_handles();
    (l != faults::Ledger::default() || h != handles0)
        .then(|| format!("{l:?}, {} live handles (was {handles0})", h))
}

/// The library still works: a stream, a buffer, a copy round trip.
fn still_works(dev: sluice_device_t) {
    let mut bag = Bag::default();
    let s = stream(dev, &mut bag).expect("stream after a fault");
    let x = buffer(s, N, &mut bag).expect("buffer after a fault");
    ck(sluice_stream_memset(s, x, 0, 0x5A, N)).expect("memset after a fault");
    assert!(read(s, x, N).unwrap().iter().all(|&v| v == 0x5A));
}

#[test]
fn every_backend_failure_is_reported_cleaned_up_and_survived() {
    let _g = one_at_a_time();
    let dev = host_device();
    let handles0 = sluice_live_handles();
    let mut absorbed: BTreeMap<String, u64> = BTreeMap::new();
    let (mut runs, mut not_reached) = (0u64, 0u64);
    // FAULTS_VERBOSE=1 names each run; FAULTS_ONLY=scenario:entry:n runs one.
    let verbose = std::env::var_os("FAULTS_VERBOSE").is_some();
    let only = std::env::var("FAULTS_ONLY").ok();
    for &(name, f) in SCENARIOS {
        // First runs make the device's own objects (the RNG's io stream) and fill
        // the caches (a second run: the checkpoint pool's helpers, started by the
        // first, now take part and hold more recordings at once); what the ledger
        // counts after them must all go.
        for _ in 0..2 {
            run_bounded(f, dev)
                .expect("the scenario hangs with no fault")
                .unwrap();
        }
        faults::track(true);
        faults::arm("", 0, ErrorCode::Driver);
        let clean = run_bounded(f, dev).expect("the scenario hangs with no fault");
        let calls = faults::calls();
        faults::disarm();
        clean.unwrap_or_else(|e| panic!("{name} fails with no fault: {e:?}"));
        if let Some(l) = leftovers(dev, handles0) {
            panic!("{name} leaks with no fault: {l}");
        }
        faults::track(false);
        let mut calls: Vec<_> = calls.into_iter().collect();
        calls.sort();
        for (entry, count) in calls {
            for n in 1..=count {
                runs += 1;
                if only
                    .as_deref()
                    .is_some_and(|o| o != format!("{name}:{entry}:{n}"))
                {
                    continue;
                }
                if verbose {
                    eprintln!("{name}: {entry} call {n}");
                }
                faults::track(true);
                faults::arm(entry, n, ErrorCode::Driver);
                let r = run_bounded(f, dev);
                let injected = faults::disarm();
                let at = format!("{name}: {entry} call {n}");
                let r = r.unwrap_or_else(|| panic!("{at}: deadlock (no return in 20 s)"));
                // Some calls depend on timing (polls of completed work): this run
                // may make fewer of them than the clean run did.
                if injected == 0 {
                    not_reached += 1;
                }
                match r {
                    Err((code, msg)) => {
                        assert!(
                            msg.contains("injected fault"),
                            "{at}: the error does not say what failed: {msg}"
                        );
                        assert_ne!(code, 0, "{at}: {msg}");
                    }
                    Ok(()) => *absorbed.entry(format!("{entry} ({name})")).or_default() += 1,
                }
                if let Some(l) = leftovers(dev, handles0) {
                    panic!("{at}: leaked {l}");
                }
                faults::track(false);
                still_works(dev);
            }
        }
    }
    faults::track(false);
    eprintln!("{runs} runs ({not_reached} not reached); absorbed by cleanup paths: {absorbed:?}");
    assert!(
        runs - not_reached > 100,
        "the scenarios cover {runs} calls only ({not_reached} not reached)"
    );
    ck(sluice_device_close(dev)).unwrap();
}
