package main

// The test set's accuracy, on a stream of its own.

import (
	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// evaluate counts the test images the model classifies right, on stream s:
// it reads the parameters (so it runs after the last update enqueued on
// the training stream, and the next update waits for it), and returns the
// count once done. Its GEMMs do not split K (the workspace is the training
// stream's).
func (m *model) evaluate(s *sluice.Stream, pinned *sluice.PinnedBuffer) (int, error) {
	if m.nTest == 0 {
		return 0, nil
	}
	if err := sluice.Memset(s, m.evalStat, 0, 0, 4); err != nil {
		return 0, err
	}
	H := m.H
	w1, b1, w2, b2 := m.w1(m.params), m.b1(m.params), m.w2(m.params), m.b2(m.params)
	for r0 := 0; r0 < m.nTest; r0 += m.B {
		rows := min(m.B, m.nTest-r0)
		x := m.u8(m.testX, r0*inputs, rows*inputs)
		y := m.u8(m.testY, r0, rows)
		xf, z1, z2 := m.f32(m.exf, 0, rows*inputs), m.f32(m.ez1, 0, rows*H), m.f32(m.ez2, 0, rows*classes)
		cnt := m.u32(m.evalStat, 0, 1)
		if err := m.run(s, "u8_to_f32", grid4(rows*inputs), syncs(m.testX), syncs(m.exf),
			func() { hostU8ToF32(xf.f, x.b) }, xf.ptr(), x.ptr(), uint32(rows*inputs)); err != nil {
			return 0, err
		}
		if err := m.gemm(s, gemmOp{
			name: "gemm_nn_bias_relu", M: rows, N: H, K: inputs, A: xf, B: w1, C: z1,
			extra: []any{b1.ptr()}, reads: syncs(m.params),
			host: func() {
				hostGemm(false, false, rows, H, inputs, xf.f, w1.f, z1.f)
				hostBiasReLU(z1.f, b1.f)
			},
		}); err != nil {
			return 0, err
		}
		if err := m.run(s, "fwd2_ce", ceGrid(rows), syncs(m.ez1, m.params, m.testY), syncs(m.ez2, m.evalStat),
			func() {
				hostGemm(false, false, rows, classes, H, z1.f, w2.f, z2.f)
				hostBiasAdd(z2.f, b2.f)
				hostEvalCount(z2.f, y.b, cnt.u)
			},
			z1.ptr(), w2.ptr(), b2.ptr(), y.ptr(), uint64(0), uint64(0), cnt.ptr(),
			uint32(rows), uint32(H), float32(0), int32(0), uint64(0), uint64(0), float32(0), int32(0),
			uint64(0), uint32(0), float32(0), uint64(0)); err != nil {
			return 0, err
		}
	}
	if err := sluice.Copy(s, pinned, 0, m.evalStat, 0, 4); err != nil {
		return 0, err
	}
	if err := pinned.WaitRead(); err != nil {
		return 0, err
	}
	return int(sluice.SliceOf[uint32](pinned.Bytes())[0]), nil
}
