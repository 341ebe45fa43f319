package main

// kernelSource is the model's CUDA C, compiled at start-up with NVRTC
// (compileModule). hostkernels.go holds the same math in Go for the host
// backend. Every kernel is deterministic: no float atomics, and each output
// is summed in a fixed order, so that a resumed run is bit-identical to an
// uninterrupted one (the integer counters use atomicAdd, which is exact).
const kernelSource = `
#include <sluice/rng.cuh>

#define BM 64
#define BN 64
#define BK 16

// C[M,N] = op(A)[M,K] * op(B)[K,N], row-major. op(A)[m,k] is A[k*M+m] when TA,
// else A[m*K+k]; op(B)[k,n] is B[n*K+k] when TB, else B[k*N+n]. A 64x64 tile
// per block of 256 threads, 4x4 outputs per thread, K in steps of 16.
template <bool TA, bool TB>
__device__ __forceinline__ void gemm_tile(int M, int N, int K, const float* __restrict__ A,
                                          const float* __restrict__ B, float* __restrict__ C) {
  __shared__ float As[BK][BM + 4];  // As[k][m] = op(A)[m0+m, k0+k]
  __shared__ float Bs[BK][BN + 4];  // Bs[k][n] = op(B)[k0+k, n0+n]
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int e = tid + l * 256;
      int m, k;
      if (TA) { m = e % BM; k = e / BM; } else { k = e % BK; m = e / BK; }
      const int gm = m0 + m, gk = k0 + k;
      float v = 0.0f;
      if (gm < M && gk < K) v = TA ? A[(unsigned long long)gk * M + gm] : A[(unsigned long long)gm * K + gk];
      As[k][m] = v;
    }
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int e = tid + l * 256;
      int n, k;
      if (TB) { k = e % BK; n = e / BK; } else { n = e % BN; k = e / BN; }
      const int gn = n0 + n, gk = k0 + k;
      float v = 0.0f;
      if (gn < N && gk < K) v = TB ? B[(unsigned long long)gn * K + gk] : B[(unsigned long long)gk * N + gn];
      Bs[k][n] = v;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int gm = m0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int gn = n0 + tx + 16 * j;
      if (gm < M && gn < N) C[(unsigned long long)gm * N + gn] = acc[i][j];
    }
  }
}

extern "C" {

__global__ void __launch_bounds__(256) gemm_nn(int M, int N, int K, const float* A, const float* B, float* C) {
  gemm_tile<false, false>(M, N, K, A, B, C);
}
__global__ void __launch_bounds__(256) gemm_tn(int M, int N, int K, const float* A, const float* B, float* C) {
  gemm_tile<true, false>(M, N, K, A, B, C);
}
__global__ void __launch_bounds__(256) gemm_nt(int M, int N, int K, const float* A, const float* B, float* C) {
  gemm_tile<false, true>(M, N, K, A, B, C);
}

// out[i] = in[i] / 255
__global__ void u8_to_f32(float* out, const unsigned char* in, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (float)in[i] * (1.0f / 255.0f);
}

// dst[i] = src[i] * s
__global__ void scale_copy(float* dst, const float* src, unsigned n, float s) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] * s;
}

// z[r,c] += bias[c]
__global__ void bias_add(float* z, const float* bias, unsigned rows, unsigned cols) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) z[i] += bias[i % cols];
}

// z[r,c] = relu(z[r,c] + bias[c]) (evaluation)
__global__ void bias_relu(float* z, const float* bias, unsigned rows, unsigned cols) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) z[i] = fmaxf(z[i] + bias[i % cols], 0.0f);
}

// Training: z += bias; a = relu(z) * mask, where mask is 0 with probability p
// (a uniform draw of the element's own RNG state below p) and 1/(1-p) = scale
// otherwise. The states are written back, so the draws are checkpointed.
__global__ void bias_relu_dropout(float* z, float* a, float* mask, const float* bias,
                                  sluice_rng_state* states, unsigned rows, unsigned cols, float p,
                                  float scale) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float v = z[i] + bias[i % cols];
  z[i] = v;
  float m = 1.0f;
  if (p > 0.0f) {
    sluice_rng_state s = states[i];
    m = sluice_rng_uniform(&s) < p ? 0.0f : scale;
    states[i] = s;
  }
  mask[i] = m;
  a[i] = fmaxf(v, 0.0f) * m;
}

// da[i] = z[i] > 0 ? da[i] * mask[i] : 0
__global__ void relu_dropout_bwd(float* da, const float* z, const float* mask, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) da[i] = z[i] > 0.0f ? da[i] * mask[i] : 0.0f;
}

// One thread per row of 10 logits: the row's loss, the gradient
// (softmax - onehot) * inv_rows, and a correct prediction counted in *correct.
__global__ void softmax_ce(const float* logits, const unsigned char* labels, float* dlogits,
                           float* rowloss, unsigned* correct, unsigned rows, float inv_rows) {
  unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + r * 10;
  float mx = l[0];
  int arg = 0;
  for (int c = 1; c < 10; ++c)
    if (l[c] > mx) { mx = l[c]; arg = c; }
  float e[10], sum = 0.0f;
  for (int c = 0; c < 10; ++c) { e[c] = expf(l[c] - mx); sum += e[c]; }
  int y = labels[r];
  rowloss[r] = logf(sum) - (l[y] - mx);
  float inv = 1.0f / sum;
  for (int c = 0; c < 10; ++c) dlogits[r * 10 + c] = (e[c] * inv - (c == y ? 1.0f : 0.0f)) * inv_rows;
  if (arg == y) atomicAdd(correct, 1u);
}

// One thread: losses[*counter] = mean of rowloss, summed in order; ++*counter.
__global__ void loss_store(const float* rowloss, float* losses, unsigned* counter, unsigned rows) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float s = 0.0f;
  for (unsigned r = 0; r < rows; ++r) s += rowloss[r];
  losses[*counter] = s / (float)rows;
  *counter += 1;
}

// db[c] = sum over rows of d[r,c], in row order.
__global__ void bias_grad(const float* d, float* db, unsigned rows, unsigned cols) {
  unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (unsigned r = 0; r < rows; ++r) s += d[r * cols + c];
  db[c] = s;
}

// SGD with momentum and weight decay over all parameters at once.
__global__ void sgd_momentum(float* p, float* v, const float* g, unsigned n, float lr, float mu,
                             float wd) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i] + wd * p[i];
  float vi = mu * v[i] + gi;
  v[i] = vi;
  p[i] = p[i] - lr * vi;
}

// Counts the rows whose argmax is the label (evaluation).
__global__ void eval_count(const float* logits, const unsigned char* labels, unsigned* correct,
                           unsigned rows) {
  unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + r * 10;
  float mx = l[0];
  int arg = 0;
  for (int c = 1; c < 10; ++c)
    if (l[c] > mx) { mx = l[c]; arg = c; }
  if (arg == labels[r]) atomicAdd(correct, 1u);
}

}  // extern "C"
`

// kernelNames are the functions the model looks up in the compiled module.
var kernelNames = []string{
	"gemm_nn", "gemm_tn", "gemm_nt", "u8_to_f32", "scale_copy", "bias_add", "bias_relu",
	"bias_relu_dropout", "relu_dropout_bwd", "softmax_ce", "loss_store", "bias_grad",
	"sgd_momentum", "eval_count",
}
