package sluice

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"
)

// Host callbacks can be captured into graphs on the host backend only; on
// cuda HostCallback fails with ErrCaptureUnsupported during a capture.
func needCapturedCallbacks(t *testing.T, d *Device) {
	t.Helper()
	if b := backendOf(t, d); b != BackendHost {
		t.Skipf("host callbacks cannot be captured on the %v backend", b)
	}
}

func hostBytes(t testing.TB, b *Buffer) []byte {
	t.Helper()
	hb, err := b.HostBytes()
	must(t, err)
	return hb
}

// restoreGraphs re-enables graph caches (as the environment has them) when
// the test ends.
func restoreGraphs(t *testing.T) {
	t.Cleanup(func() { must(t, SetGraphsEnabled(os.Getenv("SLUICE_GRAPHS") != "0")) })
}

func captureGraph(t *testing.T, s *Stream, record func()) *Graph {
	t.Helper()
	must(t, s.BeginCapture(CaptureRelaxed))
	record()
	g, err := s.EndCapture()
	return closeAtEnd(t, g, err)
}

func instantiate(t *testing.T, g *Graph) *GraphExec {
	t.Helper()
	x, err := g.Instantiate()
	return closeAtEnd(t, x, err)
}

// A graph of a memset and a Go host callback, launched several times: the
// callback runs once per launch (never during the capture), on the host
// backend's device memory, and its cgo.Handle is released once, when the
// graph and its executable graph are both closed.
func TestGraphCapturedHostCallbacks(t *testing.T) {
	d := openDev(t)
	needCapturedCallbacks(t, d)
	s := testStream(t, d)
	other := testStream(t, d)
	buf := alloc(t, s, 64)
	hb := hostBytes(t, buf)
	must(t, Memset(s, buf, 0, 0, 64))
	must(t, s.Synchronize())

	baseHandles := liveCallbackHandles.Load()
	var runs atomic.Int32
	var wp weak.Pointer[payload]
	var g *Graph
	func() {
		p := &payload{}
		wp = weak.Make(p)
		must(t, s.BeginCapture(CaptureRelaxed))
		capturing, err := s.IsCapturing()
		must(t, err)
		if !capturing {
			t.Fatal("IsCapturing false during a capture")
		}
		// First half := 7, then the callback adds the first half to the second.
		must(t, Memset(s, buf, 0, 7, 32))
		must(t, s.HostCallback(func() error {
			for i := 0; i < 32; i++ {
				hb[32+i] += hb[i]
			}
			p.data[0]++
			runs.Add(1)
			return nil
		}, []Syncable{buf}, []Syncable{buf}))
		g, err = s.EndCapture()
		must(t, err)
	}()
	defer g.Close()
	capturing, err := s.IsCapturing()
	must(t, err)
	if capturing {
		t.Fatal("IsCapturing true after EndCapture")
	}
	n, err := g.NodeCount()
	must(t, err)
	if n != 2 {
		t.Fatalf("node count %d, want 2", n)
	}
	must(t, s.Synchronize())
	if runs.Load() != 0 || hb[0] != 0 {
		t.Fatal("captured work ran during the capture")
	}
	if got := liveCallbackHandles.Load(); got != baseHandles+1 {
		t.Fatalf("live callback handles %d, want %d", got, baseHandles+1)
	}

	x, err := g.Instantiate()
	must(t, err)
	must(t, x.Upload(s))
	const launches = 5
	for i := 0; i < launches; i++ {
		st := s
		if i%2 == 1 {
			st = other // any stream of the device; the engine orders the launches
		}
		must(t, x.Launch(st))
	}
	must(t, other.Synchronize())
	must(t, s.Synchronize())
	if got := runs.Load(); got != launches {
		t.Fatalf("captured callback ran %d times over %d launches", got, launches)
	}
	want := append(bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{7 * launches}, 32)...)
	wantBytes(t, "after the launches", readBack(t, s, buf, 64), want)

	// The handle lives while the graph or the executable graph does.
	must(t, g.Close())
	runtime.GC()
	if got := liveCallbackHandles.Load(); got != baseHandles+1 || wp.Value() == nil {
		t.Fatalf("callback released while its GraphExec lives (%d handles)", got)
	}
	must(t, x.Launch(s)) // still launchable
	must(t, s.Synchronize())
	if runs.Load() != launches+1 {
		t.Fatal("launch after Graph.Close did not run the callback")
	}
	must(t, x.Close())
	if got := liveCallbackHandles.Load(); got != baseHandles {
		t.Fatalf("live callback handles %d after closing graph and exec, want %d", got, baseHandles)
	}
	waitFor(t, "captured callback closure collected", func() bool {
		runtime.GC()
		return wp.Value() == nil
	})
}

