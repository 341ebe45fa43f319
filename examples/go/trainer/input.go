package main

// The input stage: the batches' sources and the kernel that reads them
// into the step's input sets.

import (
	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// useInput points the step at input set step % m.sets. The batch of a step
// is copied (on its own stream) while the step before runs, into a set that
// step does not read; a graph is captured per set (step's cache key).
func (m *model) useInput(step int) { m.parity = step % m.sets }

// batchSource is a batch in device memory, B rows of u8 pixels then their B
// labels: a prefetcher's batch (one segment, so one copy per batch), or the
// blocking path's staging buffer.
type batchSource struct {
	addr uint64          // device address
	sync sluice.Syncable // its sync object; nil for a leased batch (see prefetched)
	host []byte          // the host backend's view of it
}

// part is batch k of a source that holds several batches of size bytes each.
func (b batchSource) part(k, size int) batchSource {
	p := batchSource{addr: b.addr + uint64(k*size), sync: b.sync}
	if b.host != nil {
		p.host = b.host[k*size : (k+1)*size]
	}
	return p
}

// prefetched is the source of a batch leased from the prefetcher. The input
// stage runs on the stream that leased it, between Next (which made that
// stream wait for the batch's copy) and Release (after which the slot's next
// copy waits for that stream's work), so it names no sync object for the
// batch: naming it would wait for the copy a second time.
func (m *model) prefetched(b *sluice.Batch) (batchSource, error) {
	src := batchSource{addr: b.DevicePtr(0)}
	if m.host {
		var err error
		src.host, err = b.HostBytes(0)
		return src, err
	}
	return src, nil
}

// staged is the source of the blocking path's batch.
func (m *model) staged() batchSource {
	src := batchSource{addr: m.stage.DevicePtr(), sync: m.stage}
	if m.host {
		src.host = m.hostBytes(m.stage)
	}
	return src
}

// loadInput is the input stage: one kernel on s turns the batch's pixels
// into the products' x operand (x / 255, as bf16 when half, pre-tiled when
// tiled) and copies its labels, into the input set in use. It runs beside the
// step before (on the input stream), outside the captured step.
func (m *model) loadInput(s *sluice.Stream, src batchSource) error {
	n := m.B * inputs
	x, y := m.inX[m.parity], m.inY[m.parity]
	var reads []sluice.Syncable
	if src.sync != nil {
		reads = []sluice.Syncable{src.sync}
	}
	writes := syncs(x, y)
	px, labels := src.addr, src.addr+uint64(n)
	if m.half {
		return m.run(s, "input_bf16", grid8(n), reads, writes, nil,
			x.DevicePtr(), m.tiledFlag(), y.DevicePtr(), px, labels, uint32(n), uint32(m.B))
	}
	xf, yb := m.f32(x, 0, n), m.u8(y, 0, m.B)
	return m.run(s, "input_f32", grid4(n), reads, writes,
		func() { hostU8ToF32(xf.f, src.host[:n]); copy(yb.b, src.host[n:]) },
		x.DevicePtr(), y.DevicePtr(), px, labels, uint32(n), uint32(m.B))
}

// loadInputGroup is the input stage of a group of n steps (stepGroup): the
// n batches of src into input sets m.parity, m.parity + 1, ..., with a kernel
// per two batches when half (the other kinds, the host backend and a last
// odd batch run loadInput). early: the pairs' kernels do not wait for the
// kernel ahead of them (programmatic launch), which must then neither write
// the batches nor touch those sets.
func (m *model) loadInputGroup(s *sluice.Stream, src batchSource, n int, early bool) error {
	first := m.parity
	defer func() { m.parity = first }()
	size := m.B * (inputs + 1)
	for k := 0; k < n; k++ {
		m.parity = first + k
		var err error
		if k+1 < n && m.half && src.sync == nil {
			err = m.loadInputPair(s, src.part(k, size), src.part(k+1, size), early)
			k++
		} else {
			err = m.loadInput(s, src.part(k, size))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// loadInputPair is one kernel's input stage of two batches (half): src0
// into input set m.parity and src1 into the next.
func (m *model) loadInputPair(s *sluice.Stream, src0, src1 batchSource, early bool) error {
	first := m.parity
	n := m.B * inputs
	x0, y0, x1, y1 := m.inX[first], m.inY[first], m.inX[first+1], m.inY[first+1]
	cfg := grid8(n)
	cfg.Grid.Y = 2
	wait := int32(1)
	if early {
		wait = 0
	}
	return m.run(s, "input_pair_bf16", cfg, nil, syncs(x0, y0, x1, y1), nil,
		x0.DevicePtr(), y0.DevicePtr(), src0.addr, src0.addr+uint64(n),
		x1.DevicePtr(), y1.DevicePtr(), src1.addr, src1.addr+uint64(n), m.tiledFlag(), wait, uint32(n), uint32(m.B))
}

// tiledFlag is the kernels' tiled argument (the input stage's, fwd2_ce's
// da1_tiled): 1 where they write the warpgroup-MMA products' operands
// pre-tiled, else 0.
func (m *model) tiledFlag() int32 {
	if m.tiled {
		return 1
	}
	return 0
}
