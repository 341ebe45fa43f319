package sluice

/*
#include "sluice.h"
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync"
)

// GraphCache is a graph cache (sluice_graph_cache_t): per caller key, the
// first Run of a region runs its body eagerly (a warm-up), the second
// captures it into a graph, instantiates and launches it, and later runs
// replay that graph without calling the body. A GraphCache keeps its Device
// alive, and the Go wrappers of the buffers its graphs use reachable.
type GraphCache struct {
	h   handle[C.sluice_graph_cache_t]
	dev *Device

	mu   sync.Mutex
	keep map[uint64][]any
}

// GraphCacheStats are the counters of a graph cache.
type GraphCacheStats struct {
	// Eager counts runs executed eagerly: warm-ups, and every run while
	// graphs are disabled (SetGraphsEnabled(false), SLUICE_GRAPHS=0).
	Eager uint64
	// Captured counts runs captured and instantiated.
	Captured uint64
	// Replayed counts runs replayed from an instantiated graph.
	Replayed uint64
	// Entries is the number of keys with an entry.
	Entries uint64
}

// NewGraphCache creates a graph cache for the device. The *GraphCache owns
// the handle: Close destroys it, or a runtime cleanup does if the GraphCache
// becomes unreachable first.
func NewGraphCache(d *Device) (*GraphCache, error) {
	h, err := d.h.raw("NewGraphCache")
	if err != nil {
		return nil, err
	}
	var c C.sluice_graph_cache_t
	e := C.sluice_graph_cache_create(h, &c)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return nil, err
	}
	out := &GraphCache{dev: d, keep: make(map[uint64][]any)}
	openHandle(out, &out.h, c)
	return out, nil
}

// Close destroys the cache handle that the GraphCache owns, and with it the
// cache's executable graphs; launches already enqueued complete. Close is
// idempotent.
func (c *GraphCache) Close() error {
	err := c.h.close()
	c.mu.Lock()
	c.keep = nil
	c.mu.Unlock()
	return err
}

// Device returns the device of the cache.
func (c *GraphCache) Device() *Device { return c.dev }

// Run runs the region key on the stream: eagerly the first time, captured
// into a graph (and launched) the second time, replayed from that graph
// later, without calling body. While graphs are disabled every run is eager.
//
// body issues the region's ops on the stream it receives: a non-owning view
// of s (same stream; IsView reports true; its Close does nothing). It is
// called synchronously, on the calling goroutine, from inside the library
// call, so it may call sluice; it must not call runtime.Goexit (t.FailNow).
// During the capturing run, its ops are recorded, not run, and the
// operations that a capture rejects fail (see BeginCapture). A body must
// issue the same ops every time: a replay repeats what the captured run
// recorded.
//
// If body returns an error or panics (the panic is recovered), Run returns
// an *Error with ErrCallbackFailed whose Cause is body's error or a
// *CallbackPanicError, so errors.Is also finds body's error.
func (c *GraphCache) Run(key uint64, s *Stream, body func(*Stream) error) error {
	const op = "GraphCache.Run"
	ch, err := c.h.raw(op)
	if err != nil {
		return err
	}
	sh, err := s.raw(op + "(stream)")
	if err != nil {
		return err
	}
	if body == nil {
		return argError(CodeNullArgument, op, "nil body")
	}
	b := &graphBody{fn: body, stream: s}
	hd := cgo.NewHandle(b)
	e := C.sluice_go_graph_cache_run(ch, C.uint64_t(key), sh, C.uintptr_t(hd))
	hd.Delete() // the body is only called during the call
	runtime.KeepAlive(c)
	runtime.KeepAlive(s)
	err = check(e, &c.h, s.hs())
	if se, ok := err.(*Error); ok && b.err != nil {
		se.Cause = b.err
		se.Message += ": " + b.err.Error()
	}
	if err == nil && b.captured {
		c.mu.Lock()
		if c.keep != nil {
			c.keep[key] = b.keep
			c.dropEvicted(ch)
		}
		c.mu.Unlock()
	}
	return err
}

// dropEvicted lets go of the wrappers kept for keys the library no longer
// holds (evicted under SetMaxEntries' limit), so that their buffers can be
// collected. Called with c.mu held, after a capture or a new limit: one cgo
// call per kept key, far less than a capture.
func (c *GraphCache) dropEvicted(h C.sluice_graph_cache_t) {
	for k := range c.keep {
		var has C.bool
		if e := C.sluice_graph_cache_contains(h, C.uint64_t(k), &has); e != nil {
			dropError(e)
			return // closed meanwhile: Close drops them all
		}
		if !has {
			delete(c.keep, k)
		}
	}
}

// SetMaxEntries keeps at most max keys in the cache (0: no limit), evicting the
// least recently used keys beyond that. A new cache holds SLUICE_GRAPH_CACHE_MAX
// keys, else 1024. An evicted key runs eagerly again, then is captured again.
func (c *GraphCache) SetMaxEntries(max int) error {
	if max < 0 {
		return argError(CodeInvalidArgument, "GraphCache.SetMaxEntries", "max is %d, negative", max)
	}
	return callOn(&c.h, "GraphCache.SetMaxEntries", func(h C.sluice_graph_cache_t) *C.sluice_error_t {
		e := C.sluice_graph_cache_set_max_entries(h, C.size_t(max))
		if e == nil {
			c.mu.Lock()
			if c.keep != nil {
				c.dropEvicted(h)
			}
			c.mu.Unlock()
		}
		return e
	})
}

// Stats returns the cache's counters.
func (c *GraphCache) Stats() (GraphCacheStats, error) {
	h, err := c.h.raw("GraphCache.Stats")
	if err != nil {
		return GraphCacheStats{}, err
	}
	var st C.sluice_graph_cache_stats_t
	e := C.sluice_graph_cache_stats(h, &st)
	runtime.KeepAlive(c)
	if err := check(e, &c.h); err != nil {
		return GraphCacheStats{}, err
	}
	return GraphCacheStats{
		Eager:    uint64(st.eager),
		Captured: uint64(st.captured),
		Replayed: uint64(st.replayed),
		Entries:  uint64(st.entries),
	}, nil
}
