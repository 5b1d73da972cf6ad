// Dequantise-rows (embedding get_rows) and the in-kernel-dequantising matrix
// product of decode and prefill, for every format of block_codec.h.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/dispatch.cuh"

namespace moesplit::cuda::raw {
namespace {

using codec::DecodeRowElement;

template <GgmlType F>
__global__ void DequantRowsKernel(const uint8_t* w, uint64_t row_bytes, int64_t n_cols,
                                  const int32_t* row_ids, int64_t first_row, float* out) {
  const int64_t i = blockIdx.y;
  const int64_t row = row_ids != nullptr ? row_ids[i] : first_row + i;
  const uint8_t* src = w + row * row_bytes;
  float* dst = out + i * n_cols;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < n_cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[c] = DecodeRowElement<F>(src, c);
  }
}

// wpr warps per row (1, 2, 4 or 8; a function of the matrix shape only,
// WarpsPerRow): lane l of the row's warp s sums elements s * 32 + l, then
// every 32 * wpr, for every token; each warp reduces its lanes, then the
// row's warps are added in order. A block of 8 warps holds 8 / wpr rows.
constexpr int kMatVecWarps = 8;

int WarpsPerRow(int64_t n_rows, int64_t n_cols) {
  // More warps per row while the grid has fewer than 8192 warps and every
  // lane keeps at least two elements per token.
  int wpr = 1;
  while (wpr < kMatVecWarps && n_rows * wpr < 8192 && n_cols >= 64 * wpr * 2) wpr *= 2;
  return wpr;
}

// Where a launch's tokens and groups lie: token t's x row at x + t * x_tok,
// its y row at y + t * y_tok; group z (blockIdx.z) reads the matrix at
// w + z * group_bytes and shifts x by z * x_group, y by z * y_group.
// MatVec: x_tok = n_cols, y_tok = n_rows, one group.
struct MatVecLayout {
  int64_t x_tok = 0, y_tok = 0;
  uint64_t group_bytes = 0;
  int64_t x_group = 0, y_group = 0;
  unsigned groups = 1;
};

// Block (i, g, z) computes its rows of group z for tokens g * NT .. g * NT +
// NT - 1: the arithmetic of one (row, token) does not depend on NT, g or z,
// so a token's products are the same in any batch (prefill = decode, bit
// for bit).
template <GgmlType F, int NT>
__global__ void MatVecKernel(const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                             int64_t n_cols, const float* x, float* y, int wpr, MatVecLayout L) {
  w += blockIdx.z * L.group_bytes;
  x += static_cast<int64_t>(blockIdx.y) * NT * L.x_tok + blockIdx.z * L.x_group;
  y += static_cast<int64_t>(blockIdx.y) * NT * L.y_tok + blockIdx.z * L.y_group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = warp % wpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kMatVecWarps / wpr) + warp / wpr;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  if (row < n_rows) {
    const uint8_t* src = w + row * row_bytes;
    const int stride = 32 * wpr;
#pragma unroll 4
    for (int64_t c = sub * 32 + lane; c < n_cols; c += stride) {
      const float v = DecodeRowElement<F>(src, c);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] += v * x[t * L.x_tok + c];
    }
  }
  __shared__ float part[kMatVecWarps][NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float s = acc[t];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
    if (wpr == 1) {
      if (lane == 0 && row < n_rows) y[t * L.y_tok + row] = s;
    } else if (lane == 0) {
      part[warp][t] = s;
    }
  }
  if (wpr == 1) return;  // uniform across the block
  __syncthreads();
  if (sub == 0 && lane < NT && row < n_rows) {
    float s = part[warp][lane];
    for (int i = 1; i < wpr; ++i) s += part[warp + i][lane];
    y[lane * L.y_tok + row] = s;
  }
}

template <GgmlType F, int NT>
void LaunchMatVec(const DeviceMatrix& w, const float* x, float* y, const MatVecLayout& L,
                  cudaStream_t s, unsigned token_groups = 1) {
  const int wpr = WarpsPerRow(w.n_rows, w.n_cols);
  const int rows_per_block = kMatVecWarps / wpr;
  const unsigned blocks = static_cast<unsigned>((w.n_rows + rows_per_block - 1) / rows_per_block);
  MatVecKernel<F, NT><<<dim3(blocks, token_groups, L.groups), kMatVecWarps * 32, 0, s>>>(
      static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_rows, w.n_cols, x, y, wpr, L);
}

