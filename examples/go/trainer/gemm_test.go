package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
)

// tf32 is what the tensor cores read of an FP32 operand given as TF32: its
// top 19 bits (10 mantissa bits, the rest dropped).
func tf32(x float32) float32 {
	return math.Float32frombits(math.Float32bits(x) &^ 0x1fff)
}

// mmaM16N8K8 is mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 over a
// warp's registers, by the fragment layout of the PTX ISA (g = lane/4, t =
// lane%4): a0 A[g][t], a1 A[g+8][t], a2 A[g][t+4], a3 A[g+8][t+4]; b0 B[t][g],
// b1 B[t+4][g]; d0 D[g][2t], d1 D[g][2t+1], d2 D[g+8][2t], d3 D[g+8][2t+1].
func mmaM16N8K8(d *[32][4]float32, a *[32][4]float32, b *[32][2]float32) {
	var A [16][8]float32
	var B [8][8]float32
	for lane := 0; lane < 32; lane++ {
		g, t := lane/4, lane%4
		A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4] = a[lane][0], a[lane][1], a[lane][2], a[lane][3]
		B[t][g], B[t+4][g] = b[lane][0], b[lane][1]
	}
	mmaAccumulate(d, 8, func(r, k int) float32 { return A[r][k] }, func(k, n int) float32 { return B[k][n] })
}

// mmaAccumulate adds A(16 x kd) B(kd x 8) to the warp's accumulators by the
// m16n8 D fragment (g = lane/4, t = lane%4): d0 D[g][2t], d1 D[g][2t+1], d2
// D[g+8][2t], d3 D[g+8][2t+1].
func mmaAccumulate(d *[32][4]float32, kd int, A func(r, k int) float32, B func(k, n int) float32) {
	for lane := 0; lane < 32; lane++ {
		g, t := lane/4, lane%4
		for c := 0; c < 4; c++ {
			r, n := g+(c/2)*8, 2*t+c%2
			s := d[lane][c]
			for k := 0; k < kd; k++ {
				s += A(r, k) * B(k, n)
			}
			d[lane][c] = s
		}
	}
}

// gemmSim runs gemm_tile of kernels_gemm.go (EPI_STORE) sequentially on the host,
// block by block in the given order and thread by thread: its ring of stages
// in shared memory, the tensor-core fragments (mma) or the FP32 fallback, the
// split-K workspace and the tickets of the last block per tile. It checks the
// kernel's index arithmetic where no GPU is.
type gemmSim struct {
	ta, mma, half  bool // half: the BF16 kernels (A and B hold bf16 values)
	M, N, K, chunk int
	A, B, C        []float32
	ws             []float32
	tickets        []uint32
	// cluster > 0: K split across a cluster of that many blocks per tile
	// (the BF16 kernels; chunk as model.gemm sets it), and each element
	// times a mask that block 0's threads hold, mask(state, draw) for the
	// RNG state and draw of that thread's element (EPI_BIAS_RELU_DROP, bias
	// 0, inputs where relu keeps everything).
	cluster int
	mask    func(state, draw int) float32
}

func (g *gemmSim) grid() (x, y, z int) {
	if g.cluster > 0 {
		return ceilDiv(g.N, gemmBN), ceilDiv(g.M, gemmBM), g.cluster
	}
	return ceilDiv(g.N, gemmBN), ceilDiv(g.M, gemmBM), ceilDiv(g.K, g.chunk)
}

