//! Traces, counters and logs (issue 15), on the default backend (host in CI).
//! Tracing, counting and logging are process-wide, so every test here holds `LOCK`.

use sluice::counters::{self, Counters};
use sluice::graph_cache::GraphCache;
use sluice::log::{self, LogLevel};
use sluice::memory::Buffer;
use sluice::trace::{self, TraceOptions};
use sluice::{ops, Device, ErrorCode, Stream, SyncObject};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

static LOCK: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn tmp(name: &str) -> PathBuf {
    // The build's own folder, or the system's where the binary was carried elsewhere.
    let dir = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("{name}-{}.json", std::process::id()))
}

fn stream(dev: &Arc<Device>, label: &str) -> Arc<Stream> {
    let s = Stream::create(dev, 0, 0).unwrap();
    s.set_label(Some(label));
    s
}

// ---- a small JSON reader, enough for trace files ----

#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, k: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(n, _)| n == k).map(|(_, v)| v),
            _ => None,
        }
    }
    fn str(&self, k: &str) -> Option<&str> {
        match self.get(k) {
            Some(Json::Str(s)) => Some(s),
            _ => None,
        }
    }
    fn num(&self, k: &str) -> Option<f64> {
        match self.get(k) {
            Some(Json::Num(n)) => Some(*n),
            _ => None,
        }
    }
    fn arg(&self, k: &str) -> Option<f64> {
        self.get("args").and_then(|a| a.num(k))
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }
    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.s.get(self.i).copied() {
            Some(b'{') => {
                self.i += 1;
                let mut m = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(m));
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value()? else {
                        return Err(format!("object key at byte {}", self.i));
                    };
                    self.eat(b':')?;
                    m.push((k, self.value()?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(m));
                        }
                        _ => return Err(format!("object at byte {}", self.i)),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(v));
                }
                loop {
                    v.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(v));
                        }
                        _ => return Err(format!("array at byte {}", self.i)),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let c = *self.s.get(self.i).ok_or("unterminated string")?;
                    self.i += 1;
                    match c {
                        b'"' => return Ok(Json::Str(out)),
                        b'\\' => {
                            let e = *self.s.get(self.i).ok_or("bad escape")?;
                            self.i += 1;
                            match e {
                                b'"' => out.push('"'),
                                b'\\' => out.push('\\'),
                                b'/' => out.push('/'),
                                b'n' => out.push('\n'),
                                b't' => out.push('\t'),
                                b'r' => out.push('\r'),
                                b'u' => {
                                    let h = std::str::from_utf8(&self.s[self.i..self.i + 4])
                                        .map_err(|e| e.to_string())?;
                                    let c =
                                        u32::from_str_radix(h, 16).map_err(|e| e.to_string())?;
                                    out.push(char::from_u32(c).ok_or("bad \\u")?);
                                    self.i += 4;
                                }
                                _ => return Err(format!("bad escape at byte {}", self.i)),
                            }
                        }
                        c if c < 0x20 => return Err(format!("control char at byte {}", self.i)),
                        _ => {
                            let start = self.i - 1;
                            let mut end = self.i;
                            while end < self.s.len() && self.s[end] & 0xC0 == 0x80 {
                                end += 1;
                            }
                            out.push_str(
                                std::str::from_utf8(&self.s[start..end])
                                    .map_err(|e| e.to_string())?,
                            );
                            self.i = end;
                        }
                    }
                }
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Json::Bool(true))
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Json::Bool(false))
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Json::Null)
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                t.parse().map(Json::Num).map_err(|e| format!("{t}: {e}"))
            }
            _ => Err(format!("unexpected input at byte {}", self.i)),
        }
    }
}

/// Parses a whole document strictly.
fn parse(text: &str) -> Result<Json, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i != text.len() {
        return Err(format!("trailing data at byte {}", p.i));
    }
    Ok(v)
}

fn events(path: &PathBuf) -> Vec<Json> {
    let text = std::fs::read_to_string(path).unwrap();
    match parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        Json::Arr(v) => v,
        other => panic!("not an array: {other:?}"),
    }
}

// ---- the checks every trace passes ----

