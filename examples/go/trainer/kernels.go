package main

import "strings"

// kernelSource is the model's CUDA C, compiled at start-up with NVRTC
// (compileModule). hostkernels.go holds the same math in Go for the host
// backend. Every kernel is deterministic: no float atomics, and each output
// is summed in a fixed order, so that a resumed run is bit-identical to an
// uninterrupted one (the integer counters use atomicAdd, which is exact).
//
// The input stage (model.loadInput), on the input stream beside the step
// before: input_bf16 (or input_f32) turns a batch's pixels into x and copies
// its labels into an input set. A training step is then 5 kernels
// (model.trainStep):
//
//	gemm_nn_bias_relu_drop  a1 = dropout(relu(x W1 + b1)), split-K     a1, RNG states
//	fwd2_ce              logits = a1 W2 + b2, softmax cross-entropy    dz2, rowloss, right
//	loss_store           the batch's mean loss, in a fixed order       losses[step]
//	bwd2                 da1, dW2, db2, db1 (column blocks), then      da1, b1, W2, b2,
//	                     SGD with momentum of b1, W2 and b2            their momentum
//	gemm_tn_sgd          dW1 = x^T da1, then SGD with momentum of W1   W1, its momentum
//
// The two SGD steps are the products' epilogues: no gradient is written out.
//
// The two large products (x W1: 256x512x784, and x^T da1: 784x512x256) run
// on the tensor cores with FP32 accumulation: in BF16 (mma.sync m16n8k16,
// the default) or TF32 (m16n8k8), on 32x32 tiles of 4 warps, K staged through
// shared memory by cp.async and split across blocks (split-K). The TF32 and
// FP32 kinds write the partial tiles to a workspace, and the last block of a
// tile to finish (an integer ticket) adds them in split order and applies the
// epilogue. The BF16 x W1 runs each tile as one thread block cluster
// (sm_90): the partial tiles stay in shared memory, and each block of the
// cluster adds its share of rows over the cluster in split order. Either way
// the sum's order never depends on timing. gemm_*_simt are the same kernels
// in FP32 without tensor cores: the fallback the start-up self-test picks if
// the tensor-core kernels disagree with the host (model.selfTest).
const kernelSource = `
#include <sluice/rng.cuh>

#define MI 1            // m16 tiles per warp
#define NJ 2            // n8 tiles per warp
#define GBM (32 * MI)   // tile rows (M): 2 warps of 16 * MI
#define GBN (16 * NJ)   // tile columns (N): 2 warps of 8 * NJ
#define GBK 32          // K per shared-memory stage
#define NSTAGE 2        // FP32 kinds: stages in shared memory, the next in flight (cp.async) during the math
#ifndef NSTAGE_H
#define NSTAGE_H 8      // BF16: stages in shared memory (a chunk of 8 stages or fewer is all in flight at once)
#endif
#define AS_NN (GBK + 4) // A stage as [m][k] (NN): fragment loads hit 32 banks (row stride 4 mod 32)
#define AS_TA (GBM + 8) // A stage as [k][m] (TA): fragment loads hit 32 banks (row stride 8 mod 32)
#define A_STAGE (GBM * AS_NN > GBK * AS_TA ? GBM * AS_NN : GBK * AS_TA)
#define BS_LD (GBN + 8) // B stage as [k][n]
#define B_STAGE (GBK * BS_LD)
#define GTHREADS 128    // 4 warps, 2 x 2, each a (16 MI) x (8 NJ) warp tile of m16n8 tiles
#define A_VECS (GBM * GBK / 4 / GTHREADS)  // float4 of A per thread and stage
#define B_VECS (GBK * GBN / 4 / GTHREADS)  // float4 of B per thread and stage

#define EPI_STORE 0           // C = acc
#define EPI_BIAS_RELU 1       // C = relu(acc + bias[n])
#define EPI_BIAS_RELU_DROP 2  // C = relu(acc + bias[n]) * mask, mask from the thread's RNG state
#define EPI_SGD 3             // acc is the gradient of the parameters C: an SGD-momentum step (sgd1)

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

// 16 bytes from global to shared memory without passing through registers
// (sm_80+; a plain copy below).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  unsigned long long s;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)s), "l"(gmem));
#else
  *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// A fence that makes this thread's release (or acquire) pattern with a
// following (preceding) relaxed atomic, at GPU scope (PTX fence.acq_rel.gpu;
// lighter than __threadfence's fence.sc.gpu).
__device__ __forceinline__ void fence_acq_rel_gpu() {
#if __CUDA_ARCH__ >= 700
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// The ring of NS shared-memory stages over nk stages of K: NS - 1 issued
// ahead (issue(buffer, stage)), then ahead() runs while they are in flight;
// each iteration waits for its own stage, refills the buffer the previous
// iteration read, then runs compute(buffer). One commit per slot, empty or
// not, keeps the wait's count exact.
template <int NS, class Issue, class Ahead, class Compute>
__device__ __forceinline__ void stage_ring(int nk, Issue issue, Ahead ahead, Compute compute) {
#pragma unroll
  for (int st = 0; st < NS - 1; ++st) {
    if (st < nk) issue(st, st);
    cp_async_commit();
  }
  ahead();
  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage kt is everyone's; stage kt - 1 is no longer read
    const int nx = kt + NS - 1;
    if (nx < nk) issue(nx % NS, nx);
    cp_async_commit();
    compute(kt % NS);
  }
  cp_async_wait<0>();
}

// Programmatic dependent launch (sm_90; the model turns it on for the step's
// kernels): wait until the kernel ahead on the stream completed, before the
// kernel touches any data; a no-op without PDL. No kernel triggers its
// dependents early (griddepcontrol.launch_dependents): on an H200 the step
// alone ran at 1.037x the rate without PDL when none did, 0.978x when each
// did on entry and 1.030x when the products did after their main loop
// (docs/gpu-runs.md, run 141): early blocks spin on SMs the kernel ahead
// still uses.
__device__ __forceinline__ void pdl_enter() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// BF16: a float to its nearest bf16 (ties to even), as the 16 bits of a
// unsigned short; NaNs stay NaNs.
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned long long s;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(p));
  return (unsigned)s;
}
// Four 8x8 matrices of 16-bit elements from shared memory; lanes 8i..8i+7
// give the row addresses of matrix i. r[i]: of matrix i, row lane/4, columns
// 2(lane%4) and +1 (TRANS: rows 2(lane%4) and +1, column lane/4), the lower
// index in the low half.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const unsigned short* row) {
#if __CUDA_ARCH__ >= 800
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
#endif
}
// d += A(16x16, row) * B(16x8, col), BF16 inputs, FP32 accumulators
// (mma.m16n8k16 .bf16; g = lane / 4, t = lane % 4): a0 A[g][2t..2t+1],
// a1 A[g+8][2t..], a2 A[g][2t+8..], a3 A[g+8][2t+8..]; b0 B[2t..2t+1][g],
// b1 B[2t+8..][g]; d as mma_tf32's.
__device__ __forceinline__ void mma_bf16(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Thread block clusters (sm_90): the cluster's barrier (arrive has release,
// wait acquire semantics) and a float of the shared memory of the cluster's
// block rank, at the place p has in this block's.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ float ld_cluster(const float* p, unsigned rank) {
  float v = 0.0f;
#if __CUDA_ARCH__ >= 900
  unsigned a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
#endif
  return v;
}

#define SMEM_F32 (NSTAGE * (A_STAGE + B_STAGE))  // floats of the FP32 main loop's stages
#define HK 32           // BF16: K per stage
#define H_LD (32 + 8)   // BF16: halves per stage row (64 bytes and 16 of padding: ldmatrix rows hit distinct banks)
#define H_STAGE (32 * H_LD)
#define SMEM_BF16 (NSTAGE_H * H_STAGE)  // floats of the BF16 main loop's stages (2 operands of H_STAGE halves)
#define RED_LD (GBN + 1)  // a cluster's partial tile (and mask) in shared memory, [GBM][RED_LD]
#ifndef CLUSTER_NN
#define CLUSTER_NN 2    // BF16: K splits (one cluster per tile) of the NN products; 0: split by kchunk
#endif
#ifndef CLUSTER_TN
#define CLUSTER_TN 0    // BF16: the same for x^T da1
#endif

// The FP32 main loop of gemm_tile: acc += the block's tile of op(A) B over K
// [kb, ke), on the tensor cores in TF32 (MMA) or in FP32 FMAs; ahead() runs
// while the first stages load.
template <bool TA, bool MMA, class Ahead>
__device__ __forceinline__ void mainloop_f32(float (&acc)[MI][NJ][4], float* smem, int M, int N,
                                             int kb, int ke, int m0, int n0, int lda,
                                             const float* __restrict__ A, const float* __restrict__ B,
                                             Ahead ahead) {
  float* As = smem;
  float* Bs = smem + NSTAGE * A_STAGE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 16 * MI, wn = (warp & 1) * 8 * NJ;
  const bool avec = (lda % 4 == 0) && (((unsigned long long)A & 15) == 0);
  const bool bvec = (N % 4 == 0) && (((unsigned long long)B & 15) == 0);

  // Stage st gets K rows [k0, k0 + GBK): A_VECS float4 of A and B_VECS of B
  // per thread, by cp.async where all 4 floats are in range and aligned, else
  // element by element with zeros outside (K past ke included, so the math
  // below may run over whole stages). Vector e of A: NN, row e / (GBK/4) of
  // the tile, k 4 (e % (GBK/4)).. into [m][k]; TA, k row e / (GBM/4), m 4 (e %
  // (GBM/4)).. into [k][m]. Of B: k row e / (GBN/4), n 4 (e % (GBN/4)).. into [k][n].
  auto issue = [&](int st, int k0) {
#pragma unroll
    for (int i = 0; i < A_VECS; ++i) {
      const int e = tid + i * GTHREADS;
      const int per = TA ? GBM / 4 : GBK / 4;
      const int r = e / per, q = (e % per) * 4;
      float* da = As + st * A_STAGE + (TA ? r * AS_TA + q : r * AS_NN + q);
      const int am = TA ? m0 + q : m0 + r, ak = TA ? k0 + r : k0 + q;  // first element
      const float* sa = A + (unsigned long long)(TA ? ak : am) * lda + (TA ? am : ak);
      const bool afull = TA ? (ak < ke && am + 3 < M) : (am < M && ak + 3 < ke);
      if (avec && afull) {
        cp_async16(da, sa);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool in = TA ? (ak < ke && am + j < M) : (am < M && ak + j < ke);
          da[j] = in ? sa[j] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < B_VECS; ++i) {
      const int e = tid + i * GTHREADS;
      const int r = e / (GBN / 4), q = (e % (GBN / 4)) * 4;
      float* db = Bs + st * B_STAGE + r * BS_LD + q;
      const int bk = k0 + r, bn = n0 + q;
      const float* sb = B + (unsigned long long)bk * N + bn;
      if (bvec && bk < ke && bn + 3 < N) {
        cp_async16(db, sb);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) db[j] = (bk < ke && bn + j < N) ? sb[j] : 0.0f;
      }
    }
  };
  // op(A)[m][k] and B[k][n] of stage st, tile coordinates.
  auto a_at = [&](int st, int m, int k) -> float {
    return TA ? As[st * A_STAGE + k * AS_TA + m] : As[st * A_STAGE + m * AS_NN + k];
  };
  auto b_at = [&](int st, int k, int n) -> float { return Bs[st * B_STAGE + k * BS_LD + n]; };

  // The tensor cores take the operands as stored: they read an FP32's TF32 bits.
  auto compute = [&](int cur) {
#pragma unroll
    for (int kk = 0; kk < GBK; kk += 8) {
      if (MMA) {
        float a[MI][4], b[NJ][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const int m = wm + 16 * i + g;
          a[i][0] = a_at(cur, m, kk + t);
          a[i][1] = a_at(cur, m + 8, kk + t);
          a[i][2] = a_at(cur, m, kk + t + 4);
          a[i][3] = a_at(cur, m + 8, kk + t + 4);
        }
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int n = wn + 8 * j + g;
          b[j][0] = b_at(cur, kk + t, n);
          b[j][1] = b_at(cur, kk + t + 4, n);
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
            mma_tf32(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
      } else {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int m = wm + 16 * i + g + (c >> 1) * 8, n = wn + 8 * j + 2 * t + (c & 1);
              float s = acc[i][j][c];
#pragma unroll
              for (int k = 0; k < 8; ++k) s += a_at(cur, m, kk + k) * b_at(cur, kk + k, n);
              acc[i][j][c] = s;
            }
      }
    }
  };
  stage_ring<NSTAGE>((ke - kb + GBK - 1) / GBK, [&](int buf, int st) { issue(buf, kb + st * GBK); },
                     ahead, compute);
}

// The BF16 main loop of gemm_tile (MI = 1, NJ = 2): A and B hold bf16 values.
// A stage is K rows [k0, k0 + HK): one 16-byte vector (8 values) of A and one
// of B per thread, vector tid at row tid / 4, values 8 (tid % 4)..+7; A as
// [m][k] (NN) or [k][m] (TA), B as [k][n]. Each k16 step loads a warp's A
// fragment with one ldmatrix (transposed for TA) and both B fragments with one
// transposed ldmatrix. ahead() runs while the first stages load.
template <bool TA, class Ahead>
__device__ __forceinline__ void mainloop_bf16(float (&acc)[MI][NJ][4], float* smem, int M, int N,
                                              int kb, int ke, int m0, int n0, int lda,
                                              const unsigned short* __restrict__ A,
                                              const unsigned short* __restrict__ B, Ahead ahead) {
  static_assert(MI == 1 && NJ == 2, "the BF16 main loop covers 16x16 warp tiles");
  unsigned short* As = reinterpret_cast<unsigned short*>(smem);
  unsigned short* Bs = As + NSTAGE_H * H_STAGE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 1) * 16, wn = (warp & 1) * 16;
  const bool avec = (lda % 8 == 0) && (((unsigned long long)A & 15) == 0);
  const bool bvec = (N % 8 == 0) && (((unsigned long long)B & 15) == 0);
  auto issue = [&](int st, int k0) {
    const int r = tid >> 2, q = (tid & 3) * 8;
    unsigned short* da = As + st * H_STAGE + r * H_LD + q;
    const int am = TA ? m0 + q : m0 + r, ak = TA ? k0 + r : k0 + q;  // first value
    const unsigned short* sa = A + (unsigned long long)(TA ? ak : am) * lda + (TA ? am : ak);
    if (avec && (TA ? (ak < ke && am + 7 < M) : (am < M && ak + 7 < ke))) {
      cp_async16(da, sa);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const bool in = TA ? (ak < ke && am + j < M) : (am < M && ak + j < ke);
        da[j] = in ? sa[j] : (unsigned short)0;
      }
    }
    unsigned short* db = Bs + st * H_STAGE + r * H_LD + q;
    const int bk = k0 + r, bn = n0 + q;
    const unsigned short* sb = B + (unsigned long long)bk * N + bn;
    if (bvec && bk < ke && bn + 7 < N) {
      cp_async16(db, sb);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) db[j] = (bk < ke && bn + j < N) ? sb[j] : (unsigned short)0;
    }
  };
  // The row this lane addresses for ldmatrix: matrix mat = lane / 8, row rr.
  const int mat = lane >> 3, rr = lane & 7;
  auto compute = [&](int cur) {
    const unsigned short* as = As + cur * H_STAGE;
    const unsigned short* bs = Bs + cur * H_STAGE;
#pragma unroll
    for (int kk = 0; kk < HK; kk += 16) {
      // A: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
      // of the warp's rows; B: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
      unsigned a[4], b[4];
      if (TA)
        ldmatrix_x4<true>(a, as + (kk + (mat >> 1) * 8 + rr) * H_LD + wm + (mat & 1) * 8);
      else
        ldmatrix_x4<false>(a, as + (wm + (mat & 1) * 8 + rr) * H_LD + kk + (mat >> 1) * 8);
      ldmatrix_x4<true>(b, bs + (kk + (mat & 1) * 8 + rr) * H_LD + wn + (mat >> 1) * 8);
      mma_bf16(acc[0][0], a, b[0], b[1]);
      mma_bf16(acc[0][1], a, b[2], b[3]);
    }
  };
  stage_ring<NSTAGE_H>((ke - kb + HK - 1) / HK, [&](int buf, int st) { issue(buf, kb + st * HK); },
                       ahead, compute);
}

// The epilogue of an element of column n summed to v: EPI_BIAS_RELU_DROP:
// relu(v + bias[n]) * m, where the mask m is 0 with probability p (the
// element's uniform draw below p) and 1/(1-p) = scale otherwise.
template <int EPI>
__device__ __forceinline__ float epilogue(float v, const float* __restrict__ bias, int n, float m) {
  if (EPI == EPI_BIAS_RELU) return fmaxf(v + bias[n], 0.0f);
  if (EPI == EPI_BIAS_RELU_DROP) return fmaxf(v + bias[n], 0.0f) * m;
  return v;
}

// SGD with momentum and weight decay of one parameter p (velocity v) by its gradient g.
__device__ __forceinline__ void sgd1(float& p, float& v, float g, float lr, float mu, float wd) {
  const float gi = g + wd * p;
  const float vi = mu * v + gi;
  v = vi;
  p = p - lr * vi;
}

// EPI_SGD's arguments: the velocities (laid out as C), the bf16 copy of the
// updated parameters (when not null) and the hyperparameters.
struct SgdArgs {
  float* v;
  unsigned short* ph;
  float lr, mu, wd;
};

// Stores element idx (column n) of the output, summed to v: the epilogue's
// value, or for EPI_SGD the step of parameter C[idx] by the gradient v.
template <int EPI>
__device__ __forceinline__ void store(float* __restrict__ C, unsigned long long idx, float v,
                                      const float* __restrict__ bias, int n, float m, const SgdArgs& sg) {
  if (EPI == EPI_SGD) {
    float p = C[idx], vel = sg.v[idx];
    sgd1(p, vel, v, sg.lr, sg.mu, sg.wd);
    C[idx] = p;
    sg.v[idx] = vel;
    if (sg.ph != 0) sg.ph[idx] = f2bf(p);
  } else {
    C[idx] = epilogue<EPI>(v, bias, n, m);
  }
}

// EPI_SGD's epilogue of a thread's accumulators (the gradient): its elements
// go in pairs of adjacent columns (c = 0, 1 and 2, 3 of an m16n8 tile, at row
// r0 + 16 i, + 8, and column c0 + 8 j), every parameter and velocity loaded
// before any is stepped, as float2 where the pair is in range and aligned.
__device__ __forceinline__ void sgd_epilogue(const float (&acc)[MI][NJ][4], float* __restrict__ C, int M,
                                             int N, int r0, int c0, const SgdArgs& sg) {
  constexpr int PAIRS = MI * NJ * 2;
  float* __restrict__ V = sg.v;
  float2 p[PAIRS], v[PAIRS];
  bool vec[PAIRS];
#pragma unroll
  for (int q = 0; q < PAIRS; ++q) {
    const int i = q / (NJ * 2), j = (q / 2) % NJ, h = q % 2;
    const int gm = r0 + 16 * i + 8 * h, gn = c0 + 8 * j;
    const unsigned long long idx = (unsigned long long)gm * N + gn;
    vec[q] = gm < M && gn + 1 < N && (N % 2) == 0;
    if (vec[q]) {
      p[q] = *reinterpret_cast<const float2*>(C + idx);
      v[q] = *reinterpret_cast<const float2*>(V + idx);
    }
  }
#pragma unroll
  for (int q = 0; q < PAIRS; ++q) {
    const int i = q / (NJ * 2), j = (q / 2) % NJ, h = q % 2;
    const int gm = r0 + 16 * i + 8 * h, gn = c0 + 8 * j;
    const unsigned long long idx = (unsigned long long)gm * N + gn;
    const float g0 = acc[i][j][2 * h], g1 = acc[i][j][2 * h + 1];
    if (vec[q]) {
      sgd1(p[q].x, v[q].x, g0, sg.lr, sg.mu, sg.wd);
      sgd1(p[q].y, v[q].y, g1, sg.lr, sg.mu, sg.wd);
      *reinterpret_cast<float2*>(C + idx) = p[q];
      *reinterpret_cast<float2*>(V + idx) = v[q];
      if (sg.ph != 0)
        *reinterpret_cast<unsigned*>(sg.ph + idx) = (unsigned)f2bf(p[q].x) | ((unsigned)f2bf(p[q].y) << 16);
    } else if (gm < M) {
      if (gn < N) store<EPI_SGD>(C, idx, g0, 0, gn, 1.0f, sg);
      if (gn + 1 < N) store<EPI_SGD>(C, idx + 1, g1, 0, gn + 1, 1.0f, sg);
    }
  }
}

// C[M,N] = op(A)[M,K] * B[K,N] (+ epilogue), row-major: op(A)[m,k] is
// A[k*M+m] when TA, else A[m*K+k]; B[k,n] is B[k*N+n]; A and B are floats, or
// bf16 values when HALF. Block (x, y, z): the tile of rows GBM y.., columns
// GBN x.., and the K range [z*kchunk, (z+1)*kchunk). With gridDim.z > 1 each
// block writes its partial tile to ws[z][M][N]; the last to finish
// (counters[tile], reset by it to 0 for the next launch) sums ws[0..Z-1] in
// that order and applies the epilogue. With CL > 0 the launch is one
// cluster of CL blocks per tile (gridDim.z == CL, sm_90): the partial tiles
// stay in shared memory, and block z sums rows [z GBM/CL, (z+1) GBM/CL) of
// them over the cluster in z order and applies the epilogue to those rows.
// MMA: tensor cores (TF32; BF16 when HALF), else the same fragments summed in
// FP32 FMAs.
template <bool TA, bool MMA, bool HALF, int EPI, int CL>
__device__ __forceinline__ void gemm_tile(int M, int N, int K, int kchunk,
                                          const void* __restrict__ A, const void* __restrict__ B,
                                          float* __restrict__ C, const float* __restrict__ bias,
                                          sluice_rng_state* __restrict__ states, float p, float scale,
                                          float* __restrict__ ws, unsigned* __restrict__ counters,
                                          const SgdArgs sg = SgdArgs{}) {
  pdl_enter();
  __shared__ __align__(16) float smem[HALF ? SMEM_BF16 : SMEM_F32];
  __shared__ int s_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 1) * 16 * MI, wn = (warp & 1) * 8 * NJ;
  const int m0 = blockIdx.y * GBM, n0 = blockIdx.x * GBN;
  const int kb = blockIdx.z * kchunk, ke = min(K, kb + kchunk);
  const int lda = TA ? M : K;

  // acc[i][j]: the m16n8 tile (i, j) of the warp; element c of it is row
  // wm + 16 i + g + 8 (c / 2), column wn + 8 j + 2 t + c % 2.
  float acc[MI][NJ][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
  // The loops below visit acc in the order u = (i * NJ + j) * 4 + c; element
  // u's place in the tile is ACC_GM, ACC_GN.
#define ACC_IJC const int i = u / (NJ * 4), j = (u / 4) % NJ, c = u % 4
#define ACC_GM (m0 + wm + 16 * i + g + (c >> 1) * 8)
#define ACC_GN (n0 + wn + 8 * j + 2 * t + (c & 1))

  const int Z = gridDim.z;
  const bool drop = EPI == EPI_BIAS_RELU_DROP && p > 0.0f;

  // Dropout, drawn by the tile's block z = 0 while its first stages load:
  // its thread tid owns the RNG state tile * GTHREADS + tid and draws the
  // uniforms of its MI * NJ * 4 elements from it, draw (i * NJ + j) * 4 + c for
  // acc[i][j][c] (out-of-range elements too); the state goes back, so the
  // draws are checkpointed. The mask (0 with probability p, else scale)
  // reaches the tile's last block through C, which that block overwrites (in
  // a cluster: through block 0's shared memory).
  float drop_m[MI][NJ][4];
  auto draw = [&]() {
    if (!drop || blockIdx.z != 0) return;
    const unsigned long long si =
        (unsigned long long)(blockIdx.y * gridDim.x + blockIdx.x) * GTHREADS + tid;
    sluice_rng_state s = states[si];
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      drop_m[i][j][c] = sluice_rng_uniform(&s) < p ? 0.0f : scale;
      const int gm = ACC_GM, gn = ACC_GN;
      if (CL == 0 && Z > 1 && gm < M && gn < N) C[(unsigned long long)gm * N + gn] = drop_m[i][j][c];
    }
    states[si] = s;
  };
  if (HALF)
    mainloop_bf16<TA>(acc, smem, M, N, kb, ke, m0, n0, lda, static_cast<const unsigned short*>(A),
                      static_cast<const unsigned short*>(B), draw);
  else
    mainloop_f32<TA, MMA>(acc, smem, M, N, kb, ke, m0, n0, lda, static_cast<const float*>(A),
                          static_cast<const float*>(B), draw);

  if (CL > 0) {
    static_assert(CL == 0 || (GBM % CL == 0 && GBM * GBN % (GTHREADS * (CL > 0 ? CL : 1)) == 0),
                  "a cluster's blocks share the tile's rows evenly");
    static_assert(2 * GBM * RED_LD <= (HALF ? SMEM_BF16 : SMEM_F32), "the partial tile fits the stages");
    // The stages become this block's partial tile (and, in block 0, the mask).
    float* red = smem;
    float* msk = smem + GBM * RED_LD;
    __syncthreads();  // every warp is done with the last stage
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      const int off = (ACC_GM - m0) * RED_LD + ACC_GN - n0;
      red[off] = acc[i][j][c];
      if (drop && blockIdx.z == 0) msk[off] = drop_m[i][j][c];
    }
    cluster_sync();
    const int rows = GBM / (CL > 0 ? CL : 1);
#pragma unroll
    for (int e = tid; e < rows * GBN; e += GTHREADS) {
      const int r = blockIdx.z * rows + e / GBN, col = e % GBN;
      const int off = r * RED_LD + col, gm = m0 + r, gn = n0 + col;
      float v = ld_cluster(red + off, 0);
#pragma unroll
      for (int q = 1; q < CL; ++q) v += ld_cluster(red + off, q);
      const float m = drop ? ld_cluster(msk + off, 0) : 1.0f;
      if (gm < M && gn < N) store<EPI>(C, (unsigned long long)gm * N + gn, v, bias, gn, m, sg);
    }
    cluster_sync();  // no block leaves while another reads its shared memory
    return;
  }

  if (Z > 1) {
    // Split K: the partial tile to ws[z]; the last block of the tile to take
    // a ticket adds them. Release and acquire as CUTLASS's GenericBarrier:
    // the block's stores, a barrier, then one thread's acq_rel fence and
    // relaxed atomic; after the last ticket that thread's fence, a barrier.
    float* part = ws + (unsigned long long)blockIdx.z * M * N;
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      const int gm = ACC_GM, gn = ACC_GN;
      if (gm < M && gn < N) part[(unsigned long long)gm * N + gn] = acc[i][j][c];
    }
    __syncthreads();
    if (tid == 0) {
      const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
      fence_acq_rel_gpu();
      const unsigned ticket = atomicAdd(&counters[tile], 1u);
      s_last = ticket == (unsigned)(Z - 1);
      if (s_last) {
        fence_acq_rel_gpu();
        counters[tile] = 0;  // every other block of the tile has taken its ticket
      }
    }
    __syncthreads();
    if (!s_last) return;
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      const int gm = ACC_GM, gn = ACC_GN;
      if (gm < M && gn < N) {
        const unsigned long long idx = (unsigned long long)gm * N + gn;
        float s = __ldcg(ws + idx);
        for (int z = 1; z < Z; ++z) s += __ldcg(ws + (unsigned long long)z * M * N + idx);
        acc[i][j][c] = s;
        if (drop && blockIdx.z != 0) drop_m[i][j][c] = __ldcg(C + idx);
      }
    }
  }

  if constexpr (EPI == EPI_SGD) {
    sgd_epilogue(acc, C, M, N, m0 + wm + g, n0 + wn + 2 * t, sg);
  } else {
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      const int gm = ACC_GM, gn = ACC_GN;
      if (gm >= M || gn >= N) continue;
      const unsigned long long idx = (unsigned long long)gm * N + gn;
      store<EPI>(C, idx, acc[i][j][c], bias, gn, drop ? drop_m[i][j][c] : 1.0f, sg);
    }
  }
#undef ACC_IJC
#undef ACC_GM
#undef ACC_GN
}

#define GEMM_ARGS int M, int N, int K, int kchunk, const void* A, const void* B, float* C
// The training step's products (and the self-test's gemm_nn); the float
// kinds also get evaluation's gemm_nn_bias_relu (EVAL_KERNEL). CLN and CLT:
// the NN and TN kernels' clusters (0: none, split K through ws and counters),
// ATTRN and ATTRT their __cluster_dims__ (or nothing).
#define GEMM_KERNELS(SUFFIX, MMA, HALF, CLN, CLT, ATTRN, ATTRT)                                    \
  __global__ void ATTRN __launch_bounds__(GTHREADS)                                  \
      gemm_nn##SUFFIX(GEMM_ARGS, float* ws, unsigned* counters) {                                  \
    gemm_tile<false, MMA, HALF, EPI_STORE, CLN>(M, N, K, kchunk, A, B, C, 0, 0, 0.0f, 1.0f, ws,    \
                                                counters);                                         \
  }                                                                                                \
  __global__ void ATTRT __launch_bounds__(GTHREADS)                                  \
      gemm_tn##SUFFIX(GEMM_ARGS, float* ws, unsigned* counters) {                                  \
    gemm_tile<true, MMA, HALF, EPI_STORE, CLT>(M, N, K, kchunk, A, B, C, 0, 0, 0.0f, 1.0f, ws,     \
                                               counters);                                          \
  }                                                                                                \
  __global__ void ATTRT __launch_bounds__(GTHREADS) gemm_tn_sgd##SUFFIX(                           \
      GEMM_ARGS, float* v, unsigned short* ph, float lr, float mu, float wd, float* ws,            \
      unsigned* counters) {                                                                        \
    gemm_tile<true, MMA, HALF, EPI_SGD, CLT>(M, N, K, kchunk, A, B, C, 0, 0, 0.0f, 1.0f, ws,       \
                                             counters, SgdArgs{v, ph, lr, mu, wd});                \
  }                                                                                                \
  __global__ void ATTRN __launch_bounds__(GTHREADS) gemm_nn_bias_relu_drop##SUFFIX(  \
      GEMM_ARGS, const float* bias, sluice_rng_state* states, float p, float scale, float* ws,     \
      unsigned* counters) {                                                                        \
    gemm_tile<false, MMA, HALF, EPI_BIAS_RELU_DROP, CLN>(M, N, K, kchunk, A, B, C, bias, states, p, \
                                                         scale, ws, counters);                     \
  }
// The BF16 kernels' clusters: n blocks along z (sm_90), or none for n = 0.
#if CLUSTER_NN > 0
#define NN_CLUSTER __cluster_dims__(1, 1, CLUSTER_NN)
#else
#define NN_CLUSTER
#endif
#if CLUSTER_TN > 0
#define TN_CLUSTER __cluster_dims__(1, 1, CLUSTER_TN)
#else
#define TN_CLUSTER
#endif

#define EVAL_KERNEL(SUFFIX, MMA)                                                                  \
  __global__ void __launch_bounds__(GTHREADS) gemm_nn_bias_relu##SUFFIX(                            \
      GEMM_ARGS, const float* bias, float* ws, unsigned* counters) {                               \
    gemm_tile<false, MMA, false, EPI_BIAS_RELU, 0>(M, N, K, kchunk, A, B, C, bias, 0, 0.0f, 1.0f,  \
                                                   ws, counters);                                  \
  }

extern "C" {

GEMM_KERNELS(, true, false, 0, 0, , )
GEMM_KERNELS(_simt, false, false, 0, 0, , )
#if __CUDA_ARCH__ >= 900  // the BF16 kernels (clusters): absent before Hopper
GEMM_KERNELS(_bf16, true, true, CLUSTER_NN, CLUSTER_TN, NN_CLUSTER, TN_CLUSTER)
#endif
EVAL_KERNEL(, true)
EVAL_KERNEL(_simt, false)

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

// A block of 128 threads (4 warps) per row r of a1 (hid units): the logits
// l = a1[r] W2 + b2 (thread k sums units k, k+128, ..., each warp adds its
// lanes by a xor butterfly, then the 4 warps' sums in warp order), a right
// prediction counted in *right; when train, also the row's loss and the
// gradient (softmax - onehot) * inv_rows.
#define CE_THREADS 128
__global__ void __launch_bounds__(CE_THREADS) fwd2_ce(const float* a1, const float* w2, const float* b2,
                                                      const unsigned char* labels, float* dlogits,
                                                      float* rowloss, unsigned* right, unsigned rows,
                                                      unsigned hid, float inv_rows, int train) {
  pdl_enter();
  __shared__ float s_part[CE_THREADS / 32][10];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = blockIdx.x;
  if (r >= rows) return;  // the same for the whole block
  float acc[10];
#pragma unroll
  for (int j = 0; j < 10; ++j) acc[j] = 0.0f;
  const float* a = a1 + (unsigned long long)r * hid;
  for (unsigned c = threadIdx.x; c < hid; c += CE_THREADS) {
    const float av = a[c];
    const float* w = w2 + (unsigned long long)c * 10;
#pragma unroll
    for (int j = 0; j < 10; ++j) acc[j] += av * w[j];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int j = 0; j < 10; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
  if (lane < 10) {
#pragma unroll
    for (int j = 0; j < 10; ++j)
      if ((int)lane == j) s_part[warp][j] = acc[j];
  }
  __syncthreads();
  if (warp != 0) return;
  float l[10];
#pragma unroll
  for (int j = 0; j < 10; ++j) {
    float v = s_part[0][j];
#pragma unroll
    for (int w = 1; w < CE_THREADS / 32; ++w) v += s_part[w][j];
    l[j] = v + b2[j];
  }
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
  if (lane == 0 && arg == y) atomicAdd(right, 1u);
}

// One block of 256 threads: losses[*counter] = mean of rowloss (thread k sums
// rows k, k+256, ..., then a fixed tree); ++*counter.
__global__ void __launch_bounds__(256) loss_store(const float* rowloss, float* losses,
                                                  unsigned* counter, unsigned rows) {
  pdl_enter();
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

// The backward pass of the second layer and of the hidden activation, 4
// hidden units per block of 256 threads (thread: unit c = 4 * block + tid %
// 4, rows tid / 4, tid / 4 + 64, ...):
//   da1[r,c] = a1[r,c] > 0 ? scale * sum_j dz2[r,j] W2[c,j] : 0
//     (written to da1h in bf16 instead when da1h is not null)
//     (a1 > 0 exactly where relu passed and dropout kept: the mask is scale there)
//   dW2[c,j] = sum_r a1[r,c] dz2[r,j]    db1[c] = sum_r da1[r,c]
// and unit c == hid is the bias of the second layer: db2[j] = sum_r dz2[r,j].
// The 64 partial sums of each unit are added in a fixed order. Those
// gradients then step their parameters by SGD with momentum (sgd1): p1 and v1
// are the parameters and velocities from b1 on ([b1 (hid), W2 (hid x 10),
// b2 (10)]). A block reads only its own units' rows of W2, all before it
// updates them.
#define BWD2_UNITS 4
#define BWD2_SLOTS 64
__global__ void __launch_bounds__(256) bwd2(const float* a1, const float* dz2, const float* w2,
                                            float* da1, unsigned short* da1h, float* p1, float* v1,
                                            unsigned rows, unsigned hid, float scale, float lr,
                                            float mu, float wd) {
  pdl_enter();
  __shared__ float part[256 / 32][BWD2_UNITS][11];
  const unsigned col = threadIdx.x % BWD2_UNITS, slot = threadIdx.x / BWD2_UNITS;
  const unsigned c = blockIdx.x * BWD2_UNITS + col;
  float gw[10], gb = 0.0f;
#pragma unroll
  for (int j = 0; j < 10; ++j) gw[j] = 0.0f;
  if (c < hid) {
    float wc[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) wc[j] = w2[(unsigned long long)c * 10 + j];
    for (unsigned r = slot; r < rows; r += BWD2_SLOTS) {
      const float* d = dz2 + (unsigned long long)r * 10;
      float dz[10];
#pragma unroll
      for (int j = 0; j < 10; ++j) dz[j] = d[j];
      const float a = a1[(unsigned long long)r * hid + c];
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 10; ++j) s += dz[j] * wc[j];
      const float v = a > 0.0f ? s * scale : 0.0f;
      if (da1h != 0)
        da1h[(unsigned long long)r * hid + c] = f2bf(v);
      else
        da1[(unsigned long long)r * hid + c] = v;
      gb += v;
#pragma unroll
      for (int j = 0; j < 10; ++j) gw[j] += a * dz[j];
    }
  } else if (c == hid) {
    for (unsigned r = slot; r < rows; r += BWD2_SLOTS) {
#pragma unroll
      for (int j = 0; j < 10; ++j) gw[j] += dz2[(unsigned long long)r * 10 + j];
    }
  }
  // The 8 slots of a warp (lanes col, col + 4, ..., col + 28) by a xor
  // butterfly, then the 8 warps in warp order: a fixed order.
#pragma unroll
  for (int off = BWD2_UNITS; off < 32; off <<= 1) {
#pragma unroll
    for (int j = 0; j < 10; ++j) gw[j] += __shfl_xor_sync(0xffffffffu, gw[j], off);
    gb += __shfl_xor_sync(0xffffffffu, gb, off);
  }
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane < BWD2_UNITS) {
#pragma unroll
    for (int j = 0; j < 10; ++j) part[warp][lane][j] = gw[j];
    part[warp][lane][10] = gb;
  }
  __syncthreads();
  // One thread per parameter: unit u's W2[u, q] (b2[q] for u == hid) for q <
  // 10, b1[u] for q == 10.
  const unsigned u = blockIdx.x * BWD2_UNITS + threadIdx.x / 11, q = threadIdx.x % 11;
  if (threadIdx.x < BWD2_UNITS * 11 && u <= hid && (q < 10 || u < hid)) {
    const unsigned uc = threadIdx.x / 11;
    float sum = part[0][uc][q];
#pragma unroll
    for (int w = 1; w < 256 / 32; ++w) sum += part[w][uc][q];
    const unsigned long long k = q < 10 ? hid + (unsigned long long)u * 10 + q : u;
    sgd1(p1[k], v1[k], sum, lr, mu, wd);
  }
}

// out[i] = bf16(in[i])
__global__ void f32_to_bf16(unsigned short* out, const float* in, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f2bf(in[i]);
}

// The input stage: x[i] = bf16(px[i] / 255) (u8_to_f32's value rounded),
// and the rows' labels copied, y[r] = lb[r].
__global__ void input_bf16(unsigned short* x, unsigned char* y, const unsigned char* px,
                           const unsigned char* lb, unsigned n, unsigned rows) {
  pdl_enter();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = f2bf((float)px[i] * (1.0f / 255.0f));
  if (i < rows) y[i] = lb[i];
}

// The same in floats, four pixels per thread.
__global__ void input_f32(float* x, unsigned char* y, const unsigned char* px, const unsigned char* lb,
                          unsigned n, unsigned rows) {
  pdl_enter();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned i = 4 * t; i < n && i < 4 * t + 4; ++i) x[i] = (float)px[i] * (1.0f / 255.0f);
  if (t < rows) y[t] = lb[t];
}

}  // extern "C"
`

