package sluice

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

func TestStream(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	if s.Device() != d || s.ID() == 0 || s.IsExternal() {
		t.Fatal("accessors")
	}
	st, err := s.Stats()
	must(t, err)
	if st.ID != s.ID() {
		t.Fatalf("stats id %d, stream id %d", st.ID, s.ID())
	}
	idle, err := s.Query()
	must(t, err)
	if !idle {
		t.Fatal("new stream not idle")
	}

	// Work enqueued, then a label that a failure report names.
	release := make(chan struct{})
	var ran atomic.Bool
	must(t, s.HostCallback(func() error { <-release; ran.Store(true); return nil }, nil, nil))
	idle, err = s.Query()
	must(t, err)
	if idle {
		t.Fatal("stream idle while a callback blocks")
	}
	close(release)
	must(t, s.Synchronize())
	if !ran.Load() {
		t.Fatal("callback did not run before Synchronize returned")
	}

	must(t, s.SetLabel("prefetch batch 7"))
	must(t, s.HostCallback(func() error { return errors.New("bad batch") }, nil, nil))
	err = s.Synchronize()
	wantCode(t, err, ErrCallbackFailed)
	if !strings.Contains(err.Error(), fmt.Sprintf("stream #%d", s.ID())) || !strings.Contains(err.Error(), "bad batch") {
		t.Fatalf("message lacks the stream or the cause: %v", err)
	}
	if !strings.Contains(err.Error(), "prefetch batch 7") {
		t.Fatalf("message lacks the stream's label: %v", err)
	}
	must(t, s.SetLabel(""))
	must(t, s.Synchronize()) // the error was reported once

	// Raw and WrapStream: the wrapper shares the queue, and closing it leaves
	// the original alone.
	raw, err := s.Raw()
	must(t, err)
	if raw == nil {
		t.Fatal("nil raw stream")
	}
	w, err := d.WrapStream(raw)
	must(t, err)
	if !w.IsExternal() || w.ID() == s.ID() {
		t.Fatal("wrapped stream accessors")
	}
	wraw, err := w.Raw()
	must(t, err)
	if wraw != raw {
		t.Fatal("wrapped stream has another raw stream")
	}
	buf := alloc(t, w, 256)
	must(t, CopyFromHost(w, buf, 0, pattern(256, 1)))
	must(t, w.Close())
	must(t, w.Close())
	wantBytes(t, "after closing the wrapper", readBack(t, s, buf, 256), pattern(256, 1))
	must(t, s.Synchronize())

	if backendOf(t, d) == BackendHost {
		// On host a raw stream must be a live host stream.
		other := testStream(t, d)
		oraw, err := other.Raw()
		must(t, err)
		must(t, other.Close())
		_, err = d.WrapStream(oraw)
		wantCode(t, err, ErrInvalidArgument)
	}
}

func TestStreamCloseWithPendingWork(t *testing.T) {
	d := openDev(t)
	s, err := d.NewStream(0, 0)
	must(t, err)
	pin := allocPinned(t, d, 4096)
	release := make(chan struct{})
	done := make(chan struct{})
	must(t, s.HostCallback(func() error { <-release; return nil }, nil, nil))
	must(t, Memset(s, pin, 0, 0x5a, 4096))
	must(t, s.HostCallback(func() error { close(done); return nil }, nil, nil))
	must(t, s.Close()) // work already enqueued completes
	close(release)
	<-done
	must(t, pin.WaitRead())
	for i, b := range pin.Bytes() {
		if b != 0x5a {
			t.Fatalf("byte %d = %#x", i, b)
		}
	}
	wantClosed(t, s.Synchronize())
}
