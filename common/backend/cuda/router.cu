// MoE routers: softmax over the expert logits, then top-k with ties -> lower
// id and optional renormalisation; or (gpt-oss) top-k, then the softmax of
// the k; or (deepseek2) sigmoid scores, a selection bias and expert groups. One thread per token: n_expert and k are
// small, and selection by repeated argmax keeps the order rule obvious.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/router_row.h"

namespace moesplit::cuda::raw {
namespace {

__global__ void SelectExpertsKernel(float* logits, int64_t rows, int n_expert, int k,
                                    bool normalize, int32_t* ids, float* weights) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  codec::SelectExpertsRow(logits + r * n_expert, n_expert, k, normalize, ids + r * k,
                          weights + r * k);
}

__global__ void SelectExpertsTopKSoftmaxKernel(const float* logits, int64_t rows, int n_expert,
                                               int k, int32_t* ids, float* weights) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  codec::SelectExpertsTopKSoftmaxRow(logits + r * n_expert, n_expert, k, ids + r * k,
                                     weights + r * k);
}

__global__ void SelectExpertsGroupedKernel(GroupedRouter r, float* logits, int64_t rows,
                                           int32_t* ids, float* weights) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  codec::SelectExpertsGroupedRow(r, logits + i * r.n_expert, ids + i * r.k, weights + i * r.k);
}

}  // namespace

CallResult SelectExpertsGrouped(const GroupedRouter& r, float* logits, int64_t rows,
                                int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (const char* bad = codec::CheckGroupedRouter(r)) return {cudaErrorInvalidValue, bad};
  const int threads = 64;
  const unsigned blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  SelectExpertsGroupedKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      r, logits, rows, ids, weights);
  return {cudaGetLastError(), "SelectExpertsGroupedKernel<<<>>>"};
}

CallResult SelectExpertsTopKSoftmax(const float* logits, int64_t rows, int n_expert, int k,
                                    int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (k < 1 || k > n_expert || n_expert > 1024) {
    return {cudaErrorInvalidValue, "SelectExpertsTopKSoftmax: k / n_expert out of range"};
  }
  const int threads = 64;
  const unsigned blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  SelectExpertsTopKSoftmaxKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, rows, n_expert, k, ids, weights);
  return {cudaGetLastError(), "SelectExpertsTopKSoftmaxKernel<<<>>>"};
}

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
