// Paged KV cache writes and causal GQA attention over it, decode and prefill
// alike: the positions of every token in fixed chunks of kAttentionChunk,
// thread blocks per (KV head [and a subgroup of its query heads] or, for an
// F16 cache, 8 query heads, token, chunk) writing the chunk's softmax
// partial, then a merge kernel per (query head, token) combining the chunks
// in order. Decode at long contexts gets hundreds of blocks; a token's result
// does not depend on the batch.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

using codec::DecodeRowElement;
using codec::Format;

constexpr int kWarps = 8;
constexpr int kChunk = kAttentionChunk;

__device__ __forceinline__ uint8_t* SlotRow(uint8_t* base, const PagedKv& kv, int64_t pos,
                                            uint64_t row_bytes) {
  const int64_t page = kv.block_table[pos / kv.page_size];
  return base + (page * kv.page_size + pos % kv.page_size) * static_cast<int64_t>(row_bytes);
}

// The first position token t attends (AttentionParams::window), given its
// n_kv = pos0 + t + 1.
__device__ __forceinline__ int64_t FirstPos(const AttentionParams& p, int64_t n_kv) {
  return p.window > 0 && n_kv > p.window ? n_kv - p.window : 0;
}

// One thread per stored unit (an element for F16, a 32-block otherwise):
// the n_tok * kd / kElems units of K, then those of V (one launch).
template <GgmlType F>
__global__ void KvWriteKernel(PagedKv kv, const float* k, const float* v, int64_t n_tok,
                              int64_t pos0, int64_t kd, int64_t vd) {
  constexpr int kElems = Format<F>::kElems, kBytes = Format<F>::kBytes;
  const int64_t k_units = kd / kElems, v_units = vd / kElems;
  const int64_t n_k = n_tok * k_units, total = n_k + n_tok * v_units;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_k = i < n_k;
    const int64_t j = is_k ? i : i - n_k;
    const int64_t units = is_k ? k_units : v_units, dim = is_k ? kd : vd;
    const int64_t t = j / units, u = j % units;
    uint8_t* dst = SlotRow(is_k ? kv.k : kv.v, kv, pos0 + t,
                           is_k ? kv.k_row_bytes : kv.v_row_bytes) +
                   u * kBytes;
    const float* src = (is_k ? k : v) + t * dim + u * kElems;
    if constexpr (F == GgmlType::kF16) {
      const uint16_t h = codec::FloatToHalf(src[0]);
      dst[0] = static_cast<uint8_t>(h & 0xFF);
      dst[1] = static_cast<uint8_t>(h >> 8);
    } else if constexpr (F == GgmlType::kQ8_0) {
      codec::EncodeQ8_0(src, dst);
    } else {
      codec::EncodeQ4_0(src, dst);
    }
  }
}