// mmaM16N8K16 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 over a
// warp's registers (each a pair of bf16, the lower index in the low half), by
// the PTX ISA's fragments (g = lane/4, t = lane%4): a0 A[g][2t..2t+1], a1
// A[g+8][2t..], a2 A[g][2t+8..], a3 A[g+8][2t+8..]; b0 B[2t..2t+1][g], b1
// B[2t+8..][g]; d as mmaM16N8K8's.
func mmaM16N8K16(d *[32][4]float32, a *[32][4]uint32, b *[32][2]uint32) {
	var A [16][16]float32
	var B [16][8]float32
	lo := func(r uint32) float32 { return bf2f(uint16(r)) }
	hi := func(r uint32) float32 { return bf2f(uint16(r >> 16)) }
	for lane := 0; lane < 32; lane++ {
		g, t := lane/4, lane%4
		for i, rc := range [4][2]int{{g, 2 * t}, {g + 8, 2 * t}, {g, 2*t + 8}, {g + 8, 2*t + 8}} {
			A[rc[0]][rc[1]], A[rc[0]][rc[1]+1] = lo(a[lane][i]), hi(a[lane][i])
		}
		B[2*t][g], B[2*t+1][g] = lo(b[lane][0]), hi(b[lane][0])
		B[2*t+8][g], B[2*t+9][g] = lo(b[lane][1]), hi(b[lane][1])
	}
	mmaAccumulate(d, 16, func(r, k int) float32 { return A[r][k] }, func(k, n int) float32 { return B[k][n] })
}

// ldmatrixX4 is ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: row k of
// matrix i starts at sm[rows[8i+k]]; lane gets of matrix i, in register i,
// row lane/4 and columns 2(lane%4), +1 (trans: rows 2(lane%4), +1 and column
// lane/4), the first in the low half.
func ldmatrixX4(sm []uint16, rows *[32]int, trans bool) (r [32][4]uint32) {
	for lane := 0; lane < 32; lane++ {
		g, t := lane/4, lane%4
		for i := 0; i < 4; i++ {
			el := func(row, col int) uint32 { return uint32(sm[rows[8*i+row]+col]) }
			if trans {
				r[lane][i] = el(2*t, g) | el(2*t+1, g)<<16
			} else {
				r[lane][i] = el(g, 2*t) | el(g, 2*t+1)<<16
			}
		}
	}
	return r
}

// halfLoop is mainloop_bf16 (MI = 1, NJ = 2): acc += the block's tile over K
// [kb, ke), the stages' bf16 values read by ldmatrix.
func (g *gemmSim) halfLoop(acc *[gemmThreads][gemmMI][gemmNJ][4]float32, m0, n0, kb, ke, lda int) {
	const hk, hLD = 32, 32 + 8
	const hStage = 32 * hLD
	var As, Bs [gemmStagesH][hStage]uint16
	for st := range As {
		for i := range As[st] {
			As[st][i], Bs[st][i] = 0x7fc1, 0x7fc1 // NaN: a value read before it is written shows
		}
	}
	M, N := g.M, g.N
	issue := func(st, k0 int) {
		for tid := 0; tid < gemmThreads; tid++ {
			r, q := tid>>2, (tid&3)*8
			for j := 0; j < 8; j++ {
				var v float32
				if !g.ta {
					if gm, gk := m0+r, k0+q+j; gm < M && gk < ke {
						v = g.A[gm*lda+gk]
					}
				} else if gk, gm := k0+r, m0+q+j; gk < ke && gm < M {
					v = g.A[gk*lda+gm]
				}
				As[st][r*hLD+q+j] = f2bf(v)
				var w float32
				if gk, gn := k0+r, n0+q+j; gk < ke && gn < N {
					w = g.B[gk*N+gn]
				}
				Bs[st][r*hLD+q+j] = f2bf(w)
			}
		}
	}
	stageRing(gemmStagesH, (ke-kb+hk-1)/hk, func(buf, st int) { issue(buf, kb+st*hk) }, func(cur int) {
		for kk := 0; kk < hk; kk += 16 {
			for warp := 0; warp < 4; warp++ {
				wm, wn := (warp>>1)*16, (warp&1)*16
				var ra, rb [32]int
				for lane := 0; lane < 32; lane++ {
					mat, rr := lane>>3, lane&7
					if g.ta {
						ra[lane] = (kk+(mat>>1)*8+rr)*hLD + wm + (mat&1)*8
					} else {
						ra[lane] = (wm+(mat&1)*8+rr)*hLD + kk + (mat>>1)*8
					}
					rb[lane] = (kk+(mat&1)*8+rr)*hLD + wn + (mat>>1)*8
				}
				a := ldmatrixX4(As[cur][:], &ra, g.ta)
				b := ldmatrixX4(Bs[cur][:], &rb, true)
				for j := 0; j < 2; j++ {
					var d [32][4]float32
					var bj [32][2]uint32
					for lane := 0; lane < 32; lane++ {
						d[lane] = acc[warp*32+lane][0][j]
						bj[lane] = [2]uint32{b[lane][2*j], b[lane][2*j+1]}
					}
					mmaM16N8K16(&d, &a, &bj)
					for lane := 0; lane < 32; lane++ {
						acc[warp*32+lane][0][j] = d[lane]
					}
				}
			}
		}
	})
}

