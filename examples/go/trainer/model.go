package main

import (
	"fmt"
	"math"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

const (
	inputs  = 28 * 28
	classes = 10
)

// arr is a run of float32, uint8 or uint32 elements inside a device buffer:
// its device address for kernels, and on the host backend (where device
// memory is host memory) the same elements as a Go slice for host callbacks.
type arr struct {
	buf *sluice.Buffer
	off int // bytes
	f   []float32
	b   []byte
	u   []uint32
}

func (a arr) ptr() uint64 { return a.buf.DevicePtr() + uint64(a.off) }

// model is the MLP inputs-H-classes (ReLU, dropout, softmax cross-entropy, SGD
// with momentum) on one device: its parameters, optimizer state, activations
// and the kernels (CUDA C compiled at start-up, or host callbacks).
type model struct {
	dev  *sluice.Device
	host bool // host backend: host callbacks instead of kernels
	mod  *sluice.Module
	fns  map[string]*sluice.Function

	B, H    int // batch rows, hidden units
	nParams int
	dropout float32
	scale   float32 // 1/(1-dropout)
	lr, mu  float32
	wd      float32

	// The batch (written by the prefetcher's NextInto or a blocking copy).
	xu8, yu8 *sluice.Buffer
	// Activations and gradients of one step.
	xf, z1, a1, mask, z2, dz2, da1, rowloss *sluice.Buffer
	// Parameters [W1 (inputs x H), b1 (H), W2 (H x classes), b2 (classes)],
	// their gradients and the momentum, in one layout.
	params, grads, vel *sluice.Buffer
	// trainStats: [0] steps of the epoch so far, [1] right predictions;
	// losses: the loss of each step of the epoch.
	trainStats, losses *sluice.Buffer
	maxSteps           int

	// Evaluation, on its own stream: the test set and its buffers.
	testX, testY            *sluice.Buffer
	nTest                   int
	exf, ez1, ez2, evalStat *sluice.Buffer

	rng    *rng
	states *sluice.Buffer // cuda: the RNG's states, drawn from by bias_relu_dropout
}

func (m *model) f32(b *sluice.Buffer, off, n int) arr {
	a := arr{buf: b, off: 4 * off}
	if m.host {
		a.f = sluice.SliceOf[float32](m.hostBytes(b))[off : off+n]
	}
	return a
}

func (m *model) u8(b *sluice.Buffer, off, n int) arr {
	a := arr{buf: b, off: off}
	if m.host {
		a.b = m.hostBytes(b)[off : off+n]
	}
	return a
}

func (m *model) u32(b *sluice.Buffer, off, n int) arr {
	a := arr{buf: b, off: 4 * off}
	if m.host {
		a.u = sluice.SliceOf[uint32](m.hostBytes(b))[off : off+n]
	}
	return a
}

func (m *model) hostBytes(b *sluice.Buffer) []byte {
	hb, err := b.HostBytes()
	if err != nil {
		panic(err) // the host backend's buffers are host memory
	}
	return hb
}

// Views of the parameter layout (of params, grads or vel).
func (m *model) w1(b *sluice.Buffer) arr { return m.f32(b, 0, inputs*m.H) }
func (m *model) b1(b *sluice.Buffer) arr { return m.f32(b, inputs*m.H, m.H) }
func (m *model) w2(b *sluice.Buffer) arr { return m.f32(b, inputs*m.H+m.H, m.H*classes) }
func (m *model) b2(b *sluice.Buffer) arr {
	return m.f32(b, inputs*m.H+m.H+m.H*classes, classes)
}

type hyper struct {
	batch, hidden int
	dropout       float32
	lr, mu, wd    float32
	rngSeed       uint64
}

func newModel(dev *sluice.Device, s *sluice.Stream, hp hyper, maxSteps int, testX, testY []byte) (*model, error) {
	be, err := dev.Backend()
	if err != nil {
		return nil, err
	}
	m := &model{
		dev: dev, host: be == sluice.BackendHost,
		B: hp.batch, H: hp.hidden, dropout: hp.dropout, scale: 1 / (1 - hp.dropout),
		lr: hp.lr, mu: hp.mu, wd: hp.wd, maxSteps: maxSteps,
	}
	m.nParams = inputs*m.H + m.H + m.H*classes + classes
	if !m.host {
		if m.mod, err = compileModule(dev, kernelSource, "trainer.cu"); err != nil {
			return nil, fmt.Errorf("compiling the kernels: %w", err)
		}
		m.fns = make(map[string]*sluice.Function)
		for _, n := range kernelNames {
			if m.fns[n], err = m.mod.Function(n); err != nil {
				return nil, err
			}
		}
	}
	B, H := m.B, m.H
	m.nTest = len(testY)
	allocs := []struct {
		p *(*sluice.Buffer)
		n int
	}{
		{&m.xu8, B * inputs}, {&m.yu8, B}, {&m.xf, 4 * B * inputs},
		{&m.z1, 4 * B * H}, {&m.a1, 4 * B * H}, {&m.mask, 4 * B * H}, {&m.da1, 4 * B * H},
		{&m.z2, 4 * B * classes}, {&m.dz2, 4 * B * classes}, {&m.rowloss, 4 * B},
		{&m.params, 4 * m.nParams}, {&m.grads, 4 * m.nParams}, {&m.vel, 4 * m.nParams},
		{&m.trainStats, 8}, {&m.losses, 4 * max(maxSteps, 1)},
		{&m.testX, max(len(testX), 1)}, {&m.testY, max(len(testY), 1)},
		{&m.exf, 4 * B * inputs}, {&m.ez1, 4 * B * H}, {&m.ez2, 4 * B * classes}, {&m.evalStat, 4},
	}
	for _, a := range allocs {
		if *a.p, err = s.Alloc(a.n); err != nil {
			return nil, err
		}
	}
	if len(testX) > 0 {
		// Synchronous copies from Go memory, once.
		if err := sluice.CopyFromHost(s, m.testX, 0, testX); err != nil {
			return nil, err
		}
		if err := sluice.CopyFromHost(s, m.testY, 0, testY); err != nil {
			return nil, err
		}
	}
	// One RNG state per hidden activation of a batch: state i draws the
	// dropout of element i, on the GPU in bias_relu_dropout through
	// <sluice/rng.cuh>, on the host backend with RNG.Generate.
	if m.rng, err = newRNG(s, hp.rngSeed, B*H); err != nil {
		return nil, err
	}
	if !m.host {
		if m.states, err = m.rng.States(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *model) Close() {
	for _, b := range []*sluice.Buffer{m.xu8, m.yu8, m.xf, m.z1, m.a1, m.mask, m.z2, m.dz2, m.da1,
		m.rowloss, m.params, m.grads, m.vel, m.trainStats, m.losses, m.testX, m.testY,
		m.exf, m.ez1, m.ez2, m.evalStat, m.states} {
		if b != nil {
			b.Close()
		}
	}
	if m.rng != nil {
		m.rng.Close()
	}
	for _, f := range m.fns {
		f.Close()
	}
	if m.mod != nil {
		m.mod.Close()
	}
}

func syncs(bs ...*sluice.Buffer) []sluice.Syncable {
	out := make([]sluice.Syncable, len(bs))
	for i, b := range bs {
		out[i] = b
	}
	return out
}

func grid1(n int) sluice.LaunchConfig {
	return sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32((n + 255) / 256)}, Block: sluice.Dim3{X: 256}}
}

// run enqueues one kernel on s as one tracked op that reads and writes the
// given buffers: the CUDA function name with args, or on the host backend
// the host callback fn.
func (m *model) run(s *sluice.Stream, name string, cfg sluice.LaunchConfig, reads, writes []sluice.Syncable, fn func(), args ...any) error {
	if m.host {
		return s.HostCallback(func() error { fn(); return nil }, reads, writes)
	}
	return m.fns[name].Launch(s, cfg, reads, writes, args...)
}

// gemm: C = op(A) * op(B) (see gemm_tile in kernels.go).
func (m *model) gemm(s *sluice.Stream, ta, tb bool, M, N, K int, A, B, C arr) error {
	name := "gemm_nn"
	switch {
	case ta && !tb:
		name = "gemm_tn"
	case !ta && tb:
		name = "gemm_nt"
	}
	cfg := sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32((N + 63) / 64), Y: uint32((M + 63) / 64)}, Block: sluice.Dim3{X: 256}}
	return m.run(s, name, cfg, syncs(A.buf, B.buf), syncs(C.buf),
		func() { hostGemm(ta, tb, M, N, K, A.f, B.f, C.f) },
		int32(M), int32(N), int32(K), A.ptr(), B.ptr(), C.ptr())
}

