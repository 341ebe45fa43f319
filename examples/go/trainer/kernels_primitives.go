package main

// kernelPrimitives is the part of kernelSource that every kernel builds on:
// the tensor-core instructions (mma in TF32 and BF16, ldmatrix), cp.async
// and its ring of shared-memory stages, fences, thread block clusters,
// programmatic dependent launch, the bf16 rounding and the SGD step of one
// parameter.
const kernelPrimitives = `
#include <sluice/rng.cuh>

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

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned long long s;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(s) : "l"(p));
  return (unsigned)s;
}
// 16 bytes from global to shared memory without passing through registers,
// to a shared-memory address (sm_80+), or to a pointer (a plain copy before).
__device__ __forceinline__ void cp_async16_s(unsigned smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
#endif
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
  cp_async16_s(smem_addr(smem), gmem);
#else
  *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
#endif
}
// v, which the compiler then keeps in a register rather than recompute.
__device__ __forceinline__ int kept(int v) {
  asm("" : "+r"(v));
  return v;
}
template <class T>
__device__ __forceinline__ const T* kept(const T* p) {
  asm("" : "+l"(p));
  return p;
}
// 16 bytes of zeros to a shared-memory address.
__device__ __forceinline__ void st_shared_zero16(unsigned smem) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem), "r"(0u) : "memory");
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
// kernel touches data that kernel writes; a no-op without PDL. With
// PDL_TRIGGER 1 (the default) each kernel then lets the next one launch at
// once (griddepcontrol.launch_dependents), so that the next one's launch and
// early loads overlap this one's work: the step alone ran 1.065x faster on an
// H200 (docs/gpu-runs.md, run 149). Never before the wait: so when a kernel
// starts, every kernel but the one ahead has completed, and data they wrote
// may be read before pdl_enter (fwd2_ce's W2, layer2_block's a1 and W2, the products'
// RNG states and SGD parameters, x^T da1's x; the wgmma x W1's x, so that one is
// never launched early right after the input stage). With 0 the
// next kernel launches as this one's blocks exit.
#ifndef PDL_TRIGGER
#define PDL_TRIGGER 1
#endif
__device__ __forceinline__ void pdl_enter() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#if PDL_TRIGGER
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
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

// Four 8x8 matrices of 16-bit elements from shared memory; lanes 8i..8i+7
// give the row addresses of matrix i. r[i]: of matrix i, row lane/4, columns
// 2(lane%4) and +1 (TRANS: rows 2(lane%4) and +1, column lane/4), the lower
// index in the low half.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4_s(unsigned r[4], unsigned row) {
#if __CUDA_ARCH__ >= 800
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
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
// The cluster's barrier with a relaxed arrive: no memory ordering, so no
// GPU-wide fence before it (a release arrive waits for the thread's global
// stores to complete: 0.47 µs in run 185). For a barrier that only keeps the
// cluster's blocks alive while others read their shared memory: those reads
// returned before the values they loaded were used. CUTLASS ends its cluster
// kernels so.
__device__ __forceinline__ void cluster_sync_relaxed() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;\n" ::: "memory");
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

// SGD with momentum and weight decay of one parameter p (velocity v) by its gradient g.
__device__ __forceinline__ void sgd1(float& p, float& v, float g, float lr, float mu, float wd) {
  const float gi = g + wd * p;
  const float vi = mu * v + gi;
  v = vi;
  p = p - lr * vi;
}
`