template <GgmlType F>
CallResult LaunchKvWrite(const PagedKv& kv, const float* k, const float* v, int64_t n_tok,
                         int64_t pos0, int64_t kd, int64_t vd, cudaStream_t s) {
  constexpr int kElems = Format<F>::kElems;
  if (kd % kElems != 0 || vd % kElems != 0) {
    return {cudaErrorInvalidValue, "KvWrite: row not a multiple of the KV block"};
  }
  const int64_t units = n_tok * (kd + vd) / kElems;
  int64_t blocks = (units + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  KvWriteKernel<F><<<static_cast<unsigned>(blocks), 256, 0, s>>>(kv, k, v, n_tok, pos0, kd, vd);
  return {cudaGetLastError(), "KvWriteKernel<<<>>>"};
}

// Chunk partials: block (x, t, c) computes, for query heads h0 .. h0 + HG - 1
// of KV head kvh (x = kvh * subgroups + sub, h0 = kvh * G + sub * HG) and
// token t of this launch, the online-softmax state {max, sum, acc[hd]} of
// positions [max(c * kChunk, first), min((c + 1) * kChunk, n_kv)), n_kv =
// pos0 + t + 1, first = FirstPos (the sliding window's start, else 0).
// Warp w takes positions begin + w, begin + w + 8, ...; lane l holds
// dimensions l, l + 32, ... Every K/V row is decoded once for the HG heads
// that read it. A head's arithmetic does not depend on HG, the grid or the
// batch: the same position partition and order for every token.
template <GgmlType F, int NV, int HG>
__global__ void __launch_bounds__(kWarps * 32) AttentionPartialKernel(AttentionParams p,
                                                                     int64_t t0, int subgroups,
                                                                     int n_chunks) {
  const int kvh = blockIdx.x / subgroups;
  const int group = p.n_head / p.n_head_kv;
  const int h0 = kvh * group + (blockIdx.x % subgroups) * HG;
  const int64_t t = t0 + blockIdx.y;
  const int c = blockIdx.z;
  const int64_t n_kv = p.pos0 + t + 1;
  const int64_t chunk0 = static_cast<int64_t>(c) * kChunk, first = FirstPos(p, n_kv);
  // Past this token's causal range, or wholly before its window.
  if (chunk0 >= n_kv || chunk0 + kChunk <= first) return;
  const int64_t begin = chunk0 > first ? chunk0 : first;
  const int64_t end = chunk0 + kChunk < n_kv ? chunk0 + kChunk : n_kv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int hd = NV * 32;
  float qr[HG][NV], acc[HG][NV], m[HG], l[HG];
#pragma unroll
  for (int g = 0; g < HG; ++g) {
    const float* q = p.q + (t * p.n_head + h0 + g) * hd;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      qr[g][j] = q[lane + 32 * j];
      acc[g][j] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
    // The query rounded to K's vec_dot_type, as llama.cpp's CPU attention
    // (and the CPU reference) does: F16 for an F16 cache, Q8_0 blocks of 32
    // (one j across the warp) for Q8_0 / Q4_0.
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      if constexpr (F == GgmlType::kF16) {
        qr[g][j] = codec::HalfToFloat(codec::FloatToHalf(qr[g][j]));
      } else {
        float amax = fabsf(qr[g][j]);
        for (int off = 16; off > 0; off >>= 1) {
          amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        qr[g][j] = static_cast<int8_t>(roundf(qr[g][j] * id)) *
                   codec::HalfToFloat(codec::FloatToHalf(d));
      }
    }
  }
  const int64_t col0 = static_cast<int64_t>(kvh) * hd + lane;
  for (int64_t pos = begin + warp; pos < end; pos += kWarps) {
    const uint8_t* krow = SlotRow(p.kv.k, p.kv, pos, p.kv.k_row_bytes);
    const uint8_t* vrow = SlotRow(p.kv.v, p.kv, pos, p.kv.v_row_bytes);
    float kv[NV], vv[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      kv[j] = DecodeRowElement<F>(krow, col0 + 32 * j);
      vv[j] = DecodeRowElement<F>(vrow, col0 + 32 * j);
    }
#pragma unroll
    for (int g = 0; g < HG; ++g) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < NV; ++j) s += qr[g][j] * kv[j];
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
      s *= p.scale;
      const float m_new = fmaxf(m[g], s);
      const float corr = expf(m[g] - m_new);
      const float ps = expf(s - m_new);
      l[g] = l[g] * corr + ps;
#pragma unroll
      for (int j = 0; j < NV; ++j) acc[g][j] = acc[g][j] * corr + ps * vv[j];
      m[g] = m_new;
    }
  }
  __shared__ float sm_m[kWarps][HG], sm_l[kWarps][HG];
  __shared__ float sm_acc[kWarps][HG * hd];