// initParams draws the weights from the RNG: W1 ~ N(0, 2/inputs) (He), W2 ~
// N(0, 1/H); biases and momentum are zero. Run once, before training (not
// on resume: the checkpoint holds the weights and the RNG's states).
func (m *model) initParams(s *sluice.Stream) error {
	if err := sluice.Memset(s, m.params, 0, 0, 4*m.nParams); err != nil {
		return err
	}
	if err := sluice.Memset(s, m.vel, 0, 0, 4*m.nParams); err != nil {
		return err
	}
	S := m.B * m.H
	n1, n2 := inputs*m.H, m.H*classes
	c1, c2 := (n1+S-1)/S, (n2+S-1)/S
	scratch, err := s.Alloc(4 * S * max(c1, c2))
	if err != nil {
		return err
	}
	defer scratch.Close() // freed in stream order, after the copies below
	for _, w := range []struct {
		dst   arr
		n, c  int
		scale float32
	}{
		{m.w1(m.params), n1, c1, float32(math.Sqrt(2 / float64(inputs)))},
		{m.w2(m.params), n2, c2, float32(math.Sqrt(1 / float64(m.H)))},
	} {
		if err := m.rng.Generate(s, rngNormal, rngSampleMajor, scratch, 0, w.c); err != nil {
			return err
		}
		src := m.f32(scratch, 0, w.n)
		dst := w.dst
		err := m.run(s, "scale_copy", grid1(w.n), syncs(scratch), syncs(m.params),
			func() { hostScaleCopy(dst.f, src.f, w.scale) },
			dst.ptr(), src.ptr(), uint32(w.n), w.scale)
		if err != nil {
			return err
		}
	}
	return nil
}

