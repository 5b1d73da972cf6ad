#include "common/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

struct ValidationCase {
  const char* name;
  std::function<void(SamplingParams&)> edit;
  int n_vocab;
  std::string error;  // empty: must be OK
};

TEST(ValidateTest, Table) {
  const float nan = std::nanf("");
  const ValidationCase cases[] = {
      {"defaults", [](SamplingParams&) {}, 100, ""},
      {"greedy", [](SamplingParams& p) { p.temperature = 0; }, 100, ""},
      {"all edges ok",
       [](SamplingParams& p) {
         p.temperature = 2;
         p.top_k = 1000;
         p.top_p = 1e-6f;
         p.min_p = 1;
         p.repetition_penalty = 1e-3f;
         p.presence_penalty = -2;
         p.frequency_penalty = 2;
         p.penalty_last_n = -1;
         p.logprobs = 20;
       },
       100, ""},
      {"n_vocab 0", [](SamplingParams&) {}, 0, "n_vocab must be > 0, got 0"},
      {"temperature 3", [](SamplingParams& p) { p.temperature = 3; }, 10,
       "temperature must be in [0, 2], got 3"},
      {"temperature -0.5", [](SamplingParams& p) { p.temperature = -0.5f; },
       10, "temperature must be in [0, 2], got -0.5"},
      {"temperature nan", [nan](SamplingParams& p) { p.temperature = nan; },
       10, "temperature must be in [0, 2], got nan"},
      {"top_k -1", [](SamplingParams& p) { p.top_k = -1; }, 10,
       "top_k must be >= 0 (0 disables it), got -1"},
      {"top_p 2", [](SamplingParams& p) { p.top_p = 2; }, 10,
       "top_p must be in (0, 1], got 2"},
      {"top_p 0", [](SamplingParams& p) { p.top_p = 0; }, 10,
       "top_p must be in (0, 1], got 0"},
      {"min_p 1.5", [](SamplingParams& p) { p.min_p = 1.5f; }, 10,
       "min_p must be in [0, 1], got 1.5"},
      {"min_p -0.1", [](SamplingParams& p) { p.min_p = -0.25f; }, 10,
       "min_p must be in [0, 1], got -0.25"},
      {"repetition 0", [](SamplingParams& p) { p.repetition_penalty = 0; },
       10, "repetition_penalty must be a finite number > 0, got 0"},
      {"repetition -1", [](SamplingParams& p) { p.repetition_penalty = -1; },
       10, "repetition_penalty must be a finite number > 0, got -1"},
      {"repetition inf",
       [](SamplingParams& p) { p.repetition_penalty = INFINITY; }, 10,
       "repetition_penalty must be a finite number > 0, got inf"},
      {"presence 3", [](SamplingParams& p) { p.presence_penalty = 3; }, 10,
       "presence_penalty must be in [-2, 2], got 3"},
      {"presence -2.5", [](SamplingParams& p) { p.presence_penalty = -2.5f; },
       10, "presence_penalty must be in [-2, 2], got -2.5"},
      {"frequency -3", [](SamplingParams& p) { p.frequency_penalty = -3; },
       10, "frequency_penalty must be in [-2, 2], got -3"},
      {"last_n -2", [](SamplingParams& p) { p.penalty_last_n = -2; }, 10,
       "penalty_last_n must be >= -1 (-1: whole history, 0: off), got -2"},
      {"logprobs 21", [](SamplingParams& p) { p.logprobs = 21; }, 10,
       "logprobs must be in [0, 20], got 21"},
      {"logprobs -1", [](SamplingParams& p) { p.logprobs = -1; }, 10,
       "logprobs must be in [0, 20], got -1"},
      {"new filters at their edges",
       [](SamplingParams& p) {
         p.typical_p = 0;
         p.top_n_sigma = -5;
         p.xtc_probability = 1;
         p.xtc_threshold = 1;
         p.logit_bias = {{0, -INFINITY}, {99, 100}, {99, -3.5f}};
       },
       100, ""},
      {"typical_p 1.5", [](SamplingParams& p) { p.typical_p = 1.5f; }, 10,
       "typical_p must be in [0, 1] (1 disables it), got 1.5"},
      {"top_n_sigma inf", [](SamplingParams& p) { p.top_n_sigma = INFINITY; }, 10,
       "top_n_sigma must be a finite number (<= 0 disables it), got inf"},
      {"xtc_probability -1", [](SamplingParams& p) { p.xtc_probability = -1; }, 10,
       "xtc_probability must be in [0, 1] (0 disables it), got -1"},
      {"xtc_threshold 2", [](SamplingParams& p) { p.xtc_threshold = 2; }, 10,
       "xtc_threshold must be in [0, 1] (> 0.5 disables it), got 2"},
      {"logit_bias token 10", [](SamplingParams& p) { p.logit_bias = {{10, 1}}; }, 10,
       "logit_bias: token id 10 is outside the vocabulary [0, 10)"},
      {"logit_bias token -1", [](SamplingParams& p) { p.logit_bias = {{-1, 1}}; }, 10,
       "logit_bias: token id -1 is outside the vocabulary [0, 10)"},
      {"logit_bias +inf", [](SamplingParams& p) { p.logit_bias = {{3, INFINITY}}; }, 10,
       "logit_bias: the bias of token 3 must be a finite number or -inf (false), got inf"},
      {"logit_bias nan", [nan](SamplingParams& p) { p.logit_bias = {{3, nan}}; }, 10,
       "logit_bias: the bias of token 3 must be a finite number or -inf (false), got nan"},
      {"first bad field wins",
       [](SamplingParams& p) {
         p.top_p = 5;
         p.temperature = 9;
       },
       10, "temperature must be in [0, 2], got 9"},
  };
  for (const ValidationCase& c : cases) {
    SamplingParams p;
    c.edit(p);
    const absl::Status s = Validate(p, c.n_vocab);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_EQ(std::string(s.message()), c.error) << c.name;
    }
  }
}

}  // namespace
}  // namespace moesplit
