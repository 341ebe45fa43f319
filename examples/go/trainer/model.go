package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

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
	// lossInBwd2: bwd2 stores the loss (one more block) and the step has no
	// loss_store kernel.
	lossInBwd2 bool
	dropout    float32
	scale      float32 // 1/(1-dropout)
	lr, mu     float32
	wd         float32

	// The input sets, written by the input stage (loadInput): each a batch's
	// pixels as the products' x operand (bf16 when half, else floats) and
	// its labels. A step reads set parity (useInput), of the first sets
	// (2, or 4 for graphs of two steps: see steps2).
	inX, inY [4]*sluice.Buffer
	parity   int
	sets     int
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
	// halfWeights from the parameters), da1 as da1h (written by bwd2).
	half      bool
	w1h, da1h *sluice.Buffer
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
	gemm          string   // cuda: "bf16", "tf32" or "fp32" (selfTest falls back in that order)
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
		if m.mod, err = compileModule(dev, kernelSource, "trainer.cu", defineOptions(kernelDefinitions())...); err != nil {
			return nil, fmt.Errorf("compiling the kernels: %w", err)
		}
		m.fns = make(map[string]*sluice.Function)
		for _, n := range kernelNames {
			f, err := m.mod.Function(n)
			switch {
			case err == nil:
				m.fns[n] = f
			case !strings.HasSuffix(n, "_bf16"): // the BF16 kernels need sm_90 (selfTest)
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
	allocs := []alloc{
		// An input set's pixels take floats' room, or bf16 (selfTest decides).
		{&m.inX[0], 4 * B * inputs}, {&m.inY[0], B}, {&m.inX[1], 4 * B * inputs}, {&m.inY[1], B},
		{&m.inX[2], 4 * B * inputs}, {&m.inY[2], B}, {&m.inX[3], 4 * B * inputs}, {&m.inY[3], B},
		{&m.stage, B * (inputs + 1)},
		{&m.a1, 4 * B * H}, {&m.mask, 4 * dropDraws * m.nStates}, {&m.da1, 4 * B * H},
		{&m.z2, 4 * B * classes}, {&m.dz2, 4 * B * classes}, {&m.rowloss, 4 * B},
		{&m.params, 4 * m.nParams}, {&m.vel, 4 * m.nParams},
		{&m.trainStats, 8}, {&m.losses, 4 * max(maxSteps, 1)},
		{&m.testX, max(len(testX), 1)}, {&m.testY, max(len(testY), 1)},
		{&m.exf, 4 * B * inputs}, {&m.ez1, 4 * B * H}, {&m.ez2, 4 * B * classes}, {&m.evalStat, 4},
	}
	if m.host {
		allocs = append(allocs, alloc{&m.grads, 4 * m.nParams})
	} else {
		zs := max(gemmSplits(inputs, gemmKChunkNN)*B*H, gemmSplits(B, gemmKChunkTN)*inputs*H)
		tiles := max(ceilDiv(B, gemmBM), ceilDiv(inputs, gemmBM)) * ceilDiv(H, gemmBN)
		allocs = append(allocs, alloc{&m.gemmWS, 4 * zs}, alloc{&m.gemmTickets, 4 * tiles},
			alloc{&m.w1h, 2 * inputs * H}, alloc{&m.da1h, 2 * B * H})
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
		if err := m.selfTest(s, hp.gemm); err != nil {
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
// on devices of compute capability 9.0 and newer.
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
	bufs := []*sluice.Buffer{m.inX[0], m.inY[0], m.inX[1], m.inY[1], m.inX[2], m.inY[2], m.inX[3], m.inY[3], m.stage, m.a1, m.mask, m.z2, m.dz2, m.da1,
		m.rowloss, m.params, m.grads, m.vel, m.trainStats, m.losses, m.testX, m.testY,
		m.exf, m.ez1, m.ez2, m.evalStat, m.states, m.gemmWS, m.gemmTickets, m.w1h, m.da1h}
	for _, b := range bufs {
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
// the host callback fn.
func (m *model) run(s *sluice.Stream, name string, cfg sluice.LaunchConfig, reads, writes []sluice.Syncable, fn func(), args ...any) error {
	if m.host {
		return s.HostCallback(func() error { fn(); return nil }, reads, writes)
	}
	return m.fns[name].Launch(s, cfg, reads, writes, args...)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// ceGrid is fwd2_ce's launch: a block of ceThreads per row.
func ceGrid(rows int) sluice.LaunchConfig {
	return sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32(rows)}, Block: sluice.Dim3{X: ceThreads}}
}

// dropStates is the number of RNG states the dropout draws from: one per
// thread of each tile of the rows x hid product (gemm_tile's epilogue).
func dropStates(rows, hid int) int {
	return ceilDiv(rows, gemmBM) * ceilDiv(hid, gemmBN) * gemmThreads
}

// dropDraw is the RNG state and the draw (0..dropDraws-1) that decide the
// dropout of element (r, c) of a rows x hid activation, as gemm_tile's
// epilogue assigns them: in tile (r/gemmBM, c/gemmBN), warp w covers rows
// wm.. and columns wn.. (wm = 16*gemmMI*(w/2), wn = 8*gemmNJ*(w%2)); its lane
// (g = lane/4, t = lane%4) holds element e of m16n8 tile (i, j) at row
// wm+16i+g+8(e/2), column wn+8j+2t+e%2, and draws (i*gemmNJ+j)*4+e for it.
func dropDraw(r, c, hid int) (state, draw int) {
	tile := (r/gemmBM)*ceilDiv(hid, gemmBN) + c/gemmBN
	lr, lc := r%gemmBM, c%gemmBN
	wr, wc := lr/(16*gemmMI), lc/(8*gemmNJ)
	lr, lc = lr%(16*gemmMI), lc%(8*gemmNJ)
	i, j := lr/16, lc/8
	g, t := lr%8, (lc%8)/2
	e := ((lr%16)/8)*2 + lc%2
	return tile*gemmThreads + (wr*2+wc)*32 + g*4 + t, (i*gemmNJ+j)*4 + e
}

// gemmSplits is the number of blocks a GEMM's K is split across (gemm_tile)
// in chunks of chunk.
func gemmSplits(K, chunk int) int { return max(ceilDiv(K, chunk), 1) }

// gemmOp is one launch of a gemm_tile kernel: C = op(A) * B (+ epilogue).
type gemmOp struct {
	name    string // gemm_nn, gemm_tn, gemm_nn_bias_relu, gemm_nn_bias_relu_drop
	suffix  string // the kernel's precision: "" (TF32), "_simt" or "_bf16"; unset: m.gemmSuffix
	M, N, K int
	chunk   int // > 0: split K across blocks in chunks of this (the training stream's workspace)
	A, B, C arr
	extra   []any             // the epilogue's arguments, between C and the workspace
	reads   []sluice.Syncable // besides A and B
	writes  []sluice.Syncable // besides C (and the workspace)
	host    func()            // the host backend's callback
}

// gemm enqueues g: on cuda the kernel (TF32, or the FP32 fallback picked by
// selfTest) on a grid of 32x32 tiles times the K splits.
func (m *model) gemm(s *sluice.Stream, g gemmOp) error {
	reads := uniq(append(syncs(g.A.buf, g.B.buf), g.reads...))
	writes := uniq(append(syncs(g.C.buf), g.writes...))
	if m.host {
		return m.run(s, "", sluice.LaunchConfig{}, reads, writes, g.host)
	}
	kchunk, z := g.K, 1
	var ws, tickets uint64
	suffix := g.suffix
	if suffix == "" {
		suffix = m.gemmSuffix
	}
	cluster := 0
	if suffix == "_bf16" {
		cluster = gemmClusterNN
		if strings.HasPrefix(g.name, "gemm_tn") {
			cluster = gemmClusterTN
		}
	}
	if cluster > 0 {
		// One cluster of z blocks per tile, K in chunks of whole stages.
		z = cluster
		kchunk = ceilDiv(ceilDiv(g.K, z), gemmBK) * gemmBK
	} else if g.chunk > 0 {
		kchunk, z = g.chunk, gemmSplits(g.K, g.chunk)
		if z > 1 {
			ws, tickets = m.gemmWS.DevicePtr(), m.gemmTickets.DevicePtr()
			writes = append(writes, m.gemmWS, m.gemmTickets)
		}
	}
	cfg := sluice.LaunchConfig{
		Grid:  sluice.Dim3{X: uint32(ceilDiv(g.N, gemmBN)), Y: uint32(ceilDiv(g.M, gemmBM)), Z: uint32(z)},
		Block: sluice.Dim3{X: gemmThreads},
	}
	args := []any{int32(g.M), int32(g.N), int32(g.K), int32(kchunk), g.A.ptr(), g.B.ptr(), g.C.ptr()}
	args = append(append(args, g.extra...), ws, tickets)
	return m.fns[g.name+suffix].Launch(s, cfg, reads, writes, args...)
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

// halfWeights writes W1's bf16 copy from the parameters (after initParams
// or a resume); from then on gemm_tn_sgd keeps it. A no-op unless half.
func (m *model) halfWeights(s *sluice.Stream) error {
	if !m.half {
		return nil
	}
	n := inputs * m.H
	return m.run(s, "f32_to_bf16", grid1(n), syncs(m.params), syncs(m.w1h), nil,
		m.w1h.DevicePtr(), m.w1(m.params).ptr(), uint32(n))
}

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
// into the products' x operand (x / 255, as bf16 when half) and copies its
// labels, into the input set in use. It runs beside the step before (on the
// input stream), outside the captured step.
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
			x.DevicePtr(), y.DevicePtr(), px, labels, uint32(n), uint32(m.B))
	}
	xf, yb := m.f32(x, 0, n), m.u8(y, 0, m.B)
	return m.run(s, "input_f32", grid4(n), reads, writes,
		func() { hostU8ToF32(xf.f, src.host[:n]); copy(yb.b, src.host[n:]) },
		x.DevicePtr(), y.DevicePtr(), px, labels, uint32(n), uint32(m.B))
}

// loadInputPair is the input stage of a graph of two steps (steps2): src0
// into input set m.parity and src1 into the next, with one kernel when half
// (the other kinds and the host backend run loadInput twice).
func (m *model) loadInputPair(s *sluice.Stream, src0, src1 batchSource) error {
	first := m.parity
	defer func() { m.parity = first }()
	if !m.half || src0.sync != nil || src1.sync != nil {
		if err := m.loadInput(s, src0); err != nil {
			return err
		}
		m.parity = first + 1
		return m.loadInput(s, src1)
	}
	n := m.B * inputs
	x0, y0, x1, y1 := m.inX[first], m.inY[first], m.inX[first+1], m.inY[first+1]
	cfg := grid8(n)
	cfg.Grid.Y = 2
	return m.run(s, "input_pair_bf16", cfg, nil, syncs(x0, y0, x1, y1), nil,
		x0.DevicePtr(), y0.DevicePtr(), src0.addr, src0.addr+uint64(n),
		x1.DevicePtr(), y1.DevicePtr(), src1.addr, src1.addr+uint64(n), uint32(n), uint32(m.B))
}

// step issues one training step on s: replayed from cache, keyed by the
// input set, or eager when cache is nil.
func (m *model) step(cache *sluice.GraphCache, s *sluice.Stream) error {
	if cache != nil {
		return cache.Run(uint64(m.parity), s, m.trainStep)
	}
	return m.trainStep(s)
}

// steps2 issues two training steps on s, over input sets m.parity (even)
// and m.parity + 1, as one graph replayed from cache: the device then pays
// one graph boundary per two steps, and the second step's first kernel may
// start while the first step's last one finishes (programmatic launch).
// With four sets, the input stage of the next two batches runs beside it.
// Its kernels are the same ops in the same order as two step calls, so the
// losses and weights are bit-identical to theirs. m.parity ends at the second.
func (m *model) steps2(cache *sluice.GraphCache, s *sluice.Stream) error {
	first := m.parity
	err := cache.Run(uint64(m.sets+first), s, func(s *sluice.Stream) error {
		m.parity = first
		if err := m.trainStep(s); err != nil {
			return err
		}
		m.parity = first + 1
		return m.trainStep(s)
	})
	m.parity = first + 1
	return err
}

// trainStep enqueues one training step on s over the input set in use
// (loadInput wrote it): forward, loss, backward and the SGD update, each a tracked op whose
// reads and writes order it (5 kernels, listed in kernels.go). It issues the
// same ops every time, so a graph captured from it can be replayed for every
// step (the step index lives in trainStats on the device).
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
	// which bwd2 steps; gemm_tn_sgd steps W1.
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
	// The products' operands: x, W1 and da1 as floats, or their bf16 copies.
	x, w1op, da1op, gemmSuffix := xf, w1, da1, m.gemmSuffix
	var da1h, w1h uint64 // bwd2's and gemm_tn_sgd's bf16 outputs (0: none)
	if m.half {
		x, w1op, da1op = arr{buf: xin}, arr{buf: m.w1h}, arr{buf: m.da1h}
		da1h, w1h, gemmSuffix = m.da1h.DevicePtr(), m.w1h.DevicePtr(), "_bf16"
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
			var states uint64
			rngBuf := syncs(m.mask) // the host's draws
			if !m.host {
				states, rngBuf = m.states.DevicePtr(), syncs(m.states)
			}
			return m.gemm(s, gemmOp{
				name: "gemm_nn_bias_relu_drop", suffix: gemmSuffix, M: B, N: H, K: inputs, chunk: gemmKChunkNN,
				A: x, B: w1op, C: a1, extra: []any{b1.ptr(), states, p, scale}, reads: syncs(m.params), writes: rngBuf,
				host: func() {
					hostGemm(false, false, B, H, inputs, xf.f, w1.f, a1.f)
					hostBiasReLUDropout(a1.f, draws.f, b1.f, B, p, scale)
				},
			})
		},
		// logits = a1 W2 + b2; softmax cross-entropy: dz2, the rows' losses, right predictions
		func() error {
			return m.run(s, "fwd2_ce", ceGrid(B), syncs(m.a1, m.params, yin), syncs(m.z2, m.dz2, m.rowloss, m.trainStats),
				func() {
					hostGemm(false, false, B, classes, H, a1.f, w2.f, z2.f)
					hostBiasAdd(z2.f, b2.f)
					hostSoftmaxCE(z2.f, yu8.b, dz2.f, rowloss.f, stats.u[1:], inv)
				},
				a1.ptr(), w2.ptr(), b2.ptr(), yu8.ptr(), dz2.ptr(), rowloss.ptr(), stats.ptr()+4,
				uint32(B), uint32(H), inv, int32(1))
		},
		func() error {
			if m.lossInBwd2 {
				return nil // bwd2 stores it
			}
			return m.run(s, "loss_store", sluice.LaunchConfig{Grid: sluice.Dim3{X: 1}, Block: sluice.Dim3{X: 256}},
				syncs(m.rowloss), syncs(m.losses, m.trainStats),
				func() { hostLossStore(rowloss.f, losses.f, stats.u) },
				rowloss.ptr(), losses.ptr(), stats.ptr(), uint32(B))
		},
		// da1, dW2, db2, db1, and the SGD step of b1, W2 and b2
		func() error {
			blocks := ceilDiv(H+1, bwd2Units)
			reads, writes := syncs(m.a1, m.dz2), append(syncs(da1op.buf, m.params, m.vel), hostGrads...)
			var lossArgs [3]uint64 // rowloss, losses, the counter: bwd2's last block stores the loss
			if m.lossInBwd2 {
				blocks++
				reads, writes = append(reads, m.rowloss), append(writes, m.losses, m.trainStats)
				lossArgs = [3]uint64{rowloss.ptr(), losses.ptr(), stats.ptr()}
			}
			cfg := sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32(blocks)}, Block: sluice.Dim3{X: 256}}
			return m.run(s, "bwd2", cfg, reads, writes,
				func() {
					if m.lossInBwd2 {
						hostLossStore(rowloss.f, losses.f, stats.u)
					}
					hostBwd2(B, H, a1.f, dz2.f, w2.f, da1.f, gw2.f, gb1.f, gb2.f, scale)
					hostSGD(pRest.f, vRest.f, gRest.f, lr, mu, wd)
				},
				a1.ptr(), dz2.ptr(), w2.ptr(), da1.ptr(), da1h, pRest.ptr(), vRest.ptr(), uint32(B), uint32(H), scale, lr, mu, wd,
				lossArgs[0], lossArgs[1], lossArgs[2])
		},
		// dW1 = x^T da1, and the SGD step of W1 (and its bf16 copy)
		func() error {
			writes := append(syncs(m.vel), hostGrads...)
			if m.half {
				writes = append(writes, m.w1h)
			}
			return m.gemm(s, gemmOp{
				name: "gemm_tn_sgd", suffix: gemmSuffix, M: inputs, N: H, K: B, chunk: gemmKChunkTN, A: x, B: da1op, C: pW1,
				extra: []any{vW1.ptr(), w1h, lr, mu, wd}, writes: writes,
				host: func() {
					hostGemm(true, false, inputs, H, B, xf.f, da1.f, gw1.f)
					hostSGD(pW1.f, vW1.f, gw1.f, lr, mu, wd)
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
			uint32(rows), uint32(H), float32(0), int32(0)); err != nil {
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

// selfTest checks the GEMM kernels on the device against hostGemm, on
// random data of the training step's shapes (split K included), before any
// training. For the float products (evaluation, and the step unless half):
// the TF32 tensor-core kernels, or if they disagree (or want is "fp32") the
// FP32 kernels without tensor cores (gemm_*_simt). For the step's products
// when want is "bf16": the BF16 kernels on bf16-rounded data; if they
// disagree, the step uses the float kernels. It fails if no float kernel
// agrees, and prints what it found.
func (m *model) selfTest(s *sluice.Stream, want string) error {
	B, H := m.B, m.H
	r := rand.New(rand.NewPCG(7, 11))
	rnd := func(n int, half bool) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32() - 0.5
			if half {
				v[i] = bf2f(f2bf(v[i]))
			}
		}
		return v
	}
	cases := []struct {
		name           string
		ta             bool
		M, N, K, chunk int
	}{
		{"gemm_nn", false, B, H, inputs, gemmKChunkNN}, // x W1
		{"gemm_tn", true, inputs, H, B, gemmKChunkTN},  // x^T da1
	}
	// upload copies v to a new buffer, as floats or as bf16.
	upload := func(v []float32, half bool) (*sluice.Buffer, error) {
		size := 4 * len(v)
		if half {
			size = 2 * len(v)
		}
		b, err := s.Alloc(size)
		if err != nil {
			return nil, err
		}
		if half {
			h := make([]uint16, len(v))
			for i, x := range v {
				h[i] = f2bf(x)
			}
			err = sluice.CopyFromHostSlice(s, b, 0, h)
		} else {
			err = sluice.CopyFromHostSlice(s, b, 0, v)
		}
		if err != nil {
			b.Close()
			return nil, err
		}
		return b, nil
	}
	// worst is the largest error of the kernels of suffix, relative to the
	// largest output (TF32: about 1e-3).
	worst := func(suffix string) (float64, error) {
		half := suffix == "_bf16"
		var w float64
		for _, c := range cases {
			A, Bm := rnd(c.M*c.K, half), rnd(c.K*c.N, half)
			want, got := make([]float32, c.M*c.N), make([]float32, c.M*c.N)
			hostGemm(c.ta, false, c.M, c.N, c.K, A, Bm, want)
			ab, err := upload(A, half)
			if err != nil {
				return 0, err
			}
			defer ab.Close()
			bb, err := upload(Bm, half)
			if err != nil {
				return 0, err
			}
			defer bb.Close()
			cb, err := s.Alloc(4 * len(got))
			if err != nil {
				return 0, err
			}
			defer cb.Close()
			err = m.gemm(s, gemmOp{name: c.name, suffix: suffix, M: c.M, N: c.N, K: c.K, chunk: c.chunk,
				A: arr{buf: ab}, B: arr{buf: bb}, C: arr{buf: cb}})
			if err != nil {
				return 0, err
			}
			if err := sluice.CopyToHostSlice(s, got, cb, 0); err != nil {
				return 0, err
			}
			var maxAbs, maxErr float64
			for i := range want {
				maxAbs = max(maxAbs, math.Abs(float64(want[i])))
				maxErr = max(maxErr, math.Abs(float64(got[i]-want[i])))
			}
			w = max(w, maxErr/max(maxAbs, 1e-30))
		}
		return w, nil
	}
	const tol = 1e-2
	tf32 := want != "fp32"
	if tf32 {
		e, err := worst("")
		if err != nil {
			return err
		}
		if e <= tol {
			fmt.Printf("kernel self-test: TF32 tensor-core GEMMs agree with the host (max error %.2g of the largest output)\n", e)
		} else {
			fmt.Printf("kernel self-test: FAILED for the TF32 tensor-core GEMMs (max error %.3g of the largest output)\n", e)
			tf32 = false
		}
	}
	if !tf32 {
		e, err := worst("_simt")
		if err != nil {
			return err
		}
		if e > tol {
			return fmt.Errorf("kernel self-test: the FP32 GEMM kernels disagree with the host: max error %.3g of the largest output", e)
		}
		fmt.Printf("kernel self-test: using the FP32 GEMMs without tensor cores (max error %.2g)\n", e)
		m.gemmSuffix = "_simt"
	}
	if want == "bf16" && m.fns["gemm_tn_bf16"] == nil {
		fmt.Println("kernel self-test: no BF16 GEMMs (they split K in thread block clusters: sm_90 and newer); the step uses the float ones")
	} else if want == "bf16" {
		e, err := worst("_bf16")
		if err != nil {
			return err
		}
		if e <= tol {
			fmt.Printf("kernel self-test: BF16 tensor-core GEMMs agree with the host on bf16 data (max error %.2g); the step uses them\n", e)
			m.half = true
		} else {
			fmt.Printf("kernel self-test: FAILED for the BF16 tensor-core GEMMs (max error %.3g); the step uses the float ones\n", e)
		}
	}
	return nil
}
