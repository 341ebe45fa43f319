// A first warpgroup-MMA (wgmma) form of the Go trainer's two products, checked
// against the host and timed per graph node as benches/gemm/torch_probe.py times
// cuBLAS's (issue 14; docs/decisions.md, "How short the products can be"):
//   x W1:  256x784 · 784x512, x row-major (K-major), W1 as the trainer stores it
//          (784 x 512 row-major: MN-major), or transposed (K-major);
//   xᵀ da1: 784x256 · 256x512, both operands as stored (MN-major), or both
//          transposed (K-major).
// bf16 operands, f32 accumulators, no epilogue. One warpgroup per 64 x BN tile;
// the whole K range loaded at once with cp.async, one group per stage, each
// stage's MMAs issued as soon as it lands, every sum in one fixed order.
//
// Shared memory holds each operand as 8 x 8 "core matrices" of 128 bytes without
// swizzle: core (r / 8, k / 8) at ((k / 8) * (rows / 8) + r / 8) * 128, a 16-byte
// row per k (K-major) or per r (MN-major). The PTX ISA's matrix descriptor and
// CUTLASS's canonical no-swizzle ("INTERLEAVE") layouts put the stride between
// core matrices along K in LBO and along M/N in SBO, for both majors (run 234:
// it holds for x W1; the swapped fields read past the tile and fault).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o wgmma_probe benches/gemm/wgmma_probe.cu
//   ./wgmma_probe
#include <cstddef>
#include <cstdint>

constexpr int BM = 64, KSTEP = 16;

// Byte offset of element (r, k) of an R x K tile in the core-matrix layout.
template <bool MN>
__device__ __forceinline__ uint32_t core_offset(int rows, int r, int k) {
    const uint32_t core = ((k >> 3) * (rows >> 3) + (r >> 3)) * 128;
    return MN ? core + (k & 7) * 16 + (r & 7) * 2 : core + (r & 7) * 16 + (k & 7) * 2;
}

__device__ __forceinline__ uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
           (static_cast<uint64_t>(sbo >> 4) << 32);  // base offset 0, no swizzle
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma32(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

__device__ __forceinline__ void cp_async16(unsigned char *dst, const uint16_t *src, bool in_range) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                 "l"(src), "r"(in_range ? 16 : 0));
}

// Loads the 16-byte pieces of stage s of one operand tile: R rows from r0 (of
// `extent` in all), K-major (src[r][k]) or MN-major (src[k][r]). The 8 threads
// of each shared-memory phase write 8 rows of one core matrix (a piece's low
// three index bits pick its row: r & 7 when K-major, k & 7 when MN-major), so
// they hit distinct banks; each warp reads 64 contiguous bytes of 8 rows.
template <int R, bool MN, int KK, int SK>
__device__ __forceinline__ void load_stage(unsigned char *tile, const uint16_t *src, int r0, int extent,
                                           int s, int tid) {
    constexpr int PIECES = R * SK / 8;
    static_assert(PIECES % 8 == 0, "whole core matrices");
    for (int j = tid; j < PIECES; j += 128) {
        const int lo = j & 7, rest = j >> 3;
        int r, k;
        if (MN) {
            k = s * SK + (rest / (R / 8)) * 8 + lo;
            r = (rest % (R / 8)) * 8;
        } else {
            r = (rest / (SK / 8)) * 8 + lo;
            k = s * SK + (rest % (SK / 8)) * 8;
        }
        const bool in = r0 + r < extent;
        const int rr = in ? r0 + r : 0;
        const uint16_t *g = MN ? src + (size_t)k * extent + rr : src + (size_t)rr * KK + k;
        cp_async16(tile + core_offset<MN>(R, r, k), g, in);
    }
}

template <int PENDING>
__device__ __forceinline__ void wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// The MMAs of stage s (K [s SK, (s + 1) SK)) of a tile whose operands lie in
// shared memory at sa and sb in the core-matrix layout over the whole K range:
// core matrices 128 bytes apart along M/N, rows / 8 * 128 apart along K (LBO).
template <int BN, bool A_MN, bool B_MN, int SK>
__device__ __forceinline__ void mma_stage(float (&d)[BN / 2], const unsigned char *sa,
                                          const unsigned char *sb, int s) {
    constexpr uint32_t a_k = BM * 16, b_k = BN * 16;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < SK / KSTEP; kk++) {
        const int k = s * SK + kk * KSTEP;
        const uint64_t da = smem_desc(sa + (k >> 3) * a_k, a_k, 128);
        const uint64_t db = smem_desc(sb + (k >> 3) * b_k, b_k, 128);
        if constexpr (BN == 32) wgmma32<A_MN, B_MN>(d, da, db, s | kk);
        else wgmma64<A_MN, B_MN>(d, da, db, s | kk);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Stores the accumulators (mma.sync's m16n8 fragments, one 16-row band per warp).
template <int BN, int MM, int NN>
__device__ __forceinline__ void store_tile(const float (&d)[BN / 2], float *__restrict__ c, int m0, int n0) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < BN / 2; j++) {
        const int row = m0 + warp * 16 + lane / 4 + 8 * ((j / 2) % 2);
        const int col = n0 + (j / 4) * 8 + (lane % 4) * 2 + (j % 2);
        if (row < MM) c[(size_t)row * NN + col] = d[j];
    }
}

