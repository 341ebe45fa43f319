package sluice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"
)

// Segment capacities of the prefetchers of these tests: the lengths of
// prefetchData cover 0 to the capacity.
var testCaps = []int{512, 64}

// debugScaled returns n, or debugN in sluice_debug builds, whose every call
// runs a GC: a few batches suffice there to catch a missing KeepAlive.
func debugScaled(n, debugN uint64) uint64 {
	if debugGC {
		return debugN
	}
	return n
}

func newPrefetcher(t testing.TB, d *Device, cfg PrefetcherConfig) *Prefetcher {
	t.Helper()
	p, err := NewPrefetcher(d, cfg)
	return closeAtEnd(t, p, err)
}

// prefetchLen is the length of segment seg of batch seq (0 for some).
func prefetchLen(seq uint64, seg int) int {
	c := uint64(testCaps[seg])
	return int((seq*37 + uint64(seg)*11) % (c + 1))
}

// prefetchData writes the content of segment seg of batch seq into dst,
// prefetchLen bytes, and returns that part of dst.
func prefetchData(dst []byte, seq uint64, seg int) []byte {
	b := dst[:prefetchLen(seq, seg)]
	x := uint32(seq*2654435761) ^ uint32(seg+1)*40503 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func prefetchSum(seq uint64, seg int) uint32 {
	return crc32.ChecksumIEEE(prefetchData(make([]byte, testCaps[seg]), seq, seg))
}

// pushN pushes batches first..first+n-1 (content prefetchData), reusing its
// buffers (Push copies before returning), and checks the sequence numbers.
func pushN(p *Prefetcher, first, n uint64) error {
	bufs := [][]byte{make([]byte, testCaps[0]), make([]byte, testCaps[1])}
	segs := make([][]byte, 2)
	for seq := first; seq < first+n; seq++ {
		for i := range segs {
			segs[i] = prefetchData(bufs[i], seq, i)
		}
		got, err := p.Push(segs, WaitForever)
		if err != nil {
			return fmt.Errorf("push %d: %w", seq, err)
		}
		if got != seq {
			return fmt.Errorf("push %d got sequence number %d", seq, got)
		}
	}
	return nil
}

// intoBuffers allocates one device buffer per test segment, for NextInto.
func intoBuffers(t testing.TB, s *Stream) []*Buffer {
	return []*Buffer{alloc(t, s, testCaps[0]), alloc(t, s, testCaps[1])}
}

// checkInto reads back what NextInto copied into dst and compares it with
// batch seq.
func checkInto(s *Stream, dst []*Buffer, info BatchInfo, seq uint64) error {
	if info.Seq != seq {
		return fmt.Errorf("NextInto gave batch %d, want %d", info.Seq, seq)
	}
	for i := range dst {
		if info.Lens[i] != prefetchLen(seq, i) {
			return fmt.Errorf("batch %d segment %d: len %d, want %d", seq, i, info.Lens[i], prefetchLen(seq, i))
		}
		out := make([]byte, info.Lens[i])
		if err := CopyToHost(s, out, dst[i], 0); err != nil {
			return err
		}
		if crc32.ChecksumIEEE(out) != prefetchSum(seq, i) {
			return fmt.Errorf("batch %d segment %d: checksum differs", seq, i)
		}
	}
	return nil
}

// checkBatch checks a leased batch's number and lengths, and on the host
// backend enqueues on s a host callback (a stand-in kernel that reads the
// batch's device memory) that checks its content; failures are counted in bad.
func checkBatch(s *Stream, b *Batch, seq uint64, host bool, bad *atomic.Int64) error {
	if b.Seq != seq {
		return fmt.Errorf("Next gave batch %d, want %d", b.Seq, seq)
	}
	if b.Segments() != len(testCaps) {
		return fmt.Errorf("batch %d has %d segments", seq, b.Segments())
	}
	for i := range testCaps {
		if b.Len(i) != prefetchLen(seq, i) {
			return fmt.Errorf("batch %d segment %d: len %d, want %d", seq, i, b.Len(i), prefetchLen(seq, i))
		}
	}
	if !host {
		return nil
	}
	seg0, err := b.HostBytes(0)
	if err != nil {
		return err
	}
	seg1, err := b.HostBytes(1)
	if err != nil {
		return err
	}
	return s.HostCallback(func() error {
		if crc32.ChecksumIEEE(seg0) != prefetchSum(seq, 0) || crc32.ChecksumIEEE(seg1) != prefetchSum(seq, 1) {
			bad.Add(1)
		}
		return nil
	}, []Syncable{b.Sync(0), b.Sync(1)}, nil)
}

// Batches arrive in order with their content, at several depths, from Next
// (content checked on the device timeline by a host callback on the host
// backend) and NextInto alternately.
func TestPrefetcherOrder(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	host := backendOf(t, d) == BackendHost
	n := debugScaled(10000, 50)
	dst := intoBuffers(t, s)
	for _, depth := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("depth%d", depth), func(t *testing.T) {
			p := newPrefetcher(t, d, PrefetcherConfig{Depth: depth, Capacities: testCaps})
			produced := make(chan error, 1)
			go func() {
				err := pushN(p, 0, n)
				if err == nil {
					err = p.CloseInput()
				}
				produced <- err
			}()
			var bad atomic.Int64
			for seq := uint64(0); seq < n; seq++ {
				if seq%2 == 1 {
					info, err := p.NextInto(s, dst, WaitForever)
					must(t, err)
					must(t, checkInto(s, dst, info, seq))
					continue
				}
				b, err := p.Next(s, WaitForever)
				must(t, err)
				must(t, checkBatch(s, b, seq, host, &bad))
				must(t, b.Release())
			}
			_, err := p.Next(s, WaitForever)
			wantCode(t, err, ErrEndOfData)
			must(t, <-produced)
			must(t, s.Synchronize())
			if bad.Load() != 0 {
				t.Fatalf("%d batches with a wrong checksum", bad.Load())
			}
			st, err := p.Stats()
			must(t, err)
			var bytes uint64
			for seq := uint64(0); seq < n; seq++ {
				bytes += uint64(prefetchLen(seq, 0) + prefetchLen(seq, 1))
			}
			if st.Batches != n || st.Bytes != bytes || st.PinnedBytes != uint64(depth*(512+64)) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// Eight goroutines push at once: every batch arrives exactly once, and each
// goroutine's batches keep their order.
func TestPrefetcherConcurrentPush(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const goroutines = 8
	per := int(debugScaled(500, 10))
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 4, Capacities: []int{8}})
	seqs := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var data [8]byte
			for i := 0; i < per; i++ {
				binary.LittleEndian.PutUint32(data[0:], uint32(g))
				binary.LittleEndian.PutUint32(data[4:], uint32(i))
				seq, err := p.Push([][]byte{data[:]}, WaitForever)
				if err != nil {
					errs <- err
					return
				}
				seqs[g] = append(seqs[g], seq)
			}
		}()
	}
	go func() {
		wg.Wait()
		errs <- p.CloseInput()
	}()

	dst := []*Buffer{alloc(t, s, 8)}
	next := make([]int, goroutines)
	bySeq := map[uint64][2]uint32{}
	for seq := uint64(0); ; seq++ {
		info, err := p.NextInto(s, dst, WaitForever)
		if errors.Is(err, ErrEndOfData) {
			break
		}
		must(t, err)
		if info.Seq != seq || info.Lens[0] != 8 {
			t.Fatalf("batch %d: %+v", seq, info)
		}
		out := readBack(t, s, dst[0], 8)
		g, i := binary.LittleEndian.Uint32(out[0:]), binary.LittleEndian.Uint32(out[4:])
		if g >= goroutines || int(i) != next[g] {
			t.Fatalf("batch %d is (goroutine %d, push %d); want push %d of that goroutine", seq, g, i, next[min(g, goroutines-1)])
		}
		next[g]++
		bySeq[seq] = [2]uint32{g, i}
	}
	for g := 0; g < goroutines; g++ {
		if next[g] != per {
			t.Fatalf("goroutine %d: %d of %d batches received", g, next[g], per)
		}
	}
	must(t, <-errs) // CloseInput, after every push returned nil
	// The numbers Push returned name the batches received under them.
	for g, list := range seqs {
		for i, seq := range list {
			if bySeq[seq] != [2]uint32{uint32(g), uint32(i)} {
				t.Fatalf("Push %d of goroutine %d returned %d, which carried %v", i, g, seq, bySeq[seq])
			}
		}
	}
}

