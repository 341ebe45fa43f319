// The prefetcher's slots in push mode: back-pressure, Acquire, Submit and
// Cancel, the arguments it refuses, abandoned slots and empty segments.

package sluice

import (
	"errors"
	"math"
	"runtime"
	"testing"
	"time"
)

// With every slot full, Push and Acquire wait up to their timeout, then fail
// with ErrTimeout; a released batch frees a slot again.
func TestPrefetcherBackPressure(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const depth = 2
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: depth, Capacities: testCaps})
	must(t, pushN(p, 0, depth))

	seg := [][]byte{{1}, {2}}
	t0 := time.Now()
	_, err := p.Push(seg, 30*time.Millisecond)
	wantCode(t, err, ErrTimeout)
	if el := time.Since(t0); el < 25*time.Millisecond {
		t.Fatalf("Push gave up after %v", el)
	}
	_, err = p.Push(seg, 0)
	wantCode(t, err, ErrTimeout)
	_, err = p.Acquire(time.Millisecond)
	wantCode(t, err, ErrTimeout)

	// A leased batch still holds its slot; its release frees it, and wakes a
	// producer blocked in Push.
	b, err := p.Next(s, 0)
	must(t, err)
	_, err = p.Push(seg, 0)
	wantCode(t, err, ErrTimeout)
	pushing, pushed := make(chan struct{}), make(chan error, 1)
	go func() {
		close(pushing)
		_, err := p.Push(seg, WaitForever)
		pushed <- err
	}()
	<-pushing
	time.Sleep(30 * time.Millisecond)
	must(t, b.Release())
	must(t, b.Release()) // idempotent
	must(t, <-pushed)
	// (Timed-out waits are not counted; this one is.)
	st, err := p.Stats()
	must(t, err)
	if st.ProducerWait < 10*time.Millisecond {
		t.Fatalf("producer wait %v", st.ProducerWait)
	}

	// And a consumer waits up to its timeout for a batch.
	for range depth {
		b, err := p.Next(s, 0)
		must(t, err)
		must(t, b.Release())
	}
	t0 = time.Now()
	_, err = p.Next(s, 20*time.Millisecond)
	wantCode(t, err, ErrTimeout)
	if el := time.Since(t0); el < 15*time.Millisecond {
		t.Fatalf("Next gave up after %v", el)
	}
	_, err = p.NextInto(s, intoBuffers(t, s), 0)
	wantCode(t, err, ErrTimeout)
}

// Zero-length segments, pushed and filled in place.
func TestPrefetcherZeroLength(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: []int{16, 16}})
	dst := []*Buffer{alloc(t, s, 16), alloc(t, s, 16)}
	data := pattern(16, 9)

	_, err := p.Push([][]byte{nil, {}}, WaitForever)
	must(t, err)
	b, err := p.Next(s, time.Second)
	must(t, err)
	if b.Len(0) != 0 || b.Len(1) != 0 {
		t.Fatalf("lens %d %d", b.Len(0), b.Len(1))
	}
	must(t, b.Release())

	_, err = p.Push([][]byte{data[:0], data}, WaitForever)
	must(t, err)
	info, err := p.NextInto(s, dst, time.Second)
	must(t, err)
	if info.Seq != 1 || info.Lens[0] != 0 || info.Lens[1] != 16 {
		t.Fatalf("%+v", info)
	}
	wantBytes(t, "segment 1", readBack(t, s, dst[1], 16), data)

	// In place: a slot submitted with no SetLen has empty segments.
	sl, err := p.Acquire(time.Second)
	must(t, err)
	must(t, sl.Submit())
	b, err = p.Next(s, time.Second)
	must(t, err)
	if b.Seq != 2 || b.Len(0) != 0 || b.Len(1) != 0 {
		t.Fatalf("batch %d lens %d %d", b.Seq, b.Len(0), b.Len(1))
	}
	must(t, b.Release())
}

