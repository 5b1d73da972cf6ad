// moesplit inspect MODEL: what a GGUF model holds, from common/model's
// ModelSummary plus the file's own metadata.
#include <algorithm>
#include <cinttypes>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/base/status.h"
#include "common/model/model.h"
#include "services/cli/commands.h"
#include "services/cli/type_mix.h"

namespace moesplit::cli {
namespace {

std::string Bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / 1073741824.0);
  if (b >= (uint64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / 1048576.0);
  if (b >= 1024) return absl::StrFormat("%.2f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

std::string Count(int64_t n) {
  if (n >= 1000000000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1000000) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1000) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

void PrintHyperParams(const model::ModelSummary& s, std::FILE* out) {
  const model::HyperParams& hp = s.hparams;
  auto shared = s.bytes_by_role.find("shared_experts");
  const bool has_shared =
      shared != s.bytes_by_role.end() && shared->second > 0;
  std::fprintf(out, "hyper-parameters:\n");
  auto row = [out](const char* name, const std::string& value) {
    std::fprintf(out, "  %-18s %s\n", name, value.c_str());
  };
  row("n_embd", absl::StrCat(hp.n_embd));
  row("n_layer", absl::StrCat(hp.n_layer));
  if (hp.n_nextn() > 0) {
    row("nextn blocks", absl::StrCat(hp.n_nextn(), " (after the trunk; kept aside, not run)"));
  }
  row("n_ctx_train", absl::StrCat(hp.n_ctx_train));
  row("n_head", absl::StrCat(hp.n_head));
  row("n_head_kv", absl::StrCat(hp.n_head_kv));
  row("head_dim k/v", absl::StrCat(hp.head_dim_k, " / ", hp.head_dim_v));
  row("n_vocab", absl::StrCat(hp.n_vocab));
  row("n_expert", absl::StrCat(hp.n_expert));
  row("n_expert_used", absl::StrCat(hp.n_expert_used));
  row("expert_ffn", absl::StrCat(hp.n_ff_exp));
  if (has_shared) row("shared_expert_ffn", absl::StrCat(hp.n_ff_shexp));
  row("ffn", absl::StrCat(hp.n_ff));
  row("norm_topk", hp.norm_topk ? "true" : "false");
  row("rms_eps", absl::StrFormat("%g", hp.rms_eps));
  row("rope", absl::StrFormat("base %g, n_rot %d, scaling %s (x%g)",
                              hp.rope.freq_base, hp.rope.n_rot,
                              std::string(model::RopeScalingName(hp.rope.scaling)),
                              1.0 / hp.rope.freq_scale));
  if (hp.per_layer_geometry()) {
    // The layers with their own geometry (gemma4's sliding ones).
    for (int il = 0; il < static_cast<int>(hp.layers.size()); ++il) {
      if (hp.layers[il].sliding_window == 0) continue;
      row("sliding layers", absl::StrFormat(
                                "window %d, %d KV heads x %d / %d, rope base %g, n_rot %d",
                                hp.layers[il].sliding_window, hp.kv_heads(il), hp.head_k(il),
                                hp.head_v(il), hp.rope_of(il).freq_base, hp.rope_of(il).n_rot));
      break;
    }
  }
  if (!hp.rope.freq_factors.empty()) {
    row("rope divisors", absl::StrFormat("%d pairs (rope_freqs)", hp.rope.freq_factors.size()));
  }
  if (hp.final_logit_softcap != 0) row("logit soft-cap", absl::StrFormat("%g", hp.final_logit_softcap));
  if (hp.rope.multi_section) {
    row("rope sections", absl::StrFormat("%d %d %d %d (multi-section)", hp.rope.sections[0],
                                         hp.rope.sections[1], hp.rope.sections[2],
                                         hp.rope.sections[3]));
  }
  // The layer mix: runs of equal mixers ("0-2 gated_deltanet, 3 gated_attention, ...").
  std::vector<std::string> runs;
  for (int il = 0; il < static_cast<int>(hp.layers.size());) {
    int end = il;
    while (end + 1 < static_cast<int>(hp.layers.size()) &&
           hp.layers[end + 1].mixer == hp.layers[il].mixer) {
      ++end;
    }
    runs.push_back(absl::StrCat(il == end ? absl::StrCat(il) : absl::StrCat(il, "-", end), " ",
                                AbslView(model::MixerKindName(hp.layers[il].mixer))));
    il = end + 1;
  }
  if (runs.size() > 8) runs.resize(8), runs.push_back("...");
  const bool mamba2 = std::any_of(hp.layers.begin(), hp.layers.end(), [](const auto& l) {
    return l.mixer == model::MixerKind::kMamba2;
  });
  row("layers", absl::StrCat(hp.n_attention_layers(), " attention, ", hp.n_recurrent_layers(),
                             mamba2 ? " Mamba-2, " : " DeltaNet",
                             mamba2 ? absl::StrCat(hp.n_moe_layers(), " MoE") : "", ": ",
                             absl::StrJoin(runs, ", ")));
  if (mamba2) {
    row("mamba2", absl::StrFormat("%d heads x %d, state %d, %d B/C groups, conv kernel %d",
                                  hp.ssm_n_v_heads, hp.ssm_head_v, hp.ssm_head_k,
                                  hp.ssm_n_k_heads, hp.ssm_conv_kernel));
  } else if (hp.n_recurrent_layers() > 0) {
    row("deltanet", absl::StrFormat("%d key / %d value heads x %d, conv kernel %d",
                                    hp.ssm_n_k_heads, hp.ssm_n_v_heads, hp.ssm_head_k,
                                    hp.ssm_conv_kernel));
  }
}


void PrintHeader(const model::Model& m, const model::ModelSummary& s,
                 std::FILE* out) {
  const GgufFile& f = m.file();
  std::fprintf(out, "file:          %s (%s, GGUF v%u, %d part%s)\n",
               f.path().c_str(), Bytes(s.file_bytes).c_str(), f.version(),
               f.n_splits(), f.n_splits() == 1 ? "" : "s");
  std::fprintf(out, "architecture:  %s\n", s.architecture.c_str());
  std::fprintf(out, "name:          %s\n", s.name.c_str());
  auto ftype = f.GetUintOr("general.file_type", UINT32_MAX);
  if (ftype.ok() && *ftype != UINT32_MAX) {
    std::fprintf(out, "file type:     %s\n",
                 FileTypeName(static_cast<uint32_t>(*ftype)).c_str());
  }
  std::fprintf(out, "parameters:    %s (%" PRId64 ")\n",
               Count(s.n_params).c_str(), s.n_params);
}

void PrintTensors(const model::ModelSummary& s, std::FILE* out) {
  std::fprintf(out, "tensors by type (%" PRId64 " tensors):\n", s.n_tensors);
  for (const auto& [type, n] : s.tensors_by_type) {
    std::fprintf(out, "  %-18s %" PRId64 "\n", type.c_str(), n);
  }
  uint64_t total = 0;
  for (const auto& [role, b] : s.bytes_by_role) total += b;
  std::fprintf(out, "bytes by role:\n");
  // The five roles first, in this order, then any other the model reports.
  std::vector<std::string> roles = {"dense", "routed_experts", "shared_experts",
                                    "embeddings", "output"};
  for (const auto& [role, b] : s.bytes_by_role) {
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      roles.push_back(role);
    }
  }
  for (const std::string& role : roles) {
    auto it = s.bytes_by_role.find(role);
    const uint64_t b = it == s.bytes_by_role.end() ? 0 : it->second;
    std::fprintf(out, "  %-18s %12s  %5.1f%%\n", role.c_str(), Bytes(b).c_str(),
                 total ? 100.0 * b / total : 0.0);
  }
  std::fprintf(out, "  %-18s %12s\n", "total", Bytes(total).c_str());
}

}  // namespace

absl::Status RunInspect(const Args& args, const CommandIo& io) {
  std::string model_path;
  FlagParser flags;
  flags.AddString("model|m", &model_path, "GGUF model (required, or give it positionally)")
      .Meta("PATH");
  ASSIGN_OR_RETURN(bool go, ParseFlags(flags, args, "inspect MODEL", io));
  if (!go) return absl::OkStatus();
  if (model_path.empty() && flags.positional().size() == 1) {
    model_path = flags.positional()[0];
  } else if (!flags.positional().empty()) {
    return absl::InvalidArgumentError(
        "inspect takes one model path (MODEL or --model MODEL)");
  }
  if (model_path.empty()) {
    return absl::InvalidArgumentError("inspect: missing MODEL");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const model::Model> m,
                   model::Model::Open(model_path));
  const model::ModelSummary summary = m->Summary();
  PrintHeader(*m, summary, io.out);
  PrintHyperParams(summary, io.out);
  PrintTensors(summary, io.out);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
