#!/usr/bin/env bash
# The Go trainer's checks on a GPU machine (no Go needed there).
# bindings/go/test.sh --build-gpu DIR copies this script to DIR/run-trainer.sh,
# next to DIR/trainer and the MNIST files in DIR/mnist; DIR/run.sh calls it.
#
#   1. 5 epochs of the full MNIST at batch 256         RESULT accuracy=...   (goal >= 0.97)
#      and the kernels' start-up self-test             RESULT kernel self-test: ...
#   2. epochs 1-2 with -save, then a fresh process
#      with -resume for epochs 3-5, against run 1       RESULT resume_identical=1
#   2b. epoch 1 with two steps per graph and with one   RESULT graph_steps_identical=1
#   2c. epoch 1 with the loss stored by gemm_tn_sgd and
#       by a kernel of its own (-loss-in-sgd=false)      RESULT loss_modes_identical=1
#   3. steps/s, the median of 3 processes per mode (each the median of its
#      epochs 2 to 8: an epoch takes 10 to 20 ms, and the replayed rate varies
#      from epoch to epoch; the eager step's host time varies between processes):
#      graph replay against the eager step, both with
#      the same input pipeline (two batches per lease)  RESULT steps_per_s graph=... eager=... ratio=...  (goal >= 2)
#      and against the eager step leasing a batch at
#      a time (the baseline of runs up to 227)          RESULT steps_per_s graph=... eager_batch_per_lease=... ratio=...
#      two steps per graph against one (-graph-steps 1) RESULT steps_per_s graph=... graph_one_step=...
#      prefetcher against a blocking copy               RESULT steps_per_s prefetch=... blocking=... ratio=...
#      the step alone, after training, on the last batch
#      without the input pipeline (-bench-steps)         RESULT step_only_steps_per_s graph=... eager=... ratio=...
#      the input pipeline alone (-bench-input)            RESULT input_batches_per_s=... (time per phase)
#   3c. with ./trainer-base (scripts/gpu-suite.sh, SLUICE_GPU_BASE): part 1 again
#      with it, and both trainers' rates, alternating    RESULT base_bits=... base_ab_graph=...
#
# Exits non-zero if a run fails or the resumed run differs. Extra arguments go
# to every trainer run (for example -hidden 256).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export SLUICE_BACKEND=${SLUICE_BACKEND:-cuda}
# Compiled kernels are cached, so only the first run pays for NVRTC.
export SLUICE_KERNEL_CACHE=${SLUICE_KERNEL_CACHE:-$PWD/kernel-cache}
mkdir -p "$SLUICE_KERNEL_CACHE"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0

# run NAME ARGS...: runs the trainer, its output in $tmp/NAME.out (RESULT lines
# re-labelled, so that only this script's summary lines start with RESULT).
run() {
	local name=$1
	shift
	echo "+ trainer $*"
	./trainer "$@" "${extra[@]}" >"$tmp/$name.out" 2>&1
	local r=$?
	sed 's/^RESULT /  trainer: /' "$tmp/$name.out"
	if [ $r != 0 ]; then
		echo "trainer $name failed: rc=$r"
		rc=1
	fi
	return $r
}
field() { sed -n "s/^RESULT $2=\([0-9.]*\).*/\1/p" "$tmp/$1.out" | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "nan" }'; }
extra=("$@")

echo "== 1. accuracy: 5 epochs, batch 256"
if run full -epochs 5 -batch 256 -losses "$tmp/full.losses" -save "$tmp/full.ckpt"; then
	echo "RESULT accuracy=$(field full accuracy) epochs=5 batch=256 ($(grep -o 'hidden=[0-9]*' "$tmp/full.out" | tail -1))"
fi
# The start-up checks of the GEMM kernels against the host, one line per precision tried.
selftest=$(grep '^kernel self-test' "$tmp/full.out" | tr '\n' ' ')
echo "RESULT ${selftest:-kernel self-test: no line (the run failed before it?)}"

