#include "common/model/arch.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/model/internal/str.h"

namespace moesplit::model {
namespace {

using D = Dim;
using R = TensorRole;
using T = TensorId;

// Tensors every attention + MoE-FFN architecture of the family has; the
// per-architecture lists below add or drop the optional ones.
std::vector<TensorSpec> CommonTensors() {
  return {
      {T::kTokenEmbd, "token_embd.weight", R::kEmbeddings, 2, {D::kEmbd, D::kVocab}, true},
      {T::kOutputNorm, "output_norm.weight", R::kNorm, 1, {D::kEmbd}, true},
      // Absent output -> tied to token_embd.
      {T::kOutput, "output.weight", R::kOutput, 2, {D::kEmbd, D::kVocab}, false},
      {T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true},
      {T::kAttnQ, "attn_q.weight", R::kDense, 2, {D::kEmbd, D::kQ}, true},
      {T::kAttnK, "attn_k.weight", R::kDense, 2, {D::kEmbd, D::kK}, true},
      {T::kAttnV, "attn_v.weight", R::kDense, 2, {D::kEmbd, D::kV}, true},
      {T::kAttnOutput, "attn_output.weight", R::kDense, 2, {D::kAttnOut, D::kEmbd}, true},
      {T::kFfnNorm, "ffn_norm.weight", R::kNorm, 1, {D::kEmbd}, true},
      {T::kRouter, "ffn_gate_inp.weight", R::kRouter, 2, {D::kEmbd, D::kExpert}, true},
      {T::kExpGate, "ffn_gate_exps.weight", R::kRoutedExpert, 3,
       {D::kEmbd, D::kFfExp, D::kExpert}, true},
      {T::kExpUp, "ffn_up_exps.weight", R::kRoutedExpert, 3,
       {D::kEmbd, D::kFfExp, D::kExpert}, true},
      {T::kExpDown, "ffn_down_exps.weight", R::kRoutedExpert, 3,
       {D::kFfExp, D::kEmbd, D::kExpert}, true},
  };
}

std::vector<TensorSpec> Qwen3MoeTensors() {
  std::vector<TensorSpec> t = CommonTensors();
  t.push_back({T::kAttnQNorm, "attn_q_norm.weight", R::kNorm, 1, {D::kHeadK}, true});
  t.push_back({T::kAttnKNorm, "attn_k_norm.weight", R::kNorm, 1, {D::kHeadK}, true});
  return t;
}

std::vector<TensorSpec> Qwen2MoeTensors() {
  std::vector<TensorSpec> t = CommonTensors();
  t.push_back({T::kAttnQBias, "attn_q.bias", R::kDense, 1, {D::kQ}, true});
  t.push_back({T::kAttnKBias, "attn_k.bias", R::kDense, 1, {D::kK}, true});
  t.push_back({T::kAttnVBias, "attn_v.bias", R::kDense, 1, {D::kV}, true});
  t.push_back({T::kShexpGateInp, "ffn_gate_inp_shexp.weight", R::kSharedExpert, 1,
               {D::kEmbd}, true});
  t.push_back({T::kShexpGate, "ffn_gate_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true});
  t.push_back({T::kShexpUp, "ffn_up_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true});
  t.push_back({T::kShexpDown, "ffn_down_shexp.weight", R::kSharedExpert, 2,
               {D::kFfShexp, D::kEmbd}, true});
  return t;
}

const std::vector<ArchDescription>& Registry() {
  static const auto* const kArchs = new std::vector<ArchDescription>{
      // llama.cpp: llm_build_qwen3moe, build_moe_ffn(norm_w = true).
      {"qwen3moe", "qwen3moe", Gating::kSoftmax, true, RopeType::kNeox, Qwen3MoeTensors()},
      // llama.cpp: llm_build_qwen2moe, build_moe_ffn(norm_w = false) plus a
      // shared expert scaled by sigmoid(ffn_gate_inp_shexp . h).
      {"qwen2moe", "qwen2moe", Gating::kSoftmax, false, RopeType::kNeox, Qwen2MoeTensors()},
  };
  return *kArchs;
}

// Reads an integer key that may also be a per-layer array of equal values.
// Absent: `def` when given, else InvalidArgument.
absl::StatusOr<int64_t> ReadInt(const GgufFile& f, const std::string& key,
                                std::optional<int64_t> def) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing hyper-parameter '", key, "'"));
  }
  if (v->type() == GgufValueType::kArray) {
    std::vector<int64_t> vals = v->ints();
    for (uint64_t u : v->uints()) vals.push_back(static_cast<int64_t>(u));
    if (vals.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": key '", key, "': empty or non-integer array"));
    }
    for (int64_t x : vals) {
      if (x != vals[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            f.path(), ": key '", key, "': per-layer values differ (unsupported)"));
      }
    }
    return vals[0];
  }
  auto r = v->AsInt();
  if (!r.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": key '", key, "': ", r.status().message()));
  }
  return *r;
}

