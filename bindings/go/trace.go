package sluice

/*
#include <stdlib.h>
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// TraceStart starts writing a trace to the file at path (created or
// truncated): Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open. It holds a track per stream, named after its label
// (Stream.SetLabel) and id; a span per op's enqueue; an arrow from each op
// to the op whose wait the engine inserted for it; graph captures,
// instantiations, updates and launches; allocations and frees; prefetcher
// batches; and log messages. SLUICE_TRACE_DEVICE=1 adds device spans of every
// Nth op (SLUICE_TRACE_SAMPLE=N, default 1), read at this call.
//
// Tracing is process-wide. It fails with ErrInvalidState while a trace is
// written (also one started by SLUICE_TRACE=path, which starts a trace at the
// first traced call instead). While a trace is written the counters that
// SetCountersEnabled turns on count too.
//
// The file is valid JSON once TraceStop returns. Before that it is a prefix
// that the viewers open (its closing "]" is missing), also after a crash.
// Call TraceStop before a Go program ends: Go's exit (a return from main,
// os.Exit) does not run the C atexit hook that closes the trace in C
// programs, so what was buffered since the last flush (every 100 ms) is
// lost, device spans still pending included.
func TraceStart(path string) error {
	if strings.IndexByte(path, 0) >= 0 {
		return argError(CodeInvalidArgument, "TraceStart", "path contains a NUL byte")
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	return takeError(C.sluice_trace_start(cs))
}

// TraceStop stops the trace: it waits for pending device spans, then closes
// the JSON array and the file. It does nothing when no trace is written.
func TraceStop() error { return takeError(C.sluice_trace_stop()) }

// TraceFlush writes what the trace has buffered to its file (the library
// also does every 100 ms). It does nothing when no trace is written.
func TraceFlush() error { return takeError(C.sluice_trace_flush()) }

// Counters are the counters of one device (Device.Counters) or of every
// device of the process (ProcessCounters), as in sluice_counters_t. The
// fields documented "while counting" count only while counting is on
// (SetCountersEnabled(true), SLUICE_COUNTERS=1, or a trace being written);
// the others always count. Streams closed already still count in their
// device's totals, except for Streams and EventsInPools, which describe the
// present.
type Counters struct {
	// Streams is the number of live streams.
	Streams uint64
	// WaitsInserted counts stream waits inserted by the dependency engine and
	// by Stream.WaitEvent.
	WaitsInserted uint64
	// WaitsDeduplicated counts waits merged because the op already waited on
	// the same or a newer recording of that stream (while counting).
	WaitsDeduplicated uint64
	// WaitsSkippedSameStream counts waits not inserted because stream order
	// already covered them (while counting).
	WaitsSkippedSameStream uint64
	// EventsRecorded counts events recorded.
	EventsRecorded uint64
	// EventsCreated counts events created because a pool had none free.
	EventsCreated uint64
	// EventsRecycled counts records served by a recycled event (recorded
	// less created).
	EventsRecycled uint64
	// EventsInPools is the number of free events in the pools of live
	// streams now.
	EventsInPools uint64
	// BytesH2D counts bytes copied host to device (while counting; copies
	// captured into graphs are not counted).
	BytesH2D uint64
	// BytesD2H counts bytes copied device to host (as BytesH2D).
	BytesD2H uint64
	// BytesD2D counts bytes copied device to device (as BytesH2D).
	BytesD2D uint64
	// BytesH2H counts bytes copied host to host through the device (as
	// BytesH2D).
	BytesH2H uint64
	// DeviceAllocHits counts device allocations served by a stream's block
	// cache.
	DeviceAllocHits uint64
	// DeviceAllocMisses counts device allocations from the driver.
	DeviceAllocMisses uint64
	// DeviceAllocTrims counts cached device blocks given back to the driver
	// by a trim.
	DeviceAllocTrims uint64
	// PinnedAllocHits counts pinned allocations served by the pinned cache.
	PinnedAllocHits uint64
	// PinnedAllocMisses counts pinned allocations from the driver.
	PinnedAllocMisses uint64
	// PinnedAllocTrims counts pinned blocks given back to the driver (trims,
	// and frees beyond the cache bound).
	PinnedAllocTrims uint64
	// PinnedBytesInUse is the number of pinned bytes handed out now.
	PinnedBytesInUse uint64
	// PinnedBytesCached is the number of pinned bytes cached now.
	PinnedBytesCached uint64
	// GraphCacheHits counts graph cache runs replayed.
	GraphCacheHits uint64
	// GraphCacheCaptures counts graph cache runs captured and instantiated.
	GraphCacheCaptures uint64
	// GraphCacheEager counts graph cache runs executed eagerly.
	GraphCacheEager uint64
	// GraphCacheEvictions counts graph cache keys evicted, least recently used
	// first, to keep a cache under its maximum.
	GraphCacheEvictions uint64
	// GraphUpdates counts executable graphs updated in place.
	GraphUpdates uint64
	// GraphUpdateFallbacks counts executable graph updates that fell back to
	// re-instantiation.
	GraphUpdateFallbacks uint64
	// PrefetchProducerWaits counts the times a prefetcher's producer blocked
	// for a free slot.
	PrefetchProducerWaits uint64
	// PrefetchConsumerWaits counts the times a prefetcher's consumer blocked
	// for a batch.
	PrefetchConsumerWaits uint64
	// PrefetchProducerWaitTime is the time producers spent in Acquire.
	PrefetchProducerWaitTime time.Duration
	// PrefetchConsumerWaitTime is the time consumers spent in Next and
	// NextInto.
	PrefetchConsumerWaitTime time.Duration
	// EngineSyncs counts host synchronisations made by EngineSync mode.
	EngineSyncs uint64
}

func countersFromC(c *C.sluice_counters_t) Counters {
	return Counters{
		Streams:                  uint64(c.streams),
		WaitsInserted:            uint64(c.waits_inserted),
		WaitsDeduplicated:        uint64(c.waits_deduplicated),
		WaitsSkippedSameStream:   uint64(c.waits_skipped_same_stream),
		EventsRecorded:           uint64(c.events_recorded),
		EventsCreated:            uint64(c.events_created),
		EventsRecycled:           uint64(c.events_recycled),
		EventsInPools:            uint64(c.events_in_pools),
		BytesH2D:                 uint64(c.bytes_h2d),
		BytesD2H:                 uint64(c.bytes_d2h),
		BytesD2D:                 uint64(c.bytes_d2d),
		BytesH2H:                 uint64(c.bytes_h2h),
		DeviceAllocHits:          uint64(c.device_alloc_hits),
		DeviceAllocMisses:        uint64(c.device_alloc_misses),
		DeviceAllocTrims:         uint64(c.device_alloc_trims),
		PinnedAllocHits:          uint64(c.pinned_alloc_hits),
		PinnedAllocMisses:        uint64(c.pinned_alloc_misses),
		PinnedAllocTrims:         uint64(c.pinned_alloc_trims),
		PinnedBytesInUse:         uint64(c.pinned_bytes_in_use),
		PinnedBytesCached:        uint64(c.pinned_bytes_cached),
		GraphCacheHits:           uint64(c.graph_cache_hits),
		GraphCacheCaptures:       uint64(c.graph_cache_captures),
		GraphCacheEager:          uint64(c.graph_cache_eager),
		GraphCacheEvictions:      uint64(c.graph_cache_evictions),
		GraphUpdates:             uint64(c.graph_updates),
		GraphUpdateFallbacks:     uint64(c.graph_update_fallbacks),
		PrefetchProducerWaits:    uint64(c.prefetch_producer_waits),
		PrefetchConsumerWaits:    uint64(c.prefetch_consumer_waits),
		PrefetchProducerWaitTime: time.Duration(c.prefetch_producer_wait_ns),
		PrefetchConsumerWaitTime: time.Duration(c.prefetch_consumer_wait_ns),
		EngineSyncs:              uint64(c.engine_syncs),
	}
}

// Counters returns the counters of the device: of its live and closed
// streams, its pinned pool, its graph caches and its prefetchers. Every
// handle of the same device (OpenDevice returns a new one each time) gives
// the same counters.
func (d *Device) Counters() (Counters, error) {
	h, err := d.h.raw("Device.Counters")
	if err != nil {
		return Counters{}, err
	}
	var c C.sluice_counters_t
	e := C.sluice_counters(h, &c)
	runtime.KeepAlive(d)
	if err := check(e, &d.h); err != nil {
		return Counters{}, err
	}
	return countersFromC(&c), nil
}

// ProcessCounters returns the counters of every device opened in the
// process, summed (sluice_counters with a zero device handle).
func ProcessCounters() (Counters, error) {
	var c C.sluice_counters_t
	if err := takeError(C.sluice_counters(C.sluice_device_t{}, &c)); err != nil {
		return Counters{}, err
	}
	return countersFromC(&c), nil
}

// SetCountersEnabled turns on or off, process-wide, the counters that cost
// work on every op (those documented "while counting" in Counters). They are
// off by default, or on with SLUICE_COUNTERS=1; a trace being written counts
// them whatever this setting.
func SetCountersEnabled(on bool) error {
	return takeError(C.sluice_counters_set_enabled(C.bool(on)))
}
