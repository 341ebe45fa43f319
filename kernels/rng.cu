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

// Many threads per state, for few states: `parts` threads share each state, thread
// t drawing draws [j0, j1) of state t % n with j0 = (t / n) * per_part. They only
// read the states; sluice_rng_kernel_advance_* then moves each state past `count`
// draws, exactly where `count` calls of curand / curand_uniform / curand_normal
// leave it. A Philox output depends only on the counter, so any draw is reachable
// with one skipahead.
// Draws [j0, j1) of state s (at any position) to o[j * step], as `count` calls of
// curand / curand_uniform / curand_normal from s would draw them. A Philox output
// depends only on the counter, so any draw is reachable with one skipahead.
// A position past 3 (written by a user; curand never leaves one) draws output.x
// with no refresh until the position wraps to 0: normals are drawn one at a time,
// as curand_normal does; other kinds know the draws left before the wrap.
template <int KIND>
__device__ __forceinline__ void draw_range(sluice_rng_state s, u32* o, u64 step, u64 j0, u64 j1) {
  u64 j = j0;
  if (s.position > 3 && KIND == KIND_NORMAL) {
    for (u64 k = 0; k < j1; ++k) {
      u32 v = draw<KIND>(&s);
      if (k >= j0) o[k * step] = v;
    }
    return;
  }
  if (KIND != KIND_NORMAL) {
    if (s.position > 3) {
      const u64 before_wrap = (1ull << 32) - s.position;
      const u32 x = KIND == KIND_U32 ? s.output[0] : __float_as_uint(sluice_rng_u32_to_uniform(s.output[0]));
      for (; j < j1 && j < before_wrap; ++j) o[j * step] = x;
      if (j >= j1) return;
      s.position = 0;
      if (j > before_wrap) sluice_rng_skipahead(j - before_wrap, &s);
    } else {
      sluice_rng_skipahead(j0, &s);
    }
    for (; j < j1; ++j) {
      unsigned int x = sluice_rng_next(&s);
      o[j * step] = KIND == KIND_U32 ? x : __float_as_uint(sluice_rng_u32_to_uniform(x));
    }
    return;
  }
  // Normals: with a pending second normal, draw 0 is it; then draw j uses pair
  // (j - f) / 2 of the raw outputs, element (j - f) % 2.
  u64 f = s.boxmuller_flag == 1 ? 1 : 0;
  if (j == 0 && f) {
    o[0] = __float_as_uint(s.boxmuller_extra);
    j = 1;
  }
  if (j >= j1) return;
  u64 m = j - f;
  sluice_rng_skipahead(2 * (m / 2), &s);
  float a, b;
  unsigned int x = sluice_rng_next(&s), y = sluice_rng_next(&s);
  sluice_rng_box_muller(x, y, &a, &b);
  bool have = m % 2 == 0;  // (a, b) is the pair of draw j
  if (!have) {
    o[j * step] = __float_as_uint(b);
    ++j;
  }
  while (j < j1) {
    if (!have) {
      x = sluice_rng_next(&s);
      y = sluice_rng_next(&s);
      sluice_rng_box_muller(x, y, &a, &b);
    }
    have = false;
    o[j * step] = __float_as_uint(a);
    if (++j < j1) {
      o[j * step] = __float_as_uint(b);
      ++j;
    }
  }
}

// Many threads per state, for few states: `parts` threads share each state, thread
// t drawing draws [j0, j1) of state t % n with j0 = (t / n) * per_part. They only
// read the states; sluice_rng_kernel_advance_* then moves each state past `count`
// draws, exactly where `count` calls of curand / curand_uniform / curand_normal
// leave it.
template <int KIND>
__device__ __forceinline__ void generate_split(const sluice_rng_state* states, u64 n, u32* out,
                                               u64 count, u32 layout, u64 parts, u64 per_part) {
  u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  if (t >= n * parts) return;
  u64 i = t % n, j0 = (t / n) * per_part;
  u64 j1 = j0 + per_part < count ? j0 + per_part : count;
  if (j0 >= j1) return;
  const u64 step = layout == 0 ? n : 1;
  draw_range<KIND>(states[i], out + (layout == 0 ? i : i * count), step, j0, j1);
}

