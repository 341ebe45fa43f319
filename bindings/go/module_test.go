package sluice

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// scalePTX: y[i] = a*x[i] + b for i < n. Hand-written PTX (no toolkit needed
// to build the tests); the driver JIT-compiles it for the GPU at hand.
const scalePTX = `.version 7.0
.target sm_75
.address_size 64

.visible .entry scale_bias(
	.param .u64 p_y,
	.param .u64 p_x,
	.param .f32 p_a,
	.param .f32 p_b,
	.param .u32 p_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [p_y];
	ld.param.u64 %rd2, [p_x];
	ld.param.f32 %f1, [p_a];
	ld.param.f32 %f2, [p_b];
	ld.param.u32 %r1, [p_n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd2;
	cvta.to.global.u64 %rd4, %rd1;
	mul.wide.u32 %rd5, %r5, 4;
	add.s64 %rd6, %rd3, %rd5;
	ld.global.f32 %f3, [%rd6];
	fma.rn.f32 %f4, %f3, %f1, %f2;
	add.s64 %rd7, %rd4, %rd5;
	st.global.f32 [%rd7], %f4;
DONE:
	ret;
}
`

func TestModule(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendCUDA {
		_, err := d.LoadModule([]byte(scalePTX))
		wantCode(t, err, ErrUnsupported)
		t.Skip("modules need the cuda backend")
	}
	s := testStream(t, d)
	m, err := d.LoadModule([]byte(scalePTX))
	must(t, err)
	defer m.Close()
	_, err = m.Function("no_such_kernel")
	wantCode(t, err, ErrNotFound)
	f, err := m.Function("scale_bias")
	must(t, err)
	defer f.Close()
	if f.Name() != "scale_bias" || f.Module() != m || m.Device() != d {
		t.Fatal("accessors")
	}

	const n = 10000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 977)
	}
	xb := alloc(t, s, 4*n)
	yb := alloc(t, s, 4*n)
	must(t, CopyFromHostSlice(s, xb, 0, x))
	cfg := LaunchConfig{Grid: Dim3{X: (n + 255) / 256}, Block: Dim3{X: 256}}
	err = f.Launch(s, cfg, []Syncable{xb}, []Syncable{yb}, yb, xb, float32(2), float32(1), uint32(n))
	must(t, err)
	y := make([]float32, n)
	must(t, CopyToHostSlice(s, y, yb, 0))
	for i := range y {
		if y[i] != 2*x[i]+1 {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], 2*x[i]+1)
		}
	}
	// Argument checks happen before the launch.
	err = f.Launch(s, cfg, nil, nil, 3) // plain int
	wantCode(t, err, ErrInvalidArgument)

	// Use after close.
	must(t, f.Close())
	must(t, f.Close())
	wantClosed(t, f.Launch(s, cfg, nil, nil))
	must(t, m.Close())
	_, err = m.Function("scale_bias")
	wantClosed(t, err)
	if !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// compileSrc: y[i] = a*x[i] + OFFSET, with <sluice/rng.cuh> included to check
// the built-in header.
const compileSrc = `#include <sluice/rng.cuh>
extern "C" __global__ void scale_offset(float* y, const float* x, float a, unsigned n) {
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + OFFSET;
}
`