// Full groups of kMaxMatVecTokens in one launch, then the rest.
template <GgmlType F>
void LaunchMatVecTokens(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                        const MatVecLayout& L, cudaStream_t s) {
  constexpr int64_t G = kMaxMatVecTokens;
  if (n_tok >= G) {
    const int64_t full = n_tok / G;
    LaunchMatVec<F, G>(w, x, y, L, s, static_cast<unsigned>(full));
    x += full * G * L.x_tok;
    y += full * G * L.y_tok;
    n_tok -= full * G;
    if (n_tok == 0) return;
  }
  switch (n_tok) {
    case 1: LaunchMatVec<F, 1>(w, x, y, L, s); break;
    case 2: LaunchMatVec<F, 2>(w, x, y, L, s); break;
    case 3: LaunchMatVec<F, 3>(w, x, y, L, s); break;
    case 4: LaunchMatVec<F, 4>(w, x, y, L, s); break;
    case 5: LaunchMatVec<F, 5>(w, x, y, L, s); break;
    case 6: LaunchMatVec<F, 6>(w, x, y, L, s); break;
    case 7: LaunchMatVec<F, 7>(w, x, y, L, s); break;
    default: LaunchMatVec<F, 8>(w, x, y, L, s); break;
  }
}

bool DispatchDequant(const DeviceMatrix& w, const int32_t* row_ids, int64_t first_row,
                     int64_t n_out, float* out, cudaStream_t s) {
  const unsigned gx = static_cast<unsigned>(w.n_cols < 256 * 8 ? (w.n_cols + 255) / 256 : 8);
  const dim3 grid(gx, static_cast<unsigned>(n_out));
  MS_SWITCH_FORMAT(w.type, F,
                   DequantRowsKernel<F><<<grid, 256, 0, s>>>(
                       static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_cols, row_ids,
                       first_row, out))
}

bool DispatchMatVec(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                    const MatVecLayout& L, cudaStream_t s) {
  MS_SWITCH_FORMAT(w.type, F, LaunchMatVecTokens<F>(w, x, n_tok, y, L, s))
}

bool Supported(GgmlType type) { MS_SWITCH_FORMAT(type, F, (void)F) }

}  // namespace

bool DeviceSupports(GgmlType type) { return Supported(type); }

CallResult DequantRows(const DeviceMatrix& w, const int32_t* row_ids, int64_t first_row,
                       int64_t n_out, float* out, void* stream) {
  if (n_out <= 0 || w.n_cols <= 0) return {};
  // The grid's y dimension holds at most 65535 rows per launch.
  constexpr int64_t kMaxRows = 65535;
  for (int64_t done = 0; done < n_out; done += kMaxRows) {
    const int64_t n = n_out - done < kMaxRows ? n_out - done : kMaxRows;
    if (!DispatchDequant(w, row_ids != nullptr ? row_ids + done : nullptr, first_row + done, n,
                         out + done * w.n_cols, static_cast<cudaStream_t>(stream))) {
      return {cudaErrorInvalidValue, "DequantRows: unsupported format"};
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return {e, "DequantRowsKernel<<<>>>"};
  }
  return {};
}

CallResult MatVec(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  void* stream) {
  if (n_tok < 1 || n_tok / kMaxMatVecTokens > 65535) {
    return {cudaErrorInvalidValue, "MatVec: n_tok"};
  }
  if (w.n_rows == 0) return {};
  MatVecLayout L;
  L.x_tok = w.n_cols;
  L.y_tok = w.n_rows;
  if (!DispatchMatVec(w, x, n_tok, y, L, static_cast<cudaStream_t>(stream))) {
    return {cudaErrorInvalidValue, "MatVec: unsupported format"};
  }
  return {cudaGetLastError(), "MatVecKernel<<<>>>"};
}

CallResult GroupedMatVec(const GroupedMatVecParams& p, void* stream) {
  if (p.n_tok < 1 || p.n_tok / kMaxMatVecTokens > 65535 || p.n_groups < 1 ||
      p.n_groups > 65535) {
    return {cudaErrorInvalidValue, "GroupedMatVec: n_tok / n_groups"};
  }
  if (p.w.n_rows == 0) return {};
  MatVecLayout L;
  L.x_tok = p.x_tok;
  L.y_tok = p.y_tok;
  L.group_bytes = p.group_bytes;
  L.x_group = p.x_group;
  L.y_group = p.y_group;
  L.groups = static_cast<unsigned>(p.n_groups);
  if (!DispatchMatVec(p.w, p.x, p.n_tok, p.y, L, static_cast<cudaStream_t>(stream))) {
    return {cudaErrorInvalidValue, "GroupedMatVec: unsupported format"};
  }
  return {cudaGetLastError(), "MatVecKernel<<<>>>"};
}

}  // namespace moesplit::cuda::raw
