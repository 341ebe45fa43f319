package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"sync/atomic"
)

// handle is the state every wrapper shares: the handle bits of the C object
// (0 once closed) and the cleanup that destroys the C handle if the wrapper
// is collected without Close.
//
// The C API makes a stale handle an error, never undefined behaviour, so the
// only job here is bookkeeping: Close swaps the bits to 0 exactly once, and a
// call racing with Close either sees the object or reports ErrClosed.
type handle struct {
	bits    atomic.Uint64
	cleanup runtime.Cleanup
}

// load returns the current bits (0 once closed). In sluice_debug builds it
// forces a GC first.
func (h *handle) load() uint64 {
	maybeGC()
	return h.bits.Load()
}

// get returns the bits, or ErrClosed (naming op) once the handle is closed.
func (h *handle) get(op string) (uint64, error) {
	b := h.load()
	if b == 0 {
		return 0, closedError(op)
	}
	return b, nil
}

// take marks the handle closed and returns its bits; only the first call gets
// non-zero bits, so only it destroys the C object. It also stops the cleanup,
// so the destroying call that follows needs no runtime.KeepAlive.
func (h *handle) take() uint64 {
	b := h.bits.Swap(0)
	if b != 0 {
		h.cleanup.Stop()
	}
	return b
}

// check converts a C error of a call that used the handles hs. An
// INVALID_HANDLE error caused by a concurrent Close of one of them is
// reported as ErrClosed.
func check(e *C.sluice_error_t, hs ...*handle) error {
	err := takeError(e)
	if err == nil {
		return nil
	}
	if se, ok := err.(*Error); ok && se.Code == CodeInvalidHandle {
		for _, h := range hs {
			if h != nil && h.bits.Load() == 0 {
				se.closed = true
			}
		}
	}
	return err
}

// Destructors run by cleanups. They take plain values, never the wrapper, so
// that the wrapper can become unreachable.

func destroyDevice(b uint64) {
	C.sluice_error_free(C.sluice_device_close(C.sluice_device_t{bits: C.uint64_t(b)}))
}
func destroyStream(b uint64) {
	C.sluice_error_free(C.sluice_stream_destroy(C.sluice_stream_t{bits: C.uint64_t(b)}))
}
func destroyEvent(b uint64) {
	C.sluice_error_free(C.sluice_event_destroy(C.sluice_event_t{bits: C.uint64_t(b)}))
}
func destroySync(b uint64) {
	C.sluice_error_free(C.sluice_sync_destroy(C.sluice_sync_t{bits: C.uint64_t(b)}))
}
func endOp(b uint64) { C.sluice_error_free(C.sluice_op_end(C.sluice_op_t{bits: C.uint64_t(b)})) }
func destroyModule(b uint64) {
	C.sluice_error_free(C.sluice_module_unload(C.sluice_module_t{bits: C.uint64_t(b)}))
}
func destroyFunction(b uint64) {
	C.sluice_error_free(C.sluice_function_destroy(C.sluice_function_t{bits: C.uint64_t(b)}))
}
func destroyGraph(b uint64) {
	C.sluice_error_free(C.sluice_graph_destroy(C.sluice_graph_t{bits: C.uint64_t(b)}))
}
func destroyGraphExec(b uint64) {
	C.sluice_error_free(C.sluice_graph_exec_destroy(C.sluice_graph_exec_t{bits: C.uint64_t(b)}))
}
func destroyGraphCache(b uint64) {
	C.sluice_error_free(C.sluice_graph_cache_destroy(C.sluice_graph_cache_t{bits: C.uint64_t(b)}))
}
