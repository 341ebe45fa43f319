package sluice

// Loops of C API calls made from C, for the benchmarks in bench_test.go,
// which compare them with the same calls made from Go through this package.
// (Test files cannot use cgo, so the wrappers live here; they are unexported.)

/*
#include <stdlib.h>
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"time"
	"unsafe"
)

func cBenchEventRecord(s *Stream, n int) (time.Duration, error) {
	h, err := s.raw("cBenchEventRecord")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_event(h, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	return time.Duration(ns), takeError(e)
}

func cBenchOp(s *Stream, obj Syncable, n int) (time.Duration, error) {
	h, err := s.raw("cBenchOp")
	if err != nil {
		return 0, err
	}
	so, err := obj.syncObject("cBenchOp")
	if err != nil {
		return 0, err
	}
	oh, err := so.h.raw("cBenchOp")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_op(h, oh, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(obj)
	return time.Duration(ns), takeError(e)
}

func cBenchQuery(s *Stream, n int) (time.Duration, error) {
	h, err := s.raw("cBenchQuery")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_query(h, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	return time.Duration(ns), takeError(e)
}

// cBenchSetAfterCall sets what the C loops do after each API call
// (sluice_go_bench_set_after_call): 0 nothing, 1 an atomic read-modify-write,
// 2 an mfence, 3 / 4 / 5 a call into 4 / 16 / 64 KiB of code.
func cBenchSetAfterCall(mode int) { C.sluice_go_bench_set_after_call(C.int(mode)) }

// touchBuf is C memory for the footprint benchmark; free it with free.
type touchBuf struct{ p *C.uchar }

func newTouchBuf(kb int) touchBuf { return touchBuf{(*C.uchar)(C.calloc(C.size_t(kb)+1, 1024))} }
func (b touchBuf) free()          { C.free(unsafe.Pointer(b.p)) }

// touch is one call of a C function with kb KiB of memory footprint.
func (b touchBuf) touch(kb int) { C.sluice_go_bench_touch(b.p, C.size_t(kb)) }

func (b touchBuf) loop(kb, n int) time.Duration {
	return time.Duration(C.sluice_go_bench_touch_loop(b.p, C.size_t(kb), C.uint64_t(n)))
}

// cHandles resolves the sync handles of a set for a C loop.
func cHandles(op string, set []Syncable) ([]C.sluice_sync_t, error) {
	return appendSyncs(op, set, make([]C.sluice_sync_t, 0, len(set)))
}

// cSets gives the read and write sets as C handles.
func cSets(op string, reads, writes []Syncable) (r, w []C.sluice_sync_t, err error) {
	if r, err = cHandles(op, reads); err != nil {
		return nil, nil, err
	}
	w, err = cHandles(op, writes)
	return r, w, err
}

func cBenchOpSets(s *Stream, reads, writes []Syncable, n int) (time.Duration, error) {
	const op = "cBenchOpSets"
	h, err := s.raw(op)
	if err != nil {
		return 0, err
	}
	r, w, err := cSets(op, reads, writes)
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_op_sets(h, syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)), C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	return time.Duration(ns), takeError(e)
}

func cBenchCopy(s *Stream, dst, src Memory, size, n int) (time.Duration, error) {
	const op = "cBenchCopy"
	h, err := s.raw(op)
	if err != nil {
		return 0, err
	}
	dm, sm := dst.mem(), src.mem()
	dh, err := dm.h.raw(op)
	if err != nil {
		return 0, err
	}
	sh, err := sm.h.raw(op)
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_copy(h, dh, sh, C.size_t(size), C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(dm)
	runtime.KeepAlive(sm)
	return time.Duration(ns), takeError(e)
}

func cBenchMemset(s *Stream, dst Memory, size, n int) (time.Duration, error) {
	const op = "cBenchMemset"
	h, err := s.raw(op)
	if err != nil {
		return 0, err
	}
	dm := dst.mem()
	dh, err := dm.h.raw(op)
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_memset(h, dh, C.size_t(size), C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(dm)
	return time.Duration(ns), takeError(e)
}

func cBenchLaunch(s *Stream, f *Function, cfg LaunchConfig, reads, writes []Syncable, args []any, n int) (time.Duration, error) {
	l, err := resolveLaunch("cBenchLaunch", s, f, cfg, reads, writes, args)
	defer l.av.release()
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_launch(l.h, l.fh, &l.dims, valsPtr(l.vals), C.size_t(len(l.vals)),
		syncPtr(l.r), C.size_t(len(l.r)), syncPtr(l.w), C.size_t(len(l.w)), C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(f)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	runtime.KeepAlive(args)
	return time.Duration(ns), takeError(e)
}

// resolvedLaunch is a launch's C arguments, resolved once for a loop.
type resolvedLaunch struct {
	h    C.sluice_stream_t
	fh   C.sluice_function_t
	dims C.sluice_launch_dims_t
	r, w []C.sluice_sync_t
	av   argVals
	vals []uint64
}

// resolveLaunch resolves what Launch resolves on every call; the caller
// releases l.av, also after an error.
func resolveLaunch(op string, s *Stream, f *Function, cfg LaunchConfig, reads, writes []Syncable, args []any) (l resolvedLaunch, err error) {
	if l.h, err = s.raw(op); err != nil {
		return l, err
	}
	if l.fh, err = f.h.raw(op); err != nil {
		return l, err
	}
	if l.r, l.w, err = cSets(op, reads, writes); err != nil {
		return l, err
	}
	l.dims = cfg.cDims()
	l.vals, err = l.av.fill(op, args)
	return l, err
}

// cgoOpSets makes n op begin + end pairs from Go straight through cgo, with
// the handles of reads resolved once: the floor under BeginOpInto (the cgo
// transitions alone, without the binding's work).
func cgoOpSets(s *Stream, reads []Syncable, n int) error {
	const op = "cgoOpSets"
	h, err := s.raw(op)
	if err != nil {
		return err
	}
	r, err := cHandles(op, reads)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var o C.sluice_op_t
		if err := takeError(C.sluice_op_begin(h, syncPtr(r), C.size_t(len(r)), nil, 0, &o)); err != nil {
			return err
		}
		if err := takeError(C.sluice_op_end(o)); err != nil {
			return err
		}
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(reads)
	return nil
}

// cgoLaunch makes n launches from Go straight through cgo (the binding's
// own C call, launchC), with the handles, the sets and the argument
// values resolved once: the floor under Launch.
func cgoLaunch(s *Stream, f *Function, cfg LaunchConfig, reads, writes []Syncable, args []any, n int) error {
	l, err := resolveLaunch("cgoLaunch", s, f, cfg, reads, writes, args)
	defer l.av.release()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := takeError(launchC(l.h, l.fh, &l.dims, l.vals, l.r, l.w)); err != nil {
			return err
		}
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(f)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	runtime.KeepAlive(args)
	return nil
}
