package sluice

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// StreamFlags are the creation flags of a stream.
type StreamFlags uint32

// StreamNonBlocking: the stream does not synchronise with the legacy default
// stream.
const StreamNonBlocking StreamFlags = C.SLUICE_STREAM_NON_BLOCKING

// Stream is a stream handle (sluice_stream_t). Every operation names its
// stream: as the receiver or as the first argument. There is no current
// stream, so a Stream may be used from any goroutine, on any OS thread, at
// any time; no runtime.LockOSThread is needed.
//
// A Stream keeps its Device alive. Closing it lets the work already enqueued
// complete.
type Stream struct {
	h        handle[C.sluice_stream_t]
	dev      *Device
	id       uint64
	external bool
	// native is the CUstream (sluice_stream_raw), fixed for the handle's life.
	native unsafe.Pointer
	// parent is the stream a view (see GraphCache.Run) shares its handle
	// with; nil for a stream that owns its handle.
	parent *Stream
	// capture is the Go side of the graph capture the stream takes part in
	// (as its origin or as a joined fork); nil when not capturing. Views use
	// their parent's.
	capture atomic.Pointer[captureState]
}

// StreamStats are the counters of a stream.
type StreamStats struct {
	// ID is the process-unique id of the stream (named in error messages as
	// "stream #ID").
	ID uint64
	// Waits counts stream waits inserted by the dependency engine and WaitEvent.
	Waits uint64
	// Records counts events recorded from the stream's pool.
	Records uint64
	// EventsCreated counts events created because the pool had none free.
	EventsCreated uint64
	// EngineSyncs counts host synchronisations made by EngineSync mode.
	EngineSyncs uint64
}

// NewStream creates a stream on the device. priority is clamped into
// PriorityRange. The *Stream owns the handle: Close destroys it, or a runtime
// cleanup does if the Stream becomes unreachable first.
func (d *Device) NewStream(flags StreamFlags, priority int) (*Stream, error) {
	h, err := d.h.raw("Device.NewStream")
	if err != nil {
		return nil, err
	}
	prio := C.int32_t(max(math.MinInt32, min(math.MaxInt32, priority)))
	var s C.sluice_stream_t
	e := C.sluice_stream_create(h, C.uint32_t(flags), prio, &s)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	return newStream(d, s, false)
}

// WrapStream adopts a foreign CUstream (for example libtorch's) without
// owning it: closing the Stream leaves the foreign stream alone. The legacy
// and per-thread default streams are refused. On the host backend, raw must
// come from Raw of a live host stream. The *Stream owns the sluice handle
// (as with NewStream) but not the foreign stream.
func (d *Device) WrapStream(raw unsafe.Pointer) (*Stream, error) {
	h, err := d.h.raw("Device.WrapStream")
	if err != nil {
		return nil, err
	}
	var s C.sluice_stream_t
	e := C.sluice_stream_wrap_external(h, raw, &s)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	return newStream(d, s, true)
}

