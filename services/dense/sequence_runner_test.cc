#include "services/dense/sequence_runner.h"

#include <cstdio>

#include "common/model/testing/tiny_model.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

// A tiny model (head_dim 32, for the GPU attention) and its in-process experts.
class SequenceRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::testing::TinyModelOptions o;
    o.head_dim = 32;
    auto m = model::testing::MakeTinyModel(o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    experts_ = std::make_unique<model::InProcessExperts>(model::ExpertStore(model_), nullptr);
  }
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<model::InProcessExperts> experts_;
};

TEST_F(SequenceRunnerTest, ChoosesTheBackend) {
  RunnerOptions ro;
  ro.n_ctx = 32;
  ro.backend = "tpu";
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.backend = "cpu";
  ro.kv_type = "q5_0";
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.kv_type = "f16";
  ro.expert_cache_slots = -2;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.expert_cache_slots = -1;
  ro.prefill_stream_min_tokens = -5;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.prefill_stream_min_tokens = -1;
  auto cpu = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
  std::vector<float> logits;
  const int32_t tokens[3] = {1, 2, 3};
  ASSERT_TRUE((*cpu)->Eval(tokens, model::LogitsMode::kLast, &logits).ok());
  EXPECT_EQ((*cpu)->n_past(), 3);
  EXPECT_EQ(logits.size(), static_cast<size_t>(model_->hparams().n_vocab));
  (*cpu)->Clear();
  EXPECT_EQ((*cpu)->n_past(), 0);

  // auto: the GPU when usable, else the CPU; both evaluate the same tokens.
  ro.backend = "auto";
  auto any = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(any.ok()) << any.status();
  std::vector<float> again;
  ASSERT_TRUE((*any)->Eval(tokens, model::LogitsMode::kLast, &again).ok());
  ASSERT_EQ(again.size(), logits.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    err += (again[i] - logits[i]) * double(again[i] - logits[i]);
    ref += double(logits[i]) * logits[i];
  }
  EXPECT_LE(err / ref, 1e-4) << (*any)->name();
  const GpuRunnerInfo info = (*any)->gpu_info();
  std::printf("runner %s: expert cache %s (%lld slots), streamed prefill from %lld tokens (%s)\n",
              (*any)->name().c_str(), info.expert_cache ? "on" : "off",
              static_cast<long long>(info.cache_slots),
              static_cast<long long>(info.stream_min_tokens), info.stream_note.c_str());
  if ((*any)->name() == "cpu") {
    EXPECT_FALSE(info.expert_cache);
  } else {
    // The automatic cache takes what the budget leaves (a tiny model: all of
    // its experts fit), and the switch-over was measured or said why not.
    EXPECT_TRUE(info.expert_cache);
    EXPECT_GT(info.cache_slots, 0);
    EXPECT_FALSE(info.stream_note.empty());
    EXPECT_EQ(info.resident_per_layer.size(), static_cast<size_t>(model_->n_layer()));
  }

  ro.backend = "cuda";
  auto gpu = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  if ((*any)->name() == "cpu") {
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable) << gpu.status();
  } else {
    EXPECT_TRUE(gpu.ok()) << gpu.status();
  }
}

// Several sequences on one runner: the GPU runner holds n_parallel KV caches
// and batches them; each slot gets the logits it gets alone.
TEST_F(SequenceRunnerTest, SlotsBatchLikeSeparateSequences) {
  RunnerOptions ro;
  ro.n_ctx = 32;
  ro.n_parallel = 0;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.n_parallel = 2;
  // No GPU expert cache: it learns between the runs below, moving experts
  // from the CPU's kernels to the GPU's (equal within rounding, not bits).
  ro.expert_cache_slots = 0;
  auto r = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  // The CPU runner keeps one slot (the engine batches CPU sequences itself).
  EXPECT_EQ((*r)->slots(), (*r)->name() == "cpu" ? 1 : 2) << (*r)->name();
  const int32_t a[3] = {1, 2, 3}, b[2] = {7, 8};
  std::vector<float> la, lb, ga, gb;
  ASSERT_TRUE((*r)->Eval(a, model::LogitsMode::kLast, &la).ok());
  (*r)->Clear(0);
  ASSERT_TRUE((*r)->Eval(b, model::LogitsMode::kLast, &lb).ok());
  (*r)->Clear(0);
  const int last = (*r)->slots() - 1;
  const RunnerEntry both[2] = {{0, a, model::LogitsMode::kLast, &ga},
                               {last, b, model::LogitsMode::kLast, &gb}};
  if (last == 1) {
    ASSERT_TRUE((*r)->EvalBatch(both).ok());
    EXPECT_EQ(ga, la);
    EXPECT_EQ(gb, lb);
    EXPECT_EQ((*r)->n_past(0), 3);
    EXPECT_EQ((*r)->n_past(1), 2);
  }
  const RunnerEntry out_of_range[1] = {{(*r)->slots(), a, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(out_of_range).code(), absl::StatusCode::kInvalidArgument);
  const RunnerEntry twice[2] = {{0, a, model::LogitsMode::kNone, nullptr},
                                {0, b, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(twice).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit::dense