// A captured callback that fails on every launch: each synchronisation of
// the capturing stream reports the failure with its Go cause, and many
// launches before a synchronisation keep one failure record, not one each.
func TestGraphCapturedCallbackFailures(t *testing.T) {
	d := openDev(t)
	needCapturedCallbacks(t, d)
	s := testStream(t, d)
	var runs atomic.Int32
	g := captureGraph(t, s, func() {
		must(t, s.HostCallback(func() error {
			if runs.Add(1)%2 == 0 {
				panic("even launch")
			}
			return errUser
		}, nil, nil))
	})
	x := instantiate(t, g)

	records := func() int {
		callbackFailures.Lock()
		defer callbackFailures.Unlock()
		return len(callbackFailures.byTok)
	}
	for round := 0; round < 3; round++ {
		before := records()
		for i := 0; i < 10; i++ {
			must(t, x.Launch(s))
		}
		err := s.Synchronize()
		wantCode(t, err, ErrCallbackFailed)
		// The first failure since the last synchronisation is the one reported:
		// an odd launch, which returned errUser.
		if !errors.Is(err, errUser) {
			t.Fatalf("round %d: cause lost: %v", round, err)
		}
		if got := records(); got > before+1 && got < maxCallbackFailures {
			t.Fatalf("round %d: %d failure records for one callback", round, got-before)
		}
		must(t, s.Synchronize()) // reported once
	}
	if runs.Load() != 30 {
		t.Fatalf("%d runs over 30 launches", runs.Load())
	}
	// A panic is reported with its value when it is the first failure.
	runs.Store(1)
	must(t, x.Launch(s))
	err := s.Synchronize()
	var pe *CallbackPanicError
	if !errors.As(err, &pe) || pe.Value != "even launch" {
		t.Fatalf("panic in a captured callback: %v", err)
	}
}

// Fork and join: a second stream joins the capture by waiting on an event of
// the origin, and is joined back the same way. No host callbacks: this runs
// on every backend.
func TestGraphForkJoin(t *testing.T) {
	d := openDev(t)
	s1 := testStream(t, d)
	s2 := testStream(t, d)
	a := alloc(t, s1, 256)
	b := alloc(t, s1, 256)
	c := alloc(t, s1, 256)
	must(t, s1.Synchronize())

	g := captureGraph(t, s1, func() {
		must(t, Memset(s1, a, 0, 0x11, 256))
		fork, err := s1.Record(0)
		must(t, err)
		defer fork.Close()
		must(t, s2.WaitEvent(fork))
		capturing, err := s2.IsCapturing()
		must(t, err)
		if !capturing {
			t.Fatal("the forked stream is not capturing")
		}
		must(t, Memset(s2, b, 0, 0x22, 256))
		must(t, Copy(s2, b, 0, a, 0, 16)) // reads a, written before the fork
		join, err := s2.Record(0)
		must(t, err)
		defer join.Close()
		must(t, s1.WaitEvent(join))
		must(t, Copy(s1, c, 0, b, 0, 256)) // after the join
	})
	for _, st := range []*Stream{s1, s2} {
		capturing, err := st.IsCapturing()
		must(t, err)
		if capturing {
			t.Fatal("a stream is still capturing after EndCapture")
		}
		if st.capture.Load() != nil {
			t.Fatal("Go capture state left on a stream")
		}
	}
	x := instantiate(t, g)
	for i := 0; i < 3; i++ {
		must(t, Memset(s1, c, 0, 0, 256))
		must(t, x.Launch(s2))
		want := append(bytes.Repeat([]byte{0x11}, 16), bytes.Repeat([]byte{0x22}, 240)...)
		wantBytes(t, "joined copy", readBack(t, s1, c, 256), want)
	}
}

