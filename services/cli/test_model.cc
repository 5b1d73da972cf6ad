#include "services/cli/test_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/cpu_count.h"
#include "common/base/progress.h"
#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "common/tokenizer/vocab_spec.h"
#include "services/cli/type_mix.h"

namespace moesplit::cli {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 20;
constexpr int64_t kMaxExperts = 512;  // llama.cpp's LLAMA_MAX_EXPERTS

constexpr char kChatTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' "
    "+ message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// gpt-oss test models: harmony framing (ours, not OpenAI's full template:
// what a harmony prompt needs to be well formed).
constexpr char kHarmonyTemplate[] =
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{'<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>'}}"
    "{% else %}{{'<|start|>' + message['role'] + '<|message|>' + message['content'] + "
    "'<|end|>'}}{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "{{'<|start|>assistant'}}{% endif %}";

bool IsGptOss(const TestModelSpec& s) { return s.arch == "gpt-oss"; }

// Sliding layers with their own geometry (gemma4).
bool HasSwaGeometry(const TestModelSpec& s) {
  const model::ArchDescription* arch = model::FindArch(s.arch);
  return arch != nullptr && arch->swa_own_geometry;
}
// Description properties (arch.h) of the spec's architecture.
bool IsMla(const TestModelSpec& s) {
  const model::ArchDescription* a = model::FindArch(s.arch);
  return a != nullptr && a->attention == model::MixerKind::kMla;
}
// Leading dense layers, a shared expert of expert_shared_count experts and
// the router's optional keys (deepseek2, glm4moe).
bool HasDenseLeadAndRouterKeys(const TestModelSpec& s) {
  const model::ArchDescription* a = model::FindArch(s.arch);
  return a != nullptr && a->leading_dense_layers;
}

// Per-layer kinds from the metadata arrays (nemotron_h_moe).
bool HasLayerKinds(const TestModelSpec& s) {
  const model::ArchDescription* a = model::FindArch(s.arch);
  return a != nullptr && a->pattern == model::LayerPattern::kPerLayerKinds;
}

// The spec's layer letters (M Mamba-2, * attention, E MoE), n_layer of them.
std::string LayerKinds(const TestModelSpec& s) {
  if (!s.layer_kinds.empty()) return s.layer_kinds;
  const std::string cycle = "MEMEM*EM";  // the oracle fixture's order
  std::string out;
  for (int64_t il = 0; il < s.n_layer; ++il) out.push_back(cycle[il % cycle.size()]);
  return out;
}

uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t TensorSeed(uint64_t seed, absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return Mix64(seed ^ Mix64(h));
}

bool HasSharedExpert(const model::ArchDescription& arch) {
  for (const model::TensorSpec& t : arch.tensors) {
    if (t.role == model::TensorRole::kSharedExpert) return true;
  }
  return false;
}

