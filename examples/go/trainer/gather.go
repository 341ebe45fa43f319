package main

/*
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Rows idx[0..n) of row bytes each, from src into dst one after another.
// With stream, a 16-byte aligned dst and rows a multiple of 16 bytes, the
// stores bypass the cache (non-temporal), so that writing a line of dst does
// not first read it from memory; a fence makes them visible before return.
// ahead rows later are prefetched, so that several misses are in flight.
static void gather_rows(uint8_t* dst, const uint8_t* src, const int64_t* idx, int64_t n, int64_t row,
                        int stream, int64_t ahead) {
#if defined(__SSE2__)
  const int nt = stream && ((uintptr_t)dst & 15) == 0 && (row & 15) == 0;
#else
  (void)stream;
#endif
  for (int64_t i = 0; i < n; i++) {
    if (i + ahead < n) __builtin_prefetch(src + idx[i + ahead] * row);
    const uint8_t* s = src + idx[i] * row;
    uint8_t* d = dst + i * row;
#if defined(__SSE2__)
    if (nt) {
      for (int64_t k = 0; k < row; k += 16)
        _mm_stream_si128((__m128i*)(d + k), _mm_loadu_si128((const __m128i*)(s + k)));
      continue;
    }
#endif
    memcpy(d, s, (size_t)row);
  }
#if defined(__SSE2__)
  if (nt) _mm_sfence();
#endif
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// idx goes to C as int64_t: Go's int must be 64 bits (a compile error otherwise).
var _ [1]struct{} = [unsafe.Sizeof(int(0)) / 8]struct{}{}

// streamStores makes gatherRows write with non-temporal stores where it can
// (-stream-stores).
var streamStores = true

// gatherRows copies rows idx of row bytes each from src into dst, one after
// another: a batch's images, gathered from all over the training set. A
// producer writes each batch into a prefetcher slot whose lines are no longer
// in the CPU's caches (16 slots of 400 KB, read by the GPU since their last
// fill); plain stores read every line from memory before writing it, about
// half of a slot's fill on the H200's hosts (run 306), which non-temporal
// stores skip. dst holds len(idx)*row bytes; an index that is not a row of src
// panics, as the Go copy did.
func gatherRows(dst, src []byte, idx []int, row int) {
	n := len(idx)
	if n == 0 {
		return
	}
	_ = dst[n*row-1]
	for _, j := range idx {
		if j < 0 || (j+1)*row > len(src) {
			panic(fmt.Sprintf("gatherRows: row %d of %d", j, len(src)/row))
		}
	}
	stream := C.int(0)
	if streamStores {
		stream = 1
	}
	C.gather_rows((*C.uint8_t)(unsafe.Pointer(&dst[0])), (*C.uint8_t)(unsafe.Pointer(&src[0])),
		(*C.int64_t)(unsafe.Pointer(&idx[0])), C.int64_t(n), C.int64_t(row), stream, gatherAhead)
}
