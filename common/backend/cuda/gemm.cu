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

// One thread per rounding unit (a value for F16/BF16, a block of 32 or 256).
__global__ void RoundActivationsKernel(ActRounding r, int unit, const float* x, int64_t units,
                                       float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    codec::RoundActivations(r, x + i * unit, out + i * unit);
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
  const int threads = unit == 1 ? 256 : 64;
  int64_t blocks = (units + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  RoundActivationsKernel<<<static_cast<unsigned>(blocks), threads, 0,
                           static_cast<cudaStream_t>(stream)>>>(r, unit, x, units, out);
  return {cudaGetLastError(), "RoundActivationsKernel<<<>>>"};
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
