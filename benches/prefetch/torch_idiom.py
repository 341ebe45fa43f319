#!/usr/bin/env python3
"""(d) The PyTorch idiom for hiding the H2D copy of the next batch behind the
compute of the current one: the counterpart of prefetch_bench.cu's variant (a).

  pinned CPU tensors (pin_memory), two of them (double buffering); the next batch is
  copied with .to(device, non_blocking=True) on a side stream; the consumer's
  stream waits for it (current_stream().wait_stream(side)) and the batch is
  marked with record_stream(current) so the caching allocator does not hand its
  memory to a later copy before the compute that reads it has finished. The host
  rewrites a pinned slot only after that slot's previous copy has finished.
  (e) blocking, for the speedup column: .to(device) (synchronous), compute, sync.

The compute is in-place `x.mul_(a).add_(b)` passes over the batch viewed as float32
(16M floats for 64 MiB), the last pass over a slice so that the time is continuous
in `passes`; `passes` is calibrated in this run so that the compute takes 0.5x, 1x
and 2x this program's own measured pinned H2D copy time. Efficiency is
max(copy, compute) / step, comparable with prefetch_bench's.

Every batch's first 4 bytes carry (tag + its sequence number); the consumer copies
them into a result tensor, checked at the end of every run.

Run from the repository root: python3 benches/prefetch/torch_idiom.py
Environment as prefetch_bench: SLUICE_BENCH_N (60), SLUICE_BENCH_WARMUP (5),
SLUICE_BENCH_REPS (3), SLUICE_BENCH_MB (64) or SLUICE_BENCH_KB. Prints a Markdown table and
"RESULT torch_key=value" lines. Exits 1 on a failed data check.
"""

import os
import statistics
import sys


def env_int(name, default, minimum):
    v = os.environ.get(name, "")
    try:
        x = int(v)
    except ValueError:
        return default
    return x if x >= minimum else default


BATCH = env_int("SLUICE_BENCH_MB", 64, 1) << 20
if env_int("SLUICE_BENCH_KB", 0, 1) > 0:
    BATCH = env_int("SLUICE_BENCH_KB", 0, 1) << 10
N = env_int("SLUICE_BENCH_N", 60, 1)
WARM = env_int("SLUICE_BENCH_WARMUP", 5, 1)
REPS = env_int("SLUICE_BENCH_REPS", 3, 1)
TOTAL = WARM + N
RATIOS = ((0.5, "0.5x"), (1.0, "1x"), (2.0, "2x"))
A, B = 0.9999, 0.0001


