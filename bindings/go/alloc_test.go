package sluice

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The per-op paths allocate nothing in steady state (issue 17): an Event
// recorded into with RecordInto, an Op begun with BeginOpInto (any set
// size), RunOp, WaitEvent, Copy, Memset, and Launch (on the cuda backend).
// testing.AllocsPerRun counts Go heap allocations of the whole process, so
// a regression anywhere on these paths fails here.
func TestPerOpPathsAllocateNothing(t *testing.T) {
	if raceEnabled || debugGC {
		t.Skip("allocation counts need a build without -race and sluice_debug")
	}
	d := openDev(t)
	s := testStream(t, d)
	other := testStream(t, d)
	x, y := alloc(t, s, 256), alloc(t, s, 256)

	zero := func(t *testing.T, what string, f func() error) {
		t.Helper()
		var err error
		n := testing.AllocsPerRun(500, func() {
			if e := f(); e != nil && err == nil {
				err = e
			}
		})
		must(t, err)
		if n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", what, n)
		}
		must(t, s.Synchronize())
		must(t, other.Synchronize())
	}

	var ev Event
	zero(t, "RecordInto + Close", func() error {
		if err := s.RecordInto(&ev, 0); err != nil {
			return err
		}
		return ev.Close()
	})
	zero(t, "RecordInto over an open recording + WaitEvent", func() error {
		if err := s.RecordInto(&ev, 0); err != nil {
			return err
		}
		return other.WaitEvent(&ev)
	})
	must(t, ev.Close())

	var op Op
	for _, k := range []int{0, 1, 4, 16, 17, 40} {
		reads, writes := syncObjects(t, k), []Syncable{y}
		zero(t, fmt.Sprintf("BeginOpInto + End, %d reads and 1 write", k), func() error {
			if err := s.BeginOpInto(&op, reads, writes); err != nil {
				return err
			}
			return op.End()
		})
		zero(t, fmt.Sprintf("RunOp, %d reads and 1 write", k), func() error {
			return s.RunOp(reads, writes, nil)
		})
	}
	zero(t, "Copy", func() error { return Copy(s, y, 0, x, 0, 256) })
	zero(t, "Memset", func() error { return Memset(s, y, 0, 7, 256) })

	if backendOf(t, d) == BackendCUDA {
		m, err := d.LoadModule([]byte(scalePTX))
		m = closeAtEnd(t, m, err)
		f, err := m.Function("scale_bias")
		f = closeAtEnd(t, f, err)
		cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 64}}
		reads, writes := []Syncable{x}, []Syncable{y}
		a, cnt := float32(1.5), uint32(64)
		zero(t, "Launch", func() error {
			// Non-constant values, boxed by the call: they must stay on
			// the stack (Launch's args do not escape).
			a += 1
			return f.Launch(s, cfg, reads, writes, y, x, a, float32(0.5), cnt)
		})
	}
	// On every backend: the argument values of a launch, on the stack up to
	// 16 and in a pooled buffer beyond.
	for _, k := range []int{5, 40} {
		args := make([]any, k)
		for i := range args {
			args[i] = []any{x, y, float32(1.5), uint32(1000), int64(-5)}[i%5]
		}
		zero(t, fmt.Sprintf("launch argument values, %d", k), func() error {
			var av argVals
			defer av.release()
			_, err := av.fill("test", args)
			return err
		})
	}
}

// RecordInto re-records a caller-owned Event: the zero Event reads as
// closed, a new recording replaces the old one, and the one cleanup of the
// Event destroys the last recording once the Event is unreachable.
func TestRecordInto(t *testing.T) {
	d := openDev(t)
	a := testStream(t, d)
	b := testStream(t, d)

	var ev Event
	_, err := ev.Query()
	wantClosed(t, err)
	must(t, ev.Close())
	wantCode(t, a.RecordInto(nil, 0), ErrNullArgument)

	var last uint64
	for i := 0; i < 5; i++ {
		must(t, a.RecordInto(&ev, 0))
		sid, seq, err := ev.Sequence()
		must(t, err)
		if sid != a.ID() || seq <= last || ev.Stream() != a {
			t.Fatalf("sequence (%d, %d) after %d on stream %d", sid, seq, last, a.ID())
		}
		last = seq
		must(t, b.WaitEvent(&ev))
		if i%2 == 0 {
			must(t, ev.Close())
			must(t, ev.Close())
			_, _, err = ev.Sequence()
			wantClosed(t, err)
		}
	}
	// Onto another stream, and into an Event that Record made (its open
	// recording is replaced).
	must(t, b.RecordInto(&ev, EventTiming))
	if ev.Stream() != b {
		t.Fatal("event stream after RecordInto on b")
	}
	must(t, ev.Synchronize())
	rec, err := a.Record(0)
	must(t, err)
	must(t, a.RecordInto(rec, 0))
	must(t, rec.Synchronize())
	must(t, rec.Close())
	must(t, ev.Close())

	// A closed stream: ev is left as it was.
	c, err := d.NewStream(0, 0)
	must(t, err)
	must(t, c.Close())
	must(t, a.RecordInto(&ev, 0))
	wantClosed(t, c.RecordInto(&ev, 0))
	if ev.Stream() != a {
		t.Fatal("a failed RecordInto changed the event")
	}
	must(t, ev.Close())

	// The cleanup of unreachable re-recorded Events destroys their last
	// recordings.
	base := settleHandles()
	func() {
		for i := 0; i < 20; i++ {
			ev := new(Event)
			for j := 0; j < 3; j++ {
				must(t, a.RecordInto(ev, 0))
			}
		}
	}()
	waitFor(t, "cleanups of re-recorded events", func() bool { return LiveHandles() <= base })
}

