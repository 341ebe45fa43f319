package main

// The training step: eager, or replayed from a graph cache, one or two
// steps per graph.

import (
	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// step issues one training step on s: replayed from cache, keyed by the
// input set, or eager when cache is nil.
func (m *model) step(cache *sluice.GraphCache, s *sluice.Stream) error {
	return issue(cache, uint64(m.parity), s, m.trainStep)
}

// stepGroup issues n (2 to 4) training steps on s, over input sets
// m.parity, m.parity + 1, ...: as one graph replayed from cache, or eagerly
// when cache is nil (-eager, several batches per lease). Replayed, the device
// pays one graph boundary per group, and each step's first kernel may start
// while the step before finishes (programmatic launch). Its kernels are the
// same ops in the same order as n step calls, so the losses and weights are
// bit-identical to theirs. m.parity ends at the last.
//
// With next (leased on s, -input-in-graph, nextN of its batches), the steps
// are followed by the input stage of next's batches into the sets of the
// other half, so that a graph, keyed by next's slot, holds it: the host then
// issues one graph per group, and the input kernel may run beside the last
// step's last kernel. The stream's last kernel is then an input stage,
// replayed or not (model.inputAhead).
func (m *model) stepGroup(cache *sluice.GraphCache, s *sluice.Stream, n int, next *sluice.Batch, nextN int) error {
	first := m.parity
	// The graph's key: the group's sets and sizes, and next's slot (a slot's
	// address, far past the small keys).
	key := uint64(first<<4 | n<<2)
	var src batchSource
	if next != nil {
		var err error
		if src, err = m.prefetched(next); err != nil {
			return err
		}
		key += src.addr + uint64(nextN)
	}
	err := issue(cache, key, s, func(s *sluice.Stream) error {
		for k := range n {
			m.parity = first + k
			if err := m.trainStep(s); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		m.parity = (first + m.sets/2) % m.sets
		return m.loadInputGroup(s, src, nextN, true)
	})
	m.parity = first + n - 1
	if next != nil {
		m.inputAhead = s
	}
	return err
}

// issue runs body on s: through cache under key (captured once, then
// replayed), or eagerly when cache is nil.
func issue(cache *sluice.GraphCache, key uint64, s *sluice.Stream, body func(*sluice.Stream) error) error {
	if cache == nil {
		return body(s)
	}
	return cache.Run(key, s, body)
}

// trainStep enqueues one training step on s over the input set in use
// (loadInput wrote it): forward, loss, backward and the SGD update, each a
// tracked op whose reads and writes order it (3 kernels, listed in
// kernels.go). It issues the same ops every time, so a graph captured from it
// can be replayed for every step (the step index lives in trainStats on the
// device).
func (m *model) trainStep(s *sluice.Stream) error {
	B, H := m.B, m.H
	xin, yin := m.inX[m.parity], m.inY[m.parity]
	yu8, xf := m.u8(yin, 0, B), m.f32(xin, 0, B*inputs)
	a1, da1 := m.f32(m.a1, 0, B*H), m.f32(m.da1, 0, B*H)
	draws := m.f32(m.mask, 0, dropDraws*m.nStates)
	z2, dz2 := m.f32(m.z2, 0, B*classes), m.f32(m.dz2, 0, B*classes)
	rowloss, losses := m.f32(m.rowloss, 0, B), m.f32(m.losses, 0, m.maxSteps)
	stats := m.u32(m.trainStats, 0, 2)
	w1, b1, w2, b2 := m.w1(m.params), m.b1(m.params), m.w2(m.params), m.b2(m.params)
	gw1, gb1, gw2, gb2 := m.w1(m.grads), m.b1(m.grads), m.w2(m.grads), m.b2(m.grads)
	p, scale := m.dropout, m.scale
	lr, mu, wd := m.lr, m.mu, m.wd
	// The parameters, velocities and gradients from b1 on ([b1, W2, b2]),
	// which gemm_tn_sgd's layer2_block blocks step; its tiles step W1.
	nW1 := inputs * H
	rest := func(b *sluice.Buffer) arr { return m.f32(b, nW1, m.nParams-nW1) }
	pRest, vRest, gRest := rest(m.params), rest(m.vel), rest(m.grads)
	pW1, vW1 := w1, m.w1(m.vel)
	// The host backend's gradients.
	var hostGrads []sluice.Syncable
	if m.host {
		hostGrads = syncs(m.grads)
	}
	inv := 1 / float32(B)
	// The products' operands: x, W1 and da1 as floats, or their bf16 copies
	// (pre-tiled when tiled).
	x, w1op, da1op, gemmSuffix := xf, w1, da1, m.gemmSuffix
	// fwd2_ce writes da1 as floats (da1f) or in bf16 (da1h, pre-tiled when
	// tiled), the other 0; w1h is gemm_tn_sgd's bf16 copy of W1 (0: none).
	da1f, da1h, w1h := da1.ptr(), uint64(0), uint64(0)
	if m.half {
		x, w1op, da1op = arr{buf: xin}, arr{buf: m.w1h}, arr{buf: m.da1h}
		da1f, da1h, w1h, gemmSuffix = 0, m.da1h.DevicePtr(), m.w1h.DevicePtr(), "_bf16"
		if m.tiled {
			gemmSuffix = "_wg"
		}
	}

	steps := []func() error{
		// a1 = dropout(relu(x W1 + b1))
		func() error {
			if m.host && p > 0 {
				// The same draws as the kernel's: dropDraws uniforms per state.
				if err := m.rng.Generate(s, rngUniform, rngSampleMajor, m.mask, 0, dropDraws); err != nil {
					return err
				}
			}
			// The RNG's states it draws from, or the mask drawn ahead (preDraw).
			var states uint64
			reads, writes := syncs(m.params), syncs(m.mask) // the host's draws
			switch {
			case m.preDraw:
				states, reads, writes = m.dropBits.DevicePtr(), append(reads, m.dropBits), nil
			case m.tiled: // no dropout
				writes = nil
			case !m.host:
				states, writes = m.states.DevicePtr(), syncs(m.states)
			}
			return m.gemm(s, gemmOp{
				name: "gemm_nn_bias_relu_drop", suffix: gemmSuffix, M: B, N: H, K: inputs, chunk: gemmKChunkNN,
				A: x, B: w1op, C: a1, extra: []any{b1.ptr(), states, p, scale}, reads: reads, writes: writes,
				host: func() {
					hostGemm(false, false, B, H, inputs, xf.f, w1.f, a1.f)
					hostBiasReLUDropout(a1.f, draws.f, b1.f, B, p, scale)
				},
			})
		},
		// logits = a1 W2 + b2; softmax cross-entropy: dz2, the rows' losses,
		// right predictions; da1 = (dz2 W2^T) * mask
		func() error {
			// With preDraw, also the next step's dropout mask.
			var states, bits uint64
			writes := syncs(m.z2, m.dz2, da1op.buf, m.rowloss, m.trainStats)
			if m.preDraw {
				states, bits = m.states.DevicePtr(), m.dropBits.DevicePtr()
				writes = append(writes, m.states, m.dropBits)
			}
			return m.run(s, "fwd2_ce", ceGrid(B), syncs(m.a1, m.params, yin), writes,
				func() {
					hostGemm(false, false, B, classes, H, a1.f, w2.f, z2.f)
					hostBiasAdd(z2.f, b2.f)
					hostSoftmaxCE(z2.f, yu8.b, dz2.f, rowloss.f, stats.u[1:], inv)
					hostDa1(B, H, a1.f, dz2.f, w2.f, da1.f, scale)
				},
				a1.ptr(), w2.ptr(), b2.ptr(), yu8.ptr(), dz2.ptr(), rowloss.ptr(), stats.ptr()+4,
				uint32(B), uint32(H), inv, int32(1), da1f, da1h, scale, m.tiledFlag(), states, uint32(m.nStates), p, bits)
		},
		func() error {
			if m.lossInSGD {
				return nil // gemm_tn_sgd stores it
			}
			return m.run(s, "loss_store", sluice.LaunchConfig{Grid: sluice.Dim3{X: 1}, Block: sluice.Dim3{X: 256}},
				syncs(m.rowloss), syncs(m.losses, m.trainStats),
				func() { hostLossStore(rowloss.f, losses.f, stats.u) },
				rowloss.ptr(), losses.ptr(), stats.ptr(), uint32(B))
		},
		// dW1 = x^T da1, and the SGD step of W1 (and its bf16 copy); in more
		// blocks dW2, db2, db1 and the SGD step of b1, W2 and b2 (and the loss)
		func() error {
			l2 := layer2Args{blocks: ceilDiv(H+1, l2Units), a1: a1.ptr(), dz2: dz2.ptr(), p1: pRest.ptr(), v1: vRest.ptr(), scale: scale}
			reads, writes := syncs(m.a1, m.dz2), append(syncs(m.vel), hostGrads...)
			if m.lossInSGD {
				l2.blocks++
				l2.rowloss, l2.losses, l2.counter = rowloss.ptr(), losses.ptr(), stats.ptr()
				reads, writes = append(reads, m.rowloss), append(writes, m.losses, m.trainStats)
			}
			if m.half {
				writes = append(writes, m.w1h)
			}
			return m.gemm(s, gemmOp{
				name: "gemm_tn_sgd", suffix: gemmSuffix, M: inputs, N: H, K: B, chunk: gemmKChunkTN, A: x, B: da1op, C: pW1,
				extra: []any{vW1.ptr(), w1h, lr, mu, wd}, reads: reads, writes: writes, layer2: &l2,
				host: func() {
					hostGemm(true, false, inputs, H, B, xf.f, da1.f, gw1.f)
					hostSGD(pW1.f, vW1.f, gw1.f, lr, mu, wd)
					hostLayer2Grads(B, H, a1.f, dz2.f, da1.f, gw2.f, gb1.f, gb2.f)
					hostSGD(pRest.f, vRest.f, gRest.f, lr, mu, wd)
					if m.lossInSGD {
						hostLossStore(rowloss.f, losses.f, stats.u)
					}
				},
			})
		},
	}
	for _, st := range steps {
		if err := st(); err != nil {
			return err
		}
	}
	return nil
}
