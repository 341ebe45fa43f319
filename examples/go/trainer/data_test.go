package main

import "testing"

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
