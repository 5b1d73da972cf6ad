#include "services/cli/generation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moesplit::cli {
namespace {

constexpr int32_t kVocab = 300;

// Logits that make `id` the argmax.
std::vector<float> OneHot(int32_t id) {
  std::vector<float> l(kVocab, 0.0f);
  l[id] = 10.0f;
  return l;
}

struct Case {
  std::string what;
  std::vector<int32_t> script;  // the argmax after the prompt, then per eval
  int64_t n_max;
  std::vector<std::string> want_pieces;
  std::vector<int32_t> want_tokens;
  bool want_end;
  int want_evals;
};

class GenerationTest : public testing::Test {
 protected:
  void SetUp() override {
    auto spec = MakeTestVocab(kVocab);
    ASSERT_TRUE(spec.ok());
    auto tok = Tokenizer::FromSpec(*spec);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    eos_ = spec->eos;
    im_start_ = tokenizer_->FindToken("<|im_start|>");
    ASSERT_GE(im_start_, 0);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  int32_t eos_ = -1;
  int32_t im_start_ = -1;
};

TEST_F(GenerationTest, StreamsAndStops) {
  const std::vector<Case> cases = {
      {"stops at eos, eos not emitted", {'H', 'i', eos_, 'x'}, 10,
       {"H", "i"}, {'H', 'i', eos_}, true, 2},
      {"n_max reached, no eval after the last", {'H', 'i', 'x'}, 2,
       {"H", "i"}, {'H', 'i'}, false, 1},
      {"n_max 0", {'H'}, 0, {}, {}, false, 0},
      // U+00E9 is C3 A9: held back until complete.
      {"split character", {0xC3, 0xA9, '!'}, 3, {"\xC3\xA9", "!"},
       {0xC3, 0xA9, '!'}, false, 2},
      {"incomplete character at the end", {'a', 0xC3}, 2, {"a", "\xEF\xBF\xBD"},
       {'a', 0xC3}, false, 1},
      {"control token renders as nothing", {im_start_, 'o', 'k'}, 3,
       {"o", "k"}, {im_start_, 'o', 'k'}, false, 2},
  };
  for (const Case& c : cases) {
    auto sampler = Sampler::Create(SamplingParams{.temperature = 0}, kVocab);
    ASSERT_TRUE(sampler.ok());
    size_t step = 0;
    int evals = 0;
    std::vector<std::string> pieces;
    auto eval = [&](int32_t token, std::vector<float>* logits) {
      EXPECT_EQ(token, c.script[step]) << c.what;
      ++evals;
      *logits = OneHot(c.script[++step]);
      return absl::OkStatus();
    };
    auto emit = [&](absl::string_view s) { pieces.emplace_back(s); };
    auto r = GenerateTokens(*tokenizer_, *sampler, OneHot(c.script[0]),
                            c.n_max, eval, emit);
    ASSERT_TRUE(r.ok()) << c.what << ": " << r.status();
    EXPECT_EQ(pieces, c.want_pieces) << c.what;
    EXPECT_EQ(r->tokens, c.want_tokens) << c.what;
    EXPECT_EQ(r->stopped_at_end, c.want_end) << c.what;
    EXPECT_EQ(evals, c.want_evals) << c.what;
  }
}

TEST_F(GenerationTest, EvalErrorsStopTheLoop) {
  auto sampler = Sampler::Create(SamplingParams{.temperature = 0}, kVocab);
  ASSERT_TRUE(sampler.ok());
  std::string text;
  auto r = GenerateTokens(
      *tokenizer_, *sampler, OneHot('a'), 5,
      [](int32_t, std::vector<float>*) {
        return absl::OutOfRangeError("cache full");
      },
      [&](absl::string_view s) { text.append(s.data(), s.size()); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(text, "a");
}

}  // namespace
}  // namespace moesplit::cli
