package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// tf32 rounds x as cvt.rna.tf32.f32 does: to 10 mantissa bits, ties away
// from zero.
func tf32(x float32) float32 {
	return math.Float32frombits((math.Float32bits(x) + 0x1000) &^ 0x1fff)
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
	for lane := 0; lane < 32; lane++ {
		g, t := lane/4, lane%4
		for c := 0; c < 4; c++ {
			r, n := g+(c/2)*8, 2*t+c%2
			s := d[lane][c]
			for k := 0; k < 8; k++ {
				s += A[r][k] * B[k][n]
			}
			d[lane][c] = s
		}
	}
}

// gemmSim runs gemm_tile of kernels.go (EPI_STORE) sequentially on the host,
// block by block in the given order and thread by thread: its loads into
// shared memory, the tensor-core fragments (mma) or the FP32 fallback, the
// split-K workspace and the tickets of the last block per tile. It checks the
// kernel's index arithmetic where no GPU is.
type gemmSim struct {
	ta, mma        bool
	M, N, K, chunk int
	A, B, C        []float32
	ws             []float32
	tickets        []uint32
}

func (g *gemmSim) grid() (x, y, z int) {
	return ceilDiv(g.N, gemmBN), ceilDiv(g.M, gemmBM), ceilDiv(g.K, g.chunk)
}

func (g *gemmSim) block(bx, by, bz int) {
	const asLD, bsLD = gemmBK + 4, gemmBN + 8
	var As [2][gemmBM][asLD]float32
	var Bs [2][gemmBK][bsLD]float32
	var ra, rb [gemmThreads][2][4]float32
	var acc [gemmThreads][2][4]float32
	gx, gy, Z := g.grid()
	_ = gy
	M, N, K := g.M, g.N, g.K
	m0, n0 := by*gemmBM, bx*gemmBN
	kb := bz * g.chunk
	ke := min(K, kb+g.chunk)
	lda := K
	if g.ta {
		lda = M
	}
	load := func(k0 int) {
		for tid := 0; tid < gemmThreads; tid++ {
			for i := 0; i < 2; i++ {
				e := tid + i*gemmThreads
				r, q := e>>3, (e&7)*4
				for j := 0; j < 4; j++ {
					var v float32
					if !g.ta {
						gm, gk := m0+r, k0+q+j
						if gm < M && gk < ke {
							v = g.A[gm*lda+gk]
						}
					} else {
						gk, gm := k0+r, m0+q+j
						if gk < ke && gm < M {
							v = g.A[gk*lda+gm]
						}
					}
					ra[tid][i][j] = v
				}
				var w float32
				for j := 0; j < 4; j++ {
					gk, gn := k0+r, n0+q+j
					w = 0
					if gk < ke && gn < N {
						w = g.B[gk*N+gn]
					}
					rb[tid][i][j] = w
				}
			}
		}
	}
	store := func(buf int) {
		for tid := 0; tid < gemmThreads; tid++ {
			for i := 0; i < 2; i++ {
				e := tid + i*gemmThreads
				r, q := e>>3, (e&7)*4
				for j := 0; j < 4; j++ {
					a, b := ra[tid][i][j], rb[tid][i][j]
					if g.mma {
						a, b = tf32(a), tf32(b)
					}
					if !g.ta {
						As[buf][r][q+j] = a
					} else {
						As[buf][q+j][r] = a
					}
					Bs[buf][r][q+j] = b
				}
			}
		}
	}
	nk := (ke - kb + gemmBK - 1) / gemmBK
	if nk > 0 {
		load(kb)
		store(0)
	}
	for kt := 0; kt < nk; kt++ {
		cur := kt & 1
		if kt+1 < nk {
			load(kb + (kt+1)*gemmBK)
		}
		for kk := 0; kk < gemmBK; kk += 8 {
			for warp := 0; warp < 4; warp++ {
				wm, wn := (warp>>1)*16, (warp&1)*16
				if g.mma {
					var a [32][4]float32
					for lane := 0; lane < 32; lane++ {
						gg, t := lane>>2, lane&3
						a[lane] = [4]float32{As[cur][wm+gg][kk+t], As[cur][wm+gg+8][kk+t],
							As[cur][wm+gg][kk+t+4], As[cur][wm+gg+8][kk+t+4]}
					}
					for j := 0; j < 2; j++ {
						var b [32][2]float32
						var d [32][4]float32
						for lane := 0; lane < 32; lane++ {
							gg, t := lane>>2, lane&3
							n := wn + j*8 + gg
							b[lane] = [2]float32{Bs[cur][kk+t][n], Bs[cur][kk+t+4][n]}
							d[lane] = acc[warp*32+lane][j]
						}
						mmaM16N8K8(&d, &a, &b)
						for lane := 0; lane < 32; lane++ {
							acc[warp*32+lane][j] = d[lane]
						}
					}
				} else {
					for lane := 0; lane < 32; lane++ {
						gg, t := lane>>2, lane&3
						for j := 0; j < 2; j++ {
							for c := 0; c < 4; c++ {
								m, n := wm+gg+(c>>1)*8, wn+j*8+2*t+(c&1)
								s := acc[warp*32+lane][j][c]
								for k := 0; k < 8; k++ {
									s += As[cur][m][kk+k] * Bs[cur][kk+k][n]
								}
								acc[warp*32+lane][j][c] = s
							}
						}
					}
				}
			}
		}
		if kt+1 < nk {
			store(cur ^ 1)
		}
	}
	pos := func(tid, j, c int) (int, int) {
		lane, warp := tid&31, tid>>5
		gg, t := lane>>2, lane&3
		wm, wn := (warp>>1)*16, (warp&1)*16
		return m0 + wm + gg + (c>>1)*8, n0 + wn + j*8 + 2*t + (c & 1)
	}
	if Z > 1 {
		part := g.ws[bz*M*N:]
		for tid := 0; tid < gemmThreads; tid++ {
			for j := 0; j < 2; j++ {
				for c := 0; c < 4; c++ {
					if gm, gn := pos(tid, j, c); gm < M && gn < N {
						part[gm*N+gn] = acc[tid][j][c]
					}
				}
			}
		}
		tile := by*gx + bx
		ticket := g.tickets[tile]
		g.tickets[tile]++
		if ticket != uint32(Z-1) {
			return
		}
		g.tickets[tile] = 0
		for tid := 0; tid < gemmThreads; tid++ {
			for j := 0; j < 2; j++ {
				for c := 0; c < 4; c++ {
					if gm, gn := pos(tid, j, c); gm < M && gn < N {
						idx := gm*N + gn
						s := g.ws[idx]
						for z := 1; z < Z; z++ {
							s += g.ws[z*M*N+idx]
						}
						acc[tid][j][c] = s
					}
				}
			}
		}
	}
	for tid := 0; tid < gemmThreads; tid++ {
		for j := 0; j < 2; j++ {
			for c := 0; c < 4; c++ {
				if gm, gn := pos(tid, j, c); gm < M && gn < N {
					g.C[gm*N+gn] = acc[tid][j][c]
				}
			}
		}
	}
}