// trainStep enqueues one training step on s over the current batch (xu8,
// yu8): forward, loss, backward and the SGD update, each a tracked op whose
// reads and writes order it. It issues the same ops every time, so a graph
// captured from it can be replayed for every step (the step index lives in
// trainStats on the device).
func (m *model) trainStep(s *sluice.Stream) error {
	B, H := m.B, m.H
	xu8, yu8 := m.u8(m.xu8, 0, B*inputs), m.u8(m.yu8, 0, B)
	xf := m.f32(m.xf, 0, B*inputs)
	z1, a1, mask, da1 := m.f32(m.z1, 0, B*H), m.f32(m.a1, 0, B*H), m.f32(m.mask, 0, B*H), m.f32(m.da1, 0, B*H)
	z2, dz2 := m.f32(m.z2, 0, B*classes), m.f32(m.dz2, 0, B*classes)
	rowloss, losses := m.f32(m.rowloss, 0, B), m.f32(m.losses, 0, m.maxSteps)
	stats := m.u32(m.trainStats, 0, 2)
	w1, b1, w2, b2 := m.w1(m.params), m.b1(m.params), m.w2(m.params), m.b2(m.params)
	gw1, gb1, gw2, gb2 := m.w1(m.grads), m.b1(m.grads), m.w2(m.grads), m.b2(m.grads)
	p, scale := m.dropout, m.scale

	steps := []func() error{
		func() error {
			return m.run(s, "u8_to_f32", grid1(B*inputs), syncs(m.xu8), syncs(m.xf),
				func() { hostU8ToF32(xf.f, xu8.b) }, xf.ptr(), xu8.ptr(), uint32(B*inputs))
		},
		func() error { return m.gemm(s, false, false, B, H, inputs, xf, w1, z1) },
		func() error {
			if !m.host {
				return m.run(s, "bias_relu_dropout", grid1(B*H), syncs(m.params), syncs(m.z1, m.a1, m.mask, m.states), nil,
					z1.ptr(), a1.ptr(), mask.ptr(), b1.ptr(), m.states.DevicePtr(), uint32(B), uint32(H), p, scale)
			}
			if p > 0 {
				// The same draws as the kernel's: one uniform per state.
				if err := m.rng.Generate(s, rngUniform, rngSampleMajor, m.mask, 0, 1); err != nil {
					return err
				}
			}
			return s.HostCallback(func() error { hostBiasReLUDropout(z1.f, a1.f, mask.f, b1.f, p, scale); return nil },
				syncs(m.params), syncs(m.z1, m.a1, m.mask))
		},
		func() error { return m.gemm(s, false, false, B, classes, H, a1, w2, z2) },
		func() error {
			return m.run(s, "bias_add", grid1(B*classes), syncs(m.params), syncs(m.z2),
				func() { hostBiasAdd(z2.f, b2.f) }, z2.ptr(), b2.ptr(), uint32(B), uint32(classes))
		},
		func() error {
			inv := 1 / float32(B)
			return m.run(s, "softmax_ce", grid1(B), syncs(m.z2, m.yu8), syncs(m.dz2, m.rowloss, m.trainStats),
				func() { hostSoftmaxCE(z2.f, yu8.b, dz2.f, rowloss.f, stats.u[1:], inv) },
				z2.ptr(), yu8.ptr(), dz2.ptr(), rowloss.ptr(), stats.ptr()+4, uint32(B), inv)
		},
		func() error {
			return m.run(s, "loss_store", grid1(1), syncs(m.rowloss), syncs(m.losses, m.trainStats),
				func() { hostLossStore(rowloss.f, losses.f, stats.u) },
				rowloss.ptr(), losses.ptr(), stats.ptr(), uint32(B))
		},
		func() error { return m.gemm(s, true, false, H, classes, B, a1, dz2, gw2) },
		func() error {
			return m.run(s, "bias_grad", grid1(classes), syncs(m.dz2), syncs(m.grads),
				func() { hostBiasGrad(dz2.f, gb2.f) }, dz2.ptr(), gb2.ptr(), uint32(B), uint32(classes))
		},
		func() error { return m.gemm(s, false, true, B, H, classes, dz2, w2, da1) },
		func() error {
			return m.run(s, "relu_dropout_bwd", grid1(B*H), syncs(m.z1, m.mask), syncs(m.da1),
				func() { hostReLUDropoutBwd(da1.f, z1.f, mask.f) }, da1.ptr(), z1.ptr(), mask.ptr(), uint32(B*H))
		},
		func() error { return m.gemm(s, true, false, inputs, H, B, xf, da1, gw1) },
		func() error {
			return m.run(s, "bias_grad", grid1(H), syncs(m.da1), syncs(m.grads),
				func() { hostBiasGrad(da1.f, gb1.f) }, da1.ptr(), gb1.ptr(), uint32(B), uint32(H))
		},
		func() error {
			pa, va, ga := m.f32(m.params, 0, m.nParams), m.f32(m.vel, 0, m.nParams), m.f32(m.grads, 0, m.nParams)
			lr, mu, wd := m.lr, m.mu, m.wd
			return m.run(s, "sgd_momentum", grid1(m.nParams), syncs(m.grads), syncs(m.params, m.vel),
				func() { hostSGD(pa.f, va.f, ga.f, lr, mu, wd) },
				pa.ptr(), va.ptr(), ga.ptr(), uint32(m.nParams), lr, mu, wd)
		},
	}
	for _, st := range steps {
		if err := st(); err != nil {
			return err
		}
	}
	return nil
}