absl::Status CheckShape(const TestModelSpec& s) {
  struct Field {
    const char* name;
    int64_t value;
    int64_t max;
  };
  const Field fields[] = {
      {"layers", s.n_layer, 4096},      {"d", s.n_embd, 1 << 16},
      {"heads", s.n_head, 4096},        {"kv-heads", s.n_head_kv, 4096},
      {"head-dim", s.head_dim, 4096},   {"experts", s.n_expert, kMaxExperts},
      {"top-k", s.n_expert_used, kMaxExperts},
      {"expert-ffn", s.n_ff_exp, 1 << 18},
      {"ffn", s.n_ff, 1 << 20},         {"vocab", s.n_vocab, 1 << 22},
      {"ctx", s.n_ctx, 1 << 24},
  };
  for (const Field& f : fields) {
    if (f.value < 1 || f.value > f.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", f.name, " = ", f.value, " out of range [1, ", f.max, "]"));
    }
  }
  if (s.n_head % s.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heads ", s.n_head, " is not a multiple of --kv-heads ", s.n_head_kv));
  }
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head-dim ", s.head_dim, " must be even (RoPE)"));
  }
  if (s.n_expert_used > s.n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--top-k ", s.n_expert_used, " exceeds --experts ", s.n_expert));
  }
  const int64_t min_vocab = IsGptOss(s) ? 265 : 259;
  if (s.n_vocab < min_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab ", s.n_vocab, " is below ", min_vocab, " (256 bytes + the specials)"));
  }
  if (IsGptOss(s) && (s.sliding_window < 1 || s.sliding_window > (int64_t{1} << 24) ||
                      !(s.rope_scaling_factor >= 1) || s.rope_orig_ctx < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--window ", s.sliding_window, " must be in [1, 16777216]"));
  }
  if (s.n_rot < 0 || s.n_rot > s.head_dim || s.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rope-dims ", s.n_rot, " must be even and at most --head-dim ", s.head_dim));
  }
  const model::ArchDescription* arch = model::FindArch(s.arch);
  if (arch != nullptr && arch->pattern == model::LayerPattern::kFullAttentionInterval) {
    const Field ssm[] = {{"attention-interval", s.full_attention_interval, s.n_layer},
                         {"ssm-k-heads", s.ssm_n_k_heads, 4096},
                         {"ssm-v-heads", s.ssm_n_v_heads, 4096},
                         {"ssm-head", s.ssm_head, 4096}};
    for (const Field& f : ssm) {
      if (f.value < 1 || f.value > f.max) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", f.name, " = ", f.value, " out of range [1, ", f.max, "]"));
      }
    }
    if (s.ssm_n_v_heads % s.ssm_n_k_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--ssm-v-heads ", s.ssm_n_v_heads,
                                                     " is not a multiple of --ssm-k-heads ",
                                                     s.ssm_n_k_heads));
    }
    int64_t pairs = 0;
    for (int64_t x : s.rope_sections) pairs += x;
    if (pairs > s.head_dim || s.rope_sections.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope sections sum to ", pairs, " pairs; at most --head-dim ", s.head_dim));
    }
  }
  if (HasLayerKinds(s)) {
    const std::string kinds = LayerKinds(s);
    if (static_cast<int64_t>(kinds.size()) != s.n_layer ||
        kinds.find_first_not_of("ME*") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer kinds '", kinds, "' must be --layers (", s.n_layer,
          ") letters M (Mamba-2), * (attention) or E (MoE)"));
    }
    const Field ssm[] = {{"ssm-groups", s.ssm_n_k_heads, 4096},
                         {"ssm-heads", s.ssm_n_v_heads, 4096},
                         {"ssm-head", s.ssm_head, 4096},
                         {"ssm-state", s.ssm_state, 4096},
                         {"ssm-conv", s.ssm_conv_kernel, 64}};
    for (const Field& f : ssm) {
      if (f.value < 1 || f.value > f.max) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", f.name, " = ", f.value, " out of range [1, ", f.max, "]"));
      }
    }
    if (s.ssm_n_v_heads % s.ssm_n_k_heads != 0 || s.moe_latent < 0 || s.moe_latent > s.n_embd) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ssm-heads ", s.ssm_n_v_heads, " must be a multiple of --ssm-groups ",
          s.ssm_n_k_heads, " and the MoE latent ", s.moe_latent, " in [0, --d]"));
    }
  }
  if (HasSwaGeometry(s)) {
    if (s.swa_period < 1 || s.swa_period > s.n_layer || s.head_dim_swa < 2 ||
        s.head_dim_swa > 65536 || s.head_dim_swa % 2 != 0 || s.n_head_kv_swa < 1 ||
        s.n_head % s.n_head_kv_swa != 0 || s.sliding_window < 1 ||
        !(s.rope_partial > 0 && s.rope_partial <= 1) || !(s.final_logit_softcap >= 0) ||
        !(s.rope_freq_base_swa > 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sliding layers: period ", s.swa_period, " must be in [1, --layers], head ",
          s.head_dim_swa, " even, KV heads ", s.n_head_kv_swa, " dividing --heads, window ",
          s.sliding_window, " >= 1, rope partial ", s.rope_partial, " in (0, 1]"));
    }
  }
  if (s.n_nextn < 0 || s.n_nextn > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nextn = ", s.n_nextn, " out of range [0, 16]"));
  }
  if (IsMla(s)) {
    const Field mla[] = {{"kv-lora", s.kv_lora_rank, 65536},
                         {"head-dim-v", s.head_dim_v, 65536},
                         {"rope-dims", s.n_rot, s.head_dim - 1}};
    for (const Field& f : mla) {
      if (f.value < 1 || f.value > f.max) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", f.name, " = ", f.value, " out of range [1, ", f.max, "]"));
      }
    }
  }
  if (HasDenseLeadAndRouterKeys(s)) {
    if (s.n_expert_shared < 1 || s.n_expert_shared > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shared-experts = ", s.n_expert_shared, " out of range [1, 1024]"));
    }
    if (s.q_lora_rank < 0 || s.n_dense_lead < 0 || s.n_dense_lead > s.n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--q-lora ", s.q_lora_rank, " must be >= 0 and --dense-layers ", s.n_dense_lead,
          " in [0, --layers]"));
    }
    if (s.n_expert_groups > 1 &&
        (s.n_expert % s.n_expert_groups != 0 || s.n_expert / s.n_expert_groups < 2 ||
         s.n_group_used < 1 || s.n_group_used >= s.n_expert_groups ||
         s.n_group_used * (s.n_expert / s.n_expert_groups) < s.n_expert_used)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert groups ", s.n_expert_groups, " (", s.n_group_used,
          " used) do not fit ", s.n_expert, " experts top-", s.n_expert_used));
    }
  }
  if (!(s.rope_freq_base > 1) || !(s.rms_eps > 0)) {
    return absl::InvalidArgumentError("rope base must be > 1, rms eps > 0");
  }
  return absl::OkStatus();
}

float ScaleFor(const model::TensorSpec& t, const std::vector<int64_t>& ne,
               const TestModelSpec& s) {
  switch (t.role) {
    case model::TensorRole::kEmbeddings: return 1.0f;
    case model::TensorRole::kOutput:
      return 2.0f / std::sqrt(static_cast<float>(s.n_embd));
    default: break;
  }
  if (t.n_dims == 1) return 0.02f;  // biases (norms are ones)
  return 1.0f / std::sqrt(static_cast<float>(ne[0]));
}

// Whether a random model should rarely emit `id`: unused padding, and the
// byte tokens (MakeTestVocab: id = byte) that alone are not printable text.
bool Discouraged(const VocabSpec& vocab, int64_t id) {
  if (!vocab.types.empty() && vocab.types[id] == TokenType::kUnused) {
    return true;
  }
  const bool printable = id == '\n' || (id >= 0x20 && id < 0x7f);
  return id < 256 && !printable;
}

// Output rows: discouraged tokens at 1/20 of the scale, runs merged.
std::vector<RowSegment> OutputSegments(const VocabSpec& vocab, float scale) {
  std::vector<RowSegment> out;
  const int64_t n = static_cast<int64_t>(vocab.tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    const float s = Discouraged(vocab, i) ? scale / 20 : scale;
    if (!out.empty() && out.back().scale == s) {
      ++out.back().n_rows;
    } else {
      out.push_back({i, 1, s});
    }
  }
  return out;
}

}  // namespace

