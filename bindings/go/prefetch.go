package sluice

// This file holds the //export trampoline of prefetcher fill callbacks, so its
// preamble may only declare C functions; the C side of the shim is in shims.c.

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"errors"
	"iter"
	"math"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MaxSegments is the most segments a prefetched batch may have
// (SLUICE_PREFETCH_MAX_SEGMENTS).
const MaxSegments = C.SLUICE_PREFETCH_MAX_SEGMENTS

// WaitForever, as the timeout of a blocking prefetcher call, waits as long as
// it takes (SLUICE_WAIT_FOREVER). Every negative timeout means the same; 0
// does not wait, and other timeouts are rounded up to whole milliseconds.
const WaitForever time.Duration = -1

// ErrEndOfInput is what a pull-mode Fill function returns (or wraps) when the
// input has ended: the slot it was given carries no batch, the prefetcher's
// input is closed (as by CloseInput), and consumers receive the batches in
// flight, then ErrEndOfData.
var ErrEndOfInput = errors.New("sluice: end of prefetcher input")

// Prefetcher is a prefetcher (sluice_prefetcher_t): a pipeline of Depth slots
// of pinned host memory and device memory, allocated at creation, that copies
// the next batches host-to-device on its own copy streams (one per producer
// thread, up to 4) while consumers compute on the current one.
//
// Batches come from Push or Acquire (push mode), or from the Fill function of
// its PrefetcherConfig, run on the prefetcher's own threads (pull mode). Each
// batch gets a sequence number, 0, 1, 2, ... in the order producers take
// slots, and consumers receive batches in that order: Next (a leased *Batch,
// used in place on the device), NextInto (copied into the caller's buffers),
// or the All iterator.
//
// A Prefetcher may be used from many goroutines at once. It keeps its Device
// alive. The *Prefetcher owns the handle: Close destroys it, or a runtime
// cleanup does if the Prefetcher becomes unreachable first (a Fill function
// that refers to the Prefetcher keeps it reachable: call Close).
type Prefetcher struct {
	h   handle[C.sluice_prefetcher_t]
	dev *Device
	// fill is the cgo.Handle of the Fill function in pull mode, 0 in push
	// mode; deleted once the prefetcher is destroyed.
	fill cgo.Handle

	// syncs are the wrappers of the slots' sync objects, which the library
	// owns, by handle bits; nil once closed.
	syncMu sync.Mutex
	syncs  map[uint64]*SyncObject
}

// PrefetcherConfig is how to create a Prefetcher.
type PrefetcherConfig struct {
	// Depth is the number of slots (batches in flight), 1 to 64; 0 means 2.
	Depth int
	// Capacities holds the capacity in bytes of each segment of a batch (each
	// > 0); a batch has len(Capacities) segments, 1 to MaxSegments.
	Capacities []int
	// ProducerThreads is the number of threads that call Fill in pull mode (0
	// means 1); ignored in push mode.
	ProducerThreads int
	// Fill, when not nil, makes the prefetcher pull its batches: it is called
	// on the prefetcher's own threads (several at once with ProducerThreads >
	// 1), once per slot, to write the batch f.Seq into f.Segment(i) and set
	// its lengths with f.SetLen. It returns nil for a ready batch,
	// ErrEndOfInput (or an error wrapping it) when the input has ended, or
	// another error for a failed batch: the consumer receives that error (an
	// ErrCallbackFailed *Error whose Cause is Fill's error, inside a
	// *BatchError) in the batch's place, and the batches after it as usual. A
	// panic in Fill is recovered and fails the batch the same way, with a
	// *CallbackPanicError as the cause.
	//
	// Fill may block, but must not Close its own Prefetcher, and should
	// return promptly once the Prefetcher is closed: Close waits for the
	// running Fill calls. Nil means push mode.
	Fill func(f *Fill) error
}

// PrefetcherStats are the counters of a prefetcher.
type PrefetcherStats struct {
	// Batches counts batches handed to consumers.
	Batches uint64
	// Bytes counts bytes copied host-to-device.
	Bytes uint64
	// ProducerWait is the total time producers waited for a free slot.
	ProducerWait time.Duration
	// ConsumerWait is the total time consumers waited in Next and NextInto.
	ConsumerWait time.Duration
	// PinnedBytes is the pinned staging memory held (constant from creation
	// to Close).
	PinnedBytes uint64
	// CopyGBps is the host-to-device rate, in GB/s, over the copies timed so
	// far: batch 0, then one batch in 8 once 8 MiB were copied untimed (0
	// before the first).
	CopyGBps float64
}

