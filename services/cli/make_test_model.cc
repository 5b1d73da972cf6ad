// moesplit make-test-model: writes a random-weight model (test_model.h).
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "services/cli/commands.h"
#include "services/cli/test_model.h"
#include "services/cli/type_mix.h"

namespace moesplit::cli {
namespace {

// Shape flags: each overrides one field of the preset when given.
struct ShapeFlag {
  const char* name;
  int64_t TestModelSpec::*field;
  const char* help;
};

constexpr ShapeFlag kShapeFlags[] = {
    {"layers", &TestModelSpec::n_layer, "block count (qwen3-30b-a3b: 48, tiny: 4)"},
    {"d", &TestModelSpec::n_embd, "embedding length"},
    {"heads", &TestModelSpec::n_head, "query heads"},
    {"kv-heads", &TestModelSpec::n_head_kv, "key/value heads"},
    {"head-dim", &TestModelSpec::head_dim, "head dimension"},
    {"experts", &TestModelSpec::n_expert, "routed experts"},
    {"top-k", &TestModelSpec::n_expert_used, "experts used per token"},
    {"expert-ffn", &TestModelSpec::n_ff_exp, "expert FFN width"},
    {"shared-ffn", &TestModelSpec::n_ff_shexp,
     "shared-expert FFN width (qwen2moe)"},
    {"ffn", &TestModelSpec::n_ff, "feed_forward_length (metadata only)"},
    {"vocab", &TestModelSpec::n_vocab, "vocabulary size (>= 259)"},
    {"ctx", &TestModelSpec::n_ctx, "context length"},
    {"rope-dims", &TestModelSpec::n_rot, "rotary dimensions per head (the preset's: head-dim)"},
    {"attention-interval", &TestModelSpec::full_attention_interval,
     "qwen35moe: every N-th layer full attention, the rest gated DeltaNet"},
    {"ssm-k-heads", &TestModelSpec::ssm_n_k_heads, "qwen35moe: DeltaNet key heads"},
    {"ssm-v-heads", &TestModelSpec::ssm_n_v_heads, "qwen35moe: DeltaNet value heads"},
    {"ssm-head", &TestModelSpec::ssm_head, "qwen35moe: DeltaNet head size"},
    {"ssm-state", &TestModelSpec::ssm_state, "nemotron_h_moe: Mamba-2 state size"},
    {"moe-latent", &TestModelSpec::moe_latent, "nemotron_h_moe: LatentMoE width (0: none)"},
    {"window", &TestModelSpec::sliding_window, "gpt-oss: sliding window of the even layers"},
    {"q-lora", &TestModelSpec::q_lora_rank, "deepseek2: q LoRA rank (0: a direct attn_q)"},
    {"kv-lora", &TestModelSpec::kv_lora_rank, "deepseek2: KV latent rank"},
    {"head-dim-v", &TestModelSpec::head_dim_v, "deepseek2: value head (head-dim: nope + rope)"},
    {"dense-layers", &TestModelSpec::n_dense_lead, "deepseek2: leading dense-FFN layers"},
    {"shared-experts", &TestModelSpec::n_expert_shared, "deepseek2, glm4moe: shared experts"},
    {"nextn", &TestModelSpec::n_nextn,
     "NextN / MTP blocks after the trunk (kept aside, not run; block_count = layers + nextn)"},
};

void PrintWritten(const TestModelSpec& spec, const std::string& out,
                  double secs, std::FILE* log) {
  auto plan = PlanTensors(spec);
  if (!plan.ok()) return;
  uint64_t bytes = 0;
  for (const PlannedTensor& p : *plan) {
    int64_t n = 1;
    for (int64_t x : p.ne) n *= x;
    bytes += RowBytes(p.type, n).value_or(0);
  }
  std::fprintf(log,
               "wrote %s: %s %s, %lld layers, %zu tensors, %.1f MiB in %.2f s "
               "(%.2f GB/s)\n",
               out.c_str(), spec.arch.c_str(), spec.type.c_str(),
               static_cast<long long>(spec.n_layer), plan->size(),
               bytes / 1048576.0, secs, secs > 0 ? bytes / secs / 1e9 : 0.0);
}

}  // namespace

absl::Status RunMakeTestModel(const Args& args, const CommandIo& io) {
  std::string arch = "qwen3moe", out, preset = "tiny", type = "Q4_K_M", name;
  int64_t seed = 1, threads = 0;
  TestModelSpec shape;  // receives the shape flags
  FlagParser f;
  f.AddString("out|o", &out, "output GGUF path (required)");
  f.AddString("arch", &arch,
              "qwen3moe | qwen2moe | qwen35moe | gpt-oss | deepseek2 | glm4moe | qwen3next | "
              "minimax-m2 | nemotron_h_moe")
      .DefaultText("the preset's");
  f.AddString("preset", &preset, absl::StrJoin(PresetNames(), " | "));
  f.AddString("type", &type,
              absl::StrCat("file type: ", absl::StrJoin(FileTypeMixNames(), " ")))
      .Meta("TYPE")
      .DefaultText("Q4_K_M; the gpt-oss presets: MXFP4_MOE");
  for (const ShapeFlag& s : kShapeFlags) {
    f.AddInt(s.name, &(shape.*s.field), s.help).DefaultText("the preset's");
  }
  f.AddString("layer-kinds", &shape.layer_kinds,
              "nemotron_h_moe: a letter per layer, M Mamba-2, * attention, E MoE")
      .DefaultText("the preset's; else MEMEM*EM repeated");
  f.AddString("name", &name, "general.name").DefaultText("from the preset and type");
  f.AddInt("seed", &seed, "weight seed");
  f.AddInt("threads|t", &threads, "fill threads; 0: every CPU the process may use");
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "make-test-model --out F [flags]", io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "make-test-model: unexpected argument '", f.positional()[0], "'"));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("make-test-model: missing --out FILE");
  }
  ASSIGN_OR_RETURN(TestModelSpec spec, PresetSpec(preset));
  if (f.WasSet("arch")) spec.arch = arch;
  if (f.WasSet("type")) spec.type = type;
  spec.name = name;
  spec.seed = static_cast<uint64_t>(seed);
  spec.threads = ThreadCount(threads);
  for (const ShapeFlag& s : kShapeFlags) {
    if (f.WasSet(s.name)) spec.*s.field = shape.*s.field;
  }
  if (f.WasSet("layer-kinds")) spec.layer_kinds = shape.layer_kinds;
  // A preset's layer letters no longer fit another --layers.
  if (f.WasSet("layers") && !f.WasSet("layer-kinds") &&
      static_cast<int64_t>(spec.layer_kinds.size()) != spec.n_layer) {
    spec.layer_kinds.clear();
  }
  if (f.WasSet("shared-ffn") && spec.arch == "qwen3moe") {
    return absl::InvalidArgumentError(
        "--shared-ffn: qwen3moe has no shared expert (use --arch qwen2moe)");
  }
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WriteTestModel(spec, out, absl::StrCat("moesplit make-test-model: writing ", out)));
  PrintWritten(spec, out,
               std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start)
                   .count(),
               io.err);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
