// A first warpgroup-MMA (wgmma) product of the Go trainer's shape, x W1
// (256x784 · 784x512, bf16 operands, f32 accumulators), checked against the
// host and timed per graph node as benches/gemm/torch_probe.py times cuBLAS's.
// A probe for issue 14 (docs/decisions.md, "How short the products can be"),
// not the trainer's kernel: no epilogue, one CTA (one warpgroup) per 64 x BN
// tile, the whole K range loaded at once with cp.async in 7 groups, each group's
// 7 MMAs issued as soon as it lands, every sum in one fixed order.
//
// Both operands are K-major in shared memory, without swizzle: 8 x 8 "core
// matrices" of 128 bytes. Which descriptor field (LBO or SBO) strides K and
// which strides M/N is tried both ways; the check says which one holds.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o wgmma_probe benches/gemm/wgmma_probe.cu
//   ./wgmma_probe
#include <cstdint>

constexpr int M = 256, N = 512, K = 784;
constexpr int BM = 64, KSTEP = 16, STAGES = 7, STAGE_K = K / STAGES;  // 112 = 7 x 16
static_assert(K % STAGES == 0 && STAGE_K % KSTEP == 0, "K splits into whole stages");

// Byte offset of element (row, k) of a rows x K tile in the core-matrix layout:
// core (row / 8, k / 8) at ((k / 8) * (rows / 8) + row / 8) * 128, 16 bytes a row.
__device__ __forceinline__ uint32_t core_offset(int rows, int row, int k) {
    return ((k >> 3) * (rows >> 3) + (row >> 3)) * 128 + (row & 7) * 16 + (k & 7) * 2;
}

__device__ __forceinline__ uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
           (static_cast<uint64_t>(sbo >> 4) << 32);  // base offset 0, no swizzle
}

template <int BN>
__device__ __forceinline__ void wgmma(float (&d)[BN / 2], uint64_t da, uint64_t db, int scale_d);

template <>
__device__ __forceinline__ void wgmma<32>(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma<64>(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}

// C (M x N, f32, row-major) = A (M x K, bf16 bits, row-major) · Bt (N x K, bf16
// bits, row-major)ᵀ. Grid (N / BN, M / BM), 128 threads. k_major_lbo: the
// descriptor's LBO strides K (else its SBO does).
template <int BN>
__global__ void __launch_bounds__(128) gemm_wgmma(const uint16_t *__restrict__ a,
                                                  const uint16_t *__restrict__ bt,
                                                  float *__restrict__ c, int k_major_lbo) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *sa = smem, *sb = smem + BM * K * 2;
    const int tid = threadIdx.x, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    // Every stage's loads first, one cp.async group per stage, in 16-byte pieces.
    constexpr int PIECES_A = BM * STAGE_K / 8, PIECES_B = BN * STAGE_K / 8;
    for (int s = 0; s < STAGES; s++) {
        for (int i = tid; i < PIECES_A + PIECES_B; i += 128) {
            const bool is_a = i < PIECES_A;
            const int j = is_a ? i : i - PIECES_A;
            const int row = j / (STAGE_K / 8), k = s * STAGE_K + (j % (STAGE_K / 8)) * 8;
            const uint16_t *src = is_a ? a + (size_t)(m0 + row) * K + k : bt + (size_t)(n0 + row) * K + k;
            unsigned char *dst = is_a ? sa + core_offset(BM, row, k) : sb + core_offset(BN, row, k);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                             static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                         "l"(src));
        }
        asm volatile("cp.async.commit_group;\n");
    }
    // Core matrices: 128 bytes apart along M/N, rows / 8 * 128 apart along K.
    const uint32_t a_k = BM * 16, b_k = BN * 16;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
        // Stage s has landed when at most STAGES - 1 - s groups are pending.
        switch (STAGES - 1 - s) {
            case 6: asm volatile("cp.async.wait_group 6;\n"); break;
            case 5: asm volatile("cp.async.wait_group 5;\n"); break;
            case 4: asm volatile("cp.async.wait_group 4;\n"); break;
            case 3: asm volatile("cp.async.wait_group 3;\n"); break;
            case 2: asm volatile("cp.async.wait_group 2;\n"); break;
            case 1: asm volatile("cp.async.wait_group 1;\n"); break;
            default: asm volatile("cp.async.wait_group 0;\n"); break;
        }
        __syncthreads();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < STAGE_K / KSTEP; kk++) {
            const int k = s * STAGE_K + kk * KSTEP;
            const uint64_t da = k_major_lbo ? smem_desc(sa + (k >> 3) * a_k, a_k, 128)
                                            : smem_desc(sa + (k >> 3) * a_k, 128, a_k);
            const uint64_t db = k_major_lbo ? smem_desc(sb + (k >> 3) * b_k, b_k, 128)
                                            : smem_desc(sb + (k >> 3) * b_k, 128, b_k);
            wgmma<BN>(d, da, db, s | kk);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // The accumulators as mma.sync's m16n8 fragments, one 16-row band per warp.
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int j = 0; j < BN / 2; j++) {
        const int row = m0 + warp * 16 + lane / 4 + 8 * ((j / 2) % 2);
        const int col = n0 + (j / 4) * 8 + (lane % 4) * 2 + (j % 2);
        c[(size_t)row * N + col] = d[j];
    }
}