// timeoutMs converts a timeout into the C API's milliseconds: negative is
// SLUICE_WAIT_FOREVER, 0 polls, and others are rounded up to whole
// milliseconds (a wait of at least the timeout).
func timeoutMs(d time.Duration) C.uint32_t {
	if d < 0 {
		return C.SLUICE_WAIT_FOREVER
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++ // rounded up; d + 1ms - 1 would overflow near the largest Duration
	}
	if ms >= C.SLUICE_WAIT_FOREVER {
		return C.SLUICE_WAIT_FOREVER - 1
	}
	return C.uint32_t(ms)
}

// NewPrefetcher creates a prefetcher on the device: its copy streams and every
// slot's pinned and device memory are allocated now and never grow. With
// cfg.Fill set its producer threads start at once (pull mode); otherwise
// batches come from Push or Acquire (push mode).
func NewPrefetcher(dev *Device, cfg PrefetcherConfig) (*Prefetcher, error) {
	const op = "NewPrefetcher"
	if dev == nil {
		return nil, argError(CodeNullArgument, op, "nil device")
	}
	h, err := dev.h.raw(op)
	if err != nil {
		return nil, err
	}
	if cfg.Depth < 0 || uint64(cfg.Depth) > math.MaxUint32 {
		return nil, argError(CodeInvalidArgument, op, "depth %d out of range", cfg.Depth)
	}
	if cfg.ProducerThreads < 0 || uint64(cfg.ProducerThreads) > math.MaxUint32 {
		return nil, argError(CodeInvalidArgument, op, "producer threads %d out of range", cfg.ProducerThreads)
	}
	if len(cfg.Capacities) > MaxSegments {
		return nil, argError(CodeInvalidArgument, op, "%d segments, over %d", len(cfg.Capacities), MaxSegments)
	}
	var c C.sluice_prefetcher_config_t
	c.depth = C.uint32_t(cfg.Depth)
	c.segments = C.uint32_t(len(cfg.Capacities))
	c.producer_threads = C.uint32_t(cfg.ProducerThreads)
	for i, n := range cfg.Capacities {
		if n < 0 {
			return nil, argError(CodeInvalidArgument, op, "segment %d: negative capacity %d", i, n)
		}
		c.capacity[i] = C.size_t(n)
	}
	var fill cgo.Handle
	if cfg.Fill != nil {
		fill = cgo.NewHandle(&prefetchFill{fn: cfg.Fill})
	}
	var pc C.sluice_prefetcher_t
	e := C.sluice_go_prefetcher_create(h, &c, C.uintptr_t(fill), &pc)
	runtime.KeepAlive(dev)
	if err := check(e, &dev.h); err != nil {
		if fill != 0 {
			fill.Delete() // the library started no producer, or joined them
		}
		return nil, err
	}
	p := &Prefetcher{dev: dev, fill: fill, syncs: make(map[uint64]*SyncObject)}
	b := uint64(pc.bits)
	p.h.bits.Store(b)
	p.h.cleanup = runtime.AddCleanup(p, releasePrefetcher, ownedPrefetcher{b, fill})
	return p, nil
}

// ownedPrefetcher is what the cleanup of a Prefetcher releases: its handle and
// the cgo.Handle of its Fill function, as plain values.
type ownedPrefetcher struct {
	bits uint64
	fill cgo.Handle
}

// releasePrefetcher is the cleanup of a Prefetcher that was not closed.
func releasePrefetcher(o ownedPrefetcher) {
	dropError(destroy(C.sluice_prefetcher_t{bits: C.uint64_t(o.bits)}))
	if o.fill != 0 {
		o.fill.Delete()
	}
}

