// Paged KV cache writes and causal GQA attention over it (decode and
// prefill alike: one thread block per (query head, token); its warps split
// the positions with an online softmax each and merge at the end).
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

using codec::DecodeRowElement;
using codec::Format;

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ uint8_t* SlotRow(uint8_t* base, const PagedKv& kv, int64_t pos,
                                            uint64_t row_bytes) {
  const int64_t page = kv.block_table[pos / kv.page_size];
  return base + (page * kv.page_size + pos % kv.page_size) * static_cast<int64_t>(row_bytes);
}

// One thread per stored unit (an element for F16, a 32-block otherwise).
template <GgmlType F>
__global__ void KvWriteKernel(PagedKv kv, uint8_t* base, uint64_t row_bytes, const float* x,
                              int64_t n_tok, int64_t pos0, int64_t dim) {
  constexpr int kElems = Format<F>::kElems, kBytes = Format<F>::kBytes;
  const int64_t units = dim / kElems;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n_tok * units; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / units, u = i % units;
    uint8_t* dst = SlotRow(base, kv, pos0 + t, row_bytes) + u * kBytes;
    const float* src = x + t * dim + u * kElems;
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
  auto blocks = [](int64_t units) {
    const int64_t b = (units + 255) / 256;
    return static_cast<unsigned>(b < 65535 ? b : 65535);
  };
  KvWriteKernel<F><<<blocks(n_tok * kd / kElems), 256, 0, s>>>(kv, kv.k, kv.k_row_bytes, k,
                                                               n_tok, pos0, kd);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return {e, "KvWriteKernel<<<>>>"};
  KvWriteKernel<F><<<blocks(n_tok * vd / kElems), 256, 0, s>>>(kv, kv.v, kv.v_row_bytes, v,
                                                               n_tok, pos0, vd);
  return {cudaGetLastError(), "KvWriteKernel<<<>>>"};
}

template <GgmlType F, int NV>
__global__ void __launch_bounds__(kWarps * 32) AttentionKernel(AttentionParams p) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = NV * 32;
  const int kvh = h / (p.n_head / p.n_head_kv);
  const float* q = p.q + (t * p.n_head + h) * hd;
  float qr[NV], acc[NV];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    qr[j] = q[lane + 32 * j];
    acc[j] = 0.0f;
  }
  const int64_t n_kv = p.pos0 + t + 1;
  const int n_split = gridDim.z;
  const int64_t chunk = (n_kv + n_split - 1) / n_split;
  const int64_t begin = static_cast<int64_t>(blockIdx.z) * chunk;
  const int64_t end = begin + chunk < n_kv ? begin + chunk : n_kv;
  const int64_t col0 = static_cast<int64_t>(kvh) * hd + lane;
  float m = -INFINITY, l = 0.0f;
  for (int64_t pos = begin + warp; pos < end; pos += kWarps) {
    const uint8_t* krow = SlotRow(p.kv.k, p.kv, pos, p.kv.k_row_bytes);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) s += qr[j] * DecodeRowElement<F>(krow, col0 + 32 * j);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
    s *= p.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float ps = expf(s - m_new);
    l = l * corr + ps;
    const uint8_t* vrow = SlotRow(p.kv.v, p.kv, pos, p.kv.v_row_bytes);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      acc[j] = acc[j] * corr + ps * DecodeRowElement<F>(vrow, col0 + 32 * j);
    }
    m = m_new;
  }
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kMaxHeadDim];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < NV; ++j) sm_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float big = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sm_m[w]);
  float total = 0.0f;
  float f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    f[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - big) : 0.0f;
    total += sm_l[w] * f[w];
  }
  if (n_split == 1) {
    float* out = p.out + (t * p.n_head + h) * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w) o += sm_acc[w][e] * f[w];
      out[e] = o / total;
    }
    return;
  }
  // Split-K partial: {max, sum, acc[hd]} relative to this block's max (an
  // empty range leaves sum 0).
  float* part = p.split_scratch + ((t * p.n_head + h) * n_split + blockIdx.z) * (hd + 2);
  if (threadIdx.x == 0) {
    part[0] = big;
    part[1] = total;
  }
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += sm_acc[w][e] * f[w];
    part[2 + e] = o;
  }
}