echo "== 2. resume: epochs 1-2 and -save, then -resume for epochs 3-5"
same=0
if run first -epochs 2 -batch 256 -losses "$tmp/a.losses" -save "$tmp/a.ckpt" &&
	run second -epochs 5 -batch 256 -resume "$tmp/a.ckpt" -losses "$tmp/b.losses" -save "$tmp/b.ckpt" &&
	[ -s "$tmp/full.losses" ]; then
	if cat "$tmp/a.losses" "$tmp/b.losses" | cmp -s - "$tmp/full.losses"; then
		echo "per-step losses: identical ($(wc -l <"$tmp/full.losses") steps)"
		if cmp "$tmp/full.ckpt" "$tmp/b.ckpt"; then
			echo "checkpoints after epoch 5 (weights, momentum, RNG states): identical"
			same=1
		fi
	else
		echo "per-step losses differ; first differences (epoch step bits value):"
		cat "$tmp/a.losses" "$tmp/b.losses" | diff - "$tmp/full.losses" | head -6
	fi
fi
echo "RESULT resume_identical=$same"
[ $same = 1 ] || rc=1

echo "== 2b. two steps per graph against one: epoch 1's losses, bit for bit"
same=0
if run pairs -epochs 1 -batch 256 -losses "$tmp/p2.losses" >/dev/null &&
	run single -epochs 1 -batch 256 -graph-steps 1 -losses "$tmp/p1.losses" >/dev/null &&
	[ -s "$tmp/p1.losses" ] && cmp -s "$tmp/p1.losses" "$tmp/p2.losses"; then
	same=1
fi
echo "RESULT graph_steps_identical=$same ($(wc -l <"$tmp/p1.losses") steps)"
[ $same = 1 ] || rc=1

echo "== 2c. the loss stored by gemm_tn_sgd's last block against loss_store's kernel: epoch 1's losses, bit for bit"
same=0
if run lossk -epochs 1 -batch 256 -loss-in-sgd=false -losses "$tmp/lk.losses" >/dev/null &&
	[ -s "$tmp/lk.losses" ] && cmp -s "$tmp/lk.losses" "$tmp/p2.losses"; then
	same=1
fi
echo "RESULT loss_modes_identical=$same"
[ $same = 1 ] || rc=1

echo "== 3. steps/s at batch 256: 3 processes per mode, alternating; each the median of its epochs 2-8"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
declare -A rates
modes=(graph_prefetch graph1_prefetch eager_prefetch eager1_prefetch graph_blocking eager_blocking)
for rep in 1 2 3; do
	for mode in "${modes[@]}"; do
		args=(-epochs 8 -batch 256)
		[[ $mode == eager_* ]] && args+=(-eager)
		[[ $mode == eager1_* ]] && args+=(-eager -eager-pairs=false)
		[[ $mode == graph1_* ]] && args+=(-graph-steps 1)
		[[ $mode == *_blocking ]] && args+=(-blocking)
		[[ $mode == *_prefetch ]] && args+=(-bench-steps 2340)
		run "${mode}_$rep" "${args[@]}" >/dev/null
		rates[$mode]+="$(field "${mode}_$rep" steps_per_s) "
		[[ $mode == *_prefetch ]] && rates[${mode}_only]+="$(field "${mode}_$rep" step_only_steps_per_s) "
	done
done
for mode in "${modes[@]}"; do
	echo "$mode steps/s: ${rates[$mode]}"