model::HyperParams ToHyperParams(const TestModelSpec& s) {
  model::HyperParams hp;
  hp.arch = s.arch;
  hp.n_embd = s.n_embd;
  hp.n_layer = s.n_layer;
  hp.n_ctx_train = s.n_ctx;
  hp.n_head = s.n_head;
  hp.n_head_kv = s.n_head_kv;
  hp.head_dim_k = hp.head_dim_v = s.head_dim;
  hp.n_vocab = s.n_vocab;
  hp.n_expert = s.n_expert;
  hp.n_expert_used = s.n_expert_used;
  hp.n_ff = s.n_ff;
  hp.n_ff_exp = s.n_ff_exp;
  hp.n_ff_shexp = s.n_ff_shexp;
  hp.rope.n_rot = s.n_rot > 0 ? s.n_rot : s.head_dim;
  hp.rope.freq_base = static_cast<float>(s.rope_freq_base);
  const model::ArchDescription* arch = model::FindArch(s.arch);
  if (arch != nullptr) {
    hp.layers = model::LayerSpecs(*arch, s.n_layer, s.full_attention_interval);
    hp.rope.multi_section = arch->multi_section_rope;
    for (size_t i = 0; i < 4 && i < s.rope_sections.size(); ++i) {
      hp.rope.sections[i] = static_cast<int>(s.rope_sections[i]);
    }
  }
  if (arch != nullptr) {
    hp.router_scoring = arch->router.scoring;
    hp.expert_ffn = arch->expert_ffn;
    hp.dense_activation = arch->dense_activation;
    if (arch->sliding_window && !arch->swa_own_geometry) {
      for (int64_t il = 0; il < s.n_layer; il += 2) hp.layers[il].sliding_window = s.sliding_window;
    }
  }
  if (HasSwaGeometry(s)) {
    // Full attention every swa_period-th layer; the sliding ones with their
    // own KV heads, head size and RoPE (ParseSwaGeometry's layout).
    hp.has_rope_swa = true;
    hp.rope_swa = hp.rope;
    hp.rope_swa.n_rot = s.head_dim_swa;
    hp.rope_swa.freq_base = static_cast<float>(s.rope_freq_base_swa);
    for (int64_t il = 0; il < s.n_layer; ++il) {
      model::LayerSpec& l = hp.layers[il];
      if (il % s.swa_period == s.swa_period - 1) continue;
      l.sliding_window = s.sliding_window;
      if (s.n_head_kv_swa != s.n_head_kv) l.n_head_kv = s.n_head_kv_swa;
      if (s.head_dim_swa != s.head_dim) l.head_dim_k = l.head_dim_v = s.head_dim_swa;
    }
  }
  if (IsGptOss(s)) {
    hp.rope.scaling = model::RopeScaling::kYarn;
    hp.rope.freq_scale = static_cast<float>(1.0 / s.rope_scaling_factor);
    hp.rope.n_ctx_orig = s.rope_orig_ctx;
    hp.rope.ext_factor = 1.0f;
  }
  if (arch != nullptr) {
    // NextN / MTP blocks: full attention and routed experts (arch.h).
    hp.nextn_layers.assign(std::max<int64_t>(s.n_nextn, 0),
                           model::LayerSpec{arch->attention, model::FfnKind::kMoe, 0, true});
  }
  if (IsMla(s)) {
    // The cache's view (one KV head of latent + rope) and the model's heads.
    hp.n_head_kv = 1;
    hp.rope.n_rot = s.n_rot;
    hp.head_dim_k = s.kv_lora_rank + s.n_rot;
    hp.head_dim_v = s.kv_lora_rank;
    hp.q_lora_rank = s.q_lora_rank;
    hp.kv_lora_rank = s.kv_lora_rank;
    hp.head_dim_k_mla = s.head_dim;
    hp.head_dim_v_mla = s.head_dim_v;
    hp.rope.norm_style = true;
    hp.rope.yarn_log_mul = static_cast<float>(s.rope_yarn_log_mul) / 0.1f;
    if (s.rope_scaling_factor > 1) {
      hp.rope.scaling = model::RopeScaling::kYarn;
      hp.rope.freq_scale = static_cast<float>(1.0 / s.rope_scaling_factor);
      hp.rope.n_ctx_orig = s.rope_orig_ctx;
      hp.rope.ext_factor = 1.0f;
      hp.rope.attn_factor = model::YarnAttnFactor(hp.rope.freq_scale, hp.rope.yarn_log_mul, 1.0f);
    }
  }
  if (HasDenseLeadAndRouterKeys(s)) {
    hp.n_dense_lead = s.n_dense_lead;
    for (int64_t il = 0; il < std::min(s.n_dense_lead, s.n_layer); ++il) {
      hp.layers[il].ffn = model::FfnKind::kDense;
    }
    hp.n_ff_shexp = s.n_ff_exp * s.n_expert_shared;
    hp.router_scoring = s.expert_gating_func == 2 ? model::RouterSpec::Scoring::kSigmoid
                                                  : model::RouterSpec::Scoring::kSoftmax;
    hp.norm_topk = s.expert_weights_norm;
    hp.expert_weights_scale = static_cast<float>(s.expert_weights_scale);
    hp.n_expert_groups = s.n_expert_groups;
    hp.n_group_used = s.n_group_used;
  }
  if (HasLayerKinds(s)) {
    // M: Mamba-2 alone, *: attention alone, E: the MoE alone (arch.h).
    const std::string kinds = LayerKinds(s);
    for (int64_t il = 0; il < s.n_layer && il < static_cast<int64_t>(kinds.size()); ++il) {
      model::LayerSpec& l = hp.layers[il];
      if (kinds[il] == 'M') l = {arch->recurrent, model::FfnKind::kNone};
      if (kinds[il] == '*') l = {arch->attention, model::FfnKind::kNone};
      if (kinds[il] == 'E') l = {model::MixerKind::kNone, model::FfnKind::kMoe};
    }
    hp.rope.n_rot = arch->rope ? hp.rope.n_rot : 0;
    hp.router_scoring = arch->router.scoring;
    hp.norm_topk = s.expert_weights_norm;
    hp.expert_weights_scale = static_cast<float>(s.expert_weights_scale);
    hp.n_expert_groups = s.n_expert_groups;
    hp.n_group_used = s.n_group_used;
    hp.moe_latent = s.moe_latent;
    hp.ssm_grouped_heads = arch->ssm_grouped_heads;
  }
  if (hp.n_recurrent_layers() > 0) {
    hp.ssm_conv_kernel = s.ssm_conv_kernel;
    hp.ssm_head_k = hp.ssm_head_v = s.ssm_head;
    if (HasLayerKinds(s)) hp.ssm_head_k = s.ssm_state;  // Mamba-2: head x state
    hp.ssm_n_k_heads = s.ssm_n_k_heads;
    hp.ssm_n_v_heads = s.ssm_n_v_heads;
  }
  return hp;
}

