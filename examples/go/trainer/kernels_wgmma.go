package main

// kernelTiles and kernelWgmma are the parts of kernelSource for the
// warpgroup-MMA products (sm_90a, the default where the device has compute
// capability 9.0): x W1 and x^T da1 with their epilogues, on operands the
// kernels that write them leave pre-tiled in global memory, so that each
// block loads the whole K range of its tile by a few bulk copies (the copy
// engine, no per-thread addresses) into shared memory in wgmma's own layout.
// benches/gemm/wgmma_probe.cu measured the way (docs/decisions.md, "The
// products by warpgroup MMA on pre-tiled operands"): with per-thread cp.async
// loads the same kernel took 8.2 µs per x W1, with bulk copies 3.0 (cuBLAS:
// 3.5).

// kernelTiles is tiled_index, which every kernel that writes a pre-tiled
// operand uses (the input stage, fwd2_ce, the SGD epilogue, w1_to_bf16_tiled).
const kernelTiles = `
// Element (r, k) of an operand pre-tiled for the warpgroup-MMA products:
// tiles of R rows (of M, or of N) over the whole K range (kk values, a
// multiple of 16), tile after tile. A tile is 8 x 8 core matrices of 128
// bytes, core (k / 8, r / 8) at k / 8 * R / 8 + r / 8, each 8 rows of 16
// bytes: a row per r holding k % 8 (K-major), or a row per k holding r % 8
// (MN-major). Stage s of a tile, K [16 S s, 16 S (s + 1)), is then one
// contiguous run of 32 R S bytes.
__device__ __forceinline__ unsigned long long tiled_index(unsigned R, bool mn, unsigned r, unsigned k,
                                                          unsigned kk) {
  const unsigned t = r / R, rr = r % R;
  const unsigned core = (k >> 3) * (R >> 3) + (rr >> 3);
  return (unsigned long long)t * R * kk + core * 64u + (mn ? (k & 7u) * 8u + (rr & 7u) : (rr & 7u) * 8u + (k & 7u));
}
// The layouts (B: the batch's rows; W1 is inputs x H):
//   x (x W1's A, K-major; x^T da1's A, MN-major, read with other strides):
//                                     tiled_index(WG_BM, false, row, pixel, inputs)
//   W1's bf16 copy (x W1's B, MN):    tiled_index(WG_BN, true, unit, pixel, inputs)
//   da1's bf16 copy (x^T da1's B, MN): tiled_index(WG_BN, true, unit, row, B)
#define WG_BM 64
#define WG_BN 32

// The wgmma x W1's dropout, drawn a kernel ahead (fwd2_ce of the step
// before, or drop_mask): state si draws the 8 elements that gemm_tile's
// thread si % 128 of 32 x 32 tile si / 128 holds (dropDraw). In x W1's tiles
// of 64 x 32 those are the column half h of thread (warp, lane) of tile
// (ty / 2, bx), with ty, bx the 32 x 32 tile's row and column, warp = (ty %
// 2) * 2 + q / 2, h = q % 2, q = si % 128 / 32: its bits go to byte 2 (tile
// 128 + warp 32 + lane) + h of the mask, bit u set where draw u drops (is
// below p), so that x W1's thread reads its 16 as one unsigned short.
// It moves only the words a uniform draw reads or changes: the counter, the
// Philox block, the key and the position (48 of the state's 64 bytes read,
// 36 written; the normals' fields stay as they are).
__device__ __forceinline__ unsigned char drop_bits(sluice_rng_state* __restrict__ states, unsigned si, float p) {
  uint4* w = reinterpret_cast<uint4*>(states + si);
  const uint4 c = w[0], o = w[1], k = w[2];
  sluice_rng_state rs;
  rs.ctr[0] = c.x, rs.ctr[1] = c.y, rs.ctr[2] = c.z, rs.ctr[3] = c.w;
  rs.output[0] = o.x, rs.output[1] = o.y, rs.output[2] = o.z, rs.output[3] = o.w;
  rs.key[0] = k.x, rs.key[1] = k.y, rs.position = k.z;
  unsigned bits = 0;
#pragma unroll
  for (int u = 0; u < 8; ++u) bits |= (sluice_rng_uniform(&rs) < p ? 1u : 0u) << u;
  w[0] = make_uint4(rs.ctr[0], rs.ctr[1], rs.ctr[2], rs.ctr[3]);
  w[1] = make_uint4(rs.output[0], rs.output[1], rs.output[2], rs.output[3]);
  reinterpret_cast<unsigned*>(w + 2)[2] = rs.position;
  return (unsigned char)bits;
}
__device__ __forceinline__ unsigned drop_mask_byte(unsigned si, unsigned tiles_x) {
  const unsigned tile = si / 128, ty = tile / tiles_x, bx = tile % tiles_x, q = si % 128 / 32;
  const unsigned warp = (ty & 1) * 2 + q / 2;
  return (((ty >> 1) * tiles_x + bx) * 128 + warp * 32 + si % 32) * 2 + (q & 1);
}
// State si's draws into its byte of the mask.
__device__ __forceinline__ void drop_mask_state(sluice_rng_state* __restrict__ states, unsigned si, float p,
                                                unsigned tiles_x, unsigned char* mask) {
  mask[drop_mask_byte(si, tiles_x)] = drop_bits(states, si, p);
}
`