type Track = (u64, u64);

fn track(e: &Json) -> Track {
    (e.num("pid").unwrap() as u64, e.num("tid").unwrap() as u64)
}

fn end(e: &Json) -> f64 {
    e.num("ts").unwrap() + e.num("dur").unwrap_or(0.0)
}

/// Required fields, per-track order, balanced B/E, flows with both ends bound to
/// spans, async slices in order.
fn check(ev: &[Json]) {
    let mut last: HashMap<Track, f64> = HashMap::new();
    let mut open: HashMap<Track, usize> = HashMap::new();
    let mut spans: HashMap<Track, Vec<(f64, f64)>> = HashMap::new();
    let mut flows: HashMap<u64, (Option<&Json>, Option<&Json>)> = HashMap::new();
    let mut asyncs: HashMap<u64, Vec<(&str, f64)>> = HashMap::new();
    for e in ev {
        for k in ["ph", "name"] {
            assert!(e.str(k).is_some(), "{k} missing in {e:?}");
        }
        for k in ["ts", "pid", "tid"] {
            assert!(e.num(k).is_some(), "{k} missing in {e:?}");
        }
        let ph = e.str("ph").unwrap();
        let ts = e.num("ts").unwrap();
        let t = track(e);
        match ph {
            "X" | "B" | "E" | "i" => {
                let prev = last.insert(t, ts).unwrap_or(0.0);
                assert!(
                    ts >= prev,
                    "track {t:?} goes back from {prev} to {ts}: {e:?}"
                );
            }
            _ => {}
        }
        match ph {
            "X" => {
                assert!(e.num("dur").unwrap() >= 0.0);
                spans.entry(t).or_default().push((ts, end(e)));
            }
            "B" => *open.entry(t).or_default() += 1,
            "E" => {
                let n = open.entry(t).or_default();
                assert!(*n > 0, "E without B on {t:?}");
                *n -= 1;
            }
            "s" => flows.entry(e.num("id").unwrap() as u64).or_default().0 = Some(e),
            "f" => {
                assert_eq!(e.str("bp"), Some("e"));
                flows.entry(e.num("id").unwrap() as u64).or_default().1 = Some(e)
            }
            "b" | "n" | "e" => asyncs
                .entry(e.num("id").unwrap() as u64)
                .or_default()
                .push((ph, ts)),
            "M" | "i" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(open.values().all(|&n| n == 0), "unclosed B: {open:?}");
    let inside = |e: &Json| {
        let ts = e.num("ts").unwrap();
        spans
            .get(&track(e))
            .is_some_and(|v| v.iter().any(|&(a, b)| a <= ts && ts <= b))
    };
    for (id, (s, f)) in &flows {
        let (s, f) = (
            s.expect("flow end without start"),
            f.expect("flow start without end"),
        );
        assert!(inside(s), "flow {id} starts outside a span: {s:?}");
        assert!(inside(f), "flow {id} ends outside a span: {f:?}");
        assert!(s.num("ts") <= f.num("ts"), "flow {id} goes back in time");
    }
    for (id, steps) in &asyncs {
        assert_eq!(
            steps.first().map(|s| s.0),
            Some("b"),
            "async {id}: {steps:?}"
        );
        assert!(
            steps.windows(2).all(|w| w[0].1 <= w[1].1),
            "async {id}: {steps:?}"
        );
    }
}

fn x_spans(ev: &[Json], pid: u64, tid: u64) -> Vec<&Json> {
    ev.iter()
        .filter(|e| e.str("ph") == Some("X") && track(e) == (pid, tid))
        .collect()
}

fn span_seq(ev: &[Json], pid: u64, tid: u64, seq: u64) -> &Json {
    x_spans(ev, pid, tid)
        .into_iter()
        .find(|e| e.arg("seq") == Some(seq as f64))
        .unwrap_or_else(|| panic!("no span of seq {seq} on ({pid}, {tid})"))
}

fn sleeper(ms: u64) -> impl Fn() -> i32 + Send + Sync + 'static {
    move || {
        std::thread::sleep(Duration::from_millis(ms));
        0
    }
}

// ---- traces ----

#[test]
fn a_two_stream_pipeline_overlaps_and_its_waits_are_arrows() {
    let _g = serial();
    let dev = Device::open_default().unwrap();
    let (a, b) = (stream(&dev, "copy"), stream(&dev, "compute"));
    let (x, y, z) = (SyncObject::new(), SyncObject::new(), SyncObject::new());
    let path = tmp("pipeline");
    trace::start(&path, TraceOptions { device_every: 1 }).unwrap();
    assert!(trace::is_tracing());
    // A1 writes x; B1 reads x (waits for A1) and writes y; A2 is independent of B1.
    ops::host_callback(&a, sleeper(40), &[], std::slice::from_ref(&x)).unwrap();
    ops::host_callback(
        &b,
        sleeper(40),
        std::slice::from_ref(&x),
        std::slice::from_ref(&y),
    )
    .unwrap();
    ops::host_callback(&a, sleeper(40), &[], std::slice::from_ref(&z)).unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    trace::stop().unwrap();
    assert!(!trace::is_tracing());

    let ev = events(&path);
    let _ = std::fs::remove_file(&path);
    check(&ev);
    let name = |tid: u64| {
        ev.iter()
            .find(|e| e.str("name") == Some("thread_name") && track(e) == (1, tid))
            .and_then(|e| e.get("args").and_then(|a| a.str("name")).map(String::from))
    };
    assert_eq!(
        name(a.id).as_deref(),
        Some(&*format!("copy (stream #{})", a.id))
    );
    assert_eq!(
        name(b.id).as_deref(),
        Some(&*format!("compute (stream #{})", b.id))
    );
    // Device spans (pid 2): B1 starts after A1 ended; A2 overlaps B1.
    let (a1, b1, a2) = (
        span_seq(&ev, 2, a.id, 1),
        span_seq(&ev, 2, b.id, 1),
        span_seq(&ev, 2, a.id, 2),
    );
    let ts = |e: &Json| e.num("ts").unwrap();
    assert!(
        ts(b1) >= end(a1),
        "B1 {b1:?} started before A1 {a1:?} ended"
    );
    assert!(
        ts(a2) < end(b1) && ts(b1) < end(a2),
        "A2 {a2:?} and B1 {b1:?} do not overlap"
    );
    assert!(end(b1) - ts(b1) >= 35_000.0, "B1 lasts its 40 ms: {b1:?}");
    // The one wait the engine inserted is an arrow from A1's host span to B1's.
    let flows: Vec<&Json> = ev.iter().filter(|e| e.str("ph") == Some("s")).collect();
    assert_eq!(flows.len(), 1, "one wait, one arrow");
    let s = flows[0];
    let f = ev
        .iter()
        .find(|e| e.str("ph") == Some("f") && e.num("id") == s.num("id"))
        .unwrap();
    let (ha1, hb1) = (span_seq(&ev, 1, a.id, 1), span_seq(&ev, 1, b.id, 1));
    assert_eq!(track(s), (1, a.id));
    assert_eq!(track(f), (1, b.id));
    assert!(ts(ha1) <= ts(s) && ts(s) <= end(ha1));
    assert!(ts(hb1) <= ts(f) && ts(f) <= end(hb1));
    assert_eq!(b.waits(), 1);
}

#[test]
fn a_trace_of_everything_is_well_formed() {
    let _g = serial();
    let dev = Device::open_default().unwrap();
    let (a, b) = (stream(&dev, "one"), stream(&dev, "two"));
    let path = tmp("everything");
    trace::start(&path, TraceOptions { device_every: 2 }).unwrap();
    let x = Buffer::alloc(&a, 1 << 16).unwrap();
    let y = Buffer::alloc(&b, 1 << 16).unwrap();
    let p = Buffer::alloc_pinned(&dev, 1 << 16).unwrap();
    for _ in 0..5 {
        ops::copy(&a, &x, 0, &p, 0, 1 << 16).unwrap();
        ops::copy(&b, &y, 0, &x, 0, 1 << 16).unwrap();
        ops::memset(&a, &x, 0, 1, 1 << 10).unwrap();
    }
    // An explicit record and wait, a foreign op, a capture, a graph launch.
    let ev_a = a.record(false).unwrap();
    b.wait_event(&ev_a).unwrap();
    let op = sluice::engine::ForeignOp::begin(&b, vec![x.sync.clone()], vec![]).unwrap();
    op.end().unwrap();
    sluice::capture::capture_begin(&a, sluice::backend::CaptureMode::Relaxed).unwrap();
    ops::memset(&a, &x, 0, 2, 64).unwrap();
    let g = sluice::capture::capture_end(&a).unwrap();
    let exec = g.instantiate().unwrap();
    exec.launch(&b).unwrap();
    // A prefetcher batch.
    let pf = sluice::prefetch::Prefetcher::create(&dev, 2, &[256]).unwrap();
    pf.push(&[&[7u8; 256]], None).unwrap();
    let batch = pf.next(&b, None).unwrap();
    pf.release(batch.seq).unwrap();
    pf.close();
    drop((x, y, p, exec, g));
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    trace::stop().unwrap();
    let ev = events(&path);
    let _ = std::fs::remove_file(&path);
    check(&ev);
    let has = |ph: &str, name: &str| {
        ev.iter()
            .any(|e| e.str("ph") == Some(ph) && e.str("name") == Some(name))
    };
    for (ph, name) in [
        ("X", "copy H2D"),
        ("X", "copy D2D"),
        ("X", "memset"),
        ("X", "record"),
        ("X", "wait event"),
        ("X", "op begin"),
        ("X", "op end"),
        ("X", "free"),
        ("X", "graph launch"),
        ("X", "graph instantiate"),
        ("B", "capture"),
        ("E", "capture"),
        ("i", "alloc"),
        ("i", "free"),
        ("i", "prefetch submit"),
        ("b", "batch"),
        ("n", "batch"),
        ("e", "batch"),
    ] {
        assert!(has(ph, name), "no {ph} event named {name}");
    }
    assert!(ev
        .iter()
        .any(|e| e.get("pid") == Some(&Json::Num(2.0)) && e.str("ph") == Some("X")));
    assert!(ev.iter().any(|e| e.str("ph") == Some("s")));
}

#[test]
fn a_flushed_trace_is_a_valid_prefix_and_start_stop_are_checked() {
    let _g = serial();
    trace::stop().unwrap(); // nothing to stop: fine
    trace::flush().unwrap(); // nothing to flush: fine
    let dev = Device::open_default().unwrap();
    let s = stream(&dev, "prefix");
    let path = tmp("prefix");
    trace::start(&path, TraceOptions::default()).unwrap();
    let e = trace::start(&tmp("second"), TraceOptions::default()).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    let o = SyncObject::new();
    for _ in 0..3 {
        ops::host_callback(&s, || 0, &[], std::slice::from_ref(&o)).unwrap();
    }
    trace::flush().unwrap();
    // As a crash would leave it: no closing bracket, and valid once it is added.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with('[') && !text.trim_end().ends_with(']'));
    match parse(&format!("{text}\n]")).unwrap() {
        Json::Arr(v) => {
            check(&v);
            assert!(
                v.iter()
                    .filter(|e| e.str("name") == Some("host fn"))
                    .count()
                    == 3
            );
        }
        _ => panic!("not an array"),
    }
    trace::stop().unwrap();
    check(&events(&path));
    let _ = std::fs::remove_file(&path);
    let bad = trace::start(
        &PathBuf::from("/nonexistent-dir/x.json"),
        TraceOptions::default(),
    );
    assert_eq!(bad.unwrap_err().code, ErrorCode::InvalidArgument);
    assert!(!trace::is_tracing());
}

// ---- counters ----

fn delta(after: &Counters, before: &Counters) -> HashMap<&'static str, i64> {
    after
        .fields()
        .into_iter()
        .zip(before.fields())
        .map(|((n, a), (_, b))| (n, a as i64 - b as i64))
        .filter(|(_, d)| *d != 0)
        .collect()
}

