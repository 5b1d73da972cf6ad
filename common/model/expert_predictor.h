// Prefetch predictor for the hot-expert cache: layer l+1's routing guessed
// from layer l's FFN-normed hidden state h_l (the `hidden` of layer l's
// ExpertCall), by applying layer l+1's router to it:
//   logits = W_router(l+1) . h_l      (quant::MatMul, as the forward pass)
//   ids    = top-k of softmax(logits) (ties -> lower id), k = n_expert_used
// The residual stream changes little from one layer to the next, so the
// guess is right often enough to start copying experts early (the hit rate
// is measured by ExpertCache::Prefetch's counters and expert_cache_test).
//
// Thread-safe: reentrant (the Model is immutable).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/model/model.h"

namespace moesplit::model {

// *ids receives n_tokens x n_expert_used expert ids of layer `layer` + 1,
// token-major, in descending router probability. InvalidArgument when
// `layer` + 1 is not a layer of the model, n_tokens < 0, or hidden is null
// with n_tokens > 0. `hidden` holds n_tokens x n_embd floats. `pool` may be
// nullptr.
absl::Status PredictNextLayerExperts(const Model& model, int layer, const float* hidden,
                                     int64_t n_tokens, ThreadPool* pool,
                                     std::vector<int32_t>* ids);

}  // namespace moesplit::model
