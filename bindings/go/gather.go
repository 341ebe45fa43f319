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
// they are written, as a Go copy reads them. Every index is checked first; an
// index outside src, or rows that do not fit in dst, give ErrOutOfRange and
// write nothing, as do dst and src overlapping (ErrInvalidArgument).
func GatherRows(dst, src []byte, rowBytes int, rows []int) error {
	const op = "GatherRows"
	if rowBytes < 0 {
		return argError(CodeInvalidArgument, op, "rowBytes %d is negative", rowBytes)
	}
	if len(rows) == 0 {
		return nil
	}
	idx := unsafe.Pointer(unsafe.SliceData(rows))
	if strconv.IntSize != 64 {
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