// kernelWgmma holds the products themselves.
const kernelWgmma = `
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_THREADS 128     // one warpgroup per 64 x 32 tile
#define WG_MAX_STAGES 16   // mbarriers: stages of K per tile
#define WG_SK_NN 7         // k16 steps per stage: x W1 (K = 784: 7 stages)
#define WG_SK_TN 4         // x^T da1 (K = the batch: 256 in 4 stages)

// A shared-memory matrix descriptor without swizzle: the start address, the
// stride between core matrices along K (LBO) and along M or N (SBO).
__device__ __forceinline__ unsigned long long wg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32);
}
// d += A (64 x 16) B (16 x 32), bf16, both from shared memory; A
// transposed (MN-major) when TA, B always MN-major. d: thread (warp w, g =
// lane / 4, t = lane % 4) holds row 16 w + g + 8 ((j / 2) % 2), column 8 (j /
// 4) + 2 t + j % 2 in d[j].
template <int TA>
__device__ __forceinline__ void wgmma_n32(float (&d)[16], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, %19, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(1), "n"(TA));
}
__device__ __forceinline__ void mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait0(unsigned bar) {
  asm volatile(
      "{\n.reg .pred done;\nWG_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WG_WAIT_%=;\n}\n" ::"r"(bar)
      : "memory");
}
// bytes from global src to shared dst by the copy engine, completing on bar.
__device__ __forceinline__ void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// gemm_nn_ce_wg: x W1 in blocks of 64 x 64 (warpgroup 0's MMAs), a cluster of
// WG_CE_CLUSTER per 64 rows (all of hid). Each block owns CE_ROWS of those
// rows: the cluster's blocks push their a1 of them into its shared memory
// (st.async, completing on its mbarrier: no cluster barrier after the MMAs),
// and its CE_GROUPS groups of CE_THREADS threads run fwd2_ce on them (its
// arithmetic: the same bits), rows g, g + CE_GROUPS, ... in group g. a1r
// holds the owned rows as [source block][row][CE_COLS].
#ifndef CE_NT
#define CE_NT 1  // tiles of B per block: 1 (clusters of 16, non-portable) or 2 (of 8)
#endif
#define WG_CE_CLUSTER (16 / CE_NT)
#ifndef CE_GROUPS
#define CE_GROUPS 4
#endif
#define CE_COLS (CE_NT * WG_BN)
#define CE_ROWS (WG_BM / WG_CE_CLUSTER)
#define CE_BLOCK (CE_GROUPS * WG_THREADS)
static_assert(CE_THREADS == WG_THREADS && CE_UNITS * CE_THREADS == WG_CE_CLUSTER * CE_COLS,
              "gemm_nn_ce_wg: a thread per unit of a row in each of CE_UNITS steps");
static_assert(CE_ROWS % CE_GROUPS == 0 && CE_ROWS <= CE_BLOCK / 32, "gemm_nn_ce_wg: rows per group, a warp per row");
struct CeArgs {
  const float* w2;
  const float* b2;
  const unsigned char* labels;
  float* dlogits;
  float* rowloss;
  unsigned* right;
  float inv_rows;
  unsigned short* da1h;
};
// fwd2_ce's loads of a thread's rows of W2 (units tid + k CE_THREADS) and b2.
__device__ __forceinline__ void ce_load_w2(float (&w)[CE_UNITS][10], float (&bias)[10], const float* w2,
                                           const float* b2, unsigned tid, unsigned hid) {
#pragma unroll
  for (int k = 0; k < CE_UNITS; ++k) {
    const unsigned c = tid + k * CE_THREADS;
#pragma unroll
    for (int j = 0; j < 10; ++j) w[k][j] = c < hid ? w2[(unsigned long long)c * 10 + j] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < 10; ++j) bias[j] = b2[j];
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }
// v to the shared memory of block rank of the cluster at the address of
// local (in this block), completing on that block's mbarrier at bar.
__device__ __forceinline__ void st_async2(const void* local, unsigned rank, unsigned bar, float2 v) {
  unsigned ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rb) : "r"(bar), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(ra),
               "f"(v.x), "f"(v.y), "r"(rb)
               : "memory");
}
// fwd2_ce (train, da1 to da1h pre-tiled) on the block's rows m0 + CE_ROWS
// rank + i (i < CE_ROWS), their a1 in a1r, y the label of the row of this
// thread's warp (ce_row_of_warp). As fwd2_ce's block of a row, the thread of
// group gi sums units tid + k CE_THREADS of rows gi, gi + CE_GROUPS, ...,
// the warps' parts are added in warp order, and a warp per row takes the softmax.
__device__ __forceinline__ int ce_row_of_warp() { return threadIdx.x / 32 < CE_ROWS ? threadIdx.x / 32 : -1; }
__device__ __forceinline__ void ce_rows(const float* a1r, const float (&w)[CE_UNITS][10], const float (&bias)[10],
                                        int y, const CeArgs& ce, unsigned r0, int rows, int hid, float scale) {
  __shared__ float s_part[CE_ROWS][CE_THREADS / 32][10];
  __shared__ float s_dz[CE_ROWS][10];
  constexpr int RG = CE_ROWS / CE_GROUPS;  // rows per group
  const unsigned gi = threadIdx.x / CE_THREADS, tid = threadIdx.x % CE_THREADS, lane = tid & 31, warp = tid >> 5;
  float av[RG][CE_UNITS];
#pragma unroll
  for (int q = 0; q < RG; ++q)
#pragma unroll
    for (int k = 0; k < CE_UNITS; ++k) {
      const unsigned c = tid + k * CE_THREADS, i = gi + CE_GROUPS * q;
      av[q][k] = a1r[((c / CE_COLS) * CE_ROWS + i) * CE_COLS + c % CE_COLS];
    }
#ifndef CE_T4
#pragma unroll
  for (int q = 0; q < RG; ++q) {
    float acc[10];
    ce_unit_sums(acc, av[q], w, tid, hid);
    ce_warp_sums(acc, lane, s_part[gi + CE_GROUPS * q][warp]);
  }
#else
  if (lane < 10) s_part[gi][warp][lane] = av[0][0] + av[RG - 1][3];
#endif
  __syncthreads();
#ifndef CE_T3
  if (const int i = ce_row_of_warp(); i >= 0)
    ce_softmax(s_part[i], bias, y, lane, r0 + i, ce.inv_rows, 1, ce.dlogits, ce.rowloss, ce.right, s_dz[i]);
#endif
  __syncthreads();
#ifndef CE_T2
#pragma unroll
  for (int q = 0; q < RG; ++q) {
    const unsigned i = gi + CE_GROUPS * q, r = r0 + i;
    float dz[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) dz[j] = s_dz[i][j];
#pragma unroll
    for (int k = 0; k < CE_UNITS; ++k) {
      const unsigned c = tid + k * CE_THREADS;
      ce.da1h[tiled_index(WG_BN, true, c, r, rows)] = f2bf(ce_da1(dz, w[k], av[q][k], scale));
    }
  }
#endif
}

// C[M,N] = op(A) B (+ epilogue) on tile (blockIdx.y, blockIdx.x) of 64 x 32
// NT (NT tiles of B's 32 columns side by side), A and B pre-tiled
// (tiled_index; B MN-major), K a multiple of 16 SK16 (whole stages: with a
// guard for a partial one, ptxas serialized x^T da1's MMAs, 1.04x slower
// steps in run 257) whose whole range fits in shared memory. A is M x K
// K-major, or when TA stored K x M as x W1's A is (tiled_index(WG_BM, false,
// k, m, M), M a multiple of 8): its core matrices are then those of the
// MN-major operand, and a stage (64 of K, one tile of A's rows) holds this
// block's 64 columns as one run of 8 KB. Thread 0 issues every stage's bulk
// copies at once (A's before pdl_enter: x is written by the input stage,
// never the kernel ahead where x W1 launches early), each stage completing on
// its mbarrier; the warpgroup's MMAs then run stage by stage in one fixed
// order (an m64n32k16 per 32 columns), so the sums never depend on timing.
// Epilogues as gemm_tile's: EPI_BIAS_RELU_DROP takes the dropout of its
// elements from the mask drawn ahead (drop_bits: the same RNG states and
// draws as gemm_tile's 32 x 32 tiles, dropDraw), before pdl_enter (drawn two
// kernels ahead); EPI_CE after it (drawn by the kernel ahead) and then runs
// fwd2_ce on the tile's rows with the cluster (ce_rows). EPI_SGD steps W1
// and writes its bf16 copy pre-tiled as x W1's B.
template <int EPI, bool TA, int SK16, int NT = 1>
__device__ __forceinline__ void wg_tile(int M, int N, int K, const unsigned short* __restrict__ A,
                                        const unsigned short* __restrict__ B, float* __restrict__ C,
                                        const float* __restrict__ bias, const unsigned short* __restrict__ mask,
                                        float p, float scale, const SgdArgs sg, const CeArgs& ce = CeArgs{}) {
  extern __shared__ __align__(128) unsigned char wg_smem[];
  __shared__ __align__(8) unsigned long long wg_bar[WG_MAX_STAGES + (EPI == EPI_CE)];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN * NT;
  const int nst = K / (16 * SK16);  // whole stages
  const unsigned sa = smem_addr(wg_smem), sb = sa + WG_BM * K * 2, bar0 = smem_addr(wg_bar);
  static_assert(!TA || SK16 * 16 == WG_BM, "TA: a stage is one tile of A's rows");
  const unsigned char* ta = reinterpret_cast<const unsigned char*>(
      TA ? A + blockIdx.y * WG_BM * 64 : A + (unsigned long long)blockIdx.y * WG_BM * K);  // TA: 64 cores in
  const unsigned char* tb = reinterpret_cast<const unsigned char*>(B + (unsigned long long)n0 * K);
  const unsigned b_tile = WG_BN * K * 2;  // bytes of one tile of B, in global and in shared memory
  // EPI_CE: the mbarrier of the owned rows' a1 (ce_rows), past the stages'.
  const unsigned ce_bar = bar0 + 8 * WG_MAX_STAGES;
  if (tid == 0) {
    for (int s = 0; s < nst; ++s) mbar_init(bar0 + 8 * s);
    if constexpr (EPI == EPI_CE) mbar_init(ce_bar);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if constexpr (EPI == EPI_CE) mbar_expect_tx(ce_bar, CE_ROWS * N * 4);
    for (int s = 0; s < nst; ++s) {
      const unsigned k16 = SK16, off = s * SK16 * 32;
      // TA: the 8-column groups of this block's columns that A has.
      const unsigned abytes = TA ? min(8, (M - m0 + 7) / 8) * 1024 : k16 * 32 * WG_BM;
      const unsigned char* src = TA ? ta + (unsigned long long)s * WG_BM * M * 2 : ta + off * WG_BM;
      mbar_expect_tx(bar0 + 8 * s, abytes + NT * k16 * 32 * WG_BN);
      bulk_g2s(sa + off * WG_BM, src, abytes, bar0 + 8 * s);
    }
  }
  // The element of d[h][j] (see wgmma_n32), in the tile and in C.
#define WG_ROW(j) (m0 + warp * 16 + g + 8 * (((j) >> 1) & 1))
#define WG_COL(h, j) (n0 + (h) * WG_BN + ((j) >> 2) * 8 + 2 * t + ((j) & 1))
  // Before pdl_enter (the kernel ahead writes neither): EPI_BIAS_RELU_DROP's
  // mask drawn ahead (drop_bits: bit j of this thread's 16 of a tile, set
  // where d[h][j] drops), and EPI_SGD's parameters and velocities, as pairs
  // of columns.
  float mk[NT][16];
  float2 pp[8], pv[8];
  auto load_mask = [&]() {
#pragma unroll
    for (int h = 0; h < NT; ++h) {
      const unsigned bits =
          p > 0.0f ? mask[(blockIdx.y * (N / WG_BN) + blockIdx.x * NT + h) * WG_THREADS + tid] : 0u;
#pragma unroll
      for (int j = 0; j < 16; ++j) mk[h][j] = (bits >> j) & 1u ? 0.0f : scale;
    }
  };
  if constexpr (EPI == EPI_BIAS_RELU_DROP) load_mask();
  // EPI_CE: every block's mbarrier is initialised before any pushes to it
  // (the wait: after the MMAs), and the label of the row of this warp (the
  // input stage wrote it, as x).
  int ce_y = 0;
  if constexpr (EPI == EPI_CE) {
    cluster_arrive_relaxed();
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    if (ce_row_of_warp() >= 0) ce_y = ce.labels[m0 + CE_ROWS * rank + ce_row_of_warp()];
  }
  if constexpr (EPI == EPI_SGD) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int r = WG_ROW(2 * q), c = WG_COL(0, 2 * q);
      if (r < M) {
        pp[q] = *reinterpret_cast<const float2*>(C + (unsigned long long)r * N + c);
        pv[q] = *reinterpret_cast<const float2*>(sg.v + (unsigned long long)r * N + c);
      }
    }
  }
  pdl_enter();
  if (tid == 0) {
    for (int s = 0; s < nst; ++s) {
      const unsigned k16 = SK16, off = s * SK16 * 32;
#pragma unroll
      for (int h = 0; h < NT; ++h)
        bulk_g2s(sb + h * b_tile + off * WG_BN, tb + h * b_tile + off * WG_BN, k16 * 32 * WG_BN, bar0 + 8 * s);
    }
  }
  // EPI_CE: its mask and W2, b2 come from the kernel ahead (x^T da1 and its
  // layer2_block), read while the MMAs run.
  float w2u[CE_UNITS][10], b2v[10];
  if constexpr (EPI == EPI_CE) {
    if (tid < WG_THREADS) load_mask();
    ce_load_w2(w2u, b2v, ce.w2, ce.b2, tid % CE_THREADS, N);
  }
  __syncthreads();  // the mbarriers are initialised
  float d[NT][16];
#pragma unroll
  for (int h = 0; h < NT; ++h)
#pragma unroll
    for (int j = 0; j < 16; ++j) d[h][j] = 0.0f;
  if (EPI != EPI_CE || tid < WG_THREADS) {  // EPI_CE: warpgroup 0
    for (int s = 0; s < nst; ++s) {
      mbar_wait0(bar0 + 8 * s);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < SK16; ++kk) {
        const unsigned kc = 2 * (s * SK16 + kk);  // core matrices along K
        // A's cores: along K 1024 bytes apart, along M 128; TA: along K (within
        // the stage's 8 KB) 128, along M 1024.
        const unsigned long long da = TA ? wg_desc(sa + s * 8192 + kk * 256, 128, 1024)
                                         : wg_desc(sa + kc * WG_BM * 16, WG_BM * 16, 128);
#pragma unroll
        for (int h = 0; h < NT; ++h) wgmma_n32<TA>(d[h], da, wg_desc(sb + h * b_tile + kc * WG_BN * 16, WG_BN * 16, 128));
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  if constexpr (EPI == EPI_CE) {
    // a1 to C, and to the shared memory of the rows' owners (the row's
    // block in the cluster, as source block blockIdx.x).
    float* a1r = reinterpret_cast<float*>(wg_smem + WG_BM * K * 2 + NT * b_tile);
    cluster_wait();  // every block's mbarrier is initialised
    if (tid < WG_THREADS) {
#pragma unroll
      for (int h = 0; h < NT; ++h)
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int r = WG_ROW(2 * q), c = WG_COL(h, 2 * q), rl = r - m0;
          float2 o;
          o.x = epilogue<EPI_BIAS_RELU_DROP>(d[h][2 * q], bias, c, mk[h][2 * q]);
          o.y = epilogue<EPI_BIAS_RELU_DROP>(d[h][2 * q + 1], bias, c + 1, mk[h][2 * q + 1]);
#ifndef CE_T5
          st_async2(a1r + (blockIdx.x * CE_ROWS + rl % CE_ROWS) * CE_COLS + c - n0, rl / CE_ROWS, ce_bar, o);
#endif
          *reinterpret_cast<float2*>(C + (unsigned long long)r * N + c) = o;
        }
    }
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#ifndef CE_T5
    mbar_wait0(ce_bar);
#endif
    ce_rows(a1r, w2u, b2v, ce_y, ce, m0 + CE_ROWS * rank, M, N, scale);
  } else {
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int r = WG_ROW(2 * q), c = WG_COL(0, 2 * q);
    if (r >= M) continue;
    const unsigned long long idx = (unsigned long long)r * N + c;
    if constexpr (EPI == EPI_SGD) {
      float2 p2 = pp[q], v2 = pv[q];
      sgd1(p2.x, v2.x, d[0][2 * q], sg.lr, sg.mu, sg.wd);
      sgd1(p2.y, v2.y, d[0][2 * q + 1], sg.lr, sg.mu, sg.wd);
      *reinterpret_cast<float2*>(C + idx) = p2;
      *reinterpret_cast<float2*>(sg.v + idx) = v2;
      if (sg.ph != 0)
        *reinterpret_cast<unsigned*>(sg.ph + tiled_index(WG_BN, true, c, r, M)) =
            (unsigned)f2bf(p2.x) | ((unsigned)f2bf(p2.y) << 16);
    } else {
      float2 o;
      if constexpr (EPI == EPI_BIAS_RELU_DROP) {
        o.x = epilogue<EPI>(d[0][2 * q], bias, c, mk[0][2 * q]);
        o.y = epilogue<EPI>(d[0][2 * q + 1], bias, c + 1, mk[0][2 * q + 1]);
      } else {
        o.x = d[0][2 * q];
        o.y = d[0][2 * q + 1];
      }
      *reinterpret_cast<float2*>(C + idx) = o;
    }
  }
  }
#undef WG_ROW
#undef WG_COL
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The warpgroup-MMA kernels, with the _bf16 kernels' parameters (kchunk, ws
// and counters unused): A and B pre-tiled (kernelTiles), N a multiple of
// WG_BN, K of 16; a grid of N / WG_BN x ceil(M / WG_BM) tiles (gemm_tn_sgd_wg:
// and layer2_block's rows of blocks past them), K a multiple of 16 WG_SK_NN
// (x W1) or 16 WG_SK_TN (x^T da1), WG_THREADS threads, and
// 2 (WG_BM + WG_BN) K bytes of dynamic shared memory. Absent unless compiled
// for sm_90a.
extern "C" {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__global__ void __launch_bounds__(WG_THREADS) gemm_nn_wg(GEMM_ARGS, float* ws, unsigned* counters) {
  wg_tile<EPI_STORE, false, WG_SK_NN>(M, N, K, static_cast<const unsigned short*>(A),
                                      static_cast<const unsigned short*>(B), C, 0, 0, 0.0f, 1.0f, SgdArgs{});
}
__global__ void __launch_bounds__(WG_THREADS) gemm_tn_wg(GEMM_ARGS, float* ws, unsigned* counters) {
  wg_tile<EPI_STORE, true, WG_SK_TN>(M, N, K, static_cast<const unsigned short*>(A),
                                     static_cast<const unsigned short*>(B), C, 0, 0, 0.0f, 1.0f, SgdArgs{});
}
__global__ void __launch_bounds__(WG_THREADS) gemm_nn_bias_relu_drop_wg(GEMM_ARGS, const float* bias,
                                                                        const unsigned short* mask, float p,
                                                                        float scale, float* ws, unsigned* counters) {
  wg_tile<EPI_BIAS_RELU_DROP, false, WG_SK_NN>(M, N, K, static_cast<const unsigned short*>(A),
                                               static_cast<const unsigned short*>(B), C, bias, mask, p, scale,
                                               SgdArgs{});
}
// x W1 with fwd2_ce (EPI_CE): a grid of N / 64 x M / 64 blocks, N = WG_CE_CLUSTER 64
// (= CE_UNITS CE_THREADS), M a multiple of 64, and 2 (WG_BM + 2 WG_BN) K + 4 WG_BM
// CE_LD bytes of dynamic shared memory.
__global__ void __cluster_dims__(WG_CE_CLUSTER, 1, 1) __launch_bounds__(CE_BLOCK)
    gemm_nn_ce_wg(GEMM_ARGS, const float* bias, const unsigned short* mask, float p, float scale, const float* w2,
                  const float* b2, const unsigned char* labels, float* dlogits, float* rowloss, unsigned* right,
                  float inv_rows, unsigned short* da1h) {
  wg_tile<EPI_CE, false, WG_SK_NN, CE_NT>(M, N, K, static_cast<const unsigned short*>(A),
                                      static_cast<const unsigned short*>(B), C, bias, mask, p, scale, SgdArgs{},
                                      CeArgs{w2, b2, labels, dlogits, rowloss, right, inv_rows, da1h});
}
// gemm_tn_sgd_wg also draws the next step's dropout mask for gemm_nn_ce_wg
// when states is not null (as fwd2_ce does for gemm_nn_bias_relu_drop_wg: a
// thread per state, drawn before its wait, while the kernel ahead runs, and
// stored after it), and then layer2_block reads a1 after its wait (a1_late:
// the kernel ahead wrote it).
__global__ void __launch_bounds__(WG_THREADS) gemm_tn_sgd_wg(GEMM_ARGS, float* v, unsigned short* ph, float lr,
                                                             float mu, float wd, float* ws, unsigned* counters,
                                                             const float* a1, const float* dz2, float* p1,
                                                             float* v1, float scale, const float* rowloss,
                                                             float* losses, unsigned* counter,
                                                             sluice_rng_state* states, unsigned n_states, float p,
                                                             unsigned char* mask) {
  const unsigned si = (blockIdx.y * gridDim.x + blockIdx.x) * WG_THREADS + threadIdx.x;
  const bool draws = states != nullptr && si < n_states;
  const unsigned char bits = draws ? drop_bits(states, si, p) : 0;
  const unsigned tiles_y = (M + WG_BM - 1) / WG_BM;  // layer2_block's blocks: the rows past them
  if (blockIdx.y >= tiles_y) {
    layer2_block((blockIdx.y - tiles_y) * gridDim.x + blockIdx.x, a1, dz2, p1, v1, K, N, scale, lr, mu, wd,
                 rowloss, losses, counter, states != nullptr);
  } else {
    wg_tile<EPI_SGD, true, WG_SK_TN>(M, N, K, static_cast<const unsigned short*>(A),
                                     static_cast<const unsigned short*>(B), C, 0, 0, 0.0f, 1.0f,
                                     SgdArgs{v, ph, lr, mu, wd});
  }
  if (draws) {
    pdl_enter();  // again (a no-op) for the blocks of layer2_block that return before it
    const unsigned stride = gridDim.x * gridDim.y * WG_THREADS, tiles_x = N / WG_BN;
    mask[drop_mask_byte(si, tiles_x)] = bits;
    for (unsigned sj = si + stride; sj < n_states; sj += stride) drop_mask_state(states, sj, p, tiles_x, mask);
  }
}
#endif
// W1's bf16 copy, pre-tiled as x W1's B: out[tiled_index(WG_BN, true, n, k,
// K)] = bf16(in[k N + n]), a thread per pair of columns.
__global__ void w1_to_bf16_tiled(unsigned short* out, const float* in, unsigned K, unsigned N) {
  const unsigned i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= K * N) return;
  const unsigned k = i / N, n = i % N;
  *reinterpret_cast<unsigned*>(out + tiled_index(WG_BN, true, n, k, K)) =
      (unsigned)f2bf(in[i]) | ((unsigned)f2bf(in[i + 1]) << 16);
}
}  // extern "C"
`

