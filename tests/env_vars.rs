//! The environment variables the library reads at first use, each set for a child
//! process (this test binary run again on one `child_*` test): `SLUICE_ENGINE`,
//! `SLUICE_GRAPHS`, `SLUICE_GRAPH_DOT_DIR` and `SLUICE_GRAPH_CACHE_MAX`.

mod common;

use common::kit;
use sluice::backend::CaptureMode;
use sluice::engine::{engine_mode, EngineMode};
use sluice::graph_cache::{graphs_enabled, GraphCache};
use sluice::{capture, Buffer};
use std::time::{Duration, Instant};

/// Runs the child test `name` with `vars` set; it passes only when the child does.
fn in_child(name: &str, vars: &[(&str, &str)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("SLUICE_ENV_CHILD", "1");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child {name} with {vars:?} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_child() -> bool {
    std::env::var_os("SLUICE_ENV_CHILD").is_some()
}

#[test]
fn child_engine_sync() {
    if !is_child() {
        return;
    }
    assert_eq!(engine_mode(), EngineMode::Sync);
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, 256);
    let t0 = Instant::now();
    k.fill(&s, &x, 7, 200_000_000);
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "the op returned before its work was done"
    );
}

#[test]
fn sluice_engine_sync_makes_every_op_synchronous() {
    if is_child() {
        return;
    }
    in_child("child_engine_sync", &[("SLUICE_ENGINE", "sync")]);
    assert_eq!(engine_mode(), EngineMode::Async, "the parent is untouched");
}

#[test]
fn child_graphs_off() {
    if !is_child() {
        return;
    }
    assert!(!graphs_enabled());
    let k = kit();
    let s = k.stream();
    let cache = GraphCache::new(&k.dev);
    for _ in 0..4 {
        cache.run(1, &s, &mut || Ok(())).unwrap();
    }
    let st = cache.stats();
    assert_eq!((st.eager, st.captured, st.replayed), (4, 0, 0));
}

#[test]
fn sluice_graphs_0_makes_caches_eager() {
    if is_child() {
        return;
    }
    in_child("child_graphs_off", &[("SLUICE_GRAPHS", "0")]);
}

#[test]
fn child_graph_cache_max() {
    if !is_child() {
        return;
    }
    let k = kit();
    let s = k.stream();
    let cache = GraphCache::new(&k.dev);
    assert_eq!(cache.max_entries(), 3);
    for key in 0..10 {
        cache.run(key, &s, &mut || Ok(())).unwrap();
    }
    assert_eq!(cache.stats().entries, 3);
    assert_eq!(cache.stats().evictions, 7);
}

#[test]
fn sluice_graph_cache_max_bounds_new_caches() {
    if is_child() {
        return;
    }
    in_child("child_graph_cache_max", &[("SLUICE_GRAPH_CACHE_MAX", "3")]);
}

#[test]
fn child_graph_dot_dir() {
    if !is_child() {
        return;
    }
    let dir = std::env::var("SLUICE_GRAPH_DOT_DIR").unwrap();
    let k = kit();
    let s = k.stream();
    let x: std::sync::Arc<Buffer> = k.buffer(&s, 64);
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.fill(&s, &x, 1, 0);
    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    let dots: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "dot"))
        .collect();
    assert_eq!(dots.len(), 1, "one graph instantiated, one DOT file");
    let text = std::fs::read_to_string(dots[0].path()).unwrap();
    assert!(text.contains("digraph"), "{text}");
}

#[test]
fn sluice_graph_dot_dir_writes_each_instantiated_graph() {
    if is_child() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sluice-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    in_child(
        "child_graph_dot_dir",
        &[("SLUICE_GRAPH_DOT_DIR", dir.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