absl::StatusOr<double> ReadFloat(const GgufFile& f, const std::string& key,
                                 std::optional<double> def) {
  if (f.Find(key) == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing hyper-parameter '", key, "'"));
  }
  auto r = f.GetFloat(key);
  if (!r.ok()) return absl::InvalidArgumentError(r.status().message());
  if (!std::isfinite(*r)) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": key '", key, "' is not finite"));
  }
  return *r;
}

absl::Status Positive(const GgufFile& f, std::string_view key, int64_t v,
                      int64_t limit = int64_t{1} << 24) {
  if (v <= 0 || v > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": hyper-parameter '", internal::Sv(key), "' = ", v, " out of range [1, ", limit, "]"));
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const GgufFile& f, const std::string& p, HyperParams* hp) {
  RopeParams& r = hp->rope;
  ASSIGN_OR_RETURN(r.n_rot, ReadInt(f, p + ".rope.dimension_count", hp->head_dim_k));
  if (r.n_rot <= 0 || r.n_rot > hp->head_dim_k || r.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": rope.dimension_count = ", r.n_rot, " must be even and in [2, ",
        hp->head_dim_k, "]"));
  }
  ASSIGN_OR_RETURN(double base, ReadFloat(f, p + ".rope.freq_base", 10000.0));
  if (base <= 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": rope.freq_base = ", base, " must be > 1"));
  }
  r.freq_base = static_cast<float>(base);
  ASSIGN_OR_RETURN(double factor, ReadFloat(f, p + ".rope.scaling.factor", 0.0));
  if (factor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": rope.scaling.factor = ", factor, " is negative"));
  }
  r.freq_scale = factor == 0.0 ? 1.0f : static_cast<float>(1.0 / factor);
  std::string type_name = "none";
  if (f.Find(p + ".rope.scaling.type") != nullptr) {
    auto s = f.GetString(p + ".rope.scaling.type");
    if (!s.ok()) return absl::InvalidArgumentError(s.status().message());
    type_name = *s;
  } else if (factor != 0.0 && factor != 1.0) {
    type_name = "linear";
  }
  if (type_name == "none") {
    r.scaling = RopeScaling::kNone;
    r.freq_scale = 1.0f;
  } else if (type_name == "linear") {
    r.scaling = RopeScaling::kLinear;
  } else if (type_name == "yarn") {
    r.scaling = RopeScaling::kYarn;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": unsupported rope.scaling.type '", type_name, "'"));
  }
  ASSIGN_OR_RETURN(r.n_ctx_orig,
                   ReadInt(f, p + ".rope.scaling.original_context_length", hp->n_ctx_train));
  RETURN_IF_ERROR(Positive(f, "rope.scaling.original_context_length", r.n_ctx_orig,
                           int64_t{1} << 30));
  const double ext_def = r.scaling == RopeScaling::kYarn ? 1.0 : 0.0;
  ASSIGN_OR_RETURN(double ext, ReadFloat(f, p + ".rope.scaling.yarn_ext_factor", ext_def));
  ASSIGN_OR_RETURN(double attn, ReadFloat(f, p + ".rope.scaling.attn_factor", 1.0));
  ASSIGN_OR_RETURN(double fast, ReadFloat(f, p + ".rope.scaling.yarn_beta_fast", 32.0));
  ASSIGN_OR_RETURN(double slow, ReadFloat(f, p + ".rope.scaling.yarn_beta_slow", 1.0));
  r.ext_factor = static_cast<float>(ext);
  r.attn_factor = static_cast<float>(attn);
  r.beta_fast = static_cast<float>(fast);
  r.beta_slow = static_cast<float>(slow);
  return absl::OkStatus();
}

absl::Status ParseAttention(const GgufFile& f, const std::string& p, HyperParams* hp) {
  ASSIGN_OR_RETURN(hp->n_head, ReadInt(f, p + ".attention.head_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "attention.head_count", hp->n_head, 4096));
  ASSIGN_OR_RETURN(hp->n_head_kv, ReadInt(f, p + ".attention.head_count_kv", hp->n_head));
  RETURN_IF_ERROR(Positive(f, "attention.head_count_kv", hp->n_head_kv, 4096));
  if (hp->n_head % hp->n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": attention.head_count ", hp->n_head,
        " is not a multiple of attention.head_count_kv ", hp->n_head_kv));
  }
  const int64_t def_head = hp->n_embd / hp->n_head;
  ASSIGN_OR_RETURN(hp->head_dim_k, ReadInt(f, p + ".attention.key_length", def_head));
  RETURN_IF_ERROR(Positive(f, "attention.key_length", hp->head_dim_k, 65536));
  ASSIGN_OR_RETURN(hp->head_dim_v, ReadInt(f, p + ".attention.value_length", def_head));
  RETURN_IF_ERROR(Positive(f, "attention.value_length", hp->head_dim_v, 65536));
  ASSIGN_OR_RETURN(double eps,
                   ReadFloat(f, p + ".attention.layer_norm_rms_epsilon", std::nullopt));
  if (eps <= 0 || eps >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": attention.layer_norm_rms_epsilon = ", eps, " must be in (0, 1)"));
  }
  hp->rms_eps = static_cast<float>(eps);
  return absl::OkStatus();
}

