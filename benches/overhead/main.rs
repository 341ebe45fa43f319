//! GPU overhead benchmark: sluice through its C ABI against the raw CUDA driver, in
//! the same process and the same run. Prints Markdown tables.
//!
//! Run: `cargo bench --bench overhead` (or the built binary directly).
//! `SLUICE_BENCH_QUICK=1` cuts iteration counts about 10x; `SLUICE_BENCH_ONLY=ping-pong`
//! runs only the ping-pong chain (a comma-separated list of table names selects
//! several: per-call, ops, graphs, ping-pong, trace-cost); `SLUICE_BENCH_STRICT=1`
//! exits 1 when a goal fails. Without a CUDA device it prints
//! "no CUDA device: skipping" and, when `SLUICE_BENCH_ONLY` names trace-cost, runs
//! that table on the host backend (sluice's own cost on this CPU); it exits 0.
//! Against `tools/mockcuda` (a stand-in libcuda), `SLUICE_BENCH_STANDIN=1` skips the
//! kernel self-test, whose kernels never run there. How every row is measured is in
//! docs/benchmarks-method.md.
//!
//! Every sluice and driver call is checked; any failure, and any wrong result of a
//! verified copy or kernel, aborts the run with a message (exit 1), so a table is
//! never printed from broken work.
//!
//! Layout: this file reads the environment, prints the header, runs the sections
//! and the tables in order and prints the summary; `harness` holds what they all
//! share; each table is a file of its own with `pub fn run(b: &mut Bench)`, declared
//! below and listed in `TABLES`.

mod harness;
mod probes;
mod self_test;

mod graphs;
mod ops;
mod per_call;
mod ping_pong;
mod trace_cost;

use harness::*;
use sluice::backend::cuda::{self, Driver};
use sluice::backend::BackendKind;
use sluice::engine::EngineMode;
use sluice::ffi::*;

/// A table: the name that `SLUICE_BENCH_ONLY` matches, and the function that
/// measures and prints it.
struct Table(&'static str, fn(&mut Bench));

/// The tables, in print order.
const TABLES: &[Table] = &[
    Table("per-call", per_call::run),
    Table("ops", ops::run),
    Table("graphs", graphs::run),
    Table("ping-pong", ping_pong::run),
    Table("trace-cost", trace_cost::run),
];

/// Whether `SLUICE_BENCH_ONLY` (a comma-separated list of table names; unset: all)
/// selects table `name`.
fn selected(name: &str) -> bool {
    match std::env::var("SLUICE_BENCH_ONLY") {
        Ok(v) if !v.trim().is_empty() => v.split(',').any(|t| t.trim() == name),
        _ => true,
    }
}

/// Selected explicitly (not just by default): the host-backend run of a table.
fn named(name: &str) -> bool {
    std::env::var("SLUICE_BENCH_ONLY").is_ok_and(|v| v.split(',').any(|t| t.trim() == name))
}

fn cfg_from_env() -> Cfg {
    let quick = std::env::var("SLUICE_BENCH_QUICK").is_ok_and(|v| v == "1");
    Cfg {
        quick,
        reps: if quick { 5 } else { 7 },
    }
}

/// Without a CUDA device: the trace-cost table on the host backend, when asked for.
fn no_cuda() {
    println!("no CUDA device: skipping");
    if named("trace-cost") {
        println!(
            "\n# sluice overhead benchmark, host backend (SLUICE_BENCH_ONLY=trace-cost)\n\n\
             - sluice {}{}\n",
            cstr(sluice_version()),
            if cfg!(debug_assertions) {
                ", DEBUG BUILD: timings are not representative"
            } else {
                ""
            }
        );
        trace_cost::run_host(cfg_from_env());
    }
}

fn main() {
    // Ignore cargo's `--bench` and any filter arguments.
    let mut count = 0u32;
    let err = sluice_device_count(BackendKind::Cuda as u32, &mut count);
    if let Some(reason) = error_text(err) {
        eprintln!("({reason})");
        no_cuda();
        return;
    }
    if count == 0 {
        no_cuda();
        return;
    }
    let d: &'static Driver =
        cuda::driver().unwrap_or_else(|e| fail(&format!("cuda::driver(): {e}")));

    let strict = std::env::var("SLUICE_BENCH_STRICT").is_ok_and(|v| v == "1");
    let cfg = cfg_from_env();
    let quick = cfg.quick;
    // The raw rows run on sluice's own CUstreams, so both sides use the same
    // hardware queues; SLUICE_BENCH_SEPARATE_STREAMS=1 gives raw its own streams.
    let separate_streams = std::env::var_os("SLUICE_BENCH_SEPARATE_STREAMS").is_some();

    let mut b = Bench::open(d, cfg, separate_streams);

    let v = d.version();
    let props = &b.props;
    println!("# sluice overhead benchmark\n");
    println!("- date: {}", utc_now());
    println!(
        "- device: {} (compute {}.{}, {} SMs, {:.1} GiB)",
        cstr(props.name.as_ptr()),
        props.compute_capability_major,
        props.compute_capability_minor,
        props.multiprocessor_count,
        props.total_memory as f64 / (1u64 << 30) as f64
    );
    println!("- CUDA driver: {}.{} ({v})", v / 1000, (v % 1000) / 10);
    println!(
        "- sluice {} (ABI {}){}",
        cstr(sluice_version()),
        sluice_abi_version(),
        if cfg!(debug_assertions) {
            ", DEBUG BUILD: timings are not representative"
        } else {
            ""
        }
    );
    println!(
        "- mode: {} ({} repetitions after a warm-up; medians; sluice and raw alternate \
         within each repetition)",
        if quick {
            "quick (SLUICE_BENCH_QUICK=1)"
        } else {
            "full"
        },
        cfg.reps
    );
    println!(
        "- raw rows run on {}",
        if separate_streams {
            "their own CUstreams (SLUICE_BENCH_SEPARATE_STREAMS=1)"
        } else {
            "the same CUstreams as sluice's (sluice_stream_raw)"
        }
    );
    if sluice_engine_mode() != EngineMode::Async as u32 {
        ck(
            sluice_engine_set_mode(EngineMode::Async as u32),
            "sluice_engine_set_mode(ASYNC)",
        );
        println!("- note: SLUICE_ENGINE was sync; the bench switched the engine to async");
    }

    // Each section prints as soon as it is measured: a fatal error later keeps the
    // results above it.
    // SLUICE_BENCH_STANDIN=1: against tools/mockcuda, whose kernels never run, for
    // host profiles of sluice's own share (scripts/profile-host.sh).
    if std::env::var_os("SLUICE_BENCH_STANDIN").is_none() {
        self_test::run(&b);
    }
    probes::run(&b);
    for Table(name, run) in TABLES {
        // SLUICE_BENCH_ONLY=ping-pong runs that table alone (for repeated A/B runs).
        if !selected(name) {
            continue;
        }
        run(&mut b);
    }

    // Teardown, every call checked.
    let goals = b.close();

    let live = sluice_live_handles();
    if live != 0 {
        eprintln!("WARNING: {live} sluice handles still live at exit (a leak in the bench?)");
    }
    let (total, fails) = (goals.total, goals.fails);
    println!(
        "**Goals: {} of {total} PASS, {fails} FAIL.**",
        total - fails
    );
    if strict && fails > 0 {
        std::process::exit(1);
    }
}
