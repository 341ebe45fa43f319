package main

import "math"

// The host backend cannot run the CUDA C of kernels*.go: these are the same
// kernels in Go, run as host callbacks on the sluice streams over the host
// backend's "device" memory. They are serial and in float32, each output
// summed in a fixed order, so a run is deterministic (bit-identical from one
// process to the next, and across a save and resume). Their float results
// are not those of the GPU (another summation order, Go's math.Exp).

// hostGemm: C[M,N] = op(A)[M,K] * op(B)[K,N] in FP32 (op(B) = B^T when tb:
// B is [N,K]); the GPU's gemm_nn and gemm_tn compute the first two in TF32.
func hostGemm(ta, tb bool, M, N, K int, A, B, C []float32) {
	switch {
	case !ta && !tb:
		// C[m,:] = sum_k A[m,k] * B[k,:], k ascending.
		for m := 0; m < M; m++ {
			c := C[m*N : (m+1)*N]
			clear(c)
			a := A[m*K : (m+1)*K]
			for k, av := range a {
				if av == 0 {
					continue // MNIST pixels and ReLU outputs: mostly zeros
				}
				b := B[k*N : (k+1)*N]
				for n := range c {
					c[n] += av * b[n]
				}
			}
		}
	case ta && !tb:
		// C[m,:] = sum_k A[k,m] * B[k,:], k ascending: A is [K,M].
		clear(C[:M*N])
		for k := 0; k < K; k++ {
			b := B[k*N : (k+1)*N]
			a := A[k*M : (k+1)*M]
			for m, av := range a {
				if av == 0 {
					continue
				}
				c := C[m*N : (m+1)*N]
				for n := range c {
					c[n] += av * b[n]
				}
			}
		}
	case !ta && tb:
		// C[m,n] = sum_k A[m,k] * B[n,k]: B is [N,K].
		for m := 0; m < M; m++ {
			a := A[m*K : (m+1)*K]
			for n := 0; n < N; n++ {
				b := B[n*K : (n+1)*K]
				var s float32
				for k := range a {
					s += a[k] * b[k]
				}
				C[m*N+n] = s
			}
		}
	default:
		panic("hostGemm: TT is not used")
	}
}

func hostU8ToF32(out []float32, in []byte) {
	for i, v := range in {
		out[i] = float32(v) * float32(1.0/255.0)
	}
}

func hostScaleCopy(dst, src []float32, s float32) {
	for i := range dst {
		dst[i] = src[i] * s
	}
}

func hostBiasAdd(z, bias []float32) {
	cols := len(bias)
	for i := range z {
		z[i] += bias[i%cols]
	}
}

func hostBiasReLU(z, bias []float32) {
	cols := len(bias)
	for i := range z {
		z[i] = max(z[i]+bias[i%cols], 0)
	}
}

// hostBiasReLUDropout is gemm_nn_bias_relu_drop's epilogue on a (rows x
// len(bias), x W1 on entry): a = relu(a + bias) * mask, where the mask is 0
// when the element's uniform draw is below p and scale otherwise. draws
// holds dropDraws uniforms per RNG state, sample-major (draw k of state i at
// k*states+i), and dropDraw names the element's.
func hostBiasReLUDropout(a, draws, bias []float32, rows int, p, scale float32) {
	cols := len(bias)
	states := len(draws) / dropDraws
	for i := range a[:rows*cols] {
		r, c := i/cols, i%cols
		v := a[i] + bias[c]
		m := float32(1)
		if p > 0 {
			st, k := dropDraw(r, c, cols)
			m = scale
			if draws[k*states+st] < p {
				m = 0
			}
		}
		a[i] = max(v, 0) * m
	}
}

// hostDa1 is fwd2_ce's da1: (dz2 W2^T) * scale where a1 > 0 (relu passed and
// dropout kept), else 0.
func hostDa1(rows, hid int, a1, dz2, w2, da1 []float32, scale float32) {
	hostGemm(false, true, rows, hid, classes, dz2, w2, da1)
	for i, a := range a1[:rows*hid] {
		if a > 0 {
			da1[i] *= scale
		} else {
			da1[i] = 0
		}
	}
}

// hostLayer2Grads is layer2_block's sums: dW2 = a1^T dz2; db2 and db1 the
// column sums of dz2 and da1.
func hostLayer2Grads(rows, hid int, a1, dz2, da1, gw2, gb1, gb2 []float32) {
	hostGemm(true, false, hid, classes, rows, a1, dz2, gw2)
	hostBiasGrad(dz2[:rows*classes], gb2)
	hostBiasGrad(da1[:rows*hid], gb1)
}

// hostSoftmaxCE is the softmax cross-entropy of fwd2_ce (over logits
// computed with hostGemm and hostBiasAdd): correct[0] counts right predictions.
func hostSoftmaxCE(logits []float32, labels []byte, dlogits, rowloss []float32, correct []uint32, invRows float32) {
	for r := range rowloss {
		l := logits[r*10 : r*10+10]
		mx, arg := l[0], 0
		for c := 1; c < 10; c++ {
			if l[c] > mx {
				mx, arg = l[c], c
			}
		}
		var e [10]float32
		var sum float32
		for c := range e {
			e[c] = float32(math.Exp(float64(l[c] - mx)))
			sum += e[c]
		}
		y := int(labels[r])
		rowloss[r] = float32(math.Log(float64(sum))) - (l[y] - mx)
		inv := 1 / sum
		for c := range e {
			t := e[c] * inv
			if c == y {
				t -= 1
			}
			dlogits[r*10+c] = t * invRows
		}
		if arg == y {
			correct[0]++
		}
	}
}

// hostLossStore is loss_store (summed in row order here, in a tree there):
// counter[0] is the step within the epoch.
func hostLossStore(rowloss, losses []float32, counter []uint32) {
	var s float32
	for _, v := range rowloss {
		s += v
	}
	losses[counter[0]] = s / float32(len(rowloss))
	counter[0]++
}

func hostBiasGrad(d, db []float32) {
	cols := len(db)
	clear(db)
	for r := 0; r < len(d)/cols; r++ {
		row := d[r*cols : (r+1)*cols]
		for c := range db {
			db[c] += row[c]
		}
	}
}

func hostSGD(p, v, g []float32, lr, mu, wd float32) {
	for i := range p {
		gi := g[i] + wd*p[i]
		vi := mu*v[i] + gi
		v[i] = vi
		p[i] = p[i] - lr*vi
	}
}

func hostEvalCount(logits []float32, labels []byte, correct []uint32) {
	for r := range labels {
		l := logits[r*10 : r*10+10]
		mx, arg := l[0], 0
		for c := 1; c < 10; c++ {
			if l[c] > mx {
				mx, arg = l[c], c
			}
		}
		if arg == int(labels[r]) {
			correct[0]++
		}
	}
}

// f2bf is the kernels' f2bf: a float32 to its nearest bfloat16 (ties to
// even), NaNs kept NaN.
func f2bf(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16 | 0x40)
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// bf2f widens a bfloat16 to the float32 of the same value.
func bf2f(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
