//! The table "Op bookkeeping without kernels": `sluice_op_begin` + `sluice_op_end`
//! pairs over read sets of 1, 4 and 16 sync objects, on 1 and 8 threads.

use crate::harness::*;
use sluice::ffi::*;
use std::ptr::null;
use std::sync::Barrier;

pub fn run(b: &mut Bench) {
    let rows = b.bench_ops();
    print_ops(&rows);
}

struct OpRow {
    objects: usize,
    threads: usize,
    shared: bool,
    per_pair: f64,
    worst_thread: f64,
    total_rate: f64,
}

impl Bench {
    fn bench_ops(&mut self) -> Vec<OpRow> {
        const THREADS: usize = 8;
        const MAX_OBJ: usize = 16;
        let batches = self.cfg.n(50);
        let dev = self.dev;

        let streams: Vec<sluice_stream_t> = (0..THREADS)
            .map(|_| {
                let mut s = sluice_stream_t { bits: 0 };
                ck(
                    sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &mut s),
                    "sluice_stream_create",
                );
                s
            })
            .collect();
        let bufs: Vec<Vec<SBuf>> = (0..THREADS)
            .map(|_| (0..MAX_OBJ).map(|_| SBuf::device(self.sa, 256)).collect())
            .collect();
        s_sync(self.sa);
        let syncs: Vec<Vec<sluice_sync_t>> = bufs
            .iter()
            .map(|v| v.iter().map(|b| b.sync).collect())
            .collect();

        // One thread's loop: `batches` x BATCH op_begin/op_end pairs reading `objs`.
        let worker = |s: sluice_stream_t, objs: &[sluice_sync_t], barrier: &Barrier| -> f64 {
            let mut op = sluice_op_t { bits: 0 };
            let pair = |op: &mut sluice_op_t| {
                ck(
                    sluice_op_begin(s, objs.as_ptr(), objs.len(), null(), 0, op),
                    "sluice_op_begin",
                );
                ck(sluice_op_end(*op), "sluice_op_end");
            };
            for _ in 0..BATCH {
                pair(&mut op); // warm-up: binds the context on this thread
            }
            s_sync(s);
            barrier.wait();
            per_call(batches, || pair(&mut op), || s_sync(s))
        };

        let mut rows = Vec::new();
        for &k in &[1usize, 4, 16] {
            for &(threads, shared) in &[(1usize, true), (THREADS, true), (THREADS, false)] {
                let mut means = Vec::new();
                let mut worsts = Vec::new();
                let mut rates = Vec::new();
                for rep in 0..=self.cfg.reps {
                    let barrier = Barrier::new(threads);
                    let per_thread: Vec<f64> = std::thread::scope(|sc| {
                        let hs: Vec<_> = (0..threads)
                            .map(|t| {
                                let objs = if shared {
                                    &syncs[0][..k]
                                } else {
                                    &syncs[t][..k]
                                };
                                let (s, b, w) = (streams[t], &barrier, &worker);
                                sc.spawn(move || w(s, objs, b))
                            })
                            .collect();
                        hs.into_iter()
                            .map(|h| {
                                h.join()
                                    .unwrap_or_else(|_| fail("op bench thread panicked"))
                            })
                            .collect()
                    });
                    if rep == 0 {
                        continue; // warm-up repetition
                    }
                    let worst = per_thread.iter().copied().fold(0.0, f64::max);
                    means.push(per_thread.iter().sum::<f64>() / threads as f64);
                    worsts.push(worst);
                    rates.push(threads as f64 / worst);
                }
                rows.push(OpRow {
                    objects: k,
                    threads,
                    shared,
                    per_pair: median(means),
                    worst_thread: median(worsts),
                    total_rate: median(rates),
                });
            }
        }

        for v in bufs {
            for b in v {
                b.free();
            }
        }
        s_sync(self.sa);
        for s in streams {
            ck(sluice_stream_destroy(s), "sluice_stream_destroy");
        }
        rows
    }
}

fn print_ops(rows: &[OpRow]) {
    println!("## Op bookkeeping without kernels (sluice_op_begin + sluice_op_end, read sets)\n");
    println!("| sync objects | threads | objects | ns/pair (mean per thread) | slowest thread ns/pair | total Mpairs/s |");
    println!("|---:|---:|---|---:|---:|---:|");
    for r in rows {
        let objs = if r.threads == 1 {
            "—"
        } else if r.shared {
            "shared (read-only)"
        } else {
            "disjoint"
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} |",
            r.objects,
            r.threads,
            objs,
            r.per_pair * 1e9,
            r.worst_thread * 1e9,
            r.total_rate / 1e6
        );
    }
    println!();
}