absl::StatusOr<TestModelSpec> PresetSpec(absl::string_view preset) {
  TestModelSpec s;
  const std::string p = absl::AsciiStrToLower(preset);
  if (p == "tiny") return s;
  if (p == "qwen3-30b-a3b") {
    s.arch = "qwen3moe";
    s.n_layer = 48;
    s.n_embd = 2048;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.head_dim = 128;
    s.n_expert = 128;
    s.n_expert_used = 8;
    s.n_ff_exp = 768;
    s.n_ff = 6144;
    return s;
  }
  if (p == "qwen3.5-35b-a3b") {
    s.arch = "qwen35moe";
    s.n_layer = 40;
    s.n_embd = 2048;
    s.n_head = 16;
    s.n_head_kv = 2;
    s.head_dim = 256;
    s.n_rot = 64;
    s.rope_sections = {11, 11, 10, 0};
    s.rope_freq_base = 1e7;
    s.ssm_conv_kernel = 4;
    s.ssm_n_k_heads = 16;
    s.ssm_n_v_heads = 32;
    s.ssm_head = 128;
    s.full_attention_interval = 4;
    s.n_expert = 256;
    s.n_expert_used = 8;
    s.n_ff_exp = 512;
    s.n_ff_shexp = 512;
    s.n_ff = 512;
    s.n_vocab = 248320;
    s.n_ctx = 262144;
    return s;
  }
  if (p == "gpt-oss-20b" || p == "gpt-oss-120b") {
    s.arch = "gpt-oss";
    s.n_layer = p == "gpt-oss-20b" ? 24 : 36;
    s.n_embd = 2880;
    s.n_head = 64;
    s.n_head_kv = 8;
    s.head_dim = 64;
    s.sliding_window = 128;
    s.rope_freq_base = 150000;
    s.rope_scaling_factor = 32;
    s.rope_orig_ctx = 4096;
    s.rms_eps = 1e-5;
    s.n_expert = p == "gpt-oss-20b" ? 32 : 128;
    s.n_expert_used = 4;
    s.n_ff_exp = 2880;
    s.n_ff = 2880;
    s.n_vocab = 201088;
    s.n_ctx = 131072;
    s.type = "MXFP4_MOE";
    return s;
  }
  if (p == "deepseek-v3" || p == "kimi-k2" || p == "deepseek-v2-lite") {
    const bool lite = p == "deepseek-v2-lite", kimi = p == "kimi-k2";
    s.arch = "deepseek2";
    s.n_layer = lite ? 27 : 61;
    s.n_embd = lite ? 2048 : 7168;
    s.n_head = lite ? 16 : kimi ? 64 : 128;
    s.n_head_kv = 1;
    s.q_lora_rank = lite ? 0 : 1536;
    s.kv_lora_rank = 512;
    s.head_dim = 192;  // nope 128 + rope 64
    s.n_rot = 64;
    s.head_dim_v = 128;
    s.n_dense_lead = kimi || lite ? 1 : 3;
    s.n_ff = lite ? 10944 : 18432;
    s.n_expert = lite ? 64 : kimi ? 384 : 256;
    s.n_expert_used = lite ? 6 : 8;
    s.n_ff_exp = lite ? 1408 : 2048;
    s.n_expert_shared = lite ? 2 : 1;
    s.n_expert_groups = lite || kimi ? 1 : 8;
    s.n_group_used = lite || kimi ? 1 : 4;
    s.expert_weights_scale = lite ? 1.0 : kimi ? 2.827 : 2.5;
    s.expert_weights_norm = !lite;
    s.expert_gating_func = lite ? 1 : 2;
    s.rope_freq_base = kimi ? 50000 : 10000;
    s.rope_scaling_factor = kimi ? 32 : 40;
    s.rope_orig_ctx = 4096;
    s.rope_yarn_log_mul = lite ? 0.0707 : 0.1;  // 0.1 x mscale_all_dim
    s.n_vocab = lite ? 102400 : kimi ? 163840 : 129280;
    s.n_ctx = kimi ? 131072 : 163840;
    return s;
  }
  if (p == "qwen3.6-35b-a3b-mtp") {
    // Qwen3.6-35B-A3B with its MTP block (block_count 41 = 40 + 1).
    ASSIGN_OR_RETURN(s, PresetSpec("qwen3.5-35b-a3b"));
    s.n_nextn = 1;
    return s;
  }
  if (p == "glm-4.5-air" || p == "glm-4.7") {
    // zai-org/GLM-4.5-Air (106B-A12B) and GLM-4.7 (GLM-4.5/4.6's shape,
    // 355B-A32B): 46 / 92 layers + 1 NextN block.
    const bool air = p == "glm-4.5-air";
    s.arch = "glm4moe";
    s.n_layer = air ? 46 : 92;
    s.n_nextn = 1;
    s.n_embd = air ? 4096 : 5120;
    s.n_head = 96;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_rot = 64;  // partial_rotary_factor 0.5
    s.qk_norm = !air;
    s.n_dense_lead = air ? 1 : 3;
    s.n_ff = air ? 10944 : 12288;
    s.n_expert = air ? 128 : 160;
    s.n_expert_used = 8;
    s.n_ff_exp = air ? 1408 : 1536;
    s.n_expert_shared = 1;
    s.n_expert_groups = 1;  // n_group / topk_group 1: no groups
    s.n_group_used = 1;
    s.expert_weights_scale = air ? 1.0 : 2.5;
    s.expert_weights_norm = true;
    s.expert_gating_func = 2;
    s.rope_freq_base = 1e6;
    s.rms_eps = 1e-5;
    s.n_vocab = 151552;
    s.n_ctx = air ? 131072 : 202752;
    return s;
  }
  if (p == "glm-4.7-flash") {
    // zai-org/GLM-4.7-Flash (30B-A3B) as llama.cpp stores it: deepseek2, 47
    // layers + 1 NextN block, MLA with q LoRA 768, kv LoRA 512, nope 192 +
    // rope 64, v 256, no YaRN, no expert groups.
    s.arch = "deepseek2";
    s.n_layer = 47;
    s.n_nextn = 1;
    s.n_embd = 2048;
    s.n_head = 20;
    s.n_head_kv = 1;
    s.q_lora_rank = 768;
    s.kv_lora_rank = 512;
    s.head_dim = 256;  // nope 192 + rope 64
    s.n_rot = 64;
    s.head_dim_v = 256;
    s.n_dense_lead = 1;
    s.n_ff = 10240;
    s.n_expert = 64;
    s.n_expert_used = 4;
    s.n_ff_exp = 1536;
    s.n_expert_shared = 1;
    s.n_expert_groups = 1;
    s.n_group_used = 1;
    s.expert_weights_scale = 1.8;
    s.expert_weights_norm = true;
    s.expert_gating_func = 2;
    s.rope_freq_base = 1e6;
    s.rope_scaling_factor = 1;
    s.rope_yarn_log_mul = 0;
    s.rms_eps = 1e-5;
    s.n_vocab = 154880;
    s.n_ctx = 202752;
    return s;
  }
  if (p == "gemma-4-26b-a4b") {
    // google/gemma-4-26B-A4B as llama.cpp's converter writes it (the
    // metadata of llama.cpp's ggml-vocab-gemma-4.gguf): 26B-A4B.
    s.arch = "gemma4";
    s.n_layer = 30;
    s.n_embd = 2816;
    s.n_head = 16;
    s.n_head_kv = 2;
    s.head_dim = 512;
    s.n_head_kv_swa = 8;
    s.head_dim_swa = 256;
    s.swa_period = 6;
    s.sliding_window = 1024;
    s.rope_freq_base = 1e6;
    s.rope_freq_base_swa = 1e4;
    s.rope_partial = 0.25;
    s.final_logit_softcap = 30;
    s.n_expert = 128;
    s.n_expert_used = 8;
    s.n_ff_exp = 704;
    s.n_ff = 2112;
    s.n_vocab = 262144;
    s.n_ctx = 262144;
    return s;
  }
  if (p == "minimax-m2") {
    // MiniMaxAI/MiniMax-M2's config.json (M2.5 / M2.7 share the shape):
    // 230B-A10B.
    s.arch = "minimax-m2";
    s.n_layer = 62;
    s.n_embd = 3072;
    s.n_head = 48;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_rot = 64;  // rotary_dim
    s.rope_freq_base = 5e6;
    s.n_expert = 256;
    s.n_expert_used = 8;
    s.n_ff_exp = 1536;
    s.n_ff = 1536;
    s.n_vocab = 200064;
    s.n_ctx = 196608;
    return s;
  }
  if (p == "qwen3-next-80b-a3b") {
    // Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: 80B-A3B.
    s.arch = "qwen3next";
    s.n_layer = 48;
    s.n_embd = 2048;
    s.n_head = 16;
    s.n_head_kv = 2;
    s.head_dim = 256;
    s.n_rot = 64;  // partial_rotary_factor 0.25
    s.rope_freq_base = 1e7;
    s.ssm_conv_kernel = 4;
    s.ssm_n_k_heads = 16;
    s.ssm_n_v_heads = 32;
    s.ssm_head = 128;
    s.full_attention_interval = 4;
    s.n_expert = 512;
    s.n_expert_used = 10;
    s.n_ff_exp = 512;
    s.n_ff_shexp = 512;
    s.n_ff = 5120;
    s.n_vocab = 151936;
    s.n_ctx = 262144;
    return s;
  }
  if (p == "nemotron-3-nano-30b-a3b" || p == "nemotron-3-super-120b-a12b") {
    // nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's and
    // NVIDIA-Nemotron-3-Super-120B-A12B's config.json (MTP block left out).
    const bool super = p == "nemotron-3-super-120b-a12b";
    s.arch = "nemotron_h_moe";
    s.layer_kinds = super ? "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                            "EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
                          : "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
    s.n_layer = static_cast<int64_t>(s.layer_kinds.size());
    s.n_embd = super ? 4096 : 2688;
    s.n_head = 32;
    s.n_head_kv = 2;
    s.head_dim = 128;
    s.ssm_conv_kernel = 4;
    s.ssm_n_k_heads = 8;
    s.ssm_n_v_heads = super ? 128 : 64;
    s.ssm_head = 64;
    s.ssm_state = 128;
    s.n_expert = super ? 512 : 128;
    s.n_expert_used = super ? 22 : 6;
    s.n_ff_exp = super ? 2688 : 1856;
    s.n_ff = s.n_ff_exp;
    s.n_ff_shexp = super ? 5376 : 3712;
    s.moe_latent = super ? 1024 : 0;
    s.expert_weights_scale = super ? 5.0 : 2.5;
    s.expert_weights_norm = true;
    s.rope_freq_base = 10000;
    s.rms_eps = 1e-5;
    s.n_vocab = 131072;
    s.n_ctx = 262144;
    return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown preset '", preset, "' (supported: ",
                                                 absl::StrJoin(PresetNames(), ", "), ")"));
}

