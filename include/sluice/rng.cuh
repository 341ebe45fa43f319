// sluice/rng.cuh: the device side of sluice's RNG, for your own kernels.
//
// A sluice RNG (sluice_rng_create) is an array of n per-sample states in device
// memory; sluice_rng_states() gives its address. Each state is exactly cuRAND's
// curandStatePhilox4_32_10_t (same 64-byte layout, same draws), so a kernel may
// use either these functions or cuRAND's own on it:
//
//   #include <sluice/rng.cuh>
//   __global__ void dropout(float* x, sluice_rng_state* states, unsigned n, float p) {
//     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i >= n) return;
//     sluice_rng_state s = states[i];            // load once
//     x[i] = sluice_rng_uniform(&s) < p ? 0.0f : x[i] / (1.0f - p);
//     states[i] = s;                             // store back: the draw is checkpointed
//   }
//
// Declare the states buffer (its sync object) as WRITTEN by the launch, so that
// sluice orders saves, restores and other draws around it.
//
// Draws equal cuRAND's bit for bit when compiled the way cuRAND's are (nvcc or
// NVRTC defaults, no -use_fast_math): sluice_rng_next == curand,
// sluice_rng_uniform == curand_uniform, sluice_rng_normal == curand_normal,
// sluice_rng_init == curand_init, sluice_rng_skipahead == skipahead. The header
// needs no other include, so NVRTC compiles it as it is.
#ifndef SLUICE_RNG_CUH
#define SLUICE_RNG_CUH

#ifdef __cplusplus
#define SLUICE_RNG_FN static __device__ __forceinline__
#else
#error "sluice/rng.cuh is CUDA C++"
#endif

// One per-sample state: curandStatePhilox4_32_10_t, field for field.
struct __align__(16) sluice_rng_state {
  unsigned int ctr[4];     // the 128-bit counter; ctr[2..3] hold the subsequence
  unsigned int output[4];  // the current Philox block
  unsigned int key[2];     // the seed
  unsigned int position;   // the next word of output to return (0..3)
  int boxmuller_flag;      // 1 when boxmuller_extra holds the second normal
  int boxmuller_flag_double;
  float boxmuller_extra;
  double boxmuller_extra_double;
};

#define SLUICE_PHILOX_M0 0xD2511F53u
#define SLUICE_PHILOX_M1 0xCD9E8D57u
#define SLUICE_PHILOX_W0 0x9E3779B9u
#define SLUICE_PHILOX_W1 0xBB67AE85u
#define SLUICE_2POW32_INV 2.3283064e-10f
#define SLUICE_2POW32_INV_2PI (2.3283064e-10f * 6.2831855f)