// stageRing is the kernels' stage_ring of ns stages, in one thread: ns-1
// stages issued ahead; each iteration refills the buffer the previous one
// read (issue(buffer, stage)) before its math (compute(buffer)).
func stageRing(ns, nk int, issue func(buf, st int), compute func(buf int)) {
	for st := 0; st < ns-1; st++ {
		if st < nk {
			issue(st, st)
		}
	}
	for kt := 0; kt < nk; kt++ {
		if nx := kt + ns - 1; nx < nk {
			issue(nx%ns, nx)
		}
		compute(kt % ns)
	}
}

// floatLoop is mainloop_f32: acc += the block's tile over K [kb, ke).
func (g *gemmSim) floatLoop(acc *[gemmThreads][gemmMI][gemmNJ][4]float32, m0, n0, kb, ke, lda int) {
	// Shared memory as the kernel lays it out: a ring of gemmStages stages.
	const asNN, asTA, bsLD = gemmBK + 4, gemmBM + 8, gemmBN + 8
	const aStage, bStage = max(gemmBM*asNN, gemmBK*asTA), gemmBK * bsLD
	var As [gemmStages][aStage]float32
	var Bs [gemmStages][bStage]float32
	for st := range As {
		for i := range As[st] {
			As[st][i] = float32(math.NaN()) // a slot read before it is written shows
		}
		for i := range Bs[st] {
			Bs[st][i] = float32(math.NaN())
		}
	}
	M, N := g.M, g.N
	const aVecs, bVecs = gemmBM * gemmBK / 4 / gemmThreads, gemmBK * gemmBN / 4 / gemmThreads
	issue := func(st, k0 int) {
		for tid := 0; tid < gemmThreads; tid++ {
			for i := 0; i < aVecs; i++ {
				e := tid + i*gemmThreads
				for j := 0; j < 4; j++ {
					var v float32
					if !g.ta {
						r, q := e/(gemmBK/4), (e%(gemmBK/4))*4
						gm, gk := m0+r, k0+q+j
						if gm < M && gk < ke {
							v = g.A[gm*lda+gk]
						}
						As[st][r*asNN+q+j] = v
					} else {
						r, q := e/(gemmBM/4), (e%(gemmBM/4))*4
						gk, gm := k0+r, m0+q+j
						if gk < ke && gm < M {
							v = g.A[gk*lda+gm]
						}
						As[st][r*asTA+q+j] = v
					}
				}
			}
			for i := 0; i < bVecs; i++ {
				e := tid + i*gemmThreads
				r, q := e/(gemmBN/4), (e%(gemmBN/4))*4
				for j := 0; j < 4; j++ {
					var w float32
					if gk, gn := k0+r, n0+q+j; gk < ke && gn < N {
						w = g.B[gk*N+gn]
					}
					Bs[st][r*bsLD+q+j] = w
				}
			}
		}
	}
	aAt := func(st, m, k int) float32 {
		if g.ta {
			return As[st][k*asTA+m]
		}
		return As[st][m*asNN+k]
	}
	bAt := func(st, k, n int) float32 { return Bs[st][k*bsLD+n] }
	stageRing(gemmStages, (ke-kb+gemmBK-1)/gemmBK, func(buf, st int) { issue(buf, kb+st*gemmBK) }, func(cur int) {
		for kk := 0; kk < gemmBK; kk += 8 {
			for warp := 0; warp < 4; warp++ {
				wm, wn := (warp>>1)*16*gemmMI, (warp&1)*8*gemmNJ
				for i := 0; i < gemmMI; i++ {
					for j := 0; j < gemmNJ; j++ {
						if g.mma {
							var a [32][4]float32
							var b [32][2]float32
							var d [32][4]float32
							for lane := 0; lane < 32; lane++ {
								gg, t := lane>>2, lane&3
								m, n := wm+16*i+gg, wn+8*j+gg
								a[lane] = [4]float32{tf32(aAt(cur, m, kk+t)), tf32(aAt(cur, m+8, kk+t)),
									tf32(aAt(cur, m, kk+t+4)), tf32(aAt(cur, m+8, kk+t+4))}
								b[lane] = [2]float32{tf32(bAt(cur, kk+t, n)), tf32(bAt(cur, kk+t+4, n))}
								d[lane] = acc[warp*32+lane][i][j]
							}
							mmaM16N8K8(&d, &a, &b)
							for lane := 0; lane < 32; lane++ {
								acc[warp*32+lane][i][j] = d[lane]
							}
							continue
						}
						for lane := 0; lane < 32; lane++ {
							gg, t := lane>>2, lane&3
							for c := 0; c < 4; c++ {
								m, n := wm+16*i+gg+(c>>1)*8, wn+8*j+2*t+(c&1)
								s := acc[warp*32+lane][i][j][c]
								for k := 0; k < 8; k++ {
									s += aAt(cur, m, kk+k) * bAt(cur, kk+k, n)
								}
								acc[warp*32+lane][i][j][c] = s
							}
						}
					}
				}
			}
		}
	})
}

