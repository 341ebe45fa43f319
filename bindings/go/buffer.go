package sluice

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// BufferKind says what a buffer is and where it lives.
type BufferKind uint32

const (
	// BufferDevice: device memory from the driver's stream-ordered pool.
	BufferDevice BufferKind = C.SLUICE_BUFFER_DEVICE
	// BufferPinned: pinned host memory from the device's caching pool.
	BufferPinned BufferKind = C.SLUICE_BUFFER_PINNED
	// BufferRegistered: caller-owned host memory registered with the device.
	BufferRegistered BufferKind = C.SLUICE_BUFFER_REGISTERED
	// BufferForeign: device memory someone else owns (WrapDevice, ImportDLPack).
	BufferForeign BufferKind = C.SLUICE_BUFFER_FOREIGN
)

// BufferInfo says what a buffer is and where it lives.
type BufferInfo struct {
	Kind BufferKind
	Size int
	// DevicePtr is the CUdeviceptr of device buffers, the host address
	// otherwise.
	DevicePtr uint64
	// HostPtr is the host address of pinned and registered buffers (C
	// memory), nil for device buffers.
	HostPtr unsafe.Pointer
}

// Memory is a buffer of any kind: *Buffer, *PinnedBuffer or *HostBuffer.
// Copies and memsets take Memory arguments.
type Memory interface {
	Syncable
	mem() *memory
}

// memory is the part all buffer kinds share (sluice_buffer_t).
type memory struct {
	h    handle[C.sluice_buffer_t]
	info BufferInfo
	dev  *Device
	// stream is the stream the free of a device buffer is ordered on.
	stream *Stream
	// owned is C memory allocated by AllocHost, freed after the buffer.
	owned unsafe.Pointer

	syncMu sync.Mutex
	sync   atomic.Pointer[SyncObject]
	// tensor is the dtype and shape of a DLPack import (nil otherwise), copied
	// at the import: the library's copy lives only as long as the handle.
	tensor *TensorDesc
}

// newMemory makes the wrapper W (Buffer, PinnedBuffer or HostBuffer) of a new
// C buffer: it owns the buffer and the C memory owned (nil for none).
func newMemory[W any, P interface {
	*W
	mem() *memory
}](b C.sluice_buffer_t, dev *Device, stream *Stream, owned unsafe.Pointer) (*W, error) {
	out := new(W)
	m := P(out).mem()
	m.dev, m.stream, m.owned = dev, stream, owned
	openHandleWithMemory(out, &m.h, b, owned)
	info, err := m.Info()
	if err != nil {
		m.owned = nil // the caller frees it
		m.Close()
		return nil, err
	}
	m.info = info
	return out, nil
}

func (m *memory) mem() *memory { return m }

// Close frees what the buffer owns: its handle, its sync object and, from
// AllocHost, its C memory. Device memory is released in stream order after
// every outstanding use, on any stream; pinned memory returns to the pool, and
// is reused only after the copies that use it have completed; registered
// memory is unregistered once the copies that use it have completed. Close is
// idempotent.
//
// After Close, slices from Bytes must no longer be used.
func (m *memory) Close() error {
	b, ok := m.h.take()
	if !ok {
		return nil
	}
	m.syncMu.Lock()
	so := m.sync.Load()
	m.syncMu.Unlock()
	if so != nil {
		so.h.close()
	}
	// sluice_buffer_free waits for the copies that use the memory.
	return takeError(release(b, m.owned))
}

// Size returns the size of the buffer in bytes.
func (m *memory) Size() int { return m.info.Size }

// Device returns the device the buffer belongs to.
func (m *memory) Device() *Device { return m.dev }

