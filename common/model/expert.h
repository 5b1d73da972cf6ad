// The routed-expert interface: the forward pass hands each MoE layer's
// routed-expert work to an ExpertBackend as one ExpertCall and gets one
// ExpertResult back. The two structs are plain data so that a later backend
// can carry them across a process boundary unchanged.
//
// ExpertCall (one layer, one batch):
//   1. call_id        caller-chosen id, echoed in the result
//   2. layer          0 <= layer < n_layer
//   3. n_tokens       >= 0
//   4. d              the model's n_embd
//   5. hidden         n_tokens x d f32, row-major: the FFN-normed hidden state
//   6. token_offsets  CSR, n_tokens + 1 entries, token_offsets[0] = 0,
//                     non-decreasing; token t uses entries
//                     [token_offsets[t], token_offsets[t+1]) of
//   7. expert_ids     0 <= id < n_expert, and
//   8. weights        finite f32 routing weights (same length as expert_ids)
// ExpertResult:
//   1. call_id        = the call's
//   2. partial        n_tokens x d f32:
//                     partial[t] = sum_k weights[k] * E_{expert_ids[k]}(hidden[t])
//                     over token t's entries k, where
//                     E(h) = W_down . (SiLU(W_gate . h) * (W_up . h)),
//                     summed per token in its entries' order.
//
// InProcessExperts computes the call from the Model's routed-expert tensors:
// tokens are grouped by expert, each expert's gate/up/down products run
// through quant::MatMul (activations converted to the weight's vec_dot_type,
// as llama.cpp does), rows split over the ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/model/model.h"

namespace moesplit::model {

struct ExpertCall {
  uint64_t call_id = 0;
  int32_t layer = 0;
  int32_t n_tokens = 0;
  int32_t d = 0;
  std::vector<float> hidden;            // n_tokens x d (the ffn-normed hidden state)
  std::vector<uint32_t> token_offsets;  // CSR, n_tokens + 1
  std::vector<int32_t> expert_ids;
  std::vector<float> weights;
};

struct ExpertResult {
  uint64_t call_id = 0;
  std::vector<float> partial;  // n_tokens x d, sum_k w_k * expert_k(h)
};

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  // Computes `call` into *result (resized; its previous contents are
  // discarded). InvalidArgument for a call that breaks the contract above;
  // on any error *result is unspecified.
  virtual absl::Status Compute(const ExpertCall& call, ExpertResult* result) = 0;
};

// The gate, up and down tensors of one layer's routed experts.
struct LayerExperts {
  ExpertTensorView gate, up, down;
};

// Routed-expert tensors of a block of layers [layer_begin, layer_end) and
// experts [expert_begin, expert_end): the whole model (views into its
// mapping), or a shard copied into memory the caller owns (an expert-worker).
// Expert e of layer l is gate(l).Expert(e - expert_begin()), and so on.
// Thread-safe: immutable.
class ExpertStore {
 public:
  // Every layer and expert of `model`; shares ownership of it.
  explicit ExpertStore(std::shared_ptr<const Model> model);
  // A shard. `layers[i]` holds layer layer_begin + i with n_expert() ==
  // expert_end - expert_begin experts each; `owner` keeps their memory alive.
  ExpertStore(std::vector<LayerExperts> layers, int n_layer_total, int n_expert_total,
              int layer_begin, int expert_begin, int64_t d, int64_t n_ff,
              std::shared_ptr<const void> owner = nullptr);

  int n_layer() const { return n_layer_total_; }       // the model's
  int64_t n_expert() const { return n_expert_total_; }  // the model's
  int layer_begin() const { return layer_begin_; }
  int layer_end() const { return layer_begin_ + static_cast<int>(layers_.size()); }
  int expert_begin() const { return expert_begin_; }
  int expert_end() const { return expert_end_; }
  bool Owns(int layer, int expert) const {
    return layer >= layer_begin() && layer < layer_end() && expert >= expert_begin_ &&
           expert < expert_end_;
  }
  int64_t d() const { return d_; }
  int64_t n_ff() const { return n_ff_; }
  // REQUIRES: Owns(layer, expert).
  quant::WeightView Gate(int layer, int expert) const { return At(layer).gate.Expert(expert - expert_begin_); }
  quant::WeightView Up(int layer, int expert) const { return At(layer).up.Expert(expert - expert_begin_); }
  quant::WeightView Down(int layer, int expert) const { return At(layer).down.Expert(expert - expert_begin_); }

 private:
  const LayerExperts& At(int layer) const { return layers_[layer - layer_begin_]; }

  std::vector<LayerExperts> layers_;
  int n_layer_total_ = 0;
  int64_t n_expert_total_ = 0;
  int layer_begin_ = 0;
  int expert_begin_ = 0;
  int expert_end_ = 0;
  int64_t d_ = 0;
  int64_t n_ff_ = 0;
  std::shared_ptr<const void> owner_;
};

// Checks `call` against the store's shapes (layer and expert id within the
// store's ranges, sizes, CSR offsets, finite weights). InvalidArgument naming
// the problem.
absl::Status ValidateExpertCall(const ExpertCall& call, const ExpertStore& store);

// Thread-safety: Compute() keeps no state between calls; concurrent calls
// are safe (they serialise on the pool's ParallelFor). `pool` may be nullptr
// (single-threaded) and must outlive this object; the caller must not be
// running inside a ParallelFor of the same pool.
class InProcessExperts final : public ExpertBackend {
 public:
  InProcessExperts(ExpertStore store, ThreadPool* pool)
      : store_(std::move(store)), pool_(pool) {}

  absl::Status Compute(const ExpertCall& call, ExpertResult* result) override;

 private:
  absl::Status RunExpert(const ExpertCall& call, int32_t expert,
                         const std::vector<int32_t>& rows, std::vector<float>* partial) const;

  const ExpertStore store_;
  ThreadPool* const pool_;
};

}  // namespace moesplit::model