// kernelNames are the functions the model looks up in the compiled module.
var kernelNames = []string{
	"gemm_nn", "gemm_tn", "gemm_nn_bias_relu", "gemm_nn_bias_relu_drop",
	"gemm_nn_simt", "gemm_tn_simt", "gemm_nn_bias_relu_simt", "gemm_nn_bias_relu_drop_simt",
	"gemm_tn_sgd", "gemm_tn_sgd_simt", "gemm_nn_bf16", "gemm_tn_bf16", "gemm_nn_bias_relu_drop_bf16", "gemm_tn_sgd_bf16",
	"u8_to_f32", "input_f32", "input_bf16", "f32_to_bf16", "scale_copy", "fwd2_ce", "loss_store", "bwd2",
}

// pdlKernels are the prefixes of the kernels launched with programmatic
// dependent launch (flag -pdl): the step's and the input stage's.
var pdlKernels = []string{"gemm_nn_bias_relu_drop", "gemm_tn_sgd", "fwd2_ce", "loss_store", "bwd2", "input_"}

// kernelDefines (flag -kdefine) are extra macro definitions for the kernel
// source, "NAME=VALUE,...", as NVRTC options -DNAME=VALUE.
var kernelDefines string

func defineOptions(defs string) []string {
	var opts []string
	for _, d := range strings.Split(defs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			opts = append(opts, "-D"+d)
		}
	}
	return opts
}

