//! The table "Cross-stream ping-pong chain": `sluice_add` alternating between two
//! streams, each op reading what the other stream wrote last, sluice (tracked and
//! in SLUICE_ENGINE_SYNC mode) against raw CUDA (events, host syncs).

use crate::harness::*;
use sluice::engine::EngineMode;
use sluice::ffi::*;
use std::time::Instant;

/// 32-bit elements of each ping-pong buffer.
const PP_WORDS: usize = 4096;
const PP_BLOCK: u32 = 256;

pub fn run(b: &mut Bench) {
    let pp = b.bench_ping_pong();
    print_ping_pong(&pp, &mut b.goals);
}

struct PingPong {
    tracked: f64,
    raw_events: f64,
    sync_mode: f64,
    raw_host_sync: f64,
    ops: usize,
    waits_per_op: f64,
}

impl Bench {
    fn bench_ping_pong(&mut self) -> PingPong {
        let ops = self.cfg.n(10_000);
        let (sa, sb, ra, rb) = (self.sa, self.sb, self.ra, self.rb);
        let n = PP_WORDS;
        let bytes = n * 4;
        let grid = (n as u32).div_ceil(PP_BLOCK);
        let dm = dims(grid, PP_BLOCK);

        let x0: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let y0: Vec<u32> = (0..n as u32).map(|i| i ^ 0x9E37_79B9).collect();
        let (x0b, y0b) = (words_to_bytes(&x0), words_to_bytes(&y0));
        // Expected result, with u32 wrapping: op k even: x += y (on A); odd: y += x (on B).
        let (mut xe, mut ye) = (x0.clone(), y0.clone());
        for k in 0..ops {
            if k % 2 == 0 {
                xe.iter_mut()
                    .zip(&ye)
                    .for_each(|(a, b)| *a = a.wrapping_add(*b));
            } else {
                ye.iter_mut()
                    .zip(&xe)
                    .for_each(|(a, b)| *a = a.wrapping_add(*b));
            }
        }

        let (x, y) = (SBuf::device(sa, bytes), SBuf::device(sa, bytes));
        let (rx, ry) = (self.r_alloc(bytes), self.r_alloc(bytes));
        let (eva, evb) = (self.r_event(), self.r_event());
        let sf = self.s_add;
        let rf = self.r_add;

        let s_reset = || {
            s_sync(sb);
            s_write(sa, &x, &x0b);
            s_write(sa, &y, &y0b);
            s_sync(sa);
        };
        let s_verify = |what: &str| {
            check_words(&bytes_to_words(&s_read(sa, &x)), &xe, &format!("{what}: x"));
            check_words(&bytes_to_words(&s_read(sa, &y)), &ye, &format!("{what}: y"));
        };
        // One sluice chain: the engine inserts every cross-stream wait.
        let s_chain = || {
            let mut chain = SPingPong::new((sa, sb), sf, dm, (&x, &y), n);
            let t0 = Instant::now();
            for k in 0..ops {
                chain.op(k, "ping-pong launch");
            }
            s_sync(sa);
            s_sync(sb);
            secs(t0.elapsed()) / ops as f64
        };

        let mut waits_seen = Vec::new();
        let mut tracked = || {
            s_reset();
            let w0 = stats(sa).waits + stats(sb).waits;
            let t = s_chain();
            let w = stats(sa).waits + stats(sb).waits - w0;
            // Each op depends on the previous one on the other stream; the data check
            // below is the real test, the count is reported (waits/op in the table).
            if (w as usize) < ops - 1 {
                eprintln!(
                    "WARNING: ping-pong (tracked): the engine inserted {w} waits for {ops} \
                     alternating ops (expected {})",
                    ops - 1
                );
            }
            waits_seen.push(w as f64 / ops as f64);
            s_verify("ping-pong (tracked)");
            t
        };
        let mut sync_mode = || {
            s_reset();
            let e0 = stats(sa).engine_syncs + stats(sb).engine_syncs;
            ck(
                sluice_engine_set_mode(EngineMode::Sync as u32),
                "sluice_engine_set_mode(SYNC)",
            );
            if sluice_engine_mode() != EngineMode::Sync as u32 {
                fail("sluice_engine_mode() does not report SYNC after setting it");
            }
            let t = s_chain();
            ck(
                sluice_engine_set_mode(EngineMode::Async as u32),
                "sluice_engine_set_mode(ASYNC)",
            );
            let e = stats(sa).engine_syncs + stats(sb).engine_syncs - e0;
            if (e as usize) < ops {
                fail(&format!(
                    "ping-pong (sync mode): {e} engine host syncs for {ops} ops (expected {ops})"
                ));
            }
            s_verify("ping-pong (sync mode)");
            t
        };

        let me = &*self;
        let r_reset = || {
            me.r_sync(rb);
            me.r_write(rx, &x0b, ra);
            me.r_write(ry, &y0b, ra);
        };
        let r_verify = |what: &str| {
            check_words(
                &bytes_to_words(&me.r_read(rx, bytes, ra)),
                &xe,
                &format!("{what}: x"),
            );
            check_words(
                &bytes_to_words(&me.r_read(ry, bytes, ra)),
                &ye,
                &format!("{what}: y"),
            );
        };
        let mut raw_events = || {
            r_reset();
            let (mut xa, mut ya, mut na) = (rx, ry, n as u64);
            let (mut yb, mut xb, mut nb) = (ry, rx, n as u64);
            let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
            let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
            let d = me.d;
            let t0 = Instant::now();
            for k in 0..ops {
                if k % 2 == 0 {
                    if k > 0 {
                        // SAFETY: live stream and event.
                        cu(
                            d,
                            unsafe { (d.cuStreamWaitEvent)(ra, evb, 0) },
                            "cuStreamWaitEvent",
                        );
                    }
                    me.r_launch(rf, grid, PP_BLOCK, ra, args_a.as_mut_ptr());
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(eva, ra) }, "cuEventRecord");
                } else {
                    // SAFETY: live stream and event.
                    cu(
                        d,
                        unsafe { (d.cuStreamWaitEvent)(rb, eva, 0) },
                        "cuStreamWaitEvent",
                    );
                    me.r_launch(rf, grid, PP_BLOCK, rb, args_b.as_mut_ptr());
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(evb, rb) }, "cuEventRecord");
                }
            }
            me.r_sync(ra);
            me.r_sync(rb);
            let t = secs(t0.elapsed()) / ops as f64;
            r_verify("ping-pong (raw events)");
            t
        };
        let mut raw_host_sync = || {
            r_reset();
            let (mut xa, mut ya, mut na) = (rx, ry, n as u64);
            let (mut yb, mut xb, mut nb) = (ry, rx, n as u64);
            let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
            let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
            let t0 = Instant::now();
            for k in 0..ops {
                if k % 2 == 0 {
                    me.r_launch(rf, grid, PP_BLOCK, ra, args_a.as_mut_ptr());
                    me.r_sync(ra);
                } else {
                    me.r_launch(rf, grid, PP_BLOCK, rb, args_b.as_mut_ptr());
                    me.r_sync(rb);
                }
            }
            let t = secs(t0.elapsed()) / ops as f64;
            r_verify("ping-pong (raw host sync)");
            t
        };

        let m = measure(
            self.cfg.reps,
            &mut [
                &mut tracked,
                &mut raw_events,
                &mut sync_mode,
                &mut raw_host_sync,
            ],
        );
        let waits_per_op = median_of(waits_seen);

        x.free();
        y.free();
        s_sync(sa);
        self.r_event_destroy(eva);
        self.r_event_destroy(evb);
        self.r_free(rx);
        self.r_free(ry);
        PingPong {
            tracked: m[0],
            raw_events: m[1],
            sync_mode: m[2],
            raw_host_sync: m[3],
            ops,
            waits_per_op,
        }
    }
}