absl::Status ParseExperts(const GgufFile& f, const std::string& p,
                          const ArchDescription& arch, HyperParams* hp) {
  ASSIGN_OR_RETURN(hp->n_ff, ReadInt(f, p + ".feed_forward_length", 0));
  if (hp->n_ff < 0) return Positive(f, "feed_forward_length", hp->n_ff);
  ASSIGN_OR_RETURN(hp->n_expert, ReadInt(f, p + ".expert_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_count", hp->n_expert, 65536));
  ASSIGN_OR_RETURN(hp->n_expert_used, ReadInt(f, p + ".expert_used_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_used_count", hp->n_expert_used, hp->n_expert));
  const int64_t ff_exp_def = hp->n_ff / hp->n_expert_used;
  ASSIGN_OR_RETURN(hp->n_ff_exp, ReadInt(f, p + ".expert_feed_forward_length",
                                         ff_exp_def > 0 ? std::optional<int64_t>(ff_exp_def)
                                                        : std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_feed_forward_length", hp->n_ff_exp));
  ASSIGN_OR_RETURN(hp->n_ff_shexp,
                   ReadInt(f, p + ".expert_shared_feed_forward_length", hp->n_ff));
  if (hp->n_ff_shexp < 0) {
    return Positive(f, "expert_shared_feed_forward_length", hp->n_ff_shexp);
  }
  const std::string norm_key = p + ".expert_weights_norm";
  if (f.Find(norm_key) != nullptr) {
    auto b = f.GetBool(norm_key);
    if (!b.ok()) return absl::InvalidArgumentError(b.status().message());
    hp->norm_topk = *b;
  } else {
    hp->norm_topk = arch.default_norm_topk;
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view TensorRoleName(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbeddings: return "embeddings";
    case TensorRole::kOutput: return "output";
    case TensorRole::kNorm: return "norm";
    case TensorRole::kDense: return "dense";
    case TensorRole::kRouter: return "router";
    case TensorRole::kSharedExpert: return "shared_experts";
    case TensorRole::kRoutedExpert: return "routed_experts";
  }
  return "?";
}

std::string_view RopeScalingName(RopeScaling s) {
  switch (s) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kYarn: return "yarn";
  }
  return "?";
}

const ArchDescription* FindArch(std::string_view arch) {
  for (const ArchDescription& d : Registry()) {
    if (d.name == arch) return &d;
  }
  return nullptr;
}

std::string SupportedArchNames() {
  std::vector<std::string> names;
  for (const ArchDescription& d : Registry()) names.emplace_back(d.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<HyperParams> ParseHyperParams(const GgufFile& f,
                                             const ArchDescription& arch) {
  HyperParams hp;
  hp.arch = std::string(arch.name);
  const std::string p(arch.key_prefix);
  ASSIGN_OR_RETURN(hp.n_embd, ReadInt(f, p + ".embedding_length", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "embedding_length", hp.n_embd, int64_t{1} << 20));
  ASSIGN_OR_RETURN(hp.n_layer, ReadInt(f, p + ".block_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "block_count", hp.n_layer, 4096));
  ASSIGN_OR_RETURN(hp.n_ctx_train, ReadInt(f, p + ".context_length", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "context_length", hp.n_ctx_train, int64_t{1} << 30));
  RETURN_IF_ERROR(ParseAttention(f, p, &hp));
  RETURN_IF_ERROR(ParseRope(f, p, &hp));
  RETURN_IF_ERROR(ParseExperts(f, p, arch, &hp));
  return hp;
}

int64_t ResolveDim(const HyperParams& hp, Dim dim) {
  switch (dim) {
    case Dim::kOne: return 1;
    case Dim::kEmbd: return hp.n_embd;
    case Dim::kQ: return hp.n_head * hp.head_dim_k;
    case Dim::kK: return hp.n_head_kv * hp.head_dim_k;
    case Dim::kV: return hp.n_head_kv * hp.head_dim_v;
    case Dim::kAttnOut: return hp.n_head * hp.head_dim_v;
    case Dim::kHeadK: return hp.head_dim_k;
    case Dim::kExpert: return hp.n_expert;
    case Dim::kFfExp: return hp.n_ff_exp;
    case Dim::kFfShexp: return hp.n_ff_shexp;
    case Dim::kVocab: return hp.n_vocab;
  }
  return 0;
}

bool IsLayerTensor(TensorId id) { return static_cast<int>(id) >= kFirstLayerTensor; }

std::string TensorName(const TensorSpec& spec, int layer) {
  if (!IsLayerTensor(spec.id)) return std::string(spec.name);
  return absl::StrCat("blk.", layer, ".", internal::Sv(spec.name));
}

}  // namespace moesplit::model
