#include "common/model/expert.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/model/internal/ops.h"

namespace moesplit::model {

ExpertStore::ExpertStore(std::shared_ptr<const Model> model)
    : n_layer_total_(model->n_layer()),
      n_expert_total_(model->hparams().n_expert),
      expert_end_(static_cast<int>(model->hparams().n_expert)),
      d_(model->hparams().n_embd),
      n_ff_(model->hparams().n_ff_exp) {
  for (int l = 0; l < model->n_layer(); ++l) {
    const LayerWeights& lw = model->layer(l);
    layers_.push_back({lw.gate_exps, lw.up_exps, lw.down_exps});
  }
  owner_ = std::move(model);
}

ExpertStore::ExpertStore(std::vector<LayerExperts> layers, int n_layer_total, int n_expert_total,
                         int layer_begin, int expert_begin, int64_t d, int64_t n_ff,
                         std::shared_ptr<const void> owner)
    : layers_(std::move(layers)),
      n_layer_total_(n_layer_total),
      n_expert_total_(n_expert_total),
      layer_begin_(layer_begin),
      expert_begin_(expert_begin),
      expert_end_(expert_begin + (layers_.empty() ? 0 : static_cast<int>(layers_[0].gate.n_expert))),
      d_(d),
      n_ff_(n_ff),
      owner_(std::move(owner)) {}

absl::Status ValidateExpertCall(const ExpertCall& call, const ExpertStore& store) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call ", call.call_id, ": ", parts...));
  };
  if (call.layer < store.layer_begin() || call.layer >= store.layer_end()) {
    return bad("layer ", call.layer, " out of range [", store.layer_begin(), ", ",
               store.layer_end(), ")");
  }
  if (call.d != store.d()) return bad("d = ", call.d, ", the model's is ", store.d());
  if (call.n_tokens < 0) return bad("negative n_tokens ", call.n_tokens);
  const uint64_t n_tokens = static_cast<uint64_t>(call.n_tokens);
  if (call.hidden.size() != n_tokens * static_cast<uint64_t>(call.d)) {
    return bad("hidden has ", call.hidden.size(), " values, expected n_tokens x d = ",
               n_tokens * call.d);
  }
  if (call.token_offsets.size() != n_tokens + 1) {
    return bad("token_offsets has ", call.token_offsets.size(), " entries, expected ",
               n_tokens + 1);
  }
  if (call.token_offsets[0] != 0) return bad("token_offsets[0] = ", call.token_offsets[0]);
  for (uint64_t t = 0; t < n_tokens; ++t) {
    if (call.token_offsets[t + 1] < call.token_offsets[t]) {
      return bad("token_offsets decrease at token ", t);
    }
  }
  const uint64_t n_entries = call.token_offsets[n_tokens];
  if (call.expert_ids.size() != n_entries || call.weights.size() != n_entries) {
    return bad("token_offsets end at ", n_entries, " but there are ",
               call.expert_ids.size(), " expert ids and ", call.weights.size(), " weights");
  }
  for (uint64_t k = 0; k < n_entries; ++k) {
    if (call.expert_ids[k] < store.expert_begin() || call.expert_ids[k] >= store.expert_end()) {
      return bad("expert id ", call.expert_ids[k], " out of range [", store.expert_begin(),
                 ", ", store.expert_end(),
                 ")");
    }
    if (!std::isfinite(call.weights[k])) return bad("weight ", k, " is not finite");
  }
  return absl::OkStatus();
}

absl::Status InProcessExperts::Compute(const ExpertCall& call, ExpertResult* result) {
  RETURN_IF_ERROR(ValidateExpertCall(call, store_));
  const int64_t d = call.d;
  const size_t n_entries = call.expert_ids.size();
  // Entries grouped by expert; outputs kept per entry so that each token sums
  // its experts in its own (top-k) order, independent of the grouping.
  std::vector<std::vector<int32_t>> by_expert(store_.n_expert());
  for (size_t k = 0; k < n_entries; ++k) {
    by_expert[call.expert_ids[k]].push_back(static_cast<int32_t>(k));
  }
  std::vector<float> out(n_entries * d);
  for (int32_t e = 0; e < static_cast<int32_t>(by_expert.size()); ++e) {
    if (by_expert[e].empty()) continue;
    RETURN_IF_ERROR(RunExpert(call, e, by_expert[e], &out));
  }
  result->call_id = call.call_id;
  result->partial.assign(static_cast<size_t>(call.n_tokens) * d, 0.0f);
  for (int32_t t = 0; t < call.n_tokens; ++t) {
    float* dst = result->partial.data() + static_cast<size_t>(t) * d;
    for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
      const float w = call.weights[k];
      const float* src = out.data() + static_cast<size_t>(k) * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += src[i] * w;
    }
  }
  return absl::OkStatus();
}

absl::Status InProcessExperts::RunExpert(const ExpertCall& call, int32_t expert,
                                         const std::vector<int32_t>& entries,
                                         std::vector<float>* out) const {
  const int64_t d = call.d;
  const int64_t ff = store_.n_ff();
  const int64_t n = static_cast<int64_t>(entries.size());
  // Token of each entry: the CSR is sorted, so a binary search per entry.
  std::vector<float> x(n * d);
  for (int64_t r = 0; r < n; ++r) {
    const auto it = std::upper_bound(call.token_offsets.begin(), call.token_offsets.end(),
                                     static_cast<uint32_t>(entries[r]));
    const int64_t t = (it - call.token_offsets.begin()) - 1;
    std::copy_n(call.hidden.data() + t * d, d, x.data() + r * d);
  }
  std::vector<float> gate(n * ff), up(n * ff), y(n * d);
  RETURN_IF_ERROR(quant::MatMul(store_.Gate(call.layer, expert), x.data(), n,
                                gate.data(), pool_));
  RETURN_IF_ERROR(quant::MatMul(store_.Up(call.layer, expert), x.data(), n,
                                up.data(), pool_));
  internal::SwiGlu(gate.data(), up.data(), n, ff, gate.data());
  RETURN_IF_ERROR(quant::MatMul(store_.Down(call.layer, expert), gate.data(), n,
                                y.data(), pool_));
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(y.data() + r * d, d, out->data() + static_cast<size_t>(entries[r]) * d);
  }
  return absl::OkStatus();
}

}  // namespace moesplit::model