// A consumer whose every Next runs on a new goroutine, and whose Release runs
// on yet another: no thread affinity anywhere.
func TestPrefetcherConsumerHopsGoroutines(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	host := backendOf(t, d) == BackendHost
	n := debugScaled(300, 20)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 3, Capacities: testCaps})
	produced := make(chan error, 1)
	go func() { produced <- pushN(p, 0, n) }()

	var bad atomic.Int64
	leased := make(chan *Batch)
	released := make(chan error)
	go func() {
		for b := range leased {
			// Lock this goroutine to its thread now and then, so that the
			// releases surely run on other threads than the leases.
			if b.Seq%3 == 0 {
				runtime.LockOSThread()
			}
			released <- b.Release()
			if b.Seq%3 == 0 {
				runtime.UnlockOSThread()
			}
		}
	}()
	for seq := uint64(0); seq < n; seq++ {
		got := make(chan error)
		go func() {
			b, err := p.Next(s, 5*time.Second)
			if err == nil {
				err = checkBatch(s, b, seq, host, &bad)
			}
			if err == nil {
				leased <- b
				err = <-released
			}
			got <- err
		}()
		must(t, <-got)
	}
	close(leased)
	must(t, <-produced)
	must(t, s.Synchronize())
	if bad.Load() != 0 {
		t.Fatalf("%d batches with a wrong checksum", bad.Load())
	}
}

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

