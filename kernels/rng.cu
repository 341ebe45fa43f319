// sluice's RNG kernels: the source of truth for kernels/rng.ptx, which the library
// embeds (src/rng/device.rs) and loads once per device, on the first RNG made there.
// Regenerate on a machine with nvcc (the GPU suite's `rng` part checks it is current):
//   nvcc -ptx -arch=compute_80 -I include -o kernels/rng.ptx kernels/rng.cu
//
// Output layouts (`layout`): 0 = sample-major, out[j * n + i] (draw j of state i;
// coalesced, the default); 1 = state-major, out[i * count + j].
#include <sluice/rng.cuh>

typedef unsigned int u32;
typedef unsigned long long u64;

// states[i] = curand_init(seed, first + i, 0).
extern "C" __global__ void sluice_rng_kernel_init(sluice_rng_state* states, u64 n, u64 seed,
                                                  u64 first) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    sluice_rng_state s;
    sluice_rng_init(seed, first + i, 0, &s);
    states[i] = s;
  }
}

enum { KIND_U32 = 0, KIND_UNIFORM = 1, KIND_NORMAL = 2 };

template <int KIND>
__device__ __forceinline__ u32 draw(sluice_rng_state* s) {
  if (KIND == KIND_U32) return sluice_rng_next(s);
  if (KIND == KIND_UNIFORM) return __float_as_uint(sluice_rng_uniform(s));
  return __float_as_uint(sluice_rng_normal(s));
}

// Draws `count` values from every state. The states advance exactly as `count`
// calls of curand / curand_uniform / curand_normal would advance them.
template <int KIND>
__device__ __forceinline__ void generate(sluice_rng_state* states, u64 n, u32* out, u64 count,
                                         u32 layout) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    sluice_rng_state s = states[i];
    const u64 step = layout == 0 ? n : 1;
    u32* o = out + (layout == 0 ? i : i * count);
    u64 j = 0;
    // Up to the next block boundary (and a pending second normal), one at a time.
    while (j < count && (s.position != 0 || (KIND == KIND_NORMAL && s.boxmuller_flag == 1))) {
      o[j * step] = draw<KIND>(&s);
      ++j;
    }
    // Whole Philox blocks: four outputs (two normal pairs) per block.
    for (; j + 4 <= count; j += 4) {
      u32 v0, v1, v2, v3;
      if (KIND == KIND_NORMAL) {
        float a0, b0, a1, b1;
        sluice_rng_box_muller(s.output[0], s.output[1], &a0, &b0);
        sluice_rng_box_muller(s.output[2], s.output[3], &a1, &b1);
        s.boxmuller_extra = b1;
        v0 = __float_as_uint(a0);
        v1 = __float_as_uint(b0);
        v2 = __float_as_uint(a1);
        v3 = __float_as_uint(b1);
      } else if (KIND == KIND_UNIFORM) {
        v0 = __float_as_uint(sluice_rng_u32_to_uniform(s.output[0]));
        v1 = __float_as_uint(sluice_rng_u32_to_uniform(s.output[1]));
        v2 = __float_as_uint(sluice_rng_u32_to_uniform(s.output[2]));
        v3 = __float_as_uint(sluice_rng_u32_to_uniform(s.output[3]));
      } else {
        v0 = s.output[0];
        v1 = s.output[1];
        v2 = s.output[2];
        v3 = s.output[3];
      }
      o[j * step] = v0;
      o[(j + 1) * step] = v1;
      o[(j + 2) * step] = v2;
      o[(j + 3) * step] = v3;
      sluice_rng_counter_inc(&s);
      sluice_philox4x32_10(s.ctr, s.key, s.output);
    }
    for (; j < count; ++j) o[j * step] = draw<KIND>(&s);
    states[i] = s;
  }
}

extern "C" __global__ void sluice_rng_kernel_u32(sluice_rng_state* states, u64 n, u32* out, u64 count,
                                          u32 layout) {
  generate<KIND_U32>(states, n, out, count, layout);
}

extern "C" __global__ void sluice_rng_kernel_uniform(sluice_rng_state* states, u64 n, float* out,
                                              u64 count, u32 layout) {
  generate<KIND_UNIFORM>(states, n, (u32*)out, count, layout);
}

extern "C" __global__ void sluice_rng_kernel_normal(sluice_rng_state* states, u64 n, float* out,
                                             u64 count, u32 layout) {
  generate<KIND_NORMAL>(states, n, (u32*)out, count, layout);
}