const std::vector<std::string>& PresetNames() {
  static const auto* const kNames = new std::vector<std::string>{
      "qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3.6-35b-a3b-mtp", "gpt-oss-20b",
      "gpt-oss-120b",  "deepseek-v3",     "kimi-k2",             "deepseek-v2-lite",
      "glm-4.5-air",   "glm-4.7",         "glm-4.7-flash",       "minimax-m2",
      "qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b",
      "gemma-4-26b-a4b", "tiny"};
  return *kNames;
}

absl::StatusOr<std::vector<PlannedTensor>> PlanTensors(
    const TestModelSpec& spec, const VocabSpec* vocab) {
  const model::ArchDescription* arch = model::FindArch(spec.arch);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported architecture '", spec.arch,
                     "' (supported: ", model::SupportedArchNames(), ")"));
  }
  RETURN_IF_ERROR(CheckShape(spec));
  ASSIGN_OR_RETURN(FileTypeMix mix, LookupFileTypeMix(spec.type));
  const model::HyperParams hp = ToHyperParams(spec);
  const bool shared = HasSharedExpert(*arch);
  if (shared && (spec.n_ff_shexp < 1 || spec.n_ff_shexp > (1 << 20))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared-ffn = ", spec.n_ff_shexp, " out of range [1, 1048576]"));
  }
  std::vector<PlannedTensor> out;
  auto add = [&](const model::TensorSpec& t, int layer) {
    PlannedTensor p;
    p.name = model::TensorName(t, layer);
    const int own = model::IsLayerTensor(t.id) && layer < spec.n_layer ? layer : -1;
    for (int i = 0; i < t.n_dims; ++i) {
      p.ne.push_back(model::ResolveDim(hp, t.shape[i], own));
    }
    if (t.id == model::TensorId::kRopeFreqs) {
      // "Proportional" RoPE: the first rope_partial of the pairs rotate.
      const int64_t pairs = p.ne[0];
      const auto rotating = static_cast<int64_t>(std::llround(pairs * spec.rope_partial));
      for (int64_t i = 0; i < pairs; ++i) p.values.push_back(i < rotating ? 1.0f : 1e30f);
    }
    p.role = t.role;
    p.ones = t.role == model::TensorRole::kNorm;
    // ssm_a = -exp(A_log) < 0: a decaying state (-1: exp(g) in (0.37, 1)).
    if (t.id == model::TensorId::kSsmA) p.constant = -1.0f;
    int64_t rows = 1;
    for (size_t i = 1; i < p.ne.size(); ++i) rows *= p.ne[i];
    const float scale = p.ones ? 1.0f : ScaleFor(t, p.ne, spec);
    p.segments = t.role == model::TensorRole::kOutput && vocab != nullptr
                     ? OutputSegments(*vocab, scale)
                     : std::vector<RowSegment>{{0, rows, scale}};
    p.type = PickTensorType(
        mix, {p.name, t.n_dims, p.ne[0], static_cast<int>(spec.n_layer + hp.n_nextn()),
              static_cast<int>(spec.n_expert),
              static_cast<int>(spec.n_head / spec.n_head_kv)});
    if (p.constant.has_value() || !p.values.empty()) p.type = GgmlType::kF32;
    out.push_back(std::move(p));
  };
  for (const model::TensorSpec& t : arch->tensors) {
    // gemma4's embeddings are tied (no output.weight).
    if (t.id == model::TensorId::kOutput && HasSwaGeometry(spec)) continue;
    if (!model::IsLayerTensor(t.id)) add(t, 0);
  }
  // MLA: the q LoRA pair or attn_q; an optional selection bias with the
  // sigmoid router; optional QK-norm as the spec says (as the published
  // files).
  auto wanted = [&](const model::TensorSpec& t, const model::LayerSpec& l) {
    // gemma4: fused gate/up experts; V = K on the full layers.
    if (t.id == model::TensorId::kExpGate || t.id == model::TensorId::kExpUp) {
      if (!t.required) return false;
    }
    if (t.id == model::TensorId::kAttnV && !t.required) return l.sliding_window > 0;
    // qwen3next: attn_qkv + attn_gate, as current converters write (not
    // the legacy fused ssm_in, their alternative).
    if (t.id == model::TensorId::kSsmIn && !t.required) return false;
    if (t.id == model::TensorId::kFfnLatentDown || t.id == model::TensorId::kFfnLatentUp) {
      return spec.moe_latent > 0;
    }
    if (t.id == model::TensorId::kAttnOutputBias && !t.required) return false;
    switch (t.id) {
      case model::TensorId::kAttnQA:
      case model::TensorId::kAttnQANorm:
      case model::TensorId::kAttnQB: return !IsMla(spec) || spec.q_lora_rank > 0;
      case model::TensorId::kAttnQ: return !IsMla(spec) || spec.q_lora_rank == 0;
      case model::TensorId::kRouterSelBias: return t.required || spec.expert_gating_func == 2;
      case model::TensorId::kAttnQNorm:
      case model::TensorId::kAttnKNorm: return t.required || spec.qk_norm;
      default: return true;
    }
  };
  const int n_blocks = static_cast<int>(spec.n_layer + hp.n_nextn());
  for (int il = 0; il < n_blocks; ++il) {
    const model::LayerSpec& l =
        il < spec.n_layer ? hp.layers[il] : hp.nextn_layers[il - spec.n_layer];
    for (const model::TensorSpec& t : arch->tensors) {
      if (model::IsLayerTensor(t.id) && model::LayerSelected(t.layers, l) && wanted(t, l)) {
        add(t, il);
      }
    }
    if (il < spec.n_layer) continue;
    // The NextN block's own tensors, its shared_head_norm included (as
    // GLM's and Qwen's converters write them).
    for (const model::TensorSpec& t : model::NextNTensors()) {
      if (t.required || t.id == model::TensorId::kNextnSharedHeadNorm) add(t, il);
    }
  }
  for (const PlannedTensor& p : out) {
    if (!quant::CheckSupported(p.type).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("type ", spec.type, ": ", p.name, " would be ",
                       std::string(GgmlTypeName(p.type)),
                       ", which moesplit cannot compute"));
    }
  }
  return out;
}

