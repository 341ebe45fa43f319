package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Syncable is anything with a sync object: a *SyncObject, or a buffer
// (*Buffer, *PinnedBuffer, *HostBuffer), whose own sync object is used. Read
// and write sets of ops, launches and host callbacks are []Syncable.
type Syncable interface {
	syncObject(op string) (*SyncObject, error)
}

// SyncObject is a sync object (sluice_sync_t): the dependency record of one
// buffer or of foreign memory (a libtorch tensor, a caller's cudaMalloc). It
// holds at most one writer event and one reader event per stream.
type SyncObject struct {
	h handle[C.sluice_sync_t]
	// owned: the object belongs to a buffer, whose Close closes it.
	owned bool
}

// SyncInfo is the dependency state of a sync object.
type SyncInfo struct {
	// ID is the process-unique id of the object.
	ID uint64
	// Readers is the number of reader entries (at most one per stream).
	Readers int
	// HasWriter reports whether a writer event is recorded.
	HasWriter bool
}

// NewSyncObject creates a standalone sync object, for memory sluice does not
// own. The *SyncObject owns the handle: Close destroys it, or a runtime
// cleanup does if the SyncObject becomes unreachable first.
func NewSyncObject() (*SyncObject, error) {
	var s C.sluice_sync_t
	if err := takeError(C.sluice_sync_create(&s)); err != nil {
		return nil, err
	}
	return newSyncObject(s, false), nil
}

func newSyncObject(s C.sluice_sync_t, owned bool) *SyncObject {
	o := &SyncObject{owned: owned}
	openHandle(o, &o.h, s)
	return o
}

func (o *SyncObject) syncObject(op string) (*SyncObject, error) { return o, nil }

// Close destroys the sync handle that the SyncObject owns; work already
// enqueued is unaffected. Close is idempotent. The sync object of a buffer
// (from its Sync method) belongs to the buffer: its Close does nothing, the
// buffer's Close closes it.
func (o *SyncObject) Close() error {
	if o.owned {
		return nil
	}
	return o.h.close()
}

// WaitRead blocks until the last writer's work has completed (not merely been
// enqueued). Call it before reading, from the host, memory a stream wrote.
func (o *SyncObject) WaitRead() error {
	return o.wait("SyncObject.WaitRead", false)
}

// WaitWrite blocks until the last writer's and every reader's work has
// completed. Call it before writing, from the host, memory streams use.
func (o *SyncObject) WaitWrite() error {
	return o.wait("SyncObject.WaitWrite", true)
}

// wait is WaitRead, or WaitWrite when write is set.
func (o *SyncObject) wait(op string, write bool) error {
	h, err := o.h.raw(op)
	if err != nil {
		return err
	}
	var e *C.sluice_error_t
	if write {
		e = C.sluice_sync_wait_write(h)
	} else {
		e = C.sluice_sync_wait_read(h)
	}
	runtime.KeepAlive(o)
	return check(e, &o.h)
}

// Info returns the object's dependency state.
func (o *SyncObject) Info() (SyncInfo, error) {
	h, err := o.h.raw("SyncObject.Info")
	if err != nil {
		return SyncInfo{}, err
	}
	var in C.sluice_sync_info_t
	e := C.sluice_sync_info(h, &in)
	runtime.KeepAlive(o)
	if err := check(e, &o.h); err != nil {
		return SyncInfo{}, err
	}
	return SyncInfo{ID: uint64(in.id), Readers: int(in.reader_count), HasWriter: in.has_writer != 0}, nil
}

// maxStackSyncs is the size of a read or write set whose handles an op
// passes from its own frame; a larger set borrows a pooled buffer.
const maxStackSyncs = 16

// syncScratch holds the handle arrays of one call's read and write sets:
// on the caller's stack up to maxStackSyncs each, in pooled buffers beyond,
// so that no set size allocates in steady state. Call release after the C
// call.
type syncScratch struct {
	r, w   [maxStackSyncs]C.sluice_sync_t
	rx, wx *[]C.sluice_sync_t
}

// syncBufs are the pooled handle buffers of sets over maxStackSyncs (Go
// memory without Go pointers, so C may read it during the call).
var syncBufs = sync.Pool{New: func() any { return new([]C.sluice_sync_t) }}

