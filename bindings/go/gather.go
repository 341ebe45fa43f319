package sluice

/*
#include "sluice.h"
*/
import "C"

import (
	"strconv"
	"unsafe"
)

// GatherRows copies rows rows (of rowBytes bytes each) of src into dst, one
// after another: a batch gathered from a dataset by index, typically into a
// prefetcher slot (Slot.Segment, Fill.Segment). It writes len(rows)*rowBytes
// bytes (sluice_gather_rows). On x86-64 the stores are non-temporal: a slot's
// lines, which the last host-to-device copy read, are not read again before
// they are written, as a Go copy reads them (a lone producer whose slots stay
// cached may gather faster with copy). Every index is checked first; an
// index outside src, or rows that do not fit in dst, give ErrOutOfRange and
// write nothing, as do a rowBytes of 0 or less and dst and src overlapping
// (ErrInvalidArgument).
func GatherRows(dst, src []byte, rowBytes int, rows []int) error {
	const op = "GatherRows"
	if rowBytes < 0 {
		return argError(CodeInvalidArgument, op, "rowBytes %d is negative", rowBytes)
	}
	idx := unsafe.Pointer(unsafe.SliceData(rows))
	if strconv.IntSize != 64 && len(rows) > 0 {
		wide := make([]int64, len(rows))
		for i, r := range rows {
			wide[i] = int64(r)
		}
		idx = unsafe.Pointer(unsafe.SliceData(wide))
	}
	e := C.sluice_gather_rows(unsafe.Pointer(unsafe.SliceData(dst)), C.size_t(len(dst)),
		unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), C.size_t(rowBytes),
		(*C.int64_t)(idx), C.size_t(len(rows)))
	return check(e)
}

// GatherRows gathers rows rows of src into segment i (GatherRows) and sets
// the segment's length to len(rows)*rowBytes. On an error nothing is written
// and the length is kept. It panics if i is out of range.
func (s *Slot) GatherRows(i int, src []byte, rowBytes int, rows []int) error {
	if s.done.Load() {
		return argError(CodeInvalidState, "Slot.GatherRows", "the slot was submitted or cancelled")
	}
	return fillGather(&s.c, i, src, rowBytes, rows)
}

// GatherRows gathers rows rows of src into segment i (GatherRows) and sets
// the segment's length to len(rows)*rowBytes. On an error nothing is written
// and the length is kept; after the call of the Fill function it fails with
// ErrInvalidState. It panics if i is out of range.
func (f *Fill) GatherRows(i int, src []byte, rowBytes int, rows []int) error {
	if f.c == nil {
		return argError(CodeInvalidState, "Fill.GatherRows", "the Fill function has returned")
	}
	return fillGather(f.c, i, src, rowBytes, rows)
}

func fillGather(c *C.sluice_prefetch_fill_t, i int, src []byte, rowBytes int, rows []int) error {
	if err := GatherRows(fillSegment(c, i), src, rowBytes, rows); err != nil {
		return err
	}
	c.len[i] = C.size_t(len(rows) * rowBytes)
	return nil
}
