// The MoE router's arithmetic for one row of expert logits, written once for
// the kernel (router.cu, one thread per row) and the host emulation
// (raw_emulated.cc): softmax (max, exp, sum in double, scale by the
// reciprocal), then k passes that each pick the best (value, -id) strictly
// below the previous pick (ties -> lower id), then the optional
// renormalisation; gpt-oss's top-k-then-softmax; and deepseek2's sigmoid
// scores with a selection bias and expert groups. Thread-safe: pure
// functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/backend/cuda/internal/block_codec.h"  // MS_HD
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::codec {

// The k largest of value(0..n) in k passes, each the best (value, -id)
// strictly below the previous pick (ties -> lower id): ids and their values.
template <typename Value>
MS_HD void TopKBy(const Value& value, int n, int k, int32_t* ids, float* values) {
  float prev_v = INFINITY;
  int prev_id = -1;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    float best_v = -INFINITY;
    for (int e = 0; e < n; ++e) {
      const float v = value(e);
      const bool below = v < prev_v || (v == prev_v && e > prev_id);
      if (below && (best < 0 || v > best_v)) {
        best = e;
        best_v = v;
      }
    }
    ids[i] = best;
    values[i] = best_v;
    prev_v = best_v;
    prev_id = best;
  }
}

struct ArrayValue {
  const float* v;
  MS_HD float operator()(int e) const { return v[e]; }
};

MS_HD void TopKRow(const float* v, int n, int k, int32_t* ids, float* values) {
  TopKBy(ArrayValue{v}, n, k, ids, values);
}

// The softmax of n values in place: max, exp, sum in double, scale by the
// reciprocal.
MS_HD void SoftmaxRow(float* p, int n) {
  float max = -INFINITY;
  for (int e = 0; e < n; ++e) max = fmaxf(max, p[e]);
  double sum = 0.0;
  for (int e = 0; e < n; ++e) {
    p[e] = expf(p[e] - max);
    sum += p[e];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = 0; e < n; ++e) p[e] *= inv;
}

// p: n_expert logits, overwritten by the probabilities; ids / weights: k
// entries. REQUIRES: 1 <= k <= n_expert.
MS_HD void SelectExpertsRow(float* p, int n_expert, int k, bool normalize, int32_t* ids,
                            float* weights) {
  SoftmaxRow(p, n_expert);
  TopKRow(p, n_expert, k, ids, weights);
  float wsum = 0.0f;
  for (int i = 0; i < k; ++i) wsum += weights[i];
  if (normalize) {
    for (int i = 0; i < k; ++i) weights[i] /= wsum;
  }
}

inline constexpr int kMaxGroups = raw::kMaxExpertGroups;

// Why raw::SelectExpertsGrouped refuses `r` (its message), or null.
inline const char* CheckGroupedRouter(const raw::GroupedRouter& r) {
  if (r.k < 1 || r.k > r.n_expert || r.n_expert > 1024) {
    return "SelectExpertsGrouped: k / n_expert out of range";
  }
  if (r.n_groups < 1 || r.n_groups > kMaxGroups || r.n_expert % r.n_groups != 0 ||
      r.n_group_used < 1 || r.n_group_used > r.n_groups) {
    return "SelectExpertsGrouped: expert groups out of range";
  }
  return nullptr;
}

// Selection value of expert e: score + bias, -inf outside the chosen groups
// (used == null: every group).
struct SelectionValue {
  const float* p;
  const float* bias;
  const bool* used;
  int per;
  MS_HD float operator()(int e) const {
    if (used != nullptr && !used[e / per]) return -INFINITY;
    return bias != nullptr ? p[e] + bias[e] : p[e];
  }
};

// deepseek2's router for one row (raw::SelectExpertsGrouped; the CPU's
// model::internal::SelectExpertsGeneral): p holds the logits and gets the
// scores. REQUIRES: CheckGroupedRouter(r) == null.
MS_HD void SelectExpertsGroupedRow(const raw::GroupedRouter& r, float* p, int32_t* ids,
                                   float* weights) {
  const int n = r.n_expert;
  if (r.sigmoid) {
    for (int e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + expf(-p[e]));
  } else {
    SoftmaxRow(p, n);
  }
  bool used[kMaxGroups];
  const int per = n / r.n_groups;
  SelectionValue sel{p, r.bias, nullptr, per};
  if (r.n_groups > 1) {
    // A group's score: its two best selection values, summed in double.
    float score[kMaxGroups];
    for (int g = 0; g < r.n_groups; ++g) {
      const float* bg = r.bias != nullptr ? r.bias + g * per : nullptr;
      int32_t top_ids[2];
      float top[2];
      TopKBy(SelectionValue{p + g * per, bg, nullptr, per}, per, per < 2 ? per : 2, top_ids, top);
      score[g] = per < 2 ? top[0]
                         : static_cast<float>(static_cast<double>(top[0]) +
                                              static_cast<double>(top[1]));
      used[g] = false;
    }
    int32_t best[kMaxGroups];
    float best_v[kMaxGroups];
    TopKRow(score, r.n_groups, r.n_group_used, best, best_v);
    for (int i = 0; i < r.n_group_used; ++i) used[best[i]] = true;
    sel.used = used;
  }
  TopKBy(sel, n, r.k, ids, weights);
  for (int i = 0; i < r.k; ++i) weights[i] = p[ids[i]];
  if (r.normalize) {
    double sum = 0.0;
    for (int i = 0; i < r.k; ++i) sum += weights[i];
    const float s = static_cast<float>(sum);
    for (int i = 0; i < r.k; ++i) weights[i] /= s;
  }
  if (r.scale != 0.0f && r.scale != 1.0f) {
    for (int i = 0; i < r.k; ++i) weights[i] *= r.scale;
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
