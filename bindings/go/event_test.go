package sluice

import (
	"testing"
	"time"
)

func TestEvents(t *testing.T) {
	d := openDev(t)
	a := testStream(t, d)
	b := testStream(t, d)

	var last uint64
	for i := 0; i < 5; i++ {
		ev, err := a.Record(0)
		must(t, err)
		sid, seq, err := ev.Sequence()
		must(t, err)
		if sid != a.ID() || seq <= last {
			t.Fatalf("sequence (%d, %d) after %d on stream %d", sid, seq, last, a.ID())
		}
		last = seq
		if ev.Stream() != a {
			t.Fatal("event stream")
		}
		must(t, ev.Synchronize())
		done, err := ev.Query()
		must(t, err)
		if !done {
			t.Fatal("event not done after Synchronize")
		}
		must(t, ev.Close())
		must(t, ev.Close())
		_, _, err = ev.Sequence()
		wantClosed(t, err)
	}

	// Timing events.
	start, err := a.Record(EventTiming)
	must(t, err)
	defer start.Close()
	must(t, a.HostCallback(func() error { time.Sleep(20 * time.Millisecond); return nil }, nil, nil))
	end, err := a.Record(EventTiming)
	must(t, err)
	defer end.Close()
	must(t, end.Synchronize())
	el, err := ElapsedTime(start, end)
	must(t, err)
	if el < 15*time.Millisecond || el > 5*time.Second {
		t.Fatalf("elapsed %v", el)
	}
	plain, err := a.Record(0)
	must(t, err)
	defer plain.Close()
	must(t, plain.Synchronize())
	_, err = ElapsedTime(start, plain)
	wantCode(t, err, ErrInvalidArgument)

	// Cross-stream wait through an event: b's memset runs after a's callback.
	pin := allocPinned(t, d, 64)
	release := make(chan struct{})
	pb := pin.Bytes()
	must(t, a.HostCallback(func() error {
		<-release
		copy(pb, pattern(64, 9))
		return nil
	}, nil, nil))
	ev, err := a.Record(0)
	must(t, err)
	defer ev.Close()
	st0, err := b.Stats()
	must(t, err)
	must(t, b.WaitEvent(ev))
	st1, err := b.Stats()
	must(t, err)
	if st1.Waits != st0.Waits+1 {
		t.Fatalf("waits %d -> %d", st0.Waits, st1.Waits)
	}
	bb := alloc(t, b, 64)
	must(t, Copy(b, bb, 0, pin, 0, 64)) // pin's sync object knows no writer: only the event orders this
	done, err := ev.Query()
	must(t, err)
	if done {
		t.Fatal("event done while its work blocks")
	}
	close(release)
	wantBytes(t, "copy after WaitEvent", readBack(t, b, bb, 64), pattern(64, 9))

	// The event keeps working after its stream is closed.
	c, err := d.NewStream(0, 0)
	must(t, err)
	ev2, err := c.Record(0)
	must(t, err)
	must(t, c.Close())
	must(t, ev2.Synchronize())
	must(t, ev2.Close())
	wantClosed(t, b.WaitEvent(ev2))
}
