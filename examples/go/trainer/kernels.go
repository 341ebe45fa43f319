package main

// kernelSource is the model's CUDA C, compiled at start-up with NVRTC
// (compileModule). hostkernels.go holds the same math in Go for the host
// backend. Every kernel is deterministic: no float atomics, and each output
// is summed in a fixed order, so that a resumed run is bit-identical to an
// uninterrupted one (the integer counters use atomicAdd, which is exact).
//
// A training step is 7 kernels (model.trainStep):
//
//	u8_to_f32            the batch's pixels to floats                  x
//	gemm_nn_bias_relu_drop  a1 = dropout(relu(x W1 + b1)), split-K     a1, RNG states
//	fwd2_ce              logits = a1 W2 + b2, softmax cross-entropy    dz2, rowloss, right
//	loss_store           the batch's mean loss, in a fixed order       losses[step]
//	bwd2                 da1, dW2, db2, db1 (column blocks)            da1, grads
//	gemm_tn              dW1 = x^T da1, split-K                        grads
//	sgd_momentum         all parameters                                params, momentum
//
// The two large products (x W1: 256x512x784, and x^T da1: 784x512x256) run
// on the tensor cores in TF32 (mma.sync m16n8k8) with FP32 accumulation, on
// 32x32 tiles of 4 warps, K in chunks of 128 across blocks (split-K). The
// partial tiles go to a workspace; the last block of a tile to finish (an
// integer ticket) adds them in split order and applies the epilogue, so the
// sum's order never depends on timing. gemm_tile_simt_* are the same kernels
// in FP32 without tensor cores: the fallback the start-up self-test picks if
// the TF32 kernels disagree with the host (model.selfTest).
const kernelSource = `
#include <sluice/rng.cuh>

#define GBM 32          // tile rows (M)
#define GBN 32          // tile columns (N)
#define GBK 32          // K per shared-memory stage
#define AS_LD (GBK + 4) // As[m][k]: A fragment loads hit 32 banks (row stride 4 mod 32)
#define BS_LD (GBN + 8) // Bs[k][n]: B fragment loads hit 32 banks (row stride 8 mod 32)
#define GTHREADS 128    // 4 warps, 2 x 2, each a 16x16 warp tile (two m16n8 tiles)

#define EPI_STORE 0           // C = acc
#define EPI_BIAS_RELU 1       // C = relu(acc + bias[n])
#define EPI_BIAS_RELU_DROP 2  // C = relu(acc + bias[n]) * mask, mask from the element's RNG state

__device__ __forceinline__ float to_tf32(float x) {
#if __CUDA_ARCH__ >= 800
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
#else
  return x;
#endif
}

// d += A(16x8, row) * B(8x8, col), TF32 inputs, FP32 accumulators. Fragments
// (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
//   a0 A[g][t]  a1 A[g+8][t]  a2 A[g][t+4]  a3 A[g+8][t+4]
//   b0 B[t][g]  b1 B[t+4][g]
//   d0 D[g][2t] d1 D[g][2t+1] d2 D[g+8][2t] d3 D[g+8][2t+1]
__device__ __forceinline__ void mma_tf32(float d[4], float a0, float a1, float a2, float a3,
                                         float b0, float b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
        "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
#endif
}

// C[M,N] = op(A)[M,K] * B[K,N] (+ epilogue), row-major: op(A)[m,k] is
// A[k*M+m] when TA, else A[m*K+k]; B[k,n] is B[k*N+n]. Block (x, y, z): the
// tile of rows 32y.., columns 32x.., and the K range [z*kchunk, (z+1)*kchunk).
// With gridDim.z > 1 each block writes its partial tile to ws[z][M][N]; the
// last to finish (counters[tile], reset by it to 0 for the next launch) sums
// ws[0..Z-1] in that order and applies the epilogue. MMA: tensor cores (TF32),
// else the same fragments summed in FP32 FMAs.
template <bool TA, bool MMA, int EPI>
__device__ __forceinline__ void gemm_tile(int M, int N, int K, int kchunk,
                                          const float* __restrict__ A, const float* __restrict__ B,
                                          float* __restrict__ C, const float* __restrict__ bias,
                                          sluice_rng_state* __restrict__ states, float p, float scale,
                                          float* __restrict__ ws, unsigned* __restrict__ counters) {
  __shared__ __align__(16) float As[2][GBM][AS_LD];
  __shared__ __align__(16) float Bs[2][GBK][BS_LD];
  __shared__ int s_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 16, wn = (warp & 1) * 16;
  const int m0 = blockIdx.y * GBM, n0 = blockIdx.x * GBN;
  const int kb = blockIdx.z * kchunk, ke = min(K, kb + kchunk);
  const int lda = TA ? M : K;
  const bool avec = (lda % 4 == 0) && (((unsigned long long)A & 15) == 0);
  const bool bvec = (N % 4 == 0) && (((unsigned long long)B & 15) == 0);

  float acc[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  // Each thread stages 2 float4 of A's tile and 2 of B's (256 + 256 of them).
  float4 ra[2], rb[2];
  auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + i * GTHREADS;
      // NN: row e/8 of the tile, k 4*(e%8)..+3. TA: k row e/8, m 4*(e%8)..+3.
      const int r = e >> 3, q = (e & 7) * 4;
      float v[4];
      if (!TA) {
        const int gm = m0 + r, gk = k0 + q;
        const float* src = A + (unsigned long long)gm * lda + gk;
        if (avec && gm < M && gk + 3 < ke) {
          const float4 f = *reinterpret_cast<const float4*>(src);
          v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = (gm < M && gk + j < ke) ? src[j] : 0.0f;
        }
      } else {
        const int gk = k0 + r, gm = m0 + q;
        const float* src = A + (unsigned long long)gk * lda + gm;
        if (avec && gk < ke && gm + 3 < M) {
          const float4 f = *reinterpret_cast<const float4*>(src);
          v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = (gk < ke && gm + j < M) ? src[j] : 0.0f;
        }
      }
      ra[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + i * GTHREADS;
      const int r = e >> 3, q = (e & 7) * 4;  // k row r, n 4*(e%8)..+3
      const int gk = k0 + r, gn = n0 + q;
      const float* src = B + (unsigned long long)gk * N + gn;
      float v[4];
      if (bvec && gk < ke && gn + 3 < N) {
        const float4 f = *reinterpret_cast<const float4*>(src);
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = (gk < ke && gn + j < N) ? src[j] : 0.0f;
      }
      rb[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + i * GTHREADS;
      const int r = e >> 3, q = (e & 7) * 4;
      float4 f = ra[i];
      if (MMA) { f.x = to_tf32(f.x); f.y = to_tf32(f.y); f.z = to_tf32(f.z); f.w = to_tf32(f.w); }
      if (!TA) {
        *reinterpret_cast<float4*>(&As[buf][r][q]) = f;
      } else {
        As[buf][q + 0][r] = f.x; As[buf][q + 1][r] = f.y;
        As[buf][q + 2][r] = f.z; As[buf][q + 3][r] = f.w;
      }
      float4 h = rb[i];
      if (MMA) { h.x = to_tf32(h.x); h.y = to_tf32(h.y); h.z = to_tf32(h.z); h.w = to_tf32(h.w); }
      *reinterpret_cast<float4*>(&Bs[buf][r][q]) = h;
    }
  };

  const int nk = (ke - kb + GBK - 1) / GBK;
  if (nk > 0) {
    load(kb);
    store(0);
  }
  __syncthreads();
  for (int kt = 0; kt < nk; ++kt) {
    const int cur = kt & 1;
    if (kt + 1 < nk) load(kb + (kt + 1) * GBK);  // in flight during the math below
#pragma unroll
    for (int kk = 0; kk < GBK; kk += 8) {
      if (MMA) {
        const float a0 = As[cur][wm + g][kk + t], a1 = As[cur][wm + g + 8][kk + t];
        const float a2 = As[cur][wm + g][kk + t + 4], a3 = As[cur][wm + g + 8][kk + t + 4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int n = wn + j * 8 + g;
          mma_tf32(acc[j], a0, a1, a2, a3, Bs[cur][kk + t][n], Bs[cur][kk + t + 4][n]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int m = wm + g + (c >> 1) * 8, n = wn + j * 8 + 2 * t + (c & 1);
            float s = acc[j][c];
#pragma unroll
            for (int k = 0; k < 8; ++k) s += As[cur][m][kk + k] * Bs[cur][kk + k][n];
            acc[j][c] = s;
          }
      }
    }
    if (kt + 1 < nk) store(cur ^ 1);
    __syncthreads();
  }

  const int Z = gridDim.z;
  if (Z > 1) {
    float* part = ws + (unsigned long long)blockIdx.z * M * N;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int gm = m0 + wm + g + (c >> 1) * 8, gn = n0 + wn + j * 8 + 2 * t + (c & 1);
        if (gm < M && gn < N) part[(unsigned long long)gm * N + gn] = acc[j][c];
      }
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
      const unsigned ticket = atomicAdd(&counters[tile], 1u);
      s_last = ticket == (unsigned)(Z - 1);
      if (s_last) counters[tile] = 0;  // every other block of the tile has taken its ticket
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int gm = m0 + wm + g + (c >> 1) * 8, gn = n0 + wn + j * 8 + 2 * t + (c & 1);
        if (gm < M && gn < N) {
          const unsigned long long idx = (unsigned long long)gm * N + gn;
          float s = __ldcg(ws + idx);
          for (int z = 1; z < Z; ++z) s += __ldcg(ws + (unsigned long long)z * M * N + idx);
          acc[j][c] = s;
        }
      }
  }

#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int gm = m0 + wm + g + (c >> 1) * 8, gn = n0 + wn + j * 8 + 2 * t + (c & 1);
      if (gm >= M || gn >= N) continue;
      const unsigned long long idx = (unsigned long long)gm * N + gn;
      float v = acc[j][c];
      if (EPI == EPI_BIAS_RELU) {
        v = fmaxf(v + bias[gn], 0.0f);
      } else if (EPI == EPI_BIAS_RELU_DROP) {
        // z = acc + bias; a = relu(z) * mask, where mask is 0 with probability
        // p (a uniform draw of the element's own RNG state below p) and
        // 1/(1-p) = scale otherwise. The states are written back, so the
        // draws are checkpointed.
        const float z = v + bias[gn];
        float m = 1.0f;
        if (p > 0.0f) {
          sluice_rng_state s = states[idx];
          m = sluice_rng_uniform(&s) < p ? 0.0f : scale;
          states[idx] = s;
        }
        v = fmaxf(z, 0.0f) * m;
      }
      C[idx] = v;
    }
}

#define GEMM_ARGS int M, int N, int K, int kchunk, const float* A, const float* B, float* C
#define GEMM_KERNELS(SUFFIX, MMA)                                                                  \
  __global__ void __launch_bounds__(GTHREADS) gemm_nn##SUFFIX(GEMM_ARGS, float* ws,                \
                                                               unsigned* counters) {               \
    gemm_tile<false, MMA, EPI_STORE>(M, N, K, kchunk, A, B, C, 0, 0, 0.0f, 1.0f, ws, counters);    \
  }                                                                                                \
  __global__ void __launch_bounds__(GTHREADS) gemm_tn##SUFFIX(GEMM_ARGS, float* ws,                \
                                                               unsigned* counters) {               \
    gemm_tile<true, MMA, EPI_STORE>(M, N, K, kchunk, A, B, C, 0, 0, 0.0f, 1.0f, ws, counters);     \
  }                                                                                                \
  __global__ void __launch_bounds__(GTHREADS) gemm_nn_bias_relu##SUFFIX(                            \
      GEMM_ARGS, const float* bias, float* ws, unsigned* counters) {                               \
    gemm_tile<false, MMA, EPI_BIAS_RELU>(M, N, K, kchunk, A, B, C, bias, 0, 0.0f, 1.0f, ws,        \
                                         counters);                                                \
  }                                                                                                \
  __global__ void __launch_bounds__(GTHREADS) gemm_nn_bias_relu_drop##SUFFIX(                       \
      GEMM_ARGS, const float* bias, sluice_rng_state* states, float p, float scale, float* ws,     \
      unsigned* counters) {                                                                        \
    gemm_tile<false, MMA, EPI_BIAS_RELU_DROP>(M, N, K, kchunk, A, B, C, bias, states, p, scale,    \
                                              ws, counters);                                       \
  }

extern "C" {

GEMM_KERNELS(, true)
GEMM_KERNELS(_simt, false)

// out[i] = in[i] / 255, four per thread.
__global__ void u8_to_f32(float* out, const unsigned char* in, unsigned n) {
  const unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  if (i + 3 < n && ((unsigned long long)in & 3) == 0 && ((unsigned long long)out & 15) == 0) {
    const uchar4 u = *reinterpret_cast<const uchar4*>(in + i);
    *reinterpret_cast<float4*>(out + i) =
        make_float4((float)u.x * (1.0f / 255.0f), (float)u.y * (1.0f / 255.0f),
                    (float)u.z * (1.0f / 255.0f), (float)u.w * (1.0f / 255.0f));
  } else {
    for (unsigned j = i; j < n && j < i + 4; ++j) out[j] = (float)in[j] * (1.0f / 255.0f);
  }
}

// dst[i] = src[i] * s
__global__ void scale_copy(float* dst, const float* src, unsigned n, float s) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] * s;
}

// A warp per row of a1 (hid units), 8 rows per block of 256 threads: the
// logits l = a1[r] W2 + b2 (lane k sums units k, k+32, ..., then a xor
// butterfly, the same in every lane), a right prediction counted in *right;
// when train, also the row's loss and the gradient (softmax - onehot) * inv_rows.
__global__ void __launch_bounds__(256) fwd2_ce(const float* a1, const float* w2, const float* b2,
                                               const unsigned char* labels, float* dlogits,
                                               float* rowloss, unsigned* right, unsigned rows,
                                               unsigned hid, float inv_rows, int train) {
  __shared__ unsigned s_right;
  if (threadIdx.x == 0) s_right = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x & 31, r = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (r < rows) {  // the same for the whole warp
    float acc[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) acc[j] = 0.0f;
    const float* a = a1 + (unsigned long long)r * hid;
    for (unsigned c = lane; c < hid; c += 32) {
      const float av = a[c];
      const float* w = w2 + (unsigned long long)c * 10;
#pragma unroll
      for (int j = 0; j < 10; ++j) acc[j] += av * w[j];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int j = 0; j < 10; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
    float l[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) l[j] = acc[j] + b2[j];
    float mx = l[0];
    int arg = 0;
#pragma unroll
    for (int j = 1; j < 10; ++j)
      if (l[j] > mx) { mx = l[j]; arg = j; }
    const int y = labels[r];
    if (train) {
      float e[10], sum = 0.0f, ly = 0.0f;
#pragma unroll
      for (int j = 0; j < 10; ++j) {
        e[j] = expf(l[j] - mx);
        sum += e[j];
        if (j == y) ly = l[j];
      }
      const float inv = 1.0f / sum;
#pragma unroll
      for (int j = 0; j < 10; ++j)
        if ((int)lane == j) dlogits[r * 10 + j] = (e[j] * inv - (j == y ? 1.0f : 0.0f)) * inv_rows;
      if (lane == 0) rowloss[r] = logf(sum) - (ly - mx);
    }
    if (lane == 0 && arg == y) atomicAdd(&s_right, 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0 && s_right != 0) atomicAdd(right, s_right);
}

// One block of 256 threads: losses[*counter] = mean of rowloss (thread k sums
// rows k, k+256, ..., then a fixed tree); ++*counter.
__global__ void __launch_bounds__(256) loss_store(const float* rowloss, float* losses,
                                                  unsigned* counter, unsigned rows) {
  __shared__ float sh[256];
  float s = 0.0f;
  for (unsigned r = threadIdx.x; r < rows; r += 256) s += rowloss[r];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    losses[*counter] = sh[0] / (float)rows;
    *counter += 1;
  }
}

// The backward pass of the second layer and of the hidden activation, 16
// hidden units per block of 256 threads (thread: unit c = 16 * block + tid %
// 16, rows tid / 16, tid / 16 + 16, ...):
//   da1[r,c] = a1[r,c] > 0 ? scale * sum_j dz2[r,j] W2[c,j] : 0
//     (a1 > 0 exactly where relu passed and dropout kept: the mask is scale there)
//   dW2[c,j] = sum_r a1[r,c] dz2[r,j]    db1[c] = sum_r da1[r,c]
// and unit c == hid is the bias of the second layer: db2[j] = sum_r dz2[r,j].
// The 16 partial sums of each unit are added in slot order.
__global__ void __launch_bounds__(256) bwd2(const float* a1, const float* dz2, const float* w2,
                                            float* da1, float* gw2, float* gb1, float* gb2,
                                            unsigned rows, unsigned hid, float scale) {
  __shared__ float part[16][16][11];
  const unsigned col = threadIdx.x & 15, slot = threadIdx.x >> 4;
  const unsigned c = blockIdx.x * 16 + col;
  float gw[10], gb = 0.0f;
#pragma unroll
  for (int j = 0; j < 10; ++j) gw[j] = 0.0f;
  if (c < hid) {
    float wc[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) wc[j] = w2[(unsigned long long)c * 10 + j];
    for (unsigned r = slot; r < rows; r += 16) {
      const float* d = dz2 + (unsigned long long)r * 10;
      float dz[10];
#pragma unroll
      for (int j = 0; j < 10; ++j) dz[j] = d[j];
      const float a = a1[(unsigned long long)r * hid + c];
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 10; ++j) s += dz[j] * wc[j];
      const float v = a > 0.0f ? s * scale : 0.0f;
      da1[(unsigned long long)r * hid + c] = v;
      gb += v;
#pragma unroll
      for (int j = 0; j < 10; ++j) gw[j] += a * dz[j];
    }
  } else if (c == hid) {
    for (unsigned r = slot; r < rows; r += 16) {
#pragma unroll
      for (int j = 0; j < 10; ++j) gw[j] += dz2[(unsigned long long)r * 10 + j];
    }
  }
#pragma unroll
  for (int j = 0; j < 10; ++j) part[slot][col][j] = gw[j];
  part[slot][col][10] = gb;
  __syncthreads();
  if (slot == 0 && c <= hid) {
    float s[11];
#pragma unroll
    for (int q = 0; q < 11; ++q) s[q] = part[0][col][q];
    for (int w = 1; w < 16; ++w)
#pragma unroll
      for (int q = 0; q < 11; ++q) s[q] += part[w][col][q];
    if (c < hid) {
#pragma unroll
      for (int j = 0; j < 10; ++j) gw2[(unsigned long long)c * 10 + j] = s[j];
      gb1[c] = s[10];
    } else {
#pragma unroll
      for (int j = 0; j < 10; ++j) gb2[j] = s[j];
    }
  }
}

// SGD with momentum and weight decay over all parameters at once, four per thread.
__device__ __forceinline__ void sgd1(float& p, float& v, float g, float lr, float mu, float wd) {
  const float gi = g + wd * p;
  const float vi = mu * v + gi;
  v = vi;
  p = p - lr * vi;
}
__global__ void sgd_momentum(float* p, float* v, const float* g, unsigned n, float lr, float mu,
                             float wd) {
  const unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  if (i + 3 < n && (((unsigned long long)p | (unsigned long long)v | (unsigned long long)g) & 15) == 0) {
    float4 P = *reinterpret_cast<float4*>(p + i), V = *reinterpret_cast<float4*>(v + i);
    const float4 G = *reinterpret_cast<const float4*>(g + i);
    sgd1(P.x, V.x, G.x, lr, mu, wd);
    sgd1(P.y, V.y, G.y, lr, mu, wd);
    sgd1(P.z, V.z, G.z, lr, mu, wd);
    sgd1(P.w, V.w, G.w, lr, mu, wd);
    *reinterpret_cast<float4*>(p + i) = P;
    *reinterpret_cast<float4*>(v + i) = V;
  } else {
    for (unsigned j = i; j < n && j < i + 4; ++j) sgd1(p[j], v[j], g[j], lr, mu, wd);
  }
}

}  // extern "C"
`

// kernelNames are the functions the model looks up in the compiled module.
var kernelNames = []string{
	"gemm_nn", "gemm_tn", "gemm_nn_bias_relu", "gemm_nn_bias_relu_drop",
	"gemm_nn_simt", "gemm_tn_simt", "gemm_nn_bias_relu_simt", "gemm_nn_bias_relu_drop_simt",
	"u8_to_f32", "scale_copy", "fwd2_ce", "loss_store", "bwd2", "sgd_momentum",
}

// The GEMM kernels' tiling (gemm_tile): GBM x GBN tiles of gemmThreads
// threads, K split across blocks in chunks of gemmKChunk (a multiple of GBK).
const (
	gemmBM      = 32
	gemmBN      = 32
	gemmBK      = 32
	gemmThreads = 128
	gemmKChunk  = 128
)
