#include "common/model/testing/tiny_model.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/model/arch.h"
#include "common/quant/quant.h"

namespace moesplit::model::testing {
namespace {

HyperParams ShapesOf(const TinyModelOptions& o) {
  HyperParams hp;
  hp.n_embd = o.n_embd;
  hp.n_head = o.n_head;
  hp.n_head_kv = o.n_head_kv;
  hp.head_dim_k = o.head_dim;
  hp.head_dim_v = o.head_dim;
  hp.n_expert = o.n_expert;
  hp.n_ff_exp = o.n_ff_exp;
  hp.n_ff_shexp = o.n_ff_shexp;
  hp.n_vocab = o.n_vocab;
  hp.n_layer = o.n_layer;
  hp.ssm_conv_kernel = o.ssm_conv_kernel;
  hp.ssm_head_k = hp.ssm_head_v = o.ssm_head;
  hp.ssm_n_k_heads = o.ssm_n_k_heads;
  hp.ssm_n_v_heads = o.ssm_n_v_heads;
  const ArchDescription* arch = FindArch(o.arch);
  hp.layers = LayerSpecs(arch != nullptr ? *arch : *FindArch("qwen3moe"), o.n_layer,
                         o.full_attention_interval);
  return hp;
}

void SetMetadata(const TinyModelOptions& o, GgufWriter* w) {
  const std::string p = o.arch;
  auto u32 = [&](const std::string& key, int64_t v) {
    if (!o.drop_keys.count(key)) w->SetU32(key, static_cast<uint32_t>(v));
  };
  auto f32 = [&](const std::string& key, float v) {
    if (!o.drop_keys.count(key)) w->SetF32(key, v);
  };
  if (!o.drop_keys.count("general.architecture")) w->SetString("general.architecture", o.arch);
  w->SetString("general.name", "tiny-test-" + o.arch);
  u32(p + ".context_length", o.n_ctx_train);
  u32(p + ".embedding_length", o.n_embd);
  u32(p + ".block_count", o.n_layer);
  u32(p + ".feed_forward_length", o.n_ff_exp * o.n_expert_used);
  u32(p + ".expert_feed_forward_length", o.n_ff_exp);
  u32(p + ".attention.head_count", o.n_head);
  u32(p + ".attention.head_count_kv", o.n_head_kv);
  u32(p + ".attention.key_length", o.head_dim);
  u32(p + ".attention.value_length", o.head_dim);
  f32(p + ".rope.freq_base", o.rope_base);
  f32(p + ".attention.layer_norm_rms_epsilon", 1e-6f);
  u32(p + ".expert_count", o.n_expert);
  u32(p + ".expert_used_count", o.n_expert_used);
  if (o.n_rot > 0) u32(p + ".rope.dimension_count", o.n_rot);
  const ArchDescription* arch = FindArch(o.arch);
  const bool hybrid = arch != nullptr && arch->pattern == LayerPattern::kFullAttentionInterval;
  if (o.arch == "qwen2moe" || hybrid) {
    u32(p + ".expert_shared_feed_forward_length", o.n_ff_shexp);
  }
  if (hybrid) {
    u32(p + ".ssm.conv_kernel", o.ssm_conv_kernel);
    u32(p + ".ssm.state_size", o.ssm_head);
    u32(p + ".ssm.group_count", o.ssm_n_k_heads);
    u32(p + ".ssm.time_step_rank", o.ssm_n_v_heads);
    u32(p + ".ssm.inner_size", o.ssm_n_v_heads * o.ssm_head);
    u32(p + ".full_attention_interval", o.full_attention_interval);
  }
  if (arch != nullptr && arch->multi_section_rope) {
    if (!o.drop_keys.count(p + ".rope.dimension_sections")) {
      w->Set(p + ".rope.dimension_sections",
             GgufValue::IntArray(GgufValueType::kInt32, o.rope_sections));
    }
  }
  if (o.arch == "gpt-oss") u32(p + ".attention.sliding_window", o.sliding_window);
  if (o.edit_metadata) o.edit_metadata(w);
}

// Fills `dst` with random rows of `type` (zeros for a type without a
// quantiser). Each tensor has its own seed, so a model is reproducible.
void FillTensor(const TensorSpec& spec, GgmlType type, const std::vector<int64_t>& ne,
                uint32_t seed, uint8_t* dst, uint64_t n_bytes) {
  const int64_t n_in = ne[0];
  const auto row_bytes = RowBytes(type, n_in);
  const quant::TypeTraits* traits = quant::GetTypeTraits(type);
  if (!row_bytes || *row_bytes == 0 || traits == nullptr || traits->quantize == nullptr) {
    std::memset(dst, 0, n_bytes);
    return;
  }
  const bool is_norm = spec.role == TensorRole::kNorm;
  const float scale = is_norm ? 0.1f : (spec.n_dims == 1 ? 0.1f : 1.0f / std::sqrt(n_in));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> row(n_in);
  for (uint64_t off = 0; off + *row_bytes <= n_bytes; off += *row_bytes) {
    for (float& v : row) v = (is_norm ? 1.0f : 0.0f) + u(rng);
    traits->quantize(row.data(), dst + off, n_in);
  }
}

GgmlType DefaultType(const TinyModelOptions& o, const TensorSpec& spec) {
  // Biases in f32 as the real files hold them (gpt-oss's expert biases are 2-D).
  if (spec.n_dims == 1 || spec.role == TensorRole::kRouter || spec.id == TensorId::kSsmConv ||
      absl::EndsWith(absl::string_view(spec.name.data(), spec.name.size()), ".bias")) {
    return GgmlType::kF32;
  }
  return o.matrix_type;
}

}  // namespace

absl::Status WriteTinyModel(const TinyModelOptions& o, const std::string& path) {
  const ArchDescription* arch = FindArch(o.arch);
  if (arch == nullptr) arch = FindArch("qwen3moe");  // an unknown name keeps some tensors
  GgufWriter w;
  SetMetadata(o, &w);
  const HyperParams hp = ShapesOf(o);
  uint32_t tensor_index = 0;
  for (const TensorSpec& spec : arch->tensors) {
    if (spec.id == TensorId::kOutput && o.tied_output) continue;
    const int n_layers = IsLayerTensor(spec.id) ? static_cast<int>(o.n_layer) : 1;
    // qwen3next's legacy fused ssm_in is the alternative to attn_qkv +
    // attn_gate, which tiny models carry.
    if (spec.id == TensorId::kSsmIn) continue;
    for (int il = 0; il < n_layers; ++il) {
      if (IsLayerTensor(spec.id) && !LayerSelected(spec.layers, hp.layers[il])) continue;
      const std::string name = TensorName(spec, il);
      if (o.drop_tensors.count(name)) continue;
      std::vector<int64_t> ne;
      for (int i = 0; i < spec.n_dims; ++i) ne.push_back(ResolveDim(hp, spec.shape[i]));
      if (auto it = o.shape_overrides.find(name); it != o.shape_overrides.end()) ne = it->second;
      GgmlType type = DefaultType(o, spec);
      if (auto it = o.type_overrides.find(name); it != o.type_overrides.end()) type = it->second;
      const uint32_t seed = o.seed * 1000003u + tensor_index++;
      RETURN_IF_ERROR(w.AddTensor(
          name, type, ne, [spec, type, ne, seed](uint8_t* dst, uint64_t n_bytes) {
            FillTensor(spec, type, ne, seed, dst, n_bytes);
          }));
    }
  }
  return w.Write(path);
}

absl::StatusOr<std::shared_ptr<const Model>> MakeTinyModel(const TinyModelOptions& o) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : std::filesystem::temp_directory_path().string();
  const std::string path = absl::StrCat(dir, "/moesplit_tiny_", getpid(), "_",
                                        counter.fetch_add(1), "_", o.arch, ".gguf");
  RETURN_IF_ERROR(WriteTinyModel(o, path));
  auto model = Model::Open(path);
  std::error_code ec;
  std::filesystem::remove(path, ec);  // the mapping keeps the data alive
  return model;
}

absl::StatusOr<TinyEngine> MakeTinyEngine(const TinyModelOptions& o, int threads) {
  TinyEngine e;
  ASSIGN_OR_RETURN(e.model, MakeTinyModel(o));
  e.pool = std::make_unique<ThreadPool>(threads);
  e.experts = std::make_unique<InProcessExperts>(ExpertStore(e.model), e.pool.get());
  e.forward = std::make_unique<Forward>(e.model, e.experts.get(), e.pool.get());
  return e;
}

}  // namespace moesplit::model::testing
