package main

// The start-up check of the GEMM kernels against the host's.

import (
	"fmt"
	"math"
	"math/rand/v2"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// selfTest checks the GEMM kernels on the device against hostGemm, on
// random data of the training step's shapes (split K included), before any
// training. For the float products (evaluation, and the step unless half):
// the TF32 tensor-core kernels, or if they disagree (or want is "fp32") the
// FP32 kernels without tensor cores (gemm_*_simt). For the step's products
// when want is "wgmma": the warpgroup-MMA kernels on pre-tiled bf16 data;
// if they disagree (or want is "bf16"), the BF16 kernels; if those
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
	// upload copies v to a new buffer, as floats or as bf16; with tile, as
	// bf16 in n values, v[i] at tile(i).
	upload := func(v []float32, half bool, tile func(int) int, n int) (*sluice.Buffer, error) {
		size := 4 * len(v)
		if half {
			size = 2 * max(len(v), n)
		}
		b, err := s.Alloc(size)
		if err != nil {
			return nil, err
		}
		if half {
			h := make([]uint16, size/2)
			for i, x := range v {
				j := i
				if tile != nil {
					j = tile(i)
				}
				h[j] = f2bf(x)
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
		half := suffix == "_bf16" || suffix == "_wg"
		var w float64
		for _, c := range cases {
			A, Bm := rnd(c.M*c.K, half), rnd(c.K*c.N, half)
			want, got := make([]float32, c.M*c.N), make([]float32, c.M*c.N)
			hostGemm(c.ta, false, c.M, c.N, c.K, A, Bm, want)
			// _wg: A (M x K, stored K x M when ta, as x is) and B (K x N) pre-tiled.
			var tileA, tileB func(int) int
			lenA := tiledLen(wgBM, c.M, c.K)
			if suffix == "_wg" {
				tileA = func(i int) int { return tiledIndex(wgBM, false, i/c.K, i%c.K, c.K) }
				if c.ta {
					tileA = func(i int) int { return tiledIndex(wgBM, false, i/c.M, i%c.M, c.M) }
					lenA = tiledLen(wgBM, c.K, c.M)
				}
				tileB = func(i int) int { return tiledIndex(wgBN, true, i%c.N, i/c.N, c.K) }
			}
			ab, err := upload(A, half, tileA, lenA)
			if err != nil {
				return 0, err
			}
			defer ab.Close()
			bb, err := upload(Bm, half, tileB, tiledLen(wgBN, c.N, c.K))
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
	if want == "wgmma" {
		switch {
		case m.fns["gemm_tn_sgd_wg"] == nil || m.fns["gemm_nn_bias_relu_drop_wg"] == nil:
			fmt.Println("kernel self-test: no warpgroup-MMA GEMMs (sm_90a, compute capability 9.0, and a batch whose tiles fit in shared memory); trying the BF16 ones")
		// (x W1's K is whole stages: TestKernelMacrosMatchTheGoConstants.)
		case B%wgStageTN != 0 || H%wgBN != 0:
			fmt.Printf("kernel self-test: the warpgroup-MMA GEMMs need a batch that is a multiple of %d and a hidden layer of %d; trying the BF16 ones\n", wgStageTN, wgBN)
		default:
			e, err := worst("_wg")
			if err != nil {
				return err
			}
			if e <= tol {
				fmt.Printf("kernel self-test: warpgroup-MMA GEMMs agree with the host on bf16 data (max error %.2g); the step uses them\n", e)
				m.half, m.tiled = true, true
				return nil
			}
			fmt.Printf("kernel self-test: FAILED for the warpgroup-MMA GEMMs (max error %.3g); trying the BF16 ones\n", e)
		}
	}
	bf16 := want == "bf16" || want == "wgmma"
	if bf16 && m.fns["gemm_tn_bf16"] == nil {
		fmt.Println("kernel self-test: no BF16 GEMMs (they split K in thread block clusters: sm_90 and newer); the step uses the float ones")
	} else if bf16 {
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