#pragma unroll
  for (int g = 0; g < HG; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
#pragma unroll
    for (int j = 0; j < NV; ++j) sm_acc[warp][g * hd + lane + 32 * j] = acc[g][j];
  }
  __syncthreads();
  // Merge the warps in order; one thread per (head, dimension).
  for (int e = threadIdx.x; e < HG * hd; e += blockDim.x) {
    const int g = e / hd, i = e % hd;
    float big = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sm_m[w][g]);
    float total = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm_l[w][g] > 0.0f ? expf(sm_m[w][g] - big) : 0.0f;
      total += sm_l[w][g] * f;
      o += sm_acc[w][e] * f;
    }
    float* part = p.split_scratch +
                  ((static_cast<int64_t>(blockIdx.y) * p.n_head + h0 + g) * n_chunks + c) * (hd + 2);
    if (i == 0) {
      part[0] = big;
      part[1] = total;
    }
    part[2 + i] = o;
  }
}

// F16 K/V: llama.cpp's CPU flash attention within a chunk (ggml-cpu
// ggml_compute_forward_flash_attn_ext_f16_one_chunk with F16 K/V, as the CPU
// reference common/model/internal/attention.h computes it): the chunk's
// positions in order, the query rounded to f16, V accumulated in an f16
// accumulator (rounded after every scale and multiply-add), scores summed in
// DotF16's AVX-512 order. llama.cpp's f16 accumulator loses precision that
// an f32 one keeps, but a different rounding at every position made the
// hidden states drift from llama.cpp's by ~1e-7 (NMSE) per layer, enough to
// flip near-tied router choices (qwen3moe f16 fixture) and the Q8_K
// rounding of later activations (q2_k fixture). Block (x, t, c): warp w
// computes query head x * kWarps + w of launch token t over chunk c
// (sequential over the positions, so one warp per head); lane l holds
// dimensions l, l + 32, ... of the accumulator. The chunk's state {max, sum,
// acc} goes to the split scratch as the generic kernel's; for a context of
// one chunk the merge then gives llama.cpp's acc * (1 / sum).
//
// DotF16 order: over blocks of 64 dimensions, accumulator (j, l) (j < 4, l <
// 16) sums element 16 j + l by fma; lane L holds (L / 16, L % 16) and (L /
// 16 + 2, L % 16), adds its two (acc0 + acc2 | acc1 + acc3), then the
// xor-shuffle tree 16, 8, 4, 2, 1 is GGML_F32Cx16_REDUCE's order; the
// dimensions past a multiple of 64 are added in double, in order.
//
// kSplit (MLA): K rows of head_dim values (any size up to kMaxAttentionDimK,
// the query's too), V of NV * 32 values; otherwise both are NV * 32.
template <int NV, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32) AttentionF16Kernel(AttentionParams p, int64_t t0,
                                                                int n_chunks) {
  constexpr int hv = NV * 32;
  const int hd = kSplit ? p.head_dim : hv;  // K
  const int np = hd & ~63;  // K dimensions in whole blocks of 64
  __shared__ float sq[kWarps][kSplit ? kMaxAttentionDimK : hv];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = blockIdx.x * kWarps + warp;
  if (h >= p.n_head) return;  // whole warps; no block barrier below
  const int64_t t = t0 + blockIdx.y;
  const int c = blockIdx.z;
  const int64_t n_kv = p.pos0 + t + 1;
  const int64_t chunk0 = static_cast<int64_t>(c) * kChunk, first = FirstPos(p, n_kv);
  if (chunk0 >= n_kv || chunk0 + kChunk <= first) return;
  const int64_t begin = chunk0 > first ? chunk0 : first;
  const int64_t end = chunk0 + kChunk < n_kv ? chunk0 + kChunk : n_kv;
  const int kvh = h / (p.n_head / p.n_head_kv);
  const float* q = p.q + (t * p.n_head + h) * hd;
  for (int e = lane; e < hd; e += 32) {
    sq[warp][e] = codec::HalfToFloat(codec::FloatToHalf(q[e]));
  }
  __syncwarp();
  const int jlo = lane >> 4, l16 = lane & 15;
  float acc[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) acc[j] = 0.0f;
  float m = -INFINITY, sum = 0.0f;
  const int64_t col0 = static_cast<int64_t>(kvh) * hd, vcol0 = static_cast<int64_t>(kvh) * hv;
  for (int64_t pos = begin; pos < end; ++pos) {
    const uint8_t* krow = SlotRow(p.kv.k, p.kv, pos, p.kv.k_row_bytes);
    const uint8_t* vrow = SlotRow(p.kv.v, p.kv, pos, p.kv.v_row_bytes);
    double dot = 0.0;
    if (np > 0) {  // uniform across the warp
      float a_lo = 0.0f, a_hi = 0.0f;
#pragma unroll
      for (int b = 0; b < np; b += 64) {
        const int e_lo = b + jlo * 16 + l16, e_hi = e_lo + 32;
        a_lo = fmaf(DecodeRowElement<GgmlType::kF16>(krow, col0 + e_lo), sq[warp][e_lo], a_lo);
        a_hi = fmaf(DecodeRowElement<GgmlType::kF16>(krow, col0 + e_hi), sq[warp][e_hi], a_hi);
      }
      float x = a_lo + a_hi;
      for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, off);
      dot = x;
    }
    for (int e = np; e < hd; ++e) {
      dot += static_cast<double>(DecodeRowElement<GgmlType::kF16>(krow, col0 + e) * sq[warp][e]);
    }
    const float s = static_cast<float>(dot) * p.scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > m) {  // uniform across the warp
      ms = expf(m - s);
      m = s;
#pragma unroll
      for (int j = 0; j < NV; ++j) acc[j] = codec::HalfToFloat(codec::FloatToHalf(acc[j] * ms));
    } else {
      vs = expf(s - m);
    }
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const float v = DecodeRowElement<GgmlType::kF16>(vrow, vcol0 + lane + 32 * j);
      acc[j] = codec::HalfToFloat(codec::FloatToHalf(fmaf(v, vs, acc[j])));
    }
    sum = fmaf(sum, ms, vs);
  }
  float* part = p.split_scratch +
                ((static_cast<int64_t>(blockIdx.y) * p.n_head + h) * n_chunks + c) * (hv + 2);
  if (lane == 0) {
    part[0] = m;
    part[1] = sum;
  }
