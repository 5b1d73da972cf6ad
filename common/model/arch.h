// Architecture descriptions: what a GGUF model of a given `general.architecture`
// contains and how its hyper-parameters are read, as data.
//
// An ArchDescription lists
//   1. the metadata key prefix ("qwen3moe" -> "qwen3moe.embedding_length"),
//   2. the global tensors (embeddings, output norm, output head) and the
//      per-layer tensors, each with its GGUF name, its role (dense / router /
//      shared expert / routed expert / embeddings / output / norm), its shape
//      in terms of hyper-parameters (ggml order, ne[0] innermost) and whether
//      it is required,
//   3. the gating (softmax over all experts, top-k; whether the selected
//      weights are renormalised to sum 1 by default — the metadata key
//      `{prefix}.expert_weights_norm` overrides it),
//   4. the RoPE type (NEOX: rotate pairs (i, i + n_rot/2)).
// The forward pass is written against roles and the presence of optional
// tensors, so adding an architecture of the same family (attention + MoE FFN)
// means adding one description to arch.cc.
//
// Hyper-parameters (all under the prefix):
//   embedding_length, block_count, context_length, attention.head_count,
//   attention.head_count_kv (default head_count), attention.key_length /
//   attention.value_length (default embedding_length / head_count),
//   attention.layer_norm_rms_epsilon, rope.freq_base (default 10000),
//   rope.dimension_count (default key_length), rope.scaling.type
//   ("none" | "linear" | "yarn"; default none, or linear when a factor is
//   given), rope.scaling.factor (freq_scale = 1/factor),
//   rope.scaling.original_context_length (default context_length),
//   rope.scaling.yarn_ext_factor / yarn_beta_fast / yarn_beta_slow /
//   attn_factor (ggml defaults), expert_count, expert_used_count,
//   expert_feed_forward_length (default feed_forward_length/expert_used_count),
//   expert_shared_feed_forward_length (default feed_forward_length),
//   feed_forward_length (optional), expert_weights_norm (optional).
// Integer keys may also be arrays with one equal value per layer.
//
// Thread-safe: descriptions are immutable; parsing functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf.h"

namespace moesplit::model {

enum class TensorRole {
  kEmbeddings,
  kOutput,
  kNorm,           // RMSNorm weights (attention, FFN, output, QK-norm)
  kDense,          // attention projections and their biases
  kRouter,         // ffn_gate_inp
  kSharedExpert,   // shared expert FFN and its sigmoid gate
  kRoutedExpert,   // 3-D expert tensors
};
std::string_view TensorRoleName(TensorRole role);
inline constexpr int kTensorRoleCount = 7;

// Every tensor the forward pass knows about. Global ones first.
enum class TensorId : int {
  kTokenEmbd = 0,
  kOutputNorm,
  kOutput,
  // per layer:
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,
  kAttnKNorm,
  kFfnNorm,
  kRouter,
  kExpGate,
  kExpUp,
  kExpDown,
  kShexpGateInp,
  kShexpGate,
  kShexpUp,
  kShexpDown,
  kCount,
};
inline constexpr int kTensorIdCount = static_cast<int>(TensorId::kCount);
inline constexpr int kFirstLayerTensor = static_cast<int>(TensorId::kAttnNorm);

// Symbolic dimensions resolved against HyperParams.
enum class Dim {
  kOne,
  kEmbd,       // n_embd
  kQ,          // n_head * head_dim_k
  kK,          // n_head_kv * head_dim_k
  kV,          // n_head_kv * head_dim_v
  kAttnOut,    // n_head * head_dim_v
  kHeadK,      // head_dim_k
  kExpert,     // n_expert
  kFfExp,      // n_ff_exp
  kFfShexp,    // n_ff_shexp
  kVocab,      // n_vocab (taken from token_embd)
};

struct TensorSpec {
  TensorId id;
  // Global: the full name ("token_embd.weight"). Per layer: the name after
  // "blk.<i>." ("attn_q.weight").
  std::string_view name;
  TensorRole role;
  int n_dims;                 // 1..3
  std::array<Dim, 3> shape;   // ggml order; entries past n_dims unused
  bool required;
};

enum class Gating { kSoftmax };
enum class RopeType { kNeox };

struct ArchDescription {
  std::string_view name;        // general.architecture
  std::string_view key_prefix;  // metadata prefix
  Gating gating;
  bool default_norm_topk;       // renormalise selected expert weights
  RopeType rope_type;
  // The shared expert output is scaled by sigmoid(ffn_gate_inp_shexp . h)
  // when that tensor is present.
  std::vector<TensorSpec> tensors;  // global then per layer
};

// The description of `arch`, or nullptr.
const ArchDescription* FindArch(std::string_view arch);
// Names of all described architectures ("qwen2moe, qwen3moe").
std::string SupportedArchNames();

enum class RopeScaling { kNone, kLinear, kYarn };
std::string_view RopeScalingName(RopeScaling s);

struct RopeParams {
  RopeType type = RopeType::kNeox;
  int64_t n_rot = 0;          // rotated dimensions per head (even)
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float freq_scale = 1.0f;    // 1 / rope.scaling.factor
  int64_t n_ctx_orig = 0;     // YaRN's original context
  float ext_factor = 0.0f;    // YaRN extrapolation mix (1 for yarn, else 0)
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

struct HyperParams {
  std::string arch;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t n_vocab = 0;  // from the token_embd tensor (0 until the model sets it)
  float rms_eps = 1e-6f;
  RopeParams rope;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff = 0;        // feed_forward_length, 0 when absent
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // 0 when neither key nor fallback exists
  bool norm_topk = false;  // renormalise the selected expert weights
};

// Reads and checks the hyper-parameters of `arch` from `file`'s metadata.
// InvalidArgument naming the key for a missing required key, a value of the
// wrong type, or an inconsistent value (zero sizes, head_count not a multiple
// of head_count_kv, expert_used_count > expert_count, odd n_rot, ...).
absl::StatusOr<HyperParams> ParseHyperParams(const GgufFile& file,
                                             const ArchDescription& arch);

// The number of elements a symbolic dimension stands for.
int64_t ResolveDim(const HyperParams& hp, Dim dim);

// "blk.3.attn_q.weight" for a per-layer spec, the name itself for a global.
std::string TensorName(const TensorSpec& spec, int layer);
bool IsLayerTensor(TensorId id);

}  // namespace moesplit::model
