package sluice

import (
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// mmapped returns n bytes of memory outside the Go heap (host-backend
// "device" memory is host memory, and C may keep pointers to it).
func mmapped(t *testing.T, n int) []byte {
	t.Helper()
	mm, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	must(t, err)
	t.Cleanup(func() { syscall.Munmap(mm) })
	return mm
}

func hostOnly(t *testing.T, d *Device) {
	t.Helper()
	if backendOf(t, d) != BackendHost {
		t.Skip("host backend only: wraps host memory as device memory")
	}
}

func TestWrapDeviceReleaseRunsOnceAfterOutstandingWork(t *testing.T) {
	d := openDev(t)
	hostOnly(t, d)
	s := testStream(t, d)
	const n = 4096
	mem := mmapped(t, n)
	live0 := liveReleaseHandles.Load()
	var calls int32
	released := make(chan struct{}, 2)
	b, err := d.WrapDevice(uint64(uintptr(unsafe.Pointer(&mem[0]))), n, func() {
		calls++
		released <- struct{}{}
	})
	must(t, err)
	info, err := b.Info()
	must(t, err)
	if info.Kind != BufferForeign || info.Size != n || b.Stream() != nil {
		t.Fatalf("info %+v, stream %v", info, b.Stream())
	}
	// Copies and memsets take it like any buffer; HostBytes views the memory.
	src := pattern(n, 3)
	must(t, CopyFromHost(s, b, 0, src))
	wantBytes(t, "wrapped memory after a copy", readBack(t, s, b, n), src)
	hb, err := b.HostBytes()
	must(t, err)
	wantBytes(t, "HostBytes", hb, src)
	wantBytes(t, "the memory itself", mem, src)

	// A host callback that writes the buffer and blocks: the release must wait
	// for it, and Close must not.
	gate := make(chan struct{})
	must(t, s.HostCallback(func() error { <-gate; return nil }, nil, []Syncable{b}))
	must(t, Memset(s, b, 0, 0x5A, n))
	must(t, b.Close())
	select {
	case <-released:
		t.Fatal("release ran before the buffer's outstanding work completed")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("release did not run after the work completed")
	}
	// The memset (the last use) completed before the release.
	for i, v := range mem {
		if v != 0x5A {
			t.Fatalf("byte %d is %#x at release: the memset had not completed", i, v)
		}
	}
	must(t, s.Synchronize())
	must(t, b.Close()) // idempotent
	time.Sleep(20 * time.Millisecond)
	if calls != 1 {
		t.Fatalf("release ran %d times", calls)
	}
	if got := liveReleaseHandles.Load(); got != live0 {
		t.Fatalf("release handles: %d live, want %d", got, live0)
	}
}

func TestWrapDeviceReleaseInlineWhenIdle(t *testing.T) {
	d := openDev(t)
	hostOnly(t, d)
	mem := mmapped(t, 64)
	calls := 0
	b, err := d.WrapDevice(uint64(uintptr(unsafe.Pointer(&mem[0]))), 64, func() { calls++ })
	must(t, err)
	must(t, b.Close()) // nothing outstanding: the release runs inside Close
	if calls != 1 {
		t.Fatalf("release ran %d times during Close, want 1", calls)
	}
	// nil release: nothing to call.
	b, err = d.WrapDevice(uint64(uintptr(unsafe.Pointer(&mem[0]))), 64, nil)
	must(t, err)
	must(t, b.Close())
}

func TestWrapDeviceErrorsDoNotRelease(t *testing.T) {
	d := openDev(t)
	live0 := liveReleaseHandles.Load()
	called := false
	rel := func() { called = true }
	_, err := d.WrapDevice(0, 64, rel)
	wantCode(t, err, ErrNullArgument)
	if backendOf(t, d) == BackendHost {
		mem := mmapped(t, 64)
		p := uint64(uintptr(unsafe.Pointer(&mem[0])))
		_, err = d.WrapDevice(p, 0, rel)
		wantCode(t, err, ErrInvalidArgument)
		_, err = d.WrapDevice(^uint64(0)-8, 64, rel)
		wantCode(t, err, ErrOutOfRange)
	}
	_, err = d.WrapDevice(1, -1, rel)
	wantCode(t, err, ErrInvalidArgument)
	if called {
		t.Fatal("release ran for a failed WrapDevice")
	}
	if got := liveReleaseHandles.Load(); got != live0 {
		t.Fatalf("release handles: %d live, want %d", got, live0)
	}
	d2, err := OpenDefaultDevice()
	must(t, err)
	must(t, d2.Close())
	_, err = d2.WrapDevice(1, 64, rel)
	wantClosed(t, err)
}

func TestDLPackRoundTrip(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	for _, format := range []DLPackFormat{DLPackVersioned, DLPackUnversioned} {
		const n = 256
		b, err := s.Alloc(n)
		must(t, err)
		src := pattern(n, byte(format))
		must(t, CopyFromHost(s, b, 0, src))
		desc := &TensorDesc{DTypeCode: 2, DTypeBits: 32, DTypeLanes: 1, Shape: []int64{4, 16}}
		tensor, err := b.ExportDLPack(s, format, desc)
		must(t, err)
		info, err := ReadDLPack(tensor, format)
		must(t, err)
		if info.Data != b.DevicePtr() || info.Desc.DTypeBits != 32 || len(info.Desc.Shape) != 2 ||
			info.Desc.Shape[0] != 4 || info.Desc.Shape[1] != 16 || info.Strides != nil {
			t.Fatalf("exported tensor %+v (buffer at %#x)", info, b.DevicePtr())
		}
		if format == DLPackVersioned && (info.VersionMajor != 1) {
			t.Fatalf("version %d.%d", info.VersionMajor, info.VersionMinor)
		}
		if backendOf(t, d) == BackendHost && info.DeviceType != 1 {
			t.Fatalf("host-backend export has device type %d, want kDLCPU", info.DeviceType)
		}
		// The tensor keeps the memory: the handle may go first.
		must(t, b.Close())
		back, err := d.ImportDLPack(tensor, format, s)
		must(t, err)
		got, err := back.Tensor()
		must(t, err)
		if got.DTypeCode != 2 || got.DTypeBits != 32 || got.DTypeLanes != 1 || len(got.Shape) != 2 ||
			got.Shape[0] != 4 || got.Shape[1] != 16 {
			t.Fatalf("imported desc %+v", got)
		}
		if back.Size() != n {
			t.Fatalf("imported size %d", back.Size())
		}
		wantBytes(t, "sluice -> DLPack -> sluice", readBack(t, s, back, n), src)
		// A second export with no desc keeps the imported dtype and shape.
		t2, err := back.ExportDLPack(nil, DLPackVersioned, nil)
		must(t, err)
		i2, err := ReadDLPack(t2, DLPackVersioned)
		must(t, err)
		if len(i2.Desc.Shape) != 2 || i2.Desc.DTypeBits != 32 {
			t.Fatalf("re-export %+v", i2)
		}
		must(t, DeleteDLPack(t2, DLPackVersioned))
		must(t, back.Close()) // runs the export's deleter
		must(t, s.Synchronize())
	}
}

func TestDLPackErrors(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	b := alloc(t, s, 64)
	// A plain buffer has no DLPack dtype or shape.
	_, err := b.Tensor()
	wantCode(t, err, ErrNotFound)
	// Bytes beyond the buffer.
	_, err = b.ExportDLPack(s, DLPackVersioned, &TensorDesc{DTypeCode: 2, DTypeBits: 32, DTypeLanes: 1, Shape: []int64{17}})
	wantCode(t, err, ErrOutOfRange)
	_, err = b.ExportDLPack(s, DLPackFormat(9), nil)
	wantCode(t, err, ErrInvalidArgument)
	_, err = d.ImportDLPack(nil, DLPackVersioned, nil)
	wantCode(t, err, ErrNullArgument)
	// An import that fails leaves the tensor to the caller.
	tensor, err := b.ExportDLPack(nil, DLPackVersioned, nil)
	must(t, err)
	_, err = d.ImportDLPack(tensor, DLPackFormat(9), nil)
	wantCode(t, err, ErrInvalidArgument)
	must(t, DeleteDLPack(tensor, DLPackVersioned))
	if err := DeleteDLPack(tensor, DLPackFormat(9)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("DeleteDLPack with a bad format: %v", err)
	}
	// Closed handles.
	b2, err := s.Alloc(8)
	must(t, err)
	must(t, b2.Close())
	_, err = b2.ExportDLPack(nil, DLPackVersioned, nil)
	wantClosed(t, err)
	_, err = b2.Tensor()
	wantClosed(t, err)
}

// Buffer.Tensor copies desc.shape, which "stays valid while the buffer
// handle lives", after sluice_buffer_tensor returns, with nothing holding the
// handle: a Close on another goroutine (documented as safe while other
// goroutines use the object) can free the shape between the C call and the
// copy, and Tensor returns garbage read from freed memory.
func TestTensorRacingClose(t *testing.T) {
	d := openDev(t)
	hostOnly(t, d)
	s := testStream(t, d)
	want := []int64{2, 3, 4, 5}
	src := alloc(t, s, 2*3*4*5*4)
	bad := 0
	for it := 0; it < 1000 && bad == 0; it++ {
		tensor, err := src.ExportDLPack(nil, DLPackVersioned, &TensorDesc{DTypeCode: 2, DTypeBits: 32, DTypeLanes: 1, Shape: want})
		must(t, err)
		b, err := d.ImportDLPack(tensor, DLPackVersioned, nil)
		must(t, err)
		var wg sync.WaitGroup
		ready := make(chan struct{})
		var got [][]int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				td, err := b.Tensor()
				if err != nil {
					return
				}
				if i == 0 {
					close(ready)
				}
				got = append(got, td.Shape)
			}
		}()
		<-ready
		for range it % 13 {
			_ = b.Size()
		}
		must(t, b.Close())
		wg.Wait()
		for _, g := range got {
			if !slices.Equal(g, want) {
				bad++
				t.Errorf("iteration %d: Tensor returned shape %v, want %v", it, g, want)
				break
			}
		}
	}
}

// The capsule destructor is the library's function.
func TestDLPackCapsuleDestructor(t *testing.T) {
	if DLPackCapsuleDestructor() == nil {
		t.Fatal("no destructor")
	}
}