// Close destroys the prefetcher at any moment: goroutines blocked in Push,
// Acquire, Next or NextInto return an error matching ErrClosed, the producer
// threads are joined (Close waits for running Fill calls), leased batches end
// (their Release returns ErrClosed) and so do the sync objects of Batch.Sync,
// and the memory is freed once the device work that uses it has completed.
// Close is idempotent.
func (p *Prefetcher) Close() error {
	c, ok := p.h.take()
	if !ok {
		return nil
	}
	err := takeError(destroy(c))
	p.syncMu.Lock()
	for _, o := range p.syncs {
		o.h.bits.Store(0)
	}
	p.syncs = nil
	p.syncMu.Unlock()
	if p.fill != 0 {
		p.fill.Delete() // the producer threads are joined
	}
	return err
}

// Device returns the device the prefetcher was created on.
func (p *Prefetcher) Device() *Device { return p.dev }

// Push copies one batch, segments[i] into segment i (one slice per segment;
// empty slices are allowed), into a free slot's pinned memory, and enqueues
// its host-to-device copy. It blocks while every slot is busy, up to timeout
// (WaitForever or any negative: no limit; 0: do not wait), then fails with
// ErrTimeout. A segment longer than its capacity gives ErrOutOfRange and
// pushes nothing; after CloseInput, Push fails with ErrInvalidState. It
// returns the batch's sequence number. On x86-64 the copy uses non-temporal
// stores, which win when the slot is out of the CPU's caches (several
// producers); a lone producer whose slots stay cached copies faster itself,
// into Acquire's slot.
//
// The Go memory of segments is used during the call only (it is copied
// before Push returns), so it may be reused at once. Push may be called from
// many goroutines at once; each goroutine's batches keep their order.
func (p *Prefetcher) Push(segments [][]byte, timeout time.Duration) (seq uint64, err error) {
	const op = "Prefetcher.Push"
	h, err := p.h.raw(op)
	if err != nil {
		return 0, err
	}
	if len(segments) > MaxSegments {
		return 0, argError(CodeInvalidArgument, op, "%d segments, over %d", len(segments), MaxSegments)
	}
	// The C array lives in Go memory and holds Go pointers, which the cgo
	// rules allow only when they are pinned; the library copies the bytes
	// before returning and keeps no pointer.
	var segs [MaxSegments]C.sluice_prefetch_segment_t
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, s := range segments {
		if len(s) == 0 {
			continue
		}
		ptr := unsafe.Pointer(unsafe.SliceData(s))
		pin.Pin(ptr)
		segs[i].ptr = ptr
		segs[i].len = C.size_t(len(s))
	}
	var out C.uint64_t
	e := C.sluice_prefetcher_push(h, &segs[0], C.uint32_t(len(segments)), timeoutMs(timeout), &out)
	runtime.KeepAlive(p)
	runtime.KeepAlive(segments)
	if err := check(e, &p.h); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// Slot is a slot taken with Acquire, to be filled in place (a zero-copy
// push): write each segment into Segment(i), set its length with SetLen,
// then Submit, or Cancel to give the slot back unused. One of the two must
// be called: consumers wait at an open slot's sequence number (a runtime
// cleanup cancels a Slot that becomes unreachable while open, as a safety
// net). A Slot is for one goroutine at a time.
type Slot struct {
	// Seq is the batch's sequence number.
	Seq uint64

	pf *Prefetcher
	// h is the prefetcher's handle at Acquire: Submit and Cancel use it even
	// after Close began, since Close waits until they reach the library.
	h       C.sluice_prefetcher_t
	c       C.sluice_prefetch_fill_t
	done    atomic.Bool
	cleanup runtime.Cleanup
}

// openSlot is what the cleanup of an abandoned Slot cancels.
type openSlot struct {
	pf         uint64
	seq, token uint64
}

// cancelAbandonedSlot is the cleanup of a Slot that was neither submitted nor
// cancelled.
func cancelAbandonedSlot(o openSlot) {
	var f C.sluice_prefetch_fill_t
	f.seq, f.token = C.uint64_t(o.seq), C.uint64_t(o.token)
	dropError(C.sluice_prefetcher_cancel(C.sluice_prefetcher_t{bits: C.uint64_t(o.pf)}, &f))
}

// Acquire takes a free slot to fill in place (zero-copy push); see Slot. It
// blocks like Push: up to timeout, then ErrTimeout.
func (p *Prefetcher) Acquire(timeout time.Duration) (*Slot, error) {
	const op = "Prefetcher.Acquire"
	h, err := p.h.raw(op)
	if err != nil {
		return nil, err
	}
	s := &Slot{pf: p, h: h}
	e := C.sluice_prefetcher_acquire(h, timeoutMs(timeout), &s.c)
	runtime.KeepAlive(p)
	if err := check(e, &p.h); err != nil {
		return nil, err
	}
	s.Seq = uint64(s.c.seq)
	s.cleanup = runtime.AddCleanup(s, cancelAbandonedSlot, openSlot{uint64(h.bits), uint64(s.c.seq), uint64(s.c.token)})
	return s, nil
}

// Segments returns the number of segments of the batch.
func (s *Slot) Segments() int { return int(s.c.segments) }

// Segment returns segment i's pinned memory (C memory) as a []byte of its
// capacity, valid until Submit or Cancel; nil once either was called. It
// panics if i is out of range.
func (s *Slot) Segment(i int) []byte {
	if s.done.Load() {
		return nil
	}
	return fillSegment(&s.c, i)
}

// SetLen sets the number of bytes written into segment i (0 is allowed; the
// initial length of every segment is 0). It panics if i or n is out of range.
func (s *Slot) SetLen(i, n int) { fillSetLen(&s.c, i, n) }

// Submit enqueues the host-to-device copy of the slot's segments, SetLen
// bytes of each; the consumers receive the batch in its turn. A Slot is
// submitted or cancelled once: a second call fails with ErrInvalidArgument.
func (s *Slot) Submit() error { return s.finish(true) }

// Cancel gives the slot back unused: its sequence number is skipped. A Slot is
// submitted or cancelled once: a second call fails with ErrInvalidArgument.
func (s *Slot) Cancel() error { return s.finish(false) }

func (s *Slot) finish(submit bool) error {
	s.done.Store(true)
	s.cleanup.Stop()
	var e *C.sluice_error_t
	if submit {
		e = C.sluice_prefetcher_submit(s.h, &s.c)
	} else {
		e = C.sluice_prefetcher_cancel(s.h, &s.c)
	}
	runtime.KeepAlive(s)
	return check(e, &s.pf.h)
}

// Fill is the slot a pull-mode Fill function fills: write each segment into
// Segment(i) and set its length with SetLen. It is valid only during the
// call of the Fill function.
type Fill struct {
	// Seq is the batch's sequence number.
	Seq uint64

	c *C.sluice_prefetch_fill_t
}

// Segments returns the number of segments of the batch.
func (f *Fill) Segments() int {
	if f.c == nil {
		return 0
	}
	return int(f.c.segments)
}

// Segment returns segment i's pinned memory (C memory) as a []byte of its
// capacity, valid only during the call of the Fill function (nil after it).
// It panics if i is out of range.
func (f *Fill) Segment(i int) []byte {
	if f.c == nil {
		return nil
	}
	return fillSegment(f.c, i)
}

// SetLen sets the number of bytes written into segment i (0 is allowed; the
// initial length of every segment is 0). It panics if i or n is out of range
// (a panic in Fill fails the batch), and does nothing after the call of the
// Fill function.
func (f *Fill) SetLen(i, n int) {
	if f.c != nil {
		fillSetLen(f.c, i, n)
	}
}

func fillSegment(c *C.sluice_prefetch_fill_t, i int) []byte {
	if i < 0 || i >= int(c.segments) {
		panic("sluice: segment index out of range")
	}
	return unsafe.Slice((*byte)(c.host[i]), int(c.capacity[i]))
}

func fillSetLen(c *C.sluice_prefetch_fill_t, i, n int) {
	if i < 0 || i >= int(c.segments) {
		panic("sluice: segment index out of range")
	}
	if n < 0 || n > int(c.capacity[i]) {
		panic("sluice: segment length out of range")
	}
	c.len[i] = C.size_t(n)
}

// prefetchFill is what the cgo.Handle of a Fill function holds.
type prefetchFill struct {
	fn func(*Fill) error
}

// sluiceGoPrefetchFill runs a pull-mode Fill function; the library calls it on
// a producer thread. Its return value is 0, SLUICE_PREFETCH_END, or the token
// of a recorded failure (never SLUICE_PREFETCH_END), which the library names
// in the error the consumer receives ("... returned TOKEN") and takeError
// turns back into the Go error (see recordCallbackFailure).
//
//export sluiceGoPrefetchFill
func sluiceGoPrefetchFill(h C.uintptr_t, c *C.sluice_prefetch_fill_t) (rc C.int32_t) {
	pf := cgo.Handle(h).Value().(*prefetchFill)
	f := &Fill{Seq: uint64(c.seq), c: c}
	defer func() {
		f.c = nil
		if v := recover(); v != nil {
			rc = fillFailure(&CallbackPanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	err := pf.fn(f)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrEndOfInput):
		return C.SLUICE_PREFETCH_END
	}
	return fillFailure(err)
}

// fillFailure records err as a callback failure and returns its token.
func fillFailure(err error) C.int32_t {
	for {
		if tok := recordCallbackFailure(nil, err); tok != C.SLUICE_PREFETCH_END {
			return C.int32_t(tok)
		}
	}
}

// CloseInput ends the input: consumers receive the batches in flight, then
// ErrEndOfData. Producers waiting for a slot, and later pushes, fail with
// ErrInvalidState.
func (p *Prefetcher) CloseInput() error {
	return callOn(&p.h, "Prefetcher.CloseInput", func(h C.sluice_prefetcher_t) *C.sluice_error_t {
		return C.sluice_prefetcher_close_input(h)
	})
}

// BatchError is the error Next and NextInto return in the place of a batch
// whose producer failed (a Fill function's error, or a Slot submitted with a
// bad length): it carries the batch's sequence number. The consumer may go
// on with the next batch. errors.As finds the *Error inside it.
type BatchError struct {
	// Seq is the failed batch's sequence number.
	Seq uint64
	// Err is the producer's error, an *Error.
	Err error
}

// Error implements the error interface.
func (e *BatchError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// noSeq marks a view whose seq the library did not set.
const noSeq = math.MaxUint64

// nextError converts the error of Next or NextInto: a producer's error comes
// with its batch's sequence number in v.
func nextError(err error, v *C.sluice_batch_view_t) error {
	if err == nil || uint64(v.seq) == noSeq {
		return err
	}
	return &BatchError{Seq: uint64(v.seq), Err: err}
}

// Batch is a batch leased by Next until Release: its device memory, one
// segment per capacity of the config, may be read on the consumer stream,
// which waits on the device for the batch's copy (the host does not).
// Kernels, copies and host callbacks that name Sync(i) in their sets are
// ordered after the copy, and Release lets the slot be refilled only after
// the work enqueued on the consumer stream so far.
//
// The *Batch owns the lease: Release ends it, or a runtime cleanup does if
// the Batch becomes unreachable first. It keeps its Prefetcher alive.
type Batch struct {
	// Seq is the batch's sequence number.
	Seq uint64

	h     handle[C.sluice_batch_t]
	pf    *Prefetcher
	n     int
	ptr   [MaxSegments]uint64
	len   [MaxSegments]int
	syncs [MaxSegments]*SyncObject
}

// Next leases the oldest batch to work on the stream, waiting on the host up
// to timeout (WaitForever or any negative: no limit; 0: do not wait) for its
// producer, then ErrTimeout. The stream waits on the device for the batch's
// copy. Release the batch when the work that reads it is enqueued.
//
// At the end of the input (CloseInput, or a Fill function that returned
// ErrEndOfInput), once every batch was consumed, Next returns an error
// matching ErrEndOfData. A producer's failure is returned in its batch's
// place as a *BatchError, and the next call goes on with the next batch.
// After Close it returns an error matching ErrClosed. Next may be called from
// many goroutines at once; batches are handed out in sequence order.
func (p *Prefetcher) Next(s *Stream, timeout time.Duration) (*Batch, error) {
	const op = "Prefetcher.Next"
	h, err := p.h.raw(op)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, argError(CodeNullArgument, op, "nil stream")
	}
	sh, err := s.raw(op)
	if err != nil {
		return nil, err
	}
	var bh C.sluice_batch_t
	var v C.sluice_batch_view_t
	v.seq = noSeq
	e := C.sluice_prefetcher_next(h, sh, timeoutMs(timeout), &bh, &v)
	runtime.KeepAlive(p)
	runtime.KeepAlive(s)
	if err := nextError(check(e, &p.h, s.hs()), &v); err != nil {
		return nil, err
	}
	b := &Batch{Seq: uint64(v.seq), pf: p, n: int(v.segments)}
	for i := 0; i < b.n; i++ {
		b.ptr[i] = uint64(v.device_ptr[i])
		b.len[i] = int(v.len[i])
	}
	p.syncObjects(v.sync[:b.n], b.syncs[:b.n])
	openHandle(b, &b.h, bh)
	return b, nil
}

// syncObjects puts the wrappers of the slot sync handles hs into out, made
// once per handle. They do not own their handles (the prefetcher does):
// their Close does nothing, and they are closed when the Prefetcher is.
func (p *Prefetcher) syncObjects(hs []C.sluice_sync_t, out []*SyncObject) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	for i, h := range hs {
		b := uint64(h.bits)
		o := p.syncs[b]
		if o == nil {
			o = &SyncObject{owned: true}
			if p.syncs != nil {
				o.h.bits.Store(b)
				p.syncs[b] = o
			}
		}
		out[i] = o
	}
}

// Segments returns the number of segments of the batch.
func (b *Batch) Segments() int { return b.n }

// Len returns the number of bytes of segment i. It panics if i is out of
// range.
func (b *Batch) Len(i int) int { return b.len[b.index(i)] }

// DevicePtr returns segment i's device address (CUdeviceptr; a host address
// on the host backend), valid while the batch is leased. It panics if i is
// out of range.
func (b *Batch) DevicePtr(i int) uint64 { return b.ptr[b.index(i)] }

// Sync returns segment i's sync object, for the read and write sets of the
// kernels, copies and host callbacks that use the segment. On the stream
// passed to Next, work enqueued before Release is already ordered after the
// batch's copy (and the slot's next copy after that work), so it may leave
// the object out and save a stream wait; work on other streams must name it.
// It belongs to the Prefetcher (its Close does nothing), and is closed when
// the Prefetcher is. It panics if i is out of range.
func (b *Batch) Sync(i int) *SyncObject { return b.syncs[b.index(i)] }

// HostBytes returns segment i's device memory, Len(i) bytes, as a []byte on
// the host backend, whose device memory is host memory; it serves host
// callbacks that stand in for kernels (name Sync(i) in their read set). It
// fails with ErrUnsupported on other backends. The slice is valid while the
// batch is leased, and for the work enqueued on the consumer stream before
// Release.
func (b *Batch) HostBytes(i int) ([]byte, error) {
	const op = "Batch.HostBytes"
	i = b.index(i)
	if b.h.load() == 0 {
		return nil, closedError(op)
	}
	be, err := b.pf.dev.backendKind()
	if err != nil {
		return nil, err
	}
	if be != BackendHost {
		return nil, argError(CodeUnsupported, op, "device memory of the %v backend is not host memory", be)
	}
	if b.len[i] == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(C.sluice_go_ptr(C.uint64_t(b.ptr[i]))), b.len[i]), nil
}