/// Two streams, three copies and a memset, allocations and frees. Returns the
/// counters' change and the bytes read back.
fn engine_script(dev: &Arc<Device>) -> (HashMap<&'static str, i64>, Vec<u8>) {
    dev.pinned.trim_to(dev, 0);
    let (a, b) = (stream(dev, "a"), stream(dev, "b"));
    let before = dev.counters();
    let x = Buffer::alloc(&a, 4096).unwrap();
    let p = Buffer::alloc_pinned(dev, 4096).unwrap();
    ops::copy(&a, &x, 0, &p, 0, 4096).unwrap(); // H2D; nothing to wait for
    ops::copy(&b, &p, 0, &x, 0, 4096).unwrap(); // D2H; waits on a (twice: one dedup)
    ops::copy(&a, &x, 0, &p, 0, 4096).unwrap(); // waits on b (one dedup, one same-stream)
    ops::memset(&a, &x, 0, 3, 4096).unwrap(); // same-stream only
    drop(x); // same-stream free, into a's block cache
    let x2 = Buffer::alloc(&a, 4096).unwrap(); // a hit
    drop(x2);
    a.trim_block_cache().unwrap(); // one trim
    drop(p); // into the pinned cache
    let after = dev.counters();
    let data = {
        let y = Buffer::alloc(&b, 64).unwrap();
        ops::memset(&b, &y, 0, 9, 64).unwrap();
        let mut out = vec![0u8; 64];
        ops::copy_to_host(&b, &mut out, &y, 0).unwrap();
        out
    };
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    (delta(&after, &before), data)
}

