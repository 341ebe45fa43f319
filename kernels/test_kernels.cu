// sluice test kernels: the source of truth for kernels/test_kernels.ptx.
//
// Shared by the benchmarks (benches/overhead/) and the GPU tests. Every kernel is
// `extern "C"` (unmangled names), works on 32-bit unsigned words, and walks its data
// with a grid-stride loop, so any 1-D grid covers any `n`.
//
// Launch rules
// - 1-D grids and 1-D blocks only (grid.y = grid.z = block.y = block.z = 1): the
//   loops use the x dimension, so extra y/z threads would repeat the work (and
//   `sluice_add` would add twice).
// - No shared memory, no dynamic shared memory.
// - `n` counts 32-bit elements, not bytes.
// - Unsigned arithmetic wraps modulo 2^32, like Rust's `wrapping_add`.
//
// The `spin_*` kernels make a kernel last a chosen time, to widen race windows in
// tests: in every block, thread 0 busy-waits on the `%globaltimer` nanosecond clock
// until `spin_ns` have passed, then the block meets at `__syncthreads()` and only
// then touches memory. Every block spins, at the same time when they are resident
// together, so a kernel lasts about `spin_ns` (plus one wave per extra wave of
// blocks). `spin_ns == 0` skips the spin.
//
// Regenerate the PTX (see kernels/README.md):
//   nvcc -ptx -arch=compute_80 -o kernels/test_kernels.ptx kernels/test_kernels.cu

typedef unsigned int u32;
typedef unsigned long long u64;

// The GPU's global nanosecond clock (the same on every SM).
__device__ __forceinline__ u64 sluice_globaltimer()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Thread 0 of the block spins for `spin_ns`, then the whole block synchronises.
// Every thread of the block must call it (it contains __syncthreads()).
__device__ __forceinline__ void sluice_block_spin(u64 spin_ns)
{
    if (spin_ns != 0 && threadIdx.x == 0) {
        const u64 start = sluice_globaltimer();
        while (sluice_globaltimer() - start < spin_ns) {
        }
    }
    __syncthreads();
}

// First element and stride of this thread's grid-stride loop, in 64 bits.
__device__ __forceinline__ u64 sluice_first()
{
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ u64 sluice_stride()
{
    return (u64)gridDim.x * (u64)blockDim.x;
}

// Does nothing: measures launch overhead.
extern "C" __global__ void sluice_empty()
{
}

// buf[i] = value for i < n.
extern "C" __global__ void sluice_fill(u32* buf, u64 n, u32 value)
{
    for (u64 i = sluice_first(); i < n; i += sluice_stride()) {
        buf[i] = value;
    }
}

// Every block spins for spin_ns, then buf[i] = value for i < n.
extern "C" __global__ void sluice_spin_fill(u32* buf, u64 n, u32 value, u64 spin_ns)
{
    sluice_block_spin(spin_ns);
    for (u64 i = sluice_first(); i < n; i += sluice_stride()) {
        buf[i] = value;
    }
}

// dst[i] += src[i] (wrapping) for i < n. dst and src must not overlap partially;
// dst == src doubles every element.
extern "C" __global__ void sluice_add(u32* dst, const u32* src, u64 n)
{
    for (u64 i = sluice_first(); i < n; i += sluice_stride()) {
        dst[i] += src[i];
    }
}

// Every block spins for spin_ns, then dst[i] += src[i] (wrapping) for i < n.
extern "C" __global__ void sluice_spin_add(u32* dst, const u32* src, u64 n, u64 spin_ns)
{
    sluice_block_spin(spin_ns);
    for (u64 i = sluice_first(); i < n; i += sluice_stride()) {
        dst[i] += src[i];
    }
}

// Every block spins for spin_ns, then dst[i] = src[i] for i < n.
extern "C" __global__ void sluice_spin_copy(u32* dst, const u32* src, u64 n, u64 spin_ns)
{
    sluice_block_spin(spin_ns);
    for (u64 i = sluice_first(); i < n; i += sluice_stride()) {
        dst[i] = src[i];
    }
}
