package main

// The products' launches: tiling, split-K and the dropout draws' layout.

import (
	"strings"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// dropStates is the number of RNG states the dropout draws from: one per
// thread of each tile of the rows x hid product (gemm_tile's epilogue).
func dropStates(rows, hid int) int {
	return ceilDiv(rows, gemmBM) * ceilDiv(hid, gemmBN) * gemmThreads
}

// dropBitsLen is the size of the wgmma x W1's dropout mask drawn ahead
// (drop_mask_byte): 16 bits per thread of its 64 x 32 tiles.
func dropBitsLen(rows, hid int) int { return 2 * ceilDiv(rows, wgBM) * ceilDiv(hid, wgBN) * wgThreads }

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
	layer2  *layer2Args       // gemm_tn_sgd: its layer2_block blocks (nil: none)
}

// layer2Args are gemm_tn_sgd's last arguments: layer2_block's, run by
// blocks blocks past the product's tiles (rowloss 0: no loss block).
// gemm_tn_sgd always has them.
type layer2Args struct {
	blocks                   int
	a1, dz2, p1, v1          uint64
	scale                    float32
	rowloss, losses, counter uint64
}

func (l *layer2Args) args() []any {
	return []any{l.a1, l.dz2, l.p1, l.v1, l.scale, l.rowloss, l.losses, l.counter}
}

// gemm enqueues g: on cuda the kernel (TF32, or the FP32 fallback picked by
// selfTest) on a grid of 32x32 tiles times the K splits; the warpgroup-MMA
// kernels (_wg) on whole 64x32 tiles.
func (m *model) gemm(s *sluice.Stream, g gemmOp) error {
	reads := uniq(append(syncs(g.A.buf, g.B.buf), g.reads...))
	writes := uniq(append(syncs(g.C.buf), g.writes...))
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
	bm, bn, shared := gemmBM, gemmBN, 0
	if suffix == "_wg" {
		// Whole tiles of wgBM x wgBN, their K range in shared memory.
		bm, bn, shared = wgBM, wgBN, wgShared(g.K)
	} else if cluster > 0 {
		// One cluster of z blocks per tile, K in chunks of whole stages.
		z = cluster
		kchunk = ceilDiv(ceilDiv(g.K, z), gemmBK) * gemmBK
	} else if g.chunk > 0 {
		kchunk, z = g.chunk, gemmSplits(g.K, g.chunk)
		if z > 1 && !m.host { // the host backend has no workspace
			ws, tickets = m.gemmWS.DevicePtr(), m.gemmTickets.DevicePtr()
			writes = append(writes, m.gemmWS, m.gemmTickets)
		}
	}
	args := []any{int32(g.M), int32(g.N), int32(g.K), int32(kchunk), g.A.ptr(), g.B.ptr(), g.C.ptr()}
	args = append(append(args, g.extra...), ws, tickets)
	gx, gy := ceilDiv(g.N, bn), ceilDiv(g.M, bm)
	if g.layer2 != nil {
		gy += ceilDiv(g.layer2.blocks, gx) // rows of blocks past the tiles
		args = append(args, g.layer2.args()...)
	}
	cfg := sluice.LaunchConfig{
		Grid:           sluice.Dim3{X: uint32(gx), Y: uint32(gy), Z: uint32(z)},
		Block:          sluice.Dim3{X: gemmThreads},
		SharedMemBytes: uint32(shared),
	}
	return m.run(s, g.name+suffix, cfg, reads, writes, g.host, args...)
}
