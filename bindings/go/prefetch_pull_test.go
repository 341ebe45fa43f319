// The prefetcher in pull mode: producer threads that run a Fill callback,
// its failures and panics, and Close while they run.

package sluice

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"weak"
)

var errFill = errors.New("fill failure")

// Pull mode: a Fill that fails at batch 5 and ends at batch 12. The consumer
// receives 0..4, an error for 5 (with Fill's error as its cause), 6..11,
// then ErrEndOfData.
func TestPrefetcherPullFailure(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	var calls atomic.Int64
	p := newPrefetcher(t, d, PrefetcherConfig{
		Depth:      3,
		Capacities: testCaps,
		Fill: func(f *Fill) error {
			calls.Add(1)
			switch {
			case f.Seq == 5:
				return fmt.Errorf("batch %d: %w", f.Seq, errFill)
			case f.Seq >= 12:
				return fmt.Errorf("done: %w", ErrEndOfInput)
			}
			if f.Segments() != 2 || len(f.Segment(0)) != testCaps[0] || len(f.Segment(1)) != testCaps[1] {
				return errors.New("wrong segments")
			}
			for i := range testCaps {
				f.SetLen(i, len(prefetchData(f.Segment(i), f.Seq, i)))
			}
			return nil
		},
	})
	dst := intoBuffers(t, s)
	for seq := uint64(0); seq < 12; seq++ {
		info, err := p.NextInto(s, dst, 5*time.Second)
		if seq != 5 {
			must(t, err)
			must(t, checkInto(s, dst, info, seq))
			continue
		}
		var be *BatchError
		if !errors.As(err, &be) || be.Seq != 5 {
			t.Fatalf("batch 5: want a *BatchError, got %v", err)
		}
		wantCode(t, err, ErrCallbackFailed)
		if !errors.Is(err, errFill) {
			t.Fatalf("the Fill error is not the cause: %v", err)
		}
	}
	_, err := p.Next(s, 5*time.Second)
	wantCode(t, err, ErrEndOfData)
	if c := calls.Load(); c != 13 {
		t.Fatalf("Fill called %d times, want 13", c)
	}
}

// Pull mode with several producer threads, a panicking Fill, and Next.
func TestPrefetcherPullThreads(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	host := backendOf(t, d) == BackendHost
	n := debugScaled(200, 30)
	p := newPrefetcher(t, d, PrefetcherConfig{
		Depth:           4,
		Capacities:      testCaps,
		ProducerThreads: 3,
		Fill: func(f *Fill) error {
			switch {
			case f.Seq >= n:
				return ErrEndOfInput
			case f.Seq == 7:
				panic("fill panics")
			}
			for i := range testCaps {
				f.SetLen(i, len(prefetchData(f.Segment(i), f.Seq, i)))
			}
			return nil
		},
	})
	var bad atomic.Int64
	for seq := uint64(0); seq < n; seq++ {
		b, err := p.Next(s, 5*time.Second)
		if seq == 7 {
			var pe *CallbackPanicError
			if !errors.As(err, &pe) || pe.Value != "fill panics" {
				t.Fatalf("batch 7: want a *CallbackPanicError, got %v", err)
			}
			continue
		}
		must(t, err)
		must(t, checkBatch(s, b, seq, host, &bad))
		must(t, b.Release())
	}
	_, err := p.Next(s, 5*time.Second)
	wantCode(t, err, ErrEndOfData)
	must(t, s.Synchronize())
	if bad.Load() != 0 {
		t.Fatalf("%d batches with a wrong checksum", bad.Load())
	}
}

// Close of a pull-mode prefetcher whose Fill is slow: the producers are
// joined, and the Fill function is released (its cgo.Handle deleted).
func TestPrefetcherPullClose(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	var wp weak.Pointer[payload]
	var running atomic.Int64
	p := func() *Prefetcher {
		state := &payload{}
		wp = weak.Make(state)
		p, err := NewPrefetcher(d, PrefetcherConfig{Depth: 2, Capacities: testCaps, ProducerThreads: 2, Fill: func(f *Fill) error {
			running.Add(1)
			defer running.Add(-1)
			state.data[f.Seq%1024]++
			time.Sleep(time.Millisecond)
			return nil
		}})
		must(t, err)
		return p
	}()
	for range 5 {
		b, err := p.Next(s, 5*time.Second)
		must(t, err)
		must(t, b.Release())
	}
	must(t, p.Close())
	if running.Load() != 0 {
		t.Fatal("a Fill call still runs after Close")
	}
	waitFor(t, "Fill function collected", func() bool { return wp.Value() == nil })
}