#[test]
fn counters_match_a_scripted_sequence_exactly() {
    let _g = serial();
    let dev = Device::open_default().unwrap();
    counters::set_enabled(true);
    let (d, _) = engine_script(&dev);
    counters::set_enabled(false);
    let want: HashMap<&str, i64> = [
        ("waits_inserted", 2),
        ("waits_deduplicated", 2),
        ("waits_skipped_same_stream", 3),
        ("events_recorded", 4),
        ("events_created", 3),
        ("events_recycled", 1),
        ("events_in_pools", 1),
        ("bytes_h2d", 8192),
        ("bytes_d2h", 4096),
        ("device_alloc_hits", 1),
        ("device_alloc_misses", 1),
        ("device_alloc_trims", 1),
        ("pinned_alloc_misses", 1),
        ("pinned_bytes_cached", 4096),
    ]
    .into_iter()
    .collect();
    assert_eq!(d, want);
    // Off, the op-path counters stand still; the others still count.
    let (d, _) = engine_script(&dev);
    for k in [
        "waits_deduplicated",
        "waits_skipped_same_stream",
        "bytes_h2d",
        "bytes_d2h",
    ] {
        assert_eq!(d.get(k), None, "{k} counted while off");
    }
    assert_eq!(d.get("waits_inserted"), Some(&2));
    // The process's counters include this device's.
    let all = counters::process();
    assert!(all.events_recorded >= dev.counters().events_recorded);
}

