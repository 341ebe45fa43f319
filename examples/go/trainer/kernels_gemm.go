package main

// kernelGemm is the part of kernelSource that holds the products: the tiling,
// the FP32 and BF16 main loops, the epilogues (bias, ReLU, dropout, the SGD
// step), gemm_tile and its kernels (extern "C"). gemm_tn_sgd's grid has more
// rows of blocks past its tiles: they run layer2_block (kernels_layers.go).
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
const kernelGemm = `
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

#define SMEM_F32 (NSTAGE * (A_STAGE + B_STAGE))  // floats of the FP32 main loop's stages
#define HK 32           // BF16: K per stage
#define H_LD (32 + 8)   // BF16: halves per stage row (64 bytes and 16 of padding: ldmatrix rows hit distinct banks)
#define H_STAGE (32 * H_LD)
#define SMEM_BF16 (NSTAGE_H * H_STAGE)  // floats of the BF16 main loop's stages (2 operands of H_STAGE halves)
#define RED_LD (GBN + 1)  // a cluster's partial tile (and mask) in shared memory, [GBM][RED_LD]
#ifndef TN_EARLY_A
#define TN_EARLY_A 1    // BF16 x^T da1: x's first stages load before pdl_enter (0: after)
#endif
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

// The first n of 8 bf16 values from src to dst, zeros after them.
__device__ __noinline__ void copy_prefix(unsigned short* dst, const unsigned short* src, int n) {
#pragma unroll
  for (int j = 0; j < 8; ++j) dst[j] = j < n ? src[j] : (unsigned short)0;
}

// The BF16 main loop of gemm_tile (MI = 1, NJ = 2): A and B hold bf16 values.
// A stage is K rows [k0, k0 + HK): one 16-byte vector (8 values) of A and one
// of B per thread, vector tid at row tid / 4, values 8 (tid % 4)..+7; A as
// [m][k] (NN) or [k][m] (TA), B as [k][n]. Each k16 step loads a warp's A
// fragment with one ldmatrix (transposed for TA) and both B fragments with one
// transposed ldmatrix. ahead() runs while the first stages load. EARLY_A:
// the loop calls pdl_enter, after issuing A's first stages.
template <bool TA, bool EARLY_A, class Ahead>
__device__ __forceinline__ void mainloop_bf16(float (&acc)[MI][NJ][4], float* smem, int M, int N,
                                              int kb, int ke, int m0, int n0, int lda,
                                              const unsigned short* __restrict__ A,
                                              const unsigned short* __restrict__ B, Ahead ahead) {
  static_assert(MI == 1 && NJ == 2, "the BF16 main loop covers 16x16 warp tiles");
  unsigned short* As = reinterpret_cast<unsigned short*>(smem);
  unsigned short* Bs = As + NSTAGE_H * H_STAGE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 1) * 16, wn = (warp & 1) * 16;
  const bool avec = kept((lda % 8 == 0) && (((unsigned long long)A & 15) == 0));
  const bool bvec = kept((N % 8 == 0) && (((unsigned long long)B & 15) == 0));
  // This thread's vector of a stage (8 values), computed once: its place in
  // the stage (row r, values q..q+7), A's first value's m, the sources at
  // k0 = kb, and the shared-memory addresses in buffer 0.
  const int r = tid >> 2, q = (tid & 3) * 8;
  const int am = TA ? m0 + q : m0 + r;
  const unsigned long long a_kstep = TA ? (unsigned long long)lda : 1ull;  // A's elements per k
  const unsigned short* ga =
      kept(A + (TA ? (unsigned long long)(kb + r) * lda + am : (unsigned long long)am * lda + kb + q));
  const unsigned short* gb = kept(B + (unsigned long long)(kb + r) * N + n0 + q);
  const unsigned sa0 = smem_addr(As + r * H_LD + q), sb0 = smem_addr(Bs + r * H_LD + q);
  // Of each vector, the values in range are a prefix (along k for NN's A,
  // along m for TA's, along n for B), of n values at the stage dk = k0 - kb
  // on: NN's A min(a_rem - dk, 8); TA's A a_cnt, B b_cnt, while dk < k_rem
  // (the row is in K); else 0. n == 8 and aligned: one cp.async; 0: a store
  // of zeros; else copy_prefix, out of line (it runs only where M, N or a
  // block's K range is not a multiple of 8). kept() holds each in a register
  // (the compiler would recompute them at every stage).
  const int k_rem = kept(ke - kb - r);
  const int a_rem = kept(TA || am < M ? ke - kb - q : -HK * 1024);
  const int a_cnt = kept(TA ? min(max(M - am, 0), 8) : 0);
  const int b_cnt = kept(min(max(N - n0 - q, 0), 8));
  auto issue_a = [&](int st, int k0) {
    const int dk = k0 - kb;
    const int n = TA ? (dk < k_rem ? a_cnt : 0) : min(max(a_rem - dk, 0), 8);
    const unsigned sm = sa0 + st * (H_STAGE * 2);
    if (n == 8 && avec)
      cp_async16_s(sm, ga + dk * a_kstep);
    else if (n == 0)
      st_shared_zero16(sm);
    else
      copy_prefix(As + st * H_STAGE + r * H_LD + q, ga + dk * a_kstep, n);
  };
  auto issue_b = [&](int st, int k0) {
    const int dk = k0 - kb;
    const int n = dk < k_rem ? b_cnt : 0;
    const unsigned sm = sb0 + st * (H_STAGE * 2);
    if (n == 8 && bvec)
      cp_async16_s(sm, gb + (unsigned long long)dk * N);
    else if (n == 0)
      st_shared_zero16(sm);
    else
      copy_prefix(Bs + st * H_STAGE + r * H_LD + q, gb + (unsigned long long)dk * N, n);
  };
  // The row this lane addresses for ldmatrix (matrix mat = lane / 8, row rr),
  // as shared-memory addresses in buffer 0 at kk = 0.
  const int mat = lane >> 3, rr = lane & 7;
  const unsigned la0 = smem_addr(TA ? As + ((mat >> 1) * 8 + rr) * H_LD + wm + (mat & 1) * 8
                                    : As + (wm + (mat & 1) * 8 + rr) * H_LD + (mat >> 1) * 8);
  const unsigned lb0 = smem_addr(Bs + ((mat & 1) * 8 + rr) * H_LD + wn + (mat >> 1) * 8);
  auto compute = [&](int cur) {
    const unsigned as = la0 + cur * (H_STAGE * 2), bs = lb0 + cur * (H_STAGE * 2);
#pragma unroll
    for (int kk = 0; kk < HK; kk += 16) {
      // A: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
      // of the warp's rows; B: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
      unsigned a[4], b[4];
      ldmatrix_x4_s<TA>(a, as + (TA ? kk * H_LD : kk) * 2);
      ldmatrix_x4_s<true>(b, bs + kk * H_LD * 2);
      mma_bf16(acc[0][0], a, b[0], b[1]);
      mma_bf16(acc[0][1], a, b[2], b[3]);
    }
  };
  const int nk = (ke - kb + HK - 1) / HK;
  if (EARLY_A) {
    // A's first stages before pdl_enter (the kernel ahead does not write A):
    // in the first stage's commit group, with B's.
#pragma unroll
    for (int st = 0; st < NSTAGE_H - 1; ++st)
      if (st < nk) issue_a(st, kb + st * HK);
    pdl_enter();
  }
  stage_ring<NSTAGE_H>(nk, [&](int buf, int st) {
        if (!EARLY_A || st >= NSTAGE_H - 1) issue_a(buf, kb + st * HK);
        issue_b(buf, kb + st * HK);
      }, ahead, compute);
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
// r0 + 16 i, + 8, and column c0 + 8 j), as float2 where the pair is in range
// and aligned. SgdPairs holds those pairs' parameters and velocities, loaded
// by sgd_load before the main loop, so their latency hides behind it.
constexpr int SGD_PAIRS = MI * NJ * 2;
struct SgdPairs {
  float2 p[SGD_PAIRS], v[SGD_PAIRS];
  bool vec[SGD_PAIRS];
};
__device__ __forceinline__ void sgd_load(SgdPairs& f, const float* __restrict__ C, const float* __restrict__ V,
                                         int M, int N, int r0, int c0) {
#pragma unroll
  for (int q = 0; q < SGD_PAIRS; ++q) {
    const int i = q / (NJ * 2), j = (q / 2) % NJ, h = q % 2;
    const int gm = r0 + 16 * i + 8 * h, gn = c0 + 8 * j;
    const unsigned long long idx = (unsigned long long)gm * N + gn;
    f.vec[q] = gm < M && gn + 1 < N && (N % 2) == 0;
    if (f.vec[q]) {
      f.p[q] = *reinterpret_cast<const float2*>(C + idx);
      f.v[q] = *reinterpret_cast<const float2*>(V + idx);
    }
  }
}
__device__ __forceinline__ void sgd_epilogue(const float (&acc)[MI][NJ][4], SgdPairs& f, float* __restrict__ C,
                                             int M, int N, int r0, int c0, const SgdArgs& sg) {
  float* __restrict__ V = sg.v;
#pragma unroll
  for (int q = 0; q < SGD_PAIRS; ++q) {
    const int i = q / (NJ * 2), j = (q / 2) % NJ, h = q % 2;
    const int gm = r0 + 16 * i + 8 * h, gn = c0 + 8 * j;
    const unsigned long long idx = (unsigned long long)gm * N + gn;
    const float g0 = acc[i][j][2 * h], g1 = acc[i][j][2 * h + 1];
    if (f.vec[q]) {
      sgd1(f.p[q].x, f.v[q].x, g0, sg.lr, sg.mu, sg.wd);
      sgd1(f.p[q].y, f.v[q].y, g1, sg.lr, sg.mu, sg.wd);
      *reinterpret_cast<float2*>(C + idx) = f.p[q];
      *reinterpret_cast<float2*>(V + idx) = f.v[q];
      if (sg.ph != 0)
        *reinterpret_cast<unsigned*>(sg.ph + idx) =
            (unsigned)f2bf(f.p[q].x) | ((unsigned)f2bf(f.p[q].y) << 16);
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

  // Dropout: thread tid of the tile owns the RNG state tile * GTHREADS + tid,
  // and its MI * NJ * 4 elements take draws u = (i * NJ + j) * 4 + c of it,
  // for acc[i][j][c] (out-of-range elements too); the state goes back,
  // advanced past them all, so the draws are checkpointed. Without a cluster
  // the tile's block z = 0 draws them all and the mask (0 with probability
  // p, else scale) reaches the tile's last block through C, which that block
  // overwrites. In a cluster block z draws u in [z DRAWS_CL, (z + 1)
  // DRAWS_CL) (skipping ahead to them: the same draws, shared evenly) and
  // keeps their masks for the reduction in shared memory, and the last block
  // stores the state once every block has read it (after the cluster's first
  // barrier). The state loads before pdl_enter (no kernel ahead writes it)
  // and the draws run while the first stages load.
  constexpr int DRAWS_CL = CL > 0 ? MI * NJ * 4 / CL : 1;
  static_assert(CL == 0 || MI * NJ * 4 % CL == 0, "a cluster's blocks share the draws evenly");
  const bool draws = drop && (CL > 0 || blockIdx.z == 0);
  const unsigned long long si = (unsigned long long)(blockIdx.y * gridDim.x + blockIdx.x) * GTHREADS + tid;
  sluice_rng_state rs;
  if (draws) rs = states[si];
  // EPI_SGD: the parameters and velocities this thread steps, also before
  // pdl_enter (the kernel ahead writes neither).
  SgdPairs sgp;
  if constexpr (EPI == EPI_SGD && CL == 0) sgd_load(sgp, C, sg.v, M, N, m0 + wm + g, n0 + wn + 2 * t);
  // EPI_SGD's A is the batch x, which the kernel ahead (fwd2_ce) never writes:
  // the BF16 loop issues its first stages before pdl_enter.
  constexpr bool early_a = HALF && EPI == EPI_SGD && TN_EARLY_A;
  if (!early_a) pdl_enter();
  float drop_m[MI][NJ][4];
  auto draw = [&]() {
    if (!draws) return;
    const int u0 = CL > 0 ? blockIdx.z * DRAWS_CL : 0;
    const int u1 = CL > 0 ? u0 + DRAWS_CL : MI * NJ * 4;
    if (u0 > 0) sluice_rng_skipahead(u0, &rs);
#pragma unroll
    for (int u = 0; u < MI * NJ * 4; ++u) {
      ACC_IJC;
      if (u < u0 || u >= u1) continue;
      drop_m[i][j][c] = sluice_rng_uniform(&rs) < p ? 0.0f : scale;
      const int gm = ACC_GM, gn = ACC_GN;
      if (CL == 0 && Z > 1 && gm < M && gn < N) C[(unsigned long long)gm * N + gn] = drop_m[i][j][c];
    }
    if (CL == 0) states[si] = rs;  // in a cluster: after its first barrier, below
  };
  if (HALF)
    mainloop_bf16<TA, early_a>(acc, smem, M, N, kb, ke, m0, n0, lda, static_cast<const unsigned short*>(A),
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
      if (drop && u / DRAWS_CL == (int)blockIdx.z) msk[off] = drop_m[i][j][c];
    }
    cluster_sync();
    // Every block of the cluster has read the state: the last one stores it.
    if (draws && blockIdx.z == CL - 1) states[si] = rs;
    const int rows = GBM / (CL > 0 ? CL : 1);
#pragma unroll
    for (int e = tid; e < rows * GBN; e += GTHREADS) {
      const int r = blockIdx.z * rows + e / GBN, col = e % GBN;
      const int off = r * RED_LD + col, gm = m0 + r, gn = n0 + col;
      if (gm >= M || gn >= N) continue;  // no load left in flight at the barrier below
      float v = ld_cluster(red + off, 0);
#pragma unroll
      for (int q = 1; q < CL; ++q) v += ld_cluster(red + off, q);
      // The element's draw (as ACC_IJC's u, from its place in the tile) and
      // the block that drew it.
      const int lr = r % (16 * MI), lc = col % (8 * NJ);
      const int u = ((lr / 16) * NJ + lc / 8) * 4 + ((lr % 16) / 8) * 2 + (col & 1);
      const float m = drop ? ld_cluster(msk + off, u / DRAWS_CL) : 1.0f;
      store<EPI>(C, (unsigned long long)gm * N + gn, v, bias, gn, m, sg);
    }
    cluster_sync_relaxed();  // no block leaves while another reads its shared memory
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
    sgd_epilogue(acc, sgp, C, M, N, m0 + wm + g, n0 + wn + 2 * t, sg);
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
      unsigned* counters, const float* a1, const float* dz2, float* p1, float* v1, float scale,    \
      const float* rowloss, float* losses, unsigned* counter) {                                    \
    const unsigned tiles_y = (M + GBM - 1) / GBM; /* layer2_block's blocks: the rows past them */ \
    if (blockIdx.y >= tiles_y) {                                                                   \
      if (blockIdx.z == 0)                                                                         \
        layer2_block((blockIdx.y - tiles_y) * gridDim.x + blockIdx.x, a1, dz2, p1, v1, K, N,      \
                     scale, lr, mu, wd, rowloss, losses, counter);                                 \
      return;                                                                                      \
    }                                                                                              \
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

}  // extern "C"
`

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
)