#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            std::printf("FAIL: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(1);                                                              \
        }                                                                              \
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

template <int BN>
static void run(const uint16_t *da, const uint16_t *dbt, float *dc, const std::vector<double> &ref) {
    const size_t smem = (size_t)(BM + BN) * K * 2;
    CK(cudaFuncSetAttribute(gemm_wgmma<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(N / BN, M / BM);
    std::vector<float> c((size_t)M * N);
    for (int lbo = 0; lbo < 2; lbo++) {
        CK(cudaMemset(dc, 0, c.size() * 4));
        gemm_wgmma<BN><<<grid, 128, smem>>>(da, dbt, dc, lbo);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
        double worst = 0, scale = 0;
        for (size_t i = 0; i < c.size(); i++) {
            worst = std::max(worst, std::fabs(c[i] - ref[i]));
            scale = std::max(scale, std::fabs(ref[i]));
        }
        const bool ok = worst <= 1e-3 * scale;
        // Per graph node, 200 back to back, median of 7 replays (torch_probe.py's way).
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < 200; i++) gemm_wgmma<BN><<<grid, 128, smem, st>>>(da, dbt, dc, lbo);
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
        std::printf("| 64x%d | %s | %d | %.3g of %.3g | %s | %.2f |\n", BN, lbo ? "LBO" : "SBO",
                    (int)(grid.x * grid.y), worst, scale, ok ? "PASS" : "FAIL", us[3]);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        CK(cudaStreamDestroy(st));
    }
}

int main() {
    std::vector<uint16_t> a((size_t)M * K), bt((size_t)N * K);
    uint32_t x = 12345;
    auto rnd = [&] { x = x * 1664525u + 1013904223u; return (x >> 8) / 16777216.0f - 0.5f; };
    for (auto &v : a) v = to_bf16(rnd());
    for (auto &v : bt) v = to_bf16(rnd() * 0.1f);
    std::vector<double> ref((size_t)M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)from_bf16(a[(size_t)i * K + k]) * from_bf16(bt[(size_t)j * K + k]);
            ref[(size_t)i * N + j] = s;
        }
    uint16_t *da, *dbt;
    float *dc;
    CK(cudaMalloc(&da, a.size() * 2));
    CK(cudaMalloc(&dbt, bt.size() * 2));
    CK(cudaMalloc(&dc, ref.size() * 4));
    CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, bt.data(), bt.size() * 2, cudaMemcpyHostToDevice));
    std::printf("# wgmma x W1 (256x784 · 784x512, bf16, f32 accumulators): µs per graph node, 200 back to back\n\n");
    std::printf("| tile | K stride in | CTAs | max error of largest | check | µs per node |\n|---|---|---:|---|---|---:|\n");
    run<32>(da, dbt, dc, ref);
    run<64>(da, dbt, dc, ref);
    return 0;
}
#endif