done
g1=$(echo "${rates[graph1_prefetch]}" | median)
gp=$(echo "${rates[graph_prefetch]}" | median)
ep=$(echo "${rates[eager_prefetch]}" | median)
gb=$(echo "${rates[graph_blocking]}" | median)
eb=$(echo "${rates[eager_blocking]}" | median)
e1=$(echo "${rates[eager1_prefetch]}" | median)
echo "RESULT steps_per_s graph=$gp eager=$ep ratio=$(ratio "$gp" "$ep") (prefetcher, two batches per lease in both)"
echo "RESULT steps_per_s graph=$gp eager_batch_per_lease=$e1 ratio=$(ratio "$gp" "$e1") (prefetcher, the eager loop leasing a batch at a time)"
echo "RESULT steps_per_s graph_blocking=$gb eager_blocking=$eb ratio=$(ratio "$gb" "$eb") (blocking copies)"
echo "RESULT steps_per_s graph=$gp graph_one_step=$g1 ratio=$(ratio "$gp" "$g1") (two steps per graph against one)"
echo "RESULT steps_per_s prefetch=$gp blocking=$gb ratio=$(ratio "$gp" "$gb") (graph)"
echo "RESULT steps_per_s eager_prefetch=$ep eager_blocking=$eb ratio=$(ratio "$ep" "$eb") (eager)"
echo "graph step only steps/s: ${rates[graph_prefetch_only]}"
echo "graph (a step per graph) step only steps/s: ${rates[graph1_prefetch_only]}"
echo "eager step only steps/s: ${rates[eager_prefetch_only]}"
go=$(echo "${rates[graph_prefetch_only]}" | median)
eo=$(echo "${rates[eager_prefetch_only]}" | median)
g1o=$(echo "${rates[graph1_prefetch_only]}" | median)
echo "RESULT step_only_steps_per_s graph=$go eager=$eo ratio=$(ratio "$go" "$eo") (the step alone, 2340 steps on one batch)"
echo "RESULT step_only_steps_per_s graph=$go graph_one_step=$g1o ratio=$(ratio "$go" "$g1o") (two steps per graph against one)"

echo "== 3b. the input pipeline alone: 20000 batches through the prefetcher into the input sets, no step"
if run input -bench-input 20000 >/dev/null; then
	echo "RESULT input_batches_per_s=$(field input input_batches_per_s) ($(grep '^input phases' "$tmp/input.out"))"
fi

# 3c. Against the base commit's trainer (./trainer-base, built against this library
# when scripts/gpu-suite.sh has SLUICE_GPU_BASE): part 1's run again with it (the
# same losses and weights, or not: a change may mean to change them), then 3 rounds
# of both trainers alternating, replayed and eager, one process each.
if [ -x ./trainer-base ]; then
	echo "== 3c. against the base trainer ($(cat trainer-base.commit 2>/dev/null))"
	weights() { grep -h 'final weights' "$tmp/$1.out" | tail -1; }
	./trainer-base -epochs 5 -batch 256 -losses "$tmp/base.losses" "${extra[@]}" >"$tmp/base.out" 2>&1 || echo "trainer-base failed: $(tail -1 "$tmp/base.out")"
	bits=differ
	[ -s "$tmp/base.losses" ] && cmp -s "$tmp/base.losses" "$tmp/full.losses" && [ "$(weights base)" = "$(weights full)" ] && bits=identical
	echo "RESULT base_bits=$bits (base: $(weights base); current: $(weights full))"
	declare -A ab
	# A base trainer without -eager-pairs leases a batch at a time eagerly: so
	# does the current one then, so that both run the same mode.
	eager_cur=(-eager)
	./trainer-base -h 2>&1 | grep -q -- '-eager-pairs' || eager_cur+=(-eager-pairs=false)
	for rep in 1 2 3; do
		for t in trainer-base trainer; do
			for mode in graph eager; do
				args=(-epochs 8 -batch 256 -bench-steps 2340)
				[ $mode = eager ] && [ $t = trainer ] && args+=("${eager_cur[@]}")
				[ $mode = eager ] && [ $t = trainer-base ] && args+=(-eager)
				./$t "${args[@]}" "${extra[@]}" >"$tmp/ab.out" 2>&1 || echo "$t $mode failed: $(tail -1 "$tmp/ab.out")"
				ab[$t.$mode]+="$(sed -n 's/^RESULT steps_per_s=\([0-9.]*\).*/\1/p' "$tmp/ab.out") "
				[ $mode = graph ] && ab[$t.alone]+="$(sed -n 's/^RESULT step_only_steps_per_s=\([0-9.]*\).*/\1/p' "$tmp/ab.out") "
			done
		done
	done
	for k in graph alone eager; do
		b=$(echo "${ab[trainer-base.$k]}" | median) c=$(echo "${ab[trainer.$k]}" | median)
		echo "base / current $k steps/s: ${ab[trainer-base.$k]}/ ${ab[trainer.$k]}"
		echo "RESULT base_ab_$k base=$b current=$c ratio=$(ratio "$c" "$b") (medians of 3, alternating)"
	done
