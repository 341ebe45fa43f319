//! The table "Per-call overhead and bandwidth": one row per primitive, sluice
//! against the raw driver call it makes, with a goal per row.

use crate::harness::*;
use cudarc::driver::sys::{CUdeviceptr, CUevent};
use sluice::ffi::*;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// Size of every bandwidth transfer.
const COPY_BYTES: usize = 64 * MIB;
/// Size of each allocation in the alloc/free row.
const ALLOC_BYTES: usize = MIB;

pub fn run(b: &mut Bench) {
    print_rows_header();
    b.bench_wait_event();
    b.bench_event_record();
    b.bench_launch();
    b.bench_pinned();
    b.bench_pageable();
    b.bench_alloc();
    println!();
}

enum Goal {
    /// Per-call overhead: ratio <= 1.10 or under 100 ns added per sluice call. The
    /// number is how many sluice calls the row makes per raw unit.
    Overhead(u32),
    /// Bandwidth at least this fraction of raw.
    Bandwidth(f64),
    /// sluice at most this many seconds per unit.
    AtMost(f64),
    /// No goal: printed for information, with the reason.
    Info(&'static str),
}

struct Row {
    name: String,
    /// Seconds per unit (call, pair or copy).
    sluice: f64,
    raw: f64,
    /// Bytes per unit for bandwidth rows.
    bytes: usize,
    goal: Goal,
}

impl Bench {
    fn report(&mut self, r: Row) {
        print_row(&r, &mut self.goals);
    }

