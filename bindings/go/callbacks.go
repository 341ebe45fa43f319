package sluice

// This file holds the //export trampoline of host callbacks, so its preamble
// may only declare C functions; the C side of the shim is in shims.c.

/*
#include "shims.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// CallbackPanicError is the cause (Error.Cause) of an ErrCallbackFailed
// error whose Go host callback, or GraphCache.Run body, panicked.
type CallbackPanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine stack at the panic.
	Stack []byte
}

// Error returns "Go callback panicked: " and the panic value.
func (e *CallbackPanicError) Error() string {
	return fmt.Sprintf("Go callback panicked: %v", e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *CallbackPanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// HostCallback enqueues fn on the stream as one tracked op that reads reads
// and writes writes (nil when empty). fn runs in stream order on a driver
// thread. It must not call sluice (neither this package nor the C API): the
// library may hold locks, or be a CUDA callback thread that may not call
// CUDA. It may touch Go memory and the Bytes of pinned and host buffers of its
// sets.
//
// Enqueued normally, fn runs once. Enqueued while the stream captures a graph
// (host backend only; on cuda the call fails with ErrCaptureUnsupported), fn
// is recorded into the graph and runs once per launch of every executable
// graph made from it, possibly concurrently when those are launched on
// several streams at once.
//
// fn is held through a runtime/cgo.Handle that the library releases (through
// its free_user_data function) exactly once, when fn can no longer run: after
// it ran, when the call fails, or, for a captured callback, when the last
// Graph and GraphExec holding it are closed. Only then does fn, and what it
// captures, become garbage.
//
// If fn returns an error or panics, the panic is recovered (the process does
// not crash) and the stream's next synchronisation point (Synchronize,
// Query, Device.WaitAll, and waits on its events) returns an *Error with
// ErrCallbackFailed whose Cause is fn's error or a *CallbackPanicError. For a
// captured callback that stream is the stream the graph was captured on.
func (s *Stream) HostCallback(fn func() error, reads, writes []Syncable) error {
	const op = "Stream.HostCallback"
	h, err := s.raw(op)
	if err != nil {
		return err
	}
	if fn == nil {
		return argError(CodeNullArgument, op, "nil callback")
	}
	var sc syncScratch
	defer sc.release()
	r, w, err := sc.sets(op, reads, writes)
	if err != nil {
		return err
	}
	// From here on the library owns the handle: it calls sluiceGoFreeHandle
	// exactly once, also when this call fails.
	ch := newCallbackHandle(&hostCallback{fn: fn})
	e := C.sluice_go_host_callback(h, C.uintptr_t(ch), syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)))
	runtime.KeepAlive(s)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	if err := checkSets(e, op, s, reads, writes); err != nil {
		return err
	}
	s.captureKeep(reads, writes)
	return nil
}

// hostCallback is what the cgo.Handle of a host callback holds.
type hostCallback struct {
	fn func() error
	// pending is the token of this callback's latest failure that no error
	// has reported yet (0 if none); guarded by callbackFailures.
	pending int32
}

// liveCallbackHandles counts the cgo.Handles of host callbacks that the
// library has not released yet (for tests and leak checks).
var liveCallbackHandles atomic.Int64

func newCallbackHandle(cb *hostCallback) cgo.Handle {
	liveCallbackHandles.Add(1)
	return cgo.NewHandle(cb)
}

//export sluiceGoHostCallback
func sluiceGoHostCallback(h C.uintptr_t) (rc C.int32_t) {
	// The handle stays valid for as long as the callback may run; the library
	// releases it through sluiceGoFreeHandle. A captured callback runs once
	// per graph launch.
	cb := cgo.Handle(h).Value().(*hostCallback)
	defer func() {
		if v := recover(); v != nil {
			rc = C.int32_t(recordCallbackFailure(cb, &CallbackPanicError{Value: v, Stack: debug.Stack()}))
		}
	}()
	if err := cb.fn(); err != nil {
		return C.int32_t(recordCallbackFailure(cb, err))
	}
	return 0
}

// sluiceGoFreeHandle is the free_user_data of host callbacks: the library
// calls it exactly once, when the callback can no longer run (on a driver
// thread, or on the thread of the sluice call that dropped the last graph
// holding it, or of a HostCallback call that failed).
//
//export sluiceGoFreeHandle
func sluiceGoFreeHandle(h C.uintptr_t) {
	ch := cgo.Handle(h)
	if cb, ok := ch.Value().(*hostCallback); ok {
		forgetCallback(cb)
		liveCallbackHandles.Add(-1)
	}
	ch.Delete()
}

// sluiceGoRelease is the release_fn of WrapDevice buffers: the library calls
// it exactly once, after the buffer's last reference is gone and its last use
// completed (on the "sluice-release" thread, or on the thread of the call
// that dropped the last reference). A panic is recovered and dropped: there is
// no call left to report it to.
//
//export sluiceGoRelease
func sluiceGoRelease(h C.uintptr_t) {
	ch := cgo.Handle(h)
	fn := ch.Value().(func())
	ch.Delete()
	liveReleaseHandles.Add(-1)
	defer func() { _ = recover() }()
	fn()
}

// graphBody is what the cgo.Handle of a GraphCache.Run body holds, for the
// duration of the Run call.
type graphBody struct {
	fn     func(*Stream) error
	stream *Stream
	// err is the body's error or a *CallbackPanicError.
	err error
	// captured: the body ran inside the capture made by the cache; keep
	// holds the objects its ops used.
	captured bool
	keep     []any
}

// sluiceGoGraphBody runs a GraphCache.Run body. The library calls it on the
// thread of the Run call, from inside sluice_graph_cache_run, so the body may
// call sluice (re-entrancy through cgo is fine).
//
//export sluiceGoGraphBody
func sluiceGoGraphBody(h C.uintptr_t, stream C.sluice_stream_t) (rc C.int32_t) {
	b := cgo.Handle(h).Value().(*graphBody)
	view := b.stream.view()
	root := view.root()
	// When this run is the one the cache captures, track what the body's ops
	// use, as BeginCapture does, so the cache keeps it reachable.
	var cs *captureState
	if root.capture.Load() == nil {
		if capturing, err := view.IsCapturing(); err == nil && capturing {
			cs = newCaptureState(root)
			if !root.capture.CompareAndSwap(nil, cs) {
				cs = nil
			}
		}
	}
	defer func() {
		if cs != nil {
			b.captured, b.keep = true, cs.end()
		}
		if v := recover(); v != nil {
			b.err = &CallbackPanicError{Value: v, Stack: debug.Stack()}
			rc = -1
		}
	}()
	if err := b.fn(view); err != nil {
		b.err = err
		// Not a positive token: takeError must not look this up as a host
		// callback failure; Run attaches b.err itself.
		return -1
	}
	return 0
}

// Failed callbacks return a token to C: a positive number that keys the Go
// failure here. The library reports it at synchronisation points as
// "host callback on stream #N returned TOKEN", and takeError attaches the
// failure to that error.
//
// A stream keeps only the first failure until its next synchronisation
// clears it, and a failure may be reported more than once (an event or
// sync-object wait reports it without clearing it), so records are not
// deleted when reported; the oldest are dropped beyond maxCallbackFailures.
// A captured callback runs once per graph launch and may fail every time:
// while one of its failures is unreported, later failures reuse that token
// (only the first can be reported anyway), so a graph launched many times
// before a synchronisation does not push the reported record out.
const maxCallbackFailures = 256

type failureRecord struct {
	err error
	// owner is the callback whose pending token this is, nil once reported
	// or once the callback is released.
	owner *hostCallback
}

var callbackFailures struct {
	sync.Mutex
	next  int32
	byTok map[int32]*failureRecord
	order []int32
}

func recordCallbackFailure(cb *hostCallback, err error) int32 {
	f := &callbackFailures
	f.Lock()
	defer f.Unlock()
	if f.byTok == nil {
		f.byTok = make(map[int32]*failureRecord)
	}
	if cb != nil && cb.pending != 0 {
		if rec, ok := f.byTok[cb.pending]; ok && rec.owner == cb {
			return cb.pending
		}
	}
	f.next++
	if f.next <= 0 {
		f.next = 1
	}
	tok := f.next
	f.byTok[tok] = &failureRecord{err: err, owner: cb}
	if cb != nil {
		cb.pending = tok
	}
	f.order = append(f.order, tok)
	for len(f.order) > maxCallbackFailures {
		old := f.order[0]
		if rec := f.byTok[old]; rec != nil && rec.owner != nil && rec.owner.pending == old {
			rec.owner.pending = 0
		}
		delete(f.byTok, old)
		f.order = f.order[1:]
	}
	return tok
}

// forgetCallback drops the records' references to a released callback.
func forgetCallback(cb *hostCallback) {
	f := &callbackFailures
	f.Lock()
	defer f.Unlock()
	if rec, ok := f.byTok[cb.pending]; ok && rec.owner == cb {
		rec.owner = nil
	}
	cb.pending = 0
}

// attachCallbackFailure finds the Go failure named by err's message and
// makes it err's Cause.
func attachCallbackFailure(err *Error) {
	const marker = " returned "
	i := strings.LastIndex(err.Message, marker)
	if i < 0 {
		return
	}
	digits := err.Message[i+len(marker):]
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	tok, perr := strconv.ParseInt(digits[:end], 10, 32)
	if perr != nil {
		return
	}
	f := &callbackFailures
	f.Lock()
	rec, ok := f.byTok[int32(tok)]
	if ok && rec.owner != nil {
		// Reported: the callback's next failure gets a token of its own.
		if rec.owner.pending == int32(tok) {
			rec.owner.pending = 0
		}
		rec.owner = nil
	}
	f.Unlock()
	if ok {
		err.Cause = rec.err
		err.Message += ": " + rec.err.Error()
	}
}