#pragma unroll
  for (int j = 0; j < NV; ++j) part[2 + lane + 32 * j] = acc[j];
}

// out[t][h] = the chunk partials of (t, h) merged in chunk order (online).
__global__ void AttentionMergeKernel(AttentionParams p, int64_t t0, int n_chunks) {
  const int h = blockIdx.x;
  const int64_t t = t0 + blockIdx.y;
  const int hd = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;  // AttentionDimV
  const int64_t n_kv = p.pos0 + t + 1;
  const int c0 = static_cast<int>(FirstPos(p, n_kv) / kChunk);
  const int nc = static_cast<int>((n_kv + kChunk - 1) / kChunk);
  const float* part =
      p.split_scratch + (static_cast<int64_t>(blockIdx.y) * p.n_head + h) * n_chunks * (hd + 2);
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float m = -INFINITY, l = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int c = c0; c < nc; ++c) {
      const float* pc = part + static_cast<int64_t>(c) * (hd + 2);
      const float m_new = fmaxf(m, pc[0]);
      const float a = expf(m - m_new), b = expf(pc[0] - m_new);
      l = l * a + pc[1] * b;
      o = o * a + pc[2 + e] * b;
      m = m_new;
    }
    if (p.sinks != nullptr) {
      // The sink step of the CPU reference (attention.h).
      const float z = p.sinks[h];
      if (z > m) {
        const float ms = expf(m - z);
        o *= ms;
        l = fmaf(l, ms, 1.0f);
      } else {
        l = fmaf(l, 1.0f, expf(z - m));
      }
    }
    p.out[(t * p.n_head + h) * hd + e] = o * (1.0f / l);  // as llama.cpp: acc * (1 / sum)
  }
}