func newStream(d *Device, s C.sluice_stream_t, external bool) (*Stream, error) {
	st := &Stream{dev: d, external: external}
	openHandle(st, &st.h, s)
	stats, err := st.Stats()
	if err == nil {
		e := C.sluice_stream_raw(s, &st.native)
		err = check(e, &st.h)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	st.id = stats.ID
	return st, nil
}

// root returns the stream that owns the handle: s, or the parent of a view.
func (s *Stream) root() *Stream {
	if s.parent != nil {
		return s.parent
	}
	return s
}

// hs returns the handle state of the stream, which a view shares with its
// parent (so that closing the parent closes its views too).
func (s *Stream) hs() *handle[C.sluice_stream_t] { return &s.root().h }

// raw returns the C handle (a view's parent's), or ErrClosed naming op.
func (s *Stream) raw(op string) (C.sluice_stream_t, error) { return s.hs().raw(op) }

// view returns a non-owning view of the stream: the same C handle, whose
// Close does nothing. It keeps the stream wrapper alive.
func (s *Stream) view() *Stream {
	r := s.root()
	return &Stream{dev: r.dev, id: r.id, external: r.external, native: r.native, parent: r}
}

// IsView reports whether the Stream is a non-owning view of another Stream
// (the stream a GraphCache.Run body receives). A view uses the same stream;
// its Close does nothing.
func (s *Stream) IsView() bool { return s.parent != nil }

// Close destroys the stream handle that the Stream owns; a view (IsView)
// owns none, and its Close does nothing. Work already enqueued completes, and
// the memory it uses stays valid until then. Close is idempotent.
func (s *Stream) Close() error {
	if s.parent != nil {
		return nil
	}
	return s.h.close()
}

// Device returns the device the stream was created on.
func (s *Stream) Device() *Device { return s.dev }

// ID returns the process-unique id of the stream ("stream #ID" in messages).
func (s *Stream) ID() uint64 { return s.id }

// IsExternal reports whether the stream wraps a foreign stream (WrapStream).
func (s *Stream) IsExternal() bool { return s.external }

// Raw returns the underlying CUstream (an opaque pointer on the host
// backend), so that foreign work can be enqueued on it between BeginOp and
// Op.End. It stays valid while the Stream is open.
func (s *Stream) Raw() (unsafe.Pointer, error) {
	if _, err := s.raw("Stream.Raw"); err != nil {
		return nil, err
	}
	return s.native, nil
}

// Query reports whether all work enqueued so far has completed. It also
// reports a deferred error (a failed host callback) of the stream.
func (s *Stream) Query() (idle bool, err error) {
	h, err := s.raw("Stream.Query")
	if err != nil {
		return false, err
	}
	var v C.bool
	e := C.sluice_stream_query(h, &v)
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return false, err
	}
	return bool(v), nil
}

// Synchronize blocks until all work enqueued so far has completed. It reports
// a device fault or a failed host callback on this stream (ErrDeviceFault,
// ErrCallbackFailed), naming the stream and its last label.
func (s *Stream) Synchronize() error {
	h, err := s.raw("Stream.Synchronize")
	if err != nil {
		return err
	}
	e := C.sluice_stream_synchronize(h)
	runtime.KeepAlive(s)
	return check(e, s.hs())
}

// SetLabel sets the label that fault reports on this stream name as its last
// operation. An empty label clears it.
func (s *Stream) SetLabel(label string) error {
	h, err := s.raw("Stream.SetLabel")
	if err != nil {
		return err
	}
	var cs *C.char
	if label != "" {
		cs = C.CString(label)
		defer C.free(unsafe.Pointer(cs))
	}
	e := C.sluice_stream_set_label(h, cs)
	runtime.KeepAlive(s)
	return check(e, s.hs())
}

// Stats returns the stream's counters.
func (s *Stream) Stats() (StreamStats, error) {
	h, err := s.raw("Stream.Stats")
	if err != nil {
		return StreamStats{}, err
	}
	var st C.sluice_stream_stats_t
	e := C.sluice_stream_stats(h, &st)
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return StreamStats{}, err
	}
	return StreamStats{
		ID:            uint64(st.id),
		Waits:         uint64(st.waits),
		Records:       uint64(st.records),
		EventsCreated: uint64(st.events_created),
		EngineSyncs:   uint64(st.engine_syncs),
	}, nil
}

// SetBlockCacheLimit sets the byte bound (default 64 MiB, at most 16 blocks)
// of the stream's cache of freed device blocks, and returns what is cached
// beyond it to the driver's pool. A device buffer whose home is this stream
// (allocated on it) is kept, once freed, for reuse by an allocation of exactly
// the same size on this stream; 0 disables the cache.
func (s *Stream) SetBlockCacheLimit(bytes uint64) error {
	h, err := s.raw("Stream.SetBlockCacheLimit")
	if err != nil {
		return err
	}
	e := C.sluice_stream_set_block_cache_limit(h, C.uint64_t(bytes))
	runtime.KeepAlive(s)
	return check(e, s.hs())
}
