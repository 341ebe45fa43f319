package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// All offsets and lengths of this file are in bytes.

// streamAndBuffer checks and resolves the stream and the one buffer of a
// single-buffer copy or memset; off and n must not be negative. The checks
// that pass are a few loads and tests; the errors are built by
// streamAndBufferError, out of line.
func streamAndBuffer(op string, s *Stream, buf Memory, off, n int) (C.sluice_stream_t, *memory, C.sluice_buffer_t, error) {
	sb := s.hs().load()
	if sb == 0 || buf == nil {
		return C.sluice_stream_t{}, nil, C.sluice_buffer_t{}, streamAndBufferError(op, s, buf, off, n)
	}
	m := buf.mem()
	bb := m.h.load()
	if bb == 0 || off|n < 0 {
		return C.sluice_stream_t{}, nil, C.sluice_buffer_t{}, streamAndBufferError(op, s, buf, off, n)
	}
	return C.sluice_stream_t{bits: C.uint64_t(sb)}, m, C.sluice_buffer_t{bits: C.uint64_t(bb)}, nil
}

// streamAndBufferError is the error of a streamAndBuffer whose checks
// failed, found by checking again in order (a closed handle stays closed).
//
//go:noinline
func streamAndBufferError(op string, s *Stream, buf Memory, off, n int) error {
	if _, err := s.raw(op); err != nil {
		return err
	}
	if buf == nil {
		return argError(CodeNullArgument, op, "nil buffer")
	}
	if _, err := buf.mem().h.raw(op); err != nil {
		return err
	}
	return argError(CodeOutOfRange, op, "negative offset or length (%d, %d)", off, n)
}

// Copy copies n bytes from src at srcOff to dst at dstOff on the stream: any
// direction between device, pinned and registered buffers. The copy is a
// tracked op (it reads src and writes dst), ordered after conflicting work on
// other streams. An out-of-range copy fails with ErrOutOfRange and changes
// nothing.
func Copy(s *Stream, dst Memory, dstOff int, src Memory, srcOff int, n int) error {
	// The fast path: every check passes (copyError builds the errors).
	r := s.root()
	sb := r.h.load()
	if sb == 0 || dst == nil || src == nil {
		return copyError(s, dst, dstOff, src, srcOff, n)
	}
	dm, sm := dst.mem(), src.mem()
	db, srb := dm.h.load(), sm.h.load()
	if db == 0 || srb == 0 || dstOff|srcOff|n < 0 {
		return copyError(s, dst, dstOff, src, srcOff, n)
	}
	e := C.sluice_stream_copy(C.sluice_stream_t{bits: C.uint64_t(sb)},
		C.sluice_buffer_t{bits: C.uint64_t(db)}, C.size_t(dstOff),
		C.sluice_buffer_t{bits: C.uint64_t(srb)}, C.size_t(srcOff), C.size_t(n))
	runtime.KeepAlive(s)
	runtime.KeepAlive(dm)
	runtime.KeepAlive(sm)
	if e != nil {
		return checkFailed(e, []anyHandle{&r.h, &dm.h, &sm.h})
	}
	if r.capture.Load() != nil {
		s.captureKeep([]Syncable{dm, sm})
	}
	return nil
}

// copyError is the error of a Copy whose checks failed, found by checking
// again in order (a closed handle stays closed).
//
//go:noinline
func copyError(s *Stream, dst Memory, dstOff int, src Memory, srcOff int, n int) error {
	const op = "Copy"
	if _, err := s.raw(op); err != nil {
		return err
	}
	if dst == nil || src == nil {
		return argError(CodeNullArgument, op, "nil buffer")
	}
	if _, err := dst.mem().h.raw(op + "(dst)"); err != nil {
		return err
	}
	if _, err := src.mem().h.raw(op + "(src)"); err != nil {
		return err
	}
	return argError(CodeOutOfRange, op, "negative offset or length (dst %d, src %d, len %d)", dstOff, srcOff, n)
}

// CopyFromHost copies src (pageable Go memory) into dst at off. It returns
// once src may be reused (sluice copies or waits before returning); the
// write of dst is ordered on the stream.
func CopyFromHost(s *Stream, dst Memory, off int, src []byte) error {
	sh, dm, dh, err := streamAndBuffer("CopyFromHost", s, dst, off, 0)
	if err != nil {
		return err
	}
	e := C.sluice_stream_copy_from_host(sh, dh, C.size_t(off), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)))
	runtime.KeepAlive(s)
	runtime.KeepAlive(dm)
	runtime.KeepAlive(src)
	return check(e, s.hs(), &dm.h)
}

// CopyToHost copies len(dst) bytes of src at off into dst (pageable Go
// memory). It blocks until the bytes have arrived.
func CopyToHost(s *Stream, dst []byte, src Memory, off int) error {
	sh, sm, srh, err := streamAndBuffer("CopyToHost", s, src, off, 0)
	if err != nil {
		return err
	}
	e := C.sluice_stream_copy_to_host(sh, unsafe.Pointer(unsafe.SliceData(dst)), srh, C.size_t(off), C.size_t(len(dst)))
	runtime.KeepAlive(s)
	runtime.KeepAlive(sm)
	runtime.KeepAlive(dst)
	return check(e, s.hs(), &sm.h)
}

// Memset sets n bytes of dst at off to value, in order on the stream.
func Memset(s *Stream, dst Memory, off int, value byte, n int) error {
	sh, dm, dh, err := streamAndBuffer("Memset", s, dst, off, n)
	if err != nil {
		return err
	}
	e := C.sluice_stream_memset(sh, dh, C.size_t(off), C.uint8_t(value), C.size_t(n))
	runtime.KeepAlive(s)
	runtime.KeepAlive(dm)
	if e != nil {
		return checkFailed(e, []anyHandle{s.hs(), &dm.h})
	}
	if s.capturing() {
		s.captureKeep([]Syncable{dm})
	}
	return nil
}

// Element is the constraint of the typed helpers: fixed-size numbers.
type Element interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// AsBytes returns the memory of v as a []byte, without copying.
func AsBytes[T Element](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
}

// SliceOf returns b as a []T, without copying; a trailing partial element is
// dropped. b must be aligned for T (pinned and registered memory is
// page-aligned).
func SliceOf[T Element](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// CopyFromHostSlice is CopyFromHost for a slice of numbers (no copy on the Go
// side). off is in bytes.
func CopyFromHostSlice[T Element](s *Stream, dst Memory, off int, src []T) error {
	return CopyFromHost(s, dst, off, AsBytes(src))
}

// CopyToHostSlice is CopyToHost into a slice of numbers (no copy on the Go
// side). off is in bytes.
func CopyToHostSlice[T Element](s *Stream, dst []T, src Memory, off int) error {
	return CopyToHost(s, AsBytes(dst), src, off)
}
