package sluice

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"
)

func TestHostCallbacks(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)

	// Callbacks run once each, in stream order, interleaved with copies.
	var mu sync.Mutex
	var order []int
	pin := allocPinned(t, d, 1024)
	buf := alloc(t, s, 1024)
	pb := pin.Bytes()
	for i := 0; i < 50; i++ {
		i := i
		must(t, Memset(s, buf, 0, byte(i), 1024))
		must(t, Copy(s, pin, 0, buf, 0, 1024))
		must(t, s.HostCallback(func() error {
			mu.Lock()
			defer mu.Unlock()
			// The copy before this callback has completed: the pinned memory shows it.
			if pb[1023] != byte(i) {
				return errors.New("callback ran before the copy before it")
			}
			order = append(order, i)
			return nil
		}, []Syncable{pin}, nil))
	}
	must(t, s.Synchronize())
	mu.Lock()
	if len(order) != 50 {
		t.Fatalf("%d callbacks ran", len(order))
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
	mu.Unlock()

	// A callback writing pinned memory, read by a copy on another stream.
	b := testStream(t, d)
	must(t, s.HostCallback(func() error {
		time.Sleep(10 * time.Millisecond)
		copy(pb, pattern(1024, 5))
		return nil
	}, nil, []Syncable{pin}))
	buf2 := alloc(t, b, 1024)
	must(t, Copy(b, buf2, 0, pin, 0, 1024))
	wantBytes(t, "callback output", readBack(t, b, buf2, 1024), pattern(1024, 5))

	wantCode(t, s.HostCallback(nil, nil, nil), ErrNullArgument)
}

type payload struct{ data [1024]byte }

// The library releases the cgo.Handle of a callback (its free_user_data)
// once it ran, so its closure (and what it captured) becomes garbage.
func TestHostCallbackHandleReleased(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	base := liveCallbackHandles.Load()
	var wp weak.Pointer[payload]
	func() {
		p := &payload{}
		wp = weak.Make(p)
		must(t, s.HostCallback(func() error { p.data[0] = 1; return nil }, nil, nil))
		must(t, s.HostCallback(func() error { p.data[1] = 1; return errUser }, nil, nil))
	}()
	wantCode(t, s.Synchronize(), ErrCallbackFailed)
	waitFor(t, "callback handles released", func() bool { return liveCallbackHandles.Load() == base })
	waitFor(t, "callback closure collected", func() bool {
		runtime.GC()
		return wp.Value() == nil
	})
}

var errUser = errors.New("user failure")

func TestHostCallbackPanicsAndErrors(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)

	// A panic is recovered; the next synchronisation reports it, with the value.
	after := false
	must(t, s.HostCallback(func() error { panic("kaboom 42") }, nil, nil))
	must(t, s.HostCallback(func() error { after = true; return nil }, nil, nil))
	err := s.Synchronize()
	wantCode(t, err, ErrCallbackFailed)
	if !strings.Contains(err.Error(), "kaboom 42") {
		t.Fatalf("message lacks the panic value: %v", err)
	}
	var pe *CallbackPanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom 42" || len(pe.Stack) == 0 {
		t.Fatalf("no CallbackPanicError in %v", err)
	}
	if !after {
		t.Fatal("the stream stopped after a failed callback")
	}
	must(t, s.Synchronize()) // reported once

	// A panic with an error value unwraps to it.
	must(t, s.HostCallback(func() error { panic(errUser) }, nil, nil))
	err = s.Synchronize()
	if !errors.Is(err, ErrCallbackFailed) || !errors.Is(err, errUser) {
		t.Fatalf("panic(error): %v", err)
	}

	// A returned error is the cause; Event.Synchronize reports it too.
	must(t, s.HostCallback(func() error { return errUser }, nil, nil))
	ev, err := s.Record(0)
	must(t, err)
	defer ev.Close()
	err = ev.Synchronize()
	if !errors.Is(err, ErrCallbackFailed) || !errors.Is(err, errUser) {
		t.Fatalf("event sync: %v", err)
	}
	// An event wait may leave the error for the stream's own synchronisation;
	// then it is reported there once more, with the same cause.
	if err := s.Synchronize(); err != nil && !errors.Is(err, errUser) {
		t.Fatalf("stream sync after the event reported the failure: %v", err)
	}
	must(t, s.Synchronize())

	// Query reports it.
	ran := make(chan struct{})
	must(t, s.HostCallback(func() error { return errUser }, nil, nil))
	must(t, s.HostCallback(func() error { close(ran); return nil }, nil, nil))
	<-ran
	waitFor(t, "stream idle or failed", func() bool {
		idle, err := s.Query()
		if err != nil {
			if !errors.Is(err, errUser) {
				t.Fatalf("query: %v", err)
			}
			return true
		}
		if idle {
			t.Fatal("Query reported idle without the callback failure")
		}
		return false
	})

	// Device.WaitAll reports it too.
	must(t, s.HostCallback(func() error { panic("from WaitAll") }, nil, nil))
	err = d.WaitAll()
	if !errors.Is(err, ErrCallbackFailed) || !strings.Contains(err.Error(), "from WaitAll") {
		t.Fatalf("WaitAll: %v", err)
	}
	must(t, s.Synchronize())
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}
