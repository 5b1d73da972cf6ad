// y = x . w^T for every weight format: the activations rounded as the CPU
// reference and llama.cpp round them (the weight type's vec_dot_type,
// block_codec.h), then the in-kernel-dequantising matrix product of
// dequant.cu for decode and prefill alike. One kernel for every batch size
// keeps a token's result independent of the batch it is evaluated in (a
// separate prefill GEMM summed in another order, and the CPU experts' Q8
// rounding of the hidden state turned those last-bit differences into
// visible ones). (Not cuBLAS: libcublasLt's 94 KB of static TLS breaks thread
// creation in libraries that use small thread stacks, such as the civetweb
// server behind the Prometheus exposer, in any process that loads it.)
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

using codec::ActRounding;

// F16 / BF16: one thread per value.
__global__ void RoundValuesKernel(ActRounding r, const float* x, int64_t n, float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    codec::RoundActivations(r, x + i, out + i);
  }
}

// Q8_0 (K = false: 32 values) or Q8_K (K = true: 256 values) blocks, one
// warp per block; lane l holds values l, l + 32, ... The block's amax (Q8_0)
// or first largest-magnitude value (Q8_K) is found by the warp, then every
// value goes through codec::RoundQ8_0 / RoundQ8_K as on the host.
template <bool K>
__global__ void RoundBlocksKernel(const float* x, int64_t n_blocks, float* out) {
  constexpr int E = K ? 8 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (b >= n_blocks) return;  // a whole warp
  const float* xb = x + b * 32 * E;
  float* ob = out + b * 32 * E;
  float v[E];
#pragma unroll
  for (int i = 0; i < E; ++i) v[i] = xb[lane + 32 * i];
  if constexpr (!K) {
    float amax = fabsf(v[0]);
    for (int off = 16; off > 0; off >>= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    }
    ob[lane] = codec::RoundQ8_0(v[0], amax);
  } else {
    // (magnitude, index) of the first largest magnitude, as the host's scan.
    float best = 0.0f, best_v = 0.0f;
    int best_i = 0x7FFFFFFF;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float ax = fabsf(v[i]);
      if (ax > best) {
        best = ax;
        best_v = v[i];
        best_i = lane + 32 * i;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float o = __shfl_xor_sync(0xFFFFFFFFu, best, off);
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, best_v, off);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, best_i, off);
      if (o > best || (o == best && oi < best_i)) {
        best = o;
        best_v = ov;
        best_i = oi;
      }
    }
#pragma unroll
    for (int i = 0; i < E; ++i) ob[lane + 32 * i] = codec::RoundQ8_K(v[i], best_v);
  }
}

}  // namespace

CallResult RoundActivations(GgmlType weight_type, const float* x, int64_t n_tok, int64_t n_cols,
                            float* out, void* stream) {
  const ActRounding r = codec::ActRoundingOf(weight_type);
  const int unit = codec::ActRoundingBlock(r);
  if (n_cols % unit != 0) return {cudaErrorInvalidValue, "RoundActivations: row not whole blocks"};
  const int64_t units = n_tok * n_cols / unit;
  if (units <= 0) return {};
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (unit == 1) {
    int64_t blocks = (units + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    RoundValuesKernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(r, x, units, out);
  } else {
    const unsigned blocks = static_cast<unsigned>((units + 7) / 8);  // 8 warps per block
    if (r == ActRounding::kQ8_K) {
      RoundBlocksKernel<true><<<blocks, 256, 0, s>>>(x, units, out);
    } else {
      RoundBlocksKernel<false><<<blocks, 256, 0, s>>>(x, units, out);
    }
  }
  return {cudaGetLastError(), "RoundActivations<<<>>>"};
}

CallResult MatMul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  const GemmContext& ctx, void* stream) {
  if (n_tok <= 0 || w.n_rows == 0) return {};
  if (ctx.act == nullptr || codec::ActRoundingOf(w.type) == ActRounding::kNone) {
    return MatVec(w, x, n_tok, y, stream);
  }
  int64_t chunk = ctx.act_elems / w.n_cols;
  if (chunk < 1) return {cudaErrorInvalidValue, "MatMul: activation buffer smaller than one row"};
  if (chunk > kMaxMatVecTokens) chunk -= chunk % kMaxMatVecTokens;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t nt = n_tok - t0 < chunk ? n_tok - t0 : chunk;
    CallResult r = RoundActivations(w.type, x + t0 * w.n_cols, nt, w.n_cols, ctx.act, stream);
    if (!r.ok()) return r;
    r = MatVec(w, ctx.act, nt, y + t0 * w.n_rows, stream);
    if (!r.ok()) return r;
  }
  return {};
}

}  // namespace moesplit::cuda::raw