func TestGraphUnjoinedFork(t *testing.T) {
	d := openDev(t)
	s1 := testStream(t, d)
	s2 := testStream(t, d)
	a := alloc(t, s1, 64)
	must(t, s1.Synchronize())
	must(t, s1.BeginCapture(CaptureRelaxed))
	ev, err := s1.Record(0)
	must(t, err)
	defer ev.Close()
	must(t, s2.WaitEvent(ev))
	must(t, Memset(s2, a, 0, 1, 64))
	// Ending on the fork is refused; the capture goes on.
	_, err = s2.EndCapture()
	wantCode(t, err, ErrInvalidState)
	_, err = s1.EndCapture()
	wantCode(t, err, ErrCaptureFailed)
	for _, st := range []*Stream{s1, s2} {
		capturing, err := st.IsCapturing()
		must(t, err)
		if capturing || st.capture.Load() != nil {
			t.Fatal("a stream is still capturing after a failed EndCapture")
		}
		must(t, st.Synchronize())
	}
	// Rolled back: the streams and the buffer work as before.
	must(t, CopyFromHost(s2, a, 0, pattern(64, 3)))
	wantBytes(t, "after the failed capture", readBack(t, s1, a, 64), pattern(64, 3))
	_, err = s1.EndCapture()
	wantCode(t, err, ErrInvalidState) // not capturing
}

// An op that a capture rejects fails with ErrCaptureUnsupported, and the
// capture then ends with ErrCaptureFailed.
func TestGraphRejectedOps(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	a := alloc(t, s, 64)
	must(t, s.Synchronize())
	for name, op := range map[string]func() error{
		"Synchronize":      s.Synchronize,
		"Query":            func() error { _, err := s.Query(); return err },
		"Alloc":            func() error { _, err := s.Alloc(16); return err },
		"CopyFromHost":     func() error { return CopyFromHost(s, a, 0, []byte{1}) },
		"CopyToHost":       func() error { return CopyToHost(s, make([]byte, 1), a, 0) },
		"Buffer.WaitRead":  a.WaitRead,
		"Buffer.WaitWrite": a.WaitWrite,
	} {
		t.Run(name, func(t *testing.T) {
			must(t, s.BeginCapture(CaptureRelaxed))
			must(t, Memset(s, a, 0, 1, 64))
			opErr := op()
			_, err := s.EndCapture()
			wantCode(t, opErr, ErrCaptureUnsupported)
			wantCode(t, err, ErrCaptureFailed)
			capturing, err := s.IsCapturing()
			must(t, err)
			if capturing {
				t.Fatal("still capturing")
			}
			must(t, s.Synchronize())
		})
	}
	// Host waits on an event recorded in the capture are rejected too. (The
	// library does not abort the capture for them, although sluice.h says a
	// rejected op does, so EndCapture's result is not checked here.)
	must(t, s.BeginCapture(CaptureRelaxed))
	must(t, Memset(s, a, 0, 1, 64))
	ev, err := s.Record(0)
	must(t, err)
	defer ev.Close()
	_, qerr := ev.Query()
	serr := ev.Synchronize()
	if g, err := s.EndCapture(); err == nil {
		must(t, g.Close())
	}
	wantCode(t, qerr, ErrCaptureUnsupported)
	wantCode(t, serr, ErrCaptureUnsupported)

	// A second BeginCapture on a capturing stream is refused.
	must(t, s.BeginCapture(CaptureRelaxed))
	wantCode(t, s.BeginCapture(CaptureRelaxed), ErrInvalidState)
	g, err := s.EndCapture()
	must(t, err)
	must(t, g.Close())
	wantCode(t, s.BeginCapture(CaptureMode(99)), ErrInvalidArgument)
	modes := []CaptureMode{CaptureRelaxed, CaptureThreadLocal}
	if backendOf(t, d) == BackendHost {
		// On cuda, a runtime cleanup on another thread (a cuMemFreeAsync,
		// a cuStreamDestroy) could invalidate a global-mode capture.
		modes = append(modes, CaptureGlobal)
	}
	for _, m := range modes {
		runtime.LockOSThread() // thread-local mode ties the capture to the thread
		must(t, s.BeginCapture(m))
		must(t, Memset(s, a, 0, 1, 64))
		g, err := s.EndCapture()
		runtime.UnlockOSThread()
		must(t, err)
		must(t, g.Close())
	}
}

