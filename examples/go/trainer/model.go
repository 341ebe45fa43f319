package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

const (
	inputs  = 28 * 28
	classes = 10
	// maxInputSets: two groups of up to four steps (stepGroup).
	maxInputSets = 8
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
	// lossInSGD: gemm_tn_sgd stores the loss (one more block) and the step
	// has no loss_store kernel.
	lossInSGD bool
	dropout   float32
	scale     float32 // 1/(1-dropout)
	lr, mu    float32
	wd        float32

	// The input sets, written by the input stage (loadInput): each a batch's
	// pixels as the products' x operand (bf16 when half, else floats) and
	// its labels. A step reads set parity (useInput), of the first sets
	// (2, or twice the steps of a group: see stepGroup).
	inX, inY [maxInputSets]*sluice.Buffer
	parity   int
	sets     int
	// inputAhead is the stream whose last kernel wrote an input of the wgmma
	// x W1 (writesXW1Inputs: x, the mask drawn ahead; run and stepGroup keep
	// it; nil: none). x W1 loads them before its wait, so
	// on that stream it launches by xW1NotEarly, a handle of the same kernel
	// without programmatic launch.
	inputAhead  *sluice.Stream
	xW1NotEarly *sluice.Function
	// The blocking path's batch, copied from Go memory, laid out as a
	// prefetched one (batchSource).
	stage *sluice.Buffer
	// Activations and gradients of one step. On the cuda backend a1 is the
	// only hidden activation kept (the backward pass reads relu and dropout
	// off a1 > 0); mask holds the host backend's dropout draws, z2 its logits.
	a1, mask, z2, dz2, da1, rowloss *sluice.Buffer
	// cuda: the split-K GEMMs' partial tiles and per-tile tickets (zero
	// between launches), used by the training stream only.
	gemmWS, gemmTickets *sluice.Buffer
	gemmSuffix          string // "" (TF32 tensor cores) or "_simt" (FP32), from selfTest
	// cuda, half: the training step's products take bf16 operands (selfTest):
	// x in the input sets, W1 as w1h (written by gemm_tn_sgd, and by
	// halfWeights from the parameters), da1 as da1h (written by fwd2_ce).
	half      bool
	w1h, da1h *sluice.Buffer
	// cuda, half and tiled: the products are the warpgroup-MMA kernels (_wg,
	// selfTest), whose bf16 operands are pre-tiled (kernelTiles): an input
	// set holds x as x W1's A, which x^T da1 reads with other strides.
	tiled bool
	// Parameters [W1 (inputs x H), b1 (H), W2 (H x classes), b2 (classes)],
	// the momentum, and on the host backend the gradients, in one layout (the
	// kernels step the parameters from their own sums: no gradient is
	// written out).
	params, grads, vel *sluice.Buffer
	// trainStats: [0] steps of the epoch so far, [1] right predictions;
	// losses: the loss of each step of the epoch.
	trainStats, losses *sluice.Buffer
	maxSteps           int

	// Evaluation, on its own stream: the test set and its buffers.
	testX, testY            *sluice.Buffer
	nTest                   int
	exf, ez1, ez2, evalStat *sluice.Buffer

	rng     *rng
	nStates int            // dropStates(B, H)
	states  *sluice.Buffer // cuda: the RNG's states, drawn from by gemm_nn_bias_relu_drop
	// preDraw (cuda, tiled, dropout > 0): the dropout of the wgmma x W1 is
	// drawn a step ahead into dropBits, by fwd2_ce (drop_mask for the first
	// step), so that x W1 reads 16 bits per thread instead of drawing them.
	preDraw  bool
	dropBits *sluice.Buffer
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
	gemm          string   // cuda: "wgmma", "bf16", "tf32" or "fp32" (selfTest falls back in that order)
	pdlKernels    []string // cuda, compute capability 9.0+: name prefixes of the kernels launched with programmatic dependent launch
}