// Largest HG in {8, 4, 2, 1} dividing the GQA group with HG * NV <= 32
// (registers, shared memory).
int HeadsPerBlock(int group, int nv) {
  for (int hg : {8, 4, 2}) {
    if (group % hg == 0 && hg * nv <= 32) return hg;
  }
  return 1;
}

template <GgmlType F, int NV, int HG>
cudaError_t LaunchPartial(const AttentionParams& p, int64_t t0, int64_t nt, int n_chunks,
                          cudaStream_t s) {
  const int subgroups = p.n_head / p.n_head_kv / HG;
  const dim3 grid(static_cast<unsigned>(p.n_head_kv * subgroups), static_cast<unsigned>(nt),
                  static_cast<unsigned>(n_chunks));
  AttentionPartialKernel<F, NV, HG><<<grid, kWarps * 32, 0, s>>>(p, t0, subgroups, n_chunks);
  return cudaGetLastError();
}

template <GgmlType F, int NV>
cudaError_t LaunchPartialHg(const AttentionParams& p, int64_t t0, int64_t nt, int n_chunks,
                            cudaStream_t s) {
  switch (HeadsPerBlock(p.n_head / p.n_head_kv, NV)) {
    case 8:
      if constexpr (NV <= 4) return LaunchPartial<F, NV, 8>(p, t0, nt, n_chunks, s);
      return cudaErrorInvalidValue;
    case 4: return LaunchPartial<F, NV, 4>(p, t0, nt, n_chunks, s);
    case 2: return LaunchPartial<F, NV, 2>(p, t0, nt, n_chunks, s);
    default: return LaunchPartial<F, NV, 1>(p, t0, nt, n_chunks, s);
  }
}

template <int NV, bool kSplit = false>
cudaError_t LaunchF16Nv(const AttentionParams& p, int64_t t0, int64_t nt, int n_chunks,
                        cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.n_head + kWarps - 1) / kWarps),
                  static_cast<unsigned>(nt), static_cast<unsigned>(n_chunks));
  AttentionF16Kernel<NV, kSplit><<<grid, kWarps * 32, 0, s>>>(p, t0, n_chunks);
  return cudaGetLastError();
}