fn print_ping_pong(p: &PingPong, goals: &mut Goals) {
    println!(
        "## Cross-stream ping-pong chain ({} ops, {} u32 per buffer, sluice_add)\n",
        p.ops, PP_WORDS
    );
    println!("| variant | µs/op | ratio of | ratio | goal | result |");
    println!("|---|---:|---|---:|---|---|");
    let ab = p.tracked / p.raw_events;
    let ca = p.sync_mode / p.tracked;
    println!(
        "| (a) sluice tracked (engine waits, {:.2} waits/op) | {:.3} | (a)/(b) | {:.3}x | ≤ 1.10x | {} |",
        p.waits_per_op,
        p.tracked * 1e6,
        ab,
        goals.check(ab <= 1.10)
    );
    println!(
        "| (b) raw CUDA, cuEventRecord + cuStreamWaitEvent | {:.3} | — | — | — | — |",
        p.raw_events * 1e6
    );
    println!(
        "| (c) sluice SLUICE_ENGINE_SYNC | {:.3} | (c)/(a) | {:.3}x | ≥ 2.3x | {} |",
        p.sync_mode * 1e6,
        ca,
        goals.check(ca >= 2.3)
    );
    println!(
        "| (d) raw CUDA, cuStreamSynchronize per op (reference) | {:.3} | (c)/(d) | {:.3}x | — | info |",
        p.raw_host_sync * 1e6,
        p.sync_mode / p.raw_host_sync
    );
    println!();
}
