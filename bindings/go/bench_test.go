package sluice

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

// Each benchmark makes the same cheap call b.N times from Go through this
// package and b.N times from a C loop (shims.c), in the same run, and
// reports both and their difference: the cost of cgo plus the binding.
//
//	go-ns/call        one call from Go (wrapper objects, cleanups, KeepAlive, cgo)
//	c-ns/call         the same call from C
//	overhead-ns/call  the Go loop's time minus the C loop's, per call
//
// The Go and C loops alternate in chunks, so that drift in the machine's
// load (and in the library's state) affects both alike; each starts on an
// idle stream, which goes first alternates, and each metric is a median
// over the chunks (compareChunks).
//
// allocs/op counts the Go loop only (compareChunks). The per-op paths (RecordInto,
// BeginOpInto, RunOp, Copy, Memset, Launch) must show 0: alloc_test.go fails
// the tests otherwise. Record and BeginOp allocate their wrapper by design.

// chunk is the number of calls per loop. The GPU-bound rows (Copy, Memset,
// Launch) have a variant with shortChunk calls, few enough that the device's
// queue never fills, so that each loop measures the host's enqueue cost
// rather than the device's rate.
const (
	chunk      = 2000
	shortChunk = 32
)

func compare(b *testing.B, s *Stream, goLoop func(n int), cLoop func(n int) (time.Duration, error)) {
	compareChunks(b, s, chunk, goLoop, cLoop)
}

// cAfterCallModes are SLUICE_GO_BENCH_C_AFTER_CALL's values, as
// sluice_go_bench_set_after_call numbers them.
var cAfterCallModes = map[string]int{"atomic": 1, "mfence": 2, "code4k": 3, "code16k": 4, "code64k": 5}