// One Philox4x32 block, 10 rounds, into out[4].
SLUICE_RNG_FN void sluice_philox4x32_10(const unsigned int ctr_in[4], const unsigned int key_in[2],
                                        unsigned int out[4]) {
  unsigned int c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  unsigned int k0 = key_in[0], k1 = key_in[1];
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += SLUICE_PHILOX_W0;
      k1 += SLUICE_PHILOX_W1;
    }
    unsigned int hi0 = __umulhi(SLUICE_PHILOX_M0, c0), lo0 = SLUICE_PHILOX_M0 * c0;
    unsigned int hi1 = __umulhi(SLUICE_PHILOX_M1, c2), lo1 = SLUICE_PHILOX_M1 * c2;
    unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Adds n to the 128-bit counter (cuRAND's Philox_State_Incr).
SLUICE_RNG_FN void sluice_rng_counter_add(sluice_rng_state* s, unsigned long long n) {
  unsigned int nlo = (unsigned int)n, nhi = (unsigned int)(n >> 32);
  s->ctr[0] += nlo;
  if (s->ctr[0] < nlo) nhi++;
  s->ctr[1] += nhi;
  if (nhi <= s->ctr[1]) return;
  if (++s->ctr[2]) return;
  ++s->ctr[3];
}

// Adds one to the counter.
SLUICE_RNG_FN void sluice_rng_counter_inc(sluice_rng_state* s) {
  if (++s->ctr[0]) return;
  if (++s->ctr[1]) return;
  if (++s->ctr[2]) return;
  ++s->ctr[3];
}

// skipahead(n): skips n 32-bit outputs.
SLUICE_RNG_FN void sluice_rng_skipahead(unsigned long long n, sluice_rng_state* s) {
  s->position += (unsigned int)(n & 3);
  n /= 4;
  if (s->position > 3) {
    n += 1;
    s->position -= 4;
  }
  sluice_rng_counter_add(s, n);
  sluice_philox4x32_10(s->ctr, s->key, s->output);
}

// skipahead_sequence(n): skips n subsequences of 2^66 outputs.
SLUICE_RNG_FN void sluice_rng_skipahead_sequence(unsigned long long n, sluice_rng_state* s) {
  unsigned int nlo = (unsigned int)n, nhi = (unsigned int)(n >> 32);
  s->ctr[2] += nlo;
  if (s->ctr[2] < nlo) nhi++;
  s->ctr[3] += nhi;
  sluice_philox4x32_10(s->ctr, s->key, s->output);
}

// curand_init(seed, subsequence, offset, s).
SLUICE_RNG_FN void sluice_rng_init(unsigned long long seed, unsigned long long subsequence,
                                   unsigned long long offset, sluice_rng_state* s) {
  s->ctr[0] = s->ctr[1] = s->ctr[2] = s->ctr[3] = 0;
  s->key[0] = (unsigned int)seed;
  s->key[1] = (unsigned int)(seed >> 32);
  s->position = 0;
  s->boxmuller_flag = 0;
  s->boxmuller_flag_double = 0;
  s->boxmuller_extra = 0.0f;
  s->boxmuller_extra_double = 0.0;
  sluice_rng_skipahead_sequence(subsequence, s);
  sluice_rng_skipahead(offset, s);
}

// curand(s): the next 32-bit output.
SLUICE_RNG_FN unsigned int sluice_rng_next(sluice_rng_state* s) {
  unsigned int ret;
  switch (s->position++) {  // cuRAND's order: a position past 3 reads x
    default: ret = s->output[0]; break;
    case 1: ret = s->output[1]; break;
    case 2: ret = s->output[2]; break;
    case 3: ret = s->output[3]; break;
  }
  if (s->position == 4) {
    sluice_rng_counter_inc(s);
    sluice_philox4x32_10(s->ctr, s->key, s->output);
    s->position = 0;
  }
  return ret;
}

// cuRAND's map of a 32-bit output to (0, 1].
SLUICE_RNG_FN float sluice_rng_u32_to_uniform(unsigned int x) {
  return x * SLUICE_2POW32_INV + (SLUICE_2POW32_INV / 2.0f);
}

// curand_uniform(s).
SLUICE_RNG_FN float sluice_rng_uniform(sluice_rng_state* s) {
  return sluice_rng_u32_to_uniform(sluice_rng_next(s));
}

// cuRAND's Box-Muller transform of two 32-bit outputs.
SLUICE_RNG_FN void sluice_rng_box_muller(unsigned int x, unsigned int y, float* a, float* b) {
  float u = x * SLUICE_2POW32_INV + (SLUICE_2POW32_INV / 2);
  float v = y * SLUICE_2POW32_INV_2PI + (SLUICE_2POW32_INV_2PI / 2);
  float r = sqrtf(-2.0f * logf(u));
  float sn, cs;
  __sincosf(v, &sn, &cs);
  *a = sn * r;
  *b = cs * r;
}

// curand_normal(s): normals come in pairs; the second is kept in the state.
SLUICE_RNG_FN float sluice_rng_normal(sluice_rng_state* s) {
  if (s->boxmuller_flag != 1) {
    unsigned int x = sluice_rng_next(s);
    unsigned int y = sluice_rng_next(s);
    float a, b;
    sluice_rng_box_muller(x, y, &a, &b);
    s->boxmuller_extra = b;
    s->boxmuller_flag = 1;
    return a;
  }
  s->boxmuller_flag = 0;
  return s->boxmuller_extra;
}

#endif  // SLUICE_RNG_CUH