// Merges the n_split partials of each (head, token).
__global__ void AttentionMergeKernel(const float* scratch, int n_head, int hd, int n_split,
                                     float* out) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const float* part = scratch + (t * n_head + h) * n_split * (hd + 2);
  float big = -INFINITY;
  for (int z = 0; z < n_split; ++z) {
    if (part[z * (hd + 2) + 1] > 0.0f) big = fmaxf(big, part[z * (hd + 2)]);
  }
  float total = 0.0f;
  for (int z = 0; z < n_split; ++z) {
    const float l = part[z * (hd + 2) + 1];
    if (l > 0.0f) total += l * expf(part[z * (hd + 2)] - big);
  }
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float o = 0.0f;
    for (int z = 0; z < n_split; ++z) {
      const float l = part[z * (hd + 2) + 1];
      if (l > 0.0f) o += part[z * (hd + 2) + 2 + e] * expf(part[z * (hd + 2)] - big);
    }
    out[(t * n_head + h) * hd + e] = o / total;
  }
}

// Blocks per (head, token): 1, or for a decode batch over a long context
// enough to give each about kSplitChunk positions (at most kMaxSplits).
int SplitCount(const AttentionParams& p) {
  if (p.split_scratch == nullptr || p.n_tok > kMaxSplitTokens ||
      p.split_scratch_elems < AttentionSplitElems(p.n_head, p.head_dim)) {
    return 1;
  }
  const int64_t n_kv = p.pos0 + p.n_tok;
  const int64_t want = (n_kv + kSplitChunk - 1) / kSplitChunk;
  return static_cast<int>(want < kMaxSplits ? want : kMaxSplits);
}

template <GgmlType F>
CallResult LaunchAttention(const AttentionParams& p, cudaStream_t s) {
  const int n_split = SplitCount(p);
  const dim3 grid(static_cast<unsigned>(p.n_head), static_cast<unsigned>(p.n_tok),
                  static_cast<unsigned>(n_split));
  const int threads = kWarps * 32;
  switch (p.head_dim / 32) {
    case 1: AttentionKernel<F, 1><<<grid, threads, 0, s>>>(p); break;
    case 2: AttentionKernel<F, 2><<<grid, threads, 0, s>>>(p); break;
    case 3: AttentionKernel<F, 3><<<grid, threads, 0, s>>>(p); break;
    case 4: AttentionKernel<F, 4><<<grid, threads, 0, s>>>(p); break;
    case 5: AttentionKernel<F, 5><<<grid, threads, 0, s>>>(p); break;
    case 6: AttentionKernel<F, 6><<<grid, threads, 0, s>>>(p); break;
    case 7: AttentionKernel<F, 7><<<grid, threads, 0, s>>>(p); break;
    case 8: AttentionKernel<F, 8><<<grid, threads, 0, s>>>(p); break;
    default: return {cudaErrorInvalidValue, "Attention: head_dim"};
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || n_split == 1) return {e, "AttentionKernel<<<>>>"};
  AttentionMergeKernel<<<dim3(static_cast<unsigned>(p.n_head), static_cast<unsigned>(p.n_tok)),
                         128, 0, s>>>(p.split_scratch, p.n_head, p.head_dim, n_split, p.out);
  return {cudaGetLastError(), "AttentionMergeKernel<<<>>>"};
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
  if (p.head_dim % 32 != 0 || p.head_dim > kMaxHeadDim || p.head_dim < 32 || p.n_head_kv < 1 ||
      p.n_head % p.n_head_kv != 0) {
    return {cudaErrorInvalidValue, "Attention: unsupported head shape"};
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.kv.type) {
    case GgmlType::kF16: return LaunchAttention<GgmlType::kF16>(p, s);
    case GgmlType::kQ8_0: return LaunchAttention<GgmlType::kQ8_0>(p, s);
    case GgmlType::kQ4_0: return LaunchAttention<GgmlType::kQ4_0>(p, s);
    default: return {cudaErrorInvalidValue, "Attention: KV type"};
  }
}

}  // namespace moesplit::cuda::raw