// compareChunks runs the Go and the C loop on the same stream, in chunks of
// size calls. Each loop starts on an idle stream (a Synchronize before it)
// and the loop that goes first alternates from chunk to chunk, so that
// neither inherits the other's queued work or always runs first. The
// metrics are medians over the chunks (the overhead: of the per-chunk
// differences), so that a chunk that another process preempted does not
// move them. allocs/op and B/op are counted first, over two chunks of the
// Go loop after one of warm-up, and the benchmark timer is never stopped,
// so that no read of the memory statistics (a stop of the world) comes
// right before one loop and not the other.
//
// SLUICE_GO_BENCH_LOCK_THREAD=1 locks the benchmark's goroutine to its thread,
// so that every Go call and the C loop run on one OS thread (with the
// driver's per-thread state of that thread).
//
// SLUICE_GO_BENCH_C_AFTER_CALL=atomic (or mfence) makes the C loop do an
// atomic read-modify-write (or an mfence) after each API call, as a cgo
// return does with its compare-and-swap; code4k, code16k or code64k a call
// into that much code (a jump per cache line), as Go runs its own between
// calls: diagnostics of what Go's excess is (cAfterCallModes).
func compareChunks(b *testing.B, s *Stream, size int, goLoop func(n int), cLoop func(n int) (time.Duration, error)) {
	if os.Getenv("SLUICE_GO_BENCH_LOCK_THREAD") == "1" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	cBenchSetAfterCall(cAfterCallModes[os.Getenv("SLUICE_GO_BENCH_C_AFTER_CALL")]) // unset: 0, nothing
	b.ReportAllocs()
	goLoop(size)
	must(b, s.Synchronize())
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	goLoop(size)
	goLoop(size)
	runtime.ReadMemStats(&m1)
	calls := float64(2 * size)
	allocs, bytes := float64(m1.Mallocs-m0.Mallocs)/calls, float64(m1.TotalAlloc-m0.TotalAlloc)/calls
	b.ResetTimer()
	var goNs, cNs, diff []float64
	runGo := func(n int) float64 {
		must(b, s.Synchronize())
		t0 := time.Now()
		goLoop(n)
		return float64(time.Since(t0).Nanoseconds()) / float64(n)
	}
	runC := func(n int) float64 {
		must(b, s.Synchronize())
		d, err := cLoop(n)
		must(b, err)
		return float64(d.Nanoseconds()) / float64(n)
	}
	for i, done := 0, 0; done < b.N; i++ {
		n := min(size, b.N-done)
		var g, c float64
		if i%2 == 0 {
			g = runGo(n)
			c = runC(n)
		} else {
			c = runC(n)
			g = runGo(n)
		}
		goNs, cNs, diff = append(goNs, g), append(cNs, c), append(diff, g-c)
		done += n
	}
	must(b, s.Synchronize())
	b.ReportMetric(median(goNs), "go-ns/call")
	b.ReportMetric(median(cNs), "c-ns/call")
	b.ReportMetric(median(diff), "overhead-ns/call")
	b.ReportMetric(allocs, "allocs/op")
	b.ReportMetric(bytes, "B/op")
	b.ReportMetric(0, "ns/op") // ns/op would mix in the synchronisations; the metrics above are the result
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// sluice_event_record + sluice_event_destroy.
func BenchmarkEventRecordDestroy(b *testing.B) {
	s := testStream(b, openDev(b))
	compare(b, s, func(n int) {
		for i := 0; i < n; i++ {
			ev, err := s.Record(0)
			if err != nil {
				b.Fatal(err)
			}
			if err := ev.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchEventRecord(s, n) })
}

// The same pair into a caller-owned Event (RecordInto): no allocation.
func BenchmarkEventRecordInto(b *testing.B) {
	s := testStream(b, openDev(b))
	var ev Event
	compare(b, s, func(n int) {
		for i := 0; i < n; i++ {
			if err := s.RecordInto(&ev, 0); err != nil {
				b.Fatal(err)
			}
			if err := ev.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchEventRecord(s, n) })
}

// syncObjects returns k standalone sync objects as a set.
func syncObjects(t testing.TB, k int) []Syncable {
	t.Helper()
	set := make([]Syncable, k)
	for i := range set {
		o, err := NewSyncObject()
		set[i] = closeAtEnd(t, o, err)
	}
	return set
}

// sluice_op_begin + sluice_op_end into a caller-owned Op (BeginOpInto), with
// k standalone sync objects in the read set and none in the write set.
func BenchmarkOpBeginIntoEnd(b *testing.B) {
	for _, k := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("syncs=%d", k), func(b *testing.B) {
			s := testStream(b, openDev(b))
			reads := syncObjects(b, k)
			var op Op
			compare(b, s, func(n int) {
				for i := 0; i < n; i++ {
					if err := s.BeginOpInto(&op, reads, nil); err != nil {
						b.Fatal(err)
					}
					if err := op.End(); err != nil {
						b.Fatal(err)
					}
				}
			}, func(n int) (time.Duration, error) { return cBenchOpSets(s, reads, nil, n) })
		})
	}
}

// The same pairs as BenchmarkOpBeginIntoEnd, made from Go straight through
// cgo with the handles resolved once: the cgo floor. BeginOpInto's overhead
// minus this row's is the binding's own work.
func BenchmarkOpSetsBareCgo(b *testing.B) {
	for _, k := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("syncs=%d", k), func(b *testing.B) {
			s := testStream(b, openDev(b))
			reads := syncObjects(b, k)
			compare(b, s, func(n int) { must(b, cgoOpSets(s, reads, n)) },
				func(n int) (time.Duration, error) { return cBenchOpSets(s, reads, nil, n) })
		})
	}
}

// sluice_stream_copy of 256 bytes between two buffers of the stream.
func BenchmarkCopy(b *testing.B) { benchCopy(b, chunk) }

// BenchmarkCopy in loops of shortChunk copies, which never fill the device's
// queue: the host's cost per copy, not the device's rate (5 µs per copy on
// an H200).
func BenchmarkCopyHostBound(b *testing.B) { benchCopy(b, shortChunk) }