// C (MM x NN, f32, row-major) = A · B, A MM x KK (A_MN: stored KK x MM), B KK x NN
// (B_MN: stored KK x NN; else NN x KK). Grid (NN / BN, ceil(MM / 64)), 128 threads.
template <int BN, bool A_MN, bool B_MN, int MM, int NN, int KK, int STAGES>
__global__ void __launch_bounds__(128) gemm_wgmma(const uint16_t *__restrict__ a,
                                                  const uint16_t *__restrict__ b,
                                                  float *__restrict__ c) {
    constexpr int SK = KK / STAGES;
    static_assert(KK % STAGES == 0 && SK % KSTEP == 0 && NN % BN == 0, "whole stages and tiles");
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *sa = smem, *sb = smem + BM * KK * 2;
    const int tid = threadIdx.x, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
        load_stage<BM, A_MN, KK, SK>(sa, a, m0, MM, s, tid);
        load_stage<BN, B_MN, KK, SK>(sb, b, n0, NN, s, tid);
        asm volatile("cp.async.commit_group;\n");
    }
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
        // Stage s has landed when at most STAGES - 1 - s groups are pending.
        if (STAGES - 1 - s >= 7) wait_group<7>();
        else if (STAGES - 1 - s == 6) wait_group<6>();
        else if (STAGES - 1 - s == 5) wait_group<5>();
        else if (STAGES - 1 - s == 4) wait_group<4>();
        else if (STAGES - 1 - s == 3) wait_group<3>();
        else if (STAGES - 1 - s == 2) wait_group<2>();
        else if (STAGES - 1 - s == 1) wait_group<1>();
        else wait_group<0>();
        __syncthreads();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mma_stage<BN, A_MN, B_MN, SK>(d, sa, sb, s);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    store_tile<BN, MM, NN>(d, c, m0, n0);
}

__device__ __forceinline__ void bulk_load(unsigned char *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
        "l"(src), "r"(bytes), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
        : "memory");
}

// The same product with operands stored pre-tiled in global memory: tile t of
// an operand (R rows from t R, the whole K) is R KK contiguous values in the
// shared-memory layout above, so stage s of it is one contiguous run of
// R SK values, loaded by one bulk copy (the copy engine, no per-thread
// addresses) that completes on stage s's mbarrier.
template <int BN, bool A_MN, bool B_MN, int MM, int NN, int KK, int STAGES>
__global__ void __launch_bounds__(128) gemm_bulk(const uint16_t *__restrict__ a,
                                                 const uint16_t *__restrict__ b,
                                                 float *__restrict__ c) {
    constexpr int SK = KK / STAGES;
    constexpr uint32_t A_BYTES = BM * SK * 2, B_BYTES = BN * SK * 2;
    static_assert(KK % STAGES == 0 && SK % KSTEP == 0 && NN % BN == 0, "whole stages and tiles");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bar[STAGES];
    unsigned char *sa = smem, *sb = smem + BM * KK * 2;
    const int tid = threadIdx.x, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(
                static_cast<uint32_t>(__cvta_generic_to_shared(&bar[s]))));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        const uint16_t *ta = a + (size_t)blockIdx.y * BM * KK, *tb = b + (size_t)blockIdx.x * BN * KK;
        for (int s = 0; s < STAGES; s++) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                             static_cast<uint32_t>(__cvta_generic_to_shared(&bar[s]))),
                         "r"(A_BYTES + B_BYTES)
                         : "memory");
            bulk_load(sa + s * A_BYTES, ta + (size_t)s * BM * SK, A_BYTES, &bar[s]);
            bulk_load(sb + s * B_BYTES, tb + (size_t)s * BN * SK, B_BYTES, &bar[s]);
        }
    }
    __syncthreads();
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
        const uint32_t bs = static_cast<uint32_t>(__cvta_generic_to_shared(&bar[s]));
        asm volatile(
            "{\n.reg .pred done;\nWAIT_%=:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
            "@!done bra WAIT_%=;\n}\n" ::"r"(bs)
            : "memory");
        mma_stage<BN, A_MN, B_MN, SK>(d, sa, sb, s);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    store_tile<BN, MM, NN>(d, c, m0, n0);
}