// Info asks the library what the buffer is and where it lives.
func (m *memory) Info() (BufferInfo, error) {
	h, err := m.h.raw("Buffer.Info")
	if err != nil {
		return BufferInfo{}, err
	}
	var in C.sluice_buffer_info_t
	e := C.sluice_buffer_info(h, &in)
	runtime.KeepAlive(m)
	if err := check(e, &m.h); err != nil {
		return BufferInfo{}, err
	}
	return BufferInfo{
		Kind:      BufferKind(in.kind),
		Size:      int(in.size),
		DevicePtr: uint64(in.device_ptr),
		HostPtr:   in.host_ptr,
	}, nil
}

// Sync returns the buffer's sync object, for op sets and host waits. It
// belongs to the buffer: it is made once, and closed by the buffer's Close.
func (m *memory) Sync() (*SyncObject, error) {
	if so := m.sync.Load(); so != nil {
		return so, nil
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	if so := m.sync.Load(); so != nil {
		return so, nil
	}
	h, err := m.h.raw("Buffer.Sync")
	if err != nil {
		return nil, err
	}
	var s C.sluice_sync_t
	e := C.sluice_buffer_sync(h, &s)
	runtime.KeepAlive(m)
	if err := check(e, &m.h); err != nil {
		return nil, err
	}
	so := newSyncObject(s, true)
	m.sync.Store(so)
	return so, nil
}

func (m *memory) syncObject(op string) (*SyncObject, error) {
	if so := m.sync.Load(); so != nil {
		return so, nil
	}
	return m.Sync()
}

// WaitRead blocks until the buffer's last writer has completed; see
// SyncObject.WaitRead.
func (m *memory) WaitRead() error {
	so, err := m.Sync()
	if err != nil {
		return err
	}
	return so.WaitRead()
}

// WaitWrite blocks until the buffer's last writer and every reader have
// completed; see SyncObject.WaitWrite.
func (m *memory) WaitWrite() error {
	so, err := m.Sync()
	if err != nil {
		return err
	}
	return so.WaitWrite()
}

// hostBytes is the []byte view of C host memory, nil once closed.
func (m *memory) hostBytes() []byte {
	if m.h.load() == 0 || m.info.HostPtr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(m.info.HostPtr), m.info.Size)
}

// Buffer is device memory: allocated in stream order (BufferDevice, by
// Stream.Alloc), or owned by someone else (BufferForeign, by
// Device.WrapDevice and Device.ImportDLPack). It keeps its Stream (nil for
// foreign memory) and Device alive.
type Buffer struct{ memory }

// PinnedBuffer is pinned host memory from the device's caching pool. Its
// memory is C memory, so it may be used by asynchronous copies; Bytes exposes
// it as a []byte.
type PinnedBuffer struct{ memory }

// HostBuffer is host memory registered with the device (BufferRegistered),
// so that copies to and from it are asynchronous. The memory is C memory:
// allocated by AllocHost, or provided by the caller through RegisterHost.
type HostBuffer struct{ memory }

// Alloc allocates size bytes of device memory, ordered on the stream. The
// buffer's free is ordered on the same stream, after every use on any stream.
// The *Buffer owns the handle: Close frees it, or a runtime cleanup does if
// the Buffer becomes unreachable first.
func (s *Stream) Alloc(size int) (*Buffer, error) {
	h, err := s.raw("Stream.Alloc")
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, argError(CodeInvalidArgument, "Stream.Alloc", "negative size %d", size)
	}
	var b C.sluice_buffer_t
	e := C.sluice_buffer_alloc(h, C.size_t(size), &b)
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return nil, err
	}
	return newMemory[Buffer](b, s.dev, s, nil)
}

// Stream returns the stream the buffer was allocated on (nil for foreign
// memory).
func (b *Buffer) Stream() *Stream { return b.stream }

// DevicePtr returns the buffer's CUdeviceptr (a host address on the host
// backend), for kernel arguments and foreign libraries.
func (b *Buffer) DevicePtr() uint64 { return b.info.DevicePtr }