func (b *Batch) index(i int) int {
	if i < 0 || i >= b.n {
		panic("sluice: segment index out of range")
	}
	return i
}

// Release ends the lease in stream order: the slot is refilled only after the
// work enqueued on the consumer stream so far has completed on the device;
// the host does not wait. Release is idempotent: later calls return nil.
// After the Prefetcher's Close it returns an error matching ErrClosed.
func (b *Batch) Release() error {
	c, ok := b.h.take()
	if !ok {
		return nil
	}
	e := destroy(c)
	runtime.KeepAlive(b.pf)
	return check(e, &b.pf.h)
}

// BatchInfo describes a batch that NextInto copied.
type BatchInfo struct {
	// Seq is the batch's sequence number.
	Seq uint64
	// Lens holds the number of bytes of each segment.
	Lens []int
}

// NextInto copies the oldest batch into dst, one device buffer per segment,
// each at least the segment's capacity, as one tracked op on the stream
// (device to device), and releases the batch at once in stream order: the
// stream's later work reads dst, so a graph captured over dst can be replayed
// for every batch. It waits and fails as Next (ErrTimeout, ErrEndOfData, a
// *BatchError, ErrClosed); a dst of the wrong count or size gives
// ErrInvalidArgument or ErrOutOfRange.
func (p *Prefetcher) NextInto(s *Stream, dst []*Buffer, timeout time.Duration) (BatchInfo, error) {
	const op = "Prefetcher.NextInto"
	h, err := p.h.raw(op)
	if err != nil {
		return BatchInfo{}, err
	}
	if s == nil {
		return BatchInfo{}, argError(CodeNullArgument, op, "nil stream")
	}
	sh, err := s.raw(op)
	if err != nil {
		return BatchInfo{}, err
	}
	if len(dst) > MaxSegments {
		return BatchInfo{}, argError(CodeInvalidArgument, op, "%d destination buffers, over %d", len(dst), MaxSegments)
	}
	var hs [MaxSegments]C.sluice_buffer_t
	for i, b := range dst {
		if b == nil {
			return BatchInfo{}, argError(CodeNullArgument, op, "dst[%d] is nil", i)
		}
		if hs[i], err = b.h.raw(op); err != nil {
			return BatchInfo{}, err
		}
	}
	var v C.sluice_batch_view_t
	v.seq = noSeq
	e := C.sluice_prefetcher_next_into(h, sh, &hs[0], C.uint32_t(len(dst)), timeoutMs(timeout), &v)
	runtime.KeepAlive(p)
	runtime.KeepAlive(s)
	runtime.KeepAlive(dst)
	if e != nil {
		hc := []anyHandle{&p.h, s.hs()}
		for _, b := range dst {
			hc = append(hc, &b.h)
		}
		return BatchInfo{}, nextError(check(e, hc...), &v)
	}
	if s.root().capture.Load() != nil {
		set := make([]Syncable, len(dst))
		for i, b := range dst {
			set[i] = b
		}
		s.captureKeep(set)
	}
	info := BatchInfo{Seq: uint64(v.seq), Lens: make([]int, v.segments)}
	for i := range info.Lens {
		info.Lens[i] = int(v.len[i])
	}
	return info, nil
}