func TestCompileModule(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendCUDA {
		_, err := d.CompileModule(compileSrc, "scale_offset.cu", "-DOFFSET=1.0f")
		wantCode(t, err, ErrUnsupported)
		if !strings.Contains(err.Error(), "host") {
			t.Fatalf("the error does not name the backend: %v", err)
		}
		_, err = d.CompileModule("", "")
		wantCode(t, err, ErrInvalidArgument)
		_, err = d.CompileModule(compileSrc, "", "bad\x00option")
		wantCode(t, err, ErrInvalidArgument)
		t.Skip("compiling needs the cuda backend")
	}
	cache := t.TempDir()
	t.Setenv("SLUICE_KERNEL_CACHE", cache)
	s := testStream(t, d)
	const n = 5000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 311)
	}
	xb := alloc(t, s, 4*n)
	yb := alloc(t, s, 4*n)
	must(t, CopyFromHostSlice(s, xb, 0, x))
	for round := 0; round < 2; round++ { // the second compile comes from the cache
		m, err := d.CompileModule(compileSrc, "scale_offset.cu", "-DOFFSET=0.5f", "--std=c++17")
		must(t, err)
		f, err := m.Function("scale_offset")
		must(t, err)
		cfg := LaunchConfig{Grid: Dim3{X: (n + 255) / 256}, Block: Dim3{X: 256}}
		// Programmatic dependent launch from compute capability 9.0 (this
		// kernel does not wait for the one ahead: off again before it runs).
		props, err := d.Props()
		must(t, err)
		if err := f.SetProgrammaticLaunch(true); props.ComputeCapabilityMajor >= 9 {
			must(t, err)
		} else {
			wantCode(t, err, ErrUnsupported)
		}
		must(t, f.SetProgrammaticLaunch(false))
		must(t, f.Launch(s, cfg, []Syncable{xb}, []Syncable{yb}, yb, xb, float32(3), uint32(n)))
		y := make([]float32, n)
		must(t, CopyToHostSlice(s, y, yb, 0))
		for i := range y {
			if want := 3*x[i] + 0.5; y[i] != want {
				t.Fatalf("round %d: y[%d] = %v, want %v", round, i, y[i], want)
			}
		}
		must(t, f.Close())
		if err := f.SetProgrammaticLaunch(true); !errors.Is(err, ErrClosed) {
			t.Fatalf("SetProgrammaticLaunch after Close: %v", err)
		}
		if err := f.SetMaxDynamicSharedMemory(1024); !errors.Is(err, ErrClosed) {
			t.Fatalf("SetMaxDynamicSharedMemory after Close: %v", err)
		}
		if err := f.SetNonPortableClusterSizeAllowed(true); !errors.Is(err, ErrClosed) {
			t.Fatalf("SetNonPortableClusterSizeAllowed after Close: %v", err)
		}
		must(t, m.Close())
	}
	entries, err := filepath.Glob(filepath.Join(cache, "*.sluicebin"))
	must(t, err)
	if len(entries) != 1 {
		t.Fatalf("cache entries: %v", entries)
	}

	_, err = d.CompileModule("extern \"C\" __global__ void k(int* p) { *p = }", "broken.cu")
	wantCode(t, err, ErrCompile)
	if !strings.Contains(err.Error(), "broken.cu(") {
		t.Fatalf("no compile log in: %v", err)
	}
}

// On every backend, Launch reaches the C call (sluice_go_launch) with its
// arguments as on cuda, and a function handle that names no function fails
// there; under cgocheck2 (test.sh) this also checks the call against cgo's
// pointer rules, for values on the stack and in a pooled buffer.
func TestLaunchUnknownFunction(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	x, y := alloc(t, s, 256), alloc(t, s, 256)
	f := &Function{name: "unknown"} // no cleanup: the handle is no one's
	f.h.bits.Store(0xdead_beef_0000_0001)
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 64}}
	many := make([]any, 20)
	for i := range many {
		many[i] = uint32(i)
	}
	for _, args := range [][]any{nil, {y, x, float32(2), uint32(64)}, many} {
		err := f.Launch(s, cfg, []Syncable{x}, []Syncable{y}, args...)
		wantCode(t, err, ErrInvalidHandle)
	}
	wantCode(t, f.SetProgrammaticLaunch(true), ErrInvalidHandle)
	wantCode(t, f.SetMaxDynamicSharedMemory(64<<10), ErrInvalidHandle)
	wantCode(t, f.SetNonPortableClusterSizeAllowed(true), ErrInvalidHandle)
	// Out of uint32's range: refused in Go, before C sees the handle.
	wantCode(t, f.SetMaxDynamicSharedMemory(-1), ErrInvalidArgument)
	if strconv.IntSize == 64 {
		over := uint64(math.MaxUint32) + 1
		wantCode(t, f.SetMaxDynamicSharedMemory(int(over)), ErrInvalidArgument)
	}
}

