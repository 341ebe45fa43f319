package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"runtime"
	"time"
)

// EventFlags are the flags of an event recording.
type EventFlags uint32

// EventTiming records a timing event usable with ElapsedTime.
const EventTiming EventFlags = C.SLUICE_EVENT_TIMING

// Event is one recording of a pooled event (sluice_event_t): a point in a
// stream, with a per-stream sequence number that only increases. An Event
// keeps its Stream alive.
//
// An Event comes from Stream.Record (a new *Event per call), or is a
// caller-owned value that Stream.RecordInto records into again and again:
// the allocation-free form for hot loops. The zero Event is valid and reads
// as closed until it is recorded into.
type Event struct {
	h      reusable[C.sluice_event_t]
	stream *Stream
	// capture is the capture the event was recorded in, if any: a stream
	// that waits on the event joins it.
	capture *captureState
}

// Record records an event at the current end of the stream. flags is 0 or
// EventTiming. The *Event owns the handle: Close destroys it, or a runtime
// cleanup does if the Event becomes unreachable first; the pooled event is
// recycled once nothing references the recording.
//
// Record allocates the Event (and its cleanup) on every call; RecordInto
// does not.
func (s *Stream) Record(flags EventFlags) (*Event, error) {
	c, err := s.record("Stream.Record", flags)
	if err != nil {
		return nil, err
	}
	out := &Event{stream: s, capture: s.root().capture.Load()}
	openHandle(out, &out.h.own, c)
	return out, nil
}

// RecordInto records an event at the current end of the stream into ev, a
// caller-owned Event (the zero Event, or one recorded before): the
// allocation-free form of Record. If ev still holds a recording, that
// recording is destroyed once the new one is made (as if ev were closed
// first); on an error ev is left as it was.
//
// The first RecordInto into an Event allocates its handle cell and
// registers one runtime cleanup; later ones allocate nothing. ev owns each
// recording as an Event from Record does: Close destroys it, and the cleanup
// destroys the last one if ev becomes unreachable while it is open.
//
// RecordInto writes ev: it must not run concurrently with any other use of
// the same ev (other goroutines may use other Events, and the stream, at
// once). Recording into ev again moves it: a WaitEvent, Query or
// Synchronize made afterwards sees the new recording, never the old one.
func (s *Stream) RecordInto(ev *Event, flags EventFlags) error {
	return s.recordInto("Stream.RecordInto", ev, flags)
}

// record is sluice_event_record.
func (s *Stream) record(op string, flags EventFlags) (C.sluice_event_t, error) {
	var c C.sluice_event_t
	h, err := s.raw(op)
	if err != nil {
		return c, err
	}
	e := C.sluice_event_record(h, C.uint32_t(flags), &c)
	runtime.KeepAlive(s)
	return c, check(e, s.hs())
}

func (s *Stream) recordInto(op string, ev *Event, flags EventFlags) error {
	if ev == nil {
		return argError(CodeNullArgument, op, "nil *Event")
	}
	c, err := s.record(op, flags)
	if err != nil {
		return err
	}
	ev.stream = s
	ev.capture = s.root().capture.Load()
	if old, ok := openReusable(ev, &ev.h, c); ok {
		// The replaced recording: ours alone (the swap took it).
		dropError(destroy(old))
	}
	return nil
}

// WaitEvent makes the stream wait, on the device, for the work before ev; the
// host does not block. An event recorded in a capture that has ended, or in
// another capture than the stream's, is refused (ErrInvalidState).
func (s *Stream) WaitEvent(ev *Event) error {
	h, err := s.raw("Stream.WaitEvent")
	if err != nil {
		return err
	}
	eh, err := ev.h.raw("Stream.WaitEvent(event)")
	if err != nil {
		return err
	}
	e := C.sluice_stream_wait_event(h, eh)
	runtime.KeepAlive(s)
	runtime.KeepAlive(ev)
	if err := check(e, s.hs(), &ev.h); err != nil {
		return err
	}
	if ev.capture != nil {
		// Waiting on an event recorded in a capture forks s into it.
		ev.capture.join(s.root())
	}
	return nil
}

// Close destroys the event handle that the Event owns. Close is idempotent.
func (ev *Event) Close() error { return ev.h.close() }

// Stream returns the stream the event was recorded on.
func (ev *Event) Stream() *Stream { return ev.stream }

// Query reports whether the work before the event has completed.
func (ev *Event) Query() (done bool, err error) {
	h, err := ev.h.raw("Event.Query")
	if err != nil {
		return false, err
	}
	var v C.bool
	e := C.sluice_event_query(h, &v)
	runtime.KeepAlive(ev)
	if err := check(e, &ev.h); err != nil {
		return false, err
	}
	return bool(v), nil
}

// Synchronize blocks until the work before the event has completed.
func (ev *Event) Synchronize() error {
	return callOn(&ev.h, "Event.Synchronize", func(h C.sluice_event_t) *C.sluice_error_t { return C.sluice_event_synchronize(h) })
}

// Sequence returns the id of the event's stream and the event's sequence
// number within that stream.
func (ev *Event) Sequence() (streamID, seq uint64, err error) {
	h, err := ev.h.raw("Event.Sequence")
	if err != nil {
		return 0, 0, err
	}
	var sid, sq C.uint64_t
	e := C.sluice_event_sequence(h, &sid, &sq)
	runtime.KeepAlive(ev)
	if err := check(e, &ev.h); err != nil {
		return 0, 0, err
	}
	return uint64(sid), uint64(sq), nil
}

// ElapsedTime returns the time between two completed timing events (both
// recorded with EventTiming).
func ElapsedTime(start, end *Event) (time.Duration, error) {
	sh, err := start.h.raw("ElapsedTime(start)")
	if err != nil {
		return 0, err
	}
	eh, err := end.h.raw("ElapsedTime(end)")
	if err != nil {
		return 0, err
	}
	var ms C.float
	e := C.sluice_event_elapsed_ms(sh, eh, &ms)
	runtime.KeepAlive(start)
	runtime.KeepAlive(end)
	if err := check(e, &start.h, &end.h); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