// block runs block (bx, by, bz); in a cluster it returns the partial tile it
// leaves in shared memory ([gemmBM][redLD], and the mask in block 0), for
// clusterTile to reduce.
func (g *gemmSim) block(bx, by, bz int) (red, msk []float32) {
	var acc [gemmThreads][gemmMI][gemmNJ][4]float32
	gx, _, Z := g.grid()
	M, N, K := g.M, g.N, g.K
	m0, n0 := by*gemmBM, bx*gemmBN
	kb := bz * g.chunk
	ke := min(K, kb+g.chunk)
	lda := K
	if g.ta {
		lda = M
	}
	if g.half {
		g.halfLoop(&acc, m0, n0, kb, ke, lda)
	} else {
		g.floatLoop(&acc, m0, n0, kb, ke, lda)
	}
	// The kernel's element u = (i*NJ + j)*4 + c of a thread's acc.
	const perThread = gemmMI * gemmNJ * 4
	pos := func(tid, u int) (int, int) {
		i, j, c := u/(gemmNJ*4), (u/4)%gemmNJ, u%4
		lane, warp := tid&31, tid>>5
		gg, t := lane>>2, lane&3
		wm, wn := (warp>>1)*16*gemmMI, (warp&1)*8*gemmNJ
		return m0 + wm + 16*i + gg + (c>>1)*8, n0 + wn + 8*j + 2*t + (c & 1)
	}
	at := func(tid, u int) *float32 {
		return &acc[tid][u/(gemmNJ*4)][(u/4)%gemmNJ][u%4]
	}
	if g.cluster > 0 {
		red = make([]float32, gemmBM*redLD)
		msk = make([]float32, gemmBM*redLD)
		for i := range red {
			red[i], msk[i] = float32(math.NaN()), float32(math.NaN())
		}
		for tid := 0; tid < gemmThreads; tid++ {
			for u := 0; u < perThread; u++ {
				gm, gn := pos(tid, u)
				off := (gm-m0)*redLD + gn - n0
				red[off] = *at(tid, u)
				if bz == 0 {
					msk[off] = g.mask((by*gx+bx)*gemmThreads+tid, u)
				}
			}
		}
		return red, msk
	}
	if Z > 1 {
		part := g.ws[bz*M*N:]
		for tid := 0; tid < gemmThreads; tid++ {
			for u := 0; u < perThread; u++ {
				if gm, gn := pos(tid, u); gm < M && gn < N {
					part[gm*N+gn] = *at(tid, u)
				}
			}
		}
		tile := by*gx + bx
		ticket := g.tickets[tile]
		g.tickets[tile]++
		if ticket != uint32(Z-1) {
			return nil, nil
		}
		g.tickets[tile] = 0
		for tid := 0; tid < gemmThreads; tid++ {
			for u := 0; u < perThread; u++ {
				if gm, gn := pos(tid, u); gm < M && gn < N {
					idx := gm*N + gn
					s := g.ws[idx]
					for z := 1; z < Z; z++ {
						s += g.ws[z*M*N+idx]
					}
					*at(tid, u) = s
				}
			}
		}
	}
	for tid := 0; tid < gemmThreads; tid++ {
		for u := 0; u < perThread; u++ {
			if gm, gn := pos(tid, u); gm < M && gn < N {
				g.C[gm*N+gn] = *at(tid, u)
			}
		}
	}
	return nil, nil
}

