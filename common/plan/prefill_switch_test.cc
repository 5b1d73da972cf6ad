#include "common/plan/prefill_switch.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::plan {
namespace {

using ::testing::HasSubstr;

// A Qwen3-30B-A3B expert (d 2048, FFN 768, Q4_K/Q6_K: 3,059,712 bytes).
PrefillRates Qwen3Rates() {
  PrefillRates r = ModelPrefillRates(2048, 768, 3059712);
  EXPECT_EQ(r.activation_bytes_per_token, 2u * 2048 * 4);
  r.cpu_tokens_per_s = 2000;    // 0.5 ms per token
  r.gpu_flops_per_s = 100e12;
  r.h2d_bytes_per_s = 25e9;
  return r;
}

TEST(PrefillSwitchTest, FlopsPerToken) {
  EXPECT_DOUBLE_EQ(ExpertFlopsPerToken(2048, 768), 9437184.0);
}

TEST(PrefillSwitchTest, HandComputedThreshold) {
  const PrefillRates r = Qwen3Rates();
  absl::StatusOr<PrefillSwitch> s = ComputePrefillSwitch(r);
  ASSERT_TRUE(s.ok()) << s.status();
  // copy = 3059712 / 25e9 = 122.38848 us; c = 500 us; a = 16384 / 25e9 =
  // 0.65536 us; copy / (c - a) = 122.38848 / 499.34464 = 0.2451 -> 1 token.
  EXPECT_DOUBLE_EQ(s->copy_seconds, 3059712 / 25e9);
  ASSERT_TRUE(s->threshold_tokens.has_value());
  EXPECT_EQ(*s->threshold_tokens, 1);

  // A fast CPU (1 us per token): copy / (1 - 0.65536) us = 355.14 -> 356.
  PrefillRates fast = r;
  fast.cpu_tokens_per_s = 1e6;
  s = ComputePrefillSwitch(fast);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->threshold_tokens.has_value());
  EXPECT_EQ(*s->threshold_tokens, 356);
}

TEST(PrefillSwitchTest, ThresholdIsTheCrossingPoint) {
  // At the threshold the GPU wins, one token below it does not.
  for (double cpu : {5e4, 1e5, 3e5}) {
    for (double bw : {8e9, 25e9, 50e9}) {
      PrefillRates r = Qwen3Rates();
      r.cpu_tokens_per_s = cpu;
      r.h2d_bytes_per_s = bw;
      absl::StatusOr<PrefillSwitch> s = ComputePrefillSwitch(r);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(s->threshold_tokens.has_value()) << cpu << " " << bw;
      auto gpu = [&](double n) {
        return std::max(s->copy_seconds, n * r.flops_per_token / r.gpu_flops_per_s) +
               n * r.activation_bytes_per_token / r.h2d_bytes_per_s;
      };
      const double n = static_cast<double>(*s->threshold_tokens);
      EXPECT_LT(gpu(n), n / cpu) << cpu << " " << bw;
      if (n > 1) {
        EXPECT_GE(gpu(n - 1), (n - 1) / cpu) << cpu << " " << bw;
      }
    }
  }
}

TEST(PrefillSwitchTest, NeverWhenTheGpuIsSlowerPerToken) {
  PrefillRates r = Qwen3Rates();
  r.cpu_tokens_per_s = 1e8;  // 10 ns per token, less than the activation copy
  absl::StatusOr<PrefillSwitch> s = ComputePrefillSwitch(r);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->threshold_tokens.has_value());
}

TEST(PrefillSwitchTest, RejectsBadRates) {
  PrefillRates r = Qwen3Rates();
  r.h2d_bytes_per_s = 0;
  EXPECT_THAT(ComputePrefillSwitch(r).status().message(), HasSubstr("h2d_bytes_per_s"));
  r = Qwen3Rates();
  r.cpu_tokens_per_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(ComputePrefillSwitch(r).status().message(), HasSubstr("cpu_tokens_per_s"));
  r = Qwen3Rates();
  r.gpu_flops_per_s = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ComputePrefillSwitch(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Qwen3Rates();
  r.expert_bytes = 0;
  EXPECT_THAT(ComputePrefillSwitch(r).status().message(), HasSubstr("expert_bytes"));
}

}  // namespace
}  // namespace moesplit::plan