#[test]
fn graph_and_prefetch_counters() {
    let _g = serial();
    let dev = Device::open_default().unwrap();
    let s = stream(&dev, "graphs");
    let buf = Buffer::alloc(&s, 256).unwrap();
    let before = dev.counters();
    let cache = GraphCache::new(&dev);
    for _ in 0..3 {
        cache
            .run(1, &s, &mut || ops::memset(&s, &buf, 0, 1, 256))
            .unwrap();
    }
    let capture = |n: usize| {
        sluice::capture::capture_begin(&s, sluice::backend::CaptureMode::Relaxed).unwrap();
        for _ in 0..n {
            ops::memset(&s, &buf, 0, 2, 256).unwrap();
        }
        sluice::capture::capture_end(&s).unwrap()
    };
    let exec = capture(1).instantiate().unwrap();
    exec.update(&capture(1)).unwrap(); // in place
    exec.update(&capture(2)).unwrap(); // topology changed: re-instantiated
    let pf = sluice::prefetch::Prefetcher::create(&dev, 1, &[64]).unwrap();
    let e = pf.next(&s, Some(Duration::from_millis(5))).unwrap_err();
    assert_eq!(e.error.code, ErrorCode::Timeout);
    pf.close();
    s.synchronize().unwrap();
    let d = delta(&dev.counters(), &before);
    assert_eq!(d.get("graph_cache_eager"), Some(&1));
    assert_eq!(d.get("graph_cache_captures"), Some(&1));
    assert_eq!(d.get("graph_cache_hits"), Some(&1));
    assert_eq!(d.get("graph_updates"), Some(&1));
    assert_eq!(d.get("graph_update_fallbacks"), Some(&1));
    assert!(d.get("prefetch_consumer_waits").is_some_and(|&n| n >= 1));
    assert!(d
        .get("prefetch_consumer_wait_ns")
        .is_some_and(|&n| n >= 4_000_000));
}

