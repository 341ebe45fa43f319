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

// C[M,N] = op(A) B (+ epilogue) on tile (blockIdx.y, blockIdx.x) of 64 x 32,
// A and B pre-tiled (tiled_index; B MN-major), K a multiple of 16 SK16 (whole
// stages: with a guard for a partial one, ptxas serialized x^T da1's MMAs,
// 1.04x slower steps in run 257) whose whole range fits in shared memory. A is M x K K-major, or when TA stored K x M as
// x W1's A is (tiled_index(WG_BM, false, k, m, M), M a multiple of 8): its
// core matrices are then those of the MN-major operand, and a stage (64 of K,
// one tile of A's rows) holds this block's 64 columns as one run of 8 KB. Thread 0 issues
// every stage's bulk copies at once (A's before pdl_enter: x is written by the
// input stage, never the kernel ahead where x W1 launches early), each stage
// completing on its mbarrier; the warpgroup's MMAs
// then run stage by stage in one fixed order, so the sums never depend on
// timing. Epilogues as gemm_tile's: EPI_BIAS_RELU_DROP takes the dropout of
// its elements from the mask drawn ahead (drop_bits: the same RNG states and
// draws as gemm_tile's 32 x 32 tiles, dropDraw). EPI_SGD steps W1 and writes
// its bf16 copy pre-tiled as x W1's B.
template <int EPI, bool TA, int SK16>
__device__ __forceinline__ void wg_tile(int M, int N, int K, const unsigned short* __restrict__ A,
                                        const unsigned short* __restrict__ B, float* __restrict__ C,
                                        const float* __restrict__ bias, const unsigned short* __restrict__ mask,
                                        float p, float scale, const SgdArgs sg) {
  extern __shared__ __align__(128) unsigned char wg_smem[];
  __shared__ __align__(8) unsigned long long wg_bar[WG_MAX_STAGES];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN;
  const int nst = K / (16 * SK16);  // whole stages
  const unsigned sa = smem_addr(wg_smem), sb = sa + WG_BM * K * 2, bar0 = smem_addr(wg_bar);
  static_assert(!TA || SK16 * 16 == WG_BM, "TA: a stage is one tile of A's rows");
  const unsigned char* ta = reinterpret_cast<const unsigned char*>(
      TA ? A + blockIdx.y * WG_BM * 64 : A + (unsigned long long)blockIdx.y * WG_BM * K);  // TA: 64 cores in
  const unsigned char* tb = reinterpret_cast<const unsigned char*>(B + (unsigned long long)blockIdx.x * WG_BN * K);
  if (tid == 0) {
    for (int s = 0; s < nst; ++s) mbar_init(bar0 + 8 * s);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int s = 0; s < nst; ++s) {
      const unsigned k16 = SK16, off = s * SK16 * 32;
      // TA: the 8-column groups of this block's columns that A has.
      const unsigned abytes = TA ? min(8, (M - m0 + 7) / 8) * 1024 : k16 * 32 * WG_BM;
      const unsigned char* src = TA ? ta + (unsigned long long)s * WG_BM * M * 2 : ta + off * WG_BM;
      mbar_expect_tx(bar0 + 8 * s, abytes + k16 * 32 * WG_BN);
      bulk_g2s(sa + off * WG_BM, src, abytes, bar0 + 8 * s);
    }
  }
  // The element of d[j] (see wgmma_n32), in the tile and in C.
#define WG_ROW(j) (m0 + warp * 16 + g + 8 * (((j) >> 1) & 1))
#define WG_COL(j) (n0 + ((j) >> 2) * 8 + 2 * t + ((j) & 1))
  // Before pdl_enter (the kernel ahead writes neither): the dropout's mask,
  // drawn ahead (drop_bits: bit j of this thread's 16, set where d[j] drops),
  // and EPI_SGD's parameters and velocities, as pairs of columns.
  float mk[16];
  float2 pp[8], pv[8];
  if constexpr (EPI == EPI_BIAS_RELU_DROP) {
    const unsigned bits = p > 0.0f ? mask[(blockIdx.y * gridDim.x + blockIdx.x) * WG_THREADS + tid] : 0u;
#pragma unroll
    for (int j = 0; j < 16; ++j) mk[j] = (bits >> j) & 1u ? 0.0f : scale;
  }
  if constexpr (EPI == EPI_SGD) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int r = WG_ROW(2 * q), c = WG_COL(2 * q);
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
      bulk_g2s(sb + off * WG_BN, tb + off * WG_BN, k16 * 32 * WG_BN, bar0 + 8 * s);
    }
  }
  __syncthreads();  // the mbarriers are initialised
  float d[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) d[j] = 0.0f;
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
      wgmma_n32<TA>(d, da, wg_desc(sb + kc * WG_BN * 16, WG_BN * 16, 128));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int r = WG_ROW(2 * q), c = WG_COL(2 * q);
    if (r >= M) continue;
    const unsigned long long idx = (unsigned long long)r * N + c;
    if constexpr (EPI == EPI_SGD) {
      float2 p2 = pp[q], v2 = pv[q];
      sgd1(p2.x, v2.x, d[2 * q], sg.lr, sg.mu, sg.wd);
      sgd1(p2.y, v2.y, d[2 * q + 1], sg.lr, sg.mu, sg.wd);
      *reinterpret_cast<float2*>(C + idx) = p2;
      *reinterpret_cast<float2*>(sg.v + idx) = v2;
      if (sg.ph != 0)
        *reinterpret_cast<unsigned*>(sg.ph + tiled_index(WG_BN, true, c, r, M)) =
            (unsigned)f2bf(p2.x) | ((unsigned)f2bf(p2.y) << 16);
    } else {
      float2 o;
      if constexpr (EPI == EPI_BIAS_RELU_DROP) {
        o.x = epilogue<EPI>(d[2 * q], bias, c, mk[2 * q]);
        o.y = epilogue<EPI>(d[2 * q + 1], bias, c + 1, mk[2 * q + 1]);
      } else {
        o.x = d[2 * q];
        o.y = d[2 * q + 1];
      }
      *reinterpret_cast<float2*>(C + idx) = o;
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
__global__ void __launch_bounds__(WG_THREADS) gemm_tn_sgd_wg(GEMM_ARGS, float* v, unsigned short* ph, float lr,
                                                             float mu, float wd, float* ws, unsigned* counters,
                                                             const float* a1, const float* dz2, float* p1,
                                                             float* v1, float scale, const float* rowloss,
                                                             float* losses, unsigned* counter) {
  const unsigned tiles_y = (M + WG_BM - 1) / WG_BM;  // layer2_block's blocks: the rows past them
  if (blockIdx.y >= tiles_y) {
    layer2_block((blockIdx.y - tiles_y) * gridDim.x + blockIdx.x, a1, dz2, p1, v1, K, N, scale, lr, mu, wd,
                 rowloss, losses, counter);
    return;
  }
  wg_tile<EPI_SGD, true, WG_SK_TN>(M, N, K, static_cast<const unsigned short*>(A),
                                   static_cast<const unsigned short*>(B), C, 0, 0, 0.0f, 1.0f,
                                   SgdArgs{v, ph, lr, mu, wd});
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
