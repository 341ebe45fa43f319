package main

import (
	"fmt"
	"runtime"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// streamStores makes gatherRows write with the library's non-temporal stores
// (-stream-stores); false takes Go's copy.
var streamStores = true

// gatherAhead is how many images ahead Go's copy touches (sluice_gather_rows
// prefetches as far).
const gatherAhead = 8

// gatherRows copies rows idx of row bytes each from src into dst, one after
// another: a batch's images, gathered from all over the training set. A
// producer writes each batch into a prefetcher slot whose lines are no longer
// in the CPU's caches (16 slots of 400 KB, read by the GPU since their last
// fill); Go's copy reads every line from memory before writing it, about half
// of a slot's fill on the H200's hosts (run 306), which sluice.GatherRows'
// non-temporal stores skip. dst holds len(idx)*row bytes; an index that is
// not a row of src panics.
func gatherRows(dst, src []byte, idx []int, row int) {
	if !streamStores {
		// Each image touches the one gatherAhead later first, as the library
		// prefetches, so that the two paths differ in their stores only.
		var touched byte
		for i, j := range idx {
			if k := i + gatherAhead; k < len(idx) {
				touched += src[idx[k]*row]
			}
			copy(dst[i*row:(i+1)*row], src[j*row:(j+1)*row])
		}
		runtime.KeepAlive(touched) // the touches are for their misses only
		return
	}
	if err := sluice.GatherRows(dst, src, row, idx); err != nil {
		panic(fmt.Sprintf("gatherRows: %v", err))
	}
}