absl::Status ValidateSpec(const TestModelSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<PlannedTensor> plan, PlanTensors(spec));
  // Every (type, scale) the file will hold must be fillable; try one block of
  // each segment's. (Only the output's discouraged rows have 1/20 of the
  // scale: trying that for every tensor refused a DeepSeek-V3-shaped model,
  // whose 18432-column Q6_K ffn_down fills at 1/sqrt(18432) but not at 1/20 of it.)
  std::vector<uint8_t> block(1024);
  for (const PlannedTensor& p : plan) {
    if (p.ones || p.constant.has_value()) continue;
    const GgmlTypeInfo& info = TypeInfo(p.type);
    for (const RowSegment& seg : p.segments) {
      RETURN_IF_ERROR(quant::FillRandomBlocks(p.type, 0, seg.scale, block.data(),
                                              info.block_size));
    }
  }
  return absl::OkStatus();
}

namespace {

// Fill errors cannot happen after ValidateSpec (same types, scales and whole
// blocks); one would be a broken invariant, so it aborts.
void FillChunk(const PlannedTensor& p, uint64_t seed, float scale,
               uint8_t* dst, int64_t n) {
  absl::Status s = quant::FillRandomBlocks(p.type, seed, scale, dst, n);
  if (!s.ok()) {
    std::fprintf(stderr, "moesplit: internal error filling %s: %s\n",
                 p.name.c_str(), std::string(s.message()).c_str());
    std::abort();
  }
}

// One piece of work: elements [begin, begin + n) of a segment.
struct FillJob {
  uint64_t seed;
  float scale;
  uint64_t byte_offset;
  int64_t n;
};

void FillTensor(const PlannedTensor& p, uint64_t seed, ThreadPool* pool,
                uint8_t* dst) {
  const int64_t row = p.ne[0];
  if (!p.values.empty()) {  // F32
    std::memcpy(dst, p.values.data(), p.values.size() * sizeof(float));
    return;
  }
  if (p.ones || p.constant.has_value()) {  // F32
    int64_t n = 0;
    for (const RowSegment& g : p.segments) n += g.n_rows * row;
    const float value = p.constant.value_or(1.0f);
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + 4 * i, &value, 4);
    return;
  }
  const uint64_t row_bytes = *RowBytes(p.type, row);
  const uint64_t chunk_bytes = *RowBytes(p.type, kChunkElements);
  std::vector<FillJob> jobs;
  for (size_t gi = 0; gi < p.segments.size(); ++gi) {
    const RowSegment& g = p.segments[gi];
    const int64_t n = g.n_rows * row;
    for (int64_t c = 0; c * kChunkElements < n; ++c) {
      jobs.push_back({Mix64(seed + (static_cast<uint64_t>(gi) << 32) +
                            static_cast<uint64_t>(c)),
                      g.scale, g.first_row * row_bytes + c * chunk_bytes,
                      std::min(kChunkElements, n - c * kChunkElements)});
    }
  }
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      FillChunk(p, jobs[j].seed, jobs[j].scale, dst + jobs[j].byte_offset,
                jobs[j].n);
    }
  };
  if (pool == nullptr) {
    fill(0, static_cast<int64_t>(jobs.size()));
  } else {
    pool->ParallelFor(static_cast<int64_t>(jobs.size()), fill);
  }
}

}  // namespace

