package sluice

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

// WrapDevice makes a Buffer (BufferForeign) of device memory that someone
// else allocated and owns, [ptr, ptr+size): for example a CUDA array of
// another library. The buffer has its own sync object, and copies, memsets
// and launches take it like any buffer.
//
// release (may be nil) runs exactly once, after Close of the buffer (and of
// every graph that captured it) AND after every use of the buffer that
// sluice ordered has completed on the device. It runs on a library thread
// ("sluice-release") when uses are still in flight, otherwise inside the
// call that dropped the last reference (Close, for example). It must not
// block on work that waits on this buffer; a panic in it is recovered and
// dropped. When WrapDevice fails, release is never called: the caller still
// owns the memory.
//
// On cuda the range must be memory of the device's context. On the host
// backend any non-zero address is taken, since host-backend "device" memory
// is host memory: Buffer.HostBytes views it.
func (d *Device) WrapDevice(ptr uint64, size int, release func()) (*Buffer, error) {
	const op = "Device.WrapDevice"
	h, err := d.h.raw(op)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, argError(CodeInvalidArgument, op, "negative size %d", size)
	}
	var rh cgo.Handle
	if release != nil {
		rh = newReleaseHandle(release)
	}
	var b C.sluice_buffer_t
	e := C.sluice_go_wrap_device(h, C.uint64_t(ptr), C.size_t(size), C.uintptr_t(rh), &b)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		if rh != 0 {
			// The library did not take the release: drop it uncalled.
			liveReleaseHandles.Add(-1)
			rh.Delete()
		}
		return nil, err
	}
	return newMemory[Buffer](b, d, nil, nil)
}

// liveReleaseHandles counts the cgo.Handles of WrapDevice release functions
// that have not run yet (for tests and leak checks).
var liveReleaseHandles atomic.Int64

func newReleaseHandle(fn func()) cgo.Handle {
	liveReleaseHandles.Add(1)
	return cgo.NewHandle(fn)
}

// DLPackFormat says which DLPack struct a pointer is.
type DLPackFormat uint32

const (
	// DLPackVersioned: a DLManagedTensorVersioned (DLPack 1.x).
	DLPackVersioned DLPackFormat = C.SLUICE_DLPACK_VERSIONED
	// DLPackUnversioned: a DLManagedTensor (DLPack 0.x).
	DLPackUnversioned DLPackFormat = C.SLUICE_DLPACK_UNVERSIONED
)

// TensorDesc is a tensor's element type and row-major shape, as DLPack
// describes it.
type TensorDesc struct {
	// DTypeCode is a DLDataTypeCode: 0 int, 1 uint, 2 float, 4 bfloat, ...
	DTypeCode uint8
	// DTypeBits is the number of bits per lane (a whole number of bytes with
	// DTypeLanes).
	DTypeBits uint8
	// DTypeLanes is the number of lanes per element (1 for scalars).
	DTypeLanes uint16
	// Shape holds the sizes, outermost first (empty for a scalar).
	Shape []int64
	// ReadOnly: the producer marked the tensor read-only (not enforced).
	ReadOnly bool
}