fi

# 4. Where a step's device time goes: one eager epoch of 50 batches with a device
# span on every op, summed per kernel (tools/sluice-trace --device-summary). The
# trainer stops the trace before it exits (Go's exit runs no atexit hook, and the
# spans still pending were lost: "no device spans").
summary=../../tools/sluice-trace
if command -v python3 >/dev/null && [ -f "$summary" ]; then
	echo "== 4. device time per kernel (eager, 50 batches, SLUICE_TRACE_DEVICE=1)"
	SLUICE_TRACE="$tmp/trace.json" SLUICE_TRACE_DEVICE=1 \
		./trainer -epochs 1 -batch 256 -limit 12800 -eager "${extra[@]}" >"$tmp/profile.out" 2>&1 \
		&& python3 "$summary" "$tmp/trace.json" --device-summary 16 \
		|| { echo "profile run failed:"; tail -5 "$tmp/profile.out"; }
fi
# 4b. The step alone on the device, kernel by kernel as the device ran them
# (graph nodes included): CUPTI's kernel records through tools/ktrace, one
# process per mode, 2,000 steps after 1 epoch and 600 steps alone. Each kernel's
# gap is its start less the latest end before it: negative where a programmatic
# launch started early and waited.
ktrace=../../tools/ktrace
if command -v python3 >/dev/null && [ -x "$ktrace/build.sh" ] && lib=$("$ktrace/build.sh" 2>"$tmp/ktrace.err"); then
	for mode in graph graph1 eager; do
		echo "== 4b. the step alone on the device ($mode, CUPTI kernel records, steps 834 to 2834)"
		args=(-epochs 1 -batch 256 -bench-steps 3000)
		[ $mode = eager ] && args+=(-eager)
		[ $mode = graph1 ] && args+=(-graph-steps 1)
		LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} KTRACE_OUT="$tmp/k_$mode.csv" \
			CUDA_INJECTION64_PATH=$PWD/$ktrace/libktrace.so ./trainer "${args[@]}" "${extra[@]}" >"$tmp/k_$mode.out" 2>&1 \
			&& python3 "$ktrace/gaps.py" "$tmp/k_$mode.csv" 834 2000 \
			|| { echo "ktrace run failed:"; tail -5 "$tmp/k_$mode.out"; }
	done
elif [ -s "$tmp/ktrace.err" ]; then
	echo "== 4b. skipped: $(tail -1 "$tmp/ktrace.err")"
fi
# 5. (SLUICE_TRAINER_NCU=1) each kernel's own duration under Nsight Compute, which
# runs kernels one at a time: the step's device time without launch gaps.
if [ "${SLUICE_TRAINER_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
	echo "== 5. kernel durations (ncu, eager, no cache flushes, 10 steps after the first 200 launches)"
	ncu --clock-control none --cache-control none --csv --print-units base --metrics gpu__time_duration.sum \
		--launch-skip 200 --launch-count 70 \
		./trainer -epochs 1 -batch 256 -limit 12800 -eager "${extra[@]}" >"$tmp/ncu.csv" 2>"$tmp/ncu.err"
	python3 - "$tmp/ncu.csv" <<'PY' || tail -5 "$tmp/ncu.err"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
k, v = head.index("Kernel Name"), head.index("Metric Value")
t = collections.defaultdict(list)
for r in rows[1:]:
    t[r[k].split("(")[0]].append(float(r[v].replace(",", "")) / 1000)
total = 0.0
for name, d in sorted(t.items(), key=lambda x: -sum(x[1])):
    print(f"  {name:32s} {len(d):4d} launches  {sum(d)/len(d):8.2f} us mean")
    total += sum(d)
print(f"RESULT kernel_us_per_step={total / 10:.1f} (ncu, sum of the kernels' own durations)")
PY
fi
exit $rc