absl::Status AddTestModel(const TestModelSpec& spec, GgufWriter* writer,
                          ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  ASSIGN_OR_RETURN(FileTypeMix mix, LookupFileTypeMix(spec.type));
  ASSIGN_OR_RETURN(VocabSpec vocab,
                   MakeTestVocab(static_cast<int32_t>(spec.n_vocab),
                                 IsGptOss(spec) ? TestVocabStyle::kHarmony
                                                : TestVocabStyle::kChatMl));
  ASSIGN_OR_RETURN(std::vector<PlannedTensor> plan, PlanTensors(spec, &vocab));

  const std::string& a = spec.arch;
  writer->SetString("general.architecture", a);
  writer->SetString("general.type", "model");
  writer->SetString("general.name", spec.name.empty()
                                        ? absl::StrCat("moesplit-test-", a)
                                        : spec.name);
  auto u32 = [&](const char* key, int64_t v) {
    writer->SetU32(absl::StrCat(a, ".", key), static_cast<uint32_t>(v));
  };
  u32("context_length", spec.n_ctx);
  u32("embedding_length", spec.n_embd);
  u32("block_count", spec.n_layer + std::max<int64_t>(spec.n_nextn, 0));
  if (spec.n_nextn > 0) u32("nextn_predict_layers", spec.n_nextn);
  const model::HyperParams hp = ToHyperParams(spec);
  if (HasLayerKinds(spec)) {
    // Per layer (arch.h kPerLayerKinds): attention layers' KV heads, MoE
    // layers' FFN length, 0 elsewhere.
    std::vector<int64_t> kv, ff;
    for (const model::LayerSpec& l : hp.layers) {
      kv.push_back(model::IsAttention(l.mixer) ? spec.n_head_kv : 0);
      ff.push_back(l.ffn == model::FfnKind::kMoe ? spec.n_ff : 0);
    }
    writer->Set(absl::StrCat(a, ".attention.head_count_kv"),
                GgufValue::IntArray(GgufValueType::kInt32, kv));
    writer->Set(absl::StrCat(a, ".feed_forward_length"),
                GgufValue::IntArray(GgufValueType::kInt32, ff));
    writer->SetF32(absl::StrCat(a, ".expert_weights_scale"),
                   static_cast<float>(spec.expert_weights_scale));
    writer->SetBool(absl::StrCat(a, ".expert_weights_norm"), spec.expert_weights_norm);
    u32("expert_shared_count", 1);
    if (spec.n_expert_groups >= 1) {
      u32("expert_group_count", spec.n_expert_groups);
      u32("expert_group_used_count", spec.n_group_used);
    }
    if (spec.moe_latent > 0) u32("moe_latent_size", spec.moe_latent);
  } else {
    u32("feed_forward_length", spec.n_ff);
  }
  u32("expert_feed_forward_length", spec.n_ff_exp);
  if (HasSharedExpert(*model::FindArch(a)) && !model::FindArch(a)->shared_expert_count) {
    u32("expert_shared_feed_forward_length", spec.n_ff_shexp);
  }
  u32("attention.head_count", spec.n_head);
  if (HasSwaGeometry(spec)) {
    // Per layer, as llama.cpp's gemma4 converter writes them.
    std::vector<int64_t> kv, swa;
    for (int il = 0; il < static_cast<int>(spec.n_layer); ++il) {
      kv.push_back(hp.kv_heads(il));
      swa.push_back(hp.layers[il].sliding_window > 0);
    }
    writer->Set(absl::StrCat(a, ".attention.head_count_kv"),
                GgufValue::IntArray(GgufValueType::kInt32, std::move(kv)));
    writer->Set(absl::StrCat(a, ".attention.sliding_window_pattern"),
                GgufValue::IntArray(GgufValueType::kBool, std::move(swa)));
    u32("attention.sliding_window", spec.sliding_window);
    u32("attention.key_length_swa", spec.head_dim_swa);
    u32("attention.value_length_swa", spec.head_dim_swa);
    u32("rope.dimension_count", spec.head_dim);
    u32("rope.dimension_count_swa", spec.head_dim_swa);
    writer->SetF32(absl::StrCat(a, ".rope.freq_base_swa"),
                   static_cast<float>(spec.rope_freq_base_swa));
    writer->SetF32(absl::StrCat(a, ".final_logit_softcapping"),
                   static_cast<float>(spec.final_logit_softcap));
    u32("attention.shared_kv_layers", 0);
    u32("embedding_length_per_layer_input", 0);
  } else if (!HasLayerKinds(spec)) {  // those write it per layer (above)
    u32("attention.head_count_kv", hp.n_head_kv);
  }
  u32("attention.key_length", hp.head_dim_k);
  u32("attention.value_length", hp.head_dim_v);
  writer->SetF32(absl::StrCat(a, ".rope.freq_base"),
                 static_cast<float>(spec.rope_freq_base));
  writer->SetF32(absl::StrCat(a, ".attention.layer_norm_rms_epsilon"),
                 static_cast<float>(spec.rms_eps));
  u32("expert_count", spec.n_expert);
  u32("expert_used_count", spec.n_expert_used);
  if (spec.n_rot > 0) u32("rope.dimension_count", spec.n_rot);
  if (IsMla(spec)) {
    // llama.cpp's deepseek2 keys (llama_model_deepseek2::load_arch_hparams).
    u32("attention.q_lora_rank", spec.q_lora_rank);
    u32("attention.kv_lora_rank", spec.kv_lora_rank);
    u32("attention.key_length_mla", spec.head_dim);
    u32("attention.value_length_mla", spec.head_dim_v);
    u32("vocab_size", spec.n_vocab);  // as llama.cpp's converter writes it
    if (spec.rope_scaling_factor > 1) {
      writer->SetString(absl::StrCat(a, ".rope.scaling.type"), "yarn");
      writer->SetF32(absl::StrCat(a, ".rope.scaling.factor"),
                     static_cast<float>(spec.rope_scaling_factor));
      u32("rope.scaling.original_context_length", spec.rope_orig_ctx);
      writer->SetF32(absl::StrCat(a, ".rope.scaling.yarn_log_multiplier"),
                     static_cast<float>(spec.rope_yarn_log_mul));
    }
  }
  if (HasDenseLeadAndRouterKeys(spec)) {
    // The router's and the dense layers' keys (deepseek2, glm4moe).
    u32("leading_dense_block_count", spec.n_dense_lead);
    u32("expert_shared_count", spec.n_expert_shared);
    writer->SetF32(absl::StrCat(a, ".expert_weights_scale"),
                   static_cast<float>(spec.expert_weights_scale));
    writer->SetBool(absl::StrCat(a, ".expert_weights_norm"), spec.expert_weights_norm);
    u32("expert_gating_func", spec.expert_gating_func);
    if (spec.n_expert_groups >= 1) {  // 1 / 1: no groups, as GLM's files say
      u32("expert_group_count", spec.n_expert_groups);
      u32("expert_group_used_count", spec.n_group_used);
    }
  } else if (const model::RouterSpec& r = model::FindArch(a)->router; r.gating_func_key) {
    // minimax-m2: the converter writes its scoring (2 sigmoid, 1 softmax).
    u32("expert_gating_func", r.scoring == model::RouterSpec::Scoring::kSigmoid ? 2 : 1);
  }
  if (model::FindArch(a)->multi_section_rope) {
    writer->Set(absl::StrCat(a, ".rope.dimension_sections"),
                GgufValue::IntArray(GgufValueType::kInt32, spec.rope_sections));
  }
  if (hp.n_recurrent_layers() > 0) {
    u32("ssm.conv_kernel", spec.ssm_conv_kernel);
    u32("ssm.state_size", hp.ssm_head_k);
    u32("ssm.group_count", spec.ssm_n_k_heads);
    u32("ssm.time_step_rank", spec.ssm_n_v_heads);
    u32("ssm.inner_size", spec.ssm_n_v_heads * spec.ssm_head);
    if (!HasLayerKinds(spec)) u32("full_attention_interval", spec.full_attention_interval);
  }
  if (IsGptOss(spec)) {
    u32("attention.sliding_window", spec.sliding_window);
    writer->SetString(absl::StrCat(a, ".rope.scaling.type"), "yarn");
    writer->SetF32(absl::StrCat(a, ".rope.scaling.factor"),
                   static_cast<float>(spec.rope_scaling_factor));
    u32("rope.scaling.original_context_length", spec.rope_orig_ctx);
  }
  RETURN_IF_ERROR(WriteVocabSpec(vocab, writer));
  // Qwen's files say it explicitly (llama.cpp's BPE default would add BOS).
  if (!vocab.add_bos) writer->SetBool("tokenizer.ggml.add_bos_token", false);
  writer->SetString("tokenizer.chat_template", IsGptOss(spec) ? kHarmonyTemplate : kChatTemplate);
  writer->SetU32("general.quantization_version", 2);
  writer->SetU32("general.file_type", mix.llama_ftype);

  for (PlannedTensor& p : plan) {
    const uint64_t seed = TensorSeed(spec.seed, p.name);
    std::string name = p.name;
    GgmlType type = p.type;
    std::vector<int64_t> ne = p.ne;
    RETURN_IF_ERROR(writer->AddTensor(
        std::move(name), type, std::move(ne),
        [p = std::move(p), seed, pool](uint8_t* dst, uint64_t) {
          FillTensor(p, seed, pool, dst);
        }));
  }
  return absl::OkStatus();
}

absl::Status WriteTestModel(const TestModelSpec& spec, const std::string& path,
                            const std::string& progress_prefix) {
  const int threads =
      spec.threads > 0
          ? spec.threads
          : AvailableCpuCount();
  ThreadPool pool(threads);
  GgufWriter writer;
  RETURN_IF_ERROR(AddTestModel(spec, &writer, &pool));
  const std::string tmp = absl::StrCat(path, ".tmp-", getpid());
  std::optional<LoadProgress> progress;
  if (!progress_prefix.empty() && writer.data_bytes() >= (64u << 20)) {
    progress.emplace(progress_prefix, writer.data_bytes());
  }
  RETURN_IF_ERROR(writer.Write(tmp, progress ? std::function<void(uint64_t)>(
                                                   [&](uint64_t n) { progress->Add(n); })
                                             : nullptr));
  if (progress) progress->Finish();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace moesplit::cli
