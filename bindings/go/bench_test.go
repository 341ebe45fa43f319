package sluice

import (
	"testing"
	"time"
)

// Each benchmark makes the same cheap call b.N times from Go through this
// package and b.N times from a C loop (shims.c), in the same run, and
// reports both and their difference: the cost of cgo plus the binding.
//
//	go-ns/call        one call from Go (wrapper objects, cleanups, KeepAlive, cgo)
//	c-ns/call         the same call from C
//	overhead-ns/call  go-ns/call - c-ns/call
//
// The Go and C loops alternate in chunks, so that drift in the machine's
// load (and in the library's state) affects both alike.

const chunk = 2000

func compare(b *testing.B, s *Stream, goLoop func(n int), cLoop func(n int) (time.Duration, error)) {
	b.ReportAllocs()
	b.ResetTimer()
	var goTime, cTime time.Duration
	for done := 0; done < b.N; {
		n := min(chunk, b.N-done)
		t0 := time.Now()
		goLoop(n)
		goTime += time.Since(t0)
		b.StopTimer() // allocations are counted for the Go loop only
		ct, err := cLoop(n)
		must(b, err)
		cTime += ct
		must(b, s.Synchronize())
		b.StartTimer()
		done += n
	}
	b.StopTimer()
	nf := float64(b.N)
	goNs, cNs := float64(goTime.Nanoseconds())/nf, float64(cTime.Nanoseconds())/nf
	b.ReportMetric(goNs, "go-ns/call")
	b.ReportMetric(cNs, "c-ns/call")
	b.ReportMetric(goNs-cNs, "overhead-ns/call")
	b.ReportMetric(0, "ns/op") // ns/op would mix in the synchronisations; the metrics above are the result
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
