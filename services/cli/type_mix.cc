#include "services/cli/type_mix.h"

#include <array>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moesplit::cli {
namespace {

// llama_ftype values (llama.h).
constexpr uint32_t kFtypeF32 = 0, kFtypeF16 = 1, kFtypeQ4_0 = 2,
                   kFtypeQ4_1 = 3, kFtypeQ8_0 = 7, kFtypeQ5_0 = 8,
                   kFtypeQ5_1 = 9, kFtypeQ2_K = 10, kFtypeQ3_K_S = 11,
                   kFtypeQ3_K_M = 12, kFtypeQ3_K_L = 13, kFtypeQ4_K_S = 14,
                   kFtypeQ4_K_M = 15, kFtypeQ5_K_S = 16, kFtypeQ5_K_M = 17,
                   kFtypeQ6_K = 18, kFtypeIQ4_NL = 25, kFtypeIQ4_XS = 30,
                   kFtypeBF16 = 32, kFtypeMXFP4_MOE = 38;
// The i-quant and ternary file types.
constexpr uint32_t kFtypeIQ2_XXS = 19, kFtypeIQ2_XS = 20, kFtypeIQ3_XS = 22,
                   kFtypeIQ3_XXS = 23, kFtypeIQ1_S = 24, kFtypeIQ3_S = 26,
                   kFtypeIQ3_M = 27, kFtypeIQ2_S = 28, kFtypeIQ2_M = 29,
                   kFtypeIQ1_M = 31, kFtypeTQ1_0 = 36, kFtypeTQ2_0 = 37;

constexpr std::array kMixes = {
    FileTypeMix{"F32", kFtypeF32, GgmlType::kF32, MixKind::kFloat},
    FileTypeMix{"F16", kFtypeF16, GgmlType::kF16, MixKind::kFloat},
    FileTypeMix{"BF16", kFtypeBF16, GgmlType::kBF16, MixKind::kFloat},
    FileTypeMix{"Q4_0", kFtypeQ4_0, GgmlType::kQ4_0, MixKind::kLlamaMix},
    FileTypeMix{"Q4_1", kFtypeQ4_1, GgmlType::kQ4_1, MixKind::kLlamaMix},
    FileTypeMix{"Q5_0", kFtypeQ5_0, GgmlType::kQ5_0, MixKind::kLlamaMix},
    FileTypeMix{"Q5_1", kFtypeQ5_1, GgmlType::kQ5_1, MixKind::kLlamaMix},
    FileTypeMix{"Q8_0", kFtypeQ8_0, GgmlType::kQ8_0, MixKind::kLlamaMix},
    FileTypeMix{"Q2_K", kFtypeQ2_K, GgmlType::kQ2_K, MixKind::kLlamaMix},
    FileTypeMix{"Q3_K_S", kFtypeQ3_K_S, GgmlType::kQ3_K, MixKind::kLlamaMix},
    FileTypeMix{"Q3_K_M", kFtypeQ3_K_M, GgmlType::kQ3_K, MixKind::kLlamaMix},
    FileTypeMix{"Q3_K_L", kFtypeQ3_K_L, GgmlType::kQ3_K, MixKind::kLlamaMix},
    FileTypeMix{"Q4_K_S", kFtypeQ4_K_S, GgmlType::kQ4_K, MixKind::kLlamaMix},
    FileTypeMix{"Q4_K_M", kFtypeQ4_K_M, GgmlType::kQ4_K, MixKind::kLlamaMix},
    FileTypeMix{"Q5_K_S", kFtypeQ5_K_S, GgmlType::kQ5_K, MixKind::kLlamaMix},
    FileTypeMix{"Q5_K_M", kFtypeQ5_K_M, GgmlType::kQ5_K, MixKind::kLlamaMix},
    FileTypeMix{"Q6_K", kFtypeQ6_K, GgmlType::kQ6_K, MixKind::kLlamaMix},
    FileTypeMix{"IQ4_NL", kFtypeIQ4_NL, GgmlType::kIQ4_NL, MixKind::kLlamaMix},
    FileTypeMix{"IQ4_XS", kFtypeIQ4_XS, GgmlType::kIQ4_XS, MixKind::kLlamaMix},
    FileTypeMix{"MXFP4_MOE", kFtypeMXFP4_MOE, GgmlType::kMXFP4,
                MixKind::kMxfp4Moe},
    FileTypeMix{"IQ1_S", kFtypeIQ1_S, GgmlType::kIQ1_S, MixKind::kLlamaMix},
    FileTypeMix{"IQ1_M", kFtypeIQ1_M, GgmlType::kIQ1_M, MixKind::kLlamaMix},
    FileTypeMix{"IQ2_XXS", kFtypeIQ2_XXS, GgmlType::kIQ2_XXS, MixKind::kLlamaMix},
    FileTypeMix{"IQ2_XS", kFtypeIQ2_XS, GgmlType::kIQ2_XS, MixKind::kLlamaMix},
    FileTypeMix{"IQ2_S", kFtypeIQ2_S, GgmlType::kIQ2_XS, MixKind::kLlamaMix},
    FileTypeMix{"IQ2_M", kFtypeIQ2_M, GgmlType::kIQ2_S, MixKind::kLlamaMix},
    FileTypeMix{"IQ3_XXS", kFtypeIQ3_XXS, GgmlType::kIQ3_XXS, MixKind::kLlamaMix},
    FileTypeMix{"IQ3_XS", kFtypeIQ3_XS, GgmlType::kIQ3_S, MixKind::kLlamaMix},
    FileTypeMix{"IQ3_S", kFtypeIQ3_S, GgmlType::kIQ3_S, MixKind::kLlamaMix},
    FileTypeMix{"IQ3_M", kFtypeIQ3_M, GgmlType::kIQ3_S, MixKind::kLlamaMix},
    FileTypeMix{"TQ1_0", kFtypeTQ1_0, GgmlType::kTQ1_0, MixKind::kLlamaMix},
    FileTypeMix{"TQ2_0", kFtypeTQ2_0, GgmlType::kTQ2_0, MixKind::kLlamaMix},
    FileTypeMix{"UD-IQ1_S", kFtypeIQ1_S, GgmlType::kIQ1_S, MixKind::kUdIq1S},
    // Pure: not llama.cpp file types; general.file_type says the _S variant.
    FileTypeMix{"Q3_K", kFtypeQ3_K_S, GgmlType::kQ3_K, MixKind::kPure},
    FileTypeMix{"Q4_K", kFtypeQ4_K_S, GgmlType::kQ4_K, MixKind::kPure},
    FileTypeMix{"Q5_K", kFtypeQ5_K_S, GgmlType::kQ5_K, MixKind::kPure},
};

enum class Category {
  kTokenEmbd, kOutput, kAttnQ, kAttnK, kAttnV, kAttnOutput,
  kFfnUp, kFfnGate, kFfnDown, kOther,
};

Category CategoryOf(absl::string_view name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight") return Category::kTokenEmbd;
  if (absl::StrContains(name, "attn_v.weight")) return Category::kAttnV;
  if (absl::StrContains(name, "attn_k.weight")) return Category::kAttnK;
  if (absl::StrContains(name, "attn_q.weight")) return Category::kAttnQ;
  if (absl::StrContains(name, "attn_output.weight")) {
    return Category::kAttnOutput;
  }
  if (absl::StrContains(name, "ffn_up")) return Category::kFfnUp;
  if (absl::StrContains(name, "ffn_gate")) return Category::kFfnGate;
  if (absl::StrContains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// llama.cpp's tensor_allows_quantization, for the tensors our models have.
bool Quantisable(const TensorTypeQuery& q) {
  if (q.n_dims < 2) return false;
  if (!absl::EndsWith(q.name, "weight")) return false;
  if (absl::StrContains(q.name, "_norm.weight")) return false;
  if (absl::StrContains(q.name, "ffn_gate_inp.weight")) return false;
  if (absl::StrContains(q.name, "ssm_conv1d")) return false;  // tiny conv taps
  return true;
}

int LayerOf(absl::string_view name) {
  int layer = 0;
  const std::string s(name);
  if (std::sscanf(s.c_str(), "blk.%d.", &layer) != 1) return 0;
  return layer;
}

bool UseMoreBits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool Is(const FileTypeMix& mix, uint32_t ftype) {
  return mix.llama_ftype == ftype && mix.kind == MixKind::kLlamaMix;
}

GgmlType AttnVType(const FileTypeMix& m, const TensorTypeQuery& q, int i,
                   GgmlType t) {
  if (Is(m, kFtypeQ2_K)) {
    t = q.n_gqa >= 4 ? GgmlType::kQ4_K : GgmlType::kQ3_K;
  } else if (Is(m, kFtypeIQ3_XXS)) {  // with the importance matrix IQ3_XXS needs
    t = q.n_gqa >= 4 ? GgmlType::kQ4_K : GgmlType::kIQ3_XXS;
  } else if ((Is(m, kFtypeIQ3_XS) || Is(m, kFtypeIQ3_S)) && q.n_gqa >= 4) {
    t = GgmlType::kQ4_K;
  } else if (Is(m, kFtypeIQ3_M)) {
    t = GgmlType::kQ4_K;
  } else if (Is(m, kFtypeQ3_K_M)) {
    t = i < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
  } else if (Is(m, kFtypeQ3_K_L)) {
    t = GgmlType::kQ5_K;
  } else if ((Is(m, kFtypeIQ4_NL) || Is(m, kFtypeIQ4_XS)) && q.n_gqa >= 4) {
    t = GgmlType::kQ5_K;
  } else if ((Is(m, kFtypeQ4_K_M) || Is(m, kFtypeQ5_K_M)) &&
             UseMoreBits(i, q.n_layer)) {
    t = GgmlType::kQ6_K;
  } else if (Is(m, kFtypeQ4_K_S) && i < 4) {
    t = GgmlType::kQ5_K;
  }
  if (q.n_expert == 8) t = GgmlType::kQ8_0;
  return t;
}

GgmlType FfnDownType(const FileTypeMix& m, const TensorTypeQuery& q, int i,
                     GgmlType t) {
  const int n = q.n_layer;
  if (Is(m, kFtypeQ2_K)) return GgmlType::kQ3_K;
  if (Is(m, kFtypeQ3_K_M)) {
    return i < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
  }
  if (Is(m, kFtypeQ3_K_L)) return GgmlType::kQ5_K;
  if (Is(m, kFtypeQ4_K_M) || Is(m, kFtypeQ5_K_M)) {
    return UseMoreBits(i, n) ? GgmlType::kQ6_K : t;
  }
  if ((Is(m, kFtypeIQ4_NL) || Is(m, kFtypeIQ4_XS)) && i < n / 8) {
    return GgmlType::kQ5_K;
  }
  if (Is(m, kFtypeQ4_K_S) && i < n / 8) return GgmlType::kQ5_K;
  if (Is(m, kFtypeIQ3_M) && (i < n / 8 || (q.n_expert == 8 && UseMoreBits(i, n)))) {
    return GgmlType::kQ4_K;
  }
  return t;
}

GgmlType AttnOutputType(const FileTypeMix& m, const TensorTypeQuery& q,
                        GgmlType t) {
  if (q.n_expert == 8) {
    for (uint32_t f : {kFtypeQ2_K, kFtypeIQ3_XS, kFtypeIQ3_XXS, kFtypeQ3_K_S,
                       kFtypeQ3_K_M, kFtypeIQ4_NL, kFtypeQ4_K_S, kFtypeQ4_K_M,
                       kFtypeIQ3_S, kFtypeIQ3_M, kFtypeIQ4_XS}) {
      if (Is(m, f)) return GgmlType::kQ5_K;
    }
    return t;
  }
  if (Is(m, kFtypeQ2_K)) return GgmlType::kQ3_K;
  if (Is(m, kFtypeIQ3_XXS)) return GgmlType::kIQ3_S;
  if (Is(m, kFtypeQ3_K_M)) return GgmlType::kQ4_K;
  if (Is(m, kFtypeQ3_K_L)) return GgmlType::kQ5_K;
  if (Is(m, kFtypeIQ3_M)) return GgmlType::kQ4_K;
  return t;
}

// llama.cpp's tensor_type_fallback, extended to F16 for the 32-blocks.
GgmlType Fallback(GgmlType t, int64_t ne0) {
  if (ne0 % TypeInfo(t).block_size == 0) return t;
  GgmlType next = GgmlType::kF16;
  switch (t) {
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ4_XS: next = GgmlType::kIQ4_NL; break;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kTQ1_0:
    case GgmlType::kTQ2_0: next = GgmlType::kQ4_0; break;
    case GgmlType::kQ4_K: next = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: next = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: next = GgmlType::kQ8_0; break;
    default: break;
  }
  return ne0 % TypeInfo(next).block_size == 0 ? next : GgmlType::kF16;
}

// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M: llama.cpp's branch for the
// lowest-bit file types, which replaces the general attn_v / attn_k /
// ffn_down / attn_output rules.
bool IsLowBitIq(const FileTypeMix& m) {
  for (uint32_t f : {kFtypeIQ2_XXS, kFtypeIQ2_XS, kFtypeIQ1_S, kFtypeIQ2_S, kFtypeIQ2_M, kFtypeIQ1_M}) {
    if (Is(m, f)) return true;
  }
  return false;
}

GgmlType LowBitIqType(const FileTypeMix& m, const TensorTypeQuery& q, Category cat, int i,
                      GgmlType t) {
  const bool iq2_sm = Is(m, kFtypeIQ2_S) || Is(m, kFtypeIQ2_M);
  const bool iq1 = Is(m, kFtypeIQ1_S) || Is(m, kFtypeIQ1_M);
  switch (cat) {
    case Category::kAttnV:
      if (q.n_gqa >= 4 || q.n_expert >= 4) return GgmlType::kQ4_K;
      return iq2_sm ? GgmlType::kIQ3_S : GgmlType::kQ2_K;
    case Category::kAttnK: return q.n_expert == 8 ? GgmlType::kQ4_K : t;
    case Category::kFfnDown:
      if (i < q.n_layer / 8) return iq2_sm ? GgmlType::kIQ3_S : GgmlType::kQ2_K;
      return t;
    case Category::kAttnOutput:
      if (q.n_expert == 8) return GgmlType::kQ5_K;
      if (iq1) return GgmlType::kIQ2_XXS;
      return iq2_sm ? GgmlType::kIQ3_S : t;
    default: return t;
  }
}

GgmlType TokenEmbdType(const FileTypeMix& m, GgmlType t) {
  if (Is(m, kFtypeIQ2_XXS) || Is(m, kFtypeIQ2_XS) || Is(m, kFtypeIQ1_S) || Is(m, kFtypeIQ1_M)) {
    return GgmlType::kQ2_K;
  }
  if (Is(m, kFtypeIQ2_S) || Is(m, kFtypeIQ2_M) || Is(m, kFtypeIQ3_XXS)) return GgmlType::kIQ3_S;
  if (Is(m, kFtypeTQ1_0) || Is(m, kFtypeTQ2_0)) return GgmlType::kQ4_K;
  return t;
}

// The UD-IQ1_S-like mix (type_mix.h).
GgmlType UdIq1SType(const TensorTypeQuery& q) {
  if (CategoryOf(q.name) == Category::kOutput) return GgmlType::kQ8_0;
  if (q.n_dims >= 3 && absl::StrContains(q.name, "_exps")) {  // routed experts (not MLA's 3-D attn_k_b)
    if (CategoryOf(q.name) != Category::kFfnDown) return GgmlType::kIQ1_S;
    const int i = LayerOf(q.name), n = q.n_layer;
    return i < n / 8 || i >= 7 * n / 8 ? GgmlType::kIQ2_XXS : GgmlType::kIQ1_M;
  }
  if (absl::StrContains(q.name, "attn_v.weight") || absl::StrContains(q.name, "attn_kv_b.weight") ||
      absl::StrContains(q.name, "attn_v_b.weight")) {
    return GgmlType::kQ6_K;
  }
  return GgmlType::kQ4_K;
}

GgmlType MixType(const FileTypeMix& m, const TensorTypeQuery& q) {
  if (m.kind == MixKind::kUdIq1S) return UdIq1SType(q);
  const Category cat = CategoryOf(q.name);
  const int layer = LayerOf(q.name);
  GgmlType t = m.base;
  if (cat == Category::kOutput) {
    if (m.kind == MixKind::kMxfp4Moe) return GgmlType::kQ8_0;
    if (q.ne0 % TypeInfo(t).block_size != 0) return GgmlType::kQ8_0;
    if (IsLowBitIq(m) || Is(m, kFtypeIQ3_XXS)) return GgmlType::kQ5_K;
    return t == GgmlType::kQ8_0 ? t : GgmlType::kQ6_K;
  }
  if (m.kind == MixKind::kMxfp4Moe) {
    return q.n_dims >= 3 ? GgmlType::kMXFP4 : GgmlType::kQ8_0;
  }
  if (cat == Category::kTokenEmbd) return TokenEmbdType(m, t);
  if (IsLowBitIq(m)) return LowBitIqType(m, q, cat, layer, t);
  const bool iq3_xs_middle =
      Is(m, kFtypeIQ3_XS) && layer >= q.n_layer / 8 && layer < 7 * q.n_layer / 8;
  switch (cat) {
    case Category::kAttnV: return AttnVType(m, q, layer, t);
    case Category::kAttnK:
      if (q.n_expert == 8) return GgmlType::kQ8_0;
      if (Is(m, kFtypeIQ3_XS)) return GgmlType::kIQ3_XXS;
      if (Is(m, kFtypeIQ3_XXS)) return GgmlType::kIQ2_S;
      return t;
    case Category::kAttnQ:
      if (Is(m, kFtypeIQ3_XS)) return GgmlType::kIQ3_XXS;
      if (Is(m, kFtypeIQ3_XXS)) return GgmlType::kIQ2_S;
      return t;
    case Category::kFfnDown: return FfnDownType(m, q, layer, t);
    case Category::kAttnOutput: return AttnOutputType(m, q, t);
    case Category::kFfnUp:
    case Category::kFfnGate: return iq3_xs_middle ? GgmlType::kIQ3_XXS : t;
    default: return t;
  }
}

}  // namespace

absl::StatusOr<FileTypeMix> LookupFileTypeMix(absl::string_view name) {
  for (const FileTypeMix& m : kMixes) {
    if (absl::EqualsIgnoreCase(m.name, name)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported type '", name, "' (supported: ",
                   absl::StrJoin(FileTypeMixNames(), ", "), ")"));
}

std::string FileTypeName(uint32_t llama_ftype) {
  for (const FileTypeMix& m : kMixes) {  // llama.cpp names come first
    if (m.llama_ftype == llama_ftype) return std::string(m.name);
  }
  return absl::StrCat("ftype ", llama_ftype);
}

std::vector<absl::string_view> FileTypeMixNames() {
  std::vector<absl::string_view> names;
  for (const FileTypeMix& m : kMixes) names.push_back(m.name);
  return names;
}

GgmlType PickTensorType(const FileTypeMix& mix, const TensorTypeQuery& q) {
  if (!Quantisable(q)) return GgmlType::kF32;
  if (mix.kind == MixKind::kFloat) return mix.base;
  const GgmlType t =
      mix.kind == MixKind::kPure ? mix.base : MixType(mix, q);
  return Fallback(t, q.ne0);
}

}  // namespace moesplit::cli