// Acquire, Submit and Cancel (zero-copy push), and the arguments Push and
// NewPrefetcher refuse.
func TestPrefetcherSlotsAndArguments(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	dst := intoBuffers(t, s)

	sl, err := p.Acquire(time.Second)
	must(t, err)
	if sl.Seq != 0 || sl.Segments() != 2 || len(sl.Segment(0)) != testCaps[0] || len(sl.Segment(1)) != testCaps[1] {
		t.Fatalf("slot %d: %d segments", sl.Seq, sl.Segments())
	}
	for i := range testCaps {
		sl.SetLen(i, len(prefetchData(sl.Segment(i), 0, i)))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("SetLen over the capacity did not panic")
			}
		}()
		sl.SetLen(0, testCaps[0]+1)
	}()
	must(t, sl.Submit())
	if sl.Segment(0) != nil {
		t.Fatal("Segment after Submit")
	}
	wantCode(t, sl.Submit(), ErrInvalidArgument)
	wantCode(t, sl.Cancel(), ErrInvalidArgument)

	c, err := p.Acquire(time.Second)
	must(t, err)
	must(t, c.Cancel()) // sequence number 1 is skipped
	must(t, pushN(p, 2, 1))

	info, err := p.NextInto(s, dst, time.Second)
	must(t, err)
	must(t, checkInto(s, dst, info, 0))
	info, err = p.NextInto(s, dst, time.Second)
	must(t, err)
	must(t, checkInto(s, dst, info, 2))

	_, err = p.Push([][]byte{make([]byte, testCaps[0]+1), nil}, 0)
	wantCode(t, err, ErrOutOfRange)
	_, err = p.Push([][]byte{nil}, 0)
	wantCode(t, err, ErrInvalidArgument)
	_, err = p.Push(make([][]byte, 9), 0)
	wantCode(t, err, ErrInvalidArgument)
	_, err = p.NextInto(s, dst[:1], 0)
	wantCode(t, err, ErrInvalidArgument)
	_, err = p.NextInto(s, []*Buffer{alloc(t, s, 8), dst[1]}, 0)
	wantCode(t, err, ErrOutOfRange)
	_, err = p.Next(nil, 0)
	wantCode(t, err, ErrNullArgument)

	for name, cfg := range map[string]PrefetcherConfig{
		"no segments":   {},
		"9 segments":    {Capacities: make([]int, 9)},
		"zero capacity": {Capacities: []int{8, 0}},
		"depth 65":      {Depth: 65, Capacities: []int{8}},
		"negative":      {Depth: -1, Capacities: []int{8}},
	} {
		_, err := NewPrefetcher(d, cfg)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err = NewPrefetcher(nil, PrefetcherConfig{Capacities: []int{8}})
	wantCode(t, err, ErrNullArgument)
}

// A Slot dropped without Submit or Cancel is cancelled by its cleanup, so
// the consumers do not wait at its sequence number forever.
func TestPrefetcherAbandonedSlot(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	func() {
		_, err := p.Acquire(time.Second)
		must(t, err)
	}()
	must(t, pushN(p, 1, 1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		b, err := p.Next(s, 10*time.Millisecond)
		if err == nil {
			if b.Seq != 1 {
				t.Fatalf("batch %d", b.Seq)
			}
			must(t, b.Release())
			break
		}
		wantCode(t, err, ErrTimeout)
		if time.Now().After(deadline) {
			t.Fatal("the abandoned slot was not cancelled")
		}
	}
}

// timeoutMs computes (d + 1ms - 1) / 1ms, which overflows for d within 1ms of
// math.MaxInt64: the timeout becomes 2217714955 ms (25.7 days), neither
// WaitForever nor the documented clamp SLUICE_WAIT_FOREVER-1.
func TestTimeoutMsNearTheLargestDuration(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 999_998} {
		got := uint32(timeoutMs(d))
		if want := uint32(math.MaxUint32 - 1); got != want {
			t.Errorf("timeoutMs(%d) = %d ms, want %d (the clamp)", int64(d), got, want)
		}
	}
}

// Slot.GatherRows does not check that the slot was submitted: after Submit
// (Segment returns nil by then) it still writes the slot's pinned memory,
// which by now belongs to the next Acquire of the same slot, and corrupts
// that batch.
func TestSlotGatherRowsAfterSubmitIsRefused(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n = 64
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 1, Capacities: []int{n}})
	dst := []*Buffer{alloc(t, s, n)}

	a, err := p.Acquire(time.Second)
	must(t, err)
	copy(a.Segment(0), pattern(n, 1))
	a.SetLen(0, n)
	must(t, a.Submit())
	if a.Segment(0) != nil {
		t.Fatal("Segment after Submit is not nil")
	}
	_, err = p.NextInto(s, dst, time.Second)
	must(t, err)
	must(t, s.Synchronize())

	// The same slot (depth 1), acquired for the next batch.
	b, err := p.Acquire(time.Second)
	must(t, err)
	want := pattern(n, 2)
	copy(b.Segment(0), want)
	b.SetLen(0, n)

	// The stale Slot a gathers into "its" segment.
	src := make([]byte, n) // zeros
	gerr := a.GatherRows(0, src, n, []int{0})

	must(t, b.Submit())
	_, err = p.NextInto(s, dst, time.Second)
	must(t, err)
	got := readBack(t, s, dst[0], n)
	if gerr == nil {
		t.Errorf("Slot.GatherRows after Submit returned nil (want an error such as ErrInvalidState)")
	}
	wantBytes(t, "batch of the next Acquire", got, want)
}
