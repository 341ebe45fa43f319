//! `SLUICE_GRAPHS=0` (process-wide, so this test has its own process).

mod common;
use common::kit;
use sluice::graph_cache::{self, GraphCache};

#[test]
fn disabled_graphs_make_every_cached_run_eager() {
    graph_cache::set_graphs_enabled(false);
    let k = kit();
    let s = k.stream();
    let (x, acc) = (k.buffer(&s, 1024), k.buffer(&s, 1024));
    k.fill(&s, &x, 2, 0);
    k.fill(&s, &acc, 0, 0);
    let cache = GraphCache::new(&k.dev);
    let mut calls = 0;
    for _ in 0..4 {
        cache
            .run(1, &s, &mut || {
                calls += 1;
                k.add(&s, &acc, &x, 0);
                Ok(())
            })
            .unwrap();
    }
    let st = cache.stats();
    assert_eq!((st.eager, st.captured, st.replayed), (4, 0, 0));
    assert_eq!(calls, 4);
    assert!(k.read(&s, &acc).iter().all(|&v| v == 8));
}
