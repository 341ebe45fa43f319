// Ending a prefetcher: CloseInput drains what is in flight, and Close wakes
// the goroutines blocked in it.

package sluice

import (
	"testing"
	"time"
)

// Closing the input with fewer batches than slots drains them, then gives
// ErrEndOfData (again and again); a consumer already waiting wakes up.
func TestPrefetcherCloseInputEarly(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 8, Capacities: testCaps})
	must(t, pushN(p, 0, 3))
	must(t, p.CloseInput())
	must(t, p.CloseInput())
	_, err := p.Push([][]byte{{1}, {2}}, WaitForever)
	wantCode(t, err, ErrInvalidState)
	_, err = p.Acquire(WaitForever)
	wantCode(t, err, ErrInvalidState)
	for seq := uint64(0); seq < 3; seq++ {
		b, err := p.Next(s, time.Second)
		must(t, err)
		if b.Seq != seq {
			t.Fatalf("batch %d, want %d", b.Seq, seq)
		}
		must(t, b.Release())
	}
	for range 2 {
		_, err = p.Next(s, WaitForever)
		wantCode(t, err, ErrEndOfData)
		_, err = p.NextInto(s, intoBuffers(t, s), WaitForever)
		wantCode(t, err, ErrEndOfData)
	}

	// An empty prefetcher: a consumer blocked in Next gets ErrEndOfData when
	// the input closes.
	q := newPrefetcher(t, d, PrefetcherConfig{Depth: 4, Capacities: testCaps})
	got := make(chan error, 1)
	go func() {
		_, err := q.Next(s, WaitForever)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	must(t, q.CloseInput())
	select {
	case err := <-got:
		wantCode(t, err, ErrEndOfData)
	case <-time.After(5 * time.Second):
		t.Fatal("Next still blocked after CloseInput")
	}
}

// Close while one goroutine is blocked in Push and another in Next: both
// return ErrClosed promptly, and so does every later call.
func TestPrefetcherCloseWhileBlocked(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	p, err := NewPrefetcher(d, PrefetcherConfig{Depth: 1, Capacities: testCaps})
	must(t, err)
	must(t, pushN(p, 0, 1))
	held, err := p.Next(s, time.Second) // the only slot stays leased
	must(t, err)

	pushed, got := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := p.Push([][]byte{{1}, {2}}, WaitForever)
		pushed <- err
	}()
	go func() {
		_, err := p.Next(s, WaitForever)
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-pushed:
		t.Fatalf("Push returned before Close: %v", err)
	case err := <-got:
		t.Fatalf("Next returned before Close: %v", err)
	default:
	}
	must(t, p.Close())
	for name, ch := range map[string]chan error{"Push": pushed, "Next": got} {
		select {
		case err := <-ch:
			wantClosed(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still blocked after Close", name)
		}
	}
	wantClosed(t, held.Release())
	must(t, held.Release())
	must(t, p.Close())
	for name, call := range map[string]func() error{
		"Push":       func() error { _, err := p.Push([][]byte{{1}, {2}}, 0); return err },
		"Acquire":    func() error { _, err := p.Acquire(0); return err },
		"Next":       func() error { _, err := p.Next(s, 0); return err },
		"NextInto":   func() error { _, err := p.NextInto(s, intoBuffers(t, s), 0); return err },
		"CloseInput": p.CloseInput,
		"Stats":      func() error { _, err := p.Stats(); return err },
	} {
		t.Run(name, func(t *testing.T) { wantClosed(t, call()) })
	}
	for _, err := range p.All(s) {
		wantClosed(t, err)
	}
	must(t, s.Synchronize())
}

// Close with a Slot from Acquire still open waits for it, and the Slot's
// Submit ends that wait: it reaches the library after Close began, and
// returns ErrClosed.
func TestPrefetcherCloseWaitsForAnOpenSlot(t *testing.T) {
	d := openDev(t)
	p, err := NewPrefetcher(d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	must(t, err)
	slot, err := p.Acquire(time.Second)
	must(t, err)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned with a slot still open: %v", err)
	default:
	}
	copy(slot.Segment(0), []byte{1, 2, 3})
	slot.SetLen(0, 3)
	wantClosed(t, slot.Submit())
	select {
	case err := <-closed:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits for the slot after its Submit")
	}
	wantCode(t, slot.Cancel(), ErrInvalidHandle)
}