func TestGraphUpdate(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	a := alloc(t, s, 128)
	must(t, s.Synchronize())
	memsets := func(vals ...byte) func() {
		return func() {
			for i, v := range vals {
				must(t, Memset(s, a, 32*i, v, 32))
			}
		}
	}
	g1 := captureGraph(t, s, memsets(1, 2))
	g2 := captureGraph(t, s, memsets(3, 4))
	g3 := captureGraph(t, s, memsets(5, 6, 7))
	x := instantiate(t, g1)
	must(t, Memset(s, a, 0, 0, 128))
	must(t, x.Launch(s))
	wantBytes(t, "g1", readBack(t, s, a, 64), append(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)...))

	res, err := x.Update(g2)
	must(t, err)
	if !res.InPlace || res.Reinstantiated || res.Reason != "" {
		t.Fatalf("same topology: %+v", res)
	}
	must(t, x.Launch(s))
	wantBytes(t, "g2", readBack(t, s, a, 64), append(bytes.Repeat([]byte{3}, 32), bytes.Repeat([]byte{4}, 32)...))

	res, err = x.Update(g3)
	must(t, err)
	if res.InPlace || !res.Reinstantiated || res.Reason == "" {
		t.Fatalf("changed topology: %+v", res)
	}
	t.Logf("re-instantiated: %s", res.Reason)
	must(t, x.Launch(s))
	want := append(append(bytes.Repeat([]byte{5}, 32), bytes.Repeat([]byte{6}, 32)...), bytes.Repeat([]byte{7}, 32)...)
	wantBytes(t, "g3", readBack(t, s, a, 96), want)
}

func TestGraphDebugDot(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	a := alloc(t, s, 64)
	must(t, s.Synchronize())
	g := captureGraph(t, s, func() { must(t, Memset(s, a, 0, 1, 64)) })
	dir := t.TempDir()
	for _, verbose := range []bool{false, true} {
		p := filepath.Join(dir, "g.dot")
		must(t, g.DebugDot(p, verbose))
		b, err := os.ReadFile(p)
		must(t, err)
		if !strings.HasPrefix(string(b), "digraph") {
			t.Fatalf("DOT file starts with %q", b[:min(len(b), 20)])
		}
	}
	if backendOf(t, d) == BackendHost {
		err := g.DebugDot(filepath.Join(dir, "no", "such", "dir", "g.dot"), false)
		if err == nil {
			t.Fatal("DebugDot into a missing directory succeeded")
		}
	}
}

