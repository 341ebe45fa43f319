package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"sync/atomic"
	"unsafe"
)

// Backend selects an implementation of the device seam.
type Backend uint32

const (
	// BackendHost: CPU worker threads with CUDA stream semantics.
	BackendHost Backend = C.SLUICE_BACKEND_HOST
	// BackendCUDA: the CUDA driver API.
	BackendCUDA Backend = C.SLUICE_BACKEND_CUDA
)

// String returns "host", "cuda" or "backend(N)".
func (b Backend) String() string {
	switch b {
	case BackendHost:
		return "host"
	case BackendCUDA:
		return "cuda"
	}
	return "backend(" + strconv.FormatUint(uint64(b), 10) + ")"
}

// Device is an open device handle (sluice_device_t). Objects created on a
// device keep it alive, on the C side and here; Close releases this handle
// only. A Device may be used from many goroutines at once.
type Device struct {
	h       handle[C.sluice_device_t]
	backend atomic.Uint32 // cached Props().Backend; 0 until known
}

// DeviceProps are the static properties of a device.
type DeviceProps struct {
	Name                   string
	TotalMemory            uint64
	ComputeCapabilityMajor int
	ComputeCapabilityMinor int
	// MultiprocessorCount is the number of SMs (CPU threads on host).
	MultiprocessorCount int
	Backend             Backend
	Ordinal             int
}

// PinnedStats are the statistics of a device's pinned host-memory pool.
type PinnedStats struct {
	BytesInUse  uint64
	BytesCached uint64
	CacheLimit  uint64
	Hits        uint64
	Misses      uint64
}

// DeviceCount returns the number of devices of backend. For cuda with no
// usable driver it fails with ErrNoDriver.
func DeviceCount(backend Backend) (int, error) {
	var n C.uint32_t
	if err := takeError(C.sluice_device_count(C.uint32_t(backend), &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// OpenDevice opens device ordinal of backend. Each call gives a new handle to
// the same device. The *Device owns the handle: Close releases it, or a
// runtime cleanup does if the Device becomes unreachable first.
func OpenDevice(backend Backend, ordinal int) (*Device, error) {
	if ordinal < 0 || uint64(ordinal) > math.MaxUint32 {
		return nil, argError(CodeNoDevice, "OpenDevice", "ordinal %d is outside 0 to 2^32-1", ordinal)
	}
	var d C.sluice_device_t
	if err := takeError(C.sluice_device_open(C.uint32_t(backend), C.uint32_t(ordinal), &d)); err != nil {
		return nil, err
	}
	return newDevice(d), nil
}

// OpenDefaultDevice opens the default device: SLUICE_BACKEND=auto|cuda|host
// (auto: cuda device 0 when a usable driver and GPU exist, else host device 0).
// The *Device owns the handle, as with OpenDevice.
func OpenDefaultDevice() (*Device, error) {
	var d C.sluice_device_t
	if err := takeError(C.sluice_device_open_default(&d)); err != nil {
		return nil, err
	}
	return newDevice(d), nil
}

func newDevice(d C.sluice_device_t) *Device {
	dev := &Device{}
	openHandle(dev, &dev.h, d)
	dev.backendKind() // cache it while the handle is surely open
	return dev
}

// Close releases the device handle that the Device owns. Objects created on
// the device stay valid. Close is idempotent; only the first call can return
// an error.
func (d *Device) Close() error { return d.h.close() }

// Props returns the device's properties.
func (d *Device) Props() (DeviceProps, error) {
	h, err := d.h.raw("Device.Props")
	if err != nil {
		return DeviceProps{}, err
	}
	var p C.sluice_device_props_t
	e := C.sluice_device_props(h, &p)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return DeviceProps{}, err
	}
	return DeviceProps{
		Name:                   C.GoString((*C.char)(unsafe.Pointer(&p.name[0]))),
		TotalMemory:            uint64(p.total_memory),
		ComputeCapabilityMajor: int(p.compute_capability_major),
		ComputeCapabilityMinor: int(p.compute_capability_minor),
		MultiprocessorCount:    int(p.multiprocessor_count),
		Backend:                Backend(p.backend),
		Ordinal:                int(p.ordinal),
	}, nil
}

// Backend returns the backend of the device.
func (d *Device) Backend() (Backend, error) { return d.backendKind() }

func (d *Device) backendKind() (Backend, error) {
	if b := d.backend.Load(); b != 0 {
		return Backend(b), nil
	}
	p, err := d.Props()
	if err != nil {
		return 0, err
	}
	d.backend.Store(uint32(p.Backend))
	return p.Backend, nil
}

// PriorityRange returns the stream priority range: least (lowest priority)
// and greatest (highest; numerically lowest on CUDA).
func (d *Device) PriorityRange() (least, greatest int, err error) {
	h, err := d.h.raw("Device.PriorityRange")
	if err != nil {
		return 0, 0, err
	}
	var l, g C.int32_t
	e := C.sluice_device_priority_range(h, &l, &g)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return 0, 0, err
	}
	return int(l), int(g), nil
}

// WaitAll blocks until all work on every stream of the device has completed,
// then reports the first deferred error, if any.
func (d *Device) WaitAll() error {
	return callOn(&d.h, "Device.WaitAll", func(h C.sluice_device_t) *C.sluice_error_t { return C.sluice_device_wait_all(h) })
}

// PinnedStats returns the statistics of the device's pinned pool.
func (d *Device) PinnedStats() (PinnedStats, error) {
	h, err := d.h.raw("Device.PinnedStats")
	if err != nil {
		return PinnedStats{}, err
	}
	var s C.sluice_pinned_stats_t
	e := C.sluice_device_pinned_stats(h, &s)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return PinnedStats{}, err
	}
	return PinnedStats{
		BytesInUse:  uint64(s.bytes_in_use),
		BytesCached: uint64(s.bytes_cached),
		CacheLimit:  uint64(s.cache_limit),
		Hits:        uint64(s.hits),
		Misses:      uint64(s.misses),
	}, nil
}

// TrimPinned releases every cached pinned block (waiting for copies that
// still use them).
func (d *Device) TrimPinned() error {
	return callOn(&d.h, "Device.TrimPinned", func(h C.sluice_device_t) *C.sluice_error_t { return C.sluice_device_pinned_trim(h) })
}

// SetPinnedLimit sets the bound on cached pinned bytes (default 256 MiB) and
// trims down to it.
func (d *Device) SetPinnedLimit(bytes uint64) error {
	return callOn(&d.h, "Device.SetPinnedLimit", func(h C.sluice_device_t) *C.sluice_error_t {
		return C.sluice_device_pinned_set_limit(h, C.uint64_t(bytes))
	})
}