// run launches the grid, its blocks in an order shuffled by r (the GPU's is
// any order).
func (g *gemmSim) run(r *rand.Rand) {
	x, y, z := g.grid()
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
		M, N, K, z int // z: the chunk of K per block (gemmKChunk, or K: no split)
	}{
		{false, 70, 130, 37, 37}, {true, 90, 10, 33, 33}, {false, 65, 77, 300, gemmKChunk},
		{false, 16, 64, inputs, inputs}, {false, 40, 48, inputs, gemmKChunk},
		{true, inputs, 40, 20, gemmKChunk}, {true, inputs, 36, 256, gemmKChunk},
		{false, 256, 64, inputs, gemmKChunk}, {true, 13, 7, 130, gemmKChunk},
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
		for _, mma := range []bool{true, false} {
			var first []float32
			for rep := 0; rep < 2; rep++ {
				got := make([]float32, c.M*c.N)
				g := &gemmSim{ta: c.ta, mma: mma, M: c.M, N: c.N, K: c.K, chunk: c.z, A: A, B: B, C: got}
				g.run(r)
				tol := 1e-4
				if mma {
					tol = 2e-3 * math.Sqrt(float64(c.K)) // TF32 inputs
				}
				for i := range want {
					if math.Abs(float64(want[i]-got[i])) > tol {
						t.Fatalf("ta=%v mma=%v %dx%dx%d chunk %d: element %d: kernel %v, host %v",
							c.ta, mma, c.M, c.N, c.K, c.z, i, got[i], want[i])
					}
				}
				// Another order of the blocks gives the same bits.
				if first == nil {
					first = got
				} else {
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
							t.Fatalf("ta=%v mma=%v %dx%dx%d: element %d differs with the block order", c.ta, mma, c.M, c.N, c.K, i)
						}
					}
				}
			}
		}
	}
}
