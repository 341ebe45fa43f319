// Just enough of CUDA's device built-ins for g++ to compile kernels/rng.cu as C++
// and run its kernels one thread at a time (rng_quad.cpp). __sincosf here is libm's,
// not the GPU's: good for comparing two kernels, not for matching cuRAND.
#pragma once
#define __global__
#define __device__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __shared__
struct dim3 { unsigned x, y, z; };
extern dim3 blockIdx, blockDim, threadIdx, gridDim;
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned __float_as_uint(float f) { unsigned u; __builtin_memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
inline void __sincosf(float x, float* s, float* c) { *s = __builtin_sinf(x); *c = __builtin_cosf(x); }
inline float logf(float x) { return __builtin_logf(x); }
inline float sqrtf(float x) { return __builtin_sqrtf(x); }
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
// For the CRC kernel, which compiles here but runs only on the GPU: one thread
// sees no other lane (a shuffle gives 0, so an XOR reduction keeps its value).
#define __launch_bounds__(n)
inline void __syncthreads() {}
template <class T> inline T __ldg(const T* p) { return *p; }
inline unsigned __shfl_xor_sync(unsigned, unsigned, int) { return 0; }
inline unsigned atomicXor(unsigned* p, unsigned v) { unsigned old = *p; *p ^= v; return old; }