func newModel(dev *sluice.Device, s *sluice.Stream, hp hyper, maxSteps int, testX, testY []byte) (*model, error) {
	be, err := dev.Backend()
	if err != nil {
		return nil, err
	}
	m := &model{
		dev: dev, host: be == sluice.BackendHost,
		B: hp.batch, H: hp.hidden, dropout: hp.dropout, scale: 1 / (1 - hp.dropout),
		lr: hp.lr, mu: hp.mu, wd: hp.wd, maxSteps: maxSteps, sets: 2,
	}
	m.nParams = inputs*m.H + m.H + m.H*classes + classes
	m.nStates = dropStates(m.B, m.H)
	if !m.host {
		opts := defineOptions(kernelDefinitions())
		if hp.gemm == "wgmma" {
			props, err := dev.Props()
			if err != nil {
				return nil, err
			}
			// The warpgroup-MMA kernels need sm_90a, the code of exactly 9.0.
			if props.ComputeCapabilityMajor == 9 && props.ComputeCapabilityMinor == 0 {
				opts = append(opts, "--gpu-architecture=sm_90a")
			}
		}
		if m.mod, err = compileModule(dev, kernelSource, "trainer.cu", opts...); err != nil {
			return nil, fmt.Errorf("compiling the kernels: %w", err)
		}
		m.fns = make(map[string]*sluice.Function)
		for _, n := range kernelNames {
			f, err := m.mod.Function(n)
			switch {
			case err == nil:
				m.fns[n] = f
			// The BF16 kernels need sm_90, the warpgroup-MMA ones sm_90a (selfTest).
			case !strings.HasSuffix(n, "_bf16") && !strings.HasSuffix(n, "_wg"):
				return nil, err
			}
		}
		// The warpgroup-MMA products hold their tiles' whole K range in shared memory.
		for n, f := range m.fns {
			if strings.HasSuffix(n, "_wg") && f.SetMaxDynamicSharedMemory(wgShared(max(inputs, hp.batch))) != nil {
				delete(m.fns, n) // too large a batch: selfTest falls back
			}
		}
		if m.fns[xW1ReadsBeforeWait] != nil {
			if m.xW1NotEarly, err = m.mod.Function(xW1ReadsBeforeWait); err != nil {
				return nil, err
			}
		}
		if err := m.programmaticLaunch(hp.pdlKernels); err != nil {
			return nil, err
		}
	}
	B, H := m.B, m.H
	m.nTest = len(testY)
	type alloc struct {
		p *(*sluice.Buffer)
		n int // bytes
	}
	// An input set's pixels take floats' room, or bf16, or bf16 pre-tiled in
	// whole tiles of rows (selfTest decides).
	setX := max(4*B*inputs, 2*tiledLen(wgBM, B, inputs))
	var allocs []alloc
	for i := range m.inX {
		allocs = append(allocs, alloc{&m.inX[i], setX}, alloc{&m.inY[i], B})
	}
	allocs = append(allocs, []alloc{
		{&m.stage, B * (inputs + 1)},
		{&m.a1, 4 * B * H}, {&m.mask, 4 * dropDraws * m.nStates}, {&m.da1, 4 * B * H},
		{&m.z2, 4 * B * classes}, {&m.dz2, 4 * B * classes}, {&m.rowloss, 4 * B},
		{&m.params, 4 * m.nParams}, {&m.vel, 4 * m.nParams},
		{&m.trainStats, 8}, {&m.losses, 4 * max(maxSteps, 1)},
		{&m.testX, max(len(testX), 1)}, {&m.testY, max(len(testY), 1)},
		{&m.exf, 4 * B * inputs}, {&m.ez1, 4 * B * H}, {&m.ez2, 4 * B * classes}, {&m.evalStat, 4},
	}...)
	if m.host {
		allocs = append(allocs, alloc{&m.grads, 4 * m.nParams})
	} else {
		zs := max(gemmSplits(inputs, gemmKChunkNN)*B*H, gemmSplits(B, gemmKChunkTN)*inputs*H)
		tiles := max(ceilDiv(B, gemmBM), ceilDiv(inputs, gemmBM)) * ceilDiv(H, gemmBN)
		allocs = append(allocs, alloc{&m.gemmWS, 4 * zs}, alloc{&m.gemmTickets, 4 * tiles}, alloc{&m.dropBits, dropBitsLen(B, H)},
			alloc{&m.w1h, 2 * tiledLen(wgBN, H, inputs)}, alloc{&m.da1h, 2 * tiledLen(wgBN, H, B)})
	}
	for _, a := range allocs {
		if *a.p, err = s.Alloc(a.n); err != nil {
			return nil, err
		}
	}
	m.useInput(0)
	if !m.host {
		if err := sluice.Memset(s, m.gemmTickets, 0, 0, m.gemmTickets.Size()); err != nil {
			return nil, err
		}
		// Every byte of the mask is drawn; zeroed, a checkpoint's bytes never depend on the allocation.
		if err := sluice.Memset(s, m.dropBits, 0, 0, m.dropBits.Size()); err != nil {
			return nil, err
		}
		if err := m.selfTest(s, hp.gemm); err != nil {
			return nil, err
		}
		m.preDraw = m.tiled && m.dropout > 0
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
	// One RNG state per thread of the first GEMM's epilogue, each drawing the
	// dropout of that thread's dropDraws elements (dropDraw): on the GPU in
	// gemm_nn_bias_relu_drop through <sluice/rng.cuh>, on the host backend
	// with RNG.Generate.
	if m.rng, err = newRNG(s, hp.rngSeed, m.nStates); err != nil {
		return nil, err
	}
	if !m.host {
		if m.states, err = m.rng.States(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// programmaticLaunch lets each kernel whose name starts with one of kernels
// start while the kernel ahead of it finishes (each begins with pdl_enter),
// on devices of compute capability 9.0 and newer (run launches the wgmma
// x W1 without it behind an input stage).
func (m *model) programmaticLaunch(kernels []string) error {
	if len(kernels) == 0 {
		return nil
	}
	props, err := m.dev.Props()
	if err != nil || props.ComputeCapabilityMajor < 9 {
		return err
	}
	for name, f := range m.fns {
		for _, k := range kernels {
			if k != "" && strings.HasPrefix(name, k) {
				if err := f.SetProgrammaticLaunch(true); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

func (m *model) Close() {
	bufs := append(m.inX[:], m.inY[:]...)
	bufs = append(bufs, m.stage, m.a1, m.mask, m.z2, m.dz2, m.da1,
		m.rowloss, m.params, m.grads, m.vel, m.trainStats, m.losses, m.testX, m.testY,
		m.exf, m.ez1, m.ez2, m.evalStat, m.states, m.gemmWS, m.gemmTickets, m.w1h, m.da1h, m.dropBits)
	for _, b := range bufs {
		if b != nil {
			b.Close()
		}
	}
	if m.rng != nil {
		m.rng.Close()
	}
	if m.xW1NotEarly != nil {
		m.xW1NotEarly.Close()
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

// uniq drops repeated buffers, keeping the first of each.
func uniq(ss []sluice.Syncable) []sluice.Syncable {
	out := ss[:0:0]
	for _, x := range ss {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func grid1(n int) sluice.LaunchConfig {
	return sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32((n + 255) / 256)}, Block: sluice.Dim3{X: 256}}
}

// run enqueues one kernel on s as one tracked op that reads and writes the
// given buffers: the CUDA function name with args, or on the host backend
// the host callback fn, after the check of the arguments' number that the
// driver makes on cuda.
func (m *model) run(s *sluice.Stream, name string, cfg sluice.LaunchConfig, reads, writes []sluice.Syncable, fn func(), args ...any) error {
	if m.host {
		n, ok := kernelParamCount(name)
		if !ok {
			return fmt.Errorf("no kernel %q in the kernel source", name)
		}
		if n != len(args) {
			return fmt.Errorf("kernel %q takes %d parameters, %d arguments were given", name, n, len(args))
		}
		return s.HostCallback(func() error { fn(); return nil }, reads, writes)
	}
	f := m.fns[name]
	if name == xW1ReadsBeforeWait && m.inputAhead == s && m.xW1NotEarly != nil {
		f = m.xW1NotEarly
	}
	if slices.ContainsFunc(writesXW1Inputs, func(p string) bool { return strings.HasPrefix(name, p) }) {
		m.inputAhead = s
	} else if m.inputAhead == s {
		m.inputAhead = nil
	}
	return f.Launch(s, cfg, reads, writes, args...)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// ceGrid is fwd2_ce's launch: a block of ceThreads per row.
func ceGrid(rows int) sluice.LaunchConfig {
	return sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32(rows)}, Block: sluice.Dim3{X: ceThreads}}
}

// grid4 covers n elements at four per thread.
func grid4(n int) sluice.LaunchConfig { return grid1(ceilDiv(n, 4)) }

// grid8 is a launch of a thread per 8 of n elements (and at least one per row
// of the input stage's labels: n counts 784 pixels per row).
func grid8(n int) sluice.LaunchConfig { return grid1(ceilDiv(n, 8)) }

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
	S := m.nStates
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

// drawFirstMask draws the next step's dropout mask for the wgmma x W1 (a
// no-op unless preDraw): before the first step, when no checkpoint brought
// it. From then on each step's fwd2_ce draws the next one's.
func (m *model) drawFirstMask(s *sluice.Stream) error {
	if !m.preDraw {
		return nil
	}
	return m.run(s, "drop_mask", grid1(m.nStates), nil, syncs(m.states, m.dropBits), nil,
		m.states.DevicePtr(), uint32(m.nStates), m.dropout, uint32(m.H), m.dropBits.DevicePtr())
}

// halfWeights writes W1's bf16 copy from the parameters (after initParams
// or a resume), pre-tiled when tiled; from then on gemm_tn_sgd keeps it. A
// no-op unless half.
func (m *model) halfWeights(s *sluice.Stream) error {
	if !m.half {
		return nil
	}
	n := inputs * m.H
	if m.tiled {
		return m.run(s, "w1_to_bf16_tiled", grid1(n/2), syncs(m.params), syncs(m.w1h), nil,
			m.w1h.DevicePtr(), m.w1(m.params).ptr(), uint32(inputs), uint32(m.H))
	}
	return m.run(s, "f32_to_bf16", grid1(n), syncs(m.params), syncs(m.w1h), nil,
		m.w1h.DevicePtr(), m.w1(m.params).ptr(), uint32(n))
}