#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            std::printf("FAIL: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

static uint16_t to_bf16(float f) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

static int failures = 0;

// Operand tiles in the kernels' shared-memory layout (core_offset), tile after
// tile, zeros past the extent: src is K-major (src[r][k]) or MN-major (src[k][r]).
template <bool MN>
static std::vector<uint16_t> pretile(const std::vector<uint16_t> &src, int extent, int kk, int rows) {
    const int tiles = (extent + rows - 1) / rows;
    std::vector<uint16_t> out((size_t)tiles * rows * kk, 0);
    for (int t = 0; t < tiles; t++)
        for (int r = 0; r < rows && t * rows + r < extent; r++)
            for (int k = 0; k < kk; k++) {
                const int gr = t * rows + r;
                const uint32_t off = MN ? ((k >> 3) * (rows >> 3) + (r >> 3)) * 128 + (k & 7) * 16 + (r & 7) * 2
                                        : ((k >> 3) * (rows >> 3) + (r >> 3)) * 128 + (r & 7) * 16 + (k & 7) * 2;
                out[(size_t)t * rows * kk + off / 2] = MN ? src[(size_t)k * extent + gr] : src[(size_t)gr * kk + k];
            }
    return out;
}

static uint16_t *upload(const std::vector<uint16_t> &v) {
    uint16_t *d;
    CK(cudaMalloc(&d, v.size() * 2));
    CK(cudaMemcpy(d, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
    return d;
}

using Kernel = void (*)(const uint16_t *, const uint16_t *, float *);

// One kernel: checked against ref, then timed per graph node, 200 back to
// back, median of 7 replays (torch_probe.py's way).
static void run(const char *what, const char *load, int bn, Kernel kernel, dim3 grid, size_t smem,
                const uint16_t *da, const uint16_t *db, float *dc, const std::vector<double> &ref) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    std::vector<float> c(ref.size());
    CK(cudaMemset(dc, 0, c.size() * 4));
    kernel<<<grid, 128, smem>>>(da, db, dc);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < c.size(); i++) {
        worst = std::max(worst, std::fabs(c[i] - ref[i]));
        scale = std::max(scale, std::fabs(ref[i]));
    }
    const bool ok = worst <= 1e-3 * scale;
    failures += !ok;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 200; i++) kernel<<<grid, 128, smem, st>>>(da, db, dc);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<float> us;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        us.push_back(ms * 1000 / 200);
    }
    std::sort(us.begin(), us.end());
    std::printf("| %s | 64x%d | %s | %d | %.3g of %.3g | %s | %.2f |\n", what, bn, load,
                (int)(grid.x * grid.y), worst, scale, ok ? "PASS" : "FAIL", us[3]);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
}

// Both loads of one product and tile: a and b as stored, ta and tb pre-tiled.
template <int BN, bool A_MN, bool B_MN, int MM, int NN, int KK, int STAGES>
static void both(const char *what, const uint16_t *a, const uint16_t *b, const uint16_t *ta,
                 const uint16_t *tb, float *dc, const std::vector<double> &ref) {
    const dim3 grid(NN / BN, (MM + BM - 1) / BM);
    const size_t smem = (size_t)(BM + BN) * KK * 2;
    run(what, "cp.async", BN, gemm_wgmma<BN, A_MN, B_MN, MM, NN, KK, STAGES>, grid, smem, a, b, dc, ref);
    run(what, "bulk, pre-tiled", BN, gemm_bulk<BN, A_MN, B_MN, MM, NN, KK, STAGES>, grid, smem, ta, tb, dc, ref);
}