// BeginOpInto begins ops into a caller-owned Op, refuses an open one, and
// its cleanup ends an op left open.
func TestBeginOpInto(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	obj, err := NewSyncObject()
	obj = closeAtEnd(t, obj, err)

	var op Op
	wantClosed(t, op.End())
	must(t, op.Close())
	wantCode(t, s.BeginOpInto(nil, nil, nil), ErrNullArgument)
	for i := 0; i < 3; i++ {
		must(t, s.BeginOpInto(&op, nil, []Syncable{obj}))
		if op.Stream() != s {
			t.Fatal("op stream")
		}
		wantCode(t, s.BeginOpInto(&op, nil, []Syncable{obj}), ErrInvalidArgument)
		must(t, op.End())
		wantClosed(t, op.End())
		in, err := obj.Info()
		must(t, err)
		if !in.HasWriter {
			t.Fatal("no writer after the op")
		}
	}
	// Larger sets than the stack arrays hold (pooled buffers), with a nil
	// entry past them.
	big := syncObjects(t, 20)
	must(t, s.BeginOpInto(&op, big, []Syncable{obj}))
	must(t, op.End())
	bad := append(append([]Syncable{}, big...), nil)
	wantCode(t, s.BeginOpInto(&op, bad, nil), ErrNullArgument)
	if !op.h.isClosed() {
		t.Fatal("a failed BeginOpInto left the op open")
	}

	// An op left open in an unreachable Op is ended by the Op's cleanup.
	o2, err := NewSyncObject()
	o2 = closeAtEnd(t, o2, err)
	func() {
		op := new(Op)
		must(t, s.BeginOpInto(op, nil, []Syncable{obj}))
		must(t, op.End())
		must(t, s.BeginOpInto(op, nil, []Syncable{o2}))
	}()
	waitFor(t, "op cleanup", func() bool {
		in, err := o2.Info()
		must(t, err)
		return in.HasWriter
	})
}

// A launch argument of an unsupported type is refused with its type named;
// the values are written as the kernel reads them.
func TestLaunchArgTypes(t *testing.T) {
	var av argVals
	defer av.release()
	_, err := av.fill("test", []any{int32(1), 3})
	wantCode(t, err, ErrInvalidArgument)
	if want := "argument 1 has unsupported type int"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%q does not say %q", err, want)
	}
	_, err = av.fill("test", []any{nil})
	wantCode(t, err, ErrInvalidArgument)
	vals, err := av.fill("test", []any{int8(-1), uint16(7), float32(1.5), float64(-2), int64(-3), uintptr(9)})
	must(t, err)
	want := []uint64{0xff, 7, uint64(math.Float32bits(1.5)), math.Float64bits(-2), 0xfffffffffffffffd, 9}
	if !slices.Equal(vals, want) {
		t.Fatalf("values %#x, want %#x", vals, want)
	}
	// More arguments than the stack array holds; too many.
	for _, k := range []int{40, MaxLaunchArgs + 1} {
		many := make([]any, k)
		for i := range many {
			many[i] = uint64(i)
		}
		var big argVals
		vals, err := big.fill("test", many)
		if k > MaxLaunchArgs {
			wantCode(t, err, ErrInvalidArgument)
		} else {
			must(t, err)
			if len(vals) != k || vals[k-1] != uint64(k-1) {
				t.Fatalf("%d values, the last %d", len(vals), vals[len(vals)-1])
			}
		}
		big.release()
	}
}

func settleHandles() uint64 {
	var n uint64
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		n = LiveHandles()
	}
	return n
}