// Moves s past `count` draws of KIND, exactly where `count` calls of curand /
// curand_uniform / curand_normal leave it.
template <int KIND>
__device__ __forceinline__ void advance_one(sluice_rng_state* s, u64 count) {
  if (count == 0) return;
  if (s->position > 3) {  // see draw_range
    if (KIND == KIND_NORMAL) {
      for (u64 k = 0; k < count; ++k) draw<KIND>(s);
      return;
    }
    const u64 before_wrap = (1ull << 32) - s->position;
    if (count < before_wrap) {
      s->position += (unsigned int)count;
      return;
    }
    count -= before_wrap;
    s->position = 0;
    if (count == 0) return;
  }
  if (KIND != KIND_NORMAL) {
    sluice_rng_skipahead(count, s);
    return;
  }
  u64 m = count;
  if (s->boxmuller_flag == 1) {
    s->boxmuller_flag = 0;
    m -= 1;
  }
  if (m > 0) {
    u64 pairs = (m + 1) / 2;
    sluice_rng_skipahead(2 * (pairs - 1), s);
    unsigned int x = sluice_rng_next(s), y = sluice_rng_next(s);
    float a, b;
    sluice_rng_box_muller(x, y, &a, &b);
    s->boxmuller_extra = b;
    s->boxmuller_flag = m % 2 == 1 ? 1 : 0;
  }
}

// Moves each state past `count` draws of KIND, as generate_split drew them.
template <int KIND>
__device__ __forceinline__ void advance(sluice_rng_state* states, u64 n, u64 count) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    if (count == 0) return;
    sluice_rng_state s = states[i];
    advance_one<KIND>(&s, count);
    states[i] = s;
  }
}

// Adds b to a 128-bit counter.
__device__ __forceinline__ void counter_add(unsigned int c[4], u64 b) {
  sluice_rng_state s;
  s.ctr[0] = c[0];
  s.ctr[1] = c[1];
  s.ctr[2] = c[2];
  s.ctr[3] = c[3];
  sluice_rng_counter_add(&s, b);
  c[0] = s.ctr[0];
  c[1] = s.ctr[1];
  c[2] = s.ctr[2];
  c[3] = s.ctr[3];
}

// Sample-major draws of four adjacent states per thread (n % 4 == 0, `out` 16-byte
// aligned): thread t draws [j0, j1) of states 4q..4q+3, q = t % (n / 4),
// j0 = (t / (n / 4)) * per_part with per_part a multiple of 4. States at a block
// boundary (position 0, no pending normal; the usual case) take whole Philox blocks,
// four at once (independent chains), and write one 16-byte store per draw; any
// other state is drawn as draw_range draws it. With `own` (parts == 1) each thread
// also moves its four states past `count` draws; otherwise the advance kernel does.
template <int KIND>
__device__ __forceinline__ void generate_quad(sluice_rng_state* states, u64 n, u32* out, u64 count,
                                              u64 parts, u64 per_part, u32 own) {
  const u64 groups = n / 4;
  const u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  if (t >= groups * parts) return;
  const u64 i0 = 4 * (t % groups);
  const u64 j0 = (t / groups) * per_part;
  const u64 j1 = j0 + per_part < count ? j0 + per_part : count;
  // Only the counters and keys stay in registers through the loop.
  unsigned int c[4][4], key[4][2];
  bool aligned = true;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const sluice_rng_state* p = states + i0 + s;
    aligned = aligned && p->position == 0 && (KIND != KIND_NORMAL || p->boxmuller_flag != 1);
#pragma unroll
    for (int w = 0; w < 4; ++w) c[s][w] = p->ctr[w];
    key[s][0] = p->key[0];
    key[s][1] = p->key[1];
  }
  if (j0 < j1 && !aligned) {
#pragma unroll
    for (int s = 0; s < 4; ++s) draw_range<KIND>(states[i0 + s], out + i0 + s, n, j0, j1);
  } else if (j0 < j1) {
#pragma unroll
    for (int s = 0; s < 4; ++s) counter_add(c[s], j0 / 4);
    for (u64 j = j0; j < j1; j += 4) {
      unsigned int r[4][4];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        sluice_philox4x32_10(c[s], key[s], r[s]);
        counter_add(c[s], 1);
      }
      unsigned int v[4][4];  // v[d][s]: draw j + d of state i0 + s
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        if (KIND == KIND_NORMAL) {
          float a0, b0, a1, b1;
          sluice_rng_box_muller(r[s][0], r[s][1], &a0, &b0);
          sluice_rng_box_muller(r[s][2], r[s][3], &a1, &b1);
          v[0][s] = __float_as_uint(a0);
          v[1][s] = __float_as_uint(b0);
          v[2][s] = __float_as_uint(a1);
          v[3][s] = __float_as_uint(b1);
        } else {
#pragma unroll
          for (int d = 0; d < 4; ++d)
            v[d][s] = KIND == KIND_U32 ? r[s][d] : __float_as_uint(sluice_rng_u32_to_uniform(r[s][d]));
        }
      }
#pragma unroll
      for (int d = 0; d < 4; ++d)
        if (j + d < j1)
          *reinterpret_cast<uint4*>(out + (j + d) * n + i0) = make_uint4(v[d][0], v[d][1], v[d][2], v[d][3]);
    }
  }
  if (own) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      sluice_rng_state st = states[i0 + s];
      advance_one<KIND>(&st, count);
      states[i0 + s] = st;
    }
  }
}