cudaError_t LaunchF16(const AttentionParams& p, int64_t t0, int64_t nt, int n_chunks,
                      cudaStream_t s) {
  if (AttentionSplitKV(p)) {
    switch (p.head_dim_v / 32) {
      case 1: return LaunchF16Nv<1, true>(p, t0, nt, n_chunks, s);
      case 2: return LaunchF16Nv<2, true>(p, t0, nt, n_chunks, s);
      case 4: return LaunchF16Nv<4, true>(p, t0, nt, n_chunks, s);
      case 8: return LaunchF16Nv<8, true>(p, t0, nt, n_chunks, s);
      case 16: return LaunchF16Nv<16, true>(p, t0, nt, n_chunks, s);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (p.head_dim / 32) {
    case 1: return LaunchF16Nv<1>(p, t0, nt, n_chunks, s);
    case 2: return LaunchF16Nv<2>(p, t0, nt, n_chunks, s);
    case 3: return LaunchF16Nv<3>(p, t0, nt, n_chunks, s);
    case 4: return LaunchF16Nv<4>(p, t0, nt, n_chunks, s);
    case 5: return LaunchF16Nv<5>(p, t0, nt, n_chunks, s);
    case 6: return LaunchF16Nv<6>(p, t0, nt, n_chunks, s);
    case 7: return LaunchF16Nv<7>(p, t0, nt, n_chunks, s);
    case 8: return LaunchF16Nv<8>(p, t0, nt, n_chunks, s);
    default: return cudaErrorInvalidValue;
  }
}

template <GgmlType F>
CallResult LaunchAttention(const AttentionParams& p, cudaStream_t s) {
  const int hd = p.head_dim, hv = AttentionDimV(p);
  // Tokens per launch pair: as many as the scratch holds at the last
  // token's chunk count.
  int64_t t0 = 0;
  while (t0 < p.n_tok) {
    const int n_chunks = static_cast<int>((p.pos0 + p.n_tok + kChunk - 1) / kChunk);
    const int64_t per_token = static_cast<int64_t>(p.n_head) * n_chunks * (hv + 2);
    int64_t nt = p.split_scratch_elems / per_token;
    if (nt < 1) return {cudaErrorInvalidValue, "Attention: split scratch too small"};
    if (nt > p.n_tok - t0) nt = p.n_tok - t0;
    if (nt > 65535) nt = 65535;
    cudaError_t e = cudaErrorInvalidValue;
    if constexpr (F == GgmlType::kF16) {
      e = LaunchF16(p, t0, nt, n_chunks, s);
    } else {
      switch (hd / 32) {
        case 1: e = LaunchPartialHg<F, 1>(p, t0, nt, n_chunks, s); break;
        case 2: e = LaunchPartialHg<F, 2>(p, t0, nt, n_chunks, s); break;
        case 3: e = LaunchPartialHg<F, 3>(p, t0, nt, n_chunks, s); break;
        case 4: e = LaunchPartialHg<F, 4>(p, t0, nt, n_chunks, s); break;
        case 5: e = LaunchPartialHg<F, 5>(p, t0, nt, n_chunks, s); break;
        case 6: e = LaunchPartialHg<F, 6>(p, t0, nt, n_chunks, s); break;
        case 7: e = LaunchPartialHg<F, 7>(p, t0, nt, n_chunks, s); break;
        case 8: e = LaunchPartialHg<F, 8>(p, t0, nt, n_chunks, s); break;
        default: break;
      }
    }
    if (e != cudaSuccess) return {e, "AttentionPartialKernel<<<>>>"};
    AttentionMergeKernel<<<dim3(static_cast<unsigned>(p.n_head), static_cast<unsigned>(nt)),
                           hv < 128 ? hv : 128, 0, s>>>(p, t0, n_chunks);
    e = cudaGetLastError();
    if (e != cudaSuccess) return {e, "AttentionMergeKernel<<<>>>"};
    t0 += nt;
  }
  return {};
}

}  // namespace

bool KvTypeSupported(GgmlType type) {
  return type == GgmlType::kF16 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
}

CallResult KvWrite(const PagedKv& kv, const float* k, const float* v, int64_t n_tok,
                   int64_t pos0, int64_t kd, int64_t vd, void* stream) {
  if (n_tok <= 0) return {};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (kv.type) {
    case GgmlType::kF16: return LaunchKvWrite<GgmlType::kF16>(kv, k, v, n_tok, pos0, kd, vd, s);
    case GgmlType::kQ8_0: return LaunchKvWrite<GgmlType::kQ8_0>(kv, k, v, n_tok, pos0, kd, vd, s);
    case GgmlType::kQ4_0: return LaunchKvWrite<GgmlType::kQ4_0>(kv, k, v, n_tok, pos0, kd, vd, s);
    default: return {cudaErrorInvalidValue, "KvWrite: KV type"};
  }
}

CallResult Attention(const AttentionParams& p, void* stream) {
  if (p.n_tok <= 0) return {};
  if (!AttentionShapeSupported(p)) {
    return {cudaErrorInvalidValue, "Attention: unsupported head shape"};
  }
  if (p.split_scratch == nullptr) return {cudaErrorInvalidValue, "Attention: no split scratch"};
  if (p.window < 0) return {cudaErrorInvalidValue, "Attention: negative window"};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.kv.type) {
    case GgmlType::kF16: return LaunchAttention<GgmlType::kF16>(p, s);
    case GgmlType::kQ8_0: return LaunchAttention<GgmlType::kQ8_0>(p, s);
    case GgmlType::kQ4_0: return LaunchAttention<GgmlType::kQ4_0>(p, s);
    default: return {cudaErrorInvalidValue, "Attention: KV type"};
  }
}

}  // namespace moesplit::cuda::raw