const redLD = gemmBN + 1 // RED_LD

// clusterTile runs the cluster of tile (bx, by): its blocks' main loops in
// the order r gives, then each block's share of the sum (rows [z*rows,
// (z+1)*rows) of the tile, GTHREADS threads over them), again in any order.
func (g *gemmSim) clusterTile(bx, by int, r *rand.Rand) {
	Z := g.cluster
	reds, msks := make([][]float32, Z), make([][]float32, Z)
	for _, z := range r.Perm(Z) {
		reds[z], msks[z] = g.block(bx, by, z)
	}
	m0, n0, rows := by*gemmBM, bx*gemmBN, gemmBM/Z
	for _, z := range r.Perm(Z) {
		for tid := 0; tid < gemmThreads; tid++ {
			for e := tid; e < rows*gemmBN; e += gemmThreads {
				row, col := z*rows+e/gemmBN, e%gemmBN
				off, gm, gn := row*redLD+col, m0+row, n0+col
				v := reds[0][off]
				for q := 1; q < Z; q++ {
					v += reds[q][off]
				}
				if gm < g.M && gn < g.N {
					g.C[gm*g.N+gn] = v * msks[0][off]
				}
			}
		}
	}
}

// run launches the grid, its blocks in an order shuffled by r (the GPU's is
// any order).
func (g *gemmSim) run(r *rand.Rand) {
	x, y, z := g.grid()
	if g.cluster > 0 {
		g.chunk = ceilDiv(ceilDiv(g.K, z), gemmBK) * gemmBK // as model.gemm
		for _, t := range r.Perm(x * y) {
			g.clusterTile(t%x, t/x, r)
		}
		return
	}
	g.ws = make([]float32, z*g.M*g.N)
	g.tickets = make([]uint32, x*y)
	order := r.Perm(x * y * z)
	for _, b := range order {
		g.block(b%x, b/x%y, b/(x*y))
	}
	for i, t := range g.tickets {
		if t != 0 {
			panic(fmt.Sprintf("tile %d: ticket %d left after the launch", i, t))
		}
	}
}

