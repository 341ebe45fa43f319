// The prefetcher's data flow: the shared helpers of its tests, then batches in
// order from Push, Next, NextInto and All, from many goroutines.

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
