# Per-kernel device time and gaps from ktrace's CSV (start,end,stream,node,name),
# over a window of steps, each step starting at a launch of the kernel whose
# name starts with STEP (the Go trainer's first step kernel by default).
#
#   gaps.py CSV FIRST COUNT [STEP]   steps FIRST .. FIRST+COUNT; FIRST < 0: the
#                                    last -FIRST steps recorded
#
# Per kernel: launches per step, median duration, and the median and 90th
# percentile of its gap: its start less the latest end of every kernel that
# started before it (negative: it overlapped them, as a programmatic launch
# does while it waits). "GPU idle" sums the positive gaps. Then the same gaps
# by the kernel that started just before (a graph's boundary and the edges
# within it apart: run 188 found x W1 not launching early that way).
import sys, statistics as st
rows = []
for line in open(sys.argv[1]):
    p = line.rstrip("\n").split(",", 4)
    if len(p) == 5:
        rows.append((int(p[0]), int(p[1]), int(p[2]), p[4]))
rows.sort()
first, count = int(sys.argv[2]), int(sys.argv[3])
step = sys.argv[4] if len(sys.argv) > 4 else "gemm_nn_bias_relu_drop"
fwd = [i for i, r in enumerate(rows) if r[3].startswith(step)]
if first < 0:
    first, count = len(fwd) + first - 1, -first
last = min(first + count, len(fwd) - 1)
if first < 0 or last <= first:
    sys.exit(f"  only {len(fwd)} steps recorded")
lo, hi = fwd[first], fwd[last]
n = last - first
period = (rows[hi][0] - rows[lo][0]) / n / 1e3
busy_end, idle, stats, after = 0, 0.0, {}, {}
for i, (s, e, strm, name) in enumerate(rows[:hi]):
    gap = s - busy_end
    if i >= lo:
        d = stats.setdefault(name, ([], [], set()))
        d[0].append((e - s) / 1e3)
        d[1].append(gap / 1e3)
        d[2].add(strm)
        after.setdefault((rows[i - 1][3], name), []).append(gap / 1e3)
        idle += max(gap, 0) / 1e3
    busy_end = max(busy_end, e)
print(f"  {n} steps from #{first} of {len(fwd)}: {period:.2f} us per step, GPU idle {idle / n:.2f} us per step")
print(f"  {'kernel':34s} {'per step':>8s} {'dur med':>8s} {'gap med':>8s} {'gap p90':>8s} streams")
for name, (du, ga, ss) in sorted(stats.items(), key=lambda kv: -sum(kv[1][0])):
    ga.sort()
    print(f"  {name[:34]:34s} {len(du) / n:8.2f} {st.median(du):8.2f} {st.median(ga):8.2f} {ga[int(0.9 * (len(ga) - 1))]:8.2f} {sorted(ss)}")
print(f"  {'gap by the kernel before':56s} {'per step':>8s} {'gap p10':>8s} {'gap med':>8s} {'gap p90':>8s}")
for (prev, name), ga in sorted(after.items(), key=lambda kv: kv[0]):
    ga.sort()
    pair = f"{prev[:26]} -> {name[:26]}"
    print(f"  {pair:56s} {len(ga) / n:8.2f} {ga[len(ga) // 10]:8.2f} {st.median(ga):8.2f} {ga[int(0.9 * (len(ga) - 1))]:8.2f}")