// bigSharedSrc uses 64 KiB of dynamic shared memory: s[i] = 3i, then
// out[i] = s[n-1-i].
const bigSharedSrc = `extern "C" __global__ void big(unsigned *out) {
	extern __shared__ unsigned s[];
	unsigned n = 64 * 1024 / 4;
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 3u;
	__syncthreads();
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}`

// A launch over 48 KiB of dynamic shared memory fails until the function opts
// in with SetMaxDynamicSharedMemory, then runs; more than the device allows is
// ErrInvalidArgument (cuda only).
func TestMaxDynamicSharedMemory(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendCUDA {
		t.Skip("launches need the cuda backend")
	}
	m, err := d.CompileModule(bigSharedSrc, "big.cu")
	if errors.Is(err, ErrUnsupported) {
		t.Skip("no NVRTC:", err)
	}
	m = closeAtEnd(t, m, err)
	f, err := m.Function("big")
	f = closeAtEnd(t, f, err)
	s := testStream(t, d)
	const bytes = 64 << 10
	out := alloc(t, s, bytes)
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 256}, SharedMemBytes: bytes}
	wantCode(t, f.Launch(s, cfg, nil, []Syncable{out}, out), ErrDriver)
	must(t, f.SetMaxDynamicSharedMemory(bytes))
	must(t, f.Launch(s, cfg, nil, []Syncable{out}, out))
	got := make([]uint32, bytes/4)
	must(t, CopyToHostSlice(s, got, out, 0))
	for i, v := range got {
		if want := uint32(len(got)-1-i) * 3; v != want {
			t.Fatalf("out[%d] = %d, want %d", i, v, want)
		}
	}
	err = f.SetMaxDynamicSharedMemory(1 << 30)
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "the device allows at most") {
		t.Fatalf("the limit is not named: %v", err)
	}
}

// More arguments than Launch keeps on its stack (a pooled buffer), of every
// width: the kernel receives each value (cuda only).
func TestLaunchManyArgs(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendCUDA {
		t.Skip("launches need the cuda backend")
	}
	const src = `extern "C" __global__ void many(double* y, signed char a0, unsigned char a1,
	short a2, unsigned short a3, int a4, unsigned a5, long long a6, unsigned long long a7,
	float a8, double a9, int a10, int a11, int a12, int a13, int a14, int a15, int a16,
	int a17, int a18) {
	if (threadIdx.x != 0 || blockIdx.x != 0) return;
	y[0] = a0; y[1] = a1; y[2] = a2; y[3] = a3; y[4] = a4; y[5] = a5; y[6] = (double)a6;
	y[7] = (double)a7; y[8] = a8; y[9] = a9; y[10] = a10; y[11] = a11; y[12] = a12;
	y[13] = a13; y[14] = a14; y[15] = a15; y[16] = a16; y[17] = a17; y[18] = a18;
}`
	m, err := d.CompileModule(src, "many.cu")
	if errors.Is(err, ErrUnsupported) {
		t.Skip("no NVRTC:", err)
	}
	m = closeAtEnd(t, m, err)
	f, err := m.Function("many")
	f = closeAtEnd(t, f, err)
	s := testStream(t, d)
	yb := alloc(t, s, 8*19)
	args := []any{yb, int8(-3), uint8(250), int16(-300), uint16(65000), int32(-70000),
		uint32(4000000000), int64(-5000000000), uint64(6000000000), float32(1.5), float64(-2.25)}
	want := []float64{-3, 250, -300, 65000, -70000, 4000000000, -5000000000, 6000000000, 1.5, -2.25}
	for i := int32(10); i <= 18; i++ {
		args = append(args, 100+i)
		want = append(want, float64(100+i))
	}
	must(t, f.Launch(s, LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 32}}, nil, []Syncable{yb}, args...))
	got := make([]float64, 19)
	must(t, CopyToHostSlice(s, got, yb, 0))
	if !slices.Equal(got, want) {
		t.Fatalf("kernel saw %v, want %v", got, want)
	}
}