// The GEMM kernels' tiling (gemm_tile): GBM x GBN tiles of gemmThreads
// threads, K split across blocks in chunks of a multiple of GBK.
//
// The training step's chunks (flags -kchunk and -kchunk-tn): the K per
// block trades the number of blocks against the partial tiles to add.
// x W1 (K = 784) splits 4 ways, x^T da1 (K = 256, the batch) not at all:
// the fastest of a sweep on an H200 (docs/gpu-runs.md, runs 102 and 104).
var (
	gemmKChunkNN = 224
	gemmKChunkTN = 256
)

// The BF16 products split K across a thread block cluster per tile instead,
// when these are not 0 (flags -cluster and -cluster-tn; CLUSTER_NN and
// CLUSTER_TN in the source). The defaults are the fastest of a sweep on an
// H200 (docs/gpu-runs.md, run 110): x W1 in clusters of 2, x^T da1 unsplit.
var (
	gemmClusterNN = 2
	gemmClusterTN = 0
)

const (
	gemmMI      = 1 // MI: m16 tiles per warp
	gemmNJ      = 2 // NJ: n8 tiles per warp
	gemmBM      = 32 * gemmMI
	gemmBN      = 16 * gemmNJ
	gemmBK      = 32
	gemmStages  = 2 // NSTAGE: the FP32 kinds' ring
	gemmStagesH = 8 // NSTAGE_H: the BF16 ring
	gemmThreads = 128
	dropDraws   = gemmMI * gemmNJ * 4 // dropout uniforms per RNG state: the elements of an epilogue thread
	ceThreads   = 128                 // fwd2_ce's block (CE_THREADS)
	bwd2Units   = 4                   // hidden units per bwd2 block (BWD2_UNITS)
)
