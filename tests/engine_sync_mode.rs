//! `SLUICE_ENGINE=sync` (a process-wide mode, so this test has its own process).

mod common;
use common::kit;
use sluice::engine;

const MS: u64 = 1_000_000;

#[test]
fn engine_sync_mode_synchronises_after_each_op() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, 1024);
    engine::set_engine_mode(engine::EngineMode::Sync);
    k.fill(&s, &x, 4, MS);
    let syncs = s
        .stats
        .engine_syncs
        .load(std::sync::atomic::Ordering::Relaxed);
    engine::set_engine_mode(engine::EngineMode::Async);
    assert!(syncs >= 1);
    assert!(
        s.query().unwrap(),
        "work is complete right after a sync-mode op"
    );
}