// The warpgroup-MMA products' tiling (WG_BM, WG_BN), K per stage, and the most dynamic
// shared memory a block of theirs may take on sm_90 (227 KiB).
const (
	wgBM        = 64
	wgBN        = 32
	wgThreads   = 128 // WG_THREADS
	wgStageNN   = 112 // 16 WG_SK_NN: K per stage of x W1, which K must be a multiple of
	wgStageTN   = 64  // 16 WG_SK_TN: of x^T da1 (K: the batch)
	wgMaxShared = 227 * 1024
)

// wgShared is the dynamic shared memory of a warpgroup-MMA product over K.
func wgShared(K int) int { return 2 * (wgBM + wgBN) * K }

// gemm_nn_ce_wg's shape (WG_CE_CLUSTER, CE_GROUPS): a cluster of wgCECluster
// blocks of 64 x 64 per 64 rows of x W1, wgCEHidden units, ceGroups
// warpgroups per block; its dynamic shared memory over K: the stages, then
// the a1 of the block's rows.
const wgCEHidden = 16 * wgBN

// ceGroups and ceNT are CE_GROUPS and CE_NT (flags -ce-groups, -ce-nt).
var ceGroups, ceNT = 4, 1

func wgCECluster() int { return 16 / ceNT }

func wgCEShared(K int) int { return 2*(wgBM+ceNT*wgBN)*K + 4*(wgBM/wgCECluster())*wgCEHidden }

// tiledIndex is tiled_index: the place of element (r, k) in an operand
// pre-tiled in tiles of R rows over kk values of K.
func tiledIndex(R int, mn bool, r, k, kk int) int {
	t, rr := r/R, r%R
	core := (k>>3)*(R>>3) + rr>>3
	in := (rr&7)*8 + k&7
	if mn {
		in = (k&7)*8 + rr&7
	}
	return t*R*kk + core*64 + in
}

// tiledLen is the length of an operand of rows rows pre-tiled in tiles of R.
func tiledLen(R, rows, kk int) int { return ceilDiv(rows, R) * R * kk }
