// The MoE router's arithmetic for one row of expert logits, written once for
// the kernel (router.cu, one thread per row) and the host emulation
// (raw_emulated.cc): softmax (max, exp, sum in double, scale by the
// reciprocal), then k passes that each pick the best (value, -id) strictly
// below the previous pick (ties -> lower id), then the optional
// renormalisation; and gpt-oss's top-k-then-softmax. Thread-safe: pure
// functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/backend/cuda/internal/block_codec.h"  // MS_HD

namespace moesplit::cuda::codec {

// The k largest of v[0..n) in k passes, each the best (value, -id) strictly
// below the previous pick (ties -> lower id): ids and their values.
MS_HD void TopKRow(const float* v, int n, int k, int32_t* ids, float* values) {
  float prev_v = INFINITY;
  int prev_id = -1;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    float best_v = -INFINITY;
    for (int e = 0; e < n; ++e) {
      const bool below = v[e] < prev_v || (v[e] == prev_v && e > prev_id);
      if (below && (best < 0 || v[e] > best_v)) {
        best = e;
        best_v = v[e];
      }
    }
    ids[i] = best;
    values[i] = best_v;
    prev_v = best_v;
    prev_id = best;
  }
}

// p: n_expert logits, overwritten by the probabilities; ids / weights: k
// entries. REQUIRES: 1 <= k <= n_expert.
MS_HD void SelectExpertsRow(float* p, int n_expert, int k, bool normalize, int32_t* ids,
                            float* weights) {
  float max = -INFINITY;
  for (int e = 0; e < n_expert; ++e) max = fmaxf(max, p[e]);
  double sum = 0.0;
  for (int e = 0; e < n_expert; ++e) {
    p[e] = expf(p[e] - max);
    sum += p[e];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = 0; e < n_expert; ++e) p[e] *= inv;
  TopKRow(p, n_expert, k, ids, weights);
  float wsum = 0.0f;
  for (int i = 0; i < k; ++i) wsum += weights[i];
  if (normalize) {
    for (int i = 0; i < k; ++i) weights[i] /= wsum;
  }
}

// gpt-oss's scoring: the k largest logits by the same passes (ties -> lower
// id), then the softmax of those k as the CPU's Softmax over k < 16 values
// (max, exp, sum in double, scale by the reciprocal). `logits` is not
// written. REQUIRES: 1 <= k <= n_expert.
MS_HD void SelectExpertsTopKSoftmaxRow(const float* logits, int n_expert, int k, int32_t* ids,
                                       float* weights) {
  TopKRow(logits, n_expert, k, ids, weights);
  float max = -INFINITY;
  for (int i = 0; i < k; ++i) max = fmaxf(max, weights[i]);
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    weights[i] = expf(weights[i] - max);
    sum += weights[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < k; ++i) weights[i] *= inv;
}

}  // namespace moesplit::cuda::codec