#define SLUICE_RNG_SPLIT(NAME, KIND, T)                                                        \
  extern "C" __global__ void sluice_rng_kernel_##NAME##_split(                                 \
      const sluice_rng_state* states, u64 n, T* out, u64 count, u32 layout, u64 parts,         \
      u64 per_part) {                                                                          \
    generate_split<KIND>(states, n, (u32*)out, count, layout, parts, per_part);                \
  }                                                                                            \
  extern "C" __global__ void sluice_rng_kernel_##NAME##_advance(sluice_rng_state* states, u64 n, \
                                                               u64 count) {                   \
    advance<KIND>(states, n, count);                                                           \
  }

SLUICE_RNG_SPLIT(u32, KIND_U32, u32)
SLUICE_RNG_SPLIT(uniform, KIND_UNIFORM, float)
SLUICE_RNG_SPLIT(normal, KIND_NORMAL, float)

#define SLUICE_RNG_QUAD(NAME, KIND, T)                                                         \
  extern "C" __global__ void sluice_rng_kernel_##NAME##_quad(sluice_rng_state* states, u64 n,  \
                                                            T* out, u64 count, u64 parts,     \
                                                            u64 per_part, u32 own) {          \
    generate_quad<KIND>(states, n, (u32*)out, count, parts, per_part, own);                   \
  }

SLUICE_RNG_QUAD(u32, KIND_U32, u32)
SLUICE_RNG_QUAD(uniform, KIND_UNIFORM, float)
SLUICE_RNG_QUAD(normal, KIND_NORMAL, float)

// ---------------------------------------------------------------------------------
// CRC32C of a checkpoint's states on the device (serialize's checksum, so that the
// host only waits for one bulk copy). The raw CRC (zero initial value, no final
// XOR; Castagnoli, reflected) is linear: raw(A || B) = raw(A) * x^(8|B|) ^ raw(B)
// (mod P). Thread t of the grid takes bytes [t * seg, t * seg + seg) of `len`,
// shifts its raw CRC past every byte after them, and the shifted CRCs are XORed
// into *out (zeroed before the launch): XOR is order-free, so the result never
// depends on timing. x8[k] = x^(8 * 2^k) mod P (reflected), from the host.

#define SLUICE_CRC32C_POLY 0x82F63B78u

struct sluice_crc_powers {
  u32 x8[48];
};

// a * b mod P, both reflected (bit 31 is x^0): 32 branch-free steps.
__device__ __forceinline__ u32 crc_mulmod(u32 a, u32 b) {
  u32 p = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    p ^= b & (0u - ((a >> (31 - i)) & 1u));
    b = (b >> 1) ^ (SLUICE_CRC32C_POLY & (0u - (b & 1u)));
  }
  return p;
}

extern "C" __global__ void __launch_bounds__(256)
    sluice_crc32c_raw(const unsigned char* data, u64 len, u64 seg, u32* out,
                      sluice_crc_powers powers) {
  __shared__ u32 table[4][256];
  __shared__ u32 block_crc;
  {
    const u32 v = threadIdx.x;  // blockDim.x == 256
    u32 c = v;
#pragma unroll
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (SLUICE_CRC32C_POLY & (0u - (c & 1u)));
    table[0][v] = c;
    if (threadIdx.x == 0) block_crc = 0;
  }
  __syncthreads();
#pragma unroll
  for (int s = 1; s < 4; ++s) {
    const u32 prev = table[s - 1][threadIdx.x];
    table[s][threadIdx.x] = (prev >> 8) ^ table[0][prev & 0xff];
    __syncthreads();
  }
  const u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  const u64 start = t * seg < len ? t * seg : len;
  const u64 end = start + seg < len ? start + seg : len;
  u32 crc = 0;
  u64 i = start;
  // seg is a multiple of 16 and data 16-byte aligned: whole uint4 loads.
  for (; i + 16 <= end; i += 16) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(data + i));
    const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      crc ^= words[k];
      crc = table[3][crc & 0xff] ^ table[2][(crc >> 8) & 0xff] ^ table[1][(crc >> 16) & 0xff] ^
            table[0][crc >> 24];
    }
  }
  for (; i < end; ++i) crc = table[0][(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  // Shift past the len - end bytes after this segment.
  u64 after = len - end;
  for (int k = 0; after != 0 && k < 48; ++k, after >>= 1)
    if (after & 1) crc = crc_mulmod(powers.x8[k], crc);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) crc ^= __shfl_xor_sync(0xffffffffu, crc, o);
  if ((threadIdx.x & 31) == 0 && crc != 0) atomicXor(&block_crc, crc);
  __syncthreads();
  if (threadIdx.x == 0 && block_crc != 0) atomicXor(out, block_crc);
}