int main() {
    constexpr int B = 256, IN = 784, H = 512;
    uint32_t seed = 12345;
    auto rnd = [&] {
        seed = seed * 1664525u + 1013904223u;
        return (seed >> 8) / 16777216.0f - 0.5f;
    };
    std::vector<uint16_t> x((size_t)B * IN), w1((size_t)IN * H), w1t((size_t)H * IN), da1((size_t)B * H);
    for (auto &v : x) v = to_bf16(rnd());
    for (auto &v : w1) v = to_bf16(rnd() * 0.1f);
    for (auto &v : da1) v = to_bf16(rnd() * 0.01f);
    for (int k = 0; k < IN; k++)
        for (int n = 0; n < H; n++) w1t[(size_t)n * IN + k] = w1[(size_t)k * H + n];
    // xᵀ and da1ᵀ, for the K-major form of xᵀ da1 (producers could write them so).
    std::vector<uint16_t> xt((size_t)IN * B), da1t((size_t)H * B);
    for (int k = 0; k < B; k++) {
        for (int m = 0; m < IN; m++) xt[(size_t)m * B + k] = x[(size_t)k * IN + m];
        for (int n = 0; n < H; n++) da1t[(size_t)n * B + k] = da1[(size_t)k * H + n];
    }
    std::vector<double> fwd((size_t)B * H), tn((size_t)IN * H);
    for (int m = 0; m < B; m++)
        for (int k = 0; k < IN; k++) {
            const double xv = from_bf16(x[(size_t)m * IN + k]);
            for (int n = 0; n < H; n++) fwd[(size_t)m * H + n] += xv * from_bf16(w1[(size_t)k * H + n]);
        }
    for (int k = 0; k < B; k++)
        for (int m = 0; m < IN; m++) {
            const double xv = from_bf16(x[(size_t)k * IN + m]);
            for (int n = 0; n < H; n++) tn[(size_t)m * H + n] += xv * from_bf16(da1[(size_t)k * H + n]);
        }
    uint16_t *dx = upload(x), *dw1 = upload(w1), *dw1t = upload(w1t), *dda1 = upload(da1);
    uint16_t *dxt = upload(xt), *dda1t = upload(da1t);
    // Pre-tiled: x as x W1's A (64-row tiles, K-major) and as xᵀ da1's (MN-major);
    // W1 and da1 in 32- and 64-column tiles.
    uint16_t *px = upload(pretile<false>(x, B, IN, 64)), *pxt = upload(pretile<true>(x, IN, B, 64));
    uint16_t *pw1_32 = upload(pretile<true>(w1, H, IN, 32)), *pw1_64 = upload(pretile<true>(w1, H, IN, 64));
    uint16_t *pw1t_32 = upload(pretile<false>(w1t, H, IN, 32)), *pw1t_64 = upload(pretile<false>(w1t, H, IN, 64));
    uint16_t *pda1_32 = upload(pretile<true>(da1, H, B, 32)), *pda1_64 = upload(pretile<true>(da1, H, B, 64));
    float *dc;
    CK(cudaMalloc(&dc, tn.size() * 4));
    std::printf("# wgmma products of the Go trainer (bf16, f32 accumulators, no epilogue): "
                "µs per graph node, 200 back to back, median of 7\n\n");
    std::printf("| product | tile | load | CTAs | max error of largest | check | µs per node |\n");
    std::printf("|---|---|---|---:|---|---|---:|\n");
    both<32, false, true, B, H, IN, 7>("x W1, W1 as stored (MN-major)", dx, dw1, px, pw1_32, dc, fwd);
    both<64, false, true, B, H, IN, 7>("x W1, W1 as stored (MN-major)", dx, dw1, px, pw1_64, dc, fwd);
    both<32, false, false, B, H, IN, 7>("x W1, W1 transposed (K-major)", dx, dw1t, px, pw1t_32, dc, fwd);
    both<64, false, false, B, H, IN, 7>("x W1, W1 transposed (K-major)", dx, dw1t, px, pw1t_64, dc, fwd);
    both<32, true, true, IN, H, B, 4>("xᵀ da1, both as stored (MN-major)", dx, dda1, pxt, pda1_32, dc, tn);
    both<64, true, true, IN, H, B, 4>("xᵀ da1, both as stored (MN-major)", dx, dda1, pxt, pda1_64, dc, tn);
    run("xᵀ da1, both transposed (K-major)", "cp.async", 32, gemm_wgmma<32, false, false, IN, H, B, 4>,
        dim3(H / 32, (IN + 63) / 64), (size_t)(64 + 32) * B * 2, dxt, dda1t, dc, tn);
    run("xᵀ da1, both transposed (K-major)", "cp.async", 64, gemm_wgmma<64, false, false, IN, H, B, 4>,
        dim3(H / 64, (IN + 63) / 64), (size_t)(64 + 64) * B * 2, dxt, dda1t, dc, tn);
    std::printf("\n%s\n", failures ? "FAIL: a product disagreed with the host" : "PASS");
    return failures ? 1 : 0;
}
#endif
