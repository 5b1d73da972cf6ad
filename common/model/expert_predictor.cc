#include "common/model/expert_predictor.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/model/internal/ops.h"

namespace moesplit::model {

absl::Status PredictNextLayerExperts(const Model& model, int layer, const float* hidden,
                                     int64_t n_tokens, ThreadPool* pool,
                                     std::vector<int32_t>* ids) {
  if (layer < 0 || layer + 1 >= model.n_layer()) {
    return absl::InvalidArgumentError(absl::StrCat("predictor: layer ", layer,
                                                   " has no next layer (model has ",
                                                   model.n_layer(), ")"));
  }
  if (n_tokens < 0 || (n_tokens > 0 && hidden == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("predictor: bad batch of ", n_tokens, " tokens"));
  }
  const HyperParams& hp = model.hparams();
  const int n_expert = static_cast<int>(hp.n_expert);
  const int k = static_cast<int>(hp.n_expert_used);
  std::vector<float> logits(n_tokens * n_expert);
  RETURN_IF_ERROR(quant::MatMul(model.layer(layer + 1).router, hidden, n_tokens,
                                logits.data(), pool));
  ids->resize(n_tokens * k);
  std::vector<float> weights(k);
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::SelectExperts(logits.data() + t * n_expert, n_expert, k, hp.norm_topk,
                            ids->data() + t * k, weights.data());
  }
  return absl::OkStatus();
}

}  // namespace moesplit::model
