package main

// kernelLayers is the part of kernelSource outside the products: the input
// stage, the second layer with the loss, the loss of the batch, the
// backward pass of the second layer with its SGD step, and the element-wise
// kernels of initialisation and evaluation.
const kernelLayers = `
extern "C" {

// The first step's dropout mask for the wgmma x W1 (later steps': fwd2_ce),
// a thread per RNG state (drop_bits).
__global__ void drop_mask(sluice_rng_state* states, unsigned n_states, float p, unsigned hid, unsigned char* mask) {
  const unsigned si = blockIdx.x * blockDim.x + threadIdx.x;
  if (si < n_states) drop_mask_state(states, si, p, hid / WG_BN, mask);
}

// out[i] = in[i] / 255, four per thread.
__global__ void u8_to_f32(float* out, const unsigned char* in, unsigned n) {
  const unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  if (i + 3 < n && ((unsigned long long)in & 3) == 0 && ((unsigned long long)out & 15) == 0) {
    const uchar4 u = *reinterpret_cast<const uchar4*>(in + i);
    *reinterpret_cast<float4*>(out + i) =
        make_float4((float)u.x * (1.0f / 255.0f), (float)u.y * (1.0f / 255.0f),
                    (float)u.z * (1.0f / 255.0f), (float)u.w * (1.0f / 255.0f));
  } else {
    for (unsigned j = i; j < n && j < i + 4; ++j) out[j] = (float)in[j] * (1.0f / 255.0f);
  }
}

// dst[i] = src[i] * s
__global__ void scale_copy(float* dst, const float* src, unsigned n, float s) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] * s;
}

// A block of 128 threads (4 warps) per row r of a1 (hid units): the logits
// l = a1[r] W2 + b2 (thread k sums units k, k+128, ..., each warp adds its
// lanes by a xor butterfly, then the 4 warps' sums in warp order), a right
// prediction counted in *right; when train, also the row's loss, the
// gradient dz = (softmax - onehot) * inv_rows, and the row of da1 (to da1h
// in bf16 when it is not null, pre-tiled as x^T da1's B when da1_tiled,
// else to da1):
//   da1[r,c] = a1[r,c] > 0 ? scale * sum_j dz[j] W2[c,j] : 0
// (a1 > 0 exactly where relu passed and dropout kept: the mask is scale
// there), each thread for its units, whose rows of W2 it holds. The rows of
// W2 of a thread's first CE_UNITS units and b2 load before pdl_enter (the
// kernel ahead writes a1, never W2; through L1, as every block reads all of
// W2), then those units' a1 all at once.
//
// With states (the wgmma step), the kernel also draws the next step's
// dropout mask for the wgmma x W1 (drop_bits: a thread per state, while x W1
// runs; stored after pdl_enter, once x W1 has read the mask before).
#define CE_THREADS 128
#define CE_UNITS 4
__global__ void __launch_bounds__(CE_THREADS) fwd2_ce(const float* a1, const float* w2, const float* b2,
                                                      const unsigned char* labels, float* dlogits,
                                                      float* rowloss, unsigned* right, unsigned rows,
                                                      unsigned hid, float inv_rows, int train, float* da1,
                                                      unsigned short* da1h, float scale, int da1_tiled,
                                                      sluice_rng_state* states, unsigned n_states, float p,
                                                      unsigned char* mask) {
  __shared__ float s_part[CE_THREADS / 32][10];
  __shared__ float s_dz[10];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = blockIdx.x;
  const unsigned si = r * CE_THREADS + threadIdx.x, stride = gridDim.x * CE_THREADS, tiles_x = hid / WG_BN;
  const bool draws = states != nullptr && si < n_states;
  const unsigned char bits = draws ? drop_bits(states, si, p) : 0;
  float w[CE_UNITS][10], bias[10];
#pragma unroll
  for (int k = 0; k < CE_UNITS; ++k) {
    const unsigned c = threadIdx.x + k * CE_THREADS;
#pragma unroll
    for (int j = 0; j < 10; ++j) w[k][j] = c < hid ? w2[(unsigned long long)c * 10 + j] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < 10; ++j) bias[j] = b2[j];
  pdl_enter();
  if (draws) {
    mask[drop_mask_byte(si, tiles_x)] = bits;
    for (unsigned sj = si + stride; sj < n_states; sj += stride) drop_mask_state(states, sj, p, tiles_x, mask);
  }
  if (r >= rows) return;  // the same for the whole block
  float acc[10];
#pragma unroll
  for (int j = 0; j < 10; ++j) acc[j] = 0.0f;
  const float* a = a1 + (unsigned long long)r * hid;
  float av[CE_UNITS];
#pragma unroll
  for (int k = 0; k < CE_UNITS; ++k) {
    const unsigned c = threadIdx.x + k * CE_THREADS;
    av[k] = c < hid ? a[c] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < CE_UNITS; ++k) {
    if (threadIdx.x + k * CE_THREADS < hid) {
#pragma unroll
      for (int j = 0; j < 10; ++j) acc[j] += av[k] * w[k][j];
    }
  }
  for (unsigned c = threadIdx.x + CE_UNITS * CE_THREADS; c < hid; c += CE_THREADS) {
    const float av = a[c];
    const float* w = w2 + (unsigned long long)c * 10;
#pragma unroll
    for (int j = 0; j < 10; ++j) acc[j] += av * w[j];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int j = 0; j < 10; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
  if (lane < 10) {
#pragma unroll
    for (int j = 0; j < 10; ++j)
      if ((int)lane == j) s_part[warp][j] = acc[j];
  }
  __syncthreads();
  if (warp == 0) {
    float l[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) {
      float v = s_part[0][j];
#pragma unroll
      for (int w = 1; w < CE_THREADS / 32; ++w) v += s_part[w][j];
      l[j] = v + bias[j];
    }
    float mx = l[0];
    int arg = 0;
#pragma unroll
    for (int j = 1; j < 10; ++j)
      if (l[j] > mx) { mx = l[j]; arg = j; }
    const int y = labels[r];
    if (train) {
      float e[10], sum = 0.0f, ly = 0.0f;
#pragma unroll
      for (int j = 0; j < 10; ++j) {
        e[j] = expf(l[j] - mx);
        sum += e[j];
        if (j == y) ly = l[j];
      }
      const float inv = 1.0f / sum;
#pragma unroll
      for (int j = 0; j < 10; ++j)
        if ((int)lane == j) {
          const float d = (e[j] * inv - (j == y ? 1.0f : 0.0f)) * inv_rows;
          dlogits[r * 10 + j] = d;
          s_dz[j] = d;
        }
      if (lane == 0) rowloss[r] = logf(sum) - (ly - mx);
    }
    if (lane == 0 && arg == y) atomicAdd(right, 1u);
  }
  if (!train || (da1 == nullptr && da1h == nullptr)) return;  // the same for the whole block
  __syncthreads();
  float dz[10];
#pragma unroll
  for (int j = 0; j < 10; ++j) dz[j] = s_dz[j];
  // da1 of unit c, whose a1 is av and row of W2 wc (the sum's order as bwd2's was).
  auto da1_store = [&](unsigned c, float av, const float (&wc)[10]) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 10; ++j) s += dz[j] * wc[j];
    const float v = av > 0.0f ? s * scale : 0.0f;
    const unsigned long long i = (unsigned long long)r * hid + c;
    if (da1h != nullptr)
      da1h[da1_tiled ? tiled_index(WG_BN, true, c, r, rows) : i] = f2bf(v);
    else
      da1[i] = v;
  };
#pragma unroll
  for (int k = 0; k < CE_UNITS; ++k) {
    const unsigned c = threadIdx.x + k * CE_THREADS;
    if (c < hid) da1_store(c, av[k], w[k]);
  }
  for (unsigned c = threadIdx.x + CE_UNITS * CE_THREADS; c < hid; c += CE_THREADS) {
    float wc[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) wc[j] = w2[(unsigned long long)c * 10 + j];
    da1_store(c, a[c], wc);
  }
}

// One block: losses[*counter] = mean of rowloss (as 256 threads would: k
// sums rows k, k+256, ..., then a fixed tree, each thread standing in for
// 256 / blockDim.x of them); ++*counter. rowloss comes from fwd2_ce, a
// kernel ahead: read after pdl_enter.
__device__ __forceinline__ void store_loss(const float* rowloss, float* losses, unsigned* counter,
                                           unsigned rows) {
  pdl_enter();
  __shared__ float sh[256];
  for (unsigned k = threadIdx.x; k < 256; k += blockDim.x) {
    float s = 0.0f;
    for (unsigned r = k; r < rows; r += 256) s += rowloss[r];
    sh[k] = s;
  }
  __syncthreads();
  for (unsigned w = 128; w > 0; w >>= 1) {
    for (unsigned k = threadIdx.x; k < w; k += blockDim.x) sh[k] += sh[k + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    losses[*counter] = sh[0] / (float)rows;
    *counter += 1;
  }
}

__global__ void __launch_bounds__(256) loss_store(const float* rowloss, float* losses,
                                                  unsigned* counter, unsigned rows) {
  store_loss(rowloss, losses, counter, rows);
}

// The second layer's gradients and their SGD step, as blocks of x^T da1's
// kernel (gemm_tn_sgd, past its tiles). Block blk of 128 threads takes
// L2_UNITS hidden units (unit c = L2_UNITS blk + tid % L2_UNITS), each
// summed over L2_SLOTS row slots (slot s: rows s, s + L2_SLOTS, ...; thread
// tid has slots tid / L2_UNITS and that + 32):
//   dW2[c,j] = sum_r a1[r,c] dz2[r,j]    db1[c] = sum_r da1[r,c]
// with da1 recomputed as fwd2_ce stores it (bf16 may hold it); unit c == hid
// is the second layer's bias: db2[j] = sum_r dz2[r,j]. A warp adds its 8
// slots of a unit by a xor butterfly, then the 8 groups of 8 slots are
// added in order: a fixed order (the one of the kernel bwd2 had, with 256
// threads). Those gradients step their parameters by SGD with momentum
// (sgd1): p1 and v1 are the parameters and velocities from b1 on ([b1 (hid),
// W2 (hid x 10), b2 (10)]); a block reads only its own units' rows of W2,
// all before it updates them. Before pdl_enter (the kernel ahead, fwd2_ce,
// writes dz2; a1, W2 and the parameters come from earlier kernels) a thread
// loads its unit's row of W2, its slots' first L2_ROWS rows of a1 and the
// parameter it steps. The block after the units' (blk == l2_blocks(hid))
// stores the loss when rowloss is not null.
#define L2_UNITS 4
#define L2_SLOTS 64
#define L2_ROWS 4
__device__ __forceinline__ unsigned l2_blocks(unsigned hid) { return (hid + L2_UNITS) / L2_UNITS; }

__device__ __forceinline__ void layer2_block(unsigned blk, const float* a1, const float* dz2, float* p1,
                                             float* v1, unsigned rows, unsigned hid, float scale,
                                             float lr, float mu, float wd, const float* rowloss,
                                             float* losses, unsigned* counter) {
  if (blk >= l2_blocks(hid)) {
    if (blk == l2_blocks(hid) && rowloss != nullptr) store_loss(rowloss, losses, counter, rows);
    return;
  }
  __shared__ float part[L2_SLOTS / 8][L2_UNITS][11];
  const unsigned col = threadIdx.x % L2_UNITS, slot0 = threadIdx.x / L2_UNITS;
  const unsigned c = blk * L2_UNITS + col;
  const float* w2 = p1 + hid;
  float wc[10], a[2][L2_ROWS];
#pragma unroll
  for (int j = 0; j < 10; ++j) wc[j] = c < hid ? w2[(unsigned long long)c * 10 + j] : 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < L2_ROWS; ++k) {
      const unsigned r = slot0 + 32 * h + k * L2_SLOTS;
      a[h][k] = c < hid && r < rows ? __ldcg(a1 + (unsigned long long)r * hid + c) : 0.0f;
    }
  // The parameter this thread steps at the end (see there): index pk.
  const unsigned u = blk * L2_UNITS + threadIdx.x / 11, q = threadIdx.x % 11;
  const bool stepper = threadIdx.x < L2_UNITS * 11 && u <= hid && (q < 10 || u < hid);
  const unsigned long long pk = q < 10 ? hid + (unsigned long long)u * 10 + q : u;
  float pp = 0.0f, pv = 0.0f;
  if (stepper) {
    pp = __ldcg(p1 + pk);
    pv = __ldcg(v1 + pk);
  }
  pdl_enter();
  float gw[2][10], gb[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 10; ++j) gw[h][j] = 0.0f;
  // Row r of the thread's unit into the sums of its slot h.
  auto row = [&](int h, unsigned r, float av) {
    float dz[10];
#pragma unroll
    for (int j = 0; j < 10; ++j) dz[j] = dz2[(unsigned long long)r * 10 + j];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 10; ++j) s += dz[j] * wc[j];
    gb[h] += av > 0.0f ? s * scale : 0.0f;
#pragma unroll
    for (int j = 0; j < 10; ++j) gw[h][j] += av * dz[j];
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const unsigned slot = slot0 + 32 * h;
    if (c < hid) {
#pragma unroll
      for (int k = 0; k < L2_ROWS; ++k)
        if (slot + k * L2_SLOTS < rows) row(h, slot + k * L2_SLOTS, a[h][k]);
      for (unsigned r = slot + L2_ROWS * L2_SLOTS; r < rows; r += L2_SLOTS)
        row(h, r, a1[(unsigned long long)r * hid + c]);
    } else if (c == hid) {
      for (unsigned r = slot; r < rows; r += L2_SLOTS) {
#pragma unroll
        for (int j = 0; j < 10; ++j) gw[h][j] += dz2[(unsigned long long)r * 10 + j];
      }
    }
  }
  // The 8 slots of a warp (lanes col, col + 4, ..., col + 28) by a xor
  // butterfly; group h of warp w is slots 8 (w + 4 h) to 8 (w + 4 h) + 7.
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int off = L2_UNITS; off < 32; off <<= 1) {
#pragma unroll
      for (int j = 0; j < 10; ++j) gw[h][j] += __shfl_xor_sync(0xffffffffu, gw[h][j], off);
      gb[h] += __shfl_xor_sync(0xffffffffu, gb[h], off);
    }
    if (lane < L2_UNITS) {
#pragma unroll
      for (int j = 0; j < 10; ++j) part[warp + 4 * h][lane][j] = gw[h][j];
      part[warp + 4 * h][lane][10] = gb[h];
    }
  }
  __syncthreads();
  // One thread per parameter: unit u's W2[u, q] (b2[q] for u == hid) for q <
  // 10, b1[u] for q == 10.
  if (stepper) {
    const unsigned uc = threadIdx.x / 11;
    float sum = part[0][uc][q];
#pragma unroll
    for (int g = 1; g < L2_SLOTS / 8; ++g) sum += part[g][uc][q];
    sgd1(pp, pv, sum, lr, mu, wd);
    p1[pk] = pp;
    v1[pk] = pv;
  }
}

// out[i] = bf16(in[i])
__global__ void f32_to_bf16(unsigned short* out, const float* in, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f2bf(in[i]);
}

// The input stage: x[i] = bf16(px[i] / 255) (u8_to_f32's value rounded),
// and the rows' labels copied, y[r] = lb[r]. Thread t converts 8 pixels of
// one row (a row is 784 pixels): one 8-byte load and one 16-byte store where
// both are aligned. Linear: pixels 8t to 8t + 7. With tiled (the
// warpgroup-MMA products) x is pre-tiled as x W1's A (kernelTiles), which
// x^T da1 reads too: the 8 pixels are one 16-byte row of a core matrix, and
// consecutive threads take consecutive rows of a tile, so that a warp's
// stores fill 512 contiguous bytes (pixels 8t to 8t + 7 were a core matrix
// apart: 1 KiB).
__device__ __forceinline__ unsigned pixel_bf16(unsigned p) { return f2bf((float)p * (1.0f / 255.0f)); }
__device__ __forceinline__ unsigned pixel_pair_bf16(unsigned w, int shift) {
  return pixel_bf16((w >> shift) & 0xffu) | (pixel_bf16((w >> (shift + 8)) & 0xffu) << 16);
}
__device__ __forceinline__ void input_eight(unsigned short* x, int tiled, unsigned char* y,
                                            const unsigned char* px, const unsigned char* lb, unsigned n,
                                            unsigned rows) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < rows) y[t] = lb[t];
  if (8 * t >= n) return;
  unsigned i = 8 * t, r = 0, c = 0;
  if (tiled) {
    // Consecutive threads on consecutive rows of a tile (w rows in the last).
    const unsigned per = WG_BM * (784 / 8), tile = t / per, k = t % per, w = min(WG_BM, rows - tile * WG_BM);
    r = tile * WG_BM + k % w;
    c = 8 * (k / w);
    i = r * 784 + c;
  }
  uint2 p;
  if ((reinterpret_cast<unsigned long long>(px + i) & 7) == 0) {
    p = *reinterpret_cast<const uint2*>(px + i);
  } else {
    p.x = px[i] | (px[i + 1] << 8) | (px[i + 2] << 16) | ((unsigned)px[i + 3] << 24);
    p.y = px[i + 4] | (px[i + 5] << 8) | (px[i + 6] << 16) | ((unsigned)px[i + 7] << 24);
  }
  const uint4 v = make_uint4(pixel_pair_bf16(p.x, 0), pixel_pair_bf16(p.x, 16), pixel_pair_bf16(p.y, 0),
                             pixel_pair_bf16(p.y, 16));
  unsigned short* dst = x + (tiled ? tiled_index(WG_BM, false, r, c, 784) : i);
  if ((reinterpret_cast<unsigned long long>(dst) & 15) == 0) {
    *reinterpret_cast<uint4*>(dst) = v;
  } else {
    const unsigned wd[4] = {v.x, v.y, v.z, v.w};
    for (int j = 0; j < 8; ++j) dst[j] = (unsigned short)(wd[j / 2] >> (16 * (j % 2)));
  }
}

__global__ void input_bf16(unsigned short* x, int tiled, unsigned char* y, const unsigned char* px,
                           const unsigned char* lb, unsigned n, unsigned rows) {
  pdl_enter();
  input_eight(x, tiled, y, px, lb, n, rows);
}

// input_bf16 for two batches at once, blockIdx.y's into its own input set:
// the input stage of a graph of two steps, one launch for both. wait 0: it
// does not wait for the kernel ahead (stepGroup's input stage after the steps,
// -input-in-graph: that kernel, the second step's x^T da1, reads the other
// two sets, and the stream waited for the batches' copy before the steps),
// so it may run beside it.
__global__ void input_pair_bf16(unsigned short* x0, unsigned char* y0, const unsigned char* px0,
                                const unsigned char* lb0, unsigned short* x1, unsigned char* y1,
                                const unsigned char* px1, const unsigned char* lb1, int tiled, int wait,
                                unsigned n, unsigned rows) {
  if (wait) pdl_enter();
  if (blockIdx.y == 0)
    input_eight(x0, tiled, y0, px0, lb0, n, rows);
  else
    input_eight(x1, tiled, y1, px1, lb1, n, rows);
}

// The same in floats, four pixels per thread.
__global__ void input_f32(float* x, unsigned char* y, const unsigned char* px, const unsigned char* lb,
                          unsigned n, unsigned rows) {
  pdl_enter();
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned i = 4 * t; i < n && i < 4 * t + 4; ++i) x[i] = (float)px[i] * (1.0f / 255.0f);
  if (t < rows) y[t] = lb[t];
}

}  // extern "C"
`

const (
	ceThreads = 128 // fwd2_ce's block (CE_THREADS)
	l2Units   = 4   // hidden units per layer2_block (L2_UNITS)
)
