#include "services/cli/type_mix.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf/gguf.h"
#include "gtest/gtest.h"

namespace moesplit::cli {
namespace {

// Every llama.cpp-quantised fixture: our choice must equal llama.cpp's for
// every tensor (these models have 4 layers, 8 experts, GQA 2).
struct FixtureCase {
  std::string file;
  std::string mix;
};

TEST(TypeMixTest, MatchesLlamaQuantizeOnEveryFixture) {
  const std::vector<FixtureCase> cases = {
      {"qwen3moe-tiny-f16", "F16"},       {"qwen3moe-tiny-q8_0", "Q8_0"},
      {"qwen3moe-tiny-q4_0", "Q4_0"},     {"qwen3moe-tiny-q2_k", "Q2_K"},
      {"qwen3moe-tiny-q3_k_m", "Q3_K_M"}, {"qwen3moe-tiny-q4_k_m", "Q4_K_M"},
      {"qwen3moe-tiny-q6_k", "Q6_K"},     {"qwen3moe-tiny-iq4_nl", "IQ4_NL"},
      {"qwen3moe-tiny-iq4_xs", "IQ4_XS"}, {"qwen3moe-tiny-mxfp4_moe", "MXFP4_MOE"},
      {"qwen2moe-tiny-q8_0", "Q8_0"},     {"qwen2moe-tiny-q4_k_m", "Q4_K_M"},
      {"qwen3moe-tiny-iq1_s", "IQ1_S"},   {"qwen3moe-tiny-iq1_m", "IQ1_M"},
      {"qwen3moe-tiny-iq2_xxs", "IQ2_XXS"}, {"qwen3moe-tiny-iq2_xs", "IQ2_XS"},
      {"qwen3moe-tiny-iq2_m", "IQ2_M"},   {"qwen3moe-tiny-iq3_xxs", "IQ3_XXS"},
      {"qwen3moe-tiny-iq3_s", "IQ3_S"},
  };
  for (const FixtureCase& c : cases) {
    const std::string path =
        absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/", c.file, ".gguf");
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto mix = LookupFileTypeMix(c.mix);
    ASSERT_TRUE(mix.ok()) << mix.status();
    const std::string arch = *(*file)->GetString("general.architecture");
    const int n_layer = *(*file)->GetUint(arch + ".block_count");
    const int n_expert = *(*file)->GetUint(arch + ".expert_count");
    const int n_gqa = *(*file)->GetUint(arch + ".attention.head_count") /
                      *(*file)->GetUint(arch + ".attention.head_count_kv");
    EXPECT_EQ(*(*file)->GetUint("general.file_type"), mix->llama_ftype)
        << c.file;
    for (const GgufTensor& t : (*file)->tensors()) {
      TensorTypeQuery q{t.name, t.n_dims, t.ne[0], n_layer, n_expert, n_gqa};
      EXPECT_EQ(GgmlTypeName(PickTensorType(*mix, q)), GgmlTypeName(t.type))
          << c.file << " " << t.name;
    }
  }
}

// Qwen3-30B-A3B (48 layers, 128 experts, GQA 8) in Q4_K_M.
TEST(TypeMixTest, Qwen3_30B_Q4_K_M) {
  auto mix = LookupFileTypeMix("q4_k_m");
  ASSERT_TRUE(mix.ok());
  auto pick = [&](std::string name, int n_dims, int64_t ne0) {
    return PickTensorType(*mix, {name, n_dims, ne0, 48, 128, 8});
  };
  const std::vector<int> q6_layers = {0,  1,  2,  3,  4,  5,  8,  11, 14, 17,
                                      20, 23, 26, 29, 32, 35, 38, 41, 42, 43,
                                      44, 45, 46, 47};
  for (int i = 0; i < 48; ++i) {
    const bool q6 = std::find(q6_layers.begin(), q6_layers.end(), i) !=
                    q6_layers.end();
    const GgmlType want = q6 ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    const std::string blk = absl::StrCat("blk.", i, ".");
    EXPECT_EQ(pick(blk + "attn_v.weight", 2, 2048), want) << i;
    EXPECT_EQ(pick(blk + "ffn_down_exps.weight", 3, 768), want) << i;
    EXPECT_EQ(pick(blk + "attn_k.weight", 2, 2048), GgmlType::kQ4_K) << i;
    EXPECT_EQ(pick(blk + "attn_output.weight", 2, 4096), GgmlType::kQ4_K);
    EXPECT_EQ(pick(blk + "ffn_up_exps.weight", 3, 2048), GgmlType::kQ4_K);
    EXPECT_EQ(pick(blk + "ffn_gate_inp.weight", 2, 2048), GgmlType::kF32);
    EXPECT_EQ(pick(blk + "attn_q_norm.weight", 1, 128), GgmlType::kF32);
  }
  EXPECT_EQ(pick("output.weight", 2, 2048), GgmlType::kQ6_K);
  EXPECT_EQ(pick("token_embd.weight", 2, 2048), GgmlType::kQ4_K);
  EXPECT_EQ(pick("output_norm.weight", 1, 2048), GgmlType::kF32);
}

TEST(TypeMixTest, PureTypesAndShapeFallbacks) {
  auto q4k = LookupFileTypeMix("Q4_K");
  ASSERT_TRUE(q4k.ok());
  EXPECT_EQ(q4k->kind, MixKind::kPure);
  const TensorTypeQuery out{"output.weight", 2, 256, 4, 8, 2};
  EXPECT_EQ(PickTensorType(*q4k, out), GgmlType::kQ4_K);
  const TensorTypeQuery odd{"blk.0.attn_q.weight", 2, 96, 4, 8, 2};
  EXPECT_EQ(PickTensorType(*q4k, odd), GgmlType::kQ5_0);
  const TensorTypeQuery odder{"blk.0.attn_q.weight", 2, 48, 4, 8, 2};
  EXPECT_EQ(PickTensorType(*q4k, odder), GgmlType::kF16);
  auto q4km = LookupFileTypeMix("Q4_K_M");
  const TensorTypeQuery out96{"output.weight", 2, 96, 4, 8, 2};
  EXPECT_EQ(PickTensorType(*q4km, out96), GgmlType::kQ8_0);
}

// The UD-IQ1_S-like mix on DeepSeek-V3's tensors (61 layers, 256 experts).
TEST(TypeMixTest, UdIq1SLikeMix) {
  auto mix = LookupFileTypeMix("ud-iq1_s");
  ASSERT_TRUE(mix.ok()) << mix.status();
  EXPECT_EQ(mix->llama_ftype, 24u);  // IQ1_S, as unsloth's files say
  EXPECT_EQ(FileTypeName(24), "IQ1_S");
  auto pick = [&](std::string name, int n_dims, int64_t ne0) {
    return std::string(GgmlTypeName(PickTensorType(*mix, {name, n_dims, ne0, 61, 256, 128})));
  };
  EXPECT_EQ(pick("blk.3.ffn_gate_exps.weight", 3, 7168), "IQ1_S");
  EXPECT_EQ(pick("blk.3.ffn_up_exps.weight", 3, 7168), "IQ1_S");
  EXPECT_EQ(pick("blk.3.ffn_down_exps.weight", 3, 2048), "IQ2_XXS");   // 3 < 61 / 8
  EXPECT_EQ(pick("blk.30.ffn_down_exps.weight", 3, 2048), "IQ1_M");
  EXPECT_EQ(pick("blk.60.ffn_down_exps.weight", 3, 2048), "IQ2_XXS");  // 60 >= 7 * 61 / 8
  EXPECT_EQ(pick("blk.3.ffn_down_shexp.weight", 2, 2048), "Q4_K");
  EXPECT_EQ(pick("blk.0.ffn_down.weight", 2, 18432), "Q4_K");
  EXPECT_EQ(pick("blk.3.attn_kv_b.weight", 2, 512), "Q6_K");
  EXPECT_EQ(pick("blk.3.attn_q_b.weight", 2, 1536), "Q4_K");
  EXPECT_EQ(pick("blk.3.attn_output.weight", 2, 16384), "Q4_K");
  EXPECT_EQ(pick("blk.3.ffn_gate_inp.weight", 2, 7168), "F32");
  EXPECT_EQ(pick("output.weight", 2, 7168), "Q8_0");
  EXPECT_EQ(pick("token_embd.weight", 2, 7168), "Q4_K");
  EXPECT_EQ(pick("blk.3.attn_k_b.weight", 3, 128), "Q5_0");  // not whole Q4_K blocks
}

TEST(TypeMixTest, RejectsUnknownNames) {
  for (const char* name : {"Q4_K_X", "IQ5_K", "", "f8"}) {
    auto m = LookupFileTypeMix(name);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_TRUE(LookupFileTypeMix("bf16").ok());
}

}  // namespace
}  // namespace moesplit::cli
