// `moesplit logits` (the real binary) against the engine called in-process,
// and against llama.cpp's logits for a fixture model.
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/cli/test_model.h"

namespace moesplit::cli {
namespace {

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  EXPECT_EQ(bytes.size() % 4, 0u) << path;
  return out;
}

int RunBinary(const std::string& args) {
  const std::string cmd = absl::StrCat(MOESPLIT_CLI_BINARY, " ", args);
  return std::system(cmd.c_str());
}

class LogitsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("moesplit_logits_test_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(LogitsTest, EqualsTheEngineInProcess) {
  TestModelSpec spec;
  spec.n_layer = 2;
  spec.n_vocab = 400;
  spec.type = "Q4_K_M";
  const std::string model = Path("m.gguf");
  ASSERT_TRUE(WriteTestModel(spec, model).ok());
  const std::vector<int32_t> tokens = {3, 399, 0, 77, 77, 150};
  const std::string out = Path("logits.f32");
  ASSERT_EQ(RunBinary(absl::StrCat("logits --threads 1 --model ", model,
                                   " --tokens ", absl::StrJoin(tokens, ","),
                                   " --out ", out, " 2>/dev/null")),
            0);
  const std::vector<float> got = ReadFloats(out);
  EXPECT_EQ(std::filesystem::file_size(out), tokens.size() * 400 * 4);

  auto m = model::Model::Open(model);
  ASSERT_TRUE(m.ok()) << m.status();
  model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
  model::Forward fwd(*m, &experts, nullptr);
  auto cache = model::SequenceState::Create((*m)->hparams(), tokens.size());
  ASSERT_TRUE(cache.ok());
  std::vector<float> want;
  ASSERT_TRUE(
      fwd.Eval(tokens, cache->get(), model::LogitsMode::kAll, &want).ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "logit " << i;
  }
}

// The CLI reproduces llama.cpp's logits on the f16 fixtures (the suggested
// oracle acceptance: per-position NMSE <= 1e-4 on >= 95% of positions).
class FixtureLogitsTest : public LogitsTest, public testing::WithParamInterface<std::string> {};

TEST_P(FixtureLogitsTest, MatchesLlamaCppOnTheF16Fixture) {
  const std::string base = absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/", GetParam());
  std::ifstream json_in(base + ".json");
  ASSERT_TRUE(json_in.good());
  const nlohmann::json cases = nlohmann::json::parse(json_in);
  const nlohmann::json& list = cases.is_array() ? cases : cases["cases"];
  ASSERT_FALSE(list.empty());
  int positions = 0, good = 0;
  for (const nlohmann::json& c : list) {
    const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
    const std::string out = Path("f16.f32");
    ASSERT_EQ(RunBinary(absl::StrCat("logits --model ", base, ".gguf",
                                     " --tokens ", absl::StrJoin(tokens, ","),
                                     " --out ", out, " 2>/dev/null")),
              0);
    const std::vector<float> got = ReadFloats(out);
    const std::vector<float> ref = ReadFloats(
        absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/",
                     c["logits_file"].get<std::string>()));
    ASSERT_EQ(got.size(), ref.size());
    const size_t n_vocab = ref.size() / tokens.size();
    for (size_t t = 0; t < tokens.size(); ++t) {
      double err = 0, norm = 0;
      for (size_t i = t * n_vocab; i < (t + 1) * n_vocab; ++i) {
        err += (got[i] - ref[i]) * static_cast<double>(got[i] - ref[i]);
        norm += ref[i] * static_cast<double>(ref[i]);
      }
      ++positions;
      good += err / norm <= 1e-4;
    }
  }
  EXPECT_GE(good, 0.95 * positions) << good << " of " << positions;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureLogitsTest,
                         testing::Values("qwen3moe-tiny-f16", "qwen35moe-tiny-f16", "gptoss-tiny-f16",
                                         "deepseek2-tiny-f16", "minimaxm2-tiny-f16",
                                         "qwen3next-tiny-f16", "qwen3next-ssmin-tiny-f16",
                                         "gemma4-tiny-f16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });
// Files with a NextN / MTP block: their logits are the trunk's (issue #41).
INSTANTIATE_TEST_SUITE_P(NextN, FixtureLogitsTest,
                         testing::Values("glm4moe-tiny-f16", "glm47flash-tiny-f16",
                                         "qwen35moe-mtp-tiny-f16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

}  // namespace
}  // namespace moesplit::cli
