package sluice

// Loops of C API calls made from C, for the benchmarks in bench_test.go,
// which compare them with the same calls made from Go through this package.
// (Test files cannot use cgo, so the wrappers live here; they are unexported.)

/*
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"time"
)

func cBenchEventRecord(s *Stream, n int) (time.Duration, error) {
	h, err := s.raw("cBenchEventRecord")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_event(h, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	return time.Duration(ns), takeError(e)
}

func cBenchOp(s *Stream, obj Syncable, n int) (time.Duration, error) {
	h, err := s.raw("cBenchOp")
	if err != nil {
		return 0, err
	}
	so, err := obj.syncObject("cBenchOp")
	if err != nil {
		return 0, err
	}
	oh, err := so.h.raw("cBenchOp")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_op(h, oh, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	runtime.KeepAlive(obj)
	return time.Duration(ns), takeError(e)
}

func cBenchQuery(s *Stream, n int) (time.Duration, error) {
	h, err := s.raw("cBenchQuery")
	if err != nil {
		return 0, err
	}
	var e *C.sluice_error_t
	ns := C.sluice_go_bench_query(h, C.uint64_t(n), &e)
	runtime.KeepAlive(s)
	return time.Duration(ns), takeError(e)
}
