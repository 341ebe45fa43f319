#!/usr/bin/env bash
# On the GPU machine, after `scripts/gpu-suite.sh build` with the bench part (carry
# .gpu): prints the host's CPU and NUMA layout and the GPU's local CPUs, then runs the
# overhead benchmark's tables SLUICE_BENCH_ONLY (default "ops,ping-pong") unpinned,
# pinned to the GPU's local CPUs and pinned to the other CPUs (taskset), in turn,
# SLUICE_NUMA_ROUNDS times (default 2). With the go part built (.gpu/go/trainer), also
# the Go trainer's replayed and eager rates (8 epochs, batch 256) the same three ways,
# SLUICE_NUMA_TRAINER_REPS times each (default 2). Output: $OUT/numa-*.
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
local_cpus=$(cat "$dev/local_cpulist" 2>/dev/null || echo "")
# The online CPUs that are not the GPU's (empty on a single-node host).
other_cpus=$(python3 - "$local_cpus" <<'PY'
import sys
def expand(s):
    out = set()
    for part in filter(None, s.strip().split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out
online = expand(open("/sys/devices/system/cpu/online").read())
print(",".join(map(str, sorted(online - expand(sys.argv[1])))))
PY
)
echo "GPU $bus: numa_node $(cat "$dev/numa_node" 2>/dev/null), local CPUs '${local_cpus}', other CPUs '${other_cpus}'" | tee -a "$out/numa-host.txt"
# pinned WHERE CMD...: CMD unpinned (free), on the local or on the other CPUs.
pinned() {
  local where=$1
  shift
  case $where in
    free) "$@" ;;
    local) taskset -c "$local_cpus" "$@" ;;
    other) taskset -c "$other_cpus" "$@" ;;
  esac
}
wheres="free"
[ -n "$local_cpus" ] && wheres+=" local"
[ -n "$other_cpus" ] && wheres+=" other"
export SLUICE_BENCH_ONLY=${SLUICE_BENCH_ONLY:-ops,ping-pong}
for round in $(seq 1 "${SLUICE_NUMA_ROUNDS:-2}"); do
  for where in $wheres; do
    pinned "$where" timeout 200 .gpu/overhead > "$out/numa-$where-$round.md" 2>&1
  done
done
for where in $wheres; do
  for f in "$out"/numa-"$where"-*.md; do
    echo "== $(basename "$f")"
    grep -E "^\| (8|16) \| (1 object|raw records \+ 150)|^\| 1 \| 0\.|\(a\)/\(b\)|^\| 0 \| (1|8|16) \| raw cuEventRecord \|" "$f"
  done
done
if [ -x .gpu/go/trainer ]; then
  export SLUICE_BACKEND=cuda SLUICE_KERNEL_CACHE=$out/kernel-cache
  mkdir -p "$SLUICE_KERNEL_CACHE"
  for rep in $(seq 1 "${SLUICE_NUMA_TRAINER_REPS:-2}"); do
    for where in $wheres; do
      for mode in graph eager; do
        args=(-epochs 8 -batch 256)
        [ $mode = eager ] && args+=(-eager)
        (cd .gpu/go && pinned "$where" timeout 120 ./trainer "${args[@]}") > "$out/numa-trainer-$where-$mode-$rep.out" 2>&1
        echo "trainer $where $mode $rep: $(sed -n 's/^RESULT \(steps_per_s=[0-9.]*\).*/\1/p' "$out/numa-trainer-$where-$mode-$rep.out" | tail -1)"
      done
    done
  done
fi