// All returns an iterator over the batches of Next(s, WaitForever), for a
// range-over-func loop:
//
//	for b, err := range p.All(s) {
//		if err != nil {
//			return err
//		}
//		// enqueue work on s that reads b.Sync(0) at b.DevicePtr(0) ...
//	}
//
// Each batch is released (Release) after the loop body, also when the body
// breaks out of the loop or panics, so the body must enqueue on s all the
// work that uses the batch, and keep nothing of it. The iteration ends,
// yielding no error, at the end of the data (ErrEndOfData); on any other
// error, a producer's failure (*BatchError) included, it yields (nil, err)
// once and ends. An error of the Release after the body is yielded the same
// way, unless the body broke out of the loop.
func (p *Prefetcher) All(s *Stream) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		for {
			b, err := p.Next(s, WaitForever)
			if err != nil {
				if !errors.Is(err, ErrEndOfData) {
					yield(nil, err)
				}
				return
			}
			var relErr error
			more := func() bool {
				defer func() { relErr = b.Release() }()
				return yield(b, nil)
			}()
			if !more {
				return
			}
			if relErr != nil {
				yield(nil, relErr)
				return
			}
		}
	}
}

// Stats returns the prefetcher's counters.
func (p *Prefetcher) Stats() (PrefetcherStats, error) {
	h, err := p.h.raw("Prefetcher.Stats")
	if err != nil {
		return PrefetcherStats{}, err
	}
	var st C.sluice_prefetcher_stats_t
	e := C.sluice_prefetcher_stats(h, &st)
	runtime.KeepAlive(p)
	if err := check(e, &p.h); err != nil {
		return PrefetcherStats{}, err
	}
	return PrefetcherStats{
		Batches:      uint64(st.batches),
		Bytes:        uint64(st.bytes),
		ProducerWait: time.Duration(st.producer_wait_ns),
		ConsumerWait: time.Duration(st.consumer_wait_ns),
		PinnedBytes:  uint64(st.pinned_bytes),
		CopyGBps:     float64(st.copy_gbps),
	}, nil
}
