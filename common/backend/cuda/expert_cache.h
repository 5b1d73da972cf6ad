// GpuExpertCache: routed experts resident in GPU memory (the hot-expert
// cache's storage and compute side). Which experts are resident is decided
// outside (the frequency-aware policy of the memory planner, or a static
// list); this class uploads their gate/up/down weights in the GGUF formats
// and CudaForward computes the (token, expert) pairs that hit it on the GPU,
// sending only the misses to the ExpertBackend:
//   x[t] += w * W_down . (SiLU(W_gate . h[t]) * (W_up . h[t]))
// for every hit, the same math as ExpertCall's partial.
//
// Errors: InvalidArgument for a key outside the model or a repeated key;
// RESOURCE_EXHAUSTED (nothing kept) when the device's budget or memory
// runs out. Thread-safety: immutable after Create.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend/backend.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/model/model.h"

namespace moesplit::cuda {

struct ExpertKey {
  int layer = 0;
  int expert = 0;
};

class GpuExpertCache {
 public:
  static absl::StatusOr<std::unique_ptr<GpuExpertCache>> Create(
      backend::Device* device, const model::Model& model, absl::Span<const ExpertKey> resident);
  // Device bytes of one expert (gate + up + down) of `layer`.
  static uint64_t ExpertBytes(const model::Model& model, int layer);

  bool Resident(int layer, int expert) const {
    return layer >= 0 && layer < static_cast<int>(slot_.size()) && expert >= 0 &&
           expert < static_cast<int>(slot_[layer].size()) && slot_[layer][expert] >= 0;
  }
  struct Weights {
    raw::DeviceMatrix gate, up, down;
  };
  // REQUIRES: Resident(layer, expert).
  const Weights& weights(int layer, int expert) const {
    return experts_[slot_[layer][expert]];
  }
  int64_t n_resident() const { return static_cast<int64_t>(experts_.size()); }
  int64_t n_resident(int layer) const;
  uint64_t bytes() const { return bytes_; }
  int64_t n_ff() const { return n_ff_; }

 private:
  GpuExpertCache() = default;
  std::vector<std::vector<int32_t>> slot_;  // [layer][expert] -> index into experts_, or -1
  std::vector<Weights> experts_;
  std::vector<std::unique_ptr<backend::Buffer>> buffers_;
  uint64_t bytes_ = 0;
  int64_t n_ff_ = 0;
};

}  // namespace moesplit::cuda