func TestGemmKernelIndexing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		ta         bool
		M, N, K, z int // z: the chunk of K per block (K: no split)
	}{
		{false, 70, 130, 37, 37}, {true, 90, 10, 33, 33}, {false, 65, 77, 300, 128},
		{false, 16, 64, inputs, inputs}, {false, 40, 48, inputs, 128},
		{true, inputs, 40, 20, 128}, {true, inputs, 36, 256, 128},
		{false, 256, 64, inputs, 128}, {true, 13, 7, 130, 128},
	} {
		A, B := make([]float32, c.M*c.K), make([]float32, c.K*c.N)
		for i := range A {
			A[i] = r.Float32() - 0.5
		}
		for i := range B {
			B[i] = r.Float32() - 0.5
		}
		want := make([]float32, c.M*c.N)
		hostGemm(c.ta, false, c.M, c.N, c.K, A, B, want)
		// The BF16 kernels' data: the same values rounded to bf16.
		Ah, Bh := make([]float32, len(A)), make([]float32, len(B))
		for i, v := range A {
			Ah[i] = bf2f(f2bf(v))
		}
		for i, v := range B {
			Bh[i] = bf2f(f2bf(v))
		}
		wantH := make([]float32, c.M*c.N)
		hostGemm(c.ta, false, c.M, c.N, c.K, Ah, Bh, wantH)
		for _, kind := range []string{"tf32", "fp32", "bf16"} {
			mma, half := kind != "fp32", kind == "bf16"
			a, b, want := A, B, want
			if half {
				a, b, want = Ah, Bh, wantH
			}
			var first []float32
			for rep := 0; rep < 2; rep++ {
				got := make([]float32, c.M*c.N)
				g := &gemmSim{ta: c.ta, mma: mma, half: half, M: c.M, N: c.N, K: c.K, chunk: c.z, A: a, B: b, C: got}
				g.run(r)
				tol := 1e-4
				if kind == "tf32" {
					tol = 2e-3 * math.Sqrt(float64(c.K)) // TF32 inputs
				}
				for i := range want {
					if math.Abs(float64(want[i]-got[i])) > tol {
						t.Fatalf("ta=%v %s %dx%dx%d chunk %d: element %d: kernel %v, host %v",
							c.ta, kind, c.M, c.N, c.K, c.z, i, got[i], want[i])
					}
				}
				// Another order of the blocks gives the same bits.
				if first == nil {
					first = got
				} else {
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
							t.Fatalf("ta=%v %s %dx%dx%d: element %d differs with the block order", c.ta, kind, c.M, c.N, c.K, i)
						}
					}
				}
			}
			if !half {
				continue
			}
			// The BF16 kernels as the step launches them: K split in a
			// cluster, and (x W1's epilogue) block 0's mask on each element,
			// the one its RNG state and draw give (dropDraw).
			mask := func(state, draw int) float32 { return 1 + float32((state*8+draw)%5)/4 }
			for _, cl := range []int{1, 2, 4, 8} {
				got := make([]float32, c.M*c.N)
				g := &gemmSim{ta: c.ta, mma: true, half: true, M: c.M, N: c.N, K: c.K, A: a, B: b, C: got, cluster: cl, mask: mask}
				g.run(r)
				for i := range want {
					st, d := dropDraw(i/c.N, i%c.N, c.N)
					w := want[i] * mask(st, d)
					if math.Abs(float64(w-got[i])) > 2e-4 {
						t.Fatalf("ta=%v bf16 %dx%dx%d cluster %d: element %d: kernel %v, host %v", c.ta, c.M, c.N, c.K, cl, i, got[i], w)
					}
				}
			}
		}
	}
}

