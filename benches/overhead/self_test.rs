//! The kernel self-test: before any timing, every test kernel runs once through
//! sluice and its output is checked.

use crate::harness::*;
use sluice::ffi::*;
use std::time::{Duration, Instant};

/// Runs every test kernel once through sluice and checks its output.
pub fn run(bench: &Bench) {
    let s = bench.sa;
    let n: usize = 100_003; // not a multiple of the grid: exercises the stride loops
    let grid = dims(8, 256);
    let (a, b, c) = (
        SBuf::device(s, n * 4),
        SBuf::device(s, n * 4),
        SBuf::device(s, n * 4),
    );
    let mut n64 = n as u64;
    let read = |buf: &SBuf| bytes_to_words(&s_read(s, buf));

    // fill
    let (mut pa, mut val) = (a.dptr, 0xDEAD_BEEFu32);
    s_launch(
        s,
        bench.s_fill,
        &grid,
        &mut [arg(&mut pa), arg(&mut n64), arg(&mut val)],
        &[],
        &[a.sync],
        "launch sluice_fill",
    );
    check_words(&read(&a), &vec![0xDEAD_BEEF; n], "sluice_fill");

    // upload a per-element pattern into b
    let p: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ 0xA5A5_A5A5)
        .collect();
    s_write(s, &b, &words_to_bytes(&p));

    // spin_fill, timed against its spin
    let spin_ns: u64 = 2_000_000;
    let (mut pc, mut seven, mut spin) = (c.dptr, 7u32, spin_ns);
    s_sync(s);
    let t0 = Instant::now();
    s_launch(
        s,
        bench.s_spin_fill,
        &grid,
        &mut [arg(&mut pc), arg(&mut n64), arg(&mut seven), arg(&mut spin)],
        &[],
        &[c.sync],
        "launch sluice_spin_fill",
    );
    s_sync(s);
    let took = t0.elapsed();
    check_words(&read(&c), &vec![7; n], "sluice_spin_fill");
    if took < Duration::from_nanos(spin_ns * 9 / 10) {
        eprintln!(
            "WARNING: sluice_spin_fill with a {} µs spin finished in {:.1} µs: \
             %globaltimer spins are shorter than asked on this GPU",
            spin_ns / 1000,
            took.as_secs_f64() * 1e6
        );
    }

    // add: a += b (wrapping)
    let (mut pa, mut pb) = (a.dptr, b.dptr);
    s_launch(
        s,
        bench.s_add,
        &grid,
        &mut [arg(&mut pa), arg(&mut pb), arg(&mut n64)],
        &[b.sync],
        &[a.sync],
        "launch sluice_add",
    );
    let want: Vec<u32> = p.iter().map(|x| 0xDEAD_BEEFu32.wrapping_add(*x)).collect();
    check_words(&read(&a), &want, "sluice_add");

    // spin_add: a += b again
    let (mut pa, mut pb, mut spin) = (a.dptr, b.dptr, 100_000u64);
    s_launch(
        s,
        bench.s_spin_add,
        &grid,
        &mut [arg(&mut pa), arg(&mut pb), arg(&mut n64), arg(&mut spin)],
        &[b.sync],
        &[a.sync],
        "launch sluice_spin_add",
    );
    let want: Vec<u32> = want
        .iter()
        .zip(&p)
        .map(|(x, y)| x.wrapping_add(*y))
        .collect();
    check_words(&read(&a), &want, "sluice_spin_add");

    // spin_copy: c = a
    let (mut pc, mut pa, mut spin) = (c.dptr, a.dptr, 100_000u64);
    s_launch(
        s,
        bench.s_spin_copy,
        &grid,
        &mut [arg(&mut pc), arg(&mut pa), arg(&mut n64), arg(&mut spin)],
        &[a.sync],
        &[c.sync],
        "launch sluice_spin_copy",
    );
    check_words(&read(&c), &want, "sluice_spin_copy");

    // bounds: n smaller than the grid leaves the rest alone
    ck(
        sluice_stream_memset(s, b.h, 0, 0, 64),
        "sluice_stream_memset",
    );
    let (mut pb, mut five, mut one) = (b.dptr, 5u64, 1u32);
    s_launch(
        s,
        bench.s_fill,
        &grid,
        &mut [arg(&mut pb), arg(&mut five), arg(&mut one)],
        &[],
        &[b.sync],
        "launch sluice_fill (n = 5)",
    );
    let got = read(&b);
    check_words(
        &got[..16],
        &[1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "sluice_fill bounds",
    );

    // empty
    s_launch(
        s,
        bench.s_empty,
        &dims(1, 32),
        &mut [],
        &[],
        &[],
        "launch sluice_empty",
    );
    s_sync(s);

    for buf in [a, b, c] {
        buf.free();
    }
    s_sync(s);
    println!("- kernel self-test: all 6 test kernels gave correct results\n");
}
