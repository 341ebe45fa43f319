package main

import (
	"fmt"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// streamStores makes gatherRows write with the library's non-temporal stores
// (-stream-stores); false takes Go's copy.
var streamStores = true

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
		for i, j := range idx {
			copy(dst[i*row:(i+1)*row], src[j*row:(j+1)*row])
		}
		return
	}
	if err := sluice.GatherRows(dst, src, row, idx); err != nil {
		panic(fmt.Sprintf("gatherRows: %v", err))
	}
}