// sets returns the handles of an op's read and write sets.
func (sc *syncScratch) sets(op string, reads, writes []Syncable) (r, w []C.sluice_sync_t, err error) {
	if len(reads) <= maxStackSyncs && len(writes) <= maxStackSyncs {
		// The common case, with no pooled buffer: both sets fit the frame.
		r, w = sc.r[:len(reads)], sc.w[:len(writes)]
		if err = fillSyncs(op, reads, r); err != nil {
			return nil, nil, err
		}
		if err = fillSyncs(op, writes, w); err != nil {
			return nil, nil, err
		}
		return r, w, nil
	}
	if r, err = syncArray(op, reads, sc.r[:0], &sc.rx); err != nil {
		return nil, nil, err
	}
	if w, err = syncArray(op, writes, sc.w[:0], &sc.wx); err != nil {
		return nil, nil, err
	}
	return r, w, nil
}

// fillSyncs writes the handles of list into dst, of the same length.
func fillSyncs(op string, list []Syncable, dst []C.sluice_sync_t) error {
	dst = dst[:len(list)]
	for i, s := range list {
		if s == nil {
			return argError(CodeNullArgument, op, "sync set entry %d is nil", i)
		}
		o, err := s.syncObject(op)
		if err != nil {
			return err
		}
		b := o.h.load()
		if b == 0 {
			return closedError(op)
		}
		dst[i] = C.sluice_sync_t{bits: C.uint64_t(b)}
	}
	return nil
}

// release returns the pooled buffers sets borrowed.
func (sc *syncScratch) release() {
	for _, x := range [2]**[]C.sluice_sync_t{&sc.rx, &sc.wx} {
		if *x != nil {
			**x = (**x)[:0]
			syncBufs.Put(*x)
			*x = nil
		}
	}
}

// syncArray returns the handles of list: in stack (a zero-length slice of
// the caller's array) while they fit, else in a pooled buffer stored in
// *pooled. (The two paths use distinct variables so that escape analysis
// keeps the stack array on the stack.)
func syncArray(op string, list []Syncable, stack []C.sluice_sync_t, pooled **[]C.sluice_sync_t) ([]C.sluice_sync_t, error) {
	if len(list) <= cap(stack) {
		return appendSyncs(op, list, stack)
	}
	p := syncBufs.Get().(*[]C.sluice_sync_t)
	*pooled = p
	dst, err := appendSyncs(op, list, (*p)[:0])
	if err != nil {
		return nil, err
	}
	*p = dst // keep a grown buffer for the next borrower
	return dst, nil
}

// appendSyncs appends the handles of list to dst.
func appendSyncs(op string, list []Syncable, dst []C.sluice_sync_t) ([]C.sluice_sync_t, error) {
	for i, s := range list {
		if s == nil {
			return nil, argError(CodeNullArgument, op, "sync set entry %d is nil", i)
		}
		o, err := s.syncObject(op)
		if err != nil {
			return nil, err
		}
		h, err := o.h.raw(op)
		if err != nil {
			return nil, err
		}
		dst = append(dst, h)
	}
	return dst, nil
}

func syncPtr(a []C.sluice_sync_t) *C.sluice_sync_t {
	if len(a) == 0 {
		return nil
	}
	return &a[0]
}

// checkSets is check for calls that also took sync sets: an INVALID_HANDLE
// caused by a concurrent Close of one of the set's objects is ErrClosed.
func checkSets(e *C.sluice_error_t, op string, s *Stream, sets ...[]Syncable) error {
	if e == nil { // inlined: a call that succeeded pays one test
		return nil
	}
	return checkSetsFailed(e, op, s, sets)
}

func checkSetsFailed(e *C.sluice_error_t, op string, s *Stream, sets [][]Syncable) error {
	err := check(e, s.hs())
	if se, ok := err.(*Error); ok && se.Code == CodeInvalidHandle && !se.closed {
		for _, set := range sets {
			for _, x := range set {
				if o, oerr := x.syncObject(op); oerr != nil || o.h.isClosed() {
					se.closed = true
				}
			}
		}
	}
	return err
}

// Op is an open foreign op (sluice_op_t), between Stream.BeginOp (or
// BeginOpInto) and End.
//
// An Op comes from Stream.BeginOp (a new *Op per call), or is a
// caller-owned value that Stream.BeginOpInto begins again and again once
// ended: the allocation-free form for hot loops. The zero Op is valid and
// reads as ended.
type Op struct {
	h      reusable[C.sluice_op_t]
	stream *Stream
}

// BeginOp begins a foreign op on the stream that reads reads and writes
// writes (an object in both counts as a write). The stream is made to wait,
// on the device, for every conflicting earlier op on other streams; the host
// never blocks. Enqueue the foreign work on s.Raw(), then call End.
//
// Ops from many goroutines may run at once, but a conflicting op that another
// goroutine begins while this one is open is not ordered against it; order
// such ops yourself.
//
// The *Op owns the open op: End or Close ends it, or a runtime cleanup does
// if the Op becomes unreachable first. BeginOp allocates the Op (and its
// cleanup) on every call; BeginOpInto and RunOp do not.
func (s *Stream) BeginOp(reads, writes []Syncable) (*Op, error) {
	o, err := s.beginOp("Stream.BeginOp", reads, writes)
	if err != nil {
		return nil, err
	}
	out := &Op{stream: s}
	openHandle(out, &out.h.own, o)
	return out, nil
}

