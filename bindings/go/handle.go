package sluice

/*
#include <stdlib.h>
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// cHandle is a handle type of sluice.h: a struct of one uint64_t
// (sluice_device_t, sluice_stream_t, ...).
type cHandle interface {
	~struct{ bits C.uint64_t }
}

// destroy calls the C function that destroys (closes, frees, ends) a handle
// of type T. It is the one table of destroy functions: a new handle type adds
// a case here, and needs no destroy code of its own.
func destroy[T cHandle](c T) *C.sluice_error_t {
	switch c := any(c).(type) {
	case C.sluice_device_t:
		return C.sluice_device_close(c)
	case C.sluice_stream_t:
		return C.sluice_stream_destroy(c)
	case C.sluice_event_t:
		return C.sluice_event_destroy(c)
	case C.sluice_buffer_t:
		return C.sluice_buffer_free(c)
	case C.sluice_sync_t:
		return C.sluice_sync_destroy(c)
	case C.sluice_op_t:
		return C.sluice_op_end(c)
	case C.sluice_module_t:
		return C.sluice_module_unload(c)
	case C.sluice_function_t:
		return C.sluice_function_destroy(c)
	case C.sluice_graph_t:
		return C.sluice_graph_destroy(c)
	case C.sluice_graph_exec_t:
		return C.sluice_graph_exec_destroy(c)
	case C.sluice_graph_cache_t:
		return C.sluice_graph_cache_destroy(c)
	case C.sluice_prefetcher_t:
		return C.sluice_prefetcher_destroy(c)
	case C.sluice_batch_t:
		return C.sluice_batch_release(c)
	case C.sluice_rng_t:
		return C.sluice_rng_destroy(c)
	case C.sluice_rng_checkpoint_t:
		return C.sluice_rng_checkpoint_destroy(c)
	}
	panic("sluice: destroy has no case for this handle type")
}

// release destroys c, then frees mem (C memory that c owns; nil for none)
// if that succeeded.
func release[T cHandle](c T, mem unsafe.Pointer) *C.sluice_error_t {
	e := destroy(c)
	if e == nil && mem != nil {
		C.free(mem)
	}
	return e
}

// handle is the state every wrapper shares: its C handle (bits 0 once
// closed) and the cleanup that destroys the handle if the wrapper is
// collected without Close.
//
// The C API makes a stale handle an error, never undefined behaviour, so the
// only job here is bookkeeping: close swaps the bits to 0 exactly once, and a
// call racing with Close either sees the object or reports ErrClosed.
type handle[T cHandle] struct {
	bits    atomic.Uint64
	cleanup runtime.Cleanup
}

// releaseOnCleanup is the cleanup of every wrapper. It is a plain function
// because runtime.AddCleanup allocates a closure for a generic one; the C
// type of the handle travels in the argument as a zero-size handleType[T].
func releaseOnCleanup(o ownedHandle) { dropError(o.typ.release(o.bits, o.mem)) }

// ownedHandle is what a cleanup releases: a handle and its C memory, as plain
// values, never the wrapper, so that the wrapper can become unreachable.
type ownedHandle struct {
	typ  releaser
	bits uint64
	mem  unsafe.Pointer
}

// releaser releases a handle of the C type it stands for.
type releaser interface {
	release(bits uint64, mem unsafe.Pointer) *C.sluice_error_t
}

// handleType[T] is the releaser of C handle type T. It has no size, so it
// goes into an interface without allocating.
type handleType[T cHandle] struct{}

func (handleType[T]) release(bits uint64, mem unsafe.Pointer) *C.sluice_error_t {
	return release(T{bits: C.uint64_t(bits)}, mem)
}

// openHandle makes c the handle of owner, the wrapper that holds h: owner
// owns c, and a cleanup destroys c if owner becomes unreachable while open.
func openHandle[O any, T cHandle](owner *O, h *handle[T], c T) {
	openHandleWithMemory(owner, h, c, nil)
}

// openHandleWithMemory is openHandle for a handle that also owns the C
// memory mem, freed after the handle is destroyed.
func openHandleWithMemory[O any, T cHandle](owner *O, h *handle[T], c T, mem unsafe.Pointer) {
	b := uint64(struct{ bits C.uint64_t }(c).bits)
	h.bits.Store(b)
	h.cleanup = runtime.AddCleanup(owner, releaseOnCleanup, ownedHandle{handleType[T]{}, b, mem})
}

// load returns the current bits (0 once closed). In sluice_debug builds it
// forces a GC first.
func (h *handle[T]) load() uint64 {
	maybeGC()
	return h.bits.Load()
}

// raw returns the C handle, or ErrClosed (naming op) once it is closed.
func (h *handle[T]) raw(op string) (T, error) {
	b := h.load()
	if b == 0 {
		return T{}, closedError(op)
	}
	return T{bits: C.uint64_t(b)}, nil
}

// isClosed reports whether the handle is closed (with no GC, unlike load).
func (h *handle[T]) isClosed() bool { return h.bits.Load() == 0 }

// take marks the handle closed and returns it; only the first call gets ok,
// so only it destroys the C object. It also stops the cleanup, so the
// destroying call that follows needs no runtime.KeepAlive.
func (h *handle[T]) take() (c T, ok bool) {
	b := h.bits.Swap(0)
	if b == 0 {
		return c, false
	}
	h.cleanup.Stop()
	return T{bits: C.uint64_t(b)}, true
}

// close destroys the handle the first time; later calls return nil.
func (h *handle[T]) close() error {
	c, ok := h.take()
	if !ok {
		return nil
	}
	return takeError(destroy(c))
}

// graphHandle is the handle of a Graph or GraphExec, which also keeps the Go
// wrappers of the buffers the graph uses reachable while it is open: the C
// graph does not own them, and the cleanup of an unreachable buffer wrapper
// would free memory the graph still uses.
type graphHandle[T cHandle] struct {
	handle[T]
	mu   sync.Mutex
	kept []any
}

// openGraphHandle is openHandle for a graph handle that keeps kept reachable.
func openGraphHandle[O any, T cHandle](owner *O, g *graphHandle[T], c T, kept []any) {
	openHandle(owner, &g.handle, c)
	g.kept = kept
}

// keptWrappers returns the wrappers g keeps reachable (nil once closed).
func (g *graphHandle[T]) keptWrappers() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kept
}

// keep replaces the wrappers g keeps reachable, unless g is closed.
func (g *graphHandle[T]) keep(kept []any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isClosed() {
		g.kept = kept
	}
}

// close destroys the handle the first time and drops the kept wrappers.
func (g *graphHandle[T]) close() error {
	err := g.handle.close()
	g.mu.Lock()
	g.kept = nil
	g.mu.Unlock()
	return err
}

// anyHandle is a *handle[T] of any T (or a type that embeds one), for check.
type anyHandle interface{ isClosed() bool }

// check converts a C error of a call that used the handles hs. An
// INVALID_HANDLE error caused by a concurrent Close of one of them is
// reported as ErrClosed.
func check(e *C.sluice_error_t, hs ...anyHandle) error {
	if e == nil { // inlined: a call that succeeded pays one test
		return nil
	}
	return checkFailed(e, hs)
}

func checkFailed(e *C.sluice_error_t, hs []anyHandle) error {
	err := takeError(e)
	if se, ok := err.(*Error); ok && se.Code == CodeInvalidHandle {
		for _, h := range hs {
			if h.isClosed() {
				se.closed = true
			}
		}
	}
	return err
}

// reusable is the handle state of a wrapper that can be opened again after
// it is closed: an Event that Stream.RecordInto records into, an Op that
// Stream.BeginOpInto begins.
//
// A wrapper made by a single-use constructor (Stream.Record, Stream.BeginOp)
// uses own, as every other wrapper does: its cleanup, stopped by the close,
// carries the handle bits. A wrapper opened with openReusable instead keeps
// its state in cell, allocated once, on the first such open, with a cleanup
// that receives the cell (never the wrapper) and destroys whatever handle
// the cell holds when the wrapper becomes unreachable. Later opens only
// store new bits in the cell: no allocation, no new cleanup. Closing leaves
// that cleanup in place (it then finds bits 0 and does nothing).
//
// The zero value reads as closed.
type reusable[T cHandle] struct {
	own  handle[T]
	cell *handle[T]
}

// state returns the handle state in use: the cell once there is one.
func (r *reusable[T]) state() *handle[T] {
	if r.cell != nil {
		return r.cell
	}
	return &r.own
}

// releaseCell is the cleanup of a reusable wrapper's cell.
func releaseCell[T cHandle](h *handle[T]) {
	if c, ok := h.take(); ok {
		dropError(destroy(c))
	}
}

// openReusable stores c in r, the reusable handle of owner, and returns the
// handle r held open before, if any (the caller destroys it).
func openReusable[O any, T cHandle](owner *O, r *reusable[T], c T) (old T, ok bool) {
	b := uint64(struct{ bits C.uint64_t }(c).bits)
	if r.cell == nil {
		old, ok = r.own.take()
		h := new(handle[T])
		h.bits.Store(b)
		r.cell = h
		runtime.AddCleanup(owner, releaseCell[T], h)
		return old, ok
	}
	ob := r.cell.bits.Swap(b)
	return T{bits: C.uint64_t(ob)}, ob != 0
}

// raw returns the C handle, or ErrClosed (naming op) once it is closed or if
// it was never opened.
func (r *reusable[T]) raw(op string) (T, error) { return r.state().raw(op) }

// isClosed reports whether the handle is closed (or was never opened).
func (r *reusable[T]) isClosed() bool { return r.state().isClosed() }

// take marks the handle closed and returns it; only the first call after an
// open gets ok.
func (r *reusable[T]) take() (c T, ok bool) { return r.state().take() }

// close destroys the handle the first time after an open; later calls
// return nil.
func (r *reusable[T]) close() error { return r.state().close() }

// liveHandle is a wrapper's handle state: a handle or a reusable one.
type liveHandle[T cHandle] interface {
	anyHandle
	raw(op string) (T, error)
}

// callOn is one C call on a wrapper's handle h (a field of the wrapper): the
// live handle, or raw's ErrClosed, the call, then its error (check). Keeping h
// alive through the call keeps the wrapper alive, so its cleanup cannot destroy
// the handle while C uses it.
func callOn[T cHandle, H liveHandle[T]](h H, op string, call func(T) *C.sluice_error_t) error {
	c, err := h.raw(op)
	if err != nil {
		return err
	}
	e := call(c)
	runtime.KeepAlive(h)
	return check(e, h)
}