// All yields every batch in order and releases each after the loop body; a
// break releases the current batch; a producer's failure ends it with that
// error.
func TestPrefetcherAll(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	host := backendOf(t, d) == BackendHost
	n := debugScaled(100, 20)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	produced := make(chan error, 1)
	go func() {
		err := pushN(p, 0, n)
		if err == nil {
			err = p.CloseInput()
		}
		produced <- err
	}()
	var bad atomic.Int64
	var seq uint64
	var kept []*Batch
	for b, err := range p.All(s) {
		must(t, err)
		must(t, checkBatch(s, b, seq, host, &bad))
		kept = append(kept, b)
		seq++
	}
	must(t, <-produced)
	if seq != n {
		t.Fatalf("%d batches, want %d", seq, n)
	}
	for _, b := range kept {
		must(t, b.Release()) // already released by All: nil
	}
	must(t, s.Synchronize())
	if bad.Load() != 0 {
		t.Fatalf("%d batches with a wrong checksum", bad.Load())
	}

	// break: the batch in hand is released, so with depth 1 the producer can
	// go on.
	q := newPrefetcher(t, d, PrefetcherConfig{Depth: 1, Capacities: testCaps})
	must(t, pushN(q, 0, 1))
	for b, err := range q.All(s) {
		must(t, err)
		if b.Seq != 0 {
			t.Fatalf("batch %d", b.Seq)
		}
		break
	}
	must(t, pushN(q, 1, 1))
	must(t, q.CloseInput())
	var rest []uint64
	for b, err := range q.All(s) {
		must(t, err)
		rest = append(rest, b.Seq)
	}
	if len(rest) != 1 || rest[0] != 1 {
		t.Fatalf("after the break: %v", rest)
	}

	// A failed batch ends the iteration with its error.
	r := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps, Fill: func(f *Fill) error {
		if f.Seq == 3 {
			return errFill
		}
		return nil
	}})
	var got []uint64
	var last error
	for b, err := range r.All(s) {
		if err != nil {
			last = err
			continue // the iterator yields the error once and stops
		}
		got = append(got, b.Seq)
	}
	if len(got) != 3 || !errors.Is(last, errFill) {
		t.Fatalf("batches %v, error %v", got, last)
	}
	var be *BatchError
	if !errors.As(last, &be) || be.Seq != 3 {
		t.Fatalf("error %v", last)
	}
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

// The sync objects of a batch belong to the prefetcher: they order work on
// other streams after the batch's copy, their Close does nothing, and they
// are closed with the prefetcher.
func TestPrefetcherBatchSync(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	other := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	must(t, pushN(p, 0, 2))
	b, err := p.Next(s, time.Second)
	must(t, err)
	o := b.Sync(0)
	must(t, o.Close())
	info, err := o.Info()
	must(t, err)
	if !info.HasWriter {
		t.Fatalf("sync info %+v: the batch's copy is not its writer", info)
	}
	// A host callback (a stand-in kernel) on another stream that names the
	// segment's sync object runs after the batch's copy.
	if backendOf(t, d) == BackendHost {
		seg, err := b.HostBytes(0)
		must(t, err)
		var ok atomic.Bool
		must(t, other.HostCallback(func() error {
			ok.Store(crc32.ChecksumIEEE(seg) == prefetchSum(0, 0))
			return nil
		}, []Syncable{b.Sync(0)}, nil))
		must(t, other.Synchronize())
		if !ok.Load() {
			t.Fatal("the other stream read the segment before its copy")
		}
	} else {
		_, err := b.HostBytes(0)
		wantCode(t, err, ErrUnsupported)
	}
	must(t, b.Release())
	b2, err := p.Next(s, time.Second)
	must(t, err)
	if b2.Sync(0) == o {
		t.Fatal("two slots share a sync object")
	}
	must(t, b2.Release())
	must(t, p.Close())
	_, err = o.Info()
	wantClosed(t, err)
	wantClosed(t, o.WaitRead())
}

// Work on the consumer stream between Next and Release that names no sync
// object still runs after the batch's copy and before the slot's next copy
// (Batch.Sync's doc): at depth 2 the producer refills each slot two batches
// later, and a host callback that dawdles must still see its own batch.
func TestPrefetcherLeaseOrdersUnnamedWork(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendHost {
		t.Skip("reads the segments from host callbacks: host backend")
	}
	s := testStream(t, d)
	n := debugScaled(2000, 40)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	produced := make(chan error, 1)
	go func() { produced <- errors.Join(pushN(p, 0, n), p.CloseInput()) }()
	var bad atomic.Int64
	for seq := uint64(0); seq < n; seq++ {
		b, err := p.Next(s, WaitForever)
		must(t, err)
		seg0, err := b.HostBytes(0)
		must(t, err)
		seg1, err := b.HostBytes(1)
		must(t, err)
		must(t, s.HostCallback(func() error {
			if seq%16 == 0 {
				time.Sleep(200 * time.Microsecond)
			}
			if crc32.ChecksumIEEE(seg0) != prefetchSum(seq, 0) || crc32.ChecksumIEEE(seg1) != prefetchSum(seq, 1) {
				bad.Add(1)
			}
			return nil
		}, nil, nil))
		must(t, b.Release())
	}
	must(t, <-produced)
	must(t, s.Synchronize())
	if bad.Load() != 0 {
		t.Fatalf("%d of %d batches read with another batch's bytes", bad.Load(), n)
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
