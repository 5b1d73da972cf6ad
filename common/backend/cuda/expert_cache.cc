#include "common/backend/cuda/expert_cache.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::cuda {

uint64_t GpuExpertCache::ExpertBytes(const model::Model& model, int layer) {
  const model::LayerWeights& L = model.layer(layer);
  return L.gate_exps.expert_bytes + L.up_exps.expert_bytes + L.down_exps.expert_bytes;
}

int64_t GpuExpertCache::n_resident(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(slot_.size())) return 0;
  int64_t n = 0;
  for (int32_t s : slot_[layer]) n += s >= 0;
  return n;
}

absl::StatusOr<std::unique_ptr<GpuExpertCache>> GpuExpertCache::Create(
    backend::Device* device, const model::Model& model, absl::Span<const ExpertKey> resident) {
  std::unique_ptr<GpuExpertCache> c(new GpuExpertCache());
  const int64_t n_expert = model.hparams().n_expert;
  c->slot_.assign(model.n_layer(), std::vector<int32_t>(n_expert, -1));
  c->n_ff_ = model.hparams().n_ff_exp;
  for (const ExpertKey& k : resident) {
    if (k.layer < 0 || k.layer >= model.n_layer() || k.expert < 0 || k.expert >= n_expert) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert (", k.layer, ", ", k.expert, ") is not in the model"));
    }
    if (c->slot_[k.layer][k.expert] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert (", k.layer, ", ", k.expert, ") listed twice"));
    }
    c->slot_[k.layer][k.expert] = static_cast<int32_t>(c->experts_.size());
    c->experts_.emplace_back();
  }
  ASSIGN_OR_RETURN(auto stream, device->CreateStream());
  for (const ExpertKey& k : resident) {
    const model::LayerWeights& L = model.layer(k.layer);
    Weights& w = c->experts_[c->slot_[k.layer][k.expert]];
    const std::pair<const model::ExpertTensorView*, raw::DeviceMatrix*> parts[3] = {
        {&L.gate_exps, &w.gate}, {&L.up_exps, &w.up}, {&L.down_exps, &w.down}};
    for (const auto& [view, out] : parts) {
      const quant::WeightView e = view->Expert(k.expert);
      if (!raw::DeviceSupports(e.type)) {
        return absl::UnimplementedError("expert weights in a format the kernels do not decode");
      }
      ASSIGN_OR_RETURN(auto buf, device->Allocate(view->expert_bytes));
      RETURN_IF_ERROR(stream->CopyToDevice(*buf, 0, e.data, view->expert_bytes));
      *out = {e.type, buf->data(), e.n_rows, e.n_cols, e.row_bytes};
      c->bytes_ += view->expert_bytes;
      c->buffers_.push_back(std::move(buf));
    }
  }
  RETURN_IF_ERROR(stream->Synchronize());
  return c;
}

}  // namespace moesplit::cuda
