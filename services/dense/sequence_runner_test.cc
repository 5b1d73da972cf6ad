#include "services/dense/sequence_runner.h"

#include <cstdio>

#include "common/model/testing/tiny_model.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

// A tiny model (head_dim 32, for the GPU attention) and its in-process experts.
// Starts slot 0 for the whole context and evaluates `tokens` there.
absl::Status Eval(SequenceRunner& r, absl::Span<const int32_t> tokens, std::vector<float>* logits) {
  if (absl::Status s = r.Start(0, 32); !s.ok()) return s;
  const RunnerEntry e[1] = {{0, tokens, model::LogitsMode::kLast, logits}};
  return r.EvalBatch(e);
}

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
  ASSERT_TRUE(Eval(**cpu, tokens, &logits).ok());
  EXPECT_EQ((*cpu)->n_past(0), 3);
  EXPECT_EQ(logits.size(), static_cast<size_t>(model_->hparams().n_vocab));
  (*cpu)->Release(0);
  ASSERT_TRUE((*cpu)->Start(0, 32).ok());
  EXPECT_EQ((*cpu)->n_past(0), 0);
  (*cpu)->Release(0);

  // auto: the GPU when usable, else the CPU; both evaluate the same tokens.
  ro.backend = "auto";
  auto any = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(any.ok()) << any.status();
  std::vector<float> again;
  ASSERT_TRUE(Eval(**any, tokens, &again).ok());
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
  // CPU and GPU runners alike hold n_parallel slots.
  EXPECT_EQ((*r)->slots(), 2) << (*r)->name();
  const int32_t a[3] = {1, 2, 3}, b[2] = {7, 8};
  std::vector<float> la, lb, ga, gb;
  ASSERT_TRUE(Eval(**r, a, &la).ok());
  (*r)->Release(0);
  ASSERT_TRUE(Eval(**r, b, &lb).ok());
  (*r)->Release(0);
  ASSERT_TRUE((*r)->Start(0, 32).ok());
  ASSERT_TRUE((*r)->Start(1, 8).ok());
  EXPECT_EQ((*r)->Start(1, 8).code(), absl::StatusCode::kFailedPrecondition);
  const RunnerEntry both[2] = {{0, a, model::LogitsMode::kLast, &ga},
                               {1, b, model::LogitsMode::kLast, &gb}};
  ASSERT_TRUE((*r)->EvalBatch(both).ok());
  EXPECT_EQ(ga, la);
  EXPECT_EQ(gb, lb);
  EXPECT_EQ((*r)->n_past(0), 3);
  EXPECT_EQ((*r)->n_past(1), 2);
  const RunnerEntry out_of_range[1] = {{(*r)->slots(), a, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(out_of_range).code(), absl::StatusCode::kInvalidArgument);
  const RunnerEntry twice[2] = {{0, a, model::LogitsMode::kNone, nullptr},
                                {0, b, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(twice).code(), absl::StatusCode::kInvalidArgument);
  (*r)->Release(1);
  const RunnerEntry released[1] = {{1, b, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(released).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->n_past(0), 3);  // the refused steps changed nothing
}

// The runner owns the state accounting the engine's KV gauges show.
TEST_F(SequenceRunnerTest, ReportsTheStateItHolds) {
  RunnerOptions ro;
  ro.backend = "cpu";
  ro.n_ctx = 32;
  ro.n_parallel = 3;
  auto r = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t full = model::SequenceState::BytesFor(model_->hparams(), 32);
  EXPECT_EQ((*r)->state_bytes_capacity(), 3 * full);
  EXPECT_EQ((*r)->state_bytes_used(), 0u);
  ASSERT_TRUE((*r)->Start(2, 8).ok());
  EXPECT_EQ((*r)->capacity(2), 8);
  EXPECT_EQ((*r)->state_bytes_used(), model::SequenceState::BytesFor(model_->hparams(), 8));
  EXPECT_EQ((*r)->Start(0, 33).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->Start(3, 8).code(), absl::StatusCode::kInvalidArgument);
  (*r)->Release(2);
  (*r)->Release(2);  // twice: a no-op
  EXPECT_EQ((*r)->state_bytes_used(), 0u);
}

}  // namespace
}  // namespace moesplit::dense