// TestDropDrawMatchesTheEpilogue walks gemm_tile's epilogue threads (tile,
// tid, j, c) as the kernel assigns elements and checks that dropDraw names
// the same RNG state and draw for each element, once each.
func TestDropDrawMatchesTheEpilogue(t *testing.T) {
	for _, sz := range [][2]int{{256, 512}, {64, 96}, {40, 50}} {
		rows, hid := sz[0], sz[1]
		seen := make(map[[2]int]bool)
		gx, gy := ceilDiv(hid, gemmBN), ceilDiv(rows, gemmBM)
		for by := 0; by < gy; by++ {
			for bx := 0; bx < gx; bx++ {
				for tid := 0; tid < gemmThreads; tid++ {
					lane, warp := tid%32, tid/32
					g, tt := lane/4, lane%4
					wm, wn := (warp/2)*16*gemmMI, (warp%2)*8*gemmNJ
					for u := 0; u < dropDraws; u++ {
						i, j, c := u/(gemmNJ*4), (u/4)%gemmNJ, u%4
						gm := by*gemmBM + wm + 16*i + g + (c/2)*8
						gn := bx*gemmBN + wn + 8*j + 2*tt + c%2
						if gm >= rows || gn >= hid {
							continue
						}
						st, k := dropDraw(gm, gn, hid)
						want := [2]int{(by*gx+bx)*gemmThreads + tid, u}
						if [2]int{st, k} != want {
							t.Fatalf("%dx%d: element (%d,%d): dropDraw = (%d,%d), the kernel draws (%d,%d)", rows, hid, gm, gn, st, k, want[0], want[1])
						}
						if seen[want] {
							t.Fatalf("%dx%d: draw %v used twice", rows, hid, want)
						}
						seen[want] = true
					}
				}
			}
		}
		if len(seen) != rows*hid {
			t.Fatalf("%dx%d: %d elements drawn, want %d", rows, hid, len(seen), rows*hid)
		}
		if st := dropStates(rows, hid); st != gx*gy*gemmThreads {
			t.Fatalf("dropStates = %d", st)
		}
	}
}

// TestKernelMacrosMatchTheGoConstants checks that the kernel source's tiling
// macros are the values the launches and the simulations above assume.
func TestKernelMacrosMatchTheGoConstants(t *testing.T) {
	want := map[string]int{
		"MI": gemmMI, "NJ": gemmNJ, "GBK": gemmBK, "NSTAGE": gemmStages, "NSTAGE_H": gemmStagesH,
		"GTHREADS": gemmThreads, "CE_THREADS": ceThreads, "L2_UNITS": l2Units,
		"CLUSTER_NN": gemmClusterNN, "CLUSTER_TN": gemmClusterTN, "WG_BM": wgBM, "WG_BN": wgBN,
		"WG_SK_NN": wgStageNN / 16, "WG_SK_TN": wgStageTN / 16, "WG_THREADS": wgThreads,
	}
	if inputs%wgStageNN != 0 {
		t.Errorf("x W1's K (%d) is not whole stages of %d", inputs, wgStageNN)
	}
	re := regexp.MustCompile(`(?m)^#define ([A-Z0-9_]+) ([0-9]+)\b`)
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(kernelSource, -1) {
		if w, ok := want[m[1]]; ok {
			if v, _ := strconv.Atoi(m[2]); v != w {
				t.Errorf("#define %s %d in the kernels, but the Go side uses %d", m[1], v, w)
			}
			seen[m[1]] = true
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no #define %s in the kernel source", name)
		}
	}
	if got := defineOptions(" NSTAGE_H=4, ,X=1"); fmt.Sprint(got) != "[-DNSTAGE_H=4 -DX=1]" {
		t.Errorf("defineOptions: %q", got)
	}
}

// -dump-kernels writes what a run compiles: the clusters' and -kdefine's
// macros as #define lines (a bare name as 1, as -DNAME), then the source.
func TestKernelSourceWithDefines(t *testing.T) {
	saved := kernelDefines
	defer func() { kernelDefines = saved }()
	kernelDefines = "NSTAGE_H=4,FLAG"
	got := kernelSourceWithDefines()
	head := fmt.Sprintf("#define CLUSTER_NN %d\n#define CLUSTER_TN %d\n#define NSTAGE_H 4\n#define FLAG 1\n",
		gemmClusterNN, gemmClusterTN)
	if got != head+kernelSource {
		t.Fatalf("kernelSourceWithDefines starts %q, want %q then the kernel source", got[:min(len(got), len(head)+40)], head)
	}
}