// The graph cache: eager once, captured once, then replayed, with the Go body
// called exactly twice, on a view of the stream.
func TestGraphCache(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	restoreGraphs(t)
	must(t, SetGraphsEnabled(true))
	a := alloc(t, s, 256)
	b := alloc(t, s, 256)
	must(t, s.Synchronize())
	c, err := NewGraphCache(d)
	must(t, err)
	defer c.Close()
	if c.Device() != d {
		t.Fatal("cache device")
	}

	var calls int
	body := func(v *Stream) error {
		calls++
		if !v.IsView() || v == s || v.ID() != s.ID() || v.Device() != d {
			t.Error("the body did not get a view of the stream")
		}
		must(t, v.Close()) // a view's Close does nothing
		if err := Memset(v, a, 0, 0x5a, 256); err != nil {
			return err
		}
		return Copy(v, b, 0, a, 0, 128)
	}
	const runs = 7
	for i := 0; i < runs; i++ {
		must(t, Memset(s, b, 0, 0, 256))
		must(t, c.Run(42, s, body))
		want := append(bytes.Repeat([]byte{0x5a}, 128), make([]byte, 128)...)
		wantBytes(t, "cache run", readBack(t, s, b, 256), want)
	}
	if calls != 2 {
		t.Fatalf("body ran %d times over %d runs, want 2", calls, runs)
	}
	st, err := c.Stats()
	must(t, err)
	if st != (GraphCacheStats{Eager: 1, Captured: 1, Replayed: runs - 2, Entries: 1}) {
		t.Fatalf("stats %+v", st)
	}
	// The stream (not the view) is still open and usable.
	must(t, s.Synchronize())
	// Another key starts over.
	calls = 0
	must(t, c.Run(7, s, body))
	st, err = c.Stats()
	must(t, err)
	if calls != 1 || st.Eager != 2 || st.Entries != 2 {
		t.Fatalf("second key: %d calls, stats %+v", calls, st)
	}

	wantCode(t, c.Run(1, s, nil), ErrNullArgument)
}

// A Go body calling back into sluice runs inside the library call; its
// errors and panics become Run's error, and a rejected op in the captured
// run fails that run.
func TestGraphCacheBodyErrors(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	restoreGraphs(t)
	must(t, SetGraphsEnabled(true))
	a := alloc(t, s, 64)
	c, err := NewGraphCache(d)
	must(t, err)
	defer c.Close()

	err = c.Run(1, s, func(*Stream) error { return errUser })
	if !errors.Is(err, ErrCallbackFailed) || !errors.Is(err, errUser) || !strings.Contains(err.Error(), "user failure") {
		t.Fatalf("body error: %v", err)
	}
	err = c.Run(2, s, func(*Stream) error { panic("body boom") })
	var pe *CallbackPanicError
	if !errors.Is(err, ErrCallbackFailed) || !errors.As(err, &pe) || pe.Value != "body boom" {
		t.Fatalf("body panic: %v", err)
	}

	// Eager run fine; the captured run synchronises, which a capture rejects.
	sync := func(v *Stream) error {
		if err := Memset(v, a, 0, 1, 64); err != nil {
			return err
		}
		return v.Synchronize()
	}
	must(t, c.Run(3, s, sync))
	err = c.Run(3, s, sync)
	if !errors.Is(err, ErrCallbackFailed) || !errors.Is(err, ErrCaptureUnsupported) {
		t.Fatalf("rejected op in the captured body: %v", err)
	}
	capturing, err := s.IsCapturing()
	must(t, err)
	if capturing || s.capture.Load() != nil {
		t.Fatal("the stream is still capturing after a failed cached run")
	}
	must(t, s.Synchronize())
	st, err := c.Stats()
	must(t, err)
	if st.Captured != 0 || st.Replayed != 0 {
		t.Fatalf("stats after failures %+v", st)
	}
}

// With graphs disabled every run is eager and calls the body.
func TestGraphCacheDisabled(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	restoreGraphs(t)
	must(t, SetGraphsEnabled(false))
	a := alloc(t, s, 64)
	c, err := NewGraphCache(d)
	must(t, err)
	defer c.Close()
	calls := 0
	for i := 0; i < 5; i++ {
		must(t, c.Run(1, s, func(v *Stream) error {
			calls++
			capturing, err := v.IsCapturing()
			if err != nil || capturing {
				t.Errorf("capturing %v, %v with graphs disabled", capturing, err)
			}
			return Memset(v, a, 0, byte(i), 64)
		}))
		wantBytes(t, "eager run", readBack(t, s, a, 64), bytes.Repeat([]byte{byte(i)}, 64))
	}
	st, err := c.Stats()
	must(t, err)
	if calls != 5 || st.Eager != 5 || st.Captured != 0 || st.Replayed != 0 {
		t.Fatalf("%d calls, stats %+v", calls, st)
	}
}

