package sluice

import (
	"bytes"
	"math"
	"syscall"
	"testing"
	"unsafe"
)

func TestBuffers(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n = 1 << 16

	buf := alloc(t, s, n)
	info, err := buf.Info()
	must(t, err)
	if info.Kind != BufferDevice || info.Size != n || info.DevicePtr == 0 || info.HostPtr != nil {
		t.Fatalf("device info %+v", info)
	}
	if buf.Size() != n || buf.DevicePtr() != info.DevicePtr || buf.Stream() != s || buf.Device() != d {
		t.Fatal("device buffer accessors")
	}

	pin := allocPinned(t, d, n)
	info, err = pin.Info()
	must(t, err)
	if info.Kind != BufferPinned || info.Size != n || info.HostPtr == nil {
		t.Fatalf("pinned info %+v", info)
	}
	if len(pin.Bytes()) != n || unsafe.Pointer(&pin.Bytes()[0]) != info.HostPtr {
		t.Fatal("pinned Bytes is not the pinned memory")
	}

	host, err := d.AllocHost(n)
	must(t, err)
	defer host.Close()
	info, err = host.Info()
	must(t, err)
	if info.Kind != BufferRegistered || info.Size != n || len(host.Bytes()) != n {
		t.Fatalf("host info %+v", info)
	}

	// Caller-owned, non-Go memory: an anonymous mapping.
	mm, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	must(t, err)
	defer syscall.Munmap(mm)
	reg, err := d.RegisterHost(unsafe.Pointer(&mm[0]), n)
	must(t, err)
	if &reg.Bytes()[0] != &mm[0] {
		t.Fatal("registered Bytes is not the mapping")
	}

	// A round trip through every kind: Go -> device -> pinned -> host -> registered -> device -> Go.
	src := pattern(n, 3)
	must(t, CopyFromHost(s, buf, 0, src))
	must(t, Copy(s, pin, 0, buf, 0, n))
	must(t, Copy(s, host, 0, pin, 0, n))
	must(t, Copy(s, reg, 0, host, 0, n))
	buf2 := alloc(t, s, n)
	must(t, Copy(s, buf2, 0, reg, 0, n))
	wantBytes(t, "round trip", readBack(t, s, buf2, n), src)
	must(t, pin.WaitRead())
	wantBytes(t, "pinned view", pin.Bytes(), src)
	must(t, reg.WaitRead())
	wantBytes(t, "registered view", mm, src)
	must(t, reg.Close())

	// Offsets and partial ranges; memset.
	must(t, Memset(s, buf, 100, 0xab, 50))
	must(t, Copy(s, buf2, 1000, buf, 90, 70))
	got := make([]byte, 70)
	must(t, CopyToHost(s, got, buf2, 1000))
	want := append(append(append([]byte{}, src[90:100]...), repeat(0xab, 50)...), src[150:160]...)
	wantBytes(t, "partial copy", got, want)

	// Zero-length operations are no-ops but still range-checked.
	must(t, Copy(s, buf, n, buf2, 0, 0))
	must(t, CopyFromHost(s, buf, n, nil))
	must(t, CopyToHost(s, nil, buf, n))
	wantCode(t, CopyToHost(s, nil, buf, n+1), ErrOutOfRange)
	wantCode(t, Copy(s, buf, n+1, buf2, 0, 0), ErrOutOfRange)

	// Go-side argument checks.
	wantCode(t, CopyFromHost(s, buf, -1, src[:1]), ErrOutOfRange)
	wantCode(t, Memset(s, buf, 0, 0, -5), ErrOutOfRange)
	wantCode(t, Copy(s, nil, 0, buf, 0, 1), ErrNullArgument)
	_, err = s.Alloc(-1)
	wantCode(t, err, ErrInvalidArgument)
	_, err = d.AllocHost(0)
	wantCode(t, err, ErrInvalidArgument)

	// HostBytes: host memory on the host backend only.
	hb, err := buf.HostBytes()
	switch backendOf(t, d) {
	case BackendHost:
		must(t, err)
		must(t, s.Synchronize())
		if len(hb) != n || hb[100] != 0xab || hb[0] != src[0] {
			t.Fatal("HostBytes does not show the device memory")
		}
	default:
		wantCode(t, err, ErrUnsupported)
	}
}

