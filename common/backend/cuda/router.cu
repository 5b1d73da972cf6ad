// MoE router: softmax over the expert logits, then top-k with ties -> lower
// id and optional renormalisation. One thread per token: n_expert and k are
// small, and selection by repeated argmax keeps the order rule obvious.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

__global__ void SelectExpertsKernel(float* logits, int64_t rows, int n_expert, int k,
                                    bool normalize, int32_t* ids, float* weights) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float* p = logits + r * n_expert;
  float max = -INFINITY;
  for (int e = 0; e < n_expert; ++e) max = fmaxf(max, p[e]);
  double sum = 0.0;
  for (int e = 0; e < n_expert; ++e) {
    p[e] = expf(p[e] - max);
    sum += p[e];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = 0; e < n_expert; ++e) p[e] *= inv;
  // k passes: the best (value, -id) strictly below the previous pick.
  float prev_v = INFINITY;
  int prev_id = -1;
  float wsum = 0.0f;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    float best_v = -INFINITY;
    for (int e = 0; e < n_expert; ++e) {
      const float v = p[e];
      const bool below = v < prev_v || (v == prev_v && e > prev_id);
      if (below && (best < 0 || v > best_v)) {
        best = e;
        best_v = v;
      }
    }
    ids[r * k + i] = best;
    weights[r * k + i] = best_v;
    wsum += best_v;
    prev_v = best_v;
    prev_id = best;
  }
  if (normalize) {
    for (int i = 0; i < k; ++i) weights[r * k + i] /= wsum;
  }
}

}  // namespace

CallResult SelectExperts(float* logits, int64_t rows, int n_expert, int k, bool normalize,
                         int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (k < 1 || k > n_expert || n_expert > 1024) {
    return {cudaErrorInvalidValue, "SelectExperts: k / n_expert out of range"};
  }
  const int threads = 64;
  const unsigned blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  SelectExpertsKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, rows, n_expert, k, normalize, ids, weights);
  return {cudaGetLastError(), "SelectExpertsKernel<<<>>>"};
}

}  // namespace moesplit::cuda::raw