// Host callbacks inside a cached body: captured into the cache's graph, they
// run on every run, and are released when the cache is closed.
func TestGraphCacheHostCallbacks(t *testing.T) {
	d := openDev(t)
	needCapturedCallbacks(t, d)
	s := testStream(t, d)
	restoreGraphs(t)
	must(t, SetGraphsEnabled(true))
	a := alloc(t, s, 64)
	ha := hostBytes(t, a)
	must(t, Memset(s, a, 0, 0, 64))
	base := liveCallbackHandles.Load()
	c, err := NewGraphCache(d)
	must(t, err)
	var runs atomic.Int32
	const n = 6
	for i := 0; i < n; i++ {
		must(t, c.Run(9, s, func(v *Stream) error {
			return v.HostCallback(func() error {
				ha[0]++
				runs.Add(1)
				return nil
			}, nil, []Syncable{a})
		}))
	}
	must(t, s.Synchronize())
	if runs.Load() != n || ha[0] != n {
		t.Fatalf("callback ran %d times over %d runs (byte %d)", runs.Load(), n, ha[0])
	}
	if got := liveCallbackHandles.Load(); got != base+1 {
		t.Fatalf("live callback handles %d, want %d (the captured one)", got, base+1)
	}
	must(t, c.Close())
	if got := liveCallbackHandles.Load(); got != base {
		t.Fatalf("live callback handles %d after closing the cache, want %d", got, base)
	}
}

// A graph keeps the Go wrappers of the buffers its ops use reachable, so a
// runtime cleanup cannot free memory that a launch still writes.
func TestGraphKeepsBuffersReachable(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	out := alloc(t, s, 64)
	must(t, s.Synchronize())
	var wb weak.Pointer[Buffer]
	var g *Graph
	func() {
		tmp, err := s.Alloc(64)
		must(t, err)
		wb = weak.Make(tmp)
		must(t, s.Synchronize())
		g = captureGraph(t, s, func() {
			must(t, Memset(s, tmp, 0, 0x77, 64))
			must(t, Copy(s, out, 0, tmp, 0, 64))
		})
	}()
	x := instantiate(t, g)
	must(t, g.Close())
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if wb.Value() == nil {
		t.Fatal("a buffer used by a live GraphExec was collected")
	}
	must(t, x.Launch(s))
	wantBytes(t, "through a kept buffer", readBack(t, s, out, 64), bytes.Repeat([]byte{0x77}, 64))
	must(t, x.Close())
	waitFor(t, "buffer collected after the graph is gone", func() bool {
		runtime.GC()
		return wb.Value() == nil
	})
}

// The library releases a host callback's handle also when the call fails.
func TestHostCallbackReleasedOnFailure(t *testing.T) {
	d := openDev(t)
	base := liveCallbackHandles.Load()
	forged := &Stream{dev: d}
	forged.h.bits.Store(0x1234_5678_9abc)
	var wp weak.Pointer[payload]
	func() {
		p := &payload{}
		wp = weak.Make(p)
		err := forged.HostCallback(func() error { p.data[0] = 1; return nil }, nil, nil)
		wantCode(t, err, ErrInvalidHandle)
	}()
	if got := liveCallbackHandles.Load(); got != base {
		t.Fatalf("live callback handles %d after a failed call, want %d", got, base)
	}
	waitFor(t, "closure of a failed call collected", func() bool {
		runtime.GC()
		return wp.Value() == nil
	})
}