// ImportDLPack makes a Buffer (BufferForeign) of a DLPack managed tensor:
// tensor points to a DLManagedTensorVersioned (DLPackVersioned) or a
// DLManagedTensor (DLPackUnversioned), compact, row-major and on this device
// (kDLCPU on the host backend, kDLCUDA on cuda). Buffer.Tensor gives its
// dtype and shape.
//
// readyOn is the stream named to the producer (the DLPack stream exchange):
// the buffer's first use on another stream waits for it on the device. nil
// when the data is ready already.
//
// On success the buffer owns the tensor and calls its deleter once, after
// Close and after its last use completed on the device. On error the caller
// still owns the tensor (DeleteDLPack frees it).
func (d *Device) ImportDLPack(tensor unsafe.Pointer, format DLPackFormat, readyOn *Stream) (*Buffer, error) {
	const op = "Device.ImportDLPack"
	h, err := d.h.raw(op)
	if err != nil {
		return nil, err
	}
	var s C.sluice_stream_t
	hs := []anyHandle{&d.h}
	if readyOn != nil {
		if s, err = readyOn.raw(op); err != nil {
			return nil, err
		}
		hs = append(hs, readyOn.hs())
	}
	var b C.sluice_buffer_t
	e := C.sluice_buffer_from_dlpack(h, tensor, C.uint32_t(format), s, &b)
	runtime.KeepAlive(d)
	runtime.KeepAlive(readyOn)
	if err := check(e, hs...); err != nil {
		return nil, err
	}
	// The descriptor, read while no other goroutine has the handle: Tensor
	// returns this copy, since the library's shape goes with a Close.
	var desc C.sluice_tensor_desc_t
	if e := C.sluice_buffer_tensor(b, &desc); e != nil {
		dropError(release(b, nil))
		return nil, takeError(e)
	}
	td := tensorOf(&desc)
	out, err := newMemory[Buffer](b, d, nil, nil)
	if err == nil {
		out.tensor = &td
	}
	return out, err
}

// tensorOf copies a C tensor descriptor, its shape included.
func tensorOf(d *C.sluice_tensor_desc_t) TensorDesc {
	out := TensorDesc{
		DTypeCode:  uint8(d.dtype_code),
		DTypeBits:  uint8(d.dtype_bits),
		DTypeLanes: uint16(d.dtype_lanes),
		ReadOnly:   d.read_only != 0,
	}
	if d.ndim > 0 {
		out.Shape = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(d.shape)), int(d.ndim))...)
	}
	return out
}

// ExportDLPack exports the buffer as a DLPack managed tensor, returned as a
// C pointer to a DLManagedTensorVersioned (DLPackVersioned, version 1.1) or a
// DLManagedTensor (DLPackUnversioned). Its device is kDLCPU on the host
// backend; on cuda kDLCUDA for device and foreign buffers, kDLCUDAHost for
// pinned and registered ones. desc gives its dtype and shape (nil: the
// buffer's own from ImportDLPack, else 1-D uint8 of the buffer's size); its
// bytes must fit in the buffer.
//
// With a consumer stream (the one the consumer named) that stream waits on
// the device for every pending write and read of the buffer, and the host
// never blocks. With nil the call blocks until that work completed (what a
// CPU consumer needs).
//
// The tensor holds a reference to the buffer until its deleter runs: Close
// may come first. Whoever ends up with the tensor calls its deleter exactly
// once: a DLPack consumer, ImportDLPack's buffer, or DeleteDLPack.
func (m *memory) ExportDLPack(consumer *Stream, format DLPackFormat, desc *TensorDesc) (unsafe.Pointer, error) {
	const op = "Buffer.ExportDLPack"
	h, err := m.h.raw(op)
	if err != nil {
		return nil, err
	}
	var s C.sluice_stream_t
	hs := []anyHandle{&m.h}
	if consumer != nil {
		if s, err = consumer.raw(op); err != nil {
			return nil, err
		}
		hs = append(hs, consumer.hs())
	}
	var cd *C.sluice_tensor_desc_t
	if desc != nil {
		// C memory: the C struct may not point to Go memory across the call
		// under every cgocheck mode, and it is copied by the library.
		cd = (*C.sluice_tensor_desc_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.sluice_tensor_desc_t{}))))
		defer C.free(unsafe.Pointer(cd))
		cd.dtype_code = C.uint8_t(desc.DTypeCode)
		cd.dtype_bits = C.uint8_t(desc.DTypeBits)
		cd.dtype_lanes = C.uint16_t(desc.DTypeLanes)
		cd.ndim = C.int32_t(len(desc.Shape))
		if desc.ReadOnly {
			cd.read_only = 1
		}
		if n := len(desc.Shape); n > 0 {
			shape := (*C.int64_t)(C.malloc(C.size_t(n) * 8))
			defer C.free(unsafe.Pointer(shape))
			copy(unsafe.Slice((*int64)(unsafe.Pointer(shape)), n), desc.Shape)
			cd.shape = shape
		}
	}
	var t unsafe.Pointer
	e := C.sluice_buffer_to_dlpack(h, s, C.uint32_t(format), cd, &t)
	runtime.KeepAlive(m)
	runtime.KeepAlive(consumer)
	if err := check(e, hs...); err != nil {
		return nil, err
	}
	return t, nil
}