func benchCopy(b *testing.B, size int) {
	s := testStream(b, openDev(b))
	dst, src := alloc(b, s, 256), alloc(b, s, 256)
	compareChunks(b, s, size, func(n int) {
		for i := 0; i < n; i++ {
			if err := Copy(s, dst, 0, src, 0, 256); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchCopy(s, dst, src, 256, n) })
}

// sluice_stream_memset of 256 bytes.
func BenchmarkMemset(b *testing.B) { benchMemset(b, chunk) }

// BenchmarkMemset in loops of shortChunk memsets, which never fill the
// device's queue: the host's cost per memset, not the device's rate.
func BenchmarkMemsetHostBound(b *testing.B) { benchMemset(b, shortChunk) }

func benchMemset(b *testing.B, size int) {
	s := testStream(b, openDev(b))
	dst := alloc(b, s, 256)
	compareChunks(b, s, size, func(n int) {
		for i := 0; i < n; i++ {
			if err := Memset(s, dst, 0, byte(i), 256); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchMemset(s, dst, 256, n) })
}

// sluice_stream_launch of scale_bias (5 arguments: two buffers, two float32,
// one uint32) reading x and writing y. Modules need the cuda backend: on
// host the benchmark is skipped. The C loop gets the argument values as
// Launch passes them and launches them as they are; the Go loop pays for
// Launch's conversion of its arguments on every call.
func BenchmarkLaunch(b *testing.B) { benchLaunch(b, chunk) }

// BenchmarkLaunch in loops of shortChunk launches, which never fill the
// device's queue: the host's cost per launch, not the device's rate (4 µs
// per launch on an H200).
func BenchmarkLaunchHostBound(b *testing.B) { benchLaunch(b, shortChunk) }

// BenchmarkLaunchHostBound's launches made from Go straight through cgo, with
// the handles, sets and argument values resolved once: the cgo floor.
// LaunchHostBound's overhead minus this row's is the binding's own work.
func BenchmarkLaunchBareCgo(b *testing.B) { benchLaunchWith(b, shortChunk, true) }

func benchLaunch(b *testing.B, size int) { benchLaunchWith(b, size, false) }

func benchLaunchWith(b *testing.B, size int, bare bool) {
	d := openDev(b)
	if backendOf(b, d) != BackendCUDA {
		b.Skip("kernel launches need the cuda backend")
	}
	s := testStream(b, d)
	m, err := d.LoadModule([]byte(scalePTX))
	m = closeAtEnd(b, m, err)
	f, err := m.Function("scale_bias")
	f = closeAtEnd(b, f, err)
	const count = 256
	x, y := alloc(b, s, 4*count), alloc(b, s, 4*count)
	reads, writes := []Syncable{x}, []Syncable{y}
	cfg := LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: count}}
	a, bias, cnt := float32(2.5), float32(0.5), uint32(count)
	goLoop := func(n int) {
		for i := 0; i < n; i++ {
			if err := f.Launch(s, cfg, reads, writes, y, x, a, bias, cnt); err != nil {
				b.Fatal(err)
			}
		}
	}
	if bare {
		goLoop = func(n int) { must(b, cgoLaunch(s, f, cfg, reads, writes, []any{y, x, a, bias, cnt}, n)) }
	}
	compareChunks(b, s, size, goLoop, func(n int) (time.Duration, error) {
		return cBenchLaunch(s, f, cfg, reads, writes, []any{y, x, a, bias, cnt}, n)
	})
}

// sluice_op_begin + sluice_op_end with one buffer in the write set.
func BenchmarkOpBeginEnd(b *testing.B) {
	s := testStream(b, openDev(b))
	buf := alloc(b, s, 256)
	writes := []Syncable{buf}
	compare(b, s, func(n int) {
		for i := 0; i < n; i++ {
			op, err := s.BeginOp(nil, writes)
			if err != nil {
				b.Fatal(err)
			}
			if err := op.End(); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchOp(s, buf, n) })
}

// The same op through RunOp, which makes no Op wrapper (no cleanup).
func BenchmarkRunOp(b *testing.B) {
	s := testStream(b, openDev(b))
	buf := alloc(b, s, 256)
	writes := []Syncable{buf}
	compare(b, s, func(n int) {
		for i := 0; i < n; i++ {
			if err := s.RunOp(nil, writes, nil); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchOp(s, buf, n) })
}

// sluice_stream_query: the cheapest call, to isolate the bare cgo cost.
func BenchmarkStreamQuery(b *testing.B) {
	s := testStream(b, openDev(b))
	compare(b, s, func(n int) {
		for i := 0; i < n; i++ {
			if _, err := s.Query(); err != nil {
				b.Fatal(err)
			}
		}
	}, func(n int) (time.Duration, error) { return cBenchQuery(s, n) })
}

// A C function that writes kb KiB (a line every 64 bytes) and calls nothing:
// the cgo round trip's cost against how much of the cache its callee takes,
// as a driver call does. kb=0 is the bare cgo call (issue 17's Go rows,
// docs/decisions.md).
func BenchmarkCgoFootprint(b *testing.B) {
	s := testStream(b, openDev(b))
	buf := newTouchBuf(1024)
	if buf.p == nil {
		b.Fatal("calloc failed")
	}
	defer buf.free()
	for _, kb := range []int{0, 16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("kb=%d", kb), func(b *testing.B) {
			compare(b, s, func(n int) {
				for i := 0; i < n; i++ {
					buf.touch(kb)
				}
			}, func(n int) (time.Duration, error) { return buf.loop(kb, n), nil })
		})
	}
}