func TestSetBlockCacheLimit(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	must(t, s.SetBlockCacheLimit(0))
	for i := 0; i < 3; i++ {
		b, err := s.Alloc(4096)
		must(t, err)
		must(t, b.Close())
	}
	must(t, s.SetBlockCacheLimit(1<<20))
	for i := 0; i < 3; i++ {
		b, err := s.Alloc(4096)
		must(t, err)
		must(t, CopyFromHost(s, b, 0, pattern(4096, byte(i))))
		wantBytes(t, "reused block", readBack(t, s, b, 4096), pattern(4096, byte(i)))
		must(t, b.Close())
	}
	must(t, s.Synchronize())
}

func TestGraphUseAfterClose(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	a := alloc(t, s, 64)
	must(t, s.Synchronize())
	g := captureGraph(t, s, func() { must(t, Memset(s, a, 0, 1, 64)) })
	g2 := captureGraph(t, s, func() { must(t, Memset(s, a, 0, 2, 64)) })
	x, err := g.Instantiate()
	must(t, err)
	c, err := NewGraphCache(d)
	must(t, err)

	must(t, g.Close())
	must(t, g.Close())
	must(t, x.Close())
	must(t, x.Close())
	must(t, c.Close())
	must(t, c.Close())
	cs, err := d.NewStream(0, 0)
	must(t, err)
	must(t, cs.Close())
	live := instantiate(t, g2)
	for name, call := range map[string]func() error{
		"Graph.NodeCount":          func() error { _, err := g.NodeCount(); return err },
		"Graph.DebugDot":           func() error { return g.DebugDot(filepath.Join(t.TempDir(), "x.dot"), false) },
		"Graph.Instantiate":        func() error { _, err := g.Instantiate(); return err },
		"GraphExec.Upload":         func() error { return x.Upload(s) },
		"GraphExec.Launch":         func() error { return x.Launch(s) },
		"GraphExec.Update":         func() error { _, err := x.Update(g2); return err },
		"GraphExec.Update(graph)":  func() error { _, err := live.Update(g); return err },
		"GraphExec.Launch(stream)": func() error { return live.Launch(cs) },
		"GraphExec.Upload(stream)": func() error { return live.Upload(cs) },
		"GraphCache.Run":           func() error { return c.Run(1, s, func(*Stream) error { return nil }) },
		"GraphCache.Run(stream)":   func() error { return c.Run(1, cs, func(*Stream) error { return nil }) },
		"GraphCache.Stats":         func() error { _, err := c.Stats(); return err },
		"Stream.BeginCapture":      func() error { return cs.BeginCapture(CaptureRelaxed) },
		"Stream.EndCapture":        func() error { _, err := cs.EndCapture(); return err },
		"Stream.IsCapturing":       func() error { _, err := cs.IsCapturing(); return err },
		"Stream.SetBlockCache":     func() error { return cs.SetBlockCacheLimit(0) },
	} {
		t.Run(name, func(t *testing.T) { wantClosed(t, call()) })
	}
	dc, err := OpenDefaultDevice()
	must(t, err)
	must(t, dc.Close())
	_, err = NewGraphCache(dc)
	wantClosed(t, err)

	// A view shares its stream's handle: closing the stream closes the view.
	s2, err := d.NewStream(0, 0)
	must(t, err)
	c2, err := NewGraphCache(d)
	must(t, err)
	defer c2.Close()
	var kept *Stream
	must(t, c2.Run(1, s2, func(v *Stream) error { kept = v; return nil }))
	must(t, kept.Synchronize())
	must(t, s2.Close())
	wantClosed(t, kept.Synchronize())
}

