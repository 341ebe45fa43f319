package main

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestSlotPlan: slots of two batches cover every batch of every epoch once,
// in order, with a slot of one at the end of an epoch of an odd number of
// batches, and a plan that starts at a later epoch (a resumed run) starts at
// that epoch's first batch.
func TestSlotPlan(t *testing.T) {
	for _, c := range []struct{ per, nb, first, epochs int }{
		{1, 16, 0, 2}, {2, 16, 0, 2}, {2, 11, 0, 3}, {2, 11, 1, 3}, {2, 1, 0, 2},
	} {
		p := slotPlan{per: c.per, nb: c.nb, first: c.first}
		next := c.first * c.nb
		for seq := 0; seq < (c.epochs-c.first)*p.perEpoch(); seq++ {
			g, n := p.batches(seq)
			if g != next || n < 1 || n > c.per || g%c.nb+n > c.nb {
				t.Fatalf("%+v: slot %d holds batches %d..%d, want from %d, at most %d, within an epoch",
					c, seq, g, g+n-1, next, c.per)
			}
			next += n
		}
		if next != c.epochs*c.nb {
			t.Fatalf("%+v: the slots end before batch %d, want %d", c, next, c.epochs*c.nb)
		}
	}
}

// TestFillBatch: a batch holds the images and labels of its permutation's
// indices in order, whatever fillBatch touches ahead, at every position of an
// epoch (its last images have nothing ahead to touch).
func TestFillBatch(t *testing.T) {
	const n, batch = 100, 16
	d := &dataset{trainX: make([]byte, n*inputs), trainY: make([]byte, n)}
	for i := range d.trainX {
		d.trainX[i] = byte(i*7 + i/inputs)
	}
	for i := range d.trainY {
		d.trainY[i] = byte(i % 10)
	}
	s := newSampler(d, batch, 3)
	defer func(v bool) { streamStores = v }(streamStores)
	// The library's streamed stores into an aligned and a misaligned batch, and
	// Go's copy with -stream-stores=false.
	for _, c := range []struct {
		stream bool
		offset int
	}{{true, 0}, {true, 1}, {false, 0}} {
		streamStores = c.stream
		b := make([]byte, 16+batch*(inputs+1))[c.offset:][:batch*(inputs+1)]
		for g := 0; g < 2*s.nb; g++ {
			s.fillBatch(b, g)
			idx := s.perm(g / s.nb)[(g%s.nb)*batch:][:batch]
			for i, j := range idx {
				want := d.trainX[j*inputs : (j+1)*inputs]
				if got := b[i*inputs : (i+1)*inputs]; string(got) != string(want) {
					t.Fatalf("%+v: batch %d, image %d: not image %d", c, g, i, j)
				}
				if b[batch*inputs+i] != d.trainY[j] {
					t.Fatalf("%+v: batch %d, label %d: %d, want %d", c, g, i, b[batch*inputs+i], d.trainY[j])
				}
			}
		}
	}
}

// TestPermAhead: each epoch's permutation is rand.Perm of its PCG, whichever
// of many goroutines asks first and in whatever order; the first use of an
// epoch makes the next one in the background, and the oldest are dropped.
func TestPermAhead(t *testing.T) {
	const n = 1000
	s := newSampler(&dataset{trainY: make([]byte, n)}, 10, 7)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 6; i++ {
				e := (i + g) % 6
				if want := rand.New(rand.NewPCG(7, uint64(e))).Perm(n); !slices.Equal(s.perm(e), want) {
					t.Errorf("epoch %d: not its permutation", e)
				}
			}
		}()
	}
	wg.Wait()
	s = newSampler(&dataset{trainY: make([]byte, n)}, 10, 7)
	s.perm(3)
	s.mu.Lock()
	next := s.perms[4]
	s.mu.Unlock()
	if next == nil {
		t.Fatal("epoch 4 was not started ahead by epoch 3's first use")
	}
	s.make(next, 4)
	if !slices.Equal(next.p, rand.New(rand.NewPCG(7, 4)).Perm(n)) {
		t.Fatal("epoch 4 made ahead is not its permutation")
	}
	for e := 5; e < 9; e++ {
		s.perm(e)
	}
	if len(s.perms) != 4 || s.perms[3] != nil {
		t.Fatalf("%d permutations kept (epoch 3's: %v), want the latest 4", len(s.perms), s.perms[3] != nil)
	}
}

// TestHugePageBytes: the training images' memory has the length asked for,
// starts zeroed and holds what is written to it, to its last byte; the
// system may refuse huge pages (nil), and then the images use the heap.
func TestHugePageBytes(t *testing.T) {
	const n = 3<<20 + 5 // more than one 2 MiB page, not a multiple of it
	b := hugePageBytes(n)
	if b == nil {
		t.Skip("no huge pages here")
	}
	if len(b) != n || cap(b) != n {
		t.Fatalf("len %d cap %d, want %d", len(b), cap(b), n)
	}
	for i, v := range b {
		if v != 0 {
			t.Fatalf("byte %d is %d, want 0", i, v)
		}
	}
	for i := range b {
		b[i] = byte(i * 7)
	}
	for i, v := range b {
		if v != byte(i*7) {
			t.Fatalf("byte %d reads %d, want %d", i, v, byte(i*7))
		}
	}
}

// TestGatherRowsPanicsOutsideTheImages: an index past the images, or below
// them, panics (the library checks every index before it copies).
func TestGatherRowsPanicsOutsideTheImages(t *testing.T) {
	src, dst := make([]byte, 4*inputs), make([]byte, 2*inputs)
	for _, idx := range [][]int{{0, 4}, {-1, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("rows %v of 4: no panic", idx)
				}
			}()
			gatherRows(dst, src, idx, inputs)
		}()
	}
	gatherRows(dst, src, []int{3, 0}, inputs) // the last and the first: fine
}
