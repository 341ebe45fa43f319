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
)

// CallbackPanicError is the cause (Error.Cause) of an ErrCallbackFailed
// error whose Go host callback panicked.
type CallbackPanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine stack at the panic.
	Stack []byte
}

func (e *CallbackPanicError) Error() string {
	return fmt.Sprintf("Go host callback panicked: %v", e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *CallbackPanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// HostCallback enqueues fn on the stream as one tracked op that reads reads
// and writes writes (nil when empty). fn runs once, in stream order, on a
// driver thread. It must not call sluice (neither this package nor the C
// API): the library may hold locks, or be a CUDA callback thread that may not
// call CUDA. It may touch Go memory and the Bytes of pinned and host buffers
// of its sets.
//
// If fn returns an error or panics, the panic is recovered (the process does
// not crash) and the stream's next synchronisation point (Synchronize,
// Query, Device.WaitAll, and waits on its events) returns an *Error with
// ErrCallbackFailed whose Cause is fn's error or a *CallbackPanicError.
func (s *Stream) HostCallback(fn func() error, reads, writes []Syncable) error {
	const op = "Stream.HostCallback"
	h, err := s.raw(op)
	if err != nil {
		return err
	}
	if fn == nil {
		return argError(CodeNullArgument, op, "nil callback")
	}
	var rbuf, wbuf [4]C.sluice_sync_t
	r, err := syncArray(op, reads, rbuf[:0])
	if err != nil {
		return err
	}
	w, err := syncArray(op, writes, wbuf[:0])
	if err != nil {
		return err
	}
	ch := cgo.NewHandle(fn)
	e := C.sluice_go_host_callback(h, C.uintptr_t(ch), syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)))
	runtime.KeepAlive(s)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	if err := checkSets(e, op, s, reads, writes); err != nil {
		ch.Delete() // never enqueued, so never run
		return err
	}
	return nil
}

//export sluiceGoHostCallback
func sluiceGoHostCallback(h C.uintptr_t) (rc C.int32_t) {
	defer func() {
		if v := recover(); v != nil {
			rc = C.int32_t(recordCallbackFailure(&CallbackPanicError{Value: v, Stack: debug.Stack()}))
		}
	}()
	ch := cgo.Handle(h)
	fn := ch.Value().(func() error)
	ch.Delete() // host callbacks run once
	if err := fn(); err != nil {
		return C.int32_t(recordCallbackFailure(err))
	}
	return 0
}

// Failed callbacks return a token to C: a positive number that keys the Go
// failure here. The library reports it at synchronisation points as
// "host callback on stream #N returned TOKEN", and takeError attaches the
// failure to that error. A failure may be reported more than once (an event
// or sync-object wait reports it without clearing it, the stream's next
// synchronisation clears it), so records are not deleted when reported; the
// oldest are dropped beyond maxCallbackFailures.
const maxCallbackFailures = 256

var callbackFailures struct {
	sync.Mutex
	next  int32
	byTok map[int32]error
	order []int32
}

func recordCallbackFailure(err error) int32 {
	f := &callbackFailures
	f.Lock()
	defer f.Unlock()
	if f.byTok == nil {
		f.byTok = make(map[int32]error)
	}
	f.next++
	if f.next <= 0 {
		f.next = 1
	}
	tok := f.next
	f.byTok[tok] = err
	f.order = append(f.order, tok)
	for len(f.order) > maxCallbackFailures {
		delete(f.byTok, f.order[0])
		f.order = f.order[1:]
	}
	return tok
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
	cause, ok := f.byTok[int32(tok)]
	f.Unlock()
	if ok {
		err.Cause = cause
		err.Message += ": " + cause.Error()
	}
}