// BeginOpInto is BeginOp into op, a caller-owned Op (the zero Op, or one
// already ended): the allocation-free form of BeginOp. It fails with
// ErrInvalidArgument, beginning nothing, while op is still open.
//
// The read and write sets are only read during the call: reuse the same
// slices from call to call. Up to 16 objects per set the handles travel on
// the stack; larger sets use pooled buffers, so no size allocates in steady
// state.
//
// The first BeginOpInto into an Op allocates its handle cell and registers
// one runtime cleanup, which ends the op if op becomes unreachable while
// open; later ones allocate nothing. BeginOpInto writes op: it must not run
// concurrently with any other use of the same op.
func (s *Stream) BeginOpInto(op *Op, reads, writes []Syncable) error {
	return s.beginOpInto("Stream.BeginOpInto", op, reads, writes)
}

func (s *Stream) beginOpInto(name string, op *Op, reads, writes []Syncable) error {
	if op == nil {
		return argError(CodeNullArgument, name, "nil *Op")
	}
	if !op.h.isClosed() {
		return argError(CodeInvalidArgument, name, "the Op is still open (End it first)")
	}
	o, err := s.beginOp(name, reads, writes)
	if err != nil {
		return err
	}
	op.stream = s
	if old, ok := openReusable(op, &op.h, o); ok {
		// Only a concurrent BeginOpInto into the same op (a misuse) gets
		// here; end the op it began rather than leak it.
		dropError(destroy(old))
	}
	return nil
}

// beginOp is sluice_op_begin for BeginOp, BeginOpInto and RunOp; the
// handle arrays live in its frame (syncScratch), so no op allocates.
func (s *Stream) beginOp(op string, reads, writes []Syncable) (C.sluice_op_t, error) {
	var o C.sluice_op_t
	root := s.root()
	h, err := root.h.raw(op)
	if err != nil {
		return o, err
	}
	// No defer: sets and release cannot fail halfway, and a pooled buffer
	// that a panic left borrowed is only garbage.
	var sc syncScratch
	r, w, err := sc.sets(op, reads, writes)
	if err != nil {
		sc.release()
		return o, err
	}
	e := C.sluice_op_begin(h, syncPtr(r), C.size_t(len(r)), syncPtr(w), C.size_t(len(w)), &o)
	runtime.KeepAlive(s)
	runtime.KeepAlive(reads)
	runtime.KeepAlive(writes)
	if sc.rx != nil || sc.wx != nil {
		sc.release()
	}
	if e != nil {
		return o, checkSetsFailed(e, op, s, [][]Syncable{reads, writes})
	}
	if root.capture.Load() != nil {
		s.captureKeep(reads, writes)
	}
	return o, nil
}

// Stream returns the op's stream.
func (o *Op) Stream() *Stream { return o.stream }

// End ends the op: records one event on its stream and publishes it to every
// object of the op. The op is consumed, also when an error is returned; a
// second End returns ErrClosed.
func (o *Op) End() error {
	c, ok := o.h.take()
	if !ok {
		maybeGC()
		return closedError("Op.End")
	}
	return takeError(C.sluice_op_end(c))
}

// Close ends the op that the Op owns if it is still open (see End) and does
// nothing otherwise, so `defer op.Close()` is safe next to an explicit End.
func (o *Op) Close() error { return o.h.close() }

// RunOp runs fn inside a foreign op on the stream: BeginOp(reads, writes),
// fn(raw) with the stream's raw CUstream to enqueue foreign work on, then
// End, also when fn fails or panics. It is the allocation-free form of
// BeginOp/End for hot loops: no Op wrapper is made.
func (s *Stream) RunOp(reads, writes []Syncable, fn func(raw unsafe.Pointer) error) error {
	o, err := s.beginOp("Stream.RunOp", reads, writes)
	if err != nil {
		return err
	}
	if fn == nil {
		return takeError(C.sluice_op_end(o))
	}
	return runOpBody(o, s.native, fn)
}

// runOpBody runs fn inside the op o (begun), then ends o, also when fn
// panics. The error of fn wins over that of the end.
func runOpBody(o C.sluice_op_t, raw unsafe.Pointer, fn func(raw unsafe.Pointer) error) (err error) {
	defer func() {
		if endErr := takeError(C.sluice_op_end(o)); err == nil {
			err = endErr
		}
	}()
	return fn(raw)
}
