package sluice

/*
#include <stdlib.h>
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// CaptureMode is the mode of a graph capture (SLUICE_CAPTURE_*).
type CaptureMode uint32

const (
	// CaptureRelaxed is the default mode. It ties nothing to the capturing
	// OS thread, so it is the one to use from goroutines, which move between
	// OS threads.
	CaptureRelaxed CaptureMode = C.SLUICE_CAPTURE_RELAXED
	// CaptureThreadLocal is CUDA's CU_STREAM_CAPTURE_MODE_THREAD_LOCAL. Pin
	// the goroutine with runtime.LockOSThread for the whole capture.
	CaptureThreadLocal CaptureMode = C.SLUICE_CAPTURE_THREAD_LOCAL
	// CaptureGlobal is CUDA's CU_STREAM_CAPTURE_MODE_GLOBAL: pinned as
	// CaptureThreadLocal, and while it lasts unsafe calls (a synchronize, an
	// allocation) fail on every thread, and may invalidate the capture.
	CaptureGlobal CaptureMode = C.SLUICE_CAPTURE_GLOBAL
)

// captureState is the Go side of one capture: the objects that captured ops
// use, so that the graphs made from it keep their wrappers reachable (the C
// graph does not keep buffers alive, and a runtime cleanup of an unreachable
// buffer wrapper would free memory the graph still uses), and the streams
// taking part.
type captureState struct {
	mu      sync.Mutex
	ended   bool
	origin  *Stream
	forks   []*Stream
	keep    []any
	keepSet map[any]struct{}
}

func newCaptureState(origin *Stream) *captureState {
	return &captureState{origin: origin, keepSet: make(map[any]struct{})}
}

func (cs *captureState) add(x any) {
	if _, ok := cs.keepSet[x]; !ok {
		cs.keepSet[x] = struct{}{}
		cs.keep = append(cs.keep, x)
	}
}

// join makes s (a stream that waited on an event recorded in the capture) a
// fork of the capture.
func (cs *captureState) join(s *Stream) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.ended && s.capture.CompareAndSwap(nil, cs) {
		cs.forks = append(cs.forks, s)
	}
}

// end detaches the capture from its streams and returns what it used.
func (cs *captureState) end() []any {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.ended = true
	cs.origin.capture.CompareAndSwap(cs, nil)
	for _, f := range cs.forks {
		f.capture.CompareAndSwap(cs, nil)
	}
	keep := cs.keep
	cs.keep, cs.keepSet, cs.forks = nil, nil, nil
	return keep
}

// capturing reports whether s is capturing: the per-op paths test it before
// calling captureKeep, which is too large to inline.
func (s *Stream) capturing() bool { return s.root().capture.Load() != nil }

// captureKeep notes the objects (sync objects, buffers) of the sets used by
// an op on s, if s is capturing.
func (s *Stream) captureKeep(sets ...[]Syncable) {
	cs := s.root().capture.Load()
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return
	}
	for _, set := range sets {
		for _, x := range set {
			cs.add(x)
		}
	}
}

// captureKeepObjects notes objects that are not Syncable (an RNG, an RNG
// checkpoint) used by an op on s, if s is capturing.
func (s *Stream) captureKeepObjects(xs ...any) {
	cs := s.root().capture.Load()
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return
	}
	for _, x := range xs {
		cs.add(x)
	}
}

// BeginCapture begins capturing a graph on the stream: the ops issued on it
// from now on are recorded into a graph instead of run, until EndCapture.
// Other streams join the capture (fork) by waiting (WaitEvent) on an event
// recorded on a capturing stream; each must be joined back before
// EndCapture: the origin stream waits on an event recorded on the fork after
// its last op, or runs an op whose reads or writes conflict with that op
// (which waits for it). Sync objects alone do not join a stream: an op on a stream
// outside the capture runs at once, ordered after the objects' real work, not
// after the captured ops, and a replay does not repeat it.
//
// While capturing, host synchronisation and queries (Synchronize, Query,
// Event.Synchronize, Event.Query), host waits on sync objects that the
// capture uses, allocation (Alloc) and pageable copies (CopyFromHost,
// CopyToHost) fail with ErrCaptureUnsupported, and the capture is then
// aborted: EndCapture returns ErrCaptureFailed.
//
// Host callbacks can be captured on the host backend only (each runs once per
// launch); on cuda HostCallback fails with ErrCaptureUnsupported during a
// capture.
//
// The graph uses the buffers of the captured ops without owning them: the
// Graph and its GraphExecs keep their Go wrappers reachable, but do not
// Close a buffer that a live Graph or GraphExec still uses.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	h, err := s.raw("Stream.BeginCapture")
	if err != nil {
		return err
	}
	e := C.sluice_graph_capture_begin(h, C.uint32_t(mode))
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return err
	}
	root := s.root()
	root.capture.Store(newCaptureState(root))
	return nil
}

// EndCapture ends the capture begun on the stream with BeginCapture and
// returns the graph. On failure (a forked stream not joined back, an op
// rejected during the capture: ErrCaptureFailed; a driver error) the capture
// is still ended, the dependency state of the buffers is rolled back, and
// the streams are usable again. Calling it on a stream that only joined a
// capture, or that is not capturing, gives ErrInvalidState. The *Graph owns
// the handle: Close destroys it, or a runtime cleanup does if the Graph
// becomes unreachable first.
func (s *Stream) EndCapture() (*Graph, error) {
	h, err := s.raw("Stream.EndCapture")
	if err != nil {
		return nil, err
	}
	var g C.sluice_graph_t
	e := C.sluice_graph_capture_end(h, &g)
	runtime.KeepAlive(s)
	err = check(e, s.hs())
	root := s.root()
	var keep []any
	if cs := root.capture.Load(); cs != nil && cs.origin == root {
		if se, ok := err.(*Error); !ok || (se.Code != CodeInvalidState && se.Code != CodeInvalidHandle) {
			// The library ended the capture, successfully or not.
			keep = cs.end()
		}
	}
	if err != nil {
		return nil, err
	}
	out := &Graph{dev: s.dev}
	openGraphHandle(out, &out.h, g, keep)
	return out, nil
}

// IsCapturing reports whether the stream is capturing, as the origin of a
// capture or as a fork that joined one.
func (s *Stream) IsCapturing() (bool, error) {
	h, err := s.raw("Stream.IsCapturing")
	if err != nil {
		return false, err
	}
	var v C.bool
	e := C.sluice_stream_is_capturing(h, &v)
	runtime.KeepAlive(s)
	if err := check(e, s.hs()); err != nil {
		return false, err
	}
	return bool(v), nil
}

// Graph is a captured graph (sluice_graph_t). Instantiate it to launch it. A
// Graph keeps its Device alive, and the Go wrappers of the buffers its ops
// use reachable (see BeginCapture).
type Graph struct {
	h   graphHandle[C.sluice_graph_t]
	dev *Device
}

// Close destroys the graph handle that the Graph owns. GraphExecs made from
// it stay valid. On the host backend, the Go host callbacks captured into the
// graph are released once the Graph and every GraphExec holding them are
// closed. Close is idempotent.
func (g *Graph) Close() error { return g.h.close() }

// Device returns the device of the graph.
func (g *Graph) Device() *Device { return g.dev }

// NodeCount returns the number of operation nodes in the graph.
func (g *Graph) NodeCount() (int, error) {
	h, err := g.h.raw("Graph.NodeCount")
	if err != nil {
		return 0, err
	}
	var n C.size_t
	e := C.sluice_graph_node_count(h, &n)
	runtime.KeepAlive(g)
	if err := check(e, &g.h); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DebugDot writes a Graphviz DOT description of the graph to the file path;
// verbose adds details to the node labels.
func (g *Graph) DebugDot(path string, verbose bool) error {
	h, err := g.h.raw("Graph.DebugDot")
	if err != nil {
		return err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	e := C.sluice_graph_debug_dot(h, cs, C.bool(verbose))
	runtime.KeepAlive(g)
	return check(e, &g.h)
}

// Instantiate makes an executable graph of the graph. With
// SLUICE_GRAPH_DOT_DIR set, the library also writes
// <dir>/graph-<device>-<id>.dot. The *GraphExec owns the handle: Close
// destroys it, or a runtime cleanup does if the GraphExec becomes unreachable
// first.
func (g *Graph) Instantiate() (*GraphExec, error) {
	h, err := g.h.raw("Graph.Instantiate")
	if err != nil {
		return nil, err
	}
	var x C.sluice_graph_exec_t
	e := C.sluice_graph_instantiate(h, &x)
	runtime.KeepAlive(g)
	if err := check(e, &g.h); err != nil {
		return nil, err
	}
	out := &GraphExec{dev: g.dev}
	openGraphHandle(out, &out.h, x, g.h.keptWrappers())
	return out, nil
}

// GraphExec is an executable graph (sluice_graph_exec_t), launchable on any
// stream of its device. It keeps its Device alive, and the Go wrappers of
// the buffers its graph uses reachable.
type GraphExec struct {
	h   graphHandle[C.sluice_graph_exec_t]
	dev *Device
}

// UpdateResult says how GraphExec.Update applied a graph.
type UpdateResult struct {
	// InPlace: the executable graph was updated in place.
	InPlace bool
	// Reinstantiated: the in-place update was refused (the topology or a
	// node kind changed), so the graph was instantiated anew; Reason says
	// why.
	Reinstantiated bool
	Reason         string
}

// Close destroys the executable graph handle that the GraphExec owns;
// launches already enqueued complete. Close is idempotent.
func (x *GraphExec) Close() error { return x.h.close() }

// Device returns the device of the executable graph.
func (x *GraphExec) Device() *Device { return x.dev }

// Upload uploads the executable graph's resources ahead of its first launch,
// ordered on the stream.
func (x *GraphExec) Upload(s *Stream) error { return x.onStream("GraphExec.Upload", s, false) }

// Launch launches the executable graph on the stream as one tracked op: it
// waits for the earlier users of every buffer the graph touches, on any
// stream, and records one event after.
func (x *GraphExec) Launch(s *Stream) error { return x.onStream("GraphExec.Launch", s, true) }

// onStream is Launch, or Upload when launch is false.
func (x *GraphExec) onStream(op string, s *Stream, launch bool) error {
	h, err := x.h.raw(op)
	if err != nil {
		return err
	}
	sh, err := s.raw(op + "(stream)")
	if err != nil {
		return err
	}
	var e *C.sluice_error_t
	if launch {
		e = C.sluice_graph_exec_launch(h, sh)
	} else {
		e = C.sluice_graph_exec_upload(h, sh)
	}
	runtime.KeepAlive(x)
	runtime.KeepAlive(s)
	return check(e, &x.h, s.hs())
}

// Update applies g to the executable graph: in place when the library (the
// driver, on cuda) accepts it, for a graph of the same topology with new
// pointers or parameters; otherwise it instantiates g anew. The result says
// which happened. Either way the executable graph runs g's ops from now on.
func (x *GraphExec) Update(g *Graph) (UpdateResult, error) {
	h, err := x.h.raw("GraphExec.Update")
	if err != nil {
		return UpdateResult{}, err
	}
	gh, err := g.h.raw("GraphExec.Update(graph)")
	if err != nil {
		return UpdateResult{}, err
	}
	var info C.sluice_graph_update_info_t
	e := C.sluice_graph_exec_update(h, gh, &info)
	runtime.KeepAlive(x)
	runtime.KeepAlive(g)
	if err := check(e, &x.h, &g.h); err != nil {
		return UpdateResult{}, err
	}
	x.h.keep(g.h.keptWrappers())
	if info.result == C.SLUICE_GRAPH_UPDATE_IN_PLACE {
		return UpdateResult{InPlace: true}, nil
	}
	return UpdateResult{
		Reinstantiated: true,
		Reason:         C.GoString((*C.char)(unsafe.Pointer(&info.reason[0]))),
	}, nil
}

// SetGraphsEnabled turns graph caches on or off process-wide. Off, every
// GraphCache.Run runs its body eagerly. The initial state is on, unless the
// environment has SLUICE_GRAPHS=0.
func SetGraphsEnabled(enabled bool) error {
	return takeError(C.sluice_graph_cache_set_enabled(C.bool(enabled)))
}
