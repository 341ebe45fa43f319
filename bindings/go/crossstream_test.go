package sluice

import (
	"testing"
	"time"
)

// The dependency engine, driven from Go: conflicting work on two streams is
// ordered on the device, with no host synchronisation between the calls. A
// host callback that sleeps makes the first stream slow, so that a missing
// wait would let the second stream run first and produce wrong bytes.

const slow = 30 * time.Millisecond

func slowCallback(t *testing.T, s *Stream) {
	t.Helper()
	must(t, s.HostCallback(func() error { time.Sleep(slow); return nil }, nil, nil))
}

func waits(t *testing.T, s *Stream) uint64 {
	t.Helper()
	st, err := s.Stats()
	must(t, err)
	return st.Waits
}

func TestCrossStreamReadAfterWrite(t *testing.T) {
	d := openDev(t)
	a, b := testStream(t, d), testStream(t, d)
	const n = 1 << 14
	pin := allocPinned(t, d, n)
	pb := pin.Bytes()
	x := alloc(t, b, n)

	// a writes the pinned buffer from a (slow) host callback ...
	must(t, a.HostCallback(func() error {
		time.Sleep(slow)
		copy(pb, pattern(n, 1))
		return nil
	}, nil, []Syncable{pin}))
	w0 := waits(t, b)
	// ... and b reads it with no host sync in between.
	must(t, Copy(b, x, 0, pin, 0, n))
	if got := waits(t, b) - w0; got != 1 {
		t.Fatalf("b waited %d times, want 1", got)
	}
	wantBytes(t, "RAW", readBack(t, b, x, n), pattern(n, 1))
}

func TestCrossStreamWriteAfterRead(t *testing.T) {
	d := openDev(t)
	a, b := testStream(t, d), testStream(t, d)
	const n = 1 << 14
	x := alloc(t, a, n)
	y := alloc(t, a, n)
	must(t, CopyFromHost(a, x, 0, pattern(n, 2)))
	must(t, a.Synchronize())

	slowCallback(t, a)
	must(t, Copy(a, y, 0, x, 0, n)) // a reads x, late
	w0 := waits(t, b)
	must(t, Memset(b, x, 0, 0xee, n)) // b overwrites x: must wait for a's read
	if got := waits(t, b) - w0; got != 1 {
		t.Fatalf("b waited %d times, want 1", got)
	}
	wantBytes(t, "WAR: a's copy", readBack(t, a, y, n), pattern(n, 2))
	wantBytes(t, "WAR: b's write", readBack(t, b, x, n), repeat(0xee, n))
}

func TestCrossStreamWriteAfterWrite(t *testing.T) {
	d := openDev(t)
	a, b := testStream(t, d), testStream(t, d)
	const n = 1 << 14
	x := alloc(t, a, n)
	slowCallback(t, a)
	must(t, Memset(a, x, 0, 1, n))
	w0 := waits(t, b)
	must(t, Memset(b, x, 0, 2, n))
	if got := waits(t, b) - w0; got != 1 {
		t.Fatalf("b waited %d times, want 1", got)
	}
	wantBytes(t, "WAW", readBack(t, b, x, n), repeat(2, n))
	wantBytes(t, "WAW, read on a", readBack(t, a, x, n), repeat(2, n))
}

// Several objects written by one stream cost one wait; a stream that already
// read after the writer waits no more.
func TestCrossStreamDedup(t *testing.T) {
	d := openDev(t)
	a, b, c := testStream(t, d), testStream(t, d), testStream(t, d)
	const n = 4096
	x1, x2, x3 := alloc(t, a, n), alloc(t, a, n), alloc(t, a, n)
	slowCallback(t, a)
	must(t, Memset(a, x1, 0, 1, n))
	must(t, Memset(a, x2, 0, 2, n))
	must(t, Memset(a, x3, 0, 3, n))

	w0 := waits(t, b)
	op, err := b.BeginOp([]Syncable{x1, x2, x3}, nil)
	must(t, err)
	must(t, op.End())
	if got := waits(t, b) - w0; got != 1 {
		t.Fatalf("reading 3 objects written by one stream: %d waits, want 1", got)
	}
	out := alloc(t, b, n)
	must(t, Copy(b, out, 0, x2, 0, n)) // b already read after x2's writer
	if got := waits(t, b) - w0; got != 1 {
		t.Fatalf("second read: %d waits, want 1", got)
	}

	wc := waits(t, c)
	op, err = c.BeginOp([]Syncable{x1, x3}, nil)
	must(t, err)
	must(t, op.End())
	if got := waits(t, c) - wc; got != 1 {
		t.Fatalf("third stream: %d waits, want 1", got)
	}
	// A write after readers on b and c (and its own writer): one wait per
	// other stream. (Nothing was synchronised from the host yet: the engine
	// skips waits on events a host wait already saw complete.)
	wa := waits(t, a)
	must(t, Memset(a, x1, 0, 9, n))
	if got := waits(t, a) - wa; got != 2 {
		t.Fatalf("write after readers on 2 other streams: %d waits, want 2", got)
	}
	wantBytes(t, "dedup read", readBack(t, b, out, n), repeat(2, n))
	wantBytes(t, "final", readBack(t, a, x1, n), repeat(9, n))
}

func TestSameStreamNoWaits(t *testing.T) {
	d := openDev(t)
	a := testStream(t, d)
	const n = 4096
	x, y := alloc(t, a, n), alloc(t, a, n)
	pin := allocPinned(t, d, n)
	w0 := waits(t, a)
	for i := 0; i < 20; i++ {
		must(t, Memset(a, x, 0, byte(i), n))
		must(t, Copy(a, y, 0, x, 0, n))
		must(t, Copy(a, pin, 0, y, 0, n))
		must(t, Copy(a, x, 0, pin, 0, n))
		op, err := a.BeginOp([]Syncable{x}, []Syncable{y})
		must(t, err)
		must(t, op.End())
		must(t, a.HostCallback(func() error { return nil }, []Syncable{pin}, []Syncable{x}))
	}
	if got := waits(t, a) - w0; got != 0 {
		t.Fatalf("same-stream work waited %d times", got)
	}
	wantBytes(t, "same stream", readBack(t, a, x, n), repeat(19, n))
}