// HostBytes returns the buffer's memory as a []byte on the host backend,
// whose "device" memory is host memory; it serves host callbacks that stand
// in for kernels. It fails with ErrUnsupported on other backends. The slice
// is valid until Close.
func (b *Buffer) HostBytes() ([]byte, error) {
	if b.h.load() == 0 {
		return nil, closedError("Buffer.HostBytes")
	}
	be, err := b.dev.backendKind()
	if err != nil {
		return nil, err
	}
	if be != BackendHost {
		return nil, argError(CodeUnsupported, "Buffer.HostBytes", "device memory of the %v backend is not host memory", be)
	}
	return unsafe.Slice((*byte)(C.sluice_go_ptr(C.uint64_t(b.info.DevicePtr))), b.info.Size), nil
}

// AllocPinned takes size bytes of pinned host memory from the device's
// bounded caching pool. Before writing it from the host after a copy read it,
// call WaitWrite. The *PinnedBuffer owns the handle: Close frees it, or a
// runtime cleanup does if the PinnedBuffer becomes unreachable first.
func (d *Device) AllocPinned(size int) (*PinnedBuffer, error) {
	h, err := d.h.raw("Device.AllocPinned")
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, argError(CodeInvalidArgument, "Device.AllocPinned", "negative size %d", size)
	}
	var b C.sluice_buffer_t
	e := C.sluice_buffer_alloc_pinned(h, C.size_t(size), &b)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	return newMemory[PinnedBuffer](b, d, nil, nil)
}

// Bytes returns the pinned memory as a []byte (C memory; nil after Close).
// Keep the PinnedBuffer reachable while the slice is used, and do not write
// it while a copy may still read it (WaitWrite first) nor read it before a
// copy into it completed (WaitRead first).
func (p *PinnedBuffer) Bytes() []byte { return p.hostBytes() }

const hostAlign = 4096

// AllocHost allocates size bytes of page-aligned C memory and registers it
// with the device. The *HostBuffer owns the handle and the memory: Close
// unregisters and frees both, or a runtime cleanup does if the HostBuffer
// becomes unreachable first.
func (d *Device) AllocHost(size int) (*HostBuffer, error) {
	if _, err := d.h.raw("Device.AllocHost"); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, argError(CodeInvalidArgument, "Device.AllocHost", "size must be > 0, got %d", size)
	}
	rounded := (size + hostAlign - 1) / hostAlign * hostAlign
	p := C.aligned_alloc(hostAlign, C.size_t(rounded))
	if p == nil {
		return nil, argError(CodeOutOfMemory, "Device.AllocHost", "allocation of %d bytes failed", size)
	}
	out, err := d.register("Device.AllocHost", p, size, p)
	if err != nil {
		C.free(p)
		return nil, err
	}
	return out, nil
}

// RegisterHost registers caller-owned host memory [ptr, ptr+size) with the
// device, so copies to and from it are asynchronous.
//
// The memory must not be Go memory (the cgo rules forbid C keeping Go
// pointers): use C memory or memory mapped with syscall.Mmap. It must stay
// valid until Close, which waits for the copies that still use it. The
// *HostBuffer owns the handle, freed as with AllocHost, but not the memory.
func (d *Device) RegisterHost(ptr unsafe.Pointer, size int) (*HostBuffer, error) {
	if size < 0 {
		return nil, argError(CodeInvalidArgument, "Device.RegisterHost", "negative size %d", size)
	}
	return d.register("Device.RegisterHost", ptr, size, nil)
}

func (d *Device) register(op string, ptr unsafe.Pointer, size int, owned unsafe.Pointer) (*HostBuffer, error) {
	h, err := d.h.raw(op)
	if err != nil {
		return nil, err
	}
	var b C.sluice_buffer_t
	e := C.sluice_buffer_register_host(h, ptr, C.size_t(size), &b)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	return newMemory[HostBuffer](b, d, nil, owned)
}

// Bytes returns the registered memory as a []byte (nil after Close), under
// the same rules as PinnedBuffer.Bytes.
func (hb *HostBuffer) Bytes() []byte { return hb.hostBytes() }
