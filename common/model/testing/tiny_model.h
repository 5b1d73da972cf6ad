// Test support: writes small random-weight GGUF models of a described
// architecture with moesplit::GgufWriter, optionally broken on purpose
// (a tensor's shape changed, a tensor or key dropped, a key overridden).
//
// Weights are uniform in +-1/sqrt(fan_in) (norm weights 1 +- 0.1) from a
// seeded std::mt19937, so a model is reproducible from its options.
// Thread-safe: pure functions (each call writes its own file).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf_writer.h"
#include "common/gguf/types.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"

namespace moesplit::model::testing {

struct TinyModelOptions {
  std::string arch = "qwen3moe";
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 16;
  int64_t n_expert = 4;
  int64_t n_expert_used = 2;
  int64_t n_ff_exp = 32;
  int64_t n_ff_shexp = 64;  // qwen2moe, qwen35moe, qwen3next
  int64_t n_rot = 0;        // rope.dimension_count; 0 = head_dim
  // qwen35moe, qwen3next: the gated DeltaNet layers (ssm.*), every
  // full_attention_interval-th layer full attention; qwen35moe's
  // multi-section RoPE (rope_sections). qwen3next's DeltaNet input is
  // attn_qkv + attn_gate (never the legacy fused ssm_in).
  int64_t ssm_conv_kernel = 4;
  int64_t ssm_n_k_heads = 2;
  int64_t ssm_n_v_heads = 4;
  int64_t ssm_head = 16;
  int64_t full_attention_interval = 2;
  // gpt-oss: attention.sliding_window (the even layers attend this many
  // positions).
  int64_t sliding_window = 4;
  std::vector<int64_t> rope_sections = {2, 2, 4, 0};
  int64_t n_vocab = 40;
  int64_t n_ctx_train = 256;
  float rope_base = 10000.0f;
  GgmlType matrix_type = GgmlType::kF32;  // attention, experts, embeddings, output
  bool tied_output = false;
  uint32_t seed = 1;
  // Breakage for negative tests.
  std::map<std::string, std::vector<int64_t>> shape_overrides;  // tensor -> ne
  std::map<std::string, GgmlType> type_overrides;               // tensor -> type
  std::set<std::string> drop_tensors;
  std::set<std::string> drop_keys;  // full key names
  std::function<void(GgufWriter*)> edit_metadata;  // runs after the defaults
};

// Writes the model to `path`.
absl::Status WriteTinyModel(const TinyModelOptions& o, const std::string& path);

// Writes to a fresh file under the test temp dir and loads it.
absl::StatusOr<std::shared_ptr<const Model>> MakeTinyModel(const TinyModelOptions& o);

// A tiny model, its routed experts in process and the CPU forward over
// them, sharing one pool of `threads`.
struct TinyEngine {
  std::shared_ptr<const Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<InProcessExperts> experts;
  std::unique_ptr<Forward> forward;
};
absl::StatusOr<TinyEngine> MakeTinyEngine(const TinyModelOptions& o, int threads = 2);

// Forwards expert calls to `inner`, except the calls of layer fail_layer
// (-1: none), which fail with Unavailable ("worker gone").
class FlakyExperts : public ExpertBackend {
 public:
  explicit FlakyExperts(ExpertBackend* inner) : inner_(inner) {}
  absl::Status ComputeInto(const ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    if (call.layer == fail_layer) return absl::UnavailableError("worker gone");
    return inner_->ComputeInto(call, partial, worker_ns);
  }
  int fail_layer = -1;

 private:
  ExpertBackend* inner_;
};

}  // namespace moesplit::model::testing