def main():
    try:
        import torch
    except ImportError:
        print("no torch: skipping")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: skipping")
        return 0
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def event():
        return torch.cuda.Event(enable_timing=True)

    def compute(x, passes):
        full = int(passes)
        for _ in range(full):
            x.mul_(A).add_(B)
        m = int((passes - full) * x.numel())
        if m > 0:
            x[:m].mul_(A).add_(B)

    def time_compute(x, passes, reps):
        compute(x, passes)
        evs = [event() for _ in range(reps + 1)]
        evs[0].record(cur)
        for k in range(reps):
            compute(x, passes)
            evs[k + 1].record(cur)
        evs[-1].synchronize()
        return statistics.median(evs[k].elapsed_time(evs[k + 1]) for k in range(reps))

    def calibrate(x, target):
        lo, tlo = 0.0, 0.0
        hi = 1.0
        thi = time_compute(x, hi, 5)
        while thi < target:
            lo, tlo = hi, thi
            hi *= 2.0
            if hi > 1e6:
                raise RuntimeError("calibration: the compute never reaches the copy time")
            thi = time_compute(x, hi, 5)
        for _ in range(14):
            mid = 0.5 * (lo + hi)
            t = time_compute(x, mid, 5)
            if t < target:
                lo, tlo = mid, t
            else:
                hi, thi = mid, t
        best = lo if target - tlo <= thi - target else hi
        return best, time_compute(x, best, 11)

    def measure_copy(h, d, reps):
        with torch.cuda.stream(side):
            for _ in range(2):
                d.copy_(h, non_blocking=True)
            evs = [event() for _ in range(reps + 1)]
            evs[0].record(side)
            for k in range(reps):
                d.copy_(h, non_blocking=True)
                evs[k + 1].record(side)
        evs[-1].synchronize()
        return statistics.median(evs[k].elapsed_time(evs[k + 1]) for k in range(reps))

    hosts = [torch.zeros(BATCH, dtype=torch.uint8).pin_memory() for _ in range(2)]
    hosts_i32 = [h.view(torch.int32) for h in hosts]
    cal = torch.zeros(BATCH // 4, dtype=torch.float32, device=dev)
    scratch = torch.empty(BATCH, dtype=torch.uint8, device=dev)
    next_tag = [1]

    def new_tag():
        t = next_tag[0] << 20
        next_tag[0] += 1
        return t

    def check_seen(seen, tag, what):
        expected = torch.arange(TOTAL, dtype=torch.int32, device=dev) + tag
        bad = (seen != expected).nonzero()
        if bad.numel() > 0:
            i = int(bad[0, 0])
            print(f"torch_idiom: {what}: data check failed: batch {i} read "
                  f"{int(seen[i]):#010x}, expected {tag + i:#010x}", file=sys.stderr)
            sys.exit(1)

    def run_d(passes):
        tag = new_tag()
        seen = torch.full((TOTAL,), -1, dtype=torch.int32, device=dev)
        copy_done = [torch.cuda.Event(), torch.cuda.Event()]
        used = [False, False]
        ev0, ev1 = event(), event()
        torch.cuda.synchronize()

        def prefetch(i):
            s = i & 1
            if used[s]:
                copy_done[s].synchronize()  # the pinned slot's previous copy has finished
            hosts_i32[s][0] = tag + i
            with torch.cuda.stream(side):
                g = hosts[s].to(dev, non_blocking=True)
                copy_done[s].record(side)
            used[s] = True
            return g

        nxt = prefetch(0)
        for i in range(TOTAL):
            cur.wait_stream(side)
            batch = nxt
            batch.record_stream(cur)
            if i + 1 < TOTAL:
                nxt = prefetch(i + 1)
            seen[i:i + 1].copy_(batch[:4].view(torch.int32))
            compute(batch.view(torch.float32), passes)
            if i == WARM - 1:
                ev0.record(cur)
            if i == TOTAL - 1:
                ev1.record(cur)
        del batch, nxt
        torch.cuda.synchronize()
        check_seen(seen, tag, "(d)")
        return ev0.elapsed_time(ev1) / N

    def run_e(passes):
        tag = new_tag()
        seen = torch.full((TOTAL,), -1, dtype=torch.int32, device=dev)
        ev0, ev1 = event(), event()
        torch.cuda.synchronize()
        for i in range(TOTAL):
            hosts_i32[0][0] = tag + i
            batch = hosts[0].to(dev)
            seen[i:i + 1].copy_(batch[:4].view(torch.int32))
            compute(batch.view(torch.float32), passes)
            if i == WARM - 1:
                ev0.record(cur)
            if i == TOTAL - 1:
                ev1.record(cur)
            torch.cuda.synchronize()
        check_seen(seen, tag, "(e)")
        return ev0.elapsed_time(ev1) / N

    name = torch.cuda.get_device_name(dev)
    print("# PyTorch idiom (d): pinned double buffering, side-stream non_blocking copy, "
          "wait_stream, record_stream\n")
    print(f"device: {name}, torch {torch.__version__} (CUDA {torch.version.cuda}), batch "
          f"{BATCH >> 10} KiB, {N} batches after {WARM} warm-up, median of {REPS} runs\n")
    sys.stdout.flush()

    copy_ms = measure_copy(hosts[0], scratch, 20)
    gbps = BATCH / (copy_ms * 1e-3) / 1e9
    print(f"pinned H2D copy of one batch: {copy_ms:.3f} ms ({gbps:.2f} GB/s)")
    rows = []
    for factor, rname in RATIOS:
        target = factor * copy_ms
        passes, cms = calibrate(cal, target)
        ok = abs(cms - target) <= 0.10 * target
        print(f"compute at {rname}: {passes:.3f} passes, {cms:.3f} ms (target {target:.3f} ms)"
              + ("" if ok else "  ** off by more than 10%"))
        rows.append({"name": rname, "passes": passes, "compute_ms": cms, "calibrated": ok})
    sys.stdout.flush()

    for r in rows:
        d, e = [], []
        for _ in range(REPS):
            d.append(run_d(r["passes"]))
            e.append(run_e(r["passes"]))
        r["d"] = statistics.median(d)
        r["e"] = statistics.median(e)
        print(f"ran {r['name']}: (d) {r['d']:.3f}  (e) {r['e']:.3f} ms/step")
        sys.stdout.flush()
    copy_ms_end = measure_copy(hosts[0], scratch, 20)
    print(f"pinned H2D copy re-measured at the end: {copy_ms_end:.3f} ms "
          f"(drift {100.0 * (copy_ms_end / copy_ms - 1.0):+.1f}%)\n")

    print("| ratio | copy ms | compute ms | (d) ms/step | (e) blocking ms/step | eff (d) "
          "| (d)/(e) speedup | passes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ideal = max(copy_ms, r["compute_ms"])
        print(f"| {r['name']} | {copy_ms:.3f} | {r['compute_ms']:.3f} | {r['d']:.3f} | "
              f"{r['e']:.3f} | {ideal / r['d']:.3f} | {r['e'] / r['d']:.2f} | "
              f"{r['passes']:.3f} |")
    print("\neff = max(copy, compute) / step; (d)/(e) speedup = (e) step / (d) step.")
    if not all(r["calibrated"] for r in rows):
        print("WARNING: the compute is off its target by more than 10% at some ratio")
    print()

    print(f"RESULT torch_version={torch.__version__}")
    print(f"RESULT torch_batch_bytes={BATCH}")
    print(f"RESULT torch_copy_ms={copy_ms:.4f}")
    print(f"RESULT torch_copy_ms_end={copy_ms_end:.4f}")
    print(f"RESULT torch_h2d_gbps={gbps:.3f}")
    for r in rows:
        ideal = max(copy_ms, r["compute_ms"])
        n = r["name"]
        print(f"RESULT torch_passes_{n}={r['passes']:.4f}")
        print(f"RESULT torch_compute_ms_{n}={r['compute_ms']:.4f}")
        print(f"RESULT torch_calibrated_{n}={int(r['calibrated'])}")
        print(f"RESULT torch_d_ms_{n}={r['d']:.4f}")
        print(f"RESULT torch_e_ms_{n}={r['e']:.4f}")
        print(f"RESULT torch_eff_d_{n}={ideal / r['d']:.4f}")
        print(f"RESULT torch_d_over_e_{n}={r['e'] / r['d']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