// Tensor returns the dtype and shape the buffer was imported with
// (ImportDLPack); ErrNotFound for a buffer that did not come from DLPack.
func (m *memory) Tensor() (TensorDesc, error) {
	const op = "Buffer.Tensor"
	if _, err := m.h.raw(op); err != nil {
		return TensorDesc{}, err
	}
	if m.tensor == nil {
		return TensorDesc{}, argError(CodeNotFound, op, "the buffer was not imported from DLPack")
	}
	out := *m.tensor
	out.Shape = append([]int64(nil), m.tensor.Shape...)
	return out, nil
}

// DLPackTensor is what a DLPack managed tensor says about its memory.
type DLPackTensor struct {
	// Data is the address of the first element (data + byte_offset).
	Data uint64
	// DeviceType is the DLDeviceType (1 kDLCPU, 2 kDLCUDA, 3 kDLCUDAHost).
	DeviceType int32
	// DeviceID is the device ordinal.
	DeviceID int32
	// Desc is the dtype and shape; Strides is nil for compact row-major.
	Desc    TensorDesc
	Strides []int64
	// Version is the DLPack version of a versioned tensor (0, 0 otherwise).
	VersionMajor, VersionMinor uint32
}

// ReadDLPack reads a managed tensor's fields (it does not take it).
func ReadDLPack(tensor unsafe.Pointer, format DLPackFormat) (DLPackTensor, error) {
	const op = "ReadDLPack"
	if tensor == nil {
		return DLPackTensor{}, argError(CodeNullArgument, op, "nil tensor")
	}
	var in C.sluice_go_dlpack_t
	if !C.sluice_go_dlpack_read(tensor, C.uint32_t(format), &in) {
		return DLPackTensor{}, argError(CodeInvalidArgument, op, "format %d is not a DLPackFormat", format)
	}
	out := DLPackTensor{
		Data:         uint64(in.data),
		DeviceType:   int32(in.device_type),
		DeviceID:     int32(in.device_id),
		VersionMajor: uint32(in.major),
		VersionMinor: uint32(in.minor),
		Desc: TensorDesc{
			DTypeCode:  uint8(in.dtype_code),
			DTypeBits:  uint8(in.dtype_bits),
			DTypeLanes: uint16(in.dtype_lanes),
			ReadOnly:   bool(in.read_only),
		},
	}
	if n := int(in.ndim); n > 0 {
		if in.shape != nil {
			out.Desc.Shape = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(in.shape)), n)...)
		}
		if in.strides != nil {
			out.Strides = append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(in.strides)), n)...)
		}
	}
	return out, nil
}

// DeleteDLPack calls a managed tensor's deleter (if it has one): for a tensor
// that no consumer took, such as one ExportDLPack made and ImportDLPack
// refused. The tensor must not be used afterwards.
func DeleteDLPack(tensor unsafe.Pointer, format DLPackFormat) error {
	if tensor == nil {
		return nil
	}
	if !C.sluice_go_dlpack_delete(tensor, C.uint32_t(format)) {
		return argError(CodeInvalidArgument, "DeleteDLPack", "format %d is not a DLPackFormat", format)
	}
	return nil
}

// DLPackCapsuleDestructor is the library's PyCapsule destructor for DLPack
// capsules, as a C function pointer, for Go code that hands ExportDLPack's
// tensors to CPython (through cgo): PyCapsule_New(tensor, "dltensor_versioned",
// DLPackCapsuleDestructor()). It runs in native code, also while a Python
// exception is pending; without a CPython in the process it does nothing.
func DLPackCapsuleDestructor() unsafe.Pointer {
	return unsafe.Pointer(C.sluice_dlpack_capsule_destructor)
}