// Launches from many goroutines race with Close of the graph and the
// executable graph: every call either works or reports ErrClosed, and a
// captured callback is released exactly once, after its last run.
func TestGraphCloseRacesWithLaunch(t *testing.T) {
	d := openDev(t)
	host := backendOf(t, d) == BackendHost
	s := testStream(t, d)
	a := alloc(t, s, 64)
	must(t, s.Synchronize())
	base := liveCallbackHandles.Load()
	for round := 0; round < 10; round++ {
		var runs atomic.Int32
		must(t, s.BeginCapture(CaptureRelaxed))
		must(t, Memset(s, a, 0, byte(round), 64))
		if host {
			must(t, s.HostCallback(func() error { runs.Add(1); return nil }, []Syncable{a}, nil))
		}
		g, err := s.EndCapture()
		must(t, err)
		x, err := g.Instantiate()
		must(t, err)
		done := make(chan error, 8)
		for i := 0; i < 8; i++ {
			go func() {
				st, err := d.NewStream(0, 0)
				if err != nil {
					done <- err
					return
				}
				defer st.Close()
				for j := 0; j < 20; j++ {
					if err := x.Launch(st); err != nil && !errors.Is(err, ErrClosed) {
						done <- err
						return
					}
					runtime.Gosched()
				}
				done <- st.Synchronize()
			}()
		}
		runtime.Gosched()
		must(t, g.Close())
		must(t, x.Close())
		for i := 0; i < 8; i++ {
			must(t, <-done)
		}
		must(t, d.WaitAll())
		if got := liveCallbackHandles.Load(); got != base {
			t.Fatalf("round %d: %d live callback handles, want %d (after %d runs)", round, got, base, runs.Load())
		}
	}
}

func TestGraphCacheEvictsLeastRecentlyUsed(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	restoreGraphs(t)
	must(t, SetGraphsEnabled(true))
	c, err := NewGraphCache(d)
	must(t, err)
	defer c.Close()
	must(t, c.SetMaxEntries(2))
	if err := c.SetMaxEntries(-1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetMaxEntries(-1) = %v, want ErrInvalidArgument", err)
	}
	before, err := d.Counters()
	must(t, err)
	for _, key := range []uint64{1, 2, 3} {
		must(t, c.Run(key, s, func(*Stream) error { return nil }))
	}
	st, err := c.Stats()
	must(t, err)
	if st.Entries != 2 {
		t.Fatalf("entries = %d after 3 keys with max 2", st.Entries)
	}
	after, err := d.Counters()
	must(t, err)
	if after.GraphCacheEvictions-before.GraphCacheEvictions != 1 {
		t.Fatalf("evictions counted %d, want 1", after.GraphCacheEvictions-before.GraphCacheEvictions)
	}
}

// A GraphCache keeps, per key, the Go wrappers a captured graph uses
// (c.keep[key]) until the cache is closed. When SetMaxEntries evicts a key,
// the library destroys its graph, but the Go side keeps the key's entry: the
// wrappers (and, for buffers left to the GC, their device memory) of every
// evicted graph stay reachable, and c.keep grows with every distinct key.
func TestGraphCacheDropsTheWrappersOfEvictedKeys(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	c, err := NewGraphCache(d)
	c = closeAtEnd(t, c, err)
	must(t, c.SetMaxEntries(1))

	const keys = 8
	var collected atomic.Int32
	for k := range keys {
		func() {
			b, err := s.Alloc(64)
			must(t, err)
			runtime.AddCleanup(b, func(struct{}) { collected.Add(1) }, struct{}{})
			for range 3 { // eager, captured, replayed
				must(t, c.Run(uint64(k), s, func(v *Stream) error { return Memset(v, b, 0, byte(k), 64) }))
			}
			// b is left to the GC (no Close).
		}()
	}
	must(t, s.Synchronize())
	st, err := c.Stats()
	must(t, err)
	for range 20 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	kept := len(c.keep)
	c.mu.Unlock()
	t.Logf("library entries %d, captured %d; Go keep entries %d; buffers collected %d of %d",
		st.Entries, st.Captured, kept, collected.Load(), keys)
	if kept != int(st.Entries) {
		t.Errorf("Go keeps wrappers for %d keys, the library holds %d entries", kept, st.Entries)
	}
	if got := collected.Load(); got < keys-1 {
		t.Errorf("only %d of the %d buffers of evicted graphs were collected", got, keys-1)
	}
	// Control: once the cache is closed (dropping c.keep), they all are.
	must(t, c.Close())
	for range 20 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("after GraphCache.Close: buffers collected %d of %d", collected.Load(), keys)
}
