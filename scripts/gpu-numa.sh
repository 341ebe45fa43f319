#!/usr/bin/env bash
# On the GPU machine, after `scripts/gpu-suite.sh build` with the bench part (carry
# .gpu): prints the host's CPU and NUMA layout and the GPU's local CPUs, then runs the
# overhead benchmark's tables SLUICE_BENCH_ONLY (default "ops,ping-pong") in turn
# unpinned and pinned to the GPU's local CPUs (taskset), SLUICE_NUMA_ROUNDS times
# (default 2). Output: $OUT/numa-*.md and a summary of the goal rows.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/numa}
mkdir -p "$out"
{
  echo "## host"
  nproc
  lscpu | grep -iE "model name|socket|numa|thread|core"
  nvidia-smi topo -m 2>&1 | head -20
} > "$out/numa-host.txt"
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-Z' 'a-z')
dev=/sys/bus/pci/devices/${bus#0000}
[ -e "$dev" ] || dev=/sys/bus/pci/devices/$bus
cpus=$(cat "$dev/local_cpulist" 2>/dev/null || echo "")
node=$(cat "$dev/numa_node" 2>/dev/null || echo "?")
echo "GPU $bus: numa_node $node, local CPUs ${cpus:-unknown}" | tee -a "$out/numa-host.txt"
export SLUICE_BENCH_ONLY=${SLUICE_BENCH_ONLY:-ops,ping-pong}
for round in $(seq 1 "${SLUICE_NUMA_ROUNDS:-2}"); do
  timeout 200 .gpu/overhead > "$out/numa-free-$round.md" 2>&1
  if [ -n "$cpus" ]; then
    timeout 200 taskset -c "$cpus" .gpu/overhead > "$out/numa-pinned-$round.md" 2>&1
  fi
done
for f in "$out"/numa-free-*.md "$out"/numa-pinned-*.md; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E "^\| (1|8|16) \| (1 object|raw records \+ 150)|^\| 1 \| 0\.|\(a\)/\(b\)|^\| 0 \| (1|8|16) \| raw cuEventRecord \|" "$f"
done