// evaluate counts the test images the model classifies right, on stream s:
// it reads the parameters (so it runs after the last update enqueued on
// the training stream, and the next update waits for it), and returns the
// count once done.
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
		if err := m.run(s, "u8_to_f32", grid1(rows*inputs), syncs(m.testX), syncs(m.exf),
			func() { hostU8ToF32(xf.f, x.b) }, xf.ptr(), x.ptr(), uint32(rows*inputs)); err != nil {
			return 0, err
		}
		if err := m.gemm(s, false, false, rows, H, inputs, xf, w1, z1); err != nil {
			return 0, err
		}
		if err := m.run(s, "bias_relu", grid1(rows*H), syncs(m.params), syncs(m.ez1),
			func() { hostBiasReLU(z1.f, b1.f) }, z1.ptr(), b1.ptr(), uint32(rows), uint32(H)); err != nil {
			return 0, err
		}
		if err := m.gemm(s, false, false, rows, classes, H, z1, w2, z2); err != nil {
			return 0, err
		}
		if err := m.run(s, "bias_add", grid1(rows*classes), syncs(m.params), syncs(m.ez2),
			func() { hostBiasAdd(z2.f, b2.f) }, z2.ptr(), b2.ptr(), uint32(rows), uint32(classes)); err != nil {
			return 0, err
		}
		if err := m.run(s, "eval_count", grid1(rows), syncs(m.ez2, m.testY), syncs(m.evalStat),
			func() { hostEvalCount(z2.f, y.b, cnt.u) }, z2.ptr(), y.ptr(), cnt.ptr(), uint32(rows)); err != nil {
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