    fn bench_wait_event(&mut self) {
        let batches = self.cfg.n(100);
        let (sa, sb, ra, rb, d) = (self.sa, self.sb, self.ra, self.rb, self.d);

        let mut ev = sluice_event_t { bits: 0 };
        ck(sluice_event_record(sa, 0, &mut ev), "sluice_event_record");
        s_sync(sa);
        let rev = self.r_event();
        // SAFETY: live event and stream.
        self.cu(unsafe { (d.cuEventRecord)(rev, ra) }, "cuEventRecord");
        self.r_sync(ra);

        let mut sl = || {
            per_call(
                batches,
                || ck(sluice_stream_wait_event(sb, ev), "sluice_stream_wait_event"),
                || s_sync(sb),
            )
        };
        let mut raw = || {
            per_call(
                batches,
                // SAFETY: live stream and event.
                || {
                    cu(
                        d,
                        unsafe { (d.cuStreamWaitEvent)(rb, rev, 0) },
                        "cuStreamWaitEvent",
                    )
                },
                || raw_sync(d, rb),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        ck(sluice_event_destroy(ev), "sluice_event_destroy");
        self.r_event_destroy(rev);
        self.report(Row {
            name: "stream wait on event (cross-stream)".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_event_record(&mut self) {
        let batches = self.cfg.n(100);
        let calls = (batches * BATCH) as f64;
        let (sa, ra, d) = (self.sa, self.ra, self.d);

        // record + destroy (the pooled event is recycled) vs re-recording one event.
        let rev = self.r_event();
        let mut sl = || {
            let mut e = sluice_event_t { bits: 0 };
            per_call(
                batches,
                || {
                    ck(sluice_event_record(sa, 0, &mut e), "sluice_event_record");
                    ck(sluice_event_destroy(e), "sluice_event_destroy");
                },
                || s_sync(sa),
            )
        };
        let mut raw = || {
            per_call(
                batches,
                // SAFETY: live event and stream.
                || cu(d, unsafe { (d.cuEventRecord)(rev, ra) }, "cuEventRecord"),
                || raw_sync(d, ra),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name: "event record + destroy (pooled): 2 sluice calls vs 1 raw record".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(2),
        });

        // record only: BATCH live recordings (the pool was warmed to BATCH events by
        // the warm-up pass), destroyed after the timed part; raw records BATCH
        // distinct pre-created events.
        let revs: Vec<CUevent> = (0..BATCH).map(|_| self.r_event()).collect();
        let mut handles = vec![sluice_event_t { bits: 0 }; BATCH];
        let mut created = Vec::new();
        let mut sl = || {
            let before = stats(sa).events_created;
            let mut t = Duration::ZERO;
            for _ in 0..batches {
                let t0 = Instant::now();
                for h in handles.iter_mut() {
                    ck(sluice_event_record(sa, 0, h), "sluice_event_record");
                }
                t += t0.elapsed();
                for h in handles.iter() {
                    ck(sluice_event_destroy(*h), "sluice_event_destroy");
                }
                s_sync(sa);
            }
            created.push(stats(sa).events_created - before);
            secs(t) / calls
        };
        let mut raw = || {
            let mut t = Duration::ZERO;
            for _ in 0..batches {
                let t0 = Instant::now();
                for e in revs.iter() {
                    // SAFETY: live event and stream.
                    cu(d, unsafe { (d.cuEventRecord)(*e, ra) }, "cuEventRecord");
                }
                t += t0.elapsed();
                raw_sync(d, ra);
            }
            secs(t) / calls
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        // After the warm-up pass the pool must serve every recording.
        if created.iter().skip(1).any(|&c| c != 0) {
            eprintln!(
                "WARNING: record-only: the event pool created events after warm-up \
                 ({created:?}); that row includes cuEventCreate calls"
            );
        }
        for e in revs {
            self.r_event_destroy(e);
        }
        self.r_event_destroy(rev);
        self.report(Row {
            name: format!("event record only ({BATCH} live, pool warm)"),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_launch(&mut self) {
        let n = self.cfg.n(20_000);
        let (sa, ra) = (self.sa, self.ra);
        let (sf, rf) = (self.s_empty, self.r_empty);
        let dm = dims(1, 32);
        let mut sl = || {
            per_op(
                n,
                || {
                    ck(
                        sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                        "sluice_stream_launch(sluice_empty)",
                    )
                },
                || s_sync(sa),
            )
        };
        let me = &*self;
        let mut raw = || {
            per_op(
                n,
                || me.r_launch(rf, 1, 32, ra, null_mut()),
                || me.r_sync(ra),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name: format!("empty-kernel launch ({n} back-to-back + sync)"),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Overhead(1),
        });
    }

    fn bench_pinned(&mut self) {
        let copies = self.cfg.n(20);
        let (sa, ra, dev) = (self.sa, self.ra, self.dev);
        let len = COPY_BYTES;

        // Both sides copy between the same memory: sluice's pinned blocks come from
        // cuMemHostAlloc(PORTABLE) and its device buffer from cuMemAllocAsync, so the
        // raw side uses their addresses directly. Only the API path differs (no NUMA
        // or placement differences between two sets of allocations).
        let (src, dst, dbuf) = (
            SBuf::pinned(dev, len),
            SBuf::pinned(dev, len),
            SBuf::device(sa, len),
        );
        s_sync(sa);
        src.host_fill(|b| pattern(b, 1));
        dst.host_fill(|b| b.fill(0));

        // Correctness once per path: host -> device -> host round trip, byte for byte.
        ck(
            sluice_stream_copy(sa, dbuf.h, 0, src.h, 0, len),
            "sluice_stream_copy H2D",
        );
        ck(
            sluice_stream_copy(sa, dst.h, 0, dbuf.h, 0, len),
            "sluice_stream_copy D2H",
        );
        s_sync(sa);
        check_bytes(
            dst.host_bytes(),
            src.host_bytes(),
            "sluice pinned round trip",
        );
        dst.host_fill(|b| b.fill(0));
        ck(
            sluice_stream_memset(sa, dbuf.h, 0, 0, len),
            "sluice_stream_memset",
        );
        s_sync(sa);
        self.r_copy(dbuf.dptr, src.host as u64, len, ra);
        self.r_copy(dst.host as u64, dbuf.dptr, len, ra);
        self.r_sync(ra);
        check_bytes(dst.host_bytes(), src.host_bytes(), "raw pinned round trip");
        dst.host_fill(|b| b.fill(0));

        let me = &*self;
        let timed = |to: sluice_buffer_t, from: sluice_buffer_t| {
            per_op(
                copies,
                || {
                    ck(
                        sluice_stream_copy(sa, to, 0, from, 0, len),
                        "sluice_stream_copy",
                    )
                },
                || s_sync(sa),
            )
        };
        let raw_timed =
            |to: u64, from: u64| per_op(copies, || me.r_copy(to, from, len, ra), || me.r_sync(ra));
        let (hsrc, hdst) = (src.host as u64, dst.host as u64);
        let h2d = measure(
            self.cfg.reps,
            &mut [&mut || timed(dbuf.h, src.h), &mut || {
                raw_timed(dbuf.dptr, hsrc)
            }],
        );
        let d2h = measure(
            self.cfg.reps,
            &mut [&mut || timed(dst.h, dbuf.h), &mut || {
                raw_timed(hdst, dbuf.dptr)
            }],
        );
        // The timed D2H copies landed (dst was zeroed before them).
        s_sync(sa);
        self.r_sync(ra);
        check_bytes(
            dst.host_bytes(),
            src.host_bytes(),
            "pinned D2H after timing",
        );

        for b in [src, dst, dbuf] {
            b.free();
        }
        s_sync(sa);
        // Release the cached pinned blocks (and the recordings they keep).
        ck(sluice_device_pinned_trim(dev), "sluice_device_pinned_trim");
        self.report(Row {
            name: "H2D pinned, 64 MiB (sluice_stream_copy vs cuMemcpyAsync)".into(),
            sluice: h2d[0],
            raw: h2d[1],
            bytes: len,
            goal: Goal::Bandwidth(0.97),
        });
        self.report(Row {
            name: "D2H pinned, 64 MiB (sluice_stream_copy vs cuMemcpyAsync)".into(),
            sluice: d2h[0],
            raw: d2h[1],
            bytes: len,
            goal: Goal::Bandwidth(0.97),
        });
    }

    fn bench_pageable(&mut self) {
        let copies = self.cfg.n(10);
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let len = COPY_BYTES;
        // As for pinned copies, both sides use the same device buffer and host memory.
        let s_dev = SBuf::device(sa, len);
        let r_dev = s_dev.dptr;
        let mut src = vec![0u8; len];
        pattern(&mut src, 3);
        let mut dst = vec![0u8; len]; // zeroed and touched: resident pages

        // Correctness once, both paths.
        s_write(sa, &s_dev, &src);
        ck(
            sluice_stream_copy_to_host(sa, dst.as_mut_ptr().cast(), s_dev.h, 0, len),
            "sluice_stream_copy_to_host",
        );
        check_bytes(&dst, &src, "sluice pageable round trip");
        dst.fill(0);
        ck(
            sluice_stream_memset(sa, s_dev.h, 0, 0, len),
            "sluice_stream_memset",
        );
        s_sync(sa);
        self.r_write(r_dev, &src, ra);
        self.r_copy(dst.as_mut_ptr() as u64, r_dev, len, ra);
        self.r_sync(ra);
        check_bytes(&dst, &src, "raw pageable round trip");
        dst.fill(0);

        let src_p = src.as_ptr();
        let h2d = {
            let mut sl = || {
                per_op(
                    copies,
                    || {
                        ck(
                            sluice_stream_copy_from_host(sa, s_dev.h, 0, src_p.cast(), len),
                            "sluice_stream_copy_from_host",
                        )
                    },
                    || s_sync(sa),
                )
            };
            let mut raw = || {
                per_op(
                    copies,
                    || {
                        // SAFETY: the device buffer holds len bytes; src is live for len bytes.
                        let res = unsafe { (d.cuMemcpyHtoDAsync_v2)(r_dev, src_p.cast(), len, ra) };
                        cu(d, res, "cuMemcpyHtoDAsync");
                    },
                    || raw_sync(d, ra),
                )
            };
            measure(self.cfg.reps, &mut [&mut sl, &mut raw])
        };
        let dst_p = dst.as_mut_ptr();
        let d2h = {
            // Each copy is synchronous (the raw one synchronizes itself): nothing
            // is left to wait for after the loop.
            let mut sl = || {
                per_op(
                    copies,
                    || {
                        ck(
                            sluice_stream_copy_to_host(sa, dst_p.cast(), s_dev.h, 0, len),
                            "sluice_stream_copy_to_host",
                        )
                    },
                    || {},
                )
            };
            let mut raw = || {
                per_op(
                    copies,
                    || {
                        // SAFETY: dst is live for len bytes; the device buffer holds len bytes.
                        let res = unsafe { (d.cuMemcpyAsync)(dst_p as u64, r_dev, len, ra) };
                        cu(d, res, "cuMemcpyAsync (D2H pageable)");
                        raw_sync(d, ra);
                    },
                    || {},
                )
            };
            measure(self.cfg.reps, &mut [&mut sl, &mut raw])
        };
        // The device buffer holds `src`, so the timed D2H copies left `src` in dst.
        check_bytes(&dst, &src, "pageable D2H after timing");

        s_dev.free();
        s_sync(sa);
        self.report(Row {
            name: "H2D pageable, 64 MiB (sluice_stream_copy_from_host vs cuMemcpyHtoDAsync)".into(),
            sluice: h2d[0],
            raw: h2d[1],
            bytes: len,
            goal: Goal::Info("none (issue 2 sets a goal for pinned copies only)"),
        });
        self.report(Row {
            name: "D2H pageable, 64 MiB (sluice_stream_copy_to_host vs cuMemcpyAsync + sync)"
                .into(),
            sluice: d2h[0],
            raw: d2h[1],
            bytes: len,
            goal: Goal::Info("none (issue 2 sets a goal for pinned copies only)"),
        });
    }

    fn bench_alloc(&mut self) {
        let batches = self.cfg.n(100);
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let mut sl = || {
            let mut b = sluice_buffer_t { bits: 0 };
            per_call(
                batches,
                || {
                    ck(
                        sluice_buffer_alloc(sa, ALLOC_BYTES, &mut b),
                        "sluice_buffer_alloc",
                    );
                    ck(sluice_buffer_free(b), "sluice_buffer_free");
                },
                || s_sync(sa),
            )
        };
        let mut raw = || {
            let mut p: CUdeviceptr = 0;
            per_call(
                batches,
                || {
                    // SAFETY: writes one pointer, then frees it once, both on ra.
                    cu(
                        d,
                        unsafe { (d.cuMemAllocAsync)(&mut p, ALLOC_BYTES, ra) },
                        "cuMemAllocAsync",
                    );
                    // SAFETY: as above.
                    cu(d, unsafe { (d.cuMemFreeAsync)(p, ra) }, "cuMemFreeAsync");
                },
                || raw_sync(d, ra),
            )
        };
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        self.report(Row {
            name:
                "alloc + free pair, 1 MiB, stream block cache (sluice_buffer_alloc/free vs cuMemAllocAsync/FreeAsync)"
                    .into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::AtMost(0.6e-6),
        });
        // The same with the stream's block cache off: every pair goes to the driver.
        ck(
            sluice_stream_set_block_cache_limit(sa, 0),
            "set_block_cache_limit",
        );
        let m = measure(self.cfg.reps, &mut [&mut sl, &mut raw]);
        ck(
            sluice_stream_set_block_cache_limit(sa, 64 << 20),
            "set_block_cache_limit",
        );
        self.report(Row {
            name: "alloc + free pair, 1 MiB, cache off (driver path)".into(),
            sluice: m[0],
            raw: m[1],
            bytes: 0,
            goal: Goal::Info(
                "none: the 0.6 µs goal is for the default path above; raw's own pair is the floor here",
            ),
        });
    }
}

fn print_rows_header() {
    println!("## Per-call overhead and bandwidth\n");
    println!("| primitive | sluice | raw CUDA | sluice/raw | added | goal | result |");
    println!("|---|---:|---:|---:|---:|---|---|");
}

/// Prints one row at once (so a later fatal error keeps the rows measured so far).
/// Rows with bytes are shown as bandwidth, the others as time per unit.
fn print_row(r: &Row, goals: &mut Goals) {
    let bandwidth = r.bytes > 0;
    let value = |t: f64| if bandwidth { gbps(r.bytes, t) } else { us(t) };
    let (ratio, per_copy) = if bandwidth {
        (r.raw / r.sluice, " per copy")
    } else {
        (r.sluice / r.raw, "")
    };
    let add = r.sluice - r.raw;
    let mut added_col = format!("{}{per_copy}", added(r.sluice, r.raw));
    let (goal, ok) = match r.goal {
        Goal::Overhead(calls) => {
            let per_call = add / calls as f64;
            let suffix = if calls > 1 {
                added_col += &format!(" ({:+.0} ns per call)", per_call * 1e9);
                " per call"
            } else {
                ""
            };
            (
                format!("≤ 1.10x or < 100 ns added{suffix}"),
                Some(ratio <= 1.10 || per_call < 100e-9),
            )
        }
        Goal::Bandwidth(min) => (format!("≥ {min:.2}x raw GB/s"), Some(ratio >= min)),
        Goal::AtMost(limit) => (format!("sluice ≤ {}", us(limit)), Some(r.sluice <= limit)),
        Goal::Info(why) => (why.to_string(), None),
    };
    let result = ok.map_or("info", |ok| goals.check(ok));
    println!(
        "| {} | {} | {} | {ratio:.3}x | {added_col} | {goal} | {result} |",
        r.name,
        value(r.sluice),
        value(r.raw),
    );
}
