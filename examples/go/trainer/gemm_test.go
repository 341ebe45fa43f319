package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

// simGemmTile runs gemm_tile of kernels.go (its loads into shared memory,
// its 4x4 outputs per thread) sequentially on the host, block by block and
// thread by thread, to check the kernel's index arithmetic where no GPU is.
func simGemmTile(ta, tb bool, M, N, K int, A, B, C []float32) {
	const bm, bn, bk = 64, 64, 16
	for by := 0; by < (M+bm-1)/bm; by++ {
		for bx := 0; bx < (N+bn-1)/bn; bx++ {
			m0, n0 := by*bm, bx*bn
			var acc [256][4][4]float32
			for k0 := 0; k0 < K; k0 += bk {
				var as [bk][bm + 4]float32
				var bs [bk][bn + 4]float32
				for tid := 0; tid < 256; tid++ {
					for l := 0; l < 4; l++ {
						e := tid + l*256
						var m, k int
						if ta {
							m, k = e%bm, e/bm
						} else {
							k, m = e%bk, e/bk
						}
						gm, gk := m0+m, k0+k
						var v float32
						if gm < M && gk < K {
							if ta {
								v = A[gk*M+gm]
							} else {
								v = A[gm*K+gk]
							}
						}
						as[k][m] = v
					}
					for l := 0; l < 4; l++ {
						e := tid + l*256
						var n, k int
						if tb {
							k, n = e%bk, e/bk
						} else {
							n, k = e%bn, e/bn
						}
						gn, gk := n0+n, k0+k
						var v float32
						if gn < N && gk < K {
							if tb {
								v = B[gn*K+gk]
							} else {
								v = B[gk*N+gn]
							}
						}
						bs[k][n] = v
					}
				}
				for tid := 0; tid < 256; tid++ {
					tx, ty := tid%16, tid/16
					for k := 0; k < bk; k++ {
						for i := 0; i < 4; i++ {
							for j := 0; j < 4; j++ {
								acc[tid][i][j] += as[k][ty+16*i] * bs[k][tx+16*j]
							}
						}
					}
				}
			}
			for tid := 0; tid < 256; tid++ {
				tx, ty := tid%16, tid/16
				for i := 0; i < 4; i++ {
					for j := 0; j < 4; j++ {
						gm, gn := m0+ty+16*i, n0+tx+16*j
						if gm < M && gn < N {
							C[gm*N+gn] = acc[tid][i][j]
						}
					}
				}
			}
		}
	}
}

func TestGemmKernelIndexing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		ta, tb  bool
		M, N, K int
	}{
		{false, false, 70, 130, 37}, {true, false, 90, 10, 33}, {false, true, 65, 77, 10},
		{false, false, 16, 64, 784}, {true, false, 784, 40, 20},
	} {
		A, B := make([]float32, c.M*c.K), make([]float32, c.K*c.N)
		for i := range A {
			A[i] = r.Float32() - 0.5
		}
		for i := range B {
			B[i] = r.Float32() - 0.5
		}
		want, got := make([]float32, c.M*c.N), make([]float32, c.M*c.N)
		hostGemm(c.ta, c.tb, c.M, c.N, c.K, A, B, want)
		simGemmTile(c.ta, c.tb, c.M, c.N, c.K, A, B, got)
		for i := range want {
			if math.Abs(float64(want[i]-got[i])) > 1e-4 {
				t.Fatalf("ta=%v tb=%v %dx%dx%d: element %d: kernel %v, host %v", c.ta, c.tb, c.M, c.N, c.K, i, got[i], want[i])
			}
		}
	}
}