// ---- logs ----

/// The engine script, a capture aborted by a host sync, a graph update that falls
/// back, a pinned trim: what they return and what they count.
fn logged_script(dev: &Arc<Device>) -> (HashMap<&'static str, i64>, Vec<u8>, Vec<String>) {
    let (d, data) = engine_script(dev);
    let s = stream(dev, "logs");
    let buf = Buffer::alloc(&s, 256).unwrap();
    sluice::capture::capture_begin(&s, sluice::backend::CaptureMode::Relaxed).unwrap();
    ops::memset(&s, &buf, 0, 1, 256).unwrap();
    let e1 = s.synchronize().unwrap_err();
    let e2 = match sluice::capture::capture_end(&s) {
        Ok(_) => panic!("a poisoned capture ended"),
        Err(e) => e,
    };
    let capture = |n: usize| {
        sluice::capture::capture_begin(&s, sluice::backend::CaptureMode::Relaxed).unwrap();
        for _ in 0..n {
            ops::memset(&s, &buf, 0, 2, 256).unwrap();
        }
        sluice::capture::capture_end(&s).unwrap()
    };
    let exec = capture(1).instantiate().unwrap();
    let outcome = exec.update(&capture(3)).unwrap();
    dev.pinned.trim_to(dev, 0);
    s.synchronize().unwrap();
    let results = vec![
        format!("{:?}", e1.code),
        format!("{:?}", e2.code),
        format!("{outcome:?}"),
    ];
    (d, data, results)
}

#[test]
fn logging_on_and_off_changes_no_result() {
    let _g = serial();
    let dev = Device::open_default().unwrap();
    counters::set_enabled(true);
    log::set_level(LogLevel::Off);
    let got: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = got.clone();
    log::set_callback(Some(Box::new(move |l, m| {
        sink.lock().unwrap().push((l, m.to_string()))
    })));
    let off = logged_script(&dev);
    assert!(got.lock().unwrap().is_empty(), "logged while off");
    log::set_level(LogLevel::Debug);
    let on = logged_script(&dev);
    log::set_level(LogLevel::Off);
    log::set_callback(None);
    counters::set_enabled(false);
    assert_eq!(off, on, "logging changed a result or a counter");
    let msgs = got.lock().unwrap().clone();
    let any = |l: LogLevel, part: &str| msgs.iter().any(|(x, m)| *x == l && m.contains(part));
    assert!(
        any(LogLevel::Warn, "poisoned: stream synchronize"),
        "{msgs:#?}"
    );
    assert!(any(LogLevel::Info, "in-place update refused"), "{msgs:#?}");
    assert!(any(LogLevel::Info, "block cache trimmed"), "{msgs:#?}");
    assert!(any(LogLevel::Info, "pinned cache trimmed"), "{msgs:#?}");
    // Levels filter: at warn, the info messages are gone.
    got.lock().unwrap().clear();
    let sink = got.clone();
    log::set_callback(Some(Box::new(move |l, m| {
        sink.lock().unwrap().push((l, m.to_string()))
    })));
    log::set_level(LogLevel::Warn);
    logged_script(&dev);
    log::set_level(LogLevel::Off);
    log::set_callback(None);
    let msgs = got.lock().unwrap().clone();
    assert!(
        !msgs.is_empty()
            && msgs
                .iter()
                .all(|(l, _)| matches!(l, LogLevel::Error | LogLevel::Warn))
    );
}