func repeat(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestTypedCopies(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n = 4096

	f := make([]float32, n)
	for i := range f {
		f[i] = float32(i)*0.25 - 100
	}
	fb := alloc(t, s, 4*n)
	must(t, CopyFromHostSlice(s, fb, 0, f))
	fo := make([]float32, n)
	must(t, CopyToHostSlice(s, fo, fb, 0))
	for i := range f {
		if fo[i] != f[i] {
			t.Fatalf("float32 %d: %v != %v", i, fo[i], f[i])
		}
	}
	// A byte offset into a typed buffer.
	part := make([]float32, 10)
	must(t, CopyToHostSlice(s, part, fb, 4*100))
	if part[0] != f[100] || part[9] != f[109] {
		t.Fatal("offset read")
	}

	i32 := []int32{math.MinInt32, -1, 0, 1, math.MaxInt32}
	ib := alloc(t, s, 4*len(i32))
	must(t, CopyFromHostSlice(s, ib, 0, i32))
	io := make([]int32, len(i32))
	must(t, CopyToHostSlice(s, io, ib, 0))
	for i := range i32 {
		if io[i] != i32[i] {
			t.Fatalf("int32 %d", i)
		}
	}

	u64 := []uint64{0, 1, math.MaxUint64, 1 << 40}
	ub := alloc(t, s, 8*len(u64))
	must(t, CopyFromHostSlice(s, ub, 0, u64))
	pin := allocPinned(t, d, 8*len(u64))
	must(t, Copy(s, pin, 0, ub, 0, 8*len(u64)))
	must(t, pin.WaitRead())
	view := SliceOf[uint64](pin.Bytes())
	for i := range u64 {
		if view[i] != u64[i] {
			t.Fatalf("uint64 view %d", i)
		}
	}
	f64 := []float64{math.Pi, math.Inf(-1), -0.0}
	fb64 := alloc(t, s, 8*len(f64))
	must(t, CopyFromHostSlice(s, fb64, 0, f64))
	fo64 := make([]float64, len(f64))
	must(t, CopyToHostSlice(s, fo64, fb64, 0))
	for i := range f64 {
		if math.Float64bits(fo64[i]) != math.Float64bits(f64[i]) {
			t.Fatalf("float64 %d", i)
		}
	}
	if len(AsBytes(f64)) != 24 || AsBytes([]int16(nil)) != nil || len(SliceOf[uint32](make([]byte, 7))) != 1 {
		t.Fatal("AsBytes/SliceOf lengths")
	}
}

// The argument checks of Copy and Memset, whose fast path tests them all at
// once and builds the errors out of line: each error names the first check
// that fails, in the order stream, nil buffer, dst, src, range.
func TestCopyMemsetArgumentErrors(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	a, b := alloc(t, s, 64), alloc(t, s, 64)
	closed := alloc(t, s, 64)
	must(t, closed.Close())
	wantMsg := func(err error, want string) {
		t.Helper()
		se, ok := err.(*Error)
		if !ok || se.Message != want {
			t.Fatalf("got %v, want the message %q", err, want)
		}
	}
	wantMsg(Copy(s, a, -1, b, 0, 1), "sluice: Copy: negative offset or length (dst -1, src 0, len 1)")
	wantMsg(Copy(s, a, 0, b, -2, 1), "sluice: Copy: negative offset or length (dst 0, src -2, len 1)")
	wantMsg(Copy(s, a, 0, b, 0, -3), "sluice: Copy: negative offset or length (dst 0, src 0, len -3)")
	wantMsg(Copy(s, a, 0, nil, 0, 1), "sluice: Copy: nil buffer")
	wantMsg(Copy(s, closed, -1, b, 0, 1), "sluice: Copy(dst): handle is closed")
	wantMsg(Copy(s, a, 0, closed, -1, 1), "sluice: Copy(src): handle is closed")
	wantClosed(t, Copy(s, closed, 0, closed, 0, 1))
	wantMsg(Memset(s, a, -1, 0, 1), "sluice: Memset: negative offset or length (-1, 1)")
	wantMsg(Memset(s, nil, -1, 0, 1), "sluice: Memset: nil buffer")
	wantMsg(Memset(s, closed, -1, 0, 1), "sluice: Memset: handle is closed")
	wantClosed(t, Memset(s, closed, 0, 0, 1))

	s2 := testStream(t, d)
	must(t, s2.Close())
	wantMsg(Copy(s2, nil, -1, nil, 0, 1), "sluice: Copy: handle is closed")
	wantMsg(Memset(s2, nil, -1, 0, 1), "sluice: Memset: handle is closed")
	// The copies that pass every check still work.
	must(t, Memset(s, a, 0, 7, 64))
	must(t, Copy(s, b, 0, a, 0, 64))
	wantBytes(t, "copy", readBack(t, s, b, 64), bytes.Repeat([]byte{7}, 64))
}
